#!/usr/bin/env python3
"""The final summary of tests/device/run.sh: the CUDA test verdicts (the step lines of
tests/device/cuda_tests.sh and the comparisons that failed), the 1,024-token prefill, then
one table of the transformers peer (peer_bench.py --json) next to strata's `bench` output
(its text lines, one file per model).

  python3 tools/device/summarize.py --tests WORK/cuda_steps.txt --prefill WORK/strata_prefill1024.txt \
      --peer OUT/peer.json --strata OUT/strata_qwen3.5-0.8b.txt ...

strata files are parsed from the lines cmd_bench.c prints:
  prefill          16 tokens in 12.34 ms (...)
  decode           60 tokens, 123.45 tok/s (...)
  read bandwidth   4250.00-4300.00 GB/s (5 probes around 4 decode segments)
  fraction         0.812 of the memory-read roofline
  decode steps     60 replayed a graph, 0 eager
  sampler          61 tokens on the device, 0 on the host
A file named strata_<model>.txt belongs to the peer row <model>; a missing or unparsable
file shows as n/a with the reason (the exit status is on the file's last line).
"""

import argparse
import json
import os
import re
import sys

PATTERNS = {
    "prefill_ms": re.compile(r"^prefill\s+\d+ tokens in ([0-9.]+) ms", re.M),
    "decode_tok_s": re.compile(r"^decode\s+\d+ tokens, ([0-9.]+) tok/s", re.M),
    # "52.10 GB/s", or a range "52.10-85.90 GB/s" over the probes around decode segments:
    # the first group is the lowest reading, the optional second the highest
    "read_bw_gbs": re.compile(r"^read bandwidth\s+(?:[0-9.]+-)?([0-9.]+) GB/s", re.M),
    "fraction": re.compile(r"^fraction\s+([0-9.]+)", re.M),
    "graph_steps": re.compile(r"^decode steps\s+(\d+) replayed a graph", re.M),
    "eager_steps": re.compile(r"^decode steps\s+\d+ replayed a graph, (\d+) eager", re.M),
    "dev_tokens": re.compile(r"^sampler\s+(\d+) tokens on the device", re.M),
    "host_tokens": re.compile(r"^sampler\s+\d+ tokens on the device, (\d+) on the host", re.M),
}


def parse_strata(path):
    try:
        text = open(path, errors="replace").read()
    except OSError as e:
        return {"error": str(e)}
    out = {}
    for k, rx in PATTERNS.items():
        m = rx.search(text)
        if m:
            out[k] = float(m.group(1))
    if "decode_tok_s" not in out:
        lines = [x.strip() for x in text.strip().splitlines() if x.strip()]
        status = [x for x in lines if x.startswith("exit status")]
        msg = [x for x in lines if not x.startswith("exit status")]
        named = [x for x in msg if x.startswith("strata:") or "error" in x.lower()]
        err = (named[0] if named else msg[-1] if msg else "no output")[:100]
        if status:
            err = f"{status[-1]}: {err}"
        out["error"] = err.replace("|", "/")
    return out


STEP = re.compile(r"^\S.{27} (PASS|FAIL|SKIP) ")


def print_tests(path):
    """Verdict lines first, then (at most 40) failing comparisons and failed checks."""
    try:
        lines = open(path, errors="replace").read().splitlines()
    except OSError as e:
        print(f"CUDA tests: no results ({e.strerror})\n")
        return
    steps = [x for x in lines if STEP.match(x) or x.startswith(("cuda tests:", "cuda ops:", "cuda_tests.sh exit",
                                                                    "no CUDA backend", "no ", "cublas:"))]
    bad = [x for x in lines if (x.rstrip().endswith(" FAIL") or "CHECK failed" in x or "worst at" in x
                                or "timed out" in x) and not STEP.match(x)]
    print("### CUDA tests\n")
    print("```")
    for x in steps:
        print(x)
    if bad:
        print(f"-- {len(bad)} failing lines{' (first 40)' if len(bad) > 40 else ''}:")
        for x in bad[:40]:
            print(x[:200])
    print("```\n")


