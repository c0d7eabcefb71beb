/* nemotron_h.c - Nemotron-H (NVIDIA Nemotron 3 Nano 4B): a hybrid stack in which each layer
 * holds ONE mixer, Mamba2 (M), GQA attention without positional encoding (*) or a relu²
 * MLP (-), each pre-normed and added to the residual. Section numbers refer to
 * shared/spec/nemotron_h.md.
 *
 * Per cache slot this model keeps: for every attention layer the K/V rows ([cap, KV·D]
 * f32); for every Mamba2 layer the f32 SSM state [H, P, N] and the conv window, the last
 * K-1 raw (pre-conv) xBC rows. in_proj is bound once and used as three row views (z, xBC,
 * dt: §6.1), so each part lands contiguous for the conv, the scan and the gated norm.
 *
 * Δ floor. The model's definition (NVIDIA's reference, llama.cpp) clamps Δ only to
 * time_step_limit, (0, inf) by default: no floor, and that is what runs by default.
 * transformers (5.24 and the newest revision) floors Δ at time_step_min in every
 * call that takes its chunked-scan branch: every call of more than one token, and a
 * one-token call with no recurrent state yet (a sequence's first token); one-token decode
 * (selective_state_update) is not floored (§11.1). For comparisons against it, the
 * environment variable STRATA_NEMOTRON_DT_FLOOR selects:
 *   none (default)  the model's definition;
 *   prefill         floor at time_step_min in any step where a sequence has more than one
 *                   token or starts at position 0 (transformers 5.24; a step that mixes
 *                   decodes with such a chunk floors the decodes too, which transformers
 *                   never runs);
 *   all             floor in every step (older transformers torch paths).
 * It is read once, at open. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "models/arch.h"

#define ARCH_NAME "nemotron_h"

enum { NH_FLOOR_NONE, NH_FLOOR_PREFILL, NH_FLOOR_ALL };

typedef struct nh_config {
    int vocab;     /* vocab_size */
    int h;         /* hidden_size */
    int n_layer;   /* length of the pattern; num_hidden_layers must agree when present */
    char *kind;    /* [n_layer] 'M' | '*' | '-': hybrid_override_pattern or layers_block_type */
    int H, KV, D;  /* num_attention_heads, num_key_value_heads, head_dim (attention_head_dim) */
    int inter;     /* intermediate_size (MLP) */
    int mH, mP;    /* mamba_num_heads, mamba_head_dim */
    int N;         /* ssm_state_size */
    int G;         /* n_groups (mamba_n_groups, mamba_num_groups) */
    int K;         /* conv_kernel (mamba_d_conv) */
    int conv_bias; /* use_conv_bias */
    float eps;     /* layer_norm_epsilon (rms_norm_eps, norm_eps) */
    float dt_lo;   /* time_step_limit[0]: the model's own floor on Δ, 0 by default */
    float dt_min;  /* time_step_min: transformers' floor (STRATA_NEMOTRON_DT_FLOOR only) */
    int tied;      /* tie_word_embeddings */
    int max_pos;   /* max_position_embeddings */
} nh_config;

typedef struct nh_layer {
    bk_weight norm; /* [h] plain */
    /* Mamba2 (§6); I = mH·mP, CD = I + 2·G·N */
    bk_weight in_proj;           /* [I + CD + mH, h]: rows z | xBC | dt */
    bk_weight w_z, w_xbc, w_dt;  /* row views of in_proj: [I, h], [CD, h], [mH, h] */
    bk_weight conv, conv_b;      /* [CD, 1, K], [CD] (absent without use_conv_bias) */
    bk_weight A_log, D, dt_bias; /* [mH] */
    bk_weight gnorm;             /* [I] plain, G groups of I/G */
    bk_weight out_proj;          /* [h, I] */
    /* attention (§8) */
    bk_weight wq;     /* [H·D, h] */
    bk_weight wk, wv; /* [KV·D, h] */
    bk_weight wo;     /* [h, H·D] */
    /* MLP (§8) */
    bk_weight up;   /* [inter, h] */
    bk_weight down; /* [h, inter] */
} nh_layer;

