/* schema_gbnf_value.c - how the JSON Schema compiler writes values as GBNF: the text
 * helpers (literals, JSON text, repetitions), the shared rules written once per walk
 * (whitespace, string, number, the formats, any value), and the string and number keywords
 * (length bounds, "pattern" made safe inside a JSON string, "format", exact digit ranges for
 * minimum / maximum). Nothing here compiles a subschema: these are the walk's leaves, which
 * schema_gbnf.c calls for a "type" and schema_gbnf_object.c for keys and separators. */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/utf8.h"
#include "engine/constrain/constrain.h"
#include "server/schema_gbnf_internal.h"

#define SG_SC "[^\"\\\\\\x00-\\x1F]" /* a string character needing no escape */
#define SG_HX "[0-9a-fA-F]"
#define SG_ELC "[A-Za-z0-9!#\\x24\\x25&'*+/=?\\x5E_\\x60{|}\\x7E\\x2D]" /* email local part */

static const struct sg_prim {
    const char *suffix, *body;
    unsigned deps;
} SG_PRIMS[P_COUNT] = {
    [P_WS] = {"ws", "( \" \" | \"\\n\" [ \\t]{0,20} )?", 0},
    /* \u escapes: never 0000 (jansson refuses NUL) nor a lone surrogate */
    [P_U4] = {"u4",
              "[1-9a-cA-Ce-fE-F] " SG_HX "{3} | \"0\" ( [1-9a-fA-F] " SG_HX "{2} | \"0\" "
              "( [1-9a-fA-F] " SG_HX " | \"0\" [1-9a-fA-F] ) ) | [dD] [0-7] " SG_HX "{2} | "
              "[dD] [89abAB] " SG_HX "{2} \"\\\\u\" [dD] [c-fC-F] " SG_HX "{2}",
              0},
    [P_ESC] = {"esc", "\"\\\\\" ( [\"\\\\/bfnrt] | \"u\" @-u4 )", 1u << P_U4},
    /* the body is one class star between escapes: the matcher's fast path */
    [P_STR] = {"str", "\"\\\"\" " SG_SC "* ( @-esc " SG_SC "* )* \"\\\"\"", 1u << P_ESC},
    [P_CHR] = {"chr", SG_SC " | @-esc", 1u << P_ESC},
    [P_FRAC] = {"frac", "\".\" [0-9]{1,20}", 0},
    [P_EXP] = {"exp", "[eE] [-+]? [0-9]{1,2}", 0},
    [P_NUM] = {"num", "\"-\"? ( \"0\" | [1-9] [0-9]{0,17} ) @-frac? @-exp?",
               1u << P_FRAC | 1u << P_EXP},
    [P_INT] = {"int", "\"0\" | \"-\"? [1-9] [0-9]{0,17}", 0},
    /* a real calendar day (what Python's date.fromisoformat and jsonschema's format checker
     * accept): year 0001..9999, the month's days, February 29 in leap years only */
    [P_DATE] = {"date",
                "( [0-9]{2} ( \"0\" [48] | [2468] [048] | [13579] [26] ) | ( \"0\" [48] | "
                "[2468] [048] | [13579] [26] ) \"00\" ) \"-02-29\" | ( [1-9] [0-9]{3} | \"0\" "
                "( [1-9] [0-9]{2} | \"0\" ( [1-9] [0-9] | \"0\" [1-9] ) ) ) \"-\" ( \"02-\" "
                "( \"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8] ) | ( \"0\" [13578] | \"1\" [02] ) "
                "\"-\" ( \"0\" [1-9] | [12] [0-9] | \"3\" [01] ) | ( \"0\" [469] | \"11\" ) "
                "\"-\" ( \"0\" [1-9] | [12] [0-9] | \"30\" ) )",
                0},
    /* no leap second: checkers that parse times refuse :60 */
    [P_TIME] = {"time",
                "( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" [0-5] [0-9] "
                "( \".\" [0-9]{1,9} )? ( [zZ] | [-+] ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] "
                "[0-9] )",
                0},
    [P_DT] = {"date-time", "@-date [tT] @-time", 1u << P_DATE | 1u << P_TIME},
    [P_UUID] = {"uuid",
                SG_HX "{8} \"-\" " SG_HX "{4} \"-\" " SG_HX "{4} \"-\" " SG_HX "{4} \"-\" " SG_HX
                      "{12}",
                0},
    [P_LABEL] = {"label", "[A-Za-z0-9] ( [A-Za-z0-9\\x2D]* [A-Za-z0-9] )?", 0},
    [P_EMAIL] = {"email", SG_ELC "+ ( \".\" " SG_ELC "+ )* \"\\x40\" @-label ( \".\" @-label )+",
                 1u << P_LABEL},
    [P_SCALAR] = {"scalar", "@-str | @-num | \"true\" | \"false\" | \"null\"",
                  1u << P_STR | 1u << P_NUM},
};

