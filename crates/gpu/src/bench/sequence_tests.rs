//! The sweep without a GPU: a dry-run device side that uploads nothing, prepares nothing and
//! times nothing, so that the sequence of records and conversions the benchmark produces (the
//! profiler and `autopcg bench spmv --json` read it) is pinned on the CPU.
use std::fmt::Write as _;

use autopcg_catalog::{SpmvCandidate, SpmvImpl, SpmvKernel, SpmvShape};
use autopcg_sparse::{CsrMatrix, PaddingLimits};

use super::convert::DeviceConversions;
use super::matrix::HostMatrix;
use super::sweep::{sweep, DeviceSide, Run, Swept};
use super::{GridPolicy, RecordStatus, SpmvBenchOptions, SpmvRecord};
use crate::{DeviceProps, Format, GpuError};

/// A device side that only records what it was asked.
struct DryRun {
    props: DeviceProps,
    /// The format whose upload fails.
    fail_upload: Option<Format>,
    /// The kernel whose preparation fails.
    fail_prepare: Option<SpmvKernel>,
    /// What the device conversions report.
    conversions: DeviceConversions,
    /// The calls made, in order.
    log: Vec<String>,
}

impl DryRun {
    fn new(props: DeviceProps) -> Self {
        DryRun {
            props,
            fail_upload: None,
            fail_prepare: None,
            conversions: DeviceConversions {
                ell: Ok(Some(0.5)),
                dia: Ok(None),
                hyb: Err("out of memory".into()),
            },
            log: Vec::new(),
        }
    }
}

impl DeviceSide for DryRun {
    /// The format on the "device" and the shape its launches are computed for.
    type Matrix = Format;

    fn upload(&mut self, host: &HostMatrix<'_>) -> Result<Format, GpuError> {
        self.log.push(format!("upload {}", host.format()));
        if self.fail_upload == Some(host.format()) {
            return Err(GpuError::InvalidInput {
                what: "dry run".into(),
                reason: "no memory".into(),
            });
        }
        Ok(host.format())
    }

    fn device_bytes(&self, _: &Format) -> u64 {
        64
    }

    fn max_threads(&mut self, kernel: SpmvKernel) -> Result<u32, GpuError> {
        // The merge-path kernel is compiled for at most 512 threads.
        Ok(if kernel == SpmvKernel::CsrMerge {
            512
        } else {
            1024
        })
    }

    fn convert_on_device(&mut self, csr: &Format) -> Result<DeviceConversions, GpuError> {
        assert_eq!(*csr, Format::Csr);
        self.log.push("convert on device".into());
        Ok(self.conversions.clone())
    }

    fn prepare(&mut self, m: &mut Format, imp: SpmvImpl) -> Result<(), String> {
        self.log.push(format!("prepare {m} {imp}"));
        match imp {
            SpmvImpl::Kernel(k) if Some(k) == self.fail_prepare => Err(format!("preparing {k}")),
            _ => Ok(()),
        }
    }

    fn measure(&mut self, m: &Format, rec: SpmvRecord, run: &Run) -> Result<SpmvRecord, GpuError> {
        assert_eq!(rec.launch.format, *m, "{rec:?} measured on {m}");
        match run {
            Run::Own(method) => {
                assert_eq!(method.format(), *m);
                assert_eq!(method.implementation(), rec.launch.kernel);
                let launches = method.launches();
                assert_eq!(Some(launches[0].1.threads), rec.launch.threads);
                assert_eq!(Some(launches[0].1.blocks), rec.launch.blocks);
                assert_eq!(launches.get(1).map(|l| l.1.blocks), rec.launch.coo_blocks);
                method.check("A", &self.props).unwrap();
            }
            Run::Cusparse(alg) => {
                assert_eq!(SpmvImpl::Cusparse(*alg), rec.launch.kernel);
                assert_eq!(
                    (rec.launch.threads, rec.launch.blocks, rec.launch.grid),
                    (None, None, None)
                );
            }
        }
        self.log.push(format!("measure {}", line(&rec)));
        let mut rec = rec;
        rec.median_ms = Some(1.0);
        Ok(rec)
    }
}

