// convert.cu: building blocks of format conversion and matrix statistics on the GPU.
//
//   hist_row_lengths   histogram of CSR row lengths into HIST_BINS bins (bin b counts rows of
//                      length b; the last bin counts every row of length >= HIST_BINS - 1).
//                      Each block keeps a private histogram in shared memory and merges its
//                      non-zero bins into the global one with atomics, so contention on popular
//                      lengths stays inside a block. hist must be zeroed first. Grid-stride,
//                      any block count; about 2 blocks per SM is the usual choice.
//   coo_row_counts     count[rows[k]] += 1 for every COO entry (global atomics; count zeroed).
//   scan_tile_sums     stage 1 of the exclusive scan: the sum of each tile of
//                      SCAN_TILE = blockDim.x * SCAN_ITEMS elements.
//   scan_tile_offsets  stage 2: exclusive scan of the tile sums in place, one block.
//   scan_apply         stage 3: out[i] = sum of in[0..i) for i < n, and out[n] = the total;
//                      each block scans its tile (thread sums, then warp shuffles) and adds its
//                      tile offset.
// The three scan kernels must be launched with the same threads per block (a multiple of 32),
// stages 1 and 3 with ceil(n / SCAN_TILE) blocks.
//
// Building the padded formats from a CSR matrix already on the device (each result equals the
// host conversion of autopcg-sparse element for element; the host wrapper checks the padding
// limits between the counting kernels and the filling ones, so a refused format allocates
// nothing):
//   hist_row_lengths_from  as hist_row_lengths for the rows of length >= base, bin b counting
//                          length base + b (the one-third rule of HYB, when a third of the rows
//                          are longer than the first histogram reaches)
//   row_length_max         the longest row, by warp shuffles and one atomicMax per block (out
//                          zeroed first; threads per block a multiple of 32)
//   ell_from_csr           column-major ELL of width `width` from the first `width` entries of
//                          every row, padding (ELL_PAD, 0.0) after them; one thread per row, so
//                          every thread writes `width` slots and consecutive threads write
//                          consecutive addresses
//   hyb_overflow_counts    per row, the entries past the first `split` (HYB's COO part)
//   hyb_coo_from_csr       the COO part of HYB: one thread per COO entry p, its row found by a
//                          binary search of the COO row pointers (the scan of the counts), so
//                          long rows are shared out evenly
//   dia_mark               flags[j - i + nrows - 1] = 1 for every stored entry (i, j): one
//                          thread per entry, its row found by a binary search of indptr; a
//                          flag already set is only read, so each flag takes at most a few
//                          atomics
//   dia_offsets            after the scan of the flags (rank[b] = flags set before b): the
//                          offset of every set flag at position rank[b]
//   dia_from_csr           scatters every entry to data[rank[j - i + nrows - 1] * nrows + i],
//                          one thread per row (the band was zeroed on allocation)
#include "common.cuh"

#ifndef HIST_BINS
#define HIST_BINS 1024
#endif

#ifndef SCAN_ITEMS
#define SCAN_ITEMS 8
#endif

// Counts the rows of length >= base into HIST_BINS bins (bin b: length base + b; the last bin
// every longer row) in a private shared-memory histogram, then merges its non-zero bins.
__device__ __forceinline__ void row_length_bins(u32 nrows, u32 base,
                                                const u32 *__restrict__ indptr, u32 *hist) {
    __shared__ u32 local[HIST_BINS];
    for (u32 b = threadIdx.x; b < HIST_BINS; b += blockDim.x) {
        local[b] = 0;
    }
    __syncthreads();
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 row = (u64)blockIdx.x * blockDim.x + threadIdx.x; row < nrows; row += stride) {
        const u32 len = indptr[row + 1] - indptr[row];
        if (len >= base) {
            const u32 b = len - base;
            atomicAdd(local + (b < HIST_BINS - 1 ? b : HIST_BINS - 1), 1u);
        }
    }
    __syncthreads();
    for (u32 b = threadIdx.x; b < HIST_BINS; b += blockDim.x) {
        if (local[b] != 0) {
            atomicAdd(hist + b, local[b]);
        }
    }
}

extern "C" __global__ void hist_row_lengths(u32 nrows, const u32 *__restrict__ indptr,
                                            u32 *hist) {
    row_length_bins(nrows, 0u, indptr, hist);
}

extern "C" __global__ void hist_row_lengths_from(u32 nrows, u32 base,
                                                 const u32 *__restrict__ indptr, u32 *hist) {
    row_length_bins(nrows, base, indptr, hist);
}

extern "C" __global__ void coo_row_counts(u32 nnz, const u32 *__restrict__ rows, u32 *count) {
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 k = (u64)blockIdx.x * blockDim.x + threadIdx.x; k < nnz; k += stride) {
        atomicAdd(count + rows[k], 1u);
    }
}

