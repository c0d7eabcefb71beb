/* gemma4.c - Gemma 4 E2B / E4B text model: sliding-window and full attention layers with
 * their own head dims and RoPE, kv sharing for the last layers, GeGLU MLPs, the per-layer
 * embedding (PLE) and a soft-capped tied head. Section numbers refer to
 * shared/spec/gemma4.md. Vision and audio towers are not part of this file.
 *
 * Per cache slot this model keeps K/V only for the layers that own a cache (those before
 * num_kv_shared_layers), f32 rows post-norm, K post-RoPE: full layers a row per position
 * (cap = ctx_size), sliding layers a ring of window + step_tokens rows read at pos % cap,
 * so a step's chunk never overwrites keys its first queries still see (§4). Shared layers
 * attend over their donor's cache with their own mask (§3.7).
 *
 * The PLE table ([vocab, L·P], half of E2B's parameters, one row read per token) stays in
 * host memory by default (§5). Where the backend can map host memory for its device
 * (weight_map: pinned, read over the bus) the embed op gathers the step's rows from it
 * there, ids fed on the device included, so no host round trip is needed; elsewhere (the
 * CPU; a mapping refused, say by a locked-memory limit) the rows are gathered on the host
 * into a staging buffer and uploaded. With model_opts.ple_on_device it is bound like any
 * weight. All three give the same f32 rows, so the same logits. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/quant.h"
#include "models/arch.h"

#define ARCH_NAME "gemma4"

enum { G4_SLIDING = 0, G4_FULL = 1 };

typedef struct g4_rope {
    double theta;     /* rope_parameters.<type>.rope_theta */
    double factor;    /* rope_parameters.<type>.factor (proportional only) */
    double prf;       /* rope_parameters.<type>.partial_rotary_factor (proportional only) */
    int proportional; /* rope_type "proportional" (else "default") */
    int hd;           /* head dim of the layers of this type */
    int angles;       /* rotated frequencies; the other hd/2 - angles are zero (§3.6) */
} g4_rope;

typedef struct g4_config {
    int vocab;        /* vocab_size (== vocab_size_per_layer_input) */
    int h;            /* hidden_size */
    int inter;        /* intermediate_size */
    int n_layer;      /* num_hidden_layers */
    int H;            /* num_attention_heads */
    int P;            /* hidden_size_per_layer_input (0: no PLE) */
    int window;       /* sliding_window */
    int first_shared; /* num_hidden_layers - num_kv_shared_layers */
    float eps;        /* rms_norm_eps */
    float softcap;    /* final_logit_softcapping (0: none) */
    int tied;         /* tie_word_embeddings (text_config, else top level) */
    int max_pos;      /* max_position_embeddings */
    g4_rope rope[2];  /* per layer type */
    /* per layer, [n_layer] */
    unsigned char *full; /* layer_types[l] == "full_attention" */
    int *hd, *kvh;       /* head_dim / global_head_dim or per_layer_config; num_key_value_heads */
    int *donor;          /* the layer whose cache l attends over (l itself when it owns one) */
    int *width;          /* MLP width: intermediate_size, doubled on shared layers when
                       use_double_wide_mlp */
} g4_config;

typedef struct g4_layer {
    bk_weight in_norm, post_attn_norm;   /* [h] plain */
    bk_weight pre_ff_norm, post_ff_norm; /* [h] plain */
    bk_weight wq;                        /* [H·hd, h] */
    bk_weight q_norm;                    /* [hd] */
    bk_weight wk, wv;                    /* [kvh·hd, h], owners only */
    bk_weight k_norm;                    /* [hd], owners only */
    bk_weight wo;                        /* [h, H·hd] */
    arch_glu mlp;                        /* gate, up [I_l, h]; down [h, I_l] */
    bk_weight pl_gate;                   /* per_layer_input_gate [P, h] */
    bk_weight pl_proj;                   /* per_layer_projection [h, P] */
    bk_weight pl_norm;                   /* post_per_layer_input_norm [h] */
    bk_weight scalar;                    /* layer_scalar [1] */
} g4_layer;

