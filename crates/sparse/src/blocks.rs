//! Row blocks of a square matrix: the partition and halo index sets behind multi-block and
//! multi-GPU PCG.
//!
//! A [`RowPartition`] cuts the rows `0..n` into contiguous, non-empty blocks balanced by a
//! per-row cost (the caller's predicted time per row, or [`default_row_costs`]: rows and
//! nonzeros weighted by the bytes a CG iteration moves for them). Block `b` owns its rows and the
//! vector entries with the same indices, so a vector is split the same way as the rows.
//!
//! [`BlockSplit::new`] stores every block as two matrices over the block's rows:
//!
//! - the **local part**: the entries whose column the block owns, with columns renumbered
//!   `j - start` (a square `rows x rows` matrix, the diagonal block of A);
//! - the **halo part**: the entries whose column another block owns, with columns compressed to
//!   an index into the block's **halo buffer**, which holds every such column once, in
//!   ascending global order. Since owners are contiguous row ranges, the halo buffer is grouped
//!   by owner in ascending block order.
//!
//! so that `y_b = local_b x_b + halo_b h_b` where `h_b` holds the halo columns of `x`.
//!
//! The exchange filling the halo buffers is a list of [`Message`]s: block `from` packs the
//! entries `send_local` of its vector, in that order, into its **send buffer** at `send_range`,
//! and they land in block `to`'s halo buffer at `halo_range`. Each block's [`HaloBlock::recvs`]
//! and [`HaloBlock::sends`] give the same lists from either side. A transport (in one address
//! space, between blocks on one GPU, or between GPUs) needs nothing more.
use std::ops::Range;

use rayon::prelude::*;
use serde::Serialize;

use crate::{CsrMatrix, Index, SparseError};

/// Cost of a row in [`default_row_costs`], in units of one stored nonzero: one CG iteration
/// reads and writes about 13 vector entries per row (the four-vector update, the
/// preconditioner, the SpMV output and the three dots: about 104 bytes plus the row pointer)
/// and about 20 bytes per nonzero (value, column index and the gathered vector entry).
pub const ROW_COST_IN_NONZEROS: f64 = 6.0;

/// Per-row costs `ROW_COST_IN_NONZEROS + nnz(row)`: the default balance of a partition when no
/// predicted times are known.
pub fn default_row_costs(a: &CsrMatrix) -> Vec<f64> {
    let ptr = a.indptr();
    (0..a.nrows())
        .map(|i| ROW_COST_IN_NONZEROS + (ptr[i + 1] - ptr[i]) as f64)
        .collect()
}

/// Contiguous row blocks `starts[b]..starts[b + 1]`, each non-empty, covering `0..n`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RowPartition {
    starts: Vec<usize>,
}

impl RowPartition {
    /// The partition with the given block starts: `starts[0] = 0`, strictly increasing, last
    /// entry `n` (so `starts.len() - 1` blocks).
    pub fn from_starts(starts: Vec<usize>, n: usize) -> Result<Self, SparseError> {
        if starts.len() < 2 || starts[0] != 0 || starts[starts.len() - 1] != n {
            return Err(SparseError::Structure(format!(
                "block starts {starts:?} must begin at 0 and end at {n} with at least one block"
            )));
        }
        if let Some(w) = starts.windows(2).find(|w| w[0] >= w[1]) {
            return Err(SparseError::Structure(format!(
                "block starts must increase strictly (an empty block {}..{})",
                w[0], w[1]
            )));
        }
        Ok(RowPartition { starts })
    }

