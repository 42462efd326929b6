//! Tests of profile records, reading, resuming and stability.
use std::fs::{File, OpenOptions};
use std::io::Write;

use autopcg_catalog::{VectorKernel, VectorOp, VectorVariant};

use super::*;

pub(crate) fn device(name: &str) -> DeviceProps {
    DeviceProps {
        name: name.into(),
        total_mem: 150 << 30,
        l2_bytes: 60 << 20,
        driver_version: Some(13000),
        nvrtc_version: Some((13, 0)),
        ..DeviceProps::hopper_like()
    }
}

fn header(name: &str) -> Header {
    Header {
        schema: PROFILE_SCHEMA,
        device: device(name),
        quick: false,
        tool_version: "test".into(),
        started_unix_s: 0,
    }
}

fn vec_rec(n: u64) -> Record {
    Record::Vector(VectorRecord {
        kernel: VectorKernel::CgUpdate(VectorVariant::GridV2),
        op: VectorOp::CgUpdate,
        variant: VectorVariant::GridV2,
        sample: LaunchSample {
            n,
            threads: 256,
            blocks: 264,
            nb_multiple: Some(1),
            elems_per_thread: None,
            held_out: false,
            timing: Timing {
                median_ms: 0.01,
                min_ms: 0.009,
                max_ms: 0.02,
                reps: 10,
            },
        },
    })
}

#[test]
fn write_resume_and_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.jsonl");
    let mut w = ProfileWriter::open(&path, &header("GPU A")).unwrap();
    w.write(&vec_rec(1000)).unwrap();
    w.write(&vec_rec(2000)).unwrap();
    drop(w);
    // An interrupted write: half a record, no newline.
    let mut f = OpenOptions::new().append(true).open(&path).unwrap();
    f.write_all(br#"{"record":"vector","kernel":"cg_upd"#)
        .unwrap();
    drop(f);
    let mut w = ProfileWriter::open(&path, &header("GPU A")).unwrap();
    assert_eq!(w.resumed(), 2);
    assert!(w.has(&vec_rec(1000).key().unwrap()));
    assert!(!w.has(&vec_rec(3000).key().unwrap()));
    w.write(&vec_rec(3000)).unwrap();
    drop(w);
    let p = Profile::read(&path).unwrap();
    assert_eq!(p.header.unwrap().device.name, "GPU A");
    assert_eq!(p.vector.len(), 3);
    assert_eq!(p.vector[2].sample.n, 3000);
}

#[test]
fn resume_refuses_another_device_and_bad_lines_name_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.jsonl");
    let mut w = ProfileWriter::open(&path, &header("GPU A")).unwrap();
    w.write(&vec_rec(1000)).unwrap();
    drop(w);
    let e = ProfileWriter::open(&path, &header("GPU B")).err().unwrap();
    assert!(matches!(e, ModelError::WrongDevice { .. }), "{e}");

    let mut f = OpenOptions::new().append(true).open(&path).unwrap();
    f.write_all(b"{\"record\":\"nope\"}\n").unwrap();
    f.write_all(b"\n").unwrap();
    drop(f);
    // Line 1 the header, 2 the session stamp, 3 the record, 4 the bad line.
    let e = Profile::read(&path).err().unwrap().to_string();
    assert!(e.contains("p.jsonl:4:"), "{e}");
    let e = ProfileWriter::open(&path, &header("GPU A"))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains(":4:"), "{e}");
}

/// Records of two devices in one profile (the second file's header dropped when two profiles
/// were joined) are refused when read, naming both devices.
#[test]
fn records_of_another_device_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.jsonl"), dir.path().join("b.jsonl"));
    let mut w = ProfileWriter::open(&a, &header("GPU A")).unwrap();
    w.write(&vec_rec(1000)).unwrap();
    drop(w);
    let mut w = ProfileWriter::open(&b, &header("GPU B")).unwrap();
    w.write(&vec_rec(2000)).unwrap();
    drop(w);
    let text_a = std::fs::read_to_string(&a).unwrap();
    let text_b = std::fs::read_to_string(&b).unwrap();
    let joined = dir.path().join("joined.jsonl");
    let tail: String = text_b.lines().skip(1).map(|l| format!("{l}\n")).collect();
    std::fs::write(&joined, format!("{text_a}{tail}")).unwrap();
    let e = Profile::read(&joined).err().unwrap().to_string();
    assert!(e.contains("GPU B") && e.contains("GPU A"), "{e}");
    // Resuming stamps a session per open; a profile of one device reads.
    let w = ProfileWriter::open(&a, &header("GPU A")).unwrap();
    drop(w);
    assert_eq!(Profile::read(&a).unwrap().sessions, 2);
}

#[test]
fn header_must_come_first_and_schema_must_match() {
    let body = serde_json::to_string(&vec_rec(10)).unwrap();
    let e = Profile::from_reader(body.as_bytes(), Path::new("x"))
        .err()
        .unwrap();
    assert!(e.to_string().contains("start with a header"), "{e}");
    let mut h = header("GPU A");
    h.schema = PROFILE_SCHEMA + 1;
    let body = serde_json::to_string(&Record::Header(h)).unwrap();
    let e = Profile::from_reader(body.as_bytes(), Path::new("x"))
        .err()
        .unwrap();
    assert!(matches!(e, ModelError::Schema { .. }), "{e}");
}

