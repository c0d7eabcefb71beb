#!/usr/bin/env python3
"""Writes models/presets.c: the config.json of each real checkpoint strata knows by name,
so `--load-format dummy --model Qwen/Qwen3.5-2B` builds weights of the real shapes.
Shapes come from shared/spec (qwen35.md §1-2, gemma4.md §1, nemotron_h.md §2)."""
import json, sys

def q35(h, I, L, H, KV, Hv, tied):
    lt = ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(L)]
    tc = {"model_type": "qwen3_5_text", "attention_bias": False, "attention_dropout": 0.0,
          "attn_output_gate": True, "dtype": "bfloat16", "eos_token_id": 248044,
          "full_attention_interval": 4, "head_dim": 256, "hidden_act": "silu", "hidden_size": h,
          "initializer_range": 0.02, "intermediate_size": I, "layer_types": lt,
          "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_num_key_heads": 16,
          "linear_num_value_heads": Hv, "linear_value_head_dim": 128,
          "max_position_embeddings": 262144, "mlp_only_layers": [], "mtp_num_hidden_layers": 1,
          "mtp_use_dedicated_embeddings": False, "num_attention_heads": H, "num_hidden_layers": L,
          "num_key_value_heads": KV, "rms_norm_eps": 1e-06, "tie_word_embeddings": tied,
          "use_cache": True, "vocab_size": 248320, "mamba_ssm_dtype": "float32",
          "rope_parameters": {"mrope_interleaved": True, "mrope_section": [11, 11, 10],
                              "rope_type": "default", "rope_theta": 10000000,
                              "partial_rotary_factor": 0.25}}
    return {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
            "tie_word_embeddings": tied, "text_config": tc}

def gemma4(h, L, I, KV, shared, every, double_wide):
    # gemma4.md §1.2: a full-attention layer every `every` layers, the rest sliding.
    lt = ["full_attention" if (i + 1) % every == 0 else "sliding_attention" for i in range(L)]
    tc = {"model_type": "gemma4_text", "attention_bias": False, "attention_dropout": 0.0,
          "attention_k_eq_v": False, "bos_token_id": 2, "dtype": "bfloat16",
          "enable_moe_block": False, "eos_token_id": 1, "final_logit_softcapping": 30.0,
          "global_head_dim": 512, "head_dim": 256, "hidden_activation": "gelu_pytorch_tanh",
          "hidden_size": h, "hidden_size_per_layer_input": 256, "initializer_range": 0.02,
          "intermediate_size": I, "layer_types": lt, "max_position_embeddings": 131072,
          "moe_intermediate_size": None, "num_attention_heads": 8, "num_experts": None,
          "num_global_key_value_heads": None, "num_hidden_layers": L, "num_key_value_heads": KV,
          "num_kv_shared_layers": shared, "pad_token_id": 0, "rms_norm_eps": 1e-06,
          "rope_parameters": {
              "full_attention": {"partial_rotary_factor": 0.25, "rope_theta": 1000000.0,
                                 "rope_type": "proportional"},
              "sliding_attention": {"rope_theta": 10000.0, "rope_type": "default"}},
          "sliding_window": 512, "tie_word_embeddings": True, "top_k_experts": None,
          "use_bidirectional_attention": None, "use_cache": True,
          "use_double_wide_mlp": double_wide, "vocab_size": 262144,
          "vocab_size_per_layer_input": 262144}
    return {"architectures": ["Gemma4ForConditionalGeneration"], "model_type": "gemma4",
            "tie_word_embeddings": True, "eos_token_id": [1, 106], "text_config": tc}

