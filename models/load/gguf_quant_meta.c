/* gguf_quant_meta.c - the metadata keys of a quantized checkpoint: general.* as llama-quantize
 * leaves them, and per architecture the keys llama.cpp's converter writes from config.json
 * (set_gguf_parameters of its qwen, gemma and nemotron modules; checked against the
 * files that converter wrote in tests/data/gguf/golden/). It is the inverse of gguf_config.c,
 * which reads them back, and the round trip through that reader is its test. MTP blocks are
 * not written (strata does not run them), so block_count is the text model's layer count. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/load/gguf_quant_internal.h"

#define GQ_MAX_LAYERS 1024

int gq_cfg_real(const gq_model *m, const char *keys, int has_def, double def, double *out,
                strata_err *err) {
    char k[64];
    for (const char *p = keys; *p;) {
        size_t n = strcspn(p, "|");
        snprintf(k, sizeof k, "%.*s", (int)n, p);
        json_t *v = json_object_get(m->tc, k);
        if (!v) v = json_object_get(m->root, k);
        if (v && json_is_number(v)) {
            *out = json_number_value(v);
            return 0;
        }
        if (v && !json_is_null(v))
            return strata_err_set(err, STRATA_EFORMAT, "%s: field \"%s\" must be a number",
                                  m->cfg_path, k);
        p += n + (p[n] == '|');
    }
    if (has_def) {
        *out = def;
        return 0;
    }
    return strata_err_set(err, STRATA_ENOTFOUND, "%s: missing field \"%s\"", m->cfg_path, keys);
}

int gq_cfg_int(const gq_model *m, const char *keys, int has_def, long long def, long long *out,
               strata_err *err) {
    double v;
    if (gq_cfg_real(m, keys, has_def, (double)def, &v, err)) return err->code;
    if (v != floor(v) || v < 0 || v > 1e12)
        return strata_err_set(err, STRATA_EFORMAT, "%s: field \"%s\" = %g is not a count",
                              m->cfg_path, keys, v);
    *out = (long long)v;
    return 0;
}

/* "<arch>.<key>" */
static const char *ak(const gq_model *m, char *buf, size_t len, const char *key) {
    snprintf(buf, len, "%s.%s", m->arch, key);
    return buf;
}

/* Sets "<arch>.<key>" to the config integer keys as a u32. */
static int put_u32(gguf_write *w, const gq_model *m, const char *key, const char *keys, int has_def,
                   long long def, strata_err *err) {
    char k[128];
    long long v;
    if (gq_cfg_int(m, keys, has_def, def, &v, err)) return err->code;
    if (v > UINT32_MAX)
        return strata_err_set(err, STRATA_ERANGE, "%s: field \"%s\" = %lld is too large",
                              m->cfg_path, keys, v);
    return gguf_write_u32(w, ak(m, k, sizeof k, key), (uint32_t)v, err);
}

static int put_f32(gguf_write *w, const gq_model *m, const char *key, double v, strata_err *err) {
    char k[128];
    return gguf_write_f32(w, ak(m, k, sizeof k, key), (float)v, err);
}

/* rope_parameters[section] (section NULL: the top), else the config's own field. */
static int rope_real(const gq_model *m, const char *section, const char *key, int has_def,
                     double def, double *out, strata_err *err) {
    json_t *rp = json_object_get(m->tc, "rope_parameters");
    if (rp && section) rp = json_object_get(rp, section);
    json_t *v = rp ? json_object_get(rp, key) : NULL;
    if (v && json_is_number(v)) {
        *out = json_number_value(v);
        return 0;
    }
    return gq_cfg_real(m, key, has_def, def, out, err);
}

/* layer_types as n flags: 1 where the entry is want. */
static int layer_flags(const gq_model *m, const char *want, int64_t n, uint8_t *out,
                       strata_err *err) {
    json_t *lt = json_object_get(m->tc, "layer_types");
    if (!json_is_array(lt) || (int64_t)json_array_size(lt) != n)
        return strata_err_set(err, STRATA_EFORMAT,
                              "%s: field \"layer_types\" must list %lld layers", m->cfg_path,
                              (long long)n);
    for (int64_t i = 0; i < n; i++) {
        const char *s = json_string_value(json_array_get(lt, (size_t)i));
        out[i] = s && !strcmp(s, want);
    }
    return 0;
}

