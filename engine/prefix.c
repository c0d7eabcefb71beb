/* prefix.c - the prefix cache of engine/prefix.h: a tree of kv blocks keyed by hash
 * chains, state snapshots on some of its nodes, least recently used out first. */
#include "engine/prefix.h"

#include <stdlib.h>
#include <string.h>

struct prefix_node {
    uint64_t key; /* hash chain of every token up to this block's end */
    uint64_t used;
    int parent; /* node index, -1 for a first block */
    int next;   /* next node of the same map bucket */
    int n_child;
    int depth; /* blocks from the start: this block covers [(depth-1)·B, depth·B) */
    int32_t block;
    int snap; /* snapshot buffer, -1: none */
    int live;
};

static uint64_t prefix_hash(uint64_t parent, const int32_t *toks, int n) {
    uint64_t h = parent ^ 0xcbf29ce484222325ull;
    for (int i = 0; i < n; i++) {
        uint32_t t = (uint32_t)toks[i];
        for (int b = 0; b < 4; b++) h = (h ^ ((t >> (8 * b)) & 0xff)) * 0x100000001b3ull;
    }
    h ^= h >> 33; /* splitmix finish: FNV's low bits mix poorly */
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h;
}

int prefix_init(prefix_cache *pc, model *m, int slots, int64_t budget, int interval,
                strata_err *err) {
    memset(pc, 0, sizeof *pc);
    const model_info *mi = model_get_info(m);
    pc->m = m;
    pc->block = mi->kv_block > 0 ? mi->kv_block : 16;
    pc->interval = interval > 0 ? interval : 1024;
    pc->interval = (pc->interval + pc->block - 1) / pc->block * pc->block;
    pc->snap_bytes = (size_t)(mi->slot_state_bytes > 0 ? mi->slot_state_bytes : 1);
    /* the budget holds the slots' pending buffers too; the cache keeps at least one */
    int64_t n = budget / (int64_t)pc->snap_bytes - slots;
    pc->n_cache_snap = n < 1 ? 1 : n > 1 << 20 ? 1 << 20 : (int)n;
    pc->n_snap = pc->n_cache_snap + slots;
    pc->cap = (mi->kv_blocks > 0 ? mi->kv_blocks : 1) + 1;
    for (pc->map_cap = 64; pc->map_cap < 2 * pc->cap; pc->map_cap *= 2) {
    }
    backend *b = model_backend(m);
    pc->snap_mem = b->ops->alloc(b, (size_t)pc->n_snap * pc->snap_bytes);
    pc->snap_free = malloc(sizeof(int) * (size_t)pc->n_cache_snap);
    pc->pending = malloc(sizeof(int) * (size_t)slots);
    pc->nodes = calloc((size_t)pc->cap, sizeof *pc->nodes);
    pc->node_free = malloc(sizeof(int) * (size_t)pc->cap);
    pc->map = malloc(sizeof(int) * (size_t)pc->map_cap);
    pc->toks = malloc(sizeof(int32_t) * (size_t)pc->cap * (size_t)pc->block);
    pc->path = malloc(sizeof(int32_t) * (size_t)pc->cap);
    if (!pc->snap_mem || !pc->snap_free || !pc->pending || !pc->nodes || !pc->node_free ||
        !pc->map || !pc->toks || !pc->path) {
        int64_t mib = (int64_t)pc->n_snap * (int64_t)pc->snap_bytes >> 20;
        prefix_deinit(pc);
        return strata_err_set(err, STRATA_ENOMEM,
                              "prefix cache: cannot allocate %lld MiB of state snapshots "
                              "(--prefix-cache-memory)",
                              (long long)mib);
    }
    for (int i = 0; i < pc->n_cache_snap; i++) pc->snap_free[i] = pc->n_cache_snap - 1 - i;
    pc->n_snap_free = pc->n_cache_snap;
    for (int s = 0; s < slots; s++) pc->pending[s] = pc->n_cache_snap + s;
    for (int i = 0; i < pc->cap; i++) pc->node_free[i] = pc->cap - 1 - i;
    pc->n_node_free = pc->cap;
    for (int i = 0; i < pc->map_cap; i++) pc->map[i] = -1;
    return 0;
}

