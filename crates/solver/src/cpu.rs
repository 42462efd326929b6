//! The CPU backend: Chronopoulos–Gear PCG on host vectors with rayon.
//!
//! Every reduction is deterministic: rows are split into chunks of a fixed size ([`CHUNK`]),
//! each chunk sums its rows in order, and the chunk sums are added in chunk order, so results
//! do not depend on the number of threads. The SpMV `w = A u` and the three inner products of an
//! iteration are one parallel pass over the rows.
//!
//! Construction refuses a matrix with a non-positive diagonal entry (not SPD, whatever the
//! preconditioner) and scales a badly scaled system by powers of two ([`crate::scaling`]): the
//! backend then iterates on borrowed data when no scaling is needed (bit-identical to an
//! unscaled solve), and on scaled copies otherwise.
use std::borrow::Cow;

use autopcg_sparse::CsrMatrix;
use rayon::prelude::*;

use crate::backend::{Dots, GearScalars, Halt, IterRecord, PcgBackend};
use crate::scaling::{first_bad_diagonal, inf_norm, ScaleFactors};
use crate::{PcgError, Preconditioner};

/// Rows per reduction chunk. Fixed, so that sums do not depend on the thread count.
pub const CHUNK: usize = 4096;

/// Chronopoulos–Gear PCG state on the host.
#[derive(Debug)]
pub struct CpuBackend<'a> {
    /// A, b and the preconditioner, scaled by `scale` (borrowed when it is the identity).
    a: Cow<'a, CsrMatrix>,
    precond: Cow<'a, Preconditioner>,
    b: Cow<'a, [f64]>,
    scale: ScaleFactors,
    /// ||A||_inf of the scaled matrix, computed on first use.
    a_norm: Option<f64>,
    /// The recurrence's vectors; x is the iterate of the scaled system.
    cg: HostVectors,
    work: Vec<f64>,
    rec: HostRecurrence,
}

/// The vectors of the recurrence on the host, all of one length: the iterate x, the residual
/// r, u = M^-1 r, w = A u, the search direction p and s = A p. Both CPU backends keep them
/// alike (the block backend one set per block).
#[derive(Debug)]
pub(crate) struct HostVectors {
    pub(crate) x: Vec<f64>,
    pub(crate) r: Vec<f64>,
    pub(crate) u: Vec<f64>,
    pub(crate) w: Vec<f64>,
    pub(crate) p: Vec<f64>,
    pub(crate) s: Vec<f64>,
}

impl HostVectors {
    /// The iterate `x` and zero vectors of its length.
    pub(crate) fn new(x: Vec<f64>) -> HostVectors {
        let n = x.len();
        HostVectors {
            x,
            r: vec![0.0; n],
            u: vec![0.0; n],
            w: vec![0.0; n],
            p: vec![0.0; n],
            s: vec![0.0; n],
        }
    }

    /// `p = u + beta p; s = w + beta s; x += alpha p; r -= alpha s`, element by element in
    /// parallel over chunks of [`CHUNK`] rows (no reduction, so the result does not depend on
    /// the split).
    pub(crate) fn update(&mut self, alpha: f64, beta: f64) {
        self.p
            .par_chunks_mut(CHUNK)
            .zip(self.s.par_chunks_mut(CHUNK))
            .zip(self.x.par_chunks_mut(CHUNK))
            .zip(self.r.par_chunks_mut(CHUNK))
            .zip(self.u.par_chunks(CHUNK))
            .zip(self.w.par_chunks(CHUNK))
            .for_each(|(((((p, s), x), r), u), w)| {
                for k in 0..p.len() {
                    let pk = u[k] + beta * p[k];
                    let sk = w[k] + beta * s[k];
                    p[k] = pk;
                    s[k] = sk;
                    x[k] += alpha * pk;
                    r[k] -= alpha * sk;
                }
            });
    }
}

/// The recurrence of a host backend: the scalars for the next update, the iteration the next
/// record belongs to, and the records not yet polled. Both CPU backends keep it alike.
#[derive(Debug, Default)]
pub(crate) struct HostRecurrence {
    /// Scalars for the next update; `None` before `start` or after a halt.
    scalars: Option<GearScalars>,
    /// Iterations since the last `start`.
    iteration: usize,
    pending: Vec<IterRecord>,
}

impl HostRecurrence {
    /// Starts over at iteration 0, dropping any record not yet polled.
    pub(crate) fn restart(&mut self) {
        self.iteration = 0;
        self.pending.clear();
    }

    /// Records the dots of the initial residual, the start of the recurrence.
    pub(crate) fn record_start(&mut self, dots: Dots) {
        self.record(dots, GearScalars::start(dots));
    }

    /// Scalars for the next update; `None` before the start, or frozen after a halt, when the
    /// steps change nothing.
    pub(crate) fn scalars(&self) -> Option<GearScalars> {
        self.scalars
    }

