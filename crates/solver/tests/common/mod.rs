//! Shared helpers of the solver tests: dense linear algebra, seeded random SPD matrices, model
//! problems and a textbook PCG to compare against.
// Dense linear algebra reads best with explicit indices.
#![allow(clippy::needless_range_loop, dead_code)]

use autopcg_solver::Preconditioner;
use autopcg_sparse::CsrMatrix;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Dense row-major n x n matrix.
#[derive(Clone, Debug)]
pub struct Dense {
    pub n: usize,
    pub a: Vec<f64>,
}

impl Dense {
    pub fn zeros(n: usize) -> Self {
        Dense {
            n,
            a: vec![0.0; n * n],
        }
    }
    pub fn identity(n: usize) -> Self {
        let mut d = Self::zeros(n);
        for i in 0..n {
            d.a[i * n + i] = 1.0;
        }
        d
    }
    pub fn from_csr(m: &CsrMatrix) -> Self {
        assert_eq!(m.nrows(), m.ncols());
        let n = m.nrows();
        let mut d = Self::zeros(n);
        for i in 0..n {
            let (c, v) = m.row(i);
            for (&j, &x) in c.iter().zip(v) {
                d.a[i * n + j as usize] = x;
            }
        }
        d
    }
    pub fn get(&self, i: usize, j: usize) -> f64 {
        self.a[i * self.n + j]
    }
    pub fn set(&mut self, i: usize, j: usize, v: f64) {
        self.a[i * self.n + j] = v;
    }
    pub fn mul(&self, o: &Dense) -> Dense {
        let n = self.n;
        let mut c = Dense::zeros(n);
        for i in 0..n {
            for k in 0..n {
                let aik = self.get(i, k);
                if aik != 0.0 {
                    for j in 0..n {
                        c.a[i * n + j] += aik * o.get(k, j);
                    }
                }
            }
        }
        c
    }
    pub fn add(&self, o: &Dense, s: f64) -> Dense {
        Dense {
            n: self.n,
            a: self.a.iter().zip(&o.a).map(|(x, y)| x + s * y).collect(),
        }
    }
    pub fn scale(&self, s: f64) -> Dense {
        Dense {
            n: self.n,
            a: self.a.iter().map(|x| x * s).collect(),
        }
    }
    pub fn transpose(&self) -> Dense {
        let n = self.n;
        let mut t = Dense::zeros(n);
        for i in 0..n {
            for j in 0..n {
                t.a[j * n + i] = self.get(i, j);
            }
        }
        t
    }
    pub fn mul_vec(&self, x: &[f64]) -> Vec<f64> {
        (0..self.n)
            .map(|i| (0..self.n).map(|j| self.get(i, j) * x[j]).sum())
            .collect()
    }
    pub fn max_abs(&self) -> f64 {
        self.a.iter().fold(0.0, |m, x| m.max(x.abs()))
    }
    /// max |self - o| / max |o|.
    pub fn rel_diff(&self, o: &Dense) -> f64 {
        self.add(o, -1.0).max_abs() / o.max_abs()
    }
    /// Lower Cholesky factor, or None when a pivot is not positive.
    pub fn cholesky(&self) -> Option<Dense> {
        let n = self.n;
        let mut l = Dense::zeros(n);
        for j in 0..n {
            let mut d = self.get(j, j);
            for k in 0..j {
                d -= l.get(j, k) * l.get(j, k);
            }
            if d.is_nan() || d <= 0.0 {
                return None;
            }
            let d = d.sqrt();
            l.set(j, j, d);
            for i in j + 1..n {
                let mut s = self.get(i, j);
                for k in 0..j {
                    s -= l.get(i, k) * l.get(j, k);
                }
                l.set(i, j, s / d);
            }
        }
        Some(l)
    }
    /// Solves self x = b with Cholesky (self must be SPD).
    pub fn solve_spd(&self, b: &[f64]) -> Vec<f64> {
        let l = self.cholesky().expect("matrix is not SPD");
        let n = self.n;
        let mut y = b.to_vec();
        for i in 0..n {
            for k in 0..i {
                y[i] -= l.get(i, k) * y[k];
            }
            y[i] /= l.get(i, i);
        }
        for i in (0..n).rev() {
            for k in i + 1..n {
                y[i] -= l.get(k, i) * y[k];
            }
            y[i] /= l.get(i, i);
        }
        y
    }
}

