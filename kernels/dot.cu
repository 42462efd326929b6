// dot.cu: inner products. The reduction ladder (each rung one optimisation over the last, after
// the classic CUDA reduction study), a second stage on the GPU, and the fused three-dot reduction
// of Chronopoulos-Gear PCG with the scalar recurrence on the device.
//
// BLOCK_SIZE (a power of two, 32..1024) is a compile-time knob: every kernel here must be launched
// with exactly BLOCK_SIZE threads per block, and its shared memory is sized from it.
//
// Stage one (every dot_* but dot_last_block) writes one partial sum per block to partial[block];
// dot_finish then adds the partials into out[0]. Which block counts a rung accepts:
//   dot_interleaved, dot_strided, dot_sequential   one element per thread: blocks >= ceil(n / B)
//   dot_first_add, dot_warp_unroll, dot_full_unroll two elements per thread: blocks >= ceil(n / 2B)
//   dot_grid_stride, dot_block_stride, dot_vec2, dot_last_block   any block count
//
//   dot_interleaved   tree in shared memory, interleaved addressing, divergent branch tid % 2s
//   dot_strided       interleaved addressing by index 2 s tid: no divergence, bank conflicts
//   dot_sequential    sequential addressing (stride halves from B/2): conflict-free
//   dot_first_add     the first addition during the load (two elements per thread)
//   dot_warp_unroll   as dot_first_add, the last warp reduced with shuffles, no barrier
//   dot_full_unroll   as dot_warp_unroll, the tree fully unrolled on the compile-time BLOCK_SIZE
//   dot_grid_stride   several elements per thread, striding by the whole grid, shuffle reduction
//   dot_block_stride  several elements per thread, each block a contiguous chunk
//   dot_vec2          dot_grid_stride with double2 loads
//   dot_last_block    dot_vec2 whose last block to finish adds all partials (__threadfence and
//                     an atomic ticket): no second launch; out[0] is written directly and the
//                     ticket counter is reset to 0 for the next call
//
// dot3_two_pass + dot3_finish, and dot3_last_block: gamma = (r, u), delta = (w, u), rr = (r, r)
// in one pass over r, u, w (double2 loads); the final stage runs cg_advance (cg_scalars.cuh).
// dot3_finish_next and dot3_last_block_next do the same for the iteration after the last one
// the scalar buffer records (CG_ITER + 1) instead of an iteration passed as an argument, so that
// a captured CUDA graph, whose kernel arguments are fixed, can be replayed iteration after
// iteration. After a halt CG_ITER stays at the halting iteration, so every later call writes its
// dots to the history slot just past it and changes nothing else.
#include "common.cuh"
#include "cg_scalars.cuh"

#ifndef BLOCK_SIZE
#define BLOCK_SIZE 256
#endif

#if BLOCK_SIZE < 32 || BLOCK_SIZE > 1024 || (BLOCK_SIZE & (BLOCK_SIZE - 1)) != 0
#error "BLOCK_SIZE must be a power of two between 32 and 1024"
#endif

#define DOT_ARGS u64 n, const double *__restrict__ x, const double *__restrict__ y, double *partial

// ------------------------------------------------------------------ rungs with a shared-memory tree

extern "C" __global__ void __launch_bounds__(BLOCK_SIZE) dot_interleaved(DOT_ARGS) {
    __shared__ double sdata[BLOCK_SIZE];
    const u32 tid = threadIdx.x;
    const u64 i = (u64)blockIdx.x * blockDim.x + tid;
    sdata[tid] = (i < n) ? x[i] * y[i] : 0.0;
    __syncthreads();
    for (u32 s = 1; s < blockDim.x; s *= 2) {
        if (tid % (2 * s) == 0) {
            sdata[tid] += sdata[tid + s];
        }
        __syncthreads();
    }
    if (tid == 0) {
        partial[blockIdx.x] = sdata[0];
    }
}

