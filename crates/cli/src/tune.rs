//! `autopcg tune`: the one-time sweep of a GPU (through autopcg-profiler) into a profile, then
//! the model fitted from that profile.
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use autopcg::gpu::GpuDevice;
use autopcg_model::profile::Profile;
use autopcg_model::MeasuredLink;
use autopcg_profiler::run::ASSUMED_BANDWIDTH;
use autopcg_profiler::{
    kernel_table, link_summary, measure_link, open_profile, peer_ordinal, run_sweep, GpuMeasurer,
    LinkOptions, Measurer, Observer, Progress, StageReport, Sweep, SweepOptions,
};

#[derive(Args)]
pub(crate) struct TuneArgs {
    /// Model file to write. Default: models/<gpu>.json when run from the autopcg repository
    /// (a models/ folder or the workspace Cargo.toml in the current folder), else
    /// $XDG_DATA_HOME/autopcg/models/<gpu>.json (~/.local/share/autopcg/models/); a quick tune
    /// writes <gpu>-quick.json instead.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Profile file (JSON lines) the measurements are streamed to. Default: beside the model
    /// file, <gpu>.profile.jsonl (<gpu>-quick.profile.jsonl for a quick tune). An existing
    /// profile of the same GPU is resumed: finished measurements are not repeated.
    #[arg(long)]
    profile: Option<PathBuf>,
    /// A reduced sweep (two thread counts, a few sizes, six small matrices), under a minute:
    /// for trying the tool, not for a model to rely on.
    #[arg(long)]
    quick: bool,
    /// Time the SpMV products launched alone with L2 cold (a read pass over twice the L2
    /// ahead of every sample, which also hides the launch latency) instead of as repeated
    /// calls. An experiment, not the default: on the H100 the model fitted that way chose
    /// worse on the held-out matrices. A profile resumed with it measures its matrices again
    /// and is read by the L2-cold records from then on.
    #[arg(long, conflicts_with = "refit")]
    spmv_l2_cold: bool,
    /// Which GPU (CUDA ordinal).
    #[arg(long, default_value_t = 0)]
    device_ordinal: usize,
    /// Measure nothing: fit the model again from this existing profile (plain or .gz), for
    /// example a committed one, and write it to --out (default: the model path of the
    /// profile's GPU). Needs no GPU. A profile holds no link between GPUs: the link measured
    /// into the model being replaced, if it is a model of the same GPU, is kept.
    #[arg(long, value_name = "PROFILE", conflicts_with_all = ["quick", "profile"])]
    refit: Option<PathBuf>,
    /// Measure only the form stage (SSOR-AI's two forms timed on every benchmark matrix, for
    /// the model's form tree) into the existing --profile of this GPU, then fit the model
    /// from it: for a profile made before the stage existed, or whose stage was interrupted.
    /// Matrices the profile already holds a form record of are not measured again.
    #[arg(long, requires = "profile", conflicts_with_all = ["quick", "refit", "spmv_l2_cold"])]
    forms_only: bool,
}

/// The form stage on the profile at `profile_path` (see [`crate::forms`]), with the model
/// fitted from its records so far; prints its summary line.
fn run_form_stage(dev: &GpuDevice, profile_path: &Path, quick: bool) -> Result<()> {
    let profile = Profile::read(profile_path)?;
    let name = profile_path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let model = autopcg_model::ModelFile::fit(&profile, &name)
        .with_context(|| format!("fitting the models from {}", profile_path.display()))?;
    eprintln!(
        "form stage: SSOR-AI factored and explicit on the profile's {} benchmark matrices, the \
         stage's ladder of sizes and the held-out matrices, the kernels of the model fitted \
         from the profile so far",
        profile.matrices.len()
    );
    let st = crate::forms::form_stage(dev, profile_path, quick, &model, &base_dir()).with_context(
        || {
            format!(
                "the form stage stopped; what it measured is kept in {} and `tune --forms-only \
                 --profile` resumes it",
                profile_path.display()
            )
        },
    )?;
    println!(
        "  {:<9} {:>6} measured {:>6} resumed {:>4} skipped  {:>10}",
        "form",
        st.measured,
        st.resumed,
        st.skipped,
        fmt_dur(Duration::from_secs_f64(st.elapsed_s))
    );
    Ok(())
}

