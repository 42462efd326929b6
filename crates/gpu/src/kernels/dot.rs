//! `dot.cu`: the reduction ladder, its GPU second stage, and the fused three-dot reduction with
//! the Chronopoulos–Gear recurrence on the device.
//!
//! Every kernel of `dot.cu` is compiled per block size (`-DBLOCK_SIZE`, one of
//! [`crate::DOT_BLOCK_SIZES`]) and must be launched with exactly that many threads; the wrappers
//! pick the module from `cfg.threads`.
use std::fmt;

use cudarc::driver::PushKernelArg;

use super::{check_covers, check_len, Launch, PushGroups};
use crate::sources::{ModuleSpec, DOT_BLOCK_SIZES};
use crate::{CgScalars, DeviceVec, GpuDevice, GpuError, LaunchConfig};

pub use autopcg_catalog::kernels::DOT_FINISH;
pub use autopcg_catalog::{Dot3Kernel, DotKernel, Reduction};

fn check_block_size(kernel: &dyn fmt::Display, cfg: LaunchConfig) -> Result<(), GpuError> {
    if !DOT_BLOCK_SIZES.contains(&cfg.threads) {
        return Err(GpuError::launch(
            kernel,
            format!(
                "{} threads per block; reductions are compiled for {DOT_BLOCK_SIZES:?}",
                cfg.threads
            ),
        ));
    }
    Ok(())
}

fn check_blocks(
    kernel: &dyn fmt::Display,
    cfg: LaunchConfig,
    max_blocks: u32,
) -> Result<(), GpuError> {
    let blocks = cfg.blocks;
    if blocks > max_blocks {
        let why = format!("{blocks} blocks but the workspace holds partial sums for {max_blocks}");
        return Err(GpuError::launch(kernel, why));
    }
    Ok(())
}

/// Device memory a dot product needs: per-block partial sums, the ticket counter of the
/// last-block variant and the result.
#[derive(Debug)]
pub struct DotWorkspace {
    partial: DeviceVec<f64>,
    counter: DeviceVec<u32>,
    out: DeviceVec<f64>,
    max_blocks: u32,
}

impl DotWorkspace {
    /// Room for launches of up to `max_blocks` blocks.
    pub fn new(dev: &GpuDevice, max_blocks: u32) -> Result<DotWorkspace, GpuError> {
        Ok(DotWorkspace {
            partial: dev.alloc_zeros(max_blocks.max(1) as usize)?,
            counter: dev.alloc_zeros(1)?,
            out: dev.alloc_zeros(1)?,
            max_blocks: max_blocks.max(1),
        })
    }

    /// Largest block count it supports.
    pub fn max_blocks(&self) -> u32 {
        self.max_blocks
    }

    /// The last result (waits for queued work).
    pub fn result(&self, dev: &GpuDevice) -> Result<f64, GpuError> {
        Ok(dev.download(&self.out)?[0])
    }
}

/// Queues `(x, y)` with the given rung; the result lands in `ws` on the device (read it with
/// [`DotWorkspace::result`]). Every rung but [`DotKernel::LastBlock`] launches `dot_finish`
/// (one block of `cfg.threads`) after the first stage.
pub fn dot(
    dev: &GpuDevice,
    kernel: DotKernel,
    cfg: LaunchConfig,
    x: &DeviceVec<f64>,
    y: &DeviceVec<f64>,
    ws: &mut DotWorkspace,
) -> Result<(), GpuError> {
    check_len(&kernel, "y", y.len(), x.len())?;
    cfg.check(kernel, dev.props())?;
    check_block_size(&kernel, cfg)?;
    check_blocks(&kernel, cfg, ws.max_blocks)?;
    let n = x.len() as u64;
    if let Some(e) = kernel.elements_per_thread() {
        check_covers(&kernel, cfg, n.div_ceil(u64::from(e)))?;
    }
    let spec = ModuleSpec::dot(cfg.threads);
    let main = Launch::new(dev, &spec, &kernel.to_string(), cfg)?;
    if kernel == DotKernel::LastBlock {
        // SAFETY: matches `dot_last_block(u64 n, const double *x, const double *y,
        // double *partial, u32 *counter, double *out)`; x and y hold n elements, partial
        // holds >= blocks entries (checked), counter and out one each; the counter is zero
        // between launches (zeroed at allocation, reset by the kernel).
        return unsafe {
            main.run(|b| {
                b.arg(&n)
                    .arg(&x.buf)
                    .arg(&y.buf)
                    .arg(&mut ws.partial.buf)
                    .arg(&mut ws.counter.buf)
                    .arg(&mut ws.out.buf);
            })
        };
    }
    // SAFETY: matches `dot_<rung>(u64 n, const double *x, const double *y, double *partial)`;
    // x and y hold n elements, partial >= blocks entries (checked), threads == BLOCK_SIZE of
    // the module (it was chosen from cfg.threads).
    unsafe {
        main.run(|b| {
            b.arg(&n).arg(&x.buf).arg(&y.buf).arg(&mut ws.partial.buf);
        })
    }?;
    let m = cfg.blocks;
    let fin_cfg = LaunchConfig::new(cfg.threads, 1);
    let fin = Launch::new(dev, &spec, DOT_FINISH, fin_cfg)?;
    // SAFETY: matches `dot_finish(u32 m, const double *partial, double *out)`; partial holds
    // m = blocks sums written by the first stage, out one element; one block of BLOCK_SIZE.
    unsafe {
        fin.run(|b| {
            b.arg(&m).arg(&ws.partial.buf).arg(&mut ws.out.buf);
        })
    }
}

