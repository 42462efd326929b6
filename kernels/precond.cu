// precond.cu: the element-wise part of the preconditioners. Everything else a preconditioner
// needs is SpMV (SSOR approximate inverse: t = K r; z = (K^T S) t, the diagonal S folded into
// the stored K^T, or one SpMV with the explicit product), which the spmv_* files provide.
//
//   jacobi_apply     z = inv_diag .* r                     grid-stride, any block count
//   jacobi_apply_v2  the same with double2 loads
#include "common.cuh"

#define GLOBAL_TID ((u64)blockIdx.x * blockDim.x + threadIdx.x)
#define GLOBAL_THREADS ((u64)gridDim.x * blockDim.x)

extern "C" __global__ void jacobi_apply(u64 n, const double *__restrict__ inv_diag,
                                        const double *__restrict__ r, double *__restrict__ z) {
    for (u64 i = GLOBAL_TID; i < n; i += GLOBAL_THREADS) {
        z[i] = inv_diag[i] * r[i];
    }
}

extern "C" __global__ void jacobi_apply_v2(u64 n, const double *__restrict__ inv_diag,
                                           const double *__restrict__ r,
                                           double *__restrict__ z) {
    const u64 npairs = n >> 1;
    const double2 *d2 = reinterpret_cast<const double2 *>(inv_diag);
    const double2 *r2 = reinterpret_cast<const double2 *>(r);
    double2 *z2 = reinterpret_cast<double2 *>(z);
    for (u64 t = GLOBAL_TID; t < npairs; t += GLOBAL_THREADS) {
        const double2 dv = d2[t];
        const double2 rv = r2[t];
        z2[t] = make_double2(dv.x * rv.x, dv.y * rv.y);
    }
    if (GLOBAL_TID == 0 && (n & 1)) {
        z[n - 1] = inv_diag[n - 1] * r[n - 1];
    }
}

// Value refreshes: the preconditioners' values recomputed on the device for new values of A on
// kept patterns (every pattern, and the position in K of each entry of K^T, are made on the host
// once). A's diagonal entry of row i is vals[diag[i]]; columns ascend within a row, so the
// strictly lower entries of row i are those before it. Each value is the expression the host
// build evaluates, its terms summed in the same order and every product and sum rounded on its
// own (no fused multiply-add), so the values equal the host's (up to the sign of a zero sum).
//
//   precond_inv_diag  out[i] = s / a_ii    (s = 1: Jacobi; s = omega (2 - omega): SSOR-AI's scale)
//   ssor_k1_values    K = I - X, X = omega L D^-1, on K's pattern; a thread per row
//   ssor_k2_values    K = I - X + X^2 on K's pattern; a thread per row
//   ssor_k2_values_warp  the same, a warp per row (rows of K of many entries), the sums of the
//                     row's entries in shared memory (K2_VALUES_ROW at a time), the thread's
//                     terms in the thread's order. blockDim.x is at most 32 K2_VALUES_WARPS
//   gather_values     out[p] = in[src[p]]  (K^T's values from K's)
//   gather_scaled_values  out[p] = in[src[p]] * (scale / a_jj), j = to_idx[p]  (K^T diag(s)
//                     from K, s_j = scale / a_jj: the factored form's stored K^T S)
//   ssor_gram_values  M = K^T diag(s) K on M's pattern, s_q = scale / a_qq; a thread per row
//   ssor_gram_values_warp  the same, a warp per row (for rows of M too long for one thread):
//                     sums of the row's entries held in shared memory (GRAM_VALUES_ROW at a
//                     time), the rows q of K it unites taken in ascending order, the entries of
//                     each a lane apiece, so that every sum takes its terms in the thread's
//                     order and the two give the same bits. blockDim.x is at most 32
//                     GRAM_VALUES_WARPS

extern "C" __global__ void precond_inv_diag(u64 n, const double *__restrict__ a_vals,
                                            const u32 *__restrict__ diag, double s,
                                            double *__restrict__ out) {
    for (u64 i = GLOBAL_TID; i < n; i += GLOBAL_THREADS) {
        out[i] = __ddiv_rn(s, a_vals[diag[i]]);
    }
}

// X_ij = omega a_ij / a_jj, for the entry p of A in column j.
__device__ __forceinline__ double ssor_x(double omega, const double *a_vals, const u32 *diag,
                                         u32 p, u32 j) {
    return __ddiv_rn(__dmul_rn(omega, a_vals[p]), a_vals[diag[j]]);
}

// The largest v over the 32 lanes of a warp, in every lane; every lane must call it.
__device__ __forceinline__ u32 warp_max_u32(u32 v) {
    for (int o = 16; o > 0; o >>= 1) {
        const u32 other = __shfl_xor_sync(0xffffffffu, v, o);
        v = other > v ? other : v;
    }
    return v;
}

// Position of column j in the sorted columns idx[lo..hi), or hi when absent.
__device__ __forceinline__ u32 find_column(const u32 *idx, u32 lo, u32 hi, u32 j) {
    u32 a = lo, b = hi;
    while (a < b) {
        const u32 m = a + ((b - a) >> 1);
        if (idx[m] < j) {
            a = m + 1;
        } else {
            b = m;
        }
    }
    return (a < hi && idx[a] == j) ? a : hi;
}

extern "C" __global__ void ssor_k1_values(u32 n, const u32 *__restrict__ a_ptr,
                                          const u32 *__restrict__ a_idx,
                                          const double *__restrict__ a_vals,
                                          const u32 *__restrict__ diag, double omega,
                                          const u32 *__restrict__ k_ptr,
                                          double *__restrict__ k_vals) {
    for (u64 t = GLOBAL_TID; t < n; t += GLOBAL_THREADS) {
        const u32 i = (u32)t;
        u32 at = k_ptr[i];
        const u32 end = k_ptr[i + 1];
        for (u32 p = a_ptr[i]; p < diag[i] && at + 1 < end; ++p) {
            k_vals[at++] = -ssor_x(omega, a_vals, diag, p, a_idx[p]);
        }
        if (at < end) {
            k_vals[at] = 1.0;
        }
    }
}

// Row i of K = I - X + X^2 (ssor_k2_values): its values zeroed, then -X[i, :], then
// X_ik X[k, :] for each k of row i in order, then the identity, each term added to its entry
// rounded one by one.
__device__ __forceinline__ void k2_row_values(u32 i, const u32 *__restrict__ a_ptr,
                                              const u32 *__restrict__ a_idx,
                                              const double *__restrict__ a_vals,
                                              const u32 *__restrict__ diag, double omega,
                                              const u32 *__restrict__ k_ptr,
                                              const u32 *__restrict__ k_idx,
                                              double *__restrict__ k_vals) {
    const u32 lo = k_ptr[i], hi = k_ptr[i + 1];
    for (u32 q = lo; q < hi; ++q) {
        k_vals[q] = 0.0;
    }
    const u32 row_first = a_ptr[i], end = diag[i];
    for (u32 p = row_first; p < end; ++p) {
        const u32 j = a_idx[p];
        const u32 q = find_column(k_idx, lo, hi, j);
        if (q < hi) {
            k_vals[q] = __dadd_rn(k_vals[q], -ssor_x(omega, a_vals, diag, p, j));
        }
    }
    for (u32 p = row_first; p < end; ++p) {
        const u32 k = a_idx[p];
        const double xik = ssor_x(omega, a_vals, diag, p, k);
        const u32 r_end = diag[k];
        for (u32 r = a_ptr[k]; r < r_end; ++r) {
            const u32 j = a_idx[r];
            const u32 q = find_column(k_idx, lo, hi, j);
            if (q < hi) {
                const double xkj = ssor_x(omega, a_vals, diag, r, j);
                k_vals[q] = __dadd_rn(k_vals[q], __dmul_rn(xik, xkj));
            }
        }
    }
    const u32 q = find_column(k_idx, lo, hi, i);
    if (q < hi) {
        k_vals[q] = __dadd_rn(k_vals[q], 1.0);
    }
}

extern "C" __global__ void ssor_k2_values(u32 n, const u32 *__restrict__ a_ptr,
                                          const u32 *__restrict__ a_idx,
                                          const double *__restrict__ a_vals,
                                          const u32 *__restrict__ diag, double omega,
                                          const u32 *__restrict__ k_ptr,
                                          const u32 *__restrict__ k_idx,
                                          double *__restrict__ k_vals) {
    for (u64 t = GLOBAL_TID; t < n; t += GLOBAL_THREADS) {
        k2_row_values((u32)t, a_ptr, a_idx, a_vals, diag, omega, k_ptr, k_idx, k_vals);
    }
}

// ssor_k2_values_warp's shared memory per warp: a chunk of the row of K at hand, its columns
// and the sums of its entries (8 warps of 512 entries: 48 KB a block).
#define K2_VALUES_ROW 512
#define K2_VALUES_WARPS 8
struct K2ValuesWarp {
    double acc[K2_VALUES_ROW];
    u32 col[K2_VALUES_ROW];
};

// The place of column j among the len ascending columns col, or len where it is not one.
__device__ __forceinline__ u32 chunk_column(const u32 *col, u32 len, u32 j) {
    u32 a = 0, b = len;
    while (a < b) {
        const u32 m = a + ((b - a) >> 1);
        if (col[m] < j) {
            a = m + 1;
        } else {
            b = m;
        }
    }
    return (a < len && col[a] == j) ? a : len;
}

// ssor_k2_values a warp per row (rows of K of many entries, whose thread would find each of
// its terms' places one search after another): the row in chunks of K2_VALUES_ROW entries,
// whose sums are held in shared memory and found there by their columns. For each chunk the
// lanes take -X[i, :] together, then the entries of one row k of X at a time (distinct
// columns, so distinct sums; a row k whose columns, all below k, lie before the chunk is
// skipped), the warp synchronizing between rows k, which come in the thread's order; then the
// identity. So every entry takes the thread's terms in the thread's order, and the two give
// the same bits. Every lane of a warp takes part in every row: blockDim.x is a multiple of 32
// and at most 32 K2_VALUES_WARPS.
extern "C" __global__ void ssor_k2_values_warp(u32 n, const u32 *__restrict__ a_ptr,
                                               const u32 *__restrict__ a_idx,
                                               const double *__restrict__ a_vals,
                                               const u32 *__restrict__ diag, double omega,
                                               const u32 *__restrict__ k_ptr,
                                               const u32 *__restrict__ k_idx,
                                               double *__restrict__ k_vals) {
    __shared__ K2ValuesWarp sh[K2_VALUES_WARPS];
    const u32 lane = threadIdx.x & 31;
    K2ValuesWarp &s = sh[threadIdx.x >> 5];
    for (u64 w = GLOBAL_TID >> 5; w < n; w += GLOBAL_THREADS >> 5) {
        const u32 i = (u32)w;
        const u32 lo = k_ptr[i], hi = k_ptr[i + 1];
        const u32 row_first = a_ptr[i], end = diag[i];
        for (u32 c0 = lo; c0 < hi; c0 += K2_VALUES_ROW) {
            const u32 len = hi - c0 < K2_VALUES_ROW ? hi - c0 : K2_VALUES_ROW;
            for (u32 e = lane; e < len; e += 32) {
                s.col[e] = k_idx[c0 + e];
                s.acc[e] = 0.0;
            }
            __syncwarp();
            const u32 first = s.col[0], last = s.col[len - 1];
            for (u32 p = row_first + lane; p < end; p += 32) {
                const u32 j = a_idx[p];
                if (j < first || j > last) {
                    continue;
                }
                const u32 q = chunk_column(s.col, len, j);
                if (q < len) {
                    s.acc[q] = __dadd_rn(s.acc[q], -ssor_x(omega, a_vals, diag, p, j));
                }
            }
            __syncwarp();
            for (u32 p = row_first; p < end; ++p) {
                const u32 k = a_idx[p];
                if (k <= first) {
                    continue;
                }
                const double xik = ssor_x(omega, a_vals, diag, p, k);
                const u32 r_end = diag[k];
                for (u32 r = a_ptr[k] + lane; r < r_end; r += 32) {
                    const u32 j = a_idx[r];
                    if (j > last) {
                        break;
                    }
                    if (j < first) {
                        continue;
                    }
                    const u32 q = chunk_column(s.col, len, j);
                    if (q < len) {
                        const double xkj = ssor_x(omega, a_vals, diag, r, j);
                        s.acc[q] = __dadd_rn(s.acc[q], __dmul_rn(xik, xkj));
                    }
                }
                __syncwarp();
            }
            if (lane == 0 && i >= first && i <= last) {
                const u32 q = chunk_column(s.col, len, i);
                if (q < len) {
                    s.acc[q] = __dadd_rn(s.acc[q], 1.0);
                }
            }
            __syncwarp();
            for (u32 e = lane; e < len; e += 32) {
                k_vals[c0 + e] = s.acc[e];
            }
            __syncwarp();
        }
    }
}

