//! The matrix in each format as the sweep sees it: the host conversion, the traffic of its SpMV,
//! the implementations that read it, the upload, and one launch. Every difference between the
//! formats that the sweep knows of is in this file; the sweep itself
//! ([`sweep`](super::sweep)) is the same code for all five.
use autopcg_catalog::{SpmvImpl, SpmvMethod};
use autopcg_sparse::{
    CooMatrix, CsrMatrix, DiaMatrix, EllMatrix, HybMatrix, PaddingLimits, SparseError,
};

use super::bytes::FormatShape;
use crate::kernels::spmv::{spmv_coo, spmv_csr, spmv_dia, spmv_ell, spmv_hyb};
use crate::{
    DeviceCoo, DeviceCsr, DeviceDia, DeviceEll, DeviceHyb, DeviceVec, Format, GpuDevice, GpuError,
};

/// The implementations the sweep lists for `format`, in the order it measures them: the pool's
/// kernels that read it, HYB's ELL kernel with each COO kernel, and for CSR (when `cusparse`)
/// cuSPARSE's algorithms after the pool's kernels.
pub(crate) fn implementations(format: Format, cusparse: bool) -> Vec<SpmvImpl> {
    SpmvImpl::all()
        .into_iter()
        .filter(|i| i.format() == format && (cusparse || !i.is_cusparse()))
        .collect()
}

/// The traffic shape the records of a format that was not converted carry (every width 0).
pub(crate) fn unconverted_shape(format: Format) -> FormatShape {
    match format {
        Format::Csr => FormatShape::Csr,
        Format::Ell => FormatShape::Ell { width: 0 },
        Format::Dia => FormatShape::Dia { ndiag: 0 },
        Format::Coo => FormatShape::Coo,
        Format::Hyb => FormatShape::Hyb {
            width: 0,
            coo_nnz: 0,
            coo_rows: 0,
        },
    }
}

/// The matrix converted to one format on the host (CSR is the matrix itself).
pub(crate) enum HostMatrix<'a> {
    Csr(&'a CsrMatrix),
    Ell(EllMatrix),
    Dia(DiaMatrix),
    Coo(CooMatrix),
    Hyb(HybMatrix),
}

impl<'a> HostMatrix<'a> {
    /// `a` in `format`; `Err` when the conversion refuses it (too much padding under
    /// `padding`). HYB takes the one-third split.
    pub(crate) fn convert(
        format: Format,
        a: &'a CsrMatrix,
        padding: &PaddingLimits,
    ) -> Result<Self, SparseError> {
        Ok(match format {
            Format::Csr => HostMatrix::Csr(a),
            Format::Ell => HostMatrix::Ell(EllMatrix::from_csr(a, padding)?),
            Format::Dia => HostMatrix::Dia(DiaMatrix::from_csr(a, padding)?),
            Format::Coo => HostMatrix::Coo(CooMatrix::from_csr(a)),
            Format::Hyb => HostMatrix::Hyb(HybMatrix::from_csr(a, None, padding)?),
        })
    }

    pub(crate) fn format(&self) -> Format {
        match self {
            HostMatrix::Csr(_) => Format::Csr,
            HostMatrix::Ell(_) => Format::Ell,
            HostMatrix::Dia(_) => Format::Dia,
            HostMatrix::Coo(_) => Format::Coo,
            HostMatrix::Hyb(_) => Format::Hyb,
        }
    }

    /// The shape its SpMV's traffic depends on ([`format_bytes`](super::format_bytes)).
    pub(crate) fn shape(&self) -> FormatShape {
        match self {
            HostMatrix::Csr(_) => FormatShape::Csr,
            HostMatrix::Ell(h) => FormatShape::Ell { width: h.width() },
            HostMatrix::Dia(h) => FormatShape::Dia { ndiag: h.ndiag() },
            HostMatrix::Coo(_) => FormatShape::Coo,
            HostMatrix::Hyb(h) => {
                // The COO part is sorted by row: its distinct rows are its runs.
                let rows = h.coo().rows();
                let runs = rows.windows(2).filter(|w| w[0] != w[1]).count();
                FormatShape::Hyb {
                    width: h.ell().width(),
                    coo_nnz: h.coo().nnz(),
                    coo_rows: runs + usize::from(!rows.is_empty()),
                }
            }
        }
    }

