//! Large host-device copies through page-locked staging buffers.
//!
//! A copy from ordinary (pageable) host memory makes the driver stage it through its own
//! small page-locked buffer, one piece after another; on the hosts this was measured on that
//! ran at 3-5 GB/s, so uploading a large matrix's values cost more than the conversions and
//! kernels of a setup together. Here a copy of at least [`STAGED_MIN_BYTES`] is cut into
//! pieces of [`STAGE_CHUNK_BYTES`]: each piece is copied by all host threads into one of
//! [`STAGE_CHUNKS`] page-locked buffers (with streaming stores, [`autopcg_sparse::copy`]: the
//! CPU does not read these buffers back), and its DMA transfer is queued on the stream while
//! the next piece is copied into the other buffer (a buffer is refilled only once the event
//! recorded after its transfer has been reached). Downloads run the other way: the transfer of
//! a piece into one buffer is queued before the piece in the other is copied out.
//!
//! The buffers belong to the device's kernel registry, so every handle of a device opened by
//! [`crate::GpuDevice::open`] shares them (allocated at the first large copy, kept for the
//! process). A copy that finds them in use by another thread goes through the driver's
//! pageable path rather than wait for them: the thread holding them fills them on a thread
//! pool, whose workers run other jobs while they wait for pieces (rayon's work stealing), and
//! one of those jobs may be the waiting copy, or a thread waiting for it, so a wait could
//! never end. Where page-locked memory cannot be had, copies go through the pageable path too.
use std::sync::{Arc, Mutex};

use autopcg_sparse::copy::copy_streaming;
use cudarc::driver::{CudaEvent, CudaSlice, CudaStream, PinnedHostSlice};
use rayon::prelude::*;

use crate::error::DriverContext;
use crate::memory::DeviceScalar;
use crate::GpuError;

/// Bytes of one staging buffer.
pub const STAGE_CHUNK_BYTES: usize = 8 << 20;
/// Staging buffers per device: one is filled while the other's transfer runs.
pub const STAGE_CHUNKS: usize = 2;
/// Copies of fewer bytes go directly (the staging would cost more than it saves).
pub const STAGED_MIN_BYTES: usize = 1 << 20;
/// Elements each host thread copies at a time within a piece.
const THREAD_PIECE_BYTES: usize = 256 << 10;

/// One page-locked buffer and the event recorded after the last transfer that used it.
struct Chunk {
    mem: PinnedHostSlice<u8>,
    done: CudaEvent,
}

/// The staging buffers of one device (absent until the first large copy; `Failed` when
/// page-locked memory could not be allocated, so later copies do not try again).
#[derive(Default)]
enum Stage {
    #[default]
    Unallocated,
    Ready(Vec<Chunk>),
    Failed,
}

/// The shared staging state of a device.
#[derive(Default)]
pub(crate) struct StageCell(Mutex<Stage>);

impl std::fmt::Debug for StageCell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match self.0.try_lock().as_deref() {
            Ok(Stage::Unallocated) => "unallocated",
            Ok(Stage::Ready(_)) => "ready",
            Ok(Stage::Failed) => "failed",
            Err(_) => "in use",
        };
        f.debug_tuple("StageCell").field(&state).finish()
    }
}

impl StageCell {
    /// Runs `f` with the staging buffers of `stream`'s device, allocating them first if
    /// needed; `None` (and `f` not run) when they cannot be had, or are in use by another
    /// thread (see the module documentation: a copy never waits for them).
    fn with<R>(
        &self,
        stream: &Arc<CudaStream>,
        f: impl FnOnce(&mut [Chunk]) -> Result<R, GpuError>,
    ) -> Option<Result<R, GpuError>> {
        let mut stage = self.0.try_lock().ok()?;
        if matches!(*stage, Stage::Unallocated) {
            *stage = match allocate(stream) {
                Some(chunks) => Stage::Ready(chunks),
                None => Stage::Failed,
            };
        }
        match &mut *stage {
            Stage::Ready(chunks) => Some(f(chunks)),
            _ => None,
        }
    }

    /// Allocates the staging buffers now if they are not yet (and not in use): the first
    /// large copy then does not pay for them.
    pub(crate) fn prepare(&self, stream: &Arc<CudaStream>) {
        let _ = self.with(stream, |_| Ok(()));
    }

    /// Queues `dst[..data.len()] = data` on `stream` through the staging buffers when `data`
    /// is large enough; returns `None` (nothing queued) when the caller should copy directly.
    /// `data` may be changed by the caller as soon as this returns.
    pub(crate) fn upload<T: DeviceScalar>(
        &self,
        stream: &Arc<CudaStream>,
        data: &[T],
        dst: &mut CudaSlice<T>,
    ) -> Option<Result<(), GpuError>> {
        self.upload_filled(stream, data.len(), dst, &|off, piece| {
            copy_streaming(&data[off..off + piece.len()], piece)
        })
    }

