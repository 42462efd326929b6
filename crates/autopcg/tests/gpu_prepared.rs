//! The prepared solver on a GPU: several right-hand sides on one setup, a right-hand side of
//! another magnitude (the system scaled anew), new values of the same pattern (every
//! preconditioner kind and SSOR-AI form, against a solver prepared for them), the per-solve
//! cost, and a prepared solver made from a saved plan (its checks run without a GPU). Without a CUDA device the runner reports each test as ignored (with
//! AUTOPCG_REQUIRE_GPU=1 it fails instead); see autopcg_gpu::testing.
use std::time::Instant;

use autopcg::catalog::DeviceProps;
use autopcg::generator::saved::{SavedPlan, SavedPlanError};
use autopcg::generator::{plan, PlanRequest, Target};
use autopcg::gpu::GpuDevice;
use autopcg::sparse::families;
use autopcg::{CsrMatrix, Device, Error, ModelChoice, PrecondKind, Solver, SsorForm};

/// The saved plan the fallback rule makes for `a` on `props` with SSOR-AI and omega `auto`.
fn saved_for(a: &CsrMatrix, props: &DeviceProps) -> SavedPlan {
    let req = PlanRequest::new(a, PrecondKind::ssor_ai(), Target::Gpu(props.clone()));
    SavedPlan::from_plan(&plan(&req).unwrap(), a, props, None, None).unwrap()
}

mod common;
use common::{rhs, true_residual};

fn prepared_solves_many_right_hand_sides_and_new_values(_dev: GpuDevice) {
    let explicit = SsorForm::Explicit;
    for kind in [
        PrecondKind::None,
        PrecondKind::Jacobi,
        PrecondKind::ssor_ai(),
        PrecondKind::ssor_ai2(),
        PrecondKind::ssor_ai().with_form(explicit),
        PrecondKind::ssor_ai2().with_form(explicit),
    ] {
        let a = families::poisson3d_7pt(24, 24, 24).unwrap();
        let mut p = Solver::new(&a)
            .device(Device::Gpu)
            .model(ModelChoice::Off)
            .precond(kind)
            .prepare()
            .unwrap();
        assert!(p.device().starts_with("gpu"), "{}", p.device());
        let mut iters = Vec::new();
        for seed in 0..3 {
            let b = rhs(&a, seed);
            let s = p.solve(&b).unwrap();
            assert!(s.info.converged, "{kind}");
            assert!(true_residual(&a, &s.x, &b) <= 1e-8, "{kind}");
            iters.push(s.info.iterations);
        }
        // b of another magnitude: solved scaled, the same answer scaled.
        let b = rhs(&a, 0);
        let huge: Vec<f64> = b.iter().map(|v| v * 1e200).collect();
        let s = p.solve(&huge).unwrap();
        // Checked against b: the sum of squares of `huge` itself overflows.
        let x_back: Vec<f64> = s.x.iter().map(|v| v * 1e-200).collect();
        assert!(true_residual(&a, &x_back, &b) <= 1e-8, "{kind}");
        // New values: A + I.
        let mut values = a.data().to_vec();
        let (ptr, idx) = (a.indptr(), a.indices());
        for i in 0..a.nrows() {
            for k in ptr[i] as usize..ptr[i + 1] as usize {
                if idx[k] as usize == i {
                    values[k] += 1.0;
                }
            }
        }
        p.update_values(&values).unwrap();
        let mut a2 = a.clone();
        a2.data_mut().copy_from_slice(&values);
        let b2 = rhs(&a2, 9);
        let s2 = p.solve(&b2).unwrap();
        assert!(true_residual(&a2, &s2.x, &b2) <= 1e-8, "{kind}");
        assert!(s2.info.iterations < iters[0], "{kind}");
        // The values refreshed in place solve as a solver prepared for the new values (the
        // same plan: the fallback rule reads the pattern only; a reduction's rounding may
        // differ by a last bit, so one iteration either way).
        let fresh = Solver::new(&a2)
            .device(Device::Gpu)
            .model(ModelChoice::Off)
            .precond(p.precond())
            .prepare()
            .unwrap()
            .solve(&b2)
            .unwrap();
        assert_eq!(fresh.precond_applied, s2.precond_applied, "{kind}");
        assert!(
            s2.info.iterations.abs_diff(fresh.info.iterations) <= 1,
            "{kind}: {} iterations after new values, {} prepared afresh",
            s2.info.iterations,
            fresh.info.iterations
        );
    }
}

/// The backend's parts (uploads, conversions, kernel loading) are each non-negative and
/// together within the backend's time, at preparing, after new values, and in a one-shot
/// solve's setup; an operand stored in a padded format has a conversion time.
fn setup_parts_add_up_within_the_backend_time(_dev: GpuDevice) {
    let within = |t: &autopcg::SetupTimes, what: &str| {
        for (name, v) in [
            ("upload", t.upload_ms),
            ("convert", t.convert_ms),
            ("load", t.load_ms),
        ] {
            assert!(v >= 0.0 && v.is_finite(), "{what}: {name}_ms = {v}");
        }
        let parts = t.upload_ms + t.convert_ms + t.load_ms;
        assert!(
            parts <= t.backend_ms + 1e-6,
            "{what}: parts {parts} ms > backend {} ms",
            t.backend_ms
        );
    };
    let a = families::poisson3d_7pt(32, 32, 32).unwrap();
    for kind in [
        PrecondKind::Jacobi,
        PrecondKind::ssor_ai(),
        PrecondKind::ssor_ai().with_form(SsorForm::Explicit),
    ] {
        let solver = || {
            Solver::new(&a)
                .device(Device::Gpu)
                .model(ModelChoice::Off)
                .precond(kind)
        };
        let mut p = solver().prepare().unwrap();
        let what = format!("{kind} prepared");
        within(&p.setup(), &what);
        assert!(p.setup().upload_ms > 0.0, "{what}: something was uploaded");
        let padded = p
            .plan()
            .steps
            .iter()
            .any(|s| matches!(s.format.as_str(), "ell" | "dia" | "hyb"));
        if padded {
            assert!(p.setup().convert_ms > 0.0, "{what}: {:?}", p.plan());
        }
        // A + I: the same scale factors, so the backend takes the values in place.
        let mut values = a.data().to_vec();
        for i in 0..a.nrows() {
            let k = a.indptr()[i] as usize + a.row(i).0.partition_point(|&j| (j as usize) < i);
            values[k] += 1.0;
        }
        let u = p.update_values(&values).unwrap();
        within(&u, &format!("{kind} new values"));
        assert_eq!(u.load_ms, 0.0, "{kind}: new values in place load no kernel");
        let once = solver().solve(&rhs(&a, 1)).unwrap();
        within(&once.setup, &format!("{kind} one-shot"));
    }
}

