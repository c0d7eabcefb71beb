/* jinja_str.c - Python str behaviour the filters and methods share: strip with a
 * character set, full Unicode case mapping (upper/lower/title/capitalize/swapcase,
 * including CPython's final-sigma rule), markupsafe's escape, and int() / float()
 * of strings (whitespace, underscores, inf/nan) as Python parses them. */
#include <ctype.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "engine/template/jinja_internal.h"

/* ---- string helpers ------------------------------------------------------------------ */

static int in_chars(uint32_t cp, const char *chars, size_t n) {
    size_t i = 0;
    while (i < n)
        if (jinja_utf8_next(chars, n, &i) == cp) return 1;
    return 0;
}

/* str.strip / lstrip / rstrip; chars NULL: whitespace. */
int jinja_filter_py_strip(jctx *c, jv s, const char *chars, size_t nchars, int left, int right,
                          jv *out) {
    const char *p = s.u.s->p;
    size_t len = s.u.s->len, b = 0, e = len;
    while (left && b < e) {
        size_t k = b;
        uint32_t cp = jinja_utf8_next(p, len, &k);
        if (chars ? !in_chars(cp, chars, nchars) : !unicode_py_isspace(cp)) break;
        b = k;
    }
    while (right && e > b) {
        size_t st = e - 1;
        while (st > b && ((unsigned char)p[st] & 0xC0) == 0x80) st--;
        size_t k = st;
        uint32_t cp = jinja_utf8_next(p, len, &k);
        if (chars ? !in_chars(cp, chars, nchars) : !unicode_py_isspace(cp)) break;
        e = st;
    }
    if (b == 0 && e == len) {
        *out = s;
        return 0;
    }
    *out = jinja_str(c, p + b, e - b);
    if (jinja_is_oom(*out)) return STRATA_ENOMEM;
    out->markup = s.markup;
    return 0;
}

static int put_cps(strbuf *b, const uint32_t *cps, int n) {
    char tmp[16];
    size_t k = 0;
    for (int i = 0; i < n; i++) k += (size_t)jinja_utf8_put(tmp + k, cps[i]);
    return strbuf_add(b, tmp, k);
}

/* Approximates Unicode's Case_Ignorable (apostrophes, dots, combining marks, modifiers). */
static int case_ignorable(uint32_t cp) {
    return cp == '\'' || cp == '.' || cp == ':' || cp == '^' || cp == '`' || cp == 0xB7 ||
           cp == 0x2019 || (cp >= 0x300 && cp <= 0x36F) || (cp >= 0x2B0 && cp <= 0x2FF);
}

/* CPython's final-sigma rule: a capital sigma preceded by a cased letter and not
 * followed by one lowercases to U+03C2. at..end is the sigma's byte range. */
static int final_sigma(const jstr *s, size_t at, size_t end) {
    int before = 0, after = 0;
    size_t i = at;
    while (i > 0) {
        size_t st = i - 1;
        while (st > 0 && ((unsigned char)s->p[st] & 0xC0) == 0x80) st--;
        size_t k = st;
        uint32_t cp = jinja_utf8_next(s->p, s->len, &k);
        i = st;
        if (case_ignorable(cp)) continue;
        before = unicode_py_iscased(cp);
        break;
    }
    i = end;
    while (i < s->len) {
        uint32_t cp = jinja_utf8_next(s->p, s->len, &i);
        if (case_ignorable(cp)) continue;
        after = unicode_py_iscased(cp);
        break;
    }
    return before && !after;
}

/* mode 0 lower, 1 upper, 2 str.capitalize, 3 str.title, 4 Jinja's |title, 5 swapcase */
int jinja_str_case(jctx *c, jv s, int mode, jv *out) {
    strbuf b;
    jinja_buf_init(&b, c->a, 0);
    size_t i = 0;
    int prev_cased = 0, word_start = 1, first = 1;
    while (i < s.u.s->len) {
        uint32_t cp = jinja_utf8_next(s.u.s->p, s.u.s->len, &i), m[3];
        int n;
        if (mode == 0) n = unicode_py_tolower(cp, m);
        else if (mode == 1) n = unicode_py_toupper(cp, m);
        else if (mode == 2) n = first ? unicode_py_totitle(cp, m) : unicode_py_tolower(cp, m);
        else if (mode == 3) n = prev_cased ? unicode_py_tolower(cp, m) : unicode_py_totitle(cp, m);
        else if (mode == 4) { /* item[0].upper() + item[1:].lower() per _word_beginning_split_re */
            int sep = cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' ||
                      unicode_py_isspace(cp);
            n = sep          ? (m[0] = cp, 1)
                : word_start ? unicode_py_toupper(cp, m)
                             : unicode_py_tolower(cp, m);
            word_start = sep;
        } else {
            n = unicode_py_isupper(cp)   ? unicode_py_tolower(cp, m)
                : unicode_py_islower(cp) ? unicode_py_toupper(cp, m)
                                         : (m[0] = cp, 1);
        }
        if (cp == 0x3A3 && n == 1 && m[0] == 0x3C3 && final_sigma(s.u.s, i - 2, i)) m[0] = 0x3C2;
        prev_cased = unicode_py_iscased(cp);
        first = 0;
        if (put_cps(&b, m, n) < 0) return STRATA_ENOMEM;
    }
    *out = jinja_str(c, b.p ? b.p : "", b.len);
    if (jinja_is_oom(*out)) return STRATA_ENOMEM;
    out->markup = s.markup;
    return 0;
}

