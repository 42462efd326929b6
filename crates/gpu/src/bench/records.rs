//! What the benchmark is asked ([`SpmvBenchOptions`]) and what it returns: one [`SpmvRecord`]
//! per candidate, one [`ConversionRecord`] per format, the [`TriadResult`], all gathered in
//! [`SpmvBench`]. The profiler and `autopcg bench spmv --json` read these; their JSON is a
//! contract.
use autopcg_catalog::{SpmvImpl, SpmvLaunch};
use autopcg_sparse::features::MatrixFeatures;
use autopcg_sparse::PaddingLimits;

use super::GridPolicy;
use crate::{DeviceProps, Format, GpuError, LaunchConfig, TimingStats};

/// Thread counts tried by default.
pub const DEFAULT_BENCH_THREADS: [u32; 5] = [64, 128, 256, 512, 1024];

/// What [`bench_spmv`](super::bench_spmv) measures and how.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SpmvBenchOptions {
    /// Threads per block to try for every kernel ([`DEFAULT_BENCH_THREADS`]).
    pub threads: Vec<u32>,
    /// Grid policies to try for every thread count (both by default; a policy giving the same
    /// block count as an earlier one is not repeated).
    pub grids: Vec<GridPolicy>,
    /// Limits on the padded formats (ELL, DIA, HYB's ELL part).
    pub padding: PaddingLimits,
    /// Fewest timed repetitions per candidate.
    pub min_reps: usize,
    /// Least total timed milliseconds per candidate.
    pub min_ms: f64,
    /// Seed of `x`.
    pub seed: u64,
    /// Largest accepted error of a row, relative to `sum_j |a_ij x_j|`.
    pub tolerance: f64,
    /// Also measure cuSPARSE (every algorithm of [`CusparseAlg::ALL`](crate::CusparseAlg::ALL)).
    pub cusparse: bool,
    /// Also measure the triad bandwidth ([`measure_triad_gbps`](super::measure_triad_gbps))
    /// for the "% of triad" column.
    pub triad: bool,
    /// Also time every candidate of a matrix from CUDA graph replays, as the solver runs its
    /// products, where the matrix and an iteration's vectors fit in half of L2
    /// ([`replays_spmv_at`](super::replays_spmv_at)), into [`SpmvRecord::replayed`] (false,
    /// the benchmark's default: every sample one call launched alone only).
    #[serde(default)]
    pub replay_within_l2: bool,
    /// Time the calls launched alone with L2 cold ([`time_kernel_flushed`](crate::time_kernel_flushed):
    /// a read pass over twice the L2 queued ahead of every sample, which also hides the launch
    /// latency), into records marked [`SpmvRecord::l2_flushed`]; false (the benchmark's
    /// default): repeated calls, the matrix in L2 wherever it fits there.
    #[serde(default)]
    pub flush_l2: bool,
}

impl Default for SpmvBenchOptions {
    fn default() -> Self {
        SpmvBenchOptions {
            threads: DEFAULT_BENCH_THREADS.to_vec(),
            grids: vec![GridPolicy::Wave, GridPolicy::Cover],
            padding: PaddingLimits::default(),
            min_reps: 20,
            min_ms: 50.0,
            seed: 42,
            tolerance: 1e-12,
            cusparse: true,
            triad: true,
            replay_within_l2: false,
            flush_l2: false,
        }
    }
}

impl SpmvBenchOptions {
    /// A short run (two thread counts, one grid policy, few repetitions, no triad): for tests
    /// and quick looks, not for figures.
    pub fn quick() -> Self {
        SpmvBenchOptions {
            threads: vec![128, 256],
            grids: vec![GridPolicy::Wave],
            min_reps: 3,
            min_ms: 0.0,
            triad: false,
            ..SpmvBenchOptions::default()
        }
    }

    /// Checks the options, naming the value at fault.
    pub fn validate(&self) -> Result<(), GpuError> {
        let bad = |reason: String| {
            Err(GpuError::InvalidInput {
                what: "SpMV benchmark options".into(),
                reason,
            })
        };
        if self.threads.is_empty() {
            return bad("no thread count to try".into());
        }
        if let Some(t) = self.threads.iter().find(|&&t| t == 0 || t > 1024) {
            return bad(format!("{t} threads per block; expected 1..=1024"));
        }
        if self.grids.is_empty() {
            return bad("no grid policy to try".into());
        }
        if self.min_reps == 0 {
            return bad("min_reps = 0; at least one timed repetition is needed".into());
        }
        if !(self.min_ms >= 0.0 && self.min_ms.is_finite()) {
            return bad(format!(
                "min_ms = {}; expected a finite value >= 0",
                self.min_ms
            ));
        }
        if !(self.tolerance > 0.0 && self.tolerance.is_finite()) {
            return bad(format!(
                "tolerance = {}; expected a finite value > 0",
                self.tolerance
            ));
        }
        Ok(())
    }
}

