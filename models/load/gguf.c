/* gguf.c - map a GGUF file and validate its header, metadata and tensor infos.
 *
 * Everything in the file is untrusted: each read is bounds-checked against the mapping,
 * each count is checked against the bytes left before anything is allocated for it, and
 * no pointer into the mapping is handed out until the whole header has been checked.
 * Opening costs one pass over the header (tensor data is never touched), so a 10 GB
 * file opens in milliseconds and pages in on first use.
 *
 * Stricter than the spec where llama.cpp's own reader (ggml/src/gguf.cpp) is: v1 files,
 * arrays of arrays, duplicate keys, more than 4 dims and rows that are not a whole number
 * of blocks are refused. Looser in one place: llama.cpp wants tensors packed in file
 * order; here any aligned, non-overlapping layout inside the data section is accepted.
 * Stricter than llama.cpp in two: a bool must be 0 or 1, and names may not hold NUL. */
#include "models/load/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define GGUF_MAGIC "GGUF"
#define GGUF_HEADER_BYTES 24 /* magic, version, u64 tensor count, u64 kv count */
/* The fewest bytes a kv (key length, type, a 1-byte value) and a tensor info (name
 * length, ndim, type, offset) can take: a count that needs more than the file holds is
 * refused before anything is allocated for it. */
#define GGUF_MIN_KV_BYTES 13
#define GGUF_MIN_TENSOR_BYTES 24
/* Far above any real file (a few thousand tensors, a few dozen keys); keeps counts in
 * int and the name tables in uint32 slots. */
#define GGUF_MAX_COUNT (1u << 26)
/* Names in messages are cut here so one error cannot be a megabyte of key. */
#define GGUF_MSG_NAME 160

/* A kv and the storage a scalar string's gguf_str points at. */
typedef struct gguf_kv_slot {
    gguf_kv kv;
    gguf_str one;
} gguf_kv_slot;

struct gguf {
    char *path;
    const uint8_t *map; /* the whole file */
    size_t len;
    int mapped; /* 1: map is ours to munmap (gguf_open), 0: the caller's buffer */
    uint32_t version;
    uint32_t alignment;
    uint64_t data_off;
    gguf_kv_slot *kvs; /* [n_kv] */
    int n_kv;
    gguf_tensor *tensors; /* [n_tensors], file order */
    int n_tensors;
    char *keys;                   /* the keys, NUL-terminated, back to back */
    char *names;                  /* the tensor names likewise */
    uint32_t *kv_slots, *t_slots; /* open addressing: index + 1, 0 = empty */
    uint32_t n_kv_slots, n_t_slots;
};

/* ---- type tables ------------------------------------------------------------------- */

typedef struct gguf_ggml_info {
    const char *name;
    uint32_t blck, bytes;
} gguf_ggml_info;

static const gguf_ggml_info gguf_ggml_table[] = {
#define GGUF_GGML_ROW(n, num, b, s) [num] = {#n, b, s},
    GGUF_GGML_LIST(GGUF_GGML_ROW)
#undef GGUF_GGML_ROW
};
#define GGUF_GGML_TABLE_LEN (sizeof gguf_ggml_table / sizeof gguf_ggml_table[0])

static const struct {
    const char *name;
    uint32_t bytes;
} gguf_vt_table[] = {
#define GGUF_VT_ROW(n, num, b, s) [num] = {s, b},
    GGUF_VT_LIST(GGUF_VT_ROW)
#undef GGUF_VT_ROW
};

const char *gguf_ggml_name(int t) {
    return t >= 0 && (size_t)t < GGUF_GGML_TABLE_LEN ? gguf_ggml_table[t].name : NULL;
}

uint32_t gguf_ggml_block(int t) {
    return t >= 0 && (size_t)t < GGUF_GGML_TABLE_LEN ? gguf_ggml_table[t].blck : 0;
}

uint32_t gguf_ggml_block_bytes(int t) {
    return t >= 0 && (size_t)t < GGUF_GGML_TABLE_LEN ? gguf_ggml_table[t].bytes : 0;
}