    /// `nblocks` contiguous blocks balanced by `costs` (one finite, non-negative cost per row).
    ///
    /// Block boundaries are placed where the prefix sum of the costs comes closest to
    /// `b * total / nblocks`, then moved as little as needed to keep every block non-empty.
    /// Hence no block costs more than `total / nblocks + max(cost)`: the balance is exact up to
    /// the granularity of one row. When every cost is zero the rows are split evenly.
    ///
    /// Errors: `nblocks` is 0 or exceeds the number of rows, or a cost is negative or not
    /// finite.
    pub fn balanced(costs: &[f64], nblocks: usize) -> Result<Self, SparseError> {
        let n = costs.len();
        if nblocks == 0 || nblocks > n {
            return Err(SparseError::Structure(format!(
                "cannot split {n} rows into {nblocks} non-empty blocks"
            )));
        }
        if let Some((i, c)) = costs
            .iter()
            .enumerate()
            .find(|(_, c)| !(c.is_finite() && **c >= 0.0))
        {
            return Err(SparseError::Structure(format!(
                "row cost {c} of row {i} is not a finite non-negative number"
            )));
        }
        let mut prefix = Vec::with_capacity(n + 1);
        prefix.push(0.0f64);
        for c in costs {
            prefix.push(prefix[prefix.len() - 1] + c);
        }
        let total = prefix[n];
        if total <= 0.0 || !total.is_finite() {
            let starts = (0..=nblocks).map(|b| b * n / nblocks).collect();
            return Self::from_starts(starts, n);
        }
        let mut starts = Vec::with_capacity(nblocks + 1);
        starts.push(0usize);
        for b in 1..nblocks {
            let target = total * b as f64 / nblocks as f64;
            // First s with prefix[s] >= target, then the closer of s - 1 and s.
            let s = prefix.partition_point(|&p| p < target).min(n);
            let s = if s > 0 && target - prefix[s - 1] <= prefix[s] - target {
                s - 1
            } else {
                s
            };
            let lo = starts[b - 1] + 1;
            let hi = n - (nblocks - b);
            starts.push(s.clamp(lo, hi));
        }
        starts.push(n);
        Self::from_starts(starts, n)
    }

    /// `nblocks` blocks balanced by [`default_row_costs`] of `a`.
    pub fn by_default_costs(a: &CsrMatrix, nblocks: usize) -> Result<Self, SparseError> {
        Self::balanced(&default_row_costs(a), nblocks)
    }

    /// Number of blocks.
    pub fn nblocks(&self) -> usize {
        self.starts.len() - 1
    }

    /// Number of rows covered.
    pub fn nrows(&self) -> usize {
        self.starts[self.starts.len() - 1]
    }

    /// The block starts (length `nblocks + 1`, last entry `n`).
    pub fn starts(&self) -> &[usize] {
        &self.starts
    }

    /// Rows of block `b`.
    pub fn range(&self, b: usize) -> Range<usize> {
        self.starts[b]..self.starts[b + 1]
    }

    /// The block owning row (or vector entry) `i < n`.
    pub fn owner(&self, i: usize) -> usize {
        self.starts.partition_point(|&s| s <= i) - 1
    }

    /// Sum of `costs` over each block.
    pub fn block_costs(&self, costs: &[f64]) -> Vec<f64> {
        (0..self.nblocks())
            .map(|b| costs[self.range(b)].iter().sum())
            .collect()
    }
}

/// The halo entries one block receives from one owner.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RecvList {
    /// The owning block.
    pub from: usize,
    /// Where they land in this block's halo buffer (their global columns are
    /// `halo_cols[halo_range]`).
    pub halo_range: Range<usize>,
}

/// The entries of its vector one block packs for one neighbour.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SendList {
    /// The receiving block.
    pub to: usize,
    /// Local indices (global minus the block start) of the entries, in the receiver's halo
    /// order.
    pub local: Vec<Index>,
    /// Where they are packed in this block's send buffer.
    pub send_range: Range<usize>,
}

