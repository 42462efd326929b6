//! The element-wise preconditioner kernels of `precond.cu`.
use std::fmt;

use super::parse_by_name;
use crate::{DeviceProps, LaunchConfig, DEFAULT_THREADS};

/// Scalar or double2 loads (both grid-stride, any block count).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Loads {
    /// One double at a time.
    Scalar,
    /// Two doubles at a time.
    Double2,
}

impl fmt::Display for Loads {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Loads::Scalar => "scalar",
            Loads::Double2 => "double2",
        })
    }
}

parse_by_name!(Loads, [Loads::Scalar, Loads::Double2], "load width");

/// The kernels of `precond.cu`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PrecondKernel {
    /// `z = inv_diag .* r`.
    Jacobi(Loads),
}

impl PrecondKernel {
    /// Every kernel of the file.
    pub const ALL: [PrecondKernel; 2] = [
        PrecondKernel::Jacobi(Loads::Scalar),
        PrecondKernel::Jacobi(Loads::Double2),
    ];

    /// Default configuration for n elements: [`DEFAULT_THREADS`] threads, one resident wave.
    pub fn default_config(self, n: u64, props: &DeviceProps) -> LaunchConfig {
        LaunchConfig::grid_stride(n, DEFAULT_THREADS, props)
    }

    /// The load width.
    pub fn loads(self) -> Loads {
        match self {
            PrecondKernel::Jacobi(l) => l,
        }
    }
}

impl fmt::Display for PrecondKernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (op, l) = match self {
            PrecondKernel::Jacobi(l) => ("jacobi_apply", l),
        };
        match l {
            Loads::Scalar => f.write_str(op),
            Loads::Double2 => write!(f, "{op}_v2"),
        }
    }
}

parse_by_name!(PrecondKernel, PrecondKernel::ALL, "preconditioner kernel");