/// Fits the performance models from the profile at `profile_path` and writes the model file,
/// with the measured `link` between the host's GPUs if any, to `model_path`; returns a
/// one-line summary of the fit.
pub(crate) fn fit_and_write_model(
    profile_path: &Path,
    model_path: &Path,
    link: Option<MeasuredLink>,
) -> Result<String> {
    let profile = Profile::read(profile_path)?;
    let name = profile_path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let t = std::time::Instant::now();
    let mut model = autopcg_model::ModelFile::fit(&profile, &name)
        .with_context(|| format!("fitting the models from {}", profile_path.display()))?;
    model.link = link;
    model.save(model_path)?;
    let q = &model.quality;
    let pct = |x: Option<f64>| x.map_or_else(|| "-".to_string(), |v| format!("{:.1}%", 100.0 * v));
    Ok(format!(
        "fitted in {:.1} s: {} SpMV candidates{} (in-sample median error {}, p90 {}), vector trees \
         {:.0}% and reduction trees {:.0}% within 3% of the best on held-out sizes{}; {}",
        t.elapsed().as_secs_f64(),
        model.spmv.candidates.len(),
        match model.spmv.replayed.len() {
            0 => String::new(),
            r => format!(" and {r} for products replayed in graphs"),
        },
        pct(q.spmv_in_sample_median),
        pct(q.spmv_in_sample_p90),
        100.0 * q.vector_held_out.share_within,
        100.0 * q.dot_held_out.share_within,
        if model.classifier.is_some() {
            ", classifier fitted"
        } else {
            ", no classifier"
        },
        match &model.epilogue {
            Some(e) => format!(
                "epilogue lines for {} kernel launches, {} costs per entry from the wide band \
                 (held out: fused time within {} median, {} at most; the fuse-or-not decision \
                 right at {} of {} points, {} of {} on the wide band)",
                e.lines.len(),
                e.per_entry.len(),
                pct(Some(e.held_out.median_rel_err)),
                pct(Some(e.held_out.max_rel_err)),
                e.held_out.decisions_agreeing,
                e.held_out.decisions,
                e.held_out_wide.decisions_agreeing,
                e.held_out_wide.decisions
            ),
            None => "no epilogue stage in the profile (the dots are fused by the rule)".into(),
        }
    ))
}

/// True when `dir` holds the Cargo.toml of a workspace.
fn is_workspace_root(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join("Cargo.toml")).is_ok_and(|t| t.contains("[workspace]"))
}

/// The folder model files go to by default (see [`TuneArgs::out`]).
fn default_model_dir() -> Result<PathBuf> {
    let cwd = std::env::current_dir().context("reading the current folder")?;
    model_dir_for(
        &cwd,
        std::env::var_os("XDG_DATA_HOME"),
        std::env::var_os("HOME"),
    )
}

/// [`default_model_dir`] for the current folder `cwd` and the values of `XDG_DATA_HOME` and
/// `HOME`.
fn model_dir_for(
    cwd: &Path,
    xdg_data_home: Option<std::ffi::OsString>,
    home: Option<std::ffi::OsString>,
) -> Result<PathBuf> {
    if cwd.join("models").is_dir() || is_workspace_root(cwd) {
        return Ok(cwd.join("models"));
    }
    let data = xdg_data_home
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| home.map(|h| PathBuf::from(h).join(".local/share")))
        .ok_or_else(|| {
            anyhow!("neither XDG_DATA_HOME nor HOME is set: give the model file with --out")
        })?;
    Ok(data.join("autopcg").join("models"))
}

/// The repository root (the closest folder upwards with the workspace Cargo.toml), which the
/// file paths of benchmark recipes are relative to; the current folder when there is none.
pub(crate) fn base_dir() -> PathBuf {
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    cwd.ancestors()
        .find(|d| is_workspace_root(d))
        .map_or_else(|| cwd.clone(), Path::to_path_buf)
}

fn create_parent(p: &Path) -> Result<()> {
    if let Some(d) = p.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(d).with_context(|| format!("creating folder {}", d.display()))?;
    }
    Ok(())
}

fn fmt_dur(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s < 60.0 {
        format!("{s:.1} s")
    } else {
        let m = (s / 60.0).floor();
        format!("{m:.0} min {:.0} s", s - 60.0 * m)
    }
}

