/* prefix.h - the prefix cache: finished kv blocks keyed by the tokens before them, and
 * snapshots of a slot's recurrent state at block boundaries, so a request that starts
 * with tokens seen before restores them instead of computing them.
 *
 * A hybrid model's attention kv can be shared block by block, but its recurrent state
 * (DeltaNet S and conv windows, Mamba2 state, Gemma's sliding rings) exists only for the
 * position it was taken at. So a hit needs both: the chain of cached blocks covering
 * positions [0, P) and a snapshot taken at exactly P. The cache is a tree of blocks (a
 * node per block, its key the hash chain of every token up to its end, its tokens kept
 * to rule out collisions); a node may carry a snapshot. Snapshots live in one pool of
 * buffers in backend memory: the cache's (under a byte budget, least recently used
 * dropped first) and one per slot for the state a decoding sequence passes at each block
 * boundary, committed when the sequence finishes. Nodes hold a reference to their kv
 * block; when the model's pool runs short the least recently used leaves are dropped.
 * Step thread only. */
#ifndef STRATA_PREFIX_H
#define STRATA_PREFIX_H

#include <stdint.h>

#include "engine/base/err.h"
#include "models/model.h"

typedef struct prefix_node prefix_node;

typedef struct prefix_cache {
    model *m;
    int block;    /* positions per kv block */
    int interval; /* prefill snapshot points: every interval positions (a block multiple) */
    size_t snap_bytes;
    int n_snap; /* buffers: the cache's, then one pending per slot */
    int n_cache_snap;
    char *snap_mem; /* [n_snap, snap_bytes] backend memory */
    int *snap_free; /* stack of the cache's unused buffers */
    int n_snap_free;
    int *pending;       /* [slots] each slot's buffer */
    prefix_node *nodes; /* [cap] */
    int cap, n_nodes;
    int *node_free; /* stack of unused node indices */
    int n_node_free;
    int *map; /* open addressing on the key hash: node index or -1; [map_cap] */
    int map_cap;
    int32_t *toks; /* [cap, block] each node's tokens */
    int32_t *path; /* [cap] a restore's block ids */
    uint64_t tick;
} prefix_cache;

/* A cache for m with snapshot buffers within budget bytes, the slots' pending ones
 * included (the cache keeps at least one more whatever the budget); interval: prefill
 * snapshot spacing in positions (0: 1024). */
int prefix_init(prefix_cache *pc, model *m, int slots, int64_t budget, int interval,
                strata_err *err);
void prefix_deinit(prefix_cache *pc);

/* The longest cached prefix of toks[0, n) shorter than limit positions that has a
 * snapshot: restores it into slot (its blocks attached, its state loaded) and returns the
 * positions restored (0: nothing, the slot untouched). */
int prefix_restore(prefix_cache *pc, int slot, const int32_t *toks, int n, int limit);

/* Stores slot's state as it is now, at position pos (a block multiple), with the blocks
 * before it, keyed by toks[0, pos). Prefill calls it when every token is known. */
void prefix_store(prefix_cache *pc, int slot, const int32_t *toks, int pos);
/* Saves slot's state into its pending buffer (the tokens before pos may still be on the
 * device); prefix_commit stores it once they are known, keyed by toks[0, pos). */
void prefix_save_pending(prefix_cache *pc, int slot);
void prefix_commit(prefix_cache *pc, int slot, const int32_t *toks, int pos);

/* Drops least recently used leaves until the model's pool has need free blocks or no leaf
 * is left; returns the free blocks. */
int prefix_make_room(prefix_cache *pc, int need);

/* Nodes and snapshots held now. */
int prefix_nodes(const prefix_cache *pc);
int prefix_snapshots(const prefix_cache *pc);

#endif
