/* gbnf.c - parses llama.cpp's GBNF text into the flat grammar of grammar.h and checks that
 * the matcher can run it: every rule defined, a root, no left recursion, every rule able to
 * derive some finite text, the GRAMMAR_MAX_* limits.
 *
 * The syntax is llama.cpp's (src/llama-grammar.cpp, grammars/README.md): `name ::= alts`,
 * `|`, `"lit"`, `[a-z]`, `[^...]`, `.`, `( )`, `* + ? {m} {m,} {m,n}`, `#` comments, and a
 * rule ending at a newline except after `::=` or `|` and inside parentheses. Three
 * departures: names may hold '_' as well as letters, digits and '-'; a line starting with
 * `|` continues the rule above it (llama.cpp would fail, so no grammar changes meaning);
 * token references (`<...>`, `!<...>`) are not supported, since the matcher is byte-level.
 *
 * Repetitions become auxiliary rules named "<rule>-<n>" (right-recursive, so the matcher's
 * stacks stay bounded), except that a class repeated without bound becomes GK_STAR.
 * Rule numbers are given in order of first mention; auxiliary ones when created. Nothing
 * recurses on input except group nesting, bounded at GBNF_MAX_DEPTH. */
#include <stddef.h> /* before grammar.h, which uses size_t without including it */

#include "engine/constrain/grammar.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/utf8.h"

#define GBNF_MAX_DEPTH 256 /* groups open at once */
#define GBNF_CP_MAX 0x10FFFFu
#define GBNF_NONE UINT32_MAX /* no item yet; also an unbounded repetition's n */

typedef struct prule {
    char *name;    /* NUL-terminated; moves to grammar.names */
    uint32_t hash; /* of name (user rules only) */
    gram_elem *e;  /* its alternatives so far, each ending GK_END */
    uint32_t n, cap;
    uint32_t owner;  /* the user rule an auxiliary rule was made for (itself if a user rule) */
    size_t ref_at;   /* text offset of the first mention, for "not defined" */
    uint8_t defined; /* a user rule whose definition was read */
    uint8_t aux;
} prule;

typedef struct htab {
    uint32_t *slot; /* [cap] item + 1, 0 when empty; cap a power of two */
    uint32_t cap, n;
} htab;

typedef struct parser {
    const char *s;
    size_t n, pos;
    strata_err *err;
    prule *r;
    uint32_t n_rules, cap_rules;
    htab names;                              /* user rules by name */
    uint32_t *ranges, n_ranges, cap_ranges;  /* pairs; counts are pairs */
    uint32_t *class_off, cap_off, n_classes; /* [n_classes + 1] */
    uint32_t *class_hash, cap_hash;          /* [n_classes] */
    htab classes;                  /* classes by content, so identical ones share an index */
    uint32_t *tmp, n_tmp, cap_tmp; /* pairs of the class being read */
    uint64_t n_elems;
    uint32_t n_alts;
    uint32_t cur;   /* the user rule being read */
    uint32_t n_aux; /* auxiliary rules made for it so far */
} parser;

/* ---- errors and small helpers -------------------------------------------------------- */

static int nomem(parser *p) {
    return strata_err_set(p->err, STRATA_ENOMEM, "grammar: out of memory");
}

/* A syntax error at text offset at: "grammar: line L col C: ...". */
__attribute__((format(printf, 3, 4))) static int syntax(parser *p, size_t at, const char *fmt,
                                                        ...) {
    unsigned line = 1, col = 1;
    for (size_t i = 0; i < at && i < p->n; i++) {
        col++;
        if (p->s[i] == '\n') line++, col = 1;
    }
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return strata_err_set(p->err, STRATA_EINVALID, "grammar: line %u col %u: %s", line, col, msg);
}

/* Room for need items of size sz at p (capacity *cap); the new block, or NULL with p kept. */
static void *grow(void *p, uint32_t *cap, uint64_t need, size_t sz) {
    if (need <= *cap) return p;
    uint64_t c = *cap ? (uint64_t)*cap * 2 : 8;
    if (c < need) c = need;
    if (c > UINT32_MAX / 2) return NULL;
    void *q = realloc(p, (size_t)c * sz);
    if (q) *cap = (uint32_t)c;
    return q;
}

static uint32_t fnv(const void *data, size_t n) {
    const uint8_t *b = data;
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 16777619u;
    return h;
}

static int is_word(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_';
}

/* Skips blanks and comments from i; newlines too when newline_ok. */
static size_t skip_space(const parser *p, size_t i, int newline_ok) {
    while (i < p->n) {
        char c = p->s[i];
        if (c == '#')
            while (i < p->n && p->s[i] != '\n' && p->s[i] != '\r') i++;
        else if (c == ' ' || c == '\t' || (newline_ok && (c == '\n' || c == '\r'))) i++;
        else break;
    }
    return i;
}

