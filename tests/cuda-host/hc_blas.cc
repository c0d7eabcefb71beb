/* hc_blas.cc - cuBLAS's GemmEx and GemmStridedBatchedEx as a plain reference (hc_blas.h).
 *
 * C = alpha · op(A) · op(B) + beta · C, column-major, A / B in f32, f16 or bf16, C in f32,
 * f32 accumulation in the order of k. The arguments are checked as cuBLAS checks them
 * (CUBLAS_STATUS_INVALID_VALUE, NOT_SUPPORTED); the matrices must lie inside device
 * allocations, since cuBLAS would fault on a host pointer. With beta = 0, C is not read:
 * cuBLAS defines that, and C is often fresh (NaN) memory. The product runs on the handle's
 * stream, so it is ordered with the kernels around it and is captured into graphs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "tests/cuda-host/hc_blas.h"
#include "tests/cuda-host/hc_half.h"
#include "tests/cuda-host/hc_internal.h"

struct hc_blas {
    cudaStream_t stream = 0;
    void *ws = NULL;
    size_t ws_bytes = 0;
};

cublasStatus_t cublasCreate(cublasHandle_t *h) {
    if (!h) return CUBLAS_STATUS_INVALID_VALUE;
    *h = new hc_blas();
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy(cublasHandle_t h) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    cudaStreamSynchronize(h->stream);
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    h->stream = s;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetStream(cublasHandle_t h, cudaStream_t *s) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!s) return CUBLAS_STATUS_INVALID_VALUE;
    *s = h->stream;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetWorkspace(cublasHandle_t h, void *ws, size_t bytes) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (bytes && (!ws || hc_locate(ws, bytes) != HC_DEVICE || (uintptr_t)ws % 256))
        return CUBLAS_STATUS_INVALID_VALUE;
    h->ws = ws;
    h->ws_bytes = bytes;
    return CUBLAS_STATUS_SUCCESS;
}

const char *cublasGetStatusName(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    }
    return "CUBLAS_STATUS_UNKNOWN";
}

const char *cublasGetStatusString(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "an absent device architectural feature is required";
    case CUBLAS_STATUS_MAPPING_ERROR: return "an access to GPU memory space failed";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "an internal operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    }
    return "unknown error";
}

/* ---- the product ---- */

static size_t hc_dt_size(cudaDataType t) {
    return t == CUDA_R_32F ? 4 : t == CUDA_R_16F || t == CUDA_R_16BF ? 2 : 0;
}

static float hc_get(const void *p, cudaDataType t, size_t i) {
    if (t == CUDA_R_16BF) return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    if (t == CUDA_R_16F) return __half2float(((const __half *)p)[i]);
    return ((const float *)p)[i];
}

/* op(X) [rows, inner] as a dense row-major f32 panel: X column-major with leading
 * dimension ld, transposed when op is T. */
static std::vector<float> hc_panel(const void *X, cudaDataType t, int ld, cublasOperation_t op,
                                   int rows, int inner) {
    std::vector<float> p((size_t)rows * inner);
    for (int r = 0; r < rows; r++)
        for (int l = 0; l < inner; l++)
            p[(size_t)r * inner + l] = op == CUBLAS_OP_N ? hc_get(X, t, (size_t)l * ld + r)
                                                         : hc_get(X, t, (size_t)r * ld + l);
    return p;
}

struct hc_gemm {
    cublasOperation_t ta, tb;
    int m, n, k;
    float alpha, beta;
    const void *A, *B;
    void *C;
    cudaDataType at, bt;
    int lda, ldb, ldc;
    long long sa, sb, sc;
    int batch;
};

static void hc_gemm_run(const hc_gemm &g) {
    for (int bi = 0; bi < g.batch; bi++) {
        const char *A = (const char *)g.A + (size_t)bi * g.sa * hc_dt_size(g.at);
        const char *B = (const char *)g.B + (size_t)bi * g.sb * hc_dt_size(g.bt);
        float *C = (float *)g.C + (size_t)bi * g.sc;
        /* rows of op(A) [m, k] and columns of op(B) [k, n], both as rows of k */
        std::vector<float> a = hc_panel(A, g.at, g.lda, g.ta, g.m, g.k);
        std::vector<float> b =
            hc_panel(B, g.bt, g.ldb, g.tb == CUBLAS_OP_N ? CUBLAS_OP_T : CUBLAS_OP_N, g.n, g.k);
        for (int j = 0; j < g.n; j++)
            for (int i = 0; i < g.m; i++) {
                const float *ar = &a[(size_t)i * g.k], *bc = &b[(size_t)j * g.k];
                float acc = 0.0f;
                for (int l = 0; l < g.k; l++) acc += ar[l] * bc[l];
                float *c = &C[(size_t)j * g.ldc + i];
                *c = g.beta == 0.0f ? g.alpha * acc : g.alpha * acc + g.beta * *c;
            }
    }
}

