// mock_cuda.cpp: the CUDA runtime API of cuda_runtime.h implemented on the host, for the
// emulated run of an emitted solver (tests/emitted_driver.rs).
//
// Device memory is host memory; a stream runs everything at once; stream capture records the
// operations and a graph launch replays them. A kernel launch (clang's host stub calls
// cudaConfigureCall, cudaSetupArgument per argument, then cudaLaunch with the stub's address)
// runs a sequential host version of the kernel with the same arguments and meaning as the
// CUDA source in kernels/ (sums in row order, so results differ from a GPU in the last bits).
// The recurrence is the real one: cg_scalars.cuh is included. Launch configurations are checked
// where a kernel needs them (threads per block of the reductions, covering launches, whole
// warps).
//
// cuSPARSE's generic SpMV (cusparse.h here) is implemented too, for plans that hand an operand
// to it: a product runs the CSR product in row order, like a kernel launch (recorded during a
// capture, with the vector addresses the descriptors hold when it is called). The calls the
// solver must keep out of a capture (creation, buffer size, preprocessing) end the run when
// captured, and a product needs the handle bound to a stream, y = 1 * A x + 0 * y, and the
// buffer and algorithm of the preprocessing. At exit the number of products run is printed on
// stderr ("mock_cuda: N cuSPARSE products"), when there were any.
//
// Several devices: MOCK_DEVICE_COUNT (default 1; below 1 or not a number ends the run) is what
// cudaGetDeviceCount reports, all alike. cudaSetDevice sets the current device (an ordinal
// outside 0..count is cudaErrorInvalidValue), and streams, events and allocations (cudaMalloc;
// cudaMallocHost as host memory) remember the device current when they were made. Checked: a
// kernel launched on a stream of another device than the current one; an event recorded on a
// stream of another device than its own (waiting on an event of another device is allowed);
// a stream or event that the mock did not make or that was destroyed; a peer copy
// (cudaMemcpyPeerAsync) whose source or destination range is not inside an allocation made on
// the device it names. All devices share the one host memory and everything still runs at once
// in issue order, so events are bookkeeping (recorded as no-ops during a capture) and a peer
// copy is a memmove (recorded like any copy). Peer access: cudaDeviceCanAccessPeer answers 1
// for two distinct valid devices (0 for a device and itself); cudaDeviceEnablePeerAccess
// succeeds once per (current, peer) pair, and answers cudaErrorPeerAccessAlreadyEnabled after
// that, as CUDA does (also left for cudaGetLastError).
//
// MOCK_DEVICE_NAME sets the device name (default "NVIDIA H200", compute capability 9.0).
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#define __device__
#define __forceinline__ inline
using std::isfinite;
#include "cg_scalars.cuh"

typedef unsigned long long u64;
typedef unsigned int u32;

struct dim3 {
    unsigned x, y, z;
};
typedef struct CUstream_st *cudaStream_t;
struct CUstream_st {
    int id;
    int device; // current when the stream was created
};
typedef struct CUevent_st *cudaEvent_t;
struct CUevent_st {
    int device; // current when the event was created
    unsigned flags;
};
struct CUgraph_st {
    std::vector<std::function<void()>> ops;
};
struct CUgraphExec_st {
    std::vector<std::function<void()>> ops;
};
typedef CUgraph_st *cudaGraph_t;
typedef CUgraphExec_st *cudaGraphExec_t;
enum cudaError_t { cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorPeerAccessAlreadyEnabled = 704 };
enum cudaMemcpyKind { cudaMemcpyHostToHost = 0, cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2, cudaMemcpyDeviceToDevice = 3 };
enum cudaStreamCaptureMode { cudaStreamCaptureModeGlobal = 0, cudaStreamCaptureModeThreadLocal = 1, cudaStreamCaptureModeRelaxed = 2 };
enum cudaDeviceAttr { cudaDevAttrMaxThreadsPerMultiProcessor = 39, cudaDevAttrMultiProcessorCount = 16, cudaDevAttrComputeCapabilityMajor = 75, cudaDevAttrComputeCapabilityMinor = 76, cudaDevAttrMaxBlocksPerMultiprocessor = 106 };
struct cudaFuncAttributes { size_t sharedSizeBytes; int numRegs; int maxThreadsPerBlock; };
struct cudaDeviceProp {
    char name[256];
    int major, minor, multiProcessorCount, maxThreadsPerMultiProcessor, maxBlocksPerMultiProcessor;
};

static void die(const std::string &m) {
    std::fprintf(stderr, "mock_cuda: %s\n", m.c_str());
    std::exit(70);
}

// ----------------------------------------------------------------------------- devices

// MOCK_DEVICE_COUNT, read once.
static int device_count() {
    static int count = 0;
    if (count == 0) {
        const char *v = std::getenv("MOCK_DEVICE_COUNT");
        if (v == nullptr) {
            count = 1;
        } else {
            char *end = nullptr;
            errno = 0;
            const long n = std::strtol(v, &end, 10);
            if (end == v || *end != '\0' || errno != 0 || n < 1 || n > INT_MAX) {
                die(std::string("MOCK_DEVICE_COUNT is not a device count of at least 1: \"") + v + "\"");
            }
            count = (int)n;
        }
    }
    return count;
}
static bool valid_device(int d) { return d >= 0 && d < device_count(); }

static int g_device = 0; // the current device (cudaSetDevice)

// The streams and events the mock made and has not destroyed.
static std::set<const CUstream_st *> g_streams;
static std::set<const CUevent_st *> g_events;

// The device of stream s: the current device for the default stream (NULL), else the device
// the stream was created on; a stream the mock does not know ends the run.
static int stream_device(cudaStream_t s, const char *call) {
    if (s == nullptr) return g_device;
    if (g_streams.count(s) == 0) die(std::string(call) + ": a stream the mock did not create, or destroyed");
    return s->device;
}
static void known_event(cudaEvent_t e, const char *call) {
    if (e == nullptr || g_events.count(e) == 0) die(std::string(call) + ": an event the mock did not create, or destroyed");
}

// Allocations by base address: requested size and device (-1: host memory, cudaMallocHost).
struct Alloc {
    size_t bytes;
    int device;
};
static std::map<uintptr_t, Alloc> g_allocs;

static void note_alloc(void *p, size_t bytes, int device) {
    if (p != nullptr) g_allocs[(uintptr_t)p] = Alloc{bytes, device};
}
static void forget_alloc(void *p) { g_allocs.erase((uintptr_t)p); }

