//! Times the structural part of the SSOR-AI form comparison on a generated 3D Poisson matrix:
//! what the SpMV choice of the explicit product reads (its work counts and features), found
//! by forming the product's symbolic pattern and reading it, against counting it in one
//! symbolic pass that stores nothing of the product (and that pass alone, counting nothing).
//! Checks that both give the same counts.
//!
//! `cargo run --release -p autopcg-generator --example form_counts_timing -- [N] [REPEATS]`
//! (the N^3 7-point Poisson matrix; defaults 128 and 3). Prints the best of the repeats.

use autopcg_generator::{explicit_counts, SpmvCounts};
use autopcg_solver::{PrecondKind, Preconditioner};

mod common;
use common::{best_ms, poisson_from_args};

fn main() {
    let (a, repeats) = poisson_from_args(128);
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
