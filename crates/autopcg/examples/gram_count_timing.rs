//! Times the count of SSOR-AI's explicit product structure (what the form comparison reads)
//! on the host's symbolic pass and on the GPU, in one process, on a Matrix Market file: the
//! module's load, the device's first call (its first staged copies, as in a fresh `solve`)
//! and later ones, beside the host's. Checks that both give the same counts.
//!
//! `cargo run --release -p autopcg --example gram_count_timing -- M.mtx [REPEATS]` (GPU host).
use std::time::Instant;

use autopcg::generator::factors::K1Factors;
use autopcg::gpu::kernels::ssor::ssor_k1_gram_count;

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

fn main() {
    let mut args = std::env::args().skip(1);
    let path = args
        .next()
        .expect("usage: gram_count_timing M.mtx [REPEATS]");
    let repeats: usize = args.next().map_or(3, |r| r.parse().expect("REPEATS"));
    let a = autopcg::sparse::mm::read_matrix(&path, &Default::default())
        .expect("matrix")
        .matrix;
    let dev = autopcg::open_gpu(0).expect("a GPU");
    let v = K1Factors::of(&a).expect("a symmetric pattern with a positive diagonal");
    let longest = (0..a.nrows()).map(|i| v.kt_row(i).len()).max().unwrap_or(0);
    let mut host = Vec::new();
    let mut counts = None;
    for _ in 0..repeats {
        let t = Instant::now();
        counts = Some(v.explicit_counts());
        host.push(ms(t));
    }
    // The explicit form built on the host (what a plan that picks it does next), before any
    // device work; again after the device counts below.
    let explicit = autopcg::PrecondKind::ssor_ai()
        .with_omega(v.auto_omega())
        .with_form(autopcg::SsorForm::Explicit);
    let build = || {
        let t = Instant::now();
        let p = autopcg::solver::Preconditioner::build(&a, &explicit).expect("explicit");
        drop(p);
        ms(t)
    };
    let build_first = build();
    let build_before = build();
    // Loading the precond module (the count's kernels), as the first call would.
    let t = Instant::now();
    autopcg::gpu::kernels::ssor::preload(&dev).expect("kernels");
    let load = ms(t);
    let mut device = Vec::new();
    let mut same = true;
    for _ in 0..repeats {
        let t = Instant::now();
        let c = ssor_k1_gram_count(&dev, &a, Some(longest)).expect("device count");
        let c = c.map(|c| v.explicit_counts_from(c));
        device.push(ms(t));
        same &= match c {
            Some(c) => c == counts,
            None => true,
        };
    }
    let build_after = build();
    let f = |v: &[f64]| {
        v.iter()
            .map(|x| format!("{x:.2}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    println!(
        "{path}: n {} nnz {} longest K^T row {longest}; host ms [{}]; module load {load:.2} \
         ms; device ms (first call first) [{}]; same counts: {same}; explicit build on the host \
         {build_first:.1} ms first, {build_before:.1} ms after the host counts, {build_after:.1} ms \
         after the device counts",
        a.nrows(),
        a.nnz(),
        f(&host),
        f(&device)
    );
}
