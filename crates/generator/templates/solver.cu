// solver.cu: the host driver of a solver emitted by {{VERSION}} from one plan.
//
// Chronopoulos-Gear PCG, as `autopcg solve` runs it on a GPU (crates/solver gpu/mod.rs and
// pcg.rs), with the kernels and launches of the plan (plan_kernels.cuh):
//
//   start:      r = b - A x; u = M^-1 r; w = A u; p = s = 0; (gamma, delta, rr) and
//               alpha = gamma / delta on the device (record 0 of the run)
//   iteration:  the fused update p = u + beta p; s = w + beta s; x += alpha p; r -= alpha s,
//               u = M^-1 r, w = A u, the fused three-dot reduction whose last stage runs the
//               scalar recurrence on the device and appends (gamma, delta, rr) to the history
//
// Iterations are replayed from captured CUDA graphs (of APG_GRAPH_ITERS iterations, the rest one
// by one) and the host synchronises only every APG_CHECK_EVERY iterations, when it reads the
// scalars and the history since the last poll. Stopping rule:
//   - the first record whose recurrence residual sqrt(rr) meets tol ||b|| ends the run; then the
//     true residual ||b - A x|| of the current x is recomputed: converged when it meets
//     tol ||b||; otherwise the residual is replaced (the recurrence restarts from x: r = b - A x,
//     u = M^-1 r, w = A u, the dots and scalars, p = s = 0), unless the true residual did not
//     decrease since the previous replacement: then the solve stops as stagnated;
//   - a record whose recurrence halted (gamma <= 0, (A p, p) <= 0: not SPD; NaN or infinity:
//     breakdown) ends the solve;
//   - at the iteration limit the true residual decides convergence.
//
// An operand the plan hands to cuSPARSE (APG_CUSPARSE_<op> in plan.h) is kept in CSR and
// multiplied by cusparseSpMV with the plan's algorithm (apg_cusparse_spmv below): its handle,
// descriptors and preprocessed buffer are made once, when it is first placed. Only such a
// plan (APG_USES_CUSPARSE) includes cusparse.h; CMakeLists.txt links cuSPARSE only for it.
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

