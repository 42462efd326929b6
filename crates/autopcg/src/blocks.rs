//! Solves with the matrix split into row blocks ([`crate::Solver::blocks`],
//! [`crate::Solver::gpus`]): the multi-block PCG of [`autopcg_solver::blocks`] on the CPU, on
//! GPU 0 (every block on one stream), or on several GPUs (one block per GPU, each on its own
//! device handle), blocks balanced by rows and nonzeros
//! ([`autopcg_sparse::blocks::default_row_costs`]). On a GPU each block's plan comes from the
//! selection entry point ([`autopcg_generator::blocks::plan_blocks`], the fixed rule where no
//! model is given). The report says how the matrix was split, what one iteration exchanges,
//! which GPU holds each block and each block's sub-plan.
//!
//! A saved plan of several row blocks (`plan.json` of `autopcg generate --gpus N`) runs here too
//! ([`BlockExec::from_saved`]): its split, every block's choices and GPU, and its preconditioner
//! are used as saved, nothing chosen again.
use std::fmt;
use std::ops::ControlFlow;
use std::str::FromStr;
use std::time::Instant;

#[cfg(feature = "gpu")]
use autopcg_generator::saved::{SavedBlock, SavedPlan, SavedPlanError};
use autopcg_solver::blocks::{solve_blocks_cpu_with, BlockProblem, BlockReport};
#[cfg(feature = "gpu")]
use autopcg_solver::{blocks::BlockGpuChoice, gpu::BackendTimes, gpu::HaloMethod};
use autopcg_solver::{IterRecord, PcgError, PcgParams, Plan, PrecondKind};
use autopcg_sparse::blocks::RowPartition;
use autopcg_sparse::CsrMatrix;

#[cfg(feature = "gpu")]
use crate::prepared::saved_error;
use crate::prepared::SYMMETRY_TOLERANCE;
use crate::{Device, Error, SetupTimes, Solution, SolveFailure};

/// How many GPUs a split solve runs on ([`crate::Solver::gpus`]), one row block per GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpuCount {
    /// Exactly this many (at least 1): GPUs 0..N.
    Count(usize),
    /// The count, up to the GPUs present, with the least predicted time per iteration: the
    /// slowest block's compute (its sub-plan's prediction by the device's model,
    /// [`autopcg_generator::blocks::choose_gpu_count_planned`]; without a model its bandwidth
    /// bound on GPU 0, [`autopcg_generator::blocks::choose_gpu_count`]), its halo over the link
    /// and one all-reduce, with the link
    /// figures of the device's model when tune measured them there
    /// ([`autopcg_generator::blocks::link_for`]), else [`autopcg_generator::blocks::DEFAULT_LINK`]).
    Auto,
}

impl fmt::Display for GpuCount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GpuCount::Count(n) => write!(f, "{n}"),
            GpuCount::Auto => f.write_str("auto"),
        }
    }
}

impl FromStr for GpuCount {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s.eq_ignore_ascii_case("auto") {
            return Ok(GpuCount::Auto);
        }
        match s.parse::<usize>() {
            Ok(n) if n >= 1 => Ok(GpuCount::Count(n)),
            _ => Err(format!(
                "'{s}' is not a GPU count (expected a whole number >= 1 or auto)"
            )),
        }
    }
}

/// What [`solve`] needs of the builder.
pub(crate) struct BlockSettings<'a> {
    pub a: &'a CsrMatrix,
    pub precond: PrecondKind,
    pub params: &'a PcgParams,
    pub device: Device,
    pub check_symmetry: bool,
    pub check_every: Option<usize>,
    pub nblocks: Option<usize>,
    pub gpus: Option<GpuCount>,
    pub model: crate::ModelChoice,
    pub expected_iterations: f64,
}

/// GPUs the driver reports (0 when there is no usable driver, or no GPU support).
fn gpus_found() -> usize {
    #[cfg(feature = "gpu")]
    if autopcg_gpu::gpu_available() {
        return autopcg_gpu::GpuDevice::discover().map_or(0, |d| d.len());
    }
    0
}

fn invalid(msg: String) -> SolveFailure {
    Error::Pcg(PcgError::InvalidParameter(msg)).into()
}

/// Where the blocks run: the block count and, on GPUs, the handle of every block (one handle
/// shared by all blocks on GPU 0, or one per GPU) with the GPU-count report.
struct Placement {
    nblocks: usize,
    #[cfg(feature = "gpu")]
    devices: Option<Vec<autopcg_gpu::GpuDevice>>,
    ordinals: Vec<usize>,
    gpu_count: Option<autopcg_solver::blocks::GpuCountReport>,
}