typedef struct nh {
    /* the embedding [vocab, h]; the head: norm_f [h] plain, lm_head [vocab, h] (the
     * embedding when tied); per layer the cache: attention kv [pool, KV·D] paged, Mamba2
     * conv [slots, K-1, CD] raw xBC rows, oldest first, and S [slots, mH, mP, N] */
    arch_model base;
    nh_config c;
    int floor_mode; /* NH_FLOOR_* */
    nh_layer *layers;
    /* activations, [step_tokens, ·] f32 */
    float *x, *xn, *mix; /* [T, h] */
    float *wide;         /* [T, max(I, H·D, inter)]: z, q or up */
    float *pre, *post;   /* [T, max(CD, KV·D)]: xBC before / after the conv; k, v */
    float *y;            /* [T, max(I, H·D)]: scan output, attention context */
    float *dtr;          /* [T, mH] dt_raw */
} nh;
/* arch_open and the shared model_arch entries take the struct as its arch_model */
_Static_assert(offsetof(nh, base) == 0, "base first");

/* ---- config (§2) ---- */

/* Read by hand in nh_parse and nh_parse_pattern. */
static const char *const nh_known_keys[] = {
    "model_type",        "num_hidden_layers", "hybrid_override_pattern",
    "layers_block_type", "time_step_limit",   "max_position_embeddings",
    "sliding_window",    "eos_token_id",      NULL,
};

static const cfg_field nh_fields[] = {
    CFG_INT(nh_config, vocab, "vocab_size", 1, 1 << 24),
    CFG_INT(nh_config, h, "hidden_size", 1, 1 << 16),
    CFG_INT_OR(nh_config, G, "n_groups|mamba_n_groups|mamba_num_groups", 8, 1, 4096),
    CFG_INT_OR(nh_config, K, "conv_kernel|mamba_d_conv", 4, 1, 64),
    CFG_INT_OR(nh_config, max_pos, "max_position_embeddings", 4096, 1, 1 << 30),
    CFG_FLOAT_OR(nh_config, eps, "layer_norm_epsilon|rms_norm_eps|norm_eps", 1e-5, 1e-30, 1),
    CFG_FLOAT_OR(nh_config, dt_min, "time_step_min", 1e-3, 0, 1e9),
    CFG_BOOL_OR(nh_config, conv_bias, "use_conv_bias", 1),
    CFG_BOOL_OR(nh_config, tied, "tie_word_embeddings", 0),
    CFG_ONLY_STR("mlp_hidden_act", "relu2"),
    CFG_ONLY_STR("mamba_hidden_act", "silu"),
    /* §2.1: the checkpoint has no bias tensors but the conv's */
    CFG_ONLY_FALSE("use_bias"),
    CFG_ONLY_FALSE("mamba_proj_bias"),
    CFG_ONLY_FALSE("mlp_bias"),
    CFG_ONLY_FALSE("attention_bias"),
};
/* §2.1: each mixer's fields are needed only when the pattern has that mixer. */
static const cfg_field nh_attention_fields[] = {
    CFG_INT(nh_config, H, "num_attention_heads", 1, 1024),
    CFG_INT(nh_config, KV, "num_key_value_heads", 1, 1024),
    CFG_INT(nh_config, D, "head_dim|attention_head_dim", 1, 4096), /* never hidden / heads */
};
static const cfg_field nh_mlp_fields[] = {
    CFG_INT(nh_config, inter, "intermediate_size", 1, 1 << 18),
};
static const cfg_field nh_mamba_fields[] = {
    CFG_INT(nh_config, mH, "mamba_num_heads", 1, 4096),
    CFG_INT(nh_config, mP, "mamba_head_dim", 1, 4096),
    CFG_INT(nh_config, N, "ssm_state_size", 1, 4096),
};

/* Fields with no effect on this forward: init ranges, training switches, kernel choices,
 * chunk sizes (blocking only, §2.1), the MoE / MTP fields of the family (an 'E' layer is
 * refused by the pattern parser), and the residual dtype (the residual is f32 here). */
