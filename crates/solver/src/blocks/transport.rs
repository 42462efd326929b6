//! What multi-block PCG asks of the link between its blocks: one halo exchange of the vector
//! being multiplied, and one all-reduce of the three dots, per iteration.
//!
//! A [`Transport`] moves data that lives wherever its blocks keep their vectors: host vectors
//! in one address space ([`InProcess`]), device buffers of several blocks on one GPU
//! (device-to-device copies), or device buffers on several GPUs (peer copies or NCCL
//! send/receive and all-reduce). The exchange is described once, as the
//! [`Message`] list of a [`autopcg_sparse::blocks::BlockSplit`]: block `from` has packed the
//! entries its neighbour needs into its send buffer; the transport copies `send[from]
//! [send_range]` into `halo[to][halo_range]`. It may only enqueue the copies (a GPU stream
//! orders them before the multiply that reads the halo) as long as they are complete when the
//! backend next reads the halo buffers.
use autopcg_sparse::blocks::Message;

use crate::PcgError;

/// The communication of multi-block PCG.
pub trait Transport {
    /// One block's buffer of vector entries (a send or a halo buffer).
    type Vector;
    /// One block's partial inner products.
    type Partial;

    /// Delivers every message: `halo[m.to][m.halo_range] = send[m.from][m.send_range]`.
    /// `send` and `halo` hold one buffer per block, in block order.
    fn exchange(
        &mut self,
        messages: &[Message],
        send: &[Self::Vector],
        halo: &mut [Self::Vector],
    ) -> Result<(), PcgError>;

    /// Replaces every block's partial with the sum over all blocks (an in-place all-reduce).
    fn all_reduce(&mut self, partials: &mut [Self::Partial]) -> Result<(), PcgError>;
}

/// Host vectors of every block in one address space: the exchange is a copy per message, the
/// all-reduce a sum in block order, so results do not depend on the thread count.
#[derive(Debug, Clone, Copy, Default)]
pub struct InProcess {
    /// Vector entries moved by [`Transport::exchange`] since construction.
    pub entries_moved: u64,
    /// Exchanges made.
    pub exchanges: u64,
    /// All-reduces made.
    pub reductions: u64,
}

impl Transport for InProcess {
    type Vector = Vec<f64>;
    type Partial = [f64; 3];

    fn exchange(
        &mut self,
        messages: &[Message],
        send: &[Vec<f64>],
        halo: &mut [Vec<f64>],
    ) -> Result<(), PcgError> {
        for m in messages {
            let src = send
                .get(m.from)
                .and_then(|s| s.get(m.send_range.clone()))
                .ok_or_else(|| PcgError::Backend(format!("send buffer too short for {m:?}")))?;
            let dst = halo
                .get_mut(m.to)
                .and_then(|h| h.get_mut(m.halo_range.clone()))
                .ok_or_else(|| PcgError::Backend(format!("halo buffer too short for {m:?}")))?;
            dst.copy_from_slice(src);
            self.entries_moved += m.len() as u64;
        }
        self.exchanges += 1;
        Ok(())
    }

    fn all_reduce(&mut self, partials: &mut [[f64; 3]]) -> Result<(), PcgError> {
        let mut t = [0.0; 3];
        for p in partials.iter() {
            for k in 0..3 {
                t[k] += p[k];
            }
        }
        partials.iter_mut().for_each(|p| *p = t);
        self.reductions += 1;
        Ok(())
    }
}
