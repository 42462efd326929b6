//! `autopcg generate` and `autopcg solve --plan`: generation without a GPU from a committed
//! model, the plan file and the emitted folder, and the refusals of a plan for another matrix
//! or another device (exit 2, one line naming the plan), with `--force` for the fingerprint.
//! On a GPU host the saved plan also runs, and its JSON is the one of `solve --json`; without
//! a CUDA device that test is reported ignored (failed with AUTOPCG_REQUIRE_GPU=1). A plan of
//! two row blocks (`generate --gpus 2`) runs one block per GPU where two are present, and is
//! refused cleanly, naming how many GPUs it needs, where fewer are.
mod common;
use common::{run, stderr};

use std::path::{Path, PathBuf};
use std::process::Output;

use autopcg::generator::emit;
use autopcg_gpu::GpuDevice;

autopcg_gpu::test_main! {
    cpu: [
        generate_writes_the_plan_and_the_solver_without_a_gpu,
        generate_refuses_what_it_cannot_do,
        generate_emits_a_saved_plan_as_it_is,
        solve_plan_refuses_another_matrix_and_another_device,
        generate_splits_the_plan_and_solve_refuses_it_without_its_gpus,
    ],
    gpu: [
        solve_plan_runs_on_the_plans_gpu,
        solve_split_plan_runs_one_block_per_gpu
    ],
}

/// Exit 2 with one line on stderr that contains every piece of `parts`.
fn refused(o: &Output, parts: &[&str]) {
    let e = stderr(o);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert_eq!(e.trim_end().lines().count(), 1, "not one line: {e}");
    for p in parts {
        assert!(e.contains(p), "{p:?} not in: {e}");
    }
}

