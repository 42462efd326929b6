//! The values of the terms on a matrix: padding limits, the working set and its L2 share, the
//! launch depth, the atomic contention, the threads in flight, and a candidate's design row.
use autopcg_catalog::{DeviceProps, Format, GridPolicy, DEFAULT_THREADS};
use autopcg_sparse::PaddingLimits;

use super::{FeatureSet, KernelKind, Residency, SpmvCandidate, Term, TermSpec};
use crate::work::{SpmvWork, VECTOR_LANES};

/// True when `format` can hold the matrix of `w` within `limits`: ELL, DIA and the ELL part of
/// HYB are refused when their fill ratio (slots over the nonzeros they hold) or their padded
/// bytes exceed the limits, with the byte counts of the sparse crate's conversions; every other
/// format always applies.
///
/// HYB is also refused when its COO part is empty (`hyb_coo_nnz == 0`, every row within the
/// split, e.g. a stencil): it is then the ELL kernel plus an empty launch, which the ELL
/// candidates already cover. The profile measures only one HYB kernel on such a matrix (its
/// COO kernels have nothing to do), so a HYB model fitted on matrices with a COO part would
/// otherwise be extrapolated to a case it never saw.
pub fn format_applies(format: Format, w: &SpmvWork, limits: &PaddingLimits) -> bool {
    // The host conversions' rule, on the predicted slots and bytes.
    let within = |slots: u64, nnz: u64, bytes: u128| {
        let nnz = usize::try_from(nnz).unwrap_or(usize::MAX);
        limits.allows(u128::from(slots), nnz, bytes)
    };
    let (ell_slots, dia_slots, ndiag) = (
        u128::from(w.ell_slots),
        u128::from(w.dia_slots),
        u128::from(w.ndiag),
    );
    match format {
        Format::Ell => within(w.ell_slots, w.nnz, 12 * ell_slots),
        Format::Dia => within(w.dia_slots, w.nnz, 8 * dia_slots + 4 * ndiag),
        Format::Hyb => {
            w.hyb_coo_nnz > 0
                && within(
                    w.hyb_ell_slots,
                    w.nnz.saturating_sub(w.hyb_coo_nnz),
                    12 * u128::from(w.hyb_ell_slots),
                )
        }
        Format::Csr | Format::Coo => true,
    }
}

/// Bytes a SpMV in `format` touches: the format's arrays (32-bit indices, double values) plus
/// `x` and `y`.
pub fn working_set_bytes(format: Format, w: &SpmvWork) -> f64 {
    let (n, nnz) = (w.n as f64, w.nnz as f64);
    let xy = 8.0 * (w.ncols as f64 + n);
    let arrays = match format {
        Format::Ell => 12.0 * w.ell_slots as f64,
        Format::Dia => 8.0 * w.dia_slots as f64 + 4.0 * w.ndiag as f64,
        Format::Coo => 16.0 * nnz,
        Format::Hyb => 12.0 * w.hyb_ell_slots as f64 + 16.0 * w.hyb_coo_nnz as f64,
        Format::Csr => 4.0 * (n + 1.0) + 12.0 * nnz,
    };
    arrays + xy
}

/// The L2-resident share `s = 1 / (1 + (B / (fraction * l2))^4)` of a working set of `bytes`.
pub fn l2_share(bytes: f64, l2_bytes: u64, fraction: f64) -> f64 {
    let cap = fraction * l2_bytes as f64;
    if cap <= 0.0 || !cap.is_finite() {
        return 0.0;
    }
    1.0 / (1.0 + (bytes / cap).powi(4))
}

/// Blocks a launch of `cand` over `items` work items gets on `dev` ([`GridPolicy::blocks`];
/// a candidate without a grid policy covers the items; [`DEFAULT_THREADS`] per block where it has no
/// thread count).
fn launch_blocks(cand: &SpmvCandidate, items: u64, dev: &DeviceProps) -> (u64, u32) {
    let t = cand.threads.unwrap_or(DEFAULT_THREADS).max(1);
    let grid = cand.grid.unwrap_or(GridPolicy::Cover);
    (grid.blocks(items, t, dev), t)
}

/// Loop trips of the busiest thread of `cand` on `w` under its launch geometry on `dev` (the
/// [`Term::Depth`] value).
pub fn depth(cand: &SpmvCandidate, w: &SpmvWork, dev: &DeviceProps) -> f64 {
    let n = w.n.max(1) as f64;
    let rounds = |items: u64, per_item_threads: u64| -> f64 {
        // Grid-stride rounds over `items / per_item_threads` units.
        let (blocks, t) = launch_blocks(cand, items, dev);
        let units_in_flight = (blocks * u64::from(t) / per_item_threads.max(1)).max(1);
        (items / per_item_threads.max(1))
            .div_ceil(units_in_flight)
            .max(1) as f64
    };
    match KernelKind::of(cand) {
        KernelKind::CsrScalar => {
            let mean = w.scalar_warp_slots as f64 / (32.0 * w.n.div_ceil(32).max(1) as f64);
            (w.row_len_max as f64).max(rounds(w.n, 1) * mean)
        }
        KernelKind::CsrVector { lanes } => {
            let k = VECTOR_LANES.iter().position(|&l| l == lanes).unwrap_or(0);
            let l = u64::from(lanes);
            let mean = w.vector_steps[k] as f64 / n;
            (w.row_len_max.div_ceil(l) as f64).max(rounds(w.n * l, l) * mean)
        }
        KernelKind::Ell => rounds(w.n, 1) * w.ell_width as f64,
        KernelKind::Dia => rounds(w.n, 1) * w.ndiag as f64,
        KernelKind::CooAtomic | KernelKind::CooSegment => rounds(w.nnz, 1),
        KernelKind::Hyb => {
            let coo = if w.hyb_coo_nnz > 0 {
                rounds(w.hyb_coo_nnz, 1)
            } else {
                0.0
            };
            rounds(w.n, 1) * w.hyb_split as f64 + coo
        }
        KernelKind::Generic => w.row_len_max as f64,
    }
}

