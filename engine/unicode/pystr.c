/* pystr.c - Python str character classes and case maps, looked up in the generated
 * tables (pystr_tables.c); str.isspace, which CPython defines by a short list. */
#include "engine/unicode/pystr.h"

#include "engine/unicode/pystr_tables.h"

static int in_ranges(const pystr_ranges *t, uint32_t c) {
    size_t lo = 0, hi = t->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (c < t->r[mid][0]) hi = mid;
        else if (c > t->r[mid][1]) lo = mid + 1;
        else return 1;
    }
    return 0;
}

static int map_case(const pystr_case *m, uint32_t c, uint32_t out[3]) {
    for (size_t i = 0; i < m->nmulti; i++) {
        if (m->multi[i].cp == c && m->multi[i].to[0]) {
            int k = 0;
            while (k < 3 && m->multi[i].to[k]) out[k] = m->multi[i].to[k], k++;
            return k;
        }
    }
    size_t lo = 0, hi = m->nruns;
    while (lo < hi) { /* last run with start <= c */
        size_t mid = (lo + hi) / 2;
        if (m->runs[mid].start <= c) lo = mid + 1;
        else hi = mid;
    }
    if (lo > 0) {
        const jcase_run *r = &m->runs[lo - 1];
        uint32_t off = c - r->start;
        if (off % r->stride == 0 && off / r->stride < r->count) {
            out[0] = (uint32_t)((int64_t)c + r->delta);
            return 1;
        }
    }
    out[0] = c;
    return 1;
}

int unicode_py_isprintable(uint32_t c) { return !in_ranges(&pystr_nonprint, c); }
int unicode_py_isalpha(uint32_t c) { return in_ranges(&pystr_alpha, c); }
int unicode_py_isdigit(uint32_t c) { return in_ranges(&pystr_digit, c); }
int unicode_py_iscased(uint32_t c) { return in_ranges(&pystr_cased, c); }
int unicode_py_istitle(uint32_t c) { return in_ranges(&pystr_title, c); }

int unicode_py_toupper(uint32_t c, uint32_t out[3]) {
    if (c < 0x80) {
        out[0] = c >= 'a' && c <= 'z' ? c - 32 : c;
        return 1;
    }
    return map_case(&pystr_up, c, out);
}

int unicode_py_tolower(uint32_t c, uint32_t out[3]) {
    if (c < 0x80) {
        out[0] = c >= 'A' && c <= 'Z' ? c + 32 : c;
        return 1;
    }
    return map_case(&pystr_low, c, out);
}

int unicode_py_totitle(uint32_t c, uint32_t out[3]) {
    if (c < 0x80) return unicode_py_toupper(c, out);
    return map_case(&pystr_tit, c, out);
}

int unicode_py_islower(uint32_t c) {
    uint32_t m[3];
    int has_up = unicode_py_toupper(c, m) != 1 || m[0] != c;
    return has_up ^ in_ranges(&pystr_lower_x, c);
}

int unicode_py_isupper(uint32_t c) {
    uint32_t m[3];
    int has_low = unicode_py_tolower(c, m) != 1 || m[0] != c;
    return has_low ^ in_ranges(&pystr_upper_x, c);
}

int unicode_py_isspace(uint32_t c) {
    return (c >= 9 && c <= 13) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
           c == 0x202F || c == 0x205F || c == 0x3000;
}
