//! Multi-block Chronopoulos–Gear PCG on the host: the matrix split into row blocks, each block
//! holding its rows' slices of every vector, its local and halo parts and its own
//! preconditioner, talking to the others only through a [`Transport`].
//!
//! Per iteration: the four-vector update and the preconditioner are block-local; the multiply
//! `w = A u` packs each block's `u` entries its neighbours need, exchanges them, multiplies the
//! local and halo parts, and the three dots are one all-reduce of the blocks' partial sums.
//! The true residual (at tolerance checks) exchanges `x` the same way. The driver is the
//! unsplit one ([`crate::pcg()`]), so the stopping rule, residual replacement and stagnation
//! are the same.
use autopcg_sparse::blocks::{BlockSplit, HaloBlock};
use autopcg_sparse::CsrMatrix;
use rayon::prelude::*;

use super::transport::{InProcess, Transport};
use super::{check_block_system, BlockPrecond};
use crate::backend::{Dots, IterRecord, PcgBackend};
use crate::cpu::{HostRecurrence, HostVectors, CHUNK};
use crate::scaling::ScaleFactors;
use crate::{PcgError, PrecondKind, Preconditioner};

/// One block's slices of every vector and its preconditioner.
#[derive(Debug)]
struct BlockVecs {
    precond: Preconditioner,
    work: Vec<f64>,
    b: Vec<f64>,
    cg: HostVectors,
}

/// Which vector a halo exchange carries.
#[derive(Debug, Clone, Copy)]
enum Carried {
    U,
    X,
}

/// Multi-block PCG state on the host, over any transport of host vectors.
#[derive(Debug)]
pub struct BlockCpuBackend<T = InProcess> {
    split: BlockSplit,
    vecs: Vec<BlockVecs>,
    sends: Vec<Vec<f64>>,
    halos: Vec<Vec<f64>>,
    transport: T,
    scale: ScaleFactors,
    a_norm: Option<f64>,
    rec: HostRecurrence,
}

impl BlockCpuBackend<InProcess> {
    /// A backend for `A x = b` split by `split` (of the matrix `a` it was built from), with the
    /// preconditioner `kind` built per block ([`BlockPrecond::build`]), starting from `x0`
    /// (zero when `None`), communicating in one address space. Checks sizes and that the
    /// diagonal is positive, like [`crate::CpuBackend::new`]; does not scale (see
    /// [`super::solve_blocks_cpu`], which does).
    pub fn new(
        a: &CsrMatrix,
        split: BlockSplit,
        kind: &PrecondKind,
        b: &[f64],
        x0: Option<&[f64]>,
    ) -> Result<Self, PcgError> {
        Self::with_transport(
            a,
            split,
            kind,
            b,
            x0,
            ScaleFactors::IDENTITY,
            InProcess::default(),
        )
    }
}

impl<T: Transport<Vector = Vec<f64>, Partial = [f64; 3]>> BlockCpuBackend<T> {
    /// A backend for the system already scaled by `scale` (`a`, `b`, `x0` are those of the
    /// scaled system, `split` was built from `a`), communicating through `transport`.
    pub fn with_transport(
        a: &CsrMatrix,
        split: BlockSplit,
        kind: &PrecondKind,
        b: &[f64],
        x0: Option<&[f64]>,
        scale: ScaleFactors,
        transport: T,
    ) -> Result<Self, PcgError> {
        check_block_system(a, &split, b, x0, &scale, &kind.to_string())?;
        let preconds = BlockPrecond::build(a, &split, kind)?;
        let vecs = split
            .blocks()
            .iter()
            .zip(preconds.into_blocks())
            .map(|(blk, precond)| {
                let m = blk.nrows();
                let rows = blk.rows.clone();
                BlockVecs {
                    work: vec![0.0; precond.work_len()],
                    precond,
                    b: b[rows.clone()].to_vec(),
                    cg: HostVectors::new(x0.map_or_else(|| vec![0.0; m], |x| x[rows].to_vec())),
                }
            })
            .collect();
        let sends = split
            .blocks()
            .iter()
            .map(|b| vec![0.0; b.send_len()])
            .collect();
        let halos = split
            .blocks()
            .iter()
            .map(|b| vec![0.0; b.halo_len()])
            .collect();
        Ok(BlockCpuBackend {
            split,
            vecs,
            sends,
            halos,
            transport,
            scale,
            a_norm: None,
            rec: HostRecurrence::default(),
        })
    }

