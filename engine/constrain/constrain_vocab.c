/* constrain_vocab.c - every token's bytes, once per tokenizer, and the trie the mask walks.
 *
 * A token's bytes are what it appends to the output text. Byte-level BPE vocabularies
 * (Qwen, GPT-2) write them in GPT-2's byte-to-unicode alphabet, inverted here exactly as
 * HF's ByteLevel decoder does (a piece with a char outside the alphabet, such as an added
 * token, stands for its own UTF-8). Other tokenizers (metaspace, sentencepiece, byte
 * fallback) are asked through tok_decode, after an anchor token so that a decoder that
 * drops the first token's leading space does not; a byte-fallback piece <0xHH> is byte
 * HH, which no decode of it alone can show. A token whose bytes stay unknown, a special
 * token, a token that appends nothing (it would let a model stall forever) and an id past
 * the tokenizer's never fit the trie. The special tokens' texts are kept apart: a grammar
 * that asks (CONSTRAIN_SPECIALS, for a call syntax written with them) checks each whole. */
#include <stdlib.h>
#include <string.h>

#include "engine/base/strbuf.h"
#include "engine/base/utf8.h"
#include "engine/constrain/constrain.h"
#include "engine/constrain/constrain_internal.h"

/* GPT-2's bytes_to_unicode, inverted: code point (< 0x144) -> byte, -1 outside. */
static void bytelevel_table(int16_t cp_to_byte[0x144]) {
    for (int i = 0; i < 0x144; i++) cp_to_byte[i] = -1;
    int extra = 0;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        cp_to_byte[printable ? b : 256 + extra++] = (int16_t)b;
    }
}

/* Appends the bytes a byte-level piece stands for. */
static int bytelevel_bytes(strbuf *out, const char *piece, const int16_t cp_to_byte[0x144]) {
    size_t n = strlen(piece), at = out->len;
    const uint8_t *p = (const uint8_t *)piece;
    for (size_t i = 0; i < n;) {
        int k = unicode_utf8_check(p + i, n - i);
        uint32_t cp = k > 0 ? unicode_utf8_decode(p + i, &k) : 0x144;
        if (cp >= 0x144 || cp_to_byte[cp] < 0) {
            out->len = at;
            return strbuf_add(out, piece, n);
        }
        if (strbuf_addc(out, (char)cp_to_byte[cp])) return STRATA_ENOMEM;
        i += (size_t)k;
    }
    return 0;
}

/* 1 when the decode of id alone is want, 0 when not (or id is -1), STRATA_ENOMEM. */
static int decodes_to(const tokenizer *t, int32_t id, const char *want, size_t want_len) {
    char *s;
    size_t n;
    strata_err e;
    if (id < 0) return 0;
    int r = tok_decode(t, &id, 1, 0, &s, &n, &e);
    if (r) return r == STRATA_ENOMEM ? r : 0;
    r = n == want_len && !memcmp(s, want, n);
    free(s);
    return r;
}

/* *anchor: the non-special token the others are decoded after, a plain ASCII letter or
 * digit that no decoder rewrites or merges with what follows (-1: none). 0 or
 * STRATA_ENOMEM. */
static int pick_anchor(const tokenizer *t, int32_t *anchor) {
    static const char cand[] = "aeionstrxz0123456789";
    *anchor = -1;
    for (const char *c = cand; *c; c++) {
        char piece[2] = {*c, 0};
        int32_t id = tok_piece_to_id(t, piece);
        int r = id >= 0 && !tok_is_special(t, id) ? decodes_to(t, id, piece, 1) : 0;
        if (r < 0) return r;
        if (r) {
            *anchor = id;
            return 0;
        }
    }
    return 0;
}

/* The byte of a "<0xHH>" piece, else -1. */
static int byte_piece(const char *piece) {
    if (!piece || strlen(piece) != 6 || memcmp(piece, "<0x", 3) || piece[5] != '>') return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char c = piece[i];
        int x = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (x < 0) return -1;
        v = v * 16 + x;
    }
    return v;
}

/* Appends id's bytes through the decoder; leaves out untouched when they stay unknown. */
static int decoded_bytes(strbuf *out, const tokenizer *t, int32_t anchor, int32_t id) {
    const char *piece = tok_id_to_piece(t, id);
    int hh = byte_piece(piece);
    /* byte fallback: <0xHH> alone decodes to HH, or to U+FFFD when HH is no character */
    if (hh >= 0) {
        char one = (char)hh;
        int r = hh < 0x80 ? decodes_to(t, id, &one, 1) : decodes_to(t, id, "\xEF\xBF\xBD", 3);
        if (r) return r < 0 ? r : strbuf_addc(out, one);
    }
    int32_t ids[2] = {anchor, id};
    int skip = anchor >= 0 ? 1 : 0;
    char *s;
    size_t n;
    strata_err e;
    int r = tok_decode(t, ids + 1 - skip, 1 + (size_t)skip, 0, &s, &n, &e);
    if (r) return r == STRATA_ENOMEM ? r : 0;
    /* the anchor decodes to its one letter; a text that does not start with it, or that
     * holds a U+FFFD the piece does not, hides the token's real bytes */
    const char *body = s + skip;
    size_t len = n >= (size_t)skip ? n - (size_t)skip : 0;
    int known = (!skip || (n >= 1 && s[0] == tok_id_to_piece(t, anchor)[0])) &&
                (!memmem(body, len, "\xEF\xBF\xBD", 3) || (piece && strstr(piece, "\xEF\xBF\xBD")));
    if (known) r = strbuf_add(out, body, len);
    free(s);
    return r;
}