# nemotron_h.md §2.1: the hub config.json fields (the hub spelling of the pattern).
NEMOTRON_3_NANO_4B = {
    "architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h",
    "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": 1, "chunk_size": 256,
    "conv_kernel": 4, "eos_token_id": 2, "expand": 2, "head_dim": 128, "hidden_dropout": 0.0,
    "hidden_size": 3136, "hybrid_override_pattern": "M-M-M-MM-M-M*-M-M*-M-M-M*-M-M-MM*-MMM-M-M-",
    "initializer_range": 0.02, "intermediate_size": 12544, "layer_norm_epsilon": 1e-05,
    "mamba_head_dim": 80, "mamba_hidden_act": "silu", "mamba_num_heads": 96,
    "mamba_proj_bias": False, "max_position_embeddings": 262144, "mlp_bias": False,
    "mlp_hidden_act": "relu2", "n_groups": 8, "num_attention_heads": 40, "num_hidden_layers": 42,
    "num_key_value_heads": 8, "num_logits_to_keep": 1, "pad_token_id": 0,
    "rescale_prenorm_residual": True, "residual_in_fp32": False, "sliding_window": None,
    "ssm_state_size": 128, "tie_word_embeddings": False, "time_step_floor": 0.0001,
    "time_step_max": 0.1, "time_step_min": 0.001, "torch_dtype": "bfloat16", "use_bias": False,
    "use_cache": True, "use_conv_bias": True, "use_mamba_kernels": True, "vocab_size": 131072}

PRESETS = {
    "Qwen/Qwen3.5-0.8B": q35(1024, 3584, 24, 8, 2, 16, True),
    "Qwen/Qwen3.5-2B": q35(2048, 6144, 24, 8, 2, 16, True),
    "Qwen/Qwen3.5-4B": q35(2560, 9216, 32, 16, 4, 32, True),
    "Qwen/Qwen3.5-9B": q35(4096, 12288, 32, 16, 4, 32, False),
    "google/gemma-4-E2B-it": gemma4(1536, 35, 6144, 1, 20, 5, True),
    "google/gemma-4-E4B-it": gemma4(2560, 42, 10240, 2, 18, 6, False),
    "nvidia/NVIDIA-Nemotron-3-Nano-4B-BF16": NEMOTRON_3_NANO_4B,
}

def c_string(s):
    return '"' + s.replace('\\', '\\\\').replace('"', '\\"') + '"'

def main():
    out = ['/* presets.c - config.json of real checkpoints, for --load-format dummy.',
           ' * Generated by tools/gen_presets.py from shared/spec; shapes, not weights. */',
           '#include <stdio.h>', '#include <string.h>', '#include <strings.h>', '',
           '#include "models/arch.h"', '', 'static const struct {', '    const char *name;',
           '    const char *config;', '} presets[] = {']
    for name, cfg in PRESETS.items():
        s = json.dumps(cfg, separators=(',', ':'))
        chunks = [s[i:i + 80] for i in range(0, len(s), 80)]
        out.append('    {"%s",' % name)
        out += ['     %s' % c_string(c) for c in chunks[:-1]]
        out.append('     %s},' % c_string(chunks[-1]))
    out += ['};', '',
            'const char *arch_preset_config(const char *name) {',
            '    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {',
            '        /* "Qwen3.5-0.8B" works as well as "Qwen/Qwen3.5-0.8B", in any case. */',
            '        const char *n = presets[i].name, *slash = strchr(n, \'/\');',
            '        if (!strcasecmp(name, n) || (slash && !strcasecmp(name, slash + 1)))',
            '            return presets[i].config;',
            '    }',
            '    return NULL;',
            '}', '',
            'void arch_preset_names(char *buf, size_t len) {',
            '    size_t used = 0;',
            '    if (len) buf[0] = 0;',
            '    for (size_t i = 0; i < sizeof presets / sizeof presets[0] && used < len; i++)',
            '        used += (size_t)snprintf(buf + used, len - used, "%s%s", i ? ", " : "",',
            '                                 presets[i].name);',
            '}']
    open(sys.argv[1] if len(sys.argv) > 1 else 'models/presets.c', 'w').write('\n'.join(out) + '\n')

if __name__ == '__main__':
    main()
