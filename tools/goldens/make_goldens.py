#!/usr/bin/env python3
"""Reference fixtures for strata, produced by transformers' own model classes.

Each fixture is a tiny random checkpoint saved with save_pretrained (the real on-disk
format) plus the logits transformers computes for a few token-id prompts. The C tests
load the checkpoint with strata, run the same prompts and compare.

Layout of tests/golden/<name>/ (keep in sync with the C readers):
  config.json, model.safetensors, generation_config.json (when transformers writes one)
  golden.json = {"transformers_version", "torch_version", "dtype": "float32"|"bfloat16",
                 "vocab": V,
                 "cases": [{"prompt": [ids], "logits": "caseN.f32",
                            "greedy": [ids] (optional),
                            "greedy_logits": "caseN_greedy.f32" (optional)}],
                 ... informational keys (checks, notes) ...}
  caseN.f32 = raw little-endian float32 [len(prompt), V], row-major; every prompt position.
  caseN_greedy.f32 = [len(greedy), V]: row i holds the logits that produced greedy[i]
  (row 0 = last prompt position of the prefill, rows 1.. = one-token decode steps).

Weights are randomised after init (norm weights, decay parameters, scaled matrices) because
transformers' init (zeros/ones/0.02) hides whole classes of bugs (1+w vs w, A_log sign, ...).

Run: make goldens   (or python3 tools/goldens/make_goldens.py [--only name,name])
Everything is seeded; the output is deterministic for fixed torch/transformers versions.
"""

import argparse
import copy
import json
import math
import os
import shutil
import sys

import numpy as np
import torch
import transformers
from safetensors import safe_open
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from qwen35_tiny import qwen35_text_config  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OUT = os.path.join(ROOT, "tests", "golden")
SPEC = "/work/shared/spec"

PROMPT_LENS = [1, 7, 70, 150]      # 150 > 2 delta-rule chunks of 64; > sliding window 8
GREEDY_CASE = 2                    # the 70-token prompt
GREEDY_NEW = 12


# --------------------------------------------------------------------------- helpers

def log(*a):
    print(*a, flush=True)


def normal_(t, std, mean=0.0):
    with torch.no_grad():
        t.copy_(torch.randn(t.shape, dtype=torch.float32) * std + mean)


def uniform_(t, lo, hi):
    with torch.no_grad():
        t.copy_(torch.rand(t.shape, dtype=torch.float32) * (hi - lo) + lo)


def scale_linear_(model, gain=1.0, skip=()):
    """Every Linear weight ~ N(0, gain/sqrt(fan_in)) so activations stay O(1)."""
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.Linear) and not any(s in name for s in skip):
            normal_(mod.weight, gain / math.sqrt(mod.weight.shape[1]))
            if mod.bias is not None:
                normal_(mod.bias, 0.1)


def greedy_candidates(seed, vocab, first=None):
    def cand(k):
        g = torch.Generator().manual_seed(seed * 1000 + k)
        ids = torch.randint(0, vocab, (PROMPT_LENS[GREEDY_CASE],), generator=g).tolist()
        if first is not None:
            ids[0] = first
        return ids
    return cand


def prompts_for(seed, vocab, first=None):
    g = torch.Generator().manual_seed(seed)
    out = []
    for n in PROMPT_LENS:
        ids = torch.randint(0, vocab, (n,), generator=g).tolist()
        if first is not None:
            ids[0] = first
        out.append(ids)
    return out


def rewrite_safetensors(path, extra):
    """Add tensors that strata must skip (mtp., vision, dead kv) to the saved file."""
    with safe_open(path, "pt") as f:
        meta = f.metadata()
    tensors = load_file(path)
    for k, v in extra.items():
        assert k not in tensors, k
        tensors[k] = v.contiguous()
    save_file(tensors, path, metadata=meta or {"format": "pt"})


def write_f32(path, arr):
    a = np.ascontiguousarray(arr, dtype="<f4")
    a.tofile(path)


