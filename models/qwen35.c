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

typedef struct q35_config {
    int vocab;     /* vocab_size */
    int h;         /* hidden_size */
    int inter;     /* intermediate_size */
    int n_layer;   /* num_hidden_layers */
    int H, KV, D;  /* num_attention_heads, num_key_value_heads, head_dim */
    int Hk, Hv;    /* linear_num_key_heads, linear_num_value_heads */
    int dk, dv;    /* linear_key_head_dim, linear_value_head_dim */
    int K;         /* linear_conv_kernel_dim */
    float eps;     /* rms_norm_eps */
    double theta;  /* rope_parameters.rope_theta */
    int rot;       /* head_dim · rope_parameters.partial_rotary_factor */
    int tied;      /* tie_word_embeddings (text_config, else top level) */
    int max_pos;   /* max_position_embeddings */
    unsigned char *full; /* [n_layer] layer_types[i] == "full_attention" */
} q35_config;

typedef struct q35_layer {
    bk_weight in_norm, post_norm;         /* [h] zero-centred */
    bk_weight gate, up;                   /* [I, h] */
    bk_weight down;                       /* [h, I] */
    /* full attention (§5.1) */
    bk_weight wq;                         /* [2·H·D, h]: per head [query | gate] */
    bk_weight wk, wv;                     /* [KV·D, h] */
    bk_weight wo;                         /* [h, H·D] */
    bk_weight q_norm, k_norm;             /* [D] zero-centred */
    float *kc, *vc;                       /* [slots, cap, KV·D] */
    /* gated DeltaNet (§5.2) */
    bk_weight qkv;                        /* [C, h], C = 2·Hk·dk + Hv·dv */
    bk_weight wz;                         /* [Hv·dv, h] */
    bk_weight wa, wb;                     /* [Hv, h] */
    bk_weight conv;                       /* [C, 1, K] */
    bk_weight conv_part[3];               /* views of conv: q, k, v channel blocks */
    bk_weight A_log, dt_bias;             /* [Hv] */
    bk_weight norm;                       /* [dv] plain weight */
    bk_weight out;                        /* [h, Hv·dv] */
    float *conv_state[3];                 /* [slots, K-1, part channels] */
    float *S;                             /* [slots, Hv, dk, dv] */
} q35_layer;

typedef struct q35 {
    q35_config c;
    backend *b;
    int slots, cap, step_tokens, out_chunk;
    bk_weight embed;                      /* [vocab, h] */
    bk_weight final_norm;                 /* [h] zero-centred */
    bk_weight lm_head;                    /* [vocab, h]; the embedding when tied */
    q35_layer *layers;
    float *inv_freq;                      /* [rot/2] */
    /* activations, [step_tokens, ·] f32 */
    float *x, *xn, *mix;                  /* [T, h] */
    float *big1, *big2;                   /* [T, max(2·H·D, C, I)] */
    float *qa, *ga;                       /* [T, max(H·D, Hv·dv)] */
    float *ka, *va;                       /* [T, max(KV·D, Hk·dk, Hv·dv)] */
    float *gg, *beta;                     /* [T, Hv] */
    float *xo;                            /* [out_chunk, h] */
    float *lg;                            /* [out_chunk, vocab] */
} q35;

/* ---- config (§2.1) ---- */

static const char *const q35_known_keys[] = {
    "model_type", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
    "layer_types", "full_attention_interval", "num_attention_heads", "num_key_value_heads",
    "head_dim", "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
    "linear_value_head_dim", "linear_conv_kernel_dim", "hidden_act", "rms_norm_eps",
    "rope_parameters", "rope_theta", "partial_rotary_factor", "rope_scaling",
    "tie_word_embeddings", "max_position_embeddings", "attention_bias", "eos_token_id",
    "bos_token_id", "pad_token_id", "mlp_only_layers", NULL};

