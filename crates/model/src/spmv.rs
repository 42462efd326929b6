//! The SpMV performance model (method section 3.3): one time model per candidate — a format,
//! a kernel and a launch configuration (threads per block, grid policy) — fitted from the
//! profile's benchmark matrices, used to predict the time of every candidate on a new matrix
//! and pick the fastest. After the profile-based model of Guo, Wang and Chen ("A Performance
//! Modeling and Optimization Analysis Tool for Sparse Matrix-Vector Multiplication on GPUs"),
//! with the launch configuration as part of the candidate.
//!
//! # The time model of one candidate
//!
//! `t = sum_j c_j * phi_j(work)`, with every coefficient `c_j >= 0` (a cost per unit of work
//! is never negative), fitted by non-negative least squares ([`crate::nnls`]) on the
//! *relative* error: each matrix's row is divided by its measured time, so a 1 microsecond
//! kernel weighs as much as a 10 millisecond one (`min sum_i ((t_pred_i - t_i) / t_i)^2`).
//! The terms `phi_j` ([`Term`]) are the work counts of [`SpmvWork`]:
//!
//! | term | value | what it stands for |
//! |---|---|---|
//! | `launch` | 1 | launch and tail cost |
//! | `coo_launch` | 1 when HYB has a COO part | HYB's second launch |
//! | `rows` | `n` | row pointers read, `y` written |
//! | `nnz` | `nnz` | values and column indices read |
//! | `x_lines` | [`SpmvWork::x_lines`] | gather traffic on `x` |
//! | `slots` | kernel's issued work, see below | padding and idle lanes |
//! | `coo_nnz` | [`SpmvWork::hyb_coo_nnz`] | HYB's COO part |
//! | `depth` | loop trips of the busiest thread | latency-bound critical path |
//! | `contention` | [`atomic_contention`] (COO atomic only) | atomic adds to one row serialised in a warp |
//!
//! `slots` is the work the kernel issues, padding included: CSR scalar
//! [`SpmvWork::scalar_warp_slots`] (each warp runs as long as its longest row), CSR vector with
//! `L` lanes `vector_steps[L]`, ELL [`SpmvWork::ell_slots`], DIA [`SpmvWork::dia_slots`], HYB
//! [`SpmvWork::hyb_ell_slots`]; the COO kernels and kernels this module does not know have no
//! `slots` term. Which terms each kernel gets is [`KernelKind::terms`].
//!
//! `depth` (critical path) is the number of loop trips of the busiest thread under the
//! candidate's launch geometry (the blocks a grid policy gives on the profiled device): a
//! thread per row runs `row_len_max` trips at least, a grid-stride thread `rounds x mean
//! trips`. It matters where the GPU is not filled (small matrices) or one long row keeps a
//! thread busy long after the others (power-law rows under CSR scalar).
//!
//! # The L2 regime
//!
//! A benchmark repeats the same SpMV, so a matrix whose working set (format arrays, `x`, `y`:
//! [`working_set_bytes`]) fits in the L2 cache is read from L2 and every byte costs less. Two
//! ways to let the cost per byte depend on the working set `B`:
//!
//! - an L2 *split* (`l2_fraction = Some(f)`): every traffic term (`rows`, `nnz`, `x_lines`,
//!   `slots`, `coo_nnz`) becomes an L2-resident part `phi * s` and a memory part
//!   `phi * (1 - s)`, each with its own coefficient, where `s = 1 / (1 + (B / (f L2))^4)` is a
//!   smooth step;
//! - L2 *bins* (`l2_knots`): every traffic term gets one column per knot, weighted by hat
//!   functions over `ln(B / L2)`: the cost per unit is piecewise linear in the log of the
//!   working set, so any transition shape between the knots is followed (the real one
//!   depends on the cache's partitioning and replacement policy, which no formula here knows).
//!
//! # The under-filled GPU
//!
//! Little's law (Little, "A Proof for the Queuing Formula: L = lambda W"): the bandwidth a
//! kernel reaches is proportional to the loads it keeps in flight until it saturates. A launch that keeps fewer threads busy than the device needs
//! (a small matrix, a kernel with few rows per thread) moves its bytes more slowly:
//! `traffic time = bytes / BW * max(1, A0 / active)`, with `active` the threads with work
//! ([`active_threads`]) and `A0` the threads the device needs in flight. With `A0 = f R` fixed
//! (`R` the resident threads of the device, `f` = [`FeatureSet::fill_fraction`]) this is still
//! linear in the coefficients: the traffic terms are multiplied by `max(1, f R / active)`.
//!
//! # Choosing the feature set
//!
//! [`FeatureSet::defaults`] lists 30 feature sets from the simplest up: every combination of
//! `depth` (off, on), the fill scaling (off, `f` = 0.5, 1) and the L2 treatment (none, a
//! split at 1 or 0.5 times the L2 size, bins with knots at 0.5, 1, 2 or at 0.25, 1, 4 times
//! the L2 size). For every candidate measured on enough matrices, each set is scored by k-fold
//! cross-validation over the fit matrices (the mean out-of-fold absolute relative error), and
//! the simplest set within one standard error of the best is kept (the one-standard-error
//! rule). Feature sets are data (the set chosen is
//! stored with each candidate), so trying another one is a change of [`SpmvFitOptions`].
//!
//! # Measured times
//!
//! A record counts when its status is [`Status::Ok`] and its timing is valid; skipped records
//! (padding refused, configuration not allowed) are "not applicable", failed ones are errors,
//! and neither is ever a time. The median of the repetitions is the time. cuSPARSE records
//! (`cusparse*` kernels) are the peer, never a candidate. The profiler leaves out a grid
//! policy whose launch equals an earlier policy's (on a small matrix one wave covers every
//! row); such a missing record takes its twin's time ([`measured_times`]).
use std::collections::{BTreeMap, HashMap};

use autopcg_sparse::PaddingLimits;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::nnls::{nnls, DenseMatrix};
use crate::profile::{candidate_name, MatrixRecord, MatrixSet, Profile, SpmvRecord, Status};
use crate::work::{SpmvWork, VECTOR_LANES};
use autopcg_catalog::DeviceProps;

