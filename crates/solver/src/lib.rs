//! autopcg-solver: Chronopoulos–Gear preconditioned conjugate gradients.
//!
//! The algorithm ([`pcg()`]) is written once, over the [`PcgBackend`] trait whose steps are the
//! units a GPU fuses: one four-vector update, one preconditioner application, one SpMV followed by
//! one three-dot reduction and the scalar recurrence. Backends own their vectors and scalars, so
//! a GPU backend keeps alpha, beta, gamma and delta on the device and the driver synchronises
//! only when it polls (every `check_every` iterations); a multi-GPU backend holds row blocks.
//!
//! - [`params`]: [`PcgParams`] (checked builder), [`PcgInfo`], [`PcgError`], [`StopReason`].
//! - [`backend`]: the trait, the scalar recurrence [`backend::GearScalars`] every backend shares.
//! - [`precond`]: preconditioner construction (Jacobi, SSOR-AI first and second order, factored
//!   or explicit product form) as host matrices any backend can upload.
//! - [`cpu`]: the rayon CPU backend.
//! - [`blocks`]: multi-block PCG (row blocks with halo exchange behind a transport trait, one
//!   all-reduce per iteration), the basis of multi-GPU solves; the host backend.
//! - [`gpu`]: the choice of kernels a GPU runs ([`gpu::GpuPlanChoice`]), and with the `gpu`
//!   feature (default) the CUDA backend (`gpu::GpuBackend`, `gpu::solve_gpu`).
//! - [`mod@pcg`]: the driver ([`pcg()`], and [`solve_cpu`] for the common CPU case): convergence
//!   on the true residual, residual replacement, stagnation.
//! - [`scaling`]: power-of-two scaling of badly scaled systems ([`ScaleFactors`]), so that no
//!   inner product over- or underflows, and the diagonal check every solve runs.
//! - [`plan`]: what each step of an iteration runs, for reporting.
#![warn(missing_docs)]

pub mod backend;
pub mod blocks;
pub mod cpu;
pub mod gpu;
pub mod params;
pub mod pcg;
pub mod plan;
pub mod precond;
pub mod scaling;

pub use backend::{Dots, GearScalars, Halt, IterRecord, PcgBackend};
pub use cpu::CpuBackend;
pub use params::{HistoryNorm, PcgError, PcgInfo, PcgParams, StopReason};
pub use pcg::{pcg, solve_cpu, SolveFailure, PACING_SAFETY};
pub use plan::{Plan, PlanStep};
pub use precond::{
    auto_omega, auto_omega_at, coupling_at, omega_for_coupling, PlannedPrecond, PrecondKind,
    PrecondRef, Preconditioner, SsorForm, ValueRefresh,
};
pub use scaling::{ScaleFactors, SinkStats, ValueStats, ValueStatsSink};
