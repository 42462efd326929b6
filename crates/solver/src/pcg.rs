//! The Chronopoulos–Gear PCG driver, written once over [`PcgBackend`].
//!
//! The recurrence follows Chronopoulos and Gear, "s-step iterative methods for symmetric linear
//! systems" (the s = 1 case): with `u = M^-1 r` and `w = A u`, the inner products
//! `gamma = (r,u)`, `delta = (w,u)` and `rr = (r,r)` come from one reduction per iteration, and
//! `s = A p` is carried by the recurrence `s = w + beta s` instead of a second SpMV:
//!
//! ```text
//! r0 = b - A x0; u0 = M^-1 r0; w0 = A u0; alpha0 = gamma0 / delta0; beta0 = 0
//! each iteration: p = u + beta p; s = w + beta s; x += alpha p; r -= alpha s;
//!                 u = M^-1 r; w = A u; (gamma, delta, rr) in one reduction;
//!                 beta = gamma / gamma_old; alpha = gamma / (delta - beta gamma / alpha_old)
//! ```
//!
//! The driver issues the three steps of each iteration and reads the backend's records only
//! every `check_every` iterations (and at the iteration limit), so that a GPU backend need not
//! synchronise every iteration; for such a backend it spaces the polls further while the
//! residual is far from the tolerance (`PollPacer`).
//!
//! # Convergence means the true residual
//!
//! The recurrence residual `r` drifts from `b - A x` in floating point, and on hard problems it
//! keeps falling long after the true residual has stopped (the failure known from CuPy #7512;
//! before this check, a 150k-point FEM matrix with Jacobi was reported "converged" at a
//! recurrence residual of 9.5e-11 with a true one of 1.9e-7). So the recurrence
//! only says when to look: at the first polled record whose recurrence residual meets
//! `||r|| <= tol ||b||`, the driver measures the true residual of the iterate
//! ([`PcgBackend::true_residual_norm`]; a record 0 already is one, since a start computes
//! `r = b - A x`).
//!
//! - If `||b - A x|| <= tol ||b||`, the solve has converged ([`StopReason::Converged`]).
//! - Otherwise the residual is replaced (van der Vorst and Ye, "Residual replacement strategies
//!   for Krylov subspace iterative methods for the convergence of true residuals", SISC 22,
//!   2000): [`PcgBackend::start`] recomputes `r = b - A x`, `u`, `w` and the scalars from the
//!   current x and the recurrence restarts from there (`p = s = 0`). Restarting costs a few
//!   iterations of superlinear convergence, but needs no backend step beyond the start every
//!   backend already has, so the GPU gets it unchanged; a replacement that keeps `p` would need
//!   the previous iteration's scalars, which the GPU recurrence does not keep.
//! - Stagnation: the true residual measured at each such check must fall below
//!   [`STAGNATION_FACTOR`] times the best one before it (the first being `||r_0||`). After
//!   [`STAGNATION_CHECKS`] checks in a row that do not, replacement no longer helps: the
//!   tolerance is below what double precision allows for this system, and the solve stops with
//!   [`PcgError::Stagnated`], carrying the estimate `eps ||A||_inf ||x||_2 / ||b||_2` of the
//!   attainable relative residual (the normwise backward-error floor, with the cheap
//!   `||A||_inf >= ||A||_2` of a symmetric matrix).
//!
//! With [`PcgParams::replace_every`] the driver also replaces the residual periodically.
//!
//! Iteration counts add up over the restarts: records reach the callback with the total
//! iteration number, and `max_iter` bounds the total.
use std::borrow::Cow;
use std::ops::ControlFlow;

use autopcg_sparse::CsrMatrix;

use crate::backend::{IterRecord, PcgBackend};
use crate::cpu::CpuBackend;
use crate::params::{HistoryNorm, StopReason};
use crate::scaling::ScaleFactors;
use crate::{PcgError, PcgInfo, PcgParams, PrecondKind, Preconditioner};