/// Per-solve overhead beyond the iterations at n = 1e4 (the target: at most 0.5 ms):
/// printed, and asserted only to be finite (timings are benchmarks, not tests).
fn per_solve_overhead_is_reported(_dev: GpuDevice) {
    let a = families::poisson2d_5pt(100, 100).unwrap();
    let mut p = Solver::new(&a)
        .device(Device::Gpu)
        .model(ModelChoice::Off)
        .precond(PrecondKind::Jacobi)
        .prepare()
        .unwrap();
    let b = rhs(&a, 3);
    p.solve(&b).unwrap();
    let t = Instant::now();
    let s = p.solve(&b).unwrap();
    let total = t.elapsed().as_secs_f64() * 1e3;
    println!(
        "n = 10000: solve {total:.3} ms, rhs {:.3} ms, {} iterations",
        s.setup.rhs_ms, s.info.iterations
    );
    assert!(total.is_finite());
}

/// `a` with `shift` added to every diagonal entry: its values in CSR order.
fn shifted(a: &CsrMatrix, shift: f64) -> Vec<f64> {
    let mut v = a.data().to_vec();
    for &p in &a.diagonal_positions() {
        v[p as usize] += shift;
    }
    v
}

/// Later value updates on a GPU read the new values once, on their way into the staging
/// buffers (large matrices) or a host buffer (small ones), checking them there: accepted
/// values solve as a solver prepared for them; a non-finite value or a bad diagonal is
/// refused with its position, after the device took part of the values, and leaves the matrix,
/// the device and the solves as they were. Covers a CSR operand (overwritten in place) and a
/// converted one (made again from its kept source), each large enough to be staged and small.
fn later_value_updates_are_checked_on_the_way_and_refused_ones_change_nothing(_dev: GpuDevice) {
    let mut formats = Vec::new();
    for a in [
        families::poisson3d_7pt(48, 48, 48).unwrap(),
        families::fem_p1_2d(150_000, 5).unwrap(),
        families::poisson2d_5pt(60, 60).unwrap(),
    ] {
        assert!(
            a.nnz() < 131_072 || a.nnz() * 8 > 4 << 20,
            "{} entries",
            a.nnz()
        );
        for kind in [
            PrecondKind::None,
            PrecondKind::Jacobi,
            PrecondKind::ssor_ai(),
        ] {
            let mut p = Solver::new(&a)
                .device(Device::Gpu)
                .model(ModelChoice::Off)
                .precond(kind)
                .prepare()
                .unwrap();
            let spmv = p.plan().steps.iter().find(|s| s.step == "spmv").unwrap();
            formats.push(spmv.format.clone());
            // Every update is staged (the first one makes a converted operand keep its CSR
            // source) and recomputes the preconditioner on the device.
            for shift in [1.0, 2.0, 3.0] {
                p.update_values(&shifted(&a, shift)).unwrap();
            }
            let mut a3 = a.clone();
            a3.data_mut().copy_from_slice(&shifted(&a, 3.0));
            assert_eq!(p.matrix().data(), a3.data());
            let b = rhs(&a3, 4);
            let s = p.solve(&b).unwrap();
            assert!(true_residual(&a3, &s.x, &b) <= 1e-8, "{kind}");
            let fresh = Solver::new(&a3)
                .device(Device::Gpu)
                .model(ModelChoice::Off)
                .precond(p.precond())
                .solve(&b)
                .unwrap();
            assert!(
                s.info.iterations.abs_diff(fresh.info.iterations) <= 1,
                "{kind}: {} iterations after updates, {} prepared afresh",
                s.info.iterations,
                fresh.info.iterations
            );
            // Refused: a value late in the array (after most of it went to the device), and a
            // diagonal entry made negative.
            let mut nan = shifted(&a, 4.0);
            let late = nan.len() - 3;
            nan[late] = f64::NAN;
            let e = p.update_values(&nan).unwrap_err().to_string();
            assert!(e.contains(&format!("new value {late} ")), "{e}");
            let mut neg = shifted(&a, 4.0);
            let row = a.nrows() * 3 / 4;
            neg[a.diagonal_positions()[row] as usize] = -2.0;
            let e = p.update_values(&neg).unwrap_err();
            assert!(
                matches!(e, Error::Pcg(autopcg::PcgError::BadDiagonal { row: r, value, .. })
                    if r == row + 1 && value == -2.0),
                "{e}"
            );
            assert_eq!(p.matrix().data(), a3.data());
            let again = p.solve(&b).unwrap();
            assert_eq!(again.info.iterations, s.info.iterations, "{kind}");
            assert!(true_residual(&a3, &again.x, &b) <= 1e-8, "{kind}");
            // And an accepted update after the refused ones.
            p.update_values(&shifted(&a, 5.0)).unwrap();
            let mut a5 = a.clone();
            a5.data_mut().copy_from_slice(&shifted(&a, 5.0));
            let s5 = p.solve(&b).unwrap();
            assert!(true_residual(&a5, &s5.x, &b) <= 1e-8, "{kind}");
            // A right-hand side far out of the safe range makes the backend again, from the
            // host copy of the preconditioner that the device refreshes left behind: it is
            // brought up to date first, so the solve is a fresh solver's.
            let big: Vec<f64> = b.iter().map(|v| v * 2f64.powi(600)).collect();
            let sb = p.solve(&big).unwrap();
            let fresh_big = Solver::new(&a5)
                .device(Device::Gpu)
                .model(ModelChoice::Off)
                .precond(p.precond())
                .solve(&big)
                .unwrap();
            assert_eq!(sb.info.iterations, fresh_big.info.iterations, "{kind}");
            assert!(sb.x == fresh_big.x, "{kind}");
        }
    }
    println!("operand formats covered: {formats:?}");
    assert!(
        formats.iter().any(|f| f == "csr") && formats.iter().any(|f| f != "csr"),
        "this test means to cover a CSR operand and a converted one; the fallback rule chose \
         {formats:?}: pick other matrices"
    );
}

fn saved_plans_are_checked_before_any_device() {
    let a = families::poisson2d_5pt(30, 30).unwrap();
    let saved = saved_for(&a, &DeviceProps::hopper_like());
    // The automatic omega is recorded as the value it resolved to.
    assert_eq!(saved.precond.omega, Some(autopcg::solver::auto_omega(&a)));
    // Another matrix: the fingerprint is the error, whatever the device.
    let other = families::poisson2d_5pt(31, 30).unwrap();
    for device in [Device::Cpu, Device::Auto] {
        let e = Solver::new(&other)
            .device(device)
            .prepare_saved(&saved, "plan.json", false)
            .unwrap_err();
        assert!(
            matches!(
                e,
                Error::SavedPlan(SavedPlanError::Fingerprint { what: "rows", .. })
            ),
            "{e}"
        );
    }
    // The plan's matrix on the CPU: a saved plan is a GPU plan.
    let e = Solver::new(&a)
        .device(Device::Cpu)
        .prepare_saved(&saved, "plan.json", false)
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("the plan is for test (sm_90) but the solve was asked to run on the CPU"),
        "{e}"
    );
    // Forced, the fingerprint is only a note: the device is still refused.
    let e = Solver::new(&other)
        .device(Device::Cpu)
        .prepare_saved(&saved, "plan.json", true)
        .unwrap_err();
    assert!(
        matches!(e, Error::SavedPlan(SavedPlanError::Device { .. })),
        "{e}"
    );
}