typedef struct g4 {
    /* the embedding [vocab, h]; the head: final norm [h] plain, lm_head [vocab, h] (the
     * embedding when tied), softcap; per layer the cache: owners' kv [slots, cap, kvh·hd],
     * full layers paged, sliding ones a ring; none on shared layers */
    arch_model base;
    g4_config c;
    int ple_host;        /* PLE table in host memory (§5) */
    int ple_mapped;      /* ... and read by the backend's ops there (ple_dev) */
    bk_weight ple_dev;   /* the table as the backend's ops address it, when mapped */
    bk_weight ple_table; /* embed_tokens_per_layer [vocab, L·P] */
    bk_weight ple_proj;  /* per_layer_model_projection [L·P, h] */
    bk_weight ple_norm;  /* per_layer_projection_norm [P] */
    g4_layer *layers;
    float *inv_freq[2];   /* per type [hd/2], zeros past the rotated angles */
    float s_embed, s_ple; /* √h, √P rounded to their table's dtype (§3.3) */
    /* activations, [step_tokens, ·] f32 */
    float *x, *xn, *mix; /* [T, h] */
    float *q, *att;      /* [T, H·hd_max] */
    float *k, *v;        /* [T, kvh_max·hd_max] */
    float *big1, *big2;  /* [T, max(I_max, L·P)] */
    float *ple;          /* [T, L, P] PLE inputs, token-major */
    float *plt;          /* [L, T, P] the same, layer-major */
    float *pg;           /* [T, P] PLE gate */
    /* host memory */
    float *stage;     /* [step_tokens, L·P] PLE rows gathered on the host */
    int32_t *ple_idx; /* [step_tokens·L] rows of the layer-major relayout */
} g4;
/* arch_open and the shared model_arch entries take the struct as its arch_model */
_Static_assert(offsetof(g4, base) == 0, "base first");

/* ---- config (§1) ---- */

/* Fields read by hand in g4_parse. */
static const char *const g4_known_keys[] = {
    "model_type",
    "layer_types",
    "per_layer_config",
    "rope_parameters",
    "tie_word_embeddings",
    "num_global_key_value_heads",
    "use_bidirectional_attention",
    "num_experts",
    "top_k_experts",
    "moe_intermediate_size",
    "eos_token_id",
    "bos_token_id",
    "pad_token_id",
    NULL,
};

/* What a few fields read into before g4_parse derives the per-layer config from them. */
typedef struct g4_raw {
    int vpl, kvh, hd, ghd, n_shared, double_wide;
} g4_raw;

/* The plain fields: into the config, and into g4_raw. */
static const cfg_field g4_fields[] = {
    CFG_DECODER_SIZES(g4_config),
    CFG_INT_OR(g4_config, P, "hidden_size_per_layer_input", 256, 0, 1 << 16),
    CFG_INT_OR(g4_config, window, "sliding_window", 512, 1, 1 << 30),
    CFG_INT_OR(g4_config, max_pos, "max_position_embeddings", 131072, 1, 1 << 30),
    CFG_FLOAT_OR(g4_config, eps, "rms_norm_eps", 1e-6, 0, 1),
    CFG_FLOAT_OR(g4_config, softcap, "final_logit_softcapping", 0.0, 0, 1e9),
    CFG_ONLY_STR("hidden_activation", "gelu_pytorch_tanh"),
    CFG_ONLY_FALSE("attention_bias"),
    CFG_ONLY_FALSE("attention_k_eq_v"),
    CFG_ONLY_FALSE("enable_moe_block"),
};
static const cfg_field g4_raw_fields[] = {
    CFG_INT_OR(g4_raw, vpl, "vocab_size_per_layer_input", -1, 1, 1 << 24), /* -1: vocab_size */
    CFG_INT(g4_raw, kvh, "num_key_value_heads", 1, 1024),
    CFG_INT_OR(g4_raw, hd, "head_dim", 256, 2, 4096),
    CFG_INT_OR(g4_raw, ghd, "global_head_dim", 512, 2, 4096), /* transformers' default */
    CFG_INT_OR(g4_raw, n_shared, "num_kv_shared_layers", 0, 0, 1023),
    CFG_BOOL_OR(g4_raw, double_wide, "use_double_wide_mlp", 0),
};

/* Fields with no effect on the text forward. */
static const char *const g4_ignored_keys[] = {
    "text_config",
    "vision_config",
    "audio_config",
    "image_token_id",
    "audio_token_id",
    "video_token_id",
    "boi_token_id",
    "eoi_token_id",
    "boa_token_id",
    "eoa_token_id",
    "eoa_token_index",
    "vision_soft_tokens_per_image",
    NULL,
};

static const char *const g4_rope_keys[] = {"rope_type", "rope_theta", "partial_rotary_factor",
                                           "factor", NULL};
static const char *const g4_type_names[2] = {"sliding_attention", "full_attention"};

