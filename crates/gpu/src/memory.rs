//! Device vectors: typed buffers on one device's stream.
use cudarc::driver::{CudaSlice, DeviceRepr, ValidAsZeroBits};

use crate::error::DriverContext;
use crate::{GpuDevice, GpuError};

mod sealed {
    pub trait Sealed {}
    impl Sealed for f64 {}
    impl Sealed for u32 {}
    impl Sealed for i32 {}
    impl Sealed for u64 {}
}

/// Element types a [`DeviceVec`] can hold.
pub trait DeviceScalar:
    sealed::Sealed + DeviceRepr + ValidAsZeroBits + Copy + Default + Send + Sync + Unpin + 'static
{
}
impl DeviceScalar for f64 {}
impl DeviceScalar for u32 {}
impl DeviceScalar for i32 {}
impl DeviceScalar for u64 {}

/// A vector in device memory. An empty vector still owns a one-element allocation, so that
/// every kernel argument is a valid pointer.
#[derive(Debug)]
pub struct DeviceVec<T: DeviceScalar> {
    pub(crate) buf: CudaSlice<T>,
    len: usize,
}

impl<T: DeviceScalar> DeviceVec<T> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the vector has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes occupied by the elements.
    pub fn num_bytes(&self) -> usize {
        self.len * std::mem::size_of::<T>()
    }
}

impl GpuDevice {
    /// A vector of `n` zeros.
    pub fn alloc_zeros<T: DeviceScalar>(&self, n: usize) -> Result<DeviceVec<T>, GpuError> {
        let buf = self
            .stream()
            .alloc_zeros::<T>(n.max(1))
            .during(|| format!("allocating {n} elements of {}", std::any::type_name::<T>()))?;
        Ok(DeviceVec { buf, len: n })
    }

    /// A vector of `n` elements left as the allocator gives them, for kernels that write every
    /// element before anything reads one.
    ///
    /// # Safety
    /// Every element must be written on the device before it is read (by a kernel, a copy or
    /// a download).
    pub(crate) unsafe fn alloc_uninit<T: DeviceScalar>(
        &self,
        n: usize,
    ) -> Result<DeviceVec<T>, GpuError> {
        // SAFETY: passed on to the caller, who writes every element before reading it.
        let buf = unsafe { self.stream().alloc::<T>(n.max(1)) }
            .during(|| format!("allocating {n} elements of {}", std::any::type_name::<T>()))?;
        Ok(DeviceVec { buf, len: n })
    }

    /// A copy of `data` on the device (large ones through the staging buffers of
    /// [`crate::staging`]; `data` may change as soon as this returns).
    pub fn upload<T: DeviceScalar>(&self, data: &[T]) -> Result<DeviceVec<T>, GpuError> {
        if data.is_empty() {
            return self.alloc_zeros(0);
        }
        // SAFETY: `upload_into` writes every element before anything can read one.
        let mut v = unsafe { self.alloc_uninit::<T>(data.len()) }?;
        self.upload_into(data, &mut v)?;
        Ok(v)
    }

    /// Overwrites `dst` with `data` (same length).
    pub fn upload_into<T: DeviceScalar>(
        &self,
        data: &[T],
        dst: &mut DeviceVec<T>,
    ) -> Result<(), GpuError> {
        if data.len() != dst.len {
            return Err(GpuError::InvalidInput {
                what: "host-to-device copy".into(),
                reason: format!(
                    "source has {} elements, destination {}",
                    data.len(),
                    dst.len
                ),
            });
        }
        if data.is_empty() {
            return Ok(());
        }
        if let Some(staged) = self.stage().upload(self.stream(), data, &mut dst.buf) {
            return staged;
        }
        self.stream()
            .memcpy_htod(data, &mut dst.buf)
            .during(|| format!("uploading {} elements", data.len()))
    }