    /// Entries of HYB's COO part; 0 for the other formats.
    pub(crate) fn coo_part_nnz(&self) -> usize {
        match self {
            HostMatrix::Hyb(h) => h.coo().nnz(),
            _ => 0,
        }
    }

    /// The implementations measured on this matrix: those [`implementations`] lists, except
    /// that HYB without a COO part measures its first COO kernel only (with nothing to do
    /// for the COO kernel, the two candidates are one).
    pub(crate) fn implementations(&self, cusparse: bool) -> Vec<SpmvImpl> {
        let mut v = implementations(self.format(), cusparse);
        if matches!(self, HostMatrix::Hyb(_)) && self.coo_part_nnz() == 0 {
            v.truncate(1);
        }
        v
    }
}

/// The matrix on the device in one format.
pub(crate) enum DeviceMatrix {
    Csr(DeviceCsr),
    Ell(DeviceEll),
    Dia(DeviceDia),
    Coo(DeviceCoo),
    Hyb(DeviceHyb),
}

impl DeviceMatrix {
    /// Queues the upload of `host` (the caller waits for it).
    pub(crate) fn upload(dev: &GpuDevice, host: &HostMatrix<'_>) -> Result<Self, GpuError> {
        Ok(match host {
            HostMatrix::Csr(h) => DeviceMatrix::Csr(DeviceCsr::upload(dev, h)?),
            HostMatrix::Ell(h) => DeviceMatrix::Ell(DeviceEll::upload(dev, h)?),
            HostMatrix::Dia(h) => DeviceMatrix::Dia(DeviceDia::upload(dev, h)?),
            HostMatrix::Coo(h) => DeviceMatrix::Coo(DeviceCoo::upload(dev, h)?),
            HostMatrix::Hyb(h) => DeviceMatrix::Hyb(DeviceHyb::upload(dev, h)?),
        })
    }

    /// Bytes it occupies on the device.
    pub(crate) fn device_bytes(&self) -> usize {
        match self {
            DeviceMatrix::Csr(d) => d.device_bytes(),
            DeviceMatrix::Ell(d) => d.device_bytes(),
            DeviceMatrix::Dia(d) => d.device_bytes(),
            DeviceMatrix::Coo(d) => d.device_bytes(),
            DeviceMatrix::Hyb(d) => d.device_bytes(),
        }
    }

    /// The CSR arrays, when this is the CSR matrix.
    pub(crate) fn csr(&self) -> Option<&DeviceCsr> {
        match self {
            DeviceMatrix::Csr(d) => Some(d),
            _ => None,
        }
    }

    /// Queues `y = A x` as `method` says; `Err` (before anything is queued) when the method
    /// reads another format.
    pub(crate) fn spmv(
        &self,
        dev: &GpuDevice,
        method: &SpmvMethod,
        x: &DeviceVec<f64>,
        y: &mut DeviceVec<f64>,
    ) -> Result<(), GpuError> {
        match (self, *method) {
            (DeviceMatrix::Csr(d), SpmvMethod::Csr { kernel, config }) => {
                spmv_csr(dev, d, kernel, config, x, y)
            }
            (DeviceMatrix::Ell(d), SpmvMethod::Ell { config }) => spmv_ell(dev, d, config, x, y),
            (DeviceMatrix::Dia(d), SpmvMethod::Dia { config }) => spmv_dia(dev, d, config, x, y),
            (DeviceMatrix::Coo(d), SpmvMethod::Coo { kernel, config }) => {
                spmv_coo(dev, d, kernel, config, x, y)
            }
            (
                DeviceMatrix::Hyb(d),
                SpmvMethod::Hyb {
                    ell_config,
                    coo_kernel,
                    coo_config,
                    ..
                },
            ) => spmv_hyb(dev, d, ell_config, coo_kernel, coo_config, x, y),
            _ => Err(GpuError::launch(
                method.kernel_name(),
                format!(
                    "reads {} but the benchmark holds the matrix as {}",
                    method.format(),
                    self.format()
                ),
            )),
        }
    }

