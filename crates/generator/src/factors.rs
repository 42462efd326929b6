//! First-order SSOR-AI's factors seen through `A`'s pattern, never formed: on a symmetric
//! pattern with every diagonal entry stored, row `i` of `K = I - omega L D^-1` holds exactly
//! the columns of `A`'s row `i` up to the diagonal, and row `i` of `K^T diag(s)` those from the
//! diagonal on. Each is a slice of `A`'s column indices, so the selection counts both factors
//! (and the explicit product's structure) from `A` alone, and the factors themselves are built
//! where the solve runs (on the GPU, from `A`'s uploaded arrays).
//!
//! The counts equal those of the formed factors ([`SpmvCounts::of_knowing`] with
//! [`KnownSymmetry::Triangular`], the explicit form's from [`crate::ssor::explicit_counts`]):
//! a test pins them on stencils, FEM, power-law and SuiteSparse matrices, and the golden plans
//! pin the choices made from them.
use autopcg_catalog::SpmvMethod;
use autopcg_sparse::features::{
    FeatureCounter, K1Checks, KnownSymmetry, MatrixFeatures, RowTally, SYMMETRY_TOLERANCE,
};
#[cfg(feature = "model")]
use autopcg_sparse::features::{K1Totals, StructureTotals};
use autopcg_sparse::CsrMatrix;
use rayon::prelude::*;
use std::sync::OnceLock;

#[cfg(feature = "model")]
use crate::select::SpmvCounts;
#[cfg(feature = "model")]
use autopcg_model::work::{spmv_work_counted, WorkTally};

/// Rows per task of the counting passes.
const ROWS: usize = 8192;

/// `K` and `K^T diag(s)` of first-order SSOR-AI as views of `A`'s pattern (see the module
/// documentation).
#[derive(Debug)]
pub struct K1Factors<'a> {
    a: &'a CsrMatrix,
    /// Position of each row's diagonal entry in `A`'s arrays: found by [`K1Factors::of`], or,
    /// for views made from checks read elsewhere ([`K1Factors::from_checks`]), on first use.
    diag: OnceLock<Vec<u32>>,
    nnz_k: usize,
    /// The squares of `K`'s row lengths, summed, when the checks counted them.
    k_len_squares: Option<u64>,
    /// [`autopcg_solver::coupling_at`] of `A`, when the checks read it.
    coupling: Option<f64>,
}

/// What one pass over `A` finds of both factors, and of `A` itself.
#[derive(Debug, Clone)]
pub struct K1Features {
    /// The diagonals of `A` (what the fallback rule reads of it beside its size).
    pub a_ndiag: usize,
    /// The counts of `A` the SpMV model reads, when [`K1Factors::features`] was told what is
    /// known of `A`'s symmetry.
    #[cfg(feature = "model")]
    pub counts_a: Option<SpmvCounts>,
    /// The features of `K`.
    pub k: MatrixFeatures,
    /// The features of `K^T diag(s)`.
    pub kt: MatrixFeatures,
    /// Whether every value of both factors is finite (the off-diagonal values of K and the
    /// scales `s_i`), as [`autopcg_solver::Preconditioner::values_finite`] would find them.
    pub values_finite: bool,
    /// The work counts of `K` and of `K^T diag(s)`, for the SpMV model.
    #[cfg(feature = "model")]
    pub counts: (SpmvCounts, SpmvCounts),
}

/// Per-task tallies of the pass.
#[derive(Default)]
struct Tally {
    a: RowTally,
    k: RowTally,
    kt: RowTally,
    #[cfg(feature = "model")]
    work: (WorkTally, WorkTally),
    #[cfg(feature = "model")]
    work_a: WorkTally,
    finite: bool,
    /// Every off-diagonal value of K passes the symmetry test against the absent mirror.
    off_zero: bool,
}

impl Tally {
    fn new() -> Self {
        Tally {
            finite: true,
            off_zero: true,
            ..Tally::default()
        }
    }

    fn merge(self, next: Tally) -> Tally {
        Tally {
            a: self.a.merge(next.a),
            k: self.k.merge(next.k),
            kt: self.kt.merge(next.kt),
            #[cfg(feature = "model")]
            work: (
                self.work.0.merge(next.work.0),
                self.work.1.merge(next.work.1),
            ),
            #[cfg(feature = "model")]
            work_a: self.work_a.merge(next.work_a),
            finite: self.finite && next.finite,
            off_zero: self.off_zero && next.off_zero,
        }
    }
}

impl<'a> K1Factors<'a> {
    /// The views of `a`'s factors, or `None` where they do not apply: a matrix that is not
    /// square, a row without a stored diagonal entry or with one that is not positive and
    /// finite (the host build then reports the row), or more entries below the diagonal than
    /// above (a pattern that is not symmetric). A pattern asymmetric with as many entries on
    /// each side passes here; the device build finds it and builds on the host instead (with
    /// the counts read from `A`'s upper triangle, approximate only for such a matrix).
    pub fn of(a: &'a CsrMatrix) -> Option<Self> {
        if !a.is_square() {
            return None;
        }
        let diag = a.diagonal_positions();
        let (ptr, val) = (a.indptr(), a.data());
        let bad = autopcg_sparse::scan::first_index_where(a.nrows(), |i| {
            let d = diag[i];
            d == autopcg_sparse::csr::NO_ENTRY || {
                let v = val[d as usize];
                !(v > 0.0 && v.is_finite())
            }
        });
        if bad.is_some() {
            return None;
        }
        let nnz_k = diag
            .par_iter()
            .enumerate()
            .map(|(i, &d)| (d - ptr[i]) as usize + 1)
            .sum();
        let f = K1Factors {
            a,
            diag: OnceLock::from(diag),
            nnz_k,
            k_len_squares: None,
            coupling: None,
        };
        (f.nnz_k == f.nnz_kt()).then_some(f)
    }

