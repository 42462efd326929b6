//! Synthetic SpMV profiles for the tests: small matrices of the generated families, their work
//! counts, and times from a known model per candidate with small seeded noise, laid out as the
//! profiler writes them (skipped padded formats, a wave record only where its launch differs
//! from the cover launch, cuSPARSE records, conversions).
use autopcg_sparse::families::{generate, Family, FamilyParams, Recipe};
use autopcg_sparse::features::features;

use crate::profile::{
    ConversionRecord, Header, MatrixRecord, MatrixSet, Profile, SpmvRecord, Status, Timing,
    PROFILE_SCHEMA,
};
use crate::spmv::{term_value, KernelKind, SpmvCandidate, Term};
use crate::work::{spmv_work, SpmvWork};
use autopcg_catalog::{
    CusparseAlg, DeviceProps, Format, GridPolicy, SpmvImpl, SpmvKernel, SpmvLaunch, DEFAULT_THREADS,
};

/// A small device: 2 SMs (one wave of 256-thread blocks is 16 blocks, so matrices above 4096
/// rows get a distinct `wave` launch) and an L2 of 256 KiB (the matrices straddle it).
pub(crate) fn device() -> DeviceProps {
    DeviceProps {
        name: "Synthetic GPU".into(),
        sm_count: 2,
        total_mem: 1 << 34,
        l2_bytes: 256 << 10,
        ..DeviceProps::hopper_like()
    }
}

fn header() -> Header {
    Header {
        schema: PROFILE_SCHEMA,
        device: device(),
        quick: false,
        tool_version: "synthetic".into(),
        started_unix_s: 0,
    }
}

fn recipe(f: Family, n: usize, seed: u64, extra: impl FnOnce(&mut FamilyParams)) -> Recipe {
    let mut p = FamilyParams::new(n, seed);
    extra(&mut p);
    Recipe::family(f, p)
}

/// The benchmark recipes of each set.
pub(crate) fn recipes(set: MatrixSet) -> Vec<Recipe> {
    use Family::*;
    let mut r = Vec::new();
    let none = |_: &mut FamilyParams| {};
    match set {
        MatrixSet::Fit => {
            for n in [10, 16, 22, 30, 40, 50, 60] {
                r.push(recipe(Poisson2d5, n, 0, none));
            }
            for n in [12, 24, 36, 48] {
                r.push(recipe(Poisson2d9, n, 0, none));
            }
            for n in [5, 8, 11, 14] {
                r.push(recipe(Poisson3d7, n, 0, none));
            }
            for n in [5, 7, 10, 12] {
                r.push(recipe(Poisson3d27, n, 0, none));
            }
            for n in [12, 24, 40] {
                r.push(recipe(Anisotropic2d, n, 0, none));
            }
            for (i, (n, bw)) in [
                (300, 2),
                (800, 5),
                (1500, 9),
                (2500, 15),
                (4000, 24),
                (6000, 3),
            ]
            .into_iter()
            .enumerate()
            {
                r.push(recipe(Banded, n, i as u64 + 1, |p| p.bandwidth = Some(bw)));
            }
            for (i, (n, m)) in [
                (400, 4.0),
                (900, 8.0),
                (1600, 12.0),
                (2500, 16.0),
                (3600, 24.0),
                (5000, 6.0),
                (7000, 10.0),
            ]
            .into_iter()
            .enumerate()
            {
                r.push(recipe(PowerLaw, n, i as u64 + 11, |p| {
                    p.mean_row_len = Some(m)
                }));
            }
            for (i, n) in [200, 500, 1000, 2000, 3000, 5000].into_iter().enumerate() {
                r.push(recipe(FemP1, n, i as u64 + 21, none));
            }
        }
        MatrixSet::Eval => {
            for n in [13, 35, 55] {
                r.push(recipe(Poisson2d5, n, 0, none));
            }
            for n in [20, 42] {
                r.push(recipe(Poisson2d9, n, 0, none));
            }
            for n in [7, 12] {
                r.push(recipe(Poisson3d7, n, 0, none));
            }
            for n in [6, 11] {
                r.push(recipe(Poisson3d27, n, 0, none));
            }
            for n in [18, 33] {
                r.push(recipe(Anisotropic2d, n, 0, none));
            }
            for (i, (n, bw)) in [(1000, 4), (3000, 12), (600, 20)].into_iter().enumerate() {
                r.push(recipe(Banded, n, i as u64 + 101, |p| {
                    p.bandwidth = Some(bw)
                }));
            }
            for (i, (n, m)) in [(700, 5.0), (2000, 10.0), (4500, 18.0), (6500, 7.0)]
                .into_iter()
                .enumerate()
            {
                r.push(recipe(PowerLaw, n, i as u64 + 111, |p| {
                    p.mean_row_len = Some(m)
                }));
            }
            for (i, n) in [700, 2500, 4500].into_iter().enumerate() {
                r.push(recipe(FemP1, n, i as u64 + 121, none));
            }
        }
    }
    r
}

