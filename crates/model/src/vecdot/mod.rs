//! The vector-update and dot-product models (method.md 3.1 and 3.2): per operation (vector
//! updates) or per family (reductions), a time line per launch configuration in every test
//! domain, and the Alg. 3-1 decision tree that maps a size to the fastest configuration.
//!
//! A *candidate* is a kernel entry point, a block size and a block-count policy: cover the
//! work one item per thread (the block count grows with n), or a fixed grid-stride count
//! `NB_nt * i` (eq. 3-2). Candidates are read off the profile records; for each domain of
//! [`crate::domains::domains`] (up to the largest size measured) every candidate with at least
//! two fitted sizes there gets a line ([`crate::linear::fit_line`]), and
//! [`crate::tree::DecisionTree::build`] turns the lines into leaves.
//!
//! [`evaluate`] judges the trees on the held-out records only: at every held-out size, the
//! measured time of the configuration the tree picks against the fastest configuration
//! measured there.

mod candidate;
mod eval;
mod fit;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use autopcg_catalog::{KernelId, VectorVariant};
use serde::{Deserialize, Serialize};

pub use candidate::{BlockPolicy, Candidate, Pick};
pub use eval::{evaluate, EvalRow, TreeEvalReport};
pub use fit::{DomainQuality, TreeModel};

use crate::profile::{LaunchSample, Profile};
use crate::ModelError;
use fit::fit_groups;

/// Family name of the ten single-dot rungs of the reduction ladder (the
/// [`autopcg_catalog::Reduction::family`] of [`autopcg_catalog::Reduction::Dot`]).
pub const DOT_FAMILY: &str = "dot";
/// Family name of the fused three-dot reductions (the family of
/// [`autopcg_catalog::Reduction::Dot3`]).
pub const DOT3_FAMILY: &str = "dot3";
/// A pick within this ratio of the fastest measured time counts as a good pick (3 %).
pub const WITHIN_TOLERANCE: f64 = 1.03;
/// Share of held-out sizes whose pick must be within [`WITHIN_TOLERANCE`] (95 %).
pub const TARGET_SHARE: f64 = 0.95;

/// One timed configuration at one size, from a vector or dot record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Measurement {
    /// Operation or family.
    pub group: String,
    /// The kernel (a vector update or a reduction).
    pub kernel: KernelId,
    /// Vector-update variant; `None` for reductions.
    pub variant: Option<VectorVariant>,
    /// Elements per thread the record says the covering launch used (`None`: not recorded).
    pub elems_per_thread: Option<u32>,
    /// Threads per block.
    pub threads: u32,
    /// Blocks.
    pub blocks: u32,
    /// `nb_multiple` of the record.
    pub nb_multiple: Option<u32>,
    /// Size.
    pub n: u64,
    /// Held out of the fit.
    pub held_out: bool,
    /// Median time, milliseconds (`None` when the timing is invalid or not positive).
    pub ms: Option<f64>,
}

fn usable_ms(t: &crate::profile::Timing) -> Option<f64> {
    (t.is_valid() && t.median_ms > 0.0).then_some(t.median_ms)
}

impl Measurement {
    /// The measurement of group `group` that the launch `s` of `kernel` (of vector-update
    /// variant `variant`) gives.
    fn of(
        group: String,
        kernel: KernelId,
        variant: Option<VectorVariant>,
        s: &LaunchSample,
    ) -> Measurement {
        Measurement {
            group,
            kernel,
            variant,
            elems_per_thread: s.elems_per_thread,
            threads: s.threads,
            blocks: s.blocks,
            nb_multiple: s.nb_multiple,
            n: s.n,
            held_out: s.held_out,
            ms: usable_ms(&s.timing),
        }
    }
}

/// A set of per-group decision trees that can be judged on held-out records.
pub trait HeldOutModels {
    /// The configuration chosen for `group` at size `n`.
    fn pick(&self, group: &str, n: u64) -> Option<Pick>;
    /// Every record of the profile this kind of model is fitted from, as measurements.
    fn measurements(profile: &Profile) -> Vec<Measurement>;
}

/// Vector-update models: one [`TreeModel`] per operation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VectorModels {
    /// Per operation.
    pub ops: BTreeMap<String, TreeModel>,
}

/// Reduction models: one [`TreeModel`] per family ([`DOT_FAMILY`], [`DOT3_FAMILY`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DotModels {
    /// Per family.
    pub families: BTreeMap<String, TreeModel>,
}

impl VectorModels {
    /// Fits a tree per operation from the profile's vector records. Errors when there are no
    /// vector records or an operation cannot be fitted.
    pub fn fit(profile: &Profile) -> Result<VectorModels, ModelError> {
        let ops = fit_groups("vector-update models", Self::measurements(profile))?;
        Ok(VectorModels { ops })
    }

    /// The configuration for operation `op` at size `n`.
    pub fn pick(&self, op: &str, n: u64) -> Option<Pick> {
        self.ops.get(op)?.pick(n)
    }
}

impl HeldOutModels for VectorModels {
    fn pick(&self, group: &str, n: u64) -> Option<Pick> {
        VectorModels::pick(self, group, n)
    }

    fn measurements(profile: &Profile) -> Vec<Measurement> {
        profile
            .vector
            .iter()
            .map(|r| {
                Measurement::of(
                    r.op.name().to_string(),
                    r.kernel_id(),
                    Some(r.variant),
                    &r.sample,
                )
            })
            .collect()
    }
}

impl DotModels {
    /// Fits a tree per family from the profile's dot records. Errors when there are no dot
    /// records or a family cannot be fitted.
    pub fn fit(profile: &Profile) -> Result<DotModels, ModelError> {
        let families = fit_groups("dot-product models", Self::measurements(profile))?;
        Ok(DotModels { families })
    }

    /// The configuration for family `family` ([`DOT_FAMILY`] or [`DOT3_FAMILY`]) at size `n`.
    pub fn pick(&self, family: &str, n: u64) -> Option<Pick> {
        self.families.get(family)?.pick(n)
    }
}

impl HeldOutModels for DotModels {
    fn pick(&self, group: &str, n: u64) -> Option<Pick> {
        DotModels::pick(self, group, n)
    }

    fn measurements(profile: &Profile) -> Vec<Measurement> {
        profile
            .dot
            .iter()
            .map(|r| {
                Measurement::of(
                    r.kernel.family().to_string(),
                    KernelId::Reduction(r.kernel),
                    None,
                    &r.sample,
                )
            })
            .collect()
    }
}
