//! The epilogue model: what adding the three dots of the iteration to the epilogue of A's SpMV
//! costs, against running them as a reduction of their own.
//!
//! The tune's epilogue stage times every row kernel that has a dot3 variant
//! ([`SpmvKernel::dot3_entry_point`]: CSR scalar, CSR vector, ELL, DIA) on a tridiagonal matrix
//! of `n` rows at every thread count, three ways ([`EpilogueVariant`]): the plain product, the
//! dot3 variant with r apart from u, and with u = r. Per kernel, thread count and variant the
//! time is a line per test domain (eq. 3-1, [`crate::linear::fit_line`], the domains of
//! [`crate::domains`]), as for the vector updates. The *excess* of the fused kernel at `n` is
//! its line minus the plain product's line: the dots' reads, the partial sums and the last
//! block's finish, measured on the same matrix in the same session. The plan fuses when that
//! excess is below the separate reduction's predicted time (the dot3 decision tree's pick),
//! see the generator's selection.
//!
//! The model assumes the excess depends on the rows and not on the matrix's entries (the
//! plain part is the same product), so that one matrix shape serves for every A; the SpMV model
//! predicts the product itself. The assumption does not always hold: on the 27-point 3D
//! Poisson matrix of 96^3 rows (27 diagonals, DIA) the fused iteration without a preconditioner
//! cost about 21 us more than the plain product on the H200 where these lines predicted 7
//! (`tools/fused_ab.py`), and the plan fused where keeping the reduction apart was 1.13x faster.
//! Measuring the fused variants on the SpMV stage's matrices would let the matrix's features
//! into the prediction.
use std::collections::BTreeMap;

use autopcg_catalog::SpmvKernel;
use serde::{Deserialize, Serialize};

use crate::domains::{domains, Domain};
use crate::linear::{fit_line, median, Line};
use crate::profile::{EpilogueRecord, EpilogueVariant, Profile};
use crate::ModelError;

/// A line of one kernel, thread count and variant inside one test domain.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct DomainLine {
    /// The domain.
    pub domain: Domain,
    /// Milliseconds against rows.
    pub line: Line,
}

/// The lines of one kernel, thread count and variant, by domain in increasing order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EpilogueLines {
    /// The row kernel.
    pub kernel: SpmvKernel,
    /// Threads per block.
    pub threads: u32,
    /// Plain or fused.
    pub variant: EpilogueVariant,
    /// A line per domain that had two sizes at least.
    pub domains: Vec<DomainLine>,
}

impl EpilogueLines {
    /// Predicted milliseconds at `n` rows: the line of the domain holding `n`, or of the
    /// nearest domain outside the measured range.
    pub fn predict(&self, n: u64) -> Option<f64> {
        let d = self
            .domains
            .iter()
            .find(|d| d.domain.contains(n))
            .or_else(|| {
                if n <= self.domains.first()?.domain.lo {
                    self.domains.first()
                } else {
                    self.domains.last()
                }
            })?;
        Some(d.line.eval(n as f64))
    }
}

/// How the model does on the held-out sizes of the stage.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct EpilogueEval {
    /// Held-out (kernel, threads, fused variant, n) with both times measured.
    pub points: usize,
    /// Median relative error of the predicted excess added to the measured plain time, against
    /// the measured fused time.
    pub median_rel_err: f64,
    /// Largest such error.
    pub max_rel_err: f64,
    /// Held-out points where the reduction's time was known, so that a decision could be made.
    pub decisions: usize,
    /// Of those, the points where fusing or not by the predicted excess is what the measured
    /// excess says.
    pub decisions_agreeing: usize,
}

/// Blocks per SM a fused kernel keeps resident at a thread count, as the stage recorded it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Residency {
    /// The row kernel (its dot3 variant).
    pub kernel: SpmvKernel,
    /// Threads per block.
    pub threads: u32,
    /// Resident blocks per SM (eq. 3-2 on the compiled kernel's registers).
    pub blocks_per_sm: u32,
}

