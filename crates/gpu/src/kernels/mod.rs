//! Typed launch wrappers, one Rust function per kernel family, and one enum per family whose
//! `Display` is the CUDA entry-point name (the string the profiler records and the model
//! predicts).
//!
//! Every wrapper checks lengths and the launch configuration before queuing anything, returns
//! without launching when there is no work, and does not wait for the kernel to finish.
use std::fmt::Display;

use cudarc::driver::{LaunchArgs, PushKernelArg};

use crate::device::Kernel;
use crate::kernels::dot::Dot3Workspace;
use crate::sources::{KernelSource, ModuleSpec};
use crate::{CgScalars, DeviceCsr, DeviceVec, GpuDevice, GpuError, LaunchConfig};

pub mod blocks;
pub mod convert;
pub mod dot;
pub mod precond;
pub mod refresh;
pub mod spmv;
pub mod ssor;
pub mod vector;

/// Fails unless `got == want`, naming the kernel and the argument.
pub(crate) fn check_len(
    kernel: &dyn Display,
    what: &str,
    got: usize,
    want: usize,
) -> Result<(), GpuError> {
    if got != want {
        return Err(GpuError::launch(
            kernel,
            format!("{what} has {got} elements, expected {want}"),
        ));
    }
    Ok(())
}

/// Fails unless a one-item-per-thread launch covers `items`.
pub(crate) fn check_covers(
    kernel: &dyn Display,
    cfg: LaunchConfig,
    items: u64,
) -> Result<(), GpuError> {
    if cfg.total_threads() < items {
        let need = items.div_ceil(u64::from(cfg.threads.max(1)));
        return Err(GpuError::launch(
            kernel,
            format!(
                "{} blocks of {} threads cover {} of {items} items; it needs at least {need} blocks",
                cfg.blocks,
                cfg.threads,
                cfg.total_threads()
            ),
        ));
    }
    Ok(())
}

/// One launch of a pool kernel: the entry point, loaded, with its configuration, on the
/// device's stream. A wrapper makes it once its checks have passed and there is work, then
/// [`Launch::run`] pushes the arguments and queues the kernel.
pub(crate) struct Launch<'d> {
    dev: &'d GpuDevice,
    kernel: Kernel,
    cfg: LaunchConfig,
    shared_mem_bytes: u32,
}

impl<'d> Launch<'d> {
    /// Loads `entry` of the module `spec` to run with `cfg` and no dynamic shared memory.
    pub(crate) fn new(
        dev: &'d GpuDevice,
        spec: &ModuleSpec,
        entry: &str,
        cfg: LaunchConfig,
    ) -> Result<Launch<'d>, GpuError> {
        Ok(Launch {
            dev,
            kernel: dev.kernel(spec, entry)?,
            cfg,
            shared_mem_bytes: 0,
        })
    }

    /// [`Launch::new`] for the entry point `kernel` names in `source` compiled without defines.
    pub(crate) fn plain(
        dev: &'d GpuDevice,
        source: KernelSource,
        kernel: &dyn Display,
        cfg: LaunchConfig,
    ) -> Result<Launch<'d>, GpuError> {
        Launch::new(dev, &ModuleSpec::plain(source), &kernel.to_string(), cfg)
    }

    /// The same launch with `bytes` of dynamic shared memory per block.
    pub(crate) fn with_shared_mem(self, bytes: u32) -> Launch<'d> {
        Launch {
            shared_mem_bytes: bytes,
            ..self
        }
    }

    /// Queues the kernel with the arguments `push` gives the launch builder; does not wait. A
    /// failure is a [`GpuError::Driver`] naming the entry point and the configuration.
    ///
    /// # Safety
    /// `push` must push exactly the kernel's parameters, in order, each as its CUDA type
    /// (scalars by reference, arrays as their device buffers); with those arguments and this
    /// configuration every access the kernel makes must fall inside the buffers, and a buffer
    /// the kernel writes must not be another argument of the same launch.
    pub(crate) unsafe fn run<'a>(
        &'a self,
        push: impl FnOnce(&mut LaunchArgs<'a>),
    ) -> Result<(), GpuError> {
        let mut b = self.dev.stream().launch_builder(&self.kernel.func);
        push(&mut b);
        let mut launch_cfg = crate::launch::cudarc_config(self.cfg);
        launch_cfg.shared_mem_bytes = self.shared_mem_bytes;
        // SAFETY: the caller vouches for the arguments (this function's contract).
        unsafe { b.launch(launch_cfg) }.map(|_| ()).map_err(|e| {
            GpuError::driver(
                format!("launching {} with {}", self.kernel.name(), self.cfg),
                e,
            )
        })
    }
}

/// Pushing the groups of arguments several kernels take alike onto a launch, each in the
/// order of the CUDA sources.
pub(crate) trait PushGroups<'a> {
    /// Pushes the row pointers, column indices and values of `a` (`const u32 *indptr,
    /// const u32 *indices, const double *vals`), as every kernel that reads a CSR matrix
    /// takes them.
    fn csr(&mut self, a: &'a DeviceCsr) -> &mut Self;

    /// Pushes the three vectors of the fused dots and the workspace of the last-block
    /// reduction (`const double *r, const double *u, const double *w, double *partial,
    /// u32 *counter`).
    fn dot3_inputs(&mut self, ruw: [&'a DeviceVec<f64>; 3], ws: &'a mut Dot3Workspace)
        -> &mut Self;

    /// Pushes what the recurrence step after the three dots writes: the scalar buffer, its
    /// history and the history capacity, then the iteration when one is given (`double
    /// *scalars, double *history, u32 history_cap[, u32 iteration]`).
    fn recurrence(
        &mut self,
        scalars: &'a mut CgScalars,
        cap: &'a u32,
        iteration: Option<&'a u32>,
    ) -> &mut Self;
}

impl<'a> PushGroups<'a> for LaunchArgs<'a> {
    fn csr(&mut self, a: &'a DeviceCsr) -> &mut Self {
        self.arg(&a.indptr.buf).arg(&a.indices.buf).arg(&a.vals.buf)
    }

    fn dot3_inputs(
        &mut self,
        [r, u, w]: [&'a DeviceVec<f64>; 3],
        ws: &'a mut Dot3Workspace,
    ) -> &mut Self {
        self.arg(&r.buf)
            .arg(&u.buf)
            .arg(&w.buf)
            .arg(&mut ws.partial.buf)
            .arg(&mut ws.counter.buf)
    }

    fn recurrence(
        &mut self,
        scalars: &'a mut CgScalars,
        cap: &'a u32,
        iteration: Option<&'a u32>,
    ) -> &mut Self {
        self.arg(&mut scalars.scalars.buf)
            .arg(&mut scalars.history.buf)
            .arg(cap);
        if let Some(it) = iteration {
            self.arg(it);
        }
        self
    }
}
