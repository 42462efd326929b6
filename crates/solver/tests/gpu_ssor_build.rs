//! SSOR-AI built on the device from `A`'s CSR arrays (`autopcg_gpu::kernels::ssor`,
//! `PrecondRef::SsorK1FromA`, `PrecondRef::SsorK1ExplicitFromA`, and second order's
//! `PrecondRef::SsorK2FromA`): the factors and the explicit product equal the host build's bit
//! for bit (second order's up to the sign of a zero); patterns from
//! which `K^T` cannot be read off are reported (and the backend builds on the host instead); a
//! backend built this way solves exactly as one given the host's preconditioner, whatever
//! format its factors or product run in, scaled systems included; new values of A refresh
//! such a preconditioner (and Jacobi's, `PrecondRef::JacobiFromA`) on the device with no host
//! copy, as a fresh build.
//!
//! Without a CUDA device the runner reports each GPU test as ignored (with
//! AUTOPCG_REQUIRE_GPU=1 it fails instead); see autopcg_gpu::testing.
mod common;

use std::ops::ControlFlow;

use autopcg_gpu::kernels::refresh::{gather_scaled_values, ssor_k_values};
use autopcg_gpu::kernels::spmv::SpmvKernel;
use autopcg_gpu::kernels::ssor::{
    ssor_k1_explicit, ssor_k1_explicit_counted, ssor_k1_factors, ssor_k1_gram_count_kept,
    ssor_k2_factors, ssor_k2_factors_counted, ssor_k2_refresh_maps, ssor_k2_totals_kept,
    SsorK1Build, SsorK1Explicit, SsorK2Build, SsorK2Parts, GRAM_HIST, GRAM_LONG_CAP, GRAM_MERGE,
};
use autopcg_gpu::{CusparseAlg, DeviceCsr, GpuDevice, GpuError, LaunchConfig};
use autopcg_solver::gpu::{GpuBackend, GpuPlanChoice, PrecondChoice, SpmvChoice, SpmvMethod};
use autopcg_solver::{
    pcg, IterRecord, PcgBackend, PcgInfo, PlannedPrecond, PrecondKind, PrecondRef, Preconditioner,
};
use autopcg_sparse::{families, CsrMatrix, DiaMatrix, EllMatrix, PaddingLimits};
use common::{csr, fixtures, params, poisson3d, random_rhs, random_spd};

fn matrices() -> Vec<(String, CsrMatrix)> {
    let mut v = vec![
        ("n = 1".to_string(), csr(1, &[(0, 0, 3.0)])),
        ("identity 7".to_string(), CsrMatrix::identity(7).unwrap()),
        ("poisson3d 9x7x5".to_string(), poisson3d(9, 7, 5)),
        ("random spd 3000".to_string(), random_spd(3000, 9, true, 5)),
        (
            "power-law 20000".to_string(),
            families::random_powerlaw_spd(20_000, 10.0, 1.3, 7).unwrap(),
        ),
        (
            "fem 2d 30000".to_string(),
            families::fem_p1_2d(30_000, 2).unwrap(),
        ),
        // Explicit zeros on both sides of the diagonal: stored entries of K and K^T.
        (
            "explicit zeros".to_string(),
            csr(
                4,
                &[
                    (0, 0, 2.0),
                    (1, 1, 2.0),
                    (2, 2, 2.0),
                    (3, 3, 2.0),
                    (3, 0, 0.0),
                    (0, 3, 0.0),
                    (2, 1, -1.0),
                    (1, 2, -1.0),
                ],
            ),
        ),
    ];
    v.extend(fixtures());
    v
}

/// A chain of `n` rows (4 on the diagonal, -1 beside it) whose row 0 also couples to every
/// row `stride * t` (`t >= 1`), with a diagonal that keeps it diagonally dominant.
fn spread_star(n: usize, stride: usize) -> CsrMatrix {
    let spokes: Vec<usize> = (1..).map(|t| t * stride).take_while(|&j| j < n).collect();
    let mut t = vec![(0, 0, 4.0 + spokes.len() as f64)];
    for i in 1..n {
        t.extend([(i, i, 4.0), (i, i - 1, -1.0), (i - 1, i, -1.0)]);
    }
    for &j in &spokes {
        t.extend([(j, 0, -0.5), (0, j, -0.5)]);
    }
    csr(n, &t)
}

/// A chain (4 on the diagonal, -1 beside it) whose row 0 also couples to every `stride`-th
/// row, each of those coupling to the `band - 1` rows before it too (diagonally dominant):
/// row 0 of the explicit product unites the spokes' rows of K, `band + 1` entries each, over
/// columns spread across the whole matrix.
fn banded_star(n: usize, stride: usize, band: usize) -> CsrMatrix {
    let mut t = Vec::new();
    let mut off = vec![0.0f64; n];
    let mut couple = |i: usize, j: usize, v: f64| {
        t.extend([(i, j, v), (j, i, v)]);
        off[i] += v.abs();
        off[j] += v.abs();
    };
    for i in 1..n {
        couple(i, i - 1, -1.0);
    }
    for j in (1..).map(|t| t * stride).take_while(|&j| j < n) {
        couple(j, 0, -0.5);
        for d in 2..band.min(j) {
            couple(j, j - d, -0.01);
        }
    }
    t.extend(off.iter().enumerate().map(|(i, o)| (i, i, 4.0 + o)));
    csr(n, &t)
}

