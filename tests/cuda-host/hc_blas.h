/* hc_blas.h - the part of cuBLAS strata calls, for the host runtime (hc_blas.cc): a
 * handle bound to a stream and a workspace, and GemmEx / GemmStridedBatchedEx as a plain
 * column-major reference with cuBLAS's argument checks, run in stream order (captured
 * into graphs like any other work). It tests strata's calls to cuBLAS, not cuBLAS. */
#ifndef STRATA_HC_BLAS_H
#define STRATA_HC_BLAS_H

#include <stddef.h>
#include <stdint.h>

#include "tests/cuda-host/hc_api.h"

typedef enum {
    CUBLAS_STATUS_SUCCESS = 0,
    CUBLAS_STATUS_NOT_INITIALIZED = 1,
    CUBLAS_STATUS_ALLOC_FAILED = 3,
    CUBLAS_STATUS_INVALID_VALUE = 7,
    CUBLAS_STATUS_ARCH_MISMATCH = 8,
    CUBLAS_STATUS_MAPPING_ERROR = 11,
    CUBLAS_STATUS_EXECUTION_FAILED = 13,
    CUBLAS_STATUS_INTERNAL_ERROR = 14,
    CUBLAS_STATUS_NOT_SUPPORTED = 15,
} cublasStatus_t;

typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1, CUBLAS_OP_C = 2 } cublasOperation_t;

typedef enum {
    CUBLAS_COMPUTE_16F = 64,
    CUBLAS_COMPUTE_32F = 68,
    CUBLAS_COMPUTE_32F_PEDANTIC = 69,
    CUBLAS_COMPUTE_64F = 70,
    CUBLAS_COMPUTE_32F_FAST_16F = 74,
    CUBLAS_COMPUTE_32F_FAST_16BF = 75,
    CUBLAS_COMPUTE_32F_FAST_TF32 = 77,
} cublasComputeType_t;

typedef enum { CUBLAS_GEMM_DEFAULT = -1, CUBLAS_GEMM_DEFAULT_TENSOR_OP = 99 } cublasGemmAlgo_t;

typedef struct hc_blas *cublasHandle_t;

/* GemmStridedBatchedEx's parameters (cuBLAS's: sa, sb and sc are the strides between the
 * batch's matrices), written once for the declaration below and the definition. */
#define HC_GEMM_STRIDED_PARAMS                                                                     \
    cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,             \
        const void *alpha, const void *A, cudaDataType at, int lda, long long sa, const void *B,   \
        cudaDataType bt, int ldb, long long sb, const void *beta, void *C, cudaDataType ct,        \
        int ldc, long long sc, int batch, cublasComputeType_t compute, cublasGemmAlgo_t algo

extern "C" {
cublasStatus_t cublasCreate(cublasHandle_t *h);
cublasStatus_t cublasDestroy(cublasHandle_t h);
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s);
cublasStatus_t cublasGetStream(cublasHandle_t h, cudaStream_t *s);
cublasStatus_t cublasSetWorkspace(cublasHandle_t h, void *ws, size_t bytes);
const char *cublasGetStatusString(cublasStatus_t s);
const char *cublasGetStatusName(cublasStatus_t s);
cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                            int n, int k, const void *alpha, const void *A, cudaDataType at,
                            int lda, const void *B, cudaDataType bt, int ldb, const void *beta,
                            void *C, cudaDataType ct, int ldc, cublasComputeType_t compute,
                            cublasGemmAlgo_t algo);
cublasStatus_t cublasGemmStridedBatchedEx(HC_GEMM_STRIDED_PARAMS);
}

#endif
