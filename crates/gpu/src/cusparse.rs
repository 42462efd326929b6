//! cuSPARSE's generic SpMV over a [`DeviceCsr`]: the vendor baseline the SpMV benchmark
//! measures our kernels against, and an operand a plan chooses where the model predicts
//! cuSPARSE faster than the pool.
//!
//! [`CusparseSpmv`] (borrowing the matrix) and [`CusparseCsr`] (owning it) keep a cuSPARSE
//! handle bound to the device's stream, a CSR descriptor over the matrix's device arrays
//! (32-bit indices, base zero, f64), two dense-vector descriptors and the work buffer
//! `cusparseSpMV_bufferSize` asks for; `cusparseSpMV_preprocess` and one product (which loads
//! cuSPARSE's kernels) run once at construction. Every handle and descriptor is released on drop. cuSPARSE is loaded at run time: without
//! `libcusparse` construction fails with [`GpuError::LibraryMissing`] rather than a panic. A
//! status other than success is reported as [`GpuError::Launch`] naming the call and the
//! status (cuSPARSE checks its arguments before queuing work).
use std::ffi::c_void;
use std::fmt;

use cudarc::cusparse::sys as csys;
use cudarc::driver::{CudaSlice, DevicePtr, DevicePtrMut};

use crate::error::DriverContext;
use crate::probe::guarded;
use crate::{DeviceCsr, DeviceVec, GpuDevice, GpuError};

pub use autopcg_catalog::CusparseAlg;

/// cuSPARSE's enum value of `alg`.
fn raw(alg: CusparseAlg) -> csys::cusparseSpMVAlg_t {
    match alg {
        CusparseAlg::Default => csys::cusparseSpMVAlg_t::CUSPARSE_SPMV_ALG_DEFAULT,
        CusparseAlg::CsrAlg1 => csys::cusparseSpMVAlg_t::CUSPARSE_SPMV_CSR_ALG1,
        CusparseAlg::CsrAlg2 => csys::cusparseSpMVAlg_t::CUSPARSE_SPMV_CSR_ALG2,
    }
}

fn status_error(call: &str, what: impl fmt::Display, status: csys::cusparseStatus_t) -> GpuError {
    GpuError::launch(
        format!("{call} ({what})"),
        format!("cuSPARSE returned {status:?}"),
    )
}

/// Fails unless `status` is success.
fn check(
    call: &str,
    what: impl fmt::Display,
    status: csys::cusparseStatus_t,
) -> Result<(), GpuError> {
    if status == csys::cusparseStatus_t::CUSPARSE_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(status_error(call, what, status))
    }
}

/// Whether `libcusparse` can be loaded here; the error says what was looked for.
pub fn cusparse_available() -> Result<(), GpuError> {
    // SAFETY: only tries to open candidate library names; nothing is called.
    if unsafe { csys::is_culib_present() } {
        Ok(())
    } else {
        Err(GpuError::LibraryMissing {
            library: "libcusparse",
            detail: "cuSPARSE (libcusparse.so.13) was not found on the library path; install the \
                     CUDA toolkit's cuSPARSE and add its lib folder to LD_LIBRARY_PATH"
                .into(),
        })
    }
}

/// cuSPARSE's version as `(major, minor, patch)`; needs no device.
pub fn cusparse_version() -> Result<(i32, i32, i32), GpuError> {
    cusparse_available()?;
    guarded("libcusparse", || {
        let get = |p: csys::libraryPropertyType, name: &str| -> Result<i32, GpuError> {
            let mut v = 0i32;
            // SAFETY: cusparseGetProperty writes one int through a valid pointer.
            let st = unsafe { csys::cusparseGetProperty(p, &mut v) };
            check("cusparseGetProperty", name, st)?;
            Ok(v)
        };
        Ok((
            get(csys::libraryPropertyType::MAJOR_VERSION, "major version")?,
            get(csys::libraryPropertyType::MINOR_VERSION, "minor version")?,
            get(csys::libraryPropertyType::PATCH_LEVEL, "patch level")?,
        ))
    })
}

/// The device addresses and sizes of a CSR matrix's arrays: what a cuSPARSE descriptor made
/// over the matrix points at. A descriptor is only used with a matrix whose arrays are these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct CsrArrays {
    indptr: u64,
    indices: u64,
    vals: u64,
    shape: (usize, usize, usize),
}

impl CsrArrays {
    fn of(a: &DeviceCsr, stream: &cudarc::driver::CudaStream) -> Self {
        let (indptr, _g1) = a.indptr.buf.device_ptr(stream);
        let (indices, _g2) = a.indices.buf.device_ptr(stream);
        let (vals, _g3) = a.vals.buf.device_ptr(stream);
        CsrArrays {
            indptr,
            indices,
            vals,
            shape: (a.nrows(), a.ncols(), a.nnz()),
        }
    }
}