/// Whether the device takes in every row of `a`'s explicit product: a row of `K^T` longer
/// than GRAM_MERGE is a block's, which refuses it only where the rows of `K` it unites hold
/// more than GRAM_LONG_CAP entries together and their columns span more than GRAM_LONG_CAP
/// words of 32 (a thread's merge takes any other row). Also the most entries a row gathers.
fn explicit_rows_taken(a: &CsrMatrix) -> (bool, usize) {
    // Row i of K^T: A's columns from i on; each names a row of K, A's columns up to it.
    let k_row = |q: usize| -> Vec<u32> {
        a.row(q)
            .0
            .iter()
            .copied()
            .filter(|&j| j as usize <= q)
            .collect()
    };
    let (mut taken, mut most) = (true, 0);
    for i in 0..a.nrows() {
        let qs: Vec<usize> = a
            .row(i)
            .0
            .iter()
            .map(|&j| j as usize)
            .filter(|&j| j >= i)
            .collect();
        let gathered: usize = qs.iter().map(|&q| k_row(q).len()).sum();
        most = most.max(gathered);
        if qs.len() > GRAM_MERGE && gathered > GRAM_LONG_CAP {
            let lowest = qs.iter().map(|&q| k_row(q)[0]).min().unwrap();
            let highest = *qs.iter().max().unwrap() as u32;
            taken &= (((highest - (lowest & !31)) >> 5) as usize) < GRAM_LONG_CAP;
        }
    }
    (taken, most)
}

fn bits(v: &[f64]) -> Vec<u64> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn host_factors(a: &CsrMatrix, omega: f64) -> (CsrMatrix, CsrMatrix) {
    match Preconditioner::build(a, &PlannedPrecond::ssor_k1_kind(omega)).unwrap() {
        Preconditioner::SsorFactored { k, kt, .. } => (k, kt),
        other => panic!("factored form expected, got {}", other.kind_name()),
    }
}

fn device_factors_equal_the_host_build(dev: GpuDevice) {
    for (name, a) in matrices() {
        for omega in [1.0, 0.7] {
            let (hk, hkt) = host_factors(&a, omega);
            let d = DeviceCsr::upload(&dev, &a).unwrap();
            let SsorK1Build::Built { k, kt } = ssor_k1_factors(&dev, &d, omega).unwrap() else {
                panic!("{name}: the pattern is symmetric")
            };
            for (what, got, want) in [("K", &k, &hk), ("K^T S", &kt, &hkt)] {
                let (p, i, v) = got.download(&dev).unwrap();
                let tag = format!("{name}, omega {omega}: {what}");
                assert_eq!(got.shape(), (want.nrows(), want.ncols()), "{tag}");
                assert_eq!(p, want.indptr(), "{tag} row pointers");
                assert_eq!(i, want.indices(), "{tag} columns");
                assert_eq!(bits(&v), bits(want.data()), "{tag} values");
            }
        }
    }
}

/// Bits with the sign of a zero dropped (second order's device values start from +0).
fn bits_unsigned_zero(v: &[f64]) -> Vec<u64> {
    v.iter()
        .map(|&x| if x == 0.0 { 0 } else { x.to_bits() })
        .collect()
}

fn host_k2_factors(a: &CsrMatrix, omega: f64) -> (CsrMatrix, CsrMatrix) {
    match Preconditioner::build(a, &PlannedPrecond::ssor_k2_kind(omega)).unwrap() {
        Preconditioner::SsorFactored { k, kt, .. } => (k, kt),
        other => panic!("factored form expected, got {}", other.kind_name()),
    }
}

