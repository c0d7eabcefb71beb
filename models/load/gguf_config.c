/* gguf_config.c - the config.json and generation_config.json a GGUF file's metadata stands
 * for, so the architecture files' own config readers run unchanged on a GGUF model. The keys
 * are llama.cpp's (docs/gguf.md; the converter's set_gguf_parameters); what the metadata
 * leaves implicit is derived as llama.cpp's loader derives it: the vocabulary from token_embd,
 * a tied head from the absence of output.weight, Gemma 4's proportional rope from rope_freqs,
 * Nemotron-H's layer pattern from its per-layer head_count_kv and feed_forward_length. One key
 * is strata's own: strata_linear_v_tiled, Qwen3.5's V heads left in the converter's tiled
 * order (gguf_wsrc_v_tiled). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "models/load/gguf_model.h"

#define GC_MAX_LAYERS 1024

/* What the readers below share: the file, the key prefix, the config being built. */
typedef struct gc {
    const gguf *g;
    const char *arch;
    json_t *cfg;
    strata_err *err;
} gc;

/* "<arch>.<key>" as an unsigned integer in [lo, hi]. */
static int gc_int(gc *c, const char *key, long long lo, long long hi, long long *out) {
    char k[128];
    int64_t v;
    snprintf(k, sizeof k, "%s.%s", c->arch, key);
    if (gguf_get_ints(c->g, k, &v, 1, c->err)) return c->err->code;
    if (v < lo || v > hi)
        return strata_err_set(c->err, STRATA_ERANGE, "%s: key '%s' = %lld is outside [%lld, %lld]",
                              gguf_path(c->g), k, (long long)v, lo, hi);
    *out = v;
    return 0;
}

/* Sets config field name to "<arch>.<key>" read as an integer. */
static int gc_set_int(gc *c, const char *name, const char *key, long long lo, long long hi) {
    long long v;
    if (gc_int(c, key, lo, hi, &v)) return c->err->code;
    json_object_set_new(c->cfg, name, json_integer(v));
    return 0;
}

static int gc_real(gc *c, const char *key, double *out) {
    char k[128];
    float v;
    snprintf(k, sizeof k, "%s.%s", c->arch, key);
    if (gguf_get_f32(c->g, k, &v, c->err)) return c->err->code;
    *out = v;
    return 0;
}

/* A per-layer value (an array of n, or one scalar for all) into out[n]. */
static int gc_layers(gc *c, const char *key, int64_t *out, int n) {
    char k[128];
    snprintf(k, sizeof k, "%s.%s", c->arch, key);
    return gguf_get_ints(c->g, k, out, (uint64_t)n, c->err);
}

/* The rows of token_embd: the vocabulary. */
static int gc_vocab(gc *c) {
    const gguf_tensor *t = gguf_find_tensor(c->g, "token_embd.weight");
    if (!t || t->ndim != 2)
        return strata_err_set(c->err, STRATA_EFORMAT, "%s: tensor token_embd.weight is %s",
                              gguf_path(c->g), t ? "not a matrix" : "missing");
    json_object_set_new(c->cfg, "vocab_size", json_integer(t->shape[0]));
    json_object_set_new(c->cfg, "tie_word_embeddings",
                        json_boolean(!gguf_find_tensor(c->g, "output.weight")));
    return 0;
}

/* Block count less the MTP blocks the converter appends (strata does not run them). */
static int gc_layer_count(gc *c, long long *n) {
    long long nextn = 0, total;
    char k[128];
    snprintf(k, sizeof k, "%s.nextn_predict_layers", c->arch);
    if (gguf_find_kv(c->g, k) && gc_int(c, "nextn_predict_layers", 0, 16, &nextn))
        return c->err->code;
    if (gc_int(c, "block_count", 1, GC_MAX_LAYERS + 16, &total)) return c->err->code;
    *n = total - nextn;
    if (*n < 1)
        return strata_err_set(c->err, STRATA_EFORMAT, "%s: %s.block_count %lld leaves no layer",
                              gguf_path(c->g), c->arch, total);
    json_object_set_new(c->cfg, "num_hidden_layers", json_integer(*n));
    return 0;
}

/* The recurrent mixer's keys both hybrids share, in this order: ssm.conv_kernel,
 * ssm.state_size and ssm.group_count set the config fields conv, state and groups (the
 * model's own spellings); ssm.time_step_rank (the mixer's heads) and ssm.inner_size go to
 * heads and inner. Groups and heads are at most max_heads. */
