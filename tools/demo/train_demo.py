#!/usr/bin/env python3
"""Train strata's bundled demo model (models/demo/) from scratch, reproducibly.

A small Qwen3.5 (Gated DeltaNet + gated full attention layers) trained on the King James
Bible as Debian's `bible-kjv` package ships it (public domain), with a byte-level BPE
tokenizer of 4096 ids trained by the HF `tokenizers` trainer, saved by transformers'
own Qwen3_5ForConditionalGeneration.save_pretrained (the real on-disk format).

Stages (all seeded; CPU, one thread, about an hour on the 2-core dev machine):
  1. corpus     `bible -l1000 gen1:1-rev22:21` -> chapters; every 50th chapter is held
                out for validation.
  2. tokenizer  BPE (ByteLevel + the Qwen3.5 split regex, NFC), 4093 merges-vocab ids
                + <|endoftext|> <|im_start|> <|im_end|> = 4096 ids.
  3. train      random 256-token windows: 80 % plain chapters separated by
                <|endoftext|>, 20 % ChatML turns (user: the start of a verse or a whole
                verse; assistant: the rest of it or the next verse, then <|im_end|>),
                so /v1/chat/completions answers in the format and stops.
  4. export     bf16 safetensors, config.json, generation_config.json, tokenizer.json,
                tokenizer_config.json (ChatML template), training.json (losses, samples).

Usage: tools/demo/train_demo.py [--out models/demo] [--steps N] [--bench K]
Setup: tools/install-deps.sh --demo-train (bible-kjv, torch, transformers, tokenizers).
Then: tools/demo/make_fixture.py records the greedy reference the C test compares with.
"""

import argparse
import json
import math
import os
import random
import shutil
import subprocess
import sys
import time

import torch
import transformers
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bible import read_bible  # noqa: E402
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from qwen35_tiny import qwen35_text_config  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SEED = 20240601

# Spec qwen35.md §9: the Qwen3.5 pre-tokenizer regex (the \p{M} terms, single digits).
QWEN_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
              r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
ADDED = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
VOCAB = 4096

CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- endif %}"
)

TEXT_CONFIG = qwen35_text_config(
    vocab=VOCAB, hidden=192, ff=512, layers=6, interval=3, head_dim=64,
    linear_head_dims=(48, 48), max_positions=4096, eos=VOCAB - 3, mrope_section=[4, 2, 2])
# The smallest vision tower transformers accepts: real Qwen3.5 files carry one, and a
# server must skip model.visual.* (it is never trained or used for text).
VISION_CONFIG = {
    "model_type": "qwen3_5_vision", "depth": 1, "hidden_size": 16,
    "intermediate_size": 32, "num_heads": 1, "hidden_act": "gelu_pytorch_tanh",
    "in_channels": 3, "patch_size": 2, "temporal_patch_size": 1,
    "spatial_merge_size": 1, "out_hidden_size": 192,
    "num_position_embeddings": 4, "initializer_range": 0.02,
}

SEQ = 256
BATCH = 16
STEPS = 1300
WARMUP = 100
LR = 3e-3
MIN_LR = 3e-4
WEIGHT_DECAY = 0.05
CHAT_FRACTION = 0.2
EVAL_EVERY = 300
SAMPLE_PROMPTS = ["In the beginning", "And the LORD said unto Moses,",
                  "Blessed are the", "The LORD is my shepherd;"]


def log(*a):
    print(time.strftime("%H:%M:%S"), *a, flush=True)


# ----------------------------------------------------------------------------- corpus

def chapter_text(ch):
    head, verses = ch
    return head + "\n\n" + "\n".join(verses) + "\n"


def split_chapters(chapters):
    val = [c for i, c in enumerate(chapters) if i % 50 == 25]
    train = [c for i, c in enumerate(chapters) if i % 50 != 25]
    return train, val


# ----------------------------------------------------------------------------- tokenizer

def train_tokenizer(train_chapters):
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB - len(ADDED), min_frequency=2,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=[], show_progress=False)
    tok.train_from_iterator([chapter_text(c) for c in train_chapters], trainer=trainer)
    assert tok.get_vocab_size() == VOCAB - len(ADDED), tok.get_vocab_size()
    tok.add_special_tokens(ADDED)
    ids = [tok.token_to_id(t) for t in ADDED]
    assert ids == [VOCAB - 3, VOCAB - 2, VOCAB - 1], ids
    return tok


def save_tokenizer(tok, out):
    tok.save(os.path.join(out, "tokenizer.json"))
    added = {str(tok.token_to_id(t)): {"content": t, "lstrip": False, "normalized": False,
                                       "rstrip": False, "single_word": False, "special": True}
             for t in ADDED}
    cfg = {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": added,
        "bos_token": None,
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": TEXT_CONFIG["max_position_embeddings"],
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=2, ensure_ascii=False)
        f.write("\n")


# ----------------------------------------------------------------------------- data

def chat_turn(user, assistant):
    return (f"<|im_start|>user\n{user}<|im_end|>\n"
            f"<|im_start|>assistant\n{assistant}<|im_end|>\n")


