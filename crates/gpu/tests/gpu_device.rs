//! GPU tests of discovery, the kernel registry and its cache, device memory and the timer.
//! Without a CUDA device the runner reports each GPU test as ignored
//! (with AUTOPCG_REQUIRE_GPU=1 it fails instead); see autopcg_gpu::testing.
mod common;

use autopcg_gpu::kernels::vector::{axpy, VectorVariant};
use autopcg_gpu::sources::catalog;
use autopcg_gpu::{
    gpu_available, time_call, time_kernel, time_kernel_batched, time_kernel_replayed, CallTiming,
    DeviceCsr, GpuDevice, GpuError, GpuTimer, KernelCache, KernelSource, LaunchConfig, ModuleSpec,
    ShortCalls,
};

fn probing_never_panics() {
    // Runs everywhere: on a machine without CUDA these must return, not panic.
    let avail = gpu_available();
    let found = GpuDevice::discover();
    match &found {
        Ok(list) => assert_eq!(avail, !list.is_empty()),
        Err(e) => {
            assert!(!avail);
            println!("probing_never_panics: driver not usable here ({e})");
        }
    }
    if !avail {
        assert!(GpuDevice::open(0).is_err());
        // Opening ahead fails quietly; the open after it says why.
        GpuDevice::open_ahead(0);
        assert!(GpuDevice::open(0).is_err());
    }
}

fn discovery_and_properties(dev: GpuDevice) {
    let list = GpuDevice::discover().unwrap();
    assert!(!list.is_empty());
    assert_eq!(list[0].ordinal, 0);
    assert_eq!(&list[0].props, dev.props());
    let p = dev.props();
    assert!(!p.name.is_empty());
    assert!(p.compute_capability.0 >= 6, "{:?}", p.compute_capability);
    assert_eq!(p.warp_size, 32);
    assert!(p.sm_count > 0);
    assert!(p.max_threads_per_block >= 1024);
    assert!(p.max_threads_per_sm >= p.max_threads_per_block);
    assert!(p.max_blocks_per_sm > 0 && p.regs_per_sm > 0 && p.regs_per_block > 0);
    assert!(p.smem_per_sm >= p.smem_per_block && p.smem_per_block > 0);
    assert!(p.smem_per_block_optin >= p.smem_per_block);
    assert!(p.total_mem > (1 << 30) && p.l2_bytes > 0);
    assert!(p.max_grid_x >= 65535);
    let (free, total) = dev.mem_info().unwrap();
    assert!(free <= total && total > 0);
    let json = serde_json::to_string(p).unwrap();
    assert!(json.contains("\"sm_count\""));
    println!(
        "device 0: {} sm_{} {} SMs, {} GiB, peak {:?} GB/s",
        p.name,
        p.arch(),
        p.sm_count,
        p.total_mem >> 30,
        p.peak_bandwidth_gbs()
    );
    match GpuDevice::open(list.len()) {
        Err(GpuError::NoDevice { ordinal, count }) => {
            assert_eq!((ordinal, count), (list.len(), list.len()))
        }
        other => panic!("expected NoDevice, got {other:?}"),
    }
}

fn registry_compiles_everything_and_reads_attributes(dev: GpuDevice) {
    let expected: usize = catalog().iter().map(|(_, e)| e.len()).sum();
    assert_eq!(dev.compile_all().unwrap(), expected);
    let arch = dev.props().arch();
    for (spec, entries) in catalog() {
        for e in entries {
            let k = dev.kernel(&spec, &e).unwrap();
            let a = k.attrs();
            assert_eq!(k.name(), e);
            assert!(a.num_regs > 0 && a.num_regs <= 255, "{e}: {a:?}");
            assert_eq!(a.binary_version, arch, "{e}: {a:?}");
            assert!(a.max_threads_per_block >= 32, "{e}: {a:?}");
        }
    }
    // Static shared memory follows BLOCK_SIZE for the shared-memory tree rungs.
    for bs in autopcg_gpu::DOT_BLOCK_SIZES {
        let k = dev.kernel(&ModuleSpec::dot(bs), "dot_sequential").unwrap();
        assert_eq!(k.attrs().static_smem_bytes, 8 * bs);
        assert!(k.attrs().max_threads_per_block >= bs);
    }
    match dev.kernel(&ModuleSpec::plain(KernelSource::Vector), "no_such_kernel") {
        Err(GpuError::MissingEntry { entry, .. }) => assert_eq!(entry, "no_such_kernel"),
        other => panic!("expected MissingEntry, got {other:?}"),
    }
    // A module that does not compile reports NVRTC's log.
    match dev.kernel(&ModuleSpec::dot(96), "dot_vec2") {
        Err(GpuError::Compile { log, .. }) => assert!(log.contains("power of two"), "{log}"),
        other => panic!("expected a compile error, got {other:?}"),
    }
}

