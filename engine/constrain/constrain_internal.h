/* constrain_internal.h - the pieces of engine/constrain shared by its files.
 *
 * json_pda.c (the byte-level JSON recognizer and the mask walk over the token trie),
 * constrain_vocab.c (every token's bytes, the trie), constrain.c (the public calls). Nothing
 * here is public: engine/constrain/constrain.h is the door. */
#ifndef STRATA_CONSTRAIN_INTERNAL_H
#define STRATA_CONSTRAIN_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

/* ---- the JSON recognizer (json_pda.c) ------------------------------------------------ */

#define JSON_PDA_MAX_DEPTH 64 /* containers open at once (the top-level object counts) */
/* Whitespace bytes in one run between two JSON tokens (and before the top-level object).
 * Unbounded whitespace is where a constrained model goes to loop forever ("\n\n\n..."); 40
 * still holds a line break and 4-space indentation nine levels deep, so pretty-printed
 * output is never cut. */
#define JSON_PDA_MAX_WS 40
/* Digits of a number's integer part and of its exponent. jansson (which the server reads
 * JSON with) refuses an integer past int64 and a real that overflows a double; 18 digits
 * times 10^99 stays inside both, so any number the grammar lets through parses. */
#define JSON_PDA_MAX_INT_DIGITS 18
#define JSON_PDA_MAX_EXP_DIGITS 2

/* One position in the grammar. Small and flat on purpose: the mask walk copies it at every
 * trie node it enters. */
typedef struct json_pda {
    uint64_t stack; /* bit d: the container at depth d + 1 is an object (clear: an array) */
    uint8_t depth;  /* containers open, 0..JSON_PDA_MAX_DEPTH */
    uint8_t mode;   /* JSON_PDA_* below */
    uint8_t ws;     /* whitespace bytes in the current run */
    uint8_t aux;    /* the mode's counter: digits so far, literal offset, \u all-zero flag */
    uint8_t key;    /* the string being read is an object key */
} json_pda;

/* Modes. The string modes come first so "inside a string" is one compare. */
enum {
    JSON_PDA_STR,   /* inside a string, between characters */
    JSON_PDA_ESC,   /* after a backslash */
    JSON_PDA_U1,    /* \u: first hex digit */
    JSON_PDA_U2,    /* \u: second digit (aux: digits so far were all 0) */
    JSON_PDA_U3,    /* \u: third */
    JSON_PDA_U4,    /* \u: fourth */
    JSON_PDA_U2D,   /* \uD: second digit decides between BMP and a surrogate */
    JSON_PDA_H3,    /* high surrogate \uD[8-B]: third digit */
    JSON_PDA_H4,    /* fourth */
    JSON_PDA_LBS,   /* after a high surrogate: the low one's backslash */
    JSON_PDA_LU,    /* its u */
    JSON_PDA_L1,    /* its D */
    JSON_PDA_L2,    /* its [C-F] (then U3, U4) */
    JSON_PDA_C1,    /* UTF-8: one continuation byte to go */
    JSON_PDA_C2,    /* two */
    JSON_PDA_C3,    /* three */
    JSON_PDA_E0,    /* after E0: A0..BF (no overlong), then one */
    JSON_PDA_ED,    /* after ED: 80..9F (no surrogate), then one */
    JSON_PDA_F0,    /* after F0: 90..BF (no overlong), then two */
    JSON_PDA_F4,    /* after F4: 80..8F (not past U+10FFFF), then two */
    JSON_PDA_START, /* before the top-level object */
    JSON_PDA_OBJ,   /* after {: a key or } */
    JSON_PDA_KEY,   /* after , in an object: a key */
    JSON_PDA_COLON, /* after a key */
    JSON_PDA_VALUE, /* after : or , in an array: a value */
    JSON_PDA_ARR,   /* after [: a value or ] */
    JSON_PDA_AFTER, /* after a value in a container: , or the closer */
    JSON_PDA_NEG,   /* after -: a digit */
    JSON_PDA_ZERO,  /* a leading 0 (nothing but ., e or the end may follow) */
    JSON_PDA_INT,   /* integer digits (aux: how many) */
    JSON_PDA_FRAC0, /* after .: a digit */
    JSON_PDA_FRAC,  /* fraction digits */
    JSON_PDA_EXP0,  /* after e: sign or digit */
    JSON_PDA_EXPS,  /* after the exponent's sign: a digit */
    JSON_PDA_EXP,   /* exponent digits (aux: how many) */
    JSON_PDA_LIT,   /* inside true / false / null (aux: offset of the next letter) */
    JSON_PDA_DONE,  /* the top-level object closed: nothing more */
    JSON_PDA_LAST_STR = JSON_PDA_F4,
};

void json_pda_init(json_pda *s);
/* Feeds n bytes: 0 when every one fits (*s moved past them), -1 when one does not (*s is
 * then unchanged). */
int json_pda_feed(json_pda *s, const uint8_t *b, size_t n);
/* 1 when every one of the n bytes fits in a string started in JSON_PDA_STR, never closing
 * it: such bytes fit whatever else the state holds (the trie's string-safe flag). */
int json_pda_string_safe(const uint8_t *b, size_t n);

/* ---- the vocabulary (constrain_vocab.c) ---------------------------------------------- */

/* A trie node. The nodes are stored in preorder, so a node's subtree is the index range
 * [i, end), its first child (if any) is i + 1, and the next sibling is end. The fitting
 * tokens are sorted by their bytes, so a subtree's tokens are the range [tok, nodes[end].tok)
 * of vocab->sorted, those ending at the node itself are [tok, nodes[i + 1].tok), and a
 * sentinel node after the last one closes both. */
