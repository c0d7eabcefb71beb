/* utf8.c - the one lossy UTF-8 decoder: ill-formed input to U+FFFD (see utf8.h). */
#include "engine/base/utf8.h"

#include "engine/base/err.h"

int unicode_utf8_lossy_part(strbuf *out, const char *s, size_t n, int final, size_t *used) {
    static const char fffd[] = "\xEF\xBF\xBD";
    const uint8_t *p = (const uint8_t *)s;
    size_t i = 0, run = 0;
    *used = 0;
    while (i < n) {
        if (p[i] < 0x80) {
            i++;
            continue;
        }
        int k = unicode_utf8_check(p + i, n - i);
        if (k > 0) {
            i += (size_t)k;
            continue;
        }
        if (k == 0 && !final) break; /* the rest may come with the next piece */
        if (strbuf_add(out, s + run, i - run) || strbuf_add(out, fffd, 3)) return STRATA_ENOMEM;
        i += k < 0 ? (size_t)-k : n - i; /* an incomplete tail is one maximal subpart */
        run = i;
    }
    if (strbuf_add(out, s + run, i - run)) return STRATA_ENOMEM;
    *used = i;
    return 0;
}

int unicode_utf8_lossy(strbuf *out, const char *s, size_t n) {
    size_t used;
    return unicode_utf8_lossy_part(out, s, n, 1, &used);
}