static const struct sg_format {
    const char *name;
    int prim;
} SG_FORMATS[] = {
    {"date-time", P_DT}, {"date", P_DATE}, {"time", P_TIME}, {"uuid", P_UUID}, {"email", P_EMAIL}};

/* ---- text ------------------------------------------------------------------------------ */

/* s NULL: a buffer that failed to grow (c->oom is set already) */
void sg_put(sg *c, strbuf *b, const char *s) {
    if (s && strbuf_adds(b, s)) c->oom = 1;
}

void sg_putf(sg *c, strbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap); /* rule lines repeat long rule names: size first */
    va_end(ap);
    if (n < 0 || strbuf_reserve(b, (size_t)n)) {
        c->oom = 1;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

/* One code point in GBNF, plain ASCII: printable characters stay, the rest are escapes (in a
 * class also the characters that mean something there). */
static void put_cp(sg *c, strbuf *b, uint32_t cp, int in_class) {
    if (cp >= 0x20 && cp < 0x7F && cp != '"' && cp != '\\' &&
        !(in_class && (cp == '[' || cp == ']' || cp == '^' || cp == '-'))) {
        if (strbuf_addc(b, (char)cp)) c->oom = 1;
    } else if (cp == '"' || cp == '\\') {
        sg_putf(c, b, "\\%c", (char)cp);
    } else if (cp < 0x100) sg_putf(c, b, "\\x%02X", (unsigned)cp);
    else if (cp < 0x10000) sg_putf(c, b, "\\u%04X", (unsigned)cp);
    else sg_putf(c, b, "\\U%08X", (unsigned)cp);
}

/* A GBNF literal for the UTF-8 text s[0..n). */
void sg_put_lit(sg *c, strbuf *b, const char *s, size_t n) {
    sg_put(c, b, "\"");
    for (size_t i = 0; i < n;) {
        int len = unicode_utf8_check((const uint8_t *)s + i, n - i);
        uint32_t cp = (uint8_t)s[i];
        if (len > 0) cp = unicode_utf8_decode((const uint8_t *)s + i, &len);
        else len = 1;
        put_cp(c, b, cp, 0);
        i += (size_t)len;
    }
    sg_put(c, b, "\"");
}

/* A JSON string as jansson writes it. */
void sg_put_jstr(sg *c, strbuf *b, const char *s, size_t n) {
    sg_put(c, b, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        const char *e = ch == '"'    ? "\\\""
                        : ch == '\\' ? "\\\\"
                        : ch == '\b' ? "\\b"
                        : ch == '\f' ? "\\f"
                        : ch == '\n' ? "\\n"
                        : ch == '\r' ? "\\r"
                        : ch == '\t' ? "\\t"
                                     : NULL;
        if (e) sg_put(c, b, e);
        else if (ch < 0x20) sg_putf(c, b, "\\u%04X", ch);
        else if (strbuf_addc(b, (char)ch)) c->oom = 1;
    }
    sg_put(c, b, "\"");
}

/* v as compact JSON: keys in their order, reals in the shortest form that reads back. */
void sg_put_json(sg *c, strbuf *b, const json_t *v) {
    if (json_is_string(v)) return sg_put_jstr(c, b, json_string_value(v), json_string_length(v));
    if (json_is_integer(v)) return sg_putf(c, b, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
    if (json_is_real(v)) {
        double d = json_real_value(v);
        char tmp[40];
        for (int p = 1; p <= 17; p++) {
            snprintf(tmp, sizeof tmp, "%.*g", p, d);
            if (strtod(tmp, NULL) == d) break;
        }
        return sg_put(c, b, tmp);
    }
    if (json_is_array(v)) {
        sg_put(c, b, "[");
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i) sg_put(c, b, ",");
            sg_put_json(c, b, json_array_get(v, i));
        }
        return sg_put(c, b, "]");
    }
    if (json_is_object(v)) {
        const char *k;
        json_t *x;
        int first = 1;
        sg_put(c, b, "{");
        json_object_foreach((json_t *)v, k, x) {
            if (!first) sg_put(c, b, ",");
            first = 0;
            sg_put_jstr(c, b, k, strlen(k));
            sg_put(c, b, ":");
            sg_put_json(c, b, x);
        }
        return sg_put(c, b, "}");
    }
    sg_put(c, b, json_is_true(v) ? "true" : json_is_false(v) ? "false" : "null");
}

