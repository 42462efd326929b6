//! Saved plans: a [`SolvePlan`] for a GPU written to a schema-versioned JSON file
//! (`plan.json` of `autopcg generate`), and read back to run the same plan without a model
//! and without deciding anything again (`autopcg solve --plan`).
//!
//! A [`SavedPlan`] records what the plan is for and what it runs:
//! - the device (name, architecture and properties) and the model file that chose it (its
//!   path as given and the SHA-256 of its bytes);
//! - the matrix [`Fingerprint`]: n, nnz, a SHA-256 of the sparsity pattern, and the work
//!   counts the SpMV model predicted from;
//! - the preconditioner (kind, order, omega, the form applied), the polling cadence;
//! - per row block the format, kernel and launch of every step ([`GpuPlanChoice`]) and their
//!   predicted times: one block (the whole matrix on one GPU, [`SavedPlan::from_plan`]) or
//!   one block per GPU ([`SavedPlan::from_blocks`]: the rows of each, its local part's plan and
//!   the multiply of its halo part, [`SavedBlock::halo`]).
//!
//! [`SavedPlan::to_solve_plan`] turns a saved plan of one block back into a [`SolvePlan`] for a
//! matrix and a device: it checks the fingerprint first (unless forced), then the device,
//! rebuilds the preconditioner with the saved parameters and checks the saved choice against
//! the device. A plan of several blocks gives its partition ([`SavedPlan::partition`]) and
//! what every block runs ([`SavedPlan::block_choices`]) to the multi-block solver instead.
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use autopcg_catalog::{device_slug, DeviceProps};
use autopcg_model::work::{spmv_work, SpmvWork};
use autopcg_solver::gpu::{GpuPlanChoice, HaloMethod};
use autopcg_solver::precond::DEVICE_EXPLICIT_KT_MAX;
use autopcg_solver::{
    PcgError, Plan, PlannedPrecond, PrecondKind, PrecondRef, Preconditioner, SsorForm,
};
use autopcg_sparse::blocks::RowPartition;
use autopcg_sparse::CsrMatrix;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::explain::StepExplain;
use crate::SolvePlan;

/// Schema version of plan files this build reads and writes.
pub const PLAN_SCHEMA: u32 = 1;

/// The `kind` field of every plan file (tells a plan from a model file or a report).
pub const PLAN_KIND: &str = "autopcg-plan";

/// Why a saved plan cannot be read or used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SavedPlanError {
    /// The file cannot be read or written.
    #[error("{path}: {source}", path = path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not a plan (bad JSON, missing or mistyped fields).
    #[error("{path} line {line}: not an autopcg plan: {reason}", path = path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// 1-based line of the fault.
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// The file is a plan of another schema version.
    #[error(
        "{path}: plan schema {found}, this build reads schema {expected}: generate the plan \
         again with this version",
        path = path.display()
    )]
    Schema {
        /// The file.
        path: PathBuf,
        /// Its schema.
        found: u32,
        /// Ours.
        expected: u32,
    },
    /// The plan's content is inconsistent.
    #[error("invalid plan: {0}")]
    Invalid(String),
    /// The plan is for another device (or no GPU can run it here).
    #[error("the plan is for {plan} but {here}")]
    Device {
        /// The plan's device, in words (`NVIDIA H200 (sm_90)`).
        plan: String,
        /// What is here instead, in words.
        here: String,
    },
    /// The matrix is not the one the plan was made for.
    #[error(
        "the plan was made for a matrix with {plan} but this one has {matrix} ({what} differ)"
    )]
    Fingerprint {
        /// What differs: `rows`, `columns`, `nonzeros` or `sparsity patterns`.
        what: &'static str,
        /// The plan's matrix, in words.
        plan: String,
        /// This matrix, in words.
        matrix: String,
    },
    /// The plan cannot run: the preconditioner cannot be built, or the saved choice does not
    /// fit the device.
    #[error(transparent)]
    Solver(#[from] PcgError),
}

/// The device a plan is for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SavedDevice {
    /// Marketing name, e.g. "NVIDIA H200".
    pub name: String,
    /// The model-file slug of the name ([`device_slug`]).
    pub slug: String,
    /// Architecture number (90 for compute capability 9.0): the `sm_XX` the emitted solver
    /// is built for.
    pub arch: u32,
    /// The properties the plan was checked against.
    pub props: DeviceProps,
}

