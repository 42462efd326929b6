//! The emitted host driver run without a GPU: `src/solver.cu` compiled for the host by clang's
//! CUDA mode against a host implementation of the CUDA runtime (tests/support/mock_cuda.cpp:
//! device memory is host memory, graphs replay recorded operations, and each kernel of the
//! pool runs as a sequential host function with the CUDA source's arguments and meaning), linked
//! with the emitted `main.cpp`.
//!
//! This checks what a GPU is not needed for: the driver's Chronopoulos–Gear iteration, polling,
//! history, graph replay, true-residual check and residual replacement, the host-side
//! preconditioner and conversions feeding every format, the C API (setup, solve,
//! update_values, destroy), the fingerprint and device checks, and the JSON of the command.
//! Iteration counts are compared with the Rust CPU solver on the same preconditioner (within
//! 2%; the sums differ in order from the GPU's). It does not check the CUDA kernels
//! themselves (NVRTC compiles them in tests/emit.rs; they run on a GPU host) nor timings.
//!
//! Plans that hand SpMV steps to cuSPARSE run the same way against a host cuSPARSE
//! (tests/support/cusparse.h, implemented in mock_cuda.cpp): the driver's handle, descriptors,
//! buffer and preprocessing, each product captured into the graphs with the right vectors, and
//! new values through the same descriptors. Their solver objects must call cuSPARSE, and those
//! of the other plans must not (checked with `nm` where it runs); the host cusparse.h refuses to
//! be included by a solver whose plan does not use cuSPARSE.
//!
//! Needs clang with CUDA support (clang++, clang++-14 .. 21, or AUTOPCG_TEST_CLANG); without
//! it the tests are reported ignored (failed with AUTOPCG_REQUIRE_TOOLS=1).
mod common;
#[path = "support/cusparse_plans.rs"]
mod cusparse_plans;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use autopcg_generator::emit::{self, plan_files};
use autopcg_generator::saved::SavedPlan;
use autopcg_solver::{PcgParams, PrecondKind};
use autopcg_sparse::CsrMatrix;
use common::harness::{self, Case};
use common::*;
use cusparse_plans::cusparse_plans;

fn main() -> std::process::ExitCode {
    const CLANG: &str = "clang with CUDA support (clang++, clang++-14 .. 21 or AUTOPCG_TEST_CLANG)";
    harness::run(vec![
        Case::tool(
            "the_emitted_driver_runs_every_plan_like_the_rust_solver",
            CLANG,
            cuda_clang,
            the_emitted_driver_runs_every_plan_like_the_rust_solver,
        ),
        Case::tool(
            "the_emitted_driver_runs_cusparse_plans_like_the_rust_solver",
            CLANG,
            cuda_clang,
            the_emitted_driver_runs_cusparse_plans_like_the_rust_solver,
        ),
        Case::tool(
            "the_emitted_split_driver_runs_like_the_rust_block_solver",
            CLANG,
            cuda_clang,
            the_emitted_split_driver_runs_like_the_rust_block_solver,
        ),
        Case::tool(
            "the_emitted_command_checks_matrix_and_device_and_stops_as_told",
            CLANG,
            cuda_clang,
            the_emitted_command_checks_matrix_and_device_and_stops_as_told,
        ),
    ])
}

fn support() -> PathBuf {
    root().join("crates/generator/tests/support")
}

