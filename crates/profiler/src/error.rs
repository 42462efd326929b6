//! The profiler's error type.
use std::path::PathBuf;

use autopcg_gpu::GpuError;
use autopcg_model::ModelError;
use autopcg_sparse::SparseError;

/// What can stop a sweep.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProfilerError {
    /// The GPU failed (driver, compilation, launch).
    #[error(transparent)]
    Gpu(#[from] GpuError),
    /// The profile file could not be read or written.
    #[error(transparent)]
    Model(#[from] ModelError),
    /// A benchmark matrix could not be built.
    #[error("benchmark matrix {id}: {source}")]
    Matrix {
        /// The matrix identifier.
        id: String,
        /// The cause.
        source: SparseError,
    },
    /// A sweep option is out of range.
    #[error("invalid sweep option: {0}")]
    InvalidOption(String),
    /// An existing profile was measured with other settings than this run.
    #[error("{path}: {reason}; use another --profile file or remove this one")]
    ProfileMismatch {
        /// The profile file.
        path: PathBuf,
        /// What differs.
        reason: String,
    },
    /// A measurement source reported a failure that is not a GPU error.
    #[error("measurement failed: {0}")]
    Measurement(String),
}
