//! The preconditioner's values recomputed on the device after new values of `A` (same
//! pattern) reached it: Jacobi's inverse diagonal, SSOR-AI's `K`, the factored form's
//! `K^T diag(s)` and the explicit product, from `A`'s CSR values on the device, into the CSR values the preconditioner's
//! operands are converted from. The patterns (and where each entry of `K^T` sits in `K`) are
//! uploaded once, from the host refresh that knows them ([`ValueRefresh`]), or, for
//! first-order factored SSOR-AI the device built from `A`, found on the device
//! ([`DeviceRefresh::from_a`]); nothing of the new values then crosses the bus again, and the
//! host copy of the preconditioner, where there is one, is left as it was (the caller
//! recomputes it if it needs it). The values equal those
//! [`ValueRefresh::refresh`] computes on the host (see `autopcg_gpu::kernels::refresh`).
use autopcg_gpu::kernels::refresh::{
    gather_scaled_values, gather_values, gram_values, inv_diag, ssor_k_values, DeviceDiagonal,
    DeviceGather,
};
use autopcg_gpu::kernels::ssor::{
    diagonal_positions, ssor_k1_explicit, ssor_k1_factors, ssor_k1_refresh_maps, ssor_k2_factors,
    ssor_k2_refresh_maps, SsorK1Build, SsorK1Explicit, SsorK2Build, SsorK2Parts,
};
use autopcg_gpu::{DeviceCsr, GpuDevice};
use autopcg_sparse::{CsrMatrix, PaddingLimits};

use super::ops::{DeviceOperator, DevicePrecond};
use super::BackendTimes;
use crate::{PcgError, PrecondKind, Preconditioner, ValueRefresh};

/// What a device refresh keeps between value updates.
#[derive(Debug)]
pub(crate) struct DeviceRefresh {
    diag: DeviceDiagonal,
    what: Refreshed,
}

#[derive(Debug)]
enum Refreshed {
    None,
    Jacobi,
    /// The factored form: `K` and `K^T` are the preconditioner's operands (their kept CSR
    /// sources take the values).
    Factored {
        omega: f64,
        order: u8,
        kt_src: DeviceGather,
    },
    /// The explicit form: `K` and `K^T` live here, the product goes to `M`'s operand.
    Explicit {
        omega: f64,
        order: u8,
        kt_src: DeviceGather,
        k: Box<DeviceCsr>,
        kt: Box<DeviceCsr>,
    },
}

fn internal(what: &str) -> PcgError {
    PcgError::Backend(format!("{what} (internal error)"))
}

/// The CSR values an operand is converted from, which [`DeviceRefresh::new`] made sure it keeps.
fn source<'o>(op: &'o mut DeviceOperator, name: &str) -> Result<&'o mut DeviceCsr, PcgError> {
    op.device_csr_source()
        .ok_or_else(|| internal(&format!("{name} keeps no CSR values on the device")))
}