struct ApgSolver {
    int ordinal = 0;
    ApgDeviceLimits props;
    cudaStream_t stream = nullptr;
    std::string device_name;
    std::string notes;
    uint64_t n = 0;
    apg::Csr a;     // the matrix (host copy: values are replaced by update_values)
    int32_t index_base = 0;
    ApgOperand A, K, KT, M;
    double *inv_diag = nullptr;
    size_t n_inv_diag = 0;
    double *b = nullptr, *x = nullptr, *r = nullptr, *u = nullptr, *w = nullptr, *p = nullptr,
           *s = nullptr, *t = nullptr;
    double *scalars = nullptr, *history = nullptr;
    uint32_t hist_cap = 0;
    // A poll gathers the new history records and the scalars into `poll_stage` on the device
    // and reads them back with one copy into the pinned `poll_host`: one transfer per poll.
    double *poll_stage = nullptr, *poll_host = nullptr;
    size_t poll_len = 0;
    double *dot3_partial = nullptr;
    uint32_t *dot3_counter = nullptr;
    double *dot_partial = nullptr, *dot_out = nullptr;
    uint32_t *dot_counter = nullptr;
    uint32_t aux_xpay_blocks = 1, aux_dot_blocks = 1;
    cudaGraphExec_t graph_one = nullptr, graph_batch = nullptr;
    std::vector<double> residual_history;
    double device_ms = 0, precond_ms = 0, backend_ms = 0;
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

#include "plan_kernels.cuh"

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

apg::PaddingLimits plan_limits() { return apg::PaddingLimits{APG_PAD_MAX_FILL, APG_PAD_MAX_BYTES}; }

// Converts `m` to `format` on the host and uploads it into `op` (allocating on the first call;
// later calls must have the same sizes). `cusparse_alg` is the cusparseSpMVAlg_t of an operand
// cuSPARSE multiplies (CSR; its cuSPARSE state is made on the first call and kept), -1 when a
// kernel of the plan does.
void place_operand(ApgOperand &op, const apg::Csr &m, int format, long long hyb_split,
                   bool merge, int cusparse_alg, const ApgDeviceLimits &props, cudaStream_t st,
                   const char *name) {
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
        apg::Ell e = apg::to_ell(m, plan_limits());
        if (!first && e.width != op.ell_width) throw apg::Error(what + "ELL width changed");
        op.ell_width = e.width;
        place(op.ell_cols, op.n_ell_cols, e.cols, st, (what + "ELL columns").c_str());
        place(op.ell_vals, op.n_ell_vals, e.vals, st, (what + "ELL values").c_str());
        break;
    }
    case APG_FORMAT_DIA: {
        apg::Dia d = apg::to_dia(m, plan_limits());
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
        apg::Hyb h = apg::to_hyb(m, hyb_split, plan_limits());
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

// Builds the preconditioner of the plan for `a` and places every operand on the device (the
// preconditioner is built first: an input error leaves the device operands as they were).
void build_and_place(ApgSolver &S, const apg::Csr &a) {
    auto t0 = std::chrono::steady_clock::now();
    apg::Precond pre = apg::build_precond(a, APG_PRECOND, APG_SSOR_ORDER, APG_SSOR_OMEGA);
    S.precond_ms = ms_since(t0);
    auto t1 = std::chrono::steady_clock::now();
    cudaStream_t st = S.stream;
#if APG_HAS_A
    place_operand(S.A, a, APG_FMT_A, APG_HYB_SPLIT_A, APG_MERGE_A, APG_CUSPARSE_ALG_A,
                  S.props, st, "A");
#endif
#if APG_HAS_K
    place_operand(S.K, pre.k, APG_FMT_K, APG_HYB_SPLIT_K, APG_MERGE_K, APG_CUSPARSE_ALG_K,
                  S.props, st, "K");
#endif
#if APG_HAS_KT
    place_operand(S.KT, pre.kt, APG_FMT_KT, APG_HYB_SPLIT_KT, APG_MERGE_KT, APG_CUSPARSE_ALG_KT,
                  S.props, st, "K^T");
#endif
#if APG_HAS_M
    place_operand(S.M, pre.m, APG_FMT_M, APG_HYB_SPLIT_M, APG_MERGE_M, APG_CUSPARSE_ALG_M,
                  S.props, st, "M");
#endif
    // Jacobi's inverse diagonal (factored SSOR-AI's scaling is in K^T's values already).
    if (APG_PRECOND == APG_PRECOND_JACOBI) {
        place(S.inv_diag, S.n_inv_diag, pre.inv_diag, st, "the diagonal");
    }
    APG_CUDA(cudaStreamSynchronize(st));
    launches_done("setup");
    S.backend_ms += ms_since(t1);
}

void destroy_graphs(ApgSolver &S) {
    if (S.graph_one) cudaGraphExecDestroy(S.graph_one);
    if (S.graph_batch) cudaGraphExecDestroy(S.graph_batch);
    S.graph_one = nullptr;
    S.graph_batch = nullptr;
}

void launch_iteration(ApgSolver &S) {
    apg_update(S, S.stream);
    apg_precond(S, S.r, S.u, S.stream);
    apg_spmv_A(S.A, APG_U, S.w, S.stream);
    apg_dot3_next(S, S.stream);
}

cudaGraphExec_t capture(ApgSolver &S, uint32_t iters) {
    cudaGraph_t graph = nullptr;
    APG_CUDA(cudaStreamBeginCapture(S.stream, cudaStreamCaptureModeThreadLocal));
    for (uint32_t i = 0; i < iters; ++i) launch_iteration(S);
    cudaError_t e = cudaStreamEndCapture(S.stream, &graph);
    launches_done("a captured iteration");
    cuda_check(e, "cudaStreamEndCapture");
    cudaGraphExec_t exec = nullptr;
    e = cudaGraphInstantiateWithFlags(&exec, graph, 0);
    cudaGraphDestroy(graph);
    cuda_check(e, "cudaGraphInstantiateWithFlags");
    // Put the graph on the device now, as autopcg does, rather than at its first launch.
    APG_CUDA(cudaGraphUpload(exec, S.stream));
    return exec;
}

// Queues `count` iterations: graphs of APG_GRAPH_ITERS while that many are left, then graphs
// of one (or every kernel launched directly without graphs).
void run_iterations(ApgSolver &S, uint64_t count) {
    while (count > 0) {
        if (APG_USE_GRAPH && APG_GRAPH_ITERS > 1 && count >= APG_GRAPH_ITERS) {
            if (!S.graph_batch) S.graph_batch = capture(S, APG_GRAPH_ITERS);
            APG_CUDA(cudaGraphLaunch(S.graph_batch, S.stream));
            count -= APG_GRAPH_ITERS;
        } else if (APG_USE_GRAPH) {
            if (!S.graph_one) S.graph_one = capture(S, 1);
            APG_CUDA(cudaGraphLaunch(S.graph_one, S.stream));
            count -= 1;
        } else {
            launch_iteration(S);
            count -= 1;
        }
    }
    launches_done("the iterations");
}

// Makes room for `records` history records (the history pointer and capacity are launch
// arguments, so the graphs are captured again after it moves).
void reserve_history(ApgSolver &S, uint64_t records) {
    if (records <= S.hist_cap) return;
    uint64_t cap = (uint64_t)S.hist_cap * 2;
    if (cap < records) cap = records;
    if (cap > 0xfffffff0ull) throw apg::Error("the history cannot hold that many iterations");
    double *fresh = dalloc<double>(3 * cap);
    if (S.history != nullptr && S.hist_cap > 0) {
        APG_CUDA(cudaMemcpyAsync(fresh, S.history, sizeof(double) * 3 * (size_t)S.hist_cap,
                                 cudaMemcpyDeviceToDevice, S.stream));
        APG_CUDA(cudaStreamSynchronize(S.stream));
    }
    dfree(S.history);
    S.history = fresh;
    S.hist_cap = (uint32_t)cap;
    destroy_graphs(S);
}

double read_dot(ApgSolver &S) {
    double v = 0.0;
    APG_CUDA(cudaMemcpyAsync(&v, S.dot_out, sizeof v, cudaMemcpyDeviceToHost, S.stream));
    APG_CUDA(cudaStreamSynchronize(S.stream));
    launches_done("a dot product");
    return v;
}

// ||b - A x|| of the current x (t is scratch).
double true_residual(ApgSolver &S) {
    apg_spmv_A(S.A, S.x, S.t, S.stream);
    apg_b_minus(S, S.t, S.stream);
    apg_dot(S, S.t, S.t, S.stream);
    double v = read_dot(S);
    return std::sqrt(v > 0.0 ? v : 0.0);
}

// r = b - A x; u = M^-1 r; w = A u; p = s = 0; the dots and scalars of record 0.
void start(ApgSolver &S) {
    cudaStream_t st = S.stream;
    apg_spmv_A(S.A, S.x, S.r, st);
    apg_b_minus(S, S.r, st);
    apg_precond_start(S, S.r, S.u, st);
    apg_spmv_A(S.A, APG_U, S.w, st);
    APG_LAUNCH(cudaMemsetAsync(S.p, 0, sizeof(double) * S.n, st));
    APG_LAUNCH(cudaMemsetAsync(S.s, 0, sizeof(double) * S.n, st));
    apg_dot3_start(S, st);
    launches_done("the start");
}

// Slots of the scalar buffer (cg_scalars.cuh).
constexpr int kIter = 5, kHalt = 6, kHaltIter = 8, kScalarsLen = 9;

// Reads the scalars and the `count` history records from record `from` on: both are gathered
// into the device staging buffer (grown when needed) and come back in one copy into pinned
// host memory, as the library's poll does (two pageable reads cost a poll several
// microseconds more, which small matrices pay every APG_CHECK_EVERY iterations).
void poll_read(ApgSolver &S, uint64_t from, uint64_t count, double *sc, double *hist) {
    const size_t h = 3 * (size_t)count;
    const size_t need = h + kScalarsLen;
    if (need > S.poll_len) {
        size_t len = need < 3 * 64 + kScalarsLen ? 3 * 64 + kScalarsLen : need;
        APG_CUDA(cudaStreamSynchronize(S.stream));
        dfree(S.poll_stage);
        if (S.poll_host) {
            APG_CUDA(cudaFreeHost(S.poll_host));
            S.poll_host = nullptr;
        }
        S.poll_len = 0;
        S.poll_stage = dalloc<double>(len);
        APG_CUDA(cudaMallocHost(reinterpret_cast<void **>(&S.poll_host), sizeof(double) * len));
        S.poll_len = len;
    }
    if (h > 0) {
        APG_CUDA(cudaMemcpyAsync(S.poll_stage, S.history + 3 * from, sizeof(double) * h,
                                 cudaMemcpyDeviceToDevice, S.stream));
    }
    APG_CUDA(cudaMemcpyAsync(S.poll_stage + h, S.scalars, sizeof(double) * kScalarsLen,
                             cudaMemcpyDeviceToDevice, S.stream));
    APG_CUDA(cudaMemcpyAsync(S.poll_host, S.poll_stage, sizeof(double) * need,
                             cudaMemcpyDeviceToHost, S.stream));
    APG_CUDA(cudaStreamSynchronize(S.stream));
    std::memcpy(hist, S.poll_host, sizeof(double) * h);
    std::memcpy(sc, S.poll_host + h, sizeof(double) * kScalarsLen);
}

void fail(const std::string &msg) { g_last_error = msg; }

} // namespace

// =================================================================================== C API

extern "C" void autopcg_gen_default_params(autopcg_gen_params *params) {
    if (params == nullptr) return;
    params->tol = 1e-8;
    params->max_iter = 10000;
    params->record_history = 0;
    params->reserved = 0;
}

extern "C" const char *autopcg_gen_last_error(void) { return g_last_error.c_str(); }

extern "C" const char *autopcg_gen_plan_json_members(void) { return APG_PLAN_JSON_MEMBERS; }

extern "C" const char *autopcg_gen_reason_name(int32_t reason) {
    switch (reason) {
    case AUTOPCG_GEN_CONVERGED: return "converged";
    case AUTOPCG_GEN_MAX_ITER: return "max_iter";
    case AUTOPCG_GEN_STAGNATED: return "stagnated";
    case AUTOPCG_GEN_NOT_SPD: return "not_spd";
    case AUTOPCG_GEN_BREAKDOWN: return "breakdown";
    default: return "unknown";
    }
}

extern "C" void autopcg_gen_destroy(autopcg_gen_solver *solver) {
    ApgSolver *S = reinterpret_cast<ApgSolver *>(solver);
    if (S == nullptr) return;
    if (S->stream) cudaStreamSynchronize(S->stream);
    destroy_graphs(*S);
    S->A.release();
    S->K.release();
    S->KT.release();
    S->M.release();
    double **vecs[] = {&S->inv_diag, &S->b, &S->x, &S->r, &S->u, &S->w, &S->p, &S->s, &S->t,
                       &S->scalars, &S->history, &S->dot3_partial, &S->dot_partial, &S->dot_out,
                       &S->poll_stage};
    for (double **v : vecs) dfree(*v);
    if (S->poll_host) cudaFreeHost(S->poll_host);
    dfree(S->dot3_counter);
    dfree(S->dot_counter);
    if (S->stream) cudaStreamDestroy(S->stream);
    delete S;
}

extern "C" int autopcg_gen_setup(int32_t n, const int32_t *row_ptr, const int32_t *col_idx,
                                 const double *values, int32_t index_base, uint32_t flags,
                                 autopcg_gen_solver **solver) {
    g_last_error.clear();
    if (solver == nullptr) {
        fail("autopcg_gen_setup: solver is NULL");
        return AUTOPCG_GEN_ERR_INPUT;
    }
    *solver = nullptr;
    ApgSolver *S = nullptr;
    try {
        apg::Csr a = apg::csr_from_arrays(n, row_ptr, col_idx, values, index_base);
        const bool force = (flags & AUTOPCG_GEN_FORCE) != 0;
        const bool any_device = (flags & AUTOPCG_GEN_ANY_DEVICE) != 0;
        std::string notes;
        if ((long long)a.nrows != APG_PLAN_N || (long long)a.nnz() != APG_PLAN_NNZ) {
            std::string msg = "the plan was made for a matrix with n = " +
                              std::to_string(APG_PLAN_N) + ", nnz = " +
                              std::to_string(APG_PLAN_NNZ) + " but this one has n = " +
                              std::to_string(a.nrows) + ", nnz = " + std::to_string(a.nnz());
            if (!force) {
                fail(msg + " (pass AUTOPCG_GEN_FORCE to run the plan anyway)");
                return AUTOPCG_GEN_ERR_PLAN;
            }
            notes += "fingerprint check forced: " + msg + "\n";
        }
        auto t0 = std::chrono::steady_clock::now();
        S = new ApgSolver();
        S->a = std::move(a);
        S->n = S->a.nrows;
        S->index_base = index_base;
        APG_CUDA(cudaSetDevice(S->ordinal));
        APG_CUDA(cudaFree(nullptr));
        cudaDeviceProp prop;
        APG_CUDA(cudaGetDeviceProperties(&prop, S->ordinal));
        const std::string name = prop.name;
        int major = 0, minor = 0;
        APG_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, S->ordinal));
        APG_CUDA(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, S->ordinal));
        APG_CUDA(cudaDeviceGetAttribute(&S->props.multiProcessorCount,
                                        cudaDevAttrMultiProcessorCount, S->ordinal));
        APG_CUDA(cudaDeviceGetAttribute(&S->props.maxThreadsPerMultiProcessor,
                                        cudaDevAttrMaxThreadsPerMultiProcessor, S->ordinal));
        APG_CUDA(cudaDeviceGetAttribute(&S->props.maxBlocksPerMultiProcessor,
                                        cudaDevAttrMaxBlocksPerMultiprocessor, S->ordinal));
        S->device_name = std::string("gpu ") + std::to_string(S->ordinal) + " (" + name + ")";
        const int arch = 10 * major + minor;
        if (device_slug(name) != APG_PLAN_DEVICE_SLUG || arch != APG_PLAN_ARCH) {
            std::string msg = std::string("the plan is for ") + APG_PLAN_DEVICE_NAME + " (sm_" +
                              std::to_string(APG_PLAN_ARCH) + ") but this device is " + name +
                              " (sm_" + std::to_string(arch) + ")";
            if (!any_device) {
                fail(msg + " (pass AUTOPCG_GEN_ANY_DEVICE to run the plan anyway)");
                autopcg_gen_destroy(reinterpret_cast<autopcg_gen_solver *>(S));
                return AUTOPCG_GEN_ERR_PLAN;
            }
            notes += "device check forced: " + msg + "\n";
        }
        S->notes = notes;
        // A non-blocking stream, as autopcg's own: nothing orders it with the legacy default
        // stream (every allocation's memset is waited for in dalloc).
        APG_CUDA(cudaStreamCreateWithFlags(&S->stream, cudaStreamNonBlocking));
        // Load every kernel now (modules load lazily on first launch otherwise, inside the
        // first solve's time).
        apg_preload();
        S->device_ms = ms_since(t0);
        build_and_place(*S, S->a);
        auto t1 = std::chrono::steady_clock::now();
        const size_t nn = S->n;
        double **vecs[] = {&S->b, &S->x, &S->r, &S->u, &S->w, &S->p, &S->s, &S->t};
        for (double **v : vecs) *v = dalloc<double>(nn);
        S->scalars = dalloc<double>(kScalarsLen);
        S->dot3_partial = dalloc<double>(3 * (size_t)APG_DOT3_BLOCKS);
        S->dot3_counter = dalloc<uint32_t>(1);
        S->aux_xpay_blocks = grid_stride_blocks(S->props, (S->n + 1) / 2, APG_AUX_THREADS);
        S->aux_dot_blocks = grid_stride_blocks(S->props, S->n, APG_DOT_THREADS);
        S->dot_partial = dalloc<double>(S->aux_dot_blocks);
        S->dot_counter = dalloc<uint32_t>(1);
        S->dot_out = dalloc<double>(1);
        reserve_history(*S, 1024);
        APG_CUDA(cudaDeviceSynchronize());
        S->backend_ms += ms_since(t1);
        *solver = reinterpret_cast<autopcg_gen_solver *>(S);
        return AUTOPCG_GEN_OK;
    } catch (const apg::Error &e) {
        fail(e.what());
        autopcg_gen_destroy(reinterpret_cast<autopcg_gen_solver *>(S));
        return AUTOPCG_GEN_ERR_INPUT;
    } catch (const CudaFailure &e) {
        fail(e.what);
        autopcg_gen_destroy(reinterpret_cast<autopcg_gen_solver *>(S));
        return AUTOPCG_GEN_ERR_CUDA;
    } catch (const std::bad_alloc &) {
        fail("out of host memory during setup");
        autopcg_gen_destroy(reinterpret_cast<autopcg_gen_solver *>(S));
        return AUTOPCG_GEN_ERR_INTERNAL;
    }
}