fn a_saved_plan_prepares_once_and_solves_many(dev: GpuDevice) {
    let a = families::poisson3d_7pt(20, 20, 20).unwrap();
    let saved = saved_for(&a, dev.props());
    drop(dev);
    let text = saved.to_json().unwrap();
    let saved = SavedPlan::parse(&text, std::path::Path::new("plan.json")).unwrap();
    let mut p = Solver::new(&a)
        .device(Device::Gpu)
        .prepare_saved(&saved, "plan.json", false)
        .unwrap();
    assert_eq!(p.precond().omega(), saved.precond.omega);
    assert!(
        p.plan().source.starts_with("plan plan.json"),
        "{}",
        p.plan().source
    );
    assert_eq!(p.plan().steps.len(), saved.block().steps.len());
    let mut iters = Vec::new();
    for seed in 0..2 {
        let b = rhs(&a, seed);
        let s = p.solve(&b).unwrap();
        assert!(s.info.converged);
        assert!(true_residual(&a, &s.x, &b) <= 1e-8);
        iters.push(s.info.iterations);
    }
    // The same plan chosen by the builder runs the same iterations.
    let fresh = Solver::new(&a)
        .device(Device::Gpu)
        .model(ModelChoice::Off)
        .solve(&rhs(&a, 0))
        .unwrap();
    assert_eq!(fresh.info.iterations, iters[0]);
    // New values of the same pattern keep the plan.
    let values: Vec<f64> = a.data().iter().map(|v| 2.0 * v).collect();
    p.update_values(&values).unwrap();
    let b = rhs(&a, 0);
    let s = p.solve(&b).unwrap();
    assert!(s.info.converged);
    assert_eq!(s.info.iterations, iters[0]);
    // One-shot.
    let once = Solver::new(&a)
        .device(Device::Gpu)
        .solve_saved_plan(&saved, "plan.json", false, &b, None, |_| {
            std::ops::ControlFlow::Continue(())
        })
        .unwrap();
    assert_eq!(once.info.iterations, iters[0]);
}

/// A chain (4 on the diagonal, -1 beside it) whose row 0 also couples to every `stride`-th
/// row, each of those coupling to the `band - 1` rows before it too (diagonally dominant).
/// Row 0 of the explicit product unites the spokes' rows of K, `band + 1` entries each, over
/// columns spread across the whole matrix.
fn banded_star(n: usize, stride: usize, band: usize) -> CsrMatrix {
    let (mut rows, mut cols, mut vals) = (Vec::new(), Vec::new(), Vec::new());
    let mut off = vec![0.0f64; n];
    let mut couple = |i: usize, j: usize, v: f64| {
        rows.extend([i as u32, j as u32]);
        cols.extend([j as u32, i as u32]);
        vals.extend([v, v]);
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
    for (i, o) in off.iter().enumerate() {
        rows.push(i as u32);
        cols.push(i as u32);
        vals.push(4.0 + o);
    }
    CsrMatrix::from_triplets(n, n, &rows, &cols, &vals).unwrap()
}

/// Whether the device takes in every row of a product whose row `i` unites the rows `part(q)`
/// (ascending columns) over `united(i)`: a row uniting more than GRAM_MERGE rows is a block's,
/// which refuses it only where those rows hold more than GRAM_LONG_CAP entries together and
/// their columns span more than GRAM_LONG_CAP words of 32 (a thread's merge takes any other).
fn device_takes_every_row<'a>(
    n: usize,
    united: impl Fn(usize) -> &'a [u32],
    part: impl Fn(usize) -> &'a [u32],
) -> bool {
    use autopcg::gpu::kernels::ssor::{GRAM_LONG_CAP, GRAM_MERGE};
    (0..n).all(|i| {
        let qs = united(i);
        if qs.len() <= GRAM_MERGE {
            return true;
        }
        let gathered: usize = qs.iter().map(|&q| part(q as usize).len()).sum();
        let lowest = qs.iter().map(|&q| part(q as usize)[0]).min().unwrap();
        let highest = qs
            .iter()
            .map(|&q| *part(q as usize).last().unwrap())
            .max()
            .unwrap();
        let words = ((highest - (lowest & !31)) >> 5) as usize + 1;
        gathered <= GRAM_LONG_CAP || words <= GRAM_LONG_CAP
    })
}

