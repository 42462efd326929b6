//! The measurement source on a CUDA device, through the GPU crate's launch wrappers, event
//! timer and SpMV benchmark.
//!
//! Timing protocol of the vector and dot stages, per measurement: every kernel was compiled and
//! loaded by [`Measurer::prepare`] before anything is timed; [`autopcg_gpu::time_kernel`] makes one untimed
//! warm-up call, then event-timed samples until at least `min_reps` samples AND `min_ms`
//! milliseconds; the median, the fastest and the slowest sample and the number of samples go to
//! the record. A call that may be shorter than `batch_below_ms` (its bytes at the device's peak
//! bandwidth say so) is first probed (a warm-up and 3 calls); if the probe confirms it, it is
//! timed with [`autopcg_gpu::time_kernel_batched`] in batches of back-to-back calls lasting about
//! `batch_sample_ms`, so that the gap between launches and the event overhead do not dominate:
//! its record's `reps` then counts batches, and min, median and max are those of the batch
//! means.
//!
//! Reductions and vector updates at lengths whose solve iteration fits in half of L2 (at most
//! `l2_bytes / 2 /` [`ITERATION_BYTES_PER_ROW`] elements, 151k on an H200) are timed instead as
//! the solver runs them, from replays of a CUDA graph holding a batch of calls lasting about `batch_sample_ms`
//! ([`autopcg_gpu::time_kernel_replayed`]), every configuration of such a length alike.
//! Launched back to back from the host, every reduction configuration there measures the host's
//! launch pacing (about 6 us), and the trees chose 1024-thread blocks that graph replay shows
//! about 1 us slower per iteration than 256-thread ones (bcsstk13, s3rmt3m3 and 2D Poisson
//! 100^2 with Jacobi, H200, 2026-11-25: the model's plan with only the reduction's launch
//! changed ran 9.26, 9.14 and 13.66 us per iteration against 10.28, 10.11 and 14.79). Above
//! that length a replayed batch would keep the vectors in L2 from call to call, which the
//! solver's iteration does not. The decision trees are made per length, so the two ways never
//! meet in one decision. The updates followed on 2026-12-03. The record schema does not say
//! how a vector or reduction call was timed; the rules above
//! do (in a full sweep, every call under 20 us is batched).
//!
//! The SpMV stage's matrices whose CSR arrays and an iteration's vectors fit in half of L2
//! ([`autopcg_catalog::replays_spmv_at`]) get every product timed both ways: launched alone,
//! as on every matrix, and from graph replays in a second record marked `replayed`. The SpMV
//! model fits the two as two regimes and predicts such a matrix by the replayed one. Timed
//! alone only, every format there measured the launch pacing, and the model's plans on
//! matrices of 1e4-6.4e4 rows were up to 13% slower per iteration than the fixed rule's (CSR
//! products chosen over DIA on stencils; H200, 2026-12-03); replayed times fitted into the
//! one regime instead made the held-out choices on the larger matrices worse (within 5% of
//! the best on 47% of them against 74%).
//!
//! Where the sweep asks for it ([`crate::SweepOptions::spmv_l2_cold`]), the products launched
//! alone are timed with L2 cold instead ([`autopcg_gpu::time_kernel_flushed`]: a read pass over
//! twice the L2 queued ahead of every sample, so the call also starts without the host's
//! launch latency). Repeated, a matrix that fits in L2 alone but not with the rest of its
//! iteration is read from there every time, and each sample carries the launch latency: the
//! H200's model priced SSOR-AI's 13-diagonal explicit product of 3D Poisson 64^3 at 9.2 us
//! against 7.9 us for each of the factored form's two 4-diagonal passes, and its plan ran 8%
//! slower per iteration than the fixed rule's factored form (6.5% on the H100). Timed cold,
//! the H100's model still chose the explicit form (13.1 us against 14.7 us for the two
//! passes) and the plan ran as slowly (2026-12-07): in the solver's iteration the factored
//! form adds about what its two passes take alone (15.7 us), the explicit one 3-7 us more than
//! its product alone by either timing (18.7 us against 11.6 repeated and 13.9 cold), an
//! excess that no timing of one call at a time sees.
//!
//! Every vector and reduction configuration is launched as the plan launches it: a grid of a
//! fixed block count is capped at the blocks that cover the work at the length
//! ([`autopcg_catalog::VectorVariant::launch_at`], [`autopcg_catalog::Reduction::launch_at`]);
//! its record keeps the configuration's own block count (the candidate the models fit), and
//! its time is that of the capped launch. Timed uncapped, the grids of hundreds to thousands of
//! blocks that short vectors leave mostly idle ranked the reductions by the cost of their idle
//! blocks, while the plan ran them with a few dozen: on an H200 the fastest three-dot
//! reduction at 57584 elements took 4.72 us uncapped (two-pass, 512 threads x 528 blocks) and
//! 3.39 us capped (two-pass, 256 threads), and at 172215 elements, timed in stream batches,
//! 6.40 against 5.27 us (2026-11-25, tune's vector and reduction stages measured both ways).
//!
//! Buffers are allocated zeroed on the device (never uploaded from the host) and reused by every
//! configuration of one length. The scalar buffer the fused update reads holds a non-zero alpha
//! and beta, so the update reads and writes all of its vectors as in a PCG iteration after the
//! first.
use autopcg_catalog::SpmvKernel;
use autopcg_gpu::bench::{bench_spmv, RecordStatus};
use autopcg_gpu::kernels::dot::{dot, dot3_advance, Dot3Workspace, DotWorkspace, Reduction};
use autopcg_gpu::kernels::spmv::{
    spmv_csr, spmv_csr_dot3_next, spmv_dia, spmv_dia_dot3_next, spmv_ell, spmv_ell_dot3_next,
    Dot3Epilogue,
};
use autopcg_gpu::kernels::vector::{
    axpy, cg_update, xpay, CgVectors, UpdateU, VectorKernel, VectorOp,
};
use autopcg_gpu::scalars::{CG_ALPHA, CG_BETA, CG_SCALARS_LEN};
use autopcg_gpu::sources::{KernelSource, ModuleSpec};
use autopcg_gpu::{
    replays_like_the_solver, time_call, CgScalars, DeviceProps, DeviceVec, GpuDevice, GpuError,
    ShortCalls, SpmvBenchOptions, TimingStats, ITERATION_BYTES_PER_ROW,
};
use autopcg_gpu::{DeviceCsr, DeviceDia, DeviceEll};
use autopcg_model::profile::{ConversionRecord, EpilogueVariant, SpmvRecord, Status, Timing};
use autopcg_sparse::dia::DiaMatrix;
use autopcg_sparse::ell::EllMatrix;
use autopcg_sparse::{CsrMatrix, PaddingLimits};

