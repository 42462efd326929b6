//! What moves data between GPUs: the figures the multi-GPU time model reads when nothing was
//! measured on the machine.
use serde::Serialize;

/// Bandwidth and latencies of the link between the GPUs of one host.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LinkProps {
    /// What the figures describe ("nvlink-4 (default figures)", [`LinkProps::MEASURED`]...).
    pub name: &'static str,
    /// Point-to-point bandwidth one GPU sustains to one peer, GB/s.
    pub bandwidth_gbs: f64,
    /// Fixed cost of one point-to-point message (launch, synchronisation), microseconds.
    pub message_latency_us: f64,
    /// One all-reduce of a few doubles across the GPUs, microseconds.
    pub allreduce_latency_us: f64,
}

impl LinkProps {
    /// Default figures for NVLink 4 (H100 / H200 SXM): about 450 GB/s per direction is the
    /// nominal peak; 300 GB/s is what peer copies of halo-sized messages sustain; about 10 us per
    /// message and about 20 us for a small NCCL all-reduce within one host.
    pub const NVLINK4: LinkProps = LinkProps {
        name: "nvlink-4 (default figures)",
        bandwidth_gbs: 300.0,
        message_latency_us: 10.0,
        allreduce_latency_us: 20.0,
    };

    /// Default figures for PCIe 5.0 x16 between GPUs through the host: about 50 GB/s nominal,
    /// 40 GB/s sustained, 15 us per message and 40 us per small all-reduce.
    pub const PCIE5: LinkProps = LinkProps {
        name: "pcie-5 (default figures)",
        bandwidth_gbs: 40.0,
        message_latency_us: 15.0,
        allreduce_latency_us: 40.0,
    };

    /// The name of figures `autopcg tune` measured on the host.
    pub const MEASURED: &'static str = "measured by tune";

    /// Figures measured on the host (named [`LinkProps::MEASURED`]).
    pub const fn measured(
        bandwidth_gbs: f64,
        message_latency_us: f64,
        allreduce_latency_us: f64,
    ) -> LinkProps {
        LinkProps {
            name: LinkProps::MEASURED,
            bandwidth_gbs,
            message_latency_us,
            allreduce_latency_us,
        }
    }

    /// Time to move `bytes` in `messages` messages, microseconds (the messages of one GPU are
    /// sent one after the other).
    pub fn transfer_us(&self, bytes: f64, messages: usize) -> f64 {
        bytes / (self.bandwidth_gbs * 1e3) + self.message_latency_us * messages as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transfer_time_is_latency_plus_bytes_over_bandwidth() {
        // 3 MB at 300 GB/s = 10 us, plus two messages of 10 us.
        let t = LinkProps::NVLINK4.transfer_us(3e6, 2);
        assert!((t - 30.0).abs() < 1e-9, "{t}");
        assert_eq!(LinkProps::PCIE5.transfer_us(0.0, 0), 0.0);
        let m = LinkProps::measured(100.0, 5.0, 12.0);
        assert_eq!(m.name, LinkProps::MEASURED);
        assert!((m.transfer_us(1e6, 1) - 15.0).abs() < 1e-9);
    }
}
