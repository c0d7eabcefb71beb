/* regex_gbnf.c - a regular expression (JSON Schema "pattern", vLLM's guided_regex) compiled
 * to GBNF rules, so the grammar matcher can hold decoding to strings the expression matches
 * whole (as Python's re.fullmatch does).
 *
 * Syntax, the ECMAScript / Python common subset: UTF-8 literals (code points); escaped
 * punctuation as literals; \n \r \t \f \v \0 \xHH \uHHHH \u{H..} \UHHHHHHHH (a \uD8xx\uDCxx
 * pair is one code point, as JSON Schema's UTF-16 patterns mean it); \d \D \w \W \s \S with
 * their ASCII meanings, inside and outside brackets; [..] and [^..] with ranges (a ']'
 * first is literal, as in Python; [\b] is backspace); '.' (anything but "\n"); ( ), (?: ),
 * (?P<n> ) and (?<n> ) as plain groups; '|' with empty alternatives; * + ? {m} {m,} {m,n}
 * {,n} (Python's), each optionally lazy (?) or possessive (+), which changes nothing for a
 * whole match; a '{' that starts no quantifier is literal; '^' first and '$' last.
 * Lookaround, backreferences, \b \B \A \Z, anchors elsewhere, inline flags, atomic groups,
 * octal and \p escapes are STRATA_EUNSUPPORTED; a malformed expression, a bound above 1000,
 * groups nested past 256 or a grammar the parser would refuse as too big are
 * STRATA_EINVALID. Each message names the byte offset.
 *
 * The expression becomes a graph of nodes (sets of code points, sequences, alternations,
 * repetitions) in one pool, then one rule per alternation, group under a quantifier or
 * shared suffix, so no rule nests parentheses and writing it out needs no recursion. The
 * grammar parser refuses a rule that can reach itself without reading a byte, which an
 * unbounded loop over something that matches the empty string would be ((a?)*), so such a
 * loop runs over that thing's non-empty strings instead (rx_nonempty): the same language. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/utf8.h"
#include "engine/constrain/constrain.h"
#include "engine/constrain/grammar.h"

#define RX_MAX_DEPTH 256
#define RX_MAX_BOUND 1000
#define RX_INF (-1)
#define RX_NONE (-1) /* a node id: the empty language (a class nothing is in) */
#define RX_EPS 0     /* a node id: the empty string, made first */
#define RX_MAX_CP 0x10FFFFu
/* Room left under the parser's limits for the rule that wraps ours. */
#define RX_MAX_COST (GRAMMAR_MAX_ELEMS / 2)
#define RX_MAX_TEXT (GRAMMAR_MAX_TEXT / 2)

enum rx_kind { RX_EMPTY, RX_SET, RX_CAT, RX_ALT, RX_REP };

typedef struct rx_range {
    uint32_t lo, hi;
} rx_range;

typedef struct rx_node {
    uint8_t kind, nullable; /* nullable: matches the empty string */
    uint32_t off, n;        /* SET: ranges[off..off+n); CAT, ALT: kids[off..off+n) */
    int32_t kid, min, max;  /* REP: kid{min,max}, max RX_INF when unbounded */
    int32_t ne;             /* rx_nonempty's memo: -2 until asked */
    uint32_t rule;          /* helper rule number, 0 until one is needed */
} rx_node;

typedef struct rx {
    const uint8_t *s;
    size_t len, pos;
    int depth, oom;
    rx_node *nodes;
    size_t n_nodes, cap_nodes;
    int32_t *kids; /* children of CAT and ALT nodes */
    size_t n_kids, cap_kids;
    int32_t *stack; /* items of the sequences and alternations being parsed */
    size_t n_stack, cap_stack;
    rx_range *ranges; /* every set's ranges; the set being parsed is at the end */
    size_t n_ranges, cap_ranges;
    strata_err *err;
} rx;

/* ---- pool ----------------------------------------------------------------------------- */

/* Room for one more element of size sz in *p; 0, or sets oom and returns -1. */
static int rx_grow(rx *x, void **p, size_t *cap, size_t n, size_t sz) {
    if (n < *cap) return 0;
    size_t nc = *cap ? *cap * 2 : 64;
    void *q = realloc(*p, nc * sz);
    if (!q) {
        x->oom = 1;
        return -1;
    }
    *p = q;
    *cap = nc;
    return 0;
}

static int rx_add_id(rx *x, int32_t **v, size_t *n, size_t *cap, int32_t id) {
    if (rx_grow(x, (void **)v, cap, *n, sizeof **v)) return -1;
    (*v)[(*n)++] = id;
    return 0;
}
#define rx_push(x, id) rx_add_id(x, &(x)->stack, &(x)->n_stack, &(x)->cap_stack, id)
#define rx_add_kid(x, id) rx_add_id(x, &(x)->kids, &(x)->n_kids, &(x)->cap_kids, id)