extern "C" __global__ void gather_values(u64 n, const u32 *__restrict__ src,
                                         const double *__restrict__ in,
                                         double *__restrict__ out) {
    for (u64 p = GLOBAL_TID; p < n; p += GLOBAL_THREADS) {
        out[p] = in[src[p]];
    }
}

extern "C" __global__ void gather_scaled_values(u64 n, const u32 *__restrict__ src,
                                                const double *__restrict__ in,
                                                const u32 *__restrict__ to_idx,
                                                const double *__restrict__ a_vals,
                                                const u32 *__restrict__ diag, double scale,
                                                double *__restrict__ out) {
    for (u64 p = GLOBAL_TID; p < n; p += GLOBAL_THREADS) {
        // s_j rounded as precond_inv_diag rounds it, then the product rounded once.
        out[p] = __dmul_rn(in[src[p]], __ddiv_rn(scale, a_vals[diag[to_idx[p]]]));
    }
}

extern "C" __global__ void ssor_gram_values(u32 n, const u32 *__restrict__ kt_ptr,
                                            const u32 *__restrict__ kt_idx,
                                            const double *__restrict__ kt_vals,
                                            const u32 *__restrict__ k_ptr,
                                            const u32 *__restrict__ k_idx,
                                            const double *__restrict__ k_vals,
                                            const double *__restrict__ a_vals,
                                            const u32 *__restrict__ diag, double scale,
                                            const u32 *__restrict__ m_ptr,
                                            const u32 *__restrict__ m_idx,
                                            double *__restrict__ m_vals) {
    for (u64 t = GLOBAL_TID; t < n; t += GLOBAL_THREADS) {
        const u32 i = (u32)t;
        const u32 lo = m_ptr[i], hi = m_ptr[i + 1];
        for (u32 q = lo; q < hi; ++q) {
            m_vals[q] = 0.0;
        }
        // Row i of K^T diag(s) K: the rows q of K that hold column i, q ascending.
        for (u32 p = kt_ptr[i]; p < kt_ptr[i + 1]; ++p) {
            const u32 q = kt_idx[p];
            const double kqi = kt_vals[p];
            const double sq = __ddiv_rn(scale, a_vals[diag[q]]);
            for (u32 r = k_ptr[q]; r < k_ptr[q + 1]; ++r) {
                const u32 c = find_column(m_idx, lo, hi, k_idx[r]);
                if (c < hi) {
                    m_vals[c] = __dadd_rn(m_vals[c], __dmul_rn(__dmul_rn(kqi, k_vals[r]), sq));
                }
            }
        }
    }
}

// ssor_gram_values_warp's shared memory per warp: a chunk of the row of M at hand (its columns
// and the sums of its entries) and, for a chunk of the rows q of K the row unites, what the warp
// reads of each.
#define GRAM_VALUES_ROW 256
#define GRAM_VALUES_UNITED 64
#define GRAM_VALUES_WARPS 8
struct GramValuesWarp {
    double acc[GRAM_VALUES_ROW];
    double kqi_sq[GRAM_VALUES_UNITED][2];
    u32 col[GRAM_VALUES_ROW];
    u32 q_lo[GRAM_VALUES_UNITED];
    u32 q_hi[GRAM_VALUES_UNITED];
};

extern "C" __global__ void ssor_gram_values_warp(u32 n, const u32 *__restrict__ kt_ptr,
                                                 const u32 *__restrict__ kt_idx,
                                                 const double *__restrict__ kt_vals,
                                                 const u32 *__restrict__ k_ptr,
                                                 const u32 *__restrict__ k_idx,
                                                 const double *__restrict__ k_vals,
                                                 const double *__restrict__ a_vals,
                                                 const u32 *__restrict__ diag, double scale,
                                                 const u32 *__restrict__ m_ptr,
                                                 const u32 *__restrict__ m_idx,
                                                 double *__restrict__ m_vals) {
    __shared__ GramValuesWarp sh[GRAM_VALUES_WARPS];
    const u32 lane = threadIdx.x & 31;
    GramValuesWarp &s = sh[threadIdx.x >> 5];
    const u64 warps = GLOBAL_THREADS / 32;
    for (u64 w = GLOBAL_TID / 32; w < n; w += warps) {
        const u32 i = (u32)w;
        const u32 lo = m_ptr[i], hi = m_ptr[i + 1];
        const u32 kb = kt_ptr[i], ke = kt_ptr[i + 1];
        // The row in chunks of its entries, each chunk's sums over every row q of K (taken in
        // chunks too): an entry's sum takes its terms in ascending q whatever the chunks.
        for (u32 c0 = lo; c0 < hi; c0 += GRAM_VALUES_ROW) {
            const u32 len = hi - c0 < GRAM_VALUES_ROW ? hi - c0 : GRAM_VALUES_ROW;
            for (u32 e = lane; e < len; e += 32) {
                s.col[e] = m_idx[c0 + e];
                s.acc[e] = 0.0;
            }
            __syncwarp();
            const u32 first = s.col[0], last = s.col[len - 1];
            for (u32 q0 = kb; q0 < ke; q0 += GRAM_VALUES_UNITED) {
                const u32 united = ke - q0 < GRAM_VALUES_UNITED ? ke - q0 : GRAM_VALUES_UNITED;
                // What each row q of K brings (its range in K, K^T's value and s_q), read by
                // the lanes side by side.
                for (u32 m = lane; m < united; m += 32) {
                    const u32 q = kt_idx[q0 + m];
                    s.q_lo[m] = k_ptr[q];
                    s.q_hi[m] = k_ptr[q + 1];
                    s.kqi_sq[m][0] = kt_vals[q0 + m];
                    s.kqi_sq[m][1] = __ddiv_rn(scale, a_vals[diag[q]]);
                }
                __syncwarp();
                // The rows q ascending, one after another, their entries a lane each: the
                // columns of one row of K are distinct, so no two lanes add to one sum at once.
                for (u32 m = 0; m < united; ++m) {
                    const double kqi = s.kqi_sq[m][0], sq = s.kqi_sq[m][1];
                    for (u32 r = s.q_lo[m] + lane; r < s.q_hi[m]; r += 32) {
                        const u32 c = k_idx[r];
                        if (c < first || c > last) {
                            continue;
                        }
                        u32 a = 0, b = len;
                        while (a < b) {
                            const u32 mid = a + ((b - a) >> 1);
                            if (s.col[mid] < c) {
                                a = mid + 1;
                            } else {
                                b = mid;
                            }
                        }
                        if (a < len && s.col[a] == c) {
                            s.acc[a] =
                                __dadd_rn(s.acc[a], __dmul_rn(__dmul_rn(kqi, k_vals[r]), sq));
                        }
                    }
                    __syncwarp();
                }
            }
            for (u32 e = lane; e < len; e += 32) {
                m_vals[c0 + e] = s.acc[e];
            }
            __syncwarp();
        }
    }
}

// SSOR-AI's first-order factors built on the device from A's CSR arrays (columns ascending
// within a row, every diagonal entry stored, a symmetric pattern), so that the host neither
// forms them nor copies them over the bus. K = I - omega L D^-1 holds, in row i, the entries of
// A's row i left of the diagonal and the diagonal; K^T diag(s) (s_j = scale / a_jj, scale =
// omega (2 - omega)) holds the diagonal and the entries right of it, entry (i, j) being
// K_ji s_j with K_ji found in A's row j. Every value is the host build's expression rounded
// the same way (ssor_x, then the product), so both builds give the same bits.
//
//   ssor_k1_lengths  diag[i] = position of a_ii, len[i] = entries of row i of K; a row without
//                    a diagonal entry lowers bad[0] to its index (bad[0] starts at n); bad[2]
//                    is raised to the longest row of K^T (A's entries from the diagonal on; it
//                    starts at 0). The reduction needs every thread of the block: blockDim.x is
//                    a multiple of 32
//   ssor_k1_build    K's columns and values at k_ptr (the exclusive scan of len), and K^T S's
//                    row pointers, columns and values (row i of K^T S starts at
//                    a_ptr[i] + i - k_ptr[i]: rows before i hold every entry of A's rows before
//                    i plus one diagonal each, less those of K); an entry of K^T S whose mirror
//                    is not stored in A lowers bad[1] to its row (the pattern is not symmetric)

// Every upload's checks of A (not SSOR-AI's own), read on the device from the uploaded arrays:
// lowers *bad to the first row whose diagonal entry is not stored, or is not positive and
// finite (the host's first_bad_diagonal), and raises *norm to the bits of ||A||_inf, each row's
// |a_ij| summed in order as the host sums them (bits of non-negative doubles order as the
// values do; a NaN sum, whose bits are larger than infinity's, is skipped as f64::max skips
// it). The reduction after the loop needs every thread of the block: blockDim.x is a multiple
// of 32.
extern "C" __global__ void csr_row_checks(u32 n, const u32 *__restrict__ a_ptr,
                                          const u32 *__restrict__ a_idx,
                                          const double *__restrict__ a_vals, u32 *bad, u64 *norm) {
    u64 best = 0;
    for (u64 t = GLOBAL_TID; t < n; t += GLOBAL_THREADS) {
        const u32 i = (u32)t;
        const u32 lo = a_ptr[i], hi = a_ptr[i + 1];
        const u32 q = find_column(a_idx, lo, hi, i);
        const double d = q == hi ? 0.0 : a_vals[q];
        if (!(d > 0.0 && isfinite(d))) {
            atomicMin(bad, i);
        }
        double sum = 0.0;
        for (u32 p = lo; p < hi; ++p) {
            sum = __dadd_rn(sum, fabs(a_vals[p]));
        }
        if (!isnan(sum)) {
            const u64 bits = (u64)__double_as_longlong(sum);
            best = bits > best ? bits : best;
        }
    }
    for (int o = 16; o > 0; o >>= 1) {
        const u64 other = __shfl_xor_sync(0xffffffffu, best, o);
        best = other > best ? other : best;
    }
    if ((threadIdx.x & 31) == 0 && best != 0) {
        atomicMax(norm, best);
    }
}

