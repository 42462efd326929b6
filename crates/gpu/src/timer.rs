//! Timing GPU work with CUDA events.
//!
//! Events are created with `CU_EVENT_DEFAULT` (cudarc's own default disables timing). The
//! measurement protocol: one untimed warm-up call (it absorbs compilation, module loading and
//! first-touch allocation), then timed repetitions until both a minimum count and a minimum
//! total time are reached; the median is the figure to report. Calls of a few microseconds are
//! timed as the solver runs them, from replays of a CUDA graph holding a batch of them
//! ([`time_kernel_replayed`], [`time_call`]).
use cudarc::driver::{sys as dsys, CudaEvent};

use crate::error::DriverContext;
use crate::{GpuDevice, GpuError};

/// Upper bound on repetitions, whatever `min_ms` asks for.
pub const MAX_REPS: usize = 100_000;

/// A pair of timing events on a device's stream.
pub struct GpuTimer<'d> {
    dev: &'d GpuDevice,
    start: CudaEvent,
    stop: CudaEvent,
}

impl<'d> GpuTimer<'d> {
    /// Two timing-capable events on `dev`.
    pub fn new(dev: &'d GpuDevice) -> Result<Self, GpuError> {
        let mk = || {
            dev.context()
                .new_event(Some(dsys::CUevent_flags::CU_EVENT_DEFAULT))
                .during(|| "creating a timing event".into())
        };
        Ok(GpuTimer {
            dev,
            start: mk()?,
            stop: mk()?,
        })
    }

    /// Records the start event on the stream.
    pub fn start(&self) -> Result<(), GpuError> {
        self.start
            .record(self.dev.stream())
            .during(|| "recording the start event".into())
    }

    /// Records the stop event, waits for it and returns the milliseconds since the start
    /// event.
    pub fn stop(&self) -> Result<f64, GpuError> {
        self.stop
            .record(self.dev.stream())
            .during(|| "recording the stop event".into())?;
        let ms = self
            .start
            .elapsed_ms(&self.stop)
            .during(|| "reading the elapsed time".into())?;
        Ok(f64::from(ms))
    }
}

/// Summary of repeated timings, milliseconds per call.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TimingStats {
    /// Median.
    pub median_ms: f64,
    /// Fastest.
    pub min_ms: f64,
    /// Slowest.
    pub max_ms: f64,
    /// Timed repetitions.
    pub reps: usize,
}

impl TimingStats {
    /// Summarises samples (milliseconds); `None` for no samples.
    pub fn from_samples(samples: &[f64]) -> Option<TimingStats> {
        if samples.is_empty() {
            return None;
        }
        let mut s = samples.to_vec();
        s.sort_by(f64::total_cmp);
        let n = s.len();
        let median = if n % 2 == 1 {
            s[n / 2]
        } else {
            0.5 * (s[n / 2 - 1] + s[n / 2])
        };
        Some(TimingStats {
            median_ms: median,
            min_ms: s[0],
            max_ms: s[n - 1],
            reps: n,
        })
    }
}

/// Times `launch` (which queues work on `dev`'s stream): one warm-up call, then repetitions,
/// each between two events, until at least `min_reps` were taken and they add up to at least
/// `min_ms` (or [`MAX_REPS`] is reached).
pub fn time_kernel(
    dev: &GpuDevice,
    launch: impl FnMut() -> Result<(), GpuError>,
    min_reps: usize,
    min_ms: f64,
) -> Result<TimingStats, GpuError> {
    time_kernel_batched(dev, launch, 1, min_reps, min_ms)
}

/// As [`time_kernel`], but each sample covers `batch` back-to-back calls and is divided by
/// `batch`: for kernels so short that the gap between launches would dominate.
pub fn time_kernel_batched(
    dev: &GpuDevice,
    mut launch: impl FnMut() -> Result<(), GpuError>,
    batch: usize,
    min_reps: usize,
    min_ms: f64,
) -> Result<TimingStats, GpuError> {
    let batch = batch.max(1);
    launch()?;
    dev.synchronize()?;
    let timer = GpuTimer::new(dev)?;
    sample_until(dev, MAX_REPS, min_reps, min_ms, batch, || {
        timer.start()?;
        for _ in 0..batch {
            launch()?;
        }
        timer.stop()
    })
}

