//! A launch configuration of one kernel ([`Candidate`]: kernel, threads per block, block-count
//! policy) and what a model picks for one size ([`Pick`]).
use std::fmt;

use autopcg_catalog::{KernelId, LaunchConfig, VectorVariant};
use serde::{Deserialize, Serialize};

/// How a candidate sets its block count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum BlockPolicy {
    /// One work item per thread: `blocks = ceil(ceil(n / elems_per_thread) / threads)`.
    Cover {
        /// Elements one thread handles (2 for double2 loads or a first add during the load).
        elems_per_thread: u32,
    },
    /// A fixed grid-stride count, `NB_nt * multiple` blocks whatever n.
    Grid {
        /// `i` in `NB_nt * i`.
        multiple: u32,
        /// The block count measured.
        blocks: u32,
    },
}

/// `ceil(ceil(n / elems) / threads)`, at least 1, at most `u32::MAX`: the blocks of
/// [`LaunchConfig::per_item`] over `ceil(n / elems)` items, as the launcher counts.
pub(super) fn cover_blocks(n: u64, elems: u32, threads: u32) -> u32 {
    LaunchConfig::per_item(n.div_ceil(u64::from(elems.max(1))), threads).blocks
}

/// A launch configuration of one kernel.
///
/// Its order (kernel, variant, threads, policy) only breaks exact ties between candidates'
/// lines.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Candidate {
    /// The kernel: a vector update or a reduction.
    pub kernel: KernelId,
    /// Thread mapping of a vector update (the kernel's own); `None` for reductions.
    pub variant: Option<VectorVariant>,
    /// Threads per block.
    pub threads: u32,
    /// Block-count policy.
    pub policy: BlockPolicy,
}

impl Candidate {
    /// The block count at size `n`.
    pub fn blocks_for(&self, n: u64) -> u32 {
        match self.policy {
            BlockPolicy::Cover { elems_per_thread } => {
                cover_blocks(n, elems_per_thread, self.threads)
            }
            BlockPolicy::Grid { blocks, .. } => blocks,
        }
    }

    /// `i` in `NB_nt * i` for grid-stride candidates, `None` for covering ones (as in the
    /// profile records).
    pub fn nb_multiple(&self) -> Option<u32> {
        match self.policy {
            BlockPolicy::Cover { .. } => None,
            BlockPolicy::Grid { multiple, .. } => Some(multiple),
        }
    }
}

impl fmt::Display for Candidate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} t{}", self.kernel, self.threads)?;
        match self.policy {
            BlockPolicy::Cover { elems_per_thread } => write!(f, " cover/{elems_per_thread}"),
            BlockPolicy::Grid { multiple, blocks } => write!(f, " nb{blocks}=NBx{multiple}"),
        }
    }
}

/// What a model chooses for one size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Pick {
    /// The kernel: a vector update or a reduction.
    pub kernel: KernelId,
    /// Thread mapping of a vector update; `None` for reductions.
    pub variant: Option<VectorVariant>,
    /// Threads per block.
    pub threads: u32,
    /// Blocks for this size.
    pub blocks: u32,
    /// `i` in `blocks = NB_nt * i` for grid-stride picks.
    pub nb_multiple: Option<u32>,
    /// The time the leaf's line predicts, milliseconds.
    pub predicted_ms: f64,
}