/// Opens its own devices, each with a kernel cache in a temporary folder; the device it is
/// given only tells it that one opens.
fn disk_cache_is_used_and_repaired_on_the_device(_dev: GpuDevice) {
    let dir = tempfile::tempdir().unwrap();
    let spec = ModuleSpec::plain(KernelSource::Precond);
    {
        let dev = GpuDevice::open_with_cache(0, KernelCache::new(Some(dir.path().into()))).unwrap();
        dev.kernel(&spec, "jacobi_apply").unwrap();
        let s = dev.cache_stats();
        assert_eq!((s.hits, s.misses), (0, 1));
    }
    {
        let dev = GpuDevice::open_with_cache(0, KernelCache::new(Some(dir.path().into()))).unwrap();
        dev.kernel(&spec, "jacobi_apply").unwrap();
        dev.kernel(&spec, "jacobi_apply_v2").unwrap();
        let s = dev.cache_stats();
        assert_eq!((s.hits, s.misses), (1, 0), "one module read once from disk");
    }
    // Damage every entry: the next device rebuilds and still runs the kernel.
    for e in std::fs::read_dir(dir.path()).unwrap() {
        let p = e.unwrap().path();
        let mut b = std::fs::read(&p).unwrap();
        let n = b.len();
        b.truncate(n / 2);
        std::fs::write(&p, &b).unwrap();
    }
    let dev = GpuDevice::open_with_cache(0, KernelCache::new(Some(dir.path().into()))).unwrap();
    let d = dev.upload(&[2.0, 3.0, 4.0]).unwrap();
    let r = dev.upload(&[1.0, 1.0, 0.5]).unwrap();
    let mut z = dev.alloc_zeros::<f64>(3).unwrap();
    autopcg_gpu::kernels::precond::jacobi_apply(
        &dev,
        autopcg_gpu::kernels::precond::Loads::Scalar,
        LaunchConfig::new(64, 1),
        &d,
        &r,
        &mut z,
    )
    .unwrap();
    assert_eq!(dev.download(&z).unwrap(), vec![2.0, 3.0, 2.0]);
    let s = dev.cache_stats();
    assert_eq!((s.corrupt, s.misses), (1, 1));
}

/// Handles opened with `GpuDevice::open` share the loaded kernels (a second handle reads neither
/// the disk cache nor loads a module again) and each runs on its own stream.
fn opened_handles_share_loaded_kernels(dev: GpuDevice) {
    let spec = ModuleSpec::plain(KernelSource::Precond);
    dev.kernel(&spec, "jacobi_apply").unwrap();
    let before = dev.cache_stats();
    let other = GpuDevice::open(0).unwrap();
    other.kernel(&spec, "jacobi_apply").unwrap();
    let after = other.cache_stats();
    assert_eq!(
        (after.hits, after.misses),
        (before.hits, before.misses),
        "the second handle found the module loaded"
    );
    // Every handle knows which modules are loaded (what the prepared solver reads to tell a
    // warm device from a cold one), and a module no one loaded is not.
    let fresh = ModuleSpec::plain(KernelSource::Vector).define("AUTOPCG_LOADED_PROBE", 1);
    assert!(dev.module_loaded(&spec) && other.module_loaded(&spec));
    assert!(!dev.module_loaded(&fresh) && !other.module_loaded(&fresh));
    other.kernel(&fresh, "axpy_elem").unwrap();
    assert!(dev.module_loaded(&fresh) && other.module_loaded(&fresh));
    // Both handles launch it, each on its own stream, with their own buffers.
    for h in [&dev, &other] {
        let d = h.upload(&[2.0, 3.0]).unwrap();
        let r = h.upload(&[1.0, 0.5]).unwrap();
        let mut z = h.alloc_zeros::<f64>(2).unwrap();
        autopcg_gpu::kernels::precond::jacobi_apply(
            h,
            autopcg_gpu::kernels::precond::Loads::Scalar,
            LaunchConfig::new(64, 1),
            &d,
            &r,
            &mut z,
        )
        .unwrap();
        assert_eq!(h.download(&z).unwrap(), vec![2.0, 1.5]);
    }
}

