/* grammar_match.c - a grammar (grammar.h) run a byte at a time as a lazily built DFA, and
 * the mask walk that runs it down the token trie.
 *
 * A position in the grammar is a set of stacks, as in llama.cpp's matcher: each stack is
 * the elements still to read, innermost first. Stacks are nodes (element, UTF-8 progress,
 * the stack below) interned in one table, so equal stacks are one id and a stack shares
 * its tail with every stack pushed on it; a rule whose reference is the last element of
 * an alternative returns straight to the stack below (tail calls), so right recursion
 * (how repetition is written) never grows a stack. A set is always closed: every stack's
 * top reads a byte, or the stack is empty (the grammar may end). Sets are interned too and
 * each keeps a row of 256 transitions filled on first use, so after warm-up a byte costs
 * one table lookup: the mask walk over a 248k vocabulary mostly reads rows.
 *
 * Strings are where the vocabulary fits best and would cost most: inside one, nearly
 * every token is allowed. A set whose stacks include a GK_STAR over a class holding every
 * non-ASCII code point (a JSON string body, "any text but ...") at a character boundary
 * allows at once every token of a trie subtree whose remaining bytes are valid UTF-8 with
 * every ASCII byte in that class; those subtrees are flagged per grammar when the matcher
 * is made (gmatch_fast_bits), so the walk skips them without a look. */
#include <stdlib.h>
#include <string.h>

#include "engine/constrain/constrain_internal.h"

#define NONE UINT32_MAX
/* Stack height past which a stack is dropped: only a grammar nesting this deep (an object
 * in an object 300 levels down) reaches it, and it bounds what a model can make us hold. */
#define GM_MAX_DEPTH 1024

typedef struct gm_node {
    uint32_t pos;    /* the element its top reads (never GK_END) */
    uint32_t sub;    /* UTF-8 progress inside a class's character; 0 at a boundary */
    uint32_t parent; /* the stack below; node 0 is the empty stack */
    uint32_t depth;
    uint32_t clo, n_clo; /* its closure in gm->clo (clo NONE: not computed yet) */
} gm_node;

typedef struct gm_set {
    uint32_t off, n; /* members in gm->mem, ascending */
    uint32_t row;    /* its transitions in gm->trans (NONE: none yet) */
    uint8_t complete;
    uint8_t fast; /* the fast classes (gmatch_fast_bits) one of its stacks loops on */
} gm_set;

/* A growable array of T; the grow step never loses the old block on failure. */
#define VEC(T)                                                                                     \
    struct {                                                                                       \
        T *p;                                                                                      \
        uint32_t n, cap;                                                                           \
    }

struct gmatch {
    const grammar *g;
    VEC(gm_node) nodes;
    VEC(gm_set) sets;
    VEC(uint32_t) clo;                  /* closures, back to back */
    VEC(uint32_t) mem;                  /* set members, back to back */
    VEC(uint32_t) trans;                /* rows of 256 set ids (NONE: not yet known) */
    VEC(uint32_t) tmp;                  /* a set being built */
    uint32_t *node_hash, node_hash_cap; /* open addressing, NONE empty */
    uint32_t *set_hash, set_hash_cap;
    uint8_t fast_bit[256]; /* per class index < 256: its fast bit, 0 if not fast */
    int oom;
};

static int vec_grow(void **p, uint32_t *cap, uint32_t need, size_t elem) {
    if (need <= *cap) return 0;
    uint64_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    if (c > UINT32_MAX / 2) return -1;
    void *q = realloc(*p, (size_t)c * elem);
    if (!q) return -1;
    *p = q;
    *cap = (uint32_t)c;
    return 0;
}
#define VEC_RESERVE(m, v, extra)                                                                   \
    (vec_grow((void **)&(v).p, &(v).cap, (v).n + (extra), sizeof *(v).p) ? ((m)->oom = 1, -1) : 0)