/// The explicit SSOR-AI product's structure counted on the device is the host pass's, on
/// stencils, FEM, a Kronecker product, power-law rows, bands and the SuiteSparse fixtures, rows
/// of K^T longer than one thread's merge (formed by a block) included, rows uniting more
/// entries of K than a block sorts (held as bits) and rows of M past the histogram's bins
/// (binned from their lengths) too; where the device cannot count a matrix (a row of M uniting
/// more entries of K than it sorts, over more columns than its bits span) it says so, and only
/// then.
fn the_device_counts_the_explicit_product_as_the_host(dev: GpuDevice) {
    use autopcg::generator::factors::K1Factors;
    use autopcg::gpu::kernels::ssor::{ssor_k1_gram_count, GRAM_HIST, GRAM_LONG_CAP, GRAM_MERGE};
    let fixture = |f: &str| {
        autopcg::sparse::mm::read_matrix(format!("../../matrices/{f}.mtx"), &Default::default())
            .expect("fixture")
            .matrix
    };
    let bus = fixture("1138_bus");
    let cases = [
        (
            "poisson3d 33x20x41",
            families::poisson3d_7pt(33, 20, 41).unwrap(),
        ),
        ("poisson2d 300x7", families::poisson2d_5pt(300, 7).unwrap()),
        (
            "poisson3d-27pt 20^3",
            families::poisson3d_27pt(20, 20, 20).unwrap(),
        ),
        (
            "poisson2d-9pt 150^2",
            families::poisson2d_9pt(150, 150).unwrap(),
        ),
        (
            "aniso2d 90x70",
            families::anisotropic2d(90, 70, 0.01, 0.5).unwrap(),
        ),
        ("banded 15", families::banded_spd(20_000, 15, 4).unwrap()),
        ("banded 16", families::banded_spd(20_000, 16, 4).unwrap()),
        // Rows of K^T of 71 uniting 5041 entries of K: past the gather, within the bits.
        ("banded 70", families::banded_spd(2_000, 70, 4).unwrap()),
        // Rows of M of 1041 entries (past the histogram), each uniting 271441 entries of K.
        ("banded 520", families::banded_spd(1_200, 520, 4).unwrap()),
        // Row 0 of M unites 99 rows of K of 51 entries over 138601 columns: refused.
        ("banded star", banded_star(140_000, 1400, 50)),
        ("fem2d 50000", families::fem_p1_2d(50_000, 5).unwrap()),
        (
            "powerlaw",
            families::random_powerlaw_spd(30_000, 9.0, 1.3, 11).unwrap(),
        ),
        (
            "1138_bus x poisson2d 6^2",
            autopcg::sparse::families::kron(&bus, &families::poisson2d_5pt(6, 6).unwrap()).unwrap(),
        ),
        ("1138_bus", bus),
        ("bcsstk13", fixture("bcsstk13")),
        ("s3rmt3m3", fixture("s3rmt3m3")),
        ("identity", CsrMatrix::identity(45).unwrap()),
    ];
    let (mut counted, mut counted_long, mut refused) = (0, 0, 0);
    let (mut counted_past_gather, mut counted_past_hist) = (0, 0);
    for (name, a) in cases {
        let v = K1Factors::of(&a).expect("views");
        let mut host = v.gram_totals();
        let longest_kt = (0..a.nrows()).map(|i| v.kt_row(i).len()).max().unwrap();
        let gathered = (0..a.nrows())
            .map(|i| {
                v.kt_row(i)
                    .iter()
                    .map(|&q| v.k_row(q as usize).len())
                    .sum::<usize>()
            })
            .max()
            .unwrap();
        let countable = device_takes_every_row(a.nrows(), |i| v.kt_row(i), |q| v.k_row(q));
        let dev_count = ssor_k1_gram_count(&dev, &a, Some(longest_kt)).expect(name);
        // The longest row of K^T read back on the device instead decides the same.
        assert_eq!(
            ssor_k1_gram_count(&dev, &a, None).expect(name),
            dev_count,
            "{name}: the count with the longest row of K^T read back"
        );
        let Some(c) = dev_count else {
            assert!(!countable, "{name}: the device refused a countable matrix");
            refused += 1;
            continue;
        };
        assert!(countable, "{name}: counted past the device's limits");
        counted += 1;
        counted_long += usize::from(longest_kt > GRAM_MERGE);
        counted_past_gather += usize::from(gathered > GRAM_LONG_CAP);
        counted_past_hist += usize::from(host.hist.len() > GRAM_HIST);
        // The device's histogram holds GRAM_HIST bins, or reaches the longest row past them.
        host.hist.resize(host.hist.len().max(GRAM_HIST), 0);
        assert_eq!(c.hist, host.hist, "{name}: row lengths");
        assert_eq!(c.diagonals, host.diagonals, "{name}: diagonals");
        assert_eq!(
            (c.x_lines, c.dist, c.warp_slots, c.diag_stored),
            (host.x_lines, host.dist, host.warp_slots, host.diag_stored),
            "{name}: x lines, distances, warp slots, stored diagonal"
        );
    }
    // Every matrix but the banded star; the power-law rows, the Kronecker product, the bands
    // of 16, 70 and 520 and the fixtures with rows of K^T past one thread's merge.
    assert!(
        counted >= 15,
        "only {counted} matrices counted on the device"
    );
    assert!(
        counted_long >= 6,
        "only {counted_long} with rows counted by blocks"
    );
    assert!(
        counted_past_gather >= 2 && counted_past_hist >= 1,
        "past the gather {counted_past_gather}, past the histogram {counted_past_hist}"
    );
    assert_eq!(
        refused, 1,
        "the banded star was counted, or another matrix refused"
    );
}

/// `a` with row `r`'s diagonal entry set to `v`, or left out when `v` is `None`.
fn with_diagonal(a: &CsrMatrix, r: usize, v: Option<f64>) -> CsrMatrix {
    let (mut rows, mut cols, mut vals) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..a.nrows() {
        let (c, x) = a.row(i);
        for (&j, &y) in c.iter().zip(x) {
            let y = if i == r && j as usize == r {
                match v {
                    Some(v) => v,
                    None => continue,
                }
            } else {
                y
            };
            rows.push(i as u32);
            cols.push(j);
            vals.push(y);
        }
    }
    CsrMatrix::from_triplets(a.nrows(), a.ncols(), &rows, &cols, &vals).unwrap()
}

/// What an upload ahead finds on the device (the largest magnitude, the first bad diagonal
/// entry, ||A||_inf) is what the host's passes find, bit for bit, on matrices copied directly
/// and through the staging buffers, with a diagonal entry missing, zero, negative, NaN or
/// infinite, and with a NaN or an infinity off the diagonal.
fn uploads_ahead_check_on_the_device_what_the_host_checks(dev: GpuDevice) {
    use autopcg::solver::gpu::UploadedA;
    use autopcg::solver::scaling::{first_bad_diagonal, ValueStats};
    let small = families::poisson2d_5pt(12, 9).unwrap();
    // 3.6 MB of values: staged.
    let staged = families::fem_p1_2d(60_000, 5).unwrap();
    assert!(staged.nnz() * 8 > 1 << 20);
    let mut cases = vec![
        ("poisson2d 12x9".to_string(), small.clone()),
        ("fem 60000".to_string(), staged.clone()),
        (
            "poisson3d 9x8x7".to_string(),
            families::poisson3d_7pt(9, 8, 7).unwrap(),
        ),
    ];
    for (base, a) in [("poisson2d", &small), ("fem", &staged)] {
        let r = a.nrows() / 3 + 1;
        for (what, v) in [
            ("missing", None),
            ("zero", Some(0.0)),
            ("negative", Some(-2.0)),
            ("NaN", Some(f64::NAN)),
            ("infinite", Some(f64::INFINITY)),
        ] {
            cases.push((
                format!("{base}, diagonal {what} at {r}"),
                with_diagonal(a, r, v),
            ));
        }
        // Off the diagonal: the first entry of row r that is not its diagonal entry.
        for (what, v) in [("NaN", f64::NAN), ("infinite", -f64::INFINITY)] {
            let mut values = a.data().to_vec();
            let lo = a.indptr()[r] as usize;
            let k = if a.indices()[lo] as usize == r {
                lo + 1
            } else {
                lo
            };
            values[k] = v;
            cases.push((
                format!("{base}, {what} off the diagonal in row {r}"),
                a.with_values(values).unwrap(),
            ));
        }
    }
    for (name, a) in &cases {
        let up = UploadedA::upload(&dev, a).unwrap();
        let host = ValueStats::of(a.indptr(), a.data());
        assert_eq!(
            up.max_abs().to_bits(),
            host.max_abs.to_bits(),
            "{name}: max |a_ij|"
        );
        assert_eq!(
            up.inf_norm().to_bits(),
            host.inf_norm.to_bits(),
            "{name}: ||A||_inf"
        );
        assert_eq!(
            up.bad_diagonal(),
            first_bad_diagonal(a).map(|(row, _)| row - 1),
            "{name}: first bad diagonal entry"
        );
        assert_eq!(up.matrix().shape(), (a.nrows(), a.ncols()), "{name}");
        assert!(up.ms() >= 0.0, "{name}");
    }
}