fn place(s: &BlockSettings, notes: &mut Vec<String>) -> Result<Placement, SolveFailure> {
    let a = s.a;
    let nblocks =
        match (s.nblocks, s.gpus) {
            (Some(_), Some(_)) => return Err(invalid(
                "row blocks and GPUs cannot both be given: --gpus N makes N blocks, one per GPU"
                    .into(),
            )),
            (Some(n), None) => n,
            (None, Some(GpuCount::Count(n))) => n,
            (None, Some(GpuCount::Auto)) => 1,
            (None, None) => return Err(invalid("no row blocks asked for".into())),
        };
    if nblocks == 0 || nblocks > a.nrows() {
        return Err(invalid(format!(
            "cannot split {} rows into {nblocks} non-empty row blocks",
            a.nrows()
        )));
    }
    if let Some(g) = s.gpus {
        if s.device == Device::Cpu {
            return Err(invalid(format!(
                "--gpus {g} runs the blocks on GPUs; it cannot be combined with the CPU device"
            )));
        }
        let found = gpus_found();
        if found == 0 || matches!(g, GpuCount::Count(n) if n > found) {
            return Err(Error::DeviceUnavailable(format!(
                "--gpus {g} needs {} but {found} GPU{} found",
                match g {
                    GpuCount::Count(1) => "1 GPU".to_string(),
                    GpuCount::Count(n) => format!("{n} GPUs"),
                    GpuCount::Auto => "at least 1 GPU".to_string(),
                },
                if found == 1 { " was" } else { "s were" }
            ))
            .into());
        }
        #[cfg(feature = "gpu")]
        return place_on_gpus(s, g, found, notes);
    }
    #[cfg(feature = "gpu")]
    {
        let devices = match s.device {
            Device::Gpu => {
                let dev = crate::device::open_gpu(0).map_err(Error::DeviceUnavailable)?;
                Some(vec![dev; nblocks])
            }
            Device::Auto => {
                notes.push(
                    "row blocks run on the CPU unless --device gpu or --gpus is given".to_string(),
                );
                None
            }
            Device::Cpu => None,
        };
        let ordinals = if devices.is_some() {
            vec![0; nblocks]
        } else {
            Vec::new()
        };
        Ok(Placement {
            nblocks,
            devices,
            ordinals,
            gpu_count: None,
        })
    }
    #[cfg(not(feature = "gpu"))]
    match s.device {
        Device::Gpu => Err(Error::DeviceUnavailable(
            "this build has no GPU support (the `gpu` feature is off)".into(),
        )
        .into()),
        Device::Auto | Device::Cpu => {
            if s.device == Device::Auto {
                notes.push("row blocks run on the CPU".to_string());
            }
            Ok(Placement {
                nblocks,
                ordinals: Vec::new(),
                gpu_count: None,
            })
        }
    }
}

/// `--gpus`: the count (chosen for `auto`), one handle per GPU 0..count.
#[cfg(feature = "gpu")]
fn place_on_gpus(
    s: &BlockSettings,
    g: GpuCount,
    found: usize,
    notes: &mut Vec<String>,
) -> Result<Placement, SolveFailure> {
    use autopcg_generator::blocks::{
        bandwidth_gbs, choose_gpu_count, choose_gpu_count_planned, roofline_block_us,
    };
    let (a, model) = (s.a, &s.model);
    use autopcg_solver::blocks::{GpuCountPrediction, GpuCountReport};
    let first = crate::device::open_gpu(0).map_err(Error::DeviceUnavailable)?;
    let (n, gpu_count) = match g {
        GpuCount::Count(n) => (n, None),
        GpuCount::Auto => {
            // The link tune measured on this host when the device's model holds it, else the
            // default figures.
            let resolved = crate::models::resolve_model(model, Some(first.props().name.as_str()))?;
            let link =
                autopcg_generator::blocks::link_for(resolved.model.as_ref().map(|m| &m.file));
            // Each count's blocks planned with the device's model (what they would run), else
            // their bandwidth bound on GPU 0.
            let (c, by) = match &resolved.model {
                Some(m) => {
                    let label = m.label();
                    let mut req = autopcg_generator::PlanRequest::new(
                        a,
                        s.precond.resolved_for(a),
                        autopcg_generator::Target::Gpu(first.props().clone()),
                    );
                    req.expected_iterations = s.expected_iterations;
                    req.model = Some(autopcg_generator::ModelRef {
                        file: &m.file,
                        label: &label,
                    });
                    let (c, modelled) =
                        choose_gpu_count_planned(&req, found, &link).map_err(plan_error)?;
                    let by = if modelled {
                        "the model's per-block plans"
                    } else {
                        "per-block plans (bandwidth bound where the model did not predict)"
                    };
                    (c, by)
                }
                None => {
                    let bw = bandwidth_gbs(first.props());
                    let c = choose_gpu_count(a, found, &link, |b| roofline_block_us(b, bw))
                        .map_err(plan_error)?;
                    (c, "the bandwidth bound of each block")
                }
            };
            notes.push(format!(
                "--gpus auto chose {} of {found} GPUs by predicted time per iteration ({}; {by})",
                c.gpus, link.name
            ));
            let options = c
                .options
                .iter()
                .map(|o| GpuCountPrediction {
                    gpus: o.gpus,
                    compute_us: o.compute_us,
                    halo_us: o.halo_us,
                    allreduce_us: o.allreduce_us,
                    predicted_us: o.predicted_us,
                })
                .collect();
            let report = GpuCountReport {
                chosen: c.gpus,
                found,
                link: link.name.to_string(),
                options,
            };
            (c.gpus, Some(report))
        }
    };
    let mut devices = vec![first];
    for ordinal in 1..n {
        devices.push(crate::device::open_gpu(ordinal).map_err(Error::DeviceUnavailable)?);
    }
    Ok(Placement {
        nblocks: n,
        devices: Some(devices),
        ordinals: (0..n).collect(),
        gpu_count,
    })
}