use crate::ModelError;

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
    /// The kind of `kernel` reading `format`.
    pub fn of(format: &str, kernel: &str) -> KernelKind {
        match (format, kernel) {
            ("csr", "spmv_csr_scalar") => KernelKind::CsrScalar,
            ("csr", k) => k
                .strip_prefix("spmv_csr_vector_")
                .and_then(|l| l.parse::<u32>().ok())
                .filter(|l| VECTOR_LANES.contains(l))
                .map_or(KernelKind::Generic, |lanes| KernelKind::CsrVector { lanes }),
            ("ell", "spmv_ell") => KernelKind::Ell,
            ("dia", "spmv_dia") => KernelKind::Dia,
            ("coo", "spmv_coo_atomic") => KernelKind::CooAtomic,
            ("coo", "spmv_coo_segment") => KernelKind::CooSegment,
            ("hyb", k) if k.starts_with("spmv_ell+spmv_coo_") => KernelKind::Hyb,
            _ => KernelKind::Generic,
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
    /// [`FeatureSet::l2_knots`]).
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

/// Which terms a candidate's model uses beyond its kind's base terms, and how the traffic
/// terms are scaled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FeatureSet {
    /// Short name, reported with the fit.
    pub name: String,
    /// Add the [`Term::Depth`] term.
    pub depth: bool,
    /// Split the traffic terms at this fraction of the L2 size (`None`: no split).
    pub l2_fraction: Option<f64>,
    /// Scale the traffic terms by `max(1, f R / active)` with `R` the device's resident threads
    /// and `active` the threads the launch keeps in flight (`None`: no scaling); see the module
    /// documentation.
    #[serde(default)]
    pub fill_fraction: Option<f64>,
    /// Piecewise-linear L2 bins: knots as multiples of the L2 size, increasing. Each traffic
    /// term gets one column per knot, weighted by hat functions over `ln(B / L2)` (1 at its
    /// knot, falling linearly to 0 at the neighbouring knots, held at 1 beyond the outer
    /// knots), so the cost per unit can follow any transition between cache and memory.
    /// Empty: no bins. Not combined with `l2_fraction`.
    #[serde(default)]
    pub l2_knots: Vec<f64>,
}

impl FeatureSet {
    /// The feature sets tried by default, simplest first: every combination of `depth` (off,
    /// on), the fill scaling (off, `f` = 0.5, 1) and the L2 split (off, at 1 and at 0.5 times
    /// the L2 size), ordered by the number of columns they add.
    pub fn defaults() -> Vec<FeatureSet> {
        #[derive(Clone, Copy)]
        enum L2 {
            No,
            Split(f64),
            Bins(&'static [f64]),
        }
        let mut out = Vec::new();
        for l2 in [
            L2::No,
            L2::Split(1.0),
            L2::Split(0.5),
            L2::Bins(&[0.5, 1.0, 2.0]),
            L2::Bins(&[0.25, 1.0, 4.0]),
        ] {
            for depth in [false, true] {
                for fill in [None, Some(0.5), Some(1.0)] {
                    let mut parts = Vec::new();
                    if depth {
                        parts.push("depth".to_string());
                    }
                    if let Some(f) = fill {
                        parts.push(format!("fill{f}"));
                    }
                    let (l2_fraction, l2_knots) = match l2 {
                        L2::No => (None, Vec::new()),
                        L2::Split(f) => {
                            parts.push(format!("l2x{f}"));
                            (Some(f), Vec::new())
                        }
                        L2::Bins(k) => {
                            let names: Vec<String> = k.iter().map(|v| v.to_string()).collect();
                            parts.push(format!("l2bins{}", names.join(":")));
                            (None, k.to_vec())
                        }
                    };
                    out.push(FeatureSet {
                        name: if parts.is_empty() {
                            "base".to_string()
                        } else {
                            parts.join("+")
                        },
                        depth,
                        l2_fraction,
                        fill_fraction: fill,
                        l2_knots,
                    });
                }
            }
        }
        out
    }

    /// The sets of [`FeatureSet::defaults`] that treat the L2 regime (a split or bins), simplest
    /// first. Where the fit matrices are few and their working sets straddle the L2 size, the
    /// cross-validation cannot tell the L2 treatment from noise and the one-standard-error rule
    /// falls back to sets without it, which over-predict the matrices that fit in L2; fitting
    /// with these sets only makes the treatment a prior instead of a choice.
    pub fn with_l2() -> Vec<FeatureSet> {
        Self::defaults()
            .into_iter()
            .filter(|f| f.l2_fraction.is_some() || !f.l2_knots.is_empty())
            .collect()
    }

    /// Checks the fractions are finite and positive and the knots increasing.
    fn check(&self) -> Result<(), String> {
        for (what, v) in [("L2", self.l2_fraction), ("fill", self.fill_fraction)] {
            if v.is_some_and(|x| !(x.is_finite() && x > 0.0)) {
                return Err(format!(
                    "feature set {}: the {what} fraction must be finite and positive",
                    self.name
                ));
            }
        }
        let k = &self.l2_knots;
        if k.iter().any(|x| !(x.is_finite() && *x > 0.0)) || k.windows(2).any(|w| w[0] >= w[1]) {
            return Err(format!(
                "feature set {}: L2 knots must be positive and increasing",
                self.name
            ));
        }
        if !k.is_empty() && self.l2_fraction.is_some() {
            return Err(format!(
                "feature set {}: L2 bins and an L2 split exclude each other",
                self.name
            ));
        }
        Ok(())
    }

    /// Hat-function weights of a working set of `bytes` over the L2 knots (sum 1; empty
    /// without knots).
    pub fn bin_weights(&self, bytes: f64, l2_bytes: u64) -> Vec<f64> {
        let k = &self.l2_knots;
        let mut w = vec![0.0; k.len()];
        if k.is_empty() {
            return w;
        }
        let x = (bytes.max(1.0) / (l2_bytes.max(1) as f64)).ln();
        let lk: Vec<f64> = k.iter().map(|v| v.ln()).collect();
        if x <= lk[0] {
            w[0] = 1.0;
        } else if x >= lk[lk.len() - 1] {
            w[lk.len() - 1] = 1.0;
        } else {
            for i in 0..lk.len() - 1 {
                if x >= lk[i] && x < lk[i + 1] {
                    let a = (lk[i + 1] - x) / (lk[i + 1] - lk[i]);
                    w[i] = a;
                    w[i + 1] = 1.0 - a;
                    break;
                }
            }
        }
        w
    }

    /// The columns of a model of `kind` under this set.
    pub fn columns(&self, kind: KernelKind) -> Vec<TermSpec> {
        let mut terms = kind.terms();
        if self.depth {
            terms.push(Term::Depth);
        }
        let mut out = Vec::new();
        for t in terms {
            if t.is_traffic() && !self.l2_knots.is_empty() {
                for k in 0..self.l2_knots.len() {
                    out.push(TermSpec {
                        term: t,
                        part: Residency::Bin(k),
                    });
                }
            } else if t.is_traffic() && self.l2_fraction.is_some() {
                out.push(TermSpec {
                    term: t,
                    part: Residency::InL2,
                });
                out.push(TermSpec {
                    term: t,
                    part: Residency::OutL2,
                });
            } else {
                out.push(TermSpec {
                    term: t,
                    part: Residency::All,
                });
            }
        }
        out
    }
}

/// The device limits the terms read: launch geometry of the grid policies and the L2 size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchLimits {
    /// Streaming multiprocessors.
    pub sm_count: u32,
    /// Resident threads per SM.
    pub max_threads_per_sm: u32,
    /// Resident blocks per SM.
    pub max_blocks_per_sm: u32,
    /// L2 cache, bytes.
    pub l2_bytes: u64,
}

impl LaunchLimits {
    /// The limits of a device.
    pub fn of(d: &DeviceProps) -> Self {
        LaunchLimits {
            sm_count: d.sm_count,
            max_threads_per_sm: d.max_threads_per_sm,
            max_blocks_per_sm: d.max_blocks_per_sm,
            l2_bytes: u64::from(d.l2_bytes),
        }
    }

    /// Threads the device keeps resident: SMs times resident threads per SM.
    pub fn resident_threads(&self) -> f64 {
        f64::from(self.sm_count.max(1)) * f64::from(self.max_threads_per_sm.max(1))
    }

    /// Blocks a launch of `threads` per block over `items` work items gets under `grid`: one
    /// block per `threads` items for `cover` (and any unknown policy), at most one resident
    /// wave for `wave` (the GPU crate's `LaunchConfig::grid_stride`); at least 1.
    pub fn blocks(&self, items: u64, threads: u32, grid: Option<&str>) -> u64 {
        let t = u64::from(threads.max(1));
        let cover = items.div_ceil(t).max(1);
        if grid == Some("wave") {
            let per_sm =
                (self.max_threads_per_sm / threads.max(1)).clamp(1, self.max_blocks_per_sm.max(1));
            let wave = u64::from(self.sm_count.max(1)) * u64::from(per_sm);
            cover.min(wave).max(1)
        } else {
            cover
        }
    }
}

/// True when `format` can hold the matrix of `w` within `limits`: ELL, DIA and the ELL part of
/// HYB are refused when their fill ratio (slots over the nonzeros they hold) or their padded
/// bytes exceed the limits, with the byte counts of the sparse crate's conversions; every other
/// format always applies.
///
/// HYB is also refused when its COO part is empty (`hyb_coo_nnz == 0`, every row within the
/// split, e.g. a stencil): it is then the ELL kernel plus an empty launch, which the ELL
/// candidates already cover. The profile measures only one HYB kernel on such a matrix (its
/// COO kernels have nothing to do), so a HYB model fitted on matrices with a COO part would
/// otherwise be extrapolated to a case it never saw.
pub fn format_applies(format: &str, w: &SpmvWork, limits: &PaddingLimits) -> bool {
    let within = |slots: u64, nnz: u64, bytes: f64| {
        let fill = if nnz == 0 {
            if slots == 0 {
                1.0
            } else {
                f64::INFINITY
            }
        } else {
            slots as f64 / nnz as f64
        };
        fill <= limits.max_fill_ratio && bytes <= limits.max_bytes as f64
    };
    match format {
        "ell" => within(w.ell_slots, w.nnz, 12.0 * w.ell_slots as f64),
        "dia" => within(
            w.dia_slots,
            w.nnz,
            8.0 * w.dia_slots as f64 + 4.0 * w.ndiag as f64,
        ),
        "hyb" => {
            w.hyb_coo_nnz > 0
                && within(
                    w.hyb_ell_slots,
                    w.nnz.saturating_sub(w.hyb_coo_nnz),
                    12.0 * w.hyb_ell_slots as f64,
                )
        }
        _ => true,
    }
}

/// Bytes a SpMV in `format` touches: the format's arrays (32-bit indices, double values) plus
/// `x` and `y`. Unknown formats count as CSR.
pub fn working_set_bytes(format: &str, w: &SpmvWork) -> f64 {
    let (n, nnz) = (w.n as f64, w.nnz as f64);
    let xy = 8.0 * (w.ncols as f64 + n);
    let arrays = match format {
        "ell" => 12.0 * w.ell_slots as f64,
        "dia" => 8.0 * w.dia_slots as f64 + 4.0 * w.ndiag as f64,
        "coo" => 16.0 * nnz,
        "hyb" => 12.0 * w.hyb_ell_slots as f64 + 16.0 * w.hyb_coo_nnz as f64,
        _ => 4.0 * (n + 1.0) + 12.0 * nnz,
    };
    arrays + xy
}

/// The L2-resident share `s = 1 / (1 + (B / (fraction * l2))^4)` of a working set of `bytes`.
pub fn l2_share(bytes: f64, l2_bytes: u64, fraction: f64) -> f64 {
    let cap = fraction * l2_bytes as f64;
    if cap <= 0.0 || !cap.is_finite() {
        return 0.0;
    }
    1.0 / (1.0 + (bytes / cap).powi(4))
}

/// Loop trips of the busiest thread of `cand` on `w` (the [`Term::Depth`] value).
pub fn depth(cand: &SpmvCandidate, w: &SpmvWork, limits: &LaunchLimits) -> f64 {
    let t = cand.threads.unwrap_or(256).max(1);
    let grid = cand.grid.as_deref();
    let n = w.n.max(1) as f64;
    let rounds = |items: u64, per_item_threads: u64| -> f64 {
        // Grid-stride rounds over `items / per_item_threads` units.
        let blocks = limits.blocks(items, t, grid);
        let units_in_flight = (blocks * u64::from(t) / per_item_threads.max(1)).max(1);
        (items / per_item_threads.max(1))
            .div_ceil(units_in_flight)
            .max(1) as f64
    };
    match cand.kind() {
        KernelKind::CsrScalar => {
            let mean = w.scalar_warp_slots as f64 / (32.0 * w.n.div_ceil(32).max(1) as f64);
            (w.row_len_max as f64).max(rounds(w.n, 1) * mean)
        }
        KernelKind::CsrVector { lanes } => {
            let k = VECTOR_LANES.iter().position(|&l| l == lanes).unwrap_or(0);
            let l = u64::from(lanes);
            let mean = w.vector_steps[k] as f64 / n;
            (w.row_len_max.div_ceil(l) as f64).max(rounds(w.n * l, l) * mean)
        }
        KernelKind::Ell => rounds(w.n, 1) * w.ell_width as f64,
        KernelKind::Dia => rounds(w.n, 1) * w.ndiag as f64,
        KernelKind::CooAtomic | KernelKind::CooSegment => rounds(w.nnz, 1),
        KernelKind::Hyb => {
            let coo = if w.hyb_coo_nnz > 0 {
                rounds(w.hyb_coo_nnz, 1)
            } else {
                0.0
            };
            rounds(w.n, 1) * w.hyb_split as f64 + coo
        }
        KernelKind::Generic => w.row_len_max as f64,
    }
}

/// The value of `term` for `cand` on `w`, before any L2 split.
pub fn term_value(term: Term, cand: &SpmvCandidate, w: &SpmvWork, limits: &LaunchLimits) -> f64 {
    let kind = cand.kind();
    match term {
        Term::Launch => 1.0,
        Term::CooLaunch => {
            if kind == KernelKind::Hyb && w.hyb_coo_nnz > 0 {
                1.0
            } else {
                0.0
            }
        }
        Term::Rows => w.n as f64,
        Term::Nnz => w.nnz as f64,
        Term::XLines => w.x_lines as f64,
        Term::Slots => match kind {
            KernelKind::CsrScalar => w.scalar_warp_slots as f64,
            KernelKind::CsrVector { lanes } => VECTOR_LANES
                .iter()
                .position(|&l| l == lanes)
                .map_or(0.0, |k| w.vector_steps[k] as f64),
            KernelKind::Ell => w.ell_slots as f64,
            KernelKind::Dia => w.dia_slots as f64,
            KernelKind::Hyb => w.hyb_ell_slots as f64,
            _ => 0.0,
        },
        Term::CooNnz => {
            if kind == KernelKind::Hyb {
                w.hyb_coo_nnz as f64
            } else {
                0.0
            }
        }
        Term::Depth => depth(cand, w, limits),
        Term::Contention => atomic_contention(w),
    }
}

/// The [`Term::Contention`] value of `w`: `min(nnz, sum_rows len^2 / 32)`, the sum of squared
/// row lengths from their mean and standard deviation.
pub fn atomic_contention(w: &SpmvWork) -> f64 {
    let n = w.n as f64;
    if n <= 0.0 {
        return 0.0;
    }
    let mean = w.nnz as f64 / n;
    let sum_sq = n * (w.row_len_std * w.row_len_std + mean * mean);
    (sum_sq / 32.0).min(w.nnz as f64)
}

/// Threads a launch of `cand` on `w` keeps in flight: its blocks times threads per block,
/// at most the device's resident threads (the ELL launch for HYB).
pub fn active_threads(cand: &SpmvCandidate, w: &SpmvWork, limits: &LaunchLimits) -> f64 {
    let t = cand.threads.unwrap_or(256).max(1);
    let items = match cand.kind() {
        KernelKind::CsrVector { lanes } => w.n.saturating_mul(u64::from(lanes)),
        KernelKind::CooAtomic | KernelKind::CooSegment | KernelKind::Generic => w.nnz,
        _ => w.n,
    };
    let blocks = limits.blocks(items, t, cand.grid.as_deref());
    let launched = (blocks * u64::from(t)).min(items.max(1)) as f64;
    launched.min(limits.resident_threads()).max(1.0)
}

/// The row of model columns `cols` for `cand` on `w` under the feature set `fs` (its L2 split
/// and fill scaling).
pub fn design_row(
    cols: &[TermSpec],
    fs: &FeatureSet,
    cand: &SpmvCandidate,
    w: &SpmvWork,
    limits: &LaunchLimits,
) -> Vec<f64> {
    let bytes = working_set_bytes(&cand.format, w);
    let s = fs
        .l2_fraction
        .map_or(0.0, |f| l2_share(bytes, limits.l2_bytes, f));
    let bins = fs.bin_weights(bytes, limits.l2_bytes);
    let fill = fs.fill_fraction.map_or(1.0, |f| {
        (f * limits.resident_threads() / active_threads(cand, w, limits)).max(1.0)
    });
    cols.iter()
        .map(|c| {
            let mut v = term_value(c.term, cand, w, limits);
            if c.term.is_traffic() {
                v *= fill;
            }
            match c.part {
                Residency::All => v,
                Residency::InL2 => v * s,
                Residency::OutL2 => v * (1.0 - s),
                Residency::Bin(k) => v * bins.get(k).copied().unwrap_or(0.0),
            }
        })
        .collect()
}

/// In-sample and cross-validated accuracy of one fit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FitStats {
    /// Matrices the fit used.
    pub matrices: usize,
    /// Median absolute relative error on them.
    pub median_rel_err: f64,
    /// 90th percentile of the absolute relative error.
    pub p90_rel_err: f64,
    /// Largest absolute relative error.
    pub max_rel_err: f64,
    /// Median out-of-fold relative error of the chosen feature set (`None` when too few
    /// matrices for cross-validation).
    pub cv_median_rel_err: Option<f64>,
    /// 90th percentile of the out-of-fold relative errors.
    pub cv_p90_rel_err: Option<f64>,
}

