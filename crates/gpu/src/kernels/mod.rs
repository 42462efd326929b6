//! Typed launch wrappers, one Rust function per kernel family, and one enum per family whose
//! `Display` is the CUDA entry-point name (the string the profiler records and the model
//! predicts).
//!
//! Every wrapper checks lengths and the launch configuration before queuing anything, returns
//! without launching when there is no work, and does not wait for the kernel to finish.
use std::fmt::Display;

use crate::GpuError;

pub mod blocks;
pub mod convert;
pub mod dot;
pub mod precond;
pub mod spmv;
pub mod vector;

/// Fails unless `got == want`, naming the kernel and the argument.
pub(crate) fn check_len(
    kernel: &dyn Display,
    what: &str,
    got: usize,
    want: usize,
) -> Result<(), GpuError> {
    if got != want {
        return Err(GpuError::launch(
            kernel,
            format!("{what} has {got} elements, expected {want}"),
        ));
    }
    Ok(())
}

/// Fails unless a one-item-per-thread launch covers `items`.
pub(crate) fn check_covers(
    kernel: &dyn Display,
    cfg: crate::LaunchConfig,
    items: u64,
) -> Result<(), GpuError> {
    if cfg.total_threads() < items {
        let need = items.div_ceil(u64::from(cfg.threads.max(1)));
        return Err(GpuError::launch(
            kernel,
            format!(
                "{} blocks of {} threads cover {} of {items} items; it needs at least {need} blocks",
                cfg.blocks,
                cfg.threads,
                cfg.total_threads()
            ),
        ));
    }
    Ok(())
}

/// Maps a launch failure to [`GpuError::Driver`] naming the kernel and configuration.
pub(crate) fn launched(
    r: Result<
        Option<(cudarc::driver::CudaEvent, cudarc::driver::CudaEvent)>,
        cudarc::driver::DriverError,
    >,
    kernel: &dyn Display,
    cfg: crate::LaunchConfig,
) -> Result<(), GpuError> {
    r.map(|_| ())
        .map_err(|e| GpuError::driver(format!("launching {kernel} with {cfg}"), e))
}