/// cuSPARSE's state for the SpMV of one CSR matrix with one algorithm: the handle (on the
/// device's stream), the matrix and vector descriptors, and the preprocessed work buffer.
///
/// It does not borrow the matrix: it records the addresses of the matrix's arrays
/// ([`CsrArrays`]) and every [`Prepared::run`] is handed the matrix and checks them, so the
/// descriptor is only ever used while the arrays it points at are alive, and a matrix whose
/// arrays were replaced is refused instead of read.
struct Prepared {
    dev: GpuDevice,
    arrays: CsrArrays,
    alg: CusparseAlg,
    handle: csys::cusparseHandle_t,
    mat: csys::cusparseSpMatDescr_t,
    vec_x: csys::cusparseDnVecDescr_t,
    vec_y: csys::cusparseDnVecDescr_t,
    buffer: Option<CudaSlice<u8>>,
    buffer_bytes: usize,
    // Placeholders the vector descriptors point at until the first `run`.
    scratch: (DeviceVec<f64>, DeviceVec<f64>),
}

// SAFETY: the handle and descriptors are cuSPARSE objects that may be used from any thread as
// long as calls on them are not concurrent (each call makes the device's context current
// first). `Prepared` is not `Sync`, and every call on the objects goes through a value owned by
// one thread at a time (`&mut self`, or `&self` of a value that cannot be shared across
// threads), so moving it to another thread cannot create concurrent access.
unsafe impl Send for Prepared {}

const ONE: f64 = 1.0;
const ZERO: f64 = 0.0;

/// `csys::$f(handle, NON_TRANSPOSE, &ONE, mat, x, &ZERO, y, CUDA_R_64F, raw(alg), $last)`: a
/// call of one of the SpMV steps (`cusparseSpMV_bufferSize`, `cusparseSpMV_preprocess`,
/// `cusparseSpMV`) for `y = A x` in f64. The three take the same leading arguments and differ
/// in the type of the last one (the size out-pointer or the work buffer), so a macro, not a
/// function, spells the shared arguments once. Expands to the unsafe call itself: the caller
/// wraps it in `unsafe` with the safety argument.
macro_rules! spmv_call {
    ($f:ident, ($handle:expr, $mat:expr, $vx:expr, $vy:expr), $alg:expr, $last:expr) => {
        csys::$f(
            $handle,
            csys::cusparseOperation_t::CUSPARSE_OPERATION_NON_TRANSPOSE,
            &ONE as *const f64 as *const c_void,
            $mat as csys::cusparseConstSpMatDescr_t,
            $vx as csys::cusparseConstDnVecDescr_t,
            &ZERO as *const f64 as *const c_void,
            $vy,
            csys::cudaDataType::CUDA_R_64F,
            raw($alg),
            $last,
        )
    };
}

impl Prepared {
    /// See [`CusparseSpmv::new`].
    fn new(dev: &GpuDevice, a: &DeviceCsr, alg: CusparseAlg) -> Result<Self, GpuError> {
        cusparse_available()?;
        let limit = i32::MAX as usize;
        for (name, v) in [("nrows", a.nrows()), ("ncols", a.ncols()), ("nnz", a.nnz())] {
            if v > limit {
                return Err(GpuError::InvalidInput {
                    what: "CSR matrix for cuSPARSE".into(),
                    reason: format!("{name} = {v} exceeds cuSPARSE's 32-bit signed index range"),
                });
            }
        }
        dev.context()
            .bind_to_thread()
            .during(|| "making the device's context current for cuSPARSE".into())?;
        let scratch = (
            dev.alloc_zeros::<f64>(a.ncols())?,
            dev.alloc_zeros(a.nrows())?,
        );
        let arrays = CsrArrays::of(a, dev.stream());
        guarded("libcusparse", move || {
            // Fields start null; Drop releases whatever was created when a later step fails.
            let mut s = Prepared {
                dev: dev.clone(),
                arrays,
                alg,
                handle: std::ptr::null_mut(),
                mat: std::ptr::null_mut(),
                vec_x: std::ptr::null_mut(),
                vec_y: std::ptr::null_mut(),
                buffer: None,
                buffer_bytes: 0,
                scratch,
            };
            s.setup()?;
            s.warm_up()?;
            Ok(s)
        })
    }