@torch.no_grad()
def stepwise_logits(model, ids):
    """Token-by-token decode over the whole prompt with a cache (no multi-token call)."""
    cache = None
    rows = []
    for t in ids:
        out = model(input_ids=torch.tensor([[t]]), cache=cache, use_cache=True)
        cache = out.past_key_values
        rows.append(out.logits[0, -1].float())
    return torch.stack(rows)


@torch.no_grad()
def split_prefill_logits(model, ids, cut):
    """Prefill in two pieces with the cache carried: checks chunked prefill in T."""
    a = model(input_ids=torch.tensor([ids[:cut]]), use_cache=True)
    b = model(input_ids=torch.tensor([ids[cut:]]), cache=a.past_key_values, use_cache=True)
    return torch.cat([a.logits[0].float(), b.logits[0].float()])


# Greedy steps whose top-2 logits are closer than this are re-drawn: an engine that is
# correct to rounding could pick either token. bf16: a few ulp at |logit| ~ 8-16.
MIN_MARGIN = {torch.float32: 0.05, torch.bfloat16: 0.25}


@torch.no_grad()
def greedy_run(model, ids, vocab):
    gen = model.generate(input_ids=torch.tensor([ids]), do_sample=False,
                         max_new_tokens=GREEDY_NEW, min_new_tokens=GREEDY_NEW,
                         eos_token_id=None, pad_token_id=0, use_cache=True,
                         output_logits=True, return_dict_in_generate=True)
    greedy = gen.sequences[0, len(ids):].tolist()
    glog = torch.stack([x[0].float() for x in gen.logits])
    assert len(greedy) == GREEDY_NEW and glog.shape == (GREEDY_NEW, vocab)
    # the raw logits must pick the recorded tokens (no logits processor interfered)
    assert glog.argmax(-1).tolist() == greedy, (glog.argmax(-1).tolist(), greedy)
    return greedy, glog


def greedy_search(model, ids, vocab, dtype, candidate, prompts):
    """Greedy continuation of prompts[GREEDY_CASE]; re-draw the prompt while a step is near-tied."""
    for k in range(200):
        greedy, glog = greedy_run(model, ids, vocab)
        srt = glog.sort(-1, descending=True).values
        if candidate is None or float((srt[:, 0] - srt[:, 1]).min()) >= MIN_MARGIN[dtype]:
            prompts[GREEDY_CASE] = ids
            return greedy, glog, k
        ids = candidate(k)
    raise RuntimeError("no greedy prompt without near-ties found")


def maxdiff(a, b):
    return float((a.float() - b.float()).abs().max())


# --------------------------------------------------------------------------- fixture writer

