//! The C ABI called as C would call it: a Poisson matrix through both index widths and bases,
//! the storage of one triangle, several right-hand sides, new values, the status codes and the
//! per-thread message, and the header regenerated and compared with the committed one.
use std::ffi::CStr;
use std::ptr;

use super::*;

/// 2D 5-point Poisson on an m x m grid: CSR arrays with `base`, rows in order, columns sorted.
fn poisson(m: usize, base: i64) -> (Vec<i64>, Vec<i64>, Vec<f64>) {
    let n = m * m;
    let (mut p, mut c, mut v) = (vec![base], Vec::new(), Vec::new());
    for i in 0..n {
        let (r, q) = (i / m, i % m);
        let mut row = vec![(i, 4.0)];
        if r > 0 {
            row.push((i - m, -1.0));
        }
        if q > 0 {
            row.push((i - 1, -1.0));
        }
        if q + 1 < m {
            row.push((i + 1, -1.0));
        }
        if r + 1 < m {
            row.push((i + m, -1.0));
        }
        row.sort_by_key(|e| e.0);
        for (j, x) in row {
            c.push(j as i64 + base);
            v.push(x);
        }
        p.push(c.len() as i64 + base);
    }
    (p, c, v)
}

fn last_error() -> String {
    // SAFETY: the library's own NUL-terminated buffer.
    unsafe { CStr::from_ptr(autopcg_last_error()) }
        .to_string_lossy()
        .into_owned()
}

fn cpu_options() -> AutopcgOptions {
    let mut o = defaults();
    unsafe { autopcg_options_init(&mut o) };
    o.device = AUTOPCG_DEVICE_CPU;
    o
}

fn residual(p: &[i64], c: &[i64], v: &[f64], base: i64, x: &[f64], b: &[f64]) -> f64 {
    let n = p.len() - 1;
    let mut r2 = 0.0;
    let mut b2 = 0.0;
    for i in 0..n {
        let mut s = 0.0;
        for k in (p[i] - base) as usize..(p[i + 1] - base) as usize {
            s += v[k] * x[(c[k] - base) as usize];
        }
        r2 += (b[i] - s).powi(2);
        b2 += b[i] * b[i];
    }
    (r2 / b2).sqrt()
}

#[test]
fn solve_many_right_hand_sides_then_new_values_with_both_index_widths() {
    for base in [0i64, 1] {
        let (p, c, v) = poisson(12, base);
        let n = p.len() - 1;
        let o = cpu_options();
        let mut h: *mut AutopcgSolver = ptr::null_mut();
        let st = unsafe {
            autopcg_create_i64(
                n as i64,
                p.as_ptr(),
                c.as_ptr(),
                v.as_ptr(),
                base as c_int,
                &o,
                &mut h,
            )
        };
        assert_eq!(st, AUTOPCG_OK, "{}", last_error());
        assert_eq!(last_error(), "");
        let (mut nn, mut nz) = (0i64, 0i64);
        unsafe {
            assert_eq!(autopcg_get_n(h, &mut nn), AUTOPCG_OK);
            assert_eq!(autopcg_get_nnz(h, &mut nz), AUTOPCG_OK);
        }
        assert_eq!((nn as usize, nz as usize), (n, v.len()));
        let dev = unsafe { CStr::from_ptr(autopcg_device(h)) }.to_string_lossy();
        assert!(dev.starts_with("cpu"), "{dev}");
        for k in 0..3 {
            let b: Vec<f64> = (0..n).map(|i| 1.0 + ((i * (k + 1)) % 7) as f64).collect();
            let mut x = vec![0.0; n];
            let mut info = AutopcgInfo::NONE;
            let st =
                unsafe { autopcg_solve(h, b.as_ptr(), x.as_mut_ptr(), ptr::null(), &mut info) };
            assert_eq!(st, AUTOPCG_OK, "{}", last_error());
            assert_eq!((info.converged, info.reason), (1, AUTOPCG_REASON_CONVERGED));
            assert!(info.iterations > 0 && info.relative_residual <= 1e-8);
            assert!(residual(&p, &c, &v, base, &x, &b) <= 1e-8);
        }
        // New values: A + I.
        let v2: Vec<f64> = v.iter().map(|&a| if a == 4.0 { 5.0 } else { a }).collect();
        assert_eq!(
            unsafe { autopcg_update_values(h, v2.as_ptr()) },
            AUTOPCG_OK,
            "{}",
            last_error()
        );
        let b = vec![1.0; n];
        let mut x = vec![0.0; n];
        let st =
            unsafe { autopcg_solve(h, b.as_ptr(), x.as_mut_ptr(), ptr::null(), ptr::null_mut()) };
        assert_eq!(st, AUTOPCG_OK);
        assert!(residual(&p, &c, &v2, base, &x, &b) <= 1e-8);
        // x0 = x (aliasing) converges at once.
        let mut info = AutopcgInfo::NONE;
        let st = unsafe { autopcg_solve(h, b.as_ptr(), x.as_mut_ptr(), x.as_ptr(), &mut info) };
        assert_eq!(st, AUTOPCG_OK);
        assert!(info.iterations <= 1, "{}", info.iterations);
        let mut got = AutopcgInfo::NONE;
        assert_eq!(unsafe { autopcg_get_info(h, &mut got) }, AUTOPCG_OK);
        assert_eq!(got, info);
        unsafe { autopcg_destroy(h) };
    }
}

