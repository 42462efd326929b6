//! A deterministic measurement source for tests of the sweep logic on machines without a GPU:
//! times come from a formula of the bytes moved and the launch configuration, kernel resources
//! are fixed figures, device memory is a counter, and a failure can be injected after a given
//! number of measurements (an interrupted tune), or a disturbance over a range of them (another
//! process on the GPU while the sweep times: every time of the range multiplied).
use autopcg_catalog::{
    replays_spmv_at, CusparseAlg, DeviceProps, Format, GridPolicy, Reduction, SpmvImpl, SpmvKernel,
    SpmvLaunch,
};
use autopcg_gpu::kernels::vector::VectorKernel;
use autopcg_gpu::SpmvBenchOptions;
use autopcg_model::profile::{ConversionRecord, EpilogueVariant, SpmvRecord, Status, Timing};
use autopcg_sparse::features::features;
use autopcg_sparse::CsrMatrix;

use crate::measure::{MatrixBench, Measurer};
use crate::occupancy::KernelResources;
use crate::plan::{
    dot_stage_bytes, epilogue_stage_bytes, reduction_vectors, vector_bytes_per_elem,
    vector_stage_bytes, DotPoint, EpiloguePoint, KernelRef, TimingPolicy, VectorPoint,
};
use crate::ProfilerError;

/// Limits of an H100/H200-like device (132 SMs, compute capability 9.0) with `total_mem` bytes.
pub fn hopper_like_props_with_memory(total_mem: u64) -> DeviceProps {
    DeviceProps {
        name: "Fake Hopper".into(),
        total_mem,
        l2_bytes: 60 << 20,
        ..DeviceProps::hopper_like()
    }
}

/// [`hopper_like_props_with_memory`] with 141 GB, an H200.
pub fn hopper_like_props() -> DeviceProps {
    hopper_like_props_with_memory(141_000_000_000)
}

/// A [`Measurer`] whose results are formulas (see the module documentation).
#[derive(Debug, Clone)]
pub struct FakeMeasurer {
    spec: DeviceProps,
    /// Fail every measurement after this many succeeded.
    pub fail_after: Option<usize>,
    /// Measurements that succeeded (vector, dot and whole matrices).
    pub measured: usize,
    /// Times of the vector, dot and epilogue measurements numbered (from 0, in
    /// [`FakeMeasurer::measured`]'s count) in `.0` multiplied by `.1`.
    pub disturbed: Option<(std::ops::Range<usize>, f64)>,
    /// Block-size limit reported for every `axpy` kernel (the others report 1024).
    pub axpy_max_threads: u32,
    allocated: u64,
    /// Largest simultaneous allocation seen, bytes.
    pub peak_allocated: u64,
    n: u64,
    /// Entries a row of the epilogue stage's matrix.
    row_entries: u64,
    prepared: bool,
}

impl FakeMeasurer {
    /// A fake source for `spec`.
    pub fn new(spec: DeviceProps) -> FakeMeasurer {
        FakeMeasurer {
            spec,
            fail_after: None,
            measured: 0,
            disturbed: None,
            axpy_max_threads: 1024,
            allocated: 0,
            peak_allocated: 0,
            n: 0,
            row_entries: 0,
            prepared: false,
        }
    }

    fn tick(&mut self) -> Result<(), ProfilerError> {
        if !self.prepared {
            return Err(ProfilerError::Measurement(
                "timed before prepare() compiled the kernels".into(),
            ));
        }
        if let Some(k) = self.fail_after {
            if self.measured >= k {
                return Err(ProfilerError::Measurement(format!(
                    "injected failure after {k} measurements"
                )));
            }
        }
        self.measured += 1;
        Ok(())
    }

    /// `t` as the measurement just counted by [`FakeMeasurer::tick`] reads it: multiplied
    /// inside the disturbed range.
    fn as_read(&self, mut t: Timing) -> Timing {
        if let Some((range, factor)) = &self.disturbed {
            if range.contains(&(self.measured - 1)) {
                t.median_ms *= factor;
                t.min_ms *= factor;
                t.max_ms *= factor;
            }
        }
        t
    }

    fn alloc(&mut self, bytes: u64) -> Result<(), ProfilerError> {
        self.allocated = 0;
        if bytes > self.spec.total_mem {
            return Err(ProfilerError::Measurement(format!(
                "out of memory: {bytes} bytes asked of {}",
                self.spec.total_mem
            )));
        }
        self.allocated = bytes;
        self.peak_allocated = self.peak_allocated.max(bytes);
        Ok(())
    }

