/* hc_half.h - __half and __nv_bfloat16 for the host runtime (cuda_fp16.h, cuda_bf16.h):
 * the storage types and the conversions strata's kernels use. The rounding is the
 * project's reference (engine/base/dtype.h: nearest even, subnormals kept, overflow to
 * infinity); only NaN differs, as the device instructions give the canonical 0x7fff. */
#ifndef STRATA_HC_HALF_H
#define STRATA_HC_HALF_H

#include <math.h>
#include <stdint.h>

extern "C" { /* dtype.c's functions keep their C names (kernels/backend.h includes it so) */
#include "engine/base/dtype.h"
}

struct __half {
    unsigned short __x;
};
struct __nv_bfloat16 {
    unsigned short __x;
};

static inline __nv_bfloat16 __float2bfloat16_rn(float f) {
    return __nv_bfloat16{isnan(f) ? (unsigned short)0x7fff : dtype_f32_to_bf16(f)};
}
static inline __nv_bfloat16 __float2bfloat16(float f) { return __float2bfloat16_rn(f); }
static inline float __bfloat162float(__nv_bfloat16 b) { return dtype_bf16_to_f32(b.__x); }
static inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 b) { return b.__x; }
static inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) { return __nv_bfloat16{u}; }

static inline __half __float2half_rn(float f) {
    return __half{isnan(f) ? (unsigned short)0x7fff : dtype_f32_to_f16(f)};
}
static inline __half __float2half(float f) { return __float2half_rn(f); }
static inline float __half2float(__half h) { return dtype_f16_to_f32(h.__x); }
static inline unsigned short __half_as_ushort(__half h) { return h.__x; }
static inline __half __ushort_as_half(unsigned short u) { return __half{u}; }

#endif