/// A backend made from A uploaded ahead solves as one that uploads A itself, bit for bit, for
/// every preconditioner and the formats the fallback rule picks, scaled systems included (the
/// arrays uploaded ahead are then replaced by scaled ones); a prepared solver reports the
/// upload ahead and solves to the tolerance; a bad diagonal found on the device is the error
/// the host's check gives.
fn a_backend_on_a_uploaded_ahead_solves_as_one_that_uploads_it(dev: GpuDevice) {
    use autopcg::solver::gpu::{GpuBackend, UploadedA};
    use autopcg::solver::{pcg, PcgBackend};
    let fem = families::fem_p1_2d(20_000, 3).unwrap();
    let p3 = families::poisson3d_7pt(24, 20, 18).unwrap();
    // Scaled on the device by 2^k (|a_ij| below 2^-128); its right-hand side is not.
    let tiny = p3
        .with_values(p3.data().iter().map(|v| v * 1e-200).collect())
        .unwrap();
    let params = autopcg::PcgParams {
        tol: 1e-10,
        max_iter: 2000,
        ..Default::default()
    };
    for (name, a, b) in [
        ("fem 20000", &fem, rhs(&fem, 7)),
        ("poisson3d", &p3, rhs(&p3, 7)),
        ("poisson3d x 1e-200", &tiny, rhs(&p3, 7)),
    ] {
        for kind in [
            PrecondKind::None,
            PrecondKind::Jacobi,
            PrecondKind::ssor_ai(),
            PrecondKind::ssor_ai().with_form(SsorForm::Explicit),
            PrecondKind::ssor_ai2(),
        ] {
            let what = format!("{name}, {kind}");
            let req = PlanRequest::new(a, kind, Target::Gpu(dev.props().clone()));
            let planned = plan(&req).unwrap();
            if kind == PrecondKind::Jacobi {
                assert!(planned.preconditioner.built_by_backend(), "{what}");
            }
            let choice = planned.gpu.as_ref().unwrap();
            let run = |mut be: GpuBackend| {
                be.reserve_iterations(params.max_iter).unwrap();
                let info = pcg(&mut be, &params, |_| std::ops::ControlFlow::Continue(())).unwrap();
                (info.iterations, be.solution().unwrap())
            };
            let own = GpuBackend::new(&dev, a, &planned.preconditioner, &b, None, choice);
            let own = run(own.unwrap());
            let up = UploadedA::upload(&dev, a).unwrap();
            let mut ahead =
                GpuBackend::with_uploaded(&dev, a, up, &planned.preconditioner, choice).unwrap();
            assert!(
                ahead.set_problem(&b, None).unwrap(),
                "{what}: same scale factors"
            );
            let ahead = run(ahead);
            assert_eq!(ahead.0, own.0, "{what}: iterations");
            assert!(
                ahead
                    .1
                    .iter()
                    .zip(&own.1)
                    .all(|(p, q)| p.to_bits() == q.to_bits()),
                "{what}: solutions differ"
            );
            assert!(true_residual(a, &ahead.1, &b) < 1e-8, "{what}");
        }
    }
    // Arrays of another matrix are refused.
    let up = UploadedA::upload(&dev, &p3).unwrap();
    let req = PlanRequest::new(&fem, PrecondKind::None, Target::Gpu(dev.props().clone()));
    let planned = plan(&req).unwrap();
    assert!(GpuBackend::with_uploaded(
        &dev,
        &fem,
        up,
        &planned.preconditioner,
        planned.gpu.as_ref().unwrap()
    )
    .is_err());
    // Through a prepared solver: the upload ahead is reported and the solve converges.
    for kind in [PrecondKind::None, PrecondKind::ssor_ai()] {
        let mut p = Solver::new(&fem)
            .device(Device::Gpu)
            .model(ModelChoice::Off)
            .precond(kind)
            .prepare()
            .unwrap();
        assert!(p.setup().ahead_ms > 0.0, "{kind}: {:?}", p.setup());
        let b = rhs(&fem, 2);
        let s = p.solve(&b).unwrap();
        assert!(true_residual(&fem, &s.x, &b) < 1e-7, "{kind}");
        assert!(
            s.setup.ahead_ms == 0.0,
            "{kind}: a solve on a prepared solver uploads no A"
        );
    }
    // A zero diagonal entry in row 38 (1-based), found on the device: the host's error, also
    // with Jacobi, whose plan leaves the check to the device.
    let bad = with_diagonal(&p3, 37, Some(0.0));
    for kind in [PrecondKind::None, PrecondKind::Jacobi] {
        let err = Solver::new(&bad)
            .device(Device::Gpu)
            .model(ModelChoice::Off)
            .precond(kind)
            .prepare()
            .unwrap_err();
        match err {
            Error::Pcg(autopcg::PcgError::BadDiagonal {
                row,
                value,
                precond,
            }) => {
                assert_eq!((row, value), (38, 0.0), "{kind}");
                assert_eq!(precond, kind.to_string());
            }
            other => panic!("{kind}: a zero diagonal entry gave {other:?}"),
        }
    }
}

/// The structure of A and of SSOR-AI's first-order factors counted on the device from the
/// arrays uploaded ahead is the host pass's, and so are the features and counts the
/// selection reads from it, on stencils, FEM, power-law rows, a Kronecker product, the identity
/// and the fixtures; where the device does not count a matrix (a row of GRAM_HIST entries or
/// more) it says so, and only then. A prepared solver with a model reads them without falling
/// back to the host.
fn the_device_counts_the_factors_as_the_host(dev: GpuDevice) {
    use autopcg::generator::factors::K1Factors;
    use autopcg::gpu::kernels::ssor::{ssor_k1_totals, GRAM_HIST};
    use autopcg::solver::gpu::UploadedA;
    use autopcg::sparse::features::KnownSymmetry;
    let fixture = |f: &str| {
        autopcg::sparse::mm::read_matrix(format!("../../matrices/{f}.mtx"), &Default::default())
            .expect("fixture")
            .matrix
    };
    let bus = fixture("1138_bus");
    let cases = [
        (
            "poisson3d 33x20x41",
            families::poisson3d_7pt(33, 20, 41).unwrap(),
        ),
        ("poisson2d 300x7", families::poisson2d_5pt(300, 7).unwrap()),
        (
            "poisson3d-27pt 20^3",
            families::poisson3d_27pt(20, 20, 20).unwrap(),
        ),
        (
            "poisson2d-9pt 150^2",
            families::poisson2d_9pt(150, 150).unwrap(),
        ),
        (
            "anisotropic 90x70",
            families::anisotropic2d(90, 70, 0.01, 0.5).unwrap(),
        ),
        ("fem 30000", families::fem_p1_2d(30_000, 9).unwrap()),
        (
            "power-law 20000",
            families::random_powerlaw_spd(20_000, 9.0, 1.3, 4).unwrap(),
        ),
        (
            "1138_bus x poisson 6^2",
            autopcg::sparse::families::kron(&bus, &families::poisson2d_5pt(6, 6).unwrap()).unwrap(),
        ),
        ("identity 5000", CsrMatrix::identity(5000).unwrap()),
        ("1138_bus", bus.clone()),
        ("bcsstk13", fixture("bcsstk13")),
        ("s3rmt3m3", fixture("s3rmt3m3")),
    ];
    let mut counted = 0;
    for (name, a) in &cases {
        let v = K1Factors::of(a).expect("views");
        let omega = v.auto_omega();
        let up = UploadedA::upload(&dev, a).unwrap();
        let device = ssor_k1_totals(&dev, up.matrix(), omega).unwrap();
        let longest = (0..a.nrows()).map(|i| a.row_len(i)).max().unwrap();
        let Some(t) = device else {
            assert!(longest >= GRAM_HIST, "{name}: not counted on the device");
            continue;
        };
        assert!(longest < GRAM_HIST, "{name}: counted past the histogram");
        counted += 1;
        let mut host = v.factor_totals(omega);
        for s in [&mut host.a, &mut host.k, &mut host.kt] {
            s.hist.resize(GRAM_HIST, 0);
        }
        assert_eq!(t.a, host.a, "{name}: A");
        assert_eq!(t.k, host.k, "{name}: K");
        assert_eq!(t.kt, host.kt, "{name}: K^T");
        assert_eq!(
            (t.values_finite, t.off_diagonal_zero),
            (host.values_finite, host.off_diagonal_zero),
            "{name}: values"
        );
        let sym = Some(KnownSymmetry::Symmetric);
        let from = v.features_from(t, sym).expect("device totals add up");
        let pass = v.features(omega, sym);
        assert_eq!((&from.k, &from.kt), (&pass.k, &pass.kt), "{name}: features");
        assert_eq!(from.counts, pass.counts, "{name}: counts");
        assert_eq!(from.counts_a, pass.counts_a, "{name}: A's counts");
    }
    assert!(
        counted >= 10,
        "only {counted} matrices counted on the device"
    );
    // Through a prepared solver (1.5M entries: counted on the device), with the device's model
    // where there is one.
    let a = families::poisson3d_7pt(60, 60, 60).unwrap();
    let mut p = Solver::new(&a)
        .device(Device::Gpu)
        .precond(PrecondKind::ssor_ai())
        .prepare()
        .unwrap();
    if p.plan().source.starts_with("model") {
        assert!(
            !p.notes().iter().any(|n| n.contains("counted on the host")),
            "{:?}",
            p.notes()
        );
    }
    let b = rhs(&a, 4);
    let s = p.solve(&b).unwrap();
    assert!(true_residual(&a, &s.x, &b) < 1e-7);
}