static inline uint32_t mix(uint64_t h) {
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return (uint32_t)h;
}

/* ---- classes and UTF-8 ---------------------------------------------------------------- */

/* 1 when class k holds a code point in [lo, hi]. */
static int class_meets(const grammar *g, uint32_t k, uint32_t lo, uint32_t hi) {
    const uint32_t *r = g->ranges;
    uint32_t a = g->class_off[k], b = g->class_off[k + 1];
    while (a < b) { /* the first range whose end is >= lo */
        uint32_t m = a + (b - a) / 2;
        if (r[2 * m + 1] < lo) a = m + 1;
        else b = m;
    }
    return a < g->class_off[k + 1] && r[2 * a] <= hi;
}

/* sub packs a character under way: 1 << 31 | length << 28 | bytes to go << 24 | bits so far. */
static inline uint32_t sub_pack(uint32_t len, uint32_t need, uint32_t cp) {
    return 1u << 31 | len << 28 | need << 24 | cp;
}

/* Reads byte b of a code point of class k from progress sub: 1 when the character is
 * whole and in the class, 0 when it is still under way and can still end in the class
 * (*next set), -1 when it cannot. Overlongs, surrogates and bytes past U+10FFFF never fit. */
static int utf8_class_step(const grammar *g, uint32_t k, uint32_t sub, uint8_t b, uint32_t *next) {
    uint32_t len, need, cp;
    if (!sub) {
        if (b < 0x80) return class_meets(g, k, b, b) ? 1 : -1;
        if (b < 0xC2) return -1;
        if (b < 0xE0) len = 2, cp = b & 0x1Fu;
        else if (b < 0xF0) len = 3, cp = b & 0x0Fu;
        else if (b < 0xF5) len = 4, cp = b & 0x07u;
        else return -1;
        need = len - 1;
    } else {
        if ((b & 0xC0) != 0x80) return -1;
        len = sub >> 28 & 7, need = (sub >> 24 & 3) - 1;
        cp = (sub & 0x1FFFFFu) << 6 | (b & 0x3Fu);
    }
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    uint32_t lo = cp << (6 * need), hi = lo | ((1u << (6 * need)) - 1);
    if (lo < min_cp[len]) lo = min_cp[len];
    if (hi > 0x10FFFF) hi = 0x10FFFF;
    if (lo > hi || !class_meets(g, k, lo, hi)) return -1; /* classes hold no surrogate */
    if (!need) return 1;
    *next = sub_pack(len, need, cp);
    return 0;
}

/* ---- stacks ------------------------------------------------------------------------------ */

/* The node (pos, sub, parent), interned; NONE when out of memory or too deep. */
static uint32_t node_get(gmatch *m, uint32_t pos, uint32_t sub, uint32_t parent) {
    uint32_t depth = m->nodes.p[parent].depth + 1;
    if (depth > GM_MAX_DEPTH) return NONE;
    if (2 * (m->nodes.n + 1) > m->node_hash_cap) { /* rehash at half full */
        uint32_t cap = m->node_hash_cap ? 2 * m->node_hash_cap : 1024;
        uint32_t *h = malloc((size_t)cap * sizeof *h);
        if (!h) return m->oom = 1, NONE;
        memset(h, 0xFF, (size_t)cap * sizeof *h);
        for (uint32_t i = 1; i < m->nodes.n; i++) {
            const gm_node *x = &m->nodes.p[i];
            uint32_t s = mix((uint64_t)x->pos << 40 ^ (uint64_t)x->sub << 20 ^ x->parent);
            while (h[s & (cap - 1)] != NONE) s++;
            h[s & (cap - 1)] = i;
        }
        free(m->node_hash);
        m->node_hash = h, m->node_hash_cap = cap;
    }
    uint32_t s = mix((uint64_t)pos << 40 ^ (uint64_t)sub << 20 ^ parent);
    for (;; s++) {
        uint32_t i = m->node_hash[s & (m->node_hash_cap - 1)];
        if (i == NONE) break;
        const gm_node *x = &m->nodes.p[i];
        if (x->pos == pos && x->sub == sub && x->parent == parent) return i;
    }
    if (VEC_RESERVE(m, m->nodes, 1)) return NONE;
    uint32_t id = m->nodes.n++;
    m->nodes.p[id] = (gm_node){pos, sub, parent, depth, NONE, 0};
    m->node_hash[s & (m->node_hash_cap - 1)] = id;
    return id;
}

