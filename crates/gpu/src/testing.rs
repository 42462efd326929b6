//! How GPU and NVRTC tests get what they need or skip.
//!
//! Without a device (or without NVRTC) a test prints one line and returns; with
//! `AUTOPCG_REQUIRE_GPU=1` the same situation is an error, so a GPU host cannot pass its tests
//! by skipping them. Other crates' GPU tests use the same functions.
use crate::probe::{gpu_required, nvrtc_version, REQUIRE_GPU_ENV};
use crate::{DeviceProps, GpuDevice, GpuError};

/// Device 0 for the test `name`; `Ok(None)` (after printing one line) when there is none and
/// none is required, `Err` when `AUTOPCG_REQUIRE_GPU=1` and no device opens.
pub fn test_device(name: &str) -> Result<Option<GpuDevice>, GpuError> {
    match GpuDevice::open(0) {
        Ok(d) => Ok(Some(d)),
        Err(e) if gpu_required() => Err(e),
        Err(e) => {
            println!(
                "{name}: skipped, no CUDA device ({e}); set {REQUIRE_GPU_ENV}=1 to fail instead"
            );
            Ok(None)
        }
    }
}

/// Whether NVRTC is usable for the test `name`; `Ok(false)` (after printing one line) when it
/// is not and no GPU is required, `Err` when `AUTOPCG_REQUIRE_GPU=1`.
pub fn test_nvrtc(name: &str) -> Result<bool, GpuError> {
    match nvrtc_version() {
        Ok(_) => Ok(true),
        Err(e) if gpu_required() => Err(e),
        Err(e) => {
            println!("{name}: skipped, NVRTC not loadable ({e}); set {REQUIRE_GPU_ENV}=1 to fail instead");
            Ok(false)
        }
    }
}

/// Properties of an H100-like device (132 SMs, compute capability 9.0), for CPU tests of launch
/// rules and plans that need a [`DeviceProps`] without a GPU.
pub fn hopper_like_props() -> DeviceProps {
    DeviceProps::hopper_like()
}
