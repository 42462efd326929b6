//! The GPU pieces the backend adds to the CUDA layer: graph capture and replay, the three-dot
//! reduction that takes its iteration from the scalar buffer, and the one-download read of
//! history and scalars.
//!
//! Without a CUDA device the runner reports each GPU test as ignored
//! (with AUTOPCG_REQUIRE_GPU=1 it fails instead); see autopcg_gpu::testing.
use autopcg_gpu::kernels::dot::{dot3_advance, dot3_advance_next, Dot3Kernel, Dot3Workspace};
use autopcg_gpu::kernels::vector::{axpy, VectorVariant};
use autopcg_gpu::scalars::{HaltCode, CG_ITER};
use autopcg_gpu::{CgScalars, GpuDevice, GpuError, LaunchConfig};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn uniform(seed: u64, n: usize, lo: f64, hi: f64) -> Vec<f64> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..n).map(|_| rng.random_range(lo..hi)).collect()
}

fn captured_work_runs_only_when_replayed(dev: GpuDevice) {
    let n = 1001;
    let x = dev.upload(&uniform(1, n, -1.0, 1.0)).unwrap();
    let y0 = uniform(2, n, -1.0, 1.0);
    let mut y = dev.upload(&y0).unwrap();
    let cfg = VectorVariant::Grid.default_config(n as u64, dev.props());
    let a = 0.25;
    // Load the kernel before capturing (no module loading inside a capture).
    axpy(&dev, VectorVariant::Grid, cfg, 0.0, &x, &mut y).unwrap();
    let g = dev
        .capture(|| axpy(&dev, VectorVariant::Grid, cfg, a, &x, &mut y))
        .unwrap();
    assert!(!g.is_empty());
    assert_eq!(g.nodes(), 1);
    assert_eq!(
        dev.download(&y).unwrap(),
        y0,
        "capturing must not run the work"
    );
    for _ in 0..3 {
        g.launch().unwrap();
    }
    let got = dev.download(&y).unwrap();
    let xh = dev.download(&x).unwrap();
    for i in 0..n {
        let mut want = y0[i];
        for _ in 0..3 {
            want += a * xh[i];
        }
        assert_eq!(got[i], want, "element {i}");
    }
    // An empty capture gives an empty graph whose launch does nothing.
    let empty = dev.capture(|| Ok(())).unwrap();
    assert!(empty.is_empty());
    assert_eq!(empty.nodes(), 0);
    empty.launch().unwrap();
    // A failing closure ends the capture and returns its error; the stream works afterwards.
    let e = dev
        .capture(|| {
            axpy(&dev, VectorVariant::Grid, cfg, a, &x, &mut y)?;
            Err(GpuError::InvalidInput {
                what: "test".into(),
                reason: "stop".into(),
            })
        })
        .unwrap_err();
    assert!(e.to_string().contains("stop"), "{e}");
    axpy(&dev, VectorVariant::Grid, cfg, 1.0, &x, &mut y).unwrap();
    dev.synchronize().unwrap();
}