extern "C" __global__ void ssor_k1_lengths(u32 n, const u32 *__restrict__ a_ptr,
                                           const u32 *__restrict__ a_idx, u32 *__restrict__ diag,
                                           u32 *__restrict__ len, u32 *bad) {
    u32 longest = 0;
    for (u64 t = GLOBAL_TID; t < n; t += GLOBAL_THREADS) {
        const u32 i = (u32)t;
        const u32 lo = a_ptr[i], hi = a_ptr[i + 1];
        const u32 q = find_column(a_idx, lo, hi, i);
        if (q == hi) {
            atomicMin(bad, i);
            diag[i] = lo;
            len[i] = 1;
        } else {
            diag[i] = q;
            len[i] = q - lo + 1;
            longest = hi - q > longest ? hi - q : longest;
        }
    }
    // One atomic per warp, and only where it raises the maximum seen so far.
    longest = warp_max_u32(longest);
    if ((threadIdx.x & 31) == 0 && longest > *(volatile u32 *)(bad + 2)) {
        atomicMax(bad + 2, longest);
    }
}

// Row i of both factors (ssor_k1_build, ssor_k1_build_warp), its entries taken by `lanes`
// threads from `lane` on (1 and 0 for a thread's row, 32 and the lane for a warp's): every
// entry's place is fixed by its position in A's row, so the lanes write apart, each entry's
// value the same expression whichever lane computes it.
__device__ __forceinline__ void ssor_k1_build_row(
    u32 n, u32 i, u32 lane, u32 lanes, const u32 *__restrict__ a_ptr,
    const u32 *__restrict__ a_idx, const double *__restrict__ a_vals,
    const u32 *__restrict__ diag, double omega, double scale, const u32 *__restrict__ k_ptr,
    u32 *__restrict__ k_idx, double *__restrict__ k_vals, u32 *__restrict__ kt_ptr,
    u32 *__restrict__ kt_idx, double *__restrict__ kt_vals, u32 *bad) {
    const u32 lo = a_ptr[i], d = diag[i], hi = a_ptr[i + 1];
    const u32 k0 = k_ptr[i];
    for (u32 p = lo + lane; p < d; p += lanes) {
        const u32 j = a_idx[p];
        const u32 q = k0 + (p - lo);
        k_idx[q] = j;
        k_vals[q] = -ssor_x(omega, a_vals, diag, p, j);
    }
    // Row i of K^T starts at lo + i - k_ptr[i]: its diagonal, then A's entries right of it.
    const u32 r0 = lo + i - k0;
    if (lane == 0) {
        const u32 q = k0 + (d - lo);
        k_idx[q] = i;
        k_vals[q] = 1.0;
        kt_ptr[i] = r0;
        if (i == n - 1) {
            kt_ptr[n] = a_ptr[n] + n - k_ptr[n];
        }
        // K_ii s_i with K_ii = 1.
        kt_idx[r0] = i;
        kt_vals[r0] = __ddiv_rn(scale, a_vals[d]);
    }
    for (u32 p = d + 1 + lane; p < hi; p += lanes) {
        const u32 j = a_idx[p];
        const u32 m = find_column(a_idx, a_ptr[j], diag[j], i);
        const u32 r = r0 + (p - d);
        kt_idx[r] = j;
        if (m == diag[j]) {
            atomicMin(bad + 1, i);
            kt_vals[r] = 0.0;
        } else {
            const double kji = -ssor_x(omega, a_vals, diag, m, i);
            kt_vals[r] = __dmul_rn(kji, __ddiv_rn(scale, a_vals[diag[j]]));
        }
    }
}

extern "C" __global__ void ssor_k1_build(u32 n, const u32 *__restrict__ a_ptr,
                                         const u32 *__restrict__ a_idx,
                                         const double *__restrict__ a_vals,
                                         const u32 *__restrict__ diag, double omega, double scale,
                                         const u32 *__restrict__ k_ptr, u32 *__restrict__ k_idx,
                                         double *__restrict__ k_vals, u32 *__restrict__ kt_ptr,
                                         u32 *__restrict__ kt_idx, double *__restrict__ kt_vals,
                                         u32 *bad) {
    for (u64 t = GLOBAL_TID; t < n; t += GLOBAL_THREADS) {
        ssor_k1_build_row(n, (u32)t, 0, 1, a_ptr, a_idx, a_vals, diag, omega, scale, k_ptr,
                          k_idx, k_vals, kt_ptr, kt_idx, kt_vals, bad);
    }
}

// ssor_k1_build a warp per row (rows of many entries: a thread's row takes its mirror
// searches one after another). blockDim.x is a multiple of 32.
extern "C" __global__ void ssor_k1_build_warp(
    u32 n, const u32 *__restrict__ a_ptr, const u32 *__restrict__ a_idx,
    const double *__restrict__ a_vals, const u32 *__restrict__ diag, double omega,
    double scale, const u32 *__restrict__ k_ptr, u32 *__restrict__ k_idx,
    double *__restrict__ k_vals, u32 *__restrict__ kt_ptr, u32 *__restrict__ kt_idx,
    double *__restrict__ kt_vals, u32 *bad) {
    const u32 lane = threadIdx.x & 31;
    for (u64 w = GLOBAL_TID >> 5; w < n; w += GLOBAL_THREADS >> 5) {
        ssor_k1_build_row(n, (u32)w, lane, 32, a_ptr, a_idx, a_vals, diag, omega, scale, k_ptr,
                          k_idx, k_vals, kt_ptr, kt_idx, kt_vals, bad);
    }
}

// The maps a value refresh of the device-built factors needs (see the value refreshes above):
//   ssor_k1_kt_sources  src[r] = the position in K of the mirror of entry r of K^T diag(s),
//                       for factors ssor_k1_build made from A (diag from ssor_k1_lengths);
//                       writes stay inside each row of K^T (kt_ptr); a row of K or K^T whose
//                       length does not match A's lowers bad[1] to its index (every position
//                       written lies inside K only when no row does)
//   ssor_k1_kt_sources_warp  the same, a warp per row (the lanes as in ssor_k1_build_row)
__device__ __forceinline__ void ssor_k1_kt_sources_row(
    u32 i, u32 lane, u32 lanes, const u32 *__restrict__ a_ptr, const u32 *__restrict__ a_idx,
    const u32 *__restrict__ diag, const u32 *__restrict__ k_ptr,
    const u32 *__restrict__ kt_ptr, u32 *__restrict__ src, u32 *bad) {
    const u32 lo = a_ptr[i], d = diag[i], hi = a_ptr[i + 1];
    const u32 r0 = kt_ptr[i];
    const u32 end = kt_ptr[i + 1];
    // Row i of K must hold A's entries left of the diagonal and the diagonal, and row i
    // of K^T the rest: then every position written below lies inside K.
    if (end - r0 != hi - d || k_ptr[i + 1] - k_ptr[i] != d - lo + 1) {
        if (lane == 0) {
            atomicMin(bad + 1, i);
        }
        return;
    }
    // K's diagonal entry of row i is the last of its row.
    if (lane == 0) {
        src[r0] = k_ptr[i] + (d - lo);
    }
    for (u32 p = d + 1 + lane; p < hi; p += lanes) {
        const u32 j = a_idx[p];
        const u32 m = find_column(a_idx, a_ptr[j], diag[j], i);
        const u32 r = r0 + (p - d);
        if (m == diag[j]) {
            atomicMin(bad + 1, i);
            src[r] = k_ptr[j];
        } else {
            src[r] = k_ptr[j] + (m - a_ptr[j]);
        }
    }
}

extern "C" __global__ void ssor_k1_kt_sources(u32 n, const u32 *__restrict__ a_ptr,
                                              const u32 *__restrict__ a_idx,
                                              const u32 *__restrict__ diag,
                                              const u32 *__restrict__ k_ptr,
                                              const u32 *__restrict__ kt_ptr,
                                              u32 *__restrict__ src, u32 *bad) {
    for (u64 t = GLOBAL_TID; t < n; t += GLOBAL_THREADS) {
        ssor_k1_kt_sources_row((u32)t, 0, 1, a_ptr, a_idx, diag, k_ptr, kt_ptr, src, bad);
    }
}

extern "C" __global__ void ssor_k1_kt_sources_warp(u32 n, const u32 *__restrict__ a_ptr,
                                                   const u32 *__restrict__ a_idx,
                                                   const u32 *__restrict__ diag,
                                                   const u32 *__restrict__ k_ptr,
                                                   const u32 *__restrict__ kt_ptr,
                                                   u32 *__restrict__ src, u32 *bad) {
    const u32 lane = threadIdx.x & 31;
    for (u64 w = GLOBAL_TID >> 5; w < n; w += GLOBAL_THREADS >> 5) {
        ssor_k1_kt_sources_row((u32)w, lane, 32, a_ptr, a_idx, diag, k_ptr, kt_ptr, src, bad);
    }
}

// The structure of the explicit product M = K^T diag(s) K of first-order SSOR-AI counted on
// the device from A's pattern (the factors' views: row i of K holds A's columns of row i up to
// the diagonal, row i of K^T diag(s) those from the diagonal on), for the choice of the form:
// row i of M is the union of the rows q of K over the columns q of row i of K^T. Nothing of M
// is stored; what the SpMV model reads of it is counted into one array, read back at once.
//
// A row whose row of K^T holds at most GRAM_MERGE entries is short, its thread's (unless the
// caller, on a matrix of few rows, also sends it to a block by the entries it gathers: see
// gram_is_long): rows are taken in tiles of blockDim.x consecutive ones (a multiple of 32), a
// tile per block at a time, and the distinct columns come out ascending from a merge of the
// rows of K it unites, their heads held in registers (the merge loops are unrolled), so that
// each column of K is loaded once and the loads of different rows of K overlap. Any other row
// is long, a block's: the long rows are listed first (ssor_k1_gram_list), then each listed
// row is taken by one block of a launch of their own over the whole device, which gathers the
// columns of the rows of K it unites into shared memory, as bits where the row's columns span
// at most GRAM_LONG_CAP words of 32, otherwise as a list of at most GRAM_LONG_CAP columns (a
// row with more is not taken) sorted (bitonic) and read in order, the first of each run of
// equal columns being the row's entry. So the long rows of a small matrix are formed side by
// side on every multiprocessor, not one after another in the few blocks its tiles fill.
//
// Every kernel below takes `prod` last (GRAM_PROD_M for this product): the same merges count
// and form second-order SSOR-AI's K = I - X + X^2 and its transpose, each a union of rows of
// the first-order factor over a row of it (see GRAM_PROD_K2, GRAM_PROD_K2T); for those, read
// "K^T" above as the rows united and "K" as the rows they name.
//
//   ssor_k1_gram_list        list[0 .. count[0]) = the long rows (gram_is_long with
//                            gather_max, which every kernel over the short rows takes too), in
//                            no particular order (count[0] starts at 0); whole warps take part
//                            in each round
//   ssor_k1_gram_count_long  the listed rows' tallies added to out (as below, their rows of
//                            the histogram and their totals but the warp slots), and each
//                            row's length raised into group[i / 32] (group starts at 0) and
//                            written to row_len[i]
//   ssor_k1_gram_count       the short rows' tallies added to out, and the warp slots of every
//                            warp of 32 consecutive rows, the long rows' lengths read from
//                            group: out = [128-byte lines of x read (16 columns each, counted
//                            along the ascending columns), sum of |i - j|, 32 x the longest
//                            row of each warp, rows storing their diagonal, flags,
//                            hist[GRAM_HIST], diagonal bitmap]: hist[l] = rows of length l;
//                            bit j + n - 1 - i of the bitmap marks the diagonal of entry
//                            (i, j); flags |= 1 for a row whose rows of K hold more than
//                            GRAM_LONG_CAP entries together over a span of more than
//                            GRAM_LONG_CAP words of 32 columns, 2 for a row of M of GRAM_HIST
//                            entries or more (counted but for its bin: the caller bins it
//                            from row_len), 4 for a row without its diagonal entry (such
//                            rows are skipped: the counts are then incomplete) (diag from
//                            ssor_k1_lengths); launched after the two above; each short row's
//                            length written to row_len[i] (a row not counted, flagged, is
//                            left unwritten), so that the explicit product's build can take
//                            the lengths instead of counting them again
#define GRAM_MERGE 16
#define GRAM_LONG_CAP 4096
#define GRAM_BLOCK_MAX 1024
#define GRAM_HIST 1024
#define GRAM_LINE_COLS 16
#define GRAM_HEAD 5
#define GRAM_DONE 0xffffffffu

