//! The device scalar buffer of Chronopoulos–Gear PCG and the history of reductions.
//!
//! The layout is defined here and in `kernels/cg_scalars.cuh` only (a test compares the two).
//! The buffer holds [`CG_SCALARS_LEN`] doubles; integer slots hold exactly representable
//! doubles. The fused three-dot kernels ([`crate::kernels::dot::dot3_advance`]) run the scalar
//! recurrence on the device and append (gamma, delta, rr) of iteration k to the history at
//! `CG_HIST_STRIDE * k`; the fused update ([`crate::kernels::vector::cg_update`]) reads alpha and
//! beta from the buffer and does nothing once the recurrence halted. The host reads both only
//! when it polls.
use crate::error::DriverContext;
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

/// The device scalar buffer plus a history with room for `capacity` iterations (0..capacity).
#[derive(Debug)]
pub struct CgScalars {
    pub(crate) scalars: DeviceVec<f64>,
    pub(crate) history: DeviceVec<f64>,
    /// Where [`CgScalars::read_since`] gathers history and scalars for one download.
    staging: DeviceVec<f64>,
    capacity: u32,
}

impl CgScalars {
    /// Zeroed scalars and history on `dev`; `capacity` is the number of iterations (counting
    /// the start as iteration 0) the history can hold, so `max_iter + 1` for a solve.
    pub fn new(dev: &GpuDevice, capacity: u32) -> Result<CgScalars, GpuError> {
        Ok(CgScalars {
            scalars: dev.alloc_zeros(CG_SCALARS_LEN)?,
            history: dev.alloc_zeros(CG_HIST_STRIDE * capacity as usize)?,
            staging: dev.alloc_zeros(CG_HIST_STRIDE * capacity as usize + CG_SCALARS_LEN)?,
            capacity,
        })
    }

    /// Iterations the history can hold.
    pub fn capacity(&self) -> u32 {
        self.capacity
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
    /// synchronising download: both are first gathered on the device (two device copies queued
    /// behind the work already queued), then copied to the host together.
    pub fn read_since(
        &mut self,
        dev: &GpuDevice,
        from: u32,
        to: u32,
    ) -> Result<(ScalarSnapshot, Vec<[f64; 3]>), GpuError> {
        self.check_history_range(from, to)?;
        let (lo, hi) = (CG_HIST_STRIDE * from as usize, CG_HIST_STRIDE * to as usize);
        let h = hi - lo;
        let stream = dev.stream();
        if h > 0 {
            let src = self.history.buf.slice(lo..hi);
            let mut dst = self.staging.buf.slice_mut(0..h);
            stream
                .memcpy_dtod(&src, &mut dst)
                .during(|| format!("gathering history entries {from}..{to}"))?;
        }
        let src = self.scalars.buf.slice(0..CG_SCALARS_LEN);
        let mut dst = self.staging.buf.slice_mut(h..h + CG_SCALARS_LEN);
        stream
            .memcpy_dtod(&src, &mut dst)
            .during(|| "gathering the scalar buffer".into())?;
        let flat = dev.download_range(&self.staging, 0, h + CG_SCALARS_LEN)?;
        let mut raw = [0.0; CG_SCALARS_LEN];
        raw.copy_from_slice(&flat[h..]);
        let hist = flat[..h]
            .chunks_exact(CG_HIST_STRIDE)
            .map(|c| [c[0], c[1], c[2]])
            .collect();
        Ok((ScalarSnapshot::decode(&raw)?, hist))
    }
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
