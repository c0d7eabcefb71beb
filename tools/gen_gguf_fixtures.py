#!/usr/bin/env python3
"""Writes the small GGUF files tests/unit/test_gguf.c reads, with the `gguf` package's
own GGUFWriter (PyPI `gguf`, the writer llama.cpp's converters use), so the C reader is
checked against files the reference writer made, not against our idea of the format.

  tests/data/gguf/tiny.gguf       every metadata value type, arrays of ints, floats,
                                  bools and strings, and tensors F32 (2-D and 3-D), F16,
                                  BF16, Q8_0 and Q4_K with values the test recomputes
  tests/data/gguf/align64.gguf    general.alignment = 64, tensors of odd byte sizes
  tests/data/gguf/meta_only.gguf  metadata only (a vocab-only file): no data section
  tests/data/gguf/nested.gguf     an array of arrays, which the reader refuses
  tests/data/gguf/big_endian.gguf the writer's big-endian mode, which the reader refuses
  tests/data/gguf/tok_qwen35.gguf a vocab-only file with tokenizer.ggml.* keys as
                                  llama.cpp's converter writes them for a byte-level gpt2
                                  vocabulary (all 256 byte symbols, a few merges, control,
                                  user-defined and unused tokens) and a chat template; the
                                  hub test serves it as a GGUF repository's one file
  tests/fuzz/corpus/gguf_tok/     the same with the other tokenizer.ggml.pre names the
                                  reader knows (tekken: BOS by default, gpt-2: EOS added)
                                  and the gemma4 model: seeds of
                                  tests/fuzz/fuzz_gguf_tok.c

The test makes its malformed files by corrupting copies of these at run time. Tensor
names are all 4 bytes and the test.* keys of equal length where the test renames one to
another. The first three also seed the fuzz corpus (tests/fuzz/corpus/gguf/).
Run once and commit the outputs:  python3 tools/gen_gguf_fixtures.py
"""
import os
import shutil
import sys

import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import GGUFEndian, GGUFValueType, GGUFWriter
from gguf.quants import quantize

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from byte_level import byte_symbols  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
OUT = os.path.join(ROOT, "tests", "data", "gguf")
CORPUS = os.path.join(ROOT, "tests", "fuzz", "corpus", "gguf")