/// The blocks' rows and sub-plans by the selection entry point
/// ([`autopcg_generator::blocks::plan_blocks_balanced`]) for `target`, with `model` where one
/// is given: balanced by the model's predicted per-block time when it predicted every block.
fn block_plans(
    s: &BlockSettings,
    kind: PrecondKind,
    nblocks: usize,
    target: autopcg_generator::Target,
    #[cfg(feature = "gpu")] model: Option<&crate::models::LoadedModel>,
) -> Result<autopcg_generator::blocks::BalancedBlocks, Error> {
    let mut req = autopcg_generator::PlanRequest::new(s.a, kind, target);
    req.expected_iterations = s.expected_iterations;
    #[cfg(feature = "gpu")]
    let label = model.map(|m| m.label());
    #[cfg(feature = "gpu")]
    if let (Some(m), Some(l)) = (model, label.as_deref()) {
        req.model = Some(autopcg_generator::ModelRef {
            file: &m.file,
            label: l,
        });
    }
    autopcg_generator::blocks::plan_blocks_balanced(&req, nblocks).map_err(plan_error)
}

fn plan_error(e: autopcg_generator::PlanError) -> Error {
    match e {
        autopcg_generator::PlanError::Solver(p) => Error::Pcg(p),
        other => Error::Plan(other.to_string()),
    }
}

/// What a saved plan of several row blocks fixes that planning would otherwise choose
/// ([`BlockExec::from_saved`]).
#[cfg(feature = "gpu")]
struct SavedBlocks {
    /// What every block runs, in block order.
    choices: Vec<BlockGpuChoice>,
    /// Every block's steps as saved, for the report.
    steps: Vec<Plan>,
    /// The plan's name in reports (usually its path).
    label: String,
    /// The model file that chose the plan (`None`: the fallback rule).
    model: Option<String>,
    /// The plan's predicted milliseconds per iteration, where a model predicted every block.
    predicted_iteration_ms: Option<f64>,
}

/// The saved block `b`'s steps as a report's sub-plan: its local part's steps, then its halo
/// part's multiply, with their predicted times.
#[cfg(feature = "gpu")]
fn saved_block_steps(b: &SavedBlock, label: &str) -> Plan {
    let mut plan = Plan {
        steps: Vec::new(),
        source: format!(
            "rows {}..{} on GPU {}: plan {label}",
            b.rows.0, b.rows.1, b.gpu
        ),
    };
    for s in &b.steps {
        plan.push(
            &s.step,
            &s.format,
            &s.kernel,
            s.config.clone(),
            s.predicted_ms,
        );
    }
    plan
}

/// Opens the GPUs of the saved plan `saved` of several blocks: block `i` on GPU
/// `saved.blocks[i].gpu` (blocks on one GPU share its handle), every one present and the plan's
/// device. Refused ([`Error::SavedPlan`]) on the CPU, with fewer GPUs than the plan needs, or on
/// another device.
#[cfg(feature = "gpu")]
fn place_saved(device: Device, saved: &SavedPlan) -> Result<Placement, Error> {
    let refuse = |why: String| saved_error(saved.no_device(&why));
    if device == Device::Cpu {
        return Err(refuse("the solve was asked to run on the CPU".into()));
    }
    let nblocks = saved.blocks.len();
    let ordinals: Vec<usize> = saved.blocks.iter().map(|b| b.gpu).collect();
    let needed = ordinals.iter().max().map_or(0, |m| m + 1);
    let found = gpus_found();
    if found < needed {
        let here = match found {
            0 => "none was found here".to_string(),
            1 => "only 1 was found here".to_string(),
            k => format!("only {k} were found here"),
        };
        return Err(refuse(format!(
            "its {nblocks} row blocks need {needed} GPUs and {here}"
        )));
    }
    let mut opened: Vec<Option<autopcg_gpu::GpuDevice>> = vec![None; needed];
    let mut devices = Vec::with_capacity(nblocks);
    for &o in &ordinals {
        if opened[o].is_none() {
            let dev = crate::device::open_gpu(o).map_err(|why| refuse(format!("here: {why}")))?;
            let props = dev.props();
            if saved.check_device(props).is_err() {
                return Err(refuse(format!(
                    "GPU {o} is {} (sm_{})",
                    props.name,
                    props.arch()
                )));
            }
            opened[o] = Some(dev);
        }
        devices.extend(opened[o].clone());
    }
    Ok(Placement {
        nblocks,
        devices: Some(devices),
        ordinals,
        gpu_count: None,
    })
}

