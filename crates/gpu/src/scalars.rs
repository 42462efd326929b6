//! The device scalar buffer of Chronopoulos–Gear PCG and the history of reductions.
//!
//! The layout is defined here and in `kernels/cg_scalars.cuh` only (a test compares the two).
//! The buffer holds [`CG_SCALARS_LEN`] doubles; integer slots hold exactly representable
//! doubles. The fused three-dot kernels ([`crate::kernels::dot::dot3_advance`]) run the scalar
//! recurrence on the device and append (gamma, delta, rr) of iteration k to the history at
//! `CG_HIST_STRIDE * k`; the fused update ([`crate::kernels::vector::cg_update`]) reads alpha and
//! beta from the buffer and does nothing once the recurrence halted. The host reads both only
//! when it polls ([`CgScalars::read_since`]: one gather kernel into mapped page-locked host
//! memory and one synchronisation, see [`PollPath`]).
use std::ptr::NonNull;

use cudarc::driver::{sys as dsys, PinnedHostSlice, PushKernelArg};

use crate::error::DriverContext;
use crate::kernels::blocks::grid_stride_config;
use crate::kernels::Launch;
use crate::sources::{KernelSource, ModuleSpec};
use crate::{DeviceVec, GpuDevice, GpuError};

/// Slot: alpha of the next vector update.
pub const CG_ALPHA: usize = 0;
/// Slot: beta of the next vector update (0 after the start).
pub const CG_BETA: usize = 1;
/// Slot: gamma = (r, u) of the current residual.
pub const CG_GAMMA: usize = 2;
/// Slot: delta = (w, u) of the last reduction.
pub const CG_DELTA: usize = 3;
/// Slot: (r, r) of the last reduction.
pub const CG_RR: usize = 4;
/// Slot: iteration of the last reduction.
pub const CG_ITER: usize = 5;
/// Slot: halt code ([`HaltCode`]), 0 while running.
pub const CG_HALT: usize = 6;
/// Slot: the offending gamma or curvature.
pub const CG_HALT_VALUE: usize = 7;
/// Slot: iteration at which the recurrence halted.
pub const CG_HALT_ITER: usize = 8;
/// Length of the scalar buffer.
pub const CG_SCALARS_LEN: usize = 9;
/// Doubles per iteration in the history: gamma, delta, rr.
pub const CG_HIST_STRIDE: usize = 3;

/// Why the device recurrence halted (the `CG_HALT` slot).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum HaltCode {
    /// gamma = (r, M^-1 r) <= 0 (code 1).
    GammaNotPositive,
    /// delta - beta gamma / alpha <= 0 or not finite; delta <= 0 at the start (code 2).
    CurvatureNotPositive,
    /// A dot product was NaN or infinite (code 3).
    NotFinite,
}

impl HaltCode {
    /// The code as stored on the device.
    pub fn code(self) -> u32 {
        match self {
            HaltCode::GammaNotPositive => 1,
            HaltCode::CurvatureNotPositive => 2,
            HaltCode::NotFinite => 3,
        }
    }

    /// Decodes a stored code: `Ok(None)` for 0 (running), an error for anything unknown.
    pub fn from_stored(v: f64) -> Result<Option<HaltCode>, GpuError> {
        match v {
            0.0 => Ok(None),
            1.0 => Ok(Some(HaltCode::GammaNotPositive)),
            2.0 => Ok(Some(HaltCode::CurvatureNotPositive)),
            3.0 => Ok(Some(HaltCode::NotFinite)),
            x => Err(GpuError::InvalidInput {
                what: "device scalar buffer".into(),
                reason: format!("slot CG_HALT holds {x}, not a halt code"),
            }),
        }
    }
}

/// A halt as read from the device.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct DeviceHalt {
    /// Why.
    pub code: HaltCode,
    /// The offending gamma or curvature (0 for [`HaltCode::NotFinite`]).
    pub value: f64,
    /// At which iteration.
    pub iteration: u32,
}

/// The scalar buffer as read by the host.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct ScalarSnapshot {
    /// Next alpha.
    pub alpha: f64,
    /// Next beta.
    pub beta: f64,
    /// Current gamma.
    pub gamma: f64,
    /// Last delta.
    pub delta: f64,
    /// Last (r, r).
    pub rr: f64,
    /// Iteration of the last reduction.
    pub iteration: u32,
    /// Set once the recurrence halted.
    pub halt: Option<DeviceHalt>,
}