jv jinja_escape(jctx *c, jv v) {
    if (v.kind == JV_STR && v.markup) return v;
    jv s = v.kind == JV_UNDEF ? jinja_strz(c, "") : jinja_to_str(c, v);
    if (jinja_is_oom(s)) return s;
    strbuf b;
    jinja_buf_init(&b, c->a, 0);
    size_t run = 0;
    const char *p = s.u.s->p;
    for (size_t i = 0; i < s.u.s->len; i++) {
        const char *rep = p[i] == '&'    ? "&amp;"
                          : p[i] == '<'  ? "&lt;"
                          : p[i] == '>'  ? "&gt;"
                          : p[i] == '"'  ? "&#34;"
                          : p[i] == '\'' ? "&#39;"
                                         : NULL;
        if (!rep) continue;
        if (strbuf_add(&b, p + run, i - run) < 0 || strbuf_adds(&b, rep) < 0)
            return jinja_str_cp(c, NULL, 0, 0);
        run = i + 1;
    }
    if (strbuf_add(&b, p + run, s.u.s->len - run) < 0) s = jinja_undef(), s.fn = 1;
    else s = jinja_str(c, b.p ? b.p : "", b.len);
    if (!jinja_is_oom(s)) s.markup = 1;
    return s;
}

/* ---- Python int() / float() of strings ------------------------------------------------ */

/* Copies s without surrounding whitespace and with "_" between digits removed;
 * 0 if an underscore is misplaced. */
static int clean_number(const jstr *s, char *buf, size_t cap) {
    size_t b = 0, e = s->len, k = 0;
    while (b < e && unicode_py_isspace((unsigned char)s->p[b])) b++;
    while (e > b && unicode_py_isspace((unsigned char)s->p[e - 1])) e--;
    for (size_t i = b; i < e; i++) {
        if (k + 1 >= cap) return 0;
        if (s->p[i] == '_') {
            if (i == b || i + 1 >= e || !isxdigit((unsigned char)s->p[i - 1]) ||
                !isxdigit((unsigned char)s->p[i + 1]))
                return 0;
            continue;
        }
        buf[k++] = s->p[i];
    }
    buf[k] = 0;
    return k > 0;
}

int jinja_py_int(const jstr *s, int base, int64_t *out) {
    char buf[128], *end;
    if (!clean_number(s, buf, sizeof buf)) return 0;
    const char *p = buf;
    if (*p == '+' || *p == '-') p++;
    if (!isalnum((unsigned char)*p)) return 0;
    if (base == 16 && p[0] == '0' && (p[1] == 'x' || p[1] == 'X')) p += 2;
    for (const char *q = p; *q; q++)
        if (!isalnum((unsigned char)*q)) return 0;
    long long v = strtoll(buf, &end, base);
    if (*end || v == LLONG_MAX || v == LLONG_MIN) return 0;
    *out = v;
    return 1;
}

int jinja_py_float(const jstr *s, double *out) {
    char buf[128], *end;
    if (!clean_number(s, buf, sizeof buf)) return 0;
    const char *p = buf + (buf[0] == '+' || buf[0] == '-');
    if (!strcasecmp(p, "inf") || !strcasecmp(p, "infinity") || !strcasecmp(p, "nan")) {
        double v = (p[0] | 32) == 'n' ? NAN : INFINITY;
        *out = buf[0] == '-' ? -v : v;
        return 1;
    }
    for (const char *q = p; *q; q++)
        if (!(isdigit((unsigned char)*q) || *q == '.' || *q == 'e' || *q == 'E' || *q == '+' ||
              *q == '-'))
            return 0;
    *out = strtod(buf, &end);
    return *end == 0;
}