/// The sampling loop of the timers: `take` times one sample (milliseconds, covering `per`
/// calls), repeated until at least `min_reps` samples (one at least) and `min_ms` milliseconds
/// were taken, or `most` samples; then a synchronisation, so that errors of the timed launches
/// surface here rather than in the next, unrelated call. Each sample is divided by `per`.
fn sample_until(
    dev: &GpuDevice,
    most: usize,
    min_reps: usize,
    min_ms: f64,
    per: usize,
    mut take: impl FnMut() -> Result<f64, GpuError>,
) -> Result<TimingStats, GpuError> {
    let mut samples = Vec::new();
    let mut total = 0.0;
    while samples.len() < most && (samples.len() < min_reps.max(1) || total < min_ms) {
        let ms = take()?;
        total += ms;
        samples.push(ms / per.max(1) as f64);
    }
    dev.synchronize()?;
    TimingStats::from_samples(&samples).ok_or_else(|| GpuError::InvalidInput {
        what: "timing".into(),
        reason: "no sample was taken".into(),
    })
}

/// Most samples [`time_kernel_flushed`] takes: each one pays a pass over a buffer of twice the
/// L2 besides the call, so `min_ms` of calls of a few microseconds would take hundreds of
/// passes.
pub const MAX_FLUSHED_REPS: usize = 200;

/// Times `launch` with L2 cold and without the host's launch latency, as a call of a solver
/// iteration whose data does not stay in L2 runs: one untimed warm-up call, then per sample
/// `flush` (work that passes enough other data through L2 to evict the call's, queued ahead),
/// the start event, the call, the stop event. The call is queued while the flush runs, so it
/// starts as soon as the flush ends and the sample holds the call alone. Samples are taken
/// until at least `min_reps` and `min_ms` milliseconds of calls, at most
/// [`MAX_FLUSHED_REPS`] (or `min_reps`, if more).
///
/// Launched alone and repeated, a call whose data fits in L2 reads it from there every time,
/// and each sample carries the launch latency. Fitted on such timings, the H200's model priced
/// SSOR-AI's 13-diagonal explicit product of 3D Poisson 64^3 (2.6e5 rows) at 9.2 us against
/// 7.9 us for each of the factored form's 4-diagonal passes, and chose the explicit form; the
/// H100's model did too, and its plan ran 30.8 us per iteration against 29.0 us for the fixed
/// rule's factored form (2026-12-07).
pub fn time_kernel_flushed(
    dev: &GpuDevice,
    mut flush: impl FnMut() -> Result<(), GpuError>,
    mut launch: impl FnMut() -> Result<(), GpuError>,
    min_reps: usize,
    min_ms: f64,
) -> Result<TimingStats, GpuError> {
    launch()?;
    dev.synchronize()?;
    let timer = GpuTimer::new(dev)?;
    let most = MAX_FLUSHED_REPS.max(min_reps);
    sample_until(dev, most, min_reps, min_ms, 1, || {
        flush()?;
        timer.start()?;
        launch()?;
        timer.stop()
    })
}

/// How a call was timed ([`time_call`], [`time_kernel_replayed`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallTiming {
    /// Each sample one call launched alone ([`time_kernel`]).
    Alone,
    /// Each sample a batch of this many calls launched back to back on the stream
    /// ([`time_kernel_batched`]).
    Streamed(usize),
    /// From replays of a CUDA graph holding a batch of this many calls
    /// ([`time_kernel_replayed`]).
    Replayed(usize),
}

impl CallTiming {
    /// True for [`CallTiming::Replayed`].
    pub fn replayed(self) -> bool {
        matches!(self, CallTiming::Replayed(_))
    }
}

/// Times a call the way the solver runs it: `batch` calls are captured once into a CUDA graph
/// ([`GpuDevice::capture`]); after one untimed replay, each sample times two back-to-back
/// replays (the second one's launch overlaps the first one's work, as consecutive graphs of
/// the solver do) and is divided by `2 * batch`. Samples are taken until at least `min_reps`
/// and `min_ms` milliseconds. Launched one by one from the host, kernels of a few microseconds
/// are paced by the launch rate; under graph replay they run back to back on the device, and
/// their differences (grid size, tail, work) show.
///
/// `launch` must follow the capture rules of [`GpuDevice::capture`]. When the calls cannot be
/// captured, they are timed as back-to-back stream launches instead ([`time_kernel_batched`]),
/// and the returned [`CallTiming`] says so.
pub fn time_kernel_replayed(
    dev: &GpuDevice,
    mut launch: impl FnMut() -> Result<(), GpuError>,
    batch: usize,
    min_reps: usize,
    min_ms: f64,
) -> Result<(TimingStats, CallTiming), GpuError> {
    let batch = batch.max(1);
    // Warm-up outside the capture: kernels loaded, first-touch work done.
    launch()?;
    dev.synchronize()?;
    let graph = match dev.capture(|| (0..batch).try_for_each(|_| launch())) {
        Ok(g) if !g.is_empty() => g,
        _ => {
            // An operation that cannot be captured (or nothing queued): time it on the stream.
            dev.synchronize()?;
            let s = time_kernel_batched(dev, launch, batch, min_reps, min_ms)?;
            return Ok((s, CallTiming::Streamed(batch)));
        }
    };
    graph.launch()?;
    dev.synchronize()?;
    let timer = GpuTimer::new(dev)?;
    let s = sample_until(dev, MAX_REPS, min_reps, min_ms, 2 * batch, || {
        timer.start()?;
        graph.launch()?;
        graph.launch()?;
        timer.stop()
    })?;
    Ok((s, CallTiming::Replayed(batch)))
}