impl SavedDevice {
    /// The device of `props`.
    pub fn of(props: &DeviceProps) -> Self {
        SavedDevice {
            name: props.name.clone(),
            slug: props.slug(),
            arch: props.arch(),
            props: props.clone(),
        }
    }

    /// `NVIDIA H200 (sm_90)`.
    pub fn words(&self) -> String {
        format!("{} (sm_{})", self.name, self.arch)
    }
}

/// The model file that chose a plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SavedModel {
    /// The path as it was given (or found).
    pub file: String,
    /// SHA-256 of the file's bytes, 64 hex digits.
    pub sha256: String,
}

impl SavedModel {
    /// Reads `path` and hashes it; `label` is how the plan names it.
    pub fn of_file(path: &Path, label: &str) -> Result<SavedModel, SavedPlanError> {
        let bytes = std::fs::read(path).map_err(|source| SavedPlanError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(SavedModel {
            file: label.to_string(),
            sha256: hex(&Sha256::digest(&bytes)),
        })
    }
}

/// What identifies the matrix a plan was made for: its shape, the SHA-256 of its sparsity
/// pattern (the plan's formats and launches depend on the pattern only; new values with the
/// same pattern keep the plan valid), and the work counts the SpMV model predicted A from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fingerprint {
    /// Rows.
    pub n: usize,
    /// Columns.
    pub ncols: usize,
    /// Stored entries.
    pub nnz: usize,
    /// [`pattern_sha256`] of the matrix, 64 hex digits.
    pub pattern_sha256: String,
    /// The SpMV work counts of A (the features the model's choice of A used).
    pub features: SpmvWork,
}

/// SHA-256 over the shape and the CSR pattern (row pointers and column indices as
/// little-endian 32-bit integers), 64 hex digits.
pub fn pattern_sha256(a: &CsrMatrix) -> String {
    let mut h = Sha256::new();
    h.update(b"autopcg csr pattern 1\0");
    h.update((a.nrows() as u64).to_le_bytes());
    h.update((a.ncols() as u64).to_le_bytes());
    h.update((a.nnz() as u64).to_le_bytes());
    let mut buf = Vec::with_capacity(1 << 16);
    for chunk in a
        .indptr()
        .chunks(1 << 14)
        .chain(a.indices().chunks(1 << 14))
    {
        buf.clear();
        for v in chunk {
            buf.extend_from_slice(&v.to_le_bytes());
        }
        h.update(&buf);
    }
    hex(&h.finalize())
}

fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(2 * bytes.len());
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

impl Fingerprint {
    /// The fingerprint of `a`.
    pub fn of(a: &CsrMatrix) -> Fingerprint {
        let (pattern_sha256, features) = rayon::join(|| pattern_sha256(a), || spmv_work(a));
        Fingerprint {
            n: a.nrows(),
            ncols: a.ncols(),
            nnz: a.nnz(),
            pattern_sha256,
            features,
        }
    }

    fn words(n: usize, ncols: usize, nnz: usize, hash: &str) -> String {
        let short = hash.get(..12).unwrap_or(hash);
        format!("{n} x {ncols}, {nnz} nonzeros, pattern {short}...")
    }

    /// Checks `a` against this fingerprint: `Ok` when rows, columns, nonzeros and the pattern
    /// hash agree, else [`SavedPlanError::Fingerprint`] saying what differs.
    pub fn check(&self, a: &CsrMatrix) -> Result<(), SavedPlanError> {
        let what = if a.nrows() != self.n {
            Some("rows")
        } else if a.ncols() != self.ncols {
            Some("columns")
        } else if a.nnz() != self.nnz {
            Some("nonzeros")
        } else {
            None
        };
        let hash = match what {
            Some(_) => String::new(),
            None => pattern_sha256(a),
        };
        let what = match what {
            Some(w) => w,
            None if hash == self.pattern_sha256 => return Ok(()),
            None => "sparsity patterns",
        };
        Err(SavedPlanError::Fingerprint {
            what,
            plan: Self::words(self.n, self.ncols, self.nnz, &self.pattern_sha256),
            matrix: if hash.is_empty() {
                format!("{} x {}, {} nonzeros", a.nrows(), a.ncols(), a.nnz())
            } else {
                Self::words(a.nrows(), a.ncols(), a.nnz(), &hash)
            },
        })
    }
}

