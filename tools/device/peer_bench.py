#!/usr/bin/env python3
"""Peer baseline: transformers at batch 1 on the real model shapes, random weights.

For each model: build it from a config dict (the real text configs of the specs in
/work/shared/spec), directly on the device in bf16 (no download, no CPU init), then
  prefill  = one forward over a 16-token prompt (cache on, last-row logits), median ms
  decode   = 60 greedy tokens, one forward each with the cache, tok/s (after a warm-up)
  peak     = torch.cuda.max_memory_allocated during the model's run
and the device-to-device copy bandwidth, measured once:
  BW = (bytes read + bytes written) / time of one large copy = 2 * N / t.
The decode ceiling is BW / (bytes read per decode token): every weight once except
the input-embedding gathers (the table counts when tied, as it is read as lm_head; Gemma's
per-layer-embedding table never counts). State and KV traffic are left out (< 3 %).

Prints one markdown table on stdout; progress goes to stderr.
  python3 tools/device/peer_bench.py                      # all models, CUDA
  python3 tools/device/peer_bench.py --models qwen3.5-0.8b,gemma4-e2b --quick
  python3 tools/device/peer_bench.py --device cpu --tiny  # tiny configs: checks the logic
"""

import argparse
import gc
import inspect
import json
import os
import statistics
import sys
import time
import warnings

import torch
import transformers

# ---------------------------------------------------------------------------- configs
# Real text configs (spec qwen35.md §1-2, gemma4.md §1.2, nemotron_h.md §2.1).


