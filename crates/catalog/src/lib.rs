//! autopcg-catalog: what a kernel and a launch ARE, as plain data, with no CUDA.
//!
//! Every crate that names a kernel, a storage format or a launch configuration uses these
//! types; this is the one place a kernel's name is spelled ([`std::fmt::Display`]) and parsed
//! ([`std::str::FromStr`]), and the two round-trip. Names cross crate boundaries and files
//! (profiles, model files, plans) as these types; on disk they serialise as the same strings
//! (`"spmv_csr_vector_4"`, `"csr"`, `"wave"`), so files written before the types existed read
//! unchanged.
//!
//! - [`format`]: the storage formats ([`Format`]).
//! - [`kernels`]: the kernel families of `kernels/*.cu`: SpMV ([`SpmvKernel`]), vector updates
//!   ([`VectorKernel`]), reductions ([`DotKernel`], [`Dot3Kernel`], [`Reduction`]),
//!   element-wise preconditioner kernels ([`PrecondKernel`]), conversions
//!   ([`ConvertKernel`]), cuSPARSE's SpMV algorithms ([`CusparseAlg`]), the source files
//!   ([`KernelSource`]) and any entry point ([`KernelId`]).
//! - [`spmv`]: a SpMV candidate of the performance model ([`SpmvCandidate`]) and the launches of
//!   one SpMV on a given matrix ([`SpmvMethod`]).
//! - [`launch`]: [`LaunchConfig`], the grid policies ([`GridPolicy`]) and the launch geometry
//!   (one thread per item, one resident wave, blocks capped at the work).
//! - [`device`]: [`DeviceProps`], the properties the models and launch checks read, and the
//!   slug model files are named by ([`device_slug`]).
//! - [`link`]: [`LinkProps`], bandwidth and latencies between the GPUs of a host, with
//!   documented default figures (NVLink 4, PCIe 5) for the multi-GPU time model.
//! - [`occupancy`](mod@occupancy): eq. 3-2, resident blocks per SM and `NB_nt`.
//! - [`replay`]: when a timed call stands for the solver's replayed one (the L2 bound).
#![warn(missing_docs)]

pub mod device;
pub mod error;
pub mod format;
pub mod kernels;
pub mod launch;
pub mod link;
pub mod occupancy;
pub mod replay;
pub mod spmv;
mod strser;

pub use device::{device_slug, DeviceProps};
pub use error::{LaunchError, ParseError};
pub use format::Format;
pub use kernels::{
    ConvertKernel, CusparseAlg, Dot3Kernel, DotKernel, KernelId, KernelSource, Loads,
    PrecondKernel, Reduction, SpmvKernel, VectorKernel, VectorOp, VectorVariant, CSR_LANES,
    DOT_BLOCK_SIZES,
};
pub use launch::{GridPolicy, LaunchConfig, DEFAULT_THREADS};
pub use link::LinkProps;
pub use occupancy::{occupancy, Limiter, Occupancy};
pub use replay::{
    replays_like_the_solver, replays_spmv_at, square_csr_bytes, ITERATION_VECTOR_BYTES_PER_ROW,
};
pub use spmv::{SpmvCandidate, SpmvImpl, SpmvLaunch, SpmvMethod, SpmvShape};
