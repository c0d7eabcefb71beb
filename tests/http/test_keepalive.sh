#!/usr/bin/env bash
# SSE keep-alives (--sse-keepalive): ': keep-alive' comments while a stream waits in
# the queue or in a long prefill, only between events, none once it ended, none with
# 0 (set through the environment here), none for non-stream requests; the openai SDK
# reads such a stream; a queued stream already answered 200 gets its 503 in-stream.
source "$(dirname "$0")/lib.sh"
L=tests/http/keepalive_test.py
# The tiny checkpoint's architecture with random weights, wide enough that a token
# takes milliseconds: waits of seconds from one long request instead of hundreds.
MODEL=$TMP/ka_model
mkdir -p "$MODEL"
cp tests/http/fixtures/tokenizer.json tests/http/fixtures/tokenizer_config.json "$MODEL/"
python3 - "$MODEL" <<'PY' || fail "model config"
import json, sys
c = json.load(open("tests/golden/qwen35_tiny/config.json"))
c["text_config"].update(hidden_size=1024, intermediate_size=4096, num_hidden_layers=8,
                        layer_types=["linear_attention", "full_attention"] * 4, head_dim=64,
                        num_attention_heads=8, num_key_value_heads=2, linear_key_head_dim=64,
                        linear_value_head_dim=64, linear_num_key_heads=8,
                        linear_num_value_heads=16, vocab_size=32768, max_position_embeddings=2048)
json.dump(c, open(sys.argv[1] + "/config.json", "w"))
PY
export MODEL
DUMMY=(--device cpu --load-format dummy --tokenizer "$MODEL" --ctx-size 2048 --max-seqs 1)

http_start "${DUMMY[@]}" --prefill-chunk 1 --sse-keepalive 1 --shutdown-timeout 0
timeout 60 python3 $L on || fail "keep-alive on"
timeout 60 python3 $L cutoff "$SRV_PID" || fail "cutoff of a queued stream"
for _ in $(seq 1 300); do kill -0 "$SRV_PID" 2>/dev/null || break; sleep 0.1; done
wait "$SRV_PID"; rc=$?; SRV_PID=""
[ "$rc" = 0 ] || fail "exit status $rc after SIGTERM"
grep -q "AddressSanitizer\|LeakSanitizer\|runtime error" "$TMP/server.log" && fail "sanitizer report"

STRATA_SSE_KEEPALIVE=0 http_start "${DUMMY[@]}"
timeout 60 python3 $L off || fail "keep-alive off"
http_stop
echo "test_keepalive: ok"
