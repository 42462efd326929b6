//! Eq. 3-2 of the method: the smallest block count that fills the machine with a kernel,
//!
//! `NB_nt = N_sm * min(N_reg / N_reg_per_block, N_smem / N_smem_per_block,
//!                     N_threads_per_sm / nt, N_blocks_per_sm)`,
//!
//! with the per-block register and shared-memory use read from the compiled kernel
//! (`cuFuncGetAttribute`). The terms are taken as the method states them: registers per block
//! are `registers per thread x nt`, without the allocation granularity of the hardware, and a
//! kernel that uses no registers or no shared memory is not limited by that resource. At least
//! one block per SM is assumed (a kernel that launches at all keeps one block resident).
//!
//! Private to the profiler: the sweep only needs `NB_nt` to place its block counts, and every
//! input is written to the profile as an [`OccupancyRecord`] so the fits can audit it.
use autopcg_model::profile::OccupancyRecord;
use autopcg_model::DeviceSpec;

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

/// Resident blocks per SM by eq. 3-2's minimum, for blocks of `threads` threads using
/// `smem_per_block` bytes of shared memory (static plus dynamic).
pub(crate) fn blocks_per_sm(
    spec: &DeviceSpec,
    threads: u32,
    regs_per_thread: u32,
    smem_per_block: u32,
) -> u32 {
    let t = u64::from(threads.max(1));
    let by_regs = if regs_per_thread == 0 {
        u64::MAX
    } else {
        u64::from(spec.regs_per_sm) / (u64::from(regs_per_thread) * t)
    };
    let by_smem = if smem_per_block == 0 {
        u64::MAX
    } else {
        u64::from(spec.smem_per_sm) / u64::from(smem_per_block)
    };
    let by_threads = u64::from(spec.max_threads_per_sm) / t;
    let by_blocks = u64::from(spec.max_blocks_per_sm);
    let m = by_regs.min(by_smem).min(by_threads).min(by_blocks).max(1);
    u32::try_from(m).unwrap_or(u32::MAX)
}

/// `NB_nt` for `kernel` launched with `threads` threads per block, with its inputs, as the
/// record the profile keeps.
pub(crate) fn occupancy(
    spec: &DeviceSpec,
    kernel: &str,
    threads: u32,
    res: &KernelResources,
) -> OccupancyRecord {
    let dynamic = 0;
    let per_sm = blocks_per_sm(
        spec,
        threads,
        res.regs_per_thread,
        res.static_smem_bytes + dynamic,
    );
    let nb = u64::from(spec.sm_count.max(1)) * u64::from(per_sm);
    OccupancyRecord {
        kernel: kernel.to_string(),
        threads,
        regs_per_thread: res.regs_per_thread,
        static_smem_bytes: res.static_smem_bytes,
        dynamic_smem_bytes: dynamic,
        blocks_per_sm: per_sm,
        nb_nt: u32::try_from(nb).unwrap_or(u32::MAX),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::hopper_like_spec;

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
        let s = hopper_like_spec();
        // Threads bound: 2048 / 256 = 8; registers 65536 / (32 * 256) = 8.
        assert_eq!(blocks_per_sm(&s, 256, 32, 0), 8);
        assert_eq!(occupancy(&s, "k", 256, &res(32, 0)).nb_nt, 132 * 8);
        // Registers bound: 65536 / (64 * 512) = 2 < 2048 / 512 = 4.
        assert_eq!(blocks_per_sm(&s, 512, 64, 0), 2);
        // Shared memory bound: 233472 / 48 KiB = 4 < 2048 / 128 = 16.
        assert_eq!(blocks_per_sm(&s, 128, 16, 48 << 10), 4);
        // Block-count bound: 2048 / 32 = 64 threads-wise, capped by 32 blocks per SM.
        assert_eq!(blocks_per_sm(&s, 32, 8, 0), 32);
        // 255 registers x 1024 threads do not fit one SM: still one block.
        assert_eq!(blocks_per_sm(&s, 1024, 255, 0), 1);
        // No register or shared-memory figure: only threads and blocks limit.
        assert_eq!(blocks_per_sm(&s, 64, 0, 0), 32);
        let r = occupancy(&s, "dot_vec2", 1024, &res(40, 256));
        assert_eq!(r.kernel, "dot_vec2");
        assert_eq!(r.threads, 1024);
        assert_eq!((r.regs_per_thread, r.static_smem_bytes), (40, 256));
        // Registers: 65536 / 40960 = 1; threads: 2.
        assert_eq!(r.blocks_per_sm, 1);
        assert_eq!(r.nb_nt, 132);
    }
}