    /// The block split.
    pub fn split(&self) -> &BlockSplit {
        &self.split
    }

    /// The transport (for its counters).
    pub fn transport(&self) -> &T {
        &self.transport
    }

    /// The current iterate of the original system, joined from the blocks.
    pub fn x(&self) -> Vec<f64> {
        let mut x: Vec<f64> = self
            .vecs
            .iter()
            .flat_map(|v| v.cg.x.iter().copied())
            .collect();
        self.scale.unscale_solution(&mut x);
        x
    }

    /// Packs the carried vector of every block and exchanges the halos.
    fn exchange(&mut self, which: Carried) -> Result<(), PcgError> {
        self.split
            .blocks()
            .par_iter()
            .zip(&self.vecs)
            .zip(&mut self.sends)
            .for_each(|((blk, v), send)| {
                let src = match which {
                    Carried::U => &v.cg.u,
                    Carried::X => &v.cg.x,
                };
                blk.pack(src, send);
            });
        self.transport
            .exchange(self.split.messages(), &self.sends, &mut self.halos)
    }

    /// Sums per-block partials with one all-reduce.
    fn reduce(&mut self, mut partials: Vec<[f64; 3]>) -> Result<[f64; 3], PcgError> {
        self.transport.all_reduce(&mut partials)?;
        partials
            .first()
            .copied()
            .ok_or_else(|| PcgError::Backend("no blocks".into()))
    }

    /// `w = A u` (after the exchange of u) and the three dots, one all-reduce.
    fn spmv_dots(&mut self) -> Result<Dots, PcgError> {
        self.exchange(Carried::U)?;
        let partials: Vec<[f64; 3]> = self
            .split
            .blocks()
            .par_iter()
            .zip(&mut self.vecs)
            .zip(&self.halos)
            .map(|((blk, v), h)| {
                blk.spmv(&v.cg.u, h, &mut v.cg.w);
                let (r, u, w) = (&v.cg.r, &v.cg.u, &v.cg.w);
                let mut t = [0.0; 3];
                for c in 0..u.len().div_ceil(CHUNK) {
                    let (mut g, mut d, mut rr) = (0.0, 0.0, 0.0);
                    for i in c * CHUNK..((c + 1) * CHUNK).min(u.len()) {
                        g += r[i] * u[i];
                        d += w[i] * u[i];
                        rr += r[i] * r[i];
                    }
                    t[0] += g;
                    t[1] += d;
                    t[2] += rr;
                }
                t
            })
            .collect();
        let t = self.reduce(partials)?;
        Ok(Dots {
            gamma: t[0],
            delta: t[1],
            rr: t[2],
        })
    }

    /// A global sum of squares of a per-block quantity.
    fn sum_squares(&mut self, f: impl Fn(&BlockVecs) -> &[f64] + Sync) -> Result<f64, PcgError> {
        let partials = self
            .vecs
            .par_iter()
            .map(|v| {
                let x = f(v);
                [chunked_sum(x.len(), |i| x[i] * x[i]), 0.0, 0.0]
            })
            .collect();
        Ok(self.reduce(partials)?[0])
    }
}

impl<T: Transport<Vector = Vec<f64>, Partial = [f64; 3]>> PcgBackend for BlockCpuBackend<T> {
    fn n(&self) -> usize {
        self.split.partition().nrows()
    }

    fn rhs_norm(&mut self) -> Result<f64, PcgError> {
        Ok(self.sum_squares(|v| &v.b)?.sqrt())
    }

