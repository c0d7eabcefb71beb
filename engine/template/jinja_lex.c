/* jinja_lex.c - Jinja2 3.1's lexer, as transformers configures it.
 *
 * Mirrors jinja2/lexer.py rule for rule rather than reinventing it, because every
 * chat template's whitespace depends on these details: newlines are normalised and
 * one trailing newline dropped (keep_trailing_newline=False); "-" strips all
 * whitespace beside a tag; trim_blocks eats one newline after a block or comment
 * tag; lstrip_blocks removes spaces before a block or comment tag that starts a
 * line ("+" disables either); end delimiters count only when brackets balance;
 * string literals are decoded as Python's unicode-escape codec does. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/template/jinja_internal.h"

typedef struct lexer {
    jarena *a;
    const char *s;
    size_t len, pos;
    int line;
    int line_starting;
    jtok *toks;
    size_t n, cap;
    char balance[256]; /* expected closing brackets */
    int nbal;
    strata_err *err;
} lexer;

static int lex_fail(lexer *L, int line, const char *fmt, const char *arg) {
    char msg[200];
    snprintf(msg, sizeof msg, fmt, arg);
    return strata_err_set(L->err, STRATA_EFORMAT, "chat template line %d: %s", line, msg);
}

static jtok *push(lexer *L, int type, int line) {
    if (L->n == L->cap) {
        size_t cap = L->cap ? L->cap * 2 : 256;
        jtok *nt = jinja_arena_alloc(L->a, cap * sizeof *nt);
        if (!nt) return NULL;
        if (L->n) memcpy(nt, L->toks, L->n * sizeof *nt);
        L->toks = nt;
        L->cap = cap;
    }
    jtok *t = &L->toks[L->n++];
    memset(t, 0, sizeof *t);
    t->type = (uint8_t)type;
    t->line = line;
    return t;
}

static int count_nl(const char *s, size_t n) {
    int k = 0;
    for (size_t i = 0; i < n; i++) k += s[i] == '\n';
    return k;
}

/* Length of the Python-whitespace run (\s) starting at i. */
static size_t ws_run(const char *s, size_t len, size_t i) {
    size_t j = i;
    while (j < len) {
        size_t k = j;
        uint32_t cp = jinja_utf8_next(s, len, &k);
        if (!unicode_py_isspace(cp)) break;
        j = k;
    }
    return j - i;
}

/* Start of the trailing Python-whitespace run of s[0..n) (str.rstrip). */
static size_t rstrip_at(const char *s, size_t n) {
    size_t end = n;
    while (end > 0) {
        size_t st = end - 1;
        while (st > 0 && ((unsigned char)s[st] & 0xC0) == 0x80) st--;
        size_t k = st;
        if (!unicode_py_isspace(jinja_utf8_next(s, n, &k))) break;
        end = st;
    }
    return end;
}

static int starts(const lexer *L, size_t i, const char *lit) {
    size_t n = strlen(lit);
    return i + n <= L->len && !memcmp(L->s + i, lit, n);
}

/* Emits text before a tag, applying "-" or lstrip_blocks. sign: '-', '+' or 0. */
static int emit_data(lexer *L, size_t from, size_t to, char sign, int lstrip_ok) {
    const char *text = L->s + from;
    size_t n = to - from;
    int stripped_nl = 0;
    if (sign == '-') {
        size_t keep = rstrip_at(text, n);
        stripped_nl = count_nl(text + keep, n - keep);
        n = keep;
    } else if (sign != '+' && lstrip_ok) {
        size_t l_pos = n;
        while (l_pos > 0 && text[l_pos - 1] != '\n') l_pos--;
        if ((l_pos > 0 || L->line_starting) && l_pos < n && ws_run(text, n, l_pos) == n - l_pos)
            n = l_pos;
    }
    if (n) {
        jtok *t = push(L, JT_DATA, L->line);
        if (!t) return STRATA_ENOMEM;
        t->s = jinja_arena_strndup(L->a, text, n);
        if (!t->s) return STRATA_ENOMEM;
        t->len = n;
    }
    L->line += count_nl(text, n) + stripped_nl;
    return 0;
}