/// A clang++ that compiles CUDA for the host with the support header, or `None`.
fn cuda_clang() -> Option<String> {
    let tmp = tempfile::tempdir().ok()?;
    let dir = tmp.path();
    let mut names: Vec<String> = std::env::var("AUTOPCG_TEST_CLANG").into_iter().collect();
    names.push("clang++".into());
    names.extend((14..=21).rev().map(|v| format!("clang++-{v}")));
    let probe = dir.join("probe.cu");
    std::fs::write(
        &probe,
        "#include <cuda_runtime.h>\nextern \"C\" __global__ void k(int *p) { p[threadIdx.x] = 1; \
         }\nint main() { k<<<1, 32, 0, nullptr>>>(nullptr); return 0; }\n",
    )
    .ok()?;
    // A full host compile, not a syntax check: the launch stubs of `extern "C"` kernels are
    // only generated then (a clang that cannot pair with the installed CUDA fails there).
    names.into_iter().find(|c| {
        Command::new(c)
            .args(cuda_flags())
            .arg("-I")
            .arg(support())
            .arg("-c")
            .arg("-o")
            .arg(dir.join("probe.o"))
            .arg(&probe)
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

fn cuda_flags() -> [&'static str; 7] {
    [
        "-std=c++17",
        "-x",
        "cuda",
        "--cuda-host-only",
        "-nocudainc",
        "-nocudalib",
        "--cuda-gpu-arch=sm_70",
    ]
}

/// Emits `plan` into `dir` and builds `dir/emu_solve` (the emitted main) and the objects the
/// C API harness links with; returns the objects (solver, mock).
fn build(clang: &str, plan: &SavedPlan, dir: &Path) -> (PathBuf, PathBuf) {
    emit::write(dir, &emit::emit(plan).unwrap()).unwrap();
    let solver_o = dir.join("solver.o");
    check(
        Command::new(clang)
            .args(cuda_flags())
            .args([
                "-O1",
                "-ffp-contract=off",
                "-Wno-unused-function",
                "-c",
                "-o",
            ])
            .arg(&solver_o)
            .arg("-I")
            .arg(support())
            .arg(dir.join("src/solver.cu")),
        "solver.cu",
    );
    let mock_o = dir.join("mock.o");
    check(
        Command::new(clang)
            .args(["-std=c++17", "-O1", "-c", "-o"])
            .arg(&mock_o)
            .arg(format!(
                "-DBLOCK_SIZE_EXPECTED={}",
                plan.choice().dot3.config.threads
            ))
            .arg("-I")
            .arg(dir.join("kernels"))
            .arg(support().join("mock_cuda.cpp")),
        "mock_cuda.cpp",
    );
    check(
        Command::new(clang)
            .args(["-std=c++17", "-O1", "-ffp-contract=off", "-o"])
            .arg(dir.join("emu_solve"))
            .arg(dir.join("src/main.cpp"))
            .arg(&solver_o)
            .arg(&mock_o),
        "main.cpp",
    );
    (solver_o, mock_o)
}

fn run(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(dir.join("emu_solve"));
    c.args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("the emulated solver runs")
}

fn json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    })
}

/// Iterations of the Rust CPU solver with the plan's preconditioner (b = A * ones, tol 1e-8).
fn cpu_iterations(name: &str, plan: &SavedPlan) -> usize {
    let a = fixture(name);
    let kind: PrecondKind = plan.precond.kind().unwrap();
    let b = a.mul_vec(&vec![1.0; a.nrows()]);
    let params = PcgParams::new().with_tol(1e-8).unwrap();
    let (_, info) = autopcg_solver::solve_cpu(&a, &b, None, &kind, &params)
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    info.iterations
}

/// The cuSPARSE functions `object` leaves undefined (to be linked), or `None` without `nm`.
fn cusparse_imports(object: &Path) -> Option<Vec<String>> {
    let nm = find_tool(&["nm", "llvm-nm"])?;
    let o = check(Command::new(nm).arg("-u").arg(object), "nm");
    Some(
        String::from_utf8_lossy(&o.stdout)
            .split_whitespace()
            .filter(|w| w.starts_with("cusparse"))
            .map(str::to_string)
            .collect(),
    )
}