use crate::measure::{MatrixBench, Measurer};
use crate::occupancy::KernelResources;
use crate::plan::{
    reduction_vectors, vector_bytes_per_elem, DotPoint, EpiloguePoint, KernelRef, TimingPolicy,
    VectorPoint,
};
use crate::ProfilerError;

/// Bandwidth assumed when the driver does not report the memory clock and bus width, bytes per
/// second (high, so that short calls are rather probed than not).
const FALLBACK_PEAK_BPS: f64 = 5e12;

struct VectorBufs {
    n: u64,
    u: DeviceVec<f64>,
    w: DeviceVec<f64>,
    p: DeviceVec<f64>,
    s: DeviceVec<f64>,
    x: DeviceVec<f64>,
    r: DeviceVec<f64>,
    scalars: CgScalars,
}

struct DotBufs {
    n: u64,
    r: DeviceVec<f64>,
    u: DeviceVec<f64>,
    w: DeviceVec<f64>,
    ws: DotWorkspace,
    ws3: Dot3Workspace,
    scalars: CgScalars,
}

/// The epilogue stage's matrix in every format it times, and the iteration's vectors.
struct EpilogueBufs {
    n: u64,
    row_entries: u32,
    csr: DeviceCsr,
    ell: DeviceEll,
    dia: DeviceDia,
    u: DeviceVec<f64>,
    w: DeviceVec<f64>,
    r: DeviceVec<f64>,
    ws3: Dot3Workspace,
    scalars: CgScalars,
}

