//! A GPU's identity and the limits the models and launch checks read: one plain-data type read
//! from the driver by the GPU crate, stored in profiles and model files, and used by the
//! generator without a GPU.
use serde::{Deserialize, Serialize};

/// What autopcg needs to know about a device.
///
/// Profiles and model files store it; fields added after the first model files were written
/// carry `#[serde(default)]` (0 or `None` for "not recorded"), so those files still load.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceProps {
    /// Marketing name, e.g. "NVIDIA H200".
    pub name: String,
    /// Compute capability (major, minor).
    pub compute_capability: (u32, u32),
    /// Streaming multiprocessors.
    pub sm_count: u32,
    /// Largest block.
    pub max_threads_per_block: u32,
    /// Resident threads per SM.
    pub max_threads_per_sm: u32,
    /// Resident blocks per SM.
    pub max_blocks_per_sm: u32,
    /// 32-bit registers per SM.
    pub regs_per_sm: u32,
    /// 32-bit registers one block may use (0: not recorded).
    #[serde(default)]
    pub regs_per_block: u32,
    /// Shared memory per SM, bytes.
    pub smem_per_sm: u32,
    /// Shared memory one block may use without opting in, bytes (0: not recorded).
    #[serde(default)]
    pub smem_per_block: u32,
    /// Shared memory one block may use after opting in, bytes (0: not recorded).
    #[serde(default)]
    pub smem_per_block_optin: u32,
    /// Global memory, bytes.
    pub total_mem: u64,
    /// L2 cache, bytes.
    pub l2_bytes: u32,
    /// Threads per warp.
    pub warp_size: u32,
    /// Largest grid x-dimension.
    pub max_grid_x: u32,
    /// Peak memory clock, kHz, where the driver reports it.
    #[serde(default)]
    pub mem_clock_khz: Option<u32>,
    /// Memory bus width, bits, where the driver reports it.
    #[serde(default)]
    pub mem_bus_width_bits: Option<u32>,
    /// CUDA driver version as the driver reports it (e.g. 13000), where known.
    #[serde(default)]
    pub driver_version: Option<u32>,
    /// NVRTC version (major, minor), where known.
    #[serde(default)]
    pub nvrtc_version: Option<(u32, u32)>,
}

impl DeviceProps {
    /// Theoretical memory bandwidth in GB/s (double data rate), where clock and bus width are
    /// known.
    pub fn peak_bandwidth_gbs(&self) -> Option<f64> {
        let clk = f64::from(self.mem_clock_khz?);
        let bits = f64::from(self.mem_bus_width_bits?);
        Some(2.0 * clk * 1e3 * bits / 8.0 / 1e9)
    }

    /// The architecture number XY of compute capability X.Y (90 for Hopper).
    pub fn arch(&self) -> u32 {
        10 * self.compute_capability.0 + self.compute_capability.1
    }

    /// The file-name slug of this device: [`device_slug`] of its name.
    pub fn slug(&self) -> String {
        device_slug(&self.name)
    }

    /// Threads the device keeps resident: SMs times resident threads per SM.
    pub fn resident_threads(&self) -> f64 {
        f64::from(self.sm_count.max(1)) * f64::from(self.max_threads_per_sm.max(1))
    }

    /// The same device with the limits a record left out (0) filled in from the others: a
    /// block may use every register and the non-opt-in shared memory of an SM up to 48 KiB.
    /// Models fitted from profiles that predate those fields run launch checks on this.
    pub fn with_defaults(mut self) -> Self {
        if self.regs_per_block == 0 {
            self.regs_per_block = self.regs_per_sm;
        }
        if self.smem_per_block == 0 {
            self.smem_per_block = self.smem_per_sm.min(48 << 10);
        }
        if self.smem_per_block_optin == 0 {
            self.smem_per_block_optin = self.smem_per_sm;
        }
        self
    }

    /// Properties of an H100-like device (132 SMs, compute capability 9.0), for tests of
    /// launch rules and plans that need a device without a GPU.
    pub fn hopper_like() -> DeviceProps {
        DeviceProps {
            name: "test".into(),
            compute_capability: (9, 0),
            sm_count: 132,
            max_threads_per_block: 1024,
            max_threads_per_sm: 2048,
            max_blocks_per_sm: 32,
            regs_per_sm: 65536,
            regs_per_block: 65536,
            smem_per_sm: 233472,
            smem_per_block: 49152,
            smem_per_block_optin: 232448,
            total_mem: 80 << 30,
            l2_bytes: 50 << 20,
            warp_size: 32,
            max_grid_x: i32::MAX as u32,
            mem_clock_khz: None,
            mem_bus_width_bits: None,
            driver_version: None,
            nvrtc_version: None,
        }
    }
}

/// The slug a model file of a device is named by: the name in lower case, words joined by `-`,
/// cut before the first word that only describes the memory or the board (`80gb`, `hbm3`,
/// `pcie`, `sxm5`, `nvl`...), so "NVIDIA H100 80GB HBM3" and "NVIDIA H100 PCIe" give
/// `nvidia-h100` and "NVIDIA H200" gives `nvidia-h200`.
pub fn device_slug(name: &str) -> String {
    let mut words = Vec::new();
    for w in name
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
    {
        let w = w.to_ascii_lowercase();
        let memory = w.ends_with("gb") && w[..w.len() - 2].chars().all(|c| c.is_ascii_digit());
        let board = w.starts_with("hbm")
            || w.starts_with("sxm")
            || w == "pcie"
            || w == "nvl"
            || w.starts_with("gddr");
        if !words.is_empty() && (memory || board) {
            break;
        }
        words.push(w);
    }
    if words.is_empty() {
        "unknown-gpu".to_string()
    } else {
        words.join("-")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs_drop_memory_and_board_words() {
        assert_eq!(device_slug("NVIDIA H200"), "nvidia-h200");
        assert_eq!(device_slug("NVIDIA H100 80GB HBM3"), "nvidia-h100");
        assert_eq!(device_slug("NVIDIA H100 PCIe"), "nvidia-h100");
        assert_eq!(device_slug("NVIDIA H100 NVL"), "nvidia-h100");
        assert_eq!(
            device_slug("NVIDIA GeForce RTX 4090"),
            "nvidia-geforce-rtx-4090"
        );
        assert_eq!(device_slug("  "), "unknown-gpu");
    }

    #[test]
    fn records_without_the_later_fields_still_load() {
        // The device record of the first model files: no per-block limits, no clocks.
        let old = r#"{"name":"NVIDIA H200","compute_capability":[9,0],"sm_count":132,
            "max_threads_per_block":1024,"max_threads_per_sm":2048,"max_blocks_per_sm":32,
            "regs_per_sm":65536,"smem_per_sm":233472,"total_mem":150109880320,
            "l2_bytes":62914560,"warp_size":32,"max_grid_x":2147483647,
            "driver_version":null,"nvrtc_version":[13,0]}"#;
        let d: DeviceProps = serde_json::from_str(old).unwrap();
        assert_eq!(d.smem_per_block, 0);
        let d = d.with_defaults();
        assert_eq!(d.smem_per_block, 48 << 10);
        assert_eq!(d.regs_per_block, 65536);
        let back: DeviceProps = serde_json::from_str(&serde_json::to_string(&d).unwrap()).unwrap();
        assert_eq!(back, d);
    }
}