/// How [`time_call`] times calls it does not replay, and how it sizes batches.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ShortCalls {
    /// Calls shorter than this are short, milliseconds.
    pub below_ms: f64,
    /// Target length of a batched sample, milliseconds.
    pub sample_ms: f64,
    /// Largest batch.
    pub max_batch: usize,
    /// Whether short calls that are not replayed are timed in stream batches (else alone).
    pub stream_batches: bool,
}

impl ShortCalls {
    /// 20 us, samples of 0.1 ms, batches of at most 256 calls, stream batches.
    pub const DEFAULT: ShortCalls = ShortCalls {
        below_ms: 0.02,
        sample_ms: 0.1,
        max_batch: 256,
        stream_batches: true,
    };

    /// The batch for a call whose probe took `probe_ms`.
    pub fn batch_for(&self, probe_ms: f64) -> usize {
        let batch = (self.sample_ms / probe_ms.max(1e-5)).ceil();
        (batch as usize).clamp(1, self.max_batch.max(1))
    }
}

/// Times `launch`. With `replay`, from graph replays ([`time_kernel_replayed`]) in batches of
/// about `short.sample_ms` sized by a probe (one warm-up and 3 calls launched alone), whatever
/// the call's length. Without, the way calls were timed before replays were used: a call that
/// may be short (`est_ms`, its shortest plausible time, below `short.below_ms`) is probed, and
/// a short one is timed in stream batches (or alone, see [`ShortCalls::stream_batches`]);
/// any other alone with [`time_kernel`].
pub fn time_call(
    dev: &GpuDevice,
    mut launch: impl FnMut() -> Result<(), GpuError>,
    est_ms: f64,
    replay: bool,
    short: &ShortCalls,
    min_reps: usize,
    min_ms: f64,
) -> Result<(TimingStats, CallTiming), GpuError> {
    if replay {
        let probe = time_kernel(dev, &mut launch, 3, 0.0)?;
        let batch = short.batch_for(probe.median_ms);
        return time_kernel_replayed(dev, launch, batch, min_reps, min_ms);
    }
    if est_ms < short.below_ms && short.stream_batches {
        let probe = time_kernel(dev, &mut launch, 3, 0.0)?;
        if probe.median_ms < short.below_ms {
            let batch = short.batch_for(probe.median_ms);
            let s = time_kernel_batched(dev, &mut launch, batch, min_reps, min_ms)?;
            return Ok((s, CallTiming::Streamed(batch)));
        }
    }
    Ok((
        time_kernel(dev, launch, min_reps, min_ms)?,
        CallTiming::Alone,
    ))
}

/// Bytes per row an iteration of the solver is taken to move when only its length is known
/// (the update, reduction and preconditioner vectors, 8 of them, and a matrix of about 12
/// entries per row in CSR): 64 + 144.
pub const ITERATION_BYTES_PER_ROW: u64 = autopcg_catalog::ITERATION_VECTOR_BYTES_PER_ROW + 144;

pub use autopcg_catalog::replays_like_the_solver;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_from_samples() {
        let s = TimingStats::from_samples(&[3.0, 1.0, 2.0]).unwrap();
        assert_eq!(
            (s.median_ms, s.min_ms, s.max_ms, s.reps),
            (2.0, 1.0, 3.0, 3)
        );
        let s = TimingStats::from_samples(&[4.0, 1.0, 2.0, 3.0]).unwrap();
        assert_eq!(s.median_ms, 2.5);
        assert!(TimingStats::from_samples(&[]).is_none());
    }

    #[test]
    fn short_call_batches_fill_a_sample() {
        let p = ShortCalls::DEFAULT;
        // 0.1 ms samples: 2 us calls go 50 to a batch, 3 us ones 34.
        assert_eq!(p.batch_for(0.002), 50);
        assert_eq!(p.batch_for(0.003), 34);
        // Capped at the largest batch; never empty.
        assert_eq!(p.batch_for(1e-6), 256);
        assert_eq!(p.batch_for(0.0), 256);
        assert_eq!(p.batch_for(5.0), 1);
    }
}