    /// The time formula: bytes at 3 TB/s, a 3 us launch, and small penalties away from 256
    /// threads and for extra blocks.
    fn formula(bytes: u64, threads: u32, extra: u32) -> Timing {
        let t = 3e-3
            + bytes as f64 / 3e9
            + 1e-4 * (f64::from(threads) - 256.0).abs() / 256.0
            + 1e-5 * f64::from(extra);
        Timing {
            median_ms: t,
            min_ms: 0.95 * t,
            max_ms: 1.1 * t,
            reps: 5,
        }
    }
}

impl Measurer for FakeMeasurer {
    fn device(&self) -> &DeviceProps {
        &self.spec
    }

    fn prepare(&mut self) -> Result<(), ProfilerError> {
        self.prepared = true;
        Ok(())
    }

    fn resources(&mut self, kernel: KernelRef) -> Result<KernelResources, ProfilerError> {
        Ok(match kernel {
            KernelRef::Vector(k) => KernelResources {
                regs_per_thread: 32,
                static_smem_bytes: 0,
                max_threads_per_block: if matches!(k, VectorKernel::Axpy(_)) {
                    self.axpy_max_threads
                } else {
                    1024
                },
            },
            KernelRef::Dot(op, b) => KernelResources {
                regs_per_thread: 40,
                static_smem_bytes: match op {
                    Reduction::Dot(_) => 8 * b,
                    Reduction::Dot3(_) => 768,
                },
                max_threads_per_block: b,
            },
            // 40 registers, as the CSR vector variants compile on an H200: 6 blocks of 256
            // threads per SM.
            KernelRef::SpmvDot3(_) => KernelResources {
                regs_per_thread: 40,
                static_smem_bytes: 768,
                max_threads_per_block: 1024,
            },
        })
    }

    fn mem_info(&mut self) -> Result<(u64, u64), ProfilerError> {
        let total = self.spec.total_mem;
        Ok((total.saturating_sub(self.allocated), total))
    }

    fn alloc_vectors(&mut self, n: u64) -> Result<(), ProfilerError> {
        self.alloc(vector_stage_bytes(n))?;
        self.n = n;
        Ok(())
    }

    fn time_vector(
        &mut self,
        point: &VectorPoint,
        _policy: &TimingPolicy,
    ) -> Result<Timing, ProfilerError> {
        self.tick()?;
        let bytes = vector_bytes_per_elem(point.kernel) * self.n;
        Ok(self.as_read(FakeMeasurer::formula(
            bytes,
            point.cfg.threads,
            point.nb_multiple.unwrap_or(0),
        )))
    }

    fn alloc_dots(
        &mut self,
        n: u64,
        max_dot_blocks: u32,
        max_dot3_blocks: u32,
    ) -> Result<(), ProfilerError> {
        self.alloc(dot_stage_bytes(n, max_dot_blocks, max_dot3_blocks))?;
        self.n = n;
        Ok(())
    }

    fn time_dot(
        &mut self,
        point: &DotPoint,
        _policy: &TimingPolicy,
    ) -> Result<Timing, ProfilerError> {
        self.tick()?;
        let bytes = 8 * reduction_vectors(point.op) * self.n;
        Ok(self.as_read(FakeMeasurer::formula(
            bytes,
            point.cfg.threads,
            point.nb_multiple.unwrap_or(0),
        )))
    }

    fn alloc_epilogue(
        &mut self,
        n: u64,
        row_entries: u32,
        max_fused_blocks: u32,
    ) -> Result<(), ProfilerError> {
        self.alloc(epilogue_stage_bytes(n, row_entries, max_fused_blocks))?;
        self.n = n;
        self.row_entries = u64::from(row_entries);
        Ok(())
    }

    /// The banded product (12 bytes an entry and 16 a row), and the fused kernels' dots (24
    /// bytes a row, 16 when u = r, and 2 bytes an entry: the fused loops' slower product) plus
    /// 2 us of finish.
    fn time_epilogue(
        &mut self,
        point: &EpiloguePoint,
        _policy: &TimingPolicy,
    ) -> Result<Timing, ProfilerError> {
        self.tick()?;
        let plain = (12 * self.row_entries + 16) * self.n;
        let fused = plain + 2 * self.row_entries * self.n;
        let (bytes, extra) = match point.variant {
            EpilogueVariant::Plain => (plain, 0),
            EpilogueVariant::Fused => (fused + 24 * self.n, 200),
            EpilogueVariant::FusedAliased => (fused + 16 * self.n, 200),
        };
        Ok(self.as_read(FakeMeasurer::formula(bytes, point.cfg.threads, extra)))
    }

