//! Errors of the catalogue: a name that is no kernel, format or policy, and a launch the device
//! cannot run.
use std::fmt;

/// A string that names no member of a catalogue type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} '{text}' (expected {expected})")]
pub struct ParseError {
    /// What was being parsed ("SpMV kernel", "format"...).
    pub what: &'static str,
    /// The text.
    pub text: String,
    /// What would have been accepted, in words.
    pub expected: String,
}

impl ParseError {
    pub(crate) fn new(what: &'static str, text: &str, expected: impl Into<String>) -> Self {
        ParseError {
            what,
            text: text.to_string(),
            expected: expected.into(),
        }
    }
}

/// A launch configuration a kernel or device cannot run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kernel}: {reason}")]
pub struct LaunchError {
    /// The kernel (entry point or a description of the step).
    pub kernel: String,
    /// Why.
    pub reason: String,
}

impl LaunchError {
    /// An error for `kernel`.
    pub fn new(kernel: impl fmt::Display, reason: impl Into<String>) -> Self {
        LaunchError {
            kernel: kernel.to_string(),
            reason: reason.into(),
        }
    }
}
