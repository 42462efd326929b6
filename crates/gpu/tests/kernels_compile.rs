//! Compiles every module of the kernel pool with NVRTC, for every `-D` variant the launch
//! wrappers use, to PTX for `compute_90` and to a CUBIN for `sm_90`, and checks that every
//! expected entry point is exported. Needs NVRTC only (no GPU): without it the runner reports the
//! tests as ignored (with AUTOPCG_REQUIRE_GPU=1 they fail instead); see autopcg_gpu::testing.
use autopcg_gpu::cache::KernelCache;
use autopcg_gpu::compile::{compile_module, image_has_entry, Target};
use autopcg_gpu::sources::catalog;
use autopcg_gpu::{GpuError, KernelSource, ModuleSpec};

fn kernels_compile() {
    let mut checked = 0;
    for (spec, entries) in catalog() {
        for target in [Target::Ptx(90), Target::Cubin(90)] {
            let image = compile_module(&spec, target)
                .unwrap_or_else(|e| panic!("{spec} for {target:?}: {e}"));
            for e in &entries {
                assert!(
                    image_has_entry(&image, target, e),
                    "{e} missing from {spec} compiled for {target:?}"
                );
                checked += 1;
            }
            // The check is not vacuous: a name that is not a kernel is not found.
            assert!(!image_has_entry(&image, target, "no_such_kernel"));
        }
    }
    println!("kernels_compile: {checked} (entry point, target) pairs found");
}

fn compile_errors_keep_the_nvrtc_log() {
    // dot.cu refuses a block size that is not a power of two with an #error.
    let spec = ModuleSpec::dot(96);
    match compile_module(&spec, Target::Ptx(90)) {
        Err(GpuError::Compile { log, file, .. }) => {
            assert!(
                log.contains("BLOCK_SIZE must be a power of two"),
                "log: {log}"
            );
            assert!(file.contains("dot.cu -DBLOCK_SIZE=96"), "file: {file}");
        }
        other => panic!("expected a compile error, got {other:?}"),
    }
}

fn disk_cache_serves_and_repairs_compiled_images() {
    let dir = tempfile::tempdir().unwrap();
    let cache = KernelCache::new(Some(dir.path().to_path_buf()));
    let spec = ModuleSpec::plain(KernelSource::Precond);
    let target = Target::Cubin(90);
    let (first, key, from_disk) = cache.get_or_compile(&spec, target).unwrap();
    assert!(!from_disk);
    let (second, key2, from_disk) = cache.get_or_compile(&spec, target).unwrap();
    assert!(from_disk);
    assert_eq!((first.clone(), key.clone()), (second, key2));
    // Damage the entry: it is detected, rebuilt, and the rebuilt image is the same.
    let path = cache.entry_path(&key).unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x5a;
    std::fs::write(&path, &bytes).unwrap();
    let (third, _, from_disk) = cache.get_or_compile(&spec, target).unwrap();
    assert!(!from_disk);
    assert_eq!(third, first);
    let s = cache.stats();
    assert_eq!((s.hits, s.misses, s.corrupt), (1, 2, 1));
}

autopcg_gpu::test_main! {
    nvrtc: [
        kernels_compile,
        compile_errors_keep_the_nvrtc_log,
        disk_cache_serves_and_repairs_compiled_images,
    ],
}