// Which product of A's pattern the merges below form (the kernels' `prod`). Row i unites rows
// q of a factor, each taken over a part of A's row q (A's pattern symmetric, every diagonal
// entry stored):
//   GRAM_PROD_M    first order's explicit product K^T diag(s) K: q over row i of K^T (A's row
//                  i from its diagonal on), each row q of K (A's row q up to its diagonal)
//   GRAM_PROD_K2   second order's K = I - X + X^2 (lower triangular): q over row i of the
//                  first-order K (A's row i up to its diagonal), each row q of it, the union
//                  being X's row i, X^2's and the diagonal
//   GRAM_PROD_K2T  its transpose (upper triangular): q over row i of the first-order K^T,
//                  each row q of it (entry (i, j) of K^T is in it when some q has (q, i) and
//                  (j, q) in K, that is (i, q) and (q, j) in A's upper triangle)
#define GRAM_PROD_M 0u
#define GRAM_PROD_K2 1u
#define GRAM_PROD_K2T 2u

// The positions [lo, hi) in A's row i of the rows q that row i unites.
__device__ __forceinline__ void gram_united(u32 prod, const u32 *a_ptr, const u32 *diag, u32 i,
                                            u32 &lo, u32 &hi) {
    if (prod == GRAM_PROD_K2) {
        lo = a_ptr[i];
        hi = diag[i] + 1;
    } else {
        lo = diag[i];
        hi = a_ptr[i + 1];
    }
}

// The positions [lo, hi) in A's row q of the part of row q that is united.
__device__ __forceinline__ void gram_part(u32 prod, const u32 *a_ptr, const u32 *diag, u32 q,
                                          u32 &lo, u32 &hi) {
    if (prod == GRAM_PROD_K2T) {
        lo = diag[q];
        hi = a_ptr[q + 1];
    } else {
        lo = a_ptr[q];
        hi = diag[q] + 1;
    }
}

// Whether diag[i] is the position of a_ii (ssor_k1_lengths points a row without one at its
// start, which may be past the last entry).
__device__ __forceinline__ bool gram_has_diagonal(const u32 *a_ptr, const u32 *a_idx,
                                                  const u32 *diag, u32 i) {
    const u32 d = diag[i];
    return d < a_ptr[i + 1] && a_idx[d] == i;
}

// Whether row i is long, a block's (see above): it stores its diagonal and its row of K^T is
// longer than the registers' merge takes, or the rows of K it unites hold more than
// gather_max entries together, at most GRAM_LONG_CAP (GRAM_DONE: no such limit; a row that a
// block cannot gather stays its thread's). A thread's merge takes a step per
// entry of the row of M, each waiting for the load of the one before: on a matrix of few rows
// the thread with the longest merge is the kernel's time, where a block's gather and sort
// takes its row in fewer, wider steps.
__device__ __forceinline__ bool gram_is_long(const u32 *a_ptr, const u32 *a_idx,
                                             const u32 *diag, u32 i, u32 gather_max, u32 prod) {
    if (!gram_has_diagonal(a_ptr, a_idx, diag, i)) {
        return false;
    }
    u32 d, hi;
    gram_united(prod, a_ptr, diag, i, d, hi);
    const u32 k = hi - d;
    if (k > GRAM_MERGE) {
        return true;
    }
    if (gather_max == GRAM_DONE) {
        return false;
    }
    u64 gathered = 0;
    for (u32 m = 0; m < k; ++m) {
        const u32 q = a_idx[d + m];
        // A row q without its diagonal is refused by the merge that reads it.
        if (gram_has_diagonal(a_ptr, a_idx, diag, q)) {
            u32 lo, end;
            gram_part(prod, a_ptr, diag, q, lo, end);
            gathered += end - lo;
        }
    }
    return gathered > gather_max && gathered <= GRAM_LONG_CAP;
}

// Tallies column c of row i, the columns of a row coming ascending: a new 128-byte line of x
// (GRAM_LINE_COLS columns) when new_line (c's line differs from the previous column's, or c
// is the row's first), |i - c|, whether c is the diagonal, and c's diagonal in the bitmap
// (bit c + n - 1 - i, shift = n - 1 - i), tested before it is set: most are seen again and
// again.
__device__ __forceinline__ void tally_entry(u32 c, bool new_line, u32 i, u64 shift,
                                            u64 *diagonals, u64 &lines, u64 &dist,
                                            u64 &stored) {
    lines += new_line;
    dist += c > i ? (u64)(c - i) : (u64)(i - c);
    stored += c == i;
    const u64 bit = (u64)c + shift;
    const u64 mask = 1ull << (bit & 63);
    if ((diagonals[bit >> 6] & mask) == 0) {
        atomicOr(diagonals + (bit >> 6), mask);
    }
}

// tally_entry along a row's ascending columns, one at a time: last_line is the previous
// column's line (GRAM_DONE before the row's first).
__device__ __forceinline__ void tally_column(u32 c, u32 i, u64 shift, u64 *diagonals,
                                             u32 &last_line, u64 &lines, u64 &dist,
                                             u64 &stored) {
    const u32 line = c / GRAM_LINE_COLS;
    tally_entry(c, line != last_line, i, shift, diagonals, lines, dist, stored);
    last_line = line;
}

// A block's tallies of one counted section: zeroed by every thread of the block at the start
// (clear_section), then, once every thread has its own totals, added to the section at out
// (flush_section: the GRAM_HEAD totals, the flags or-ed, and the histogram). Every thread of
// the block calls both: they synchronize it.
__device__ __forceinline__ void clear_section(u32 *sh_hist, u64 *sh_totals) {
    for (u32 t = threadIdx.x; t < GRAM_HIST; t += blockDim.x) {
        sh_hist[t] = 0;
    }
    if (threadIdx.x < GRAM_HEAD) {
        sh_totals[threadIdx.x] = 0;
    }
    __syncthreads();
}

__device__ __forceinline__ void flush_section(const u32 *sh_hist, u64 *sh_totals, u64 *out,
                                              u64 lines, u64 dist, u64 slots, u64 stored,
                                              u64 flags) {
    atomicAdd(sh_totals + 0, lines);
    atomicAdd(sh_totals + 1, dist);
    atomicAdd(sh_totals + 2, slots);
    atomicAdd(sh_totals + 3, stored);
    if (flags != 0) {
        atomicOr(sh_totals + 4, flags);
    }
    __syncthreads();
    for (u32 t = threadIdx.x; t < GRAM_HIST; t += blockDim.x) {
        if (sh_hist[t] != 0) {
            atomicAdd(out + GRAM_HEAD + t, (u64)sh_hist[t]);
        }
    }
    if (threadIdx.x < 4 && sh_totals[threadIdx.x] != 0) {
        atomicAdd(out + threadIdx.x, sh_totals[threadIdx.x]);
    }
    if (threadIdx.x == 4 && sh_totals[4] != 0) {
        atomicOr(out + 4, sh_totals[4]);
    }
}

// A block's diagonal bitmap: where the bitmap of a section (words words, covering bits below
// 2n - 1) fits in GRAM_DIAG_SHARED words, the block tallies into its own copy in shared memory
// (cleared here; the caller's clear_section synchronizes before any use) and or-s the words it
// set into the section once (diag_bits_close), instead of testing and setting every entry's
// bit in the section itself, a few words that every multiprocessor's entries would wait on;
// otherwise the section's own words. Returns the bitmap to tally into.
#define GRAM_DIAG_SHARED 512
__device__ __forceinline__ u64 gram_diag_words(u32 n) {
    return (2 * (u64)n - 1 + 63) / 64;
}

__device__ __forceinline__ u64 *diag_bits_open(u64 *section_bits, u64 words, u64 *sh) {
    if (words > GRAM_DIAG_SHARED) {
        return section_bits;
    }
    for (u64 t = threadIdx.x; t < words; t += blockDim.x) {
        sh[t] = 0;
    }
    return sh;
}

// The block's bits or-ed into the section (every thread of the block calls it, once its rows
// are tallied: it synchronizes the block first).
__device__ __forceinline__ void diag_bits_close(u64 *section_bits, u64 words, const u64 *sh) {
    if (words > GRAM_DIAG_SHARED) {
        return;
    }
    __syncthreads();
    for (u64 t = threadIdx.x; t < words; t += blockDim.x) {
        const u64 b = sh[t];
        if (b != 0 && (section_bits[t] & b) != b) {
            atomicOr(section_bits + t, b);
        }
    }
}

// The columns of row i of M = K^T diag(s) K, ascending and distinct, each handed to
// emit(position in the row, column): the merge of the (at most GRAM_MERGE) rows q of K that
// row i of K^T names, their heads held in registers (the loops are unrolled), so that each
// column of K is loaded once and the loads of different rows overlap. Returns false, emitting
// nothing, for a row it does not merge: flags |= 4 for a row (i's or a q's) without its
// diagonal entry, 1 for a row of K^T longer than GRAM_MERGE (the block's: gram_is_long). len
// is the row's length.
template <typename Emit>
__device__ __forceinline__ bool gram_row(const u32 *__restrict__ a_ptr,
                                         const u32 *__restrict__ a_idx,
                                         const u32 *__restrict__ diag, u32 i, u32 prod,
                                         u64 &flags, u32 &len, Emit emit) {
    bool ok = gram_has_diagonal(a_ptr, a_idx, diag, i);
    u32 d = 0, united_end = 0;
    if (ok) {
        gram_united(prod, a_ptr, diag, i, d, united_end);
    }
    const u32 k = united_end - d;
    // pos[m], end[m]: what is left of the m-th row of K; head[m] its next column (GRAM_DONE
    // once it is used up, or for m >= k).
    u32 pos[GRAM_MERGE], end[GRAM_MERGE], head[GRAM_MERGE];
    if (!ok) {
        flags |= 4;
    } else if (k > GRAM_MERGE) {
        flags |= 1;
        ok = false;
    }
#pragma unroll
    for (u32 m = 0; m < GRAM_MERGE; ++m) {
        head[m] = GRAM_DONE;
        pos[m] = 0;
        end[m] = 0;
        if (ok && m < k) {
            const u32 q = a_idx[d + m];
            if (gram_has_diagonal(a_ptr, a_idx, diag, q)) {
                gram_part(prod, a_ptr, diag, q, pos[m], end[m]);
                head[m] = a_idx[pos[m]];
            } else {
                flags |= 4;
                ok = false;
            }
        }
    }
    len = 0;
    if (!ok) {
        return false;
    }
    for (;;) {
        u32 c = GRAM_DONE;
#pragma unroll
        for (u32 m = 0; m < GRAM_MERGE; ++m) {
            c = head[m] < c ? head[m] : c;
        }
        if (c == GRAM_DONE) {
            break;
        }
#pragma unroll
        for (u32 m = 0; m < GRAM_MERGE; ++m) {
            if (head[m] == c) {
                ++pos[m];
                head[m] = pos[m] < end[m] ? a_idx[pos[m]] : GRAM_DONE;
            }
        }
        emit(len, c);
        ++len;
    }
    return true;
}

