// vector.cu: element-wise vector kernels of PCG.
//
//   axpy_*       y = y + a x
//   xpay_*       y = x + a y
//   cg_update_*  the fused Chronopoulos-Gear update, alpha and beta read from the device scalar
//                buffer (cg_scalars.cuh):  p = u + beta p;  s = w + beta s;  x += alpha p;
//                r -= alpha s.  Does nothing once the recurrence has halted. When beta == 0 the
//                old p and s are not used, so they need not be initialised before the first step.
//                cg_update_nopre_* (u is r) and cg_update_jacobi_* (writes the next u = D^-1 r)
//                fuse the preconditioner step into the update (see below).
//   triad        a = b + s c (the STREAM triad): the memory bandwidth a simple streaming kernel
//                reaches, the yardstick the SpMV benchmark compares against; grid-stride, any
//                block count
//   cg_poll_gather
//                the history entries the host has not seen and the scalar buffer
//                (cg_scalars.cuh) gathered into one buffer, which the host reads when it polls
//                the recurrence; grid-stride, any block count
//
// Each operation comes in four variants:
//   *_elem     one element per thread; needs blocks * threads >= n
//   *_elem_v2  one double2 (two elements) per thread; needs blocks * threads >= ceil(n / 2)
//   *_grid     grid-stride loop, any block count
//   *_grid_v2  grid-stride loop over double2, any block count
// The double2 variants need 16-byte aligned vectors (device allocations are); an odd last element
// is handled by one thread.
#include "common.cuh"
#include "cg_scalars.cuh"

#define GLOBAL_TID ((u64)blockIdx.x * blockDim.x + threadIdx.x)
#define GLOBAL_THREADS ((u64)gridDim.x * blockDim.x)

// ---------------------------------------------------------------------------------------- axpy

extern "C" __global__ void axpy_elem(u64 n, double a, const double *__restrict__ x,
                                     double *__restrict__ y) {
    const u64 i = GLOBAL_TID;
    if (i < n) {
        y[i] += a * x[i];
    }
}

extern "C" __global__ void axpy_elem_v2(u64 n, double a, const double *__restrict__ x,
                                        double *__restrict__ y) {
    const u64 t = GLOBAL_TID;
    const u64 npairs = n >> 1;
    if (t < npairs) {
        const double2 xv = reinterpret_cast<const double2 *>(x)[t];
        double2 yv = reinterpret_cast<double2 *>(y)[t];
        yv.x += a * xv.x;
        yv.y += a * xv.y;
        reinterpret_cast<double2 *>(y)[t] = yv;
    } else if (t == npairs && (n & 1)) {
        y[n - 1] += a * x[n - 1];
    }
}

extern "C" __global__ void axpy_grid(u64 n, double a, const double *__restrict__ x,
                                     double *__restrict__ y) {
    for (u64 i = GLOBAL_TID; i < n; i += GLOBAL_THREADS) {
        y[i] += a * x[i];
    }
}

extern "C" __global__ void axpy_grid_v2(u64 n, double a, const double *__restrict__ x,
                                        double *__restrict__ y) {
    const u64 npairs = n >> 1;
    const double2 *x2 = reinterpret_cast<const double2 *>(x);
    double2 *y2 = reinterpret_cast<double2 *>(y);
    for (u64 t = GLOBAL_TID; t < npairs; t += GLOBAL_THREADS) {
        const double2 xv = x2[t];
        double2 yv = y2[t];
        yv.x += a * xv.x;
        yv.y += a * xv.y;
        y2[t] = yv;
    }
    if (GLOBAL_TID == 0 && (n & 1)) {
        y[n - 1] += a * x[n - 1];
    }
}

// ---------------------------------------------------------------------------------------- xpay

extern "C" __global__ void xpay_elem(u64 n, double a, const double *__restrict__ x,
                                     double *__restrict__ y) {
    const u64 i = GLOBAL_TID;
    if (i < n) {
        y[i] = x[i] + a * y[i];
    }
}

extern "C" __global__ void xpay_elem_v2(u64 n, double a, const double *__restrict__ x,
                                        double *__restrict__ y) {
    const u64 t = GLOBAL_TID;
    const u64 npairs = n >> 1;
    if (t < npairs) {
        const double2 xv = reinterpret_cast<const double2 *>(x)[t];
        double2 yv = reinterpret_cast<double2 *>(y)[t];
        yv.x = xv.x + a * yv.x;
        yv.y = xv.y + a * yv.y;
        reinterpret_cast<double2 *>(y)[t] = yv;
    } else if (t == npairs && (n & 1)) {
        y[n - 1] = x[n - 1] + a * y[n - 1];
    }
}

