/* hc_half.h - __half and __nv_bfloat16 for the host runtime (cuda_fp16.h, cuda_bf16.h):
 * the storage types and the conversions strata's kernels use. Float to 16 bits rounds to
 * nearest even, keeps subnormals, overflows to infinity and gives the canonical NaN
 * (0x7fff), as the device instructions do. */
#ifndef STRATA_HC_HALF_H
#define STRATA_HC_HALF_H

#include <stdint.h>
#include <string.h>

struct __half {
    unsigned short __x;
};
struct __nv_bfloat16 {
    unsigned short __x;
};

static inline uint32_t hc_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static inline float hc_bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* ---- bfloat16 ---- */
static inline __nv_bfloat16 __float2bfloat16_rn(float f) {
    uint32_t u = hc_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return __nv_bfloat16{0x7fff};
    u += 0x7fffu + ((u >> 16) & 1u);
    return __nv_bfloat16{(unsigned short)(u >> 16)};
}
static inline __nv_bfloat16 __float2bfloat16(float f) { return __float2bfloat16_rn(f); }
static inline float __bfloat162float(__nv_bfloat16 b) { return hc_bits_f32((uint32_t)b.__x << 16); }
static inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 b) { return b.__x; }
static inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) { return __nv_bfloat16{u}; }

/* ---- half ---- */
static inline __half __float2half_rn(float f) {
    uint32_t u = hc_f32_bits(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return __half{0x7fff};
    if (a >= 0x477ff000u) return __half{(unsigned short)(sign | 0x7c00u)}; /* rounds to inf */
    if (a < 0x38800000u) { /* below the smallest normal half: a subnormal or zero */
        if (a < 0x33000000u) return __half{(unsigned short)sign}; /* under half of 2^-24 */
        uint32_t m = (a & 0x7fffffu) | 0x800000u;
        int shift = 126 - (int)(a >> 23); /* value = m · 2^(e-150); unit 2^-24 */
        uint32_t q = m >> (shift), rest = m & ((1u << shift) - 1u), half = 1u << (shift - 1);
        if (rest > half || (rest == half && (q & 1u))) q++;
        return __half{(unsigned short)(sign | q)};
    }
    uint32_t e = (a >> 23) - 112u, m = a & 0x7fffffu; /* rebias 127 -> 15 */
    uint32_t h = (e << 10) | (m >> 13), rest = m & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++;
    return __half{(unsigned short)(sign | h)};
}
static inline __half __float2half(float f) { return __float2half_rn(f); }
static inline float __half2float(__half h) {
    uint32_t sign = (uint32_t)(h.__x & 0x8000u) << 16, e = (h.__x >> 10) & 0x1fu,
             m = h.__x & 0x3ffu;
    if (e == 31) return hc_bits_f32(sign | 0x7f800000u | (m << 13));
    if (e == 0) { /* subnormal: m · 2^-24 */
        float v = (float)m * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    return hc_bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}
static inline unsigned short __half_as_ushort(__half h) { return h.__x; }
static inline __half __ushort_as_half(unsigned short u) { return __half{u}; }

#endif
