/* kv_pool.h - the blocks of a model's paged kv cache and which slot holds which.
 *
 * Every paged layer (full attention) of a model keeps its k and v rows in one pool of
 * n_blocks blocks of `block` positions (bk_kv.block); block i is row range
 * [i·block, (i+1)·block) of every paged layer alike, so one table per slot serves all of
 * them. A slot's table grows a block at a time as its sequence reaches new positions and
 * is dropped when the slot is released. Blocks are reference-counted: a prefix cache may
 * hold a finished block and hand it to the next sequence that starts with the same
 * tokens, which then only reads it (a sequence writes only positions past the blocks it
 * was given). The pool knows nothing of the device: it is ids and counts on the host.
 * Thread: the engine step thread, like the rest of the model. */
#ifndef STRATA_KV_POOL_H
#define STRATA_KV_POOL_H

#include <stdint.h>

#include "engine/base/err.h"

typedef struct kv_pool {
    int block;      /* positions per block */
    int n_blocks;   /* blocks in the pool */
    int slots;      /* tables */
    int max_blk;    /* entries per table: ceil(ctx / block) */
    int32_t *refs;  /* [n_blocks] holders of each block (slots and caches) */
    int32_t *srefs; /* [n_blocks] of them slots */
    int n_held;     /* blocks some slot holds (the rest of the used ones only a cache) */
    int32_t *free;  /* [n_blocks] stack of unheld blocks */
    int n_free;
    int32_t *tbl;        /* [slots, max_blk] each slot's blocks in position order */
    int32_t *n_tbl;      /* [slots] blocks in each table */
    int32_t *step;       /* a step's table rows (bk_batch.blk): slots of the widest width */
    int64_t peak_used;   /* most blocks held at once since init */
    int64_t block_bytes; /* of one block over every paged layer (set by the model) */
} kv_pool;

/* A pool of n_blocks blocks of `block` positions for slots sequences of up to ctx
 * positions. */
int kv_pool_init(kv_pool *p, int block, int n_blocks, int slots, int ctx, strata_err *err);
void kv_pool_deinit(kv_pool *p);

/* Grows slot's table to cover positions [0, end). STRATA_EBUSY when the pool has too few
 * free blocks (the table is left as it was); STRATA_ERANGE past ctx. */
int kv_pool_reserve(kv_pool *p, int slot, int end, strata_err *err);
/* Blocks slot still needs to cover [0, end). */
int kv_pool_need(const kv_pool *p, int slot, int end);
/* Drops every block of slot's table (one reference each). */
void kv_pool_release(kv_pool *p, int slot);
/* Starts slot's (empty) table with the n held blocks ids, taking a reference to each. */
void kv_pool_attach(kv_pool *p, int slot, const int32_t *ids, int n);
/* A reference more, or one less, to a block (a prefix cache's hold). */
void kv_pool_ref(kv_pool *p, int32_t id);
void kv_pool_unref(kv_pool *p, int32_t id);
/* Slot's table: *ids gets its blocks; returns how many. */
int kv_pool_table(const kv_pool *p, int slot, const int32_t **ids);
/* Blocks held by anyone; by some slot. */
static inline int kv_pool_used(const kv_pool *p) { return p->n_blocks - p->n_free; }
static inline int kv_pool_held(const kv_pool *p) { return p->n_held; }

/* The table width a step whose furthest position is end - 1 uses: a power of two, so a
 * captured graph's copy size changes only when a context doubles. */
int kv_pool_step_width(const kv_pool *p, int end);

#endif