/// A solve split into row blocks, prepared once ([`BlockExec::prepare`]): the placement, the
/// split and every block's sub-plan, and on GPUs the block backend, which later solves reuse
/// (the right-hand side and initial guess are copied into it). On the CPU the blocks are built
/// at every solve.
pub(crate) struct BlockExec {
    kind: PrecondKind,
    params: PcgParams,
    check_every: usize,
    partition: RowPartition,
    plans: Option<autopcg_generator::blocks::BlockPlans>,
    balance: Option<autopcg_solver::blocks::BalanceReport>,
    /// A saved plan's blocks, run as saved instead of `plans` ([`BlockExec::from_saved`]).
    #[cfg(feature = "gpu")]
    saved: Option<SavedBlocks>,
    placed: Placement,
    notes: Vec<String>,
    /// What preparing cost.
    setup: SetupTimes,
    /// The split's report (made by the first backend built).
    report: Option<BlockReport>,
    #[cfg(feature = "gpu")]
    backend: Option<Box<autopcg_solver::blocks::gpu::BlockGpuBackend>>,
    /// Whether backends are built to take new values on the device: `Some(true)` from the
    /// first value update on (until then nothing is kept for it), `Some(false)` once a backend
    /// could not (a block operand kept in COO: the plans are kept, so no later one can).
    #[cfg(feature = "gpu")]
    value_updates: Option<bool>,
}

impl BlockExec {
    /// Places the blocks (`s.nblocks` of them, or one per GPU with `s.gpus`), checks the
    /// matrix, splits and plans it, and on GPUs builds the block backend.
    pub(crate) fn prepare(s: &BlockSettings) -> Result<BlockExec, SolveFailure> {
        let a = s.a;
        let mut notes = Vec::new();
        let placed = place(s, &mut notes)?;
        let nblocks = placed.nblocks;
        let mut check_ms = 0.0;
        if s.check_symmetry {
            let tc = Instant::now();
            a.check_symmetric(SYMMETRY_TOLERANCE).map_err(Error::from)?;
            check_ms = tc.elapsed().as_secs_f64() * 1e3;
        }
        let kind = s.precond.resolved_for(a);
        let mut params = s.params.clone();
        // On GPUs the host polls every GPU_CHECK_EVERY iterations by default, as an unsplit
        // GPU solve does: a poll is a synchronisation of every block's stream.
        #[cfg(feature = "gpu")]
        let default_every = if placed.devices.is_some() {
            autopcg_generator::GPU_CHECK_EVERY
        } else {
            autopcg_generator::CPU_CHECK_EVERY
        };
        #[cfg(not(feature = "gpu"))]
        let default_every = autopcg_generator::CPU_CHECK_EVERY;
        let check_every = s
            .check_every
            .or(params.check_every)
            .unwrap_or(default_every);
        params.check_every = Some(check_every);
        let tp = Instant::now();
        #[cfg(feature = "gpu")]
        let target = match &placed.devices {
            Some(d) => autopcg_generator::Target::Gpu(d[0].props().clone()),
            None => autopcg_generator::Target::Cpu {
                threads: rayon::current_num_threads(),
            },
        };
        #[cfg(not(feature = "gpu"))]
        let target = autopcg_generator::Target::Cpu {
            threads: rayon::current_num_threads(),
        };
        // The model of the GPU the blocks run on (GPUs of one kind). A named model file must load
        // whatever the device, as for an unsplit solve, so that a mistyped path never passes.
        #[cfg(feature = "gpu")]
        let model = {
            let name = placed.devices.as_ref().map(|d| d[0].props().name.clone());
            let r = crate::models::resolve_model(&s.model, name.as_deref())?;
            notes.extend(r.notes);
            r.model.filter(|_| placed.devices.is_some())
        };
        #[cfg(not(feature = "gpu"))]
        if let crate::ModelChoice::File(p) = &s.model {
            return Err(Error::Unsupported(format!(
                "model file {}: models choose GPU plans, and this build of autopcg has no GPU \
                 support (its `gpu` feature is off)",
                p.display()
            ))
            .into());
        }
        // Sub-plans are what --explain shows and, on a GPU, what each block runs; when they cannot
        // be made the blocks are split by rows and nonzeros and run the fixed rule, and the solve
        // itself reports any error of the matrix (with global row numbers).
        let planned = block_plans(
            s,
            kind,
            nblocks,
            target,
            #[cfg(feature = "gpu")]
            model.as_ref(),
        );
        let (partition, plans, balance) = match planned {
            Ok(b) => {
                let balance = autopcg_solver::blocks::BalanceReport {
                    by: b.balance.by.to_string(),
                    initial_us: b.balance.initial_us,
                    final_us: b.balance.final_us,
                    kept_because: b.balance.kept_because.clone(),
                };
                if b.balance.kept_because.is_none() {
                    notes.push(format!(
                        "rows moved between blocks by the model's predicted time: slowest block \
                         {:.1} -> {:.1} us per iteration",
                        b.balance.initial_us, b.balance.final_us
                    ));
                }
                (b.partition, Some(b.plans), Some(balance))
            }
            Err(e) => {
                notes.push(format!(
                    "no per-block plans ({e}): every block runs the fixed rule"
                ));
                (
                    RowPartition::by_default_costs(a, nblocks).map_err(Error::from)?,
                    None,
                    None,
                )
            }
        };
        let partition_ms = tp.elapsed().as_secs_f64() * 1e3;
        let mut exec = BlockExec::new(
            kind,
            params,
            partition,
            placed,
            notes,
            SetupTimes {
                check_ms,
                select_ms: partition_ms,
                ..SetupTimes::default()
            },
        );
        exec.plans = plans;
        exec.balance = balance;
        Ok(exec.with_backend(a)?)
    }

