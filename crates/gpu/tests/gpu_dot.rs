//! GPU tests of dot.cu: every rung of the reduction ladder for every compiled block size, and
//! the fused three-dot reduction with the device-side Chronopoulos–Gear recurrence, against CPU
//! references. Without a CUDA device the runner reports each GPU test as ignored
//! (with AUTOPCG_REQUIRE_GPU=1 it fails instead); see autopcg_gpu::testing.
mod common;

use autopcg_gpu::kernels::dot::{
    dot, dot3_advance, dot_value, Dot3Kernel, Dot3Workspace, DotKernel, DotWorkspace,
};
use autopcg_gpu::scalars::{HaltCode, ScalarSnapshot};
use autopcg_gpu::{CgScalars, DeviceVec, GpuDevice, GpuError, LaunchConfig, DOT_BLOCK_SIZES};
use common::{rng, uniform};

const SIZES: [usize; 9] = [0, 1, 2, 31, 33, 1023, 1025, 4096, 65537];

fn cpu_dot(x: &[f64], y: &[f64]) -> (f64, f64) {
    let v = x.iter().zip(y).map(|(a, b)| a * b).sum();
    let s = x.iter().zip(y).map(|(a, b)| (a * b).abs()).sum();
    (v, s)
}

fn configs(dev: &GpuDevice, k: DotKernel, n: usize, threads: u32) -> Vec<LaunchConfig> {
    match k.elements_per_thread() {
        Some(e) => {
            let exact = LaunchConfig::per_item((n as u64).div_ceil(u64::from(e)), threads);
            vec![exact, LaunchConfig::new(threads, exact.blocks + 2)]
        }
        None => {
            let mut d = k.default_config(n as u64, dev.props());
            d.threads = threads;
            vec![
                d,
                LaunchConfig::new(threads, 1),
                LaunchConfig::new(threads, 7),
            ]
        }
    }
}

fn reduction_ladder_matches_cpu(dev: GpuDevice) {
    let mut r = rng(21);
    let mut ws = DotWorkspace::new(&dev, 4096).unwrap();
    for &n in &SIZES {
        let x = uniform(&mut r, n, -1.0, 1.0);
        let y = uniform(&mut r, n, -1.0, 1.0);
        let (want, scale) = cpu_dot(&x, &y);
        let (dx, dy) = (dev.upload(&x).unwrap(), dev.upload(&y).unwrap());
        for k in DotKernel::ALL {
            for bs in DOT_BLOCK_SIZES {
                for cfg in configs(&dev, k, n, bs) {
                    let got = dot_value(&dev, k, cfg, &dx, &dy, &mut ws).unwrap();
                    assert!(
                        (got - want).abs() <= 1e-10 * scale + 1e-300,
                        "{k} n={n} cfg={cfg}: GPU {got}, CPU {want}"
                    );
                }
            }
        }
    }
}

fn dot_of_zero_vectors_and_repeated_last_block(dev: GpuDevice) {
    let mut ws = DotWorkspace::new(&dev, 64).unwrap();
    let z = dev.alloc_zeros::<f64>(1000).unwrap();
    for k in DotKernel::ALL {
        let cfg = k.default_config(1000, dev.props());
        assert_eq!(
            dot_value(&dev, k, cfg, &z, &z, &mut ws).unwrap(),
            0.0,
            "{k}"
        );
    }
    // The ticket counter is reset by each launch: queue many without waiting.
    let ones = dev.upload(&vec![1.0; 3001]).unwrap();
    let twos = dev.upload(&vec![2.0; 3001]).unwrap();
    let cfg = LaunchConfig::new(256, 13);
    for _ in 0..50 {
        dot(&dev, DotKernel::LastBlock, cfg, &ones, &twos, &mut ws).unwrap();
    }
    assert_eq!(ws.result(&dev).unwrap(), 6002.0);
    dot(
        &dev,
        DotKernel::LastBlock,
        LaunchConfig::new(1024, 64),
        &ones,
        &ones,
        &mut ws,
    )
    .unwrap();
    assert_eq!(ws.result(&dev).unwrap(), 3001.0);
}

fn dot_checks_its_configuration(dev: GpuDevice) {
    let mut ws = DotWorkspace::new(&dev, 8).unwrap();
    let x = dev.upload(&[1.0; 5000]).unwrap();
    let short = dev.upload(&[1.0; 4999]).unwrap();
    let bad = [
        (DotKernel::Vec2, LaunchConfig::new(96, 1), &x),
        (DotKernel::Vec2, LaunchConfig::new(256, 9), &x),
        (DotKernel::Sequential, LaunchConfig::new(256, 8), &x),
        (DotKernel::FirstAdd, LaunchConfig::new(256, 1), &x),
        (DotKernel::Vec2, LaunchConfig::new(256, 1), &short),
    ];
    for (k, cfg, y) in bad {
        let e = dot(&dev, k, cfg, &x, y, &mut ws);
        assert!(
            matches!(e, Err(GpuError::Launch { .. })),
            "{k} {cfg}: {e:?}"
        );
    }
    // 5 blocks of 512 threads, two elements each, cover 5000 elements.
    assert_eq!(
        dot_value(
            &dev,
            DotKernel::FullUnroll,
            LaunchConfig::new(512, 5),
            &x,
            &x,
            &mut ws
        )
        .unwrap(),
        5000.0
    );
}

