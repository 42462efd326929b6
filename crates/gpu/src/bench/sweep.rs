//! The sweep: the five formats in turn (CSR, ELL, DIA, COO, HYB), each converted on the host,
//! put on the device, and every implementation that reads it tried at every thread count and
//! grid policy asked for. One helper ([`sweep_format`]) does this for every format; what
//! differs between formats (conversion, traffic, the implementations listed, the launch) comes
//! from [`HostMatrix`] and the device side.
//!
//! The device's part is behind [`DeviceSide`]: the benchmark's is the GPU
//! ([`GpuSide`](super::measure::GpuSide)); the tests' is a dry run, so that the sequence of
//! records (which candidates, in which order, with which configurations and statuses) is
//! checked without a GPU.
use autopcg_catalog::{CusparseAlg, SpmvImpl, SpmvKernel, SpmvMethod, SpmvShape};
use autopcg_sparse::CsrMatrix;

use super::bytes::format_bytes;
use super::convert::{set_device_conversion, stage, DeviceConversions};
use super::matrix::{implementations, unconverted_shape, HostMatrix};
use super::records::{ConversionRecord, RecordStatus, SpmvBenchOptions, SpmvRecord};
use super::GridPolicy;
use crate::{DeviceProps, Format, GpuError, LaunchConfig};

/// What a candidate runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Run {
    /// The pool's kernel(s), launched as the method says.
    Own(SpmvMethod),
    /// cuSPARSE's SpMV with this algorithm over the CSR arrays.
    Cusparse(CusparseAlg),
}

/// A candidate before it runs: its record as far as it is known (format, kernel,
/// configuration, and the status of a configuration that does not apply), and what to run
/// (`None` when the record is final).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Candidate {
    pub(crate) record: SpmvRecord,
    pub(crate) run: Option<Run>,
}

