#!/usr/bin/env bash
# test_serve_exit.sh - `strata serve` exits non-zero, saying why, on every start-up
# failure, with the status README "Running it in production" lists: 2 for a bad
# configuration, 3 when it cannot listen, 4 when the model does not load (missing
# directory, broken checkpoint, --device cuda without CUDA, a download that fills
# the disk). systemd's Restart=on-failure and Kubernetes' restart policy rely on it.
# Before the fix a model that failed to load exited 0.
source "$(dirname "$0")/../http/lib.sh"
MOCK_PID=""
MNT=""
cleanup_all() {
    [ -n "$MOCK_PID" ] && kill "$MOCK_PID" 2>/dev/null
    [ -n "$MNT" ] && umount "$MNT" 2>/dev/null
    http_cleanup
}
trap cleanup_all EXIT

# serve_rc WANT WHAT [args...]: runs serve to its end (60 s at most), checks the
# status and that the last line of stderr names the failure.
serve_rc() {
    local want=$1 what=$2
    shift 2
    local port rc=0
    port=$(http_free_port)
    timeout 60 "$STRATA" serve --port "$port" --threads 1 "$@" > "$TMP/exit.log" 2>&1 || rc=$?
    [ "$rc" = "$want" ] || { cat "$TMP/exit.log" >&2; fail "$what: exit status $rc, want $want"; }
    grep -q "$what" "$TMP/exit.log" || { cat "$TMP/exit.log" >&2; fail "$what: not said"; }
    echo "ok: exit $rc: $what"
}

# 2: configuration
serve_rc 2 "max-seqs" --model models/demo --max-seqs 0
serve_rc 2 "unknown" --model models/demo --no-such-flag 1
serve_rc 2 "model is required"
serve_rc 2 "not an IPv4 address" --model models/demo --host nowhere

# 3: the port is taken
python3 -c 'import socket,sys,time
s=socket.socket(); s.bind(("127.0.0.1",0)); s.listen(); print(s.getsockname()[1], flush=True); time.sleep(60)' \
    > "$TMP/holder.port" &
HOLDER=$!
for _ in $(seq 50); do [ -s "$TMP/holder.port" ] && break; sleep 0.1; done
rc=0
timeout 60 "$STRATA" serve --model models/demo --port "$(cat "$TMP/holder.port")" > "$TMP/exit.log" 2>&1 || rc=$?
kill "$HOLDER" 2>/dev/null
[ "$rc" = 3 ] && grep -q "cannot listen" "$TMP/exit.log" || { cat "$TMP/exit.log"; fail "port in use: exit $rc"; }
echo "ok: exit 3: port in use"
# a second strata on the same port is refused too (no SO_REUSEPORT sharing)
http_start
rc=0
timeout 60 "$STRATA" serve --model models/demo --port "$PORT" > "$TMP/exit.log" 2>&1 || rc=$?
[ "$rc" = 3 ] || { cat "$TMP/exit.log"; fail "a second server on a used port: exit $rc"; }
http_stop
echo "ok: exit 3: a second server on the same port"

# 4: the model does not load
serve_rc 4 "no model directory" --model "$TMP/nothing-here"
BROKEN=$TMP/broken
mkdir -p "$BROKEN"
cp tests/golden/qwen35_tiny/config.json "$BROKEN/"
head -c 4000 tests/golden/qwen35_tiny/model.safetensors > "$BROKEN/model.safetensors"
serve_rc 4 "model.safetensors" --model "$BROKEN"
printf '{"model_type": "qwen3_5", "text_config": ' > "$BROKEN/config.json"
serve_rc 4 "config.json" --model "$BROKEN"
if ! nvidia-smi > /dev/null 2>&1; then
    serve_rc 4 "CUDA" --model models/demo --device cuda
else
    echo "skip: --device cuda without CUDA (this machine has a GPU)"
fi

# 4: a download that fills the disk (the mock hub of tests/hub, a 1 MiB tmpfs; a
# file-size limit where no tmpfs can be mounted)
python3 tests/hub/mock_hub.py --port-file "$TMP/ports" &
MOCK_PID=$!
for _ in $(seq 100); do [ -f "$TMP/ports" ] && break; sleep 0.05; done
HUB=http://127.0.0.1:$(python3 -c "import json;print(json.load(open('$TMP/ports'))['hub'])")
CACHE=$TMP/small
mkdir -p "$CACHE"
limit=""
if mount -t tmpfs -o size=256k tmpfs "$CACHE" 2>/dev/null; then
    MNT=$CACHE
    say="disk space"
else
    limit="ulimit -f 200; trap '' XFSZ;"
    say="loading strata-test/tiny failed"
fi
rc=0
port=$(http_free_port)
env -u HF_TOKEN -u HF_HUB_OFFLINE HF_HOME="$TMP/home" HF_ENDPOINT="$HUB" HF_HUB_CACHE="$CACHE" \
    timeout 60 bash -c "$limit exec \"$STRATA\" serve --model strata-test/tiny --port $port --threads 1" \
    > "$TMP/exit.log" 2>&1 || rc=$?
[ "$rc" = 4 ] && grep -q "$say" "$TMP/exit.log" || { cat "$TMP/exit.log"; fail "disk full: exit $rc"; }
echo "ok: exit 4: disk full during the download"
echo "test_serve_exit: ok"
