//! What the row-block tests (CPU and GPU) share: the committed fixtures they solve.
#![allow(dead_code)]

use autopcg_sparse::families::poisson3d_7pt;
use autopcg_sparse::mm::{read_matrix, ReadOptions};
use autopcg_sparse::CsrMatrix;

/// A committed fixture, by file name without `.mtx`.
pub fn fixture(name: &str) -> CsrMatrix {
    let path = format!("../../matrices/{name}.mtx");
    read_matrix(&path, &ReadOptions::default())
        .unwrap_or_else(|e| panic!("{path}: {e}"))
        .matrix
}

/// The fixtures `names`, then a generated 3D Poisson (24^3, 7-point).
pub fn fixtures_and_poisson(names: &[&str]) -> Vec<(String, CsrMatrix)> {
    let mut m: Vec<(String, CsrMatrix)> =
        names.iter().map(|n| (n.to_string(), fixture(n))).collect();
    m.push((
        "poisson3d_7pt 24^3".into(),
        poisson3d_7pt(24, 24, 24).unwrap(),
    ));
    m
}
