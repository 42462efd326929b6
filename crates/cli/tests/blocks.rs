//! `autopcg solve --blocks N`: the partition in the JSON report, iteration counts against the
//! unsplit solve, and the usage errors (exit 2).
mod common;
use common::{json, run};

const M: &str = "../../matrices/fem2d_3000.mtx";

#[test]
fn blocks_report_the_partition_and_iterate_like_unsplit() {
    let base = [
        "solve",
        M,
        "--device",
        "cpu",
        "--precond",
        "jacobi",
        "--json",
    ];
    let unsplit = run(&base);
    assert_eq!(unsplit.status.code(), Some(0));
    let u = json(&unsplit);
    assert!(u.get("partition").is_none());
    let mut args = base.to_vec();
    args.extend(["--blocks", "4"]);
    let split = run(&args);
    assert_eq!(split.status.code(), Some(0), "{split:?}");
    let s = json(&split);
    assert_eq!(s["converged"], true);
    assert!(s["relative_residual"].as_f64().unwrap() <= 1e-8);
    let (iu, is) = (
        u["iterations"].as_u64().unwrap(),
        s["iterations"].as_u64().unwrap(),
    );
    assert!(iu.abs_diff(is) as f64 <= 0.01 * iu as f64, "{iu} vs {is}");
    let p = &s["partition"];
    assert_eq!(p["nblocks"], 4);
    let blocks = p["blocks"].as_array().unwrap();
    assert_eq!(blocks.len(), 4);
    let rows: u64 = blocks.iter().map(|b| b["rows"].as_u64().unwrap()).sum();
    let nnz: u64 = blocks.iter().map(|b| b["nnz"].as_u64().unwrap()).sum();
    let halo: u64 = blocks.iter().map(|b| b["halo_len"].as_u64().unwrap()).sum();
    assert_eq!(rows, s["n"].as_u64().unwrap());
    assert_eq!(nnz, s["nnz"].as_u64().unwrap());
    assert_eq!(p["halo_entries_per_iteration"].as_u64().unwrap(), halo);
    assert!(halo > 0);
    assert_eq!(p["all_reduces_per_iteration"], 1);
    assert_eq!(p["precond_dropped_couplings"], 0);
}

#[test]
fn block_local_ssor_ai_says_what_it_drops() {
    let o = run(&[
        "solve",
        M,
        "--device",
        "cpu",
        "--precond",
        "ssor-ai",
        "--blocks",
        "3",
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(0));
    let s = json(&o);
    assert_eq!(s["precond_applied"], "ssor-ai-block-local");
    let dropped = s["partition"]["precond_dropped_couplings"]
        .as_u64()
        .unwrap();
    let halo_nnz: u64 = s["partition"]["blocks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["halo_nnz"].as_u64().unwrap())
        .sum();
    assert_eq!(dropped, halo_nnz);
    assert!(dropped > 0);
}

#[test]
fn bad_block_counts_are_usage_errors() {
    for (args, needle) in [
        (vec!["--blocks", "0"], "--blocks"),
        (vec!["--blocks", "49"], "only 48 rows"),
        (vec!["--blocks", "x"], "--blocks"),
        (vec!["--blocks", "2", "--plan", "plan.json"], "--plan"),
    ] {
        assert_usage_error(&args, needle);
    }
}

/// `solve bcsstk01.mtx ARGS` exits 2 with `needle` in its message, without panicking.
fn assert_usage_error(args: &[&str], needle: &str) {
    let mut a = vec!["solve", "../../matrices/bcsstk01.mtx"];
    a.extend(args.iter().copied());
    let o = run(&a);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {o:?}");
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains(needle), "{args:?}: {e}");
    assert!(!e.contains("panicked"), "{e}");
}

/// Whether this machine has a usable GPU (then the tests that need none are skipped).
fn gpus_present() -> usize {
    if !autopcg::gpu::gpu_available() {
        return 0;
    }
    autopcg::gpu::GpuDevice::discover().map_or(0, |d| d.len())
}

#[test]
fn more_gpus_than_present_is_a_usage_error_naming_the_count() {
    let found = gpus_present();
    let want = (found + 1).to_string();
    let count = if found == 1 {
        "1 GPU was found".to_string()
    } else {
        format!("{found} GPUs were found")
    };
    assert_usage_error(&["--precond", "jacobi", "--gpus", &want], &count);
    assert_usage_error(&["--gpus", &want], &format!("--gpus {want} needs"));
    if found == 0 {
        // auto needs at least one.
        assert_usage_error(&["--gpus", "auto"], "0 GPUs were found");
    }
}

#[test]
fn gpus_is_refused_with_blocks_plan_the_cpu_and_bad_counts() {
    for (args, needle) in [
        (vec!["--gpus", "2", "--blocks", "2"], "--blocks"),
        (vec!["--gpus", "2", "--plan", "plan.json"], "--plan"),
        (vec!["--gpus", "2", "--device", "cpu"], "--device cpu"),
        (vec!["--gpus", "0"], "not a GPU count"),
        (vec!["--gpus", "two"], "not a GPU count"),
        (vec!["--gpus", "49"], "only 48 rows"),
    ] {
        assert_usage_error(&args, needle);
    }
}

#[test]
fn explain_prints_one_sub_plan_per_block() {
    let base = [
        "solve",
        "../../matrices/bcsstk01.mtx",
        "--device",
        "cpu",
        "--precond",
        "jacobi",
        "--blocks",
        "3",
    ];
    let mut args = base.to_vec();
    args.push("--explain");
    let o = run(&args);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let out = String::from_utf8_lossy(&o.stdout);
    for k in 0..3 {
        assert!(out.contains(&format!("block {k} sub-plan (rows ")), "{out}");
    }
    assert!(!out.contains("block 3 sub-plan"), "{out}");
    assert_eq!(out.matches("spmv halo").count(), 3, "{out}");
    // On the CPU the halo part is a CSR product of its own; each line says its nonzeros.
    for l in out.lines().filter(|l| l.contains("spmv halo")) {
        assert!(l.contains("cpu_csr") && l.contains("halo nonzeros"), "{l}");
    }
    // No model on the CPU: the rows stay split by rows and nonzeros, and the report says why.
    assert!(
        out.contains("rows balanced by rows and nonzeros (no model prediction for every block)"),
        "{out}"
    );
    let mut args = base.to_vec();
    args.push("--json");
    let j = json(&run(&args));
    let plans = j["partition"]["block_plans"].as_array().unwrap();
    assert_eq!(plans.len(), 3);
    // On the CPU no block names a GPU.
    assert!(j["partition"].get("devices").is_none());
    assert_eq!(j["partition"]["balance"]["by"], "rows and nonzeros");
}