/* the pairs both directions read */
static const struct {
    int ggml;
    dtype dt;
} gguf_dtypes[] = {
    {GGUF_GGML_F32, DTYPE_F32},   {GGUF_GGML_F16, DTYPE_F16},   {GGUF_GGML_BF16, DTYPE_BF16},
    {GGUF_GGML_Q8_0, DTYPE_Q8_0}, {GGUF_GGML_Q4_0, DTYPE_Q4_0}, {GGUF_GGML_Q5_0, DTYPE_Q5_0},
    {GGUF_GGML_Q4_K, DTYPE_Q4_K}, {GGUF_GGML_Q6_K, DTYPE_Q6_K},
};

dtype gguf_ggml_dtype(int type) {
    for (size_t i = 0; i < sizeof gguf_dtypes / sizeof gguf_dtypes[0]; i++)
        if (gguf_dtypes[i].ggml == type) return gguf_dtypes[i].dt;
    return DTYPE_COUNT;
}

int gguf_dtype_ggml(dtype t) {
    for (size_t i = 0; i < sizeof gguf_dtypes / sizeof gguf_dtypes[0]; i++)
        if (gguf_dtypes[i].dt == t) return gguf_dtypes[i].ggml;
    return -1;
}

const char *gguf_vt_name(int t) {
    return t >= 0 && t < GGUF_VT_COUNT ? gguf_vt_table[t].name : "?";
}

/* ---- bounds-checked reads ------------------------------------------------------------ */

typedef struct gguf_rd {
    const uint8_t *p;
    uint64_t pos, len;
} gguf_rd;

static uint64_t gguf_le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static uint64_t gguf_left(const gguf_rd *r) { return r->len - r->pos; }

static int gguf_rd_u32(gguf_rd *r, uint32_t *v) {
    if (gguf_left(r) < 4) return -1;
    *v = (uint32_t)gguf_le(r->p + r->pos, 4);
    r->pos += 4;
    return 0;
}

static int gguf_rd_u64(gguf_rd *r, uint64_t *v) {
    if (gguf_left(r) < 8) return -1;
    *v = gguf_le(r->p + r->pos, 8);
    r->pos += 8;
    return 0;
}

/* A u64 length then that many bytes; -1 when either runs past the end. */
static int gguf_rd_str(gguf_rd *r, gguf_str *s) {
    uint64_t n;
    if (gguf_rd_u64(r, &n) != 0 || n > gguf_left(r)) return -1;
    s->ptr = (const char *)r->p + r->pos;
    s->len = n;
    r->pos += n;
    return 0;
}

static int gguf_msg_len(const gguf_str *s) {
    return s->len > GGUF_MSG_NAME ? GGUF_MSG_NAME : (int)s->len;
}

/* ---- name tables --------------------------------------------------------------------- */

static uint32_t gguf_hash(const char *s) {
    uint32_t h = 2166136261u; /* FNV-1a */
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 16777619u;
    return h;
}

static const char *gguf_kv_name(const gguf *g, uint32_t i) { return g->kvs[i].kv.key; }
static const char *gguf_t_name(const gguf *g, uint32_t i) { return g->tensors[i].name; }

/* The slot holding name, or the empty slot where it would go. */
static uint32_t *gguf_slot(const gguf *g, uint32_t *slots, uint32_t n_slots,
                           const char *(*name_of)(const gguf *, uint32_t), const char *name) {
    uint32_t mask = n_slots - 1;
    for (uint32_t i = gguf_hash(name) & mask;; i = (i + 1) & mask) {
        uint32_t s = slots[i];
        if (s == 0 || strcmp(name_of(g, s - 1), name) == 0) return &slots[i];
    }
}

/* Builds a table of n names; on a duplicate, *dup gets the earlier index and the later
 * one is returned (-1 when all are unique, -2 out of memory). */
static int gguf_index(const gguf *g, uint32_t **slots_out, uint32_t *n_slots_out, int n,
                      const char *(*name_of)(const gguf *, uint32_t), int *dup) {
    uint32_t n_slots = 8;
    while (n_slots < 2 * (uint32_t)n) n_slots *= 2;
    uint32_t *slots = calloc(n_slots, sizeof *slots);
    if (!slots) return -2;
    *slots_out = slots;
    *n_slots_out = n_slots;
    for (int i = 0; i < n; i++) {
        uint32_t *s = gguf_slot(g, slots, n_slots, name_of, name_of(g, (uint32_t)i));
        if (*s) {
            *dup = (int)*s - 1;
            return i;
        }
        *s = (uint32_t)i + 1;
    }
    return -1;
}

