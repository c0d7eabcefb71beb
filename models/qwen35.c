/* qwen35.c - Qwen3.5 text model (0.8B / 2B / 4B / 9B): gated DeltaNet layers mixed with
 * gated full-attention layers. Section numbers refer to shared/spec/qwen35.md.
 *
 * Per cache slot this model keeps: the K/V cache of every full-attention layer
 * ([cap, KV·D] f32 rows, post-norm post-RoPE), and for every DeltaNet layer the f32
 * recurrent state [Hv, dk, dv] plus the conv window of the last K-1 pre-conv rows.
 * The conv runs as three depthwise convs over the q, k and v channel blocks (the conv
 * is per channel, so this equals one conv over C) so each block lands contiguous for
 * the per-head l2norm and the delta rule. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "models/arch.h"

#define ARCH_NAME "qwen3_5"

typedef struct q35_config {
    int vocab;    /* vocab_size */
    int h;        /* hidden_size */
    int inter;    /* intermediate_size */
    int n_layer;  /* num_hidden_layers */
    int H, KV, D; /* num_attention_heads, num_key_value_heads, head_dim */
    int Hk, Hv;   /* linear_num_key_heads, linear_num_value_heads */
    int dk, dv;   /* linear_key_head_dim, linear_value_head_dim */
    int K;        /* linear_conv_kernel_dim */
    /* strata_linear_v_tiled (strata's own key, never in a checkpoint's config.json; set by
     * models/load/gguf_config.c): the DeltaNet's V-indexed weights are in llama.cpp's tiled
     * head order (backend.h BK_VHEAD_TILED), not transformers' grouped one */
    int v_tiled;
    float eps;           /* rms_norm_eps */
    double theta;        /* rope_parameters.rope_theta */
    int rot;             /* head_dim · rope_parameters.partial_rotary_factor */
    int tied;            /* tie_word_embeddings (text_config, else top level) */
    int max_pos;         /* max_position_embeddings */
    unsigned char *full; /* [n_layer] layer_types[i] == "full_attention" */
} q35_config;

typedef struct q35_layer {
    bk_weight in_norm, post_norm; /* [h] zero-centred */
    arch_glu mlp;                 /* gate, up [I, h]; down [h, I] */
    /* full attention (§5.1) */
    bk_weight wq;             /* [2·H·D, h]: per head [query | gate] */
    bk_weight wk, wv;         /* [KV·D, h] */
    bk_weight wo;             /* [h, H·D] */
    bk_weight q_norm, k_norm; /* [D] zero-centred */
    /* gated DeltaNet (§5.2) */
    bk_weight qkv;            /* [C, h], C = 2·Hk·dk + Hv·dv */
    bk_weight wz;             /* [Hv·dv, h] */
    bk_weight wa, wb;         /* [Hv, h] */
    bk_weight conv;           /* [C, 1, K] */
    bk_weight A_log, dt_bias; /* [Hv] */
    bk_weight norm;           /* [dv] plain weight */
    bk_weight out;            /* [h, Hv·dv] */
} q35_layer;

typedef struct q35 {
    /* the embedding [vocab, h]; the head: final norm [h] zero-centred, lm_head [vocab, h]
     * (the embedding when tied); per layer the cache: full attention kv [pool, KV·D]
     * paged, DeltaNet conv [slots, K-1, C] and S [slots, Hv, dk, dv] */
    arch_model base;
    q35_config c;
    q35_layer *layers;
    float *inv_freq; /* [rot/2] */
    /* activations, [step_tokens, ·] f32 */
    float *x, *xn, *mix; /* [T, h] */
    float *big1, *big2;  /* [T, max(2·H·D, C, I)] */
    float *qa, *ga;      /* [T, max(H·D, Hv·dv)] */
    float *ka, *va;      /* [T, max(KV·D, Hk·dk, Hv·dv)] */
    float *gg, *beta;    /* [T, Hv] */
} q35;
/* arch_open and the shared model_arch entries take the struct as its arch_model */
_Static_assert(offsetof(q35, base) == 0, "base first");

/* ---- config (§2.1) ---- */