/// Second-order SSOR-AI's factors counted on the device from the arrays uploaded ahead are the
/// host's built factors' counts (their totals, and the SpMV counts and the explicit product's
/// bound the plan reads from them), on stencils, FEM, power-law rows, the identity, the
/// fixtures (rows of K merged by a thread and by a block) and a band whose rows of K unite
/// more entries than a block sorts (held as bits) and pass the histogram's bins (binned from
/// their lengths), every one counted there (none spans more columns than a block's bits
/// cover). A prepared solver on the GPU leaves
/// the factors to the device build (noted), solves to the tolerance and takes new values,
/// refreshed on the device, solving then as a solver prepared for them does, bit for bit.
fn the_device_counts_and_builds_second_order_factors(dev: GpuDevice) {
    use autopcg::generator::factors::{structure_totals, K1Factors, K2Features};
    use autopcg::generator::select::SpmvCounts;
    use autopcg::gpu::kernels::ssor::{ssor_k2_totals, GRAM_HIST};
    use autopcg::solver::gpu::UploadedA;
    use autopcg::solver::{PlannedPrecond, Preconditioner};
    use autopcg::sparse::features::KnownSymmetry;
    let fixture = |f: &str| {
        autopcg::sparse::mm::read_matrix(format!("../../matrices/{f}.mtx"), &Default::default())
            .expect("fixture")
            .matrix
    };
    let cases = [
        (
            "poisson3d 33x20x41",
            families::poisson3d_7pt(33, 20, 41).unwrap(),
        ),
        (
            "poisson3d-27pt 20^3",
            families::poisson3d_27pt(20, 20, 20).unwrap(),
        ),
        ("fem 30000", families::fem_p1_2d(30_000, 9).unwrap()),
        (
            "power-law 20000",
            families::random_powerlaw_spd(20_000, 9.0, 1.3, 4).unwrap(),
        ),
        ("identity 5000", CsrMatrix::identity(5000).unwrap()),
        ("1138_bus", fixture("1138_bus")),
        ("bcsstk13", fixture("bcsstk13")),
        ("s3rmt3m3", fixture("s3rmt3m3")),
        // Rows of K of 1041 entries, each uniting 271441 entries of the first-order K.
        ("banded 520", families::banded_spd(1_200, 520, 4).unwrap()),
    ];
    let (mut counted, mut past_hist) = (0, 0);
    for (name, a) in &cases {
        let omega = autopcg::solver::auto_omega(a);
        let (k, kt) = match Preconditioner::build(a, &PlannedPrecond::ssor_k2_kind(omega)) {
            Ok(Preconditioner::SsorFactored { k, kt, .. }) => (k, kt),
            other => panic!("{name}: factored form expected, got {other:?}"),
        };
        let up = UploadedA::upload(&dev, a).unwrap();
        let longest = (0..a.nrows())
            .map(|i| k.row_len(i).max(kt.row_len(i)))
            .max()
            .unwrap();
        let Some((tk, tkt)) = ssor_k2_totals(&dev, up.matrix()).unwrap() else {
            panic!("{name}: not counted on the device");
        };
        counted += 1;
        past_hist += usize::from(longest >= GRAM_HIST);
        for (what, got, m) in [("K", &tk, &k), ("K^T", &tkt, &kt)] {
            let mut host = structure_totals(m);
            host.hist.resize(host.hist.len().max(GRAM_HIST), 0);
            assert_eq!(*got, host, "{name}: {what}");
        }
        let off_zero = K1Factors::of(a)
            .unwrap()
            .factor_totals(omega)
            .off_diagonal_zero;
        let t = autopcg::generator::factors::K2Totals { k: tk, kt: tkt };
        let f = K2Features::from_totals(a.nrows(), t, off_zero).expect("the totals add up");
        let tri = KnownSymmetry::Triangular;
        assert_eq!(
            f.counts.0,
            SpmvCounts::of_knowing(&k, tri),
            "{name}: K's counts"
        );
        assert_eq!(
            f.counts.1,
            SpmvCounts::of_knowing(&kt, tri),
            "{name}: K^T's counts"
        );
        assert_eq!(
            f.explicit_bound,
            autopcg::generator::ssor::explicit_nnz_bound(&k),
            "{name}: the product's bound"
        );
    }
    assert_eq!(counted, cases.len());
    assert!(past_hist >= 1, "no row past the histogram");
    // Through a prepared solver (1.5M entries: counted on the device).
    let a = families::poisson3d_7pt(60, 60, 60).unwrap();
    fn prepare(m: &CsrMatrix) -> autopcg::PreparedSolver<'_> {
        Solver::new(m)
            .device(Device::Gpu)
            .precond(PrecondKind::ssor_ai2())
            .prepare()
            .unwrap()
    }
    let mut p = prepare(&a);
    assert!(
        p.notes()
            .iter()
            .any(|n| n.contains("K = I - X + X^2") && n.contains("on the device")),
        "{:?}",
        p.notes()
    );
    let b = rhs(&a, 4);
    let s = p.solve(&b).unwrap();
    assert!(true_residual(&a, &s.x, &b) < 1e-7);
    let mut a2 = a.clone();
    let pos = a2.diagonal_positions();
    let v = a2.data_mut();
    for &q in &pos {
        v[q as usize] *= 1.25;
    }
    p.update_values(a2.data()).unwrap();
    let s2 = p.solve(&b).unwrap();
    let fresh = prepare(&a2).solve(&b).unwrap();
    assert_eq!(s2.info.iterations, fresh.info.iterations);
    assert_eq!(s2.x, fresh.x, "the refreshed factors solve as fresh ones");
    assert!(true_residual(&a2, &s2.x, &b) < 1e-7);
}