/* Fields with no effect on the text forward (§2.1: T ignores them too). */
static const char *const q35_ignored_keys[] = {
    "architectures", "attention_dropout", "attn_output_gate", "dtype", "torch_dtype",
    "initializer_range", "use_cache", "mamba_ssm_dtype", "mtp_num_hidden_layers",
    "mtp_use_dedicated_embeddings", "transformers_version", "output_attentions",
    "output_hidden_states", "return_dict", "use_return_dict", "id2label", "label2id",
    "problem_type", "chunk_size_feed_forward", "is_encoder_decoder", "tokenizer_class",
    "decoder_start_token_id", "sep_token_id", "task_specific_params", "finetuning_task",
    "tf_legacy_loss", "pruned_heads", "cross_attention_hidden_size", "add_cross_attention",
    "is_decoder", "prefix", "_name_or_path", "image_token_id", "video_token_id",
    "vision_start_token_id", "vision_end_token_id", "vision_config", "text_config",
    "quantization_config", "base_config_key", "layer_scale_initial_scale", NULL};

#define Q35_INT(key, lo, hi, dst)                                                              \
    do {                                                                                       \
        long long v_;                                                                          \
        if (cfg_int(tc, where, key, 0, 0, lo, hi, &v_, err)) goto fail;                        \
        dst = (int)v_;                                                                         \
    } while (0)