/// Second order's `K = I - X + X^2` and `K^T diag(s)` built on the device are the host's: the
/// same patterns, the same values up to the sign of a zero, rows merged by a thread and by a
/// block (as bits, and sorted: the spread star's row 0 of K^T spans more than the bitmap
/// holds) included. Built from the patterns the plan's count kept
/// ([`ssor_k2_factors_counted`]), the same factors; from another matrix's, still the right
/// ones.
fn device_second_order_factors_equal_the_host_build(dev: GpuDevice) {
    let mut cases = matrices();
    cases.push((
        "poisson3d-27pt 9x8x7".into(),
        families::poisson3d_27pt(9, 8, 7).unwrap(),
    ));
    cases.push(("spread star 140000".into(), spread_star(140_000, 1400)));
    // Rows of K uniting 5041 and 271441 entries of the first-order K (past what a block sorts:
    // held as bits), the second's rows of 1041 entries past the count's histogram.
    for (n, w) in [(600, 70), (1200, 520)] {
        cases.push((format!("band {w}"), families::banded_spd(n, w, 3).unwrap()));
    }
    let mut longest_k = 0;
    let (mut built, mut counted_kept) = (0, 0);
    // The factors `got` are `want` (patterns, and values up to the sign of a zero).
    let same = |tag: &str, got: &SsorK2Parts, want: (&CsrMatrix, &CsrMatrix)| {
        for (what, got, want) in [("K", &got.k, want.0), ("K^T S", &got.kt, want.1)] {
            let (p, i, v) = got.download(&dev).unwrap();
            let tag = format!("{tag}: {what}");
            assert_eq!(got.shape(), (want.nrows(), want.ncols()), "{tag}");
            assert_eq!(p, want.indptr(), "{tag} row pointers");
            assert_eq!(i, want.indices(), "{tag} columns");
            assert_eq!(
                bits_unsigned_zero(&v),
                bits_unsigned_zero(want.data()),
                "{tag} values"
            );
        }
    };
    for (name, a) in cases {
        for omega in [1.0, 0.7] {
            let (hk, hkt) = host_k2_factors(&a, omega);
            let d = DeviceCsr::upload(&dev, &a).unwrap();
            let parts = match ssor_k2_factors(&dev, &d, omega).unwrap() {
                SsorK2Build::Built(parts) => parts,
                SsorK2Build::Refused(why) => panic!("{name}: refused ({why})"),
            };
            built += 1;
            assert_eq!(parts.diag.len(), a.nrows(), "{name}");
            assert_eq!(parts.kt_src.len(), hkt.nnz(), "{name}");
            let tag = format!("{name}, omega {omega}");
            same(&tag, &parts, (&hk, &hkt));
            // The same factors from the patterns the plan's count kept (where the device
            // counts the matrix): their lengths taken instead of merged again.
            if let Some(((tk, tkt), pattern)) = ssor_k2_totals_kept(&dev, &d).unwrap() {
                assert_eq!(
                    pattern.nnz(),
                    (hk.nnz() as u64, hkt.nnz() as u64),
                    "{tag}: kept entries"
                );
                assert_eq!(tk.hist.iter().sum::<u64>(), a.nrows() as u64, "{tag}");
                assert_eq!(tkt.hist.iter().sum::<u64>(), a.nrows() as u64, "{tag}");
                let SsorK2Build::Built(kept) =
                    ssor_k2_factors_counted(&dev, &d, omega, Some(pattern)).unwrap()
                else {
                    panic!("{tag}: refused with the kept patterns");
                };
                same(&format!("{tag}, kept patterns"), &kept, (&hk, &hkt));
                counted_kept += 1;
            }
            // A value refresh's maps read off factors already on the device (here the host's
            // patterns uploaded with other values): K's values recomputed and K^T's gathered
            // through them are the host's.
            let other_values = |m: &CsrMatrix| {
                let mut m = m.clone();
                m.data_mut().fill(-7.0);
                DeviceCsr::upload(&dev, &m).unwrap()
            };
            let (mut rk, mut rkt) = (other_values(&hk), other_values(&hkt));
            let (diag, kt_src) = ssor_k2_refresh_maps(&dev, &d, &rk, &rkt)
                .unwrap()
                .unwrap_or_else(|| panic!("{tag}: no refresh maps of the factors' patterns"));
            ssor_k_values(&dev, &d, &diag, omega, 2, &mut rk).unwrap();
            let scale = omega * (2.0 - omega);
            gather_scaled_values(&dev, &kt_src, &rk, &d, &diag, scale, &mut rkt).unwrap();
            let refreshed = SsorK2Parts {
                k: rk,
                kt: rkt,
                diag,
                kt_src,
            };
            same(&format!("{tag}, refresh maps"), &refreshed, (&hk, &hkt));
            longest_k = (0..hk.nrows())
                .map(|i| hk.row_len(i))
                .max()
                .unwrap_or(0)
                .max(longest_k);
        }
    }
    // Rows of K uniting more rows than a thread merges were formed by blocks, some past the
    // histogram's bins.
    assert!(longest_k >= GRAM_HIST, "longest row of K {longest_k}");
    // Counted wherever the device builds them.
    assert_eq!(counted_kept, built, "built but not counted");
    // Patterns kept from another matrix of the same shape and entries (7-point Poisson on a
    // 9 x 7 x 5 and a 5 x 7 x 9 grid, whose factors' rows have other lengths): the build finds
    // rows of other lengths as it writes them, merges the patterns itself, and builds the
    // right factors.
    let (a1, a2) = (poisson3d(9, 7, 5), poisson3d(5, 7, 9));
    assert_eq!((a1.nrows(), a1.nnz()), (a2.nrows(), a2.nnz()));
    let (h1, _) = host_k2_factors(&a1, 1.0);
    let (hk2, hkt2) = host_k2_factors(&a2, 1.0);
    assert_ne!(
        h1.indptr(),
        hk2.indptr(),
        "the two K's rows have the same lengths"
    );
    let (d1, d2) = (
        DeviceCsr::upload(&dev, &a1).unwrap(),
        DeviceCsr::upload(&dev, &a2).unwrap(),
    );
    let (_, other) = ssor_k2_totals_kept(&dev, &d1).unwrap().unwrap();
    let SsorK2Build::Built(parts) = ssor_k2_factors_counted(&dev, &d2, 1.0, Some(other)).unwrap()
    else {
        panic!("refused with another matrix's patterns");
    };
    same("another matrix's patterns", &parts, (&hk2, &hkt2));
    // Refresh maps of factors that are not transposes of each other (K of one matrix, K^T of
    // the other: an entry of the second has no mirror in the first) are refused.
    let k1 = DeviceCsr::upload(&dev, &h1).unwrap();
    let kt2 = DeviceCsr::upload(&dev, &hkt2).unwrap();
    assert!(ssor_k2_refresh_maps(&dev, &d1, &k1, &kt2)
        .unwrap()
        .is_none());
    // And so are factors of another size than A.
    let small = DeviceCsr::upload(&dev, &poisson3d(3, 3, 3)).unwrap();
    assert!(ssor_k2_refresh_maps(&dev, &small, &k1, &kt2)
        .unwrap()
        .is_none());
}

/// Patterns from which second order's `K^T` (the union over A's upper triangle) is not `K`'s
/// transpose are refused, for the host to build; where it is, though A's pattern is not
/// symmetric (a dense pattern short of two entries: X^2 fills both triangles), the factors are
/// built and are the host's; a row without its diagonal entry and a bad omega are errors.
fn second_order_patterns_without_mirrors_are_refused(dev: GpuDevice) {
    let diag = |n: usize| (0..n).map(|i| (i, i, 4.0)).collect::<Vec<_>>();
    let mut t = diag(4);
    t.extend([(3, 0, -1.0), (3, 1, -1.0), (0, 3, -1.0)]);
    let mut u = diag(4);
    u.extend([(3, 0, -1.0), (1, 2, -1.0)]);
    let dense: Vec<(usize, usize, f64)> = (0..40)
        .flat_map(|i| (0..40).map(move |j| (i, j, if i == j { 40.0 } else { 0.01 })))
        .filter(|&(i, j, _)| (i, j) != (30, 5) && (i, j) != (7, 12))
        .collect();
    for (name, a) in [("more below", csr(4, &t)), ("one each side", csr(4, &u))] {
        let d = DeviceCsr::upload(&dev, &a).unwrap();
        match ssor_k2_factors(&dev, &d, 1.0).unwrap() {
            SsorK2Build::Refused(why) => assert!(why.contains("not symmetric"), "{name}: {why}"),
            SsorK2Build::Built(_) => panic!("{name}: an asymmetric pattern was built"),
        }
    }
    let a = csr(40, &dense);
    let d = DeviceCsr::upload(&dev, &a).unwrap();
    let SsorK2Build::Built(parts) = ssor_k2_factors(&dev, &d, 1.0).unwrap() else {
        panic!("dense 40: K^T is K's transpose, yet refused")
    };
    let (hk, hkt) = host_k2_factors(&a, 1.0);
    for (what, got, want) in [("K", &parts.k, &hk), ("K^T S", &parts.kt, &hkt)] {
        let (p, i, v) = got.download(&dev).unwrap();
        assert_eq!(p, want.indptr(), "dense 40: {what} row pointers");
        assert_eq!(i, want.indices(), "dense 40: {what} columns");
        assert_eq!(
            bits_unsigned_zero(&v),
            bits_unsigned_zero(want.data()),
            "dense 40: {what} values"
        );
    }
    let a = csr(3, &[(0, 0, 1.0), (1, 1, 1.0), (2, 0, 0.5), (0, 2, 0.5)]);
    let d = DeviceCsr::upload(&dev, &a).unwrap();
    match ssor_k2_factors(&dev, &d, 1.0) {
        Err(GpuError::InvalidInput { reason, .. }) => {
            assert!(reason.contains("row 3 stores no diagonal"), "{reason}")
        }
        other => panic!("expected an error, got {other:?}"),
    }
    match ssor_k2_factors(&dev, &d, 0.0) {
        Err(GpuError::InvalidInput { reason, .. }) => assert!(reason.contains("omega"), "{reason}"),
        other => panic!("expected an error, got {other:?}"),
    }
}