extern "C" int autopcg_gen_update_values(autopcg_gen_solver *solver, const double *values) {
    g_last_error.clear();
    ApgSolver *S = reinterpret_cast<ApgSolver *>(solver);
    if (S == nullptr || (values == nullptr && S->a.nnz() > 0)) {
        fail("autopcg_gen_update_values: solver or values is NULL");
        return AUTOPCG_GEN_ERR_INPUT;
    }
    try {
        for (size_t q = 0; q < S->a.nnz(); ++q) {
            if (!std::isfinite(values[q])) {
                throw apg::Error("value " + std::to_string(q + S->index_base) + " is " +
                                 apg::fmt_double(values[q]) + ", not finite");
            }
        }
        APG_CUDA(cudaStreamSynchronize(S->stream));
        apg::Csr next = S->a;
        next.vals.assign(values, values + S->a.nnz());
        S->backend_ms = 0;
        build_and_place(*S, next);
        S->a = std::move(next);
        return AUTOPCG_GEN_OK;
    } catch (const apg::Error &e) {
        fail(e.what());
        return AUTOPCG_GEN_ERR_INPUT;
    } catch (const CudaFailure &e) {
        fail(e.what);
        return AUTOPCG_GEN_ERR_CUDA;
    } catch (const std::bad_alloc &) {
        fail("out of host memory during the update");
        return AUTOPCG_GEN_ERR_INTERNAL;
    }
}

