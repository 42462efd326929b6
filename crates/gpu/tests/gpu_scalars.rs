//! GPU tests of the poll of the device recurrence, `CgScalars::read_since`: the scalars and the
//! history entries it returns equal what the plain reads give, on both paths (the gather into
//! mapped page-locked memory and the device copies), over ranges that grow the mapped buffer
//! and across a history replaced by a larger one, as the solvers grow it. Without a CUDA device
//! the runner reports each GPU test as ignored (with AUTOPCG_REQUIRE_GPU=1 it fails instead);
//! see autopcg_gpu::testing.
use autopcg_gpu::kernels::dot::{dot3_advance, Dot3Kernel, Dot3Workspace};
use autopcg_gpu::scalars::PollPath;
use autopcg_gpu::{CgScalars, DeviceVec, GpuDevice, LaunchConfig};

/// Elements of the vectors whose dots fill the history.
const N: usize = 8;

/// What the dots of iteration `k` are made of: r = a_k (1, ..., 1), u = w = (1, ..., 1), so
/// that gamma = 8 a_k, delta = 8 and rr = 64 a_k^2, exactly, and every entry differs. (The
/// recurrence halts at iteration 1 on these, but the dots of every iteration below the
/// capacity still go to the history.)
fn a_of(k: u32) -> f64 {
    0.5 + f64::from(k)
}

fn expected_entry(k: u32) -> [f64; 3] {
    let a = a_of(k);
    [N as f64 * a, N as f64, N as f64 * a * a]
}

/// Queues the reductions of iterations `range` into `sc`'s history (no wait).
fn advance(dev: &GpuDevice, sc: &mut CgScalars, range: std::ops::Range<u32>) {
    let mut ws = Dot3Workspace::new(dev, 4).unwrap();
    let ones: DeviceVec<f64> = dev.upload(&[1.0; N]).unwrap();
    let cfg = LaunchConfig::new(64, 4);
    for k in range {
        let r = dev.upload(&[a_of(k); N]).unwrap();
        dot3_advance(
            dev,
            Dot3Kernel::TwoPass,
            cfg,
            &r,
            &ones,
            &ones,
            &mut ws,
            sc,
            k,
        )
        .unwrap();
    }
}

/// `read_since(from, to)` against `read_history`, `read` and the expected dots.
fn check_read_since(dev: &GpuDevice, sc: &mut CgScalars, from: u32, to: u32, what: &str) {
    let (snap, hist) = sc.read_since(dev, from, to).unwrap();
    assert_eq!(
        snap,
        sc.read(dev).unwrap(),
        "{what}: scalars of {from}..{to}"
    );
    assert_eq!(
        hist,
        sc.read_history(dev, from, to).unwrap(),
        "{what}: history {from}..{to}"
    );
    let want: Vec<[f64; 3]> = (from..to).map(expected_entry).collect();
    assert_eq!(hist, want, "{what}: history {from}..{to}");
}

fn read_since_matches_the_plain_reads_on_both_paths(dev: GpuDevice) {
    for path in [PollPath::Mapped, PollPath::Copies] {
        let what = format!("{path:?}");
        let cap = 400;
        let mut sc = CgScalars::with_poll_path(&dev, cap, path).unwrap();
        // A device with mapped memory gets it: the fast path is the one tested here.
        assert_eq!(sc.poll_path(), path, "{what}");
        // The reductions are queued, not waited for: each poll waits for them itself.
        advance(&dev, &mut sc, 0..cap);
        // Empty ranges, small ones, then ranges past the first mapped buffer (512 doubles,
        // 167 iterations), which grow it, and a small one again.
        for (from, to) in [
            (0, 0),
            (0, 1),
            (3, 20),
            (20, 36),
            (0, 167),
            (0, 168),
            (150, 400),
            (0, 400),
            (399, 400),
            (400, 400),
            (5, 21),
        ] {
            check_read_since(&dev, &mut sc, from, to, &what);
            assert_eq!(sc.poll_path(), path, "{what}: after {from}..{to}");
        }
        // Ranges outside the history are refused, and the next poll still works.
        assert!(sc.read_since(&dev, 5, 4).is_err(), "{what}");
        assert!(sc.read_since(&dev, 0, cap + 1).is_err(), "{what}");
        check_read_since(&dev, &mut sc, 10, 30, &what);
    }
}

fn read_since_follows_a_grown_history(dev: GpuDevice) {
    for path in [PollPath::Mapped, PollPath::Copies] {
        let what = format!("{path:?}");
        let mut sc = CgScalars::with_poll_path(&dev, 4, path).unwrap();
        advance(&dev, &mut sc, 0..4);
        check_read_since(&dev, &mut sc, 0, 2, &what);
        // As the solvers grow the history: the entries not yet polled are read, then a larger
        // history takes over the scalars.
        check_read_since(&dev, &mut sc, 2, 4, &what);
        let raw = sc.read_raw(&dev).unwrap();
        let mut fresh = CgScalars::with_poll_path(&dev, 1000, path).unwrap();
        fresh.write_raw(&dev, &raw).unwrap();
        let mut sc = fresh;
        assert_eq!(sc.capacity(), 1000);
        advance(&dev, &mut sc, 4..1000);
        // 996 entries in one poll: far past the first mapped buffer.
        check_read_since(&dev, &mut sc, 4, 1000, &what);
        check_read_since(&dev, &mut sc, 980, 1000, &what);
        assert_eq!(sc.poll_path(), path, "{what}");
        // Polls interleaved with queued work, as in a solve.
        let mut sc = CgScalars::with_poll_path(&dev, 64, path).unwrap();
        for start in (0..64).step_by(16) {
            advance(&dev, &mut sc, start..start + 16);
            check_read_since(&dev, &mut sc, start, start + 16, &what);
        }
    }
}

autopcg_gpu::test_main! {
    gpu: [
        read_since_matches_the_plain_reads_on_both_paths,
        read_since_follows_a_grown_history,
    ],
}
