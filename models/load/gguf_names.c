/* gguf_names.c - llama.cpp's tensor names for the Hugging Face names strata binds, per
 * architecture, with what the converter did to each tensor (docs/gguf.md, read from the
 * converter's qwen, gemma, nemotron, granite and mamba modules and checked against files
 * that converter wrote: tests/data/gguf/golden/). The tables are the only place the
 * GGUF names appear; gguf_wsrc.c undoes the transforms, the quantize command applies them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/load/gguf_model.h"

typedef struct name_rule {
    const char *hf; /* after the checkpoint prefix; a layer rule after "layers.<i>." */
    const char *gg; /* a layer rule after "blk.<i>." */
    int xf;         /* GGUF_XF_* */
    int vpart;      /* GGUF_V_* */
    int qk;         /* 'q' / 'k' with GGUF_XF_QK_PERM */
} name_rule;

typedef struct arch_names {
    const char *arch; /* general.architecture */
    const name_rule *global, *layer;
} arch_names;

#define VR GGUF_XF_VROWS
#define P1 GGUF_XF_PLUS1

/* qwen35: every norm but the gated delta rule's is stored +1 (Qwen3NextModel.modify_tensors);
 * the linear-attention V heads are tiled when Hk != Hv (_LinearAttentionVReorderBase). */
static const name_rule qwen35_global[] = {
    {"embed_tokens.weight", "token_embd.weight", 0, 0, 0},
    {"norm.weight", "output_norm.weight", P1, 0, 0},
    {"lm_head.weight", "output.weight", 0, 0, 0},
    {NULL, NULL, 0, 0, 0},
};
static const name_rule qwen35_layer[] = {
    {"input_layernorm.weight", "attn_norm.weight", P1, 0, 0},
    {"post_attention_layernorm.weight", "post_attention_norm.weight", P1, 0, 0},
    {"mlp.gate_proj.weight", "ffn_gate.weight", 0, 0, 0},
    {"mlp.up_proj.weight", "ffn_up.weight", 0, 0, 0},
    {"mlp.down_proj.weight", "ffn_down.weight", 0, 0, 0},
    {"self_attn.q_proj.weight", "attn_q.weight", 0, 0, 0},
    {"self_attn.k_proj.weight", "attn_k.weight", 0, 0, 0},
    {"self_attn.v_proj.weight", "attn_v.weight", 0, 0, 0},
    {"self_attn.o_proj.weight", "attn_output.weight", 0, 0, 0},
    {"self_attn.q_norm.weight", "attn_q_norm.weight", P1, 0, 0},
    {"self_attn.k_norm.weight", "attn_k_norm.weight", P1, 0, 0},
    {"linear_attn.in_proj_qkv.weight", "attn_qkv.weight", VR, GGUF_V_QKV, 0},
    {"linear_attn.in_proj_z.weight", "attn_gate.weight", VR, GGUF_V_Z, 0},
    {"linear_attn.in_proj_a.weight", "ssm_alpha.weight", VR, GGUF_V_HEAD1, 0},
    {"linear_attn.in_proj_b.weight", "ssm_beta.weight", VR, GGUF_V_HEAD1, 0},
    {"linear_attn.conv1d.weight", "ssm_conv1d.weight", GGUF_XF_RESHAPE | VR, GGUF_V_CONV, 0},
    {"linear_attn.A_log", "ssm_a", GGUF_XF_NEG_EXP | VR, GGUF_V_HEAD1, 0},
    {"linear_attn.dt_bias", "ssm_dt.bias", VR, GGUF_V_HEAD1, 0},
    {"linear_attn.norm.weight", "ssm_norm.weight", 0, 0, 0},
    {"linear_attn.out_proj.weight", "ssm_out.weight", GGUF_XF_VCOLS, 0, 0},
    {NULL, NULL, 0, 0, 0},
};

/* gemma4: norm_shift 0 (the weights are stored as the model reads them); layer_scalar gains
 * ".weight" (Gemma4Model.filter_tensors). rope_freqs is generated, read by gguf_config.c. */
static const name_rule gemma4_global[] = {
    {"embed_tokens.weight", "token_embd.weight", 0, 0, 0},
    {"norm.weight", "output_norm.weight", 0, 0, 0},
    {"lm_head.weight", "output.weight", 0, 0, 0},
    {"embed_tokens_per_layer.weight", "per_layer_token_embd.weight", 0, 0, 0},
    {"per_layer_model_projection.weight", "per_layer_model_proj.weight", 0, 0, 0},
    {"per_layer_projection_norm.weight", "per_layer_proj_norm.weight", 0, 0, 0},
    {NULL, NULL, 0, 0, 0},
};
static const name_rule gemma4_layer[] = {
    {"input_layernorm.weight", "attn_norm.weight", 0, 0, 0},
    {"post_attention_layernorm.weight", "post_attention_norm.weight", 0, 0, 0},
    {"pre_feedforward_layernorm.weight", "ffn_norm.weight", 0, 0, 0},
    {"post_feedforward_layernorm.weight", "post_ffw_norm.weight", 0, 0, 0},
    {"self_attn.q_proj.weight", "attn_q.weight", 0, 0, 0},
    {"self_attn.k_proj.weight", "attn_k.weight", 0, 0, 0},
    {"self_attn.v_proj.weight", "attn_v.weight", 0, 0, 0},
    {"self_attn.o_proj.weight", "attn_output.weight", 0, 0, 0},
    {"self_attn.q_norm.weight", "attn_q_norm.weight", 0, 0, 0},
    {"self_attn.k_norm.weight", "attn_k_norm.weight", 0, 0, 0},
    {"mlp.gate_proj.weight", "ffn_gate.weight", 0, 0, 0},
    {"mlp.up_proj.weight", "ffn_up.weight", 0, 0, 0},
    {"mlp.down_proj.weight", "ffn_down.weight", 0, 0, 0},
    {"per_layer_input_gate.weight", "inp_gate.weight", 0, 0, 0},
    {"per_layer_projection.weight", "proj.weight", 0, 0, 0},
    {"post_per_layer_input_norm.weight", "post_norm.weight", 0, 0, 0},
    {"layer_scalar", "layer_output_scale.weight", 0, 0, 0},
    {NULL, NULL, 0, 0, 0},
};