/// The device's part of the sweep.
pub(crate) trait DeviceSide {
    /// The matrix on the device, in one format.
    type Matrix;
    /// Puts `host` on the device and waits until it is there.
    fn upload(&mut self, host: &HostMatrix<'_>) -> Result<Self::Matrix, GpuError>;
    /// Bytes `m` occupies on the device.
    fn device_bytes(&self, m: &Self::Matrix) -> u64;
    /// The most threads per block `kernel`, as compiled, can launch with.
    fn max_threads(&mut self, kernel: SpmvKernel) -> Result<u32, GpuError>;
    /// Builds ELL, DIA and HYB on the device from the uploaded CSR matrix `csr`, timed.
    fn convert_on_device(&mut self, csr: &Self::Matrix) -> Result<DeviceConversions, GpuError>;
    /// Makes what `imp` needs beyond the matrix (the merge-path workspace), or says why it
    /// could not; its candidates then fail with that reason.
    fn prepare(&mut self, m: &mut Self::Matrix, imp: SpmvImpl) -> Result<(), String>;
    /// Checks and times one candidate, filling its record. `Err` only for a device that no
    /// longer answers.
    fn measure(
        &mut self,
        m: &Self::Matrix,
        record: SpmvRecord,
        run: &Run,
    ) -> Result<SpmvRecord, GpuError>;
}

/// The launch configurations to try for `kernel` over `work` items: for each thread count and
/// grid policy, a configuration, or why it does not apply (more threads than the device or the
/// compiled kernel allows, or not whole warps for a warp-cooperative kernel). A policy giving
/// the same configuration as an earlier one is left out.
pub fn candidate_configs(
    kernel: SpmvKernel,
    work: u64,
    opts: &SpmvBenchOptions,
    props: &DeviceProps,
    kernel_max_threads: u32,
) -> Vec<(u32, GridPolicy, Result<LaunchConfig, String>)> {
    let mut out: Vec<(u32, GridPolicy, Result<LaunchConfig, String>)> = Vec::new();
    for &t in &opts.threads {
        let reason = if t > props.max_threads_per_block {
            Some(format!(
                "{t} threads per block; the device allows {}",
                props.max_threads_per_block
            ))
        } else if t > kernel_max_threads {
            Some(format!(
                "{t} threads per block; {kernel} as compiled allows {kernel_max_threads}"
            ))
        } else if kernel.needs_whole_warps() && t % 32 != 0 {
            Some(format!("{t} threads per block is not a multiple of 32"))
        } else {
            None
        };
        if let Some(r) = reason {
            out.push((t, opts.grids[0], Err(r)));
            continue;
        }
        for &g in &opts.grids {
            let cfg = g.config(work, t, props);
            let dup = out
                .iter()
                .any(|(_, _, c)| c.as_ref().is_ok_and(|c| *c == cfg));
            if !dup {
                out.push((t, g, Ok(cfg)));
            }
        }
    }
    out
}

/// The method that launches the pool's kernel `k` with `config`.
fn own_method(k: SpmvKernel, config: LaunchConfig) -> SpmvMethod {
    match k.format() {
        Format::Csr => SpmvMethod::Csr { kernel: k, config },
        Format::Ell => SpmvMethod::Ell { config },
        Format::Dia => SpmvMethod::Dia { config },
        // No kernel reads HYB alone; a launch of this method would be refused and recorded.
        Format::Coo | Format::Hyb => SpmvMethod::Coo { kernel: k, config },
    }
}

/// The candidates of `imp` on a matrix of `shape` whose format's SpMV moves `bytes_format`
/// bytes: one per launch configuration of [`candidate_configs`] for the pool's kernels (HYB:
/// the ELL launch's configuration decides, checked against the COO kernel, and the COO launch
/// takes the same threads and policy over the COO part), one for a cuSPARSE algorithm.
/// `max_threads` gives a kernel's compiled limit (HYB: the lower of its two kernels').
pub(crate) fn plan_implementation(
    imp: SpmvImpl,
    shape: SpmvShape,
    bytes_format: u64,
    opts: &SpmvBenchOptions,
    props: &DeviceProps,
    max_threads: &mut dyn FnMut(SpmvKernel) -> Result<u32, GpuError>,
) -> Result<Vec<Candidate>, GpuError> {
    let record = || SpmvRecord::new(imp.format(), imp, bytes_format);
    let (n, nnz) = (shape.nrows, shape.nnz);
    let (checked, work, kmax) = match imp {
        SpmvImpl::Cusparse(alg) => {
            return Ok(vec![Candidate {
                record: record(),
                run: Some(Run::Cusparse(alg)),
            }])
        }
        SpmvImpl::Kernel(k) => (k, k.work_items(n, nnz), max_threads(k)?),
        SpmvImpl::Hyb(ck) => {
            let kmax = max_threads(SpmvKernel::Ell)?.min(max_threads(ck)?);
            (ck, SpmvKernel::Ell.work_items(n, nnz), kmax)
        }
    };
    let candidates = candidate_configs(checked, work, opts, props, kmax)
        .into_iter()
        .map(|(t, g, cfg)| match cfg {
            Err(reason) => {
                let mut r = record().with_status(RecordStatus::Skipped(reason));
                r.launch.threads = Some(t);
                r.launch.grid = Some(g);
                Candidate {
                    record: r,
                    run: None,
                }
            }
            Ok(config) => {
                let mut r = record().with_config(config, g);
                let method = match imp {
                    SpmvImpl::Hyb(ck) => {
                        let coo_config = g.config(ck.work_items(n, shape.hyb_coo_nnz), t, props);
                        r.launch.coo_blocks = Some(coo_config.blocks);
                        SpmvMethod::Hyb {
                            split: None,
                            ell_config: config,
                            coo_kernel: ck,
                            coo_config,
                        }
                    }
                    _ => own_method(checked, config),
                };
                Candidate {
                    record: r,
                    run: Some(Run::Own(method)),
                }
            }
        })
        .collect();
    Ok(candidates)
}

/// The records of a format that could not be converted or uploaded: one per implementation
/// listed for it, with the conversion's status and the traffic of an empty padded format.
pub(crate) fn unavailable_records(
    format: Format,
    status: &RecordStatus,
    opts: &SpmvBenchOptions,
    a: &CsrMatrix,
) -> Vec<SpmvRecord> {
    let bytes = format_bytes(unconverted_shape(format), a.nrows(), a.ncols(), a.nnz());
    implementations(format, opts.cusparse)
        .into_iter()
        .map(|imp| SpmvRecord::new(format, imp, bytes).with_status(status.clone()))
        .collect()
}

/// What the sweep produced: the conversion of every format and every candidate's record, in
/// the order measured.
pub(crate) struct Swept {
    pub(crate) conversions: Vec<ConversionRecord>,
    pub(crate) records: Vec<SpmvRecord>,
}

/// Sweeps every format of [`Format::ALL`] in turn, holding one format on the device at a time.
/// After the CSR upload, and before its kernels run, the padded formats are also built on the
/// device from it ([`DeviceSide::convert_on_device`]); their conversion records carry that.
pub(crate) fn sweep<S: DeviceSide>(
    side: &mut S,
    a: &CsrMatrix,
    opts: &SpmvBenchOptions,
    props: &DeviceProps,
) -> Result<Swept, GpuError> {
    let mut conversions = Vec::new();
    let mut records = Vec::new();
    let mut on_device: Option<DeviceConversions> = None;
    for format in Format::ALL {
        let (mut conv, staged) = stage(side, format, a, &opts.padding);
        if format.is_padded() {
            set_device_conversion(&mut conv, on_device.as_ref().and_then(|d| d.of(format)));
        }
        let status = conv.status.clone();
        conversions.push(conv);
        let Some((host, mut m)) = staged else {
            records.extend(unavailable_records(format, &status, opts, a));
            continue;
        };
        if format == Format::Csr {
            on_device = Some(side.convert_on_device(&m)?);
        }
        sweep_format(side, host, &mut m, a, opts, props, &mut records)?;
    }
    Ok(Swept {
        conversions,
        records,
    })
}

/// The sweep of one format, the same for all: the format's traffic and implementations come
/// from `host` (dropped before anything runs); then, per implementation, its candidates
/// ([`plan_implementation`]), its preparation on the device, and each candidate measured (or
/// recorded as skipped, or as failed when the preparation failed).
fn sweep_format<S: DeviceSide>(
    side: &mut S,
    host: HostMatrix<'_>,
    m: &mut S::Matrix,
    a: &CsrMatrix,
    opts: &SpmvBenchOptions,
    props: &DeviceProps,
    records: &mut Vec<SpmvRecord>,
) -> Result<(), GpuError> {
    let bytes = format_bytes(host.shape(), a.nrows(), a.ncols(), a.nnz());
    let shape = SpmvShape {
        nrows: a.nrows() as u64,
        nnz: a.nnz() as u64,
        hyb_coo_nnz: host.coo_part_nnz() as u64,
    };
    let imps = host.implementations(opts.cusparse);
    drop(host);
    for imp in imps {
        let candidates =
            plan_implementation(imp, shape, bytes, opts, props, &mut |k| side.max_threads(k))?;
        let prepared = side.prepare(m, imp);
        for c in candidates {
            records.push(match (c.run, &prepared) {
                (None, _) => c.record,
                (Some(_), Err(e)) => c.record.with_status(RecordStatus::Failed(e.clone())),
                (Some(run), Ok(())) => side.measure(m, c.record, &run)?,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props() -> DeviceProps {
        crate::testing::hopper_like_props()
    }

    #[test]
    fn configs_cover_threads_and_policies() {
        let p = props();
        let opts = SpmvBenchOptions::default();
        let c = candidate_configs(SpmvKernel::CsrScalar, 1 << 22, &opts, &p, 1024);
        // Large work: both policies differ for every thread count.
        assert_eq!(c.len(), 10);
        for (t, g, cfg) in &c {
            let cfg = cfg.as_ref().unwrap();
            assert_eq!(cfg.threads, *t);
            assert_eq!(*cfg, g.config(1 << 22, *t, &p));
        }
        // Small work: the policies coincide and are not repeated.
        let c = candidate_configs(SpmvKernel::CsrScalar, 100, &opts, &p, 1024);
        assert_eq!(c.len(), 5);
        // A kernel compiled for at most 512 threads skips 1024.
        let c = candidate_configs(SpmvKernel::Ell, 1 << 22, &opts, &p, 512);
        let skipped: Vec<u32> = c
            .iter()
            .filter(|(_, _, r)| r.is_err())
            .map(|(t, _, _)| *t)
            .collect();
        assert_eq!(skipped, [1024]);
        // Whole warps for warp-cooperative kernels.
        let odd = SpmvBenchOptions {
            threads: vec![48, 64],
            ..SpmvBenchOptions::quick()
        };
        let c = candidate_configs(SpmvKernel::CsrVector(4), 1000, &odd, &p, 1024);
        assert!(c[0].2.as_ref().unwrap_err().contains("multiple of 32"));
        assert!(c[1].2.is_ok());
        let c = candidate_configs(SpmvKernel::CsrScalar, 1000, &odd, &p, 1024);
        assert!(c.iter().all(|(_, _, r)| r.is_ok()));
    }
}
