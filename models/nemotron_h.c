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
    float *conv_state;           /* [slots, K-1, CD] raw xBC rows, oldest first */
    float *S;                    /* [slots, mH, mP, N] f32 */
    /* attention (§8) */
    bk_weight wq;     /* [H·D, h] */
    bk_weight wk, wv; /* [KV·D, h] */
    bk_weight wo;     /* [h, H·D] */
    bk_kv kv;         /* [slots, cap, KV·D] */
    /* MLP (§8) */
    bk_weight up;   /* [inter, h] */
    bk_weight down; /* [h, inter] */
} nh_layer;

typedef struct nh {
    nh_config c;
    backend *b;
    int slots, cap, step_tokens;
    dtype kv_dt;       /* of the attention layers' caches (arch_kv_dtype) */
    int floor_mode;    /* NH_FLOOR_* */
    bk_weight embed;   /* [vocab, h] */
    bk_weight norm_f;  /* [h] plain */
    bk_weight lm_head; /* [vocab, h]; the embedding when tied */
    nh_layer *layers;
    /* activations, [step_tokens, ·] f32 */
    float *x, *xn, *mix; /* [T, h] */
    float *wide;         /* [T, max(I, H·D, inter)]: z, q or up */
    float *pre, *post;   /* [T, max(CD, KV·D)]: xBC before / after the conv; k, v */
    float *y;            /* [T, max(I, H·D)]: scan output, attention context */
    float *dtr;          /* [T, mH] dt_raw */
    arch_head head;      /* final norm, head matmul, softcap; its chunk buffers */
} nh;

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
static int nh_parse_pattern(nh_config *c, json_t *root, const char *where, strata_err *err) {
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
    c->kind = calloc(n + 1, 1);
    if (!c->kind) return strata_err_set(err, STRATA_ENOMEM, "nemotron_h: out of memory");
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

static int nh_parse(nh_config *c, json_t *root, strata_err *err) {
    const char *where = "config.json";
    memset(c, 0, sizeof *c);
    const cfg_field *const tables[] = {nh_fields, nh_attention_fields, nh_mlp_fields,
                                       nh_mamba_fields};
    const size_t sizes[] = {sizeof nh_fields / sizeof nh_fields[0],
                            sizeof nh_attention_fields / sizeof nh_attention_fields[0],
                            sizeof nh_mlp_fields / sizeof nh_mlp_fields[0],
                            sizeof nh_mamba_fields / sizeof nh_mamba_fields[0]};
    if (cfg_check_keys_tables(root, where, tables, sizes, 4, nh_known_keys, nh_ignored_keys, err))
        return err->code;
    if (nh_parse_pattern(c, root, where, err)) goto fail;
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
        goto fail;
    if (na && c->H % c->KV) {
        strata_err_set(err, STRATA_EFORMAT,
                       "%s: num_attention_heads %d is not a multiple of num_key_value_heads %d",
                       where, c->H, c->KV);
        goto fail;
    }
    if (nm && c->mH % c->G) {
        strata_err_set(err, STRATA_EFORMAT,
                       "%s: mamba_num_heads %d is not a multiple of n_groups %d", where, c->mH,
                       c->G);
        goto fail;
    }
    json_t *lim = json_object_get(root, "time_step_limit");
    if (lim && !json_is_null(lim)) {
        double lo, hi;
        if (!json_is_array(lim) || json_array_size(lim) != 2 ||
            nh_limit_value(json_array_get(lim, 0), &lo) ||
            nh_limit_value(json_array_get(lim, 1), &hi) || !(lo >= 0) || !(hi > lo)) {
            strata_err_set(err, STRATA_EFORMAT,
                           "%s: time_step_limit must be [low >= 0, high > low]", where);
            goto fail;
        }
        if (!isinf(hi)) {
            strata_err_set(err, STRATA_EUNSUPPORTED,
                           "%s: time_step_limit with a finite upper bound %g is not supported",
                           where, hi);
            goto fail;
        }
        c->dt_lo = (float)lo;
    }

    json_t *sw = json_object_get(root, "sliding_window");
    if (sw && !json_is_null(sw)) {
        strata_err_set(err, STRATA_EUNSUPPORTED,
                       "%s: sliding_window is not supported (null expected)", where);
        goto fail;
    }
    return 0;
fail:
    free(c->kind);
    c->kind = NULL;
    return err->code ? err->code : STRATA_EFORMAT;
}

/* ---- weights (§3) ---- */

/* A view of rows [r0, r0 + rows) of a bound [n, k] matrix. */
static bk_weight nh_rows(const bk_weight *w, int64_t r0, int64_t rows) {
    bk_weight v = *w;
    v.data = (const char *)w->data + (size_t)r0 * (size_t)w->shape[1] * dtype_size(w->dt);
    v.shape[0] = rows;
    return v;
}

static int nh_bind(nh *m, const model_arch_ctx *ctx, strata_err *err) {
    const nh_config *c = &m->c;
    /* §3: hub files say backbone.embeddings; transformers' own saves may say model.*, some
     * exports embedding (singular). The last candidate is the required one, so a missing
     * table (and every dummy model) gets the hub name. */
    static const char *const emb[][2] = {{"model.", "embeddings"},
                                         {"model.", "embedding"},
                                         {"backbone.", "embedding"},
                                         {"backbone.", "embeddings"}};
    const char *p = NULL;
    int64_t es[2] = {c->vocab, c->h}, hv[1] = {c->h};
    for (int i = 0; i < 4 && !p; i++) {
        int rc = arch_bind(ctx, &m->embed, i < 3, 2, es, err, "%s%s.weight", emb[i][0], emb[i][1]);
        if (rc < 0) return rc;
        if (rc == 0) p = emb[i][0];
    }
    if (arch_bind(ctx, &m->norm_f, 0, 1, hv, err, "%snorm_f.weight", p)) return err->code;
    if (c->tied) m->lm_head = m->embed;
    else if (arch_bind(ctx, &m->lm_head, 0, 2, es, err, "lm_head.weight")) return err->code;

    int64_t I = (int64_t)c->mH * c->mP, CD = I + 2LL * c->G * c->N;
    for (int i = 0; i < c->n_layer; i++) {
        nh_layer *L = &m->layers[i];
        ARCH_BIND_LAYER(norm, 1, hv, "norm.weight");
        switch (c->kind[i]) {
        case 'M': {
            int64_t ip[2] = {I + CD + c->mH, c->h}, cv[3] = {CD, 1, c->K}, cb[1] = {CD};
            int64_t hh[1] = {c->mH}, nv[1] = {I}, op[2] = {c->h, I};
            ARCH_BIND_LAYER(in_proj, 2, ip, "mixer.in_proj.weight");
            ARCH_BIND_LAYER(conv, 3, cv, "mixer.conv1d.weight");
            if (c->conv_bias) ARCH_BIND_LAYER(conv_b, 1, cb, "mixer.conv1d.bias");
            ARCH_BIND_LAYER(A_log, 1, hh, "mixer.A_log");
            ARCH_BIND_LAYER(D, 1, hh, "mixer.D");
            ARCH_BIND_LAYER(dt_bias, 1, hh, "mixer.dt_bias");
            ARCH_BIND_LAYER(gnorm, 1, nv, "mixer.norm.weight");
            ARCH_BIND_LAYER(out_proj, 2, op, "mixer.out_proj.weight");
            /* §6.1: z | xBC | dt, in this order */
            L->w_z = nh_rows(&L->in_proj, 0, I);
            L->w_xbc = nh_rows(&L->in_proj, I, CD);
            L->w_dt = nh_rows(&L->in_proj, I + CD, c->mH);
            break;
        }
        case '*': {
            int64_t q[2] = {(int64_t)c->H * c->D, c->h}, kv[2] = {(int64_t)c->KV * c->D, c->h};
            int64_t o[2] = {c->h, (int64_t)c->H * c->D};
            ARCH_BIND_LAYER(wq, 2, q, "mixer.q_proj.weight");
            ARCH_BIND_LAYER(wk, 2, kv, "mixer.k_proj.weight");
            ARCH_BIND_LAYER(wv, 2, kv, "mixer.v_proj.weight");
            ARCH_BIND_LAYER(wo, 2, o, "mixer.o_proj.weight");
            break;
        }
        default: {
            int64_t up[2] = {c->inter, c->h}, dn[2] = {c->h, c->inter};
            ARCH_BIND_LAYER(up, 2, up, "mixer.up_proj.weight");
            ARCH_BIND_LAYER(down, 2, dn, "mixer.down_proj.weight");
            break;
        }
        }
    }
    return 0;
}

/* ---- caches and scratch ---- */

static size_t nh_max(size_t a, size_t b) { return a > b ? a : b; }

static int nh_alloc(nh *m, const model_arch_ctx *ctx, strata_err *err) {
    const nh_config *c = &m->c;
    backend *b = m->b;
    size_t T = (size_t)m->step_tokens, S = (size_t)m->slots;
    size_t I = (size_t)c->mH * c->mP, CD = I + 2u * c->G * c->N;
    size_t qw = (size_t)c->H * c->D, kw = (size_t)c->KV * c->D;
    ARCH_ALLOC(m->x, T * c->h);
    ARCH_ALLOC(m->xn, T * c->h);
    ARCH_ALLOC(m->mix, T * c->h);
    ARCH_ALLOC(m->wide, T * nh_max(nh_max(I, qw), (size_t)c->inter));
    ARCH_ALLOC(m->pre, T * nh_max(CD, kw));
    ARCH_ALLOC(m->post, T * nh_max(CD, kw));
    ARCH_ALLOC(m->y, T * nh_max(I, qw));
    ARCH_ALLOC(m->dtr, T * nh_max((size_t)c->mH, 1));
    m->head = (arch_head){.norm = &m->norm_f,
                          .norm_mode = BK_NORM_PLAIN,
                          .eps = c->eps,
                          .head = &m->lm_head,
                          .softcap = 0,
                          .h = c->h,
                          .vocab = c->vocab};
    if (arch_head_init(b, &m->head, ARCH_NAME, m->slots, m->step_tokens, err)) return err->code;
    int n_att = 0;
    for (int i = 0; i < c->n_layer; i++) {
        nh_layer *L = &m->layers[i];
        n_att += c->kind[i] == '*';
        if (c->kind[i] == 'M') {
            ARCH_ALLOC(L->conv_state, S * (size_t)(c->K - 1) * CD);
            ARCH_ALLOC(L->S, S * I * c->N);
        }
    }
    int64_t pos_bytes = (int64_t)n_att * 2 * (int64_t)kw * (int64_t)dtype_size(m->kv_dt);
    if (n_att && arch_kv_pool(ctx, pos_bytes, m->slots, &m->cap, ARCH_NAME, err)) return err->code;
    for (int i = 0; i < c->n_layer; i++)
        if (c->kind[i] == '*' &&
            arch_kv_alloc_paged(ctx, &m->layers[i].kv, m->kv_dt, (int)kw, ARCH_NAME, err))
            return err->code;
    return 0;
}

static void nh_close(void *impl) {
    nh *m = impl;
    if (!m) return;
    backend *b = m->b;
    float *bufs[] = {m->x, m->xn, m->mix, m->wide, m->pre, m->post, m->y, m->dtr};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) b->ops->free(b, bufs[i]);
    arch_head_free(b, &m->head);
    for (int i = 0; m->layers && i < m->c.n_layer; i++) {
        nh_layer *L = &m->layers[i];
        arch_kv_free(b, &L->kv);
        float *p[] = {L->conv_state, L->S};
        for (size_t j = 0; j < sizeof p / sizeof p[0]; j++)
            if (p[j]) b->ops->free(b, p[j]);
    }
    free(m->layers);
    free(m->c.kind);
    free(m);
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

static int nh_open(void **impl, const model_arch_ctx *ctx, model_info *info, strata_err *err) {
    nh *m = calloc(1, sizeof *m);
    if (!m) return strata_err_set(err, STRATA_ENOMEM, "nemotron_h: out of memory");
    m->b = ctx->b;
    const backend_ops *o = ctx->b->ops;
    if (!o->relu2 || !o->rmsnorm_gated_grouped || !o->ssd) {
        strata_err_set(err, STRATA_EUNSUPPORTED,
                       "nemotron_h: backend %s lacks the relu2, rmsnorm_gated_grouped or ssd op",
                       o->name);
        goto fail;
    }
    if (nh_floor_mode(&m->floor_mode, err) || nh_parse(&m->c, ctx->config, err)) goto fail;
    const nh_config *c = &m->c;
    if (!(m->layers = arch_layers_new(ARCH_NAME, c->n_layer, sizeof *m->layers, err))) goto fail;
    arch_sizes(ctx, c->max_pos, &m->slots, &m->cap, &m->step_tokens);
    if (nh_bind(m, ctx, err)) goto fail;
    m->kv_dt = arch_kv_dtype(ctx, m->lm_head.dt);
    backend_compute_dtype(ctx->b, m->kv_dt);
    if (nh_alloc(m, ctx, err)) goto fail;

    if (arch_info(ctx, ARCH_NAME, c->vocab, m->slots, m->cap, m->step_tokens, 0, info, err))
        goto fail;
    /* Decode reads every weight but the embedding table (one row is gathered, §14); in_proj
     * counts once, not per view. */
    int64_t wb = arch_weight_bytes(&m->norm_f) + arch_weight_bytes(&m->lm_head);
    int64_t I = (int64_t)c->mH * c->mP, CD = I + 2LL * c->G * c->N;
    for (int i = 0; i < c->n_layer; i++) {
        nh_layer *L = &m->layers[i];
        const bk_weight *ws[] = {&L->norm, &L->in_proj, &L->conv,  &L->conv_b,   &L->A_log,
                                 &L->D,    &L->dt_bias, &L->gnorm, &L->out_proj, &L->wq,
                                 &L->wk,   &L->wv,      &L->wo,    &L->up,       &L->down};
        wb += arch_weights_bytes(ws, sizeof ws / sizeof ws[0]);
        if (c->kind[i] == '*')
            info->kv_bytes_per_token += 2LL * c->KV * c->D * (int64_t)dtype_size(m->kv_dt);
        else if (c->kind[i] == 'M')
            info->state_bytes += 2 * (I * c->N + (c->K - 1) * CD) * (int64_t)sizeof(float);
    }
    info->weight_bytes = wb;
    *impl = m;
    return 0;
fail:
    nh_close(m);
    return err->code ? err->code : STRATA_EINVALID;
}

static int nh_state_parts(void *impl, arch_state_part *out, int max) {
    nh *m = impl;
    const nh_config *c = &m->c;
    size_t I = (size_t)c->mH * c->mP, CD = I + 2u * c->G * c->N;
    int n = 0;
    for (int i = 0; i < c->n_layer && n + 2 <= max; i++) {
        if (c->kind[i] != 'M') continue;
        nh_layer *L = &m->layers[i];
        out[n++] = (arch_state_part){L->conv_state, (size_t)(c->K - 1) * CD * sizeof(float)};
        out[n++] = (arch_state_part){L->S, I * c->N * sizeof(float)};
    }
    return n;
}

static void nh_reset_slot(void *impl, int slot) {
    nh *m = impl;
    const nh_config *c = &m->c;
    backend *b = m->b;
    size_t I = (size_t)c->mH * c->mP, CD = I + 2u * c->G * c->N;
    size_t nw = (size_t)(c->K - 1) * CD, ns = I * c->N;
    for (int i = 0; i < c->n_layer; i++) {
        nh_layer *L = &m->layers[i];
        if (c->kind[i] != 'M') continue; /* K/V rows are overwritten before they are read */
        b->ops->zero(b, L->conv_state + (size_t)slot * nw, nw * sizeof(float));
        b->ops->zero(b, L->S + (size_t)slot * ns, ns * sizeof(float));
    }
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

/* Mamba2 mixer, §6: xn [T, h] -> m->mix [T, h]. */
static void nh_mamba(nh *m, nh_layer *L, bk_batch *bt, float dt_min) {
    const nh_config *c = &m->c;
    backend *b = m->b;
    const backend_ops *o = b->ops;
    int T = bt->n_tokens, I = c->mH * c->mP, GN = c->G * c->N, CD = I + 2 * GN;
    o->matmul(b, m->wide, m->xn, &L->w_z, T);  /* z [T, I] (§6.1) */
    o->matmul(b, m->pre, m->xn, &L->w_xbc, T); /* xBC_in [T, CD] */
    o->matmul(b, m->dtr, m->xn, &L->w_dt, T);  /* dt_raw [T, mH] */
    o->conv1d(b, m->post, m->pre, CD, &L->conv, L->conv_b.data ? &L->conv_b : NULL, L->conv_state,
              bt, CD, c->K, 1); /* silu(conv) over x|B|C (§6.2) */
    o->ssd(b, m->y, m->post, CD, m->post + I, m->post + I + GN, CD, m->dtr, c->mH, &L->A_log,
           &L->dt_bias, &L->D, L->S, bt, c->mH, c->mP, c->N, c->G, dt_min); /* §6.3-6.5 */
    o->rmsnorm_gated_grouped(b, m->y, m->y, m->wide, &L->gnorm, T, I, I / c->G, c->eps); /* §6.6 */
    o->matmul(b, m->mix, m->y, &L->out_proj, T);                                         /* §6.7 */
}

/* GQA attention without positional encoding, §8: xn [T, h] -> m->mix [T, h]. */
static void nh_attention(nh *m, nh_layer *L, bk_batch *bt) {
    const nh_config *c = &m->c;
    backend *b = m->b;
    const backend_ops *o = b->ops;
    int T = bt->n_tokens;
    float *outs[] = {m->wide, m->pre, m->post}; /* q [T, H, D] (no RoPE), k, v [T, KV, D] */
    const bk_weight *ws[] = {&L->wq, &L->wk, &L->wv};
    o->matmul_n(b, outs, m->xn, ws, 3, T);
    o->kv_store(b, &L->kv, m->pre, m->post, bt);
    o->attention(b, m->y, m->wide, &L->kv, bt, c->H, c->KV, c->D, 1.0f / sqrtf((float)c->D), 0,
                 0.0f);
    o->matmul(b, m->mix, m->y, &L->wo, T);
}

/* MLP, §8: down(relu(up(u))²), no gate. */
static void nh_mlp(nh *m, nh_layer *L, bk_batch *bt) {
    backend *b = m->b;
    const backend_ops *o = b->ops;
    int T = bt->n_tokens;
    o->matmul(b, m->wide, m->xn, &L->up, T);
    o->matmul_glu(b, m->mix, m->wide, NULL, &L->down, T, BK_ACT_RELU2);
}

static int nh_forward(void *impl, bk_batch *bt, const int32_t *tokens, const int32_t *out_rows,
                      int n_out, model_out *out, strata_err *err) {
    nh *m = impl;
    const nh_config *c = &m->c;
    backend *b = m->b;
    const backend_ops *o = b->ops;
    int T = bt->n_tokens;
    if (arch_check_batch(ARCH_NAME, bt, m->step_tokens, m->cap, err)) return err->code;
    if (o->batch_prepare(b, bt, err)) return err->code;
    float dt_min = nh_step_dt_min(m, bt);

    arch_embed(b, m->x, &m->embed, tokens, out->fed, bt); /* no scale, no position (§4) */
    o->rmsnorm(b, m->xn, m->x, &m->layers[0].norm, T, c->h, c->h, c->eps, BK_NORM_PLAIN); /* §5 */
    for (int i = 0; i < c->n_layer; i++) {
        nh_layer *L = &m->layers[i];
        switch (c->kind[i]) { /* on xn = norm(x), made by the previous residual step */
        case 'M': nh_mamba(m, L, bt, dt_min); break;
        case '*': nh_attention(m, L, bt); break;
        default: nh_mlp(m, L, bt); break;
        }
        /* x += mix; and the next layer's norm (the head norms its own rows) */
        const bk_weight *next = i + 1 < c->n_layer ? &m->layers[i + 1].norm : NULL;
        o->residual(b, m->x, next ? m->xn : NULL, m->mix, NULL, 0, NULL, next, BK_NORM_PLAIN, T,
                    c->h, c->eps);
    }
    /* norm_f and the head only on the rows whose logits are wanted, a chunk at a time. */
    arch_logits(b, &m->head, m->x, out_rows, n_out, out);
    return 0;
}

const model_arch arch_nemotron_h = {
    .model_type = "nemotron_h",
    .alt_type = NULL,
    .open = nh_open,
    .forward = nh_forward,
    .reset_slot = nh_reset_slot,
    .state_parts = nh_state_parts,
    .close = nh_close,
};