    fn free(&mut self) -> Result<(), ProfilerError> {
        self.allocated = 0;
        Ok(())
    }

    fn bench_matrix(
        &mut self,
        id: &str,
        a: &CsrMatrix,
        opts: &SpmvBenchOptions,
    ) -> Result<MatrixBench, ProfilerError> {
        self.tick()?;
        self.allocated = 0;
        let f = features(a);
        let bytes = 12 * a.nnz() as u64 + 20 * a.nrows() as u64;
        let mut spmv = Vec::new();
        let rec = |kernel: SpmvImpl, t: Option<u32>, g: Option<GridPolicy>, k: u32| {
            let blocks = t.map(|t| (a.nrows() as u64).div_ceil(u64::from(t)).max(1) as u32);
            SpmvRecord {
                matrix: id.to_string(),
                launch: SpmvLaunch {
                    format: kernel.format(),
                    kernel,
                    threads: t,
                    blocks: if g == Some(GridPolicy::Wave) {
                        blocks.map(|b| b.min(132 * 8))
                    } else {
                        blocks
                    },
                    coo_blocks: None,
                    grid: g,
                },
                status: Status::Ok,
                timing: Some(FakeMeasurer::formula(bytes, t.unwrap_or(256), k)),
                replayed: false,
                l2_flushed: opts.flush_l2,
            }
        };
        let csr = [SpmvKernel::CsrScalar, SpmvKernel::CsrVector(4)];
        for (k, &kernel) in csr.iter().enumerate() {
            for &t in &opts.threads {
                for &g in &opts.grids {
                    let r = rec(SpmvImpl::Kernel(kernel), Some(t), Some(g), k as u32);
                    // The benchmark leaves out a policy that repeats a configuration.
                    if !spmv.iter().any(|o: &SpmvRecord| {
                        o.candidate() == r.candidate() && o.launch.blocks == r.launch.blocks
                    }) {
                        spmv.push(r);
                    }
                }
            }
        }
        if opts.cusparse {
            spmv.push(rec(SpmvImpl::Cusparse(CusparseAlg::Default), None, None, 0));
        }
        let ell_ok = f.ell_fill_ratio <= opts.padding.max_fill_ratio;
        let ell = SpmvImpl::Kernel(SpmvKernel::Ell);
        if ell_ok {
            for &t in &opts.threads {
                spmv.push(rec(ell, Some(t), Some(GridPolicy::Cover), 0));
            }
        } else {
            let mut r = rec(ell, None, None, 0);
            r.status = Status::Skipped(format!("fill ratio {:.2}", f.ell_fill_ratio));
            r.timing = None;
            spmv.push(r);
        }
        // Replayed as the solver runs it where the options ask and the iteration fits in half
        // of L2: 2 us of launch less, 2.5 us for ELL (the fake's regimes rank ELL apart).
        if opts.replay_within_l2 && replays_spmv_at(self.spec.l2_bytes, a.nrows() as u64, bytes) {
            let replayed: Vec<SpmvRecord> = spmv
                .iter()
                .filter(|r| r.timing.is_some())
                .map(|r| {
                    let less = if r.launch.format == Format::Ell {
                        2.5e-3
                    } else {
                        2e-3
                    };
                    let mut t = r.timing.expect("filtered on timing");
                    t.median_ms -= less;
                    t.min_ms = 0.95 * t.median_ms;
                    t.max_ms = 1.1 * t.median_ms;
                    SpmvRecord {
                        timing: Some(t),
                        replayed: true,
                        l2_flushed: false,
                        ..r.clone()
                    }
                })
                .collect();
            spmv.extend(replayed);
        }
        let conv = |format: Format, ok: bool| ConversionRecord {
            matrix: id.to_string(),
            format,
            status: if ok {
                Status::Ok
            } else {
                Status::Skipped("too much padding".into())
            },
            host_ms: 0.1,
            upload_ms: 0.2,
            device_ms: None,
            device_bytes: if ok { bytes } else { 0 },
        };
        Ok(MatrixBench {
            features: f,
            spmv,
            conversions: vec![conv(Format::Csr, true), conv(Format::Ell, ell_ok)],
        })
    }
}
