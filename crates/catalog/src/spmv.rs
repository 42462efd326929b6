//! SpMV as the models and plans see it: a *candidate* (format, kernel or cuSPARSE algorithm,
//! threads per block, grid policy) is what the profiler measures and the model predicts; a
//! *method* is a candidate's launches for one matrix, the way a plan stores an SpMV step.
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::kernels::CusparseAlg;
use crate::strser::string_serde;
use crate::{DeviceProps, Format, GridPolicy, LaunchConfig, LaunchError, ParseError, SpmvKernel};

/// What runs an SpMV of a candidate: one of the pool's kernels, HYB's ELL kernel followed by a
/// COO kernel, or a cuSPARSE algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SpmvImpl {
    /// One kernel of the pool (CSR, ELL, DIA or COO).
    Kernel(SpmvKernel),
    /// HYB: [`SpmvKernel::Ell`] on the ELL part, then this COO kernel on the rest.
    Hyb(SpmvKernel),
    /// cuSPARSE's generic SpMV over CSR.
    Cusparse(CusparseAlg),
}

impl SpmvImpl {
    /// Every implementation: each kernel, HYB with each COO kernel, each cuSPARSE algorithm.
    pub fn all() -> Vec<SpmvImpl> {
        let mut v: Vec<SpmvImpl> = SpmvKernel::all()
            .into_iter()
            .map(SpmvImpl::Kernel)
            .collect();
        v.extend(
            [SpmvKernel::CooAtomic, SpmvKernel::CooSegment]
                .into_iter()
                .map(SpmvImpl::Hyb),
        );
        v.extend(CusparseAlg::ALL.into_iter().map(SpmvImpl::Cusparse));
        v
    }

    /// The format it reads.
    pub fn format(self) -> Format {
        match self {
            SpmvImpl::Kernel(k) => k.format(),
            SpmvImpl::Hyb(_) => Format::Hyb,
            SpmvImpl::Cusparse(_) => Format::Csr,
        }
    }

    /// True for cuSPARSE.
    pub fn is_cusparse(self) -> bool {
        matches!(self, SpmvImpl::Cusparse(_))
    }
}

impl fmt::Display for SpmvImpl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SpmvImpl::Kernel(k) => k.fmt(f),
            SpmvImpl::Hyb(c) => write!(f, "{}+{c}", SpmvKernel::Ell),
            SpmvImpl::Cusparse(a) => a.fmt(f),
        }
    }
}

impl FromStr for SpmvImpl {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, ParseError> {
        if let Some((ell, coo)) = s.split_once('+') {
            let coo: SpmvKernel = coo.parse()?;
            if ell != SpmvKernel::Ell.to_string() || coo.format() != Format::Coo {
                return Err(ParseError::new(
                    "HYB kernel pair",
                    s,
                    "spmv_ell+spmv_coo_atomic or spmv_ell+spmv_coo_segment",
                ));
            }
            return Ok(SpmvImpl::Hyb(coo));
        }
        if let Ok(k) = s.parse::<SpmvKernel>() {
            return Ok(SpmvImpl::Kernel(k));
        }
        s.parse::<CusparseAlg>()
            .map(SpmvImpl::Cusparse)
            .map_err(|_| {
                ParseError::new(
                    "SpMV implementation",
                    s,
                    "a SpMV kernel, spmv_ell+<COO kernel> or a cuSPARSE algorithm",
                )
            })
    }
}

string_serde!(SpmvImpl);

/// An SpMV candidate of the performance model: an implementation reading a format, with a
/// launch rule (threads per block and grid policy; `None` for cuSPARSE, which launches its
/// own kernels). Serialises with the field names and strings profiles and model files have
/// always used (`{"format":"csr","kernel":"spmv_csr_scalar","threads":256,"grid":"cover"}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct SpmvCandidate {
    /// The format read.
    pub format: Format,
    /// The kernel(s) or cuSPARSE algorithm.
    pub kernel: SpmvImpl,
    /// Threads per block (`None` for cuSPARSE).
    pub threads: Option<u32>,
    /// Grid policy (`None` for cuSPARSE).
    pub grid: Option<GridPolicy>,
}

impl SpmvCandidate {
    /// A candidate of the pool.
    pub fn own(kernel: SpmvImpl, threads: u32, grid: GridPolicy) -> Self {
        SpmvCandidate {
            format: kernel.format(),
            kernel,
            threads: Some(threads),
            grid: Some(grid),
        }
    }

    /// A cuSPARSE candidate.
    pub fn cusparse(alg: CusparseAlg) -> Self {
        SpmvCandidate {
            format: Format::Csr,
            kernel: SpmvImpl::Cusparse(alg),
            threads: None,
            grid: None,
        }
    }