/* Copies n names (key or tensor name strings in the mapping, given through *ptrs with
 * lengths lens) into one NUL-terminated block and repoints *ptrs at the copies. */
static char *gguf_copy_names(const char **ptrs[], const uint64_t *lens, int n) {
    size_t total = 1;
    for (int i = 0; i < n; i++) total += lens[i] + 1; /* each fits in the file: no wrap */
    char *block = malloc(total), *p = block;
    if (!block) return NULL;
    for (int i = 0; i < n; i++) {
        memcpy(p, *ptrs[i], lens[i]);
        p[lens[i]] = '\0';
        *ptrs[i] = p;
        p += lens[i] + 1;
    }
    return block;
}

/* ---- metadata ------------------------------------------------------------------------ */

/* Reads the n values of one kv (a scalar has n = 1) of element type t. */
static int gguf_read_values(gguf *g, gguf_rd *r, gguf_kv_slot *s, const gguf_str *key,
                            strata_err *err) {
    gguf_kv *kv = &s->kv;
    int klen = gguf_msg_len(key);
    if (kv->elem_type == GGUF_VT_STRING) {
        /* Each string takes at least its 8-byte length: check the count before the table. */
        if (kv->n > gguf_left(r) / 8)
            return strata_err_set(err, STRATA_EFORMAT,
                                  "%s: key '%.*s': %" PRIu64 " strings cannot fit in the %" PRIu64
                                  " bytes left in the file",
                                  g->path, klen, key->ptr, kv->n, gguf_left(r));
        gguf_str *strs = &s->one;
        if (kv->type == GGUF_VT_ARRAY && !(strs = calloc(kv->n ? kv->n : 1, sizeof *strs)))
            return strata_err_set(err, STRATA_ENOMEM, "%s: key '%.*s': out of memory", g->path,
                                  klen, key->ptr);
        kv->str = strs; /* owned through the kv from here: gguf_close frees it */
        for (uint64_t j = 0; j < kv->n; j++) {
            uint64_t at = r->pos;
            if (gguf_rd_str(r, &strs[j]) != 0)
                return strata_err_set(err, STRATA_EFORMAT,
                                      "%s: key '%.*s': string %" PRIu64 " at byte %" PRIu64
                                      " runs past the end of the file",
                                      g->path, klen, key->ptr, j, at);
        }
        return 0;
    }
    uint32_t size = gguf_vt_table[kv->elem_type].bytes;
    if (kv->n > gguf_left(r) / size)
        return strata_err_set(err, STRATA_EFORMAT,
                              "%s: key '%.*s': %" PRIu64 " %s values run past the end of the file",
                              g->path, klen, key->ptr, kv->n, gguf_vt_name(kv->elem_type));
    kv->raw = r->p + r->pos;
    r->pos += kv->n * size;
    if (kv->elem_type == GGUF_VT_BOOL) {
        for (uint64_t j = 0; j < kv->n; j++)
            if (kv->raw[j] > 1)
                return strata_err_set(err, STRATA_EFORMAT,
                                      "%s: key '%.*s': bool %" PRIu64 " is %u, not 0 or 1", g->path,
                                      klen, key->ptr, j, kv->raw[j]);
    }
    return 0;
}