    fn format(&self) -> Format {
        match self {
            DeviceMatrix::Csr(_) => Format::Csr,
            DeviceMatrix::Ell(_) => Format::Ell,
            DeviceMatrix::Dia(_) => Format::Dia,
            DeviceMatrix::Coo(_) => Format::Coo,
            DeviceMatrix::Hyb(_) => Format::Hyb,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use autopcg_catalog::{CusparseAlg, SpmvKernel};

    #[test]
    fn implementations_in_the_order_the_sweep_measures_them() {
        let names = |f, cu| -> Vec<String> {
            implementations(f, cu)
                .iter()
                .map(|i| i.to_string())
                .collect()
        };
        // The pool's CSR kernels in the catalogue's order (their names are pinned by the SpMV
        // wrappers' tests), then cuSPARSE's algorithms when it is there.
        let csr_kernels: Vec<String> = SpmvKernel::all()
            .into_iter()
            .filter(|k| k.format() == Format::Csr)
            .map(|k| k.to_string())
            .collect();
        assert_eq!(csr_kernels.len(), 7);
        assert_eq!(names(Format::Csr, false), csr_kernels);
        let with_cusparse = names(Format::Csr, true);
        assert_eq!(with_cusparse[..7], csr_kernels);
        assert_eq!(
            with_cusparse[7..],
            [
                "cusparse_spmv_alg_default",
                "cusparse_spmv_csr_alg1",
                "cusparse_spmv_csr_alg2"
            ]
        );
        assert_eq!(names(Format::Ell, true), ["spmv_ell"]);
        assert_eq!(names(Format::Dia, true), ["spmv_dia"]);
        assert_eq!(
            names(Format::Coo, true),
            ["spmv_coo_atomic", "spmv_coo_segment"]
        );
        assert_eq!(
            names(Format::Hyb, true),
            ["spmv_ell+spmv_coo_atomic", "spmv_ell+spmv_coo_segment"]
        );
        assert!(
            implementations(Format::Csr, true).contains(&SpmvImpl::Cusparse(CusparseAlg::CsrAlg2))
        );
    }

    #[test]
    fn host_shapes_and_hyb_without_a_coo_part() {
        // Rows of 1, 1, 1, 1, 3, 4 and 5 entries: the one-third rule (at least 3 of the 7 rows
        // as long) gives an ELL part of width 3 and puts 1 + 2 entries of two rows in COO.
        let lens = [1u32, 1, 1, 1, 3, 4, 5];
        let (mut ri, mut ci) = (Vec::new(), Vec::new());
        for (i, &l) in lens.iter().enumerate() {
            for j in 0..l {
                ri.push(i as u32);
                ci.push(j);
            }
        }
        let vals = vec![1.0; ri.len()];
        let a = CsrMatrix::from_triplets(7, 7, &ri, &ci, &vals).unwrap();
        let pad = PaddingLimits::default();
        let hyb = HostMatrix::convert(Format::Hyb, &a, &pad).unwrap();
        assert_eq!(hyb.format(), Format::Hyb);
        assert_eq!(
            hyb.shape(),
            FormatShape::Hyb {
                width: 3,
                coo_nnz: 3,
                coo_rows: 2
            }
        );
        assert_eq!(hyb.coo_part_nnz(), 3);
        assert_eq!(hyb.implementations(false).len(), 2);
        // A diagonal matrix has no COO part: one HYB candidate.
        let d = CsrMatrix::from_triplets(3, 3, &[0, 1, 2], &[0, 1, 2], &[1.0; 3]).unwrap();
        let hyb = HostMatrix::convert(Format::Hyb, &d, &pad).unwrap();
        assert_eq!(hyb.coo_part_nnz(), 0);
        assert_eq!(
            hyb.implementations(true),
            [SpmvImpl::Hyb(SpmvKernel::CooAtomic)]
        );
        let ell = HostMatrix::convert(Format::Ell, &a, &pad).unwrap();
        assert_eq!(ell.shape(), FormatShape::Ell { width: 5 });
        let dia = HostMatrix::convert(Format::Dia, &d, &pad).unwrap();
        assert_eq!(dia.shape(), FormatShape::Dia { ndiag: 1 });
        assert_eq!(
            HostMatrix::convert(Format::Csr, &a, &pad).unwrap().shape(),
            FormatShape::Csr
        );
    }
}