/* The plain fields; the rest (layer types, rope, tied head) are read by hand below. */
static const cfg_field q35_fields[] = {
    CFG_DECODER_SIZES(q35_config),
    CFG_INT(q35_config, KV, "num_key_value_heads", 1, 1024),
    CFG_INT(q35_config, D, "head_dim", 2, 4096),
    CFG_INT(q35_config, Hk, "linear_num_key_heads", 1, 1024),
    CFG_INT(q35_config, Hv, "linear_num_value_heads", 1, 1024),
    CFG_INT(q35_config, dk, "linear_key_head_dim", 1, 4096),
    CFG_INT(q35_config, dv, "linear_value_head_dim", 1, 4096),
    CFG_INT(q35_config, K, "linear_conv_kernel_dim", 1, 64),
    CFG_BOOL_OR(q35_config, v_tiled, "strata_linear_v_tiled", 0),
    CFG_INT_OR(q35_config, max_pos, "max_position_embeddings", 262144, 1, 1 << 30),
    CFG_FLOAT_OR(q35_config, eps, "rms_norm_eps", 1e-6, 0, 1),
    CFG_ONLY_STR("hidden_act", "silu"),
    CFG_ONLY_FALSE("attention_bias"),
};

/* Read by hand in q35_parse. */
static const char *const q35_known_keys[] = {
    "model_type",
    "layer_types",
    "full_attention_interval",
    "rope_parameters",
    "rope_theta",
    "partial_rotary_factor",
    "rope_scaling",
    "tie_word_embeddings",
    "eos_token_id",
    "bos_token_id",
    "pad_token_id",
    "mlp_only_layers",
    NULL,
};

/* Fields with no effect on the text forward (§2.1: T ignores them too). */
static const char *const q35_ignored_keys[] = {
    "attn_output_gate",
    "mamba_ssm_dtype",
    "mtp_num_hidden_layers",
    "mtp_use_dedicated_embeddings",
    "image_token_id",
    "video_token_id",
    "vision_start_token_id",
    "vision_end_token_id",
    "vision_config",
    "text_config",
    "layer_scale_initial_scale",
    NULL,
};

static int q35_parse(void *impl, const model_arch_ctx *ctx, json_t *tc, const char *where,
                     strata_err *err) {
    q35 *m = impl;
    q35_config *c = &m->c;
    const cfg_table tables[] = {CFG_TABLE(q35_fields)};
    if (cfg_check_keys_tables(tc, where, tables, 1, q35_known_keys, q35_ignored_keys, err) ||
        CFG_READ(tc, where, q35_fields, c, 0, err))
        return err->code;
    if (c->H % c->KV)
        return strata_err_set(
            err, STRATA_EFORMAT,
            "%s: num_attention_heads %d is not a multiple of num_key_value_heads %d", where, c->H,
            c->KV);
    if (c->Hv % c->Hk)
        return strata_err_set(
            err, STRATA_EFORMAT,
            "%s: linear_num_value_heads %d is not a multiple of linear_num_key_heads %d", where,
            c->Hv, c->Hk);
    const char *mt;
    if (cfg_str(tc, where, "model_type", NULL, &mt, err)) return err->code;
    json_t *mlp_only = json_object_get(tc, "mlp_only_layers");
    if (mlp_only && !json_is_null(mlp_only) &&
        (!json_is_array(mlp_only) || json_array_size(mlp_only)))
        return strata_err_set(err, STRATA_EUNSUPPORTED,
                              "%s: mlp_only_layers must be empty (MoE variants are not supported)",
                              where);
    if (json_object_get(tc, "rope_scaling") && !json_is_null(json_object_get(tc, "rope_scaling")))
        return strata_err_set(err, STRATA_EUNSUPPORTED, "%s: rope_scaling is not supported", where);

    /* §2.1: rope fields live in rope_parameters, older exports put them at this level.
     * With neither, transformers falls back to a base of 10000 where the Qwen3.5
     * checkpoints use 1e7: refuse rather than pick one. */
    json_t *rp = json_object_get(tc, "rope_parameters");
    double theta, prf;
    if (rp && !json_is_null(rp) && !json_is_object(rp))
        return strata_err_set(err, STRATA_EFORMAT, "%s: rope_parameters must be an object", where);
    if ((!rp || json_is_null(rp)) && !json_is_number(json_object_get(tc, "rope_theta")))
        return strata_err_set(
            err, STRATA_EFORMAT,
            "%s: rope_parameters is %s and there is no rope_theta: the rotary base "
            "is unknown (set rope_parameters.rope_theta)",
            where, rp ? "null" : "missing");
    if (rp && json_is_object(rp)) {
        const char *rt;
        if (cfg_str(rp, "config.json rope_parameters", "rope_type", "default", &rt, err))
            return err->code;
        if (strcmp(rt, "default"))
            return strata_err_set(err, STRATA_EUNSUPPORTED,
                                  "config.json rope_parameters: rope_type \"%s\" is not supported",
                                  rt);
    }
    if (cfg_real(rp, "config.json rope_parameters", "rope_theta", 1, NAN, &theta, err))
        return err->code;
    if (isnan(theta) && cfg_real(tc, where, "rope_theta", 1, 1e7, &theta, err)) return err->code;
    if (cfg_real(rp, "config.json rope_parameters", "partial_rotary_factor", 1, NAN, &prf, err))
        return err->code;
    if (isnan(prf) && cfg_real(tc, where, "partial_rotary_factor", 1, 0.25, &prf, err))
        return err->code;
    c->theta = theta;
    c->rot = (int)(c->D * prf);
    if (c->rot < 2 || c->rot > c->D || c->rot % 2)
        return strata_err_set(err, STRATA_EFORMAT,
                              "%s: head_dim %d x partial_rotary_factor %g gives rotary dim %d",
                              where, c->D, prf, c->rot);

    if (cfg_tied(ctx->config, tc, where, 0, &c->tied, err)) return err->code;

    if (!(c->full = arch_host_new(&m->base, (size_t)c->n_layer, 1, err))) return err->code;
    int listed;
    if (cfg_layer_types(tc, where, c->n_layer, "linear_attention", c->full, &listed, err))
        return err->code;
    if (!listed) {
        long long fi;
        if (cfg_int(tc, where, "full_attention_interval", 1, 4, 1, 1024, &fi, err))
            return err->code;
        for (int i = 0; i < c->n_layer; i++) c->full[i] = (i + 1) % fi == 0;
    }
    m->layers = arch_layers_new(&m->base, c->n_layer, c->max_pos, sizeof *m->layers, err);
    return m->layers ? 0 : err->code;
}