/// PCG parameters with tolerance `tol` and at most `max_iter` iterations.
pub fn params(tol: f64, max_iter: usize) -> autopcg_solver::PcgParams {
    autopcg_solver::PcgParams::new()
        .with_tol(tol)
        .unwrap()
        .with_max_iter(max_iter)
        .unwrap()
}

/// Adds the symmetric pair (i, j) and (j, i) of value `v` to `t` and |v| to the sums of both
/// rows in `rowsum` (for a diagonal that dominates them).
pub fn push_symmetric(
    t: &mut Vec<(usize, usize, f64)>,
    rowsum: &mut [f64],
    (i, j): (usize, usize),
    v: f64,
) {
    t.push((i, j, v));
    t.push((j, i, v));
    rowsum[i] += v.abs();
    rowsum[j] += v.abs();
}

pub fn csr(n: usize, trip: &[(usize, usize, f64)]) -> CsrMatrix {
    let r: Vec<u32> = trip.iter().map(|t| t.0 as u32).collect();
    let c: Vec<u32> = trip.iter().map(|t| t.1 as u32).collect();
    let v: Vec<f64> = trip.iter().map(|t| t.2).collect();
    CsrMatrix::from_triplets(n, n, &r, &c, &v).unwrap()
}

/// Random sparse SPD matrix: a symmetric pattern with about `per_row` off-diagonal entries per
/// row, values in [-1, 1], and a diagonal `margin` above the off-diagonal row sum when `dominant`
/// (otherwise A = B^T B + 0.05 I with B sparse, which is SPD but not diagonally dominant).
pub fn random_spd(n: usize, per_row: usize, dominant: bool, seed: u64) -> CsrMatrix {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    if dominant {
        let mut t = Vec::new();
        let mut rowsum = vec![0.0; n];
        for i in 0..n {
            for _ in 0..per_row / 2 {
                let j = rng.random_range(0..n);
                if j == i {
                    continue;
                }
                push_symmetric(&mut t, &mut rowsum, (i, j), rng.random_range(-1.0..1.0));
            }
        }
        for (i, s) in rowsum.iter().enumerate() {
            let margin: f64 = rng.random_range(0.01..1.0);
            t.push((i, i, s + margin));
        }
        csr(n, &t)
    } else {
        let mut bt = Vec::new();
        for i in 0..n {
            bt.push((i, i, rng.random_range(0.5..2.0)));
            for _ in 0..per_row.max(1) / 2 {
                let j = rng.random_range(0..n);
                bt.push((i, j, rng.random_range(-1.0..1.0)));
            }
        }
        let b = Dense::from_csr(&csr(n, &bt));
        let mut a = b.transpose().mul(&b).add(&Dense::identity(n), 0.05);
        // Exact symmetry.
        for i in 0..n {
            for j in 0..i {
                let v = a.get(i, j);
                a.set(j, i, v);
            }
        }
        let mut t = Vec::new();
        for i in 0..n {
            for j in 0..n {
                if a.get(i, j) != 0.0 {
                    t.push((i, j, a.get(i, j)));
                }
            }
        }
        csr(n, &t)
    }
}

/// 7-point Laplacian on an nx x ny x nz grid (Dirichlet), diagonal 6.
pub fn poisson3d(nx: usize, ny: usize, nz: usize) -> CsrMatrix {
    autopcg_sparse::families::poisson3d_7pt(nx, ny, nz).unwrap()
}

pub fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

pub fn norm(a: &[f64]) -> f64 {
    dot(a, a).sqrt()
}

/// ||b - A x|| / ||b||.
pub fn rel_residual(a: &CsrMatrix, x: &[f64], b: &[f64]) -> f64 {
    let ax = a.mul_vec(x);
    let r: Vec<f64> = b.iter().zip(&ax).map(|(p, q)| p - q).collect();
    norm(&r) / norm(b)
}

