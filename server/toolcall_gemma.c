/* toolcall_gemma.c - Gemma 4's form of a tool call.
 *
 * google/gemma-4-31B-it's template renders a call as <|tool_call>call:NAME{ARGS}<tool_call|>:
 * ARGS are key:value pairs joined by ',' with bare keys, each value written by its
 * format_argument macro: a string between two <|"|> tokens (nothing escaped inside), true /
 * false, a number as Python prints it, {key:value,...} and [value,...] nested. This reads
 * that back into JSON. Keys quoted with <|"|> (the macro's escape_keys) and whitespace
 * between the pieces are accepted too. A bare value that is not true / false, null / None
 * or a JSON number (an enum member the model left unquoted, say) stays a string; one that
 * holds '<', '{' or '[' makes the call malformed. */
#include <string.h>

#include "server/toolcall_internal.h"

#define QUOTE "<|\"|>"
#define DEPTH_MAX 64

static int done_or(int rc) { return rc ? rc : TOOLCALL_DONE; }

static int g_value(toolcall_cur *c, strbuf *b, int depth);

/* From the opening <|"|> to the next one. */
static int g_string(toolcall_cur *c, strbuf *b) {
    size_t start = c->i + strlen(QUOTE), from = toolcall_cur_resume(c, start);
    const char *p = memmem(c->s + from, c->n - from, QUOTE, strlen(QUOTE));
    if (!p) return toolcall_cur_wait(c, start, toolcall_cur_tail(c, from, strlen(QUOTE)));
    size_t end = (size_t)(p - c->s);
    int rc = b ? toolcall_json_add_string(b, c->s + start, end - start) : 0;
    c->i = end + strlen(QUOTE);
    return done_or(rc);
}

static int ieq(const char *s, size_t n, const char *lit) {
    if (strlen(lit) != n) return 0;
    for (size_t k = 0; k < n; k++)
        if ((s[k] | 0x20) != lit[k]) return 0;
    return 1;
}

/* A value without quotes, up to the ',', '}' or ']' after it. */
static int g_bare(toolcall_cur *c, strbuf *b) {
    size_t start = c->i, n;
    int integral;
    for (; c->i < c->n; c->i++) {
        char ch = c->s[c->i];
        if (ch == ',' || ch == '}' || ch == ']') break;
        if (ch == '<' || ch == '{' || ch == '[') return TOOLCALL_BAD;
    }
    if (c->i >= c->n) return toolcall_cur_out(c);
    n = c->i - start;
    const char *t = toolcall_json_trim(c->s + start, &n);
    if (!n) return TOOLCALL_BAD;
    if (!b) return TOOLCALL_DONE;
    if (ieq(t, n, "true")) return done_or(strbuf_adds(b, "true"));
    if (ieq(t, n, "false")) return done_or(strbuf_adds(b, "false"));
    if (ieq(t, n, "null") || ieq(t, n, "none")) return done_or(strbuf_adds(b, "null"));
    if (toolcall_json_number(t, n, &integral)) return done_or(strbuf_add(b, t, n));
    return done_or(toolcall_json_add_string(b, t, n));
}

static int g_key(toolcall_cur *c, strbuf *b) {
    size_t at, len;
    int q = toolcall_cur_at(c, c->i, QUOTE), r;
    if (q == 1) return g_string(c, b);
    if (q < 0) return toolcall_cur_out(c);
    if ((r = toolcall_cur_name(c, ':', &at, &len)) != TOOLCALL_DONE) return r;
    return b ? done_or(toolcall_json_add_string(b, c->s + at, len)) : TOOLCALL_DONE;
}

/* {key:value,...} or [value,...], from its opening bracket. */
static int g_container(toolcall_cur *c, strbuf *b, int depth) {
    char close = c->s[c->i] == '{' ? '}' : ']';
    int r, first = 1;
    if (depth >= DEPTH_MAX) return TOOLCALL_BAD;
    if (b && (r = strbuf_addc(b, c->s[c->i]))) return r;
    c->i++;
    toolcall_cur_ws(c);
    if (c->i < c->n && c->s[c->i] == close) {
        c->i++;
        return b ? done_or(strbuf_addc(b, close)) : TOOLCALL_DONE;
    }
    for (;;) {
        if (b && !first && (r = strbuf_addc(b, ','))) return r;
        first = 0;
        if (close == '}') {
            if ((r = g_key(c, b)) != TOOLCALL_DONE) return r;
            toolcall_cur_ws(c);
            if ((r = toolcall_cur_lit(c, ":")) != TOOLCALL_DONE) return r;
            if (b && (r = strbuf_addc(b, ':'))) return r;
            toolcall_cur_ws(c);
        }
        if ((r = g_value(c, b, depth + 1)) != TOOLCALL_DONE) return r;
        toolcall_cur_ws(c);
        if (c->i >= c->n) return toolcall_cur_out(c);
        char ch = c->s[c->i++];
        if (ch == close) return b ? done_or(strbuf_addc(b, close)) : TOOLCALL_DONE;
        if (ch != ',') return TOOLCALL_BAD;
        toolcall_cur_ws(c);
    }
}

static int g_value(toolcall_cur *c, strbuf *b, int depth) {
    if (c->i >= c->n) return toolcall_cur_out(c);
    if (c->s[c->i] == '{' || c->s[c->i] == '[') return g_container(c, b, depth);
    int q = toolcall_cur_at(c, c->i, QUOTE);
    if (q == 1) return g_string(c, b);
    if (q < 0) return toolcall_cur_out(c);
    return g_bare(c, b);
}

int toolcall_gemma_parse(toolcall_cur *c, strbuf *name, strbuf *args) {
    size_t at, len;
    int r;
    if ((r = toolcall_cur_lit(c, "<|tool_call>")) != TOOLCALL_DONE) return r;
    if ((r = toolcall_cur_lit(c, "call:")) != TOOLCALL_DONE) return r;
    if ((r = toolcall_cur_name(c, '{', &at, &len)) != TOOLCALL_DONE) return r;
    if (name && (r = strbuf_add(name, c->s + at, len))) return r;
    if ((r = g_container(c, args, 0)) != TOOLCALL_DONE) return r;
    toolcall_cur_ws(c);
    return toolcall_cur_lit(c, "<tool_call|>");
}
