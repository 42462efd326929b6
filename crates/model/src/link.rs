//! The link between the GPUs of a host as `autopcg tune` measured it: what the multi-GPU time
//! model reads instead of the default figures of [`autopcg_catalog::LinkProps`].
use autopcg_catalog::LinkProps;
use serde::{Deserialize, Serialize};

/// Peer-copy and all-reduce figures measured between two GPUs of one host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MeasuredLink {
    /// GPUs the driver reported on the host.
    pub gpus: usize,
    /// Ordinals of the two GPUs measured: the first pulled from the second.
    pub between: [usize; 2],
    /// Whether direct peer access was on (otherwise the driver staged the copies).
    pub peer_access: bool,
    /// Bandwidth of the fitted line: the inverse of its time per byte, GB/s.
    pub bandwidth_gbs: f64,
    /// Time of the fitted line at zero bytes, microseconds.
    pub message_latency_us: f64,
    /// Median round trip of the dot all-gather (each GPU copies the other's three doubles
    /// after an event wait), microseconds.
    pub allreduce_latency_us: f64,
    /// Sizes of the timed peer copies, bytes.
    pub sizes: Vec<u64>,
    /// Median time of one copy of each size, microseconds.
    pub times_us: Vec<f64>,
}

impl MeasuredLink {
    /// A measurement between GPUs 0 and 1 of `gpus` with peer access on, whose copies of
    /// `sizes` bytes took exactly what the figures predict: the record a perfect fit would
    /// come from (for tests and examples of what reads a model's link).
    pub fn synthetic(
        gpus: usize,
        bandwidth_gbs: f64,
        message_latency_us: f64,
        allreduce_latency_us: f64,
        sizes: &[u64],
    ) -> MeasuredLink {
        let times_us = sizes
            .iter()
            .map(|&b| message_latency_us + b as f64 / (bandwidth_gbs * 1e3))
            .collect();
        MeasuredLink {
            gpus,
            between: [0, 1],
            peer_access: true,
            bandwidth_gbs,
            message_latency_us,
            allreduce_latency_us,
            sizes: sizes.to_vec(),
            times_us,
        }
    }

    /// The figures as the time model reads them (named [`LinkProps::MEASURED`]).
    pub fn props(&self) -> LinkProps {
        LinkProps::measured(
            self.bandwidth_gbs,
            self.message_latency_us,
            self.allreduce_latency_us,
        )
    }

    /// Checks what deserialisation alone cannot: the figures are finite, the bandwidth and the
    /// all-reduce positive, the latency not negative, and every size has one positive time.
    pub fn validate(&self) -> Result<(), String> {
        let finite = [
            self.bandwidth_gbs,
            self.message_latency_us,
            self.allreduce_latency_us,
        ]
        .iter()
        .all(|x| x.is_finite());
        if !finite
            || self.bandwidth_gbs <= 0.0
            || self.message_latency_us < 0.0
            || self.allreduce_latency_us <= 0.0
        {
            return Err(format!(
                "the measured link has invalid figures: {} GB/s, {} us per message, {} us per \
                 all-reduce",
                self.bandwidth_gbs, self.message_latency_us, self.allreduce_latency_us
            ));
        }
        if self.sizes.len() != self.times_us.len()
            || self.times_us.iter().any(|t| !t.is_finite() || *t <= 0.0)
        {
            return Err(format!(
                "the measured link has {} sizes and {} times, which must be positive",
                self.sizes.len(),
                self.times_us.len()
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> MeasuredLink {
        MeasuredLink::synthetic(2, 250.0, 4.0, 15.0, &[8, 1 << 20])
    }

    #[test]
    fn a_synthetic_measurement_lies_on_its_figures() {
        let m = sample();
        assert_eq!((m.gpus, m.between, m.peer_access), (2, [0, 1], true));
        // 1 MiB at 250 GB/s is 4.19 us after the 4 us latency.
        assert!((m.times_us[1] - (4.0 + 1_048_576.0 / 250e3)).abs() < 1e-12);
        assert!((m.times_us[0] - 4.000032).abs() < 1e-12);
    }

    #[test]
    fn props_carry_the_measured_figures() {
        let p = sample().props();
        assert_eq!(p.name, LinkProps::MEASURED);
        assert_eq!(
            (
                p.bandwidth_gbs,
                p.message_latency_us,
                p.allreduce_latency_us
            ),
            (250.0, 4.0, 15.0)
        );
        assert!(sample().validate().is_ok());
    }

    #[test]
    fn invalid_figures_are_refused() {
        let mut m = sample();
        m.bandwidth_gbs = f64::NAN;
        assert!(m.validate().is_err());
        let mut m = sample();
        m.message_latency_us = -1.0;
        assert!(m.validate().is_err());
        let mut m = sample();
        m.times_us.pop();
        assert!(m.validate().unwrap_err().contains("2 sizes and 1 times"));
    }
}
