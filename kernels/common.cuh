// common.cuh: types and warp/block reductions shared by every kernel file.
//
// Kernels are compiled at run time by NVRTC without the CUDA toolkit's headers, so this file uses
// only built-in types and intrinsics.
#ifndef AUTOPCG_COMMON_CUH
#define AUTOPCG_COMMON_CUH

typedef unsigned long long u64;
typedef unsigned int u32;
typedef long long i64;

#define FULL_MASK 0xffffffffu

// Column index of a padded ELL slot (the host's ELL_PAD).
#define ELL_PAD 0xffffffffu

// Sum over the 32 lanes of a warp; the result is valid in lane 0. Every lane must call it.
__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        v += __shfl_down_sync(FULL_MASK, v, off);
    }
    return v;
}

// Sum over a whole block whose size is a multiple of 32; the result is valid in thread 0.
// Every thread must call it. `scratch` is shared memory of at least 32 doubles; it may be reused
// after a __syncthreads() that follows the call.
__device__ __forceinline__ double block_sum(double v, double *scratch) {
    const u32 lane = threadIdx.x & 31u;
    const u32 warp = threadIdx.x >> 5;
    v = warp_sum(v);
    if (lane == 0) {
        scratch[warp] = v;
    }
    __syncthreads();
    if (warp == 0) {
        const u32 nwarps = blockDim.x >> 5;
        v = (lane < nwarps) ? scratch[lane] : 0.0;
        v = warp_sum(v);
    }
    return v;
}

// Three block sums at once (one pass of barriers instead of three); results valid in thread 0.
// `scratch` is shared memory of at least 96 doubles.
__device__ __forceinline__ void block_sum3(double &a, double &b, double &c, double *scratch) {
    const u32 lane = threadIdx.x & 31u;
    const u32 warp = threadIdx.x >> 5;
    a = warp_sum(a);
    b = warp_sum(b);
    c = warp_sum(c);
    if (lane == 0) {
        scratch[warp] = a;
        scratch[32 + warp] = b;
        scratch[64 + warp] = c;
    }
    __syncthreads();
    if (warp == 0) {
        const u32 nwarps = blockDim.x >> 5;
        a = (lane < nwarps) ? scratch[lane] : 0.0;
        b = (lane < nwarps) ? scratch[32 + lane] : 0.0;
        c = (lane < nwarps) ? scratch[64 + lane] : 0.0;
        a = warp_sum(a);
        b = warp_sum(b);
        c = warp_sum(c);
    }
}

// Called by every thread of a block after thread 0 wrote its block's partial(s): returns true
// (in every thread) in the last block to get here, which may then read all partials.
__device__ __forceinline__ bool last_block_done(u32 *counter) {
    __shared__ bool is_last;
    if (threadIdx.x == 0) {
        __threadfence();
        const u32 ticket = atomicAdd(counter, 1u);
        is_last = (ticket == gridDim.x - 1);
    }
    __syncthreads();
    return is_last;
}

// The grid's sums of a three-dot reduction done in one launch: this thread's shares g, d, q are
// added over its block into partial[b], partial[nb + b], partial[2 nb + b] (b = blockIdx.x,
// nb = gridDim.x), and the last block to finish adds the partials in block order. Returns true
// in every thread of that block, whose thread 0 then holds the grid's sums in g, d, q and must
// reset the ticket counter to 0 for the next call; false in the other blocks. Every thread of
// every block must call it; blockDim.x a multiple of 32 (block_sum3); scratch is shared memory
// of 96 doubles.
__device__ __forceinline__ bool dot3_grid_sum(double &g, double &d, double &q, double *partial,
                                              u32 *counter, double *scratch) {
    block_sum3(g, d, q, scratch);
    const u32 nb = gridDim.x;
    if (threadIdx.x == 0) {
        partial[blockIdx.x] = g;
        partial[nb + blockIdx.x] = d;
        partial[2 * nb + blockIdx.x] = q;
    }
    if (!last_block_done(counter)) {
        return false;
    }
    g = 0.0;
    d = 0.0;
    q = 0.0;
    for (u32 b = threadIdx.x; b < nb; b += blockDim.x) {
        g += __ldcg(partial + b);
        d += __ldcg(partial + nb + b);
        q += __ldcg(partial + 2 * nb + b);
    }
    __syncthreads(); // scratch is reused
    block_sum3(g, d, q, scratch);
    return true;
}

#endif // AUTOPCG_COMMON_CUH
