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

mod planned;
mod refresh;
mod rows;

pub use planned::{PlannedPrecond, PrecondRef, DEVICE_EXPLICIT_KT_MAX};
pub use refresh::ValueRefresh;
pub use rows::fold_gram_pattern;
use rows::{fill_by_rows, gram_pattern, gram_product, gram_rows, scale_columns, ssor_k, ssor_kt1};

/// How the SSOR-AI preconditioner is applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum SsorForm {
    /// Two products: `t = K r; z = (K^T diag(s)) t`, with `K` and `K^T diag(s)` both stored
    /// (the diagonal scaling is folded into the columns of `K^T`).
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
    auto_omega_at(a, &a.diagonal_positions())
}

/// [`auto_omega`] with the position of each row's diagonal entry given
/// (`CsrMatrix::diagonal_positions`, `NO_ENTRY` where a row stores none), so that a caller
/// that holds them does not search the rows again. The same value: the same terms, summed in
/// the same order.
pub fn auto_omega_at(a: &CsrMatrix, diag: &[u32]) -> f64 {
    omega_for_coupling(coupling_at(a, diag))
}

/// The largest scaled coupling of a row to the rows before it,
/// `max_i sum_{j<i, a_jj > 0} |a_ij| / sqrt(a_ii a_jj)` over the rows with a positive
/// diagonal entry (rows whose sum is NaN skipped; zero, of either sign, for no such row), each
/// row summed in column order: what [`auto_omega`] reads of `A`, `diag` as for
/// [`auto_omega_at`]. A count made elsewhere (the GPU) sums the same terms in the same order.
pub fn coupling_at(a: &CsrMatrix, diag: &[u32]) -> f64 {
    let val = a.data();
    let d = |i: usize| match diag[i] {
        autopcg_sparse::csr::NO_ENTRY => 0.0,
        p => val[p as usize],
    };
    (0..a.nrows())
        .into_par_iter()
        .map(|i| {
            let (cols, vals) = a.row(i);
            let di = d(i);
            if di.is_nan() || di <= 0.0 {
                return 0.0;
            }
            cols.iter()
                .zip(vals)
                .filter(|(&j, _)| (j as usize) < i && d(j as usize) > 0.0)
                .map(|(&j, &v)| v.abs() / (di * d(j as usize)).sqrt())
                .sum::<f64>()
        })
        .reduce(|| 0.0, f64::max)
}