/// The epilogue stage's banded matrix of `n` rows and `row_entries` (odd) entries in its
/// inner rows: columns `i - h ..= i + h` with `h = row_entries / 2`, `-1` off the diagonal and
/// `2 h` on it (3 entries: the tridiagonal `[-1, 2, -1]`; see
/// [`crate::plan::EPILOGUE_NARROW_ENTRIES`] and [`crate::plan::EPILOGUE_WIDE_ENTRIES`]).
pub fn banded(n: usize, row_entries: u32) -> Result<CsrMatrix, ProfilerError> {
    let bad = |e: autopcg_sparse::SparseError| {
        ProfilerError::Measurement(format!("the epilogue stage's matrix of {n} rows: {e}"))
    };
    if row_entries % 2 == 0 {
        return Err(ProfilerError::InvalidOption(format!(
            "a band of {row_entries} entries a row is not symmetric about the diagonal"
        )));
    }
    let h = (row_entries / 2) as usize;
    let idx = |i: usize| {
        u32::try_from(i).map_err(|_| {
            ProfilerError::InvalidOption(format!(
                "{n} rows of {row_entries} entries do not fit 32-bit indices"
            ))
        })
    };
    let cap = n.saturating_mul(row_entries as usize);
    let mut indptr = Vec::with_capacity(n + 1);
    let mut indices = Vec::with_capacity(cap);
    let mut vals = Vec::with_capacity(cap);
    indptr.push(0);
    for i in 0..n {
        for j in i.saturating_sub(h)..=(i + h).min(n.saturating_sub(1)) {
            indices.push(idx(j)?);
            vals.push(if j == i { 2.0 * h as f64 } else { -1.0 });
        }
        indptr.push(idx(indices.len())?);
    }
    CsrMatrix::try_from_parts(n, n, indptr, indices, vals).map_err(bad)
}

/// [`Measurer`] on one CUDA device.
pub struct GpuMeasurer<'d> {
    dev: &'d GpuDevice,
    props: DeviceProps,
    peak_bps: f64,
    vectors: Option<VectorBufs>,
    dots: Option<DotBufs>,
    epilogue: Option<EpilogueBufs>,
}

impl<'d> GpuMeasurer<'d> {
    /// A measurement source on `dev`.
    pub fn new(dev: &'d GpuDevice) -> GpuMeasurer<'d> {
        let props = dev.props();
        GpuMeasurer {
            dev,
            props: props.clone(),
            peak_bps: props
                .peak_bandwidth_gbs()
                .map_or(FALLBACK_PEAK_BPS, |g| g * 1e9),
            vectors: None,
            dots: None,
            epilogue: None,
        }
    }

    fn missing(what: &str) -> ProfilerError {
        ProfilerError::Measurement(format!("{what} timed before its buffers were allocated"))
    }
}

fn to_usize(n: u64) -> Result<usize, ProfilerError> {
    usize::try_from(n).map_err(|_| ProfilerError::InvalidOption(format!("length {n} too large")))
}

fn timing(s: TimingStats) -> Timing {
    Timing {
        median_ms: s.median_ms,
        min_ms: s.min_ms,
        max_ms: s.max_ms,
        reps: s.reps,
    }
}

/// Times `launch` by the policy (see the module documentation); `est_ms` is the call's
/// shortest plausible time, `replay` whether its length is timed from graph replays.
fn timed(
    dev: &GpuDevice,
    launch: impl FnMut() -> Result<(), GpuError>,
    est_ms: f64,
    replay: bool,
    pol: &TimingPolicy,
) -> Result<Timing, GpuError> {
    let short = ShortCalls {
        below_ms: pol.batch_below_ms,
        sample_ms: pol.batch_sample_ms,
        max_batch: pol.max_batch,
        stream_batches: true,
    };
    time_call(
        dev,
        launch,
        est_ms,
        replay,
        &short,
        pol.min_reps,
        pol.min_ms,
    )
    .map(|(s, _)| timing(s))
}

/// Whether reductions of `n` elements are timed from graph replays (see the module
/// documentation).
pub fn replays_reductions_at(l2_bytes: u32, n: u64) -> bool {
    replays_like_the_solver(
        n.saturating_mul(ITERATION_BYTES_PER_ROW),
        u64::from(l2_bytes),
    )
}

fn status(s: RecordStatus) -> Status {
    match s {
        RecordStatus::Ok => Status::Ok,
        RecordStatus::Skipped(r) => Status::Skipped(r),
        RecordStatus::Failed(r) => Status::Failed(r),
    }
}

impl Measurer for GpuMeasurer<'_> {
    fn device(&self) -> &DeviceProps {
        &self.props
    }