impl ScalarSnapshot {
    /// Decodes a raw buffer.
    pub fn decode(raw: &[f64; CG_SCALARS_LEN]) -> Result<ScalarSnapshot, GpuError> {
        let halt = HaltCode::from_stored(raw[CG_HALT])?.map(|code| DeviceHalt {
            code,
            value: raw[CG_HALT_VALUE],
            iteration: raw[CG_HALT_ITER] as u32,
        });
        Ok(ScalarSnapshot {
            alpha: raw[CG_ALPHA],
            beta: raw[CG_BETA],
            gamma: raw[CG_GAMMA],
            delta: raw[CG_DELTA],
            rr: raw[CG_RR],
            iteration: raw[CG_ITER] as u32,
            halt,
        })
    }
}

/// The gather kernel of [`CgScalars::read_since`] (`vector.cu`): `out[0..h] =
/// history[lo..lo + h]`, `out[h..h + CG_SCALARS_LEN] = scalars`.
pub const POLL_GATHER: &str = "cg_poll_gather";

/// Doubles in one page of page-locked memory: the allocation unit of the poll buffer, whose
/// first size holds [`CG_HIST_STRIDE`]-double entries of about 167 iterations besides the
/// scalars, more than a poll usually reads.
const POLL_PAGE_DOUBLES: usize = 4096 / std::mem::size_of::<f64>();

/// Loads the gather kernel of [`CgScalars::read_since`], so that the first poll of a solve
/// does not pay for it. [`CgScalars::new`] does this too; a solver calls it with the rest of
/// its kernels, where loading is timed.
pub fn preload(dev: &GpuDevice) -> Result<(), GpuError> {
    dev.kernel(&ModuleSpec::plain(KernelSource::Vector), POLL_GATHER)
        .map(|_| ())
}

/// Where the doubles a poll of iterations `from..to` reads come from: history entries
/// `lo..lo + h`, gathered ahead of the [`CG_SCALARS_LEN`] scalars.
fn history_span(from: u32, to: u32) -> (usize, usize) {
    let lo = CG_HIST_STRIDE * from as usize;
    (lo, CG_HIST_STRIDE * to as usize - lo)
}

/// Doubles of a poll buffer that must hold `need` and holds `current`: at least twice as many
/// (so that a poll reading more each time grows it a few times only), in whole pages.
fn poll_buffer_len(need: usize, current: usize) -> usize {
    need.max(2 * current)
        .max(1)
        .next_multiple_of(POLL_PAGE_DOUBLES)
}

/// Splits what a poll gathered (`h` history doubles, then the scalars) into the raw scalar
/// buffer and the (gamma, delta, rr) entries.
fn split_gathered(flat: &[f64], h: usize) -> ([f64; CG_SCALARS_LEN], Vec<[f64; 3]>) {
    let mut raw = [0.0; CG_SCALARS_LEN];
    raw.copy_from_slice(&flat[h..h + CG_SCALARS_LEN]);
    let hist = flat[..h]
        .chunks_exact(CG_HIST_STRIDE)
        .map(|c| [c[0], c[1], c[2]])
        .collect();
    (raw, hist)
}

/// How [`CgScalars::read_since`] brings the scalars and the new history entries to the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum PollPath {
    /// One gather kernel ([`POLL_GATHER`]) writes both into page-locked host memory mapped
    /// into the device's address space; one synchronisation, then the host reads them there.
    Mapped,
    /// Two device-to-device copies into a device staging vector, then one synchronising
    /// download into ordinary host memory: the path where mapped memory cannot be had.
    Copies,
}

/// Page-locked host memory mapped into the device's address space, where the gather kernel of
/// [`CgScalars::read_since`] writes and the host reads once the kernel is done.
#[derive(Debug)]
struct MappedPoll {
    /// The allocation; cudarc frees it on drop with its context bound. `None` only while
    /// [`Drop`] leaks it.
    mem: Option<PinnedHostSlice<f64>>,
    /// The host's address of the allocation.
    host: NonNull<f64>,
    /// The device's address of the same memory (the gather kernel's `out`).
    device: dsys::CUdeviceptr,
    /// Doubles it holds.
    len: usize,
    /// Set from a gather launch until the wait for it succeeded: a gather whose wait failed
    /// may still write, so the memory is leaked rather than freed under it.
    in_flight: bool,
}

