#!/usr/bin/env bash
# `make run` as the README shows it: tools/run.sh serves the demo model, prints a curl
# command, and that command, run exactly as printed, returns a chat completion in
# English; Ctrl-C (SIGINT to the script) stops the server and the script exits 0.
set -uo pipefail
BUILD=${BUILD:-build}
if ! "$BUILD/strata" serve --help > /dev/null 2>&1; then
    echo "skip test_run: $BUILD/strata has no 'serve' command yet"
    exit 0
fi
tmp=$(mktemp -d)
pid=""
cleanup() { [ -n "$pid" ] && kill "$pid" 2> /dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

# as `make run ARGS="--port N"` does, minus the install and build steps done already.
# A background job of a script starts with SIGINT ignored; restore it as a terminal
# has it, so the Ctrl-C below is the one a user sends.
STRATA_RUN_NO_DEPS=1 STRATA_RUN_NO_BUILD=1 BUILD=$BUILD \
    python3 -c 'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execv(sys.argv[1], sys.argv[1:])' \
    tools/run.sh --port "$port" --threads 1 > "$tmp/out" 2>&1 &
pid=$!
line=""
for _ in $(seq 1 600); do
    line=$(grep -m1 '^ *curl ' "$tmp/out" || true)
    [ -n "$line" ] && break
    kill -0 "$pid" 2> /dev/null || break
    sleep 0.1
done
if [ -z "$line" ]; then
    echo "FAIL test_run: tools/run.sh printed no curl command"; cat "$tmp/out"; exit 1
fi
echo "printed: $line"
case $line in *"127.0.0.1:$port/v1/chat/completions"*) ;; *) echo "FAIL test_run: curl does not target port $port"; exit 1 ;; esac
resp=$(bash -c "$line")
echo "response: $resp"
if ! printf '%s' "$resp" | python3 -c '
import json, re, sys
r = json.load(sys.stdin)
text = r["choices"][0]["message"]["content"]
words = re.findall(r"[A-Za-z]+", text)
# the demo model writes King James English: mostly real words, several of them common ones
common = {"the", "and", "of", "to", "unto", "that", "he", "in", "his", "shall", "god", "lord", "they", "is", "was", "for", "him"}
assert len(words) >= 5, text
assert sum(w.lower() in common for w in words) >= 2, text
'; then
    echo "FAIL test_run: the printed curl command did not return an English completion"; exit 1
fi
kill -INT "$pid"
rc=0; wait "$pid" || rc=$?
pid=""
if [ "$rc" != 0 ]; then echo "FAIL test_run: run.sh exited $rc after Ctrl-C"; tail -5 "$tmp/out"; exit 1; fi
echo "PASS test_run"
