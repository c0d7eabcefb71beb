/* backend.h - the ops every backend implements, each defined once here.
 *
 * Model code is written once against this table; kernels/cpu and kernels/cuda
 * implement it. Conventions, for every op:
 *   - Activations are f32, row-major, in backend memory (host memory on the CPU
 *     backend, device memory on CUDA). "[m, n]" means m rows of n floats.
 *   - Weights are bk_weight in their checkpoint dtype (BF16 / F16 / F32, or one of
 *     llama.cpp's block types Q8_0 / Q4_0 / Q5_0 / Q4_K / Q6_K where a backend's supports()
 *     says so); matrices are [n_out, n_in] as in the checkpoint, so y = x · Wᵀ.
 *   - Outputs come first; an output may alias an input only where the op says so.
 *   - Ops that depend on sequence structure (cache writes, attention, conv, the
 *     recurrences) take the step's bk_batch: tokens of one sequence are contiguous
 *     and in position order.
 *   - Ops are eager and ordered on the backend's stream; only download() waits.
 * Thread: all ops of one backend are called from one thread (the engine step thread). */
#ifndef STRATA_BACKEND_H
#define STRATA_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "engine/base/dtype.h"
#include "engine/base/err.h"

typedef struct backend backend;

/* Device memory of a backend that has its own (CUDA): bytes held now and at the peak
 * (weights, caches, activations, scratch), and the device's free / total bytes. */
typedef struct backend_mem {
    size_t used, peak, free, total;
} backend_mem;

/* A weight tensor. On the CPU backend data points into the mmapped checkpoint
 * (or a dummy / converted buffer); weight_prepare() may move it to the device. */
typedef struct bk_weight {
    const void *data;
    dtype dt;
    int ndim;
    int64_t shape[4];
} bk_weight;

/* One step's token layout. Sequence i owns tokens [start[i], start[i] + len[i]),
 * lives in cache slot slot[i] and its first token is at absolute position pos0[i].
 * tok_pos / tok_seq repeat that per token. A paged kv cache (bk_kv.block > 0) finds
 * sequence i's position p in pool block blk[i · blk_w + p / block]; blk_w covers every
 * position of the step's sequences. Host arrays; the backend mirrors them to the device
 * in batch_prepare() (dev points at that mirror, owned by the backend). */
typedef struct bk_batch {
    int n_tokens;
    int n_seqs;
    const int32_t *slot;    /* [n_seqs] */
    const int32_t *start;   /* [n_seqs] */
    const int32_t *len;     /* [n_seqs] */
    const int32_t *pos0;    /* [n_seqs] */
    const int32_t *tok_pos; /* [n_tokens] */
    const int32_t *tok_seq; /* [n_tokens] */
    const int32_t *blk;     /* [n_seqs · blk_w] block table rows; NULL when blk_w is 0 */
    int blk_w;              /* entries per sequence; 0: the step touches no paged cache */
    const void *dev;        /* backend-private mirror, set by batch_prepare */
} bk_batch;

#define BK_MATMUL_MAX 4 /* weights one matmul_n takes */

/* One row's request to backend_ops.sample; the pointers are backend memory. */
#define BK_SAMPLE_TOP 20          /* alternatives reported at most (SAMPLER_MAX_TOP_LOGPROBS) */
#define BK_SAMPLE_CANDIDATES 1024 /* candidates a backend sorts; a row needing more: token -1 */
typedef struct bk_sample_req {
    float temperature; /* 0: greedy */
    float top_p, min_p;
    int32_t top_k;
    float repetition_penalty, presence_penalty, frequency_penalty;
    int32_t top_logprobs; /* 0..BK_SAMPLE_TOP */
    int32_t logprobs;     /* report the chosen token's logprob */
    int32_t n_bias;
    const int32_t *bias_ids; /* [n_bias], added in list order */
    const float *bias_vals;  /* [n_bias] */
    /* [n] per token: bit 0 seen (prompt or output), bits 1.. times generated; NULL: no
     * penalties */
    uint32_t *counts;
    uint64_t seed, draw; /* Philox key and counter (engine/base/philox.h) */
    /* backend memory: the chosen token is also written here (the slot's entry of the fed
     * ids embed_fed reads, so the next step's input never leaves the device); NULL: not */
    int32_t *feed;
    /* backend memory, [(n + 31) / 32] bits: a clear bit i makes logit i -inf before
     * anything else (a grammar's mask, engine/constrain); NULL: every token may come */
    const uint32_t *allow;
} bk_sample_req;