    /// Runs the saved plan `saved` of several row blocks (named `label` in reports) with
    /// nothing chosen again. The matrix is checked against the plan's fingerprint first (with
    /// `force` a mismatch is only a note), then block `i` is placed on GPU
    /// `saved.blocks[i].gpu` (blocks of one GPU share its handle), which must be present and
    /// be the plan's device; the split, what every block runs, the preconditioner (kind,
    /// order, omega, form) and the polling interval are the plan's. Of `s` only the matrix,
    /// the solver parameters, the device (the CPU is refused) and the symmetry check are used.
    #[cfg(feature = "gpu")]
    pub(crate) fn from_saved(
        s: &BlockSettings,
        saved: &SavedPlan,
        label: &str,
        force: bool,
    ) -> Result<BlockExec, Error> {
        let a = s.a;
        let mut check_ms = 0.0;
        if s.check_symmetry {
            let tc = Instant::now();
            a.check_symmetric(SYMMETRY_TOLERANCE)?;
            check_ms = tc.elapsed().as_secs_f64() * 1e3;
        }
        // The matrix first, before any GPU is opened: a wrong matrix is the more useful
        // message, even where no GPU is present. Hashing the pattern counts as selection.
        let ts = Instant::now();
        let mut notes: Vec<String> = saved
            .check_matrix(a, force)
            .map_err(saved_error)?
            .into_iter()
            .collect();
        if a.nrows() != saved.matrix.n {
            return Err(Error::SavedPlan(SavedPlanError::Invalid(format!(
                "its {} row blocks cover {} rows but this matrix has {}: even with --force, a \
                 plan of several blocks runs only on a matrix of as many rows",
                saved.blocks.len(),
                saved.matrix.n,
                a.nrows()
            ))));
        }
        let partition = saved.partition().map_err(saved_error)?;
        let kind = saved.precond.kind().map_err(saved_error)?;
        let select_ms = ts.elapsed().as_secs_f64() * 1e3;
        let td = Instant::now();
        let placed = place_saved(s.device, saved)?;
        let device_ms = td.elapsed().as_secs_f64() * 1e3;
        notes.push(format!("plan read from {label}: nothing chosen again"));
        let mut params = s.params.clone();
        params.check_every = Some(saved.check_every);
        let mut exec = BlockExec::new(
            kind,
            params,
            partition,
            placed,
            notes,
            SetupTimes {
                check_ms,
                device_ms,
                select_ms,
                ..SetupTimes::default()
            },
        );
        exec.saved = Some(SavedBlocks {
            choices: saved
                .block_choices()
                .into_iter()
                .map(|(local, halo)| BlockGpuChoice { local, halo })
                .collect(),
            steps: saved
                .blocks
                .iter()
                .map(|b| saved_block_steps(b, label))
                .collect(),
            label: label.to_string(),
            model: saved.model.as_ref().map(|m| m.file.clone()),
            predicted_iteration_ms: saved.predicted_ms_per_iteration,
        });
        exec.with_backend(a)
    }

    /// A block solve of `kind` with `params` (its polling interval set) on the blocks of
    /// `partition` placed by `placed`, with nothing built yet and no sub-plans (every block
    /// runs the fixed rule until `plans` or `saved` say otherwise).
    fn new(
        kind: PrecondKind,
        params: PcgParams,
        partition: RowPartition,
        placed: Placement,
        notes: Vec<String>,
        setup: SetupTimes,
    ) -> BlockExec {
        BlockExec {
            kind,
            check_every: params
                .check_every
                .unwrap_or(autopcg_generator::CPU_CHECK_EVERY),
            params,
            partition,
            plans: None,
            balance: None,
            #[cfg(feature = "gpu")]
            saved: None,
            placed,
            notes,
            setup,
            report: None,
            #[cfg(feature = "gpu")]
            backend: None,
            #[cfg(feature = "gpu")]
            value_updates: None,
        }
    }

    /// On GPUs, builds the block backend (with a zero right-hand side; each solve puts its own
    /// in place) and counts it in the setup; nothing on the CPU.
    #[cfg_attr(not(feature = "gpu"), allow(unused_mut))]
    fn with_backend(mut self, a: &CsrMatrix) -> Result<BlockExec, Error> {
        #[cfg(feature = "gpu")]
        if self.placed.devices.is_some() {
            let t = Instant::now();
            let parts = self.build_gpu(a, &vec![0.0; a.nrows()], None)?;
            self.setup.backend_ms = t.elapsed().as_secs_f64() * 1e3;
            self.setup = self.setup.with_backend_parts(parts);
        }
        #[cfg(not(feature = "gpu"))]
        let _ = a;
        Ok(self)
    }