/// Consecutive tolerance checks without progress of the true residual after which the solve
/// stops as stagnated (see the module docs).
///
/// Three: one check without progress can be noise of the true residual around its floor (it
/// is computed with rounding errors of the size of the floor), two could be a slow but real
/// descent; each check after a replacement costs only the iterations the restarted recurrence
/// needs to meet the tolerance again, which near the floor are few.
pub const STAGNATION_CHECKS: usize = 3;

/// Progress at a tolerance check means a true residual below this fraction of the best one
/// measured before. One half: at the floor the true residual wanders by less than that, while
/// a replacement that helps gains orders of magnitude.
pub const STAGNATION_FACTOR: f64 = 0.5;

/// The share of the iterations still needed, as projected from the last two polls, that the
/// driver may issue before it polls again (see [`PollPacer`]). One half: the next poll comes
/// early enough unless the residual falls more than twice as fast as it just did.
pub const PACING_SAFETY: f64 = 0.5;

/// Spaces the polls of a solve. A poll costs a backend a synchronisation; while the
/// residual is far from the tolerance, polling less often loses nothing. After each poll the
/// pacer projects the iterations still needed from the rate at which the log of the residual
/// fell since the poll before (the least residual of each poll's records, so that CG's
/// oscillations count less), and the driver issues up to [`PACING_SAFETY`] of them, in whole
/// polling intervals, at most [`PcgBackend::poll_growth`] intervals and at least one. Without a
/// rate yet (the first poll of a round), or where the residual did not fall, it is one
/// interval. The records are the same whenever they are polled; what moves is how far x has
/// gone when the driver sees that the tolerance is met.
#[derive(Debug, Clone)]
struct PollPacer {
    interval: usize,
    growth: usize,
    /// Iteration (of the round) and log of the least residual of the last poll.
    last: Option<(usize, f64)>,
}

impl PollPacer {
    fn new(interval: usize, growth: usize) -> Self {
        PollPacer {
            interval: interval.max(1),
            growth: growth.max(1),
            last: None,
        }
    }

    /// Forgets the rate (a new round starts from a new residual); returns the span of its first
    /// poll, one interval.
    fn restart(&mut self) -> usize {
        self.last = None;
        self.interval
    }

    /// Iterations to issue before the next poll, after a poll whose records ended at iteration
    /// `iteration` of the round with least residual `least` (both in the backend's units), for
    /// the tolerance `threshold`.
    fn next_span(&mut self, iteration: usize, least: f64, threshold: f64) -> usize {
        let now = (iteration, least.ln());
        let mut intervals = 1;
        if let Some((it0, ln0)) = self.last {
            let rate = (ln0 - now.1) / iteration.saturating_sub(it0).max(1) as f64;
            let left = now.1 - threshold.ln();
            if iteration > it0 && rate > 0.0 && left.is_finite() && left > 0.0 {
                let projected = left / rate * PACING_SAFETY / self.interval as f64;
                if projected.is_finite() && projected >= 1.0 {
                    intervals = (projected as usize).min(self.growth);
                }
            }
        }
        self.last = now.1.is_finite().then_some(now);
        intervals * self.interval
    }
}

/// What the examination of one poll's records found.
enum Event {
    /// Nothing: run on.
    None,
    /// A record met the tolerance on the recurrence residual `res` (internal units); x holds
    /// `held` iterations of the current round; `fresh` when the record is a start's record 0
    /// and x has not moved since (then `res` is a true residual).
    MetTol { held: usize, res: f64, fresh: bool },
    /// The callback stopped the solve; x holds `held` iterations of the current round.
    Stopped { held: usize },
}

