//! Sparse matrices on the device, uploaded from the host formats of `autopcg-sparse` or from raw
//! arrays. Every upload checks the structure first (lengths, index ranges, ordering), because a
//! bad index on the device is an illegal memory access, not an error message.

use autopcg_sparse::ell::ELL_PAD;
use autopcg_sparse::scan::{first_index_where, first_where};
use autopcg_sparse::{CooMatrix, CsrMatrix, DiaMatrix, EllMatrix, HybMatrix};

use crate::kernels::spmv::{CsrMergeWorkspace, SpmvKernel};
use crate::{DeviceVec, GpuDevice, GpuError};

/// Two index arrays and the values of a matrix, as downloaded: CSR row pointers, column
/// indices, values ([`DeviceCsr::download`]) or COO rows, columns, values
/// ([`DeviceCoo::download`]).
pub type HostArrays = (Vec<u32>, Vec<u32>, Vec<f64>);

pub use autopcg_catalog::Format;

fn invalid(what: &str, reason: String) -> GpuError {
    GpuError::InvalidInput {
        what: what.to_string(),
        reason,
    }
}

fn check_u32(what: &str, name: &str, v: usize) -> Result<u32, GpuError> {
    u32::try_from(v)
        .map_err(|_| invalid(what, format!("{name} = {v} exceeds the 32-bit index range")))
}

/// Checks CSR arrays: `indptr` of nrows + 1 non-decreasing offsets from 0 to nnz, column
/// indices below ncols, as many values as indices.
pub fn validate_csr(
    nrows: usize,
    ncols: usize,
    indptr: &[u32],
    indices: &[u32],
    vals: &[f64],
) -> Result<(), GpuError> {
    const W: &str = "CSR matrix";
    check_u32(W, "nrows", nrows)?;
    check_u32(W, "ncols", ncols)?;
    if indptr.len() != nrows + 1 {
        return Err(invalid(
            W,
            format!(
                "indptr has {} entries, expected nrows + 1 = {}",
                indptr.len(),
                nrows + 1
            ),
        ));
    }
    if indices.len() != vals.len() {
        return Err(invalid(
            W,
            format!("{} column indices but {} values", indices.len(), vals.len()),
        ));
    }
    if indptr[0] != 0 {
        return Err(invalid(W, format!("indptr[0] = {}, expected 0", indptr[0])));
    }
    // Both scans run on every host thread (a large matrix has tens of millions of entries;
    // see autopcg_sparse::scan).
    if let Some(i) = first_index_where(nrows, |i| indptr[i + 1] < indptr[i]) {
        return Err(invalid(
            W,
            format!(
                "indptr decreases at row {i}: {} then {}",
                indptr[i],
                indptr[i + 1]
            ),
        ));
    }
    if indptr[nrows] as usize != indices.len() {
        return Err(invalid(
            W,
            format!(
                "indptr[nrows] = {} but there are {} entries",
                indptr[nrows],
                indices.len()
            ),
        ));
    }
    if let Some(k) = first_where(indices, |&c| c as usize >= ncols) {
        let c = indices[k];
        return Err(invalid(
            W,
            format!("column index {c} at entry {k} is not below ncols = {ncols}"),
        ));
    }
    Ok(())
}

/// Checks ELL arrays: `width * nrows` slots, each padding ([`ELL_PAD`]) or a column below ncols.
pub fn validate_ell(
    nrows: usize,
    ncols: usize,
    width: usize,
    cols: &[u32],
    vals: &[f64],
) -> Result<(), GpuError> {
    const W: &str = "ELL matrix";
    check_u32(W, "nrows", nrows)?;
    check_u32(W, "ncols", ncols)?;
    check_u32(W, "width", width)?;
    let slots = width
        .checked_mul(nrows)
        .ok_or_else(|| invalid(W, format!("width {width} x nrows {nrows} overflows")))?;
    if cols.len() != slots || vals.len() != slots {
        return Err(invalid(
            W,
            format!(
                "{} column slots and {} values, expected width x nrows = {slots}",
                cols.len(),
                vals.len()
            ),
        ));
    }
    if let Some((s, &c)) = cols
        .iter()
        .enumerate()
        .find(|(_, &c)| c != ELL_PAD && c as usize >= ncols)
    {
        let (k, i) = (s / nrows.max(1), s % nrows.max(1));
        return Err(invalid(
            W,
            format!("column index {c} in slot {k} of row {i} is not below ncols = {ncols}"),
        ));
    }
    Ok(())
}