#[test]
fn int32_and_a_lower_triangle_in_fortran_order() {
    let (p, c, v) = poisson(10, 1);
    let n = p.len() - 1;
    // The lower triangle, 1-based, 32-bit, with the columns of each row reversed.
    let (mut lp, mut lc, mut lv) = (vec![1i32], Vec::new(), Vec::new());
    for i in 0..n {
        let mut row: Vec<(i32, f64)> = ((p[i] - 1) as usize..(p[i + 1] - 1) as usize)
            .filter(|&k| c[k] - 1 <= i as i64)
            .map(|k| (c[k] as i32, v[k]))
            .collect();
        row.reverse();
        for (j, x) in row {
            lc.push(j);
            lv.push(x);
        }
        lp.push(lc.len() as i32 + 1);
    }
    // Creates a solver of the triangle, 1-based, with options `o`.
    let create = |o: &AutopcgOptions, h: &mut *mut AutopcgSolver| {
        // SAFETY: the arrays are the triangle's CSR arrays of order n; `o` and `h` are valid.
        unsafe { autopcg_create_i32(n as i32, lp.as_ptr(), lc.as_ptr(), lv.as_ptr(), 1, o, h) }
    };
    let mut o = cpu_options();
    // Given as a full matrix, the triangle is refused with the option to use.
    let mut h = ptr::null_mut();
    let st = create(&o, &mut h);
    assert_eq!(st, AUTOPCG_ERR_BAD_INPUT);
    assert!(h.is_null());
    assert!(
        last_error().contains("AUTOPCG_STORAGE_LOWER"),
        "{}",
        last_error()
    );
    o.storage = AUTOPCG_STORAGE_LOWER;
    let st = create(&o, &mut h);
    assert_eq!(st, AUTOPCG_OK, "{}", last_error());
    let b = vec![1.0; n];
    let mut x = vec![0.0; n];
    assert_eq!(
        unsafe { autopcg_solve(h, b.as_ptr(), x.as_mut_ptr(), ptr::null(), ptr::null_mut()) },
        AUTOPCG_OK
    );
    assert!(residual(&p, &c, &v, 1, &x, &b) <= 1e-8);
    // New values in the triangle's order reach both triangles.
    let lv2: Vec<f64> = lv.iter().map(|a| 2.0 * a).collect();
    assert_eq!(
        unsafe { autopcg_update_values(h, lv2.as_ptr()) },
        AUTOPCG_OK
    );
    assert_eq!(
        unsafe { autopcg_solve(h, b.as_ptr(), x.as_mut_ptr(), ptr::null(), ptr::null_mut()) },
        AUTOPCG_OK
    );
    let v2: Vec<f64> = v.iter().map(|a| 2.0 * a).collect();
    assert!(residual(&p, &c, &v2, 1, &x, &b) <= 1e-8);
    unsafe { autopcg_destroy(h) };
}

