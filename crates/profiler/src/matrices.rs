//! The benchmark matrices of the SpMV stage: a fit set the SpMV model is fitted on, an
//! evaluation set it is only judged on, and a handful of small ones for `--quick`.
//!
//! The fit set spans what PCG meets in practice: from 1e4 to 1e7 rows; 3 to about 200 stored
//! entries per row; row lengths from constant (stencils, bands) to power-law tails; from 3 to a
//! few hundred diagonals (bands of half width 1..100) and unstructured patterns (finite-element
//! meshes, random power-law graphs). The evaluation set takes other sizes and seeds of the same
//! families plus three real matrices of the SuiteSparse collection shipped in `matrices/`,
//! Kronecker-multiplied by 2-D Poisson grids to reach 1e5..1e6 rows; file paths are relative to
//! the base folder of the sweep (the repository root).
//!
//! Every matrix is named by a [`Recipe`], so a profile records how to rebuild it rather than the
//! matrix. The approximate row and nonzero counts are for the budget and the time estimate only.
use autopcg_model::profile::MatrixSet;
use autopcg_sparse::families::{Family, FamilyParams, Recipe};

/// A benchmark matrix of the sweep.
#[derive(Debug, Clone, PartialEq)]
pub struct MatrixSpec {
    /// Identifier in the profile (unique across every set).
    pub id: String,
    /// Fit or evaluation set.
    pub set: MatrixSet,
    /// How to build it.
    pub recipe: Recipe,
    /// Rows, approximately (exact for the stencil and band families).
    pub approx_rows: u64,
    /// Stored entries, approximately.
    pub approx_nnz: u64,
}

/// Rows and stored entries (both triangles) of the Matrix Market fixtures the evaluation set
/// uses (see `matrices/README.md`).
const FIXTURES: [(&str, u64, u64); 3] = [
    ("matrices/bcsstk13.mtx", 2003, 83_883),
    ("matrices/s3rmt3m3.mtx", 5357, 207_695),
    ("matrices/1138_bus.mtx", 1138, 4054),
];

/// Approximate (rows, nonzeros) of a family matrix.
fn family_size(f: Family, p: &FamilyParams) -> (u64, u64) {
    let n = p.n as u64;
    match f {
        Family::Poisson2d5 => (n * n, 5 * n * n - 4 * n),
        Family::Poisson2d9 | Family::Anisotropic2d => {
            let s = (3 * n).saturating_sub(2);
            (n * n, s * s)
        }
        Family::Poisson3d7 => (n * n * n, 7 * n * n * n - 6 * n * n),
        Family::Poisson3d27 => {
            let s = (3 * n).saturating_sub(2);
            (n * n * n, s * s * s)
        }
        Family::Banded => {
            let b = (p.bandwidth.unwrap_or(8) as u64).min(n.saturating_sub(1));
            (n, n + 2 * (b * n - b * (b + 1) / 2))
        }
        Family::PowerLaw => {
            let m = p.mean_row_len.unwrap_or(10.0);
            (n, (n as f64 * m).round() as u64)
        }
        // A Delaunay mesh has about 6 neighbours per interior point.
        Family::FemP1 => (n, 7 * n),
    }
}

fn fam_id(f: Family, p: &FamilyParams) -> String {
    let mut id = format!("{}-n{}", f.name(), p.n);
    if let Some(b) = p.bandwidth {
        id.push_str(&format!("-bw{b}"));
    }
    if let Some(m) = p.mean_row_len {
        id.push_str(&format!("-m{m}"));
    }
    if let Some(a) = p.alpha {
        id.push_str(&format!("-a{a}"));
    }
    if let Some(e) = p.eps {
        id.push_str(&format!("-e{e}"));
    }
    if let Some(t) = p.theta {
        id.push_str(&format!("-t{t}"));
    }
    if matches!(f, Family::Banded | Family::PowerLaw | Family::FemP1) {
        id.push_str(&format!("-s{}", p.seed));
    }
    id
}

fn fam(set: MatrixSet, f: Family, p: FamilyParams) -> MatrixSpec {
    let (approx_rows, approx_nnz) = family_size(f, &p);
    MatrixSpec {
        id: fam_id(f, &p),
        set,
        recipe: Recipe::family(f, p),
        approx_rows,
        approx_nnz,
    }
}

fn stencil(set: MatrixSet, f: Family, n: usize) -> MatrixSpec {
    fam(set, f, FamilyParams::new(n, 0))
}

fn aniso(set: MatrixSet, n: usize, eps: Option<f64>, theta: Option<f64>) -> MatrixSpec {
    let mut p = FamilyParams::new(n, 0);
    p.eps = eps;
    p.theta = theta;
    fam(set, Family::Anisotropic2d, p)
}

fn banded(set: MatrixSet, n: usize, bw: usize, seed: u64) -> MatrixSpec {
    let mut p = FamilyParams::new(n, seed);
    p.bandwidth = Some(bw);
    fam(set, Family::Banded, p)
}

