// spmv_dia.cu: y = A x with A stored by diagonals: offsets[d] = column - row of diagonal d and
// data[d * nrows + i] = A[i][i + offsets[d]] (0 where that column is outside the matrix). One
// thread per row, grid-stride over rows, any block count. Every row is written.
//
// spmv_dia_dot3_next: the same product w = A u of the PCG iteration, whose epilogue adds the
// three dots (r, u), (w, u), (r, r) of its rows and finishes them over the grid
// (dot3_grid_finish: the last block runs the recurrence for the next iteration). A square
// matrix; threads per block a multiple of 32; partial holds 3 x the block count.
#include "common.cuh"
#include "cg_scalars.cuh"

// Rows of this thread, grid-stride. DOTS: also adds r[row] u[row], w[row] u[row], r[row]^2
// into g, d, q (x is u).
template <bool DOTS>
__device__ __forceinline__ void dia_rows(u32 nrows, u32 ncols, u32 ndiag,
                                         const int *__restrict__ offsets,
                                         const double *__restrict__ data,
                                         const double *__restrict__ x, double *__restrict__ y,
                                         const double *__restrict__ r, double &g, double &d,
                                         double &q) {
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 row = (u64)blockIdx.x * blockDim.x + threadIdx.x; row < nrows; row += stride) {
        double sum = 0.0;
        for (u32 dg = 0; dg < ndiag; ++dg) {
            const i64 col = (i64)row + offsets[dg];
            if (col >= 0 && col < (i64)ncols) {
                sum += data[(u64)dg * nrows + row] * x[col];
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

extern "C" __global__ void spmv_dia(u32 nrows, u32 ncols, u32 ndiag,
                                    const int *__restrict__ offsets,
                                    const double *__restrict__ data,
                                    const double *__restrict__ x, double *__restrict__ y) {
    double g = 0.0, d = 0.0, q = 0.0;
    dia_rows<false>(nrows, ncols, ndiag, offsets, data, x, y, x, g, d, q);
}

extern "C" __global__ void spmv_dia_dot3_next(u32 nrows, u32 ndiag,
                                              const int *__restrict__ offsets,
                                              const double *__restrict__ data,
                                              const double *__restrict__ u,
                                              double *__restrict__ w,
                                              const double *__restrict__ r, double *partial,
                                              u32 *counter, double *scalars, double *history,
                                              u32 history_cap) {
    double g = 0.0, d = 0.0, q = 0.0;
    dia_rows<true>(nrows, nrows, ndiag, offsets, data, u, w, r, g, d, q);
    dot3_grid_finish(g, d, q, partial, counter, scalars, history, history_cap, 0, true);
}
