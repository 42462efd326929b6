//! GPU tests of the SpMV kernels in every format against `CsrMatrix::spmv`, on seeded random
//! matrices with empty rows and rows longer than a warp, a banded matrix, n = 1 and empty
//! matrices; the merge-path CSR kernel also on power-law matrices and rows longer than many
//! tiles, and its tile partition against a walk of the merge path on the CPU; the add variants
//! of the CSR row kernels (`y += A x`, the halo part of a row block) against the same products
//! added to a random y. Without a CUDA device the runner reports each GPU test as ignored
//! (with AUTOPCG_REQUIRE_GPU=1 it fails instead); see autopcg_gpu::testing.
mod common;

use autopcg_gpu::kernels::blocks::spmv_csr_add;
use autopcg_gpu::kernels::spmv::{
    spmv_coo, spmv_coo_accumulate, spmv_csr, spmv_dia, spmv_ell, spmv_hyb, SpmvKernel,
};
use autopcg_gpu::{
    DeviceCoo, DeviceCsr, DeviceDia, DeviceEll, DeviceHyb, DeviceVec, GpuDevice, GpuError,
    LaunchConfig,
};
use autopcg_sparse::CsrMatrix;
use common::{
    abs_spmv, assert_close, one_long_row, poisson2d, random_csr, rng, tiny_matrices, to_coo,
    to_dia, to_ell, to_hyb, uniform,
};
use rand::Rng;

/// The test matrices: (label, matrix).
fn matrices() -> Vec<(String, CsrMatrix)> {
    let mut v = vec![
        ("random 700x700".to_string(), random_csr(31, 700, 700)),
        ("random 300x500".to_string(), random_csr(32, 300, 500)),
        ("random 257x40".to_string(), random_csr(33, 257, 40)),
        ("poisson 23x23".to_string(), poisson2d(23)),
    ];
    v.extend(tiny_matrices(2.5));
    // One dense row of 1000 entries among short ones: far longer than a warp.
    v.push(("one long row".to_string(), one_long_row()));
    v
}

/// Launch configurations to try for `kernel`: the default, one block (long grid-stride loops),
/// and an odd block count; `odd_threads` adds a block size that is not a whole number of warps.
fn configs(
    dev: &GpuDevice,
    kernel: SpmvKernel,
    a: &CsrMatrix,
    odd_threads: bool,
) -> Vec<LaunchConfig> {
    let mut c = vec![
        kernel.default_config(a.nrows() as u64, a.nnz() as u64, dev.props()),
        LaunchConfig::new(32, 1),
        LaunchConfig::new(128, 3),
        LaunchConfig::new(1024, 1),
    ];
    if odd_threads {
        c.push(LaunchConfig::new(48, 5));
    }
    c
}

fn check(
    dev: &GpuDevice,
    got: &autopcg_gpu::DeviceVec<f64>,
    want: &[f64],
    scale: &[f64],
    what: &str,
) {
    assert_close(&dev.download(got).unwrap(), want, scale, 1e-12, what);
}

