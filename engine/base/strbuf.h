/* strbuf.h - the growable byte buffer every room uses: response bodies and SSE
 * events, tokenizer text, regex rewrites, template output.
 *
 * The memory comes from the C heap, or from an allocator the owner names (the Jinja
 * interpreter grows its buffers in its arena, so a render frees them all at once and
 * counts them against its budget). An optional max turns an append past that many
 * bytes into STRATA_ERANGE, for outputs with a limit. A zeroed strbuf is an empty
 * heap buffer without a limit. Not thread-safe: one owner at a time. */
#ifndef STRATA_STRBUF_H
#define STRATA_STRBUF_H

#include <stddef.h>

typedef struct strbuf_alloc {
    /* A block of at least cap bytes holding the first len bytes of old (old may be
     * NULL); NULL when out of memory, old then stays valid. */
    void *(*grow)(void *ctx, void *old, size_t len, size_t cap);
    void (*release)(void *ctx, void *p); /* NULL: the allocator frees in bulk */
    void *ctx;
} strbuf_alloc;

typedef struct strbuf {
    char *p; /* NUL-terminated once anything was added */
    size_t len, cap;
    size_t max;                /* 0: no limit */
    const strbuf_alloc *alloc; /* NULL: the C heap */
} strbuf;

/* Room for extra more bytes and the NUL: 0, STRATA_ENOMEM or STRATA_ERANGE (over max);
 * on failure b is unchanged. */
int strbuf_reserve(strbuf *b, size_t extra);
int strbuf_add(strbuf *b, const void *s, size_t n);
int strbuf_adds(strbuf *b, const char *s);
int strbuf_addc(strbuf *b, char c);
int strbuf_addf(strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void strbuf_reset(strbuf *b); /* len = 0, keeps the memory */
void strbuf_free(strbuf *b);  /* back to a zeroed buffer (alloc and max are kept) */

#endif