/// [`dot`], then waits and returns the value.
pub fn dot_value(
    dev: &GpuDevice,
    kernel: DotKernel,
    cfg: LaunchConfig,
    x: &DeviceVec<f64>,
    y: &DeviceVec<f64>,
    ws: &mut DotWorkspace,
) -> Result<f64, GpuError> {
    dot(dev, kernel, cfg, x, y, ws)?;
    ws.result(dev)
}

/// Device memory of the fused three-dot reduction: 3 partial sums per block and the ticket
/// counter.
#[derive(Debug)]
pub struct Dot3Workspace {
    pub(crate) partial: DeviceVec<f64>,
    pub(crate) counter: DeviceVec<u32>,
    max_blocks: u32,
}

impl Dot3Workspace {
    /// Room for launches of up to `max_blocks` blocks.
    pub fn new(dev: &GpuDevice, max_blocks: u32) -> Result<Dot3Workspace, GpuError> {
        Ok(Dot3Workspace {
            partial: dev.alloc_zeros(3 * max_blocks.max(1) as usize)?,
            counter: dev.alloc_zeros(1)?,
            max_blocks: max_blocks.max(1),
        })
    }

    /// Largest block count it supports.
    pub fn max_blocks(&self) -> u32 {
        self.max_blocks
    }
}

/// The reduction of one PCG iteration: gamma = (r, u), delta = (w, u), rr = (r, r) in one pass,
/// then on the device the scalar recurrence for `iteration` (0 = the start; see
/// `kernels/cg_scalars.cuh`) updating `scalars` and appending the three dots to its history.
/// `iteration` must be below the history capacity.
#[allow(clippy::too_many_arguments)]
pub fn dot3_advance(
    dev: &GpuDevice,
    kernel: Dot3Kernel,
    cfg: LaunchConfig,
    r: &DeviceVec<f64>,
    u: &DeviceVec<f64>,
    w: &DeviceVec<f64>,
    ws: &mut Dot3Workspace,
    scalars: &mut CgScalars,
    iteration: u32,
) -> Result<(), GpuError> {
    dot3(dev, kernel, cfg, [r, u, w], ws, scalars, Some(iteration))
}

/// As [`dot3_advance`], but for the iteration after the one the scalar buffer last recorded
/// (its `CG_ITER` slot plus one) instead of an iteration given by the host: the launch
/// arguments are then the same every iteration, so the launch can be captured once in a CUDA
/// graph and replayed. Only for iterations after a start (iteration 0 goes through
/// [`dot3_advance`]). After a halt the device iteration stops advancing; the dots of later calls
/// go to the history slot just past the halting iteration, when the history has room for it,
/// and are dropped otherwise. The caller keeps the number of iterations queued below the history
/// capacity so that nothing else is dropped.
#[allow(clippy::too_many_arguments)]
pub fn dot3_advance_next(
    dev: &GpuDevice,
    kernel: Dot3Kernel,
    cfg: LaunchConfig,
    r: &DeviceVec<f64>,
    u: &DeviceVec<f64>,
    w: &DeviceVec<f64>,
    ws: &mut Dot3Workspace,
    scalars: &mut CgScalars,
) -> Result<(), GpuError> {
    dot3(dev, kernel, cfg, [r, u, w], ws, scalars, None)
}

