/* kv_pool.c - block ids and reference counts of the paged kv cache. */
#include "models/kv_pool.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

int kv_pool_init(kv_pool *p, int block, int n_blocks, int slots, int ctx, strata_err *err) {
    memset(p, 0, sizeof *p);
    if (block <= 0 || (block & (block - 1)) || n_blocks <= 0 || slots <= 0 || ctx <= 0)
        return strata_err_set(err, STRATA_EINVALID,
                              "kv pool: %d blocks of %d positions for %d slots of %d", n_blocks,
                              block, slots, ctx);
    p->block = block;
    p->n_blocks = n_blocks;
    p->slots = slots;
    p->max_blk = (int)(((int64_t)ctx + block - 1) / block);
    size_t tbl = (size_t)slots * (size_t)p->max_blk;
    size_t step = (size_t)slots * (size_t)kv_pool_step_width(p, ctx);
    p->refs = calloc((size_t)n_blocks, sizeof *p->refs);
    p->srefs = calloc((size_t)n_blocks, sizeof *p->srefs);
    p->free = malloc((size_t)n_blocks * sizeof *p->free);
    p->tbl = malloc(tbl * sizeof *p->tbl);
    p->n_tbl = calloc((size_t)slots, sizeof *p->n_tbl);
    p->step = calloc(step, sizeof *p->step);
    if (!p->refs || !p->srefs || !p->free || !p->tbl || !p->n_tbl || !p->step) {
        kv_pool_deinit(p);
        return strata_err_set(err, STRATA_ENOMEM, "kv pool: out of memory for %d blocks", n_blocks);
    }
    /* lowest ids on top: a short run touches the start of the pool only */
    for (int i = 0; i < n_blocks; i++) p->free[i] = n_blocks - 1 - i;
    p->n_free = n_blocks;
    return 0;
}

void kv_pool_deinit(kv_pool *p) {
    free(p->refs);
    free(p->srefs);
    free(p->free);
    free(p->tbl);
    free(p->n_tbl);
    free(p->step);
    memset(p, 0, sizeof *p);
}

int kv_pool_need(const kv_pool *p, int slot, int end) {
    int want = (int)(((int64_t)end + p->block - 1) / p->block);
    return want > p->n_tbl[slot] ? want - p->n_tbl[slot] : 0;
}

int kv_pool_reserve(kv_pool *p, int slot, int end, strata_err *err) {
    int need = kv_pool_need(p, slot, end);
    if (need == 0) return 0;
    if (p->n_tbl[slot] + need > p->max_blk)
        return strata_err_set(err, STRATA_ERANGE, "kv pool: position %d is past the context %d",
                              end - 1, p->max_blk * p->block);
    if (need > p->n_free)
        return strata_err_set(err, STRATA_EBUSY,
                              "kv pool: %d blocks needed, %d free of %d (--kv-cache-memory)", need,
                              p->n_free, p->n_blocks);
    int32_t *t = p->tbl + (size_t)slot * p->max_blk;
    for (int i = 0; i < need; i++) {
        int32_t id = p->free[--p->n_free];
        p->refs[id] = 1;
        p->srefs[id] = 1;
        p->n_held++;
        t[p->n_tbl[slot]++] = id;
    }
    if (kv_pool_used(p) > p->peak_used) p->peak_used = kv_pool_used(p);
    return 0;
}

void kv_pool_unref(kv_pool *p, int32_t id) {
    assert(id >= 0 && id < p->n_blocks && p->refs[id] > 0);
    if (--p->refs[id] == 0) p->free[p->n_free++] = id;
}

void kv_pool_ref(kv_pool *p, int32_t id) {
    assert(id >= 0 && id < p->n_blocks && p->refs[id] > 0);
    p->refs[id]++;
}

void kv_pool_release(kv_pool *p, int slot) {
    const int32_t *t = p->tbl + (size_t)slot * p->max_blk;
    for (int i = 0; i < p->n_tbl[slot]; i++) {
        if (--p->srefs[t[i]] == 0) p->n_held--;
        kv_pool_unref(p, t[i]);
    }
    p->n_tbl[slot] = 0;
}

void kv_pool_attach(kv_pool *p, int slot, const int32_t *ids, int n) {
    assert(p->n_tbl[slot] == 0 && n <= p->max_blk);
    int32_t *t = p->tbl + (size_t)slot * p->max_blk;
    for (int i = 0; i < n; i++) {
        kv_pool_ref(p, ids[i]);
        if (p->srefs[ids[i]]++ == 0) p->n_held++;
        t[i] = ids[i];
    }
    p->n_tbl[slot] = n;
}

int kv_pool_table(const kv_pool *p, int slot, const int32_t **ids) {
    *ids = p->tbl + (size_t)slot * p->max_blk;
    return p->n_tbl[slot];
}

int kv_pool_step_width(const kv_pool *p, int end) {
    int need = (int)(((int64_t)end + p->block - 1) / p->block), w = 1;
    while (w < need) w *= 2;
    return w;
}