fn spmv_all_formats_match_cpu(dev: GpuDevice) {
    let mut rg = rng(34);
    for (label, a) in matrices() {
        let (nr, nc) = (a.nrows(), a.ncols());
        for xkind in ["random", "zero"] {
            let x = if xkind == "zero" {
                vec![0.0; nc]
            } else {
                uniform(&mut rg, nc, -1.0, 1.0)
            };
            let want = a.mul_vec(&x);
            let scale = abs_spmv(&a, &x);
            let dx = dev.upload(&x).unwrap();
            // Poisoned output: every kernel must overwrite all of y (COO zeroes it itself).
            let poison = vec![f64::NAN; nr];
            // Runs `spmv` into a poisoned y and checks y against the CPU's product.
            let run = |what: String, spmv: &dyn Fn(&mut DeviceVec<f64>) -> Result<(), GpuError>| {
                let mut y = dev.upload(&poison).unwrap();
                spmv(&mut y).unwrap();
                check(
                    &dev,
                    &y,
                    &want,
                    &scale,
                    &format!("{what} on {label}, x {xkind}"),
                );
            };

            let mut csr = DeviceCsr::upload(&dev, &a).unwrap();
            assert_eq!((csr.nrows(), csr.ncols(), csr.nnz()), (nr, nc, a.nnz()));
            csr.prepare_merge(&dev).unwrap();
            let mut csr_kernels = vec![SpmvKernel::CsrScalar];
            csr_kernels.extend(autopcg_gpu::kernels::spmv::CSR_LANES.map(SpmvKernel::CsrVector));
            csr_kernels.push(SpmvKernel::CsrMerge);
            for k in csr_kernels {
                let odd = !k.needs_whole_warps();
                let mut cfgs = configs(&dev, k, &a, odd);
                if k == SpmvKernel::CsrMerge {
                    // Compiled for at most MERGE_MAX_THREADS threads per block.
                    cfgs.retain(|c| c.threads <= autopcg_gpu::kernels::spmv::MERGE_MAX_THREADS);
                }
                for cfg in cfgs {
                    run(format!("{k} {cfg}"), &|y| {
                        spmv_csr(&dev, &csr, k, cfg, &dx, y)
                    });
                }
            }

            let e = to_ell(&a);
            let ell = DeviceEll::from_parts(&dev, nr, nc, e.width, &e.cols, &e.vals).unwrap();
            for cfg in configs(&dev, SpmvKernel::Ell, &a, true) {
                run(format!("spmv_ell {cfg}"), &|y| {
                    spmv_ell(&dev, &ell, cfg, &dx, y)
                });
            }

            let (offs, data) = to_dia(&a);
            let dia = DeviceDia::from_parts(&dev, nr, nc, &offs, &data).unwrap();
            for cfg in configs(&dev, SpmvKernel::Dia, &a, true) {
                run(format!("spmv_dia {cfg}"), &|y| {
                    spmv_dia(&dev, &dia, cfg, &dx, y)
                });
            }

            let (cr, cc, cv) = to_coo(&a);
            let coo = DeviceCoo::from_parts(&dev, nr, nc, &cr, &cc, &cv).unwrap();
            for k in [SpmvKernel::CooAtomic, SpmvKernel::CooSegment] {
                for cfg in configs(&dev, k, &a, !k.needs_whole_warps()) {
                    run(format!("{k} {cfg}"), &|y| {
                        spmv_coo(&dev, &coo, k, cfg, &dx, y)
                    });
                }
            }

            for h in [0usize, 1, 3] {
                let (he, (hr, hc, hv)) = to_hyb(&a, h);
                let hyb = DeviceHyb::from_parts(
                    DeviceEll::from_parts(&dev, nr, nc, he.width, &he.cols, &he.vals).unwrap(),
                    DeviceCoo::from_parts(&dev, nr, nc, &hr, &hc, &hv).unwrap(),
                )
                .unwrap();
                for k in [SpmvKernel::CooAtomic, SpmvKernel::CooSegment] {
                    let ell_cfg = SpmvKernel::Ell.default_config(nr as u64, 0, dev.props());
                    for coo_cfg in configs(&dev, k, &a, false) {
                        run(format!("hyb H={h} + {k} {coo_cfg}"), &|y| {
                            spmv_hyb(&dev, &hyb, ell_cfg, k, coo_cfg, &dx, y)
                        });
                    }
                }
            }
        }
    }
}

/// Matrices with very uneven rows, for the merge-path kernel.
fn uneven_matrices() -> Vec<(String, CsrMatrix)> {
    use autopcg_sparse::families::random_powerlaw_spd;
    let mut v = vec![
        (
            "power-law 5000, mean 10, alpha 1.1".to_string(),
            random_powerlaw_spd(5000, 10.0, 1.1, 61).unwrap(),
        ),
        (
            "power-law 777, mean 30, alpha 0.9".to_string(),
            random_powerlaw_spd(777, 30.0, 0.9, 62).unwrap(),
        ),
        ("random 1001x999".to_string(), random_csr(63, 1001, 999)),
    ];
    // Rows spanning many tiles (5000 entries, about 22 tiles of 224 steps) around empty rows
    // and single entries; the last row long as well.
    let n = 300;
    let m = 5000;
    let (mut r, mut c, mut x) = (vec![], vec![], vec![]);
    let mut rg = rng(64);
    for i in 0..n {
        let len = match i {
            0 | 150 | 299 => m,
            _ if i % 4 == 0 => 0,
            _ => rg.random_range(1..4),
        };
        for j in 0..len {
            r.push(i as u32);
            c.push(((j * 7 + i) % m) as u32);
            x.push(rg.random_range(-1.0..1.0));
        }
    }
    v.push((
        "rows of 5000 entries".to_string(),
        CsrMatrix::from_triplets(n, m, &r, &c, &x).unwrap(),
    ));
    v
}