static int gguf_read_kv(gguf *g, gguf_rd *r, int i, gguf_str *key, strata_err *err) {
    gguf_kv_slot *s = &g->kvs[i];
    gguf_kv *kv = &s->kv;
    uint64_t at = r->pos;
    if (gguf_rd_str(r, key) != 0)
        return strata_err_set(err, STRATA_EFORMAT,
                              "%s: key %d: the key string at byte %" PRIu64
                              " runs past the end of the file",
                              g->path, i, at);
    int klen = gguf_msg_len(key);
    if (key->len == 0)
        return strata_err_set(err, STRATA_EFORMAT, "%s: key %d: empty key", g->path, i);
    if (memchr(key->ptr, 0, key->len))
        return strata_err_set(err, STRATA_EFORMAT, "%s: key '%.*s': the key holds a NUL byte",
                              g->path, klen, key->ptr);
    uint32_t type, elem;
    if (gguf_rd_u32(r, &type) != 0)
        return strata_err_set(err, STRATA_EFORMAT,
                              "%s: key '%.*s': value type runs past the end of the file", g->path,
                              klen, key->ptr);
    elem = type;
    kv->n = 1;
    if (type == GGUF_VT_ARRAY && (gguf_rd_u32(r, &elem) != 0 || gguf_rd_u64(r, &kv->n) != 0))
        return strata_err_set(err, STRATA_EFORMAT,
                              "%s: key '%.*s': array header runs past the end of the file", g->path,
                              klen, key->ptr);
    if (type >= GGUF_VT_COUNT || elem >= GGUF_VT_COUNT)
        return strata_err_set(err, STRATA_EFORMAT, "%s: key '%.*s': unknown value type %u", g->path,
                              klen, key->ptr, elem >= GGUF_VT_COUNT ? elem : type);
    if (elem == GGUF_VT_ARRAY)
        return strata_err_set(err, STRATA_EUNSUPPORTED,
                              "%s: key '%.*s': arrays of arrays are not supported (nor by "
                              "llama.cpp)",
                              g->path, klen, key->ptr);
    kv->type = (int)type;
    kv->elem_type = (int)elem;
    return gguf_read_values(g, r, s, key, err);
}

/* general.alignment: a u32 power of two when present. */
static int gguf_read_alignment(gguf *g, strata_err *err) {
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    const gguf_kv *kv = gguf_find_kv(g, "general.alignment");
    if (!kv) return 0;
    if (kv->type != GGUF_VT_U32)
        return strata_err_set(err, STRATA_EFORMAT,
                              "%s: key 'general.alignment': type %s, must be u32", g->path,
                              gguf_vt_name(kv->elem_type));
    uint32_t a = (uint32_t)gguf_le(kv->raw, 4);
    if (a == 0 || (a & (a - 1)))
        return strata_err_set(err, STRATA_EFORMAT,
                              "%s: key 'general.alignment': %u is not a power of two", g->path, a);
    g->alignment = a;
    return 0;
}

static int gguf_read_kvs(gguf *g, gguf_rd *r, strata_err *err) {
    gguf_str *keys = calloc((size_t)g->n_kv + 1, sizeof *keys);
    const char ***ptrs = calloc((size_t)g->n_kv + 1, sizeof *ptrs);
    uint64_t *lens = calloc((size_t)g->n_kv + 1, sizeof *lens);
    int rc = 0, dup = -1;
    if (!keys || !ptrs || !lens) {
        rc = strata_err_set(err, STRATA_ENOMEM, "%s: out of memory", g->path);
        goto fail;
    }
    for (int i = 0; i < g->n_kv; i++) {
        if ((rc = gguf_read_kv(g, r, i, &keys[i], err))) goto fail;
        g->kvs[i].kv.key = keys[i].ptr;
        ptrs[i] = &g->kvs[i].kv.key;
        lens[i] = keys[i].len;
    }
    if (!(g->keys = gguf_copy_names(ptrs, lens, g->n_kv))) {
        rc = strata_err_set(err, STRATA_ENOMEM, "%s: out of memory", g->path);
        goto fail;
    }
    int k = gguf_index(g, &g->kv_slots, &g->n_kv_slots, g->n_kv, gguf_kv_name, &dup);
    if (k == -2) rc = strata_err_set(err, STRATA_ENOMEM, "%s: out of memory", g->path);
    else if (k >= 0)
        rc = strata_err_set(err, STRATA_EFORMAT, "%s: key '%.*s' appears twice (keys %d and %d)",
                            g->path, GGUF_MSG_NAME, g->kvs[k].kv.key, dup, k);
    else rc = gguf_read_alignment(g, err);
fail:
    free(lens);
    free(ptrs);
    free(keys);
    return rc;
}

