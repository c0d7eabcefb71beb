"""qwen35_tiny.py - the text_config of a tiny Qwen3.5 checkpoint, for the demo model
(tools/demo/train_demo.py) and the golden fixtures (tools/goldens/make_goldens.py).

What the two share is fixed here: 4 query and 2 kv heads, 2 key and 4 value heads in the
gated-delta layers, a conv kernel of 4, tied embeddings, no bos or pad token and the
real model's rope (theta 1e7, a quarter of each head rotated, interleaved mrope). The
keys keep the order the two scripts have always written them in.
"""


def qwen35_text_config(*, vocab, hidden, ff, layers, interval, head_dim, linear_head_dims,
                       max_positions, eos, mrope_section, dtype=None):
    """Every interval-th layer (counting from 1) is full attention, the rest linear;
    linear_head_dims: (key, value) head dims of the linear layers; dtype, when given,
    is written before rope_parameters."""
    key_dim, value_dim = linear_head_dims
    c = {
        "model_type": "qwen3_5_text",
        "vocab_size": vocab, "hidden_size": hidden, "intermediate_size": ff,
        "num_hidden_layers": layers,
        "layer_types": ["full_attention" if (i + 1) % interval == 0 else "linear_attention"
                        for i in range(layers)],
        "full_attention_interval": interval,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": head_dim,
        "linear_num_key_heads": 2, "linear_num_value_heads": 4,
        "linear_key_head_dim": key_dim, "linear_value_head_dim": value_dim,
        "linear_conv_kernel_dim": 4,
        "hidden_act": "silu", "rms_norm_eps": 1e-06,
        "max_position_embeddings": max_positions, "initializer_range": 0.02,
        "attention_bias": False, "attention_dropout": 0.0,
        "tie_word_embeddings": True, "use_cache": True,
        "bos_token_id": None, "eos_token_id": eos, "pad_token_id": None,
    }
    if dtype is not None:
        c["dtype"] = dtype
    c["rope_parameters"] = {"rope_type": "default", "rope_theta": 10000000.0,
                            "partial_rotary_factor": 0.25,
                            "mrope_section": list(mrope_section), "mrope_interleaved": True}
    return c
