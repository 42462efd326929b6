// spmv_csr.cu: y = A x with A in CSR (32-bit row pointers and column indices).
//
//   spmv_csr_scalar       one thread per row, grid-stride over rows, any block count
//   spmv_csr_vector_L     L lanes per row (L = 2, 4, 8, 16, 32): each row's entries are read by L
//                         consecutive lanes (coalesced for long rows) and added with shuffles;
//                         grid-stride over rows; threads per block must be a multiple of 32
//   spmv_csr_merge        load-balanced by the merge path of Merrill & Garland ("Merge-based
//                         Parallel Sparse Matrix-Vector Multiplication", SC 2016): the row ends
//                         (indptr[1..n]) and the entry indices (0..nnz) form one path of
//                         n + nnz steps, cut into tiles of MERGE_TILE steps, one warp per tile
//                         (grid-stride over tiles); each lane takes MERGE_ITEMS steps, so rows
//                         of any length cost every lane the same. Threads per block a multiple
//                         of 32 (at most MERGE_MAX_THREADS), dynamic shared memory
//                         MERGE_SMEM_PER_WARP bytes per warp. Needs the tile partition
//                         (spmv_csr_merge_partition, once per matrix), and spmv_csr_merge_fixup
//                         after it: a row cut by a tile boundary gets the sums of the tiles
//                         before its last one from the carry-out arrays.
// Every row is written, empty rows with 0.
//
// The add variants compute y += A x (the halo part of a row block added to the local part's
// product already in y); the same launch rules as the kernels they share their code with:
//
//   spmv_csr_scalar_add   as spmv_csr_scalar
//   spmv_csr_vector_add_L as spmv_csr_vector_L (L = 2, 4, 8, 16, 32)
//
// The dot3 variants compute the product w = A u of the PCG iteration, and their epilogue adds
// the three dots (r, u), (w, u), (r, r) of their rows and finishes them over the grid
// (dot3_grid_finish of cg_scalars.cuh: the last block runs the recurrence for the next
// iteration). A square matrix; threads per block a multiple of 32; partial holds 3 x the block
// count:
//
//   spmv_csr_scalar_dot3_next    as spmv_csr_scalar
//   spmv_csr_vector_dot3_next_L  as spmv_csr_vector_L
#include "common.cuh"
#include "cg_scalars.cuh"

// One thread per row, grid-stride. ADD: y[row] += sum instead of y[row] = sum. DOTS: also adds
// r[row] u[row], w[row] u[row], r[row]^2 into g, d, q (x is u, y is w).
template <bool ADD, bool DOTS = false>
__device__ __forceinline__ void csr_scalar(u32 nrows, const u32 *__restrict__ indptr,
                                           const u32 *__restrict__ indices,
                                           const double *__restrict__ vals,
                                           const double *__restrict__ x, double *__restrict__ y,
                                           const double *__restrict__ r = nullptr,
                                           double *dots = nullptr) {
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 row = (u64)blockIdx.x * blockDim.x + threadIdx.x; row < nrows; row += stride) {
        const u32 end = indptr[row + 1];
        double sum = 0.0;
        for (u32 k = indptr[row]; k < end; ++k) {
            sum += vals[k] * x[indices[k]];
        }
        if (ADD) {
            y[row] += sum;
        } else {
            y[row] = sum;
        }
        if (DOTS) {
            const double ui = x[row];
            const double ri = r[row];
            dots[0] += ri * ui;
            dots[1] += sum * ui;
            dots[2] += ri * ri;
        }
    }
}

extern "C" __global__ void spmv_csr_scalar(u32 nrows, const u32 *__restrict__ indptr,
                                           const u32 *__restrict__ indices,
                                           const double *__restrict__ vals,
                                           const double *__restrict__ x, double *__restrict__ y) {
    csr_scalar<false>(nrows, indptr, indices, vals, x, y);
}