extern "C" int autopcg_gen_residual_history(const autopcg_gen_solver *solver,
                                            const double **data, int64_t *len) {
    const ApgSolver *S = reinterpret_cast<const ApgSolver *>(solver);
    if (S == nullptr || data == nullptr || len == nullptr) {
        fail("autopcg_gen_residual_history: a NULL argument");
        return AUTOPCG_GEN_ERR_INPUT;
    }
    *data = S->residual_history.data();
    *len = (int64_t)S->residual_history.size();
    return AUTOPCG_GEN_OK;
}

extern "C" int autopcg_gen_setup_times(const autopcg_gen_solver *solver, double *device_ms,
                                       double *precond_ms, double *backend_ms) {
    const ApgSolver *S = reinterpret_cast<const ApgSolver *>(solver);
    if (S == nullptr) {
        fail("autopcg_gen_setup_times: solver is NULL");
        return AUTOPCG_GEN_ERR_INPUT;
    }
    if (device_ms) *device_ms = S->device_ms;
    if (precond_ms) *precond_ms = S->precond_ms;
    if (backend_ms) *backend_ms = S->backend_ms;
    return AUTOPCG_GEN_OK;
}

extern "C" const char *autopcg_gen_device(const autopcg_gen_solver *solver) {
    const ApgSolver *S = reinterpret_cast<const ApgSolver *>(solver);
    return S == nullptr ? "" : S->device_name.c_str();
}