static int gc_ssm(gc *c, const char *conv, const char *state, const char *groups,
                  long long max_heads, long long *heads, long long *inner) {
    if (gc_set_int(c, conv, "ssm.conv_kernel", 1, 64) ||
        gc_set_int(c, state, "ssm.state_size", 1, 4096) ||
        gc_set_int(c, groups, "ssm.group_count", 1, max_heads) ||
        gc_int(c, "ssm.time_step_rank", 1, max_heads, heads) ||
        gc_int(c, "ssm.inner_size", 1, 1 << 22, inner))
        return c->err->code;
    return 0;
}

static int gc_qwen35(gc *c) {
    long long n, D, rot, interval, inner, Hv;
    double theta, eps;
    if (gc_vocab(c) || gc_layer_count(c, &n) ||
        gc_set_int(c, "hidden_size", "embedding_length", 1, 1 << 16) ||
        gc_set_int(c, "intermediate_size", "feed_forward_length", 1, 1 << 18) ||
        gc_set_int(c, "num_attention_heads", "attention.head_count", 1, 1024) ||
        gc_set_int(c, "num_key_value_heads", "attention.head_count_kv", 1, 1024) ||
        gc_set_int(c, "max_position_embeddings", "context_length", 1, 1 << 30) ||
        gc_ssm(c, "linear_conv_kernel_dim", "linear_key_head_dim", "linear_num_key_heads", 1024,
               &Hv, &inner) ||
        gc_int(c, "attention.key_length", 2, 4096, &D) ||
        gc_int(c, "rope.dimension_count", 2, 4096, &rot) || gc_real(c, "rope.freq_base", &theta) ||
        gc_real(c, "attention.layer_norm_rms_epsilon", &eps))
        return c->err->code;
    json_object_set_new(c->cfg, "head_dim", json_integer(D));
    json_object_set_new(c->cfg, "linear_num_value_heads", json_integer(Hv));
    json_object_set_new(c->cfg, "linear_value_head_dim", json_integer(inner / Hv));
    json_object_set_new(c->cfg, "rms_norm_eps", json_real(eps));
    /* the model takes rot as (int)(head_dim · factor): nudge the factor up where the
     * quotient rounds below rot / head_dim */
    double prf = (double)rot / (double)D;
    if ((long long)(D * prf) != rot) prf = nextafter(prf, 2.0);
    json_object_set_new(c->cfg, "rope_parameters",
                        json_pack("{s:s, s:f, s:f}", "rope_type", "default", "rope_theta", theta,
                                  "partial_rotary_factor", prf));
    /* recurrent_layers when written (the converter does from layer_types), else the interval */
    int64_t rec[GC_MAX_LAYERS + 16];
    json_t *lt = json_array();
    json_object_set_new(c->cfg, "layer_types", lt);
    if (gguf_find_kv(c->g, "qwen35.attention.recurrent_layers")) {
        const gguf_kv *kv = gguf_find_kv(c->g, "qwen35.attention.recurrent_layers");
        if (kv->n < (uint64_t)n || kv->n > GC_MAX_LAYERS + 16 || kv->type != GGUF_VT_ARRAY)
            return strata_err_set(c->err, STRATA_EFORMAT,
                                  "%s: key 'qwen35.attention.recurrent_layers' must list %lld "
                                  "layers",
                                  gguf_path(c->g), n);
        if (gguf_get_ints(c->g, "qwen35.attention.recurrent_layers", rec, kv->n, c->err))
            return c->err->code;
    } else {
        if (gc_int(c, "full_attention_interval", 1, 1024, &interval)) return c->err->code;
        for (long long i = 0; i < n; i++) rec[i] = (i + 1) % interval != 0;
    }
    for (long long i = 0; i < n; i++)
        json_array_append_new(lt, json_string(rec[i] ? "linear_attention" : "full_attention"));
    /* V heads the weight source leaves tiled: the model maps them so (models/qwen35.c) */
    int tiled;
    if (gguf_wsrc_v_tiled(c->g, &tiled, c->err)) return c->err->code;
    if (tiled) json_object_set_new(c->cfg, "strata_linear_v_tiled", json_true());
    return 0;
}

/* Gemma 4's full layers rotate the pairs whose rope_freqs factor is 1 (the others carry 1e30,
 * Gemma4Model.generate_extra_tensors): their share is the proportional rope's factor. */
