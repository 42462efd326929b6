//! The kernel families of `kernels/*.cu`, one enum each, whose `Display` is the CUDA entry-point
//! name (the string the profiler records and the model predicts) and whose `FromStr` parses it
//! back; [`KernelId`] names an entry point of any family.
use std::fmt;
use std::str::FromStr;

use crate::strser::string_serde;
use crate::ParseError;

mod convert;
mod cusparse;
mod precond;
mod reduce;
mod source;
mod spmv;
mod vector;

pub use convert::ConvertKernel;
pub use cusparse::CusparseAlg;
pub use precond::{Loads, PrecondKernel};
pub use reduce::{Dot3Kernel, DotKernel, Reduction, DOT_BLOCK_SIZES, DOT_FINISH};
pub use source::KernelSource;
pub use spmv::{
    merge_smem_bytes, merge_tiles, SpmvKernel, CSR_LANES, MERGE_FIXUP, MERGE_ITEMS,
    MERGE_MAX_THREADS, MERGE_PARTITION, MERGE_SMEM_PER_WARP, MERGE_TILE,
};
pub use vector::{VectorKernel, VectorOp, VectorVariant, TRIAD_KERNEL};

/// Finds the member of `all` whose `Display` is `s`.
pub(crate) fn by_name<T: Copy + fmt::Display>(
    all: impl IntoIterator<Item = T>,
    s: &str,
    what: &'static str,
) -> Result<T, ParseError> {
    let all: Vec<T> = all.into_iter().collect();
    all.iter()
        .copied()
        .find(|k| k.to_string() == s)
        .ok_or_else(|| {
            let names: Vec<String> = all.iter().map(|k| k.to_string()).collect();
            ParseError::new(what, s, names.join(", "))
        })
}

/// Implements `FromStr` for a catalogue type by [`by_name`] over `$all` (`$what` names the
/// type in the error) and serialises it as its `Display` string ([`string_serde`]).
macro_rules! parse_by_name {
    ($t:ty, $all:expr, $what:literal) => {
        impl std::str::FromStr for $t {
            type Err = crate::ParseError;
            fn from_str(s: &str) -> Result<Self, crate::ParseError> {
                crate::kernels::by_name($all, s, $what)
            }
        }
        crate::strser::string_serde!($t);
    };
}

pub(crate) use parse_by_name;

/// An entry point of any family, as profiles and occupancy records name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum KernelId {
    /// A SpMV kernel.
    Spmv(SpmvKernel),
    /// A vector update.
    Vector(VectorKernel),
    /// A reduction (a rung of the ladder or a fused three-dot reduction).
    Reduction(Reduction),
    /// An element-wise preconditioner kernel.
    Precond(PrecondKernel),
    /// A conversion kernel.
    Convert(ConvertKernel),
    /// A cuSPARSE SpMV algorithm.
    Cusparse(CusparseAlg),
}

impl KernelId {
    /// Every entry point the catalogue knows (the pool's kernels and cuSPARSE's algorithms).
    pub fn all() -> Vec<KernelId> {
        let mut v: Vec<KernelId> = SpmvKernel::all().into_iter().map(KernelId::Spmv).collect();
        v.extend(VectorKernel::all().into_iter().map(KernelId::Vector));
        v.extend(Reduction::all().into_iter().map(KernelId::Reduction));
        v.extend(PrecondKernel::ALL.into_iter().map(KernelId::Precond));
        v.extend(ConvertKernel::ALL.into_iter().map(KernelId::Convert));
        v.extend(CusparseAlg::ALL.into_iter().map(KernelId::Cusparse));
        v
    }

    /// Elements one thread handles for the kernels whose launch must cover the vector one item
    /// per thread (`Some(1)` or `Some(2)`); `None` for grid-stride kernels, which take any
    /// block count, and for kernels that are not element-wise.
    pub fn elements_per_thread(self) -> Option<u32> {
        match self {
            KernelId::Vector(k) => k.variant().elements_per_thread(),
            KernelId::Reduction(Reduction::Dot(k)) => k.elements_per_thread(),
            _ => None,
        }
    }
}

impl fmt::Display for KernelId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KernelId::Spmv(k) => k.fmt(f),
            KernelId::Vector(k) => k.fmt(f),
            KernelId::Reduction(k) => k.fmt(f),
            KernelId::Precond(k) => k.fmt(f),
            KernelId::Convert(k) => k.fmt(f),
            KernelId::Cusparse(k) => k.fmt(f),
        }
    }
}

impl FromStr for KernelId {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, ParseError> {
        if let Ok(k) = s.parse::<SpmvKernel>() {
            return Ok(KernelId::Spmv(k));
        }
        if let Ok(k) = s.parse::<VectorKernel>() {
            return Ok(KernelId::Vector(k));
        }
        if let Ok(k) = s.parse::<Reduction>() {
            return Ok(KernelId::Reduction(k));
        }
        if let Ok(k) = s.parse::<PrecondKernel>() {
            return Ok(KernelId::Precond(k));
        }
        if let Ok(k) = s.parse::<ConvertKernel>() {
            return Ok(KernelId::Convert(k));
        }
        if let Ok(k) = s.parse::<CusparseAlg>() {
            return Ok(KernelId::Cusparse(k));
        }
        Err(ParseError::new(
            "kernel",
            s,
            "an entry point of kernels/*.cu or a cuSPARSE algorithm",
        ))
    }
}

string_serde!(KernelId);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kernel_name_round_trips_and_is_unique() {
        let all = KernelId::all();
        let mut names = std::collections::BTreeSet::new();
        for k in &all {
            let s = k.to_string();
            assert_eq!(s.parse::<KernelId>(), Ok(*k), "{s}");
            assert!(names.insert(s.clone()), "{s} is spelled twice");
            let json = serde_json::to_string(k).unwrap();
            assert_eq!(json, format!("\"{s}\""));
            assert_eq!(serde_json::from_str::<KernelId>(&json).unwrap(), *k);
        }
        assert!(all.len() > 40);
        let e = "spmv_csr_vector_3".parse::<KernelId>().unwrap_err();
        assert!(e.to_string().contains("spmv_csr_vector_3"), "{e}");
    }

    #[test]
    fn elements_per_thread_come_from_the_kernel_not_its_name() {
        let e = |s: &str| s.parse::<KernelId>().unwrap().elements_per_thread();
        assert_eq!(e("cg_update_elem"), Some(1));
        assert_eq!(e("axpy_elem_v2"), Some(2));
        assert_eq!(e("cg_update_grid_v2"), None);
        assert_eq!(e("dot_sequential"), Some(1));
        assert_eq!(e("dot_first_add"), Some(2));
        assert_eq!(e("dot_full_unroll"), Some(2));
        assert_eq!(e("dot_vec2"), None);
        assert_eq!(e("dot3_last_block"), None);
        assert_eq!(e("spmv_dia"), None);
    }
}