static const char *const nh_ignored_keys[] = {
    "hidden_dropout",
    "bos_token_id",
    "pad_token_id",
    "chunk_size",
    "mamba_chunk_size",
    "expand",
    "rescale_prenorm_residual",
    "residual_in_fp32",
    "time_step_floor",
    "time_step_max",
    "use_mamba_kernels",
    "num_logits_to_keep",
    "mamba_ssm_cache_dtype",
    "auto_map",
    "moe_intermediate_size",
    "moe_latent_size",
    "moe_shared_expert_intermediate_size",
    "moe_shared_expert_overlap",
    "mtp_layers_block_type",
    "mtp_hybrid_override_pattern",
    "n_group",
    "n_routed_experts",
    "n_shared_experts",
    "norm_topk_prob",
    "num_experts_per_tok",
    "num_nextn_predict_layers",
    "output_router_logits",
    "routed_scaling_factor",
    "topk_group",
    "router_aux_loss_coef",
    NULL,
};

/* §2.2: one character per layer; the list spelling (old and newest names) maps to the same. */
static int nh_parse_pattern(arch_model *am, nh_config *c, json_t *root, const char *where,
                            strata_err *err) {
    json_t *pat = json_object_get(root, "hybrid_override_pattern");
    json_t *lbt = json_object_get(root, "layers_block_type");
    if (pat && json_is_null(pat)) pat = NULL;
    if (lbt && json_is_null(lbt)) lbt = NULL;
    if (!pat && !lbt)
        return strata_err_set(
            err, STRATA_EFORMAT,
            "%s: missing field \"hybrid_override_pattern\" (or layers_block_type)", where);
    if (pat && !json_is_string(pat))
        return strata_err_set(err, STRATA_EFORMAT,
                              "%s: field \"hybrid_override_pattern\" must be a string", where);
    if (lbt && !json_is_array(lbt))
        return strata_err_set(err, STRATA_EFORMAT, "%s: field \"layers_block_type\" must be a list",
                              where);
    size_t n = pat ? strlen(json_string_value(pat)) : json_array_size(lbt);
    if (n < 1 || n > 1024)
        return strata_err_set(err, STRATA_EFORMAT, "%s: the layer pattern (%s) has %zu layers",
                              where, pat ? "hybrid_override_pattern" : "layers_block_type", n);
    if (!(c->kind = arch_host_new(am, n + 1, 1, err))) return err->code;
    c->n_layer = (int)n;
    for (size_t i = 0; pat && i < n; i++) {
        char ch = json_string_value(pat)[i];
        if (ch == 'E')
            return strata_err_set(err, STRATA_EUNSUPPORTED,
                                  "%s: hybrid_override_pattern[%zu] = 'E' (MoE) is not supported",
                                  where, i);
        if (ch != 'M' && ch != '*' && ch != '-')
            return strata_err_set(err, STRATA_EFORMAT,
                                  "%s: hybrid_override_pattern[%zu] = '%c' is not M, * or -", where,
                                  i, ch);
        c->kind[i] = ch;
    }
    if (lbt && pat && json_array_size(lbt) != n)
        return strata_err_set(err, STRATA_EFORMAT,
                              "%s: layers_block_type has %zu layers, hybrid_override_pattern %zu",
                              where, json_array_size(lbt), n);
    static const struct {
        const char *name;
        char kind;
    } names[] = {{"mamba", 'M'},
                 {"linear_attention", 'M'},
                 {"attention", '*'},
                 {"full_attention", '*'},
                 {"mlp", '-'}};
    for (size_t i = 0; lbt && i < n; i++) {
        const char *s = json_string_value(json_array_get(lbt, i));
        char ch = 0;
        for (size_t k = 0; s && k < sizeof names / sizeof names[0]; k++)
            if (!strcmp(s, names[k].name)) ch = names[k].kind;
        if (!ch)
            return strata_err_set(err,
                                  s && !strcmp(s, "moe") ? STRATA_EUNSUPPORTED : STRATA_EFORMAT,
                                  "%s: layers_block_type[%zu] = \"%s\" is not supported", where, i,
                                  s ? s : "(not a string)");
        if (pat && c->kind[i] != ch)
            return strata_err_set(err, STRATA_EFORMAT,
                                  "%s: layers_block_type[%zu] = \"%s\" disagrees with "
                                  "hybrid_override_pattern '%c'",
                                  where, i, s, c->kind[i]);
        c->kind[i] = ch;
    }
    long long nl;
    if (cfg_int(root, where, "num_hidden_layers", 1, (long long)n, 1, 1024, &nl, err))
        return err->code;
    if (nl != (long long)n)
        return strata_err_set(err, STRATA_EFORMAT,
                              "%s: num_hidden_layers %lld disagrees with the %zu-layer pattern",
                              where, nl, n);
    return 0;
}

