/* jinja_json.c - Python's json.dumps, which transformers installs as |tojson.
 *
 * transformers replaces Jinja2's HTML-safe tojson by
 * json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False),
 * so tool schemas appear in prompts with ", " and ": " separators, insertion order,
 * raw non-ASCII text and floats written as Python repr. Output must match byte for
 * byte, including indent= layouts and the TypeError for unserialisable values. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "engine/template/jinja_internal.h"

static int dump_str(strbuf *b, const char *s, size_t len, int ensure_ascii) {
    JTRY(strbuf_addc(b, '"'));
    size_t i = 0, run = 0;
    while (i < len) {
        size_t start = i;
        unsigned char ch = (unsigned char)s[i];
        char esc[16];
        int ne = 0;
        if (ch < 0x80) {
            i++;
            switch (ch) {
            case '"': ne = 2, memcpy(esc, "\\\"", 2); break;
            case '\\': ne = 2, memcpy(esc, "\\\\", 2); break;
            case '\n': ne = 2, memcpy(esc, "\\n", 2); break;
            case '\r': ne = 2, memcpy(esc, "\\r", 2); break;
            case '\t': ne = 2, memcpy(esc, "\\t", 2); break;
            case '\b': ne = 2, memcpy(esc, "\\b", 2); break;
            case '\f': ne = 2, memcpy(esc, "\\f", 2); break;
            default:
                if (ch < 0x20) ne = snprintf(esc, sizeof esc, "\\u%04x", ch);
            }
        } else {
            uint32_t cp = jinja_utf8_next(s, len, &i);
            if (ensure_ascii) {
                if (cp >= 0x10000) {
                    uint32_t v = cp - 0x10000;
                    ne = snprintf(esc, sizeof esc, "\\u%04x\\u%04x", 0xD800 | (v >> 10),
                                  0xDC00 | (v & 0x3FF));
                } else {
                    ne = snprintf(esc, sizeof esc, "\\u%04x", cp);
                }
            }
        }
        if (ne) {
            JTRY(strbuf_add(b, s + run, start - run));
            JTRY(strbuf_add(b, esc, (size_t)ne));
            run = i;
        }
    }
    JTRY(strbuf_add(b, s + run, len - run));
    return strbuf_addc(b, '"');
}

static int dump_float(strbuf *b, double f) {
    if (isnan(f)) return strbuf_adds(b, "NaN");
    if (isinf(f)) return strbuf_adds(b, f < 0 ? "-Infinity" : "Infinity");
    return jinja_write_float(b, f);
}

static int newline_indent(strbuf *b, const jinja_json_opts *o, int level) {
    JTRY(strbuf_addc(b, '\n'));
    for (int i = 0; i < level; i++) JTRY(strbuf_add(b, o->indent, o->indent_len));
    return 0;
}

/* A dict key as json.dumps converts it: str as is; bool/None/int/float to text. */
static int key_text(jctx *c, int line, jv k, strbuf *kb) {
    switch ((jinja_kind)k.kind) {
    case JV_STR: return strbuf_add(kb, k.u.s->p, k.u.s->len);
    case JV_BOOL: return strbuf_adds(kb, k.u.i ? "true" : "false");
    case JV_NONE: return strbuf_adds(kb, "null");
    case JV_INT: return strbuf_addf(kb, "%lld", (long long)k.u.i);
    case JV_FLOAT: return dump_float(kb, k.u.f);
    default:
        return jinja_ctx_fail(c, STRATA_EINVALID, line,
                              "keys must be str, int, float, bool or None, not %s",
                              jinja_typename(k));
    }
}

static int dump(jctx *c, int line, strbuf *b, jv v, const jinja_json_opts *o, int level) {
    switch ((jinja_kind)v.kind) {
    case JV_NONE: return strbuf_adds(b, "null");
    case JV_BOOL: return strbuf_adds(b, v.u.i ? "true" : "false");
    case JV_INT: return strbuf_addf(b, "%lld", (long long)v.u.i);
    case JV_FLOAT: return dump_float(b, v.u.f);
    case JV_STR: return dump_str(b, v.u.s->p, v.u.s->len, o->ensure_ascii);
    case JV_LIST:
    case JV_TUPLE: {
        const jlist *l = v.u.l;
        if (l->n == 0) return strbuf_adds(b, "[]");
        JTRY(strbuf_addc(b, '['));
        for (size_t i = 0; i < l->n; i++) {
            if (i) JTRY(strbuf_adds(b, o->item_sep));
            if (o->has_indent) JTRY(newline_indent(b, o, level + 1));
            JTRY(dump(c, line, b, l->v[i], o, level + 1));
        }
        if (o->has_indent) JTRY(newline_indent(b, o, level));
        return strbuf_addc(b, ']');
    }
    case JV_DICT: {
        const jdict *d = v.u.d;
        if (d->n == 0) return strbuf_adds(b, "{}");
        size_t *order = jinja_arena_alloc(c->a, d->n * sizeof *order);
        if (!order) return STRATA_ENOMEM;
        for (size_t i = 0; i < d->n; i++) order[i] = i;
        if (o->sort_keys) { /* sorted(dct.items()): insertion sort keeps it stable */
            for (size_t i = 1; i < d->n; i++) {
                size_t x = order[i], j = i;
                while (j > 0) {
                    int r;
                    JTRY(jinja_cmp(c, line, d->k[order[j - 1]], d->k[x], &r));
                    if (r <= 0) break;
                    order[j] = order[j - 1];
                    j--;
                }
                order[j] = x;
            }
        }
        JTRY(strbuf_addc(b, '{'));
        for (size_t i = 0; i < d->n; i++) {
            jv k = d->k[order[i]];
            if (i) JTRY(strbuf_adds(b, o->item_sep));
            if (o->has_indent) JTRY(newline_indent(b, o, level + 1));
            if (k.kind == JV_STR) {
                JTRY(dump_str(b, k.u.s->p, k.u.s->len, o->ensure_ascii));
            } else {
                strbuf kb;
                jinja_buf_init(&kb, c->a, 0);
                JTRY(key_text(c, line, k, &kb));
                JTRY(dump_str(b, kb.p ? kb.p : "", kb.len, o->ensure_ascii));
            }
            JTRY(strbuf_adds(b, o->key_sep));
            JTRY(dump(c, line, b, d->v[order[i]], o, level + 1));
        }
        if (o->has_indent) JTRY(newline_indent(b, o, level));
        return strbuf_addc(b, '}');
    }
    default:
        return jinja_ctx_fail(c, STRATA_EINVALID, line,
                              "Object of type %s is not JSON serializable", jinja_typename(v));
    }
}

int jinja_json_dump(jctx *c, int line, strbuf *b, jv v, const jinja_json_opts *o) {
    int rc = dump(c, line, b, v, o, 0);
    if (rc == STRATA_ENOMEM) return jinja_ctx_nomem(c, line);
    if (rc == STRATA_ERANGE)
        return jinja_ctx_fail(c, rc, line, "rendered text exceeds the output limit");
    return rc;
}
