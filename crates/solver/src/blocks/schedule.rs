//! The halo exchange of row blocks as flat index and copy lists, for transports of device
//! buffers: the gather list that packs each block's send buffer in one kernel, and the checked
//! copies (one per [`autopcg_sparse::blocks::Message`]) a device transport queues.
use std::ops::Range;

use autopcg_sparse::blocks::{BlockSplit, HaloBlock};

use crate::PcgError;

/// The local indices a block packs into its send buffer, in send-buffer order: entry `k` of the
/// send buffer is `x_local[pack_indices(blk)[k]]`, as [`HaloBlock::pack`] fills it.
pub fn pack_indices(blk: &HaloBlock) -> Vec<u32> {
    let mut idx = vec![0u32; blk.send_len()];
    for s in &blk.sends {
        for (slot, &j) in idx[s.send_range.clone()].iter_mut().zip(&s.local) {
            *slot = j;
        }
    }
    idx
}

/// One copy of a halo exchange between device buffers: `halo[to][dst] = send[from][src]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceCopy {
    /// Sending block.
    pub from: usize,
    /// Receiving block.
    pub to: usize,
    /// Range in the sender's send buffer.
    pub src: Range<usize>,
    /// Start in the receiver's halo buffer (the copy is `src.len()` long).
    pub dst_start: usize,
}

/// The copies of one halo exchange of `split`, in message order, each checked against the
/// buffer lengths (send buffers of [`HaloBlock::send_len`], halo buffers of
/// [`HaloBlock::halo_len`]), and covering every halo buffer exactly once.
pub fn copy_schedule(split: &BlockSplit) -> Result<Vec<DeviceCopy>, PcgError> {
    let blocks = split.blocks();
    let mut covered: Vec<usize> = vec![0; blocks.len()];
    let mut out = Vec::with_capacity(split.messages().len());
    for m in split.messages() {
        let bad = |why: &str| PcgError::Backend(format!("halo message {m:?}: {why}"));
        let (Some(sender), Some(receiver)) = (blocks.get(m.from), blocks.get(m.to)) else {
            return Err(bad("no such block"));
        };
        if m.from == m.to {
            return Err(bad("a block sends to itself"));
        }
        if m.send_range.len() != m.halo_range.len() {
            return Err(bad("send and halo ranges differ in length"));
        }
        if m.send_range.end > sender.send_len() {
            return Err(bad("outside the send buffer"));
        }
        if m.halo_range.end > receiver.halo_len() {
            return Err(bad("outside the halo buffer"));
        }
        covered[m.to] += m.halo_range.len();
        if m.is_empty() {
            continue;
        }
        out.push(DeviceCopy {
            from: m.from,
            to: m.to,
            src: m.send_range.clone(),
            dst_start: m.halo_range.start,
        });
    }
    for (b, (blk, &c)) in blocks.iter().zip(&covered).enumerate() {
        if c != blk.halo_len() {
            return Err(PcgError::Backend(format!(
                "the halo messages fill {c} of block {b}'s {} halo entries",
                blk.halo_len()
            )));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use autopcg_sparse::blocks::RowPartition;
    use autopcg_sparse::CsrMatrix;

    use super::*;

    /// 1D Laplacian plus a long-range coupling between rows 0 and n - 1.
    fn matrix(n: usize) -> CsrMatrix {
        let mut t: Vec<(u32, u32, f64)> = Vec::new();
        for i in 0..n {
            t.push((i as u32, i as u32, 4.0));
            if i > 0 {
                t.push((i as u32, i as u32 - 1, -1.0));
                t.push((i as u32 - 1, i as u32, -1.0));
            }
        }
        t.push((0, n as u32 - 1, -0.5));
        t.push((n as u32 - 1, 0, -0.5));
        let r: Vec<u32> = t.iter().map(|e| e.0).collect();
        let c: Vec<u32> = t.iter().map(|e| e.1).collect();
        let v: Vec<f64> = t.iter().map(|e| e.2).collect();
        CsrMatrix::from_triplets(n, n, &r, &c, &v).unwrap()
    }

    #[test]
    fn gather_list_packs_like_the_host() {
        let a = matrix(37);
        for nb in [1, 2, 3, 5] {
            let split =
                BlockSplit::new(&a, RowPartition::by_default_costs(&a, nb).unwrap()).unwrap();
            for blk in split.blocks() {
                let x: Vec<f64> = (0..blk.nrows()).map(|i| 1.0 + i as f64).collect();
                let mut want = vec![0.0; blk.send_len()];
                blk.pack(&x, &mut want);
                let got: Vec<f64> = pack_indices(blk).iter().map(|&j| x[j as usize]).collect();
                assert_eq!(got, want);
            }
        }
    }

    #[test]
    fn copies_deliver_every_halo_entry_from_its_owner() {
        let a = matrix(41);
        for nb in [1, 2, 4, 7] {
            let split =
                BlockSplit::new(&a, RowPartition::by_default_costs(&a, nb).unwrap()).unwrap();
            let copies = copy_schedule(&split).unwrap();
            if nb == 1 {
                assert!(copies.is_empty());
            }
            // Run the schedule on host buffers holding the global index of each entry.
            let sends: Vec<Vec<f64>> = split
                .blocks()
                .iter()
                .map(|blk| {
                    let x: Vec<f64> = blk.rows.clone().map(|g| g as f64).collect();
                    let mut s = vec![0.0; blk.send_len()];
                    blk.pack(&x, &mut s);
                    s
                })
                .collect();
            let mut halos: Vec<Vec<f64>> = split
                .blocks()
                .iter()
                .map(|b| vec![-1.0; b.halo_len()])
                .collect();
            for c in &copies {
                let len = c.src.len();
                halos[c.to][c.dst_start..c.dst_start + len]
                    .copy_from_slice(&sends[c.from][c.src.clone()]);
            }
            for (blk, h) in split.blocks().iter().zip(&halos) {
                let want: Vec<f64> = blk.halo_cols.iter().map(|&g| g as f64).collect();
                assert_eq!(h, &want);
            }
        }
    }
}
