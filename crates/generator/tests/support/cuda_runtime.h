// cuda_runtime.h for the emulated run of an emitted solver (tests/emitted_driver.rs): the parts
// of the CUDA runtime API the host driver calls, declared for clang's CUDA mode without the CUDA
// toolkit (-nocudainc), and the device builtins the kernel files use. mock_cuda.cpp implements
// the API on the host. Not a CUDA header: only good for compiling the emitted solver.cu for the
// host.
#pragma once
#include <cstddef>
#include <cmath>
#define __host__ __attribute__((host))
#define __device__ __attribute__((device))
#define __global__ __attribute__((global))
#define __shared__ __attribute__((shared))
#define __constant__ __attribute__((constant))
#define __forceinline__ __inline__ __attribute__((always_inline))
#define __launch_bounds__(...) __attribute__((launch_bounds(__VA_ARGS__)))
#include "__clang_cuda_builtin_vars.h"
struct dim3 { unsigned x, y, z; __host__ __device__ constexpr dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {} };
struct double2 { double x, y; };
__device__ inline double2 make_double2(double a, double b) { double2 r; r.x = a; r.y = b; return r; }
typedef struct CUstream_st *cudaStream_t;
typedef struct CUgraph_st *cudaGraph_t;
typedef struct CUgraphExec_st *cudaGraphExec_t;
typedef struct CUevent_st *cudaEvent_t;
enum cudaError_t { cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorPeerAccessAlreadyEnabled = 704 };
enum cudaMemcpyKind { cudaMemcpyHostToHost = 0, cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2, cudaMemcpyDeviceToDevice = 3 };
enum cudaStreamCaptureMode { cudaStreamCaptureModeGlobal = 0, cudaStreamCaptureModeThreadLocal = 1, cudaStreamCaptureModeRelaxed = 2 };
#define cudaStreamDefault 0x00
#define cudaStreamNonBlocking 0x01
#define cudaEventDefault 0x00
#define cudaEventDisableTiming 0x02
enum cudaDeviceAttr { cudaDevAttrMaxThreadsPerMultiProcessor = 39, cudaDevAttrMultiProcessorCount = 16, cudaDevAttrComputeCapabilityMajor = 75, cudaDevAttrComputeCapabilityMinor = 76, cudaDevAttrMaxBlocksPerMultiprocessor = 106 };
struct cudaFuncAttributes { size_t sharedSizeBytes; int numRegs; int maxThreadsPerBlock; };
struct cudaDeviceProp { char name[256]; int major, minor, multiProcessorCount, maxThreadsPerMultiProcessor, maxBlocksPerMultiProcessor; };
extern "C" {
cudaError_t cudaMalloc(void **p, size_t bytes);
cudaError_t cudaFree(void *p);
cudaError_t cudaMallocHost(void **p, size_t bytes);
#define cudaHostAllocPortable 0x01
#define cudaHostAllocMapped 0x02
cudaError_t cudaHostAlloc(void **p, size_t bytes, unsigned flags);
cudaError_t cudaHostGetDevicePointer(void **dev, void *host, unsigned flags);
cudaError_t cudaFreeHost(void *p);
cudaError_t cudaMemset(void *p, int v, size_t bytes);
cudaError_t cudaMemsetAsync(void *p, int v, size_t bytes, cudaStream_t s);
cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t bytes, cudaMemcpyKind k, cudaStream_t st);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaGetLastError(void);
const char *cudaGetErrorName(cudaError_t e);
const char *cudaGetErrorString(cudaError_t e);
cudaError_t cudaGetDeviceCount(int *count);
cudaError_t cudaSetDevice(int d);
cudaError_t cudaGetDevice(int *d);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d);
cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr a, int d);
cudaError_t cudaFuncGetAttributes(cudaFuncAttributes *a, const void *f);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags);
cudaError_t cudaMemcpyPeerAsync(void *dst, int dstDevice, const void *src, int srcDevice, size_t bytes, cudaStream_t s);
cudaError_t cudaDeviceCanAccessPeer(int *can, int dev, int peer);
cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned flags);
cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode m);
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g);
cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t *e, cudaGraph_t g, unsigned long long flags);
cudaError_t cudaGraphDestroy(cudaGraph_t g);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t e);
cudaError_t cudaGraphLaunch(cudaGraphExec_t e, cudaStream_t s);
cudaError_t cudaGraphUpload(cudaGraphExec_t e, cudaStream_t s);
unsigned __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem = 0, void *stream = 0);
int cudaConfigureCall(dim3 gridDim, dim3 blockDim, size_t sharedMem = 0, cudaStream_t stream = 0);
}
__device__ double __shfl_down_sync(unsigned mask, double v, unsigned d, int w = 32);
__device__ unsigned __shfl_down_sync(unsigned mask, unsigned v, unsigned d, int w = 32);
__device__ double __shfl_up_sync(unsigned mask, double v, unsigned d, int w = 32);
__device__ unsigned __shfl_up_sync(unsigned mask, unsigned v, unsigned d, int w = 32);
__device__ void __syncthreads(void);
__device__ int __syncthreads_count(int pred);
__device__ void __syncwarp(unsigned mask = 0xffffffffu);
__device__ void __threadfence(void);
__device__ double atomicAdd(double *p, double v);
__device__ unsigned atomicAdd(unsigned *p, unsigned v);
__device__ unsigned long long atomicAdd(unsigned long long *p, unsigned long long v);
__device__ unsigned long long atomicOr(unsigned long long *p, unsigned long long v);
__device__ unsigned atomicOr(unsigned *p, unsigned v);
__device__ unsigned atomicMin(unsigned *p, unsigned v);
__device__ unsigned __shfl_xor_sync(unsigned mask, unsigned v, int lane, int w = 32);
__device__ unsigned __shfl_sync(unsigned mask, unsigned v, int lane, int w = 32);
__device__ double __ldcg(const double *p);
__device__ double __dadd_rn(double a, double b);
__device__ double __dmul_rn(double a, double b);
__device__ double __ddiv_rn(double a, double b);
__device__ bool isfinite(double);
__device__ unsigned min(unsigned a, unsigned b);
__device__ int __popc(unsigned x);
__device__ int __ffs(int x);
__device__ unsigned atomicMax(unsigned *p, unsigned v);
__device__ unsigned long long atomicMax(unsigned long long *p, unsigned long long v);
__device__ double fabs(double x);
__device__ double __dsqrt_rn(double x);
__device__ bool isnan(double);
__device__ long long __double_as_longlong(double x);
__device__ double __shfl_sync(unsigned mask, double v, int lane, int w = 32);
__device__ unsigned long long __shfl_xor_sync(unsigned mask, unsigned long long v, int lane, int w = 32);
