#!/usr/bin/env bash
# /metrics after real traffic: the Prometheus text format passes `promtool check
# metrics` (or prometheus_client's parser when promtool is missing), and the series
# count what happened.
source "$(dirname "$0")/lib.sh"
http_start --max-seqs 2 --log-requests
for i in 1 2 3; do post /v1/completions '{"prompt":"Hello","max_tokens":5,"ignore_eos":true}' > /dev/null; done
post /v1/chat/completions '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":4,"stream":true,"ignore_eos":true}' > /dev/null
post /v1/completions '{"prompt":"Hello","max_tokens":1000}' > /dev/null   # 400: context
curl -s "$BASE/metrics" > "$TMP/metrics.txt"
if command -v promtool > /dev/null; then
    # promtool's linter objects to ':' in names, which vLLM's convention (and the
    # strata: prefix asked for) uses; every other finding fails the test
    out=$(promtool check metrics < "$TMP/metrics.txt" 2>&1); rc=$?
    bad=$(echo "$out" | grep -v "metric names should not contain ':'" | grep -v '^$')
    [ "$rc" = 0 ] || [ "$rc" = 3 ] || fail "promtool exit $rc: $out"
    [ -z "$bad" ] || fail "promtool: $bad"
    echo "promtool: ok (only the ':' naming lint)"
fi
python3 - "$TMP/metrics.txt" <<'PY' || fail "metrics content"
import sys
text = open(sys.argv[1]).read()
try:
    from prometheus_client.parser import text_string_to_metric_families
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    print("prometheus_client parser: ok,", len(fams), "families")
except ImportError:
    print("prometheus_client not installed: parser check skipped")
vals = {}
for line in text.splitlines():
    if line and not line.startswith("#"):
        k, v = line.rsplit(" ", 1)
        vals[k] = float(v)
def get(prefix):
    return sum(v for k, v in vals.items() if k.startswith(prefix))
assert get('strata:request_success_total{finished_reason="length"') == 4, vals
assert get("strata:time_to_first_token_seconds_count") == 4
assert get("strata:e2e_request_latency_seconds_count") == 4
assert get("strata:request_queue_time_seconds_count") == 4
assert get("strata:inter_token_latency_seconds_count") == 3 * 4 + 3
assert get("strata:generation_tokens_total") == 19
assert get("strata:prompt_tokens_total") > 0
assert get("strata:num_requests_running") == 0 and get("strata:num_requests_waiting") == 0
assert get("strata:kv_cache_usage_perc") == 0
assert get('strata:request_rejected_total{model_name="tiny",status="400"}') == 1
for name in ("time_to_first_token_seconds", "inter_token_latency_seconds", "e2e_request_latency_seconds",
             "request_queue_time_seconds"):
    b = [v for k, v in vals.items() if k.startswith(f"strata:{name}_bucket")]
    assert b == sorted(b), name  # cumulative
print("metrics values: ok")
PY
grep -q "choice 0: prompt" "$TMP/server.log" || fail "--log-requests wrote no request line"
grep -q "Hello" "$TMP/server.log" && fail "--log-requests must not log content"
http_stop
echo "test_metrics: ok"