/// The row at which the merge path enters each tile of `tile` steps, walking the path on the
/// CPU: from (i, j) the path takes entry j while j < indptr[i + 1], else the end of row i.
fn walk_tile_rows(a: &CsrMatrix, tile: u64) -> Vec<u32> {
    let ptr = a.indptr();
    let total = (a.nrows() + a.nnz()) as u64;
    let ntiles = total.div_ceil(tile);
    let (mut i, mut j, mut d) = (0usize, 0u32, 0u64);
    let mut out = Vec::new();
    for t in 0..=ntiles {
        let target = (t * tile).min(total);
        while d < target {
            if j < ptr[i + 1] {
                j += 1;
            } else {
                i += 1;
            }
            d += 1;
        }
        out.push(i as u32);
    }
    out
}

fn spmv_csr_merge_matches_cpu_on_uneven_rows(dev: GpuDevice) {
    use autopcg_gpu::kernels::spmv::{merge_tiles, MERGE_TILE};
    let k = SpmvKernel::CsrMerge;
    let mut rg = rng(65);
    let mut all = uneven_matrices();
    all.extend(matrices());
    for (label, a) in all {
        let (nr, nc) = (a.nrows(), a.ncols());
        let mut csr = DeviceCsr::upload(&dev, &a).unwrap();
        csr.prepare_merge(&dev).unwrap();
        // A second call keeps the workspace.
        csr.prepare_for(&dev, k).unwrap();
        let ws = csr.merge_workspace().unwrap();
        assert_eq!(ws.tiles() as u64, merge_tiles(nr, a.nnz()), "{label}");
        assert_eq!(
            ws.download_tile_rows(&dev).unwrap(),
            walk_tile_rows(&a, u64::from(MERGE_TILE)),
            "tile partition of {label}"
        );
        let x = uniform(&mut rg, nc, -1.0, 1.0);
        let want = a.mul_vec(&x);
        let scale = abs_spmv(&a, &x);
        let dx = dev.upload(&x).unwrap();
        let work = k.work_items(nr as u64, a.nnz() as u64);
        let mut cfgs = configs(&dev, k, &a, false);
        cfgs.retain(|c| c.threads <= 512);
        cfgs.extend([
            LaunchConfig::per_item(work, 64),
            LaunchConfig::per_item(work, 512),
            LaunchConfig::new(96, 7),
        ]);
        for cfg in cfgs {
            // Twice: the carry-outs of the first call must not leak into the second.
            for round in 0..2 {
                let mut y = dev.upload(&vec![f64::NAN; nr]).unwrap();
                spmv_csr(&dev, &csr, k, cfg, &dx, &mut y).unwrap();
                check(
                    &dev,
                    &y,
                    &want,
                    &scale,
                    &format!("{k} {cfg} on {label}, round {round}"),
                );
            }
        }
    }
}

fn spmv_csr_merge_checks_its_arguments(dev: GpuDevice) {
    let k = SpmvKernel::CsrMerge;
    let a = poisson2d(9);
    let x = dev.upload(&[1.0; 81]).unwrap();
    let mut y = dev.alloc_zeros::<f64>(81).unwrap();
    let mut csr = DeviceCsr::upload(&dev, &a).unwrap();
    let cfg = LaunchConfig::new(64, 2);
    let launch_err = |e: Result<(), GpuError>| matches!(e, Err(GpuError::Launch { .. }));
    // Without the workspace: refused, naming what to call.
    match spmv_csr(&dev, &csr, k, cfg, &x, &mut y) {
        Err(GpuError::Launch { reason, .. }) => assert!(reason.contains("prepare_merge")),
        other => panic!("expected a launch error, got {other:?}"),
    }
    let before = csr.device_bytes();
    csr.prepare_merge(&dev).unwrap();
    assert!(csr.device_bytes() > before);
    // Not whole warps, more threads than compiled for.
    assert!(launch_err(spmv_csr(
        &dev,
        &csr,
        k,
        LaunchConfig::new(48, 2),
        &x,
        &mut y
    )));
    assert!(launch_err(spmv_csr(
        &dev,
        &csr,
        k,
        LaunchConfig::new(1024, 1),
        &x,
        &mut y
    )));
    spmv_csr(&dev, &csr, k, cfg, &x, &mut y).unwrap();
    assert_eq!(dev.download(&y).unwrap(), a.mul_vec(&[1.0; 81]));
    // The compiled kernel allows MERGE_MAX_THREADS threads per block, as the bench reads it.
    let attrs = dev
        .kernel(&autopcg_gpu::ModuleSpec::plain(k.source()), &k.to_string())
        .unwrap()
        .attrs();
    assert!(attrs.max_threads_per_block <= autopcg_gpu::kernels::spmv::MERGE_MAX_THREADS);
    // A 0 x 0 matrix: nothing to do.
    let z = CsrMatrix::from_triplets(0, 0, &[], &[], &[]).unwrap();
    let mut dz = DeviceCsr::upload(&dev, &z).unwrap();
    dz.prepare_merge(&dev).unwrap();
    let (mut e0, x0) = (
        dev.alloc_zeros::<f64>(0).unwrap(),
        dev.alloc_zeros::<f64>(0).unwrap(),
    );
    spmv_csr(&dev, &dz, k, cfg, &x0, &mut e0).unwrap();
}