static int gc_gemma4_prf(gc *c, long long ghd, double *prf) {
    const gguf_tensor *t = gguf_find_tensor(c->g, "rope_freqs.weight");
    *prf = 1.0;
    if (!t) return 0;
    if (t->type != GGUF_GGML_F32 || t->n_elements != ghd / 2)
        return strata_err_set(c->err, STRATA_EFORMAT,
                              "%s: tensor rope_freqs.weight must be F32 [%lld] (key_length / 2)",
                              gguf_path(c->g), ghd / 2);
    long long on = 0;
    for (long long i = 0; i < ghd / 2; i++) {
        float v;
        memcpy(&v, (const char *)t->data + 4 * i, 4);
        if (v == 1.0f && on == i) on++;
        else if (v < 1e29f)
            return strata_err_set(c->err, STRATA_EUNSUPPORTED,
                                  "%s: rope_freqs.weight[%lld] = %g: only the first pairs may "
                                  "rotate (factor 1, the rest 1e30)",
                                  gguf_path(c->g), i, v);
    }
    *prf = 2.0 * (double)on / (double)ghd;
    if ((long long)floor(*prf * (double)ghd / 2.0) != on) *prf = nextafter(*prf, 2.0);
    return 0;
}

static int gc_gemma4(gc *c) {
    long long n, ghd, hd, rot_swa, window, shared, P;
    double theta, theta_swa, eps, softcap = 0, prf;
    int64_t ff[GC_MAX_LAYERS], kvh[GC_MAX_LAYERS], swa[GC_MAX_LAYERS];
    if (gc_vocab(c) || gc_layer_count(c, &n) ||
        gc_set_int(c, "hidden_size", "embedding_length", 1, 1 << 16) ||
        gc_set_int(c, "num_attention_heads", "attention.head_count", 1, 1024) ||
        gc_set_int(c, "max_position_embeddings", "context_length", 1, 1 << 30) ||
        gc_int(c, "attention.key_length", 2, 4096, &ghd) ||
        gc_int(c, "attention.key_length_swa", 2, 4096, &hd) ||
        gc_int(c, "rope.dimension_count_swa", 2, 4096, &rot_swa) ||
        gc_int(c, "attention.sliding_window", 1, 1 << 30, &window) ||
        gc_int(c, "attention.shared_kv_layers", 0, n - 1, &shared) ||
        gc_int(c, "embedding_length_per_layer_input", 0, 1 << 16, &P) ||
        gc_real(c, "rope.freq_base", &theta) || gc_real(c, "rope.freq_base_swa", &theta_swa) ||
        gc_real(c, "attention.layer_norm_rms_epsilon", &eps) ||
        gc_layers(c, "feed_forward_length", ff, (int)n) ||
        gc_layers(c, "attention.head_count_kv", kvh, (int)n) ||
        gc_layers(c, "attention.sliding_window_pattern", swa, (int)n) ||
        gc_gemma4_prf(c, ghd, &prf))
        return c->err->code;
    if (gguf_find_kv(c->g, "gemma4.final_logit_softcapping") &&
        gc_real(c, "final_logit_softcapping", &softcap))
        return c->err->code;
    if (rot_swa != hd)
        return strata_err_set(c->err, STRATA_EUNSUPPORTED,
                              "%s: gemma4.rope.dimension_count_swa %lld != key_length_swa %lld "
                              "(partial rope on sliding layers is not supported)",
                              gguf_path(c->g), rot_swa, hd);
    /* double-wide MLP: the kv-shared layers' width is twice the others' */
    long long first_shared = n - shared;
    int dw = shared > 0 && ff[first_shared] == 2 * ff[0];
    for (long long i = 0; i < n; i++)
        if (ff[i] != ff[0] * (dw && i >= first_shared ? 2 : 1))
            return strata_err_set(c->err, STRATA_EUNSUPPORTED,
                                  "%s: gemma4.feed_forward_length[%lld] = %lld: one width (doubled "
                                  "on the kv-shared layers) is supported",
                                  gguf_path(c->g), i, (long long)ff[i]);
    json_t *lt = json_array(), *plc = NULL;
    for (long long i = 0; i < n; i++) {
        json_array_append_new(lt, json_string(swa[i] ? "sliding_attention" : "full_attention"));
        /* a per-layer kv head count other than the sliding layers' (num_global_key_value_heads
         * in the checkpoint) is written per layer, with the head dim the override needs */
        if (kvh[i] != kvh[0]) {
            if (!plc) plc = json_object();
            char l[16];
            snprintf(l, sizeof l, "%lld", i);
            json_object_set_new(plc, l,
                                json_pack("{s:I, s:I}", "head_dim", (json_int_t)(swa[i] ? hd : ghd),
                                          "num_key_value_heads", (json_int_t)kvh[i]));
        }
    }
    if (plc)
        for (long long i = 0; i < n; i++) {
            char l[16];
            snprintf(l, sizeof l, "%lld", i);
            if (!swa[i] && !json_object_get(plc, l))
                json_object_set_new(plc, l, json_pack("{s:I}", "head_dim", (json_int_t)ghd));
        }
    json_object_set_new(c->cfg, "layer_types", lt);
    if (plc) json_object_set_new(c->cfg, "per_layer_config", plc);
    json_object_set_new(c->cfg, "intermediate_size", json_integer(ff[0]));
    json_object_set_new(c->cfg, "use_double_wide_mlp", json_boolean(dw));
    json_object_set_new(c->cfg, "num_key_value_heads", json_integer(kvh[0]));
    json_object_set_new(c->cfg, "head_dim", json_integer(hd));
    json_object_set_new(c->cfg, "global_head_dim", json_integer(ghd));
    json_object_set_new(c->cfg, "sliding_window", json_integer(window));
    json_object_set_new(c->cfg, "num_kv_shared_layers", json_integer(shared));
    json_object_set_new(c->cfg, "hidden_size_per_layer_input", json_integer(P));
    json_object_set_new(c->cfg, "rms_norm_eps", json_real(eps));
    json_object_set_new(c->cfg, "final_logit_softcapping", json_real(softcap));
    json_object_set_new(c->cfg, "rope_parameters",
                        json_pack("{s:{s:s, s:f, s:f}, s:{s:s, s:f}}", "full_attention",
                                  "rope_type", "proportional", "rope_theta", theta,
                                  "partial_rotary_factor", prf, "sliding_attention", "rope_type",
                                  "default", "rope_theta", theta_swa));
    return 0;
}

