//! Value-only refreshes of a built preconditioner for new values of the same pattern.
use autopcg_sparse::CsrMatrix;
use rayon::prelude::*;

use super::rows::{fill_by_rows, gram_rows, ssor_k, ssor_k_values};
use super::{auto_omega, positive_diagonal, PrecondKind, Preconditioner};
use crate::PcgError;

/// What a value-only refresh of a preconditioner keeps: every pattern, and the position of
/// each entry of `K^T` in `K`. [`ValueRefresh::refresh`] then recomputes only values, in
/// parallel — `K` on its pattern, `K^T` by a gather, the scale vector, and the explicit
/// product on its pattern — with the same results, bit for bit, as
/// [`Preconditioner::build`] from the new values.
#[derive(Debug, Clone)]
pub struct ValueRefresh {
    kind: PrecondKind,
    /// Of SSOR-AI: for the explicit form, `K` and `K^T` (the factored form holds its own).
    factors: Option<(CsrMatrix, CsrMatrix)>,
    /// Entry `p` of `K^T` is entry `kt_sources[p]` of `K` (empty without SSOR-AI).
    kt_sources: Vec<u32>,
    /// Where the next values of `K^T diag(s)` are written before they are exchanged with the
    /// matrix's (the previous values then come back here): a refresh allocates nothing once
    /// it has run.
    kt_spare: Vec<f64>,
}

/// Rows of `K^T` searched per parallel task by [`transpose_sources`].
const SOURCE_ROWS: usize = 4096;

/// Entry `p` of `kt`, the transpose of `k`, is entry `sources[p]` of `k`: each entry's row is
/// searched for in its column's row of `k`, rows of `kt` in parallel (no transpose is built,
/// the one the preconditioner holds is read). The positions are those
/// [`CsrMatrix::transpose_with_sources`] gives.
fn transpose_sources(k: &CsrMatrix, kt: &CsrMatrix) -> Result<Vec<u32>, PcgError> {
    let (kp, ki) = (k.indptr(), k.indices());
    let (tp, ti) = (kt.indptr(), kt.indices());
    let n = kt.nrows();
    if k.nnz() != kt.nnz() || k.nrows() != kt.ncols() || k.ncols() != n {
        return Err(PcgError::Backend(
            "K^T is not the transpose of K (internal error)".into(),
        ));
    }
    let mut sources = vec![0u32; kt.nnz()];
    let mut parts = Vec::with_capacity(n.div_ceil(SOURCE_ROWS));
    let mut rest: &mut [u32] = &mut sources;
    for c in 0..n.div_ceil(SOURCE_ROWS) {
        let (lo, hi) = (c * SOURCE_ROWS, ((c + 1) * SOURCE_ROWS).min(n));
        let (head, tail) = rest.split_at_mut((tp[hi] - tp[lo]) as usize);
        parts.push((lo..hi, head));
        rest = tail;
    }
    let missing = parts
        .into_par_iter()
        .map(|(rows, out)| {
            let base = tp[rows.start] as usize;
            for j in rows {
                for p in tp[j] as usize..tp[j + 1] as usize {
                    let i = ti[p] as usize;
                    let (lo, hi) = (kp[i] as usize, kp[i + 1] as usize);
                    match ki[lo..hi].binary_search(&(j as u32)) {
                        Ok(q) => out[p - base] = (lo + q) as u32,
                        Err(_) => return true,
                    }
                }
            }
            false
        })
        .reduce(|| false, |a, b| a || b);
    if missing {
        return Err(PcgError::Backend(
            "K^T is not the transpose of K (internal error)".into(),
        ));
    }
    Ok(sources)
}