/// A backend given second order's factors to build from `A` solves as one given the host's
/// build, every factor method (and A in CSR), a system solved scaled included, and an
/// asymmetric pattern built on the host: bit for bit, but for factors in COO or cuSPARSE's
/// CSR_ALG1, whose rows of K (30 entries and more on the random matrix) are split and summed
/// in an order that changes run to run: equal to rounding there.
fn backend_building_second_order_on_the_device_solves_as_the_host_build(dev: GpuDevice) {
    let big = |a: &CsrMatrix| common::scaled(a, 1e200);
    let lopsided = {
        let a = poisson3d(6, 6, 6);
        let (n, mut t) = (a.nrows(), Vec::new());
        for i in 0..n {
            let (c, v) = a.row(i);
            t.extend(c.iter().zip(v).map(|(&j, &x)| (i, j as usize, x)));
        }
        t.push((n - 1, 0, 0.0));
        csr(n, &t)
    };
    let cases = [
        ("poisson3d 12^3", poisson3d(12, 12, 12)),
        ("random spd 2000", random_spd(2000, 9, true, 3)),
        ("poisson3d 8^3 times 1e200", big(&poisson3d(8, 8, 8))),
        ("one-sided zero", lopsided),
    ];
    for (name, a) in cases {
        let n = a.nrows();
        let b = random_rhs(n, 11);
        let host = Preconditioner::build(&a, &PlannedPrecond::ssor_k2_kind(0.9)).unwrap();
        let base = autopcg_generator::fallback::gpu_choice(&a, &host, dev.props());
        let (hk, _) = host_k2_factors(&a, 0.9);
        let mut choices: Vec<GpuPlanChoice> = methods(&hk)
            .into_iter()
            .map(|m| {
                let s = SpmvChoice {
                    method: m,
                    predicted_ms: None,
                };
                let mut c = base.clone();
                c.precond = PrecondChoice::Factored { k: s, kt: s };
                c
            })
            .collect();
        choices.push(base.clone().with_a(
            SpmvChoice {
                method: SpmvMethod::Csr {
                    kernel: SpmvKernel::CsrScalar,
                    config: LaunchConfig::per_item(n as u64, 256),
                },
                predicted_ms: None,
            },
            n,
            dev.props(),
        ));
        for c in &choices {
            let tag = format!("{name}: A {}, K {:?}", c.a.method.kernel_name(), c.precond);
            let (ih, rh, xh) = run(&dev, &a, PrecondRef::Built(&host), &b, c);
            let from_a = PrecondRef::SsorK2FromA { omega: 0.9, n };
            let (id, rd, xd) = run(&dev, &a, from_a, &b, c);
            assert!(ih.converged && id.converged, "{tag}");
            if let PrecondChoice::Factored {
                k:
                    SpmvChoice {
                        method: SpmvMethod::Coo { .. } | SpmvMethod::Cusparse { .. },
                        ..
                    },
                ..
            } = c.precond
            {
                assert!(id.iterations.abs_diff(ih.iterations) <= 1, "{tag}");
                let scale = xh.iter().fold(0.0f64, |m, v| m.max(v.abs()));
                assert!(
                    xd.iter()
                        .zip(&xh)
                        .all(|(p, q)| (p - q).abs() <= 1e-8 * scale),
                    "{tag}: solutions differ"
                );
                continue;
            }
            assert_eq!(id.iterations, ih.iterations, "{tag}");
            assert_eq!(rd, rh, "{tag}: records differ");
            assert_eq!(
                bits_unsigned_zero(&xd),
                bits_unsigned_zero(&xh),
                "{tag}: solutions differ"
            );
        }
    }
}

fn patterns_without_mirrors_are_reported(dev: GpuDevice) {
    let diag = |n: usize| (0..n).map(|i| (i, i, 4.0)).collect::<Vec<_>>();
    // More entries below the diagonal than above: found by the counts.
    let mut t = diag(4);
    t.extend([(3, 0, -1.0), (3, 1, -1.0), (0, 3, -1.0)]);
    // As many each side, one without its mirror each side: found by the search.
    let mut u = diag(4);
    u.extend([(3, 0, -1.0), (1, 2, -1.0)]);
    // Rows of 40 entries (built a warp per row): dense but for (30, 5) and (7, 12), so the
    // first row with an entry right of its diagonal whose mirror is missing is row 5.
    let dense: Vec<(usize, usize, f64)> = (0..40)
        .flat_map(|i| (0..40).map(move |j| (i, j, if i == j { 40.0 } else { 0.01 })))
        .filter(|&(i, j, _)| (i, j) != (30, 5) && (i, j) != (7, 12))
        .collect();
    for (a, first_row) in [
        (csr(4, &t), None),
        (csr(4, &u), Some(1)),
        (csr(40, &dense), Some(5)),
    ] {
        let d = DeviceCsr::upload(&dev, &a).unwrap();
        match ssor_k1_factors(&dev, &d, 1.0).unwrap() {
            SsorK1Build::AsymmetricPattern { first_row: r } => assert_eq!(r, first_row),
            SsorK1Build::Built { .. } => panic!("an asymmetric pattern was built"),
        }
    }
    // A row without a diagonal entry is an error naming it (1-based).
    let a = csr(3, &[(0, 0, 1.0), (1, 1, 1.0), (2, 0, 0.5), (0, 2, 0.5)]);
    let d = DeviceCsr::upload(&dev, &a).unwrap();
    match ssor_k1_factors(&dev, &d, 1.0) {
        Err(GpuError::InvalidInput { reason, .. }) => {
            assert!(reason.contains("row 3 stores no diagonal"), "{reason}")
        }
        other => panic!("expected an error, got {other:?}"),
    }
    match ssor_k1_factors(&dev, &d, 2.0) {
        Err(GpuError::InvalidInput { reason, .. }) => assert!(reason.contains("omega"), "{reason}"),
        other => panic!("expected an error, got {other:?}"),
    }
}