    /// Alpha and beta of the next update of x, r, p and s; `None` when the scalars are.
    pub(crate) fn update_coefficients(&self) -> Option<(f64, f64)> {
        self.scalars.map(|sc| (sc.alpha, sc.beta))
    }

    /// Counts the update of one iteration.
    pub(crate) fn next_iteration(&mut self) {
        self.iteration += 1;
    }

    /// Records this iteration's dots and what the recurrence made of them.
    pub(crate) fn record(&mut self, dots: Dots, outcome: Result<GearScalars, Halt>) {
        self.scalars = outcome.ok();
        self.pending.push(IterRecord {
            iteration: self.iteration,
            dots,
            outcome,
        });
    }

    /// The records since the last poll.
    pub(crate) fn poll(&mut self) -> Vec<IterRecord> {
        std::mem::take(&mut self.pending)
    }

    /// Stops the recurrence (the solution was reset) and drops the records not yet polled.
    pub(crate) fn stop(&mut self) {
        self.scalars = None;
        self.pending.clear();
    }
}

impl<'a> CpuBackend<'a> {
    /// A backend for `A x = b` with preconditioner `precond` (built for `a`), starting from
    /// `x0` (zero when `None`). Checks that `A` is square, that `b`, `x0` and the
    /// preconditioner have its size, and that its diagonal is positive
    /// ([`PcgError::BadDiagonal`] otherwise). When `A` or `b` is badly scaled, solves the
    /// system scaled by powers of two ([`ScaleFactors::for_system`]), with the preconditioner
    /// scaled to match; [`CpuBackend::x`] and the solution are those of the original system.
    pub fn new(
        a: &'a CsrMatrix,
        precond: &'a Preconditioner,
        b: &'a [f64],
        x0: Option<&[f64]>,
    ) -> Result<Self, PcgError> {
        let f = ScaleFactors::for_system(a, b);
        Self::with_scaling(
            f.scale_matrix(a),
            f.scale_preconditioner(precond),
            f.scale_rhs(b),
            x0.map(|x| f.scale_solution(x)),
            f,
        )
    }

    /// A backend for a system already scaled by `scale`: `a`, `precond`, `b` and `x0` are
    /// those of the scaled system (`2^matrix_exp A`, its preconditioner, `2^rhs_exp b` and
    /// `2^(rhs_exp - matrix_exp) x0`); the solution and the reported norms are converted back.
    /// The checks are those of [`CpuBackend::new`].
    pub fn with_scaling(
        a: Cow<'a, CsrMatrix>,
        precond: Cow<'a, Preconditioner>,
        b: Cow<'a, [f64]>,
        x0: Option<Cow<'_, [f64]>>,
        scale: ScaleFactors,
    ) -> Result<Self, PcgError> {
        let n = a.nrows();
        if a.ncols() != n {
            return Err(PcgError::Dimension(format!(
                "the matrix must be square, got {} x {}",
                n,
                a.ncols()
            )));
        }
        if b.len() != n {
            return Err(PcgError::Dimension(format!(
                "right-hand side has length {}, the matrix has {n} rows",
                b.len()
            )));
        }
        if let Some(x0) = &x0 {
            if x0.len() != n {
                return Err(PcgError::Dimension(format!(
                    "initial guess has length {}, the matrix has {n} rows",
                    x0.len()
                )));
            }
        }
        if let Some(m) = precond.dim() {
            if m != n {
                return Err(PcgError::Dimension(format!(
                    "preconditioner built for {m} rows, the matrix has {n}"
                )));
            }
        }
        if let Some((row, value)) = first_bad_diagonal(&a) {
            return Err(PcgError::BadDiagonal {
                row,
                value: crate::scaling::ldexp(value, -scale.matrix_exp),
                precond: precond.kind_name().to_string(),
            });
        }
        let work = vec![0.0; precond.work_len()];
        Ok(CpuBackend {
            a,
            precond,
            b,
            scale,
            a_norm: None,
            cg: HostVectors::new(x0.map_or_else(|| vec![0.0; n], Cow::into_owned)),
            work,
            rec: HostRecurrence::default(),
        })
    }

