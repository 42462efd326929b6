//! Helpers shared by the prepared-solver tests on the CPU and on a GPU.
use autopcg::CsrMatrix;

/// A right-hand side `b = A x` for a known, smoothly varying `x` picked by `seed`.
pub fn rhs(a: &CsrMatrix, seed: u64) -> Vec<f64> {
    let x: Vec<f64> = (0..a.nrows())
        .map(|i| 1.0 + ((i as u64 * 2654435761 + seed) % 97) as f64 / 97.0)
        .collect();
    a.mul_vec(&x)
}

/// The relative true residual `||b - A x|| / ||b||`.
pub fn true_residual(a: &CsrMatrix, x: &[f64], b: &[f64]) -> f64 {
    let ax = a.mul_vec(x);
    let r: f64 = ax
        .iter()
        .zip(b)
        .map(|(p, q)| (p - q).powi(2))
        .sum::<f64>()
        .sqrt();
    r / b.iter().map(|v| v * v).sum::<f64>().sqrt()
}