/* x{lo,hi} as a GBNF suffix (hi < 0: unbounded). */
void sg_put_rep(sg *c, strbuf *b, long lo, long hi) {
    if (hi < 0) {
        if (lo == 0) sg_put(c, b, "*");
        else if (lo == 1) sg_put(c, b, "+");
        else sg_putf(c, b, "{%ld,}", lo);
    } else if (lo != 1 || hi != 1) {
        if (lo == hi) sg_putf(c, b, "{%ld}", lo);
        else sg_putf(c, b, "{%ld,%ld}", lo, hi);
    }
}

/* ---- shared rules ---------------------------------------------------------------------- */

static void sg_prim_write(sg *c, int id) {
    if (c->prims & 1u << id) return;
    c->prims |= 1u << id;
    for (int d = 0; d < P_COUNT; d++)
        if (SG_PRIMS[id].deps & 1u << d) sg_prim_write(c, d);
    sg_putf(c, &c->out, "%s-%s ::= ", c->name, SG_PRIMS[id].suffix);
    for (const char *s = SG_PRIMS[id].body; *s; s++) {
        if (*s == '@') sg_put(c, &c->out, c->name);
        else if (strbuf_addc(&c->out, *s)) c->oom = 1;
    }
    sg_put(c, &c->out, "\n");
}

/* Appends the shared rule's name to b (writing the rule first if needed). */
void sg_prim(sg *c, strbuf *b, int id) {
    sg_prim_write(c, id);
    sg_putf(c, b, "%s-%s", c->name, SG_PRIMS[id].suffix);
}

/* Any JSON value (returns 1 or an error), nesting at most SG_ANY_DEPTH deep: one rule per level. */
int sg_any(sg *c, strbuf *term) {
    if (!c->any) {
        c->any = 1;
        sg_prim_write(c, P_WS);
        sg_prim_write(c, P_SCALAR);
        const char *n = c->name;
        for (int d = 0; d < SG_ANY_DEPTH; d++)
            sg_putf(
                c, &c->out,
                "%s-any-%d ::= \"{\" %s-ws ( %s-str %s-ws \":\" %s-ws %s-any-%d ( %s-ws \",\" "
                "%s-ws "
                "%s-str %s-ws \":\" %s-ws %s-any-%d )* %s-ws )? \"}\" | \"[\" %s-ws ( %s-any-%d "
                "( %s-ws \",\" %s-ws %s-any-%d )* %s-ws )? \"]\" | %s-scalar\n",
                n, d, n, n, n, n, n, d + 1, n, n, n, n, n, n, d + 1, n, n, n, d + 1, n, n, n, d + 1,
                n, n);
        sg_putf(c, &c->out, "%s-any-%d ::= %s-scalar\n", c->name, SG_ANY_DEPTH, c->name);
    }
    sg_putf(c, term, "%s-any-0", c->name);
    int rc = sg_written(c);
    return rc ? rc : 1;
}

/* ---- strings --------------------------------------------------------------------------- */

/* A class's code points as inclusive ranges (pairs); room for a complement's extra one. */
typedef struct sg_ranges {
    uint32_t r[2 * 258];
    int n;
} sg_ranges;

