/* tok_map.c - the tokenizer's containers: growable buffers, string and pair hash maps
 * (open addressing, load factor <= 1/2), and regex / literal pattern search. */
#include <stdlib.h>
#include <string.h>

#include "engine/text/tok_internal.h"
#include "engine/unicode/props.h"
#include "engine/base/utf8.h"

int tok_ids_push(tok_ids *v, int32_t id) {
    if (v->len == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 64;
        int32_t *p = realloc(v->p, cap * sizeof *p);
        if (!p) return STRATA_ENOMEM;
        v->p = p;
        v->cap = cap;
    }
    v->p[v->len++] = id;
    return 0;
}

void tok_ids_free(tok_ids *v) {
    free(v->p);
    memset(v, 0, sizeof *v);
}

uint32_t tok_hash_bytes(const void *s, size_t n) {
    const uint8_t *p = s;
    uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        h = (h ^ v) * 0xBF58476D1CE4E5B9ull;
        h ^= h >> 31;
        p += 8;
        n -= 8;
    }
    uint64_t v = 0;
    memcpy(&v, p, n);
    h = (h ^ v) * 0x94D049BB133111EBull;
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    return (uint32_t)(h ^ (h >> 32));
}

int tok_map_init(tok_map *m, uint32_t expected) {
    memset(m, 0, sizeof *m);
    uint32_t cap = 16;
    while (cap < expected * 2 + 2) cap *= 2;
    m->slots = calloc(cap, sizeof *m->slots);
    if (!m->slots) return STRATA_ENOMEM;
    m->mask = cap - 1;
    return 0;
}

void tok_map_free(tok_map *m) {
    free(m->slots);
    free(m->hash);
    free(m->off);
    free(m->klen);
    free(m->val);
    strbuf_free(&m->keys);
    memset(m, 0, sizeof *m);
}

static uint32_t *map_find(const tok_map *m, uint32_t h, const char *k, size_t n) {
    for (uint32_t i = h & m->mask;; i = (i + 1) & m->mask) {
        uint32_t e = m->slots[i];
        if (!e) return &m->slots[i];
        e--;
        if (m->hash[e] == h && m->klen[e] == n && !memcmp(m->keys.p + m->off[e], k, n))
            return &m->slots[i];
    }
}

static int map_grow(tok_map *m) {
    uint32_t cap = (m->mask + 1) * 2;
    uint32_t *slots = calloc(cap, sizeof *slots);
    if (!slots) return STRATA_ENOMEM;
    for (uint32_t e = 0; e < m->n; e++) {
        uint32_t i = m->hash[e] & (cap - 1);
        while (slots[i]) i = (i + 1) & (cap - 1);
        slots[i] = e + 1;
    }
    free(m->slots);
    m->slots = slots;
    m->mask = cap - 1;
    return 0;
}

int tok_map_put(tok_map *m, const char *k, size_t n, int32_t v) {
    if (n >= UINT32_MAX || m->keys.len + n >= UINT32_MAX) return STRATA_ERANGE;
    uint32_t h = tok_hash_bytes(k, n);
    uint32_t *slot = map_find(m, h, k, n);
    if (*slot) {
        m->val[*slot - 1] = v;
        return 0;
    }
    if (m->n == m->cap) {
        uint32_t cap = m->cap ? m->cap * 2 : 64;
        uint32_t *hash = realloc(m->hash, cap * sizeof *hash);
        if (hash) m->hash = hash;
        uint32_t *off = realloc(m->off, cap * sizeof *off);
        if (off) m->off = off;
        uint32_t *klen = realloc(m->klen, cap * sizeof *klen);
        if (klen) m->klen = klen;
        int32_t *val = realloc(m->val, cap * sizeof *val);
        if (val) m->val = val;
        if (!hash || !off || !klen || !val) return STRATA_ENOMEM;
        m->cap = cap;
    }
    uint32_t off = (uint32_t)m->keys.len;
    if (strbuf_add(&m->keys, k, n)) return STRATA_ENOMEM;
    m->keys.len++; /* keep the NUL so keys read as C strings */
    uint32_t e = m->n++;
    m->hash[e] = h;
    m->off[e] = off;
    m->klen[e] = (uint32_t)n;
    m->val[e] = v;
    *slot = e + 1;
    if ((uint64_t)m->n * 2 > (uint64_t)m->mask + 1) return map_grow(m);
    return 0;
}

int32_t tok_map_get(const tok_map *m, const char *k, size_t n) {
    if (!m->slots) return -1;
    uint32_t e = *map_find(m, tok_hash_bytes(k, n), k, n);
    return e ? m->val[e - 1] : -1;
}

int tok_pairmap_init(tok_pairmap *m, size_t expected) {
    size_t cap = 16;
    while (cap < expected * 2 + 2) cap *= 2;
    m->keys = malloc(cap * sizeof *m->keys);
    m->vals = malloc(cap * sizeof *m->vals);
    if (!m->keys || !m->vals) {
        free(m->keys);
        free(m->vals);
        memset(m, 0, sizeof *m);
        return STRATA_ENOMEM;
    }
    memset(m->keys, 0xFF, cap * sizeof *m->keys);
    m->mask = cap - 1;
    m->n = 0;
    return 0;
}