static std::string hex(const void *p) {
    char b[32];
    std::snprintf(b, sizeof b, "%p", p);
    return b;
}

// Checks that [p, p + bytes) lies in one allocation made on `device`; `what` names the range
// in the message.
static void in_device_alloc(const char *call, const char *what, const void *p, size_t bytes, int device) {
    const std::string w = std::string(call) + ": " + what + " " + hex(p) + " (" + std::to_string(bytes) + " bytes)";
    const uintptr_t a = (uintptr_t)p;
    auto it = g_allocs.upper_bound(a);
    if (it == g_allocs.begin()) die(w + " is in no allocation");
    --it;
    const uintptr_t base = it->first;
    const Alloc &al = it->second;
    const size_t off = a - base;
    if (off >= (al.bytes > 0 ? al.bytes : 1)) die(w + " is in no allocation");
    if (al.device != device) {
        die(w + " lies in an allocation " + (al.device < 0 ? std::string("of host memory") : "made on device " + std::to_string(al.device)) +
            ", not on device " + std::to_string(device));
    }
    if (bytes > al.bytes - off) {
        die(w + " runs past the end of its allocation (" + std::to_string(al.bytes) + " bytes, the range starts at offset " +
            std::to_string(off) + ")");
    }
}

// The (device, peer) pairs cudaDeviceEnablePeerAccess enabled.
static std::set<std::pair<int, int>> g_peer_enabled;

// ----------------------------------------------------------------------------- capture

static CUgraph_st *g_capture = nullptr;
static cudaError_t g_error = cudaSuccess;
static long long g_launches = 0;

static void run_or_record(std::function<void()> op) {
    if (g_capture) {
        g_capture->ops.push_back(std::move(op));
    } else {
        op();
    }
}

// ------------------------------------------------------------------------------ kernels

struct Launch {
    dim3 grid, block;
    size_t smem;
    std::vector<unsigned char> buf;
    std::vector<std::pair<size_t, size_t>> args; // (offset, size)
    template <typename T> T get(size_t i) const {
        if (i >= args.size() || args[i].second != sizeof(T)) {
            die("argument " + std::to_string(i) + " has the wrong size");
        }
        T v;
        std::memcpy(&v, buf.data() + args[i].first, sizeof(T));
        return v;
    }
    u64 threads() const { return (u64)grid.x * block.x; }
};

static Launch g_pending;

typedef void (*KernelFn)(const Launch &);

static void cover(const Launch &L, u64 items, const char *k) {
    if (L.threads() < items) die(std::string(k) + ": the launch does not cover its items");
}

static void whole_warps(const Launch &L, const char *k) {
    if (L.block.x % 32 != 0) die(std::string(k) + ": threads per block not a multiple of 32");
}

// The update in its three forms (vector.cu): u read from its own vector (cg_update_*: n,
// scalars, u, w, p, s, x, r), u is r (cg_update_nopre_*: n, scalars, w, p, s, x, r), Jacobi
// fused (cg_update_jacobi_*: n, scalars, dinv, u, w, p, s, x, r; writes u = dinv r_new).
enum UpdateForm { SEPARATE, NOPRE, JACOBI };
static void cg_update(const Launch &L, UpdateForm form) {
    const u64 n = L.get<u64>(0);
    const double *sc = L.get<const double *>(1);
    const size_t o = form == SEPARATE ? 0 : (form == NOPRE ? 1 : 0);
    const double *dinv = form == JACOBI ? L.get<const double *>(2) : nullptr;
    double *u = form == JACOBI ? L.get<double *>(3) : (form == SEPARATE ? L.get<double *>(2) : nullptr);
    const size_t b = form == JACOBI ? 4 : 3 - o;
    const double *w = L.get<const double *>(b);
    double *p = L.get<double *>(b + 1), *s = L.get<double *>(b + 2), *x = L.get<double *>(b + 3), *r = L.get<double *>(b + 4);
    if (sc[CG_HALT] != CG_HALT_NONE) return;
    const double alpha = sc[CG_ALPHA], beta = sc[CG_BETA];
    for (u64 i = 0; i < n; ++i) {
        const double ui = form == NOPRE ? r[i] : u[i];
        const double pn = beta == 0.0 ? ui : ui + beta * p[i];
        const double sn = beta == 0.0 ? w[i] : w[i] + beta * s[i];
        p[i] = pn;
        s[i] = sn;
        x[i] += alpha * pn;
        r[i] -= alpha * sn;
        if (form == JACOBI) u[i] = dinv[i] * r[i];
    }
}
static void k_cg_update_elem(const Launch &L) { cover(L, L.get<u64>(0), "cg_update_elem"); cg_update(L, SEPARATE); }
static void k_cg_update_elem_v2(const Launch &L) { cover(L, (L.get<u64>(0) + 1) / 2, "cg_update_elem_v2"); cg_update(L, SEPARATE); }
static void k_cg_update_grid(const Launch &L) { cg_update(L, SEPARATE); }
static void k_cg_update_nopre_elem(const Launch &L) { cover(L, L.get<u64>(0), "cg_update_nopre_elem"); cg_update(L, NOPRE); }
static void k_cg_update_nopre_elem_v2(const Launch &L) { cover(L, (L.get<u64>(0) + 1) / 2, "cg_update_nopre_elem_v2"); cg_update(L, NOPRE); }
static void k_cg_update_nopre_grid(const Launch &L) { cg_update(L, NOPRE); }
static void k_cg_update_jacobi_elem(const Launch &L) { cover(L, L.get<u64>(0), "cg_update_jacobi_elem"); cg_update(L, JACOBI); }
static void k_cg_update_jacobi_elem_v2(const Launch &L) { cover(L, (L.get<u64>(0) + 1) / 2, "cg_update_jacobi_elem_v2"); cg_update(L, JACOBI); }
static void k_cg_update_jacobi_grid(const Launch &L) { cg_update(L, JACOBI); }

static void k_xpay(const Launch &L) {
    const u64 n = L.get<u64>(0);
    const double a = L.get<double>(1);
    const double *x = L.get<const double *>(2);
    double *y = L.get<double *>(3);
    for (u64 i = 0; i < n; ++i) y[i] = x[i] + a * y[i];
}

static void k_jacobi(const Launch &L) {
    const u64 n = L.get<u64>(0);
    const double *d = L.get<const double *>(1), *r = L.get<const double *>(2);
    double *z = L.get<double *>(3);
    for (u64 i = 0; i < n; ++i) z[i] = d[i] * r[i];
}