// A block's shared memory for a long row: the columns gathered for it, or its bitmap, and
// what the gather found.
struct GramLong {
    u32 buf[GRAM_LONG_CAP];
    u32 count;
    u32 why;
    u32 lowest;
    u32 highest;
    u32 warp_sums[GRAM_BLOCK_MAX / 32];
};

// How gram_long_gather holds a long row: bitmap != 0: as bits of s->buf, bit c - base of the
// row's columns c (base a multiple of 32, so that every 16-bit half of a word is one 128-byte
// line of x), in `words` words; otherwise its `gathered` columns sorted in s->buf.
struct GramLongRow {
    u32 gathered;
    u32 base;
    u32 words;
    bool bitmap;
};

// Row i of M (gram_is_long) taken in by the whole block. A first pass over the rows q of K that
// row i of K^T names (a thread per row) adds up their lengths and finds their smallest column;
// their largest is row i's last column of K^T (each row q of K ends at its diagonal q). Where
// the columns between fit in GRAM_LONG_CAP words of bits, the rows' columns are set in a
// bitmap (a warp per row of K), however many they are; otherwise they are gathered into s->buf
// and sorted ascending (bitonic, padded with GRAM_DONE to a power of two). The row is refused
// (gathered 0) with why = 4 when a row q stores no diagonal entry, or 1 when its columns span
// more than the bitmap and the rows hold more than GRAM_LONG_CAP columns together. Every
// thread of the block calls it and gets the same row: it synchronizes the block, first of all
// so that the previous row's readers are done with s->buf.
__device__ __forceinline__ GramLongRow gram_long_gather(const u32 *__restrict__ a_ptr,
                                                        const u32 *__restrict__ a_idx,
                                                        const u32 *__restrict__ diag, u32 i,
                                                        u32 prod, GramLong *s, u32 &why) {
    __syncthreads();
    if (threadIdx.x == 0) {
        s->count = 0;
        s->why = 0;
        s->lowest = GRAM_DONE;
        s->highest = 0;
    }
    __syncthreads();
    u32 d, united_end;
    gram_united(prod, a_ptr, diag, i, d, united_end);
    const u32 k = united_end - d;
    for (u32 m = threadIdx.x; m < k; m += blockDim.x) {
        const u32 q = a_idx[d + m];
        if (!gram_has_diagonal(a_ptr, a_idx, diag, q)) {
            atomicOr(&s->why, 4u);
            continue;
        }
        u32 lo, hi;
        gram_part(prod, a_ptr, diag, q, lo, hi);
        // count sums lengths of rows of A: below 2^32 (the caller checked nnz).
        atomicAdd(&s->count, hi - lo);
        atomicMin(&s->lowest, a_idx[lo]);
        atomicMax(&s->highest, a_idx[hi - 1]);
    }
    __syncthreads();
    GramLongRow row = {0, 0, 0, false};
    const u32 total = s->count;
    // The span of the row's columns in words of 32 (lowest <= highest once any row q is read:
    // a refused row's are not used).
    const u32 base = s->lowest & ~31u;
    const u32 words = s->highest >= base ? ((s->highest - base) >> 5) + 1 : 0;
    const bool as_bits = words <= GRAM_LONG_CAP;
    why = s->why | (!as_bits && total > GRAM_LONG_CAP ? 1u : 0u);
    if (why != 0) {
        return row;
    }
    row.gathered = total;
    const u32 lane = threadIdx.x & 31, warps = blockDim.x >> 5;
    row.base = base;
    if (as_bits) {
        row.bitmap = true;
        row.words = words;
        for (u32 t = threadIdx.x; t < words; t += blockDim.x) {
            s->buf[t] = 0;
        }
        __syncthreads();
        for (u32 m = threadIdx.x >> 5; m < k; m += warps) {
            const u32 q = a_idx[d + m];
            u32 lo, hi;
            gram_part(prod, a_ptr, diag, q, lo, hi);
            const u32 len = hi - lo;
            for (u32 l = lane; l < len; l += 32) {
                const u32 b = a_idx[lo + l] - row.base;
                atomicOr(s->buf + (b >> 5), 1u << (b & 31));
            }
        }
        __syncthreads();
        return row;
    }
    // The gather's places: count again from 0 (every thread read it above, before the
    // barrier after which thread 0 clears it).
    __syncthreads();
    if (threadIdx.x == 0) {
        s->count = 0;
    }
    __syncthreads();
    for (u32 m = threadIdx.x >> 5; m < k; m += warps) {
        const u32 q = a_idx[d + m];
        u32 lo, hi;
        gram_part(prod, a_ptr, diag, q, lo, hi);
        const u32 len = hi - lo;
        u32 at = 0;
        if (lane == 0) {
            at = atomicAdd(&s->count, len);
        }
        at = __shfl_sync(0xffffffffu, at, 0);
        for (u32 l = lane; l < len; l += 32) {
            s->buf[at + l] = a_idx[lo + l];
        }
    }
    __syncthreads();
    u32 p = 2;
    while (p < total) {
        p <<= 1;
    }
    for (u32 t = total + threadIdx.x; t < p; t += blockDim.x) {
        s->buf[t] = GRAM_DONE;
    }
    __syncthreads();
    const u32 half = p >> 1;
    for (u32 size = 2; size <= p; size <<= 1) {
        for (u32 stride = size >> 1; stride > 0; stride >>= 1) {
            for (u32 h = threadIdx.x; h < half; h += blockDim.x) {
                // The h-th pair of this pass: lo and lo + stride.
                const u32 lo = 2 * h - (h & (stride - 1));
                const u32 hi = lo + stride;
                const u32 x = s->buf[lo], y = s->buf[hi];
                if ((x > y) == ((lo & size) == 0)) {
                    s->buf[lo] = y;
                    s->buf[hi] = x;
                }
            }
            __syncthreads();
        }
    }
    return row;
}

// The exclusive prefix sum of v over the block's threads, in thread order, and (total) the sum
// of all; warp_sums holds a word per warp. Every thread of the block calls it: it
// synchronizes the block, before it returns too, so that warp_sums may be used again.
__device__ __forceinline__ u32 block_exclusive_sum(u32 v, u32 *warp_sums, u32 &total) {
    const u32 lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    u32 x = v;
    for (u32 o = 1; o < 32; o <<= 1) {
        const u32 y = __shfl_up_sync(0xffffffffu, x, o);
        if (lane >= o) {
            x += y;
        }
    }
    if (lane == 31) {
        warp_sums[warp] = x;
    }
    __syncthreads();
    u32 before = 0, all = 0;
    for (u32 w = 0; w < (blockDim.x >> 5); ++w) {
        const u32 sum = warp_sums[w];
        before += w < warp ? sum : 0;
        all += sum;
    }
    __syncthreads();
    total = all;
    return before + x - v;
}

// The entries of a long row held as bits (gram_long_gather's bitmap), each thread taking its
// run of consecutive words: on_word(w, bits, before) for each of its words w with bits set,
// before = the row's entries ahead of the word; returns the row's length, the same in every
// thread (every thread of the block calls it: it synchronizes the block).
template <typename Word>
__device__ __forceinline__ u32 gram_long_bits(GramLong *s, const GramLongRow &row,
                                              Word on_word) {
    const u32 per = (row.words + blockDim.x - 1) / blockDim.x;
    const u32 w0 = min(threadIdx.x * per, row.words), w1 = min(w0 + per, row.words);
    u32 mine = 0;
    for (u32 w = w0; w < w1; ++w) {
        mine += __popc(s->buf[w]);
    }
    u32 len = 0;
    u32 before = block_exclusive_sum(mine, s->warp_sums, len);
    for (u32 w = w0; w < w1; ++w) {
        const u32 bits = s->buf[w];
        if (bits != 0) {
            on_word(w, bits, before);
            before += __popc(bits);
        }
    }
    return len;
}

// Whether position t of the sorted s->buf (total columns) starts a run of equal columns: an
// entry of the row.
__device__ __forceinline__ bool gram_long_first(const GramLong *s, u32 t, u32 total) {
    return t < total && (t == 0 || s->buf[t - 1] != s->buf[t]);
}

// The short rows in tiles of blockDim.x consecutive rows, a tile per block at a time:
// on_short(i) in the thread of each short row of the tile, then on_end(tile) in every thread of
// the block (a long row's thread and one past n call only on_end). Every thread of the block
// takes part in every tile (the loop bound is the block's), so on_end may reduce over a warp.
template <typename Short, typename End>
__device__ __forceinline__ void gram_short_tiles(u32 n, const u32 *__restrict__ a_ptr,
                                                 const u32 *__restrict__ a_idx,
                                                 const u32 *__restrict__ diag, u32 gather_max,
                                                 u32 prod, Short on_short, End on_end) {
    for (u64 tile = (u64)blockIdx.x * blockDim.x; tile < n; tile += GLOBAL_THREADS) {
        const u64 t = tile + threadIdx.x;
        if (t < n && !gram_is_long(a_ptr, a_idx, diag, (u32)t, gather_max, prod)) {
            on_short((u32)t);
        }
        on_end(tile);
    }
}

// The listed long rows (ssor_k1_gram_list's list, count[0] of them), a row per block at a time:
// on_long(i, row, why) in every thread of the block for row i, held in s->buf as
// gram_long_gather's row says (and why as it finds it). Every thread of the block takes part in
// every row (the loop bound is the block's), so on_long may synchronize the block.
template <typename Long>
__device__ __forceinline__ void gram_listed(const u32 *__restrict__ list, const u32 *count,
                                            const u32 *__restrict__ a_ptr,
                                            const u32 *__restrict__ a_idx,
                                            const u32 *__restrict__ diag, u32 prod, GramLong *s,
                                            Long on_long) {
    const u64 listed = *count;
    for (u64 r = blockIdx.x; r < listed; r += gridDim.x) {
        const u32 i = list[r];
        u32 why = 0;
        const GramLongRow row = gram_long_gather(a_ptr, a_idx, diag, i, prod, s, why);
        on_long(i, row, why);
    }
}

extern "C" __global__ void ssor_k1_gram_list(u32 n, const u32 *__restrict__ a_ptr,
                                             const u32 *__restrict__ a_idx,
                                             const u32 *__restrict__ diag, u32 gather_max,
                                             u32 *__restrict__ list, u32 *count, u32 prod) {
    const u32 lane = threadIdx.x & 31;
    for (u64 base = (u64)blockIdx.x * blockDim.x; base < n; base += GLOBAL_THREADS) {
        const u64 t = base + threadIdx.x;
        const bool is_long = t < n && gram_is_long(a_ptr, a_idx, diag, (u32)t, gather_max, prod);
        // One atomic per warp: the warp's long rows take consecutive places.
        const u32 ballot = __ballot_sync(0xffffffffu, is_long);
        u32 at = 0;
        if (lane == 0 && ballot != 0) {
            at = atomicAdd(count, (u32)__popc(ballot));
        }
        at = __shfl_sync(0xffffffffu, at, 0);
        if (is_long) {
            list[at + __popc(ballot & ((1u << lane) - 1))] = (u32)t;
        }
    }
}

