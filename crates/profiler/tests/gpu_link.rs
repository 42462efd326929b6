//! The link measurement on the GPU. Two handles of one GPU run the whole measurement (their
//! copies are device-to-device copies, not peer copies); with two GPUs or more it also runs
//! between GPU 0 and GPU 1 (reported ignored on a host with one GPU). Without a CUDA device
//! the runner reports the tests as ignored (with AUTOPCG_REQUIRE_GPU=1 it fails instead); see
//! autopcg_gpu::testing.
use autopcg_gpu::GpuDevice;
use autopcg_model::MeasuredLink;
use autopcg_profiler::{link_summary, measure_link, LinkOptions};

fn check(l: &MeasuredLink, opts: &LinkOptions) {
    l.validate().unwrap();
    assert_eq!(l.sizes, opts.sizes);
    assert_eq!(l.times_us.len(), opts.sizes.len());
    // The largest copy is slower than the smallest, and no copy beats the fitted bandwidth
    // by much.
    assert!(l.times_us[3] > l.times_us[0], "{l:?}");
    assert!(l.bandwidth_gbs > 1.0 && l.bandwidth_gbs < 1e4, "{l:?}");
    assert!(
        l.allreduce_latency_us > 0.0 && l.allreduce_latency_us < 1e4,
        "{l:?}"
    );
    assert!(link_summary(l).contains("GB/s"));
}

fn the_link_measures_between_two_handles_of_one_gpu(dev: GpuDevice) {
    let other = GpuDevice::open(dev.ordinal()).unwrap();
    let opts = LinkOptions::default();
    let l = measure_link(&dev, &other, 1, &opts).unwrap();
    check(&l, &opts);
    assert!(l.peer_access);
    assert_eq!(l.between, [dev.ordinal(), dev.ordinal()]);
}

fn the_link_measures_between_two_gpus(dev: GpuDevice) {
    let count = GpuDevice::discover().unwrap().len();
    let (a, b) = if dev.ordinal() == 0 {
        (dev, GpuDevice::open(1).unwrap())
    } else {
        (GpuDevice::open(0).unwrap(), GpuDevice::open(1).unwrap())
    };
    let opts = LinkOptions::default();
    let l = measure_link(&a, &b, count, &opts).unwrap();
    check(&l, &opts);
    assert_eq!(l.between, [0, 1]);
    eprintln!("{}", link_summary(&l));
}

autopcg_gpu::test_main! {
    gpu: [the_link_measures_between_two_handles_of_one_gpu],
    gpus2: [the_link_measures_between_two_gpus],
}