/// Checks DIA arrays: `ndiag * nrows` values for `offsets.len()` diagonals. Any offset is
/// accepted (the kernel skips columns outside the matrix).
pub fn validate_dia(
    nrows: usize,
    ncols: usize,
    offsets: &[i32],
    data: &[f64],
) -> Result<(), GpuError> {
    const W: &str = "DIA matrix";
    check_u32(W, "nrows", nrows)?;
    check_u32(W, "ncols", ncols)?;
    check_u32(W, "ndiag", offsets.len())?;
    let want = offsets
        .len()
        .checked_mul(nrows)
        .ok_or_else(|| invalid(W, "ndiag x nrows overflows".into()))?;
    if data.len() != want {
        return Err(invalid(
            W,
            format!(
                "data has {} values, expected ndiag x nrows = {want}",
                data.len()
            ),
        ));
    }
    Ok(())
}

/// Checks COO arrays: equal lengths, rows below nrows and non-decreasing, columns below ncols.
pub fn validate_coo(
    nrows: usize,
    ncols: usize,
    rows: &[u32],
    cols: &[u32],
    vals: &[f64],
) -> Result<(), GpuError> {
    const W: &str = "COO matrix";
    check_u32(W, "nrows", nrows)?;
    check_u32(W, "ncols", ncols)?;
    check_u32(W, "nnz", vals.len())?;
    if rows.len() != vals.len() || cols.len() != vals.len() {
        return Err(invalid(
            W,
            format!(
                "{} rows, {} columns, {} values",
                rows.len(),
                cols.len(),
                vals.len()
            ),
        ));
    }
    for k in 0..rows.len() {
        if rows[k] as usize >= nrows {
            return Err(invalid(
                W,
                format!(
                    "row index {} at entry {k} is not below nrows = {nrows}",
                    rows[k]
                ),
            ));
        }
        if cols[k] as usize >= ncols {
            return Err(invalid(
                W,
                format!(
                    "column index {} at entry {k} is not below ncols = {ncols}",
                    cols[k]
                ),
            ));
        }
        if k > 0 && rows[k] < rows[k - 1] {
            return Err(invalid(
                W,
                format!(
                    "rows not sorted: entry {k} has row {} after row {}",
                    rows[k],
                    rows[k - 1]
                ),
            ));
        }
    }
    Ok(())
}

/// CSR on the device, with the workspace of the merge-path SpMV kernel once it is prepared
/// ([`DeviceCsr::prepare_merge`]).
#[derive(Debug)]
pub struct DeviceCsr {
    /// (nrows, ncols).
    shape: (usize, usize),
    pub(crate) indptr: DeviceVec<u32>,
    pub(crate) indices: DeviceVec<u32>,
    pub(crate) vals: DeviceVec<f64>,
    pub(crate) merge: Option<CsrMergeWorkspace>,
}

impl DeviceCsr {
    /// Uploads a host CSR matrix. Its arrays are not checked again: a `CsrMatrix` holds only
    /// what [`validate_csr`] accepts (checked where it was made).
    pub fn upload(dev: &GpuDevice, a: &CsrMatrix) -> Result<DeviceCsr, GpuError> {
        Ok(DeviceCsr {
            shape: (a.nrows(), a.ncols()),
            indptr: dev.upload(a.indptr())?,
            indices: dev.upload(a.indices())?,
            vals: dev.upload(a.data())?,
            merge: None,
        })
    }

