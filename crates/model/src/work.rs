//! Work counts of every SpMV kernel on a matrix: the quantities the SpMV performance model is
//! linear in. Computed on the host in time linear in the nonzeros.
use autopcg_sparse::features::MatrixFeatures;
use autopcg_sparse::{dia::count_diagonals, hyb::one_third_split, CsrMatrix};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

/// Lane counts of the CSR vector kernels ([`autopcg_catalog::CSR_LANES`]), in the order of
/// [`SpmvWork::vector_steps`].
pub const VECTOR_LANES: [u32; 5] = autopcg_catalog::CSR_LANES;

/// Bytes of one cache line of `x` (16 doubles) in [`SpmvWork::x_lines`].
pub const X_LINE_BYTES: usize = 128;

/// What each SpMV kernel has to do on a matrix.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpmvWork {
    /// Rows.
    pub n: u64,
    /// Columns.
    pub ncols: u64,
    /// Stored entries.
    pub nnz: u64,
    /// Longest row.
    pub row_len_max: u64,
    /// Standard deviation of the row lengths.
    pub row_len_std: f64,
    /// Rows without entries.
    pub empty_rows: u64,
    /// CSR scalar (a thread per row): the sum over warps of 32 consecutive rows of
    /// `32 x` the longest row of the warp — the thread slots a warp spends.
    pub scalar_warp_slots: u64,
    /// CSR vector with `VECTOR_LANES[k]` lanes per row: the sum over rows of
    /// `ceil(len / lanes)`, the steps each row's lanes take.
    pub vector_steps: [u64; 5],
    /// ELL width K (the longest row).
    pub ell_width: u64,
    /// `n * K`: slots ELL reads, padding included.
    pub ell_slots: u64,
    /// Distinct diagonals.
    pub ndiag: u64,
    /// `n * ndiag`: slots DIA reads.
    pub dia_slots: u64,
    /// HYB split H (one-third rule).
    pub hyb_split: u64,
    /// `n * H`: slots of HYB's ELL part.
    pub hyb_ell_slots: u64,
    /// Entries of HYB's COO part.
    pub hyb_coo_nnz: u64,
    /// Sum over rows of the distinct [`X_LINE_BYTES`]-byte lines of `x` the row reads: the
    /// gather traffic when nothing is shared between rows.
    pub x_lines: u64,
    /// Mean `|i - j|` over the entries.
    pub mean_col_distance: f64,
}

impl SpmvWork {
    /// What the launch geometry of a SpMV candidate needs of the matrix
    /// ([`autopcg_catalog::SpmvCandidate::method_for`]).
    pub fn shape(&self) -> autopcg_catalog::SpmvShape {
        autopcg_catalog::SpmvShape {
            nrows: self.n,
            nnz: self.nnz,
            hyb_coo_nnz: self.hyb_coo_nnz,
        }
    }
}

/// Per-row-block partial sums.
#[derive(Default, Clone, Copy)]
struct Part {
    steps: [u64; 5],
    hyb_coo: u64,
    x_lines: u64,
    dist: f64,
}

impl Part {
    fn add(mut self, o: Part) -> Part {
        for k in 0..5 {
            self.steps[k] += o.steps[k];
        }
        self.hyb_coo += o.hyb_coo;
        self.x_lines += o.x_lines;
        self.dist += o.dist;
        self
    }
}

/// Computes the work counts of `a`.
pub fn spmv_work(a: &CsrMatrix) -> SpmvWork {
    let n = a.nrows();
    let ptr = a.indptr();
    let cols = a.indices();
    let nnz = a.nnz();
    let len = |i: usize| (ptr[i + 1] - ptr[i]) as u64;
    let row_len_max = (0..n).into_par_iter().map(len).max().unwrap_or(0);
    let mean = nnz as f64 / n.max(1) as f64;
    let var = (0..n)
        .into_par_iter()
        .map(|i| (len(i) as f64 - mean).powi(2))
        .sum::<f64>()
        / n.max(1) as f64;
    let empty_rows = (0..n).into_par_iter().filter(|&i| len(i) == 0).count() as u64;
    let scalar_warp_slots = (0..n.div_ceil(32))
        .into_par_iter()
        .map(|w| {
            let r0 = w * 32;
            let r1 = (r0 + 32).min(n);
            32 * (r0..r1).map(len).max().unwrap_or(0)
        })
        .sum();
    let h = one_third_split(a) as u64;
    let per_line = (X_LINE_BYTES / 8) as u32;
    let part = (0..n)
        .into_par_iter()
        .fold(Part::default, |mut p, i| {
            let l = len(i);
            for (k, lanes) in VECTOR_LANES.iter().enumerate() {
                p.steps[k] += l.div_ceil(u64::from(*lanes));
            }
            p.hyb_coo += l.saturating_sub(h);
            let row = &cols[ptr[i] as usize..ptr[i + 1] as usize];
            let mut last = u32::MAX;
            for &j in row {
                let line = j / per_line;
                if line != last {
                    p.x_lines += 1;
                    last = line;
                }
                p.dist += (j as f64 - i as f64).abs();
            }
            p
        })
        .reduce(Part::default, Part::add);
    let ndiag = count_diagonals(a) as u64;
    let n64 = n as u64;
    SpmvWork {
        n: n64,
        ncols: a.ncols() as u64,
        nnz: nnz as u64,
        row_len_max,
        row_len_std: var.sqrt(),
        empty_rows,
        scalar_warp_slots,
        vector_steps: part.steps,
        ell_width: row_len_max,
        ell_slots: n64 * row_len_max,
        ndiag,
        dia_slots: n64 * ndiag,
        hyb_split: h,
        hyb_ell_slots: n64 * h,
        hyb_coo_nnz: part.hyb_coo,
        x_lines: part.x_lines,
        mean_col_distance: if nnz > 0 { part.dist / nnz as f64 } else { 0.0 },
    }
}