/// The fitted time model of one candidate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CandidateModel {
    /// The candidate.
    pub candidate: SpmvCandidate,
    /// Its kernel kind (from the names, stored for readers of the model file).
    pub kind: KernelKind,
    /// The feature set chosen.
    pub features: FeatureSet,
    /// The columns of the model.
    pub columns: Vec<TermSpec>,
    /// Milliseconds per unit of each column, all `>= 0`.
    pub coef: Vec<f64>,
    /// Accuracy.
    pub stats: FitStats,
}

impl CandidateModel {
    /// Predicted milliseconds on `w`.
    pub fn predict(&self, w: &SpmvWork, limits: &LaunchLimits) -> f64 {
        let row = design_row(&self.columns, &self.features, &self.candidate, w, limits);
        row.iter().zip(&self.coef).map(|(a, c)| a * c).sum()
    }
}

/// A candidate left without a model, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DroppedCandidate {
    /// The candidate's name.
    pub name: String,
    /// Fit matrices it was measured on.
    pub matrices: usize,
    /// Why it has no model.
    pub reason: String,
}

/// A term of a conversion-time model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConversionTerm {
    /// 1: fixed cost (allocation, launch, transfer latency).
    Const,
    /// Rows.
    Rows,
    /// Stored entries.
    Nnz,
    /// Slots the format stores (padding included): ELL `n K`, DIA `n ndiag`, HYB ELL slots
    /// plus COO entries, otherwise `nnz`.
    Slots,
}

/// Slots a format stores for `w` (the [`ConversionTerm::Slots`] value).
pub fn format_slots(format: &str, w: &SpmvWork) -> f64 {
    match format {
        "ell" => w.ell_slots as f64,
        "dia" => w.dia_slots as f64,
        "hyb" => (w.hyb_ell_slots + w.hyb_coo_nnz) as f64,
        _ => w.nnz as f64,
    }
}

/// The fitted conversion-time model of one format: milliseconds to turn the CSR matrix into
/// this format on the device (the device conversion where the profile measured one, else host
/// conversion plus upload).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConversionModel {
    /// Format name.
    pub format: String,
    /// Terms.
    pub terms: Vec<ConversionTerm>,
    /// Milliseconds per unit of each term, all `>= 0`.
    pub coef: Vec<f64>,
    /// Accuracy.
    pub stats: FitStats,
}

