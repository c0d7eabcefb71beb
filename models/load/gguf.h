/* gguf.h - a llama.cpp GGUF file (v2 or v3, little-endian), mmapped and validated.
 *
 * gguf_open maps the file and checks everything before exposing anything: the magic and
 * version, that each count, string and array fits in the file, every value type, the
 * tensor infos (known ggml type, dims whose byte size does not overflow, rows a whole
 * number of blocks), general.alignment, each tensor's offset (aligned, inside the file,
 * overlapping no other) and that keys and tensor names are unique. Errors name the file
 * and the key or tensor. Nothing is copied but keys and tensor names: strings, arrays
 * and tensor data are pointers into the mapping.
 *
 * Dims: GGUF stores ne[] innermost first (ne[0] is the row length, as ggml counts);
 * gguf_tensor.shape[] is the same dims outermost first, the order safetensors and torch
 * use. A [vocab, hidden] embedding has ne = {hidden, vocab} and shape = {vocab, hidden}.
 * Thread: any; a gguf is read-only after gguf_open. */
#ifndef STRATA_GGUF_H
#define STRATA_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "engine/base/dtype.h"
#include "engine/base/err.h"

#define GGUF_MAX_DIMS 4 /* ggml's GGML_MAX_DIMS; a file with more dims is refused */
#define GGUF_DEFAULT_ALIGNMENT 32

/* ggml tensor types as numbered in llama.cpp's ggml/include/ggml.h (numbers are stored in
 * files and never reused). X(name, number, elements per block, bytes per block). The
 * numbers that are absent (4, 5, 31-33, 36-38) were removed from ggml and are refused. */
#define GGUF_GGML_LIST(X)                                                                          \
    X(F32, 0, 1, 4)                                                                                \
    X(F16, 1, 1, 2)                                                                                \
    X(Q4_0, 2, 32, 18)                                                                             \
    X(Q4_1, 3, 32, 20)                                                                             \
    X(Q5_0, 6, 32, 22)                                                                             \
    X(Q5_1, 7, 32, 24)                                                                             \
    X(Q8_0, 8, 32, 34)                                                                             \
    X(Q8_1, 9, 32, 36)                                                                             \
    X(Q2_K, 10, 256, 84)                                                                           \
    X(Q3_K, 11, 256, 110)                                                                          \
    X(Q4_K, 12, 256, 144)                                                                          \
    X(Q5_K, 13, 256, 176)                                                                          \
    X(Q6_K, 14, 256, 210)                                                                          \
    X(Q8_K, 15, 256, 292)                                                                          \
    X(IQ2_XXS, 16, 256, 66)                                                                        \
    X(IQ2_XS, 17, 256, 74)                                                                         \
    X(IQ3_XXS, 18, 256, 98)                                                                        \
    X(IQ1_S, 19, 256, 50)                                                                          \
    X(IQ4_NL, 20, 32, 18)                                                                          \
    X(IQ3_S, 21, 256, 110)                                                                         \
    X(IQ2_S, 22, 256, 82)                                                                          \
    X(IQ4_XS, 23, 256, 136)                                                                        \
    X(I8, 24, 1, 1)                                                                                \
    X(I16, 25, 1, 2)                                                                               \
    X(I32, 26, 1, 4)                                                                               \
    X(I64, 27, 1, 8)                                                                               \
    X(F64, 28, 1, 8)                                                                               \
    X(IQ1_M, 29, 256, 56)                                                                          \
    X(BF16, 30, 1, 2)                                                                              \
    X(TQ1_0, 34, 256, 54)                                                                          \
    X(TQ2_0, 35, 256, 66)                                                                          \
    X(MXFP4, 39, 32, 17)                                                                           \
    X(NVFP4, 40, 64, 36)                                                                           \
    X(Q1_0, 41, 128, 18)

enum {
#define GGUF_GGML_ENUM(n, num, blck, bytes) GGUF_GGML_##n = num,
    GGUF_GGML_LIST(GGUF_GGML_ENUM)
#undef GGUF_GGML_ENUM
};

/* Metadata value types, as numbered in the GGUF spec.
 * X(name, number, bytes (0 = varies), llama.cpp's short name) */
#define GGUF_VT_LIST(X)                                                                            \
    X(U8, 0, 1, "u8")                                                                              \
    X(I8, 1, 1, "i8")                                                                              \
    X(U16, 2, 2, "u16")                                                                            \
    X(I16, 3, 2, "i16")                                                                            \
    X(U32, 4, 4, "u32")                                                                            \
    X(I32, 5, 4, "i32")                                                                            \
    X(F32, 6, 4, "f32")                                                                            \
    X(BOOL, 7, 1, "bool")                                                                          \
    X(STRING, 8, 0, "string")                                                                      \
    X(ARRAY, 9, 0, "array")                                                                        \
    X(U64, 10, 8, "u64")                                                                           \
    X(I64, 11, 8, "i64")                                                                           \
    X(F64, 12, 8, "f64")

enum {
#define GGUF_VT_ENUM(n, num, bytes, s) GGUF_VT_##n = num,
    GGUF_VT_LIST(GGUF_VT_ENUM)
#undef GGUF_VT_ENUM
        GGUF_VT_COUNT
};