static int q35_parse(q35_config *c, json_t *root, strata_err *err) {
    const char *where = "config.json";
    json_t *tc = json_object_get(root, "text_config");
    if (tc) {
        where = "config.json text_config";
        if (!json_is_object(tc))
            return strata_err_set(err, STRATA_EFORMAT, "config.json: text_config must be an object");
    } else {
        tc = root;
    }
    memset(c, 0, sizeof *c);
    if (cfg_check_keys(tc, where, q35_known_keys, q35_ignored_keys, err)) return err->code;
    Q35_INT("vocab_size", 1, 1 << 24, c->vocab);
    Q35_INT("hidden_size", 1, 1 << 16, c->h);
    Q35_INT("intermediate_size", 1, 1 << 18, c->inter);
    Q35_INT("num_hidden_layers", 1, 1024, c->n_layer);
    Q35_INT("num_attention_heads", 1, 1024, c->H);
    Q35_INT("num_key_value_heads", 1, 1024, c->KV);
    Q35_INT("head_dim", 2, 4096, c->D);
    Q35_INT("linear_num_key_heads", 1, 1024, c->Hk);
    Q35_INT("linear_num_value_heads", 1, 1024, c->Hv);
    Q35_INT("linear_key_head_dim", 1, 4096, c->dk);
    Q35_INT("linear_value_head_dim", 1, 4096, c->dv);
    Q35_INT("linear_conv_kernel_dim", 1, 64, c->K);
    long long mp;
    if (cfg_int(tc, where, "max_position_embeddings", 1, 262144, 1, 1LL << 30, &mp, err)) goto fail;
    c->max_pos = (int)mp;
    if (c->H % c->KV)
        return strata_err_set(err, STRATA_EFORMAT,
                              "%s: num_attention_heads %d is not a multiple of num_key_value_heads %d",
                              where, c->H, c->KV);
    if (c->Hv % c->Hk)
        return strata_err_set(err, STRATA_EFORMAT,
                              "%s: linear_num_value_heads %d is not a multiple of linear_num_key_heads %d",
                              where, c->Hv, c->Hk);
    double eps;
    if (cfg_real(tc, where, "rms_norm_eps", 1, 1e-6, &eps, err)) goto fail;
    c->eps = (float)eps;

    const char *act, *mt;
    if (cfg_str(tc, where, "hidden_act", "silu", &act, err)) goto fail;
    if (strcmp(act, "silu"))
        return strata_err_set(err, STRATA_EUNSUPPORTED, "%s: hidden_act \"%s\" is not supported (silu)",
                              where, act);
    if (cfg_str(tc, where, "model_type", NULL, &mt, err)) goto fail;
    int bias;
    if (cfg_bool(tc, where, "attention_bias", 1, 0, &bias, err)) goto fail;
    if (bias)
        return strata_err_set(err, STRATA_EUNSUPPORTED, "%s: attention_bias true is not supported",
                              where);
    json_t *mlp_only = json_object_get(tc, "mlp_only_layers");
    if (mlp_only && !json_is_null(mlp_only) && (!json_is_array(mlp_only) || json_array_size(mlp_only)))
        return strata_err_set(err, STRATA_EUNSUPPORTED,
                              "%s: mlp_only_layers must be empty (MoE variants are not supported)", where);
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
        return strata_err_set(err, STRATA_EFORMAT,
                              "%s: rope_parameters is %s and there is no rope_theta: the rotary base "
                              "is unknown (set rope_parameters.rope_theta)", where, rp ? "null" : "missing");
    if (rp && json_is_object(rp)) {
        const char *rt;
        if (cfg_str(rp, "config.json rope_parameters", "rope_type", "default", &rt, err)) goto fail;
        if (strcmp(rt, "default"))
            return strata_err_set(err, STRATA_EUNSUPPORTED,
                                  "config.json rope_parameters: rope_type \"%s\" is not supported", rt);
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
                              "%s: head_dim %d x partial_rotary_factor %g gives rotary dim %d", where,
                              c->D, prf, c->rot);

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
                strata_err_set(err, STRATA_EUNSUPPORTED, "%s: layer_types[%d] = \"%s\" is not supported",
                               where, i, s ? s : "(not a string)");
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
    if (rc == 1 && arch_bind(ctx, &m->embed, 0, 2, es, err, "%sembed_tokens.weight", p)) return err->code;

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
#define BIND(w, nd, shp, name)                                                                \
    do {                                                                                      \
        if (arch_bind(ctx, &L->w, 0, nd, shp, err, "%slayers.%d." name, p, i)) return err->code; \
    } while (0)
        BIND(in_norm, 1, hv, "input_layernorm.weight");
        BIND(post_norm, 1, hv, "post_attention_layernorm.weight");
        BIND(gate, 2, gu, "mlp.gate_proj.weight");
        BIND(up, 2, gu, "mlp.up_proj.weight");
        BIND(down, 2, dn, "mlp.down_proj.weight");
        if (c->full[i]) {
            int64_t q[2] = {2LL * c->H * c->D, c->h}, kv[2] = {(int64_t)c->KV * c->D, c->h};
            int64_t o[2] = {c->h, (int64_t)c->H * c->D}, d[1] = {c->D};
            BIND(wq, 2, q, "self_attn.q_proj.weight");
            BIND(wk, 2, kv, "self_attn.k_proj.weight");
            BIND(wv, 2, kv, "self_attn.v_proj.weight");
            BIND(wo, 2, o, "self_attn.o_proj.weight");
            BIND(q_norm, 1, d, "self_attn.q_norm.weight");
            BIND(k_norm, 1, d, "self_attn.k_norm.weight");
        } else {
            int64_t qkv[2] = {C, c->h}, z[2] = {(int64_t)c->Hv * c->dv, c->h};
            int64_t ab[2] = {c->Hv, c->h}, conv[3] = {C, 1, c->K}, hvv[1] = {c->Hv};
            int64_t nv[1] = {c->dv}, out[2] = {c->h, (int64_t)c->Hv * c->dv};
            BIND(qkv, 2, qkv, "linear_attn.in_proj_qkv.weight");
            BIND(wz, 2, z, "linear_attn.in_proj_z.weight");
            BIND(wa, 2, ab, "linear_attn.in_proj_a.weight");
            BIND(wb, 2, ab, "linear_attn.in_proj_b.weight");
            BIND(conv, 3, conv, "linear_attn.conv1d.weight");
            BIND(A_log, 1, hvv, "linear_attn.A_log");
            BIND(dt_bias, 1, hvv, "linear_attn.dt_bias");
            BIND(norm, 1, nv, "linear_attn.norm.weight");
            BIND(out, 2, out, "linear_attn.out_proj.weight");
            /* q | k | v channel blocks of the depthwise conv (§10 pitfall 9). */
            int64_t rows[3] = {(int64_t)c->Hk * c->dk, (int64_t)c->Hk * c->dk, (int64_t)c->Hv * c->dv};
            size_t off = 0, es_ = dtype_size(L->conv.dt);
            for (int j = 0; j < 3; j++) {
                L->conv_part[j] = L->conv;
                L->conv_part[j].data = (const char *)L->conv.data + off;
                L->conv_part[j].shape[0] = rows[j];
                off += (size_t)rows[j] * (size_t)c->K * es_;
            }
        }
#undef BIND
    }
    return 0;
}

