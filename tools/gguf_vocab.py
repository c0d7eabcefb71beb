#!/usr/bin/env python3
"""gguf_vocab.py - vocab-only GGUF files of the vendored tokenizers, made by llama.cpp's own
converter, for tests/unit/test_tok_ggml.c.

Run by hand (CI only reads the outputs). For each name below it unpacks
tests/data/tokenizers/NAME/{tokenizer.json,tokenizer_config.json}.zst into a temporary
model directory beside a small config.json of the architecture, runs

    convert_hf_to_gguf.py DIR --vocab-only --outfile OUT

and writes tests/data/tokenizers/NAME/vocab.gguf.zst. What the converter writes is the
tokenizer.ggml.* keys and tokenizer.chat_template; with --vocab-only it writes no tensor.

  qwen35  Qwen3_5ForConditionalGeneration: tokenizer.ggml.model "gpt2", pre "qwen35"
  gemma3  the Gemma 3 tokenizer files under Gemma4ForConditionalGeneration: model
          "gemma4", the form of Gemma 4's GGUF files, whose converter writes most of
          Gemma's added tokens (<start_of_turn>, <b>, ...) as NORMAL (engine/text/tok_ggml.c
          recovers them)

Needs: the llama.cpp source tree (--llama, default the sdist that
tools/bench_llamacpp.sh uses), and Python with numpy, gguf, transformers and tokenizers
(pip install transformers). torch is imported by the converter at the top but used only
for tensors; a vocab-only run never touches it, so a stub module stands in.

Usage: tools/gguf_vocab.py [--llama DIR] [NAME...]
"""
import argparse
import json
import os
import runpy
import shutil
import subprocess
import sys
import tempfile
import types

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_LLAMA = "/work/llama/llama_cpp_python-0.3.36/vendor/llama.cpp"

# Text fields the converter's set_gguf_parameters reads, from shared/spec (qwen35.md
# section 2.1 for the 0.8B; gemma4.md for E2B). Their values do not reach the vocab.
QWEN35_TEXT = {
    "model_type": "qwen3_5_text", "hidden_size": 1024, "intermediate_size": 3584,
    "num_hidden_layers": 24, "num_attention_heads": 8, "num_key_value_heads": 2,
    "head_dim": 256, "rms_norm_eps": 1e-6, "vocab_size": 248320,
    "max_position_embeddings": 262144, "full_attention_interval": 4,
    "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_num_key_heads": 16,
    "linear_num_value_heads": 16, "linear_value_head_dim": 128, "eos_token_id": 248044,
    "tie_word_embeddings": True, "mtp_num_hidden_layers": 1,
    "layer_types": ["full_attention" if (i + 1) % 4 == 0 else "linear_attention"
                    for i in range(24)],
    "rope_parameters": {"mrope_interleaved": True, "mrope_section": [11, 11, 10],
                        "rope_type": "default", "rope_theta": 10000000,
                        "partial_rotary_factor": 0.25},
}
GEMMA4_TEXT = {
    "model_type": "gemma4_text", "hidden_size": 1536, "intermediate_size": 6144,
    "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 1,
    "head_dim": 256, "global_head_dim": 512, "rms_norm_eps": 1e-6, "vocab_size": 262144,
    "max_position_embeddings": 131072, "sliding_window": 512, "num_kv_shared_layers": 0,
    "hidden_size_per_layer_input": 256, "vocab_size_per_layer_input": 262144,
    "final_logit_softcapping": 30.0,
    "layer_types": ["sliding_attention", "sliding_attention", "sliding_attention",
                    "full_attention"],
    "rope_parameters": {
        "full_attention": {"rope_type": "proportional", "rope_theta": 1000000.0,
                           "partial_rotary_factor": 0.25},
        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}},
}
MODELS = {
    "qwen35": {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
               "tie_word_embeddings": True, "text_config": QWEN35_TEXT},
    "gemma3": {"architectures": ["Gemma4ForConditionalGeneration"], "model_type": "gemma4",
               "text_config": GEMMA4_TEXT},
}

# qwen35's tokenizer_config.json has no chat_template (the checkpoint ships it as
# chat_template.jinja); the vendored copy of the real one goes into the GGUF.
TEMPLATES = {"qwen35": "tests/data/chat_templates/real/qwen35.jinja"}


def stub_torch():
    """A module named torch whose attributes are inert: the converter only names them."""
    class Any:
        def __getattr__(self, name):
            return Any()

        def __call__(self, *a, **k):
            return Any()

        def __enter__(self):
            return self

        def __exit__(self, *a):
            return False
    import transformers  # noqa: F401  first, so that it records torch as absent
    transformers.AutoTokenizer  # noqa: B018  (its lazy import runs the torch probe)
    transformers.utils.is_torch_available()
    mod = types.ModuleType("torch")
    mod.__getattr__ = lambda name: Any()
    sys.modules["torch"] = mod


def convert(llama, name, out):
    src = os.path.join(ROOT, "tests/data/tokenizers", name)
    with tempfile.TemporaryDirectory() as d:
        for f in ("tokenizer.json", "tokenizer_config.json"):
            subprocess.check_call(["zstd", "-dqf", "--long=27", os.path.join(src, f + ".zst"),
                                   "-o", os.path.join(d, f)])
        tmpl = TEMPLATES.get(name)
        if tmpl:  # the converter takes a chat_template.jinja beside tokenizer_config.json
            shutil.copy(os.path.join(ROOT, tmpl), os.path.join(d, "chat_template.jinja"))
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(MODELS[name], f)
        raw = os.path.join(d, "vocab.gguf")
        sys.argv = ["convert_hf_to_gguf.py", d, "--vocab-only", "--outfile", raw]
        sys.path.insert(0, llama)
        try:
            runpy.run_path(os.path.join(llama, "convert_hf_to_gguf.py"), run_name="__main__")
        except SystemExit as e:
            if e.code:
                raise
        subprocess.check_call(["zstd", "-19", "-qf", "--long=27", raw, "-o", out])
        print(f"{out}: {os.path.getsize(raw)} bytes, {os.path.getsize(out)} compressed")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--llama", default=DEFAULT_LLAMA, help="llama.cpp source tree")
    ap.add_argument("names", nargs="*", default=["qwen35", "gemma3"])
    a = ap.parse_args()
    os.environ.pop("NO_LOCAL_GGUF", None)  # the tree's own gguf-py, as the converter prefers
    stub_torch()
    for name in a.names:
        convert(a.llama, name, os.path.join(ROOT, "tests/data/tokenizers", name, "vocab.gguf.zst"))


if __name__ == "__main__":
    main()