    /// [`DeviceCsr::upload`] that also returns the largest `|a_ij|` (NaNs ignored, as
    /// `f64::max` does; 0 for no entries), taken from the values as they are copied into the
    /// staging buffers, so they are read once.
    pub fn upload_with_max_abs(
        dev: &GpuDevice,
        a: &CsrMatrix,
    ) -> Result<(DeviceCsr, f64), GpuError> {
        let indptr = dev.upload(a.indptr())?;
        let indices = dev.upload(a.indices())?;
        let data = a.data();
        // Bits of non-negative doubles order as the values do.
        let max_bits = std::sync::atomic::AtomicU64::new(0);
        // SAFETY: `upload_into_filled` writes every element before anything can read one.
        let mut vals = unsafe { dev.alloc_uninit::<f64>(data.len()) }?;
        dev.upload_into_filled(&mut vals, &|off, piece| {
            let src = &data[off..off + piece.len()];
            autopcg_sparse::copy::copy_streaming(src, piece);
            let m = src.iter().fold(0.0f64, |m, v| m.max(v.abs()));
            max_bits.fetch_max(m.to_bits(), std::sync::atomic::Ordering::Relaxed);
        })?;
        let csr = DeviceCsr {
            shape: (a.nrows(), a.ncols()),
            indptr,
            indices,
            vals,
            merge: None,
        };
        Ok((csr, f64::from_bits(max_bits.into_inner())))
    }

    /// Uploads raw CSR arrays (checked by [`validate_csr`]).
    pub fn from_parts(
        dev: &GpuDevice,
        nrows: usize,
        ncols: usize,
        indptr: &[u32],
        indices: &[u32],
        vals: &[f64],
    ) -> Result<DeviceCsr, GpuError> {
        validate_csr(nrows, ncols, indptr, indices, vals)?;
        Ok(DeviceCsr {
            shape: (nrows, ncols),
            indptr: dev.upload(indptr)?,
            indices: dev.upload(indices)?,
            vals: dev.upload(vals)?,
            merge: None,
        })
    }

    /// A matrix whose arrays a kernel built on the device. Only the lengths are checked here
    /// (`nrows + 1` row pointers, as many values as column indices): the builder answers for
    /// the rest of what [`validate_csr`] checks of an upload.
    pub(crate) fn from_device(
        nrows: usize,
        ncols: usize,
        indptr: DeviceVec<u32>,
        indices: DeviceVec<u32>,
        vals: DeviceVec<f64>,
    ) -> Result<DeviceCsr, GpuError> {
        if indptr.len() != nrows + 1 || indices.len() != vals.len() {
            return Err(GpuError::InvalidInput {
                what: "CSR arrays built on the device".into(),
                reason: format!(
                    "{} row pointers for {nrows} rows, {} column indices and {} values",
                    indptr.len(),
                    indices.len(),
                    vals.len()
                ),
            });
        }
        Ok(DeviceCsr {
            shape: (nrows, ncols),
            indptr,
            indices,
            vals,
            merge: None,
        })
    }

    /// Overwrites the values with `vals` (new values of the same pattern, in its order): one
    /// copy of the values, the row pointers and column indices stay.
    pub fn upload_values(&mut self, dev: &GpuDevice, vals: &[f64]) -> Result<(), GpuError> {
        if first_where(vals, |v| !v.is_finite()).is_some() {
            return Err(GpuError::InvalidInput {
                what: "new CSR values".into(),
                reason: "a value is not finite".into(),
            });
        }
        dev.upload_into(vals, &mut self.vals)
    }

    /// Overwrites the values with what `fill` writes (see [`GpuDevice::upload_into_filled`]):
    /// new values of the same pattern, in its order, checked by the caller (this does not look
    /// at them).
    pub fn fill_values(
        &mut self,
        dev: &GpuDevice,
        fill: &(dyn Fn(usize, &mut [f64]) + Sync),
    ) -> Result<(), GpuError> {
        dev.upload_into_filled(&mut self.vals, fill)
    }

    /// Makes the workspace [`SpmvKernel::CsrMerge`] needs (the tile boundaries of the merge
    /// path and the carry-out arrays, about 16 bytes per 224 rows plus entries), once: a second
    /// call does nothing. Queues a small kernel; call it before capturing a graph.
    pub fn prepare_merge(&mut self, dev: &GpuDevice) -> Result<(), GpuError> {
        if self.merge.is_none() {
            self.merge = Some(CsrMergeWorkspace::new(dev, self)?);
        }
        Ok(())
    }

    /// Makes whatever `kernel` needs beyond the matrix itself (the merge workspace for
    /// [`SpmvKernel::CsrMerge`]; nothing for the other kernels).
    pub fn prepare_for(&mut self, dev: &GpuDevice, kernel: SpmvKernel) -> Result<(), GpuError> {
        match kernel {
            SpmvKernel::CsrMerge => self.prepare_merge(dev),
            _ => Ok(()),
        }
    }

