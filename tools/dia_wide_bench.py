#!/usr/bin/env python3
"""dia_wide_bench.py: what the dots cost in the DIA product's epilogue, by diagonals (GPU host).

Compiles kernels/spmv_dia.cu (and kernels/dot.cu) with CuPy's NVRTC and times, with CUDA events
(median of five batches of 30 launches), on DIA layouts with random values: the 27-point 3D
Poisson pattern of 96^3 and 128^3 rows (27 diagonals), the 7-point one of 192^3 rows and the
tridiagonal of 2^24 rows, at 128, 256 and 512 threads:
- `spmv_dia`, the plain product, one thread per row (cover);
- `spmv_dia_dot3_next` with u = r, at one wave of the blocks it keeps resident (as the plans
  launch it), and its excess over the plain product;
- two variants of the fused loop written here, not in the solver: the loads of C diagonals
  issued before their sums (C = 4 and 8; the offsets staged in shared memory), which keep more
  loads in flight per thread at the cost of registers;
- `dot3_last_block_next` with u = r (the reduction the fused kernel replaces), 256 x 1056.
Checks that every variant writes the plain kernel's product bit for bit. Prints each kernel's
registers and a table in microseconds.

    python3 tools/dia_wide_bench.py
"""
import os

import cupy as cp
import numpy as np

from cuda_events import timeit as cuda_timeit

K = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "kernels")
VARIANTS = r'''
template <int C>
__device__ __forceinline__ void dia_rows_chunked(u32 nrows, u32 ndiag,
        const int *__restrict__ offsets, const double *__restrict__ data,
        const double *__restrict__ x, double *__restrict__ y, const double *__restrict__ r,
        double &g, double &d, double &q) {
    __shared__ int soff[64];
    const int *off = offsets;
    if (ndiag <= 64) {
        for (u32 k = threadIdx.x; k < ndiag; k += blockDim.x) soff[k] = offsets[k];
        __syncthreads();
        off = soff;
    }
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 row = (u64)blockIdx.x * blockDim.x + threadIdx.x; row < nrows; row += stride) {
        const double ri = r[row];
        double sum = 0.0;
        u32 dg = 0;
        for (; dg + C <= ndiag; dg += C) {
            double a[C], v[C];
#pragma unroll
            for (int k = 0; k < C; ++k) {
                const i64 col = (i64)row + off[dg + k];
                const bool in = col >= 0 && col < (i64)nrows;
                a[k] = in ? data[(u64)(dg + k) * nrows + row] : 0.0;
                v[k] = in ? x[col] : 0.0;
            }
#pragma unroll
            for (int k = 0; k < C; ++k) sum += a[k] * v[k];
        }
        for (; dg < ndiag; ++dg) {
            const i64 col = (i64)row + off[dg];
            if (col >= 0 && col < (i64)nrows) sum += data[(u64)dg * nrows + row] * x[col];
        }
        y[row] = sum;
        const double ui = x[row];
        g += ri * ui; d += sum * ui; q += ri * ri;
    }
}
#define FUSED(name, C) extern "C" __global__ void name(u32 nrows, u32 ndiag, \
    const int *__restrict__ offsets, const double *__restrict__ data, const double *__restrict__ u, \
    double *__restrict__ w, const double *__restrict__ r, double *partial, u32 *counter, \
    double *scalars, double *history, u32 history_cap) { double g = 0, d = 0, q = 0; \
    dia_rows_chunked<C>(nrows, ndiag, offsets, data, u, w, r, g, d, q); \
    dot3_grid_finish(g, d, q, partial, counter, scalars, history, history_cap, 0, true); }
FUSED(fused_loads4, 4)
FUSED(fused_loads8, 8)
'''
mod = cp.RawModule(code=open(os.path.join(K, "spmv_dia.cu")).read() + VARIANTS,
                   options=("-I" + K, "-std=c++17"))
dmod = cp.RawModule(code=open(os.path.join(K, "dot.cu")).read(),
                    options=("-I" + K, "-std=c++17", "-DBLOCK_SIZE=256"))
plain = mod.get_function("spmv_dia")
fused = {"fused": mod.get_function("spmv_dia_dot3_next"),
         "loads 4": mod.get_function("fused_loads4"),
         "loads 8": mod.get_function("fused_loads8")}
dot3 = dmod.get_function("dot3_last_block_next")
dev = cp.cuda.Device()
sms = dev.attributes["MultiProcessorCount"]


def resident(f, t):
    """Blocks of t threads per SM: the occupancy API, else registers and threads alone."""
    try:
        return cp.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(f.kernel.ptr, t, 0)
    except AttributeError:
        regs = (f.attributes["num_regs"] + 7) // 8 * 8
        return min(dev.attributes["MaxThreadsPerMultiProcessor"] // t, 32, 65536 // (regs * t))


def timeit(f, reps=30):
    return cuda_timeit(f, reps)


def offsets(kind, m):
    if kind == "tridiagonal":
        return [-1, 0, 1]
    if kind == "7-point":
        return [-m * m, -m, -1, 0, 1, m, m * m]
    return sorted({a * m * m + b * m + c for a in (-1, 0, 1) for b in (-1, 0, 1) for c in (-1, 0, 1)})


for name, f in [("plain", plain)] + list(fused.items()) + [("dot3", dot3)]:
    print(f"{name}: {f.attributes['num_regs']} registers")
partial = cp.zeros(3 * 20000)
counter = cp.zeros(1, dtype=cp.uint32)
scal = cp.zeros(9)
scal[0] = 1.0
scal[2] = 1.0
hist = cp.zeros(12)
cap = np.uint32(2)
rows = []
for kind, m in [("27-point", 96), ("27-point", 128), ("7-point", 192), ("tridiagonal", 0)]:
    n = m ** 3 if m else 1 << 24
    offs = np.array(offsets(kind, m), dtype=np.int32)
    rng = cp.random.default_rng(1)
    data = rng.standard_normal(len(offs) * n)
    u = rng.standard_normal(n)
    w = cp.zeros(n)
    od = cp.asarray(offs)
    N, ND = np.uint32(n), np.uint32(len(offs))
    plain(((n + 127) // 128,), (128,), (N, N, ND, od, data, u, w))
    ref = w.copy()
    red = timeit(lambda: dot3((1056,), (256,), (np.uint64(n), u, u, w, partial, counter, scal, hist, cap)))
    for t in (128, 256, 512):
        cover = (n + t - 1) // t
        tp = timeit(lambda: plain((cover,), (t,), (N, N, ND, od, data, u, w)))
        row = [f"{kind} {m}^3" if m else f"{kind} 2^24", len(offs), t, tp]
        for f in fused.values():
            b = resident(f, t) * sms
            tf = timeit(lambda: f((b,), (t,), (N, ND, od, data, u, w, u, partial, counter, scal, hist, cap)))
            assert bool(cp.all(w == ref)), "a fused variant's product differs from the plain one"
            row += [b, tf, tf - tp]
        rows.append(row + [red])
    del data, u, w
    cp.get_default_memory_pool().free_all_blocks()

print("| matrix | diagonals | threads | plain | fused (blocks) | excess | loads 4 (blocks) | excess | "
      "loads 8 (blocks) | excess | reduction apart |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    print(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]:.1f} | {r[5]:.1f} ({r[4]}) | {r[6]:.1f} | "
          f"{r[8]:.1f} ({r[7]}) | {r[9]:.1f} | {r[11]:.1f} ({r[10]}) | {r[12]:.1f} | {r[13]:.1f} |")
