//! The kernels of row-block PCG on the device: packing a block's send buffer (`gather_f64` in
//! `vector.cu`), adding the halo part's product (the add variants of the CSR row kernels in
//! `spmv_csr.cu`: `spmv_csr_scalar_add` and `spmv_csr_vector_add_L`, see
//! [`SpmvKernel::add_entry_point`]), and the three dots per block into a slot of a small
//! array, then summed over the blocks with the scalar recurrence (`dot3_slot`,
//! `dot3_slots_advance[_next]` in `dot.cu`).
use cudarc::driver::PushKernelArg;

use super::{check_len, Launch, PushGroups};
use crate::kernels::dot::Dot3Workspace;
use crate::kernels::spmv::SpmvKernel;
use crate::sources::{KernelSource, ModuleSpec, DOT_BLOCK_SIZES};
use crate::{CgScalars, DeviceCsr, DeviceVec, GpuDevice, GpuError, LaunchConfig};

/// `out[k] = src[idx[k]]` (`vector.cu`).
pub const GATHER: &str = "gather_f64";
/// `y += A x`, CSR, one thread per row (`spmv_csr.cu`); the vector variants are named by
/// [`SpmvKernel::add_entry_point`].
pub const SPMV_CSR_SCALAR_ADD: &str = "spmv_csr_scalar_add";
/// One block's three dots into its slot (`dot.cu`, needs `BLOCK_SIZE`).
pub const DOT3_SLOT: &str = "dot3_slot";
/// The sum of the slots and the recurrence for a given iteration (`dot.cu`).
pub const DOT3_SLOTS_ADVANCE: &str = "dot3_slots_advance";
/// The sum of the slots and the recurrence for the next iteration (`dot.cu`).
pub const DOT3_SLOTS_ADVANCE_NEXT: &str = "dot3_slots_advance_next";

/// Every entry point of this module with the module it lives in, for `block_size` threads
/// per block of the reductions.
pub fn entry_points(block_size: u32) -> Vec<(ModuleSpec, &'static str)> {
    let mut v = vec![(ModuleSpec::plain(KernelSource::Vector), GATHER)];
    v.extend(
        SpmvKernel::with_add_variant()
            .into_iter()
            .filter_map(SpmvKernel::add_entry_point)
            .map(|e| (ModuleSpec::plain(KernelSource::SpmvCsr), e)),
    );
    v.extend([
        (ModuleSpec::dot(block_size), DOT3_SLOT),
        (ModuleSpec::dot(block_size), DOT3_SLOTS_ADVANCE),
        (ModuleSpec::dot(block_size), DOT3_SLOTS_ADVANCE_NEXT),
    ]);
    v
}

/// A grid-stride launch of 256 threads per block covering `items` (at least one block).
pub fn grid_stride_config(items: usize) -> LaunchConfig {
    let blocks = items.div_ceil(256).clamp(1, 65_535) as u32;
    LaunchConfig::new(256, blocks)
}

/// Loads (compiling on first use) every kernel of this module for `block_size`.
pub fn preload(dev: &GpuDevice, block_size: u32) -> Result<(), GpuError> {
    for (spec, e) in entry_points(block_size) {
        dev.kernel(&spec, e)?;
    }
    Ok(())
}

/// Queues `out[k] = src[idx[k]]` for every `k < out.len()`. Every index must be below
/// `src.len()` (the caller's index lists are checked on the host before upload).
pub fn gather(
    dev: &GpuDevice,
    cfg: LaunchConfig,
    idx: &DeviceVec<u32>,
    src: &DeviceVec<f64>,
    out: &mut DeviceVec<f64>,
) -> Result<(), GpuError> {
    check_len(&GATHER, "idx", idx.len(), out.len())?;
    cfg.check(GATHER, dev.props())?;
    if out.is_empty() {
        return Ok(());
    }
    let n =
        u32::try_from(out.len()).map_err(|_| GpuError::launch(GATHER, "more than 2^32 entries"))?;
    let l = Launch::new(dev, &ModuleSpec::plain(KernelSource::Vector), GATHER, cfg)?;
    // SAFETY: matches `gather_f64(u32 n, const u32 *idx, const double *src, double *out)`;
    // idx and out hold n elements (checked), every idx entry is below src.len() (the caller's
    // contract), and out is distinct from src.
    unsafe {
        l.run(|b| {
            b.arg(&n).arg(&idx.buf).arg(&src.buf).arg(&mut out.buf);
        })
    }
}