    /// The views of `a`'s factors from [`K1Checks`] read elsewhere (on the GPU, from the arrays
    /// uploaded there), so that no host pass over `A` precedes the selection: `None` exactly
    /// where [`K1Factors::of`] gives `None` when the checks are `a`'s (a test pins the
    /// device's against the host's, [`K1Factors::checks`]). The diagonal's positions are
    /// found on the host only if a host pass over the views is needed after all.
    pub fn from_checks(a: &'a CsrMatrix, c: &K1Checks) -> Option<Self> {
        if !a.is_square() || c.bad_diagonal.is_some() {
            return None;
        }
        let f = K1Factors {
            a,
            diag: OnceLock::new(),
            nnz_k: usize::try_from(c.nnz_k).ok()?,
            k_len_squares: Some(c.k_len_squares),
            coupling: Some(c.coupling),
        };
        // Entries that cannot be A's (K holds at most A's entries) are not these views.
        (f.nnz_k <= a.nnz() && f.nnz_k == f.nnz_kt()).then_some(f)
    }

    /// The [`K1Checks`] of `A` read through these views on the host: the reference a check
    /// made elsewhere must equal.
    pub fn checks(&self) -> K1Checks {
        let ptr = self.a.indptr();
        K1Checks {
            bad_diagonal: None,
            nnz_k: self.nnz_k as u64,
            k_len_squares: self
                .diag()
                .par_iter()
                .enumerate()
                .map(|(i, &d)| u64::from(d - ptr[i] + 1).pow(2))
                .sum(),
            coupling: autopcg_solver::coupling_at(self.a, self.diag()),
        }
    }

    /// Position of each row's diagonal entry in `A`'s arrays (found now if the views were made
    /// from checks).
    fn diag(&self) -> &[u32] {
        self.diag.get_or_init(|| self.a.diagonal_positions())
    }

    /// Whether the diagonal's positions were found on the host (by [`K1Factors::of`], or by a
    /// host pass over views made from checks).
    pub fn diagonal_searched(&self) -> bool {
        self.diag.get().is_some()
    }

    /// Rows.
    pub fn n(&self) -> usize {
        self.a.nrows()
    }

    /// Entries of `K`.
    pub fn nnz_k(&self) -> usize {
        self.nnz_k
    }

    /// Entries of `K^T diag(s)`.
    pub fn nnz_kt(&self) -> usize {
        self.a.nnz() + self.n() - self.nnz_k
    }

