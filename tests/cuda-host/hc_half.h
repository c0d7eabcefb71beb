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

/* One 16-bit float type T stored as the bits of dtype.c's to16 (f32 to T) and from16 (T to
 * f32): the struct, f2t_rn and its alias f2t (f32 to T, NaN canonical), t2f (T to f32) and
 * the bit casts t_as_u and u_as_t. */
#define HC_HALF_TYPE(T, f2t_rn, f2t, t2f, t_as_u, u_as_t, to16, from16)                            \
    struct T {                                                                                     \
        unsigned short __x;                                                                        \
    };                                                                                             \
    static inline T f2t_rn(float f) { return T{isnan(f) ? (unsigned short)0x7fff : to16(f)}; }     \
    static inline T f2t(float f) { return f2t_rn(f); }                                             \
    static inline float t2f(T h) { return from16(h.__x); }                                         \
    static inline unsigned short t_as_u(T h) { return h.__x; }                                     \
    static inline T u_as_t(unsigned short u) { return T{u}; }

HC_HALF_TYPE(__half, __float2half_rn, __float2half, __half2float, __half_as_ushort,
             __ushort_as_half, dtype_f32_to_f16, dtype_f16_to_f32)
HC_HALF_TYPE(__nv_bfloat16, __float2bfloat16_rn, __float2bfloat16, __bfloat162float,
             __bfloat16_as_ushort, __ushort_as_bfloat16, dtype_f32_to_bf16, dtype_bf16_to_f32)
#undef HC_HALF_TYPE

#endif