// CSR (spmv_csr.cu: nrows, indptr, indices, vals, x, y): y = A x, or y += A x (add: the halo
// part of a row block, *_add), each row's sum taken from 0 in index order and then stored or
// added.
static void csr(const Launch &L, bool add = false) {
    const u32 nrows = L.get<u32>(0);
    const u32 *ptr = L.get<const u32 *>(1), *idx = L.get<const u32 *>(2);
    const double *v = L.get<const double *>(3), *x = L.get<const double *>(4);
    double *y = L.get<double *>(5);
    for (u32 i = 0; i < nrows; ++i) {
        double s = 0.0;
        for (u32 k = ptr[i]; k < ptr[i + 1]; ++k) s += v[k] * x[idx[k]];
        if (add) {
            y[i] += s;
        } else {
            y[i] = s;
        }
    }
}
static void k_csr_scalar(const Launch &L) { csr(L); }
static void k_csr_vector(const Launch &L) { whole_warps(L, "spmv_csr_vector"); csr(L); }
static void k_csr_scalar_add(const Launch &L) { csr(L, true); }
static void k_csr_vector_add(const Launch &L) { whole_warps(L, "spmv_csr_vector_add"); csr(L, true); }

// gather_f64 (vector.cu: n, idx, src, out): out[k] = src[idx[k]] for k < n; grid-stride.
static void k_gather(const Launch &L) {
    const u32 n = L.get<u32>(0);
    const u32 *idx = L.get<const u32 *>(1);
    const double *src = L.get<const double *>(2);
    double *out = L.get<double *>(3);
    for (u32 k = 0; k < n; ++k) out[k] = src[idx[k]];
}

static void k_csr_merge(const Launch &L) {
    whole_warps(L, "spmv_csr_merge");
    if (L.smem != (L.block.x / 32) * 32 * 7 * 12) die("spmv_csr_merge: wrong dynamic shared memory");
    const u32 nrows = L.get<u32>(0);
    const u32 *ptr = L.get<const u32 *>(2), *idx = L.get<const u32 *>(3);
    const double *v = L.get<const double *>(4), *x = L.get<const double *>(5);
    double *y = L.get<double *>(6);
    (void)L.get<const u32 *>(7);
    for (u32 i = 0; i < nrows; ++i) {
        double s = 0.0;
        for (u32 k = ptr[i]; k < ptr[i + 1]; ++k) s += v[k] * x[idx[k]];
        y[i] = s;
    }
}
static void k_merge_fixup(const Launch &L) { whole_warps(L, "spmv_csr_merge_fixup"); }
static void k_merge_partition(const Launch &L) {
    const u32 ntiles = L.get<u32>(3);
    u32 *tile_rows = L.get<u32 *>(4);
    for (u32 t = 0; t <= ntiles; ++t) tile_rows[t] = 0;
}

static void k_ell(const Launch &L) {
    const u32 nrows = L.get<u32>(0), width = L.get<u32>(1);
    const u32 *cols = L.get<const u32 *>(2);
    const double *v = L.get<const double *>(3), *x = L.get<const double *>(4);
    double *y = L.get<double *>(5);
    for (u32 i = 0; i < nrows; ++i) {
        double s = 0.0;
        for (u32 k = 0; k < width; ++k) {
            const u64 slot = (u64)k * nrows + i;
            if (cols[slot] != 0xffffffffu) s += v[slot] * x[cols[slot]];
        }
        y[i] = s;
    }
}

static void k_dia(const Launch &L) {
    const u32 nrows = L.get<u32>(0), ncols = L.get<u32>(1), ndiag = L.get<u32>(2);
    const int *off = L.get<const int *>(3);
    const double *data = L.get<const double *>(4), *x = L.get<const double *>(5);
    double *y = L.get<double *>(6);
    for (u32 i = 0; i < nrows; ++i) {
        double s = 0.0;
        for (u32 d = 0; d < ndiag; ++d) {
            const long long c = (long long)i + off[d];
            if (c >= 0 && c < (long long)ncols) s += data[(u64)d * nrows + i] * x[c];
        }
        y[i] = s;
    }
}

static void k_coo(const Launch &L) {
    const u32 nnz = L.get<u32>(0);
    const u32 *rows = L.get<const u32 *>(1), *cols = L.get<const u32 *>(2);
    const double *v = L.get<const double *>(3), *x = L.get<const double *>(4);
    double *y = L.get<double *>(5);
    for (u32 k = 0; k < nnz; ++k) y[rows[k]] += v[k] * x[cols[k]];
}
static void k_coo_segment(const Launch &L) { whole_warps(L, "spmv_coo_segment"); k_coo(L); }

// The SpMV kernels with the three dots in their epilogue (spmv_*_dot3_next: the matrix, u, w,
// r, partial, counter, scalars, history, history_cap): w = A u in row order, then the dots in
// row order and cg_advance for CG_ITER + 1. Whole warps; the ticket counter must be 0. `first`
// is the index of u among the arguments (after the matrix's).
static void dots_epilogue(const Launch &L, const char *k, u32 nrows, int first) {
    whole_warps(L, k);
    const double *u = L.get<const double *>(first), *w = L.get<const double *>(first + 1);
    const double *r = L.get<const double *>(first + 2);
    if (*L.get<u32 *>(first + 4) != 0) die(std::string(k) + ": the ticket counter is not zero");
    double *sc = L.get<double *>(first + 5), *hist = L.get<double *>(first + 6);
    const u32 cap = L.get<u32>(first + 7);
    double g = 0.0, d = 0.0, q = 0.0;
    for (u32 i = 0; i < nrows; ++i) {
        g += r[i] * u[i];
        d += w[i] * u[i];
        q += r[i] * r[i];
    }
    cg_advance(g, d, q, sc, hist, cap, (u32)sc[CG_ITER] + 1u);
}
static void k_csr_dot3(const Launch &L) {
    csr(L);
    dots_epilogue(L, "spmv_csr_*_dot3_next", L.get<u32>(0), 4);
}
static void k_ell_dot3(const Launch &L) {
    k_ell(L);
    dots_epilogue(L, "spmv_ell_dot3_next", L.get<u32>(0), 4);
}
// spmv_dia_dot3_next takes no ncols (the matrix is square): its own product.
static void k_dia_dot3(const Launch &L) {
    const u32 nrows = L.get<u32>(0), ndiag = L.get<u32>(1);
    const int *off = L.get<const int *>(2);
    const double *data = L.get<const double *>(3), *x = L.get<const double *>(4);
    double *y = L.get<double *>(5);
    for (u32 i = 0; i < nrows; ++i) {
        double s = 0.0;
        for (u32 d = 0; d < ndiag; ++d) {
            const long long c = (long long)i + off[d];
            if (c >= 0 && c < (long long)nrows) s += data[(u64)d * nrows + i] * x[c];
        }
        y[i] = s;
    }
    dots_epilogue(L, "spmv_dia_dot3_next", nrows, 4);
}

