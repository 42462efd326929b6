//! One CUDA device: its context and stream, its properties, and the registry of kernels
//! compiled for it.
//!
//! Work is queued on one stream per device handle. cudarc's per-buffer event tracking (which
//! lets buffers move safely between streams) is switched off before the first allocation: every
//! buffer is used on the stream of the handle that allocated it, so it only adds work to every
//! launch.
//!
//! Loaded modules belong to the device's (primary) context, so handles opened with
//! [`GpuDevice::open`] share one process-wide registry per device: a second handle in the same
//! process (a second prepared solver, a new plan for new values) finds its kernels loaded and
//! pays neither the disk cache nor the module load again, and the registry keeps the primary
//! context alive between handles. [`GpuDevice::open_with_cache`] gives a handle its own
//! registry over the cache it is given.
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::{
    result as dres, sys as dsys, CudaContext, CudaFunction, CudaModule, CudaStream,
};
use cudarc::nvrtc::Ptx;

use crate::cache::{CacheStats, KernelCache};
use crate::compile::{compile_module, Target};
use crate::error::DriverContext;
use crate::probe::{device_count, guarded};
use crate::sources::{catalog, ModuleSpec};
use crate::staging::StageCell;
use crate::GpuError;

pub use autopcg_catalog::DeviceProps;