def build_streams(tok, train_chapters, rng):
    eot = tok.token_to_id("<|endoftext|>")
    plain = []
    for c in train_chapters:
        plain += tok.encode(chapter_text(c)).ids + [eot]
    chat = []
    for _, verses in train_chapters:
        for i, v in enumerate(verses):
            words = v.split(" ")
            if rng.random() < 0.5 and len(words) >= 6:
                k = rng.randint(2, len(words) // 2)
                text = chat_turn(" ".join(words[:k]), " ".join(words[k:]))
            elif i + 1 < len(verses):
                text = chat_turn(v, verses[i + 1])
            else:
                continue
            chat += tok.encode(text).ids + [eot]
    return torch.tensor(plain, dtype=torch.long), torch.tensor(chat, dtype=torch.long)


def batch_from(plain, chat, g):
    rows = []
    for _ in range(BATCH):
        src = chat if torch.rand((), generator=g).item() < CHAT_FRACTION else plain
        off = int(torch.randint(0, len(src) - SEQ - 1, (), generator=g))
        rows.append(src[off:off + SEQ + 1])
    b = torch.stack(rows)
    return b[:, :-1], b[:, 1:]


# ----------------------------------------------------------------------------- model

def make_config():
    cfg = transformers.Qwen3_5Config(
        text_config=dict(TEXT_CONFIG), vision_config=dict(VISION_CONFIG),
        tie_word_embeddings=True,
        image_token_id=VOCAB, video_token_id=VOCAB,
        vision_start_token_id=VOCAB, vision_end_token_id=VOCAB)
    cfg.architectures = ["Qwen3_5ForConditionalGeneration"]
    return cfg


def lm_loss(model, x, y):
    logits = model(input_ids=x, use_cache=False).logits
    return torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]),
                                             y.reshape(-1))


@torch.no_grad()
def val_loss(model, val_ids):
    """Mean token loss over the held-out chapters, in non-overlapping SEQ windows."""
    model.eval()
    tot, n = 0.0, 0
    for off in range(0, len(val_ids) - 1, SEQ):
        x = val_ids[off:off + SEQ][None]
        y = val_ids[off + 1:off + SEQ + 1][None]
        x = x[:, :y.shape[1]]
        loss = lm_loss(model, x, y)
        tot += float(loss) * y.numel()
        n += y.numel()
    model.train()
    return tot / n


@torch.no_grad()
def greedy(model, tok, text, n=24, chat=False):
    if chat:
        text = f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n"
    ids = tok.encode(text).ids
    stop = [tok.token_to_id("<|im_end|>"), tok.token_to_id("<|endoftext|>")]
    model.eval()
    out = model.generate(input_ids=torch.tensor([ids]), do_sample=False, max_new_tokens=n,
                         eos_token_id=stop, pad_token_id=stop[1])
    model.train()
    return tok.decode(out[0, len(ids):].tolist(), skip_special_tokens=False)


def lr_at(step, steps):
    if step < WARMUP:
        return LR * (step + 1) / WARMUP
    t = (step - WARMUP) / max(1, steps - WARMUP)
    return MIN_LR + 0.5 * (LR - MIN_LR) * (1 + math.cos(math.pi * t))


