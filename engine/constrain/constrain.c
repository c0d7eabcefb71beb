/* constrain.c - one sequence's position in its grammar, and the calls the engine makes on
 * it each step: the mask of tokens that may come next, the move past the token picked, and
 * whether the output may end. The grammar is json_pda.c's; the vocabulary and its trie are
 * constrain_vocab.c's. */
#include <stdlib.h>
#include <string.h>

#include "engine/constrain/constrain.h"
#include "engine/constrain/constrain_internal.h"

int constrain_json_object(constrain **out, const constrain_vocab *v, strata_err *err) {
    constrain *c = calloc(1, sizeof *c);
    if (c) c->walk = malloc(((size_t)v->max_len + 1) * sizeof *c->walk);
    if (!c || !c->walk) {
        free(c);
        return strata_err_set(err, STRATA_ENOMEM, "constrain: out of memory");
    }
    c->v = v;
    json_pda_init(&c->state);
    *out = c;
    return 0;
}

void constrain_free(constrain *c) {
    if (!c) return;
    free(c->walk);
    free(c);
}

int constrain_mask(constrain *c, uint8_t *allow, int n) {
    if (n <= 0) return 0;
    memset(allow, 0, (size_t)n);
    return json_pda_mask_walk(&c->state, c->v, c->walk, allow, n);
}

int constrain_accept(constrain *c, int32_t id) {
    const constrain_vocab *v = c->v;
    if (id < 0 || id >= v->n_ids || !v->len[id]) return -1;
    return json_pda_feed(&c->state, v->bytes + v->off[id], v->len[id]);
}

int constrain_complete(const constrain *c) { return c->state.mode == JSON_PDA_DONE ? 2 : 0; }
