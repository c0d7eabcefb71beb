/* tok_internal.h - the pieces of the tokenizer shared by its files.
 *
 * tokenizer.c (load, encode/decode pipeline, public API), tok_json.c (tokenizer.json
 * components -> tok_step trees), tok_ggml.c (GGUF tokenizer keys -> a tokenizer.json tree), tok_map.c (hash maps), tok_bpe.c (BPE model + word
 * cache), tok_added.c (added-token matching), tok_text.c (normalizers and
 * pre-tokenizers), tok_decoder.c (decoders, post-processor). Nothing here is public:
 * engine/text/tokenizer.h is the door. Semantics follow HF tokenizers 0.23 as written in
 * shared/spec/tokenizers.md (section numbers below refer to it). */
#ifndef STRATA_TOK_INTERNAL_H
#define STRATA_TOK_INTERNAL_H

#include <jansson.h>
#include <oniguruma.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/base/err.h"
#include "engine/base/strbuf.h"

/* ---- growable buffers ------------------------------------------------------------ */

typedef struct tok_ids {
    int32_t *p;
    size_t len, cap;
} tok_ids;

int tok_ids_push(tok_ids *v, int32_t id);
void tok_ids_free(tok_ids *v);

/* ---- hash maps (tok_map.c) -------------------------------------------------------- */

/* byte string -> int32; keys are copied into the map's arena. */
typedef struct tok_map {
    uint32_t *slots; /* entry index + 1; 0 = empty */
    uint32_t mask;
    uint32_t *hash, *off, *klen;
    int32_t *val;
    uint32_t n, cap;
    strbuf keys;
} tok_map;

uint32_t tok_hash_bytes(const void *s, size_t n);
int tok_map_init(tok_map *m, uint32_t expected);
void tok_map_free(tok_map *m);
/* Inserts or overwrites. */
int tok_map_put(tok_map *m, const char *k, size_t n, int32_t v);
int32_t tok_map_get(const tok_map *m, const char *k, size_t n); /* -1 when absent */

/* (id_a, id_b) -> (rank, merged id). */
typedef struct tok_pairmap {
    uint64_t *keys; /* UINT64_MAX = empty */
    uint64_t *vals; /* rank << 32 | new id */
    uint64_t mask;
    size_t n;
} tok_pairmap;

int tok_pairmap_init(tok_pairmap *m, size_t expected);
void tok_pairmap_free(tok_pairmap *m);
int tok_pairmap_put(tok_pairmap *m, int32_t a, int32_t b, uint32_t rank, int32_t id);
/* 1 (and the rank and merged id) when the pair has a merge. */
static inline int tok_pairmap_get(const tok_pairmap *m, int32_t a, int32_t b, uint32_t *rank,
                                  int32_t *id) {
    uint64_t k = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    uint64_t h = k * 0x9E3779B97F4A7C15ull;
    for (uint64_t i = (h >> 29) & m->mask;; i = (i + 1) & m->mask) {
        if (m->keys[i] == k) {
            *rank = (uint32_t)(m->vals[i] >> 32);
            *id = (int32_t)(uint32_t)m->vals[i];
            return 1;
        }
        if (m->keys[i] == UINT64_MAX) return 0;
    }
}

/* ---- regex / literal patterns ---------------------------------------------------- */

typedef struct tok_pattern {
    int is_regex;
    char *str; /* literal (is_regex 0) or the regex source */
    size_t len;
    OnigRegex re; /* compiled when is_regex */
} tok_pattern;

/* onig_region_new with room for TOK_REGION_SLOTS - 1 groups allocated here (NULL when out
 * of memory; free with onig_region_free(rg, 1)). A region that is large enough is never
 * resized inside onig_search, and the first resize of an empty region in oniguruma 6.9
 * leaks one of its two arrays when the other cannot be allocated. Patterns with more
 * groups (none of the tokenizers we know) still work through onig's own resize. */
#define TOK_REGION_SLOTS 32
OnigRegion *tok_region_new(void);

