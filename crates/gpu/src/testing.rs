//! How GPU and NVRTC tests get what they need, or are reported as ignored.
//!
//! Test files with GPU tests are built with `harness = false` and end in [`crate::test_main!`], which
//! lists every test of the file once, by what it needs (nothing, NVRTC, a device, a device and
//! cuSPARSE), and runs them through `libtest-mimic` (a dev-dependency of every crate with GPU
//! tests), so the binaries take libtest's flags (`--list`, a filter, `--exact`, `--ignored`,
//! `--include-ignored`, `--test-threads`, `--nocapture`).
//!
//! When what a test needs is missing here, the test is marked ignored, and the binary says once
//! why; with `AUTOPCG_REQUIRE_GPU=1` it runs instead and fails with that reason, so a GPU host
//! cannot pass its tests by skipping them. A test run although ignored (`--include-ignored`)
//! on a machine without what it needs is reported ignored, with the reason, unless
//! `AUTOPCG_REQUIRE_GPU=1`.
use std::collections::BTreeMap;

use crate::cusparse::cusparse_available;
use crate::probe::{gpu_available, gpu_required, nvrtc_version, REQUIRE_GPU_ENV};
use crate::{DeviceProps, GpuDevice};

/// What a test needs from the machine to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Needs {
    /// Nothing: a CPU test that lives in a GPU test file.
    Nothing,
    /// NVRTC only (compiling kernels without a GPU).
    Nvrtc,
    /// CUDA device 0.
    Device,
    /// CUDA device 0 and cuSPARSE.
    DeviceAndCusparse,
    /// Two CUDA devices or more (device 0 is handed to the test).
    TwoDevices,
}

impl Needs {
    /// Why this need is not met on this machine; `None` when it is. Probes are cached by the
    /// probe module, so asking again is cheap; a present device is not opened.
    pub fn missing(self) -> Option<String> {
        match self {
            Needs::Nothing => None,
            Needs::Nvrtc => nvrtc_version()
                .err()
                .map(|e| format!("NVRTC does not load: {e}")),
            Needs::Device => {
                if gpu_available() {
                    None
                } else {
                    // Fails at once without a device (no context is created).
                    Some(match GpuDevice::open(0) {
                        Err(e) => format!("no CUDA device: {e}"),
                        Ok(_) => "no CUDA device".into(),
                    })
                }
            }
            Needs::DeviceAndCusparse => Needs::Device.missing().or_else(|| {
                cusparse_available()
                    .err()
                    .map(|e| format!("cuSPARSE does not load: {e}"))
            }),
            Needs::TwoDevices => Needs::Device.missing().or_else(|| {
                let n = GpuDevice::discover().map_or(0, |d| d.len());
                (n < 2).then(|| format!("{n} CUDA device here; the test needs two"))
            }),
        }
    }

    /// Whether a missing need is ignored even under `AUTOPCG_REQUIRE_GPU=1`: a GPU host with
    /// one GPU runs every one-GPU test, and cannot run those that need two (without any GPU
    /// they still fail under the variable, as every GPU test does).
    fn exempt_from_require(self) -> bool {
        self == Needs::TwoDevices && Needs::Device.missing().is_none()
    }
}

/// The body of a test: plain, or given a freshly opened device 0.
#[derive(Clone, Copy)]
enum Body {
    Plain(fn()),
    Device(fn(GpuDevice)),
}

/// One test of a GPU test binary: its name, what it needs, whether the source marks it
/// ignored (like `#[ignore]`), and its body.
#[derive(Clone, Copy)]
pub struct TestCase {
    name: &'static str,
    needs: Needs,
    ignored: bool,
    body: Body,
}

impl TestCase {
    /// A test that needs nothing from the machine.
    pub fn cpu(name: &'static str, body: fn()) -> TestCase {
        TestCase {
            name,
            needs: Needs::Nothing,
            ignored: false,
            body: Body::Plain(body),
        }
    }

    /// A test that needs NVRTC (no GPU).
    pub fn nvrtc(name: &'static str, body: fn()) -> TestCase {
        TestCase {
            needs: Needs::Nvrtc,
            ..TestCase::cpu(name, body)
        }
    }

    /// A test given device 0, opened for it alone.
    pub fn gpu(name: &'static str, body: fn(GpuDevice)) -> TestCase {
        TestCase {
            name,
            needs: Needs::Device,
            ignored: false,
            body: Body::Device(body),
        }
    }

    /// A test given device 0 that also needs cuSPARSE.
    pub fn gpu_cusparse(name: &'static str, body: fn(GpuDevice)) -> TestCase {
        TestCase {
            needs: Needs::DeviceAndCusparse,
            ..TestCase::gpu(name, body)
        }
    }

