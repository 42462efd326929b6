//! Measuring one candidate on the GPU: `y` poisoned with NaN, one run checked against the CPU's
//! product row by row ([`compare_rows`]), then [`time_kernel`] (a warm-up call, then event-timed
//! repetitions until a minimum count and time), or, where the options ask for it and the
//! matrix's iteration fits in half of L2 ([`replays_spmv_at`]), [`time_call`] from graph
//! replays; then `y` checked again. A wrong result is recorded as failed and not timed.
//! [`GpuSide`] is the GPU's part of the sweep.
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
use crate::sources::ModuleSpec;
use crate::{
    replays_like_the_solver, time_call, time_kernel, DeviceVec, GpuDevice, GpuError, ShortCalls,
    TimingStats,
};

/// Bytes per row of the vectors a PCG iteration moves beside its matrix (the update's,
/// the reduction's and the preconditioner's, 8 of them): the part of
/// [`ITERATION_BYTES_PER_ROW`](crate::ITERATION_BYTES_PER_ROW) that is not the matrix.
pub const ITERATION_VECTOR_BYTES_PER_ROW: u64 = 64;

/// Whether the SpMV of a matrix of `n` rows whose CSR arrays hold `csr_bytes`
/// ([`csr_min_bytes`]) is timed from graph replays when the options ask for it: the matrix
/// and an iteration's vectors fit in half of `l2_bytes`, so that the solver's iterations keep
/// them in L2 from one to the next as a replayed batch does. Launched one by one, products of
/// a few microseconds there measure the host's launch pacing, and every format and launch
/// takes about the same time (on an H200, 6.6-8.2 us for the CSR scalar kernel on 2D Poisson
/// 100^2, which the epilogue stage's replays time at about 2 us on a matrix a third its size).
pub fn replays_spmv_at(l2_bytes: u32, n: usize, csr_bytes: u64) -> bool {
    replays_like_the_solver(
        csr_bytes.saturating_add((n as u64).saturating_mul(ITERATION_VECTOR_BYTES_PER_ROW)),
        u64::from(l2_bytes),
    )
}

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
    /// Whether candidates are timed from graph replays ([`replays_spmv_at`]).
    replay: bool,
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
        let replay = opts.replay_within_l2 && replays_spmv_at(dev.props().l2_bytes, n, csr_bytes);
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
            Ok((stats, err)) => {
                let s = stats.median_ms * 1e-3;
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

    fn check_and_time(&mut self, run: &mut Launch<'_>) -> Result<(TimingStats, f64), Outcome> {
        let dev = self.dev;
        dev.upload_into(&self.poison, &mut self.y)?;
        run(&self.x, &mut self.y)?;
        dev.synchronize()?;
        let first = self.check("first run")?;
        let (x, y) = (&self.x, &mut self.y);
        let (min_reps, min_ms) = (self.opts.min_reps, self.opts.min_ms);
        let stats = match self.replay {
            true => {
                time_call(
                    dev,
                    || run(x, &mut *y),
                    0.0,
                    true,
                    &ShortCalls::DEFAULT,
                    min_reps,
                    min_ms,
                )?
                .0
            }
            false => time_kernel(dev, || run(x, &mut *y), min_reps, min_ms)?,
        };
        let after = self.check("after the timed runs")?;
        Ok((stats, first.max(after)))
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

    /// Which of the tune's matrices an H200 (60 MiB of L2) times from replays: 3D Poisson
    /// 50^3 and 2D Poisson 316^2 do, the 2e5-point FEM matrix (33.5 MB with its vectors) and
    /// 2D Poisson 1000^2 do not; the bound is half of L2, inclusive.
    #[test]
    fn products_replay_while_matrix_and_vectors_fit_in_half_of_l2() {
        let l2 = 62_914_560u32;
        let at = |n: usize, nnz: usize| replays_spmv_at(l2, n, csr_min_bytes(n, n, nnz));
        assert!(at(125_000, 860_000));
        assert!(at(99_856, 498_016));
        assert!(!at(200_000, 1_396_430));
        assert!(!at(1_000_000, 4_996_000));
        let half = u64::from(l2) / 2;
        assert!(replays_spmv_at(l2, 1000, half - 64_000));
        assert!(!replays_spmv_at(l2, 1000, half - 63_999));
        assert!(!replays_spmv_at(l2, usize::MAX, 0));
    }
}