/// One block of a [`BlockSplit`].
#[derive(Debug, Clone, PartialEq)]
pub struct HaloBlock {
    /// Global rows (and owned vector entries) of the block.
    pub rows: Range<usize>,
    /// The entries with an owned column, columns local: `rows.len() x rows.len()`.
    pub local: CsrMatrix,
    /// The entries with another block's column, columns indexing the halo buffer:
    /// `rows.len() x halo_cols.len()`.
    pub halo: CsrMatrix,
    /// Global column of every halo buffer slot, ascending (hence grouped by owner).
    pub halo_cols: Vec<Index>,
    /// Per row, how many of its halo entries have a column before the block's first row: the
    /// multiply sums those, then the local entries, then the rest, i.e. in global column
    /// order, exactly as the unsplit CSR multiply does.
    pub halo_before: Vec<Index>,
    /// What the block receives, one list per owner, in ascending owner order, covering the
    /// halo buffer.
    pub recvs: Vec<RecvList>,
    /// What the block packs, one list per receiving block, in ascending receiver order,
    /// covering the send buffer.
    pub sends: Vec<SendList>,
}

impl HaloBlock {
    /// Rows of the block.
    pub fn nrows(&self) -> usize {
        self.rows.len()
    }

    /// Length of the halo buffer.
    pub fn halo_len(&self) -> usize {
        self.halo_cols.len()
    }

    /// Length of the send buffer.
    pub fn send_len(&self) -> usize {
        self.sends.last().map_or(0, |s| s.send_range.end)
    }

    /// Packs the entries every neighbour needs from `x_local` into `send`
    /// ([`HaloBlock::send_len`] long).
    pub fn pack(&self, x_local: &[f64], send: &mut [f64]) {
        for s in &self.sends {
            for (slot, &j) in send[s.send_range.clone()].iter_mut().zip(&s.local) {
                *slot = x_local[j as usize];
            }
        }
    }

    /// `y = local x_local + halo x_halo`, each row summed in global column order (the halo
    /// entries before the block, the local ones, the halo entries after it), so a row's sum is
    /// rounded exactly as in [`CsrMatrix::spmv`].
    pub fn spmv(&self, x_local: &[f64], x_halo: &[f64], y: &mut [f64]) {
        let (lp, li, lv) = (self.local.indptr(), self.local.indices(), self.local.data());
        let (hp, hi, hv) = (self.halo.indptr(), self.halo.indices(), self.halo.data());
        for (i, yi) in y.iter_mut().enumerate() {
            let mut acc = 0.0;
            let mid = hp[i] as usize + self.halo_before[i] as usize;
            for q in hp[i] as usize..mid {
                acc += hv[q] * x_halo[hi[q] as usize];
            }
            for q in lp[i] as usize..lp[i + 1] as usize {
                acc += lv[q] * x_local[li[q] as usize];
            }
            for q in mid..hp[i + 1] as usize {
                acc += hv[q] * x_halo[hi[q] as usize];
            }
            *yi = acc;
        }
    }
}

/// One transfer of a halo exchange: `send[from][send_range]` goes to `halo[to][halo_range]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Message {
    /// Sending block.
    pub from: usize,
    /// Receiving block.
    pub to: usize,
    /// Range in the sender's send buffer.
    pub send_range: Range<usize>,
    /// Range in the receiver's halo buffer (same length).
    pub halo_range: Range<usize>,
}

impl Message {
    /// Number of vector entries moved.
    pub fn len(&self) -> usize {
        self.send_range.len()
    }

    /// Whether the message moves nothing (never the case in a [`BlockSplit`]).
    pub fn is_empty(&self) -> bool {
        self.send_range.is_empty()
    }
}

/// Size of one block, for reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BlockSummary {
    /// First global row.
    pub start: usize,
    /// Rows.
    pub rows: usize,
    /// Nonzeros of the block's rows.
    pub nnz: usize,
    /// Nonzeros of the local part.
    pub local_nnz: usize,
    /// Nonzeros of the halo part.
    pub halo_nnz: usize,
    /// Length of the halo buffer (entries received per exchange).
    pub halo_len: usize,
    /// Entries packed for other blocks per exchange.
    pub send_len: usize,
    /// Blocks it receives from.
    pub neighbours: Vec<usize>,
}

/// A square matrix split into row blocks with their halo index sets.
#[derive(Debug, Clone, PartialEq)]
pub struct BlockSplit {
    partition: RowPartition,
    blocks: Vec<HaloBlock>,
    messages: Vec<Message>,
}