/* The stack that reads element pos next above parent; an alternative's end returns to
 * parent itself (the tail call). */
static uint32_t node_next(gmatch *m, uint32_t pos, uint32_t parent) {
    return m->g->elems[pos].kind == GK_END ? parent : node_get(m, pos, 0, parent);
}

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* Sorts and dedupes v[from..n). */
static uint32_t uniq(uint32_t *v, uint32_t from, uint32_t n) {
    qsort(v + from, n - from, sizeof *v, cmp_u32);
    uint32_t w = from;
    for (uint32_t i = from; i < n; i++)
        if (w == from || v[w - 1] != v[i]) v[w++] = v[i];
    return w;
}

/* Appends closure(id) to m->tmp: the stacks whose tops read a byte (or the empty stack)
 * that id stands for once rules are expanded and star loops may be skipped. Memoized per
 * node. The recursion follows leftmost rule references only, which the parser proved
 * acyclic (no left recursion), so its depth is at most the number of rules. */
static int closure(gmatch *m, uint32_t id) {
    if (id == NONE) return m->oom ? -1 : 0; /* too deep: the stack is dropped */
    gm_node *nd = &m->nodes.p[id];
    if (nd->clo == NONE) {
        const grammar *g = m->g;
        uint32_t from = m->tmp.n;
        uint32_t pos = nd->pos, parent = nd->parent;
        gram_elem e = id ? g->elems[pos] : (gram_elem){GK_BYTE, 0};
        if (!id || e.kind == GK_BYTE || e.kind == GK_CLASS || e.kind == GK_STAR || nd->sub) {
            if (VEC_RESERVE(m, m->tmp, 1)) return -1;
            m->tmp.p[m->tmp.n++] = id;
            if (id && e.kind == GK_STAR && !nd->sub && closure(m, node_next(m, pos + 1, parent)))
                return -1;
        } else { /* GK_RULE */
            uint32_t cont = node_next(m, pos + 1, parent);
            if (cont == NONE && m->oom) return -1;
            for (uint32_t a = g->rules[e.arg]; a < g->rules[e.arg + 1] && cont != NONE; a++)
                if (closure(m, node_next(m, g->alts[a], cont))) return -1;
        }
        uint32_t n = uniq(m->tmp.p, from, m->tmp.n);
        if (VEC_RESERVE(m, m->clo, n - from)) return -1;
        nd = &m->nodes.p[id]; /* the recursion may have moved the nodes */
        nd->clo = m->clo.n, nd->n_clo = n - from;
        memcpy(m->clo.p + m->clo.n, m->tmp.p + from, (size_t)(n - from) * sizeof(uint32_t));
        m->clo.n += n - from;
        m->tmp.n = from;
    }
    if (VEC_RESERVE(m, m->tmp, nd->n_clo)) return -1;
    memcpy(m->tmp.p + m->tmp.n, m->clo.p + nd->clo, (size_t)nd->n_clo * sizeof(uint32_t));
    m->tmp.n += nd->n_clo;
    return 0;
}

/* ---- sets ----------------------------------------------------------------------------------- */

/* Interns the members m->tmp[from..n) (sorted, unique) as a set; consumes them. Set 0 is
 * the empty set: no way on. NONE when out of memory. */