/// The matrix records of a set (built once per call; small sizes, fast).
pub(crate) fn matrices(set: MatrixSet) -> Vec<MatrixRecord> {
    recipes(set)
        .into_iter()
        .enumerate()
        .map(|(i, rec)| {
            let Recipe::Family { family, params } = &rec else {
                unreachable!("synthetic recipes are families")
            };
            let f: Family = family.parse().expect("family name");
            let a = generate(f, params).expect("synthetic matrix");
            let tag = match set {
                MatrixSet::Fit => "fit",
                MatrixSet::Eval => "eval",
            };
            MatrixRecord {
                id: format!("{tag}{i:02}-{family}-{}", params.n),
                set,
                recipe: rec.clone(),
                features: features(&a),
                work: spmv_work(&a),
            }
        })
        .collect()
}

fn cand(kernel: SpmvKernel, threads: u32, grid: GridPolicy) -> SpmvCandidate {
    SpmvCandidate::own(SpmvImpl::Kernel(kernel), threads, grid)
}

/// HYB with the segmented COO kernel.
fn hyb(threads: u32, grid: GridPolicy) -> SpmvCandidate {
    SpmvCandidate::own(SpmvImpl::Hyb(SpmvKernel::CooSegment), threads, grid)
}

/// The candidates of the synthetic profiles with the coefficients of their true base model
/// (`[launch, rows, nnz, x_lines, slots, coo_launch, coo_nnz]`, ms per unit); `wave` and
/// `cover` of the same kernel and threads share one model, as identical launches must.
pub(crate) fn truths() -> Vec<(SpmvCandidate, [f64; 7])> {
    let mut v = Vec::new();
    let scalar = [4e-3, 2e-6, 1e-6, 0.5e-6, 0.8e-6, 0.0, 0.0];
    for g in [GridPolicy::Cover, GridPolicy::Wave] {
        v.push((cand(SpmvKernel::CsrScalar, 256, g), scalar));
    }
    let cover = GridPolicy::Cover;
    v.push((
        cand(SpmvKernel::CsrScalar, 128, cover),
        [4e-3, 2.2e-6, 1e-6, 0.5e-6, 0.7e-6, 0.0, 0.0],
    ));
    v.push((
        cand(SpmvKernel::CsrVector(4), 256, cover),
        [4.5e-3, 3e-6, 1.0e-6, 0.5e-6, 1.2e-6, 0.0, 0.0],
    ));
    v.push((
        cand(SpmvKernel::CsrVector(32), 256, cover),
        [4.5e-3, 6e-6, 0.6e-6, 0.5e-6, 2e-6, 0.0, 0.0],
    ));
    v.push((
        cand(SpmvKernel::Ell, 256, cover),
        [3.5e-3, 1e-6, 0.0, 0.5e-6, 1.1e-6, 0.0, 0.0],
    ));
    v.push((
        cand(SpmvKernel::Dia, 256, cover),
        [3.5e-3, 1e-6, 0.0, 0.2e-6, 0.9e-6, 0.0, 0.0],
    ));
    v.push((
        cand(SpmvKernel::CooSegment, 256, cover),
        [5e-3, 1e-6, 2.5e-6, 0.5e-6, 0.0, 0.0, 0.0],
    ));
    v.push((
        hyb(256, cover),
        [4e-3, 1e-6, 0.0, 0.5e-6, 1.1e-6, 4e-3, 2.5e-6],
    ));
    v
}

/// The noiseless time of `c` under the base linear model with coefficients `k`.
pub(crate) fn linear_time(c: &SpmvCandidate, w: &SpmvWork, k: &[f64; 7]) -> f64 {
    let dev = device();
    let terms = [
        Term::Launch,
        Term::Rows,
        Term::Nnz,
        Term::XLines,
        Term::Slots,
        Term::CooLaunch,
        Term::CooNnz,
    ];
    terms
        .iter()
        .zip(k)
        .map(|(t, k)| k * term_value(*t, c, w, &dev))
        .sum()
}

