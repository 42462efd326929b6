//! GPU tests of the SpMV kernels with the three dots of the PCG iteration in their epilogue
//! (`spmv_*_dot3_next`): for CSR scalar, CSR vector with every lane count, ELL and DIA, at
//! several launches, the product equals the plain kernel's bit for bit, the dots the CPU's to
//! rounding, and the recurrence they run equals the one the separate reduction
//! (`dot3_advance_next`) runs from the same state; also with u and r one vector (no
//! preconditioner), repeated calls (the ticket counter is left at 0), and the refusals of bad
//! arguments. Without a CUDA device the runner reports each GPU test as ignored (with
//! AUTOPCG_REQUIRE_GPU=1 it fails instead); see autopcg_gpu::testing.
mod common;

use autopcg_gpu::kernels::dot::{dot3_advance, dot3_advance_next, Dot3Kernel, Dot3Workspace};
use autopcg_gpu::kernels::spmv::{
    spmv_csr, spmv_csr_dot3_next, spmv_dia, spmv_dia_dot3_next, spmv_ell, spmv_ell_dot3_next,
    Dot3Epilogue, SpmvKernel,
};
use autopcg_gpu::{
    CgScalars, DeviceCsr, DeviceDia, DeviceEll, DeviceVec, GpuDevice, GpuError, LaunchConfig,
};
use autopcg_sparse::CsrMatrix;
use common::{poisson2d, random_csr, rng, to_dia, to_ell, uniform};

/// The matrix in every format a dot3 variant reads.
struct Operand {
    csr: DeviceCsr,
    ell: DeviceEll,
    dia: DeviceDia,
}

impl Operand {
    fn new(dev: &GpuDevice, a: &CsrMatrix) -> Operand {
        let (nr, nc) = (a.nrows(), a.ncols());
        let e = to_ell(a);
        let (offs, data) = to_dia(a);
        Operand {
            csr: DeviceCsr::upload(dev, a).unwrap(),
            ell: DeviceEll::from_parts(dev, nr, nc, e.width, &e.cols, &e.vals).unwrap(),
            dia: DeviceDia::from_parts(dev, nr, nc, &offs, &data).unwrap(),
        }
    }

    fn plain(
        &self,
        dev: &GpuDevice,
        k: SpmvKernel,
        cfg: LaunchConfig,
        u: &DeviceVec<f64>,
        w: &mut DeviceVec<f64>,
    ) -> Result<(), GpuError> {
        match k {
            SpmvKernel::Ell => spmv_ell(dev, &self.ell, cfg, u, w),
            SpmvKernel::Dia => spmv_dia(dev, &self.dia, cfg, u, w),
            _ => spmv_csr(dev, &self.csr, k, cfg, u, w),
        }
    }

    fn fused(
        &self,
        dev: &GpuDevice,
        k: SpmvKernel,
        cfg: LaunchConfig,
        u: &DeviceVec<f64>,
        w: &mut DeviceVec<f64>,
        e: Dot3Epilogue<'_>,
    ) -> Result<(), GpuError> {
        match k {
            SpmvKernel::Ell => spmv_ell_dot3_next(dev, &self.ell, cfg, u, w, e),
            SpmvKernel::Dia => spmv_dia_dot3_next(dev, &self.dia, cfg, u, w, e),
            _ => spmv_csr_dot3_next(dev, &self.csr, k, cfg, u, w, e),
        }
    }
}

/// A symmetric matrix with a dominant diagonal: `random_csr` symmetrised plus a large
/// diagonal, so that rows have different lengths (some longer than a warp).
fn spd_like(seed: u64, n: usize) -> CsrMatrix {
    let b = random_csr(seed, n, n);
    let (mut r, mut c, mut v) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..n {
        let (cols, vals) = b.row(i);
        for (&j, &x) in cols.iter().zip(vals) {
            r.extend([i as u32, j]);
            c.extend([j, i as u32]);
            v.extend([0.5 * x, 0.5 * x]);
        }
        r.push(i as u32);
        c.push(i as u32);
        v.push(50.0);
    }
    CsrMatrix::from_triplets(n, n, &r, &c, &v).unwrap()
}

