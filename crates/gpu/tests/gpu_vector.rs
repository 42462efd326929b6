//! GPU tests of vector.cu and precond.cu against CPU references on seeded random inputs.
//! Without a CUDA device the runner reports each GPU test as ignored
//! (with AUTOPCG_REQUIRE_GPU=1 it fails instead); see autopcg_gpu::testing.
mod common;

use autopcg_gpu::kernels::precond::{jacobi_apply, Loads};
use autopcg_gpu::kernels::vector::{axpy, cg_update, xpay, CgVectors, UpdateU, VectorVariant};
use autopcg_gpu::scalars::{CG_ALPHA, CG_BETA, CG_HALT, CG_SCALARS_LEN};
use autopcg_gpu::{CgScalars, DeviceVec, GpuDevice, GpuError, LaunchConfig};
use common::{assert_close, rng, uniform};

/// Sizes around block and pair boundaries.
const SIZES: [usize; 9] = [1, 2, 3, 63, 64, 65, 257, 1000, 100_003];

/// The configurations each variant is tried with for n elements: its default, and small ones
/// that make grid-stride loops take many trips (or exactly cover, for per-element variants).
fn configs(dev: &GpuDevice, v: VectorVariant, n: usize) -> Vec<LaunchConfig> {
    let mut c = vec![v.default_config(n as u64, dev.props())];
    match v.items(n as u64) {
        Some(items) => {
            c.push(LaunchConfig::per_item(items, 32));
            c.push(LaunchConfig::per_item(items, 1024));
            c.push(LaunchConfig::per_item(items, 96));
        }
        None => {
            c.push(LaunchConfig::new(32, 1));
            c.push(LaunchConfig::new(128, 3));
            c.push(LaunchConfig::new(1024, 2));
            c.push(LaunchConfig::new(96, 5));
        }
    }
    c
}

/// The signature [`axpy`] and [`xpay`] share.
type VectorFn = fn(
    &GpuDevice,
    VectorVariant,
    LaunchConfig,
    f64,
    &DeviceVec<f64>,
    &mut DeviceVec<f64>,
) -> Result<(), GpuError>;

fn axpy_and_xpay_match_cpu(dev: GpuDevice) {
    let mut r = rng(11);
    for &n in &SIZES {
        let x = uniform(&mut r, n, -1.0, 1.0);
        let y0 = uniform(&mut r, n, -1.0, 1.0);
        let a = -0.75;
        let want_axpy: Vec<f64> = (0..n).map(|i| y0[i] + a * x[i]).collect();
        let want_xpay: Vec<f64> = (0..n).map(|i| x[i] + a * y0[i]).collect();
        let scale_axpy: Vec<f64> = (0..n).map(|i| y0[i].abs() + (a * x[i]).abs()).collect();
        let scale_xpay: Vec<f64> = (0..n).map(|i| x[i].abs() + (a * y0[i]).abs()).collect();
        let dx = dev.upload(&x).unwrap();
        for v in VectorVariant::ALL {
            for cfg in configs(&dev, v, n) {
                let cases = [
                    ("axpy", axpy as VectorFn, &want_axpy, &scale_axpy),
                    ("xpay", xpay, &want_xpay, &scale_xpay),
                ];
                for (name, op, want, scale) in cases {
                    let mut dy = dev.upload(&y0).unwrap();
                    op(&dev, v, cfg, a, &dx, &mut dy).unwrap();
                    let got = dev.download(&dy).unwrap();
                    assert_close(
                        &got,
                        want,
                        scale,
                        1e-15,
                        &format!("{name} {v:?} n={n} cfg={cfg}"),
                    );
                }
            }
        }
    }
}

fn vector_kernels_check_their_arguments(dev: GpuDevice) {
    let x = dev.upload(&[1.0; 1000]).unwrap();
    let mut y = dev.upload(&[1.0; 1000]).unwrap();
    // y += x with `variant` on `threads` x `blocks`.
    let add = |variant, threads, blocks, x: &DeviceVec<f64>, y: &mut DeviceVec<f64>| {
        axpy(&dev, variant, LaunchConfig::new(threads, blocks), 1.0, x, y)
    };
    // Too few blocks for one element (or pair) per thread: refused before launching, y untouched.
    for (variant, blocks) in [(VectorVariant::Elem, 3), (VectorVariant::ElemV2, 1)] {
        let e = add(variant, 256, blocks, &x, &mut y);
        assert!(matches!(e, Err(GpuError::Launch { .. })), "{e:?}");
    }
    // 2 blocks of 256 cover 1000 elements as 500 pairs.
    add(VectorVariant::ElemV2, 256, 2, &x, &mut y).unwrap();
    assert_eq!(dev.download(&y).unwrap(), vec![2.0; 1000]);
    // Too many threads per block, no block, and x shorter than y: refused, y untouched.
    let short = dev.upload(&[1.0; 999]).unwrap();
    for (threads, blocks, x) in [(2048, 1, &x), (256, 0, &x), (256, 1, &short)] {
        let e = add(VectorVariant::Grid, threads, blocks, x, &mut y);
        assert!(matches!(e, Err(GpuError::Launch { .. })), "{e:?}");
    }
    assert_eq!(dev.download(&y).unwrap(), vec![2.0; 1000]);
    // Empty vectors: nothing to do, no error.
    let e0 = dev.upload::<f64>(&[]).unwrap();
    let mut f0 = dev.upload::<f64>(&[]).unwrap();
    for v in VectorVariant::ALL {
        add(v, 256, 1, &e0, &mut f0).unwrap();
    }
}