/* ---- caches and scratch ---- */

static int q35_alloc(q35 *m, strata_err *err) {
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
#define ALLOC(ptr, n)                                                                          \
    do {                                                                                       \
        if (!((ptr) = b->ops->alloc(b, (size_t)(n) * sizeof(float))))                          \
            return strata_err_set(err, STRATA_ENOMEM, "qwen3_5: cannot allocate %s (%zu MiB)",  \
                                  #ptr, (size_t)(n) * sizeof(float) >> 20);                    \
    } while (0)
    ALLOC(m->x, T * c->h);
    ALLOC(m->xn, T * c->h);
    ALLOC(m->mix, T * c->h);
    ALLOC(m->big1, T * wide);
    ALLOC(m->big2, T * wide);
    ALLOC(m->qa, T * qa);
    ALLOC(m->ga, T * qa);
    ALLOC(m->ka, T * ka);
    ALLOC(m->va, T * ka);
    ALLOC(m->gg, T * c->Hv);
    ALLOC(m->beta, T * c->Hv);
    ALLOC(m->xo, (size_t)m->out_chunk * c->h);
    ALLOC(m->lg, (size_t)m->out_chunk * c->vocab);
    ALLOC(m->inv_freq, c->rot / 2);
    for (int i = 0; i < c->n_layer; i++) {
        q35_layer *L = &m->layers[i];
        if (c->full[i]) {
            ALLOC(L->kc, S * m->cap * kw);
            ALLOC(L->vc, S * m->cap * kw);
        } else {
            size_t part[3] = {(size_t)c->Hk * c->dk, (size_t)c->Hk * c->dk, vw};
            for (int j = 0; j < 3; j++) ALLOC(L->conv_state[j], S * (c->K - 1) * part[j]);
            ALLOC(L->S, S * c->Hv * c->dk * c->dv);
        }
    }
#undef ALLOC
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
    float **bufs[] = {&m->x, &m->xn, &m->mix, &m->big1, &m->big2, &m->qa, &m->ga, &m->ka,
                      &m->va, &m->gg, &m->beta, &m->xo, &m->lg, &m->inv_freq};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (*bufs[i]) b->ops->free(b, *bufs[i]);
    for (int i = 0; m->layers && i < m->c.n_layer; i++) {
        q35_layer *L = &m->layers[i];
        float *p[] = {L->kc, L->vc, L->conv_state[0], L->conv_state[1], L->conv_state[2], L->S};
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
    m->layers = calloc((size_t)c->n_layer, sizeof *m->layers);
    if (!m->layers) {
        strata_err_set(err, STRATA_ENOMEM, "qwen3_5: out of memory");
        goto fail;
    }
    m->slots = ctx->opts->max_seqs > 0 ? ctx->opts->max_seqs : 1;
    m->cap = ctx->opts->ctx_size > 0 ? ctx->opts->ctx_size : (c->max_pos < 4096 ? c->max_pos : 4096);
    m->step_tokens = ctx->opts->step_tokens > 0 ? ctx->opts->step_tokens : 512;
    m->out_chunk = m->slots > 16 ? m->slots : 16;
    if (m->out_chunk > m->step_tokens) m->out_chunk = m->step_tokens;
    if (q35_bind(m, ctx, err) || q35_alloc(m, err)) goto fail;

    json_t *tc = json_object_get(ctx->config, "text_config");
    if ((ctx->gen_config && cfg_eos(json_object_get(ctx->gen_config, "eos_token_id"), "generation_config.json",
                                    c->vocab, info, err)) ||
        cfg_eos(json_object_get(tc ? tc : ctx->config, "eos_token_id"), "config.json", c->vocab, info, err))
        goto fail;
    info->arch = "qwen3_5";
    info->vocab = c->vocab;
    info->ctx_size = m->cap;
    info->max_seqs = m->slots;
    info->step_tokens = m->step_tokens;
    int64_t wb = arch_weight_bytes(&m->final_norm) + arch_weight_bytes(&m->lm_head);
    for (int i = 0; i < c->n_layer; i++) {
        q35_layer *L = &m->layers[i];
        const bk_weight *ws[] = {&L->in_norm, &L->post_norm, &L->gate, &L->up, &L->down, &L->wq,
                                 &L->wk, &L->wv, &L->wo, &L->q_norm, &L->k_norm, &L->qkv, &L->wz,
                                 &L->wa, &L->wb, &L->conv, &L->A_log, &L->dt_bias, &L->norm, &L->out};
        for (size_t j = 0; j < sizeof ws / sizeof ws[0]; j++) wb += arch_weight_bytes(ws[j]);
        if (c->full[i]) {
            info->kv_bytes_per_token += 2LL * c->KV * c->D * (int64_t)sizeof(float);
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

static void q35_reset_slot(void *impl, int slot) {
    q35 *m = impl;
    const q35_config *c = &m->c;
    backend *b = m->b;
    size_t part[3] = {(size_t)c->Hk * c->dk, (size_t)c->Hk * c->dk, (size_t)c->Hv * c->dv};
    for (int i = 0; i < c->n_layer; i++) {
        q35_layer *L = &m->layers[i];
        if (c->full[i]) continue; /* K/V rows are overwritten before they are read */
        for (int j = 0; j < 3; j++) {
            size_t n = (size_t)(c->K - 1) * part[j];
            b->ops->zero(b, L->conv_state[j] + (size_t)slot * n, n * sizeof(float));
        }
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
    int T = bt->n_tokens, HD = c->H * c->D, kw = c->KV * c->D;
    o->matmul(b, m->big1, m->xn, &L->wq, T);                 /* [T, H, 2D] */
    o->split_halves(b, m->qa, m->ga, m->big1, T * c->H, c->D); /* query | gate per head */
    o->matmul(b, m->ka, m->xn, &L->wk, T);
    o->matmul(b, m->va, m->xn, &L->wv, T);
    o->rmsnorm(b, m->qa, m->qa, &L->q_norm, T * c->H, c->D, c->D, c->eps, BK_NORM_ONE_PLUS);
    o->rmsnorm(b, m->ka, m->ka, &L->k_norm, T * c->KV, c->D, c->D, c->eps, BK_NORM_ONE_PLUS);
    o->rope(b, m->qa, bt, m->inv_freq, c->H, c->D, c->rot, HD);
    o->rope(b, m->ka, bt, m->inv_freq, c->KV, c->D, c->rot, kw);
    o->kv_store(b, L->kc, L->vc, m->ka, m->va, bt, kw, m->cap);
    o->attention(b, m->big2, m->qa, L->kc, L->vc, bt, c->H, c->KV, c->D, m->cap,
                 1.0f / sqrtf((float)c->D), 0, 0.0f);
    o->sigmoid_mul(b, m->big2, m->ga, (size_t)T * HD);      /* output gate */
    o->matmul(b, m->mix, m->big2, &L->wo, T);
}

/* Gated DeltaNet, §5.2: xn [T, h] -> m->mix [T, h]. */
static void q35_deltanet(q35 *m, q35_layer *L, bk_batch *bt) {
    const q35_config *c = &m->c;
    backend *b = m->b;
    const backend_ops *o = b->ops;
    int T = bt->n_tokens, C = 2 * c->Hk * c->dk + c->Hv * c->dv, kd = c->Hk * c->dk;
    int vd = c->Hv * c->dv;
    o->matmul(b, m->big1, m->xn, &L->qkv, T);                /* m = [T, C], pre-conv */
    o->conv1d(b, m->qa, m->big1, C, &L->conv_part[0], NULL, L->conv_state[0], bt, kd, c->K, 1);
    o->conv1d(b, m->ka, m->big1 + kd, C, &L->conv_part[1], NULL, L->conv_state[1], bt, kd, c->K, 1);
    o->conv1d(b, m->va, m->big1 + 2 * kd, C, &L->conv_part[2], NULL, L->conv_state[2], bt, vd,
              c->K, 1);
    o->l2norm(b, m->qa, T * c->Hk, c->dk, c->dk, 1e-6f, 1.0f / sqrtf((float)c->dk));
    o->l2norm(b, m->ka, T * c->Hk, c->dk, c->dk, 1e-6f, 1.0f);
    o->matmul(b, m->big2, m->xn, &L->wa, T);                 /* a [T, Hv] */
    o->matmul(b, m->big2 + (size_t)T * c->Hv, m->xn, &L->wb, T); /* b [T, Hv] */
    o->gdn_gates(b, m->gg, m->beta, m->big2, m->big2 + (size_t)T * c->Hv, &L->A_log, &L->dt_bias,
                 T, c->Hv);
    o->gated_delta(b, m->big1, m->qa, m->ka, kd, m->va, vd, m->gg, m->beta, L->S, bt, c->Hk,
                   c->Hv, c->dk, c->dv);                     /* o [T, Hv, dv] */
    o->matmul(b, m->ga, m->xn, &L->wz, T);                   /* z [T, Hv, dv] */
    o->rmsnorm_gated(b, m->big1, m->big1, m->ga, &L->norm, T * c->Hv, c->dv, c->eps);
    o->matmul(b, m->mix, m->big1, &L->out, T);
}

static int q35_forward(void *impl, bk_batch *bt, const int32_t *tokens, const int32_t *out_rows,
                       int n_out, float *logits, strata_err *err) {
    q35 *m = impl;
    const q35_config *c = &m->c;
    backend *b = m->b;
    const backend_ops *o = b->ops;
    int T = bt->n_tokens;
    if (T > m->step_tokens)
        return strata_err_set(err, STRATA_ERANGE, "qwen3_5: %d tokens in one step exceed max %d", T,
                              m->step_tokens);
    for (int s = 0; s < bt->n_seqs; s++)
        if (bt->pos0[s] + bt->len[s] > m->cap)
            return strata_err_set(err, STRATA_ERANGE,
                                  "qwen3_5: sequence in slot %d reaches position %d, past the "
                                  "context size %d",
                                  bt->slot[s], bt->pos0[s] + bt->len[s], m->cap);
    if (o->batch_prepare(b, bt, err)) return err->code;

    o->embed(b, m->x, &m->embed, tokens, T);  /* no embedding scale (§5) */
    for (int i = 0; i < c->n_layer; i++) {
        q35_layer *L = &m->layers[i];
        o->rmsnorm(b, m->xn, m->x, &L->in_norm, T, c->h, c->h, c->eps, BK_NORM_ONE_PLUS);
        if (c->full[i])
            q35_attention(m, L, bt);
        else
            q35_deltanet(m, L, bt);
        o->add(b, m->x, m->x, m->mix, (size_t)T * c->h);
        /* MLP: down(silu(gate(u)) ⊙ up(u)) */
        o->rmsnorm(b, m->xn, m->x, &L->post_norm, T, c->h, c->h, c->eps, BK_NORM_ONE_PLUS);
        o->matmul(b, m->big1, m->xn, &L->gate, T);
        o->matmul(b, m->big2, m->xn, &L->up, T);
        o->silu_mul(b, m->big1, m->big1, m->big2, T, c->inter);
        o->matmul(b, m->mix, m->big1, &L->down, T);
        o->add(b, m->x, m->x, m->mix, (size_t)T * c->h);
    }
    /* Final norm and head only on the rows whose logits are wanted, a chunk at a time. */
    for (int r = 0; r < n_out; r += m->out_chunk) {
        int n = n_out - r < m->out_chunk ? n_out - r : m->out_chunk;
        o->gather_rows(b, m->xo, m->x, out_rows + r, n, c->h);
        o->rmsnorm(b, m->xo, m->xo, &m->final_norm, n, c->h, c->h, c->eps, BK_NORM_ONE_PLUS);
        o->matmul(b, m->lg, m->xo, &m->lm_head, n);
        o->download(b, logits + (size_t)r * c->vocab, m->lg, (size_t)n * c->vocab * sizeof(float));
    }
    return 0;
}

const model_arch arch_qwen35 = {
    .model_type = "qwen3_5",
    .alt_type = "qwen3_5_text",
    .open = q35_open,
    .forward = q35_forward,
    .reset_slot = q35_reset_slot,
    .close = q35_close,
};
