//! Run-to-run agreement of two profiles of the same device: the medians of the measurements
//! both hold.
use serde::{Deserialize, Serialize};

use super::{Profile, Record};

/// Run-to-run agreement of two profiles of the same device (see [`stability`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StabilityReport {
    /// Measurements present in both profiles with a median of at least `min_ms` in either.
    pub compared: usize,
    /// Of those, the ones whose medians differ by at most `tolerance` (relative to the smaller).
    pub within: usize,
    /// The threshold on the median, ms.
    pub min_ms: f64,
    /// The relative tolerance.
    pub tolerance: f64,
    /// Largest relative difference seen.
    pub worst: f64,
    /// The key of the largest difference.
    pub worst_key: Option<String>,
    /// `within / compared` by record kind (`vector`, `dot`, `spmv`).
    pub by_kind: Vec<(String, usize, usize)>,
}

impl StabilityReport {
    /// `within / compared` (1 when nothing was compared).
    pub fn share(&self) -> f64 {
        if self.compared == 0 {
            1.0
        } else {
            self.within as f64 / self.compared as f64
        }
    }
}

/// The timed measurements of a profile by key, with their medians.
pub fn medians_by_key(p: &Profile) -> std::collections::BTreeMap<String, f64> {
    let mut m = std::collections::BTreeMap::new();
    for v in &p.vector {
        if let Some(k) = Record::Vector(v.clone()).key() {
            m.insert(k, v.sample.timing.median_ms);
        }
    }
    for d in &p.dot {
        if let Some(k) = Record::Dot(d.clone()).key() {
            m.insert(k, d.sample.timing.median_ms);
        }
    }
    for s in &p.spmv {
        if let (Some(k), Some(t)) = (Record::Spmv(s.clone()).key(), s.timing) {
            m.insert(k, t.median_ms);
        }
    }
    m
}

/// Compares the medians of the measurements two runs have in common, counting those at or
/// above `min_ms` (in either run) and how many agree within `tolerance` (relative to the
/// smaller median): the run-to-run stability of a tune.
pub fn stability(a: &Profile, b: &Profile, min_ms: f64, tolerance: f64) -> StabilityReport {
    let (ma, mb) = (medians_by_key(a), medians_by_key(b));
    let mut rep = StabilityReport {
        compared: 0,
        within: 0,
        min_ms,
        tolerance,
        worst: 0.0,
        worst_key: None,
        by_kind: Vec::new(),
    };
    let mut kinds: std::collections::BTreeMap<String, (usize, usize)> = Default::default();
    for (k, &ta) in &ma {
        let Some(&tb) = mb.get(k) else { continue };
        if ta.max(tb) < min_ms || ta.min(tb) <= 0.0 {
            continue;
        }
        let rel = (ta - tb).abs() / ta.min(tb);
        let ok = rel <= tolerance;
        rep.compared += 1;
        rep.within += usize::from(ok);
        let kind = k.split('/').next().unwrap_or("").to_string();
        let e = kinds.entry(kind).or_default();
        e.0 += 1;
        e.1 += usize::from(ok);
        if rel > rep.worst {
            rep.worst = rel;
            rep.worst_key = Some(k.clone());
        }
    }
    rep.by_kind = kinds.into_iter().map(|(k, (c, w))| (k, c, w)).collect();
    rep
}