/// The CPU reference of the fused update.
#[allow(clippy::too_many_arguments)]
fn cg_update_cpu(
    alpha: f64,
    beta: f64,
    u: &[f64],
    w: &[f64],
    p: &mut [f64],
    s: &mut [f64],
    x: &mut [f64],
    r: &mut [f64],
) {
    for i in 0..u.len() {
        p[i] = if beta == 0.0 {
            u[i]
        } else {
            u[i] + beta * p[i]
        };
        s[i] = if beta == 0.0 {
            w[i]
        } else {
            w[i] + beta * s[i]
        };
        x[i] += alpha * p[i];
        r[i] -= alpha * s[i];
    }
}

/// Runs [`cg_update`] with the given variant, configuration and scalars, u and w, on device
/// copies of the starting p, s, x and r (`start`), and checks the updated p, s, x and r against
/// the CPU's (`want`) within 1e-15 of `scale`; a failure names `what` and the vector.
#[allow(clippy::too_many_arguments)]
fn check_cg_update(
    dev: &GpuDevice,
    (v, cfg, sc): (VectorVariant, LaunchConfig, &CgScalars),
    u: UpdateU<'_>,
    w: &DeviceVec<f64>,
    start: [&[f64]; 4],
    want: [&[f64]; 4],
    scale: &[f64],
    what: &str,
) {
    let [mut dp, mut ds, mut dx, mut dr] = start.map(|h| dev.upload(h).unwrap());
    let vecs = CgVectors {
        u,
        w,
        p: &mut dp,
        s: &mut ds,
        x: &mut dx,
        r: &mut dr,
    };
    cg_update(dev, v, cfg, sc, vecs).unwrap();
    for (name, got, want) in [
        ("p", dp, want[0]),
        ("s", ds, want[1]),
        ("x", dx, want[2]),
        ("r", dr, want[3]),
    ] {
        let got = dev.download(&got).unwrap();
        assert_close(&got, want, scale, 1e-15, &format!("{what}: {name}"));
    }
}

fn cg_update_matches_cpu(dev: GpuDevice) {
    let mut rg = rng(12);
    let mut sc = CgScalars::new(&dev, 4).unwrap();
    for &n in &SIZES {
        let h: Vec<Vec<f64>> = (0..6).map(|_| uniform(&mut rg, n, -1.0, 1.0)).collect();
        let (u, w) = (&h[0], &h[1]);
        for (alpha, beta) in [(0.3, 0.7), (1.25, 0.0)] {
            let mut raw = [0.0; CG_SCALARS_LEN];
            raw[CG_ALPHA] = alpha;
            raw[CG_BETA] = beta;
            sc.write_raw(&dev, &raw).unwrap();
            // With beta = 0 the old p and s must not be read: give them NaNs.
            let p0: Vec<f64> = if beta == 0.0 {
                vec![f64::NAN; n]
            } else {
                h[2].clone()
            };
            let s0: Vec<f64> = if beta == 0.0 {
                vec![f64::NAN; n]
            } else {
                h[3].clone()
            };
            let (mut p, mut s, mut x, mut r) = (p0.clone(), s0.clone(), h[4].clone(), h[5].clone());
            cg_update_cpu(alpha, beta, u, w, &mut p, &mut s, &mut x, &mut r);
            let scale = vec![4.0; n]; // every operand is below 1 in magnitude, alpha, beta < 2
            let du = dev.upload(u).unwrap();
            let dw = dev.upload(w).unwrap();
            for v in VectorVariant::ALL {
                for cfg in configs(&dev, v, n) {
                    check_cg_update(
                        &dev,
                        (v, cfg, &sc),
                        UpdateU::Separate(&du),
                        &dw,
                        [&p0, &s0, &h[4], &h[5]],
                        [&p, &s, &x, &r],
                        &scale,
                        &format!("cg_update {v:?} n={n} cfg={cfg} beta={beta}"),
                    );
                }
            }
        }
    }
}

