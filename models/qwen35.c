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
    int vocab;           /* vocab_size */
    int h;               /* hidden_size */
    int inter;           /* intermediate_size */
    int n_layer;         /* num_hidden_layers */
    int H, KV, D;        /* num_attention_heads, num_key_value_heads, head_dim */
    int Hk, Hv;          /* linear_num_key_heads, linear_num_value_heads */
    int dk, dv;          /* linear_key_head_dim, linear_value_head_dim */
    int K;               /* linear_conv_kernel_dim */
    float eps;           /* rms_norm_eps */
    double theta;        /* rope_parameters.rope_theta */
    int rot;             /* head_dim · rope_parameters.partial_rotary_factor */
    int tied;            /* tie_word_embeddings (text_config, else top level) */
    int max_pos;         /* max_position_embeddings */
    unsigned char *full; /* [n_layer] layer_types[i] == "full_attention" */
} q35_config;

typedef struct q35_layer {
    bk_weight in_norm, post_norm; /* [h] zero-centred */
    bk_weight gate, up;           /* [I, h] */
    bk_weight down;               /* [h, I] */
    /* full attention (§5.1) */
    bk_weight wq;             /* [2·H·D, h]: per head [query | gate] */
    bk_weight wk, wv;         /* [KV·D, h] */
    bk_weight wo;             /* [h, H·D] */
    bk_weight q_norm, k_norm; /* [D] zero-centred */
    bk_kv kv;                 /* [slots, cap, KV·D] */
    /* gated DeltaNet (§5.2) */
    bk_weight qkv;            /* [C, h], C = 2·Hk·dk + Hv·dv */
    bk_weight wz;             /* [Hv·dv, h] */
    bk_weight wa, wb;         /* [Hv, h] */
    bk_weight conv;           /* [C, 1, K] */
    bk_weight A_log, dt_bias; /* [Hv] */
    bk_weight norm;           /* [dv] plain weight */
    bk_weight out;            /* [h, Hv·dv] */
    float *conv_state;        /* [slots, K-1, C] */
    float *S;                 /* [slots, Hv, dk, dv] */
} q35_layer;

typedef struct q35 {
    q35_config c;
    backend *b;
    int slots, cap, step_tokens;
    dtype kv_dt;          /* of every full-attention layer's cache (arch_kv_dtype) */
    bk_weight embed;      /* [vocab, h] */
    bk_weight final_norm; /* [h] zero-centred */
    bk_weight lm_head;    /* [vocab, h]; the embedding when tied */
    q35_layer *layers;
    float *inv_freq; /* [rot/2] */
    /* activations, [step_tokens, ·] f32 */
    float *x, *xn, *mix; /* [T, h] */
    float *big1, *big2;  /* [T, max(2·H·D, C, I)] */
    float *qa, *ga;      /* [T, max(H·D, Hv·dv)] */
    float *ka, *va;      /* [T, max(KV·D, Hk·dk, Hv·dv)] */
    float *gg, *beta;    /* [T, Hv] */
    arch_head head;      /* final norm, head matmul, softcap; its chunk buffers */
} q35;

/* ---- config (§2.1) ---- */