static int meta_qwen35(gguf_write *w, const gq_model *m, strata_err *err) {
    long long n, H, D, Hv, dv, interval;
    double theta, eps, prf;
    char k[128];
    uint8_t rec[GQ_MAX_LAYERS];
    if (gq_cfg_int(m, "num_hidden_layers", 0, 0, &n, err) ||
        gq_cfg_int(m, "num_attention_heads", 0, 0, &H, err))
        return err->code;
    if (n < 1 || n > GQ_MAX_LAYERS)
        return strata_err_set(err, STRATA_ERANGE, "%s: num_hidden_layers %lld", m->cfg_path, n);
    long long hidden;
    if (gq_cfg_int(m, "hidden_size", 0, 0, &hidden, err) ||
        gq_cfg_int(m, "head_dim", 1, hidden / (H ? H : 1), &D, err) ||
        gq_cfg_int(m, "linear_num_value_heads", 0, 0, &Hv, err) ||
        gq_cfg_int(m, "linear_value_head_dim", 0, 0, &dv, err) ||
        gq_cfg_int(m, "full_attention_interval", 1, 4, &interval, err) ||
        rope_real(m, NULL, "rope_theta", 0, 0, &theta, err) ||
        rope_real(m, NULL, "partial_rotary_factor", 1, 0.25, &prf, err) ||
        gq_cfg_real(m, "rms_norm_eps", 0, 0, &eps, err))
        return err->code;
    if (put_u32(w, m, "block_count", "num_hidden_layers", 0, 0, err) ||
        put_u32(w, m, "context_length", "max_position_embeddings", 0, 0, err) ||
        put_u32(w, m, "embedding_length", "hidden_size", 0, 0, err) ||
        put_u32(w, m, "feed_forward_length", "intermediate_size", 0, 0, err) ||
        put_u32(w, m, "attention.head_count", "num_attention_heads", 0, 0, err) ||
        put_u32(w, m, "attention.head_count_kv", "num_key_value_heads", 0, 0, err))
        return err->code;
    /* mrope sections padded to 4, llama.cpp's default when the config has none */
    int32_t sec[4] = {11, 11, 10, 0};
    json_t *rp = json_object_get(m->tc, "rope_parameters");
    json_t *ms = rp ? json_object_get(rp, "mrope_section") : NULL;
    if (json_is_array(ms)) {
        memset(sec, 0, sizeof sec);
        for (size_t i = 0; i < json_array_size(ms) && i < 4; i++)
            sec[i] = (int32_t)json_integer_value(json_array_get(ms, i));
    }
    if (gguf_write_arr(w, ak(m, k, sizeof k, "rope.dimension_sections"), GGUF_VT_I32, sec, 4,
                       err) ||
        put_f32(w, m, "rope.freq_base", theta, err) ||
        put_f32(w, m, "attention.layer_norm_rms_epsilon", eps, err) ||
        gguf_write_u32(w, ak(m, k, sizeof k, "attention.key_length"), (uint32_t)D, err) ||
        gguf_write_u32(w, ak(m, k, sizeof k, "attention.value_length"), (uint32_t)D, err) ||
        put_u32(w, m, "ssm.conv_kernel", "linear_conv_kernel_dim", 0, 0, err) ||
        put_u32(w, m, "ssm.state_size", "linear_key_head_dim", 0, 0, err) ||
        put_u32(w, m, "ssm.group_count", "linear_num_key_heads", 0, 0, err) ||
        put_u32(w, m, "ssm.time_step_rank", "linear_num_value_heads", 0, 0, err) ||
        gguf_write_u32(w, ak(m, k, sizeof k, "ssm.inner_size"), (uint32_t)(Hv * dv), err))
        return err->code;
    if (json_object_get(m->tc, "layer_types")) {
        if (layer_flags(m, "linear_attention", n, rec, err) ||
            gguf_write_arr(w, ak(m, k, sizeof k, "attention.recurrent_layers"), GGUF_VT_BOOL, rec,
                           (uint64_t)n, err))
            return err->code;
    }
    return gguf_write_u32(w, ak(m, k, sizeof k, "full_attention_interval"), (uint32_t)interval,
                          err) ||
                   gguf_write_u32(w, ak(m, k, sizeof k, "rope.dimension_count"),
                                  (uint32_t)(D * prf), err)
               ? err->code
               : 0;
}

/* Gemma 4's full-attention head dim: global_head_dim, else the first full layer's override. */
static int gemma4_ghd(const gq_model *m, const uint8_t *swa, long long n, long long *ghd,
                      strata_err *err) {
    if (json_object_get(m->tc, "global_head_dim"))
        return gq_cfg_int(m, "global_head_dim", 0, 0, ghd, err);
    json_t *plc = json_object_get(m->tc, "per_layer_config");
    for (long long i = 0; i < n && plc; i++) {
        char l[24];
        snprintf(l, sizeof l, "%lld", i);
        json_t *hd = json_object_get(json_object_get(plc, l), "head_dim");
        if (!swa[i] && json_is_integer(hd)) {
            *ghd = json_integer_value(hd);
            return 0;
        }
    }
    return gq_cfg_int(m, "head_dim", 0, 0, ghd, err);
}

