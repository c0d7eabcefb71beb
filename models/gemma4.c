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
    bk_weight gate, up;                  /* [I_l, h] */
    bk_weight down;                      /* [h, I_l] */
    bk_weight pl_gate;                   /* per_layer_input_gate [P, h] */
    bk_weight pl_proj;                   /* per_layer_projection [h, P] */
    bk_weight pl_norm;                   /* post_per_layer_input_norm [h] */
    bk_weight scalar;                    /* layer_scalar [1] */
    bk_kv kv;                            /* owners: [slots, cap, kvh·hd] */
} g4_layer;

typedef struct g4 {
    g4_config c;
    backend *b;
    int slots, ctx, step_tokens;
    dtype kv_dt;          /* of the owners' caches (arch_kv_dtype) */
    int ple_host;         /* PLE table in host memory (§5) */
    int ple_mapped;       /* ... and read by the backend's ops there (ple_dev) */
    bk_weight ple_dev;    /* the table as the backend's ops address it, when mapped */
    bk_weight embed;      /* [vocab, h] */
    bk_weight ple_table;  /* embed_tokens_per_layer [vocab, L·P] */
    bk_weight ple_proj;   /* per_layer_model_projection [L·P, h] */
    bk_weight ple_norm;   /* per_layer_projection_norm [P] */
    bk_weight final_norm; /* [h] plain */
    bk_weight lm_head;    /* [vocab, h]: the embedding when tied */
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
    arch_head head;      /* final norm, head matmul, softcap; its chunk buffers */
    /* host memory */
    float *stage;     /* [step_tokens, L·P] PLE rows gathered on the host */
    int32_t *ple_idx; /* [step_tokens·L] rows of the layer-major relayout */
} g4;

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
    CFG_INT(g4_config, vocab, "vocab_size", 1, 1 << 24),
    CFG_INT(g4_config, h, "hidden_size", 1, 1 << 16),
    CFG_INT(g4_config, inter, "intermediate_size", 1, 1 << 18),
    CFG_INT(g4_config, n_layer, "num_hidden_layers", 1, 1024),
    CFG_INT(g4_config, H, "num_attention_heads", 1, 1024),
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

#define G4_FAIL(code, ...)                                                                         \
    do {                                                                                           \
        strata_err_set(err, code, __VA_ARGS__);                                                    \
        goto fail;                                                                                 \
    } while (0)

static void g4_config_free(g4_config *c) {
    free(c->full);
    free(c->hd);
    free(c->kvh);
    free(c->donor);
    free(c->width);
    c->full = NULL;
    c->hd = c->kvh = c->donor = c->width = NULL;
}

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