/* ---- weights (§3) ---- */

#define P "model.language_model."

static int q35_bind(void *impl, const model_arch_ctx *ctx, strata_err *err) {
    q35 *m = impl;
    const q35_config *c = &m->c;
    const int64_t h = c->h, I = c->inter, C = 2LL * c->Hk * c->dk + (int64_t)c->Hv * c->dv;
    const int64_t HD = (int64_t)c->H * c->D, KVD = (int64_t)c->KV * c->D;
    const int64_t V = (int64_t)c->Hv * c->dv;
    /* Real checkpoints carry the prefix; a text-only save (qwen3_5_text) has none. */
    static const char *const embed[][2] = {{P, "embed_tokens.weight"},
                                           {"model.", "embed_tokens.weight"}};
    const char *p;
    if (arch_bind_embed(ctx, &m->base, c->vocab, c->h, embed, 2, &p, err) ||
        arch_head_bind(ctx, &m->base, c->tied, p, "norm.weight", c->vocab, c->h, err))
        return err->code;
    for (int i = 0; i < c->n_layer; i++) {
        q35_layer *L = &m->layers[i];
        ARCH_BIND_LAYER(in_norm, "input_layernorm.weight", h);
        ARCH_BIND_LAYER(post_norm, "post_attention_layernorm.weight", h);
        ARCH_BIND_LAYER(mlp.gate, "mlp.gate_proj.weight", I, h);
        ARCH_BIND_LAYER(mlp.up, "mlp.up_proj.weight", I, h);
        ARCH_BIND_LAYER(mlp.down, "mlp.down_proj.weight", h, I);
        if (c->full[i]) {
            ARCH_BIND_LAYER(wq, "self_attn.q_proj.weight", 2 * HD, h);
            ARCH_BIND_LAYER(wk, "self_attn.k_proj.weight", KVD, h);
            ARCH_BIND_LAYER(wv, "self_attn.v_proj.weight", KVD, h);
            ARCH_BIND_LAYER(wo, "self_attn.o_proj.weight", h, HD);
            ARCH_BIND_LAYER(q_norm, "self_attn.q_norm.weight", c->D);
            ARCH_BIND_LAYER(k_norm, "self_attn.k_norm.weight", c->D);
        } else {
            ARCH_BIND_LAYER(qkv, "linear_attn.in_proj_qkv.weight", C, h);
            ARCH_BIND_LAYER(wz, "linear_attn.in_proj_z.weight", V, h);
            ARCH_BIND_LAYER(wa, "linear_attn.in_proj_a.weight", c->Hv, h);
            ARCH_BIND_LAYER(wb, "linear_attn.in_proj_b.weight", c->Hv, h);
            ARCH_BIND_LAYER(conv, "linear_attn.conv1d.weight", C, 1, c->K);
            ARCH_BIND_LAYER(A_log, "linear_attn.A_log", c->Hv);
            ARCH_BIND_LAYER(dt_bias, "linear_attn.dt_bias", c->Hv);
            ARCH_BIND_LAYER(norm, "linear_attn.norm.weight", c->dv);
            ARCH_BIND_LAYER(out, "linear_attn.out_proj.weight", h, V);
        }
    }
    return 0;
}