/* One bound of time_step_limit: a number, or transformers' {"__float__": "Infinity"}. */
static int nh_limit_value(json_t *v, double *out) {
    if (json_is_number(v)) {
        *out = json_number_value(v);
        return 0;
    }
    const char *s = json_string_value(json_object_get(v, "__float__"));
    if (!s) s = json_string_value(v);
    if (!s) return -1;
    char *end;
    *out = strtod(s, &end);
    return end == s || *end ? -1 : 0;
}

static int nh_floor_mode(int *mode, strata_err *err) {
    const char *v = getenv("STRATA_NEMOTRON_DT_FLOOR");
    if (!v || !*v || !strcmp(v, "none")) *mode = NH_FLOOR_NONE;
    else if (!strcmp(v, "prefill")) *mode = NH_FLOOR_PREFILL;
    else if (!strcmp(v, "all")) *mode = NH_FLOOR_ALL;
    else
        return strata_err_set(err, STRATA_EINVALID,
                              "STRATA_NEMOTRON_DT_FLOOR=%s: expected none, prefill or all", v);
    return 0;
}

/* Every field sits at config.json's top level (no text_config). A backend without the ops
 * only this model uses is refused first. */
static int nh_parse(void *impl, const model_arch_ctx *ctx, json_t *root, const char *where,
                    strata_err *err) {
    nh *m = impl;
    nh_config *c = &m->c;
    const backend_ops *o = ctx->b->ops;
    if (!o->relu2 || !o->rmsnorm_gated_grouped || !o->ssd)
        return strata_err_set(
            err, STRATA_EUNSUPPORTED,
            "nemotron_h: backend %s lacks the relu2, rmsnorm_gated_grouped or ssd op", o->name);
    if (nh_floor_mode(&m->floor_mode, err)) return err->code;
    const cfg_table tables[] = {CFG_TABLE(nh_fields), CFG_TABLE(nh_attention_fields),
                                CFG_TABLE(nh_mlp_fields), CFG_TABLE(nh_mamba_fields)};
    if (cfg_check_keys_tables(root, where, tables, 4, nh_known_keys, nh_ignored_keys, err))
        return err->code;
    if (nh_parse_pattern(&m->base, c, root, where, err)) return err->code;
    int nm = 0, na = 0, nf = 0;
    for (int i = 0; i < c->n_layer; i++) {
        nm += c->kind[i] == 'M';
        na += c->kind[i] == '*';
        nf += c->kind[i] == '-';
    }
    if (CFG_READ(root, where, nh_fields, c, 0, err) ||
        CFG_READ(root, where, nh_attention_fields, c, !na, err) ||
        CFG_READ(root, where, nh_mlp_fields, c, !nf, err) ||
        CFG_READ(root, where, nh_mamba_fields, c, !nm, err))
        return err->code;
    if (na && c->H % c->KV)
        return strata_err_set(
            err, STRATA_EFORMAT,
            "%s: num_attention_heads %d is not a multiple of num_key_value_heads %d", where, c->H,
            c->KV);
    if (nm && c->mH % c->G)
        return strata_err_set(err, STRATA_EFORMAT,
                              "%s: mamba_num_heads %d is not a multiple of n_groups %d", where,
                              c->mH, c->G);
    json_t *lim = json_object_get(root, "time_step_limit");
    if (lim && !json_is_null(lim)) {
        double lo, hi;
        if (!json_is_array(lim) || json_array_size(lim) != 2 ||
            nh_limit_value(json_array_get(lim, 0), &lo) ||
            nh_limit_value(json_array_get(lim, 1), &hi) || !(lo >= 0) || !(hi > lo))
            return strata_err_set(err, STRATA_EFORMAT,
                                  "%s: time_step_limit must be [low >= 0, high > low]", where);
        if (!isinf(hi))
            return strata_err_set(
                err, STRATA_EUNSUPPORTED,
                "%s: time_step_limit with a finite upper bound %g is not supported", where, hi);
        c->dt_lo = (float)lo;
    }

    json_t *sw = json_object_get(root, "sliding_window");
    if (sw && !json_is_null(sw))
        return strata_err_set(err, STRATA_EUNSUPPORTED,
                              "%s: sliding_window is not supported (null expected)", where);
    m->layers = arch_layers_new(&m->base, c->n_layer, c->max_pos, sizeof *m->layers, err);
    return m->layers ? 0 : err->code;
}

