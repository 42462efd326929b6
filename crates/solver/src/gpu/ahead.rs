//! `A` uploaded ahead of the plan: its CSR arrays cross the bus, and the checks the backend
//! needs of them (the largest magnitude, the diagonal, `||A||_inf`) are taken, while the host
//! chooses the plan, which reads only `A`'s pattern and counts. Every format the backend runs
//! is made from these arrays on the device (COO excepted, made on the host), so none of the
//! upload depends on the plan.
//!
//! The copies into the page-locked staging buffers run on a small thread pool of their own
//! ([`AheadUpload::run`]), never on the global one: the plan's thread may wait for the upload
//! ([`AheadUpload::with`]) while holding a worker of the global pool, and an upload that
//! needed that pool's workers could then wait for it in turn.
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::Instant;

use autopcg_gpu::kernels::ssor::{row_checks, GramPattern, K2Pattern};
use autopcg_gpu::{DeviceCsr, GpuDevice};
use autopcg_sparse::CsrMatrix;

use crate::PcgError;

/// Host threads that fill the staging buffers of an upload ahead: enough to keep up with the
/// bus (one thread's streaming copies run at a third to a half of it), few enough to leave the
/// plan's passes most of the host.
const AHEAD_THREADS_MAX: usize = 8;

/// `A` on the device with what the backend checks of it, taken as it was uploaded.
#[derive(Debug)]
pub struct UploadedA {
    pub(crate) csr: DeviceCsr,
    /// The largest `|a_ij|` (NaNs ignored), read from the values as they were copied.
    pub(crate) max_abs: f64,
    /// The first row (0-based) whose diagonal entry is missing, or not positive and finite.
    pub(crate) bad_diagonal: Option<usize>,
    /// `||A||_inf`.
    pub(crate) inf_norm: f64,
    /// Milliseconds the upload and the checks took.
    pub(crate) ms: f64,
    /// The explicit product's pattern as the plan's count found it from these arrays, kept
    /// for the backend's build of the product ([`UploadedA::keep_gram_pattern`]).
    pub(crate) gram: Mutex<Option<GramPattern>>,
    /// Second-order SSOR-AI's factors' patterns as the plan's count found them from these
    /// arrays, kept for the backend's build of the factors ([`UploadedA::keep_k2_pattern`]).
    pub(crate) k2: Mutex<Option<K2Pattern>>,
}

impl UploadedA {
    /// Uploads `a` to `dev` and checks it there (one launch, [`row_checks`]); returns when
    /// both are done. The staging buffers are filled by the threads of the pool this runs in.
    pub fn upload(dev: &GpuDevice, a: &CsrMatrix) -> Result<UploadedA, PcgError> {
        let t = Instant::now();
        let (csr, max_abs) = DeviceCsr::upload_with_max_abs(dev, a)?;
        let checks = row_checks(dev, &csr)?;
        Ok(UploadedA {
            csr,
            max_abs,
            bad_diagonal: checks.bad_diagonal,
            inf_norm: checks.inf_norm,
            ms: t.elapsed().as_secs_f64() * 1e3,
            gram: Mutex::new(None),
            k2: Mutex::new(None),
        })
    }

    /// Keeps what a count of the explicit SSOR-AI product found of its pattern from these
    /// arrays (`autopcg_gpu::kernels::ssor::ssor_k1_gram_count_kept`), for the backend to
    /// form the product without counting its rows again where the plan takes that form.
    pub fn keep_gram_pattern(&self, pattern: GramPattern) {
        *self.gram.lock().unwrap_or_else(|p| p.into_inner()) = Some(pattern);
    }

    /// Keeps what a count of second-order SSOR-AI's factors found of their patterns from
    /// these arrays (`autopcg_gpu::kernels::ssor::ssor_k2_totals_kept`), for the backend to
    /// build the factors without merging their rows again.
    pub fn keep_k2_pattern(&self, pattern: K2Pattern) {
        *self.k2.lock().unwrap_or_else(|p| p.into_inner()) = Some(pattern);
    }

