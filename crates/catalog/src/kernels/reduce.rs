//! The reductions of `dot.cu`: the ladder of single dot products and the fused three-dot
//! reduction with the Chronopoulos–Gear recurrence.
use std::fmt;

use super::parse_by_name;
use crate::{DeviceProps, LaunchConfig, LaunchError, DEFAULT_THREADS};

/// Threads-per-block values for which the reduction modules (`dot.cu`, compiled with
/// `-DBLOCK_SIZE=B`) exist.
pub const DOT_BLOCK_SIZES: [u32; 5] = [64, 128, 256, 512, 1024];

/// Entry point of the second stage of the two-launch rungs (adds per-block partial sums).
pub const DOT_FINISH: &str = "dot_finish";

/// The rungs of the reduction ladder (method.md 3.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DotKernel {
    /// Interleaved addressing with a divergent branch.
    Interleaved,
    /// Interleaved addressing by a strided index (no divergence, bank conflicts).
    Strided,
    /// Sequential addressing.
    Sequential,
    /// First addition during the load.
    FirstAdd,
    /// Last warp unrolled with shuffles.
    WarpUnroll,
    /// Tree fully unrolled on the compile-time block size.
    FullUnroll,
    /// Several elements per thread, grid-stride.
    GridStride,
    /// Several elements per thread, a contiguous chunk per block.
    BlockStride,
    /// Grid-stride with double2 loads.
    Vec2,
    /// Double2 grid-stride whose last block adds the partials (one launch).
    LastBlock,
}

impl DotKernel {
    /// Every rung, in ladder order.
    pub const ALL: [DotKernel; 10] = [
        DotKernel::Interleaved,
        DotKernel::Strided,
        DotKernel::Sequential,
        DotKernel::FirstAdd,
        DotKernel::WarpUnroll,
        DotKernel::FullUnroll,
        DotKernel::GridStride,
        DotKernel::BlockStride,
        DotKernel::Vec2,
        DotKernel::LastBlock,
    ];

    /// Elements each thread loads for the fixed-coverage rungs (1 or 2); `None` for rungs that
    /// take any block count.
    pub fn elements_per_thread(self) -> Option<u32> {
        match self {
            DotKernel::Interleaved | DotKernel::Strided | DotKernel::Sequential => Some(1),
            DotKernel::FirstAdd | DotKernel::WarpUnroll | DotKernel::FullUnroll => Some(2),
            _ => None,
        }
    }

    /// Default configuration for n elements: [`DEFAULT_THREADS`] threads; exactly covering
    /// blocks for the fixed-coverage rungs, one resident wave for the others.
    pub fn default_config(self, n: u64, props: &DeviceProps) -> LaunchConfig {
        match self.elements_per_thread() {
            Some(e) => LaunchConfig::per_item(n.div_ceil(u64::from(e)), DEFAULT_THREADS),
            None => LaunchConfig::grid_stride(n, DEFAULT_THREADS, props),
        }
    }
}

impl fmt::Display for DotKernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DotKernel::Interleaved => "dot_interleaved",
            DotKernel::Strided => "dot_strided",
            DotKernel::Sequential => "dot_sequential",
            DotKernel::FirstAdd => "dot_first_add",
            DotKernel::WarpUnroll => "dot_warp_unroll",
            DotKernel::FullUnroll => "dot_full_unroll",
            DotKernel::GridStride => "dot_grid_stride",
            DotKernel::BlockStride => "dot_block_stride",
            DotKernel::Vec2 => "dot_vec2",
            DotKernel::LastBlock => "dot_last_block",
        })
    }
}

parse_by_name!(DotKernel, DotKernel::ALL, "dot kernel");

/// The fused three-dot reductions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dot3Kernel {
    /// `dot3_two_pass` then `dot3_finish` (two launches).
    TwoPass,
    /// `dot3_last_block` (one launch; the last block finishes).
    LastBlock,
}

impl Dot3Kernel {
    /// Both kernels.
    pub const ALL: [Dot3Kernel; 2] = [Dot3Kernel::TwoPass, Dot3Kernel::LastBlock];