def qwen35(h, inter, layers, heads, kv, hv, tie):
    return "Qwen3_5ForCausalLM", "Qwen3_5TextConfig", dict(
        vocab_size=248320, hidden_size=h, intermediate_size=inter, num_hidden_layers=layers,
        layer_types=["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(layers)],
        full_attention_interval=4, num_attention_heads=heads, num_key_value_heads=kv, head_dim=256,
        linear_num_key_heads=16, linear_num_value_heads=hv, linear_key_head_dim=128,
        linear_value_head_dim=128, linear_conv_kernel_dim=4, hidden_act="silu", rms_norm_eps=1e-6,
        max_position_embeddings=262144, tie_word_embeddings=tie, eos_token_id=248044,
        attention_bias=False,
        rope_parameters={"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25,
                         "mrope_section": [11, 11, 10], "mrope_interleaved": True})


def gemma4(h, layers, inter, double_wide, kvh, shared, period):
    return "Gemma4ForCausalLM", "Gemma4TextConfig", dict(
        vocab_size=262144, vocab_size_per_layer_input=262144, hidden_size=h, num_hidden_layers=layers,
        intermediate_size=inter, use_double_wide_mlp=double_wide, num_attention_heads=8,
        num_key_value_heads=kvh, head_dim=256, global_head_dim=512, num_global_key_value_heads=None,
        attention_k_eq_v=False, hidden_size_per_layer_input=256, num_kv_shared_layers=shared,
        sliding_window=512,
        layer_types=["full_attention" if i % period == period - 1 else "sliding_attention"
                     for i in range(layers)],
        rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                         "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                            "rope_theta": 1000000.0}},
        max_position_embeddings=131072, final_logit_softcapping=30.0, rms_norm_eps=1e-6,
        hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True, attention_bias=False,
        enable_moe_block=False, pad_token_id=0, bos_token_id=2, eos_token_id=1)


def nemotron_h(**over):
    c = dict(
        vocab_size=131072, hidden_size=3136, num_hidden_layers=42,
        hybrid_override_pattern="M-M-M-MM-M-M*-M-M*-M-M-M*-M-M-MM*-MMM-M-M-",
        num_attention_heads=40, num_key_value_heads=8, head_dim=128, intermediate_size=12544,
        mlp_hidden_act="relu2", mamba_num_heads=96, mamba_head_dim=80, ssm_state_size=128, n_groups=8,
        conv_kernel=4, chunk_size=256, use_conv_bias=True, mamba_hidden_act="silu",
        time_step_min=0.001, time_step_max=0.1, time_step_floor=1e-4, layer_norm_epsilon=1e-5,
        tie_word_embeddings=False, max_position_embeddings=262144, attention_bias=False,
        mlp_bias=False, use_bias=False, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    c.update(over)
    return "NemotronHForCausalLM", "NemotronHConfig", c


MODELS = {
    "qwen3.5-0.8b": qwen35(1024, 3584, 24, 8, 2, 16, True),
    "qwen3.5-2b": qwen35(2048, 6144, 24, 8, 2, 16, True),
    "qwen3.5-4b": qwen35(2560, 9216, 32, 16, 4, 32, True),
    "qwen3.5-9b": qwen35(4096, 12288, 32, 16, 4, 32, False),
    "gemma4-e2b": gemma4(1536, 35, 6144, True, 1, 20, 5),
    "gemma4-e4b": gemma4(2560, 42, 10240, False, 2, 18, 6),
    "nemotron3-nano-4b": nemotron_h(),
}

# The same architectures at toy size (--tiny): exercises every code path in seconds on a CPU.
TINY = {
    "qwen3.5-0.8b": ("Qwen3_5ForCausalLM", "Qwen3_5TextConfig", dict(
        MODELS["qwen3.5-0.8b"][2], vocab_size=512, hidden_size=64, intermediate_size=128,
        num_hidden_layers=4, layer_types=["linear_attention", "full_attention"] * 2,
        full_attention_interval=2, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
        linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
        linear_value_head_dim=32, max_position_embeddings=512, eos_token_id=1,
        rope_parameters={"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25,
                         "mrope_section": [2, 1, 1], "mrope_interleaved": True})),
    "gemma4-e2b": ("Gemma4ForCausalLM", "Gemma4TextConfig", dict(
        MODELS["gemma4-e2b"][2], vocab_size=512, vocab_size_per_layer_input=512, hidden_size=64,
        intermediate_size=128, num_hidden_layers=6,
        layer_types=["sliding_attention", "sliding_attention", "full_attention"] * 2,
        num_kv_shared_layers=3, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        global_head_dim=32, hidden_size_per_layer_input=16, sliding_window=8, max_position_embeddings=256)),
    "nemotron3-nano-4b": nemotron_h(
        vocab_size=512, hidden_size=64, num_hidden_layers=5, hybrid_override_pattern="M-M*-",
        num_attention_heads=4, num_key_value_heads=2, head_dim=24, intermediate_size=160,
        mamba_num_heads=6, mamba_head_dim=12, ssm_state_size=16, n_groups=2, chunk_size=16,
        max_position_embeddings=512),
}


def tiny_spec(name):
    """--tiny: every name of a family takes that family's toy config."""
    for prefix, key in (("qwen3.5-", "qwen3.5-0.8b"), ("gemma4-", "gemma4-e2b"), ("nemotron", "nemotron3-nano-4b")):
        if name.startswith(prefix):
            return TINY[key]
    return None


def log(*a):
    print(*a, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------- measuring

class Clock:
    """Wall time with the device drained at both ends (CUDA work is asynchronous)."""

    def __init__(self, device):
        self.cuda = device.type == "cuda"

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize()

    def now(self):
        self.sync()
        return time.perf_counter()


def copy_bandwidth(device, nbytes, reps):
    """(bytes read + bytes written) / s of a device-to-device copy of nbytes."""
    clock = Clock(device)
    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    src.fill_(7)
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    times = []
    for _ in range(reps):
        t0 = clock.now()
        dst.copy_(src)
        times.append(clock.now() - t0)
    t = statistics.median(times)
    del src, dst
    return 2.0 * nbytes / t


def build(name, spec, device, dtype):
    cls_name, cfg_name, kw = spec
    cls = getattr(transformers, cls_name, None)
    cfg_cls = getattr(transformers, cfg_name, None)
    if cls is None or cfg_cls is None:
        raise RuntimeError(f"transformers {transformers.__version__} has no {cls_name}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = cfg_cls(**kw)
    # Parameters are allocated (and randomly initialised) on the device itself.
    with torch.device(device):
        try:
            model = cls._from_config(cfg, dtype=dtype, attn_implementation="sdpa")
        except TypeError:
            model = cls._from_config(cfg, torch_dtype=dtype, attn_implementation="sdpa")
    model.eval()
    return model


def decode_bytes_per_token(model):
    """Bytes of weights a batch-1 decode step reads (see the module docstring)."""
    params = {id(p): p for p in model.parameters()}
    skip = set()
    emb = model.get_input_embeddings()
    out = model.get_output_embeddings()
    if emb is not None and (out is None or out.weight is not emb.weight):
        skip.add(id(emb.weight))
    for mod_name, mod in model.named_modules():
        if mod_name.endswith("embed_tokens_per_layer"):
            skip.add(id(mod.weight))
    total = sum(p.numel() * p.element_size() for p in params.values())
    read = sum(p.numel() * p.element_size() for k, p in params.items() if k not in skip)
    n = sum(p.numel() for p in params.values())
    return n, total, read


@torch.inference_mode()
def run_model(model, device, prompt_len, gen_len, prefill_reps, warm_decode):
    clock = Clock(device)
    cache_kw = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    vocab = model.config.get_text_config().vocab_size
    g = torch.Generator().manual_seed(1234)
    ids = torch.randint(0, vocab, (1, prompt_len), generator=g).to(device)

    def prefill():
        return model(input_ids=ids, use_cache=True, logits_to_keep=1)

    def decode(out, n):
        cache = out.past_key_values
        tok = out.logits[:, -1:].argmax(-1)
        toks = []
        for _ in range(n):
            out = model(input_ids=tok, use_cache=True, logits_to_keep=1, **{cache_kw: cache})
            cache = out.past_key_values
            tok = out.logits[:, -1:].argmax(-1)
            toks.append(tok)
        return toks

    # warm-up: kernels, allocator, lazy init (a short decode too)
    out = prefill()
    decode(out, warm_decode)
    times = []
    for _ in range(prefill_reps):
        t0 = clock.now()
        out = prefill()
        times.append(clock.now() - t0)
    prefill_ms = statistics.median(times) * 1e3
    t0 = clock.now()
    toks = decode(out, gen_len)
    t_dec = clock.now() - t0
    assert len(toks) == gen_len
    finite = bool(torch.isfinite(out.logits).all())
    return prefill_ms, gen_len / t_dec, finite


def shapes_only(args):
    transformers.logging.set_verbosity_error()
    print("| model | params | weight bytes (bf16) | bytes read per decode token |")
    print("|---|---|---|---|")
    for name in [n.strip() for n in args.models.split(",") if n.strip()]:
        model = build(name, tiny_spec(name) if args.tiny else MODELS[name], torch.device("meta"),
                      torch.bfloat16)
        n, total, read = decode_bytes_per_token(model)
        print(f"| {name} | {n:,} | {total:,} | {read:,} |")
    return 0


def fmt(v, spec):
    return "n/a" if v is None else format(v, spec)


def main():
    ap = argparse.ArgumentParser(description="transformers batch-1 baseline on real shapes")
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated: " + ",".join(MODELS))
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--tiny", action="store_true", help="toy configs of the same architectures")
    ap.add_argument("--quick", action="store_true", help="fewer repetitions, 20 decode tokens")
    ap.add_argument("--prompt-len", type=int, default=16)
    ap.add_argument("--gen-len", type=int, default=None, help="decode tokens (60; --quick 20)")
    ap.add_argument("--copy-mib", type=int, default=None, help="copy-bandwidth buffer (4096 on CUDA)")
    ap.add_argument("--budget-s", type=float, default=330.0, help="skip the models left after this")
    ap.add_argument("--json", default=None, help="also write the results here")
    ap.add_argument("--shapes-only", action="store_true",
                    help="build on the meta device and print parameter counts (no run)")
    args = ap.parse_args()

    t_start = time.perf_counter()
    if args.shapes_only:
        return shapes_only(args)
    device = torch.device(args.device)
    dtype = torch.bfloat16
    gen_len = args.gen_len or (20 if args.quick else 60)
    prefill_reps = 2 if args.quick else 5
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    specs = {n: tiny_spec(n) if args.tiny else MODELS.get(n) for n in names}
    bad = [n for n in names if specs[n] is None]
    if bad:
        ap.error(f"unknown model(s) {bad}; known: {', '.join(MODELS)}")
    torch.manual_seed(0)
    transformers.logging.set_verbosity_error()
    cuda = device.type == "cuda"
    if cuda:
        dev_name = torch.cuda.get_device_name(device)
    else:
        dev_name = f"cpu ({os.cpu_count()} threads)"
    copy_mib = args.copy_mib or (4096 if cuda else 64)
    bw = copy_bandwidth(device, copy_mib << 20, 5 if args.quick else 10)
    log(f"device {dev_name}; copy {copy_mib} MiB: {bw / 1e9:.1f} GB/s (read+write)")

    hdr = (f"transformers {transformers.__version__}, torch {torch.__version__}, {dev_name}, bf16, "
           f"sdpa, batch 1, prompt {args.prompt_len}, decode {gen_len} greedy tokens"
           f"{', TINY configs' if args.tiny else ''}")

    def save(rows):
        """The json after every model: a run stopped by a timeout keeps what it finished."""
        if not args.json:
            return
        tmp = args.json + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"header": hdr, "device": dev_name, "copy_bw": bw, "copy_mib": copy_mib,
                       "transformers": transformers.__version__, "torch": torch.__version__,
                       "gen_len": gen_len, "prompt_len": args.prompt_len, "tiny": args.tiny,
                       "total_s": time.perf_counter() - t_start, "rows": rows}, f, indent=1)
        os.replace(tmp, args.json)

    rows = []
    save(rows)
    for name in names:
        row = {"model": name}
        rows.append(row)
        if time.perf_counter() - t_start > args.budget_s:
            row["error"] = "skipped: time budget"
            continue
        model = None
        try:
            if cuda:
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats(device)
            t0 = time.perf_counter()
            model = build(name, specs[name], device, dtype)
            row["build_s"] = time.perf_counter() - t0
            n, total, read = decode_bytes_per_token(model)
            row.update(params=n, weight_bytes=total, decode_bytes=read)
            pm, tps, finite = run_model(model, device, args.prompt_len, gen_len, prefill_reps,
                                        2 if args.quick else 5)
            row.update(prefill_ms=pm, decode_tok_s=tps, finite_logits=finite,
                       ceiling_tok_s=bw / read, fraction=tps / (bw / read))
            if cuda:
                row["peak_bytes"] = torch.cuda.max_memory_allocated(device)
            log(f"{name}: prefill {pm:.1f} ms, decode {tps:.1f} tok/s, build {row['build_s']:.1f} s")
        except Exception as e:  # one model failing must not lose the others' numbers
            row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
            log(f"{name}: FAILED {row['error']}")
        finally:
            del model
            gc.collect()
            if cuda:
                torch.cuda.empty_cache()
            save(rows)

    print(f"### Peer baseline (transformers eager, random weights)\n\n{hdr}\n")
    print(f"Copy bandwidth {bw / 1e9:.1f} GB/s = (bytes read + bytes written) / time of a "
          f"{copy_mib} MiB device-to-device copy; ceiling = that / weight bytes read per decode token.\n")
    print("| model | params (M) | bytes/token (MB) | prefill 16 tok (ms) | decode (tok/s) "
          "| ceiling (tok/s) | % of ceiling | peak mem (GB) | build (s) | note |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        note = r.get("error", "" if r.get("finite_logits", True) else "non-finite logits")
        print(f"| {r['model']} | {fmt(r.get('params') and r['params'] / 1e6, '.1f')} "
              f"| {fmt(r.get('decode_bytes') and r['decode_bytes'] / 1e6, '.1f')} "
              f"| {fmt(r.get('prefill_ms'), '.1f')} | {fmt(r.get('decode_tok_s'), '.1f')} "
              f"| {fmt(r.get('ceiling_tok_s'), '.0f')} "
              f"| {fmt(r.get('fraction') and 100 * r['fraction'], '.1f')} "
              f"| {fmt(r.get('peak_bytes') and r['peak_bytes'] / 1e9, '.2f')} "
              f"| {fmt(r.get('build_s'), '.1f')} | {note} |")
    total = time.perf_counter() - t_start
    print(f"\nTotal {total:.0f} s.")
    save(rows)
    return 0 if all("error" not in r or r["error"].startswith("skipped") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