/* rope_parameters.<type> (§3.6): "default" rotates every pair, "proportional" the first
 * floor(partial_rotary_factor·hd/2) frequencies with exponents over the whole hd. */
static int g4_parse_rope(g4_rope *r, json_t *rp, int ty, strata_err *err) {
    static const g4_rope defaults[2] = {{1e4, 1, 1, 0, 0, 0}, {1e6, 1, 0.25, 1, 0, 0}};
    char where[96];
    snprintf(where, sizeof where, "config.json rope_parameters.%s", g4_type_names[ty]);
    *r = defaults[ty];
    if (!rp || json_is_null(rp)) return 0; /* transformers' defaults */
    json_t *o = json_object_get(rp, g4_type_names[ty]);
    if (!json_is_object(o))
        return strata_err_set(err, STRATA_EFORMAT, "%s: missing (an object is required)", where);
    if (cfg_check_keys(o, where, g4_rope_keys, NULL, err)) return err->code;
    const char *rt;
    if (cfg_str(o, where, "rope_type", "default", &rt, err)) return err->code;
    if (cfg_real(o, where, "rope_theta", 0, 0, &r->theta, err)) return err->code;
    if (cfg_real(o, where, "factor", 1, 1.0, &r->factor, err)) return err->code;
    if (cfg_real(o, where, "partial_rotary_factor", 1, 1.0, &r->prf, err)) return err->code;
    if (!strcmp(rt, "proportional")) {
        r->proportional = 1;
    } else if (!strcmp(rt, "default")) {
        /* transformers' default RoPE ignores both; refuse rather than guess which holds */
        if (r->factor != 1.0 || r->prf != 1.0)
            return strata_err_set(err, STRATA_EUNSUPPORTED,
                                  "%s: factor / partial_rotary_factor with rope_type \"default\"",
                                  where);
    } else {
        return strata_err_set(err, STRATA_EUNSUPPORTED, "%s: rope_type \"%s\" is not supported",
                              where, rt);
    }
    if (r->theta <= 0 || r->factor <= 0 || r->prf <= 0 || r->prf > 1)
        return strata_err_set(err, STRATA_ERANGE,
                              "%s: rope_theta, factor and partial_rotary_factor must be in range",
                              where);
    return 0;
}

/* per_layer_config (transformers >= 5.24 spelling): {"<layer>": {"head_dim": n,
 * "num_key_value_heads": n}} overrides for the listed layers (§1.2). */
static int g4_parse_overrides(g4_config *c, json_t *plc, const char *where0, strata_err *err) {
    static const char *const keys[] = {"head_dim", "num_key_value_heads", NULL};
    const char *key;
    json_t *ov;
    char where[128];
    if (!json_is_object(plc))
        return strata_err_set(err, STRATA_EFORMAT, "%s: per_layer_config must be an object",
                              where0);
    json_object_foreach(plc, key, ov) {
        char *end;
        long l = strtol(key, &end, 10);
        if (!*key || *end || l < 0 || l >= c->n_layer)
            return strata_err_set(err, STRATA_EFORMAT,
                                  "%s: per_layer_config key \"%s\" is not a layer index", where0,
                                  key);
        snprintf(where, sizeof where, "%s per_layer_config.%s", where0, key);
        if (!json_is_object(ov))
            return strata_err_set(err, STRATA_EFORMAT, "%s: must be an object", where);
        if (cfg_check_keys(ov, where, keys, NULL, err)) return err->code;
        long long v;
        if (cfg_int(ov, where, "head_dim", 1, c->hd[l], 2, 4096, &v, err)) return err->code;
        c->hd[l] = (int)v;
        if (cfg_int(ov, where, "num_key_value_heads", 1, c->kvh[l], 1, 1024, &v, err))
            return err->code;
        c->kvh[l] = (int)v;
    }
    return 0;
}