/* The plain fields; the rest (layer types, rope, tied head) are read by hand below. */
static const cfg_field q35_fields[] = {
    CFG_INT(q35_config, vocab, "vocab_size", 1, 1 << 24),
    CFG_INT(q35_config, h, "hidden_size", 1, 1 << 16),
    CFG_INT(q35_config, inter, "intermediate_size", 1, 1 << 18),
    CFG_INT(q35_config, n_layer, "num_hidden_layers", 1, 1024),
    CFG_INT(q35_config, H, "num_attention_heads", 1, 1024),
    CFG_INT(q35_config, KV, "num_key_value_heads", 1, 1024),
    CFG_INT(q35_config, D, "head_dim", 2, 4096),
    CFG_INT(q35_config, Hk, "linear_num_key_heads", 1, 1024),
    CFG_INT(q35_config, Hv, "linear_num_value_heads", 1, 1024),
    CFG_INT(q35_config, dk, "linear_key_head_dim", 1, 4096),
    CFG_INT(q35_config, dv, "linear_value_head_dim", 1, 4096),
    CFG_INT(q35_config, K, "linear_conv_kernel_dim", 1, 64),
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

static int q35_parse(q35_config *c, json_t *root, strata_err *err) {
    const char *where;
    json_t *tc;
    if (cfg_text_config(root, &tc, &where, err)) return err->code;
    memset(c, 0, sizeof *c);
    const cfg_field *const tables[] = {q35_fields};
    const size_t sizes[] = {sizeof q35_fields / sizeof q35_fields[0]};
    if (cfg_check_keys_tables(tc, where, tables, sizes, 1, q35_known_keys, q35_ignored_keys, err) ||
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
    if (cfg_str(tc, where, "model_type", NULL, &mt, err)) goto fail;
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
        if (cfg_str(rp, "config.json rope_parameters", "rope_type", "default", &rt, err)) goto fail;
        if (strcmp(rt, "default"))
            return strata_err_set(err, STRATA_EUNSUPPORTED,
                                  "config.json rope_parameters: rope_type \"%s\" is not supported",
                                  rt);
    }
    if (cfg_real(rp, "config.json rope_parameters", "rope_theta", 1, NAN, &theta, err)) goto fail;
    if (isnan(theta) && cfg_real(tc, where, "rope_theta", 1, 1e7, &theta, err)) goto fail;
    if (cfg_real(rp, "config.json rope_parameters", "partial_rotary_factor", 1, NAN, &prf, err))
        goto fail;
    if (isnan(prf) && cfg_real(tc, where, "partial_rotary_factor", 1, 0.25, &prf, err)) goto fail;
    c->theta = theta;
    c->rot = (int)(c->D * prf);
    if (c->rot < 2 || c->rot > c->D || c->rot % 2)
        return strata_err_set(err, STRATA_EFORMAT,
                              "%s: head_dim %d x partial_rotary_factor %g gives rotary dim %d",
                              where, c->D, prf, c->rot);

    /* tie_word_embeddings: text_config wins, then the top level (real files set both). */
    int tied;
    if (cfg_bool(root, "config.json", "tie_word_embeddings", 1, 0, &tied, err)) goto fail;
    if (tc != root && cfg_bool(tc, where, "tie_word_embeddings", 1, tied, &tied, err)) goto fail;
    c->tied = tied;

    c->full = calloc((size_t)c->n_layer, 1);
    if (!c->full) return strata_err_set(err, STRATA_ENOMEM, "config: out of memory");
    json_t *lt = json_object_get(tc, "layer_types");
    if (lt && !json_is_null(lt)) {
        if (!json_is_array(lt) || (int)json_array_size(lt) != c->n_layer) {
            strata_err_set(err, STRATA_EFORMAT, "%s: layer_types must list %d layer types", where,
                           c->n_layer);
            goto fail;
        }
        for (int i = 0; i < c->n_layer; i++) {
            const char *s = json_string_value(json_array_get(lt, (size_t)i));
            if (s && !strcmp(s, "full_attention")) {
                c->full[i] = 1;
            } else if (!s || strcmp(s, "linear_attention")) {
                strata_err_set(err, STRATA_EUNSUPPORTED,
                               "%s: layer_types[%d] = \"%s\" is not supported", where, i,
                               s ? s : "(not a string)");
                goto fail;
            }
        }
    } else {
        long long fi;
        if (cfg_int(tc, where, "full_attention_interval", 1, 4, 1, 1024, &fi, err)) goto fail;
        for (int i = 0; i < c->n_layer; i++) c->full[i] = (i + 1) % fi == 0;
    }
    return 0;
fail:
    free(c->full);
    c->full = NULL;
    return err->code ? err->code : STRATA_EFORMAT;
}

/* ---- weights (§3) ---- */

#define P "model.language_model."

static int q35_bind(q35 *m, const model_arch_ctx *ctx, strata_err *err) {
    const q35_config *c = &m->c;
    int64_t C = 2LL * c->Hk * c->dk + (int64_t)c->Hv * c->dv;
    /* Real checkpoints carry the prefix; a text-only save (qwen3_5_text) has none. */
    const char *p = P;
    bk_weight probe;
    int64_t es[2] = {c->vocab, c->h};
    int rc = arch_bind(ctx, &probe, 1, 2, es, err, "%sembed_tokens.weight", P);
    if (rc < 0) return rc;
    if (rc == 1) p = "model.";
    else m->embed = probe;
    if (rc == 1 && arch_bind(ctx, &m->embed, 0, 2, es, err, "%sembed_tokens.weight", p))
        return err->code;

    int64_t hv[1] = {c->h};
    if (arch_bind(ctx, &m->final_norm, 0, 1, hv, err, "%snorm.weight", p)) return err->code;
    if (c->tied) {
        m->lm_head = m->embed;
    } else if (arch_bind(ctx, &m->lm_head, 0, 2, es, err, "lm_head.weight")) {
        return err->code;
    }
    for (int i = 0; i < c->n_layer; i++) {
        q35_layer *L = &m->layers[i];
        int64_t gu[2] = {c->inter, c->h}, dn[2] = {c->h, c->inter};
        ARCH_BIND_LAYER(in_norm, 1, hv, "input_layernorm.weight");
        ARCH_BIND_LAYER(post_norm, 1, hv, "post_attention_layernorm.weight");
        ARCH_BIND_LAYER(gate, 2, gu, "mlp.gate_proj.weight");
        ARCH_BIND_LAYER(up, 2, gu, "mlp.up_proj.weight");
        ARCH_BIND_LAYER(down, 2, dn, "mlp.down_proj.weight");
        if (c->full[i]) {
            int64_t q[2] = {2LL * c->H * c->D, c->h}, kv[2] = {(int64_t)c->KV * c->D, c->h};
            int64_t o[2] = {c->h, (int64_t)c->H * c->D}, d[1] = {c->D};
            ARCH_BIND_LAYER(wq, 2, q, "self_attn.q_proj.weight");
            ARCH_BIND_LAYER(wk, 2, kv, "self_attn.k_proj.weight");
            ARCH_BIND_LAYER(wv, 2, kv, "self_attn.v_proj.weight");
            ARCH_BIND_LAYER(wo, 2, o, "self_attn.o_proj.weight");
            ARCH_BIND_LAYER(q_norm, 1, d, "self_attn.q_norm.weight");
            ARCH_BIND_LAYER(k_norm, 1, d, "self_attn.k_norm.weight");
        } else {
            int64_t qkv[2] = {C, c->h}, z[2] = {(int64_t)c->Hv * c->dv, c->h};
            int64_t ab[2] = {c->Hv, c->h}, conv[3] = {C, 1, c->K}, hvv[1] = {c->Hv};
            int64_t nv[1] = {c->dv}, out[2] = {c->h, (int64_t)c->Hv * c->dv};
            ARCH_BIND_LAYER(qkv, 2, qkv, "linear_attn.in_proj_qkv.weight");
            ARCH_BIND_LAYER(wz, 2, z, "linear_attn.in_proj_z.weight");
            ARCH_BIND_LAYER(wa, 2, ab, "linear_attn.in_proj_a.weight");
            ARCH_BIND_LAYER(wb, 2, ab, "linear_attn.in_proj_b.weight");
            ARCH_BIND_LAYER(conv, 3, conv, "linear_attn.conv1d.weight");
            ARCH_BIND_LAYER(A_log, 1, hvv, "linear_attn.A_log");
            ARCH_BIND_LAYER(dt_bias, 1, hvv, "linear_attn.dt_bias");
            ARCH_BIND_LAYER(norm, 1, nv, "linear_attn.norm.weight");
            ARCH_BIND_LAYER(out, 2, out, "linear_attn.out_proj.weight");
        }
    }
    return 0;
}

/* ---- caches and scratch ---- */

static int q35_alloc(q35 *m, const model_arch_ctx *ctx, strata_err *err) {
    const q35_config *c = &m->c;
    backend *b = m->b;
    size_t T = (size_t)m->step_tokens, S = (size_t)m->slots;
    size_t C = 2u * c->Hk * c->dk + (size_t)c->Hv * c->dv;
    size_t wide = C, qw = (size_t)c->H * c->D, kw = (size_t)c->KV * c->D;
    if (2 * qw > wide) wide = 2 * qw;
    if ((size_t)c->inter > wide) wide = (size_t)c->inter;
    size_t vw = (size_t)c->Hv * c->dv;
    size_t qa = qw > vw ? qw : vw, ka = kw;
    if ((size_t)c->Hk * c->dk > ka) ka = (size_t)c->Hk * c->dk;
    if (vw > ka) ka = vw;
    ARCH_ALLOC(m->x, T * c->h);
    ARCH_ALLOC(m->xn, T * c->h);
    ARCH_ALLOC(m->mix, T * c->h);
    ARCH_ALLOC(m->big1, T * wide);
    ARCH_ALLOC(m->big2, T * wide);
    ARCH_ALLOC(m->qa, T * qa);
    ARCH_ALLOC(m->ga, T * qa);
    ARCH_ALLOC(m->ka, T * ka);
    ARCH_ALLOC(m->va, T * ka);
    ARCH_ALLOC(m->gg, T * c->Hv);
    ARCH_ALLOC(m->beta, T * c->Hv);
    m->head = (arch_head){.norm = &m->final_norm,
                          .norm_mode = BK_NORM_ONE_PLUS,
                          .eps = c->eps,
                          .head = &m->lm_head,
                          .softcap = 0,
                          .h = c->h,
                          .vocab = c->vocab};
    if (arch_head_init(b, &m->head, ARCH_NAME, m->slots, m->step_tokens, err)) return err->code;
    ARCH_ALLOC(m->inv_freq, c->rot / 2);
    for (int i = 0; i < c->n_layer; i++) {
        if (c->full[i]) continue;
        q35_layer *L = &m->layers[i];
        ARCH_ALLOC(L->conv_state, S * (c->K - 1) * C);
        ARCH_ALLOC(L->S, S * c->Hv * c->dk * c->dv);
    }
    int n_full = 0;
    for (int i = 0; i < c->n_layer; i++) n_full += c->full[i];
    int64_t pos_bytes = (int64_t)n_full * 2 * (int64_t)kw * (int64_t)dtype_size(m->kv_dt);
    if (n_full && arch_kv_pool(ctx, pos_bytes, m->slots, &m->cap, ARCH_NAME, err)) return err->code;
    for (int i = 0; i < c->n_layer; i++)
        if (c->full[i] &&
            arch_kv_alloc_paged(ctx, &m->layers[i].kv, m->kv_dt, (int)kw, ARCH_NAME, err))
            return err->code;
    /* §6: inv_freq[i] = theta^(-2i/R), in f32 as T computes it. */
    float *f = malloc(sizeof(float) * (size_t)(c->rot / 2));
    if (!f) return strata_err_set(err, STRATA_ENOMEM, "qwen3_5: out of memory");
    for (int i = 0; i < c->rot / 2; i++) f[i] = (float)(1.0 / pow(c->theta, 2.0 * i / c->rot));
    b->ops->upload(b, m->inv_freq, f, sizeof(float) * (size_t)(c->rot / 2));
    free(f);
    return 0;
}

static void q35_close(void *impl) {
    q35 *m = impl;
    if (!m) return;
    backend *b = m->b;
    float **bufs[] = {&m->x,  &m->xn, &m->mix, &m->big1, &m->big2, &m->qa,
                      &m->ga, &m->ka, &m->va,  &m->gg,   &m->beta, &m->inv_freq};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (*bufs[i]) b->ops->free(b, *bufs[i]);
    arch_head_free(b, &m->head);
    for (int i = 0; m->layers && i < m->c.n_layer; i++) {
        q35_layer *L = &m->layers[i];
        arch_kv_free(b, &L->kv);
        float *p[] = {L->conv_state, L->S};
        for (size_t j = 0; j < sizeof p / sizeof p[0]; j++)
            if (p[j]) b->ops->free(b, p[j]);
    }
    free(m->layers);
    free(m->c.full);
    free(m);
}

static int q35_open(void **impl, const model_arch_ctx *ctx, model_info *info, strata_err *err) {
    q35 *m = calloc(1, sizeof *m);
    if (!m) return strata_err_set(err, STRATA_ENOMEM, "qwen3_5: out of memory");
    m->b = ctx->b;
    if (q35_parse(&m->c, ctx->config, err)) goto fail;
    const q35_config *c = &m->c;
    if (!(m->layers = arch_layers_new(ARCH_NAME, c->n_layer, sizeof *m->layers, err))) goto fail;
    arch_sizes(ctx, c->max_pos, &m->slots, &m->cap, &m->step_tokens);
    if (q35_bind(m, ctx, err)) goto fail;
    m->kv_dt = arch_kv_dtype(ctx, m->lm_head.dt);
    backend_compute_dtype(ctx->b, m->kv_dt);
    if (q35_alloc(m, ctx, err)) goto fail;

    if (arch_info(ctx, ARCH_NAME, c->vocab, m->slots, m->cap, m->step_tokens, 0, info, err))
        goto fail;
    int64_t wb = arch_weight_bytes(&m->final_norm) + arch_weight_bytes(&m->lm_head);
    for (int i = 0; i < c->n_layer; i++) {
        q35_layer *L = &m->layers[i];
        const bk_weight *ws[] = {&L->in_norm, &L->post_norm, &L->gate,    &L->up,   &L->down,
                                 &L->wq,      &L->wk,        &L->wv,      &L->wo,   &L->q_norm,
                                 &L->k_norm,  &L->qkv,       &L->wz,      &L->wa,   &L->wb,
                                 &L->conv,    &L->A_log,     &L->dt_bias, &L->norm, &L->out};
        wb += arch_weights_bytes(ws, sizeof ws / sizeof ws[0]);
        if (c->full[i]) {
            info->kv_bytes_per_token += 2LL * c->KV * c->D * (int64_t)dtype_size(m->kv_dt);
        } else {
            int64_t C = 2LL * c->Hk * c->dk + (int64_t)c->Hv * c->dv;
            info->state_bytes += 2 * ((int64_t)c->Hv * c->dk * c->dv + (c->K - 1) * C) * 4;
        }
    }
    info->weight_bytes = wb;
    *impl = m;
    return 0;
fail:
    q35_close(m);
    return err->code ? err->code : STRATA_EINVALID;
}

static int q35_state_parts(void *impl, arch_state_part *out, int max) {
    q35 *m = impl;
    const q35_config *c = &m->c;
    size_t C = 2u * c->Hk * c->dk + (size_t)c->Hv * c->dv;
    int n = 0;
    for (int i = 0; i < c->n_layer && n + 2 <= max; i++) {
        if (c->full[i]) continue;
        q35_layer *L = &m->layers[i];
        out[n++] = (arch_state_part){L->conv_state, (size_t)(c->K - 1) * C * sizeof(float)};
        out[n++] = (arch_state_part){L->S, (size_t)c->Hv * c->dk * c->dv * sizeof(float)};
    }
    return n;
}

static void q35_reset_slot(void *impl, int slot) {
    q35 *m = impl;
    const q35_config *c = &m->c;
    backend *b = m->b;
    size_t C = 2u * c->Hk * c->dk + (size_t)c->Hv * c->dv, w = (size_t)(c->K - 1) * C;
    for (int i = 0; i < c->n_layer; i++) {
        q35_layer *L = &m->layers[i];
        if (c->full[i]) continue; /* K/V rows are overwritten before they are read */
        b->ops->zero(b, L->conv_state + (size_t)slot * w, w * sizeof(float));
        size_t n = (size_t)c->Hv * c->dk * c->dv;
        b->ops->zero(b, L->S + (size_t)slot * n, n * sizeof(float));
    }
}

/* ---- forward (§5) ---- */

/* Full attention, §5.1: xn [T, h] -> m->mix [T, h]. */
static void q35_attention(q35 *m, q35_layer *L, bk_batch *bt) {
    const q35_config *c = &m->c;
    backend *b = m->b;
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
    o->attn_prep(b, q, gate, qg, k, v, &L->kv, bt, &prep);
    o->attention(b, ctx, q, &L->kv, bt, c->H, c->KV, c->D, 1.0f / sqrtf((float)c->D), 0, 0.0f);
    o->matmul_glu(b, m->mix, gate, ctx, &L->wo, T, BK_ACT_SIGMOID); /* output gate */
}

/* Gated DeltaNet, §5.2: xn [T, h] -> m->mix [T, h]. */
static void q35_deltanet(q35 *m, q35_layer *L, bk_batch *bt) {
    const q35_config *c = &m->c;
    backend *b = m->b;
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
    o->conv1d(b, conv, qkv, C, &L->conv, NULL, L->conv_state, bt, C, c->K, 1);
    /* l2norm of q (scaled by 1/√dk) and k, the gates, the delta rule */
    o->gdn(b, core, q, k, C, v, C, a, bb, &L->A_log, &L->dt_bias, m->gg, m->beta, L->S, bt, c->Hk,
           c->Hv, c->dk, c->dv, 1.0f / sqrtf((float)c->dk));
    o->rmsnorm_gated(b, core, core, z, &L->norm, T * c->Hv, c->dv, c->eps);
    o->matmul(b, m->mix, core, &L->out, T);
}

static int q35_forward(void *impl, bk_batch *bt, const int32_t *tokens, const int32_t *out_rows,
                       int n_out, model_out *out, strata_err *err) {
    q35 *m = impl;
    const q35_config *c = &m->c;
    backend *b = m->b;
    const backend_ops *o = b->ops;
    int T = bt->n_tokens;
    if (arch_check_batch(ARCH_NAME, bt, m->step_tokens, m->cap, err)) return err->code;
    if (o->batch_prepare(b, bt, err)) return err->code;

    arch_embed(b, m->x, &m->embed, tokens, out->fed, bt); /* no embedding scale (§5) */
    o->rmsnorm(b, m->xn, m->x, &m->layers[0].in_norm, T, c->h, c->h, c->eps, BK_NORM_ONE_PLUS);
    for (int i = 0; i < c->n_layer; i++) {
        q35_layer *L = &m->layers[i];
        /* xn = input_layernorm(x), made by the previous residual step */
        if (c->full[i]) q35_attention(m, L, bt);
        else q35_deltanet(m, L, bt);
        /* x += mix; xn = post_attention_layernorm(x) */
        o->residual(b, m->x, m->xn, m->mix, NULL, 0, NULL, &L->post_norm, BK_NORM_ONE_PLUS, T, c->h,
                    c->eps);
        /* MLP: down(silu(gate(u)) ⊙ up(u)) */
        float *gate = m->big1, *up = m->big2; /* [T, I] */
        float *gu[] = {gate, up};
        const bk_weight *gw[] = {&L->gate, &L->up};
        o->matmul_n(b, gu, m->xn, gw, 2, T);
        o->matmul_glu(b, m->mix, gate, up, &L->down, T, BK_ACT_SILU);
        /* x += mix; and the next layer's input_layernorm (the head norms its own rows) */
        const bk_weight *next = i + 1 < c->n_layer ? &m->layers[i + 1].in_norm : NULL;
        o->residual(b, m->x, next ? m->xn : NULL, m->mix, NULL, 0, NULL, next, BK_NORM_ONE_PLUS, T,
                    c->h, c->eps);
    }
    /* Final norm and head only on the rows whose logits are wanted, a chunk at a time. */
    arch_logits(b, &m->head, m->x, out_rows, n_out, out);
    return 0;
}

const model_arch arch_qwen35 = {
    .model_type = "qwen3_5",
    .alt_type = "qwen3_5_text",
    .open = q35_open,
    .forward = q35_forward,
    .reset_slot = q35_reset_slot,
    .state_parts = q35_state_parts,
    .close = q35_close,
};
