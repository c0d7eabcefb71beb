/* cpu_qmatmul.h - the CPU matmul against quantized weights (Q8_0, Q4_0, Q5_0, Q4_K, Q6_K):
 * how x is quantized for it, the kernel types every ISA implements, and the one summation order
 * they all follow. Internal to kernels/cpu and its tests.
 *
 * As in llama.cpp, each row of x is first quantized to int8 in blocks with one f32 scale
 * per block (32 values for Q8_0 / Q4_0 / Q5_0 weights, 256 for the K types, which also keep the
 * sum of every 16 values), and the dot products run on integers.
 *
 * The summation order, for out[i, j] = x_i · W_j (the definition the scalar kernels in
 * cpu_qmatmul.c spell out, and every ISA's kernels reproduce exactly; fma is the fused
 * multiply-add, one rounding, as C's fmaf):
 *  Q8_0, Q4_0, Q5_0  per block b: s = d_w(b) · d_x(b); for t < 8, p_t = the integer sum of the
 *              products of elements 4t .. 4t + 3; acc[b & 1][t] = fma(s, p_t,
 *              acc[b & 1][t]). The result is cpu_qmatmul_hsum8 of acc[0] + acc[1].
 *  Q4_K        per super-block, for t < 8: I_t = Σ_j sc_j · (Σ q·x over elements 4t ..
 *              4t + 3 of sub-block j) and M_t = m_t · (sum of x over sub-block t), exact
 *              integers; acc[t] = fma(d_x · d, I_t, acc[t]), then acc[t] = fma(−(d_x · dmin),
 *              M_t, acc[t]). The result is cpu_qmatmul_hsum8 of acc.
 *  Q6_K        the same lanes with I_t = Σ over the 8 groups of 32 of sc · (Σ q·x over
 *              elements 4t .. 4t + 3 of the group; sc that of their 16-value sub-block)
 *              minus 32 · (sc_2t · xsum_2t + sc_2t+1 · xsum_2t+1) (xsum: sum of x over a
 *              sub-block, so the −32 of every value); acc[t] = fma(d_x · d, I_t, acc[t]).
 * Integer sums are exact in any order, so SIMD kernels may group them as they like; the
 * float operations are fixed. Hence every ISA gives the same bits (for finite x: a NaN may
 * turn into different garbage), and a row's result never depends on m, on the other rows
 * of the step or on how the pool split the work. */
#ifndef STRATA_CPU_QMATMUL_H
#define STRATA_CPU_QMATMUL_H

#include <stddef.h>
#include <stdint.h>

#include "engine/base/dtype.h"
#include "engine/base/quant.h"

/* x rows quantized for one matmul. Row i: k int8 values at base + i·stride, the f32 block
 * scales at + doff, (blocks of 256) the int16 sums of each 16 consecutive values at + soff,
 * and, when coff is not 0, the lane sums of cpu_qrows_lane_sums at + coff. */
typedef struct cpu_qrows {
    const uint8_t *base;
    size_t stride, doff, soff, coff;
} cpu_qrows;

static inline const int8_t *cpu_qrows_q(const cpu_qrows *x, int i) {
    return (const int8_t *)(x->base + (size_t)i * x->stride);
}
static inline const float *cpu_qrows_d(const cpu_qrows *x, int i) {
    return (const float *)(x->base + (size_t)i * x->stride + x->doff);
}
static inline const int16_t *cpu_qrows_s(const cpu_qrows *x, int i) {
    return (const int16_t *)(x->base + (size_t)i * x->stride + x->soff);
}
static inline const int32_t *cpu_qrows_c(const cpu_qrows *x, int i) {
    return x->coff ? (const int32_t *)(x->base + (size_t)i * x->stride + x->coff) : NULL;
}

/* c[t] = −off · (q[4t] + q[4t + 1] + q[4t + 2] + q[4t + 3]) for t < k / 4. A Q4_0 / Q5_0
 * weight is an unsigned u (its nibble, Q5_0's fifth bit) minus off (8 / 16), so a lane's p_t
 * of the summation order (this file's head) is Σ u·q plus c[t], exactly: a kernel whose x is
 * the signed operand starts each lane at c[t] and multiplies u as it is, with no sign
 * juggling. For decode (m < 8) of those types, where a table's kernel asks for them
 * (cpu_kernels.lane_sums). */
void cpu_qrows_lane_sums(int32_t *c, const int8_t *q, int k, int off);
/* That offset: what a Q4_0 (8) or Q5_0 (16) weight's stored unsigned value loses. */
static inline int cpu_q32_offset(dtype dt) { return dt == DTYPE_Q5_0 ? 16 : 8; }

/* q[0..k) and d[0..k/blk) for one row: per block of blk (32 or 256) values, d = amax / 127
 * and q = x · (1 / d) rounded to nearest even (|q| <= 127); a block whose amax is under
 * 1e-30 (or not a number) is all zeros with d = 0, so no ISA meets an infinite 1 / d. k is
 * a multiple of blk. */
typedef void (*cpu_quantize_x_fn)(int8_t *restrict q, float *restrict d, const float *restrict x,
                                  int k, int blk);
/* out[i, j] = x_i · W_j for i < m, n0 <= j < n1 (out rows ldo floats apart), W [*, k] of
 * block type dt, in the order above. */
typedef void (*cpu_qmatmul_fn)(float *restrict out, int ldo, const cpu_qrows *x,
                               const void *restrict w, dtype dt, int k, int m, int n0, int n1);

/* The reduction of the Q8_0 / Q4_0 lanes: ((v0 + v4) + (v2 + v6)) + ((v1 + v5) + (v3 + v7)),
 * what the usual 256-bit horizontal sum computes. */
static inline float cpu_qmatmul_hsum8(const float v[8]) {
    return ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7]));
}

void cpu_quantize_x_ref(int8_t *restrict q, float *restrict d, const float *restrict x, int k,
                        int blk);
/* The x layout of the AVX-512 Q4_K kernels: in every 128 values the middle two 32-value
 * chunks swap places ([0,32) [64,96) [32,64) [96,128)), so that x's 64-byte loads meet the
 * low and the high nibbles of one 64-byte load of W (cpu_qmatmul_avx512.c). In place on
 * q[0..k), k a multiple of 256, after the 16-value sums were taken. */
void cpu_qrows_q4k_swap(int8_t *q, int k);
void cpu_qmatmul_ref(float *restrict out, int ldo, const cpu_qrows *x, const void *restrict w,
                     dtype dt, int k, int m, int n0, int n1);
void cpu_quantize_x_avx2(int8_t *restrict q, float *restrict d, const float *restrict x, int k,
                         int blk);
void cpu_qmatmul_avx2(float *restrict out, int ldo, const cpu_qrows *x, const void *restrict w,
                      dtype dt, int k, int m, int n0, int n1);
void cpu_qmatmul_avx512(float *restrict out, int ldo, const cpu_qrows *x, const void *restrict w,
                        dtype dt, int k, int m, int n0, int n1);

#endif