static void block_size(const Launch &L, const char *k) {
    if (L.block.x != BLOCK_SIZE_EXPECTED) die(std::string(k) + ": launched with the wrong block size");
}

static void dots(const Launch &L, double &g, double &d, double &q) {
    const u64 n = L.get<u64>(0);
    const double *r = L.get<const double *>(1), *u = L.get<const double *>(2), *w = L.get<const double *>(3);
    g = d = q = 0.0;
    for (u64 i = 0; i < n; ++i) {
        g += r[i] * u[i];
        d += w[i] * u[i];
        q += r[i] * r[i];
    }
}

static void k_dot3_last_block(const Launch &L) {
    block_size(L, "dot3_last_block");
    double g, d, q;
    dots(L, g, d, q);
    double *sc = L.get<double *>(6), *hist = L.get<double *>(7);
    const u32 cap = L.get<u32>(8), it = L.get<u32>(9);
    if (*L.get<u32 *>(5) != 0) die("dot3_last_block: the ticket counter is not zero");
    cg_advance(g, d, q, sc, hist, cap, it);
}
static void k_dot3_last_block_next(const Launch &L) {
    block_size(L, "dot3_last_block_next");
    double g, d, q;
    dots(L, g, d, q);
    double *sc = L.get<double *>(6), *hist = L.get<double *>(7);
    const u32 cap = L.get<u32>(8);
    cg_advance(g, d, q, sc, hist, cap, (u32)sc[CG_ITER] + 1u);
}
static void k_dot3_two_pass(const Launch &L) {
    block_size(L, "dot3_two_pass");
    double g, d, q;
    dots(L, g, d, q);
    double *partial = L.get<double *>(4);
    const u32 nb = L.grid.x;
    for (u32 b = 0; b < nb; ++b) partial[b] = partial[nb + b] = partial[2 * nb + b] = 0.0;
    partial[0] = g;
    partial[nb] = d;
    partial[2 * nb] = q;
}
static void finish(const Launch &L, bool next) {
    block_size(L, "dot3_finish");
    if (L.grid.x != 1) die("dot3_finish: launch as one block");
    const u32 m = L.get<u32>(0);
    const double *partial = L.get<const double *>(1);
    double *sc = L.get<double *>(2), *hist = L.get<double *>(3);
    const u32 cap = L.get<u32>(4);
    double g = 0, d = 0, q = 0;
    for (u32 b = 0; b < m; ++b) {
        g += partial[b];
        d += partial[m + b];
        q += partial[2 * m + b];
    }
    cg_advance(g, d, q, sc, hist, cap, next ? (u32)sc[CG_ITER] + 1u : L.get<u32>(5));
}
static void k_dot3_finish(const Launch &L) { finish(L, false); }
static void k_dot3_finish_next(const Launch &L) { finish(L, true); }

// dot3_slot (dot.cu: n, r, u, w, partial, counter, slots, slot): one row block's (r, u), (w, u),
// (r, r) into slots[3 slot], slots[3 slot + 1], slots[3 slot + 2]. Any block count; the ticket
// counter must be 0 (the kernel leaves it 0). No recurrence, so nothing to skip after a halt.
static void k_dot3_slot(const Launch &L) {
    block_size(L, "dot3_slot");
    double g, d, q;
    dots(L, g, d, q);
    (void)L.get<double *>(4);
    double *slots = L.get<double *>(6);
    const u32 slot = L.get<u32>(7);
    if (*L.get<u32 *>(5) != 0) die("dot3_slot: the ticket counter is not zero");
    slots[3 * (u64)slot + 0] = g;
    slots[3 * (u64)slot + 1] = d;
    slots[3 * (u64)slot + 2] = q;
}
// dot3_slots_advance (m, slots, scalars, history, history_cap, iteration) and
// dot3_slots_advance_next (m, slots, scalars, history, history_cap): the m slot triples added
// in slot order, then cg_advance for `iteration` or CG_ITER + 1. One block of BLOCK_SIZE.
static void slots_advance(const Launch &L, bool next) {
    const char *k = next ? "dot3_slots_advance_next" : "dot3_slots_advance";
    block_size(L, k);
    if (L.grid.x != 1) die(std::string(k) + ": launch as one block");
    const u32 m = L.get<u32>(0);
    const double *slots = L.get<const double *>(1);
    double *sc = L.get<double *>(2), *hist = L.get<double *>(3);
    const u32 cap = L.get<u32>(4);
    const u32 it = next ? (u32)sc[CG_ITER] + 1u : L.get<u32>(5);
    double g = 0.0, d = 0.0, q = 0.0;
    for (u32 b = 0; b < m; ++b) {
        g += slots[3 * (u64)b + 0];
        d += slots[3 * (u64)b + 1];
        q += slots[3 * (u64)b + 2];
    }
    cg_advance(g, d, q, sc, hist, cap, it);
}
static void k_dot3_slots_advance(const Launch &L) { slots_advance(L, false); }
static void k_dot3_slots_advance_next(const Launch &L) { slots_advance(L, true); }

// apg_poll_gather (hist, h, scalars, out) of driver.cuh: h history doubles, then the 9 scalars.
static void k_poll_gather(const Launch &L) {
    const double *hist = L.get<const double *>(0);
    const u64 h = L.get<u64>(1);
    const double *sc = L.get<const double *>(2);
    double *out = L.get<double *>(3);
    for (u64 i = 0; i < h; ++i) out[i] = hist[i];
    for (u64 i = 0; i < CG_SCALARS_LEN; ++i) out[h + i] = sc[i];
}

static void k_dot_last_block(const Launch &L) {
    block_size(L, "dot_last_block");
    const u64 n = L.get<u64>(0);
    const double *x = L.get<const double *>(1), *y = L.get<const double *>(2);
    double *out = L.get<double *>(5);
    double s = 0.0;
    for (u64 i = 0; i < n; ++i) s += x[i] * y[i];
    out[0] = s;
}

