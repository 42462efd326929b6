//! Turning the device's scalar buffer and history into the driver's records: shared by the
//! unsplit backend and the row-block backend, which keep the same device-side recurrence
//! ([`CgScalars`]) and the same host-side bookkeeping.
use autopcg_gpu::scalars::{DeviceHalt, HaltCode};
use autopcg_gpu::{CgScalars, GpuDevice};

use crate::backend::{Dots, GearScalars, Halt, IterRecord};
use crate::PcgError;

/// The driver's halt for the device's.
pub(crate) fn halt_from_device(h: DeviceHalt) -> Halt {
    match h.code {
        HaltCode::GammaNotPositive => Halt::GammaNotPositive(h.value),
        HaltCode::CurvatureNotPositive => Halt::CurvatureNotPositive(h.value),
        HaltCode::NotFinite => Halt::NotFinite,
    }
}

/// The host-side bookkeeping of a device recurrence, kept by its backend.
#[derive(Debug, Default)]
pub(crate) struct PollState {
    /// Whether the recurrence runs (after `start`, until a halt is polled or the solution is
    /// zeroed). While false, the steps do nothing.
    pub running: bool,
    /// Records queued since `start` (record 0 is the start), so the next iteration's index.
    pub queued: u32,
    /// First record not yet returned (set to `queued` when done).
    pub polled: u32,
    /// History entries from `polled` on, already downloaded (when the history grew).
    pub carried: Vec<[f64; 3]>,
    /// Scalars after the last record returned.
    pub host_scalars: Option<GearScalars>,
}

impl PollState {
    /// Stops the recurrence and counts every queued record as seen (a new solution, a new
    /// matrix, or a halt the driver has handled).
    pub fn reset(&mut self) {
        self.running = false;
        self.polled = self.queued;
        self.carried.clear();
        self.host_scalars = None;
    }
}

/// The records `polled..queued` of the recurrence whose state is `scalars` on `dev` (one
/// synchronising download). Each record's scalars are recomputed on the host from its dots,
/// except the last, which takes the device's (those its next update uses); a record where the
/// device halted ends the list and stops the recurrence.
pub(crate) fn poll_records(
    dev: &GpuDevice,
    scalars: &mut CgScalars,
    st: &mut PollState,
) -> Result<Vec<IterRecord>, PcgError> {
    if !st.running {
        return Ok(Vec::new());
    }
    let (polled, queued) = (st.polled, st.queued);
    let from = polled + st.carried.len() as u32;
    let (snap, hist) = scalars.read_since(dev, from, queued)?;
    let entries: Vec<[f64; 3]> = st.carried.drain(..).chain(hist).collect();
    let mut records = Vec::with_capacity(entries.len());
    for (j, e) in entries.iter().enumerate() {
        let k = polled + j as u32;
        let dots = Dots {
            gamma: e[0],
            delta: e[1],
            rr: e[2],
        };
        if let Some(h) = snap.halt.filter(|h| h.iteration == k) {
            records.push(IterRecord {
                iteration: k as usize,
                dots,
                outcome: Err(halt_from_device(h)),
            });
            // The device froze its vectors here; nothing after it is meaningful.
            st.running = false;
            st.host_scalars = None;
            st.polled = queued;
            return Ok(records);
        }
        let outcome = if k == 0 {
            GearScalars::start(dots)
        } else {
            match st.host_scalars {
                Some(s) => s.advance(dots),
                None => {
                    return Err(PcgError::Backend(format!(
                        "record {k} has no predecessor scalars (internal error)"
                    )))
                }
            }
        };
        let sc = outcome.map_err(|h| {
            PcgError::Backend(format!(
                "the device recurrence went on at iteration {k} where the host's halts \
                 ({h:?}); dots {dots:?}"
            ))
        })?;
        st.host_scalars = Some(sc);
        records.push(IterRecord {
            iteration: k as usize,
            dots,
            outcome: Ok(sc),
        });
    }
    if let Some(h) = snap.halt {
        return Err(PcgError::Backend(format!(
            "the device recurrence halted at iteration {} outside the records {}..{} \
             (internal error)",
            h.iteration, polled, queued
        )));
    }
    if let Some(last) = records.last_mut() {
        if snap.iteration as usize != last.iteration {
            return Err(PcgError::Backend(format!(
                "the device recorded iteration {} last but the host queued up to {} \
                 (internal error)",
                snap.iteration, last.iteration
            )));
        }
        // The device's scalars are the ones its next update uses.
        let sc = GearScalars {
            alpha: snap.alpha,
            beta: snap.beta,
            gamma: snap.gamma,
        };
        last.outcome = Ok(sc);
        st.host_scalars = Some(sc);
    }
    st.polled = queued;
    Ok(records)
}
