/* tok_text.c - normalizers (spec 2.2) and pre-tokenizers (spec 2.3), written after HF
 * tokenizers' NormalizedString::split / replace / prepend so that pieces are
 * byte-identical, including its empty-piece and merge-behaviour rules. */
#include <stdlib.h>
#include <string.h>

#include "engine/text/tok_internal.h"
#include "engine/unicode/nfc.h"
#include "engine/base/utf8.h"

/* ---- pieces ---------------------------------------------------------------------- */

/* Registers n bytes already written at p->text.p + off as a piece. */
static int pieces_meta(tok_pieces *p, size_t off, size_t n, int first) {
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 64;
        size_t *o = realloc(p->off, cap * sizeof *o);
        if (o) p->off = o;
        size_t *len = realloc(p->len, cap * sizeof *len);
        if (len) p->len = len;
        uint8_t *fi = realloc(p->first, cap);
        if (fi) p->first = fi;
        if (!o || !len || !fi) return STRATA_ENOMEM;
        p->cap = cap;
    }
    p->off[p->n] = off;
    p->len[p->n] = n;
    p->first[p->n] = (uint8_t)first;
    p->n++;
    return 0;
}

int tok_pieces_add(tok_pieces *p, const char *s, size_t n, int first) {
    if (!n) return 0; /* HF drops empty splits */
    if (pieces_meta(p, p->text.len, n, first)) return STRATA_ENOMEM;
    return strbuf_add(&p->text, s, n);
}

void tok_pieces_clear(tok_pieces *p) {
    p->n = 0;
    p->text.len = 0;
}

void tok_pieces_free(tok_pieces *p) {
    strbuf_free(&p->text);
    free(p->off);
    free(p->len);
    free(p->first);
    memset(p, 0, sizeof *p);
}

/* ---- byte-level alphabet (spec 3.1) ----------------------------------------------- */

static uint32_t bytelevel_cp(uint8_t b) {
    if (b <= 0x20) return 0x100 + b;
    if (b >= 0x7F && b <= 0xA0) return 0x100 + 33 + (b - 0x7F);
    if (b == 0xAD) return 0x143;
    return b;
}

void tok_bytelevel_tables(uint32_t byte_to_cp[256], int16_t cp_to_byte[0x144]) {
    for (int i = 0; i < 0x144; i++) cp_to_byte[i] = -1;
    for (int b = 0; b < 256; b++) {
        byte_to_cp[b] = bytelevel_cp((uint8_t)b);
        cp_to_byte[byte_to_cp[b]] = (int16_t)b;
    }
}

/* ---- match lists ------------------------------------------------------------------- */

typedef struct seg {
    size_t st, e;
    int match;
} seg;

typedef struct segs {
    seg *v;
    size_t n, cap, prev;
} segs;

static int segs_push(segs *s, size_t st, size_t e, int match) {
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        seg *v = realloc(s->v, cap * sizeof *v);
        if (!v) return STRATA_ENOMEM;
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = (seg){st, e, match};
    return 0;
}

/* HF Pattern::find_matches: gaps and matches covering the whole input in order. */
static int on_match(void *ctx, size_t st, size_t e) {
    segs *s = ctx;
    if (s->prev != st && segs_push(s, s->prev, st, 0)) return STRATA_ENOMEM;
    if (segs_push(s, st, e, 1)) return STRATA_ENOMEM;
    s->prev = e;
    return 0;
}

static int find_segs(const tok_pattern *pat, const char *s, size_t n, OnigRegion *rg, segs *out,
                     strata_err *err) {
    out->n = 0;
    out->prev = 0;
    if (!n) return segs_push(out, 0, 0, 0);
    int r = tok_pattern_find(pat, s, n, rg, on_match, out, err);
    if (r) return r;
    if (out->prev != n) return segs_push(out, out->prev, n, 0);
    return 0;
}

