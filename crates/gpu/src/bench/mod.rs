//! The SpMV benchmark: every SpMV kernel of the pool in every format it reads, at every thread
//! count and grid policy asked for, plus cuSPARSE's generic SpMV with each CSR algorithm, on one
//! matrix; and the device's triad bandwidth as the yardstick.
//!
//! Protocol, per candidate: every kernel is compiled before anything is timed; `y` is filled
//! with NaN, the kernel runs once and `y` is compared with [`CsrMatrix::spmv`] (each row's error
//! relative to `sum_j |a_ij x_j|`); a kernel whose result is wrong is recorded as failed and not
//! timed. Otherwise [`time_kernel`](crate::time_kernel) takes a warm-up call, then event-timed
//! repetitions until a minimum count and a minimum total time are reached (with
//! [`SpmvBenchOptions::replay_within_l2`], on a matrix whose iteration fits in half of L2,
//! [`time_call`](crate::time_call) from graph replays as well: [`replays_spmv_at`]), and `y` is
//! checked again. `x` is uniform in [0.5, 1.5) from a seeded ChaCha8 generator, never zero.
//!
//! Bandwidth: every row of the table divides the SAME byte count, the least traffic a CSR SpMV
//! can move ([`csr_min_bytes`]: `12 nnz + 12 nrows + 8 ncols`, `12 nnz + 20 n` when square),
//! by the median time, so the GB/s column orders candidates exactly as their times do. Each
//! record also carries the bytes its own format moves ([`format_bytes`]) and the bandwidth that
//! implies.
//!
//! Formats are converted and uploaded one at a time (and dropped after), so device memory holds
//! the matrix in one format at a time. A padded format the conversion refuses
//! ([`SparseError::TooMuchPadding`](autopcg_sparse::SparseError::TooMuchPadding) under
//! [`SpmvBenchOptions::padding`]) is recorded as skipped with the reason.
//!
//! Beside each host conversion, the same conversion on the device from the uploaded CSR
//! matrix ([`csr_to_ell`](crate::kernels::convert::csr_to_ell),
//! [`csr_to_dia`](crate::kernels::convert::csr_to_dia),
//! [`csr_to_hyb`](crate::kernels::convert::csr_to_hyb)) is timed while the CSR arrays are on
//! the device: one untimed call, then [`DEVICE_CONVERSION_REPS`] calls each between two
//! events (the copies of the counts to the host that each conversion waits for included), the
//! median in [`ConversionRecord::device_ms`]; each result is dropped before the next, so the
//! device holds the CSR matrix and one converted copy at a time.
//!
//! The modules: `records` (options and results), `bytes` (traffic), `matrix` (what differs
//! between formats), `sweep` (the order of everything, one helper for all formats), `measure`
//! (checking and timing a candidate on the GPU), `convert` (conversion timing), `triad`, and
//! `summary` (fastest candidates and the table).
//!
//! [`CsrMatrix::spmv`]: autopcg_sparse::CsrMatrix::spmv
use std::time::Instant;

use autopcg_sparse::features::features;
use autopcg_sparse::CsrMatrix;

mod bytes;
mod convert;
mod matrix;
mod measure;
mod records;
mod summary;
mod sweep;
mod triad;

#[cfg(test)]
mod sequence_tests;

pub use autopcg_catalog::GridPolicy;
pub use bytes::{csr_min_bytes, format_bytes, FormatShape, BYTES_FORMULA};
pub use convert::DEVICE_CONVERSION_REPS;
pub use measure::{
    abs_row_sums, bench_vector, compare_rows, replays_spmv_at, ITERATION_VECTOR_BYTES_PER_ROW,
};
pub use records::{
    ConversionRecord, RecordStatus, SpmvBench, SpmvBenchOptions, SpmvRecord, TriadResult,
    DEFAULT_BENCH_THREADS,
};
pub use sweep::candidate_configs;
pub use triad::{measure_triad, measure_triad_gbps, TRIAD_ELEMS, TRIAD_KERNEL};

use crate::cusparse::cusparse_version;
use crate::sources::{KernelSource, ModuleSpec};
use crate::{Format, GpuDevice, GpuError};

/// Measures every SpMV candidate on `a` (see the module documentation for the protocol).
/// Fails on invalid options, a matrix without rows, and device errors that leave the device
/// unusable; a kernel that computes a wrong result or cannot launch is recorded, not an error.
pub fn bench_spmv(
    dev: &GpuDevice,
    a: &CsrMatrix,
    opts: &SpmvBenchOptions,
) -> Result<SpmvBench, GpuError> {
    opts.validate()?;
    if a.nrows() == 0 {
        return Err(GpuError::InvalidInput {
            what: "matrix to benchmark".into(),
            reason: "it has no rows".into(),
        });
    }
    let props = dev.props().clone();

    let t = Instant::now();
    dev.compile_all()?;
    dev.kernel(&ModuleSpec::plain(KernelSource::Vector), TRIAD_KERNEL)?;
    let compile_ms = t.elapsed().as_secs_f64() * 1e3;

    let triad = if opts.triad {
        Some(measure_triad(dev, TRIAD_ELEMS)?)
    } else {
        None
    };

    let mut side = measure::GpuSide::new(dev, a, opts)?;
    let swept = sweep::sweep(&mut side, a, opts, &props)?;
    drop(side);

    // cuSPARSE's version, when its algorithms ran on the CSR matrix.
    let csr_on_device = swept
        .conversions
        .iter()
        .any(|c| c.format == Format::Csr && c.status.is_ok());
    let cusparse_version = if opts.cusparse && csr_on_device {
        cusparse_version()
            .ok()
            .map(|(a, b, c)| format!("{a}.{b}.{c}"))
    } else {
        None
    };

    let records = swept.records;
    Ok(SpmvBench {
        device: props,
        matrix: features(a),
        bytes_formula: BYTES_FORMULA.to_string(),
        bytes_csr_min: csr_min_bytes(a.nrows(), a.ncols(), a.nnz()),
        triad,
        cusparse_version,
        compile_ms,
        options: opts.clone(),
        conversions: swept.conversions,
        best: summary::fastest_index(&records, false),
        best_own: summary::fastest_index(&records, true),
        records,
    })
}