/// SSOR-AI's checks of A read on the device from the arrays uploaded ahead are the host's: on
/// good matrices K's entries, their squared row lengths and the coupling (so the automatic
/// omega, bit for bit, below 1 on most of them); the first bad diagonal entry (missing, zero,
/// negative, NaN, infinite) where there is one; views made from them exactly where the host
/// makes views (not for a pattern with fewer entries below the diagonal than above). A prepared
/// solver with SSOR-AI reads them there (no note of a host read) and solves.
fn the_device_reads_ssor_checks_as_the_host(dev: GpuDevice) {
    use autopcg::generator::factors::K1Factors;
    use autopcg::gpu::kernels::ssor::ssor_k1_checks;
    use autopcg::solver::gpu::UploadedA;
    let fixture = |f: &str| {
        autopcg::sparse::mm::read_matrix(format!("../../matrices/{f}.mtx"), &Default::default())
            .expect("fixture")
            .matrix
    };
    let bus = fixture("1138_bus");
    let mut nan_off = families::poisson2d_5pt(40, 30).unwrap();
    let p = nan_off.indptr()[100] as usize;
    nan_off.data_mut()[p] = f64::NAN;
    let good = [
        (
            "poisson3d 33x20x41",
            families::poisson3d_7pt(33, 20, 41).unwrap(),
        ),
        (
            "poisson3d-27pt 20^3",
            families::poisson3d_27pt(20, 20, 20).unwrap(),
        ),
        (
            "anisotropic 90x70",
            families::anisotropic2d(90, 70, 0.01, 0.5).unwrap(),
        ),
        ("fem 30000", families::fem_p1_2d(30_000, 9).unwrap()),
        (
            "power-law 20000",
            families::random_powerlaw_spd(20_000, 9.0, 1.3, 4).unwrap(),
        ),
        ("identity 5000", CsrMatrix::identity(5000).unwrap()),
        ("1 x 1", CsrMatrix::identity(1).unwrap()),
        ("NaN off the diagonal", nan_off),
        ("1138_bus", bus.clone()),
        ("bcsstk13", fixture("bcsstk13")),
        ("s3rmt3m3", fixture("s3rmt3m3")),
    ];
    let mut below_one = 0;
    for (name, a) in &good {
        let v = K1Factors::of(a).expect("views");
        let up = UploadedA::upload(&dev, a).unwrap();
        let c = ssor_k1_checks(&dev, up.matrix()).unwrap().expect("read");
        let host = v.checks();
        assert_eq!(c.bad_diagonal, None, "{name}");
        assert_eq!(
            (c.nnz_k, c.k_len_squares),
            (host.nnz_k, host.k_len_squares),
            "{name}"
        );
        // Equal as values (an empty sum is +0 on the device, either zero on the host).
        assert!(
            c.coupling == host.coupling,
            "{name}: {} {}",
            c.coupling,
            host.coupling
        );
        let w = K1Factors::from_checks(a, &c).expect("views from the device's checks");
        assert_eq!(
            w.auto_omega().to_bits(),
            autopcg::solver::auto_omega(a).to_bits(),
            "{name}"
        );
        assert_eq!(w.explicit_nnz_bound(), v.explicit_nnz_bound(), "{name}");
        below_one += usize::from(w.auto_omega() < 1.0);
    }
    assert!(
        below_one >= 4,
        "only {below_one} matrices with omega below 1"
    );
    // Bad diagonals: the first, as the host finds it, on rows a thread checks (5 entries a
    // row) and rows a warp checks (the 27-point stencil's 20 or more).
    let p = families::poisson2d_5pt(30, 20).unwrap();
    let p27 = families::poisson3d_27pt(9, 8, 7).unwrap();
    assert!(p27.nnz() >= 16 * p27.nrows());
    let cases = |m: &CsrMatrix| {
        let last = m.nrows() - 1;
        [
            (0, None),
            (last, None),
            (17, Some(0.0)),
            (17, Some(-2.0)),
            (250, Some(f64::NAN)),
            (last, Some(f64::INFINITY)),
        ]
    };
    for (base, (r, v)) in cases(&p)
        .into_iter()
        .map(|c| (&p, c))
        .chain(cases(&p27).into_iter().map(|c| (&p27, c)))
    {
        let last = base.nrows() - 1;
        let mut a = with_diagonal(base, r, v);
        // A later bad entry too, where there is a later row: the first is reported.
        if r + 40 <= last {
            let d = a.diagonal_positions()[r + 40] as usize;
            a.data_mut()[d] = -1.0;
        }
        let up = UploadedA::upload(&dev, &a).unwrap();
        let c = ssor_k1_checks(&dev, up.matrix()).unwrap().expect("read");
        // The host's row is 1-based.
        let host = autopcg::solver::scaling::first_bad_diagonal(&a).map(|(row, _)| row - 1);
        assert_eq!(c.bad_diagonal, host, "row {r} value {v:?}");
        assert_eq!(c.bad_diagonal, Some(r), "row {r} value {v:?}");
        assert!(K1Factors::from_checks(&a, &c).is_none());
        assert!(K1Factors::of(&a).is_none());
    }
    // Patterns that are not symmetric: views exactly where the host makes them.
    let (mut rows, mut cols, mut vals) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..p.nrows() {
        let (c, x) = p.row(i);
        for (&j, &y) in c.iter().zip(x) {
            rows.push(i as u32);
            cols.push(j);
            vals.push(y);
        }
    }
    let drop_at = |skip: usize| {
        let keep: Vec<usize> = (0..rows.len()).filter(|&e| e != skip).collect();
        let r: Vec<u32> = keep.iter().map(|&e| rows[e]).collect();
        let c: Vec<u32> = keep.iter().map(|&e| cols[e]).collect();
        let v: Vec<f64> = keep.iter().map(|&e| vals[e]).collect();
        CsrMatrix::from_triplets(p.nrows(), p.ncols(), &r, &c, &v).unwrap()
    };
    let below = (0..rows.len()).find(|&e| cols[e] < rows[e]).unwrap();
    let above = (0..rows.len()).find(|&e| cols[e] > rows[e]).unwrap();
    for (name, a) in [
        ("one below dropped", drop_at(below)),
        ("one above dropped", drop_at(above)),
    ] {
        let up = UploadedA::upload(&dev, &a).unwrap();
        let c = ssor_k1_checks(&dev, up.matrix()).unwrap().expect("read");
        assert_eq!(
            K1Factors::from_checks(&a, &c).is_some(),
            K1Factors::of(&a).is_some(),
            "{name}"
        );
        assert_eq!(
            c.nnz_k,
            K1Factors::of(&p).unwrap().nnz_k() as u64 - u64::from(name.contains("below")),
            "{name}"
        );
    }
    // Not square: not read.
    let wide = CsrMatrix::from_triplets(2, 3, &[0, 1], &[0, 1], &[1.0, 1.0]).unwrap();
    let up = UploadedA::upload(&dev, &wide).unwrap();
    assert_eq!(ssor_k1_checks(&dev, up.matrix()).unwrap(), None);
    // Through a prepared solver (read on the device from the arrays uploaded ahead, whatever
    // the size), omega below 1.
    let a = families::random_powerlaw_spd(150_000, 9.0, 1.3, 4).unwrap();
    let mut p = Solver::new(&a)
        .device(Device::Gpu)
        .precond(PrecondKind::ssor_ai())
        .prepare()
        .unwrap();
    assert!(
        !p.notes().iter().any(|n| n.contains("read on the host")),
        "{:?}",
        p.notes()
    );
    let omega = autopcg::solver::auto_omega(&a);
    assert!(omega < 1.0);
    assert_eq!(p.precond().omega().map(f64::to_bits), Some(omega.to_bits()));
    let b = rhs(&a, 5);
    let s = p.solve(&b).unwrap();
    assert!(true_residual(&a, &s.x, &b) < 1e-7);
}

