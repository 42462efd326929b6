//! Measuring one candidate on the GPU: `y` poisoned with NaN, one run checked against the CPU's
//! product row by row ([`compare_rows`]), then [`time_kernel`] (a warm-up call, then event-timed
//! repetitions until a minimum count and time; [`time_kernel_flushed`], L2 cold, where the
//! options ask for it) and, where the options ask for it and the
//! matrix's iteration fits in half of L2 ([`replays_spmv_at`]), [`time_call`] from graph
//! replays as well (the record's `replayed`); then `y` checked again. A wrong result is
//! recorded as failed and not timed. [`GpuSide`] is the GPU's part of the sweep.
use autopcg_catalog::{SpmvImpl, SpmvKernel};
use autopcg_sparse::CsrMatrix;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::bytes::csr_min_bytes;
use super::convert::{time_device_conversions, DeviceConversions};
use super::matrix::{DeviceMatrix, HostMatrix};
use super::records::{RecordStatus, SpmvBenchOptions, SpmvRecord};
use super::sweep::{DeviceSide, Run};
use crate::cusparse::CusparseSpmv;
use crate::kernels::dot::{dot, DotKernel, DotWorkspace};
use crate::sources::ModuleSpec;
use crate::{
    time_call, time_kernel, time_kernel_flushed, DeviceVec, GpuDevice, GpuError, LaunchConfig,
    ShortCalls, TimingStats,
};

pub use autopcg_catalog::{replays_spmv_at, ITERATION_VECTOR_BYTES_PER_ROW};

/// The largest row error of `got` against `want`, relative to `scale` (`sum_j |a_ij x_j|`);
/// `Err` naming the first row whose error exceeds `tol` or is not a number (a NaN left by the
/// poison fill means the row was never written).
pub fn compare_rows(got: &[f64], want: &[f64], scale: &[f64], tol: f64) -> Result<f64, String> {
    if got.len() != want.len() || scale.len() != want.len() {
        return Err(format!(
            "result has {} rows, the reference {} (scale {})",
            got.len(),
            want.len(),
            scale.len()
        ));
    }
    let mut worst = 0.0f64;
    for i in 0..got.len() {
        let err = (got[i] - want[i]).abs() / scale[i].max(f64::MIN_POSITIVE);
        // A NaN (a row never written, or a NaN computed) fails.
        if err.is_nan() || err > tol {
            return Err(format!(
                "row {i}: got {:e}, want {:e} (relative error {err:e} > {tol:e})",
                got[i], want[i]
            ));
        }
        worst = worst.max(err);
    }
    Ok(worst)
}

/// `sum_j |a_ij x_j|` per row: the scale of each row's rounding error in `A x`.
pub fn abs_row_sums(a: &CsrMatrix, x: &[f64]) -> Vec<f64> {
    (0..a.nrows())
        .map(|i| {
            let (c, v) = a.row(i);
            c.iter()
                .zip(v)
                .map(|(&j, &aij)| (aij * x[j as usize]).abs())
                .sum()
        })
        .collect()
}

/// `n` values uniform in [0.5, 1.5) from ChaCha8 seeded with `seed`.
pub fn bench_vector(n: usize, seed: u64) -> Vec<f64> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..n).map(|_| rng.random_range(0.5..1.5)).collect()
}

/// A candidate's launch: `y = A x`.
type Launch<'r> = dyn FnMut(&DeviceVec<f64>, &mut DeviceVec<f64>) -> Result<(), GpuError> + 'r;

/// The GPU's part of the sweep, and the state every candidate shares: `x` and `y` on the
/// device, the poison fill, the CPU's product and the row scales it is checked with.
pub(crate) struct GpuSide<'a> {
    dev: &'a GpuDevice,
    opts: &'a SpmvBenchOptions,
    x: DeviceVec<f64>,
    y: DeviceVec<f64>,
    poison: Vec<f64>,
    want: Vec<f64>,
    scale: Vec<f64>,
    csr_bytes: u64,
    /// Whether candidates are also timed from graph replays ([`replays_spmv_at`]).
    replay: bool,
    /// What evicts the matrix from L2 before each sample, where the options ask for it.
    flush: Option<L2Flush>,
}

/// A read pass over twice the device's L2 (a dot product of a buffer with itself): queued
/// ahead of a sample, it leaves L2 holding none of the call's data, and only clean lines (a
/// written buffer would leave dirty lines whose write-back the call would pay).
pub(crate) struct L2Flush {
    buf: DeviceVec<f64>,
    ws: DotWorkspace,
    cfg: LaunchConfig,
}

impl L2Flush {
    /// Threads per block of the pass.
    const THREADS: u32 = 256;

