/* gguf_meta.c - typed reads of a GGUF file's metadata values.
 *
 * The values were bounds-checked by gguf_open; here each getter checks the type and the
 * range a caller asked for, so a config loader reads `qwen35.block_count` as one call
 * and gets an error naming the file and the key when it is missing or of the wrong
 * kind. Values are decoded from little-endian bytes, never through a cast pointer: array
 * elements in the mapping are not aligned. */
#include <inttypes.h>
#include <limits.h>
#include <string.h>

#include "models/load/gguf.h"

static uint64_t meta_le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

int gguf_kv_int(const gguf_kv *kv, uint64_t i, int64_t *out) {
    if (i >= kv->n || !kv->raw) return -1;
    const uint8_t *p = kv->raw;
    uint64_t v;
    switch (kv->elem_type) {
    case GGUF_VT_U8:
    case GGUF_VT_BOOL: *out = p[i]; return 0;
    case GGUF_VT_I8: *out = (int8_t)p[i]; return 0;
    case GGUF_VT_U16: *out = (uint16_t)meta_le(p + 2 * i, 2); return 0;
    case GGUF_VT_I16: *out = (int16_t)meta_le(p + 2 * i, 2); return 0;
    case GGUF_VT_U32: *out = (uint32_t)meta_le(p + 4 * i, 4); return 0;
    case GGUF_VT_I32: *out = (int32_t)meta_le(p + 4 * i, 4); return 0;
    case GGUF_VT_I64: *out = (int64_t)meta_le(p + 8 * i, 8); return 0;
    case GGUF_VT_U64:
        v = meta_le(p + 8 * i, 8);
        if (v > INT64_MAX) return -1;
        *out = (int64_t)v;
        return 0;
    default: return -1;
    }
}

int gguf_kv_float(const gguf_kv *kv, uint64_t i, double *out) {
    if (i >= kv->n || !kv->raw) return -1;
    if (kv->elem_type == GGUF_VT_F32) {
        uint32_t u = (uint32_t)meta_le(kv->raw + 4 * i, 4);
        float f;
        memcpy(&f, &u, 4);
        *out = f;
        return 0;
    }
    if (kv->elem_type == GGUF_VT_F64) {
        uint64_t u = meta_le(kv->raw + 8 * i, 8);
        memcpy(out, &u, 8);
        return 0;
    }
    return -1;
}

/* ---- getters ------------------------------------------------------------------------- */

static int meta_find(const gguf *g, const char *key, const gguf_kv **kv, strata_err *err) {
    *kv = gguf_find_kv(g, key);
    if (*kv) return 0;
    return strata_err_set(err, STRATA_ENOTFOUND, "%s: key '%s' is missing", gguf_path(g), key);
}

/* The error for a value that is not what the caller asked for. */
static int meta_wrong(const gguf *g, const gguf_kv *kv, const char *want, strata_err *err) {
    if (kv->type == GGUF_VT_ARRAY)
        return strata_err_set(err, STRATA_EFORMAT,
                              "%s: key '%s': an array of %" PRIu64 " %s, expected %s", gguf_path(g),
                              kv->key, kv->n, gguf_vt_name(kv->elem_type), want);
    return strata_err_set(err, STRATA_EFORMAT, "%s: key '%s': a %s, expected %s", gguf_path(g),
                          kv->key, gguf_vt_name(kv->type), want);
}

static int meta_is_int(int t) {
    return t == GGUF_VT_U8 || t == GGUF_VT_I8 || t == GGUF_VT_U16 || t == GGUF_VT_I16 ||
           t == GGUF_VT_U32 || t == GGUF_VT_I32 || t == GGUF_VT_U64 || t == GGUF_VT_I64;
}

/* A scalar integer in [lo, hi]; u64 values past INT64_MAX are out of every range here. */
static int meta_int(const gguf *g, const char *key, int64_t lo, int64_t hi, const char *want,
                    int64_t *out, strata_err *err) {
    const gguf_kv *kv;
    int rc = meta_find(g, key, &kv, err);
    if (rc) return rc;
    if (!meta_is_int(kv->type)) return meta_wrong(g, kv, want, err);
    int64_t v;
    if (gguf_kv_int(kv, 0, &v) != 0 || v < lo || v > hi)
        return strata_err_set(err, STRATA_EFORMAT, "%s: key '%s': value out of range for %s",
                              gguf_path(g), key, want);
    *out = v;
    return 0;
}

int gguf_get_u32(const gguf *g, const char *key, uint32_t *out, strata_err *err) {
    int64_t v;
    int rc = meta_int(g, key, 0, UINT32_MAX, "an integer that fits in u32", &v, err);
    if (!rc) *out = (uint32_t)v;
    return rc;
}

