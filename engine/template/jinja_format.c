/* jinja_format.c - Python's two string formatting languages: printf-style
 * ("%s" % x, the |format filter) and str.format ("{} {name}".format(...)).
 *
 * Conversions cover what templates use: %s %r %d %i %u %f %F %e %E %g %G %x %X %o
 * %c %% with flags, width and precision, and for str.format auto/manual/keyword
 * fields with !r/!s and a format spec ([[fill]align][sign][0][width][,][.prec][type]).
 * Numbers print through C's printf, whose output for these conversions is the
 * same as CPython's; str() of a float is Python's repr. */
#include <stdio.h>
#include <string.h>

#include "engine/template/jinja_internal.h"

static int fail_fmt(jctx *c, int line, const char *msg) {
    return jinja_ctx_fail(c, STRATA_EINVALID, line, "%s", msg);
}

/* Pads text to width: left-aligned ('<'), right ('>'), centred ('^') or after the
 * sign ('='), with fill. */
static int put_padded(strbuf *b, const char *s, size_t n, size_t ncp, int64_t width, char align,
                      const char *fill, size_t fill_len) {
    int64_t pad = width > (int64_t)ncp ? width - (int64_t)ncp : 0;
    int64_t left = align == '<' ? 0 : align == '^' ? pad / 2 : pad, right = pad - left;
    size_t sign = 0;
    if (align == '=' && n && (s[0] == '-' || s[0] == '+' || s[0] == ' ')) {
        JTRY(strbuf_add(b, s, 1));
        sign = 1;
    }
    for (int64_t i = 0; i < left; i++) JTRY(strbuf_add(b, fill, fill_len));
    JTRY(strbuf_add(b, s + sign, n - sign));
    for (int64_t i = 0; i < right; i++) JTRY(strbuf_add(b, fill, fill_len));
    return 0;
}

static int as_int(jctx *c, int line, jv v, int64_t *out) {
    if (v.kind == JV_INT || v.kind == JV_BOOL) *out = v.u.i;
    else if (v.kind == JV_FLOAT && v.u.f > -9.2e18 && v.u.f < 9.2e18) *out = (int64_t)v.u.f;
    else {
        JTRY(jinja_check_defined(c, line, v));
        return jinja_ctx_fail(c, STRATA_EINVALID, line,
                              "%%d format: a real number is required, not %s", jinja_typename(v));
    }
    return 0;
}

/* One printf conversion of v into b. */
static int convert(jctx *c, int line, strbuf *b, jv v, const char *flags, int64_t width, int prec,
                   char conv) {
    char spec[32], tmp[512];
    int n = 0;
    switch (conv) {
    case 's':
    case 'r':
    case 'a': {
        strbuf s;
        jinja_buf_init(&s, c->a, 0);
        if ((conv == 's' ? jinja_write_str(c, &s, v) : jinja_write_repr(c, &s, v)) < 0)
            return jinja_ctx_nomem(c, line);
        const char *p = s.p ? s.p : "";
        size_t len = s.len, ncp = jinja_utf8_count(p, len);
        if (prec >= 0 && (size_t)prec < ncp) { /* precision truncates code points */
            size_t i = 0;
            for (int k = 0; k < prec; k++) jinja_utf8_next(p, len, &i);
            len = i, ncp = (size_t)prec;
        }
        return put_padded(b, p, len, ncp, width, strchr(flags, '-') ? '<' : '>', " ", 1);
    }
    case 'd':
    case 'i':
    case 'u':
    case 'x':
    case 'X':
    case 'o':
    case 'c': {
        int64_t i = 0;
        if (conv == 'c' && v.kind == JV_STR) {
            if (v.u.s->ncp != 1) return fail_fmt(c, line, "%c requires int or char");
            return put_padded(b, v.u.s->p, v.u.s->len, 1, width, strchr(flags, '-') ? '<' : '>',
                              " ", 1);
        }
        JTRY(as_int(c, line, v, &i));
        if (conv == 'c') {
            if (i < 0 || i > 0x10FFFF) return fail_fmt(c, line, "%c arg not in range(0x110000)");
            char u[4];
            int k = jinja_utf8_put(u, (uint32_t)i);
            return put_padded(b, u, (size_t)k, 1, width, strchr(flags, '-') ? '<' : '>', " ", 1);
        }
        char cv = conv == 'i' || conv == 'u' ? 'd' : conv;
        snprintf(spec, sizeof spec, "%%%s*.*ll%c", flags, cv);
        n = snprintf(tmp, sizeof tmp, spec, (int)(width > 400 ? 400 : width), prec < 0 ? 1 : prec,
                     (long long)i);
        if (cv == 'o' && strchr(flags, '#')) { /* Python writes 0o17, C writes 017 */
            char *z = strchr(tmp, '0');
            if (z) {
                memmove(z + 2, z + 1, strlen(z + 1) + 1);
                z[1] = 'o';
                n++;
            }
        }
        break;
    }
    case 'f':
    case 'F':
    case 'e':
    case 'E':
    case 'g':
    case 'G': {
        if (!jinja_is_num(v)) {
            JTRY(jinja_check_defined(c, line, v));
            return jinja_ctx_fail(c, STRATA_EINVALID, line, "must be real number, not %s",
                                  jinja_typename(v));
        }
        snprintf(spec, sizeof spec, "%%%s*.*%c", flags, conv);
        n = snprintf(tmp, sizeof tmp, spec, (int)(width > 400 ? 400 : width), prec < 0 ? 6 : prec,
                     jinja_as_double(v));
        break;
    }
    default: return fail_fmt(c, line, "unsupported format character");
    }
    if (n < 0 || (size_t)n >= sizeof tmp) return fail_fmt(c, line, "formatted number too long");
    return strbuf_add(b, tmp, (size_t)n) < 0 ? jinja_ctx_nomem(c, line) : 0;
}

