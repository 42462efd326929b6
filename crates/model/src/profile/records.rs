//! The records of a profile, one JSON object per line, tagged by `record`.
use autopcg_catalog::{
    occupancy, DeviceProps, Format, KernelId, Occupancy, Reduction, SpmvCandidate, SpmvKernel,
    SpmvLaunch, VectorKernel, VectorOp, VectorVariant,
};
use autopcg_sparse::families::Recipe;
use autopcg_sparse::features::MatrixFeatures;
use serde::{Deserialize, Serialize};

use crate::work::SpmvWork;
use crate::ModelError;

/// Summary of repeated event timings of one measurement, milliseconds per call.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Timing {
    /// Median.
    pub median_ms: f64,
    /// Fastest repetition.
    pub min_ms: f64,
    /// Slowest repetition.
    pub max_ms: f64,
    /// Timed repetitions.
    pub reps: usize,
}

impl Timing {
    /// `(max - min) / median`: the relative spread of the repetitions.
    pub fn spread(&self) -> f64 {
        if self.median_ms > 0.0 {
            (self.max_ms - self.min_ms) / self.median_ms
        } else {
            0.0
        }
    }

    /// True when every figure is finite, non-negative and ordered `min <= median <= max`, with
    /// at least one repetition.
    pub fn is_valid(&self) -> bool {
        let f = [self.median_ms, self.min_ms, self.max_ms];
        f.iter().all(|v| v.is_finite() && *v >= 0.0)
            && self.min_ms <= self.median_ms
            && self.median_ms <= self.max_ms
            && self.reps > 0
    }
}

/// First line of a profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Header {
    /// [`super::PROFILE_SCHEMA`] of the writer.
    pub schema: u32,
    /// The device measured.
    pub device: DeviceProps,
    /// A reduced (`--quick`) sweep.
    pub quick: bool,
    /// Version of autopcg that measured it.
    pub tool_version: String,
    /// Seconds since the Unix epoch when the profile was started.
    pub started_unix_s: u64,
}

/// The inputs and result of eq. 3-2 for one reduction kernel at one block size, so the block
/// counts of the dot-product sweep can be audited:
/// `NB_nt = N_sm * min(N_reg / N_reg_per_block, N_smem / N_smem_per_block, N_threads_per_sm / nt,
/// N_blocks_per_sm)`, the device limits being those of the [`Header`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OccupancyRecord {
    /// Kernel entry point.
    pub kernel: KernelId,
    /// Threads per block nt.
    pub threads: u32,
    /// Registers per thread of the compiled kernel.
    pub regs_per_thread: u32,
    /// Static shared memory per block of the compiled kernel, bytes.
    pub static_smem_bytes: u32,
    /// Dynamic shared memory per block at launch, bytes.
    pub dynamic_smem_bytes: u32,
    /// Resident blocks per SM by eq. 3-2's minimum.
    pub blocks_per_sm: u32,
    /// `NB_nt`: `sm_count * blocks_per_sm`.
    pub nb_nt: u32,
}

impl OccupancyRecord {
    /// Audits the record: recomputes eq. 3-2 ([`autopcg_catalog::occupancy()`]) from the inputs
    /// it holds on `dev` (the device of the profile's header) and checks its `blocks_per_sm`
    /// and `nb_nt` against the result. Errors on a mismatch, and when the inputs give no valid
    /// count (for such a kernel the profiler records one block per SM, see the profiler's
    /// `occupancy` module).
    pub fn check(&self, dev: &DeviceProps) -> Result<Occupancy, ModelError> {
        let smem = self
            .static_smem_bytes
            .saturating_add(self.dynamic_smem_bytes);
        let o = occupancy(dev, self.threads, self.regs_per_thread, smem)
            .map_err(|e| ModelError::InvalidParameter(format!("{}: {e}", self.kernel)))?;
        if o.blocks_per_sm != self.blocks_per_sm || o.nb_nt != self.nb_nt {
            return Err(ModelError::InvalidParameter(format!(
                "occupancy record of {} at {} threads says {} blocks/SM and NB_nt = {}; eq. 3-2 \
                 on its inputs gives {} and {}",
                self.kernel, self.threads, self.blocks_per_sm, self.nb_nt, o.blocks_per_sm, o.nb_nt
            )));
        }
        Ok(o)
    }
}