@torch.no_grad()
def make_fixture(name, cls, build, dtype, prompts, extra_fn=None, patch=None, info=None,
                 bf16_from=None, greedy_prompt=None, config_fix=None):
    """build() -> model (f32, randomised). Saves, reloads from disk, runs, writes golden.json.

    bf16_from: reuse the f32 model of another fixture, cast to bf16.
    patch(model): applied to the reloaded model before running (e.g. the Nemotron dt floor).
    greedy_prompt(k): k-th replacement candidate for the greedy prompt (see greedy_search).
    config_fix(dict): rewrites the saved config.json into another spelling transformers
    also reads (the hub files' legacy keys); the reload below proves it is equivalent.
    """
    prompts = [list(p) for p in prompts]
    d = os.path.join(OUT, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    model = build() if bf16_from is None else bf16_from
    model.eval()
    if dtype == torch.bfloat16:
        model = copy.deepcopy(model).to(torch.bfloat16)
    model.save_pretrained(d)
    st = os.path.join(d, "model.safetensors")
    assert os.path.exists(st), os.listdir(d)
    if extra_fn is not None:
        rewrite_safetensors(st, {k: v.to(dtype) for k, v in extra_fn(model).items()})
    if config_fix is not None:
        cp = os.path.join(d, "config.json")
        with open(cp) as f:
            c = json.load(f)
        config_fix(c)
        with open(cp, "w") as f:
            json.dump(c, f, indent=2, sort_keys=True)
            f.write("\n")

    ref = cls.from_pretrained(d, dtype=dtype, attn_implementation="eager")
    ref.eval()
    # the files on disk (incl. any rewritten config / extra tensors) reproduce the built model
    built = dict(model.named_parameters())
    loaded = dict(ref.named_parameters())
    assert built.keys() == loaded.keys(), set(built) ^ set(loaded)
    assert all(torch.equal(built[k], loaded[k]) for k in built), "reloaded weights differ"
    checks = {"reload_params_equal": True}
    if dtype == torch.float32:
        # (a bf16 .to() copy also rounds the RoPE/scale buffers, which from_pretrained keeps in f32)
        probe = torch.tensor([prompts[-1]])
        model.set_attn_implementation("eager")
        checks["reload_vs_built_maxdiff"] = maxdiff(ref(input_ids=probe, use_cache=False).logits,
                                                    model(input_ids=probe, use_cache=False).logits)
    if patch is not None:
        patch(ref)
    vocab = ref.config.get_text_config().vocab_size
    cases = []
    for ci, ids in enumerate(prompts):
        logits = ref(input_ids=torch.tensor([ids]), use_cache=False).logits[0].float()
        assert logits.shape == (len(ids), vocab)
        fn = f"case{ci}.f32"
        write_f32(os.path.join(d, fn), logits.numpy())
        case = {"prompt": ids, "logits": fn}
        if ci == GREEDY_CASE:
            greedy, glog, tries = greedy_search(ref, ids, vocab, dtype, greedy_prompt, prompts)
            if tries:
                # the first candidates had near-tied greedy steps: use the one that does not
                ids = prompts[ci]
                logits = ref(input_ids=torch.tensor([ids]), use_cache=False).logits[0].float()
                write_f32(os.path.join(d, fn), logits.numpy())
                case["prompt"] = ids
            checks["greedy_prompt_redraws"] = tries
            case["greedy"] = greedy
            case["greedy_logits"] = f"case{ci}_greedy.f32"
            write_f32(os.path.join(d, case["greedy_logits"]), glog.numpy())
            srt = glog.sort(-1, descending=True).values
            checks["greedy_min_top2_margin"] = float((srt[:, 0] - srt[:, 1]).min())
            # sanity: prefill-then-decode (generate) vs one forward over prompt + greedy
            full = ref(input_ids=torch.tensor([ids + greedy[:-1]]), use_cache=False).logits[0].float()
            one_shot = full[len(ids) - 1:]
            checks["decode_vs_oneshot_maxdiff"] = maxdiff(glog, one_shot)
            checks["decode_vs_oneshot_argmax_equal"] = one_shot.argmax(-1).tolist() == greedy
        if len(ids) >= 70:
            step = stepwise_logits(ref, ids)
            checks[f"case{ci}_stepwise_vs_oneshot_maxdiff"] = maxdiff(step, logits)
            cut = len(ids) // 2 + 3
            checks[f"case{ci}_split{cut}_vs_oneshot_maxdiff"] = maxdiff(
                split_prefill_logits(ref, ids, cut), logits)
        checks[f"case{ci}_logit_std"] = float(logits.std())
        cases.append(case)

    golden = {
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "dtype": "bfloat16" if dtype == torch.bfloat16 else "float32",
        "vocab": vocab,
        "cases": cases,
        "model_class": cls.__name__,
        "attn_implementation": "eager",
        "device": "cpu",
        "checks": checks,
    }
    if info:
        golden.update(info)
    with open(os.path.join(d, "golden.json"), "w") as f:
        json.dump(golden, f, indent=1)
        f.write("\n")
    size = sum(os.path.getsize(os.path.join(d, x)) for x in os.listdir(d))
    log(f"{name}: {len(cases)} cases, {size / 1024:.0f} KiB, checks {json.dumps(checks)}")
    return model


# --------------------------------------------------------------------------- Qwen3.5

def spec_json(spec_file, heading):
    """The first ```json block after `heading` in a spec file (the tiny configs)."""
    s = open(os.path.join(SPEC, spec_file)).read()
    i = s.index(heading)
    j = s.index("```json", i) + len("```json")
    return json.loads(s[j:s.index("```", j)])


QWEN_TINY = {
    "architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
    "tie_word_embeddings": True,
    "image_token_id": 508, "video_token_id": 509,
    "vision_start_token_id": 506, "vision_end_token_id": 507,
    "text_config": qwen35_text_config(
        vocab=512, hidden=64, ff=128, layers=4, interval=2, head_dim=32,
        linear_head_dims=(16, 32), max_positions=512, eos=1, mrope_section=[2, 1, 1],
        dtype="float32"),
    "vision_config": {
        "model_type": "qwen3_5_vision", "depth": 1, "hidden_size": 32,
        "intermediate_size": 64, "num_heads": 2, "hidden_act": "gelu_pytorch_tanh",
        "in_channels": 3, "patch_size": 4, "temporal_patch_size": 2,
        "spatial_merge_size": 2, "out_hidden_size": 64,
        "num_position_embeddings": 16, "initializer_range": 0.02,
    },
}


def qwen_config(variant):
    c = copy.deepcopy(QWEN_TINY)
    t = c["text_config"]
    if variant == "untied":
        c["tie_word_embeddings"] = False
        t["tie_word_embeddings"] = False
    elif variant == "equal":
        t["linear_num_key_heads"] = 4
        t["linear_num_value_heads"] = 4
        t["linear_key_head_dim"] = 32
        t["linear_value_head_dim"] = 32
    cfg = transformers.Qwen3_5Config(**{k: v for k, v in c.items() if k != "architectures"})
    cfg.architectures = c["architectures"]
    return cfg


def qwen_build(variant, seed):
    def build():
        torch.manual_seed(seed)
        m = transformers.Qwen3_5ForConditionalGeneration(qwen_config(variant))
        lm = m.model.language_model
        scale_linear_(lm)
        normal_(lm.embed_tokens.weight, 0.45)
        if not m.config.tie_word_embeddings:
            normal_(m.lm_head.weight, 0.45)
        for name, p in lm.named_parameters():
            if name.endswith("linear_attn.norm.weight"):
                normal_(p, 0.3)                    # gated norm: plain w
            elif name.endswith("norm.weight"):
                normal_(p, 0.3)                    # zero-centred (1+w) norms
            elif name.endswith("dt_bias"):
                normal_(p, 1.0)
            elif name.endswith("A_log"):
                with torch.no_grad():
                    p.copy_(torch.empty(p.shape).uniform_(0.5, 8.0).log())
            elif name.endswith("conv1d.weight"):
                normal_(p, 0.5)
            elif name.endswith("linear_attn.out_proj.weight"):
                normal_(p, 3.0 / math.sqrt(p.shape[1]))  # gated norm w ~0.3 shrinks its input
        return m
    return build


def qwen_extra(model):
    h = model.config.text_config.hidden_size
    g = torch.Generator().manual_seed(99)
    return {
        "mtp.fc.weight": torch.randn(h, 2 * h, generator=g),
        "mtp.norm.weight": torch.randn(h, generator=g),
        "mtp.layers.0.self_attn.q_proj.weight": torch.randn(16, h, generator=g),
        "model.visual.dummy_skip_me.weight": torch.randn(3, 5, generator=g),
    }


# --------------------------------------------------------------------------- Gemma 4

GEMMA_KV_HEADS = 2


def gemma_config():
    t = spec_json("gemma4.md", "## 8. Tiny test configuration")
    t.pop("architectures", None)
    t.pop("model_type", None)
    # hidden 80 instead of 64: sqrt(80) is not exact in bf16 (spec §8 caveat) and
    # heads*head_dim (64) != hidden (80), like the real models. intermediate stays 128.
    t["hidden_size"] = 80
    assert t["num_key_value_heads"] == GEMMA_KV_HEADS
    text = transformers.Gemma4TextConfig(**t)
    cfg = transformers.Gemma4Config(text_config=text.to_dict(), vision_config=None, audio_config=None,
                                    tie_word_embeddings=True)
    cfg.architectures = ["Gemma4ForConditionalGeneration"]
    return cfg


def gemma_build(seed):
    def build():
        torch.manual_seed(seed)
        m = transformers.Gemma4ForConditionalGeneration(gemma_config())
        lm = m.model.language_model
        scale_linear_(lm)
        normal_(lm.embed_tokens.weight, 0.4)
        normal_(lm.embed_tokens_per_layer.weight, 0.1)
        for name, p in lm.named_parameters():
            if name.endswith("norm.weight"):
                uniform_(p, 0.5, 1.5)              # plain w (not 1+w)
        for layer in lm.layers:
            uniform_(layer.layer_scalar, 0.5, 1.0)
        return m
    return build


def gemma_legacy_config(c):
    """Hub spelling (E2B/E4B config.json): global_head_dim instead of per_layer_config."""
    t = c["text_config"]
    plc = t.pop("per_layer_config")
    hds = {v["head_dim"] for v in plc.values()}
    assert len(hds) == 1 and all(set(v) == {"head_dim"} for v in plc.values()), plc
    t["global_head_dim"] = hds.pop()
    t["num_global_key_value_heads"] = None


def gemma_extra(model):
    """Real E2B/E4B files carry dead k/v/k_norm for kv-shared layers and multimodal towers."""
    t = model.config.text_config
    lm = model.model.language_model
    g = torch.Generator().manual_seed(98)
    ex = {}
    n_layers = len(lm.layers)
    first_shared = n_layers - t.num_kv_shared_layers
    for i in range(first_shared, n_layers):
        attn = lm.layers[i].self_attn
        hd = attn.q_proj.out_features // t.num_attention_heads
        kvh = GEMMA_KV_HEADS
        p = f"model.language_model.layers.{i}.self_attn."
        ex[p + "k_proj.weight"] = torch.randn(kvh * hd, t.hidden_size, generator=g)
        ex[p + "v_proj.weight"] = torch.randn(kvh * hd, t.hidden_size, generator=g)
        ex[p + "k_norm.weight"] = torch.randn(hd, generator=g)
    ex["model.vision_tower.dummy_skip_me.weight"] = torch.randn(4, 4, generator=g)
    ex["model.embed_vision.embedding_projection.weight"] = torch.randn(t.hidden_size, 8, generator=g)
    ex["model.audio_tower.dummy_skip_me.weight"] = torch.randn(4, 4, generator=g)
    return ex


# --------------------------------------------------------------------------- Nemotron-H

def nemotron_config():
    c = spec_json("nemotron_h.md", "## 13. Tiny test configuration")
    c.pop("architectures", None)
    c.pop("model_type", None)
    c["chunk_size"] = 16            # 70/150-token prompts span 5/10 SSD chunks
    c["time_step_limit"] = (0.0, float("inf"))
    cfg = transformers.NemotronHConfig(**c)
    cfg.architectures = ["NemotronHForCausalLM"]
    return cfg


def nemotron_legacy_config(c):
    """Hub spelling: hybrid_override_pattern instead of layers_block_type."""
    chars = {"linear_attention": "M", "mlp": "-", "full_attention": "*", "moe": "E"}
    c["hybrid_override_pattern"] = "".join(chars[t] for t in c.pop("layers_block_type"))
    c["num_hidden_layers"] = len(c["hybrid_override_pattern"])
    c.pop("time_step_limit", None)       # default (0, inf); avoids the non-JSON Infinity


def inv_softplus(y):
    return y + torch.log(-torch.expm1(-y))


def nemotron_build(seed):
    def build():
        torch.manual_seed(seed)
        m = transformers.NemotronHForCausalLM(nemotron_config())
        scale_linear_(m)
        normal_(m.model.embeddings.weight, 1.0)
        normal_(m.lm_head.weight, 0.4)
        for name, mod in m.named_modules():
            if isinstance(mod, transformers.models.nemotron_h.modeling_nemotron_h.NemotronHMamba2Mixer):
                H = mod.num_heads
                with torch.no_grad():
                    mod.A_log.copy_(torch.empty(H).uniform_(0.5, 8.0).log())
                    # dt = softplus(dt_bias) spread over 1e-4 .. 0.5 (log-uniform): low heads
                    # fall under transformers' prefill floor time_step_min = 1e-3.
                    dt = torch.exp(torch.empty(H).uniform_(math.log(1e-4), math.log(0.5)))
                    dt[0] = 2e-4
                    mod.dt_bias.copy_(inv_softplus(dt))
                    uniform_(mod.D, 0.5, 1.5)
                    normal_(mod.conv1d.weight, 0.5)
                    normal_(mod.conv1d.bias, 0.2)
                    uniform_(mod.norm.weight, 0.5, 1.5)
        for name, p in m.named_parameters():
            if name.endswith("norm.weight") and "mixer" not in name:
                uniform_(p, 0.5, 1.5)
        return m
    return build


def nemotron_floor_fraction(model, prompt):
    """Fraction of (token, head) Δ values below time_step_min for one prompt (info only)."""
    hits, total = 0, 0
    acts = {}

    def hook(mod, inp, out):
        acts[mod] = out
    hs = []
    for mod in model.modules():
        if isinstance(mod, transformers.models.nemotron_h.modeling_nemotron_h.NemotronHMamba2Mixer):
            hs.append(mod.in_proj.register_forward_hook(hook))
    with torch.no_grad():
        model(input_ids=torch.tensor([prompt]), use_cache=False)
    for h in hs:
        h.remove()
    for mod in model.modules():
        if mod.__class__.__name__ == "NemotronHMamba2Mixer":
            dt_raw = acts[mod.in_proj][0, :, -mod.num_heads:]
            dlt = torch.nn.functional.softplus(dt_raw + mod.dt_bias)
            hits += int((dlt < mod.config.time_step_min).sum())
            total += dlt.numel()
    return hits / max(total, 1)


def patch_no_floor(model):
    for mod in model.modules():
        if mod.__class__.__name__ == "NemotronHMamba2Mixer":
            mod.time_step_limit = (0.0, float("inf"))


# --------------------------------------------------------------------------- main

def write_source_md(names):
    lines = [
        "# tests/golden: reference fixtures from transformers",
        "",
        "Generated by `make goldens` (tools/goldens/make_goldens.py) on CPU with "
        f"transformers {transformers.__version__}, torch {torch.__version__}, "
        f"numpy {np.__version__}, Python {sys.version.split()[0]}.",
        "Tiny random checkpoints are built with transformers' own classes, randomised "
        "(norm weights, decay parameters, scaled matrices; seeded), saved with "
        "`save_pretrained` and reloaded from disk (`from_pretrained`, eager attention) "
        "before the logits are computed, so the files here are exactly what produced them.",
        "",
        "Format: see the docstring of tools/goldens/make_goldens.py. Each golden.json "
        "has a `checks` object: transformers' own consistency checks for that fixture "
        "(decode vs one-shot, token-by-token vs one-shot, prefill split in two pieces).",
        "",
        "| fixture | what it covers |",
        "|---|---|",
    ]
    what = {
        "qwen35_tiny": "Qwen3.5 spec §11 config via Qwen3_5ForConditionalGeneration: tied, Hv 4 > Hk 2, "
                       "dk 16 != dv 32, GQA 4/2, partial RoPE; extra mtp.* and model.visual.* tensors to skip",
        "qwen35_untied": "as qwen35_tiny with tie_word_embeddings false at both levels (lm_head.weight)",
        "qwen35_equal": "as qwen35_tiny with Hv == Hk == 4 and dk == dv == 32",
        "qwen35_tiny_bf16": "qwen35_tiny's weights cast to bf16, transformers run in bf16 (CPU)",
        "gemma4_tiny": "Gemma 4 spec §8 config (hidden 80) via Gemma4ForConditionalGeneration: sliding + "
                       "full layers, kv sharing of both kinds, double-wide MLP, PLE, softcap; prompts "
                       "longer than the window 8; dead k/v of shared layers and vision/audio tensors added",
        "gemma4_tiny_bf16": "gemma4_tiny's weights in bf16, transformers run in bf16",
        "nemotron_h_tiny": "Nemotron-H spec §13 config (chunk_size 16, n_groups 2, M/-/* mixers); "
                           "stock transformers: dt floored at time_step_min in prefill only",
        "nemotron_h_nofloor": "same checkpoint, transformers patched to clamp dt to (0, inf) "
                              "(the NVIDIA reference behaviour, strata's default)",
    }
    for n in names:
        lines.append(f"| {n} | {what.get(n, '')} |")
    lines += ["", "| fixture | size KiB | dtype | greedy min top-2 margin | worst token-by-token vs one-shot "
              "| decode vs one-shot (greedy rows) |", "|---|---|---|---|---|---|"]
    for n in names:
        d = os.path.join(OUT, n)
        g = json.load(open(os.path.join(d, "golden.json")))
        c = g.get("checks", {})
        size = sum(os.path.getsize(os.path.join(d, x)) for x in os.listdir(d)) // 1024
        step = max((v for k, v in c.items() if k.endswith("stepwise_vs_oneshot_maxdiff")), default=0)
        lines.append(f"| {n} | {size} | {g['dtype']} | {c.get('greedy_min_top2_margin', 0):.3g} | "
                     f"{step:.3g} | {c.get('decode_vs_oneshot_maxdiff', 0):.3g} |")
    lines += [
        "",
        "Notes:",
        "- Nemotron: transformers floors dt at `time_step_min` (1e-3) in every multi-token call "
        "(chunked scan) and not in single-token decode; `golden.json` records it as "
        "`dt_floor_mode` (`prefill_only` or `none`) and `dt_floor_value`. The randomised "
        "dt_bias puts part of the heads under the floor (`dt_below_floor_fraction`).",
        "- bf16 fixtures were computed on CPU; GPU bf16 matmuls round differently, so compare "
        "bf16 logits with a tolerance and greedy tokens only where `greedy_min_top2_margin` is large.",
        "- Regenerate with `make goldens`; total size is kept small (vocab 512).",
        "",
    ]
    with open(os.path.join(OUT, "SOURCE.md"), "w") as f:
        f.write("\n".join(lines))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", default="", help="comma-separated fixture names")
    args = ap.parse_args()
    only = set(filter(None, args.only.split(",")))
    torch.set_num_threads(min(2, os.cpu_count() or 1))
    torch.use_deterministic_algorithms(True)
    os.makedirs(OUT, exist_ok=True)
    log(f"transformers {transformers.__version__}, torch {torch.__version__}")

    done = []

    def want(n):
        return not only or n in only

    f32, bf16 = torch.float32, torch.bfloat16
    Q = transformers.Qwen3_5ForConditionalGeneration
    qinfo = {"notes": "Qwen3.5 tiny (spec qwen35.md §11); mtp.* and model.visual.* tensors must be skipped"}
    q_tiny = None
    if want("qwen35_tiny") or want("qwen35_tiny_bf16"):
        q_tiny = qwen_build("tiny", 1)()
    if want("qwen35_tiny"):
        make_fixture("qwen35_tiny", Q, None, f32, prompts_for(11, 512), qwen_extra, greedy_prompt=greedy_candidates(11, 512), info=qinfo,
                     bf16_from=q_tiny)
        done.append("qwen35_tiny")
    if want("qwen35_untied"):
        make_fixture("qwen35_untied", Q, qwen_build("untied", 2), f32, prompts_for(12, 512), qwen_extra, greedy_prompt=greedy_candidates(12, 512),
                     info=qinfo)
        done.append("qwen35_untied")
    if want("qwen35_equal"):
        make_fixture("qwen35_equal", Q, qwen_build("equal", 3), f32, prompts_for(13, 512), qwen_extra, greedy_prompt=greedy_candidates(13, 512),
                     info=qinfo)
        done.append("qwen35_equal")
    if want("qwen35_tiny_bf16"):
        make_fixture("qwen35_tiny_bf16", Q, None, bf16, prompts_for(11, 512), qwen_extra, greedy_prompt=greedy_candidates(11, 512), info=qinfo,
                     bf16_from=q_tiny)
        done.append("qwen35_tiny_bf16")

    G = transformers.Gemma4ForConditionalGeneration
    ginfo = {"notes": "Gemma 4 tiny (spec gemma4.md §8, hidden 80); raw prompts start with BOS 2; "
                      "dead k_proj/v_proj/k_norm of kv-shared layers and vision/audio tensors must be skipped"}
    g_tiny = None
    if want("gemma4_tiny") or want("gemma4_tiny_bf16"):
        g_tiny = gemma_build(21)()
    if want("gemma4_tiny"):
        make_fixture("gemma4_tiny", G, None, f32, prompts_for(21, 512, first=2), gemma_extra,
                     greedy_prompt=greedy_candidates(21, 512, first=2), info=ginfo,
                     bf16_from=g_tiny)
        done.append("gemma4_tiny")
    if want("gemma4_tiny_bf16"):
        make_fixture("gemma4_tiny_bf16", G, None, bf16, prompts_for(21, 512, first=2), gemma_extra,
                     greedy_prompt=greedy_candidates(21, 512, first=2), config_fix=gemma_legacy_config,
                     info=dict(ginfo, config_style="hub: global_head_dim, no per_layer_config"),
                     bf16_from=g_tiny)
        done.append("gemma4_tiny_bf16")

    N = transformers.NemotronHForCausalLM
    if want("nemotron_h_tiny") or want("nemotron_h_nofloor"):
        n_tiny = nemotron_build(31)()
        prompts = prompts_for(31, 512)
        frac = nemotron_floor_fraction(n_tiny.eval(), prompts[3])
        base = {"notes": "Nemotron-H tiny (spec nemotron_h.md §13, chunk_size 16)",
                "dt_floor_value": n_tiny.config.time_step_min,
                "dt_below_floor_fraction": frac}
        if want("nemotron_h_tiny"):
            make_fixture("nemotron_h_tiny", N, None, f32, prompts, greedy_prompt=greedy_candidates(31, 512),
                         info=dict(base, dt_floor_mode="prefill_only"), bf16_from=n_tiny)
            done.append("nemotron_h_tiny")
        if want("nemotron_h_nofloor"):
            make_fixture("nemotron_h_nofloor", N, None, f32, prompts, patch=patch_no_floor,
                         greedy_prompt=greedy_candidates(31, 512), config_fix=nemotron_legacy_config,
                         info=dict(base, dt_floor_mode="none",
                                   config_style="hub: hybrid_override_pattern, no time_step_limit"),
                         bf16_from=n_tiny)
            done.append("nemotron_h_nofloor")

    names = sorted(x for x in os.listdir(OUT) if os.path.isdir(os.path.join(OUT, x)))
    write_source_md(names)
    total = 0
    for r, _, fs in os.walk(OUT):
        total += sum(os.path.getsize(os.path.join(r, f)) for f in fs)
    log(f"done: {', '.join(done)}; tests/golden total {total / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