static char peek(const parser *p) { return p->pos < p->n ? p->s[p->pos] : 0; }

/* ---- hash tables of item indices ----------------------------------------------------- */

typedef int (*htab_eq)(const parser *p, uint32_t item, const void *key);

/* The slot holding an item eq accepts, or the empty slot where it belongs. */
static uint32_t *htab_find(const parser *p, const htab *t, uint32_t h, htab_eq eq,
                           const void *key) {
    for (uint32_t i = h & (t->cap - 1);; i = (i + 1) & (t->cap - 1))
        if (!t->slot[i] || eq(p, t->slot[i] - 1, key)) return &t->slot[i];
}

typedef uint32_t (*htab_hash)(const parser *p, uint32_t item);

/* Makes room for one more item (hash gives each item's hash). */
static int htab_reserve(const parser *p, htab *t, htab_hash hash) {
    if (2 * (uint64_t)(t->n + 1) <= t->cap) return 0;
    uint32_t cap = t->cap ? t->cap * 2 : 64;
    uint32_t *slot = calloc(cap, sizeof *slot);
    if (!slot) return -1;
    for (uint32_t i = 0; i < t->cap; i++) {
        if (!t->slot[i]) continue;
        uint32_t j = hash(p, t->slot[i] - 1) & (cap - 1);
        while (slot[j]) j = (j + 1) & (cap - 1);
        slot[j] = t->slot[i];
    }
    free(t->slot);
    t->slot = slot;
    t->cap = cap;
    return 0;
}

/* ---- rules and elements -------------------------------------------------------------- */

/* Adds a rule named name (takes ownership, also on failure); its index in *out. */
static int rule_new(parser *p, char *name, int aux, uint32_t *out) {
    prule *r = grow(p->r, &p->cap_rules, (uint64_t)p->n_rules + 1, sizeof *r);
    if (!r) {
        free(name);
        return nomem(p);
    }
    p->r = r;
    r[p->n_rules] = (prule){.name = name, .aux = (uint8_t)aux, .owner = aux ? p->cur : p->n_rules};
    *out = p->n_rules++;
    return 0;
}

/* An auxiliary rule "<rule>-<n>" for the rule being read. */
static int rule_aux(parser *p, uint32_t *out) {
    const char *base = p->r[p->cur].name;
    size_t n = strlen(base) + 12;
    char *name = malloc(n);
    if (!name) return nomem(p);
    snprintf(name, n, "%s-%u", base, ++p->n_aux);
    return rule_new(p, name, 1, out);
}

typedef struct name_key {
    const char *s;
    size_t n;
} name_key;

static uint32_t name_hash(const parser *p, uint32_t item) { return p->r[item].hash; }

static int name_eq(const parser *p, uint32_t item, const void *key) {
    const name_key *k = key;
    const char *name = p->r[item].name;
    return strncmp(name, k->s, k->n) == 0 && name[k->n] == 0;
}

/* The user rule named s[0..n) (mentioned at text offset at), made on first mention. */
static int rule_lookup(parser *p, const char *s, size_t n, size_t at, uint32_t *out) {
    if (htab_reserve(p, &p->names, name_hash)) return nomem(p);
    name_key k = {s, n};
    uint32_t h = fnv(s, n), *slot = htab_find(p, &p->names, h, name_eq, &k);
    if (*slot) {
        *out = *slot - 1;
        return 0;
    }
    char *name = malloc(n + 1);
    if (!name) return nomem(p);
    memcpy(name, s, n);
    name[n] = 0;
    int rc = rule_new(p, name, 0, out);
    if (rc) return rc;
    p->r[*out].hash = h;
    p->r[*out].ref_at = at;
    *slot = *out + 1;
    p->names.n++;
    return 0;
}

/* Appends one element to rule r. */
static int emit(parser *p, uint32_t r, uint32_t kind, uint32_t arg) {
    if (p->n_elems >= GRAMMAR_MAX_ELEMS)
        return strata_err_set(p->err, STRATA_EINVALID,
                              "grammar: rule '%s': more than %u elements once repetitions are "
                              "expanded (GRAMMAR_MAX_ELEMS)",
                              p->r[p->cur].name, GRAMMAR_MAX_ELEMS);
    prule *x = &p->r[r];
    gram_elem *e = grow(x->e, &x->cap, (uint64_t)x->n + 1, sizeof *e);
    if (!e) return nomem(p);
    x->e = e;
    e[x->n++] = (gram_elem){.kind = kind, .arg = arg};
    p->n_elems++;
    p->n_alts += kind == GK_END; /* items a repetition takes back never hold one */
    return 0;
}

static int emit_run(parser *p, uint32_t r, const gram_elem *x, uint32_t n) {
    int rc = 0;
    for (uint32_t i = 0; i < n && !rc; i++) rc = emit(p, r, x[i].kind, x[i].arg);
    return rc;
}

