//! The link between two GPUs of a host, measured for the multi-GPU time model.
//!
//! Two measurements, both on the stream of the GPU that receives (`to`), as the solver's
//! receiving GPU pulls its halos and the other GPU's dots:
//!
//! - peer copies of several sizes ([`LinkOptions::sizes`]), each timed with CUDA events by
//!   [`time_kernel`] (an untimed warm-up, then repetitions, the median); [`fit_link`] fits
//!   `time = latency + bytes / bandwidth` through the medians;
//! - the dot all-gather of one iteration with one block per GPU, made as the solver makes it:
//!   each GPU waits until the other has read its slot of the last round, marks its own slot
//!   written, waits for the other's mark and copies the other's three doubles into its own
//!   slot array. The solver writes the slot and sums the slots with kernels, whose time its
//!   model counts as compute, so the round here holds the waits and copies alone. Rounds are
//!   timed in batches of back-to-back rounds ([`time_kernel_batched`]), each round ending when
//!   both copies have: a round cannot start before the last one ended, so a batch's mean is
//!   the time of one round trip as an iteration sees it. The median over the batches is the
//!   all-reduce latency.
//!
//! Everything the device does not decide (the fit, the options, which GPU to pair with, the
//! summary line) is a plain function tested without a GPU.
use autopcg_gpu::{time_kernel, time_kernel_batched, GpuDevice, GpuError};
use autopcg_model::MeasuredLink;

use crate::ProfilerError;

/// The sizes of the timed peer copies by default, bytes: one double, a small halo, a large
/// halo, and a size where the bandwidth dominates.
pub const LINK_SIZES: [u64; 4] = [8, 64 << 10, 1 << 20, 16 << 20];

/// What [`measure_link`] times.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkOptions {
    /// Sizes of the peer copies, bytes (multiples of 8, at least two different ones).
    pub sizes: Vec<u64>,
    /// Least timed copies per size.
    pub copy_reps: usize,
    /// Least milliseconds of timed copies per size.
    pub copy_min_ms: f64,
    /// All-gather rounds per timed batch.
    pub rounds_per_batch: usize,
    /// Least timed batches of rounds.
    pub batches: usize,
}

impl Default for LinkOptions {
    fn default() -> LinkOptions {
        LinkOptions {
            sizes: LINK_SIZES.to_vec(),
            copy_reps: 20,
            copy_min_ms: 2.0,
            rounds_per_batch: 10,
            batches: 50,
        }
    }
}

impl LinkOptions {
    /// Checks the options before anything is allocated.
    pub fn check(&self) -> Result<(), ProfilerError> {
        let bad = |why: String| Err(ProfilerError::InvalidOption(format!("link: {why}")));
        if let Some(s) = self.sizes.iter().find(|&&s| s == 0 || s % 8 != 0) {
            return bad(format!("copy size {s} B is not a positive multiple of 8"));
        }
        if usize::try_from(self.sizes.iter().max().copied().unwrap_or(0) / 8).is_err() {
            return bad("a copy size exceeds this machine's address space".into());
        }
        let mut distinct = self.sizes.clone();
        distinct.sort_unstable();
        distinct.dedup();
        if distinct.len() < 2 {
            return bad(format!(
                "{} distinct copy sizes; a latency and a bandwidth need two",
                distinct.len()
            ));
        }
        if self.copy_reps == 0 || self.rounds_per_batch == 0 || self.batches == 0 {
            return bad("repetitions, rounds per batch and batches must be positive".into());
        }
        Ok(())
    }
}

/// A line `time = latency + bytes / bandwidth` through copy timings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkFit {
    /// GB/s (the inverse of the microseconds per byte, times 1e-3).
    pub bandwidth_gbs: f64,
    /// Microseconds at zero bytes (never negative).
    pub message_latency_us: f64,
}