/// A deterministic generator: xorshift64*.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    /// Uniform in [0, 1).
    pub(crate) fn uniform(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Approximately standard normal (sum of 12 uniforms).
    pub(crate) fn normal(&mut self) -> f64 {
        (0..12).map(|_| self.uniform()).sum::<f64>() - 6.0
    }
}

fn timing(t: f64) -> Timing {
    Timing {
        median_ms: t,
        min_ms: t * 0.99,
        max_ms: t * 1.02,
        reps: 20,
    }
}

fn fill_ok(slots: u64, nnz: u64) -> bool {
    slots as f64 <= 3.0 * nnz as f64
}

/// A synthetic profile of both sets: times from `time(candidate, work)` times
/// `1 + noise * N(0, 1)`.
pub(crate) fn profile_with(
    time: &dyn Fn(&SpmvCandidate, &SpmvWork) -> f64,
    cands: &[SpmvCandidate],
    noise: f64,
    seed: u64,
) -> Profile {
    let mut p = Profile {
        header: Some(header()),
        ..Profile::default()
    };
    let dev = device();
    let mut rng = Rng::new(seed);
    for set in [MatrixSet::Fit, MatrixSet::Eval] {
        for m in matrices(set) {
            let w = &m.work;
            for c in cands {
                let applicable = match c.format {
                    Format::Ell => fill_ok(w.ell_slots, w.nnz),
                    Format::Dia => fill_ok(w.dia_slots, w.nnz),
                    _ => true,
                };
                let t = c.threads.unwrap_or(DEFAULT_THREADS);
                let rows_items = match KernelKind::of(c) {
                    KernelKind::CsrVector { lanes } => w.n * u64::from(lanes),
                    KernelKind::CooAtomic | KernelKind::CooSegment => w.nnz,
                    _ => w.n,
                };
                let grid = c.grid.unwrap_or(GridPolicy::Cover);
                let blocks = grid.blocks(rows_items, t, &dev);
                // The profiler leaves out a wave launch equal to the cover launch.
                if grid == GridPolicy::Wave
                    && blocks == GridPolicy::Cover.blocks(rows_items, t, &dev)
                {
                    continue;
                }
                let mut r = SpmvRecord {
                    matrix: m.id.clone(),
                    launch: SpmvLaunch {
                        format: c.format,
                        kernel: c.kernel,
                        threads: c.threads,
                        blocks: Some(blocks as u32),
                        coo_blocks: None,
                        grid: c.grid,
                    },
                    status: Status::Ok,
                    timing: None,
                    replayed: false,
                    l2_flushed: false,
                };
                if applicable {
                    let ms = time(c, w) * (1.0 + noise * rng.normal());
                    r.timing = Some(timing(ms));
                } else {
                    r.status = Status::Skipped("padding over the fill limit".into());
                    r.launch.blocks = None;
                }
                p.spmv.push(r);
            }
            // cuSPARSE: two algorithms near the scalar kernel's time.
            let scalar = cands
                .iter()
                .find(|c| c.kernel == SpmvImpl::Kernel(SpmvKernel::CsrScalar))
                .map_or(0.01, |c| time(c, w));
            for (alg, f) in [(CusparseAlg::CsrAlg1, 0.9), (CusparseAlg::CsrAlg2, 1.1)] {
                p.spmv.push(SpmvRecord {
                    matrix: m.id.clone(),
                    launch: SpmvLaunch {
                        format: Format::Csr,
                        kernel: SpmvImpl::Cusparse(alg),
                        threads: None,
                        blocks: None,
                        coo_blocks: None,
                        grid: None,
                    },
                    status: Status::Ok,
                    timing: Some(timing(scalar * f)),
                    replayed: false,
                    l2_flushed: false,
                });
            }
            for (format, slots, ok) in [
                (Format::Ell, w.ell_slots, fill_ok(w.ell_slots, w.nnz)),
                (Format::Dia, w.dia_slots, fill_ok(w.dia_slots, w.nnz)),
                (Format::Hyb, w.hyb_ell_slots + w.hyb_coo_nnz, true),
                (Format::Coo, w.nnz, true),
            ] {
                let host = 0.02 + 3e-6 * slots as f64 + 1e-6 * w.n as f64;
                let up = 0.01 + 1e-6 * slots as f64;
                let e = 1.0 + noise * rng.normal();
                p.conversions.push(ConversionRecord {
                    matrix: m.id.clone(),
                    format,
                    status: if ok {
                        Status::Ok
                    } else {
                        Status::Skipped("padding".into())
                    },
                    host_ms: host * e,
                    upload_ms: up * e,
                    device_ms: None,
                    device_bytes: 12 * slots,
                });
            }
            p.matrices.push(m);
        }
    }
    p
}

