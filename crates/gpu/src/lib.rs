//! autopcg-gpu: everything of autopcg that touches CUDA, and the only crate that imports cudarc.
//!
//! - [`probe`]: whether the driver and NVRTC load here ([`gpu_available`], [`nvrtc_available`]),
//!   without panicking on machines without CUDA.
//! - [`device`]: [`GpuDevice`] (context, one stream, properties, kernel registry),
//!   [`DeviceProps`], [`GpuDevice::discover`].
//! - [`sources`], [`compile`], [`cache`]: the kernel pool under `kernels/` (embedded at build
//!   time through the crate's `kernels` link to the workspace folder, so the crate packages
//!   with its sources), NVRTC compilation per (source, `-D` defines) module, and the on-disk
//!   cache of compiled images.
//! - [`memory`]: device vectors, [`DeviceVec`]; large copies go through [`staging`]'s
//!   page-locked buffers.
//! - [`formats`]: [`DeviceCsr`], [`DeviceEll`], [`DeviceDia`], [`DeviceCoo`], [`DeviceHyb`].
//! - [`kernels`]: one typed launch wrapper per kernel family (vector updates, reductions,
//!   preconditioners, SpMV, conversion); each family's enum displays as
//!   the CUDA entry-point name.
//! - [`graph`]: CUDA graphs ([`GpuGraph`], [`GpuDevice::capture`]): a sequence of launches
//!   captured once and replayed with one call.
//! - [`scalars`]: the device scalar buffer of Chronopoulos–Gear PCG ([`CgScalars`]).
//! - [`launch`], [`timer`]: [`LaunchConfig`], [`GpuTimer`] and [`time_kernel`].
//! - [`cusparse`]: cuSPARSE's generic SpMV over a [`DeviceCsr`]: the vendor baseline of the
//!   benchmark ([`CusparseSpmv`]) and an operand a plan may choose ([`CusparseCsr`]).
//! - [`bench`](mod@bench): the SpMV benchmark ([`bench_spmv`]: every format, kernel and launch
//!   configuration, plus cuSPARSE) and the triad bandwidth ([`measure_triad_gbps`]).
//! - [`testing`]: how GPU tests find a device or skip.
#![warn(missing_docs)]

pub mod bench;
pub mod cache;
pub mod compile;
pub mod cusparse;
pub mod device;
pub mod error;
pub mod formats;
pub mod graph;
pub mod kernels;
pub mod launch;
pub mod memory;
pub mod probe;
pub mod scalars;
pub mod sources;
pub mod staging;
pub mod testing;
pub mod timer;

pub use bench::{bench_spmv, measure_triad_gbps, SpmvBench, SpmvBenchOptions, SpmvRecord};
pub use cache::{CacheStats, KernelCache};
pub use compile::Target;
pub use cusparse::{CusparseAlg, CusparseCsr, CusparseSpmv};
pub use device::{DeviceInfo, DeviceProps, GpuDevice, Kernel, KernelAttrs};
pub use error::GpuError;
pub use formats::{DeviceCoo, DeviceCsr, DeviceDia, DeviceEll, DeviceHyb, Format};
pub use graph::GpuGraph;
pub use launch::{LaunchConfig, DEFAULT_THREADS};
pub use memory::{DeviceScalar, DeviceVec};
pub use probe::{gpu_available, nvrtc_available, nvrtc_version};
pub use scalars::CgScalars;
pub use sources::{KernelSource, ModuleSpec, DOT_BLOCK_SIZES};
pub use timer::{
    replays_like_the_solver, time_call, time_kernel, time_kernel_batched, time_kernel_flushed,
    time_kernel_replayed, CallTiming, GpuTimer, ShortCalls, TimingStats, ITERATION_BYTES_PER_ROW,
};