/// Reads the properties of device `dev` from the driver.
fn read_props(dev: dsys::CUdevice) -> Result<DeviceProps, GpuError> {
    use dsys::CUdevice_attribute_enum as A;
    let get = |a: A| -> Result<u32, GpuError> {
        // SAFETY: `dev` is a device handle obtained from cuDeviceGet after cuInit.
        let v = unsafe { dres::device::get_attribute(dev, a) }
            .during(|| format!("reading device attribute {a:?}"))?;
        Ok(u32::try_from(v).unwrap_or(0))
    };
    let opt = |a: A| -> Option<u32> {
        // SAFETY: as above.
        unsafe { dres::device::get_attribute(dev, a) }
            .ok()
            .and_then(|v| u32::try_from(v).ok())
            .filter(|&v| v > 0)
    };
    let name = dres::device::get_name(dev).during(|| "reading the device name".into())?;
    // SAFETY: as above.
    let total_mem =
        unsafe { dres::device::total_mem(dev) }.during(|| "reading the memory size".into())?;
    Ok(DeviceProps {
        name,
        compute_capability: (
            get(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
            get(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
        ),
        sm_count: get(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
        max_threads_per_block: get(A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?,
        max_threads_per_sm: get(A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR)?,
        max_blocks_per_sm: get(A::CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR)?,
        regs_per_sm: get(A::CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR)?,
        regs_per_block: get(A::CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK)?,
        smem_per_sm: get(A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR)?,
        smem_per_block: get(A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK)?,
        smem_per_block_optin: get(A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?,
        total_mem: total_mem as u64,
        l2_bytes: get(A::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)?,
        warp_size: get(A::CU_DEVICE_ATTRIBUTE_WARP_SIZE)?,
        max_grid_x: get(A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X)?,
        mem_clock_khz: opt(A::CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE),
        mem_bus_width_bits: opt(A::CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH),
        driver_version: None,
        nvrtc_version: crate::probe::nvrtc_version()
            .ok()
            .and_then(|(a, b)| Some((u32::try_from(a).ok()?, u32::try_from(b).ok()?))),
    })
}

/// A device found by [`GpuDevice::discover`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DeviceInfo {
    /// Driver ordinal (what [`GpuDevice::open`] takes).
    pub ordinal: usize,
    /// Its properties.
    pub props: DeviceProps,
}

/// Per-kernel resource use as compiled, read back from the driver (`cuFuncGetAttribute`): the
/// inputs of the occupancy formula of the dot-product model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct KernelAttrs {
    /// Registers per thread.
    pub num_regs: u32,
    /// Statically allocated shared memory per block, bytes.
    pub static_smem_bytes: u32,
    /// Largest block this kernel can be launched with.
    pub max_threads_per_block: u32,
    /// Local memory per thread (register spills), bytes.
    pub local_bytes: u32,
    /// Constant memory, bytes.
    pub const_bytes: u32,
    /// Architecture of the machine code (e.g. 90).
    pub binary_version: u32,
}

/// A loaded kernel: its entry point, the module it came from and its attributes. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Kernel {
    name: String,
    module: ModuleSpec,
    attrs: KernelAttrs,
    pub(crate) func: CudaFunction,
}

impl Kernel {
    /// Entry point name.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// The module (source and defines).
    pub fn module(&self) -> &ModuleSpec {
        &self.module
    }
    /// Resource use as compiled.
    pub fn attrs(&self) -> KernelAttrs {
        self.attrs
    }
}

fn read_attrs(f: &CudaFunction, name: &str) -> Result<KernelAttrs, GpuError> {
    let u = |r: Result<i32, dres::DriverError>, what: &str| -> Result<u32, GpuError> {
        r.map(|v| u32::try_from(v).unwrap_or(0))
            .during(|| format!("reading {what} of kernel {name}"))
    };
    Ok(KernelAttrs {
        num_regs: u(f.num_regs(), "the register count")?,
        static_smem_bytes: u(f.shared_size_bytes(), "the shared memory size")?,
        max_threads_per_block: u(f.max_threads_per_block(), "the block size limit")?,
        local_bytes: u(f.local_size_bytes(), "the local memory size")?,
        const_bytes: u(f.const_size_bytes(), "the constant memory size")?,
        binary_version: u(f.binary_version(), "the binary version")?,
    })
}

/// An open CUDA device: context, stream, properties and kernel registry. Cloning is cheap and
/// gives another handle to the same context, stream and registry (a prepared solver keeps one
/// for as long as it lives).
#[derive(Clone)]
pub struct GpuDevice {
    inner: Arc<DeviceState>,
}

impl std::ops::Deref for GpuDevice {
    type Target = DeviceState;
    fn deref(&self) -> &DeviceState {
        &self.inner
    }
}

/// What a [`GpuDevice`] handle shares; reached only through the handle's methods.
#[doc(hidden)]
pub struct DeviceState {
    ordinal: usize,
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    props: DeviceProps,
    target: Target,
    registry: Arc<Registry>,
    /// Opened by [`GpuDevice::open`]: kept for the next `open` when its last clone drops.
    reusable: bool,
}

/// Handles of [`GpuDevice::open`] kept for reuse per device, at most.
pub const IDLE_HANDLES_PER_DEVICE: usize = 4;

/// The handles of [`GpuDevice::open`] whose last clone was dropped, per ordinal (last in,
/// first out).
fn idle_handles() -> &'static Mutex<HashMap<usize, Vec<Arc<DeviceState>>>> {
    static IDLE: OnceLock<Mutex<HashMap<usize, Vec<Arc<DeviceState>>>>> = OnceLock::new();
    IDLE.get_or_init(|| Mutex::new(HashMap::new()))
}

/// An open started by [`GpuDevice::open_ahead`]: its thread, and whether an
/// [`GpuDevice::open`] waits for it (then the thread prepares nothing more, see
/// [`GpuDevice::open_ahead_for`]).
struct OpenAhead {
    thread: std::thread::JoinHandle<()>,
    waited: Arc<AtomicBool>,
}

/// Opens started by [`GpuDevice::open_ahead`] and not yet waited for, per ordinal.
fn opens_ahead() -> &'static Mutex<HashMap<usize, OpenAhead>> {
    static AHEAD: OnceLock<Mutex<HashMap<usize, OpenAhead>>> = OnceLock::new();
    AHEAD.get_or_init(|| Mutex::new(HashMap::new()))
}