    fn prepare(&mut self) -> Result<(), ProfilerError> {
        self.dev.compile_all()?;
        Ok(())
    }

    fn resources(&mut self, kernel: KernelRef) -> Result<KernelResources, ProfilerError> {
        let k = match kernel {
            KernelRef::Vector(k) => self
                .dev
                .kernel(&ModuleSpec::plain(KernelSource::Vector), &k.to_string())?,
            KernelRef::Dot(op, b) => self.dev.kernel(&ModuleSpec::dot(b), &op.to_string())?,
            KernelRef::SpmvDot3(k) => self.dev.kernel(
                &ModuleSpec::plain(k.source()),
                k.dot3_entry_point().unwrap_or_default(),
            )?,
        };
        let a = k.attrs();
        Ok(KernelResources {
            regs_per_thread: a.num_regs,
            static_smem_bytes: a.static_smem_bytes,
            max_threads_per_block: a.max_threads_per_block,
        })
    }

    fn mem_info(&mut self) -> Result<(u64, u64), ProfilerError> {
        let (free, total) = self.dev.mem_info()?;
        Ok((free as u64, total as u64))
    }

    fn alloc_vectors(&mut self, n: u64) -> Result<(), ProfilerError> {
        self.free()?;
        let len = to_usize(n)?;
        let dev = self.dev;
        let mut scalars = CgScalars::new(dev, 1)?;
        let mut raw = [0.0; CG_SCALARS_LEN];
        raw[CG_ALPHA] = 0.5;
        raw[CG_BETA] = 0.25;
        scalars.write_raw(dev, &raw)?;
        self.vectors = Some(VectorBufs {
            n,
            u: dev.alloc_zeros(len)?,
            w: dev.alloc_zeros(len)?,
            p: dev.alloc_zeros(len)?,
            s: dev.alloc_zeros(len)?,
            x: dev.alloc_zeros(len)?,
            r: dev.alloc_zeros(len)?,
            scalars,
        });
        dev.synchronize()?;
        Ok(())
    }

    fn time_vector(
        &mut self,
        point: &VectorPoint,
        policy: &TimingPolicy,
    ) -> Result<Timing, ProfilerError> {
        let dev = self.dev;
        let b = self
            .vectors
            .as_mut()
            .ok_or_else(|| GpuMeasurer::missing("a vector update"))?;
        let est_ms = (vector_bytes_per_elem(point.kernel) * b.n) as f64 / self.peak_bps * 1e3;
        let replay = replays_reductions_at(dev.props().l2_bytes, b.n);
        let cfg = point.kernel.variant().launch_at(point.cfg, b.n);
        let t = match point.kernel {
            VectorKernel::CgUpdate(v)
            | VectorKernel::CgUpdateNoPre(v)
            | VectorKernel::CgUpdateJacobi(v) => {
                let op = point.kernel.op();
                timed(
                    dev,
                    || {
                        // The Jacobi form reads w as its inverse diagonal too (both reads).
                        let u = match op {
                            VectorOp::CgUpdateNoPre => UpdateU::IsR,
                            VectorOp::CgUpdateJacobi => UpdateU::Jacobi {
                                inv_diag: &b.w,
                                u: &mut b.u,
                            },
                            _ => UpdateU::Separate(&b.u),
                        };
                        cg_update(
                            dev,
                            v,
                            cfg,
                            &b.scalars,
                            CgVectors {
                                u,
                                w: &b.w,
                                p: &mut b.p,
                                s: &mut b.s,
                                x: &mut b.x,
                                r: &mut b.r,
                            },
                        )
                    },
                    est_ms,
                    replay,
                    policy,
                )?
            }
            VectorKernel::Axpy(v) => timed(
                dev,
                || axpy(dev, v, cfg, 0.5, &b.u, &mut b.p),
                est_ms,
                replay,
                policy,
            )?,
            VectorKernel::Xpay(v) => timed(
                dev,
                || xpay(dev, v, cfg, 0.5, &b.u, &mut b.p),
                est_ms,
                replay,
                policy,
            )?,
        };
        Ok(t)
    }

