// driver.cuh: the parts of the host driver of a solver emitted by {{VERSION}} that do not depend on
// how the matrix is laid out over the devices: errors, device memory, the operands in the
// plan's formats (with cuSPARSE's SpMV where the plan hands an operand to it) and their
// placement. Included first by solver.cu; the plan's launch functions (plan_kernels.cuh) come
// after the driver's own types.
#include <cuda_runtime.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "../include/autopcg_generated.h"
#include "host_build.hpp"
#include "plan.h"

#if APG_USES_CUSPARSE
#include <cusparse.h>
#endif

namespace {

// ------------------------------------------------------------------------------- errors

thread_local std::string g_last_error;
// The first failed call queued by a launch function (memset/memcpy on the stream).
thread_local cudaError_t g_launch_error = cudaSuccess;
thread_local const char *g_launch_call = nullptr;

struct CudaFailure {
    std::string what;
};

void cuda_check(cudaError_t e, const char *call) {
    if (e != cudaSuccess) {
        throw CudaFailure{std::string(call) + ": " + cudaGetErrorName(e) + ": " +
                          cudaGetErrorString(e)};
    }
}

#define APG_CUDA(call) cuda_check((call), #call)
#define APG_LAUNCH(call)                                                                         \
    do {                                                                                         \
        cudaError_t e_ = (call);                                                                 \
        if (e_ != cudaSuccess && g_launch_error == cudaSuccess) {                                \
            g_launch_error = e_;                                                                 \
            g_launch_call = #call;                                                               \
        }                                                                                        \
    } while (0)

#if APG_USES_CUSPARSE
// The message of a failed cuSPARSE call: the call as written, the status's name and meaning.
std::string cusparse_message(cusparseStatus_t s, const char *call) {
    return std::string(call) + ": " + cusparseGetErrorName(s) + ": " + cusparseGetErrorString(s);
}

void cusparse_check(cusparseStatus_t s, const char *call) {
    if (s != CUSPARSE_STATUS_SUCCESS) throw CudaFailure{cusparse_message(s, call)};
}

// The first failure of a cuSPARSE call queued by a launch function (thrown by launches_done,
// like a failure kept by APG_LAUNCH: nothing is thrown while a graph is being captured).
thread_local std::string g_cusparse_failure;

void cusparse_launch_failed(const std::string &what) {
    if (g_cusparse_failure.empty()) g_cusparse_failure = what;
}

// A cuSPARSE call of the setup: throws at once.
#define APG_CUSPARSE(call) cusparse_check((call), #call)
// A cuSPARSE call of a launch function: the first failure is kept for launches_done.
#define APG_CUSPARSE_LAUNCH(call)                                                                \
    do {                                                                                         \
        cusparseStatus_t s_ = (call);                                                            \
        if (s_ != CUSPARSE_STATUS_SUCCESS) cusparse_launch_failed(cusparse_message(s_, #call));  \
    } while (0)
#endif

// Throws the first failure of the launches since the last call, if any.
void launches_done(const char *phase) {
    cudaError_t e = g_launch_error;
    const char *call = g_launch_call;
    g_launch_error = cudaSuccess;
    g_launch_call = nullptr;
    if (e != cudaSuccess) cuda_check(e, call);
#if APG_USES_CUSPARSE
    if (!g_cusparse_failure.empty()) {
        std::string what;
        what.swap(g_cusparse_failure);
        throw CudaFailure{what};
    }
#endif
    e = cudaGetLastError();
    if (e != cudaSuccess) {
        throw CudaFailure{std::string("launching the kernels of ") + phase + ": " +
                          cudaGetErrorName(e) + ": " + cudaGetErrorString(e)};
    }
}

double ms_since(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t)
        .count();
}

// -------------------------------------------------------------------------- device memory

// Zeroed device memory for `count` elements (never called during a capture). The memset is
// waited for, so that no later copy on the solver's stream can overtake it.
template <typename T> T *dalloc(size_t count) {
    void *p = nullptr;
    size_t bytes = count * sizeof(T);
    APG_CUDA(cudaMalloc(&p, bytes < 16 ? 16 : bytes));
    APG_CUDA(cudaMemset(p, 0, bytes < 16 ? 16 : bytes));
    APG_CUDA(cudaDeviceSynchronize());
    return static_cast<T *>(p);
}

template <typename T> void dfree(T *&p) {
    if (p != nullptr) cudaFree(p);
    p = nullptr;
}

// Copies a host vector into a device buffer of exactly its size.
template <typename T> void upload(T *dst, const std::vector<T> &src, cudaStream_t st) {
    if (!src.empty()) {
        APG_CUDA(cudaMemcpyAsync(dst, src.data(), src.size() * sizeof(T),
                                 cudaMemcpyHostToDevice, st));
    }
}

// Allocates a device copy of a host vector (or checks the size of an existing one, when the
// values of the same pattern are uploaded again).
template <typename T>
void place(T *&dst, size_t &count, const std::vector<T> &src, cudaStream_t st,
           const char *what) {
    if (dst == nullptr) {
        dst = dalloc<T>(src.size());
        count = src.size();
    } else if (count != src.size()) {
        throw apg::Error(std::string(what) + " has " + std::to_string(src.size()) +
                         " entries after the update but " + std::to_string(count) +
                         " before: the pattern changed");
    }
    upload(dst, src, st);
}

} // namespace

// A matrix on the device in the format the plan gives it (only that format's arrays are set).
struct ApgOperand {
    int format = -1;
    uint32_t nrows = 0, ncols = 0, nnz = 0;
    // CSR, and the merge-path workspace
    uint32_t *indptr = nullptr, *indices = nullptr;
    double *vals = nullptr;
    size_t n_indptr = 0, n_indices = 0, n_vals = 0;
    uint32_t ntiles = 0, fix_blocks = 1;
    uint32_t *tile_rows = nullptr, *carry_rows = nullptr;
    double *carry_vals = nullptr;
    // ELL (also HYB's ELL part)
    uint32_t ell_width = 0;
    uint32_t *ell_cols = nullptr;
    double *ell_vals = nullptr;
    size_t n_ell_cols = 0, n_ell_vals = 0;
    // DIA
    uint32_t ndiag = 0;
    int32_t *dia_offsets = nullptr;
    double *dia_data = nullptr;
    size_t n_dia_offsets = 0, n_dia_data = 0;
    // COO (also HYB's COO part)
    uint32_t coo_nnz = 0;
    uint32_t *coo_rows = nullptr, *coo_cols = nullptr;
    double *coo_vals = nullptr;
    size_t n_coo_rows = 0, n_coo_cols = 0, n_coo_vals = 0;
#if APG_USES_CUSPARSE
    // cuSPARSE's SpMV (an operand the plan hands to cuSPARSE; null otherwise): the handle, bound
    // to the solver's stream; the CSR descriptor over indptr, indices and vals (value updates
    // upload into those same arrays, so it stays valid); the vector descriptors, pointed at x
    // and y by every product (at the placeholders x0 and y0 until the first); and the work
    // buffer cusparseSpMV_preprocess prepared for the algorithm.
    cusparseHandle_t cusparse = nullptr;
    cudaStream_t cusparse_stream = nullptr;
    cusparseSpMVAlg_t cusparse_alg = CUSPARSE_SPMV_ALG_DEFAULT;
    cusparseSpMatDescr_t cusparse_mat = nullptr;
    cusparseDnVecDescr_t cusparse_x = nullptr, cusparse_y = nullptr;
    double *cusparse_x0 = nullptr, *cusparse_y0 = nullptr;
    unsigned char *cusparse_buffer = nullptr;
#endif

