//! The backend trait: the steps of one Chronopoulos–Gear iteration as fusable units, and the
//! scalar recurrence shared by every backend.
//!
//! One iteration is, in order:
//! 1. [`PcgBackend::update_vectors`]: `p = u + beta p; s = w + beta s; x += alpha p; r -= alpha s`
//!    (one fused kernel on a GPU);
//! 2. [`PcgBackend::apply_preconditioner`]: `u = M^-1 r`;
//! 3. [`PcgBackend::spmv_reduce_advance`]: `w = A u`, then gamma = (r,u), delta = (w,u),
//!    rr = (r,r) in one reduction (which may be fused into the SpMV), then
//!    [`GearScalars::advance`] — on whatever memory the backend keeps its scalars.
//!
//! The driver ([`crate::pcg()`]) calls [`PcgBackend::poll`] every `check_every` iterations to read
//! what happened; nothing else forces a host synchronisation. Residual replacement needs no step
//! of its own: the driver measures [`PcgBackend::true_residual_norm`] and calls
//! [`PcgBackend::start`] again, which recomputes `r = b - A x` and restarts the recurrence.
//!
//! A backend may solve a scaled copy of the system ([`crate::scaling`]); every norm it reports
//! is then of the scaled system, and [`PcgBackend::norm_factor`] converts them to the user's
//! units. Relative residuals are the same in both.
use serde::Serialize;

use crate::PcgError;

/// The three inner products of one iteration.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Dots {
    /// (r, u)
    pub gamma: f64,
    /// (w, u) = (A u, u)
    pub delta: f64,
    /// (r, r)
    pub rr: f64,
}

/// The scalar state of Chronopoulos–Gear CG after an iteration's reduction.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct GearScalars {
    /// Step length for the next update.
    pub alpha: f64,
    /// Direction coefficient for the next update (0 before the first).
    pub beta: f64,
    /// (r, u) of the current residual.
    pub gamma: f64,
}

/// Why the recurrence cannot go on.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub enum Halt {
    /// gamma = (r, M^-1 r) <= 0 with r != 0: the preconditioner is not SPD.
    GammaNotPositive(f64),
    /// delta - beta gamma / alpha = (A p, p) <= 0: the matrix is not SPD.
    CurvatureNotPositive(f64),
    /// A NaN or infinity appeared.
    NotFinite,
}

impl Halt {
    /// The matching solver error at `iteration`.
    pub fn into_error(self, iteration: usize) -> PcgError {
        match self {
            Halt::GammaNotPositive(v) => PcgError::NotSpd {
                quantity: "gamma = (r, M^-1 r)".into(),
                value: v,
                iteration,
            },
            Halt::CurvatureNotPositive(v) => PcgError::NotSpd {
                quantity: "delta - beta*gamma/alpha = (A p, p)".into(),
                value: v,
                iteration,
            },
            Halt::NotFinite => PcgError::Breakdown {
                iteration,
                reason: "a residual or inner product became NaN or infinite".into(),
            },
        }
    }
}

/// Below this magnitude an inner product has lost its relative accuracy to underflow (its terms
/// were subnormal or flushed to zero): `f64::MIN_POSITIVE / f64::EPSILON`, about `1e-292`.
pub const UNDERFLOW_LEVEL: f64 = f64::MIN_POSITIVE / f64::EPSILON;

impl Halt {
    /// The solver error for a halt at `iteration` with the dots of its record, telling a matrix
    /// that is not SPD from an artefact of the range of `f64`: a non-positive curvature or
    /// gamma is reported as [`PcgError::NotSpd`] only when the quantities it came from are
    /// finite and not underflowed ([`UNDERFLOW_LEVEL`]); otherwise the halt is a
    /// [`PcgError::Breakdown`] that says the inner products left the range of `f64`.
    pub fn classify(self, iteration: usize, dots: Dots) -> PcgError {
        let tiny = |v: f64| v.abs() < UNDERFLOW_LEVEL;
        let range = |what: &str| PcgError::Breakdown {
            iteration,
            reason: format!(
                "{what} (gamma = {:e}, delta = {:e}, (r,r) = {:e}); not a proof that the matrix \
                 is not SPD",
                dots.gamma, dots.delta, dots.rr
            ),
        };
        match self {
            Halt::CurvatureNotPositive(v) if !(v.is_finite() && dots.delta.is_finite()) => {
                range("the curvature (A p, p) overflowed")
            }
            Halt::CurvatureNotPositive(_) if tiny(dots.delta) || tiny(dots.gamma) => {
                range("the curvature (A p, p) was computed from underflowed inner products")
            }
            Halt::GammaNotPositive(v) if tiny(v) && tiny(dots.rr) => {
                range("gamma = (r, M^-1 r) underflowed")
            }
            h => h.into_error(iteration),
        }
    }
}