    /// The columns of row `i` of `K`.
    #[inline]
    pub fn k_row(&self, i: usize) -> &'a [u32] {
        &self.a.indices()[self.a.indptr()[i] as usize..=self.diag()[i] as usize]
    }

    /// The columns of row `i` of `K^T diag(s)`.
    #[inline]
    pub fn kt_row(&self, i: usize) -> &'a [u32] {
        &self.a.indices()[self.diag()[i] as usize..self.a.indptr()[i + 1] as usize]
    }

    /// [`autopcg_solver::auto_omega`] of `A`: from the coupling the checks read, or read
    /// with the diagonal positions these views hold instead of searching each row again (the
    /// same terms, summed in the same order: the same value).
    pub fn auto_omega(&self) -> f64 {
        match self.coupling {
            Some(c) => autopcg_solver::omega_for_coupling(c),
            None => autopcg_solver::auto_omega_at(self.a, self.diag()),
        }
    }

    /// [`crate::ssor::explicit_nnz_bound`] of `K` (a sum of squared integers, exact in either
    /// count below 2^53).
    pub fn explicit_nnz_bound(&self) -> f64 {
        if let Some(s) = self.k_len_squares {
            return s as f64;
        }
        let ptr = self.a.indptr();
        self.diag()
            .par_iter()
            .enumerate()
            .map(|(i, &d)| f64::from(d - ptr[i] + 1).powi(2))
            .sum()
    }

    /// One parallel pass over `A` that counts both factors with relaxation `omega`: their
    /// features (and, with the model, their work counts) and whether their values are finite;
    /// and, in the same pass, `A`'s diagonals and, with the model and `a_symmetry` given, the
    /// counts of `A` the SpMV model reads (what `SpmvCounts::of_knowing(a, a_symmetry)`
    /// gives: a symmetry search, where one is needed, runs beside the pass). The values are
    /// those the host build computes (`K_ij = -(omega a_ij / a_jj)`,
    /// `s_i = omega (2 - omega) / a_ii`); the symmetry feature of each triangular factor is
    /// read from K's off-diagonal values, which `K^T diag(s)` holds scaled by positive `s_j`.
    pub fn features(&self, omega: f64, a_symmetry: Option<KnownSymmetry>) -> K1Features {
        let n = self.n();
        let (ck, ckt) = (FeatureCounter::new(n, n), FeatureCounter::new(n, n));
        let ca = FeatureCounter::new(n, n);
        let (ptr, idx, val) = (self.a.indptr(), self.a.indices(), self.a.data());
        let diag = self.diag();
        let scale = omega * (2.0 - omega);
        let pass = || {
            (0..n.div_ceil(ROWS))
                .into_par_iter()
                .fold(Tally::new, |mut t, c| {
                    for i in c * ROWS..((c + 1) * ROWS).min(n) {
                        let (kr, ktr) = (self.k_row(i), self.kt_row(i));
                        let ar = &idx[ptr[i] as usize..ptr[i + 1] as usize];
                        ck.add_row(&mut t.k, i, kr);
                        ckt.add_row(&mut t.kt, i, ktr);
                        ca.add_row(&mut t.a, i, ar);
                        #[cfg(feature = "model")]
                        {
                            t.work.0.add_row(i, kr);
                            t.work.1.add_row(i, ktr);
                            if a_symmetry.is_some() {
                                t.work_a.add_row(i, ar);
                            }
                        }
                        let lo = ptr[i] as usize;
                        for (p, &j) in (lo..diag[i] as usize).zip(kr) {
                            let x = -(omega * val[p] / val[diag[j as usize] as usize]);
                            t.finite &= x.is_finite();
                            t.off_zero &= x.abs() <= SYMMETRY_TOLERANCE * x.abs() || x.is_nan();
                        }
                        t.finite &= (scale / val[diag[i] as usize]).is_finite();
                    }
                    t
                })
                .reduce(Tally::new, Tally::merge)
        };
        let (t, a_symmetric) = match a_symmetry {
            Some(known) => {
                let (t, s) = rayon::join(pass, || known.symmetric(self.a));
                (t, Some(s))
            }
            None => (pass(), None),
        };
        let (k, _hk) = ck.finish(t.k, t.off_zero);
        let (kt, _hkt) = ckt.finish(t.kt, t.off_zero);
        // Every diagonal value of A is positive here (the views exist only then), as the
        // counter takes every stored diagonal entry to be.
        let (fa, _ha) = ca.finish(t.a, a_symmetric.unwrap_or(false));
        K1Features {
            a_ndiag: fa.ndiag,
            #[cfg(feature = "model")]
            counts_a: a_symmetric.map(|_| SpmvCounts {
                work: spmv_work_counted(&fa, &_ha, &t.work_a),
                features: fa.clone(),
            }),
            #[cfg(feature = "model")]
            counts: (
                SpmvCounts {
                    work: spmv_work_counted(&k, &_hk, &t.work.0),
                    features: k.clone(),
                },
                SpmvCounts {
                    work: spmv_work_counted(&kt, &_hkt, &t.work.1),
                    features: kt.clone(),
                },
            ),
            k,
            kt,
            values_finite: t.finite,
        }
    }

    /// The counts the SpMV choice reads of the explicit product `K^T diag(s) K`, from one
    /// symbolic pass over the views (the same counts as [`crate::ssor::explicit_counts`] of
    /// the formed factors, whose values are finite).
    #[cfg(feature = "model")]
    pub fn explicit_counts(&self) -> SpmvCounts {
        let n = self.n();
        let counter = FeatureCounter::new(n, n);
        let (rows, work) = autopcg_solver::precond::fold_gram_pattern(
            n,
            |i| self.kt_row(i),
            |q| self.k_row(q),
            <(RowTally, WorkTally)>::default,
            |(rows, work), i, cols| {
                counter.add_row(rows, i, cols);
                work.add_row(i, cols);
            },
            |(r1, w1), (r2, w2)| (r1.merge(r2), w1.merge(w2)),
        );
        let (features, hist) = counter.finish(rows, true);
        SpmvCounts {
            work: spmv_work_counted(&features, &hist, &work),
            features,
        }
    }
}

#[cfg(feature = "model")]
impl<'a> K1Factors<'a> {
    /// The [`K1Totals`] of `A` and of its factors with relaxation `omega`, counted on the host
    /// row by row: the reference a count made elsewhere must equal (for tests).
    pub fn factor_totals(&self, omega: f64) -> K1Totals {
        let n = self.n();
        let a: &'a CsrMatrix = self.a;
        let (ptr, idx, val) = (a.indptr(), a.indices(), a.data());
        let section = |row: &dyn Fn(usize) -> &'a [u32]| rows_totals(n, row);
        let (mut finite, mut off_zero) = (true, true);
        let scale = omega * (2.0 - omega);
        let diag = self.diag();
        for i in 0..n {
            let lo = ptr[i] as usize;
            for (p, &j) in (lo..diag[i] as usize).zip(self.k_row(i)) {
                let x = -(omega * val[p] / val[diag[j as usize] as usize]);
                finite &= x.is_finite();
                off_zero &= !(x.is_finite() && x != 0.0);
            }
            finite &= (scale / val[diag[i] as usize]).is_finite();
        }
        K1Totals {
            a: section(&|i| &idx[ptr[i] as usize..ptr[i + 1] as usize]),
            k: section(&|i| self.k_row(i)),
            kt: section(&|i| self.kt_row(i)),
            values_finite: finite,
            off_diagonal_zero: off_zero,
        }
    }
}