#[test]
fn stability_counts_agreeing_medians_above_the_threshold() {
    let mk = |times: &[(u64, f64)]| {
        let mut p = Profile::default();
        p.push(Record::Header(header("GPU A"))).unwrap();
        for &(n, t) in times {
            let Record::Vector(mut v) = vec_rec(n) else {
                unreachable!()
            };
            v.sample.timing = Timing {
                median_ms: t,
                min_ms: t,
                max_ms: t,
                reps: 5,
            };
            p.push(Record::Vector(v)).unwrap();
        }
        p
    };
    let a = mk(&[(1, 0.001), (2, 1.0), (3, 2.0), (4, 3.0)]);
    let b = mk(&[(1, 0.005), (2, 1.04), (3, 2.5), (5, 3.0)]);
    let r = stability(&a, &b, 0.02, 0.05);
    assert_eq!(r.compared, 2);
    assert_eq!(r.within, 1);
    assert!((r.worst - 0.25).abs() < 1e-12);
    assert_eq!(r.by_kind, vec![("vector".to_string(), 2, 1)]);
    assert!((r.share() - 0.5).abs() < 1e-12);
}

#[test]
fn occupancy_records_are_audited() {
    let h = device("GPU A");
    let mut rec = OccupancyRecord {
        kernel: "dot_vec2".parse().unwrap(),
        threads: 256,
        regs_per_thread: 40,
        static_smem_bytes: 2048,
        dynamic_smem_bytes: 0,
        blocks_per_sm: 6,
        nb_nt: 792,
    };
    assert_eq!(rec.check(&h).unwrap().nb_nt, 792);
    rec.nb_nt = 1056;
    assert!(rec.check(&h).is_err());
    // 255 registers x 1024 threads fit no SM: no valid count.
    rec.threads = 1024;
    rec.regs_per_thread = 255;
    let e = rec.check(&h).unwrap_err().to_string();
    assert!(e.contains("registers"), "{e}");
}

#[test]
fn gz_profiles_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.jsonl");
    let mut w = ProfileWriter::open(&path, &header("GPU A")).unwrap();
    w.write(&vec_rec(5)).unwrap();
    drop(w);
    let gz = dir.path().join("p.jsonl.gz");
    let mut enc =
        flate2::write::GzEncoder::new(File::create(&gz).unwrap(), flate2::Compression::default());
    enc.write_all(&std::fs::read(&path).unwrap()).unwrap();
    enc.finish().unwrap();
    assert_eq!(Profile::read(&gz).unwrap(), Profile::read(&path).unwrap());
}

fn spmv_rec(matrix: &str, ms: f64, replayed: bool, l2_flushed: bool) -> Record {
    use autopcg_catalog::{Format, GridPolicy, SpmvImpl, SpmvKernel, SpmvLaunch};
    Record::Spmv(SpmvRecord {
        matrix: matrix.into(),
        launch: SpmvLaunch {
            format: Format::Csr,
            kernel: SpmvImpl::Kernel(SpmvKernel::CsrScalar),
            threads: Some(256),
            blocks: Some(40),
            coo_blocks: None,
            grid: Some(GridPolicy::Cover),
        },
        status: Status::Ok,
        timing: Some(Timing {
            median_ms: ms,
            min_ms: ms,
            max_ms: ms,
            reps: 5,
        }),
        replayed,
        l2_flushed,
    })
}

/// A profile resumed after the SpMV protocol changed holds calls timed both ways: its reader
/// keeps the L2-cold ones and counts the others aside, and a resume measures the cold ones
/// anew (their keys differ). The replayed records are never set aside.
#[test]
fn records_timed_with_l2_cold_supersede_repeated_ones() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.jsonl");
    let mut w = ProfileWriter::open(&path, &header("GPU A")).unwrap();
    for r in [
        spmv_rec("a", 0.008, false, false),
        spmv_rec("b", 0.009, false, false),
        spmv_rec("a", 0.002, true, false),
    ] {
        w.write(&r).unwrap();
    }
    drop(w);
    let old = Profile::read(&path).unwrap();
    assert_eq!((old.spmv.len(), old.superseded_spmv), (2, 0));
    assert!(!old.spmv_l2_flushed());
    let w = ProfileWriter::open(&path, &header("GPU A")).unwrap();
    let cold = spmv_rec("a", 0.004, false, true);
    assert!(w.has(&spmv_rec("a", 0.1, false, false).key().unwrap()));
    assert!(!w.has(&cold.key().unwrap()));
    let mut w = w;
    w.write(&cold).unwrap();
    drop(w);
    let p = Profile::read(&path).unwrap();
    assert_eq!((p.spmv.len(), p.superseded_spmv), (1, 2));
    assert_eq!(p.spmv[0].timing.unwrap().median_ms, 0.004);
    assert!(p.spmv_l2_flushed());
    assert_eq!(p.spmv_replayed.len(), 1);
}
