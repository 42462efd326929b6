//! A SpMV candidate: a kernel reading a format, with a launch configuration.
use serde::{Deserialize, Serialize};

use super::KernelKind;
use crate::profile::{candidate_name, SpmvRecord};

/// A SpMV candidate: a kernel reading a format, with a launch configuration.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct SpmvCandidate {
    /// Format name: `csr`, `ell`, `dia`, `coo`, `hyb`.
    pub format: String,
    /// Kernel name (`+`-joined for HYB's two launches).
    pub kernel: String,
    /// Threads per block (`None` for cuSPARSE).
    pub threads: Option<u32>,
    /// Grid policy: `wave` or `cover` (`None` for cuSPARSE).
    pub grid: Option<String>,
}

impl SpmvCandidate {
    /// The candidate a record measures.
    pub fn of_record(r: &SpmvRecord) -> Self {
        SpmvCandidate {
            format: r.format.clone(),
            kernel: r.kernel.clone(),
            threads: r.threads,
            grid: r.grid.clone(),
        }
    }

    /// The candidate's name: [`candidate_name`], e.g. `csr/spmv_csr_scalar/t256/cover`.
    pub fn name(&self) -> String {
        candidate_name(
            &self.format,
            &self.kernel,
            self.threads,
            self.grid.as_deref(),
        )
    }

    /// True for a cuSPARSE algorithm (the peer, not one of autopcg's candidates).
    pub fn is_cusparse(&self) -> bool {
        self.kernel.starts_with("cusparse")
    }

    /// What the kernel does, as the model's terms see it.
    pub fn kind(&self) -> KernelKind {
        KernelKind::of(&self.format, &self.kernel)
    }
}
