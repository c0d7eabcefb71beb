#!/usr/bin/env python3
"""gguf_shapes.py - GGUF files of the real shapes with random weights, for the llama.cpp peer.

    python3 tools/gguf_shapes.py [--out DIR] [--type bf16|q8_0 ...] [MODEL ...]

MODEL is a name from strata's presets (tools/gen_presets.py, the same table that
models/presets.c is generated from, so both systems run the very same shapes):
Qwen/Qwen3.5-0.8B, Qwen/Qwen3.5-2B, google/gemma-4-E2B-it,
nvidia/NVIDIA-Nemotron-3-Nano-4B-BF16 by default (also Qwen3.5-4B / -9B, gemma-4-E4B-it).
A name may be given without its organisation. Writes DIR/<short name>-<type>.gguf
(default DIR: /work/llama/gguf, outside the repository; nothing here is committed).

What is written is what llama.cpp's own converter (convert_hf_to_gguf.py, conversion/qwen.py,
gemma.py, nemotron.py, granite.py, mamba.py) writes for these checkpoints and what its loader
(src/llama-arch.cpp, src/models/{qwen35,gemma4,nemotron-h}.cpp) reads: the same metadata keys
and value types, the same tensor names, shapes and storage types (1-D tensors, norms,
ssm_conv1d and the tensors without a ".weight" suffix in F32, every other matrix in BF16
or Q8_0, as the converter's --outtype bf16 / q8_0 does). MTP blocks, vision and audio
towers are left out: neither system runs them in a text decode. docs/gguf.md has the
name mapping.

The weights are random (matrices N(0, 0.02), norms about 1, Mamba / gated-delta A
negative, dt biases of a real model's range): speed does not depend on the values. To
write gigabytes fast, each matrix is cut from a pool of random values at random offsets:
a 64 MiB pool of bf16, or for Q8_0 a pool of blocks quantized by the gguf package's own
Q8_0 quantizer (gguf.quants.quantize). The tokenizer is a minimal valid one of the
model's vocabulary size (the embedding rows): byte-level BPE ("gpt2", with merges) for
Qwen3.5 and Nemotron-H, Gemma 4's "gemma4" BPE (merges, scores, <0xXX> byte tokens),
with the real models' special-token ids; llama-bench feeds random token ids.
"""
import argparse
import os
import sys
import time

import numpy as np

import gguf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_presets import PRESETS  # noqa: E402  (the shapes strata's presets are made from)
from byte_level import byte_symbols  # noqa: E402

DEFAULT_MODELS = ["Qwen/Qwen3.5-0.8B", "Qwen/Qwen3.5-2B", "google/gemma-4-E2B-it",
                  "nvidia/NVIDIA-Nemotron-3-Nano-4B-BF16"]
QT = gguf.GGMLQuantizationType


# ---------------------------------------------------------------------------------------
# Plans: (arch, metadata, tensors, vocabulary size). The metadata maps each key's suffix
# after "<arch>." to its value, in the file's order; the value's Python type is the GGUF
# type (bool, int: u32, float: f32, list: array).
# Tensors: (name, shape outermost first as in safetensors / numpy, kind).
# kind "w" is a matrix stored in the file's type; every other kind is F32.