/// A handle from `open` whose last clone is dropped is the next `open`'s (same stream); a
/// handle with a live clone, or one opened with a cache of its own, is not handed out again.
fn dropped_handles_are_reused(dev: GpuDevice) {
    let ord = dev.ordinal();
    let first = GpuDevice::open(ord).unwrap();
    let id = first.stream_id();
    drop(first);
    let again = GpuDevice::open(ord).unwrap();
    assert_eq!(again.stream_id(), id);
    let other = GpuDevice::open(ord).unwrap();
    assert_ne!(
        other.stream_id(),
        id,
        "a live handle's stream was handed out"
    );
    let clone = again.clone();
    drop(again);
    let third = GpuDevice::open(ord).unwrap();
    assert_ne!(
        third.stream_id(),
        clone.stream_id(),
        "a live clone's stream was handed out"
    );
    // A kept handle works: a copy and a kernel on it.
    drop(clone);
    let reused = GpuDevice::open(ord).unwrap();
    assert_eq!(reused.stream_id(), id);
    let x = reused.upload(&[1.0, 2.0]).unwrap();
    let mut y = reused.alloc_zeros::<f64>(2).unwrap();
    axpy(
        &reused,
        VectorVariant::Grid,
        LaunchConfig::new(32, 1),
        3.0,
        &x,
        &mut y,
    )
    .unwrap();
    assert_eq!(reused.download(&y).unwrap(), vec![3.0, 6.0]);
    let other_id = other.stream_id();
    drop(other);
    let dir = tempfile::tempdir().unwrap();
    let private =
        GpuDevice::open_with_cache(ord, KernelCache::new(Some(dir.path().into()))).unwrap();
    drop(private);
    // Not the private handle: the one kept last before it.
    assert_eq!(GpuDevice::open(ord).unwrap().stream_id(), other_id);
    drop(third);
}

/// A handle opened ahead, on a thread of its own, is the next `open`'s and works on this
/// thread; with a handle kept already, opening ahead opens nothing; a device that is not there
/// is reported by the `open` after it.
fn an_open_ahead_hands_its_handle_to_open(dev: GpuDevice) {
    let ord = dev.ordinal();
    // Take every kept handle, so that the open ahead has to create one.
    let held: Vec<GpuDevice> = (0..=autopcg_gpu::device::IDLE_HANDLES_PER_DEVICE)
        .map(|_| GpuDevice::open(ord).unwrap())
        .collect();
    GpuDevice::open_ahead(ord);
    GpuDevice::open_ahead(ord); // under way already: nothing more
    let ahead = GpuDevice::open(ord).unwrap();
    let id = ahead.stream_id();
    assert!(held.iter().all(|h| h.stream_id() != id));
    let x = ahead.upload(&[1.0, 2.0]).unwrap();
    let mut y = ahead.alloc_zeros::<f64>(2).unwrap();
    axpy(
        &ahead,
        VectorVariant::Grid,
        LaunchConfig::new(32, 1),
        2.0,
        &x,
        &mut y,
    )
    .unwrap();
    assert_eq!(ahead.download(&y).unwrap(), vec![2.0, 4.0]);
    drop((x, y));
    drop(ahead);
    // Kept: opening ahead leaves it, and the next open takes it.
    GpuDevice::open_ahead(ord);
    assert_eq!(GpuDevice::open(ord).unwrap().stream_id(), id);
    drop(held);
    let count = GpuDevice::discover().unwrap().len();
    GpuDevice::open_ahead(count);
    GpuDevice::finish_opens_ahead();
    GpuDevice::finish_opens_ahead(); // nothing left: returns at once
    assert!(matches!(
        GpuDevice::open(count),
        Err(GpuError::NoDevice { .. })
    ));
}