static int rx_add_range(rx *x, uint32_t lo, uint32_t hi) {
    if (rx_grow(x, (void **)&x->ranges, &x->cap_ranges, x->n_ranges, sizeof *x->ranges)) return -1;
    x->ranges[x->n_ranges++] = (rx_range){lo, hi};
    return 0;
}

/* A node; off and n are a set's ranges or a sequence's or alternation's kids. */
static int32_t rx_node_new(rx *x, int kind, int nullable, size_t off, size_t count) {
    if (rx_grow(x, (void **)&x->nodes, &x->cap_nodes, x->n_nodes, sizeof *x->nodes)) return RX_NONE;
    rx_node *n = &x->nodes[x->n_nodes];
    memset(n, 0, sizeof *n);
    n->kind = (uint8_t)kind;
    n->nullable = (uint8_t)nullable;
    n->ne = -2;
    n->off = (uint32_t)off;
    n->n = (uint32_t)count;
    return (int32_t)x->n_nodes++;
}

/* ---- building, simplifying on the way --------------------------------------------------- */

/* The set of ranges[off..n_ranges) (normalized by the caller); RX_NONE when empty. */
static int32_t rx_mk_set(rx *x, size_t off) {
    if (x->n_ranges == off) return RX_NONE;
    return rx_node_new(x, RX_SET, 0, off, x->n_ranges - off);
}

/* The sequence of stack[base..], popped; nested sequences are spliced in unless they are
 * shared suffixes (flat 0), which must stay one node for rx_nonempty to stay linear. */
static int32_t rx_mk_cat(rx *x, size_t base, int flat) {
    size_t off = x->n_kids, top = x->n_stack;
    int nullable = 1, none = 0;
    for (size_t i = base; i < top && !none; i++) {
        int32_t k = x->stack[i];
        if (k == RX_NONE) none = 1;
        else if (k == RX_EPS) continue;
        else if (flat && x->nodes[k].kind == RX_CAT) {
            for (uint32_t j = 0; j < x->nodes[k].n; j++)
                if (rx_add_kid(x, x->kids[x->nodes[k].off + j])) none = 1;
        } else if (rx_add_kid(x, k)) none = 1;
        if (!none && !x->nodes[k].nullable) nullable = 0;
    }
    x->n_stack = base;
    size_t n = x->n_kids - off;
    if (none || n <= 1) {
        int32_t r = none ? RX_NONE : n ? x->kids[off] : RX_EPS;
        x->n_kids = off;
        return r;
    }
    return rx_node_new(x, RX_CAT, nullable, off, n);
}

static int32_t rx_cat2(rx *x, int32_t a, int32_t b) {
    size_t base = x->n_stack;
    if (rx_push(x, a) || rx_push(x, b)) {
        x->n_stack = base;
        return RX_NONE;
    }
    return rx_mk_cat(x, base, 0);
}

static int32_t rx_mk_rep(rx *x, int32_t kid, int min, int max);

/* The alternation of stack[base..], popped. An empty alternative becomes a '?' on the
 * rest, so no rule has an empty alternative. */
static int32_t rx_mk_alt(rx *x, size_t base) {
    size_t off = x->n_kids, top = x->n_stack;
    int eps = 0, nullable = 0;
    for (size_t i = base; i < top; i++) {
        int32_t k = x->stack[i];
        if (k == RX_NONE) continue;
        if (k == RX_EPS) {
            eps = 1;
            continue;
        }
        if (x->nodes[k].kind == RX_ALT) {
            for (uint32_t j = 0; j < x->nodes[k].n; j++)
                rx_add_kid(x, x->kids[x->nodes[k].off + j]);
        } else rx_add_kid(x, k);
        nullable |= x->nodes[k].nullable;
    }
    x->n_stack = base;
    size_t n = x->n_kids - off;
    int32_t id = n ? x->kids[off] : eps ? RX_EPS : RX_NONE;
    if (n > 1) id = rx_node_new(x, RX_ALT, nullable, off, n);
    else x->n_kids = off;
    if (eps && n && !nullable) id = rx_mk_rep(x, id, 0, 1);
    return x->oom ? RX_NONE : id;
}

/* The non-empty strings of node id (RX_NONE when it has none). Sequence: the first part
 * that reads something reads a non-empty string and the rest anything; repetition: one or
 * more non-empty strings of the repeated thing. */
