//! The time line of one launch configuration inside one test domain, `T(n) = a * n + b`
//! (eq. 3-1 of method.md, and eq. 3-3 for reductions), fitted by weighted least squares.
//!
//! # Weighting
//!
//! Inside one domain the sizes span up to two orders of magnitude and so do the times: an
//! ordinary least-squares fit would spend its freedom on the largest sizes and leave the small
//! ones with large relative errors, although a pick is judged by the ratio of its time to the
//! best one. The fit therefore minimises the sum of squared *relative* residuals,
//!
//! ```text
//! sum_i ((a * n_i + b - T_i) / T_i)^2,
//! ```
//!
//! i.e. ordinary weighted least squares with weights `w_i = 1 / T_i^2`. Every time must be
//! finite and positive. The reported r² is the weighted one (the share of the weighted
//! variance of the times the line explains), and the residual statistics are relative:
//! `|a * n_i + b - T_i| / T_i`.
use serde::{Deserialize, Serialize};

use crate::ModelError;

/// A line `T(n) = a * n + b` (milliseconds against elements).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Line {
    /// Slope, milliseconds per element.
    pub a: f64,
    /// Intercept, milliseconds.
    pub b: f64,
}

impl Line {
    /// The line `a * n + b`.
    pub fn new(a: f64, b: f64) -> Line {
        Line { a, b }
    }

    /// `a * n + b`.
    pub fn eval(&self, n: f64) -> f64 {
        self.a * n + self.b
    }

    /// Where the two lines cross, `None` when they are parallel (identical lines included) or
    /// the crossing is not a finite number.
    pub fn intersect(&self, other: &Line) -> Option<f64> {
        let da = self.a - other.a;
        if da == 0.0 {
            return None;
        }
        let x = (other.b - self.b) / da;
        x.is_finite().then_some(x)
    }

    /// True when both coefficients are finite.
    pub fn is_finite(&self) -> bool {
        self.a.is_finite() && self.b.is_finite()
    }
}

/// How well a line fits its points.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct FitStats {
    /// Points fitted.
    pub points: usize,
    /// Distinct sizes among them.
    pub sizes: usize,
    /// Weighted coefficient of determination (1 for a perfect fit).
    pub r2: f64,
    /// Largest relative residual `|line(n) - T| / T`.
    pub max_rel_residual: f64,
    /// Median relative residual.
    pub median_rel_residual: f64,
}

/// A fitted line and its statistics.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LineFit {
    /// The line.
    pub line: Line,
    /// Its fit statistics.
    pub stats: FitStats,
}

/// Median of a slice (sorted in place); 0 for an empty slice.
pub(crate) fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        0.5 * (v[m - 1] + v[m])
    }
}

