#!/usr/bin/env python3
"""Trains two small SentencePiece models and records reference encodings for them.

Run once from the repo root (needs `spm_train` from the Debian package sentencepiece
and the `sentencepiece` Python package: pip install sentencepiece); the outputs are
committed under tests/data/spm/ and tests/unit/test_spm.c compares engine/text/spm_shim.cc
against them:

  unigram.model / unigram.json   unigram, nmt_nfkc normalisation, vocab 800
  bpe.model / bpe.json           BPE with byte_fallback, split_digits, identity
                                 normalisation and kept whitespace (the Llama/Gemma
                                 tokenizer.model recipe), vocab 600

The training text is generated here from a fixed seed (our own words, so there is no
licence question): English-like sentences, numbers, code-ish lines, and a thin tail
of accented, Greek, Cyrillic, CJK and emoji text, so character coverage leaves some
characters out and the unk / byte-fallback paths are exercised.

Each .json holds: vocab_size, bos_id, eos_id, unk_id, pieces (every piece, by id),
encode cases [{text, ids, decoded}] for ~300 strings, and decode cases [{ids, text}]
for id sequences the C side decodes.
"""
import json
import os
import random
import subprocess
import sys
import tempfile

import sentencepiece as spm

OUT = "tests/data/spm"

WORDS = """the of and to in is was he for it with as his on be at by had are but from or
have an they which one you were her all she there would their we him been has when who
will more no if out so said what up its about into than them can only other new some
could time these two may then do first any my now such like our over man me even most
made after also did many before must through back years where much your way well down
should because each just those people how too little state good very make world still
own see men work long get here between both life being under never day same another
know while last might us great old year off come since against go came right used take
three house river mountain garden window morning evening letter island harbour kitchen
engine station lantern meadow valley village market bridge forest winter summer autumn
spring candle thunder silver copper marble pebble sparrow falcon otter badger kettle
quietly slowly brightly carefully suddenly gently nearly almost always sometimes often
walked talked looked opened closed carried painted wandered whispered answered noticed
remembered believed returned followed gathered travelled measured counted listened
beautiful curious ancient narrow gentle bitter golden hollow patient restless stubborn
tokenizer inference server request response memory buffer kernel tensor matrix vector
layer weight bias token stream batch cache thread socket header payload config""".split()

SYLLABLES = "ka lo mi ne ru ta vo shi en ar th qu ing er al on ex pre str bl gr".split()

TAIL = ["café", "naïve", "Zürich", "São Paulo", "façade", "jalapeño", "Ångström",
        "ελληνικά", "καλημέρα", "привет", "спасибо", "日本語", "東京", "中文", "한국어",
        "🙂", "🚀", "ñandú", "crème brûlée", "Œuvre", "ß", "ﬁne", "１２３", "ｆｕｌｌ"]

PUNCT = [".", ",", "!", "?", ";", ":", " -", "'s", "\"", "(", ")"]


def word(rng):
    if rng.random() < 0.08:
        return "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4)))
    return rng.choice(WORDS)


def sentence(rng):
    n = rng.randint(3, 16)
    ws = [word(rng) for _ in range(n)]
    if rng.random() < 0.5:
        ws[0] = ws[0].capitalize()
    r = rng.random()
    if r < 0.1:
        ws.insert(rng.randrange(len(ws)), str(rng.randint(0, 99999)))
    elif r < 0.15:
        ws.insert(rng.randrange(len(ws)), rng.choice(TAIL))
    elif r < 0.2:
        ws.insert(rng.randrange(len(ws)), "%d.%02d" % (rng.randint(0, 999), rng.randint(0, 99)))
    out = " ".join(ws)
    if rng.random() < 0.3:
        k = rng.randrange(len(out))
        out = out[:k] + rng.choice(PUNCT) + out[k:]
    return out + rng.choice([".", ".", ".", "?", "!", ""])


def code_line(rng):
    name = "_".join(word(rng) for _ in range(rng.randint(1, 3)))
    forms = ["def %s(x, y=%d):" % (name, rng.randint(0, 9)),
             "    return %s[%d] + 1" % (name, rng.randint(0, 99)),
             "if (%s == NULL) { goto fail; }" % name,
             "%s = {\"%s\": [%d, %d]}" % (name, word(rng), rng.randint(0, 9), rng.randint(0, 9)),
             "\t%s->%s += 0x%04x;" % (name, word(rng), rng.randint(0, 65535))]
    return rng.choice(forms)