/// The host's rules (GearScalars::start / advance) plus the device's freezing after a halt:
/// the state a correct device buffer must hold after the reduction of `iter`.
#[derive(Debug, Clone, Copy)]
struct Ref {
    alpha: f64,
    beta: f64,
    gamma: f64,
    delta: f64,
    rr: f64,
    iter: u32,
    halt: Option<(HaltCode, f64, u32)>,
}

impl Ref {
    fn new() -> Ref {
        Ref {
            alpha: 0.0,
            beta: 0.0,
            gamma: 0.0,
            delta: 0.0,
            rr: 0.0,
            iter: 0,
            halt: None,
        }
    }

    fn step(&mut self, g: f64, d: f64, rr: f64, iter: u32) {
        if iter == 0 {
            self.halt = None;
        } else if self.halt.is_some() {
            return;
        }
        self.delta = d;
        self.rr = rr;
        self.iter = iter;
        let halt = |s: &mut Ref, c, v| s.halt = Some((c, v, iter));
        if !(g.is_finite() && d.is_finite() && rr.is_finite()) {
            return halt(self, HaltCode::NotFinite, 0.0);
        }
        if g <= 0.0 {
            return halt(self, HaltCode::GammaNotPositive, g);
        }
        if iter == 0 {
            if d <= 0.0 {
                return halt(self, HaltCode::CurvatureNotPositive, d);
            }
            self.alpha = g / d;
            self.beta = 0.0;
            self.gamma = g;
            return;
        }
        let beta = g / self.gamma;
        let curv = d - beta * g / self.alpha;
        if curv <= 0.0 || !curv.is_finite() {
            return halt(self, HaltCode::CurvatureNotPositive, curv);
        }
        self.alpha = g / curv;
        self.beta = beta;
        self.gamma = g;
    }

    fn check(&self, s: &ScalarSnapshot, what: &str) {
        let close = |a: f64, b: f64| {
            (a - b).abs() <= 1e-13 * b.abs() + 1e-300 || (a.is_nan() && b.is_nan())
        };
        assert!(
            close(s.alpha, self.alpha),
            "{what}: alpha {} vs {}",
            s.alpha,
            self.alpha
        );
        assert!(
            close(s.beta, self.beta),
            "{what}: beta {} vs {}",
            s.beta,
            self.beta
        );
        assert!(
            close(s.gamma, self.gamma),
            "{what}: gamma {} vs {}",
            s.gamma,
            self.gamma
        );
        assert!(
            close(s.delta, self.delta),
            "{what}: delta {} vs {}",
            s.delta,
            self.delta
        );
        assert!(close(s.rr, self.rr), "{what}: rr {} vs {}", s.rr, self.rr);
        assert_eq!(s.iteration, self.iter, "{what}: iteration");
        match (s.halt, self.halt) {
            (None, None) => {}
            (Some(h), Some((c, v, it))) => {
                assert_eq!((h.code, h.iteration), (c, it), "{what}: halt");
                assert!(close(h.value, v), "{what}: halt value {} vs {v}", h.value);
            }
            (got, want) => panic!("{what}: halt {got:?}, expected {want:?}"),
        }
    }
}

fn constant(dev: &GpuDevice, n: usize, v: f64) -> DeviceVec<f64> {
    dev.upload(&vec![v; n]).unwrap()
}

/// A scripted run with exactly representable dots: normal steps, a curvature halt, a frozen
/// step, restarts, a gamma halt, a NaN, a non-positive delta at the start and zero vectors.
fn dot3_recurrence_follows_the_host_rules(dev: GpuDevice) {
    let n = 1000;
    // (iteration, r, u, w) as constants; dots are n r u, n w u, n r r, all exact.
    let script: [(u32, f64, f64, f64); 12] = [
        (0, 1.0, 0.5, 0.25),
        (1, 0.5, 0.25, 0.5),
        (2, 0.25, 0.125, -1.0),
        (3, 1.0, 1.0, 1.0),
        (0, 1.0, 1.0, 1.0),
        (1, 1.0, -1.0, 1.0),
        (0, f64::NAN, 1.0, 1.0),
        (0, 1.0, 1.0, 0.0),
        (0, 0.0, 0.0, 0.0),
        (0, 1.0, 0.5, 0.5),
        (1, 0.5, 0.5, 0.5),
        (2, 0.25, 0.25, 0.5),
    ];
    let mut ws = Dot3Workspace::new(&dev, 1024).unwrap();
    for kernel in Dot3Kernel::ALL {
        for threads in [64, 256, 1024] {
            for blocks in [1, 3, 200] {
                let cfg = LaunchConfig::new(threads, blocks);
                let mut sc = CgScalars::new(&dev, 4).unwrap();
                let mut want = Ref::new();
                for (step, &(it, rv, uv, wv)) in script.iter().enumerate() {
                    let (r, u, w) = (
                        constant(&dev, n, rv),
                        constant(&dev, n, uv),
                        constant(&dev, n, wv),
                    );
                    dot3_advance(&dev, kernel, cfg, &r, &u, &w, &mut ws, &mut sc, it).unwrap();
                    let nf = n as f64;
                    let (g, d, rr) = (nf * rv * uv, nf * wv * uv, nf * rv * rv);
                    want.step(g, d, rr, it);
                    let what = format!("{kernel} {cfg} step {step} (iteration {it})");
                    want.check(&sc.read(&dev).unwrap(), &what);
                    let h = sc.read_history(&dev, it, it + 1).unwrap()[0];
                    for (got, exp) in h.iter().zip([g, d, rr]) {
                        assert!(
                            got == &exp || (got.is_nan() && exp.is_nan()),
                            "{what}: history {h:?}"
                        );
                    }
                }
                let last = sc.read(&dev).unwrap();
                assert!(last.halt.is_none() && last.iteration == 2 && last.beta > 0.0);
            }
        }
    }
}

