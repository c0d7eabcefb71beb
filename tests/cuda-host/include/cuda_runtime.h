/* cuda_runtime.h for kernels/cuda compiled on the host: tests/cuda-host/README.md. */
#ifndef STRATA_HC_CUDA_RUNTIME_H
#define STRATA_HC_CUDA_RUNTIME_H
#include "tests/cuda-host/hc_api.h"
#include "tests/cuda-host/hc_device.h"
#endif
