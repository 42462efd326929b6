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
        let mut a = vec!["solve", "../../matrices/bcsstk01.mtx"];
        a.extend(args.iter().copied());
        let o = run(&a);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {o:?}");
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(e.contains(needle), "{args:?}: {e}");
        assert!(!e.contains("panicked"), "{e}");
    }
}