/// Builds every plan of `plans` in its own folder under `tmp` and runs its command on its
/// fixture with `--json`, side by side (each plan's compile and run is serial, and the plans
/// are independent); the outputs and the solver objects, in order.
fn build_and_run_all(
    clang: &str,
    plans: &[(String, SavedPlan)],
    tmp: &Path,
) -> Vec<(Output, PathBuf)> {
    std::thread::scope(|s| {
        let jobs: Vec<_> = plans
            .iter()
            .enumerate()
            .map(|(i, (label, plan))| {
                let dir = tmp.join(format!("p{i}"));
                s.spawn(move || {
                    let (solver_o, _) = build(clang, plan, &dir);
                    let mtx = fixture_path(label.split(' ').next().unwrap_or_default());
                    (run(&dir, &[mtx.to_str().unwrap(), "--json"], &[]), solver_o)
                })
            })
            .collect();
        jobs.into_iter()
            .map(|j| j.join().expect("a plan's build and run"))
            .collect()
    })
}

/// Checks the emulated run `o` of `plan` (labelled as in [`plans`]): converged, the fields of
/// `autopcg solve --json`, and the iterations of the Rust CPU solver within 2%.
fn check_run(label: &str, plan: &SavedPlan, o: &Output) {
    let name = label.split(' ').next().unwrap_or_default().to_string();
    let j = json(o);
    assert_eq!(o.status.code(), Some(0), "{label}: {j}");
    assert_eq!(j["converged"], true, "{label}");
    assert_eq!(j["reason"], "converged", "{label}");
    assert!(
        j["relative_residual"].as_f64().unwrap() <= 1e-8,
        "{label}: {j}"
    );
    assert!(j["error_vs_ones"].as_f64().is_some(), "{label}");
    for k in [
        "iterations",
        "relative_residual",
        "recurrence_relative_residual",
        "read_ms",
        "setup_ms",
        "setup",
        "solve_ms",
        "ms_per_iteration",
        "device",
        "precond",
        "omega",
        "tol",
        "precond_applied",
        "check_every",
        "plan",
        "model",
        "predicted_ms_per_iteration",
        "notes",
    ] {
        assert!(j.get(k).is_some(), "{label}: {k} missing");
    }
    assert_eq!(
        j["precond_applied"],
        plan.precond.applied.as_str(),
        "{label}"
    );
    assert_eq!(
        j["plan"]["steps"].as_array().map(Vec::len),
        Some(plan.block().steps.len()),
        "{label}"
    );
    let got = j["iterations"].as_u64().unwrap() as f64;
    let want = cpu_iterations(&name, plan) as f64;
    assert!(
        (got - want).abs() <= 0.02 * want + 1.0,
        "{label}: {got} iterations, the Rust CPU solver {want}"
    );
    println!("{label}: {got} iterations (Rust CPU {want})");
}

fn the_emitted_driver_runs_every_plan_like_the_rust_solver(clang: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let plans = plans();
    let runs = build_and_run_all(clang, &plans, tmp.path());
    for ((label, plan), (o, solver_o)) in plans.iter().zip(&runs) {
        check_run(label, plan, o);
        // A plan without cuSPARSE calls nothing of it (and does not include cusparse.h: the
        // host one refuses to be); the model may come to hand some of these plans' operands to
        // it.
        let uses = plan_files::uses_cusparse(plan.choice());
        if let Some(imports) = cusparse_imports(solver_o) {
            assert_eq!(imports.is_empty(), !uses, "{label}: {imports:?}");
        }
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(err.contains(" cuSPARSE products"), uses, "{label}: {err}");
    }
}

