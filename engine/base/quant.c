/* quant.c - what the elements of a quantized block are: the reference dequantizers.
 *
 * Each value is computed with the float operations in the order llama.cpp's
 * dequantize_row_* uses (and the gguf package's numpy port), so the results agree with
 * both bit for bit; quant_value_at evaluates the same expression for one element. The
 * quantizers are in quant_encode.c. */
#include "engine/base/quant.h"

static float quant_q8_0_at(const quant_block_q8_0 *b, int e) {
    return (float)b->qs[e] * dtype_f16_to_f32(b->d);
}

static float quant_q4_0_at(const quant_block_q4_0 *b, int e) {
    int q = e < 16 ? b->qs[e] & 15 : b->qs[e - 16] >> 4;
    return (float)(q - 8) * dtype_f16_to_f32(b->d);
}

static float quant_q5_0_at(const quant_block_q5_0 *b, int e) {
    return (float)(quant_q5_0_q(b, e) - 16) * dtype_f16_to_f32(b->d);
}

static float quant_q4_k_at(const quant_block_q4_k *b, int e) {
    uint8_t sc[8], m[8];
    quant_q4_k_scales(b->scales, sc, m);
    int j = e >> 5, c = e >> 6, l = e & 31;
    int q = (b->qs[32 * c + l] >> (4 * (j & 1))) & 15;
    float d = dtype_f16_to_f32(b->d) * (float)sc[j], dm = dtype_f16_to_f32(b->dmin) * (float)m[j];
    return d * (float)q - dm;
}

static float quant_q6_k_at(const quant_block_q6_k *b, int e) {
    float d = dtype_f16_to_f32(b->d) * (float)b->scales[e >> 4];
    return d * (float)(quant_q6_k_q(b, e) - 32);
}

float quant_value_at(const void *src, dtype dt, size_t i) {
    switch (dt) {
    case DTYPE_Q8_0: return quant_q8_0_at((const quant_block_q8_0 *)src + i / 32, (int)(i % 32));
    case DTYPE_Q4_0: return quant_q4_0_at((const quant_block_q4_0 *)src + i / 32, (int)(i % 32));
    case DTYPE_Q5_0: return quant_q5_0_at((const quant_block_q5_0 *)src + i / 32, (int)(i % 32));
    case DTYPE_Q4_K: return quant_q4_k_at((const quant_block_q4_k *)src + i / 256, (int)(i % 256));
    case DTYPE_Q6_K: return quant_q6_k_at((const quant_block_q6_k *)src + i / 256, (int)(i % 256));
    default: return 0.0f;
    }
}

/* A block at a time, with its scales decoded once: the same expressions as the _at
 * functions above, element for element. */
int quant_dequantize_row(float *out, const void *src, dtype dt, int64_t n) {
    int blk = dtype_block_elems(dt);
    if (blk <= 1 || n < 0 || n % blk) return -1;
    for (int64_t b = 0; b < n / blk; b++) {
        float *y = out + b * blk;
        switch (dt) {
        case DTYPE_Q8_0: {
            const quant_block_q8_0 *q = (const quant_block_q8_0 *)src + b;
            for (int e = 0; e < 32; e++) y[e] = quant_q8_0_at(q, e);
            break;
        }
        case DTYPE_Q4_0: {
            const quant_block_q4_0 *q = (const quant_block_q4_0 *)src + b;
            for (int e = 0; e < 32; e++) y[e] = quant_q4_0_at(q, e);
            break;
        }
        case DTYPE_Q5_0: {
            const quant_block_q5_0 *q = (const quant_block_q5_0 *)src + b;
            for (int e = 0; e < 32; e++) y[e] = quant_q5_0_at(q, e);
            break;
        }
        case DTYPE_Q4_K: {
            const quant_block_q4_k *q = (const quant_block_q4_k *)src + b;
            uint8_t sc[8], m[8];
            quant_q4_k_scales(q->scales, sc, m);
            float d = dtype_f16_to_f32(q->d), dmin = dtype_f16_to_f32(q->dmin);
            for (int j = 0; j < 8; j++) {
                float dj = d * (float)sc[j], mj = dmin * (float)m[j];
                const uint8_t *qs = q->qs + 32 * (j >> 1);
                for (int l = 0; l < 32; l++)
                    y[32 * j + l] = dj * (float)((qs[l] >> (4 * (j & 1))) & 15) - mj;
            }
            break;
        }
        case DTYPE_Q6_K: {
            const quant_block_q6_k *q = (const quant_block_q6_k *)src + b;
            for (int e = 0; e < 256; e++) y[e] = quant_q6_k_at(q, e);
            break;
        }
        default: return -1;
        }
    }
    return 0;
}
