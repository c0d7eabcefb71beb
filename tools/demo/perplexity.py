#!/usr/bin/env python3
"""Perplexity of the demo model on its 24 held-out chapters, through strata itself.

    tools/demo/perplexity.py [--strata build/strata] [--model models/demo] \
        [--quantization none q8_0 q4_k]

The split and the windows are train_demo.py's: every 50th chapter (index % 50 == 25) of
`bible -l1000 gen1:1-rev22:21` (Debian's bible-kjv), each encoded with the model's
tokenizer and followed by <|endoftext|>, scored in non-overlapping 256-token windows. The
logits come from `strata logits` (CPU backend), so each --quantization is measured exactly
as it is served. Needs numpy and the `bible` program (apt-get install bible-kjv).
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bible import read_bible  # noqa: E402

SEQ = 256


def read_val_chapters():
    chapters = read_bible()
    return [c for i, c in enumerate(chapters) if i % 50 == 25]


def tokenize(strata, model, text):
    out = subprocess.run([strata, "tokenize", "--model", model], input=text,
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--strata", default="build/strata")
    ap.add_argument("--model", default="models/demo")
    ap.add_argument("--quantization", nargs="+", default=["none", "q8_0", "q4_k"])
    a = ap.parse_args()
    with open(os.path.join(a.model, "tokenizer.json")) as f:
        eot = next(t["id"] for t in json.load(f)["added_tokens"]
                   if t["content"] == "<|endoftext|>")
    ids = []
    for head, verses in read_val_chapters():
        ids += tokenize(a.strata, a.model, head + "\n\n" + "\n".join(verses) + "\n") + [eot]
    print(f"{len(ids)} held-out tokens, windows of {SEQ}")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "logits.f32")
        for q in a.quantization:
            tot, n = 0.0, 0
            for off in range(0, len(ids) - 1, SEQ):
                x, y = ids[off:off + SEQ], ids[off + 1:off + SEQ + 1]
                x = x[:len(y)]
                subprocess.run([a.strata, "logits", "--model", a.model, "--device", "cpu",
                                "--prompt-ids", ",".join(map(str, x)), "--prefill-chunk",
                                str(SEQ), "--quantization", q, "--out", out],
                               check=True, stderr=subprocess.DEVNULL)
                lg = np.fromfile(out, dtype=np.float32).reshape(len(x), -1).astype(np.float64)
                m = lg.max(axis=1)
                lse = m + np.log(np.exp(lg - m[:, None]).sum(axis=1))
                tot += float((lse - lg[np.arange(len(y)), y]).sum())
                n += len(y)
            print(f"{q:5s} loss {tot / n:.4f} nats/token, perplexity {math.exp(tot / n):.2f}")


if __name__ == "__main__":
    main()
