//! GPU tests of convert.cu: the row-length histogram, COO row counts, the exclusive scan and
//! COO-to-CSR row pointers, against CPU references; and the ELL, DIA and HYB conversions on the
//! device, against the host conversions bit for bit. Without a CUDA device the runner reports each GPU test as ignored
//! (with AUTOPCG_REQUIRE_GPU=1 it fails instead); see autopcg_gpu::testing.
mod common;

use autopcg_gpu::kernels::convert::{
    coo_row_counts, coo_row_pointers, csr_to_dia, csr_to_ell, csr_to_hyb, exclusive_scan,
    max_row_length, one_third_split, row_length_histogram, row_length_histogram_from,
    ScanWorkspace, HIST_BINS,
};
use autopcg_gpu::{DeviceCoo, DeviceCsr, DeviceEll, DeviceHyb, GpuDevice, GpuError, LaunchConfig};
use autopcg_sparse::{CsrMatrix, DiaMatrix, EllMatrix, HybMatrix, PaddingLimits, SparseError};
use common::{random_csr, rng, to_coo};
use rand::Rng;

/// A matrix whose rows have lengths 0..12 and, every 97th row, 1500..1600 (past the last bin).
fn skewed(nrows: usize) -> CsrMatrix {
    let mut r = rng(41);
    let ncols = 1600;
    let (mut rows, mut cols, mut vals) = (vec![], vec![], vec![]);
    for i in 0..nrows {
        let len = if i % 97 == 0 {
            r.random_range(1500..1600)
        } else {
            r.random_range(0..12)
        };
        for j in 0..len {
            rows.push(i as u32);
            cols.push(j as u32);
            vals.push(1.0);
        }
    }
    CsrMatrix::from_triplets(nrows, ncols, &rows, &cols, &vals).unwrap()
}

fn row_length_histogram_matches_cpu(dev: GpuDevice) {
    for a in [skewed(1), skewed(3000), random_csr(42, 500, 300)] {
        let mut want = vec![0u32; HIST_BINS];
        for i in 0..a.nrows() {
            want[a.row_len(i).min(HIST_BINS - 1)] += 1;
        }
        let d = DeviceCsr::upload(&dev, &a).unwrap();
        for cfg in [
            LaunchConfig::grid_stride(a.nrows() as u64, 256, dev.props()),
            LaunchConfig::new(32, 1),
            LaunchConfig::new(48, 3),
            LaunchConfig::new(1024, 2),
        ] {
            let mut hist = dev.upload(&vec![7u32; HIST_BINS]).unwrap();
            row_length_histogram(&dev, &d, cfg, &mut hist).unwrap();
            assert_eq!(
                dev.download(&hist).unwrap(),
                want,
                "{} rows, {cfg}",
                a.nrows()
            );
        }
    }
}

fn row_length_histogram_from_a_base_matches_cpu(dev: GpuDevice) {
    let a = skewed(3000);
    let d = DeviceCsr::upload(&dev, &a).unwrap();
    for base in [0u32, 5, 1023, 1500] {
        let mut want = vec![0u32; HIST_BINS];
        for i in 0..a.nrows() {
            let l = a.row_len(i);
            if l >= base as usize {
                want[(l - base as usize).min(HIST_BINS - 1)] += 1;
            }
        }
        let mut hist = dev.upload(&vec![3u32; HIST_BINS]).unwrap();
        let cfg = LaunchConfig::new(128, 5);
        row_length_histogram_from(&dev, &d, base, cfg, &mut hist).unwrap();
        assert_eq!(dev.download(&hist).unwrap(), want, "base {base}");
    }
}

