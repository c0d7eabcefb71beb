/* dtype.h - element types of weights and the conversions between them.
 *
 * Weights keep their checkpoint dtype; activations are f32. The conversions here are
 * the scalar reference: round-to-nearest-even for f32 -> bf16, as torch does. */
#ifndef STRATA_DTYPE_H
#define STRATA_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* X(name, name, elements per block, bytes per block). Plain types are blocks of one
 * element. The block types are byte for byte those of llama.cpp's ggml-common.h, so a GGUF
 * tensor is used in place; engine/base/quant.h has their layouts and conversions. */
#define DTYPE_LIST(X)                                                                              \
    X(F32, "F32", 1, 4)                                                                            \
    X(F16, "F16", 1, 2)                                                                            \
    X(BF16, "BF16", 1, 2)                                                                          \
    X(I32, "I32", 1, 4)                                                                            \
    X(I64, "I64", 1, 8)                                                                            \
    X(U8, "U8", 1, 1)                                                                              \
    X(Q8_0, "Q8_0", 32, 34)                                                                        \
    X(Q4_0, "Q4_0", 32, 18)                                                                        \
    X(Q4_K, "Q4_K", 256, 144)                                                                      \
    X(Q6_K, "Q6_K", 256, 210)                                                                      \
    X(Q5_0, "Q5_0", 32, 22)

typedef enum {
#define DTYPE_ENUM(n, s, e, b) DTYPE_##n,
    DTYPE_LIST(DTYPE_ENUM)
#undef DTYPE_ENUM
        DTYPE_COUNT
} dtype;

/* Size of one element of a plain type; 0 for a block type (Q8_0, Q4_K, ...: an element
 * has no whole size, use dtype_row_bytes) or an out-of-range value. */
size_t dtype_size(dtype t);
/* Elements per block: 1 for plain types, 32 or 256 for block types; 0 out of range. */
int dtype_block_elems(dtype t);
/* Bytes of n elements of t (a row); 0 when n is not a whole number of blocks, n < 0, or t
 * is out of range. */
size_t dtype_row_bytes(dtype t, int64_t n);
/* The safetensors / ggml spelling ("BF16", "Q4_K"); "?" for an out-of-range value. */
const char *dtype_name(dtype t);
/* Parses a safetensors dtype string (plain types only: safetensors has no block types);
 * returns -1 when it is not one we know. */
int dtype_parse(const char *s, dtype *out);

/* The float whose bits are u, and the bits of f: the type puns every conversion below
 * starts or ends with (memcpy, which compilers turn into a register move). */
static inline float dtype_f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint32_t dtype_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float dtype_bf16_to_f32(uint16_t h) { return dtype_f32_from_bits((uint32_t)h << 16); }

static inline uint16_t dtype_f32_to_bf16(float f) {
    uint32_t u = dtype_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float dtype_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, u;
    if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else { /* subnormal: renormalise */
            exp = 127 - 15 + 1;
            while (!(man & 0x400u)) {
                man <<= 1;
                exp--;
            }
            u = sign | (exp << 23) | ((man & 0x3ffu) << 13);
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (man << 13);
    } else {
        u = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    return dtype_f32_from_bits(u);
}

static inline uint16_t dtype_f32_to_f16(float f) {
    uint32_t u = dtype_f32_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    int32_t exp = (int32_t)((u >> 23) & 0xff) - 127 + 15;
    uint32_t man = u & 0x7fffffu;
    if (((u >> 23) & 0xff) == 0xff) return (uint16_t)(sign | 0x7c00u | (man ? 0x200u : 0));
    if (exp >= 31) return (uint16_t)(sign | 0x7c00u);
    if (exp <= 0) {
        if (exp < -10) return (uint16_t)sign;
        man |= 0x800000u;
        uint32_t shift = (uint32_t)(14 - exp);
        uint32_t half = man >> shift, rem = man & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1))) half++;
        return (uint16_t)(sign | half);
    }
    uint32_t half = sign | ((uint32_t)exp << 10) | (man >> 13);
    uint32_t rem = man & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (half & 1))) half++;
    return (uint16_t)half;
}

#endif
