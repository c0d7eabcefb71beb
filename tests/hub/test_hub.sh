#!/usr/bin/env bash
# test_hub.sh - `strata pull` against a real HTTP mock of the Hugging Face hub
# (tests/hub/mock_hub.py, loopback, free ports) and against huggingface_hub itself.
# Covers: fresh download and the exact cache layout, reuse without a request, offline
# mode, revision pinning (branch and commit), resume of a partial .incomplete file, a
# connection dropped mid-file, Ctrl-C and resume, corrupt content, gated/missing repos
# and files, bad ids, a full disk, and both directions of cache sharing with Python.
# Run from the repo root with BUILD set (tests/run.sh does); takes a few seconds.
# The awk programs given to log_where are single-quoted on purpose.
# shellcheck disable=SC2016
set -u
BUILD=${BUILD:-build}
STRATA=$(realpath "$BUILD/strata")
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=$(mktemp -d /tmp/strata-hub.XXXXXX)
MOCK_PID=
MNT=
fails=0
passes=0

cleanup() {
    [ -n "$MOCK_PID" ] && kill "$MOCK_PID" 2>/dev/null
    [ -n "$MNT" ] && umount "$MNT" 2>/dev/null
    rm -rf "$WORK"
}
trap cleanup EXIT

check() { # check "what" <command...>: one assertion
    local what=$1
    shift
    if "$@"; then
        passes=$((passes + 1))
    else
        fails=$((fails + 1))
        echo "FAIL: $what"
        echo "  stderr of the last pull:"
        sed 's/^/    /' "$WORK/err" 2>/dev/null | tail -n 8
    fi
}

python3 "$HERE/mock_hub.py" --port-file "$WORK/ports" &
MOCK_PID=$!
for _ in $(seq 100); do [ -f "$WORK/ports" ] && break; sleep 0.05; done
HUB=http://127.0.0.1:$(python3 -c "import json;print(json.load(open('$WORK/ports'))['hub'])")

ctl() { curl -sf "$HUB/_mock/$1"; }
count() { ctl "stats?format=tsv" | wc -l; }
# Prints the requests (since the last reset) matching an awk condition over the fields
# $1 server (hub/cdn), $2 method, $3 path, $4 Range, $5 Authorization, $6
# Accept-Encoding ("-" when absent); in it, sha is the first shard's etag.
log_where() { ctl "stats?format=tsv" | awk -F'\t' -v sha="${SHARD1_ETAG:-}" "$1"; }
ctl info > "$WORK/info.json"
commit_of() { python3 -c "import json;print(json.load(open('$WORK/info.json'))['$1']['refs']['$2'])"; }
etag_of() { python3 -c "import json;print(json.load(open('$WORK/info.json'))['$1']['files']['$2']['$3']['etag'])"; }
C_MAIN=$(commit_of strata-test/tiny main)
C_V1=$(commit_of strata-test/tiny v1)
SHARD1=model-00001-of-00002.safetensors
SHARD1_ETAG=$(etag_of strata-test/tiny "$C_MAIN" $SHARD1)

# pull CACHE [args...]: runs strata pull with a clean hub environment; sets $rc.
pull() {
    local cache=$1
    shift
    # PULL_ENV is "VAR=value" words for env, split on purpose.
    # shellcheck disable=SC2086
    env -u HF_TOKEN -u HUGGING_FACE_HUB_TOKEN -u HF_HUB_OFFLINE -u TRANSFORMERS_OFFLINE \
        -u HUGGINGFACE_HUB_CACHE -u HF_TOKEN_PATH HF_HOME="$WORK/home" HF_ENDPOINT="$HUB" \
        HF_HUB_CACHE="$cache" ${PULL_ENV:-} "$STRATA" pull "$@" > "$WORK/out" 2> "$WORK/err"
    rc=$?
}
layout() { python3 "$HERE/check_cache.py" "$WORK/info.json" "$@"; }
err_has() { grep -q -- "$1" "$WORK/err"; }
repo_dir() { echo "$1/models--${2//\//--}"; }