    /// Builds the block backend for `a` with the right-hand side `b` and initial guess `x0` on
    /// the placed GPUs, each block running its saved choices, or its sub-plan's choices for its
    /// local part and for its halo part (the fixed rules where there is no plan: the fallback
    /// plan of the local part, CSR scalar at 256 threads per block for the halo part). Returns
    /// what it spent on copies, conversions and kernel loading.
    #[cfg(feature = "gpu")]
    fn build_gpu(
        &mut self,
        a: &CsrMatrix,
        b: &[f64],
        x0: Option<&[f64]>,
    ) -> Result<BackendTimes, Error> {
        let Some(devices) = self.placed.devices.as_ref() else {
            return Ok(BackendTimes::default());
        };
        let problem = BlockProblem::new(a, b, &self.kind, &self.params).with_x0(x0);
        let plans = &self.plans;
        let saved = self.saved.as_ref().map(|s| &s.choices);
        let mut report = None;
        let choose = |i: usize, local: &CsrMatrix, pre: &autopcg_solver::Preconditioner| {
            if let Some(c) = saved.and_then(|c| c.get(i)) {
                return c.clone();
            }
            let plan = plans.as_ref().and_then(|p| p.blocks.get(i));
            BlockGpuChoice {
                local: plan.and_then(|p| p.local.gpu.clone()).unwrap_or_else(|| {
                    autopcg_generator::fallback::gpu_choice(local, pre, devices[i].props())
                }),
                halo: plan
                    .and_then(|p| p.halo_method)
                    .unwrap_or_else(|| HaloMethod::fixed(local.nrows())),
            }
        };
        let partition = self.partition.clone();
        let for_updates = self.value_updates == Some(true);
        let backend = autopcg_solver::blocks::gpu::prepare_blocks_gpu_with(
            devices,
            &problem,
            partition,
            choose,
            &mut report,
            for_updates,
        )?;
        if for_updates && !backend.takes_value_updates() {
            self.value_updates = Some(false);
        }
        let parts = backend.setup_times();
        self.backend = Some(Box::new(backend));
        self.set_report(report);
        Ok(parts)
    }

    /// Keeps the split's report, completed with where the blocks run and how they were planned.
    fn set_report(&mut self, report: Option<BlockReport>) {
        let Some(mut r) = report else { return };
        r.devices = self.placed.ordinals.clone();
        r.gpu_count = self.placed.gpu_count.clone();
        r.block_plans = self
            .plans
            .iter()
            .flat_map(|p| p.blocks.iter().map(|b| b.steps()))
            .collect();
        #[cfg(feature = "gpu")]
        if let Some(s) = &self.saved {
            r.block_plans = s.steps.clone();
        }
        r.balance = self.balance.clone();
        if self.report.is_none()
            && matches!(self.kind, PrecondKind::SsorAi { .. })
            && self.placed.nblocks > 1
        {
            self.notes.push(format!(
                "SSOR-AI is built per block on its local part: {} couplings between blocks are \
                 left out of the preconditioner",
                r.precond_dropped_couplings
            ));
        }
        self.report = Some(r);
    }

    /// The preconditioner as applied.
    pub(crate) fn kind(&self) -> PrecondKind {
        self.kind
    }

    /// What preparing cost.
    pub(crate) fn setup(&self) -> SetupTimes {
        self.setup
    }

    /// Notes of the preparation.
    pub(crate) fn notes(&self) -> &[String] {
        &self.notes
    }

    /// The solver parameters of later solves (polling interval resolved).
    pub(crate) fn params(&self) -> &PcgParams {
        &self.params
    }

    /// Replaces the solver parameters of later solves (the polling interval is kept).
    pub(crate) fn set_params(&mut self, mut params: PcgParams) -> Result<(), Error> {
        params.check_every = Some(self.check_every);
        #[cfg(feature = "gpu")]
        if let Some(b) = self.backend.as_mut() {
            b.reserve_iterations(params.max_iter)?;
        }
        self.params = params;
        Ok(())
    }

    /// The model file that chose the saved plan run, if any.
    fn saved_model(&self) -> Option<String> {
        #[cfg(feature = "gpu")]
        return self.saved.as_ref().and_then(|s| s.model.clone());
        #[cfg(not(feature = "gpu"))]
        None
    }

    /// The saved plan's predicted milliseconds per iteration, if it runs one that has them.
    fn saved_prediction(&self) -> Option<f64> {
        #[cfg(feature = "gpu")]
        return self.saved.as_ref().and_then(|s| s.predicted_iteration_ms);
        #[cfg(not(feature = "gpu"))]
        None
    }

    fn on_gpu(&self) -> bool {
        #[cfg(feature = "gpu")]
        return self.placed.devices.is_some();
        #[cfg(not(feature = "gpu"))]
        false
    }

    fn gpus_used(&self) -> usize {
        self.placed.ordinals.iter().max().map_or(0, |m| m + 1)
    }