static uint32_t set_get(gmatch *m, uint32_t from) {
    uint32_t n = m->tmp.n - from;
    const uint32_t *v = m->tmp.p + from;
    if (!n) return 0;
    if (2 * (m->sets.n + 1) > m->set_hash_cap) {
        uint32_t cap = m->set_hash_cap ? 2 * m->set_hash_cap : 256;
        uint32_t *h = malloc((size_t)cap * sizeof *h);
        if (!h) return m->oom = 1, NONE;
        memset(h, 0xFF, (size_t)cap * sizeof *h);
        for (uint32_t i = 1; i < m->sets.n; i++) {
            uint64_t k = 0;
            for (uint32_t j = 0; j < m->sets.p[i].n; j++)
                k = k * 0x9E3779B97F4A7C15ull + m->mem.p[m->sets.p[i].off + j];
            uint32_t s = mix(k);
            while (h[s & (cap - 1)] != NONE) s++;
            h[s & (cap - 1)] = i;
        }
        free(m->set_hash);
        m->set_hash = h, m->set_hash_cap = cap;
    }
    uint64_t k = 0;
    for (uint32_t j = 0; j < n; j++) k = k * 0x9E3779B97F4A7C15ull + v[j];
    uint32_t s = mix(k);
    for (;; s++) {
        uint32_t i = m->set_hash[s & (m->set_hash_cap - 1)];
        if (i == NONE) break;
        const gm_set *x = &m->sets.p[i];
        if (x->n == n && !memcmp(m->mem.p + x->off, v, (size_t)n * sizeof *v)) {
            m->tmp.n = from;
            return i;
        }
    }
    if (VEC_RESERVE(m, m->sets, 1) || VEC_RESERVE(m, m->mem, n)) return NONE;
    v = m->tmp.p + from;
    gm_set st = {m->mem.n, n, NONE, v[0] == 0, 0};
    for (uint32_t j = 0; j < n; j++) {
        const gm_node *nd = &m->nodes.p[v[j]];
        if (v[j] && !nd->sub && m->g->elems[nd->pos].kind == GK_STAR &&
            m->g->elems[nd->pos].arg < 256)
            st.fast |= m->fast_bit[m->g->elems[nd->pos].arg];
    }
    memcpy(m->mem.p + m->mem.n, v, (size_t)n * sizeof *v);
    m->mem.n += n;
    uint32_t id = m->sets.n++;
    m->sets.p[id] = st;
    m->set_hash[s & (m->set_hash_cap - 1)] = id;
    m->tmp.n = from;
    return id;
}

/* The set after byte b from set id, computed (not looked up). */
static uint32_t set_step(gmatch *m, uint32_t id, uint8_t b) {
    const grammar *g = m->g;
    uint32_t from = m->tmp.n;
    for (uint32_t j = 0; j < m->sets.p[id].n; j++) {
        uint32_t x = m->mem.p[m->sets.p[id].off + j];
        if (!x) continue;
        gm_node nd = m->nodes.p[x];
        gram_elem e = g->elems[nd.pos];
        uint32_t next = NONE, sub = 0;
        if (e.kind == GK_BYTE) {
            if (e.arg != b) continue;
            next = node_next(m, nd.pos + 1, nd.parent);
        } else {
            int r = utf8_class_step(g, e.arg, nd.sub, b, &sub);
            if (r < 0) continue;
            if (r == 0) next = node_get(m, nd.pos, sub, nd.parent);
            else if (e.kind == GK_STAR) next = node_get(m, nd.pos, 0, nd.parent);
            else next = node_next(m, nd.pos + 1, nd.parent);
        }
        if (next == NONE && m->oom) goto oom;
        if (closure(m, next)) goto oom;
    }
    m->tmp.n = uniq(m->tmp.p, from, m->tmp.n);
    return set_get(m, from);
oom:
    m->tmp.n = from;
    return NONE;
}

/* The set after byte b from set id: its row's entry, filled on first use. NONE: out of
 * memory. */
