// solver.cu: the host driver of a solver emitted by {{VERSION}} from a plan split into row blocks,
// one per GPU.
//
// Chronopoulos-Gear PCG as `autopcg solve --gpus N` runs it (crates/solver blocks/gpu.rs), with
// the blocks, kernels and launches of the plan (kApgBlocks in plan_kernels.cuh). Block i owns
// the rows and vector entries rows_i of the matrix and runs on GPU gpu_i: its local part (the
// entries whose columns it owns) in the plan's format, its halo part (the entries whose columns
// other blocks own) in CSR with columns numbering its halo buffer, and its preconditioner built
// on its local part alone (block Jacobi around SSOR-AI: the couplings between blocks are left
// out of the preconditioner, as autopcg does).
//
// One iteration, every block on its own stream:
//   1. the fused update p = u + beta p; s = w + beta s; x += alpha p; r -= alpha s (alpha and
//      beta from the block's own scalar buffer), then u = M^-1 r;
//   2. the halo exchange of u, pulled by the receiver and overlapped with the local product:
//      each block waits until the others have copied its previous message (their `pulled`),
//      packs the entries they need into its send buffer and records `packed`, then runs
//      w = A_local u; its copier stream waits for the senders' `packed` and for the block's own
//      halo product of the last exchange (`halo_read`), copies the messages into the block's
//      halo buffer (peer copies between GPUs) and records `pulled` and `halo_ready`;
//   3. once `halo_ready`: w += A_halo h (the add variant of a CSR kernel), then `halo_read`;
//   4. the all-reduce of the three dots as an all-gather: each block waits until the others
//      have copied its slot of the last iteration (their `gathered`), writes its (r, u), (w, u),
//      (r, r) into slot i of its slot array and records `dotted`; it then waits for the others'
//      `dotted`, copies their slots into its own array, records `gathered` and sums the slots in
//      block order with the scalar recurrence on its own scalar buffer. Every block sums the same
//      numbers in the same order, so every scalar buffer holds the same scalars and the
//      iteration keeps a single reduction.
// The host polls block 0's scalars and history every APG_CHECK_EVERY iterations, up to
// APG_POLL_GROWTH times as many far from the tolerance (its reduction waited for every block's
// dots). Kernels are launched one by one (no CUDA graph), as autopcg's
// multi-block solver does. ||b||, ||x|| and the true residual are summed per block on its
// device and across the blocks on the host. The solve loop and its stopping rule are those of
// driver_api.cuh.
//
// A plan for more GPUs than the host has is refused unless AUTOPCG_GEN_ANY_DEVICE is passed:
// then block i runs on GPU gpu_i modulo the GPU count (several blocks on one GPU run the same
// code, events and copies included).
#include "driver.cuh"

#include <algorithm>

struct ApgBlock;

// What plan_kernels.cuh says of every block (kApgBlocks): its rows and GPU, the format, HYB
// split, merge workspace and cuSPARSE algorithm of its operands A (local part), K, K^T and M
// (format -1: not stored), the grid of its three-dot reduction, and its launch functions.
struct ApgBlockPlan {
    uint64_t row_start, row_end;
    int gpu;
    int precond;
    int format[4];
    long long hyb_split[4];
    int merge[4];
    int cusparse_alg[4];
    uint32_t dot3_blocks;
    void (*spmv[4])(const ApgOperand &, const double *, double *, cudaStream_t);
    void (*precond_fn)(ApgBlock &, const double *, double *, cudaStream_t);
    void (*update)(ApgBlock &, cudaStream_t);
    void (*halo_add)(const ApgOperand &, const double *, double *, cudaStream_t);
    void (*dot3_slot)(ApgBlock &, double *, uint32_t, cudaStream_t);
};

// Operand slots of ApgBlockPlan's arrays.
enum { kOpA = 0, kOpK = 1, kOpKT = 2, kOpM = 3 };

