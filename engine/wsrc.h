/* wsrc.h - weight sources for models/arch.h: a safetensors checkpoint, or dummy
 * weights of the real shapes filled from a seeded generator. */
#ifndef STRATA_WSRC_H
#define STRATA_WSRC_H

#include "engine/safetensors.h"
#include "models/arch.h"

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