// The host stubs clang emits for the kernels of the plan (weak: absent when not emitted).
#define STUB(name) extern "C" void __device_stub__##name() __attribute__((weak));
STUB(cg_update_elem) STUB(cg_update_elem_v2) STUB(cg_update_grid) STUB(cg_update_grid_v2)
STUB(cg_update_nopre_elem) STUB(cg_update_nopre_elem_v2) STUB(cg_update_nopre_grid)
STUB(cg_update_nopre_grid_v2) STUB(cg_update_jacobi_elem) STUB(cg_update_jacobi_elem_v2)
STUB(cg_update_jacobi_grid) STUB(cg_update_jacobi_grid_v2)
STUB(xpay_grid_v2) STUB(jacobi_apply) STUB(jacobi_apply_v2)
STUB(spmv_csr_scalar) STUB(spmv_csr_vector_2) STUB(spmv_csr_vector_4) STUB(spmv_csr_vector_8)
STUB(spmv_csr_vector_16) STUB(spmv_csr_vector_32) STUB(spmv_csr_merge) STUB(spmv_csr_merge_fixup)
STUB(spmv_csr_merge_partition) STUB(spmv_ell) STUB(spmv_dia) STUB(spmv_coo_atomic)
STUB(spmv_coo_segment) STUB(dot3_last_block) STUB(dot3_last_block_next) STUB(dot3_two_pass)
STUB(dot3_finish) STUB(dot3_finish_next) STUB(dot_last_block)
STUB(gather_f64) STUB(spmv_csr_scalar_add) STUB(spmv_csr_vector_add_2) STUB(spmv_csr_vector_add_4)
STUB(spmv_csr_vector_add_8) STUB(spmv_csr_vector_add_16) STUB(spmv_csr_vector_add_32)
STUB(dot3_slot) STUB(dot3_slots_advance) STUB(dot3_slots_advance_next) STUB(apg_poll_gather)
STUB(spmv_csr_scalar_dot3_next) STUB(spmv_csr_vector_dot3_next_2) STUB(spmv_csr_vector_dot3_next_4)
STUB(spmv_csr_vector_dot3_next_8) STUB(spmv_csr_vector_dot3_next_16)
STUB(spmv_csr_vector_dot3_next_32) STUB(spmv_ell_dot3_next) STUB(spmv_dia_dot3_next)

struct Entry {
    const void *stub;
    KernelFn fn;
};

static KernelFn find_kernel(const void *func) {
    const Entry table[] = {
        {(const void *)&__device_stub__cg_update_elem, k_cg_update_elem},
        {(const void *)&__device_stub__cg_update_elem_v2, k_cg_update_elem_v2},
        {(const void *)&__device_stub__cg_update_grid, k_cg_update_grid},
        {(const void *)&__device_stub__cg_update_grid_v2, k_cg_update_grid},
        {(const void *)&__device_stub__cg_update_nopre_elem, k_cg_update_nopre_elem},
        {(const void *)&__device_stub__cg_update_nopre_elem_v2, k_cg_update_nopre_elem_v2},
        {(const void *)&__device_stub__cg_update_nopre_grid, k_cg_update_nopre_grid},
        {(const void *)&__device_stub__cg_update_nopre_grid_v2, k_cg_update_nopre_grid},
        {(const void *)&__device_stub__cg_update_jacobi_elem, k_cg_update_jacobi_elem},
        {(const void *)&__device_stub__cg_update_jacobi_elem_v2, k_cg_update_jacobi_elem_v2},
        {(const void *)&__device_stub__cg_update_jacobi_grid, k_cg_update_jacobi_grid},
        {(const void *)&__device_stub__cg_update_jacobi_grid_v2, k_cg_update_jacobi_grid},
        {(const void *)&__device_stub__apg_poll_gather, k_poll_gather},
        {(const void *)&__device_stub__xpay_grid_v2, k_xpay},
        {(const void *)&__device_stub__jacobi_apply, k_jacobi},
        {(const void *)&__device_stub__jacobi_apply_v2, k_jacobi},
        {(const void *)&__device_stub__spmv_csr_scalar, k_csr_scalar},
        {(const void *)&__device_stub__spmv_csr_vector_2, k_csr_vector},
        {(const void *)&__device_stub__spmv_csr_vector_4, k_csr_vector},
        {(const void *)&__device_stub__spmv_csr_vector_8, k_csr_vector},
        {(const void *)&__device_stub__spmv_csr_vector_16, k_csr_vector},
        {(const void *)&__device_stub__spmv_csr_vector_32, k_csr_vector},
        {(const void *)&__device_stub__spmv_csr_merge, k_csr_merge},
        {(const void *)&__device_stub__spmv_csr_merge_fixup, k_merge_fixup},
        {(const void *)&__device_stub__spmv_csr_merge_partition, k_merge_partition},
        {(const void *)&__device_stub__spmv_ell, k_ell},
        {(const void *)&__device_stub__spmv_dia, k_dia},
        {(const void *)&__device_stub__spmv_coo_atomic, k_coo},
        {(const void *)&__device_stub__spmv_coo_segment, k_coo_segment},
        {(const void *)&__device_stub__dot3_last_block, k_dot3_last_block},
        {(const void *)&__device_stub__dot3_last_block_next, k_dot3_last_block_next},
        {(const void *)&__device_stub__dot3_two_pass, k_dot3_two_pass},
        {(const void *)&__device_stub__dot3_finish, k_dot3_finish},
        {(const void *)&__device_stub__dot3_finish_next, k_dot3_finish_next},
        {(const void *)&__device_stub__dot_last_block, k_dot_last_block},
        {(const void *)&__device_stub__gather_f64, k_gather},
        {(const void *)&__device_stub__spmv_csr_scalar_add, k_csr_scalar_add},
        {(const void *)&__device_stub__spmv_csr_vector_add_2, k_csr_vector_add},
        {(const void *)&__device_stub__spmv_csr_vector_add_4, k_csr_vector_add},
        {(const void *)&__device_stub__spmv_csr_vector_add_8, k_csr_vector_add},
        {(const void *)&__device_stub__spmv_csr_vector_add_16, k_csr_vector_add},
        {(const void *)&__device_stub__spmv_csr_vector_add_32, k_csr_vector_add},
        {(const void *)&__device_stub__dot3_slot, k_dot3_slot},
        {(const void *)&__device_stub__dot3_slots_advance, k_dot3_slots_advance},
        {(const void *)&__device_stub__dot3_slots_advance_next, k_dot3_slots_advance_next},
        {(const void *)&__device_stub__spmv_csr_scalar_dot3_next, k_csr_dot3},
        {(const void *)&__device_stub__spmv_csr_vector_dot3_next_2, k_csr_dot3},
        {(const void *)&__device_stub__spmv_csr_vector_dot3_next_4, k_csr_dot3},
        {(const void *)&__device_stub__spmv_csr_vector_dot3_next_8, k_csr_dot3},
        {(const void *)&__device_stub__spmv_csr_vector_dot3_next_16, k_csr_dot3},
        {(const void *)&__device_stub__spmv_csr_vector_dot3_next_32, k_csr_dot3},
        {(const void *)&__device_stub__spmv_ell_dot3_next, k_ell_dot3},
        {(const void *)&__device_stub__spmv_dia_dot3_next, k_dia_dot3},
    };
    for (const Entry &e : table) {
        if (e.stub != nullptr && e.stub == func) return e.fn;
    }
    die("a launch of an unknown kernel");
    return nullptr;
}