def qwen35_plan(c):
    t = c["text_config"]
    d, ff, L = t["hidden_size"], t["intermediate_size"], t["num_hidden_layers"]
    H, KV, hd = t["num_attention_heads"], t["num_key_value_heads"], t["head_dim"]
    Hk, Hv = t["linear_num_key_heads"], t["linear_num_value_heads"]
    dk, dv, K = t["linear_key_head_dim"], t["linear_value_head_dim"], t["linear_conv_kernel_dim"]
    V = t["vocab_size"]
    interval = t.get("full_attention_interval", 4)
    recurrent = [lt == "linear_attention" for lt in t["layer_types"]]
    rp = t["rope_parameters"]
    a = "qwen35"
    kv = {
        "block_count": L, "context_length": t["max_position_embeddings"],
        "embedding_length": d, "feed_forward_length": ff,
        "attention.head_count": H, "attention.head_count_kv": KV,
        "rope.dimension_sections": (rp["mrope_section"] + [0])[:4],
        "rope.freq_base": float(rp["rope_theta"]),
        "attention.layer_norm_rms_epsilon": t["rms_norm_eps"],
        "attention.key_length": hd, "attention.value_length": hd,
        "ssm.conv_kernel": K, "ssm.state_size": dk, "ssm.group_count": Hk,
        "ssm.time_step_rank": Hv, "ssm.inner_size": dv * Hv,
        "attention.recurrent_layers": recurrent, "full_attention_interval": interval,
        "rope.dimension_count": int(hd * rp.get("partial_rotary_factor", 0.25)),
    }
    ts = [("token_embd.weight", (V, d), "w"), ("output_norm.weight", (d,), "norm")]
    if not c.get("tie_word_embeddings", t.get("tie_word_embeddings", False)):
        ts.append(("output.weight", (V, d), "w"))
    key_dim, value_dim = dk * Hk, dv * Hv
    for i in range(L):
        b = f"blk.{i}."
        ts += [(b + "attn_norm.weight", (d,), "norm"),
               (b + "post_attention_norm.weight", (d,), "norm")]
        if recurrent[i]:
            ts += [(b + "attn_qkv.weight", (2 * key_dim + value_dim, d), "w"),
                   (b + "attn_gate.weight", (value_dim, d), "w"),
                   (b + "ssm_conv1d.weight", (2 * key_dim + value_dim, K), "conv"),
                   (b + "ssm_dt.bias", (Hv,), "dt_bias"),
                   (b + "ssm_a", (Hv,), "ssm_a"),
                   (b + "ssm_beta.weight", (Hv, d), "w"),
                   (b + "ssm_alpha.weight", (Hv, d), "w"),
                   (b + "ssm_norm.weight", (dv,), "norm"),
                   (b + "ssm_out.weight", (d, value_dim), "w")]
        else:
            ts += [(b + "attn_q.weight", (2 * H * hd, d), "w"),  # q with its gate rows
                   (b + "attn_k.weight", (KV * hd, d), "w"),
                   (b + "attn_v.weight", (KV * hd, d), "w"),
                   (b + "attn_output.weight", (d, H * hd), "w"),
                   (b + "attn_q_norm.weight", (hd,), "norm"),
                   (b + "attn_k_norm.weight", (hd,), "norm")]
        ts += [(b + "ffn_gate.weight", (ff, d), "w"),
               (b + "ffn_up.weight", (ff, d), "w"),
               (b + "ffn_down.weight", (d, ff), "w")]
    return a, kv, ts, V