static int32_t rx_nonempty(rx *x, int32_t id) {
    if (id == RX_NONE || !x->nodes[id].nullable) return id;
    if (x->nodes[id].ne != -2) return x->nodes[id].ne;
    rx_node n = x->nodes[id]; /* copy: the pool may move */
    int32_t r = RX_NONE;
    size_t base = x->n_stack;
    if (n.kind == RX_ALT) {
        for (uint32_t j = 0; j < n.n; j++) rx_push(x, rx_nonempty(x, x->kids[n.off + j]));
        r = rx_mk_alt(x, base);
    } else if (n.kind == RX_CAT) {
        int32_t suffix = RX_EPS;
        for (uint32_t j = n.n; j-- > 0;) {
            int32_t k = x->kids[n.off + j];
            rx_push(x, rx_cat2(x, rx_nonempty(x, k), suffix));
            suffix = rx_cat2(x, k, suffix);
        }
        r = rx_mk_alt(x, base);
    } else if (n.kind == RX_REP) {
        int32_t k = rx_nonempty(x, n.kid);
        r = k == RX_NONE ? RX_NONE : rx_mk_rep(x, k, 1, n.max);
    }
    if (x->oom) return RX_NONE;
    x->nodes[id].ne = r;
    return r;
}

static int32_t rx_mk_rep(rx *x, int32_t kid, int min, int max) {
    if (kid == RX_NONE) return min ? RX_NONE : RX_EPS;
    if (kid == RX_EPS || max == 0) return RX_EPS;
    if (min == 1 && max == 1) return kid;
    if (max == RX_INF && x->nodes[kid].nullable) {
        kid = rx_nonempty(x, kid);
        if (kid == RX_NONE) return x->oom ? RX_NONE : RX_EPS;
        min = 0;
    }
    int32_t id = rx_node_new(x, RX_REP, min == 0 || x->nodes[kid].nullable, 0, 0);
    if (id == RX_NONE) return RX_NONE;
    x->nodes[id].kid = kid;
    x->nodes[id].min = min;
    x->nodes[id].max = max;
    return id;
}

/* ---- sets of code points ------------------------------------------------------------------ */

static int rx_range_cmp(const void *a, const void *b) {
    const rx_range *p = a, *q = b;
    return p->lo < q->lo ? -1 : p->lo > q->lo;
}

/* Sorts and merges ranges[off..]. */
static void rx_set_normalize(rx *x, size_t off) {
    rx_range *r = x->ranges + off;
    size_t n = x->n_ranges - off, m = 0;
    if (!n) return;
    qsort(r, n, sizeof *r, rx_range_cmp);
    for (size_t i = 1; i < n; i++) {
        if (r[i].lo <= r[m].hi + 1) {
            if (r[i].hi > r[m].hi) r[m].hi = r[i].hi;
        } else r[++m] = r[i];
    }
    x->n_ranges = off + m + 1;
}

/* Replaces the normalized ranges[off..] with their complement in [0, U+10FFFF]. The result
 * is built past the end, then moved down. */
static int rx_set_negate(rx *x, size_t off) {
    size_t end = x->n_ranges;
    uint64_t at = 0;
    for (size_t i = off; i < end; i++) {
        rx_range r = x->ranges[i];
        if (r.lo > at && rx_add_range(x, (uint32_t)at, r.lo - 1)) return -1;
        at = (uint64_t)r.hi + 1;
    }
    if (at <= RX_MAX_CP && rx_add_range(x, (uint32_t)at, RX_MAX_CP)) return -1;
    memmove(x->ranges + off, x->ranges + end, (x->n_ranges - end) * sizeof *x->ranges);
    x->n_ranges = off + (x->n_ranges - end);
    return 0;
}

/* Normalizes ranges[off..] and drops the surrogates from them (UTF-8 cannot write one; the
 * grammar's classes never hold them). */
static int rx_set_finish(rx *x, size_t off) {
    rx_set_normalize(x, off);
    size_t end = x->n_ranges;
    for (size_t i = off; i < end; i++) {
        rx_range r = x->ranges[i];
        if (r.lo <= 0xD7FF && rx_add_range(x, r.lo, r.hi < 0xD7FF ? r.hi : 0xD7FF)) return -1;
        if (r.hi >= 0xE000 && rx_add_range(x, r.lo > 0xE000 ? r.lo : 0xE000, r.hi)) return -1;
    }
    memmove(x->ranges + off, x->ranges + end, (x->n_ranges - end) * sizeof *x->ranges);
    x->n_ranges = off + (x->n_ranges - end);
    return 0;
}

/* \d \w \s (lower case) or their complements (upper case), ASCII meanings. */
static int rx_set_add_class(rx *x, int c) {
    static const rx_range d[] = {{'0', '9'}};
    static const rx_range w[] = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
    static const rx_range s[] = {{'\t', '\r'}, {' ', ' '}};
    const rx_range *t = c == 'd' || c == 'D' ? d : c == 'w' || c == 'W' ? w : s;
    size_t n = t == d ? 1 : t == w ? 4 : 2, off = x->n_ranges;
    for (size_t i = 0; i < n; i++)
        if (rx_add_range(x, t[i].lo, t[i].hi)) return -1;
    if (c >= 'a') return 0;
    return rx_set_negate(x, off);
}