static int gc_nemotron_h(gc *c) {
    long long n, mH, inner, H = 0;
    double eps;
    int64_t kvh[GC_MAX_LAYERS], ff[GC_MAX_LAYERS], heads[GC_MAX_LAYERS];
    if (gc_vocab(c) || gc_layer_count(c, &n) ||
        gc_set_int(c, "hidden_size", "embedding_length", 1, 1 << 16) ||
        gc_set_int(c, "max_position_embeddings", "context_length", 1, 1 << 30) ||
        gc_ssm(c, "conv_kernel", "ssm_state_size", "n_groups", 4096, &mH, &inner) ||
        gc_layers(c, "attention.head_count_kv", kvh, (int)n) ||
        gc_layers(c, "feed_forward_length", ff, (int)n) ||
        gc_layers(c, "attention.head_count", heads, (int)n))
        return c->err->code;
    /* the Mamba2 converter writes layer_norm_epsilon, others the rms spelling */
    if (gguf_find_kv(c->g, "nemotron_h.attention.layer_norm_epsilon")
            ? gc_real(c, "attention.layer_norm_epsilon", &eps)
            : gc_real(c, "attention.layer_norm_rms_epsilon", &eps))
        return c->err->code;
    json_t *lbt = json_array();
    json_object_set_new(c->cfg, "layers_block_type", lbt);
    long long KV = 0, I = 0;
    for (long long i = 0; i < n; i++) {
        const char *kind = kvh[i] > 0 ? "attention" : ff[i] > 0 ? "mlp" : "mamba";
        json_array_append_new(lbt, json_string(kind));
        if (kvh[i] > 0) {
            if ((KV && kvh[i] != KV) || (H && heads[i] != H))
                return strata_err_set(c->err, STRATA_EUNSUPPORTED,
                                      "%s: nemotron_h attention layers with different head counts",
                                      gguf_path(c->g));
            KV = kvh[i];
            H = heads[i];
        }
        if (ff[i] > 0) {
            if (I && ff[i] != I)
                return strata_err_set(c->err, STRATA_EUNSUPPORTED,
                                      "%s: nemotron_h MLP layers of different widths",
                                      gguf_path(c->g));
            I = ff[i];
        }
    }
    if (KV) {
        json_object_set_new(c->cfg, "num_attention_heads", json_integer(H));
        json_object_set_new(c->cfg, "num_key_value_heads", json_integer(KV));
        if (gc_set_int(c, "head_dim", "attention.key_length", 1, 4096)) return c->err->code;
    }
    if (I) json_object_set_new(c->cfg, "intermediate_size", json_integer(I));
    if (inner % mH)
        return strata_err_set(c->err, STRATA_EFORMAT,
                              "%s: nemotron_h.ssm.inner_size %lld is not a multiple of "
                              "time_step_rank %lld",
                              gguf_path(c->g), inner, mH);
    json_object_set_new(c->cfg, "mamba_num_heads", json_integer(mH));
    json_object_set_new(c->cfg, "mamba_head_dim", json_integer(inner / mH));
    json_object_set_new(c->cfg, "layer_norm_epsilon", json_real(eps));
    /* use_conv_bias has no key: whether the first Mamba layer's conv has a bias */
    int bias = 0;
    for (long long i = 0; i < n && !bias; i++) {
        char t[64];
        snprintf(t, sizeof t, "blk.%lld.ssm_conv1d.bias", i);
        bias = gguf_find_tensor(c->g, t) != NULL;
    }
    json_object_set_new(c->cfg, "use_conv_bias", json_boolean(bias));
    return 0;
}