/* NormalizedString::split with a behaviour, on piece s[0..n); results appended to dst. */
static int split_piece(segs *m, int behavior, int invert, const char *s, int first,
                       tok_pieces *dst) {
    if (invert)
        for (size_t i = 0; i < m->n; i++) m->v[i].match = !m->v[i].match;
    /* Each output entry: (st, e, remove). Reuse m->v in place where possible. */
    size_t k = 0;
    switch (behavior) {
    case TOK_SPLIT_ISOLATED:
        for (size_t i = 0; i < m->n; i++) m->v[i].match = 0;
        k = m->n;
        break;
    case TOK_SPLIT_REMOVED: k = m->n; break;
    case TOK_SPLIT_CONTIGUOUS: {
        int prev = 0;
        for (size_t i = 0; i < m->n; i++) {
            seg g = m->v[i];
            if (g.match == prev && k) m->v[k - 1].e = g.e;
            else m->v[k++] = (seg){g.st, g.e, 0};
            prev = g.match;
        }
        break;
    }
    case TOK_SPLIT_MERGED_PREV: {
        int prev = 0;
        for (size_t i = 0; i < m->n; i++) {
            seg g = m->v[i];
            if (g.match && !prev && k) m->v[k - 1].e = g.e;
            else m->v[k++] = (seg){g.st, g.e, 0};
            prev = g.match;
        }
        break;
    }
    case TOK_SPLIT_MERGED_NEXT: {
        /* Right to left, then reversed: a match is glued onto the following piece. */
        int prev = 0;
        size_t w = m->n;
        for (size_t i = m->n; i-- > 0;) {
            seg g = m->v[i];
            if (g.match && !prev && w < m->n) m->v[w].st = g.st;
            else m->v[--w] = (seg){g.st, g.e, 0};
            prev = g.match;
        }
        memmove(m->v, m->v + w, (m->n - w) * sizeof *m->v);
        k = m->n - w;
        break;
    }
    }
    for (size_t i = 0; i < k; i++) {
        if (m->v[i].match) continue; /* removed */
        if (tok_pieces_add(dst, s + m->v[i].st, m->v[i].e - m->v[i].st, first && m->v[i].st == 0))
            return STRATA_ENOMEM;
    }
    return 0;
}

/* ---- normalizers ----------------------------------------------------------------------- */

typedef struct repl_ctx {
    const char *in;
    size_t at;
    const tok_step *s;
    strbuf *out;
} repl_ctx;

static int on_replace(void *ctx, size_t st, size_t e) {
    repl_ctx *c = ctx;
    if (strbuf_add(c->out, c->in + c->at, st - c->at) ||
        strbuf_add(c->out, c->s->str, c->s->str_len))
        return STRATA_ENOMEM;
    c->at = e;
    return 0;
}

/* Replace every match of s->pat in in[0..n) by s->str, appending to out. */
int tok_replace_all(const tok_step *s, const char *in, size_t n, strbuf *out, OnigRegion *rg,
                    strata_err *err) {
    repl_ctx c = {in, 0, s, out};
    int r = tok_pattern_find(&s->pat, in, n, rg, on_replace, &c, err);
    if (r) return r;
    return strbuf_add(out, in + c.at, n - c.at);
}

int tok_normalize(const tok_step *s, const char *in, size_t n, strbuf *out, OnigRegion *rg,
                  strata_err *err) {
    out->len = 0;
    int r = 0;
    switch (s->type) {
    case TOK_STEP_NFC:
        if (unicode_nfc_is_quick(in, n)) return strbuf_add(out, in, n);
        if (unicode_nfc(&out->p, &out->len, &out->cap, in, n)) return STRATA_ENOMEM;
        return strbuf_add(out, "", 0); /* NUL-terminate, room guaranteed by reserve */
    case TOK_STEP_REPLACE: return tok_replace_all(s, in, n, out, rg, err);
    case TOK_STEP_PREPEND:
        if (n && (r = strbuf_add(out, s->str, s->str_len))) return r;
        return strbuf_add(out, in, n);
    case TOK_STEP_SEQUENCE: {
        if ((r = strbuf_add(out, in, n))) return r;
        strbuf tmp = {0};
        for (int i = 0; i < s->n_sub && !r; i++) {
            r = tok_normalize(&s->sub[i], out->p, out->len, &tmp, rg, err);
            strbuf t = *out;
            *out = tmp;
            tmp = t;
        }
        strbuf_free(&tmp);
        return r;
    }
    }
    return strata_err_set(err, STRATA_EUNSUPPORTED, "normalizer step %d", s->type);
}

/* ---- pre-tokenizers -------------------------------------------------------------------- */