impl Drop for GpuDevice {
    /// The last clone of a handle from [`GpuDevice::open`] leaves its context and stream to
    /// the next `open` of the device (up to [`IDLE_HANDLES_PER_DEVICE`] are kept): opening
    /// costs a context retain and a new stream, about 0.7 ms, which a warm process's setup
    /// of a small matrix would otherwise pay every time. Work still queued on the stream
    /// (frees of the last owner's buffers) runs before the next owner's, in stream order.
    fn drop(&mut self) {
        if !self.inner.reusable || Arc::strong_count(&self.inner) != 1 {
            return;
        }
        if let Ok(mut idle) = idle_handles().lock() {
            let kept = idle.entry(self.inner.ordinal).or_default();
            if kept.len() < IDLE_HANDLES_PER_DEVICE {
                kept.push(self.inner.clone());
            }
        }
    }
}

/// The kernels loaded into one device's context, and the disk cache they come from.
#[derive(Debug)]
struct Registry {
    cache: KernelCache,
    modules: Mutex<HashMap<ModuleSpec, Arc<CudaModule>>>,
    kernels: Mutex<HashMap<ModuleSpec, HashMap<String, Kernel>>>,
    /// Page-locked buffers of large host-device copies ([`crate::staging`]).
    stage: StageCell,
}

impl Registry {
    fn new(cache: KernelCache) -> Arc<Registry> {
        Arc::new(Registry {
            cache,
            modules: Mutex::new(HashMap::new()),
            kernels: Mutex::new(HashMap::new()),
            stage: StageCell::default(),
        })
    }

    /// The registry every [`GpuDevice::open`] of device `ordinal` in this process shares.
    fn shared(ordinal: usize) -> Arc<Registry> {
        static SHARED: OnceLock<Mutex<HashMap<usize, Arc<Registry>>>> = OnceLock::new();
        let map = SHARED.get_or_init(|| Mutex::new(HashMap::new()));
        match map.lock() {
            Ok(mut m) => m
                .entry(ordinal)
                .or_insert_with(|| Registry::new(KernelCache::at_default_location()))
                .clone(),
            // A thread panicked while registering: a private registry is still correct.
            Err(_) => Registry::new(KernelCache::at_default_location()),
        }
    }
}

/// Lets the device's stream-ordered memory pool (where every buffer of a handle is allocated)
/// keep up to `bytes` of freed memory instead of returning it to the driver at the next
/// synchronisation: a prepared solver's update, a second setup in the same process or a block
/// rebuild then reuses memory already mapped, where a fresh mapping costs about as much as
/// the copy that fills it. Best effort: a device without pools keeps the driver's default.
fn keep_freed_memory(dev: dsys::CUdevice, bytes: u64) {
    let mut threshold = bytes;
    // SAFETY: `dev` comes from cuDeviceGet; the release threshold attribute is a cuuint64_t,
    // read from `threshold` during the call.
    unsafe {
        if let Ok(pool) = dres::device::get_default_mem_pool(dev) {
            let _ = dres::mem_pool::set_attribute(
                pool,
                dsys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                (&mut threshold as *mut u64).cast(),
            );
        }
    }
}

impl std::fmt::Debug for GpuDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuDevice")
            .field("ordinal", &self.ordinal)
            .field("name", &self.props.name)
            .field("target", &self.target)
            .finish()
    }
}

impl GpuDevice {
    /// Every CUDA device the driver reports, with its properties; an empty list when the driver
    /// loads but has no device. Does not create contexts.
    pub fn discover() -> Result<Vec<DeviceInfo>, GpuError> {
        let count = device_count()?;
        guarded("libcuda", || {
            (0..count)
                .map(|ordinal| {
                    let dev = dres::device::get(ordinal as i32)
                        .during(|| format!("cuDeviceGet({ordinal})"))?;
                    Ok(DeviceInfo {
                        ordinal,
                        props: read_props(dev)?,
                    })
                })
                .collect()
        })
    }

    /// Opens device `ordinal` with the kernel cache at its default location, sharing the
    /// loaded kernels with every other handle this process opened this way. The handle has a
    /// stream no live handle uses: a new one, or that of a handle whose last clone was
    /// dropped (see the `Drop` of [`GpuDevice`]).
    ///
    /// An open of the same device started by [`GpuDevice::open_ahead`] is waited for first,
    /// and its handle taken.
    pub fn open(ordinal: usize) -> Result<GpuDevice, GpuError> {
        let ahead = opens_ahead()
            .lock()
            .ok()
            .and_then(|mut m| m.remove(&ordinal));
        if let Some(opening) = ahead {
            // A failed open ahead left nothing: the open below fails again and reports why.
            opening.waited.store(true, Ordering::Relaxed);
            let _ = opening.thread.join();
        }
        GpuDevice::open_kept_or_new(ordinal)
    }