fn the_emitted_driver_runs_cusparse_plans_like_the_rust_solver(clang: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let plans = cusparse_plans();
    let runs = build_and_run_all(clang, &plans, tmp.path());
    for ((label, plan), (o, solver_o)) in plans.iter().zip(&runs) {
        check_run(label, plan, o);
        if let Some(imports) = cusparse_imports(solver_o) {
            for f in [
                "cusparseCreateCsr",
                "cusparseSpMV_preprocess",
                "cusparseSpMV",
            ] {
                assert!(
                    imports.iter().any(|i| i == f),
                    "{label}: {f} in {imports:?}"
                );
            }
        }
        // The products ran through the host cuSPARSE (graphs replay them).
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(" cuSPARSE products"), "{label}: {err}");
        let j = json(o);
        let kernels = cusparse_plans::step_kernels(&j);
        assert!(
            kernels.iter().any(|k| k.starts_with("cusparse_spmv_")),
            "{label}: {kernels:?}"
        );
    }
    // New values of the same pattern go through the descriptors made at setup (bcsstk01, with
    // A and M by cuSPARSE).
    let (label, plan) = &plans[2];
    assert!(label.starts_with("bcsstk01 "), "{label}");
    let dir = tmp.path().join("update");
    let (solver_o, mock_o) = build(clang, plan, &dir);
    check_update_values(clang, &dir, (&solver_o, &mock_o), &fixture("bcsstk01"), &[]);
}

fn the_emitted_command_checks_matrix_and_device_and_stops_as_told(clang: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let a = fixture("bcsstk01");
    let plan = saved("bcsstk01", &a, ssor(1), true);
    let dir = tmp.path().join("b1");
    let (solver_o, mock_o) = build(clang, &plan, &dir);
    let b1 = fixture_path("bcsstk01");
    let b1 = b1.to_str().unwrap();

    // Another matrix: refused (exit 2, one line naming it), run with --force.
    let other = fixture_path("1138_bus");
    let other = other.to_str().unwrap();
    let o = run(&dir, &[other], &[]);
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("1138_bus.mtx") && err.contains("n = 48"),
        "{err}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    let o = run(&dir, &[other, "--force"], &[]);
    let j = json(&o);
    assert!(
        j["notes"][0]
            .as_str()
            .unwrap()
            .contains("fingerprint check forced"),
        "{j}"
    );

    // Another GPU: refused; the same GPU under a board name: accepted.
    let o = run(
        &dir,
        &[b1],
        &[("MOCK_DEVICE_NAME", "NVIDIA H100 80GB HBM3")],
    );
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("the plan is for NVIDIA H200 (sm_90) but this device is NVIDIA H100"),
        "{err}"
    );
    let o = run(
        &dir,
        &[b1, "--force"],
        &[("MOCK_DEVICE_NAME", "NVIDIA H100 80GB HBM3")],
    );
    assert_eq!(o.status.code(), Some(2), "--force is for the matrix only");
    let o = run(
        &dir,
        &[b1, "--any-device"],
        &[("MOCK_DEVICE_NAME", "NVIDIA H100 80GB HBM3")],
    );
    let j = json(&o);
    assert!(
        j["notes"][0]
            .as_str()
            .unwrap()
            .contains("device check forced"),
        "{j}"
    );
    let o = run(&dir, &[b1], &[("MOCK_DEVICE_NAME", "NVIDIA H200 NVL")]);
    assert_eq!(o.status.code(), Some(0));

    // The iteration limit.
    let o = run(&dir, &[b1, "--max-iter", "5", "--history"], &[]);
    let j = json(&o);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        (j["reason"].as_str(), j["iterations"].as_u64()),
        (Some("max_iter"), Some(5))
    );
    assert_eq!(j["residual_history"].as_array().map(Vec::len), Some(6));
    assert!(j["error"].as_str().is_some());

    // A tolerance below what the true residual can reach: the recurrence meets it, the true
    // residual does not, the residual is replaced, and the solve stops as stagnated (or at the
    // limit) with a true residual no worse than a converged solve's.
    let o = run(&dir, &[b1, "--tol", "1e-17", "--max-iter", "2000"], &[]);
    let j = json(&o);
    assert_eq!(o.status.code(), Some(1), "{j}");
    let reason = j["reason"].as_str().unwrap();
    assert!(reason == "stagnated" || reason == "max_iter", "{j}");
    assert!(j["replacements"].as_u64().unwrap() >= 1, "{j}");
    assert!(j["relative_residual"].as_f64().unwrap() < 1e-12, "{j}");

    check_update_values(clang, &dir, (&solver_o, &mock_o), &a, &[]);
}