// ------------------------------------------------------------------------------ the API

extern "C" {

int cudaConfigureCall(dim3 grid, dim3 block, size_t smem, cudaStream_t stream) {
    if (grid.x == 0 || block.x == 0 || block.x > 1024) die("bad launch configuration");
    if (stream != nullptr) {
        const int d = stream_device(stream, "a kernel launch");
        if (d != g_device) {
            die("a kernel launched on a stream of device " + std::to_string(d) + " while device " +
                std::to_string(g_device) + " is current");
        }
    }
    g_pending = Launch();
    g_pending.grid = grid;
    g_pending.block = block;
    g_pending.smem = smem;
    return 0;
}

cudaError_t cudaSetupArgument(const void *arg, size_t size, size_t offset) {
    if (g_pending.buf.size() < offset + size) g_pending.buf.resize(offset + size);
    std::memcpy(g_pending.buf.data() + offset, arg, size);
    g_pending.args.emplace_back(offset, size);
    return cudaSuccess;
}

cudaError_t cudaLaunch(const void *func) {
    KernelFn fn = find_kernel(func);
    Launch l = g_pending;
    run_or_record([fn, l]() {
        ++g_launches;
        fn(l);
    });
    return cudaSuccess;
}

cudaError_t cudaMalloc(void **p, size_t bytes) {
    *p = std::calloc(1, bytes + 16);
    note_alloc(*p, bytes, g_device);
    return *p ? cudaSuccess : cudaErrorInvalidValue;
}
cudaError_t cudaFree(void *p) {
    forget_alloc(p);
    std::free(p);
    return cudaSuccess;
}
cudaError_t cudaMallocHost(void **p, size_t bytes) {
    if (g_capture) die("cudaMallocHost during capture");
    *p = std::calloc(1, bytes + 16);
    note_alloc(*p, bytes, -1);
    return *p ? cudaSuccess : cudaErrorInvalidValue;
}
// Mapped host memory is host memory; the device address is the host address (as with UVA).
cudaError_t cudaHostAlloc(void **p, size_t bytes, unsigned) { return cudaMallocHost(p, bytes); }
cudaError_t cudaHostGetDevicePointer(void **dev, void *host, unsigned flags) {
    if (flags != 0) return cudaErrorInvalidValue;
    *dev = host;
    return cudaSuccess;
}
cudaError_t cudaFreeHost(void *p) {
    forget_alloc(p);
    std::free(p);
    return cudaSuccess;
}
cudaError_t cudaMemset(void *p, int v, size_t bytes) {
    if (g_capture) die("cudaMemset during capture");
    std::memset(p, v, bytes);
    return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void *p, int v, size_t bytes, cudaStream_t) {
    run_or_record([p, v, bytes]() { std::memset(p, v, bytes); });
    return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t bytes, cudaMemcpyKind k, cudaStream_t) {
    if (g_capture && k != cudaMemcpyDeviceToDevice) die("a host copy during capture");
    run_or_record([d, s, bytes]() { std::memmove(d, s, bytes); });
    return cudaSuccess;
}
cudaError_t cudaMemcpyPeerAsync(void *dst, int dstDevice, const void *src, int srcDevice, size_t bytes, cudaStream_t st) {
    stream_device(st, "cudaMemcpyPeerAsync");
    in_device_alloc("cudaMemcpyPeerAsync", "dst", dst, bytes, dstDevice);
    in_device_alloc("cudaMemcpyPeerAsync", "src", src, bytes, srcDevice);
    run_or_record([dst, src, bytes]() { std::memmove(dst, src, bytes); });
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) {
    if (g_capture) die("synchronisation during capture");
    return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void) { return cudaStreamSynchronize(nullptr); }
cudaError_t cudaGetLastError(void) {
    cudaError_t e = g_error;
    g_error = cudaSuccess;
    return e;
}
const char *cudaGetErrorName(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorPeerAccessAlreadyEnabled: return "cudaErrorPeerAccessAlreadyEnabled";
    }
    return "cudaErrorMock";
}
const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorPeerAccessAlreadyEnabled: return "peer access is already enabled";
    }
    return "mock error";
}
// An error answer, also left for cudaGetLastError as the runtime does.
static cudaError_t fail(cudaError_t e) {
    g_error = e;
    return e;
}
cudaError_t cudaGetDeviceCount(int *count) {
    *count = device_count();
    return cudaSuccess;
}
cudaError_t cudaSetDevice(int d) {
    if (!valid_device(d)) return fail(cudaErrorInvalidValue);
    g_device = d;
    return cudaSuccess;
}
cudaError_t cudaGetDevice(int *d) {
    *d = g_device;
    return cudaSuccess;
}
cudaError_t cudaDeviceCanAccessPeer(int *can, int dev, int peer) {
    if (!valid_device(dev) || !valid_device(peer)) return fail(cudaErrorInvalidValue);
    *can = dev != peer ? 1 : 0;
    return cudaSuccess;
}
cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned flags) {
    if (!valid_device(peer) || peer == g_device || flags != 0) return fail(cudaErrorInvalidValue);
    if (!g_peer_enabled.insert({g_device, peer}).second) return fail(cudaErrorPeerAccessAlreadyEnabled);
    return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d) {
    if (!valid_device(d)) return fail(cudaErrorInvalidValue);
    std::memset(p, 0, sizeof *p);
    const char *name = std::getenv("MOCK_DEVICE_NAME");
    std::snprintf(p->name, sizeof p->name, "%s", name ? name : "NVIDIA H200");
    p->major = 9;
    p->minor = 0;
    p->multiProcessorCount = 132;
    p->maxThreadsPerMultiProcessor = 2048;
    p->maxBlocksPerMultiProcessor = 32;
    return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr a, int d) {
    if (!valid_device(d)) return fail(cudaErrorInvalidValue);
    switch (a) {
    case cudaDevAttrMaxThreadsPerMultiProcessor: *v = 2048; break;
    case cudaDevAttrMultiProcessorCount: *v = 132; break;
    case cudaDevAttrComputeCapabilityMajor: *v = 9; break;
    case cudaDevAttrComputeCapabilityMinor: *v = 0; break;
    case cudaDevAttrMaxBlocksPerMultiprocessor: *v = 32; break;
    default: die("an unknown device attribute");
    }
    return cudaSuccess;
}
cudaError_t cudaFuncGetAttributes(cudaFuncAttributes *a, const void *f) {
    find_kernel(f);
    std::memset(a, 0, sizeof *a);
    return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned) {
    *s = new CUstream_st{1, g_device};
    g_streams.insert(*s);
    return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
    g_streams.erase(s);
    delete s;
    return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags) {
    *e = new CUevent_st{g_device, flags};
    g_events.insert(*e);
    return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
    known_event(e, "cudaEventDestroy");
    g_events.erase(e);
    delete e;
    return cudaSuccess;
}
// Everything has run by the time a call returns (or is in the capture, in issue order), so an
// event only checks where it is recorded; during a capture record and wait are no-op nodes.
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    known_event(e, "cudaEventRecord");
    const int d = stream_device(s, "cudaEventRecord");
    if (d != e->device) {
        die("cudaEventRecord: an event of device " + std::to_string(e->device) + " recorded on a stream of device " +
            std::to_string(d));
    }
    run_or_record([]() {});
    return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned) {
    known_event(e, "cudaStreamWaitEvent");
    stream_device(s, "cudaStreamWaitEvent");
    run_or_record([]() {});
    return cudaSuccess;
}
cudaError_t cudaStreamBeginCapture(cudaStream_t, cudaStreamCaptureMode) {
    if (g_capture) die("nested capture");
    g_capture = new CUgraph_st();
    return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t, cudaGraph_t *g) {
    *g = g_capture;
    g_capture = nullptr;
    return cudaSuccess;
}
cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t *e, cudaGraph_t g, unsigned long long) {
    *e = new CUgraphExec_st{g->ops};
    return cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t g) {
    delete g;
    return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t e) {
    delete e;
    return cudaSuccess;
}
cudaError_t cudaGraphUpload(cudaGraphExec_t, cudaStream_t) { return cudaSuccess; }
cudaError_t cudaGraphLaunch(cudaGraphExec_t e, cudaStream_t) {
    if (g_capture) die("a graph launch during capture");
    for (auto &op : e->ops) op();
    return cudaSuccess;
}

} // extern "C"

