/* safetensors.c - mmap a checkpoint's .safetensors files and validate their headers.
 *
 * Startup costs one mmap and one JSON parse per file: tensor data is never read or
 * copied here, so a 10 GB checkpoint opens in milliseconds and pages in on first use.
 * Everything in a header is untrusted input: each field is checked before a pointer
 * into the mapping is handed out, and each error names the file and the tensor.
 *
 * Allocations go through jansson's allocator (json_get_alloc_funcs), so a test that
 * installs a failing allocator with json_set_alloc_funcs reaches every out-of-memory
 * path of both the JSON parse and this loader (style.md section 11). */
#include "models/load/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* A real header is a few hundred KB (tens of thousands of tensors); anything past this
 * is a corrupt length field, and refusing it keeps a bad file from costing a huge parse. */
#define ST_MAX_HEADER ((uint64_t)100 * 1000 * 1000)

#define ST_SINGLE_NAME "model.safetensors"
#define ST_INDEX_NAME "model.safetensors.index.json"

typedef struct st_file {
    char *path;         /* as opened; tensors point at it for messages */
    const uint8_t *map; /* whole file, PROT_READ, MAP_PRIVATE */
    size_t map_len;
    size_t data_off; /* 8 + header length: where data_offsets count from */
    json_t *root;    /* header, only while st_open runs */
} st_file;

struct st_model {
    st_file *files; /* [n_files] */
    int n_files;
    st_tensor *tensors; /* [n_tensors]: per file in offset order, files in index order */
    int n_tensors;
    uint32_t *slots;  /* open-addressing table of tensor index + 1; 0 = empty */
    uint32_t n_slots; /* power of two, >= 2 * n_tensors */
};

/* One validated header entry; name points into the parsed JSON. */
typedef struct st_entry {
    const char *name;
    dtype dt;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    uint64_t begin, end;
} st_entry;

static void *st_alloc(size_t n) {
    json_malloc_t m;
    json_free_t f;
    json_get_alloc_funcs(&m, &f);
    return m(n ? n : 1);
}

static void st_free(void *p) {
    if (!p) return;
    json_malloc_t m;
    json_free_t f;
    json_get_alloc_funcs(&m, &f);
    f(p);
}

static void *st_calloc(size_t n, size_t size) {
    size_t bytes;
    if (__builtin_mul_overflow(n, size, &bytes)) return NULL;
    void *p = st_alloc(bytes);
    if (p) memset(p, 0, bytes ? bytes : 1);
    return p;
}

static char *st_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = st_alloc(n);
    if (p) memcpy(p, s, n);
    return p;
}

static char *st_join(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    char *p = st_alloc(a + b + 2);
    if (!p) return NULL;
    memcpy(p, dir, a);
    size_t k = a;
    if (a && dir[a - 1] != '/') p[k++] = '/';
    memcpy(p + k, name, b + 1);
    return p;
}

static int st_errno_code(int e) {
    return e == ENOENT || e == ENOTDIR ? STRATA_ENOTFOUND
           : e == ENOMEM               ? STRATA_ENOMEM
                                       : STRATA_EIO;
}

/* ---- header validation ------------------------------------------------------------ */