    /// One product on the placeholder vectors: cuSPARSE loads the modules of its kernels on
    /// their first launch (several milliseconds), which belongs to the setup, not to the first
    /// solve or the capture of its graph.
    fn warm_up(&self) -> Result<(), GpuError> {
        let buf = self.buffer_ptr();
        // SAFETY: as for the preprocessing; the vector descriptors point at the placeholders,
        // which self owns.
        check("cusparseSpMV", "warm-up", unsafe {
            spmv_call!(
                cusparseSpMV,
                (self.handle, self.mat, self.vec_x, self.vec_y),
                self.alg,
                buf
            )
        })
    }

    fn setup(&mut self) -> Result<(), GpuError> {
        let (dev, a, alg) = (&self.dev, self.arrays, self.alg);
        let stream = dev.stream();
        // SAFETY: cusparseCreate writes a handle through a valid pointer; the context is current.
        check("cusparseCreate", alg, unsafe {
            csys::cusparseCreate(&mut self.handle)
        })?;
        // The runtime API's stream type and the driver's are the same object (a CUstream).
        let raw_stream = stream.cu_stream() as csys::cudaStream_t;
        // SAFETY: the handle is live and the stream belongs to the current context.
        check("cusparseSetStream", alg, unsafe {
            csys::cusparseSetStream(self.handle, raw_stream)
        })?;
        let (nrows, ncols, nnz) = a.shape;
        // SAFETY: the three addresses are device allocations of nrows + 1, nnz and nnz
        // elements (validated on upload; u32 indices below 2^31 read as int32 are the same
        // values) of the matrix `new` was handed; cuSPARSE's SpMV only reads them, and every
        // later use of the descriptor checks that the matrix it is handed has these arrays.
        check("cusparseCreateCsr", alg, unsafe {
            csys::cusparseCreateCsr(
                &mut self.mat,
                nrows as i64,
                ncols as i64,
                nnz as i64,
                a.indptr as *mut c_void,
                a.indices as *mut c_void,
                a.vals as *mut c_void,
                csys::cusparseIndexType_t::CUSPARSE_INDEX_32I,
                csys::cusparseIndexType_t::CUSPARSE_INDEX_32I,
                csys::cusparseIndexBase_t::CUSPARSE_INDEX_BASE_ZERO,
                csys::cudaDataType::CUDA_R_64F,
            )
        })?;
        let (sx, _g4) = self.scratch.0.buf.device_ptr(stream);
        let (sy, _g5) = self.scratch.1.buf.device_ptr(stream);
        // SAFETY: scratch vectors of ncols and nrows elements, owned by self.
        check("cusparseCreateDnVec", "x", unsafe {
            csys::cusparseCreateDnVec(
                &mut self.vec_x,
                ncols as i64,
                sx as *mut c_void,
                csys::cudaDataType::CUDA_R_64F,
            )
        })?;
        // SAFETY: as above.
        check("cusparseCreateDnVec", "y", unsafe {
            csys::cusparseCreateDnVec(
                &mut self.vec_y,
                nrows as i64,
                sy as *mut c_void,
                csys::cudaDataType::CUDA_R_64F,
            )
        })?;

        let mut bytes = 0usize;
        // SAFETY: live handle and descriptors; alpha and beta are host scalars (the default
        // pointer mode); bytes is a valid out-pointer.
        check("cusparseSpMV_bufferSize", alg, unsafe {
            spmv_call!(
                cusparseSpMV_bufferSize,
                (self.handle, self.mat, self.vec_x, self.vec_y),
                alg,
                &mut bytes
            )
        })?;
        self.buffer_bytes = bytes;
        if bytes > 0 {
            self.buffer = Some(
                stream
                    .alloc_zeros::<u8>(bytes)
                    .during(|| format!("allocating cuSPARSE's {bytes}-byte SpMV buffer"))?,
            );
        }
        let buf = self.buffer_ptr();
        // SAFETY: as for the buffer size; `buf` is null or a device buffer of the size cuSPARSE
        // asked for, kept alive (and unchanged) as long as the descriptors.
        check("cusparseSpMV_preprocess", alg, unsafe {
            spmv_call!(
                cusparseSpMV_preprocess,
                (self.handle, self.mat, self.vec_x, self.vec_y),
                alg,
                buf
            )
        })?;
        Ok(())
    }

    fn buffer_ptr(&self) -> *mut c_void {
        match &self.buffer {
            Some(b) => {
                let (p, _g) = b.device_ptr(self.dev.stream());
                p as *mut c_void
            }
            None => std::ptr::null_mut(),
        }
    }