/// An open ahead given the size of the matrix to come pays the first upload's costs on its
/// thread: the memory pool has grown by what `prepare_for_upload` says (twice the CSR arrays'
/// bytes and 80 bytes a row) with nothing left allocated, and the upload's checks are loaded.
fn an_open_ahead_for_a_size_prepares_the_upload(dev: GpuDevice) {
    let ord = dev.ordinal();
    let held: Vec<GpuDevice> = (0..=autopcg_gpu::device::IDLE_HANDLES_PER_DEVICE)
        .map(|_| GpuDevice::open(ord).unwrap())
        .collect();
    // Sized past what the pool holds now, so that the growth is this call's.
    let (reserved, used) = dev.pool_bytes().unwrap();
    let rows = 1000usize;
    let entries = (reserved as usize + (512 << 20)) / 24 + 1;
    let grow = 2 * DeviceCsr::arrays_bytes(rows, entries) + 80 * rows;
    let (free, _) = dev.mem_info().unwrap();
    GpuDevice::open_ahead_for(ord, rows, entries);
    // Waited for without asking for the handle: the preparation runs to its end (an open
    // waiting would have stopped it between steps).
    GpuDevice::finish_opens_ahead();
    let ahead = GpuDevice::open(ord).unwrap();
    let (reserved_after, used_after) = ahead.pool_bytes().unwrap();
    assert!(
        reserved_after >= grow.min(free / 4) as u64,
        "pool {reserved} -> {reserved_after} bytes, expected at least {grow}"
    );
    assert_eq!(used_after, used, "nothing stays allocated");
    assert!(autopcg_gpu::kernels::ssor::loaded(&ahead));
    // A handle of a registry of its own, prepared directly: its checks' module is loaded.
    let dir = tempfile::tempdir().unwrap();
    let own = GpuDevice::open_with_cache(ord, KernelCache::new(Some(dir.path().into()))).unwrap();
    assert!(!autopcg_gpu::kernels::ssor::loaded(&own));
    own.prepare_for_upload(10, 28).unwrap();
    assert!(autopcg_gpu::kernels::ssor::loaded(&own));
    // The arrays' bytes are what an upload occupies.
    let a = common::poisson2d(7);
    let up = DeviceCsr::upload(&own, &a).unwrap();
    assert_eq!(
        up.device_bytes(),
        DeviceCsr::arrays_bytes(a.nrows(), a.nnz())
    );
    drop((up, ahead, own, held));
}

fn memory_round_trips(dev: GpuDevice) {
    let mut r = common::rng(1);
    for n in [0usize, 1, 2, 1000, 100_003] {
        let h = common::uniform(&mut r, n, -1.0, 1.0);
        let d = dev.upload(&h).unwrap();
        assert_eq!(d.len(), n);
        assert_eq!(dev.download(&d).unwrap(), h);
        let mut z = dev.alloc_zeros::<f64>(n).unwrap();
        assert_eq!(dev.download(&z).unwrap(), vec![0.0; n]);
        dev.copy(&d, &mut z).unwrap();
        assert_eq!(dev.download(&z).unwrap(), h);
        dev.fill_zeros(&mut z).unwrap();
        assert_eq!(dev.download(&z).unwrap(), vec![0.0; n]);
        dev.upload_into(&h, &mut z).unwrap();
        assert_eq!(dev.download(&z).unwrap(), h);
        if n >= 2 {
            assert_eq!(dev.download_range(&d, 1, n).unwrap(), h[1..].to_vec());
        }
        assert!(dev.download_range(&d, 0, n + 1).is_err());
    }
    let idx: Vec<u32> = (0..77).collect();
    let d = dev.upload(&idx).unwrap();
    assert_eq!(dev.download(&d).unwrap(), idx);
    let mut small = dev.alloc_zeros::<f64>(3).unwrap();
    assert!(dev.upload_into(&[1.0, 2.0], &mut small).is_err());
    let big = dev.alloc_zeros::<f64>(4).unwrap();
    assert!(dev.copy(&big, &mut small).is_err());
}