/* Compiles as HF's SysRegex: Oniguruma default (ONIGURUMA) syntax, UTF-8, no options. */
int tok_pattern_compile(tok_pattern *p, strata_err *err);
void tok_pattern_free(tok_pattern *p);
/* Non-overlapping matches in s[0..n) as the onig crate's find_iter yields them; calls
 * cb(ctx, start, end) for each; returns 0 or an error code. */
typedef int (*tok_match_fn)(void *ctx, size_t start, size_t end);
int tok_pattern_find(const tok_pattern *p, const char *s, size_t n, OnigRegion *region,
                     tok_match_fn cb, void *ctx, strata_err *err);

/* ---- component trees (tok_json.c builds them) ----------------------------------- */

enum {
    TOK_STEP_NFC = 1,
    TOK_STEP_REPLACE,
    TOK_STEP_PREPEND,
    TOK_STEP_SEQUENCE,
    TOK_STEP_SPLIT,
    TOK_STEP_BYTELEVEL,
    TOK_STEP_METASPACE,
    TOK_STEP_BYTEFALLBACK,
    TOK_STEP_FUSE,
    TOK_STEP_STRIP,
    TOK_STEP_TEMPLATE,
};

enum {
    TOK_SPLIT_REMOVED,
    TOK_SPLIT_ISOLATED,
    TOK_SPLIT_MERGED_PREV,
    TOK_SPLIT_MERGED_NEXT,
    TOK_SPLIT_CONTIGUOUS
};
enum { TOK_PREPEND_ALWAYS, TOK_PREPEND_FIRST, TOK_PREPEND_NEVER };

typedef struct tok_step {
    int type;
    tok_pattern pat; /* Replace, Split; ByteLevel's GPT-2 regex when use_regex */
    char *str;       /* Replace content, Prepend text, Metaspace/Strip char (UTF-8) */
    size_t str_len;
    uint32_t cp;                     /* Metaspace replacement / Strip content as a code point */
    int behavior, invert;            /* Split */
    int add_prefix_space, use_regex; /* ByteLevel */
    int prepend_scheme, split;       /* Metaspace */
    int start, stop;                 /* Strip */
    int32_t *tmpl;                   /* TemplateProcessing single: ids, -1 = the sequence ($A) */
    size_t n_tmpl;
    struct tok_step *sub; /* Sequence */
    int n_sub;
} tok_step;

void tok_step_free(tok_step *s); /* frees contents (not s itself) */

enum { TOK_KIND_NORMALIZER, TOK_KIND_PRETOK, TOK_KIND_DECODER, TOK_KIND_POST };
/* Builds a step from a tokenizer.json component (non-null object); a type outside the
 * supported subset fails with STRATA_EUNSUPPORTED naming it. b resolves the ids of
 * TemplateProcessing tokens. */
struct tok_bpe;
int tok_json_step(tok_step *out, const json_t *j, int kind, strata_err *err);
int tok_json_bpe(struct tok_bpe *b, const json_t *model, strata_err *err);
struct tok_added;
int tok_json_added(struct tok_added *a, const json_t *arr, const struct tok_bpe *b,
                   strata_err *err);

/* ---- BPE model (tok_bpe.c) ------------------------------------------------------- */

#define TOK_CACHE_SLOTS 16384
#define TOK_CACHE_KEY 44
#define TOK_CACHE_IDS 10

typedef struct tok_cache_slot {
    uint32_t hash;
    uint16_t klen, nids; /* klen 0 = empty */
    char key[TOK_CACHE_KEY];
    int32_t ids[TOK_CACHE_IDS];
} tok_cache_slot;

typedef struct tok_bpe {
    tok_map vocab;             /* model vocab: string -> id */
    uint32_t *id_off, *id_len; /* id -> key in vocab.keys (id_len UINT32_MAX: none) */
    int32_t n_ids;             /* highest model id + 1 */
    tok_pairmap merges;
    int32_t *bmp_id;      /* code point < 0x10000 -> id of that one-char token, or -1 */
    int32_t byte_id[256]; /* <0xHH> ids, -1 when absent */
    int byte_fallback, fuse_unk, ignore_merges;
    int32_t unk_id; /* -1: no unk token */
    tok_cache_slot *cache;
    pthread_mutex_t cache_lock;
} tok_bpe;