// ------------------------------------------------------------------------------ cuSPARSE

// The types of cusparse.h (same names and values; only what the solver uses).
enum cusparseStatus_t { CUSPARSE_STATUS_SUCCESS = 0 };
enum cudaDataType { CUDA_R_64F = 1 };
enum cusparseOperation_t { CUSPARSE_OPERATION_NON_TRANSPOSE = 0 };
enum cusparseIndexType_t { CUSPARSE_INDEX_32I = 2 };
enum cusparseIndexBase_t { CUSPARSE_INDEX_BASE_ZERO = 0 };
enum cusparseSpMVAlg_t { CUSPARSE_SPMV_ALG_DEFAULT = 0, CUSPARSE_SPMV_CSR_ALG1 = 2, CUSPARSE_SPMV_CSR_ALG2 = 3 };

struct cusparseContext {
    cudaStream_t stream;
};
struct cusparseSpMatDescr {
    int64_t rows, cols, nnz;
    const u32 *ptr, *idx;
    const double *vals;
    // What cusparseSpMV_preprocess was given (a product must use the same).
    bool prepared;
    int alg;
    void *buffer;
};
struct cusparseDnVecDescr {
    int64_t size;
    double *values;
};
typedef cusparseContext *cusparseHandle_t;
typedef cusparseSpMatDescr *cusparseSpMatDescr_t;
typedef const cusparseSpMatDescr *cusparseConstSpMatDescr_t;
typedef cusparseDnVecDescr *cusparseDnVecDescr_t;
typedef const cusparseDnVecDescr *cusparseConstDnVecDescr_t;

static long long g_cusparse_products = 0;

static void report_cusparse_products() {
    if (g_cusparse_products > 0) {
        std::fprintf(stderr, "mock_cuda: %lld cuSPARSE products\n", g_cusparse_products);
    }
}

static void not_captured(const char *call) {
    if (g_capture) die(std::string(call) + " during capture");
}

// The buffer the mock asks for: ALG2 keeps a copy of the row pointers (checked by every
// product, so a buffer freed or overwritten after the preprocessing is seen); the others none.
static size_t mock_buffer_bytes(const cusparseSpMatDescr *a, int alg) {
    return alg == CUSPARSE_SPMV_CSR_ALG2 ? sizeof(u64) * (size_t)(a->rows + 1) : 0;
}

// The arguments every SpMV call checks: y = 1 * A x + 0 * y in f64 with an algorithm for CSR,
// on a handle bound to a stream, vectors of the matrix's sizes.
static void spmv_args(const char *call, cusparseHandle_t h, cusparseOperation_t op, const void *alpha,
                      cusparseConstSpMatDescr_t a, cusparseConstDnVecDescr_t x, const void *beta,
                      cusparseConstDnVecDescr_t y, cudaDataType compute, int alg) {
    const std::string c = call;
    if (h == nullptr || h->stream == nullptr) die(c + ": the handle is bound to no stream");
    if (op != CUSPARSE_OPERATION_NON_TRANSPOSE) die(c + ": not A x");
    if (compute != CUDA_R_64F) die(c + ": not computed in f64");
    if (alg != CUSPARSE_SPMV_ALG_DEFAULT && alg != CUSPARSE_SPMV_CSR_ALG1 && alg != CUSPARSE_SPMV_CSR_ALG2) {
        die(c + ": not an SpMV algorithm for CSR");
    }
    if (*static_cast<const double *>(alpha) != 1.0 || *static_cast<const double *>(beta) != 0.0) {
        die(c + ": alpha is not 1 or beta not 0");
    }
    if (a == nullptr || x == nullptr || y == nullptr) die(c + ": a NULL descriptor");
    if (x->size != a->cols || y->size != a->rows) die(c + ": vector sizes differ from the matrix's");
}

