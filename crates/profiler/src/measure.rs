//! The measurement source of a sweep, as a trait: the sweep logic (what to measure, resume,
//! records, memory checks, progress) is written once against it, runs on the GPU through
//! [`crate::GpuMeasurer`] and is tested on any machine through
//! [`crate::testing::FakeMeasurer`], whose times come from a formula.
use autopcg_catalog::DeviceProps;
use autopcg_gpu::SpmvBenchOptions;
use autopcg_model::profile::{ConversionRecord, SpmvRecord, Timing};
use autopcg_sparse::features::MatrixFeatures;
use autopcg_sparse::CsrMatrix;

use crate::occupancy::KernelResources;
use crate::plan::{DotPoint, EpiloguePoint, KernelRef, TimingPolicy, VectorPoint};
use crate::ProfilerError;

/// What the SpMV benchmark of one matrix gives.
#[derive(Debug, Clone, PartialEq)]
pub struct MatrixBench {
    /// The matrix's features.
    pub features: MatrixFeatures,
    /// One record per candidate (format, kernel, launch configuration; cuSPARSE too).
    pub spmv: Vec<SpmvRecord>,
    /// One record per format conversion.
    pub conversions: Vec<ConversionRecord>,
}

/// A source of measurements. Buffers of the vector and dot stages are allocated once per length
/// ([`Measurer::alloc_vectors`], [`Measurer::alloc_dots`]), reused by every configuration at
/// that length and released by [`Measurer::free`].
pub trait Measurer {
    /// The device measured.
    fn device(&self) -> &DeviceProps;

    /// Compiles and loads every kernel the sweep may launch; called before anything is timed.
    fn prepare(&mut self) -> Result<(), ProfilerError>;

    /// Registers, shared memory and block-size limit of a compiled kernel.
    fn resources(&mut self, kernel: KernelRef) -> Result<KernelResources, ProfilerError>;

    /// Free and total device memory, bytes.
    fn mem_info(&mut self) -> Result<(u64, u64), ProfilerError>;

    /// Allocates (zeroed, on the device) the vectors of the vector stage for length `n`,
    /// releasing any earlier stage buffers.
    fn alloc_vectors(&mut self, n: u64) -> Result<(), ProfilerError>;

    /// Times one vector-update configuration on the buffers of [`Measurer::alloc_vectors`].
    fn time_vector(
        &mut self,
        point: &VectorPoint,
        policy: &TimingPolicy,
    ) -> Result<Timing, ProfilerError>;

    /// Allocates the vectors and workspaces of the dot stage for length `n`, with room for
    /// first-stage launches of up to `max_dot_blocks` blocks (`max_dot3_blocks` for the fused
    /// kernels), releasing any earlier stage buffers.
    fn alloc_dots(
        &mut self,
        n: u64,
        max_dot_blocks: u32,
        max_dot3_blocks: u32,
    ) -> Result<(), ProfilerError>;

    /// Times one reduction configuration on the buffers of [`Measurer::alloc_dots`].
    fn time_dot(
        &mut self,
        point: &DotPoint,
        policy: &TimingPolicy,
    ) -> Result<Timing, ProfilerError>;

    /// Builds and uploads the epilogue stage's banded matrix of `n` rows and `row_entries`
    /// entries a row (3: the tridiagonal; 27: the wide band) in CSR, ELL and DIA, the vectors
    /// u, w and r and the partial sums of up to `max_fused_blocks` blocks, releasing any
    /// earlier stage buffers.
    fn alloc_epilogue(
        &mut self,
        n: u64,
        row_entries: u32,
        max_fused_blocks: u32,
    ) -> Result<(), ProfilerError>;

    /// Times one launch of the epilogue stage on the buffers of [`Measurer::alloc_epilogue`].
    fn time_epilogue(
        &mut self,
        point: &EpiloguePoint,
        policy: &TimingPolicy,
    ) -> Result<Timing, ProfilerError>;

    /// Releases the stage buffers.
    fn free(&mut self) -> Result<(), ProfilerError>;

    /// Runs the SpMV benchmark on `a` (records carry `id` as their matrix). Whatever it
    /// allocates is released before it returns.
    fn bench_matrix(
        &mut self,
        id: &str,
        a: &CsrMatrix,
        opts: &SpmvBenchOptions,
    ) -> Result<MatrixBench, ProfilerError>;
}
