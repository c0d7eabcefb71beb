#!/usr/bin/env bash
# tools/bench-serve.sh - server overhead and batching gain, the issue-4 numbers.
#
# Starts `strata serve` on a model (default: dummy Qwen/Qwen3.5-0.8B weights), runs
# `strata bench-serve` at concurrency 1 and 8 (streaming, ignore_eos, token-id
# prompts), and compares what clients saw with the engine's own inter-token time
# from the same process (/metrics strata:inter_token_latency_seconds, measured on the
# step thread). Also runs `strata bench` (the engine alone, one sequence) first. Prints the
# 8-stream / 1-stream ratio twice: of client output tok/s (prefill and ramp-up included) and
# of steady-state decode (the engine's inter-token time).
# Usage: tools/bench-serve.sh [--model M] [--threads N] [--input-len N] [--output-len N]
#                             [--temperature T]   (0, greedy, by default; 1 is the OpenAI default)
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=Qwen/Qwen3.5-0.8B THREADS=0 IN=16 OUT=32 TEMP=0 BUILD=${BUILD:-build} DUMMY="--load-format dummy"
while [ $# -gt 0 ]; do
    case $1 in
        --model) MODEL=$2; DUMMY=""; [ -d "$2" ] || DUMMY="--load-format dummy"; shift 2 ;;
        --threads) THREADS=$2; shift 2 ;;
        --input-len) IN=$2; shift 2 ;;
        --output-len) OUT=$2; shift 2 ;;
        --temperature) TEMP=$2; shift 2 ;;
        *) echo "usage: $0 [--model M] [--threads N] [--input-len N] [--output-len N] [--temperature T]" >&2; exit 2 ;;
    esac
done
S=$BUILD/strata
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
URL=http://127.0.0.1:$PORT
TMP=$(mktemp -d)
trap 'kill "$SP" 2>/dev/null; wait "$SP" 2>/dev/null; rm -rf "$TMP"' EXIT

echo "== engine alone: strata bench ($MODEL, threads $THREADS)"
$S bench --model "$MODEL" $DUMMY --prompt-len "$IN" --gen-len "$OUT" --threads "$THREADS" 2>&1 | grep -E "decode|prefill"

$S serve --model "$MODEL" $DUMMY --max-seqs 8 --threads "$THREADS" --port "$PORT" --ctx-size 1024 \
    > "$TMP/server.log" 2>&1 &
SP=$!
for _ in $(seq 1 600); do curl -sf "$URL/health" > /dev/null && break; sleep 0.2; done
itl() { curl -s "$URL/metrics" | awk '/^strata:inter_token_latency_seconds_sum/ {s=$2}
                                     /^strata:inter_token_latency_seconds_count/ {c=$2} END {print s, c}'; }
$S bench-serve --url "$URL" --num-prompts 2 --input-len "$IN" --output-len 8 --concurrency 2 --vocab 200000 > /dev/null
for c in 1 8; do
    read -r s0 c0 < <(itl)
    $S bench-serve --url "$URL" --num-prompts $((c == 1 ? 5 : 16)) --input-len "$IN" --output-len "$OUT" \
        --concurrency $c --vocab 200000 --temperature "$TEMP" --json "$TMP/c$c.json" > "$TMP/c$c.txt"
    read -r s1 c1 < <(itl)
    python3 - "$TMP/c$c.json" "$c" "$s0" "$c0" "$s1" "$c1" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
c, s0, c0, s1, c1 = int(sys.argv[2]), *map(float, sys.argv[3:])
eng = (s1 - s0) / (c1 - c0) * 1e3
print(f"== {c} stream(s): {r['output_throughput']:.2f} output tok/s, client TPOT {r['mean_tpot_ms']:.1f} ms "
      f"(p99 {r['p99_tpot_ms']:.1f}), engine inter-token {eng:.1f} ms, server overhead "
      f"{(r['mean_tpot_ms'] / eng - 1) * 100:+.2f}%, TTFT mean {r['mean_ttft_ms']:.0f} ms")
open(sys.argv[1] + ".itl", "w").write(f"{eng}\n")
PY
done
python3 -c "import json; a=json.load(open('$TMP/c1.json')); b=json.load(open('$TMP/c8.json')); \
print(f\"== aggregate at 8 streams / 1 stream: {b['output_throughput'] / a['output_throughput']:.2f}x\")"
# The same ratio for decode alone: tokens per second of the engine's steps (8 per step at
# 8 streams, 1 at 1), without the prefill and ramp-up that the client-side figure includes.
python3 -c "e1=float(open('$TMP/c1.json.itl').read()); e8=float(open('$TMP/c8.json.itl').read()); \
print(f\"== decode tok/s at 8 streams / 1 stream (engine steps): {8 / e8 * 1e3:.1f} / {1 / e1 * 1e3:.1f} = {8 * e1 / e8:.2f}x\")"