extern "C" __global__ void __launch_bounds__(BLOCK_SIZE) dot_strided(DOT_ARGS) {
    __shared__ double sdata[BLOCK_SIZE];
    const u32 tid = threadIdx.x;
    const u64 i = (u64)blockIdx.x * blockDim.x + tid;
    sdata[tid] = (i < n) ? x[i] * y[i] : 0.0;
    __syncthreads();
    for (u32 s = 1; s < blockDim.x; s *= 2) {
        const u32 index = 2 * s * tid;
        if (index < blockDim.x) {
            sdata[index] += sdata[index + s];
        }
        __syncthreads();
    }
    if (tid == 0) {
        partial[blockIdx.x] = sdata[0];
    }
}

extern "C" __global__ void __launch_bounds__(BLOCK_SIZE) dot_sequential(DOT_ARGS) {
    __shared__ double sdata[BLOCK_SIZE];
    const u32 tid = threadIdx.x;
    const u64 i = (u64)blockIdx.x * blockDim.x + tid;
    sdata[tid] = (i < n) ? x[i] * y[i] : 0.0;
    __syncthreads();
    for (u32 s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s) {
            sdata[tid] += sdata[tid + s];
        }
        __syncthreads();
    }
    if (tid == 0) {
        partial[blockIdx.x] = sdata[0];
    }
}

// The load of the two-elements-per-thread rungs: elements i and i + blockDim of the block's
// window of 2 * blockDim.
__device__ __forceinline__ double load_two(u64 n, const double *__restrict__ x,
                                           const double *__restrict__ y) {
    const u64 i = (u64)blockIdx.x * (2 * blockDim.x) + threadIdx.x;
    double v = (i < n) ? x[i] * y[i] : 0.0;
    if (i + blockDim.x < n) {
        v += x[i + blockDim.x] * y[i + blockDim.x];
    }
    return v;
}

extern "C" __global__ void __launch_bounds__(BLOCK_SIZE) dot_first_add(DOT_ARGS) {
    __shared__ double sdata[BLOCK_SIZE];
    const u32 tid = threadIdx.x;
    sdata[tid] = load_two(n, x, y);
    __syncthreads();
    for (u32 s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s) {
            sdata[tid] += sdata[tid + s];
        }
        __syncthreads();
    }
    if (tid == 0) {
        partial[blockIdx.x] = sdata[0];
    }
}

extern "C" __global__ void __launch_bounds__(BLOCK_SIZE) dot_warp_unroll(DOT_ARGS) {
    __shared__ double sdata[BLOCK_SIZE];
    const u32 tid = threadIdx.x;
    sdata[tid] = load_two(n, x, y);
    __syncthreads();
    for (u32 s = blockDim.x / 2; s > 32; s >>= 1) {
        if (tid < s) {
            sdata[tid] += sdata[tid + s];
        }
        __syncthreads();
    }
    if (tid < 32) {
        double v = sdata[tid];
        if (blockDim.x >= 64) {
            v += sdata[tid + 32];
        }
        v = warp_sum(v);
        if (tid == 0) {
            partial[blockIdx.x] = v;
        }
    }
}

extern "C" __global__ void __launch_bounds__(BLOCK_SIZE) dot_full_unroll(DOT_ARGS) {
    __shared__ double sdata[BLOCK_SIZE];
    const u32 tid = threadIdx.x;
    sdata[tid] = load_two(n, x, y);
    __syncthreads();
#if BLOCK_SIZE >= 1024
    if (tid < 512) {
        sdata[tid] += sdata[tid + 512];
    }
    __syncthreads();
#endif
#if BLOCK_SIZE >= 512
    if (tid < 256) {
        sdata[tid] += sdata[tid + 256];
    }
    __syncthreads();
#endif
#if BLOCK_SIZE >= 256
    if (tid < 128) {
        sdata[tid] += sdata[tid + 128];
    }
    __syncthreads();
#endif
#if BLOCK_SIZE >= 128
    if (tid < 64) {
        sdata[tid] += sdata[tid + 64];
    }
    __syncthreads();
#endif
    if (tid < 32) {
#if BLOCK_SIZE >= 64
        double v = sdata[tid] + sdata[tid + 32];
#else
        double v = sdata[tid];
#endif
        v += __shfl_down_sync(FULL_MASK, v, 16);
        v += __shfl_down_sync(FULL_MASK, v, 8);
        v += __shfl_down_sync(FULL_MASK, v, 4);
        v += __shfl_down_sync(FULL_MASK, v, 2);
        v += __shfl_down_sync(FULL_MASK, v, 1);
        if (tid == 0) {
            partial[blockIdx.x] = v;
        }
    }
}