/* nemotron_h: Mamba2 vectors reshaped (Mamba2Model), A as -exp(A_log), the gated norm as
 * [G, I/G]; q and k rows permuted for a rope the model does not have (GraniteHybridModel's
 * undo_permute, checked on the converter's output). */
static const name_rule nemotron_h_global[] = {
    {"embeddings.weight", "token_embd.weight", 0, 0, 0},
    {"embedding.weight", "token_embd.weight", 0, 0, 0},
    {"norm_f.weight", "output_norm.weight", 0, 0, 0},
    {"lm_head.weight", "output.weight", 0, 0, 0},
    {NULL, NULL, 0, 0, 0},
};
static const name_rule nemotron_h_layer[] = {
    {"norm.weight", "attn_norm.weight", 0, 0, 0},
    {"mixer.in_proj.weight", "ssm_in.weight", 0, 0, 0},
    {"mixer.conv1d.weight", "ssm_conv1d.weight", GGUF_XF_RESHAPE, 0, 0},
    {"mixer.conv1d.bias", "ssm_conv1d.bias", 0, 0, 0},
    {"mixer.A_log", "ssm_a", GGUF_XF_NEG_EXP | GGUF_XF_RESHAPE, 0, 0},
    {"mixer.D", "ssm_d", GGUF_XF_RESHAPE, 0, 0},
    {"mixer.dt_bias", "ssm_dt.bias", 0, 0, 0},
    {"mixer.norm.weight", "ssm_norm.weight", GGUF_XF_RESHAPE, 0, 0},
    {"mixer.out_proj.weight", "ssm_out.weight", 0, 0, 0},
    {"mixer.q_proj.weight", "attn_q.weight", GGUF_XF_QK_PERM, 0, 'q'},
    {"mixer.k_proj.weight", "attn_k.weight", GGUF_XF_QK_PERM, 0, 'k'},
    {"mixer.v_proj.weight", "attn_v.weight", 0, 0, 0},
    {"mixer.o_proj.weight", "attn_output.weight", 0, 0, 0},
    {"mixer.up_proj.weight", "ffn_up.weight", 0, 0, 0},
    {"mixer.down_proj.weight", "ffn_down.weight", 0, 0, 0},
    {NULL, NULL, 0, 0, 0},
};

static const arch_names names_table[] = {
    {"qwen35", qwen35_global, qwen35_layer},
    {"gemma4", gemma4_global, gemma4_layer},
    {"nemotron_h", nemotron_h_global, nemotron_h_layer},
};

/* The checkpoint layouts' prefixes, longest first: the GGUF names are the same for all. */
static const char *const hf_prefixes[] = {"model.language_model.", "model.", "backbone."};

static int names_fill(gguf_name *out, const name_rule *r, int layer) {
    if (layer < 0) snprintf(out->gg, sizeof out->gg, "%s", r->gg);
    else snprintf(out->gg, sizeof out->gg, "blk.%d.%s", layer, r->gg);
    out->xf = r->xf;
    out->vpart = r->vpart;
    out->qk = r->qk;
    return 0;
}

int gguf_names_find(const char *arch, const char *hf, gguf_name *out) {
    const arch_names *an = NULL;
    for (size_t i = 0; i < sizeof names_table / sizeof names_table[0]; i++)
        if (!strcmp(names_table[i].arch, arch)) an = &names_table[i];
    if (!an) return STRATA_ENOTFOUND;
    if (strcmp(hf, "lm_head.weight"))
        for (size_t i = 0; i < sizeof hf_prefixes / sizeof hf_prefixes[0]; i++) {
            size_t n = strlen(hf_prefixes[i]);
            if (!strncmp(hf, hf_prefixes[i], n)) {
                hf += n;
                break;
            }
        }
    if (!strncmp(hf, "layers.", 7)) {
        char *end;
        long layer = strtol(hf + 7, &end, 10);
        if (end == hf + 7 || *end != '.' || layer < 0 || layer > 100000) return STRATA_ENOTFOUND;
        for (const name_rule *r = an->layer; r->hf; r++)
            if (!strcmp(end + 1, r->hf)) return names_fill(out, r, (int)layer);
        return STRATA_ENOTFOUND;
    }
    for (const name_rule *r = an->global; r->hf; r++)
        if (!strcmp(hf, r->hf)) return names_fill(out, r, -1);
    return STRATA_ENOTFOUND;
}