    /// The merge workspace, when prepared.
    pub fn merge_workspace(&self) -> Option<&CsrMergeWorkspace> {
        self.merge.as_ref()
    }

    /// Host copies of the row pointers, column indices and values.
    pub fn download(&self, dev: &GpuDevice) -> Result<HostArrays, GpuError> {
        Ok((
            dev.download(&self.indptr)?,
            dev.download(&self.indices)?,
            dev.download(&self.vals)?,
        ))
    }

    /// Rows.
    pub fn nrows(&self) -> usize {
        self.shape.0
    }
    /// Columns.
    pub fn ncols(&self) -> usize {
        self.shape.1
    }
    /// Rows and columns.
    pub fn shape(&self) -> (usize, usize) {
        self.shape
    }
    /// Stored entries.
    pub fn nnz(&self) -> usize {
        self.vals.len()
    }
    /// Bytes of the arrays of a matrix of `rows` rows and `entries` stored entries on the
    /// device (32-bit row pointers and column indices, 64-bit values; no merge workspace).
    pub fn arrays_bytes(rows: usize, entries: usize) -> usize {
        rows.saturating_add(1)
            .saturating_mul(4)
            .saturating_add(entries.saturating_mul(12))
    }

    /// Bytes of device memory the arrays (and the merge workspace, when prepared) occupy.
    pub fn device_bytes(&self) -> usize {
        self.indptr.num_bytes()
            + self.indices.num_bytes()
            + self.vals.num_bytes()
            + self
                .merge
                .as_ref()
                .map_or(0, CsrMergeWorkspace::device_bytes)
    }
}

/// Column-major ELLPACK on the device.
#[derive(Debug)]
pub struct DeviceEll {
    /// (nrows, ncols).
    shape: (usize, usize),
    width: usize,
    pub(crate) cols: DeviceVec<u32>,
    pub(crate) vals: DeviceVec<f64>,
}

impl DeviceEll {
    /// Uploads a host ELL matrix.
    pub fn upload(dev: &GpuDevice, a: &EllMatrix) -> Result<DeviceEll, GpuError> {
        DeviceEll::from_parts(dev, a.nrows(), a.ncols(), a.width(), a.cols(), a.vals())
    }

    /// Uploads raw column-major ELL arrays (checked by [`validate_ell`]).
    pub fn from_parts(
        dev: &GpuDevice,
        nrows: usize,
        ncols: usize,
        width: usize,
        cols: &[u32],
        vals: &[f64],
    ) -> Result<DeviceEll, GpuError> {
        validate_ell(nrows, ncols, width, cols, vals)?;
        Ok(DeviceEll {
            shape: (nrows, ncols),
            width,
            cols: dev.upload(cols)?,
            vals: dev.upload(vals)?,
        })
    }

    /// Wraps arrays built on the device (by the conversion kernels, which write only valid
    /// slots).
    pub(crate) fn from_device(
        nrows: usize,
        ncols: usize,
        width: usize,
        cols: DeviceVec<u32>,
        vals: DeviceVec<f64>,
    ) -> DeviceEll {
        DeviceEll {
            shape: (nrows, ncols),
            width,
            cols,
            vals,
        }
    }

    /// Host copies of the column-major column indices and values (`width * nrows` each).
    pub fn download(&self, dev: &GpuDevice) -> Result<(Vec<u32>, Vec<f64>), GpuError> {
        Ok((dev.download(&self.cols)?, dev.download(&self.vals)?))
    }

    /// Rows.
    pub fn nrows(&self) -> usize {
        self.shape.0
    }
    /// Columns.
    pub fn ncols(&self) -> usize {
        self.shape.1
    }
    /// Rows and columns.
    pub fn shape(&self) -> (usize, usize) {
        self.shape
    }
    /// Slots per row.
    pub fn width(&self) -> usize {
        self.width
    }
    /// Bytes of device memory the arrays occupy.
    pub fn device_bytes(&self) -> usize {
        self.cols.num_bytes() + self.vals.num_bytes()
    }
}

/// Diagonal storage on the device.
#[derive(Debug)]
pub struct DeviceDia {
    /// (nrows, ncols).
    shape: (usize, usize),
    pub(crate) offsets: DeviceVec<i32>,
    pub(crate) data: DeviceVec<f64>,
}