/* ---- parsing ------------------------------------------------------------------------------- */

static int rx_fail(rx *x, int code, size_t at, const char *what) {
    return strata_err_set(x->err, code, "regex at offset %zu: %s", at, what);
}

static int rx_nomem(rx *x) { return strata_err_set(x->err, STRATA_ENOMEM, "regex: out of memory"); }

static int rx_peek(const rx *x, size_t ahead) {
    return x->pos + ahead < x->len ? x->s[x->pos + ahead] : -1;
}

/* 1 when c is one of the characters of set (never for NUL, which strchr would find). */
static int rx_in(int c, const char *set) { return c > 0 && strchr(set, c) != NULL; }

static int rx_is_word(int c, int digits) {
    return c == '_' || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') || (digits && c >= '0' && c <= '9');
}

static int rx_hexval(int c) {
    return c >= '0' && c <= '9'                     ? c - '0'
           : (c | 0x20) >= 'a' && (c | 0x20) <= 'f' ? (c | 0x20) - 'a' + 10
                                                    : -1;
}

/* Reads exactly n hex digits (n 0: 1 to 6 of them) at pos; -1 when they are not there. */
static int64_t rx_hex(rx *x, int n) {
    int64_t v = 0;
    int i = 0;
    for (; n ? i < n : i < 6; i++) {
        int h = rx_hexval(rx_peek(x, 0));
        if (h < 0) break;
        v = v * 16 + h;
        x->pos++;
    }
    return (n ? i == n : i > 0) ? v : -1;
}

/* One UTF-8 character at pos into *cp. */
static int rx_utf8(rx *x, uint32_t *cp) {
    int k = unicode_utf8_check(x->s + x->pos, x->len - x->pos), n;
    if (k <= 0) return rx_fail(x, STRATA_EINVALID, x->pos, "invalid UTF-8");
    *cp = unicode_utf8_decode(x->s + x->pos, &n);
    x->pos += (size_t)n;
    return 0;
}

/* \u and \U: a code point, a UTF-16 pair written as two \u escapes taken as one. */
static int rx_escape_unicode(rx *x, int c, size_t at, uint32_t *cp) {
    int64_t v;
    if (c == 'u' && rx_peek(x, 0) == '{') {
        x->pos++;
        v = rx_hex(x, 0);
        if (v < 0 || rx_peek(x, 0) != '}') return rx_fail(x, STRATA_EINVALID, at, "bad \\u{}");
        x->pos++;
    } else v = rx_hex(x, c == 'u' ? 4 : 8);
    if (v < 0 || v > RX_MAX_CP) return rx_fail(x, STRATA_EINVALID, at, "bad \\u escape");
    if (v >= 0xD800 && v <= 0xDBFF && rx_peek(x, 0) == '\\' && rx_peek(x, 1) == 'u') {
        size_t back = x->pos;
        x->pos += 2;
        int64_t lo = rx_hex(x, 4);
        if (lo >= 0xDC00 && lo <= 0xDFFF) v = 0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00);
        else x->pos = back;
    }
    if (v >= 0xD800 && v <= 0xDFFF)
        return rx_fail(x, STRATA_EUNSUPPORTED, at, "a lone surrogate cannot be matched");
    *cp = (uint32_t)v;
    return 0;
}

/* The escape after a '\' at pos: a code point into *cp, or a class letter (d D w W s S)
 * into *cls. */
static int rx_escape(rx *x, int in_class, uint32_t *cp, int *cls) {
    size_t at = x->pos - 1;
    int c = rx_peek(x, 0);
    *cls = 0;
    if (c < 0) return rx_fail(x, STRATA_EINVALID, at, "trailing backslash");
    if (c >= 0x80) return rx_utf8(x, cp);
    x->pos++;
    if (rx_in(c, "dDwWsS")) *cls = c;
    else if (rx_in(c, "nrtfv"))
        *cp = c == 'n' ? 10 : c == 'r' ? 13 : c == 't' ? 9 : c == 'f' ? 12 : 11;
    else if (c == '0' && (rx_peek(x, 0) < '0' || rx_peek(x, 0) > '9')) *cp = 0;
    else if (c >= '0' && c <= '9')
        return rx_fail(x, STRATA_EUNSUPPORTED, at, "backreference or octal escape");
    else if (c == 'x') {
        int64_t v = rx_hex(x, 2);
        if (v < 0) return rx_fail(x, STRATA_EINVALID, at, "bad \\x escape");
        *cp = (uint32_t)v;
    } else if (c == 'u' || c == 'U') return rx_escape_unicode(x, c, at, cp);
    else if (c == 'b' && in_class) *cp = 8;
    else if (c == 'k') return rx_fail(x, STRATA_EUNSUPPORTED, at, "backreference");
    else if (rx_in(c, "bBAZzG")) return rx_fail(x, STRATA_EUNSUPPORTED, at, "anchor");
    else if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z')
        return rx_fail(x, STRATA_EUNSUPPORTED, at, "unknown escape");
    else *cp = (uint32_t)c;
    return 0;
}