/* The stop tokens of each family's generation_config.json, by text: a GGUF keeps one eos
 * id (Gemma 4's converter writes <eos> alone, so a chat turn's <turn|> would not stop). */
static const char *const qwen35_stops[] = {"<|im_end|>", "<|endoftext|>", NULL};
static const char *const gemma4_stops[] = {"<eos>", "<turn|>", "<|tool_response>", NULL};
static const char *const nemotron_h_stops[] = {"<|im_end|>", "</s>", NULL};

/* general.architecture, strata's model_type, the reader of its keys, its stop tokens. */
static const struct {
    const char *arch, *model_type;
    int (*read)(gc *c);
    const char *const *stops;
} gc_archs[] = {
    {"qwen35", "qwen3_5", gc_qwen35, qwen35_stops},
    {"gemma4", "gemma4", gc_gemma4, gemma4_stops},
    {"nemotron_h", "nemotron_h", gc_nemotron_h, nemotron_h_stops},
};

static void eos_add(json_t *ids, json_int_t id) {
    for (size_t i = 0; i < json_array_size(ids); i++)
        if (json_integer_value(json_array_get(ids, i)) == id) return;
    json_array_append_new(ids, json_integer(id));
}

/* tokenizer.ggml.eos_token_id and eot_token_id (when present), then the first id of each
 * stop text found in tokenizer.ggml.tokens, as an eos list. */
static int gc_eos(const gguf *g, const char *const *stops, json_t *gen, strata_err *err) {
    static const char *const keys[] = {"tokenizer.ggml.eos_token_id",
                                       "tokenizer.ggml.eot_token_id"};
    json_t *ids = json_array();
    json_object_set_new(gen, "eos_token_id", ids);
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        uint32_t id;
        if (!gguf_find_kv(g, keys[i])) continue;
        if (gguf_get_u32(g, keys[i], &id, err)) return err->code;
        eos_add(ids, id);
    }
    const gguf_str *toks;
    uint64_t n;
    int r = gguf_get_strs(g, "tokenizer.ggml.tokens", &toks, &n, err);
    if (r) return r == STRATA_ENOTFOUND ? 0 : r;
    for (; *stops; stops++) {
        size_t len = strlen(*stops);
        for (uint64_t i = 0; i < n; i++)
            if (toks[i].len == len && !memcmp(toks[i].ptr, *stops, len)) {
                eos_add(ids, (json_int_t)i);
                break;
            }
    }
    return 0;
}

int gguf_model_config(const gguf *g, json_t **config, json_t **gen_config, strata_err *err) {
    gguf_str a;
    char arch[64];
    if (gguf_get_str(g, "general.architecture", &a, err)) return err->code;
    snprintf(arch, sizeof arch, "%.*s", (int)(a.len < 63 ? a.len : 63), a.ptr);
    for (size_t i = 0; i < sizeof gc_archs / sizeof gc_archs[0]; i++) {
        if (strcmp(arch, gc_archs[i].arch)) continue;
        gc c = {g, arch, json_object(), err};
        json_t *gen = json_object();
        json_object_set_new(c.cfg, "model_type", json_string(gc_archs[i].model_type));
        if (gc_archs[i].read(&c) || gc_eos(g, gc_archs[i].stops, gen, err)) {
            json_decref(c.cfg);
            json_decref(gen);
            return err->code;
        }
        *config = c.cfg;
        *gen_config = gen;
        return 0;
    }
    return strata_err_set(err, STRATA_EUNSUPPORTED,
                          "%s: general.architecture \"%s\" is not supported (qwen35, gemma4, "
                          "nemotron_h)",
                          gguf_path(g), arch);
}

int gguf_model_is_gguf(const char *path) {
    struct stat sb;
    if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) return 0;
    size_t n = strlen(path);
    if (n > 5 && !strcmp(path + n - 5, ".gguf")) return 1;
    char magic[4] = {0};
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    size_t got = fread(magic, 1, 4, f);
    fclose(f);
    return got == 4 && !memcmp(magic, "GGUF", 4);
}