/* A string inside the mapping: not NUL-terminated, may hold any bytes. */
typedef struct gguf_str {
    const char *ptr;
    uint64_t len;
} gguf_str;

typedef struct gguf_kv {
    const char *key;     /* NUL-terminated, owned by the gguf */
    int type;            /* GGUF_VT_*; GGUF_VT_ARRAY for an array */
    int elem_type;       /* the value's type, or for an array its elements' (never ARRAY) */
    uint64_t n;          /* elements: 1 for a scalar */
    const uint8_t *raw;  /* a non-string value or array: n little-endian elements, unaligned */
    const gguf_str *str; /* a string or array of strings: [n] */
} gguf_kv;

typedef struct gguf_tensor {
    const char *name;             /* NUL-terminated, owned by the gguf */
    int type;                     /* GGUF_GGML_* */
    int ndim;                     /* 0..GGUF_MAX_DIMS as stored; 0 is a scalar */
    int64_t ne[GGUF_MAX_DIMS];    /* ggml order, innermost first; 1 past ndim */
    int64_t shape[GGUF_MAX_DIMS]; /* outermost first (safetensors order); [ndim] used */
    int64_t n_elements;
    uint64_t offset;  /* from the start of the data section; a multiple of the alignment */
    const void *data; /* inside the mapping; nbytes long */
    size_t nbytes;
} gguf_tensor;

typedef struct gguf gguf;

/* Maps and validates path. Caller frees with gguf_close. */
int gguf_open(gguf **out, const char *path, strata_err *err);
/* The same over a buffer of len bytes that the caller keeps alive and unchanged until
 * gguf_close; name is used in messages (the fuzz harness and tests use it). */
int gguf_open_buffer(gguf **out, const void *data, size_t len, const char *name, strata_err *err);
void gguf_close(gguf *g);

const char *gguf_path(const gguf *g);
uint32_t gguf_version(const gguf *g);
uint32_t gguf_alignment(const gguf *g);
/* Byte offset of the data section in the file (a multiple of the alignment). */
uint64_t gguf_data_offset(const gguf *g);

int gguf_kv_count(const gguf *g);
const gguf_kv *gguf_kv_at(const gguf *g, int i);             /* NULL out of range */
const gguf_kv *gguf_find_kv(const gguf *g, const char *key); /* NULL when absent */

int gguf_tensor_count(const gguf *g);
const gguf_tensor *gguf_tensor_at(const gguf *g, int i); /* file order; NULL out of range */
const gguf_tensor *gguf_find_tensor(const gguf *g, const char *name); /* NULL when absent */

/* ggml type facts; 0 / NULL for a number that is not a known type. */
const char *gguf_ggml_name(int type);
uint32_t gguf_ggml_block(int type); /* elements per block */
uint32_t gguf_ggml_block_bytes(int type);
const char *gguf_vt_name(int type); /* "u32", "string", ...; "?" when unknown */
/* The ggml storage types strata computes with, as its dtypes (DTYPE_COUNT for the others),
 * and back (-1 for a dtype ggml has no type for). */
dtype gguf_ggml_dtype(int type);
int gguf_dtype_ggml(dtype t);

/* ---- typed getters (gguf_meta.c) -------------------------------------------------------
 * Each returns 0, STRATA_ENOTFOUND when the key is absent, or STRATA_EFORMAT when the
 * value has another type or does not fit; the message names the file and the key, and
 * *out is written only on success. Integer getters take any integer type whose value
 * fits; the float getter takes f32 or f64 (rounded); bool takes only bool. */
int gguf_get_u32(const gguf *g, const char *key, uint32_t *out, strata_err *err);
int gguf_get_i32(const gguf *g, const char *key, int32_t *out, strata_err *err);
int gguf_get_u64(const gguf *g, const char *key, uint64_t *out, strata_err *err);
int gguf_get_f32(const gguf *g, const char *key, float *out, strata_err *err);
int gguf_get_bool(const gguf *g, const char *key, int *out, strata_err *err);
int gguf_get_str(const gguf *g, const char *key, gguf_str *out, strata_err *err);
/* An array of strings (tokenizer.ggml.tokens): *out points at n entries owned by g. */
int gguf_get_strs(const gguf *g, const char *key, const gguf_str **out, uint64_t *n,
                  strata_err *err);
/* An array of exactly n integers (bools count as 0/1) or floats into out[n]. A scalar is
 * repeated n times: llama.cpp writes a per-layer value as one scalar when all layers
 * agree and as an array of n_layer otherwise (head_count_kv, sliding window pattern). */
int gguf_get_ints(const gguf *g, const char *key, int64_t *out, uint64_t n, strata_err *err);
int gguf_get_floats(const gguf *g, const char *key, float *out, uint64_t n, strata_err *err);
/* Element i of an integer or float value (scalar: i = 0) as a double / int64; for the
 * getters above and for callers that walk a kv themselves. -1 when i or the type is out
 * of range, or (ints) the value does not fit in int64. */
int gguf_kv_int(const gguf_kv *kv, uint64_t i, int64_t *out);
int gguf_kv_float(const gguf_kv *kv, uint64_t i, double *out);

#endif