/// Fits `t = a + b x` (x the bytes, t microseconds) by least squares on relative residuals
/// (weights `1 / t^2`, so that the smallest copies, which fix the latency, count as much as
/// the largest, which fix the bandwidth). A negative intercept is replaced by the best line
/// through the origin. Errors: lengths that differ, a time that is not finite and positive,
/// fewer than two distinct sizes, or times that do not grow with the size (the largest size
/// not slower than the smallest, or a fitted slope that is not positive): no bandwidth can be
/// read from such a series.
pub fn fit_link(sizes: &[u64], times_us: &[f64]) -> Result<LinkFit, ProfilerError> {
    let fail = |why: String| Err(ProfilerError::Measurement(format!("link fit: {why}")));
    if sizes.len() != times_us.len() {
        return fail(format!(
            "{} sizes and {} times",
            sizes.len(),
            times_us.len()
        ));
    }
    if let Some(t) = times_us.iter().find(|t| !t.is_finite() || **t <= 0.0) {
        return fail(format!("a copy time of {t} us"));
    }
    let (Some(lo), Some(hi)) = (sizes.iter().min(), sizes.iter().max()) else {
        return fail("no timing".into());
    };
    if lo == hi {
        return fail(format!(
            "every copy has {lo} B; a latency and a bandwidth need two sizes"
        ));
    }
    // The slowest time at the smallest size and the fastest at the largest (sizes may repeat).
    let at = |s: u64, pick: fn(f64, f64) -> f64, init: f64| {
        sizes
            .iter()
            .zip(times_us)
            .filter(|(x, _)| **x == s)
            .fold(init, |m, (_, t)| pick(m, *t))
    };
    let (t_lo, t_hi) = (at(*lo, f64::max, 0.0), at(*hi, f64::min, f64::INFINITY));
    let not_growing = || {
        fail(format!(
            "the copy times do not grow with the size ({lo} B: {t_lo:.3} us, {hi} B: \
             {t_hi:.3} us); no bandwidth can be fitted"
        ))
    };
    if t_hi <= t_lo {
        return not_growing();
    }
    let (mut s, mut sx, mut sxx, mut st, mut sxt) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for (&x, &t) in sizes.iter().zip(times_us) {
        let (x, w) = (x as f64, 1.0 / (t * t));
        s += w;
        sx += w * x;
        sxx += w * x * x;
        st += w * t;
        sxt += w * x * t;
    }
    let det = s * sxx - sx * sx;
    if det.partial_cmp(&(1e-12 * s * sxx)) != Some(std::cmp::Ordering::Greater) {
        return fail("the sizes do not determine a line".into());
    }
    let mut b = (s * sxt - sx * st) / det;
    let mut a = (st - b * sx) / s;
    if a < 0.0 {
        a = 0.0;
        b = sxt / sxx;
    }
    if !(b > 0.0 && b.is_finite()) {
        return not_growing();
    }
    Ok(LinkFit {
        bandwidth_gbs: 1e-3 / b,
        message_latency_us: a,
    })
}

/// The GPU the tuned one (`ordinal`) is measured against when the driver reports `count`
/// GPUs: the lowest other ordinal; `None` with fewer than two GPUs.
pub fn peer_ordinal(ordinal: usize, count: usize) -> Option<usize> {
    (0..count).find(|&o| o != ordinal).filter(|_| count >= 2)
}

/// One line on a measured link, for `tune`'s output.
pub fn link_summary(l: &MeasuredLink) -> String {
    format!(
        "link GPU {} <- GPU {} ({} GPUs, peer access {}): {:.1} GB/s, {:.1} us per message, \
         {:.1} us per all-reduce",
        l.between[0],
        l.between[1],
        l.gpus,
        if l.peer_access { "on" } else { "off" },
        l.bandwidth_gbs,
        l.message_latency_us,
        l.allreduce_latency_us
    )
}