impl ValueRefresh {
    /// Prepares refreshes of `pre`, the preconditioner [`Preconditioner::build`] made from `a`
    /// and `kind` (or the explicit form of its factored build). For the explicit form, `K`
    /// and `K^T` are built here from `a` (the preconditioner does not keep them).
    pub fn new(a: &CsrMatrix, kind: &PrecondKind, pre: &Preconditioner) -> Result<Self, PcgError> {
        kind.validate()?;
        let (factors, kt_sources) = match (kind, pre) {
            (PrecondKind::None, Preconditioner::None)
            | (PrecondKind::Jacobi, Preconditioner::Jacobi { .. }) => (None, Vec::new()),
            (PrecondKind::SsorAi { .. }, Preconditioner::SsorFactored { k, kt, .. }) => {
                (None, transpose_sources(k, kt)?)
            }
            (PrecondKind::SsorAi { order, omega, .. }, Preconditioner::SsorExplicit { .. }) => {
                let d = positive_diagonal(a, &kind.to_string())?;
                let omega = omega.unwrap_or_else(|| auto_omega(a));
                let k = ssor_k(a, &d, omega, *order)?;
                // Its values are refreshed (scaled) before any is read.
                let (kt, sources) = k.transpose_with_sources();
                (Some((k, kt)), sources)
            }
            (k, p) => {
                return Err(PcgError::InvalidParameter(format!(
                    "a refresh of {k} for a {} preconditioner",
                    p.kind_name()
                )))
            }
        };
        Ok(ValueRefresh {
            kind: *kind,
            factors,
            kt_sources,
            kt_spare: Vec::new(),
        })
    }

    /// The preconditioner refreshed, as built (with its omega, `None` when chosen for each new
    /// set of values).
    pub fn kind(&self) -> &PrecondKind {
        &self.kind
    }

    /// Entry `p` of `K^T` is entry `kt_sources()[p]` of `K` (empty without SSOR-AI).
    pub fn kt_sources(&self) -> &[u32] {
        &self.kt_sources
    }

    /// For the explicit SSOR-AI form, `K` and `K^T` as last refreshed (their patterns are what
    /// a device refresh needs; the factored form's are the preconditioner's own).
    pub fn factors(&self) -> Option<(&CsrMatrix, &CsrMatrix)> {
        self.factors.as_ref().map(|(k, kt)| (k, kt))
    }

    /// Recomputes the values of `pre` (the preconditioner this refresh was made for) for `a`,
    /// new values of the same pattern. A diagonal entry that is not positive and finite is an
    /// error ([`PcgError::BadDiagonal`], as from a build) and leaves `pre` unchanged.
    pub fn refresh(&mut self, a: &CsrMatrix, pre: &mut Preconditioner) -> Result<(), PcgError> {
        let d = match self.kind {
            PrecondKind::None => return Ok(()),
            kind => positive_diagonal(a, &kind.to_string())?,
        };
        self.refresh_with_diagonal(a, &d, pre)
    }