fn dot3_matches_cpu_on_random_vectors(dev: GpuDevice) {
    let mut rg = rng(22);
    let mut ws = Dot3Workspace::new(&dev, 2048).unwrap();
    for &n in &SIZES {
        // u = D r with D > 0 keeps gamma positive; w is unrelated.
        let r = uniform(&mut rg, n, -1.0, 1.0);
        let d = uniform(&mut rg, n, 0.5, 2.0);
        let u: Vec<f64> = r.iter().zip(&d).map(|(a, b)| a * b).collect();
        let w = uniform(&mut rg, n, -1.0, 1.0);
        let (g, gs) = cpu_dot(&r, &u);
        let (de, ds) = cpu_dot(&w, &u);
        let (rr, rs) = cpu_dot(&r, &r);
        let (dr, du, dw) = (
            dev.upload(&r).unwrap(),
            dev.upload(&u).unwrap(),
            dev.upload(&w).unwrap(),
        );
        for kernel in Dot3Kernel::ALL {
            for bs in DOT_BLOCK_SIZES {
                let mut dflt = kernel.default_config(n as u64, dev.props());
                dflt.threads = bs;
                for cfg in [dflt, LaunchConfig::new(bs, 1), LaunchConfig::new(bs, 2048)] {
                    let mut sc = CgScalars::new(&dev, 2).unwrap();
                    dot3_advance(&dev, kernel, cfg, &dr, &du, &dw, &mut ws, &mut sc, 0).unwrap();
                    let h = sc.read_history(&dev, 0, 1).unwrap()[0];
                    let what = format!("{kernel} n={n} {cfg}");
                    for (got, (want, scale)) in h.iter().zip([(g, gs), (de, ds), (rr, rs)]) {
                        assert!(
                            (got - want).abs() <= 1e-10 * scale + 1e-300,
                            "{what}: {h:?} vs {g} {de} {rr}"
                        );
                    }
                    // The recurrence from the device's own dots.
                    let mut want = Ref::new();
                    want.step(h[0], h[1], h[2], 0);
                    want.check(&sc.read(&dev).unwrap(), &what);
                }
            }
        }
    }
}

fn dot3_checks_its_arguments(dev: GpuDevice) {
    let mut ws = Dot3Workspace::new(&dev, 4).unwrap();
    let mut sc = CgScalars::new(&dev, 2).unwrap();
    let v = constant(&dev, 10, 1.0);
    let s = constant(&dev, 9, 1.0);
    let cfg = LaunchConfig::new(64, 4);
    let k = Dot3Kernel::TwoPass;
    assert!(
        dot3_advance(&dev, k, cfg, &v, &v, &v, &mut ws, &mut sc, 2).is_err(),
        "beyond capacity"
    );
    assert!(
        dot3_advance(&dev, k, cfg, &v, &s, &v, &mut ws, &mut sc, 0).is_err(),
        "length"
    );
    // More blocks than the workspace holds; a block size no module is compiled for.
    for bad in [LaunchConfig::new(64, 5), LaunchConfig::new(100, 1)] {
        let r = dot3_advance(&dev, k, bad, &v, &v, &v, &mut ws, &mut sc, 0);
        assert!(r.is_err(), "{bad}");
    }
    dot3_advance(&dev, k, cfg, &v, &v, &v, &mut ws, &mut sc, 1).unwrap();
    assert_eq!(
        sc.read_history(&dev, 1, 2).unwrap(),
        vec![[10.0, 10.0, 10.0]]
    );
}

autopcg_gpu::test_main! {
    gpu: [
        reduction_ladder_matches_cpu,
        dot_of_zero_vectors_and_repeated_last_block,
        dot_checks_its_configuration,
        dot3_recurrence_follows_the_host_rules,
        dot3_matches_cpu_on_random_vectors,
        dot3_checks_its_arguments,
    ],
}