/* ---- classes ------------------------------------------------------------------------- */

static int pair_cmp(const void *a, const void *b) {
    const uint32_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0] ? 1 : (x[1] > y[1]) - (x[1] < y[1]);
}

/* Sorts tmp's pairs and merges the overlapping and adjacent ones. */
static void class_merge(parser *p) {
    qsort(p->tmp, p->n_tmp, 2 * sizeof(uint32_t), pair_cmp);
    uint32_t k = 0, *t = p->tmp;
    for (uint32_t i = 0; i < p->n_tmp; i++) {
        if (k && t[2 * i] <= t[2 * k - 1] + 1) {
            if (t[2 * i + 1] > t[2 * k - 1]) t[2 * k - 1] = t[2 * i + 1];
        } else {
            t[2 * k] = t[2 * i], t[2 * k + 1] = t[2 * i + 1];
            k++;
        }
    }
    p->n_tmp = k;
}

/* Replaces tmp's merged pairs with their complement in 0..GBNF_CP_MAX (room was made). */
static void class_negate(parser *p) {
    uint32_t *t = p->tmp, n = p->n_tmp, *o = t + 2 * n, k = 0, next = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (t[2 * i] > next) o[2 * k] = next, o[2 * k + 1] = t[2 * i] - 1, k++;
        next = t[2 * i + 1] + 1;
    }
    if (next <= GBNF_CP_MAX) o[2 * k] = next, o[2 * k + 1] = GBNF_CP_MAX, k++;
    memmove(t, o, 2 * k * sizeof *t);
    p->n_tmp = k;
}

/* Cuts U+D800..U+DFFF out of tmp's merged pairs (one pair may split in two: room was made). */
static void class_drop_surrogates(parser *p) {
    uint32_t *t = p->tmp, k = 0, n = p->n_tmp, *o = t + 2 * n;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t lo = t[2 * i], hi = t[2 * i + 1];
        if (lo < 0xD800) o[2 * k] = lo, o[2 * k + 1] = hi < 0xD800 ? hi : 0xD7FF, k++;
        if (hi > 0xDFFF) o[2 * k] = lo > 0xE000 ? lo : 0xE000, o[2 * k + 1] = hi, k++;
    }
    memmove(t, o, 2 * k * sizeof *t);
    p->n_tmp = k;
}

static uint32_t class_hash(const parser *p, uint32_t item) { return p->class_hash[item]; }

static int class_eq(const parser *p, uint32_t item, const void *key) {
    uint32_t n = p->class_off[item + 1] - p->class_off[item];
    return n == p->n_tmp &&
           !memcmp(p->ranges + 2 * p->class_off[item], key, 2 * n * sizeof(uint32_t));
}

/* Normalises tmp (negated when neg) into a class; its index in *id. at: for the message. */
static int class_finish(parser *p, int neg, size_t at, uint32_t *id) {
    uint32_t *t = grow(p->tmp, &p->cap_tmp, 2 * (uint64_t)p->n_tmp + 4, 2 * sizeof *t);
    if (!t) return nomem(p);
    p->tmp = t;
    class_merge(p);
    if (neg) class_negate(p);
    class_drop_surrogates(p);
    if (!p->n_tmp) return syntax(p, at, "the class matches no character");
    if (htab_reserve(p, &p->classes, class_hash)) return nomem(p);
    uint32_t h = fnv(p->tmp, 2 * p->n_tmp * sizeof(uint32_t));
    uint32_t *slot = htab_find(p, &p->classes, h, class_eq, p->tmp);
    if (*slot) {
        *id = *slot - 1;
        return 0;
    }
    uint32_t *r = grow(p->ranges, &p->cap_ranges, (uint64_t)p->n_ranges + p->n_tmp, 2 * sizeof *r);
    if (!r) return nomem(p);
    p->ranges = r;
    uint32_t *off = grow(p->class_off, &p->cap_off, (uint64_t)p->n_classes + 2, 4);
    if (!off) return nomem(p);
    p->class_off = off;
    uint32_t *hs = grow(p->class_hash, &p->cap_hash, (uint64_t)p->n_classes + 2, 4);
    if (!hs) return nomem(p);
    p->class_hash = hs;
    memcpy(r + 2 * p->n_ranges, p->tmp, 2 * p->n_tmp * sizeof *r);
    p->n_ranges += p->n_tmp;
    hs[p->n_classes] = h;
    off[++p->n_classes] = p->n_ranges;
    *slot = p->n_classes;
    p->classes.n++;
    *id = p->n_classes - 1;
    return 0;
}

static int tmp_add(parser *p, uint32_t lo, uint32_t hi) {
    uint32_t *t = grow(p->tmp, &p->cap_tmp, (uint64_t)p->n_tmp + 1, 2 * sizeof *t);
    if (!t) return nomem(p);
    p->tmp = t;
    t[2 * p->n_tmp] = lo, t[2 * p->n_tmp + 1] = hi;
    p->n_tmp++;
    return 0;
}

