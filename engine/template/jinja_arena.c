/* jinja_arena.c - bump allocation, growable buffers and UTF-8 helpers for the
 * Jinja interpreter.
 *
 * A render allocates everything from one arena and frees it at once, which keeps
 * every error path of the evaluator free of cleanup code. The arena enforces a
 * byte budget so a runaway template fails with an error instead of exhausting the
 * machine, and has a test hook that fails the n-th allocation. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/template/jinja_internal.h"

#define JARENA_CHUNK (64 * 1024)

typedef struct jchunk {
    struct jchunk *next;
    size_t used, size;
    max_align_t data[]; /* aligned payload */
} jchunk;

struct jarena {
    jchunk *head;
    size_t total;  /* bytes of all chunks */
    size_t budget; /* 0: none */
    long fail_at;  /* test hook: the n-th allocation and all after it fail */
    long nalloc;
    int over_budget;
    strbuf_alloc buf_alloc; /* how buffers grow here (jinja_buf_init) */
};

jarena *jinja_arena_create(size_t budget, long fail_at) {
    if (fail_at == 1) return NULL;
    jarena *a = calloc(1, sizeof *a);
    if (!a) return NULL;
    a->budget = budget;
    a->fail_at = fail_at;
    a->nalloc = 1;
    return a;
}

void jinja_arena_destroy(jarena *a) {
    if (!a) return;
    jchunk *c = a->head;
    while (c) {
        jchunk *next = c->next;
        free(c);
        c = next;
    }
    free(a);
}

int jinja_arena_over_budget(const jarena *a) { return a->over_budget; }

void *jinja_arena_alloc(jarena *a, size_t n) {
    /* The test hook counts every allocation, so each caller's NULL path gets exercised. */
    if (a->fail_at && ++a->nalloc >= a->fail_at) return NULL;
    n = (n + 15) & ~(size_t)15;
    if (n == 0) n = 16;
    jchunk *c = a->head;
    if (c && c->size - c->used >= n) {
        void *p = (char *)c->data + c->used;
        c->used += n;
        return p;
    }
    size_t size = n > JARENA_CHUNK / 2 ? n : JARENA_CHUNK;
    if (size > SIZE_MAX - sizeof(jchunk)) return NULL;
    if (a->budget && a->total + size > a->budget) {
        a->over_budget = 1;
        return NULL;
    }
    jchunk *nc = calloc(1, sizeof(jchunk) + size); /* arena memory starts zeroed */
    if (!nc) return NULL;
    nc->size = size;
    nc->used = n;
    a->total += size;
    /* A large block goes behind the current chunk so the current one keeps its room. */
    if (c && size > JARENA_CHUNK && c->size - c->used > 256) {
        nc->next = c->next;
        c->next = nc;
    } else {
        nc->next = c;
        a->head = nc;
    }
    return nc->data;
}

char *jinja_arena_strndup(jarena *a, const char *s, size_t n) {
    char *p = jinja_arena_alloc(a, n + 1);
    if (!p) return NULL;
    memcpy(p, s, n);
    p[n] = 0;
    return p;
}

/* ---- buffers --------------------------------------------------------------------- */

/* Buffers grow by a fresh arena block; the old one is left to the arena. */
static void *jinja_buf_grow(void *ctx, void *old, size_t len, size_t cap) {
    char *p = jinja_arena_alloc(ctx, cap);
    if (p && len) memcpy(p, old, len);
    return p;
}

void jinja_buf_init(strbuf *b, jarena *a, size_t max) {
    memset(b, 0, sizeof *b);
    a->buf_alloc.grow = jinja_buf_grow;
    a->buf_alloc.ctx = a;
    b->alloc = &a->buf_alloc;
    b->max = max;
}

/* ---- UTF-8 ---------------------------------------------------------------------- */

uint32_t jinja_utf8_next(const char *s, size_t len, size_t *i) {
    const unsigned char *u = (const unsigned char *)s;
    size_t k = *i;
    uint32_t c = u[k];
    int extra = c < 0x80 ? 0 : c < 0xE0 ? 1 : c < 0xF0 ? 2 : 3;
    if (extra) c &= 0x3F >> extra;
    k++;
    for (int j = 0; j < extra && k < len; j++, k++) c = (c << 6) | (u[k] & 0x3F);
    *i = k;
    return c;
}

int jinja_utf8_put(char *out, uint32_t cp) {
    unsigned char *o = (unsigned char *)out;
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | (cp >> 6));
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (cp >> 12));
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | (cp >> 18));
    o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Strict UTF-8 (no overlongs, no surrogates, at most U+10FFFF), as Python decodes. */
size_t jinja_utf8_valid_prefix(const char *s, size_t len) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < len) {
        unsigned c = u[i];
        size_t n;
        uint32_t cp, min;
        if (c < 0x80) {
            i++;
            continue;
        } else if (c >= 0xC2 && c <= 0xDF) {
            n = 2, cp = c & 0x1F, min = 0x80;
        } else if (c >= 0xE0 && c <= 0xEF) {
            n = 3, cp = c & 0x0F, min = 0x800;
        } else if (c >= 0xF0 && c <= 0xF4) {
            n = 4, cp = c & 0x07, min = 0x10000;
        } else {
            return i;
        }
        if (i + n > len) return i;
        for (size_t k = 1; k < n; k++) {
            if ((u[i + k] & 0xC0) != 0x80) return i;
            cp = (cp << 6) | (u[i + k] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
        i += n;
    }
    return i;
}

size_t jinja_utf8_count(const char *s, size_t len) {
    size_t n = 0;
    for (size_t i = 0; i < len; i++) n += ((unsigned char)s[i] & 0xC0) != 0x80;
    return n;
}