impl ConversionModel {
    fn row(terms: &[ConversionTerm], format: &str, w: &SpmvWork) -> Vec<f64> {
        terms
            .iter()
            .map(|t| match t {
                ConversionTerm::Const => 1.0,
                ConversionTerm::Rows => w.n as f64,
                ConversionTerm::Nnz => w.nnz as f64,
                ConversionTerm::Slots => format_slots(format, w),
            })
            .collect()
    }

    /// Predicted milliseconds on `w`.
    pub fn predict(&self, w: &SpmvWork) -> f64 {
        Self::row(&self.terms, &self.format, w)
            .iter()
            .zip(&self.coef)
            .map(|(a, c)| a * c)
            .sum()
    }
}

/// A candidate's predicted time on a matrix.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpmvPrediction {
    /// The candidate.
    pub candidate: SpmvCandidate,
    /// Predicted milliseconds per SpMV.
    pub predicted_ms: f64,
    /// Predicted milliseconds to convert the CSR matrix to the candidate's format (0 for CSR;
    /// `None` where no conversion model covers the format).
    pub conversion_ms: Option<f64>,
}

impl SpmvPrediction {
    /// The candidate's name.
    pub fn name(&self) -> String {
        self.candidate.name()
    }
}

/// Options of [`SpmvModel::fit`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpmvFitOptions {
    /// Which matrices to fit on (default: the fit set).
    pub set: MatrixSet,
    /// A candidate measured on fewer matrices gets no model (default 5).
    pub min_matrices: usize,
    /// Folds of the cross-validation that picks the feature set (default 5).
    pub folds: usize,
    /// Cross-validate only candidates measured on at least this many matrices; others get the
    /// first feature set (default 12).
    pub min_matrices_cv: usize,
    /// Feature sets to choose from, simplest first ([`FeatureSet::defaults`]).
    pub feature_sets: Vec<FeatureSet>,
    /// Keep the simplest set whose cross-validated mean relative error is within this many
    /// standard errors of the best set's (default 1: the one-standard-error rule; 0 keeps the
    /// best).
    pub se_multiple: f64,
    /// Padding limits deciding where ELL, DIA and HYB apply.
    pub padding: PaddingLimits,
}

impl SpmvFitOptions {
    /// The options `autopcg tune` fits with: the default options restricted to the feature
    /// sets that treat the L2 regime and the launch depth ([`FeatureSet::with_l2`] with the
    /// depth term). With the few dozen matrices of a tune, cross-validation cannot resolve
    /// either and falls back to simpler sets that over-predict the matrices that fit in L2.
    /// This design was chosen among three (all sets, L2 sets, L2 and depth sets) by the
    /// held-out evaluation of an H200 and an H100 (`spmv_eval` example): within 5% of the best
    /// on 63%, 68% and 74% of the H200's evaluation matrices, 63%, 68% and 68% of the H100's.
    pub fn for_tune() -> SpmvFitOptions {
        let mut o = SpmvFitOptions {
            feature_sets: FeatureSet::with_l2(),
            ..SpmvFitOptions::default()
        };
        o.feature_sets.retain(|f| f.depth);
        o
    }
}

impl Default for SpmvFitOptions {
    fn default() -> Self {
        SpmvFitOptions {
            set: MatrixSet::Fit,
            min_matrices: 5,
            folds: 5,
            min_matrices_cv: 12,
            feature_sets: FeatureSet::defaults(),
            se_multiple: 1.0,
            padding: PaddingLimits::default(),
        }
    }
}

/// Measured times on one matrix.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct MatrixTimes {
    /// autopcg's candidates: median milliseconds.
    pub own: BTreeMap<SpmvCandidate, f64>,
    /// cuSPARSE algorithms: median milliseconds by kernel name.
    pub cusparse: BTreeMap<String, f64>,
}

impl MatrixTimes {
    /// The fastest own candidate and its time.
    pub fn best_own(&self) -> Option<(&SpmvCandidate, f64)> {
        self.own
            .iter()
            .map(|(c, &t)| (c, t))
            .min_by(|a, b| a.1.total_cmp(&b.1).then_with(|| a.0.cmp(b.0)))
    }

    /// The fastest cuSPARSE algorithm's time.
    pub fn best_cusparse(&self) -> Option<f64> {
        self.cusparse.values().copied().min_by(f64::total_cmp)
    }

    /// The measured time of the candidate named `name`.
    pub fn time_of(&self, name: &str) -> Option<f64> {
        self.own
            .iter()
            .find(|(c, _)| c.name() == name)
            .map(|(_, &t)| t)
    }
}

/// The usable time of a record: its median when the record is [`Status::Ok`] with a valid,
/// positive timing.
pub fn record_time(r: &SpmvRecord) -> Option<f64> {
    if r.status != Status::Ok {
        return None;
    }
    let t = r.timing.as_ref()?;
    (t.is_valid() && t.median_ms > 0.0).then_some(t.median_ms)
}

/// Measured times per matrix id, for every matrix with at least one usable record.
///
/// A candidate measured twice on a matrix keeps its faster time. The profiler does not record
/// a grid policy whose launch equals another policy's at the same threads per block; where one
/// policy of `(format, kernel, threads)` is measured on a matrix and another policy that the
/// profile measures elsewhere has no record at all on it (not even skipped or failed), that
/// policy takes the measured policy's time.
pub fn measured_times(profile: &Profile) -> BTreeMap<String, MatrixTimes> {
    let mut out: BTreeMap<String, MatrixTimes> = BTreeMap::new();
    // (format, kernel, threads) -> every grid policy seen anywhere.
    let mut policies: HashMap<(String, String, u32), Vec<String>> = HashMap::new();
    // (matrix, format, kernel, threads) -> grid policies with any record.
    let mut present: HashMap<(String, String, String, u32), Vec<String>> = HashMap::new();
    for r in &profile.spmv {
        if let (Some(t), Some(g)) = (r.threads, r.grid.as_ref()) {
            let p = policies
                .entry((r.format.clone(), r.kernel.clone(), t))
                .or_default();
            if !p.contains(g) {
                p.push(g.clone());
            }
            present
                .entry((r.matrix.clone(), r.format.clone(), r.kernel.clone(), t))
                .or_default()
                .push(g.clone());
        }
        let Some(time) = record_time(r) else {
            continue;
        };
        let c = SpmvCandidate::of_record(r);
        let m = out.entry(r.matrix.clone()).or_default();
        if c.is_cusparse() {
            let e = m.cusparse.entry(c.kernel).or_insert(time);
            *e = e.min(time);
        } else {
            let e = m.own.entry(c).or_insert(time);
            *e = e.min(time);
        }
    }
    for (id, m) in out.iter_mut() {
        let mut twins = Vec::new();
        for (c, &t) in &m.own {
            let Some(threads) = c.threads else { continue };
            let key = (c.format.clone(), c.kernel.clone(), threads);
            let Some(all) = policies.get(&key) else {
                continue;
            };
            let here = present.get(&(id.clone(), c.format.clone(), c.kernel.clone(), threads));
            for g in all {
                if here.is_some_and(|h| h.contains(g)) {
                    continue;
                }
                let mut twin = c.clone();
                twin.grid = Some(g.clone());
                twins.push((twin, t));
            }
        }
        for (c, t) in twins {
            m.own.entry(c).or_insert(t);
        }
    }
    out
}

/// Nearest-rank quantile `q` in `[0, 1]` of `v` (sorted here); NaN for an empty slice.
pub fn quantile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let rank = ((q.clamp(0.0, 1.0) * s.len() as f64).ceil() as usize).clamp(1, s.len());
    s[rank - 1]
}

/// Geometric mean of positive values; NaN for an empty slice.
pub fn geomean(v: &[f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    (v.iter().map(|x| x.ln()).sum::<f64>() / v.len() as f64).exp()
}

fn rel_errors(pred: &[f64], t: &[f64]) -> Vec<f64> {
    pred.iter()
        .zip(t)
        .map(|(p, t)| ((p - t) / t).abs())
        .collect()
}

/// Fits `t ~ rows . coef` with coef >= 0 on the relative error. `rows[i]` are the design rows,
/// `t[i] > 0` the measured times.
fn fit_relative(rows: &[Vec<f64>], t: &[f64]) -> Result<Vec<f64>, String> {
    let k = rows.first().map_or(0, Vec::len);
    let mut a = DenseMatrix::zeros(rows.len(), k);
    for (i, (r, ti)) in rows.iter().zip(t).enumerate() {
        for (j, v) in r.iter().enumerate() {
            a.set(i, j, v / ti);
        }
    }
    // Column scaling: NNLS is invariant under positive column scaling, and unit columns keep
    // the QR steps well conditioned when terms span ten orders of magnitude.
    let scale: Vec<f64> = (0..k).map(|j| a.col_norm(j)).collect();
    for i in 0..a.rows() {
        for (j, s) in scale.iter().enumerate() {
            if *s > 0.0 {
                a.set(i, j, a.get(i, j) / s);
            }
        }
    }
    let b = vec![1.0; rows.len()];
    let sol = nnls(&a, &b).map_err(|e| e.to_string())?;
    Ok(sol
        .x
        .iter()
        .zip(&scale)
        .map(|(y, s)| if *s > 0.0 { y / s } else { 0.0 })
        .collect())
}

fn predict_rows(rows: &[Vec<f64>], coef: &[f64]) -> Vec<f64> {
    rows.iter()
        .map(|r| r.iter().zip(coef).map(|(a, c)| a * c).sum())
        .collect()
}

/// One candidate's data points: (work, measured ms), ordered by nnz then id for the folds.
struct Points<'a> {
    works: Vec<&'a SpmvWork>,
    times: Vec<f64>,
}