def gemma4_plan(c):
    t = c["text_config"]
    d, ff, L = t["hidden_size"], t["intermediate_size"], t["num_hidden_layers"]
    H, KV = t["num_attention_heads"], t["num_key_value_heads"]
    hd_swa, hd_full = t["head_dim"], t["global_head_dim"]
    V, ple = t["vocab_size"], t.get("hidden_size_per_layer_input") or 0
    shared = t["num_kv_shared_layers"]
    swa = [lt == "sliding_attention" for lt in t["layer_types"]]
    rp = t["rope_parameters"]
    first_shared = L - shared
    ff_arr = [ff if (i < first_shared or not t.get("use_double_wide_mlp")) else 2 * ff
              for i in range(L)]
    kv_full = t.get("num_global_key_value_heads")
    a = "gemma4"
    kv = {
        "block_count": L, "context_length": t["max_position_embeddings"], "embedding_length": d,
        # per layer (an array) where the kv-shared layers have a double-wide MLP
        "feed_forward_length": ff_arr if t.get("use_double_wide_mlp") else ff,
        "attention.head_count": H,
        # per layer where the full layers have their own kv head count
        "attention.head_count_kv": KV if kv_full is None else [KV if s else kv_full for s in swa],
        "rope.freq_base": float(rp["full_attention"]["rope_theta"]),
        "rope.freq_base_swa": float(rp["sliding_attention"]["rope_theta"]),
        "attention.layer_norm_rms_epsilon": t["rms_norm_eps"],
        "final_logit_softcapping": float(t["final_logit_softcapping"]),
        "attention.sliding_window": t["sliding_window"], "attention.shared_kv_layers": shared,
        "embedding_length_per_layer_input": ple, "attention.sliding_window_pattern": swa,
        "attention.key_length": hd_full, "attention.value_length": hd_full,
        "attention.key_length_swa": hd_swa, "attention.value_length_swa": hd_swa,
        "rope.dimension_count": hd_full,  # "proportional": see rope_freqs
        "rope.dimension_count_swa":
            int(hd_swa * rp["sliding_attention"].get("partial_rotary_factor", 1.0)),
    }
    # rope_freqs: 1 for the rotated pairs of the full layers, 1e30 (no rotation) for the rest
    n_rot = int(hd_full * rp["full_attention"]["partial_rotary_factor"] / 2)
    rope = np.array([1.0] * n_rot + [1e30] * (hd_full // 2 - n_rot), dtype=np.float32)
    ts = [("token_embd.weight", (V, d), "w")]
    if ple:
        ts += [("per_layer_token_embd.weight", (t["vocab_size_per_layer_input"], L * ple), "w"),
               ("per_layer_model_proj.weight", (L * ple, d), "w"),
               ("per_layer_proj_norm.weight", (ple,), "norm")]
    ts += [("output_norm.weight", (d,), "norm"), ("rope_freqs.weight", rope, "const")]
    for i in range(L):
        b, hd = f"blk.{i}.", hd_swa if swa[i] else hd_full
        kvh = KV if (swa[i] or kv_full is None) else kv_full
        # kv-shared layers keep their (unused) k/v projections, as the checkpoint does
        ts += [(b + "attn_norm.weight", (d,), "norm"),
               (b + "attn_q.weight", (H * hd, d), "w"),
               (b + "attn_k.weight", (kvh * hd, d), "w"),
               (b + "attn_v.weight", (kvh * hd, d), "w"),
               (b + "attn_output.weight", (d, H * hd), "w"),
               (b + "attn_q_norm.weight", (hd,), "norm"),
               (b + "attn_k_norm.weight", (hd,), "norm"),
               (b + "post_attention_norm.weight", (d,), "norm"),
               (b + "layer_output_scale.weight", (1,), "ones"),
               (b + "ffn_norm.weight", (d,), "norm"),
               (b + "ffn_gate.weight", (ff_arr[i], d), "w"),
               (b + "ffn_up.weight", (ff_arr[i], d), "w"),
               (b + "ffn_down.weight", (d, ff_arr[i]), "w"),
               (b + "post_ffw_norm.weight", (d,), "norm")]
        if ple:
            ts += [(b + "inp_gate.weight", (ple, d), "w"),
                   (b + "proj.weight", (d, ple), "w"),
                   (b + "post_norm.weight", (d,), "norm")]
    return a, kv, ts, V


def nemotron_h_plan(c):
    d, L, V = c["hidden_size"], c["num_hidden_layers"], c["vocab_size"]
    pat = c["hybrid_override_pattern"]
    assert len(pat) == L
    H, KV, hd, ff = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"], \
        c["intermediate_size"]
    mH, mhd, G, N, K = c["mamba_num_heads"], c["mamba_head_dim"], c["n_groups"], \
        c["ssm_state_size"], c["conv_kernel"]
    d_inner = mH * mhd
    conv_dim = d_inner + 2 * G * N
    a = "nemotron_h"
    kv = {
        # GraniteHybrid's converter: no rope on the attention layers, so an arbitrary 2^20
        "block_count": L, "context_length": 2 ** 20, "embedding_length": d,
        "feed_forward_length": [ff if p == "-" else 0 for p in pat],
        "attention.head_count": H, "attention.head_count_kv": [KV if p == "*" else 0 for p in pat],
        "attention.key_length": hd, "attention.value_length": hd,
        "attention.layer_norm_epsilon": c["layer_norm_epsilon"], "rope.scaling.finetuned": False,
        "ssm.conv_kernel": K, "ssm.state_size": N, "ssm.group_count": G,
        "ssm.inner_size": d_inner, "ssm.time_step_rank": mH,
    }
    ts = [("token_embd.weight", (V, d), "w"), ("output_norm.weight", (d,), "norm")]
    if not c.get("tie_word_embeddings"):
        ts.append(("output.weight", (V, d), "w"))
    for i, p in enumerate(pat):
        b = f"blk.{i}."
        ts.append((b + "attn_norm.weight", (d,), "norm"))
        if p == "M":
            ts += [(b + "ssm_in.weight", (2 * d_inner + 2 * G * N + mH, d), "w"),
                   (b + "ssm_conv1d.weight", (conv_dim, K), "conv"),
                   (b + "ssm_conv1d.bias", (conv_dim,), "small"),
                   (b + "ssm_dt.bias", (mH,), "dt_bias"),
                   (b + "ssm_a", (mH, 1), "ssm_a"),
                   (b + "ssm_d", (mH, 1), "ones"),
                   (b + "ssm_norm.weight", (G, d_inner // G), "norm"),
                   (b + "ssm_out.weight", (d, d_inner), "w")]
        elif p == "*":
            ts += [(b + "attn_q.weight", (H * hd, d), "w"),
                   (b + "attn_k.weight", (KV * hd, d), "w"),
                   (b + "attn_v.weight", (KV * hd, d), "w"),
                   (b + "attn_output.weight", (d, H * hd), "w")]
        elif p == "-":
            ts += [(b + "ffn_up.weight", (ff, d), "w"),
                   (b + "ffn_down.weight", (d, ff), "w")]
        else:
            raise ValueError(f"layer {i}: unknown pattern character {p!r}")
    return a, kv, ts, V


PLANS = {"qwen3_5": qwen35_plan, "gemma4": gemma4_plan, "nemotron_h": nemotron_h_plan}


# ---------------------------------------------------------------------------------------
# Tokenizers: minimal, valid, of the vocabulary size; special ids as in the real models.

def grow_merges(tokens, alphabet, n_new):
    """Appends n_new tokens c + t (c from alphabet, t an earlier token), each with its
    merge "c t": every new string is unique (its first character and rest determine it)
    and both halves precede it, so the merges are a valid BPE rank list."""
    seen = set(tokens)
    merges, out, j = [], [], 0
    pool = list(alphabet)
    while len(out) < n_new:
        t = pool[j]
        j += 1
        for ch in alphabet:
            s = ch + t
            if s in seen:
                continue
            seen.add(s)
            out.append(s)
            merges.append(f"{ch} {t}")
            pool.append(s)
            if len(out) == n_new:
                break
    return out, merges


def vocab_gpt2(n_vocab, specials, bytes_at, pre, bos, eos, pad):
    """specials: {id: text}; the 256 byte-level characters at ids bytes_at..bytes_at+255."""
    NORMAL, CONTROL = gguf.TokenType.NORMAL, gguf.TokenType.CONTROL
    btu = byte_symbols()
    alphabet = [btu[b] for b in b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 \n"]
    fixed = dict(specials)
    for b in range(256):
        fixed[bytes_at + b] = btu[b]
    n_free = n_vocab - len(fixed)
    grown, merges = grow_merges(list(fixed.values()), alphabet, n_free)
    tokens, types, g = [], [], iter(grown)
    for i in range(n_vocab):
        if i in fixed:
            tokens.append(fixed[i])
            types.append(CONTROL if i in specials else NORMAL)
        else:
            tokens.append(next(g))
            types.append(NORMAL)
    return {"model": "gpt2", "pre": pre, "tokens": tokens, "types": types, "merges": merges,
            "bos": bos, "eos": eos, "pad": pad}


def vocab_gemma4(n_vocab):
    """Gemma 4's layout: <pad> 0, <eos> 1, <bos> 2, <unk> 3, control tokens, <0xXX> bytes,
    then BPE pieces over characters with '▁' for the space."""
    CONTROL, BYTE, NORMAL = gguf.TokenType.CONTROL, gguf.TokenType.BYTE, gguf.TokenType.NORMAL
    specials = {0: "<pad>", 1: "<eos>", 2: "<bos>", 3: "<unk>", 105: "<|turn>", 106: "<turn|>"}
    for i in range(4, 238):
        specials.setdefault(i, f"<unused{i}>")
    tokens, types = [], []
    for i in range(238):
        tokens.append(specials[i])
        types.append(gguf.TokenType.UNKNOWN if i == 3 else CONTROL)
    for b in range(256):
        tokens.append(f"<0x{b:02X}>")
        types.append(BYTE)
    alphabet = list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789\n") + ["▁"]
    tokens += alphabet
    types += [NORMAL] * len(alphabet)
    grown, merges = grow_merges(tokens, alphabet, n_vocab - len(tokens))
    tokens += grown
    types += [NORMAL] * len(grown)
    return {"model": "gemma4", "pre": None, "tokens": tokens, "types": types, "merges": merges,
            "scores": [-float(i) for i in range(n_vocab)], "bos": 2, "eos": 1, "pad": 0,
            "add_bos": True}


def vocab_for(arch, n_vocab):
    if arch == "qwen35":  # <|endoftext|> 248044, <|im_start|> 248045, <|im_end|> 248046
        sp = {248044 + k: f"<|special_{k}|>" for k in range(33) if 248044 + k < n_vocab}
        sp.update({248044: "<|endoftext|>", 248045: "<|im_start|>", 248046: "<|im_end|>"})
        for i in range(248077, n_vocab):  # the embedding rows past the tokenizer: padding
            sp[i] = f"[PAD{i}]"
        v = vocab_gpt2(n_vocab, sp, 0, "qwen35", None, 248046, 248044)
        for i in range(248077, n_vocab):
            v["types"][i] = gguf.TokenType.UNUSED
        return v
    if arch == "nemotron_h":  # Tekken layout: ids < 1000 special, byte b is id 1000 + b
        sp = {i: f"<SPECIAL_{i}>" for i in range(1000)}
        sp.update({0: "<unk>", 1: "<s>", 2: "</s>", 10: "<|im_start|>", 11: "<|im_end|>"})
        return vocab_gpt2(n_vocab, sp, 1000, "tekken", 1, 11, 0)
    if arch == "gemma4":
        return vocab_gemma4(n_vocab)
    raise ValueError(arch)


# ---------------------------------------------------------------------------------------
# Writing

def f32_values(kind, shape, rng):
    n = int(np.prod(shape))
    if kind == "norm":
        v = 1.0 + 0.01 * rng.standard_normal(n)
    elif kind == "ones":
        v = np.ones(n)
    elif kind == "conv":
        v = 0.2 * rng.standard_normal(n)
    elif kind == "small":
        v = 0.02 * rng.standard_normal(n)
    elif kind == "ssm_a":  # -exp(A_log), A_log = log(U[1, 16])
        v = -rng.uniform(1.0, 16.0, n)
    elif kind == "dt_bias":  # softplus^-1 of dt in [0.001, 0.1]
        dt = np.exp(rng.uniform(np.log(1e-3), np.log(1e-1), n))
        v = dt + np.log(-np.expm1(-dt))
    elif kind == "w":
        v = 0.02 * rng.standard_normal(n)
    else:
        raise ValueError(kind)
    return v.astype(np.float32).reshape(shape)


class Pool:
    """Random bytes of one storage type, cut at random element / block offsets."""

    def __init__(self, qtype, rng, n_elems=1 << 25):
        x = (0.02 * rng.standard_normal(n_elems, dtype=np.float32))
        if qtype == QT.BF16:
            u = x.view(np.uint32)  # round to nearest even, as torch does
            u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
            self.data = u.astype(np.uint16).view(np.uint8)
            self.unit = 2
        elif qtype == QT.Q8_0:
            self.data = gguf.quants.quantize(x.reshape(-1, 4096), QT.Q8_0).reshape(-1)
            self.unit = 34  # one block: f16 scale + 32 int8
        else:
            raise ValueError(qtype)
        self.rng = rng

    def write(self, f, nbytes):
        n_units = len(self.data) // self.unit
        while nbytes > 0:
            start = int(self.rng.integers(0, n_units)) * self.unit
            take = min(nbytes, len(self.data) - start)
            f.write(self.data[start:start + take].tobytes())
            nbytes -= take


def nbytes_of(qtype, shape):
    n = int(np.prod(shape))
    if qtype == QT.F32:
        return 4 * n
    if qtype == QT.BF16:
        return 2 * n
    if qtype == QT.Q8_0:
        assert shape[-1] % 32 == 0, shape
        return n // 32 * 34
    raise ValueError(qtype)


def write_model(preset, cfg, qtype, path, seed):
    t0 = time.time()
    model_type = cfg["model_type"]
    arch, kvs, plan, n_vocab = PLANS[model_type](cfg)
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(path, arch)
    w.add_name(preset.split("/")[-1] + " (random weights, real shapes)")
    w.add_file_type(gguf.LlamaFileType.MOSTLY_BF16 if qtype == QT.BF16
                    else gguf.LlamaFileType.MOSTLY_Q8_0)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    for suffix, val in kvs.items():  # the value's Python type is the GGUF type
        key = f"{arch}.{suffix}"
        if isinstance(val, bool):
            w.add_bool(key, val)
        elif isinstance(val, int):
            w.add_uint32(key, val)
        elif isinstance(val, float):
            w.add_float32(key, val)
        else:
            w.add_array(key, list(val))
    v = vocab_for(arch, n_vocab)
    assert len(v["tokens"]) == n_vocab and len(set(v["tokens"])) == n_vocab
    w.add_tokenizer_model(v["model"])
    if v["pre"]:
        w.add_tokenizer_pre(v["pre"])
    w.add_token_list(v["tokens"])
    w.add_token_types([int(x) for x in v["types"]])
    if "scores" in v:
        w.add_token_scores(v["scores"])
    w.add_token_merges(v["merges"])
    if v.get("bos") is not None:
        w.add_bos_token_id(v["bos"])
    w.add_eos_token_id(v["eos"])
    w.add_pad_token_id(v["pad"])
    w.add_add_bos_token(bool(v.get("add_bos", False)))

    entries = []
    for name, shape_or_data, kind in plan:
        if kind == "const":
            data = shape_or_data
            entries.append((name, data.shape, QT.F32, data))
            continue
        shape = tuple(shape_or_data)
        tq = qtype if kind == "w" else QT.F32
        entries.append((name, shape, tq, None if kind == "w" else f32_values(kind, shape, rng)))
    for name, shape, tq, data in entries:
        # element shape (not uint8 bytes), so the writer records ggml's ne as is
        w.add_tensor_info(name, shape, np.dtype(np.float32), nbytes_of(tq, shape), raw_dtype=tq)
    w.write_header_to_file(path)
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    f = w.fout[0]
    pool = Pool(qtype, rng)
    total = 0
    for name, shape, tq, data in entries:
        nb = nbytes_of(tq, shape)
        w.write_padding(f, f.tell())
        if data is not None:
            assert data.nbytes == nb
            f.write(data.tobytes())
        else:
            pool.write(f, nb)
        w.write_padding(f, nb)
        total += nb
    w.close()
    n_params = sum(int(np.prod(s)) for _, s, _, _ in entries)
    return (f"{arch}, {len(entries)} tensors, {n_params / 1e9:.3f} B parameters, "
            f"{total / 1e9:.2f} GB of tensor data, vocab {n_vocab}, {time.time() - t0:.0f} s")


def resolve(name):
    for k in PRESETS:
        if name.lower() in (k.lower(), k.split("/")[-1].lower()):
            return k
    raise SystemExit(f"gguf_shapes: unknown model {name!r}; known: {', '.join(PRESETS)}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="*", help="preset names (default: the four of the peer run)")
    ap.add_argument("--out", default="/work/llama/gguf", help="output directory")
    ap.add_argument("--type", action="append", choices=["bf16", "q8_0"],
                    help="storage type of the matrices (repeatable; default bf16)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--force", action="store_true", help="rewrite files that exist")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for m in (args.models or DEFAULT_MODELS):
        preset = resolve(m)
        for ty in (args.type or ["bf16"]):
            path = os.path.join(args.out, f"{preset.split('/')[-1]}-{ty}.gguf")
            if os.path.exists(path) and not args.force:
                print(f"{path}: exists (--force rewrites it)")
                continue
            info = write_model(preset, PRESETS[preset], QT.BF16 if ty == "bf16" else QT.Q8_0,
                               path + ".tmp", args.seed)
            os.replace(path + ".tmp", path)
            print(f"{path}: {info}", flush=True)


if __name__ == "__main__":
    main()
