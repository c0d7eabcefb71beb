# lib.sh - sourced by tests/http/test_*.sh: a real `strata serve` on a free loopback
# port over the tiny Qwen3.5 checkpoint (tests/golden/qwen35_tiny) with the test
# tokenizer (tests/http/fixtures). The server is always stopped on exit.
set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
BUILD=${BUILD:-build}
STRATA=$ROOT/$BUILD/strata
TMP=$(mktemp -d /tmp/strata-http.XXXXXX)
SRV_PID=""
export PYTHONPATH="$ROOT/tests/http${PYTHONPATH:+:$PYTHONPATH}"
# ASan builds: no leak report from the short-lived helpers, a leak report from the
# server fails its exit status (checked by http_stop).
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}

http_cleanup() {
    if [ -n "$SRV_PID" ] && kill -0 "$SRV_PID" 2>/dev/null; then
        kill -KILL "$SRV_PID" 2>/dev/null
        wait "$SRV_PID" 2>/dev/null
    fi
    rm -rf "$TMP"
}
trap http_cleanup EXIT

fail() { echo "FAIL: $*" >&2; [ -f "$TMP/server.log" ] && tail -n 40 "$TMP/server.log" >&2; exit 1; }

# A model directory: the tiny checkpoint plus the test tokenizer and chat template.
http_model_dir() {
    local d=$TMP/model
    mkdir -p "$d"
    for f in config.json model.safetensors generation_config.json; do
        ln -sf "$ROOT/tests/golden/qwen35_tiny/$f" "$d/$f"
    done
    cp tests/http/fixtures/tokenizer.json tests/http/fixtures/tokenizer_config.json "$d/"
    echo "$d"
}

http_free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# http_start [extra serve flags...]: starts the server, waits until /health is 200.
http_start() {
    [ -x "$STRATA" ] || fail "$STRATA not built"
    MODEL=${MODEL:-$(http_model_dir)}
    PORT=$(http_free_port)
    BASE=http://127.0.0.1:$PORT
    export BASE PORT MODEL
    "$STRATA" serve --model "$MODEL" --port "$PORT" --served-model-name tiny --threads 2 \
        --ctx-size 256 "$@" > "$TMP/server.log" 2>&1 &
    SRV_PID=$!
    for _ in $(seq 1 300); do
        if curl -sf "$BASE/health" > /dev/null 2>&1; then return 0; fi
        kill -0 "$SRV_PID" 2>/dev/null || fail "server exited during start"
        sleep 0.1
    done
    fail "server not ready after 30 s"
}

# http_stop: SIGTERM, the drain must finish and the process exit 0 (no ASan report).
http_stop() {
    [ -n "$SRV_PID" ] || return 0
    kill -TERM "$SRV_PID"
    local rc=0
    for _ in $(seq 1 300); do
        kill -0 "$SRV_PID" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$SRV_PID" 2>/dev/null; then fail "server still running 30 s after SIGTERM"; fi
    wait "$SRV_PID" || rc=$?
    SRV_PID=""
    [ "$rc" -eq 0 ] || fail "server exit status $rc after SIGTERM"
    grep -q "ERROR: AddressSanitizer\|runtime error:\|LeakSanitizer" "$TMP/server.log" && fail "sanitizer report"
    return 0
}

# json_get URL: GET, print body; post URL BODY: POST JSON, print body.
post() { curl -s -X POST -H 'Content-Type: application/json' --data-binary "$2" "$BASE$1"; }
status_of() { curl -s -o /dev/null -w '%{http_code}' "$@"; }

# http_sdk_twice SCRIPT KEY PACKAGE...: skip (exit 0) when a Python package is missing;
# else run tests/http/SCRIPT against a server of 4 sequences, then against one that wants
# the API key KEY (the script reads it from $KEY).
http_sdk_twice() {
    local script=$1 key=$2
    shift 2
    if ! python3 -c "import $(IFS=,; echo "$*")" 2>/dev/null; then
        echo "SKIP: a package of: $* is not installed (run tools/install-deps.sh)"
        exit 0
    fi
    http_start --max-seqs 4
    timeout 300 python3 "tests/http/$script" || fail "$script"
    http_stop
    KEY=$key http_start --max-seqs 4 --api-key "$key"
    KEY=$key timeout 300 python3 "tests/http/$script" || fail "$script with a key"
    http_stop
}