static int g4_parse(void *impl, const model_arch_ctx *ctx, json_t *tc, const char *where,
                    strata_err *err) {
    g4 *m = impl;
    g4_config *c = &m->c;
    g4_raw raw;
    const cfg_table tables[] = {CFG_TABLE(g4_fields), CFG_TABLE(g4_raw_fields)};
    if (cfg_check_keys_tables(tc, where, tables, 2, g4_known_keys, g4_ignored_keys, err) ||
        CFG_READ(tc, where, g4_fields, c, 0, err) ||
        CFG_READ(tc, where, g4_raw_fields, &raw, 0, err))
        return err->code;
    int vpl = raw.vpl < 0 ? c->vocab : raw.vpl, kvh = raw.kvh, hd = raw.hd, ghd = raw.ghd;
    int n_shared = raw.n_shared, dw = raw.double_wide;
    if (n_shared > c->n_layer - 1)
        return strata_err_set(err, STRATA_ERANGE,
                              "%s: field \"num_kv_shared_layers\" = %d is outside [0, %d]", where,
                              n_shared, c->n_layer - 1);
    c->first_shared = c->n_layer - n_shared;
    if (c->P && vpl != c->vocab)
        return strata_err_set(
            err, STRATA_EUNSUPPORTED,
            "%s: vocab_size_per_layer_input %d differs from vocab_size %d (not supported)", where,
            vpl, c->vocab);
    const char *bidi;
    if (cfg_str(tc, where, "use_bidirectional_attention", NULL, &bidi, err)) return err->code;
    if (bidi && strcmp(bidi, "vision")) /* "vision" only changes image tokens' masks */
        return strata_err_set(err, STRATA_EUNSUPPORTED,
                              "%s: use_bidirectional_attention \"%s\" is not supported", where,
                              bidi);

    if (cfg_tied(ctx->config, tc, where, 1, &c->tied, err)) return err->code;

    size_t L = (size_t)c->n_layer;
    arch_model *am = &m->base;
    if (!(c->full = arch_host_new(am, L, 1, err)) ||
        !(c->hd = arch_host_new(am, L, sizeof(int), err)) ||
        !(c->kvh = arch_host_new(am, L, sizeof(int), err)) ||
        !(c->donor = arch_host_new(am, L, sizeof(int), err)) ||
        !(c->width = arch_host_new(am, L, sizeof(int), err)))
        return err->code;
    int listed;
    if (cfg_layer_types(tc, where, c->n_layer, "sliding_attention", c->full, &listed, err))
        return err->code;
    if (!listed) /* transformers' default pattern, 5 sliding : 1 full */
        for (size_t i = 0; i < L; i++) c->full[i] = (i + 1) % 6 == 0;
    c->full[L - 1] = 1; /* transformers forces the last layer to full attention */

    /* Head dims (§1.2, §1.3): full layers take global_head_dim unless per_layer_config
     * (which replaces it in newer exports) lists overrides. */
    json_t *plc = json_object_get(tc, "per_layer_config");
    for (size_t i = 0; i < L; i++) {
        c->hd[i] = plc && !json_is_null(plc) ? hd : c->full[i] ? ghd : hd;
        c->kvh[i] = kvh;
    }
    if (plc && !json_is_null(plc) && g4_parse_overrides(c, plc, where, err)) return err->code;

    json_t *rp = json_object_get(tc, "rope_parameters");
    for (int ty = 0; ty < 2; ty++) {
        g4_rope *r = &c->rope[ty];
        int type_hd = 0;
        for (size_t i = 0; i < L; i++) {
            if (c->full[i] != ty) continue;
            if (!type_hd) type_hd = c->hd[i];
            if (c->hd[i] != type_hd || c->hd[i] % 2)
                return strata_err_set(
                    err, STRATA_EUNSUPPORTED,
                    "%s: layer %zu has head dim %d, other %s layers %d (one even head dim "
                    "per layer type is supported)",
                    where, i, c->hd[i], g4_type_names[ty], type_hd);
        }
        if (!type_hd) continue; /* no layer of this type: no RoPE for it */
        if (g4_parse_rope(r, rp, ty, err)) return err->code;
        r->hd = type_hd;
        /* int(partial_rotary_factor · hd // 2), as transformers computes it */
        r->angles = r->proportional ? (int)floor(r->prf * r->hd / 2.0) : r->hd / 2;
    }

    /* kv sharing (§1.3): the last owning layer of the same type is the donor. */
    for (int i = 0; i < c->n_layer; i++) {
        c->donor[i] = i;
        if (i >= c->first_shared) {
            c->donor[i] = -1;
            for (int j = c->first_shared - 1; j >= 0 && c->donor[i] < 0; j--)
                if (c->full[j] == c->full[i]) c->donor[i] = j;
            if (c->donor[i] < 0)
                return strata_err_set(
                    err, STRATA_EFORMAT,
                    "%s: layer %d shares kv (num_kv_shared_layers) but no earlier layer "
                    "of type %s owns a cache",
                    where, i, g4_type_names[c->full[i]]);
        }
        int d = c->donor[i];
        if (c->H % c->kvh[d])
            return strata_err_set(
                err, STRATA_EFORMAT,
                "%s: num_attention_heads %d is not a multiple of layer %d's %d kv heads", where,
                c->H, d, c->kvh[d]);
        c->width[i] = c->inter * (dw && i >= c->first_shared ? 2 : 1);
    }
    m->layers = arch_layers_new(&m->base, c->n_layer, c->max_pos, sizeof *m->layers, err);
    return m->layers ? 0 : err->code;
}

