//! Matrix Market reading on files from outside the repository: the shared collection of real
//! matrices (`../../../shared/matrices` from this package) and a file to time. Where the file
//! is missing the runner reports the test as ignored, saying why once, rather than as passed.
use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

use autopcg_sparse::mm::*;
use libtest_mimic::{Arguments, Completion, Trial};

/// The shared collection, seen from the package's folder.
const SHARED: &str = "../../../shared/matrices";

fn opts() -> ReadOptions {
    ReadOptions::default()
}

/// Reads every matrix of the shared collection and checks it against the folder's README table.
fn shared_matrices_match_their_table(readme: String) {
    let dir = Path::new(SHARED);
    let mut checked = 0;
    for line in readme.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.len() < 6 || !cells[1].ends_with(".mtx") {
            continue;
        }
        let (file, rows, stored, nnz) = (
            cells[1],
            cells[2].parse::<usize>().unwrap(),
            cells[3].parse::<usize>().unwrap(),
            cells[4].parse::<usize>().unwrap(),
        );
        let m = read_matrix(dir.join(file), &opts()).unwrap();
        assert_eq!(m.header.nrows, rows, "{file}");
        assert_eq!(m.matrix.nrows(), rows, "{file}");
        assert_eq!(m.header.entries, stored, "{file}");
        assert_eq!(m.matrix.nnz(), nnz, "{file}");
        // Symmetric ones are symmetric once read; ani4 to its stated tolerance.
        assert_eq!(m.matrix.first_asymmetry(1e-14), None, "{file}");
        let r = ReadOptions {
            symmetry: SymmetryPolicy::RequireSymmetric,
            ..opts()
        };
        let s = read_matrix(dir.join(file), &r).unwrap();
        assert_eq!(s.matrix.first_asymmetry(0.0), None, "{file}");
        checked += 1;
    }
    assert!(
        checked >= 10,
        "only {checked} rows found in the README table"
    );
}

/// Times `read_matrix` on the file named by `AUTOPCG_MM_BENCH` (threads from
/// `AUTOPCG_MM_THREADS`, timed repetitions from `AUTOPCG_MM_REPEAT`, after one warm-up) and
/// prints `{"median_ms": ...}`; reported ignored when the variable is not set. Run with
/// `cargo test --release -p autopcg-sparse --test mm_files -- --ignored --nocapture bench_read`.
fn bench_read(path: String) {
    let env = |k: &str, d: usize| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let threads = env("AUTOPCG_MM_THREADS", 0);
    let repeat = env("AUTOPCG_MM_REPEAT", 5).max(1);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap();
    pool.install(|| {
        let o = ReadOptions {
            require_square: false,
            ..opts()
        };
        let m = read_matrix(&path, &o).unwrap();
        let mut t = Vec::new();
        for _ in 0..repeat {
            let s = Instant::now();
            let m = read_matrix(&path, &o).unwrap();
            t.push(s.elapsed().as_secs_f64() * 1e3);
            drop(m);
        }
        t.sort_by(f64::total_cmp);
        println!(
            "{{\"median_ms\": {:.3}, \"min_ms\": {:.3}, \"nnz\": {}, \"threads\": {}}}",
            t[t.len() / 2],
            t[0],
            m.matrix.nnz(),
            rayon::current_num_threads()
        );
    });
}

/// A trial given `what` it reads, run only when asked for (`--ignored`) where `on_request`;
/// where `what` is missing (the reason), a trial reported ignored with the reason, which is
/// also printed once when the trial would otherwise have run.
fn needing(
    args: &Arguments,
    name: &'static str,
    on_request: bool,
    what: Result<String, String>,
    body: fn(String),
) -> Trial {
    match what {
        Ok(v) => Trial::test(name, move || {
            body(v);
            Ok(())
        })
        .with_ignored_flag(on_request),
        Err(why) => {
            let asked = !on_request || args.ignored || args.include_ignored;
            if asked && !args.list {
                eprintln!("note: {name} ignored: {why}");
            }
            Trial::ignorable_test(name, move || Ok(Completion::ignored_with(why)))
                .with_ignored_flag(true)
        }
    }
}

fn main() -> ExitCode {
    let args = Arguments::from_args();
    let readme = Path::new(SHARED).join("README.md");
    let table = std::fs::read_to_string(&readme).map_err(|e| format!("{}: {e}", readme.display()));
    let bench = std::env::var("AUTOPCG_MM_BENCH")
        .map_err(|_| "AUTOPCG_MM_BENCH names no file to time".to_string());
    let trials = vec![
        needing(
            &args,
            "shared_matrices_match_their_table",
            false,
            table,
            shared_matrices_match_their_table,
        ),
        // A measurement: run only when asked for, like `#[ignore]`.
        needing(&args, "bench_read", true, bench, bench_read),
    ];
    libtest_mimic::run(&args, trials).exit_code()
}