    fn alloc_dots(
        &mut self,
        n: u64,
        max_dot_blocks: u32,
        max_dot3_blocks: u32,
    ) -> Result<(), ProfilerError> {
        self.free()?;
        let len = to_usize(n)?;
        let dev = self.dev;
        self.dots = Some(DotBufs {
            n,
            r: dev.alloc_zeros(len)?,
            u: dev.alloc_zeros(len)?,
            w: dev.alloc_zeros(len)?,
            ws: DotWorkspace::new(dev, max_dot_blocks)?,
            ws3: Dot3Workspace::new(dev, max_dot3_blocks)?,
            scalars: CgScalars::new(dev, 1)?,
        });
        dev.synchronize()?;
        Ok(())
    }

    fn time_dot(
        &mut self,
        point: &DotPoint,
        policy: &TimingPolicy,
    ) -> Result<Timing, ProfilerError> {
        let dev = self.dev;
        let b = self
            .dots
            .as_mut()
            .ok_or_else(|| GpuMeasurer::missing("a reduction"))?;
        let est_ms = (8 * reduction_vectors(point.op) * b.n) as f64 / self.peak_bps * 1e3;
        let replay = replays_reductions_at(dev.props().l2_bytes, b.n);
        let cfg = point.op.launch_at(point.cfg, b.n);
        let t = match point.op {
            Reduction::Dot(k) => timed(
                dev,
                || dot(dev, k, cfg, &b.r, &b.u, &mut b.ws),
                est_ms,
                replay,
                policy,
            )?,
            // Iteration 0 (a start) every time: the reduction is the same as at any iteration
            // and the one-thread recurrence after it does not depend on the values.
            Reduction::Dot3(k) => timed(
                dev,
                || dot3_advance(dev, k, cfg, &b.r, &b.u, &b.w, &mut b.ws3, &mut b.scalars, 0),
                est_ms,
                replay,
                policy,
            )?,
        };
        Ok(t)
    }

    fn alloc_epilogue(
        &mut self,
        n: u64,
        row_entries: u32,
        max_fused_blocks: u32,
    ) -> Result<(), ProfilerError> {
        self.free()?;
        let len = to_usize(n)?;
        let dev = self.dev;
        let a = banded(len, row_entries)?;
        let limits = PaddingLimits::default();
        let conv = |e: autopcg_sparse::SparseError| {
            ProfilerError::Measurement(format!("the epilogue stage's matrix of {n} rows: {e}"))
        };
        let ell = EllMatrix::from_csr(&a, &limits).map_err(conv)?;
        let dia = DiaMatrix::from_csr(&a, &limits).map_err(conv)?;
        self.epilogue = Some(EpilogueBufs {
            n,
            row_entries,
            csr: DeviceCsr::upload(dev, &a)?,
            ell: DeviceEll::upload(dev, &ell)?,
            dia: DeviceDia::upload(dev, &dia)?,
            u: dev.alloc_zeros(len)?,
            w: dev.alloc_zeros(len)?,
            r: dev.alloc_zeros(len)?,
            ws3: Dot3Workspace::new(dev, max_fused_blocks.max(1))?,
            scalars: CgScalars::new(dev, 1)?,
        });
        dev.synchronize()?;
        Ok(())
    }

