//! autopcg-sparse: the host side of every sparse matrix in autopcg.
//!
//! - [`CsrMatrix`]: the canonical format (on `sprs`, 32-bit indices), with parallel CPU kernels.
//! - [`arrays`]: building it from a caller's CSR arrays (any common index type, 0- or
//!   1-based), from `sprs` matrices of any common index type, or from one triangle; the
//!   symmetry check that recognises a one-triangle matrix.
//! - [`CooMatrix`], [`EllMatrix`], [`DiaMatrix`], [`HybMatrix`]: the other storage formats the
//!   GPU kernels use, each converted from CSR and back without changing a value.
//! - [`blocks`]: row partitions balanced by a per-row cost, and the split of a matrix into row
//!   blocks with local and halo parts and the halo exchange lists (multi-block and multi-GPU PCG).
//! - [`mm`]: Matrix Market reading (parallel, `.gz` streamed, allocation bounded by the file's
//!   content) and writing.
//! - [`io`]: atomic output files and the output-is-an-input check.
//! - [`features`]: the matrix statistics the performance models use.
//! - [`kernels`]: deterministic CPU reference vector kernels (dot, axpy).
//! - [`families`]: seeded generators of SPD benchmark matrices.
//!
//! Nothing in this crate touches a GPU.
#![warn(missing_docs)]

pub mod arrays;
pub mod blocks;
mod build;
pub mod coo;
pub mod copy;
pub mod csr;
pub mod dia;
pub mod ell;
pub mod error;
pub mod families;
pub mod features;
pub mod hyb;
pub mod io;
pub mod kernels;
pub mod mm;
pub mod scan;

pub use arrays::{CsrIndex, EntryMap, IndexBase, Triangle};
pub use coo::CooMatrix;
pub use csr::CsrMatrix;
pub use dia::DiaMatrix;
pub use ell::EllMatrix;
pub use error::SparseError;
pub use hyb::HybMatrix;

/// Index type used by every format: 32-bit, checked on construction.
pub type Index = u32;

/// Limits on padded formats (ELL, DIA, the ELL part of HYB): a conversion whose padding would
/// exceed either limit is refused with [`SparseError::TooMuchPadding`] before anything is allocated.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PaddingLimits {
    /// Largest accepted ratio of stored slots (including padding) to nonzeros.
    pub max_fill_ratio: f64,
    /// Largest accepted size of the padded arrays, in bytes.
    pub max_bytes: u64,
}

impl PaddingLimits {
    /// The check every padded conversion makes before allocating its arrays: `Ok` when `slots`
    /// stored slots (padding included) holding `nnz` nonzeros in `bytes` bytes stay within both
    /// limits, else [`SparseError::TooMuchPadding`] naming `format`. A NaN limit refuses. Other
    /// crates that build padded formats (on a GPU, say) call it to refuse exactly what the host
    /// conversions refuse.
    pub fn check(
        &self,
        format: &'static str,
        slots: u128,
        nnz: usize,
        bytes: u128,
    ) -> Result<(), SparseError> {
        build::check_padding(format, slots, nnz, bytes, self)
    }

    /// Whether [`PaddingLimits::check`] accepts `slots` slots holding `nnz` nonzeros in `bytes`
    /// bytes: for callers that only predict a conversion (a cost model, say) and need no error.
    pub fn allows(&self, slots: u128, nnz: usize, bytes: u128) -> bool {
        build::fill_ratio(slots, nnz) <= self.max_fill_ratio && bytes <= u128::from(self.max_bytes)
    }
}

impl Default for PaddingLimits {
    fn default() -> Self {
        // Beyond 3x fill a padded format moves more bytes than CSR saves, and 4 GiB covers the
        // largest matrices the GPU benchmarks use.
        PaddingLimits {
            max_fill_ratio: 3.0,
            max_bytes: 4 << 30,
        }
    }
}