    /// A test given device 0 that needs a second GPU too (it opens it itself); ignored on a
    /// host with one GPU, also under `AUTOPCG_REQUIRE_GPU=1`.
    pub fn gpus2(name: &'static str, body: fn(GpuDevice)) -> TestCase {
        TestCase {
            needs: Needs::TwoDevices,
            ..TestCase::gpu(name, body)
        }
    }

    /// A GPU test that runs only when asked for (`--ignored`), like `#[ignore]`: a long
    /// measurement.
    pub fn gpu_ignored(name: &'static str, body: fn(GpuDevice)) -> TestCase {
        TestCase {
            ignored: true,
            ..TestCase::gpu(name, body)
        }
    }

    /// The test's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// What the test needs.
    pub fn needs(&self) -> Needs {
        self.needs
    }

    /// Runs the test: [`Ran::Completed`] when it ran (a failed assertion panics, and the
    /// harness reports the panic as this test's failure), [`Ran::Ignored`] when what it needs
    /// is missing and `AUTOPCG_REQUIRE_GPU` is not 1, `Err` saying what is missing when it is 1.
    pub fn run(self) -> Result<Ran, String> {
        if let Some(why) = self.needs.missing() {
            if self.needs.exempt_from_require() {
                return Ok(Ran::Ignored(why));
            }
            return unmet(why);
        }
        match self.body {
            Body::Plain(f) => f(),
            Body::Device(f) => match GpuDevice::open(0) {
                Ok(dev) => f(dev),
                Err(e) => return unmet(format!("CUDA device 0 does not open: {e}")),
            },
        }
        Ok(Ran::Completed)
    }
}

/// How a test that did not fail ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ran {
    /// It ran to the end.
    Completed,
    /// It did not run: what it needs is missing here (the reason).
    Ignored(String),
}

/// A test's need is missing (`why`): ignored, or a failure under `AUTOPCG_REQUIRE_GPU=1`.
fn unmet(why: String) -> Result<Ran, String> {
    if gpu_required() {
        Err(format!("{REQUIRE_GPU_ENV}=1 but {why}"))
    } else {
        Ok(Ran::Ignored(why))
    }
}

