//! The GPU side of the solver.
//!
//! - The plan types of a GPU solve ([`GpuPlanChoice`] and its parts): what every step runs,
//!   chosen by the generator crate. They are plain data and always built.
//! - The CUDA backend ([`GpuBackend`], [`solve_gpu`]), with the `gpu` feature (on by default):
//!   without it this crate compiles no CUDA bindings and solves on the CPU only.
mod choice;

pub use choice::{
    Dot3Choice, ElementwiseChoice, GpuPlanChoice, PrecondChoice, SpmvChoice, SpmvMethod,
    UpdateChoice, MAX_GRAPH_ITERS,
};

#[cfg(feature = "gpu")]
mod backend;
#[cfg(feature = "gpu")]
pub(crate) mod ops;
#[cfg(feature = "gpu")]
pub(crate) mod poll;

#[cfg(feature = "gpu")]
pub use backend::{solve_gpu, GpuBackend, StepTimes, INITIAL_HISTORY, MAX_RESERVED_HISTORY};