fn scan_matches_cpu(dev: GpuDevice) {
    let mut r = rng(43);
    let mut ws = ScanWorkspace::new(&dev, 4096).unwrap();
    for n in [
        0usize, 1, 5, 255, 256, 257, 2047, 2048, 2049, 100_000, 1_000_003,
    ] {
        let input: Vec<u32> = (0..n).map(|_| r.random_range(0..10)).collect();
        let mut want = Vec::with_capacity(n + 1);
        let mut acc = 0u32;
        for &v in &input {
            want.push(acc);
            acc += v;
        }
        want.push(acc);
        let d = dev.upload(&input).unwrap();
        for threads in [32, 256, 1024] {
            let mut out = dev.upload(&vec![u32::MAX; n + 1]).unwrap();
            exclusive_scan(&dev, threads, &d, &mut out, &mut ws).unwrap();
            assert_eq!(dev.download(&out).unwrap(), want, "n={n} threads={threads}");
        }
    }
    let d = dev.upload(&[1u32; 10]).unwrap();
    let mut short = dev.alloc_zeros::<u32>(10).unwrap();
    let e = exclusive_scan(&dev, 256, &d, &mut short, &mut ws);
    assert!(matches!(e, Err(GpuError::Launch { .. })), "{e:?}");
    let mut out = dev.alloc_zeros::<u32>(11).unwrap();
    let e = exclusive_scan(&dev, 48, &d, &mut out, &mut ws);
    assert!(matches!(e, Err(GpuError::Launch { .. })), "{e:?}");
    let big = dev.upload(&vec![1u32; 100_000]).unwrap();
    let mut out = dev.alloc_zeros::<u32>(100_001).unwrap();
    let mut tiny = ScanWorkspace::new(&dev, 2).unwrap();
    let e = exclusive_scan(&dev, 32, &big, &mut out, &mut tiny);
    assert!(matches!(e, Err(GpuError::Launch { .. })), "{e:?}");
}

fn coo_row_counts_and_row_pointers_match_csr(dev: GpuDevice) {
    for a in [
        random_csr(44, 700, 700),
        skewed(500),
        CsrMatrix::from_triplets(4, 4, &[], &[], &[]).unwrap(),
    ] {
        let (r, c, v) = to_coo(&a);
        let coo = DeviceCoo::from_parts(&dev, a.nrows(), a.ncols(), &r, &c, &v).unwrap();
        let want: Vec<u32> = (0..a.nrows()).map(|i| a.row_len(i) as u32).collect();
        for cfg in [LaunchConfig::new(64, 1), LaunchConfig::new(256, 7)] {
            let mut counts = dev.upload(&vec![9u32; a.nrows()]).unwrap();
            coo_row_counts(&dev, &coo, cfg, &mut counts).unwrap();
            assert_eq!(dev.download(&counts).unwrap(), want);
        }
        let ptr = coo_row_pointers(&dev, &coo).unwrap();
        assert_eq!(dev.download(&ptr).unwrap(), a.indptr().to_vec());
    }
}

/// Matrices for the device conversions: random rows with empty ones and rows longer than a
/// warp (square and rectangular), a power-law matrix, stencils, one very long row, a third of
/// the rows longer than the first histogram pass reaches (once and twice over), sizes not
/// multiples of the block, n = 1 and matrices without entries.
fn conversion_matrices() -> Vec<(String, CsrMatrix)> {
    use autopcg_sparse::families::random_powerlaw_spd;
    let mut v = vec![
        ("random 700x700".to_string(), random_csr(51, 700, 700)),
        ("random 300x500".to_string(), random_csr(52, 300, 500)),
        ("random 257x40".to_string(), random_csr(53, 257, 40)),
        ("skewed 1000".to_string(), skewed(1000)),
        (
            "power-law 3001".to_string(),
            random_powerlaw_spd(3001, 8.0, 1.2, 54).unwrap(),
        ),
        ("poisson 23x23".to_string(), common::poisson2d(23)),
    ];
    v.extend(common::tiny_matrices(-0.0));
    v.push((
        "0x0".to_string(),
        CsrMatrix::from_triplets(0, 0, &[], &[], &[]).unwrap(),
    ));
    // One dense row of 1000 entries among short ones.
    v.push(("one long row".to_string(), common::one_long_row()));
    // A third of the rows 1100+ (then 2100) long: the HYB split needs a second (third)
    // histogram pass.
    for long in [1100usize, 2100] {
        let n = 31;
        let (mut r, mut c, mut x) = (vec![], vec![], vec![]);
        for i in 0..n {
            let len = if i % 3 == 0 { long + i } else { 3 };
            for j in 0..len {
                r.push(i as u32);
                c.push(j as u32);
                x.push((i * 31 + j) as f64 * 0.25 - 7.0);
            }
        }
        v.push((
            format!("a third {long}+ long"),
            CsrMatrix::from_triplets(n, long + 40, &r, &c, &x).unwrap(),
        ));
    }
    v
}