    /// The current iterate of the original system (without copying when the system is not
    /// scaled).
    pub fn x(&self) -> Cow<'_, [f64]> {
        if self.scale.solution_exp() == 0 {
            return Cow::Borrowed(&self.cg.x);
        }
        let mut x = self.cg.x.clone();
        self.scale.unscale_solution(&mut x);
        Cow::Owned(x)
    }

    /// The powers of two the system is solved scaled by ([`ScaleFactors::IDENTITY`] for an
    /// ordinary system).
    pub fn scale_factors(&self) -> ScaleFactors {
        self.scale
    }

    /// Consumes the backend, returning the current iterate (of the original system).
    pub fn into_solution(self) -> Vec<f64> {
        let mut x = self.cg.x;
        self.scale.unscale_solution(&mut x);
        x
    }

    /// `w = A u` and the three dots, in one pass.
    fn spmv_dots(&mut self) -> Dots {
        let (ptr, idx, val) = (self.a.indptr(), self.a.indices(), self.a.data());
        let (u, r) = (&self.cg.u, &self.cg.r);
        let partial: Vec<[f64; 3]> = self
            .cg
            .w
            .par_chunks_mut(CHUNK)
            .enumerate()
            .map(|(c, wc)| {
                let base = c * CHUNK;
                let (mut g, mut d, mut rr) = (0.0, 0.0, 0.0);
                for (k, wi) in wc.iter_mut().enumerate() {
                    let i = base + k;
                    let (lo, hi) = (ptr[i] as usize, ptr[i + 1] as usize);
                    let mut acc = 0.0;
                    for q in lo..hi {
                        acc += val[q] * u[idx[q] as usize];
                    }
                    *wi = acc;
                    g += r[i] * u[i];
                    d += acc * u[i];
                    rr += r[i] * r[i];
                }
                [g, d, rr]
            })
            .collect();
        let mut t = [0.0; 3];
        for p in &partial {
            t[0] += p[0];
            t[1] += p[1];
            t[2] += p[2];
        }
        Dots {
            gamma: t[0],
            delta: t[1],
            rr: t[2],
        }
    }
}

/// Deterministic chunked sum of `f(i)` over `0..n`.
fn chunked_sum(n: usize, f: impl Fn(usize) -> f64 + Sync) -> f64 {
    let partial: Vec<f64> = (0..n.div_ceil(CHUNK))
        .into_par_iter()
        .map(|c| {
            let mut s = 0.0;
            for i in c * CHUNK..((c + 1) * CHUNK).min(n) {
                s += f(i);
            }
            s
        })
        .collect();
    partial.iter().sum()
}

impl PcgBackend for CpuBackend<'_> {
    fn n(&self) -> usize {
        self.cg.x.len()
    }

    fn rhs_norm(&mut self) -> Result<f64, PcgError> {
        let b = &self.b[..];
        Ok(chunked_sum(b.len(), |i| b[i] * b[i]).sqrt())
    }

    fn start(&mut self) -> Result<(), PcgError> {
        self.a.spmv(&self.cg.x, &mut self.cg.r);
        self.cg
            .r
            .par_iter_mut()
            .with_min_len(CHUNK)
            .zip(self.b[..].par_iter())
            .for_each(|(ri, bi)| *ri = bi - *ri);
        self.precond
            .apply(&self.cg.r, &mut self.cg.u, &mut self.work);
        self.cg.p.fill(0.0);
        self.cg.s.fill(0.0);
        self.rec.restart();
        let dots = self.spmv_dots();
        self.rec.record_start(dots);
        Ok(())
    }

    fn update_vectors(&mut self) -> Result<(), PcgError> {
        let Some((alpha, beta)) = self.rec.update_coefficients() else {
            // Before start, or frozen after a halt: nothing changes.
            return Ok(());
        };
        self.cg.update(alpha, beta);
        self.rec.next_iteration();
        Ok(())
    }

    fn apply_preconditioner(&mut self) -> Result<(), PcgError> {
        if self.rec.scalars().is_some() {
            self.precond
                .apply(&self.cg.r, &mut self.cg.u, &mut self.work);
        }
        Ok(())
    }

    fn spmv_reduce_advance(&mut self) -> Result<(), PcgError> {
        let Some(sc) = self.rec.scalars() else {
            return Ok(());
        };
        let dots = self.spmv_dots();
        self.rec.record(dots, sc.advance(dots));
        Ok(())
    }

    fn poll(&mut self) -> Result<Vec<IterRecord>, PcgError> {
        Ok(self.rec.poll())
    }

    fn true_residual_norm(&mut self) -> Result<f64, PcgError> {
        let (ptr, idx, val) = (self.a.indptr(), self.a.indices(), self.a.data());
        let (x, b) = (&self.cg.x, &self.b[..]);
        Ok(chunked_sum(x.len(), |i| {
            let mut ax = 0.0;
            for q in ptr[i] as usize..ptr[i + 1] as usize {
                ax += val[q] * x[idx[q] as usize];
            }
            let d = b[i] - ax;
            d * d
        })
        .sqrt())
    }

    fn matrix_norm(&mut self) -> Result<f64, PcgError> {
        Ok(*self.a_norm.get_or_insert_with(|| inf_norm(&self.a)))
    }

    fn solution_norm(&mut self) -> Result<f64, PcgError> {
        let x = &self.cg.x;
        Ok(chunked_sum(x.len(), |i| x[i] * x[i]).sqrt())
    }

    fn norm_factor(&self) -> f64 {
        self.scale.norm_factor()
    }

    fn solution(&mut self) -> Result<Vec<f64>, PcgError> {
        Ok(self.x().into_owned())
    }

    fn zero_solution(&mut self) -> Result<(), PcgError> {
        self.cg.x.fill(0.0);
        self.rec.stop();
        Ok(())
    }
}