/// Runs Chronopoulos–Gear PCG on `backend` from its current x.
///
/// `callback` sees every record the driver examines (record 0 is the initial residual), in
/// order, with `iteration` counted over the whole solve (a record 0 after a residual
/// replacement carries the total iterations so far, and its residual is the replaced, true
/// one); returning `ControlFlow::Break(())` stops the solve after that record
/// ([`PcgError::NotConverged`] with [`StopReason::Stopped`], unless that record met the
/// tolerance).
///
/// Convergence is decided on the true residual (see the module docs): an `Ok` result always
/// has `true_relative_residual <= tol`.
///
/// When `b = 0` the solution is x = 0 exactly: x is set to zero and the solve converges with
/// 0 iterations, whatever the initial guess.
///
/// Errors: [`PcgError::NotSpd`] or [`PcgError::Breakdown`] at the first record whose scalars
/// halted (and that did not already meet the tolerance; see [`crate::Halt::classify`]),
/// [`PcgError::Stagnated`] when residual replacement stops helping,
/// [`PcgError::NotConverged`] (with the final [`PcgInfo`]) at the iteration limit, a
/// [`PcgError::Breakdown`] when the true residual is not finite, and whatever the backend
/// returns.
pub fn pcg<B: PcgBackend + ?Sized>(
    backend: &mut B,
    params: &PcgParams,
    mut callback: impl FnMut(&IterRecord) -> ControlFlow<()>,
) -> Result<PcgInfo, PcgError> {
    if !(params.tol.is_finite() && params.tol > 0.0) {
        return Err(PcgError::InvalidParameter(format!(
            "tolerance must be positive and finite, got {}",
            params.tol
        )));
    }
    if !(params.atol.is_finite() && params.atol >= 0.0) {
        return Err(PcgError::InvalidParameter(format!(
            "absolute tolerance must be finite and non-negative, got {}",
            params.atol
        )));
    }
    if params.check_every == Some(0) {
        return Err(PcgError::InvalidParameter(
            "check_every must be at least 1".into(),
        ));
    }
    if params.replace_every == Some(0) {
        return Err(PcgError::InvalidParameter(
            "replace_every must be at least 1 (or off)".into(),
        ));
    }
    // Every norm below is in the backend's units; `unit` converts for the report.
    let unit = backend.norm_factor();
    let bnorm = backend.rhs_norm()?;
    if !bnorm.is_finite() {
        return Err(PcgError::Breakdown {
            iteration: 0,
            reason: format!("the right-hand side has norm {bnorm}"),
        });
    }
    let mut info = PcgInfo {
        iterations: 0,
        iterations_run: 0,
        converged: false,
        reason: StopReason::MaxIter,
        residual_history: Vec::new(),
        history_norm: HistoryNorm::Recurrence,
        replacements: 0,
        rhs_norm: bnorm * unit,
        recurrence_relative_residual: 0.0,
        true_relative_residual: 0.0,
    };
    if bnorm == 0.0 {
        backend.zero_solution()?;
        info.converged = true;
        info.reason = StopReason::Converged;
        if params.record_history {
            info.residual_history.push(0.0);
        }
        return Ok(info);
    }
    // The tolerance in the backend's units: relative to ||b||, or the absolute floor when that
    // is larger.
    let threshold = (params.tol * bnorm).max(params.atol / unit);

    backend.start()?;
    // Iterations before the current round (x holds them), and issued in it.
    let mut offset = 0usize;
    let mut issued = 0usize;
    // The next poll must begin with a start's record 0.
    let mut fresh_start = true;
    // Smallest true residual so far, and checks in a row without progress below it.
    let mut best_true = f64::INFINITY;
    let mut stalls = 0usize;
    let mut pacer = PollPacer::new(params.poll_interval(), backend.poll_growth());
    // Iterations to issue before the next poll.
    let mut span = params.poll_interval();
    loop {
        let records = backend.poll()?;
        if fresh_start {
            if records.first().map(|r| r.iteration) != Some(0) {
                return Err(PcgError::Backend(
                    "the backend did not report the initial residual after start".into(),
                ));
            }
            fresh_start = false;
        }
        let mut event = Event::None;
        for (k, rec) in records.iter().enumerate() {
            let seen = IterRecord {
                iteration: offset + rec.iteration,
                ..*rec
            };
            let flow = callback(&seen);
            let res = rec.dots.rr.sqrt();
            if params.record_history {
                info.residual_history.push(res * unit);
            }
            info.iterations = seen.iteration;
            info.recurrence_relative_residual = res / bnorm;
            if seen.iteration == 0 {
                // ||r_0||, true: the yardstick of the first check.
                best_true = res;
            }
            // x belongs to the last iteration issued, or to the first halt from here on (a
            // backend freezes its vectors there).
            let held = records[k..]
                .iter()
                .find(|r| r.outcome.is_err())
                .map_or(issued, |r| r.iteration);
            if res <= threshold {
                event = Event::MetTol {
                    held,
                    res,
                    fresh: rec.iteration == 0 && held == 0,
                };
                break;
            }
            if let Err(h) = rec.outcome {
                return Err(h.classify(seen.iteration, rec.dots));
            }
            if flow.is_break() {
                event = Event::Stopped { held };
                break;
            }
        }
        match event {
            Event::MetTol { held, res, fresh } => {
                info.iterations_run = offset + held;
                let true_res = if fresh {
                    res
                } else {
                    backend.true_residual_norm()?
                };
                if !true_res.is_finite() {
                    return Err(PcgError::Breakdown {
                        iteration: info.iterations_run,
                        reason: format!("the true residual of the iterate is {true_res}"),
                    });
                }
                info.true_relative_residual = true_res / bnorm;
                if true_res <= threshold {
                    info.converged = true;
                    info.reason = StopReason::Converged;
                    return Ok(info);
                }
                // The recurrence met the tolerance, x does not.
                if true_res < STAGNATION_FACTOR * best_true {
                    best_true = true_res;
                    stalls = 0;
                } else {
                    stalls += 1;
                }
                if stalls >= STAGNATION_CHECKS {
                    info.reason = StopReason::Stagnated;
                    let xnorm = backend.solution_norm()?;
                    let anorm = backend.matrix_norm()?;
                    return Err(PcgError::Stagnated {
                        attainable: f64::EPSILON * anorm * (xnorm / bnorm),
                        tol: params.tol,
                        info: Box::new(info),
                    });
                }
                if info.iterations_run >= params.max_iter {
                    info.reason = StopReason::MaxIter;
                    return Err(PcgError::NotConverged {
                        info: Box::new(info),
                    });
                }
                offset = info.iterations_run;
                issued = 0;
                info.replacements += 1;
                backend.start()?;
                fresh_start = true;
                span = pacer.restart();
                continue;
            }
            Event::Stopped { held } => {
                info.iterations_run = offset + held;
                info.reason = StopReason::Stopped;
                break;
            }
            Event::None => {
                if let Some(last) = records.last() {
                    let least = records
                        .iter()
                        .map(|r| r.dots.rr.sqrt())
                        .fold(f64::INFINITY, f64::min);
                    span = pacer.next_span(last.iteration, least, threshold);
                }
            }
        }
        if offset + issued >= params.max_iter {
            info.iterations_run = offset + issued;
            info.reason = StopReason::MaxIter;
            break;
        }
        if let Some(k) = params.replace_every {
            if issued >= k {
                offset += issued;
                issued = 0;
                info.replacements += 1;
                backend.start()?;
                fresh_start = true;
                span = pacer.restart();
                continue;
            }
        }
        // Run up to the next polling point.
        let mut next = (issued + span).min(params.max_iter - offset);
        if let Some(k) = params.replace_every {
            next = next.min(k.max(issued + 1));
        }
        while issued < next {
            backend.update_vectors()?;
            backend.apply_preconditioner()?;
            backend.spmv_reduce_advance()?;
            issued += 1;
        }
    }

    let true_res = backend.true_residual_norm()?;
    if !true_res.is_finite() {
        return Err(PcgError::Breakdown {
            iteration: info.iterations_run,
            reason: format!("the true residual of the final iterate is {true_res}"),
        });
    }
    info.true_relative_residual = true_res / bnorm;
    if info.reason == StopReason::MaxIter && true_res <= threshold {
        // The recurrence did not say so, but x meets the tolerance.
        info.converged = true;
        info.reason = StopReason::Converged;
        return Ok(info);
    }
    Err(PcgError::NotConverged {
        info: Box::new(info),
    })
}