/// (g, d, q) = ((r, u), (w, u), (r, r)) on the CPU, and the sums of the terms' magnitudes.
fn cpu_dots(r: &[f64], u: &[f64], w: &[f64]) -> ([f64; 3], [f64; 3]) {
    let (mut v, mut s) = ([0.0; 3], [0.0; 3]);
    for i in 0..r.len() {
        let t = [r[i] * u[i], w[i] * u[i], r[i] * r[i]];
        for k in 0..3 {
            v[k] += t[k];
            s[k] += t[k].abs();
        }
    }
    (v, s)
}

/// Scalars after a start (iteration 0) from fixed dots, so the next reduction is iteration 1
/// and runs the full recurrence (beta, curvature) from a known state.
fn started(dev: &GpuDevice, n: usize, ws: &mut Dot3Workspace) -> CgScalars {
    let mut sc = CgScalars::new(dev, 8).unwrap();
    let ones = dev.upload(&vec![1.0; n]).unwrap();
    let cfg = LaunchConfig::new(256, 4);
    dot3_advance(
        dev,
        Dot3Kernel::LastBlock,
        cfg,
        &ones,
        &ones,
        &ones,
        ws,
        &mut sc,
        0,
    )
    .unwrap();
    sc
}

fn launches(dev: &GpuDevice, k: SpmvKernel, n: usize) -> Vec<LaunchConfig> {
    let wave = LaunchConfig::grid_stride(k.work_items(n as u64, 0), 256, dev.props());
    vec![
        wave,
        LaunchConfig::new(32, 1),
        LaunchConfig::new(128, 3),
        LaunchConfig::new(1024, 2),
    ]
}

fn dot3_variants_match_the_plain_kernel_and_the_separate_reduction(dev: GpuDevice) {
    let mut rg = rng(41);
    let mut ws = Dot3Workspace::new(&dev, 4096).unwrap();
    let cases = [
        ("poisson 30x30", poisson2d(30)),
        ("uneven rows 777", spd_like(42, 777)),
        (
            "n = 1",
            CsrMatrix::from_triplets(1, 1, &[0], &[0], &[3.0]).unwrap(),
        ),
    ];
    for (label, a) in &cases {
        let n = a.nrows();
        let op = Operand::new(&dev, a);
        let r = uniform(&mut rg, n, -1.0, 1.0);
        let d = uniform(&mut rg, n, 0.5, 2.0);
        let u: Vec<f64> = r.iter().zip(&d).map(|(x, y)| x * y).collect();
        let product = |x: &[f64]| {
            let mut y = vec![0.0; n];
            a.spmv(x, &mut y);
            y
        };
        let w_cpu = product(&u);
        let (dr, du) = (dev.upload(&r).unwrap(), dev.upload(&u).unwrap());
        for k in SpmvKernel::with_dot3_variant() {
            for cfg in launches(&dev, k, n) {
                for u_is_r in [false, true] {
                    let what = format!("{label}: {} {cfg} u_is_r={u_is_r}", k);
                    let uu = if u_is_r { &dr } else { &du };
                    let u_host = if u_is_r { &r } else { &u };
                    // The plain kernel and the separate reduction.
                    let mut w_plain = dev.upload(&vec![f64::NAN; n]).unwrap();
                    let mut sc_sep = started(&dev, n, &mut ws);
                    op.plain(&dev, k, cfg, uu, &mut w_plain).unwrap();
                    let red = LaunchConfig::new(256, 7);
                    dot3_advance_next(
                        &dev,
                        Dot3Kernel::LastBlock,
                        red,
                        &dr,
                        uu,
                        &w_plain,
                        &mut ws,
                        &mut sc_sep,
                    )
                    .unwrap();
                    // The fused kernel, twice from the same state (the counter is reset).
                    let mut w = dev.upload(&vec![f64::NAN; n]).unwrap();
                    for round in 0..2 {
                        let mut sc = started(&dev, n, &mut ws);
                        let e = Dot3Epilogue {
                            r: &dr,
                            ws: &mut ws,
                            scalars: &mut sc,
                        };
                        op.fused(&dev, k, cfg, uu, &mut w, e).unwrap();
                        let got = dev.download(&w).unwrap();
                        let want = dev.download(&w_plain).unwrap();
                        assert!(
                            got.iter()
                                .zip(&want)
                                .all(|(a, b)| a.to_bits() == b.to_bits()),
                            "{what} round {round}: the product differs from the plain kernel's"
                        );
                        let w_host = if u_is_r { product(&r) } else { w_cpu.clone() };
                        let (dots, scale) = cpu_dots(&r, u_host, &w_host);
                        let h = sc.read_history(&dev, 1, 2).unwrap()[0];
                        for i in 0..3 {
                            assert!(
                                (h[i] - dots[i]).abs() <= 1e-12 * scale[i] + 1e-300,
                                "{what}: dots {h:?}, CPU {dots:?}"
                            );
                        }
                        let s = sc.read(&dev).unwrap();
                        let t = sc_sep.read(&dev).unwrap();
                        assert_eq!(s.iteration, 1, "{what}");
                        assert_eq!(s.halt, t.halt, "{what}");
                        for (x, y, name) in [
                            (s.alpha, t.alpha, "alpha"),
                            (s.beta, t.beta, "beta"),
                            (s.gamma, t.gamma, "gamma"),
                            (s.delta, t.delta, "delta"),
                        ] {
                            assert!(
                                (x - y).abs() <= 1e-11 * y.abs().max(1e-300),
                                "{what}: {name} {x} fused, {y} separate"
                            );
                        }
                    }
                }
            }
        }
    }
}