impl BlockSplit {
    /// Splits the square matrix `a` by `partition` (built for `a.nrows()` rows).
    pub fn new(a: &CsrMatrix, partition: RowPartition) -> Result<Self, SparseError> {
        if !a.is_square() {
            return Err(SparseError::Structure(format!(
                "a block split needs a square matrix, got {} x {}",
                a.nrows(),
                a.ncols()
            )));
        }
        if partition.nrows() != a.nrows() {
            return Err(SparseError::Structure(format!(
                "the partition covers {} rows, the matrix has {}",
                partition.nrows(),
                a.nrows()
            )));
        }
        let nb = partition.nblocks();
        let halves: Vec<Parts> = (0..nb)
            .into_par_iter()
            .map(|b| split_rows(a, partition.range(b)))
            .collect::<Result<_, _>>()?;
        // Receive lists: the halo columns are ascending, owners are contiguous ranges.
        let mut blocks: Vec<HaloBlock> = halves
            .into_iter()
            .map(|(rows, local, halo, halo_cols, halo_before)| {
                let mut recvs: Vec<RecvList> = Vec::new();
                for (k, &c) in halo_cols.iter().enumerate() {
                    let owner = partition.owner(c as usize);
                    match recvs.last_mut() {
                        Some(r) if r.from == owner => r.halo_range.end = k + 1,
                        _ => recvs.push(RecvList {
                            from: owner,
                            halo_range: k..k + 1,
                        }),
                    }
                }
                HaloBlock {
                    rows,
                    local,
                    halo,
                    halo_cols,
                    halo_before,
                    recvs,
                    sends: Vec::new(),
                }
            })
            .collect();
        // Send lists mirror the receive lists, in ascending receiver order.
        let mut messages = Vec::new();
        let mut send_fill = vec![0usize; nb];
        for to in 0..nb {
            for r in blocks[to].recvs.clone() {
                let start = partition.starts()[r.from];
                let local: Vec<Index> = blocks[to].halo_cols[r.halo_range.clone()]
                    .iter()
                    .map(|&c| (c as usize - start) as Index)
                    .collect();
                let at = send_fill[r.from];
                let send_range = at..at + local.len();
                send_fill[r.from] = send_range.end;
                messages.push(Message {
                    from: r.from,
                    to,
                    send_range: send_range.clone(),
                    halo_range: r.halo_range,
                });
                blocks[r.from].sends.push(SendList {
                    to,
                    local,
                    send_range,
                });
            }
        }
        Ok(BlockSplit {
            partition,
            blocks,
            messages,
        })
    }

    /// Splits `a` into `nblocks` blocks balanced by [`default_row_costs`].
    pub fn by_default_costs(a: &CsrMatrix, nblocks: usize) -> Result<Self, SparseError> {
        Self::new(a, RowPartition::by_default_costs(a, nblocks)?)
    }

    /// The partition.
    pub fn partition(&self) -> &RowPartition {
        &self.partition
    }

    /// The blocks, in row order.
    pub fn blocks(&self) -> &[HaloBlock] {
        &self.blocks
    }

    /// Every transfer of one halo exchange, ordered by receiver, then sender.
    pub fn messages(&self) -> &[Message] {
        &self.messages
    }

    /// Vector entries one halo exchange moves (the sum of the halo buffer lengths).
    pub fn halo_entries(&self) -> usize {
        self.blocks.iter().map(HaloBlock::halo_len).sum()
    }

    /// Sizes of every block, for reports.
    pub fn summary(&self) -> Vec<BlockSummary> {
        self.blocks
            .iter()
            .map(|b| BlockSummary {
                start: b.rows.start,
                rows: b.nrows(),
                nnz: b.local.nnz() + b.halo.nnz(),
                local_nnz: b.local.nnz(),
                halo_nnz: b.halo.nnz(),
                halo_len: b.halo_len(),
                send_len: b.send_len(),
                neighbours: b.recvs.iter().map(|r| r.from).collect(),
            })
            .collect()
    }