/// Padding limits that accept anything, for the array comparisons.
fn unlimited() -> PaddingLimits {
    PaddingLimits {
        max_fill_ratio: f64::INFINITY,
        max_bytes: u64::MAX,
    }
}

fn bits(v: &[f64]) -> Vec<u64> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// The device conversion's outcome equals the host's: both refused with the same error, or
/// both built and (checked by `same`) equal.
fn same_outcome<H, D>(
    what: &str,
    host: Result<H, SparseError>,
    device: Result<D, GpuError>,
    same: impl FnOnce(&H, &D),
) {
    match (host, device) {
        (Ok(h), Ok(d)) => same(&h, &d),
        (Err(he), Err(GpuError::Sparse(de))) => {
            assert_eq!(he.to_string(), de.to_string(), "{what}: refusals differ")
        }
        (Ok(_), Err(e)) => panic!("{what}: the host converts, the device fails: {e}"),
        (Err(e), Ok(_)) => panic!("{what}: the host refuses ({e}), the device converts"),
        (Err(he), Err(de)) => panic!("{what}: host {he}, device another error {de}"),
    }
}

fn check_ell(dev: &GpuDevice, what: &str, h: &EllMatrix, d: &DeviceEll) {
    assert_eq!(
        (d.nrows(), d.ncols(), d.width()),
        (h.nrows(), h.ncols(), h.width()),
        "{what}: shape"
    );
    let (cols, vals) = d.download(dev).unwrap();
    assert_eq!(cols, h.cols(), "{what}: ELL columns");
    assert_eq!(bits(&vals), bits(h.vals()), "{what}: ELL values");
}

fn check_hyb(dev: &GpuDevice, what: &str, h: &HybMatrix, d: &DeviceHyb) {
    check_ell(dev, &format!("{what} (ELL part)"), h.ell(), &d.ell);
    let (rows, cols, vals) = d.coo.download(dev).unwrap();
    assert_eq!(
        (d.coo.nrows(), d.coo.ncols(), d.coo.nnz()),
        (h.nrows(), h.ncols(), h.coo().nnz()),
        "{what}: COO shape"
    );
    assert_eq!(rows, h.coo().rows(), "{what}: COO rows");
    assert_eq!(cols, h.coo().cols(), "{what}: COO columns");
    assert_eq!(bits(&vals), bits(h.coo().vals()), "{what}: COO values");
}

fn device_conversions_equal_the_host_conversions(dev: GpuDevice) {
    for (label, a) in conversion_matrices() {
        let d = DeviceCsr::upload(&dev, &a).unwrap();
        for (lname, limits) in [("unlimited", unlimited()), ("default", Default::default())] {
            let what = format!("ELL of {label}, {lname} limits");
            same_outcome(
                &what,
                EllMatrix::from_csr(&a, &limits),
                csr_to_ell(&dev, &d, &limits),
                |h, g| check_ell(&dev, &what, h, g),
            );
            let what = format!("DIA of {label}, {lname} limits");
            same_outcome(
                &what,
                DiaMatrix::from_csr(&a, &limits),
                csr_to_dia(&dev, &d, &limits),
                |h, g| {
                    assert_eq!(
                        (g.nrows(), g.ncols(), g.ndiag()),
                        (h.nrows(), h.ncols(), h.ndiag()),
                        "{what}: shape"
                    );
                    let (offs, data) = g.download(&dev).unwrap();
                    assert_eq!(offs, h.offsets(), "{what}: offsets");
                    assert_eq!(bits(&data), bits(h.data()), "{what}: band");
                },
            );
            for split in [None, Some(0), Some(1), Some(3), Some(40)] {
                let what = format!("HYB {split:?} of {label}, {lname} limits");
                same_outcome(
                    &what,
                    HybMatrix::from_csr(&a, split, &limits),
                    csr_to_hyb(&dev, &d, split, &limits),
                    |h, g| check_hyb(&dev, &what, h, g),
                );
            }
        }
        assert_eq!(
            one_third_split(&dev, &d).unwrap(),
            autopcg_sparse::hyb::one_third_split(&a),
            "one-third split of {label}"
        );
        let longest = (0..a.nrows()).map(|i| a.row_len(i)).max().unwrap_or(0);
        assert_eq!(max_row_length(&dev, &d).unwrap(), longest, "{label}");
    }
}