/// The value of `term` for `cand` on `w` (launched on `dev`), before any L2 split.
pub fn term_value(term: Term, cand: &SpmvCandidate, w: &SpmvWork, dev: &DeviceProps) -> f64 {
    let kind = KernelKind::of(cand);
    match term {
        Term::Launch => 1.0,
        Term::CooLaunch => {
            if kind == KernelKind::Hyb && w.hyb_coo_nnz > 0 {
                1.0
            } else {
                0.0
            }
        }
        Term::Rows => w.n as f64,
        Term::Nnz => w.nnz as f64,
        Term::XLines => w.x_lines as f64,
        Term::Slots => match kind {
            KernelKind::CsrScalar => w.scalar_warp_slots as f64,
            KernelKind::CsrVector { lanes } => VECTOR_LANES
                .iter()
                .position(|&l| l == lanes)
                .map_or(0.0, |k| w.vector_steps[k] as f64),
            KernelKind::Ell => w.ell_slots as f64,
            KernelKind::Dia => w.dia_slots as f64,
            KernelKind::Hyb => w.hyb_ell_slots as f64,
            _ => 0.0,
        },
        Term::CooNnz => {
            if kind == KernelKind::Hyb {
                w.hyb_coo_nnz as f64
            } else {
                0.0
            }
        }
        Term::Depth => depth(cand, w, dev),
        Term::Contention => atomic_contention(w),
    }
}

/// The [`Term::Contention`] value of `w`: `min(nnz, sum_rows len^2 / 32)`, the sum of squared
/// row lengths from their mean and standard deviation.
pub fn atomic_contention(w: &SpmvWork) -> f64 {
    let n = w.n as f64;
    if n <= 0.0 {
        return 0.0;
    }
    let mean = w.nnz as f64 / n;
    let sum_sq = n * (w.row_len_std * w.row_len_std + mean * mean);
    (sum_sq / 32.0).min(w.nnz as f64)
}

/// Threads a launch of `cand` on `w` keeps in flight: its blocks times threads per block,
/// at most the device's resident threads (the ELL launch for HYB).
pub fn active_threads(cand: &SpmvCandidate, w: &SpmvWork, dev: &DeviceProps) -> f64 {
    let items = match KernelKind::of(cand) {
        KernelKind::CsrVector { lanes } => w.n.saturating_mul(u64::from(lanes)),
        KernelKind::CooAtomic | KernelKind::CooSegment | KernelKind::Generic => w.nnz,
        _ => w.n,
    };
    let (blocks, t) = launch_blocks(cand, items, dev);
    let launched = (blocks * u64::from(t)).min(items.max(1)) as f64;
    launched.min(dev.resident_threads()).max(1.0)
}

/// The row of model columns `cols` for `cand` on `w` under the feature set `fs` (its L2 split
/// and fill scaling), on the device `dev` (launch geometry, resident threads, L2 size).
pub fn design_row(
    cols: &[TermSpec],
    fs: &FeatureSet,
    cand: &SpmvCandidate,
    w: &SpmvWork,
    dev: &DeviceProps,
) -> Vec<f64> {
    design_row_at(cols, fs, cand, w, dev, working_set_bytes(cand.format, w))
}

/// [`design_row`] with the L2 split and bins evaluated at a working set of `bytes` instead of
/// the product's own ([`working_set_bytes`]): what the fitted costs per unit of traffic say
/// of the product when other data shares L2 with it (a solver iteration's other operands and
/// vectors).
pub fn design_row_at(
    cols: &[TermSpec],
    fs: &FeatureSet,
    cand: &SpmvCandidate,
    w: &SpmvWork,
    dev: &DeviceProps,
    bytes: f64,
) -> Vec<f64> {
    let l2_bytes = u64::from(dev.l2_bytes);
    let s = fs.l2_fraction.map_or(0.0, |f| l2_share(bytes, l2_bytes, f));
    let bins = fs.bin_weights(bytes, l2_bytes);
    let fill = fs.fill_fraction.map_or(1.0, |f| {
        (f * dev.resident_threads() / active_threads(cand, w, dev)).max(1.0)
    });
    cols.iter()
        .map(|c| {
            let mut v = term_value(c.term, cand, w, dev);
            if c.term.is_traffic() {
                v *= fill;
            }
            match c.part {
                Residency::All => v,
                Residency::InL2 => v * s,
                Residency::OutL2 => v * (1.0 - s),
                Residency::Bin(k) => v * bins.get(k).copied().unwrap_or(0.0),
            }
        })
        .collect()
}
