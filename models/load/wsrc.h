/* wsrc.h - where an architecture's weights come from: the model_wsrc interface it
 * binds through, and its two sources, a safetensors checkpoint or dummy weights of
 * the real shapes filled from a seeded generator (the model cannot tell which). */
#ifndef STRATA_WSRC_H
#define STRATA_WSRC_H

#include "kernels/backend.h"
#include "models/load/safetensors.h"

/* Where weights come from. bind() finds name, checks it against the expected shape
 * (ndim dims) and fills *w ready for the backend. optional is a set of ARCH_BIND_*
 * flags (0 = required, prepared for the backend). */
enum {
    ARCH_BIND_OPTIONAL = 1, /* a missing tensor is not an error (returns 1, w->data NULL) */
    ARCH_BIND_HOST = 2,     /* leave it in host memory, no weight_prepare: the model reads
                               it on the host (Gemma 4's per-layer-embedding table) */
};
typedef struct model_wsrc model_wsrc;
struct model_wsrc {
    int (*bind)(model_wsrc *src, const char *name, int ndim, const int64_t *shape, int optional,
                bk_weight *w, strata_err *err);
    void *impl;
};

typedef struct wsrc wsrc;

/* st is borrowed (NULL for dummy weights). want: dtype to convert to (DTYPE_COUNT keeps
 * the checkpoint's; dummy weights default to BF16). Caller frees with wsrc_destroy,
 * after the model that bound the weights is closed. */
int wsrc_create(wsrc **out, const st_model *st, const char *what, dtype want, uint64_t seed,
                backend *b, strata_err *err);
void wsrc_destroy(wsrc *w);
model_wsrc *wsrc_iface(wsrc *w);
/* Bytes this source allocated (dummy or converted weights). */
size_t wsrc_owned_bytes(const wsrc *w);

#endif