// One row block on its device.
struct ApgBlock {
    int ordinal = 0;
    ApgDeviceLimits props;
    cudaStream_t stream = nullptr, copier = nullptr;
    cudaEvent_t packed = nullptr, pulled = nullptr, halo_ready = nullptr, halo_read = nullptr,
                dotted = nullptr, gathered = nullptr;
    uint64_t n = 0, row0 = 0;
    // Host copies of the parts, and where their values sit in the matrix's value array (value
    // updates gather the new values through them).
    apg::Csr local, halo_part;
    std::vector<size_t> local_src, halo_src;
    ApgOperand A, H, K, KT, M;
    double *inv_diag = nullptr;
    size_t n_inv_diag = 0;
    double *b = nullptr, *x = nullptr, *r = nullptr, *u = nullptr, *w = nullptr, *p = nullptr,
           *s = nullptr, *t = nullptr;
    // Send buffer (packed by send_idx) and halo buffer.
    double *send = nullptr, *halo = nullptr;
    uint32_t *send_idx = nullptr;
    uint32_t send_len = 0, halo_len = 0, gather_blocks = 1;
    // Slot array (3 per block, every block) and the block's own scalars and history.
    double *slots = nullptr, *scalars = nullptr, *history = nullptr;
    uint32_t hist_cap = 0;
    double *dot3_partial = nullptr;
    uint32_t *dot3_counter = nullptr;
    double *dot_partial = nullptr, *dot_out = nullptr;
    uint32_t *dot_counter = nullptr;
    uint32_t aux_xpay_blocks = 1, aux_dot_blocks = 1;
};

// One copy of a halo exchange: send[from][src .. src + len) to halo[to][dst ..).
struct ApgCopy {
    uint32_t from, to, src, dst, len;
};

struct ApgSolver {
    uint64_t n = 0;
    apg::Csr a; // the matrix (host copy: values are replaced by update_values)
    int32_t index_base = 0;
    std::vector<ApgBlock> blocks;
    std::vector<ApgCopy> copies;
    std::string device_name;
    std::string notes;
    // Block 0's poll staging (on its device) and its pinned host copy.
    ApgPoll poll;
    std::vector<double> residual_history;
    double device_ms = 0, precond_ms = 0, backend_ms = 0;
};

#include "plan_kernels.cuh"