    /// Starts [`GpuDevice::open`]`(ordinal)` on a thread of its own and returns at once, so
    /// that creating the context (a quarter of a second on a large GPU, in a new process)
    /// overlaps the caller's own work, such as reading its input. The handle is kept for the
    /// next `open(ordinal)`, which waits for this one to finish. Does nothing when an open of
    /// the device is already under way or a handle is kept; an error (no driver, no such
    /// device) is not reported here but by the later `open`, which tries again.
    pub fn open_ahead(ordinal: usize) {
        GpuDevice::open_ahead_then(ordinal, None);
    }

    /// [`GpuDevice::open_ahead`], and on the same thread, once the context exists,
    /// [`GpuDevice::prepare_for_upload`]`(rows, entries)`: a caller that knows the size of the
    /// matrix it is about to set up (a file's size line) has the device's first-use costs paid
    /// while it reads the matrix too. Only while no [`GpuDevice::open`] waits: a step not
    /// begun by then is left to the setup, which runs it beside its host work (measured on
    /// an H200 in fresh processes: preparing for small matrices, read long before the context
    /// exists, added 16 ms on average to the wait for the open and saved 4-21 ms inside the
    /// setup). A failed preparation is not reported: the setup then pays those costs itself.
    pub fn open_ahead_for(ordinal: usize, rows: usize, entries: usize) {
        GpuDevice::open_ahead_then(ordinal, Some((rows, entries)));
    }

    fn open_ahead_then(ordinal: usize, upload: Option<(usize, usize)>) {
        let Ok(mut ahead) = opens_ahead().lock() else {
            return;
        };
        let kept = idle_handles()
            .lock()
            .map(|idle| idle.get(&ordinal).is_some_and(|v| !v.is_empty()))
            .unwrap_or(false);
        if kept || ahead.contains_key(&ordinal) {
            return;
        }
        let waited = Arc::new(AtomicBool::new(false));
        let stop = waited.clone();
        let opening = std::thread::Builder::new()
            .name(format!("open gpu {ordinal}"))
            .spawn(move || {
                // Dropping the handle keeps it (the Drop of GpuDevice) for the next open.
                let opened = GpuDevice::open_kept_or_new(ordinal);
                if let (Ok(dev), Some((rows, entries))) = (&opened, upload) {
                    let _ = dev.prepare_unless(rows, entries, &|| stop.load(Ordering::Relaxed));
                }
            });
        if let Ok(thread) = opening {
            ahead.insert(ordinal, OpenAhead { thread, waited });
        }
    }

    /// Waits for every open [`GpuDevice::open_ahead`] started that no [`GpuDevice::open`] has
    /// taken yet (their handles stay kept for a later open). A process should not exit while a
    /// context is being created on another thread, where the driver's exit handlers could run
    /// under it: a program that may stop before it opens the device it opened ahead (an error
    /// in its input) calls this first.
    pub fn finish_opens_ahead() {
        let pending: Vec<OpenAhead> = opens_ahead()
            .lock()
            .map(|mut m| m.drain().map(|(_, h)| h).collect())
            .unwrap_or_default();
        for opening in pending {
            let _ = opening.thread.join();
        }
    }

    /// A kept handle of device `ordinal`, or a new one.
    fn open_kept_or_new(ordinal: usize) -> Result<GpuDevice, GpuError> {
        let kept = idle_handles()
            .lock()
            .ok()
            .and_then(|mut idle| idle.get_mut(&ordinal)?.pop());
        if let Some(inner) = kept {
            return Ok(GpuDevice { inner });
        }
        GpuDevice::open_in(ordinal, true, || Registry::shared(ordinal))
    }

