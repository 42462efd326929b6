//! autopcg-profiler: the sweep `autopcg tune` runs once per GPU.
//!
//! It measures every vector-update, reduction and SpMV kernel variant across launch
//! configurations and benchmark inputs, and streams the results as profile records
//! ([`autopcg_model::profile`]) from which the model crate fits the performance models.
//!
//! - [`plan`]: the [`Sweep`] (what to measure, from the device and [`SweepOptions`]), its
//!   timing policies and its time estimate.
//! - [`matrices`]: the benchmark matrices (fit, evaluation and quick sets).
//! - [`measure`]: the [`Measurer`] trait the sweep is written against.
//! - [`gpu`](mod@gpu): [`GpuMeasurer`], the measurement source on a CUDA device.
//! - [`link`]: the link between two GPUs of a host (peer copies and the dot all-gather),
//!   measured by `tune` when the host has several.
//! - [`run`]: running a sweep into a profile, resumably ([`tune`], [`run_eval_set`],
//!   [`run_sweep`]), with progress reports.
//! - [`testing`]: [`testing::FakeMeasurer`], a deterministic source for tests without a GPU.
#![warn(missing_docs)]

pub mod error;
pub mod gpu;
pub mod link;
pub mod matrices;
pub mod measure;
mod occupancy;
pub mod plan;
pub mod run;
pub mod testing;

pub use error::ProfilerError;
pub use gpu::GpuMeasurer;
pub use link::{fit_link, link_summary, measure_link, peer_ordinal, LinkFit, LinkOptions};
pub use matrices::{eval_matrices, fit_matrices, form_matrices, quick_matrices, MatrixSpec};
pub use measure::{MatrixBench, Measurer};
pub use occupancy::KernelResources;
pub use plan::{
    DotPoint, DotSize, KernelRef, KernelTable, StageEstimate, Sweep, SweepCounts, SweepOptions,
    TimingPolicy, VectorPoint, VectorSize,
};
pub use run::{
    header, kernel_table, open_profile, run_eval_set, run_sweep, tune, Observer, Progress, Silent,
    StageReport, SweepReport, MAX_RETIMES, MAX_WAITS, RETIME_PAUSE, SENTINEL_EVERY,
    SENTINEL_FLOOR_MS, SENTINEL_TOLERANCE,
};