/// The totals of the `n` rows `row` gives (ascending columns), tallied one row after another
/// as the device's counts tally them, warps of 32 consecutive rows.
#[cfg(feature = "model")]
fn rows_totals<'r>(n: usize, row: &dyn Fn(usize) -> &'r [u32]) -> StructureTotals {
    let counter = FeatureCounter::new(n, n);
    let mut rows = RowTally::default();
    let mut totals = RowTotals::default();
    let (mut longest, mut warp_slots) = (0u64, 0u64);
    for i in 0..n {
        let cols = row(i);
        counter.add_row(&mut rows, i, cols);
        totals.add_row(i, cols);
        longest = longest.max(cols.len() as u64);
        if i % 32 == 31 || i + 1 == n {
            warp_slots += 32 * longest;
            longest = 0;
        }
    }
    totals.finish(counter, warp_slots)
}

/// The [`StructureTotals`] of the square matrix `a` counted on the host: the reference a
/// count of `A` made elsewhere must equal (for tests; [`a_counts_from`] turns either into the
/// SpMV counts).
#[cfg(feature = "model")]
pub fn structure_totals(a: &CsrMatrix) -> StructureTotals {
    let (ptr, idx) = (a.indptr(), a.indices());
    rows_totals(a.nrows(), &|i| &idx[ptr[i] as usize..ptr[i + 1] as usize])
}

/// The SpMV counts of the square matrix `a` from its totals counted elsewhere (see
/// [`structure_totals`]; the counts [`SpmvCounts::of_knowing`] finds by its pass over `a`),
/// `symmetric` as the caller knows it; `None` when the totals cannot be `a`'s (rows, entries,
/// stored diagonals or bitmap words that do not add up).
#[cfg(feature = "model")]
pub fn a_counts_from(a: &CsrMatrix, t: StructureTotals, symmetric: bool) -> Option<SpmvCounts> {
    let entries: u64 = t.hist.iter().enumerate().map(|(l, &r)| l as u64 * r).sum();
    if !a.is_square() || entries != a.nnz() as u64 {
        return None;
    }
    counts_from_totals(a.nrows(), t, symmetric)
}

/// Reads first-order SSOR-AI's [`K1Checks`] of `A` somewhere other than the host's passes
/// (the GPU, from the arrays uploaded there): `Ok(None)` where it does not read this matrix,
/// `Err` naming why it failed. The plan then reads them on the host.
#[derive(Clone, Copy)]
pub struct K1Checker<'a>(pub &'a K1Check<'a>);

/// The function a [`K1Checker`] calls.
pub type K1Check<'a> = dyn Fn(&CsrMatrix) -> Result<Option<K1Checks>, String> + Sync + 'a;

impl std::fmt::Debug for K1Checker<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("K1Checker")
    }
}

/// Counts the structure of `A` somewhere other than the host's pass (the GPU): `Ok(None)`
/// where it does not count this matrix, `Err` naming why it failed. The plan then counts on
/// the host.
#[cfg(feature = "model")]
#[derive(Clone, Copy)]
pub struct ACounter<'a>(pub &'a ACount<'a>);

/// The function an [`ACounter`] calls.
#[cfg(feature = "model")]
pub type ACount<'a> = dyn Fn(&CsrMatrix) -> Result<Option<StructureTotals>, String> + Sync + 'a;

#[cfg(feature = "model")]
impl std::fmt::Debug for ACounter<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ACounter")
    }
}

/// The SpMV counts of an `n x n` matrix counted elsewhere ([`StructureTotals`]), `symmetric`
/// as the caller knows it; `None` when the totals cannot be an `n`-row matrix's.
#[cfg(feature = "model")]
fn counts_from_totals(n: usize, t: StructureTotals, symmetric: bool) -> Option<SpmvCounts> {
    if t.hist.iter().sum::<u64>() != n as u64 || t.diag_stored > n as u64 {
        return None;
    }
    let counter = FeatureCounter::with_diagonals(n, n, t.diagonals)?;
    let mut hist = t.hist;
    // Trailing empty bins are not rows; the host's histogram ends at the longest row.
    while hist.last() == Some(&0) {
        hist.pop();
    }
    let rows = RowTally::from_histogram(hist, t.diag_stored as usize);
    let (features, hist) = counter.finish(rows, symmetric);
    let work = WorkTally::from_totals(t.x_lines, u128::from(t.dist), t.warp_slots);
    Some(SpmvCounts {
        work: spmv_work_counted(&features, &hist, &work),
        features,
    })
}

/// Counts the structure of `A` and of its first-order factors with relaxation `omega`
/// somewhere other than the host's pass (the GPU), given `A` and `omega`: `Ok(None)` where it
/// does not count this matrix, `Err` naming why it failed. The plan then counts on the host.
#[cfg(feature = "model")]
#[derive(Clone, Copy)]
pub struct FactorCounter<'a>(pub &'a FactorCount<'a>);

/// The function a [`FactorCounter`] calls.
#[cfg(feature = "model")]
pub type FactorCount<'a> = dyn Fn(&CsrMatrix, f64) -> Result<Option<K1Totals>, String> + Sync + 'a;

#[cfg(feature = "model")]
impl std::fmt::Debug for FactorCounter<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FactorCounter")
    }
}

/// Counts the structure of the explicit product of `A` somewhere other than the host's
/// symbolic pass (the GPU), given `A` and the longest row of `K^T` (what a row of the product
/// merges): `Ok(None)` where it does not count this matrix (it cannot count it exactly, or the
/// host's pass is the faster there), `Err` naming why it failed. The plan then counts on the
/// host.
#[cfg(feature = "model")]
#[derive(Clone, Copy)]
pub struct GramCounter<'a>(pub &'a GramCount<'a>);