# ---- fresh download, exact layout ----
C1=$WORK/c1
ctl reset > /dev/null
pull "$C1" strata-test/tiny
check "fresh pull succeeds" [ "$rc" -eq 0 ]
check "prints the snapshot dir" [ "$(cat "$WORK/out")" = "$(repo_dir "$C1" strata-test/tiny)/snapshots/$C_MAIN" ]
check "cache layout of main" layout "$C1" strata-test/tiny main "$C_MAIN"
check "CACHEDIR.TAG written" [ -f "$C1/CACHEDIR.TAG" ]
check "branch resolved once, files fetched at the commit" \
    [ "$(log_where '$1=="hub" && index($3, "/resolve/main/")' | wc -l)" -eq 1 ]
check "LFS content came from the CDN" [ -n "$(log_where '$1=="cdn" && index($3, sha)')" ]
check "no token sent when none is set" [ -z "$(log_where '$5!="-"')" ]
check "every request asks for identity encoding (true sizes)" \
    [ -z "$(log_where '$6!="identity"')" ]
check "the request log is read (sanity of the checks below)" \
    [ -n "$(log_where '$2=="GET" && $6=="identity"')" ]
check "absent file never fetched" [ -z "$(log_where '$2=="GET" && index($3, "tokenizer.model")')" ]

# ---- reuse without a request, offline mode ----
ctl reset > /dev/null
pull "$C1" strata-test/tiny
check "second pull succeeds" [ "$rc" -eq 0 ]
check "second pull makes no request" [ "$(count)" -eq 0 ]
PULL_ENV="HF_HUB_OFFLINE=1" pull "$C1" strata-test/tiny
check "offline pull of a cached model" [ "$rc" -eq 0 ]
PULL_ENV="HF_HUB_OFFLINE=1" pull "$WORK/empty" strata-test/tiny
check "offline pull of an uncached model fails" [ "$rc" -ne 0 ]
check "offline message says what to do" err_has "HF_HUB_OFFLINE is set"
check "offline mode made no request" [ "$(count)" -eq 0 ]
pull "$C1" strata-test/tiny --refresh
check "--refresh asks the hub again" [ "$rc" -eq 0 ] && [ "$(count)" -gt 0 ]
check "--refresh downloads nothing new" [ -z "$(log_where '$2=="GET"')" ]
PULL_ENV="HF_ENDPOINT=http://127.0.0.1:1" pull "$C1" strata-test/tiny --refresh
check "hub unreachable: the cached snapshot is used" [ "$rc" -eq 0 ] && err_has "using the cached snapshot"

# ---- revision pinning: a branch, then a commit ----
ctl reset > /dev/null
pull "$C1" strata-test/tiny --revision v1
check "pull --revision v1" [ "$rc" -eq 0 ]
check "v1 snapshot is commit 1" [ "$(cat "$WORK/out")" = "$(repo_dir "$C1" strata-test/tiny)/snapshots/$C_V1" ]
check "cache layout of v1" layout "$C1" strata-test/tiny v1 "$C_V1"
check "refs/main untouched" [ "$(cat "$(repo_dir "$C1" strata-test/tiny)/refs/main")" = "$C_MAIN" ]
check "blob shared with main is not downloaded again" \
    [ -z "$(log_where '$2=="GET" && index($3, "tokenizer.json")')" ]
C2=$WORK/c2
pull "$C2" strata-test/tiny --revision "$C_V1"
check "pull --revision <commit>" [ "$rc" -eq 0 ]
check "cache layout of a commit pull" layout "$C2" strata-test/tiny "$C_V1" "$C_V1"
ctl reset > /dev/null
pull "$C2" strata-test/tiny --revision "$C_V1"
check "cached commit needs no request" [ "$rc" -eq 0 ] && [ "$(count)" -eq 0 ]
pull "$C2" strata-test/tiny --revision nope
check "unknown revision fails" [ "$rc" -ne 0 ] && err_has "revision 'nope' not found"

