//! autopcg: a preconditioned conjugate gradient solver for sparse symmetric positive definite
//! systems, with Chronopoulos–Gear PCG and an SSOR approximate-inverse preconditioner, on an
//! NVIDIA GPU (kernels and launch configurations chosen from the GPU's fitted performance
//! model) or the CPU.
//!
//! This crate is the facade simulation codes call: [`Solver`] resolves the device and the
//! model ([`resolve_model`]), asks the generator for the plan
//! ([`generator::plan`](autopcg_generator::plan)), runs it, and reports a [`Solution`]. It
//! never decides what the generator chose; [`Solver::solve_saved_plan`] runs a plan saved by
//! `autopcg generate` without a model. The building blocks are re-exported as
//! [`sparse`], [`catalog`], [`solver`], [`gpu`], [`model`] and [`generator`].
//!
//! ```
//! use autopcg::{Solver, PrecondKind, sparse::families};
//! let a = families::poisson2d_5pt(20, 20).unwrap();
//! let b = a.mul_vec(&vec![1.0; a.nrows()]);
//! let sol = Solver::new(&a).precond(PrecondKind::ssor_ai()).solve(&b).unwrap();
//! assert!(sol.info.true_relative_residual < 1e-8);
//! ```
#![warn(missing_docs)]

#[doc(inline)]
pub use autopcg_catalog as catalog;
#[doc(inline)]
pub use autopcg_generator as generator;
#[doc(inline)]
pub use autopcg_gpu as gpu;
#[doc(inline)]
pub use autopcg_model as model;
#[doc(inline)]
pub use autopcg_solver as solver;
#[doc(inline)]
pub use autopcg_sparse as sparse;

#[doc(inline)]
pub use autopcg_solver::{IterRecord, PcgError, PcgInfo, PcgParams, Plan, PrecondKind, SsorForm};
#[doc(inline)]
pub use autopcg_sparse::{CsrMatrix, SparseError};

mod device;
mod models;
mod solve;

pub use device::{open_gpu, Device};
pub use models::{resolve_model, LoadedModel, ModelChoice, ResolvedModel};
pub use solve::{SetupTimes, Solution, SolveFailure, Solver};

/// Errors of the facade.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Bad matrix or vector input.
    #[error(transparent)]
    Sparse(#[from] SparseError),
    /// The solver failed (see [`PcgError`]).
    #[error(transparent)]
    Pcg(#[from] PcgError),
    /// The requested device cannot be used.
    #[error("device unavailable: {0}")]
    DeviceUnavailable(String),
    /// A model file named explicitly cannot be used.
    #[error(transparent)]
    Model(#[from] autopcg_model::ModelError),
    /// No plan could be made.
    #[error("no plan: {0}")]
    Plan(String),
    /// A saved plan cannot be used: another device, another matrix, or a plan that does not
    /// run ([`Solver::solve_saved_plan`]).
    #[error(transparent)]
    SavedPlan(#[from] autopcg_generator::saved::SavedPlanError),
}