/// The preconditioner of a plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SavedPrecond {
    /// `none`, `jacobi`, `ssor-ai` (first order) or `ssor-ai2` (second order).
    pub kind: String,
    /// Neumann-series order of SSOR-AI (1 or 2).
    pub order: Option<u8>,
    /// Relaxation factor of SSOR-AI, as used.
    pub omega: Option<f64>,
    /// SSOR-AI's form as applied: `factored` or `explicit`.
    pub form: Option<String>,
    /// The preconditioner as applied (`none`, `jacobi`, `ssor-ai-factored`,
    /// `ssor-ai-explicit`).
    pub applied: String,
}

impl SavedPrecond {
    /// The preconditioner `kind` (its omega resolved for the matrix) in the form the plan
    /// applies (`pre`). An SSOR-AI kind whose omega is still automatic is refused: a saved
    /// plan records the omega it runs with.
    pub fn of<'p>(
        kind: &PrecondKind,
        pre: impl Into<PrecondRef<'p>>,
    ) -> Result<Self, SavedPlanError> {
        let pre = pre.into();
        let applied = pre.kind_name().to_string();
        Ok(match *kind {
            PrecondKind::None => SavedPrecond {
                kind: "none".into(),
                order: None,
                omega: None,
                form: None,
                applied,
            },
            PrecondKind::Jacobi => SavedPrecond {
                kind: "jacobi".into(),
                order: None,
                omega: None,
                form: None,
                applied,
            },
            PrecondKind::SsorAi { order, omega, .. } => SavedPrecond {
                kind: if order == 2 { "ssor-ai2" } else { "ssor-ai" }.into(),
                order: Some(order),
                omega: Some(omega.ok_or_else(|| {
                    SavedPlanError::Invalid(
                        "precond: SSOR-AI with an automatic omega not resolved for the matrix"
                            .into(),
                    )
                })?),
                form: Some(
                    match pre {
                        PrecondRef::Built(Preconditioner::SsorExplicit { .. })
                        | PrecondRef::SsorK1ExplicitFromA { .. } => "explicit",
                        _ => "factored",
                    }
                    .into(),
                ),
                applied,
            },
        })
    }

    /// The preconditioner to build: the kind with the form applied.
    pub fn kind(&self) -> Result<PrecondKind, SavedPlanError> {
        let bad = |what: String| SavedPlanError::Invalid(format!("precond: {what}"));
        match self.kind.as_str() {
            "none" => Ok(PrecondKind::None),
            "jacobi" => Ok(PrecondKind::Jacobi),
            "ssor-ai" | "ssor-ai2" => {
                let order = self
                    .order
                    .ok_or_else(|| bad("SSOR-AI without an order".into()))?;
                let omega = self
                    .omega
                    .ok_or_else(|| bad("SSOR-AI without omega".into()))?;
                let form = match self.form.as_deref() {
                    Some("factored") => SsorForm::Factored,
                    Some("explicit") => SsorForm::Explicit,
                    other => {
                        return Err(bad(format!("form {other:?} is not factored or explicit")))
                    }
                };
                let k = PrecondKind::SsorAi {
                    order,
                    omega: Some(omega),
                    form,
                };
                k.validate().map_err(|e| bad(e.to_string()))?;
                Ok(k)
            }
            other => Err(bad(format!(
                "unknown kind {other:?} (expected none, jacobi, ssor-ai or ssor-ai2)"
            ))),
        }
    }
}

/// One step of an iteration as the plan runs it (the report of [`GpuPlanChoice::plan`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SavedStep {
    /// `update`, `precond`, `precond (K)`, `spmv`, `dots`...
    pub step: String,
    /// Storage format of the operand, or `-`.
    pub format: String,
    /// Kernel name(s), `+`-joined for HYB.
    pub kernel: String,
    /// Launch configuration(s) in words.
    pub config: String,
    /// Predicted milliseconds, where a model chose.
    pub predicted_ms: Option<f64>,
}