void tok_pairmap_free(tok_pairmap *m) {
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof *m);
}

/* The map is sized for all merges at init, so it never grows. */
int tok_pairmap_put(tok_pairmap *m, int32_t a, int32_t b, uint32_t rank, int32_t id) {
    if ((m->n + 1) * 2 > m->mask + 1) return STRATA_ERANGE;
    uint64_t k = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    uint64_t h = k * 0x9E3779B97F4A7C15ull;
    uint64_t i = (h >> 29) & m->mask;
    while (m->keys[i] != UINT64_MAX && m->keys[i] != k) i = (i + 1) & m->mask;
    if (m->keys[i] == UINT64_MAX) m->n++;
    m->keys[i] = k;
    m->vals[i] = (uint64_t)rank << 32 | (uint32_t)id;
    return 0;
}

/* The regex is HF's source with \p{X} classes expanded to the reference's Unicode
 * version (props.h); the syntax is what the onig crate's Regex::new uses. */
int tok_pattern_compile(tok_pattern *p, strata_err *err) {
    if (!p->is_regex) return 0;
    OnigEncoding enc = ONIG_ENCODING_UTF8;
    onig_initialize(&enc, 1); /* idempotent */
    OnigErrorInfo einfo;
    char *src;
    size_t n;
    if (unicode_props_expand(p->str, p->len, &src, &n))
        return strata_err_set(err, STRATA_ENOMEM, "out of memory");
    int r = onig_new(&p->re, (const OnigUChar *)src, (const OnigUChar *)src + n, ONIG_OPTION_NONE,
                     ONIG_ENCODING_UTF8, ONIG_SYNTAX_ONIGURUMA, &einfo);
    free(src);
    if (r == ONIGERR_MEMORY) {
        p->re = NULL;
        return strata_err_set(err, STRATA_ENOMEM, "out of memory compiling /%.80s/", p->str);
    }
    if (r != ONIG_NORMAL) {
        OnigUChar msg[ONIG_MAX_ERROR_MESSAGE_LEN];
        onig_error_code_to_str(msg, r, &einfo);
        p->re = NULL;
        return strata_err_set(err, STRATA_EFORMAT, "bad regex /%.80s/: %s", p->str, (char *)msg);
    }
    return 0;
}

OnigRegion *tok_region_new(void) {
    OnigRegion *rg = onig_region_new();
    if (!rg) return NULL;
    rg->beg = malloc(TOK_REGION_SLOTS * sizeof *rg->beg);
    rg->end = malloc(TOK_REGION_SLOTS * sizeof *rg->end);
    if (!rg->beg || !rg->end) {
        free(rg->beg);
        free(rg->end);
        rg->beg = rg->end = NULL;
        onig_region_free(rg, 1);
        return NULL;
    }
    rg->allocated = TOK_REGION_SLOTS;
    return rg;
}

void tok_pattern_free(tok_pattern *p) {
    if (p->re) onig_free(p->re);
    free(p->str);
    memset(p, 0, sizeof *p);
}

int tok_pattern_find(const tok_pattern *p, const char *s, size_t n, OnigRegion *region,
                     tok_match_fn cb, void *ctx, strata_err *err) {
    int r;
    if (!p->is_regex) {
        if (!p->len) return 0; /* HF: an empty literal matches nothing */
        size_t at = 0;
        while (at + p->len <= n) {
            const char *hit = memmem(s + at, n - at, p->str, p->len);
            if (!hit) break;
            size_t st = (size_t)(hit - s);
            if ((r = cb(ctx, st, st + p->len))) return r;
            at = st + p->len;
        }
        return 0;
    }
    /* The onig crate's find_iter: an empty match right at the previous match's end is
     * skipped by advancing one char. */
    const OnigUChar *base = (const OnigUChar *)s, *end = base + n;
    size_t last_end = 0, last_match_end = SIZE_MAX;
    while (last_end <= n) {
        onig_region_clear(region);
        r = onig_search(p->re, base, end, base + last_end, end, region, ONIG_OPTION_NONE);
        if (r == ONIG_MISMATCH) break;
        if (r == ONIGERR_MEMORY)
            return strata_err_set(err, STRATA_ENOMEM, "regex search: out of memory");
        if (r < 0) return strata_err_set(err, STRATA_EINVALID, "regex search failed (%d)", r);
        size_t st = (size_t)region->beg[0], e = (size_t)region->end[0];
        if (e == st && last_match_end == e) {
            if (last_end >= n) break;
            int k = unicode_utf8_check((const uint8_t *)s + last_end, n - last_end);
            last_end += k > 0 ? (size_t)k : 1;
            continue;
        }
        last_end = last_match_end = e;
        if ((r = cb(ctx, st, e))) return r;
    }
    return 0;
}