    /// Where the blocks run, in words.
    pub(crate) fn device(&self) -> String {
        let nblocks = self.placed.nblocks;
        let gpus = self.gpus_used();
        if gpus > 1 {
            format!("gpus 0..{gpus} ({nblocks} row blocks, one per GPU)")
        } else if self.on_gpu() {
            format!("gpu 0 ({nblocks} row blocks on one GPU)")
        } else {
            format!(
                "cpu ({} threads, {nblocks} row blocks)",
                rayon::current_num_threads()
            )
        }
    }

    /// What an iteration runs, step by step (the source names a saved plan it runs).
    pub(crate) fn plan(&self) -> Plan {
        #[cfg_attr(not(feature = "gpu"), allow(unused_mut))]
        let mut plan = if self.on_gpu() {
            #[cfg(feature = "gpu")]
            let graphs = self.backend.as_ref().and_then(|b| b.replays_graphs());
            #[cfg(not(feature = "gpu"))]
            let graphs = None;
            gpu_block_steps(&self.kind, self.placed.nblocks, self.gpus_used(), graphs)
        } else {
            block_steps(
                &self.kind,
                self.placed.nblocks,
                rayon::current_num_threads(),
            )
        };
        #[cfg(feature = "gpu")]
        if let Some(s) = &self.saved {
            plan.source = format!("plan {} ({})", s.label, plan.source);
        }
        plan
    }

    /// New values of the matrix `a` (same pattern, already checked by the caller: finite, every
    /// diagonal entry positive; `stats` their statistics). On GPUs the first update
    /// builds the block backend again from them (split, plans and placement kept), made to
    /// take later values on the device; later updates copy each block's values to its device,
    /// where its operand and preconditioner are made again
    /// ([`autopcg_solver::blocks::gpu::BlockGpuBackend::update_values`]), unless the values
    /// need another scale of the matrix or a block operand is kept in COO (a new backend
    /// then). On the CPU the blocks are built at the next solve anyway. Returns the time it
    /// took. On an error the GPU backend is dropped: the next solve builds it from `a`.
    pub(crate) fn refresh(
        &mut self,
        a: &CsrMatrix,
        stats: &autopcg_solver::ValueStats,
    ) -> Result<SetupTimes, Error> {
        let t = Instant::now();
        #[cfg(feature = "gpu")]
        if self.on_gpu() {
            let updated = match self.backend.as_mut() {
                Some(be) => be.update_values(a, stats),
                None => Ok(None),
            };
            let parts = match updated {
                Ok(Some((precond_ms, parts))) => {
                    let total = t.elapsed().as_secs_f64() * 1e3;
                    return Ok(SetupTimes {
                        precond_ms,
                        backend_ms: (total - precond_ms).max(0.0),
                        ..SetupTimes::default()
                    }
                    .with_backend_parts(parts));
                }
                Ok(None) => {
                    self.value_updates.get_or_insert(true);
                    self.build_gpu(a, &vec![0.0; a.nrows()], None)
                }
                Err(e) => Err(e.into()),
            };
            // A backend left with part of the new values, or with the old ones, must not
            // serve a solve: the next one builds it from `a`.
            let parts = parts.inspect_err(|_| self.backend = None)?;
            return Ok(SetupTimes {
                backend_ms: t.elapsed().as_secs_f64() * 1e3,
                ..SetupTimes::default()
            }
            .with_backend_parts(parts));
        }
        #[cfg(not(feature = "gpu"))]
        let _ = (a, stats);
        Ok(SetupTimes {
            backend_ms: t.elapsed().as_secs_f64() * 1e3,
            ..SetupTimes::default()
        })
    }

    /// Solves `a x = b` from `x0` (zero when `None`) with the prepared blocks.
    pub(crate) fn solve(
        &mut self,
        a: &CsrMatrix,
        b: &[f64],
        x0: Option<&[f64]>,
        progress: impl FnMut(&IterRecord) -> ControlFlow<()>,
    ) -> Result<Solution, SolveFailure> {
        let t0 = Instant::now();
        let mut setup = SetupTimes::default();
        #[cfg(feature = "gpu")]
        let result = if self.on_gpu() {
            let fits = match self.backend.as_mut() {
                Some(be) => be.set_problem(b, x0).map_err(Error::from)?,
                None => false,
            };
            if !fits {
                // A right-hand side of another magnitude: the system is scaled anew.
                let tb = Instant::now();
                let parts = self.build_gpu(a, b, x0)?;
                setup.backend_ms = tb.elapsed().as_secs_f64() * 1e3;
                setup = setup.with_backend_parts(parts);
            }
            setup.rhs_ms = t0.elapsed().as_secs_f64() * 1e3 - setup.backend_ms;
            let be = self
                .backend
                .as_mut()
                .ok_or_else(|| Error::Pcg(PcgError::Backend("no block backend".into())))?;
            autopcg_solver::blocks::gpu::run_blocks_gpu(be, &self.params, progress)
        } else {
            self.solve_cpu(a, b, x0, progress, &mut setup)
        };
        #[cfg(not(feature = "gpu"))]
        let result = self.solve_cpu(a, b, x0, progress, &mut setup);
        let total_ms = t0.elapsed().as_secs_f64() * 1e3;
        let solve_ms = (total_ms - setup.total_ms()).max(0.0);
        let make = |x: Vec<f64>, info| Solution {
            x,
            info,
            device: self.device(),
            setup_ms: setup.total_ms(),
            setup,
            solve_ms,
            plan: self.plan(),
            notes: self.notes.clone(),
            precond_applied: precond_applied(&self.kind).to_string(),
            precond: self.kind,
            model: self.saved_model(),
            explain: Vec::new(),
            predicted_iteration_ms: self.saved_prediction(),
            check_every: self.check_every,
            blocks: self.report.clone(),
        };
        match result {
            Ok(sol) => Ok(make(sol.x, sol.info)),
            Err(f) => {
                let partial = match (f.x, f.error.info()) {
                    (Some(x), Some(info)) => Some(Box::new(make(x, info.clone()))),
                    _ => None,
                };
                Err(SolveFailure {
                    error: Error::Pcg(f.error),
                    partial,
                })
            }
        }
    }

