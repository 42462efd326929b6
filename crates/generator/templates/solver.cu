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
// by one) and the host synchronises only every APG_CHECK_EVERY iterations (up to
// APG_POLL_GROWTH times as many while the residual is far from the tolerance), when it reads
// the scalars and the history since the last poll. The solve loop, its stopping rule and the C API
// functions that do not depend on the layout are in driver_api.cuh (shared with the driver of
// plans split over several GPUs); errors, memory and the operands in driver.cuh.
//
// An operand the plan hands to cuSPARSE (APG_CUSPARSE_<op> in plan.h) is kept in CSR and
// multiplied by cusparseSpMV with the plan's algorithm (apg_cusparse_spmv of driver.cuh): its handle,
// descriptors and preprocessed buffer are made once, when it is first placed. Only such a
// plan (APG_USES_CUSPARSE) includes cusparse.h; CMakeLists.txt links cuSPARSE only for it.
#include "driver.cuh"

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
    ApgPoll poll;
    double *dot3_partial = nullptr;
    uint32_t *dot3_counter = nullptr;
    double *dot_partial = nullptr, *dot_out = nullptr;
    uint32_t *dot_counter = nullptr;
    uint32_t aux_xpay_blocks = 1, aux_dot_blocks = 1;
    cudaGraphExec_t graph_one = nullptr, graph_batch = nullptr;
    std::vector<double> residual_history;
    double device_ms = 0, precond_ms = 0, backend_ms = 0;
};

#include "plan_kernels.cuh"

namespace {

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
                  plan_limits(), S.props, st, "A");
#endif
#if APG_HAS_K
    place_operand(S.K, pre.k, APG_FMT_K, APG_HYB_SPLIT_K, APG_MERGE_K, APG_CUSPARSE_ALG_K,
                  plan_limits(), S.props, st, "K");
#endif
#if APG_HAS_KT
    place_operand(S.KT, pre.kt, APG_FMT_KT, APG_HYB_SPLIT_KT, APG_MERGE_KT, APG_CUSPARSE_ALG_KT,
                  plan_limits(), S.props, st, "K^T");
#endif
#if APG_HAS_M
    place_operand(S.M, pre.m, APG_FMT_M, APG_HYB_SPLIT_M, APG_MERGE_M, APG_CUSPARSE_ALG_M,
                  plan_limits(), S.props, st, "M");
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
    apg_spmv_dots_next(S, S.stream);
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
    if (grow_history(S.history, S.hist_cap, records, S.stream)) destroy_graphs(S);
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

// Reads the scalars and the `count` history records from record `from` on (one copy).
void poll_read(ApgSolver &S, uint64_t from, uint64_t count, double *sc, double *hist) {
    poll_read_from(S.poll, S.stream, S.history, S.scalars, from, count, sc, hist);
}

// ||b||.
double rhs_norm(ApgSolver &S) {
    apg_dot(S, S.b, S.b, S.stream);
    double bb = read_dot(S);
    return std::sqrt(bb > 0.0 ? bb : 0.0);
}

// x = 0.
void zero_solution(ApgSolver &S) {
    APG_CUDA(cudaMemsetAsync(S.x, 0, sizeof(double) * S.n, S.stream));
}

// b and the initial guess onto the device.
void put_problem(ApgSolver &S, const double *b, const double *x) {
    APG_CUDA(cudaMemcpyAsync(S.b, b, sizeof(double) * S.n, cudaMemcpyHostToDevice, S.stream));
    APG_CUDA(cudaMemcpyAsync(S.x, x, sizeof(double) * S.n, cudaMemcpyHostToDevice, S.stream));
}

// The solution back into x (waits for it).
void get_solution(ApgSolver &S, double *x) {
    APG_CUDA(cudaMemcpyAsync(x, S.x, sizeof(double) * S.n, cudaMemcpyDeviceToHost, S.stream));
    APG_CUDA(cudaStreamSynchronize(S.stream));
}

void synchronize(ApgSolver &S) { APG_CUDA(cudaStreamSynchronize(S.stream)); }

} // namespace


// =================================================================================== C API

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
                       &S->scalars, &S->history, &S->dot3_partial, &S->dot_partial, &S->dot_out};
    for (double **v : vecs) dfree(*v);
    S->poll.release();
    dfree(S->dot3_counter);
    dfree(S->dot_counter);
    if (S->stream) cudaStreamDestroy(S->stream);
    delete S;
}

namespace {

// Opens GPU 0 (checked against the plan's device), loads the plan's kernels, builds the
// preconditioner, places the operands and allocates the vectors (S.a holds the matrix).
void setup_on_devices(ApgSolver &S, bool any_device, std::chrono::steady_clock::time_point t0) {
    const std::string name = check_plan_device(S.ordinal, any_device, "this device", S.notes);
    S.props = device_limits(S.ordinal);
    S.device_name = std::string("gpu ") + std::to_string(S.ordinal) + " (" + name + ")";
    // A non-blocking stream, as autopcg's own: nothing orders it with the legacy default
    // stream (every allocation's memset is waited for in dalloc).
    APG_CUDA(cudaStreamCreateWithFlags(&S.stream, cudaStreamNonBlocking));
    // Load every kernel now (modules load lazily on first launch otherwise, inside the
    // first solve's time).
    apg_preload();
    preload_poll();
    S.device_ms = ms_since(t0);
    build_and_place(S, S.a);
    auto t1 = std::chrono::steady_clock::now();
    const size_t nn = S.n;
    double **vecs[] = {&S.b, &S.x, &S.r, &S.u, &S.w, &S.p, &S.s, &S.t};
    for (double **v : vecs) *v = dalloc<double>(nn);
    S.scalars = dalloc<double>(kScalarsLen);
    S.dot3_partial = dalloc<double>(3 * (size_t)APG_DOT3_BLOCKS);
    S.dot3_counter = dalloc<uint32_t>(1);
    S.aux_xpay_blocks = grid_stride_blocks(S.props, (S.n + 1) / 2, APG_AUX_THREADS);
    S.aux_dot_blocks = grid_stride_blocks(S.props, S.n, APG_DOT_THREADS);
    S.dot_partial = dalloc<double>(S.aux_dot_blocks);
    S.dot_counter = dalloc<uint32_t>(1);
    S.dot_out = dalloc<double>(1);
    reserve_history(S, 1024);
    APG_CUDA(cudaDeviceSynchronize());
    S.backend_ms += ms_since(t1);
}

// New values (checked finite) of the same pattern: the preconditioner built again and every
// operand placed in the same buffers.
void replace_values(ApgSolver &S, const double *values) {
    APG_CUDA(cudaStreamSynchronize(S.stream));
    apg::Csr next = S.a;
    next.vals.assign(values, values + S.a.nnz());
    S.backend_ms = 0;
    build_and_place(S, next);
    S.a = std::move(next);
}

} // namespace

#include "driver_api.cuh"
