//! Fitting one operation or family: candidates read off the records (with their elements per
//! thread), a line per candidate and domain, and the Alg. 3-1 tree over them.
use std::collections::BTreeMap;

use autopcg_catalog::{KernelId, VectorVariant};
use serde::{Deserialize, Serialize};

use super::candidate::cover_blocks;
use super::{BlockPolicy, Candidate, Measurement, Pick};
use crate::domains::{domains, Domain};
use crate::linear::{fit_line, median, Line};
use crate::tree::DecisionTree;
use crate::ModelError;

/// Fit quality in one domain.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DomainQuality {
    /// The domain.
    pub domain: Domain,
    /// Candidates with a line here.
    pub fitted: usize,
    /// Candidates with records here but fewer than two distinct sizes (no line).
    pub skipped: usize,
    /// Points fitted, all candidates together.
    pub points: usize,
    /// Median relative residual over every fitted point.
    pub median_rel_residual: f64,
    /// Largest relative residual over every fitted point.
    pub worst_rel_residual: f64,
    /// The candidate with the largest residual.
    pub worst_candidate: Option<String>,
    /// Smallest weighted r² of a line here (1 when no line was fitted).
    pub min_r2: f64,
    /// Leaves of the tree in this domain.
    pub leaves: usize,
    /// Largest relative residual among the candidates that won a leaf (the lines that matter).
    pub leaf_worst_rel_residual: f64,
}

/// The decision tree of one operation or family, and how well its lines fit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TreeModel {
    /// Operation (`axpy`, `xpay`, `cg_update`...) or family ([`super::DOT_FAMILY`],
    /// [`super::DOT3_FAMILY`]).
    pub name: String,
    /// Largest size measured; the domains are `domains(max_n)`.
    pub max_n: u64,
    /// Candidates found in the records.
    pub candidates: usize,
    /// Records used for fitting.
    pub fit_records: usize,
    /// Records left out because their timing is invalid or not positive.
    pub dropped_records: usize,
    /// The tree.
    pub tree: DecisionTree<Candidate>,
    /// Per-domain fit quality.
    pub quality: Vec<DomainQuality>,
}

impl TreeModel {
    /// The configuration for size `n` and its predicted time; `None` for an empty tree.
    pub fn pick(&self, n: u64) -> Option<Pick> {
        let leaf = self.tree.lookup(n)?;
        let c = &leaf.label;
        Some(Pick {
            kernel: c.kernel,
            variant: c.variant,
            threads: c.threads,
            blocks: c.blocks_for(n),
            nb_multiple: c.nb_multiple(),
            predicted_ms: leaf.predict(n),
        })
    }
}

/// The elements per thread of a covering candidate: what its records say (the profiler writes
/// it), else, for records written before the field existed, the kernel's catalogue property
/// ([`KernelId::elements_per_thread`]); never a guess from a name. Every record's block count
/// must be the covering count with it, else the records and the kernel disagree: an error.
fn elems_per_thread(key: &Key, recs: &[&Measurement]) -> Result<u32, String> {
    let mut recorded = recs.iter().filter_map(|m| m.elems_per_thread);
    let e = match recorded.next() {
        Some(e) => {
            if let Some(other) = recorded.find(|&x| x != e) {
                return Err(format!(
                    "{} at {} threads: its records say both {e} and {other} elements per thread",
                    key.kernel, key.threads
                ));
            }
            e
        }
        None => key.kernel.elements_per_thread().ok_or_else(|| {
            format!(
                "{} at {} threads has records without a grid-stride block count, but the \
                 kernel takes any block count (no elements per thread recorded or known)",
                key.kernel, key.threads
            )
        })?,
    };
    match recs
        .iter()
        .find(|m| m.blocks != cover_blocks(m.n, e, m.threads))
    {
        Some(m) => Err(format!(
            "{} at {} threads covers n = {} with {} blocks, not the {} of {e} elements per \
             thread",
            key.kernel,
            key.threads,
            m.n,
            m.blocks,
            cover_blocks(m.n, e, m.threads)
        )),
        None => Ok(e),
    }
}

/// A candidate before its elements per thread are known.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    kernel: KernelId,
    variant: Option<VectorVariant>,
    threads: u32,
    /// `(multiple, blocks)` for grid-stride records.
    grid: Option<(u32, u32)>,
}

pub(super) fn fit_groups(
    what: &str,
    ms: Vec<Measurement>,
) -> Result<BTreeMap<String, TreeModel>, ModelError> {
    if ms.is_empty() {
        return Err(ModelError::Fit {
            what: what.into(),
            reason: "the profile has no records for them".into(),
        });
    }
    let mut groups: BTreeMap<String, Vec<Measurement>> = BTreeMap::new();
    for m in ms {
        groups.entry(m.group.clone()).or_default().push(m);
    }
    let mut out = BTreeMap::new();
    for (name, recs) in groups {
        let model = fit_group(&name, &recs).map_err(|reason| ModelError::Fit {
            what: format!("{what}: {name}"),
            reason,
        })?;
        out.insert(name, model);
    }
    Ok(out)
}