    /// Opens device `ordinal` with the given kernel cache and a registry of its own (nothing
    /// loaded yet).
    pub fn open_with_cache(ordinal: usize, cache: KernelCache) -> Result<GpuDevice, GpuError> {
        GpuDevice::open_in(ordinal, false, || Registry::new(cache))
    }

    fn open_in(
        ordinal: usize,
        reusable: bool,
        registry: impl FnOnce() -> Arc<Registry>,
    ) -> Result<GpuDevice, GpuError> {
        let count = device_count()?;
        if ordinal >= count {
            return Err(GpuError::NoDevice { ordinal, count });
        }
        guarded("libcuda", || {
            let ctx = CudaContext::new(ordinal)
                .during(|| format!("creating a context on device {ordinal}"))?;
            // SAFETY: every buffer of this device is allocated after this call and used on the
            // one stream created below, so no cross-stream synchronisation is needed.
            unsafe { ctx.disable_event_tracking() };
            let stream = ctx
                .new_stream()
                .during(|| format!("creating a stream on device {ordinal}"))?;
            let dev =
                dres::device::get(ordinal as i32).during(|| format!("cuDeviceGet({ordinal})"))?;
            let props = read_props(dev)?;
            keep_freed_memory(dev, props.total_mem as u64 / 2);
            let target =
                Target::for_capability(props.compute_capability.0, props.compute_capability.1);
            Ok(GpuDevice {
                inner: Arc::new(DeviceState {
                    ordinal,
                    ctx,
                    stream,
                    props,
                    target,
                    registry: registry(),
                    reusable,
                }),
            })
        })
    }