/* Matches an end delimiter ("%}", "#}" or "}}") with its whitespace control at i:
 * "+X", "-X" plus following whitespace, or "X" plus one newline when trim. Returns
 * the match length or 0. */
static size_t match_end(const lexer *L, size_t i, const char *delim, int trim) {
    if (starts(L, i, "+") && starts(L, i + 1, delim) && delim[0] != '}') return 3;
    if (starts(L, i, "-") && starts(L, i + 1, delim)) return 3 + ws_run(L->s, L->len, i + 3);
    if (starts(L, i, delim)) return 2 + (trim && i + 2 < L->len && L->s[i + 2] == '\n');
    return 0;
}

static void advance(lexer *L, size_t to) {
    L->line += count_nl(L->s + L->pos, to - L->pos);
    L->line_starting = to > L->pos && L->s[to - 1] == '\n';
    L->pos = to;
}

/* Python's unicode-escape codec over a string literal body. */
static int unescape(lexer *L, int line, const char *s, size_t n, jtok *t) {
    char *out = jinja_arena_alloc(L->a, n * 4 + 1);
    if (!out) return STRATA_ENOMEM;
    size_t o = 0, i = 0;
    while (i < n) {
        unsigned char c = (unsigned char)s[i];
        if (c != '\\' || i + 1 >= n) {
            out[o++] = s[i++];
            continue;
        }
        unsigned char e = (unsigned char)s[i + 1];
        i += 2;
        uint32_t cp = 0;
        int digits = 0;
        switch (e) {
        case '\n': continue;
        case '\\': out[o++] = '\\'; continue;
        case '\'': out[o++] = '\''; continue;
        case '"': out[o++] = '"'; continue;
        case 'a': out[o++] = '\a'; continue;
        case 'b': out[o++] = '\b'; continue;
        case 'f': out[o++] = '\f'; continue;
        case 'n': out[o++] = '\n'; continue;
        case 'r': out[o++] = '\r'; continue;
        case 't': out[o++] = '\t'; continue;
        case 'v': out[o++] = '\v'; continue;
        case 'x': digits = 2; break;
        case 'u': digits = 4; break;
        case 'U': digits = 8; break;
        case 'N': return lex_fail(L, line, "%s", "\\N{...} escapes are not supported");
        default:
            if (e >= '0' && e <= '7') {
                cp = e - '0';
                for (int k = 0; k < 2 && i < n && s[i] >= '0' && s[i] <= '7'; k++)
                    cp = cp * 8 + (uint32_t)(s[i++] - '0');
                o += (size_t)jinja_utf8_put(out + o, cp);
                continue;
            }
            if (e >= 0x80) {
                /* backslashreplace turned the character into \xNN / \uNNNN / \UNNNNNNNN,
                 * whose own backslash the escaped backslash consumed. */
                size_t k = i - 1;
                uint32_t ch = jinja_utf8_next(s, n, &k);
                i = k;
                char tmp[16];
                int m = ch <= 0xFF     ? snprintf(tmp, sizeof tmp, "\\x%02x", ch)
                        : ch <= 0xFFFF ? snprintf(tmp, sizeof tmp, "\\u%04x", ch)
                                       : snprintf(tmp, sizeof tmp, "\\U%08x", ch);
                memcpy(out + o, tmp, (size_t)m);
                o += (size_t)m;
                continue;
            }
            out[o++] = '\\';
            out[o++] = (char)e;
            continue;
        }
        for (int k = 0; k < digits; k++, i++) {
            char h = i < n ? s[i] : 0;
            int v = h >= '0' && h <= '9'   ? h - '0'
                    : h >= 'a' && h <= 'f' ? h - 'a' + 10
                    : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                           : -1;
            if (v < 0) {
                const char *what = digits == 2   ? "truncated \\xXX escape"
                                   : digits == 4 ? "truncated \\uXXXX escape"
                                                 : "truncated \\UXXXXXXXX escape";
                return lex_fail(L, line, "%s", what);
            }
            cp = cp * 16 + (uint32_t)v;
        }
        if (cp > 0x10FFFF) return lex_fail(L, line, "%s", "illegal Unicode character");
        if (cp >= 0xD800 && cp <= 0xDFFF)
            return lex_fail(L, line, "%s", "lone surrogate escapes are not supported");
        o += (size_t)jinja_utf8_put(out + o, cp);
    }
    out[o] = 0;
    t->s = out;
    t->len = o;
    return 0;
}