static int meta_gemma4(gguf_write *w, const gq_model *m, strata_err *err) {
    long long n, hd, ghd, I, shared, kv, kv_full = -1;
    double theta, theta_swa, eps, softcap = 0, prf_swa;
    uint8_t swa[GQ_MAX_LAYERS];
    int32_t arr[GQ_MAX_LAYERS];
    char k[128];
    int dw = json_is_true(json_object_get(m->tc, "use_double_wide_mlp"));
    if (gq_cfg_int(m, "num_hidden_layers", 0, 0, &n, err)) return err->code;
    if (n < 1 || n > GQ_MAX_LAYERS)
        return strata_err_set(err, STRATA_ERANGE, "%s: num_hidden_layers %lld", m->cfg_path, n);
    if (layer_flags(m, "sliding_attention", n, swa, err) || gemma4_ghd(m, swa, n, &ghd, err) ||
        gq_cfg_int(m, "head_dim", 0, 0, &hd, err) ||
        gq_cfg_int(m, "intermediate_size", 0, 0, &I, err) ||
        gq_cfg_int(m, "num_kv_shared_layers", 1, 0, &shared, err) ||
        gq_cfg_int(m, "num_key_value_heads", 0, 0, &kv, err) ||
        rope_real(m, "full_attention", "rope_theta", 1, 1e6, &theta, err) ||
        rope_real(m, "sliding_attention", "rope_theta", 1, 1e4, &theta_swa, err) ||
        rope_real(m, "sliding_attention", "partial_rotary_factor", 1, 1.0, &prf_swa, err) ||
        gq_cfg_real(m, "rms_norm_eps", 1, 1e-6, &eps, err) ||
        gq_cfg_real(m, "final_logit_softcapping", 1, 0, &softcap, err))
        return err->code;
    if (json_object_get(m->tc, "num_global_key_value_heads") &&
        gq_cfg_int(m, "num_global_key_value_heads", 0, 0, &kv_full, err))
        return err->code;
    if (put_u32(w, m, "block_count", "num_hidden_layers", 0, 0, err) ||
        put_u32(w, m, "context_length", "max_position_embeddings", 1, 131072, err) ||
        put_u32(w, m, "embedding_length", "hidden_size", 0, 0, err))
        return err->code;
    /* the double-wide MLP doubles the kv-shared layers' width: written per layer */
    for (long long i = 0; i < n; i++) arr[i] = (int32_t)(dw && i >= n - shared ? 2 * I : I);
    if ((dw ? gguf_write_arr(w, ak(m, k, sizeof k, "feed_forward_length"), GGUF_VT_I32, arr,
                             (uint64_t)n, err)
            : gguf_write_u32(w, ak(m, k, sizeof k, "feed_forward_length"), (uint32_t)I, err)) ||
        put_u32(w, m, "attention.head_count", "num_attention_heads", 0, 0, err))
        return err->code;
    for (long long i = 0; i < n; i++) arr[i] = (int32_t)(swa[i] || kv_full < 0 ? kv : kv_full);
    if ((kv_full >= 0 ? gguf_write_arr(w, ak(m, k, sizeof k, "attention.head_count_kv"),
                                       GGUF_VT_I32, arr, (uint64_t)n, err)
                      : gguf_write_u32(w, ak(m, k, sizeof k, "attention.head_count_kv"),
                                       (uint32_t)kv, err)) ||
        put_f32(w, m, "rope.freq_base", theta, err) ||
        put_f32(w, m, "rope.freq_base_swa", theta_swa, err) ||
        put_f32(w, m, "attention.layer_norm_rms_epsilon", eps, err) ||
        gguf_write_u32(w, ak(m, k, sizeof k, "attention.key_length"), (uint32_t)ghd, err) ||
        gguf_write_u32(w, ak(m, k, sizeof k, "attention.value_length"), (uint32_t)ghd, err) ||
        (softcap > 0 && put_f32(w, m, "final_logit_softcapping", softcap, err)) ||
        put_u32(w, m, "attention.sliding_window", "sliding_window", 0, 0, err) ||
        gguf_write_u32(w, ak(m, k, sizeof k, "attention.shared_kv_layers"), (uint32_t)shared,
                       err) ||
        put_u32(w, m, "embedding_length_per_layer_input", "hidden_size_per_layer_input", 1, 0,
                err) ||
        gguf_write_arr(w, ak(m, k, sizeof k, "attention.sliding_window_pattern"), GGUF_VT_BOOL, swa,
                       (uint64_t)n, err) ||
        gguf_write_u32(w, ak(m, k, sizeof k, "attention.key_length_swa"), (uint32_t)hd, err) ||
        gguf_write_u32(w, ak(m, k, sizeof k, "attention.value_length_swa"), (uint32_t)hd, err) ||
        /* "proportional" rope on the full layers is carried by rope_freqs (gq_rope_freqs) */
        gguf_write_u32(w, ak(m, k, sizeof k, "rope.dimension_count"), (uint32_t)ghd, err) ||
        gguf_write_u32(w, ak(m, k, sizeof k, "rope.dimension_count_swa"),
                       (uint32_t)((double)hd * prf_swa), err))
        return err->code;
    return 0;
}