/// Queues `y += A x` with the add variant of `kernel` ([`SpmvKernel::add_entry_point`]: CSR
/// scalar, one thread per row, or CSR vector with L lanes per row) launched with `cfg`. The
/// launch must fit the kernel: a compiled lane count, and threads per block a multiple of 32
/// for the vector kernels.
pub fn spmv_csr_add(
    dev: &GpuDevice,
    a: &DeviceCsr,
    kernel: SpmvKernel,
    cfg: LaunchConfig,
    x: &DeviceVec<f64>,
    y: &mut DeviceVec<f64>,
) -> Result<(), GpuError> {
    let entry = kernel.add_entry_point().ok_or_else(|| {
        GpuError::launch(
            kernel,
            "has no add variant (only CSR scalar and CSR vector add into y)",
        )
    })?;
    check_len(&entry, "x", x.len(), a.ncols())?;
    check_len(&entry, "y", y.len(), a.nrows())?;
    // The device's limits, and whole warps for the vector kernels (an error otherwise).
    kernel.check_launch(cfg, dev.props())?;
    if a.nrows() == 0 {
        return Ok(());
    }
    let nrows = a.nrows() as u32;
    let l = Launch::new(dev, &ModuleSpec::plain(KernelSource::SpmvCsr), entry, cfg)?;
    // SAFETY: matches `spmv_csr_scalar_add` / `spmv_csr_vector_add_L(u32 nrows,
    // const u32 *indptr, const u32 *indices, const double *vals, const double *x, double *y)`;
    // the arrays were validated on upload (indices < ncols = len(x)), y holds nrows (checked)
    // and is distinct from x; threads are whole warps for the vector kernels (checked), whose
    // lane count is one the module is compiled for (checked).
    unsafe {
        l.run(|b| {
            b.arg(&nrows).csr(a).arg(&x.buf).arg(&mut y.buf);
        })
    }
}

/// Queues one block's gamma = (r, u), delta = (w, u), rr = (r, r) into
/// `slots[3 slot .. 3 slot + 3]`.
#[allow(clippy::too_many_arguments)]
pub fn dot3_slot(
    dev: &GpuDevice,
    cfg: LaunchConfig,
    r: &DeviceVec<f64>,
    u: &DeviceVec<f64>,
    w: &DeviceVec<f64>,
    ws: &mut Dot3Workspace,
    slots: &mut DeviceVec<f64>,
    slot: u32,
) -> Result<(), GpuError> {
    check_len(&DOT3_SLOT, "u", u.len(), r.len())?;
    check_len(&DOT3_SLOT, "w", w.len(), r.len())?;
    cfg.check(DOT3_SLOT, dev.props())?;
    check_dot_threads(DOT3_SLOT, cfg.threads)?;
    if cfg.blocks > ws.max_blocks() {
        return Err(GpuError::launch(
            DOT3_SLOT,
            format!(
                "{} blocks but the workspace holds partial sums for {}",
                cfg.blocks,
                ws.max_blocks()
            ),
        ));
    }
    if 3 * (slot as usize + 1) > slots.len() {
        return Err(GpuError::launch(
            DOT3_SLOT,
            format!("slot {slot} outside {} slot entries", slots.len()),
        ));
    }
    let n = r.len() as u64;
    let l = Launch::new(dev, &ModuleSpec::dot(cfg.threads), DOT3_SLOT, cfg)?;
    // SAFETY: matches `dot3_slot(u64 n, const double *r, const double *u, const double *w,
    // double *partial, u32 *counter, double *slots, u32 slot)`; r, u, w hold n elements
    // (checked), partial 3 * max_blocks >= 3 * blocks (checked), the counter is zero between
    // launches, slots holds at least 3 (slot + 1) (checked); BLOCK_SIZE = threads.
    unsafe {
        l.run(|b| {
            b.arg(&n)
                .dot3_inputs([r, u, w], ws)
                .arg(&mut slots.buf)
                .arg(&slot);
        })
    }
}