/// One record in a line: format, kernel, threads, blocks (ELL + COO for HYB), grid, status,
/// bytes of the format's traffic.
fn line(r: &SpmvRecord) -> String {
    let o = |v: Option<u32>| v.map_or_else(|| "-".to_string(), |v| v.to_string());
    let mut blocks = o(r.launch.blocks);
    if let Some(c) = r.launch.coo_blocks {
        let _ = write!(blocks, "+{c}");
    }
    let grid = r
        .launch
        .grid
        .map_or_else(|| "-".to_string(), |g| g.to_string());
    let status = match &r.status {
        RecordStatus::Ok => "ok".to_string(),
        RecordStatus::Skipped(w) => format!("skipped: {w}"),
        RecordStatus::Failed(w) => format!("FAILED: {w}"),
    };
    format!(
        "{} {} t{} b{blocks} {grid} {} | {status}",
        r.launch.format,
        r.launch.kernel,
        o(r.launch.threads),
        r.bytes_format
    )
}

fn lines(s: &Swept) -> String {
    s.records.iter().map(|r| line(r) + "\n").collect()
}

/// A small device: one SM of 256 threads, so that one resident wave is fewer blocks than one
/// thread per item even on a small matrix.
fn tiny_props() -> DeviceProps {
    DeviceProps {
        sm_count: 1,
        max_threads_per_sm: 256,
        ..crate::testing::hopper_like_props()
    }
}

/// Tridiagonal, `n` rows.
fn tridiagonal(n: usize) -> CsrMatrix {
    let (mut r, mut c, mut v) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..n {
        for j in i.saturating_sub(1)..(i + 2).min(n) {
            r.push(i as u32);
            c.push(j as u32);
            v.push(if i == j { 2.0 } else { -1.0 });
        }
    }
    CsrMatrix::from_triplets(n, n, &r, &c, &v).unwrap()
}