// SAFETY: `host` points into the allocation `mem` owns, which lives as long as the struct; it
// is only read through `&mut MappedPoll` (in `CgScalars::read_since`), so moving the struct to
// another thread or sharing `&MappedPoll` (which reads nothing) is as safe as for `mem`.
unsafe impl Send for MappedPoll {}
// SAFETY: as above.
unsafe impl Sync for MappedPoll {}

impl MappedPoll {
    /// `len` doubles of mapped page-locked memory in `dev`'s context; an error when the
    /// driver refuses (no mapping on this system, page-locked memory exhausted).
    fn new(dev: &GpuDevice, len: usize) -> Result<MappedPoll, GpuError> {
        let ctx = dev.context();
        let flags = dsys::CU_MEMHOSTALLOC_DEVICEMAP | dsys::CU_MEMHOSTALLOC_PORTABLE;
        // SAFETY: the contents start unset; the host reads only what a gather launch wrote and
        // was waited for (`CgScalars::read_since`).
        let mut mem = unsafe { ctx.alloc_pinned_with_flags::<f64>(len, flags) }
            .during(|| format!("allocating {len} doubles of mapped page-locked memory"))?;
        // Waits for an event nothing recorded (returns at once): the address, taken once.
        let host = mem
            .as_mut_ptr()
            .during(|| "reaching the mapped poll buffer".into())?;
        let host = NonNull::new(host).ok_or_else(|| GpuError::InvalidInput {
            what: "mapped poll buffer".into(),
            reason: "the driver returned a null address".into(),
        })?;
        ctx.bind_to_thread()
            .during(|| format!("binding the context of device {}", dev.ordinal()))?;
        let mut device: dsys::CUdeviceptr = 0;
        // SAFETY: `host` is the start of a cuMemHostAlloc allocation made with DEVICEMAP in the
        // context just bound; `device` is a valid out pointer; the flags must be 0.
        unsafe { dsys::cuMemHostGetDevicePointer_v2(&mut device, host.as_ptr().cast(), 0) }
            .result()
            .during(|| "mapping the poll buffer into the device's address space".into())?;
        Ok(MappedPoll {
            mem: Some(mem),
            host,
            device,
            len,
            in_flight: false,
        })
    }

    /// The first `n` doubles, as the last gather left them (read after it was waited for).
    fn read(&mut self, n: usize) -> Vec<f64> {
        assert!(n <= self.len && !self.in_flight);
        (0..n)
            // SAFETY: the allocation holds `len >= n` doubles and lives as long as `self`; no
            // gather is in flight (checked), so nothing writes while the host reads. Volatile:
            // the device wrote the memory behind the compiler's back.
            .map(|i| unsafe { std::ptr::read_volatile(self.host.as_ptr().add(i)) })
            .collect()
    }
}

impl Drop for MappedPoll {
    fn drop(&mut self) {
        if self.in_flight {
            // A gather may still write here: a few pages lost after a device error.
            std::mem::forget(self.mem.take());
        }
    }
}

/// Where [`CgScalars::read_since`] gathers history and scalars, as [`PollPath`] describes.
#[derive(Debug)]
enum PollBuffer {
    /// Mapped page-locked host memory, grown on demand.
    Mapped(MappedPoll),
    /// A device vector of `CG_HIST_STRIDE * capacity + CG_SCALARS_LEN` doubles.
    Copies(DeviceVec<f64>),
}

/// The device scalar buffer plus a history with room for `capacity` iterations (0..capacity).
#[derive(Debug)]
pub struct CgScalars {
    pub(crate) scalars: DeviceVec<f64>,
    pub(crate) history: DeviceVec<f64>,
    /// Where [`CgScalars::read_since`] gathers history and scalars for one read.
    poll: PollBuffer,
    capacity: u32,
}

impl CgScalars {
    /// Zeroed scalars and history on `dev`; `capacity` is the number of iterations (counting
    /// the start as iteration 0) the history can hold, so `max_iter + 1` for a solve. Polls go
    /// through mapped page-locked memory ([`PollPath::Mapped`]) where it can be had.
    pub fn new(dev: &GpuDevice, capacity: u32) -> Result<CgScalars, GpuError> {
        CgScalars::with_poll_path(dev, capacity, PollPath::Mapped)
    }