extern "C" __global__ void xpay_grid(u64 n, double a, const double *__restrict__ x,
                                     double *__restrict__ y) {
    for (u64 i = GLOBAL_TID; i < n; i += GLOBAL_THREADS) {
        y[i] = x[i] + a * y[i];
    }
}

extern "C" __global__ void xpay_grid_v2(u64 n, double a, const double *__restrict__ x,
                                        double *__restrict__ y) {
    const u64 npairs = n >> 1;
    const double2 *x2 = reinterpret_cast<const double2 *>(x);
    double2 *y2 = reinterpret_cast<double2 *>(y);
    for (u64 t = GLOBAL_TID; t < npairs; t += GLOBAL_THREADS) {
        const double2 xv = x2[t];
        double2 yv = y2[t];
        yv.x = xv.x + a * yv.x;
        yv.y = xv.y + a * yv.y;
        y2[t] = yv;
    }
    if (GLOBAL_TID == 0 && (n & 1)) {
        y[n - 1] = x[n - 1] + a * y[n - 1];
    }
}

// ----------------------------------------------------------------------------------- cg_update

// Where the update finds u = M^-1 r (one template, three entry-point families):
//   CG_U_SEPARATE  cg_update_*         u was written by the preconditioner's kernels; read here.
//   CG_U_IS_R      cg_update_nopre_*   no preconditioner: u is r itself, so there is no copy and
//                                      one vector fewer is read (the SpMV and the dots read r).
//   CG_U_JACOBI    cg_update_jacobi_*  Jacobi fused: u is read for p, then overwritten with
//                                      inv_diag .* r_new, the next iteration's u, so the separate
//                                      Jacobi pass (which re-reads r) disappears.
#define CG_U_SEPARATE 0
#define CG_U_IS_R 1
#define CG_U_JACOBI 2

// One element of the fused update.
__device__ __forceinline__ void cg_update_one(double alpha, double beta, double u, double w,
                                              double &p, double &s, double &x, double &r) {
    const double pn = (beta == 0.0) ? u : u + beta * p;
    const double sn = (beta == 0.0) ? w : w + beta * s;
    p = pn;
    s = sn;
    x += alpha * pn;
    r -= alpha * sn;
}

// Element i. `u` is only written in CG_U_JACOBI mode (and only read in the other two modes that
// use it), each element by the one thread that owns it.
template <int MODE>
__device__ __forceinline__ void cg_update_at(u64 i, double alpha, double beta,
                                             const double *__restrict__ dinv,
                                             double *__restrict__ u, const double *__restrict__ w,
                                             double *__restrict__ p, double *__restrict__ s,
                                             double *__restrict__ x, double *__restrict__ r) {
    double ri = r[i];
    const double ui = (MODE == CG_U_IS_R) ? ri : u[i];
    double pi = p[i], si = s[i], xi = x[i];
    cg_update_one(alpha, beta, ui, w[i], pi, si, xi, ri);
    p[i] = pi;
    s[i] = si;
    x[i] = xi;
    r[i] = ri;
    if (MODE == CG_U_JACOBI) {
        u[i] = dinv[i] * ri;
    }
}

// Pair t (elements 2t and 2t + 1) through double2 loads and stores.
template <int MODE>
__device__ __forceinline__ void cg_update_pair(u64 t, double alpha, double beta,
                                               const double *__restrict__ dinv,
                                               double *__restrict__ u, const double *__restrict__ w,
                                               double *__restrict__ p, double *__restrict__ s,
                                               double *__restrict__ x, double *__restrict__ r) {
    double2 rv = reinterpret_cast<double2 *>(r)[t];
    const double2 uv = (MODE == CG_U_IS_R) ? rv : reinterpret_cast<const double2 *>(u)[t];
    const double2 wv = reinterpret_cast<const double2 *>(w)[t];
    double2 pv = reinterpret_cast<double2 *>(p)[t];
    double2 sv = reinterpret_cast<double2 *>(s)[t];
    double2 xv = reinterpret_cast<double2 *>(x)[t];
    cg_update_one(alpha, beta, uv.x, wv.x, pv.x, sv.x, xv.x, rv.x);
    cg_update_one(alpha, beta, uv.y, wv.y, pv.y, sv.y, xv.y, rv.y);
    reinterpret_cast<double2 *>(p)[t] = pv;
    reinterpret_cast<double2 *>(s)[t] = sv;
    reinterpret_cast<double2 *>(x)[t] = xv;
    reinterpret_cast<double2 *>(r)[t] = rv;
    if (MODE == CG_U_JACOBI) {
        const double2 dv = reinterpret_cast<const double2 *>(dinv)[t];
        reinterpret_cast<double2 *>(u)[t] = make_double2(dv.x * rv.x, dv.y * rv.y);
    }
}