/// [`dot3_advance`] for `Some(iteration)`, [`dot3_advance_next`] for `None`. The entry points
/// of the two take the same arguments but for the iteration, which only the first is given
/// (as its last argument).
fn dot3(
    dev: &GpuDevice,
    kernel: Dot3Kernel,
    cfg: LaunchConfig,
    [r, u, w]: [&DeviceVec<f64>; 3],
    ws: &mut Dot3Workspace,
    scalars: &mut CgScalars,
    iteration: Option<u32>,
) -> Result<(), GpuError> {
    check_len(&kernel, "u", u.len(), r.len())?;
    check_len(&kernel, "w", w.len(), r.len())?;
    cfg.check(kernel, dev.props())?;
    check_block_size(&kernel, cfg)?;
    check_blocks(&kernel, cfg, ws.max_blocks)?;
    if let Some(iteration) = iteration.filter(|&i| i >= scalars.capacity()) {
        return Err(GpuError::launch(
            kernel,
            format!(
                "iteration {iteration} is beyond the history capacity {}",
                scalars.capacity()
            ),
        ));
    }
    let n = r.len() as u64;
    let cap = scalars.capacity();
    let spec = ModuleSpec::dot(cfg.threads);
    let entries = match iteration {
        Some(_) => kernel.entry_points(),
        None => kernel.next_entry_points(),
    };
    let main = Launch::new(dev, &spec, entries[0], cfg)?;
    match kernel {
        Dot3Kernel::LastBlock => {
            // SAFETY: matches `dot3_last_block(u64 n, const double *r, const double *u,
            // const double *w, double *partial, u32 *counter, double *scalars,
            // double *history, u32 history_cap, u32 iteration)` and `dot3_last_block_next`
            // (the same without the iteration; the iteration is pushed exactly when the entry
            // point is `dot3_last_block`); r, u, w hold n elements, partial 3 * max_blocks >=
            // 3 * blocks, scalars CG_SCALARS_LEN, history 3 * history_cap (the kernels write
            // only below it); the counter is zero between launches.
            unsafe {
                main.run(|b| {
                    b.arg(&n).dot3_inputs([r, u, w], ws).recurrence(
                        scalars,
                        &cap,
                        iteration.as_ref(),
                    );
                })
            }
        }
        Dot3Kernel::TwoPass => {
            // SAFETY: matches `dot3_two_pass(u64 n, const double *r, const double *u,
            // const double *w, double *partial)`; r, u, w hold n elements, partial
            // 3 * max_blocks >= 3 * blocks entries.
            unsafe {
                main.run(|b| {
                    b.arg(&n)
                        .arg(&r.buf)
                        .arg(&u.buf)
                        .arg(&w.buf)
                        .arg(&mut ws.partial.buf);
                })
            }?;
            let m = cfg.blocks;
            let fin_cfg = LaunchConfig::new(cfg.threads, 1);
            let fin = Launch::new(dev, &spec, entries[1], fin_cfg)?;
            // SAFETY: matches `dot3_finish(u32 m, const double *partial, double *scalars,
            // double *history, u32 history_cap, u32 iteration)` and `dot3_finish_next` (the
            // same without the iteration; the iteration is pushed exactly when the entry point
            // is `dot3_finish`); partial holds the 3 * m sums of the first stage laid out by
            // its block count m; one block of BLOCK_SIZE.
            unsafe {
                fin.run(|b| {
                    b.arg(&m)
                        .arg(&ws.partial.buf)
                        .recurrence(scalars, &cap, iteration.as_ref());
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_entry_points() {
        let mut names: Vec<String> = DotKernel::ALL.iter().map(|k| k.to_string()).collect();
        names.push(DOT_FINISH.into());
        for k in Dot3Kernel::ALL {
            names.extend(k.entry_points().iter().map(|s| s.to_string()));
            names.extend(
                k.next_entry_points()
                    .iter()
                    .filter(|s| !k.entry_points().contains(s))
                    .map(|s| s.to_string()),
            );
        }
        let n = names.len();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), n);
        assert_eq!(Dot3Kernel::LastBlock.to_string(), "dot3_last_block");
    }
}
