/* props.c - rewrites \p{X} in a regex into explicit classes from the generated
 * props_tables.c (see props.h for why). */
#include "engine/unicode/props.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/err.h"
#include "engine/base/strbuf.h"

static const unicode_prop *prop_find(const char *name, size_t n) {
    for (const unicode_prop *p = unicode_props; p->name; p++)
        if (strlen(p->name) == n && !memcmp(p->name, name, n)) return p;
    return NULL;
}

static int emit_class(strbuf *b, const unicode_prop *p, int negate) {
    if (strbuf_add(b, negate ? "[^" : "[", negate ? 2 : 1)) return STRATA_ENOMEM;
    for (size_t i = 0; i < p->n_ranges; i++) {
        char item[40];
        uint32_t a = p->ranges[2 * i], z = p->ranges[2 * i + 1];
        int n = a == z ? snprintf(item, sizeof item, "\\x{%X}", a)
                       : snprintf(item, sizeof item, "\\x{%X}-\\x{%X}", a, z);
        if (strbuf_add(b, item, (size_t)n)) return STRATA_ENOMEM;
    }
    return strbuf_add(b, "]", 1);
}

int unicode_props_expand(const char *pat, size_t len, char **out, size_t *out_len) {
    strbuf b = {0};
    int r = strbuf_add(&b, "", 0);
    for (size_t i = 0; i < len && !r;) {
        if (pat[i] != '\\' || i + 1 >= len) {
            r = strbuf_add(&b, pat + i, 1);
            i++;
            continue;
        }
        char c = pat[i + 1];
        if ((c == 'p' || c == 'P') && i + 2 < len && pat[i + 2] == '{') {
            const char *close = memchr(pat + i + 3, '}', len - (i + 3));
            if (close) {
                const char *name = pat + i + 3;
                size_t n = (size_t)(close - name);
                int neg = c == 'P';
                if (n && name[0] == '^') name++, n--, neg = !neg;
                const unicode_prop *p = prop_find(name, n);
                if (p) {
                    r = emit_class(&b, p, neg);
                    i = (size_t)(close - pat) + 1;
                    continue;
                }
            }
        }
        r = strbuf_add(&b, pat + i, 2); /* any other escape, verbatim */
        i += 2;
    }
    if (r) {
        free(b.p);
        return r;
    }
    *out = b.p;
    *out_len = b.len;
    return 0;
}