    /// Splits a global vector into the blocks' local parts.
    pub fn scatter(&self, x: &[f64]) -> Vec<Vec<f64>> {
        self.blocks
            .iter()
            .map(|b| x[b.rows.clone()].to_vec())
            .collect()
    }

    /// Joins the blocks' local parts into a global vector.
    pub fn gather(&self, parts: &[Vec<f64>]) -> Vec<f64> {
        parts.iter().flatten().copied().collect()
    }
}

/// Rows, local part, halo part, halo columns and per-row halo entries before the block.
type Parts = (Range<usize>, CsrMatrix, CsrMatrix, Vec<Index>, Vec<Index>);

/// Rows per parallel task of the passes over a block's rows ([`RowRuns`]).
const ROWS_PER_TASK: usize = 4096;

/// The rows `start..end` of `a` for parallel passes: cut into chunks of [`ROWS_PER_TASK`] rows,
/// with the local and halo entries of each chunk. Since columns are sorted within a row, a
/// row's local entries are one run of it (the columns in `start..end`); its halo entries are
/// what lies before and after that run.
struct RowRuns<'a> {
    a: &'a CsrMatrix,
    start: usize,
    end: usize,
    chunks: Vec<Range<usize>>,
    /// Per chunk: its local and halo entries.
    counts: Vec<(usize, usize)>,
}

impl<'a> RowRuns<'a> {
    fn new(a: &'a CsrMatrix, rows: Range<usize>) -> Self {
        let (start, end) = (rows.start, rows.end);
        let chunks: Vec<Range<usize>> = (start..end)
            .step_by(ROWS_PER_TASK)
            .map(|c| c..(c + ROWS_PER_TASK).min(end))
            .collect();
        let mut runs = RowRuns {
            a,
            start,
            end,
            chunks,
            counts: Vec::new(),
        };
        runs.counts = runs
            .chunks
            .par_iter()
            .map(|c| {
                c.clone().fold((0, 0), |(l, h), i| {
                    let (lo, hi, len) = runs.run(i);
                    (l + hi - lo, h + len - (hi - lo))
                })
            })
            .collect();
        runs
    }

    /// Row `i`'s local run at `lo..hi` within its entries `0..len`: `(lo, hi, len)`.
    fn run(&self, i: usize) -> (usize, usize, usize) {
        let cols = self.a.row(i).0;
        let lo = cols.partition_point(|&j| (j as usize) < self.start);
        let hi = lo + cols[lo..].partition_point(|&j| (j as usize) < self.end);
        (lo, hi, cols.len())
    }

    fn local_nnz(&self) -> usize {
        self.counts.iter().map(|c| c.0).sum()
    }

    fn halo_nnz(&self) -> usize {
        self.counts.iter().map(|c| c.1).sum()
    }
}