/* One member of a bracket class: a code point, or a class letter. */
static int rx_class_item(rx *x, uint32_t *cp, int *cls) {
    *cls = 0;
    if (x->s[x->pos] != '\\') return rx_utf8(x, cp);
    x->pos++;
    return rx_escape(x, 1, cp, cls);
}

/* [..] or [^..] at pos. */
static int rx_parse_class(rx *x, int32_t *out) {
    size_t start = x->pos++, off = x->n_ranges;
    int neg = rx_peek(x, 0) == '^', rc;
    x->pos += (size_t)neg;
    for (int first = 1;; first = 0) {
        if (x->pos >= x->len) return rx_fail(x, STRATA_EINVALID, start, "unterminated [");
        if (x->s[x->pos] == ']' && !first) break;
        size_t at = x->pos;
        uint32_t lo, hi;
        int cls, cls2;
        if ((rc = rx_class_item(x, &lo, &cls))) return rc;
        int range = rx_peek(x, 0) == '-' && rx_peek(x, 1) >= 0 && rx_peek(x, 1) != ']';
        if (range && cls) return rx_fail(x, STRATA_EINVALID, at, "bad character range");
        if (cls) {
            if (rx_set_add_class(x, cls)) return rx_nomem(x);
            continue;
        }
        hi = lo;
        if (range) {
            x->pos++;
            if ((rc = rx_class_item(x, &hi, &cls2))) return rc;
            if (cls2 || hi < lo) return rx_fail(x, STRATA_EINVALID, at, "bad character range");
        }
        if (rx_add_range(x, lo, hi)) return rx_nomem(x);
    }
    x->pos++;
    rx_set_normalize(x, off);
    if ((neg && rx_set_negate(x, off)) || rx_set_finish(x, off)) return rx_nomem(x);
    *out = rx_mk_set(x, off);
    return x->oom ? rx_nomem(x) : 0;
}

/* A quantifier at pos: 1 with *min, *max and pos past it; 0 (pos unchanged) when there is
 * none, a '{' that starts none being a literal; negative on error. */
static int rx_parse_quant(rx *x, int *min, int *max) {
    int c = rx_peek(x, 0);
    size_t at = x->pos;
    if (c == '*' || c == '+' || c == '?') {
        *min = c == '+';
        *max = c == '?' ? 1 : RX_INF;
        x->pos++;
        return 1;
    }
    if (c != '{') return 0;
    long v[2] = {-1, -1};
    int comma = 0;
    size_t p = x->pos + 1;
    for (; p < x->len && x->s[p] != '}'; p++) {
        int d = x->s[p];
        if (d == ',' && !comma) comma = 1;
        else if (d >= '0' && d <= '9')
            v[comma] = v[comma] < 0 ? d - '0' : v[comma] * 10 + (d - '0');
        else return 0;
        if (v[comma] > RX_MAX_BOUND) v[comma] = RX_MAX_BOUND + 1;
    }
    if (p >= x->len || (v[0] < 0 && !comma)) return 0;
    if (v[0] > RX_MAX_BOUND || v[1] > RX_MAX_BOUND)
        return rx_fail(x, STRATA_EINVALID, at, "repetition bound above 1000");
    *min = v[0] < 0 ? 0 : (int)v[0];
    *max = comma ? (int)v[1] : *min; /* {m,} leaves v[1] at -1: RX_INF */
    if (*max != RX_INF && *max < *min)
        return rx_fail(x, STRATA_EINVALID, at, "repetition {m,n} with m > n");
    x->pos = p + 1;
    return 1;
}

static int rx_parse_alt(rx *x, int32_t *out);

