/* tok_decoder.c - decoders (spec 2.4): each stage maps a list of token strings to a new
 * list exactly as HF's Decoder::decode_chain does; the caller joins the final list. */
#include <stdlib.h>
#include <string.h>

#include "engine/text/tok_internal.h"
#include "engine/base/utf8.h"

int tok_strs_add(tok_strs *l, const char *s, size_t n) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        size_t *off = realloc(l->off, cap * sizeof *off);
        if (off) l->off = off;
        size_t *len = realloc(l->len, cap * sizeof *len);
        if (len) l->len = len;
        if (!off || !len) return STRATA_ENOMEM;
        l->cap = cap;
    }
    l->off[l->n] = l->text.len;
    l->len[l->n] = n;
    l->n++;
    return strbuf_add(&l->text, s, n);
}

void tok_strs_free(tok_strs *l) {
    strbuf_free(&l->text);
    free(l->off);
    free(l->len);
    memset(l, 0, sizeof *l);
}

static void strs_clear(tok_strs *l) {
    l->n = 0;
    l->text.len = 0;
}

/* Rust u8::from_str_radix(&token[3..5], 16) on a 6-byte "<0x..>" token (it accepts a
 * leading '+'); -1 when the token is not a byte token. */
int tok_byte_token(const char *t, size_t n) {
    if (n != 6 || memcmp(t, "<0x", 3) || t[5] != '>') return -1;
    const char *d = t + 3;
    int nd = 2;
    if (d[0] == '+') d++, nd = 1;
    int v = 0;
    for (int i = 0; i < nd; i++) {
        char c = d[i];
        int x = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (x < 0) return -1;
        v = v * 16 + x;
    }
    return v;
}

static int flush_bytes(tok_strs *out, strbuf *bytes) {
    int r = 0;
    if (!bytes->len) return 0;
    if (unicode_utf8_valid(bytes->p, bytes->len)) r = tok_strs_add(out, bytes->p, bytes->len);
    else
        for (size_t i = 0; i < bytes->len && !r; i++) r = tok_strs_add(out, "\xEF\xBF\xBD", 3);
    bytes->len = 0;
    return r;
}

int tok_bytelevel_token(strbuf *out, const char *tok, size_t n) {
    int16_t cp_to_byte[0x144];
    uint32_t byte_to_cp[256];
    tok_bytelevel_tables(byte_to_cp, cp_to_byte);
    const uint8_t *s = (const uint8_t *)tok;
    size_t at = out->len;
    for (size_t i = 0; i < n;) {
        int k;
        uint32_t cp = unicode_utf8_decode(s + i, &k);
        if (cp >= 0x144 || cp_to_byte[cp] < 0) {
            out->len = at; /* a char outside the table: the token's raw UTF-8 */
            return strbuf_add(out, tok, n);
        }
        uint8_t b = (uint8_t)cp_to_byte[cp];
        if (strbuf_add(out, &b, 1)) return STRATA_ENOMEM;
        i += (size_t)k;
    }
    return 0;
}

static int decode_bytelevel(const tok_strs *in, tok_strs *out, tok_decode_ws *ws) {
    strbuf *bytes = &ws->bytes, *text = &ws->tmp;
    int r = 0;
    bytes->len = text->len = 0;
    for (size_t t = 0; t < in->n && !r; t++)
        r = tok_bytelevel_token(bytes, in->text.p + in->off[t], in->len[t]);
    if (!r) r = unicode_utf8_lossy(text, bytes->p ? bytes->p : "", bytes->len);
    if (!r) r = tok_strs_add(out, text->p ? text->p : "", text->len);
    return r;
}

int tok_decode_token_step(const tok_step *s, const char *tok, size_t n, size_t index, strbuf *out,
                          OnigRegion *rg, strata_err *err) {
    const uint8_t *p = (const uint8_t *)tok;
    int r = 0;
    switch (s->type) {
    case TOK_STEP_REPLACE: return tok_replace_all(s, tok, n, out, rg, err);
    case TOK_STEP_METASPACE:
        /* Every replacement char becomes a space, except in the first token. */
        for (size_t i = 0; i < n && !r;) {
            int k;
            uint32_t cp = unicode_utf8_decode(p + i, &k);
            if (cp != s->cp) r = strbuf_add(out, p + i, (size_t)k);
            else if (index != 0 || s->prepend_scheme == TOK_PREPEND_NEVER)
                r = strbuf_add(out, " ", 1);
            i += (size_t)k;
        }
        return r;
    case TOK_STEP_STRIP: {
        /* Char-wise cut of up to start leading / stop trailing copies of cp. */
        size_t a = 0, b = n;
        for (int i = 0; i < s->start && a < n; i++) {
            int k;
            if (unicode_utf8_decode(p + a, &k) != s->cp) break;
            a += (size_t)k;
        }
        for (int i = 0; i < s->stop && b > a; i++) {
            size_t q = b - 1;
            while (q > a && (p[q] & 0xC0) == 0x80) q--;
            int k;
            if (unicode_utf8_decode(p + q, &k) != s->cp) break;
            b = q;
        }
        return strbuf_add(out, p + a, b - a);
    }
    }
    return strata_err_set(err, STRATA_EUNSUPPORTED, "decoder step %d", s->type);
}

static int decode_one(const tok_step *s, const tok_strs *in, tok_strs *out, tok_decode_ws *ws,
                      strata_err *err) {
    int r = 0;
    strs_clear(out);
    switch (s->type) {
    case TOK_STEP_BYTELEVEL: return decode_bytelevel(in, out, ws);
    case TOK_STEP_FUSE: return tok_strs_add(out, in->text.p ? in->text.p : "", in->text.len);
    case TOK_STEP_BYTEFALLBACK: {
        strbuf *bytes = &ws->bytes;
        bytes->len = 0;
        for (size_t t = 0; t < in->n && !r; t++) {
            const char *p = in->text.p + in->off[t];
            int b = tok_byte_token(p, in->len[t]);
            if (b >= 0) {
                uint8_t c = (uint8_t)b;
                r = strbuf_add(bytes, &c, 1);
                continue;
            }
            if (!(r = flush_bytes(out, bytes))) r = tok_strs_add(out, p, in->len[t]);
        }
        if (!r) r = flush_bytes(out, bytes);
        return r;
    }
    default: break;
    }
    strbuf *tmp = &ws->tmp;
    for (size_t t = 0; t < in->n && !r; t++) {
        tmp->len = 0;
        r = tok_decode_token_step(s, in->text.p + in->off[t], in->len[t], t, tmp, ws->rg, err);
        if (!r) r = tok_strs_add(out, tmp->p ? tmp->p : "", tmp->len);
    }
    return r;
}

int tok_decode_chain(const tok_step *s, tok_strs **cur, tok_strs **tmp, tok_decode_ws *ws,
                     strata_err *err) {
    int r = 0;
    if (s->type == TOK_STEP_SEQUENCE) {
        for (int i = 0; i < s->n_sub && !r; i++)
            r = tok_decode_chain(&s->sub[i], cur, tmp, ws, err);
        return r;
    }
    if ((r = decode_one(s, *cur, *tmp, ws, err))) return r;
    tok_strs *t = *cur;
    *cur = *tmp;
    *tmp = t;
    return 0;
}