int jinja_format_percent(jctx *c, int line, jv fmt, jv args, jv *out) {
    const jlist *pos = NULL;
    jlist single = {1, 1, &args};
    const jdict *map = NULL;
    if (args.kind == JV_TUPLE) pos = args.u.l;
    else if (args.kind == JV_DICT) map = args.u.d, pos = &single;
    else pos = &single;
    size_t next = 0;
    int used_map = 0;
    strbuf b;
    jinja_buf_init(&b, c->a, c->max_output);
    const char *p = fmt.u.s->p, *end = p + fmt.u.s->len;
    while (p < end) {
        const char *pc = memchr(p, '%', (size_t)(end - p));
        if (!pc) pc = end;
        if (strbuf_add(&b, p, (size_t)(pc - p)) < 0) return jinja_ctx_nomem(c, line);
        if (pc == end) break;
        p = pc + 1;
        if (p >= end) return fail_fmt(c, line, "incomplete format");
        jv v;
        int have = 0;
        if (*p == '(') {
            const char *close = memchr(p, ')', (size_t)(end - p));
            if (!close || !map) return fail_fmt(c, line, "format requires a mapping");
            char key[256];
            size_t kl =
                (size_t)(close - p - 1) < sizeof key - 1 ? (size_t)(close - p - 1) : sizeof key - 1;
            memcpy(key, p + 1, kl);
            key[kl] = 0;
            if (!jinja_dict_gets(map, key, &v))
                return jinja_ctx_fail(c, STRATA_EINVALID, line, "KeyError: '%s'", key);
            have = used_map = 1;
            p = close + 1;
        }
        char flags[8];
        size_t nf = 0;
        while (p < end && strchr("-+ #0", *p) && nf < sizeof flags - 1) flags[nf++] = *p++;
        flags[nf] = 0;
        int64_t width = 0;
        int prec = -1;
        if (p < end && *p == '*') {
            if (next >= pos->n || !jinja_is_num(pos->v[next]))
                return fail_fmt(c, line, "* wants int");
            width = pos->v[next++].u.i;
            p++;
        }
        /* Python fails on widths it cannot allocate; a bound keeps the arithmetic defined
         * and the output inside the render limits. */
        enum { FMT_MAX_WIDTH = 1 << 20 };
        while (p < end && *p >= '0' && *p <= '9') {
            width = width * 10 + (*p++ - '0');
            if (width > FMT_MAX_WIDTH) return fail_fmt(c, line, "width too big");
        }
        if (width > FMT_MAX_WIDTH || width < -FMT_MAX_WIDTH)
            return fail_fmt(c, line, "width too big");
        if (p < end && *p == '.') {
            p++;
            prec = 0;
            while (p < end && *p >= '0' && *p <= '9') {
                prec = prec * 10 + (*p++ - '0');
                if (prec > FMT_MAX_WIDTH) return fail_fmt(c, line, "precision too big");
            }
        }
        while (p < end && (*p == 'l' || *p == 'h' || *p == 'L')) p++;
        if (p >= end) return fail_fmt(c, line, "incomplete format");
        char conv = *p++;
        if (conv == '%') {
            if (strbuf_addc(&b, '%') < 0) return jinja_ctx_nomem(c, line);
            continue;
        }
        if (!have) {
            if (map && pos == &single && next == 0 && args.kind == JV_DICT) {
                v = args; /* "%s" % {'a': 1} formats the dict itself */
            } else if (next >= pos->n) {
                return fail_fmt(c, line, "not enough arguments for format string");
            } else {
                v = pos->v[next];
            }
            next++;
        }
        if (width > 100000) return fail_fmt(c, line, "width too large");
        JTRY(convert(c, line, &b, v, flags, width, prec, conv));
    }
    /* CPython skips this check when the argument passes PyMapping_Check (dicts, lists) */
    if (!used_map && args.kind != JV_DICT && args.kind != JV_LIST && next < pos->n)
        return fail_fmt(c, line, "not all arguments converted during string formatting");
    *out = jinja_str(c, b.p ? b.p : "", b.len);
    return jinja_is_oom(*out) ? jinja_ctx_nomem(c, line) : 0;
}