fn fit_group(name: &str, recs: &[Measurement]) -> Result<TreeModel, String> {
    let max_n = recs.iter().map(|m| m.n).max().unwrap_or(0);
    let doms = domains(max_n);
    if doms.is_empty() {
        return Err(format!(
            "the largest size measured, {max_n}, is not above the smallest modelled size {}",
            crate::domains::MIN_SIZE
        ));
    }
    // Every usable record (held out too) decides a candidate's elements per thread; only the
    // fitted ones give points.
    let mut by_key: BTreeMap<Key, Vec<&Measurement>> = BTreeMap::new();
    let mut dropped = 0;
    for m in recs {
        if m.ms.is_none() || m.threads == 0 || m.blocks == 0 {
            dropped += 1;
            continue;
        }
        let key = Key {
            kernel: m.kernel,
            variant: m.variant,
            threads: m.threads,
            grid: m.nb_multiple.map(|i| (i, m.blocks)),
        };
        by_key.entry(key).or_default().push(m);
    }
    let mut cands: Vec<(Candidate, Vec<(u64, f64)>)> = Vec::new();
    let mut fit_records = 0;
    for (key, ms) in &by_key {
        let policy = match key.grid {
            Some((multiple, blocks)) => BlockPolicy::Grid { multiple, blocks },
            None => BlockPolicy::Cover {
                elems_per_thread: elems_per_thread(key, ms)?,
            },
        };
        let pts: Vec<(u64, f64)> = ms
            .iter()
            .filter(|m| !m.held_out)
            .filter_map(|m| m.ms.map(|t| (m.n, t)))
            .collect();
        fit_records += pts.len();
        cands.push((
            Candidate {
                kernel: key.kernel,
                variant: key.variant,
                threads: key.threads,
                policy,
            },
            pts,
        ));
    }
    cands.sort_by(|a, b| a.0.cmp(&b.0));

    let mut parts = Vec::with_capacity(doms.len());
    let mut quality = Vec::with_capacity(doms.len());
    for d in &doms {
        let mut lines: Vec<(Candidate, Line)> = Vec::new();
        let mut q = DomainQuality {
            domain: *d,
            fitted: 0,
            skipped: 0,
            points: 0,
            median_rel_residual: 0.0,
            worst_rel_residual: 0.0,
            worst_candidate: None,
            min_r2: 1.0,
            leaves: 0,
            leaf_worst_rel_residual: 0.0,
        };
        let mut residuals = Vec::new();
        let mut worst_of: Vec<f64> = Vec::new();
        for (c, pts) in &cands {
            let here: Vec<(f64, f64)> = pts
                .iter()
                .filter(|&&(n, _)| d.contains(n))
                .map(|&(n, t)| (n as f64, t))
                .collect();
            if here.is_empty() {
                continue;
            }
            let mut sizes: Vec<f64> = here.iter().map(|p| p.0).collect();
            sizes.sort_by(f64::total_cmp);
            sizes.dedup();
            if sizes.len() < 2 {
                q.skipped += 1;
                continue;
            }
            let f = fit_line(&here).map_err(|e| format!("{c} in ({}, {}]: {e}", d.lo, d.hi))?;
            q.fitted += 1;
            q.points += here.len();
            q.min_r2 = q.min_r2.min(f.stats.r2);
            residuals.extend(here.iter().map(|&(n, t)| (f.line.eval(n) - t).abs() / t));
            if f.stats.max_rel_residual > q.worst_rel_residual || q.worst_candidate.is_none() {
                q.worst_rel_residual = f.stats.max_rel_residual;
                q.worst_candidate = Some(c.to_string());
            }
            worst_of.push(f.stats.max_rel_residual);
            lines.push((c.clone(), f.line));
        }
        q.median_rel_residual = median(&mut residuals);
        // Leaves of this domain, for the quality of the winning lines.
        let leaves = crate::tree::domain_leaves(d.lo, d.hi, &lines).map_err(|e| e.to_string())?;
        q.leaves = leaves.len();
        q.leaf_worst_rel_residual = leaves
            .iter()
            .filter_map(|l| lines.iter().position(|(c, _)| *c == l.label))
            .map(|i| worst_of[i])
            .fold(0.0, f64::max);
        quality.push(q);
        parts.push((*d, lines));
    }
    let tree = DecisionTree::build(parts).map_err(|e| e.to_string())?;
    if tree.is_empty() {
        return Err(format!(
            "no candidate of {name} has two fitted sizes in any domain ({} candidate(s), {} \
             usable fit record(s))",
            cands.len(),
            fit_records
        ));
    }
    Ok(TreeModel {
        name: name.to_string(),
        max_n,
        candidates: cands.len(),
        fit_records,
        dropped_records: dropped,
        tree,
        quality,
    })
}