    /// Queues `y = A x` on the device's stream (does not wait). `a` must be the matrix the
    /// state was prepared for, with the same arrays (checked: a matrix whose arrays were
    /// replaced is refused); `x` must hold ncols and `y` nrows elements. Allocates nothing
    /// and does not synchronise, so it can be captured in a graph.
    fn run(
        &self,
        a: &DeviceCsr,
        x: &DeviceVec<f64>,
        y: &mut DeviceVec<f64>,
    ) -> Result<(), GpuError> {
        let name = self.alg.to_string();
        let stream = self.dev.stream();
        if CsrArrays::of(a, stream) != self.arrays {
            return Err(GpuError::launch(
                &name,
                "the matrix is not the one cuSPARSE was prepared for (its arrays were \
                 replaced); prepare it again (internal error)",
            ));
        }
        let (_, ncols, _) = self.arrays.shape;
        let nrows = self.arrays.shape.0;
        if x.len() != ncols {
            return Err(GpuError::launch(
                &name,
                format!("x has {} elements, expected {ncols}", x.len()),
            ));
        }
        if y.len() != nrows {
            return Err(GpuError::launch(
                &name,
                format!("y has {} elements, expected {nrows}", y.len()),
            ));
        }
        self.dev
            .context()
            .bind_to_thread()
            .during(|| "making the device's context current for cuSPARSE".into())?;
        let buf = self.buffer_ptr();
        let (px, _gx) = x.buf.device_ptr(stream);
        let (py, _gy) = y.buf.device_ptr_mut(stream);
        let (handle, mat, vx, vy, alg) = (self.handle, self.mat, self.vec_x, self.vec_y, self.alg);
        guarded("libcusparse", || {
            // SAFETY: live descriptors; px and py are device buffers of ncols and nrows elements
            // (checked above) that stay borrowed for this call.
            check("cusparseDnVecSetValues", "x", unsafe {
                csys::cusparseDnVecSetValues(vx, px as *mut c_void)
            })?;
            // SAFETY: as above.
            check("cusparseDnVecSetValues", "y", unsafe {
                csys::cusparseDnVecSetValues(vy, py as *mut c_void)
            })?;
            // SAFETY: handle, matrix and vector descriptors are live and describe buffers of
            // matching sizes (the matrix's arrays are the ones the descriptor was made over,
            // checked above, and `a` keeps them alive for this call); the work buffer is the
            // one preprocessed; alpha and beta are host scalars; y and x are distinct
            // allocations (a & and a &mut borrow).
            check("cusparseSpMV", alg, unsafe {
                spmv_call!(cusparseSpMV, (handle, mat, vx, vy), alg, buf)
            })
        })
    }
}

impl Drop for Prepared {
    fn drop(&mut self) {
        // Errors cannot be reported from drop; the resources are released either way.
        let _ = self.dev.context().bind_to_thread();
        let _ = guarded("libcusparse", || {
            // SAFETY: each pointer is null or a live object created in `setup`, destroyed once.
            unsafe {
                if !self.vec_x.is_null() {
                    csys::cusparseDestroyDnVec(self.vec_x as csys::cusparseConstDnVecDescr_t);
                }
                if !self.vec_y.is_null() {
                    csys::cusparseDestroyDnVec(self.vec_y as csys::cusparseConstDnVecDescr_t);
                }
                if !self.mat.is_null() {
                    csys::cusparseDestroySpMat(self.mat as csys::cusparseConstSpMatDescr_t);
                }
                if !self.handle.is_null() {
                    csys::cusparseDestroy(self.handle);
                }
            }
            Ok(())
        });
        self.vec_x = std::ptr::null_mut();
        self.vec_y = std::ptr::null_mut();
        self.mat = std::ptr::null_mut();
        self.handle = std::ptr::null_mut();
    }
}

/// A prepared cuSPARSE SpMV `y = A x` for one CSR matrix on one device, with one algorithm,
/// borrowing the matrix (the benchmark's form; [`CusparseCsr`] owns its matrix).
pub struct CusparseSpmv<'a> {
    a: &'a DeviceCsr,
    prepared: Prepared,
}

impl fmt::Debug for CusparseSpmv<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CusparseSpmv")
            .field("alg", &self.prepared.alg)
            .field("nrows", &self.a.nrows())
            .field("nnz", &self.a.nnz())
            .field("buffer_bytes", &self.prepared.buffer_bytes)
            .finish()
    }
}