extern "C" const char *autopcg_gen_notes(const autopcg_gen_solver *solver) {
    const ApgSolver *S = reinterpret_cast<const ApgSolver *>(solver);
    return S == nullptr ? "" : S->notes.c_str();
}

namespace {

// The solve proper (b and x0 already on the device). Fills info; throws on CUDA failures.
void solve_on_device(ApgSolver &S, const autopcg_gen_params &prm, autopcg_gen_info &info) {
    S.residual_history.clear();
    apg_dot(S, S.b, S.b, S.stream);
    double bb = read_dot(S);
    const double bnorm = std::sqrt(bb > 0.0 ? bb : 0.0);
    info.rhs_norm = bnorm;
    if (!std::isfinite(bnorm)) {
        info.reason = AUTOPCG_GEN_BREAKDOWN;
        info.relative_residual = NAN;
        return;
    }
    if (bnorm == 0.0) {
        // x = 0 is the exact solution, whatever the initial guess.
        APG_CUDA(cudaMemsetAsync(S.x, 0, sizeof(double) * S.n, S.stream));
        info.converged = 1;
        info.reason = AUTOPCG_GEN_CONVERGED;
        if (prm.record_history) S.residual_history.push_back(0.0);
        return;
    }
    const double threshold = prm.tol * bnorm;
    const uint64_t max_iter = (uint64_t)prm.max_iter;
    uint64_t reserve = max_iter + 1;
    if (reserve > (1ull << 20)) reserve = 1ull << 20;
    reserve_history(S, reserve);

    uint64_t issued = 0;       // iterations queued since the solve began
    uint64_t base = 0;         // iteration of record 0 of the current run
    uint64_t queued = 0;       // records queued in the current run
    uint64_t polled = 0;       // records examined in the current run
    double last_true = INFINITY; // true residual at the last replacement
    double true_res = NAN;     // true residual of the current x, when computed
    bool true_current = false;
    std::vector<double> hist;
    double sc[kScalarsLen];

    start(S);
    queued = 1;
    for (;;) {
        // Poll: the scalars and the history records since the last poll.
        const uint64_t count = queued - polled;
        hist.resize(3 * count);
        poll_read(S, polled, count, sc, hist.data());
        launches_done("the iterations");
        const int halt = (int)sc[kHalt];
        const uint64_t halt_iter = (uint64_t)sc[kHaltIter];
        bool met = false, halted = false;
        for (uint64_t j = 0; j < count; ++j) {
            const uint64_t k = polled + j;
            const double rr = hist[3 * j + 2];
            const double res = std::sqrt(rr);
            if (prm.record_history) S.residual_history.push_back(res);
            info.iterations = (int64_t)(base + k);
            info.recurrence_relative_residual = res / bnorm;
            if (res <= threshold) {
                met = true;
                break;
            }
            if (halt != 0 && halt_iter == k) {
                info.reason = halt == 3 ? AUTOPCG_GEN_BREAKDOWN : AUTOPCG_GEN_NOT_SPD;
                halted = true;
                break;
            }
        }
        if (!met && !halted && halt == 0 && count > 0 && (uint64_t)sc[kIter] != queued - 1) {
            throw CudaFailure{"the device recorded iteration " + std::to_string((uint64_t)sc[kIter]) +
                              " but " + std::to_string(queued - 1) + " were queued (internal error)"};
        }
        if (halt != 0 && !halted && !met) {
            throw CudaFailure{"the device recurrence halted at iteration " +
                              std::to_string(halt_iter) + ", outside the records " +
                              std::to_string(polled) + ".." + std::to_string(queued) +
                              " (internal error)"};
        }
        polled = queued;
        if (halted) break;
        if (met) {
            true_res = true_residual(S);
            true_current = true;
            if (!std::isfinite(true_res)) {
                info.reason = AUTOPCG_GEN_BREAKDOWN;
                break;
            }
            if (true_res <= threshold) {
                info.reason = AUTOPCG_GEN_CONVERGED;
                break;
            }
            if (!(true_res < last_true)) {
                info.reason = AUTOPCG_GEN_STAGNATED;
                break;
            }
            if (issued >= max_iter) {
                info.reason = AUTOPCG_GEN_MAX_ITER;
                break;
            }
            // Residual replacement: restart the recurrence from the current x.
            last_true = true_res;
            info.residual_replacements += 1;
            base = issued;
            start(S);
            true_current = false;
            queued = 1;
            polled = 0;
            continue;
        }
        if (issued >= max_iter) {
            info.reason = AUTOPCG_GEN_MAX_ITER;
            break;
        }
        uint64_t next = issued + APG_CHECK_EVERY;
        if (next > max_iter) next = max_iter;
        const uint64_t batch = next - issued;
        reserve_history(S, queued + batch);
        run_iterations(S, batch);
        issued = next;
        queued += batch;
        true_current = false;
    }
    if (info.reason == AUTOPCG_GEN_NOT_SPD || info.reason == AUTOPCG_GEN_BREAKDOWN) {
        info.relative_residual = NAN;
        if (info.reason == AUTOPCG_GEN_NOT_SPD) {
            double tr = true_residual(S);
            info.relative_residual = tr / bnorm;
        }
        info.converged = 0;
        return;
    }
    if (!true_current) true_res = true_residual(S);
    info.relative_residual = true_res / bnorm;
    if (!std::isfinite(true_res)) {
        info.reason = AUTOPCG_GEN_BREAKDOWN;
        info.converged = 0;
        return;
    }
    if (true_res <= threshold) info.reason = AUTOPCG_GEN_CONVERGED;
    info.converged = info.reason == AUTOPCG_GEN_CONVERGED ? 1 : 0;
}

} // namespace

