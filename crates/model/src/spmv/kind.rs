//! What the model knows of a kernel ([`KernelKind`]) and the terms of a candidate's time
//! model ([`Term`], priced per part of the working set: [`Residency`], [`TermSpec`]).
use autopcg_catalog::{SpmvImpl, SpmvKernel};
use serde::{Deserialize, Serialize};

use super::SpmvCandidate;
use crate::work::VECTOR_LANES;

/// The kernel families the model knows; any other kernel is [`KernelKind::Generic`] and gets
/// generic terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum KernelKind {
    /// CSR, a thread per row (`spmv_csr_scalar`).
    CsrScalar,
    /// CSR, `lanes` lanes per row (`spmv_csr_vector_<lanes>`).
    CsrVector {
        /// Lanes per row, one of [`VECTOR_LANES`].
        lanes: u32,
    },
    /// ELLPACK, a thread per row.
    Ell,
    /// Diagonals, a thread per row.
    Dia,
    /// COO, an atomic add per entry.
    CooAtomic,
    /// COO, warp-segmented reduction.
    CooSegment,
    /// HYB: the ELL kernel, then a COO kernel on the rest.
    Hyb,
    /// A kernel this model has no specific terms for (e.g. a load-balanced CSR kernel).
    Generic,
}

impl KernelKind {
    /// The kind of a candidate's kernel: [`KernelKind::Generic`] for the kernels the model has
    /// no specific terms for (the merge-path CSR kernel, cuSPARSE) and for a candidate whose
    /// format is not the one its kernel reads.
    pub fn of(c: &SpmvCandidate) -> KernelKind {
        if !c.is_consistent() {
            return KernelKind::Generic;
        }
        match c.kernel {
            SpmvImpl::Kernel(k) => match k {
                SpmvKernel::CsrScalar => KernelKind::CsrScalar,
                SpmvKernel::CsrVector(lanes) if VECTOR_LANES.contains(&lanes) => {
                    KernelKind::CsrVector { lanes }
                }
                SpmvKernel::CsrVector(_) | SpmvKernel::CsrMerge => KernelKind::Generic,
                SpmvKernel::Ell => KernelKind::Ell,
                SpmvKernel::Dia => KernelKind::Dia,
                SpmvKernel::CooAtomic => KernelKind::CooAtomic,
                SpmvKernel::CooSegment => KernelKind::CooSegment,
            },
            SpmvImpl::Hyb(_) => KernelKind::Hyb,
            SpmvImpl::Cusparse(_) => KernelKind::Generic,
        }
    }

    /// The base terms of this kind (without `depth`), in model order.
    pub fn terms(self) -> Vec<Term> {
        use Term::*;
        match self {
            KernelKind::CsrScalar | KernelKind::CsrVector { .. } => {
                vec![Launch, Rows, Nnz, XLines, Slots]
            }
            KernelKind::Ell | KernelKind::Dia => vec![Launch, Rows, Nnz, XLines, Slots],
            KernelKind::CooAtomic => vec![Launch, Rows, Nnz, XLines, Contention],
            KernelKind::CooSegment | KernelKind::Generic => vec![Launch, Rows, Nnz, XLines],
            KernelKind::Hyb => vec![Launch, CooLaunch, Rows, Nnz, XLines, Slots, CooNnz],
        }
    }
}

/// A term of a candidate's time model (see the module documentation for the table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Term {
    /// 1: launch and tail cost.
    Launch,
    /// 1 when HYB has a COO part (its second launch), else 0.
    CooLaunch,
    /// Rows.
    Rows,
    /// Stored entries.
    Nnz,
    /// Distinct cache lines of `x` each row reads, summed over rows.
    XLines,
    /// The kernel's issued work, padding and idle lanes included.
    Slots,
    /// Entries of HYB's COO part.
    CooNnz,
    /// Loop trips of the busiest thread under the candidate's launch geometry.
    Depth,
    /// Serialised atomic adds of the COO atomic kernel: the entries of one row that fall in
    /// one warp's 32 consecutive entries add to the same address one after the other, so a
    /// warp waits `min(len, 32)` steps on a row of `len` entries; summed over entries,
    /// `sum_rows len * min(len, 32) / 32`, estimated as `min(nnz, sum_rows len^2 / 32)` from
    /// the mean and standard deviation of the row lengths.
    #[serde(rename = "contention")]
    Contention,
}

impl Term {
    /// True for the traffic terms the L2 split divides.
    pub fn is_traffic(self) -> bool {
        matches!(
            self,
            Term::Rows | Term::Nnz | Term::XLines | Term::Slots | Term::CooNnz
        )
    }
}

/// Which part of a traffic term a coefficient prices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Residency {
    /// The whole term.
    All,
    /// The share `s` served from L2.
    InL2,
    /// The share `1 - s` served from memory.
    OutL2,
    /// The weight of L2 bin `k` (hat functions over the working set, see
    /// [`super::FeatureSet::l2_knots`]).
    Bin(usize),
}

/// One column of a candidate's model: a term and the part of it priced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TermSpec {
    /// The term.
    pub term: Term,
    /// Its part.
    pub part: Residency,
}