fn run(
    dev: &GpuDevice,
    a: &CsrMatrix,
    pre: PrecondRef<'_>,
    b: &[f64],
    choice: &GpuPlanChoice,
) -> (PcgInfo, Vec<IterRecord>, Vec<f64>) {
    let mut be = GpuBackend::new(dev, a, pre, b, None, choice).unwrap();
    assert_eq!(
        be.setup_times().precond_ms > 0.0,
        !matches!(pre, PrecondRef::Built(_)),
        "the device build is timed as the preconditioner's"
    );
    let mut recs = Vec::new();
    let info = pcg(&mut be, &params(1e-10, 4000), |r| {
        recs.push(*r);
        ControlFlow::Continue(())
    })
    .unwrap();
    (info, recs, be.into_solution().unwrap())
}

/// The factors' SpMV methods exercised for factors `k` (and its transpose, of as many
/// entries): CSR kernels, DIA and ELL where the host conversion takes them, COO (made through
/// a host copy of the device's arrays) and cuSPARSE.
fn methods(k: &CsrMatrix) -> Vec<SpmvMethod> {
    let (n, nnz) = (k.nrows() as u64, k.nnz() as u64);
    let cfg = |kernel: SpmvKernel| LaunchConfig::per_item(kernel.work_items(n, nnz), 256);
    let limits = PaddingLimits::default();
    let mut v = vec![
        SpmvMethod::Csr {
            kernel: SpmvKernel::CsrScalar,
            config: cfg(SpmvKernel::CsrScalar),
        },
        SpmvMethod::Csr {
            kernel: SpmvKernel::CsrVector(4),
            config: cfg(SpmvKernel::CsrVector(4)),
        },
        SpmvMethod::Coo {
            kernel: SpmvKernel::CooSegment,
            config: cfg(SpmvKernel::CooSegment),
        },
        SpmvMethod::Cusparse {
            alg: CusparseAlg::CsrAlg1,
        },
    ];
    if DiaMatrix::from_csr(k, &limits).is_ok() {
        v.push(SpmvMethod::Dia {
            config: cfg(SpmvKernel::Dia),
        });
    }
    if EllMatrix::from_csr(k, &limits).is_ok() {
        v.push(SpmvMethod::Ell {
            config: cfg(SpmvKernel::Ell),
        });
    }
    v
}

fn backend_building_on_the_device_solves_as_the_host_build(dev: GpuDevice) {
    let big = |a: &CsrMatrix| common::scaled(a, 1e200);
    let cases = [
        ("poisson3d 12^3", poisson3d(12, 12, 12)),
        ("random spd 2000", random_spd(2000, 9, true, 3)),
        ("poisson3d 8^3 times 1e200", big(&poisson3d(8, 8, 8))),
    ];
    for (name, a) in cases {
        let n = a.nrows();
        let b = random_rhs(n, 11);
        let kind = PrecondKind::ssor_ai().with_omega(0.9);
        let host = Preconditioner::build(&a, &kind).unwrap();
        let base = autopcg_generator::fallback::gpu_choice(&a, &host, dev.props());
        let (hk, _) = host_factors(&a, 0.9);
        let mut choices: Vec<GpuPlanChoice> = methods(&hk)
            .into_iter()
            .map(|m| {
                let s = SpmvChoice {
                    method: m,
                    predicted_ms: None,
                };
                let mut c = base.clone();
                c.precond = PrecondChoice::Factored { k: s, kt: s };
                c
            })
            .collect();
        // A's product in COO and in CSR: A's operand made from the host matrix, or from the
        // CSR arrays the factors were built from.
        for m in [
            SpmvMethod::Coo {
                kernel: SpmvKernel::CooSegment,
                config: LaunchConfig::per_item(
                    SpmvKernel::CooSegment.work_items(n as u64, a.nnz() as u64),
                    256,
                ),
            },
            SpmvMethod::Csr {
                kernel: SpmvKernel::CsrScalar,
                config: LaunchConfig::per_item(n as u64, 256),
            },
        ] {
            let c = base.clone().with_a(
                SpmvChoice {
                    method: m,
                    predicted_ms: None,
                },
                n,
                dev.props(),
            );
            choices.push(c);
        }
        for c in &choices {
            let tag = format!("{name}: A {}, K {:?}", c.a.method.kernel_name(), c.precond);
            let (ih, rh, xh) = run(&dev, &a, PrecondRef::Built(&host), &b, c);
            let from_a = PrecondRef::SsorK1FromA { omega: 0.9, n };
            let (id, rd, xd) = run(&dev, &a, from_a, &b, c);
            assert!(ih.converged, "{tag}");
            assert_eq!(id.iterations, ih.iterations, "{tag}");
            assert_eq!(rd, rh, "{tag}: records differ");
            assert_eq!(bits(&xd), bits(&xh), "{tag}: solutions differ");
        }
    }
}

