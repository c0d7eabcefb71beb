#!/usr/bin/env python3
"""Record transformers' greedy continuations of the demo model for tests/demo/test_demo.sh.

Writes models/demo/greedy_reference.json:
  {"transformers_version", "torch_version", "dtype": "float32", "max_new_tokens": 20,
   "cases": [{"text": prompt text, "prompt": [ids], "greedy": [20 ids],
              "greedy_text": decoded, "min_top2_margin": float,
              "bf16_greedy_equal": bool}]}

The reference runs transformers' Qwen3_5ForConditionalGeneration (plain torch path, eager
attention) in float32 on the saved bf16 weights, which is what strata computes on the CPU
(bf16 weights, f32 activations). EOS is ignored so every case has exactly 20 tokens; the
prompts are tokenized by the HF `tokenizers` library from models/demo/tokenizer.json, so
the test needs no tokenizer of its own. min_top2_margin (smallest gap between the best
and second-best logit over the 20 steps) says how far each greedy step is from a tie;
bf16_greedy_equal says whether transformers in bf16 picks the same 20 tokens.

Run: tools/demo/make_fixture.py [--model models/demo]   (after tools/demo/train_demo.py)
"""

import argparse
import json
import os

import torch
import transformers
from tokenizers import Tokenizer

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
NEW = 20
# Candidates in order; the first three plain ones and the first chat one whose greedy
# steps all have a top-2 logit gap of at least MIN_MARGIN (f32), and whose 20 tokens
# transformers also picks in bf16, are kept: a correct engine (or backend) that rounds
# differently cannot flip a near-tie.
PLAIN = [
    "In the beginning God created",
    "And the LORD spake unto Moses, saying,",
    "Blessed are the poor in spirit:",
    "And it came to pass, when the king",
    "Then Jesus said unto his disciples,",
    "The heavens declare the glory of God;",
    "And David said unto Saul,",
    "Now the serpent was more subtil than",
    "For God so loved the world,",
    "And Moses went up unto God,",
    "Remember now thy Creator in the days of thy youth,",
    "And the children of Israel",
]
# ChatML, as the chat template renders one user turn with the generation prompt
CHAT = [f"<|im_start|>user\n{u}<|im_end|>\n<|im_start|>assistant\n" for u in [
    "The LORD is my shepherd;", "In the beginning God", "Honour thy father and thy mother:",
    "And God said, Let there be light:"]]
MIN_MARGIN = 0.02


@torch.no_grad()
def run(model, ids):
    gen = model.generate(input_ids=torch.tensor([ids]), do_sample=False, max_new_tokens=NEW,
                         min_new_tokens=NEW, eos_token_id=None, pad_token_id=0,
                         output_logits=True, return_dict_in_generate=True)
    out = gen.sequences[0, len(ids):].tolist()
    logits = torch.stack([x[0].float() for x in gen.logits])
    assert logits.argmax(-1).tolist() == out, "a logits processor changed the greedy pick"
    top = logits.topk(2, dim=-1).values
    return out, float((top[:, 0] - top[:, 1]).min())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "demo"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    tok = Tokenizer.from_file(os.path.join(args.model, "tokenizer.json"))
    cls = transformers.Qwen3_5ForConditionalGeneration
    f32 = cls.from_pretrained(args.model, dtype=torch.float32, attn_implementation="eager").eval()
    bf16 = cls.from_pretrained(args.model, dtype=torch.bfloat16, attn_implementation="eager").eval()
    cases = []
    for group, want in ((PLAIN, 3), (CHAT, 1)):
        kept = 0
        for text in group:
            if kept == want:
                break
            ids = tok.encode(text).ids
            greedy, margin = run(f32, ids)
            greedy_bf16, _ = run(bf16, ids)
            shown = tok.decode(greedy, skip_special_tokens=False)
            ok = margin >= MIN_MARGIN and greedy == greedy_bf16
            print(f"{'keep' if ok else 'skip'} {text!r} -> {shown!r} (margin {margin:.3f}, "
                  f"bf16 {'same' if greedy == greedy_bf16 else 'DIFFERS'})", flush=True)
            if not ok:
                continue
            kept += 1
            cases.append({"text": text, "prompt": ids, "greedy": greedy, "greedy_text": shown,
                          "min_top2_margin": round(margin, 4),
                          "bf16_greedy_equal": greedy == greedy_bf16})
        if kept < want:
            raise SystemExit(f"only {kept} of {want} prompts have greedy margins >= {MIN_MARGIN} "
                             "and the same tokens in bf16")
    ref = {"transformers_version": transformers.__version__, "torch_version": torch.__version__,
           "model_class": cls.__name__, "attn_implementation": "eager", "device": "cpu",
           "dtype": "float32", "weights": "bf16 (as saved), upcast to float32",
           "max_new_tokens": NEW, "eos": "ignored", "min_margin": MIN_MARGIN, "cases": cases}
    path = os.path.join(args.model, "greedy_reference.json")
    with open(path, "w") as f:
        json.dump(ref, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
