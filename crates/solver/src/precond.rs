//! Preconditioners as host data any backend can upload: none, Jacobi, and the SSOR approximate
//! inverse (SSOR-AI) of first or second order, in factored or explicit-product form.
//!
//! # SSOR-AI
//!
//! Split the SPD matrix as `A = L + D + L^T` (`L` strictly lower, `D` diagonal). The SSOR
//! preconditioner with relaxation `w` in (0, 2) is
//!
//! ```text
//! M = 1/(w(2-w)) (D + wL) D^-1 (D + wL^T).
//! ```
//!
//! With `X = w L D^-1` (strictly lower, so nilpotent): `D + wL = (I + X) D` and
//! `D + wL^T = D (I + X^T)`, hence
//!
//! ```text
//! M^-1 = w(2-w) (I + X)^-T D^-1 (I + X)^-1.
//! ```
//!
//! The triangular inverse `(I + X)^-1 = I - X + X^2 - ...` (a finite Neumann series since `X` is
//! nilpotent) is truncated to `K = I - X` (first order) or `K = I - X + X^2` (second order), so
//!
//! ```text
//! M^-1 ~ K^T diag(w(2-w)/d) K,
//! ```
//!
//! which is symmetric positive definite for any truncation: `K` is unit lower triangular, hence
//! nonsingular, and the middle factor is a positive diagonal. Applying it is sparse
//! matrix-vector work only: three steps `t = K r; t = s .* t; z = K^T t` with `K^T` stored
//! explicitly ([`SsorForm::Factored`]), or one SpMV with the product `K^T diag(s) K`
//! ([`SsorForm::Explicit`]). The scalar `w(2-w)` does not change the CG iterates; it is kept so
//! that the full series reproduces SSOR exactly. The construction follows Helfenstein and Koko,
//! "Parallel preconditioned conjugate gradient algorithm on GPU" (first order), and its
//! second-order variant.
//!
//! The products (`X^2` and `K^T diag(s) K`) are built row-parallel with a hash accumulator per
//! row, summing the terms of each entry in a fixed order. The explicit product sums the terms of
//! `M_ij` and of `M_ji` in the same order with the same rounding, so it is exactly symmetric.
use std::fmt;
use std::str::FromStr;

use autopcg_sparse::CsrMatrix;
use rayon::prelude::*;

use crate::PcgError;

/// How the SSOR-AI preconditioner is applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum SsorForm {
    /// Three steps: `t = K r; t = diag(s) t; z = K^T t`, with `K` and `K^T` both stored.
    Factored,
    /// One SpMV with the stored product `M^-1 = K^T diag(s) K`.
    Explicit,
}

/// Which preconditioner to build.
///
/// The text form (used by the command line) is `none`, `jacobi`, `ssor-ai` (first order) or
/// `ssor-ai2` (second order); a suffix `-explicit` or `-factored` picks the SSOR form (factored
/// when absent). Parsing leaves omega automatic ([`auto_omega`]); the relaxation factor is not
/// part of the text form.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub enum PrecondKind {
    /// No preconditioning (`M = I`).
    None,
    /// Diagonal scaling (`M = D`).
    Jacobi,
    /// SSOR approximate inverse.
    SsorAi {
        /// Truncation order of the Neumann series: 1 or 2.
        order: u8,
        /// Relaxation factor, in (0, 2); `None` for [`auto_omega`] of the matrix, resolved when
        /// the preconditioner is built.
        omega: Option<f64>,
        /// Factored (three SpMV-like steps) or explicit product (one SpMV).
        form: SsorForm,
    },
}

impl PrecondKind {
    /// First-order SSOR-AI, factored, omega chosen for the matrix ([`auto_omega`]).
    pub fn ssor_ai() -> Self {
        PrecondKind::SsorAi {
            order: 1,
            omega: None,
            form: SsorForm::Factored,
        }
    }

    /// Second-order SSOR-AI, factored, omega chosen for the matrix ([`auto_omega`]).
    pub fn ssor_ai2() -> Self {
        PrecondKind::SsorAi {
            order: 2,
            omega: None,
            form: SsorForm::Factored,
        }
    }

