//! `NB_nt`, the unit of the grid-stride block counts the sweep measures: eq. 3-2 of the method
//! ([`autopcg_catalog::occupancy()`], the one copy of the formula) on the registers and shared
//! memory of the compiled kernel (`cuFuncGetAttribute`), written to the profile with its
//! inputs as an [`OccupancyRecord`] so that the fits can audit it
//! ([`OccupancyRecord::check`]).
//!
//! When eq. 3-2 gives no valid count (a block that does not fit an SM by one of its terms, a
//! block larger than the device allows, a device reporting no SM), the profiler records one
//! block per SM and `NB_nt = N_sm` (at least 1): a kernel that launches at all keeps one block
//! resident, and the sweep still gets a block-count unit. The audit reports such a record.
//! The kernels of the sweep always fit (their block sizes are capped by the device and by the
//! compiled kernel), so their records hold eq. 3-2's count.
use autopcg_catalog::{DeviceProps, KernelId};
use autopcg_model::profile::OccupancyRecord;

/// Resources of one compiled kernel, as the driver reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelResources {
    /// Registers per thread.
    pub regs_per_thread: u32,
    /// Static shared memory per block, bytes.
    pub static_smem_bytes: u32,
    /// Largest block the compiled kernel can be launched with.
    pub max_threads_per_block: u32,
}

/// `NB_nt` for `kernel` launched with `threads` threads per block, with its inputs, as the
/// record the profile keeps (see the module documentation for a kernel without a valid count).
pub(crate) fn occupancy(
    dev: &DeviceProps,
    kernel: KernelId,
    threads: u32,
    res: &KernelResources,
) -> OccupancyRecord {
    let dynamic = 0;
    let smem = res.static_smem_bytes.saturating_add(dynamic);
    let (blocks_per_sm, nb_nt) =
        match autopcg_catalog::occupancy(dev, threads, res.regs_per_thread, smem) {
            Ok(o) => (o.blocks_per_sm, o.nb_nt),
            Err(_) => (1, dev.sm_count.max(1)),
        };
    OccupancyRecord {
        kernel,
        threads,
        regs_per_thread: res.regs_per_thread,
        static_smem_bytes: res.static_smem_bytes,
        dynamic_smem_bytes: dynamic,
        blocks_per_sm,
        nb_nt,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::hopper_like_props;
    use autopcg_catalog::{DotKernel, Reduction};

    fn res(regs: u32, smem: u32) -> KernelResources {
        KernelResources {
            regs_per_thread: regs,
            static_smem_bytes: smem,
            max_threads_per_block: 1024,
        }
    }

    #[test]
    fn eq_3_2_takes_the_tightest_limit() {
        // 132 SMs, 64 Ki registers, 228 KiB shared memory, 2048 threads and 32 blocks per SM.
        let s = hopper_like_props();
        let k = KernelId::Reduction(Reduction::Dot(DotKernel::Vec2));
        let per_sm = |t: u32, regs: u32, smem: u32| occupancy(&s, k, t, &res(regs, smem));
        // Threads bound: 2048 / 256 = 8; registers 65536 / (32 * 256) = 8.
        assert_eq!(per_sm(256, 32, 0).blocks_per_sm, 8);
        assert_eq!(per_sm(256, 32, 0).nb_nt, 132 * 8);
        // Registers bound: 65536 / (64 * 512) = 2 < 2048 / 512 = 4.
        assert_eq!(per_sm(512, 64, 0).blocks_per_sm, 2);
        // Shared memory bound: 233472 / 48 KiB = 4 < 2048 / 128 = 16.
        assert_eq!(per_sm(128, 16, 48 << 10).blocks_per_sm, 4);
        // Block-count bound: 2048 / 32 = 64 threads-wise, capped by 32 blocks per SM.
        assert_eq!(per_sm(32, 8, 0).blocks_per_sm, 32);
        // 255 registers x 1024 threads do not fit one SM: no valid count, one block recorded,
        // which the audit reports.
        let r = per_sm(1024, 255, 0);
        assert_eq!((r.blocks_per_sm, r.nb_nt), (1, 132));
        assert!(r.check(&s).is_err());
        // No register or shared-memory figure: only threads and blocks limit.
        assert_eq!(per_sm(64, 0, 0).blocks_per_sm, 32);
        let r = per_sm(1024, 40, 256);
        assert_eq!(r.kernel, k);
        assert_eq!(r.threads, 1024);
        assert_eq!((r.regs_per_thread, r.static_smem_bytes), (40, 256));
        // Registers: 65536 / 40960 = 1; threads: 2.
        assert_eq!(r.blocks_per_sm, 1);
        assert_eq!(r.nb_nt, 132);
        assert_eq!(r.check(&s).unwrap().nb_nt, 132);
    }
}
