/* quant.h - llama.cpp's quantized block formats, byte for byte as llama.cpp's ggml-common.h
 * lays them out, and their reference conversions to and from f32.
 *
 * A row of n elements is n / block blocks back to back (dtype_row_bytes); the f16 scales
 * are little-endian IEEE half. Blocks are 2-byte aligned wherever a row starts on an even
 * address (every block size is even; GGUF aligns tensors to 32 bytes). These are the plain
 * references: dequantization defines the value of every element (the matmul kernels and
 * the f32 reference they are tested against agree with it), and the quantizers reproduce
 * llama.cpp's quantize_row_*_ref bit for bit, so a file we write is the file llama.cpp
 * would write. Nothing here is on a hot path. */
#ifndef STRATA_QUANT_H
#define STRATA_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "engine/base/dtype.h"

/* Q8_0, 32 elements: x[i] = d · qs[i]. */
typedef struct {
    uint16_t d; /* f16 */
    int8_t qs[32];
} quant_block_q8_0;

/* Q4_0, 32 elements: x[i] = d · (q[i] − 8) with q[i] = qs[i] & 15 and q[i + 16] =
 * qs[i] >> 4 for i < 16. */
typedef struct {
    uint16_t d; /* f16 */
    uint8_t qs[16];
} quant_block_q4_0;

/* Q5_0, 32 elements: x[i] = d · (q[i] − 16), q 5 bits: the low 4 as Q4_0's nibbles (q[i] and
 * q[i + 16] in qs[i]), the fifth of element i in bit i of qh (a little-endian u32). llama.cpp
 * makes it where a Q4_K_M file's rows are not whole 256-blocks. */
typedef struct {
    uint16_t d; /* f16 */
    uint8_t qh[4];
    uint8_t qs[16];
} quant_block_q5_0;

/* Q4_K, 256 elements in 8 sub-blocks of 32, each with a 6-bit scale sc[j] and min m[j]
 * (quant_q4_k_scales): x = d · sc[j] · q − dmin · m[j]. qs holds 4 chunks of 64 elements:
 * chunk c's 32 bytes carry element 64c + l in the low nibble of byte l and 64c + 32 + l in
 * the high one (sub-blocks 2c and 2c + 1). */
typedef struct {
    uint16_t d, dmin; /* f16 */
    uint8_t scales[12];
    uint8_t qs[128];
} quant_block_q4_k;

/* Q6_K, 256 elements in 16 sub-blocks of 16 with int8 scales: x = d · scales[e / 16] ·
 * (q − 32), q 6 bits: the low 4 from ql, the high 2 from qh (quant_q6_k_q). */
typedef struct {
    uint8_t ql[128];
    uint8_t qh[64];
    int8_t scales[16];
    uint16_t d; /* f16 */
} quant_block_q6_k;

_Static_assert(sizeof(quant_block_q8_0) == 34, "ggml block_q8_0");
_Static_assert(sizeof(quant_block_q4_0) == 18, "ggml block_q4_0");
_Static_assert(sizeof(quant_block_q5_0) == 22, "ggml block_q5_0");
_Static_assert(sizeof(quant_block_q4_k) == 144, "ggml block_q4_K");
_Static_assert(sizeof(quant_block_q6_k) == 210, "ggml block_q6_K");

/* The 8 scales and mins of a Q4_K block from its 12 packed bytes: bytes 0-3 hold sc[0..3]
 * in their low 6 bits, bytes 4-7 m[0..3]; sub-blocks 4-7 keep their low 4 bits in the
 * nibbles of bytes 8-11 and their high 2 bits in the top bits of bytes 0-7. */
static inline void quant_q4_k_scales(const uint8_t s[12], uint8_t sc[8], uint8_t m[8]) {
    for (int j = 0; j < 4; j++) {
        sc[j] = s[j] & 63;
        m[j] = s[j + 4] & 63;
        sc[j + 4] = (uint8_t)((s[j + 8] & 15) | ((s[j] >> 6) << 4));
        m[j + 4] = (uint8_t)((s[j + 8] >> 4) | ((s[j + 4] >> 6) << 4));
    }
}

/* The 6-bit value (0..63) of element e < 256 of a Q6_K block. Element 128h + 32g + l
 * (g < 4, l < 32) has its low nibble in ql[64h + 32(g & 1) + l] (low half for g < 2) and
 * its high bits in bits 2g, 2g + 1 of qh[32h + l]. */
static inline int quant_q6_k_q(const quant_block_q6_k *b, int e) {
    int h = e >> 7, g = (e >> 5) & 3, l = e & 31;
    int lo = (b->ql[64 * h + 32 * (g & 1) + l] >> (4 * (g >> 1))) & 15;
    return lo | (((b->qh[32 * h + l] >> (2 * g)) & 3) << 4);
}

/* out[0..n) = the values of n elements (a whole number of blocks) of block type dt at src.
 * Returns 0, or -1 (out untouched) when dt is not a block type or n is not a multiple of
 * its block. */
int quant_dequantize_row(float *out, const void *src, dtype dt, int64_t n);
/* The 5-bit value (0..31) of element e < 32 of a Q5_0 block. */
static inline int quant_q5_0_q(const quant_block_q5_0 *b, int e) {
    uint32_t qh = (uint32_t)b->qh[0] | (uint32_t)b->qh[1] << 8 | (uint32_t)b->qh[2] << 16 |
                  (uint32_t)b->qh[3] << 24;
    int lo = e < 16 ? b->qs[e] & 15 : b->qs[e - 16] >> 4;
    return lo | (int)((qh >> e) & 1) << 4;
}

/* Element i of a block-typed array at src, equal to what quant_dequantize_row gives it;
 * 0 for a dt that is not a block type. */
float quant_value_at(const void *src, dtype dt, size_t i);
/* Quantizes n floats (a whole number of blocks) to dt with llama.cpp's reference
 * quantizer (quantize_row_q8_0_ref, _q4_0_ref, _q5_0_ref, _q4_K_ref, _q6_K_ref), bit for bit for
 * finite inputs. Returns 0, or -1 (dst untouched) for another dt or a partial block. */
int quant_quantize_row(void *dst, const float *x, dtype dt, int64_t n);

#endif