/* ---- tensors ------------------------------------------------------------------------- */

/* One tensor info: name (left pointing into the mapping), dims, type, byte size and the
 * offset as stored; the offset is checked once the data section is known. */
static int gguf_read_tensor(gguf *g, gguf_rd *r, int i, gguf_str *name, strata_err *err) {
    gguf_tensor *t = &g->tensors[i];
    uint64_t at = r->pos;
    if (gguf_rd_str(r, name) != 0)
        return strata_err_set(err, STRATA_EFORMAT,
                              "%s: tensor %d: the name string at byte %" PRIu64
                              " runs past the end of the file",
                              g->path, i, at);
    int nlen = gguf_msg_len(name);
    if (name->len == 0)
        return strata_err_set(err, STRATA_EFORMAT, "%s: tensor %d: empty name", g->path, i);
    if (memchr(name->ptr, 0, name->len))
        return strata_err_set(err, STRATA_EFORMAT, "%s: tensor '%.*s': the name holds a NUL byte",
                              g->path, nlen, name->ptr);
    uint32_t ndim, type;
    if (gguf_rd_u32(r, &ndim) != 0) goto truncated;
    if (ndim > GGUF_MAX_DIMS)
        return strata_err_set(err, STRATA_EUNSUPPORTED, "%s: tensor '%.*s': %u dims, at most %d",
                              g->path, nlen, name->ptr, ndim, GGUF_MAX_DIMS);
    t->ndim = (int)ndim;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) {
        uint64_t v = 1;
        if (d < t->ndim && gguf_rd_u64(r, &v) != 0) goto truncated;
        if (v > INT64_MAX)
            return strata_err_set(err, STRATA_EFORMAT,
                                  "%s: tensor '%.*s': dim %d is %" PRIu64 ", past INT64_MAX",
                                  g->path, nlen, name->ptr, d, v);
        t->ne[d] = (int64_t)v;
    }
    for (int d = 0; d < t->ndim; d++) t->shape[d] = t->ne[t->ndim - 1 - d];
    if (gguf_rd_u32(r, &type) != 0 || gguf_rd_u64(r, &t->offset) != 0) goto truncated;
    uint32_t blck = gguf_ggml_block((int)type), bytes = gguf_ggml_block_bytes((int)type);
    if (!blck)
        return strata_err_set(err, STRATA_EUNSUPPORTED, "%s: tensor '%.*s': unknown ggml type %u",
                              g->path, nlen, name->ptr, type);
    t->type = (int)type;
    if (t->ne[0] % blck)
        return strata_err_set(err, STRATA_EFORMAT,
                              "%s: tensor '%.*s': rows of %" PRId64
                              " elements are not a whole number of %s blocks of %u",
                              g->path, nlen, name->ptr, t->ne[0], gguf_ggml_name(t->type), blck);
    /* In uint64 so huge dims cannot wrap to a small byte count that would then fit; a
     * zero dim makes the tensor empty whatever the others are. */
    uint64_t elems = 1, nbytes;
    int overflow = 0, zero = 0;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) {
        zero |= t->ne[d] == 0;
        overflow |= __builtin_mul_overflow(elems, (uint64_t)t->ne[d], &elems);
    }
    if (zero) elems = 0;
    overflow = !zero && (overflow || elems > INT64_MAX ||
                         __builtin_mul_overflow(elems / blck, (uint64_t)bytes, &nbytes) ||
                         nbytes > SIZE_MAX);
    if (overflow)
        return strata_err_set(err, STRATA_EFORMAT,
                              "%s: tensor '%.*s': dims [%" PRId64 ", %" PRId64 ", %" PRId64
                              ", %" PRId64 "] x %s overflow the byte count",
                              g->path, nlen, name->ptr, t->ne[0], t->ne[1], t->ne[2], t->ne[3],
                              gguf_ggml_name(t->type));
    t->n_elements = (int64_t)elems;
    t->nbytes = zero ? 0 : (size_t)nbytes;
    return 0;
truncated:
    return strata_err_set(err, STRATA_EFORMAT,
                          "%s: tensor '%.*s': tensor info runs past the end of the file", g->path,
                          nlen, name->ptr);
}