/// CPU check of the partition walk the merge test compares with (runs everywhere).
fn merge_path_walk_is_consistent() {
    // Rows of lengths 2, 0, 3: path steps e e R R e e e R (e = entry, R = row end).
    let a = CsrMatrix::from_triplets(
        3,
        3,
        &[0, 0, 2, 2, 2],
        &[0, 1, 0, 1, 2],
        &[1.0, 1.0, 1.0, 1.0, 1.0],
    )
    .unwrap();
    assert_eq!(walk_tile_rows(&a, 3), vec![0, 1, 2, 3]);
    assert_eq!(walk_tile_rows(&a, 4), vec![0, 2, 3]);
    assert_eq!(walk_tile_rows(&a, 100), vec![0, 3]);
    let z = CsrMatrix::from_triplets(0, 0, &[], &[], &[]).unwrap();
    assert_eq!(walk_tile_rows(&z, 4), vec![0]);
    for (label, m) in uneven_matrices()
        .into_iter()
        .filter(|(l, _)| !l.starts_with("random"))
    {
        let longest = (0..m.nrows()).map(|i| m.row_len(i)).max().unwrap();
        assert!(longest > 224, "{label}: longest row {longest}");
    }
}

fn coo_accumulates_into_y(dev: GpuDevice) {
    let a = random_csr(35, 400, 400);
    let x = uniform(&mut rng(36), 400, -1.0, 1.0);
    let y0 = uniform(&mut rng(37), 400, -1.0, 1.0);
    let ax = a.mul_vec(&x);
    let want: Vec<f64> = y0.iter().zip(&ax).map(|(a, b)| a + b).collect();
    let scale: Vec<f64> = abs_spmv(&a, &x)
        .iter()
        .zip(&y0)
        .map(|(s, y)| s + y.abs())
        .collect();
    let (cr, cc, cv) = to_coo(&a);
    let coo = DeviceCoo::from_parts(&dev, 400, 400, &cr, &cc, &cv).unwrap();
    let dx = dev.upload(&x).unwrap();
    for k in [SpmvKernel::CooAtomic, SpmvKernel::CooSegment] {
        let mut y = dev.upload(&y0).unwrap();
        let cfg = k.default_config(400, a.nnz() as u64, dev.props());
        spmv_coo_accumulate(&dev, &coo, k, cfg, &dx, &mut y).unwrap();
        check(&dev, &y, &want, &scale, &format!("{k} accumulate"));
    }
}