/* The bytes a column-major rows x cols matrix with leading dimension ld spans. */
static size_t hc_span(int rows, int cols, int ld, size_t elem) {
    if (!rows || !cols) return 0;
    return ((size_t)(cols - 1) * ld + rows) * elem;
}

static void hc_gemm_fault(const char *what, const void *p) {
    fprintf(stderr,
            "cuda-host: cublasGemmEx: matrix %s at %p is not inside one device allocation (cuBLAS "
            "would fault)\n",
            what, p);
    fflush(stderr);
    abort();
}

static cublasStatus_t hc_gemm_submit(cublasHandle_t h, hc_gemm g, const void *alpha,
                                     const void *beta, cudaDataType ct,
                                     cublasComputeType_t compute) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if ((g.ta != CUBLAS_OP_N && g.ta != CUBLAS_OP_T && g.ta != CUBLAS_OP_C) ||
        (g.tb != CUBLAS_OP_N && g.tb != CUBLAS_OP_T && g.tb != CUBLAS_OP_C) || g.m < 0 || g.n < 0 ||
        g.k < 0 || g.batch < 0 || !alpha || !beta)
        return CUBLAS_STATUS_INVALID_VALUE;
    const int a_rows = g.ta == CUBLAS_OP_N ? g.m : g.k, a_cols = g.ta == CUBLAS_OP_N ? g.k : g.m;
    const int b_rows = g.tb == CUBLAS_OP_N ? g.k : g.n, b_cols = g.tb == CUBLAS_OP_N ? g.n : g.k;
    if (g.lda < (a_rows > 1 ? a_rows : 1) || g.ldb < (b_rows > 1 ? b_rows : 1) ||
        g.ldc < (g.m > 1 ? g.m : 1))
        return CUBLAS_STATUS_INVALID_VALUE;
    /* f32 output with f32 compute, from f32 or matching 16-bit inputs: what strata uses */
    bool types_ok = ct == CUDA_R_32F && g.at == g.bt &&
                    (g.at == CUDA_R_32F || g.at == CUDA_R_16F || g.at == CUDA_R_16BF);
    bool compute_ok = compute == CUBLAS_COMPUTE_32F || compute == CUBLAS_COMPUTE_32F_PEDANTIC ||
                      (g.at == CUDA_R_32F && (compute == CUBLAS_COMPUTE_32F_FAST_TF32 ||
                                              compute == CUBLAS_COMPUTE_32F_FAST_16BF ||
                                              compute == CUBLAS_COMPUTE_32F_FAST_16F));
    if (!types_ok || !compute_ok) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (!g.m || !g.n || !g.batch) return CUBLAS_STATUS_SUCCESS;
    g.alpha = *(const float *)alpha;
    g.beta = *(const float *)beta;
    /* the first and the last matrix of a batch bound what it touches */
    const int ends[2] = {0, g.batch - 1};
    for (int e = 0; e < 2; e++) {
        const char *A = (const char *)g.A + (size_t)ends[e] * g.sa * hc_dt_size(g.at);
        const char *B = (const char *)g.B + (size_t)ends[e] * g.sb * hc_dt_size(g.bt);
        const char *C = (const char *)g.C + (size_t)ends[e] * g.sc * 4;
        if (g.k && hc_locate(A, hc_span(a_rows, a_cols, g.lda, hc_dt_size(g.at))) != HC_DEVICE)
            hc_gemm_fault("A", A);
        if (g.k && hc_locate(B, hc_span(b_rows, b_cols, g.ldb, hc_dt_size(g.bt))) != HC_DEVICE)
            hc_gemm_fault("B", B);
        if (hc_locate(C, hc_span(g.m, g.n, g.ldc, 4)) != HC_DEVICE) hc_gemm_fault("C", C);
    }
    cudaError_t e = hc_enqueue(h->stream, [g] {
        hc_stat("cublasGemmEx");
        hc_gemm_run(g);
    });
    return e == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                            int n, int k, const void *alpha, const void *A, cudaDataType at,
                            int lda, const void *B, cudaDataType bt, int ldb, const void *beta,
                            void *C, cudaDataType ct, int ldc, cublasComputeType_t compute,
                            cublasGemmAlgo_t algo) {
    (void)algo;
    hc_gemm g = {ta, tb, m, n, k, 0, 0, A, B, C, at, bt, lda, ldb, ldc, 0, 0, 0, 1};
    return hc_gemm_submit(h, g, alpha, beta, ct, compute);
}

cublasStatus_t cublasGemmStridedBatchedEx(HC_GEMM_STRIDED_PARAMS) {
    (void)algo;
    hc_gemm g = {ta, tb, m, n, k, 0, 0, A, B, C, at, bt, lda, ldb, ldc, sa, sb, sc, batch};
    return hc_gemm_submit(h, g, alpha, beta, ct, compute);
}