fn an_asymmetric_pattern_is_built_on_the_host(dev: GpuDevice) {
    // SPD values with an explicit zero stored on one side only.
    let mut a = poisson3d(6, 6, 6);
    let (n, mut t) = (a.nrows(), Vec::new());
    for i in 0..n {
        let (c, v) = a.row(i);
        t.extend(c.iter().zip(v).map(|(&j, &x)| (i, j as usize, x)));
    }
    t.push((n - 1, 0, 0.0));
    a = csr(n, &t);
    let b = random_rhs(n, 4);
    let host = Preconditioner::build(&a, &PlannedPrecond::ssor_k1_kind(1.0)).unwrap();
    let c = autopcg_generator::fallback::gpu_choice(&a, &host, dev.props());
    let (ih, rh, _) = run(&dev, &a, PrecondRef::Built(&host), &b, &c);
    let mut be = GpuBackend::new(
        &dev,
        &a,
        PrecondRef::SsorK1FromA { omega: 1.0, n },
        &b,
        None,
        &c,
    )
    .unwrap();
    let mut rd = Vec::new();
    let id = pcg(&mut be, &params(1e-10, 4000), |r| {
        rd.push(*r);
        ControlFlow::Continue(())
    })
    .unwrap();
    assert_eq!(id.iterations, ih.iterations);
    assert_eq!(rd, rh);
}

/// New values of A (its diagonal raised) refreshed on the device into a preconditioner the
/// device built from A (factored SSOR-AI, the explicit product, Jacobi's inverse diagonal),
/// with no host copy of it: the solve is that of a backend built afresh for the new values,
/// bit for bit (CSR, DIA, ELL and cuSPARSE's CSR_ALG1 factors or product, each with A in DIA,
/// converted and given its CSR source, and in CSR). An operand kept in COO keeps no CSR
/// values: refused, for the caller to refresh on the host.
fn preconditioners_built_from_a_are_refreshed_from_a_on_the_device(dev: GpuDevice) {
    let a = poisson3d(10, 9, 8);
    let (n, omega) = (a.nrows(), 0.95);
    let b = random_rhs(n, 5);
    let raised = |f: f64| {
        let mut m = a.clone();
        let pos = m.diagonal_positions();
        let v = m.data_mut();
        for &p in &pos {
            v[p as usize] *= f;
        }
        m
    };
    let p = params(1e-10, 4000);
    for (kind, from_a) in [
        (
            PlannedPrecond::ssor_k1_kind(omega),
            PrecondRef::SsorK1FromA { omega, n },
        ),
        (
            PlannedPrecond::ssor_k1_explicit_kind(omega),
            PrecondRef::SsorK1ExplicitFromA { omega, n },
        ),
        (
            PlannedPrecond::ssor_k2_kind(omega),
            PrecondRef::SsorK2FromA { omega, n },
        ),
        (PrecondKind::Jacobi, PrecondRef::JacobiFromA { n }),
    ] {
        let host = Preconditioner::build(&a, &kind).unwrap();
        let base = autopcg_generator::fallback::gpu_choice(&a, &host, dev.props());
        // The preconditioner's operand in every method, or Jacobi's one step.
        let steps: Vec<Option<SpmvMethod>> = match &host {
            Preconditioner::SsorFactored { k, .. } => methods(k).into_iter().map(Some).collect(),
            Preconditioner::SsorExplicit { m } => methods(m).into_iter().map(Some).collect(),
            _ => vec![None],
        };
        for m in steps {
            for a_csr in [false, true] {
                let mut c = base.clone();
                if let Some(m) = m {
                    let s = SpmvChoice {
                        method: m,
                        predicted_ms: None,
                    };
                    c.precond = match c.precond {
                        PrecondChoice::Explicit { .. } => PrecondChoice::Explicit { m: s },
                        _ => PrecondChoice::Factored { k: s, kt: s },
                    };
                }
                if a_csr {
                    c = c.with_a(
                        SpmvChoice {
                            method: SpmvMethod::Csr {
                                kernel: SpmvKernel::CsrScalar,
                                config: LaunchConfig::per_item(n as u64, 256),
                            },
                            predicted_ms: None,
                        },
                        n,
                        dev.props(),
                    );
                }
                let tag = format!("{kind}, {m:?}, A {}", c.a.method.kernel_name());
                let mut be = GpuBackend::new(&dev, &a, from_a, &b, None, &c).unwrap();
                pcg(&mut be, &p, |_| ControlFlow::Continue(())).unwrap();
                assert!(be.keep_matrix_source(&a).unwrap(), "{tag}");
                let on_device = be.prepare_device_refresh_from_a().unwrap();
                if matches!(m, Some(SpmvMethod::Coo { .. })) {
                    assert!(!on_device, "{tag}: a COO operand keeps no CSR values");
                    continue;
                }
                assert!(on_device, "{tag}");
                for f in [1.1, 1.3] {
                    let a2 = raised(f);
                    let v = a2.data();
                    be.stage_matrix_values(&|off, piece| {
                        piece.copy_from_slice(&v[off..off + piece.len()])
                    })
                    .unwrap();
                    let max = v.iter().fold(0.0f64, |m, x| m.max(x.abs()));
                    let ms = be.commit_matrix_values_on_device(n, max).unwrap();
                    assert!(ms.is_some(), "{tag}: the same scale factors");
                    assert!(be.set_problem(&b, None).unwrap(), "{tag}");
                    let mut recs = Vec::new();
                    let info = pcg(&mut be, &p, |r| {
                        recs.push(*r);
                        ControlFlow::Continue(())
                    })
                    .unwrap();
                    let x = be.solution().unwrap();
                    let (fresh, frecs, xf) = run(&dev, &a2, from_a, &b, &c);
                    assert_eq!(info.iterations, fresh.iterations, "{tag} x {f}");
                    assert_eq!(recs, frecs, "{tag} x {f}: records differ");
                    assert_eq!(bits(&x), bits(&xf), "{tag} x {f}: solutions differ");
                }
            }
        }
    }
}