/// The fitted lines of the epilogue stage and their held-out evaluation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EpilogueModel {
    /// Per kernel, thread count and variant.
    pub lines: Vec<EpilogueLines>,
    /// The fused kernels' residency, which caps their grid at one wave
    /// ([`SpmvKernel::dot3_launch`]); the lines were measured at that launch.
    #[serde(default)]
    pub resident: Vec<Residency>,
    /// On the held-out sizes (filled by [`crate::ModelFile::fit`] with the reduction's
    /// predictions; default when fitted alone).
    #[serde(default)]
    pub held_out: EpilogueEval,
}

/// The time of a record, when it is a valid measurement.
fn record_ms(r: &EpilogueRecord) -> Option<f64> {
    let t = r.sample.timing.median_ms;
    (t.is_finite() && t > 0.0 && r.sample.timing.reps > 0).then_some(t)
}

type Group = (String, u32, EpilogueVariant);
/// Rows and milliseconds of a group's fit records.
type Points = Vec<(u64, f64)>;

fn group(r: &EpilogueRecord) -> Group {
    (r.kernel.to_string(), r.sample.threads, r.variant)
}

impl EpilogueModel {
    /// Fits the lines from the profile's epilogue records that are not held out. `None` when
    /// the profile has none (written before the stage existed).
    pub fn fit(profile: &Profile) -> Result<Option<EpilogueModel>, ModelError> {
        let fit: Vec<&EpilogueRecord> = profile
            .epilogue
            .iter()
            .filter(|r| !r.sample.held_out)
            .collect();
        if fit.is_empty() {
            return Ok(None);
        }
        let max_n = fit.iter().map(|r| r.sample.n).max().unwrap_or(0);
        let doms = domains(max_n);
        let mut groups: BTreeMap<Group, (SpmvKernel, Points)> = BTreeMap::new();
        for r in &fit {
            if let Some(t) = record_ms(r) {
                groups
                    .entry(group(r))
                    .or_insert_with(|| (r.kernel, Vec::new()))
                    .1
                    .push((r.sample.n, t));
            }
        }
        let mut lines = Vec::new();
        for ((_, threads, variant), (kernel, pts)) in groups {
            let mut out = Vec::new();
            for d in &doms {
                let inside: Vec<(f64, f64)> = pts
                    .iter()
                    .filter(|p| d.contains(p.0))
                    .map(|&(n, t)| (n as f64, t))
                    .collect();
                let mut sizes: Vec<u64> =
                    pts.iter().map(|p| p.0).filter(|&n| d.contains(n)).collect();
                sizes.sort_unstable();
                sizes.dedup();
                if sizes.len() < 2 {
                    continue;
                }
                let f = fit_line(&inside).map_err(|e| ModelError::Fit {
                    what: format!("epilogue line of {kernel} t{threads} {}", variant.name()),
                    reason: e.to_string(),
                })?;
                out.push(DomainLine {
                    domain: *d,
                    line: f.line,
                });
            }
            if !out.is_empty() {
                lines.push(EpilogueLines {
                    kernel,
                    threads,
                    variant,
                    domains: out,
                });
            }
        }
        if lines.is_empty() {
            return Ok(None);
        }
        let mut resident: Vec<Residency> = fit
            .iter()
            .filter_map(|r| {
                Some(Residency {
                    kernel: r.kernel,
                    threads: r.sample.threads,
                    blocks_per_sm: r.blocks_per_sm?,
                })
            })
            .collect();
        resident.sort_by_key(|r| (r.kernel.to_string(), r.threads));
        resident.dedup_by_key(|r| (r.kernel, r.threads));
        Ok(Some(EpilogueModel {
            lines,
            resident,
            held_out: EpilogueEval::default(),
        }))
    }

    /// The lines of `kernel` and `variant` at `threads` per block, or at the measured thread
    /// count nearest to it (in ratio) when `threads` was not measured.
    pub fn lines_of(
        &self,
        kernel: SpmvKernel,
        threads: u32,
        variant: EpilogueVariant,
    ) -> Option<&EpilogueLines> {
        let ratio = |t: u32| (f64::from(t.max(1)) / f64::from(threads.max(1))).ln().abs();
        self.lines
            .iter()
            .filter(|l| l.kernel == kernel && l.variant == variant)
            .min_by(|a, b| {
                ratio(a.threads)
                    .total_cmp(&ratio(b.threads))
                    .then(a.threads.cmp(&b.threads))
            })
    }