/* Scratch for one encode call (one thread). */
typedef struct tok_bpe_ws {
    struct tok_sym {
        int32_t id, prev, next, len;
    } * sym;
    size_t sym_cap;
    struct tok_heap_ent {
        uint64_t key;
        int32_t id;
    } * heap;
    size_t heap_cap;
} tok_bpe_ws;

int tok_bpe_build_tables(tok_bpe *b, strata_err *err); /* after vocab/merges are filled */
void tok_bpe_free(tok_bpe *b);
/* Appends the ids of one pre-token (spec 3.2-3.4). */
int tok_bpe_encode_word(const tok_bpe *b, tok_bpe_ws *ws, const char *w, size_t n, tok_ids *out);
void tok_bpe_ws_free(tok_bpe_ws *ws);
static inline const char *tok_bpe_piece(const tok_bpe *b, int32_t id, size_t *len) {
    if (id < 0 || id >= b->n_ids || b->id_len[id] == UINT32_MAX) return NULL;
    *len = b->id_len[id];
    return b->vocab.keys.p + b->id_off[id];
}

/* ---- added tokens (tok_added.c) -------------------------------------------------- */

typedef struct tok_added_token {
    int32_t id; /* as HF assigns it at load (not necessarily the JSON id) */
    char *content;
    size_t len;
    char *ncontent; /* content after the normalizer (normalized tokens only) */
    size_t nlen;
    int single_word, lstrip, rstrip, normalized, special;
} tok_added_token;

typedef struct tok_trie {
    tok_map edges; /* key: 4-byte node id + 1 byte -> child node */
    int32_t *tok;  /* node -> added-token index, -1 */
    size_t n_nodes, cap_nodes;
    uint8_t first[32]; /* bitset of first bytes */
} tok_trie;

typedef struct tok_added {
    tok_added_token *tok;
    size_t n;
    tok_map by_content; /* content -> id (HF added_tokens_map) */
    tok_map by_id;      /* 4-byte id -> index of the token that owns it (added_tokens_map_r) */
    tok_trie raw, norm; /* normalized:false / normalized:true tokens */
    OnigRegex word_re;  /* single_word: [\p{Alphabetic}\p{N}_], only when needed */
} tok_added;

/* A span of text: either plain text [start,end) or an added token (idx >= 0). */
typedef struct tok_span {
    size_t start, end;
    int32_t idx;
} tok_span;

/* After tok[] is filled (ids assigned, ncontent set for normalized tokens). */
int tok_added_build(tok_added *a, strata_err *err);
const tok_added_token *tok_added_by_id(const tok_added *a, int32_t id); /* NULL: none */
void tok_added_free(tok_added *a);
/* Splits s[0..n) on the tokens of trie (a->raw or a->norm), HF find_matches semantics.
 * Spans are appended to *spans (malloc'ed, *n_spans / *cap grown). */
int tok_added_split(const tok_added *a, const tok_trie *trie, const char *s, size_t n,
                    tok_span **spans, size_t *n_spans, size_t *cap);

/* ---- normalizers, pre-tokenizers (tok_text.c) ------------------------------------ */

typedef struct tok_pieces {
    strbuf text;
    size_t *off, *len;
    uint8_t *first; /* piece starts at offset 0 of the original input (Metaspace first) */
    size_t n, cap;
} tok_pieces;

int tok_pieces_add(tok_pieces *p, const char *s, size_t n, int first);
void tok_pieces_clear(tok_pieces *p);
void tok_pieces_free(tok_pieces *p);

/* Runs normalizer s over in[0..n) into out (replaced). in must not alias out. */
int tok_normalize(const tok_step *s, const char *in, size_t n, strbuf *out, OnigRegion *rg,
                  strata_err *err);
/* Appends in[0..n) to out with every match of s->pat replaced by s->str (Replace). */
int tok_replace_all(const tok_step *s, const char *in, size_t n, strbuf *out, OnigRegion *rg,
                    strata_err *err);
