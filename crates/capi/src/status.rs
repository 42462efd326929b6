//! Status codes, the per-thread last error message, and the guard every entry point runs its
//! body in: errors become a status code and a message, a panic becomes
//! [`AUTOPCG_ERR_INTERNAL`] and never unwinds into the caller.
use std::cell::RefCell;
use std::ffi::{c_char, c_int, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use autopcg::{Error, PcgError, SolveFailure, SparseError};

/// Success.
pub const AUTOPCG_OK: c_int = 0;
/// Bad input: a null pointer, a size or index out of range, a non-finite value, an unknown
/// option, a matrix that is not symmetric (or holds one triangle only), a model file that
/// cannot be read.
pub const AUTOPCG_ERR_BAD_INPUT: c_int = 1;
/// The solve ran but did not reach the tolerance (iteration limit, stagnation at the attainable
/// accuracy, or a breakdown): `x` holds the last iterate where there is one, and the info
/// structure says why (`reason`).
pub const AUTOPCG_ERR_NOT_CONVERGED: c_int = 2;
/// The matrix is not symmetric positive definite (a non-positive diagonal entry, or a
/// non-positive curvature met during the iterations).
pub const AUTOPCG_ERR_NOT_SPD: c_int = 3;
/// The device asked for cannot be used (no usable NVIDIA GPU or driver, a library built
/// without GPU support), or the GPU failed.
pub const AUTOPCG_ERR_DEVICE: c_int = 4;
/// An internal error (a bug): the message says what; a handle it happened on can only be
/// destroyed.
pub const AUTOPCG_ERR_INTERNAL: c_int = 5;

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// Sets this thread's last error message.
pub(crate) fn set_last_error(msg: &str) {
    // An interior NUL cannot be represented; it is replaced.
    let c = CString::new(msg.replace('\0', "\\0")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = c);
}

/// This thread's last error message.
pub(crate) fn last_error_ptr() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}

/// An error as an entry point reports it.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) status: c_int,
    pub(crate) message: String,
}

impl Failure {
    pub(crate) fn bad_input(message: impl Into<String>) -> Self {
        Failure {
            status: AUTOPCG_ERR_BAD_INPUT,
            message: message.into(),
        }
    }
}

impl From<SparseError> for Failure {
    fn from(e: SparseError) -> Self {
        let status = match e {
            SparseError::BadDiagonal { .. } => AUTOPCG_ERR_NOT_SPD,
            _ => AUTOPCG_ERR_BAD_INPUT,
        };
        let message = match &e {
            // The Rust hint names a Rust constructor; a C or Fortran caller has an option.
            SparseError::OneTriangle { part, .. } => format!(
                "{e} (from C or Fortran: set the options' storage to AUTOPCG_STORAGE_{})",
                part.to_string().to_uppercase()
            ),
            _ => e.to_string(),
        };
        Failure { status, message }
    }
}

impl From<PcgError> for Failure {
    fn from(e: PcgError) -> Self {
        let status = match &e {
            PcgError::NotConverged { .. }
            | PcgError::Stagnated { .. }
            | PcgError::Breakdown { .. } => AUTOPCG_ERR_NOT_CONVERGED,
            PcgError::NotSpd { .. } | PcgError::BadDiagonal { .. } => AUTOPCG_ERR_NOT_SPD,
            PcgError::Dimension(_) | PcgError::InvalidParameter(_) => AUTOPCG_ERR_BAD_INPUT,
            #[cfg(feature = "gpu")]
            PcgError::Gpu(_) => AUTOPCG_ERR_DEVICE,
            _ => AUTOPCG_ERR_INTERNAL,
        };
        Failure {
            status,
            message: e.to_string(),
        }
    }
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        match e {
            Error::Sparse(s) => s.into(),
            Error::Pcg(p) => p.into(),
            Error::DeviceUnavailable(_) => Failure {
                status: AUTOPCG_ERR_DEVICE,
                message: e.to_string(),
            },
            Error::Plan(_) => Failure {
                status: AUTOPCG_ERR_INTERNAL,
                message: e.to_string(),
            },
            other => Failure::bad_input(other.to_string()),
        }
    }
}

impl From<SolveFailure> for Failure {
    fn from(f: SolveFailure) -> Self {
        f.error.into()
    }
}

/// Runs `body`, turning an error into its status code and this thread's last error message,
/// and a panic into [`AUTOPCG_ERR_INTERNAL`]. The last error is cleared first, so after a
/// success it is the empty string.
pub(crate) fn guard(body: impl FnOnce() -> Result<(), Failure>) -> c_int {
    set_last_error("");
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => AUTOPCG_OK,
        Ok(Err(f)) => {
            set_last_error(&f.message);
            f.status
        }
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            set_last_error(&format!("internal error (please report it): {what}"));
            AUTOPCG_ERR_INTERNAL
        }
    }
}

/// The name of a status code, as static text.
pub(crate) fn status_name(status: c_int) -> &'static CStr {
    match status {
        AUTOPCG_OK => c"ok",
        AUTOPCG_ERR_BAD_INPUT => c"bad input",
        AUTOPCG_ERR_NOT_CONVERGED => c"not converged",
        AUTOPCG_ERR_NOT_SPD => c"matrix not symmetric positive definite",
        AUTOPCG_ERR_DEVICE => c"device unavailable",
        AUTOPCG_ERR_INTERNAL => c"internal error",
        _ => c"unknown status code",
    }
}
