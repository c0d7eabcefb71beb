#!/usr/bin/env python3
"""gguf_from_golden.py - a golden checkpoint (tests/golden/<name>) as a GGUF file written by
llama.cpp's OWN converter, so the GGUF loader's name and transform mapping is tested against
the real converter rather than against our reading of it (docs/gguf.md).

    python3 tools/gguf_from_golden.py LLAMA_CPP_DIR FIXTURE_DIR OUT.gguf [--outtype f32|bf16|q8_0]

LLAMA_CPP_DIR is a llama.cpp source tree (convert_hf_to_gguf.py, conversion/, gguf-py/), for
example the one vendored in the llama-cpp-python sdist; it is imported, never copied. The
converter needs torch and transformers (run with a Python that has them). Run by hand, not in
CI: the outputs are committed under tests/data/gguf/golden/ (tests/golden/SOURCE.md).

What the tiny checkpoints lack, and how it is worked around (nothing here changes a weight):
- no tokenizer: set_vocab is replaced by a minimal byte-level BPE vocabulary ("gpt2") of the
  checkpoint's vocab_size, with the config's bos / eos ids; a tokenizer.json of that size is
  written beside the config because Gemma 3/4's converter truncates token_embd to it;
- Nemotron-H saved by transformers 5.x lists its layers as layers_block_type only, and the
  converter then counts no MLP layer for a non-MoE model (it looks for "moe"): the equivalent
  hybrid_override_pattern string (M / * / -) is added, as the real checkpoints have it;
  and its validation assumes a Mamba head dim of 64 unless mamba_d_head is set (the tiny one
  has 12): mamba_d_head = mamba_head_dim is added;
- transformers' NemotronHConfig writes its MoE fields (num_experts_per_tok, ...) with defaults
  even for a dense model, and the converter then writes nemotron_h_moe: they are dropped.
"""
import argparse
import importlib
import json
import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path


def staged_copy(fixture: Path, tmp: Path) -> dict:
    """The fixture's config (patched) and a symlink to its weights in tmp; returns the config."""
    cfg = json.loads((fixture / "config.json").read_text())
    lbt = cfg.get("layers_block_type")
    if cfg.get("model_type") == "nemotron_h" and lbt and not cfg.get("hybrid_override_pattern"):
        kinds = {"mamba": "M", "linear_attention": "M", "attention": "*", "full_attention": "*",
                 "mlp": "-"}
        cfg["hybrid_override_pattern"] = "".join(kinds[k] for k in lbt)
    if cfg.get("model_type") == "nemotron_h" and "mamba_d_head" not in cfg:
        cfg["mamba_d_head"] = cfg["mamba_head_dim"]
    (tmp / "config.json").write_text(json.dumps(cfg, indent=2))
    for f in ("generation_config.json",):
        if (fixture / f).is_file():
            shutil.copy(fixture / f, tmp / f)
    os.symlink((fixture / "model.safetensors").resolve(), tmp / "model.safetensors")
    tc = cfg.get("text_config") or cfg
    vocab = tc["vocab_size"]
    tok = {"model": {"type": "BPE", "vocab": {token(i): i for i in range(vocab)}, "merges": []},
           "added_tokens": []}
    (tmp / "tokenizer.json").write_text(json.dumps(tok))
    return cfg


# The MoE fields transformers' NemotronHConfig writes with defaults even for a dense model;
# with num_experts_per_tok present the converter writes nemotron_h_moe.
NEMOTRON_MOE_KEYS = ("num_experts_per_tok", "n_routed_experts", "n_shared_experts",
                     "moe_intermediate_size", "moe_shared_expert_intermediate_size",
                     "moe_latent_size", "moe_shared_expert_overlap", "routed_scaling_factor",
                     "n_group", "topk_group", "norm_topk_prob", "mtp_layers_block_type",
                     "num_nextn_predict_layers")


def token(i: int) -> str:
    return f"<t{i}>"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("llama_cpp", type=Path)
    ap.add_argument("fixture", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--outtype", default="f32", choices=["f32", "bf16", "q8_0"])
    a = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    sys.path.insert(0, str(a.llama_cpp.resolve()))
    conv = importlib.import_module("convert_hf_to_gguf")  # puts its own gguf-py on the path
    gguf, torch = conv.gguf, conv.torch
    from conversion import ModelBase, ModelType, get_model_architecture, get_model_class

    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        cfg = staged_copy(a.fixture.resolve(), tmp)
        tc = cfg.get("text_config") or cfg
        hparams = ModelBase.load_hparams(tmp, False)
        if cfg.get("model_type") == "nemotron_h":
            for k in NEMOTRON_MOE_KEYS:
                hparams.pop(k, None)
            hparams["hybrid_override_pattern"] = cfg["hybrid_override_pattern"]
        arch = get_model_architecture(hparams, ModelType.TEXT)
        base = get_model_class(arch)

        class Tiny(base):  # type: ignore[misc, valid-type]
            model_arch = base.model_arch

            def set_vocab(self):
                n = tc["vocab_size"]
                w = self.gguf_writer
                w.add_tokenizer_model("gpt2")
                w.add_tokenizer_pre("default")
                w.add_token_list([token(i) for i in range(n)])
                w.add_token_types([gguf.TokenType.NORMAL] * n)
                w.add_token_merges(["< t"])  # llama.cpp refuses a BPE vocab without merges
                for key, add in (("bos_token_id", w.add_bos_token_id),
                                 ("eos_token_id", w.add_eos_token_id),
                                 ("pad_token_id", w.add_pad_token_id)):
                    v = tc.get(key, cfg.get(key))
                    if isinstance(v, list):
                        v = v[0]
                    if isinstance(v, int):
                        add(v)

        ftype = {"f32": gguf.LlamaFileType.ALL_F32, "bf16": gguf.LlamaFileType.MOSTLY_BF16,
                 "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}[a.outtype]
        with torch.inference_mode():
            m = Tiny(tmp, ftype, a.out.resolve(), eager=True, hparams=hparams,
                     model_name=a.fixture.resolve().name)
            m.write()
    print(f"{a.out}: {arch} ({a.outtype}) from {a.fixture}")


if __name__ == "__main__":
    main()
