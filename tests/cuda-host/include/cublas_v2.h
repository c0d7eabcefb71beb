/* cublas_v2.h for kernels/cuda compiled on the host: tests/cuda-host/README.md. */
#ifndef STRATA_HC_CUBLAS_V2_H
#define STRATA_HC_CUBLAS_V2_H
#include "tests/cuda-host/hc_blas.h"
#endif