/// Textbook (Hestenes–Stiefel) PCG from x = 0: returns (x, iterations, residual norms).
pub fn textbook_pcg(
    a: &CsrMatrix,
    m: &Preconditioner,
    b: &[f64],
    tol: f64,
    max_iter: usize,
) -> (Vec<f64>, usize, Vec<f64>) {
    let n = b.len();
    let mut work = vec![0.0; m.work_len()];
    let mut x = vec![0.0; n];
    let mut r = b.to_vec();
    let mut z = vec![0.0; n];
    m.apply(&r, &mut z, &mut work);
    let mut p = z.clone();
    let mut rz = dot(&r, &z);
    let bn = norm(b);
    let mut hist = vec![norm(&r)];
    let mut it = 0;
    while it < max_iter && norm(&r) > tol * bn {
        let q = a.mul_vec(&p);
        let alpha = rz / dot(&p, &q);
        for i in 0..n {
            x[i] += alpha * p[i];
            r[i] -= alpha * q[i];
        }
        m.apply(&r, &mut z, &mut work);
        let rz_new = dot(&r, &z);
        let beta = rz_new / rz;
        rz = rz_new;
        for i in 0..n {
            p[i] = z[i] + beta * p[i];
        }
        it += 1;
        hist.push(norm(&r));
    }
    (x, it, hist)
}

/// The preconditioner kinds every test covers.
pub fn all_kinds() -> Vec<autopcg_solver::PrecondKind> {
    [
        "none",
        "jacobi",
        "ssor-ai",
        "ssor-ai-explicit",
        "ssor-ai2",
        "ssor-ai2-explicit",
    ]
    .iter()
    .map(|s| s.parse().unwrap())
    .collect()
}

/// P1 finite elements on the Delaunay mesh of [`autopcg_sparse::families::fem_p1_2d_mesh`]
/// (`n` interior points, seed `seed`) with natural (Neumann) boundary conditions: stiffness
/// plus mass, `int grad u . grad v + u v`, over every mesh point (interior and boundary), so
/// `n` plus the boundary points rows. SPD (the mass term makes it definite), and with
/// b = A * ones = M * ones small next to ||A|| ||x||, the kind of FEM system on which the
/// recurrence residual of CG drifts far below the true one.
pub fn fem_neumann(n: usize, seed: u64) -> CsrMatrix {
    let mesh = autopcg_sparse::families::fem_p1_2d_mesh(n, seed).unwrap();
    let np = mesh.points.len();
    let (mut r, mut c, mut v) = (vec![], vec![], vec![]);
    for t in 0..mesh.triangles.len() {
        let tri = mesh.triangles[t];
        let area = mesh.area(t);
        let p = tri.map(|k| mesh.points[k as usize]);
        let grad = |a: usize| {
            let (q, s) = (p[(a + 1) % 3], p[(a + 2) % 3]);
            (q[1] - s[1], s[0] - q[0])
        };
        let g = [grad(0), grad(1), grad(2)];
        for a in 0..3 {
            for b in 0..3 {
                let stiff = (g[a].0 * g[b].0 + g[a].1 * g[b].1) / (4.0 * area);
                let mass = area / 12.0 * if a == b { 2.0 } else { 1.0 };
                r.push(tri[a]);
                c.push(tri[b]);
                v.push(stiff + mass);
            }
        }
    }
    CsrMatrix::from_triplets(np, np, &r, &c, &v).unwrap()
}

/// ||v||_2 computed so that it cannot under- or overflow for finite entries (scaled by the
/// largest |v_i|).
pub fn safe_norm(v: &[f64]) -> f64 {
    let m = v.iter().fold(0.0f64, |m, x| m.max(x.abs()));
    if m == 0.0 || !m.is_finite() {
        return m;
    }
    m * v.iter().map(|x| (x / m) * (x / m)).sum::<f64>().sqrt()
}

/// ||b - A x|| / ||b|| with scale-safe norms.
pub fn safe_rel_residual(a: &CsrMatrix, x: &[f64], b: &[f64]) -> f64 {
    let ax = a.mul_vec(x);
    let r: Vec<f64> = b.iter().zip(&ax).map(|(p, q)| p - q).collect();
    safe_norm(&r) / safe_norm(b)
}