fn powerlaw(set: MatrixSet, n: usize, mean: f64, alpha: f64, seed: u64) -> MatrixSpec {
    let mut p = FamilyParams::new(n, seed);
    p.mean_row_len = Some(mean);
    p.alpha = Some(alpha);
    fam(set, Family::PowerLaw, p)
}

fn fem(set: MatrixSet, n: usize, seed: u64) -> MatrixSpec {
    fam(set, Family::FemP1, FamilyParams::new(n, seed))
}

fn file_kron(path: &str, g: usize) -> MatrixSpec {
    let (rows, nnz) = FIXTURES
        .iter()
        .find(|(p, _, _)| *p == path)
        .map_or((0, 0), |&(_, r, z)| (r, z));
    let g64 = g as u64;
    let stem = path
        .rsplit('/')
        .next()
        .unwrap_or(path)
        .trim_end_matches(".mtx");
    MatrixSpec {
        id: format!("{stem}-kron-poisson2d{g}"),
        set: MatrixSet::Eval,
        recipe: Recipe::FileKron {
            path: path.to_string(),
            poisson2d: g,
        },
        approx_rows: rows * g64 * g64,
        approx_nnz: nnz * (5 * g64 * g64).saturating_sub(4 * g64),
    }
}

/// The fit set (34 matrices, 1e4 to 1e7 rows; four of them with 5e7 to 1.1e8 nonzeros).
pub fn fit_matrices() -> Vec<MatrixSpec> {
    use Family::*;
    let s = MatrixSet::Fit;
    let mut v = Vec::new();
    // Stencils: constant row lengths, 5..27 diagonals, 1e4..1e7 rows.
    for n in [100, 316, 1000, 3162] {
        v.push(stencil(s, Poisson2d5, n));
    }
    for n in [200, 1000] {
        v.push(stencil(s, Poisson2d9, n));
    }
    for n in [22, 50, 100, 215] {
        v.push(stencil(s, Poisson3d7, n));
    }
    for n in [30, 80, 160] {
        v.push(stencil(s, Poisson3d27, n));
    }
    v.push(aniso(s, 150, None, None));
    v.push(aniso(s, 700, Some(0.001), Some(1.0)));
    // Bands: 3 to 201 diagonals.
    for (n, bw) in [
        (20_000, 1),
        (200_000, 4),
        (1_000_000, 2),
        (50_000, 16),
        (300_000, 32),
        (100_000, 64),
        (20_000, 100),
        (400_000, 100),
    ] {
        v.push(banded(s, n, bw, 1));
    }
    // Power-law row lengths: means 4..200, tails from mild (alpha 3) to very heavy (1.1).
    for (n, mean, alpha) in [
        (20_000, 5.0, 2.5),
        (100_000, 10.0, 1.5),
        (500_000, 20.0, 1.2),
        (1_000_000, 8.0, 2.0),
        (200_000, 50.0, 1.8),
        (50_000, 100.0, 3.0),
        (2_000_000, 4.0, 1.1),
        (30_000, 200.0, 2.0),
    ] {
        v.push(powerlaw(s, n, mean, alpha, 1));
    }
    // Unstructured finite-element meshes.
    for n in [20_000, 200_000, 1_000_000] {
        v.push(fem(s, n, 1));
    }
    v
}

/// The evaluation set (19 matrices): other sizes and seeds of the families, and the shipped
/// SuiteSparse fixtures Kronecker-multiplied by 2-D Poisson grids. Never used for fitting.
pub fn eval_matrices() -> Vec<MatrixSpec> {
    use Family::*;
    let s = MatrixSet::Eval;
    vec![
        stencil(s, Poisson2d5, 600),
        stencil(s, Poisson2d9, 450),
        stencil(s, Poisson3d7, 70),
        stencil(s, Poisson3d27, 50),
        aniso(s, 400, Some(0.05), Some(0.8)),
        banded(s, 70_000, 8, 11),
        banded(s, 150_000, 48, 12),
        banded(s, 500_000, 3, 13),
        powerlaw(s, 80_000, 12.0, 1.6, 14),
        powerlaw(s, 300_000, 30.0, 1.3, 15),
        powerlaw(s, 600_000, 6.0, 2.2, 16),
        powerlaw(s, 40_000, 150.0, 2.5, 17),
        fem(s, 100_000, 18),
        fem(s, 400_000, 19),
        file_kron("matrices/bcsstk13.mtx", 8),
        file_kron("matrices/bcsstk13.mtx", 12),
        file_kron("matrices/s3rmt3m3.mtx", 6),
        file_kron("matrices/1138_bus.mtx", 10),
        file_kron("matrices/1138_bus.mtx", 30),
    ]
}