/// One vector-update measurement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VectorRecord {
    /// The kernel, e.g. `cg_update_grid_v2`.
    pub kernel: VectorKernel,
    /// Its operation (`axpy`, `xpay`, `cg_update`), as the kernel says ([`VectorRecord::check`]).
    pub op: VectorOp,
    /// Its thread mapping (`elem`, `elem_v2`, `grid`, `grid_v2`), as the kernel says.
    pub variant: VectorVariant,
    /// The launch and its timing (on disk, its fields stand in the record itself).
    #[serde(flatten)]
    pub sample: LaunchSample,
}

/// One timed launch configuration at one vector length: what vector-update and dot-product
/// records share.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LaunchSample {
    /// Vector length.
    pub n: u64,
    /// Threads per block.
    pub threads: u32,
    /// Blocks (of the first stage, for reductions).
    pub blocks: u32,
    /// For grid-stride launches, `i` in `blocks = NB_nt * i`; `None` when the block count
    /// covers the vector one item per thread (or is fixed by n).
    pub nb_multiple: Option<u32>,
    /// Elements one thread handles where the block count covers the vector (1 or 2), as the
    /// profiler launched it; `None` for grid-stride records, and in profiles written before
    /// the field existed (the model then takes the kernel's property,
    /// [`KernelId::elements_per_thread`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elems_per_thread: Option<u32>,
    /// A size held out of the fit, measured only to evaluate the decision trees.
    #[serde(default)]
    pub held_out: bool,
    /// The timing (of the whole reduction, every stage, for dot records).
    pub timing: Timing,
}

impl VectorRecord {
    /// Checks that the operation and the variant are the kernel's.
    pub fn check(&self) -> Result<(), String> {
        if self.kernel.op() != self.op || self.kernel.variant() != self.variant {
            return Err(format!(
                "vector record of {} says operation {} and variant {}",
                self.kernel, self.op, self.variant
            ));
        }
        Ok(())
    }

    /// The kernel as an entry point of any family.
    pub fn kernel_id(&self) -> KernelId {
        KernelId::Vector(self.kernel)
    }
}

/// One dot-product (or fused three-dot) measurement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DotRecord {
    /// The reduction (named by its first stage's entry point, e.g. `dot_vec2` or
    /// `dot3_last_block`).
    pub kernel: Reduction,
    /// The launch and its timing (on disk, its fields stand in the record itself).
    #[serde(flatten)]
    pub sample: LaunchSample,
}

/// What a launch of the epilogue stage runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EpilogueVariant {
    /// The plain product `w = A u`, one thread (or lane group) per row.
    Plain,
    /// The dot3 variant (`w = A u` with (r,u), (w,u), (r,r) and the recurrence in its
    /// epilogue), r a vector of its own (a preconditioned iteration).
    Fused,
    /// The dot3 variant with u = r (the iteration without a preconditioner: r is read once).
    FusedAliased,
}

impl EpilogueVariant {
    /// Every variant, in the order the stage measures them.
    pub const ALL: [EpilogueVariant; 3] = [
        EpilogueVariant::Plain,
        EpilogueVariant::Fused,
        EpilogueVariant::FusedAliased,
    ];

    /// The name on disk.
    pub fn name(self) -> &'static str {
        match self {
            EpilogueVariant::Plain => "plain",
            EpilogueVariant::Fused => "fused",
            EpilogueVariant::FusedAliased => "fused_aliased",
        }
    }
}

/// Entries per row of the epilogue stage's narrow matrix, the tridiagonal `[-1, 2, -1]`.
pub const EPILOGUE_NARROW_ENTRIES: u32 = 3;
/// Entries per row of the epilogue stage's wide matrix, the band of columns `i - 13 ..= i + 13`
/// (as many entries as a 27-point stencil's rows).
pub const EPILOGUE_WIDE_ENTRIES: u32 = 27;

fn narrow_entries() -> u32 {
    EPILOGUE_NARROW_ENTRIES
}

fn is_narrow(e: &u32) -> bool {
    *e == EPILOGUE_NARROW_ENTRIES
}