/// The plan of one row block: rows `rows.0 .. rows.1` on GPU `gpu`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SavedBlock {
    /// First and one-past-last row.
    pub rows: (usize, usize),
    /// Ordinal of the GPU that runs the block.
    pub gpu: usize,
    /// Format, kernel and launch of every step.
    pub choice: GpuPlanChoice,
    /// The steps in execution order, with predicted times (a block of a split plan ends with
    /// the multiply of its halo part).
    pub steps: Vec<SavedStep>,
    /// The multiply of the block's halo part (the entries whose columns other blocks own):
    /// present in every block of a plan of several blocks, absent in a plan of one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub halo: Option<HaloMethod>,
}

/// A plan as written to `plan.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SavedPlan {
    /// [`PLAN_SCHEMA`] of the writer.
    pub schema: u32,
    /// Always [`PLAN_KIND`].
    pub kind: String,
    /// `autopcg <version>`.
    pub generated_by: String,
    /// The device the plan is for.
    pub device: SavedDevice,
    /// The model file that chose it (`None`: the fallback rule chose).
    pub model: Option<SavedModel>,
    /// The matrix it was made for.
    pub matrix: Fingerprint,
    /// Where the matrix was read from, as given (informational).
    pub matrix_file: Option<String>,
    /// The preconditioner.
    pub precond: SavedPrecond,
    /// Poll (synchronise and check convergence) every this many iterations.
    pub check_every: usize,
    /// Per row block, what every step runs (one block: the whole matrix on GPU 0).
    pub blocks: Vec<SavedBlock>,
    /// Predicted milliseconds per iteration, where a model chose.
    pub predicted_ms_per_iteration: Option<f64>,
    /// Where the choices came from, in words.
    pub source: String,
    /// Notes of the planning (fallbacks taken).
    pub notes: Vec<String>,
    /// How the model chose each step.
    pub explain: Vec<StepExplain>,
}

fn saved_steps(plan: &Plan) -> Vec<SavedStep> {
    plan.steps
        .iter()
        .map(|s| SavedStep {
            step: s.step.clone(),
            format: s.format.clone(),
            kernel: s.kernel.clone(),
            config: s.config.clone(),
            predicted_ms: s.predicted_ms,
        })
        .collect()
}

impl SavedPlan {
    /// The saved form of `plan`, made for `a` on the device `props`, chosen by `model` (or
    /// the fallback rule). The preconditioner is the plan's as applied ([`SolvePlan::kind`]:
    /// omega resolved for `a`, the SSOR-AI form chosen). `matrix_file` names where `a` came
    /// from. Only GPU plans can be saved.
    pub fn from_plan(
        plan: &SolvePlan,
        a: &CsrMatrix,
        props: &DeviceProps,
        model: Option<SavedModel>,
        matrix_file: Option<String>,
    ) -> Result<SavedPlan, SavedPlanError> {
        let choice = plan.gpu.as_ref().ok_or_else(|| {
            SavedPlanError::Invalid("a CPU plan has nothing to save: plan for a GPU".into())
        })?;
        let precond = SavedPrecond::of(&plan.kind.resolved_for(a), &plan.preconditioner)?;
        Ok(SavedPlan {
            schema: PLAN_SCHEMA,
            kind: PLAN_KIND.into(),
            generated_by: format!("autopcg {}", env!("CARGO_PKG_VERSION")),
            device: SavedDevice::of(props),
            model,
            matrix: Fingerprint::of(a),
            matrix_file,
            precond,
            check_every: plan.check_every,
            blocks: vec![SavedBlock {
                rows: (0, a.nrows()),
                gpu: 0,
                choice: choice.clone(),
                steps: saved_steps(&plan.steps),
                halo: None,
            }],
            predicted_ms_per_iteration: plan.predicted_iteration_ms,
            source: plan.steps.source.clone(),
            notes: plan.notes.clone(),
            explain: plan.explain.clone(),
        })
    }