/// The form stage's own fit matrices, beside the fit set: SSOR-AI's two forms change order as
/// the iteration's data outgrows L2, and the fit set jumps there (3D Poisson 50^3 to 100^3, the
/// FEM meshes 2e5 to 1e6), so a ladder of 7-point and 27-point 3D Poisson grids, 2D Poisson
/// grids and FEM meshes spans iterations of about 0.02 to 8 times a 50-60 MB L2, at sizes and
/// seeds neither the fit set nor the evaluation set has.
pub fn form_matrices() -> Vec<MatrixSpec> {
    use Family::*;
    let s = MatrixSet::Fit;
    let mut v = Vec::new();
    // 57: between 54 and 60, where the H100's first ladder saw the forms change order.
    for n in [36, 44, 48, 54, 57, 60, 72, 90, 120] {
        v.push(stencil(s, Poisson3d7, n));
    }
    // 16 and 20: small matrices of high fill (the first ladder had none below 24).
    for n in [16, 20, 24, 36, 44] {
        v.push(stencil(s, Poisson3d27, n));
    }
    for n in [250, 400, 700, 1400] {
        v.push(stencil(s, Poisson2d5, n));
    }
    for n in [60_000, 150_000, 300_000, 600_000] {
        v.push(fem(s, n, 21));
    }
    v
}

/// The `--quick` set: six small fit matrices (3e3 to 5e3 rows), one of each kind.
pub fn quick_matrices() -> Vec<MatrixSpec> {
    use Family::*;
    let s = MatrixSet::Fit;
    vec![
        stencil(s, Poisson2d5, 64),
        stencil(s, Poisson3d7, 16),
        aniso(s, 50, None, None),
        banded(s, 5000, 3, 1),
        powerlaw(s, 5000, 10.0, 1.5, 1),
        fem(s, 3000, 1),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::path::Path;

    #[test]
    fn ids_are_unique_and_sets_are_labelled() {
        let fit = fit_matrices();
        let eval = eval_matrices();
        let quick = quick_matrices();
        assert!((30..=40).contains(&fit.len()), "{}", fit.len());
        assert!((15..=20).contains(&eval.len()), "{}", eval.len());
        assert!(quick.len() <= 8);
        assert!(fit.iter().chain(&quick).all(|m| m.set == MatrixSet::Fit));
        assert!(eval.iter().all(|m| m.set == MatrixSet::Eval));
        let all: Vec<&MatrixSpec> = fit.iter().chain(&eval).chain(&quick).collect();
        let ids: HashSet<&str> = all.iter().map(|m| m.id.as_str()).collect();
        assert_eq!(ids.len(), all.len(), "duplicate ids");
        // Fit and evaluation sets share no recipe.
        for e in &eval {
            assert!(fit.iter().all(|f| f.recipe != e.recipe), "{}", e.id);
        }
    }

    #[test]
    fn the_fit_set_spans_sizes_densities_and_shapes() {
        let fit = fit_matrices();
        let rows: Vec<u64> = fit.iter().map(|m| m.approx_rows).collect();
        let mean: Vec<f64> = fit
            .iter()
            .map(|m| m.approx_nnz as f64 / m.approx_rows as f64)
            .collect();
        assert!(*rows.iter().min().unwrap() <= 12_000);
        assert!(*rows.iter().max().unwrap() >= 9_000_000);
        assert!(mean.iter().cloned().fold(f64::MAX, f64::min) <= 3.5);
        assert!(mean.iter().cloned().fold(0.0, f64::max) >= 190.0);
        // A few large ones only: at most four above 5e7 nonzeros, none above 1.2e8.
        let big = fit.iter().filter(|m| m.approx_nnz >= 50_000_000).count();
        assert!((2..=4).contains(&big), "{big}");
        assert!(fit.iter().all(|m| m.approx_nnz <= 120_000_000));
        let eval = eval_matrices();
        let kron: Vec<&MatrixSpec> = eval
            .iter()
            .filter(|m| matches!(m.recipe, Recipe::FileKron { .. }))
            .collect();
        assert!(kron.len() >= 3);
        assert!(kron.iter().all(|m| m.approx_rows >= 100_000));
        assert!(kron.iter().any(|m| m.approx_rows >= 1_000_000));
    }

    #[test]
    fn approximate_sizes_match_small_builds() {
        let base = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let mut specs = quick_matrices();
        specs.push(banded(MatrixSet::Fit, 300, 100, 1));
        specs.push(stencil(MatrixSet::Fit, Family::Poisson3d27, 6));
        specs.push(stencil(MatrixSet::Fit, Family::Poisson2d9, 7));
        specs.push(file_kron("matrices/1138_bus.mtx", 2));
        specs.push(file_kron("matrices/bcsstk13.mtx", 1));
        for m in specs {
            let a = m.recipe.build(&base).unwrap();
            assert_eq!(a.nrows() as u64, m.approx_rows, "{}", m.id);
            let z = a.nnz() as f64;
            let rel = (z - m.approx_nnz as f64).abs() / z;
            assert!(rel < 0.12, "{}: nnz {} vs approx {}", m.id, z, m.approx_nnz);
        }
    }
}