    /// The kind with an automatic omega resolved for `a` ([`auto_omega`]); others unchanged.
    pub fn resolved_for(self, a: &CsrMatrix) -> Self {
        match self {
            PrecondKind::SsorAi {
                order,
                omega: None,
                form,
            } => PrecondKind::SsorAi {
                order,
                omega: Some(auto_omega(a)),
                form,
            },
            k => k,
        }
    }

    /// The relaxation factor when it is set (SSOR-AI with an explicit omega).
    pub fn omega(&self) -> Option<f64> {
        match self {
            PrecondKind::SsorAi { omega, .. } => *omega,
            _ => None,
        }
    }

    /// Returns the kind with its relaxation factor replaced (no effect on `None` and `Jacobi`).
    /// The value is checked when the preconditioner is built.
    pub fn with_omega(self, w: f64) -> Self {
        match self {
            PrecondKind::SsorAi { order, form, .. } => PrecondKind::SsorAi {
                order,
                omega: Some(w),
                form,
            },
            k => k,
        }
    }

    /// Returns the kind with its SSOR form replaced (no effect on `None` and `Jacobi`).
    pub fn with_form(self, f: SsorForm) -> Self {
        match self {
            PrecondKind::SsorAi { order, omega, .. } => PrecondKind::SsorAi {
                order,
                omega,
                form: f,
            },
            k => k,
        }
    }

    /// Checks the parameters: order 1 or 2, omega finite and in (0, 2).
    pub fn validate(&self) -> Result<(), PcgError> {
        if let PrecondKind::SsorAi { order, omega, .. } = *self {
            if order != 1 && order != 2 {
                return Err(PcgError::InvalidParameter(format!(
                    "SSOR-AI order must be 1 or 2, got {order}"
                )));
            }
            if let Some(omega) = omega {
                if !(omega.is_finite() && omega > 0.0 && omega < 2.0) {
                    return Err(PcgError::InvalidParameter(format!(
                        "SSOR relaxation factor omega must be in (0, 2), got {omega}"
                    )));
                }
            }
        }
        Ok(())
    }
}

/// The relaxation factor the `auto` rule picks for SSOR-AI on `a`:
/// `omega = min(1, 1 / ||D^-1/2 L D^-1/2||_inf)`, with L the strict lower triangle.
///
/// The preconditioner truncates the Neumann series of `(I + X)^-1`, `X = omega L D^-1`. In the
/// symmetrically scaled form `X~ = omega D^-1/2 L D^-1/2` (a similarity transform of X, giving
/// the same truncated preconditioner) the dropped terms are bounded while `||X~||_inf <= 1`.
/// On matrices whose scaled lower triangle has row sums far above 1 (shell and solid FEM
/// matrices with mixed degrees of freedom), `omega = 1` makes the truncated series a poor
/// inverse and PCG may stall; this rule shrinks omega just enough. For stencil matrices such as
/// the 3D 7-point Poisson matrix (row sums 0.5) it returns 1. Rows with a non-positive diagonal
/// are skipped (building the preconditioner reports them).
pub fn auto_omega(a: &CsrMatrix) -> f64 {
    let d = a.diagonal();
    let norm = (0..a.nrows())
        .into_par_iter()
        .map(|i| {
            let (cols, vals) = a.row(i);
            if d[i].is_nan() || d[i] <= 0.0 {
                return 0.0;
            }
            cols.iter()
                .zip(vals)
                .filter(|(&j, _)| (j as usize) < i && d[j as usize] > 0.0)
                .map(|(&j, &v)| v.abs() / (d[i] * d[j as usize]).sqrt())
                .sum::<f64>()
        })
        .reduce(|| 0.0, f64::max);
    if norm > 1.0 && norm.is_finite() {
        1.0 / norm
    } else {
        1.0
    }
}

