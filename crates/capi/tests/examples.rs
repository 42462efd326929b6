//! The C and Fortran examples (examples/c/poisson.c, examples/fortran/poisson.f90), compiled
//! against the library this package builds and run on the CPU: every solve converges, the
//! iterations are those the Rust facade takes on the same systems, and the shifted matrix
//! (new values through autopcg_update_values) needs fewer.
//!
//! The library is the one `cargo build -p autopcg-capi` last wrote to the target folder: cargo
//! does not build a library without a Rust crate type for a test, so build it first
//! (`make -C examples run` and CI do).
//!
//! A test whose compiler (`cc`, or `$CC`; `gfortran`, or `$FC`) or library is missing is marked
//! ignored and the binary says why; with `AUTOPCG_REQUIRE_COMPILERS=1` (CI) that fails it.
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::process::Command;

// `autopcg` here is the facade: the C library of this package has no Rust interface.
use autopcg::{CsrMatrix, Device, IndexBase, PcgParams, PrecondKind, Solver};
use libtest_mimic::{Arguments, Completion, Failed, Trial};

/// The grid of the runs: n = 1024.
const M: usize = 32;
/// The tolerance the examples ask for.
const RTOL: f64 = 1e-10;
/// The diagonal shift of the examples' second matrix.
const SHIFT: f64 = 0.5;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The compiler named by `var`, else `default`, when it runs.
fn compiler(var: &str, default: &str) -> Result<String, String> {
    let cmd = std::env::var(var).unwrap_or_else(|_| default.to_string());
    match Command::new(&cmd).arg("--version").output() {
        Ok(o) if o.status.success() => Ok(cmd),
        _ => Err(format!("no {cmd} found (set {var} to a compiler)")),
    }
}

/// The folder holding libautopcg.so: `cargo build -p autopcg-capi` writes it to the profile's
/// folder, one up from this test binary's (deps/).
fn library_dir() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let deps = exe.parent().ok_or("test binary without a folder")?;
    for dir in [deps.parent().unwrap_or(deps), deps] {
        if dir.join("libautopcg.so").exists() {
            return Ok(dir.to_path_buf());
        }
    }
    Err(format!(
        "no libautopcg.so beside {} (build it first: cargo build -p autopcg-capi)",
        deps.display()
    ))
}