    /// [`CgScalars::new`] with polls through `path`. [`PollPath::Mapped`] falls back to
    /// [`PollPath::Copies`] where mapped page-locked memory cannot be allocated (some systems
    /// limit or refuse it): a poll is then slower, but the solve goes on. Asking for `Copies`
    /// is for tests and comparisons.
    pub fn with_poll_path(
        dev: &GpuDevice,
        capacity: u32,
        path: PollPath,
    ) -> Result<CgScalars, GpuError> {
        let mapped = match path {
            PollPath::Mapped => MappedPoll::new(dev, poll_buffer_len(CG_SCALARS_LEN, 0)).ok(),
            PollPath::Copies => None,
        };
        let poll = match mapped {
            Some(m) => {
                preload(dev)?;
                PollBuffer::Mapped(m)
            }
            None => PollBuffer::Copies(CgScalars::copies_buffer(dev, capacity)?),
        };
        Ok(CgScalars {
            scalars: dev.alloc_zeros(CG_SCALARS_LEN)?,
            history: dev.alloc_zeros(CG_HIST_STRIDE * capacity as usize)?,
            poll,
            capacity,
        })
    }

    /// The device staging vector of [`PollPath::Copies`] for a history of `capacity`.
    fn copies_buffer(dev: &GpuDevice, capacity: u32) -> Result<DeviceVec<f64>, GpuError> {
        dev.alloc_zeros(CG_HIST_STRIDE * capacity as usize + CG_SCALARS_LEN)
    }

    /// Iterations the history can hold.
    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    /// How polls reach the host: [`PollPath::Mapped`] turns into [`PollPath::Copies`] when a
    /// poll needs a larger mapped buffer and none can be had.
    pub fn poll_path(&self) -> PollPath {
        match self.poll {
            PollBuffer::Mapped(_) => PollPath::Mapped,
            PollBuffer::Copies(_) => PollPath::Copies,
        }
    }

    /// Reads the raw buffer (waits for queued work).
    pub fn read_raw(&self, dev: &GpuDevice) -> Result<[f64; CG_SCALARS_LEN], GpuError> {
        let v = dev.download(&self.scalars)?;
        let mut raw = [0.0; CG_SCALARS_LEN];
        raw.copy_from_slice(&v);
        Ok(raw)
    }

    /// Reads and decodes the buffer (waits for queued work).
    pub fn read(&self, dev: &GpuDevice) -> Result<ScalarSnapshot, GpuError> {
        ScalarSnapshot::decode(&self.read_raw(dev)?)
    }

    /// Overwrites the raw buffer (for restarts and tests).
    pub fn write_raw(
        &mut self,
        dev: &GpuDevice,
        raw: &[f64; CG_SCALARS_LEN],
    ) -> Result<(), GpuError> {
        dev.upload_into(raw, &mut self.scalars)
    }

    /// Fails unless `from..to` lies within the history.
    fn check_history_range(&self, from: u32, to: u32) -> Result<(), GpuError> {
        if from > to || to > self.capacity {
            return Err(GpuError::InvalidInput {
                what: "history read".into(),
                reason: format!(
                    "iterations {from}..{to} outside the capacity {}",
                    self.capacity
                ),
            });
        }
        Ok(())
    }

    /// (gamma, delta, rr) of iterations `from..to` (waits for queued work).
    pub fn read_history(
        &self,
        dev: &GpuDevice,
        from: u32,
        to: u32,
    ) -> Result<Vec<[f64; 3]>, GpuError> {
        self.check_history_range(from, to)?;
        let flat = dev.download_range(
            &self.history,
            CG_HIST_STRIDE * from as usize,
            CG_HIST_STRIDE * to as usize,
        )?;
        Ok(flat.chunks_exact(3).map(|c| [c[0], c[1], c[2]]).collect())
    }
}