// The four launch shapes, each for any mode; they return at once when the recurrence halted.
template <int MODE>
__device__ __forceinline__ void cg_update_elem_t(u64 n, const double *__restrict__ scalars,
                                                 const double *dinv, double *u, const double *w,
                                                 double *p, double *s, double *x, double *r) {
    if (scalars[CG_HALT] != CG_HALT_NONE) {
        return;
    }
    const u64 i = GLOBAL_TID;
    if (i < n) {
        cg_update_at<MODE>(i, scalars[CG_ALPHA], scalars[CG_BETA], dinv, u, w, p, s, x, r);
    }
}

template <int MODE>
__device__ __forceinline__ void cg_update_elem_v2_t(u64 n, const double *__restrict__ scalars,
                                                    const double *dinv, double *u,
                                                    const double *w, double *p, double *s,
                                                    double *x, double *r) {
    if (scalars[CG_HALT] != CG_HALT_NONE) {
        return;
    }
    const double alpha = scalars[CG_ALPHA];
    const double beta = scalars[CG_BETA];
    const u64 t = GLOBAL_TID;
    const u64 npairs = n >> 1;
    if (t < npairs) {
        cg_update_pair<MODE>(t, alpha, beta, dinv, u, w, p, s, x, r);
    } else if (t == npairs && (n & 1)) {
        cg_update_at<MODE>(n - 1, alpha, beta, dinv, u, w, p, s, x, r);
    }
}

template <int MODE>
__device__ __forceinline__ void cg_update_grid_t(u64 n, const double *__restrict__ scalars,
                                                 const double *dinv, double *u, const double *w,
                                                 double *p, double *s, double *x, double *r) {
    if (scalars[CG_HALT] != CG_HALT_NONE) {
        return;
    }
    const double alpha = scalars[CG_ALPHA];
    const double beta = scalars[CG_BETA];
    for (u64 i = GLOBAL_TID; i < n; i += GLOBAL_THREADS) {
        cg_update_at<MODE>(i, alpha, beta, dinv, u, w, p, s, x, r);
    }
}

template <int MODE>
__device__ __forceinline__ void cg_update_grid_v2_t(u64 n, const double *__restrict__ scalars,
                                                    const double *dinv, double *u,
                                                    const double *w, double *p, double *s,
                                                    double *x, double *r) {
    if (scalars[CG_HALT] != CG_HALT_NONE) {
        return;
    }
    const double alpha = scalars[CG_ALPHA];
    const double beta = scalars[CG_BETA];
    const u64 npairs = n >> 1;
    for (u64 t = GLOBAL_TID; t < npairs; t += GLOBAL_THREADS) {
        cg_update_pair<MODE>(t, alpha, beta, dinv, u, w, p, s, x, r);
    }
    if (GLOBAL_TID == 0 && (n & 1)) {
        cg_update_at<MODE>(n - 1, alpha, beta, dinv, u, w, p, s, x, r);
    }
}

// The entry points. u is never written by cg_update_* (CG_U_SEPARATE), so its const is only
// cast away to share the template.
#define CG_UPDATE_ARGS                                                                          \
    u64 n, const double *__restrict__ scalars, const double *__restrict__ u,                    \
        const double *__restrict__ w, double *__restrict__ p, double *__restrict__ s,           \
        double *__restrict__ x, double *__restrict__ r
#define CG_UPDATE_NOPRE_ARGS                                                                    \
    u64 n, const double *__restrict__ scalars, const double *__restrict__ w,                    \
        double *__restrict__ p, double *__restrict__ s, double *__restrict__ x,                 \
        double *__restrict__ r
#define CG_UPDATE_JACOBI_ARGS                                                                   \
    u64 n, const double *__restrict__ scalars, const double *__restrict__ dinv,                 \
        double *__restrict__ u, const double *__restrict__ w, double *__restrict__ p,           \
        double *__restrict__ s, double *__restrict__ x, double *__restrict__ r

extern "C" __global__ void cg_update_elem(CG_UPDATE_ARGS) {
    cg_update_elem_t<CG_U_SEPARATE>(n, scalars, nullptr, const_cast<double *>(u), w, p, s, x, r);
}