    /// The plain product or the dot3 variant at the point's launch, timed as the dot stage
    /// times reductions (graph replays while the iteration fits in half of L2). The vectors
    /// are zeros: no kernel's work depends on the values, and the recurrence after a halt
    /// still runs in full.
    fn time_epilogue(
        &mut self,
        point: &EpiloguePoint,
        policy: &TimingPolicy,
    ) -> Result<Timing, ProfilerError> {
        let dev = self.dev;
        let b = self
            .epilogue
            .as_mut()
            .ok_or_else(|| GpuMeasurer::missing("an epilogue launch"))?;
        let plain_per_row = 12 * u64::from(b.row_entries) + 16;
        let per_row: u64 = match point.variant {
            EpilogueVariant::Plain => plain_per_row,
            _ => plain_per_row + 24,
        };
        let est_ms = (per_row * b.n) as f64 / self.peak_bps * 1e3;
        let replay = replays_reductions_at(dev.props().l2_bytes, b.n);
        let (k, cfg) = (point.kernel, point.cfg);
        let EpilogueBufs {
            csr,
            ell,
            dia,
            u,
            w,
            r,
            ws3,
            scalars,
            ..
        } = b;
        let t = match point.variant {
            EpilogueVariant::Plain => timed(
                dev,
                || match k {
                    SpmvKernel::Ell => spmv_ell(dev, ell, cfg, u, w),
                    SpmvKernel::Dia => spmv_dia(dev, dia, cfg, u, w),
                    _ => spmv_csr(dev, csr, k, cfg, u, w),
                },
                est_ms,
                replay,
                policy,
            )?,
            v => {
                let aliased = v == EpilogueVariant::FusedAliased;
                timed(
                    dev,
                    || {
                        let e = Dot3Epilogue {
                            r: if aliased { &*u } else { &*r },
                            ws: &mut *ws3,
                            scalars: &mut *scalars,
                        };
                        match k {
                            SpmvKernel::Ell => spmv_ell_dot3_next(dev, ell, cfg, u, w, e),
                            SpmvKernel::Dia => spmv_dia_dot3_next(dev, dia, cfg, u, w, e),
                            _ => spmv_csr_dot3_next(dev, csr, k, cfg, u, w, e),
                        }
                    },
                    est_ms,
                    replay,
                    policy,
                )?
            }
        };
        Ok(t)
    }

    fn free(&mut self) -> Result<(), ProfilerError> {
        let had = self.vectors.is_some() || self.dots.is_some() || self.epilogue.is_some();
        self.vectors = None;
        self.dots = None;
        self.epilogue = None;
        if had {
            // Frees are queued on the stream; wait so that mem_info sees them.
            self.dev.synchronize()?;
        }
        Ok(())
    }

    fn bench_matrix(
        &mut self,
        id: &str,
        a: &CsrMatrix,
        opts: &SpmvBenchOptions,
    ) -> Result<MatrixBench, ProfilerError> {
        self.free()?;
        let b = bench_spmv(self.dev, a, opts)?;
        self.dev.synchronize()?;
        // A product timed from graph replays as well gives a second record, `replayed`.
        let spmv = b
            .records
            .into_iter()
            .flat_map(|r| {
                let alone = SpmvRecord {
                    matrix: id.to_string(),
                    launch: r.launch,
                    timing: match (r.median_ms, r.min_ms, r.max_ms, r.reps) {
                        (Some(median_ms), Some(min_ms), Some(max_ms), Some(reps)) => Some(Timing {
                            median_ms,
                            min_ms,
                            max_ms,
                            reps,
                        }),
                        _ => None,
                    },
                    status: status(r.status),
                    replayed: false,
                    l2_flushed: r.l2_flushed,
                };
                let replayed = r.replayed.map(|t| SpmvRecord {
                    timing: Some(Timing {
                        median_ms: t.median_ms,
                        min_ms: t.min_ms,
                        max_ms: t.max_ms,
                        reps: t.reps,
                    }),
                    replayed: true,
                    l2_flushed: false,
                    ..alone.clone()
                });
                std::iter::once(alone).chain(replayed)
            })
            .collect();
        let conversions = b
            .conversions
            .into_iter()
            .map(|c| ConversionRecord {
                matrix: id.to_string(),
                format: c.format,
                status: status(c.status),
                host_ms: c.host_ms,
                upload_ms: c.upload_ms,
                device_ms: c.device_ms,
                device_bytes: c.device_bytes,
            })
            .collect();
        Ok(MatrixBench {
            features: b.matrix,
            spmv,
            conversions,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::replays_reductions_at;

    #[test]
    fn reductions_replay_while_the_iteration_fits_in_half_of_l2() {
        // H200: 60 MiB of L2, 208 bytes per row: up to 151236 elements.
        assert!(replays_reductions_at(62_914_560, 151_236));
        assert!(!replays_reductions_at(62_914_560, 151_237));
        // H100: 50 MiB.
        assert!(replays_reductions_at(52_428_800, 126_030));
        assert!(!replays_reductions_at(52_428_800, 126_031));
        assert!(!replays_reductions_at(62_914_560, u64::MAX));
    }
}