def training_text(rng, n):
    lines = []
    for _ in range(n):
        r = rng.random()
        if r < 0.85:
            lines.append(sentence(rng))
        elif r < 0.95:
            lines.append(code_line(rng))
        else:
            lines.append(" ".join(rng.choice(TAIL) for _ in range(rng.randint(1, 4))))
    return "\n".join(lines) + "\n"


# Hand-written cases for the places tokenizers go wrong: whitespace handling (runs,
# leading, trailing, tabs, newlines), normalisation (NFKC folds, ligatures, fullwidth,
# combining marks), characters outside the training set (unk / byte fallback), digits,
# pieces that look like control or byte tokens, and the empty string.
EDGE = [
    "", " ", "  ", "\t", "\n", "\n\n", " \n ", "a", "A", "the", " the", "the ", "  the  ",
    "Hello world", "Hello  world", "Hello\tworld", "Hello\nworld", "Hello\r\nworld",
    "hello world ", " hello world", "   leading spaces", "trailing spaces   ",
    "multiple   internal    spaces", "tab\tseparated\tvalues", "line one\nline two\n",
    "0", "7", "42", "123456789", "3.14159", "1,000,000", "2024-01-31", "v1.2.3", "0x1F",
    "café", "cafe\u0301", "naïve", "Zürich", "ﬁne ﬂow", "ｆｕｌｌｗｉｄｔｈ １２３", "①②③",
    "Å vs Å", "ℌ𝔢𝔩𝔩𝔬", "x²+y²", "½ ¼ ¾", "™ ©", "…", "—dash—", "“quoted”", "‘single’",
    "ελληνικά", "привет мир", "日本語のテキスト", "中文文本", "한국어", "עברית", "العربية",
    "हिन्दी", "ไทย", "🙂", "🚀🚀🚀", "👍🏽", "👨‍👩‍👧", "🇫🇷", "a🙂b", "emoji 🙂 inside",
    "\u200b", "zero\u200bwidth", "\u00a0nbsp\u00a0", "soft\u00adhyphen", "\ufeffbom",
    "<unk>", "<s>", "</s>", "<pad>", "<0x41>", "▁", "▁the", "▁▁", "<s>hello</s>",
    "\\n", "\\", "\"", "'", "`", "~!@#$%^&*()_+", "{}[]|;:,./<>?", "a-b_c.d", "snake_case_name",
    "CamelCaseName", "ALLCAPS", "MiXeD cAsE", "don't", "it's", "rock'n'roll", "e-mail",
    "https://example.com/path?q=1&r=2", "user@example.com", "C:\\Windows\\path",
    "def f(x):\n    return x + 1\n", "if (p == NULL) { goto fail; }", "\tindented\n\t\tmore",
    "the " * 40, "x" * 200, "ab" * 64, "🙂" * 20, "ß" * 10, "supercalifragilisticexpialidocious",
    "Ǆ ǅ ǆ", "İstanbul", "ǅemal", "ﬀ ﬃ ﬄ", "㎞ ㎏", "Ⅷ", "ｶﾀｶﾅ", "\u3000ideographic space",
    "control\x01char", "bell\x07", "del\x7f", "\x1b[0m", "mixed 日本 and English 123",
]


def random_unicode(rng):
    pools = ["abcdefghijklmnopqrstuvwxyz", "ABCXYZ", "0123456789", " \t\n", ".,;:!?'\"-",
             "éèêëàâäôöûüçñßøå", "αβγδεζηθλμπσω", "абвгдежзиклмн", "日本語中文字漢",
             "🙂🚀👍🎉", "\u0301\u0308", "ﬁﬂ１２ｆ", "\u00a0\u200b\u3000"]
    n = rng.randint(1, 24)
    return "".join(rng.choice(rng.choice(pools)) for _ in range(n))