    // Frees everything (the caller has waited for the stream and destroyed the graphs that
    // use these buffers).
    void release() {
#if APG_USES_CUSPARSE
        // The descriptors and the handle go first: they refer to the arrays and the buffer.
        if (cusparse_x) cusparseDestroyDnVec(cusparse_x);
        if (cusparse_y) cusparseDestroyDnVec(cusparse_y);
        if (cusparse_mat) cusparseDestroySpMat(cusparse_mat);
        if (cusparse) cusparseDestroy(cusparse);
        cusparse_x = cusparse_y = nullptr;
        cusparse_mat = nullptr;
        cusparse = nullptr;
        cusparse_stream = nullptr;
        dfree(cusparse_buffer);
        dfree(cusparse_x0);
        dfree(cusparse_y0);
#endif
        dfree(indptr);
        dfree(indices);
        dfree(vals);
        dfree(tile_rows);
        dfree(carry_rows);
        dfree(carry_vals);
        dfree(ell_cols);
        dfree(ell_vals);
        dfree(dia_offsets);
        dfree(dia_data);
        dfree(coo_rows);
        dfree(coo_cols);
        dfree(coo_vals);
    }
};

// What the launch geometry needs to know about the device.
struct ApgDeviceLimits {
    int multiProcessorCount = 1;
    int maxThreadsPerMultiProcessor = 1;
    int maxBlocksPerMultiProcessor = 1;
};

#if APG_USES_CUSPARSE
namespace {

// alpha and beta of every product y = 1 * op(B) x + 0 * y (host scalars: the default pointer
// mode, read when the call is made, so a captured graph keeps them).
constexpr double kCusparseOne = 1.0, kCusparseZero = 0.0;

// Makes op's cuSPARSE state for y = op x with `alg`, once, after its CSR arrays are placed (on
// the stream st; the preprocessing is queued after their upload): handle bound to st, the CSR
// descriptor (32-bit indices, base zero, f64), the vector descriptors over placeholders, the
// work buffer of cusparseSpMV_bufferSize, and cusparseSpMV_preprocess. Allocates and may wait:
// setup only, never during a capture.
void cusparse_prepare(ApgOperand &op, cusparseSpMVAlg_t alg, cudaStream_t st, const char *name) {
    const uint64_t limit = 0x7fffffffull;
    if (op.nrows > limit || op.ncols > limit || op.nnz > limit) {
        throw apg::Error(std::string(name) + " is too large for cuSPARSE's 32-bit indices");
    }
    try {
        op.cusparse_alg = alg;
        op.cusparse_stream = st;
        APG_CUSPARSE(cusparseCreate(&op.cusparse));
        APG_CUSPARSE(cusparseSetStream(op.cusparse, st));
        APG_CUSPARSE(cusparseCreateCsr(&op.cusparse_mat, op.nrows, op.ncols, op.nnz, op.indptr,
                                       op.indices, op.vals, CUSPARSE_INDEX_32I, CUSPARSE_INDEX_32I,
                                       CUSPARSE_INDEX_BASE_ZERO, CUDA_R_64F));
        op.cusparse_x0 = dalloc<double>(op.ncols);
        op.cusparse_y0 = dalloc<double>(op.nrows);
        APG_CUSPARSE(cusparseCreateDnVec(&op.cusparse_x, op.ncols, op.cusparse_x0, CUDA_R_64F));
        APG_CUSPARSE(cusparseCreateDnVec(&op.cusparse_y, op.nrows, op.cusparse_y0, CUDA_R_64F));
        size_t bytes = 0;
        APG_CUSPARSE(cusparseSpMV_bufferSize(op.cusparse, CUSPARSE_OPERATION_NON_TRANSPOSE,
                                             &kCusparseOne, op.cusparse_mat, op.cusparse_x,
                                             &kCusparseZero, op.cusparse_y, CUDA_R_64F, alg,
                                             &bytes));
        op.cusparse_buffer = dalloc<unsigned char>(bytes);
        APG_CUSPARSE(cusparseSpMV_preprocess(op.cusparse, CUSPARSE_OPERATION_NON_TRANSPOSE,
                                             &kCusparseOne, op.cusparse_mat, op.cusparse_x,
                                             &kCusparseZero, op.cusparse_y, CUDA_R_64F, alg,
                                             op.cusparse_buffer));
    } catch (const CudaFailure &f) {
        throw CudaFailure{std::string("preparing cuSPARSE's SpMV of ") + name + ": " + f.what};
    }
}

} // namespace

// y = m x by cuSPARSE's SpMV with `alg` on the stream st, for the launch functions of
// plan_kernels.cuh: the vector descriptors are pointed at x and y, then cusparseSpMV runs with
// the preprocessed buffer. It only queues work (no allocation, no synchronisation), so a graph
// can capture it; a failure is kept for launches_done. The algorithm and the stream must be the
// ones the operand was prepared with (an internal error otherwise).
static void apg_cusparse_spmv(const ApgOperand &m, cusparseSpMVAlg_t alg, const double *x,
                              double *y, cudaStream_t st) {
    if (m.nnz == 0) {
        APG_LAUNCH(cudaMemsetAsync(y, 0, sizeof(double) * (size_t)m.nrows, st));
        return;
    }
    if (m.cusparse_mat == nullptr || m.cusparse_alg != alg || m.cusparse_stream != st) {
        cusparse_launch_failed("cuSPARSE's SpMV was called for an operand not prepared for that "
                               "algorithm on that stream (internal error)");
        return;
    }
    // The vector descriptor takes a non-const pointer; cuSPARSE only reads x.
    APG_CUSPARSE_LAUNCH(cusparseDnVecSetValues(m.cusparse_x, const_cast<double *>(x)));
    APG_CUSPARSE_LAUNCH(cusparseDnVecSetValues(m.cusparse_y, y));
    APG_CUSPARSE_LAUNCH(cusparseSpMV(m.cusparse, CUSPARSE_OPERATION_NON_TRANSPOSE, &kCusparseOne,
                                     m.cusparse_mat, m.cusparse_x, &kCusparseZero, m.cusparse_y,
                                     CUDA_R_64F, alg, m.cusparse_buffer));
}
#endif

// The merge-path partition of a CSR operand (plan_kernels.cuh; empty when no operand of the plan
// uses the merge kernel).
static void apg_merge_partition(ApgOperand &m, uint32_t blocks, cudaStream_t st);

namespace {

// Blocks of `threads` threads the device keeps resident at once (one wave).
uint64_t wave_blocks(const ApgDeviceLimits &p, uint32_t threads) {
    uint64_t per_sm = (uint64_t)p.maxThreadsPerMultiProcessor / (threads ? threads : 1);
    const uint64_t max_blocks = p.maxBlocksPerMultiProcessor > 0 ? p.maxBlocksPerMultiProcessor : 1;
    if (per_sm < 1) per_sm = 1;
    if (per_sm > max_blocks) per_sm = max_blocks;
    return (uint64_t)(p.multiProcessorCount > 0 ? p.multiProcessorCount : 1) * per_sm;
}

// A grid-stride launch of `work` items: one wave, but no more blocks than items need.
uint32_t grid_stride_blocks(const ApgDeviceLimits &p, uint64_t work, uint32_t threads) {
    uint64_t cover = (work + threads - 1) / threads;
    if (cover < 1) cover = 1;
    const uint64_t w = wave_blocks(p, threads);
    const uint64_t b = cover < w ? cover : w;
    return (uint32_t)(b > 0xffffffffull ? 0xffffffffull : b);
}

// The model-file slug of a device name (device_slug of crates/catalog): lower case, words
// joined by '-', cut before the first word describing only the memory or the board.
std::string device_slug(const std::string &name) {
    std::vector<std::string> words;
    std::string cur;
    auto flush = [&words, &cur]() {
        if (cur.empty()) return false;
        const std::string &w = cur;
        bool memory = w.size() >= 2 && w.compare(w.size() - 2, 2, "gb") == 0 &&
                      w.find_first_not_of("0123456789") == w.size() - 2;
        bool board = w.rfind("hbm", 0) == 0 || w.rfind("sxm", 0) == 0 || w == "pcie" ||
                     w == "nvl" || w.rfind("gddr", 0) == 0;
        if (!words.empty() && (memory || board)) return true;
        words.push_back(w);
        cur.clear();
        return false;
    };
    for (char c : name) {
        if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')) {
            cur.push_back(c);
        } else if (c >= 'A' && c <= 'Z') {
            cur.push_back((char)(c - 'A' + 'a'));
        } else if (flush()) {
            cur.clear();
            break;
        }
    }
    if (!cur.empty()) flush();
    if (words.empty()) return "unknown-gpu";
    std::string out = words[0];
    for (size_t i = 1; i < words.size(); ++i) out += "-" + words[i];
    return out;
}

// Converts `m` to `format` (padded formats within `limits`) on the host and uploads it into `op` (allocating on the first call;
// later calls must have the same sizes). `cusparse_alg` is the cusparseSpMVAlg_t of an operand
// cuSPARSE multiplies (CSR; its cuSPARSE state is made on the first call and kept), -1 when a
// kernel of the plan does.
void place_operand(ApgOperand &op, const apg::Csr &m, int format, long long hyb_split,
                   bool merge, int cusparse_alg, const apg::PaddingLimits &limits,
                   const ApgDeviceLimits &props, cudaStream_t st, const char *name) {
    if (cusparse_alg >= 0 && (format != APG_FORMAT_CSR || !APG_USES_CUSPARSE)) {
        throw apg::Error(std::string(name) + ": cuSPARSE needs CSR and a build with cuSPARSE "
                                             "(plan.h disagrees with itself: internal error)");
    }
    const bool first = op.format < 0;
    op.format = format;
    op.nrows = m.nrows;
    op.ncols = m.ncols;
    op.nnz = (uint32_t)m.nnz();
    const std::string what = std::string(name) + " ";
    switch (format) {
    case APG_FORMAT_CSR:
        place(op.indptr, op.n_indptr, m.indptr, st, (what + "indptr").c_str());
        place(op.indices, op.n_indices, m.indices, st, (what + "indices").c_str());
        place(op.vals, op.n_vals, m.vals, st, (what + "values").c_str());
        if (merge && first) {
            const uint64_t tiles = ((uint64_t)m.nrows + m.nnz() + APG_MERGE_TILE - 1) / APG_MERGE_TILE;
            if (tiles > 0xfffffffeull) throw apg::Error(std::string(name) + ": too many merge tiles");
            op.ntiles = (uint32_t)tiles;
            op.tile_rows = dalloc<uint32_t>(tiles + 1);
            op.carry_rows = dalloc<uint32_t>(tiles);
            op.carry_vals = dalloc<double>(tiles);
            op.fix_blocks = grid_stride_blocks(props, tiles, APG_AUX_THREADS);
            if (m.nrows > 0) {
                apg_merge_partition(op, grid_stride_blocks(props, tiles + 1, APG_AUX_THREADS), st);
            }
        }
#if APG_USES_CUSPARSE
        if (cusparse_alg >= 0 && first && m.nrows > 0 && m.nnz() > 0) {
            cusparse_prepare(op, (cusparseSpMVAlg_t)cusparse_alg, st, name);
        }
#endif
        break;
    case APG_FORMAT_ELL: {
        apg::Ell e = apg::to_ell(m, limits);
        if (!first && e.width != op.ell_width) throw apg::Error(what + "ELL width changed");
        op.ell_width = e.width;
        place(op.ell_cols, op.n_ell_cols, e.cols, st, (what + "ELL columns").c_str());
        place(op.ell_vals, op.n_ell_vals, e.vals, st, (what + "ELL values").c_str());
        break;
    }
    case APG_FORMAT_DIA: {
        apg::Dia d = apg::to_dia(m, limits);
        if (!first && d.offsets.size() != op.ndiag) throw apg::Error(what + "DIA diagonals changed");
        op.ndiag = (uint32_t)d.offsets.size();
        place(op.dia_offsets, op.n_dia_offsets, d.offsets, st, (what + "DIA offsets").c_str());
        place(op.dia_data, op.n_dia_data, d.data, st, (what + "DIA band").c_str());
        break;
    }
    case APG_FORMAT_COO: {
        apg::Coo c = apg::to_coo(m);
        op.coo_nnz = (uint32_t)c.vals.size();
        place(op.coo_rows, op.n_coo_rows, c.rows, st, (what + "COO rows").c_str());
        place(op.coo_cols, op.n_coo_cols, c.cols, st, (what + "COO columns").c_str());
        place(op.coo_vals, op.n_coo_vals, c.vals, st, (what + "COO values").c_str());
        break;
    }
    case APG_FORMAT_HYB: {
        apg::Hyb h = apg::to_hyb(m, hyb_split, limits);
        if (!first && h.ell.width != op.ell_width) throw apg::Error(what + "HYB split changed");
        op.ell_width = h.ell.width;
        place(op.ell_cols, op.n_ell_cols, h.ell.cols, st, (what + "HYB ELL columns").c_str());
        place(op.ell_vals, op.n_ell_vals, h.ell.vals, st, (what + "HYB ELL values").c_str());
        op.coo_nnz = (uint32_t)h.coo.vals.size();
        place(op.coo_rows, op.n_coo_rows, h.coo.rows, st, (what + "HYB COO rows").c_str());
        place(op.coo_cols, op.n_coo_cols, h.coo.cols, st, (what + "HYB COO columns").c_str());
        place(op.coo_vals, op.n_coo_vals, h.coo.vals, st, (what + "HYB COO values").c_str());
        break;
    }
    default:
        throw apg::Error(std::string(name) + ": unknown format");
    }
}


// The matrix or a device is not the plan's and the flag that allows it was not given
// (AUTOPCG_GEN_ERR_PLAN).
struct PlanRefusal {
    std::string what;
};

// The launch limits of GPU `ordinal`.
ApgDeviceLimits device_limits(int ordinal) {
    ApgDeviceLimits p;
    APG_CUDA(cudaDeviceGetAttribute(&p.multiProcessorCount, cudaDevAttrMultiProcessorCount,
                                    ordinal));
    APG_CUDA(cudaDeviceGetAttribute(&p.maxThreadsPerMultiProcessor,
                                    cudaDevAttrMaxThreadsPerMultiProcessor, ordinal));
    APG_CUDA(cudaDeviceGetAttribute(&p.maxBlocksPerMultiProcessor,
                                    cudaDevAttrMaxBlocksPerMultiprocessor, ordinal));
    return p;
}

// Makes GPU `ordinal` current (its context created) and checks its name and architecture
// against the plan's: a mismatch throws PlanRefusal, or with `any_device` becomes a note. Returns
// the device's name. `which` names the device in the message ("this device", "GPU 1").
std::string check_plan_device(int ordinal, bool any_device, const std::string &which,
                              std::string &notes) {
    APG_CUDA(cudaSetDevice(ordinal));
    APG_CUDA(cudaFree(nullptr));
    cudaDeviceProp prop;
    APG_CUDA(cudaGetDeviceProperties(&prop, ordinal));
    const std::string name = prop.name;
    int major = 0, minor = 0;
    APG_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, ordinal));
    APG_CUDA(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, ordinal));
    const int arch = 10 * major + minor;
    if (device_slug(name) != APG_PLAN_DEVICE_SLUG || arch != APG_PLAN_ARCH) {
        const std::string msg = std::string("the plan is for ") + APG_PLAN_DEVICE_NAME + " (sm_" +
                                std::to_string(APG_PLAN_ARCH) + ") but " + which + " is " +
                                name + " (sm_" + std::to_string(arch) + ")";
        if (!any_device) {
            throw PlanRefusal{msg + " (pass AUTOPCG_GEN_ANY_DEVICE to run the plan anyway)"};
        }
        notes += "device check forced: " + msg + "\n";
    }
    return name;
}