/// The standard synthetic profile: [`truths`] with 1% noise.
pub(crate) fn profile(seed: u64) -> Profile {
    let t = truths();
    let cands: Vec<SpmvCandidate> = t.iter().map(|(c, _)| *c).collect();
    let time = move |c: &SpmvCandidate, w: &SpmvWork| {
        let k = t
            .iter()
            .find(|(tc, _)| tc == c)
            .map(|(_, k)| *k)
            .expect("candidate with a truth");
        linear_time(c, w, &k)
    };
    profile_with(&time, &cands, 0.01, seed)
}

/// A more physical truth than any of the model's linear forms: per candidate, the launch cost
/// plus the larger of a bandwidth time and a latency time. The bandwidth drops in proportion
/// to the threads in flight below half the resident threads (Little's law) and triples for the
/// L2-resident share, mixed harmonically, with a sharper step at 0.7 times the L2 size than
/// any the model offers; the latency time is the busiest thread's loop trips.
pub(crate) fn physical_time(c: &SpmvCandidate, w: &SpmvWork) -> f64 {
    use crate::spmv::{depth, working_set_bytes};
    let dev = device();
    let (n, nnz) = (w.n as f64, w.nnz as f64);
    let kind = KernelKind::of(c);
    let t = c.threads.unwrap_or(DEFAULT_THREADS);
    let (bytes, items) = match kind {
        KernelKind::CsrScalar => (
            12.0 * n + 12.0 * nnz + 32.0 * w.x_lines as f64 + 2.0 * w.scalar_warp_slots as f64,
            w.n,
        ),
        KernelKind::CsrVector { lanes } => {
            let k = crate::work::VECTOR_LANES
                .iter()
                .position(|&l| l == lanes)
                .unwrap_or(0);
            (
                12.0 * n
                    + 12.0 * nnz
                    + 32.0 * w.x_lines as f64
                    + 4.0 * f64::from(lanes) * w.vector_steps[k] as f64,
                w.n * u64::from(lanes),
            )
        }
        KernelKind::Ell => (
            8.0 * n + 12.0 * w.ell_slots as f64 + 32.0 * w.x_lines as f64,
            w.n,
        ),
        KernelKind::Dia => (8.0 * n + 8.0 * w.dia_slots as f64 + 16.0 * nnz, w.n),
        KernelKind::Hyb => (
            8.0 * n
                + 12.0 * w.hyb_ell_slots as f64
                + 24.0 * w.hyb_coo_nnz as f64
                + 32.0 * w.x_lines as f64,
            w.n,
        ),
        _ => (8.0 * n + 20.0 * nnz + 32.0 * w.x_lines as f64, w.nnz),
    };
    let blocks = c.grid.unwrap_or(GridPolicy::Cover).blocks(items, t, &dev);
    let resident = f64::from(dev.sm_count * dev.max_threads_per_sm);
    // Threads past the last item exit at once: only those with work keep loads in flight.
    let active = (blocks * u64::from(t)).min(items.max(1)) as f64;
    let fill = (active / (0.5 * resident)).min(1.0);
    let b = working_set_bytes(c.format, w);
    let l2 = dev.l2_bytes as f64;
    let s = 1.0 / (1.0 + (b / (0.7 * l2)).powi(8));
    let bw = 1e6 * fill * (s * 3.0 + (1.0 - s)); // bytes per ms
    let lat = 2e-3 * depth(c, w, &dev);
    let launches = if kind == KernelKind::Hyb && w.hyb_coo_nnz > 0 {
        2.0
    } else {
        1.0
    };
    3e-3 * launches + (bytes / bw).max(lat)
}

/// Every candidate of the synthetic profiles at several thread counts and both grids.
pub(crate) fn many_candidates() -> Vec<SpmvCandidate> {
    let mut v = Vec::new();
    for t in [64, 256, 1024] {
        for g in [GridPolicy::Cover, GridPolicy::Wave] {
            for k in [
                SpmvKernel::CsrScalar,
                SpmvKernel::CsrVector(2),
                SpmvKernel::CsrVector(8),
                SpmvKernel::CsrVector(32),
                SpmvKernel::Ell,
                SpmvKernel::Dia,
                SpmvKernel::CooSegment,
            ] {
                v.push(cand(k, t, g));
            }
            v.push(hyb(t, g));
        }
    }
    v
}