typedef struct bk_sample_res {
    int32_t token; /* -1: left to the host sampler (more than BK_SAMPLE_CANDIDATES needed) */
    float logprob;
    int32_t n_top;
    int32_t top_id[BK_SAMPLE_TOP]; /* most likely first */
    float top_lp[BK_SAMPLE_TOP];
} bk_sample_res;

/* One kind of op's share of a profiled forward (backend_ops.profile_read). */
typedef struct bk_op_time {
    const char *op; /* the backend's name for it: "MATMUL", "ATTENTION", ... */
    int count;      /* calls in the forward */
    double ms;      /* their time: device time from each start to the next op's, or the
                     * host clock around each call (CPU) */
} bk_op_time;

/* A kv cache: k and v of dt (F32 or BF16) in backend memory, in one of two layouts.
 *   block 0: a ring per slot, [slots, cap, width]; a sequence's position p is row
 *            slot · cap + p % cap (sliding-window layers keep window + step rows).
 *   block > 0: paged, [blocks, block, width] shared by every sequence through the step's
 *            block table (bk_batch.blk): row blk[seq · blk_w + p / block] · block +
 *            p % block; cap is unused. bk_kv_row() below is the one definition. */
typedef struct bk_kv {
    void *k, *v;
    dtype dt;
    int cap;   /* rows per slot (block 0) */
    int width; /* floats per row: kv heads · head dim */
    int block; /* positions per block; 0: slot rings */
} bk_kv;

/* The row of kv holding position pos of the batch's sequence seq. */
static inline size_t bk_kv_row(const bk_kv *kv, const bk_batch *bt, int seq, int pos) {
    if (kv->block > 0)
        return (size_t)bt->blk[(size_t)seq * (size_t)bt->blk_w + (size_t)(pos / kv->block)] *
                   (size_t)kv->block +
               (size_t)(pos % kv->block);
    return (size_t)bt->slot[seq] * (size_t)kv->cap + (size_t)(pos % kv->cap);
}

/* Activations of a gated pair, for matmul_glu. */
enum {
    BK_ACT_SILU = 0,      /* silu(g) · u        (Qwen3.5's MLP) */
    BK_ACT_GELU_TANH = 1, /* gelu_tanh(g) · u   (Gemma 4's MLP and PLE gate) */
    BK_ACT_SIGMOID = 2,   /* u · sigmoid(g)     (Qwen3.5's attention output gate) */
    BK_ACT_RELU2 = 3,     /* max(g, 0)², no u   (Nemotron-H's MLP) */
    BK_ACT_COUNT
};

/* The gated norms of matmul_gnorm. */
enum {
    BK_GNORM_HEAD = 0,    /* x̂ · w · silu(z), w per head   (Qwen3.5's DeltaNet output) */
    BK_GNORM_GROUPED = 1, /* (x · silu(z))^ · w, w per row (Nemotron-H's Mamba2 output) */
    BK_GNORM_COUNT
};

/* RMSNorm weight modes. */
enum {
    BK_NORM_PLAIN = 0,    /* y = x̂ · w */
    BK_NORM_ONE_PLUS = 1, /* y = x̂ · (1 + w)   (zero-centred weights: Qwen3.5) */
    BK_NORM_NONE = 2,     /* y = x̂            (w unused, may be NULL) */
};

/* How the gated delta rule's Hv value heads find their key head (gated_delta, gdn), with
 * r = Hv / Hk value heads a key head. Every V-indexed input and output of the op (v, g,
 * beta, a, bb, A_log, dt_bias, the state and out) is in the order the mode names. */
enum {
    BK_VHEAD_GROUPED = 0, /* v head h reads key head h / r (transformers: grouped by key head) */
    BK_VHEAD_TILED = 1,   /* v head h reads key head h % Hk (llama.cpp's GGUF files: the
                             converter tiles the V heads, grouped head k·r + j at j·Hk + k) */
};