/// One launch of the epilogue stage: a row kernel that has a dot3 variant
/// ([`SpmvKernel::dot3_entry_point`]), plain or fused, on one of the stage's banded matrices
/// of `n` rows (`sample.n`): the tridiagonal or the wide band (`row_entries`). The plain
/// product runs one thread (lane group) per row, as the SpMV stage's `cover` launches; the
/// fused one runs the same threads with the blocks capped at one wave of the blocks it keeps
/// resident ([`SpmvKernel::dot3_launch`]), as the model's plans launch it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EpilogueRecord {
    /// The row kernel.
    pub kernel: SpmvKernel,
    /// Plain or fused.
    pub variant: EpilogueVariant,
    /// Entries per row of the matrix: [`EPILOGUE_NARROW_ENTRIES`] or [`EPILOGUE_WIDE_ENTRIES`]
    /// (absent on disk for the tridiagonal, as records from before the wide band are).
    #[serde(default = "narrow_entries", skip_serializing_if = "is_narrow")]
    pub row_entries: u32,
    /// Blocks per SM the fused kernel keeps resident at these threads (eq. 3-2 on its
    /// registers), which capped its grid; absent for the plain product.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocks_per_sm: Option<u32>,
    /// The launch and its timing (on disk, its fields stand in the record itself).
    #[serde(flatten)]
    pub sample: LaunchSample,
}

/// Which use a benchmark matrix is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MatrixSet {
    /// Fitting the models.
    Fit,
    /// Held out: only for evaluating them.
    Eval,
}

/// A benchmark matrix: how to rebuild it and what it looks like.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MatrixRecord {
    /// Identifier the SpMV and conversion records refer to.
    pub id: String,
    /// Fit or evaluation set.
    pub set: MatrixSet,
    /// How to rebuild it exactly.
    pub recipe: Recipe,
    /// Structural statistics.
    pub features: MatrixFeatures,
    /// Work counts of every kernel.
    pub work: SpmvWork,
}

/// Outcome of a measurement that may not apply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "reason", rename_all = "snake_case")]
pub enum Status {
    /// Measured.
    Ok,
    /// Not applicable (padding too large, configuration not allowed): not a time.
    Skipped(String),
    /// Ran but failed (wrong result, launch error).
    Failed(String),
}

/// One SpMV candidate on one matrix.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpmvRecord {
    /// [`MatrixRecord::id`].
    pub matrix: String,
    /// What ran, with which launch configuration.
    #[serde(flatten)]
    pub launch: SpmvLaunch,
    /// Outcome.
    pub status: Status,
    /// Timing when measured.
    pub timing: Option<Timing>,
    /// Timed from graph replays, as the solver runs a product whose iteration fits in half of
    /// L2 ([`autopcg_catalog::replays_spmv_at`]); such a matrix has a record launched alone
    /// too, and the SpMV model fits the two as two regimes ([`crate::spmv::SpmvModel`]).
    /// Absent (false) from records launched alone and from profiles written before.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub replayed: bool,
    /// Launched alone with L2 cold: a read pass over twice the L2 queued ahead of every sample,
    /// which also hides the launch latency (the profiler's protocol since 2026-12-07). Absent
    /// (false) from records of calls repeated with the matrix left in L2, and from replayed
    /// ones. A profile holding records of both protocols is read by the flushed ones only
    /// ([`crate::profile::Profile::superseded_spmv`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub l2_flushed: bool,
}

impl SpmvRecord {
    /// The candidate this record measures, without the matrix (its name is
    /// `format/kernel/t<threads>/<grid>`, [`SpmvCandidate::name`]).
    pub fn candidate(&self) -> SpmvCandidate {
        self.launch.candidate()
    }
}

/// Converting a matrix from CSR to a format and uploading it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConversionRecord {
    /// [`MatrixRecord::id`].
    pub matrix: String,
    /// Target format.
    pub format: Format,
    /// Outcome (skipped: padding refused).
    pub status: Status,
    /// Host conversion, milliseconds.
    pub host_ms: f64,
    /// Upload, milliseconds.
    pub upload_ms: f64,
    /// Conversion on the device from an uploaded CSR matrix, milliseconds, where a GPU
    /// conversion kernel exists for the format.
    pub device_ms: Option<f64>,
    /// Bytes of the format on the device.
    pub device_bytes: u64,
}

/// A stage of the sweep finished.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageRecord {
    /// Stage name (`vector`, `dot`, `spmv`...).
    pub stage: String,
    /// Records written by the stage in this run.
    pub records: usize,
    /// Seconds the stage took in this run.
    pub elapsed_s: f64,
}

