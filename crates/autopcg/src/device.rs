//! Where a solve runs, and opening a GPU without panicking on machines without CUDA (with the
//! `gpu` feature).
use std::fmt;
use std::str::FromStr;

#[cfg(feature = "gpu")]
use autopcg_gpu::GpuDevice;

/// Where a solve runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Device {
    /// A GPU when one is usable, else the CPU (with a note).
    #[default]
    Auto,
    /// The CPU (rayon threads).
    Cpu,
    /// A GPU; an error if none is usable (always, without the `gpu` feature).
    Gpu,
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Device::Auto => "auto",
            Device::Cpu => "cpu",
            Device::Gpu => "gpu",
        })
    }
}

impl FromStr for Device {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "auto" => Ok(Device::Auto),
            "cpu" => Ok(Device::Cpu),
            "gpu" => Ok(Device::Gpu),
            _ => Err(format!("unknown device '{s}' (expected auto, cpu or gpu)")),
        }
    }
}

/// Opens GPU `ordinal`, or says in one line why there is none.
#[cfg(feature = "gpu")]
pub fn open_gpu(ordinal: usize) -> Result<GpuDevice, String> {
    if !autopcg_gpu::gpu_available() {
        return Err("no usable NVIDIA GPU (CUDA driver not found or no device)".into());
    }
    GpuDevice::open(ordinal).map_err(|e| format!("GPU {ordinal} could not be opened: {e}"))
}

/// Starts opening GPU `ordinal` on a thread of its own, so that creating its context overlaps
/// the caller's work (reading a matrix): the next [`open_gpu`] of the device waits for it and
/// takes the handle. Without the `gpu` feature, or where no GPU is usable, it does nothing
/// visible (the later [`open_gpu`] says why there is no GPU).
pub fn open_gpu_ahead(ordinal: usize) {
    #[cfg(feature = "gpu")]
    GpuDevice::open_ahead(ordinal);
    #[cfg(not(feature = "gpu"))]
    let _ = ordinal;
}

/// [`open_gpu_ahead`] for a setup of a matrix of `rows` rows and `entries` stored entries
/// (both triangles): once the context exists, the same thread also pays the device's other
/// first-use costs that the setup's upload would pay (page-locked staging buffers, the memory
/// pool's growth, the load of the upload's checks; `GpuDevice::prepare_for_upload`), so that
/// a process's first setup runs as a later one would, as far as the caller's own work (reading
/// the matrix) lasts: once a setup waits for the device, what is not yet begun is left to it.
/// Sizes from a file's size line are enough ([`autopcg_sparse::mm::read_header`]); nothing is
/// allocated past the preparation.
pub fn open_gpu_ahead_for(ordinal: usize, rows: usize, entries: usize) {
    #[cfg(feature = "gpu")]
    GpuDevice::open_ahead_for(ordinal, rows, entries);
    #[cfg(not(feature = "gpu"))]
    let _ = (ordinal, rows, entries);
}

/// Waits for the opens [`open_gpu_ahead`] started that no [`open_gpu`] has taken yet; call it
/// before a process exits early (see `GpuDevice::finish_opens_ahead`). Nothing without the `gpu`
/// feature.
pub fn finish_gpu_opens_ahead() {
    #[cfg(feature = "gpu")]
    GpuDevice::finish_opens_ahead();
}
