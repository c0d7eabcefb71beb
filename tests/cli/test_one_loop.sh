#!/usr/bin/env bash
# One forward loop: `strata bench`, `strata generate` and `strata serve` all run their
# sequences through the engine's step loop, so on the demo model the greedy tokens bench
# times are the ones generate prints and the text serve answers with, for the same
# prompt. Before, bench and generate each ran a decode loop of their own.
source "$(dirname "$0")/../http/lib.sh"
N=24
out=$("$STRATA" bench --model models/demo --prompt-len 12 --gen-len $((N - 1)) --threads 2 --print-tokens) ||
    fail "bench: $out"
prompt=$(sed -n 's/^prompt ids *//p' <<< "$out")
bench_ids=$(sed -n 's/^generated ids *//p' <<< "$out")
bench_text=$(sed -n 's/^generated text   //p' <<< "$out")
[ -n "$prompt" ] && [ -n "$bench_ids" ] && [ -n "$bench_text" ] || fail "bench printed no tokens: $out"
[ "$(tr ',' '\n' <<< "$bench_ids" | wc -l)" = $N ] || fail "bench made not $N tokens: $bench_ids"

gen=$("$STRATA" generate --model models/demo --prompt-ids "$prompt" --max-tokens $N --ignore-eos \
    --temperature 0 --threads 2) || fail "generate: $gen"
gen_ids=$(python3 -c 'import json,sys; print(",".join(map(str, json.loads(sys.argv[1])["ids"])))' "$gen")
[ "$gen_ids" = "$bench_ids" ] || fail "generate ids $gen_ids != bench ids $bench_ids"

python3 -c 'import json,sys; sys.exit("logprobs" in json.loads(sys.argv[1]))' "$gen" ||
    fail "generate printed logprobs nobody asked for: $gen"
gen_lp=$("$STRATA" generate --model models/demo --prompt-ids "$prompt" --max-tokens $N --ignore-eos \
    --temperature 0 --threads 2 --logprobs 3) || fail "generate --logprobs: $gen_lp"

MODEL=models/demo http_start --max-seqs 2
body=$(python3 -c 'import json,sys; print(json.dumps({"prompt": [int(x) for x in sys.argv[1].split(",")],
    "max_tokens": int(sys.argv[2]), "temperature": 0, "ignore_eos": True, "logprobs": 3}))' "$prompt" $N)
srv=$(post /v1/completions "$body")
http_stop
srv_text=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["choices"][0]["text"])' "$srv")
[ "$srv_text" = "$bench_text" ] || fail "serve text '$srv_text' != bench text '$bench_text'"
# generate --logprobs N: each token's logprob, the server's for the same request, and its N
# most likely tokens in order, the greedy choice first
python3 - "$gen_lp" "$srv" $N <<'PY' || fail "generate --logprobs disagrees with the server"
import json, sys
gen, srv, n = json.loads(sys.argv[1]), json.loads(sys.argv[2]), int(sys.argv[3])
want = srv["choices"][0]["logprobs"]["token_logprobs"]
lp = gen["logprobs"]
assert len(lp) == n == len(want), (len(lp), len(want))
for t, w in zip(lp, want):
    top = [a["logprob"] for a in t["top"]]
    assert abs(t["logprob"] - w) <= 1e-5, (t, w)
    assert len(top) == 3 and top == sorted(top, reverse=True) and t["top"][0]["id"] == t["id"], t
    assert t["logprob"] == top[0] and top[0] <= 0, t
PY
echo "test_one_loop: ok (bench, generate and serve agree on $N greedy tokens and their logprobs)"