# ---- resume of a partial .incomplete file ----
C3=$WORK/c3
BLOBS3=$(repo_dir "$C3" strata-test/tiny)/blobs
mkdir -p "$BLOBS3"
head -c 700000 "$(repo_dir "$C1" strata-test/tiny)/blobs/$SHARD1_ETAG" > "$BLOBS3/$SHARD1_ETAG.incomplete"
ctl reset > /dev/null
pull "$C3" strata-test/tiny
check "pull with a partial file succeeds" [ "$rc" -eq 0 ]
check "partial file resumed with a Range request" \
    [ -n "$(log_where '$1=="cdn" && index($3, sha) && $4=="bytes=700000-"')" ]
check "cache layout after resume" layout "$C3" strata-test/tiny main "$C_MAIN"

# ---- a connection dropped mid-file ----
C4=$WORK/c4
ctl reset > /dev/null
ctl "drop?name=$SHARD1&bytes=500000" > /dev/null
pull "$C4" strata-test/tiny
check "pull survives a dropped connection" [ "$rc" -eq 0 ]
check "the drop was retried with a Range" \
    [ -n "$(log_where '$1=="cdn" && index($3, sha) && index($4, "bytes=")==1')" ]
check "retry reported" err_has "retry 1 of"
check "cache layout after the drop" layout "$C4" strata-test/tiny main "$C_MAIN"

# ---- retries exhausted: the message says how to resume, and the next pull does ----
C9=$WORK/c9
ctl "drop?name=$SHARD1&bytes=0&times=2" > /dev/null
pull "$C9" strata-test/tiny --retries 1
check "pull gives up after its retries" [ "$rc" -ne 0 ]
check "give-up message says how to resume" err_has "running the same command again resumes"
check "nothing of it in the snapshot" [ ! -e "$(repo_dir "$C9" strata-test/tiny)/snapshots/$C_MAIN/$SHARD1" ]
pull "$C9" strata-test/tiny
check "the next pull completes" [ "$rc" -eq 0 ] && layout "$C9" strata-test/tiny main "$C_MAIN"

# ---- Ctrl-C mid-download keeps the partial file, the next pull resumes it ----
C5=$WORK/c5
BLOBS5=$(repo_dir "$C5" strata-test/tiny)/blobs
ctl "throttle?bps=300000" > /dev/null
# Started without the pull wrapper so that $! is strata itself (env execs it).
env -u HF_TOKEN -u HF_HUB_OFFLINE HF_HOME="$WORK/home" HF_ENDPOINT="$HUB" HF_HUB_CACHE="$C5" \
    "$STRATA" pull strata-test/tiny --revision v1 > "$WORK/out" 2> "$WORK/err" &
PULL_PID=$!
for _ in $(seq 100); do
    [ -n "$(find "$BLOBS5" -name '*.incomplete' -size +10k 2>/dev/null)" ] && break
    sleep 0.05
done
kill -INT "$PULL_PID" 2>/dev/null
wait "$PULL_PID"
rc=$?
ctl "throttle?bps=0" > /dev/null
check "interrupted pull exits 130" [ "$rc" -eq 130 ]
check "interrupt message says how to resume" err_has "cancelled; partial files are kept"
check "partial file kept" [ -n "$(find "$BLOBS5" -name '*.incomplete' -size +10k)" ]
check "nothing half-written in the snapshot" \
    [ ! -e "$(repo_dir "$C5" strata-test/tiny)/snapshots/$C_V1/model.safetensors" ]
ctl reset > /dev/null
pull "$C5" strata-test/tiny --revision v1
check "pull after an interrupt" [ "$rc" -eq 0 ]
check "it resumed" [ -n "$(log_where '$1=="cdn" && index($4, "bytes=")==1')" ]
check "cache layout after interrupt + resume" layout "$C5" strata-test/tiny v1 "$C_V1"