    /// Queues `dst[..len]` = what `fill` writes, through the staging buffers when `len`
    /// elements are large enough; returns `None` (`fill` not called, nothing queued) when the
    /// caller should copy directly. `fill(off, piece)` writes elements `off..off + piece.len()`
    /// into `piece`; it is called once per piece, from several threads at once, and the pieces
    /// cover `0..len` without overlapping.
    pub(crate) fn upload_filled<T: DeviceScalar>(
        &self,
        stream: &Arc<CudaStream>,
        len: usize,
        dst: &mut CudaSlice<T>,
        fill: &(dyn Fn(usize, &mut [T]) + Sync),
    ) -> Option<Result<(), GpuError>> {
        if len * std::mem::size_of::<T>() < STAGED_MIN_BYTES {
            return None;
        }
        self.with(stream, |chunks| {
            let per = STAGE_CHUNK_BYTES / std::mem::size_of::<T>();
            for (k, off) in (0..len).step_by(per).enumerate() {
                let piece = per.min(len - off);
                let chunk = &mut chunks[k % STAGE_CHUNKS];
                // The transfer that last read this buffer is done before it is refilled.
                chunk
                    .done
                    .synchronize()
                    .during(|| "waiting for a staging buffer".into())?;
                let host = chunk_slice::<T>(chunk, piece)?;
                parallel_fill(off, host, fill);
                let mut view = dst.slice_mut(off..off + piece);
                stream
                    .memcpy_htod(&*host, &mut view)
                    .during(|| format!("uploading {piece} elements (staged)"))?;
                chunk
                    .done
                    .record(stream)
                    .during(|| "recording a staged upload".into())?;
            }
            Ok(())
        })
    }

    /// Copies `src[..out.len()]` into `out` through the staging buffers when `out` is large
    /// enough (waits for the work queued on `stream` before it); `None` (nothing copied)
    /// when the caller should copy directly.
    pub(crate) fn download<T: DeviceScalar>(
        &self,
        stream: &Arc<CudaStream>,
        src: &CudaSlice<T>,
        out: &mut [T],
    ) -> Option<Result<(), GpuError>> {
        if std::mem::size_of_val(out) < STAGED_MIN_BYTES {
            return None;
        }
        self.with(stream, |chunks| {
            let per = STAGE_CHUNK_BYTES / std::mem::size_of::<T>();
            let n = out.len();
            let pieces = n.div_ceil(per);
            let range = |k: usize| k * per..((k + 1) * per).min(n);
            let queue = |k: usize, chunk: &mut Chunk| -> Result<(), GpuError> {
                let r = range(k);
                // The transfer into the buffer waits on the device for the last transfer that
                // used it, which may have been queued on another handle's stream (the last
                // copy out of it ran on this thread and has finished).
                stream
                    .wait(&chunk.done)
                    .during(|| "ordering a staged download".into())?;
                let host = chunk_slice::<T>(chunk, r.len())?;
                stream
                    .memcpy_dtoh(&src.slice(r.clone()), host)
                    .during(|| format!("downloading {} elements (staged)", r.len()))?;
                chunk
                    .done
                    .record(stream)
                    .during(|| "recording a staged download".into())
            };
            queue(0, &mut chunks[0])?;
            for k in 0..pieces {
                if k + 1 < pieces {
                    queue(k + 1, &mut chunks[(k + 1) % STAGE_CHUNKS])?;
                }
                let chunk = &mut chunks[k % STAGE_CHUNKS];
                chunk
                    .done
                    .synchronize()
                    .during(|| "waiting for a staged download".into())?;
                let r = range(k);
                let host = chunk_slice::<T>(chunk, r.len())?;
                parallel_copy(host, &mut out[r]);
            }
            Ok(())
        })
    }
}

/// The staging buffers, or `None` when page-locked memory cannot be allocated.
fn allocate(stream: &CudaStream) -> Option<Vec<Chunk>> {
    let ctx = stream.context();
    (0..STAGE_CHUNKS)
        .map(|_| {
            // SAFETY: the buffer's bytes are written before they are read (by the copies
            // into it, or by a transfer into it before the copy out).
            let mem = unsafe { ctx.alloc_pinned_with_flags::<u8>(STAGE_CHUNK_BYTES, 0) }.ok()?;
            let done = ctx.new_event(None).ok()?;
            Some(Chunk { mem, done })
        })
        .collect()
}

/// The first `len` elements of `T` of a staging buffer as a slice.
fn chunk_slice<T: DeviceScalar>(chunk: &mut Chunk, len: usize) -> Result<&mut [T], GpuError> {
    assert!(len * std::mem::size_of::<T>() <= STAGE_CHUNK_BYTES);
    let ptr = chunk
        .mem
        .as_mut_ptr()
        .during(|| "reaching a staging buffer".into())?;
    assert!((ptr as usize) % std::mem::align_of::<T>() == 0);
    // SAFETY: the buffer holds STAGE_CHUNK_BYTES bytes (checked above against len), is page
    // aligned (so aligned for T, checked), and every bit pattern is a valid T (DeviceScalar
    // types are plain numbers); the exclusive borrow of `chunk` keeps it unaliased, and the
    // transfers that use it are waited for through `chunk.done` before it is touched again.
    Ok(unsafe { std::slice::from_raw_parts_mut(ptr.cast::<T>(), len) })
}

/// `dst.copy_from_slice(src)` on every host thread. Ordinary stores: the destination of a
/// download is usually a new vector, whose pages the first touch brings into the cache anyway
/// (streaming stores measured slower there).
fn parallel_copy<T: DeviceScalar>(src: &[T], dst: &mut [T]) {
    parallel_fill(0, dst, &|off, d| {
        d.copy_from_slice(&src[off..off + d.len()])
    });
}

/// Elements `base..base + dst.len()` written into `dst` by `fill` (see
/// [`StageCell::upload_filled`]), in pieces on every host thread.
pub(crate) fn parallel_fill<T: DeviceScalar>(
    base: usize,
    dst: &mut [T],
    fill: &(dyn Fn(usize, &mut [T]) + Sync),
) {
    let per = (THREAD_PIECE_BYTES / std::mem::size_of::<T>()).max(1);
    dst.par_chunks_mut(per)
        .enumerate()
        .for_each(|(i, d)| fill(base + i * per, d));
}