// The entries of a long row (gram_long_gather's sorted columns in s->buf) in chunks of the block's
// threads: on_chunk(at, first, before) in every thread, for position at, whether it starts a
// run of equal columns (an entry of the row), and the entries of the chunks before; returns
// the row's length, the same in every thread.
template <typename Chunk>
__device__ __forceinline__ u32 gram_long_entries(const GramLong *s, u32 gathered,
                                                 Chunk on_chunk) {
    u32 len = 0;
    for (u32 b = 0; b < gathered; b += blockDim.x) {
        const u32 at = b + threadIdx.x;
        const bool first = gram_long_first(s, at, gathered);
        on_chunk(at, first, len);
        len += (u32)__syncthreads_count(first);
    }
    return len;
}

// A row of length l counted into a block's histogram (flags |= 2 past it).
__device__ __forceinline__ void gram_counted(u32 l, u32 *sh_hist, u64 &flags) {
    if (l < GRAM_HIST) {
        atomicAdd(sh_hist + l, 1u);
    } else {
        flags |= 2;
    }
}

extern "C" __global__ void ssor_k1_gram_count_long(u32 n, const u32 *__restrict__ list,
                                                   const u32 *count,
                                                   const u32 *__restrict__ a_ptr,
                                                   const u32 *__restrict__ a_idx,
                                                   const u32 *__restrict__ diag, u64 *out,
                                                   u32 *group, u32 *__restrict__ row_len,
                                                   u32 prod) {
    __shared__ u32 sh_hist[GRAM_HIST];
    __shared__ u64 sh_totals[GRAM_HEAD];
    __shared__ GramLong s;
    __shared__ u64 sh_diag[GRAM_DIAG_SHARED];
    const u64 words = gram_diag_words(n);
    u64 *diagonals = diag_bits_open(out + GRAM_HEAD + GRAM_HIST, words, sh_diag);
    clear_section(sh_hist, sh_totals);
    u64 lines = 0, dist = 0, stored = 0, flags = 0;
    gram_listed(list, count, a_ptr, a_idx, diag, prod, &s, [&](u32 i, const GramLongRow &row, u32 why) {
        flags |= why;
        const u64 shift = (u64)n - 1 - i;
        u32 l = 0;
        if (row.bitmap) {
            // A line of x is a half of a word (the bitmap starts on a multiple of 32).
            l = gram_long_bits(&s, row, [&](u32 w, u32 bits, u32) {
                lines += (u64)((bits & 0xffffu) != 0) + (u64)((bits >> 16) != 0);
                for (u32 b = bits; b != 0; b &= b - 1) {
                    const u32 c = row.base + 32 * w + (u32)(__ffs(b) - 1);
                    tally_entry(c, false, i, shift, diagonals, lines, dist, stored);
                }
            });
        } else {
            const u32 gathered = row.gathered;
            l = gram_long_entries(&s, gathered, [&](u32 at, bool first, u32) {
                if (first) {
                    const u32 c = s.buf[at];
                    const bool new_line =
                        at == 0 || s.buf[at - 1] / GRAM_LINE_COLS != c / GRAM_LINE_COLS;
                    tally_entry(c, new_line, i, shift, diagonals, lines, dist, stored);
                }
            });
        }
        if (why == 0 && threadIdx.x == 0) {
            gram_counted(l, sh_hist, flags);
            atomicMax(group + i / 32, l);
            row_len[i] = l;
        }
    });
    __syncthreads();
    flush_section(sh_hist, sh_totals, out, lines, dist, 0, stored, flags);
    diag_bits_close(out + GRAM_HEAD + GRAM_HIST, words, sh_diag);
}

extern "C" __global__ void ssor_k1_gram_count(u32 n, const u32 *__restrict__ a_ptr,
                                              const u32 *__restrict__ a_idx,
                                              const u32 *__restrict__ diag, u32 gather_max,
                                              const u32 *__restrict__ group, u64 *out,
                                              u32 *__restrict__ row_len, u32 prod) {
    __shared__ u32 sh_hist[GRAM_HIST];
    __shared__ u64 sh_totals[GRAM_HEAD];
    __shared__ u64 sh_diag[GRAM_DIAG_SHARED];
    const u64 words = gram_diag_words(n);
    u64 *diagonals = diag_bits_open(out + GRAM_HEAD + GRAM_HIST, words, sh_diag);
    clear_section(sh_hist, sh_totals);
    u64 lines = 0, dist = 0, slots = 0, stored = 0, flags = 0;
    // The length of the calling thread's row in the tile at hand (0 past n, for a long row,
    // or when the row is not counted), for the warp's longest row.
    u32 len = 0;
    gram_short_tiles(
        n, a_ptr, a_idx, diag, gather_max, prod,
        [&](u32 i) {
            const u64 shift = (u64)n - 1 - i;
            u32 last_line = GRAM_DONE, l = 0;
            if (gram_row(a_ptr, a_idx, diag, i, prod, flags, l, [&](u32, u32 c) {
                    tally_column(c, i, shift, diagonals, last_line, lines, dist, stored);
                })) {
                len = l;
                row_len[i] = l;
                gram_counted(l, sh_hist, flags);
            }
        },
        [&](u64 tile) {
            const u32 longest = warp_max_u32(len);
            const u64 first = tile + (threadIdx.x & ~31u);
            if ((threadIdx.x & 31) == 0 && first < n) {
                // The warp's long rows, formed by ssor_k1_gram_count_long.
                const u32 l = group[first / 32];
                slots += 32ull * (longest > l ? longest : l);
            }
            len = 0;
        });
    __syncthreads();
    flush_section(sh_hist, sh_totals, out, lines, dist, slots, stored, flags);
    diag_bits_close(out + GRAM_HEAD + GRAM_HIST, words, sh_diag);
}

// The pattern of the explicit product M = K^T diag(s) K of first-order SSOR-AI formed on the
// device from A's pattern, the rows the count above forms (diag from ssor_k1_lengths; short and
// long rows as there, the long ones listed by ssor_k1_gram_list), in launches around a scan of
// the lengths (its values are then ssor_gram_values'):
//
//   ssor_k1_gram_lengths       len[i] = the length of short row i of M; the lengths' 64-bit
//                              sum added to total[0]; a row the device does not form (see
//                              gram_row) lowers bad[0] to its index (bad[0] starts at n).
//                              Whole warps take part in the sum: blockDim.x is a multiple of 32.
//   ssor_k1_gram_lengths_long  the same for the listed long rows (see gram_long_gather)
//   ssor_k1_gram_fill          short row i's columns written to m_idx[m_ptr[i] ..], m_ptr the
//                              exclusive scan of len (from the lengths launches, or the
//                              count's row_len); none past m_ptr[i + 1]: a row whose merge
//                              finds another length, or that is not formed, lowers bad[0] to
//                              its index (bad[0] starts at n), and the pattern is then not
//                              the product's
//   ssor_k1_gram_fill_long     the same for the listed long rows
extern "C" __global__ void ssor_k1_gram_lengths(u32 n, const u32 *__restrict__ a_ptr,
                                                const u32 *__restrict__ a_idx,
                                                const u32 *__restrict__ diag, u32 gather_max,
                                                u32 *__restrict__ len, u64 *total, u32 *bad,
                                                u32 prod) {
    u64 sum = 0;
    gram_short_tiles(
        n, a_ptr, a_idx, diag, gather_max, prod,
        [&](u32 i) {
            u64 flags = 0;
            u32 l = 0;
            if (!gram_row(a_ptr, a_idx, diag, i, prod, flags, l, [](u32, u32) {})) {
                atomicMin(bad, i);
            }
            len[i] = l;
            sum += l;
        },
        [](u64) {});
    for (int o = 16; o > 0; o >>= 1) {
        sum += __shfl_xor_sync(0xffffffffu, sum, o);
    }
    if ((threadIdx.x & 31) == 0 && sum != 0) {
        atomicAdd(total, sum);
    }
}

extern "C" __global__ void ssor_k1_gram_lengths_long(const u32 *__restrict__ list,
                                                     const u32 *count,
                                                     const u32 *__restrict__ a_ptr,
                                                     const u32 *__restrict__ a_idx,
                                                     const u32 *__restrict__ diag,
                                                     u32 *__restrict__ len, u64 *total,
                                                     u32 *bad, u32 prod) {
    __shared__ GramLong s;
    gram_listed(list, count, a_ptr, a_idx, diag, prod, &s, [&](u32 i, const GramLongRow &row, u32 why) {
        const u32 l = row.bitmap ? gram_long_bits(&s, row, [](u32, u32, u32) {})
                                 : gram_long_entries(&s, row.gathered, [](u32, bool, u32) {});
        if (threadIdx.x == 0) {
            if (why != 0) {
                atomicMin(bad, i);
            }
            len[i] = l;
            if (l != 0) {
                atomicAdd(total, (u64)l);
            }
        }
    });
}

extern "C" __global__ void ssor_k1_gram_fill(u32 n, const u32 *__restrict__ a_ptr,
                                             const u32 *__restrict__ a_idx,
                                             const u32 *__restrict__ diag, u32 gather_max,
                                             const u32 *__restrict__ m_ptr,
                                             u32 *__restrict__ m_idx, u32 *bad, u32 prod) {
    gram_short_tiles(
        n, a_ptr, a_idx, diag, gather_max, prod,
        [&](u32 i) {
            u32 *row = m_idx + m_ptr[i];
            const u32 cap = m_ptr[i + 1] - m_ptr[i];
            u64 flags = 0;
            u32 l = 0;
            const bool ok = gram_row(a_ptr, a_idx, diag, i, prod, flags, l, [&](u32 at, u32 c) {
                if (at < cap) {
                    row[at] = c;
                }
            });
            if (!ok || l != cap) {
                atomicMin(bad, i);
            }
        },
        [](u64) {});
}

extern "C" __global__ void ssor_k1_gram_fill_long(const u32 *__restrict__ list,
                                                  const u32 *count,
                                                  const u32 *__restrict__ a_ptr,
                                                  const u32 *__restrict__ a_idx,
                                                  const u32 *__restrict__ diag,
                                                  const u32 *__restrict__ m_ptr,
                                                  u32 *__restrict__ m_idx, u32 *bad,
                                                  u32 prod) {
    __shared__ GramLong s;
    const u32 lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    gram_listed(list, count, a_ptr, a_idx, diag, prod, &s, [&](u32 i, const GramLongRow &held, u32 why) {
        u32 *row = m_idx + m_ptr[i];
        const u32 cap = m_ptr[i + 1] - m_ptr[i];
        if (held.bitmap) {
            const u32 l = gram_long_bits(&s, held, [&](u32 w, u32 bits, u32 before) {
                for (u32 b = bits; b != 0; b &= b - 1) {
                    if (before < cap) {
                        row[before] = held.base + 32 * w + (u32)(__ffs(b) - 1);
                    }
                    ++before;
                }
            });
            if (threadIdx.x == 0 && (why != 0 || l != cap)) {
                atomicMin(bad, i);
            }
            return;
        }
        const u32 l = gram_long_entries(&s, held.gathered, [&](u32 at, bool first, u32 written) {
            // The entry's place: the entries before it in the chunks before (written), in the
            // warps before (their counts in warp_sums), then in its warp.
            const u32 ballot = __ballot_sync(0xffffffffu, first);
            if (lane == 0) {
                s.warp_sums[warp] = __popc(ballot);
            }
            __syncthreads();
            u32 before = written;
            for (u32 w = 0; w < warp; ++w) {
                before += s.warp_sums[w];
            }
            const u32 place = before + __popc(ballot & ((1u << lane) - 1));
            if (first && place < cap) {
                row[place] = s.buf[at];
            }
            // The count's barrier after this chunk keeps the next chunk's warp_sums from
            // overwriting these before every thread has read them.
        });
        if (threadIdx.x == 0 && (why != 0 || l != cap)) {
            atomicMin(bad, i);
        }
    });
}