// Exclusive scan of one value per thread over the block (blockDim a multiple of 32); returns
// this thread's exclusive prefix and stores the block total in *total. `scratch` holds 32 u32.
__device__ __forceinline__ u32 block_exclusive_scan(u32 v, u32 *scratch, u32 *total) {
    const u32 lane = threadIdx.x & 31u;
    const u32 warp = threadIdx.x >> 5;
    const u32 nwarps = blockDim.x >> 5;
    u32 incl = v;
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
        const u32 o = __shfl_up_sync(FULL_MASK, incl, off);
        if (lane >= (u32)off) {
            incl += o;
        }
    }
    if (lane == 31) {
        scratch[warp] = incl;
    }
    __syncthreads();
    if (warp == 0) {
        u32 ws = (lane < nwarps) ? scratch[lane] : 0u;
        u32 wincl = ws;
#pragma unroll
        for (int off = 1; off < 32; off <<= 1) {
            const u32 o = __shfl_up_sync(FULL_MASK, wincl, off);
            if (lane >= (u32)off) {
                wincl += o;
            }
        }
        if (lane < nwarps) {
            scratch[lane] = wincl - ws; // exclusive prefix of warp totals
        }
        if (lane == 31) {
            *total = wincl;
        }
    }
    __syncthreads();
    return scratch[warp] + incl - v;
}

extern "C" __global__ void scan_tile_sums(u32 n, const u32 *__restrict__ in, u32 *tile_sums) {
    __shared__ u32 scratch[32];
    const u64 tile = (u64)blockDim.x * SCAN_ITEMS;
    const u64 base = (u64)blockIdx.x * tile;
    u32 s = 0;
    for (u64 i = base + threadIdx.x; i < base + tile && i < n; i += blockDim.x) {
        s += in[i];
    }
    // Block sum through the warp totals.
    const u32 lane = threadIdx.x & 31u;
    const u32 warp = threadIdx.x >> 5;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        s += __shfl_down_sync(FULL_MASK, s, off);
    }
    if (lane == 0) {
        scratch[warp] = s;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        u32 t = 0;
        for (u32 w = 0; w < (blockDim.x >> 5); ++w) {
            t += scratch[w];
        }
        tile_sums[blockIdx.x] = t;
    }
}

extern "C" __global__ void scan_tile_offsets(u32 ntiles, u32 *tile_sums) {
    __shared__ u32 scratch[32];
    __shared__ u32 total;
    u32 carry = 0;
    for (u32 base = 0; base < ntiles; base += blockDim.x) {
        const u32 i = base + threadIdx.x;
        const u32 v = (i < ntiles) ? tile_sums[i] : 0u;
        const u32 ex = block_exclusive_scan(v, scratch, &total);
        if (i < ntiles) {
            tile_sums[i] = carry + ex;
        }
        __syncthreads(); // total and scratch are reused by the next chunk
        carry += total;
        __syncthreads();
    }
}

extern "C" __global__ void scan_apply(u32 n, const u32 *__restrict__ in, u32 *out,
                                      const u32 *__restrict__ tile_offsets) {
    __shared__ u32 scratch[32];
    __shared__ u32 total;
    const u64 tile = (u64)blockDim.x * SCAN_ITEMS;
    // Thread t owns the SCAN_ITEMS consecutive elements starting at base + t * SCAN_ITEMS.
    const u64 first = (u64)blockIdx.x * tile + (u64)threadIdx.x * SCAN_ITEMS;
    u32 items[SCAN_ITEMS];
    u32 s = 0;
#pragma unroll
    for (int k = 0; k < SCAN_ITEMS; ++k) {
        items[k] = (first + k < n) ? in[first + k] : 0u;
        s += items[k];
    }
    u32 prefix = block_exclusive_scan(s, scratch, &total) + tile_offsets[blockIdx.x];
#pragma unroll
    for (int k = 0; k < SCAN_ITEMS; ++k) {
        if (first + k < n) {
            out[first + k] = prefix;
        }
        prefix += items[k];
    }
    if (blockIdx.x == gridDim.x - 1 && threadIdx.x == blockDim.x - 1) {
        out[n] = prefix;
    }
}

// ---------------------------------------------------------------------------------------------
// Padded formats from CSR.