impl<'a> CusparseSpmv<'a> {
    /// Creates the handle (on `dev`'s stream) and descriptors, allocates the work buffer and
    /// runs `cusparseSpMV_preprocess`. Fails with [`GpuError::LibraryMissing`] when cuSPARSE
    /// cannot be loaded, with [`GpuError::InvalidInput`] when the matrix exceeds cuSPARSE's
    /// signed 32-bit indices, and with [`GpuError::Launch`] when cuSPARSE refuses a call (for
    /// example an algorithm this version does not support: `CUSPARSE_STATUS_NOT_SUPPORTED`).
    pub fn new(dev: &'a GpuDevice, a: &'a DeviceCsr, alg: CusparseAlg) -> Result<Self, GpuError> {
        Ok(CusparseSpmv {
            a,
            prepared: Prepared::new(dev, a, alg)?,
        })
    }

    /// The algorithm.
    pub fn alg(&self) -> CusparseAlg {
        self.prepared.alg
    }

    /// Bytes of the work buffer cuSPARSE asked for.
    pub fn buffer_bytes(&self) -> usize {
        self.prepared.buffer_bytes
    }

    /// Whether `cusparseSpMV_preprocess` ran (it always does when construction succeeds).
    pub fn preprocessed(&self) -> bool {
        true
    }

    /// Queues `y = A x` on the device's stream (does not wait). `x` must hold ncols and `y`
    /// nrows elements.
    pub fn run(&mut self, x: &DeviceVec<f64>, y: &mut DeviceVec<f64>) -> Result<(), GpuError> {
        self.prepared.run(self.a, x, y)
    }
}

/// A CSR matrix on the device with cuSPARSE's SpMV prepared for it: the form a solver keeps
/// as an operand whose plan says cuSPARSE.
///
/// New values of the same pattern are written into the matrix's arrays in place
/// ([`CusparseCsr::matrix_mut`] and [`DeviceCsr::upload_values`] or
/// [`DeviceCsr::fill_values`]); cuSPARSE's preprocessing depends on the pattern only, so it
/// stays. Should the arrays themselves be replaced, [`CusparseCsr::run`] refuses to run rather
/// than read them.
pub struct CusparseCsr {
    // Declared first: dropped (descriptors destroyed) before the arrays they point at.
    prepared: Prepared,
    a: DeviceCsr,
}

impl fmt::Debug for CusparseCsr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CusparseCsr")
            .field("alg", &self.prepared.alg)
            .field("nrows", &self.a.nrows())
            .field("nnz", &self.a.nnz())
            .field("buffer_bytes", &self.prepared.buffer_bytes)
            .finish()
    }
}

impl CusparseCsr {
    /// Prepares cuSPARSE's SpMV with `alg` for `a` and keeps both (errors as
    /// [`CusparseSpmv::new`]).
    pub fn new(dev: &GpuDevice, a: DeviceCsr, alg: CusparseAlg) -> Result<Self, GpuError> {
        let prepared = Prepared::new(dev, &a, alg)?;
        Ok(CusparseCsr { prepared, a })
    }

    /// The algorithm.
    pub fn alg(&self) -> CusparseAlg {
        self.prepared.alg
    }

    /// Bytes of the work buffer cuSPARSE asked for.
    pub fn buffer_bytes(&self) -> usize {
        self.prepared.buffer_bytes
    }

    /// The matrix.
    pub fn matrix(&self) -> &DeviceCsr {
        &self.a
    }

    /// The matrix, to write new values of the same pattern into (see the type's notes).
    pub fn matrix_mut(&mut self) -> &mut DeviceCsr {
        &mut self.a
    }

    /// Queues `y = A x` on the device's stream (does not wait; allocates nothing, so it can
    /// be captured in a graph). `x` must hold ncols and `y` nrows elements.
    pub fn run(&self, x: &DeviceVec<f64>, y: &mut DeviceVec<f64>) -> Result<(), GpuError> {
        self.prepared.run(&self.a, x, y)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        let names: Vec<String> = CusparseAlg::ALL.iter().map(|a| a.to_string()).collect();
        assert_eq!(
            names,
            [
                "cusparse_spmv_alg_default",
                "cusparse_spmv_csr_alg1",
                "cusparse_spmv_csr_alg2"
            ]
        );
        assert_eq!(
            raw(CusparseAlg::CsrAlg2) as u32,
            csys::cusparseSpMVAlg_t::CUSPARSE_SPMV_CSR_ALG2 as u32
        );
    }

    #[test]
    fn missing_library_is_an_error_not_a_panic() {
        // Either outcome is fine here; what matters is that neither call panics.
        match cusparse_available() {
            Ok(()) => assert!(cusparse_version().is_ok()),
            Err(e) => {
                assert!(matches!(e, GpuError::LibraryMissing { .. }), "{e}");
                assert!(cusparse_version().is_err());
            }
        }
    }
}
