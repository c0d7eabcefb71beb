/* toolcall.c - the streaming split of a choice's content into text and tool calls: the
 * format's choice, the parser, the deltas and the call ids. The two forms' grammars are
 * in toolcall_xml.c and toolcall_gemma.c.
 *
 * The parser keeps the text it has not settled (pend): a piece that may be the start of
 * an opening marker, a call still arriving, the whitespace after a call. Each feed scans
 * pend from its start, so what it settles depends only on the text, never on where the
 * stream was cut (the forms' parsers answer MORE until a longer text cannot change their
 * answer). A call still arriving is parsed again at every feed, which costs little: a
 * parse that only checks allocates nothing, and the search for the end of a long open
 * value goes on from where the previous feed's stopped (toolcall_cur's hint). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "server/toolcall.h"
#include "server/toolcall_internal.h"

struct toolcall_parser {
    toolcall_format fmt;
    const json_t *tools; /* borrowed */
    strbuf pend;         /* text received and not settled yet */
    /* what a failed feed restores */
    struct toolcall_state {
        int after_call; /* the last thing settled was a call: pend's leading blanks wait */
        int n_calls;
        uint64_t rng;              /* splitmix64 state for the ids */
        int done;                  /* the final feed came */
        size_t hint_at, hint_from; /* the held call's toolcall_cur hint */
    } st;
};

static const char *const format_names[] = {
#define TOOLCALL_FORMAT_NAME(id, name) name,
    TOOLCALL_FORMAT_LIST(TOOLCALL_FORMAT_NAME)
#undef TOOLCALL_FORMAT_NAME
};
#define N_FORMATS (int)(sizeof format_names / sizeof *format_names)

const char *toolcall_format_name(toolcall_format f) {
    return (int)f >= 0 && (int)f < N_FORMATS ? format_names[f] : "unknown";
}

static int has_prefix(const char *s, const char *prefix) {
    return !strncmp(s, prefix, strlen(prefix));
}

/* "auto": the template shows the form it renders an assistant's calls in; without one
 * (or a template that renders neither), the family the model was trained in. */
static toolcall_format format_auto(const char *model_type, const char *template_src) {
    if (template_src && strstr(template_src, "<|tool_call>")) return TOOLCALL_GEMMA4;
    if (template_src && strstr(template_src, "<function=")) return TOOLCALL_XML;
    if (model_type && (has_prefix(model_type, "qwen3_5") || has_prefix(model_type, "nemotron_h")))
        return TOOLCALL_XML;
    if (model_type && has_prefix(model_type, "gemma4")) return TOOLCALL_GEMMA4;
    return TOOLCALL_NONE;
}

int toolcall_format_pick(const char *name, const char *model_type, const char *template_src,
                         toolcall_format *out, strata_err *err) {
    if (!name || !strcmp(name, "auto")) {
        *out = format_auto(model_type, template_src);
        return 0;
    }
    if (!strcmp(name, "qwen3_coder")) {
        *out = TOOLCALL_XML;
        return 0;
    }
    for (int f = 0; f < N_FORMATS; f++) {
        if (!strcmp(name, format_names[f])) {
            *out = (toolcall_format)f;
            return 0;
        }
    }
    return strata_err_set(err, STRATA_EINVALID,
                          "tool-call format \"%s\" is not one of auto, xml (or qwen3_coder), "
                          "gemma4, none",
                          name);
}

static uint64_t seed(const void *salt) {
    uint64_t x = 0;
    if (getrandom(&x, sizeof x, GRND_NONBLOCK) != (ssize_t)sizeof x) {
        /* ids need to be unique within a parser, which any seed gives; the clock and
         * the parser's address keep them unlikely to repeat across requests */
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        x = (uint64_t)ts.tv_nsec * 0x9E3779B97F4A7C15ull ^ (uint64_t)ts.tv_sec ^
            (uint64_t)(uintptr_t)salt;
    }
    return x;
}

int toolcall_parser_create(toolcall_parser **out, toolcall_format f, const json_t *tools,
                           strata_err *err) {
    if ((int)f < 0 || (int)f >= N_FORMATS)
        return strata_err_set(err, STRATA_EINVALID, "tool-call format %d is unknown", (int)f);
    toolcall_parser *p = calloc(1, sizeof *p);
    if (!p) return strata_err_set(err, STRATA_ENOMEM, "tool-call parser: out of memory");
    p->fmt = f;
    p->tools = tools;
    p->st.rng = seed(p);
    *out = p;
    return 0;
}

void toolcall_parser_free(toolcall_parser *p) {
    if (!p) return;
    strbuf_free(&p->pend);
    free(p);
}

int toolcall_count(const toolcall_parser *p) { return p->st.n_calls; }