/// The explicit product formed on the device from A's arrays is the host's explicit build:
/// the same pattern and the same values (bit for bit, up to the sign of a zero), rows of K^T
/// longer than one thread's merge (formed by a block) included, and rows uniting more entries
/// of K than a block sorts (held as bits). Refused, for the host to form, where a row of the
/// product unites rows of K with more than the device sorts for a row over more columns than
/// its bits span, and only there, and for patterns that are not symmetric. Formed from the pattern a count kept
/// ([`ssor_k1_explicit_counted`]), the same product; from another matrix's, still the right one.
fn device_explicit_product_equals_the_host_build(dev: GpuDevice) {
    let (mut formed, mut formed_long, mut refused, mut counted_kept) = (0, 0, 0, 0);
    let mut formed_past_gather = 0;
    // The longest row of a formed product, and the longest row of K^T it came from: the warp's
    // value sums take both in chunks (256 entries of M, 64 rows of K) past those lengths.
    let (mut longest_m, mut longest_united) = (0, 0);
    let mut cases = matrices();
    // An arrow: row 0 couples to every row, each other row only to row 0 and itself, so row 0
    // of K^T names all 1000 rows of K (two entries each) and row 0 of M holds 1000 entries.
    let n = 1000;
    let mut arrow: Vec<(usize, usize, f64)> = vec![(0, 0, n as f64)];
    for i in 1..n {
        arrow.extend([(i, i, 2.0), (i, 0, -0.5), (0, i, -0.5)]);
    }
    cases.push(("arrow 1000".to_string(), csr(n, &arrow)));
    // A spread star on a chain: row 0 also couples to rows 1400, 2800, ..., 138600, so row 0 of
    // M unites 101 rows of K whose columns lie further apart than a block's bits hold (32 x
    // GRAM_LONG_CAP columns): the block gathers and sorts them instead.
    let star = spread_star(140_000, 1400);
    assert!(star.row(0).0.last().map_or(0, |&c| c as usize) >= 32 * GRAM_LONG_CAP);
    cases.push(("spread star 140000".to_string(), star));
    // Bands: rows of K^T of 41 entries uniting 1681 of K (formed by blocks), of 71 uniting
    // 5041 (past the gather, as bits), and of 521 uniting 271441 into rows of M of 1041.
    for (n, w) in [(600, 40), (600, 70), (1200, 520)] {
        cases.push((format!("band {w}"), families::banded_spd(n, w, 3).unwrap()));
    }
    // Row 0 of M unites 99 rows of K of 51 entries over 138601 columns: refused.
    cases.push(("banded star".to_string(), banded_star(140_000, 1400, 50)));
    for (name, a) in cases {
        // Row i of K^T: A's columns from i on; each names a row of K, A's columns up to it.
        let kt = |i: usize| -> Vec<usize> {
            let (c, _) = a.row(i);
            c.iter().map(|&j| j as usize).filter(|&j| j >= i).collect()
        };
        let longest = (0..a.nrows()).map(|i| kt(i).len()).max().unwrap();
        let (taken, gathered) = explicit_rows_taken(&a);
        for omega in [1.0, 0.7] {
            let tag = format!("{name}, omega {omega}");
            let d = DeviceCsr::upload(&dev, &a).unwrap();
            let parts = match ssor_k1_explicit(&dev, &d, omega).unwrap() {
                SsorK1Explicit::Built(parts) => parts,
                SsorK1Explicit::Refused(why) => {
                    assert!(!taken, "{tag}: refused ({why})");
                    assert!(why.contains("sorts"), "{tag}: {why}");
                    refused += 1;
                    continue;
                }
            };
            assert!(taken, "{tag}: formed past the device's limits");
            formed += 1;
            formed_past_gather += usize::from(gathered > GRAM_LONG_CAP);
            formed_long += usize::from(longest > GRAM_MERGE);
            longest_united = longest_united.max(longest);
            let want =
                match Preconditioner::build(&a, &PlannedPrecond::ssor_k1_explicit_kind(omega))
                    .unwrap()
                {
                    Preconditioner::SsorExplicit { m } => m,
                    other => panic!("explicit form expected, got {}", other.kind_name()),
                };
            let (p, i, v) = parts.m.download(&dev).unwrap();
            longest_m = longest_m.max(
                (0..want.nrows())
                    .map(|r| want.row_len(r))
                    .max()
                    .unwrap_or(0),
            );
            assert_eq!(parts.m.shape(), (want.nrows(), want.ncols()), "{tag}");
            assert_eq!(p, want.indptr(), "{tag}: row pointers");
            assert_eq!(i, want.indices(), "{tag}: columns");
            assert!(
                v.iter()
                    .zip(want.data())
                    .all(|(x, y)| x.to_bits() == y.to_bits() || (*x == 0.0 && *y == 0.0)),
                "{tag}: values"
            );
            // The same product from the pattern the plan's count kept (where the device counts
            // the matrix): its lengths taken instead of counted again.
            if let Some((totals, pattern)) =
                ssor_k1_gram_count_kept(&dev, &d, Some(longest)).unwrap()
            {
                assert_eq!(pattern.nnz(), want.nnz() as u64, "{tag}: kept entries");
                assert_eq!(
                    totals.hist.iter().sum::<u64>(),
                    want.nrows() as u64,
                    "{tag}"
                );
                let SsorK1Explicit::Built(kept) =
                    ssor_k1_explicit_counted(&dev, &d, omega, Some(pattern)).unwrap()
                else {
                    panic!("{tag}: refused with the kept pattern");
                };
                let (kp, ki, kv) = kept.m.download(&dev).unwrap();
                assert_eq!((kp, ki), (p.clone(), i.clone()), "{tag}: kept pattern");
                assert_eq!(bits(&kv), bits(&v), "{tag}: values from the kept pattern");
                counted_kept += 1;
            }
        }
    }
    // Counted wherever the device forms it.
    assert_eq!(counted_kept, formed, "formed but not counted");
    // A pattern kept from another matrix of the same shape and entries (7-point Poisson on a
    // 9 x 7 x 5 and a 5 x 7 x 9 grid: 315 rows, 1919 entries each, their products' rows of
    // other lengths): the build finds rows of other lengths as it writes them, counts the
    // pattern itself, and forms the right product.
    let (a1, a2) = (poisson3d(9, 7, 5), poisson3d(5, 7, 9));
    assert_eq!((a1.nrows(), a1.nnz()), (a2.nrows(), a2.nnz()));
    let host_m =
        |a: &CsrMatrix| match Preconditioner::build(a, &PlannedPrecond::ssor_k1_explicit_kind(1.0))
            .unwrap()
        {
            Preconditioner::SsorExplicit { m } => m,
            other => panic!("explicit form expected, got {}", other.kind_name()),
        };
    let (m1, m2) = (host_m(&a1), host_m(&a2));
    assert_ne!(
        m1.indptr(),
        m2.indptr(),
        "the two products' rows have the same lengths"
    );
    let (d1, d2) = (
        DeviceCsr::upload(&dev, &a1).unwrap(),
        DeviceCsr::upload(&dev, &a2).unwrap(),
    );
    let (_, other) = ssor_k1_gram_count_kept(&dev, &d1, None).unwrap().unwrap();
    let SsorK1Explicit::Built(parts) =
        ssor_k1_explicit_counted(&dev, &d2, 1.0, Some(other)).unwrap()
    else {
        panic!("refused with another matrix's pattern");
    };
    let (p, i, v) = parts.m.download(&dev).unwrap();
    assert_eq!((p.as_slice(), i.as_slice()), (m2.indptr(), m2.indices()));
    assert!(v
        .iter()
        .zip(m2.data())
        .all(|(x, y)| x.to_bits() == y.to_bits() || (*x == 0.0 && *y == 0.0)));
    assert!(formed >= 14, "only {formed} products formed on the device");
    assert!(
        formed_long >= 4,
        "only {formed_long} with rows formed by blocks"
    );
    assert_eq!(
        refused, 2,
        "the banded star was formed, or another matrix refused"
    );
    assert!(
        formed_past_gather >= 4,
        "only {formed_past_gather} formed past the gather"
    );
    assert!(
        longest_m > 256 && longest_united > 64,
        "no formed product with a row of M past 256 entries ({longest_m}) and a row of K^T \
         past 64 ({longest_united})"
    );
    let diag = |n: usize| (0..n).map(|i| (i, i, 4.0)).collect::<Vec<_>>();
    let mut t = diag(4);
    t.extend([(3, 0, -1.0), (3, 1, -1.0), (0, 3, -1.0)]);
    let d = DeviceCsr::upload(&dev, &csr(4, &t)).unwrap();
    match ssor_k1_explicit(&dev, &d, 1.0).unwrap() {
        SsorK1Explicit::Refused(why) => assert!(why.contains("not symmetric"), "{why}"),
        SsorK1Explicit::Built(_) => panic!("an asymmetric pattern was formed"),
    }
}

