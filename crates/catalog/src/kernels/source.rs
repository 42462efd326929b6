//! The CUDA source files of the kernel pool (their text is embedded by the GPU crate).
use std::fmt;

/// One CUDA source file under `kernels/`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub enum KernelSource {
    /// `vector.cu`: axpy, xpay, the fused Chronopoulos–Gear update.
    Vector,
    /// `dot.cu`: the reduction ladder and the fused three-dot reduction (needs `BLOCK_SIZE`).
    Dot,
    /// `precond.cu`: Jacobi and diagonal scaling.
    Precond,
    /// `spmv_csr.cu`: CSR scalar, vector and merge-path kernels.
    SpmvCsr,
    /// `spmv_ell.cu`: ELLPACK (also the ELL part of HYB).
    SpmvEll,
    /// `spmv_dia.cu`: diagonal format.
    SpmvDia,
    /// `spmv_coo.cu`: COO by atomics (also the COO part of HYB).
    SpmvCoo,
    /// `convert.cu`: row-length histogram, COO row counts, exclusive scan, and the ELL, DIA and
    /// HYB conversions from CSR.
    Convert,
}

impl KernelSource {
    /// Every source file.
    pub const ALL: [KernelSource; 8] = [
        KernelSource::Vector,
        KernelSource::Dot,
        KernelSource::Precond,
        KernelSource::SpmvCsr,
        KernelSource::SpmvEll,
        KernelSource::SpmvDia,
        KernelSource::SpmvCoo,
        KernelSource::Convert,
    ];

    /// Headers the sources include with `#include "name"`.
    pub const HEADERS: [&'static str; 2] = ["common.cuh", "cg_scalars.cuh"];

    /// File name under `kernels/`.
    pub fn file_name(self) -> &'static str {
        match self {
            KernelSource::Vector => "vector.cu",
            KernelSource::Dot => "dot.cu",
            KernelSource::Precond => "precond.cu",
            KernelSource::SpmvCsr => "spmv_csr.cu",
            KernelSource::SpmvEll => "spmv_ell.cu",
            KernelSource::SpmvDia => "spmv_dia.cu",
            KernelSource::SpmvCoo => "spmv_coo.cu",
            KernelSource::Convert => "convert.cu",
        }
    }
}

impl fmt::Display for KernelSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.file_name())
    }
}