/// dot3_advance_next on iteration k reproduces dot3_advance with k given, bit for bit, for both
/// reduction kernels and several block sizes.
fn next_iteration_variant_matches_the_explicit_one(dev: GpuDevice) {
    let n = 4097;
    // Positive u and w keep delta = (w, u) fixed and positive; residuals shrinking by about 0.3
    // per iteration keep (gamma_k / gamma_{k-1})^2 near 0.09, so every curvature
    // delta - (gamma_k / gamma_{k-1})^2 * curvature_{k-1} stays positive: no halt.
    let u = dev.upload(&uniform(4, n, 0.5, 1.5)).unwrap();
    let w = dev.upload(&uniform(5, n, 0.5, 1.5)).unwrap();
    let vs: Vec<_> = (0..6)
        .map(|k| {
            let scale = 0.3f64.powi(k as i32);
            let v: Vec<f64> = uniform(10 + k, n, 0.5, 1.5)
                .iter()
                .map(|x| x * scale)
                .collect();
            dev.upload(&v).unwrap()
        })
        .collect();
    let r = &vs[0];
    for kernel in Dot3Kernel::ALL {
        for threads in [128u32, 256, 1024] {
            let cfg = LaunchConfig::new(threads, 37);
            let mut ws = Dot3Workspace::new(&dev, 37).unwrap();
            let mut s1 = CgScalars::new(&dev, 8).unwrap();
            let mut s2 = CgScalars::new(&dev, 8).unwrap();
            dot3_advance(&dev, kernel, cfg, r, &u, &w, &mut ws, &mut s1, 0).unwrap();
            dot3_advance(&dev, kernel, cfg, r, &u, &w, &mut ws, &mut s2, 0).unwrap();
            for k in 1..6u32 {
                // Different (r, u, w) each iteration, so the recurrence moves.
                let rr = &vs[k as usize];
                dot3_advance(&dev, kernel, cfg, rr, &u, &w, &mut ws, &mut s1, k).unwrap();
                dot3_advance_next(&dev, kernel, cfg, rr, &u, &w, &mut ws, &mut s2).unwrap();
            }
            let (a, b) = (s1.read_raw(&dev).unwrap(), s2.read_raw(&dev).unwrap());
            assert_eq!(a, b, "{kernel} {threads}");
            assert_eq!(b[CG_ITER], 5.0);
            assert_eq!(s2.read(&dev).unwrap().halt, None, "{kernel} {threads}");
            assert_eq!(
                s1.read_history(&dev, 0, 6).unwrap(),
                s2.read_history(&dev, 0, 6).unwrap()
            );
            // One download gives what two separate reads give.
            let (snap, hist) = s2.read_since(&dev, 2, 6).unwrap();
            assert_eq!(snap, s2.read(&dev).unwrap());
            assert_eq!(hist, s2.read_history(&dev, 2, 6).unwrap());
            let (_, none) = s2.read_since(&dev, 6, 6).unwrap();
            assert!(none.is_empty());
            assert!(s2.read_since(&dev, 3, 9).is_err());
        }
    }
}

/// After a halt the device iteration stops advancing: later calls leave the scalars alone
/// and put their dots in the slot just past the halt.
fn next_iteration_variant_freezes_after_a_halt(dev: GpuDevice) {
    let n = 300;
    let u = dev.upload(&uniform(6, n, 0.5, 1.5)).unwrap();
    let r = dev.upload(&uniform(7, n, 0.5, 1.5)).unwrap();
    // w = -u: delta = -(u, u) < 0, so the start halts.
    let uh = dev.download(&u).unwrap();
    let w = dev
        .upload(&uh.iter().map(|v| -v).collect::<Vec<_>>())
        .unwrap();
    let kernel = Dot3Kernel::LastBlock;
    let cfg = kernel.default_config(n as u64, dev.props());
    let mut ws = Dot3Workspace::new(&dev, cfg.blocks).unwrap();
    let mut s = CgScalars::new(&dev, 4).unwrap();
    dot3_advance(&dev, kernel, cfg, &r, &u, &w, &mut ws, &mut s, 0).unwrap();
    let before = s.read_raw(&dev).unwrap();
    for _ in 0..3 {
        dot3_advance_next(&dev, kernel, cfg, &r, &u, &w, &mut ws, &mut s).unwrap();
    }
    let snap = s.read(&dev).unwrap();
    let h = snap.halt.expect("the start must halt");
    assert_eq!((h.code, h.iteration), (HaltCode::CurvatureNotPositive, 0));
    assert!(h.value < 0.0);
    assert_eq!(s.read_raw(&dev).unwrap(), before);
    let hist = s.read_history(&dev, 0, 4).unwrap();
    assert_eq!(
        hist[1], hist[0],
        "the slot after the halt holds the same dots"
    );
    assert_eq!(hist[2], [0.0; 3], "nothing beyond it");
}

autopcg_gpu::test_main! {
    gpu: [
        captured_work_runs_only_when_replayed,
        next_iteration_variant_matches_the_explicit_one,
        next_iteration_variant_freezes_after_a_halt,
    ],
}