/// Copies of at least `STAGED_MIN_BYTES` go through the page-locked staging buffers in pieces
/// of `STAGE_CHUNK_BYTES`: lengths around the piece boundaries (one short of a piece, exact
/// pieces, a partial last piece, several rounds of the two buffers), both element sizes, data
/// changed on the host right after the upload returns, a kernel reading the staged data, and
/// two handles of the device taking turns with the shared buffers.
fn staged_copies_round_trip(dev: GpuDevice) {
    use autopcg_gpu::staging::{STAGED_MIN_BYTES, STAGE_CHUNKS, STAGE_CHUNK_BYTES};
    let per = STAGE_CHUNK_BYTES / 8;
    let mut r = common::rng(7);
    for n in [
        STAGED_MIN_BYTES / 8 - 1,
        STAGED_MIN_BYTES / 8,
        per - 1,
        per,
        per + 1,
        STAGE_CHUNKS * per,
        (2 * STAGE_CHUNKS + 1) * per + 12_345,
    ] {
        let mut h = common::uniform(&mut r, n, -1.0, 1.0);
        let d = dev.upload(&h).unwrap();
        let sent = h.clone();
        // The host copy may change at once: what was uploaded is what the call saw.
        h.iter_mut().for_each(|v| *v = f64::NAN);
        assert!(dev.download(&d).unwrap() == sent, "n = {n}");
        let mut z = dev.alloc_zeros::<f64>(n).unwrap();
        dev.upload_into(&sent, &mut z).unwrap();
        // A kernel queued after the staged copy sees all of it.
        let mut y = dev.alloc_zeros::<f64>(n).unwrap();
        let cfg = LaunchConfig::new(256, 1024);
        axpy(&dev, VectorVariant::Grid, cfg, 2.0, &z, &mut y).unwrap();
        let y_host = dev.download(&y).unwrap();
        assert!(
            y_host.iter().zip(&sent).all(|(a, b)| *a == 2.0 * b),
            "n = {n}"
        );
        assert_eq!(
            dev.download_range(&z, n - 3, n).unwrap(),
            sent[n - 3..].to_vec()
        );
    }
    let idx: Vec<u32> = (0..(3 * STAGE_CHUNK_BYTES / 4 + 999) as u32)
        .rev()
        .collect();
    let d = dev.upload(&idx).unwrap();
    assert!(dev.download(&d).unwrap() == idx);
    // Two handles of the device share the staging buffers; copies from both threads take
    // turns and each lands where it was sent.
    let other = GpuDevice::open(dev.ordinal()).unwrap();
    let n = 3 * per + 7;
    let (a, b): (Vec<f64>, Vec<f64>) = ((0..n).map(|i| i as f64).collect(), vec![-1.5; n]);
    std::thread::scope(|s| {
        let t = s.spawn(|| {
            let db = other.upload(&b).unwrap();
            other.download(&db).unwrap()
        });
        let da = dev.upload(&a).unwrap();
        assert_eq!(first_difference(&dev.download(&da).unwrap(), &a), None);
        assert_eq!(first_difference(&t.join().unwrap(), &b), None);
    });
    // For the record (not asserted): the rates of a 256 MiB copy each way.
    let n = 32 << 20;
    let h: Vec<f64> = (0..n).map(|i| i as f64).collect();
    let mut d = dev.alloc_zeros::<f64>(n).unwrap();
    for round in 0..2 {
        // A fresh buffer each round: the second reuses the memory the first freed.
        let t0 = std::time::Instant::now();
        let fresh = dev.upload(&h).unwrap();
        dev.synchronize().unwrap();
        let with_alloc = t0.elapsed().as_secs_f64();
        drop(fresh);
        println!(
            "upload into a new buffer (round {round}): {:.1} GB/s",
            8.0 * n as f64 / with_alloc / 1e9
        );
        let t0 = std::time::Instant::now();
        dev.upload_into(&h, &mut d).unwrap();
        dev.synchronize().unwrap();
        let up = t0.elapsed().as_secs_f64();
        let t0 = std::time::Instant::now();
        let back = dev.download(&d).unwrap();
        let down = t0.elapsed().as_secs_f64();
        assert_eq!(first_difference(&back, &h), None);
        println!(
            "staged copies of {} MiB: upload {:.1} GB/s, download {:.1} GB/s",
            (8 * n) >> 20,
            8.0 * n as f64 / up / 1e9,
            8.0 * n as f64 / down / 1e9
        );
    }
}