#[test]
fn status_codes_and_messages() {
    let (p, c, v) = poisson(6, 0);
    let n = (p.len() - 1) as i64;
    let o = cpu_options();
    let mut h = ptr::null_mut();
    // NULL pointers and bad options.
    assert_eq!(
        unsafe { autopcg_create_i64(n, ptr::null(), c.as_ptr(), v.as_ptr(), 0, &o, &mut h) },
        AUTOPCG_ERR_BAD_INPUT
    );
    assert!(last_error().contains("indptr is NULL"));
    assert_eq!(
        unsafe {
            autopcg_create_i64(
                n,
                p.as_ptr(),
                c.as_ptr(),
                v.as_ptr(),
                0,
                &o,
                ptr::null_mut(),
            )
        },
        AUTOPCG_ERR_BAD_INPUT
    );
    assert_eq!(
        unsafe { autopcg_create_i64(n, p.as_ptr(), c.as_ptr(), v.as_ptr(), 2, &o, &mut h) },
        AUTOPCG_ERR_BAD_INPUT
    );
    assert!(last_error().contains("base = 2"), "{}", last_error());
    let mut bad = o;
    bad.precond = 9;
    assert_eq!(
        unsafe { autopcg_create_i64(n, p.as_ptr(), c.as_ptr(), v.as_ptr(), 0, &bad, &mut h) },
        AUTOPCG_ERR_BAD_INPUT
    );
    assert!(
        last_error().contains("options.precond = 9"),
        "{}",
        last_error()
    );
    let mut bad = o;
    bad.rtol = -1.0;
    assert_eq!(
        unsafe { autopcg_create_i64(n, p.as_ptr(), c.as_ptr(), v.as_ptr(), 0, &bad, &mut h) },
        AUTOPCG_ERR_BAD_INPUT
    );
    // An index out of range names its position and row.
    let mut c2 = c.clone();
    c2[5] = 99;
    assert_eq!(
        unsafe { autopcg_create_i64(n, p.as_ptr(), c2.as_ptr(), v.as_ptr(), 0, &o, &mut h) },
        AUTOPCG_ERR_BAD_INPUT
    );
    assert!(last_error().contains("indices[5] = 99"), "{}", last_error());
    // A negative diagonal: not SPD.
    let mut v2 = v.clone();
    v2[0] = -4.0;
    assert_eq!(
        unsafe { autopcg_create_i64(n, p.as_ptr(), c.as_ptr(), v2.as_ptr(), 0, &o, &mut h) },
        AUTOPCG_ERR_NOT_SPD,
        "{}",
        last_error()
    );
    // Not converged: the last iterate is returned with its info.
    let mut few = o;
    few.max_iter = 2;
    few.precond = AUTOPCG_PRECOND_NONE;
    assert_eq!(
        unsafe { autopcg_create_i64(n, p.as_ptr(), c.as_ptr(), v.as_ptr(), 0, &few, &mut h) },
        AUTOPCG_OK
    );
    let b = vec![1.0; n as usize];
    let mut x = vec![0.0; n as usize];
    let mut info = AutopcgInfo::NONE;
    assert_eq!(
        unsafe { autopcg_solve(h, b.as_ptr(), x.as_mut_ptr(), ptr::null(), &mut info) },
        AUTOPCG_ERR_NOT_CONVERGED
    );
    assert_eq!(
        (info.iterations, info.converged, info.reason),
        (2, 0, AUTOPCG_REASON_MAX_ITER)
    );
    assert!(x.iter().any(|&xi| xi != 0.0));
    assert!(
        last_error().contains("did not converge"),
        "{}",
        last_error()
    );
    assert_eq!(unsafe { autopcg_set_max_iter(h, 1000) }, AUTOPCG_OK);
    assert_eq!(last_error(), "");
    assert_eq!(
        unsafe { autopcg_solve(h, b.as_ptr(), x.as_mut_ptr(), ptr::null(), ptr::null_mut()) },
        AUTOPCG_OK
    );
    assert_eq!(
        unsafe { autopcg_set_tolerances(h, 0.0, 0.0) },
        AUTOPCG_ERR_BAD_INPUT
    );
    assert_eq!(
        unsafe { autopcg_set_max_iter(h, -1) },
        AUTOPCG_ERR_BAD_INPUT
    );
    let mut nan = v.clone();
    nan[3] = f64::NAN;
    assert_eq!(
        unsafe { autopcg_update_values(h, nan.as_ptr()) },
        AUTOPCG_ERR_BAD_INPUT
    );
    assert!(last_error().contains("values[3] = NaN"), "{}", last_error());
    assert_eq!(
        unsafe { autopcg_solve(h, ptr::null(), x.as_mut_ptr(), ptr::null(), ptr::null_mut()) },
        AUTOPCG_ERR_BAD_INPUT
    );
    unsafe { autopcg_destroy(h) };
    // NULL handles.
    assert_eq!(
        unsafe {
            autopcg_solve(
                ptr::null_mut(),
                b.as_ptr(),
                x.as_mut_ptr(),
                ptr::null(),
                ptr::null_mut(),
            )
        },
        AUTOPCG_ERR_BAD_INPUT
    );
    assert!(unsafe { autopcg_device(ptr::null()) }.is_null());
    unsafe { autopcg_destroy(ptr::null_mut()) };
    let name = unsafe { CStr::from_ptr(autopcg_status_string(AUTOPCG_ERR_NOT_SPD)) };
    assert!(name.to_str().unwrap().contains("positive definite"));
    // The message is per thread.
    assert_eq!(
        unsafe { autopcg_options_init(ptr::null_mut()) },
        AUTOPCG_ERR_BAD_INPUT
    );
    let here = last_error();
    std::thread::spawn(|| assert_eq!(last_error(), ""))
        .join()
        .unwrap();
    assert_eq!(last_error(), here);
}