/* What attn_prep (below) makes of a step's projections. */
typedef struct bk_qkv_prep {
    int H, KV, D;                     /* query heads, kv heads, head dim */
    const bk_weight *q_norm, *k_norm; /* [D] RMSNorm weights of q and k heads; NULL: none */
    int norm_mode;                    /* BK_NORM_PLAIN or BK_NORM_ONE_PLUS, for both */
    int v_norm;                       /* 1: v heads RMS-normalised without a weight */
    float eps;
    const float *inv_freq; /* [rot/2] backend memory; RoPE on the first rot dims of q and k */
    int rot;               /* 0: no RoPE */
} bk_qkv_prep;

typedef struct backend_ops {
    const char *name;
    /* Frees everything the backend holds; the backend pointer is invalid after. */
    void (*destroy)(backend *b);

    /* ---- memory ---- */
    /* Zero-filled buffer of bytes in backend memory; NULL when out of memory. */
    void *(*alloc)(backend *b, size_t bytes);
    void (*free)(backend *b, void *p);
    /* Host <-> backend copies. download() waits for pending ops. */
    void (*upload)(backend *b, void *dst, const void *src, size_t bytes);
    void (*download)(backend *b, void *dst, const void *src, size_t bytes);
    void (*zero)(backend *b, void *dst, size_t bytes);
    /* bytes from src to dst, both backend memory, not overlapping; ordered on the stream
     * like any op (a recurrent-state snapshot and its restore). */
    void (*copy)(backend *b, void *dst, const void *src, size_t bytes);
    /* Makes w usable by this backend (CPU: nothing; CUDA: upload, rewriting w->data).
     * Returns 0 or STRATA_ENOMEM / STRATA_EDEVICE. */
    int (*weight_prepare)(backend *b, bk_weight *w, strata_err *err);
    void (*weight_release)(backend *b, bk_weight *w);
    /* Mirrors the batch arrays into backend memory; sets bt->dev. */
    int (*batch_prepare)(backend *b, bk_batch *bt, strata_err *err);

    /* ---- elementwise and row ops ---- */
    /* out[i,:] = table[ids[i],:] converted to f32; ids in host memory, < table rows. */
    void (*embed)(backend *b, float *out, const bk_weight *table, const int32_t *ids, int m);
    /* Per row of n: x̂ = x · rsqrt(mean(x²) + eps); out = x̂ · (w or 1+w or 1), see
     * BK_NORM_*. Rows are ld floats apart (ld >= n) in both x and out. out may alias x. */
    void (*rmsnorm)(backend *b, float *out, const float *x, const bk_weight *w, int m, int n,
                    int ld, float eps, int mode);
    /* Gated RMSNorm per row of n (a head): out = x̂ · w · silu(z), w plain [n].
     * x, z, out are [m, n] contiguous; out may alias x. */
    void (*rmsnorm_gated)(backend *b, float *out, const float *x, const float *z,
                          const bk_weight *w, int m, int n, float eps);
    /* The residual step between two sublayers, fused (one pass instead of two or three
     * ops). Per row of n, rows contiguous:
     *   d = dnorm ? rmsnorm(delta) by dnorm, dmode (BK_NORM_PLAIN / ONE_PLUS) : delta;
     *   x = x + d, then x = x · s[0] when s (a 1-element weight: Gemma's layer_scalar);
     *   xn = rmsnorm(x) by nw, nmode (when xn is not NULL).
     * delta is not modified; xn aliases neither x nor delta. Equal, bit for bit on the
     * CPU, to rmsnorm(delta) into delta, add, scale(x, 1, s), rmsnorm into xn. */
    void (*residual)(backend *b, float *x, float *xn, const float *delta, const bk_weight *dnorm,
                     int dmode, const bk_weight *s, const bk_weight *nw, int nmode, int m, int n,
                     float eps);
    /* Per row of n: x = x · scale / sqrt(Σx² + eps), in place. Rows come gpr to a group,
     * groups ld apart: row r starts at (r / gpr)·ld + (r % gpr)·n (gpr 1: rows ld apart;
     * gpr heads: the heads of each token inside a wider token row). */
    void (*l2norm)(backend *b, float *x, int m, int n, int ld, int gpr, float eps, float scale);
    /* out[i] = a[i] + b[i]; out may alias a or b. */
    void (*add)(backend *b, float *out, const float *a, const float *x, size_t n);
    /* out[i,j] = silu(gate[i,j]) · up[i,j] for rows of n; out may alias gate. */
    void (*silu_mul)(backend *b, float *out, const float *gate, const float *up, int m, int n);
    /* x[i] = x[i] · sigmoid(gate[i]). */
    void (*sigmoid_mul)(backend *b, float *x, const float *gate, size_t n);
    /* Splits rows of 2·half into two outputs: a[r,:] = in[r, 0:half],
     * g[r,:] = in[r, half:2·half], for r < rows. */
    void (*split_halves)(backend *b, float *a, float *g, const float *in, int rows, int half);
    /* out[i,:] = x[rows[i],:] for i < n (rows in host memory), width floats per row. */
    void (*gather_rows)(backend *b, float *out, const float *x, const int32_t *rows, int n,
                        int width);

    /* ---- matmul ---- */
    /* out[m, n] = x[m, k] · Wᵀ with W [n, k] (n = w->shape[0], k = w->shape[1]),
     * f32 accumulation. For a BF16 W, x is first rounded to bf16 (nearest even,
     * subnormals to a signed zero): the bf16 model's own precision, and what bf16 dot
     * instructions and tensor cores take. For a block-typed W (k whole blocks) a backend
     * either quantizes x as llama.cpp does (the CPU: to int8 per block of 32 (Q8_0, Q4_0, Q5_0) or
     * 256 (Q4_K, Q6_K) with an f32 scale amax / 127, rounded to nearest even, integer
     * products: kernels/cpu/cpu_qmatmul.h) or keeps x in f32 against the dequantized W (CUDA:
     * kernels/cuda/cuda_qmatmul.cu, the f32 product to rounding); the two differ by the x
     * rounding, at most amax / 254 per element. Each row of out depends only on its row of x
     * (bit for bit on the CPU, whatever m; on CUDA too for block-typed W). out must not
     * alias x. */
    void (*matmul)(backend *b, float *out, const float *x, const bk_weight *w, int m);
    /* out[j] = x · w[j]ᵀ for j < n_w (1 <= n_w <= BK_MATMUL_MAX): projections of one input
     * (q | k | v, gate | up, ...), exactly n_w matmul calls (bit for bit on the CPU), which
     * a backend may run as one kernel. The outputs alias neither x nor each other. */
    void (*matmul_n)(backend *b, float *const *out, const float *x, const bk_weight *const *w,
                     int n_w, int m);

    /* The matmul of a gated activation: out[m, n] = a · Wᵀ with a = act(g, u) (BK_ACT_*)
     * per element, g and u [m, k] contiguous (u unused by RELU2, may be NULL). Equal, bit
     * for bit on the CPU, to silu_mul / gelu_tanh_mul into g (or sigmoid_mul into u, relu2
     * on g) and then matmul of that; g and u may be overwritten (a backend that fuses the
     * activation into the matmul's loads leaves them). out aliases neither. */
    void (*matmul_glu)(backend *b, float *out, float *g, float *u, const bk_weight *w, int m,
                       int act);
    /* The matmul of a gated norm: out[m, n] = a · Wᵀ where a is x [m, k] normed by the gate
     * z [m, k] in groups of `group` contiguous elements of each row (k % group == 0), by
     * mode (BK_GNORM_*): HEAD is rmsnorm_gated on rows of group (nw [group], every group
     * alike), GROUPED is rmsnorm_gated_grouped (nw [k]). Equal, bit for bit on the CPU, to
     * that op into x and then matmul of x; x may be overwritten (a backend that norms in
     * the matmul's loads leaves it). out aliases neither. */
    void (*matmul_gnorm)(backend *b, float *out, float *x, const float *z, const bk_weight *nw,
                         int group, float eps, int mode, const bk_weight *w, int m);

    /* ---- position encoding ---- */
    /* Rotate-half RoPE on the first rot dims of each head, in place. x is [m, heads,
     * hd] with rows ld floats apart; token i has angle a_j = tok_pos[i] · inv_freq[j]
     * for j < rot/2 (inv_freq in backend memory): for j < rot/2,
     *   x'[j] = x[j] cos a_j − x[j + rot/2] sin a_j
     *   x'[j + rot/2] = x[j + rot/2] cos a_j + x[j] sin a_j;  dims >= rot pass through. */
    void (*rope)(backend *b, float *x, const bk_batch *bt, const float *inv_freq, int heads, int hd,
                 int rot, int ld);

    /* ---- attention over the cache ---- */
    /* Writes each token's k, v rows ([m, kv->width] contiguous, f32) into the cache at its
     * sequence's row for its position (bk_kv_row), rounded to bf16 (nearest even) in a BF16
     * cache. */
    void (*kv_store)(backend *b, const bk_kv *kv, const float *k, const float *v,
                     const bk_batch *bt);
    /* Causal GQA attention for every token of bt, after kv_store for the same step.
     * q, out: [m, H, D]; kv->width = KV·D. Query head h reads kv head h / (H / KV). Token
     * at position p attends to cached positions max(0, p - window + 1) .. p (window 0 = no
     * limit); s = q·k · scale, then s = softcap · tanh(s / softcap) when softcap > 0;
     * softmax and the weighted sum in f32 (a BF16 cache's rows read back exactly). Cache
     * rows are found by bk_kv_row (a ring's cap >= every position a token may see). */
    void (*attention)(backend *b, float *out, const float *q, const bk_kv *kv, const bk_batch *bt,
                      int H, int KV, int D, float scale, int window, float softcap);

    /* The attention prologue of a step in one op. With gate set, qg is [m, H, 2·D], each
     * head [query | gate]: the queries go to q and the gates to gate [m, H, D]
     * (split_halves); without, q holds the queries already (qg unused). Then the q heads
     * are normalised by p->q_norm (rmsnorm, p->norm_mode) and rotated (rope, p->rot); with
     * kv set, k and v [m, KV·D] are normalised (k_norm; v when p->v_norm, BK_NORM_NONE), k
     * rotated, and both stored (kv_store). Equal, bit for bit on the CPU, to those ops in
     * that order; k and v are normalised and rotated in place there, and a backend that
     * fuses may leave them unwritten (only the cache is read after). */
    void (*attn_prep)(backend *b, float *q, float *gate, const float *qg, float *k, float *v,
                      const bk_kv *kv, const bk_batch *bt, const bk_qkv_prep *p);

    /* ---- recurrent mixers ---- */
    /* Causal depthwise conv over time with a carried window, then silu when act != 0:
     *   out[t, c] = act( bias[c] + Σ_{j<K} w[c, j] · x[t - K + 1 + j, c] )
     * where rows before the sequence's first token of this step come from the slot's
     * window state[slot] = [K-1, C] (oldest first), zero at sequence start. x rows
     * are ld_x floats apart, out is [m, C]. Updates state to the last K-1 inputs.
     * w is [C, 1, K] (or [C, K]); bias may be NULL. */
    void (*conv1d)(backend *b, float *out, const float *x, int ld_x, const bk_weight *w,
                   const bk_weight *bias, float *state, const bk_batch *bt, int C, int K, int act);
    /* Gated DeltaNet gates per token and value head:
     *   g = -exp(A_log[h]) · softplus(a[t,h] + dt_bias[h]);  beta = sigmoid(bb[t,h]).
     * a, bb, g, beta: [m, Hv]; softplus(x) = x for x > 20, as torch. */
    void (*gdn_gates)(backend *b, float *g, float *beta, const float *a, const float *bb,
                      const bk_weight *A_log, const bk_weight *dt_bias, int m, int Hv);
    /* Gated delta rule (Qwen3.5 spec §5.2.7), per value head h with key head hk (vmap, a
     * BK_VHEAD_*: h / (Hv / Hk) grouped, h % Hk tiled) and f32 state S = state[slot, h] of
     * [dk, dv]; for each token:
     *   S = exp(g)·S;  d = beta·(v − Sᵀk);  S += k ⊗ d;  out = Sᵀq.
     * q, k rows are ld_qk floats apart ([Hk, dk] used), v rows ld_v apart ([Hv, dv]),
     * out is [m, Hv, dv]. The mapping changes which q, k a head reads and nothing else: the
     * tiled op on inputs whose V heads are tiled equals the grouped op with its V heads
     * tiled the same way (bit for bit on the CPU). The backend may use the chunked form for
     * long runs; both equal the recurrence to f32 rounding. */
    void (*gated_delta)(backend *b, float *out, const float *q, const float *k, int ld_qk,
                        const float *v, int ld_v, const float *g, const float *beta, float *state,
                        const bk_batch *bt, int Hk, int Hv, int dk, int dv, int vmap);

    /* The gated DeltaNet after its conv, in one op (Qwen3.5 spec §5.2.5-5.2.7): the q and k
     * heads l2-normalised (l2norm: eps 1e-6, q scaled by q_scale, k by 1), the gates
     * (gdn_gates of a, bb into g, beta), then gated_delta into out. Equal, bit for bit on
     * the CPU, to those four ops with these arguments (q, k: m rows ld_qk apart, Hk heads of
     * dk at the start of each; a, bb, g, beta [m, Hv], A_log, dt_bias [Hv], all V-indexed
     * ones in vmap's order). q and k are normalised in place and g, beta are scratch, as in
     * the ops it stands for; a backend that fuses them may leave those four unwritten. */
    void (*gdn)(backend *b, float *out, float *q, float *k, int ld_qk, const float *v, int ld_v,
                const float *a, const float *bb, const bk_weight *A_log, const bk_weight *dt_bias,
                float *g, float *beta, float *state, const bk_batch *bt, int Hk, int Hv, int dk,
                int dv, float q_scale, int vmap);

    /* ---- ops of Gemma 4 and Nemotron-H (shared/spec/gemma4.md, nemotron_h.md) ---- */
    /* out[i,j] = gelu_tanh(gate[i,j]) · up[i,j] for rows of n, gelu_tanh(x) =
     * 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))); out may alias gate. */
    void (*gelu_tanh_mul)(backend *b, float *out, const float *gate, const float *up, int m, int n);
    /* x[i] = max(x[i], 0)², in place (Nemotron-H MLP). */
    void (*relu2)(backend *b, float *x, size_t n);
    /* x[i] = x[i] · alpha · (s ? s[0] : 1), in place; s is a 1-element weight (Gemma's
     * layer_scalar) or NULL. */
    void (*scale)(backend *b, float *x, float alpha, const bk_weight *s, size_t n);
    /* x[i] = cap · tanh(x[i] / cap), in place (final logit softcap). */
    void (*softcap)(backend *b, float *x, float cap, size_t n);
    /* Gate-first grouped RMSNorm (Mamba2 / Zamba2 RMSNormGated, norm_before_gate false):
     * per row of width, v = x · silu(z); each of the width/group contiguous groups is
     * normalised on its own, v̂ = v · rsqrt(mean_group(v²) + eps); out = v̂ · w with
     * w [width] plain. x, z, out are [m, width] contiguous; out may alias x. */
    void (*rmsnorm_gated_grouped)(backend *b, float *out, const float *x, const float *z,
                                  const bk_weight *w, int m, int width, int group, float eps);
    /* Mamba2 selective state space (SSD), per token and head h of group g = h / (H/G),
     * f32 state S = state[slot, h] of [P, N]:
     *   Δ = softplus(dt[t,h] + dt_bias[h]) (then max(Δ, dt_min) when dt_min > 0);
     *   a = exp(Δ · −exp(A_log[h]));
     *   S = a·S + Δ · x[t,h,:] ⊗ B[t,g,:];   y[t,h,:] = S·C[t,g,:] + D[h]·x[t,h,:].
     * x rows ([H, P] used) are ld_x floats apart, B and C rows ([G, N] used) ld_bc apart,
     * dt rows ([H] used) ld_dt apart; y is [m, H, P]. A_log, dt_bias, D are [H]. The
     * backend may use the chunked SSD form for long runs (equal to f32 rounding). */
    void (*ssd)(backend *b, float *y, const float *x, int ld_x, const float *B, const float *C,
                int ld_bc, const float *dt, int ld_dt, const bk_weight *A_log,
                const bk_weight *dt_bias, const bk_weight *D, float *state, const bk_batch *bt,
                int H, int P, int N, int G, float dt_min);

    /* ================ optional slots: NULL where a backend has none ================
     * Everything above is mandatory (tests/unit/test_backend_ops.c checks every slot of
     * every backend); callers test an optional slot, or use the wrappers below. */

    /* Streaming read bandwidth of backend memory in GB/s over a buffer of bytes, the
     * ceiling decode is held against. Allocates; never called from the step loop. */
    double (*read_bandwidth)(backend *b, size_t bytes);
    /* Device memory of a backend that has its own (backend_mem below). */
    void (*memory)(const backend *b, backend_mem *m);
    /* The first device error since create ("op: message"), or NULL. Ops cannot return
     * errors, so a failed launch is kept and every later batch_prepare fails with it. */
    const char *(*last_error)(const backend *b);
    /* Decode graphs: graph_begin(key) before a forward, graph_end after it. The first
     * forward under a key is captured (nothing runs yet) and begin returns 0; a later
     * one returns 1 and only refills the host-side inputs while the ops are called;
     * graph_end then launches the graph. With wait it also waits and completes the
     * downloads the forward asked for; without, it returns at once and those downloads
     * complete at graph_sync, so the host can prepare the next step (even begin its
     * graph: two may be in flight) while this one runs. The key must determine the whole
     * op sequence. When graph_end fails, nothing of the forward ran: run it again without
     * graphs. graph_sync waits for the oldest graph in flight and completes its downloads
     * (0 at once when none is); an eager op that needs the host staging or a download
     * completes every graph in flight first. graph_clear drops every captured graph
     * (after buffers they point at were freed). */
    int (*graph_begin)(backend *b, uint64_t key, strata_err *err);
    int (*graph_end)(backend *b, int wait, strata_err *err);
    int (*graph_sync)(backend *b, strata_err *err);
    void (*graph_clear)(backend *b);
    /* The sampler on the backend: row i of logits [m, n] (backend memory) is turned into a
     * token by req[i] (host memory) with the semantics of engine/sampler.c (the allow mask,
     * then bias, then the
     * penalties of req[i].counts, then greedy or temperature, top-k, top-p, min-p and the
     * Philox draw req[i].draw of req[i].seed; logprobs of the processed distribution). The
     * results reach host res[m] as a download's do (at graph_end or graph_sync inside a
     * graph). logits is processed in place; a row the backend leaves to the host (token -1)
     * keeps its processed values there and writes no feed. When req[i].counts is set the
     * chosen token is counted in it; when req[i].feed is set it is written there. */
    void (*sample)(backend *b, bk_sample_res *res, float *logits, const bk_sample_req *req, int m,
                   int n);
    /* embed() where a token's id may still be on the device: a negative ids[i] (host
     * memory) takes fed[bt->slot[bt->tok_seq[i]]] (backend memory, written by sample
     * through req.feed) instead, so a decode step can run before the host has seen the
     * tokens of the step before it. */
    void (*embed_fed)(backend *b, float *out, const bk_weight *table, const int32_t *ids,
                      const int32_t *fed, const bk_batch *bt, int m);
    /* A weight that stays in host memory but is read by the backend's ops there (pinned
     * and mapped: the device reads it over the bus, so a large table read a row per token
     * costs no device memory and no host round trip). *dev gets host's dtype and shape and
     * the address the ops take; weight_unmap(dev) undoes it before host's memory goes.
     * Any error (no mapping, a locked-memory limit): read it on the host instead. */
    int (*weight_map)(backend *b, const bk_weight *host, bk_weight *dev, strata_err *err);
    void (*weight_unmap)(backend *b, bk_weight *dev);
    /* Profiling: while on, graphs are refused (forwards run eagerly) and every op is timed
     * (on the device by events; on the CPU by the host clock around the call, as a CPU op
     * is done when it returns); profile_read then fills out[max] with the last forward's
     * time per kind of op, most first, and returns how many kinds it wrote (-1: nothing
     * timed). For benchmarks only: the timing costs launches or clock reads of its own. */
    void (*profile)(backend *b, int on);
    int (*profile_read)(backend *b, bk_op_time *out, int max);
    /* The precision the model computes in (its kv cache dtype, arch_kv_dtype): at BF16 the
     * backend may round activations to bf16 where a faster form needs it, as the reference
     * does in bf16 (the CUDA backend's chunked delta rule, chunked SSD and flash prefill
     * attention on tensor cores); at F32, the default, every op keeps f32. */
    void (*compute_dtype)(backend *b, dtype dt);
    /* Runs fn(ctx, i) for every i < n on the host threads the backend computes with (the
     * CPU backend's pool) and returns when all have returned: host work of a step between
     * two forwards (the host sampler's rows) spread as the ops are, where it would
     * otherwise keep those threads waiting. fn(ctx, i) must touch nothing another i
     * touches. Called from the step thread, never inside an op or a graph. */
    void (*host_tasks)(backend *b, void (*fn)(void *ctx, int i), void *ctx, int n);
    /* 1 when op runs with weights of dtype dt (DTYPE_COUNT: any it takes). NULL: every
     * mandatory op with BF16, F16 or F32 weights, every filled optional slot. */
    int (*supports)(const backend *b, int op, dtype dt);
} backend_ops;