impl fmt::Display for PrecondKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PrecondKind::None => f.write_str("none"),
            PrecondKind::Jacobi => f.write_str("jacobi"),
            PrecondKind::SsorAi { order, form, .. } => {
                f.write_str(if *order == 2 { "ssor-ai2" } else { "ssor-ai" })?;
                if *form == SsorForm::Explicit {
                    f.write_str("-explicit")?;
                }
                Ok(())
            }
        }
    }
}

impl FromStr for PrecondKind {
    type Err = PcgError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim().to_ascii_lowercase();
        let (base, form) = if let Some(b) = t.strip_suffix("-explicit") {
            (b, SsorForm::Explicit)
        } else if let Some(b) = t.strip_suffix("-factored") {
            (b, SsorForm::Factored)
        } else {
            (t.as_str(), SsorForm::Factored)
        };
        let order = match base {
            "none" if base.len() == t.len() => return Ok(PrecondKind::None),
            "jacobi" if base.len() == t.len() => return Ok(PrecondKind::Jacobi),
            "ssor-ai" | "ssor-ai1" => 1,
            "ssor-ai2" => 2,
            _ => {
                return Err(PcgError::InvalidParameter(format!(
                    "unknown preconditioner {s:?}: expected none, jacobi, ssor-ai or ssor-ai2 \
                     (optionally with -explicit or -factored)"
                )))
            }
        };
        Ok(PrecondKind::SsorAi {
            order,
            omega: None,
            form,
        })
    }
}

/// A built preconditioner, as host arrays any backend can upload.
#[derive(Debug, Clone, PartialEq)]
pub enum Preconditioner {
    /// `z = r`.
    None,
    /// `z_i = inv_diag_i r_i`.
    Jacobi {
        /// `1 / a_ii`.
        inv_diag: Vec<f64>,
    },
    /// SSOR-AI, factored: `z = K^T (inv_diag .* (K r))`.
    SsorFactored {
        /// The truncated inverse `K` (unit lower triangular).
        k: CsrMatrix,
        /// `K^T`, stored explicitly (unit upper triangular).
        kt: CsrMatrix,
        /// `w(2-w) / a_ii`, so that `M^-1 = K^T diag(inv_diag) K`.
        inv_diag: Vec<f64>,
    },
    /// SSOR-AI, explicit: `z = m r`.
    SsorExplicit {
        /// `M^-1 = K^T diag(w(2-w)/d) K`, exactly symmetric.
        m: CsrMatrix,
    },
}

impl Preconditioner {
    /// Builds the preconditioner `kind` for the square matrix `a`.
    ///
    /// Jacobi and SSOR-AI need every diagonal entry positive and finite; the first (lowest) row
    /// that is not gives [`PcgError::BadDiagonal`] (1-based row, 0 for a missing entry).
    pub fn build(a: &CsrMatrix, kind: &PrecondKind) -> Result<Self, PcgError> {
        kind.validate()?;
        if !a.is_square() {
            return Err(PcgError::Dimension(format!(
                "a preconditioner needs a square matrix, got {} x {}",
                a.nrows(),
                a.ncols()
            )));
        }
        match *kind {
            PrecondKind::None => Ok(Preconditioner::None),
            PrecondKind::Jacobi => {
                let d = positive_diagonal(a, "jacobi")?;
                Ok(Preconditioner::Jacobi {
                    inv_diag: d.par_iter().map(|&v| 1.0 / v).collect(),
                })
            }
            PrecondKind::SsorAi { order, omega, form } => {
                let d = positive_diagonal(a, &kind.to_string())?;
                let omega = omega.unwrap_or_else(|| auto_omega(a));
                let k = ssor_k(a, &d, omega, order)?;
                let scale = omega * (2.0 - omega);
                let s: Vec<f64> = d.par_iter().map(|&v| scale / v).collect();
                // Serial, but a single counting pass: faster here than a parallel scatter with
                // the per-row sorting that determinism would need.
                let kt = k.transpose();
                match form {
                    SsorForm::Factored => Ok(Preconditioner::SsorFactored { k, kt, inv_diag: s }),
                    SsorForm::Explicit => Ok(Preconditioner::SsorExplicit {
                        m: gram_product(&kt, &k, &s)?,
                    }),
                }
            }
        }
    }