def f(v, spec):
    return "n/a" if v is None else format(v, spec)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--peer", help="peer_bench.py --json output")
    ap.add_argument("--strata", nargs="*", default=[], help="strata_<model>.txt files")
    ap.add_argument("--tests", help="tests/device/cuda_tests.sh run output")
    ap.add_argument("--prefill", help="strata bench output of the 1,024-token prefill")
    args = ap.parse_args()

    print("## Device run summary\n")
    if args.tests:
        print_tests(args.tests)
    if args.prefill:
        pf = parse_strata(args.prefill)
        ms = pf.get("prefill_ms")
        print(f"strata prefill, Qwen3.5-2B, 1,024 tokens: {f(ms, '.2f')} ms (target < 40 ms)"
              f"{'' if ms is not None else ': ' + pf.get('error', 'no output')}\n")

    peer = {}
    if args.peer and os.path.exists(args.peer):
        with open(args.peer) as fh:
            peer = json.load(fh)
    prow = {r["model"]: r for r in peer.get("rows", [])}
    srow = {}
    for p in args.strata:
        m = re.match(r"strata_(.+)\.txt$", os.path.basename(p))
        if m:
            srow[m.group(1)] = parse_strata(p)
    models = list(prow) + [m for m in srow if m not in prow]
    bw = peer.get("copy_bw")

    print("### Benchmarks\n")
    if peer:
        print(f"{peer.get('header', '')}")
        print(f"Copy bandwidth (read+write): {f(bw and bw / 1e9, '.0f')} GB/s\n")
    else:
        print("(no peer results)\n")
    print("| model | HF prefill (ms) | HF decode (tok/s) | strata prefill (ms) | strata decode (tok/s) "
          "| strata / HF decode | ceiling (tok/s) | strata % of its roofline "
          "| decode steps: graph / eager | tokens sampled: device / host | note |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for m in models:
        p, s = prow.get(m, {}), srow.get(m, {})
        hf, st = p.get("decode_tok_s"), s.get("decode_tok_s")
        notes = [x for x in (p.get("error") and "HF: " + p["error"],
                             s.get("error") and "strata: " + s["error"]) if x]
        if m not in srow:
            notes.append("strata: not run")
        print(f"| {m} | {f(p.get('prefill_ms'), '.1f')} | {f(hf, '.1f')} | {f(s.get('prefill_ms'), '.1f')} "
              f"| {f(st, '.1f')} | {f(hf and st and st / hf, '.2f')} | {f(p.get('ceiling_tok_s'), '.0f')} "
              f"| {f(s.get('fraction') and 100 * s['fraction'], '.1f')} "
              f"| {f(s.get('graph_steps'), '.0f')} / {f(s.get('eager_steps'), '.0f')} "
              f"| {f(s.get('dev_tokens'), '.0f')} / {f(s.get('host_tokens'), '.0f')} "
              f"| {'; '.join(notes)} |")
    print_gemv(args.strata)
    print_profile(args.strata)
    return 0


GEMV = re.compile(r"^gemv\s+\[(\d+) x (\d+)\] (\w+): m 1 ([0-9.]+) us [0-9]+ GB/s \(([0-9.]+)\), "
                  r"m 8 ([0-9.]+) us [0-9]+ GB/s \(([0-9.]+)\)", re.M)


def strata_texts(paths):
    """(model, text) of each readable strata_<model>.txt."""
    for p in paths:
        m = re.match(r"strata_(.+)\.txt$", os.path.basename(p))
        try:
            text = open(p, errors="replace").read()
        except OSError:
            continue
        yield (m.group(1) if m else p), text


def print_gemv(paths):
    """The per-shape GEMV lines of `bench --gemv`: time and fraction of the copy bandwidth."""
    rows = []
    for model, text in strata_texts(paths):
        for g in GEMV.finditer(text):
            rows.append((model,) + g.groups())
    if not rows:
        return
    print("\n### Decode GEMV per shape (fraction of the copy bandwidth)\n")
    print("| model | W [n x k] | dtype | m 1 (us) | m 1 fraction | m 8 (us) | m 8 fraction |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} x {r[2]} | {r[3]} | {r[4]} | {r[5]} | {r[6]} | {r[7]} |")


PROF_STEP = re.compile(r"^profile\s+one decode step, eager: (\d+) ops, ([0-9.]+) ms", re.M)
PROF_OP = re.compile(r"^profile op\s+(\S+)\s+(\d+) ops\s+([0-9.]+) ms\s+([0-9.]+)%", re.M)


def print_profile(paths, top=6):
    """The `bench --profile` lines: one eager decode step's device time by kind of op."""
    rows = []
    for model, text in strata_texts(paths):
        step = PROF_STEP.search(text)
        if not step:
            continue
        ops = PROF_OP.findall(text)[:top]
        rows.append((model, step.group(1), step.group(2),
                     ", ".join(f"{o} {c}x {ms} ms ({pc}%)" for o, c, ms, pc in ops)))
    if not rows:
        return
    print("\n### One eager decode step, device time by op (bench --profile)\n")
    print("| model | ops | ms | the largest kinds |")
    print("|---|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} |")


if __name__ == "__main__":
    sys.exit(main())