/* ---- weights (§2) ---- */

static int g4_bind(void *impl, const model_arch_ctx *ctx, strata_err *err) {
    g4 *m = impl;
    const g4_config *c = &m->c;
    int64_t LP = (int64_t)c->n_layer * c->P;
    /* Real checkpoints carry model.language_model.; a text-only save (Gemma4ForCausalLM)
     * has model. (§2.2). Everything else (towers, dead k/v of shared layers) is skipped
     * by never being asked for. */
    static const char *const embed[][2] = {{"model.language_model.", "embed_tokens.weight"},
                                           {"model.", "embed_tokens.weight"}};
    const char *p;
    m->ple_host = !ctx->opts->ple_on_device;
    if (arch_bind_embed(ctx, &m->base, c->vocab, c->h, embed, 2, &p, err) ||
        arch_head_bind(ctx, &m->base, c->tied, p, "norm.weight", c->vocab, c->h, err))
        return err->code;
    if (c->P) {
        int64_t pt[2] = {c->vocab, LP}, pp[2] = {LP, c->h}, pn[1] = {c->P};
        if (arch_bind(ctx, &m->ple_table, m->ple_host ? ARCH_BIND_HOST : 0, 2, pt, err,
                      "%sembed_tokens_per_layer.weight", p) ||
            arch_bind(ctx, &m->ple_proj, 0, 2, pp, err, "%sper_layer_model_projection.weight", p) ||
            arch_bind(ctx, &m->ple_norm, 0, 1, pn, err, "%sper_layer_projection_norm.weight", p))
            return err->code;
        /* decode reads the projection and norm, and of the table the one row gathered
         * (§2.3, §5) */
        m->base.weight_bytes += arch_weight_bytes(&m->ple_proj) + arch_weight_bytes(&m->ple_norm) +
                                (int64_t)dtype_row_bytes(m->ple_table.dt, LP);
    }
    const int64_t h = c->h, P = c->P;
    for (int i = 0; i < c->n_layer; i++) {
        g4_layer *L = &m->layers[i];
        const int64_t hd = c->hd[i], I = c->width[i], HD = c->H * hd, KVD = c->kvh[i] * hd;
        ARCH_BIND_LAYER(in_norm, "input_layernorm.weight", h);
        ARCH_BIND_LAYER(post_attn_norm, "post_attention_layernorm.weight", h);
        ARCH_BIND_LAYER(pre_ff_norm, "pre_feedforward_layernorm.weight", h);
        ARCH_BIND_LAYER(post_ff_norm, "post_feedforward_layernorm.weight", h);
        ARCH_BIND_LAYER(wq, "self_attn.q_proj.weight", HD, h);
        ARCH_BIND_LAYER(q_norm, "self_attn.q_norm.weight", hd);
        ARCH_BIND_LAYER(wo, "self_attn.o_proj.weight", h, HD);
        if (c->donor[i] == i) { /* shared layers' k/v/k_norm are dead weights (§2.1) */
            ARCH_BIND_LAYER(wk, "self_attn.k_proj.weight", KVD, h);
            ARCH_BIND_LAYER(wv, "self_attn.v_proj.weight", KVD, h);
            ARCH_BIND_LAYER(k_norm, "self_attn.k_norm.weight", hd);
        }
        ARCH_BIND_LAYER(mlp.gate, "mlp.gate_proj.weight", I, h);
        ARCH_BIND_LAYER(mlp.up, "mlp.up_proj.weight", I, h);
        ARCH_BIND_LAYER(mlp.down, "mlp.down_proj.weight", h, I);
        if (c->P) {
            ARCH_BIND_LAYER(pl_gate, "per_layer_input_gate.weight", P, h);
            ARCH_BIND_LAYER(pl_proj, "per_layer_projection.weight", h, P);
            ARCH_BIND_LAYER(pl_norm, "post_per_layer_input_norm.weight", h);
        }
        ARCH_BIND_LAYER(scalar, "layer_scalar", 1);
    }
    return 0;
}

/* ---- caches and scratch ---- */

/* x as the table's dtype would hold it: transformers scales embeddings by
 * embed_scale.to(weight.dtype) (§3.3: bf16(√1536) = 39.25). */