    /// The explicit form of a factored SSOR-AI preconditioner: `M^-1 = K^T diag(s) K` as one
    /// stored matrix (the same product [`Preconditioner::build`] forms for
    /// [`SsorForm::Explicit`]); `None` for any other preconditioner.
    pub fn to_explicit(&self) -> Result<Option<Preconditioner>, PcgError> {
        match self {
            Preconditioner::SsorFactored { k, kt, inv_diag } => {
                Ok(Some(Preconditioner::SsorExplicit {
                    m: gram_product(kt, k, inv_diag)?,
                }))
            }
            _ => Ok(None),
        }
    }

    /// `z = M^-1 r`. `work` is scratch of length n (used by the factored SSOR form only; may be
    /// empty otherwise).
    ///
    /// Panics if the lengths do not match the preconditioner (a programming error).
    pub fn apply(&self, r: &[f64], z: &mut [f64], work: &mut [f64]) {
        assert_eq!(r.len(), z.len(), "preconditioner: r and z lengths differ");
        match self {
            Preconditioner::None => z.copy_from_slice(r),
            Preconditioner::Jacobi { inv_diag } => {
                assert_eq!(inv_diag.len(), r.len(), "preconditioner: wrong length");
                z.par_iter_mut()
                    .with_min_len(4096)
                    .zip(r.par_iter())
                    .zip(inv_diag.par_iter())
                    .for_each(|((zi, ri), di)| *zi = di * ri);
            }
            Preconditioner::SsorFactored { k, kt, inv_diag } => {
                assert_eq!(inv_diag.len(), r.len(), "preconditioner: wrong length");
                let t = &mut work[..r.len()];
                let (ptr, idx, val) = (k.indptr(), k.indices(), k.data());
                t.par_iter_mut()
                    .with_min_len(1024)
                    .enumerate()
                    .for_each(|(i, ti)| {
                        let (a, b) = (ptr[i] as usize, ptr[i + 1] as usize);
                        let mut acc = 0.0;
                        for q in a..b {
                            acc += val[q] * r[idx[q] as usize];
                        }
                        *ti = inv_diag[i] * acc;
                    });
                kt.spmv(t, z);
            }
            Preconditioner::SsorExplicit { m } => m.spmv(r, z),
        }
    }

    /// A short name: `none`, `jacobi`, `ssor-ai-factored` or `ssor-ai-explicit`.
    pub fn kind_name(&self) -> &str {
        match self {
            Preconditioner::None => "none",
            Preconditioner::Jacobi { .. } => "jacobi",
            Preconditioner::SsorFactored { .. } => "ssor-ai-factored",
            Preconditioner::SsorExplicit { .. } => "ssor-ai-explicit",
        }
    }

    /// Stored values: 0 for none, n for Jacobi, nnz(K) + nnz(K^T) + n for the factored form,
    /// nnz(M^-1) for the explicit form.
    pub fn nnz(&self) -> usize {
        match self {
            Preconditioner::None => 0,
            Preconditioner::Jacobi { inv_diag } => inv_diag.len(),
            Preconditioner::SsorFactored { k, kt, inv_diag } => k.nnz() + kt.nnz() + inv_diag.len(),
            Preconditioner::SsorExplicit { m } => m.nnz(),
        }
    }

    /// The dimension the preconditioner was built for (`None` for the identity, which fits any).
    pub fn dim(&self) -> Option<usize> {
        match self {
            Preconditioner::None => None,
            Preconditioner::Jacobi { inv_diag } => Some(inv_diag.len()),
            Preconditioner::SsorFactored { inv_diag, .. } => Some(inv_diag.len()),
            Preconditioner::SsorExplicit { m } => Some(m.nrows()),
        }
    }