/// Cross-validated relative errors of a feature set (`None` if some fold cannot be fitted).
fn cross_validate(
    pts: &Points<'_>,
    fs: &FeatureSet,
    cand: &SpmvCandidate,
    limits: &LaunchLimits,
    folds: usize,
) -> Option<Vec<f64>> {
    let cols = fs.columns(cand.kind());
    let rows: Vec<Vec<f64>> = pts
        .works
        .iter()
        .map(|w| design_row(&cols, fs, cand, w, limits))
        .collect();
    let m = rows.len();
    let k = folds.clamp(2, m.max(2));
    let mut errs = Vec::with_capacity(m);
    for f in 0..k {
        let train: Vec<usize> = (0..m).filter(|i| i % k != f).collect();
        let test: Vec<usize> = (0..m).filter(|i| i % k == f).collect();
        if test.is_empty() {
            continue;
        }
        let tr: Vec<Vec<f64>> = train.iter().map(|&i| rows[i].clone()).collect();
        let tt: Vec<f64> = train.iter().map(|&i| pts.times[i]).collect();
        let coef = fit_relative(&tr, &tt).ok()?;
        for &i in &test {
            let p: f64 = rows[i].iter().zip(&coef).map(|(a, c)| a * c).sum();
            errs.push(((p - pts.times[i]) / pts.times[i]).abs());
        }
    }
    Some(errs)
}

/// Mean of the out-of-fold absolute relative errors and its standard error.
fn cv_score(errs: &[f64]) -> (f64, f64) {
    let m = errs.len().max(1) as f64;
    let mean = errs.iter().sum::<f64>() / m;
    let var = errs.iter().map(|e| (e - mean).powi(2)).sum::<f64>() / (m - 1.0).max(1.0);
    (mean, (var / m).sqrt())
}

/// The SpMV performance model of one device: a time model per candidate, a conversion model
/// per format, and the padding limits that decide where the padded formats apply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpmvModel {
    /// Name of the device profiled.
    pub device: String,
    /// Its launch limits and L2 size.
    pub limits: LaunchLimits,
    /// Padding limits: ELL, DIA and HYB apply only within them.
    pub padding: PaddingLimits,
    /// One model per candidate, in name order.
    pub candidates: Vec<CandidateModel>,
    /// One conversion model per format measured.
    pub conversions: Vec<ConversionModel>,
    /// Candidates without a model and why.
    pub dropped: Vec<DroppedCandidate>,
    /// Notes on the fit (data left out and why).
    pub notes: Vec<String>,
}

impl SpmvModel {
    /// Fits a model per candidate from the matrices of `opts.set` in `profile`.
    ///
    /// Errors ([`ModelError::Fit`]): no header, no matrix of the set, no usable SpMV record on
    /// them, or no candidate measured on enough matrices; invalid options are
    /// [`ModelError::InvalidParameter`].
    pub fn fit(profile: &Profile, opts: &SpmvFitOptions) -> Result<SpmvModel, ModelError> {
        let fit_err = |reason: String| ModelError::Fit {
            what: "SpMV model".into(),
            reason,
        };
        if opts.feature_sets.is_empty() {
            return Err(ModelError::InvalidParameter(
                "no feature set to fit the SpMV model with".into(),
            ));
        }
        for f in &opts.feature_sets {
            f.check().map_err(ModelError::InvalidParameter)?;
        }
        let device = profile
            .device()
            .ok_or_else(|| fit_err("the profile has no header (empty profile)".into()))?;
        let limits = LaunchLimits::of(device);
        let matrices: HashMap<&str, &MatrixRecord> = profile
            .matrices
            .iter()
            .filter(|m| m.set == opts.set)
            .map(|m| (m.id.as_str(), m))
            .collect();
        if matrices.is_empty() {
            return Err(fit_err(format!(
                "the profile has no {:?}-set matrix",
                opts.set
            )));
        }
        let times = measured_times(profile);
        // candidate -> (nnz, id, work, time)
        let mut per: BTreeMap<SpmvCandidate, Vec<(u64, &str, &SpmvWork, f64)>> = BTreeMap::new();
        for (id, mt) in &times {
            let Some(m) = matrices.get(id.as_str()) else {
                continue;
            };
            for (c, &t) in &mt.own {
                per.entry(c.clone())
                    .or_default()
                    .push((m.work.nnz, m.id.as_str(), &m.work, t));
            }
        }
        if per.is_empty() {
            return Err(fit_err(format!(
                "no usable SpMV record on the {} {:?}-set matrices",
                matrices.len(),
                opts.set
            )));
        }
        let mut notes = Vec::new();
        let without: Vec<&str> = matrices
            .keys()
            .filter(|id| !times.contains_key(**id))
            .copied()
            .collect();
        if !without.is_empty() {
            notes.push(format!(
                "{} matrices without any usable SpMV record",
                without.len()
            ));
        }
        // Candidates are independent: fit them in parallel, keep name order.
        let per: Vec<_> = per.into_iter().collect();
        let results: Vec<Result<CandidateModel, DroppedCandidate>> = per
            .into_par_iter()
            .map(|(cand, mut pts)| {
                pts.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.cmp(b.1)));
                let count = pts.len();
                if count < opts.min_matrices.max(1) {
                    return Err(DroppedCandidate {
                        name: cand.name(),
                        matrices: count,
                        reason: format!(
                            "measured on {count} matrices, fewer than {}",
                            opts.min_matrices
                        ),
                    });
                }
                let points = Points {
                    works: pts.iter().map(|p| p.2).collect(),
                    times: pts.iter().map(|p| p.3).collect(),
                };
                fit_candidate(&cand, &points, &limits, opts).map_err(|reason| DroppedCandidate {
                    name: cand.name(),
                    matrices: count,
                    reason,
                })
            })
            .collect();
        let mut candidates = Vec::new();
        let mut dropped = Vec::new();
        for r in results {
            match r {
                Ok(m) => candidates.push(m),
                Err(d) => dropped.push(d),
            }
        }
        if candidates.is_empty() {
            return Err(fit_err(format!(
                "no candidate could be fitted ({} dropped: {})",
                dropped.len(),
                dropped
                    .iter()
                    .take(3)
                    .map(|d| format!("{}: {}", d.name, d.reason))
                    .collect::<Vec<_>>()
                    .join("; ")
            )));
        }
        let conversions = fit_conversions(profile, &matrices, opts, &mut notes);
        Ok(SpmvModel {
            device: device.name.clone(),
            limits,
            padding: opts.padding,
            candidates,
            conversions,
            dropped,
            notes,
        })
    }

    /// Checks the model's internal consistency (column and coefficient counts agree, every
    /// coefficient finite and non-negative); a model read from a file should pass this before
    /// use.
    pub fn validate(&self) -> Result<(), ModelError> {
        let bad = |reason: String| ModelError::Invalid {
            path: "<memory>".into(),
            reason,
        };
        for c in &self.candidates {
            if c.columns.len() != c.coef.len() {
                return Err(bad(format!(
                    "{}: {} columns, {} coefficients",
                    c.candidate.name(),
                    c.columns.len(),
                    c.coef.len()
                )));
            }
            if c.coef.iter().any(|v| !(v.is_finite() && *v >= 0.0)) {
                return Err(bad(format!(
                    "{}: a coefficient is negative or not finite",
                    c.candidate.name()
                )));
            }
        }
        for c in &self.conversions {
            if c.terms.len() != c.coef.len() || c.coef.iter().any(|v| !(v.is_finite() && *v >= 0.0))
            {
                return Err(bad(format!("conversion model of {}", c.format)));
            }
        }
        Ok(())
    }

    /// True when `format` can hold the matrix of `w` within the padding limits (ELL, DIA and
    /// the ELL part of HYB, with the byte counts of the sparse crate's conversions; every other
    /// format always applies).
    pub fn applies(&self, format: &str, w: &SpmvWork) -> bool {
        format_applies(format, w, &self.padding)
    }

    /// Predicted time of every candidate that applies to the matrix of `w`, fastest first
    /// (ties by name). Candidates whose prediction is not a positive finite time are left
    /// out.
    pub fn predict(&self, w: &SpmvWork) -> Vec<SpmvPrediction> {
        let mut out: Vec<SpmvPrediction> = self
            .candidates
            .iter()
            .filter(|c| self.applies(&c.candidate.format, w))
            .filter_map(|c| {
                let t = c.predict(w, &self.limits);
                (t.is_finite() && t > 0.0).then(|| SpmvPrediction {
                    candidate: c.candidate.clone(),
                    predicted_ms: t,
                    conversion_ms: self.predict_conversion(&c.candidate.format, w),
                })
            })
            .collect();
        out.sort_by(|a, b| {
            a.predicted_ms
                .total_cmp(&b.predicted_ms)
                .then_with(|| a.candidate.cmp(&b.candidate))
        });
        out
    }

    /// The fit as a text table: one line per candidate (feature set, matrices, in-sample and
    /// cross-validated median and 90th-percentile relative errors), then the conversion
    /// models, the dropped candidates and the notes.
    pub fn table(&self) -> String {
        use std::fmt::Write;
        let pct = |v: f64| format!("{:.1}%", 100.0 * v);
        let opt = |v: Option<f64>| v.map_or_else(|| "-".to_string(), pct);
        let mut s = String::new();
        let _ = writeln!(
            s,
            "SpMV model of {} ({} candidates, L2 {} KiB)",
            self.device,
            self.candidates.len(),
            self.limits.l2_bytes >> 10
        );
        let _ = writeln!(
            s,
            "{:<44} {:<11} {:>4} {:>7} {:>7} {:>7} {:>7}",
            "candidate", "features", "mats", "med", "p90", "cv med", "cv p90"
        );
        for c in &self.candidates {
            let st = &c.stats;
            let _ = writeln!(
                s,
                "{:<44} {:<11} {:>4} {:>7} {:>7} {:>7} {:>7}",
                c.candidate.name(),
                c.features.name,
                st.matrices,
                pct(st.median_rel_err),
                pct(st.p90_rel_err),
                opt(st.cv_median_rel_err),
                opt(st.cv_p90_rel_err)
            );
        }
        for c in &self.conversions {
            let _ = writeln!(
                s,
                "conversion to {:<6} {:>4} matrices, median {} p90 {}",
                c.format,
                c.stats.matrices,
                pct(c.stats.median_rel_err),
                pct(c.stats.p90_rel_err)
            );
        }
        for d in &self.dropped {
            let _ = writeln!(s, "dropped {}: {}", d.name, d.reason);
        }
        for n in &self.notes {
            let _ = writeln!(s, "note: {n}");
        }
        s
    }

    /// The model of the candidate named `name`.
    pub fn candidate(&self, name: &str) -> Option<&CandidateModel> {
        self.candidates.iter().find(|c| c.candidate.name() == name)
    }

    /// Predicted milliseconds to convert the CSR matrix of `w` into `format`: 0 for `csr` (the
    /// input format), `None` for a format without a conversion model.
    pub fn predict_conversion(&self, format: &str, w: &SpmvWork) -> Option<f64> {
        if format == "csr" {
            return Some(0.0);
        }
        self.conversions
            .iter()
            .find(|c| c.format == format)
            .map(|c| c.predict(w).max(0.0))
    }

    /// The candidate to use on the matrix of `w`: the fastest predicted SpMV, or, when
    /// `expected_iterations` is given (finite, `>= 0`), the smallest
    /// `conversion + iterations x SpMV` — conversion spread over the SpMVs that use it. With
    /// iterations given, a non-CSR format without a conversion model cannot be priced and is
    /// left out. A NaN or negative iteration count counts as not given. `None` when no
    /// candidate applies.
    pub fn select(&self, w: &SpmvWork, expected_iterations: Option<f64>) -> Option<SpmvPrediction> {
        let preds = self.predict(w);
        match expected_iterations.filter(|i| i.is_finite() && *i >= 0.0) {
            None => preds.into_iter().next(),
            Some(it) => preds
                .into_iter()
                .filter_map(|p| p.conversion_ms.map(|c| (c + it * p.predicted_ms, p)))
                .min_by(|a, b| {
                    a.0.total_cmp(&b.0)
                        .then_with(|| a.1.candidate.cmp(&b.1.candidate))
                })
                .map(|(_, p)| p),
        }
    }
}