static int st_entry_cmp(const void *a, const void *b) {
    const st_entry *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

/* Reads a non-negative JSON integer; -1 when v is not one. */
static int st_json_uint(const json_t *v, uint64_t *out) {
    if (!json_is_integer(v) || json_integer_value(v) < 0) return -1;
    *out = (uint64_t)json_integer_value(v);
    return 0;
}

static int st_parse_entry(st_entry *e, const char *name, const json_t *v, size_t data_len,
                          const char *file, strata_err *err) {
    if (!json_is_object(v))
        return strata_err_set(err, STRATA_EFORMAT, "%s: tensor '%s': entry is not an object", file,
                              name);
    const json_t *jdt = json_object_get(v, "dtype");
    const json_t *jshape = json_object_get(v, "shape");
    const json_t *joff = json_object_get(v, "data_offsets");
    if (!json_is_string(jdt))
        return strata_err_set(err, STRATA_EFORMAT, "%s: tensor '%s': dtype missing or not a string",
                              file, name);
    if (dtype_parse(json_string_value(jdt), &e->dt) != 0)
        return strata_err_set(err, STRATA_EUNSUPPORTED, "%s: tensor '%s': unknown dtype '%s'", file,
                              name, json_string_value(jdt));
    if (!json_is_array(jshape))
        return strata_err_set(err, STRATA_EFORMAT, "%s: tensor '%s': shape missing or not a list",
                              file, name);
    size_t ndim = json_array_size(jshape);
    if (ndim > ST_MAX_DIMS)
        return strata_err_set(err, STRATA_EUNSUPPORTED,
                              "%s: tensor '%s': %zu dims, at most %d supported", file, name, ndim,
                              ST_MAX_DIMS);
    /* The product is checked in uint64 so a shape of huge dims cannot wrap to a small
     * byte count that would then pass the length comparison. A zero dim anywhere makes
     * the tensor empty, whatever the other dims are. */
    uint64_t nbytes = dtype_size(e->dt);
    int overflow = 0, zero = 0;
    e->ndim = (int)ndim;
    for (size_t i = 0; i < ndim; i++) {
        uint64_t d;
        if (st_json_uint(json_array_get(jshape, i), &d) != 0)
            return strata_err_set(err, STRATA_EFORMAT,
                                  "%s: tensor '%s': shape[%zu] is not a non-negative integer", file,
                                  name, i);
        e->shape[i] = (int64_t)d;
        zero |= d == 0;
        overflow |= __builtin_mul_overflow(nbytes, d, &nbytes);
    }
    if (zero) nbytes = 0;
    else if (overflow)
        return strata_err_set(err, STRATA_EFORMAT, "%s: tensor '%s': shape x dtype size overflows",
                              file, name);
    if (!json_is_array(joff) || json_array_size(joff) != 2 ||
        st_json_uint(json_array_get(joff, 0), &e->begin) != 0 ||
        st_json_uint(json_array_get(joff, 1), &e->end) != 0)
        return strata_err_set(err, STRATA_EFORMAT,
                              "%s: tensor '%s': data_offsets is not a list of 2 non-negative "
                              "integers",
                              file, name);
    if (e->begin > e->end)
        return strata_err_set(err, STRATA_EFORMAT,
                              "%s: tensor '%s': data_offsets begin %" PRIu64 " > end %" PRIu64,
                              file, name, e->begin, e->end);
    if (e->end > data_len)
        return strata_err_set(err, STRATA_EFORMAT,
                              "%s: tensor '%s': data_offsets end %" PRIu64
                              " is past the data section (%zu bytes)",
                              file, name, e->end, data_len);
    if (e->end - e->begin != nbytes)
        return strata_err_set(err, STRATA_EFORMAT,
                              "%s: tensor '%s': shape x dtype size is %" PRIu64
                              " bytes but data_offsets span %" PRIu64,
                              file, name, nbytes, e->end - e->begin);
    e->name = name;
    return 0;
}

/* Validates every entry of a parsed header into entries[] (room for
 * json_object_size(root)), sorted by offset; *n gets the tensor count. */
static int st_parse_entries(st_entry *entries, int *n, const json_t *root, size_t data_len,
                            const char *file, strata_err *err) {
    const char *key;
    const json_t *v;
    int k = 0;
    json_object_foreach((json_t *)root, key, v) {
        if (strcmp(key, "__metadata__") == 0) continue;
        int rc = st_parse_entry(&entries[k], key, v, data_len, file, err);
        if (rc) return rc;
        k++;
    }
    qsort(entries, (size_t)k, sizeof *entries, st_entry_cmp);
    /* Sorted by begin, a range overlaps an earlier one exactly when it starts before the
     * furthest end seen so far. Empty ranges hold no bytes and overlap nothing. */
    const st_entry *far = NULL;
    for (int i = 0; i < k; i++) {
        if (entries[i].begin == entries[i].end) continue;
        if (far && entries[i].begin < far->end)
            return strata_err_set(err, STRATA_EFORMAT,
                                  "%s: tensor '%s': bytes [%" PRIu64 ", %" PRIu64
                                  ") overlap tensor '%s' [%" PRIu64 ", %" PRIu64 ")",
                                  file, entries[i].name, entries[i].begin, entries[i].end,
                                  far->name, far->begin, far->end);
        if (!far || entries[i].end > far->end) far = &entries[i];
    }
    *n = k;
    return 0;
}

/* jansson reports some allocation failures as json_error_out_of_memory and returns
 * with the error text unset when the lexer's first buffer cannot be allocated; a
 * failure inside its string scanner still surfaces as a syntax error. */
static int st_json_oom(const json_error_t *je) {
    return json_error_code(je) == json_error_out_of_memory || je->text[0] == '\0';
}

static int st_parse_json(json_t **out, const char *json, size_t len, const char *file,
                         strata_err *err) {
    json_error_t je;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        if (st_json_oom(&je))
            return strata_err_set(err, STRATA_ENOMEM, "%s: out of memory parsing header", file);
        return strata_err_set(err, STRATA_EFORMAT, "%s: header is not valid JSON (%s at byte %d)",
                              file, je.text, je.position);
    }
    if (!json_is_object(root)) {
        json_decref(root);
        return strata_err_set(err, STRATA_EFORMAT, "%s: header is not a JSON object", file);
    }
    *out = root;
    return 0;
}

