/* tok_added.c - added-token matching (spec 2.6): a byte trie per class (normalized or
 * not) searched leftmost-longest like HF's aho-corasick automaton, then HF's
 * AddedVocabulary::find_matches rules for single_word / lstrip / rstrip. */
#include <stdlib.h>
#include <string.h>

#include "engine/text/tok_internal.h"
#include "engine/base/utf8.h"

static int trie_init(tok_trie *t) {
    memset(t, 0, sizeof *t);
    if (tok_map_init(&t->edges, 1024)) return STRATA_ENOMEM;
    t->tok = malloc(64 * sizeof *t->tok);
    if (!t->tok) return STRATA_ENOMEM;
    t->cap_nodes = 64;
    t->n_nodes = 1;
    t->tok[0] = -1;
    return 0;
}

static void trie_free(tok_trie *t) {
    tok_map_free(&t->edges);
    free(t->tok);
    memset(t, 0, sizeof *t);
}

static int32_t trie_child(const tok_trie *t, int32_t node, uint8_t c) {
    char key[5];
    memcpy(key, &node, 4);
    key[4] = (char)c;
    return tok_map_get(&t->edges, key, 5);
}

static int trie_insert(tok_trie *t, const char *s, size_t n, int32_t id) {
    if (!n) return 0;
    int32_t node = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t child = trie_child(t, node, (uint8_t)s[i]);
        if (child < 0) {
            if (t->n_nodes == t->cap_nodes) {
                int32_t *p = realloc(t->tok, t->cap_nodes * 2 * sizeof *p);
                if (!p) return STRATA_ENOMEM;
                t->tok = p;
                t->cap_nodes *= 2;
            }
            child = (int32_t)t->n_nodes++;
            t->tok[child] = -1;
            char key[5];
            memcpy(key, &node, 4);
            key[4] = s[i];
            if (tok_map_put(&t->edges, key, 5, child)) return STRATA_ENOMEM;
        }
        node = child;
    }
    /* Identical contents always map to the same id (HF token_to_id), keep the first. */
    if (t->tok[node] < 0) t->tok[node] = id;
    t->first[(uint8_t)s[0] >> 3] |= (uint8_t)(1u << ((uint8_t)s[0] & 7));
    return 0;
}

int tok_added_build(tok_added *a, strata_err *err) {
    if (tok_map_init(&a->by_content, (uint32_t)a->n) || tok_map_init(&a->by_id, (uint32_t)a->n) ||
        trie_init(&a->raw) || trie_init(&a->norm))
        return strata_err_set(err, STRATA_ENOMEM, "out of memory");
    int need_word = 0;
    for (size_t i = 0; i < a->n; i++) {
        const tok_added_token *t = &a->tok[i];
        if (tok_map_put(&a->by_content, t->content, t->len, t->id) ||
            tok_map_put(&a->by_id, (const char *)&t->id, 4, (int32_t)i))
            return strata_err_set(err, STRATA_ENOMEM, "out of memory");
        need_word |= t->single_word;
    }
    /* HF chains special tokens before the others; duplicates map to the same id, so
     * insertion order does not change any match. */
    for (size_t i = 0; i < a->n; i++) {
        const tok_added_token *t = &a->tok[i];
        int32_t id = tok_map_get(&a->by_content, t->content, t->len);
        int r = t->normalized ? trie_insert(&a->norm, t->ncontent, t->nlen, id)
                              : trie_insert(&a->raw, t->content, t->len, id);
        if (r) return strata_err_set(err, STRATA_ENOMEM, "out of memory");
    }
    if (need_word) {
        static const char pat[] = "[\\p{Alphabetic}\\p{N}_]";
        OnigEncoding enc = ONIG_ENCODING_UTF8;
        onig_initialize(&enc, 1);
        OnigErrorInfo einfo;
        int r =
            onig_new(&a->word_re, (const OnigUChar *)pat, (const OnigUChar *)pat + sizeof pat - 1,
                     ONIG_OPTION_NONE, ONIG_ENCODING_UTF8, ONIG_SYNTAX_ONIGURUMA, &einfo);
        if (r) {
            a->word_re = NULL;
            if (r == ONIGERR_MEMORY) return strata_err_set(err, STRATA_ENOMEM, "out of memory");
            return strata_err_set(err, STRATA_EINVALID, "cannot compile the word-char regex");
        }
    }
    return 0;
}