/* ---- characters, literals, classes --------------------------------------------------- */

static int parse_hex(parser *p, int digits, uint32_t *cp) {
    size_t at = p->pos;
    uint32_t v = 0;
    for (int i = 0; i < digits; i++, p->pos++) {
        char c = peek(p);
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0) return syntax(p, at, "expecting %d hex digits", digits);
        v = v << 4 | (uint32_t)d;
    }
    *cp = v;
    return 0;
}

/* One character of a literal or class at pos: an escape or a UTF-8 character. */
static int parse_char(parser *p, uint32_t *cp) {
    size_t at = p->pos;
    if (p->pos >= p->n) return syntax(p, at, "unexpected end of text");
    if (p->s[p->pos] != '\\') {
        const uint8_t *u = (const uint8_t *)p->s + p->pos;
        int k = unicode_utf8_check(u, p->n - p->pos);
        if (k <= 0) return syntax(p, at, "invalid UTF-8");
        *cp = unicode_utf8_decode(u, &k);
        p->pos += (size_t)k;
        return 0;
    }
    char c = p->pos + 1 < p->n ? p->s[p->pos + 1] : 0;
    p->pos += 2;
    switch (c) {
    case 'x': return parse_hex(p, 2, cp);
    case 'u': return parse_hex(p, 4, cp);
    case 'U': return parse_hex(p, 8, cp);
    case 'n': *cp = '\n'; return 0;
    case 'r': *cp = '\r'; return 0;
    case 't': *cp = '\t'; return 0;
    }
    if (!c) return syntax(p, at, "unexpected end of text");
    if (strchr("\\\"[]-", c)) {
        *cp = (uint32_t)c;
        return 0;
    }
    return syntax(p, at, "unknown escape '\\%c'", c);
}

/* "..." : its UTF-8 bytes. */
static int parse_literal(parser *p, uint32_t r) {
    size_t start = p->pos++;
    for (;;) {
        if (p->pos >= p->n) return syntax(p, start, "unterminated string");
        if (p->s[p->pos] == '"') break;
        size_t at = p->pos;
        uint32_t cp;
        int rc = parse_char(p, &cp);
        if (rc) return rc;
        if (cp > GBNF_CP_MAX || (cp >= 0xD800 && cp <= 0xDFFF))
            return syntax(p, at, "U+%04X is not a character UTF-8 can write", cp);
        char u[4];
        int k = unicode_utf8_encode(cp, u);
        for (int i = 0; i < k && !rc; i++) rc = emit(p, r, GK_BYTE, (uint8_t)u[i]);
        if (rc) return rc;
    }
    p->pos++;
    return 0;
}

/* [...] or [^...] (a '-' between two characters makes a range), or '.'. */
static int parse_class(parser *p, uint32_t *id) {
    size_t start = p->pos;
    p->n_tmp = 0;
    if (p->s[p->pos++] == '.') {
        int rc = tmp_add(p, 0, GBNF_CP_MAX);
        return rc ? rc : class_finish(p, 0, start, id);
    }
    int neg = peek(p) == '^';
    p->pos += (size_t)neg;
    for (;;) {
        if (p->pos >= p->n) return syntax(p, start, "unterminated class");
        if (p->s[p->pos] == ']') break;
        size_t at = p->pos;
        uint32_t lo, hi;
        int rc = parse_char(p, &lo);
        hi = lo;
        if (!rc && peek(p) == '-' && p->pos + 1 < p->n && p->s[p->pos + 1] != ']') {
            p->pos++;
            rc = parse_char(p, &hi);
        }
        if (rc) return rc;
        if (hi > GBNF_CP_MAX) return syntax(p, at, "U+%04X is above U+10FFFF", hi);
        if (lo > hi) return syntax(p, at, "range U+%04X-U+%04X is backwards", lo, hi);
        if ((rc = tmp_add(p, lo, hi))) return rc;
    }
    p->pos++;
    return class_finish(p, neg, start, id);
}

/* ---- repetitions --------------------------------------------------------------------- */

/* Up to k more x: R1 ::= x R2 | () ... Rk ::= x | (), emitting R1 into r; with loop, Rk
 * calls itself (Rk ::= x Rk | ()) for no upper bound. */
static int repeat_opt(parser *p, uint32_t r, const gram_elem *x, uint32_t len, uint32_t k,
                      int loop) {
    uint32_t first = p->n_rules, a;
    int rc = 0;
    for (uint32_t j = 0; j < k && !rc; j++) rc = rule_aux(p, &a);
    for (uint32_t j = 0; j < k && !rc; j++) {
        rc = emit_run(p, first + j, x, len);
        if (!rc && (j + 1 < k || loop)) rc = emit(p, first + j, GK_RULE, first + j + (j + 1 < k));
        if (!rc) rc = emit(p, first + j, GK_END, 0);
        if (!rc) rc = emit(p, first + j, GK_END, 0);
    }
    return rc ? rc : emit(p, r, GK_RULE, first);
}