    /// The saved form of a plan split into row blocks, block `i` on GPU `i` (`blocks`, made by
    /// [`crate::blocks::plan_blocks_balanced`] for `a` on the device `props`): each block's
    /// local plan, its steps followed by its halo part's multiply, and that multiply's kernel
    /// and launch. The preconditioner is the one every block applies (omega resolved once for
    /// `a`); the predicted time per iteration is the slowest block's, where the model predicted
    /// every block.
    ///
    /// One reduction block size serves every block (the emitted solver compiles the
    /// reductions once): a block whose three-dot reduction was chosen with another block size
    /// than block 0's gets block 0's, with its grid kept, and a note says so.
    pub fn from_blocks(
        blocks: &crate::blocks::BalancedBlocks,
        a: &CsrMatrix,
        props: &DeviceProps,
        model: Option<SavedModel>,
        matrix_file: Option<String>,
    ) -> Result<SavedPlan, SavedPlanError> {
        let plans = &blocks.plans.blocks;
        let first = plans
            .first()
            .ok_or_else(|| SavedPlanError::Invalid("no row block to save".into()))?;
        let gpu_choice = |i: usize, p: &crate::blocks::BlockPlan| {
            p.local.gpu.clone().ok_or_else(|| {
                SavedPlanError::Invalid(format!(
                    "block {i} has a CPU plan: plan the blocks for a GPU"
                ))
            })
        };
        let threads = gpu_choice(0, first)?.dot3.config.threads;
        let precond = SavedPrecond::of(
            &first.local.kind.resolved_for(a),
            &first.local.preconditioner,
        )?;
        let mut notes = Vec::new();
        let mut saved = Vec::with_capacity(plans.len());
        for (i, p) in plans.iter().enumerate() {
            let mut choice = gpu_choice(i, p)?;
            if choice.dot3.config.threads != threads {
                notes.push(format!(
                    "block {i}: the three-dot reduction runs with block 0's {threads} threads per \
                     block instead of its own {} (one reduction block size for every block)",
                    choice.dot3.config.threads
                ));
                choice.dot3.config.threads = threads;
                choice.dot3.predicted_ms = None;
            }
            let mut steps = saved_steps(&choice.block_plan());
            steps.extend(saved_steps(&autopcg_solver::Plan {
                steps: vec![p.halo.clone()],
                source: String::new(),
            }));
            saved.push(SavedBlock {
                rows: (p.rows.start, p.rows.end),
                gpu: i,
                choice,
                steps,
                halo: Some(
                    p.halo_method
                        .unwrap_or_else(|| HaloMethod::fixed(p.rows.len())),
                ),
            });
        }
        let modelled = plans.iter().all(|p| p.modelled);
        let slowest_us = plans.iter().map(|p| p.predicted_us).fold(0.0, f64::max);
        let source = format!(
            "{} row blocks, one per GPU ({}): {}",
            plans.len(),
            blocks.balance.by,
            first.local.steps.source
        );
        for p in plans {
            notes.extend(p.local.notes.iter().cloned());
        }
        notes.sort();
        notes.dedup();
        let plan = SavedPlan {
            schema: PLAN_SCHEMA,
            kind: PLAN_KIND.into(),
            generated_by: format!("autopcg {}", env!("CARGO_PKG_VERSION")),
            device: SavedDevice::of(props),
            model,
            matrix: Fingerprint::of(a),
            matrix_file,
            precond,
            check_every: first.local.check_every,
            blocks: saved,
            predicted_ms_per_iteration: modelled.then_some(slowest_us * 1e-3),
            source,
            notes,
            explain: Vec::new(),
        };
        plan.validate()?;
        Ok(plan)
    }

    /// The plan as pretty-printed JSON (what `plan.json` holds).
    pub fn to_json(&self) -> Result<String, SavedPlanError> {
        serde_json::to_string_pretty(self)
            .map(|s| s + "\n")
            .map_err(|e| SavedPlanError::Invalid(format!("cannot be written as JSON: {e}")))
    }

    /// Writes the plan to `path`.
    pub fn save(&self, path: &Path) -> Result<(), SavedPlanError> {
        let text = self.to_json()?;
        std::fs::write(path, text).map_err(|source| SavedPlanError::Io {
            path: path.to_path_buf(),
            source,
        })
    }

