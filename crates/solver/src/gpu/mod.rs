//! The GPU side of the solver.
//!
//! - The plan types of a GPU solve ([`GpuPlanChoice`] and its parts): what every step runs,
//!   chosen by the generator crate. They are plain data and always built.
//! - The CUDA backend ([`GpuBackend`], [`solve_gpu`]), with the `gpu` feature (on by default):
//!   without it this crate compiles no CUDA bindings and solves on the CPU only.
mod choice;

pub use choice::{
    fused_dots_launch, Dot3Choice, ElementwiseChoice, GpuPlanChoice, HaloMethod, PrecondChoice,
    SpmvChoice, SpmvMethod, UpdateChoice, HALO_THREADS, MAX_GRAPH_ITERS,
};

/// The most polling intervals a GPU backend lets the driver issue between two polls
/// ([`crate::PcgBackend::poll_growth`]; the emitted driver's `APG_POLL_GROWTH`). A poll stops
/// the device: the records' gather, a synchronisation and the host's turn before the next
/// batch is queued. On 2-5k-row matrices
/// that is 0.26-0.35 us of each iteration at a poll every 16 iterations (one H100, 2026-12-07:
/// the same plans generated with `--check-every 64`, a 64-iteration graph polled every 64
/// iterations, ran 3.4-4.5% faster per iteration over 10000 iterations); four intervals
/// between polls take most of it, and the driver stretches them only while the residual is
/// far from the tolerance.
pub const GPU_POLL_GROWTH: usize = 4;

/// Where the time of putting a GPU backend on the device went, in milliseconds: the parts of
/// its construction (or of a value update) that the device does. Each phase ends with a
/// synchronisation of the stream, so that asynchronous work is counted in the phase that
/// queued it. Host work around them (scaling, checks) belongs to none. All zero on the CPU.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct BackendTimes {
    /// Host-to-device copies of the operands and vectors, device allocations and the fills
    /// that initialise them.
    pub upload_ms: f64,
    /// Format conversions: ELL, DIA and HYB built on the device from the uploaded CSR arrays
    /// (COO, built on the host, is counted here too).
    pub convert_ms: f64,
    /// Compiling (or reading from the on-disk cache) and loading the kernel modules the plan
    /// runs, the conversion kernels included.
    pub load_ms: f64,
    /// Building the preconditioner on the device (first-order factored SSOR-AI built from the
    /// uploaded CSR arrays of `A`, see [`crate::PlannedPrecond`]).
    pub precond_ms: f64,
    /// `A`'s upload ahead of the plan and its checks ([`AheadUpload`]), on a thread of their
    /// own while the plan was chosen: not a part of the construction's time (only the wait for
    /// what was left of it is, in `upload_ms`), and not in [`BackendTimes::total_ms`].
    pub ahead_ms: f64,
}

impl BackendTimes {
    /// The sum of the parts.
    pub fn total_ms(&self) -> f64 {
        self.upload_ms + self.convert_ms + self.load_ms + self.precond_ms
    }
}

#[cfg(feature = "gpu")]
mod ahead;
#[cfg(feature = "gpu")]
mod backend;
#[cfg(feature = "gpu")]
pub(crate) mod ops;
#[cfg(feature = "gpu")]
pub(crate) mod poll;
#[cfg(feature = "gpu")]
pub(crate) mod refresh;

#[cfg(feature = "gpu")]
pub use ahead::{AheadUpload, UploadedA};
#[cfg(feature = "gpu")]
pub use backend::{solve_gpu, GpuBackend, StepTimes, INITIAL_HISTORY, MAX_RESERVED_HISTORY};
