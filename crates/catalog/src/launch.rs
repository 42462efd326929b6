//! Launch configurations and the launch geometry every crate computes the same way: one thread
//! per work item, one resident wave, and a block count capped at the work.
use std::fmt;
use std::str::FromStr;

use crate::strser::string_serde;
use crate::{DeviceProps, LaunchError, ParseError};

/// Threads per block of the default configurations (and of the fallback rule).
pub const DEFAULT_THREADS: u32 = 256;

/// A one-dimensional launch: `blocks` blocks of `threads` threads.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct LaunchConfig {
    /// Threads per block.
    pub threads: u32,
    /// Blocks in the grid.
    pub blocks: u32,
}

impl fmt::Display for LaunchConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}x{}", self.blocks, self.threads)
    }
}

impl LaunchConfig {
    /// `blocks` blocks of `threads` threads.
    pub fn new(threads: u32, blocks: u32) -> Self {
        LaunchConfig { threads, blocks }
    }

    /// Enough blocks for one thread per work item: `ceil(work / threads)` (at least 1, at most
    /// `u32::MAX`; [`LaunchConfig::check`] then rejects counts the device cannot run).
    pub fn per_item(work: u64, threads: u32) -> Self {
        LaunchConfig {
            threads,
            blocks: cover_blocks(work, threads).min(u64::from(u32::MAX)) as u32,
        }
    }

    /// A grid-stride launch: as many blocks as the device keeps resident at once with `threads`
    /// threads per block (SM count x resident blocks per SM, limited by threads and blocks per
    /// SM: one full wave), but no more than one thread per work item. Occupancy limits from
    /// registers and shared memory are not considered: the models refine this.
    pub fn grid_stride(work: u64, threads: u32, props: &DeviceProps) -> Self {
        let blocks = cover_blocks(work, threads).min(wave_blocks(threads, props));
        LaunchConfig {
            threads,
            blocks: blocks.min(u64::from(u32::MAX)) as u32,
        }
    }

    /// The same launch with its block count capped at the blocks that cover `items` once.
    /// A grid-stride kernel does the same work with fewer blocks, and blocks without work cost
    /// time under graph replay (bcsstk13 without preconditioner on an H200: 0.0114 ms per
    /// iteration with 1584 and 264 blocks for 2003 rows, 0.0094 with 4).
    pub fn capped_at_work(self, items: u64) -> Self {
        let cover = cover_blocks(items, self.threads);
        LaunchConfig {
            threads: self.threads,
            blocks: u32::try_from(cover).map_or(self.blocks, |c| self.blocks.min(c)),
        }
    }

    /// Checks the configuration against the device's limits; `kernel` names the kernel in the
    /// error.
    pub fn check(&self, kernel: impl fmt::Display, props: &DeviceProps) -> Result<(), LaunchError> {
        if self.threads == 0 || self.threads > props.max_threads_per_block {
            return Err(LaunchError::new(
                kernel,
                format!(
                    "{} threads per block; the device allows 1..={}",
                    self.threads, props.max_threads_per_block
                ),
            ));
        }
        if self.blocks == 0 || self.blocks > props.max_grid_x {
            return Err(LaunchError::new(
                kernel,
                format!(
                    "{} blocks; the device allows 1..={}",
                    self.blocks, props.max_grid_x
                ),
            ));
        }
        Ok(())
    }

    /// Total threads in the grid.
    pub fn total_threads(&self) -> u64 {
        u64::from(self.threads) * u64::from(self.blocks)
    }

    /// "256 threads x 21 blocks", as plans print it.
    pub fn words(&self) -> String {
        format!("{} threads x {} blocks", self.threads, self.blocks)
    }
}

/// `ceil(work / threads)`, at least 1.
pub fn cover_blocks(work: u64, threads: u32) -> u64 {
    work.div_ceil(u64::from(threads.max(1))).max(1)
}

/// Blocks of `threads` threads the device keeps resident at once (SM count x resident blocks
/// per SM, limited by threads and blocks per SM): one wave.
pub fn wave_blocks(threads: u32, props: &DeviceProps) -> u64 {
    let t = threads.max(1);
    let per_sm = (props.max_threads_per_sm / t).clamp(1, props.max_blocks_per_sm.max(1));
    u64::from(props.sm_count.max(1)) * u64::from(per_sm)
}

/// How many blocks a launch of a kernel gets for its work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GridPolicy {
    /// One resident wave ([`LaunchConfig::grid_stride`]): each thread loops over several items.
    Wave,
    /// One thread (or lane) per work item ([`LaunchConfig::per_item`]).
    Cover,
}