    /// Overwrites `dst` with what `fill` writes, without a host copy of the whole: for a large
    /// `dst` the pieces are written straight into the page-locked staging buffers (see
    /// [`crate::staging`]), so a caller that checks or transforms data on its way to the device
    /// reads it once. `fill(off, piece)` writes elements `off..off + piece.len()`; it is called
    /// exactly once per piece, from several threads at once, on pieces that cover the whole of
    /// `dst` without overlapping.
    pub fn upload_into_filled<T: DeviceScalar>(
        &self,
        dst: &mut DeviceVec<T>,
        fill: &(dyn Fn(usize, &mut [T]) + Sync),
    ) -> Result<(), GpuError> {
        let len = dst.len;
        if len == 0 {
            return Ok(());
        }
        if let Some(staged) = self
            .stage()
            .upload_filled(self.stream(), len, &mut dst.buf, fill)
        {
            return staged;
        }
        let mut host = vec![T::default(); len];
        crate::staging::parallel_fill(0, &mut host, fill);
        self.stream()
            .memcpy_htod(&host, &mut dst.buf)
            .during(|| format!("uploading {len} elements"))
    }

    /// A host copy of `v` (waits for the work queued before it).
    pub fn download<T: DeviceScalar>(&self, v: &DeviceVec<T>) -> Result<Vec<T>, GpuError> {
        if v.len == 0 {
            return Ok(Vec::new());
        }
        let mut out = vec![T::default(); v.len];
        if let Some(staged) = self.stage().download(self.stream(), &v.buf, &mut out) {
            return staged.map(|()| out);
        }
        self.stream()
            .clone_dtoh(&v.buf.slice(0..v.len))
            .during(|| format!("downloading {} elements", v.len))
    }

    /// Copies elements `[from, to)` of `v` to the host.
    pub fn download_range<T: DeviceScalar>(
        &self,
        v: &DeviceVec<T>,
        from: usize,
        to: usize,
    ) -> Result<Vec<T>, GpuError> {
        if from > to || to > v.len {
            return Err(GpuError::InvalidInput {
                what: "device-to-host copy".into(),
                reason: format!("range {from}..{to} outside a vector of {} elements", v.len),
            });
        }
        if from == to {
            return Ok(Vec::new());
        }
        self.stream()
            .clone_dtoh(&v.buf.slice(from..to))
            .during(|| format!("downloading elements {from}..{to}"))
    }

    /// `dst = src` on the device (same length).
    pub fn copy<T: DeviceScalar>(
        &self,
        src: &DeviceVec<T>,
        dst: &mut DeviceVec<T>,
    ) -> Result<(), GpuError> {
        if src.len != dst.len {
            return Err(GpuError::InvalidInput {
                what: "device-to-device copy".into(),
                reason: format!("source has {} elements, destination {}", src.len, dst.len),
            });
        }
        if src.len == 0 {
            return Ok(());
        }
        let view = src.buf.slice(0..src.len);
        self.stream()
            .memcpy_dtod(&view, &mut dst.buf)
            .during(|| format!("copying {} elements on the device", src.len))
    }

    /// `dst[dst_start .. dst_start + len] = src[src_range]` on the device, queued on the stream
    /// (`len` = the range's length; both ranges must lie inside their vectors).
    pub fn copy_range<T: DeviceScalar>(
        &self,
        src: &DeviceVec<T>,
        src_range: std::ops::Range<usize>,
        dst: &mut DeviceVec<T>,
        dst_start: usize,
    ) -> Result<(), GpuError> {
        let len = src_range.len();
        if src_range.start > src_range.end
            || src_range.end > src.len
            || dst_start.checked_add(len).is_none_or(|end| end > dst.len)
        {
            return Err(GpuError::InvalidInput {
                what: "device-to-device copy".into(),
                reason: format!(
                    "source range {src_range:?} of {} elements to offset {dst_start} of {}",
                    src.len, dst.len
                ),
            });
        }
        if len == 0 {
            return Ok(());
        }
        let view = src.buf.slice(src_range);
        let mut target = dst.buf.slice_mut(dst_start..dst_start + len);
        self.stream()
            .memcpy_dtod(&view, &mut target)
            .during(|| format!("copying {len} elements on the device"))
    }

    /// Sets every element of `v` to zero.
    pub fn fill_zeros<T: DeviceScalar>(&self, v: &mut DeviceVec<T>) -> Result<(), GpuError> {
        self.stream()
            .memset_zeros(&mut v.buf)
            .during(|| format!("zeroing {} elements", v.len))
    }
}
