/* strbuf.h - a growable byte buffer for response bodies and SSE events.
 * Not thread-safe: one owner at a time. */
#ifndef STRATA_SBUF_H
#define STRATA_SBUF_H

#include <stddef.h>

typedef struct sbuf {
    char *p;       /* NUL-terminated when len > 0 */
    size_t len, cap;
} sbuf;

/* Appends n bytes; 0 or STRATA_ENOMEM (then b is unchanged). */
int sbuf_add(sbuf *b, const char *s, size_t n);
int sbuf_adds(sbuf *b, const char *s);
int sbuf_addf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sbuf_reset(sbuf *b);   /* len = 0, keeps the memory */
void sbuf_free(sbuf *b);

#endif