int gguf_get_i32(const gguf *g, const char *key, int32_t *out, strata_err *err) {
    int64_t v;
    int rc = meta_int(g, key, INT32_MIN, INT32_MAX, "an integer that fits in i32", &v, err);
    if (!rc) *out = (int32_t)v;
    return rc;
}

int gguf_get_u64(const gguf *g, const char *key, uint64_t *out, strata_err *err) {
    const gguf_kv *kv;
    int rc = meta_find(g, key, &kv, err);
    if (rc) return rc;
    if (kv->type == GGUF_VT_U64) { /* the one type whose range int64 does not hold */
        *out = meta_le(kv->raw, 8);
        return 0;
    }
    int64_t v;
    if ((rc = meta_int(g, key, 0, INT64_MAX, "a non-negative integer", &v, err))) return rc;
    *out = (uint64_t)v;
    return 0;
}

int gguf_get_f32(const gguf *g, const char *key, float *out, strata_err *err) {
    const gguf_kv *kv;
    int rc = meta_find(g, key, &kv, err);
    if (rc) return rc;
    double v;
    if (kv->type == GGUF_VT_ARRAY || gguf_kv_float(kv, 0, &v) != 0)
        return meta_wrong(g, kv, "f32 or f64", err);
    *out = (float)v;
    return 0;
}

int gguf_get_bool(const gguf *g, const char *key, int *out, strata_err *err) {
    const gguf_kv *kv;
    int rc = meta_find(g, key, &kv, err);
    if (rc) return rc;
    if (kv->type != GGUF_VT_BOOL) return meta_wrong(g, kv, "bool", err);
    *out = kv->raw[0];
    return 0;
}

int gguf_get_str(const gguf *g, const char *key, gguf_str *out, strata_err *err) {
    const gguf_kv *kv;
    int rc = meta_find(g, key, &kv, err);
    if (rc) return rc;
    if (kv->type != GGUF_VT_STRING) return meta_wrong(g, kv, "string", err);
    *out = kv->str[0];
    return 0;
}

int gguf_get_strs(const gguf *g, const char *key, const gguf_str **out, uint64_t *n,
                  strata_err *err) {
    const gguf_kv *kv;
    int rc = meta_find(g, key, &kv, err);
    if (rc) return rc;
    if (kv->type != GGUF_VT_ARRAY || kv->elem_type != GGUF_VT_STRING)
        return meta_wrong(g, kv, "an array of strings", err);
    *out = kv->str;
    *n = kv->n;
    return 0;
}

/* Checks that kv is a scalar, or an array of exactly n, of a type `ok` accepts. */
static int meta_vec(const gguf *g, const gguf_kv *kv, uint64_t n, int ok, const char *want,
                    strata_err *err) {
    if (!ok) return meta_wrong(g, kv, want, err);
    if (kv->type == GGUF_VT_ARRAY && kv->n != n)
        return strata_err_set(err, STRATA_EFORMAT,
                              "%s: key '%s': an array of %" PRIu64 ", expected %" PRIu64
                              " values (or one scalar)",
                              gguf_path(g), kv->key, kv->n, n);
    return 0;
}

int gguf_get_ints(const gguf *g, const char *key, int64_t *out, uint64_t n, strata_err *err) {
    const gguf_kv *kv;
    int rc = meta_find(g, key, &kv, err);
    if (rc) return rc;
    int t = kv->elem_type;
    if ((rc = meta_vec(g, kv, n, meta_is_int(t) || t == GGUF_VT_BOOL, "integers", err))) return rc;
    int64_t v;
    for (uint64_t j = 0; j < kv->n; j++) /* all first: out is written only on success */
        if (gguf_kv_int(kv, j, &v) != 0)
            return strata_err_set(err, STRATA_EFORMAT,
                                  "%s: key '%s': value %" PRIu64 " is past INT64_MAX", gguf_path(g),
                                  key, j);
    for (uint64_t i = 0; i < n; i++) gguf_kv_int(kv, kv->type == GGUF_VT_ARRAY ? i : 0, &out[i]);
    return 0;
}

int gguf_get_floats(const gguf *g, const char *key, float *out, uint64_t n, strata_err *err) {
    const gguf_kv *kv;
    int rc = meta_find(g, key, &kv, err);
    if (rc) return rc;
    int t = kv->elem_type;
    if ((rc = meta_vec(g, kv, n, t == GGUF_VT_F32 || t == GGUF_VT_F64, "f32 or f64 values", err)))
        return rc;
    for (uint64_t i = 0; i < n; i++) {
        double v = 0;
        gguf_kv_float(kv, kv->type == GGUF_VT_ARRAY ? i : 0, &v); /* type checked above */
        out[i] = (float)v;
    }
    return 0;
}
