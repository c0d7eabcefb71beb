/* grammar.h - a context-free grammar over Unicode text, compiled to the flat form the
 * byte-level matcher (grammar_match.c) runs. Internal to engine/constrain; the text form
 * it is parsed from is llama.cpp's GBNF (gbnf.c).
 *
 * A grammar is rules; a rule is alternatives; an alternative is a run of elements ending
 * with GK_END. Repetitions and groups of the text form become auxiliary rules, except the
 * two the matcher runs without a stack: one code point of a class (GK_CLASS) and any
 * number of them (GK_STAR, the loop that string bodies are made of, which the mask walk
 * can skip through whole subtrees of the vocabulary). Literal text is its UTF-8 bytes, one
 * GK_BYTE each. */
#ifndef STRATA_GRAMMAR_H
#define STRATA_GRAMMAR_H

#include <stdint.h>

#include "engine/base/err.h"

enum gram_kind {
    GK_END,   /* the end of an alternative (arg unused) */
    GK_BYTE,  /* one byte, arg (0..255) */
    GK_CLASS, /* one code point of class arg, written as UTF-8 */
    GK_STAR,  /* zero or more code points of class arg */
    GK_RULE,  /* rule arg */
};

typedef struct gram_elem {
    uint32_t kind : 3;
    uint32_t arg : 29;
} gram_elem;

/* Limits the parser enforces so a request's grammar cannot make the matcher's tables
 * unbounded (each is a 400 naming the limit). */
#define GRAMMAR_MAX_TEXT (1u << 20)  /* bytes of grammar text */
#define GRAMMAR_MAX_ELEMS (1u << 20) /* elements after repetitions are expanded */
#define GRAMMAR_MAX_REPEAT 1000      /* the largest m or n in x{m,n} */

typedef struct grammar {
    gram_elem *elems; /* [n_elems] every alternative's elements, each run ending GK_END */
    uint32_t n_elems;
    uint32_t *alts; /* [n_alts] index in elems of each alternative's first element */
    uint32_t n_alts;
    uint32_t *rules; /* [n_rules + 1] rule r's alternatives are alts[rules[r] .. rules[r + 1]) */
    uint32_t n_rules;
    char **names; /* [n_rules] for messages; auxiliary rules are named "<rule>-<n>" */
    /* Classes: sets of code points as sorted, disjoint, non-adjacent inclusive ranges
     * (pairs lo, hi), never holding a surrogate (U+D800..U+DFFF: UTF-8 cannot write one)
     * and never empty. Class k's pairs are ranges[2 * class_off[k] .. 2 * class_off[k + 1]). */
    uint32_t *ranges;
    uint32_t *class_off; /* [n_classes + 1] */
    uint32_t n_classes;
    uint32_t root; /* the rule named "root" */
} grammar;

/* Parses GBNF text (len bytes, need not be NUL-terminated) into *out. Caller frees with
 * grammar_free. Errors are STRATA_EINVALID with a message naming the line and column or
 * the rule: a syntax error, an undefined rule, no rule named root, a rule defined twice, a
 * left-recursive rule (one that can reach itself before reading a byte), a rule that can
 * derive no finite text, a limit above; STRATA_ENOMEM. */
int grammar_parse(grammar **out, const char *text, size_t len, strata_err *err);
void grammar_free(grammar *g); /* accepts NULL */

#endif