/* ---- str.format ---------------------------------------------------------------------------- */

static int format_spec(jctx *c, int line, strbuf *b, jv v, const char *spec, size_t sl) {
    if (sl == 0) {
        if (jinja_write_str(c, b, v) < 0) return jinja_ctx_nomem(c, line);
        return 0;
    }
    char fill[5] = " ", align = 0, sign = '-', type = 0;
    size_t fill_len = 1, i = 0;
    int zero = 0, comma = 0, alt = 0;
    int64_t width = 0;
    int prec = -1;
    size_t k = 0;
    if (sl > 0) {
        jinja_utf8_next(spec, sl, &k);
        if (k < sl && strchr("<>=^", spec[k])) {
            memcpy(fill, spec, k);
            fill[k] = 0;
            fill_len = k;
            align = spec[k];
            i = k + 1;
        } else if (strchr("<>=^", spec[0])) {
            align = spec[0];
            i = 1;
        }
    }
    if (i < sl && strchr("+- ", spec[i])) sign = spec[i++];
    if (i < sl && spec[i] == '#') alt = 1, i++;
    if (i < sl && spec[i] == '0') zero = 1, i++;
    while (i < sl && spec[i] >= '0' && spec[i] <= '9' && width <= 100000)
        width = width * 10 + (spec[i++] - '0');
    if (i < sl && (spec[i] == ',' || spec[i] == '_')) comma = 1, i++;
    if (i < sl && spec[i] == '.') {
        prec = 0;
        i++;
        while (i < sl && spec[i] >= '0' && spec[i] <= '9' && prec <= 100000)
            prec = prec * 10 + (spec[i++] - '0');
    }
    if (prec > 100000) return fail_fmt(c, line, "precision too big");
    if (i < sl) type = spec[i++];
    if (i != sl || comma || alt || width > 100000)
        return fail_fmt(c, line, "unsupported format specifier");
    if (zero && !align) align = '=', fill[0] = '0', fill[1] = 0, fill_len = 1;
    strbuf t;
    jinja_buf_init(&t, c->a, 0);
    if (v.kind == JV_STR || v.kind == JV_UNDEF || v.kind == JV_NONE || v.kind == JV_LIST ||
        v.kind == JV_DICT) {
        if (type && type != 's') return fail_fmt(c, line, "Unknown format code for object");
        if (v.kind != JV_STR && v.kind != JV_UNDEF)
            return fail_fmt(c, line, "unsupported format string passed to object.__format__");
        JTRY(convert(c, line, &t, v, "", 0, prec, 's'));
        if (!align) align = '<';
    } else if (jinja_is_num(v)) {
        char flags[3] = {0};
        if (sign != '-') flags[0] = sign;
        if (!type) type = v.kind == JV_FLOAT ? (prec >= 0 ? 'g' : 0) : 'd';
        if (!type) { /* float without type: repr */
            if (sign == '+' && v.u.f >= 0 && strbuf_addc(&t, '+') < 0)
                return jinja_ctx_nomem(c, line);
            if (sign == ' ' && v.u.f >= 0 && strbuf_addc(&t, ' ') < 0)
                return jinja_ctx_nomem(c, line);
            if (jinja_write_float(&t, v.u.f) < 0) return jinja_ctx_nomem(c, line);
        } else if (type == '%') {
            JTRY(convert(c, line, &t, jinja_float(jinja_as_double(v) * 100), flags, 0, prec, 'f'));
            if (strbuf_addc(&t, '%') < 0) return jinja_ctx_nomem(c, line);
        } else if (strchr("dxXoc", type)) {
            if (v.kind == JV_FLOAT)
                return fail_fmt(c, line, "Unknown format code for object of type 'float'");
            JTRY(convert(c, line, &t, v, flags, 0, -1, type));
        } else if (strchr("fFeEgG", type)) {
            JTRY(convert(c, line, &t, v, flags, 0, prec, type));
        } else {
            return fail_fmt(c, line, "unsupported format type");
        }
        if (!align) align = '>';
    } else {
        return fail_fmt(c, line, "unsupported format string passed to object.__format__");
    }
    if (put_padded(b, t.p ? t.p : "", t.len, jinja_utf8_count(t.p ? t.p : "", t.len), width, align,
                   fill, fill_len) < 0)
        return jinja_ctx_nomem(c, line);
    return 0;
}

