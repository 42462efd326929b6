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
            (PrecondKind::SsorAi { .. }, Preconditioner::SsorFactored { k, .. }) => {
                (None, k.transpose_with_sources().1)
            }
            (PrecondKind::SsorAi { order, omega, .. }, Preconditioner::SsorExplicit { .. }) => {
                let d = positive_diagonal(a, &kind.to_string())?;
                let omega = omega.unwrap_or_else(|| auto_omega(a));
                let k = ssor_k(a, &d, omega, *order)?;
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
        let update_factors = |k: &mut CsrMatrix, kt: &mut CsrMatrix| -> Result<(), PcgError> {
            ssor_k_values(k, a, d, omega, order)?;
            let kv = k.data();
            kt.data_mut()
                .par_iter_mut()
                .zip(sources.par_iter())
                .for_each(|(t, &e)| *t = kv[e as usize]);
            Ok(())
        };
        match (pre, &mut self.factors) {
            (Preconditioner::SsorFactored { k, kt, inv_diag }, None) => {
                update_factors(k, kt)?;
                inv_diag
                    .par_iter_mut()
                    .zip(d.par_iter())
                    .for_each(|(x, &v)| *x = scale / v);
            }
            (Preconditioner::SsorExplicit { m }, Some((k, kt))) => {
                update_factors(k, kt)?;
                let s: Vec<f64> = d.par_iter().map(|&v| scale / v).collect();
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