// Slots of the scalar buffer (cg_scalars.cuh).
constexpr int kIter = 5, kHalt = 6, kHaltIter = 8, kScalarsLen = 9;

} // namespace

// What a poll reads through: one small kernel copies the new history records and the scalars
// straight into `host`, page-locked memory mapped into the device (`mapped` is its device
// address), and one stream synchronisation waits for it. Gathering them on the device with two
// copies and bringing them back with a third, as the library's poll does, cost the emitted
// driver about 1 us per iteration more on the small matrices (H200, 2026-11-28: 16 iterations
// between polls), where an iteration takes 11-12 us.
struct ApgPoll {
    double *host = nullptr, *mapped = nullptr;
    size_t len = 0;

    // Frees the buffer (nothing may still write it).
    void release() {
        if (host) cudaFreeHost(host);
        host = mapped = nullptr;
        len = 0;
    }
};

// Copies `h` history doubles from `hist`, then the kScalarsLen scalars, into `out`.
extern "C" __global__ void apg_poll_gather(const double *hist, size_t h, const double *scalars, double *out) {
    for (size_t i = threadIdx.x; i < h + kScalarsLen; i += blockDim.x) {
        out[i] = i < h ? hist[i] : scalars[i - h];
    }
}

namespace {

// Loads the poll's kernel on the current device (with the plan's, in apg_preload's place).
void preload_poll() {
    cudaFuncAttributes attr;
    APG_CUDA(cudaFuncGetAttributes(&attr, (const void *)apg_poll_gather));
}

// Reads `scalars` and the `count` history records of `history` from record `from` on, queued
// on `st` (of the current device), into sc and hist; the buffer grows when needed.
void poll_read_from(ApgPoll &P, cudaStream_t st, const double *history, const double *scalars,
                    uint64_t from, uint64_t count, double *sc, double *hist) {
    const size_t h = 3 * (size_t)count;
    const size_t need = h + kScalarsLen;
    if (need > P.len) {
        size_t len = need < 3 * 64 + kScalarsLen ? 3 * 64 + kScalarsLen : need;
        APG_CUDA(cudaStreamSynchronize(st));
        P.release();
        APG_CUDA(cudaHostAlloc(reinterpret_cast<void **>(&P.host), sizeof(double) * len,
                               cudaHostAllocMapped | cudaHostAllocPortable));
        P.len = len;
        APG_CUDA(cudaHostGetDevicePointer(reinterpret_cast<void **>(&P.mapped), P.host, 0));
    }
    // A failed launch is left for launches_done, which the solve loop calls next.
    apg_poll_gather<<<1, 256, 0, st>>>(history + 3 * from, h, scalars, P.mapped);
    APG_CUDA(cudaStreamSynchronize(st));
    std::memcpy(hist, P.host, sizeof(double) * h);
    std::memcpy(sc, P.host + h, sizeof(double) * kScalarsLen);
}

void fail(const std::string &msg) { g_last_error = msg; }

// Grows a history of `cap` records (3 doubles each) on the current device to hold `records`:
// at least twice as many, the old records copied on `st` (waited for). Nothing when it holds
// them already; false then, true when it moved.
bool grow_history(double *&history, uint32_t &cap, uint64_t records, cudaStream_t st) {
    if (records <= cap) return false;
    uint64_t fresh_cap = (uint64_t)cap * 2;
    if (fresh_cap < records) fresh_cap = records;
    if (fresh_cap > 0xfffffff0ull) {
        throw apg::Error("the history cannot hold that many iterations");
    }
    double *fresh = dalloc<double>(3 * fresh_cap);
    if (history != nullptr && cap > 0) {
        APG_CUDA(cudaMemcpyAsync(fresh, history, sizeof(double) * 3 * (size_t)cap,
                                 cudaMemcpyDeviceToDevice, st));
        APG_CUDA(cudaStreamSynchronize(st));
    }
    dfree(history);
    history = fresh;
    cap = (uint32_t)fresh_cap;
    return true;
}

// The padding limits of the plan's formats.
apg::PaddingLimits plan_limits() { return apg::PaddingLimits{APG_PAD_MAX_FILL, APG_PAD_MAX_BYTES}; }

} // namespace
