/* quant_encode.c - f32 -> Q8_0 / Q4_0 / Q5_0 / Q4_K / Q6_K with the reference quantizers of
 * llama.cpp's ggml-quants.c (quantize_row_q8_0_ref, _q4_0_ref, _q5_0_ref, _q4_K_ref with
 * make_qkx2_quants, and _q6_K_ref with make_qx_quants), rewritten here from their
 * description.
 *
 * The point is bit-exactness: a model quantized here is the model llama.cpp makes from the
 * same f32 values. So every float expression keeps llama.cpp's operand order (float
 * arithmetic is not associative), rounding goes through the same nearest_int trick, and
 * narrowing casts wrap the same way. This file is built without FMA flags and in ISO C
 * mode, where GCC does not contract a·b + c, as llama.cpp's reference C is built for
 * generic x86-64. Plain, but for Q4_K's fit (quantize-on-load runs it for every weight). */
#include <math.h>
#include <string.h>

#include "engine/base/quant.h"

#ifdef __clang__
#pragma clang fp contract(off) /* GCC keeps a·b + c apart in ISO C mode; clang needs asking */
#endif

/* Round to nearest, ties to even, for |f| < 2^22: adding 1.5·2^23 leaves the integer in
 * the low mantissa bits (llama.cpp's nearest_int). Only the mantissa is read back, so an
 * out-of-range input gives a wrong value, never undefined behaviour. */
static int quant_nearest_int(float f) {
    float v = f + 12582912.0f;
    int32_t i;
    memcpy(&i, &v, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

/* (int8_t)f for the truncating conversions llama.cpp makes; 0 where C leaves it undefined
 * (NaN or out of range, which finite block inputs never produce). */
static int8_t quant_trunc_i8(float f) { return f > -129.0f && f < 128.0f ? (int8_t)f : 0; }

static void quant_row_q8_0(quant_block_q8_0 *y, const float *x, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += 32) {
        float amax = 0.0f;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax / 127, id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = dtype_f32_to_f16(d);
        for (int j = 0; j < 32; j++) y[i].qs[j] = quant_trunc_i8(roundf(x[j] * id));
    }
}

/* The signed value of largest magnitude of 32 (the first one on a tie; 0 for all zeros). */
static float quant_signed_max32(const float *x) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < 32; j++)
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    return max;
}