typedef struct gguf_range {
    uint64_t begin, end;
    int i;
} gguf_range;

static int gguf_range_cmp(const void *a, const void *b) {
    const gguf_range *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->i - y->i; /* ties in file order: the later tensor is the one reported */
}

/* Each tensor's bytes aligned, inside the data section and overlapping no other. */
static int gguf_check_data(gguf *g, strata_err *err) {
    uint64_t data_len = g->len - g->data_off;
    gguf_range *rs = calloc((size_t)g->n_tensors + 1, sizeof *rs);
    if (!rs) return strata_err_set(err, STRATA_ENOMEM, "%s: out of memory", g->path);
    int rc = 0;
    for (int i = 0; i < g->n_tensors && !rc; i++) {
        gguf_tensor *t = &g->tensors[i];
        if (t->offset % g->alignment)
            rc = strata_err_set(err, STRATA_EFORMAT,
                                "%s: tensor '%s': offset %" PRIu64
                                " is not a multiple of the alignment %u",
                                g->path, t->name, t->offset, g->alignment);
        else if (t->offset > data_len || t->nbytes > data_len - t->offset)
            rc = strata_err_set(err, STRATA_EFORMAT,
                                "%s: tensor '%s': %zu bytes at offset %" PRIu64
                                " run past the end of the data section (%" PRIu64 " bytes)",
                                g->path, t->name, t->nbytes, t->offset, data_len);
        else t->data = g->map + g->data_off + t->offset;
        rs[i] = (gguf_range){t->offset, t->offset + t->nbytes, i};
    }
    if (!rc) qsort(rs, (size_t)g->n_tensors, sizeof *rs, gguf_range_cmp);
    /* Sorted by begin, a range overlaps an earlier one exactly when it starts before the
     * furthest end seen so far. Empty tensors hold no bytes and overlap nothing. */
    const gguf_range *far = NULL;
    for (int i = 0; i < g->n_tensors && !rc; i++) {
        if (rs[i].begin == rs[i].end) continue;
        if (far && rs[i].begin < far->end)
            rc = strata_err_set(err, STRATA_EFORMAT,
                                "%s: tensor '%s': bytes [%" PRIu64 ", %" PRIu64
                                ") overlap tensor '%s' [%" PRIu64 ", %" PRIu64 ")",
                                g->path, g->tensors[rs[i].i].name, rs[i].begin, rs[i].end,
                                g->tensors[far->i].name, far->begin, far->end);
        if (!far || rs[i].end > far->end) far = &rs[i];
    }
    free(rs);
    return rc;
}

static int gguf_read_tensors(gguf *g, gguf_rd *r, strata_err *err) {
    gguf_str *names = calloc((size_t)g->n_tensors + 1, sizeof *names);
    const char ***ptrs = calloc((size_t)g->n_tensors + 1, sizeof *ptrs);
    uint64_t *lens = calloc((size_t)g->n_tensors + 1, sizeof *lens);
    int rc = 0, dup = -1;
    if (!names || !ptrs || !lens) {
        rc = strata_err_set(err, STRATA_ENOMEM, "%s: out of memory", g->path);
        goto fail;
    }
    for (int i = 0; i < g->n_tensors; i++) {
        if ((rc = gguf_read_tensor(g, r, i, &names[i], err))) goto fail;
        g->tensors[i].name = names[i].ptr;
        ptrs[i] = &g->tensors[i].name;
        lens[i] = names[i].len;
    }
    if (!(g->names = gguf_copy_names(ptrs, lens, g->n_tensors))) {
        rc = strata_err_set(err, STRATA_ENOMEM, "%s: out of memory", g->path);
        goto fail;
    }
    int k = gguf_index(g, &g->t_slots, &g->n_t_slots, g->n_tensors, gguf_t_name, &dup);
    if (k == -2) {
        rc = strata_err_set(err, STRATA_ENOMEM, "%s: out of memory", g->path);
        goto fail;
    }
    if (k >= 0) {
        rc = strata_err_set(err, STRATA_EFORMAT,
                            "%s: tensor '%.*s' appears twice (tensors %d and %d)", g->path,
                            GGUF_MSG_NAME, g->tensors[k].name, dup, k);
        goto fail;
    }
    /* The data section starts at the next multiple of the alignment after the infos
     * (llama.cpp pads only when there are tensors). */
    g->data_off = r->pos;
    if (g->n_tensors > 0) g->data_off += (g->alignment - r->pos % g->alignment) % g->alignment;
    if (g->data_off > g->len) {
        rc = strata_err_set(err, STRATA_EFORMAT,
                            "%s: the data section starts at byte %" PRIu64
                            ", past the end of the %zu-byte file",
                            g->path, g->data_off, g->len);
        goto fail;
    }
    rc = gguf_check_data(g, err);
fail:
    free(lens);
    free(ptrs);
    free(names);
    return rc;
}