/* ---- caches and scratch ---- */

static int q35_alloc(void *impl, const model_arch_ctx *ctx, model_info *info, strata_err *err) {
    q35 *m = impl;
    const q35_config *c = &m->c;
    backend *b = m->base.b;
    (void)info;
    m->base.kv_dt = arch_kv_dtype(ctx, m->base.head.w.dt);
    size_t C = 2u * c->Hk * c->dk + (size_t)c->Hv * c->dv;
    size_t wide = C, qw = (size_t)c->H * c->D, kw = (size_t)c->KV * c->D;
    if (2 * qw > wide) wide = 2 * qw;
    if ((size_t)c->inter > wide) wide = (size_t)c->inter;
    size_t vw = (size_t)c->Hv * c->dv;
    size_t qa = qw > vw ? qw : vw, ka = kw;
    if ((size_t)c->Hk * c->dk > ka) ka = (size_t)c->Hk * c->dk;
    if (vw > ka) ka = vw;
    ARCH_ALLOC_ROWS(c->h, &m->x, &m->xn, &m->mix);
    ARCH_ALLOC_ROWS(wide, &m->big1, &m->big2);
    ARCH_ALLOC_ROWS(qa, &m->qa, &m->ga);
    ARCH_ALLOC_ROWS(ka, &m->ka, &m->va);
    ARCH_ALLOC_ROWS(c->Hv, &m->gg, &m->beta);
    if (arch_head_init(&m->base, BK_NORM_ONE_PLUS, c->eps, 0, err)) return err->code;
    ARCH_ALLOC(m->inv_freq, c->rot / 2);
    /* full attention pages its kv from the pool, DeltaNet keeps a state a slot */
    for (int i = 0; i < c->n_layer; i++) {
        if (c->full[i]) m->base.cache[i].kv = (bk_kv){.dt = m->base.kv_dt, .width = (int)kw};
        else if (arch_cache_recurrent(&m->base, i, (c->K - 1) * C, (size_t)c->Hv * c->dk * c->dv,
                                      err))
            return err->code;
    }
    if (arch_cache_paged(ctx, &m->base, err)) return err->code;
    /* §6: inv_freq[i] = theta^(-2i/R), in f32 as T computes it. */
    float *f = malloc(sizeof(float) * (size_t)(c->rot / 2));
    if (!f) return strata_err_set(err, STRATA_ENOMEM, "qwen3_5: out of memory");
    for (int i = 0; i < c->rot / 2; i++) f[i] = (float)(1.0 / pow(c->theta, 2.0 * i / c->rot));
    b->ops->upload(b, m->inv_freq, f, sizeof(float) * (size_t)(c->rot / 2));
    free(f);
    return 0;
}

static const arch_steps q35_steps = {ARCH_NAME, sizeof(q35), ARCH_TEXT_CONFIG, q35_parse, q35_bind,
                                     q35_alloc, NULL};

static int q35_open(void **impl, const model_arch_ctx *ctx, model_info *info, strata_err *err) {
    return arch_open(impl, &q35_steps, ctx, info, err);
}

/* ---- forward (§5) ---- */

/* Full attention, §5.1: xn [T, h] -> m->mix [T, h], over the layer's cache kv. */
static void q35_attention(q35 *m, q35_layer *L, const bk_kv *kv, bk_batch *bt) {
    const q35_config *c = &m->c;
    backend *b = m->base.b;
    const backend_ops *o = b->ops;
    int T = bt->n_tokens;
    float *qg = m->big1, *ctx = m->big2; /* [T, H, 2D], [T, H·D] */
    float *q = m->qa, *gate = m->ga, *k = m->ka, *v = m->va;
    float *outs[] = {qg, k, v};
    const bk_weight *ws[] = {&L->wq, &L->wk, &L->wv};
    o->matmul_n(b, outs, m->xn, ws, 3, T);
    /* query | gate per head split, q / k norms, partial RoPE, k and v into the cache */
    const bk_qkv_prep prep = {.H = c->H,
                              .KV = c->KV,
                              .D = c->D,
                              .q_norm = &L->q_norm,
                              .k_norm = &L->k_norm,
                              .norm_mode = BK_NORM_ONE_PLUS,
                              .eps = c->eps,
                              .inv_freq = m->inv_freq,
                              .rot = c->rot};
    o->attn_prep(b, q, gate, qg, k, v, kv, bt, &prep);
    o->attention(b, ctx, q, kv, bt, c->H, c->KV, c->D, 1.0f / sqrtf((float)c->D), 0, 0.0f);
    o->matmul_glu(b, m->mix, gate, ctx, &L->wo, T, BK_ACT_SIGMOID); /* output gate */
}