    /// Blocks per SM the dot3 variant of `kernel` keeps resident at `threads` per block, when
    /// the stage recorded it.
    pub fn resident_blocks(&self, kernel: SpmvKernel, threads: u32) -> Option<u32> {
        self.resident
            .iter()
            .find(|r| r.kernel == kernel && r.threads == threads)
            .map(|r| r.blocks_per_sm)
    }

    /// Predicted milliseconds the dot3 variant of `kernel` at `threads` per block adds to the
    /// plain product of `n` rows, with r apart from u or (`aliased`) u = r. `None` when the
    /// stage did not measure the kernel.
    pub fn excess_ms(
        &self,
        kernel: SpmvKernel,
        threads: u32,
        aliased: bool,
        n: u64,
    ) -> Option<f64> {
        let fused = if aliased {
            EpilogueVariant::FusedAliased
        } else {
            EpilogueVariant::Fused
        };
        let f = self.lines_of(kernel, threads, fused)?;
        let p = self.lines_of(kernel, f.threads, EpilogueVariant::Plain)?;
        Some(f.predict(n)? - p.predict(n)?)
    }

    /// Evaluates the model on the held-out records of `profile`: the fused time predicted as
    /// the measured plain time plus the predicted excess, and the decision against
    /// `reduction_ms(n)` (the separate reduction's predicted time, `None` where unknown).
    pub fn evaluate(
        &self,
        profile: &Profile,
        reduction_ms: impl Fn(u64) -> Option<f64>,
    ) -> EpilogueEval {
        let mut plain: BTreeMap<(String, u32, u64), f64> = BTreeMap::new();
        for r in profile.epilogue.iter().filter(|r| r.sample.held_out) {
            if let (EpilogueVariant::Plain, Some(t)) = (r.variant, record_ms(r)) {
                plain.insert((r.kernel.to_string(), r.sample.threads, r.sample.n), t);
            }
        }
        let mut errs = Vec::new();
        let (mut decisions, mut agreeing) = (0, 0);
        for r in profile.epilogue.iter().filter(|r| r.sample.held_out) {
            if r.variant == EpilogueVariant::Plain {
                continue;
            }
            let (Some(tf), Some(&tp)) = (
                record_ms(r),
                plain.get(&(r.kernel.to_string(), r.sample.threads, r.sample.n)),
            ) else {
                continue;
            };
            let aliased = r.variant == EpilogueVariant::FusedAliased;
            let Some(ex) = self.excess_ms(r.kernel, r.sample.threads, aliased, r.sample.n) else {
                continue;
            };
            errs.push((tp + ex - tf).abs() / tf);
            if let Some(red) = reduction_ms(r.sample.n) {
                decisions += 1;
                if (ex < red) == (tf - tp < red) {
                    agreeing += 1;
                }
            }
        }
        let max = errs.iter().copied().fold(0.0, f64::max);
        EpilogueEval {
            points: errs.len(),
            median_rel_err: median(&mut errs),
            max_rel_err: max,
            decisions,
            decisions_agreeing: agreeing,
        }
    }