/* Ops and optional slots, for backend_supports(). */
/* a list laid out by hand: clang-format reflows X-macro lists differently each run */
/* clang-format off */
#define BK_OP_LIST(X)                                                          \
    X(EMBED) X(RMSNORM) X(RMSNORM_GATED) X(RESIDUAL) X(L2NORM) X(ADD)          \
    X(SILU_MUL) X(SIGMOID_MUL) X(SPLIT_HALVES) X(GATHER_ROWS) X(MATMUL)        \
    X(MATMUL_N) X(MATMUL_GLU) X(MATMUL_GNORM)                                  \
    X(ROPE) X(KV_STORE) X(ATTENTION) X(ATTN_PREP) X(CONV1D) X(GDN_GATES)       \
    X(GATED_DELTA) X(GDN) X(GELU_TANH_MUL) X(RELU2) X(SCALE) X(SOFTCAP)        \
    X(RMSNORM_GATED_GROUPED) X(SSD) X(READ_BANDWIDTH) X(MEMORY) X(LAST_ERROR)  \
    X(GRAPHS) X(SAMPLE) X(EMBED_FED) X(WEIGHT_MAP) X(PROFILE) X(COMPUTE_DTYPE) \
    X(HOST_TASKS)
/* clang-format on */
enum {
#define BK_OP_ENUM(n) BK_OP_##n,
    BK_OP_LIST(BK_OP_ENUM)
#undef BK_OP_ENUM
        BK_OP_COUNT,
    BK_OP_FIRST_OPTIONAL = BK_OP_READ_BANDWIDTH
};