#[test]
fn a_panic_becomes_an_internal_error_and_poisons_the_handle() {
    let r = status::guard(|| panic!("boom"));
    assert_eq!(r, AUTOPCG_ERR_INTERNAL);
    assert!(last_error().contains("boom"));
    // A panic in a call on a handle: that call and every later one but destroy refuse it.
    let (p, c, v) = poisson(4, 0);
    let o = cpu_options();
    let mut h = ptr::null_mut();
    let n = (p.len() - 1) as i64;
    assert_eq!(
        unsafe { autopcg_create_i64(n, p.as_ptr(), c.as_ptr(), v.as_ptr(), 0, &o, &mut h) },
        AUTOPCG_OK
    );
    assert_eq!(
        with_handle(h, "test", |_| panic!("inside")),
        AUTOPCG_ERR_INTERNAL
    );
    assert!(last_error().contains("inside"), "{}", last_error());
    let mut nn = 0i64;
    assert_eq!(unsafe { autopcg_get_n(h, &mut nn) }, AUTOPCG_ERR_INTERNAL);
    assert!(last_error().contains("destroy it"), "{}", last_error());
    unsafe { autopcg_destroy(h) };
}

#[test]
fn different_handles_solve_on_different_threads_at_once() {
    let threads: Vec<_> = (0..3)
        .map(|t| {
            std::thread::spawn(move || {
                let (p, c, v) = poisson(8 + t, 0);
                let n = p.len() - 1;
                let o = cpu_options();
                let mut h = ptr::null_mut();
                assert_eq!(
                    unsafe {
                        autopcg_create_i64(
                            n as i64,
                            p.as_ptr(),
                            c.as_ptr(),
                            v.as_ptr(),
                            0,
                            &o,
                            &mut h,
                        )
                    },
                    AUTOPCG_OK
                );
                let b = vec![1.0; n];
                let mut x = vec![0.0; n];
                assert_eq!(
                    unsafe {
                        autopcg_solve(h, b.as_ptr(), x.as_mut_ptr(), ptr::null(), ptr::null_mut())
                    },
                    AUTOPCG_OK
                );
                unsafe { autopcg_destroy(h) };
                residual(&p, &c, &v, 0, &x, &b)
            })
        })
        .collect();
    for t in threads {
        assert!(t.join().unwrap() <= 1e-8);
    }
}