/* (C | X1 | ... | Xj)* written as C* ((X1 | ... | Xj) C*)*: the same language, but the
 * class loop becomes a GK_STAR, which the matcher's mask walk runs through whole subtrees
 * of the vocabulary (a JSON string body is written this way). Emits into r and returns 0,
 * or 1 (nothing emitted) when group g has not exactly one alternative that is a single
 * class beside others. */
static int repeat_split_class(parser *p, uint32_t r, uint32_t g) {
    uint32_t n_alts = 0, n_cls = 0, cls = 0, skip = 0;
    for (uint32_t i = 0, j; i < p->r[g].n; i = j + 1, n_alts++) {
        const gram_elem *e = p->r[g].e;
        for (j = i; e[j].kind != GK_END; j++) continue;
        if (j == i + 1 && e[i].kind == GK_CLASS) n_cls++, cls = e[i].arg, skip = i;
    }
    if (n_cls != 1 || n_alts < 2) return 1;
    uint32_t others, loop;
    int rc = rule_aux(p, &others);
    if (!rc) rc = rule_aux(p, &loop);
    for (uint32_t i = 0; !rc && i < p->r[g].n; i++)
        if (i != skip && i != skip + 1) rc = emit(p, others, p->r[g].e[i].kind, p->r[g].e[i].arg);
    if (!rc) rc = emit(p, loop, GK_RULE, others);
    if (!rc) rc = emit(p, loop, GK_STAR, cls);
    if (!rc) rc = emit(p, loop, GK_RULE, loop);
    if (!rc) rc = emit(p, loop, GK_END, 0);
    if (!rc) rc = emit(p, loop, GK_END, 0);
    if (!rc) rc = emit(p, r, GK_STAR, cls);
    if (!rc) rc = emit(p, r, GK_RULE, loop);
    return rc;
}

/* Replaces the item at r's elements [item, end) (one GK_CLASS of class cls, or cls < 0) by
 * m to n copies of it (n GBNF_NONE: no bound). */
static int repeat(parser *p, uint32_t r, uint32_t item, int64_t cls, uint32_t m, uint32_t n) {
    uint32_t len = p->r[r].n - item;
    if (!len) return 0; /* "" repeated is still "" */
    gram_elem *x = malloc(len * sizeof *x);
    if (!x) return nomem(p);
    memcpy(x, p->r[r].e + item, len * sizeof *x);
    p->r[r].n = item;
    p->n_elems -= len;
    int rc = 0;
    for (uint32_t i = 0; i < m && !rc; i++) rc = emit_run(p, r, x, len);
    int split = 1;
    if (!rc && n == GBNF_NONE && cls < 0 && len == 1 && x[0].kind == GK_RULE && p->r[x[0].arg].aux)
        if ((split = repeat_split_class(p, r, x[0].arg)) < 0) rc = split;
    if (!rc && n == GBNF_NONE) {
        if (split)
            rc = cls >= 0 ? emit(p, r, GK_STAR, (uint32_t)cls) : repeat_opt(p, r, x, len, 1, 1);
    } else if (!rc && n > m) rc = repeat_opt(p, r, x, len, n - m, 0);
    free(x);
    return rc;
}

static int parse_count(parser *p, uint32_t *v) {
    size_t at = p->pos;
    uint64_t x = 0;
    if (!(peek(p) >= '0' && peek(p) <= '9')) return syntax(p, at, "expecting a number");
    for (; peek(p) >= '0' && peek(p) <= '9'; p->pos++)
        if ((x = x * 10 + (uint64_t)(peek(p) - '0')) > GRAMMAR_MAX_REPEAT)
            return syntax(p, at, "repetition count above %d (GRAMMAR_MAX_REPEAT)",
                          GRAMMAR_MAX_REPEAT);
    *v = (uint32_t)x;
    return 0;
}

/* The postfix at pos: * + ? {m} {m,} {m,n}. */
static int parse_postfix(parser *p, int nested, uint32_t *m, uint32_t *n) {
    size_t at = p->pos;
    char c = p->s[p->pos++];
    *m = c == '+';
    *n = c == '?' ? 1 : GBNF_NONE;
    if (c != '{') return 0;
    p->pos = skip_space(p, p->pos, nested);
    int rc = parse_count(p, m);
    if (rc) return rc;
    p->pos = skip_space(p, p->pos, nested);
    if (peek(p) == '}') *n = *m;
    else if (peek(p) == ',') {
        p->pos = skip_space(p, p->pos + 1, nested);
        if (peek(p) >= '0' && peek(p) <= '9' && (rc = parse_count(p, n))) return rc;
        p->pos = skip_space(p, p->pos, nested);
        if (peek(p) != '}') return syntax(p, p->pos, "expecting '}'");
    } else return syntax(p, p->pos, "expecting ',' or '}'");
    p->pos++;
    if (*n < *m) return syntax(p, at, "repetition {%u,%u} has its bounds backwards", *m, *n);
    return 0;
}

