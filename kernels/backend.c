/* backend.c - what every caller may ask of any backend: the generic wrappers of
 * kernels/backend.h over the ops table, optional slots included. */
#include "kernels/backend.h"

void backend_destroy(backend *b) {
    if (b) b->ops->destroy(b);
}

const char *backend_name(const backend *b) { return b->ops->name; }

int backend_supports(const backend *b, int op, dtype dt) {
    const backend_ops *o = b->ops;
    if (o->supports) return o->supports(b, op, dt);
    switch (op) {
    case BK_OP_READ_BANDWIDTH: return o->read_bandwidth != NULL;
    case BK_OP_MEMORY: return o->memory != NULL;
    case BK_OP_LAST_ERROR: return o->last_error != NULL;
    case BK_OP_GRAPHS: return o->graph_begin && o->graph_end && o->graph_sync;
    case BK_OP_SAMPLE: return o->sample != NULL;
    case BK_OP_EMBED_FED: return o->embed_fed != NULL;
    case BK_OP_WEIGHT_MAP: return o->weight_map && o->weight_unmap;
    case BK_OP_PROFILE: return o->profile && o->profile_read;
    case BK_OP_COMPUTE_DTYPE: return o->compute_dtype != NULL;
    case BK_OP_HOST_TASKS: return o->host_tasks != NULL;
    default:
        return op >= 0 && op < BK_OP_FIRST_OPTIONAL &&
               (dt == DTYPE_COUNT || dt == DTYPE_BF16 || dt == DTYPE_F16 || dt == DTYPE_F32);
    }
}

int backend_memory(const backend *b, backend_mem *m) {
    if (!b->ops->memory) return -1;
    b->ops->memory(b, m);
    return 0;
}

void backend_host_tasks(backend *b, void (*fn)(void *ctx, int i), void *ctx, int n) {
    if (b->ops->host_tasks) {
        b->ops->host_tasks(b, fn, ctx, n);
        return;
    }
    for (int i = 0; i < n; i++) fn(ctx, i);
}

void backend_compute_dtype(backend *b, dtype dt) {
    if (b->ops->compute_dtype) b->ops->compute_dtype(b, dt);
}

int backend_weight_map(backend *b, const bk_weight *host, bk_weight *dev, strata_err *err) {
    if (!b->ops->weight_map || !b->ops->weight_unmap)
        return strata_err_set(err, STRATA_EUNSUPPORTED, "%s backend: no mapped weights",
                              b->ops->name);
    return b->ops->weight_map(b, host, dev, err);
}

int backend_graph_begin(backend *b, uint64_t key, strata_err *err) {
    if (!b->ops->graph_begin || !b->ops->graph_end || !b->ops->graph_sync)
        return strata_err_set(err, STRATA_EUNSUPPORTED, "%s backend: no graphs", b->ops->name);
    return b->ops->graph_begin(b, key, err);
}

int backend_graph_end(backend *b, int wait, strata_err *err) {
    if (!b->ops->graph_end)
        return strata_err_set(err, STRATA_EUNSUPPORTED, "%s backend: no graphs", b->ops->name);
    return b->ops->graph_end(b, wait, err);
}

int backend_graph_sync(backend *b, strata_err *err) {
    if (!b->ops->graph_sync)
        return strata_err_set(err, STRATA_EUNSUPPORTED, "%s backend: no graphs", b->ops->name);
    return b->ops->graph_sync(b, err);
}