    pub(crate) fn new(dev: &GpuDevice) -> Result<L2Flush, GpuError> {
        let props = dev.props();
        let len = (2 * u64::from(props.l2_bytes)).div_ceil(8).max(1) as usize;
        let blocks = (4 * props.sm_count).max(1);
        Ok(L2Flush {
            buf: dev.alloc_zeros(len)?,
            ws: DotWorkspace::new(dev, blocks)?,
            cfg: LaunchConfig::new(Self::THREADS, blocks),
        })
    }

    /// Queues the pass.
    pub(crate) fn run(&mut self, dev: &GpuDevice) -> Result<(), GpuError> {
        dot(
            dev,
            DotKernel::LastBlock,
            self.cfg,
            &self.buf,
            &self.buf,
            &mut self.ws,
        )
    }
}

impl<'a> GpuSide<'a> {
    /// `x` from [`bench_vector`] with the options' seed, its product with `a` on the CPU, and
    /// `x` and `y` on the device.
    pub(crate) fn new(
        dev: &'a GpuDevice,
        a: &CsrMatrix,
        opts: &'a SpmvBenchOptions,
    ) -> Result<Self, GpuError> {
        let (n, m) = (a.nrows(), a.ncols());
        let xh = bench_vector(m, opts.seed);
        let want = a.mul_vec(&xh);
        let scale = abs_row_sums(a, &xh);
        let csr_bytes = csr_min_bytes(n, m, a.nnz());
        let replay =
            opts.replay_within_l2 && replays_spmv_at(dev.props().l2_bytes, n as u64, csr_bytes);
        Ok(GpuSide {
            dev,
            opts,
            x: dev.upload(&xh)?,
            y: dev.alloc_zeros(n)?,
            poison: vec![f64::NAN; n],
            want,
            scale,
            csr_bytes,
            replay,
            flush: match opts.flush_l2 {
                true => Some(L2Flush::new(dev)?),
                false => None,
            },
        })
    }

    /// Checks, then times, one candidate, filling `rec`. Errors that leave the device unusable
    /// end the benchmark; others are recorded.
    fn measure_launch(
        &mut self,
        mut rec: SpmvRecord,
        run: &mut Launch<'_>,
    ) -> Result<SpmvRecord, GpuError> {
        match self.check_and_time(run) {
            Ok((stats, replayed, err)) => {
                let s = stats.median_ms * 1e-3;
                rec.replayed = replayed;
                rec.l2_flushed = self.flush.is_some();
                rec.median_ms = Some(stats.median_ms);
                rec.min_ms = Some(stats.min_ms);
                rec.max_ms = Some(stats.max_ms);
                rec.reps = Some(stats.reps);
                rec.max_rel_err = Some(err);
                if s > 0.0 {
                    rec.gbps = Some(self.csr_bytes as f64 / s / 1e9);
                    rec.gbps_format = Some(rec.bytes_format as f64 / s / 1e9);
                }
                Ok(rec.with_status(RecordStatus::Ok))
            }
            Err(Outcome::Wrong(msg)) => Ok(rec.with_status(RecordStatus::Failed(msg))),
            Err(Outcome::Error(e)) => {
                // A kernel fault poisons the context: if the device no longer answers, stop.
                self.dev.synchronize()?;
                Ok(rec.with_status(RecordStatus::Failed(e.to_string())))
            }
        }
    }

    /// The candidate's timing launched alone, and from graph replays where `self.replay`,
    /// with the largest row error of the checks before and after.
    fn check_and_time(
        &mut self,
        run: &mut Launch<'_>,
    ) -> Result<(TimingStats, Option<TimingStats>, f64), Outcome> {
        let dev = self.dev;
        dev.upload_into(&self.poison, &mut self.y)?;
        run(&self.x, &mut self.y)?;
        dev.synchronize()?;
        let first = self.check("first run")?;
        let (x, y) = (&self.x, &mut self.y);
        let (min_reps, min_ms) = (self.opts.min_reps, self.opts.min_ms);
        let stats = match self.flush.as_mut() {
            Some(f) => {
                time_kernel_flushed(dev, || f.run(dev), || run(x, &mut *y), min_reps, min_ms)?
            }
            None => time_kernel(dev, || run(x, &mut *y), min_reps, min_ms)?,
        };
        let replayed = match self.replay {
            true => Some(
                time_call(
                    dev,
                    || run(x, &mut *y),
                    0.0,
                    true,
                    &ShortCalls::DEFAULT,
                    min_reps,
                    min_ms,
                )?
                .0,
            ),
            false => None,
        };
        let after = self.check("after the timed runs")?;
        Ok((stats, replayed, first.max(after)))
    }