/// Decides, once per binary, which tests are ignored: those the source marks ignored, and
/// (unless `AUTOPCG_REQUIRE_GPU=1`) those whose needs are missing here. Unless `listing`, it
/// prints on stderr one line per reason saying why and how many of the tests that `selected`
/// keeps (the command line's filters) it ignores. Returns every case with its ignored flag,
/// sorted by name as libtest sorts its tests.
pub fn plan(
    mut cases: Vec<TestCase>,
    listing: bool,
    selected: impl Fn(&'static str) -> bool,
) -> Vec<(TestCase, bool)> {
    cases.sort_by_key(|c| c.name);
    let required = gpu_required();
    let mut missing: BTreeMap<Needs, Option<String>> = BTreeMap::new();
    // How many tests each reason ignores (a device missing counts once, whatever else a test
    // needs besides).
    // Keyed also by whether AUTOPCG_REQUIRE_GPU would make them fail (not for a test that
    // needs two GPUs on a host with one).
    let mut ignored_for: BTreeMap<(String, bool), usize> = BTreeMap::new();
    let planned: Vec<(TestCase, bool)> = cases
        .into_iter()
        .map(|c| {
            let why = missing.entry(c.needs).or_insert_with(|| c.needs.missing());
            let lacking = why.is_some() && (!required || c.needs.exempt_from_require());
            if lacking && !c.ignored && selected(c.name) {
                if let Some(why) = why {
                    let exempt = c.needs.exempt_from_require();
                    *ignored_for.entry((why.clone(), exempt)).or_default() += 1;
                }
            }
            (c, c.ignored || lacking)
        })
        .collect();
    if !listing {
        for ((why, exempt), n) in ignored_for {
            let then = if exempt {
                format!(
                    "{} on a host with two GPUs",
                    if n == 1 { "it runs" } else { "they run" }
                )
            } else {
                format!("set {REQUIRE_GPU_ENV}=1 to fail instead")
            };
            eprintln!(
                "note: {n} test{} ignored: {why}; {then}",
                if n == 1 { "" } else { "s" }
            );
        }
    }
    planned
}

/// Defines `main` for a test file built with `harness = false`: lists each test once under
/// what it needs and runs them with `libtest-mimic` (which must be a dev-dependency of the
/// crate). The kinds are the [`TestCase`] constructors: `cpu` and `nvrtc` take `fn()`, `gpu`,
/// `gpu_cusparse`, `gpus2` and `gpu_ignored` take `fn(GpuDevice)`.
///
/// ```text
/// autopcg_gpu::test_main! {
///     cpu: [probing_never_panics],
///     gpu: [memory_round_trips, timer_and_time_kernel],
/// }
/// ```
#[macro_export]
macro_rules! test_main {
    ($($kind:ident: [$($test:ident),* $(,)?]),* $(,)?) => {
        fn main() -> ::std::process::ExitCode {
            use ::libtest_mimic::{Arguments, Completion, Trial};
            use $crate::testing::{plan, Ran, TestCase};
            let cases = ::std::vec![$($(TestCase::$kind(::std::stringify!($test), $test),)*)*];
            let args = Arguments::from_args();
            // Whether the command line's filters keep the test called `name`.
            let selected =
                |name: &'static str| !args.is_filtered_out(&Trial::test(name, || Ok(())));
            let trials = plan(cases, args.list, selected)
                .into_iter()
                .map(|(case, ignored)| {
                    Trial::ignorable_test(case.name(), move || match case.run() {
                        Ok(Ran::Completed) => Ok(Completion::Completed),
                        Ok(Ran::Ignored(why)) => Ok(Completion::ignored_with(why)),
                        Err(msg) => Err(msg.into()),
                    })
                    .with_ignored_flag(ignored)
                })
                .collect();
            ::libtest_mimic::run(&args, trials).exit_code()
        }
    };
}

/// Properties of an H100-like device (132 SMs, compute capability 9.0), for CPU tests of launch
/// rules and plans that need a [`DeviceProps`] without a GPU.
pub fn hopper_like_props() -> DeviceProps {
    DeviceProps::hopper_like()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    static CPU_RUNS: AtomicUsize = AtomicUsize::new(0);

    fn counts() {
        CPU_RUNS.fetch_add(1, Ordering::SeqCst);
    }

    fn takes_device(_: GpuDevice) {}

    #[test]
    fn plan_sorts_by_name_and_ignores_only_what_cannot_run() {
        let cases = vec![
            TestCase::gpu("b", takes_device),
            TestCase::cpu("a", counts),
            TestCase::gpu_ignored("c", takes_device),
            TestCase::nvrtc("d", counts),
        ];
        let planned = plan(cases, true, |_| true);
        let names: Vec<&str> = planned.iter().map(|(c, _)| c.name()).collect();
        assert_eq!(names, ["a", "b", "c", "d"]);
        let ignored: Vec<bool> = planned.iter().map(|&(_, i)| i).collect();
        let lacks = |n: Needs| n.missing().is_some() && !gpu_required();
        assert_eq!(
            ignored,
            [false, lacks(Needs::Device), true, lacks(Needs::Nvrtc)]
        );
    }

    #[test]
    fn a_gpu_test_without_a_device_is_ignored_or_fails_when_one_is_required() {
        let r = TestCase::gpu("g", takes_device).run();
        match Needs::Device.missing() {
            None => assert_eq!(r, Ok(Ran::Completed)),
            Some(why) if gpu_required() => {
                assert_eq!(r, Err(format!("{REQUIRE_GPU_ENV}=1 but {why}")))
            }
            Some(why) => assert_eq!(r, Ok(Ran::Ignored(why))),
        }
    }

    #[test]
    fn a_two_gpu_test_is_ignored_on_one_gpu_even_when_gpus_are_required() {
        let r = TestCase::gpus2("g2", takes_device).run();
        let devices = GpuDevice::discover().map_or(0, |d| d.len());
        match (Needs::Device.missing(), devices) {
            // No GPU: as every GPU test.
            (Some(why), _) if gpu_required() => {
                assert_eq!(r, Err(format!("{REQUIRE_GPU_ENV}=1 but {why}")))
            }
            (Some(why), _) => assert_eq!(r, Ok(Ran::Ignored(why))),
            // One GPU: ignored, whatever AUTOPCG_REQUIRE_GPU says.
            (None, 1) => assert_eq!(
                r,
                Ok(Ran::Ignored(
                    "1 CUDA device here; the test needs two".to_string()
                ))
            ),
            (None, _) => assert_eq!(r, Ok(Ran::Completed)),
        }
        let planned = plan(vec![TestCase::gpus2("g2", takes_device)], true, |_| true);
        let exempt = Needs::Device.missing().is_none() && devices < 2;
        let lacking = Needs::TwoDevices.missing().is_some() && !gpu_required();
        assert_eq!(planned[0].1, exempt || lacking);
    }

    #[test]
    fn a_cpu_test_always_runs() {
        let before = CPU_RUNS.load(Ordering::SeqCst);
        assert_eq!(TestCase::cpu("a", counts).run(), Ok(Ran::Completed));
        assert!(CPU_RUNS.load(Ordering::SeqCst) > before);
    }
}