fn fit_candidate(
    cand: &SpmvCandidate,
    pts: &Points<'_>,
    limits: &LaunchLimits,
    opts: &SpmvFitOptions,
) -> Result<CandidateModel, String> {
    let m = pts.times.len();
    let mut chosen = (opts.feature_sets[0].clone(), None::<Vec<f64>>);
    if m >= opts.min_matrices_cv.max(4) {
        let scored: Vec<(usize, (f64, f64), Vec<f64>)> = opts
            .feature_sets
            .iter()
            .enumerate()
            .filter_map(|(i, fs)| {
                cross_validate(pts, fs, cand, limits, opts.folds).map(|e| (i, cv_score(&e), e))
            })
            .filter(|(_, s, _)| s.0.is_finite() && s.1.is_finite())
            .collect();
        // The one-standard-error rule (Breiman, Friedman, Olshen and Stone, "Classification
        // and Regression Trees", section 3.4.3): the simplest set within `se_multiple`
        // standard errors of the best mean error.
        if let Some(best) = scored
            .iter()
            .map(|s| s.1)
            .min_by(|a, b| a.0.total_cmp(&b.0))
        {
            let bound = best.0 + opts.se_multiple.max(0.0) * best.1 + 1e-15;
            if let Some((i, _, e)) = scored.into_iter().find(|s| s.1 .0 <= bound) {
                chosen = (opts.feature_sets[i].clone(), Some(e));
            }
        }
    }
    let (fs, cv) = chosen;
    let columns = fs.columns(cand.kind());
    let rows: Vec<Vec<f64>> = pts
        .works
        .iter()
        .map(|w| design_row(&columns, &fs, cand, w, limits))
        .collect();
    if rows.iter().flatten().any(|v| !v.is_finite()) {
        return Err("a work count gives a non-finite term".into());
    }
    let coef = fit_relative(&rows, &pts.times)?;
    if coef.iter().all(|&c| c == 0.0) {
        return Err("the fit gives every coefficient 0".into());
    }
    let errs = rel_errors(&predict_rows(&rows, &coef), &pts.times);
    Ok(CandidateModel {
        candidate: cand.clone(),
        kind: cand.kind(),
        features: fs,
        columns,
        coef,
        stats: FitStats {
            matrices: m,
            median_rel_err: quantile(&errs, 0.5),
            p90_rel_err: quantile(&errs, 0.9),
            max_rel_err: errs.iter().copied().fold(0.0, f64::max),
            cv_median_rel_err: cv.as_ref().map(|e| quantile(e, 0.5)),
            cv_p90_rel_err: cv.as_ref().map(|e| quantile(e, 0.9)),
        },
    })
}