    fn start(&mut self) -> Result<(), PcgError> {
        self.exchange(Carried::X)?;
        self.split
            .blocks()
            .par_iter()
            .zip(&mut self.vecs)
            .zip(&self.halos)
            .for_each(|((blk, v), h)| {
                blk.spmv(&v.cg.x, h, &mut v.cg.r);
                for (ri, bi) in v.cg.r.iter_mut().zip(&v.b) {
                    *ri = bi - *ri;
                }
                v.precond.apply(&v.cg.r, &mut v.cg.u, &mut v.work);
                v.cg.p.fill(0.0);
                v.cg.s.fill(0.0);
            });
        self.rec.restart();
        let dots = self.spmv_dots()?;
        self.rec.record_start(dots);
        Ok(())
    }

    fn update_vectors(&mut self) -> Result<(), PcgError> {
        let Some((alpha, beta)) = self.rec.update_coefficients() else {
            return Ok(());
        };
        self.vecs
            .par_iter_mut()
            .for_each(|v| v.cg.update(alpha, beta));
        self.rec.next_iteration();
        Ok(())
    }

    fn apply_preconditioner(&mut self) -> Result<(), PcgError> {
        if self.rec.scalars().is_some() {
            self.vecs
                .par_iter_mut()
                .for_each(|v| v.precond.apply(&v.cg.r, &mut v.cg.u, &mut v.work));
        }
        Ok(())
    }

    fn spmv_reduce_advance(&mut self) -> Result<(), PcgError> {
        let Some(sc) = self.rec.scalars() else {
            return Ok(());
        };
        let dots = self.spmv_dots()?;
        self.rec.record(dots, sc.advance(dots));
        Ok(())
    }

    fn poll(&mut self) -> Result<Vec<IterRecord>, PcgError> {
        Ok(self.rec.poll())
    }

    fn true_residual_norm(&mut self) -> Result<f64, PcgError> {
        self.exchange(Carried::X)?;
        let partials = self
            .split
            .blocks()
            .par_iter()
            .zip(&self.vecs)
            .zip(&self.halos)
            .map(|((blk, v), h)| {
                let mut ax = vec![0.0; v.cg.x.len()];
                blk.spmv(&v.cg.x, h, &mut ax);
                let b = &v.b;
                [
                    chunked_sum(ax.len(), |i| (b[i] - ax[i]) * (b[i] - ax[i])),
                    0.0,
                    0.0,
                ]
            })
            .collect();
        Ok(self.reduce(partials)?[0].sqrt())
    }

    fn matrix_norm(&mut self) -> Result<f64, PcgError> {
        if let Some(v) = self.a_norm {
            return Ok(v);
        }
        let v = self
            .split
            .blocks()
            .par_iter()
            .map(block_inf_norm)
            .reduce(|| 0.0, f64::max);
        self.a_norm = Some(v);
        Ok(v)
    }

    fn solution_norm(&mut self) -> Result<f64, PcgError> {
        Ok(self.sum_squares(|v| &v.cg.x)?.sqrt())
    }

    fn norm_factor(&self) -> f64 {
        self.scale.norm_factor()
    }

    fn solution(&mut self) -> Result<Vec<f64>, PcgError> {
        Ok(self.x())
    }

    fn zero_solution(&mut self) -> Result<(), PcgError> {
        self.vecs.iter_mut().for_each(|v| v.cg.x.fill(0.0));
        self.rec.stop();
        Ok(())
    }
}

/// Sum of `f(i)` over `0..n` in chunks of [`CHUNK`] (each summed in order, then the chunk sums
/// in order): the grouping of the unsplit backend's sums, so that a single block rounds its
/// reductions exactly as the unsplit solver does.
fn chunked_sum(n: usize, f: impl Fn(usize) -> f64) -> f64 {
    let partial: Vec<f64> = (0..n.div_ceil(CHUNK))
        .map(|c| {
            (c * CHUNK..((c + 1) * CHUNK).min(n))
                .map(&f)
                .fold(0.0, |s, v| s + v)
        })
        .collect();
    partial.iter().sum()
}

/// Largest absolute row sum of a block's rows (local and halo parts).
fn block_inf_norm(blk: &HaloBlock) -> f64 {
    (0..blk.nrows())
        .map(|i| {
            let a: f64 = blk.local.row(i).1.iter().map(|v| v.abs()).sum();
            let h: f64 = blk.halo.row(i).1.iter().map(|v| v.abs()).sum();
            a + h
        })
        .fold(0.0, f64::max)
}