/* ---- sequences, alternatives, rules -------------------------------------------------- */

static int parse_alternates(parser *p, uint32_t r, int nested, int depth);

/* ( alternates ): a rule of its own. */
static int parse_group(parser *p, uint32_t r, int depth) {
    size_t at = p->pos;
    if (depth >= GBNF_MAX_DEPTH)
        return syntax(p, at, "groups nested more than %d deep", GBNF_MAX_DEPTH);
    uint32_t g;
    int rc = rule_aux(p, &g);
    if (rc) return rc;
    p->pos = skip_space(p, p->pos + 1, 1);
    if ((rc = parse_alternates(p, g, 1, depth + 1))) return rc;
    if (peek(p) != ')') return syntax(p, p->pos, "expecting ')'");
    p->pos++;
    return emit(p, r, GK_RULE, g);
}

/* Items and their postfixes up to '|', ')', the end, or (top level) a newline. */
static int parse_sequence(parser *p, uint32_t r, int nested, int depth) {
    uint32_t item = GBNF_NONE; /* where the last item starts in r's elements */
    int64_t cls = -1;          /* its class when it is one GK_CLASS */
    for (int rc = 0;; p->pos = skip_space(p, p->pos, nested)) {
        char c = peek(p);
        uint32_t before = p->r[r].n, id = 0, m, n;
        size_t at = p->pos;
        if (p->pos >= p->n) return 0;
        if (c == '"') rc = parse_literal(p, r), cls = -1;
        else if (c == '[' || c == '.') {
            rc = parse_class(p, &id);
            if (!rc) rc = emit(p, r, GK_CLASS, id);
            cls = id;
        } else if (is_word(c)) {
            while (p->pos < p->n && is_word(p->s[p->pos])) p->pos++;
            rc = rule_lookup(p, p->s + at, p->pos - at, at, &id);
            if (!rc) rc = emit(p, r, GK_RULE, id);
            cls = -1;
        } else if (c == '(') rc = parse_group(p, r, depth), cls = -1;
        else if (c == '*' || c == '+' || c == '?' || c == '{') {
            if (item == GBNF_NONE) return syntax(p, at, "'%c' follows nothing to repeat", c);
            rc = parse_postfix(p, nested, &m, &n);
            if (!rc) rc = repeat(p, r, item, cls, m, n);
            cls = -1;
            before = item;
        } else return 0;
        if (rc) return rc;
        item = before;
    }
}

static int parse_alternates(parser *p, uint32_t r, int nested, int depth) {
    for (;;) {
        int rc = parse_sequence(p, r, nested, depth);
        if (!rc) rc = emit(p, r, GK_END, 0);
        if (rc) return rc;
        if (!nested) { /* a line starting with '|' continues the rule */
            size_t q = skip_space(p, p->pos, 1);
            if (q < p->n && p->s[q] == '|') p->pos = q;
        }
        if (peek(p) != '|') return 0;
        p->pos = skip_space(p, p->pos + 1, 1);
    }
}

/* name ::= alternates, then a newline or the end. */
static int parse_rule(parser *p) {
    size_t at = p->pos;
    if (!is_word(peek(p))) return syntax(p, at, "expecting a rule name");
    while (p->pos < p->n && is_word(p->s[p->pos])) p->pos++;
    uint32_t r;
    int rc = rule_lookup(p, p->s + at, p->pos - at, at, &r);
    if (rc) return rc;
    if (p->r[r].defined) return syntax(p, at, "rule '%s' is defined twice", p->r[r].name);
    p->r[r].defined = 1;
    p->cur = r;
    p->n_aux = 0;
    p->pos = skip_space(p, p->pos, 0);
    if (p->n - p->pos < 3 || memcmp(p->s + p->pos, "::=", 3))
        return syntax(p, p->pos, "expecting '::=' after '%s'", p->r[r].name);
    p->pos = skip_space(p, p->pos + 3, 1);
    if ((rc = parse_alternates(p, r, 0, 0))) return rc;
    char c = peek(p);
    if (c == '\r') p->pos += p->pos + 1 < p->n && p->s[p->pos + 1] == '\n' ? 2 : 1;
    else if (c == '\n') p->pos++;
    else if (p->pos < p->n) {
        if (c == ')') return syntax(p, p->pos, "')' closes no group");
        return syntax(p, p->pos, "expecting a newline or the end of the text");
    }
    p->pos = skip_space(p, p->pos, 1);
    return 0;
}