/// A CPU solve that did not produce a converged solution.
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct SolveFailure {
    /// What went wrong. For [`PcgError::NotConverged`], `error.info()` gives the iterations and
    /// residuals.
    pub error: PcgError,
    /// The last iterate when the iteration ran to its limit ([`PcgError::NotConverged`]) or
    /// stagnated at the attainable accuracy ([`PcgError::Stagnated`]), so that a caller can
    /// still write it out; `None` for every other error (bad input, or a breakdown, after
    /// which the iterate is not trustworthy).
    pub x: Option<Vec<f64>>,
}

impl From<PcgError> for SolveFailure {
    fn from(error: PcgError) -> Self {
        SolveFailure { error, x: None }
    }
}

/// Builds the preconditioner `kind` for `a` and solves `A x = b` on the CPU from `x0` (zero
/// when `None`).
///
/// A badly scaled system is scaled by powers of two first ([`crate::scaling`]), and the
/// preconditioner built from the scaled matrix; the solution and the reported norms are those
/// of the original system.
///
/// Returns the solution and what the solve did, or a [`SolveFailure`] that still carries the
/// last iterate when the solve ran out of iterations or stagnated.
pub fn solve_cpu(
    a: &CsrMatrix,
    b: &[f64],
    x0: Option<&[f64]>,
    kind: &PrecondKind,
    params: &PcgParams,
) -> Result<(Vec<f64>, PcgInfo), SolveFailure> {
    let factors = ScaleFactors::for_system(a, b);
    let scaled = factors.scale_matrix(a);
    let precond = Preconditioner::build(&scaled, kind)?;
    let mut backend = CpuBackend::with_scaling(
        scaled,
        Cow::Borrowed(&precond),
        factors.scale_rhs(b),
        x0.map(|x| factors.scale_solution(x)),
        factors,
    )?;
    match pcg(&mut backend, params, |_| ControlFlow::Continue(())) {
        Ok(info) => Ok((backend.into_solution(), info)),
        Err(error @ (PcgError::NotConverged { .. } | PcgError::Stagnated { .. })) => {
            Err(SolveFailure {
                error,
                x: Some(backend.into_solution()),
            })
        }
        Err(error) => Err(SolveFailure { error, x: None }),
    }
}

