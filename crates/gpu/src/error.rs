//! The one error type of the GPU crate.
use cudarc::driver::DriverError;

/// Everything that can go wrong between the host and a CUDA device.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GpuError {
    /// A CUDA library (the driver `libcuda` or the compiler `libnvrtc`) could not be loaded.
    #[error("CUDA library {library} not found or unusable: {detail}")]
    LibraryMissing {
        /// "libcuda" or "libnvrtc".
        library: &'static str,
        /// What was tried and what to do about it.
        detail: String,
    },
    /// No CUDA device, or no device with the requested ordinal.
    #[error("no CUDA device with ordinal {ordinal} ({count} device(s) present)")]
    NoDevice {
        /// The ordinal asked for.
        ordinal: usize,
        /// How many devices the driver reports.
        count: usize,
    },
    /// A CUDA driver call failed.
    #[error("CUDA driver error during {during}: {source}")]
    Driver {
        /// What was being done.
        during: String,
        /// The driver's error code.
        #[source]
        source: DriverError,
    },
    /// NVRTC refused a kernel source; `log` is the compiler's own message.
    #[error("NVRTC could not compile {file} with options {options:?} ({code}):\n{log}")]
    Compile {
        /// Kernel file name (e.g. `dot.cu`).
        file: String,
        /// Options passed to NVRTC.
        options: Vec<String>,
        /// NVRTC's result code.
        code: String,
        /// The compiler log.
        log: String,
    },
    /// An NVRTC call other than the compilation itself failed.
    #[error("NVRTC error during {during}: {code}")]
    Nvrtc {
        /// What was being done.
        during: String,
        /// NVRTC's result code.
        code: String,
    },
    /// A kernel could not be launched as asked (bad configuration or arguments); nothing was
    /// queued.
    #[error("cannot launch {kernel}: {reason}")]
    Launch {
        /// Kernel entry point.
        kernel: String,
        /// What is wrong, with the values at fault.
        reason: String,
    },
    /// A host matrix or vector cannot be put on the device as given.
    #[error("invalid {what}: {reason}")]
    InvalidInput {
        /// What was being uploaded or used.
        what: String,
        /// What is wrong, with the position and value at fault.
        reason: String,
    },
    /// A format conversion on the device refused by the rules of the host conversions
    /// (`SparseError::TooMuchPadding` when the padding would exceed the limits given,
    /// `SparseError::TooLarge` when the result does not fit its index types); the result's
    /// arrays were not allocated.
    #[error(transparent)]
    Sparse(#[from] autopcg_sparse::SparseError),
    /// A compiled module lacks an expected entry point.
    #[error("kernel entry point {entry} not found in {file}")]
    MissingEntry {
        /// Kernel file name.
        file: String,
        /// Entry point asked for.
        entry: String,
    },
}

impl GpuError {
    /// Wraps a driver error with what was being done.
    pub fn driver(during: impl Into<String>, source: DriverError) -> Self {
        GpuError::Driver {
            during: during.into(),
            source,
        }
    }

    /// A launch-configuration or argument error for `kernel`.
    pub fn launch(kernel: impl std::fmt::Display, reason: impl Into<String>) -> Self {
        GpuError::Launch {
            kernel: kernel.to_string(),
            reason: reason.into(),
        }
    }
}

impl From<autopcg_catalog::LaunchError> for GpuError {
    fn from(e: autopcg_catalog::LaunchError) -> Self {
        GpuError::Launch {
            kernel: e.kernel,
            reason: e.reason,
        }
    }
}

/// Adds "during what" to a driver result.
pub(crate) trait DriverContext<T> {
    /// Maps a [`DriverError`] into [`GpuError::Driver`] naming `during`.
    fn during(self, during: impl FnOnce() -> String) -> Result<T, GpuError>;
}

impl<T> DriverContext<T> for Result<T, DriverError> {
    fn during(self, during: impl FnOnce() -> String) -> Result<T, GpuError> {
        self.map_err(|e| GpuError::driver(during(), e))
    }
}