/// Measures the link from `from` to `to` (two handles of different GPUs; two handles of one
/// GPU measure device-to-device copies instead) as the module documentation describes, on a
/// host whose driver reports `gpus` GPUs.
pub fn measure_link(
    to: &GpuDevice,
    from: &GpuDevice,
    gpus: usize,
    opts: &LinkOptions,
) -> Result<MeasuredLink, ProfilerError> {
    opts.check()?;
    // Both directions: the all-gather copies each way. A refusal is not an error (the driver
    // stages the copies); the result says which was measured.
    let there = to.enable_peer_access(from)?;
    let back = from.enable_peer_access(to)?;
    let peer_access = there && back;
    let max_len = opts.sizes.iter().max().map_or(0, |&s| (s / 8) as usize);
    let mut times_us = Vec::with_capacity(opts.sizes.len());
    {
        let src = from.alloc_zeros::<f64>(max_len)?;
        let mut dst = to.alloc_zeros::<f64>(max_len)?;
        from.synchronize()?;
        for &bytes in &opts.sizes {
            let len = (bytes / 8) as usize;
            let s = time_kernel(
                to,
                || to.copy_range_from(from, &src, 0..len, &mut dst, 0),
                opts.copy_reps,
                opts.copy_min_ms,
            )?;
            times_us.push(s.median_ms * 1e3);
        }
        to.synchronize()?;
    }
    let fit = fit_link(&opts.sizes, &times_us)?;
    let allreduce_latency_us = time_allgather(to, from, opts)?;
    let link = MeasuredLink {
        gpus,
        between: [to.ordinal(), from.ordinal()],
        peer_access,
        bandwidth_gbs: fit.bandwidth_gbs,
        message_latency_us: fit.message_latency_us,
        allreduce_latency_us,
        sizes: opts.sizes.clone(),
        times_us,
    };
    link.validate().map_err(ProfilerError::Measurement)?;
    Ok(link)
}