    /// The candidate's name, `format/kernel/t<threads>/<grid>` (`-` for an absent part), e.g.
    /// `csr/spmv_csr_scalar/t256/cover`.
    pub fn name(&self) -> String {
        let t = self
            .threads
            .map_or_else(|| "-".to_string(), |t| format!("t{t}"));
        let g = self.grid.map_or_else(|| "-".to_string(), |g| g.to_string());
        format!("{}/{}/{t}/{g}", self.format, self.kernel)
    }

    /// True for a cuSPARSE algorithm.
    pub fn is_cusparse(&self) -> bool {
        self.kernel.is_cusparse()
    }

    /// True when the format is the one the implementation reads.
    pub fn is_consistent(&self) -> bool {
        self.format == self.kernel.format()
    }

    /// The launches of this candidate on a matrix of shape `shape` (for cuSPARSE, the
    /// algorithm, which launches its own kernels), or `None` for a candidate of the pool
    /// without a launch rule, or one whose format and kernel disagree.
    pub fn method_for(&self, shape: SpmvShape, props: &DeviceProps) -> Option<SpmvMethod> {
        if !self.is_consistent() {
            return None;
        }
        if let SpmvImpl::Cusparse(alg) = self.kernel {
            return Some(SpmvMethod::Cusparse { alg });
        }
        let threads = self.threads?;
        let g = self.grid?;
        let (n, nnz) = (shape.nrows, shape.nnz);
        let cfg = |k: SpmvKernel, nnz: u64| g.config(k.work_items(n, nnz), threads, props);
        Some(match self.kernel {
            SpmvImpl::Kernel(k) => match k.format() {
                Format::Csr => SpmvMethod::Csr {
                    kernel: k,
                    config: cfg(k, nnz),
                },
                Format::Ell => SpmvMethod::Ell {
                    config: cfg(k, nnz),
                },
                Format::Dia => SpmvMethod::Dia {
                    config: cfg(k, nnz),
                },
                Format::Coo => SpmvMethod::Coo {
                    kernel: k,
                    config: cfg(k, nnz),
                },
                Format::Hyb => return None,
            },
            SpmvImpl::Hyb(ck) => SpmvMethod::Hyb {
                split: None,
                ell_config: cfg(SpmvKernel::Ell, nnz),
                coo_kernel: ck,
                coo_config: cfg(ck, shape.hyb_coo_nnz),
            },
            SpmvImpl::Cusparse(alg) => SpmvMethod::Cusparse { alg },
        })
    }
}

/// One SpMV launch as a record keeps it: the candidate (format, kernel or cuSPARSE algorithm,
/// threads per block, grid policy) with the block counts it gave on one matrix. The
/// benchmark's and the profile's SpMV records share it, flattened: on disk its fields stand in
/// the record itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpmvLaunch {
    /// The format read.
    pub format: Format,
    /// What ran: a kernel of the pool, HYB's ELL kernel and COO kernel, or a cuSPARSE
    /// algorithm. Serialises as the entry point (`spmv_csr_vector_4`), the pair
    /// (`spmv_ell+spmv_coo_segment`) or the algorithm (`cusparse_spmv_csr_alg2`).
    pub kernel: SpmvImpl,
    /// Threads per block; `None` for cuSPARSE and for records of a whole skipped format.
    pub threads: Option<u32>,
    /// Blocks (of the ELL launch, for HYB); `None` where `threads` is.
    pub blocks: Option<u32>,
    /// Blocks of HYB's COO launch.
    pub coo_blocks: Option<u32>,
    /// The grid policy that gave `blocks`; `None` where `threads` is.
    pub grid: Option<GridPolicy>,
}

impl SpmvLaunch {
    /// `kernel` reading `format`, not configured yet: no threads, blocks or grid policy.
    pub fn unconfigured(format: Format, kernel: SpmvImpl) -> SpmvLaunch {
        SpmvLaunch {
            format,
            kernel,
            threads: None,
            blocks: None,
            coo_blocks: None,
            grid: None,
        }
    }

    /// The candidate launched (the launch without its block counts).
    pub fn candidate(&self) -> SpmvCandidate {
        SpmvCandidate {
            format: self.format,
            kernel: self.kernel,
            threads: self.threads,
            grid: self.grid,
        }
    }
}

impl fmt::Display for SpmvCandidate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

/// What the launch geometry of an SpMV needs to know about the matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpmvShape {
    /// Rows.
    pub nrows: u64,
    /// Stored entries.
    pub nnz: u64,
    /// Entries of HYB's COO part under the one-third split.
    pub hyb_coo_nnz: u64,
}