namespace {

void use(const ApgBlock &B) { APG_CUDA(cudaSetDevice(B.ordinal)); }

// ------------------------------------------------------------------------------ the split

// The local and halo parts of rows [r0, r1) of `a` (starts: every block's first row, then n):
// local columns shifted to the block, halo columns numbering the ascending global columns the
// block needs from other blocks (halo_cols).
void split_block(const apg::Csr &a, ApgBlock &B, uint64_t r0, uint64_t r1,
                 std::vector<uint32_t> &halo_cols) {
    const uint32_t m = (uint32_t)(r1 - r0);
    halo_cols.clear();
    for (uint64_t i = r0; i < r1; ++i) {
        for (uint32_t q = a.indptr[i]; q < a.indptr[i + 1]; ++q) {
            const uint32_t c = a.indices[q];
            if (c < r0 || c >= r1) halo_cols.push_back(c);
        }
    }
    std::sort(halo_cols.begin(), halo_cols.end());
    halo_cols.erase(std::unique(halo_cols.begin(), halo_cols.end()), halo_cols.end());
    apg::Csr &L = B.local, &H = B.halo_part;
    L = apg::Csr();
    H = apg::Csr();
    L.nrows = L.ncols = m;
    H.nrows = m;
    H.ncols = (uint32_t)halo_cols.size();
    L.indptr.assign(1, 0);
    H.indptr.assign(1, 0);
    B.local_src.clear();
    B.halo_src.clear();
    for (uint64_t i = r0; i < r1; ++i) {
        for (uint32_t q = a.indptr[i]; q < a.indptr[i + 1]; ++q) {
            const uint32_t c = a.indices[q];
            if (c >= r0 && c < r1) {
                L.indices.push_back((uint32_t)(c - r0));
                L.vals.push_back(a.vals[q]);
                B.local_src.push_back(q);
            } else {
                const auto at = std::lower_bound(halo_cols.begin(), halo_cols.end(), c);
                H.indices.push_back((uint32_t)(at - halo_cols.begin()));
                H.vals.push_back(a.vals[q]);
                B.halo_src.push_back(q);
            }
        }
        L.indptr.push_back((uint32_t)L.indices.size());
        H.indptr.push_back((uint32_t)H.indices.size());
    }
}

// Block B's preconditioner, built on its local part (an error names the row of the whole
// matrix).
apg::Precond build_block_precond(ApgSolver &S, const apg::Csr &local, const ApgBlockPlan &P,
                                 int index) {
    auto t0 = std::chrono::steady_clock::now();
    try {
        apg::Precond pre = apg::build_precond(local, P.precond, APG_SSOR_ORDER, APG_SSOR_OMEGA,
                                              P.row_start);
        S.precond_ms += ms_since(t0);
        return pre;
    } catch (const apg::Error &e) {
        throw apg::Error("block " + std::to_string(index) + " (rows " +
                         std::to_string(P.row_start + 1) + ".." + std::to_string(P.row_end) +
                         "): " + e.what());
    }
}

// Places block B's operands: its local part (the values of `local` and `halo_part` are the
// block's current ones), its halo part and its preconditioner `pre`.
void place_block(ApgSolver &S, ApgBlock &B, const ApgBlockPlan &P, const apg::Precond &pre,
                 int index) {
    use(B);
    auto t1 = std::chrono::steady_clock::now();
    const std::string tag = "block " + std::to_string(index) + " ";
    const apg::Csr *parts[4] = {&B.local, &pre.k, &pre.kt, &pre.m};
    ApgOperand *ops[4] = {&B.A, &B.K, &B.KT, &B.M};
    const char *names[4] = {"A", "K", "K^T", "M"};
    for (int o = 0; o < 4; ++o) {
        if (P.format[o] < 0) continue;
        place_operand(*ops[o], *parts[o], P.format[o], P.hyb_split[o], P.merge[o] != 0,
                      P.cusparse_alg[o], plan_limits(), B.props, B.stream,
                      (tag + names[o]).c_str());
    }
    place_operand(B.H, B.halo_part, APG_FORMAT_CSR, -1, false, -1, plan_limits(), B.props,
                  B.stream, (tag + "halo part").c_str());
    if (P.precond == APG_PRECOND_JACOBI) {
        place(B.inv_diag, B.n_inv_diag, pre.inv_diag, B.stream, (tag + "diagonal").c_str());
    }
    APG_CUDA(cudaStreamSynchronize(B.stream));
    launches_done("setup");
    S.backend_ms += ms_since(t1);
}

// ------------------------------------------------------------------------- one iteration

// Which vector a multiply carries: u into w (the iteration), x into t (the start, residuals).
enum Carried { kU, kX };

// Makes B's stream wait for the event `ev` of every other block.
void wait_others(ApgSolver &S, size_t b, cudaStream_t st, cudaEvent_t ApgBlock::*ev) {
    if (S.blocks.size() < 2) return;
    for (size_t j = 0; j < S.blocks.size(); ++j) {
        if (j != b) APG_LAUNCH(cudaStreamWaitEvent(st, S.blocks[j].*ev, 0));
    }
}

// out = A v on every block (steps 2 and 3 of the header).
void multiply(ApgSolver &S, Carried which) {
    const size_t nb = S.blocks.size();
    for (size_t b = 0; b < nb; ++b) {
        ApgBlock &B = S.blocks[b];
        use(B);
        wait_others(S, b, B.stream, &ApgBlock::pulled);
        apg_gather(B.send_len, B.send_idx, which == kU ? B.u : B.x, B.send, B.gather_blocks,
                   B.stream);
        APG_LAUNCH(cudaEventRecord(B.packed, B.stream));
    }
    for (size_t b = 0; b < nb; ++b) {
        ApgBlock &B = S.blocks[b];
        use(B);
        kApgBlocks[b].spmv[kOpA](B.A, which == kU ? B.u : B.x, which == kU ? B.w : B.t,
                                 B.stream);
    }
    for (size_t b = 0; b < nb; ++b) {
        ApgBlock &B = S.blocks[b];
        use(B);
        wait_others(S, b, B.copier, &ApgBlock::packed);
        APG_LAUNCH(cudaStreamWaitEvent(B.copier, B.halo_read, 0));
        for (const ApgCopy &c : S.copies) {
            if (c.to != b) continue;
            const ApgBlock &F = S.blocks[c.from];
            APG_LAUNCH(cudaMemcpyPeerAsync(B.halo + c.dst, B.ordinal, F.send + c.src, F.ordinal,
                                           sizeof(double) * (size_t)c.len, B.copier));
        }
        APG_LAUNCH(cudaEventRecord(B.pulled, B.copier));
        APG_LAUNCH(cudaEventRecord(B.halo_ready, B.copier));
    }
    for (size_t b = 0; b < nb; ++b) {
        ApgBlock &B = S.blocks[b];
        use(B);
        APG_LAUNCH(cudaStreamWaitEvent(B.stream, B.halo_ready, 0));
        kApgBlocks[b].halo_add(B.H, B.halo, which == kU ? B.w : B.t, B.stream);
        APG_LAUNCH(cudaEventRecord(B.halo_read, B.stream));
    }
}

// w = A u, every block's three dots and the all-reduce with the recurrence step (for
// iteration 0 when `start`, else the next one).
void spmv_dots(ApgSolver &S, bool start) {
    multiply(S, kU);
    const size_t nb = S.blocks.size();
    for (size_t b = 0; b < nb; ++b) {
        ApgBlock &B = S.blocks[b];
        use(B);
        wait_others(S, b, B.stream, &ApgBlock::gathered);
        kApgBlocks[b].dot3_slot(B, B.slots, (uint32_t)b, B.stream);
        APG_LAUNCH(cudaEventRecord(B.dotted, B.stream));
    }
    for (size_t b = 0; b < nb; ++b) {
        ApgBlock &B = S.blocks[b];
        use(B);
        wait_others(S, b, B.stream, &ApgBlock::dotted);
        for (size_t j = 0; j < nb; ++j) {
            if (j == b) continue;
            const ApgBlock &J = S.blocks[j];
            APG_LAUNCH(cudaMemcpyPeerAsync(B.slots + 3 * j, B.ordinal, J.slots + 3 * j,
                                           J.ordinal, 3 * sizeof(double), B.stream));
        }
        APG_LAUNCH(cudaEventRecord(B.gathered, B.stream));
        apg_slots_advance((uint32_t)nb, B.slots, B.scalars, B.history, B.hist_cap, start, 0u,
                          B.stream);
    }
}

void launch_iteration(ApgSolver &S) {
    for (size_t b = 0; b < S.blocks.size(); ++b) {
        ApgBlock &B = S.blocks[b];
        use(B);
        kApgBlocks[b].update(B, B.stream);
        kApgBlocks[b].precond_fn(B, B.r, B.u, B.stream);
    }
    spmv_dots(S, false);
}

// Queues `count` iterations, kernel by kernel.
void run_iterations(ApgSolver &S, uint64_t count) {
    for (uint64_t i = 0; i < count; ++i) launch_iteration(S);
    launches_done("the iterations");
}

void synchronize(ApgSolver &S) {
    for (ApgBlock &B : S.blocks) {
        use(B);
        APG_CUDA(cudaStreamSynchronize(B.stream));
        APG_CUDA(cudaStreamSynchronize(B.copier));
    }
}

// Makes room for `records` history records in every block.
void reserve_history(ApgSolver &S, uint64_t records) {
    if (S.blocks.empty() || records <= S.blocks[0].hist_cap) return;
    synchronize(S);
    for (ApgBlock &B : S.blocks) {
        use(B);
        grow_history(B.history, B.hist_cap, records, B.stream);
    }
}

// Sum over the blocks (in block order, on the host) of (v, v), v chosen by `pick`.
double sum_squares(ApgSolver &S, double *ApgBlock::*pick) {
    double total = 0.0;
    for (ApgBlock &B : S.blocks) {
        use(B);
        apg_dot(B, B.*pick, B.*pick, B.stream);
    }
    for (ApgBlock &B : S.blocks) {
        use(B);
        double v = 0.0;
        APG_CUDA(cudaMemcpyAsync(&v, B.dot_out, sizeof v, cudaMemcpyDeviceToHost, B.stream));
        APG_CUDA(cudaStreamSynchronize(B.stream));
        total += v;
    }
    launches_done("a dot product");
    return total > 0.0 ? total : 0.0;
}

double rhs_norm(ApgSolver &S) { return std::sqrt(sum_squares(S, &ApgBlock::b)); }

// ||b - A x|| of the current x (t is scratch).
double true_residual(ApgSolver &S) {
    multiply(S, kX);
    for (ApgBlock &B : S.blocks) {
        use(B);
        apg_b_minus(B, B.t, B.stream);
    }
    return std::sqrt(sum_squares(S, &ApgBlock::t));
}

void zero_solution(ApgSolver &S) {
    for (ApgBlock &B : S.blocks) {
        use(B);
        APG_CUDA(cudaMemsetAsync(B.x, 0, sizeof(double) * B.n, B.stream));
    }
}

// r = b - A x; u = M^-1 r; w = A u; p = s = 0; the dots and scalars of record 0.
void start(ApgSolver &S) {
    multiply(S, kX);
    for (size_t b = 0; b < S.blocks.size(); ++b) {
        ApgBlock &B = S.blocks[b];
        use(B);
        APG_LAUNCH(cudaMemcpyAsync(B.r, B.t, sizeof(double) * B.n, cudaMemcpyDeviceToDevice,
                                   B.stream));
        apg_b_minus(B, B.r, B.stream);
        kApgBlocks[b].precond_fn(B, B.r, B.u, B.stream);
        APG_LAUNCH(cudaMemsetAsync(B.p, 0, sizeof(double) * B.n, B.stream));
        APG_LAUNCH(cudaMemsetAsync(B.s, 0, sizeof(double) * B.n, B.stream));
    }
    spmv_dots(S, true);
    launches_done("the start");
}

// Reads block 0's scalars and `count` history records from record `from` on (one copy).
void poll_read(ApgSolver &S, uint64_t from, uint64_t count, double *sc, double *hist) {
    ApgBlock &B = S.blocks[0];
    use(B);
    poll_read_from(S.poll, B.stream, B.history, B.scalars, from, count, sc, hist);
}

// b and the initial guess onto the devices, block by block.
void put_problem(ApgSolver &S, const double *b, const double *x) {
    for (ApgBlock &B : S.blocks) {
        use(B);
        APG_CUDA(cudaMemcpyAsync(B.b, b + B.row0, sizeof(double) * B.n, cudaMemcpyHostToDevice,
                                 B.stream));
        APG_CUDA(cudaMemcpyAsync(B.x, x + B.row0, sizeof(double) * B.n, cudaMemcpyHostToDevice,
                                 B.stream));
    }
}

// The solution gathered from every block into x (waits for it).
void get_solution(ApgSolver &S, double *x) {
    synchronize(S);
    for (ApgBlock &B : S.blocks) {
        use(B);
        APG_CUDA(cudaMemcpyAsync(x + B.row0, B.x, sizeof(double) * B.n, cudaMemcpyDeviceToHost,
                                 B.stream));
    }
    synchronize(S);
}

// ------------------------------------------------------------------------------- setup

// The halo exchange's copies (receivers in block order, owners ascending in each) and every
// block's pack indices, from the blocks' halo columns.
void plan_exchange(ApgSolver &S, const std::vector<std::vector<uint32_t>> &halo_cols,
                   std::vector<std::vector<uint32_t>> &pack) {
    const size_t nb = S.blocks.size();
    pack.assign(nb, std::vector<uint32_t>());
    S.copies.clear();
    for (size_t to = 0; to < nb; ++to) {
        const std::vector<uint32_t> &cols = halo_cols[to];
        size_t k = 0;
        while (k < cols.size()) {
            // The owner of cols[k]: the block whose rows hold it.
            size_t from = 0;
            while (from + 1 < nb && cols[k] >= kApgBlocks[from + 1].row_start) ++from;
            const uint64_t end = kApgBlocks[from].row_end;
            const size_t first = k;
            ApgCopy c;
            c.from = (uint32_t)from;
            c.to = (uint32_t)to;
            c.src = (uint32_t)pack[from].size();
            c.dst = (uint32_t)first;
            while (k < cols.size() && cols[k] < end) {
                pack[from].push_back((uint32_t)(cols[k] - kApgBlocks[from].row_start));
                ++k;
            }
            c.len = (uint32_t)(k - first);
            S.copies.push_back(c);
        }
    }
}

// The devices' names checked against the plan's; the GPU of every block.
std::vector<int> place_blocks(ApgSolver &S, bool any_device) {
    int count = 0;
    APG_CUDA(cudaGetDeviceCount(&count));
    int needed = 0;
    for (int b = 0; b < APG_NBLOCKS; ++b) needed = std::max(needed, kApgBlocks[b].gpu + 1);
    std::vector<int> gpu(APG_NBLOCKS);
    if (count < needed) {
        const std::string msg = "the plan runs its " + std::to_string(APG_NBLOCKS) +
                                " row blocks on " + std::to_string(needed) + " GPUs but " +
                                std::to_string(count) + " were found";
        if (!any_device || count < 1) {
            throw PlanRefusal{msg + (count < 1 ? std::string()
                                               : " (pass AUTOPCG_GEN_ANY_DEVICE to run the "
                                                 "blocks on the GPUs there are)")};
        }
        S.notes += "device check forced: " + msg + "; block i runs on GPU gpu_i modulo " +
                   std::to_string(count) + "\n";
    }
    for (int b = 0; b < APG_NBLOCKS; ++b) gpu[b] = kApgBlocks[b].gpu % (count > 0 ? count : 1);
    std::vector<int> seen;
    std::string names;
    for (int b = 0; b < APG_NBLOCKS; ++b) {
        const int d = gpu[b];
        if (std::find(seen.begin(), seen.end(), d) != seen.end()) continue;
        seen.push_back(d);
        const std::string name =
            check_plan_device(d, any_device, "GPU " + std::to_string(d), S.notes);
        // Load every kernel on this device now (modules load lazily on first launch
        // otherwise, inside the first solve's time).
        apg_preload();
        preload_poll();
        names += (names.empty() ? "" : ", ") + std::to_string(d) + " (" + name + ")";
    }
    // Direct access between the GPUs where the hardware has it (peer copies work without it,
    // staged by the driver, so a refusal only costs speed).
    for (int i : seen) {
        for (int j : seen) {
            if (i == j) continue;
            int can = 0;
            if (cudaDeviceCanAccessPeer(&can, i, j) == cudaSuccess && can) {
                APG_CUDA(cudaSetDevice(i));
                if (cudaDeviceEnablePeerAccess(j, 0) != cudaSuccess) (void)cudaGetLastError();
            }
        }
    }
    S.device_name = std::string(seen.size() > 1 ? "gpus " : "gpu ") + names + ", " +
                    std::to_string(APG_NBLOCKS) + " row blocks";
    return gpu;
}

// Every block of `a` on its device: split, preconditioned, placed, with its vectors, buffers,
// streams and events.
void setup_blocks(ApgSolver &S, const std::vector<int> &gpu) {
    const size_t nb = APG_NBLOCKS;
    S.blocks.resize(nb);
    std::vector<std::vector<uint32_t>> halo_cols(nb), pack;
    for (size_t b = 0; b < nb; ++b) {
        ApgBlock &B = S.blocks[b];
        const ApgBlockPlan &P = kApgBlocks[b];
        B.ordinal = gpu[b];
        B.row0 = P.row_start;
        B.n = P.row_end - P.row_start;
        use(B);
        B.props = device_limits(B.ordinal);
        APG_CUDA(cudaStreamCreateWithFlags(&B.stream, cudaStreamNonBlocking));
        APG_CUDA(cudaStreamCreateWithFlags(&B.copier, cudaStreamNonBlocking));
        cudaEvent_t *evs[] = {&B.packed, &B.pulled, &B.halo_ready, &B.halo_read, &B.dotted,
                              &B.gathered};
        for (cudaEvent_t *e : evs) APG_CUDA(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
        split_block(S.a, B, P.row_start, P.row_end, halo_cols[b]);
        place_block(S, B, P, build_block_precond(S, B.local, P, (int)b), (int)b);
    }
    plan_exchange(S, halo_cols, pack);
    auto t1 = std::chrono::steady_clock::now();
    for (size_t b = 0; b < nb; ++b) {
        ApgBlock &B = S.blocks[b];
        const ApgBlockPlan &P = kApgBlocks[b];
        use(B);
        double **vecs[] = {&B.b, &B.x, &B.r, &B.u, &B.w, &B.p, &B.s, &B.t};
        for (double **v : vecs) *v = dalloc<double>(B.n);
        B.send_len = (uint32_t)pack[b].size();
        B.halo_len = (uint32_t)halo_cols[b].size();
        B.send = dalloc<double>(B.send_len);
        B.halo = dalloc<double>(B.halo_len);
        B.send_idx = dalloc<uint32_t>(B.send_len);
        upload(B.send_idx, pack[b], B.stream);
        const uint64_t gb = (B.send_len + 255) / 256;
        B.gather_blocks = (uint32_t)(gb < 1 ? 1 : (gb > 65535 ? 65535 : gb));
        B.slots = dalloc<double>(3 * nb);
        B.scalars = dalloc<double>(kScalarsLen);
        B.dot3_partial = dalloc<double>(3 * (size_t)P.dot3_blocks);
        B.dot3_counter = dalloc<uint32_t>(1);
        B.aux_xpay_blocks = grid_stride_blocks(B.props, (B.n + 1) / 2, APG_AUX_THREADS);
        B.aux_dot_blocks = grid_stride_blocks(B.props, B.n, APG_DOT_THREADS);
        B.dot_partial = dalloc<double>(B.aux_dot_blocks);
        B.dot_counter = dalloc<uint32_t>(1);
        B.dot_out = dalloc<double>(1);
        APG_CUDA(cudaStreamSynchronize(B.stream));
    }
    reserve_history(S, 1024);
    synchronize(S);
    S.backend_ms += ms_since(t1);
}

void free_block(ApgBlock &B) {
    if (B.stream == nullptr) return;
    cudaSetDevice(B.ordinal);
    cudaStreamSynchronize(B.stream);
    cudaStreamSynchronize(B.copier);
    B.A.release();
    B.H.release();
    B.K.release();
    B.KT.release();
    B.M.release();
    double **vecs[] = {&B.inv_diag, &B.b,      &B.x,       &B.r,           &B.u,
                       &B.w,        &B.p,      &B.s,       &B.t,           &B.send,
                       &B.halo,     &B.slots,  &B.scalars, &B.history,     &B.dot3_partial,
                       &B.dot_partial, &B.dot_out};
    for (double **v : vecs) dfree(*v);
    dfree(B.send_idx);
    dfree(B.dot3_counter);
    dfree(B.dot_counter);
    cudaEvent_t *evs[] = {&B.packed, &B.pulled, &B.halo_ready, &B.halo_read, &B.dotted,
                          &B.gathered};
    for (cudaEvent_t *e : evs) {
        if (*e) cudaEventDestroy(*e);
        *e = nullptr;
    }
    if (B.copier) cudaStreamDestroy(B.copier);
    cudaStreamDestroy(B.stream);
    B.stream = B.copier = nullptr;
}

} // namespace

// =================================================================================== C API

extern "C" void autopcg_gen_destroy(autopcg_gen_solver *solver) {
    ApgSolver *S = reinterpret_cast<ApgSolver *>(solver);
    if (S == nullptr) return;
    // Every block first waits for its streams: another block's copies may read its buffers.
    for (ApgBlock &B : S->blocks) {
        if (B.stream == nullptr) continue;
        cudaSetDevice(B.ordinal);
        cudaStreamSynchronize(B.stream);
        cudaStreamSynchronize(B.copier);
    }
    if (!S->blocks.empty()) cudaSetDevice(S->blocks[0].ordinal);
    S->poll.release();
    for (ApgBlock &B : S->blocks) free_block(B);
    delete S;
}

namespace {

// Places the blocks on their GPUs (checked against the plan's device), splits the matrix
// (S.a) and sets every block up.
void setup_on_devices(ApgSolver &S, bool any_device, std::chrono::steady_clock::time_point t0) {
    std::vector<int> gpu = place_blocks(S, any_device);
    S.device_ms = ms_since(t0);
    setup_blocks(S, gpu);
}

// New values (checked finite) of the same pattern: every block's parts take theirs, every
// block's preconditioner is built before any operand changes (an input error, a bad diagonal,
// leaves the solver as it was), then the operands are placed in the same buffers.
void replace_values(ApgSolver &S, const double *values) {
    synchronize(S);
    const size_t nb = S.blocks.size();
    std::vector<apg::Csr> local(nb), halo(nb);
    std::vector<apg::Precond> pre;
    pre.reserve(nb);
    S.backend_ms = 0;
    S.precond_ms = 0;
    for (size_t b = 0; b < nb; ++b) {
        const ApgBlock &B = S.blocks[b];
        local[b] = B.local;
        halo[b] = B.halo_part;
        for (size_t k = 0; k < B.local_src.size(); ++k) local[b].vals[k] = values[B.local_src[k]];
        for (size_t k = 0; k < B.halo_src.size(); ++k) halo[b].vals[k] = values[B.halo_src[k]];
        pre.push_back(build_block_precond(S, local[b], kApgBlocks[b], (int)b));
    }
    for (size_t b = 0; b < nb; ++b) {
        ApgBlock &B = S.blocks[b];
        B.local = std::move(local[b]);
        B.halo_part = std::move(halo[b]);
        place_block(S, B, kApgBlocks[b], pre[b], (int)b);
    }
    S.a.vals.assign(values, values + S.a.nnz());
}

} // namespace

#include "driver_api.cuh"