void prefix_deinit(prefix_cache *pc) {
    if (pc->nodes && pc->m)
        for (int i = 0; i < pc->cap; i++)
            if (pc->nodes[i].live) model_kv_unref(pc->m, pc->nodes[i].block);
    if (pc->snap_mem) {
        backend *b = model_backend(pc->m);
        b->ops->free(b, pc->snap_mem);
    }
    free(pc->snap_free);
    free(pc->pending);
    free(pc->nodes);
    free(pc->node_free);
    free(pc->map);
    free(pc->toks);
    free(pc->path);
    memset(pc, 0, sizeof *pc);
}

static int32_t *node_toks(const prefix_cache *pc, int i) {
    return pc->toks + (size_t)i * (size_t)pc->block;
}

static void *snap_buf(const prefix_cache *pc, int s) {
    return pc->snap_mem + (size_t)s * pc->snap_bytes;
}

/* The node of the block toks[0, B) following parent, or -1. */
static int prefix_find(const prefix_cache *pc, int parent, uint64_t key, const int32_t *toks) {
    for (int i = pc->map[key & (uint64_t)(pc->map_cap - 1)]; i >= 0; i = pc->nodes[i].next) {
        const prefix_node *n = &pc->nodes[i];
        if (n->key == key && n->parent == parent &&
            !memcmp(node_toks(pc, i), toks, sizeof(int32_t) * (size_t)pc->block))
            return i;
    }
    return -1;
}

static void prefix_drop(prefix_cache *pc, int i) {
    prefix_node *n = &pc->nodes[i];
    int *p = &pc->map[n->key & (uint64_t)(pc->map_cap - 1)];
    while (*p != i) p = &pc->nodes[*p].next;
    *p = n->next;
    if (n->parent >= 0) pc->nodes[n->parent].n_child--;
    if (n->snap >= 0) pc->snap_free[pc->n_snap_free++] = n->snap;
    model_kv_unref(pc->m, n->block);
    n->live = 0;
    pc->n_nodes--;
    pc->node_free[pc->n_node_free++] = i;
}

/* The least recently used leaf not touched in this call (used < tick); with only_sole,
 * only one whose block nobody else holds (dropping it frees a block). -1: none. */
static int prefix_lru_leaf(const prefix_cache *pc, int only_sole) {
    int best = -1;
    for (int i = 0; i < pc->cap; i++) {
        const prefix_node *n = &pc->nodes[i];
        if (!n->live || n->n_child || n->used >= pc->tick) continue;
        if (only_sole && model_kv_refs(pc->m, n->block) > 1) continue;
        if (best < 0 || n->used < pc->nodes[best].used) best = i;
    }
    return best;
}

int prefix_make_room(prefix_cache *pc, int need) {
    pc->tick++;
    while (model_kv_free(pc->m) < need) {
        int i = prefix_lru_leaf(pc, 1);
        if (i < 0) break;
        prefix_drop(pc, i);
    }
    return model_kv_free(pc->m);
}

/* A snapshot buffer for the cache: a free one, else the least recently used node's (one
 * on the path being stored too: a later state of the same tokens is worth more). */
static int prefix_take_snap(prefix_cache *pc) {
    if (pc->n_snap_free) return pc->snap_free[--pc->n_snap_free];
    int best = -1;
    for (int i = 0; i < pc->cap; i++) {
        const prefix_node *n = &pc->nodes[i];
        if (n->live && n->snap >= 0 && (best < 0 || n->used < pc->nodes[best].used)) best = i;
    }
    if (best < 0) return -1;
    int s = pc->nodes[best].snap;
    pc->nodes[best].snap = -1;
    return s;
}