/// The function a [`GramCounter`] calls.
#[cfg(feature = "model")]
pub type GramCount<'a> =
    dyn Fn(&CsrMatrix, usize) -> Result<Option<StructureTotals>, String> + Sync + 'a;

#[cfg(feature = "model")]
impl std::fmt::Debug for GramCounter<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GramCounter")
    }
}

/// The structure of second-order SSOR-AI's factors, `K = I - X + X^2` and `K^T diag(s)`,
/// counted somewhere other than the host (the GPU, from `A`'s arrays uploaded there), nothing of
/// them formed.
#[cfg(feature = "model")]
#[derive(Debug, Clone, PartialEq)]
pub struct K2Totals {
    /// `K`'s totals.
    pub k: StructureTotals,
    /// `K^T diag(s)`'s totals.
    pub kt: StructureTotals,
}

/// Counts second-order SSOR-AI's factors of `A` somewhere other than the host ([`K2Totals`]),
/// given `A`: `Ok(None)` where it does not count this matrix, `Err` naming why it failed. The
/// plan then builds the factors on the host, as without a counter.
#[cfg(feature = "model")]
#[derive(Clone, Copy)]
pub struct K2Counter<'a>(pub &'a K2Count<'a>);

/// The function a [`K2Counter`] calls.
#[cfg(feature = "model")]
pub type K2Count<'a> = dyn Fn(&CsrMatrix) -> Result<Option<K2Totals>, String> + Sync + 'a;

#[cfg(feature = "model")]
impl std::fmt::Debug for K2Counter<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("K2Counter")
    }
}

/// What the plan reads of second-order SSOR-AI's factors from their [`K2Totals`].
#[cfg(feature = "model")]
#[derive(Debug, Clone)]
pub struct K2Features {
    /// The SpMV counts of `K` and of `K^T diag(s)` (what [`SpmvCounts::of_knowing`] with
    /// [`KnownSymmetry::Triangular`] finds of the factors the host builds).
    pub counts: (SpmvCounts, SpmvCounts),
    /// [`crate::ssor::explicit_nnz_bound`] of `K`, from its row lengths.
    pub explicit_bound: f64,
}

#[cfg(feature = "model")]
impl K2Features {
    /// The features of an `n`-row matrix's factors from their totals; `off_diagonal_zero`:
    /// whether every off-diagonal value of `X = omega L D^-1` is zero, which is whether every
    /// one of `K`'s is (the first row of `X` with a value that is not zero has no term of
    /// `X^2` beside it), the symmetry feature of both triangular factors. `None` when the
    /// totals cannot be the factors' (rows or stored diagonals that do not add up, or `K` and
    /// `K^T` of different numbers of entries).
    pub fn from_totals(n: usize, t: K2Totals, off_diagonal_zero: bool) -> Option<K2Features> {
        let entries = |s: &StructureTotals| {
            s.hist
                .iter()
                .enumerate()
                .map(|(l, &r)| l as u64 * r)
                .sum::<u64>()
        };
        let (nk, nkt) = (entries(&t.k), entries(&t.kt));
        if nk != nkt || t.k.diag_stored != n as u64 || t.kt.diag_stored != n as u64 {
            return None;
        }
        let explicit_bound =
            t.k.hist
                .iter()
                .enumerate()
                .map(|(l, &r)| (l as f64).powi(2) * r as f64)
                .sum();
        let k = counts_from_totals(n, t.k, off_diagonal_zero)?;
        let kt = counts_from_totals(n, t.kt, off_diagonal_zero)?;
        Some(K2Features {
            counts: (k, kt),
            explicit_bound,
        })
    }
}

#[cfg(feature = "model")]
impl K1Factors<'_> {
    /// The counts of the explicit product from totals counted elsewhere (see [`StructureTotals`]);
    /// `None` when they cannot be this matrix's (rows or bitmap words that do not add up).
    pub fn explicit_counts_from(&self, t: StructureTotals) -> Option<SpmvCounts> {
        counts_from_totals(self.n(), t, true)
    }

    /// What [`K1Factors::features`] finds, from totals counted elsewhere (see [`K1Totals`]:
    /// the same counts, which a GPU test pins); `None` when they cannot be this matrix's (rows,
    /// entries or bitmap words that do not add up).
    pub fn features_from(
        &self,
        t: K1Totals,
        a_symmetry: Option<KnownSymmetry>,
    ) -> Option<K1Features> {
        let n = self.n() as u64;
        // Every row of A and of both factors is counted once; K and K^T share the diagonal.
        let entries = |s: &StructureTotals| {
            s.hist
                .iter()
                .enumerate()
                .map(|(l, &r)| l as u64 * r)
                .sum::<u64>()
        };
        if entries(&t.a) != self.a.nnz() as u64
            || entries(&t.k) != self.nnz_k as u64
            || entries(&t.kt) != self.nnz_kt() as u64
            || t.k.diag_stored != n
            || t.kt.diag_stored != n
        {
            return None;
        }
        let a_symmetric = a_symmetry.map(|known| known.symmetric(self.a));
        let a = counts_from_totals(self.n(), t.a, a_symmetric.unwrap_or(false))?;
        let k = counts_from_totals(self.n(), t.k, t.off_diagonal_zero)?;
        let kt = counts_from_totals(self.n(), t.kt, t.off_diagonal_zero)?;
        Some(K1Features {
            a_ndiag: a.features.ndiag,
            counts_a: a_symmetric.map(|_| a),
            k: k.features.clone(),
            kt: kt.features.clone(),
            values_finite: t.values_finite,
            counts: (k, kt),
        })
    }

    /// The [`StructureTotals`] of the explicit product counted on the host by the symbolic pass of
    /// [`K1Factors::explicit_counts`]: the reference a count made elsewhere must equal (for
    /// tests; it keeps the longest row of every warp).
    pub fn gram_totals(&self) -> StructureTotals {
        #[derive(Default)]
        struct T {
            rows: RowTally,
            totals: RowTotals,
            /// The longest row of each warp seen (by warp index).
            warps: std::collections::BTreeMap<usize, u64>,
        }
        let n = self.n();
        let counter = FeatureCounter::new(n, n);
        let t = autopcg_solver::precond::fold_gram_pattern(
            n,
            |i| self.kt_row(i),
            |q| self.k_row(q),
            T::default,
            |t, i, cols| {
                counter.add_row(&mut t.rows, i, cols);
                t.totals.add_row(i, cols);
                let w = t.warps.entry(i / 32).or_default();
                *w = (*w).max(cols.len() as u64);
            },
            |mut t1, t2| {
                t1.rows = t1.rows.merge(t2.rows);
                t1.totals.merge(t2.totals);
                for (w, l) in t2.warps {
                    let e = t1.warps.entry(w).or_default();
                    *e = (*e).max(l);
                }
                t1
            },
        );
        let warp_slots = t.warps.values().map(|l| 32 * l).sum();
        t.totals.finish(counter, warp_slots)
    }
}