impl DeviceDia {
    /// Uploads a host DIA matrix.
    pub fn upload(dev: &GpuDevice, a: &DiaMatrix) -> Result<DeviceDia, GpuError> {
        DeviceDia::from_parts(dev, a.nrows(), a.ncols(), a.offsets(), a.data())
    }

    /// Uploads raw DIA arrays (checked by [`validate_dia`]).
    pub fn from_parts(
        dev: &GpuDevice,
        nrows: usize,
        ncols: usize,
        offsets: &[i32],
        data: &[f64],
    ) -> Result<DeviceDia, GpuError> {
        validate_dia(nrows, ncols, offsets, data)?;
        Ok(DeviceDia {
            shape: (nrows, ncols),
            offsets: dev.upload(offsets)?,
            data: dev.upload(data)?,
        })
    }

    /// Wraps arrays built on the device.
    pub(crate) fn from_device(
        nrows: usize,
        ncols: usize,
        offsets: DeviceVec<i32>,
        data: DeviceVec<f64>,
    ) -> DeviceDia {
        DeviceDia {
            shape: (nrows, ncols),
            offsets,
            data,
        }
    }

    /// Host copies of the offsets and the band (`ndiag * nrows`, diagonal-major).
    pub fn download(&self, dev: &GpuDevice) -> Result<(Vec<i32>, Vec<f64>), GpuError> {
        Ok((dev.download(&self.offsets)?, dev.download(&self.data)?))
    }

    /// Rows.
    pub fn nrows(&self) -> usize {
        self.shape.0
    }
    /// Columns.
    pub fn ncols(&self) -> usize {
        self.shape.1
    }
    /// Rows and columns.
    pub fn shape(&self) -> (usize, usize) {
        self.shape
    }
    /// Stored diagonals.
    pub fn ndiag(&self) -> usize {
        self.offsets.len()
    }
    /// Bytes of device memory the arrays occupy.
    pub fn device_bytes(&self) -> usize {
        self.offsets.num_bytes() + self.data.num_bytes()
    }
}

/// Row-sorted COO on the device.
#[derive(Debug)]
pub struct DeviceCoo {
    /// (nrows, ncols).
    shape: (usize, usize),
    pub(crate) rows: DeviceVec<u32>,
    pub(crate) cols: DeviceVec<u32>,
    pub(crate) vals: DeviceVec<f64>,
}

impl DeviceCoo {
    /// Uploads a host COO matrix.
    pub fn upload(dev: &GpuDevice, a: &CooMatrix) -> Result<DeviceCoo, GpuError> {
        DeviceCoo::from_parts(dev, a.nrows(), a.ncols(), a.rows(), a.cols(), a.vals())
    }

    /// Uploads raw COO arrays (checked by [`validate_coo`]).
    pub fn from_parts(
        dev: &GpuDevice,
        nrows: usize,
        ncols: usize,
        rows: &[u32],
        cols: &[u32],
        vals: &[f64],
    ) -> Result<DeviceCoo, GpuError> {
        validate_coo(nrows, ncols, rows, cols, vals)?;
        Ok(DeviceCoo {
            shape: (nrows, ncols),
            rows: dev.upload(rows)?,
            cols: dev.upload(cols)?,
            vals: dev.upload(vals)?,
        })
    }

    /// Wraps arrays built on the device.
    pub(crate) fn from_device(
        nrows: usize,
        ncols: usize,
        rows: DeviceVec<u32>,
        cols: DeviceVec<u32>,
        vals: DeviceVec<f64>,
    ) -> DeviceCoo {
        DeviceCoo {
            shape: (nrows, ncols),
            rows,
            cols,
            vals,
        }
    }

    /// Host copies of the row indices, column indices and values.
    pub fn download(&self, dev: &GpuDevice) -> Result<HostArrays, GpuError> {
        Ok((
            dev.download(&self.rows)?,
            dev.download(&self.cols)?,
            dev.download(&self.vals)?,
        ))
    }

    /// Rows.
    pub fn nrows(&self) -> usize {
        self.shape.0
    }
    /// Columns.
    pub fn ncols(&self) -> usize {
        self.shape.1
    }
    /// Rows and columns.
    pub fn shape(&self) -> (usize, usize) {
        self.shape
    }
    /// Stored entries.
    pub fn nnz(&self) -> usize {
        self.vals.len()
    }
    /// Bytes of device memory the arrays occupy.
    pub fn device_bytes(&self) -> usize {
        self.rows.num_bytes() + self.cols.num_bytes() + self.vals.num_bytes()
    }
}