/// The C API harness (tests/support/update_values.cpp) linked with the solver in `dir`: a
/// solve with `a`, new values (2 a) for the same pattern, and the same solve again, which must
/// take the same iterations and give the same solution.
fn check_update_values(
    clang: &str,
    dir: &Path,
    (solver_o, mock_o): (&Path, &Path),
    a: &CsrMatrix,
    env: &[(&str, &str)],
) {
    let exe = dir.join("update_values");
    check(
        Command::new(clang)
            .args(["-std=c++17", "-O1", "-o"])
            .arg(&exe)
            .arg("-I")
            .arg(dir.join("include"))
            .arg(support().join("update_values.cpp"))
            .arg(solver_o)
            .arg(mock_o),
        "update_values.cpp",
    );
    let mut bin = Vec::new();
    bin.extend((a.nrows() as u64).to_le_bytes());
    bin.extend((a.indptr().len() as u64).to_le_bytes());
    a.indptr().iter().for_each(|v| bin.extend(v.to_le_bytes()));
    bin.extend((a.indices().len() as u64).to_le_bytes());
    a.indices().iter().for_each(|v| bin.extend(v.to_le_bytes()));
    bin.extend((a.data().len() as u64).to_le_bytes());
    a.data()
        .iter()
        .for_each(|v| bin.extend(v.to_bits().to_le_bytes()));
    let input = dir.join("a.bin");
    std::fs::write(&input, bin).unwrap();
    let mut cmd = Command::new(&exe);
    cmd.arg(&input);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let o = check(&mut cmd, "update_values");
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    let f: Vec<&str> = out.split_whitespace().collect();
    assert_eq!(f.len(), 4, "{out}");
    assert_eq!(f[0], f[1], "the same iterations after the update: {out}");
    assert_eq!(f[2], "1", "the same solution after the update: {out}");
}

/// Iterations of the Rust CPU block solver on `plan`'s blocks with its preconditioner (b = A *
/// ones, tol 1e-8).
fn cpu_block_iterations(name: &str, plan: &SavedPlan) -> usize {
    let a = fixture(name);
    let kind: PrecondKind = plan.precond.kind().unwrap();
    let b = a.mul_vec(&vec![1.0; a.nrows()]);
    let params = PcgParams::new().with_tol(1e-8).unwrap();
    let problem = autopcg_solver::blocks::BlockProblem::new(&a, &b, &kind, &params);
    let solved =
        autopcg_solver::blocks::solve_blocks_cpu(&problem, plan.partition().unwrap(), &mut None)
            .unwrap_or_else(|e| panic!("{name}: {}", e.error));
    solved.info.iterations
}