impl GearScalars {
    /// Initial scalars from the dots of r0, u0, w0: alpha0 = gamma0 / delta0, beta0 = 0.
    pub fn start(d: Dots) -> Result<GearScalars, Halt> {
        if !(d.gamma.is_finite() && d.delta.is_finite() && d.rr.is_finite()) {
            return Err(Halt::NotFinite);
        }
        if d.gamma <= 0.0 {
            return Err(Halt::GammaNotPositive(d.gamma));
        }
        if d.delta <= 0.0 {
            return Err(Halt::CurvatureNotPositive(d.delta));
        }
        Ok(GearScalars {
            alpha: d.gamma / d.delta,
            beta: 0.0,
            gamma: d.gamma,
        })
    }

    /// The recurrence after a reduction: beta = gamma_new / gamma_old,
    /// alpha = gamma_new / (delta_new - beta gamma_new / alpha_old).
    pub fn advance(&self, d: Dots) -> Result<GearScalars, Halt> {
        if !(d.gamma.is_finite() && d.delta.is_finite() && d.rr.is_finite()) {
            return Err(Halt::NotFinite);
        }
        if d.gamma <= 0.0 {
            return Err(Halt::GammaNotPositive(d.gamma));
        }
        let beta = d.gamma / self.gamma;
        let curvature = d.delta - beta * d.gamma / self.alpha;
        if curvature <= 0.0 || !curvature.is_finite() {
            return Err(Halt::CurvatureNotPositive(curvature));
        }
        Ok(GearScalars {
            alpha: d.gamma / curvature,
            beta,
            gamma: d.gamma,
        })
    }
}

/// What one iteration (or the start, iteration 0) left behind, as read by [`PcgBackend::poll`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct IterRecord {
    /// 0 for the initial residual, then 1, 2, ...
    pub iteration: usize,
    /// The dots of this iteration's reduction.
    pub dots: Dots,
    /// The scalars computed from them, or why the recurrence halted (then the backend stops
    /// changing its vectors until [`PcgBackend::start`] is called again).
    pub outcome: Result<GearScalars, Halt>,
}

/// A place Chronopoulos–Gear PCG can run: it owns A, the preconditioner, b, x and the work
/// vectors (r, u, w, p, s) and the scalars.
pub trait PcgBackend {
    /// Problem size n.
    fn n(&self) -> usize;
    /// ||b||, for the relative stopping test.
    fn rhs_norm(&mut self) -> Result<f64, PcgError>;
    /// From the current x: r = b - A x, u = M^-1 r, w = A u, the three dots and
    /// [`GearScalars::start`]; p and s are cleared. Queues record 0 for the next poll (and
    /// drops any record not yet polled). The driver calls it again to replace the residual, so
    /// it must work at any time, after a halt too; the iteration numbers of the records start
    /// again from 0.
    fn start(&mut self) -> Result<(), PcgError>;
    /// Step 1 of an iteration: the fused four-vector update.
    fn update_vectors(&mut self) -> Result<(), PcgError>;
    /// Step 2: u = M^-1 r.
    fn apply_preconditioner(&mut self) -> Result<(), PcgError>;
    /// Step 3: w = A u, the fused three-dot reduction and the scalar recurrence. Queues a record.
    fn spmv_reduce_advance(&mut self) -> Result<(), PcgError>;
    /// Synchronises and returns the records queued since the last poll, in order.
    fn poll(&mut self) -> Result<Vec<IterRecord>, PcgError>;
    /// The most polling intervals the driver may issue between two polls while the residual
    /// is far from the tolerance ([`crate::pcg()`]'s pacing): 1, the default, polls at every
    /// interval. A backend whose poll stops the device (a synchronisation, the records
    /// gathered) returns more.
    fn poll_growth(&self) -> usize {
        1
    }
    /// ||b - A x|| recomputed from the current x.
    fn true_residual_norm(&mut self) -> Result<f64, PcgError>;
    /// ||A||_inf (largest absolute row sum) of the matrix the backend iterates with, for the
    /// attainable-accuracy estimate `eps ||A|| ||x|| / ||b||`; computed once.
    fn matrix_norm(&mut self) -> Result<f64, PcgError>;
    /// ||x||_2 of the current iterate.
    fn solution_norm(&mut self) -> Result<f64, PcgError>;
    /// The factor that turns the norms this backend reports ([`PcgBackend::rhs_norm`], the
    /// residuals) into the units of the caller's `b`: `2^-rhs_exp` when the backend solves a
    /// scaled system ([`crate::scaling::ScaleFactors`]), 1 otherwise.
    fn norm_factor(&self) -> f64 {
        1.0
    }
    /// Copies the current x to the host.
    fn solution(&mut self) -> Result<Vec<f64>, PcgError>;
    /// Sets x = 0 and stops the recurrence (the driver uses it when b = 0, where x = 0 is the
    /// exact solution whatever the initial guess).
    fn zero_solution(&mut self) -> Result<(), PcgError>;
}