/* 1 when b[0..n) is valid UTF-8 from a character boundary, the last character perhaps
 * cut short but with a valid start (no overlong, surrogate or past U+10FFFF). */
static int utf8_prefix_ok(const uint8_t *b, size_t n) {
    for (size_t i = 0; i < n;) {
        uint8_t c = b[i];
        size_t len = c < 0x80 ? 1 : c < 0xC2 ? 0 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : c < 0xF5 ? 4 : 0;
        if (!len) return 0;
        /* the second byte's range depends on the lead (UTF-8's table 3-7) */
        uint8_t lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80;
        uint8_t hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
        for (size_t j = 1; j < len && i + j < n; j++) {
            uint8_t x = b[i + j];
            if (j == 1 ? x < lo || x > hi : (x & 0xC0) != 0x80) return 0;
        }
        i += len;
    }
    return 1;
}

typedef struct entry {
    const uint8_t *p;
    uint32_t len;
    int32_t id;
} entry;

static int entry_cmp(const void *a, const void *b) {
    const entry *x = a, *y = b;
    uint32_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->p, y->p, n);
    if (c) return c;
    if (x->len != y->len) return x->len < y->len ? -1 : 1;
    return x->id < y->id ? -1 : 1;
}

/* Every id's bytes into v->bytes / off / len. */
static int fill_bytes(constrain_vocab *v, const tokenizer *t, strata_err *err) {
    int16_t cp_to_byte[0x144];
    bytelevel_table(cp_to_byte);
    int bytelevel = decodes_to(t, tok_piece_to_id(t, "\xC4\xA0"), " ", 1); /* "Ġ": the space */
    int32_t anchor = -1;
    if (bytelevel < 0 || (!bytelevel && pick_anchor(t, &anchor)))
        return strata_err_set(err, STRATA_ENOMEM, "constrain vocab: out of memory");
    int n_tok = tok_vocab_size(t) < v->n_ids ? tok_vocab_size(t) : v->n_ids;
    strbuf buf = {0};
    int r = 0;
    for (int32_t id = 0; id < n_tok && !r; id++) {
        size_t at = buf.len;
        const char *piece = tok_id_to_piece(t, id);
        if (!piece || tok_is_special(t, id)) continue;
        r = bytelevel ? bytelevel_bytes(&buf, piece, cp_to_byte)
                      : decoded_bytes(&buf, t, anchor, id);
        if (buf.len - at > UINT16_MAX) buf.len = at; /* the trie's depth is 16 bits */
        v->off[id] = (uint32_t)at;
        v->len[id] = (uint32_t)(buf.len - at);
        if (buf.len > UINT32_MAX - UINT16_MAX) r = STRATA_ENOMEM;
    }
    if (r) {
        strbuf_free(&buf);
        return strata_err_set(err, STRATA_ENOMEM, "constrain vocab: out of memory");
    }
    v->bytes = (uint8_t *)buf.p; /* NULL when no token has bytes */
    return 0;
}

/* The special tokens' texts (tok_id_to_piece: an added token's content as written) into
 * v->spec_*, for grammars that let them fit (CONSTRAIN_SPECIALS). */
static int fill_specials(constrain_vocab *v, const tokenizer *t, strata_err *err) {
    int n_tok = tok_vocab_size(t) < v->n_ids ? tok_vocab_size(t) : v->n_ids, n = 0;
    for (int32_t id = 0; id < n_tok; id++) {
        const char *piece = tok_id_to_piece(t, id);
        n += piece && *piece && tok_is_special(t, id);
    }
    if (!n) return 0;
    strbuf buf = {0};
    v->spec_id = malloc((size_t)n * sizeof *v->spec_id);
    v->spec_off = malloc((size_t)n * sizeof *v->spec_off);
    v->spec_len = malloc((size_t)n * sizeof *v->spec_len);
    if (!v->spec_id || !v->spec_off || !v->spec_len) goto nomem;
    for (int32_t id = 0; id < n_tok; id++) {
        const char *piece = tok_id_to_piece(t, id);
        if (!piece || !*piece || !tok_is_special(t, id)) continue;
        v->spec_id[v->n_specials] = id;
        v->spec_off[v->n_specials] = (uint32_t)buf.len;
        v->spec_len[v->n_specials++] = (uint32_t)strlen(piece);
        if (strbuf_adds(&buf, piece) || buf.len > UINT32_MAX) goto nomem;
    }
    v->spec_bytes = (uint8_t *)buf.p;
    return 0;
nomem:
    strbuf_free(&buf);
    return strata_err_set(err, STRATA_ENOMEM, "constrain vocab: out of memory");
}