impl GridPolicy {
    /// Both policies.
    pub const ALL: [GridPolicy; 2] = [GridPolicy::Wave, GridPolicy::Cover];

    /// The configuration with `threads` per block for `work` items under this policy.
    pub fn config(self, work: u64, threads: u32, props: &DeviceProps) -> LaunchConfig {
        match self {
            GridPolicy::Wave => LaunchConfig::grid_stride(work, threads, props),
            GridPolicy::Cover => LaunchConfig::per_item(work, threads),
        }
    }

    /// The block count of [`GridPolicy::config`], without the `u32` clamp (at least 1).
    pub fn blocks(self, work: u64, threads: u32, props: &DeviceProps) -> u64 {
        let cover = cover_blocks(work, threads);
        match self {
            GridPolicy::Wave => cover.min(wave_blocks(threads, props)),
            GridPolicy::Cover => cover,
        }
    }
}

impl fmt::Display for GridPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            GridPolicy::Wave => "wave",
            GridPolicy::Cover => "cover",
        })
    }
}

impl FromStr for GridPolicy {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, ParseError> {
        match s {
            "wave" => Ok(GridPolicy::Wave),
            "cover" => Ok(GridPolicy::Cover),
            _ => Err(ParseError::new("grid policy", s, "wave or cover")),
        }
    }
}

string_serde!(GridPolicy);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_and_profiles_launch_grids_capped_at_the_work() {
        use crate::{Dot3Kernel, DotKernel, Reduction, VectorVariant};
        // 64000 elements: 32000 double2 items; 1024 threads cover them with 32 blocks, 256
        // threads with 125.
        let d3 = Reduction::Dot3(Dot3Kernel::TwoPass);
        assert_eq!(
            d3.launch_at(LaunchConfig::new(1024, 264), 64_000).blocks,
            32
        );
        assert_eq!(
            d3.launch_at(LaunchConfig::new(256, 1056), 64_000).blocks,
            125
        );
        // Long vectors keep the configured grid.
        assert_eq!(
            d3.launch_at(LaunchConfig::new(256, 1056), 1 << 24).blocks,
            1056
        );
        // The update covers its own items: one per element or per double2.
        let cfg = LaunchConfig::new(512, 528);
        assert_eq!(VectorVariant::Grid.launch_at(cfg, 64_000).blocks, 125);
        assert_eq!(VectorVariant::GridV2.launch_at(cfg, 64_000).blocks, 63);
        // A fixed-coverage single dot already covers its items exactly: unchanged.
        for k in DotKernel::ALL {
            let r = Reduction::Dot(k);
            if let Some(e) = r.elements_per_thread() {
                let exact = LaunchConfig::per_item(64_000u64.div_ceil(u64::from(e)), 256);
                assert_eq!(r.launch_at(exact, 64_000), exact, "{k}");
            }
        }
    }

    #[test]
    fn geometry() {
        assert_eq!(LaunchConfig::per_item(0, 256).blocks, 1);
        assert_eq!(LaunchConfig::per_item(256, 256).blocks, 1);
        assert_eq!(LaunchConfig::per_item(257, 256).blocks, 2);
        let p = DeviceProps::hopper_like();
        assert_eq!(LaunchConfig::grid_stride(10, 256, &p).blocks, 1);
        assert_eq!(LaunchConfig::grid_stride(1 << 30, 256, &p).blocks, 132 * 8);
        assert_eq!(LaunchConfig::grid_stride(1 << 30, 32, &p).blocks, 132 * 32);
        assert!(LaunchConfig::new(2048, 1).check("k", &p).is_err());
        assert!(LaunchConfig::new(256, 0).check("k", &p).is_err());
        assert!(LaunchConfig::new(256, 1).check("k", &p).is_ok());
        assert_eq!(LaunchConfig::new(1024, 264).capped_at_work(10).blocks, 1);
        assert_eq!(
            LaunchConfig::new(256, 264).capped_at_work(1 << 30).blocks,
            264
        );
        for g in GridPolicy::ALL {
            assert_eq!(g.to_string().parse::<GridPolicy>(), Ok(g));
            for work in [1u64, 1000, 1 << 28] {
                assert_eq!(
                    u64::from(g.config(work, 128, &p).blocks),
                    g.blocks(work, 128, &p)
                );
            }
        }
        assert_eq!(
            LaunchConfig::new(256, 21).words(),
            "256 threads x 21 blocks"
        );
    }
}