/// The automatic relaxation factor for the coupling `norm` ([`coupling_at`]): `1 / norm`
/// where it is finite and above one, else 1.
pub fn omega_for_coupling(norm: f64) -> f64 {
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
    /// SSOR-AI, factored: `z = (K^T S) (K r)` with `S = diag(inv_diag)`, so that
    /// `M^-1 = K^T S K` is applied by two products and no separate diagonal scaling.
    SsorFactored {
        /// The truncated inverse `K` (lower triangular, unit diagonal).
        k: CsrMatrix,
        /// `K^T S`: the transpose of `K` with column `j` scaled by `inv_diag[j]` (upper
        /// triangular, diagonal `inv_diag`). Entry `(i, j)` is `K_ji * inv_diag[j]`, rounded
        /// once.
        kt: CsrMatrix,
        /// `w(2-w) / a_ii`, the diagonal of `S` (kept for the explicit product and for value
        /// refreshes, which scale `K^T` again).
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
                // First order on a symmetric pattern: K^T S read off A's pattern and K's rows.
                let kt = match order {
                    1 => ssor_kt1(a, &k, &s)?,
                    _ => None,
                };
                let kt = match kt {
                    Some(kt) => kt,
                    None => {
                        let mut kt = k.transpose();
                        scale_columns(&mut kt, &s)?;
                        kt
                    }
                };
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
        match self.explicit_pattern()? {
            Some(pattern) => self.explicit_on(pattern),
            None => Ok(None),
        }
    }

    /// The sparsity pattern of the explicit form of a factored SSOR-AI preconditioner (see
    /// [`Preconditioner::to_explicit`]), found by a symbolic pass (columns only, no products),
    /// with every stored value 1.0; `None` for any other preconditioner.
    ///
    /// Structural statistics read it as they read the product itself whenever K's values are
    /// finite ([`Preconditioner::values_finite`]): the product is then exactly symmetric with a
    /// stored, positive diagonal (each `M_ii` holds the term `s_i > 0` and the others are
    /// squares times positive scales), as the pattern with unit values is.
    pub fn explicit_pattern(&self) -> Result<Option<CsrMatrix>, PcgError> {
        match self {
            Preconditioner::SsorFactored { k, kt, .. } => Ok(Some(gram_pattern(kt, k)?)),
            _ => Ok(None),
        }
    }

    /// Visits the rows of the explicit form's pattern (the rows
    /// [`Preconditioner::explicit_pattern`] stores) without storing them, so that statistics of
    /// the explicit form need no more memory than one row's scratch per thread. Rows are found
    /// in parallel in chunks of consecutive rows: `row(state, i, cols)` gets row `i`'s sorted
    /// columns, in ascending `i` within one state (each state starts from `init()`), and
    /// `merge(lower, upper)` joins the states of consecutive row ranges. Every row is visited
    /// once. `None` for any preconditioner other than factored SSOR-AI.
    pub fn fold_explicit_rows<T, I, F, M>(&self, init: I, row: F, merge: M) -> Option<T>
    where
        T: Send,
        I: Fn() -> T + Sync + Send,
        F: Fn(&mut T, usize, &[u32]) + Sync + Send,
        M: Fn(T, T) -> T + Sync + Send,
    {
        match self {
            Preconditioner::SsorFactored { k, kt, .. } => Some(fold_gram_pattern(
                k.nrows(),
                |i| kt.row(i).0,
                |q| k.row(q).0,
                init,
                row,
                merge,
            )),
            _ => None,
        }
    }

    /// The explicit form of a factored SSOR-AI preconditioner with its values computed on
    /// `pattern`, the matrix [`Preconditioner::explicit_pattern`] returned (numeric pass only);
    /// `None` for any other preconditioner. Bitwise the product [`Preconditioner::to_explicit`]
    /// forms.
    pub fn explicit_on(&self, pattern: CsrMatrix) -> Result<Option<Preconditioner>, PcgError> {
        match self {
            Preconditioner::SsorFactored { k, kt, inv_diag } => {
                let mut m = pattern;
                fill_by_rows(&mut m, gram_rows(kt, k, inv_diag))?;
                Ok(Some(Preconditioner::SsorExplicit { m }))
            }
            _ => Ok(None),
        }
    }

    /// True unless a stored value is infinite or NaN.
    pub fn values_finite(&self) -> bool {
        let finite = |v: &[f64]| v.par_iter().all(|x| x.is_finite());
        match self {
            Preconditioner::None => true,
            Preconditioner::Jacobi { inv_diag } => finite(inv_diag),
            Preconditioner::SsorFactored { k, kt, inv_diag } => {
                finite(k.data()) && finite(kt.data()) && finite(inv_diag)
            }
            Preconditioner::SsorExplicit { m } => finite(m.data()),
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
                k.spmv(r, t);
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
    if let Some(i) = autopcg_sparse::scan::first_where(&d, |&v| !(v > 0.0 && v.is_finite())) {
        return Err(PcgError::BadDiagonal {
            row: i + 1,
            value: d[i],
            precond: precond.to_string(),
        });
    }
    Ok(d)
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
    fn the_folded_rows_are_the_pattern_rows() {
        let a = autopcg_sparse::families::poisson3d_7pt(17, 16, 15).unwrap();
        for kind in [PrecondKind::ssor_ai(), PrecondKind::ssor_ai2()] {
            let pre = Preconditioner::build(&a, &kind).unwrap();
            let pattern = pre.explicit_pattern().unwrap().unwrap();
            let rows = pre
                .fold_explicit_rows(
                    Vec::<(usize, Vec<u32>)>::new,
                    |s, i, cols| s.push((i, cols.to_vec())),
                    |mut lo, hi| {
                        lo.extend(hi);
                        lo
                    },
                )
                .unwrap();
            // Every row once, merged in row order.
            assert_eq!(rows.len(), a.nrows());
            for (i, (r, cols)) in rows.iter().enumerate() {
                assert_eq!(*r, i);
                assert_eq!(cols.as_slice(), pattern.row(i).0);
            }
        }
        let none = Preconditioner::None.fold_explicit_rows(|| 0, |_, _, _| {}, |a, b| a + b);
        assert_eq!(none, None);
    }

    #[test]
    fn auto_omega_keeps_one_for_stencils_and_shrinks_for_strong_coupling() {
        // 1D Laplacian: scaled row sums 0.5 -> omega 1.
        let a = poisson1d(5);
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

/// The 1D Laplacian of `n` rows (2 on the diagonal, -1 beside it), for tests.
#[cfg(test)]
pub(crate) fn poisson1d(n: u32) -> CsrMatrix {
    let (mut r, mut c, mut v) = (vec![], vec![], vec![]);
    for i in 0..n {
        r.push(i);
        c.push(i);
        v.push(2.0);
        if i > 0 {
            r.extend([i, i - 1]);
            c.extend([i - 1, i]);
            v.extend([-1.0, -1.0]);
        }
    }
    CsrMatrix::from_triplets(n as usize, n as usize, &r, &c, &v).unwrap()
}