void toolcall_delta_init(toolcall_delta *d) { memset(d, 0, sizeof *d); }

void toolcall_delta_clear(toolcall_delta *d) {
    strbuf_reset(&d->content);
    for (int k = 0; k < d->n_calls; k++) {
        free(d->calls[k].name);
        free(d->calls[k].arguments);
    }
    d->n_calls = 0;
}

void toolcall_delta_deinit(toolcall_delta *d) {
    toolcall_delta_clear(d);
    strbuf_free(&d->content);
    free(d->calls);
    toolcall_delta_init(d);
}

/* ---- cursor helpers the forms share (toolcall_internal.h) ---- */

static int is_blank(char ch) { return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\n'; }

int toolcall_cur_at(const toolcall_cur *c, size_t at, const char *lit) {
    size_t k = strlen(lit), have = at < c->n ? c->n - at : 0;
    if (have >= k) return !memcmp(c->s + at, lit, k);
    return memcmp(c->s + at, lit, have) ? 0 : -1;
}

int toolcall_cur_lit(toolcall_cur *c, const char *lit) {
    int r = toolcall_cur_at(c, c->i, lit);
    if (r == 1) {
        c->i += strlen(lit);
        return TOOLCALL_DONE;
    }
    return r < 0 ? toolcall_cur_out(c) : TOOLCALL_BAD;
}

void toolcall_cur_ws(toolcall_cur *c) {
    while (c->i < c->n && is_blank(c->s[c->i])) c->i++;
}

int toolcall_cur_name(toolcall_cur *c, char stop, size_t *start, size_t *len) {
    size_t b = c->i;
    for (; c->i < c->n && c->i - b <= TOOLCALL_NAME_MAX; c->i++) {
        unsigned char ch = (unsigned char)c->s[c->i];
        if (ch == (unsigned char)stop) {
            if (c->i == b) return TOOLCALL_BAD;
            *start = b;
            *len = c->i - b;
            return TOOLCALL_DONE;
        }
        if (ch <= ' ' || strchr("<>{}[]\"'=,:", ch)) return TOOLCALL_BAD;
    }
    return c->i - b > TOOLCALL_NAME_MAX ? TOOLCALL_BAD : toolcall_cur_out(c);
}

/* ---- the feed ---- */

static const char *open_marker(toolcall_format f) {
    return f == TOOLCALL_XML ? "<tool_call>" : "<|tool_call>";
}

/* Distinct for each of the 2^64 draws of a state: splitmix64 is a bijection of a counter. */
static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* "call_" + 24 alphanumerics. The first 11 are one draw written in base 62 (62^11 > 2^64,
 * so no two draws share them): unique within the parser. */
static void make_id(char *id, uint64_t *rng) {
    static const char digits[] = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    uint64_t a = splitmix64(rng), b = splitmix64(rng);
    memcpy(id, "call_", 5);
    for (int k = 0; k < 11; k++, a /= 62) id[5 + k] = digits[a % 62];
    for (int k = 0; k < 13; k++, b /= 62) id[16 + k] = digits[b % 62];
    id[29] = 0;
}

static int parse_call(const toolcall_parser *p, toolcall_cur *c, strbuf *name, strbuf *args) {
    return p->fmt == TOOLCALL_XML ? toolcall_xml_parse(c, p->tools, name, args)
                                  : toolcall_gemma_parse(c, name, args);
}

/* The call opening at s: TOOLCALL_MORE or _BAD, or _DONE with the call appended to out
 * and *used its length; a negative STRATA_E* when memory runs out. */
static int take_call(toolcall_parser *p, const char *s, size_t n, int final, toolcall_delta *out,
                     size_t *used) {
    /* a held call is parsed again from its start at the next feed: the hint is its own */
    toolcall_cur c = {s, n, 0, final, p->st.hint_at, p->st.hint_from};
    strbuf name = {0}, args = {0};
    int r = parse_call(p, &c, NULL, NULL);
    p->st.hint_at = r == TOOLCALL_MORE ? c.hint_at : 0;
    p->st.hint_from = r == TOOLCALL_MORE ? c.hint_from : 0;
    if (r != TOOLCALL_DONE) return r;
    c.i = 0;
    if ((r = parse_call(p, &c, &name, &args)) != TOOLCALL_DONE) goto fail;
    /* a key given twice (a parameter written twice, a Gemma object's repeated key) is no
     * argument object a client can send back: its next turn's body would be refused */
    if (toolcall_json_dup_keys(args.p, args.len)) {
        strbuf_free(&name);
        strbuf_free(&args);
        return TOOLCALL_BAD;
    }
    if (out->n_calls == out->cap_calls) {
        int cap = out->cap_calls ? 2 * out->cap_calls : 4;
        toolcall_call *calls = realloc(out->calls, (size_t)cap * sizeof *calls);
        if (!calls) {
            r = STRATA_ENOMEM;
            goto fail;
        }
        out->calls = calls;
        out->cap_calls = cap;
    }
    toolcall_call *call = &out->calls[out->n_calls++];
    make_id(call->id, &p->st.rng);
    call->name = name.p; /* a heap strbuf's block: the delta frees it with free() */
    call->arguments = args.p;
    p->st.n_calls++;
    *used = c.i;
    return TOOLCALL_DONE;
fail:
    strbuf_free(&name);
    strbuf_free(&args);
    return r < 0 ? r : STRATA_ESTATE; /* the second pass answers as the first did */
}

/* Appends s[0..n) to the content; nothing (no allocation either) when n is 0. */
static int emit(toolcall_delta *out, const char *s, size_t n) {
    return n ? strbuf_add(&out->content, s, n) : 0;
}

/* The longest end of s[0..n) that starts the marker m without being all of it. */
static size_t marker_tail(const char *s, size_t n, const char *m) {
    size_t k = strlen(m) - 1;
    for (k = k < n ? k : n; k > 0; k--)
        if (!memcmp(s + n - k, m, k)) return k;
    return 0;
}

/* Settles what pend allows; *pos_out: how much of pend is settled. */
static int scan(toolcall_parser *p, int final, toolcall_delta *out, size_t *pos_out) {
    const char *s = p->pend.p, *open = open_marker(p->fmt);
    size_t n = p->pend.len, pos = 0, ol = strlen(open), used = 0;
    int r = 0;
    *pos_out = 0;
    if (!n) return 0;
    for (;;) {
        size_t at;
        if (p->st.after_call) {
            /* blanks after a call are the template's separator when a call or the end
             * follows them, the start of the text that follows otherwise */
            for (at = pos; at < n && is_blank(s[at]);) at++;
            if (at == n) {
                if (final) pos = n;
                break;
            }
            toolcall_cur c = {s, n, at, final, 0, 0};
            int m = toolcall_cur_at(&c, at, open);
            if (m < 0 && !final) break;
            if (m != 1) {
                p->st.after_call = 0;
                continue;
            }
        } else {
            const char *k = pos < n ? memmem(s + pos, n - pos, open, ol) : NULL;
            size_t end =
                k ? (size_t)(k - s) : n - (final ? 0 : marker_tail(s + pos, n - pos, open));
            if ((r = emit(out, s + pos, end - pos))) return r;
            pos = end;
            if (!k) break;
            at = end;
        }
        r = take_call(p, s + at, n - at, final, out, &used);
        if (r < 0) return r;
        if (r == TOOLCALL_MORE) break;
        if (r == TOOLCALL_DONE) {
            pos = at + used;
            p->st.after_call = 1;
            continue;
        }
        /* malformed: its marker (and any blanks before it) are text; look on after it */
        if ((r = emit(out, s + pos, at + ol - pos))) return r;
        pos = at + ol;
        p->st.after_call = 0;
    }
    *pos_out = pos;
    return 0;
}

int toolcall_feed(toolcall_parser *p, const char *text, size_t len, int final, toolcall_delta *out,
                  strata_err *err) {
    struct toolcall_state saved = p->st;
    size_t pend_len = p->pend.len, content_len = out->content.len, pos = 0;
    int n_calls = out->n_calls, r = 0;
    if (p->st.done)
        return strata_err_set(err, STRATA_ESTATE, "tool-call parser: fed after the final piece");
    if (len && (r = strbuf_add(&p->pend, text, len))) goto fail;
    if (p->fmt == TOOLCALL_NONE) {
        if ((r = emit(out, p->pend.p, p->pend.len))) goto fail;
        pos = p->pend.len;
    } else if ((r = scan(p, final, out, &pos))) {
        goto fail;
    }
    if (pos) {
        memmove(p->pend.p, p->pend.p + pos, p->pend.len - pos);
        p->pend.len -= pos;
        p->pend.p[p->pend.len] = 0;
    }
    p->st.done = final;
    return 0;
fail:
    /* back to how the call found them, so the caller may retry */
    p->st = saved;
    p->pend.len = pend_len;
    if (p->pend.p) p->pend.p[pend_len] = 0;
    for (int k = n_calls; k < out->n_calls; k++) {
        free(out->calls[k].name);
        free(out->calls[k].arguments);
    }
    out->n_calls = n_calls;
    out->content.len = content_len;
    if (out->content.p) out->content.p[content_len] = 0;
    return strata_err_set(err, r, "tool-call parser: %s", strata_err_name(r));
}
