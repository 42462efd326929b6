//! What the timing examples share: the best of several timed runs, and the 3D Poisson matrix
//! named by the command line.
use std::time::Instant;

use autopcg_sparse::families::poisson3d_7pt;
use autopcg_sparse::CsrMatrix;

/// The least milliseconds of `repeats` runs of `f`, and the last run's result.
pub fn best_ms<T>(repeats: usize, mut f: impl FnMut() -> T) -> (f64, T) {
    let mut best = f64::INFINITY;
    let mut last = None;
    for _ in 0..repeats {
        let t = Instant::now();
        let out = f();
        best = best.min(t.elapsed().as_secs_f64() * 1e3);
        last = Some(out);
    }
    (best, last.expect("at least one repeat"))
}

/// The N^3 7-point Poisson matrix and the repeat count from the arguments `[N] [REPEATS]`
/// (defaults `default_n` and 3), with a line saying what it is.
pub fn poisson_from_args(default_n: usize) -> (CsrMatrix, usize) {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().map_or(default_n, |s| s.parse().expect("N"));
    let repeats: usize = args.next().map_or(3, |s| s.parse().expect("REPEATS"));
    let a = poisson3d_7pt(n, n, n).expect("matrix");
    println!(
        "poisson3d {n}^3: {} rows, {} nonzeros, {} threads, best of {repeats}",
        a.nrows(),
        a.nnz(),
        rayon::current_num_threads()
    );
    (a, repeats)
}
