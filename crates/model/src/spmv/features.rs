//! Feature sets: which terms a candidate's model uses beyond its kind's base terms (depth, fill
//! scaling, L2 split or bins), chosen per candidate by cross-validation.
use serde::{Deserialize, Serialize};

use super::{KernelKind, Residency, Term, TermSpec};

/// Which terms a candidate's model uses beyond its kind's base terms, and how the traffic
/// terms are scaled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FeatureSet {
    /// Short name, reported with the fit.
    pub name: String,
    /// Add the [`Term::Depth`] term.
    pub depth: bool,
    /// Split the traffic terms at this fraction of the L2 size (`None`: no split).
    pub l2_fraction: Option<f64>,
    /// Scale the traffic terms by `max(1, f R / active)` with `R` the device's resident threads
    /// and `active` the threads the launch keeps in flight (`None`: no scaling); see the module
    /// documentation.
    #[serde(default)]
    pub fill_fraction: Option<f64>,
    /// Piecewise-linear L2 bins: knots as multiples of the L2 size, increasing. Each traffic
    /// term gets one column per knot, weighted by hat functions over `ln(B / L2)` (1 at its
    /// knot, falling linearly to 0 at the neighbouring knots, held at 1 beyond the outer
    /// knots), so the cost per unit can follow any transition between cache and memory.
    /// Empty: no bins. Not combined with `l2_fraction`.
    #[serde(default)]
    pub l2_knots: Vec<f64>,
}

impl FeatureSet {
    /// The feature sets tried by default, simplest first: every combination of `depth` (off,
    /// on), the fill scaling (off, `f` = 0.5, 1) and the L2 split (off, at 1 and at 0.5 times
    /// the L2 size), ordered by the number of columns they add.
    pub fn defaults() -> Vec<FeatureSet> {
        #[derive(Clone, Copy)]
        enum L2 {
            No,
            Split(f64),
            Bins(&'static [f64]),
        }
        let mut out = Vec::new();
        for l2 in [
            L2::No,
            L2::Split(1.0),
            L2::Split(0.5),
            L2::Bins(&[0.5, 1.0, 2.0]),
            L2::Bins(&[0.25, 1.0, 4.0]),
        ] {
            for depth in [false, true] {
                for fill in [None, Some(0.5), Some(1.0)] {
                    let mut parts = Vec::new();
                    if depth {
                        parts.push("depth".to_string());
                    }
                    if let Some(f) = fill {
                        parts.push(format!("fill{f}"));
                    }
                    let (l2_fraction, l2_knots) = match l2 {
                        L2::No => (None, Vec::new()),
                        L2::Split(f) => {
                            parts.push(format!("l2x{f}"));
                            (Some(f), Vec::new())
                        }
                        L2::Bins(k) => {
                            let names: Vec<String> = k.iter().map(|v| v.to_string()).collect();
                            parts.push(format!("l2bins{}", names.join(":")));
                            (None, k.to_vec())
                        }
                    };
                    out.push(FeatureSet {
                        name: if parts.is_empty() {
                            "base".to_string()
                        } else {
                            parts.join("+")
                        },
                        depth,
                        l2_fraction,
                        fill_fraction: fill,
                        l2_knots,
                    });
                }
            }
        }
        out
    }

    /// The sets of [`FeatureSet::defaults`] without an L2 treatment, simplest first: those
    /// the replayed regime is fitted with, where every matrix is in L2 (the launch geometry,
    /// the fill and the depth are what tell the candidates apart there).
    pub fn without_l2() -> Vec<FeatureSet> {
        Self::defaults()
            .into_iter()
            .filter(|f| f.l2_fraction.is_none() && f.l2_knots.is_empty())
            .collect()
    }

    /// The sets of [`FeatureSet::defaults`] that treat the L2 regime (a split or bins), simplest
    /// first. Where the fit matrices are few and their working sets straddle the L2 size, the
    /// cross-validation cannot tell the L2 treatment from noise and the one-standard-error rule
    /// falls back to sets without it, which over-predict the matrices that fit in L2; fitting
    /// with these sets only makes the treatment a prior instead of a choice.
    pub fn with_l2() -> Vec<FeatureSet> {
        Self::defaults()
            .into_iter()
            .filter(|f| f.l2_fraction.is_some() || !f.l2_knots.is_empty())
            .collect()
    }

    /// Checks the fractions are finite and positive and the knots increasing.
    pub(super) fn check(&self) -> Result<(), String> {
        for (what, v) in [("L2", self.l2_fraction), ("fill", self.fill_fraction)] {
            if v.is_some_and(|x| !(x.is_finite() && x > 0.0)) {
                return Err(format!(
                    "feature set {}: the {what} fraction must be finite and positive",
                    self.name
                ));
            }
        }
        let k = &self.l2_knots;
        if k.iter().any(|x| !(x.is_finite() && *x > 0.0)) || k.windows(2).any(|w| w[0] >= w[1]) {
            return Err(format!(
                "feature set {}: L2 knots must be positive and increasing",
                self.name
            ));
        }
        if !k.is_empty() && self.l2_fraction.is_some() {
            return Err(format!(
                "feature set {}: L2 bins and an L2 split exclude each other",
                self.name
            ));
        }
        Ok(())
    }

    /// Hat-function weights of a working set of `bytes` over the L2 knots (sum 1; empty
    /// without knots).
    pub fn bin_weights(&self, bytes: f64, l2_bytes: u64) -> Vec<f64> {
        let k = &self.l2_knots;
        let mut w = vec![0.0; k.len()];
        if k.is_empty() {
            return w;
        }
        let x = (bytes.max(1.0) / (l2_bytes.max(1) as f64)).ln();
        let lk: Vec<f64> = k.iter().map(|v| v.ln()).collect();
        if x <= lk[0] {
            w[0] = 1.0;
        } else if x >= lk[lk.len() - 1] {
            w[lk.len() - 1] = 1.0;
        } else {
            for i in 0..lk.len() - 1 {
                if x >= lk[i] && x < lk[i + 1] {
                    let a = (lk[i + 1] - x) / (lk[i + 1] - lk[i]);
                    w[i] = a;
                    w[i + 1] = 1.0 - a;
                    break;
                }
            }
        }
        w
    }

    /// The columns of a model of `kind` under this set.
    pub fn columns(&self, kind: KernelKind) -> Vec<TermSpec> {
        let mut terms = kind.terms();
        if self.depth {
            terms.push(Term::Depth);
        }
        let mut out = Vec::new();
        for t in terms {
            if t.is_traffic() && !self.l2_knots.is_empty() {
                for k in 0..self.l2_knots.len() {
                    out.push(TermSpec {
                        term: t,
                        part: Residency::Bin(k),
                    });
                }
            } else if t.is_traffic() && self.l2_fraction.is_some() {
                out.push(TermSpec {
                    term: t,
                    part: Residency::InL2,
                });
                out.push(TermSpec {
                    term: t,
                    part: Residency::OutL2,
                });
            } else {
                out.push(TermSpec {
                    term: t,
                    part: Residency::All,
                });
            }
        }
        out
    }
}