/// The parts of the rows `rows` of `a`, rows in parallel ([`RowRuns`]): a row's local run
/// goes to the local part, the rest of it to the halo part, each in the row's order.
fn split_rows(a: &CsrMatrix, rows: Range<usize>) -> Result<Parts, SparseError> {
    let (start, end) = (rows.start, rows.end);
    let runs = RowRuns::new(a, rows.clone());
    let run = |i: usize| runs.run(i);
    let chunks = &runs.chunks;
    let mut halo_cols: Vec<Index> = chunks
        .par_iter()
        .flat_map_iter(|c| {
            c.clone().flat_map(move |i| {
                let (lo, hi, _) = run(i);
                let cols = a.row(i).0;
                cols[..lo].iter().chain(&cols[hi..]).copied()
            })
        })
        .collect();
    halo_cols.par_sort_unstable();
    halo_cols.dedup();
    let counts = &runs.counts;
    let (local_nnz, halo_nnz) = (runs.local_nnz(), runs.halo_nnz());
    if Index::try_from(local_nnz.max(halo_nnz)).is_err() {
        return Err(SparseError::Structure(format!(
            "rows {start}..{end} hold more entries than 32-bit indices address"
        )));
    }
    let n = end - start;
    let mut lp = vec![0 as Index; n + 1];
    let mut hp = vec![0 as Index; n + 1];
    let (mut li, mut lv) = (vec![0 as Index; local_nnz], vec![0.0; local_nnz]);
    let (mut hi_, mut hv) = (vec![0 as Index; halo_nnz], vec![0.0; halo_nnz]);
    let mut before = vec![0 as Index; n];
    // Every chunk's pieces of the output arrays, with the offsets its entries start at.
    struct Piece<'o> {
        rows: Range<usize>,
        local_at: usize,
        halo_at: usize,
        lp: &'o mut [Index],
        hp: &'o mut [Index],
        before: &'o mut [Index],
        li: &'o mut [Index],
        lv: &'o mut [f64],
        hi: &'o mut [Index],
        hv: &'o mut [f64],
    }
    let mut pieces = Vec::with_capacity(chunks.len());
    {
        let (mut lp_rest, mut hp_rest) = (&mut lp[1..], &mut hp[1..]);
        let mut before_rest = before.as_mut_slice();
        let (mut li_rest, mut lv_rest) = (li.as_mut_slice(), lv.as_mut_slice());
        let (mut hi_rest, mut hv_rest) = (hi_.as_mut_slice(), hv.as_mut_slice());
        let (mut local_at, mut halo_at) = (0, 0);
        for (c, &(l, h)) in chunks.iter().zip(counts) {
            let r = c.len();
            let (lp_head, t) = lp_rest.split_at_mut(r);
            lp_rest = t;
            let (hp_head, t) = hp_rest.split_at_mut(r);
            hp_rest = t;
            let (before_head, t) = before_rest.split_at_mut(r);
            before_rest = t;
            let (li_head, t) = li_rest.split_at_mut(l);
            li_rest = t;
            let (lv_head, t) = lv_rest.split_at_mut(l);
            lv_rest = t;
            let (hi_head, t) = hi_rest.split_at_mut(h);
            hi_rest = t;
            let (hv_head, t) = hv_rest.split_at_mut(h);
            hv_rest = t;
            pieces.push(Piece {
                rows: c.clone(),
                local_at,
                halo_at,
                lp: lp_head,
                hp: hp_head,
                before: before_head,
                li: li_head,
                lv: lv_head,
                hi: hi_head,
                hv: hv_head,
            });
            local_at += l;
            halo_at += h;
        }
    }
    let halo_cols_ref = &halo_cols;
    pieces.into_par_iter().for_each(|p| {
        let (mut lk, mut hk) = (0, 0);
        for (r, i) in p.rows.clone().enumerate() {
            let (lo, hi, _) = run(i);
            let (cols, vals) = a.row(i);
            p.before[r] = lo as Index;
            for (&j, &v) in cols[lo..hi].iter().zip(&vals[lo..hi]) {
                p.li[lk] = (j as usize - start) as Index;
                p.lv[lk] = v;
                lk += 1;
            }
            for (&j, &v) in cols[..lo]
                .iter()
                .zip(&vals[..lo])
                .chain(cols[hi..].iter().zip(&vals[hi..]))
            {
                // Present by construction: every halo column was collected above.
                p.hi[hk] = halo_cols_ref.partition_point(|&c| c < j) as Index;
                p.hv[hk] = v;
                hk += 1;
            }
            p.lp[r] = (p.local_at + lk) as Index;
            p.hp[r] = (p.halo_at + hk) as Index;
        }
    });
    let local = CsrMatrix::try_from_parts(n, n, lp, li, lv)?;
    let halo = CsrMatrix::try_from_parts(n, halo_cols.len(), hp, hi_, hv)?;
    Ok((rows, local, halo, halo_cols, before))
}

