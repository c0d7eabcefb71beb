#!/usr/bin/env python3
"""fla_bench.py - the kernel-level peer of strata's chunked delta rule on the GPU machine:
flash-linear-attention's Triton chunk_gated_delta_rule (the kernel transformers uses for
Qwen3.5 when it is installed) on the shapes test_cuda_ops --prefill-speed times strata's
gdn op on: one sequence of T tokens, Qwen3.5-9B's heads (16 key heads, 32 value heads,
dk = dv = 128), bf16, q and k l2-normalised in the kernel, chunk 64 (the library's).

Usage: fla_bench.py --wheels DIR [--tokens 4096] [--reps 10]
The wheels (fla-core, einops) are unpacked into a temporary folder and put on sys.path:
the machine has no network. Prints one line per shape: forward ms (median of reps)."""
import argparse
import statistics
import sys
import tempfile
import zipfile
from pathlib import Path


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--wheels", required=True)
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--reps", type=int, default=10)
    args = ap.parse_args()
    lib = tempfile.mkdtemp(prefix="fla-")
    wheels = sorted(Path(args.wheels).glob("*.whl"))
    if not wheels:
        print(f"fla_bench: no wheels in {args.wheels}")
        return 1
    for w in wheels:
        zipfile.ZipFile(w).extractall(lib)
    sys.path.insert(0, lib)
    import torch
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule

    if not torch.cuda.is_available():
        print("fla_bench: no CUDA device")
        return 1
    dev, T, Hk, Hv, D = "cuda", args.tokens, 16, 32, 128
    g0 = torch.Generator(device=dev).manual_seed(0)
    q = torch.randn(1, T, Hk, D, device=dev, generator=g0, dtype=torch.bfloat16)
    k = torch.randn(1, T, Hk, D, device=dev, generator=g0, dtype=torch.bfloat16)
    v = torch.randn(1, T, Hv, D, device=dev, generator=g0, dtype=torch.bfloat16)
    # GQA as Qwen3.5's reference does it: key heads repeated to the value heads
    q, k = (x.repeat_interleave(Hv // Hk, dim=2) for x in (q, k))
    g = torch.nn.functional.logsigmoid(torch.randn(1, T, Hv, device=dev, generator=g0)).float()
    beta = torch.rand(1, T, Hv, device=dev, generator=g0).to(torch.bfloat16)
    s0 = torch.zeros(1, Hv, D, D, device=dev, dtype=torch.float32)

    def run():
        return chunk_gated_delta_rule(q, k, v, g=g, beta=beta, initial_state=s0,
                                      output_final_state=True, use_qk_l2norm_in_kernel=True)

    for _ in range(3):  # Triton compiles on the first calls
        run()
    torch.cuda.synchronize()
    times = []
    for _ in range(args.reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        run()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    print(f"fla chunk_gated_delta_rule: {T} tokens, Hk {Hk} Hv {Hv} dk dv {D}, bf16: "
          f"{statistics.median(times):.3f} ms (median of {args.reps})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