/// How a candidate ended.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", content = "reason", rename_all = "snake_case")]
pub enum RecordStatus {
    /// Correct and timed.
    Ok,
    /// Not run: the format was refused, or the configuration does not apply.
    Skipped(String),
    /// Ran but failed: a wrong result or an error; not timed.
    Failed(String),
}

impl RecordStatus {
    /// True for [`RecordStatus::Ok`].
    pub fn is_ok(&self) -> bool {
        matches!(self, RecordStatus::Ok)
    }
}

/// One candidate: a kernel (or cuSPARSE algorithm) in a format with a launch configuration.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SpmvRecord {
    /// What ran, with which launch configuration.
    #[serde(flatten)]
    pub launch: SpmvLaunch,
    /// Outcome.
    pub status: RecordStatus,
    /// Median milliseconds per SpMV.
    pub median_ms: Option<f64>,
    /// Fastest repetition, milliseconds.
    pub min_ms: Option<f64>,
    /// Slowest repetition, milliseconds.
    pub max_ms: Option<f64>,
    /// Timed repetitions.
    pub reps: Option<usize>,
    /// Effective bandwidth, GB/s: [`csr_min_bytes`](super::csr_min_bytes) over the median
    /// (comparable across rows).
    pub gbps: Option<f64>,
    /// Bytes this format's SpMV moves at least ([`format_bytes`](super::format_bytes)).
    pub bytes_format: u64,
    /// `bytes_format` over the median, GB/s.
    pub gbps_format: Option<f64>,
    /// Largest row error relative to `sum_j |a_ij x_j|`, over the checks made.
    pub max_rel_err: Option<f64>,
    /// The same product timed from graph replays, as the solver runs it, where
    /// [`SpmvBenchOptions::replay_within_l2`] asked for it and the iteration fits in half of
    /// L2; absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replayed: Option<crate::TimingStats>,
    /// The timing above was taken with L2 cold ([`SpmvBenchOptions::flush_l2`]); absent
    /// (false) for repeated calls.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub l2_flushed: bool,
}

impl SpmvRecord {
    /// A record of `kernel` reading `format`, not yet configured or run (status `Ok`, no
    /// timing).
    pub(crate) fn new(format: Format, kernel: SpmvImpl, bytes_format: u64) -> Self {
        SpmvRecord {
            launch: SpmvLaunch::unconfigured(format, kernel),
            status: RecordStatus::Ok,
            median_ms: None,
            min_ms: None,
            max_ms: None,
            reps: None,
            gbps: None,
            bytes_format,
            gbps_format: None,
            max_rel_err: None,
            replayed: None,
            l2_flushed: false,
        }
    }

    /// True for a cuSPARSE record.
    pub fn is_cusparse(&self) -> bool {
        self.launch.kernel.is_cusparse()
    }

    pub(crate) fn with_config(mut self, cfg: LaunchConfig, grid: GridPolicy) -> Self {
        self.launch.threads = Some(cfg.threads);
        self.launch.blocks = Some(cfg.blocks);
        self.launch.grid = Some(grid);
        self
    }

    pub(crate) fn with_status(mut self, status: RecordStatus) -> Self {
        self.status = status;
        self
    }
}

/// Converting and uploading the matrix in one format.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ConversionRecord {
    /// The format.
    pub format: Format,
    /// Ok, or why the format was skipped (refused conversion) or failed (upload).
    pub status: RecordStatus,
    /// Milliseconds to convert from CSR on the host (0 for CSR itself).
    pub host_ms: f64,
    /// Milliseconds to upload to the device (until the copies finished).
    pub upload_ms: f64,
    /// Bytes the format occupies on the device.
    pub device_bytes: u64,
    /// Milliseconds to build the format on the device from the uploaded CSR matrix (ELL, DIA
    /// and HYB: median of [`DEVICE_CONVERSION_REPS`](super::DEVICE_CONVERSION_REPS)
    /// event-timed runs); `None` for the other formats, when the conversion is refused (as on
    /// the host), or when it failed (`device_error`).
    #[serde(default)]
    pub device_ms: Option<f64>,
    /// Why the device conversion failed, when it did for another reason than a refusal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_error: Option<String>,
}