static float g4_round_to(float x, dtype dt) {
    if (dt == DTYPE_BF16) return dtype_bf16_to_f32(dtype_f32_to_bf16(x));
    if (dt == DTYPE_F16) return dtype_f16_to_f32(dtype_f32_to_f16(x));
    return x;
}

static int g4_alloc(void *impl, const model_arch_ctx *ctx, model_info *info, strata_err *err) {
    g4 *m = impl;
    const g4_config *c = &m->c;
    backend *b = m->base.b;
    size_t T = (size_t)m->base.step_tokens, LP = (size_t)c->n_layer * c->P;
    strata_err merr = {0}; /* unmapped: the host gathers the rows */
    m->ple_mapped =
        m->ple_host && c->P && !backend_weight_map(b, &m->ple_table, &m->ple_dev, &merr);
    info->host_ids = m->ple_host && !m->ple_mapped && c->P > 0; /* the host gathers by id */
    m->base.kv_dt = arch_kv_dtype(ctx, m->base.embed.dt);
    size_t qw = 0, kw = 0, wide = LP;
    for (int i = 0; i < c->n_layer; i++) {
        size_t hd = (size_t)c->hd[i];
        if ((size_t)c->H * hd > qw) qw = (size_t)c->H * hd;
        if ((size_t)c->kvh[i] * hd > kw) kw = (size_t)c->kvh[i] * hd;
        if ((size_t)c->width[i] > wide) wide = (size_t)c->width[i];
    }
    ARCH_ALLOC_ROWS(c->h, &m->x, &m->xn, &m->mix);
    ARCH_ALLOC_ROWS(qw, &m->q, &m->att);
    ARCH_ALLOC_ROWS(kw, &m->k, &m->v);
    ARCH_ALLOC_ROWS(wide, &m->big1, &m->big2);
    if (arch_head_init(&m->base, BK_NORM_PLAIN, c->eps, c->softcap, err)) return err->code;
    if (c->P) {
        ARCH_ALLOC_ROWS(LP, &m->ple, &m->plt);
        ARCH_ALLOC_ROWS(c->P, &m->pg);
        if (!(m->ple_idx = arch_host_new(&m->base, T * (size_t)c->n_layer, sizeof(int32_t), err)) ||
            (m->ple_host && !m->ple_mapped &&
             !(m->stage = arch_host_new(&m->base, T * LP, sizeof(float), err))))
            return err->code;
    }
    /* Full layers page their kv from the pool; sliding ones keep a ring per slot of
     * window + step rows (>= window + T - 1: see the file comment), part of the slot's state. */
    arch_cache *cache = m->base.cache;
    for (int i = 0; i < c->n_layer; i++)
        if (c->donor[i] == i && c->full[i])
            cache[i].kv = (bk_kv){.dt = m->base.kv_dt, .width = c->kvh[i] * c->hd[i]};
    if (arch_cache_paged(ctx, &m->base, err)) return err->code;
    int ring = c->window + m->base.step_tokens;
    if (ring > m->base.ctx) ring = m->base.ctx;
    for (int i = 0; i < c->n_layer; i++)
        if (c->donor[i] == i && !c->full[i] &&
            arch_cache_ring(&m->base, i, ring, c->kvh[i] * c->hd[i], err))
            return err->code;
    /* §3.6: inv_freq[i] = 1 / θ^(2i/hd) for i < angles, 0 after (those dims pass through),
     * in f32 as transformers computes it, then / factor. */
    for (int ty = 0; ty < 2; ty++) {
        const g4_rope *r = &c->rope[ty];
        if (!r->hd) continue; /* no layer of this type */
        int half = r->hd / 2;
        ARCH_ALLOC(m->inv_freq[ty], half);
        float *f = calloc((size_t)half, sizeof(float));
        if (!f) return strata_err_set(err, STRATA_ENOMEM, "gemma4: out of memory");
        for (int i = 0; i < r->angles && i < half; i++) {
            float e = (float)(2 * i) / (float)r->hd;
            f[i] = 1.0f / powf((float)r->theta, e) / (float)r->factor;
        }
        b->ops->upload(b, m->inv_freq[ty], f, sizeof(float) * (size_t)half);
        free(f);
    }
    m->s_embed = g4_round_to((float)sqrt((double)c->h), m->base.embed.dt);
    if (c->P) m->s_ple = g4_round_to((float)sqrt((double)c->P), m->ple_table.dt);
    return 0;
}