extern "C" __global__ void cg_update_elem_v2(CG_UPDATE_ARGS) {
    cg_update_elem_v2_t<CG_U_SEPARATE>(n, scalars, nullptr, const_cast<double *>(u), w, p, s, x,
                                       r);
}

extern "C" __global__ void cg_update_grid(CG_UPDATE_ARGS) {
    cg_update_grid_t<CG_U_SEPARATE>(n, scalars, nullptr, const_cast<double *>(u), w, p, s, x, r);
}

extern "C" __global__ void cg_update_grid_v2(CG_UPDATE_ARGS) {
    cg_update_grid_v2_t<CG_U_SEPARATE>(n, scalars, nullptr, const_cast<double *>(u), w, p, s, x,
                                       r);
}

extern "C" __global__ void cg_update_nopre_elem(CG_UPDATE_NOPRE_ARGS) {
    cg_update_elem_t<CG_U_IS_R>(n, scalars, nullptr, nullptr, w, p, s, x, r);
}

extern "C" __global__ void cg_update_nopre_elem_v2(CG_UPDATE_NOPRE_ARGS) {
    cg_update_elem_v2_t<CG_U_IS_R>(n, scalars, nullptr, nullptr, w, p, s, x, r);
}

extern "C" __global__ void cg_update_nopre_grid(CG_UPDATE_NOPRE_ARGS) {
    cg_update_grid_t<CG_U_IS_R>(n, scalars, nullptr, nullptr, w, p, s, x, r);
}

extern "C" __global__ void cg_update_nopre_grid_v2(CG_UPDATE_NOPRE_ARGS) {
    cg_update_grid_v2_t<CG_U_IS_R>(n, scalars, nullptr, nullptr, w, p, s, x, r);
}

extern "C" __global__ void cg_update_jacobi_elem(CG_UPDATE_JACOBI_ARGS) {
    cg_update_elem_t<CG_U_JACOBI>(n, scalars, dinv, u, w, p, s, x, r);
}

extern "C" __global__ void cg_update_jacobi_elem_v2(CG_UPDATE_JACOBI_ARGS) {
    cg_update_elem_v2_t<CG_U_JACOBI>(n, scalars, dinv, u, w, p, s, x, r);
}

extern "C" __global__ void cg_update_jacobi_grid(CG_UPDATE_JACOBI_ARGS) {
    cg_update_grid_t<CG_U_JACOBI>(n, scalars, dinv, u, w, p, s, x, r);
}

extern "C" __global__ void cg_update_jacobi_grid_v2(CG_UPDATE_JACOBI_ARGS) {
    cg_update_grid_v2_t<CG_U_JACOBI>(n, scalars, dinv, u, w, p, s, x, r);
}

// ------------------------------------------------------------------------------------- triad

extern "C" __global__ void triad(u64 n, double s, const double *__restrict__ b,
                                 const double *__restrict__ c, double *__restrict__ a) {
    for (u64 i = GLOBAL_TID; i < n; i += GLOBAL_THREADS) {
        a[i] = b[i] + s * c[i];
    }
}

// ------------------------------------------------------------------ row blocks: halo packing

// out[k] = src[idx[k]] for k < n: packs the entries of a block's vector that its neighbours
// need into its send buffer. Grid-stride, any block count.
extern "C" __global__ void gather_f64(u32 n, const u32 *__restrict__ idx,
                                      const double *__restrict__ src, double *__restrict__ out) {
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 k = (u64)blockIdx.x * blockDim.x + threadIdx.x; k < n; k += stride) {
        out[k] = src[idx[k]];
    }
}

// ------------------------------------------------------------- polling the device recurrence

// out[0, h) = history[lo, lo + h) and out[h, h + CG_SCALARS_LEN) = scalars: what a poll of the
// recurrence reads, gathered by ONE launch into one buffer. The buffer is page-locked host
// memory mapped into the device's address space, so a poll costs this launch and one
// synchronisation; two device-to-device copies and a download into pageable memory cost
// noticeably more per iteration on small, launch-bound solves. Grid-stride, any block count.
extern "C" __global__ void cg_poll_gather(const double *__restrict__ history, u64 lo, u64 h,
                                          const double *__restrict__ scalars,
                                          double *__restrict__ out) {
    const u64 total = h + CG_SCALARS_LEN;
    for (u64 i = GLOBAL_TID; i < total; i += GLOBAL_THREADS) {
        out[i] = (i < h) ? history[lo + i] : scalars[i - h];
    }
}