static inline uint32_t set_trans(gmatch *m, uint32_t id, uint8_t b) {
    uint32_t row = m->sets.p[id].row;
    if (row != NONE && m->trans.p[(size_t)row * 256 + b] != NONE)
        return m->trans.p[(size_t)row * 256 + b];
    if (row == NONE) {
        if (VEC_RESERVE(m, m->trans, 256)) return NONE;
        row = m->trans.n / 256;
        memset(m->trans.p + m->trans.n, 0xFF, 256 * sizeof(uint32_t));
        m->trans.n += 256;
        m->sets.p[id].row = row;
    }
    uint32_t t = set_step(m, id, b);
    if (t != NONE) m->trans.p[(size_t)row * 256 + b] = t;
    return t;
}

/* ---- the matcher ------------------------------------------------------------------------ */

/* A class is fast when it holds every code point from U+0080 on (surrogates aside). */
static int class_is_fast(const grammar *g, uint32_t k) {
    const uint32_t *r = g->ranges;
    uint32_t need_lo = 0x80;
    for (uint32_t i = g->class_off[k]; i < g->class_off[k + 1]; i++) {
        if (r[2 * i + 1] < need_lo) continue;
        if (r[2 * i] > need_lo) return 0;
        need_lo = r[2 * i + 1] + 1;
        if (need_lo == 0xD800) need_lo = 0xE000;
        if (need_lo > 0x10FFFF) return 1;
    }
    return 0;
}

int gmatch_create(gmatch **out, const grammar *g) {
    gmatch *m = calloc(1, sizeof *m);
    if (!m) return -1;
    m->g = g;
    int bit = 0;
    for (uint32_t k = 0; k < g->n_classes && k < 256 && bit < 8; k++) {
        int starred = 0;
        for (uint32_t i = 0; i < g->n_elems && !starred; i++)
            starred = g->elems[i].kind == GK_STAR && g->elems[i].arg == k;
        if (starred && class_is_fast(g, k)) m->fast_bit[k] = (uint8_t)(1u << bit++);
    }
    /* node 0: the empty stack; set 0: the empty set */
    if (VEC_RESERVE(m, m->nodes, 1) || VEC_RESERVE(m, m->sets, 1)) goto fail;
    m->nodes.p[m->nodes.n++] = (gm_node){0, 0, 0, 0, NONE, 0};
    m->sets.p[m->sets.n++] = (gm_set){0, 0, NONE, 0, 0};
    *out = m;
    return 0;
fail:
    gmatch_free(m);
    return -1;
}

void gmatch_free(gmatch *m) {
    if (!m) return;
    free(m->nodes.p);
    free(m->sets.p);
    free(m->clo.p);
    free(m->mem.p);
    free(m->trans.p);
    free(m->tmp.p);
    free(m->node_hash);
    free(m->set_hash);
    free(m);
}

uint32_t gmatch_start(gmatch *m) {
    const grammar *g = m->g;
    uint32_t from = m->tmp.n;
    for (uint32_t a = g->rules[g->root]; a < g->rules[g->root + 1]; a++) {
        uint32_t id = node_next(m, g->alts[a], 0);
        if ((id == NONE && m->oom) || closure(m, id)) return m->tmp.n = from, NONE;
    }
    m->tmp.n = uniq(m->tmp.p, from, m->tmp.n);
    return set_get(m, from);
}

uint32_t gmatch_feed(gmatch *m, uint32_t set, const uint8_t *b, size_t n) {
    for (size_t i = 0; i < n && set && set != NONE; i++) set = set_trans(m, set, b[i]);
    return set;
}

int gmatch_complete(const gmatch *m, uint32_t set) {
    const gm_set *s = &m->sets.p[set];
    return !s->complete ? 0 : s->n == 1 ? 2 : 1;
}