impl CgScalars {
    /// The decoded scalar buffer and (gamma, delta, rr) of iterations `from..to`, with ONE
    /// wait for the device: both are gathered behind the work already queued and read
    /// together. On [`PollPath::Mapped`] one kernel writes them into mapped page-locked host
    /// memory (grown first when it is too small for `from..to`), the stream is synchronised
    /// and the host reads them there; on [`PollPath::Copies`] two device copies fill a device
    /// staging vector, downloaded in one synchronising copy.
    pub fn read_since(
        &mut self,
        dev: &GpuDevice,
        from: u32,
        to: u32,
    ) -> Result<(ScalarSnapshot, Vec<[f64; 3]>), GpuError> {
        self.check_history_range(from, to)?;
        let (lo, h) = history_span(from, to);
        let total = h + CG_SCALARS_LEN;
        if let PollBuffer::Mapped(m) = &self.poll {
            if m.len < total {
                let len = poll_buffer_len(total, m.len);
                // Nothing writes the old buffer any more (the last gather was waited for, or its
                // drop leaks it); where a larger one cannot be had, this and later polls take
                // the copies.
                self.poll = match MappedPoll::new(dev, len) {
                    Ok(m) => PollBuffer::Mapped(m),
                    Err(_) => PollBuffer::Copies(CgScalars::copies_buffer(dev, self.capacity)?),
                };
            }
        }
        let flat = match &mut self.poll {
            PollBuffer::Mapped(m) => {
                gather_mapped(dev, &self.history, &self.scalars, m, lo, h)?;
                m.read(total)
            }
            PollBuffer::Copies(staging) => {
                let stream = dev.stream();
                if h > 0 {
                    let src = self.history.buf.slice(lo..lo + h);
                    let mut dst = staging.buf.slice_mut(0..h);
                    stream
                        .memcpy_dtod(&src, &mut dst)
                        .during(|| format!("gathering history entries {from}..{to}"))?;
                }
                let src = self.scalars.buf.slice(0..CG_SCALARS_LEN);
                let mut dst = staging.buf.slice_mut(h..total);
                stream
                    .memcpy_dtod(&src, &mut dst)
                    .during(|| "gathering the scalar buffer".into())?;
                dev.download_range(staging, 0, total)?
            }
        };
        let (raw, hist) = split_gathered(&flat, h);
        Ok((ScalarSnapshot::decode(&raw)?, hist))
    }
}