int gq_rope_freqs(const gq_model *m, float *out, int max, int *n, strata_err *err) {
    *n = 0;
    if (strcmp(m->arch, "gemma4")) return 0;
    long long nl, ghd;
    uint8_t swa[GQ_MAX_LAYERS];
    double prf;
    if (gq_cfg_int(m, "num_hidden_layers", 0, 0, &nl, err)) return err->code;
    if (nl < 1 || nl > GQ_MAX_LAYERS)
        return strata_err_set(err, STRATA_ERANGE, "%s: num_hidden_layers %lld", m->cfg_path, nl);
    if (layer_flags(m, "sliding_attention", nl, swa, err) || gemma4_ghd(m, swa, nl, &ghd, err) ||
        rope_real(m, "full_attention", "partial_rotary_factor", 1, 1.0, &prf, err))
        return err->code;
    if (ghd / 2 > max || ghd < 2)
        return strata_err_set(err, STRATA_ERANGE, "%s: global head dim %lld", m->cfg_path, ghd);
    /* Gemma4Model.generate_extra_tensors: 1 for the rotated pairs, 1e30 (no rotation) after */
    long long rot = (long long)((double)ghd * prf / 2);
    for (long long i = 0; i < ghd / 2; i++) out[i] = i < rot ? 1.0f : 1e30f;
    *n = (int)(ghd / 2);
    return 0;
}

/* The layer kinds of a Nemotron-H config, as 'M' / '*' / '-' (nemotron_h.c's reading). */
static int nemotron_kinds(const gq_model *m, char *kind, long long *n, strata_err *err) {
    json_t *pat = json_object_get(m->tc, "hybrid_override_pattern");
    json_t *lbt = json_object_get(m->tc, "layers_block_type");
    if (json_is_string(pat)) {
        snprintf(kind, GQ_MAX_LAYERS, "%s", json_string_value(pat));
    } else if (json_is_array(lbt) && json_array_size(lbt) < GQ_MAX_LAYERS) {
        size_t i;
        for (i = 0; i < json_array_size(lbt); i++) {
            const char *s = json_string_value(json_array_get(lbt, i));
            kind[i] = !s                                                        ? '?'
                      : !strcmp(s, "mamba") || !strcmp(s, "linear_attention")   ? 'M'
                      : !strcmp(s, "attention") || !strcmp(s, "full_attention") ? '*'
                      : !strcmp(s, "mlp")                                       ? '-'
                                                                                : '?';
        }
        kind[i] = 0;
    } else {
        return strata_err_set(err, STRATA_EFORMAT,
                              "%s: missing field \"hybrid_override_pattern\" (or "
                              "layers_block_type)",
                              m->cfg_path);
    }
    *n = (long long)strlen(kind);
    for (long long i = 0; i < *n; i++)
        if (kind[i] != 'M' && kind[i] != '*' && kind[i] != '-')
            return strata_err_set(err, STRATA_EUNSUPPORTED,
                                  "%s: layer %lld is neither Mamba2, attention nor MLP",
                                  m->cfg_path, i);
    return *n ? 0 : strata_err_set(err, STRATA_EFORMAT, "%s: no layers", m->cfg_path);
}