    /// The uploaded arrays.
    pub fn matrix(&self) -> &DeviceCsr {
        &self.csr
    }

    /// The largest `|a_ij|` (NaNs ignored), as `autopcg_solver::scaling::max_abs` finds it.
    pub fn max_abs(&self) -> f64 {
        self.max_abs
    }

    /// The first row (0-based) whose diagonal entry is missing, or not positive and finite.
    pub fn bad_diagonal(&self) -> Option<usize> {
        self.bad_diagonal
    }

    /// `||A||_inf` (rows whose sum is NaN skipped).
    pub fn inf_norm(&self) -> f64 {
        self.inf_norm
    }

    /// Milliseconds the upload and its checks took (on their own thread: they overlap what
    /// the caller did meanwhile).
    pub fn ms(&self) -> f64 {
        self.ms
    }

    /// Whether these are the arrays of `a` by their shape (the caller answers for the values).
    pub fn fits(&self, a: &CsrMatrix) -> bool {
        self.csr.shape() == (a.nrows(), a.ncols()) && self.csr.nnz() == a.nnz()
    }
}

/// The pool whose threads fill the staging buffers of uploads ahead (made at the first one);
/// `None` when its threads could not be started.
fn ahead_pool() -> Option<&'static rayon::ThreadPool> {
    static POOL: OnceLock<Option<rayon::ThreadPool>> = OnceLock::new();
    POOL.get_or_init(|| {
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get() / 2)
            .clamp(1, AHEAD_THREADS_MAX);
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("upload ahead {i}"))
            .build()
            .ok()
    })
    .as_ref()
}

/// An upload of `A` run on one thread ([`AheadUpload::run`]) while others go on, and waited
/// for where its result is needed ([`AheadUpload::with`], [`AheadUpload::take`]).
#[derive(Default)]
pub struct AheadUpload {
    state: Mutex<Ahead>,
    done: Condvar,
}

#[derive(Default)]
enum Ahead {
    #[default]
    Running,
    Done(Box<Result<UploadedA, PcgError>>),
    Taken,
}

impl AheadUpload {
    /// An upload not yet run.
    pub fn new() -> Self {
        Self::default()
    }

    /// Uploads `a` to `dev` ([`UploadedA::upload`], its copies filled by a pool of its own)
    /// and wakes whoever waits. Run once, on a thread of its own; a failure (a panic included)
    /// is kept as the result, for the backend to upload `a` itself.
    pub fn run(&self, dev: &GpuDevice, a: &CsrMatrix) {
        let result = match ahead_pool() {
            Some(pool) => catch_unwind(AssertUnwindSafe(|| {
                pool.install(|| UploadedA::upload(dev, a))
            }))
            .unwrap_or_else(|_| {
                Err(PcgError::Backend(
                    "the upload of A ahead of the plan panicked".into(),
                ))
            }),
            None => Err(PcgError::Backend(
                "no threads for the upload of A ahead of the plan".into(),
            )),
        };
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        *state = Ahead::Done(Box::new(result));
        self.done.notify_all();
    }

    /// Waits for the upload, then gives `f` the uploaded matrix (`None` when it failed, or
    /// was taken).
    pub fn with<R>(&self, f: impl FnOnce(Option<&UploadedA>) -> R) -> R {
        let state = self.wait();
        match &*state {
            Ahead::Done(r) => f(r.as_ref().as_ref().ok()),
            _ => f(None),
        }
    }

    /// Waits for the upload and takes its result (an error when it failed or was taken).
    pub fn take(&self) -> Result<UploadedA, PcgError> {
        let mut state = self.wait();
        match std::mem::replace(&mut *state, Ahead::Taken) {
            Ahead::Done(r) => *r,
            _ => Err(PcgError::Backend(
                "the upload of A ahead of the plan was taken twice (internal error)".into(),
            )),
        }
    }

    fn wait(&self) -> std::sync::MutexGuard<'_, Ahead> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        while matches!(*state, Ahead::Running) {
            state = self.done.wait(state).unwrap_or_else(|p| p.into_inner());
        }
        state
    }
}