// ------------------------------------------------------- rungs with several elements per thread

extern "C" __global__ void __launch_bounds__(BLOCK_SIZE) dot_grid_stride(DOT_ARGS) {
    __shared__ double scratch[32];
    const u64 stride = (u64)gridDim.x * BLOCK_SIZE;
    double v = 0.0;
    for (u64 i = (u64)blockIdx.x * BLOCK_SIZE + threadIdx.x; i < n; i += stride) {
        v += x[i] * y[i];
    }
    v = block_sum(v, scratch);
    if (threadIdx.x == 0) {
        partial[blockIdx.x] = v;
    }
}

extern "C" __global__ void __launch_bounds__(BLOCK_SIZE) dot_block_stride(DOT_ARGS) {
    __shared__ double scratch[32];
    const u64 chunk = (n + gridDim.x - 1) / gridDim.x;
    const u64 begin = (u64)blockIdx.x * chunk;
    const u64 end = (begin + chunk < n) ? begin + chunk : n;
    double v = 0.0;
    for (u64 i = begin + threadIdx.x; i < end; i += BLOCK_SIZE) {
        v += x[i] * y[i];
    }
    v = block_sum(v, scratch);
    if (threadIdx.x == 0) {
        partial[blockIdx.x] = v;
    }
}

// This thread's share of (x, y) with double2 loads, grid-stride; the odd last element goes to
// global thread 0.
__device__ __forceinline__ double dot_vec2_thread(u64 n, const double *__restrict__ x,
                                                  const double *__restrict__ y) {
    const u64 npairs = n >> 1;
    const u64 stride = (u64)gridDim.x * BLOCK_SIZE;
    const u64 gtid = (u64)blockIdx.x * BLOCK_SIZE + threadIdx.x;
    const double2 *x2 = reinterpret_cast<const double2 *>(x);
    const double2 *y2 = reinterpret_cast<const double2 *>(y);
    double v = 0.0;
    for (u64 t = gtid; t < npairs; t += stride) {
        const double2 a = x2[t];
        const double2 b = y2[t];
        v += a.x * b.x + a.y * b.y;
    }
    if (gtid == 0 && (n & 1)) {
        v += x[n - 1] * y[n - 1];
    }
    return v;
}

extern "C" __global__ void __launch_bounds__(BLOCK_SIZE) dot_vec2(DOT_ARGS) {
    __shared__ double scratch[32];
    double v = block_sum(dot_vec2_thread(n, x, y), scratch);
    if (threadIdx.x == 0) {
        partial[blockIdx.x] = v;
    }
}

extern "C" __global__ void __launch_bounds__(BLOCK_SIZE)
    dot_last_block(u64 n, const double *__restrict__ x, const double *__restrict__ y,
                   double *partial, u32 *counter, double *out) {
    __shared__ double scratch[32];
    double v = block_sum(dot_vec2_thread(n, x, y), scratch);
    if (threadIdx.x == 0) {
        partial[blockIdx.x] = v;
    }
    if (last_block_done(counter)) {
        double t = 0.0;
        for (u32 b = threadIdx.x; b < gridDim.x; b += BLOCK_SIZE) {
            t += __ldcg(partial + b);
        }
        __syncthreads(); // scratch is reused
        t = block_sum(t, scratch);
        if (threadIdx.x == 0) {
            out[0] = t;
            *counter = 0;
        }
    }
}

// ------------------------------------------------------------------------------ second stage

