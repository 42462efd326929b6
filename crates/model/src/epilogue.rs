//! The epilogue model: what adding the three dots of the iteration to the epilogue of A's SpMV
//! costs, against running them as a reduction of their own.
//!
//! The tune's epilogue stage times every row kernel that has a dot3 variant
//! ([`SpmvKernel::dot3_entry_point`]: CSR scalar, CSR vector, ELL, DIA) on two banded matrices
//! of `n` rows at every thread count, three ways ([`EpilogueVariant`]): the plain product, the
//! dot3 variant with r apart from u, and with u = r. The matrices are the tridiagonal (3
//! entries a row) at every length of the stage, and a band of 27 entries a row at the lengths
//! up to a smaller cap.
//!
//! On the tridiagonal, per kernel, thread count and variant the time is a line per test domain
//! (eq. 3-1, [`crate::linear::fit_line`], the domains of [`crate::domains`]), as for the vector
//! updates. The *excess* of the fused kernel at `n` rows is its line minus the plain product's
//! line: the dots' reads, the partial sums and the last block's finish, measured on the same
//! matrix in the same session.
//!
//! The excess also grows with the entries of a row: the fused kernels' loops keep fewer loads
//! in flight than the plain ones (on the H200 the DIA variant without a preconditioner cost 18
//! us more than the plain product on the 27-point 3D Poisson matrix of 96^3 rows, where the
//! tridiagonal's lines predicted 7, and the plan fused where keeping the reduction apart was
//! 1.13x faster per iteration). The wide band measures that: per kernel, thread count and
//! fused variant, and per test domain (a matrix that fits in L2 pays less for its loads than
//! one streamed from memory), the wide band's excess beyond the tridiagonal's lines at the same
//! `n`, over the extra entries, is a cost per entry ([`EntrySlope`], least squares through the
//! origin). The predicted excess of A is the line at its rows plus the cost of the domain
//! holding its rows (the nearest domain measured beyond the wide band's lengths) times its
//! entries beyond three a row.
//!
//! The plan fuses when that excess is below the separate reduction's predicted time (the dot3
//! decision tree's pick), see the generator's selection.
use std::collections::BTreeMap;

use autopcg_catalog::SpmvKernel;
use serde::{Deserialize, Serialize};

use crate::domains::{domains, Domain};
use crate::linear::{fit_line, median, Line};
use crate::profile::{
    EpilogueRecord, EpilogueVariant, Profile, EPILOGUE_NARROW_ENTRIES, EPILOGUE_WIDE_ENTRIES,
};
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

/// What each entry of a row beyond three adds to the excess of one fused kernel, thread count
/// and variant inside one test domain (from the wide band).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct EntrySlope {
    /// The row kernel.
    pub kernel: SpmvKernel,
    /// Threads per block.
    pub threads: u32,
    /// The fused variant.
    pub variant: EpilogueVariant,
    /// The domain of the lengths it was fitted on.
    pub domain: Domain,
    /// Milliseconds per entry beyond three a row.
    pub ms_per_entry: f64,
    /// Wide-band lengths it was fitted on.
    pub sizes: usize,
}

/// The fitted lines of the epilogue stage and their held-out evaluation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EpilogueModel {
    /// Per kernel, thread count and variant, on the tridiagonal.
    pub lines: Vec<EpilogueLines>,
    /// Per kernel, thread count, fused variant and test domain, from the wide band (empty in
    /// model files fitted before the wide band: the excess is then the lines' alone).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub per_entry: Vec<EntrySlope>,
    /// The fused kernels' residency, which caps their grid at one wave
    /// ([`SpmvKernel::dot3_launch`]); the lines were measured at that launch.
    #[serde(default)]
    pub resident: Vec<Residency>,
    /// On the held-out sizes of both matrices (filled by [`crate::ModelFile::fit`] with the
    /// reduction's predictions; default when fitted alone).
    #[serde(default)]
    pub held_out: EpilogueEval,
    /// The same on the wide band's held-out sizes alone.
    #[serde(default)]
    pub held_out_wide: EpilogueEval,
}