/// The totals of rows tallied one by one as the device's counts tally them (the host's
/// references for those counts: [`K1Factors::gram_totals`], [`K1Factors::factor_totals`]);
/// the caller keeps the warps' longest rows and the diagonal bitmap.
#[cfg(feature = "model")]
#[derive(Default)]
struct RowTotals {
    hist: Vec<u64>,
    x_lines: u64,
    dist: u64,
    diag_stored: u64,
}

#[cfg(feature = "model")]
impl RowTotals {
    /// Adds row `i` with ascending columns `cols`.
    fn add_row(&mut self, i: usize, cols: &[u32]) {
        let per_line = (autopcg_model::work::X_LINE_BYTES / 8) as u32;
        let l = cols.len();
        if self.hist.len() <= l {
            self.hist.resize(l + 1, 0);
        }
        self.hist[l] += 1;
        let mut last = u32::MAX;
        for &j in cols {
            if j / per_line != last {
                self.x_lines += 1;
                last = j / per_line;
            }
            self.dist += (j as u64).abs_diff(i as u64);
        }
        self.diag_stored += u64::from(cols.binary_search(&(i as u32)).is_ok());
    }

    /// Adds the rows `next` tallied.
    fn merge(&mut self, next: RowTotals) {
        if self.hist.len() < next.hist.len() {
            self.hist.resize(next.hist.len(), 0);
        }
        self.hist
            .iter_mut()
            .zip(&next.hist)
            .for_each(|(a, b)| *a += b);
        self.x_lines += next.x_lines;
        self.dist += next.dist;
        self.diag_stored += next.diag_stored;
    }

    /// The totals, with the diagonals `counter` marked and `warp_slots`.
    fn finish(self, counter: FeatureCounter, warp_slots: u64) -> StructureTotals {
        StructureTotals {
            hist: self.hist,
            diagonals: counter.into_diagonal_words(),
            x_lines: self.x_lines,
            dist: self.dist,
            warp_slots,
            diag_stored: self.diag_stored,
        }
    }
}

/// The fallback rule's SpMV method for an operand with these features (as
/// [`crate::fallback::spmv_method`] picks it from the stored matrix).
pub fn fallback_method(f: &MatrixFeatures) -> SpmvMethod {
    crate::fallback::spmv_method_of(f.n as u64, f.nnz as u64, f.ndiag as u64)
}

#[cfg(all(test, feature = "model"))]
mod tests {
    use super::*;
    use autopcg_solver::{PrecondKind, Preconditioner};
    use autopcg_sparse::families;
    use autopcg_sparse::features::KnownSymmetry;

    fn cases() -> Vec<CsrMatrix> {
        // Relative to the package folder, cargo's working directory for tests.
        let fixture = |f: &str| {
            autopcg_sparse::mm::read_matrix(format!("../../matrices/{f}.mtx"), &Default::default())
                .expect("fixture")
                .matrix
        };
        vec![
            families::poisson3d_7pt(13, 11, 17).unwrap(),
            families::poisson2d_5pt(ROWS + 3, 2).unwrap(),
            families::random_powerlaw_spd(3 * ROWS - 5, 9.0, 1.3, 11).unwrap(),
            families::fem_p1_2d(20_000, 5).unwrap(),
            CsrMatrix::identity(17).unwrap(),
            fixture("bcsstk13"),
            fixture("1138_bus"),
        ]
    }