    /// Length of the `work` slice [`Preconditioner::apply`] needs.
    pub fn work_len(&self) -> usize {
        match self {
            Preconditioner::SsorFactored { inv_diag, .. } => inv_diag.len(),
            _ => 0,
        }
    }
}

/// The diagonal of `a`, checked positive and finite.
fn positive_diagonal(a: &CsrMatrix, precond: &str) -> Result<Vec<f64>, PcgError> {
    let d = a.diagonal();
    if let Some(i) = d
        .par_iter()
        .position_first(|&v| !(v > 0.0 && v.is_finite()))
    {
        return Err(PcgError::BadDiagonal {
            row: i + 1,
            value: d[i],
            precond: precond.to_string(),
        });
    }
    Ok(d)
}

fn sparse_err(e: autopcg_sparse::SparseError) -> PcgError {
    PcgError::Backend(format!("building the preconditioner: {e}"))
}

/// Rows built per parallel task; fixed so that the result never depends on the thread count.
const ROW_CHUNK: usize = 2048;

/// Builds an `nrows x ncols` CSR matrix row by row in parallel: `row(i, acc, out)` appends the
/// sorted entries of row `i` to `out`, using `acc` as scratch.
fn build_by_rows<F>(nrows: usize, ncols: usize, row: F) -> Result<CsrMatrix, PcgError>
where
    F: Fn(usize, &mut HashAccumulator, &mut Vec<(u32, f64)>) + Sync,
{
    let chunks: Vec<(Vec<u32>, Vec<u32>, Vec<f64>)> = (0..nrows.div_ceil(ROW_CHUNK))
        .into_par_iter()
        .map(|c| {
            let lo = c * ROW_CHUNK;
            let hi = (lo + ROW_CHUNK).min(nrows);
            let mut acc = HashAccumulator::default();
            let mut out = Vec::new();
            let mut lens = Vec::with_capacity(hi - lo);
            let mut idx = Vec::new();
            let mut val = Vec::new();
            for i in lo..hi {
                out.clear();
                row(i, &mut acc, &mut out);
                lens.push(out.len() as u32);
                idx.extend(out.iter().map(|e| e.0));
                val.extend(out.iter().map(|e| e.1));
            }
            (lens, idx, val)
        })
        .collect();
    let mut indptr = Vec::with_capacity(nrows + 1);
    indptr.push(0u32);
    let mut total: u64 = 0;
    for (lens, _, _) in &chunks {
        for &l in lens {
            total += l as u64;
            if total >= u32::MAX as u64 {
                return Err(PcgError::Backend(format!(
                    "preconditioner has more than {} nonzeros, beyond 32-bit indices",
                    u32::MAX - 1
                )));
            }
            indptr.push(total as u32);
        }
    }
    let nnz = total as usize;
    let mut indices = vec![0u32; nnz];
    let mut data = vec![0f64; nnz];
    {
        let mut parts = Vec::with_capacity(chunks.len());
        let (mut ri, mut rd): (&mut [u32], &mut [f64]) = (&mut indices, &mut data);
        for (_, ci, _) in &chunks {
            let (hi, ti) = ri.split_at_mut(ci.len());
            let (hd, td) = rd.split_at_mut(ci.len());
            parts.push((hi, hd));
            ri = ti;
            rd = td;
        }
        parts
            .into_par_iter()
            .zip(chunks.par_iter())
            .for_each(|((oi, od), (_, ci, cd))| {
                oi.copy_from_slice(ci);
                od.copy_from_slice(cd);
            });
    }
    CsrMatrix::try_from_parts(nrows, ncols, indptr, indices, data).map_err(sparse_err)
}

/// A row accumulator: open addressing on column indices, summing the values of each column in
/// the order they are added.
#[derive(Default)]
struct HashAccumulator {
    keys: Vec<u32>,
    vals: Vec<f64>,
    /// Occupied slots as `column << 32 | slot`: sorting them sorts by column.
    used: Vec<u64>,
    /// log2 of the table size.
    bits: u32,
}

impl HashAccumulator {
    const EMPTY: u32 = u32::MAX;