/* (..), (?:..), (?P<n>..), (?<n>..) at pos. */
static int rx_parse_group(rx *x, int32_t *out) {
    size_t start = x->pos++;
    if (rx_peek(x, 0) == '?') {
        int c = rx_peek(x, 1), c2 = rx_peek(x, 2);
        if (c == ':') x->pos += 2;
        else if ((c == '<' && c2 != '=' && c2 != '!') || (c == 'P' && c2 == '<')) {
            x->pos += c == 'P' ? 3 : 2;
            size_t name = x->pos;
            while (rx_is_word(rx_peek(x, 0), x->pos > name)) x->pos++;
            if (x->pos == name || rx_peek(x, 0) != '>')
                return rx_fail(x, STRATA_EINVALID, start, "bad group name");
            x->pos++;
        } else if (c == '=' || c == '!' || c == '<')
            return rx_fail(x, STRATA_EUNSUPPORTED, start, "lookaround");
        else if (c == 'P' && c2 == '=')
            return rx_fail(x, STRATA_EUNSUPPORTED, start, "backreference");
        else if (rx_in(c, "aiLmsux-^>#(|'"))
            return rx_fail(x, STRATA_EUNSUPPORTED, start, "inline flags or group extension");
        else return rx_fail(x, STRATA_EINVALID, start, "unknown group extension");
    }
    if (++x->depth > RX_MAX_DEPTH)
        return rx_fail(x, STRATA_EINVALID, start, "groups nested more than 256 deep");
    int rc = rx_parse_alt(x, out);
    x->depth--;
    if (rc) return rc;
    if (rx_peek(x, 0) != ')') return rx_fail(x, STRATA_EINVALID, start, "missing )");
    x->pos++;
    return 0;
}

/* One atom at pos (not a quantifier, '|' or ')'). */
static int rx_parse_atom(rx *x, int32_t *out) {
    int c = x->s[x->pos], cls, rc;
    uint32_t cp;
    size_t off = x->n_ranges;
    if (c == '(') return rx_parse_group(x, out);
    if (c == '[') return rx_parse_class(x, out);
    if (c == '^' || c == '$')
        return rx_fail(x, STRATA_EUNSUPPORTED, x->pos, "anchor inside the expression");
    if (c == '.') {
        x->pos++;
        if (rx_add_range(x, 0, '\n' - 1) || rx_add_range(x, '\n' + 1, RX_MAX_CP) ||
            rx_set_finish(x, off))
            return rx_nomem(x);
    } else if (c == '\\') {
        x->pos++;
        if ((rc = rx_escape(x, 0, &cp, &cls))) return rc;
        if (cls ? rx_set_add_class(x, cls) : rx_add_range(x, cp, cp)) return rx_nomem(x);
    } else {
        if ((rc = rx_utf8(x, &cp))) return rc;
        if (rx_add_range(x, cp, cp)) return rx_nomem(x);
    }
    *out = rx_mk_set(x, off);
    return x->oom ? rx_nomem(x) : 0;
}

/* An atom and its quantifiers, a lazy or possessive mark allowed after each. */
static int rx_parse_piece(rx *x, int32_t *out) {
    int rc, min, max;
    size_t at = x->pos;
    if ((rc = rx_parse_quant(x, &min, &max)) != 0)
        return rc < 0 ? rc : rx_fail(x, STRATA_EINVALID, at, "quantifier with nothing before it");
    if ((rc = rx_parse_atom(x, out))) return rc;
    if ((rc = rx_parse_quant(x, &min, &max)) <= 0) return rc;
    if (rx_peek(x, 0) == '?' || rx_peek(x, 0) == '+') x->pos++;
    *out = rx_mk_rep(x, *out, min, max);
    if (x->oom) return rx_nomem(x);
    at = x->pos;
    if ((rc = rx_parse_quant(x, &min, &max)) != 0)
        return rc < 0 ? rc : rx_fail(x, STRATA_EINVALID, at, "multiple repeat");
    return 0;
}

/* A sequence up to '|', ')' or the end; a '$' last in the expression is dropped. */
static int rx_parse_cat(rx *x, int32_t *out) {
    size_t base = x->n_stack;
    while (x->pos < x->len && x->s[x->pos] != '|' && x->s[x->pos] != ')') {
        if (x->s[x->pos] == '$' && x->pos + 1 == x->len) {
            x->pos++;
            break;
        }
        int32_t id;
        int rc = rx_parse_piece(x, &id);
        if (!rc && rx_push(x, id)) rc = rx_nomem(x);
        if (rc) {
            x->n_stack = base;
            return rc;
        }
    }
    *out = rx_mk_cat(x, base, 1);
    return x->oom ? rx_nomem(x) : 0;
}

static int rx_parse_alt(rx *x, int32_t *out) {
    size_t base = x->n_stack;
    for (;;) {
        int32_t id;
        int rc = rx_parse_cat(x, &id);
        if (!rc && rx_push(x, id)) rc = rx_nomem(x);
        if (rc) {
            x->n_stack = base;
            return rc;
        }
        if (rx_peek(x, 0) != '|') break;
        x->pos++;
    }
    *out = rx_mk_alt(x, base);
    return x->oom ? rx_nomem(x) : 0;
}

/* ---- writing GBNF ------------------------------------------------------------------------------ */

typedef struct rx_out {
    strbuf *b;
    const char *name;
    int32_t *queue; /* nodes given helper rules, in rule order */
    size_t n_queue, cap_queue;
    size_t cost; /* elements the parser will expand the rules into, roughly from above */
    int rc, too_big;
} rx_out;