impl ConversionRecord {
    /// The record of `format` before anything is measured: Ok, no times, no bytes.
    pub(crate) fn new(format: Format) -> ConversionRecord {
        ConversionRecord {
            format,
            status: RecordStatus::Ok,
            host_ms: 0.0,
            upload_ms: 0.0,
            device_bytes: 0,
            device_ms: None,
            device_error: None,
        }
    }
}

/// The triad measurement: `a[i] = b[i] + s c[i]`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TriadResult {
    /// Elements per buffer.
    pub n: usize,
    /// Bytes moved per call: `24 n` (two reads, one write).
    pub bytes: u64,
    /// Threads per block of the fastest configuration.
    pub threads: u32,
    /// Blocks of the fastest configuration.
    pub blocks: u32,
    /// Timing of the fastest configuration.
    pub stats: TimingStats,
    /// `bytes` over the median, GB/s.
    pub gbps: f64,
}

/// Everything [`bench_spmv`](super::bench_spmv) measured.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SpmvBench {
    /// The device.
    pub device: DeviceProps,
    /// The matrix.
    pub matrix: MatrixFeatures,
    /// How the comparable bandwidth (`gbps`) is computed, in words.
    pub bytes_formula: String,
    /// The byte count every `gbps` divides ([`csr_min_bytes`](super::csr_min_bytes)).
    pub bytes_csr_min: u64,
    /// The triad measurement, when asked for.
    pub triad: Option<TriadResult>,
    /// cuSPARSE's version `major.minor.patch`, when it loaded.
    pub cusparse_version: Option<String>,
    /// Milliseconds to compile (or load from the cache) every kernel before timing.
    pub compile_ms: f64,
    /// The options used.
    pub options: SpmvBenchOptions,
    /// Conversion and upload per format.
    pub conversions: Vec<ConversionRecord>,
    /// Every candidate, by format.
    pub records: Vec<SpmvRecord>,
    /// Index in `records` of the fastest correct candidate (by median).
    pub best: Option<usize>,
    /// Index in `records` of the fastest correct candidate among autopcg's own kernels
    /// (cuSPARSE left out): the label a selection model learns.
    pub best_own: Option<usize>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use autopcg_catalog::{CusparseAlg, SpmvKernel};

    #[test]
    fn options_are_checked() {
        assert!(SpmvBenchOptions::default().validate().is_ok());
        assert!(SpmvBenchOptions::quick().validate().is_ok());
        let bad = [
            SpmvBenchOptions {
                threads: vec![],
                ..Default::default()
            },
            SpmvBenchOptions {
                threads: vec![2048],
                ..Default::default()
            },
            SpmvBenchOptions {
                grids: vec![],
                ..Default::default()
            },
            SpmvBenchOptions {
                min_reps: 0,
                ..Default::default()
            },
            SpmvBenchOptions {
                min_ms: f64::NAN,
                ..Default::default()
            },
            SpmvBenchOptions {
                tolerance: 0.0,
                ..Default::default()
            },
        ];
        for o in bad {
            assert!(o.validate().is_err(), "{o:?}");
        }
    }

    #[test]
    fn records_serialise_kernels_as_the_strings_they_always_were() {
        let hyb = SpmvRecord::new(Format::Hyb, SpmvImpl::Hyb(SpmvKernel::CooSegment), 8)
            .with_config(LaunchConfig::new(128, 3), GridPolicy::Cover);
        let j = serde_json::to_value(&hyb).unwrap();
        assert_eq!(j["kernel"], "spmv_ell+spmv_coo_segment");
        assert_eq!(j["format"], "hyb");
        assert_eq!(j["grid"], "cover");
        assert_eq!(j["status"]["kind"], "ok");
        assert_eq!(serde_json::from_value::<SpmvRecord>(j).unwrap(), hyb);
        let cu = SpmvRecord::new(Format::Csr, SpmvImpl::Cusparse(CusparseAlg::CsrAlg2), 8);
        let j = serde_json::to_value(&cu).unwrap();
        assert_eq!(j["kernel"], "cusparse_spmv_csr_alg2");
        assert!(cu.is_cusparse());
        let own = SpmvRecord::new(Format::Csr, SpmvImpl::Kernel(SpmvKernel::CsrVector(4)), 8);
        assert_eq!(
            serde_json::to_value(&own).unwrap()["kernel"],
            "spmv_csr_vector_4"
        );
        assert!(!own.is_cusparse());
        // A record whose kernel is no known implementation does not read.
        let mut bad = serde_json::to_value(&own).unwrap();
        bad["kernel"] = "spmv_csr_vector_3".into();
        assert!(serde_json::from_value::<SpmvRecord>(bad).is_err());
    }
}