def write(path, arch, fill, **kw):
    w = GGUFWriter(path, arch, **kw)
    fill(w)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def bf16_bytes(x):
    """f32 values exactly representable in bf16, as the raw bytes a BF16 tensor holds."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32) >> 16
    return u.astype("<u2").view(np.uint8)


def fill_tiny(w):
    w.add_name("tiny")
    w.add_uint8("test.u8", 200)
    w.add_int8("test.i8", -100)
    w.add_uint16("test.u16", 60000)
    w.add_int16("test.i16", -30000)
    w.add_uint32("test.u32", 4000000000)
    w.add_int32("test.i32", -2000000000)
    w.add_float32("test.f32", 1.5)
    w.add_bool("test.bool", True)
    w.add_string("test.str", "h\u00e9llo")
    w.add_uint64("test.u64", 2**63 + 5)
    w.add_int64("test.i64", -(2**40))
    w.add_float64("test.f64", 0.25)
    w.add_key_value("test.arr_i32", [1, -2, 3], GGUFValueType.ARRAY, GGUFValueType.INT32)
    w.add_key_value("test.arr_f32", [0.5, -1.25], GGUFValueType.ARRAY, GGUFValueType.FLOAT32)
    w.add_array("test.arr_bol", [True, False, True])
    w.add_key_value("test.arr_u64", [2**63 + 1], GGUFValueType.ARRAY, GGUFValueType.UINT64)
    w.add_uint32("test.per_layer", 7)
    w.add_token_list(["<s>", "a", "", "\u0120hello", "</s>"])
    w.add_token_scores([0.0, -1.0, -2.0, -3.5, 0.0])

    # [2, 3] f32: ne = {3, 2}
    w.add_tensor("tf32", (np.arange(6, dtype=np.float32) * 0.5 - 1).reshape(2, 3))
    w.add_tensor("tf16", (np.arange(8, dtype=np.float16) * np.float16(0.25)).reshape(2, 4))
    w.add_tensor("tb16", bf16_bytes(np.arange(6) - 2.5).reshape(3, 4), raw_dtype=Q.BF16)
    # Q8_0 [2, 64]: row r holds (k - 32) / 8 + r, so block 0's amax is 4 and its first
    # quant is -127 (the test checks both from the bytes).
    q8 = (np.arange(64, dtype=np.float32) - 32) / 8 + np.arange(2, dtype=np.float32)[:, None]
    w.add_tensor("tq80", quantize(q8, Q.Q8_0), raw_dtype=Q.Q8_0)
    # Q4_K [2, 256]: the reader never interprets block contents, so a byte pattern the
    # test recomputes ((7 i + 3) mod 256) checks the data pointer and length exactly.
    q4 = ((np.arange(2 * 144) * 7 + 3) % 256).astype(np.uint8).reshape(2, 144)
    w.add_tensor("tq4k", q4, raw_dtype=Q.Q4_K)
    # [2, 3, 4] f32: ne = {4, 3, 2}
    w.add_tensor("t3d_", np.arange(24, dtype=np.float32).reshape(2, 3, 4))


def fill_align64(w):
    w.add_custom_alignment(64)
    w.add_tensor("odd3", np.arange(3, dtype=np.float32))
    w.add_tensor("odd5", np.arange(5, dtype=np.float32) + 10)


def fill_meta_only(w):
    w.add_token_list(["x", "y"])
    w.add_string("tokenizer.ggml.model", "gpt2")


def fill_tok(pre, add_bos=None, add_eos=None, model="gpt2"):
    """A small byte-level vocabulary: every byte symbol, the merges that build "hello",
    " world" and "ab", three CONTROL tokens, two USER_DEFINED and one UNUSED filler."""
    def fill(w):
        normal = byte_symbols()
        merges = ["h e", "l l", "he ll", "hell o", "\u0120 w", "o r", "\u0120w or", "l d",
                  "\u0120wor ld", "a b"]
        for m in merges:
            normal.append(m.replace(" ", ""))
        special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
        user = ["<think>", "</think>"]
        tokens = normal + special + user + ["[PAD0]"]
        types = [1] * len(normal) + [3] * len(special) + [4] * len(user) + [5]
        w.add_tokenizer_model(model)
        w.add_tokenizer_pre(pre)
        w.add_token_list(tokens)
        w.add_token_types(types)
        w.add_token_merges(merges)
        w.add_bos_token_id(len(normal))
        w.add_eos_token_id(len(normal) + 2)
        if add_bos is not None:
            w.add_add_bos_token(add_bos)
        if add_eos is not None:
            w.add_add_eos_token(add_eos)
        w.add_chat_template("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
                            "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}"
                            "<|im_start|>assistant\n{% endif %}")
    return fill


def fill_nested(w):
    w.add_key_value("test.nested", [[1, 2], [3]], GGUFValueType.ARRAY)
    w.add_tensor("tf32", np.zeros(4, dtype=np.float32))


def fill_big_endian(w):
    w.add_tensor("tf32", np.zeros(4, dtype=np.float32))


def main():
    os.makedirs(OUT, exist_ok=True)
    os.makedirs(CORPUS, exist_ok=True)
    files = [("tiny", "qwen35", fill_tiny, {}), ("align64", "test", fill_align64, {}),
             ("meta_only", "test", fill_meta_only, {}), ("nested", "test", fill_nested, {}),
             ("big_endian", "test", fill_big_endian, {"endianess": GGUFEndian.BIG})]
    for name, arch, fill, kw in files:
        path = os.path.join(OUT, name + ".gguf")
        write(path, arch, fill, **kw)
        if name in ("tiny", "align64", "meta_only"):
            shutil.copy(path, os.path.join(CORPUS, name + ".gguf"))
        print(f"{path}: {os.path.getsize(path)} bytes")
    tok_corpus = CORPUS + "_tok"
    os.makedirs(tok_corpus, exist_ok=True)
    path = os.path.join(OUT, "tok_qwen35.gguf")
    write(path, "qwen35", fill_tok("qwen35", add_bos=False))
    shutil.copy(path, os.path.join(tok_corpus, "qwen35.gguf"))
    print(f"{path}: {os.path.getsize(path)} bytes")
    for name, fill in (("tekken", fill_tok("tekken")), ("gpt2", fill_tok("gpt-2", add_eos=True)),
                       ("gemma4", fill_tok("default", model="gemma4"))):
        path = os.path.join(tok_corpus, name + ".gguf")
        write(path, "qwen35", fill)
        print(f"{path}: {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()