struct backend {
    const backend_ops *ops;
    int threads; /* worker threads the backend uses (CPU) */
    void *impl;  /* backend-private */
};

/* b->ops->destroy(b); accepts NULL. */
void backend_destroy(backend *b);
/* "cpu", "cuda". */
const char *backend_name(const backend *b);
/* 1 when b runs op (BK_OP_*) with weights of dtype dt (DTYPE_COUNT: any). */
int backend_supports(const backend *b, int op, dtype dt);
/* The optional slots, each a no-op or an error where b has none: */
/* 0 and m filled, or -1 (a backend without memory of its own: fields untouched). */
int backend_memory(const backend *b, backend_mem *m);
/* weight_map, or STRATA_EUNSUPPORTED where b has none (the CPU: host memory is its own). */
int backend_weight_map(backend *b, const bk_weight *host, bk_weight *dev, strata_err *err);
/* compute_dtype, or nothing where b computes in f32 only. */
void backend_compute_dtype(backend *b, dtype dt);
/* host_tasks, or fn(ctx, 0), ..., fn(ctx, n - 1) in turn on the caller's thread. */
void backend_host_tasks(backend *b, void (*fn)(void *ctx, int i), void *ctx, int n);
/* STRATA_EUNSUPPORTED when b has no graphs (then just run eagerly, and no end). */
int backend_graph_begin(backend *b, uint64_t key, strata_err *err);
int backend_graph_end(backend *b, int wait, strata_err *err);
int backend_graph_sync(backend *b, strata_err *err);

#endif
