//! Progress bookkeeping of a running sweep: the estimated cost left against the time spent
//! measuring ([`Clock`]), and the state of the stage that runs ([`StageRun`]).
use std::time::{Duration, Instant};

use super::{Observer, Progress, StageReport};

/// Time bookkeeping for the estimates: measured cost so far against time spent measuring.
pub(super) struct Clock {
    pub(super) start: Instant,
    pub(super) remaining_cost: f64,
    cost_done: f64,
    time_measuring: Duration,
}

impl Clock {
    /// A clock started now with `cost` estimated seconds to measure.
    pub(super) fn new(cost: f64) -> Clock {
        Clock {
            start: Instant::now(),
            remaining_cost: cost,
            cost_done: 0.0,
            time_measuring: Duration::ZERO,
        }
    }

    fn eta(&self, remaining: f64) -> Option<Duration> {
        let rate = if self.cost_done > 0.0 && !self.time_measuring.is_zero() {
            self.time_measuring.as_secs_f64() / self.cost_done
        } else {
            1.0
        };
        let s = remaining * rate;
        (s.is_finite() && s >= 0.0).then(|| Duration::from_secs_f64(s))
    }

    fn spent(&mut self, cost: f64, took: Duration) {
        self.cost_done += cost;
        self.remaining_cost = (self.remaining_cost - cost).max(0.0);
        self.time_measuring += took;
    }
}

/// State of one stage while it runs.
pub(super) struct StageRun<'a> {
    pub(super) name: &'a str,
    pub(super) start: Instant,
    total: usize,
    pub(super) done: usize,
    remaining_cost: f64,
    pub(super) report: StageReport,
}

impl<'a> StageRun<'a> {
    pub(super) fn new(name: &'a str, total: usize, remaining_cost: f64) -> StageRun<'a> {
        StageRun {
            name,
            start: Instant::now(),
            total,
            done: 0,
            remaining_cost,
            report: StageReport {
                stage: name.to_string(),
                planned: total,
                measured: 0,
                resumed: 0,
                skipped: 0,
                records: 0,
                elapsed: Duration::ZERO,
                peak_device_bytes: 0,
                peak_estimated: false,
                sentinel_timings: 0,
                retimed: 0,
                disturbed_kept: 0,
            },
        }
    }

    pub(super) fn show(&self, clock: &Clock, obs: &mut dyn Observer, current: &str) {
        obs.progress(&Progress {
            stage: self.name,
            current,
            done: self.done,
            total: self.total,
            stage_elapsed: self.start.elapsed(),
            stage_eta: clock.eta(self.remaining_cost),
            elapsed: clock.start.elapsed(),
            eta: clock.eta(clock.remaining_cost),
        });
    }

    pub(super) fn measured(&mut self, clock: &mut Clock, cost: f64, took: Duration) {
        self.done += 1;
        self.report.measured += 1;
        self.remaining_cost = (self.remaining_cost - cost).max(0.0);
        clock.spent(cost, took);
    }

    pub(super) fn skipped(&mut self, clock: &mut Clock, items: usize, cost: f64) {
        self.done += items;
        self.report.skipped += items;
        self.remaining_cost = (self.remaining_cost - cost).max(0.0);
        clock.remaining_cost = (clock.remaining_cost - cost).max(0.0);
    }

    pub(super) fn peak(&mut self, used: u64, estimated: bool) {
        if used > self.report.peak_device_bytes {
            self.report.peak_device_bytes = used;
            self.report.peak_estimated = estimated;
        }
    }
}