    /// Prepares for at most `bound` distinct columns.
    fn reset(&mut self, bound: usize) {
        let want = (2 * bound.max(4)).next_power_of_two();
        if self.keys.len() < want {
            self.keys = vec![Self::EMPTY; want];
            self.vals = vec![0.0; want];
            self.bits = want.trailing_zeros();
        }
        self.used.clear();
    }

    #[inline]
    fn add(&mut self, col: u32, v: f64) {
        // Fibonacci hashing: the top bits of the product spread nearby columns apart.
        let mask = self.keys.len() - 1;
        let mut h = ((col as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - self.bits)) as usize;
        loop {
            let k = self.keys[h];
            if k == col {
                self.vals[h] += v;
                return;
            }
            if k == Self::EMPTY {
                self.keys[h] = col;
                self.vals[h] = v;
                self.used.push(((col as u64) << 32) | h as u64);
                return;
            }
            h = (h + 1) & mask;
        }
    }

    /// Appends the accumulated entries sorted by column, and empties the table.
    fn drain_sorted(&mut self, out: &mut Vec<(u32, f64)>) {
        // Columns are distinct, so an unstable sort gives a unique result.
        self.used.sort_unstable();
        for &e in &self.used {
            let h = (e & 0xffff_ffff) as usize;
            out.push(((e >> 32) as u32, self.vals[h]));
            self.keys[h] = Self::EMPTY;
        }
        self.used.clear();
    }
}

/// The truncated inverse `K = I - X` or `K = I - X + X^2` with `X = w L D^-1`.
fn ssor_k(a: &CsrMatrix, d: &[f64], omega: f64, order: u8) -> Result<CsrMatrix, PcgError> {
    let n = a.nrows();
    if order == 1 {
        // K = I - X in one pass.
        return build_by_rows(n, n, |i, _, out| {
            let (c, v) = a.row(i);
            for (&j, &aij) in c.iter().zip(v) {
                if (j as usize) < i {
                    out.push((j, -(omega * aij / d[j as usize])));
                }
            }
            out.push((i as u32, 1.0));
        });
    }
    // X = w L D^-1: X_ij = w a_ij / d_j for j < i.
    let x = build_by_rows(n, n, |i, _, out| {
        let (c, v) = a.row(i);
        for (&j, &aij) in c.iter().zip(v) {
            if (j as usize) < i {
                out.push((j, omega * aij / d[j as usize]));
            }
        }
    })?;
    // K = I - X + X^2; row i of X^2 is sum_k X_ik X[k, :], all columns below k < i.
    build_by_rows(n, n, |i, acc, out| {
        let (c, v) = x.row(i);
        let bound = 1 + c.len() + c.iter().map(|&k| x.row_len(k as usize)).sum::<usize>();
        acc.reset(bound);
        for (&j, &xij) in c.iter().zip(v) {
            acc.add(j, -xij);
        }
        for (&k, &xik) in c.iter().zip(v) {
            let (ck, vk) = x.row(k as usize);
            for (&j, &xkj) in ck.iter().zip(vk) {
                acc.add(j, xik * xkj);
            }
        }
        acc.add(i as u32, 1.0);
        acc.drain_sorted(out);
    })
}