/* ---- weights (§3) ---- */

/* A view of rows [r0, r0 + rows) of a bound [n, k] matrix. */
static bk_weight nh_rows(const bk_weight *w, int64_t r0, int64_t rows) {
    bk_weight v = *w;
    v.data = (const char *)w->data + (size_t)r0 * dtype_row_bytes(w->dt, w->shape[1]);
    v.shape[0] = rows;
    return v;
}

static int nh_bind(void *impl, const model_arch_ctx *ctx, strata_err *err) {
    nh *m = impl;
    const nh_config *c = &m->c;
    /* §3: hub files say backbone.embeddings; transformers' own saves may say model.*, some
     * exports embedding (singular). The last candidate is the required one, so a missing
     * table (and every dummy model) gets the hub name. */
    static const char *const embed[][2] = {{"model.", "embeddings.weight"},
                                           {"model.", "embedding.weight"},
                                           {"backbone.", "embedding.weight"},
                                           {"backbone.", "embeddings.weight"}};
    const char *p;
    if (arch_bind_embed(ctx, &m->base, c->vocab, c->h, embed, 4, &p, err) ||
        arch_head_bind(ctx, &m->base, c->tied, p, "norm_f.weight", c->vocab, c->h, err))
        return err->code;

    const int64_t h = c->h, I = (int64_t)c->mH * c->mP, CD = I + 2LL * c->G * c->N;
    for (int i = 0; i < c->n_layer; i++) {
        nh_layer *L = &m->layers[i];
        ARCH_BIND_LAYER(norm, "norm.weight", h);
        switch (c->kind[i]) {
        case 'M': {
            ARCH_BIND_LAYER(in_proj, "mixer.in_proj.weight", I + CD + c->mH, h);
            ARCH_BIND_LAYER(conv, "mixer.conv1d.weight", CD, 1, c->K);
            if (c->conv_bias) ARCH_BIND_LAYER(conv_b, "mixer.conv1d.bias", CD);
            ARCH_BIND_LAYER(A_log, "mixer.A_log", c->mH);
            ARCH_BIND_LAYER(D, "mixer.D", c->mH);
            ARCH_BIND_LAYER(dt_bias, "mixer.dt_bias", c->mH);
            ARCH_BIND_LAYER(gnorm, "mixer.norm.weight", I);
            ARCH_BIND_LAYER(out_proj, "mixer.out_proj.weight", h, I);
            /* §6.1: z | xBC | dt, in this order */
            L->w_z = nh_rows(&L->in_proj, 0, I);
            L->w_xbc = nh_rows(&L->in_proj, I, CD);
            L->w_dt = nh_rows(&L->in_proj, I + CD, c->mH);
            break;
        }
        case '*': {
            const int64_t HD = (int64_t)c->H * c->D, KVD = (int64_t)c->KV * c->D;
            ARCH_BIND_LAYER(wq, "mixer.q_proj.weight", HD, h);
            ARCH_BIND_LAYER(wk, "mixer.k_proj.weight", KVD, h);
            ARCH_BIND_LAYER(wv, "mixer.v_proj.weight", KVD, h);
            ARCH_BIND_LAYER(wo, "mixer.o_proj.weight", h, HD);
            break;
        }
        default:
            ARCH_BIND_LAYER(up, "mixer.up_proj.weight", c->inter, h);
            ARCH_BIND_LAYER(down, "mixer.down_proj.weight", h, c->inter);
            break;
        }
    }
    return 0;
}