/// The work counts that need a row's columns or its neighbours ([`SpmvWork::x_lines`], the
/// column distances, [`SpmvWork::scalar_warp_slots`]), counted from rows given one at a time,
/// for a matrix a symbolic pass finds row by row and never stores. The rest comes from the
/// matrix's counted features and row-length histogram ([`spmv_work_counted`]).
///
/// A tally's rows must come in ascending order; two tallies are merged with the one of the
/// lower rows first ([`WorkTally::merge`]).
#[derive(Debug, Clone, Default)]
pub struct WorkTally {
    x_lines: u64,
    /// Sum of `|i - j|` over the entries, exact.
    dist: u128,
    /// The first and the last warp (32 consecutive rows) seen, each with its longest row:
    /// open, since the neighbouring tallies may hold more of their rows.
    first: Option<(usize, u64)>,
    last: Option<(usize, u64)>,
    /// Thread slots of the warps between them, which are complete.
    inner_slots: u64,
}

impl WorkTally {
    /// The tally of rows counted elsewhere (on a GPU): `x_lines` lines of x read, the sum
    /// `dist` of `|i - j|` over the entries, and `warp_slots` thread slots of every warp (32
    /// times its longest row). It stands for all of a matrix's rows (it is not merged).
    pub fn from_totals(x_lines: u64, dist: u128, warp_slots: u64) -> WorkTally {
        WorkTally {
            x_lines,
            dist,
            first: None,
            last: None,
            inner_slots: warp_slots,
        }
    }

    /// Counts row `i` with stored columns `cols` (ascending).
    #[inline]
    pub fn add_row(&mut self, i: usize, cols: &[u32]) {
        let per_line = (X_LINE_BYTES / 8) as u32;
        let mut last = u32::MAX;
        // A row's distances fit in 64 bits (at most 2^32 entries below 2^32 each).
        let mut dist = 0u64;
        for &j in cols {
            let line = j / per_line;
            if line != last {
                self.x_lines += 1;
                last = line;
            }
            dist += (j as u64).abs_diff(i as u64);
        }
        self.dist += u128::from(dist);
        self.add_warp(i / 32, cols.len() as u64);
    }

    /// Takes a row (or a whole warp's longest row) of warp `w` into the warp bookkeeping.
    fn add_warp(&mut self, w: usize, len: u64) {
        match (&mut self.first, &mut self.last) {
            (None, _) => self.first = Some((w, len)),
            (Some((fw, fl)), None) if *fw == w => *fl = (*fl).max(len),
            (Some(_), None) => self.last = Some((w, len)),
            (Some(_), Some((lw, ll))) if *lw == w => *ll = (*ll).max(len),
            (Some(_), Some((_, ll))) => {
                self.inner_slots += 32 * *ll;
                self.last = Some((w, len));
            }
        }
    }

    /// The counts of this tally's rows followed by `next`'s (rows above all of this one's).
    pub fn merge(mut self, next: WorkTally) -> WorkTally {
        self.x_lines += next.x_lines;
        self.dist += next.dist;
        if let Some((w, l)) = next.first {
            self.add_warp(w, l);
        }
        if let Some((w, l)) = next.last {
            // The warps of `next` past its first one close every open warp of `self`.
            self.add_warp(w, l);
            self.inner_slots += next.inner_slots;
        }
        self
    }

    /// Thread slots of every warp seen.
    fn warp_slots(&self) -> u64 {
        let open = |e: Option<(usize, u64)>| e.map_or(0, |(_, l)| 32 * l);
        self.inner_slots + open(self.first) + open(self.last)
    }
}

