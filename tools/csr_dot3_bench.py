#!/usr/bin/env python3
"""csr_dot3_bench.py: the CSR vector SpMV with the three dots in its epilogue, launch by launch (GPU host).

Compiles kernels/spmv_csr.cu with CuPy's NVRTC and times, with CUDA events (median of five
batches of 20 launches), on the tridiagonal matrix of the tune's epilogue stage ([-1, 2, -1],
2^24 rows, and 2^20): for L = 4, 8, 16 lanes at 256 threads, the plain `spmv_csr_vector_L` one
lane group per row (cover) and at one wave; `spmv_csr_vector_dot3_next_L` with u = r and u apart
at one wave as the catalogue counts it (the device's threads per SM over the block: 1056 blocks
on an H200), at the blocks the kernel can keep resident (its registers: the occupancy API), at
four of those waves, and at one block per 256 / L rows (cover). Prints each kernel's registers
and resident blocks per SM, and the times in microseconds.

    python3 tools/csr_dot3_bench.py
"""
import os
import cupy as cp
import numpy as np

from cuda_events import timeit as cuda_timeit

K = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "kernels")
src = open(os.path.join(K, "spmv_csr.cu")).read()
mod = cp.RawModule(code=src, options=("-I" + K, "-std=c++17"))
dev = cp.cuda.Device()
sms = dev.attributes["MultiProcessorCount"]
tpsm = dev.attributes["MaxThreadsPerMultiProcessor"]
drv = cp.cuda.driver


def tridiag_host(n):
    """CSR arrays of the [-1, 2, -1] matrix of n rows (numpy)."""
    i = np.arange(n, dtype=np.int64)
    left, right = i > 0, i < n - 1
    lens = 1 + left.astype(np.int64) + right.astype(np.int64)
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lens, out=indptr[1:])
    cols = np.empty(indptr[-1], dtype=np.uint32)
    vals = np.empty(indptr[-1])
    k = indptr[:-1]
    cols[k[left]] = i[left] - 1
    vals[k[left]] = -1.0
    mid = k + left
    cols[mid] = i
    vals[mid] = 2.0
    cols[mid[right] + 1] = i[right] + 1
    vals[mid[right] + 1] = -1.0
    return indptr.astype(np.uint32), cols, vals


def tridiag(n):
    return tuple(cp.asarray(a) for a in tridiag_host(n))


def timeit(f, reps=20):
    return cuda_timeit(f, reps)


T = 256
rows = []
for n in (1 << 24, 1 << 20):
    indptr, cols, vals = tridiag(n)
    u = cp.random.default_rng(1).standard_normal(n)
    r = cp.random.default_rng(2).standard_normal(n)
    w = cp.zeros(n)
    N = np.uint32(n)
    for L in (4, 8, 16):
        plain = mod.get_function(f"spmv_csr_vector_{L}")
        fused = mod.get_function(f"spmv_csr_vector_dot3_next_{L}")
        occ = {}
        for name, f in (("plain", plain), ("fused", fused)):
            try:
                occ[name] = drv.occupancyMaxActiveBlocksPerMultiprocessor(f.ptr, T, 0)
            except AttributeError:  # an older CuPy: registers alone (65536 per SM)
                occ[name] = min(tpsm // T, 65536 // (f.attributes["num_regs"] * T))
            print(f"L={L} {name}: regs {f.attributes['num_regs']}, resident blocks/SM at {T} "
                  f"threads {occ[name]} (the catalogue's wave: {tpsm // T})")
        cover = (n * L + T - 1) // T
        wave = sms * (tpsm // T)
        resident = sms * occ["fused"]
        partial = cp.zeros(3 * cover)
        counter = cp.zeros(1, dtype=cp.uint32)
        scal = cp.zeros(9)
        hist = cp.zeros(6)
        cap = np.uint32(2)
        rows.append((n, L, f"plain cover {cover}",
                     timeit(lambda: plain((cover,), (T,), (N, indptr, cols, vals, u, w)))))
        rows.append((n, L, f"plain wave {wave}",
                     timeit(lambda: plain((wave,), (T,), (N, indptr, cols, vals, u, w)))))
        for label, b in (("wave", wave), ("resident", resident), ("4x resident", 4 * resident),
                         ("cover", cover)):
            for ur in (True, False):
                uu = r if ur else u
                rows.append((n, L, f"fused {label} {b}{' (u=r)' if ur else ''}",
                             timeit(lambda: fused((b,), (T,), (N, indptr, cols, vals, uu, w, r,
                                                               partial, counter, scal, hist, cap)))))
    del indptr, cols, vals
for n, L, k, v in rows:
    print(f"n={n:>9} L={L:>2} {v:9.1f} us  {k}")