def test_strings(rng):
    out = list(EDGE)
    out += [sentence(rng) for _ in range(120)]
    out += [code_line(rng) for _ in range(25)]
    out += [random_unicode(rng) for _ in range(60)]
    out += [" ".join(sentence(rng) for _ in range(rng.randint(2, 5))) for _ in range(10)]
    return out


def train(tmp, prefix, extra):
    # Relative names: the trainer spec stored in the model records them, so the
    # committed .model files come out byte-identical from run to run.
    args = ["spm_train", "--input=train.txt", "--model_prefix=" + prefix,
            "--num_threads=1", "--random_seed=1", "--shuffle_input_sentence=false",
            "--character_coverage=0.995", "--minloglevel=2"] + extra
    subprocess.run(args, check=True, cwd=tmp, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def reference(model_path, strings, rng):
    sp = spm.SentencePieceProcessor(model_file=model_path)
    n = sp.get_piece_size()
    cases = []
    for s in strings:
        ids = sp.encode(s)
        cases.append({"text": s, "ids": ids, "decoded": sp.decode(ids)})
    # Decoding arbitrary sequences: byte pieces that do not form valid UTF-8, control
    # and unk ids, and random mixes. Ids the encoder never produces come from here.
    dec = [{"ids": [], "text": ""}]
    seqs = [[sp.unk_id()], [sp.bos_id(), sp.eos_id()], list(range(min(n, 40)))]
    byte_ids = [sp.piece_to_id("<0x%02X>" % b) for b in (0x41, 0xE2, 0x82, 0xAC, 0xFF, 0x80)]
    if sp.id_to_piece(byte_ids[0]) == "<0x41>":
        seqs += [byte_ids[:1], byte_ids[1:4], byte_ids[1:3], byte_ids[4:], byte_ids]
    for _ in range(40):
        seqs.append([rng.randrange(n) for _ in range(rng.randint(1, 12))])
    for ids in seqs:
        dec.append({"ids": ids, "text": sp.decode(ids)})
    return {
        "vocab_size": n, "bos_id": sp.bos_id(), "eos_id": sp.eos_id(), "unk_id": sp.unk_id(),
        "pieces": [sp.id_to_piece(i) for i in range(n)],
        "encode": cases, "decode": dec,
    }


def dump(ref):
    """JSON with one piece or one case per line, so a diff of two runs is readable."""
    lines = []
    for k, v in ref.items():
        if isinstance(v, list):
            items = ",\n".join(json.dumps(x, ensure_ascii=True) for x in v)
            lines.append("%s: [\n%s\n]" % (json.dumps(k), items))
        else:
            lines.append("%s: %s" % (json.dumps(k), json.dumps(v)))
    return "{\n" + ",\n".join(lines) + "\n}\n"


def main():
    if not os.path.isdir("engine"):
        sys.exit("run from the repo root")
    os.makedirs(OUT, exist_ok=True)
    rng = random.Random(20240531)
    text = training_text(rng, 12000)
    strings = test_strings(random.Random(7))
    models = {
        "unigram": ["--model_type=unigram", "--vocab_size=800",
                    "--user_defined_symbols=<sep>,<cls>", "--control_symbols=<ctrl>"],
        "bpe": ["--model_type=bpe", "--vocab_size=600", "--byte_fallback=true",
                "--split_digits=true", "--normalization_rule_name=identity",
                "--remove_extra_whitespaces=false", "--allow_whitespace_only_pieces=true",
                "--add_dummy_prefix=true"],
    }
    with tempfile.TemporaryDirectory() as tmp:
        text_path = os.path.join(tmp, "train.txt")
        with open(text_path, "w", encoding="utf-8") as f:
            f.write(text)
        for name, extra in models.items():
            train(tmp, name, extra)
            os.replace(os.path.join(tmp, name + ".model"), os.path.join(OUT, name + ".model"))
            ref = reference(os.path.join(OUT, name + ".model"), strings, random.Random(11))
            with open(os.path.join(OUT, name + ".json"), "w", encoding="utf-8") as f:
                f.write(dump(ref))
            print("%s: vocab %d, %d encode cases, %d decode cases (sentencepiece %s)" %
                  (name, ref["vocab_size"], len(ref["encode"]), len(ref["decode"]),
                   spm.__version__))


if __name__ == "__main__":
    main()