// Every lane of a warp runs the same number of loop trips (the loop bound is per warp), so the
// full-mask shuffles always have all 32 lanes present. ADD: y[row] += sum instead of y[row] = sum.
// DOTS: the lane that writes a row also adds r[row] u[row], w[row] u[row], r[row]^2 into
// dots[0..3) (x is u, y is w).
template <int LANES, bool ADD, bool DOTS = false>
__device__ __forceinline__ void csr_vector(u32 nrows, const u32 *__restrict__ indptr,
                                           const u32 *__restrict__ indices,
                                           const double *__restrict__ vals,
                                           const double *__restrict__ x, double *__restrict__ y,
                                           const double *__restrict__ r = nullptr,
                                           double *dots = nullptr) {
    const u32 lane = threadIdx.x & 31u;
    const u32 sub = lane % LANES;
    const u32 rows_per_warp = 32 / LANES;
    const u64 warp = ((u64)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const u64 nwarps = ((u64)gridDim.x * blockDim.x) >> 5;
    for (u64 base = warp * rows_per_warp; base < nrows; base += nwarps * rows_per_warp) {
        const u64 row = base + lane / LANES;
        double sum = 0.0;
        if (row < nrows) {
            const u32 end = indptr[row + 1];
            for (u32 k = indptr[row] + sub; k < end; k += LANES) {
                sum += vals[k] * x[indices[k]];
            }
        }
#pragma unroll
        for (int off = LANES / 2; off > 0; off >>= 1) {
            sum += __shfl_down_sync(FULL_MASK, sum, off, LANES);
        }
        if (sub == 0 && row < nrows) {
            if (ADD) {
                y[row] += sum;
            } else {
                y[row] = sum;
            }
            if (DOTS) {
                const double ui = x[row];
                const double ri = r[row];
                dots[0] += ri * ui;
                dots[1] += sum * ui;
                dots[2] += ri * ri;
            }
        }
    }
}

#define CSR_ARGS                                                                                \
    u32 nrows, const u32 *__restrict__ indptr, const u32 *__restrict__ indices,                 \
        const double *__restrict__ vals, const double *__restrict__ x, double *__restrict__ y

extern "C" __global__ void spmv_csr_vector_2(CSR_ARGS) {
    csr_vector<2, false>(nrows, indptr, indices, vals, x, y);
}
extern "C" __global__ void spmv_csr_vector_4(CSR_ARGS) {
    csr_vector<4, false>(nrows, indptr, indices, vals, x, y);
}
extern "C" __global__ void spmv_csr_vector_8(CSR_ARGS) {
    csr_vector<8, false>(nrows, indptr, indices, vals, x, y);
}
extern "C" __global__ void spmv_csr_vector_16(CSR_ARGS) {
    csr_vector<16, false>(nrows, indptr, indices, vals, x, y);
}
extern "C" __global__ void spmv_csr_vector_32(CSR_ARGS) {
    csr_vector<32, false>(nrows, indptr, indices, vals, x, y);
}

// The arguments of the dot3 variants: the matrix, u, w, r, the last-block workspace and the
// recurrence's buffers.
#define CSR_DOT3_ARGS                                                                           \
    u32 nrows, const u32 *__restrict__ indptr, const u32 *__restrict__ indices,                 \
        const double *__restrict__ vals, const double *__restrict__ u, double *__restrict__ w,  \
        const double *__restrict__ r, double *partial, u32 *counter, double *scalars,           \
        double *history, u32 history_cap

#define CSR_DOT3_FINISH                                                                         \
    dot3_grid_finish(dots[0], dots[1], dots[2], partial, counter, scalars, history, history_cap,\
                     0, true)

extern "C" __global__ void spmv_csr_scalar_dot3_next(CSR_DOT3_ARGS) {
    double dots[3] = {0.0, 0.0, 0.0};
    csr_scalar<false, true>(nrows, indptr, indices, vals, u, w, r, dots);
    CSR_DOT3_FINISH;
}
extern "C" __global__ void spmv_csr_vector_dot3_next_2(CSR_DOT3_ARGS) {
    double dots[3] = {0.0, 0.0, 0.0};
    csr_vector<2, false, true>(nrows, indptr, indices, vals, u, w, r, dots);
    CSR_DOT3_FINISH;
}
extern "C" __global__ void spmv_csr_vector_dot3_next_4(CSR_DOT3_ARGS) {
    double dots[3] = {0.0, 0.0, 0.0};
    csr_vector<4, false, true>(nrows, indptr, indices, vals, u, w, r, dots);
    CSR_DOT3_FINISH;
}
extern "C" __global__ void spmv_csr_vector_dot3_next_8(CSR_DOT3_ARGS) {
    double dots[3] = {0.0, 0.0, 0.0};
    csr_vector<8, false, true>(nrows, indptr, indices, vals, u, w, r, dots);
    CSR_DOT3_FINISH;
}
extern "C" __global__ void spmv_csr_vector_dot3_next_16(CSR_DOT3_ARGS) {
    double dots[3] = {0.0, 0.0, 0.0};
    csr_vector<16, false, true>(nrows, indptr, indices, vals, u, w, r, dots);
    CSR_DOT3_FINISH;
}
extern "C" __global__ void spmv_csr_vector_dot3_next_32(CSR_DOT3_ARGS) {
    double dots[3] = {0.0, 0.0, 0.0};
    csr_vector<32, false, true>(nrows, indptr, indices, vals, u, w, r, dots);
    CSR_DOT3_FINISH;
}

// ---------------------------------------------------------------------------------------------
// Merge-path CSR SpMV.
//
// Path coordinates (i, j): i row ends consumed, j entries consumed; from (i, j) the path
// consumes entry j when j < indptr[i + 1], else the end of row i (so an empty row's end comes
// before the next entry). Diagonal d holds the point with i + j = d; the search below finds it.
//
// A tile is MERGE_TILE consecutive steps. Its warp stages the tile's products
// vals[j] * x[indices[j]] (coalesced reads) and row ends in shared memory, then lane l walks
// steps [l * MERGE_ITEMS, (l + 1) * MERGE_ITEMS) of the tile: each row end it meets completes a
// row. The first row a lane completes may have started in earlier lanes; every lane's partial
// sum of the row it stops in (its carry) is added up over the lanes of that row by a segmented
// shuffle scan, and the lane that completes the row adds the scan value of the lane before it.
// The carry of lane 31 belongs to a row that a later tile completes: it goes to
// carry_rows/carry_vals[tile], and spmv_csr_merge_fixup adds it once every row is written.

#ifndef MERGE_ITEMS
#define MERGE_ITEMS 7
#endif
#ifndef MERGE_MAX_THREADS
#define MERGE_MAX_THREADS 512
#endif
#define MERGE_TILE (32 * MERGE_ITEMS)
// Per warp: MERGE_TILE doubles of products and MERGE_TILE row ends.
#define MERGE_SMEM_PER_WARP (MERGE_TILE * 12)
#if MERGE_SMEM_PER_WARP * (MERGE_MAX_THREADS / 32) > 49152
#error "MERGE_ITEMS x MERGE_MAX_THREADS needs more than 48 KiB of shared memory per block"
#endif

// tile_rows[t] = the row coordinate i of diagonal min(t * MERGE_TILE, n + nnz), for
// t = 0..ntiles (ntiles + 1 entries); the entry coordinate is the diagonal minus i.
extern "C" __global__ void spmv_csr_merge_partition(u32 nrows, u32 nnz,
                                                    const u32 *__restrict__ indptr, u32 ntiles,
                                                    u32 *__restrict__ tile_rows) {
    const u64 total = (u64)nrows + nnz;
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 t = (u64)blockIdx.x * blockDim.x + threadIdx.x; t <= ntiles; t += stride) {
        const u64 d = t * MERGE_TILE < total ? t * MERGE_TILE : total;
        // The largest i in [max(d - nnz, 0), min(d, nrows)] whose path point has consumed the
        // end of row i - 1: row end p is consumed before diagonal d iff indptr[p + 1] <= d-p-1.
        u64 lo = d > nnz ? d - nnz : 0;
        u64 hi = d < nrows ? d : nrows;
        while (lo < hi) {
            const u64 p = (lo + hi) >> 1;
            if ((u64)indptr[p + 1] + p + 1 <= d) {
                lo = p + 1;
            } else {
                hi = p;
            }
        }
        tile_rows[t] = (u32)lo;
    }
}

