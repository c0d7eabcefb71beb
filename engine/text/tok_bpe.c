/* tok_bpe.c - the BPE model: initial symbols of a pre-token (spec 3.2), the heap merge
 * loop (spec 3.3, HF Word::merge_all) and the word cache (spec 3.4).
 *
 * The cache is shared by all threads behind a mutex that is only ever try-locked: a
 * busy cache is skipped, never waited on, and results never depend on it. */
#include <stdlib.h>
#include <string.h>

#include "engine/text/tok_internal.h"
#include "engine/base/utf8.h"

int tok_bpe_build_tables(tok_bpe *b, strata_err *err) {
    b->bmp_id = malloc(0x10000 * sizeof *b->bmp_id);
    if (!b->bmp_id) return strata_err_set(err, STRATA_ENOMEM, "out of memory");
    for (int i = 0; i < 0x10000; i++) b->bmp_id[i] = -1;
    for (int32_t id = 0; id < b->n_ids; id++) {
        if (b->id_len[id] == UINT32_MAX || b->id_len[id] > 3) continue;
        const uint8_t *s = (const uint8_t *)b->vocab.keys.p + b->id_off[id];
        int k = unicode_utf8_check(s, b->id_len[id]);
        if (k <= 0 || (uint32_t)k != b->id_len[id]) continue;
        int l;
        uint32_t cp = unicode_utf8_decode(s, &l);
        /* The vocab map decides on duplicates (a later key wins); ask it. */
        b->bmp_id[cp] = tok_map_get(&b->vocab, (const char *)s, (size_t)k);
    }
    for (int i = 0; i < 256; i++) {
        char name[8];
        static const char hex[] = "0123456789ABCDEF";
        name[0] = '<', name[1] = '0', name[2] = 'x', name[3] = hex[i >> 4];
        name[4] = hex[i & 15], name[5] = '>';
        b->byte_id[i] = tok_map_get(&b->vocab, name, 6);
    }
    b->cache = calloc(TOK_CACHE_SLOTS, sizeof *b->cache);
    if (!b->cache) return strata_err_set(err, STRATA_ENOMEM, "out of memory");
    pthread_mutex_init(&b->cache_lock, NULL);
    return 0;
}

void tok_bpe_free(tok_bpe *b) {
    if (b->cache) pthread_mutex_destroy(&b->cache_lock);
    free(b->cache);
    free(b->bmp_id);
    free(b->id_off);
    free(b->id_len);
    tok_map_free(&b->vocab);
    tok_pairmap_free(&b->merges);
    memset(b, 0, sizeof *b);
}

void tok_bpe_ws_free(tok_bpe_ws *ws) {
    free(ws->sym);
    free(ws->heap);
    memset(ws, 0, sizeof *ws);
}

/* ---- min-heap on (rank << 32 | pos) ------------------------------------------------ */

static void heap_push(struct tok_heap_ent *h, size_t *n, uint64_t key, int32_t id) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (h[p].key <= key) break;
        h[i] = h[p];
        i = p;
    }
    h[i].key = key;
    h[i].id = id;
}

static struct tok_heap_ent heap_pop(struct tok_heap_ent *h, size_t *n) {
    struct tok_heap_ent top = h[0], last = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && h[c + 1].key < h[c].key) c++;
        if (h[c].key >= last.key) break;
        h[i] = h[c];
        i = c;
    }
    if (*n) h[i] = last;
    return top;
}

static int ws_reserve(tok_bpe_ws *ws, size_t n) {
    if (ws->sym_cap < n) {
        size_t cap = n < 64 ? 64 : n;
        void *p = realloc(ws->sym, cap * sizeof *ws->sym);
        if (!p) return STRATA_ENOMEM;
        ws->sym = p;
        ws->sym_cap = cap;
    }
    /* Each merge pushes at most two entries on top of the n-1 initial ones. */
    if (ws->heap_cap < 3 * n + 4) {
        size_t cap = 3 * n + 4;
        void *p = realloc(ws->heap, cap * sizeof *ws->heap);
        if (!p) return STRATA_ENOMEM;
        ws->heap = p;
        ws->heap_cap = cap;
    }
    return 0;
}

static void sym_add(struct tok_sym *sym, size_t *n, int32_t id, int32_t len) {
    size_t i = (*n)++;
    sym[i].id = id;
    sym[i].len = len;
    sym[i].prev = (int32_t)i - 1;
    sym[i].next = -1;
    if (i) sym[i - 1].next = (int32_t)i;
}

static int cache_get(const tok_bpe *b, uint32_t h, const char *w, size_t n, tok_ids *out) {
    tok_bpe *mb = (tok_bpe *)b; /* the cache is the one mutable part; see file comment */
    if (pthread_mutex_trylock(&mb->cache_lock)) return 0;
    const tok_cache_slot *s = &b->cache[h & (TOK_CACHE_SLOTS - 1)];
    int32_t ids[TOK_CACHE_IDS];
    int nids = 0, hit = s->klen == n && s->hash == h && !memcmp(s->key, w, n);
    if (hit) {
        nids = s->nids;
        memcpy(ids, s->ids, (size_t)nids * sizeof *ids);
    }
    pthread_mutex_unlock(&mb->cache_lock);
    for (int i = 0; i < nids; i++)
        if (tok_ids_push(out, ids[i])) return -1;
    return hit;
}

