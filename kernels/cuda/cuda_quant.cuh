/* cuda_quant.cuh - llama.cpp's block formats (Q8_0, Q4_0, Q5_0, Q4_K, Q6_K) as the device reads
 * them: byte offsets inside a block and the value of one element. The layouts and the
 * values are engine/base/quant.h's (that header is C11 and cannot be included here); the
 * op test holds these to quant_dequantize_row bit for bit (embed of a quantized table).
 *
 * Every value is exact or rounded once however the compiler contracts it: an f16 scale
 * (11 significant bits) times a 6- or 8-bit scale and a quant of at most 7 bits stays
 * within f32's 24 bits until the single product or difference that rounds, so an FMA gives
 * the bits of the CPU's separate multiply and subtract. */
#ifndef STRATA_CUDA_QUANT_CUH
#define STRATA_CUDA_QUANT_CUH

#include "kernels/cuda/cuda_internal.cuh"

/* bytes per block; elements per block is dtype_block_elems (32 or 256) */
enum { CQ_Q8_0 = 34, CQ_Q4_0 = 18, CQ_Q5_0 = 22, CQ_Q4_K = 144, CQ_Q6_K = 210 };
/* Q5_0: d (f16) at 0, the fifth bits (a little-endian u32, 2-byte aligned) at 2, qs at 6.
 * Q4_K: d, dmin (f16) at 0 and 2, 12 packed scale bytes at 4, qs at 16.
 * Q6_K: ql at 0, qh at 128, int8 scales at 192, d (f16) at 208. */
enum {
    CQ_Q5_0_QH = 2,
    CQ_Q5_0_QS = 6,
    CQ_Q4_K_SC = 4,
    CQ_Q4_K_QS = 16,
    CQ_Q6_K_QH = 128,
    CQ_Q6_K_SC = 192,
    CQ_Q6_K_D = 208
};

/* The block formats this backend reads (dtype.h may list more: those are refused at
 * weight_prepare and by cuda_supports). */
__host__ __device__ __forceinline__ bool cuda_is_block(int dt) {
    return dt == DTYPE_Q8_0 || dt == DTYPE_Q4_0 || dt == DTYPE_Q5_0 || dt == DTYPE_Q4_K ||
           dt == DTYPE_Q6_K;
}

/* A little-endian f16 at byte p (2-byte aligned: every field that holds one is). */
__device__ __forceinline__ float cuda_q_f16(const uint8_t *p) {
    return __half2float(__ushort_as_half(*(const unsigned short *)p));
}

/* Scale and min of Q4_K sub-block j from the 12 packed bytes (quant_q4_k_scales, llama.cpp's
 * get_scale_min_k4): sub-blocks 4-7 keep their low 4 bits in the nibbles of bytes 8-11 and
 * their top 2 bits in the top bits of bytes 0-7. */
__device__ __forceinline__ void cuda_q4_k_scale(const uint8_t *s, int j, int *sc, int *mn) {
    if (j < 4) {
        *sc = s[j] & 63;
        *mn = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
        *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* The 32 fifth bits of the Q5_0 block at b, bit e for element e. */
__device__ __forceinline__ unsigned cuda_q5_0_qh(const uint8_t *b) {
    const unsigned short *h = (const unsigned short *)(b + CQ_Q5_0_QH);
    return (unsigned)h[0] | (unsigned)h[1] << 16;
}

/* The 6-bit quant of element e of the Q6_K block at b (quant_q6_k_q). */
__device__ __forceinline__ int cuda_q6_k_q(const uint8_t *b, int e) {
    int h = e >> 7, g = (e >> 5) & 3, l = e & 31;
    int lo = (b[64 * h + 32 * (g & 1) + l] >> (4 * (g >> 1))) & 15;
    return lo | (((b[CQ_Q6_K_QH + 32 * h + l] >> (2 * g)) & 3) << 4);
}

/* Element i of a block-typed array at p (quant_value_at): for embed, one element a thread. */
__device__ __forceinline__ float cuda_qget(const void *p, int dt, size_t i) {
    const uint8_t *base = (const uint8_t *)p;
    if (dt == DTYPE_Q8_0) {
        const uint8_t *b = base + i / 32 * CQ_Q8_0;
        return (float)(int8_t)b[2 + i % 32] * cuda_q_f16(b);
    }
    if (dt == DTYPE_Q4_0) {
        const uint8_t *b = base + i / 32 * CQ_Q4_0;
        int e = (int)(i % 32), q = e < 16 ? b[2 + e] & 15 : b[2 + e - 16] >> 4;
        return (float)(q - 8) * cuda_q_f16(b);
    }
    if (dt == DTYPE_Q5_0) {
        const uint8_t *b = base + i / 32 * CQ_Q5_0;
        int e = (int)(i % 32);
        int q = (e < 16 ? b[CQ_Q5_0_QS + e] & 15 : b[CQ_Q5_0_QS + e - 16] >> 4) |
                (int)((cuda_q5_0_qh(b) >> e) & 1u) << 4;
        return (float)(q - 16) * cuda_q_f16(b);
    }
    if (dt == DTYPE_Q4_K) {
        const uint8_t *b = base + i / 256 * CQ_Q4_K;
        int e = (int)(i % 256), j = e >> 5, c = e >> 6, l = e & 31, sc, mn;
        cuda_q4_k_scale(b + CQ_Q4_K_SC, j, &sc, &mn);
        int q = (b[CQ_Q4_K_QS + 32 * c + l] >> (4 * (j & 1))) & 15;
        float d = cuda_q_f16(b) * (float)sc, dm = cuda_q_f16(b + 2) * (float)mn;
        return d * (float)q - dm;
    }
    const uint8_t *b = base + i / 256 * CQ_Q6_K; /* Q6_K */
    int e = (int)(i % 256);
    float d = cuda_q_f16(b + CQ_Q6_K_D) * (float)(int8_t)b[CQ_Q6_K_SC + (e >> 4)];
    return d * (float)(cuda_q6_k_q(b, e) - 32);
}

/* n floats of x (16-byte aligned when vec: x rows are k, a multiple of 32, floats apart). */
template <int N>
__device__ __forceinline__ void cuda_q_ldx(const float *__restrict__ x, int vec, float *f) {
    if (vec) {
#pragma unroll
        for (int e = 0; e < N / 4; e++) {
            float4 v = __ldg((const float4 *)x + e);
            f[4 * e] = v.x, f[4 * e + 1] = v.y, f[4 * e + 2] = v.z, f[4 * e + 3] = v.w;
        }
    } else {
#pragma unroll
        for (int e = 0; e < N; e++) f[e] = __ldg(x + e);
    }
}

#endif