/// A writing session began: every time a profile is opened for writing (new or resumed), the
/// device measuring from then on is stamped, so a profile holding records of several devices
/// (a resume or a concatenation on another GPU) is refused when read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionRecord {
    /// Name of the device measuring from this line on.
    pub device: String,
    /// Seconds since the Unix epoch when the session began.
    pub started_unix_s: u64,
}

/// SSOR-AI's two application forms timed on one benchmark matrix (tune's form stage): the PCG
/// iteration replayed from graphs, as `autopcg bench pcg --ssor-form factored|explicit` times
/// it, each operand's kernel chosen by the model fitted before the stage, with the structure
/// the form model reads ([`crate::form::FormFeatures`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FormRecord {
    /// The matrix: a [`MatrixRecord::id`] of the profile, or one of the stage's own matrices.
    pub matrix: String,
    /// Fit or held out (the evaluation set's matrices, timed to judge the form model).
    pub set: MatrixSet,
    /// Rows of A.
    pub rows: u64,
    /// Entries of A.
    pub nnz_a: u64,
    /// Entries of K and K^T together.
    pub nnz_factors: u64,
    /// Entries of the explicit product M = K^T D^-1 K.
    pub nnz_explicit: u64,
    /// Outcome (skipped: the explicit product past its bound, or SSOR-AI not applicable).
    pub status: Status,
    /// Milliseconds per iteration, factored form.
    pub factored: Option<Timing>,
    /// Milliseconds per iteration, explicit form.
    pub explicit: Option<Timing>,
}

/// One line of a profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "record", rename_all = "snake_case")]
pub enum Record {
    /// The first line.
    Header(Header),
    /// Eq. 3-2 for one kernel and block size.
    Occupancy(OccupancyRecord),
    /// A vector update.
    Vector(VectorRecord),
    /// A reduction.
    Dot(DotRecord),
    /// A benchmark matrix (boxed: it is several times larger than the other records).
    Matrix(Box<MatrixRecord>),
    /// A SpMV candidate.
    Spmv(SpmvRecord),
    /// A format conversion.
    Conversion(ConversionRecord),
    /// End of a stage.
    Stage(StageRecord),
    /// A writing session began (profiles written before sessions were stamped have none).
    Session(SessionRecord),
    /// A launch of the epilogue stage (profiles written before the stage existed have none).
    Epilogue(EpilogueRecord),
    /// SSOR-AI's two forms on one matrix (profiles written before the form stage have none).
    Form(FormRecord),
}

impl Record {
    /// The identity of the measurement (what was measured, not the result), used to skip it
    /// on resume; `None` for the header and stage marks.
    pub fn key(&self) -> Option<String> {
        let opt = |v: Option<u32>| v.map_or_else(|| "-".to_string(), |v| v.to_string());
        match self {
            Record::Header(_) | Record::Stage(_) | Record::Session(_) => None,
            Record::Occupancy(o) => Some(format!("occupancy/{}/{}", o.kernel, o.threads)),
            Record::Vector(v) => Some(format!(
                "vector/{}/{}/{}/{}",
                v.kernel, v.sample.n, v.sample.threads, v.sample.blocks
            )),
            Record::Dot(d) => Some(format!(
                "dot/{}/{}/{}/{}",
                d.kernel, d.sample.n, d.sample.threads, d.sample.blocks
            )),
            Record::Matrix(m) => Some(format!("matrix/{}", m.id)),
            Record::Spmv(s) => Some(format!(
                "spmv/{}/{}/{}/{}{}{}",
                s.matrix,
                s.candidate().name(),
                opt(s.launch.blocks),
                opt(s.launch.coo_blocks),
                if s.replayed { "/replayed" } else { "" },
                if s.l2_flushed { "/flushed" } else { "" }
            )),
            Record::Conversion(c) => Some(format!("conversion/{}/{}", c.matrix, c.format)),
            Record::Form(f) => Some(format!("form/{}", f.matrix)),
            Record::Epilogue(e) => Some(format!(
                "epilogue/{}/{}/{}/{}/{}{}",
                e.kernel,
                e.variant.name(),
                e.sample.n,
                e.sample.threads,
                e.sample.blocks,
                if is_narrow(&e.row_entries) {
                    String::new()
                } else {
                    format!("/e{}", e.row_entries)
                }
            )),
        }
    }
}