# ----------------------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "models", "demo"))
    ap.add_argument("--steps", type=int, default=STEPS)
    ap.add_argument("--bench", type=int, default=0, help="time K training steps and exit")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--max-minutes", type=float, default=75.0,
                    help="safety stop on a loaded machine; training.json records the step, "
                         "and --stop-step reproduces such a run exactly")
    ap.add_argument("--stop-step", type=int, default=0,
                    help="end after this many of --steps (the LR schedule still spans --steps)")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(SEED)
    random.seed(SEED)
    rng = random.Random(SEED)
    t0 = time.time()

    chapters = read_bible()
    train_ch, val_ch = split_chapters(chapters)
    log(f"corpus: {len(train_ch)} train / {len(val_ch)} val chapters")
    tok = train_tokenizer(train_ch)
    plain, chat = build_streams(tok, train_ch, rng)
    eot = tok.token_to_id("<|endoftext|>")
    val_ids = []
    for c in val_ch:
        val_ids += tok.encode(chapter_text(c)).ids + [eot]
    val_ids = torch.tensor(val_ids, dtype=torch.long)
    chars = sum(len(chapter_text(c)) for c in train_ch)
    log(f"tokens: plain {len(plain)} ({chars / len(plain):.2f} chars/token), chat {len(chat)}, "
        f"val {len(val_ids)}")

    cfg = make_config()
    torch.manual_seed(SEED)
    model = transformers.Qwen3_5ForConditionalGeneration(cfg)
    model.train()
    params = [p for n, p in model.named_parameters() if "visual" not in n]
    n_params = sum(p.numel() for p in params)
    log(f"model: {n_params / 1e6:.2f} M text parameters")
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WEIGHT_DECAY},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=LR, betas=(0.9, 0.95), eps=1e-8)
    g = torch.Generator().manual_seed(SEED)

    if args.bench:
        ts = time.time()
        for _ in range(args.bench):
            x, y = batch_from(plain, chat, g)
            loss = lm_loss(model, x, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        dt = (time.time() - ts) / args.bench
        log(f"bench: {dt:.2f} s/step, {BATCH * SEQ / dt:.0f} tokens/s, loss {float(loss):.3f}; "
            f"{args.steps} steps ~ {dt * args.steps / 60:.0f} min")
        return

    history = []
    ts = time.time()
    stopped_at = None
    for step in range(args.steps):
        if args.stop_step and step == args.stop_step:
            stopped_at = step
            log(f"stopping at --stop-step {step}")
            break
        if (time.time() - ts) / 60 > args.max_minutes:
            stopped_at = step
            log(f"stopping early at step {step}: over --max-minutes {args.max_minutes}")
            break
        for grp in opt.param_groups:
            grp["lr"] = lr_at(step, args.steps)
        x, y = batch_from(plain, chat, g)
        loss = lm_loss(model, x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        if step % 50 == 0 or step == args.steps - 1:
            el = time.time() - ts
            log(f"step {step}/{args.steps} loss {float(loss):.3f} lr {lr_at(step, args.steps):.2e} "
                f"{el / (step + 1):.2f} s/step, eta {el / (step + 1) * (args.steps - step - 1) / 60:.0f} min")
        if (step + 1) % EVAL_EVERY == 0 or step == args.steps - 1:
            vl = val_loss(model, val_ids)
            history.append({"step": step + 1, "train_loss": float(loss), "val_loss": vl,
                            "minutes": (time.time() - ts) / 60})
            log(f"val loss {vl:.3f} (ppl {math.exp(vl):.1f}); sample: "
                f"{greedy(model, tok, SAMPLE_PROMPTS[0])!r}")

    # ------------------------------------------------------------------ export
    model.eval()
    torch.save(model.state_dict(), os.path.join(os.environ.get("TMPDIR", "/tmp"), "strata_demo_f32.pt"))
    out = args.out
    if os.path.isdir(out):
        for f in os.listdir(out):
            if f not in ("greedy_reference.json", "README.md"):
                p = os.path.join(out, f)
                shutil.rmtree(p) if os.path.isdir(p) else os.remove(p)
    os.makedirs(out, exist_ok=True)
    bf = model.to(torch.bfloat16)
    bf.config.text_config.dtype = "bfloat16"
    bf.generation_config = transformers.GenerationConfig(
        eos_token_id=[tok.token_to_id("<|im_end|>"), tok.token_to_id("<|endoftext|>")],
        pad_token_id=tok.token_to_id("<|endoftext|>"), bos_token_id=None,
        do_sample=True, temperature=0.7, top_k=20, top_p=0.95)
    bf.save_pretrained(out)
    save_tokenizer(tok, out)

    # the saved files, reloaded, are what the numbers below describe
    ref = transformers.Qwen3_5ForConditionalGeneration.from_pretrained(out, dtype=torch.float32)
    ref.eval()
    vl = val_loss(ref, val_ids)
    samples = [{"prompt": p, "greedy": greedy(ref, tok, p, 32)} for p in SAMPLE_PROMPTS]
    chat_samples = [{"user": u, "greedy": greedy(ref, tok, u, 40, chat=True)}
                    for u in ["In the beginning God", "Who is the LORD?"]]
    report = {
        "corpus": "King James Bible, Debian package bible-kjv(-text), `bible -l1000 gen1:1-rev22:21`",
        "split": f"every 50th chapter (index % 50 == 25) held out: {len(train_ch)} train / "
                 f"{len(val_ch)} val chapters",
        "tokens": {"train_plain": len(plain), "train_chat": len(chat), "val": len(val_ids)},
        "params_text": n_params,
        "hyper": {"seq": SEQ, "batch": BATCH, "steps": args.steps, "lr": LR, "min_lr": MIN_LR,
                  "warmup": WARMUP, "weight_decay": WEIGHT_DECAY, "chat_fraction": CHAT_FRACTION,
                  "seed": SEED, "threads": args.threads},
        "history": history,
        "stopped_early_at_step": stopped_at,
        "reproduce": "tools/demo/train_demo.py --steps %d%s" % (
            args.steps, f" --stop-step {stopped_at}" if stopped_at is not None else ""),
        "final_val_loss_bf16_weights": vl,
        "final_val_ppl": math.exp(vl),
        "greedy_samples": samples,
        "chat_samples": chat_samples,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "tokenizers": __import__("tokenizers").__version__,
                     "python": sys.version.split()[0]},
        "train_minutes": (time.time() - ts) / 60,
        "total_minutes": (time.time() - t0) / 60,
    }
    with open(os.path.join(out, "training.json"), "w") as f:
        json.dump(report, f, indent=1, ensure_ascii=False)
        f.write("\n")
    size = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out))
    log(f"saved {out}: {size / 1e6:.2f} MB, val loss {vl:.3f} (bf16 weights)")
    for s in samples:
        log(f"  {s['prompt']!r} -> {s['greedy']!r}")
    for s in chat_samples:
        log(f"  chat {s['user']!r} -> {s['greedy']!r}")


if __name__ == "__main__":
    main()