/// How one SpMV `y = B x` runs: the storage format of B, its kernel(s) and launch
/// configuration(s). Plans store SpMV steps as this.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum SpmvMethod {
    /// CSR with [`SpmvKernel::CsrScalar`], [`SpmvKernel::CsrVector`] or
    /// [`SpmvKernel::CsrMerge`] (load-balanced for very uneven rows; needs a per-matrix
    /// workspace made on upload).
    Csr {
        /// The kernel.
        kernel: SpmvKernel,
        /// Its launch.
        config: LaunchConfig,
    },
    /// ELLPACK (padded to the longest row), one thread per row.
    Ell {
        /// Its launch.
        config: LaunchConfig,
    },
    /// Diagonal storage, one thread per row.
    Dia {
        /// Its launch.
        config: LaunchConfig,
    },
    /// COO with [`SpmvKernel::CooAtomic`] or [`SpmvKernel::CooSegment`] (y is zeroed first).
    Coo {
        /// The kernel.
        kernel: SpmvKernel,
        /// Its launch.
        config: LaunchConfig,
    },
    /// HYB: an ELL part of width `split` (the one-third rule when `None`) and a COO part.
    Hyb {
        /// ELL width; `None` for the one-third rule of the host conversion.
        split: Option<usize>,
        /// Launch of the ELL part.
        ell_config: LaunchConfig,
        /// Kernel of the COO part.
        coo_kernel: SpmvKernel,
        /// Launch of the COO part.
        coo_config: LaunchConfig,
    },
    /// CSR with cuSPARSE's generic SpMV and this algorithm (cuSPARSE chooses its own
    /// launches, so the plan stores none).
    Cusparse {
        /// The algorithm.
        alg: CusparseAlg,
    },
}

impl SpmvMethod {
    /// The storage format.
    pub fn format(&self) -> Format {
        match self {
            SpmvMethod::Csr { .. } => Format::Csr,
            SpmvMethod::Ell { .. } => Format::Ell,
            SpmvMethod::Dia { .. } => Format::Dia,
            SpmvMethod::Coo { .. } => Format::Coo,
            SpmvMethod::Hyb { .. } => Format::Hyb,
            SpmvMethod::Cusparse { .. } => Format::Csr,
        }
    }

    /// True for cuSPARSE's SpMV.
    pub fn is_cusparse(&self) -> bool {
        matches!(self, SpmvMethod::Cusparse { .. })
    }

    /// The kernels of the pool launched, in order, with their configurations (none for
    /// cuSPARSE, which launches kernels of its own).
    pub fn launches(&self) -> Vec<(SpmvKernel, LaunchConfig)> {
        match *self {
            SpmvMethod::Csr { kernel, config } | SpmvMethod::Coo { kernel, config } => {
                vec![(kernel, config)]
            }
            SpmvMethod::Ell { config } => vec![(SpmvKernel::Ell, config)],
            SpmvMethod::Dia { config } => vec![(SpmvKernel::Dia, config)],
            SpmvMethod::Hyb {
                ell_config,
                coo_kernel,
                coo_config,
                ..
            } => vec![(SpmvKernel::Ell, ell_config), (coo_kernel, coo_config)],
            SpmvMethod::Cusparse { .. } => Vec::new(),
        }
    }

    /// The kernel and launch of the method's variant that adds the three dots of the PCG
    /// iteration in its epilogue ([`SpmvKernel::dot3_entry_point`]), when it has one: one
    /// launch of CSR scalar, CSR vector, ELL or DIA (not the merge or COO kernels, HYB's two
    /// launches or cuSPARSE).
    pub fn dot3_variant(&self) -> Option<(SpmvKernel, LaunchConfig)> {
        match self.launches()[..] {
            [(k, cfg)] if k.dot3_entry_point().is_some() => Some((k, cfg)),
            _ => None,
        }
    }

    /// The implementation, as a candidate names it.
    pub fn implementation(&self) -> SpmvImpl {
        match *self {
            SpmvMethod::Csr { kernel, .. } | SpmvMethod::Coo { kernel, .. } => {
                SpmvImpl::Kernel(kernel)
            }
            SpmvMethod::Ell { .. } => SpmvImpl::Kernel(SpmvKernel::Ell),
            SpmvMethod::Dia { .. } => SpmvImpl::Kernel(SpmvKernel::Dia),
            SpmvMethod::Hyb { coo_kernel, .. } => SpmvImpl::Hyb(coo_kernel),
            SpmvMethod::Cusparse { alg } => SpmvImpl::Cusparse(alg),
        }
    }

    /// Kernel name(s) as the profiler records them, `+`-joined for HYB.
    pub fn kernel_name(&self) -> String {
        self.implementation().to_string()
    }

    /// Launch configuration(s) in words, `+`-joined for HYB; for cuSPARSE, that the library
    /// launches.
    pub fn config_text(&self) -> String {
        if self.is_cusparse() {
            return "launched by cuSPARSE".into();
        }
        let cfgs: Vec<String> = self.launches().iter().map(|(_, c)| c.words()).collect();
        cfgs.join(" + ")
    }

