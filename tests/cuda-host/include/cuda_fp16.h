/* cuda_fp16.h for kernels/cuda compiled on the host: tests/cuda-host/README.md. */
#ifndef STRATA_HC_CUDA_FP16_H
#define STRATA_HC_CUDA_FP16_H
#include "tests/cuda-host/hc_half.h"
#endif