    /// Views made from the host's checks are those of the host's passes (the same counts,
    /// omega and bound) without searching the diagonal until a pass over them needs it; checks
    /// naming a bad diagonal, or counts that cannot be A's, make no views.
    #[test]
    fn views_from_checks_are_the_host_views() {
        for a in cases() {
            let v = K1Factors::of(&a).unwrap();
            let c = v.checks();
            let w = K1Factors::from_checks(&a, &c).expect("views from the host's checks");
            assert!(!w.diagonal_searched());
            assert_eq!((w.nnz_k(), w.nnz_kt()), (v.nnz_k(), v.nnz_kt()));
            assert_eq!(w.auto_omega().to_bits(), v.auto_omega().to_bits());
            assert_eq!(
                w.explicit_nnz_bound().to_bits(),
                v.explicit_nnz_bound().to_bits()
            );
            assert_eq!(
                v.auto_omega().to_bits(),
                autopcg_solver::auto_omega(&a).to_bits()
            );
            assert!(!w.diagonal_searched());
            assert_eq!(w.kt_row(a.nrows() - 1), v.kt_row(a.nrows() - 1));
            assert!(w.diagonal_searched());
            let bad = K1Checks {
                bad_diagonal: Some(0),
                ..c
            };
            assert!(K1Factors::from_checks(&a, &bad).is_none());
            let uneven = K1Checks {
                nnz_k: c.nnz_k + 1,
                ..c
            };
            assert!(K1Factors::from_checks(&a, &uneven).is_none());
        }
        // More entries in K than A holds (as many "below" as "above" by the count alone).
        let a = CsrMatrix::identity(4).unwrap();
        let c = K1Checks {
            bad_diagonal: None,
            nnz_k: 1 << 40,
            k_len_squares: 0,
            coupling: 0.0,
        };
        assert!(K1Factors::from_checks(&a, &c).is_none());
    }

    /// The counts read through A's pattern are those of the formed factors and of their
    /// explicit product: the selection sees the same matrices either way.
    #[test]
    fn counts_through_the_pattern_are_those_of_the_formed_factors() {
        for a in cases() {
            for omega in [1.0, 0.6] {
                let kind = PrecondKind::ssor_ai().with_omega(omega);
                let pre = Preconditioner::build(&a, &kind).unwrap();
                let Preconditioner::SsorFactored { k, kt, .. } = &pre else {
                    panic!("factored form expected")
                };
                let v = K1Factors::of(&a).expect("a symmetric pattern with a positive diagonal");
                assert_eq!((v.nnz_k(), v.nnz_kt()), (k.nnz(), kt.nnz()));
                for i in [0, a.nrows() / 2, a.nrows() - 1] {
                    assert_eq!(v.k_row(i), k.row(i).0);
                    assert_eq!(v.kt_row(i), kt.row(i).0);
                }
                let f = v.features(omega, Some(KnownSymmetry::Unknown));
                let tri = KnownSymmetry::Triangular;
                assert_eq!(f.counts_a, Some(SpmvCounts::of(&a)), "A, n = {}", a.nrows());
                let (n, nnz) = (a.nrows() as u64, a.nnz() as u64);
                assert_eq!(
                    crate::fallback::spmv_method_of(n, nnz, f.a_ndiag as u64),
                    crate::fallback::spmv_method(&a)
                );
                let known = v.features(omega, Some(KnownSymmetry::Symmetric));
                assert_eq!(known.counts_a, f.counts_a, "A known symmetric");
                assert_eq!(v.features(omega, None).counts_a, None);
                assert_eq!(
                    f.counts.0,
                    SpmvCounts::of_knowing(k, tri),
                    "K, n = {}",
                    a.nrows()
                );
                assert_eq!(
                    f.counts.1,
                    SpmvCounts::of_knowing(kt, tri),
                    "K^T, n = {}",
                    a.nrows()
                );
                assert_eq!((&f.k, &f.kt), (&f.counts.0.features, &f.counts.1.features));
                assert_eq!(f.values_finite, pre.values_finite());
                assert_eq!(
                    v.explicit_counts(),
                    crate::ssor::explicit_counts(&pre).unwrap(),
                    "M, n = {}",
                    a.nrows()
                );
                assert_eq!(v.explicit_nnz_bound(), crate::ssor::explicit_nnz_bound(k));
                assert_eq!(
                    v.auto_omega().to_bits(),
                    autopcg_solver::auto_omega(&a).to_bits()
                );
                assert_eq!(fallback_method(&f.k), crate::fallback::spmv_method(k));
                assert_eq!(fallback_method(&f.kt), crate::fallback::spmv_method(kt));
            }
        }
    }

    /// The explicit product's counts made from totals (as the GPU counts them) are the host
    /// pass's, and totals that cannot be the matrix's are refused.
    #[test]
    fn counts_from_totals_are_the_host_pass_counts() {
        for a in cases() {
            let v = K1Factors::of(&a).unwrap();
            let t = v.gram_totals();
            assert_eq!(t.hist.iter().sum::<u64>(), a.nrows() as u64);
            assert_eq!(t.diag_stored, a.nrows() as u64, "M stores its diagonal");
            // The device's histogram is longer than the longest row: trailing bins are empty.
            let mut padded = t.clone();
            padded.hist.resize(t.hist.len().max(1024), 0);
            let host = v.explicit_counts();
            assert_eq!(
                v.explicit_counts_from(padded),
                Some(host.clone()),
                "n = {}",
                a.nrows()
            );
            assert_eq!(v.explicit_counts_from(t.clone()), Some(host));
            let mut short = t.clone();
            short.diagonals.pop();
            assert_eq!(v.explicit_counts_from(short), None);
            let mut lost = t;
            lost.hist[1] += 1;
            assert_eq!(v.explicit_counts_from(lost), None);
        }
    }