/// Queues the gather of history doubles `lo..lo + h` and the scalars into `m` and waits for
/// it (and for everything queued before it).
fn gather_mapped(
    dev: &GpuDevice,
    history: &DeviceVec<f64>,
    scalars: &DeviceVec<f64>,
    m: &mut MappedPoll,
    lo: usize,
    h: usize,
) -> Result<(), GpuError> {
    let total = h + CG_SCALARS_LEN;
    assert!(lo + h <= history.len() && total <= m.len);
    let (lo64, h64) = (lo as u64, h as u64);
    let out = m.device;
    let cfg = grid_stride_config(total);
    let l = Launch::plain(dev, KernelSource::Vector, &POLL_GATHER, cfg)?;
    m.in_flight = true;
    // SAFETY: matches `cg_poll_gather(const double *history, u64 lo, u64 h, const double
    // *scalars, double *out)` in vector.cu; history holds lo + h doubles and scalars
    // CG_SCALARS_LEN (asserted, and by construction), out is the device address of mapped
    // memory of m.len >= h + CG_SCALARS_LEN doubles (asserted) that no other argument aliases
    // and that stays allocated while the kernel may run (`in_flight` keeps it on failure).
    unsafe {
        l.run(|b| {
            b.arg(&history.buf)
                .arg(&lo64)
                .arg(&h64)
                .arg(&scalars.buf)
                .arg(&out);
        })
    }?;
    dev.synchronize()?;
    m.in_flight = false;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_snapshot() {
        let mut raw = [0.0; CG_SCALARS_LEN];
        raw[CG_ALPHA] = 0.5;
        raw[CG_ITER] = 7.0;
        let s = ScalarSnapshot::decode(&raw).unwrap();
        assert_eq!((s.alpha, s.iteration, s.halt), (0.5, 7, None));
        raw[CG_HALT] = 2.0;
        raw[CG_HALT_VALUE] = -1.5;
        raw[CG_HALT_ITER] = 6.0;
        let h = ScalarSnapshot::decode(&raw).unwrap().halt.unwrap();
        assert_eq!(h.code, HaltCode::CurvatureNotPositive);
        assert_eq!((h.value, h.iteration), (-1.5, 6));
        raw[CG_HALT] = 9.0;
        assert!(ScalarSnapshot::decode(&raw).is_err());
        for c in [
            HaltCode::GammaNotPositive,
            HaltCode::CurvatureNotPositive,
            HaltCode::NotFinite,
        ] {
            assert_eq!(HaltCode::from_stored(f64::from(c.code())).unwrap(), Some(c));
        }
    }

    #[test]
    fn history_span_counts_doubles() {
        assert_eq!(history_span(0, 0), (0, 0));
        assert_eq!(history_span(5, 5), (15, 0));
        assert_eq!(history_span(2, 7), (6, 15));
        // The full range of a u32 capacity does not overflow.
        assert_eq!(
            history_span(0, u32::MAX),
            (0, CG_HIST_STRIDE * u32::MAX as usize)
        );
    }

    #[test]
    fn poll_buffer_grows_in_pages_at_least_twofold() {
        let page = POLL_PAGE_DOUBLES;
        assert_eq!(page, 512);
        // The first buffer is one page and holds the scalars and about 167 iterations.
        assert_eq!(poll_buffer_len(CG_SCALARS_LEN, 0), page);
        assert_eq!((page - CG_SCALARS_LEN) / CG_HIST_STRIDE, 167);
        assert_eq!(poll_buffer_len(0, 0), page);
        // Growing: twice the old size, or what is needed when that is more, in whole pages.
        assert_eq!(poll_buffer_len(page + 1, page), 2 * page);
        assert_eq!(poll_buffer_len(5 * page + 3, page), 6 * page);
        for (need, current) in [(1, 0), (600, 512), (3 * 300 + 9, 512), (100_000, 1024)] {
            let len = poll_buffer_len(need, current);
            assert!(len >= need && len >= 2 * current && len % page == 0);
        }
    }

    #[test]
    fn gathered_doubles_split_into_scalars_and_entries() {
        let scalars: Vec<f64> = (0..CG_SCALARS_LEN).map(|i| 100.0 + i as f64).collect();
        let (raw, hist) = split_gathered(&scalars, 0);
        assert_eq!(raw.to_vec(), scalars);
        assert!(hist.is_empty());
        let mut flat: Vec<f64> = (0..6).map(f64::from).collect();
        flat.extend(&scalars);
        let (raw, hist) = split_gathered(&flat, 6);
        assert_eq!(raw.to_vec(), scalars);
        assert_eq!(hist, vec![[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]);
        // A buffer longer than what was gathered: the rest is not read.
        flat.extend([f64::NAN; 4]);
        assert_eq!(split_gathered(&flat, 6).0.to_vec(), scalars);
    }

    #[test]
    fn scalars_can_move_between_threads() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<CgScalars>();
    }

    /// The launch in `gather_mapped` pushes the kernel's parameters in this order and type.
    #[test]
    fn gather_kernel_takes_what_the_launch_pushes() {
        let words = |t: &str| t.split_whitespace().collect::<Vec<_>>().join(" ");
        let text = words(crate::sources::source_text(KernelSource::Vector));
        let decl = "void cg_poll_gather(const double *__restrict__ history, u64 lo, u64 h, \
                    const double *__restrict__ scalars, double *__restrict__ out)";
        assert!(text.contains(decl), "cg_poll_gather's parameters changed");
        let (vector, entries) = &crate::sources::catalog()[0];
        assert_eq!(*vector, ModuleSpec::plain(KernelSource::Vector));
        assert!(entries.iter().any(|e| e == POLL_GATHER));
    }

    /// The constants above and the #defines of the CUDA header must agree.
    #[test]
    fn layout_matches_the_cuda_header() {
        let header = crate::sources::header_text("cg_scalars.cuh").unwrap();
        let defined = |name: &str| -> usize {
            let prefix = format!("#define {name} ");
            let line = header
                .lines()
                .find(|l| l.starts_with(&prefix))
                .unwrap_or_else(|| panic!("{name} not defined in cg_scalars.cuh"));
            line[prefix.len()..].trim().parse().unwrap()
        };
        let pairs = [
            ("CG_ALPHA", CG_ALPHA),
            ("CG_BETA", CG_BETA),
            ("CG_GAMMA", CG_GAMMA),
            ("CG_DELTA", CG_DELTA),
            ("CG_RR", CG_RR),
            ("CG_ITER", CG_ITER),
            ("CG_HALT", CG_HALT),
            ("CG_HALT_VALUE", CG_HALT_VALUE),
            ("CG_HALT_ITER", CG_HALT_ITER),
            ("CG_SCALARS_LEN", CG_SCALARS_LEN),
            ("CG_HIST_STRIDE", CG_HIST_STRIDE),
            ("CG_HALT_GAMMA", HaltCode::GammaNotPositive.code() as usize),
            (
                "CG_HALT_CURVATURE",
                HaltCode::CurvatureNotPositive.code() as usize,
            ),
            ("CG_HALT_NOT_FINITE", HaltCode::NotFinite.code() as usize),
            ("CG_HALT_NONE", 0),
        ];
        for (name, v) in pairs {
            assert_eq!(defined(name), v, "{name}");
        }
    }
}