    /// The entry points it launches, in order.
    pub fn entry_points(self) -> &'static [&'static str] {
        match self {
            Dot3Kernel::TwoPass => &["dot3_two_pass", "dot3_finish"],
            Dot3Kernel::LastBlock => &["dot3_last_block"],
        }
    }

    /// The entry points of the variant that takes its iteration from the scalar buffer, in
    /// launch order.
    pub fn next_entry_points(self) -> &'static [&'static str] {
        match self {
            Dot3Kernel::TwoPass => &["dot3_two_pass", "dot3_finish_next"],
            Dot3Kernel::LastBlock => &["dot3_last_block_next"],
        }
    }

    /// Default configuration for vectors of n elements: [`DEFAULT_THREADS`] threads, one
    /// resident wave (capped by the double2 work).
    pub fn default_config(self, n: u64, props: &DeviceProps) -> LaunchConfig {
        LaunchConfig::grid_stride(n.div_ceil(2), DEFAULT_THREADS, props)
    }

    /// Checks a launch: the device's limits and a block size the module is compiled for
    /// ([`DOT_BLOCK_SIZES`]).
    pub fn check_launch(self, cfg: LaunchConfig, props: &DeviceProps) -> Result<(), LaunchError> {
        cfg.check(self, props)?;
        if !DOT_BLOCK_SIZES.contains(&cfg.threads) {
            return Err(LaunchError::new(
                self,
                format!(
                    "compiled for {DOT_BLOCK_SIZES:?} threads per block, the plan asks for {}",
                    cfg.threads
                ),
            ));
        }
        Ok(())
    }
}

impl fmt::Display for Dot3Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.entry_points()[0])
    }
}

parse_by_name!(Dot3Kernel, Dot3Kernel::ALL, "three-dot kernel");

/// A reduction of the profile: a rung of the single-dot ladder or a fused three-dot kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reduction {
    /// A single dot product.
    Dot(DotKernel),
    /// The fused three-dot reduction.
    Dot3(Dot3Kernel),
}

impl Reduction {
    /// Every reduction.
    pub fn all() -> Vec<Reduction> {
        DotKernel::ALL
            .into_iter()
            .map(Reduction::Dot)
            .chain(Dot3Kernel::ALL.into_iter().map(Reduction::Dot3))
            .collect()
    }

    /// The family the models fit one tree per: `dot` or `dot3`.
    pub fn family(self) -> &'static str {
        match self {
            Reduction::Dot(_) => "dot",
            Reduction::Dot3(_) => "dot3",
        }
    }

    /// Elements per thread of the fixed-coverage rungs (see [`DotKernel::elements_per_thread`]).
    pub fn elements_per_thread(self) -> Option<u32> {
        match self {
            Reduction::Dot(k) => k.elements_per_thread(),
            Reduction::Dot3(_) => None,
        }
    }

    /// The work items of vectors of `n` elements: one per double2 load for the three-dot
    /// kernels, one per `elements_per_thread` for the fixed-coverage rungs, one per element
    /// for the other single dots.
    pub fn work(self, n: u64) -> u64 {
        match self {
            Reduction::Dot3(_) => n.div_ceil(2),
            Reduction::Dot(k) => n.div_ceil(u64::from(k.elements_per_thread().unwrap_or(1))),
        }
    }

    /// The launch that runs the configuration `cfg` on vectors of `n` elements: its blocks
    /// capped at those that cover the work ([`LaunchConfig::capped_at_work`]). The plan
    /// launches a reduction so, and the profile times it so: a grid of a fixed block count
    /// (a multiple of the resident blocks) has more blocks than work on short vectors, and
    /// blocks without work cost time.
    pub fn launch_at(self, cfg: LaunchConfig, n: u64) -> LaunchConfig {
        cfg.capped_at_work(self.work(n))
    }
}

impl fmt::Display for Reduction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reduction::Dot(k) => k.fmt(f),
            Reduction::Dot3(k) => k.fmt(f),
        }
    }
}

parse_by_name!(Reduction, Reduction::all(), "reduction kernel");