/// Runs `cmd`, failing with its output when it fails.
fn run(cmd: &mut Command) -> Result<String, Failed> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        return Err(format!(
            "{cmd:?} failed ({}):\n{text}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    Ok(text)
}

/// The solve lines of an example's output: (matrix, rhs, iterations, relative residual).
fn solves(out: &str) -> Result<Vec<(String, usize, usize, f64)>, Failed> {
    let mut v = Vec::new();
    for line in out.lines().filter(|l| l.contains(" rhs ")) {
        let bad = || format!("unexpected line {line:?}");
        let (head, tail) = line.split_once(": ").ok_or_else(bad)?;
        let (matrix, k) = head.split_once(" rhs ").ok_or_else(bad)?;
        let (its, res) = tail
            .split_once(" iterations, relative residual ")
            .ok_or_else(bad)?;
        v.push((
            matrix.to_string(),
            k.parse().map_err(|_| bad())?,
            its.parse().map_err(|_| bad())?,
            res.trim().parse().map_err(|_| bad())?,
        ));
    }
    Ok(v)
}

/// The examples' systems solved by the facade: the iterations of A's three right-hand sides
/// from zero, then of A + SHIFT I's from A's solutions.
fn reference() -> Vec<usize> {
    let n = M * M;
    let (mut ptr, mut idx, mut val) = (vec![0usize], Vec::new(), Vec::new());
    for i in 0..n {
        let (r, c) = (i / M, i % M);
        let row = [
            (r > 0).then(|| (i.wrapping_sub(M), -1.0)),
            (c > 0).then(|| (i.wrapping_sub(1), -1.0)),
            Some((i, 4.0)),
            (c + 1 < M).then(|| (i + 1, -1.0)),
            (r + 1 < M).then(|| (i + M, -1.0)),
        ];
        for (j, a) in row.into_iter().flatten() {
            idx.push(j);
            val.push(a);
        }
        ptr.push(idx.len());
    }
    let a = CsrMatrix::from_csr_arrays_mapped(n, n, &ptr, &idx, &val, IndexBase::Zero, None)
        .unwrap()
        .0;
    let params = PcgParams::new().with_tol(RTOL).unwrap();
    let mut p = Solver::new(&a)
        .device(Device::Cpu)
        .precond(PrecondKind::ssor_ai())
        .ssor_form_auto(true)
        .params(params)
        .prepare()
        .unwrap();
    let mut b = vec![vec![1.0; n], vec![0.0; n], vec![0.0; n]];
    for (i, bi) in b[1].iter_mut().enumerate() {
        *bi = (i % M + 1) as f64 / M as f64;
    }
    b[2][(M / 2) * M + M / 2] = 1.0;
    let mut its = Vec::new();
    let mut xs = Vec::new();
    for bk in &b {
        let s = p.solve(bk).unwrap();
        its.push(s.info.iterations);
        xs.push(s.x);
    }
    let shifted: Vec<f64> = (0..n)
        .flat_map(|i| (ptr[i]..ptr[i + 1]).map(move |k| (i, k)))
        .map(|(i, k)| if idx[k] == i { val[k] + SHIFT } else { val[k] })
        .collect();
    p.update_values(&shifted).unwrap();
    for (bk, x0) in b.iter().zip(&xs) {
        let s = p
            .solve_with(bk, Some(x0), |_| ControlFlow::Continue(()))
            .unwrap();
        its.push(s.info.iterations);
    }
    its
}

/// Checks an example's output against the facade's iterations.
fn check(out: &str) -> Result<(), Failed> {
    let got = solves(out)?;
    let want = reference();
    let labels: Vec<(String, usize)> = got.iter().map(|s| (s.0.clone(), s.1)).collect();
    let expected: Vec<(String, usize)> = ["A", "A+0.5I"]
        .iter()
        .flat_map(|m| (1..=3).map(move |k| (m.to_string(), k)))
        .collect();
    if labels != expected {
        return Err(format!("solves {labels:?}, expected {expected:?}:\n{out}").into());
    }
    for ((m, k, its, res), want_its) in got.iter().zip(&want) {
        // NaN fails too.
        if res.is_nan() || *res > RTOL {
            return Err(format!("{m} rhs {k}: relative residual {res:e} above {RTOL:e}").into());
        }
        // Parallel reductions may round differently from one run to another: one iteration
        // of slack.
        if its.abs_diff(*want_its) > 1 {
            return Err(format!(
                "{m} rhs {k}: {its} iterations, the facade takes {want_its}:\n{out}"
            )
            .into());
        }
    }
    // The shift makes the matrix better conditioned.
    for k in 0..3 {
        if got[k + 3].2 >= got[k].2 {
            return Err(format!("the shift did not reduce the iterations:\n{out}").into());
        }
    }
    Ok(())
}

/// The folder the examples are built in (created).
fn build_dir() -> Result<PathBuf, Failed> {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("examples");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    Ok(dir)
}

/// Compiles the example `source` (of the repository) with `compiler` (given its own flags),
/// linked to the library in `lib`, into `exe` of [`build_dir`], runs it on an M x M grid on the
/// CPU and returns its output.
fn build_and_run(
    compiler: &mut Command,
    source: &str,
    exe: &str,
    lib: &Path,
) -> Result<String, Failed> {
    let exe = build_dir()?.join(exe);
    run(compiler
        .arg(root().join(source))
        .arg("-o")
        .arg(&exe)
        .arg(format!("-L{}", lib.display()))
        .arg("-lautopcg")
        .arg(format!("-Wl,-rpath,{}", lib.display())))?;
    run(Command::new(&exe).args([&M.to_string(), "cpu"]))
}

fn c_example(cc: &str, lib: &Path) -> Result<(), Failed> {
    let mut compile = Command::new(cc);
    compile
        .args([
            "-std=c99",
            "-O2",
            "-Wall",
            "-Wextra",
            "-pedantic",
            "-Werror",
            "-I",
        ])
        .arg(root().join("crates/capi/include"));
    let out = build_and_run(&mut compile, "examples/c/poisson.c", "poisson_c", lib)?;
    check(&out)
}

fn fortran_example(fc: &str, lib: &Path) -> Result<(), Failed> {
    let mut compile = Command::new(fc);
    compile
        .args(["-std=f2018", "-O2", "-Wall", "-Werror"])
        .arg(format!("-J{}", build_dir()?.display()))
        .arg(root().join("crates/capi/fortran/autopcg.f90"));
    let out = build_and_run(
        &mut compile,
        "examples/fortran/poisson.f90",
        "poisson_f90",
        lib,
    )?;
    if !out.contains("(lower triangle)") {
        return Err(format!(
            "the Fortran example gives the lower triangle:
{out}"
        )
        .into());
    }
    check(&out)
}

/// A trial needing `tool` and the library: ignored (or failed under
/// AUTOPCG_REQUIRE_COMPILERS=1) without them.
fn trial(
    name: &'static str,
    tool: Result<String, String>,
    body: fn(&str, &Path) -> Result<(), Failed>,
) -> Trial {
    let require = std::env::var_os("AUTOPCG_REQUIRE_COMPILERS").is_some_and(|v| v == "1");
    match tool.and_then(|cmd| library_dir().map(|lib| (cmd, lib))) {
        Ok((cmd, lib)) => Trial::test(name, move || body(&cmd, &lib)),
        Err(why) if require => Trial::test(name, move || {
            Err(format!("{why}, and AUTOPCG_REQUIRE_COMPILERS=1").into())
        }),
        Err(why) => {
            eprintln!("{name}: ignored: {why}");
            Trial::ignorable_test(name, move || Ok(Completion::ignored_with(why)))
                .with_ignored_flag(true)
        }
    }
}

fn main() {
    let args = Arguments::from_args();
    let trials = vec![
        trial("c_example", compiler("CC", "cc"), c_example),
        trial(
            "fortran_example",
            compiler("FC", "gfortran"),
            fortran_example,
        ),
    ];
    libtest_mimic::run(&args, trials).exit();
}
