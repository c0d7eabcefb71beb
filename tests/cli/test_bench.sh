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
# a backend without device timers says so instead of failing
out=$("$S" bench --model tests/golden/gemma4_tiny --prompt-len 4 --gen-len 2 --threads 2 \
    --profile --ple-on-device 2>&1) || fail "bench --ple-on-device exited $?: $out"
grep -q "^profile  *the cpu backend has no device timers" <<< "$out" || fail "--profile on cpu: $out"
err=$("$S" bench --model /nonexistent/model --gen-len 4 2>&1)
rc=$?
[ $rc -eq 1 ] || fail "bad model: exit $rc ($err)"
grep -q "/nonexistent/model" <<< "$err" || fail "bad model: message does not name it: $err"
echo "test_bench: ok"