/* Runs pre-tokenizer s over the pieces in *cur; *cur and *tmp may be swapped. */
int tok_pretokenize(const tok_step *s, tok_pieces **cur, tok_pieces **tmp, OnigRegion *rg,
                    strata_err *err);

/* The 256-entry byte-level alphabet (spec 3.1). */
void tok_bytelevel_tables(uint32_t byte_to_cp[256], int16_t cp_to_byte[0x144]);

/* ---- decoders, post-processor (tok_decoder.c) ------------------------------------ */

/* A list of token strings: text + boundaries. */
typedef struct tok_strs {
    strbuf text;
    size_t *off, *len;
    size_t n, cap;
} tok_strs;

int tok_strs_add(tok_strs *l, const char *s, size_t n);
void tok_strs_free(tok_strs *l);

struct spm_ws;
struct tokenizer;

/* Everything one decode needs, kept between calls: each buffer keeps the capacity it
 * grew to, so decoding ids no longer than before allocates nothing (the streaming
 * detokenizer re-decodes a window of recent ids per token with one). One thread at a
 * time; zero-initialize, release with tok_decode_ws_free. */
typedef struct tok_decode_ws {
    strbuf out;        /* the result of the last tok_decode_into: NUL-terminated */
    tok_strs a, b;     /* the token strings the decoder chain passes between stages */
    strbuf bytes, tmp; /* scratch of one decoder stage */
    OnigRegion *rg;    /* made on first use */
    tok_ids keep;      /* tokenizer.model: the ids left after skipping specials */
    struct spm_ws *sp; /* tokenizer.model: the shim's reusable buffers */
} tok_decode_ws;

/* tok_decode into ws->out (same text, same errors); the text stays valid until the next
 * call with ws. On an error ws->out is empty and ws stays usable. */
int tok_decode_into(const struct tokenizer *t, const int32_t *ids, size_t n_ids, int skip_special,
                    tok_decode_ws *ws, strata_err *err);
void tok_decode_ws_free(tok_decode_ws *ws);

/* Runs decoder s on *cur (may swap with *tmp), with ws's scratch buffers and region. */
int tok_decode_chain(const tok_step *s, tok_strs **cur, tok_strs **tmp, tok_decode_ws *ws,
                     strata_err *err);
/* Appends the bytes of one token under the ByteLevel decoder (spec 2.4). */
int tok_bytelevel_token(strbuf *out, const char *tok, size_t n);
/* The byte of a "<0xHH>" token as HF's ByteFallback decoder reads it, else -1. */
int tok_byte_token(const char *t, size_t n);
/* Runs one per-token decoder step (Replace, Strip, Metaspace) on token number index. */
int tok_decode_token_step(const tok_step *s, const char *tok, size_t n, size_t index, strbuf *out,
                          OnigRegion *rg, strata_err *err);

/* ---- the tokenizer (tokenizer.c) ------------------------------------------------- */

struct spm;

struct tokenizer {
    struct spm *sp; /* set when loaded from tokenizer.model; the rest is unused */
    tok_bpe bpe;
    tok_added added;
    tok_step norm, pretok, dec, post; /* type 0: absent (null in the file) */
    int32_t n_ids;                    /* highest id + 1 over model and added tokens */
    uint8_t *special;                 /* [n_ids] 1 for added tokens flagged special */
    char *bos, *eos;                  /* from tokenizer_config.json */
    int32_t bos_id, eos_id;
    int cleanup;          /* clean_up_tokenization_spaces */
    int add_bos, add_eos; /* tokenizer.model only: what add_special adds */
};

/* Loads the components of a tokenizer.json tree into a zeroed t (tokenizer.c; also the
 * tree tok_ggml.c builds from GGUF keys). On an error t holds what was built: tok_free it. */
int tok_load_root(struct tokenizer *t, const json_t *root, strata_err *err);

/* The token string of id (added content, else model vocab); NULL for an unknown id. */
const char *tok_token_str(const struct tokenizer *t, int32_t id, size_t *len);

#endif