/* The nodes of slot's blocks covering toks[0, pos), made where missing; returns the last
 * one (-1 when the slot's table is shorter or no node could be made). */
static int prefix_path(prefix_cache *pc, int slot, const int32_t *toks, int pos) {
    const int32_t *ids;
    int n_blk = pos / pc->block, parent = -1;
    if (model_kv_table(pc->m, slot, &ids) < n_blk) return -1;
    uint64_t key = 0;
    for (int j = 0; j < n_blk; j++) {
        const int32_t *bt = toks + (size_t)j * pc->block;
        key = prefix_hash(key, bt, pc->block);
        int i = prefix_find(pc, parent, key, bt);
        if (i < 0) {
            if (!pc->n_node_free) {
                int v = prefix_lru_leaf(pc, 0);
                if (v < 0) return -1;
                prefix_drop(pc, v);
            }
            i = pc->node_free[--pc->n_node_free];
            prefix_node *n = &pc->nodes[i];
            *n = (prefix_node){.key = key,
                               .parent = parent,
                               .depth = j + 1,
                               .block = ids[j],
                               .snap = -1,
                               .live = 1};
            memcpy(node_toks(pc, i), bt, sizeof(int32_t) * (size_t)pc->block);
            size_t bucket = key & (uint64_t)(pc->map_cap - 1);
            n->next = pc->map[bucket];
            pc->map[bucket] = i;
            model_kv_ref(pc->m, ids[j]);
            if (parent >= 0) pc->nodes[parent].n_child++;
            pc->n_nodes++;
        }
        pc->nodes[i].used = pc->tick;
        parent = i;
    }
    return parent;
}

void prefix_store(prefix_cache *pc, int slot, const int32_t *toks, int pos) {
    pc->tick++;
    int i = prefix_path(pc, slot, toks, pos);
    if (i < 0 || pc->nodes[i].snap >= 0) return; /* the same tokens' state is there */
    int s = prefix_take_snap(pc);
    if (s < 0) return;
    pc->nodes[i].snap = s;
    model_state_save(pc->m, slot, snap_buf(pc, s));
}

void prefix_save_pending(prefix_cache *pc, int slot) {
    model_state_save(pc->m, slot, snap_buf(pc, pc->pending[slot]));
}

void prefix_commit(prefix_cache *pc, int slot, const int32_t *toks, int pos) {
    pc->tick++;
    int i = prefix_path(pc, slot, toks, pos);
    if (i < 0 || pc->nodes[i].snap >= 0) return;
    int s = prefix_take_snap(pc);
    if (s < 0) return;
    /* the pending buffer joins the cache and the slot takes the one freed */
    pc->nodes[i].snap = pc->pending[slot];
    pc->pending[slot] = s;
}

int prefix_restore(prefix_cache *pc, int slot, const int32_t *toks, int n, int limit) {
    pc->tick++;
    int parent = -1, best = -1;
    uint64_t key = 0;
    for (int j = 0; (j + 1) * pc->block < limit && (j + 1) * pc->block <= n; j++) {
        const int32_t *bt = toks + (size_t)j * pc->block;
        key = prefix_hash(key, bt, pc->block);
        int i = prefix_find(pc, parent, key, bt);
        if (i < 0) break;
        pc->nodes[i].used = pc->tick;
        if (pc->nodes[i].snap >= 0) best = i;
        parent = i;
    }
    if (best < 0) return 0;
    int d = pc->nodes[best].depth;
    for (int i = best; i >= 0; i = pc->nodes[i].parent)
        pc->path[pc->nodes[i].depth - 1] = pc->nodes[i].block;
    model_kv_attach(pc->m, slot, pc->path, d);
    model_state_load(pc->m, slot, snap_buf(pc, pc->nodes[best].snap));
    return d * pc->block;
}

int prefix_nodes(const prefix_cache *pc) { return pc->n_nodes; }
int prefix_snapshots(const prefix_cache *pc) { return pc->n_cache_snap - pc->n_snap_free; }