/// Queues the sum of the first `m` slot triples (in slot order) and the recurrence step into
/// `scalars`: for `iteration` (0 = the start) when given, else for the iteration after the
/// last one the scalar buffer recorded. One block of `threads` threads (a reduction block size
/// the module is compiled for).
pub fn dot3_slots_advance(
    dev: &GpuDevice,
    threads: u32,
    slots: &DeviceVec<f64>,
    m: u32,
    scalars: &mut CgScalars,
    iteration: Option<u32>,
) -> Result<(), GpuError> {
    let name = match iteration {
        Some(_) => DOT3_SLOTS_ADVANCE,
        None => DOT3_SLOTS_ADVANCE_NEXT,
    };
    check_dot_threads(name, threads)?;
    if 3 * m as usize > slots.len() {
        return Err(GpuError::launch(
            name,
            format!("{m} slots but the array holds {} entries", slots.len()),
        ));
    }
    let cap = scalars.capacity();
    if let Some(it) = iteration {
        if it >= cap {
            return Err(GpuError::launch(
                name,
                format!("iteration {it} is beyond the history capacity {cap}"),
            ));
        }
    }
    let cfg = LaunchConfig::new(threads, 1);
    let l = Launch::new(dev, &ModuleSpec::dot(threads), name, cfg)?;
    // SAFETY: matches `dot3_slots_advance(u32 m, const double *slots, double *scalars,
    // double *history, u32 history_cap, u32 iteration)` (with an iteration) or
    // `dot3_slots_advance_next(u32 m, const double *slots, double *scalars, double *history,
    // u32 history_cap)` (without); slots holds 3 m entries (checked), scalars CG_SCALARS_LEN,
    // history 3 * history_cap; one block of BLOCK_SIZE = threads.
    unsafe {
        l.run(|b| {
            b.arg(&m)
                .arg(&slots.buf)
                .recurrence(scalars, &cap, iteration.as_ref());
        })
    }
}

fn check_dot_threads(kernel: &str, threads: u32) -> Result<(), GpuError> {
    if !DOT_BLOCK_SIZES.contains(&threads) {
        return Err(GpuError::launch(
            kernel,
            format!("{threads} threads per block; reductions are compiled for {DOT_BLOCK_SIZES:?}"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_add_variant_is_preloaded_from_the_csr_module() {
        let csr: Vec<&str> = entry_points(256)
            .into_iter()
            .filter(|(spec, _)| *spec == ModuleSpec::plain(KernelSource::SpmvCsr))
            .map(|(_, e)| e)
            .collect();
        assert_eq!(
            csr,
            [
                SPMV_CSR_SCALAR_ADD,
                "spmv_csr_vector_add_2",
                "spmv_csr_vector_add_4",
                "spmv_csr_vector_add_8",
                "spmv_csr_vector_add_16",
                "spmv_csr_vector_add_32",
            ]
        );
        // And the catalog the compile test checks lists them under spmv_csr.cu.
        let (_, listed) = crate::sources::catalog()
            .into_iter()
            .find(|(spec, _)| *spec == ModuleSpec::plain(KernelSource::SpmvCsr))
            .unwrap();
        for e in csr {
            assert!(listed.iter().any(|l| l == e), "{e} not in {listed:?}");
        }
    }
}