static void rx_put(rx_out *o, const char *s) {
    if (!o->rc) o->rc = strbuf_adds(o->b, s);
}

/* One code point: alphanumerics and (in literals) other printable ASCII as they are,
 * everything else as an escape, so the text is plain ASCII whatever the parser's view of
 * \xHH above 0x7F. */
static void rx_put_cp(rx_out *o, uint32_t cp, int in_class) {
    char t[16];
    int plain = (cp >= '0' && cp <= '9') || ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z') ||
                (!in_class && cp >= 0x20 && cp < 0x7F && cp != '"' && cp != '\\');
    if (plain) t[0] = (char)cp, t[1] = 0;
    else if (cp < 0x80) snprintf(t, sizeof t, "\\x%02X", (unsigned)cp);
    else if (cp < 0x10000) snprintf(t, sizeof t, "\\u%04X", (unsigned)cp);
    else snprintf(t, sizeof t, "\\U%08X", (unsigned)cp);
    rx_put(o, t);
}

static int rx_is_char(const rx *x, int32_t id) {
    const rx_node *n = &x->nodes[id];
    return n->kind == RX_SET && n->n == 1 && x->ranges[n->off].lo == x->ranges[n->off].hi;
}

/* One range of a class, a lone character or a pair without the '-'. */
static void rx_put_range(rx_out *o, uint32_t a, uint32_t b) {
    if (!o) return;
    rx_put_cp(o, a, 1);
    if (b > a + 1) rx_put(o, "-");
    if (b > a) rx_put_cp(o, b, 1);
}

/* Writes [a, b] less the surrogates (o NULL: only counts); returns how many ranges. */
static size_t rx_put_span(rx_out *o, uint32_t a, uint32_t b) {
    size_t n = 0;
    if (a <= 0xD7FF) rx_put_range(o, a, b < 0xD7FF ? b : 0xD7FF), n++;
    if (b >= 0xE000) rx_put_range(o, a > 0xE000 ? a : 0xE000, b), n++;
    return n;
}

/* Writes the k ranges r, or (neg) the gaps between them; returns how many ranges. */
static size_t rx_put_ranges(rx_out *o, const rx_range *r, size_t k, int neg) {
    size_t n = 0;
    uint64_t at = 0;
    for (size_t i = 0; i < k; i++) {
        if (!neg) n += rx_put_span(o, r[i].lo, r[i].hi);
        else if (r[i].lo > at) n += rx_put_span(o, (uint32_t)at, r[i].lo - 1);
        at = (uint64_t)r[i].hi + 1;
    }
    if (neg && at <= RX_MAX_CP) n += rx_put_span(o, (uint32_t)at, RX_MAX_CP);
    return n;
}

/* A set: '.' for everything, else [..] or [^..], whichever lists fewer ranges. */
static void rx_put_set(const rx *x, rx_out *o, const rx_node *n) {
    const rx_range *r = x->ranges + n->off;
    size_t gaps = rx_put_ranges(NULL, r, n->n, 1);
    if (!gaps) {
        rx_put(o, ".");
        return;
    }
    int neg = gaps < n->n;
    rx_put(o, neg ? "[^" : "[");
    rx_put_ranges(o, r, n->n, neg);
    rx_put(o, "]");
}

/* The rule name of node id, giving it a helper rule on first use. */
static void rx_put_ref(rx *x, rx_out *o, int32_t id) {
    rx_node *n = &x->nodes[id];
    if (!n->rule) {
        if (rx_grow(x, (void **)&o->queue, &o->cap_queue, o->n_queue, sizeof *o->queue)) {
            o->rc = STRATA_ENOMEM;
            return;
        }
        o->queue[o->n_queue++] = id;
        n->rule = (uint32_t)o->n_queue;
    }
    if (!o->rc) o->rc = strbuf_addf(o->b, "%s-%u", o->name, (unsigned)n->rule);
}

/* A run of single characters from kids[i..] as one literal; returns how many it took. */
static size_t rx_put_literal(const rx *x, rx_out *o, const int32_t *ids, size_t n) {
    size_t i = 0;
    rx_put(o, "\"");
    for (; i < n && rx_is_char(x, ids[i]); i++) {
        uint32_t cp = x->ranges[x->nodes[ids[i]].off].lo;
        rx_put_cp(o, cp, 0);
        o->cost += cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
    }
    rx_put(o, "\"");
    return i;
}

/* One element: a literal character, a set, or a reference to a helper rule. */
static void rx_put_atom(rx *x, rx_out *o, int32_t id) {
    if (rx_is_char(x, id)) rx_put_literal(x, o, &id, 1);
    else if (x->nodes[id].kind == RX_SET) rx_put_set(x, o, &x->nodes[id]), o->cost++;
    else rx_put_ref(x, o, id), o->cost++;
}