static void quant_row_q4_0(quant_block_q4_0 *y, const float *x, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += 32) {
        /* the signed value of largest magnitude maps to -8 */
        const float d = quant_signed_max32(x) / -8, id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = dtype_f32_to_f16(d);
        for (int j = 0; j < 16; j++) {
            int q0 = quant_trunc_i8(x[j] * id + 8.5f), q1 = quant_trunc_i8(x[j + 16] * id + 8.5f);
            q0 = q0 < 15 ? q0 : 15;
            q1 = q1 < 15 ? q1 : 15;
            y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

static void quant_row_q5_0(quant_block_q5_0 *y, const float *x, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += 32) {
        /* as Q4_0, with the value of largest magnitude at -16 */
        const float d = quant_signed_max32(x) / -16, id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = dtype_f32_to_f16(d);
        uint32_t qh = 0;
        for (int j = 0; j < 16; j++) {
            int q0 = quant_trunc_i8(x[j] * id + 16.5f), q1 = quant_trunc_i8(x[j + 16] * id + 16.5f);
            q0 = q0 < 31 ? q0 : 31;
            q1 = q1 < 31 ? q1 : 31;
            y[i].qs[j] = (uint8_t)((q0 & 15) | (q1 & 15) << 4);
            qh |= (uint32_t)(q0 >> 4 & 1) << j | (uint32_t)(q1 >> 4 & 1) << (j + 16);
        }
        for (int b = 0; b < 4; b++) y[i].qh[b] = (uint8_t)(qh >> 8 * b);
    }
}

/* The code of x for inverse scale is: nearest_int(is · (x - min)) clamped to [0, 15]. */
static inline int quant_q4_k_code(float is, float xm) {
    int l = quant_nearest_int(is * xm);
    return l < 0 ? 0 : l > 15 ? 15 : l;
}

/* llama.cpp's quantize_row_q4_K_ref fits each 32-value sub-block with make_qkx2_quants
 * (nmax 15, rmin -1, rdelta 0.1, nstep 20): an asymmetric fit x ≈ scale·L + min, weighted
 * least squares over 21 trial scales around 15 / (max - min), where a trial that lowers the
 * error becomes the fit and moves min for the trials after it. That search is nine tenths
 * of a Q4_K conversion, and quantize-on-load runs it for every weight, so here the 8
 * sub-blocks of a block run it side by side: every array below is [element][sub-block],
 * and every loop over sub-blocks is innermost, which the compiler turns into vector lanes.
 * Each lane does exactly the scalar fit's operations in its order (the selects replace the
 * branches), so the bytes are llama.cpp's (tests/unit/test_quant.c holds them to llama.cpp's
 * own). Out: the 8 scales, the 8 -min (>= 0), and L[32·j + l]. */
enum { QK4_SUBS = 8, QK4_SUBN = 32, QK4_TRIALS = 21 };
#if defined(__x86_64__) && defined(__GNUC__)
/* 8 lanes of 32 bits: one AVX2 vector where the CPU has it (x86-64's baseline is SSE2's 4),
 * picked at load time; no contraction into FMAs in any clone (see the file's head). */
__attribute__((target_clones("avx2", "default")))
#endif
static void
quant_fit_q4_k_subs(const float *x, uint8_t *L, float *scales, float *neg_mins) {
    float xt[QK4_SUBN][QK4_SUBS], wt[QK4_SUBN][QK4_SUBS];
    /* codes in 32 bits, so that every loop has one vector type */
    int32_t lt[QK4_SUBN][QK4_SUBS], la[QK4_SUBN][QK4_SUBS];
    float s2[QK4_SUBS], mn[QK4_SUBS], mx[QK4_SUBS], sw[QK4_SUBS], sx[QK4_SUBS];
    float mn0[QK4_SUBS], best[QK4_SUBS], scale[QK4_SUBS], is[QK4_SUBS];
    float sl[QK4_SUBS], sl2[QK4_SUBS], sxl[QK4_SUBS], ts[QK4_SUBS], tm[QK4_SUBS], err[QK4_SUBS];
    int ok[QK4_SUBS], win[QK4_SUBS];
    for (int l = 0; l < QK4_SUBN; l++)
        for (int j = 0; j < QK4_SUBS; j++) xt[l][j] = x[QK4_SUBN * j + l];
    /* weights favour the large values of the sub-block */
    for (int j = 0; j < QK4_SUBS; j++) s2[j] = 0;
    for (int l = 0; l < QK4_SUBN; l++)
        for (int j = 0; j < QK4_SUBS; j++) s2[j] += xt[l][j] * xt[l][j];
    for (int j = 0; j < QK4_SUBS; j++) s2[j] = sqrtf(s2[j] / 32);
    for (int l = 0; l < QK4_SUBN; l++)
        for (int j = 0; j < QK4_SUBS; j++) wt[l][j] = s2[j] + fabsf(xt[l][j]);
    for (int j = 0; j < QK4_SUBS; j++) {
        mn[j] = mx[j] = xt[0][j];
        sw[j] = wt[0][j];
        sx[j] = sw[j] * xt[0][j];
    }
    for (int l = 1; l < QK4_SUBN; l++)
        for (int j = 0; j < QK4_SUBS; j++) {
            mn[j] = xt[l][j] < mn[j] ? xt[l][j] : mn[j];
            mx[j] = xt[l][j] > mx[j] ? xt[l][j] : mx[j];
            sw[j] += wt[l][j];
            sx[j] += wt[l][j] * xt[l][j];
        }
    for (int j = 0; j < QK4_SUBS; j++) {
        mn[j] = mn[j] > 0 ? 0 : mn[j];
        mn0[j] = mn[j];
        is[j] = 15.0f / (mx[j] - mn[j]); /* a flat sub-block (mx = mn) is fixed up below */
        scale[j] = 1 / is[j];
        best[j] = 0;
    }
    for (int l = 0; l < QK4_SUBN; l++)
        for (int j = 0; j < QK4_SUBS; j++) {
            const int q = quant_q4_k_code(is[j], xt[l][j] - mn[j]);
            const float diff = scale[j] * (float)q + mn[j] - xt[l][j];
            lt[l][j] = q;
            best[j] += wt[l][j] * (diff * diff);
        }
    for (int t = 0; t < QK4_TRIALS; t++) {
        for (int j = 0; j < QK4_SUBS; j++) {
            is[j] = (-1.0f + 0.1f * (float)t + 15.0f) / (mx[j] - mn[j]);
            sl[j] = sl2[j] = sxl[j] = err[j] = 0;
        }
        for (int l = 0; l < QK4_SUBN; l++)
            for (int j = 0; j < QK4_SUBS; j++) {
                const int q = quant_q4_k_code(is[j], xt[l][j] - mn[j]);
                const float fl = (float)q;
                la[l][j] = q;
                sl[j] += wt[l][j] * fl;
                sl2[j] += wt[l][j] * fl * fl;
                sxl[j] += wt[l][j] * fl * xt[l][j];
            }
        for (int j = 0; j < QK4_SUBS; j++) {
            const float D = sw[j] * sl2[j] - sl[j] * sl[j];
            ok[j] = D > 0;
            ts[j] = (sw[j] * sxl[j] - sx[j] * sl[j]) / D;
            tm[j] = (sl2[j] * sx[j] - sl[j] * sxl[j]) / D;
            const float ts0 = sxl[j] / sl2[j]; /* used where min would be positive */
            ts[j] = tm[j] > 0 ? ts0 : ts[j];
            tm[j] = tm[j] > 0 ? 0 : tm[j];
        }
        for (int l = 0; l < QK4_SUBN; l++)
            for (int j = 0; j < QK4_SUBS; j++) {
                const float diff = ts[j] * (float)la[l][j] + tm[j] - xt[l][j];
                err[j] += wt[l][j] * (diff * diff);
            }
        for (int j = 0; j < QK4_SUBS; j++) {
            win[j] = ok[j] & (err[j] < best[j]);
            best[j] = win[j] ? err[j] : best[j];
            scale[j] = win[j] ? ts[j] : scale[j];
            mn[j] = win[j] ? tm[j] : mn[j];
        }
        for (int l = 0; l < QK4_SUBN; l++)
            for (int j = 0; j < QK4_SUBS; j++) lt[l][j] = win[j] ? la[l][j] : lt[l][j];
    }
    for (int j = 0; j < QK4_SUBS; j++) {
        const int flat = mx[j] == mn0[j];
        scales[j] = flat ? 0.0f : scale[j];
        neg_mins[j] = flat ? -mn0[j] : -mn[j];
        for (int l = 0; l < QK4_SUBN; l++) L[QK4_SUBN * j + l] = (uint8_t)(flat ? 0 : lt[l][j]);
    }
}

static void quant_row_q4_k(quant_block_q4_k *y, const float *x, int64_t nb) {
    uint8_t L[256];
    float mins[8], scales[8];
    for (int64_t i = 0; i < nb; i++, x += 256) {
        float max_scale = 0, max_min = 0;
        quant_fit_q4_k_subs(x, L, scales, mins);
        for (int j = 0; j < 8; j++) {
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }
        /* the sub-block scales and mins, themselves quantized to 6 bits */
        float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
        float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
        for (int j = 0; j < 8; j++) {
            uint8_t ls = (uint8_t)quant_nearest_int(inv_scale * scales[j]);
            uint8_t lm = (uint8_t)quant_nearest_int(inv_min * mins[j]);
            ls = ls < 63 ? ls : 63;
            lm = lm < 63 ? lm : 63;
            if (j < 4) {
                y[i].scales[j] = ls;
                y[i].scales[j + 4] = lm;
            } else {
                y[i].scales[j + 4] = (uint8_t)((ls & 15) | ((lm & 15) << 4));
                y[i].scales[j - 4] |= (uint8_t)((ls >> 4) << 6);
                y[i].scales[j] |= (uint8_t)((lm >> 4) << 6);
            }
        }
        y[i].d = dtype_f32_to_f16(max_scale / 63.0f);
        y[i].dmin = dtype_f32_to_f16(max_min / 63.0f);
        /* requantize against the scales as stored; a zero scale keeps the fit's L */
        uint8_t sc[8], m[8];
        quant_q4_k_scales(y[i].scales, sc, m);
        for (int j = 0; j < 8; j++) {
            const float d = dtype_f16_to_f32(y[i].d) * (float)sc[j];
            if (d == 0.0f) continue;
            const float dm = dtype_f16_to_f32(y[i].dmin) * (float)m[j];
            for (int l = 0; l < 32; l++) {
                int q = quant_nearest_int((x[32 * j + l] + dm) / d);
                L[32 * j + l] = (uint8_t)(q < 0 ? 0 : q > 15 ? 15 : q);
            }
        }
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++)
                y[i].qs[32 * c + l] = (uint8_t)(L[64 * c + l] | (L[64 * c + 32 + l] << 4));
    }
}