// Second-order SSOR-AI's factors on the device take their patterns from the launches above
// (prod GRAM_PROD_K2 for K, GRAM_PROD_K2T for K^T), K's values from ssor_k2_values and K^T
// diag(s)'s from gather_scaled_values, through the map this kernel finds:
//
//   ssor_kt_sources_search  src[p] = the position in K of the mirror of entry p of K^T (entry
//                           (i, j) of K^T: column i searched in row j of K), a thread per row
//                           of K^T; an entry whose mirror K does not hold lowers bad[0] to its
//                           row (bad[0] starts at n) and its source is left 0. With as many
//                           entries in K as in K^T and none flagged, K^T is K's transpose.
// Row i of ssor_kt_sources_search's map, its entries from kt_ptr[i] + first in steps of step
// (a thread: 0 and 1; a warp's lane: lane and 32).
__device__ __forceinline__ void kt_sources_row(u32 i, u32 first, u32 step,
                                               const u32 *__restrict__ kt_ptr,
                                               const u32 *__restrict__ kt_idx,
                                               const u32 *__restrict__ k_ptr,
                                               const u32 *__restrict__ k_idx,
                                               u32 *__restrict__ src, u32 *bad) {
    const u32 end = kt_ptr[i + 1];
    for (u32 p = kt_ptr[i] + first; p < end; p += step) {
        const u32 j = kt_idx[p];
        const u32 hi = k_ptr[j + 1];
        const u32 q = find_column(k_idx, k_ptr[j], hi, i);
        if (q < hi) {
            src[p] = q;
        } else {
            src[p] = 0;
            atomicMin(bad, i);
        }
    }
}

extern "C" __global__ void ssor_kt_sources_search(u32 n, const u32 *__restrict__ kt_ptr,
                                                  const u32 *__restrict__ kt_idx,
                                                  const u32 *__restrict__ k_ptr,
                                                  const u32 *__restrict__ k_idx,
                                                  u32 *__restrict__ src, u32 *bad) {
    for (u64 t = GLOBAL_TID; t < n; t += GLOBAL_THREADS) {
        kt_sources_row((u32)t, 0, 1, kt_ptr, kt_idx, k_ptr, k_idx, src, bad);
    }
}

// ssor_kt_sources_search_warp: the same map a warp per row of K^T, a lane per entry (rows of
// many entries, whose thread would search for their mirrors one after another). Every lane of
// a warp takes part in every row: blockDim.x is a multiple of 32.
extern "C" __global__ void ssor_kt_sources_search_warp(u32 n, const u32 *__restrict__ kt_ptr,
                                                       const u32 *__restrict__ kt_idx,
                                                       const u32 *__restrict__ k_ptr,
                                                       const u32 *__restrict__ k_idx,
                                                       u32 *__restrict__ src, u32 *bad) {
    const u32 lane = threadIdx.x & 31;
    for (u64 w = GLOBAL_TID >> 5; w < n; w += GLOBAL_THREADS >> 5) {
        kt_sources_row((u32)w, lane, 32, kt_ptr, kt_idx, k_ptr, k_idx, src, bad);
    }
}

// ssor_k1_totals: the structure of A and of both first-order factors, K (row i: A's columns up
// to i) and K^T diag(s) (row i: A's columns from i on), counted as ssor_k1_gram_count counts
// the explicit product's rows, and what the factors' values are: a thread per row of A, rows
// in warps of 32 consecutive ones (diag from ssor_k1_lengths; every row stores its diagonal
// entry, which the caller checked). out holds three sections (A, K, K^T), each GRAM_HEAD
// totals [x lines, sum of |i - j|, 32 x the longest row of each warp, rows storing their
// diagonal, flags (2: a row of GRAM_HIST entries or more, which the histogram cannot hold)],
// GRAM_HIST bins and the diagonal bitmap of `words` words; then one word of value flags:
// 1 when an off-diagonal value of K, -(omega a_ij / a_jj), or a scale s_i = scale / a_ii is
// not finite; 2 when an off-diagonal value of K is finite and not zero.
__device__ __forceinline__ void totals_row(const u32 *__restrict__ idx, u32 lo, u32 hi, u32 i,
                                           u64 shift, u64 *diagonals, u32 *hist, u64 &lines,
                                           u64 &dist, u64 &stored, u64 &flags) {
    u32 last_line = GRAM_DONE;
    for (u32 p = lo; p < hi; ++p) {
        tally_column(idx[p], i, shift, diagonals, last_line, lines, dist, stored);
    }
    gram_counted(hi - lo, hist, flags);
}

// A thread's part of ssor_k1_totals' three sections (A, K, K^T) and of its value flags, with
// the block's shared tallies they are flushed through (one copy per block, in shared memory).
struct K1Sections {
    u32 hist[3][GRAM_HIST];
    u64 totals[3][GRAM_HEAD];
    u64 diag[3][GRAM_DIAG_SHARED];
};
struct K1Tallies {
    u64 lines[3] = {0, 0, 0}, dist[3] = {0, 0, 0}, slots[3] = {0, 0, 0};
    u64 stored[3] = {0, 0, 0}, flags[3] = {0, 0, 0};
    u64 values = 0;
};

// Every thread of the block, first: the shared tallies cleared, and bits[s] the diagonal
// bitmap section s is tallied into (diag_bits_open; sections `section` words apart in out,
// each bitmap of `words` words after its totals and bins).
__device__ __forceinline__ void k1_clear(K1Sections *sh, u64 *out, u64 section, u64 words,
                                         u64 *bits[3]) {
    for (int s = 0; s < 3; ++s) {
        bits[s] = diag_bits_open(out + s * section + GRAM_HEAD + GRAM_HIST, words, sh->diag[s]);
        clear_section(sh->hist[s], sh->totals[s]);
    }
}

// Every thread of the block, once its rows are done: the sections added to out (section words
// apart), the value flags or-ed into the word after them.
__device__ __forceinline__ void k1_flush(K1Sections *sh, const K1Tallies &t, u64 *out,
                                         u64 section, u64 words) {
#pragma unroll
    for (int s = 0; s < 3; ++s) {
        flush_section(sh->hist[s], sh->totals[s], out + s * section, t.lines[s], t.dist[s],
                      t.slots[s], t.stored[s], t.flags[s]);
        diag_bits_close(out + s * section + GRAM_HEAD + GRAM_HIST, words, sh->diag[s]);
    }
    if (t.values != 0) {
        atomicOr(out + 3 * section, t.values);
    }
}

// The value flags of row i's factor entries p of [lo + first, d), taken stride apart (K's
// off-diagonal values), and with diagonal, its scale s_i = scale / a_ii (d: the diagonal's
// position).
__device__ __forceinline__ void k1_values(double omega, const double *__restrict__ a_vals,
                                          const u32 *__restrict__ a_idx,
                                          const u32 *__restrict__ diag, u32 lo, u32 d,
                                          u32 first, u32 stride, bool diagonal, double scale,
                                          u64 &values) {
    for (u32 p = lo + first; p < d; p += stride) {
        const double x = ssor_x(omega, a_vals, diag, p, a_idx[p]);
        if (!isfinite(x)) {
            values |= 1;
        } else if (x != 0.0) {
            values |= 2;
        }
    }
    if (diagonal && !isfinite(__ddiv_rn(scale, a_vals[d]))) {
        values |= 1;
    }
}

extern "C" __global__ void ssor_k1_totals(u32 n, const u32 *__restrict__ a_ptr,
                                          const u32 *__restrict__ a_idx,
                                          const double *__restrict__ a_vals,
                                          const u32 *__restrict__ diag, double omega,
                                          double scale, u64 words, u64 *out) {
    __shared__ K1Sections sh;
    const u64 section = GRAM_HEAD + GRAM_HIST + words;
    u64 *bits[3];
    k1_clear(&sh, out, section, words, bits);
    K1Tallies t;
    const u64 rows = ((u64)n + 31) & ~(u64)31;
    for (u64 r = GLOBAL_TID; r < rows; r += GLOBAL_THREADS) {
        u32 len[3] = {0, 0, 0};
        if (r < n) {
            const u32 i = (u32)r;
            const u32 lo = a_ptr[i], hi = a_ptr[i + 1], d = diag[i];
            const u64 shift = (u64)n - 1 - i;
            const u32 seg_lo[3] = {lo, lo, d};
            const u32 seg_hi[3] = {hi, d + 1, hi};
#pragma unroll
            for (int s = 0; s < 3; ++s) {
                totals_row(a_idx, seg_lo[s], seg_hi[s], i, shift, bits[s], sh.hist[s],
                           t.lines[s], t.dist[s], t.stored[s], t.flags[s]);
                len[s] = seg_hi[s] - seg_lo[s];
            }
            k1_values(omega, a_vals, a_idx, diag, lo, d, 0, 1, true, scale, t.values);
        }
#pragma unroll
        for (int s = 0; s < 3; ++s) {
            const u32 longest = warp_max_u32(len[s]);
            if ((threadIdx.x & 31) == 0) {
                t.slots[s] += 32ull * longest;
            }
        }
    }
    k1_flush(&sh, t, out, section, words);
}

// ssor_k1_totals_warp: ssor_k1_totals a warp per row, a lane per entry (for rows long enough
// to keep a warp's lanes busy: one thread's row tallies its entries one after another), the
// same out. The warp slots of each warp of 32 consecutive rows are found apart, a lane per
// row. Every lane of a warp takes part in every round: blockDim.x is a multiple of 32.
//
// The entries p of [lo, hi) of row i (columns ascending) tallied by the calling warp, a lane
// each: an entry starts a new line when its column's line differs from the previous entry's
// (or it is the first), as tally_column finds it along the row.
__device__ __forceinline__ void totals_row_lanes(const u32 *__restrict__ idx, u32 lo, u32 hi,
                                                 u32 i, u64 shift, u64 *diagonals, u64 &lines,
                                                 u64 &dist, u64 &stored) {
    for (u32 p = lo + (threadIdx.x & 31); p < hi; p += 32) {
        const u32 c = idx[p];
        const bool new_line = p == lo || idx[p - 1] / GRAM_LINE_COLS != c / GRAM_LINE_COLS;
        tally_entry(c, new_line, i, shift, diagonals, lines, dist, stored);
    }
}

// A row of length len counted into a histogram by the warp's first lane (flags |= 2 past it).
__device__ __forceinline__ void totals_length(u32 len, u32 *hist, u64 &flags) {
    if ((threadIdx.x & 31) == 0) {
        gram_counted(len, hist, flags);
    }
}