// out[0] = sum of partial[0..m). Launch as ONE block of BLOCK_SIZE threads.
extern "C" __global__ void __launch_bounds__(BLOCK_SIZE)
    dot_finish(u32 m, const double *__restrict__ partial, double *out) {
    __shared__ double scratch[32];
    double t = 0.0;
    for (u32 b = threadIdx.x; b < m; b += BLOCK_SIZE) {
        t += partial[b];
    }
    t = block_sum(t, scratch);
    if (threadIdx.x == 0) {
        out[0] = t;
    }
}

// ------------------------------------------------------------------- fused three-dot of PCG

// This thread's shares of (r, u), (w, u), (r, r): double2 loads, grid-stride, odd last element to
// global thread 0.
__device__ __forceinline__ void dot3_thread(u64 n, const double *__restrict__ r,
                                            const double *__restrict__ u,
                                            const double *__restrict__ w, double &g, double &d,
                                            double &q) {
    const u64 npairs = n >> 1;
    const u64 stride = (u64)gridDim.x * BLOCK_SIZE;
    const u64 gtid = (u64)blockIdx.x * BLOCK_SIZE + threadIdx.x;
    const double2 *r2 = reinterpret_cast<const double2 *>(r);
    const double2 *u2 = reinterpret_cast<const double2 *>(u);
    const double2 *w2 = reinterpret_cast<const double2 *>(w);
    g = 0.0;
    d = 0.0;
    q = 0.0;
    for (u64 t = gtid; t < npairs; t += stride) {
        const double2 rv = r2[t];
        const double2 uv = u2[t];
        const double2 wv = w2[t];
        g += rv.x * uv.x + rv.y * uv.y;
        d += wv.x * uv.x + wv.y * uv.y;
        q += rv.x * rv.x + rv.y * rv.y;
    }
    if (gtid == 0 && (n & 1)) {
        const double rl = r[n - 1], ul = u[n - 1], wl = w[n - 1];
        g += rl * ul;
        d += wl * ul;
        q += rl * rl;
    }
}

// Stage one: partial[b], partial[nb + b], partial[2 nb + b] = this block's gamma, delta, rr
// (nb = gridDim.x). Any block count.
extern "C" __global__ void __launch_bounds__(BLOCK_SIZE)
    dot3_two_pass(u64 n, const double *__restrict__ r, const double *__restrict__ u,
                  const double *__restrict__ w, double *partial) {
    __shared__ double scratch[96];
    double g, d, q;
    dot3_thread(n, r, u, w, g, d, q);
    block_sum3(g, d, q, scratch);
    if (threadIdx.x == 0) {
        partial[blockIdx.x] = g;
        partial[gridDim.x + blockIdx.x] = d;
        partial[2 * gridDim.x + blockIdx.x] = q;
    }
}

// Stage two: adds the m partial triples laid out as dot3_two_pass writes them (m = its block
// count), then runs the recurrence for `iteration`, or for the next iteration when `next`.
__device__ __forceinline__ void dot3_finish_body(u32 m, const double *__restrict__ partial,
                                                 double *scalars, double *history,
                                                 u32 history_cap, u32 iteration, bool next) {
    __shared__ double scratch[96];
    double g = 0.0, d = 0.0, q = 0.0;
    for (u32 b = threadIdx.x; b < m; b += BLOCK_SIZE) {
        g += partial[b];
        d += partial[m + b];
        q += partial[2 * m + b];
    }
    block_sum3(g, d, q, scratch);
    if (threadIdx.x == 0) {
        const u32 it = next ? cg_next_iteration(scalars) : iteration;
        cg_advance(g, d, q, scalars, history, history_cap, it);
    }
}

// Launch as ONE block of BLOCK_SIZE threads.
extern "C" __global__ void __launch_bounds__(BLOCK_SIZE)
    dot3_finish(u32 m, const double *__restrict__ partial, double *scalars, double *history,
                u32 history_cap, u32 iteration) {
    dot3_finish_body(m, partial, scalars, history, history_cap, iteration, false);
}

// Launch as ONE block of BLOCK_SIZE threads.
extern "C" __global__ void __launch_bounds__(BLOCK_SIZE)
    dot3_finish_next(u32 m, const double *__restrict__ partial, double *scalars,
                     double *history, u32 history_cap) {
    dot3_finish_body(m, partial, scalars, history, history_cap, 0, true);
}