/* Every mentioned rule defined, and a root; its index in *root. */
static int check_defined(parser *p, uint32_t *root) {
    for (uint32_t i = 0; i < p->n_rules; i++)
        if (!p->r[i].aux && !p->r[i].defined)
            return syntax(p, p->r[i].ref_at, "rule '%s' is not defined", p->r[i].name);
    if (p->names.cap) {
        name_key k = {"root", 4};
        uint32_t *slot = htab_find(p, &p->names, fnv("root", 4), name_eq, &k);
        if (*slot) {
            *root = *slot - 1;
            return 0;
        }
    }
    return strata_err_set(p->err, STRATA_EINVALID, "grammar: no rule named 'root'");
}

/* ---- the flat grammar and its checks ------------------------------------------------- */

void grammar_free(grammar *g) {
    if (!g) return;
    for (uint32_t i = 0; g->names && i < g->n_rules; i++) free(g->names[i]);
    free(g->names), free(g->elems), free(g->alts), free(g->rules);
    free(g->ranges), free(g->class_off), free(g);
}

/* Moves the parsed rules and classes into a new grammar. */
static int flatten(parser *p, uint32_t root, grammar **out) {
    grammar *g = calloc(1, sizeof *g);
    if (g) {
        g->elems = malloc((p->n_elems + 1) * sizeof *g->elems);
        g->alts = malloc((p->n_alts + 1) * sizeof *g->alts);
        g->rules = malloc((p->n_rules + 1) * sizeof *g->rules);
        g->names = calloc(p->n_rules + 1, sizeof *g->names);
    }
    if (!g || !g->elems || !g->alts || !g->rules || !g->names) {
        grammar_free(g);
        return nomem(p);
    }
    for (uint32_t i = 0; i < p->n_rules; i++) {
        g->rules[i] = g->n_alts;
        for (uint32_t j = 0; j < p->r[i].n; j++) {
            if (j == 0 || p->r[i].e[j - 1].kind == GK_END) g->alts[g->n_alts++] = g->n_elems;
            g->elems[g->n_elems++] = p->r[i].e[j];
        }
        g->names[i] = p->r[i].name;
        p->r[i].name = NULL;
    }
    g->rules[p->n_rules] = g->n_alts;
    g->n_rules = p->n_rules;
    g->ranges = p->ranges, p->ranges = NULL;
    g->class_off = p->class_off, p->class_off = NULL;
    g->n_classes = p->n_classes;
    g->root = root;
    *out = g;
    return 0;
}

/* Marks in set[] each rule that derives the empty text (empty_only) or any finite text:
 * the least fixpoint, by counting each alternative's rule references not yet marked. */
static int derive(parser *p, const grammar *g, int empty_only, uint8_t *set) {
    uint32_t *need = malloc((g->n_alts + 1) * sizeof *need);
    uint32_t *alt_rule = malloc((g->n_alts + 1) * sizeof *alt_rule);
    uint32_t *head = calloc(g->n_rules + 2, sizeof *head);
    uint32_t *occ = malloc((g->n_elems + 1) * sizeof *occ);
    uint32_t *queue = malloc((g->n_rules + 1) * sizeof *queue), nq = 0;
    if (!need || !alt_rule || !head || !occ || !queue) {
        free(need), free(alt_rule), free(head), free(occ), free(queue);
        return nomem(p);
    }
    for (uint32_t r = 0; r < g->n_rules; r++)
        for (uint32_t a = g->rules[r]; a < g->rules[r + 1]; a++) alt_rule[a] = r;
    for (uint32_t a = 0; a < g->n_alts; a++) { /* count, then place, the live references */
        uint32_t k = 0, dead = 0;
        for (const gram_elem *e = g->elems + g->alts[a]; e->kind != GK_END; e++)
            if (e->kind == GK_RULE) k++;
            else dead |= empty_only && e->kind != GK_STAR;
        need[a] = dead ? UINT32_MAX : k;
        for (const gram_elem *e = g->elems + g->alts[a]; e->kind != GK_END; e++)
            if (e->kind == GK_RULE && need[a] != UINT32_MAX) head[e->arg + 2]++;
    }
    for (uint32_t t = 0; t < g->n_rules; t++) head[t + 2] += head[t + 1];
    for (uint32_t a = 0; a < g->n_alts; a++)
        for (const gram_elem *e = g->elems + g->alts[a]; e->kind != GK_END; e++)
            if (e->kind == GK_RULE && need[a] != UINT32_MAX) occ[head[e->arg + 1]++] = a;
    memset(set, 0, g->n_rules);
    for (uint32_t a = 0; a < g->n_alts; a++)
        if (!need[a] && !set[alt_rule[a]]) set[alt_rule[a]] = 1, queue[nq++] = alt_rule[a];
    while (nq) {
        uint32_t t = queue[--nq];
        for (uint32_t i = head[t]; i < head[t + 1]; i++) {
            uint32_t a = occ[i], r = alt_rule[a];
            if (--need[a] == 0 && !set[r]) set[r] = 1, queue[nq++] = r;
        }
    }
    free(need), free(alt_rule), free(head), free(occ), free(queue);
    return 0;
}