/// Fits `T = a * n + b` to `(n, T)` points by least squares on relative residuals (see the
/// module header). Errors when a size or a time is not finite, a time is not positive, or the
/// points hold fewer than two distinct sizes.
pub fn fit_line(points: &[(f64, f64)]) -> Result<LineFit, ModelError> {
    let err = |reason: String| ModelError::Fit {
        what: "a time line (eq. 3-1)".into(),
        reason,
    };
    for &(n, t) in points {
        if !n.is_finite() || !t.is_finite() || t <= 0.0 {
            return Err(err(format!(
                "point (n = {n}, T = {t}): sizes must be finite and times finite and positive"
            )));
        }
    }
    let mut sizes: Vec<f64> = points.iter().map(|p| p.0).collect();
    sizes.sort_by(f64::total_cmp);
    sizes.dedup();
    if sizes.len() < 2 {
        return Err(err(format!(
            "{} distinct size(s) among {} point(s); a line needs at least 2",
            sizes.len(),
            points.len()
        )));
    }
    // Weighted means, then centred sums: the sizes reach 1e9, so raw sums of n^2 would lose
    // the digits the slope is made of.
    let w = |t: f64| 1.0 / (t * t);
    let sw: f64 = points.iter().map(|&(_, t)| w(t)).sum();
    let xm = points.iter().map(|&(n, t)| w(t) * n).sum::<f64>() / sw;
    let ym = points.iter().map(|&(_, t)| w(t) * t).sum::<f64>() / sw;
    let (mut sxx, mut sxy, mut syy) = (0.0, 0.0, 0.0);
    for &(n, t) in points {
        let (dx, dy) = (n - xm, t - ym);
        sxx += w(t) * dx * dx;
        sxy += w(t) * dx * dy;
        syy += w(t) * dy * dy;
    }
    if sxx <= 0.0 || !sxx.is_finite() {
        return Err(err("the sizes carry no spread the fit can use".into()));
    }
    let a = sxy / sxx;
    let line = Line::new(a, ym - a * xm);
    if !line.is_finite() {
        return Err(err("the fitted coefficients are not finite".into()));
    }
    let mut rel: Vec<f64> = points
        .iter()
        .map(|&(n, t)| (line.eval(n) - t).abs() / t)
        .collect();
    let ss_res: f64 = points
        .iter()
        .map(|&(n, t)| w(t) * (line.eval(n) - t).powi(2))
        .sum();
    let r2 = if syy > 0.0 { 1.0 - ss_res / syy } else { 1.0 };
    let max_rel = rel.iter().copied().fold(0.0, f64::max);
    let med = median(&mut rel);
    Ok(LineFit {
        line,
        stats: FitStats {
            points: points.len(),
            sizes: sizes.len(),
            r2,
            max_rel_residual: max_rel,
            median_rel_residual: med,
        },
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Deterministic noise in [-1, 1) (splitmix64), so tests need no random-number crate.
    pub(crate) fn noise(state: &mut u64) -> f64 {
        *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = *state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 52) as f64 - 1.0
    }

    #[test]
    fn exact_lines_are_recovered() {
        let truth = Line::new(2.5e-6, 0.004);
        let pts: Vec<(f64, f64)> = [1500.0, 4000.0, 2.0e4, 1.0e5, 1.0e5]
            .iter()
            .map(|&n| (n, truth.eval(n)))
            .collect();
        let f = fit_line(&pts).unwrap();
        assert!((f.line.a - truth.a).abs() / truth.a < 1e-12, "{f:?}");
        assert!((f.line.b - truth.b).abs() / truth.b < 1e-12, "{f:?}");
        assert_eq!(f.stats.points, 5);
        assert_eq!(f.stats.sizes, 4);
        assert!(f.stats.max_rel_residual < 1e-12);
        assert!((f.stats.r2 - 1.0).abs() < 1e-12);
        // Two points and large sizes.
        let truth = Line::new(1.1e-8, 0.02);
        let f = fit_line(&[(1.3e8, truth.eval(1.3e8)), (1.0e9, truth.eval(1.0e9))]).unwrap();
        assert!((f.line.a - truth.a).abs() / truth.a < 1e-10, "{f:?}");
        assert!((f.line.b - truth.b).abs() / truth.b < 1e-6, "{f:?}");
        // A constant time is a flat line.
        let f = fit_line(&[(10.0, 3.0), (20.0, 3.0), (40.0, 3.0)]).unwrap();
        assert!(f.line.a.abs() < 1e-15 && (f.line.b - 3.0).abs() < 1e-12);
        assert_eq!(f.stats.r2, 1.0);
    }

    #[test]
    fn noisy_lines_stay_close_and_report_their_residuals() {
        let truth = Line::new(1.0e-7, 0.01);
        let mut s = 7u64;
        let mut pts = Vec::new();
        for k in 0..40 {
            let n = 1.0e5 * 1.1f64.powi(k);
            // 2 % multiplicative noise.
            pts.push((n, truth.eval(n) * (1.0 + 0.02 * noise(&mut s))));
        }
        let f = fit_line(&pts).unwrap();
        assert!((f.line.a - truth.a).abs() / truth.a < 0.02, "{f:?}");
        assert!((f.line.b - truth.b).abs() / truth.b < 0.05, "{f:?}");
        assert!(f.stats.max_rel_residual < 0.045, "{f:?}");
        assert!(f.stats.max_rel_residual > 0.005, "{f:?}");
        assert!(f.stats.median_rel_residual <= f.stats.max_rel_residual);
        assert!(f.stats.r2 > 0.99 && f.stats.r2 < 1.0, "{f:?}");
    }

    #[test]
    fn relative_weighting_protects_the_small_sizes() {
        // A line through the small sizes, one large size 10 % slower than the line: the
        // unweighted fit would bend towards it; the relative one keeps the small sizes close.
        let truth = Line::new(1.0e-6, 0.001);
        let mut pts: Vec<(f64, f64)> = [1.0e3, 2.0e3, 4.0e3, 8.0e3]
            .iter()
            .map(|&n| (n, truth.eval(n)))
            .collect();
        pts.push((1.0e6, truth.eval(1.0e6) * 1.1));
        let f = fit_line(&pts).unwrap();
        for &(n, t) in &pts[..4] {
            assert!((f.line.eval(n) - t).abs() / t < 0.1, "{n}: {f:?}");
        }
    }

    #[test]
    fn too_few_sizes_and_bad_times_are_errors() {
        assert!(matches!(fit_line(&[]), Err(ModelError::Fit { .. })));
        let e = fit_line(&[(5.0, 1.0), (5.0, 1.2)]).unwrap_err().to_string();
        assert!(e.contains("1 distinct size"), "{e}");
        assert!(fit_line(&[(5.0, 1.0), (6.0, 0.0)]).is_err());
        assert!(fit_line(&[(5.0, 1.0), (6.0, f64::NAN)]).is_err());
        assert!(fit_line(&[(5.0, 1.0), (f64::INFINITY, 1.0)]).is_err());
    }

    #[test]
    fn intersections() {
        let l1 = Line::new(1.0, 0.0);
        let l2 = Line::new(0.5, 10.0);
        assert_eq!(l1.intersect(&l2), Some(20.0));
        assert_eq!(l2.intersect(&l1), Some(20.0));
        assert_eq!(l1.intersect(&Line::new(1.0, 3.0)), None);
        assert_eq!(l1.intersect(&l1), None);
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(&mut []), 0.0);
    }
}