/// The values of the local and halo parts [`BlockSplit::new`] makes of the rows `rows` of `a`,
/// in their order, without making the split again: for new values of the pattern a split was
/// made from. Since columns are sorted within a row, a row's local entries are one run of it
/// (the columns in `rows`) and its halo entries are what lies before and after that run, each
/// kept in the row's order. Rows in parallel.
pub fn block_values(
    a: &CsrMatrix,
    rows: Range<usize>,
) -> Result<(Vec<f64>, Vec<f64>), SparseError> {
    let (mut local, mut halo) = (Vec::new(), Vec::new());
    block_values_into(a, rows, &mut local, &mut halo)?;
    Ok((local, halo))
}

/// [`block_values`] into `local` and `halo`, resized to the parts' lengths: vectors kept from
/// one update to the next are overwritten in place (no fresh memory to fault in).
pub fn block_values_into(
    a: &CsrMatrix,
    rows: Range<usize>,
    local: &mut Vec<f64>,
    halo: &mut Vec<f64>,
) -> Result<(), SparseError> {
    if rows.start > rows.end || rows.end > a.nrows() || !a.is_square() {
        return Err(SparseError::Structure(format!(
            "rows {}..{} of a {} x {} matrix are no row block",
            rows.start,
            rows.end,
            a.nrows(),
            a.ncols()
        )));
    }
    let runs = RowRuns::new(a, rows);
    let run = |i: usize| runs.run(i);
    local.resize(runs.local_nnz(), 0.0);
    halo.resize(runs.halo_nnz(), 0.0);
    let mut tasks = Vec::with_capacity(runs.chunks.len());
    let (mut lrest, mut hrest) = (local.as_mut_slice(), halo.as_mut_slice());
    for (c, &(l, h)) in runs.chunks.iter().cloned().zip(&runs.counts) {
        let (lhead, ltail) = lrest.split_at_mut(l);
        let (hhead, htail) = hrest.split_at_mut(h);
        tasks.push((c, lhead, hhead));
        (lrest, hrest) = (ltail, htail);
    }
    tasks.into_par_iter().for_each(|(c, lout, hout)| {
        let (mut lk, mut hk) = (0, 0);
        for i in c {
            let (lo, hi, len) = run(i);
            let vals = a.row(i).1;
            lout[lk..lk + hi - lo].copy_from_slice(&vals[lo..hi]);
            lk += hi - lo;
            hout[hk..hk + lo].copy_from_slice(&vals[..lo]);
            hout[hk + lo..hk + lo + len - hi].copy_from_slice(&vals[hi..]);
            hk += len - (hi - lo);
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tridiag(n: usize) -> CsrMatrix {
        let mut r = Vec::new();
        let mut c = Vec::new();
        let mut v = Vec::new();
        for i in 0..n {
            for j in i.saturating_sub(1)..(i + 2).min(n) {
                r.push(i as Index);
                c.push(j as Index);
                v.push(if i == j { 2.0 } else { -1.0 });
            }
        }
        CsrMatrix::from_triplets(n, n, &r, &c, &v).unwrap()
    }

    #[test]
    fn tridiagonal_in_three_blocks_exchanges_the_neighbouring_entries() {
        let a = tridiag(9);
        let split =
            BlockSplit::new(&a, RowPartition::from_starts(vec![0, 3, 6, 9], 9).unwrap()).unwrap();
        let b = &split.blocks()[1];
        assert_eq!(b.halo_cols, vec![2, 6]);
        assert_eq!(b.recvs.len(), 2);
        assert_eq!((b.recvs[0].from, b.recvs[1].from), (0, 2));
        assert_eq!(b.sends.len(), 2);
        assert_eq!(b.sends[0].local, vec![0]);
        assert_eq!(b.sends[1].local, vec![2]);
        assert_eq!(split.halo_entries(), 4);
        assert_eq!(split.messages().len(), 4);
        assert_eq!(b.local.nnz(), 7);
        assert_eq!(b.halo.nnz(), 2);
    }

    #[test]
    fn balance_follows_the_costs() {
        // One expensive row at the front takes a block of its own.
        let mut costs = vec![1.0; 10];
        costs[0] = 9.0;
        let p = RowPartition::balanced(&costs, 2).unwrap();
        assert_eq!(p.starts(), &[0, 1, 10]);
        // Equal costs give equal blocks.
        let p = RowPartition::balanced(&[1.0; 12], 4).unwrap();
        assert_eq!(p.starts(), &[0, 3, 6, 9, 12]);
        assert_eq!(p.owner(5), 1);
        assert_eq!(p.owner(11), 3);
    }

    #[test]
    fn block_values_are_the_split_of_new_values() {
        // An irregular symmetric pattern with couplings in both directions and rows with no
        // entry outside their block.
        let n = 9000;
        let (mut r, mut c, mut v) = (Vec::new(), Vec::new(), Vec::new());
        for i in 0..n {
            for j in [i, (i + 1) % n, (i * 7 + 3) % n, (i + 4500) % n] {
                r.extend([i as Index, j as Index]);
                c.extend([j as Index, i as Index]);
                v.extend([1.0, 1.0]);
            }
        }
        let mut a = CsrMatrix::from_triplets(n, n, &r, &c, &v).unwrap();
        let p = RowPartition::from_starts(vec![0, 1, 4100, 8999, 9000], n).unwrap();
        let split = BlockSplit::new(&a, p.clone()).unwrap();
        // New values: distinct per entry, so that any entry out of place shows.
        for (k, x) in a.data_mut().iter_mut().enumerate() {
            *x = k as f64 + 0.5;
        }
        let fresh = BlockSplit::new(&a, p.clone()).unwrap();
        for (b, (old, new)) in split.blocks().iter().zip(fresh.blocks()).enumerate() {
            let (local, halo) = block_values(&a, p.range(b)).unwrap();
            assert_eq!(local, new.local.data(), "block {b}");
            assert_eq!(halo, new.halo.data(), "block {b}");
            assert_eq!(local.len(), old.local.nnz());
            assert!(b == 0 || !halo.is_empty(), "block {b} couples to others");
        }
        assert!(block_values(&a, 5..n + 1).is_err());
        // Every block's rows, local entries (columns shifted back) and halo entries (columns
        // looked up) merged by column are the matrix's rows: the split loses and adds nothing,
        // across the chunks its rows are processed in.
        for (b, blk) in fresh.blocks().iter().enumerate() {
            let start = p.range(b).start;
            assert_eq!(blk.rows, p.range(b));
            for (r, i) in blk.rows.clone().enumerate() {
                let (lc, lv) = blk.local.row(r);
                let (hc, hv) = blk.halo.row(r);
                let mut merged: Vec<(Index, f64)> = lc
                    .iter()
                    .map(|&c| c + start as Index)
                    .zip(lv.iter().copied())
                    .chain(
                        hc.iter()
                            .map(|&k| blk.halo_cols[k as usize])
                            .zip(hv.iter().copied()),
                    )
                    .collect();
                merged.sort_by_key(|e| e.0);
                let (ac, av) = a.row(i);
                let want: Vec<(Index, f64)> = ac.iter().copied().zip(av.iter().copied()).collect();
                assert_eq!(merged, want, "block {b}, row {i}");
                assert_eq!(
                    blk.halo_before[r] as usize,
                    ac.partition_point(|&c| (c as usize) < start),
                    "block {b}, row {i}"
                );
            }
            assert!(blk.halo_cols.windows(2).all(|w| w[0] < w[1]), "block {b}");
        }
    }

    #[test]
    fn bad_requests_are_errors() {
        assert!(RowPartition::balanced(&[1.0; 3], 4).is_err());
        assert!(RowPartition::balanced(&[1.0; 3], 0).is_err());
        assert!(RowPartition::balanced(&[1.0, f64::NAN], 1).is_err());
        assert!(RowPartition::balanced(&[1.0, -1.0], 1).is_err());
        assert!(RowPartition::from_starts(vec![0, 2, 2, 4], 4).is_err());
        assert!(RowPartition::from_starts(vec![0, 3], 4).is_err());
        let a = tridiag(4);
        let p = RowPartition::balanced(&[1.0; 5], 2).unwrap();
        assert!(BlockSplit::new(&a, p).is_err());
    }
}