/* ---- caches and scratch ---- */

static size_t nh_max(size_t a, size_t b) { return a > b ? a : b; }

static int nh_alloc(void *impl, const model_arch_ctx *ctx, model_info *info, strata_err *err) {
    nh *m = impl;
    const nh_config *c = &m->c;
    (void)info;
    m->base.kv_dt = arch_kv_dtype(ctx, m->base.head.w.dt);
    size_t I = (size_t)c->mH * c->mP, CD = I + 2u * c->G * c->N;
    size_t qw = (size_t)c->H * c->D, kw = (size_t)c->KV * c->D;
    ARCH_ALLOC_ROWS(c->h, &m->x, &m->xn, &m->mix);
    ARCH_ALLOC_ROWS(nh_max(nh_max(I, qw), (size_t)c->inter), &m->wide);
    ARCH_ALLOC_ROWS(nh_max(CD, kw), &m->pre, &m->post);
    ARCH_ALLOC_ROWS(nh_max(I, qw), &m->y);
    ARCH_ALLOC_ROWS(nh_max((size_t)c->mH, 1), &m->dtr);
    if (arch_head_init(&m->base, BK_NORM_PLAIN, c->eps, 0, err)) return err->code;
    /* attention pages its kv from the pool, Mamba2 keeps a state a slot */
    for (int i = 0; i < c->n_layer; i++) {
        if (c->kind[i] == '*') m->base.cache[i].kv = (bk_kv){.dt = m->base.kv_dt, .width = (int)kw};
        else if (c->kind[i] == 'M' &&
                 arch_cache_recurrent(&m->base, i, (size_t)(c->K - 1) * CD, I * c->N, err))
            return err->code;
    }
    return arch_cache_paged(ctx, &m->base, err);
}

static const arch_steps nh_steps = {ARCH_NAME, sizeof(nh), 0, nh_parse, nh_bind, nh_alloc, NULL};

static int nh_open(void **impl, const model_arch_ctx *ctx, model_info *info, strata_err *err) {
    return arch_open(impl, &nh_steps, ctx, info, err);
}

/* ---- forward (§4) ---- */

/* The Δ floor of this step (see the file comment). */
static float nh_step_dt_min(const nh *m, const bk_batch *bt) {
    switch (m->floor_mode) {
    case NH_FLOOR_ALL: return m->c.dt_min;
    case NH_FLOOR_PREFILL:
        for (int s = 0; s < bt->n_seqs; s++)
            if (bt->len[s] > 1 || bt->pos0[s] == 0) return m->c.dt_min;
        return 0.0f;
    default: return m->c.dt_lo;
    }
}

/* Mamba2 mixer, §6: xn [T, h] -> m->mix [T, h], carrying the layer's state st. */
static void nh_mamba(nh *m, nh_layer *L, const arch_cache *st, bk_batch *bt, float dt_min) {
    const nh_config *c = &m->c;
    backend *b = m->base.b;
    const backend_ops *o = b->ops;
    int T = bt->n_tokens, I = c->mH * c->mP, GN = c->G * c->N, CD = I + 2 * GN;
    /* z [T, I], xBC_in [T, CD], dt_raw [T, mH] (§6.1): one op, so a backend can stream the
     * three row views in one pass (the CUDA backend's decode GEMV: one launch, not three) */
    float *outs[] = {m->wide, m->pre, m->dtr};
    const bk_weight *ws[] = {&L->w_z, &L->w_xbc, &L->w_dt};
    o->matmul_n(b, outs, m->xn, ws, 3, T);
    o->conv1d(b, m->post, m->pre, CD, &L->conv, L->conv_b.data ? &L->conv_b : NULL, st->conv, bt,
              CD, c->K, 1); /* silu(conv) over x|B|C (§6.2) */
    o->ssd(b, m->y, m->post, CD, m->post + I, m->post + I + GN, CD, m->dtr, c->mH, &L->A_log,
           &L->dt_bias, &L->D, st->S, bt, c->mH, c->mP, c->N, c->G, dt_min); /* §6.3-6.5 */
    /* the gate-first grouped norm (§6.6) and out_proj (§6.7), one op */
    o->matmul_gnorm(b, m->mix, m->y, m->wide, &L->gnorm, I / c->G, c->eps, BK_GNORM_GROUPED,
                    &L->out_proj, T);
}

