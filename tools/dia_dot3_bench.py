#!/usr/bin/env python3
"""dia_dot3_bench.py: the DIA SpMV with the three dots in its epilogue, kernel by kernel (GPU host).

Compiles kernels/spmv_dia.cu and kernels/dot.cu with CuPy's NVRTC and times, with CUDA events
(median of five batches of 50 launches), on the DIA layout of a 192^3 7-point Poisson matrix
(random values; 7.1M rows): the plain `spmv_dia` at several launch shapes;
`dot3_last_block_next` (the separate reduction, with u = r and u apart); `spmv_dia_dot3_next`
(cur) at several shapes; and variants that locate its cost: the partials' finishing loop
unrolled four times (u4), the finish in a function not inlined (noinline), the epilogue
without its last block (acc_only: block sums written, no recurrence), and the loop without
the second read of u[row] (no_reload). Prints each kernel's registers, the times, and checks
that the variants give the plain kernel's product and the dots of CuPy.

    python3 tools/dia_dot3_bench.py
"""
import os
import cupy as cp
import numpy as np

from cuda_events import timeit as cuda_timeit

K = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "kernels")
n3 = 192
n = n3 ** 3
offs = np.array([-n3 * n3, -n3, -1, 0, 1, n3, n3 * n3], dtype=np.int32)
nd = len(offs)
rng = cp.random.default_rng(1)
data = rng.standard_normal(nd * n)
u = rng.standard_normal(n)
r = rng.standard_normal(n)
w = cp.zeros(n)
offs_d = cp.asarray(offs)

extra = r'''
#include "common.cuh"
#include "cg_scalars.cuh"
template <int UNROLL>
__device__ __forceinline__ void finish_u(double g, double d, double q, double *partial,
                                         u32 *counter, double *scalars, double *history,
                                         u32 history_cap) {
    __shared__ double scratch[96];
    block_sum3(g, d, q, scratch);
    const u32 nb = gridDim.x;
    if (threadIdx.x == 0) {
        partial[blockIdx.x] = g;
        partial[nb + blockIdx.x] = d;
        partial[2 * nb + blockIdx.x] = q;
    }
    if (last_block_done(counter)) {
        g = 0.0; d = 0.0; q = 0.0;
        const u32 step = UNROLL * blockDim.x;
        for (u32 b0 = threadIdx.x; b0 < nb; b0 += step) {
            double tg[UNROLL], td[UNROLL], tq[UNROLL];
#pragma unroll
            for (int k = 0; k < UNROLL; ++k) {
                const u32 b = b0 + k * blockDim.x;
                tg[k] = b < nb ? __ldcg(partial + b) : 0.0;
                td[k] = b < nb ? __ldcg(partial + nb + b) : 0.0;
                tq[k] = b < nb ? __ldcg(partial + 2 * nb + b) : 0.0;
            }
#pragma unroll
            for (int k = 0; k < UNROLL; ++k) { g += tg[k]; d += td[k]; q += tq[k]; }
        }
        __syncthreads();
        block_sum3(g, d, q, scratch);
        if (threadIdx.x == 0) {
            cg_advance(g, d, q, scalars, history, history_cap, cg_next_iteration(scalars));
            *counter = 0;
        }
    }
}
template <int UNROLL>
__device__ void dia_fused(u32 nrows, u32 ndiag, const int *__restrict__ offsets,
                          const double *__restrict__ data, const double *__restrict__ u,
                          double *__restrict__ w, const double *__restrict__ r, double *partial,
                          u32 *counter, double *scalars, double *history, u32 history_cap) {
    double g = 0.0, d = 0.0, q = 0.0;
    dia_rows<true>(nrows, nrows, ndiag, offsets, data, u, w, r, g, d, q);
    finish_u<UNROLL>(g, d, q, partial, counter, scalars, history, history_cap);
}
#define FUSED_ARGS u32 nrows, u32 ndiag, const int *__restrict__ offsets, \
    const double *__restrict__ data, const double *__restrict__ u, double *__restrict__ w, \
    const double *__restrict__ r, double *partial, u32 *counter, double *scalars, \
    double *history, u32 history_cap
__device__ __noinline__ void finish_noinline(double g, double d, double q, double *partial,
                                             u32 *counter, double *scalars, double *history,
                                             u32 history_cap) {
    dot3_grid_finish(g, d, q, partial, counter, scalars, history, history_cap, 0, true);
}
extern "C" __global__ void fused_noinline(FUSED_ARGS) {
    double g = 0.0, d = 0.0, q = 0.0;
    dia_rows<true>(nrows, nrows, ndiag, offsets, data, u, w, r, g, d, q);
    finish_noinline(g, d, q, partial, counter, scalars, history, history_cap);
}
extern "C" __global__ void fused_acc_only(FUSED_ARGS) {
    __shared__ double scratch[96];
    double g = 0.0, d = 0.0, q = 0.0;
    dia_rows<true>(nrows, nrows, ndiag, offsets, data, u, w, r, g, d, q);
    block_sum3(g, d, q, scratch);
    if (threadIdx.x == 0) {
        partial[blockIdx.x] = g;
        partial[gridDim.x + blockIdx.x] = d;
        partial[2 * gridDim.x + blockIdx.x] = q;
    }
}
extern "C" __global__ void fused_no_reload(FUSED_ARGS) {
    // the same loop without re-reading u[row] (the d sum uses w * r as a stand-in)
    double g = 0.0, d = 0.0, q = 0.0;
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 row = (u64)blockIdx.x * blockDim.x + threadIdx.x; row < nrows; row += stride) {
        double sum = 0.0;
        for (u32 dg = 0; dg < ndiag; ++dg) {
            const i64 col = (i64)row + offsets[dg];
            if (col >= 0 && col < (i64)nrows) {
                sum += data[(u64)dg * nrows + row] * u[col];
            }
        }
        w[row] = sum;
        const double ri = r[row];
        g += ri; d += sum * ri; q += ri * ri;
    }
    dot3_grid_finish(g, d, q, partial, counter, scalars, history, history_cap, 0, true);
}
extern "C" __global__ void fused_u4(FUSED_ARGS) { dia_fused<4>(nrows, ndiag, offsets, data, u, w, r, partial, counter, scalars, history, history_cap); }
'''
dia_src = open(os.path.join(K, "spmv_dia.cu")).read().replace('#include "common.cuh"\n#include "cg_scalars.cuh"\n', '')
src = '#include "common.cuh"\n#include "cg_scalars.cuh"\n' + dia_src + extra.replace('#include "common.cuh"\n#include "cg_scalars.cuh"\n', '')
mod = cp.RawModule(code=src, options=("-I" + K, "-std=c++17"))
dot_src = open(os.path.join(K, "dot.cu")).read()
dmod = cp.RawModule(code=dot_src, options=("-I" + K, "-std=c++17", "-DBLOCK_SIZE=256"))
plain = mod.get_function("spmv_dia")
fused = {"cur": mod.get_function("spmv_dia_dot3_next"), "u4": mod.get_function("fused_u4"),
         "noinline": mod.get_function("fused_noinline"), "acc_only": mod.get_function("fused_acc_only"),
         "no_reload": mod.get_function("fused_no_reload")}