int st_check_header(const char *json, size_t json_len, size_t data_len, const char *file,
                    strata_err *err) {
    json_t *root = NULL;
    st_entry *entries = NULL;
    int n, rc;
    if (json_len > ST_MAX_HEADER) {
        rc = strata_err_set(err, STRATA_EFORMAT,
                            "%s: header length %zu exceeds the %" PRIu64 " byte limit", file,
                            json_len, ST_MAX_HEADER);
        goto fail;
    }
    if ((rc = st_parse_json(&root, json, json_len, file, err))) goto fail;
    entries = st_calloc(json_object_size(root), sizeof *entries);
    if (!entries) {
        rc = strata_err_set(err, STRATA_ENOMEM, "%s: out of memory", file);
        goto fail;
    }
    rc = st_parse_entries(entries, &n, root, data_len, file, err);
fail:
    st_free(entries);
    json_decref(root);
    return rc;
}

/* ---- files ------------------------------------------------------------------------- */

/* Maps one file and parses (but does not yet validate) its header into f->root. */
static int st_file_open(st_file *f, const char *path, strata_err *err) {
    int fd = -1, rc;
    struct stat sb;
    if (!(f->path = st_strdup(path))) {
        rc = strata_err_set(err, STRATA_ENOMEM, "%s: out of memory", path);
        goto fail;
    }
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &sb) != 0) {
        rc = strata_err_set(err, st_errno_code(errno), "%s: %s", path, strerror(errno));
        goto fail;
    }
    if (!S_ISREG(sb.st_mode)) {
        rc = strata_err_set(err, STRATA_EFORMAT, "%s: not a regular file", path);
        goto fail;
    }
    if (sb.st_size < 8) {
        rc = strata_err_set(err, STRATA_EFORMAT,
                            "%s: truncated: %lld bytes, shorter than the 8-byte header length",
                            path, (long long)sb.st_size);
        goto fail;
    }
    f->map_len = (size_t)sb.st_size;
    void *map = mmap(NULL, f->map_len, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
        rc = strata_err_set(err, st_errno_code(errno), "%s: mmap: %s", path, strerror(errno));
        goto fail;
    }
    f->map = map;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | f->map[i]; /* little-endian on disk */
    if (hlen > ST_MAX_HEADER) {
        rc = strata_err_set(err, STRATA_EFORMAT,
                            "%s: header length %" PRIu64 " exceeds the %" PRIu64 " byte limit",
                            path, hlen, ST_MAX_HEADER);
        goto fail;
    }
    if (hlen > f->map_len - 8) {
        rc = strata_err_set(err, STRATA_EFORMAT,
                            "%s: truncated: header length %" PRIu64 " runs past the end of the "
                            "%zu-byte file",
                            path, hlen, f->map_len);
        goto fail;
    }
    f->data_off = 8 + (size_t)hlen;
    rc = st_parse_json(&f->root, (const char *)f->map + 8, (size_t)hlen, path, err);