fn gib(b: u64) -> String {
    format!("{:.2} GiB", b as f64 / (1u64 << 30) as f64)
}

/// Progress on stderr: a bar per stage on a terminal, otherwise a plain line every 10 seconds
/// and one per finished stage.
pub(crate) struct Display {
    bar: Option<ProgressBar>,
    stage: String,
    interactive: bool,
    last_line: Instant,
}

impl Display {
    pub(crate) fn new() -> Display {
        Display {
            bar: None,
            stage: String::new(),
            interactive: std::io::stderr().is_terminal(),
            last_line: Instant::now(),
        }
    }

    fn eta(d: Option<Duration>) -> String {
        d.map_or_else(|| "?".into(), fmt_dur)
    }

    pub(crate) fn finish(&mut self) {
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
    }
}

impl Observer for Display {
    fn progress(&mut self, p: &Progress<'_>) {
        let msg = format!(
            "{} | stage {} left | sweep {} elapsed, {} left",
            p.current,
            Display::eta(p.stage_eta),
            fmt_dur(p.elapsed),
            Display::eta(p.eta)
        );
        if self.stage != p.stage {
            self.finish();
            self.stage = p.stage.to_string();
            if self.interactive {
                let style =
                    ProgressStyle::with_template("{prefix:>9} [{bar:30}] {pos}/{len} {wide_msg}")
                        .map(|s| s.progress_chars("=> "))
                        .unwrap_or_else(|_| ProgressStyle::default_bar());
                let bar = ProgressBar::with_draw_target(
                    Some(p.total as u64),
                    ProgressDrawTarget::stderr(),
                )
                .with_style(style)
                .with_prefix(p.stage.to_string());
                self.bar = Some(bar);
            } else {
                eprintln!("{}: {} items", p.stage, p.total);
                self.last_line = Instant::now();
            }
        }
        match &self.bar {
            Some(b) => {
                b.set_position(p.done as u64);
                b.set_message(msg);
            }
            None => {
                if self.last_line.elapsed() >= Duration::from_secs(10) {
                    eprintln!("{}: {}/{} {msg}", p.stage, p.done, p.total);
                    self.last_line = Instant::now();
                }
            }
        }
    }

    fn note(&mut self, msg: &str) {
        match &self.bar {
            Some(b) => b.println(format!("note: {msg}")),
            None => eprintln!("note: {msg}"),
        }
    }

    fn stage_done(&mut self, r: &StageReport) {
        self.finish();
        self.stage.clear();
        let disturbed = match (r.retimed, r.disturbed_kept) {
            (0, 0) => String::new(),
            (t, 0) => format!("; {t} timed again after a disturbance"),
            (t, k) => format!("; {t} timed again after a disturbance, {k} kept disturbed"),
        };
        eprintln!(
            "{}: {} measured, {} resumed, {} skipped in {}{disturbed}",
            r.stage,
            r.measured,
            r.resumed,
            r.skipped,
            fmt_dur(r.elapsed)
        );
    }
}

/// The link between the tuned GPU `dev` and the lowest other GPU, when the driver reports
/// several: a progress line on stderr and the result on stdout. `None` with one GPU (a line
/// says so), or when the measurement failed (a note says why): the model then has no link and
/// `--gpus auto` uses the default figures.
fn measure_host_link(dev: &GpuDevice) -> Option<MeasuredLink> {
    let not_measured = |why: String| {
        eprintln!("link: not measured ({why}); --gpus auto will use the default figures");
        None
    };
    let count = match GpuDevice::discover() {
        Ok(d) => d.len(),
        Err(e) => return not_measured(format!("listing the GPUs failed: {e}")),
    };
    let Some(peer) = peer_ordinal(dev.ordinal(), count) else {
        return not_measured("one GPU".into());
    };
    eprintln!(
        "link: measuring GPU {} <- GPU {peer} ({count} GPUs): peer copies and the dot all-gather",
        dev.ordinal()
    );
    let measured = GpuDevice::open(peer)
        .map_err(autopcg_profiler::ProfilerError::from)
        .and_then(|p| measure_link(dev, &p, count, &LinkOptions::default()));
    match measured {
        Ok(l) => {
            println!("{}", link_summary(&l));
            Some(l)
        }
        Err(e) => not_measured(format!("the measurement failed: {e}")),
    }
}