# ---- corrupt content is rejected and leaves nothing behind ----
C6=$WORK/c6
pull "$C6" strata-test/corrupt
CC=$(commit_of strata-test/corrupt main)
CORRUPT_ETAG=$(etag_of strata-test/corrupt "$CC" model.safetensors)
check "corrupt download fails" [ "$rc" -ne 0 ]
check "corrupt message names sha256" err_has "is corrupt: its sha256"
check "no corrupt file in the snapshot" \
    [ ! -e "$(repo_dir "$C6" strata-test/corrupt)/snapshots/$CC/model.safetensors" ]
check "no corrupt blob" [ ! -e "$(repo_dir "$C6" strata-test/corrupt)/blobs/$CORRUPT_ETAG" ]
check "no corrupt partial" [ ! -e "$(repo_dir "$C6" strata-test/corrupt)/blobs/$CORRUPT_ETAG.incomplete" ]
check "no empty partials" [ -z "$(find "$(repo_dir "$C6" strata-test/corrupt)/blobs" -name '*.incomplete' -empty)" ]

# ---- gated, missing, tokens ----
C7=$WORK/c7
pull "$C7" strata-test/gated
check "gated without token fails" [ "$rc" -ne 0 ] && err_has "gated repo" && err_has "HF_TOKEN"
PULL_ENV="HF_TOKEN=hf_noaccess_token" pull "$C7" strata-test/gated
check "gated with a token lacking access fails" [ "$rc" -ne 0 ] && err_has "has no access"
PULL_ENV="HF_TOKEN=hf_bogus" pull "$C7" strata-test/gated
check "refused token reported" [ "$rc" -ne 0 ] && err_has "check HF_TOKEN"
check "failed pulls leave no snapshot" [ ! -e "$(repo_dir "$C7" strata-test/gated)/snapshots" ]
ctl reset > /dev/null
PULL_ENV="HF_TOKEN=hf_valid_token" pull "$C7" strata-test/gated
check "gated with a good token" [ "$rc" -eq 0 ]
check "token sent to the hub" [ -n "$(log_where '$1=="hub" && $5=="Bearer hf_valid_token"')" ]
check "token never sent to the CDN" [ -z "$(log_where '$1=="cdn" && $5!="-"')" ]
mkdir -p "$WORK/home"
echo "hf_valid_token" > "$WORK/home/token"
pull "$WORK/c8" strata-test/gated
check "token read from HF_HOME/token" [ "$rc" -eq 0 ]
rm "$WORK/home/token"
pull "$WORK/c8" strata-test/nonexistent
check "missing repo fails" [ "$rc" -ne 0 ] && err_has "repository strata-test/nonexistent not found"
pull "$WORK/c8" strata-test/noweights
check "repo without weights fails" [ "$rc" -ne 0 ] && err_has "has neither model.safetensors"
for bad in "a/b/c" "org--x/y" "../escape" "/abs/path"; do
    pull "$WORK/c8" "$bad"
    check "bad model name '$bad' rejected" [ "$rc" -ne 0 ]
done
check "bad names made no request" [ -z "$(log_where 'index($3, "escape") || index($3, "a/b/c")')" ]
mkdir -p "$WORK/local-model"
pull "$WORK/c8" "$WORK/local-model"
check "local directory returned as is" [ "$rc" -eq 0 ] && [ "$(cat "$WORK/out")" = "$WORK/local-model" ]

# ---- a full disk (needs a tmpfs mount: root, or skipped) ----
mkdir -p "$WORK/small"
if mount -t tmpfs -o size=1m tmpfs "$WORK/small" 2>/dev/null; then
    MNT=$WORK/small
    pull "$MNT" strata-test/tiny
    check "full disk fails" [ "$rc" -ne 0 ] && err_has "not enough disk space"
    check "full disk leaves no shard in the snapshot" \
        [ ! -e "$(repo_dir "$MNT" strata-test/tiny)/snapshots/$C_MAIN/$SHARD1" ]
    umount "$MNT" && MNT=