/* make_qx_quants with rmse_type 1: a symmetric fit x ≈ scale·(L - nmax) of n values,
 * L - nmax in [-nmax, nmax - 1], weighted by x² and refined over 18 trial scales. */
static float quant_fit_qx(int n, int nmax, const float *x, int8_t *L) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            max = x[i];
        }
    if (amax < 1e-15f) { /* GROUP_MAX_EPS: all zero */
        memset(L, 0, (size_t)n);
        return 0.0f;
    }
    float iscale = (float)(-nmax) / max, sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = quant_nearest_int(iscale * x[i]);
        l = l < -nmax ? -nmax : l > nmax - 1 ? nmax - 1 : l;
        L[i] = (int8_t)(l + nmax);
        float w = x[i] * x[i];
        sumlx += w * x[i] * (float)l;
        suml2 += w * (float)l * (float)l;
    }
    float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f, best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0) continue;
        iscale = -((float)nmax + 0.1f * (float)is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; i++) {
            int l = quant_nearest_int(iscale * x[i]);
            l = l < -nmax ? -nmax : l > nmax - 1 ? nmax - 1 : l;
            float w = x[i] * x[i];
            sumlx += w * x[i] * (float)l;
            suml2 += w * (float)l * (float)l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++) {
                int l = quant_nearest_int(iscale * x[i]);
                L[i] = (int8_t)(nmax + (l < -nmax ? -nmax : l > nmax - 1 ? nmax - 1 : l));
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

static void quant_row_q6_k(quant_block_q6_k *y, const float *x, int64_t nb) {
    int8_t L[256];
    float scales[16];
    for (int64_t i = 0; i < nb; i++, x += 256) {
        float max_scale = 0, max_abs = 0;
        for (int j = 0; j < 16; j++) {
            scales[j] = quant_fit_qx(16, 32, x + 16 * j, L + 16 * j);
            if (fabsf(scales[j]) > max_abs) {
                max_abs = fabsf(scales[j]);
                max_scale = scales[j];
            }
        }
        if (max_abs < 1e-15f) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        float iscale = -128.0f / max_scale;
        y[i].d = dtype_f32_to_f16(1 / iscale);
        for (int j = 0; j < 16; j++) {
            int s = quant_nearest_int(iscale * scales[j]);
            y[i].scales[j] = (int8_t)(s < 127 ? s : 127);
        }
        for (int j = 0; j < 16; j++) {
            float d = dtype_f16_to_f32(y[i].d) * (float)y[i].scales[j];
            if (d == 0.0f) continue;
            for (int l = 0; l < 16; l++) {
                int q = quant_nearest_int(x[16 * j + l] / d);
                L[16 * j + l] = (int8_t)((q < -32 ? -32 : q > 31 ? 31 : q) + 32);
            }
        }
        for (int h = 0; h < 2; h++)
            for (int l = 0; l < 32; l++) {
                const int8_t *Lh = L + 128 * h + l;
                y[i].ql[64 * h + l] = (uint8_t)((Lh[0] & 15) | ((Lh[64] & 15) << 4));
                y[i].ql[64 * h + 32 + l] = (uint8_t)((Lh[32] & 15) | ((Lh[96] & 15) << 4));
                y[i].qh[32 * h + l] = (uint8_t)((Lh[0] >> 4) | ((Lh[32] >> 4) << 2) |
                                                ((Lh[64] >> 4) << 4) | ((Lh[96] >> 4) << 6));
            }
    }
}

int quant_quantize_row(void *dst, const float *x, dtype dt, int64_t n) {
    int blk = dtype_block_elems(dt);
    if (blk <= 1 || n < 0 || n % blk) return -1;
    switch (dt) {
    case DTYPE_Q8_0: quant_row_q8_0(dst, x, n / 32); return 0;
    case DTYPE_Q4_0: quant_row_q4_0(dst, x, n / 32); return 0;
    case DTYPE_Q5_0: quant_row_q5_0(dst, x, n / 32); return 0;
    case DTYPE_Q4_K: quant_row_q4_k(dst, x, n / 256); return 0;
    case DTYPE_Q6_K: quant_row_q6_k(dst, x, n / 256); return 0;
    default: return -1;
    }
}