fn dot3_variants_refuse_bad_arguments(dev: GpuDevice) {
    let a = poisson2d(10);
    let n = a.nrows();
    let op = Operand::new(&dev, &a);
    let mut ws = Dot3Workspace::new(&dev, 4).unwrap();
    let mut sc = CgScalars::new(&dev, 4).unwrap();
    let v = dev.upload(&vec![1.0; n]).unwrap();
    let short = dev.upload(&vec![1.0; n - 1]).unwrap();
    let mut w = dev.upload(&vec![0.0; n]).unwrap();
    let ok = LaunchConfig::new(64, 4);
    let mut run = |k: SpmvKernel, cfg: LaunchConfig, r: &DeviceVec<f64>| {
        let e = Dot3Epilogue {
            r,
            ws: &mut ws,
            scalars: &mut sc,
        };
        op.fused(&dev, k, cfg, &v, &mut w, e)
            .map(|_| ())
            .map_err(|e| e.to_string())
    };
    run(SpmvKernel::Dia, ok, &v).unwrap();
    // Not whole warps; more blocks than the workspace holds; r of the wrong length.
    let e = run(SpmvKernel::Dia, LaunchConfig::new(48, 4), &v).unwrap_err();
    assert!(e.contains("warps"), "{e}");
    let e = run(SpmvKernel::Ell, LaunchConfig::new(64, 5), &v).unwrap_err();
    assert!(e.contains("workspace"), "{e}");
    let e = run(SpmvKernel::CsrScalar, ok, &short).unwrap_err();
    assert!(e.contains("r has"), "{e}");
    // Kernels without the variant.
    for k in [SpmvKernel::CsrMerge, SpmvKernel::CooAtomic] {
        assert!(run(k, ok, &v).is_err(), "{k}");
    }
    // A matrix that is not square.
    let rect = random_csr(5, 20, 30);
    let d = DeviceCsr::upload(&dev, &rect).unwrap();
    let (x, r20) = (
        dev.upload(&[1.0; 30]).unwrap(),
        dev.upload(&[1.0; 20]).unwrap(),
    );
    let mut y = dev.upload(&[0.0; 20]).unwrap();
    let e = spmv_csr_dot3_next(
        &dev,
        &d,
        SpmvKernel::CsrScalar,
        ok,
        &x,
        &mut y,
        Dot3Epilogue {
            r: &r20,
            ws: &mut ws,
            scalars: &mut sc,
        },
    )
    .unwrap_err();
    assert!(e.to_string().contains("square"), "{e}");
}

autopcg_gpu::test_main! {
    gpu: [
        dot3_variants_match_the_plain_kernel_and_the_separate_reduction,
        dot3_variants_refuse_bad_arguments,
    ],
}