/// HYB on the device: an ELL part and a COO part of the same shape.
#[derive(Debug)]
pub struct DeviceHyb {
    /// The first entries of every row.
    pub ell: DeviceEll,
    /// The rest.
    pub coo: DeviceCoo,
}

impl DeviceHyb {
    /// Uploads a host HYB matrix.
    pub fn upload(dev: &GpuDevice, a: &HybMatrix) -> Result<DeviceHyb, GpuError> {
        DeviceHyb::from_parts(
            DeviceEll::upload(dev, a.ell())?,
            DeviceCoo::upload(dev, a.coo())?,
        )
    }

    /// Joins two uploaded parts, which must have the same shape.
    pub fn from_parts(ell: DeviceEll, coo: DeviceCoo) -> Result<DeviceHyb, GpuError> {
        if ell.shape != coo.shape {
            let ((r, c), (cr, cc)) = (ell.shape, coo.shape);
            return Err(invalid(
                "HYB matrix",
                format!("ELL part is {r}x{c} but COO part is {cr}x{cc}"),
            ));
        }
        Ok(DeviceHyb { ell, coo })
    }

    /// Rows.
    pub fn nrows(&self) -> usize {
        self.ell.nrows()
    }
    /// Columns.
    pub fn ncols(&self) -> usize {
        self.ell.ncols()
    }
    /// Rows and columns.
    pub fn shape(&self) -> (usize, usize) {
        self.ell.shape
    }
    /// Bytes of device memory the arrays occupy.
    pub fn device_bytes(&self) -> usize {
        self.ell.device_bytes() + self.coo.device_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csr_checks() {
        assert!(validate_csr(2, 2, &[0, 1, 2], &[0, 1], &[1.0, 2.0]).is_ok());
        assert!(validate_csr(0, 0, &[0], &[], &[]).is_ok());
        let e = validate_csr(2, 2, &[0, 1, 2], &[0, 2], &[1.0, 2.0]).unwrap_err();
        assert!(e.to_string().contains("column index 2 at entry 1"), "{e}");
        assert!(validate_csr(2, 2, &[0, 2, 1], &[0, 1], &[1.0, 2.0]).is_err());
        assert!(validate_csr(2, 2, &[1, 1, 2], &[0, 1], &[1.0, 2.0]).is_err());
        assert!(validate_csr(2, 2, &[0, 1], &[0], &[1.0]).is_err());
        assert!(validate_csr(2, 2, &[0, 1, 3], &[0, 1], &[1.0, 2.0]).is_err());
        assert!(validate_csr(2, 2, &[0, 1, 2], &[0, 1], &[1.0]).is_err());
    }

    #[test]
    fn ell_checks() {
        assert!(validate_ell(2, 2, 2, &[0, 1, ELL_PAD, ELL_PAD], &[1.0, 1.0, 0.0, 0.0]).is_ok());
        assert!(validate_ell(2, 2, 0, &[], &[]).is_ok());
        let e = validate_ell(2, 2, 2, &[0, 1, 5, ELL_PAD], &[0.0; 4]).unwrap_err();
        assert!(e.to_string().contains("slot 1 of row 0"), "{e}");
        assert!(validate_ell(2, 2, 2, &[0, 1, 1], &[0.0; 3]).is_err());
    }

    #[test]
    fn dia_and_coo_checks() {
        assert!(validate_dia(3, 3, &[-1, 0, 1], &[0.0; 9]).is_ok());
        assert!(validate_dia(3, 3, &[-1, 0, 1], &[0.0; 8]).is_err());
        assert!(validate_coo(2, 2, &[0, 0, 1], &[0, 1, 1], &[1.0; 3]).is_ok());
        assert!(validate_coo(2, 2, &[1, 0], &[0, 1], &[1.0; 2]).is_err());
        assert!(validate_coo(2, 2, &[0, 2], &[0, 1], &[1.0; 2]).is_err());
        assert!(validate_coo(2, 2, &[0, 1], &[0, 2], &[1.0; 2]).is_err());
        assert!(validate_coo(2, 2, &[0], &[0, 1], &[1.0; 2]).is_err());
    }
}