extern "C" __global__ void ssor_k1_totals_warp(u32 n, const u32 *__restrict__ a_ptr,
                                               const u32 *__restrict__ a_idx,
                                               const double *__restrict__ a_vals,
                                               const u32 *__restrict__ diag, double omega,
                                               double scale, u64 words, u64 *out) {
    __shared__ K1Sections sh;
    const u64 section = GRAM_HEAD + GRAM_HIST + words;
    u64 *bits[3];
    k1_clear(&sh, out, section, words, bits);
    K1Tallies t;
    const u32 lane = threadIdx.x & 31;
    const u64 warps = GLOBAL_THREADS / 32, warp = GLOBAL_TID / 32;
    for (u64 w = warp; w < n; w += warps) {
        const u32 i = (u32)w;
        const u32 lo = a_ptr[i], hi = a_ptr[i + 1], d = diag[i];
        const u64 shift = (u64)n - 1 - i;
        const u32 seg_lo[3] = {lo, lo, d};
        const u32 seg_hi[3] = {hi, d + 1, hi};
#pragma unroll
        for (int s = 0; s < 3; ++s) {
            totals_row_lanes(a_idx, seg_lo[s], seg_hi[s], i, shift, bits[s], t.lines[s],
                             t.dist[s], t.stored[s]);
            totals_length(seg_hi[s] - seg_lo[s], sh.hist[s], t.flags[s]);
        }
        k1_values(omega, a_vals, a_idx, diag, lo, d, lane, 32, lane == 0, scale, t.values);
    }
    const u64 groups = ((u64)n + 31) / 32;
    for (u64 g = warp; g < groups; g += warps) {
        const u64 r = g * 32 + lane;
        u32 len[3] = {0, 0, 0};
        if (r < n) {
            const u32 lo = a_ptr[r], hi = a_ptr[r + 1], d = diag[r];
            len[0] = hi - lo;
            len[1] = d + 1 - lo;
            len[2] = hi - d;
        }
#pragma unroll
        for (int s = 0; s < 3; ++s) {
            const u32 longest = warp_max_u32(len[s]);
            if (lane == 0) {
                t.slots[s] += 32ull * longest;
            }
        }
    }
    k1_flush(&sh, t, out, section, words);
}

// csr_totals: the structure of A alone, one section as ssor_k1_totals writes its first (the
// GRAM_HEAD totals, GRAM_HIST bins, then the diagonal bitmap: bit j + n - 1 - i for entry
// (i, j)): what the SpMV model reads of A when no preconditioner's factors are counted with it
// (none, Jacobi). A thread per row, rows in warps of 32 consecutive ones; nothing is asked of
// the diagonal.
extern "C" __global__ void csr_totals(u32 n, const u32 *__restrict__ a_ptr,
                                      const u32 *__restrict__ a_idx, u64 *out) {
    __shared__ u32 sh_hist[GRAM_HIST];
    __shared__ u64 sh_totals[GRAM_HEAD];
    __shared__ u64 sh_diag[GRAM_DIAG_SHARED];
    const u64 words = gram_diag_words(n);
    u64 *diagonals = diag_bits_open(out + GRAM_HEAD + GRAM_HIST, words, sh_diag);
    clear_section(sh_hist, sh_totals);
    u64 lines = 0, dist = 0, slots = 0, stored = 0, flags = 0;
    const u64 rows = ((u64)n + 31) & ~(u64)31;
    for (u64 t = GLOBAL_TID; t < rows; t += GLOBAL_THREADS) {
        u32 len = 0;
        if (t < n) {
            const u32 i = (u32)t;
            const u32 lo = a_ptr[i], hi = a_ptr[i + 1];
            totals_row(a_idx, lo, hi, i, (u64)n - 1 - i, diagonals, sh_hist, lines, dist,
                       stored, flags);
            len = hi - lo;
        }
        const u32 longest = warp_max_u32(len);
        if ((threadIdx.x & 31) == 0) {
            slots += 32ull * longest;
        }
    }
    flush_section(sh_hist, sh_totals, out, lines, dist, slots, stored, flags);
    diag_bits_close(out + GRAM_HEAD + GRAM_HIST, words, sh_diag);
}

// csr_totals_warp: csr_totals a warp per row, a lane per entry, the same out (as
// ssor_k1_totals_warp counts its first section).
extern "C" __global__ void csr_totals_warp(u32 n, const u32 *__restrict__ a_ptr,
                                           const u32 *__restrict__ a_idx, u64 *out) {
    __shared__ u32 sh_hist[GRAM_HIST];
    __shared__ u64 sh_totals[GRAM_HEAD];
    __shared__ u64 sh_diag[GRAM_DIAG_SHARED];
    const u64 words = gram_diag_words(n);
    u64 *diagonals = diag_bits_open(out + GRAM_HEAD + GRAM_HIST, words, sh_diag);
    clear_section(sh_hist, sh_totals);
    u64 lines = 0, dist = 0, slots = 0, stored = 0, flags = 0;
    const u32 lane = threadIdx.x & 31;
    const u64 warps = GLOBAL_THREADS / 32, warp = GLOBAL_TID / 32;
    for (u64 w = warp; w < n; w += warps) {
        const u32 i = (u32)w;
        const u32 lo = a_ptr[i], hi = a_ptr[i + 1];
        totals_row_lanes(a_idx, lo, hi, i, (u64)n - 1 - i, diagonals, lines, dist, stored);
        totals_length(hi - lo, sh_hist, flags);
    }
    const u64 groups = ((u64)n + 31) / 32;
    for (u64 g = warp; g < groups; g += warps) {
        const u64 t = g * 32 + lane;
        const u32 len = t < n ? a_ptr[t + 1] - a_ptr[t] : 0;
        const u32 longest = warp_max_u32(len);
        if (lane == 0) {
            slots += 32ull * longest;
        }
    }
    flush_section(sh_hist, sh_totals, out, lines, dist, slots, stored, flags);
    diag_bits_close(out + GRAM_HEAD + GRAM_HIST, words, sh_diag);
}

// ssor_k1_checks: what the selection reads of A before SSOR-AI's factors exist, so that no
// host pass over A precedes it (diag from ssor_k1_lengths, whose bad[0] already holds the first
// row without a stored diagonal entry): lowers bad[0] to the first row whose diagonal value is
// not positive and finite; adds to out[0] the entries of K (each row's entries up to and with
// its diagonal) and to out[1] their squares (the explicit product's bound); raises out[2] to
// the bits of the largest coupling sum_{j<i} |a_ij| / sqrt(a_ii a_jj) (the automatic
// relaxation's), each row summed in order as the host sums it, a NaN sum skipped (bits of
// non-negative doubles order as the values do). A row without its diagonal entry adds nothing.
// The reductions after the loop need every thread of the block: blockDim.x is a multiple of 32.
// The block's part of ssor_k1_checks' totals added to out (every thread calls it, with its own
// entries, squares and best; sh the block's three shared words, zeroed and synchronized before
// the rows).
__device__ __forceinline__ void checks_flush(u64 entries, u64 squares, u64 best, u64 *sh,
                                             u64 *out) {
    for (int o = 16; o > 0; o >>= 1) {
        entries += __shfl_xor_sync(0xffffffffu, entries, o);
        squares += __shfl_xor_sync(0xffffffffu, squares, o);
        const u64 other = __shfl_xor_sync(0xffffffffu, best, o);
        best = other > best ? other : best;
    }
    if ((threadIdx.x & 31) == 0) {
        atomicAdd(sh, entries);
        atomicAdd(sh + 1, squares);
        atomicMax(sh + 2, best);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        if (sh[0] != 0) {
            atomicAdd(out, sh[0]);
            atomicAdd(out + 1, sh[1]);
        }
        if (sh[2] != 0) {
            atomicMax(out + 2, sh[2]);
        }
    }
}

// The coupling term of entry p of a row whose diagonal value is di: |a_ij| / sqrt(a_ii a_jj).
__device__ __forceinline__ double checks_term(const u32 *__restrict__ a_idx,
                                              const double *__restrict__ a_vals,
                                              const u32 *__restrict__ diag, u32 p, double di) {
    const double dj = a_vals[diag[a_idx[p]]];
    return __ddiv_rn(fabs(a_vals[p]), __dsqrt_rn(__dmul_rn(di, dj)));
}

// A row's coupling sum folded into best, the bits of the largest (a NaN sum skipped: bits of
// non-negative doubles order as the values do).
__device__ __forceinline__ void checks_best(double sum, u64 &best) {
    if (!isnan(sum)) {
        const u64 bits = (u64)__double_as_longlong(sum);
        best = bits > best ? bits : best;
    }
}

extern "C" __global__ void ssor_k1_checks(u32 n, const u32 *__restrict__ a_ptr,
                                          const u32 *__restrict__ a_idx,
                                          const double *__restrict__ a_vals,
                                          const u32 *__restrict__ diag, u32 *bad, u64 *out) {
    __shared__ u64 sh[3];
    if (threadIdx.x < 3) {
        sh[threadIdx.x] = 0;
    }
    __syncthreads();
    u64 entries = 0, squares = 0, best = 0;
    for (u64 t = GLOBAL_TID; t < n; t += GLOBAL_THREADS) {
        const u32 i = (u32)t;
        if (!gram_has_diagonal(a_ptr, a_idx, diag, i)) {
            continue;
        }
        const u32 lo = a_ptr[i], d = diag[i];
        const double di = a_vals[d];
        if (!(di > 0.0 && isfinite(di))) {
            atomicMin(bad, i);
            continue;
        }
        const u64 len = (u64)(d - lo) + 1;
        entries += len;
        squares += len * len;
        double sum = 0.0;
        for (u32 p = lo; p < d; ++p) {
            sum = __dadd_rn(sum, checks_term(a_idx, a_vals, diag, p, di));
        }
        checks_best(sum, best);
    }
    checks_flush(entries, squares, best, sh, out);
}

// ssor_k1_checks_warp: ssor_k1_checks a warp per row (rows of many entries: a thread's row
// waits for its terms' loads one after another), the same out. The lanes compute the terms
// of 32 entries at a time and the first lane adds them in the row's order, so every sum is
// the thread's to the bit. Every lane of a warp takes part in every round: blockDim.x is a
// multiple of 32.
extern "C" __global__ void ssor_k1_checks_warp(u32 n, const u32 *__restrict__ a_ptr,
                                               const u32 *__restrict__ a_idx,
                                               const double *__restrict__ a_vals,
                                               const u32 *__restrict__ diag, u32 *bad,
                                               u64 *out) {
    __shared__ u64 sh[3];
    if (threadIdx.x < 3) {
        sh[threadIdx.x] = 0;
    }
    __syncthreads();
    u64 entries = 0, squares = 0, best = 0;
    const u32 lane = threadIdx.x & 31;
    for (u64 w = GLOBAL_TID >> 5; w < n; w += GLOBAL_THREADS >> 5) {
        const u32 i = (u32)w;
        if (!gram_has_diagonal(a_ptr, a_idx, diag, i)) {
            continue;
        }
        const u32 lo = a_ptr[i], d = diag[i];
        const double di = a_vals[d];
        if (!(di > 0.0 && isfinite(di))) {
            if (lane == 0) {
                atomicMin(bad, i);
            }
            continue;
        }
        if (lane == 0) {
            const u64 len = (u64)(d - lo) + 1;
            entries += len;
            squares += len * len;
        }
        double sum = 0.0;
        for (u32 base = lo; base < d; base += 32) {
            const u32 p = base + lane;
            const double term = p < d ? checks_term(a_idx, a_vals, diag, p, di) : 0.0;
            const u32 m = d - base < 32 ? d - base : 32;
            for (u32 l = 0; l < m; ++l) {
                const double t = __shfl_sync(0xffffffffu, term, l);
                sum = __dadd_rn(sum, t);
            }
        }
        if (lane == 0) {
            checks_best(sum, best);
        }
    }
    checks_flush(entries, squares, best, sh, out);
}