/// The power-law matrix whose padded formats are refused.
fn refused_matrix() -> CsrMatrix {
    autopcg_sparse::families::random_powerlaw_spd(2000, 6.0, 1.1, 55).unwrap()
}

/// The limits under which even HYB is refused.
fn tight() -> PaddingLimits {
    PaddingLimits {
        max_fill_ratio: 3.0,
        max_bytes: 1000,
    }
}

/// CPU check of the GPU tests' premises (runs everywhere): the long-row matrices need two and
/// three histogram passes for the HYB split, and the refusals happen on the host.
fn conversion_test_matrices_do_what_they_are_for() {
    use autopcg_sparse::hyb::one_third_split as host_split;
    let mats = conversion_matrices();
    let get = |l: &str| &mats.iter().find(|(n, _)| n == l).unwrap().1;
    let h1 = host_split(get("a third 1100+ long"));
    assert!((HIST_BINS - 1..2 * (HIST_BINS - 1)).contains(&h1), "{h1}");
    let h2 = host_split(get("a third 2100+ long"));
    assert!(h2 >= 2 * (HIST_BINS - 1), "{h2}");
    let p = get("power-law 3001");
    assert!((0..p.nrows()).map(|i| p.row_len(i)).max().unwrap() > 200);
    let a = refused_matrix();
    let lim = PaddingLimits::default();
    assert!(EllMatrix::from_csr(&a, &lim).is_err());
    assert!(DiaMatrix::from_csr(&a, &lim).is_err());
    assert!(HybMatrix::from_csr(&a, None, &lim).is_ok());
    assert!(EllMatrix::from_csr(&a, &tight()).is_err());
    assert!(DiaMatrix::from_csr(&a, &tight()).is_err());
    assert!(HybMatrix::from_csr(&a, None, &tight()).is_err());
    // DIA accepts the stencil.
    assert!(DiaMatrix::from_csr(get("poisson 23x23"), &lim).is_ok());
}

fn device_conversions_refuse_as_the_host_does(dev: GpuDevice) {
    let a = refused_matrix();
    let tight = tight();
    let d = DeviceCsr::upload(&dev, &a).unwrap();
    for limits in [PaddingLimits::default(), tight] {
        let refused = |e: Result<(), GpuError>| match e {
            Err(GpuError::Sparse(SparseError::TooMuchPadding { .. })) => {}
            other => panic!("expected a padding refusal, got {other:?}"),
        };
        // Heavy-tailed rows: ELL and DIA far beyond a fill of 3; under the byte limit of 1000
        // HYB too.
        refused(csr_to_ell(&dev, &d, &limits).map(drop));
        refused(csr_to_dia(&dev, &d, &limits).map(drop));
        if limits.max_bytes == 1000 {
            refused(csr_to_hyb(&dev, &d, None, &limits).map(drop));
        }
    }
    // The error is the host's, word for word.
    let host = EllMatrix::from_csr(&a, &PaddingLimits::default()).unwrap_err();
    match csr_to_ell(&dev, &d, &PaddingLimits::default()) {
        Err(GpuError::Sparse(e)) => assert_eq!(e.to_string(), host.to_string()),
        other => panic!("expected the host's refusal, got {other:?}"),
    }
}

autopcg_gpu::test_main! {
    cpu: [
        conversion_test_matrices_do_what_they_are_for,
    ],
    gpu: [
        row_length_histogram_matches_cpu,
        row_length_histogram_from_a_base_matches_cpu,
        scan_matches_cpu,
        coo_row_counts_and_row_pointers_match_csr,
        device_conversions_equal_the_host_conversions,
        device_conversions_refuse_as_the_host_does,
    ],
}
