// cusparse.h for the emulated run of an emitted solver (tests/emitted_driver.rs): the part of
// cuSPARSE's generic API the emitted solver.cu calls (handle, CSR and dense-vector descriptors,
// SpMV with its buffer size and preprocessing), declared with the types and values of CUDA 12's
// header so that the driver is compiled against the same signatures (const descriptors where
// cuSPARSE takes them). mock_cuda.cpp implements it on the host. Not a cuSPARSE header.
//
// Only a plan that hands an operand to cuSPARSE may include it: plan.h, included first, says
// whether the plan does, and a solver of any other plan fails to compile here.
#pragma once
#if !defined(APG_USES_CUSPARSE) || !APG_USES_CUSPARSE
#error "cusparse.h is included by a solver whose plan hands no operand to cuSPARSE"
#endif
#include <cstddef>
#include <cstdint>
#include <cuda_runtime.h>

typedef enum {
    CUSPARSE_STATUS_SUCCESS = 0,
    CUSPARSE_STATUS_NOT_INITIALIZED = 1,
    CUSPARSE_STATUS_ALLOC_FAILED = 2,
    CUSPARSE_STATUS_INVALID_VALUE = 3,
    CUSPARSE_STATUS_EXECUTION_FAILED = 6,
    CUSPARSE_STATUS_INTERNAL_ERROR = 7,
    CUSPARSE_STATUS_NOT_SUPPORTED = 10
} cusparseStatus_t;
typedef enum { CUDA_R_32F = 0, CUDA_R_64F = 1 } cudaDataType;
typedef enum {
    CUSPARSE_OPERATION_NON_TRANSPOSE = 0,
    CUSPARSE_OPERATION_TRANSPOSE = 1,
    CUSPARSE_OPERATION_CONJUGATE_TRANSPOSE = 2
} cusparseOperation_t;
typedef enum { CUSPARSE_INDEX_16U = 1, CUSPARSE_INDEX_32I = 2, CUSPARSE_INDEX_64I = 3 } cusparseIndexType_t;
typedef enum { CUSPARSE_INDEX_BASE_ZERO = 0, CUSPARSE_INDEX_BASE_ONE = 1 } cusparseIndexBase_t;
typedef enum {
    CUSPARSE_SPMV_ALG_DEFAULT = 0,
    CUSPARSE_SPMV_COO_ALG1 = 1,
    CUSPARSE_SPMV_CSR_ALG1 = 2,
    CUSPARSE_SPMV_CSR_ALG2 = 3,
    CUSPARSE_SPMV_COO_ALG2 = 4
} cusparseSpMVAlg_t;

struct cusparseContext;
typedef struct cusparseContext *cusparseHandle_t;
struct cusparseSpMatDescr;
typedef struct cusparseSpMatDescr *cusparseSpMatDescr_t;
typedef struct cusparseSpMatDescr const *cusparseConstSpMatDescr_t;
struct cusparseDnVecDescr;
typedef struct cusparseDnVecDescr *cusparseDnVecDescr_t;
typedef struct cusparseDnVecDescr const *cusparseConstDnVecDescr_t;

extern "C" {
cusparseStatus_t cusparseCreate(cusparseHandle_t *handle);
cusparseStatus_t cusparseDestroy(cusparseHandle_t handle);
cusparseStatus_t cusparseSetStream(cusparseHandle_t handle, cudaStream_t stream);
const char *cusparseGetErrorName(cusparseStatus_t status);
const char *cusparseGetErrorString(cusparseStatus_t status);
cusparseStatus_t cusparseCreateCsr(cusparseSpMatDescr_t *descr, int64_t rows, int64_t cols, int64_t nnz,
                                   void *row_offsets, void *col_ind, void *values,
                                   cusparseIndexType_t row_offsets_type, cusparseIndexType_t col_ind_type,
                                   cusparseIndexBase_t base, cudaDataType value_type);
cusparseStatus_t cusparseDestroySpMat(cusparseConstSpMatDescr_t descr);
cusparseStatus_t cusparseCreateDnVec(cusparseDnVecDescr_t *descr, int64_t size, void *values,
                                     cudaDataType value_type);
cusparseStatus_t cusparseDestroyDnVec(cusparseConstDnVecDescr_t descr);
cusparseStatus_t cusparseDnVecSetValues(cusparseDnVecDescr_t descr, void *values);
cusparseStatus_t cusparseSpMV_bufferSize(cusparseHandle_t handle, cusparseOperation_t op, const void *alpha,
                                         cusparseConstSpMatDescr_t a, cusparseConstDnVecDescr_t x,
                                         const void *beta, cusparseDnVecDescr_t y, cudaDataType compute,
                                         cusparseSpMVAlg_t alg, size_t *bytes);
cusparseStatus_t cusparseSpMV_preprocess(cusparseHandle_t handle, cusparseOperation_t op, const void *alpha,
                                         cusparseConstSpMatDescr_t a, cusparseConstDnVecDescr_t x,
                                         const void *beta, cusparseDnVecDescr_t y, cudaDataType compute,
                                         cusparseSpMVAlg_t alg, void *buffer);
cusparseStatus_t cusparseSpMV(cusparseHandle_t handle, cusparseOperation_t op, const void *alpha,
                              cusparseConstSpMatDescr_t a, cusparseConstDnVecDescr_t x, const void *beta,
                              cusparseDnVecDescr_t y, cudaDataType compute, cusparseSpMVAlg_t alg,
                              void *buffer);
}
