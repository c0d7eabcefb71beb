/* immintrin.h (tests/avx512emu) - stands in for the compiler's header when
 * test_avx512_kernels.sh builds an AVX-512 kernel file for a CPU without AVX-512: SIMDe
 * (libsimde-dev) implements the intrinsics in portable C under their own names, and the
 * few this SIMDe release lacks are written out below, each as the Intel guide defines it.
 * Test-only: never on the include path of the real build. */
#ifndef STRATA_AVX512EMU_IMMINTRIN_H
#define STRATA_AVX512EMU_IMMINTRIN_H

#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>
#include <simde/x86/f16c.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

typedef simde__mmask64 __mmask64;
typedef simde__mmask32 __mmask32;
typedef simde__mmask16 __mmask16;

static inline float emu_cvtsh_ss(unsigned short h) {
    return simde_mm_cvtss_f32(simde_mm_cvtph_ps(simde_mm_cvtsi32_si128(h)));
}
#define _cvtsh_ss emu_cvtsh_ss

static inline int emu_reduce_add_epi32(simde__m512i v) {
    int32_t a[16], s = 0;
    memcpy(a, &v, 64);
    for (int i = 0; i < 16; i++) s += a[i];
    return s;
}
#define _mm512_reduce_add_epi32 emu_reduce_add_epi32

/* 128-bit lane l of the result: a's lane imm[2l+1:2l] for l < 2, b's for l >= 2 */
static inline simde__m512i emu_shuffle_i64x2(simde__m512i a, simde__m512i b, int imm) {
    uint64_t x[8], y[8], r[8];
    memcpy(x, &a, 64);
    memcpy(y, &b, 64);
    for (int l = 0; l < 4; l++) {
        int s = (imm >> (2 * l)) & 3;
        const uint64_t *src = l < 2 ? x : y;
        r[2 * l] = src[2 * s];
        r[2 * l + 1] = src[2 * s + 1];
    }
    simde__m512i o;
    memcpy(&o, r, 64);
    return o;
}
#define _mm512_shuffle_i64x2 emu_shuffle_i64x2

/* The 16 lanes of v (of elem) converted to f32 by conv. */
#define EMU_CVT_PS512(name, in_type, elem, conv)                                                   \
    static inline simde__m512 name(in_type v) {                                                    \
        elem a[16];                                                                                \
        float f[16];                                                                               \
        memcpy(a, &v, sizeof a);                                                                   \
        for (int i = 0; i < 16; i++) f[i] = conv(a[i]);                                            \
        simde__m512 o;                                                                             \
        memcpy(&o, f, sizeof f);                                                                   \
        return o;                                                                                  \
    }
#define EMU_INT_TO_FLOAT(x) ((float)(x))
EMU_CVT_PS512(emu_cvtph_ps512, simde__m256i, uint16_t, emu_cvtsh_ss)
EMU_CVT_PS512(emu_cvtepi32_ps512, simde__m512i, int32_t, EMU_INT_TO_FLOAT)
#define _mm512_cvtph_ps emu_cvtph_ps512
#define _mm512_cvtepi32_ps emu_cvtepi32_ps512

/* a - b in the lanes k selects, src elsewhere */
static inline simde__m256i emu_mask_sub_epi8(simde__m256i src, simde__mmask32 k, simde__m256i a,
                                             simde__m256i b) {
    int8_t s[32], x[32], y[32];
    memcpy(s, &src, 32);
    memcpy(x, &a, 32);
    memcpy(y, &b, 32);
    for (int i = 0; i < 32; i++)
        if ((k >> i) & 1) s[i] = (int8_t)(x[i] - y[i]);
    simde__m256i o;
    memcpy(&o, s, 32);
    return o;
}
#define _mm256_mask_sub_epi8 emu_mask_sub_epi8

static inline simde__m256 emu_extractf32x8_ps(simde__m512 v, int i) {
    simde__m256 o;
    memcpy(&o, (const char *)&v + 32 * (i & 1), 32);
    return o;
}
#define _mm512_extractf32x8_ps emu_extractf32x8_ps

/* SIMDe's portable FMA rounds twice (a·b, then + c); the hardware, and the scalar kernels'
 * fmaf, round once. */
#define EMU_FMA(name, type, n, sign)                                                               \
    static inline type name(type a, type b, type c) {                                              \
        float x[n], y[n], z[n];                                                                    \
        memcpy(x, &a, sizeof x);                                                                   \
        memcpy(y, &b, sizeof y);                                                                   \
        memcpy(z, &c, sizeof z);                                                                   \
        for (int i = 0; i < n; i++) z[i] = fmaf(sign x[i], y[i], z[i]);                            \
        type o;                                                                                    \
        memcpy(&o, z, sizeof o);                                                                   \
        return o;                                                                                  \
    }