void tok_added_free(tok_added *a) {
    for (size_t i = 0; i < a->n; i++) {
        free(a->tok[i].content);
        free(a->tok[i].ncontent);
    }
    free(a->tok);
    tok_map_free(&a->by_content);
    tok_map_free(&a->by_id);
    trie_free(&a->raw);
    trie_free(&a->norm);
    if (a->word_re) onig_free(a->word_re);
    memset(a, 0, sizeof *a);
}

const tok_added_token *tok_added_by_id(const tok_added *a, int32_t id) {
    int32_t i = tok_map_get(&a->by_id, (const char *)&id, 4);
    return i < 0 ? NULL : &a->tok[i];
}

/* Longest token of the trie starting at s[0..n): its length, *id; 0 when none. */
static size_t trie_longest(const tok_trie *t, const char *s, size_t n, int32_t *id) {
    int32_t node = 0;
    size_t best = 0;
    for (size_t i = 0; i < n; i++) {
        node = trie_child(t, node, (uint8_t)s[i]);
        if (node < 0) break;
        if (t->tok[node] >= 0) {
            best = i + 1;
            *id = t->tok[node];
        }
    }
    return best;
}

/* Rust char::is_alphanumeric() || c == '_' for the char at s[i..n): 1 or 0, or
 * STRATA_ENOMEM when oniguruma could not allocate its match stack. */
static int is_word_char(const tok_added *a, const char *s, size_t i, size_t n) {
    const OnigUChar *b = (const OnigUChar *)s;
    int r = onig_match(a->word_re, b, b + n, b + i, NULL, ONIG_OPTION_NONE);
    return r > 0 ? 1 : r == ONIG_MISMATCH || r == 0 ? 0 : STRATA_ENOMEM;
}

static size_t prev_char(const char *s, size_t i) {
    do i--;
    while (i > 0 && ((uint8_t)s[i] & 0xC0) == 0x80);
    return i;
}

static int span_push(tok_span **spans, size_t *n, size_t *cap, size_t st, size_t e, int32_t id) {
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 16;
        tok_span *p = realloc(*spans, c * sizeof *p);
        if (!p) return STRATA_ENOMEM;
        *spans = p;
        *cap = c;
    }
    (*spans)[(*n)++] = (tok_span){st, e, id};
    return 0;
}

int tok_added_split(const tok_added *a, const tok_trie *trie, const char *s, size_t n,
                    tok_span **spans, size_t *n_spans, size_t *cap) {
    size_t start_offset = 0;
    for (size_t i = 0; i < n;) {
        uint8_t c = (uint8_t)s[i];
        int32_t id = -1;
        size_t mlen = 0;
        if (trie->first[c >> 3] & (1u << (c & 7))) mlen = trie_longest(trie, s + i, n - i, &id);
        if (!mlen) {
            i++;
            continue;
        }
        size_t start = i, stop = i + mlen;
        i = stop; /* the automaton resumes after the match, whatever happens to it below */
        const tok_added_token *t = tok_added_by_id(a, id);
        if (t && t->single_word) {
            int before = start == 0 ? 0 : is_word_char(a, s, prev_char(s, start), n);
            int after = stop == n ? 0 : is_word_char(a, s, stop, n);
            if (before < 0 || after < 0) return STRATA_ENOMEM;
            if (before || after) continue;
        }
        if (t && t->lstrip) {
            size_t ns = start;
            while (ns > 0) {
                size_t pc = prev_char(s, ns);
                int k;
                if (!unicode_is_space(unicode_utf8_decode((const uint8_t *)s + pc, &k))) break;
                ns = pc;
            }
            start = ns > start_offset ? ns : start_offset;
        }
        if (t && t->rstrip) {
            while (stop < n) {
                int k;
                if (!unicode_is_space(unicode_utf8_decode((const uint8_t *)s + stop, &k))) break;
                stop += (size_t)k;
            }
        }
        if (start < start_offset) start = start_offset; /* rstrip overlap: never go back */
        if (start_offset < start && span_push(spans, n_spans, cap, start_offset, start, -1))
            return STRATA_ENOMEM;
        if (span_push(spans, n_spans, cap, start, stop, id)) return STRATA_ENOMEM;
        start_offset = stop;
    }
    if (start_offset < n && span_push(spans, n_spans, cap, start_offset, n, -1))
        return STRATA_ENOMEM;
    return 0;
}
