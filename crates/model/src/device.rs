//! The device a profile was measured on, as the models need it: the limits of eq. 3-2 and the
//! identity a model file is matched by. A plain copy of the GPU crate's properties, so that this
//! crate builds and tests without any GPU code.
use serde::{Deserialize, Serialize};

/// A GPU's identity and the limits the models read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceSpec {
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
    /// Shared memory per SM, bytes.
    pub smem_per_sm: u32,
    /// Global memory, bytes.
    pub total_mem: u64,
    /// L2 cache, bytes.
    pub l2_bytes: u32,
    /// Threads per warp.
    pub warp_size: u32,
    /// Largest grid x-dimension.
    pub max_grid_x: u32,
    /// CUDA driver version as the driver reports it (e.g. 13000), where known.
    pub driver_version: Option<u32>,
    /// NVRTC version (major, minor), where known.
    pub nvrtc_version: Option<(u32, u32)>,
}

impl DeviceSpec {
    /// The file-name slug of this device: [`device_slug`] of its name.
    pub fn slug(&self) -> String {
        device_slug(&self.name)
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
}