fail:
    if (fd >= 0) close(fd);
    return rc;
}

static void st_file_close(st_file *f) {
    json_decref(f->root);
    if (f->map) munmap((void *)f->map, f->map_len);
    st_free(f->path);
}

/* ---- model ------------------------------------------------------------------------- */

static uint32_t st_hash(const char *s) {
    uint32_t h = 2166136261u; /* FNV-1a */
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 16777619u;
    return h;
}

static uint32_t *st_slot(const st_model *m, const char *name) {
    uint32_t mask = m->n_slots - 1;
    for (uint32_t i = st_hash(name) & mask;; i = (i + 1) & mask) {
        uint32_t s = m->slots[i];
        if (s == 0 || strcmp(m->tensors[s - 1].name, name) == 0) return &m->slots[i];
    }
}

/* Validates file f's header and appends its tensors to m (room was reserved). */
static int st_model_add_file(st_model *m, st_file *f, strata_err *err) {
    st_entry *entries = st_calloc(json_object_size(f->root), sizeof *entries);
    int n = 0, rc;
    if (!entries) {
        rc = strata_err_set(err, STRATA_ENOMEM, "%s: out of memory", f->path);
        goto fail;
    }
    if ((rc = st_parse_entries(entries, &n, f->root, f->map_len - f->data_off, f->path, err)))
        goto fail;
    for (int i = 0; i < n; i++) {
        const st_entry *e = &entries[i];
        uint32_t *slot = st_slot(m, e->name);
        if (*slot) {
            rc = strata_err_set(err, STRATA_EFORMAT, "%s: tensor '%s' is also in %s", f->path,
                                e->name, m->tensors[*slot - 1].file);
            goto fail;
        }
        st_tensor *t = &m->tensors[m->n_tensors];
        if (!(t->name = st_strdup(e->name))) {
            rc = strata_err_set(err, STRATA_ENOMEM, "%s: out of memory", f->path);
            goto fail;
        }
        t->dt = e->dt;
        t->ndim = e->ndim;
        memcpy(t->shape, e->shape, sizeof t->shape);
        t->data = f->map + f->data_off + e->begin;
        t->nbytes = (size_t)(e->end - e->begin);
        t->file = f->path;
        *slot = (uint32_t)++m->n_tensors;
    }
fail:
    st_free(entries);
    return rc;
}

/* Rejects shard names that would leave the checkpoint directory. */
static int st_shard_name_ok(const char *s) {
    if (!*s || s[0] == '/') return 0;
    for (const char *p = s; *p;) {
        const char *q = strchr(p, '/');
        size_t len = q ? (size_t)(q - p) : strlen(p);
        if (len == 2 && p[0] == '.' && p[1] == '.') return 0;
        p += len + (q != NULL);
    }
    return 1;
}

/* The index's shard list, each shard once, in order of first mention. */
static int st_index_shards(const char ***out, int *n_out, const json_t *wmap, const char *path,
                           strata_err *err) {
    const char **shards = st_calloc(json_object_size(wmap), sizeof *shards);
    int n = 0;
    const char *key;
    const json_t *v;
    if (!shards) return strata_err_set(err, STRATA_ENOMEM, "%s: out of memory", path);
    json_object_foreach((json_t *)wmap, key, v) {
        if (!json_is_string(v) || !st_shard_name_ok(json_string_value(v))) {
            st_free(shards);
            return strata_err_set(err, STRATA_EFORMAT,
                                  "%s: tensor '%s': weight_map value is not a shard file name",
                                  path, key);
        }
        int k = 0;
        while (k < n && strcmp(shards[k], json_string_value(v)) != 0) k++;
        if (k == n) shards[n++] = json_string_value(v);
    }
    *out = shards;
    *n_out = n;
    return 0;
}