static int is_digit(char c) { return c >= '0' && c <= '9'; }

/* float_re: (?<!\.)(\d+_)*\d+((\.(\d+_)*\d+)?e[+-]?(\d+_)*\d+|\.(\d+_)*\d+) */
static size_t digits_run(const lexer *L, size_t i) {
    size_t j = i;
    if (j >= L->len || !is_digit(L->s[j])) return 0;
    while (j < L->len &&
           (is_digit(L->s[j]) || (L->s[j] == '_' && j + 1 < L->len && is_digit(L->s[j + 1]))))
        j++;
    return j - i;
}

static size_t match_float(const lexer *L, size_t i) {
    if (i > 0 && L->s[i - 1] == '.') return 0;
    size_t d = digits_run(L, i);
    if (!d) return 0;
    size_t j = i + d, frac = 0;
    if (j < L->len && L->s[j] == '.' && (frac = digits_run(L, j + 1))) j += 1 + frac;
    if (j < L->len && (L->s[j] == 'e' || L->s[j] == 'E')) {
        size_t k = j + 1;
        if (k < L->len && (L->s[k] == '+' || L->s[k] == '-')) k++;
        size_t ed = digits_run(L, k);
        if (ed) return k + ed - i;
    }
    return frac ? j - i : 0;
}

static int lex_number(lexer *L, int line, size_t *i) {
    char buf[128];
    size_t n = match_float(L, *i), k = 0;
    if (n) {
        for (size_t j = 0; j < n && k < sizeof buf - 1; j++)
            if (L->s[*i + j] != '_') buf[k++] = L->s[*i + j];
        buf[k] = 0;
        jtok *t = push(L, JT_FLOAT, line);
        if (!t) return STRATA_ENOMEM;
        t->f = strtod(buf, NULL);
        *i += n;
        return 0;
    }
    /* integer_re: 0b.., 0o.., 0x.., [1-9](_?\d)*, 0(_?0)* */
    const char *s = L->s + *i;
    size_t rem = L->len - *i, j = 0;
    int base = 10;
    if (rem >= 3 && s[0] == '0' && strchr("bBoOxX", s[1])) {
        base = s[1] == 'b' || s[1] == 'B' ? 2 : s[1] == 'o' || s[1] == 'O' ? 8 : 16;
        size_t q = 2;
        while (q < rem) {
            size_t r = q + (s[q] == '_');
            if (r >= rem) break;
            char h = s[r];
            int v = h >= '0' && h <= '9'                 ? h - '0'
                    : (h | 32) >= 'a' && (h | 32) <= 'f' ? (h | 32) - 'a' + 10
                                                         : 99;
            if (v >= base) break;
            q = r + 1;
        }
        if (q > 2) j = q;
        else base = 10;
    }
    if (!j) {
        base = 10;
        if (s[0] == '0') {
            j = 1;
            while (j < rem && (s[j] == '0' || (s[j] == '_' && j + 1 < rem && s[j + 1] == '0'))) j++;
        } else {
            j = digits_run(L, *i);
        }
    }
    for (size_t q = base == 10 ? 0 : 2; q < j && k < sizeof buf - 1; q++)
        if (s[q] != '_') buf[k++] = s[q];
    buf[k] = 0;
    char *end;
    unsigned long long v = strtoull(buf, &end, base);
    if (k >= sizeof buf - 1 || v > (unsigned long long)INT64_MAX || (v == ~0ULL))
        return lex_fail(L, line, "%s", "integer literal too large");
    jtok *t = push(L, JT_INT, line);
    if (!t) return STRATA_ENOMEM;
    t->i = (int64_t)v;
    *i += j;
    return 0;
}