    /// Driver ordinal.
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }

    /// Readies the device for a setup of a CSR matrix of `rows` rows and `entries` stored
    /// entries, paying now what the first setup of a process would pay inside its upload
    /// (measured on an H200 for a 0.62 GB upload that takes 24 ms in a warm process and 45-50
    /// ms in a fresh one): the page-locked staging buffers (about 6 ms, where the upload is
    /// staged), the growth of the memory pool (about 8 ms per 0.6 GB mapped; freed memory is
    /// kept for the process up to half the device, see `keep_freed_memory`) and the load of
    /// the module of the upload's checks ([`crate::kernels::ssor::row_checks`]). The pool grows
    /// by twice the CSR arrays' bytes and 80 bytes a row (the plan's formats and the
    /// iteration's vectors), at most a quarter of the free memory. Returns when all of it is
    /// done; nothing stays allocated.
    pub fn prepare_for_upload(&self, rows: usize, entries: usize) -> Result<(), GpuError> {
        self.prepare_unless(rows, entries, &|| false)
    }

    /// [`GpuDevice::prepare_for_upload`], one step at a time (the pool's growth, the staging
    /// buffers, the module), each begun only while `stop()` is false.
    fn prepare_unless(
        &self,
        rows: usize,
        entries: usize,
        stop: &dyn Fn() -> bool,
    ) -> Result<(), GpuError> {
        let csr = crate::DeviceCsr::arrays_bytes(rows, entries);
        let (free, _) = self.mem_info()?;
        let grow = csr
            .saturating_mul(2)
            .saturating_add(rows.saturating_mul(80))
            .min(free / 4);
        if grow > 0 && !stop() {
            // SAFETY: the bytes are never read or written; the allocation only grows the pool.
            let block = unsafe { self.stream.alloc::<u8>(grow) }
                .during(|| format!("growing the memory pool by {grow} bytes"))?;
            drop(block);
            self.synchronize()?;
        }
        if csr >= crate::staging::STAGED_MIN_BYTES && !stop() {
            self.stage().prepare(self.stream());
        }
        if stop() {
            return Ok(());
        }
        crate::kernels::ssor::preload_checks(self)
    }

    /// Bytes the device's memory pool (that of every allocation here) holds from the driver,
    /// and bytes of it allocated now: `(reserved, used)`.
    pub fn pool_bytes(&self) -> Result<(u64, u64), GpuError> {
        let what = || format!("reading the memory pool of device {}", self.ordinal);
        self.ctx.bind_to_thread().during(what)?;
        let dev = dres::device::get(self.ordinal as i32).during(what)?;
        let read = |attr| -> Result<u64, GpuError> {
            let mut v = 0u64;
            // SAFETY: `dev` comes from cuDeviceGet; both attributes read are cuuint64_t,
            // written to `v` during the call.
            unsafe {
                let pool = dres::device::get_default_mem_pool(dev).during(what)?;
                dres::mem_pool::get_attribute(pool, attr, (&mut v as *mut u64).cast())
                    .during(what)?;
            }
            Ok(v)
        };
        Ok((
            read(dsys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)?,
            read(dsys::CUmemPool_attribute::CU_MEMPOOL_ATTR_USED_MEM_CURRENT)?,
        ))
    }

    /// Device properties.
    pub fn props(&self) -> &DeviceProps {
        &self.props
    }

    /// What kernels are compiled to for this device.
    pub fn target(&self) -> Target {
        self.target
    }

    /// Counters of the kernel cache (of every handle sharing this one's registry).
    pub fn cache_stats(&self) -> CacheStats {
        self.registry.cache.stats()
    }

    /// Free and total device memory, bytes.
    pub fn mem_info(&self) -> Result<(usize, usize), GpuError> {
        self.ctx
            .mem_get_info()
            .during(|| "reading free memory".into())
    }

    /// Waits until all queued work has finished; reports errors of earlier launches.
    pub fn synchronize(&self) -> Result<(), GpuError> {
        self.stream
            .synchronize()
            .during(|| format!("synchronising device {}", self.ordinal))
    }

    /// An identifier of the handle's stream (equal for two handles exactly when they queue
    /// on the same stream).
    pub fn stream_id(&self) -> usize {
        self.stream.cu_stream() as usize
    }

    pub(crate) fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    pub(crate) fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// The staging buffers of large copies, shared with every handle of this registry.
    pub(crate) fn stage(&self) -> &StageCell {
        &self.registry.stage
    }

    fn module(&self, spec: &ModuleSpec) -> Result<Arc<CudaModule>, GpuError> {
        let reg = &self.registry;
        let mut modules = reg.modules.lock().map_err(|_| GpuError::InvalidInput {
            what: "kernel registry".into(),
            reason: "a thread panicked while holding the registry lock".into(),
        })?;
        if let Some(m) = modules.get(spec) {
            return Ok(m.clone());
        }
        let (image, key, from_disk) = reg.cache.get_or_compile(spec, self.target)?;
        let module = match self.ctx.load_module(Ptx::from_binary(image)) {
            Ok(m) => m,
            Err(e) if from_disk => {
                // The entry decoded but the driver refuses it: drop it and build afresh.
                let _ = e;
                reg.cache.invalidate(&key);
                let fresh = compile_module(spec, self.target)?;
                reg.cache.store(&key, &fresh);
                self.ctx
                    .load_module(Ptx::from_binary(fresh))
                    .during(|| format!("loading module {spec}"))?
            }
            Err(e) => return Err(GpuError::driver(format!("loading module {spec}"), e)),
        };
        modules.insert(spec.clone(), module.clone());
        Ok(module)
    }

    /// Whether module `spec` is loaded in this device's context (by any handle of it): a
    /// kernel of it launches without compiling or loading first.
    pub fn module_loaded(&self, spec: &ModuleSpec) -> bool {
        self.registry
            .modules
            .lock()
            .is_ok_and(|m| m.contains_key(spec))
    }

    /// The kernel `entry` of module `spec`, compiling (or reading from the cache) and loading
    /// the module on first use.
    pub fn kernel(&self, spec: &ModuleSpec, entry: &str) -> Result<Kernel, GpuError> {
        // The hot path (every launch): a lookup without allocating.
        if let Ok(k) = self.registry.kernels.lock() {
            if let Some(k) = k.get(spec).and_then(|m| m.get(entry)) {
                return Ok(k.clone());
            }
        }
        let module = self.module(spec)?;
        let func = module.load_function(entry).map_err(|e| {
            if e.0 == dsys::cudaError_enum::CUDA_ERROR_NOT_FOUND {
                GpuError::MissingEntry {
                    file: spec.to_string(),
                    entry: entry.to_string(),
                }
            } else {
                GpuError::driver(format!("loading kernel {entry} from {spec}"), e)
            }
        })?;
        let attrs = read_attrs(&func, entry)?;
        let k = Kernel {
            name: entry.to_string(),
            module: spec.clone(),
            attrs,
            func,
        };
        if let Ok(mut m) = self.registry.kernels.lock() {
            m.entry(spec.clone())
                .or_default()
                .insert(entry.to_string(), k.clone());
        }
        Ok(k)
    }

    /// Compiles and loads every module of the kernel pool and every entry point the launch
    /// wrappers use (do this before timing anything). Returns the number of kernels.
    pub fn compile_all(&self) -> Result<usize, GpuError> {
        let mut n = 0;
        for (spec, entries) in catalog() {
            for e in entries {
                self.kernel(&spec, &e)?;
                n += 1;
            }
        }
        Ok(n)
    }
}