    /// A CPU block solve: the blocks are built (their time is this solve's backend setup).
    fn solve_cpu(
        &mut self,
        a: &CsrMatrix,
        b: &[f64],
        x0: Option<&[f64]>,
        progress: impl FnMut(&IterRecord) -> ControlFlow<()>,
        setup: &mut SetupTimes,
    ) -> Result<autopcg_solver::blocks::BlockSolve, autopcg_solver::SolveFailure> {
        let problem = BlockProblem::new(a, b, &self.kind, &self.params).with_x0(x0);
        let mut report = None;
        let result = solve_blocks_cpu_with(&problem, self.partition.clone(), &mut report, progress);
        setup.backend_ms = report.as_ref().map_or(0.0, |r| r.setup_ms);
        self.set_report(report);
        result
    }
}

fn precond_applied(kind: &PrecondKind) -> &'static str {
    match kind {
        PrecondKind::None => "none",
        PrecondKind::Jacobi => "jacobi",
        PrecondKind::SsorAi { .. } => "ssor-ai-block-local",
    }
}

/// The steps of a multi-block iteration on `gpus` GPUs, per block; `graphs`: the iterations
/// per replayed CUDA graph, when the backend replays them (else kernel by kernel).
fn gpu_block_steps(kind: &PrecondKind, nblocks: usize, gpus: usize, graphs: Option<u32>) -> Plan {
    let on = if gpus > 1 {
        format!("{gpus} GPUs, one block each, halos and dot slots copied between them")
    } else {
        "one GPU".to_string()
    };
    let launched = match graphs {
        Some(k) => format!("whole iterations replayed from CUDA graphs of {k}"),
        None => "kernel by kernel (no CUDA graphs)".to_string(),
    };
    let mut plan = Plan {
        steps: Vec::new(),
        source: format!(
            "{nblocks} row blocks on {on}, each block's local part by its sub-plan; {launched}"
        ),
    };
    let cfg = format!("{nblocks} blocks");
    plan.push("update", "-", "cg_update per block", cfg.clone(), None);
    let pkernel = match kind {
        PrecondKind::None => "none",
        PrecondKind::Jacobi => "jacobi",
        PrecondKind::SsorAi { .. } => "ssor-ai-block-local",
    };
    plan.push("precond", "-", pkernel, cfg.clone(), None);
    let copies = if gpus > 1 {
        "gather_f64 + peer copies on a second stream, overlapping the local SpMV"
    } else {
        "gather_f64 + device copies"
    };
    plan.push("halo", "packed", copies, cfg.clone(), None);
    plan.push(
        "spmv",
        "local (sub-plan) + halo (csr, sub-plan)",
        "per block",
        cfg.clone(),
        None,
    );
    plan.push("dots", "-", "dot3_slot + dot3_slots_advance", cfg, None);
    plan
}

/// The steps of a multi-block CPU iteration.
fn block_steps(kind: &PrecondKind, nblocks: usize, threads: usize) -> Plan {
    let mut plan = Plan {
        steps: Vec::new(),
        source: format!("{nblocks} row blocks, fixed CPU kernels"),
    };
    let cfg = format!("{nblocks} blocks on {threads} CPU threads");
    plan.push("update", "-", "cpu_cg_update_fused", cfg.clone(), None);
    let (pformat, pkernel) = match kind {
        PrecondKind::None => ("-", "none"),
        PrecondKind::Jacobi => ("diagonal", "jacobi"),
        PrecondKind::SsorAi { .. } => ("csr (K, K^T) per block", "ssor-ai-block-local"),
    };
    plan.push("precond", pformat, pkernel, cfg.clone(), None);
    plan.push("halo", "packed", "in_process_copy", cfg.clone(), None);
    plan.push(
        "spmv+dots",
        "csr local + halo",
        "cpu_block_spmv_dots",
        cfg.clone(),
        None,
    );
    plan.push("allreduce", "-", "in_process_sum", cfg, None);
    plan
}
