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
# The vLLM names the Gateway API Inference Extension's endpoint picker reads
# (docs/deploy.md, "Several pods behind an inference gateway"): present, typed gauge, and
# equal to their strata: twins in every scrape taken while requests run and queue
# (--max-seqs 2, six concurrent requests).
python3 - "$BASE" <<'PY' || fail "vllm: metric names"
import json, sys, threading, time, urllib.request
base = sys.argv[1]
pairs = {"vllm:num_requests_waiting": "strata:num_requests_waiting",
         "vllm:num_requests_running": "strata:num_requests_running",
         "vllm:kv_cache_usage_perc": "strata:kv_cache_usage_perc",
         "vllm:gpu_cache_usage_perc": "strata:kv_cache_usage_perc"}
def scrape():
    text = urllib.request.urlopen(base + "/metrics", timeout=10).read().decode()
    types, vals = {}, {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, typ = line.split(" ")
            types[name] = typ
        elif line and not line.startswith("#"):
            k, v = line.rsplit(" ", 1)
            name = k.split("{")[0]
            assert name not in vals or not name.startswith(("vllm:", "strata:num", "strata:kv")), line
            vals[name] = (k, float(v))
    return text, types, vals
text, types, vals = scrape()
for v, s in pairs.items():
    assert types.get(v) == "gauge", (v, types.get(v))
    assert vals[v][0] == v + '{model_name="tiny"}', vals[v][0]
for absent in ("vllm:lora_requests_info", "vllm:cache_config_info"):
    assert absent not in text, absent  # not measured by strata: not exported
def one(i):
    body = json.dumps({"prompt": "Hello %d" % i, "max_tokens": 120, "ignore_eos": True}).encode()
    req = urllib.request.Request(base + "/v1/completions", body, {"Content-Type": "application/json"})
    urllib.request.urlopen(req, timeout=60).read()
threads = [threading.Thread(target=one, args=(i,)) for i in range(6)]
for t in threads: t.start()
seen = {k: 0.0 for k in pairs}
n = 0
while any(t.is_alive() for t in threads):
    _, _, vals = scrape()
    n += 1
    for v, s in pairs.items():
        assert vals[v][1] == vals[s][1], (v, vals[v][1], s, vals[s][1])
        seen[v] = max(seen[v], vals[v][1])
    assert 0 <= vals["vllm:kv_cache_usage_perc"][1] <= 1
    assert vals["vllm:num_requests_running"][1] <= 2
for t in threads: t.join()
assert all(x > 0 for x in seen.values()), (n, seen)  # the load showed in every series
for _ in range(50):  # and drain back to 0 (a slot is freed just after its last token)
    _, _, vals = scrape()
    if all(vals[v][1] == 0 for v in pairs):
        break
    time.sleep(0.1)
assert all(vals[v][1] == 0 for v in pairs), vals
print("vllm: names: typed gauge, equal to strata: in %d scrapes under load, max %s" % (n, seen))
PY
grep -q "choice 0: prompt" "$TMP/server.log" || fail "--log-requests wrote no request line"
grep -q "Hello" "$TMP/server.log" && fail "--log-requests must not log content"
http_stop
echo "test_metrics: ok"