fn generate(matrix: &str, model: &str, out: &Path) -> PathBuf {
    let o = run(&[
        "generate",
        matrix,
        "--model",
        model,
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    out.join("plan.json")
}

/// The slug of GPU 0 when one opens.
fn gpu_slug() -> Option<String> {
    autopcg::open_gpu(0).ok().map(|d| d.props().slug())
}

fn generate_writes_the_plan_and_the_solver_without_a_gpu() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("gen");
    let o = run(&[
        "generate",
        "../../matrices/bcsstk13.mtx",
        "--model",
        "../../models/nvidia-h200.json",
        "--out",
        out.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let files: Vec<&str> = j["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    // The files filled from the plan, the kernels it launches, and every file filled from a
    // template alone (the solver, the host build, main, the C header, the Fortran module).
    let templated = emit::VERSION_TEMPLATES.map(|t| t.0);
    for f in [
        "plan.json",
        "CMakeLists.txt",
        "README.md",
        "src/plan.h",
        "src/solver.cu",
        "kernels/dot.cu",
        "kernels/vector.cu",
    ]
    .into_iter()
    .chain(templated)
    {
        assert!(files.contains(&f), "{f} not written: {files:?}");
        assert!(out.join(f).is_file(), "{f} missing on disk");
    }
    assert_eq!(j["device"], "NVIDIA H200 (sm_90)");
    assert!(j["build"].as_str().unwrap().contains("cmake"));
    let plan: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("plan.json")).unwrap()).unwrap();
    assert_eq!(plan["schema"], 1);
    assert_eq!(plan["kind"], "autopcg-plan");
    assert_eq!(plan["device"]["arch"], 90);
    assert_eq!(plan["matrix"]["n"], 2003);
    assert_eq!(plan["matrix"]["nnz"], 83883);
    assert_eq!(
        plan["matrix"]["pattern_sha256"].as_str().map(str::len),
        Some(64)
    );
    assert_eq!(plan["model"]["sha256"].as_str().map(str::len), Some(64));
    assert_eq!(plan["precond"]["kind"], "ssor-ai");
    let steps = plan["blocks"][0]["steps"].as_array().unwrap();
    assert!(steps
        .iter()
        .all(|s| s["kernel"].is_string() && s["config"].is_string()));

    // Text output, another preconditioner and form.
    let o = run(&[
        "generate",
        "../../matrices/poisson3d_16.mtx",
        "--model",
        "../../models/nvidia-h100.json",
        "--precond",
        "jacobi",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("NVIDIA H100"), "{text}");
    assert!(text.contains("cmake -S"), "{text}");
}

fn generate_refuses_what_it_cannot_do() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("g");
    let o = run(&[
        "generate",
        "../../matrices/bcsstk01.mtx",
        "--model",
        "../../models/nvidia-h200.json",
        "--gpus",
        "49",
        "--out",
        out.to_str().unwrap(),
    ]);
    refused(&o, &["--gpus 49", "48 rows"]);
    let o = run(&[
        "generate",
        "../../matrices/bcsstk01.mtx",
        "--model",
        "../../matrices/README.md",
        "--out",
        out.to_str().unwrap(),
    ]);
    refused(&o, &["--model", "README.md"]);
    if autopcg::open_gpu(0).is_err() {
        let o = run(&[
            "generate",
            "../../matrices/bcsstk01.mtx",
            "--out",
            out.to_str().unwrap(),
        ]);
        refused(&o, &["--model"]);
    }
}

/// `generate --plan`: a plan edited by a tool (A handed to cuSPARSE) is emitted as it is, its
/// step list rewritten from what the steps run; another matrix is refused unless forced, and
/// the options that would choose a plan cannot be given with it.
fn generate_emits_a_saved_plan_as_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let plan = generate(
        "../../matrices/bcsstk13.mtx",
        "../../models/nvidia-h200.json",
        &dir.path().join("g"),
    );
    let text = std::fs::read_to_string(&plan).unwrap();
    let mut j: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_ne!(
        j["blocks"][0]["choice"]["a"]["method"],
        serde_json::json!({"Cusparse": {"alg": "cusparse_spmv_csr_alg2"}}),
        "the model's own plan already hands A to cuSPARSE: pick another edit"
    );
    j["blocks"][0]["choice"]["a"]["method"] =
        serde_json::json!({"Cusparse": {"alg": "cusparse_spmv_csr_alg2"}});
    let edited = dir.path().join("edited.json");
    std::fs::write(&edited, serde_json::to_string_pretty(&j).unwrap()).unwrap();
    let e = edited.to_str().unwrap();
    let out = dir.path().join("e");
    let o = run(&[
        "generate",
        "../../matrices/bcsstk13.mtx",
        "--plan",
        e,
        "--out",
        out.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let spmv = report["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["step"] == "spmv")
        .expect("an spmv step");
    assert_eq!(spmv["kernel"], "cusparse_spmv_csr_alg2", "{report}");
    assert!(report["notes"]
        .as_array()
        .unwrap()
        .iter()
        .any(|n| n.as_str().unwrap().contains("nothing chosen again")));
    // The emitted plan.h calls cuSPARSE for A, and plan.json carries the rewritten steps.
    let h = std::fs::read_to_string(out.join("src/plan.h")).unwrap();
    assert!(h.contains("#define APG_USES_CUSPARSE 1"), "{h}");
    let emitted: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("plan.json")).unwrap()).unwrap();
    assert!(emitted["blocks"][0]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .any(|s| s["kernel"] == "cusparse_spmv_csr_alg2"));

    // Another matrix: refused, naming the plan, unless forced.
    let o = run(&[
        "generate",
        "../../matrices/bcsstk01.mtx",
        "--plan",
        e,
        "--out",
        out.to_str().unwrap(),
    ]);
    refused(&o, &[e, "bcsstk01.mtx", "rows differ", "--force"]);
    let o = run(&[
        "generate",
        "../../matrices/bcsstk01.mtx",
        "--plan",
        e,
        "--force",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("fingerprint check forced"),
        "{}",
        stderr(&o)
    );
    // A plan is not chosen again: no model, preconditioner or form with it.
    let o = run(&[
        "generate",
        "../../matrices/bcsstk13.mtx",
        "--plan",
        e,
        "--model",
        "../../models/nvidia-h200.json",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--model"), "{}", stderr(&o));
}

fn solve_plan_refuses_another_matrix_and_another_device() {
    let dir = tempfile::tempdir().unwrap();
    let plan = generate(
        "../../matrices/bcsstk13.mtx",
        "../../models/nvidia-h200.json",
        &dir.path().join("g"),
    );
    let p = plan.to_str().unwrap();

    // Another matrix: refused whatever the device, naming the plan.
    let o = run(&["solve", "../../matrices/bcsstk01.mtx", "--plan", p]);
    refused(&o, &[p, "bcsstk01.mtx", "rows differ", "--force"]);

    // --force overrides the fingerprint: what remains is the device (no H200 here), or the run.
    let o = run(&[
        "solve",
        "../../matrices/bcsstk01.mtx",
        "--plan",
        p,
        "--force",
    ]);
    let e = stderr(&o);
    if gpu_slug().as_deref() == Some("nvidia-h200") {
        // On the plan's own GPU the forced plan runs, saying what it overrode.
        assert!(matches!(o.status.code(), Some(0 | 1)), "{e}");
        assert!(e.contains("fingerprint check forced"), "{e}");
    } else {
        assert!(!e.contains("differ"), "{e}");
        refused(&o, &[p, "the plan is for NVIDIA H200 (sm_90)"]);
    }

    // A plan for another device.
    let text = std::fs::read_to_string(&plan).unwrap();
    let mut j: serde_json::Value = serde_json::from_str(&text).unwrap();
    j["device"]["name"] = "NVIDIA A100-SXM4-80GB".into();
    j["device"]["slug"] = "nvidia-a100".into();
    j["device"]["arch"] = 80.into();
    let other = dir.path().join("a100.json");
    std::fs::write(&other, serde_json::to_string_pretty(&j).unwrap()).unwrap();
    let o = run(&[
        "solve",
        "../../matrices/bcsstk13.mtx",
        "--plan",
        other.to_str().unwrap(),
    ]);
    refused(
        &o,
        &[
            other.to_str().unwrap(),
            "the plan is for NVIDIA A100-SXM4-80GB (sm_80)",
        ],
    );
    // --force is for the fingerprint only: the device is still refused.
    let o = run(&[
        "solve",
        "../../matrices/bcsstk13.mtx",
        "--plan",
        other.to_str().unwrap(),
        "--force",
    ]);
    refused(&o, &["the plan is for NVIDIA A100-SXM4-80GB (sm_80)"]);
    // --device cpu cannot run a plan.
    let o = run(&[
        "solve",
        "../../matrices/bcsstk13.mtx",
        "--plan",
        p,
        "--device",
        "cpu",
    ]);
    refused(&o, &[p, "the CPU"]);

    // Files that are not plans of this schema.
    let o = run(&[
        "solve",
        "../../matrices/bcsstk13.mtx",
        "--plan",
        "../../matrices/README.md",
    ]);
    refused(&o, &["README.md line 1: not an autopcg plan"]);
    let v2 = dir.path().join("v2.json");
    std::fs::write(&v2, text.replacen("\"schema\": 1", "\"schema\": 2", 1)).unwrap();
    let o = run(&[
        "solve",
        "../../matrices/bcsstk13.mtx",
        "--plan",
        v2.to_str().unwrap(),
    ]);
    refused(&o, &["v2.json: plan schema 2"]);
    // The plan decides the preconditioner: choosing one beside it is a usage error.
    let o = run(&[
        "solve",
        "../../matrices/bcsstk13.mtx",
        "--plan",
        p,
        "--precond",
        "jacobi",
    ]);
    assert_eq!(o.status.code(), Some(2));
    let o = run(&["solve", "../../matrices/bcsstk13.mtx", "--force"]);
    assert_eq!(o.status.code(), Some(2));
}

fn solve_plan_runs_on_the_plans_gpu(dev: GpuDevice) {
    // The committed model of this GPU chooses; without one, generate plans for GPU 0 with the
    // model it finds as `solve` does (the fallback rule when there is none).
    let slug = dev.props().slug();
    drop(dev);
    let model = format!("../../models/{slug}.json");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("g");
    let has_model = Path::new(&model).exists();
    let plan = if has_model {
        generate("../../matrices/bcsstk13.mtx", &model, &out)
    } else {
        let o = run(&[
            "generate",
            "../../matrices/bcsstk13.mtx",
            "--out",
            out.to_str().unwrap(),
        ]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        out.join("plan.json")
    };
    let o = run(&[
        "solve",
        "../../matrices/bcsstk13.mtx",
        "--plan",
        plan.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["converged"], true);
    if has_model {
        assert_eq!(j["model"], model.as_str());
    }
    assert!(j["plan"]["source"].as_str().unwrap().starts_with("plan "));
    assert!(j["relative_residual"].as_f64().unwrap() <= 1e-8);
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&plan).unwrap()).unwrap();
    assert_eq!(j["omega"], saved["precond"]["omega"]);
    assert_eq!(j["precond_applied"], saved["precond"]["applied"]);
    assert_eq!(j["check_every"], saved["check_every"]);

    // The same report as `solve --json`: the same fields.
    let o = run(&["solve", "../../matrices/bcsstk13.mtx", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let plain: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let keys = |v: &serde_json::Value| -> Vec<String> {
        let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        k.sort();
        k
    };
    assert_eq!(keys(&j), keys(&plain));
}

/// The GPUs the driver reports (0 without a usable driver).
fn gpus_found() -> usize {
    if autopcg_gpu::gpu_available() {
        GpuDevice::discover().map_or(0, |d| d.len())
    } else {
        0
    }
}

/// `generate --gpus 2`: plan.json holds two row blocks covering every row, one per GPU, each
/// with the multiply of its halo part. `solve --plan` checks the matrix first (another one is
/// refused, and --force cannot run the blocks on a matrix of another size), then the GPUs the
/// plan names: without them it is refused with one line naming the plan and how many it needs.
fn generate_splits_the_plan_and_solve_refuses_it_without_its_gpus() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("g2");
    let o = run(&[
        "generate",
        "../../matrices/bcsstk13.mtx",
        "--model",
        "../../models/nvidia-h200.json",
        "--gpus",
        "2",
        "--out",
        out.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        report["blocks"].as_array().map(Vec::len),
        Some(2),
        "{report}"
    );
    let plan = out.join("plan.json");
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&plan).unwrap()).unwrap();
    let blocks = saved["blocks"].as_array().unwrap();
    assert_eq!(blocks.len(), 2, "{saved}");
    assert_eq!(blocks[0]["rows"][0], 0);
    assert_eq!(blocks[0]["rows"][1], blocks[1]["rows"][0]);
    assert_eq!(blocks[1]["rows"][1], 2003);
    for (i, b) in blocks.iter().enumerate() {
        assert_eq!(b["gpu"], i, "{b}");
        assert!(b["halo"].is_object(), "block {i} has no halo multiply: {b}");
        assert_eq!(
            b["steps"].as_array().unwrap().last().unwrap()["step"],
            "spmv halo",
            "{b}"
        );
    }
    let p = plan.to_str().unwrap();

    // Another matrix: refused for the fingerprint whatever the GPUs, naming the plan.
    let o = run(&["solve", "../../matrices/bcsstk01.mtx", "--plan", p]);
    refused(&o, &[p, "bcsstk01.mtx", "rows differ", "--force"]);
    // --force skips the fingerprint, but the blocks' rows are the plan's.
    let o = run(&[
        "solve",
        "../../matrices/bcsstk01.mtx",
        "--plan",
        p,
        "--force",
    ]);
    refused(&o, &[p, "2 row blocks cover 2003 rows", "has 48"]);

    // Its own matrix: the plan needs GPUs 0 and 1, both H200s.
    let o = run(&["solve", "../../matrices/bcsstk13.mtx", "--plan", p]);
    match gpus_found() {
        0 => refused(
            &o,
            &[
                p,
                "the plan is for NVIDIA H200 (sm_90)",
                "its 2 row blocks need 2 GPUs and none was found here",
            ],
        ),
        1 => refused(&o, &[p, "need 2 GPUs and only 1 was found here"]),
        _ if gpu_slug().as_deref() != Some("nvidia-h200") => {
            refused(&o, &[p, "the plan is for NVIDIA H200 (sm_90)"])
        }
        _ => assert_eq!(o.status.code(), Some(0), "{}", stderr(&o)),
    }
    // The plan says the blocks: --gpus and --blocks cannot be given with it, nor the CPU.
    for extra in [["--gpus", "2"], ["--blocks", "2"]] {
        let mut args = vec!["solve", "../../matrices/bcsstk13.mtx", "--plan", p];
        args.extend(extra);
        let o = run(&args);
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        assert!(stderr(&o).contains(extra[0]), "{}", stderr(&o));
    }
    let o = run(&[
        "solve",
        "../../matrices/bcsstk13.mtx",
        "--plan",
        p,
        "--device",
        "cpu",
    ]);
    refused(&o, &[p, "the CPU"]);
}

/// A plan of two row blocks for this GPU (its committed model where there is one, else the
/// model `generate` finds or the fallback rule): with two GPUs or more it runs block i on GPU i
/// and converges, its JSON holding both blocks and the fields of `solve --gpus 2 --json`;
/// with one GPU it is refused, saying it needs 2.
fn solve_split_plan_runs_one_block_per_gpu(dev: GpuDevice) {
    let slug = dev.props().slug();
    drop(dev);
    let model = format!("../../models/{slug}.json");
    let has_model = Path::new(&model).exists();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("g2");
    let mut args = vec![
        "generate",
        "../../matrices/bcsstk13.mtx",
        "--gpus",
        "2",
        "--out",
        out.to_str().unwrap(),
    ];
    if has_model {
        args.extend(["--model", model.as_str()]);
    }
    let o = run(&args);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let plan = out.join("plan.json");
    let p = plan.to_str().unwrap();
    let o = run(&[
        "solve",
        "../../matrices/bcsstk13.mtx",
        "--plan",
        p,
        "--json",
    ]);
    if gpus_found() < 2 {
        refused(
            &o,
            &[p, "its 2 row blocks need 2 GPUs and only 1 was found here"],
        );
        return;
    }
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["converged"], true, "{j}");
    assert!(j["relative_residual"].as_f64().unwrap() <= 1e-8, "{j}");
    if has_model {
        assert_eq!(j["model"], model.as_str());
    }
    assert!(
        j["plan"]["source"].as_str().unwrap().starts_with("plan "),
        "{j}"
    );
    assert!(j["notes"]
        .as_array()
        .unwrap()
        .iter()
        .any(|n| n.as_str().unwrap().contains("nothing chosen again")));
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&plan).unwrap()).unwrap();
    assert_eq!(j["omega"], saved["precond"]["omega"]);
    assert_eq!(j["check_every"], saved["check_every"]);
    // The split as saved: its rows, one block per GPU, each block's saved steps.
    let part = &j["partition"];
    assert_eq!(part["nblocks"], 2, "{j}");
    assert_eq!(part["devices"], serde_json::json!([0, 1]), "{j}");
    for (i, b) in saved["blocks"].as_array().unwrap().iter().enumerate() {
        assert_eq!(part["blocks"][i]["start"], b["rows"][0], "{j}");
        let steps = part["block_plans"][i]["steps"].as_array().unwrap();
        let kernels: Vec<&serde_json::Value> = steps.iter().map(|s| &s["kernel"]).collect();
        let saved_kernels: Vec<&serde_json::Value> = b["steps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| &s["kernel"])
            .collect();
        assert_eq!(kernels, saved_kernels, "block {i}");
    }

    // The same report as `solve --gpus 2 --json`: the same fields.
    let o = run(&[
        "solve",
        "../../matrices/bcsstk13.mtx",
        "--gpus",
        "2",
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let live: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let keys = |v: &serde_json::Value| -> Vec<String> {
        let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        k.sort();
        k
    };
    assert_eq!(keys(&j), keys(&live));
}