/* Checks that the index and the shards agree: each listed tensor is in its shard, and
 * no shard holds a tensor the index does not list. */
static int st_index_check(const st_model *m, const json_t *wmap, const char *dir, const char *path,
                          strata_err *err) {
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)wmap, key, v) {
        const st_tensor *t = st_find(m, key);
        const char *shard = json_string_value(v);
        const st_file *f = NULL;
        for (int i = 0; i < m->n_files && !f; i++) {
            const char *base = m->files[i].path + strlen(dir);
            while (*base == '/') base++;
            if (strcmp(base, shard) == 0) f = &m->files[i];
        }
        if (!t)
            return strata_err_set(err, STRATA_EFORMAT,
                                  "%s: tensor '%s' is listed in shard %s but %s does not hold it",
                                  path, key, shard, f ? f->path : shard);
        if (!f || t->file != f->path)
            return strata_err_set(err, STRATA_EFORMAT,
                                  "%s: tensor '%s' is listed in shard %s but found in %s", path,
                                  key, shard, t->file);
    }
    for (int i = 0; i < m->n_tensors; i++) {
        if (!json_object_get(wmap, m->tensors[i].name))
            return strata_err_set(err, STRATA_EFORMAT,
                                  "%s: tensor '%s' is not listed in the weight_map of %s",
                                  m->tensors[i].file, m->tensors[i].name, path);
    }
    return 0;
}

/* Opens the given files, validates their headers and builds the name table. On
 * failure everything allocated so far is left in m for st_close. */
static int st_model_load(st_model *m, const char *const *paths, int n, strata_err *err) {
    int rc;
    if (!(m->files = st_calloc((size_t)n, sizeof *m->files)))
        return strata_err_set(err, STRATA_ENOMEM, "%s: out of memory", paths[0]);
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        m->n_files++;
        if ((rc = st_file_open(&m->files[i], paths[i], err))) return rc;
        total += json_object_size(m->files[i].root);
    }
    if (total >= UINT32_MAX / 4)
        return strata_err_set(err, STRATA_EFORMAT, "%s: too many tensors (%zu)", paths[0], total);
    m->n_slots = 8;
    while (m->n_slots < 2 * total) m->n_slots *= 2;
    if (!(m->tensors = st_calloc(total, sizeof *m->tensors)) ||
        !(m->slots = st_calloc(m->n_slots, sizeof *m->slots)))
        return strata_err_set(err, STRATA_ENOMEM, "%s: out of memory", paths[0]);
    for (int i = 0; i < n; i++) {
        if ((rc = st_model_add_file(m, &m->files[i], err))) return rc;
        json_decref(m->files[i].root);
        m->files[i].root = NULL;
    }
    return 0;
}

/* Loads the shards named by an index file that lives in dir. */
static int st_model_load_index(st_model *m, const char *dir, const char *index_path,
                               strata_err *err) {
    json_t *root = NULL;
    const char **shards = NULL;
    char **paths = NULL;
    int n = 0, rc;
    json_error_t je;
    if (!(root = json_load_file(index_path, JSON_REJECT_DUPLICATES, &je))) {
        rc = st_json_oom(&je) ? STRATA_ENOMEM : STRATA_EFORMAT;
        rc = strata_err_set(err, rc, "%s: cannot read index (%s)", index_path, je.text);
        goto fail;
    }
    const json_t *wmap = json_object_get(root, "weight_map");
    if (!json_is_object(wmap) || json_object_size(wmap) == 0) {
        rc = strata_err_set(err, STRATA_EFORMAT, "%s: weight_map missing, empty or not an object",
                            index_path);
        goto fail;
    }
    if ((rc = st_index_shards(&shards, &n, wmap, index_path, err))) goto fail;
    if (!(paths = st_calloc((size_t)n, sizeof *paths))) {
        rc = strata_err_set(err, STRATA_ENOMEM, "%s: out of memory", index_path);
        goto fail;
    }
    for (int i = 0; i < n; i++) {
        if (!(paths[i] = st_join(dir, shards[i]))) {
            rc = strata_err_set(err, STRATA_ENOMEM, "%s: out of memory", index_path);
            goto fail;
        }
    }
    if ((rc = st_model_load(m, (const char *const *)paths, n, err))) goto fail;
    rc = st_index_check(m, wmap, dir, index_path, err);
fail:
    for (int i = 0; paths && i < n; i++) st_free(paths[i]);
    st_free(paths);
    st_free(shards);
    json_decref(root);
    return rc;
}