/// Plans split into 2 and 3 row blocks (the model's per-block choices), emitted with the split
/// driver and run by the emulation on as many devices, then with every block on one device
/// (AUTOPCG_GEN_ANY_DEVICE): the same iterations as the Rust CPU block solver on the same
/// blocks (within 2%), the same on one device as on several, the fields of `solve --json` with
/// every block's steps; a plan for more GPUs than there are is refused without the flag; new
/// values through update_values (2 A) solve in the same iterations to the same solution.
fn the_emitted_split_driver_runs_like_the_rust_block_solver(clang: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let cases = [
        ("bcsstk13", ssor(1), 2usize),
        ("poisson3d_16", ssor(1), 3),
        ("1138_bus", PrecondKind::Jacobi, 2),
        ("fem2d_3000", PrecondKind::None, 3),
    ];
    for (i, (name, kind, nb)) in cases.into_iter().enumerate() {
        let a = fixture(name);
        let plan = saved_split(name, &a, kind, nb);
        assert!(plan.is_split(), "{name}");
        let label = format!("{name} {} on {nb} blocks", plan.precond.applied);
        let dir = tmp.path().join(format!("s{i}"));
        let (solver_o, mock_o) = build(clang, &plan, &dir);
        let text = std::fs::read_to_string(dir.join("src/plan_kernels.cuh")).unwrap();
        assert!(text.contains("kApgBlocks[APG_NBLOCKS]"), "{label}");
        for b in 0..nb {
            assert!(
                text.contains(&format!("namespace apg_b{b} ")),
                "{label}: block {b}"
            );
        }
        let mtx = fixture_path(name);
        let mtx = mtx.to_str().unwrap();
        let count = nb.to_string();
        let o = run(
            &dir,
            &[mtx, "--json"],
            &[("MOCK_DEVICE_COUNT", count.as_str())],
        );
        let j = json(&o);
        assert_eq!(o.status.code(), Some(0), "{label}: {j}");
        assert_eq!(j["converged"], true, "{label}: {j}");
        assert!(j["relative_residual"].as_f64().unwrap() <= 1e-8, "{label}");
        let steps: usize = plan.blocks.iter().map(|b| b.steps.len()).sum();
        assert_eq!(
            j["plan"]["steps"].as_array().map(Vec::len),
            Some(steps),
            "{label}"
        );
        assert!(
            j["device"]
                .as_str()
                .unwrap()
                .contains(&format!("{nb} row blocks")),
            "{label}"
        );
        let got = j["iterations"].as_u64().unwrap();
        let want = cpu_block_iterations(name, &plan) as f64;
        assert!(
            (got as f64 - want).abs() <= 0.02 * want + 1.0,
            "{label}: {got} iterations, the Rust CPU block solver {want}"
        );
        // Too few devices: refused, then run with every block on device 0 when told to.
        let o = run(&dir, &[mtx, "--json"], &[("MOCK_DEVICE_COUNT", "1")]);
        assert_eq!(
            o.status.code(),
            Some(2),
            "{label}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains(&format!("on {nb} GPUs but 1 were found")),
            "{label}: {err}"
        );
        let o = run(
            &dir,
            &[mtx, "--json", "--any-device"],
            &[("MOCK_DEVICE_COUNT", "1")],
        );
        let j1 = json(&o);
        assert_eq!(o.status.code(), Some(0), "{label}: {j1}");
        assert_eq!(j1["iterations"].as_u64(), Some(got), "{label}: one device");
        // A bad diagonal in the last block: refused, naming the block and the row of the whole
        // matrix (block-local SSOR-AI and Jacobi need a positive diagonal).
        if !matches!(kind, PrecondKind::None) {
            let last = plan.blocks.last().unwrap().rows;
            let row = last.0 + (last.1 - last.0) / 2;
            let mut bad = a.clone();
            let q = (bad.indptr()[row]..bad.indptr()[row + 1])
                .find(|&q| bad.indices()[q as usize] as usize == row)
                .unwrap() as usize;
            bad.data_mut()[q] = -1.0;
            let path = dir.join("bad.mtx");
            autopcg_sparse::mm::write_matrix(
                &path,
                &bad,
                autopcg_sparse::mm::WriteSymmetry::General,
            )
            .unwrap();
            let o = run(
                &dir,
                &[path.to_str().unwrap(), "--json"],
                &[("MOCK_DEVICE_COUNT", count.as_str())],
            );
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(2), "{label}: {err}");
            assert!(
                err.contains(&format!(
                    "block {} (rows {}..{})",
                    nb - 1,
                    last.0 + 1,
                    last.1
                )) && err.contains(&format!("row {} has diagonal -1", row + 1)),
                "{label}: {err}"
            );
        }
        // New values (2 A) through update_values: the same iterations and solution.
        check_update_values(
            clang,
            &dir,
            (&solver_o, &mock_o),
            &a,
            &[("MOCK_DEVICE_COUNT", count.as_str())],
        );
        println!("{label}: {got} iterations (Rust CPU blocks {want})");
    }
}
