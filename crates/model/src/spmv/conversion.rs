//! Conversion-time models: milliseconds to turn the CSR matrix into a format on the device.
use std::collections::HashMap;

use autopcg_catalog::Format;
use serde::{Deserialize, Serialize};

use super::fit::{fit_relative, predict_rows, rel_errors};
use super::{quantile, FitStats, SpmvFitOptions};
use crate::profile::{MatrixRecord, Profile, Status};
use crate::work::SpmvWork;

/// A term of a conversion-time model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConversionTerm {
    /// 1: fixed cost (allocation, launch, transfer latency).
    Const,
    /// Rows.
    Rows,
    /// Stored entries.
    Nnz,
    /// Slots the format stores (padding included): ELL `n K`, DIA `n ndiag`, HYB ELL slots
    /// plus COO entries, otherwise `nnz`.
    Slots,
}

/// Slots a format stores for `w` (the [`ConversionTerm::Slots`] value).
pub fn format_slots(format: Format, w: &SpmvWork) -> f64 {
    match format {
        Format::Ell => w.ell_slots as f64,
        Format::Dia => w.dia_slots as f64,
        Format::Hyb => (w.hyb_ell_slots + w.hyb_coo_nnz) as f64,
        Format::Csr | Format::Coo => w.nnz as f64,
    }
}

/// The fitted conversion-time model of one format: milliseconds to turn the CSR matrix into
/// this format on the device (the device conversion where the profile measured one, else host
/// conversion plus upload).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConversionModel {
    /// The format.
    pub format: Format,
    /// Terms.
    pub terms: Vec<ConversionTerm>,
    /// Milliseconds per unit of each term, all `>= 0`.
    pub coef: Vec<f64>,
    /// Accuracy.
    pub stats: FitStats,
}

impl ConversionModel {
    fn row(terms: &[ConversionTerm], format: Format, w: &SpmvWork) -> Vec<f64> {
        terms
            .iter()
            .map(|t| match t {
                ConversionTerm::Const => 1.0,
                ConversionTerm::Rows => w.n as f64,
                ConversionTerm::Nnz => w.nnz as f64,
                ConversionTerm::Slots => format_slots(format, w),
            })
            .collect()
    }

    /// Predicted milliseconds on `w`.
    pub fn predict(&self, w: &SpmvWork) -> f64 {
        Self::row(&self.terms, self.format, w)
            .iter()
            .zip(&self.coef)
            .map(|(a, c)| a * c)
            .sum()
    }
}

pub(super) fn fit_conversions(
    profile: &Profile,
    matrices: &HashMap<&str, &MatrixRecord>,
    opts: &SpmvFitOptions,
    notes: &mut Vec<String>,
) -> Vec<ConversionModel> {
    let terms = vec![
        ConversionTerm::Const,
        ConversionTerm::Rows,
        ConversionTerm::Nnz,
        ConversionTerm::Slots,
    ];
    let mut per: HashMap<Format, Vec<(&SpmvWork, f64)>> = HashMap::new();
    for c in &profile.conversions {
        if c.status != Status::Ok {
            continue;
        }
        let Some(m) = matrices.get(c.matrix.as_str()) else {
            continue;
        };
        let t = c.device_ms.unwrap_or(c.host_ms + c.upload_ms);
        if t.is_finite() && t > 0.0 {
            per.entry(c.format).or_default().push((&m.work, t));
        }
    }
    let mut out = Vec::new();
    // By format name: the order the models have always been listed in.
    let mut per: Vec<_> = per.into_iter().collect();
    per.sort_by_key(|(f, _)| f.name());
    for (format, pts) in per {
        if pts.len() < opts.min_matrices.max(1) {
            notes.push(format!(
                "conversion to {format}: {} matrices, fewer than {}: no model",
                pts.len(),
                opts.min_matrices
            ));
            continue;
        }
        let rows: Vec<Vec<f64>> = pts
            .iter()
            .map(|(w, _)| ConversionModel::row(&terms, format, w))
            .collect();
        let t: Vec<f64> = pts.iter().map(|p| p.1).collect();
        match fit_relative(&rows, &t) {
            Ok(coef) => {
                let errs = rel_errors(&predict_rows(&rows, &coef), &t);
                out.push(ConversionModel {
                    format,
                    terms: terms.clone(),
                    coef,
                    stats: FitStats {
                        matrices: t.len(),
                        median_rel_err: quantile(&errs, 0.5),
                        p90_rel_err: quantile(&errs, 0.9),
                        max_rel_err: errs.iter().copied().fold(0.0, f64::max),
                        cv_median_rel_err: None,
                        cv_p90_rel_err: None,
                    },
                });
            }
            Err(e) => notes.push(format!("conversion to {format}: {e}")),
        }
    }
    out
}