/// A point in one device's stream that the streams of other [`GpuDevice`] handles can wait
/// for ([`GpuDevice::record`], [`GpuDevice::wait_for`]): the ordering between the streams of
/// several devices, or of several handles opened on one device.
pub struct GpuEvent {
    event: cudarc::driver::CudaEvent,
}

impl std::fmt::Debug for GpuEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuEvent").finish_non_exhaustive()
    }
}

/// Streams of several devices, or several streams of one device. Each [`GpuDevice::open`]
/// creates its own stream, so opening one ordinal twice gives two handles whose work runs in
/// no fixed order unless events order it; both share the device's primary context, so their
/// buffers can be copied into each other with plain device-to-device copies.
impl GpuDevice {
    /// Whether `other` is a clone of this handle (the same stream and kernel registry), as
    /// opposed to another [`GpuDevice::open`] of some device.
    pub fn same_handle(&self, other: &GpuDevice) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Whether `other`'s buffers live in this handle's context (same device, primary context):
    /// then a copy between them is a device-to-device copy, otherwise a peer copy.
    pub fn shares_context(&self, other: &GpuDevice) -> bool {
        self.ctx.cu_ctx() == other.ctx.cu_ctx()
    }

    /// Lets this device's context read and write `other`'s memory directly (peer access),
    /// when the two are different devices that support it. Returns whether direct access is
    /// on; when it is not, [`GpuDevice::copy_range_from`] still works (the driver stages the
    /// copy through the host).
    pub fn enable_peer_access(&self, other: &GpuDevice) -> Result<bool, GpuError> {
        if self.shares_context(other) {
            return Ok(true);
        }
        guarded("libcuda", || {
            let mut can: std::ffi::c_int = 0;
            // SAFETY: both handles come from cuDeviceGet after cuInit; `can` is a valid out
            // pointer.
            unsafe {
                dsys::cuDeviceCanAccessPeer(&mut can, self.ctx.cu_device(), other.ctx.cu_device())
            }
            .result()
            .during(|| {
                format!(
                    "asking whether device {} can access device {}",
                    self.ordinal, other.ordinal
                )
            })?;
            if can == 0 {
                return Ok(false);
            }
            self.ctx
                .bind_to_thread()
                .during(|| format!("binding the context of device {}", self.ordinal))?;
            // SAFETY: the current context is this device's; `other`'s context lives as long as
            // its handle, and peer access is only a mapping between the two.
            match unsafe { dsys::cuCtxEnablePeerAccess(other.ctx.cu_ctx(), 0) }.result() {
                Ok(())
                | Err(dres::DriverError(
                    dsys::cudaError_enum::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED,
                )) => Ok(true),
                Err(e) => Err(GpuError::driver(
                    format!(
                        "enabling access from device {} to device {}",
                        self.ordinal, other.ordinal
                    ),
                    e,
                )),
            }
        })
    }