/// The work counts of a matrix that is never stored: from its counted features and
/// row-length histogram ([`autopcg_sparse::features::FeatureCounter`]) and the tally of its
/// rows. Equal to [`spmv_work`] of the matrix, except `row_len_std`, which is the features'
/// exact value where [`spmv_work`] sums in floating point (they agree to rounding).
pub fn spmv_work_counted(f: &MatrixFeatures, hist: &[u64], t: &WorkTally) -> SpmvWork {
    let n = f.n as u64;
    let h = f.hyb_split as u64;
    let mut steps = [0u64; 5];
    let mut hyb_coo = 0u64;
    for (l, &c) in hist.iter().enumerate() {
        let l = l as u64;
        for (k, lanes) in VECTOR_LANES.iter().enumerate() {
            steps[k] += c * l.div_ceil(u64::from(*lanes));
        }
        hyb_coo += c * l.saturating_sub(h);
    }
    let row_len_max = f.row_len_max as u64;
    let ndiag = f.ndiag as u64;
    SpmvWork {
        n,
        ncols: f.ncols as u64,
        nnz: f.nnz as u64,
        row_len_max,
        row_len_std: f.row_len_std,
        empty_rows: f.empty_rows as u64,
        scalar_warp_slots: t.warp_slots(),
        vector_steps: steps,
        ell_width: row_len_max,
        ell_slots: n * row_len_max,
        ndiag,
        dia_slots: n * ndiag,
        hyb_split: h,
        hyb_ell_slots: n * h,
        hyb_coo_nnz: hyb_coo,
        x_lines: t.x_lines,
        mean_col_distance: if f.nnz > 0 {
            t.dist as f64 / f.nnz as f64
        } else {
            0.0
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use autopcg_sparse::families::poisson2d_5pt;

    #[test]
    fn counted_work_equals_the_stored_matrix_work() {
        use autopcg_sparse::features::{FeatureCounter, RowTally};
        let (r, c): (Vec<u32>, Vec<u32>) = [(0, 0), (0, 90), (33, 2), (33, 70), (70, 69)]
            .into_iter()
            .chain((0..40).map(|j| (64, 3 * j)))
            .unzip();
        let v = vec![1.0; r.len()];
        for a in [
            poisson2d_5pt(13, 11).unwrap(),
            autopcg_sparse::families::random_powerlaw_spd(700, 5.0, 1.4, 3).unwrap(),
            CsrMatrix::from_triplets(100, 130, &r, &c, &v).unwrap(),
            CsrMatrix::from_triplets(1, 1, &[0], &[0], &[1.0]).unwrap(),
        ] {
            let want = spmv_work(&a);
            let fc = FeatureCounter::new(a.nrows(), a.ncols());
            // Uneven ranges of rows, merged in order.
            let cuts = [0, 1, 37, 64, 65, 300, a.nrows()];
            let mut tallies = Vec::new();
            for w in cuts.windows(2) {
                let (lo, hi) = (w[0].min(a.nrows()), w[1].min(a.nrows()));
                let (mut ft, mut wt) = (RowTally::default(), WorkTally::default());
                for i in lo..hi {
                    fc.add_row(&mut ft, i, a.row(i).0);
                    wt.add_row(i, a.row(i).0);
                }
                tallies.push((ft, wt));
            }
            let (ft, wt) = tallies
                .into_iter()
                .reduce(|(f1, w1), (f2, w2)| (f1.merge(f2), w1.merge(w2)))
                .unwrap();
            let (f, hist) = fc.finish(ft, true);
            let mut got = spmv_work_counted(&f, &hist, &wt);
            assert!((got.row_len_std - want.row_len_std).abs() <= 1e-12 * want.row_len_std);
            got.row_len_std = want.row_len_std;
            assert_eq!(got, want);
        }
    }

    #[test]
    fn work_counts_of_a_small_stencil() {
        let a = poisson2d_5pt(8, 8).unwrap();
        let w = spmv_work(&a);
        assert_eq!(w.n, 64);
        assert_eq!(w.nnz, a.nnz() as u64);
        assert_eq!(w.row_len_max, 5);
        assert_eq!(w.ndiag, 5);
        assert_eq!(w.dia_slots, 5 * 64);
        assert_eq!(w.ell_slots, 5 * 64);
        // Two warps; each holds an interior row of 5 entries.
        assert_eq!(w.scalar_warp_slots, 2 * 32 * 5);
        // Every row has at most 5 entries: ceil(len / 32) = 1 per row.
        assert_eq!(w.vector_steps[4], 64);
        let by_hand: u64 = (0..64)
            .map(|i| (a.indptr()[i + 1] - a.indptr()[i]).div_ceil(2) as u64)
            .sum();
        assert_eq!(w.vector_steps[0], by_hand);
        assert!(w.hyb_ell_slots + w.hyb_coo_nnz >= w.nnz);
        assert!(w.x_lines >= 64 && w.x_lines <= w.nnz);
        assert!(w.mean_col_distance > 1.0 && w.mean_col_distance < 8.0);
    }
}