/* Gated DeltaNet, §5.2: xn [T, h] -> m->mix [T, h], carrying the layer's state st. */
static void q35_deltanet(q35 *m, q35_layer *L, const arch_cache *st, bk_batch *bt) {
    const q35_config *c = &m->c;
    backend *b = m->base.b;
    const backend_ops *o = b->ops;
    int T = bt->n_tokens, C = 2 * c->Hk * c->dk + c->Hv * c->dv, kd = c->Hk * c->dk;
    float *qkv = m->big2;  /* [T, C] before the conv */
    float *conv = m->big1; /* after it; per token q | k | v (§10 pitfall 9), rows C apart */
    float *q = conv, *k = conv + kd, *v = conv + 2 * kd;
    float *a = m->qa, *bb = m->ka;     /* [T, Hv] each */
    float *core = m->big2, *z = m->ga; /* [T, Hv, dv] each */
    /* the four projections of xn at once: qkv, z, a, b */
    float *outs[] = {qkv, z, a, bb};
    const bk_weight *ws[] = {&L->qkv, &L->wz, &L->wa, &L->wb};
    o->matmul_n(b, outs, m->xn, ws, 4, T);
    o->conv1d(b, conv, qkv, C, &L->conv, NULL, st->conv, bt, C, c->K, 1);
    /* l2norm of q (scaled by 1/√dk) and k, the gates, the delta rule */
    o->gdn(b, core, q, k, C, v, C, a, bb, &L->A_log, &L->dt_bias, m->gg, m->beta, st->S, bt, c->Hk,
           c->Hv, c->dk, c->dv, 1.0f / sqrtf((float)c->dk),
           c->v_tiled ? BK_VHEAD_TILED : BK_VHEAD_GROUPED);
    /* the gated norm per head and the output projection, one op */
    o->matmul_gnorm(b, m->mix, core, z, &L->norm, c->dv, c->eps, BK_GNORM_HEAD, &L->out, T);
}

static int q35_forward(void *impl, bk_batch *bt, const int32_t *tokens, const int32_t *out_rows,
                       int n_out, model_out *out, strata_err *err) {
    q35 *m = impl;
    const q35_config *c = &m->c;
    backend *b = m->base.b;
    const backend_ops *o = b->ops;
    int T = bt->n_tokens;
    if (arch_batch_prepare(&m->base, bt, err)) return err->code;

    arch_embed(b, m->x, &m->base.embed, tokens, out->fed, bt); /* no embedding scale (§5) */
    o->rmsnorm(b, m->xn, m->x, &m->layers[0].in_norm, T, c->h, c->h, c->eps, BK_NORM_ONE_PLUS);
    for (int i = 0; i < c->n_layer; i++) {
        q35_layer *L = &m->layers[i];
        /* xn = input_layernorm(x), made by the previous residual step */
        if (c->full[i]) q35_attention(m, L, &m->base.cache[i].kv, bt);
        else q35_deltanet(m, L, &m->base.cache[i], bt);
        /* x += mix; xn = post_attention_layernorm(x) */
        o->residual(b, m->x, m->xn, m->mix, NULL, 0, NULL, &L->post_norm, BK_NORM_ONE_PLUS, T, c->h,
                    c->eps);
        /* MLP: down(silu(gate(u)) ⊙ up(u)), gate and up [T, I] */
        float *gate = m->big1, *up = m->big2;
        arch_glu_forward(b, m->mix, gate, up, m->xn, &L->mlp, T, BK_ACT_SILU);
        /* x += mix; and the next layer's input_layernorm (the head norms its own rows) */
        const bk_weight *next = i + 1 < c->n_layer ? &m->layers[i + 1].in_norm : NULL;
        o->residual(b, m->x, next ? m->xn : NULL, m->mix, NULL, 0, NULL, next, BK_NORM_ONE_PLUS, T,
                    c->h, c->eps);
    }
    /* Final norm and head only on the rows whose logits are wanted, a chunk at a time. */
    arch_logits(&m->base, m->x, out_rows, n_out, out);
    return 0;
}

const model_arch arch_qwen35 = {"qwen3_5",       "qwen3_5_text",   q35_open,  q35_forward,
                                arch_reset_slot, arch_state_parts, arch_close};