EMU_FMA(emu_fmadd_ps256, simde__m256, 8, +)
EMU_FMA(emu_fnmadd_ps256, simde__m256, 8, -)
EMU_FMA(emu_fmadd_ps512, simde__m512, 16, +)
EMU_FMA(emu_fnmadd_ps512, simde__m512, 16, -)
#undef _mm256_fmadd_ps
#undef _mm256_fnmadd_ps
#undef _mm512_fmadd_ps
#undef _mm512_fnmadd_ps
#define _mm256_fmadd_ps emu_fmadd_ps256
#define _mm256_fnmadd_ps emu_fnmadd_ps256
#define _mm512_fmadd_ps emu_fmadd_ps512
#define _mm512_fnmadd_ps emu_fnmadd_ps512

/* This SIMDe release aliases _mm512_madd_epi16 with the masked form's four arguments. */
#undef _mm512_madd_epi16
#define _mm512_madd_epi16 simde_mm512_madd_epi16

/* ---- for cpu_matmul_avx512.c (and the Q4_K decode's pair of rows) ---- */

/* Masked loads touch only the selected elements, as the hardware's never fault past them. */
#define EMU_MASKZ_LOAD(name, type, elem, n, mask_t)                                                \
    static inline type name(mask_t k, const void *p) {                                             \
        elem a[n] = {0};                                                                           \
        for (int i = 0; i < n; i++)                                                                \
            if ((k >> i) & 1) memcpy(&a[i], (const elem *)p + i, sizeof(elem));                    \
        type o;                                                                                    \
        memcpy(&o, a, sizeof a);                                                                   \
        return o;                                                                                  \
    }
EMU_MASKZ_LOAD(emu_maskz_loadu_epi16_512, simde__m512i, uint16_t, 32, simde__mmask32)
EMU_MASKZ_LOAD(emu_maskz_loadu_epi16_256, simde__m256i, uint16_t, 16, simde__mmask16)
EMU_MASKZ_LOAD(emu_maskz_loadu_ps_512, simde__m512, float, 16, simde__mmask16)
#define _mm512_maskz_loadu_epi16 emu_maskz_loadu_epi16_512
#define _mm256_maskz_loadu_epi16 emu_maskz_loadu_epi16_256
#define _mm512_maskz_loadu_ps emu_maskz_loadu_ps_512

static inline void emu_mask_storeu_epi16_256(void *p, simde__mmask16 k, simde__m256i v) {
    uint16_t a[16];
    memcpy(a, &v, sizeof a);
    for (int i = 0; i < 16; i++)
        if ((k >> i) & 1) memcpy((uint16_t *)p + i, &a[i], 2);
}
#define _mm256_mask_storeu_epi16 emu_mask_storeu_epi16_256

/* Zero extension of n lanes of in_t to out_t. */
#define EMU_WIDEN(name, vin, in_t, vout, out_t, n)                                                 \
    static inline vout name(vin v) {                                                               \
        in_t a[n];                                                                                 \
        out_t o[n];                                                                                \
        memcpy(a, &v, sizeof a);                                                                   \
        for (int i = 0; i < n; i++) o[i] = a[i];                                                   \
        vout r;                                                                                    \
        memcpy(&r, o, sizeof o);                                                                   \
        return r;                                                                                  \
    }
EMU_WIDEN(emu_cvtepu16_epi32, simde__m256i, uint16_t, simde__m512i, uint32_t, 16)
EMU_WIDEN(emu_cvtepu8_epi16, simde__m256i, uint8_t, simde__m512i, uint16_t, 32)
#define _mm512_cvtepu16_epi32 emu_cvtepu16_epi32
#define _mm512_cvtepu8_epi16 emu_cvtepu8_epi16

/* vcvtneps2bf16: nearest even, NaN quieted, subnormal inputs read as zero. Returned as the
 * integer vector the kernel casts it to. */
static inline simde__m256i emu_cvtneps_pbh(simde__m512 v) {
    uint32_t a[16];
    uint16_t o[16];
    memcpy(a, &v, sizeof a);
    for (int i = 0; i < 16; i++) {
        uint32_t u = a[i];
        if ((u & 0x7fffffffu) > 0x7f800000u) o[i] = (uint16_t)((u >> 16) | 0x40);
        else if ((u & 0x7f800000u) == 0) o[i] = (uint16_t)((u >> 16) & 0x8000);
        else o[i] = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
    }
    simde__m256i r;
    memcpy(&r, o, sizeof o);
    return r;
}
#define _mm512_cvtneps_pbh emu_cvtneps_pbh

/* The compiler's tree: halves of 512, of 256, then pairs 2 apart, then 1. */
static inline float emu_reduce_add_ps(simde__m512 v) {
    float a[16];
    memcpy(a, &v, sizeof a);
    for (int w = 8; w >= 1; w /= 2)
        for (int i = 0; i < w; i++) a[i] = a[i] + a[i + w];
    return a[0];
}
#define _mm512_reduce_add_ps emu_reduce_add_ps

#endif