/// The add variants of the CSR row kernels (the halo part of a row block): `y += A x` for
/// every kernel with one, on every test matrix (rectangular ones like a halo part included),
/// under every launch of [`configs`] with whole warps, from a random y; then the launches
/// they refuse.
fn spmv_csr_add_variants_add_into_y(dev: GpuDevice) {
    let mut rg = rng(38);
    let kernels = SpmvKernel::with_add_variant();
    assert_eq!(kernels.len(), 6, "{kernels:?}");
    for (label, a) in matrices() {
        let (nr, nc) = (a.nrows(), a.ncols());
        let x = uniform(&mut rg, nc, -1.0, 1.0);
        let y0 = uniform(&mut rg, nr, -1.0, 1.0);
        let ax = a.mul_vec(&x);
        let want: Vec<f64> = y0.iter().zip(&ax).map(|(y, v)| y + v).collect();
        let scale: Vec<f64> = abs_spmv(&a, &x)
            .iter()
            .zip(&y0)
            .map(|(s, y)| s + y.abs())
            .collect();
        let csr = DeviceCsr::upload(&dev, &a).unwrap();
        let dx = dev.upload(&x).unwrap();
        for &k in &kernels {
            for cfg in configs(&dev, k, &a, false) {
                let mut y = dev.upload(&y0).unwrap();
                spmv_csr_add(&dev, &csr, k, cfg, &dx, &mut y).unwrap();
                check(
                    &dev,
                    &y,
                    &want,
                    &scale,
                    &format!("{label}: {} with {cfg}", k.add_entry_point().unwrap()),
                );
            }
        }
    }
    let a = poisson2d(5);
    let csr = DeviceCsr::upload(&dev, &a).unwrap();
    let x = dev.upload(&[1.0; 25]).unwrap();
    let short = dev.upload(&[1.0; 24]).unwrap();
    let mut y = dev.alloc_zeros::<f64>(25).unwrap();
    let cfg = LaunchConfig::new(64, 1);
    // Refused before launching: x too short, kernels without an add variant, lanes that are
    // not compiled, blocks that are not whole warps for every vector kernel.
    let mut refused = vec![
        (SpmvKernel::CsrScalar, cfg, &short),
        (SpmvKernel::CsrMerge, cfg, &x),
        (SpmvKernel::Ell, cfg, &x),
        (SpmvKernel::CsrVector(3), cfg, &x),
    ];
    for &l in &autopcg_gpu::kernels::spmv::CSR_LANES {
        refused.push((SpmvKernel::CsrVector(l), LaunchConfig::new(48, 1), &x));
    }
    for (k, c, xin) in refused {
        let e = spmv_csr_add(&dev, &csr, k, c, xin, &mut y);
        assert!(matches!(e, Err(GpuError::Launch { .. })), "{k} {c}: {e:?}");
    }
    // Nothing was added by the refused launches; the scalar kernel at 48 threads runs.
    assert_eq!(dev.download(&y).unwrap(), vec![0.0; 25]);
    spmv_csr_add(
        &dev,
        &csr,
        SpmvKernel::CsrScalar,
        LaunchConfig::new(48, 1),
        &x,
        &mut y,
    )
    .unwrap();
    assert_eq!(dev.download(&y).unwrap(), a.mul_vec(&[1.0; 25]));
}

fn spmv_uploads_from_host_formats_and_checks_arguments(dev: GpuDevice) {
    let a = poisson2d(5);
    let csr = DeviceCsr::upload(&dev, &a).unwrap();
    let x = dev.upload(&[1.0; 25]).unwrap();
    let mut y = dev.alloc_zeros::<f64>(25).unwrap();
    let short = dev.upload(&[1.0; 24]).unwrap();
    let cfg = LaunchConfig::new(64, 1);
    // Refused before launching: x too short, a kernel of another format, lanes that do not
    // divide a warp, a block that is not whole warps for the vector kernel.
    let refused = [
        (SpmvKernel::CsrScalar, cfg, &short),
        (SpmvKernel::Ell, cfg, &x),
        (SpmvKernel::CsrVector(3), cfg, &x),
        (SpmvKernel::CsrVector(4), LaunchConfig::new(48, 1), &x),
    ];
    for (k, c, xin) in refused {
        let e = spmv_csr(&dev, &csr, k, c, xin, &mut y);
        assert!(matches!(e, Err(GpuError::Launch { .. })), "{k} {c}: {e:?}");
    }
    spmv_csr(&dev, &csr, SpmvKernel::CsrVector(4), cfg, &x, &mut y).unwrap();
    assert_eq!(dev.download(&y).unwrap(), a.mul_vec(&[1.0; 25]));
    // Structures the kernels cannot read safely are refused on upload.
    assert!(DeviceCsr::from_parts(&dev, 2, 2, &[0, 1, 2], &[0, 2], &[1.0, 1.0]).is_err());
    assert!(DeviceEll::from_parts(&dev, 2, 2, 1, &[0, 7], &[1.0, 1.0]).is_err());
    assert!(DeviceCoo::from_parts(&dev, 2, 2, &[1, 0], &[0, 0], &[1.0, 1.0]).is_err());
    assert!(DeviceDia::from_parts(&dev, 2, 2, &[0], &[1.0]).is_err());
    let e = DeviceEll::from_parts(&dev, 3, 3, 0, &[], &[]).unwrap();
    let c = DeviceCoo::from_parts(&dev, 2, 3, &[], &[], &[]).unwrap();
    assert!(DeviceHyb::from_parts(e, c).is_err());
    // A 0 x 0 matrix: nothing to do.
    let z = CsrMatrix::from_triplets(0, 0, &[], &[], &[]).unwrap();
    let dz = DeviceCsr::upload(&dev, &z).unwrap();
    let (mut e0, x0) = (
        dev.alloc_zeros::<f64>(0).unwrap(),
        dev.alloc_zeros::<f64>(0).unwrap(),
    );
    spmv_csr(&dev, &dz, SpmvKernel::CsrScalar, cfg, &x0, &mut e0).unwrap();
}