/// Every format converts; thread counts that are too many for a kernel, not whole warps, and
/// policies that coincide; cuSPARSE after CSR's own kernels.
#[test]
fn record_sequence_of_a_small_tridiagonal_matrix() {
    let a = tridiagonal(12);
    let opts = SpmvBenchOptions {
        threads: vec![48, 128, 1024],
        grids: vec![GridPolicy::Wave, GridPolicy::Cover],
        ..SpmvBenchOptions::quick()
    };
    let props = tiny_props();
    let mut side = DryRun::new(props.clone());
    let s = sweep(&mut side, &a, &opts, &props).unwrap();
    // n = 12, nnz = 34: CSR moves 12*34 + 20*12 = 648 bytes, ELL (width 3) 12*3*12 + 16*12 =
    // 624, DIA (3 diagonals) 8*3*12 + 4*3 + 192 = 492, COO 16*34 + 32*12 = 928, HYB (width 3,
    // no COO part) 624.
    let want = "\
csr spmv_csr_scalar t48 b1 wave 648 | ok
csr spmv_csr_scalar t128 b1 wave 648 | ok
csr spmv_csr_scalar t1024 b1 wave 648 | ok
csr spmv_csr_vector_2 t48 b- wave 648 | skipped: 48 threads per block is not a multiple of 32
csr spmv_csr_vector_2 t128 b1 wave 648 | ok
csr spmv_csr_vector_2 t1024 b1 wave 648 | ok
csr spmv_csr_vector_4 t48 b- wave 648 | skipped: 48 threads per block is not a multiple of 32
csr spmv_csr_vector_4 t128 b1 wave 648 | ok
csr spmv_csr_vector_4 t1024 b1 wave 648 | ok
csr spmv_csr_vector_8 t48 b- wave 648 | skipped: 48 threads per block is not a multiple of 32
csr spmv_csr_vector_8 t128 b1 wave 648 | ok
csr spmv_csr_vector_8 t1024 b1 wave 648 | ok
csr spmv_csr_vector_16 t48 b- wave 648 | skipped: 48 threads per block is not a multiple of 32
csr spmv_csr_vector_16 t128 b2 wave 648 | ok
csr spmv_csr_vector_16 t1024 b1 wave 648 | ok
csr spmv_csr_vector_32 t48 b- wave 648 | skipped: 48 threads per block is not a multiple of 32
csr spmv_csr_vector_32 t128 b2 wave 648 | ok
csr spmv_csr_vector_32 t128 b3 cover 648 | ok
csr spmv_csr_vector_32 t1024 b1 wave 648 | ok
csr spmv_csr_merge t48 b- wave 648 | skipped: 48 threads per block is not a multiple of 32
csr spmv_csr_merge t128 b1 wave 648 | ok
csr spmv_csr_merge t1024 b- wave 648 | skipped: 1024 threads per block; spmv_csr_merge as compiled allows 512
csr cusparse_spmv_alg_default t- b- - 648 | ok
csr cusparse_spmv_csr_alg1 t- b- - 648 | ok
csr cusparse_spmv_csr_alg2 t- b- - 648 | ok
ell spmv_ell t48 b1 wave 624 | ok
ell spmv_ell t128 b1 wave 624 | ok
ell spmv_ell t1024 b1 wave 624 | ok
dia spmv_dia t48 b1 wave 492 | ok
dia spmv_dia t128 b1 wave 492 | ok
dia spmv_dia t1024 b1 wave 492 | ok
coo spmv_coo_atomic t48 b1 wave 928 | ok
coo spmv_coo_atomic t128 b1 wave 928 | ok
coo spmv_coo_atomic t1024 b1 wave 928 | ok
coo spmv_coo_segment t48 b- wave 928 | skipped: 48 threads per block is not a multiple of 32
coo spmv_coo_segment t128 b1 wave 928 | ok
coo spmv_coo_segment t1024 b1 wave 928 | ok
hyb spmv_ell+spmv_coo_atomic t48 b1+1 wave 624 | ok
hyb spmv_ell+spmv_coo_atomic t128 b1+1 wave 624 | ok
hyb spmv_ell+spmv_coo_atomic t1024 b1+1 wave 624 | ok
";
    assert_eq!(lines(&s), want, "got:\n{}", lines(&s));
    // Every runnable candidate was measured, each once, after its format was uploaded and its
    // implementation prepared; the device conversions ran after the CSR upload, before any
    // CSR kernel.
    let measured = s.records.iter().filter(|r| r.median_ms.is_some()).count();
    let log = &side.log;
    assert_eq!(
        log.iter().filter(|l| l.starts_with("measure")).count(),
        measured
    );
    assert_eq!(log[0], "upload csr");
    assert_eq!(log[1], "convert on device");
    assert_eq!(log[2], "prepare csr spmv_csr_scalar");
    let uploads: Vec<&str> = log
        .iter()
        .filter_map(|l| l.strip_prefix("upload "))
        .collect();
    assert_eq!(uploads, ["csr", "ell", "dia", "coo", "hyb"]);
    // Conversions: one per format, in order; the device conversions on the padded formats.
    let conv: Vec<(Format, bool, Option<f64>, Option<&str>)> = s
        .conversions
        .iter()
        .map(|c| {
            (
                c.format,
                c.status.is_ok(),
                c.device_ms,
                c.device_error.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        conv,
        [
            (Format::Csr, true, None, None),
            (Format::Ell, true, Some(0.5), None),
            (Format::Dia, true, None, None),
            (Format::Coo, true, None, None),
            (Format::Hyb, true, None, Some("out of memory")),
        ]
    );
    assert!(s.conversions.iter().all(|c| c.device_bytes == 64));
}

/// A format the host refuses, a failed upload, a failed preparation, HYB with a COO part, and
/// no cuSPARSE.
#[test]
fn record_sequence_with_refusals_and_failures() {
    // Rows of 1 entry and one full row: ELL and DIA pad too much; HYB keeps width 1 in ELL
    // and the long row's other 5 entries in COO.
    let n = 6u32;
    let (mut r, mut c) = ((0..n).collect::<Vec<u32>>(), (0..n).collect::<Vec<u32>>());
    for j in 0..n - 1 {
        r.push(n - 1);
        c.push(j);
    }
    let v = vec![1.0; r.len()];
    let a = CsrMatrix::from_triplets(6, 6, &r, &c, &v).unwrap();
    let opts = SpmvBenchOptions {
        threads: vec![64],
        grids: vec![GridPolicy::Cover],
        cusparse: false,
        padding: PaddingLimits::default(),
        ..SpmvBenchOptions::quick()
    };
    let props = tiny_props();
    let mut side = DryRun::new(props.clone());
    side.fail_upload = Some(Format::Coo);
    side.fail_prepare = Some(SpmvKernel::CsrMerge);
    let s = sweep(&mut side, &a, &opts, &props).unwrap();
    let ell_refusal = match &s.conversions[1].status {
        RecordStatus::Skipped(w) => w.clone(),
        other => panic!("ELL should be refused, got {other:?}"),
    };
    let dia_refusal = match &s.conversions[2].status {
        RecordStatus::Skipped(w) => w.clone(),
        other => panic!("DIA should be refused, got {other:?}"),
    };
    // n = 6, nnz = 11: CSR 12*11 + 20*6 = 252; refused ELL and DIA carry the traffic of width
    // 0 (96 and 96); COO 16*11 + 32*6 = 368; HYB width 1, 5 COO entries in 1 row:
    // 12*6 + 16*5 + 16 + 96 = 264.
    let want = format!(
        "\
csr spmv_csr_scalar t64 b1 cover 252 | ok
csr spmv_csr_vector_2 t64 b1 cover 252 | ok
csr spmv_csr_vector_4 t64 b1 cover 252 | ok
csr spmv_csr_vector_8 t64 b1 cover 252 | ok
csr spmv_csr_vector_16 t64 b2 cover 252 | ok
csr spmv_csr_vector_32 t64 b3 cover 252 | ok
csr spmv_csr_merge t64 b1 cover 252 | FAILED: preparing spmv_csr_merge
ell spmv_ell t- b- - 96 | skipped: {ell_refusal}
dia spmv_dia t- b- - 96 | skipped: {dia_refusal}
coo spmv_coo_atomic t- b- - 368 | FAILED: upload: invalid dry run: no memory
coo spmv_coo_segment t- b- - 368 | FAILED: upload: invalid dry run: no memory
hyb spmv_ell+spmv_coo_atomic t64 b1+1 cover 264 | ok
hyb spmv_ell+spmv_coo_segment t64 b1+1 cover 264 | ok
"
    );
    assert_eq!(lines(&s), want, "got:\n{}", lines(&s));
    assert!(ell_refusal.contains("refused") || ell_refusal.contains("fill"));
    // The COO conversion failed at the upload; the padded formats the host refused are
    // refused on the device too (no time, no error) or carry the device's failure.
    assert!(
        matches!(&s.conversions[3].status, RecordStatus::Failed(w) if w.starts_with("upload: "))
    );
    assert_eq!(s.conversions[1].device_ms, Some(0.5));
    assert_eq!(
        s.conversions[4].device_error.as_deref(),
        Some("out of memory")
    );
}

/// Without the CSR matrix on the device, CSR's candidates (cuSPARSE's too) fail with the
/// upload's error and the padded formats say there was nothing to build them from.
#[test]
fn a_failed_csr_upload_fails_every_csr_candidate() {
    let a = tridiagonal(5);
    let opts = SpmvBenchOptions::quick();
    let props = tiny_props();
    let mut side = DryRun::new(props.clone());
    side.fail_upload = Some(Format::Csr);
    let s = sweep(&mut side, &a, &opts, &props).unwrap();
    let csr: Vec<&SpmvRecord> = s
        .records
        .iter()
        .filter(|r| r.launch.format == Format::Csr)
        .collect();
    assert_eq!(csr.len(), 10);
    assert!(csr.iter().all(|r| r.launch.threads.is_none()
        && matches!(&r.status, RecordStatus::Failed(w) if w.starts_with("upload: "))));
    assert_eq!(csr.iter().filter(|r| r.is_cusparse()).count(), 3);
    assert!(!side.log.iter().any(|l| l == "convert on device"));
    for c in &s.conversions[1..] {
        let want = c
            .format
            .is_padded()
            .then_some("the CSR matrix is not on the device");
        assert_eq!(c.device_error.as_deref(), want, "{c:?}");
    }
    // The other formats still ran.
    assert!(s
        .records
        .iter()
        .any(|r| r.launch.format == Format::Ell && r.median_ms.is_some()));
}

/// The launches the benchmark measures are those a plan of the same candidate makes
/// ([`SpmvCandidate::method_for`]): the profiler's records and the model's predictions speak
/// of the same launches.
#[test]
fn measured_launches_are_the_candidates_methods() {
    let a = tridiagonal(3000);
    let props = crate::testing::hopper_like_props();
    let opts = SpmvBenchOptions {
        threads: vec![32, 256, 1024],
        ..SpmvBenchOptions::default()
    };
    for format in Format::ALL {
        let host = HostMatrix::convert(format, &a, &opts.padding).unwrap();
        let shape = SpmvShape {
            nrows: a.nrows() as u64,
            nnz: a.nnz() as u64,
            hyb_coo_nnz: host.coo_part_nnz() as u64,
        };
        for imp in host.implementations(false) {
            let cands =
                super::sweep::plan_implementation(imp, shape, 1, &opts, &props, &mut |_| Ok(1024))
                    .unwrap();
            assert!(!cands.is_empty());
            for c in cands {
                let Some(Run::Own(method)) = c.run else {
                    continue;
                };
                let (t, g) = (
                    c.record.launch.threads.unwrap(),
                    c.record.launch.grid.unwrap(),
                );
                let cand = SpmvCandidate::own(imp, t, g);
                assert_eq!(cand.method_for(shape, &props), Some(method), "{cand}");
            }
        }
    }
}