/// The committed header is what cbindgen generates from this crate now. To update it after
/// changing the interface: `AUTOPCG_BLESS_HEADER=1 cargo test -p autopcg-capi header`.
#[test]
fn header_is_current() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).unwrap();
    let mut out = Vec::new();
    cbindgen::Builder::new()
        .with_config(config)
        .with_src(dir.join("src/lib.rs"))
        .with_src(dir.join("src/status.rs"))
        .generate()
        .expect("cbindgen parses the crate")
        .write(&mut out);
    let generated = String::from_utf8(out).unwrap();
    let path = dir.join("include/autopcg.h");
    if std::env::var_os("AUTOPCG_BLESS_HEADER").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "include/autopcg.h is not what cbindgen generates from the sources; regenerate it with \
         AUTOPCG_BLESS_HEADER=1 cargo test -p autopcg-capi header"
    );
}

#[test]
fn solve_many_takes_columns_reports_each_and_the_first_failure() {
    let (p, c, v) = poisson(9, 0);
    let n = p.len() - 1;
    let o = cpu_options();
    let mut h = ptr::null_mut();
    let st =
        unsafe { autopcg_create_i64(n as i64, p.as_ptr(), c.as_ptr(), v.as_ptr(), 0, &o, &mut h) };
    assert_eq!(st, AUTOPCG_OK, "{}", last_error());
    // Three columns b(:, k) = k + 1 everywhere.
    let b: Vec<f64> = (0..3).flat_map(|k| vec![(k + 1) as f64; n]).collect();
    let mut x = vec![0.0; 3 * n];
    let mut infos = [AutopcgInfo::NONE; 3];
    let st = unsafe {
        autopcg_solve_many(
            h,
            3,
            b.as_ptr(),
            x.as_mut_ptr(),
            ptr::null(),
            infos.as_mut_ptr(),
        )
    };
    assert_eq!(st, AUTOPCG_OK, "{}", last_error());
    for k in 0..3 {
        let cols = k * n..(k + 1) * n;
        assert!(residual(&p, &c, &v, 0, &x[cols.clone()], &b[cols]) <= 1e-8);
        assert_eq!(infos[k].reason, AUTOPCG_REASON_CONVERGED);
        // A scaled right-hand side takes the same iterations.
        assert_eq!(infos[k].iterations, infos[0].iterations);
    }
    // The solution is linear in b.
    for i in 0..n {
        assert!((x[2 * n + i] - 3.0 * x[i]).abs() <= 1e-6 * x[i].abs().max(1.0));
    }
    let (mut it, mut res) = (0i64, 0.0f64);
    unsafe {
        assert_eq!(autopcg_get_iterations(h, &mut it), AUTOPCG_OK);
        assert_eq!(autopcg_get_residual(h, &mut res), AUTOPCG_OK);
    }
    assert_eq!((it, res), (infos[2].iterations, infos[2].relative_residual));
    // A limit that the second column cannot meet from its initial guess while the others can:
    // the first and third start at their solutions, the second from zero.
    assert_eq!(unsafe { autopcg_set_max_iter(h, 2) }, AUTOPCG_OK);
    let mut x0 = x.clone();
    x0[n..2 * n].fill(0.0);
    let st = unsafe {
        autopcg_solve_many(
            h,
            3,
            b.as_ptr(),
            x.as_mut_ptr(),
            x0.as_ptr(),
            infos.as_mut_ptr(),
        )
    };
    assert_eq!(st, AUTOPCG_ERR_NOT_CONVERGED);
    assert!(
        last_error().starts_with("right-hand side 2 of 3: did not converge"),
        "{}",
        last_error()
    );
    let reasons: Vec<c_int> = infos.iter().map(|i| i.reason).collect();
    assert_eq!(
        reasons,
        [
            AUTOPCG_REASON_CONVERGED,
            AUTOPCG_REASON_MAX_ITER,
            AUTOPCG_REASON_CONVERGED
        ]
    );
    // Zero right-hand sides is nothing to do; a negative count is refused.
    assert_eq!(
        unsafe {
            autopcg_solve_many(
                h,
                0,
                b.as_ptr(),
                x.as_mut_ptr(),
                ptr::null(),
                ptr::null_mut(),
            )
        },
        AUTOPCG_OK
    );
    assert_eq!(
        unsafe {
            autopcg_solve_many(
                h,
                -1,
                b.as_ptr(),
                x.as_mut_ptr(),
                ptr::null(),
                ptr::null_mut(),
            )
        },
        AUTOPCG_ERR_BAD_INPUT
    );
    assert!(last_error().contains("nrhs = -1"), "{}", last_error());
    unsafe { autopcg_destroy(h) };
}