#[cfg(test)]
mod tests {
    use super::PollPacer;

    #[test]
    fn the_first_poll_of_a_round_spans_one_interval() {
        let mut p = PollPacer::new(16, 4);
        assert_eq!(p.next_span(0, 1.0, 1e-8), 16);
    }

    #[test]
    fn far_from_the_tolerance_the_span_grows_to_its_limit() {
        let mut p = PollPacer::new(16, 4);
        p.next_span(0, 1.0, 1e-8);
        // e^-0.1 per iteration: ln(1e-8 / e^-1.6) / -0.1 = 168 iterations left, half of them
        // is 84: five intervals, capped at four.
        assert_eq!(p.next_span(16, (-1.6f64).exp(), 1e-8), 64);
    }

    #[test]
    fn near_the_tolerance_the_span_is_what_half_the_projection_allows() {
        // A fall of 0.1 in the log per iteration, then 60 iterations left: half of them is
        // one interval (30 / 16); 100 left: three (50 / 16).
        for (left, span) in [(6.0, 16), (10.0, 48)] {
            let mut p = PollPacer::new(16, 4);
            p.next_span(0, 1.0, 1e-8);
            let threshold = (-1.6f64 - left).exp();
            assert_eq!(p.next_span(16, (-1.6f64).exp(), threshold), span, "{left}");
        }
    }

    #[test]
    fn a_residual_that_did_not_fall_gives_one_interval() {
        let mut p = PollPacer::new(16, 4);
        p.next_span(0, 1e-3, 1e-8);
        assert_eq!(p.next_span(16, 2e-3, 1e-8), 16);
        let mut p = PollPacer::new(16, 4);
        p.next_span(0, 1e-3, 1e-8);
        assert_eq!(p.next_span(16, 0.0, 1e-8), 16);
    }

    #[test]
    fn without_growth_every_span_is_one_interval() {
        let mut p = PollPacer::new(16, 1);
        p.next_span(0, 1.0, 1e-8);
        assert_eq!(p.next_span(16, 1e-4, 1e-8), 16);
    }

    #[test]
    fn a_restart_forgets_the_rate() {
        let mut p = PollPacer::new(16, 4);
        p.next_span(0, 1.0, 1e-8);
        assert_eq!(p.restart(), 16);
        assert_eq!(p.next_span(16, 1e-3, 1e-8), 16);
    }
}