static const char *const ops2[] = {"//", "**", "==", "!=", ">=", "<="};
static const char ops1[] = "+-/*%~[](){}><=.:|,;";

/* Tokens inside {{ }} or {% %} up to the end delimiter. */
static int lex_tag(lexer *L, const char *delim, int trim, int end_type) {
    for (;;) {
        size_t i = L->pos;
        if (i >= L->len) return 0; /* the parser reports the unclosed tag */
        size_t m = L->nbal == 0 ? match_end(L, i, delim, trim) : 0;
        if (m) {
            if (!push(L, end_type, L->line)) return STRATA_ENOMEM;
            advance(L, i + m);
            return 0;
        }
        char c = L->s[i];
        size_t w = ws_run(L->s, L->len, i);
        if (w) {
            advance(L, i + w);
            continue;
        }
        int line = L->line;
        if (is_digit(c)) {
            JTRY(lex_number(L, line, &i));
            advance(L, i);
            continue;
        }
        if (c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
            size_t j = i;
            while (j < L->len && (L->s[j] == '_' || is_digit(L->s[j]) ||
                                  ((L->s[j] | 32) >= 'a' && (L->s[j] | 32) <= 'z')))
                j++;
            jtok *t = push(L, JT_NAME, line);
            if (!t || !(t->s = jinja_arena_strndup(L->a, L->s + i, j - i))) return STRATA_ENOMEM;
            t->len = j - i;
            advance(L, j);
            continue;
        }
        if (c == '\'' || c == '"') {
            size_t j = i + 1;
            while (j < L->len && L->s[j] != c) j += L->s[j] == '\\' ? 2 : 1;
            if (j >= L->len) {
                char ch[2] = {c, 0};
                return lex_fail(L, line, "unexpected char '%s'", ch);
            }
            jtok *t = push(L, JT_STRING, line);
            if (!t) return STRATA_ENOMEM;
            JTRY(unescape(L, line, L->s + i + 1, j - i - 1, t));
            advance(L, j + 1);
            continue;
        }
        jtok *t = NULL;
        for (size_t k = 0; k < sizeof ops2 / sizeof ops2[0]; k++) {
            if (starts(L, i, ops2[k])) {
                if (!(t = push(L, JT_OP, line))) return STRATA_ENOMEM;
                memcpy(t->op, ops2[k], 2);
                advance(L, i + 2);
                break;
            }
        }
        if (t) continue;
        if (c && strchr(ops1, c)) {
            if (c == '(' || c == '[' || c == '{') {
                if (L->nbal == (int)sizeof L->balance)
                    return lex_fail(L, line, "%s", "brackets nested too deeply");
                L->balance[L->nbal++] = c == '(' ? ')' : c == '[' ? ']' : '}';
            } else if (c == ')' || c == ']' || c == '}') {
                char ch[2] = {c, 0};
                if (L->nbal == 0) return lex_fail(L, line, "unexpected '%s'", ch);
                if (L->balance[--L->nbal] != c) return lex_fail(L, line, "unexpected '%s'", ch);
            }
            if (!(t = push(L, JT_OP, line))) return STRATA_ENOMEM;
            t->op[0] = c;
            advance(L, i + 1);
            continue;
        }
        size_t k = i;
        uint32_t cp = jinja_utf8_next(L->s, L->len, &k);
        char shown[8] = {0};
        jinja_utf8_put(shown, cp);
        return lex_fail(L, line, "unexpected char '%s'", shown);
    }
}

