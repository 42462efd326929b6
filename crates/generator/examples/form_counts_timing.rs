//! Times the structural part of the SSOR-AI form comparison on a generated 3D Poisson matrix:
//! what the SpMV choice of the explicit product reads (its work counts and features), found
//! by forming the product's symbolic pattern and reading it, against counting it in one
//! symbolic pass that stores nothing of the product (and that pass alone, counting nothing).
//! Checks that both give the same counts.
//!
//! `cargo run --release -p autopcg-generator --example form_counts_timing -- [N] [REPEATS]`
//! (the N^3 7-point Poisson matrix; defaults 128 and 3). Prints the best of the repeats.
use std::time::Instant;

use autopcg_generator::{explicit_counts, SpmvCounts};
use autopcg_solver::{PrecondKind, Preconditioner};
use autopcg_sparse::families::poisson3d_7pt;

fn best_ms<T>(repeats: usize, mut f: impl FnMut() -> T) -> (f64, T) {
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

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().map_or(128, |s| s.parse().expect("N"));
    let repeats: usize = args.next().map_or(3, |s| s.parse().expect("REPEATS"));
    let a = poisson3d_7pt(n, n, n).expect("matrix");
    println!(
        "poisson3d {n}^3: {} rows, {} nonzeros, {} threads, best of {repeats}",
        a.nrows(),
        a.nnz(),
        rayon::current_num_threads()
    );
    for kind in [PrecondKind::ssor_ai(), PrecondKind::ssor_ai2()] {
        let pre = Preconditioner::build(&a, &kind.resolved_for(&a)).expect("preconditioner");
        let (pattern_ms, pattern) = best_ms(repeats, || {
            pre.explicit_pattern().unwrap().expect("factored")
        });
        let (read_ms, formed) = best_ms(repeats, || SpmvCounts::of(&pattern));
        let (nnz, formed_ms) = (pattern.nnz(), pattern_ms + read_ms);
        drop(pattern);
        let (counted_ms, counted) = best_ms(repeats, || explicit_counts(&pre).expect("factored"));
        // The symbolic pass alone, counting nothing but the entries: what the counting adds.
        let (rows_ms, entries) = best_ms(repeats, || {
            pre.fold_explicit_rows(|| 0usize, |e, _, cols| *e += cols.len(), |a, b| a + b)
                .expect("factored")
        });
        assert_eq!(entries, nnz);
        let same = counted.features == formed.features && {
            let mut w = counted.work.clone();
            w.row_len_std = formed.work.row_len_std;
            w == formed.work
        };
        println!(
            "{kind}: M has {nnz} nonzeros; formed pattern + counts {formed_ms:.1} ms (pattern \
             {pattern_ms:.1} ms, counts {read_ms:.1} ms); counted without forming \
             {counted_ms:.1} ms ({:.1}x less; the symbolic pass alone {rows_ms:.1} ms); same \
             counts: {same}",
            formed_ms / counted_ms
        );
    }
}