impl DeviceRefresh {
    /// Prepares device refreshes of `pre` (on the device, uploaded from `host`, the
    /// preconditioner `refresh` refreshes) for new values of `a`'s pattern. `None` when the
    /// device cannot do it: an omega chosen anew for each set of values (the prepared solver
    /// resolves it once), or an operand kept in COO, which keeps no CSR values. Uploads the
    /// diagonal positions, the gather of `K^T`, the explicit form's `K` and `K^T`, and the
    /// CSR source of a converted operand that has none yet.
    pub(crate) fn new(
        dev: &GpuDevice,
        a: &CsrMatrix,
        refresh: &ValueRefresh,
        host: &Preconditioner,
        pre: &mut DevicePrecond,
    ) -> Result<Option<DeviceRefresh>, PcgError> {
        let ssor = match *refresh.kind() {
            PrecondKind::None | PrecondKind::Jacobi => None,
            PrecondKind::SsorAi {
                order,
                omega: Some(omega),
                ..
            } => Some((order, omega)),
            PrecondKind::SsorAi { omega: None, .. } => return Ok(None),
        };
        let what = match (ssor, host, &mut *pre) {
            (None, Preconditioner::None, DevicePrecond::None) => Refreshed::None,
            (None, Preconditioner::Jacobi { .. }, DevicePrecond::Jacobi { .. }) => {
                Refreshed::Jacobi
            }
            (
                Some((order, omega)),
                Preconditioner::SsorFactored { k: hk, kt: hkt, .. },
                DevicePrecond::Factored { k, kt, .. },
            ) => {
                if !k.keep_source(dev, hk)? || !kt.keep_source(dev, hkt)? {
                    return Ok(None);
                }
                check_k_rows(a, hk, order)?;
                Refreshed::Factored {
                    omega,
                    order,
                    kt_src: DeviceGather::upload(dev, refresh.kt_sources(), hk.nnz())?,
                }
            }
            (
                Some((order, omega)),
                Preconditioner::SsorExplicit { m: hm },
                DevicePrecond::Explicit { m },
            ) => {
                let Some((hk, hkt)) = refresh.factors() else {
                    return Err(internal("an explicit SSOR-AI refresh without K"));
                };
                if !m.keep_source(dev, hm)? {
                    return Ok(None);
                }
                check_k_rows(a, hk, order)?;
                Refreshed::Explicit {
                    omega,
                    order,
                    kt_src: DeviceGather::upload(dev, refresh.kt_sources(), hk.nnz())?,
                    k: Box::new(DeviceCsr::upload(dev, hk)?),
                    kt: Box::new(DeviceCsr::upload(dev, hkt)?),
                }
            }
            _ => return Err(internal("a device refresh of another preconditioner")),
        };
        Ok(Some(DeviceRefresh {
            diag: DeviceDiagonal::upload(dev, a)?,
            what,
        }))
    }

    /// Prepares device refreshes of first-order factored SSOR-AI that the backend built on
    /// the device from `a` (`A`'s CSR arrays on the device) with relaxation `omega`, without
    /// any host copy: a converted factor gets its CSR arrays as its source by building the
    /// factors again from `a` there, and the diagonal positions and the position in K of each
    /// entry of K^T are found there too. `None` when the device cannot refresh them (a factor
    /// kept in COO, or a pattern the build did not take): the caller then refreshes on the
    /// host.
    pub(crate) fn from_a(
        dev: &GpuDevice,
        a: &DeviceCsr,
        omega: f64,
        pre: &mut DevicePrecond,
    ) -> Result<Option<DeviceRefresh>, PcgError> {
        let DevicePrecond::Factored { k, kt } = pre else {
            return Err(internal(
                "a device refresh from A of another preconditioner",
            ));
        };
        if k.lacks_source() || kt.lacks_source() {
            let (ck, ckt) = match ssor_k1_factors(dev, a, omega)? {
                SsorK1Build::Built { k, kt } => (k, kt),
                SsorK1Build::AsymmetricPattern { .. } => return Ok(None),
            };
            if !k.keep_device_source(*ck) || !kt.keep_device_source(*ckt) {
                return Ok(None);
            }
        }
        let (Some(ks), Some(kts)) = (k.device_csr_source(), kt.device_csr_source()) else {
            return Ok(None);
        };
        Ok(
            ssor_k1_refresh_maps(dev, a, ks, kts)?.map(|(diag, kt_src)| DeviceRefresh {
                diag,
                what: Refreshed::Factored {
                    omega,
                    order: 1,
                    kt_src,
                },
            }),
        )
    }