else
    echo "SKIP: full-disk case (cannot mount a tmpfs here)"
fi

# ---- interoperability with huggingface_hub ----
if python3 -c "import huggingface_hub" 2>/dev/null; then
    PY=$WORK/py
    # Download as transformers does: each file by name, missing ones recorded.
    env -u HF_TOKEN HF_HOME="$WORK/home" HF_ENDPOINT="$HUB" HF_HUB_CACHE="$PY" \
        HF_HUB_DISABLE_TELEMETRY=1 python3 - <<'EOF' > "$WORK/err" 2>&1
from huggingface_hub import hf_hub_download
from huggingface_hub.errors import EntryNotFoundError
for f in ["config.json", "generation_config.json", "tokenizer.json", "tokenizer.model",
          "tokenizer_config.json", "chat_template.jinja", "model.safetensors",
          "model.safetensors.index.json", "model-00001-of-00002.safetensors",
          "model-00002-of-00002.safetensors"]:
    try:
        hf_hub_download("strata-test/tiny", f)
    except EntryNotFoundError:
        pass
EOF
    check "huggingface_hub downloads from the mock" [ $? -eq 0 ]
    check "huggingface_hub's layout matches ours" layout "$PY" strata-test/tiny main "$C_MAIN"
    ctl reset > /dev/null
    pull "$PY" strata-test/tiny
    check "strata uses huggingface_hub's download" [ "$rc" -eq 0 ]
    check "... without a request" [ "$(count)" -eq 0 ]
    PULL_ENV="HF_HUB_OFFLINE=1" pull "$PY" strata-test/tiny
    check "... and offline" [ "$rc" -eq 0 ]
    # The other way: Python finds what strata downloaded, offline and online.
    env HF_HUB_OFFLINE=1 HF_HOME="$WORK/home" HF_HUB_CACHE="$C1" SNAP="$(repo_dir "$C1" strata-test/tiny)/snapshots" \
        C_MAIN="$C_MAIN" C_V1="$C_V1" python3 - <<'EOF' > "$WORK/err" 2>&1
import os
from huggingface_hub import try_to_load_from_cache, hf_hub_download
from huggingface_hub.file_download import _CACHED_NO_EXIST
snap, c_main, c_v1 = os.environ["SNAP"], os.environ["C_MAIN"], os.environ["C_V1"]
for f in ["config.json", "tokenizer.json", "model-00001-of-00002.safetensors", "model.safetensors.index.json"]:
    p = try_to_load_from_cache("strata-test/tiny", f)
    assert p == f"{snap}/{c_main}/{f}", (f, p)
assert try_to_load_from_cache("strata-test/tiny", "tokenizer.model") is _CACHED_NO_EXIST
assert try_to_load_from_cache("strata-test/tiny", "model.safetensors", revision="v1") == f"{snap}/{c_v1}/model.safetensors"
assert hf_hub_download("strata-test/tiny", "config.json") == f"{snap}/{c_main}/config.json"
EOF
    check "huggingface_hub finds strata's download offline" [ $? -eq 0 ]
    ctl reset > /dev/null
    env HF_HOME="$WORK/home" HF_ENDPOINT="$HUB" HF_HUB_CACHE="$C1" HF_HUB_DISABLE_TELEMETRY=1 python3 -c "
from huggingface_hub import hf_hub_download
hf_hub_download('strata-test/tiny', 'model-00001-of-00002.safetensors')" > "$WORK/err" 2>&1
    check "huggingface_hub online on strata's cache" [ $? -eq 0 ]
    check "... downloads nothing again" [ -z "$(log_where '$2=="GET"')" ]
else
    echo "SKIP: huggingface_hub not installed (tools/install-deps.sh installs it)"
fi

echo "test_hub: $passes passed, $fails failed"
[ "$fails" -eq 0 ]
