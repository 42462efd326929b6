//! Eq. 3-2 of method.md: the smallest block count that fills the machine with one kernel,
//!
//! ```text
//! NB_nt = N_sm * min(N_reg / N_reg_per_block, N_smem / N_smem_per_block,
//!                    N_threads_per_sm / nt, N_blocks_per_sm)
//! ```
//!
//! with integer divisions. `N_reg_per_block = regs_per_thread * nt` and `N_smem_per_block` is
//! the block's static plus dynamic shared memory, both read from the compiled kernel.
//!
//! The formula is applied as written: register use is **not** rounded up to the hardware's
//! allocation granularity (registers are handed out per warp in units of 256 on current NVIDIA
//! GPUs, i.e. 8 per thread), and the shared memory the driver reserves per block is not added.
//! Both only matter when registers or shared memory set the minimum, and then this count can
//! be higher than what the hardware keeps resident (17 registers/thread count as 17 here and
//! as 24 on the hardware). `NB_nt` is only the unit of the candidate block counts
//! `NB_nt * i`, `i = 1..20`, which the reduction sweep measures and the fits choose among, so
//! the choice never rests on this count being exact. Profiles record the inputs, so every count can be recomputed.
use serde::{Deserialize, Serialize};

use crate::DeviceProps;

/// Eq. 3-2 has no valid count for the inputs (the message names the term at fault).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct OccupancyError(pub String);

/// The term of eq. 3-2 that sets the minimum (the first one in this order on a tie).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Limiter {
    /// `N_reg / N_reg_per_block`.
    Registers,
    /// `N_smem / N_smem_per_block`.
    SharedMemory,
    /// `N_threads_per_sm / nt`.
    Threads,
    /// `N_blocks_per_sm`.
    Blocks,
}

/// The result of eq. 3-2 for one kernel at one block size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Occupancy {
    /// Resident blocks per SM: the minimum of the four terms.
    pub blocks_per_sm: u32,
    /// `NB_nt = sm_count * blocks_per_sm`.
    pub nb_nt: u32,
    /// The term that set the minimum.
    pub limiter: Limiter,
}