    /// Reads and checks a plan file.
    pub fn load(path: &Path) -> Result<SavedPlan, SavedPlanError> {
        let text = std::fs::read_to_string(path).map_err(|source| SavedPlanError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        SavedPlan::parse(&text, path)
    }

    /// Parses and checks plan text; `path` names it in errors. The schema version is checked
    /// before anything else.
    pub fn parse(text: &str, path: &Path) -> Result<SavedPlan, SavedPlanError> {
        #[derive(Deserialize)]
        struct Head {
            schema: Option<u32>,
            kind: Option<String>,
        }
        let parse_err = |e: serde_json::Error| SavedPlanError::Parse {
            path: path.to_path_buf(),
            line: e.line().max(1),
            reason: e.to_string(),
        };
        let head: Head = serde_json::from_str(text).map_err(parse_err)?;
        if head.kind.as_deref() != Some(PLAN_KIND) {
            return Err(SavedPlanError::Parse {
                path: path.to_path_buf(),
                line: 1,
                reason: format!(
                    "field \"kind\" is {:?}, expected {PLAN_KIND:?}",
                    head.kind.unwrap_or_default()
                ),
            });
        }
        match head.schema {
            Some(PLAN_SCHEMA) => {}
            found => {
                return Err(SavedPlanError::Schema {
                    path: path.to_path_buf(),
                    found: found.unwrap_or(0),
                    expected: PLAN_SCHEMA,
                })
            }
        }
        let p: SavedPlan = serde_json::from_str(text).map_err(parse_err)?;
        p.validate().map_err(|e| SavedPlanError::Parse {
            path: path.to_path_buf(),
            line: 1,
            reason: e.to_string(),
        })?;
        Ok(p)
    }

    /// Checks what deserialisation alone cannot: blocks covering every row in order (one block,
    /// or several each with the multiply of its halo part), a polling interval of at least 1,
    /// a known preconditioner that matches the step that applies it in every block, and, with
    /// several blocks, one reduction block size for all of them (the sum of the blocks' dots
    /// runs once per device with one block size).
    pub fn validate(&self) -> Result<(), SavedPlanError> {
        let bad = |s: String| Err(SavedPlanError::Invalid(s));
        if self.check_every == 0 {
            return bad("check_every must be at least 1".into());
        }
        let Some(first) = self.blocks.first() else {
            return bad("the plan has no row block".into());
        };
        self.precond.kind()?;
        let split = self.blocks.len() > 1;
        let mut next = 0usize;
        for (i, b) in self.blocks.iter().enumerate() {
            if b.rows.0 != next || (b.rows.1 <= b.rows.0 && self.matrix.n > 0) {
                return bad(format!(
                    "block {i} covers rows {}..{}, expected a non-empty range from row {next}",
                    b.rows.0, b.rows.1
                ));
            }
            next = b.rows.1;
            if !split && b.gpu != 0 {
                return bad(format!(
                    "the block runs on GPU {}: a plan of one block runs on GPU 0",
                    b.gpu
                ));
            }
            if b.choice.precond.kind_name() != self.precond.applied {
                return bad(format!(
                    "block {i}: the preconditioner step is for {} but the preconditioner is {}",
                    b.choice.precond.kind_name(),
                    self.precond.applied
                ));
            }
            match (split, &b.halo) {
                (true, None) => {
                    return bad(format!(
                        "block {i} of {} has no multiply for its halo part",
                        self.blocks.len()
                    ))
                }
                (false, Some(_)) => {
                    return bad("a plan of one block has no halo part to multiply".into())
                }
                _ => {}
            }
            let t0 = first.choice.dot3.config.threads;
            if b.choice.dot3.config.threads != t0 {
                return bad(format!(
                    "block {i} reduces with {} threads per block, block 0 with {t0}: the blocks \
                     of a plan share one reduction block size",
                    b.choice.dot3.config.threads
                ));
            }
        }
        if next != self.matrix.n {
            return bad(format!(
                "the blocks cover rows 0..{next} but the matrix has {} rows",
                self.matrix.n
            ));
        }
        Ok(())
    }

    /// Whether the plan splits the matrix into several row blocks (one per GPU).
    pub fn is_split(&self) -> bool {
        self.blocks.len() > 1
    }

    /// The rows of every block.
    pub fn partition(&self) -> Result<RowPartition, SavedPlanError> {
        let starts = self
            .blocks
            .iter()
            .map(|b| b.rows.0)
            .chain([self.matrix.n])
            .collect();
        RowPartition::from_starts(starts, self.matrix.n)
            .map_err(|e| SavedPlanError::Invalid(format!("the blocks' rows: {e}")))
    }

    /// What every block runs, in block order: its local part's plan and its halo part's
    /// multiply (the fixed rule's, [`HaloMethod::fixed`], for a block without one: a plan of
    /// one block).
    pub fn block_choices(&self) -> Vec<(GpuPlanChoice, HaloMethod)> {
        self.blocks
            .iter()
            .map(|b| {
                let halo = b
                    .halo
                    .unwrap_or_else(|| HaloMethod::fixed(b.rows.1 - b.rows.0));
                (b.choice.clone(), halo)
            })
            .collect()
    }

    /// Replaces what every step runs (the steps reported with it follow); the preconditioner
    /// step must stay the same kind. For plans edited by hand or by tools.
    pub fn set_choice(&mut self, choice: GpuPlanChoice) -> Result<(), SavedPlanError> {
        self.set_block_choice(0, choice)
    }

    /// Replaces what block `i`'s local steps run (its step list follows; the multiply of its
    /// halo part, the last step of a block of a split plan, stays as saved); the preconditioner
    /// step must stay the same kind.
    pub fn set_block_choice(
        &mut self,
        i: usize,
        choice: GpuPlanChoice,
    ) -> Result<(), SavedPlanError> {
        if choice.precond.kind_name() != self.precond.applied {
            return Err(SavedPlanError::Invalid(format!(
                "the new preconditioner step is for {} but the plan's preconditioner is {}",
                choice.precond.kind_name(),
                self.precond.applied
            )));
        }
        let nblocks = self.blocks.len();
        let block = self.blocks.get_mut(i).ok_or_else(|| {
            SavedPlanError::Invalid(format!("the plan has no row block {i} ({nblocks} blocks)"))
        })?;
        let halo_step = match block.halo {
            Some(_) => block.steps.last().cloned(),
            None => None,
        };
        block.steps = saved_steps(&if block.halo.is_some() {
            choice.block_plan()
        } else {
            choice.plan()
        });
        block.steps.extend(halo_step);
        block.choice = choice;
        Ok(())
    }

    /// The first row block (the only one of an unsplit plan). Panics on a plan without
    /// blocks, which [`SavedPlan::validate`] refuses (plans read with [`SavedPlan::load`] and
    /// made by [`SavedPlan::from_plan`] or [`SavedPlan::from_blocks`] have at least one).
    pub fn block(&self) -> &SavedBlock {
        &self.blocks[0]
    }

    /// What every step of the first block runs (of the whole solve in an unsplit plan).
    pub fn choice(&self) -> &GpuPlanChoice {
        &self.block().choice
    }

    /// Checks `a` against the plan's fingerprint; with `force` a mismatch is only a note
    /// (returned). `Ok(None)` when it matches.
    pub fn check_matrix(
        &self,
        a: &CsrMatrix,
        force: bool,
    ) -> Result<Option<String>, SavedPlanError> {
        match self.matrix.check(a) {
            Ok(()) => Ok(None),
            Err(e) if force => Ok(Some(format!("fingerprint check forced: {e}"))),
            Err(e) => Err(e),
        }
    }

    /// Checks that the plan is for the device `props`: the same name (or model-file slug) and
    /// the same architecture.
    pub fn check_device(&self, props: &DeviceProps) -> Result<(), SavedPlanError> {
        let same_name = props.name == self.device.name
            || device_slug(&props.name) == device_slug(&self.device.name);
        if same_name && props.arch() == self.device.arch {
            return Ok(());
        }
        Err(SavedPlanError::Device {
            plan: self.device.words(),
            here: format!("this device is {} (sm_{})", props.name, props.arch()),
        })
    }

    /// The error for a solve that has no GPU of the plan's kind (`why`: what is there).
    pub fn no_device(&self, why: &str) -> SavedPlanError {
        SavedPlanError::Device {
            plan: self.device.words(),
            here: why.to_string(),
        }
    }

    /// The [`SolvePlan`] of this saved plan for `a` on `props`: the fingerprint is checked
    /// first (a mismatch is only a note with `force`), then the device; the preconditioner is
    /// built with the saved kind, order, omega and form, and the saved choice is checked
    /// against the matrix, the preconditioner and the device. Nothing is chosen again.
    pub fn to_solve_plan(
        &self,
        a: &CsrMatrix,
        props: &DeviceProps,
        force: bool,
        label: &str,
    ) -> Result<SolvePlan, SavedPlanError> {
        let mut notes = Vec::new();
        notes.extend(self.check_matrix(a, force)?);
        self.check_device(props)?;
        self.build(a, props, label, notes)
    }

    /// [`SavedPlan::to_solve_plan`] without the checks of matrix and device (the caller made
    /// them); `notes` come first in the plan's notes.
    pub fn build(
        &self,
        a: &CsrMatrix,
        props: &DeviceProps,
        label: &str,
        mut notes: Vec<String>,
    ) -> Result<SolvePlan, SavedPlanError> {
        self.validate()?;
        if self.is_split() {
            return Err(SavedPlanError::Invalid(format!(
                "a plan of {} row blocks runs on the multi-block solver, not as one GPU plan",
                self.blocks.len()
            )));
        }
        let kind = self.precond.kind()?;
        let t0 = Instant::now();
        // First-order SSOR-AI (either form), second order's factors and Jacobi are built by
        // the GPU backend from A, as `plan` leaves them.
        let pre: PlannedPrecond = match kind {
            PrecondKind::Jacobi if a.is_square() => {
                if let Some((row, value)) = autopcg_solver::scaling::first_bad_diagonal(a) {
                    return Err(autopcg_solver::PcgError::BadDiagonal {
                        row,
                        value,
                        precond: kind.to_string(),
                    }
                    .into());
                }
                PlannedPrecond::JacobiFromA { n: a.nrows() }
            }
            PrecondKind::SsorAi {
                order: 1,
                omega: Some(omega),
                form,
            } => match (form, crate::factors::K1Factors::of(a)) {
                (SsorForm::Factored, Some(_)) => PlannedPrecond::SsorK1FromA {
                    omega,
                    n: a.nrows(),
                },
                // The product formed from A where no row of K^T is past what the device
                // gathers for a row (the backend forms it on the host where it refuses).
                (SsorForm::Explicit, Some(v))
                    if (0..a.nrows()).all(|i| v.kt_row(i).len() <= DEVICE_EXPLICIT_KT_MAX) =>
                {
                    PlannedPrecond::SsorK1ExplicitFromA {
                        omega,
                        n: a.nrows(),
                    }
                }
                _ => Preconditioner::build(a, &kind)?.into(),
            },
            // Second order's factors, factored, as `plan` leaves them where it counts them on
            // the device (the backend builds them on the host where the device refuses).
            PrecondKind::SsorAi {
                order: 2,
                omega: Some(omega),
                form: SsorForm::Factored,
            } if crate::factors::K1Factors::of(a).is_some() => PlannedPrecond::SsorK2FromA {
                omega,
                n: a.nrows(),
            },
            _ => Preconditioner::build(a, &kind)?.into(),
        };
        let precond_ms = t0.elapsed().as_secs_f64() * 1e3;
        let choice = self.choice().clone();
        choice.check(a.nrows(), &pre, props)?;
        let mut steps = choice.plan();
        steps.source = format!("plan {label} ({})", self.source);
        notes.push(format!("plan read from {label}: nothing chosen again"));
        Ok(SolvePlan {
            preconditioner: pre,
            kind,
            gpu: Some(choice),
            check_every: self.check_every,
            steps,
            model: self.model.as_ref().map(|m| m.file.clone()),
            explain: Vec::new(),
            predicted_iteration_ms: self.predicted_ms_per_iteration,
            notes,
            precond_ms,
            select_ms: 0.0,
        })
    }
}