// The row coordinate, relative to the tile, of the tile's step a (0 <= a <= nr + nz), for a
// tile of nr row ends and nz entries whose row ends (relative to its first entry) are s_end.
__device__ __forceinline__ u32 merge_tile_search(u32 a, u32 nr, u32 nz,
                                                 const u32 *__restrict__ s_end) {
    u32 lo = a > nz ? a - nz : 0u;
    u32 hi = a < nr ? a : nr;
    while (lo < hi) {
        const u32 p = (lo + hi) >> 1;
        if (s_end[p] + p + 1u <= a) {
            lo = p + 1u;
        } else {
            hi = p;
        }
    }
    return lo;
}

extern "C" __global__ void __launch_bounds__(MERGE_MAX_THREADS)
    spmv_csr_merge(u32 nrows, u32 nnz, const u32 *__restrict__ indptr,
                   const u32 *__restrict__ indices, const double *__restrict__ vals,
                   const double *__restrict__ x, double *__restrict__ y,
                   const u32 *__restrict__ tile_rows, u32 *__restrict__ carry_rows,
                   double *__restrict__ carry_vals) {
    extern __shared__ double merge_smem[];
    const u32 lane = threadIdx.x & 31u;
    const u32 warp_in_block = threadIdx.x >> 5;
    const u32 warps_in_block = blockDim.x >> 5;
    double *s_prod = merge_smem + (u64)warp_in_block * MERGE_TILE;
    u32 *s_end = (u32 *)(merge_smem + (u64)warps_in_block * MERGE_TILE) +
                 (u64)warp_in_block * MERGE_TILE;

    const u64 total = (u64)nrows + nnz;
    const u64 ntiles = (total + MERGE_TILE - 1) / MERGE_TILE;
    const u64 warp = ((u64)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const u64 nwarps = ((u64)gridDim.x * blockDim.x) >> 5;
    // The loop bound is per warp: every lane takes part in every shuffle.
    for (u64 t = warp; t < ntiles; t += nwarps) {
        const u64 d0 = t * MERGE_TILE;
        const u64 d1 = d0 + MERGE_TILE < total ? d0 + MERGE_TILE : total;
        const u32 ti0 = tile_rows[t];
        const u32 ti1 = tile_rows[t + 1];
        const u32 tj0 = (u32)(d0 - ti0);
        const u32 tj1 = (u32)(d1 - ti1);
        const u32 nr = ti1 - ti0; // row ends in the tile
        const u32 nz = tj1 - tj0; // entries in the tile
        for (u32 k = lane; k < nz; k += 32) {
            s_prod[k] = vals[tj0 + k] * x[indices[tj0 + k]];
        }
        for (u32 k = lane; k < nr; k += 32) {
            s_end[k] = indptr[ti0 + 1 + k] - tj0;
        }
        __syncwarp();

        const u32 steps = nr + nz;
        const u32 a0 = lane * MERGE_ITEMS < steps ? lane * MERGE_ITEMS : steps;
        const u32 a1 = a0 + MERGE_ITEMS < steps ? a0 + MERGE_ITEMS : steps;
        u32 r = merge_tile_search(a0, nr, nz, s_end);
        u32 z = a0 - r;
        const u32 r1 = merge_tile_search(a1, nr, nz, s_end);
        const u32 z1 = a1 - r1;

        double sum = 0.0;
        bool has_head = false;
        u32 head_row = 0;
        double head_val = 0.0;
        for (; r < r1; ++r) {
            const u32 end = s_end[r];
            for (; z < end; ++z) {
                sum += s_prod[z];
            }
            if (has_head) {
                y[ti0 + r] = sum;
            } else {
                has_head = true;
                head_row = r;
                head_val = sum;
            }
            sum = 0.0;
        }
        for (; z < z1; ++z) {
            sum += s_prod[z];
        }

        // Segmented inclusive scan of the carries over the lanes; the keys (the rows the lanes
        // stop in) do not decrease with the lane, so equal keys are contiguous.
        const u32 key = r1;
        double v = sum;
#pragma unroll
        for (int off = 1; off < 32; off <<= 1) {
            const double ov = __shfl_up_sync(FULL_MASK, v, off);
            const u32 okey = __shfl_up_sync(FULL_MASK, key, off);
            if (lane >= (u32)off && okey == key) {
                v += ov;
            }
        }
        // The lane before stops in the row this lane starts in: its scan value is what the
        // lanes before added to this lane's first completed row.
        const double before = __shfl_up_sync(FULL_MASK, v, 1);
        if (has_head) {
            y[ti0 + head_row] = lane > 0 ? head_val + before : head_val;
        }
        if (lane == 31) {
            carry_rows[t] = ti0 + key;
            carry_vals[t] = v;
        }
        __syncwarp(); // the next tile overwrites the shared arrays
    }
}

// y[carry_rows[t]] += carry_vals[t] for every tile whose carry row is a row (the last tile's
// is nrows); carry rows do not decrease with t, so each warp adds runs of equal rows with a
// segmented shuffle reduction and one atomic per run. Threads per block a multiple of 32.
extern "C" __global__ void spmv_csr_merge_fixup(u32 nrows, u32 ntiles,
                                                const u32 *__restrict__ carry_rows,
                                                const double *__restrict__ carry_vals,
                                                double *y) {
    const u32 lane = threadIdx.x & 31u;
    const u64 warp = ((u64)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const u64 nwarps = ((u64)gridDim.x * blockDim.x) >> 5;
    for (u64 base = warp * 32; base < ntiles; base += nwarps * 32) {
        const u64 k = base + lane;
        u32 row = 0xffffffffu;
        double v = 0.0;
        if (k < ntiles) {
            row = carry_rows[k];
            v = carry_vals[k];
        }
#pragma unroll
        for (int off = 1; off < 32; off <<= 1) {
            const double ov = __shfl_down_sync(FULL_MASK, v, off);
            const u32 orow = __shfl_down_sync(FULL_MASK, row, off);
            if (lane + off < 32 && orow == row) {
                v += ov;
            }
        }
        const u32 prev_row = __shfl_up_sync(FULL_MASK, row, 1);
        if (k < ntiles && row < nrows && (lane == 0 || prev_row != row) && v != 0.0) {
            atomicAdd(y + row, v);
        }
    }
}

// y += A x (one thread per row, grid-stride, any block count): the halo part of a row block
// added to the local part's product already in y.
extern "C" __global__ void spmv_csr_scalar_add(u32 nrows, const u32 *__restrict__ indptr,
                                               const u32 *__restrict__ indices,
                                               const double *__restrict__ vals,
                                               const double *__restrict__ x,
                                               double *__restrict__ y) {
    csr_scalar<true>(nrows, indptr, indices, vals, x, y);
}

// y += A x with L lanes per row (the halo part of a row block, see spmv_csr_scalar_add).
extern "C" __global__ void spmv_csr_vector_add_2(CSR_ARGS) {
    csr_vector<2, true>(nrows, indptr, indices, vals, x, y);
}
extern "C" __global__ void spmv_csr_vector_add_4(CSR_ARGS) {
    csr_vector<4, true>(nrows, indptr, indices, vals, x, y);
}
extern "C" __global__ void spmv_csr_vector_add_8(CSR_ARGS) {
    csr_vector<8, true>(nrows, indptr, indices, vals, x, y);
}
extern "C" __global__ void spmv_csr_vector_add_16(CSR_ARGS) {
    csr_vector<16, true>(nrows, indptr, indices, vals, x, y);
}
extern "C" __global__ void spmv_csr_vector_add_32(CSR_ARGS) {
    csr_vector<32, true>(nrows, indptr, indices, vals, x, y);
}