/* The next rule r can call before reading a byte, from its cursor on; GBNF_NONE at the end. */
static uint32_t left_next(const grammar *g, const uint8_t *nullable, uint32_t r, uint32_t *cur,
                          uint8_t *blocked) {
    uint32_t end = g->rules[r + 1] < g->n_alts ? g->alts[g->rules[r + 1]] : g->n_elems;
    while (cur[r] < end) {
        gram_elem e = g->elems[cur[r]++];
        if (e.kind == GK_END) blocked[r] = 0;
        else if (blocked[r] || e.kind == GK_STAR) continue;
        else if (e.kind != GK_RULE) blocked[r] = 1;
        else {
            blocked[r] = !nullable[e.arg];
            return e.arg;
        }
    }
    return GBNF_NONE;
}

/* A left-recursive rule: a cycle of calls made before reading a byte (depth-first search
 * with an explicit stack). Names the first user rule on the cycle. */
static int check_left(parser *p, const grammar *g, const uint8_t *nullable) {
    uint32_t n = g->n_rules, *cur = malloc((n + 1) * sizeof *cur);
    uint32_t *stack = malloc((n + 1) * sizeof *stack);
    uint8_t *color = calloc(n + 1, 1), *blocked = calloc(n + 1, 1);
    int rc = 0;
    if (!cur || !stack || !color || !blocked) rc = nomem(p);
    for (uint32_t r = 0; r < n; r++)
        if (cur) cur[r] = g->alts[g->rules[r]];
    for (uint32_t s = 0; s < n && !rc; s++) {
        if (color[s]) continue;
        uint32_t top = 0;
        stack[top++] = s, color[s] = 1;
        while (top && !rc) {
            uint32_t r = stack[top - 1], t = left_next(g, nullable, r, cur, blocked);
            if (t == GBNF_NONE) color[r] = 2, top--;
            else if (!color[t]) stack[top++] = t, color[t] = 1;
            else if (color[t] == 1) {
                uint32_t k = top;
                while (stack[k - 1] != t) k--;
                uint32_t name = t;
                for (uint32_t i = top; i-- > k - 1;)
                    if (!p->r[stack[i]].aux) name = stack[i];
                const char *why = p->r[name].aux ? "repeats something that can match no text"
                                                 : "can reach itself before reading any text";
                rc = strata_err_set(p->err, STRATA_EINVALID,
                                    "grammar: rule '%s' is left-recursive: it %s",
                                    g->names[p->r[name].owner], why);
            }
        }
    }
    free(cur), free(stack), free(color), free(blocked);
    return rc;
}

static int check_grammar(parser *p, const grammar *g) {
    uint8_t *set = malloc(g->n_rules + 1);
    if (!set) return nomem(p);
    int rc = derive(p, g, 1, set);
    if (!rc) rc = check_left(p, g, set);
    if (!rc) rc = derive(p, g, 0, set);
    for (uint32_t pass = 0; pass < 2 && !rc; pass++) /* user rules first */
        for (uint32_t r = 0; r < g->n_rules && !rc; r++)
            if (!set[r] && p->r[r].aux == pass)
                rc = strata_err_set(p->err, STRATA_EINVALID,
                                    "grammar: rule '%s' can derive no finite text", g->names[r]);
    free(set);
    return rc;
}

static void parser_free(parser *p) {
    for (uint32_t i = 0; i < p->n_rules; i++) free(p->r[i].name), free(p->r[i].e);
    free(p->r), free(p->names.slot), free(p->classes.slot), free(p->tmp);
    free(p->ranges), free(p->class_off), free(p->class_hash);
}

int grammar_parse(grammar **out, const char *text, size_t len, strata_err *err) {
    if (len > GRAMMAR_MAX_TEXT)
        return strata_err_set(err, STRATA_EINVALID,
                              "grammar: the text is %zu bytes, above %u (GRAMMAR_MAX_TEXT)", len,
                              GRAMMAR_MAX_TEXT);
    parser p = {.s = text ? text : "", .n = text ? len : 0, .err = err};
    grammar *g = NULL;
    uint32_t root = 0;
    int rc = 0;
    p.class_off = calloc(1, sizeof *p.class_off);
    p.cap_off = 1;
    if (!p.class_off) rc = nomem(&p);
    p.pos = skip_space(&p, 0, 1);
    while (!rc && p.pos < p.n) rc = parse_rule(&p);
    if (!rc) rc = check_defined(&p, &root);
    if (!rc) rc = flatten(&p, root, &g);
    if (!rc) rc = check_grammar(&p, g);
    parser_free(&p);
    if (rc) {
        grammar_free(g);
        return rc;
    }
    *out = g;
    return 0;
}