#[test]
fn setup_times_and_getters() {
    let (p, c, v) = poisson(7, 1);
    let (p32, c32): (Vec<i32>, Vec<i32>) = (
        p.iter().map(|&k| k as i32).collect(),
        c.iter().map(|&k| k as i32).collect(),
    );
    let n = p.len() - 1;
    let o = cpu_options();
    let mut h = ptr::null_mut();
    let st = unsafe {
        autopcg_create_i32(
            n as i32,
            p32.as_ptr(),
            c32.as_ptr(),
            v.as_ptr(),
            1,
            &o,
            &mut h,
        )
    };
    assert_eq!(st, AUTOPCG_OK, "{}", last_error());
    let mut t = AutopcgSetup {
        check_ms: -1.0,
        device_ms: -1.0,
        precond_ms: -1.0,
        select_ms: -1.0,
        backend_ms: -1.0,
        total_ms: -1.0,
        update_ms: -1.0,
        upload_ms: -1.0,
        convert_ms: -1.0,
        load_ms: -1.0,
    };
    assert_eq!(unsafe { autopcg_get_setup(h, &mut t) }, AUTOPCG_OK);
    let parts = t.check_ms + t.device_ms + t.precond_ms + t.select_ms + t.backend_ms;
    assert!(
        t.check_ms >= 0.0 && t.precond_ms >= 0.0 && t.update_ms == 0.0,
        "{t:?}"
    );
    // On the CPU the backend has no uploads, conversions or kernels.
    assert_eq!(
        (t.upload_ms, t.convert_ms, t.load_ms),
        (0.0, 0.0, 0.0),
        "{t:?}"
    );
    assert!((t.total_ms - parts).abs() <= 1e-9, "{t:?}");
    // Before a solve: no iterations, a NaN residual, reason none.
    let (mut it, mut res) = (-1i64, 0.0f64);
    unsafe {
        assert_eq!(autopcg_get_iterations(h, &mut it), AUTOPCG_OK);
        assert_eq!(autopcg_get_residual(h, &mut res), AUTOPCG_OK);
    }
    assert!(it == 0 && res.is_nan());
    assert_eq!(unsafe { autopcg_update_values(h, v.as_ptr()) }, AUTOPCG_OK);
    assert_eq!(unsafe { autopcg_get_setup(h, &mut t) }, AUTOPCG_OK);
    assert!(t.update_ms > 0.0, "{t:?}");
    // The preconditioner in words: SSOR-AI with omega 1 on a stencil matrix.
    let pc = unsafe { CStr::from_ptr(autopcg_precond(h)) }
        .to_string_lossy()
        .into_owned();
    assert!(
        pc.starts_with("ssor-ai") && pc.contains("omega 1.0000"),
        "{pc}"
    );
    // NULL outputs are refused by name.
    assert_eq!(
        unsafe { autopcg_get_setup(h, ptr::null_mut()) },
        AUTOPCG_ERR_BAD_INPUT
    );
    assert!(last_error().contains("setup is NULL"), "{}", last_error());
    // A negative size is refused, and *out is NULL.
    let mut h2 = ptr::dangling_mut::<AutopcgSolver>();
    let st =
        unsafe { autopcg_create_i32(-3, p32.as_ptr(), c32.as_ptr(), v.as_ptr(), 1, &o, &mut h2) };
    assert_eq!(st, AUTOPCG_ERR_BAD_INPUT);
    assert!(h2.is_null());
    assert!(last_error().contains("n = -3"), "{}", last_error());
    let version = unsafe { CStr::from_ptr(autopcg_version()) };
    assert_eq!(version.to_str().unwrap(), env!("CARGO_PKG_VERSION"));
    unsafe { autopcg_destroy(h) };
}