    /// Checks that every line is finite.
    pub fn validate(&self) -> Result<(), String> {
        for l in &self.lines {
            if let Some(d) = l.domains.iter().find(|d| !d.line.is_finite()) {
                return Err(format!(
                    "the epilogue line of {} t{} {} on ({}, {}] is not finite",
                    l.kernel,
                    l.threads,
                    l.variant.name(),
                    d.domain.lo,
                    d.domain.hi
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{LaunchSample, Timing};

    fn rec(
        kernel: SpmvKernel,
        threads: u32,
        variant: EpilogueVariant,
        n: u64,
        ms: f64,
        held_out: bool,
    ) -> EpilogueRecord {
        EpilogueRecord {
            kernel,
            variant,
            blocks_per_sm: (variant != EpilogueVariant::Plain).then_some(6),
            sample: LaunchSample {
                n,
                threads,
                blocks: 1,
                nb_multiple: None,
                elems_per_thread: None,
                held_out,
                timing: Timing {
                    median_ms: ms,
                    min_ms: ms,
                    max_ms: ms,
                    reps: 5,
                },
            },
        }
    }

    /// Plain `2 us + 1 ns/row`, fused `5 us + 1.2 ns/row` (aliased `4 us + 1.1 ns/row`), DIA at
    /// 256 threads, fit sizes in two domains and held-out ones.
    fn profile() -> Profile {
        let mut p = Profile::default();
        let lines = [
            (EpilogueVariant::Plain, 2e-3, 1e-6),
            (EpilogueVariant::Fused, 5e-3, 1.2e-6),
            (EpilogueVariant::FusedAliased, 4e-3, 1.1e-6),
        ];
        for (n, held) in [
            (20_000, false),
            (60_000, false),
            (100_000, false),
            (40_000, true),
            (200_000, false),
            (400_000, false),
            (300_000, true),
        ] {
            for (v, b, a) in lines {
                let t = b + a * n as f64 * 1e-3;
                p.epilogue.push(rec(SpmvKernel::Dia, 256, v, n, t, held));
            }
        }
        p
    }

    #[test]
    fn the_excess_is_the_fused_line_minus_the_plain_line() {
        let m = EpilogueModel::fit(&profile()).unwrap().unwrap();
        assert_eq!(m.lines.len(), 3);
        assert!(m.lines.iter().all(|l| l.domains.len() == 2), "{m:?}");
        let ex = m.excess_ms(SpmvKernel::Dia, 256, false, 50_000).unwrap();
        assert!((ex - (3e-3 + 0.2e-6 * 50.0)).abs() < 1e-9, "{ex}");
        let ex = m.excess_ms(SpmvKernel::Dia, 256, true, 350_000).unwrap();
        assert!((ex - (2e-3 + 0.1e-6 * 350.0)).abs() < 1e-9, "{ex}");
        // Another thread count takes the nearest measured; another kernel has no answer.
        assert_eq!(
            m.excess_ms(SpmvKernel::Dia, 128, true, 350_000),
            m.excess_ms(SpmvKernel::Dia, 256, true, 350_000)
        );
        assert_eq!(m.excess_ms(SpmvKernel::Ell, 256, true, 350_000), None);
        // Beyond the measured range: the last domain's line.
        let ex = m.excess_ms(SpmvKernel::Dia, 256, false, 4_000_000).unwrap();
        assert!((ex - (3e-3 + 0.2e-6 * 4000.0)).abs() < 1e-9, "{ex}");
        m.validate().unwrap();
        // The fused records' residency, once per kernel and thread count.
        assert_eq!(m.resident.len(), 1);
        assert_eq!(m.resident_blocks(SpmvKernel::Dia, 256), Some(6));
        assert_eq!(m.resident_blocks(SpmvKernel::Dia, 128), None);
    }

    #[test]
    fn the_held_out_evaluation_judges_the_decision() {
        let p = profile();
        let m = EpilogueModel::fit(&p).unwrap().unwrap();
        // The reduction at 10 us: the excess (3-8 us) is below it everywhere, and measured so.
        let e = m.evaluate(&p, |_| Some(0.01));
        assert_eq!(e.points, 4);
        assert!(e.max_rel_err < 1e-9, "{e:?}");
        assert_eq!((e.decisions, e.decisions_agreeing), (4, 4));
        // Without a reduction time no decision is counted.
        let e = m.evaluate(&p, |_| None);
        assert_eq!((e.points, e.decisions), (4, 0));
    }

    #[test]
    fn a_profile_without_the_stage_has_no_model() {
        assert_eq!(EpilogueModel::fit(&Profile::default()).unwrap(), None);
        // A held-out size alone is not a fit.
        let mut p = Profile::default();
        p.epilogue.push(rec(
            SpmvKernel::Dia,
            256,
            EpilogueVariant::Plain,
            5000,
            0.01,
            true,
        ));
        assert_eq!(EpilogueModel::fit(&p).unwrap(), None);
    }
}