/// Median microseconds of one all-gather round between `a` and `b` (module documentation):
/// one block per GPU, block 0 on `a` with its slot at 0..3, block 1 on `b` at 3..6.
fn time_allgather(a: &GpuDevice, b: &GpuDevice, opts: &LinkOptions) -> Result<f64, GpuError> {
    let mut slots_a = a.upload(&[1.0f64; 6])?;
    let mut slots_b = b.upload(&[2.0f64; 6])?;
    let (dotted_a, gathered_a) = (a.new_event()?, a.new_event()?);
    let (dotted_b, gathered_b) = (b.new_event()?, b.new_event()?);
    b.synchronize()?;
    let round = || -> Result<(), GpuError> {
        // Each GPU's slot may be written once the other has copied it (the solver's dot3_slot
        // kernel would run here), then it is marked written.
        a.wait_for(&gathered_b)?;
        a.record(&dotted_a)?;
        b.wait_for(&gathered_a)?;
        b.record(&dotted_b)?;
        // Each GPU copies the other's slot once it is written, and marks the copy done.
        a.wait_for(&dotted_b)?;
        a.copy_range_from(b, &slots_b, 3..6, &mut slots_a, 3)?;
        a.record(&gathered_a)?;
        b.wait_for(&dotted_a)?;
        b.copy_range_from(a, &slots_a, 0..3, &mut slots_b, 0)?;
        b.record(&gathered_b)?;
        // The round ends on `a`'s stream when both copies have.
        a.wait_for(&gathered_b)
    };
    let s = time_kernel_batched(a, round, opts.rounds_per_batch, opts.batches, 0.0)?;
    b.synchronize()?;
    Ok(s.median_ms * 1e3)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Copy times of a link with `lat` us per message and `gbs` GB/s, each scaled by the
    /// matching factor of `noise`.
    fn times(sizes: &[u64], lat: f64, gbs: f64, noise: &[f64]) -> Vec<f64> {
        sizes
            .iter()
            .zip(noise.iter().cycle())
            .map(|(&x, f)| (lat + x as f64 / (gbs * 1e3)) * f)
            .collect()
    }

    #[test]
    fn an_exact_series_gives_back_its_latency_and_bandwidth() {
        let t = times(&LINK_SIZES, 5.0, 300.0, &[1.0]);
        let f = fit_link(&LINK_SIZES, &t).unwrap();
        assert!((f.bandwidth_gbs - 300.0).abs() < 1e-6, "{f:?}");
        assert!((f.message_latency_us - 5.0).abs() < 1e-6, "{f:?}");
        // The line reads as LinkProps does: 16 MiB at 300 GB/s plus one message.
        let p = autopcg_catalog::LinkProps::measured(f.bandwidth_gbs, f.message_latency_us, 1.0);
        assert!((p.transfer_us(LINK_SIZES[3] as f64, 1) - t[3]).abs() < 1e-6);
    }

    #[test]
    fn noisy_and_repeated_sizes_fit_within_a_few_percent() {
        let sizes: Vec<u64> = LINK_SIZES.iter().chain(&LINK_SIZES).copied().collect();
        let t = times(&sizes, 12.0, 40.0, &[1.02, 0.98, 1.01, 0.99, 0.97, 1.03]);
        let f = fit_link(&sizes, &t).unwrap();
        assert!((f.bandwidth_gbs / 40.0 - 1.0).abs() < 0.05, "{f:?}");
        assert!((f.message_latency_us / 12.0 - 1.0).abs() < 0.05, "{f:?}");
    }

    #[test]
    fn a_negative_intercept_becomes_a_line_through_the_origin() {
        // Small copies faster than the bandwidth line allows: no latency, the slope kept.
        let sizes = [1u64 << 20, 2 << 20, 4 << 20];
        let t = [3.0, 7.0, 15.0];
        let f = fit_link(&sizes, &t).unwrap();
        assert_eq!(f.message_latency_us, 0.0);
        assert!(f.bandwidth_gbs > 250.0 && f.bandwidth_gbs < 350.0, "{f:?}");
    }

    #[test]
    fn series_without_a_growing_time_are_clear_errors() {
        let msg = |s: &[u64], t: &[f64]| fit_link(s, t).unwrap_err().to_string();
        // Flat and falling.
        let e = msg(&LINK_SIZES, &[5.0, 5.0, 5.0, 5.0]);
        assert!(e.contains("do not grow with the size"), "{e}");
        let e = msg(&LINK_SIZES, &[9.0, 8.0, 7.0, 6.0]);
        assert!(e.contains("do not grow with the size"), "{e}");
        // One size, no timing, mismatched lengths, invalid times.
        let e = msg(&[64, 64], &[1.0, 2.0]);
        assert!(e.contains("need two sizes"), "{e}");
        assert!(msg(&[], &[]).contains("no timing"));
        assert!(msg(&[8, 64], &[1.0]).contains("2 sizes and 1 times"));
        assert!(msg(&[8, 64], &[1.0, f64::NAN]).contains("copy time of NaN"));
        assert!(msg(&[8, 64], &[0.0, 1.0]).contains("copy time of 0"));
    }

    #[test]
    fn options_are_checked_before_anything_runs() {
        assert!(LinkOptions::default().check().is_ok());
        let with = |sizes: Vec<u64>| LinkOptions {
            sizes,
            ..LinkOptions::default()
        };
        let e = with(vec![8, 12]).check().unwrap_err().to_string();
        assert!(e.contains("12 B is not a positive multiple of 8"), "{e}");
        let e = with(vec![64, 64]).check().unwrap_err().to_string();
        assert!(e.contains("1 distinct copy sizes"), "{e}");
        let o = LinkOptions {
            batches: 0,
            ..LinkOptions::default()
        };
        assert!(o.check().is_err());
    }

    #[test]
    fn the_peer_is_the_lowest_other_gpu() {
        assert_eq!(peer_ordinal(0, 1), None);
        assert_eq!(peer_ordinal(0, 0), None);
        assert_eq!(peer_ordinal(0, 4), Some(1));
        assert_eq!(peer_ordinal(2, 4), Some(0));
        assert_eq!(peer_ordinal(1, 2), Some(0));
    }

    #[test]
    fn the_summary_names_the_pair_and_the_figures() {
        let l = MeasuredLink {
            gpus: 8,
            between: [0, 1],
            peer_access: true,
            bandwidth_gbs: 312.345,
            message_latency_us: 4.56,
            allreduce_latency_us: 17.0,
            sizes: LINK_SIZES.to_vec(),
            times_us: vec![4.6, 4.8, 8.0, 60.0],
        };
        assert_eq!(
            link_summary(&l),
            "link GPU 0 <- GPU 1 (8 GPUs, peer access on): 312.3 GB/s, 4.6 us per message, \
             17.0 us per all-reduce"
        );
    }
}