/* Adds the trie over the sorted fitting tokens: nodes in preorder, each token's path made
 * of its longest common prefix with the token before it plus new nodes. */
static int build_trie(constrain_vocab *v, const entry *e, strata_err *err) {
    size_t cap = 1024, n = 1;
    constrain_node *nodes = malloc(cap * sizeof *nodes);
    uint32_t *path = malloc(((size_t)v->max_len + 1) * sizeof *path);
    if (!nodes || !path) goto nomem;
    nodes[0] = (constrain_node){.tok = 0};
    path[0] = 0;
    uint32_t depth = 0; /* of the previous token's path */
    for (int k = 0; k < v->n_sorted; k++) {
        uint32_t lcp = 0, len = e[k].len;
        if (k) {
            uint32_t m = len < e[k - 1].len ? len : e[k - 1].len;
            while (lcp < m && e[k].p[lcp] == e[k - 1].p[lcp]) lcp++;
        }
        for (; depth > lcp; depth--) nodes[path[depth]].end = (uint32_t)n;
        for (; depth < len; depth++) {
            if (n + 2 > cap) {
                constrain_node *g = realloc(nodes, 2 * cap * sizeof *nodes);
                if (!g) goto nomem;
                nodes = g, cap *= 2;
            }
            nodes[n] = (constrain_node){.tok = (uint32_t)k,
                                        .depth = (uint16_t)(depth + 1),
                                        .byte = e[k].p[depth],
                                        .safe = CONSTRAIN_NODE_JSTR | CONSTRAIN_NODE_UTF8};
            path[depth + 1] = (uint32_t)n++;
        }
        for (uint32_t d = 1; d <= len; d++) {
            constrain_node *nd = &nodes[path[d]];
            if ((nd->safe & CONSTRAIN_NODE_JSTR) && !json_pda_string_safe(e[k].p + d, len - d))
                nd->safe &= (uint8_t)~CONSTRAIN_NODE_JSTR;
            if ((nd->safe & CONSTRAIN_NODE_UTF8) && !utf8_prefix_ok(e[k].p + d, len - d))
                nd->safe &= (uint8_t)~CONSTRAIN_NODE_UTF8;
        }
    }
    for (; depth > 0; depth--) nodes[path[depth]].end = (uint32_t)n;
    nodes[0].end = (uint32_t)n;
    nodes[n] = (constrain_node){.end = (uint32_t)n + 1, .tok = (uint32_t)v->n_sorted};
    v->nodes = nodes;
    v->n_nodes = (uint32_t)n;
    free(path);
    return 0;
nomem:
    free(nodes);
    free(path);
    return strata_err_set(err, STRATA_ENOMEM, "constrain vocab: out of memory");
}

int constrain_vocab_build(constrain_vocab **out, const tokenizer *t, int n_ids, strata_err *err) {
    if (n_ids < 0) return strata_err_set(err, STRATA_EINVALID, "constrain vocab: %d ids", n_ids);
    constrain_vocab *v = calloc(1, sizeof *v);
    entry *e = NULL;
    int r = STRATA_ENOMEM;
    if (!v) goto nomem;
    v->n_ids = n_ids;
    v->off = calloc((size_t)n_ids + 1, sizeof *v->off);
    v->len = calloc((size_t)n_ids + 1, sizeof *v->len);
    if (!v->off || !v->len) goto nomem;
    if ((r = fill_bytes(v, t, err)) || (r = fill_specials(v, t, err))) goto fail;
    int n = 0;
    for (int id = 0; id < n_ids; id++) n += v->len[id] > 0;
    e = malloc(((size_t)n + 1) * sizeof *e);
    v->sorted = malloc(((size_t)n + 1) * sizeof *v->sorted);
    if (!e || !v->sorted) goto nomem;
    n = 0;
    for (int id = 0; id < n_ids; id++) {
        if (!v->len[id]) continue;
        e[n++] = (entry){v->bytes + v->off[id], v->len[id], id};
        if ((int)v->len[id] > v->max_len) v->max_len = (int)v->len[id];
    }
    qsort(e, (size_t)n, sizeof *e, entry_cmp);
    for (int k = 0; k < n; k++) v->sorted[k] = e[k].id;
    v->n_sorted = n;
    if ((r = build_trie(v, e, err))) goto fail;
    free(e);
    *out = v;
    return 0;
nomem:
    r = strata_err_set(err, STRATA_ENOMEM, "constrain vocab: out of memory");
fail:
    free(e);
    constrain_vocab_free(v);
    return r;
}

void constrain_vocab_free(constrain_vocab *v) {
    if (!v) return;
    free(v->spec_id);
    free(v->spec_off);
    free(v->spec_len);
    free(v->spec_bytes);
    free(v->nodes);
    free(v->sorted);
    free(v->bytes);
    free(v->len);
    free(v->off);
    free(v);
}
