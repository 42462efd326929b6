//! The triad `a[i] = b[i] + s c[i]` over three buffers far beyond any L2 cache: the device's
//! streaming bandwidth, the yardstick of the SpMV table's "% of triad" column.
use cudarc::driver::PushKernelArg;

use super::records::TriadResult;
use super::GridPolicy;
use crate::kernels::Launch;
use crate::sources::KernelSource;
use crate::{time_kernel, DeviceVec, GpuDevice, GpuError, LaunchConfig};

pub use autopcg_catalog::kernels::TRIAD_KERNEL;

/// Elements of each of the three triad buffers of [`measure_triad_gbps`]: 256 MiB of f64 each,
/// far beyond any L2 cache.
pub const TRIAD_ELEMS: usize = 32 << 20;

/// Queues one triad `a = b + s c` over `n` elements with `cfg`.
fn triad_launch(
    dev: &GpuDevice,
    cfg: LaunchConfig,
    s: f64,
    b: &DeviceVec<f64>,
    c: &DeviceVec<f64>,
    a: &mut DeviceVec<f64>,
) -> Result<(), GpuError> {
    cfg.check(TRIAD_KERNEL, dev.props())?;
    let n = a.len();
    if b.len() != n || c.len() != n {
        return Err(GpuError::launch(
            TRIAD_KERNEL,
            format!("a, b, c have {n}, {}, {} elements", b.len(), c.len()),
        ));
    }
    if n == 0 {
        return Ok(());
    }
    let l = Launch::plain(dev, KernelSource::Vector, &TRIAD_KERNEL, cfg)?;
    let n64 = n as u64;
    // SAFETY: matches `triad(u64 n, double s, const double *b, const double *c, double *a)` in
    // vector.cu; the three buffers hold n elements (checked) and a is distinct from b and c
    // (a &mut borrow); the kernel is grid-stride, so any block count covers n.
    unsafe {
        l.run(|args| {
            args.arg(&n64)
                .arg(&s)
                .arg(&b.buf)
                .arg(&c.buf)
                .arg(&mut a.buf);
        })
    }
}

/// Measures the triad `a[i] = b[i] + s c[i]` over three buffers of `n` f64 with several launch
/// configurations (128 to 1024 threads, one wave and one thread per element) and returns the
/// fastest; the result is checked. Bytes moved: `24 n`.
pub fn measure_triad(dev: &GpuDevice, n: usize) -> Result<TriadResult, GpuError> {
    if n == 0 {
        return Err(GpuError::InvalidInput {
            what: "triad".into(),
            reason: "n = 0".into(),
        });
    }
    let need = 3 * 8 * n;
    let (free, _) = dev.mem_info()?;
    if free < need {
        return Err(GpuError::InvalidInput {
            what: "triad".into(),
            reason: format!("needs {need} bytes of device memory; {free} are free"),
        });
    }
    let b = dev.upload(&vec![1.0f64; n])?;
    let c = dev.upload(&vec![2.0f64; n])?;
    let mut a = dev.alloc_zeros::<f64>(n)?;
    let s = 0.5;
    let props = dev.props().clone();
    let bytes = 24 * n as u64;
    let mut best: Option<TriadResult> = None;
    for t in [128u32, 256, 512, 1024] {
        for g in [GridPolicy::Wave, GridPolicy::Cover] {
            let cfg = g.config(n as u64, t, &props);
            let stats = time_kernel(dev, || triad_launch(dev, cfg, s, &b, &c, &mut a), 20, 20.0)?;
            let gbps = bytes as f64 / (stats.median_ms * 1e-3) / 1e9;
            if best.as_ref().is_none_or(|r| gbps > r.gbps) {
                best = Some(TriadResult {
                    n,
                    bytes,
                    threads: cfg.threads,
                    blocks: cfg.blocks,
                    stats,
                    gbps,
                });
            }
        }
    }
    let got = dev.download(&a)?;
    if let Some((i, v)) = got.iter().enumerate().find(|(_, &v)| v != 2.0) {
        return Err(GpuError::InvalidInput {
            what: "triad result".into(),
            reason: format!("a[{i}] = {v}, expected 1 + 0.5 * 2 = 2"),
        });
    }
    best.ok_or_else(|| GpuError::InvalidInput {
        what: "triad".into(),
        reason: "no configuration was timed".into(),
    })
}

/// The device's triad bandwidth in GB/s (bytes read + written over the median time) over three
/// buffers of [`TRIAD_ELEMS`] f64 (256 MiB each), best of several launch configurations.
pub fn measure_triad_gbps(dev: &GpuDevice) -> Result<f64, GpuError> {
    measure_triad(dev, TRIAD_ELEMS).map(|r| r.gbps)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn triad_kernel_is_in_vector_cu() {
        let text = crate::sources::source_text(KernelSource::Vector);
        assert!(text.contains("__global__ void triad(u64 n, double s,"));
    }
}