    /// A's counts made from its totals (as the GPU counts them) are the host pass's, with what
    /// is known of its symmetry, and totals that cannot be the matrix's are refused.
    #[test]
    fn a_counts_from_totals_are_the_host_pass_counts() {
        let mut all = cases();
        // Not symmetric, and rows without a diagonal entry.
        all.push(
            CsrMatrix::from_triplets(3, 3, &[0, 1, 2, 2], &[1, 1, 0, 2], &[1.0, 2.0, 3.0, 4.0])
                .unwrap(),
        );
        for a in all {
            let t = structure_totals(&a);
            assert_eq!(t.hist.iter().sum::<u64>(), a.nrows() as u64);
            for sym in [KnownSymmetry::Symmetric, KnownSymmetry::Unknown] {
                let symmetric = sym.symmetric(&a);
                let mut padded = t.clone();
                padded.hist.resize(t.hist.len().max(1024), 0);
                let want = SpmvCounts::of_knowing(&a, sym);
                assert_eq!(
                    a_counts_from(&a, padded, symmetric),
                    Some(want.clone()),
                    "n = {}",
                    a.nrows()
                );
                assert_eq!(a_counts_from(&a, t.clone(), symmetric), Some(want));
            }
            let mut short = t.clone();
            short.diagonals.pop();
            assert_eq!(a_counts_from(&a, short, true), None);
            let mut lost = t.clone();
            lost.hist[1] += 1;
            assert_eq!(a_counts_from(&a, lost, true), None);
            // As many rows, one entry less.
            if let Some(l) = (2..t.hist.len()).find(|&l| t.hist[l] > 0) {
                let mut fewer = t.clone();
                fewer.hist[l] -= 1;
                fewer.hist[l - 1] += 1;
                assert_eq!(a_counts_from(&a, fewer, true), None);
            }
        }
    }

    /// The factors' features made from totals (as the GPU counts them) are the host pass's,
    /// with and without what is known of A's symmetry, and totals that cannot be the matrix's
    /// are refused.
    #[test]
    fn factor_features_from_totals_are_the_host_pass_features() {
        let check = |a: &CsrMatrix, omega: f64| {
            let v = K1Factors::of(a).unwrap();
            let t = v.factor_totals(omega);
            for sym in [Some(KnownSymmetry::Symmetric), None] {
                let host = v.features(omega, sym);
                let mut padded = t.clone();
                for s in [&mut padded.a, &mut padded.k, &mut padded.kt] {
                    s.hist.resize(s.hist.len().max(1024), 0);
                }
                let from = v.features_from(padded, sym).expect("totals add up");
                let n = a.nrows();
                assert_eq!(from.k, host.k, "n = {n}: K");
                assert_eq!(from.kt, host.kt, "n = {n}: K^T");
                assert_eq!(from.counts, host.counts, "n = {n}: counts");
                assert_eq!(from.counts_a, host.counts_a, "n = {n}: A");
                assert_eq!(from.a_ndiag, host.a_ndiag);
                assert_eq!(from.values_finite, host.values_finite);
            }
            let mut lost = t.clone();
            lost.k.hist[1] += 1;
            assert!(v.features_from(lost, None).is_none());
            let mut moved = t.clone();
            moved.kt.hist.resize(moved.kt.hist.len().max(3), 0);
            moved.kt.hist[1] -= 1;
            moved.kt.hist[2] += 1;
            assert!(
                v.features_from(moved, None).is_none(),
                "K^T's entries do not add up"
            );
            let mut short = t;
            short.a.diagonals.pop();
            assert!(v.features_from(short, None).is_none());
        };
        for a in cases() {
            check(&a, 1.0);
            check(&a, 0.7);
        }
        // A diagonal matrix: K's off-diagonal is empty (symmetric factors); and values whose
        // factors overflow are seen as not finite.
        check(&CsrMatrix::identity(300).unwrap(), 1.0);
        let a = families::poisson2d_5pt(20, 20).unwrap();
        let mut values = a.data().to_vec();
        // a_10 = 1e308 over a_00 = 1e-10: K_10 overflows.
        values[a.indptr()[1] as usize] = 1e308;
        values[0] = 1e-10;
        let big = a.with_values(values).unwrap();
        let t = K1Factors::of(&big).unwrap().factor_totals(1.0);
        assert!(!t.values_finite);
        check(&big, 1.0);
    }

    /// Where the views do not apply, the host build decides (and reports a bad diagonal).
    #[test]
    fn no_views_without_a_diagonal_or_with_more_entries_below_it() {
        let m = |r: &[u32], c: &[u32], v: &[f64]| CsrMatrix::from_triplets(3, 3, r, c, v).unwrap();
        // Row 2 stores no diagonal entry.
        assert!(K1Factors::of(&m(&[0, 1, 2], &[0, 1, 0], &[1.0, 1.0, 1.0])).is_none());
        // A non-positive diagonal value.
        assert!(K1Factors::of(&m(&[0, 1, 2], &[0, 1, 2], &[1.0, -1.0, 1.0])).is_none());
        // Two entries below the diagonal, one above.
        let a = m(
            &[0, 1, 2, 2, 2, 0],
            &[0, 1, 2, 0, 1, 2],
            &[2.0, 2.0, 2.0, 0.1, 0.1, 0.1],
        );
        assert!(K1Factors::of(&a).is_none());
        // Not square.
        let r = CsrMatrix::from_triplets(2, 3, &[0, 1], &[0, 1], &[1.0, 1.0]).unwrap();
        assert!(K1Factors::of(&r).is_none());
    }
}