/// An upload whose pieces are written by the caller (`upload_into_filled`), staged and
/// direct: every element is written exactly once, by a call for a piece inside the vector, and
/// lands where it belongs.
fn filled_uploads_write_each_element_once(dev: GpuDevice) {
    use autopcg_gpu::staging::{STAGED_MIN_BYTES, STAGE_CHUNK_BYTES};
    use std::sync::atomic::{AtomicUsize, Ordering};
    let per = STAGE_CHUNK_BYTES / 8;
    for n in [
        1,
        1000,
        STAGED_MIN_BYTES / 8 - 1,
        STAGED_MIN_BYTES / 8,
        2 * per + 17,
    ] {
        let written: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
        let mut d = dev.alloc_zeros::<f64>(n).unwrap();
        dev.upload_into_filled(&mut d, &|off, piece: &mut [f64]| {
            assert!(off + piece.len() <= n, "piece {off}+{} of {n}", piece.len());
            for (k, v) in piece.iter_mut().enumerate() {
                written[off + k].fetch_add(1, Ordering::Relaxed);
                *v = (off + k) as f64 * 0.5 - 3.0;
            }
        })
        .unwrap();
        assert!(
            written.iter().all(|c| c.load(Ordering::Relaxed) == 1),
            "n = {n}: an element written other than once"
        );
        let got = dev.download(&d).unwrap();
        assert!(
            got.iter()
                .enumerate()
                .all(|(i, &v)| v == i as f64 * 0.5 - 3.0),
            "n = {n}"
        );
    }
}

/// For the record (not asserted): a CSR upload of a 7-point-stencil-sized matrix (2M rows,
/// 14M entries) as a setup runs it, validation included, fresh and into kept memory.
fn csr_upload_rate(dev: GpuDevice) {
    let (n, per_row) = (1usize << 21, 7usize);
    let indptr: Vec<u32> = (0..=n).map(|i| (i * per_row) as u32).collect();
    let indices: Vec<u32> = (0..n * per_row)
        .map(|k| ((k / per_row + k % per_row) % n) as u32)
        .collect();
    let vals: Vec<f64> = (0..n * per_row).map(|k| k as f64).collect();
    let bytes = 4 * (indptr.len() + indices.len()) + 8 * vals.len();
    for round in 0..3 {
        let t0 = std::time::Instant::now();
        autopcg_gpu::formats::validate_csr(n, n, &indptr, &indices, &vals).unwrap();
        let t1 = std::time::Instant::now();
        let m = autopcg_gpu::DeviceCsr::from_parts(&dev, n, n, &indptr, &indices, &vals);
        dev.synchronize().unwrap();
        let (check, all) = ((t1 - t0).as_secs_f64(), t0.elapsed().as_secs_f64());
        drop(m);
        println!(
            "CSR upload round {round}: {} MB in {:.2} ms ({:.1} GB/s; validation twice, {:.2} ms each)",
            bytes >> 20,
            (all - check) * 1e3,
            bytes as f64 / (all - check) / 1e9,
            check * 1e3
        );
    }
}

/// The first index where `got` and `want` differ (or their lengths), with both values.
fn first_difference(got: &[f64], want: &[f64]) -> Option<(usize, f64, f64)> {
    if got.len() != want.len() {
        return Some((
            got.len().min(want.len()),
            got.len() as f64,
            want.len() as f64,
        ));
    }
    got.iter()
        .zip(want)
        .position(|(a, b)| a.to_bits() != b.to_bits())
        .map(|k| (k, got[k], want[k]))
}

