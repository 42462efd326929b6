//! Measured SpMV times per matrix, read off a profile (twins of grid policies filled in), and
//! the statistics the fits and evaluations report.
use std::collections::{BTreeMap, HashMap};

use autopcg_catalog::{CusparseAlg, Format, GridPolicy, SpmvImpl};

use super::{model_order, SpmvCandidate};
use crate::profile::{Profile, SpmvRecord, Status};

/// Measured times on one matrix.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct MatrixTimes {
    /// autopcg's candidates: median milliseconds.
    pub own: BTreeMap<SpmvCandidate, f64>,
    /// cuSPARSE algorithms: median milliseconds.
    pub cusparse: BTreeMap<CusparseAlg, f64>,
}

impl MatrixTimes {
    /// The fastest own candidate and its time (the first in [`model_order`] on a tie).
    pub fn best_own(&self) -> Option<(&SpmvCandidate, f64)> {
        self.own
            .iter()
            .map(|(c, &t)| (c, t))
            .min_by(|a, b| a.1.total_cmp(&b.1).then_with(|| model_order(a.0, b.0)))
    }

    /// Every candidate a plan may run with its time: the own candidates, then each cuSPARSE
    /// algorithm (as [`SpmvCandidate::cusparse`]).
    pub fn runnable(&self) -> impl Iterator<Item = (SpmvCandidate, f64)> + '_ {
        self.own.iter().map(|(c, &t)| (*c, t)).chain(
            self.cusparse
                .iter()
                .map(|(a, &t)| (SpmvCandidate::cusparse(*a), t)),
        )
    }

    /// [`MatrixTimes::runnable`] in [`model_order`].
    pub fn runnable_in_model_order(&self) -> Vec<(SpmvCandidate, f64)> {
        let mut v: Vec<(SpmvCandidate, f64)> = self.runnable().collect();
        v.sort_by(|a, b| model_order(&a.0, &b.0));
        v
    }

    /// The fastest candidate a plan may run, own or cuSPARSE, and its time (the first in
    /// [`model_order`] on a tie).
    pub fn best(&self) -> Option<(SpmvCandidate, f64)> {
        self.runnable()
            .min_by(|a, b| a.1.total_cmp(&b.1).then_with(|| model_order(&a.0, &b.0)))
    }

    /// The measured time of candidate `c`, own or cuSPARSE.
    pub fn time_of_candidate(&self, c: &SpmvCandidate) -> Option<f64> {
        match c.kernel {
            SpmvImpl::Cusparse(alg) => self.cusparse.get(&alg).copied(),
            _ => self.own.get(c).copied(),
        }
    }

    /// The fastest cuSPARSE algorithm's time.
    pub fn best_cusparse(&self) -> Option<f64> {
        self.cusparse.values().copied().min_by(f64::total_cmp)
    }

    /// The measured time of the candidate named `name`.
    pub fn time_of(&self, name: &str) -> Option<f64> {
        self.own
            .iter()
            .find(|(c, _)| c.name() == name)
            .map(|(_, &t)| t)
    }
}

/// The usable time of a record: its median when the record is [`Status::Ok`] with a valid,
/// positive timing.
pub fn record_time(r: &SpmvRecord) -> Option<f64> {
    if r.status != Status::Ok {
        return None;
    }
    let t = r.timing.as_ref()?;
    (t.is_valid() && t.median_ms > 0.0).then_some(t.median_ms)
}

/// Measured times per matrix id, for every matrix with at least one usable record.
///
/// A candidate measured twice on a matrix keeps its faster time. The profiler does not record
/// a grid policy whose launch equals another policy's at the same threads per block; where one
/// policy of `(format, kernel, threads)` is measured on a matrix and another policy that the
/// profile measures elsewhere has no record at all on it (not even skipped or failed), that
/// policy takes the measured policy's time.
pub fn measured_times(profile: &Profile) -> BTreeMap<String, MatrixTimes> {
    times_of(&profile.spmv, &profile.spmv_replayed)
}

/// [`measured_times`] of the records timed from graph replays ([`Profile::spmv_replayed`]):
/// the matrices whose iteration fits in half of L2, timed as the solver runs them. The grid
/// policies a measured policy stands in for are those the whole profile measures (the replayed
/// matrices are few and small, and may hold one policy only).
pub fn measured_times_replayed(profile: &Profile) -> BTreeMap<String, MatrixTimes> {
    times_of(&profile.spmv_replayed, &profile.spmv)
}

/// The times of `records`, a policy without a record on a matrix standing in as
/// [`measured_times`] says, with the policies measured in `records` or `others`.
fn times_of(records: &[SpmvRecord], others: &[SpmvRecord]) -> BTreeMap<String, MatrixTimes> {
    let mut out: BTreeMap<String, MatrixTimes> = BTreeMap::new();
    // (format, kernel, threads) -> every grid policy seen anywhere.
    let mut policies: HashMap<(Format, SpmvImpl, u32), Vec<GridPolicy>> = HashMap::new();
    for r in records.iter().chain(others) {
        if let (Some(t), Some(g)) = (r.launch.threads, r.launch.grid) {
            let p = policies
                .entry((r.launch.format, r.launch.kernel, t))
                .or_default();
            if !p.contains(&g) {
                p.push(g);
            }
        }
    }
    // (matrix, format, kernel, threads) -> grid policies with any record.
    let mut present: HashMap<(&str, Format, SpmvImpl, u32), Vec<GridPolicy>> = HashMap::new();
    for r in records {
        if let (Some(t), Some(g)) = (r.launch.threads, r.launch.grid) {
            present
                .entry((r.matrix.as_str(), r.launch.format, r.launch.kernel, t))
                .or_default()
                .push(g);
        }
        let Some(time) = record_time(r) else {
            continue;
        };
        let c = r.candidate();
        let m = out.entry(r.matrix.clone()).or_default();
        if let SpmvImpl::Cusparse(alg) = c.kernel {
            let e = m.cusparse.entry(alg).or_insert(time);
            *e = e.min(time);
        } else {
            let e = m.own.entry(c).or_insert(time);
            *e = e.min(time);
        }
    }
    for (id, m) in out.iter_mut() {
        let mut twins = Vec::new();
        for (c, &t) in &m.own {
            let Some(threads) = c.threads else { continue };
            let Some(all) = policies.get(&(c.format, c.kernel, threads)) else {
                continue;
            };
            let here = present.get(&(id.as_str(), c.format, c.kernel, threads));
            for &g in all {
                if here.is_some_and(|h| h.contains(&g)) {
                    continue;
                }
                let twin = SpmvCandidate {
                    grid: Some(g),
                    ..*c
                };
                twins.push((twin, t));
            }
        }
        for (c, t) in twins {
            m.own.entry(c).or_insert(t);
        }
    }
    out
}

/// Nearest-rank quantile `q` in `[0, 1]` of `v` (sorted here); NaN for an empty slice.
pub fn quantile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let rank = ((q.clamp(0.0, 1.0) * s.len() as f64).ceil() as usize).clamp(1, s.len());
    s[rank - 1]
}

/// Geometric mean of positive values; NaN for an empty slice.
pub fn geomean(v: &[f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    (v.iter().map(|x| x.ln()).sum::<f64>() / v.len() as f64).exp()
}