/// What the device builds and counts of A alone, from the arrays uploaded ahead, is the host's:
/// Jacobi's inverse diagonal bit for bit (none for a matrix missing a diagonal entry), and the
/// structure of A the selection reads for no preconditioner and Jacobi (its totals, and the
/// counts made from them); where the device does not count a matrix (a row of GRAM_HIST
/// entries or more) it says so, and only then. Prepared solvers with those preconditioners
/// count A on the device (no note of a host count) and build Jacobi there.
fn the_device_builds_jacobi_and_counts_a_as_the_host(dev: GpuDevice) {
    use autopcg::generator::factors::{a_counts_from, structure_totals};
    use autopcg::generator::select::SpmvCounts;
    use autopcg::gpu::kernels::ssor::{csr_totals, jacobi_inv_diag, GRAM_HIST};
    use autopcg::solver::gpu::UploadedA;
    use autopcg::sparse::features::KnownSymmetry;
    let fixture = |f: &str| {
        autopcg::sparse::mm::read_matrix(format!("../../matrices/{f}.mtx"), &Default::default())
            .expect("fixture")
            .matrix
    };
    // Not symmetric, row 2 (1-based) without its diagonal entry.
    let holed = CsrMatrix::from_triplets(
        4,
        4,
        &[0, 0, 1, 2, 3, 3],
        &[0, 3, 2, 2, 1, 3],
        &[4.0, 1.0, 2.0, 3.0, 0.5, 5.0],
    )
    .unwrap();
    let cases = [
        (
            "poisson3d 33x20x41",
            families::poisson3d_7pt(33, 20, 41).unwrap(),
        ),
        (
            "poisson3d-27pt 20^3",
            families::poisson3d_27pt(20, 20, 20).unwrap(),
        ),
        ("fem 30000", families::fem_p1_2d(30_000, 9).unwrap()),
        (
            "power-law 20000",
            families::random_powerlaw_spd(20_000, 9.0, 1.3, 4).unwrap(),
        ),
        ("identity 5000", CsrMatrix::identity(5000).unwrap()),
        ("1138_bus", fixture("1138_bus")),
        ("bcsstk13", fixture("bcsstk13")),
        ("holed 4x4", holed),
    ];
    let mut counted = 0;
    for (name, a) in &cases {
        let up = UploadedA::upload(&dev, a).unwrap();
        let host_diag = a.diagonal_positions();
        match jacobi_inv_diag(&dev, up.matrix()).unwrap() {
            Some(d) => {
                assert!(
                    host_diag
                        .iter()
                        .all(|&p| p != autopcg::sparse::csr::NO_ENTRY),
                    "{name}: built without every diagonal entry"
                );
                let want: Vec<u64> = a.diagonal().iter().map(|v| (1.0 / v).to_bits()).collect();
                let got: Vec<u64> = dev
                    .download(&d)
                    .unwrap()
                    .iter()
                    .map(|v| v.to_bits())
                    .collect();
                assert_eq!(got, want, "{name}: inverse diagonal");
            }
            None => assert!(
                host_diag.contains(&autopcg::sparse::csr::NO_ENTRY),
                "{name}: not built on the device"
            ),
        }
        let device = csr_totals(&dev, up.matrix()).unwrap();
        let longest = (0..a.nrows()).map(|i| a.row_len(i)).max().unwrap();
        let Some(t) = device else {
            assert!(longest >= GRAM_HIST, "{name}: not counted on the device");
            continue;
        };
        assert!(longest < GRAM_HIST, "{name}: counted past the histogram");
        counted += 1;
        let mut host = structure_totals(a);
        host.hist.resize(GRAM_HIST, 0);
        assert_eq!(t, host, "{name}: totals");
        for sym in [KnownSymmetry::Symmetric, KnownSymmetry::Unknown] {
            let symmetric = sym.symmetric(a);
            if sym == KnownSymmetry::Symmetric && !symmetric {
                continue;
            }
            assert_eq!(
                a_counts_from(a, t.clone(), symmetric),
                Some(SpmvCounts::of_knowing(a, sym)),
                "{name}: counts"
            );
        }
    }
    assert!(
        counted >= 7,
        "only {counted} matrices counted on the device"
    );
    // Through prepared solvers (1.5M entries: counted on the device), with the device's model
    // where there is one.
    let a = families::poisson3d_7pt(60, 60, 60).unwrap();
    for kind in [PrecondKind::None, PrecondKind::Jacobi] {
        let mut p = Solver::new(&a)
            .device(Device::Gpu)
            .precond(kind)
            .prepare()
            .unwrap();
        if p.plan().source.starts_with("model") {
            assert!(
                !p.notes().iter().any(|n| n.contains("counted on the host")),
                "{kind}: {:?}",
                p.notes()
            );
        }
        let b = rhs(&a, 4);
        let s = p.solve(&b).unwrap();
        assert!(true_residual(&a, &s.x, &b) < 1e-7, "{kind}");
    }
}

autopcg_gpu::test_main! {
    cpu: [saved_plans_are_checked_before_any_device],
    gpu: [
        uploads_ahead_check_on_the_device_what_the_host_checks,
        the_device_counts_the_factors_as_the_host,
        the_device_counts_and_builds_second_order_factors,
        the_device_reads_ssor_checks_as_the_host,
        the_device_builds_jacobi_and_counts_a_as_the_host,
        a_backend_on_a_uploaded_ahead_solves_as_one_that_uploads_it,
        the_device_counts_the_explicit_product_as_the_host,
        a_saved_plan_prepares_once_and_solves_many,
        prepared_solves_many_right_hand_sides_and_new_values,
        setup_parts_add_up_within_the_backend_time,
        per_solve_overhead_is_reported,
        later_value_updates_are_checked_on_the_way_and_refused_ones_change_nothing,
    ],
}