extern "C" {

cusparseStatus_t cusparseCreate(cusparseHandle_t *h) {
    not_captured("cusparseCreate");
    static bool registered = false;
    if (!registered) std::atexit(report_cusparse_products);
    registered = true;
    *h = new cusparseContext{nullptr};
    return CUSPARSE_STATUS_SUCCESS;
}
cusparseStatus_t cusparseDestroy(cusparseHandle_t h) {
    delete h;
    return CUSPARSE_STATUS_SUCCESS;
}
cusparseStatus_t cusparseSetStream(cusparseHandle_t h, cudaStream_t s) {
    h->stream = s;
    return CUSPARSE_STATUS_SUCCESS;
}
const char *cusparseGetErrorName(cusparseStatus_t) { return "CUSPARSE_STATUS_MOCK"; }
const char *cusparseGetErrorString(cusparseStatus_t) { return "mock cuSPARSE error"; }

cusparseStatus_t cusparseCreateCsr(cusparseSpMatDescr_t *d, int64_t rows, int64_t cols, int64_t nnz, void *ptr,
                                   void *idx, void *vals, cusparseIndexType_t ptr_type,
                                   cusparseIndexType_t idx_type, cusparseIndexBase_t base, cudaDataType type) {
    not_captured("cusparseCreateCsr");
    if (ptr_type != CUSPARSE_INDEX_32I || idx_type != CUSPARSE_INDEX_32I) die("cusparseCreateCsr: not 32-bit indices");
    if (base != CUSPARSE_INDEX_BASE_ZERO) die("cusparseCreateCsr: not base zero");
    if (type != CUDA_R_64F) die("cusparseCreateCsr: not f64 values");
    if (ptr == nullptr || idx == nullptr || vals == nullptr) die("cusparseCreateCsr: a NULL array");
    const u32 *p = static_cast<const u32 *>(ptr);
    if (p[0] != 0 || (int64_t)p[rows] != nnz) die("cusparseCreateCsr: the row pointers do not span nnz");
    *d = new cusparseSpMatDescr{rows, cols, nnz, p, static_cast<const u32 *>(idx),
                                static_cast<const double *>(vals), false, -1, nullptr};
    return CUSPARSE_STATUS_SUCCESS;
}
cusparseStatus_t cusparseDestroySpMat(cusparseConstSpMatDescr_t d) {
    delete d;
    return CUSPARSE_STATUS_SUCCESS;
}
cusparseStatus_t cusparseCreateDnVec(cusparseDnVecDescr_t *d, int64_t size, void *values, cudaDataType type) {
    not_captured("cusparseCreateDnVec");
    if (type != CUDA_R_64F) die("cusparseCreateDnVec: not f64 values");
    if (values == nullptr) die("cusparseCreateDnVec: NULL values");
    *d = new cusparseDnVecDescr{size, static_cast<double *>(values)};
    return CUSPARSE_STATUS_SUCCESS;
}
cusparseStatus_t cusparseDestroyDnVec(cusparseConstDnVecDescr_t d) {
    delete d;
    return CUSPARSE_STATUS_SUCCESS;
}
cusparseStatus_t cusparseDnVecSetValues(cusparseDnVecDescr_t d, void *values) {
    if (values == nullptr) die("cusparseDnVecSetValues: NULL values");
    d->values = static_cast<double *>(values);
    return CUSPARSE_STATUS_SUCCESS;
}

cusparseStatus_t cusparseSpMV_bufferSize(cusparseHandle_t h, cusparseOperation_t op, const void *alpha,
                                         cusparseConstSpMatDescr_t a, cusparseConstDnVecDescr_t x,
                                         const void *beta, cusparseDnVecDescr_t y, cudaDataType compute,
                                         cusparseSpMVAlg_t alg, size_t *bytes) {
    not_captured("cusparseSpMV_bufferSize");
    spmv_args("cusparseSpMV_bufferSize", h, op, alpha, a, x, beta, y, compute, alg);
    *bytes = mock_buffer_bytes(a, alg);
    return CUSPARSE_STATUS_SUCCESS;
}

cusparseStatus_t cusparseSpMV_preprocess(cusparseHandle_t h, cusparseOperation_t op, const void *alpha,
                                         cusparseConstSpMatDescr_t a, cusparseConstDnVecDescr_t x,
                                         const void *beta, cusparseDnVecDescr_t y, cudaDataType compute,
                                         cusparseSpMVAlg_t alg, void *buffer) {
    not_captured("cusparseSpMV_preprocess");
    spmv_args("cusparseSpMV_preprocess", h, op, alpha, a, x, beta, y, compute, alg);
    const size_t bytes = mock_buffer_bytes(a, alg);
    if (bytes > 0 && buffer == nullptr) die("cusparseSpMV_preprocess: no buffer");
    // Queued on the handle's stream, after the upload of the arrays (the mock's stream runs
    // everything at once).
    u64 *keep = static_cast<u64 *>(buffer);
    for (size_t i = 0; bytes > 0 && i <= (size_t)a->rows; ++i) keep[i] = a->ptr[i];
    cusparseSpMatDescr *m = const_cast<cusparseSpMatDescr *>(a);
    m->prepared = true;
    m->alg = alg;
    m->buffer = buffer;
    return CUSPARSE_STATUS_SUCCESS;
}

cusparseStatus_t cusparseSpMV(cusparseHandle_t h, cusparseOperation_t op, const void *alpha,
                              cusparseConstSpMatDescr_t a, cusparseConstDnVecDescr_t x, const void *beta,
                              cusparseDnVecDescr_t y, cudaDataType compute, cusparseSpMVAlg_t alg, void *buffer) {
    spmv_args("cusparseSpMV", h, op, alpha, a, x, beta, y, compute, alg);
    if (!a->prepared || a->alg != (int)alg || a->buffer != buffer) {
        die("cusparseSpMV: not the algorithm and buffer of the preprocessing");
    }
    // What the launch takes now: the arrays, the vectors the descriptors point at.
    const int64_t rows = a->rows;
    const u32 *ptr = a->ptr, *idx = a->idx;
    const double *vals = a->vals, *xv = x->values;
    double *yv = y->values;
    const u64 *keep = mock_buffer_bytes(a, alg) > 0 ? static_cast<const u64 *>(buffer) : nullptr;
    run_or_record([=]() {
        ++g_cusparse_products;
        for (int64_t i = 0; i < rows; ++i) {
            if (keep && keep[i] != ptr[i]) die("cusparseSpMV: the preprocessed buffer changed");
            double s = 0.0;
            for (u32 k = ptr[i]; k < ptr[i + 1]; ++k) s += vals[k] * xv[idx[k]];
            yv[i] = s;
        }
    });
    return CUSPARSE_STATUS_SUCCESS;
}

} // extern "C"