/// The names of the functions and the `#define` constants of the committed header.
fn header_items() -> (BTreeSet<String>, BTreeMap<String, i64>) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let h = std::fs::read_to_string(dir.join("include/autopcg.h")).unwrap();
    let mut fns = BTreeSet::new();
    let mut consts = BTreeMap::new();
    for line in h.lines() {
        if let Some(rest) = line.strip_prefix("#define AUTOPCG_") {
            let mut it = rest.split_whitespace();
            if let (Some(name), Some(v)) = (it.next(), it.next()) {
                consts.insert(format!("AUTOPCG_{name}"), v.parse().unwrap());
            }
        } else if !line.starts_with(' ') && !line.starts_with('/') {
            if let Some(at) = line.find("autopcg_") {
                if let Some(paren) = line[at..].find('(') {
                    fns.insert(line[at..at + paren].to_string());
                }
            }
        }
    }
    (fns, consts)
}

use std::collections::{BTreeMap, BTreeSet};

/// The Fortran module binds every function of the header under its C name and defines every
/// constant with the header's value.
#[test]
fn fortran_module_matches_the_header() {
    let (fns, consts) = header_items();
    assert!(fns.contains("autopcg_create_i32") && fns.contains("autopcg_solve_many"));
    assert_eq!(fns.len(), 23, "{fns:?}");
    assert_eq!(consts.len(), 23, "{consts:?}");
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let f = std::fs::read_to_string(dir.join("fortran/autopcg.f90")).unwrap();
    let mut bound = BTreeSet::new();
    let mut params = BTreeMap::new();
    for line in f.lines().map(str::trim) {
        if line.starts_with('!') {
            continue;
        }
        if let Some(at) = line.find("bind(C, name=\"") {
            let rest = &line[at + 14..];
            let name = &rest[..rest.find('"').unwrap()];
            if name != "strlen" {
                bound.insert(name.to_string());
            }
        }
        if let Some(at) = line.find(":: AUTOPCG_") {
            let (name, value) = line[at + 3..].split_once('=').unwrap();
            params.insert(
                name.trim().to_string(),
                value.trim().parse::<i64>().unwrap(),
            );
        }
    }
    assert_eq!(bound, fns);
    assert_eq!(params, consts);
}

/// Creates a handle for the 2D Poisson matrix of `poisson(m, 0)` with `o`.
fn create_poisson(m: usize, o: &AutopcgOptions) -> (c_int, *mut AutopcgSolver) {
    let (p, c, v) = poisson(m, 0);
    let mut h: *mut AutopcgSolver = ptr::null_mut();
    let n = (p.len() - 1) as i64;
    let st = unsafe { autopcg_create_i64(n, p.as_ptr(), c.as_ptr(), v.as_ptr(), 0, o, &mut h) };
    (st, h)
}

#[test]
fn row_blocks_through_the_options_solve_and_take_new_values() {
    let mut o = cpu_options();
    o.precond = AUTOPCG_PRECOND_JACOBI;
    o.blocks = 3;
    let (st, h) = create_poisson(12, &o);
    assert_eq!(st, AUTOPCG_OK, "{}", last_error());
    let dev = unsafe { CStr::from_ptr(autopcg_device(h)) }.to_string_lossy();
    assert!(dev.contains("3 row blocks"), "{dev}");
    let (p, c, v) = poisson(12, 0);
    let n = p.len() - 1;
    let b: Vec<f64> = (0..n).map(|i| 1.0 + (i % 5) as f64).collect();
    let mut x = vec![0.0; n];
    let mut info = AutopcgInfo::NONE;
    let st = unsafe { autopcg_solve(h, b.as_ptr(), x.as_mut_ptr(), ptr::null(), &mut info) };
    assert_eq!(st, AUTOPCG_OK, "{}", last_error());
    assert!(residual(&p, &c, &v, 0, &x, &b) <= 1e-8);
    // The same iterations as the unsplit Jacobi solve (the same operator, split).
    let mut whole = cpu_options();
    whole.precond = AUTOPCG_PRECOND_JACOBI;
    let (st, hw) = create_poisson(12, &whole);
    assert_eq!(st, AUTOPCG_OK);
    let mut iw = AutopcgInfo::NONE;
    let mut xw = vec![0.0; n];
    unsafe { autopcg_solve(hw, b.as_ptr(), xw.as_mut_ptr(), ptr::null(), &mut iw) };
    assert!(
        info.iterations.abs_diff(iw.iterations) <= 1,
        "{info:?} {iw:?}"
    );
    // New values: A + I.
    let v2: Vec<f64> = v.iter().map(|&a| if a == 4.0 { 5.0 } else { a }).collect();
    assert_eq!(unsafe { autopcg_update_values(h, v2.as_ptr()) }, AUTOPCG_OK);
    let st = unsafe { autopcg_solve(h, b.as_ptr(), x.as_mut_ptr(), ptr::null(), ptr::null_mut()) };
    assert_eq!(st, AUTOPCG_OK);
    assert!(residual(&p, &c, &v2, 0, &x, &b) <= 1e-8);
    unsafe {
        autopcg_destroy(h);
        autopcg_destroy(hw);
    }
}