/// CPU check of the test's own conversions (runs everywhere): SpMV from the ELL, DIA, COO and
/// HYB arrays equals CSR SpMV, so a GPU failure points at the kernel, not at the test.
fn reference_conversions_are_consistent() {
    use autopcg_sparse::ell::ELL_PAD;
    let mut rg = rng(38);
    for (label, a) in matrices() {
        let (nr, nc) = (a.nrows(), a.ncols());
        let x = uniform(&mut rg, nc, -1.0, 1.0);
        let want = a.mul_vec(&x);
        let scale = abs_spmv(&a, &x);
        let ell_mv = |w: usize, cols: &[u32], vals: &[f64], y: &mut [f64]| {
            for i in 0..nr {
                for k in 0..w {
                    let c = cols[k * nr + i];
                    if c != ELL_PAD {
                        y[i] += vals[k * nr + i] * x[c as usize];
                    }
                }
            }
        };
        let e = to_ell(&a);
        let mut y = vec![0.0; nr];
        ell_mv(e.width, &e.cols, &e.vals, &mut y);
        assert_close(&y, &want, &scale, 1e-12, &format!("ELL of {label}"));
        let (offs, data) = to_dia(&a);
        let mut y = vec![0.0; nr];
        for (d, &o) in offs.iter().enumerate() {
            for (i, yi) in y.iter_mut().enumerate() {
                let j = i as i64 + o as i64;
                if j >= 0 && (j as usize) < nc {
                    *yi += data[d * nr + i] * x[j as usize];
                }
            }
        }
        assert_close(&y, &want, &scale, 1e-12, &format!("DIA of {label}"));
        let (cr, cc, cv) = to_coo(&a);
        assert!(cr.windows(2).all(|w| w[0] <= w[1]));
        let mut y = vec![0.0; nr];
        for k in 0..cv.len() {
            y[cr[k] as usize] += cv[k] * x[cc[k] as usize];
        }
        assert_close(&y, &want, &scale, 1e-12, &format!("COO of {label}"));
        for h in [0, 1, 3] {
            let (he, (hr, hc, hv)) = to_hyb(&a, h);
            let mut y = vec![0.0; nr];
            ell_mv(he.width, &he.cols, &he.vals, &mut y);
            for k in 0..hv.len() {
                y[hr[k] as usize] += hv[k] * x[hc[k] as usize];
            }
            assert_close(&y, &want, &scale, 1e-12, &format!("HYB {h} of {label}"));
            assert_eq!(
                hv.len()
                    + he.vals
                        .iter()
                        .zip(&he.cols)
                        .filter(|(_, &c)| c != ELL_PAD)
                        .count(),
                a.nnz()
            );
        }
    }
}

/// CPU check that the empty and degenerate matrices the GPU tests use can be built.
fn degenerate_matrices_build() {
    let z = CsrMatrix::from_triplets(0, 0, &[], &[], &[]).unwrap();
    assert_eq!(
        (z.nrows(), z.ncols(), z.nnz(), z.indptr().len()),
        (0, 0, 0, 1)
    );
    let e = CsrMatrix::from_triplets(5, 3, &[], &[], &[]).unwrap();
    assert_eq!(e.indptr(), &[0; 6]);
    autopcg_gpu::formats::validate_csr(0, 0, z.indptr(), z.indices(), z.data()).unwrap();
}

autopcg_gpu::test_main! {
    cpu: [
        merge_path_walk_is_consistent,
        reference_conversions_are_consistent,
        degenerate_matrices_build,
    ],
    gpu: [
        spmv_all_formats_match_cpu,
        spmv_csr_merge_matches_cpu_on_uneven_rows,
        spmv_csr_merge_checks_its_arguments,
        coo_accumulates_into_y,
        spmv_csr_add_variants_add_into_y,
        spmv_uploads_from_host_formats_and_checks_arguments,
    ],
}