    fn check(&self, when: &str) -> Result<f64, Outcome> {
        let got = self.dev.download(&self.y)?;
        compare_rows(&got, &self.want, &self.scale, self.opts.tolerance)
            .map_err(|m| Outcome::Wrong(format!("wrong result ({when}): {m}")))
    }
}

impl DeviceSide for GpuSide<'_> {
    type Matrix = DeviceMatrix;

    fn upload(&mut self, host: &HostMatrix<'_>) -> Result<DeviceMatrix, GpuError> {
        let m = DeviceMatrix::upload(self.dev, host)?;
        self.dev.synchronize()?;
        Ok(m)
    }

    fn device_bytes(&self, m: &DeviceMatrix) -> u64 {
        m.device_bytes() as u64
    }

    fn max_threads(&mut self, kernel: SpmvKernel) -> Result<u32, GpuError> {
        Ok(self
            .dev
            .kernel(&ModuleSpec::plain(kernel.source()), &kernel.to_string())?
            .attrs()
            .max_threads_per_block)
    }

    fn convert_on_device(&mut self, csr: &DeviceMatrix) -> Result<DeviceConversions, GpuError> {
        let a = csr.csr().ok_or_else(|| GpuError::InvalidInput {
            what: "device conversions".into(),
            reason: "they start from the CSR matrix".into(),
        })?;
        time_device_conversions(self.dev, a, &self.opts.padding)
    }

    fn prepare(&mut self, m: &mut DeviceMatrix, imp: SpmvImpl) -> Result<(), String> {
        let dev = self.dev;
        match (m, imp) {
            (DeviceMatrix::Csr(a), SpmvImpl::Kernel(k)) => a
                .prepare_for(dev, k)
                .and_then(|()| dev.synchronize())
                .map_err(|e| format!("preparing {k}: {e}")),
            _ => Ok(()),
        }
    }

    fn measure(
        &mut self,
        m: &DeviceMatrix,
        rec: SpmvRecord,
        run: &Run,
    ) -> Result<SpmvRecord, GpuError> {
        let dev = self.dev;
        match *run {
            Run::Own(method) => self.measure_launch(rec, &mut |x, y| m.spmv(dev, &method, x, y)),
            Run::Cusparse(alg) => {
                let created = match m.csr() {
                    Some(a) => CusparseSpmv::new(dev, a, alg),
                    None => Err(GpuError::launch(alg, "cuSPARSE runs on the CSR matrix")),
                };
                match created {
                    Err(e) => Ok(rec.with_status(RecordStatus::Skipped(e.to_string()))),
                    Ok(mut sp) => self.measure_launch(rec, &mut |x, y| sp.run(x, y)),
                }
            }
        }
    }
}

/// Why a candidate has no time.
enum Outcome {
    /// The result differs from the CPU's (the message names the row).
    Wrong(String),
    /// A launch or copy failed.
    Error(GpuError),
}

impl From<GpuError> for Outcome {
    fn from(e: GpuError) -> Self {
        Outcome::Error(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comparison_rejects_nan_and_large_errors() {
        let want = [1.0, 2.0, 0.0];
        let scale = [1.0, 2.0, 0.0];
        assert_eq!(compare_rows(&want, &want, &scale, 1e-12), Ok(0.0));
        let e = compare_rows(&[1.0, f64::NAN, 0.0], &want, &scale, 1e-12).unwrap_err();
        assert!(e.contains("row 1"), "{e}");
        let e = compare_rows(&[1.0, 2.0 + 1e-9, 0.0], &want, &scale, 1e-12).unwrap_err();
        assert!(e.contains("row 1"), "{e}");
        // An empty row must be exactly zero.
        assert!(compare_rows(&[1.0, 2.0, 1e-300], &want, &scale, 1e-12).is_err());
        let ok = compare_rows(&[1.0 + 1e-15, 2.0, 0.0], &want, &scale, 1e-12).unwrap();
        assert!(ok > 0.0 && ok < 1e-14);
        assert!(compare_rows(&[1.0], &want, &scale, 1e-12).is_err());
    }

    #[test]
    fn vector_is_seeded_and_in_range() {
        let a = bench_vector(1000, 7);
        assert_eq!(a, bench_vector(1000, 7));
        assert_ne!(a, bench_vector(1000, 8));
        assert!(a.iter().all(|&v| (0.5..1.5).contains(&v)));
    }

    #[test]
    fn row_scales_are_absolute_sums() {
        let a = CsrMatrix::from_triplets(2, 2, &[0, 0, 1], &[0, 1, 1], &[2.0, -3.0, 4.0]).unwrap();
        assert_eq!(abs_row_sums(&a, &[1.0, 0.5]), [3.5, 2.0]);
    }
}