/* ---- header -------------------------------------------------------------------------- */

static int gguf_read_header(gguf *g, gguf_rd *r, strata_err *err) {
    if (r->len < GGUF_HEADER_BYTES)
        return strata_err_set(err, STRATA_EFORMAT,
                              "%s: truncated: %zu bytes, shorter than the %d-byte GGUF header",
                              g->path, g->len, GGUF_HEADER_BYTES);
    if (memcmp(r->p, GGUF_MAGIC, 4) != 0)
        return strata_err_set(err, STRATA_EFORMAT,
                              "%s: not a GGUF file: magic %02x %02x %02x %02x, not 'GGUF'", g->path,
                              r->p[0], r->p[1], r->p[2], r->p[3]);
    r->pos = 4;
    uint64_t n_tensors, n_kv;
    gguf_rd_u32(r, &g->version);
    gguf_rd_u64(r, &n_tensors);
    gguf_rd_u64(r, &n_kv);
    /* A big-endian file's version 3 reads as 0x03000000 here (llama.cpp's test). */
    if (g->version != 0 && (g->version & 0xffffu) == 0)
        return strata_err_set(err, STRATA_EUNSUPPORTED,
                              "%s: version 0x%08x: a big-endian GGUF file; only little-endian "
                              "files are supported",
                              g->path, g->version);
    if (g->version < 2 || g->version > 3)
        return strata_err_set(err, STRATA_EUNSUPPORTED,
                              "%s: GGUF version %u is not supported (2 and 3 are)", g->path,
                              g->version);
    uint64_t left = gguf_left(r);
    if (n_kv > GGUF_MAX_COUNT || n_tensors > GGUF_MAX_COUNT)
        return strata_err_set(err, STRATA_EFORMAT,
                              "%s: header counts %" PRIu64 " keys and %" PRIu64
                              " tensors; more than %u of either is not a real file",
                              g->path, n_kv, n_tensors, GGUF_MAX_COUNT);
    if (n_kv * GGUF_MIN_KV_BYTES + n_tensors * GGUF_MIN_TENSOR_BYTES > left)
        return strata_err_set(err, STRATA_EFORMAT,
                              "%s: header counts %" PRIu64 " keys and %" PRIu64
                              " tensors, which cannot fit in the %" PRIu64
                              " bytes after the header",
                              g->path, n_kv, n_tensors, left);
    g->n_kv = (int)n_kv;
    g->n_tensors = (int)n_tensors;
    return 0;
}

static int gguf_parse(gguf *g, strata_err *err) {
    gguf_rd r = {g->map, 0, g->len};
    int rc;
    if ((rc = gguf_read_header(g, &r, err))) return rc;
    if (!(g->kvs = calloc((size_t)g->n_kv + 1, sizeof *g->kvs)) ||
        !(g->tensors = calloc((size_t)g->n_tensors + 1, sizeof *g->tensors)))
        return strata_err_set(err, STRATA_ENOMEM, "%s: out of memory", g->path);
    if ((rc = gguf_read_kvs(g, &r, err))) return rc;
    return gguf_read_tensors(g, &r, err);
}

/* ---- open / close -------------------------------------------------------------------- */

