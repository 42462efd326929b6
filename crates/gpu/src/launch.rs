//! Launch configurations: the catalogue's [`LaunchConfig`] (threads per block and block count,
//! chosen by the caller: the performance models pick them) and its conversion to cudarc's.
pub use autopcg_catalog::{GridPolicy, LaunchConfig, DEFAULT_THREADS};

/// cudarc's launch configuration for a one-dimensional `cfg` without dynamic shared memory.
pub(crate) fn cudarc_config(cfg: LaunchConfig) -> cudarc::driver::LaunchConfig {
    cudarc::driver::LaunchConfig {
        grid_dim: (cfg.blocks, 1, 1),
        block_dim: (cfg.threads, 1, 1),
        shared_mem_bytes: 0,
    }
}