extern "C" int autopcg_gen_solve(autopcg_gen_solver *solver, const double *b, double *x,
                                 const autopcg_gen_params *params, autopcg_gen_info *info_out) {
    g_last_error.clear();
    ApgSolver *S = reinterpret_cast<ApgSolver *>(solver);
    autopcg_gen_params prm;
    autopcg_gen_default_params(&prm);
    if (params != nullptr) prm = *params;
    if (S == nullptr || (S->n > 0 && (b == nullptr || x == nullptr))) {
        fail("autopcg_gen_solve: solver, b or x is NULL");
        return AUTOPCG_GEN_ERR_INPUT;
    }
    if (!(std::isfinite(prm.tol) && prm.tol > 0.0)) {
        fail("autopcg_gen_solve: tolerance must be positive and finite, got " +
             apg::fmt_double(prm.tol));
        return AUTOPCG_GEN_ERR_INPUT;
    }
    if (prm.max_iter < 0) {
        fail("autopcg_gen_solve: max_iter must not be negative, got " +
             std::to_string(prm.max_iter));
        return AUTOPCG_GEN_ERR_INPUT;
    }
    autopcg_gen_info info;
    std::memset(&info, 0, sizeof info);
    info.reason = AUTOPCG_GEN_MAX_ITER;
    try {
        auto t0 = std::chrono::steady_clock::now();
        APG_CUDA(cudaMemcpyAsync(S->b, b, sizeof(double) * S->n, cudaMemcpyHostToDevice,
                                 S->stream));
        APG_CUDA(cudaMemcpyAsync(S->x, x, sizeof(double) * S->n, cudaMemcpyHostToDevice,
                                 S->stream));
        uint64_t records = (uint64_t)prm.max_iter + 1;
        if (records > (1ull << 20)) records = 1ull << 20;
        reserve_history(*S, records);
        APG_CUDA(cudaStreamSynchronize(S->stream));
        info.upload_ms = ms_since(t0);
        auto t1 = std::chrono::steady_clock::now();
        solve_on_device(*S, prm, info);
        APG_CUDA(cudaMemcpyAsync(x, S->x, sizeof(double) * S->n, cudaMemcpyDeviceToHost,
                                 S->stream));
        APG_CUDA(cudaStreamSynchronize(S->stream));
        info.solve_ms = ms_since(t1);
    } catch (const CudaFailure &e) {
        fail(e.what);
        if (info_out) *info_out = info;
        return AUTOPCG_GEN_ERR_CUDA;
    } catch (const apg::Error &e) {
        fail(e.what());
        if (info_out) *info_out = info;
        return AUTOPCG_GEN_ERR_INPUT;
    } catch (const std::bad_alloc &) {
        fail("out of host memory during the solve");
        return AUTOPCG_GEN_ERR_INTERNAL;
    }
    if (info_out) *info_out = info;
    return AUTOPCG_GEN_OK;
}