/// The time of a record, when it is a valid measurement.
fn record_ms(r: &EpilogueRecord) -> Option<f64> {
    let t = r.sample.timing.median_ms;
    (t.is_finite() && t > 0.0 && r.sample.timing.reps > 0).then_some(t)
}

type Group = (String, u32, EpilogueVariant);
/// Plain-product times by kernel, threads, rows and entries per row.
type PlainTimes = BTreeMap<(String, u32, u64, u32), f64>;
/// Rows and milliseconds of a group's fit records.
type Points = Vec<(u64, f64)>;

fn group(r: &EpilogueRecord) -> Group {
    (r.kernel.to_string(), r.sample.threads, r.variant)
}

/// The plain products' times among `records`.
fn plain_times<'a>(records: impl Iterator<Item = &'a EpilogueRecord>) -> PlainTimes {
    let mut plain = PlainTimes::new();
    for r in records {
        if let (EpilogueVariant::Plain, Some(t)) = (r.variant, record_ms(r)) {
            let key = (
                r.kernel.to_string(),
                r.sample.threads,
                r.sample.n,
                r.row_entries,
            );
            plain.insert(key, t);
        }
    }
    plain
}

impl EpilogueModel {
    /// Fits the lines from the profile's tridiagonal records that are not held out, and the
    /// cost per entry from its wide-band ones. `None` when the profile has no tridiagonal
    /// records (written before the stage existed).
    pub fn fit(profile: &Profile) -> Result<Option<EpilogueModel>, ModelError> {
        let fit: Vec<&EpilogueRecord> = profile
            .epilogue
            .iter()
            .filter(|r| !r.sample.held_out && r.row_entries == EPILOGUE_NARROW_ENTRIES)
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
        let mut model = EpilogueModel {
            lines,
            per_entry: Vec::new(),
            resident,
            held_out: EpilogueEval::default(),
            held_out_wide: EpilogueEval::default(),
        };
        model.per_entry = model.fit_per_entry(profile, &doms);
        Ok(Some(model))
    }

    /// The cost per entry of every fused kernel, thread count, variant and test domain that
    /// the wide band measured with its plain product at the same length (fit sizes only): the
    /// wide excess minus the tridiagonal lines' excess at that length, against the extra
    /// entries `(27 - 3) n`, by least squares through the origin.
    fn fit_per_entry(&self, profile: &Profile, doms: &[Domain]) -> Vec<EntrySlope> {
        let wide = |r: &&EpilogueRecord| {
            !r.sample.held_out && r.row_entries == EPILOGUE_WIDE_ENTRIES && record_ms(r).is_some()
        };
        let plain = plain_times(profile.epilogue.iter().filter(wide));
        let extra_per_row = f64::from(EPILOGUE_WIDE_ENTRIES - EPILOGUE_NARROW_ENTRIES);
        type Sums = (SpmvKernel, Domain, f64, f64, usize);
        let mut sums: BTreeMap<(Group, u64), Sums> = BTreeMap::new();
        for r in profile.epilogue.iter().filter(wide) {
            if r.variant == EpilogueVariant::Plain {
                continue;
            }
            let (n, t) = (r.sample.n, r.sample.threads);
            let key = (r.kernel.to_string(), t, n, EPILOGUE_WIDE_ENTRIES);
            let (Some(tf), Some(&tp)) = (record_ms(r), plain.get(&key)) else {
                continue;
            };
            // The tridiagonal lines of these very threads (no nearest-count stand-in).
            let (Some(f), Some(p)) = (
                self.lines_exact(r.kernel, t, r.variant),
                self.lines_exact(r.kernel, t, EpilogueVariant::Plain),
            ) else {
                continue;
            };
            let (Some(fl), Some(pl)) = (f.predict(n), p.predict(n)) else {
                continue;
            };
            let Some(&d) = doms.iter().find(|d| d.contains(n)) else {
                continue;
            };
            let y = (tf - tp) - (fl - pl);
            let x = extra_per_row * n as f64;
            let e = sums
                .entry((group(r), d.lo))
                .or_insert((r.kernel, d, 0.0, 0.0, 0));
            e.2 += x * y;
            e.3 += x * x;
            e.4 += 1;
        }
        sums.into_iter()
            .filter(|(_, (_, _, _, xx, _))| *xx > 0.0)
            .map(
                |(((_, threads, variant), _), (kernel, domain, xy, xx, sizes))| EntrySlope {
                    kernel,
                    threads,
                    variant,
                    domain,
                    ms_per_entry: xy / xx,
                    sizes,
                },
            )
            .collect()
    }