static void rx_put_item(rx *x, rx_out *o, int32_t id) {
    const rx_node *n = &x->nodes[id];
    if (n->kind != RX_REP) {
        rx_put_atom(x, o, id);
        return;
    }
    int min = n->min, max = n->max;
    size_t before = o->cost;
    rx_put_atom(x, o, n->kid);
    size_t unit = o->cost - before, copies = (size_t)(max == RX_INF ? min + 1 : max);
    o->cost = before + copies * (unit + 4) + 4; /* each copy, its optional's rule and ends */
    char q[32] = "?";
    if (max == RX_INF && min <= 1) strcpy(q, min ? "+" : "*");
    else if (max == RX_INF) snprintf(q, sizeof q, "{%d,}", min);
    else if (min == max) snprintf(q, sizeof q, "{%d}", min);
    else if (min || max > 1) snprintf(q, sizeof q, "{%d,%d}", min, max);
    rx_put(o, q);
}

/* One alternative: a sequence's items, runs of characters joined into literals. */
static void rx_put_seq(rx *x, rx_out *o, int32_t id) {
    const rx_node *n = &x->nodes[id];
    if (n->kind != RX_CAT) {
        rx_put_item(x, o, id);
        return;
    }
    uint32_t off = n->off, k = n->n;
    for (uint32_t i = 0; i < k;) {
        if (i) rx_put(o, " ");
        if (rx_is_char(x, x->kids[off + i]))
            i += (uint32_t)rx_put_literal(x, o, x->kids + off + i, k - i);
        else rx_put_item(x, o, x->kids[off + i++]);
    }
}

static void rx_put_rule(rx *x, rx_out *o, int32_t id, uint32_t rule) {
    if (!o->rc)
        o->rc = rule ? strbuf_addf(o->b, "%s-%u ::= ", o->name, (unsigned)rule)
                     : strbuf_addf(o->b, "%s ::= ", o->name);
    const rx_node *n = &x->nodes[id];
    if (id == RX_EPS) rx_put(o, "\"\"");
    else if (n->kind == RX_ALT)
        for (uint32_t i = 0; i < n->n; i++) {
            if (i) rx_put(o, " | ");
            rx_put_seq(x, o, x->kids[n->off + i]);
            o->cost += 2;
        }
    else rx_put_seq(x, o, id);
    rx_put(o, "\n");
}

/* Writes the rule for root and every helper rule it needs. */
static int rx_emit(rx *x, int32_t root, const char *name, strbuf *out) {
    rx_out o = {.b = out, .name = name};
    size_t start = out->len;
    rx_put_rule(x, &o, root, 0);
    for (size_t i = 0; i < o.n_queue && !o.rc; i++) {
        rx_put_rule(x, &o, o.queue[i], (uint32_t)(i + 1));
        o.too_big = o.cost > RX_MAX_COST || out->len - start > RX_MAX_TEXT;
        if (o.too_big) break;
    }
    free(o.queue);
    if (!o.rc && (o.too_big || o.cost > RX_MAX_COST)) /* the parser would refuse it */
        return strata_err_set(x->err, STRATA_EINVALID,
                              "regex: the grammar it makes is too large (bounds too big)");
    if (o.rc == STRATA_ERANGE)
        return strata_err_set(x->err, STRATA_ERANGE, "regex: the grammar exceeds its buffer");
    return o.rc ? rx_nomem(x) : 0;
}

/* ---- entry --------------------------------------------------------------------------------- */

static int rx_name_ok(const char *s) {
    if (!s || !*s) return 0;
    while (*s == '-' || rx_is_word(*s, 1)) s++;
    return !*s;
}

int constrain_regex_gbnf(const char *re, size_t len, const char *name, strbuf *out,
                         strata_err *err) {
    if (!rx_name_ok(name))
        return strata_err_set(err, STRATA_EINVALID,
                              "regex: bad rule name (letters, digits, _ and -)");
    rx x = {.s = (const uint8_t *)re, .len = len, .err = err};
    int32_t root = RX_NONE;
    int rc = rx_node_new(&x, RX_EMPTY, 1, 0, 0) == RX_EPS ? 0 : rx_nomem(&x);
    if (!rc && len && re[0] == '^') x.pos = 1;
    if (!rc) rc = rx_parse_alt(&x, &root);
    if (!rc && x.pos < len) rc = rx_fail(&x, STRATA_EINVALID, x.pos, "unbalanced )");
    if (!rc && root == RX_NONE)
        rc = strata_err_set(err, STRATA_EUNSUPPORTED, "regex: it matches no string");
    if (!rc) rc = rx_emit(&x, root, name, out);
    free(x.nodes);
    free(x.kids);
    free(x.stack);
    free(x.ranges);
    return rc;
}