static int g4_parse(g4_config *c, json_t *root, strata_err *err) {
    const char *where;
    json_t *tc;
    if (cfg_text_config(root, &tc, &where, err)) return err->code;
    memset(c, 0, sizeof *c);
    g4_raw raw;
    const cfg_field *const tables[] = {g4_fields, g4_raw_fields};
    const size_t sizes[] = {sizeof g4_fields / sizeof g4_fields[0],
                            sizeof g4_raw_fields / sizeof g4_raw_fields[0]};
    if (cfg_check_keys_tables(tc, where, tables, sizes, 2, g4_known_keys, g4_ignored_keys, err) ||
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
        G4_FAIL(STRATA_EUNSUPPORTED,
                "%s: vocab_size_per_layer_input %d differs from vocab_size %d (not supported)",
                where, vpl, c->vocab);
    const char *bidi;
    if (cfg_str(tc, where, "use_bidirectional_attention", NULL, &bidi, err)) goto fail;
    if (bidi && strcmp(bidi, "vision")) /* "vision" only changes image tokens' masks */
        G4_FAIL(STRATA_EUNSUPPORTED, "%s: use_bidirectional_attention \"%s\" is not supported",
                where, bidi);

    /* tie_word_embeddings: text_config wins, then the top level (real files set both). */
    int tied;
    if (cfg_bool(root, "config.json", "tie_word_embeddings", 1, 1, &tied, err)) goto fail;
    if (tc != root && cfg_bool(tc, where, "tie_word_embeddings", 1, tied, &tied, err)) goto fail;
    c->tied = tied;

    size_t L = (size_t)c->n_layer;
    c->full = calloc(L, 1);
    c->hd = calloc(L, sizeof(int));
    c->kvh = calloc(L, sizeof(int));
    c->donor = calloc(L, sizeof(int));
    c->width = calloc(L, sizeof(int));
    if (!c->full || !c->hd || !c->kvh || !c->donor || !c->width)
        G4_FAIL(STRATA_ENOMEM, "config: out of memory");
    json_t *lt = json_object_get(tc, "layer_types");
    if (lt && !json_is_null(lt)) {
        if (!json_is_array(lt) || json_array_size(lt) != L)
            G4_FAIL(STRATA_EFORMAT, "%s: layer_types must list %d layer types", where, c->n_layer);
        for (size_t i = 0; i < L; i++) {
            const char *s = json_string_value(json_array_get(lt, i));
            if (s && !strcmp(s, "full_attention")) c->full[i] = 1;
            else if (!s || strcmp(s, "sliding_attention"))
                G4_FAIL(STRATA_EUNSUPPORTED, "%s: layer_types[%zu] = \"%s\" is not supported",
                        where, i, s ? s : "(not a string)");
        }
    } else { /* transformers' default pattern, 5 sliding : 1 full */
        for (size_t i = 0; i < L; i++) c->full[i] = (i + 1) % 6 == 0;
    }
    c->full[L - 1] = 1; /* transformers forces the last layer to full attention */

    /* Head dims (§1.2, §1.3): full layers take global_head_dim unless per_layer_config
     * (which replaces it in newer exports) lists overrides. */
    json_t *plc = json_object_get(tc, "per_layer_config");
    for (size_t i = 0; i < L; i++) {
        c->hd[i] = plc && !json_is_null(plc) ? hd : c->full[i] ? ghd : hd;
        c->kvh[i] = kvh;
    }
    if (plc && !json_is_null(plc) && g4_parse_overrides(c, plc, where, err)) goto fail;

    json_t *rp = json_object_get(tc, "rope_parameters");
    for (int ty = 0; ty < 2; ty++) {
        g4_rope *r = &c->rope[ty];
        int type_hd = 0;
        for (size_t i = 0; i < L; i++) {
            if (c->full[i] != ty) continue;
            if (!type_hd) type_hd = c->hd[i];
            if (c->hd[i] != type_hd || c->hd[i] % 2)
                G4_FAIL(STRATA_EUNSUPPORTED,
                        "%s: layer %zu has head dim %d, other %s layers %d (one even head dim "
                        "per layer type is supported)",
                        where, i, c->hd[i], g4_type_names[ty], type_hd);
        }
        if (!type_hd) continue; /* no layer of this type: no RoPE for it */
        if (g4_parse_rope(r, rp, ty, err)) goto fail;
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
                G4_FAIL(STRATA_EFORMAT,
                        "%s: layer %d shares kv (num_kv_shared_layers) but no earlier layer "
                        "of type %s owns a cache",
                        where, i, g4_type_names[c->full[i]]);
        }
        int d = c->donor[i];
        if (c->H % c->kvh[d])
            G4_FAIL(STRATA_EFORMAT,
                    "%s: num_attention_heads %d is not a multiple of layer %d's %d kv heads", where,
                    c->H, d, c->kvh[d]);
        c->width[i] = c->inter * (dw && i >= c->first_shared ? 2 : 1);
    }
    return 0;
fail:
    g4_config_free(c);
    return err->code ? err->code : STRATA_EFORMAT;
}

/* ---- weights (§2) ---- */

