//! Times second-order SSOR-AI's device setup on a Matrix Market file, cold (the first call in
//! the process: modules loaded ahead, but the memory pool not yet grown) and warm (the median
//! of `REPEATS` calls after it, the pool holding the memory freed by the calls before): the
//! count of `K` and `K^T` that the plan makes (keeping their patterns), the factors formed
//! from the kept patterns, the factors merged anew, and, for comparison, a fresh allocation of
//! as many bytes as the factors hold against the same allocation once freed. Each step is
//! synchronised before its clock stops. The difference between a cold and a warm step is what
//! growing the pool (mapping fresh device memory) costs it.
//!
//! `cargo run --release -p autopcg --example ssor2_setup_timing -- M.mtx [REPEATS]` (GPU host).
use std::time::Instant;

use autopcg::gpu::kernels::ssor::{
    preload, ssor_k2_factors, ssor_k2_factors_counted, ssor_k2_totals_kept, SsorK2Build,
};
use autopcg::gpu::DeviceCsr;

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let path = args
        .next()
        .expect("usage: ssor2_setup_timing M.mtx [REPEATS]");
    let repeats: usize = args.next().map_or(5, |r| r.parse().expect("REPEATS"));
    let a = autopcg::sparse::mm::read_matrix(&path, &Default::default())
        .expect("matrix")
        .matrix;
    let omega = autopcg::solver::precond::auto_omega(&a);
    let dev = autopcg::open_gpu(0).expect("a GPU");
    preload(&dev).expect("kernels");
    let up = DeviceCsr::upload(&dev, &a).expect("upload");
    let sync = || dev.synchronize().expect("synchronize");
    sync();

    let count = || {
        let t = Instant::now();
        let kept = ssor_k2_totals_kept(&dev, &up).expect("count");
        sync();
        (ms(t), kept.map(|(_, p)| p))
    };
    let entries = |b: &SsorK2Build| match b {
        SsorK2Build::Built(p) => (p.k.nnz(), p.kt.nnz()),
        SsorK2Build::Refused(r) => panic!("factors refused: {r}"),
    };
    let from_kept = |p| {
        let t = Instant::now();
        let b = ssor_k2_factors_counted(&dev, &up, omega, p).expect("factors");
        sync();
        let e = entries(&b);
        drop(b);
        sync();
        (ms(t), e)
    };
    let merged = || {
        let t = Instant::now();
        let b = ssor_k2_factors(&dev, &up, omega).expect("factors");
        sync();
        let e = entries(&b);
        drop(b);
        sync();
        (ms(t), e)
    };

    // Cold: the pool holds only A's arrays.
    let (count_cold, kept) = count();
    let (kept_cold, (nnz_k, nnz_kt)) = from_kept(kept);
    // Warm.
    let mut c = Vec::new();
    let mut f = Vec::new();
    let mut m = Vec::new();
    for _ in 0..repeats {
        let (t, kept) = count();
        c.push(t);
        f.push(from_kept(kept).0);
        m.push(merged().0);
    }
    // A fresh allocation of the factors' bytes (values, columns, K^T's sources) past what the
    // pool holds, then the same once freed.
    let bytes = (nnz_k + nnz_kt) * 12 + nnz_kt * 4;
    let alloc = |n: usize| {
        let t = Instant::now();
        let v = dev.alloc_zeros::<u32>(n / 4).expect("allocation");
        sync();
        (ms(t), v)
    };
    let (pad_ms, pad) = alloc(bytes);
    let (fresh_ms, v) = alloc(bytes);
    drop(v);
    sync();
    let (reused_ms, v) = alloc(bytes);
    drop((v, pad));
    println!(
        "{path}: n {} nnz {} omega {omega:.3}; K {nnz_k} K^T {nnz_kt} entries; ms cold / warm \
         median of {repeats}: count {count_cold:.2} / {:.2}, factors from the kept count \
         {kept_cold:.2} / {:.2}, factors merged anew - / {:.2}; zeroed allocation of {:.2} GB: \
         fresh {fresh_ms:.2} (first {pad_ms:.2}), reused {reused_ms:.2}",
        a.nrows(),
        a.nnz(),
        median(c),
        median(f),
        median(m),
        bytes as f64 / 1e9,
    );
}