static int meta_nemotron_h(gguf_write *w, const gq_model *m, strata_err *err) {
    char kind[GQ_MAX_LAYERS + 1], k[128];
    int32_t ff[GQ_MAX_LAYERS], kvh[GQ_MAX_LAYERS];
    long long n = 0, I = 0, KV = 0, D = 0, mH, mP;
    double eps;
    if (nemotron_kinds(m, kind, &n, err)) return err->code;
    int attn = strchr(kind, '*') != NULL, mlp = strchr(kind, '-') != NULL;
    if ((mlp && gq_cfg_int(m, "intermediate_size", 0, 0, &I, err)) ||
        (attn && (gq_cfg_int(m, "num_key_value_heads", 0, 0, &KV, err) ||
                  gq_cfg_int(m, "head_dim|attention_head_dim", 0, 0, &D, err))) ||
        gq_cfg_int(m, "mamba_num_heads", 0, 0, &mH, err) ||
        gq_cfg_int(m, "mamba_head_dim", 0, 0, &mP, err) ||
        gq_cfg_real(m, "layer_norm_epsilon|rms_norm_eps|norm_eps", 1, 1e-5, &eps, err))
        return err->code;
    for (long long i = 0; i < n; i++) {
        ff[i] = kind[i] == '-' ? (int32_t)I : 0;
        kvh[i] = kind[i] == '*' ? (int32_t)KV : 0;
    }
    if (gguf_write_u32(w, ak(m, k, sizeof k, "block_count"), (uint32_t)n, err) ||
        put_u32(w, m, "context_length", "max_position_embeddings", 1, 4096, err) ||
        put_u32(w, m, "embedding_length", "hidden_size", 0, 0, err) ||
        gguf_write_arr(w, ak(m, k, sizeof k, "feed_forward_length"), GGUF_VT_I32, ff, (uint64_t)n,
                       err) ||
        put_u32(w, m, "attention.head_count", "num_attention_heads", 1, 0, err) ||
        gguf_write_arr(w, ak(m, k, sizeof k, "attention.head_count_kv"), GGUF_VT_I32, kvh,
                       (uint64_t)n, err) ||
        put_f32(w, m, "attention.layer_norm_epsilon", eps, err) ||
        put_u32(w, m, "ssm.conv_kernel", "conv_kernel|mamba_d_conv", 1, 4, err) ||
        put_u32(w, m, "ssm.state_size", "ssm_state_size", 0, 0, err) ||
        put_u32(w, m, "ssm.group_count", "n_groups|mamba_n_groups|mamba_num_groups", 1, 8, err) ||
        gguf_write_u32(w, ak(m, k, sizeof k, "ssm.inner_size"), (uint32_t)(mH * mP), err) ||
        gguf_write_u32(w, ak(m, k, sizeof k, "ssm.time_step_rank"), (uint32_t)mH, err) ||
        gguf_write_bool(w, ak(m, k, sizeof k, "rope.scaling.finetuned"), 0, err))
        return err->code;
    if (attn && (gguf_write_u32(w, ak(m, k, sizeof k, "attention.key_length"), (uint32_t)D, err) ||
                 gguf_write_u32(w, ak(m, k, sizeof k, "attention.value_length"), (uint32_t)D, err)))
        return err->code;
    return 0;
}

/* llama.cpp's LLAMA_FTYPE numbers for the files we write. Q4_K files are llama-quantize's
 * Q4_K_S in spirit (every matrix Q4_K, Q4_0 where a row is not whole 256-blocks), not its
 * Q4_K_M mix of Q6_K tensors. */
uint32_t gq_file_type(dtype t) {
    switch (t) {
    case DTYPE_F16: return 1;
    case DTYPE_Q8_0: return 7;
    case DTYPE_Q4_K: return 14;
    case DTYPE_BF16: return 32;
    default: return 0;
    }
}

int gq_meta(gguf_write *w, const gq_model *m, strata_err *err) {
    /* general.name: the checkpoint directory's name, as the converter defaults it */
    char name[256];
    size_t len = strlen(m->dir);
    while (len > 1 && m->dir[len - 1] == '/') len--;
    size_t at = len;
    while (at > 0 && m->dir[at - 1] != '/') at--;
    snprintf(name, sizeof name, "%.*s", (int)(len - at), m->dir + at);
    size_t name_len = strlen(name);
    int rc = gguf_write_str(w, "general.architecture", m->arch, strlen(m->arch), err) ||
             gguf_write_str(w, "general.type", "model", 5, err) ||
             gguf_write_str(w, "general.name", name, name_len, err) ||
             gguf_write_u32(w, "general.file_type", gq_file_type(m->o->type), err) ||
             gguf_write_u32(w, "general.quantization_version", 2, err);
    if (rc) return err->code;
    if (!strcmp(m->arch, "qwen35")) return meta_qwen35(w, m, err);
    if (!strcmp(m->arch, "gemma4")) return meta_gemma4(w, m, err);
    return meta_nemotron_h(w, m, err);
}

void gq_note(const gq_model *m, const char *fmt, ...) {
    char line[512];
    va_list ap;
    if (!m->o->note) return;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    m->o->note(m->o->note_ctx, 0, line);
}