/// Eq. 3-2 for a kernel of `regs_per_thread` registers per thread and `smem_bytes` shared
/// memory per block (static plus dynamic) launched with `threads` threads per block.
///
/// A kernel without shared memory (`smem_bytes == 0`) has no shared-memory term, and one that
/// reports no registers (`regs_per_thread == 0`) no register term. Errors when `threads` is 0
/// or above the device's block limit, when the device reports no SM, and when a block does not
/// fit on an SM at all (a zero term): the error names the term.
pub fn occupancy(
    dev: &DeviceProps,
    threads: u32,
    regs_per_thread: u32,
    smem_bytes: u32,
) -> Result<Occupancy, OccupancyError> {
    let bad = |why: String| {
        OccupancyError(format!(
            "eq. 3-2 on {} with {threads} threads, {regs_per_thread} registers/thread, \
             {smem_bytes} B shared memory: {why}",
            dev.name
        ))
    };
    if threads == 0 {
        return Err(bad("no threads per block".into()));
    }
    if dev.max_threads_per_block > 0 && threads > dev.max_threads_per_block {
        return Err(bad(format!(
            "the device allows at most {} threads per block",
            dev.max_threads_per_block
        )));
    }
    if dev.sm_count == 0 {
        return Err(bad("the device reports no SM".into()));
    }
    let nt = u64::from(threads);
    let mut terms: Vec<(Limiter, u64)> = Vec::with_capacity(4);
    if regs_per_thread > 0 {
        let per_block = u64::from(regs_per_thread) * nt;
        terms.push((Limiter::Registers, u64::from(dev.regs_per_sm) / per_block));
    }
    if smem_bytes > 0 {
        terms.push((
            Limiter::SharedMemory,
            u64::from(dev.smem_per_sm) / u64::from(smem_bytes),
        ));
    }
    terms.push((Limiter::Threads, u64::from(dev.max_threads_per_sm) / nt));
    terms.push((Limiter::Blocks, u64::from(dev.max_blocks_per_sm)));
    // `terms` is never empty: the threads and blocks terms are always there.
    let (limiter, per_sm) = terms
        .iter()
        .copied()
        .fold((Limiter::Blocks, u64::MAX), |best, t| {
            if t.1 < best.1 {
                t
            } else {
                best
            }
        });
    if per_sm == 0 {
        let what = match limiter {
            Limiter::Registers => format!(
                "a block needs {} registers, an SM has {}",
                u64::from(regs_per_thread) * nt,
                dev.regs_per_sm
            ),
            Limiter::SharedMemory => format!(
                "a block needs {smem_bytes} B of shared memory, an SM has {}",
                dev.smem_per_sm
            ),
            Limiter::Threads => format!(
                "a block has more threads than an SM holds ({})",
                dev.max_threads_per_sm
            ),
            Limiter::Blocks => "the device reports 0 resident blocks per SM".into(),
        };
        return Err(bad(format!("no block fits on an SM: {what}")));
    }
    let nb = u64::from(dev.sm_count) * per_sm;
    let nb_nt = u32::try_from(nb).map_err(|_| bad(format!("NB_nt = {nb} overflows")))?;
    Ok(Occupancy {
        // per_sm <= max_blocks_per_sm, a u32.
        blocks_per_sm: per_sm as u32,
        nb_nt,
        limiter,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// H100 SXM / H200-like limits (64 Ki registers, 228 KiB shared memory, 2048 threads and
    /// 32 blocks per SM) with `sm_count` SMs.
    fn hopper(sm_count: u32) -> DeviceProps {
        DeviceProps {
            sm_count,
            ..DeviceProps::hopper_like()
        }
    }

    #[test]
    fn each_term_can_be_the_limit() {
        let h = hopper(132);
        // Registers: 64 x 256 = 16384 per block, 65536 / 16384 = 4 (threads allow 8).
        let o = occupancy(&h, 256, 64, 0).unwrap();
        assert_eq!(
            (o.blocks_per_sm, o.nb_nt, o.limiter),
            (4, 528, Limiter::Registers)
        );
        // Shared memory: 233472 / 49152 = 4 (registers allow 32, threads 16).
        let o = occupancy(&h, 128, 16, 49_152).unwrap();
        assert_eq!(
            (o.blocks_per_sm, o.nb_nt, o.limiter),
            (4, 528, Limiter::SharedMemory)
        );
        // Threads: 2048 / 512 = 4 (registers allow 8, shared memory 57), on 114 SMs (H100 PCIe).
        let o = occupancy(&hopper(114), 512, 16, 4096).unwrap();
        assert_eq!(
            (o.blocks_per_sm, o.nb_nt, o.limiter),
            (4, 456, Limiter::Threads)
        );
        // Blocks: a device with 16 resident blocks per SM; 64 threads of 16 registers would
        // allow 64 by registers and 32 by threads.
        let mut d = hopper(132);
        d.max_blocks_per_sm = 16;
        let o = occupancy(&d, 64, 16, 0).unwrap();
        assert_eq!(
            (o.blocks_per_sm, o.nb_nt, o.limiter),
            (16, 2112, Limiter::Blocks)
        );
        // Integer division: 65536 / (40 x 256) = 6.4 -> 6.
        let o = occupancy(&h, 256, 40, 0).unwrap();
        assert_eq!((o.blocks_per_sm, o.nb_nt), (6, 792));
        // A tie goes to the first term: registers 65536 / (32 x 256) = 8 = threads 2048 / 256.
        let o = occupancy(&h, 256, 32, 0).unwrap();
        assert_eq!((o.blocks_per_sm, o.limiter), (8, Limiter::Registers));
    }

    #[test]
    fn blocks_that_do_not_fit_are_errors() {
        let h = hopper(132);
        // 255 x 1024 registers > 65536.
        let e = occupancy(&h, 1024, 255, 0).unwrap_err().to_string();
        assert!(e.contains("registers"), "{e}");
        let e = occupancy(&h, 256, 16, 240 * 1024).unwrap_err().to_string();
        assert!(e.contains("shared memory"), "{e}");
        assert!(occupancy(&h, 0, 16, 0).is_err());
        assert!(occupancy(&h, 2048, 16, 0).is_err()); // above the block limit
        let mut d = hopper(132);
        d.max_threads_per_block = 4096;
        let e = occupancy(&d, 4096, 8, 0).unwrap_err().to_string();
        assert!(e.contains("threads"), "{e}");
        assert!(occupancy(&hopper(0), 256, 16, 0).is_err());
    }
}