    /// Checks that each kernel reads this format and each launch fits the kernel and the
    /// device; `operand` ("A", "K"...) names the operand in the error.
    pub fn check(&self, operand: &str, props: &DeviceProps) -> Result<(), LaunchError> {
        let format = self.format();
        for (i, (kernel, cfg)) in self.launches().into_iter().enumerate() {
            let expected = match (format, i) {
                (Format::Hyb, 0) => Format::Ell,
                (Format::Hyb, _) => Format::Coo,
                (f, _) => f,
            };
            if kernel.format() != expected {
                return Err(LaunchError::new(
                    format!("SpMV of {operand}"),
                    format!(
                        "kernel {kernel} reads {} but the plan stores {operand} as {format}",
                        kernel.format()
                    ),
                ));
            }
            kernel
                .check_launch(cfg, props)
                .map_err(|e| LaunchError::new(format!("SpMV of {operand}"), e.to_string()))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn implementations_round_trip_and_hyb_pairs_are_checked() {
        for i in SpmvImpl::all() {
            assert_eq!(i.to_string().parse::<SpmvImpl>(), Ok(i), "{i}");
        }
        assert_eq!(
            "spmv_ell+spmv_coo_segment".parse::<SpmvImpl>(),
            Ok(SpmvImpl::Hyb(SpmvKernel::CooSegment))
        );
        assert!("spmv_ell+spmv_dia".parse::<SpmvImpl>().is_err());
        assert!("spmv_dia+spmv_coo_atomic".parse::<SpmvImpl>().is_err());
        assert!("nonsense".parse::<SpmvImpl>().is_err());
    }

    #[test]
    fn candidates_serialise_as_profiles_always_did() {
        let c = SpmvCandidate::own(
            SpmvImpl::Kernel(SpmvKernel::CsrScalar),
            256,
            GridPolicy::Cover,
        );
        let j = serde_json::to_string(&c).unwrap();
        assert_eq!(
            j,
            r#"{"format":"csr","kernel":"spmv_csr_scalar","threads":256,"grid":"cover"}"#
        );
        assert_eq!(serde_json::from_str::<SpmvCandidate>(&j).unwrap(), c);
        assert_eq!(c.name(), "csr/spmv_csr_scalar/t256/cover");
        let cu = SpmvCandidate::cusparse(CusparseAlg::CsrAlg2);
        assert_eq!(cu.name(), "csr/cusparse_spmv_csr_alg2/-/-");
        assert!(cu.is_cusparse());
        let p = DeviceProps::hopper_like();
        let shape = SpmvShape {
            nrows: 1000,
            nnz: 5000,
            hyb_coo_nnz: 100,
        };
        let m = cu.method_for(shape, &p).unwrap();
        assert_eq!(
            m,
            SpmvMethod::Cusparse {
                alg: CusparseAlg::CsrAlg2
            }
        );
        assert!(m.is_cusparse() && m.launches().is_empty() && m.check("A", &p).is_ok());
        assert_eq!(m.format(), Format::Csr);
        assert_eq!(m.kernel_name(), "cusparse_spmv_csr_alg2");
        let j = serde_json::to_string(&m).unwrap();
        assert_eq!(j, r#"{"Cusparse":{"alg":"cusparse_spmv_csr_alg2"}}"#);
        assert_eq!(serde_json::from_str::<SpmvMethod>(&j).unwrap(), m);
        let hyb = SpmvCandidate::own(SpmvImpl::Hyb(SpmvKernel::CooAtomic), 128, GridPolicy::Cover);
        let m = hyb.method_for(shape, &p).unwrap();
        assert_eq!(m.kernel_name(), "spmv_ell+spmv_coo_atomic");
        assert_eq!(
            m.config_text(),
            "128 threads x 8 blocks + 128 threads x 1 blocks"
        );
        m.check("A", &p).unwrap();
        let bad = SpmvCandidate {
            format: Format::Dia,
            ..c
        };
        assert_eq!(bad.method_for(shape, &p), None);
    }

    #[test]
    fn methods_check_formats_and_warps() {
        let p = DeviceProps::hopper_like();
        let m = SpmvMethod::Csr {
            kernel: SpmvKernel::Ell,
            config: LaunchConfig::new(256, 1),
        };
        assert!(m.check("A", &p).is_err());
        let m = SpmvMethod::Csr {
            kernel: SpmvKernel::CsrVector(8),
            config: LaunchConfig::new(100, 8),
        };
        assert!(m.check("A", &p).unwrap_err().to_string().contains("warps"));
        let wrong = SpmvMethod::Hyb {
            split: None,
            ell_config: LaunchConfig::new(256, 4),
            coo_kernel: SpmvKernel::CsrScalar,
            coo_config: LaunchConfig::new(128, 8),
        };
        assert!(wrong.check("A", &p).is_err());
    }
}