static int st_has_suffix(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0;
}

/* Loads whatever path names: a .safetensors file, an index file, or a directory
 * holding model.safetensors or model.safetensors.index.json. */
static int st_model_load_path(st_model *m, const char *path, strata_err *err) {
    char *single = NULL, *index = NULL, *dir = NULL;
    struct stat sb;
    int rc;
    if (stat(path, &sb) != 0) {
        rc = strata_err_set(err, st_errno_code(errno), "%s: %s", path, strerror(errno));
        goto fail;
    }
    if (!S_ISDIR(sb.st_mode) && !st_has_suffix(path, ".index.json")) {
        rc = st_model_load(m, &path, 1, err);
        goto fail;
    }
    if (!S_ISDIR(sb.st_mode)) { /* an index file named directly: shards sit beside it */
        const char *slash = strrchr(path, '/');
        size_t dlen = slash ? (size_t)(slash - path) + 1 : 1;
        if (!(dir = st_alloc(dlen + 1))) {
            rc = strata_err_set(err, STRATA_ENOMEM, "%s: out of memory", path);
            goto fail;
        }
        memcpy(dir, slash ? path : ".", dlen);
        dir[dlen] = '\0';
        rc = st_model_load_index(m, dir, path, err);
        goto fail;
    }
    if (!(single = st_join(path, ST_SINGLE_NAME)) || !(index = st_join(path, ST_INDEX_NAME))) {
        rc = strata_err_set(err, STRATA_ENOMEM, "%s: out of memory", path);
        goto fail;
    }
    /* Like transformers: a single model.safetensors wins over an index. */
    if (access(single, F_OK) == 0) rc = st_model_load(m, (const char *const *)&single, 1, err);
    else if (access(index, F_OK) == 0) rc = st_model_load_index(m, path, index, err);
    else
        rc = strata_err_set(err, STRATA_ENOTFOUND, "%s: no %s or %s in this directory", path,
                            ST_SINGLE_NAME, ST_INDEX_NAME);
fail:
    st_free(dir);
    st_free(single);
    st_free(index);
    return rc;
}

int st_open(st_model **out, const char *path, strata_err *err) {
    st_model *m = st_calloc(1, sizeof *m);
    if (!m) return strata_err_set(err, STRATA_ENOMEM, "%s: out of memory", path);
    int rc = st_model_load_path(m, path, err);
    if (rc) {
        st_close(m);
        return rc;
    }
    *out = m;
    return 0;
}

void st_close(st_model *m) {
    if (!m) return;
    for (int i = 0; i < m->n_tensors; i++) st_free((void *)m->tensors[i].name);
    st_free(m->slots);
    st_free(m->tensors);
    for (int i = 0; i < m->n_files; i++) st_file_close(&m->files[i]);
    st_free(m->files);
    st_free(m);
}

const st_tensor *st_find(const st_model *m, const char *name) {
    if (!m->n_slots) return NULL;
    uint32_t s = *st_slot(m, name);
    return s ? &m->tensors[s - 1] : NULL;
}

int st_count(const st_model *m) { return m->n_tensors; }

const st_tensor *st_get(const st_model *m, int i) {
    return i >= 0 && i < m->n_tensors ? &m->tensors[i] : NULL;
}