#[test]
fn bad_block_and_gpu_options_are_refused_with_a_message() {
    for (blocks, gpus, device, needle) in [
        (-2, 0, AUTOPCG_DEVICE_CPU, "options.blocks = -2"),
        (0, -3, AUTOPCG_DEVICE_AUTO, "options.gpus = -3"),
        (2, 2, AUTOPCG_DEVICE_AUTO, "cannot both be given"),
        (0, 2, AUTOPCG_DEVICE_CPU, "cannot be combined with the CPU"),
        (
            1000,
            0,
            AUTOPCG_DEVICE_CPU,
            "cannot split 144 rows into 1000",
        ),
    ] {
        let mut o = cpu_options();
        o.blocks = blocks;
        o.gpus = gpus;
        o.device = device;
        let (st, h) = create_poisson(12, &o);
        assert_ne!(st, AUTOPCG_OK, "{blocks} {gpus}");
        assert!(h.is_null());
        let e = last_error();
        assert!(e.contains(needle), "{blocks} {gpus}: {e}");
    }
}

/// Opening a GPU ahead takes any ordinal from 0 (where there is no such GPU, nothing happens
/// until a handle asks for one) and refuses a negative one; a handle set up after it, on the
/// device `auto` picks, solves as usual.
#[test]
fn opening_a_gpu_ahead_then_setting_up() {
    assert_eq!(autopcg_open_gpu_ahead(-1), AUTOPCG_ERR_BAD_INPUT);
    assert!(last_error().contains("ordinal = -1"), "{}", last_error());
    assert_eq!(autopcg_open_gpu_ahead(0), AUTOPCG_OK);
    assert_eq!(last_error(), "");
    assert_eq!(autopcg_open_gpu_ahead(4096), AUTOPCG_OK);
    // With the size of the matrix to come: each count must be 0 or more, and is named.
    for (args, needle) in [
        ((-1, 10, 10), "ordinal = -1"),
        ((0, -5, 10), "rows = -5"),
        ((0, 10, i64::MIN), "entries = -9223372036854775808"),
    ] {
        assert_eq!(
            autopcg_open_gpu_ahead_for(args.0, args.1, args.2),
            AUTOPCG_ERR_BAD_INPUT
        );
        assert!(last_error().contains(needle), "{}", last_error());
    }
    assert_eq!(autopcg_open_gpu_ahead_for(4097, 100, 460), AUTOPCG_OK);
    assert_eq!(last_error(), "");
    // Waits for the open of a GPU that is not there (nothing is left under way), and again.
    assert_eq!(autopcg_finish_opens_ahead(), AUTOPCG_OK);
    assert_eq!(autopcg_finish_opens_ahead(), AUTOPCG_OK);
    let mut o = defaults();
    unsafe { autopcg_options_init(&mut o) };
    let (st, h) = create_poisson(10, &o);
    assert_eq!(st, AUTOPCG_OK, "{}", last_error());
    let (p, c, v) = poisson(10, 0);
    let b = vec![1.0; p.len() - 1];
    let mut x = vec![0.0; b.len()];
    let st = unsafe { autopcg_solve(h, b.as_ptr(), x.as_mut_ptr(), ptr::null(), ptr::null_mut()) };
    assert_eq!(st, AUTOPCG_OK, "{}", last_error());
    assert!(residual(&p, &c, &v, 0, &x, &b) <= 1e-8);
    unsafe { autopcg_destroy(h) };
}