// Both stages in one launch: the last block to finish adds the partials and runs the recurrence
// for `iteration`, or for the next iteration when `next` (dot3_grid_finish of cg_scalars.cuh).
__device__ __forceinline__ void dot3_last_block_body(u64 n, const double *__restrict__ r,
                                                     const double *__restrict__ u,
                                                     const double *__restrict__ w,
                                                     double *partial, u32 *counter,
                                                     double *scalars, double *history,
                                                     u32 history_cap, u32 iteration, bool next) {
    double g, d, q;
    dot3_thread(n, r, u, w, g, d, q);
    dot3_grid_finish(g, d, q, partial, counter, scalars, history, history_cap, iteration, next);
}

extern "C" __global__ void __launch_bounds__(BLOCK_SIZE)
    dot3_last_block(u64 n, const double *__restrict__ r, const double *__restrict__ u,
                    const double *__restrict__ w, double *partial, u32 *counter, double *scalars,
                    double *history, u32 history_cap, u32 iteration) {
    dot3_last_block_body(n, r, u, w, partial, counter, scalars, history, history_cap, iteration,
                         false);
}

extern "C" __global__ void __launch_bounds__(BLOCK_SIZE)
    dot3_last_block_next(u64 n, const double *__restrict__ r, const double *__restrict__ u,
                         const double *__restrict__ w, double *partial, u32 *counter,
                         double *scalars, double *history, u32 history_cap) {
    dot3_last_block_body(n, r, u, w, partial, counter, scalars, history, history_cap, 0, true);
}

// ------------------------------------------------------------- row blocks: three dots per block

// One row block's (r, u), (w, u), (r, r) into slots[3 slot .. 3 slot + 3): the first stage of
// dot3_last_block over the block's rows, whose last block writes the block's sums instead of
// running the recurrence. Any block count; the counter is reset to 0 for the next call.
extern "C" __global__ void __launch_bounds__(BLOCK_SIZE)
    dot3_slot(u64 n, const double *__restrict__ r, const double *__restrict__ u,
              const double *__restrict__ w, double *partial, u32 *counter, double *slots,
              u32 slot) {
    __shared__ double scratch[96];
    double g, d, q;
    dot3_thread(n, r, u, w, g, d, q);
    if (dot3_grid_sum(g, d, q, partial, counter, scratch) && threadIdx.x == 0) {
        slots[3 * (u64)slot + 0] = g;
        slots[3 * (u64)slot + 1] = d;
        slots[3 * (u64)slot + 2] = q;
        *counter = 0;
    }
}

// The all-reduce of the row blocks' sums on one device, then the recurrence: thread 0 adds the
// m slot triples in block order (as the host transport's all-reduce does) and runs cg_advance
// for `iteration`, or for the next iteration when `next`. Launch as ONE block.
__device__ __forceinline__ void dot3_slots_body(u32 m, const double *__restrict__ slots,
                                                double *scalars, double *history,
                                                u32 history_cap, u32 iteration, bool next) {
    if (threadIdx.x == 0) {
        double g = 0.0, d = 0.0, q = 0.0;
        for (u32 b = 0; b < m; ++b) {
            g += slots[3 * (u64)b + 0];
            d += slots[3 * (u64)b + 1];
            q += slots[3 * (u64)b + 2];
        }
        const u32 it = next ? cg_next_iteration(scalars) : iteration;
        cg_advance(g, d, q, scalars, history, history_cap, it);
    }
}

extern "C" __global__ void __launch_bounds__(BLOCK_SIZE)
    dot3_slots_advance(u32 m, const double *__restrict__ slots, double *scalars,
                       double *history, u32 history_cap, u32 iteration) {
    dot3_slots_body(m, slots, scalars, history, history_cap, iteration, false);
}

extern "C" __global__ void __launch_bounds__(BLOCK_SIZE)
    dot3_slots_advance_next(u32 m, const double *__restrict__ slots, double *scalars,
                            double *history, u32 history_cap) {
    dot3_slots_body(m, slots, scalars, history, history_cap, 0, true);
}