/// A bound on the rounding error of computing ||b - A x|| / ||b|| in double precision (by any
/// summation order): gamma_{k+1} || |b| + |A| |x| || / ||b||, k the longest row. Two
/// computations of the true residual (the solver's and the test's) differ by at most twice
/// this; it is also, up to a small factor, the best relative residual any x can show.
pub fn residual_rounding_bound(a: &CsrMatrix, x: &[f64], b: &[f64]) -> f64 {
    let kmax = (0..a.nrows()).map(|i| a.row_len(i)).max().unwrap_or(0) as f64;
    let u = f64::EPSILON / 2.0;
    let gamma = (kmax + 1.0) * u / (1.0 - (kmax + 1.0) * u);
    let t: Vec<f64> = (0..a.nrows())
        .map(|i| {
            let (c, v) = a.row(i);
            b[i].abs()
                + c.iter()
                    .zip(v)
                    .map(|(&j, &aij)| (aij * x[j as usize]).abs())
                    .sum::<f64>()
        })
        .collect();
    gamma * safe_norm(&t) / safe_norm(b)
}

/// A seeded right-hand side with entries in [-1, 1).
pub fn random_rhs(n: usize, seed: u64) -> Vec<f64> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..n).map(|_| rng.random_range(-1.0..1.0)).collect()
}

// ------------------------------------------------------------------ reliability of verdicts

use autopcg_solver::{
    auto_omega, PcgError, PcgInfo, PcgParams, PrecondKind, SolveFailure, StopReason,
};
use autopcg_sparse::mm::{read_matrix, ReadOptions};

/// None, Jacobi and first-order SSOR-AI with the `auto` relaxation factor (the command line's
/// default).
pub fn kinds(a: &CsrMatrix) -> Vec<PrecondKind> {
    vec![
        PrecondKind::None,
        PrecondKind::Jacobi,
        PrecondKind::ssor_ai().with_omega(auto_omega(a)),
    ]
}

/// The contract of a converged solve: the reported true residual meets tol, and so does the
/// test's own recomputation, up to the rounding error of computing a residual at all.
pub fn assert_truly_converged(
    what: &str,
    a: &CsrMatrix,
    x: &[f64],
    b: &[f64],
    info: &PcgInfo,
    tol: f64,
) {
    assert!(info.converged, "{what}: {info:?}");
    assert_eq!(info.reason, StopReason::Converged, "{what}");
    assert!(
        info.true_relative_residual <= tol,
        "{what}: converged with a reported true residual {:e} above tol {tol:e}",
        info.true_relative_residual
    );
    let host = safe_rel_residual(a, x, b);
    let noise = 2.0 * residual_rounding_bound(a, x, b) + 1e-12 * host;
    assert!(
        host <= tol + noise,
        "{what}: converged, but ||b - A x|| / ||b|| = {host:e} > tol {tol:e} (rounding {noise:e})"
    );
    assert!(
        (host - info.true_relative_residual).abs() <= noise,
        "{what}: reported true residual {:e}, recomputed {host:e}",
        info.true_relative_residual
    );
}

/// tridiag(-1, 2, -1) of order n.
pub fn tridiag(n: usize) -> CsrMatrix {
    let mut t = Vec::new();
    for i in 0..n {
        t.push((i, i, 2.0));
        if i > 0 {
            t.push((i, i - 1, -1.0));
            t.push((i - 1, i, -1.0));
        }
    }
    csr(n, &t)
}

/// The exact solution of tridiag(-1, 2, -1) x = ones (1-based i): x_i = i (n + 1 - i) / 2.
pub fn tridiag_solution(n: usize) -> Vec<f64> {
    (1..=n).map(|i| (i * (n + 1 - i)) as f64 / 2.0).collect()
}

pub fn scaled(a: &CsrMatrix, s: f64) -> CsrMatrix {
    let mut m = a.clone();
    m.data_mut().iter_mut().for_each(|v| *v *= s);
    m
}

pub fn max_rel_err(x: &[f64], exact: &[f64]) -> f64 {
    x.iter()
        .zip(exact)
        .map(|(p, q)| ((p - q) / q).abs())
        .fold(0.0, f64::max)
}

