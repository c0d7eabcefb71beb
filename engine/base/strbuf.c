/* strbuf.c - growable byte buffer. */
#include "engine/base/strbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/err.h"

static int sbuf_reserve(sbuf *b, size_t extra) {
    if (b->len + extra + 1 <= b->cap) return 0;
    size_t nc = b->cap ? b->cap : 256;
    while (nc < b->len + extra + 1) nc *= 2;
    char *p = realloc(b->p, nc);
    if (!p) return STRATA_ENOMEM;
    b->p = p;
    b->cap = nc;
    return 0;
}

int sbuf_add(sbuf *b, const char *s, size_t n) {
    if (sbuf_reserve(b, n)) return STRATA_ENOMEM;
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
    return 0;
}

int sbuf_adds(sbuf *b, const char *s) { return sbuf_add(b, s, strlen(s)); }

int sbuf_addf(sbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || sbuf_reserve(b, (size_t)n)) return STRATA_ENOMEM;
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return 0;
}

void sbuf_reset(sbuf *b) {
    b->len = 0;
    if (b->p) b->p[0] = 0;
}

void sbuf_free(sbuf *b) {
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}