int jinja_format_brace(jctx *c, int line, jv fmt, jv *args, size_t nargs, const char **kwn, jv *kwv,
                       size_t nkw, jv *out) {
    strbuf b;
    jinja_buf_init(&b, c->a, c->max_output);
    const char *p = fmt.u.s->p, *end = p + fmt.u.s->len;
    size_t auto_idx = 0;
    int manual = 0, automatic = 0;
    while (p < end) {
        if (*p == '}') {
            if (p + 1 < end && p[1] == '}') {
                if (strbuf_addc(&b, '}') < 0) return jinja_ctx_nomem(c, line);
                p += 2;
                continue;
            }
            return fail_fmt(c, line, "Single '}' encountered in format string");
        }
        if (*p != '{') {
            if (strbuf_addc(&b, *p++) < 0) return jinja_ctx_nomem(c, line);
            continue;
        }
        if (p + 1 < end && p[1] == '{') {
            if (strbuf_addc(&b, '{') < 0) return jinja_ctx_nomem(c, line);
            p += 2;
            continue;
        }
        const char *close = memchr(p, '}', (size_t)(end - p));
        if (!close) return fail_fmt(c, line, "Single '{' encountered in format string");
        const char *f = p + 1, *fe = f;
        while (fe < close && *fe != '!' && *fe != ':' && *fe != '.' && *fe != '[') fe++;
        if (fe < close && (*fe == '.' || *fe == '['))
            return fail_fmt(c, line, "attribute and index lookups in str.format are not supported");
        jv v;
        if (fe == f) {
            if (manual)
                return fail_fmt(
                    c, line,
                    "cannot switch from manual field specification to automatic field numbering");
            automatic = 1;
            if (auto_idx >= nargs)
                return jinja_ctx_fail(
                    c, STRATA_EINVALID, line,
                    "Replacement index %zu out of range for positional args tuple", auto_idx);
            v = args[auto_idx++];
        } else if (*f >= '0' && *f <= '9') {
            if (automatic)
                return fail_fmt(
                    c, line,
                    "cannot switch from automatic field numbering to manual field specification");
            manual = 1;
            size_t idx = 0;
            for (const char *q = f; q < fe && idx <= nargs; q++)
                idx = idx * 10 + (size_t)(*q - '0');
            if (idx >= nargs)
                return jinja_ctx_fail(
                    c, STRATA_EINVALID, line,
                    "Replacement index %zu out of range for positional args tuple", idx);
            v = args[idx];
        } else {
            size_t k = 0;
            while (k < nkw &&
                   !(strlen(kwn[k]) == (size_t)(fe - f) && !memcmp(kwn[k], f, (size_t)(fe - f))))
                k++;
            if (k == nkw)
                return jinja_ctx_fail(c, STRATA_EINVALID, line, "KeyError: '%.*s'", (int)(fe - f),
                                      f);
            v = kwv[k];
        }
        char conv = 0;
        if (fe < close && *fe == '!') {
            conv = fe + 1 < close ? fe[1] : 0;
            fe += 2;
        }
        const char *spec = fe < close && *fe == ':' ? fe + 1 : close;
        if (conv == 'r' || conv == 'a' || conv == 's') {
            strbuf t;
            jinja_buf_init(&t, c->a, 0);
            if ((conv == 's' ? jinja_write_str(c, &t, v) : jinja_write_repr(c, &t, v)) < 0)
                return jinja_ctx_nomem(c, line);
            v = jinja_str(c, t.p ? t.p : "", t.len);
            if (jinja_is_oom(v)) return jinja_ctx_nomem(c, line);
        } else if (conv) {
            return fail_fmt(c, line, "Unknown conversion specifier");
        }
        JTRY(format_spec(c, line, &b, v, spec, (size_t)(close - spec)));
        p = close + 1;
    }
    *out = jinja_str(c, b.p ? b.p : "", b.len);
    return jinja_is_oom(*out) ? jinja_ctx_nomem(c, line) : 0;
}