    /// Prepares device refreshes of first-order explicit SSOR-AI that the backend formed on
    /// the device from `a` (`A`'s CSR arrays on the device) with relaxation `omega`, without
    /// any host copy: the product is formed there again with the factors it is formed from,
    /// which the refresh keeps (and a converted `M` its CSR arrays as its source). `None` when
    /// the device cannot refresh it (`M` kept in COO, or a matrix the device does not form
    /// the product of): the caller then refreshes on the host.
    pub(crate) fn explicit_from_a(
        dev: &GpuDevice,
        a: &DeviceCsr,
        omega: f64,
        pre: &mut DevicePrecond,
    ) -> Result<Option<DeviceRefresh>, PcgError> {
        let DevicePrecond::Explicit { m } = pre else {
            return Err(internal(
                "an explicit refresh from A of another preconditioner",
            ));
        };
        let parts = match ssor_k1_explicit(dev, a, omega)? {
            SsorK1Explicit::Built(parts) => *parts,
            SsorK1Explicit::Refused(_) => return Ok(None),
        };
        if m.lacks_source() && !m.keep_device_source(parts.m) {
            return Ok(None);
        }
        if m.device_csr_source().is_none() {
            return Ok(None);
        }
        Ok(Some(DeviceRefresh {
            diag: parts.diag,
            what: Refreshed::Explicit {
                omega,
                order: 1,
                kt_src: parts.kt_src,
                k: Box::new(parts.k),
                kt: Box::new(parts.kt),
            },
        }))
    }

    /// Prepares device refreshes of second-order factored SSOR-AI that the backend built on
    /// the device from `a` (`A`'s CSR arrays on the device) with relaxation `omega`, without
    /// any host copy: the diagonal positions and the position in K of each entry of K^T are
    /// read off the factors' CSR arrays on the device ([`ssor_k2_refresh_maps`]); only where a
    /// factor was converted to another format without them are the factors built there again
    /// from `a`, for the CSR arrays it then keeps as its source and the maps their build finds. `None` when the device cannot
    /// refresh them (a factor kept in COO, or a pattern the build does not take): the caller
    /// then refreshes on the host.
    pub(crate) fn k2_from_a(
        dev: &GpuDevice,
        a: &DeviceCsr,
        omega: f64,
        pre: &mut DevicePrecond,
    ) -> Result<Option<DeviceRefresh>, PcgError> {
        let DevicePrecond::Factored { k, kt } = pre else {
            return Err(internal(
                "a device refresh from A of another preconditioner",
            ));
        };
        // A factor without its CSR arrays takes those of the factors built again, whose build
        // finds the maps too; otherwise the maps are read off the factors' arrays.
        let mut rebuilt_maps = None;
        if k.lacks_source() || kt.lacks_source() {
            let SsorK2Parts {
                k: ck,
                kt: ckt,
                diag,
                kt_src,
            } = match ssor_k2_factors(dev, a, omega)? {
                SsorK2Build::Built(parts) => *parts,
                SsorK2Build::Refused(_) => return Ok(None),
            };
            if k.lacks_source() && !k.keep_device_source(ck) {
                return Ok(None);
            }
            if kt.lacks_source() && !kt.keep_device_source(ckt) {
                return Ok(None);
            }
            rebuilt_maps = Some((diag, kt_src));
        }
        let (Some(ks), Some(kts)) = (k.device_csr_source(), kt.device_csr_source()) else {
            return Ok(None);
        };
        let maps = match rebuilt_maps {
            Some(maps) => Some(maps),
            None => ssor_k2_refresh_maps(dev, a, ks, kts)?,
        };
        Ok(maps.map(|(diag, kt_src)| DeviceRefresh {
            diag,
            what: Refreshed::Factored {
                omega,
                order: 2,
                kt_src,
            },
        }))
    }

    /// Prepares device refreshes of Jacobi's inverse diagonal that the backend built on the
    /// device from `a` (`A`'s CSR arrays on the device): the diagonal positions are found
    /// there. `None` when a row of `a` stores no diagonal entry (the build would not have
    /// taken it).
    pub(crate) fn jacobi_from_a(
        dev: &GpuDevice,
        a: &DeviceCsr,
        pre: &DevicePrecond,
    ) -> Result<Option<DeviceRefresh>, PcgError> {
        let DevicePrecond::Jacobi { .. } = pre else {
            return Err(internal(
                "a Jacobi refresh from A of another preconditioner",
            ));
        };
        Ok(diagonal_positions(dev, a)?.map(|diag| DeviceRefresh {
            diag,
            what: Refreshed::Jacobi,
        }))
    }