static void g4_release(void *impl) {
    g4 *m = impl;
    if (m->ple_mapped) m->base.b->ops->weight_unmap(m->base.b, &m->ple_dev);
}

static const arch_steps g4_steps = {ARCH_NAME, sizeof(g4), ARCH_TEXT_CONFIG | ARCH_EOS_TOP,
                                    g4_parse,  g4_bind,    g4_alloc,
                                    g4_release};

static int g4_open(void **impl, const model_arch_ctx *ctx, model_info *info, strata_err *err) {
    return arch_open(impl, &g4_steps, ctx, info, err);
}

/* ---- forward (§3) ---- */

/* The step's PLE table rows as f32 [T, L·P], gathered on the host (§5 step 2). The
 * conversion is the one the backend's embed op makes, so both paths agree to the bit. */
static void g4_ple_gather_host(g4 *m, const int32_t *tokens, int T) {
    const bk_weight *t = &m->ple_table;
    size_t LP = (size_t)m->c.n_layer * m->c.P, rb = dtype_row_bytes(t->dt, (int64_t)LP);
    for (int i = 0; i < T; i++) {
        const void *row = (const char *)t->data + (size_t)tokens[i] * rb;
        float *dst = m->stage + (size_t)i * LP;
        if (dtype_block_elems(t->dt) > 1) quant_dequantize_row(dst, row, t->dt, (int64_t)LP);
        else if (t->dt == DTYPE_BF16)
            for (size_t j = 0; j < LP; j++) dst[j] = dtype_bf16_to_f32(((const uint16_t *)row)[j]);
        else if (t->dt == DTYPE_F16)
            for (size_t j = 0; j < LP; j++) dst[j] = dtype_f16_to_f32(((const uint16_t *)row)[j]);
        else memcpy(dst, row, LP * sizeof(float));
    }
}

/* Per-layer inputs, §3.4: x (the scaled embedding) -> m->plt, layer l's [T, P] at
 * plt + l·T·P. */
static void g4_ple(g4 *m, const bk_batch *bt, const int32_t *tokens, const int32_t *fed) {
    const g4_config *c = &m->c;
    backend *b = m->base.b;
    const backend_ops *o = b->ops;
    int T = bt->n_tokens, L = c->n_layer, P = c->P;
    size_t n = (size_t)T * L * P;
    if (m->ple_host && !m->ple_mapped) {
        g4_ple_gather_host(m, tokens, T);
        o->upload(b, m->ple, m->stage, n * sizeof(float));
    } else {
        arch_embed(b, m->ple, m->ple_mapped ? &m->ple_dev : &m->ple_table, tokens, fed, bt);
    }
    o->scale(b, m->ple, m->s_ple, NULL, n);       /* u = r · √P */
    o->matmul(b, m->big1, m->x, &m->ple_proj, T); /* z = x₀ · W_pmpᵀ */
    o->scale(b, m->big1, (float)(1.0 / sqrt((double)c->h)), NULL, n);
    o->rmsnorm(b, m->big1, m->big1, &m->ple_norm, T * L, P, P, c->eps, BK_NORM_PLAIN);
    o->add(b, m->ple, m->big1, m->ple, n); /* z + u */
    o->scale(b, m->ple, (float)(1.0 / sqrt(2.0)), NULL, n);
    if (T == 1) return; /* [1, L, P] is already layer-major: the layers read m->ple */
    for (int l = 0; l < L; l++)
        for (int t = 0; t < T; t++) m->ple_idx[(size_t)l * T + t] = t * L + l;
    o->gather_rows(b, m->plt, m->ple, m->ple_idx, T * L, P);
}