    fn lines_exact(
        &self,
        kernel: SpmvKernel,
        threads: u32,
        variant: EpilogueVariant,
    ) -> Option<&EpilogueLines> {
        self.lines
            .iter()
            .find(|l| l.kernel == kernel && l.threads == threads && l.variant == variant)
    }

    /// The cost per entry of `kernel`'s `variant` at exactly `threads` per block at `n` rows:
    /// the domain holding `n`, or the nearest measured one; `None` when the wide band did not
    /// measure it.
    pub fn per_entry_ms(
        &self,
        kernel: SpmvKernel,
        threads: u32,
        variant: EpilogueVariant,
        n: u64,
    ) -> Option<f64> {
        let mut of: Vec<&EntrySlope> = self
            .per_entry
            .iter()
            .filter(|s| s.kernel == kernel && s.threads == threads && s.variant == variant)
            .collect();
        of.sort_by_key(|s| s.domain.lo);
        let s = of.iter().find(|s| s.domain.contains(n)).or_else(|| {
            if n <= of.first()?.domain.lo {
                of.first()
            } else {
                of.last()
            }
        })?;
        Some(s.ms_per_entry)
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
    /// plain product of `n` rows and `nnz` entries, with r apart from u or (`aliased`) u = r:
    /// the tridiagonal lines' excess at `n` plus the cost per entry times the entries beyond
    /// three a row (none when the wide band did not measure the kernel at those threads).
    /// `None` when the stage did not measure the kernel.
    pub fn excess_ms(
        &self,
        kernel: SpmvKernel,
        threads: u32,
        aliased: bool,
        n: u64,
        nnz: u64,
    ) -> Option<f64> {
        let fused = if aliased {
            EpilogueVariant::FusedAliased
        } else {
            EpilogueVariant::Fused
        };
        let f = self.lines_of(kernel, threads, fused)?;
        let p = self.lines_of(kernel, f.threads, EpilogueVariant::Plain)?;
        let rows = f.predict(n)? - p.predict(n)?;
        let extra = nnz as f64 - f64::from(EPILOGUE_NARROW_ENTRIES) * n as f64;
        let per_entry = self
            .per_entry_ms(kernel, f.threads, fused, n)
            .unwrap_or(0.0);
        Some(rows + per_entry * extra)
    }

    /// Evaluates the model on the held-out records of `profile` (of the matrix with
    /// `entries` a row, or of both): the fused time predicted as the measured plain time plus
    /// the predicted excess, and the decision against `reduction_ms(n)` (the separate
    /// reduction's predicted time, `None` where unknown).
    pub fn evaluate(
        &self,
        profile: &Profile,
        entries: Option<u32>,
        reduction_ms: impl Fn(u64) -> Option<f64>,
    ) -> EpilogueEval {
        let held =
            |r: &&EpilogueRecord| r.sample.held_out && entries.is_none_or(|e| e == r.row_entries);
        let plain = plain_times(profile.epilogue.iter().filter(held));
        let mut errs = Vec::new();
        let (mut decisions, mut agreeing) = (0, 0);
        for r in profile.epilogue.iter().filter(held) {
            if r.variant == EpilogueVariant::Plain {
                continue;
            }
            let (n, e) = (r.sample.n, r.row_entries);
            let (Some(tf), Some(&tp)) = (
                record_ms(r),
                plain.get(&(r.kernel.to_string(), r.sample.threads, n, e)),
            ) else {
                continue;
            };
            let aliased = r.variant == EpilogueVariant::FusedAliased;
            let nnz = u64::from(e) * n;
            let Some(ex) = self.excess_ms(r.kernel, r.sample.threads, aliased, n, nnz) else {
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

    /// Checks that every line and cost per entry is finite.
    pub fn validate(&self) -> Result<(), String> {
        if let Some(s) = self.per_entry.iter().find(|s| !s.ms_per_entry.is_finite()) {
            return Err(format!(
                "the epilogue cost per entry of {} t{} {} is not finite",
                s.kernel,
                s.threads,
                s.variant.name()
            ));
        }
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
            row_entries: EPILOGUE_NARROW_ENTRIES,
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
        let ex = m
            .excess_ms(SpmvKernel::Dia, 256, false, 50_000, 3 * 50_000)
            .unwrap();
        assert!((ex - (3e-3 + 0.2e-6 * 50.0)).abs() < 1e-9, "{ex}");
        let ex = m
            .excess_ms(SpmvKernel::Dia, 256, true, 350_000, 3 * 350_000)
            .unwrap();
        assert!((ex - (2e-3 + 0.1e-6 * 350.0)).abs() < 1e-9, "{ex}");
        // Another thread count takes the nearest measured; another kernel has no answer.
        assert_eq!(
            m.excess_ms(SpmvKernel::Dia, 128, true, 350_000, 3 * 350_000),
            m.excess_ms(SpmvKernel::Dia, 256, true, 350_000, 3 * 350_000)
        );
        assert_eq!(
            m.excess_ms(SpmvKernel::Ell, 256, true, 350_000, 3 * 350_000),
            None
        );
        // Beyond the measured range: the last domain's line.
        let ex = m
            .excess_ms(SpmvKernel::Dia, 256, false, 4_000_000, 3 * 4_000_000)
            .unwrap();
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
        let e = m.evaluate(&p, None, |_| Some(0.01));
        assert_eq!(e.points, 4);
        assert!(e.max_rel_err < 1e-9, "{e:?}");
        assert_eq!((e.decisions, e.decisions_agreeing), (4, 4));
        // Without a reduction time no decision is counted.
        let e = m.evaluate(&p, None, |_| None);
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

    /// The wide band's fused records cost `extra(n)` ms more per entry beyond three a row than
    /// the tridiagonal lines say (DIA at 256 threads, both fused variants).
    fn with_wide_band(mut p: Profile, extra: impl Fn(u64) -> f64) -> Profile {
        let lines = [
            (EpilogueVariant::Plain, 2e-3, 1e-6),
            (EpilogueVariant::Fused, 5e-3, 1.2e-6),
            (EpilogueVariant::FusedAliased, 4e-3, 1.1e-6),
        ];
        for (n, held) in [
            (30_000, false),
            (90_000, false),
            (250_000, false),
            (60_000, true),
        ] {
            for (v, b, a) in lines {
                let plain_wide = 9.0 * (2e-3 + 1e-6 * n as f64 * 1e-3);
                let t = plain_wide
                    + if v == EpilogueVariant::Plain {
                        0.0
                    } else {
                        (b - 2e-3) + (a - 1e-6) * n as f64 * 1e-3 + extra(n) * 24.0 * n as f64
                    };
                let mut r = rec(SpmvKernel::Dia, 256, v, n, t, held);
                r.row_entries = EPILOGUE_WIDE_ENTRIES;
                p.epilogue.push(r);
            }
        }
        p
    }

    #[test]
    fn the_wide_band_prices_the_entries_of_a_row() {
        // Twice the cost per entry in the second domain (above 102 400 rows).
        let per_entry = 2e-7;
        let extra = |n: u64| {
            if n <= 102_400 {
                per_entry
            } else {
                2.0 * per_entry
            }
        };
        let p = with_wide_band(profile(), extra);
        let m = EpilogueModel::fit(&p).unwrap().unwrap();
        // The lines are the tridiagonal's alone; the slopes are the wide band's extra, per
        // variant and domain.
        assert_eq!(
            m.lines,
            EpilogueModel::fit(&profile()).unwrap().unwrap().lines
        );
        assert_eq!(m.per_entry.len(), 4, "{:?}", m.per_entry);
        for v in [EpilogueVariant::Fused, EpilogueVariant::FusedAliased] {
            for (n, want) in [
                (50_000, per_entry),
                (300_000, 2.0 * per_entry),
                // Outside the measured lengths: the nearest domain's.
                (500, per_entry),
                (4_000_000, 2.0 * per_entry),
            ] {
                let s = m.per_entry_ms(SpmvKernel::Dia, 256, v, n).unwrap();
                assert!((s - want).abs() < 1e-12, "{v:?} at {n}: {s}");
            }
        }
        let sizes: usize = m.per_entry.iter().map(|s| s.sizes).sum();
        assert_eq!(sizes, 6);
        // Three entries a row: the lines' excess; 27 a row: 24 n entries more at the slope.
        let n = 100_000u64;
        let narrow = m.excess_ms(SpmvKernel::Dia, 256, true, n, 3 * n).unwrap();
        let wide = m.excess_ms(SpmvKernel::Dia, 256, true, n, 27 * n).unwrap();
        assert!((narrow - (2e-3 + 0.1e-6 * 100.0)).abs() < 1e-9, "{narrow}");
        assert!(
            (wide - narrow - per_entry * 24.0 * n as f64).abs() < 1e-9,
            "{wide}"
        );
        // A thread count the wide band did not measure takes the nearest lines and their
        // slope (the lines chosen are those of 256 threads).
        assert_eq!(
            m.excess_ms(SpmvKernel::Dia, 128, true, n, 27 * n),
            Some(wide)
        );
        m.validate().unwrap();
        // The held-out wide point is predicted exactly, and counted apart.
        let all = m.evaluate(&p, None, |_| Some(0.01));
        let w = m.evaluate(&p, Some(EPILOGUE_WIDE_ENTRIES), |_| Some(0.01));
        assert_eq!((all.points, w.points), (6, 2));
        assert!(all.max_rel_err < 1e-9, "{all:?}");
        // At 60 000 rows the wide excess (about 0.3 ms) is above a 10 us reduction: the model
        // says apart, and so does the measurement.
        assert_eq!((w.decisions, w.decisions_agreeing), (2, 2));
        // Without the slope the same points were judged fused, wrongly.
        let mut flat = m.clone();
        flat.per_entry.clear();
        let w = flat.evaluate(&p, Some(EPILOGUE_WIDE_ENTRIES), |_| Some(0.01));
        assert_eq!((w.decisions, w.decisions_agreeing), (2, 0));
    }

    #[test]
    fn records_of_the_tridiagonal_keep_their_key_and_form_on_disk() {
        use crate::profile::Record;
        let r = rec(
            SpmvKernel::Dia,
            256,
            EpilogueVariant::Plain,
            5000,
            0.01,
            false,
        );
        let text = serde_json::to_string(&r).unwrap();
        assert!(!text.contains("row_entries"), "{text}");
        let back: EpilogueRecord = serde_json::from_str(&text).unwrap();
        assert_eq!(back.row_entries, EPILOGUE_NARROW_ENTRIES);
        let key = Record::Epilogue(r.clone()).key().unwrap();
        assert_eq!(key, "epilogue/spmv_dia/plain/5000/256/1");
        let mut w = r;
        w.row_entries = EPILOGUE_WIDE_ENTRIES;
        assert_eq!(
            Record::Epilogue(w).key().unwrap(),
            "epilogue/spmv_dia/plain/5000/256/1/e27"
        );
    }
}