typedef struct constrain_node {
    uint32_t end;   /* index past this node's subtree */
    uint32_t tok;   /* first of its subtree's tokens in sorted[] */
    uint16_t depth; /* bytes from the root (the root: 0) */
    uint8_t byte;   /* the byte on the edge into this node */
    uint8_t safe;   /* CONSTRAIN_NODE_* flags of the bytes after this node in every token below */
} constrain_node;

/* They fit from JSON_PDA_STR without closing the string. */
#define CONSTRAIN_NODE_JSTR 1
/* Read from a character boundary they are valid UTF-8, the last character perhaps cut
 * short (what a grammar's string loop needs besides its ASCII bytes; grammar_match.c). */
#define CONSTRAIN_NODE_UTF8 2

struct constrain_vocab {
    int n_ids;             /* the model's vocabulary rows */
    uint32_t *off;         /* [n_ids] start of the token's bytes in bytes[] */
    uint32_t *len;         /* [n_ids] their length; 0: the token never fits */
    uint8_t *bytes;        /* every fitting token's bytes, back to back */
    int32_t *sorted;       /* [n_sorted] the fitting ids ordered by bytes, then id */
    int n_sorted;          /* fitting tokens */
    constrain_node *nodes; /* [n_nodes + 1] the trie, root first, then a sentinel */
    uint32_t n_nodes;      /* root included, sentinel not */
    int max_len;           /* the longest token's bytes: the walk's deepest node */
    /* The special tokens' texts (their added-token content), apart from the trie: they fit
     * only a grammar made with CONSTRAIN_SPECIALS, each checked whole. */
    int n_specials;
    int32_t *spec_id;   /* [n_specials] ascending */
    uint32_t *spec_off; /* [n_specials] start of its text in spec_bytes */
    uint32_t *spec_len; /* [n_specials] its length (never 0) */
    uint8_t *spec_bytes;
};

/* ---- grammars (grammar.h, gbnf.c, grammar_match.c) ----------------------------------- */

#include "engine/constrain/grammar.h"

/* A grammar's lazily built DFA: positions are set ids (0: the empty set, no way on);
 * calls returning a set id return UINT32_MAX when out of memory. */
typedef struct gmatch gmatch;
int gmatch_create(gmatch **out, const grammar *g); /* g borrowed; -1: out of memory */
void gmatch_free(gmatch *m);                       /* accepts NULL */
uint32_t gmatch_start(gmatch *m);                  /* the set before any byte */
uint32_t gmatch_feed(gmatch *m, uint32_t set, const uint8_t *b, size_t n);
/* 0: more must come, 1: the text may end here, 2: nothing may follow */
int gmatch_complete(const gmatch *m, uint32_t set);
size_t gmatch_size(const gmatch *m); /* bytes of its tables */
/* bits[v->n_nodes]: the trie subtrees a set looping on a string-like class allows whole.
 * 0 when the grammar has no such class (bits unused), else 1. */
int gmatch_fast_bits(const gmatch *m, const struct constrain_vocab *v, uint8_t *bits);
/* As json_pda_mask_walk, from set; bits from gmatch_fast_bits or NULL; states: max_len + 1
 * entries. -1 when out of memory. */
int gmatch_mask_walk(gmatch *m, uint32_t set, const struct constrain_vocab *v, const uint8_t *bits,
                     uint32_t *states, uint8_t *allow, int n);
/* Moves set into a fresh matcher replacing *m (the old tables dropped); NONE on failure,
 * *m then unchanged. */
uint32_t gmatch_compact(gmatch **m, uint32_t set);

/* Sets allow[] for the tokens sorted[lo, hi) of a trie walk (ids past n are rows the
 * caller left out); how many. Both walks (json_pda.c, grammar_match.c) mark this way. */
static inline int constrain_mark(const int32_t *sorted, uint32_t lo, uint32_t hi, uint8_t *allow,
                                 int n) {
    int count = 0;
    for (uint32_t k = lo; k < hi; k++) {
        int32_t id = sorted[k];
        if (id < n) allow[id] = 1, count++;
    }
    return count;
}

/* Node i of a preorder trie walk, accepted: marks every token of its subtree when whole,
 * else the tokens that end at it (the walk then descends into it, having stored the state
 * after its byte); adds how many to *count and returns the next node to visit. */
static inline uint32_t constrain_walk_accept(const struct constrain_vocab *v, uint32_t i, int whole,
                                             uint8_t *allow, int n, int *count) {
    const constrain_node *nd = &v->nodes[i];
    uint32_t next = whole ? nd->end : i + 1;
    *count += constrain_mark(v->sorted, nd->tok, v->nodes[next].tok, allow, n);
    return next;
}

/* One sequence's grammar position (constrain.c): the JSON recognizer, or a grammar. */
struct constrain {
    const struct constrain_vocab *v; /* borrowed */
    json_pda state;
    json_pda *walk; /* [v->max_len + 1] the mask walk's states, allocated at create */
    grammar *g;     /* owned; NULL: the JSON recognizer */
    gmatch *gm;
    uint32_t set;    /* the position in gm */
    uint8_t *bits;   /* [v->n_nodes] gmatch_fast_bits, or NULL */
    uint32_t *gwalk; /* [v->max_len + 1] */
    int specials;    /* CONSTRAIN_SPECIALS: the vocab's special tokens may fit */
};

/* allow[id] = 1 (ids < n) for every token whose bytes fit after *s; states: max_len + 1
 * scratch entries. The caller zeroed allow. Returns how many it set. */
int json_pda_mask_walk(const json_pda *s, const struct constrain_vocab *v, json_pda *states,
                       uint8_t *allow, int n);

#endif
