#!/usr/bin/env bash
# `strata bench` on a real checkpoint (the tiny Qwen3.5 golden fixture): it prints every line
# BENCHMARKS.md and tools/device/summarize.py read, with sane values (positive speeds, the
# probes' range in order, a fraction of the roofline in (0, 2)), and a bad model is a clear
# error with exit status 1, not a crash.
set -uo pipefail
BUILD=${BUILD:-build}
S=$BUILD/strata
fail() { echo "FAIL test_bench: $*"; exit 1; }
out=$("$S" bench --model tests/golden/qwen35_tiny --prompt-len 8 --gen-len 40 --threads 2 2>&1) ||
    fail "bench exited $?: $out"
python3 - "$out" <<'PY' || fail "report: $out"
import re, sys
t = sys.argv[1]
def num(pat):
    m = re.search(pat, t, re.M)
    assert m, pat
    return [float(g) for g in m.groups()]
ms, = num(r"^prefill\s+8 tokens in ([0-9.]+) ms")
tps, = num(r"^decode\s+40 tokens, ([0-9.]+) tok/s")
lo, hi = num(r"^read bandwidth\s+([0-9.]+)-([0-9.]+) GB/s \(5 probes around 4 decode segments\)")
roof, = num(r"^roofline\s+([0-9.]+) tok/s")
frac, = num(r"^fraction\s+([0-9.]+) of the memory-read roofline")
assert ms > 0 and tps > 0 and 0 < lo <= hi and roof > 0, t
assert 0 < frac < 2, frac
assert abs(tps / roof - frac) < 0.01 * frac + 1e-3, (tps, roof, frac)
# the CPU backend has no graphs and no device sampler: every step eager, every token the host's
g, e = num(r"^decode steps\s+(\d+) replayed a graph, (\d+) eager")
d, h = num(r"^sampler\s+(\d+) tokens on the device, (\d+) on the host")
assert (g, e, d) == (0, 40, 0) and h == 41, (g, e, d, h)
PY
# --gemv: one line per distinct matmul shape of the tiny model (its projections, MLP and
# head), each with a time and a fraction at m 1 and m 8
out=$("$S" bench --model tests/golden/qwen35_tiny --prompt-len 4 --gen-len 2 --threads 2 --gemv 2>&1) ||
    fail "bench --gemv exited $?: $out"
python3 - "$out" <<'PY' || fail "gemv report: $out"
import re, sys
rows = re.findall(r"^gemv\s+\[(\d+) x (\d+)\] F32: m 1 ([0-9.]+) us [0-9]+ GB/s \(([0-9.]+)\), "
                  r"m 8 ([0-9.]+) us [0-9]+ GB/s \(([0-9.]+)\)$", sys.argv[1], re.M)
shapes = {(int(n), int(k)) for n, k, *_ in rows}
assert len(rows) == len(shapes) >= 5, rows  # distinct shapes, each once
assert (512, 64) in shapes, shapes  # the head: vocab 512 x hidden 64
assert all(float(r[2]) >= 0 and float(r[4]) > 0 for r in rows), rows
PY
# --ple-on-device is a flag (it took the next argument as its value once), and --profile on
# the CPU times a decode step op by op by the host clock: Gemma 4's ops among them, the
# kinds' shares summing to the whole, the step's wall time at least the ops' sum
out=$("$S" bench --model tests/golden/gemma4_tiny --prompt-len 4 --gen-len 2 --threads 2 \
    --profile --ple-on-device 2>&1) || fail "bench --ple-on-device exited $?: $out"
python3 - "$out" <<'PY' || fail "--profile on cpu: $out"
import re, sys
out = sys.argv[1]
head = re.search(r"^profile\s+one decode step, eager: (\d+) ops, ([0-9.]+) ms \(mean of 5 steps\)$",
                 out, re.M)
step = re.search(r"^profile step\s+([0-9.]+) ms wall, ([0-9.]+) ms outside the ops", out, re.M)
rows = re.findall(r"^profile op\s+(\S+)\s+(\d+) ops\s+([0-9.]+) ms\s+([0-9.]+)%$", out, re.M)
assert head and step and rows, out
ops, total = int(head[1]), float(head[2])
kinds = {k: int(n) for k, n, _, _ in rows}
assert ops >= 20 and sum(kinds.values()) == ops, (ops, kinds)
# Gemma 4: the fused GeGLU matmuls, the final softcap, the per-layer scalars and embeddings
assert {"MATMUL", "MATMUL_GLU", "ATTENTION", "ATTN_PREP", "SOFTCAP", "SCALE", "EMBED"} <= set(kinds), kinds
assert kinds["SOFTCAP"] == 1, kinds  # once per step, on the head's logits
assert abs(sum(float(r[3]) for r in rows) - 100) < 1, rows
ms = [float(r[2]) for r in rows]
assert ms == sorted(ms, reverse=True), ms  # most time first
assert float(step[1]) + 0.002 >= total, (step[1], total)
PY
err=$("$S" bench --model /nonexistent/model --gen-len 4 2>&1)
rc=$?
[ $rc -eq 1 ] || fail "bad model: exit $rc ($err)"
grep -q "/nonexistent/model" <<< "$err" || fail "bad model: message does not name it: $err"
echo "test_bench: ok"