/// `K^T diag(s) K`, given `kt = K^T`. Entry (i, j) is the sum over k of `(K_ki K_kj) s_k`, with k
/// ascending; the same expression in the same order for (j, i) makes the result exactly
/// symmetric.
fn gram_product(kt: &CsrMatrix, k: &CsrMatrix, s: &[f64]) -> Result<CsrMatrix, PcgError> {
    let n = k.ncols();
    build_by_rows(n, n, |i, acc, out| {
        let (ck, vk) = kt.row(i);
        let bound = ck.iter().map(|&q| k.row_len(q as usize)).sum::<usize>();
        acc.reset(bound);
        for (&q, &kqi) in ck.iter().zip(vk) {
            let sq = s[q as usize];
            let (cj, vj) = k.row(q as usize);
            for (&j, &kqj) in cj.iter().zip(vj) {
                acc.add(j, (kqi * kqj) * sq);
            }
        }
        acc.drain_sorted(out);
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kind_text_round_trip() {
        for s in [
            "none",
            "jacobi",
            "ssor-ai",
            "ssor-ai2",
            "ssor-ai-explicit",
            "ssor-ai2-explicit",
        ] {
            let k: PrecondKind = s.parse().unwrap();
            assert_eq!(k.to_string(), s);
        }
        assert_eq!(
            "SSOR-AI2-factored".parse::<PrecondKind>().unwrap(),
            PrecondKind::SsorAi {
                order: 2,
                omega: None,
                form: SsorForm::Factored
            }
        );
        assert!("ssor".parse::<PrecondKind>().is_err());
        assert!("jacobi-explicit".parse::<PrecondKind>().is_err());
        assert!(PrecondKind::ssor_ai().with_omega(2.0).validate().is_err());
        assert!(PrecondKind::ssor_ai().with_omega(0.0).validate().is_err());
        assert!(PrecondKind::ssor_ai().with_omega(1.9).validate().is_ok());
        let bad = PrecondKind::SsorAi {
            order: 3,
            omega: None,
            form: SsorForm::Factored,
        };
        assert!(bad.validate().is_err());
    }

    #[test]
    fn hash_accumulator_sums_in_order_and_sorts() {
        let mut acc = HashAccumulator::default();
        acc.reset(3);
        for (c, v) in [(7, 1.0), (2, 2.0), (7, 3.0), (0, 4.0), (2, -2.0)] {
            acc.add(c, v);
        }
        let mut out = vec![];
        acc.drain_sorted(&mut out);
        assert_eq!(out, vec![(0, 4.0), (2, 0.0), (7, 4.0)]);
        // Reused: starts empty.
        acc.reset(1);
        acc.add(5, 1.0);
        out.clear();
        acc.drain_sorted(&mut out);
        assert_eq!(out, vec![(5, 1.0)]);
    }
}

#[cfg(test)]
mod auto_omega_tests {
    use super::*;

    #[test]
    fn to_explicit_equals_the_explicit_build() {
        let a = autopcg_sparse::families::poisson2d_5pt(7, 6).unwrap();
        let kind = PrecondKind::ssor_ai().with_omega(1.2);
        let fact = Preconditioner::build(&a, &kind).unwrap();
        let expl = Preconditioner::build(&a, &kind.with_form(SsorForm::Explicit)).unwrap();
        assert_eq!(fact.to_explicit().unwrap(), Some(expl.clone()));
        assert_eq!(expl.to_explicit().unwrap(), None);
        assert_eq!(Preconditioner::None.to_explicit().unwrap(), None);
    }

    #[test]
    fn auto_omega_keeps_one_for_stencils_and_shrinks_for_strong_coupling() {
        // 1D Laplacian: scaled row sums 0.5 -> omega 1.
        let n = 5;
        let mut r = vec![];
        let mut c = vec![];
        let mut v = vec![];
        for i in 0..n as u32 {
            r.push(i);
            c.push(i);
            v.push(2.0);
            if i > 0 {
                r.extend([i, i - 1]);
                c.extend([i - 1, i]);
                v.extend([-1.0, -1.0]);
            }
        }
        let a = CsrMatrix::from_triplets(n, n, &r, &c, &v).unwrap();
        assert_eq!(auto_omega(&a), 1.0);
        // A dense-ish row: row 3 couples to rows 0..2 with scaled weight 0.9 each -> sum 2.7.
        let a = CsrMatrix::from_triplets(
            4,
            4,
            &[0, 1, 2, 3, 3, 3, 3, 0, 1, 2],
            &[0, 1, 2, 3, 0, 1, 2, 3, 3, 3],
            &[1.0, 1.0, 1.0, 4.0, 1.8, 1.8, 1.8, 1.8, 1.8, 1.8],
        )
        .unwrap();
        assert!((auto_omega(&a) - 1.0 / 2.7).abs() < 1e-12);
    }
}