/* Attention of layer l, §3.6-3.7: xn [T, h] -> m->mix [T, h]. */
static void g4_attention(g4 *m, int l, const bk_batch *bt) {
    const g4_config *c = &m->c;
    backend *b = m->base.b;
    const backend_ops *o = b->ops;
    g4_layer *L = &m->layers[l];
    const bk_kv *kv = &m->base.cache[c->donor[l]].kv; /* the donor's, or its own */
    int T = bt->n_tokens, ty = c->full[l], hd = c->hd[l], kvh = c->kvh[c->donor[l]];
    const float *inv_freq = m->inv_freq[ty];
    const int owner = c->donor[l] == l; /* owners project k, v into their cache */
    float *outs[] = {m->q, m->k, m->v}; /* [T, H, hd], [T, kvh, hd] x 2 */
    const bk_weight *ws[] = {&L->wq, &L->wk, &L->wv};
    o->matmul_n(b, outs, m->xn, ws, owner ? 3 : 1, T);
    /* q / k norms, v_norm (no weight), full-width RoPE, k and v into the owner's cache */
    const bk_qkv_prep prep = {.H = c->H,
                              .KV = kvh,
                              .D = hd,
                              .q_norm = &L->q_norm,
                              .k_norm = &L->k_norm,
                              .norm_mode = BK_NORM_PLAIN,
                              .v_norm = 1,
                              .eps = c->eps,
                              .inv_freq = inv_freq,
                              .rot = hd};
    o->attn_prep(b, m->q, NULL, NULL, m->k, m->v, owner ? kv : NULL, bt, &prep);
    o->attention(b, m->att, m->q, kv, bt, c->H, kvh, hd, 1.0f, ty == G4_FULL ? 0 : c->window,
                 0.0f); /* scale 1, no softcap */
    o->matmul(b, m->mix, m->att, &L->wo, T);
}

static int g4_forward(void *impl, bk_batch *bt, const int32_t *tokens, const int32_t *out_rows,
                      int n_out, model_out *out, strata_err *err) {
    g4 *m = impl;
    const g4_config *c = &m->c;
    backend *b = m->base.b;
    const backend_ops *o = b->ops;
    int T = bt->n_tokens, h = c->h;
    size_t Th = (size_t)T * h;
    if (arch_batch_prepare(&m->base, bt, err)) return err->code;

    arch_embed(b, m->x, &m->base.embed, tokens, out->fed, bt);
    o->scale(b, m->x, m->s_embed, NULL, Th); /* x₀ = E[t] · √h, §3.3 */
    if (c->P) g4_ple(m, bt, tokens, out->fed);
    float *ple = T == 1 ? m->ple : m->plt;
    o->rmsnorm(b, m->xn, m->x, &m->layers[0].in_norm, T, h, h, c->eps, BK_NORM_PLAIN);
    for (int l = 0; l < c->n_layer; l++) {
        g4_layer *L = &m->layers[l];
        /* §3.5; xn = input_layernorm(x), made by the previous layer's last residual step */
        g4_attention(m, l, bt);
        /* x += post_attention_norm(mix); xn = pre_feedforward_norm(x) */
        o->residual(b, m->x, m->xn, m->mix, &L->post_attn_norm, BK_NORM_PLAIN, NULL,
                    &L->pre_ff_norm, BK_NORM_PLAIN, T, h, c->eps);
        /* GeGLU MLP, §3.8, gate and up [T, width[l]] */
        float *gate = m->big1, *up = m->big2;
        arch_glu_forward(b, m->mix, gate, up, m->xn, &L->mlp, T, BK_ACT_GELU_TANH);
        /* The layer's last residual step also scales the whole stream by layer_scalar and
         * makes the next layer's input_layernorm (the head norms its own rows). */
        const bk_weight *next = l + 1 < c->n_layer ? &m->layers[l + 1].in_norm : NULL;
        float *nxn = next ? m->xn : NULL;
        /* x += post_feedforward_norm(mix) */
        o->residual(b, m->x, c->P ? NULL : nxn, m->mix, &L->post_ff_norm, BK_NORM_PLAIN,
                    c->P ? NULL : &L->scalar, next, BK_NORM_PLAIN, T, h, c->eps);
        /* PLE block: x += norm(W_proj · (gelu(W_gate · x) ⊙ ple_l)) */
        if (c->P) {
            o->matmul(b, m->pg, m->x, &L->pl_gate, T);
            o->matmul_glu(b, m->mix, m->pg, ple + (size_t)l * T * c->P, &L->pl_proj, T,
                          BK_ACT_GELU_TANH);
            o->residual(b, m->x, nxn, m->mix, &L->pl_norm, BK_NORM_PLAIN, &L->scalar, next,
                        BK_NORM_PLAIN, T, h, c->eps);
        }
    }
    /* Final norm, tied head and softcap (§3.9) only on the rows whose logits are wanted. */
    arch_logits(&m->base, m->x, out_rows, n_out, out);
    return 0;
}

/* reset_slot clears nothing here: a K/V row is always written before a query can see it
 * (each position is stored before attention in its step, and a ring keeps the window).
 * state_parts are the sliding layers' rings; the full layers' kv lives in the pool. */
const model_arch arch_gemma4 = {"gemma4",        "gemma4_text",    g4_open,   g4_forward,
                                arch_reset_slot, arch_state_parts, arch_close};
