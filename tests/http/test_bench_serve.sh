#!/usr/bin/env bash
# strata bench-serve against the tiny server: every request completes with exactly
# --output-len tokens, the report and its JSON hold the vllm-bench metrics.
source "$(dirname "$0")/lib.sh"
http_start --max-seqs 4
"$STRATA" bench-serve --url "$BASE" --num-prompts 12 --input-len 16 --output-len 20 --concurrency 4 \
    --vocab 512 --json "$TMP/bs.json" > "$TMP/bs.txt" || fail "bench-serve (ids)"
cat "$TMP/bs.txt"
"$STRATA" bench-serve --url "$BASE" --endpoint chat --num-prompts 6 --input-len 8 --output-len 5 \
    --request-rate 50 --seed 3 > /dev/null || fail "bench-serve (chat, Poisson)"
python3 - "$TMP/bs.json" <<'PY' || fail "bench-serve json"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["completed"] == 12 and r["failed"] == 0, r
assert r["total_output_tokens"] == 12 * 20 and r["total_input_tokens"] == 12 * 16, r
for k in ("ttft", "tpot", "itl", "e2el"):
    assert 0 < r[f"mean_{k}_ms"] and r[f"median_{k}_ms"] <= r[f"p99_{k}_ms"], (k, r)
assert r["output_throughput"] > 0 and r["request_throughput"] > 0
PY
grep -q "Time to First Token" "$TMP/bs.txt" || fail "report"
# sampled requests (the OpenAI default temperature), four rows per step picked side by side
# on the CPU pool: every one completes with its length
"$STRATA" bench-serve --url "$BASE" --num-prompts 8 --input-len 8 --output-len 12 --concurrency 4 \
    --vocab 512 --temperature 1 --json "$TMP/t1.json" > /dev/null || fail "bench-serve (temperature 1)"
python3 -c "import json,sys; r=json.load(open(sys.argv[1])); \
assert r['completed'] == 8 and r['failed'] == 0 and r['total_output_tokens'] == 96, r" "$TMP/t1.json" ||
    fail "bench-serve (temperature 1) json"
"$STRATA" bench-serve --url "$BASE" --temperature 2.5 > /dev/null 2>&1
[ $? -eq 2 ] || fail "bench-serve --temperature 2.5 must be refused (exit 2)"
http_stop
echo "test_bench_serve: ok"