for name, f in list(fused.items()) + [("plain", plain)]:
    print(name, "regs", f.attributes["num_regs"], "local", f.attributes["local_size_bytes"])
dot3 = dmod.get_function("dot3_last_block_next")

maxb = 60000
partial = cp.zeros(3 * maxb)
counter = cp.zeros(1, dtype=cp.uint32)
scal = cp.zeros(9)
scal[0] = 1.0; scal[2] = 1.0
hist = cp.zeros(3 * 4)
cap = np.uint32(2)
N = np.uint32(n); ND = np.uint32(nd)

def timeit(f, reps=50):
    return cuda_timeit(f, reps)

def reset():
    scal[5] = 0.0; scal[6] = 0.0

rows = []
for t, b in [(128, 55296), (128, 2112), (256, 1056), (256, 27648), (512, 528), (1024, 264)]:
    rows.append((f"plain spmv_dia {t}x{b}", timeit(lambda: plain((b,), (t,), (N, N, ND, offs_d, data, u, w)))))
for tb in [(256, 1056), (256, 264), (256, 132)]:
    t, b = tb
    rows.append((f"dot3_last_block_next {t}x{b} (u=r)",
                 timeit(lambda: dot3((b,), (t,), (np.uint64(n), r, r, w, partial, counter, scal, hist, cap)))))
    rows.append((f"dot3_last_block_next {t}x{b}",
                 timeit(lambda: dot3((b,), (t,), (np.uint64(n), r, u, w, partial, counter, scal, hist, cap)))))
for name, f in fused.items():
    shapes = [(128, 2112), (256, 1056), (512, 528)] + ([(128, 55296)] if name == "cur" else [])
    for t, b in shapes:
        for ur in (True, False):
            uu = r if ur else u
            rows.append((f"fused {name} {t}x{b}{' (u=r)' if ur else ''}",
                         timeit(lambda: f((b,), (t,), (N, ND, offs_d, data, uu, w, r, partial, counter, scal, hist, cap)))))
# correctness of the fused variants against plain + cupy dots
plain((55296,), (128,), (N, N, ND, offs_d, data, u, w)); wref = w.copy()
g = float(r @ u); d = float(wref @ u); q = float(r @ r)
for name, f in fused.items():
    if name in ("acc_only", "no_reload"):
        continue
    scal[5] = 0.0; hist[:] = 0
    f((1056,), (256,), (N, ND, offs_d, data, u, w, r, partial, counter, scal, hist, cap))
    h = cp.asnumpy(hist[3:6])
    ok = bool(cp.all(w == wref)) and np.allclose(h, [g, d, q], rtol=1e-10)
    rows.append((f"check {name}: w equal and dots {h} vs {[g, d, q]}: {ok}", 0.0))
for k, v in rows:
    print(f"{v:9.1f} us  {k}")
