//! The conversions the benchmark times: each format converted on the host and uploaded
//! ([`stage`]), and ELL, DIA and HYB built on the device from the uploaded CSR matrix
//! ([`time_device_conversions`]: one untimed call, then [`DEVICE_CONVERSION_REPS`] calls each
//! between two events, the copies of the counts to the host that each conversion waits for
//! included; each result is dropped before the next, so the device holds the CSR matrix and
//! one converted copy at a time).
use std::time::Instant;

use autopcg_sparse::{CsrMatrix, PaddingLimits};

use super::matrix::HostMatrix;
use super::records::{ConversionRecord, RecordStatus};
use super::sweep::DeviceSide;
use crate::kernels::convert::{csr_to_dia, csr_to_ell, csr_to_hyb};
use crate::{time_kernel, DeviceCsr, Format, GpuDevice, GpuError};

/// Timed repetitions of each device conversion (after one untimed call).
pub const DEVICE_CONVERSION_REPS: usize = 5;

/// Converts `a` to `format` on the host and puts it on the device, timing both. The record
/// says how it went; the matrix comes back in both forms when it did, and nothing when the
/// conversion refused the format (skipped) or the upload failed (failed).
pub(crate) fn stage<'a, S: DeviceSide>(
    side: &mut S,
    format: Format,
    a: &'a CsrMatrix,
    padding: &PaddingLimits,
) -> (ConversionRecord, Option<(HostMatrix<'a>, S::Matrix)>) {
    let mut rec = ConversionRecord::new(format);
    let t0 = Instant::now();
    let host = match HostMatrix::convert(format, a, padding) {
        Ok(h) => h,
        Err(e) => {
            rec.status = RecordStatus::Skipped(e.to_string());
            return (rec, None);
        }
    };
    rec.host_ms = t0.elapsed().as_secs_f64() * 1e3;
    let t1 = Instant::now();
    let m = match side.upload(&host) {
        Ok(m) => m,
        Err(e) => {
            rec.status = RecordStatus::Failed(format!("upload: {e}"));
            return (rec, None);
        }
    };
    rec.upload_ms = t1.elapsed().as_secs_f64() * 1e3;
    rec.device_bytes = side.device_bytes(&m);
    (rec, Some((host, m)))
}

/// The device conversion of one format: its median time, `Ok(None)` when refused (the host
/// conversion refuses it too), or why it failed.
pub(crate) type DeviceConversion = Result<Option<f64>, String>;

/// The device conversions of the padded formats.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DeviceConversions {
    pub(crate) ell: DeviceConversion,
    pub(crate) dia: DeviceConversion,
    pub(crate) hyb: DeviceConversion,
}

impl DeviceConversions {
    /// The conversion to `format`; `None` for the formats not built on the device.
    pub(crate) fn of(&self, format: Format) -> Option<DeviceConversion> {
        match format {
            Format::Ell => Some(self.ell.clone()),
            Format::Dia => Some(self.dia.clone()),
            Format::Hyb => Some(self.hyb.clone()),
            Format::Csr | Format::Coo => None,
        }
    }
}

/// Times the ELL, DIA and HYB conversions on the device from `a`, in that order.
pub(crate) fn time_device_conversions(
    dev: &GpuDevice,
    a: &DeviceCsr,
    padding: &PaddingLimits,
) -> Result<DeviceConversions, GpuError> {
    Ok(DeviceConversions {
        ell: time_device_conversion(dev, || csr_to_ell(dev, a, padding))?,
        dia: time_device_conversion(dev, || csr_to_dia(dev, a, padding))?,
        hyb: time_device_conversion(dev, || csr_to_hyb(dev, a, None, padding))?,
    })
}

/// Times a conversion on the device ([`DEVICE_CONVERSION_REPS`] runs after one untimed call,
/// each result dropped before the next).
fn time_device_conversion<D>(
    dev: &GpuDevice,
    mut run: impl FnMut() -> Result<D, GpuError>,
) -> Result<DeviceConversion, GpuError> {
    match time_kernel(dev, || run().map(drop), DEVICE_CONVERSION_REPS, 0.0) {
        Ok(stats) => Ok(Ok(Some(stats.median_ms))),
        Err(GpuError::Sparse(_)) => Ok(Ok(None)),
        Err(e) => {
            // A fault poisons the context: if the device no longer answers, stop.
            dev.synchronize()?;
            Ok(Err(e.to_string()))
        }
    }
}

/// Puts a device conversion's outcome into its record (`None`: there was no CSR matrix on the
/// device to convert from).
pub(crate) fn set_device_conversion(rec: &mut ConversionRecord, dc: Option<DeviceConversion>) {
    match dc {
        Some(Ok(ms)) => rec.device_ms = ms,
        Some(Err(e)) => rec.device_error = Some(e),
        None => rec.device_error = Some("the CSR matrix is not on the device".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> ConversionRecord {
        ConversionRecord::new(Format::Ell)
    }

    #[test]
    fn device_conversion_outcomes_reach_the_record() {
        let dc = DeviceConversions {
            ell: Ok(Some(0.25)),
            dia: Ok(None),
            hyb: Err("out of memory".into()),
        };
        assert_eq!(dc.of(Format::Csr), None);
        assert_eq!(dc.of(Format::Coo), None);
        let mut r = record();
        set_device_conversion(&mut r, dc.of(Format::Ell));
        assert_eq!((r.device_ms, r.device_error), (Some(0.25), None));
        let mut r = record();
        set_device_conversion(&mut r, dc.of(Format::Dia));
        assert_eq!((r.device_ms, r.device_error), (None, None));
        let mut r = record();
        set_device_conversion(&mut r, dc.of(Format::Hyb));
        assert_eq!(r.device_error.as_deref(), Some("out of memory"));
        let mut r = record();
        set_device_conversion(&mut r, None);
        assert_eq!(
            r.device_error.as_deref(),
            Some("the CSR matrix is not on the device")
        );
    }
}