static void cache_put(const tok_bpe *b, uint32_t h, const char *w, size_t n, const int32_t *ids,
                      size_t nids) {
    tok_bpe *mb = (tok_bpe *)b;
    if (pthread_mutex_trylock(&mb->cache_lock)) return;
    tok_cache_slot *s = &mb->cache[h & (TOK_CACHE_SLOTS - 1)];
    s->hash = h;
    s->klen = (uint16_t)n;
    s->nids = (uint16_t)nids;
    memcpy(s->key, w, n);
    memcpy(s->ids, ids, nids * sizeof *ids);
    pthread_mutex_unlock(&mb->cache_lock);
}

int tok_bpe_encode_word(const tok_bpe *b, tok_bpe_ws *ws, const char *w, size_t n, tok_ids *out) {
    if (!n) return 0;
    if (b->ignore_merges) {
        int32_t id = tok_map_get(&b->vocab, w, n);
        if (id >= 0) return tok_ids_push(out, id);
    }
    uint32_t h = 0;
    int cacheable = n >= 1 && n <= TOK_CACHE_KEY;
    if (cacheable) {
        h = tok_hash_bytes(w, n);
        int r = cache_get(b, h, w, n, out);
        if (r < 0) return STRATA_ENOMEM;
        if (r) return 0;
    }
    if (ws_reserve(ws, n)) return STRATA_ENOMEM;
    struct tok_sym *sym = ws->sym;
    size_t ns = 0;
    /* Initial symbols (HF BPE::merge_word), including its quirk that a pending unk is
     * only flushed by a char found in the vocab, not by byte-fallback tokens. */
    int32_t unk_id = -1, unk_len = 0;
    const uint8_t *p = (const uint8_t *)w;
    for (size_t i = 0; i < n;) {
        int k;
        uint32_t cp = unicode_utf8_decode(p + i, &k);
        int32_t id = cp < 0x10000 ? b->bmp_id[cp] : tok_map_get(&b->vocab, w + i, (size_t)k);
        if (id >= 0) {
            if (unk_id >= 0) sym_add(sym, &ns, unk_id, unk_len), unk_id = -1;
            sym_add(sym, &ns, id, k);
        } else {
            int fell_back = 0;
            if (b->byte_fallback) {
                fell_back = 1;
                for (int j = 0; j < k; j++) fell_back &= b->byte_id[p[i + j]] >= 0;
                if (fell_back)
                    for (int j = 0; j < k; j++) sym_add(sym, &ns, b->byte_id[p[i + j]], 1);
            }
            if (!fell_back && b->unk_id >= 0) {
                if (unk_id >= 0 && b->fuse_unk) unk_len += k;
                else {
                    if (unk_id >= 0) sym_add(sym, &ns, unk_id, unk_len);
                    unk_id = b->unk_id;
                    unk_len = k;
                }
            }
        }
        i += (size_t)k;
    }
    if (unk_id >= 0) sym_add(sym, &ns, unk_id, unk_len);

    /* Merge loop: lowest rank first, leftmost on ties; stale entries are skipped. */
    size_t nh = 0;
    uint32_t rank;
    int32_t nid;
    for (size_t i = 0; i + 1 < ns; i++)
        if (tok_pairmap_get(&b->merges, sym[i].id, sym[i + 1].id, &rank, &nid))
            heap_push(ws->heap, &nh, (uint64_t)rank << 32 | i, nid);
    while (nh) {
        struct tok_heap_ent top = heap_pop(ws->heap, &nh);
        size_t pos = (uint32_t)top.key;
        if (!sym[pos].len || sym[pos].next < 0) continue;
        size_t nx = (size_t)sym[pos].next;
        if (!tok_pairmap_get(&b->merges, sym[pos].id, sym[nx].id, &rank, &nid) || nid != top.id)
            continue;
        sym[pos].id = top.id;
        sym[pos].len += sym[nx].len;
        sym[pos].next = sym[nx].next;
        sym[nx].len = 0;
        if (sym[nx].next >= 0) sym[sym[nx].next].prev = (int32_t)pos;
        if (sym[pos].prev >= 0) {
            size_t pv = (size_t)sym[pos].prev;
            if (tok_pairmap_get(&b->merges, sym[pv].id, sym[pos].id, &rank, &nid))
                heap_push(ws->heap, &nh, (uint64_t)rank << 32 | pv, nid);
        }
        if (sym[pos].next >= 0 &&
            tok_pairmap_get(&b->merges, sym[pos].id, sym[sym[pos].next].id, &rank, &nid))
            heap_push(ws->heap, &nh, (uint64_t)rank << 32 | pos, nid);
    }
    size_t first = out->len;
    for (size_t i = 0; i < ns; i++)
        if (sym[i].len && tok_ids_push(out, sym[i].id)) return STRATA_ENOMEM;
    /* A word may yield no ids at all (every byte unknown and dropped): nothing to cache,
     * and out->p may still be NULL. */
    if (cacheable && out->len > first && out->len - first <= TOK_CACHE_IDS)
        cache_put(b, h, w, n, out->p + first, out->len - first);
    return 0;
}