static gguf *gguf_new(const char *name) {
    size_t n = strlen(name) + 1;
    gguf *g = calloc(1, sizeof *g);
    if (g && !(g->path = malloc(n))) {
        free(g);
        return NULL;
    }
    if (g) memcpy(g->path, name, n);
    return g;
}

int gguf_open_buffer(gguf **out, const void *data, size_t len, const char *name, strata_err *err) {
    gguf *g = gguf_new(name);
    if (!g) return strata_err_set(err, STRATA_ENOMEM, "%s: out of memory", name);
    g->map = data;
    g->len = len;
    int rc = gguf_parse(g, err);
    if (rc) {
        gguf_close(g);
        return rc;
    }
    *out = g;
    return 0;
}

int gguf_open(gguf **out, const char *path, strata_err *err) {
    struct stat sb;
    int rc, fd = -1;
    gguf *g = gguf_new(path);
    if (!g) return strata_err_set(err, STRATA_ENOMEM, "%s: out of memory", path);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &sb) != 0) {
        rc =
            strata_err_set(err, errno == ENOENT || errno == ENOTDIR ? STRATA_ENOTFOUND : STRATA_EIO,
                           "%s: %s", path, strerror(errno));
        goto fail;
    }
    if (!S_ISREG(sb.st_mode)) {
        rc = strata_err_set(err, STRATA_EFORMAT, "%s: not a regular file", path);
        goto fail;
    }
    if (sb.st_size < GGUF_HEADER_BYTES) { /* also keeps mmap from a zero length */
        rc = strata_err_set(err, STRATA_EFORMAT,
                            "%s: truncated: %lld bytes, shorter than the %d-byte GGUF header", path,
                            (long long)sb.st_size, GGUF_HEADER_BYTES);
        goto fail;
    }
    g->len = (size_t)sb.st_size;
    void *map = mmap(NULL, g->len, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
        rc = strata_err_set(err, errno == ENOMEM ? STRATA_ENOMEM : STRATA_EIO, "%s: mmap: %s", path,
                            strerror(errno));
        goto fail;
    }
    g->map = map;
    g->mapped = 1;
    rc = gguf_parse(g, err);
fail:
    if (fd >= 0) close(fd);
    if (rc) gguf_close(g);
    else *out = g;
    return rc;
}

void gguf_close(gguf *g) {
    if (!g) return;
    free(g->t_slots);
    free(g->kv_slots);
    free(g->names);
    free(g->keys);
    free(g->tensors);
    for (int i = 0; g->kvs && i < g->n_kv; i++)
        if (g->kvs[i].kv.str && g->kvs[i].kv.str != &g->kvs[i].one) free((void *)g->kvs[i].kv.str);
    free(g->kvs);
    if (g->mapped) munmap((void *)g->map, g->len);
    free(g->path);
    free(g);
}

/* ---- queries ------------------------------------------------------------------------- */

const char *gguf_path(const gguf *g) { return g->path; }
uint32_t gguf_version(const gguf *g) { return g->version; }
uint32_t gguf_alignment(const gguf *g) { return g->alignment; }
uint64_t gguf_data_offset(const gguf *g) { return g->data_off; }
int gguf_kv_count(const gguf *g) { return g->n_kv; }
int gguf_tensor_count(const gguf *g) { return g->n_tensors; }

const gguf_kv *gguf_kv_at(const gguf *g, int i) {
    return i >= 0 && i < g->n_kv ? &g->kvs[i].kv : NULL;
}

const gguf_tensor *gguf_tensor_at(const gguf *g, int i) {
    return i >= 0 && i < g->n_tensors ? &g->tensors[i] : NULL;
}

const gguf_kv *gguf_find_kv(const gguf *g, const char *key) {
    if (!g->kv_slots) return NULL;
    uint32_t s = *gguf_slot(g, g->kv_slots, g->n_kv_slots, gguf_kv_name, key);
    return s ? &g->kvs[s - 1].kv : NULL;
}

const gguf_tensor *gguf_find_tensor(const gguf *g, const char *name) {
    if (!g->t_slots) return NULL;
    uint32_t s = *gguf_slot(g, g->t_slots, g->n_t_slots, gguf_t_name, name);
    return s ? &g->tensors[s - 1] : NULL;
}