/// The fused-preconditioner forms against the separate one on the CPU: without a
/// preconditioner u is r itself; with Jacobi fused, u is read for p and then holds
/// `inv_diag .* r_new`.
fn cg_update_fused_forms_match_cpu(dev: GpuDevice) {
    let mut rg = rng(14);
    let mut sc = CgScalars::new(&dev, 4).unwrap();
    for &n in &SIZES {
        let h: Vec<Vec<f64>> = (0..6).map(|_| uniform(&mut rg, n, -1.0, 1.0)).collect();
        let d = uniform(&mut rg, n, 0.5, 2.0);
        let (alpha, beta) = (0.3, 0.7);
        let mut raw = [0.0; CG_SCALARS_LEN];
        raw[CG_ALPHA] = alpha;
        raw[CG_BETA] = beta;
        sc.write_raw(&dev, &raw).unwrap();
        let scale = vec![4.0; n];
        let dw = dev.upload(&h[1]).unwrap();
        let dd = dev.upload(&d).unwrap();
        for v in VectorVariant::ALL {
            for cfg in configs(&dev, v, n) {
                for jacobi in [false, true] {
                    // u is r without a preconditioner, its own vector with Jacobi.
                    let u0 = if jacobi { h[0].clone() } else { h[5].clone() };
                    let (mut p, mut s, mut x, mut r) =
                        (h[2].clone(), h[3].clone(), h[4].clone(), h[5].clone());
                    cg_update_cpu(alpha, beta, &u0, &h[1], &mut p, &mut s, &mut x, &mut r);
                    let mut du = dev.upload(&u0).unwrap();
                    let u = if jacobi {
                        UpdateU::Jacobi {
                            inv_diag: &dd,
                            u: &mut du,
                        }
                    } else {
                        UpdateU::IsR
                    };
                    let what = format!("cg_update (jacobi fused: {jacobi}) {v:?} n={n} cfg={cfg}");
                    check_cg_update(
                        &dev,
                        (v, cfg, &sc),
                        u,
                        &dw,
                        [&h[2], &h[3], &h[4], &h[5]],
                        [&p, &s, &x, &r],
                        &scale,
                        &what,
                    );
                    let u_want: Vec<f64> = if jacobi {
                        (0..n).map(|i| d[i] * r[i]).collect()
                    } else {
                        u0.clone()
                    };
                    assert_close(
                        &dev.download(&du).unwrap(),
                        &u_want,
                        &scale,
                        1e-15,
                        &format!("{what}: u"),
                    );
                }
            }
        }
    }
}

fn cg_update_does_nothing_after_a_halt(dev: GpuDevice) {
    let n = 1001;
    let mut sc = CgScalars::new(&dev, 1).unwrap();
    let mut raw = [0.0; CG_SCALARS_LEN];
    raw[CG_ALPHA] = 1.0;
    raw[CG_BETA] = 1.0;
    raw[CG_HALT] = 2.0;
    sc.write_raw(&dev, &raw).unwrap();
    let ones = dev.upload(&vec![1.0; n]).unwrap();
    let mut bufs: Vec<_> = (0..4).map(|_| dev.upload(&vec![5.0; n]).unwrap()).collect();
    for v in VectorVariant::ALL {
        let cfg = v.default_config(n as u64, dev.props());
        let [p, s, x, r] = bufs.as_mut_slice() else {
            unreachable!()
        };
        let vecs = CgVectors {
            u: UpdateU::Separate(&ones),
            w: &ones,
            p,
            s,
            x,
            r,
        };
        cg_update(&dev, v, cfg, &sc, vecs).unwrap();
    }
    for b in &bufs {
        assert_eq!(dev.download(b).unwrap(), vec![5.0; n]);
    }
}

fn precond_kernels_match_cpu(dev: GpuDevice) {
    let mut rg = rng(13);
    for &n in &SIZES {
        let d = uniform(&mut rg, n, 0.5, 2.0);
        let r = uniform(&mut rg, n, -1.0, 1.0);
        let want: Vec<f64> = (0..n).map(|i| d[i] * r[i]).collect();
        let dd = dev.upload(&d).unwrap();
        let dr = dev.upload(&r).unwrap();
        for loads in [Loads::Scalar, Loads::Double2] {
            let kernel = autopcg_gpu::kernels::precond::PrecondKernel::Jacobi(loads);
            for cfg in [
                kernel.default_config(n as u64, dev.props()),
                LaunchConfig::new(32, 1),
                LaunchConfig::new(96, 7),
            ] {
                // Exact: one rounding on both sides.
                let mut z = dev.alloc_zeros::<f64>(n).unwrap();
                jacobi_apply(&dev, loads, cfg, &dd, &dr, &mut z).unwrap();
                assert_eq!(
                    dev.download(&z).unwrap(),
                    want,
                    "jacobi {loads:?} n={n} {cfg}"
                );
            }
        }
        let mut z = dev.alloc_zeros::<f64>(n + 1).unwrap();
        assert!(jacobi_apply(
            &dev,
            Loads::Scalar,
            LaunchConfig::new(32, 1),
            &dd,
            &dr,
            &mut z
        )
        .is_err());
    }
}

autopcg_gpu::test_main! {
    gpu: [
        axpy_and_xpay_match_cpu,
        vector_kernels_check_their_arguments,
        cg_update_matches_cpu,
        cg_update_fused_forms_match_cpu,
        cg_update_does_nothing_after_a_halt,
        precond_kernels_match_cpu,
    ],
}