    /// [`ValueRefresh::refresh`] with `a`'s diagonal `d` already taken, and already checked to
    /// be positive and finite everywhere (by the caller's own pass over the new values).
    pub fn refresh_with_diagonal(
        &mut self,
        a: &CsrMatrix,
        d: &[f64],
        pre: &mut Preconditioner,
    ) -> Result<(), PcgError> {
        let kind = self.kind;
        if kind == PrecondKind::None {
            return Ok(());
        }
        if d.len() != a.nrows().min(a.ncols()) {
            return Err(PcgError::Dimension(format!(
                "a diagonal of {} entries for a {} x {} matrix",
                d.len(),
                a.nrows(),
                a.ncols()
            )));
        }
        let (order, omega) = match (kind, &mut *pre) {
            (PrecondKind::Jacobi, Preconditioner::Jacobi { inv_diag })
                if inv_diag.len() == d.len() =>
            {
                inv_diag
                    .par_iter_mut()
                    .zip(d.par_iter())
                    .for_each(|(x, &v)| *x = 1.0 / v);
                return Ok(());
            }
            (PrecondKind::SsorAi { order, omega, .. }, _) => {
                (order, omega.unwrap_or_else(|| auto_omega(a)))
            }
            (k, p) => {
                return Err(PcgError::InvalidParameter(format!(
                    "a refresh of {k} for a {} preconditioner",
                    p.kind_name()
                )))
            }
        };
        let scale = omega * (2.0 - omega);
        let sources = &self.kt_sources;
        let spare = &mut self.kt_spare;
        // K on its pattern, then `K^T diag(s)` gathered from it: entry p of K^T (column j)
        // is K's entry `sources[p]` times `s[j]`, as the build rounds it. The values are
        // written into the spare array, which is then exchanged with K^T's.
        let mut update_factors =
            |k: &mut CsrMatrix, kt: &mut CsrMatrix, s: &[f64]| -> Result<(), PcgError> {
                ssor_k_values(k, a, d, omega, order)?;
                let kv = k.data();
                spare.resize(kt.nnz(), 0.0);
                spare
                    .par_iter_mut()
                    .zip(kt.indices().par_iter().zip(sources.par_iter()))
                    .for_each(|(v, (&j, &e))| *v = kv[e as usize] * s[j as usize]);
                kt.swap_values(spare)
                    .map_err(|e| PcgError::Backend(format!("refreshing K^T: {e} (internal error)")))
            };
        match (pre, &mut self.factors) {
            (Preconditioner::SsorFactored { k, kt, inv_diag }, None) => {
                inv_diag
                    .par_iter_mut()
                    .zip(d.par_iter())
                    .for_each(|(x, &v)| *x = scale / v);
                update_factors(k, kt, inv_diag)?;
            }
            (Preconditioner::SsorExplicit { m }, Some((k, kt))) => {
                let s: Vec<f64> = d.par_iter().map(|&v| scale / v).collect();
                update_factors(k, kt, &s)?;
                fill_by_rows(m, gram_rows(kt, k, &s))?;
            }
            (p, _) => {
                return Err(PcgError::InvalidParameter(format!(
                    "a refresh of {kind} for a {} preconditioner",
                    p.kind_name()
                )))
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::precond::poisson1d;

    #[test]
    fn transpose_sources_are_the_transposes_and_a_wrong_pair_is_refused() {
        // A 2D Laplacian of more rows than one task searches.
        let n = 70usize;
        let (mut r, mut c, mut v) = (vec![], vec![], vec![]);
        for i in 0..n * n {
            let push = |j: usize, x: f64, r: &mut Vec<u32>, c: &mut Vec<u32>, v: &mut Vec<f64>| {
                r.push(i as u32);
                c.push(j as u32);
                v.push(x);
            };
            push(i, 4.0, &mut r, &mut c, &mut v);
            if i % n > 0 {
                push(i - 1, -1.0, &mut r, &mut c, &mut v);
            }
            if i >= n {
                push(i - n, -1.0, &mut r, &mut c, &mut v);
            }
            if i % n + 1 < n {
                push(i + 1, -1.0, &mut r, &mut c, &mut v);
            }
            if i + n < n * n {
                push(i + n, -1.0, &mut r, &mut c, &mut v);
            }
        }
        let a = CsrMatrix::from_triplets(n * n, n * n, &r, &c, &v).unwrap();
        for kind in [PrecondKind::ssor_ai(), PrecondKind::ssor_ai2()] {
            let Preconditioner::SsorFactored { k, kt, .. } =
                Preconditioner::build(&a, &kind).unwrap()
            else {
                panic!("factored form expected")
            };
            assert!(kt.nrows() > SOURCE_ROWS);
            assert_eq!(
                transpose_sources(&k, &kt).unwrap(),
                k.transpose_with_sources().1
            );
        }
        let a = poisson1d(6);
        let Preconditioner::SsorFactored { k, .. } =
            Preconditioner::build(&a, &PrecondKind::ssor_ai()).unwrap()
        else {
            panic!("factored form expected")
        };
        // K is not its own transpose.
        let e = transpose_sources(&k, &k).unwrap_err().to_string();
        assert!(e.contains("not the transpose"), "{e}");
    }
}