/* "{%[-+]?\s*raw\s*(-%}\s*|%})" at i: returns the match length or 0. */
static size_t match_raw(const lexer *L, size_t i, const char *word, int trim_end) {
    size_t j = i + 2;
    if (j < L->len && (L->s[j] == '-' || L->s[j] == '+')) j++;
    j += ws_run(L->s, L->len, j);
    size_t wl = strlen(word);
    if (!starts(L, j, word)) return 0;
    j += wl;
    j += ws_run(L->s, L->len, j);
    if (trim_end) {
        size_t m = match_end(L, j, "%}", 1);
        return m ? j + m - i : 0;
    }
    if (starts(L, j, "-%}")) return j + 3 + ws_run(L->s, L->len, j + 3) - i;
    if (starts(L, j, "%}")) return j + 2 - i;
    return 0;
}

static int lex_root(lexer *L) {
    while (L->pos < L->len) {
        size_t j = L->pos;
        const char *hit = NULL;
        while (j + 1 < L->len) {
            if (L->s[j] == '{' &&
                (L->s[j + 1] == '{' || L->s[j + 1] == '%' || L->s[j + 1] == '#')) {
                hit = L->s + j;
                break;
            }
            j++;
        }
        if (!hit) return emit_data(L, L->pos, L->len, 0, 0);
        char kind = hit[1];
        char sign = j + 2 < L->len && (hit[2] == '-' || hit[2] == '+') ? hit[2] : 0;
        size_t raw = kind == '%' ? match_raw(L, j, "raw", 0) : 0;
        JTRY(emit_data(L, L->pos, j, sign, kind != '{'));
        int line = L->line;
        size_t open = 2 + (sign != 0);
        if (raw) {
            L->line += count_nl(L->s + j, raw);
            L->line_starting = L->s[j + raw - 1] == '\n';
            L->pos = j + raw;
            size_t k = L->pos, m = 0;
            for (; k + 1 < L->len; k++)
                if (L->s[k] == '{' && L->s[k + 1] == '%' && (m = match_raw(L, k, "endraw", 1)))
                    break;
            if (!m) return lex_fail(L, line, "%s", "Missing end of raw directive");
            char esign = L->s[k + 2] == '-' || L->s[k + 2] == '+' ? L->s[k + 2] : 0;
            JTRY(emit_data(L, L->pos, k, esign, 1));
            L->pos = k;
            advance(L, k + m);
            continue;
        }
        L->pos = j + open;
        L->line_starting = 0;
        if (kind == '#') {
            size_t k = L->pos;
            while (k + 1 < L->len && !(L->s[k] == '#' && L->s[k + 1] == '}')) k++;
            if (k + 1 >= L->len) return lex_fail(L, line, "%s", "Missing end of comment tag");
            size_t end = k;
            if (k > L->pos && (L->s[k - 1] == '-' || L->s[k - 1] == '+')) end = k - 1;
            size_t m = match_end(L, end, "#}", 1);
            advance(L, end + m);
            continue;
        }
        if (!push(L, kind == '{' ? JT_VAR_BEGIN : JT_BLOCK_BEGIN, line)) return STRATA_ENOMEM;
        L->nbal = 0;
        JTRY(lex_tag(L, kind == '{' ? "}}" : "%}", kind == '%',
                     kind == '{' ? JT_VAR_END : JT_BLOCK_END));
    }
    return 0;
}

int jinja_lex_run(jtok **out, size_t *n, jarena *a, const char *src, size_t len, strata_err *err) {
    /* Normalise \r\n and \r to \n and drop one trailing newline, as tokeniter does. */
    char *s = jinja_arena_alloc(a, len + 1);
    if (!s) return strata_err_set(err, STRATA_ENOMEM, "out of memory lexing the chat template");
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            s[o++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n') i++;
        } else {
            s[o++] = src[i];
        }
    }
    if (o > 0 && s[o - 1] == '\n') o--;
    s[o] = 0;
    lexer L = {.a = a, .s = s, .len = o, .line = 1, .line_starting = 1, .err = err};
    int rc = lex_root(&L);
    if (rc == 0 && !push(&L, JT_EOF, L.line)) rc = STRATA_ENOMEM;
    if (rc == STRATA_ENOMEM)
        return strata_err_set(err, rc, "out of memory lexing the chat template");
    if (rc < 0) return rc;
    *out = L.toks;
    *n = L.n;
    return 0;
}