/// A backend that forms the explicit product on the device from A solves exactly as one given
/// the host's explicit build, whatever format the product runs in (to rounding for COO and
/// cuSPARSE, whose sums of a long row are not ordered the same from run to run), a scaled
/// system included;
/// one whose product the device refuses (a row uniting more entries of K than the device
/// sorts for a row over more columns than its bits span: the banded star) forms it on the
/// host, and solves as that too.
fn backend_forming_the_explicit_product_solves_as_the_host_build(dev: GpuDevice) {
    let big = |a: &CsrMatrix| common::scaled(a, 1e200);
    let cases = [
        ("poisson3d 12^3", poisson3d(12, 12, 12)),
        ("random spd 2000", random_spd(2000, 9, true, 3)),
        ("poisson3d 8^3 times 1e200", big(&poisson3d(8, 8, 8))),
        (
            "power-law 20000",
            families::random_powerlaw_spd(20_000, 10.0, 1.3, 7).unwrap(),
        ),
        ("band 40", families::banded_spd(600, 40, 3).unwrap()),
        ("band 70", families::banded_spd(600, 70, 3).unwrap()),
        ("banded star", banded_star(140_000, 1400, 50)),
    ];
    for (name, a) in cases {
        let n = a.nrows();
        let b = random_rhs(n, 11);
        let host = Preconditioner::build(&a, &PlannedPrecond::ssor_k1_explicit_kind(0.9)).unwrap();
        let base = autopcg_generator::fallback::gpu_choice(&a, &host, dev.props());
        let Preconditioner::SsorExplicit { m: hm } = &host else {
            panic!("{name}: explicit form expected")
        };
        for method in methods(hm) {
            let mut c = base.clone();
            c.precond = PrecondChoice::Explicit {
                m: SpmvChoice {
                    method,
                    predicted_ms: None,
                },
            };
            let tag = format!("{name}: M {method:?}");
            let (ih, rh, xh) = run(&dev, &a, PrecondRef::Built(&host), &b, &c);
            let from_a = PrecondRef::SsorK1ExplicitFromA { omega: 0.9, n };
            let (id, rd, xd) = run(&dev, &a, from_a, &b, &c);
            assert!(ih.converged && id.converged, "{tag}");
            if let SpmvMethod::Coo { .. } | SpmvMethod::Cusparse { .. } = method {
                // COO adds a row's pieces with atomics, and cuSPARSE's CSR_ALG1 splits long rows
                // too: a long row of M sums in an order that changes run to run (seen on the
                // power-law matrix, whose product the host forms). Equal to rounding.
                assert!(id.iterations.abs_diff(ih.iterations) <= 1, "{tag}");
                let scale = xh.iter().fold(0.0f64, |m, v| m.max(v.abs()));
                assert!(
                    xd.iter()
                        .zip(&xh)
                        .all(|(p, q)| (p - q).abs() <= 1e-8 * scale),
                    "{tag}: solutions differ"
                );
                continue;
            }
            assert_eq!(id.iterations, ih.iterations, "{tag}");
            assert_eq!(rd, rh, "{tag}: records differ");
            assert_eq!(bits(&xd), bits(&xh), "{tag}: solutions differ");
        }
    }
}

autopcg_gpu::test_main! {
    cpu: [],
    gpu: [
        device_factors_equal_the_host_build,
        device_second_order_factors_equal_the_host_build,
        second_order_patterns_without_mirrors_are_refused,
        backend_building_second_order_on_the_device_solves_as_the_host_build,
        patterns_without_mirrors_are_reported,
        backend_building_on_the_device_solves_as_the_host_build,
        an_asymmetric_pattern_is_built_on_the_host,
        preconditioners_built_from_a_are_refreshed_from_a_on_the_device,
        device_explicit_product_equals_the_host_build,
        backend_forming_the_explicit_product_solves_as_the_host_build,
    ],
}