size_t gmatch_size(const gmatch *m) {
    return (size_t)m->nodes.n * sizeof(gm_node) + (size_t)m->sets.n * sizeof(gm_set) +
           ((size_t)m->clo.n + m->mem.n + m->trans.n) * sizeof(uint32_t);
}

int gmatch_fast_bits(const gmatch *m, const struct constrain_vocab *v, uint8_t *bits) {
    const grammar *g = m->g;
    uint8_t any = 0, bytemask[256];
    for (int k = 0; k < 256 && (uint32_t)k < g->n_classes; k++) any |= m->fast_bit[k];
    if (!any) return 0;
    for (int b = 0; b < 256; b++) {
        bytemask[b] = b >= 0x80 ? 0xFF : (uint8_t)~any;
        for (uint32_t k = 0; k < g->n_classes && k < 256; k++)
            if (m->fast_bit[k] && class_meets(g, k, (uint32_t)b, (uint32_t)b))
                bytemask[b] |= m->fast_bit[k];
    }
    /* bits[i]: the fast classes every later byte of the tokens below node i is in (ASCII
     * bytes checked here, the rest by the node's UTF-8 flag); children come after their
     * parent in preorder, so a backward pass sees them first */
    const constrain_node *nodes = v->nodes;
    for (uint32_t i = v->n_nodes; i-- > 0;) {
        uint8_t a = 0xFF;
        for (uint32_t j = i + 1; j < nodes[i].end && a; j = nodes[j].end)
            a &= bytemask[nodes[j].byte] & bits[j];
        bits[i] = a;
    }
    for (uint32_t i = 0; i < v->n_nodes; i++)
        if (!(nodes[i].safe & CONSTRAIN_NODE_UTF8)) bits[i] = 0;
    return 1;
}

int gmatch_mask_walk(gmatch *m, uint32_t set, const struct constrain_vocab *v, const uint8_t *bits,
                     uint32_t *states, uint8_t *allow, int n) {
    const constrain_node *nodes = v->nodes;
    int count = 0;
    states[0] = set;
    for (uint32_t i = 1; i < v->n_nodes;) {
        const constrain_node *nd = &nodes[i];
        uint32_t t = set_trans(m, states[nd->depth - 1], nd->byte);
        if (t == NONE) return -1;
        if (!t) {
            i = nd->end;
            continue;
        }
        int whole = bits && (m->sets.p[t].fast & bits[i]);
        if (!whole) states[nd->depth] = t;
        i = constrain_walk_accept(v, i, whole, allow, n, &count);
    }
    return count;
}

/* Copies the stacks of set into a fresh matcher and returns the set there (NONE: out of
 * memory): the tables a long generation fills are dropped, the position kept. */
uint32_t gmatch_compact(gmatch **mp, uint32_t set) {
    gmatch *m = *mp, *f;
    if (gmatch_create(&f, m->g)) return NONE;
    uint32_t from = f->tmp.n;
    for (uint32_t j = 0; j < m->sets.p[set].n; j++) {
        /* the stack bottom-up: collect its nodes, then intern them in f from the bottom */
        uint32_t chain[GM_MAX_DEPTH + 1], d = 0;
        for (uint32_t x = m->mem.p[m->sets.p[set].off + j]; x; x = m->nodes.p[x].parent)
            chain[d++] = x;
        uint32_t y = 0;
        while (d-- > 0 && y != NONE)
            y = node_get(f, m->nodes.p[chain[d]].pos, m->nodes.p[chain[d]].sub, y);
        if (y == NONE || VEC_RESERVE(f, f->tmp, 1)) goto fail;
        f->tmp.p[f->tmp.n++] = y;
    }
    f->tmp.n = uniq(f->tmp.p, from, f->tmp.n);
    uint32_t s = set_get(f, from);
    if (s == NONE) goto fail;
    gmatch_free(m);
    *mp = f;
    return s;
fail:
    gmatch_free(f);
    return NONE;
}