static int bytelevel_map(const char *s, size_t n, int first, tok_pieces *dst) {
    if (!n) return 0;
    if (strbuf_reserve(&dst->text, 2 * n)) return STRATA_ENOMEM;
    size_t at = dst->text.len;
    char *o = dst->text.p + at;
    size_t w = 0;
    for (size_t i = 0; i < n; i++)
        w += (size_t)unicode_utf8_encode(bytelevel_cp((uint8_t)s[i]), o + w);
    if (pieces_meta(dst, at, w, first)) return STRATA_ENOMEM;
    dst->text.len = at + w;
    dst->text.p[dst->text.len] = 0;
    return 0;
}

static int metaspace_piece(const tok_step *st, const char *s, size_t n, int first, tok_pieces *dst,
                           segs *m, strbuf *scratch) {
    scratch->len = 0;
    int pre = 0;
    int starts = n >= st->str_len && !memcmp(s, st->str, st->str_len);
    if (st->prepend_scheme == TOK_PREPEND_ALWAYS) pre = 1;
    if (st->prepend_scheme == TOK_PREPEND_FIRST && first) pre = 1;
    /* The check is on the text after ' ' was replaced, so a leading space counts. */
    if (n && s[0] == ' ') starts = 1;
    if (pre && !starts && strbuf_add(scratch, st->str, st->str_len)) return STRATA_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        int r =
            s[i] == ' ' ? strbuf_add(scratch, st->str, st->str_len) : strbuf_add(scratch, s + i, 1);
        if (r) return r;
    }
    if (!st->split) return tok_pieces_add(dst, scratch->p, scratch->len, first);
    tok_pattern lit = {0, st->str, st->str_len, NULL};
    if (find_segs(&lit, scratch->p, scratch->len, NULL, m, NULL)) return STRATA_ENOMEM;
    return split_piece(m, TOK_SPLIT_MERGED_NEXT, 0, scratch->p, first, dst);
}

static int pretok_one(const tok_step *s, const tok_pieces *in, tok_pieces *out, OnigRegion *rg,
                      segs *m, strbuf *scratch, strata_err *err) {
    int r = 0;
    tok_pieces_clear(out);
    for (size_t i = 0; i < in->n && !r; i++) {
        const char *p = in->text.p + in->off[i];
        size_t n = in->len[i];
        int first = in->first[i];
        switch (s->type) {
        case TOK_STEP_SPLIT:
            if (!(r = find_segs(&s->pat, p, n, rg, m, err)))
                r = split_piece(m, s->behavior, s->invert, p, first, out);
            break;
        case TOK_STEP_BYTELEVEL: {
            const char *q = p;
            size_t qn = n;
            if (s->add_prefix_space && (n == 0 || p[0] != ' ')) {
                scratch->len = 0;
                if ((r = strbuf_add(scratch, " ", 1)) || (r = strbuf_add(scratch, p, n))) break;
                q = scratch->p;
                qn = scratch->len;
            }
            if (!s->use_regex) {
                r = bytelevel_map(q, qn, first, out);
                break;
            }
            if ((r = find_segs(&s->pat, q, qn, rg, m, err))) break;
            for (size_t j = 0; j < m->n && !r; j++)
                r = bytelevel_map(q + m->v[j].st, m->v[j].e - m->v[j].st, first && m->v[j].st == 0,
                                  out);
            break;
        }
        case TOK_STEP_METASPACE: r = metaspace_piece(s, p, n, first, out, m, scratch); break;
        default: r = strata_err_set(err, STRATA_EUNSUPPORTED, "pre-tokenizer step %d", s->type);
        }
    }
    return r;
}

int tok_pretokenize(const tok_step *s, tok_pieces **cur, tok_pieces **tmp, OnigRegion *rg,
                    strata_err *err) {
    segs m = {0};
    strbuf scratch = {0};
    int r = 0;
    if (s->type == TOK_STEP_SEQUENCE) {
        for (int i = 0; i < s->n_sub && !r; i++) r = tok_pretokenize(&s->sub[i], cur, tmp, rg, err);
    } else if (!(r = pretok_one(s, *cur, *tmp, rg, &m, &scratch, err))) {
        tok_pieces *t = *cur;
        *cur = *tmp;
        *tmp = t;
    }
    free(m.v);
    strbuf_free(&scratch);
    return r;
}
