// spmv_ell.cu: y = A x with A in column-major ELLPACK: slot k of row i at k * nrows + i, padded
// slots marked by column ELL_PAD (value 0). One thread per row, grid-stride over rows, any block
// count; consecutive threads read consecutive addresses. Every row is written.
// The ELL part of HYB uses the same kernel (then spmv_coo_* adds the COO part).
//
// spmv_ell_dot3_next: the same product w = A u of the PCG iteration, whose epilogue adds the
// three dots (r, u), (w, u), (r, r) of its rows and finishes them over the grid
// (dot3_grid_finish: the last block runs the recurrence for the next iteration). A square
// matrix; threads per block a multiple of 32; partial holds 3 x the block count.
#include "common.cuh"
#include "cg_scalars.cuh"

// Rows of this thread, grid-stride. DOTS: also adds r[row] u[row], w[row] u[row], r[row]^2
// into g, d, q (x is u).
template <bool DOTS>
__device__ __forceinline__ void ell_rows(u32 nrows, u32 width, const u32 *__restrict__ cols,
                                         const double *__restrict__ vals,
                                         const double *__restrict__ x, double *__restrict__ y,
                                         const double *__restrict__ r, double &g, double &d,
                                         double &q) {
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 row = (u64)blockIdx.x * blockDim.x + threadIdx.x; row < nrows; row += stride) {
        double sum = 0.0;
        for (u32 k = 0; k < width; ++k) {
            const u64 slot = (u64)k * nrows + row;
            const u32 c = cols[slot];
            if (c != ELL_PAD) {
                sum += vals[slot] * x[c];
            }
        }
        y[row] = sum;
        if (DOTS) {
            const double ui = x[row];
            const double ri = r[row];
            g += ri * ui;
            d += sum * ui;
            q += ri * ri;
        }
    }
}

extern "C" __global__ void spmv_ell(u32 nrows, u32 width, const u32 *__restrict__ cols,
                                    const double *__restrict__ vals,
                                    const double *__restrict__ x, double *__restrict__ y) {
    double g = 0.0, d = 0.0, q = 0.0;
    ell_rows<false>(nrows, width, cols, vals, x, y, x, g, d, q);
}

extern "C" __global__ void spmv_ell_dot3_next(u32 nrows, u32 width,
                                              const u32 *__restrict__ cols,
                                              const double *__restrict__ vals,
                                              const double *__restrict__ u,
                                              double *__restrict__ w,
                                              const double *__restrict__ r, double *partial,
                                              u32 *counter, double *scalars, double *history,
                                              u32 history_cap) {
    double g = 0.0, d = 0.0, q = 0.0;
    ell_rows<true>(nrows, width, cols, vals, u, w, r, g, d, q);
    dot3_grid_finish(g, d, q, partial, counter, scalars, history, history_cap, 0, true);
}