    /// A new event of this device's context (no timing), not yet recorded.
    pub fn new_event(&self) -> Result<GpuEvent, GpuError> {
        let event = self
            .ctx
            .new_event(None)
            .during(|| format!("creating an event on device {}", self.ordinal))?;
        Ok(GpuEvent { event })
    }

    /// Records `event` at the current end of this handle's stream: a later
    /// [`GpuDevice::wait_for`] on any stream waits for the work queued here so far. `event`
    /// must have been made by a handle sharing this one's context.
    pub fn record(&self, event: &GpuEvent) -> Result<(), GpuError> {
        event
            .event
            .record(&self.stream)
            .during(|| format!("recording an event on device {}", self.ordinal))
    }

    /// Makes the work queued on this handle's stream from now on wait for the work `event`
    /// recorded (on any device's stream). Does not block the host. Waiting for an event never
    /// recorded waits for nothing.
    pub fn wait_for(&self, event: &GpuEvent) -> Result<(), GpuError> {
        self.stream
            .wait(&event.event)
            .during(|| format!("queueing a wait for an event on device {}", self.ordinal))
    }

    /// `dst[dst_start .. dst_start + len] = src[src_range]`, queued on this handle's stream,
    /// where `dst` is this handle's buffer and `src` belongs to `src_dev` (another device, or
    /// another handle of this one). A device-to-device copy when the two share a context, else
    /// a peer copy. Only this stream orders the copy: the caller makes it wait (with
    /// [`GpuDevice::wait_for`]) for the work on `src_dev` that writes `src`, and makes later
    /// writes of `src` wait for the copy.
    pub fn copy_range_from<T: crate::memory::DeviceScalar>(
        &self,
        src_dev: &GpuDevice,
        src: &crate::DeviceVec<T>,
        src_range: std::ops::Range<usize>,
        dst: &mut crate::DeviceVec<T>,
        dst_start: usize,
    ) -> Result<(), GpuError> {
        use cudarc::driver::{DevicePtr, DevicePtrMut};
        let len = src_range.len();
        if src_range.start > src_range.end
            || src_range.end > src.len()
            || dst_start.checked_add(len).is_none_or(|end| end > dst.len())
        {
            return Err(GpuError::InvalidInput {
                what: "copy between devices".into(),
                reason: format!(
                    "source range {src_range:?} of {} elements to offset {dst_start} of {}",
                    src.len(),
                    dst.len()
                ),
            });
        }
        if len == 0 {
            return Ok(());
        }
        let size = std::mem::size_of::<T>();
        let bytes = len * size;
        // Event tracking is off on every context this crate opens: the guards do nothing.
        let (src_ptr, _src_guard) = src.buf.device_ptr(&src_dev.stream);
        let (dst_ptr, _dst_guard) = dst.buf.device_ptr_mut(&self.stream);
        let src_ptr = src_ptr + (src_range.start * size) as u64;
        let dst_ptr = dst_ptr + (dst_start * size) as u64;
        self.ctx
            .bind_to_thread()
            .during(|| format!("binding the context of device {}", self.ordinal))?;
        let what = || {
            format!(
                "copying {len} elements from device {} to device {}",
                src_dev.ordinal, self.ordinal
            )
        };
        if self.shares_context(src_dev) {
            // SAFETY: both ranges were checked to lie inside their buffers, which live in this
            // context and outlive the call; the stream is this context's.
            unsafe { dres::memcpy_dtod_async(dst_ptr, src_ptr, bytes, self.stream.cu_stream()) }
                .during(what)
        } else {
            // SAFETY: as above, each pointer with the context that owns it.
            unsafe {
                dres::memcpy_peer_async(
                    self.ctx.cu_ctx(),
                    dst_ptr,
                    src_dev.ctx.cu_ctx(),
                    src_ptr,
                    bytes,
                    self.stream.cu_stream(),
                )
            }
            .during(what)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_handles_can_move_between_threads() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<GpuDevice>();
        send_sync::<Kernel>();
        send_sync::<crate::DeviceVec<f64>>();
        send_sync::<crate::DeviceCsr>();
    }
}