fn timer_and_time_kernel(dev: GpuDevice) {
    let n = 1 << 22;
    let x = dev.upload(&vec![1.0; n]).unwrap();
    let mut y = dev.alloc_zeros::<f64>(n).unwrap();
    let cfg = VectorVariant::Grid.default_config(n as u64, dev.props());
    let mut launch = || axpy(&dev, VectorVariant::Grid, cfg, 1.0, &x, &mut y);
    let t = GpuTimer::new(&dev).unwrap();
    launch().unwrap();
    t.start().unwrap();
    launch().unwrap();
    let ms = t.stop().unwrap();
    assert!(ms > 0.0 && ms < 1000.0, "{ms}");
    let s = time_kernel(&dev, &mut launch, 5, 2.0).unwrap();
    assert!(s.reps >= 5, "{s:?}");
    assert!(
        s.min_ms > 0.0 && s.min_ms <= s.median_ms && s.median_ms <= s.max_ms,
        "{s:?}"
    );
    let b = time_kernel_batched(&dev, &mut launch, 10, 3, 0.0).unwrap();
    assert!(b.reps >= 3 && b.median_ms > 0.0, "{b:?}");
    // Every launch added 1 to every y: 2 above, then warm-up + reps, then warm-up + 10 x reps.
    let launches = 2 + (1 + s.reps) + (1 + 10 * b.reps);
    let y_host = dev.download(&y).unwrap();
    assert!(
        y_host.iter().all(|&v| v == launches as f64),
        "{} vs {launches}",
        y_host[0]
    );
    // About 3 x 8 bytes per element move per axpy: report the bandwidth for the record.
    println!(
        "axpy n = {n}: median {:.4} ms, {:.0} GB/s",
        s.median_ms,
        24.0 * n as f64 / (s.median_ms * 1e-3) / 1e9
    );
}

/// Calls timed from graph replays run every replayed call; without replays a short call is
/// timed in stream batches and a long one alone.
fn short_calls_are_timed_from_graph_replays(dev: GpuDevice) {
    let n = 1024;
    let x = dev.upload(&vec![1.0; n]).unwrap();
    let mut y = dev.alloc_zeros::<f64>(n).unwrap();
    let cfg = VectorVariant::Grid.default_config(n as u64, dev.props());
    let (r, how) = time_kernel_replayed(
        &dev,
        || axpy(&dev, VectorVariant::Grid, cfg, 1.0, &x, &mut y),
        8,
        3,
        0.0,
    )
    .unwrap();
    assert_eq!(how, CallTiming::Replayed(8));
    assert!(
        r.reps >= 3 && r.min_ms > 0.0 && r.median_ms <= r.max_ms,
        "{r:?}"
    );
    // Warm-up, one untimed replay of 8, then two replays of 8 per sample.
    let launches = 1 + 8 + 2 * 8 * r.reps;
    let y_host = dev.download(&y).unwrap();
    assert!(
        y_host.iter().all(|&v| v == launches as f64),
        "{} vs {launches}",
        y_host[0]
    );
    // Replayed when asked, whatever the estimate; otherwise a short call goes in stream
    // batches (or alone when batches are off), and an estimate above the threshold skips the
    // probe and times calls alone.
    let short = ShortCalls::DEFAULT;
    let mut launch = || axpy(&dev, VectorVariant::Grid, cfg, 1.0, &x, &mut y);
    let (c, how) = time_call(&dev, &mut launch, 1.0, true, &short, 3, 0.0).unwrap();
    assert!(how.replayed(), "{how:?} {c:?}");
    let (_, how) = time_call(&dev, &mut launch, 0.0, false, &short, 3, 0.0).unwrap();
    assert!(matches!(how, CallTiming::Streamed(_)), "{how:?}");
    let alone_rule = ShortCalls {
        stream_batches: false,
        ..short
    };
    let (_, how) = time_call(&dev, &mut launch, 0.0, false, &alone_rule, 3, 0.0).unwrap();
    assert_eq!(how, CallTiming::Alone);
    let (alone, how) = time_call(&dev, &mut launch, 1.0, false, &short, 3, 0.0).unwrap();
    assert_eq!(how, CallTiming::Alone);
    println!(
        "axpy n = {n}: {:.2} us per call from graph replays, {:.2} us launched alone",
        c.median_ms * 1e3,
        alone.median_ms * 1e3
    );
}

autopcg_gpu::test_main! {
    cpu: [
        probing_never_panics,
    ],
    gpu: [
        discovery_and_properties,
        registry_compiles_everything_and_reads_attributes,
        disk_cache_is_used_and_repaired_on_the_device,
        opened_handles_share_loaded_kernels,
        dropped_handles_are_reused,
        an_open_ahead_hands_its_handle_to_open,
        an_open_ahead_for_a_size_prepares_the_upload,
        memory_round_trips,
        staged_copies_round_trip,
        filled_uploads_write_each_element_once,
        csr_upload_rate,
        timer_and_time_kernel,
        short_calls_are_timed_from_graph_replays,
    ],
}