    /// Recomputes `pre`'s values from `a` (`A`'s CSR values on the device) and converts its
    /// operands again: the kernels' time is returned, the conversions' added to `times`.
    /// Buffers of a converted operand may be new: graphs that captured them must be captured
    /// again.
    pub(crate) fn run(
        &mut self,
        dev: &GpuDevice,
        a: &DeviceCsr,
        pre: &mut DevicePrecond,
        limits: &PaddingLimits,
        mut times: Option<&mut BackendTimes>,
    ) -> Result<f64, PcgError> {
        let t0 = std::time::Instant::now();
        let diag = &self.diag;
        match (&mut self.what, pre) {
            (Refreshed::None, DevicePrecond::None) => Ok(0.0),
            (Refreshed::Jacobi, DevicePrecond::Jacobi { inv_diag: d, .. }) => {
                inv_diag(dev, a, diag, 1.0, d)?;
                dev.synchronize()?;
                Ok(t0.elapsed().as_secs_f64() * 1e3)
            }
            (
                Refreshed::Factored {
                    omega,
                    order,
                    kt_src,
                },
                DevicePrecond::Factored { k, kt },
            ) => {
                let ks = source(k, "K")?;
                ssor_k_values(dev, a, diag, *omega, *order, ks)?;
                let scale = *omega * (2.0 - *omega);
                gather_scaled_values(dev, kt_src, ks, a, diag, scale, source(kt, "K^T")?)?;
                dev.synchronize()?;
                let ms = t0.elapsed().as_secs_f64() * 1e3;
                k.convert_staged(dev, limits, "K", times.as_deref_mut())?;
                kt.convert_staged(dev, limits, "K^T", times)?;
                Ok(ms)
            }
            (
                Refreshed::Explicit {
                    omega,
                    order,
                    kt_src,
                    k,
                    kt,
                },
                DevicePrecond::Explicit { m },
            ) => {
                ssor_k_values(dev, a, diag, *omega, *order, k)?;
                gather_values(dev, kt_src, k, kt)?;
                let scale = *omega * (2.0 - *omega);
                gram_values(dev, kt, k, a, diag, scale, source(m, "M")?)?;
                dev.synchronize()?;
                let ms = t0.elapsed().as_secs_f64() * 1e3;
                m.convert_staged(dev, limits, "M", times)?;
                Ok(ms)
            }
            _ => Err(internal("a device refresh of another preconditioner")),
        }
    }
}

/// Fails unless `k` has `a`'s rows and, for order 1, every row of `k` holds as many entries as
/// `a`'s row has strictly lower ones, plus the diagonal: the layout the order-1 kernel writes
/// without looking columns up (order 2 looks each one up).
fn check_k_rows(a: &CsrMatrix, k: &CsrMatrix, order: u8) -> Result<(), PcgError> {
    if k.nrows() != a.nrows() {
        return Err(internal("K and A of different sizes"));
    }
    if order != 1 {
        return Ok(());
    }
    let (ap, kp) = (a.indptr(), k.indptr());
    let mismatch = a.diagonal_positions().iter().enumerate().any(|(i, &d)| {
        d == autopcg_sparse::csr::NO_ENTRY || d < ap[i] || kp[i + 1] - kp[i] != d - ap[i] + 1
    });
    if mismatch {
        return Err(internal("K's rows do not follow A's lower triangle"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::precond::poisson1d;

    #[test]
    fn order_one_k_follows_the_lower_triangle_and_others_are_refused() {
        let a = poisson1d(6);
        let Preconditioner::SsorFactored { k, kt, .. } =
            Preconditioner::build(&a, &PrecondKind::ssor_ai().with_omega(1.0)).unwrap()
        else {
            panic!("factored form expected")
        };
        check_k_rows(&a, &k, 1).unwrap();
        // K^T has the same row count but its rows hold the upper triangle.
        let e = check_k_rows(&a, &kt, 1).unwrap_err().to_string();
        assert!(e.contains("lower triangle"), "{e}");
        // Order 2 looks columns up: only the size is checked.
        check_k_rows(&a, &kt, 2).unwrap();
        let e = check_k_rows(&poisson1d(5), &k, 2).unwrap_err().to_string();
        assert!(e.contains("different sizes"), "{e}");
    }
}
