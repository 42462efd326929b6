// cg_scalars.cuh: the device scalar buffer of Chronopoulos-Gear PCG and its recurrence.
//
// THE LAYOUT IS DEFINED HERE AND IN crates/gpu/src/scalars.rs ONLY; a test compares the two.
// The buffer is an array of CG_SCALARS_LEN doubles (integers stored as exactly representable
// doubles):
//
//   CG_ALPHA       alpha of the next vector update
//   CG_BETA        beta of the next vector update (0 after the start)
//   CG_GAMMA       gamma = (r, u) of the current residual (gamma_old of the next advance)
//   CG_DELTA       delta = (w, u) of the last reduction
//   CG_RR          (r, r) of the last reduction
//   CG_ITER        iteration of the last reduction (0 for the start)
//   CG_HALT        0, or why the recurrence stopped: CG_HALT_GAMMA, CG_HALT_CURVATURE,
//                  CG_HALT_NOT_FINITE
//   CG_HALT_VALUE  the offending gamma or curvature (0 for CG_HALT_NOT_FINITE)
//   CG_HALT_ITER   iteration at which the recurrence stopped
//
// The history buffer holds CG_HIST_STRIDE doubles per iteration: (gamma, delta, rr) of
// iteration k at [CG_HIST_STRIDE * k, CG_HIST_STRIDE * k + 3).
#ifndef AUTOPCG_CG_SCALARS_CUH
#define AUTOPCG_CG_SCALARS_CUH

#define CG_ALPHA 0
#define CG_BETA 1
#define CG_GAMMA 2
#define CG_DELTA 3
#define CG_RR 4
#define CG_ITER 5
#define CG_HALT 6
#define CG_HALT_VALUE 7
#define CG_HALT_ITER 8
#define CG_SCALARS_LEN 9

#define CG_HALT_NONE 0
#define CG_HALT_GAMMA 1
#define CG_HALT_CURVATURE 2
#define CG_HALT_NOT_FINITE 3

#define CG_HIST_STRIDE 3

// The scalar recurrence, run by ONE thread after the fused reduction of iteration `iter`.
// iter == 0 is the start: alpha = gamma / delta, beta = 0, and any earlier halt is cleared.
// Later iterations: beta = gamma / gamma_old, curvature = delta - beta * gamma / alpha_old,
// alpha = gamma / curvature. The checks and their order are those of the host's
// GearScalars::start / GearScalars::advance: non-finite dots, then gamma <= 0, then
// curvature <= 0 (or non-finite; delta itself at the start). After a halt the state is frozen
// until the next start. The dots are always appended to the history (when it has room).
__device__ __forceinline__ void cg_advance(double gamma, double delta, double rr, double *sc,
                                           double *hist, unsigned int hist_cap,
                                           unsigned int iter) {
    if (iter < hist_cap) {
        hist[(unsigned long long)CG_HIST_STRIDE * iter + 0] = gamma;
        hist[(unsigned long long)CG_HIST_STRIDE * iter + 1] = delta;
        hist[(unsigned long long)CG_HIST_STRIDE * iter + 2] = rr;
    }
    if (iter == 0) {
        sc[CG_HALT] = CG_HALT_NONE;
        sc[CG_HALT_VALUE] = 0.0;
        sc[CG_HALT_ITER] = 0.0;
    } else if (sc[CG_HALT] != CG_HALT_NONE) {
        return;
    }
    sc[CG_DELTA] = delta;
    sc[CG_RR] = rr;
    sc[CG_ITER] = (double)iter;

    int code = CG_HALT_NONE;
    double bad = 0.0;
    double alpha = 0.0;
    double beta = 0.0;
    if (!(isfinite(gamma) && isfinite(delta) && isfinite(rr))) {
        code = CG_HALT_NOT_FINITE;
    } else if (gamma <= 0.0) {
        code = CG_HALT_GAMMA;
        bad = gamma;
    } else if (iter == 0) {
        if (delta <= 0.0) {
            code = CG_HALT_CURVATURE;
            bad = delta;
        } else {
            alpha = gamma / delta;
        }
    } else {
        beta = gamma / sc[CG_GAMMA];
        const double curvature = delta - beta * gamma / sc[CG_ALPHA];
        if (!(curvature > 0.0) || !isfinite(curvature)) {
            code = CG_HALT_CURVATURE;
            bad = curvature;
        } else {
            alpha = gamma / curvature;
        }
    }
    if (code != CG_HALT_NONE) {
        sc[CG_HALT] = (double)code;
        sc[CG_HALT_VALUE] = bad;
        sc[CG_HALT_ITER] = (double)iter;
    } else {
        sc[CG_ALPHA] = alpha;
        sc[CG_BETA] = beta;
        sc[CG_GAMMA] = gamma;
    }
}

// What follows needs common.cuh's types and block reductions: it is defined when common.cuh was
// included before this header, as every kernel file does (the host emulation of the recurrence
// in the generator's tests includes this header alone).
#ifdef AUTOPCG_COMMON_CUH

// The iteration after the last one recorded in the scalar buffer.
__device__ __forceinline__ u32 cg_next_iteration(const double *scalars) {
    return (u32)scalars[CG_ITER] + 1u;
}

// The end of a three-dot reduction done in one launch (dot3_last_block, and the SpMV kernels
// whose epilogue adds the three dots of their rows): the grid's sums of this thread's shares
// g = (r, u), d = (w, u), q = (r, r) (dot3_grid_sum of common.cuh), then in the last block to
// finish cg_advance for `iteration`, or for the iteration after the last one recorded when
// `next`, and the ticket counter reset to 0 for the next call. Every thread of every block must
// call it; blockDim.x must be a multiple of 32.
__device__ __forceinline__ void dot3_grid_finish(double g, double d, double q, double *partial,
                                                 u32 *counter, double *scalars, double *history,
                                                 u32 history_cap, u32 iteration, bool next) {
    __shared__ double scratch[96];
    if (dot3_grid_sum(g, d, q, partial, counter, scratch) && threadIdx.x == 0) {
        const u32 it = next ? cg_next_iteration(scalars) : iteration;
        cg_advance(g, d, q, scalars, history, history_cap, it);
        *counter = 0;
    }
}

#endif // AUTOPCG_COMMON_CUH

#endif // AUTOPCG_CG_SCALARS_CUH