/* GQA attention without positional encoding, §8: xn [T, h] -> m->mix [T, h], over the
 * layer's cache kv. */
static void nh_attention(nh *m, nh_layer *L, const bk_kv *kv, bk_batch *bt) {
    const nh_config *c = &m->c;
    backend *b = m->base.b;
    const backend_ops *o = b->ops;
    int T = bt->n_tokens;
    float *outs[] = {m->wide, m->pre, m->post}; /* q [T, H, D] (no RoPE), k, v [T, KV, D] */
    const bk_weight *ws[] = {&L->wq, &L->wk, &L->wv};
    o->matmul_n(b, outs, m->xn, ws, 3, T);
    o->kv_store(b, kv, m->pre, m->post, bt);
    o->attention(b, m->y, m->wide, kv, bt, c->H, c->KV, c->D, 1.0f / sqrtf((float)c->D), 0, 0.0f);
    o->matmul(b, m->mix, m->y, &L->wo, T);
}

/* MLP, §8: down(relu(up(u))²), no gate. */
static void nh_mlp(nh *m, nh_layer *L, bk_batch *bt) {
    backend *b = m->base.b;
    const backend_ops *o = b->ops;
    int T = bt->n_tokens;
    o->matmul(b, m->wide, m->xn, &L->up, T);
    o->matmul_glu(b, m->mix, m->wide, NULL, &L->down, T, BK_ACT_RELU2);
}

static int nh_forward(void *impl, bk_batch *bt, const int32_t *tokens, const int32_t *out_rows,
                      int n_out, model_out *out, strata_err *err) {
    nh *m = impl;
    const nh_config *c = &m->c;
    backend *b = m->base.b;
    const backend_ops *o = b->ops;
    int T = bt->n_tokens;
    if (arch_batch_prepare(&m->base, bt, err)) return err->code;
    float dt_min = nh_step_dt_min(m, bt);

    arch_embed(b, m->x, &m->base.embed, tokens, out->fed, bt); /* no scale, no position (§4) */
    o->rmsnorm(b, m->xn, m->x, &m->layers[0].norm, T, c->h, c->h, c->eps, BK_NORM_PLAIN); /* §5 */
    for (int i = 0; i < c->n_layer; i++) {
        nh_layer *L = &m->layers[i];
        switch (c->kind[i]) { /* on xn = norm(x), made by the previous residual step */
        case 'M': nh_mamba(m, L, &m->base.cache[i], bt, dt_min); break;
        case '*': nh_attention(m, L, &m->base.cache[i].kv, bt); break;
        default: nh_mlp(m, L, bt); break;
        }
        /* x += mix; and the next layer's norm (the head norms its own rows) */
        const bk_weight *next = i + 1 < c->n_layer ? &m->layers[i + 1].norm : NULL;
        o->residual(b, m->x, next ? m->xn : NULL, m->mix, NULL, 0, NULL, next, BK_NORM_PLAIN, T,
                    c->h, c->eps);
    }
    /* norm_f and the head only on the rows whose logits are wanted, a chunk at a time. */
    arch_logits(&m->base, m->x, out_rows, n_out, out);
    return 0;
}

const model_arch arch_nemotron_h = {
    "nemotron_h", NULL, nh_open, nh_forward, arch_reset_slot, arch_state_parts, arch_close};