/// The measured link of the model file at `path`, when there is one and it is a model of
/// `device` (by name and compute capability); `None` otherwise, a file that does not load
/// included (it is about to be replaced).
fn kept_link(path: &Path, device: &autopcg::catalog::DeviceProps) -> Option<MeasuredLink> {
    let old = autopcg_model::ModelFile::load(path).ok()?;
    (old.device.name == device.name && old.device.compute_capability == device.compute_capability)
        .then_some(old.link)
        .flatten()
}

pub(crate) fn tune(a: TuneArgs) -> Result<()> {
    if let Some(profile) = &a.refit {
        let p = Profile::read(profile)?;
        let spec = p
            .device()
            .ok_or_else(|| anyhow!("{}: the profile has no header", profile.display()))?;
        let model_path = match &a.out {
            Some(o) => o.clone(),
            None => default_model_dir()?.join(format!("{}.json", spec.slug())),
        };
        autopcg::sparse::io::check_output(&model_path, [profile])?;
        create_parent(&model_path)?;
        // Nothing is measured. The link between the host's GPUs is not in a profile: the one
        // measured into the model being replaced (of the same GPU) is kept; otherwise the
        // model has none (`--gpus auto` uses the default figures).
        let link = kept_link(&model_path, spec);
        match &link {
            Some(l) => println!(
                "link: kept from {}: {}",
                model_path.display(),
                link_summary(l)
            ),
            None => {
                println!("link: none (no model of this GPU with a measured link at the output)")
            }
        }
        let summary = fit_and_write_model(profile, &model_path, link)?;
        println!("{summary}");
        println!("model written to {}", model_path.display());
        return Ok(());
    }
    let t0 = Instant::now();
    let dev = crate::common::open_gpu(a.device_ordinal)?;
    if a.forms_only {
        let profile_path = a.profile.clone().unwrap_or_default();
        if profile_path.extension().is_some_and(|e| e == "gz") {
            bail!(
                "{}: the form stage appends to the profile, which must be a plain JSON-lines \
                 file (decompress it first: gunzip -k)",
                profile_path.display()
            );
        }
        let p = Profile::read(&profile_path)?;
        let header = p
            .header
            .as_ref()
            .ok_or_else(|| anyhow!("{}: the profile has no header", profile_path.display()))?;
        if header.device.name != dev.props().name {
            bail!(
                "{} is a profile of {}, and GPU {} is {}",
                profile_path.display(),
                header.device.name,
                a.device_ordinal,
                dev.props().name
            );
        }
        let model_path = match &a.out {
            Some(o) => o.clone(),
            None => default_model_dir()?.join(format!("{}.json", header.device.slug())),
        };
        autopcg::sparse::io::check_output(&model_path, [&profile_path])?;
        create_parent(&model_path)?;
        run_form_stage(&dev, &profile_path, header.quick)?;
        let link = kept_link(&model_path, &header.device);
        let summary = fit_and_write_model(&profile_path, &model_path, link)?;
        println!("{summary}");
        println!("model written to {}", model_path.display());
        return Ok(());
    }
    let mut m = GpuMeasurer::new(&dev);
    let spec = m.device().clone();
    let slug = if a.quick {
        format!("{}-quick", spec.slug())
    } else {
        spec.slug()
    };
    let model_path = match &a.out {
        Some(p) => p.clone(),
        None => default_model_dir()?.join(format!("{slug}.json")),
    };
    let profile_path = match &a.profile {
        Some(p) => p.clone(),
        None => model_path
            .parent()
            .unwrap_or_else(|| Path::new(""))
            .join(format!("{slug}.profile.jsonl")),
    };
    autopcg::sparse::io::check_output(&model_path, [&profile_path])?;
    create_parent(&model_path)?;
    create_parent(&profile_path)?;
    let mut opts = SweepOptions::new(a.quick, base_dir());
    opts.spmv_l2_cold = a.spmv_l2_cold;
    let mut writer = open_profile(&profile_path, &spec, a.quick)?;
    eprintln!(
        "tuning {} (GPU {}, {}){}: profile {}",
        spec.name,
        a.device_ordinal,
        if a.quick { "quick sweep" } else { "full sweep" },
        if writer.resumed() > 0 {
            format!(", resuming {} records", writer.resumed())
        } else {
            String::new()
        },
        profile_path.display()
    );
    let mut display = Display::new();
    let result = (|| {
        m.prepare()?;
        let table = kernel_table(&mut m, &opts)?;
        let sweep = Sweep::plan(&spec, &opts, &table)?;
        let c = sweep.counts();
        let est = sweep.estimate(ASSUMED_BANDWIDTH);
        eprintln!(
            "plan: {} vector updates at {} lengths up to {}, {} reductions at {} lengths up to {}, \
             {} epilogue launches at {} lengths up to {} (the wide band up to {}), {} matrices; \
             about {} at {:.0} TB/s",
            c.vector,
            c.vector_sizes,
            sweep.vector_max_n,
            c.dot,
            c.dot_sizes,
            sweep.dot_max_n,
            c.epilogue,
            c.epilogue_sizes,
            sweep.epilogue_max_n,
            sweep.epilogue_wide_max_n,
            c.matrices,
            fmt_dur(Duration::from_secs_f64(est.total_s())),
            ASSUMED_BANDWIDTH / 1e12
        );
        let report = run_sweep(&mut m, &mut writer, &sweep, &mut display)?;
        Ok::<_, autopcg_profiler::ProfilerError>((sweep, report))
    })();
    display.finish();
    let (sweep, report) = result.with_context(|| {
        format!(
            "the sweep stopped; what it measured is kept in {} and a new run resumes it",
            profile_path.display()
        )
    })?;
    drop(writer);

    println!(
        "tune of {}: {} ({} measured, {} resumed from the profile, {} skipped; {} records written)",
        spec.name,
        fmt_dur(t0.elapsed()),
        report.measured(),
        report.resumed(),
        report.skipped(),
        report.records()
    );
    for s in &report.stages {
        println!(
            "  {:<9} {:>6} measured {:>6} resumed {:>4} skipped  {:>10}  peak memory {}{}",
            s.stage,
            s.measured,
            s.resumed,
            s.skipped,
            fmt_dur(s.elapsed),
            gib(s.peak_device_bytes),
            if s.peak_estimated { " (estimated)" } else { "" }
        );
    }
    println!(
        "peak device memory in use: {} ({} before the sweep; budget {} = {} of {})",
        gib(report.peak_device_bytes),
        gib(report.baseline_device_bytes),
        gib(sweep.memory_budget),
        sweep.options.memory_fraction,
        gib(spec.total_mem)
    );
    // The sweep's buffers go before the form stage's solvers are set up.
    drop(m);
    run_form_stage(&dev, &profile_path, a.quick)?;
    println!("profile written to {}", profile_path.display());
    let link = measure_host_link(&dev);
    let summary = fit_and_write_model(&profile_path, &model_path, link)?;
    println!("{summary}");
    println!("model written to {}", model_path.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_files_go_to_the_repository_or_the_data_folder() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let some = |p: &str| Some(std::ffi::OsString::from(p));
        // Outside a repository: XDG_DATA_HOME when absolute, else HOME/.local/share.
        assert_eq!(
            model_dir_for(d, some("/data"), some("/home/u")).unwrap(),
            Path::new("/data/autopcg/models")
        );
        assert_eq!(
            model_dir_for(d, some("relative"), some("/home/u")).unwrap(),
            Path::new("/home/u/.local/share/autopcg/models")
        );
        assert!(model_dir_for(d, None, None).is_err());
        // The workspace root, or any folder with a models/ folder.
        std::fs::write(d.join("Cargo.toml"), "[workspace]\nmembers = []\n").unwrap();
        assert_eq!(model_dir_for(d, None, None).unwrap(), d.join("models"));
        let sub = d.join("sub");
        std::fs::create_dir_all(sub.join("models")).unwrap();
        assert_eq!(model_dir_for(&sub, None, None).unwrap(), sub.join("models"));
        assert_eq!(fmt_dur(Duration::from_secs(83)), "1 min 23 s");
        assert_eq!(fmt_dur(Duration::from_millis(1500)), "1.5 s");
    }
}