// The largest i < n with ptr[i] <= k, for row pointers ptr of n + 1 entries with
// ptr[0] <= k < ptr[n]: the row holding entry k (empty rows share their pointer with the next
// row and are skipped).
__device__ __forceinline__ u32 row_of_entry(u32 n, const u32 *__restrict__ ptr, u32 k) {
    u32 lo = 0, hi = n; // ptr[lo] <= k < ptr[hi]
    while (hi - lo > 1) {
        const u32 mid = lo + ((hi - lo) >> 1);
        if (ptr[mid] <= k) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    return lo;
}

extern "C" __global__ void row_length_max(u32 nrows, const u32 *__restrict__ indptr, u32 *out) {
    __shared__ u32 warp_max[32];
    const u32 lane = threadIdx.x & 31u;
    const u32 warp = threadIdx.x >> 5;
    u32 m = 0;
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 row = (u64)blockIdx.x * blockDim.x + threadIdx.x; row < nrows; row += stride) {
        const u32 len = indptr[row + 1] - indptr[row];
        m = len > m ? len : m;
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        const u32 o = __shfl_down_sync(FULL_MASK, m, off);
        m = o > m ? o : m;
    }
    if (lane == 0) {
        warp_max[warp] = m;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        u32 b = 0;
        for (u32 w = 0; w < (blockDim.x >> 5); ++w) {
            b = warp_max[w] > b ? warp_max[w] : b;
        }
        if (b != 0) {
            atomicMax(out, b);
        }
    }
}

extern "C" __global__ void ell_from_csr(u32 nrows, u32 width, const u32 *__restrict__ indptr,
                                        const u32 *__restrict__ indices,
                                        const double *__restrict__ vals, u32 *__restrict__ ecols,
                                        double *__restrict__ evals) {
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 row = (u64)blockIdx.x * blockDim.x + threadIdx.x; row < nrows; row += stride) {
        const u32 start = indptr[row];
        const u32 len = indptr[row + 1] - start;
        for (u32 k = 0; k < width; ++k) {
            const u64 slot = (u64)k * nrows + row;
            if (k < len) {
                ecols[slot] = indices[start + k];
                evals[slot] = vals[start + k];
            } else {
                ecols[slot] = ELL_PAD;
                evals[slot] = 0.0;
            }
        }
    }
}

extern "C" __global__ void hyb_overflow_counts(u32 nrows, u32 split,
                                               const u32 *__restrict__ indptr, u32 *counts) {
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 row = (u64)blockIdx.x * blockDim.x + threadIdx.x; row < nrows; row += stride) {
        const u32 len = indptr[row + 1] - indptr[row];
        counts[row] = len > split ? len - split : 0u;
    }
}

extern "C" __global__ void hyb_coo_from_csr(u32 nrows, u32 coo_nnz, u32 split,
                                            const u32 *__restrict__ indptr,
                                            const u32 *__restrict__ indices,
                                            const double *__restrict__ vals,
                                            const u32 *__restrict__ coo_ptr,
                                            u32 *__restrict__ crows, u32 *__restrict__ ccols,
                                            double *__restrict__ cvals) {
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 p = (u64)blockIdx.x * blockDim.x + threadIdx.x; p < coo_nnz; p += stride) {
        const u32 i = row_of_entry(nrows, coo_ptr, (u32)p);
        const u32 src = indptr[i] + split + ((u32)p - coo_ptr[i]);
        crows[p] = i;
        ccols[p] = indices[src];
        cvals[p] = vals[src];
    }
}

extern "C" __global__ void dia_mark(u32 nrows, u32 nnz, const u32 *__restrict__ indptr,
                                    const u32 *__restrict__ indices, u32 *flags) {
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 k = (u64)blockIdx.x * blockDim.x + threadIdx.x; k < nnz; k += stride) {
        const u32 i = row_of_entry(nrows, indptr, (u32)k);
        const u64 b = (u64)indices[k] + (nrows - 1u) - i;
        if (flags[b] == 0u) {
            atomicOr(flags + b, 1u);
        }
    }
}

extern "C" __global__ void dia_offsets(u32 nbits, u32 shift, const u32 *__restrict__ flags,
                                       const u32 *__restrict__ rank, int *offsets) {
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 b = (u64)blockIdx.x * blockDim.x + threadIdx.x; b < nbits; b += stride) {
        if (flags[b] != 0u) {
            offsets[rank[b]] = (int)((i64)b - (i64)shift);
        }
    }
}

extern "C" __global__ void dia_from_csr(u32 nrows, const u32 *__restrict__ indptr,
                                        const u32 *__restrict__ indices,
                                        const double *__restrict__ vals,
                                        const u32 *__restrict__ rank, double *__restrict__ data) {
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 row = (u64)blockIdx.x * blockDim.x + threadIdx.x; row < nrows; row += stride) {
        const u32 end = indptr[row + 1];
        for (u32 k = indptr[row]; k < end; ++k) {
            const u64 b = (u64)indices[k] + (nrows - 1u) - row;
            data[(u64)rank[b] * nrows + row] = vals[k];
        }
    }
}
