//! autopcg: a preconditioned conjugate gradient solver for sparse symmetric positive definite
//! systems, with Chronopoulos–Gear PCG and an SSOR approximate-inverse preconditioner, on an
//! NVIDIA GPU (kernels and launch configurations chosen from the GPU's fitted performance
//! model) or the CPU.
//!
//! This crate is the facade simulation codes call: [`Solver`] resolves the device and the
//! model ([`resolve_model`]), asks the generator for the plan
//! ([`generator::plan`]), runs it, and reports a [`Solution`]. It
//! never decides what the generator chose. The building blocks are re-exported as
//! [`sparse`], [`catalog`], [`solver`] and [`generator`], and with the `gpu` feature `gpu` and
//! `model`.
//!
//! For a solve repeated over time steps or Newton steps, [`Solver::prepare`] gives a
//! [`PreparedSolver`]: setup once, then solve many right-hand sides and take new values of the
//! same sparsity pattern.
//!
//! A plan saved by `autopcg generate` (its `plan.json`, a `generator::saved::SavedPlan`) runs
//! without a model and without choosing again: `Solver::prepare_saved` gives a
//! [`PreparedSolver`] of it, `Solver::solve_saved_plan` solves once (both with the `gpu`
//! feature: a saved plan is a GPU plan).
//!
//! Matrices come from the caller's CSR arrays of any common index type, 0- or 1-based
//! ([`CsrMatrix::from_csr_arrays`]), from `sprs` matrices ([`CsrMatrix::from_sprs_any`]),
//! from one triangle ([`CsrMatrix::from_lower_triangle`]), from triplets, from Matrix Market
//! files ([`sparse::mm`]) or from the generated families ([`sparse::families`]). A solver
//! checks that its matrix is symmetric unless told not to ([`Solver::check_symmetry`]).
//!
//! **Features.** `gpu` (default): solving on an NVIDIA GPU, with kernels chosen by the GPU's
//! fitted model (the CUDA libraries are loaded at run time, so such a build also runs where
//! there is no GPU). Without it (`default-features = false`) no CUDA bindings and no model
//! stack are compiled: [`Device::Auto`] solves on the CPU and [`Device::Gpu`] is an error.
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
#[cfg(feature = "gpu")]
#[doc(inline)]
pub use autopcg_gpu as gpu;
#[cfg(feature = "gpu")]
#[doc(inline)]
pub use autopcg_model as model;
#[doc(inline)]
pub use autopcg_solver as solver;
#[doc(inline)]
pub use autopcg_sparse as sparse;

#[doc(inline)]
pub use autopcg_solver::{IterRecord, PcgError, PcgInfo, PcgParams, Plan, PrecondKind, SsorForm};
#[doc(inline)]
pub use autopcg_sparse::{CsrIndex, CsrMatrix, EntryMap, IndexBase, SparseError, Triangle};

mod blocks;
mod device;
mod models;
pub mod prepared;
mod solve;

pub use blocks::GpuCount;
#[cfg(feature = "gpu")]
pub use device::open_gpu;
pub use device::{finish_gpu_opens_ahead, open_gpu_ahead, open_gpu_ahead_for, Device};
pub use models::ModelChoice;
#[cfg(feature = "gpu")]
pub use models::{resolve_model, LoadedModel, ResolvedModel};
pub use prepared::PreparedSolver;
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
    #[cfg(feature = "gpu")]
    #[error(transparent)]
    Model(#[from] autopcg_model::ModelError),
    /// No plan could be made.
    #[error("no plan: {0}")]
    Plan(String),
    /// A saved plan cannot be used: another device, another matrix, or a file that is not a
    /// plan of this schema (`Solver::prepare_saved`).
    #[cfg(feature = "gpu")]
    #[error(transparent)]
    SavedPlan(#[from] autopcg_generator::saved::SavedPlanError),
    /// Something this build of the library leaves out (a feature that is off).
    #[error("not in this build: {0}")]
    Unsupported(String),
}