fn fit_conversions(
    profile: &Profile,
    matrices: &HashMap<&str, &MatrixRecord>,
    opts: &SpmvFitOptions,
    notes: &mut Vec<String>,
) -> Vec<ConversionModel> {
    let terms = vec![
        ConversionTerm::Const,
        ConversionTerm::Rows,
        ConversionTerm::Nnz,
        ConversionTerm::Slots,
    ];
    let mut per: BTreeMap<&str, Vec<(&SpmvWork, f64)>> = BTreeMap::new();
    for c in &profile.conversions {
        if c.status != Status::Ok {
            continue;
        }
        let Some(m) = matrices.get(c.matrix.as_str()) else {
            continue;
        };
        let t = c.device_ms.unwrap_or(c.host_ms + c.upload_ms);
        if t.is_finite() && t > 0.0 {
            per.entry(c.format.as_str()).or_default().push((&m.work, t));
        }
    }
    let mut out = Vec::new();
    for (format, pts) in per {
        if pts.len() < opts.min_matrices.max(1) {
            notes.push(format!(
                "conversion to {format}: {} matrices, fewer than {}: no model",
                pts.len(),
                opts.min_matrices
            ));
            continue;
        }
        let rows: Vec<Vec<f64>> = pts
            .iter()
            .map(|(w, _)| ConversionModel::row(&terms, format, w))
            .collect();
        let t: Vec<f64> = pts.iter().map(|p| p.1).collect();
        match fit_relative(&rows, &t) {
            Ok(coef) => {
                let errs = rel_errors(&predict_rows(&rows, &coef), &t);
                out.push(ConversionModel {
                    format: format.to_string(),
                    terms: terms.clone(),
                    coef,
                    stats: FitStats {
                        matrices: t.len(),
                        median_rel_err: quantile(&errs, 0.5),
                        p90_rel_err: quantile(&errs, 0.9),
                        max_rel_err: errs.iter().copied().fold(0.0, f64::max),
                        cv_median_rel_err: None,
                        cv_p90_rel_err: None,
                    },
                });
            }
            Err(e) => notes.push(format!("conversion to {format}: {e}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::Timing;
    use crate::spmv_synth::{self, linear_time, truths};

    fn truth_time(c: &SpmvCandidate, w: &SpmvWork) -> f64 {
        let k = truths()
            .into_iter()
            .find(|(tc, _)| tc == c)
            .map(|(_, k)| k)
            .unwrap();
        linear_time(c, w, &k)
    }

    #[test]
    fn recovers_known_linear_models_on_held_out_matrices() {
        let p = spmv_synth::profile(1);
        let m = SpmvModel::fit(&p, &SpmvFitOptions::default()).unwrap();
        m.validate().unwrap();
        assert_eq!(m.candidates.len(), truths().len(), "{:?}", m.dropped);
        let table = m.table();
        assert!(table.contains("csr/spmv_csr_scalar/t256/wave"), "{table}");
        let mut errs = Vec::new();
        for mat in p.matrices.iter().filter(|m| m.set == MatrixSet::Eval) {
            for pr in m.predict(&mat.work) {
                let t = truth_time(&pr.candidate, &mat.work);
                errs.push(((pr.predicted_ms - t) / t).abs());
            }
        }
        assert!(errs.len() > 100);
        let (med, p90) = (quantile(&errs, 0.5), quantile(&errs, 0.9));
        assert!(med < 0.02 && p90 < 0.04, "median {med}, p90 {p90}");
        for c in &m.candidates {
            assert!(c.stats.median_rel_err < 0.02, "{:?}", c.stats);
            assert!(c.coef.iter().all(|v| *v >= 0.0));
        }
    }

    #[test]
    fn selection_picks_the_known_best() {
        let p = spmv_synth::profile(2);
        let m = SpmvModel::fit(&p, &SpmvFitOptions::default()).unwrap();
        let mut formats = std::collections::BTreeSet::new();
        for mat in p.matrices.iter().filter(|m| m.set == MatrixSet::Eval) {
            let w = &mat.work;
            let chosen = m.select(w, None).unwrap();
            let best = truths()
                .into_iter()
                .filter(|(c, _)| m.applies(&c.format, w))
                .map(|(c, k)| linear_time(&c, w, &k))
                .fold(f64::INFINITY, f64::min);
            let got = truth_time(&chosen.candidate, w);
            assert!(
                got <= best * 1.02,
                "{}: {} {got} vs {best}",
                mat.id,
                chosen.name()
            );
            formats.insert(chosen.candidate.format.clone());
        }
        // The synthetic truths make more than one format win.
        assert!(formats.len() >= 2, "{formats:?}");
    }

    #[test]
    fn padded_formats_apply_only_within_the_fill_limit() {
        let p = spmv_synth::profile(3);
        let m = SpmvModel::fit(&p, &SpmvFitOptions::default()).unwrap();
        let pl = p
            .matrices
            .iter()
            .find(|m| m.id.contains("powerlaw") && m.features.dia_fill_ratio > 3.0)
            .unwrap();
        let preds = m.predict(&pl.work);
        assert!(!preds.is_empty());
        assert!(preds.iter().all(|p| p.candidate.format != "dia"));
        assert!(preds
            .windows(2)
            .all(|w| w[0].predicted_ms <= w[1].predicted_ms));
        let stencil = p
            .matrices
            .iter()
            .find(|m| m.id.contains("poisson2d"))
            .unwrap();
        assert!(m
            .predict(&stencil.work)
            .iter()
            .any(|p| p.candidate.format == "dia"));
        // A stencil has no HYB COO part: HYB is the ELL kernel there and is not offered.
        assert_eq!(stencil.work.hyb_coo_nnz, 0);
        assert!(!m.applies("hyb", &stencil.work));
        assert!(m
            .predict(&stencil.work)
            .iter()
            .all(|p| p.candidate.format != "hyb"));
        assert!(pl.work.hyb_coo_nnz > 0 && m.applies("hyb", &pl.work));
    }

    #[test]
    fn conversion_cost_is_amortised_over_the_iterations() {
        let p = spmv_synth::profile(4);
        let m = SpmvModel::fit(&p, &SpmvFitOptions::default()).unwrap();
        assert!(m.conversions.iter().any(|c| c.format == "dia"));
        // A large stencil: DIA is the fastest SpMV but its conversion costs many SpMVs.
        let mat = p
            .matrices
            .iter()
            .filter(|m| m.id.contains("poisson2d-60") || m.id.contains("poisson2d-55"))
            .max_by_key(|m| m.work.n)
            .unwrap();
        let w = &mat.work;
        let fastest = m.select(w, None).unwrap();
        assert_eq!(fastest.candidate.format, "dia", "{}", fastest.name());
        let conv = m.predict_conversion("dia", w).unwrap();
        let truth_conv = 0.03 + 4e-6 * w.dia_slots as f64 + 1e-6 * w.n as f64;
        assert!(
            (conv - truth_conv).abs() / truth_conv < 0.05,
            "{conv} vs {truth_conv}"
        );
        assert_eq!(m.predict_conversion("csr", w), Some(0.0));
        assert_eq!(m.predict_conversion("nope", w), None);
        let once = m.select(w, Some(1.0)).unwrap();
        assert_eq!(once.candidate.format, "csr", "{}", once.name());
        let many = m.select(w, Some(1e7)).unwrap();
        assert_eq!(many.candidate, fastest.candidate);
        // A NaN count is ignored.
        assert_eq!(
            m.select(w, Some(f64::NAN)).unwrap().candidate,
            fastest.candidate
        );
    }

    #[test]
    fn skipped_and_failed_records_are_never_times() {
        let p = spmv_synth::profile(5);
        let base = SpmvModel::fit(&p, &SpmvFitOptions::default()).unwrap();
        let mut q = p.clone();
        let fit_ids: Vec<String> = q
            .matrices
            .iter()
            .filter(|m| m.set == MatrixSet::Fit)
            .map(|m| m.id.clone())
            .collect();
        for (i, id) in fit_ids.iter().enumerate() {
            let mut r = q
                .spmv
                .iter()
                .find(|r| &r.matrix == id && r.kernel == "spmv_csr_scalar")
                .unwrap()
                .clone();
            r.timing = Some(Timing {
                median_ms: 1e3,
                min_ms: 1e3,
                max_ms: 1e3,
                reps: 1,
            });
            r.status = if i % 2 == 0 {
                Status::Failed("wrong result".into())
            } else {
                Status::Skipped("not applicable".into())
            };
            q.spmv.push(r);
        }
        let again = SpmvModel::fit(&q, &SpmvFitOptions::default()).unwrap();
        assert_eq!(base, again);
    }

    #[test]
    fn a_missing_wave_record_takes_its_cover_twin() {
        let p = spmv_synth::profile(6);
        let times = measured_times(&p);
        let small = p.matrices.iter().find(|m| m.work.n < 1000).unwrap();
        let t = &times[&small.id];
        let cover = t.time_of("csr/spmv_csr_scalar/t256/cover").unwrap();
        assert_eq!(t.time_of("csr/spmv_csr_scalar/t256/wave"), Some(cover));
        // Only policies the profile measures somewhere are filled in.
        assert_eq!(t.time_of("csr/spmv_csr_scalar/t128/wave"), None);
        // A large matrix has its own wave record.
        let big = p.matrices.iter().find(|m| m.work.n > 4096).unwrap();
        assert!(p
            .spmv
            .iter()
            .any(|r| r.matrix == big.id && r.grid.as_deref() == Some("wave")));
        assert_eq!(times[&big.id].cusparse.len(), 2);
        assert!(times[&big.id].best_own().is_some());
    }

    #[test]
    fn empty_or_fit_less_profiles_are_fit_errors() {
        let empty = Profile::default();
        assert!(matches!(
            SpmvModel::fit(&empty, &SpmvFitOptions::default()),
            Err(ModelError::Fit { .. })
        ));
        let mut p = spmv_synth::profile(7);
        p.matrices.retain(|m| m.set == MatrixSet::Eval);
        assert!(matches!(
            SpmvModel::fit(&p, &SpmvFitOptions::default()),
            Err(ModelError::Fit { .. })
        ));
        let mut q = spmv_synth::profile(7);
        q.spmv.clear();
        assert!(matches!(
            SpmvModel::fit(&q, &SpmvFitOptions::default()),
            Err(ModelError::Fit { .. })
        ));
        let opts = SpmvFitOptions {
            feature_sets: vec![],
            ..SpmvFitOptions::default()
        };
        assert!(matches!(
            SpmvModel::fit(&q, &opts),
            Err(ModelError::InvalidParameter(_))
        ));
    }

    #[test]
    fn candidates_on_too_few_matrices_are_dropped_with_a_reason() {
        let mut p = spmv_synth::profile(8);
        let keep: Vec<String> = p
            .matrices
            .iter()
            .filter(|m| m.set == MatrixSet::Fit)
            .take(3)
            .map(|m| m.id.clone())
            .collect();
        p.spmv
            .retain(|r| r.kernel != "spmv_csr_vector_32" || keep.contains(&r.matrix));
        let m = SpmvModel::fit(&p, &SpmvFitOptions::default()).unwrap();
        let d = m
            .dropped
            .iter()
            .find(|d| d.name == "csr/spmv_csr_vector_32/t256/cover")
            .unwrap();
        assert_eq!(d.matrices, 3);
        assert!(d.reason.contains("fewer than 5"), "{}", d.reason);
        assert!(m.candidate("csr/spmv_csr_vector_32/t256/cover").is_none());
    }

    #[test]
    fn model_serde_round_trip_and_validation() {
        let p = spmv_synth::profile(9);
        let m = SpmvModel::fit(&p, &SpmvFitOptions::default()).unwrap();
        let s = serde_json::to_string(&m).unwrap();
        let back: SpmvModel = serde_json::from_str(&s).unwrap();
        back.validate().unwrap();
        // JSON keeps every field; floats may come back within an ulp.
        assert_eq!(back.candidates.len(), m.candidates.len());
        assert_eq!(back.dropped, m.dropped);
        for (a, b) in back.candidates.iter().zip(&m.candidates) {
            assert_eq!(
                (&a.candidate, &a.columns, &a.features),
                (&b.candidate, &b.columns, &b.features)
            );
            for (x, y) in a.coef.iter().zip(&b.coef) {
                assert!((x - y).abs() <= 1e-14 * y.abs());
            }
        }
        for mat in &p.matrices {
            let (pa, pb) = (back.predict(&mat.work), m.predict(&mat.work));
            assert_eq!(pa.len(), pb.len());
            for (a, b) in pa.iter().zip(&pb) {
                assert!((a.predicted_ms - b.predicted_ms).abs() <= 1e-12 * b.predicted_ms);
            }
        }
        let mut bad = m.clone();
        bad.candidates[0].coef[0] = -1.0;
        assert!(matches!(bad.validate(), Err(ModelError::Invalid { .. })));
        bad.candidates[0].coef.pop();
        assert!(bad.validate().is_err());
    }

    #[test]
    fn the_l2_split_is_chosen_when_cached_matrices_run_faster() {
        // Truth: every traffic cost is 3x cheaper for the L2-resident share.
        let t = truths();
        let cands: Vec<SpmvCandidate> = t.iter().map(|(c, _)| c.clone()).collect();
        let l2 = u64::from(spmv_synth::device().l2_bytes);
        let time = |c: &SpmvCandidate, w: &SpmvWork| {
            let k = t.iter().find(|(tc, _)| tc == c).unwrap().1;
            let s = l2_share(working_set_bytes(&c.format, w), l2, 1.0);
            let launch = k[0]
                + k[5]
                    * term_value(
                        Term::CooLaunch,
                        c,
                        w,
                        &LaunchLimits::of(&spmv_synth::device()),
                    );
            let traffic = linear_time(c, w, &k) - launch;
            launch + traffic * (s / 3.0 + (1.0 - s))
        };
        let p = spmv_synth::profile_with(&time, &cands, 0.01, 10);
        let m = SpmvModel::fit(&p, &SpmvFitOptions::default()).unwrap();
        let with_l2 = m
            .candidates
            .iter()
            .filter(|c| c.features.l2_fraction.is_some())
            .count();
        assert!(
            with_l2 * 2 > m.candidates.len(),
            "{with_l2} of {}",
            m.candidates.len()
        );
        let base_only = SpmvModel::fit(
            &p,
            &SpmvFitOptions {
                feature_sets: vec![FeatureSet::defaults()[0].clone()],
                ..SpmvFitOptions::default()
            },
        )
        .unwrap();
        let eval_err = |model: &SpmvModel| {
            let mut e = Vec::new();
            for mat in p.matrices.iter().filter(|m| m.set == MatrixSet::Eval) {
                for pr in model.predict(&mat.work) {
                    let tt = time(&pr.candidate, &mat.work);
                    e.push(((pr.predicted_ms - tt) / tt).abs());
                }
            }
            (quantile(&e, 0.5), quantile(&e, 0.9))
        };
        let (med, p90) = eval_err(&m);
        let (bmed, bp90) = eval_err(&base_only);
        assert!(
            med < 0.03 && p90 < 0.08,
            "chosen sets: median {med}, p90 {p90}"
        );
        assert!(bp90 > p90, "base set: median {bmed}, p90 {bp90}");
    }

    #[test]
    fn the_l2_sets_all_treat_the_l2_regime() {
        let sets = FeatureSet::with_l2();
        assert_eq!(sets.len() + 6, FeatureSet::defaults().len());
        assert!(sets
            .iter()
            .all(|f| f.l2_fraction.is_some() || !f.l2_knots.is_empty()));
    }

    #[test]
    fn atomic_contention_counts_serialised_adds() {
        let mut w = crate::work::spmv_work(&autopcg_sparse::families::poisson2d_5pt(8, 8).unwrap());
        // Rows of 5 and fewer entries: sum len^2 / 32, below nnz.
        let n = w.n as f64;
        let mean = w.nnz as f64 / n;
        let want = n * (w.row_len_std.powi(2) + mean * mean) / 32.0;
        assert!((atomic_contention(&w) - want).abs() < 1e-9 * want);
        assert!(atomic_contention(&w) < w.nnz as f64);
        // Long rows: every warp adds to one address, capped at nnz.
        w.row_len_std = 0.0;
        w.nnz = w.n * 100;
        assert_eq!(atomic_contention(&w), w.nnz as f64);
        let c = SpmvCandidate {
            format: "coo".into(),
            kernel: "spmv_coo_atomic".into(),
            threads: Some(256),
            grid: Some("cover".into()),
        };
        assert!(c.kind().terms().contains(&Term::Contention));
    }

    #[test]
    fn depth_and_geometry_terms() {
        let lim = LaunchLimits::of(&spmv_synth::device());
        // 2 SMs x 8 blocks of 256 threads in one wave.
        assert_eq!(lim.blocks(100_000, 256, Some("wave")), 16);
        assert_eq!(lim.blocks(100_000, 256, Some("cover")), 391);
        assert_eq!(lim.blocks(0, 256, Some("cover")), 1);
        let w = crate::work::spmv_work(&autopcg_sparse::families::poisson2d_5pt(100, 100).unwrap());
        let c = |k: &str, g: &str| SpmvCandidate {
            format: "csr".into(),
            kernel: k.into(),
            threads: Some(256),
            grid: Some(g.into()),
        };
        assert_eq!(depth(&c("spmv_csr_scalar", "cover"), &w, &lim), 5.0);
        // 10000 rows over 4096 threads: 3 rounds of about 5 trips.
        let d = depth(&c("spmv_csr_scalar", "wave"), &w, &lim);
        assert!(d > 12.0 && d <= 15.0, "{d}");
        assert_eq!(depth(&c("spmv_csr_vector_4", "cover"), &w, &lim), 2.0);
        assert_eq!(KernelKind::of("csr", "spmv_csr_merge"), KernelKind::Generic);
        assert_eq!(
            KernelKind::of("csr", "spmv_csr_vector_3"),
            KernelKind::Generic
        );
        assert_eq!(
            KernelKind::of("hyb", "spmv_ell+spmv_coo_atomic"),
            KernelKind::Hyb
        );
        assert!((l2_share(1.0, 1 << 20, 1.0) - 1.0).abs() < 1e-9);
        assert!((l2_share((1 << 20) as f64, 1 << 20, 1.0) - 0.5).abs() < 1e-12);
        assert_eq!(quantile(&[3.0, 1.0, 2.0], 0.5), 2.0);
        assert_eq!(quantile(&[1.0; 10], 0.9), 1.0);
        assert!((geomean(&[1.0, 4.0]) - 2.0).abs() < 1e-12);
    }

    #[test]
    fn an_unknown_kernel_is_fitted_with_generic_terms() {
        // A load-balanced kernel whose time is linear in rows and entries.
        let mut cands: Vec<SpmvCandidate> = truths().into_iter().map(|(c, _)| c).collect();
        let merge = SpmvCandidate {
            format: "csr".into(),
            kernel: "spmv_csr_merge".into(),
            threads: Some(256),
            grid: Some("cover".into()),
        };
        cands.push(merge.clone());
        let t = truths();
        let time = |c: &SpmvCandidate, w: &SpmvWork| {
            if c.kernel == "spmv_csr_merge" {
                6e-3 + 1.5e-6 * w.n as f64 + 1.1e-6 * w.nnz as f64
            } else {
                linear_time(c, w, &t.iter().find(|(tc, _)| tc == c).unwrap().1)
            }
        };
        let p = spmv_synth::profile_with(&time, &cands, 0.005, 11);
        let m = SpmvModel::fit(&p, &SpmvFitOptions::default()).unwrap();
        let cm = m.candidate(&merge.name()).unwrap();
        assert_eq!(cm.kind, KernelKind::Generic);
        assert!(cm.stats.median_rel_err < 0.01, "{:?}", cm.stats);
    }
}