static int sg_range_cmp(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static void sg_range_add(sg_ranges *set, uint32_t lo, uint32_t hi) {
    set->r[2 * set->n] = lo;
    set->r[2 * set->n + 1] = hi;
    set->n++;
}

/* Reads one GBNF character at *p (an escape or UTF-8). */
static uint32_t sg_gbnf_char(const char **p, const char *end) {
    const char *s = *p;
    if (*s != '\\' || s + 1 >= end) {
        int len = unicode_utf8_check((const uint8_t *)s, (size_t)(end - s));
        uint32_t cp = (uint8_t)*s;
        if (len > 0) cp = unicode_utf8_decode((const uint8_t *)s, &len);
        else len = 1;
        *p = s + len;
        return cp;
    }
    int digits = s[1] == 'x' ? 2 : s[1] == 'u' ? 4 : s[1] == 'U' ? 8 : 0;
    if (digits && s + 2 + digits <= end) {
        char hex[9];
        memcpy(hex, s + 2, (size_t)digits);
        hex[digits] = 0;
        *p = s + 2 + digits;
        return (uint32_t)strtoul(hex, NULL, 16);
    }
    *p = s + 2;
    return s[1] == 'n' ? '\n' : s[1] == 't' ? '\t' : s[1] == 'r' ? '\r' : (uint8_t)s[1];
}

/* A class of the regex's output, or `.`, rewritten to what may stand unescaped in a JSON
 * string: no '"', '\\', control character (nor surrogate, which UTF-8 cannot write). */
static int sg_safe_class(sg *c, strbuf *b, const char **p, const char *end) {
    static const uint32_t ok[] = {0x20, 0x21, 0x23, 0x5B, 0x5D, 0xD7FF, 0xE000, 0x10FFFF};
    sg_ranges in = {.n = 0}, set = {.n = 0};
    int neg = **p == '.'; /* any character: the complement of none */
    const char *s = *p + 1;
    if (**p == '[') {
        if (s < end && *s == '^') neg = 1, s++;
        while (s < end && *s != ']') {
            uint32_t lo = sg_gbnf_char(&s, end), hi = lo;
            if (s + 1 < end && *s == '-' && s[1] != ']') s++, hi = sg_gbnf_char(&s, end);
            if (in.n == 256) return sg_fail(c, STRATA_EUNSUPPORTED, "\"pattern\" class too large");
            sg_range_add(&in, lo, hi);
        }
        s += s < end;
    }
    *p = s;
    qsort(in.r, (size_t)in.n, 2 * sizeof(uint32_t), sg_range_cmp);
    if (neg) {
        uint32_t next = 0;
        for (int i = 0; i < in.n; i++) {
            if (in.r[2 * i] > next) sg_range_add(&set, next, in.r[2 * i] - 1);
            if (in.r[2 * i + 1] + 1 > next) next = in.r[2 * i + 1] + 1;
        }
        if (next <= 0x10FFFF) sg_range_add(&set, next, 0x10FFFF);
    } else set = in;
    int any = 0;
    sg_put(c, b, "[");
    for (int i = 0; i < set.n; i++)
        for (int a = 0; a < 4; a++) {
            uint32_t lo = set.r[2 * i] > ok[2 * a] ? set.r[2 * i] : ok[2 * a];
            uint32_t hi = set.r[2 * i + 1] < ok[2 * a + 1] ? set.r[2 * i + 1] : ok[2 * a + 1];
            if (lo > hi) continue;
            put_cp(c, b, lo, 1);
            if (hi > lo) sg_put(c, b, "-"), put_cp(c, b, hi, 1);
            any = 1;
        }
    sg_put(c, b, "]");
    if (!any)
        return sg_fail(c, STRATA_EUNSUPPORTED,
                       "\"pattern\" has a class of only characters JSON must escape");
    return 0;
}

/* A literal of the regex's output, its characters written as the JSON string text for them. */
static int sg_safe_lit(sg *c, strbuf *b, const char **p, const char *end) {
    const char *s = *p + 1;
    sg_put(c, b, "\"");
    while (s < end && *s != '"') {
        uint32_t cp = sg_gbnf_char(&s, end);
        char esc[8];
        if (cp == 0) return sg_fail(c, STRATA_EUNSUPPORTED, "\"pattern\" matches NUL");
        if (cp >= 0x20 && cp != '"' && cp != '\\') {
            put_cp(c, b, cp, 0);
            continue;
        }
        const char *short_esc = "\"\"\\\\\bb\ff\nn\rr\tt", *e = strchr(short_esc, (int)cp);
        if (e && ((e - short_esc) & 1) == 0) snprintf(esc, sizeof esc, "\\%c", e[1]);
        else snprintf(esc, sizeof esc, "\\u%04X", (unsigned)cp);
        for (const char *x = esc; *x; x++) put_cp(c, b, (uint8_t)*x, 0);
    }
    sg_put(c, b, "\"");
    *p = s + (s < end);
    return 0;
}

/* Copies the regex compiler's rules into the grammar, its classes and literals made safe
 * inside a JSON string (schema_gbnf.h: the pattern matches the raw content). */
static int sg_safe_rules(sg *c, const strbuf *in) {
    const char *s = in->p ? in->p : "", *end = s + in->len;
    while (s < end) {
        int rc = 0;
        if (*s == '"') rc = sg_safe_lit(c, &c->out, &s, end);
        else if (*s == '[' || *s == '.') rc = sg_safe_class(c, &c->out, &s, end);
        else if (*s == '#') {
            while (s < end && *s != '\n') s++;
        } else {
            if (strbuf_addc(&c->out, *s++)) c->oom = 1;
        }
        if (rc) return rc;
    }
    return sg_written(c);
}

static int sg_pattern(sg *c, const json_t *pat, strbuf *term) {
    strbuf rules = {0};
    strata_err rerr = {0};
    char name[128];
    snprintf(name, sizeof name, "%s-%d", c->name, ++c->n_aux);
    const char *re = json_string_value(pat);
    int rc = constrain_regex_gbnf(re, json_string_length(pat), name, &rules, &rerr);
    if (rc) rc = sg_fail(c, rc, "\"pattern\" (%s)", rerr.msg);
    else rc = sg_safe_rules(c, &rules);
    strbuf_free(&rules);
    if (rc) return rc;
    sg_putf(c, term, "( \"\\\"\" %s \"\\\"\" )", name);
    return 1;
}

int sg_string(sg *c, const json_t *s, strbuf *term) {
    const json_t *pat = json_object_get(s, "pattern"), *fmt = json_object_get(s, "format");
    long long lo, hi;
    int rc;
    if ((rc = sg_count(c, s, "minLength", 0, &lo)) || (rc = sg_count(c, s, "maxLength", -1, &hi)))
        return rc;
    if (pat && !json_is_string(pat))
        return sg_fail(c, STRATA_EINVALID, "\"pattern\" must be a string");
    if (fmt && !json_is_string(fmt))
        return sg_fail(c, STRATA_EINVALID, "\"format\" must be a string");
    int prim = -1;
    for (size_t i = 0; fmt && i < sizeof SG_FORMATS / sizeof *SG_FORMATS; i++)
        if (!strcmp(json_string_value(fmt), SG_FORMATS[i].name)) prim = SG_FORMATS[i].prim;
    int lens = lo > 0 || hi >= 0;
    if ((pat != NULL) + (prim >= 0) + lens > 1)
        return sg_fail(c, STRATA_EUNSUPPORTED,
                       "more than one of \"pattern\", \"format\" and minLength/maxLength");
    if (pat) return sg_pattern(c, pat, term);
    if (prim >= 0) {
        sg_put(c, term, "( \"\\\"\" ");
        sg_prim(c, term, prim);
        sg_put(c, term, " \"\\\"\" )");
        return 1;
    }
    if (!lens) return sg_prim(c, term, P_STR), 1;
    if (lo > SG_MAX_LEN || hi > SG_MAX_LEN)
        return sg_fail(c, STRATA_EUNSUPPORTED, "minLength/maxLength above %d", SG_MAX_LEN);
    if (hi >= 0 && lo > hi) return 0;
    sg_put(c, term, "( \"\\\"\" ");
    if (hi != 0) {
        sg_prim(c, term, P_CHR);
        sg_put_rep(c, term, (long)lo, (long)hi);
    }
    sg_put(c, term, " \"\\\"\" )");
    return 1;
}

/* ---- numbers --------------------------------------------------------------------------- */

typedef struct sg_bound {
    long long v;
    int on, excl;
} sg_bound;

static const char SG_ZEROS[] = "000000000000000000", SG_NINES[] = "999999999999999999";

/* The digits of every x..y (both n digits, leading zeros allowed, x <= y), as one element. */
static void sg_digits(sg *c, strbuf *b, const char *x, const char *y, int n) {
    if (x[0] == y[0]) {
        sg_putf(c, b, "\"%c\"", x[0]);
        if (n > 1) sg_put(c, b, " "), sg_digits(c, b, x + 1, y + 1, n - 1);
        return;
    }
    int lo_full = !strncmp(x + 1, SG_ZEROS, (size_t)n - 1);
    int hi_full = !strncmp(y + 1, SG_NINES, (size_t)n - 1);
    char a = x[0], z = y[0];
    const char *sep = "";
    sg_put(c, b, "( ");
    if (!lo_full) {
        sg_putf(c, b, "\"%c\" ", a++);
        sg_digits(c, b, x + 1, SG_NINES, n - 1);
        sep = " | ";
    }
    if (!hi_full) z--;
    if (a <= z) {
        sg_putf(c, b, "%s[%c-%c]", sep, a, z);
        if (n > 1) sg_put(c, b, " [0-9]"), sg_put_rep(c, b, n - 1, n - 1);
        sep = " | ";
    }
    if (!hi_full) {
        sg_putf(c, b, "%s\"%c\" ", sep, y[0]);
        sg_digits(c, b, SG_ZEROS, y + 1, n - 1);
    }
    sg_put(c, b, " )");
}

/* The decimal text, without leading zeros, of every integer in [lo, hi] (0 <= lo <= hi). A run
 * of whole lengths (every n-digit number) is one repetition: [1-9] [0-9]{a,b}. */
static void sg_uint_range(sg *c, strbuf *b, long long lo, long long hi) {
    char x[24], y[24];
    int nlo = snprintf(x, sizeof x, "%lld", lo), nhi = snprintf(y, sizeof y, "%lld", hi);
    long long p[20] = {1};
    for (int i = 1; i < 19; i++) p[i] = p[i - 1] * 10;
#define SG_LO(n) (lo > ((n) == 1 ? 0 : p[(n)-1]) ? lo : ((n) == 1 ? 0 : p[(n)-1]))
#define SG_HI(n) (hi < p[n] - 1 ? hi : p[n] - 1)
#define SG_WHOLE(n) (SG_HI(n) == p[n] - 1 && (SG_LO(n) == p[(n)-1] || SG_LO(n) == 0))
    sg_put(c, b, "( ");
    for (int n = nlo; n <= nhi; n++) {
        if (n > nlo) sg_put(c, b, " | ");
        int m = n;
        while (m <= nhi && SG_WHOLE(m)) m++;
        if (m - n >= 2) { /* lengths n..m-1, every number of each */
            if (SG_LO(n) == 0) sg_put(c, b, "\"0\" | ");
            sg_putf(c, b, "[1-9] [0-9]{%d,%d}", n - 1, m - 2);
            n = m - 1;
            continue;
        }
        snprintf(x, sizeof x, "%lld", SG_LO(n));
        snprintf(y, sizeof y, "%lld", SG_HI(n));
        sg_digits(c, b, x, y, n);
    }
    sg_put(c, b, " )");
#undef SG_LO
#undef SG_HI
#undef SG_WHOLE
}

/* One alternative: sign, the integer parts [lo, hi], then the fraction kind (0: none,
 * 1: any, 2: only zeros, 3: not only zeros). */
static void sg_piece(sg *c, strbuf *alts, const char *sign, long long lo, long long hi, int frac) {
    if (lo > hi || lo > SG_INT_MAX) return;
    if (hi > SG_INT_MAX) hi = SG_INT_MAX;
    if (alts->len) sg_put(c, alts, " | ");
    sg_put(c, alts, sign);
    sg_uint_range(c, alts, lo, hi);
    if (frac == 1) sg_put(c, alts, " "), sg_prim(c, alts, P_FRAC), sg_put(c, alts, "?");
    if (frac == 2) sg_put(c, alts, " ( \".\" \"0\"{1,20} )?");
    if (frac == 3) sg_put(c, alts, " \".\" \"0\"{0,19} [1-9] [0-9]{0,19}");
}

/* The magnitudes w >= 0 (with sign in front) with lo <= w (lo < w) and w <= hi (w < hi):
 * integer parts strictly inside take any fraction, the bounds' own a nonzero (exclusive
 * lower) or zero (inclusive upper) one. Integers: the bounds are inclusive already. */
static void sg_side(sg *c, strbuf *alts, const char *sign, sg_bound lo, sg_bound hi, int real) {
    long long a = lo.on ? lo.v + lo.excl : 0, z = hi.on ? hi.v : SG_INT_MAX;
    if (!real) return sg_piece(c, alts, sign, a, z, 0);
    sg_piece(c, alts, sign, a, hi.on ? z - 1 : z, 1);
    if (lo.on && lo.excl && (!hi.on || lo.v < hi.v)) sg_piece(c, alts, sign, lo.v, lo.v, 3);
    if (hi.on && !hi.excl && (!lo.on || hi.v >= a)) sg_piece(c, alts, sign, hi.v, hi.v, 2);
}

/* One bound keyword. For integers it is rounded inward and made inclusive; for numbers it must
 * be an integer (kept exclusive or not). The tighter of minimum and exclusiveMinimum (maximum
 * and exclusiveMaximum) wins. Absent: *b untouched. */
static int sg_bound_read(sg *c, const json_t *s, const char *key, int upper, int excl, int integer,
                         sg_bound *b) {
    const json_t *v = json_object_get(s, key);
    if (!v || json_is_boolean(v)) return 0;
    if (!json_is_number(v)) return sg_fail(c, STRATA_EINVALID, "\"%s\" must be a number", key);
    if (json_is_true(json_object_get(s, upper ? "exclusiveMaximum" : "exclusiveMinimum")))
        excl = 1; /* draft 4: a boolean beside the bound */
    double d = json_number_value(v);
    if (d > 2e18) d = 2e18;
    if (d < -2e18) d = -2e18;
    long long x;
    if (json_is_integer(v) && d == json_number_value(v)) x = json_integer_value(v);
    else if (integer) {
        double r = upper ? floor(d) : ceil(d);
        if (excl && r == d) r += upper ? -1 : 1;
        x = (long long)r, excl = 0;
    } else if (d != floor(d)) {
        return sg_fail(c, STRATA_EUNSUPPORTED, "number bound \"%s\" that is not an integer", key);
    } else x = (long long)d;
    if (integer && excl) x += upper ? -1 : 1, excl = 0;
    if (!b->on || (upper ? x < b->v || (x == b->v && excl) : x > b->v || (x == b->v && excl)))
        *b = (sg_bound){x, 1, excl};
    return 0;
}

int sg_numeric(sg *c, const json_t *s, int integer, strbuf *term) {
    sg_bound lo = {0}, hi = {0};
    int rc;
    if ((rc = sg_bound_read(c, s, "minimum", 0, 0, integer, &lo)) ||
        (rc = sg_bound_read(c, s, "exclusiveMinimum", 0, 1, integer, &lo)) ||
        (rc = sg_bound_read(c, s, "maximum", 1, 0, integer, &hi)) ||
        (rc = sg_bound_read(c, s, "exclusiveMaximum", 1, 1, integer, &hi)))
        return rc;
    if (!lo.on && !hi.on) return sg_prim(c, term, integer ? P_INT : P_NUM), 1;
    strbuf alts = {0};
    /* w = v on the non-negative side, w = -v on the negative one */
    if (!hi.on || hi.v > 0 || (hi.v == 0 && !hi.excl)) {
        sg_bound l = lo.on && (lo.v > 0 || (lo.v == 0 && lo.excl)) ? lo : (sg_bound){0};
        sg_side(c, &alts, "", l, hi, !integer);
    }
    if (!lo.on || lo.v < 0) {
        sg_bound h = lo.on ? (sg_bound){-lo.v, 1, lo.excl} : (sg_bound){0};
        sg_bound l = {0};
        if (hi.on && (hi.v < 0 || (hi.v == 0 && hi.excl))) l = (sg_bound){-hi.v, 1, hi.excl};
        if (integer && (!l.on || l.v < 1)) l = (sg_bound){1, 1, 0}; /* never "-0" */
        sg_side(c, &alts, "\"-\" ", l, h, !integer);
    }
    int prod = alts.len > 0;
    if (prod) sg_put(c, term, "( "), sg_put(c, term, alts.p), sg_put(c, term, " )");
    strbuf_free(&alts);
    return c->oom ? sg_nomem(c) : prod;
}
