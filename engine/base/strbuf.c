/* strbuf.c - the growable byte buffer (see strbuf.h). */
#include "engine/base/strbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/err.h"

int strbuf_reserve(strbuf *b, size_t extra) {
    if (b->max && (extra > b->max || b->len > b->max - extra)) return STRATA_ERANGE;
    if (b->len + extra + 1 <= b->cap) return 0;
    size_t nc = b->cap ? b->cap : 64;
    while (nc < b->len + extra + 1) nc *= 2;
    char *p = b->alloc ? b->alloc->grow(b->alloc->ctx, b->p, b->len, nc) : realloc(b->p, nc);
    if (!p) return STRATA_ENOMEM;
    b->p = p;
    b->cap = nc;
    return 0;
}

int strbuf_add(strbuf *b, const void *s, size_t n) {
    int rc = strbuf_reserve(b, n);
    if (rc) return rc;
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
    return 0;
}

int strbuf_adds(strbuf *b, const char *s) { return strbuf_add(b, s, strlen(s)); }

int strbuf_addc(strbuf *b, char c) { return strbuf_add(b, &c, 1); }

int strbuf_addf(strbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) return STRATA_EINVALID;
    int rc = strbuf_reserve(b, (size_t)n);
    if (rc) return rc;
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return 0;
}

void strbuf_reset(strbuf *b) {
    b->len = 0;
    if (b->p) b->p[0] = 0;
}

void strbuf_free(strbuf *b) {
    if (b->alloc) {
        if (b->alloc->release) b->alloc->release(b->alloc->ctx, b->p);
    } else {
        free(b->p);
    }
    b->p = NULL;
    b->len = b->cap = 0;
}