/// Checks a right-hand side `b` and an initial guess `x0` against a system of `n` rows (what a
/// backend's `set_problem` checks before anything moves).
#[cfg(feature = "gpu")]
pub(crate) fn check_problem_len(n: usize, b: &[f64], x0: Option<&[f64]>) -> Result<(), PcgError> {
    if b.len() != n || x0.is_some_and(|x| x.len() != n) {
        return Err(PcgError::Dimension(format!(
            "right-hand side of length {} and initial guess of length {:?} for a matrix of {n} \
             rows",
            b.len(),
            x0.map(<[f64]>::len),
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recurrence_matches_hand_computation() {
        let s0 = GearScalars::start(Dots {
            gamma: 4.0,
            delta: 2.0,
            rr: 4.0,
        })
        .unwrap();
        assert_eq!((s0.alpha, s0.beta), (2.0, 0.0));
        let s1 = s0
            .advance(Dots {
                gamma: 1.0,
                delta: 3.0,
                rr: 1.0,
            })
            .unwrap();
        // beta = 1/4, curvature = 3 - 0.25 * 1 / 2 = 2.875
        assert_eq!(s1.beta, 0.25);
        assert!((s1.alpha - 1.0 / 2.875).abs() < 1e-15);
    }

    #[test]
    fn range_artefacts_are_breakdowns_not_verdicts() {
        let d = |gamma: f64, delta: f64, rr: f64| Dots { gamma, delta, rr };
        // Overflowed curvature or delta: not a proof of indefiniteness.
        for (h, dots) in [
            (
                Halt::CurvatureNotPositive(f64::INFINITY),
                d(1.0, 1e300, 1.0),
            ),
            (Halt::CurvatureNotPositive(-1.0), d(1.0, f64::INFINITY, 1.0)),
            // Underflowed inner products.
            (Halt::CurvatureNotPositive(0.0), d(1e-300, 1e-310, 1e-300)),
            (
                Halt::CurvatureNotPositive(-1e-320),
                d(1e-295, 1e-300, 1e-290),
            ),
            (Halt::GammaNotPositive(0.0), d(0.0, 1.0, 1e-310)),
        ] {
            let e = h.classify(3, dots);
            assert!(
                matches!(e, PcgError::Breakdown { iteration: 3, .. }),
                "{h:?} {dots:?}: {e}"
            );
        }
        // Real verdicts stay NotSpd.
        for (h, dots) in [
            (Halt::CurvatureNotPositive(-0.5), d(1.0, 0.5, 1.0)),
            (Halt::CurvatureNotPositive(0.0), d(1.0, 2.0, 1.0)),
            (Halt::GammaNotPositive(-1.0), d(-1.0, 1.0, 1.0)),
            (Halt::GammaNotPositive(0.0), d(0.0, 1.0, 1.0)),
        ] {
            let e = h.classify(3, dots);
            assert!(
                matches!(e, PcgError::NotSpd { iteration: 3, .. }),
                "{h:?} {dots:?}: {e}"
            );
        }
        assert!(matches!(
            Halt::NotFinite.classify(0, d(f64::NAN, 1.0, 1.0)),
            PcgError::Breakdown { .. }
        ));
    }

    #[test]
    fn non_spd_is_detected() {
        let s0 = GearScalars::start(Dots {
            gamma: 1.0,
            delta: 1.0,
            rr: 1.0,
        })
        .unwrap();
        let e = s0
            .advance(Dots {
                gamma: 1.0,
                delta: 0.5,
                rr: 1.0,
            })
            .unwrap_err();
        assert!(matches!(e, Halt::CurvatureNotPositive(v) if v == -0.5));
        assert!(matches!(
            GearScalars::start(Dots {
                gamma: -1.0,
                delta: 1.0,
                rr: 1.0
            }),
            Err(Halt::GammaNotPositive(_))
        ));
        assert!(matches!(
            s0.advance(Dots {
                gamma: f64::NAN,
                delta: 1.0,
                rr: 1.0
            }),
            Err(Halt::NotFinite)
        ));
    }
}