/// The shipped fixtures (matrices/*.mtx), sorted by name.
pub fn fixtures() -> Vec<(String, CsrMatrix)> {
    let mut files: Vec<_> = std::fs::read_dir("../../matrices")
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "mtx"))
        .collect();
    files.sort();
    assert!(files.len() >= 5, "{files:?}");
    files
        .into_iter()
        .map(|f| {
            let m = read_matrix(&f, &ReadOptions::default())
                .unwrap_or_else(|e| panic!("{}: {e}", f.display()))
                .matrix;
            (f.file_name().unwrap().to_string_lossy().into_owned(), m)
        })
        .collect()
}

/// Solves every system with b = A * ones and a random b, under none, Jacobi and SSOR-AI, at
/// tol 1e-8 and 1e-11, up to `max_iter` iterations, and checks every verdict: each solve
/// reported converged has a true relative residual <= tol; the others stopped at the
/// iteration limit or as stagnated (never with another error: all these matrices are SPD),
/// with the iterate. `solve` runs one solve (on the CPU or a GPU). Prints the tally and the
/// time per system.
pub fn sweep(
    systems: &[(String, CsrMatrix)],
    params: impl Fn(f64) -> PcgParams,
    solve: impl Fn(
        &CsrMatrix,
        &[f64],
        &PrecondKind,
        &PcgParams,
    ) -> Result<(Vec<f64>, PcgInfo), SolveFailure>,
) {
    let mut tally = std::collections::BTreeMap::<&str, usize>::new();
    for (name, a) in systems {
        let t0 = std::time::Instant::now();
        for rhs in ["ones", "random"] {
            let b = if rhs == "ones" {
                a.mul_vec(&vec![1.0; a.nrows()])
            } else {
                random_rhs(a.nrows(), 11)
            };
            for kind in kinds(a) {
                for tol in [1e-8, 1e-11] {
                    let what = format!("{name} b = {rhs} {kind} tol {tol:e}");
                    let key = match solve(a, &b, &kind, &params(tol)) {
                        Ok((x, info)) => {
                            assert_truly_converged(&what, a, &x, &b, &info, tol);
                            if info.replacements > 0 {
                                "converged after replacement"
                            } else {
                                "converged"
                            }
                        }
                        Err(f) => match &f.error {
                            PcgError::NotConverged { info } | PcgError::Stagnated { info, .. } => {
                                assert!(!info.converged, "{what}");
                                assert!(info.true_relative_residual > tol, "{what}: {info:?}");
                                assert!(f.x.is_some());
                                if matches!(f.error, PcgError::Stagnated { .. }) {
                                    "stagnated"
                                } else {
                                    "max_iter"
                                }
                            }
                            e => panic!("{what}: {e}"),
                        },
                    };
                    *tally.entry(key).or_default() += 1;
                    if key != "converged" {
                        println!("{what}: {key}");
                    }
                }
            }
        }
        println!("{name}: {:.1} s", t0.elapsed().as_secs_f64());
    }
    println!("{} systems: {tally:?}", systems.len());
}

/// `c` with A's product and the preconditioner's operator product (K, or the explicit M) run
/// by `method`, unpredicted (the rest of the plan kept; the dots in A's epilogue where the
/// method has the variant, for vectors of length `n` on `props`).
pub fn with_spmv(
    c: autopcg_solver::gpu::GpuPlanChoice,
    method: autopcg_solver::gpu::SpmvMethod,
    n: usize,
    props: &autopcg_catalog::DeviceProps,
) -> autopcg_solver::gpu::GpuPlanChoice {
    use autopcg_solver::gpu::{PrecondChoice, SpmvChoice};
    let spmv = SpmvChoice {
        method,
        predicted_ms: None,
    };
    let mut c = c.with_a(spmv, n, props);
    c.precond = match c.precond {
        PrecondChoice::Factored { kt, .. } => PrecondChoice::Factored { k: spmv, kt },
        PrecondChoice::Explicit { .. } => PrecondChoice::Explicit { m: spmv },
        other => other,
    };
    c
}