static int g4_bind(g4 *m, const model_arch_ctx *ctx, strata_err *err) {
    const g4_config *c = &m->c;
    int64_t LP = (int64_t)c->n_layer * c->P;
    /* Real checkpoints carry model.language_model.; a text-only save (Gemma4ForCausalLM)
     * has model. (§2.2). Everything else (towers, dead k/v of shared layers) is skipped
     * by never being asked for. */
    const char *p = "model.language_model.";
    bk_weight probe;
    int64_t es[2] = {c->vocab, c->h}, hv[1] = {c->h};
    int rc = arch_bind(ctx, &probe, ARCH_BIND_OPTIONAL, 2, es, err, "%sembed_tokens.weight", p);
    if (rc < 0) return rc;
    if (rc == 1) p = "model.";
    else m->embed = probe;
    if (rc == 1 && arch_bind(ctx, &m->embed, 0, 2, es, err, "%sembed_tokens.weight", p))
        return err->code;
    if (arch_bind(ctx, &m->final_norm, 0, 1, hv, err, "%snorm.weight", p)) return err->code;
    if (c->tied) m->lm_head = m->embed;
    else if (arch_bind(ctx, &m->lm_head, 0, 2, es, err, "lm_head.weight")) return err->code;
    if (c->P) {
        int64_t pt[2] = {c->vocab, LP}, pp[2] = {LP, c->h}, pn[1] = {c->P};
        if (arch_bind(ctx, &m->ple_table, m->ple_host ? ARCH_BIND_HOST : 0, 2, pt, err,
                      "%sembed_tokens_per_layer.weight", p) ||
            arch_bind(ctx, &m->ple_proj, 0, 2, pp, err, "%sper_layer_model_projection.weight", p) ||
            arch_bind(ctx, &m->ple_norm, 0, 1, pn, err, "%sper_layer_projection_norm.weight", p))
            return err->code;
    }
    for (int i = 0; i < c->n_layer; i++) {
        g4_layer *L = &m->layers[i];
        int64_t hd = c->hd[i], I = c->width[i];
        int64_t q[2] = {c->H * hd, c->h}, o[2] = {c->h, c->H * hd}, kv[2] = {c->kvh[i] * hd, c->h};
        int64_t d[1] = {hd}, gu[2] = {I, c->h}, dn[2] = {c->h, I}, one[1] = {1};
        int64_t plg[2] = {c->P, c->h}, plp[2] = {c->h, c->P};
        ARCH_BIND_LAYER(in_norm, 1, hv, "input_layernorm.weight");
        ARCH_BIND_LAYER(post_attn_norm, 1, hv, "post_attention_layernorm.weight");
        ARCH_BIND_LAYER(pre_ff_norm, 1, hv, "pre_feedforward_layernorm.weight");
        ARCH_BIND_LAYER(post_ff_norm, 1, hv, "post_feedforward_layernorm.weight");
        ARCH_BIND_LAYER(wq, 2, q, "self_attn.q_proj.weight");
        ARCH_BIND_LAYER(q_norm, 1, d, "self_attn.q_norm.weight");
        ARCH_BIND_LAYER(wo, 2, o, "self_attn.o_proj.weight");
        if (c->donor[i] == i) { /* shared layers' k/v/k_norm are dead weights (§2.1) */
            ARCH_BIND_LAYER(wk, 2, kv, "self_attn.k_proj.weight");
            ARCH_BIND_LAYER(wv, 2, kv, "self_attn.v_proj.weight");
            ARCH_BIND_LAYER(k_norm, 1, d, "self_attn.k_norm.weight");
        }
        ARCH_BIND_LAYER(gate, 2, gu, "mlp.gate_proj.weight");
        ARCH_BIND_LAYER(up, 2, gu, "mlp.up_proj.weight");
        ARCH_BIND_LAYER(down, 2, dn, "mlp.down_proj.weight");
        if (c->P) {
            ARCH_BIND_LAYER(pl_gate, 2, plg, "per_layer_input_gate.weight");
            ARCH_BIND_LAYER(pl_proj, 2, plp, "per_layer_projection.weight");
            ARCH_BIND_LAYER(pl_norm, 1, hv, "post_per_layer_input_norm.weight");
        }
        ARCH_BIND_LAYER(scalar, 1, one, "layer_scalar");
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

static int g4_alloc(g4 *m, const model_arch_ctx *ctx, strata_err *err) {
    const g4_config *c = &m->c;
    backend *b = m->b;
    size_t T = (size_t)m->step_tokens, S = (size_t)m->slots, LP = (size_t)c->n_layer * c->P;
    size_t qw = 0, kw = 0, wide = LP;
    for (int i = 0; i < c->n_layer; i++) {
        size_t hd = (size_t)c->hd[i];
        if ((size_t)c->H * hd > qw) qw = (size_t)c->H * hd;
        if ((size_t)c->kvh[i] * hd > kw) kw = (size_t)c->kvh[i] * hd;
        if ((size_t)c->width[i] > wide) wide = (size_t)c->width[i];
    }
    ARCH_ALLOC(m->x, T * c->h);
    ARCH_ALLOC(m->xn, T * c->h);
    ARCH_ALLOC(m->mix, T * c->h);
    ARCH_ALLOC(m->q, T * qw);
    ARCH_ALLOC(m->att, T * qw);
    ARCH_ALLOC(m->k, T * kw);
    ARCH_ALLOC(m->v, T * kw);
    ARCH_ALLOC(m->big1, T * wide);
    ARCH_ALLOC(m->big2, T * wide);
    m->head = (arch_head){.norm = &m->final_norm,
                          .norm_mode = BK_NORM_PLAIN,
                          .eps = c->eps,
                          .head = &m->lm_head,
                          .softcap = c->softcap,
                          .h = c->h,
                          .vocab = c->vocab};
    if (arch_head_init(b, &m->head, ARCH_NAME, m->slots, m->step_tokens, err)) return err->code;
    if (c->P) {
        ARCH_ALLOC(m->ple, T * LP);
        ARCH_ALLOC(m->plt, T * LP);
        ARCH_ALLOC(m->pg, T * c->P);
        m->ple_idx = malloc(sizeof(int32_t) * T * (size_t)c->n_layer);
        int host_gather = m->ple_host && !m->ple_mapped;
        if (host_gather) m->stage = malloc(sizeof(float) * T * LP);
        if (!m->ple_idx || (host_gather && !m->stage))
            return strata_err_set(err, STRATA_ENOMEM, "gemma4: out of host memory for PLE");
    }
    /* Full layers page their kv from the pool; sliding ones keep a ring per slot of
     * window + step rows (>= window + T - 1: see the file comment), part of the slot's state. */
    int ring = c->window + m->step_tokens;
    int64_t pos_bytes = 0;
    for (int i = 0; i < c->n_layer; i++)
        if (c->donor[i] == i && c->full[i])
            pos_bytes += 2 * (int64_t)c->kvh[i] * c->hd[i] * (int64_t)dtype_size(m->kv_dt);
    if (pos_bytes && arch_kv_pool(ctx, pos_bytes, m->slots, &m->ctx, ARCH_NAME, err))
        return err->code;
    for (int i = 0; i < c->n_layer; i++) {
        g4_layer *L = &m->layers[i];
        if (c->donor[i] != i) continue;
        size_t w = (size_t)c->kvh[i] * c->hd[i];
        if (c->full[i]) {
            if (arch_kv_alloc_paged(ctx, &L->kv, m->kv_dt, (int)w, ARCH_NAME, err))
                return err->code;
        } else if (arch_kv_alloc(b, &L->kv, m->kv_dt, (int)S, ring < m->ctx ? ring : m->ctx, (int)w,
                                 ARCH_NAME, err)) {
            return err->code;
        }
    }
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
    m->s_embed = g4_round_to((float)sqrt((double)c->h), m->embed.dt);
    if (c->P) m->s_ple = g4_round_to((float)sqrt((double)c->P), m->ple_table.dt);
    return 0;
}

static void g4_close(void *impl) {
    g4 *m = impl;
    if (!m) return;
    backend *b = m->b;
    float **bufs[] = {&m->x,   &m->xn, &m->mix,         &m->q,          &m->att,
                      &m->k,   &m->v,  &m->big1,        &m->big2,       &m->ple,
                      &m->plt, &m->pg, &m->inv_freq[0], &m->inv_freq[1]};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (*bufs[i]) b->ops->free(b, *bufs[i]);
    arch_head_free(b, &m->head);
    for (int i = 0; m->layers && i < m->c.n_layer; i++) arch_kv_free(b, &m->layers[i].kv);
    if (m->ple_mapped) b->ops->weight_unmap(b, &m->ple_dev);
    free(m->stage);
    free(m->ple_idx);
    free(m->layers);
    g4_config_free(&m->c);
    free(m);
}

/* Bytes one decode token reads: every bound weight once (the tied embedding as the head),
 * the PLE table as the one row gathered (§2.3, §5). */
static int64_t g4_weight_bytes(const g4 *m) {
    const g4_config *c = &m->c;
    int64_t wb = arch_weight_bytes(&m->final_norm) + arch_weight_bytes(&m->lm_head) +
                 arch_weight_bytes(&m->ple_proj) + arch_weight_bytes(&m->ple_norm);
    if (c->P) wb += (int64_t)c->n_layer * c->P * (int64_t)dtype_size(m->ple_table.dt);
    for (int i = 0; i < c->n_layer; i++) {
        const g4_layer *L = &m->layers[i];
        const bk_weight *ws[] = {&L->in_norm,     &L->post_attn_norm,
                                 &L->pre_ff_norm, &L->post_ff_norm,
                                 &L->wq,          &L->q_norm,
                                 &L->wk,          &L->wv,
                                 &L->k_norm,      &L->wo,
                                 &L->gate,        &L->up,
                                 &L->down,        &L->pl_gate,
                                 &L->pl_proj,     &L->pl_norm,
                                 &L->scalar};
        wb += arch_weights_bytes(ws, sizeof ws / sizeof ws[0]);
    }
    return wb;
}

static int g4_open(void **impl, const model_arch_ctx *ctx, model_info *info, strata_err *err) {
    g4 *m = calloc(1, sizeof *m);
    if (!m) return strata_err_set(err, STRATA_ENOMEM, "gemma4: out of memory");
    m->b = ctx->b;
    if (g4_parse(&m->c, ctx->config, err)) goto fail;
    const g4_config *c = &m->c;
    if (!(m->layers = arch_layers_new(ARCH_NAME, c->n_layer, sizeof *m->layers, err))) goto fail;
    arch_sizes(ctx, c->max_pos, &m->slots, &m->ctx, &m->step_tokens);
    m->ple_host = !ctx->opts->ple_on_device;
    if (g4_bind(m, ctx, err)) goto fail;
    strata_err merr = {0}; /* unmapped: the host gathers the rows */
    m->ple_mapped =
        m->ple_host && c->P && !backend_weight_map(m->b, &m->ple_table, &m->ple_dev, &merr);
    m->kv_dt = arch_kv_dtype(ctx, m->embed.dt);
    backend_compute_dtype(ctx->b, m->kv_dt);
    if (g4_alloc(m, ctx, err)) goto fail;

    if (arch_info(ctx, ARCH_NAME, c->vocab, m->slots, m->ctx, m->step_tokens, 1, info, err))
        goto fail;
    info->weight_bytes = g4_weight_bytes(m);
    info->host_ids = m->ple_host && !m->ple_mapped && c->P > 0; /* the host gathers by id */
    for (int i = 0; i < c->first_shared; i++)
        info->kv_bytes_per_token += 2LL * c->kvh[i] * c->hd[i] * (int64_t)dtype_size(m->kv_dt);
    *impl = m;
    return 0;
fail:
    g4_close(m);
    return err->code ? err->code : STRATA_EINVALID;
}

static int g4_state_parts(void *impl, arch_state_part *out, int max) {
    g4 *m = impl;
    const g4_config *c = &m->c;
    int n = 0;
    for (int i = 0; i < c->n_layer && n + 2 <= max; i++) {
        const bk_kv *kv = &m->layers[i].kv;
        if (c->donor[i] != i || kv->block) continue;
        size_t bytes = (size_t)kv->cap * (size_t)kv->width * dtype_size(kv->dt);
        out[n++] = (arch_state_part){kv->k, bytes};
        out[n++] = (arch_state_part){kv->v, bytes};
    }
    return n;
}

static void g4_reset_slot(void *impl, int slot) {
    /* Nothing to clear: a K/V row is always written before a query can see it (each
     * position is stored before attention in its step, and the ring keeps the window). */
    (void)impl;
    (void)slot;
}

/* ---- forward (§3) ---- */

/* The step's PLE table rows as f32 [T, L·P], gathered on the host (§5 step 2). The
 * conversion is the one the backend's embed op makes, so both paths agree to the bit. */
static void g4_ple_gather_host(g4 *m, const int32_t *tokens, int T) {
    const bk_weight *t = &m->ple_table;
    size_t LP = (size_t)m->c.n_layer * m->c.P, es = dtype_size(t->dt);
    for (int i = 0; i < T; i++) {
        const void *row = (const char *)t->data + (size_t)tokens[i] * LP * es;
        float *dst = m->stage + (size_t)i * LP;
        if (t->dt == DTYPE_BF16)
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
    backend *b = m->b;
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
    backend *b = m->b;
    const backend_ops *o = b->ops;
    g4_layer *L = &m->layers[l], *D = &m->layers[c->donor[l]];
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
    o->attn_prep(b, m->q, NULL, NULL, m->k, m->v, owner ? &L->kv : NULL, bt, &prep);
    o->attention(b, m->att, m->q, &D->kv, bt, c->H, kvh, hd, 1.0f, ty == G4_FULL ? 0 : c->window,
                 0.0f); /* scale 1, no softcap */
    o->matmul(b, m->mix, m->att, &L->wo, T);
}

static int g4_forward(void *impl, bk_batch *bt, const int32_t *tokens, const int32_t *out_rows,
                      int n_out, model_out *out, strata_err *err) {
    g4 *m = impl;
    const g4_config *c = &m->c;
    backend *b = m->b;
    const backend_ops *o = b->ops;
    int T = bt->n_tokens, h = c->h;
    size_t Th = (size_t)T * h;
    if (arch_check_batch(ARCH_NAME, bt, m->step_tokens, m->ctx, err)) return err->code;
    if (o->batch_prepare(b, bt, err)) return err->code;

    arch_embed(b, m->x, &m->embed, tokens, out->fed, bt);
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
        /* GeGLU MLP, §3.8 */
        float *gate = m->big1, *up = m->big2; /* [T, width[l]] */
        float *gu[] = {gate, up};
        const bk_weight *gw[] = {&L->gate, &L->up};
        o->matmul_n(b, gu, m->xn, gw, 2, T);
        o->matmul_glu(b, m->mix, gate, up, &L->down, T, BK_ACT_GELU_TANH);
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
    arch_logits(b, &m->head, m->x, out_rows, n_out, out);
    return 0;
}

const model_arch arch_gemma4 = {
    .model_type = "gemma4",
    .alt_type = "gemma4_text",
    .open = g4_open,
    .forward = g4_forward,
    .reset_slot = g4_reset_slot,
    .state_parts = g4_state_parts,
    .close = g4_close,
};
