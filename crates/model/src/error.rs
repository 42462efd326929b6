//! The model crate's error type.
use std::path::PathBuf;

/// What can go wrong reading profiles, fitting models or loading model files.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ModelError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A line of a profile or a model file is not what the schema says.
    #[error("{path}:{line}: {reason}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// 1-based line (1 for a whole-file JSON document).
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// A file was written by another schema version.
    #[error("{path}: schema version {found}, this build reads {expected}")]
    Schema {
        /// The file.
        path: PathBuf,
        /// Version in the file.
        found: u32,
        /// Version this build reads and writes.
        expected: u32,
    },
    /// A model file does not belong to this device.
    #[error("model file {path} is for {file_device:?}, not for {device:?}")]
    WrongDevice {
        /// The file.
        path: PathBuf,
        /// Device named in the file.
        file_device: String,
        /// Device asked for.
        device: String,
    },
    /// The data cannot support the fit asked for (too few points, no valid record...).
    #[error("cannot fit {what}: {reason}")]
    Fit {
        /// What was being fitted.
        what: String,
        /// Why not.
        reason: String,
    },
    /// A model file is internally inconsistent.
    #[error("{path}: invalid model: {reason}")]
    Invalid {
        /// The file (or `<memory>`).
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A parameter is out of range.
    #[error("invalid parameter: {0}")]
    InvalidParameter(String),
}
