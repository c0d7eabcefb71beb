#!/usr/bin/env bash
# test_hub.sh - `strata pull` against a real HTTP mock of the Hugging Face hub
# (tests/hub/mock_hub.py, loopback, free ports) and against huggingface_hub itself.
# Covers: fresh download and the exact cache layout, reuse without a request, offline
# mode, revision pinning (branch and commit), resume of a partial .incomplete file, a
# connection dropped mid-file, Ctrl-C and resume, corrupt content, gated/missing repos
# and files, bad ids, one file of a GGUF repository (pull and serve --gguf-file), a full
# disk, and both directions of cache sharing with Python.
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

# check "what" <command...>: one assertion. A condition of several commands runs first:
#   A && B; check "what" [ $? -eq 0 ]   (in `check "what" A && B`, B would not count)
check() {
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
# pull_again CACHE WHAT: strata-test/tiny, which CACHE already holds (WHAT says how it came
# there), pulls with no request to the hub, and offline.
pull_again() {
    ctl reset > /dev/null
    pull "$1" strata-test/tiny
    check "$2: a second pull succeeds" [ "$rc" -eq 0 ]
    check "$2: ... without a request" [ "$(count)" -eq 0 ]
    PULL_ENV="HF_HUB_OFFLINE=1" pull "$1" strata-test/tiny
    check "$2: ... and offline" [ "$rc" -eq 0 ]
}

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
pull_again "$C1" "pulled by strata"
PULL_ENV="HF_HUB_OFFLINE=1" pull "$WORK/empty" strata-test/tiny
check "offline pull of an uncached model fails" [ "$rc" -ne 0 ]
check "offline message says what to do" err_has "HF_HUB_OFFLINE is set"
check "offline mode made no request" [ "$(count)" -eq 0 ]
pull "$C1" strata-test/tiny --refresh
[ "$rc" -eq 0 ] && [ "$(count)" -gt 0 ]
check "--refresh asks the hub again" [ $? -eq 0 ]
check "--refresh downloads nothing new" [ -z "$(log_where '$2=="GET"')" ]
PULL_ENV="HF_ENDPOINT=http://127.0.0.1:1" pull "$C1" strata-test/tiny --refresh
[ "$rc" -eq 0 ] && err_has "using the cached snapshot"
check "hub unreachable: the cached snapshot is used" [ $? -eq 0 ]

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
[ "$rc" -eq 0 ] && [ "$(count)" -eq 0 ]
check "cached commit needs no request" [ $? -eq 0 ]
pull "$C2" strata-test/tiny --revision nope
[ "$rc" -ne 0 ] && err_has "revision 'nope' not found"
check "unknown revision fails" [ $? -eq 0 ]

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
[ "$rc" -eq 0 ] && layout "$C9" strata-test/tiny main "$C_MAIN"
check "the next pull completes" [ $? -eq 0 ]

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
[ "$rc" -ne 0 ] && err_has "gated repo" && err_has "HF_TOKEN"
check "gated without token fails" [ $? -eq 0 ]
PULL_ENV="HF_TOKEN=hf_noaccess_token" pull "$C7" strata-test/gated
[ "$rc" -ne 0 ] && err_has "has no access"
check "gated with a token lacking access fails" [ $? -eq 0 ]
PULL_ENV="HF_TOKEN=hf_bogus" pull "$C7" strata-test/gated
[ "$rc" -ne 0 ] && err_has "check HF_TOKEN"
check "refused token reported" [ $? -eq 0 ]
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
[ "$rc" -ne 0 ] && err_has "repository strata-test/nonexistent not found"
check "missing repo fails" [ $? -eq 0 ]
pull "$WORK/c8" strata-test/noweights
[ "$rc" -ne 0 ] && err_has "has neither model.safetensors"
check "repo without weights fails" [ $? -eq 0 ]
for bad in "a/b/c" "org--x/y" "../escape" "/abs/path"; do
    pull "$WORK/c8" "$bad"
    check "bad model name '$bad' rejected" [ "$rc" -ne 0 ]
done
check "bad names made no request" [ -z "$(log_where 'index($3, "escape") || index($3, "a/b/c")')" ]
mkdir -p "$WORK/local-model"
pull "$WORK/c8" "$WORK/local-model"
[ "$rc" -eq 0 ] && [ "$(cat "$WORK/out")" = "$WORK/local-model" ]
check "local directory returned as is" [ $? -eq 0 ]

# ---- one file of a GGUF repository: --gguf-file (pull, then serve) ----
# strata-test/gguf has no config.json and two .gguf files; only the one named is wanted.
GG=strata-test/gguf
GGUF=tiny-Q8_0.gguf
C_GG=$(commit_of $GG main)
C10=$WORK/c10
ctl reset > /dev/null
pull "$C10" $GG --gguf-file $GGUF
check "pull --gguf-file succeeds" [ "$rc" -eq 0 ]
check "prints the file's path in the snapshot" \
    [ "$(cat "$WORK/out")" = "$(repo_dir "$C10" $GG)/snapshots/$C_GG/$GGUF" ]
check "cache layout of the one file, no other file fetched" layout "$C10" $GG main "$C_GG" $GGUF
[ "$(log_where '$1=="hub" && $2=="HEAD" && index($3, "/resolve/main/tiny-Q8_0.gguf")' | wc -l)" -eq 1 ] &&
    [ "$(log_where '$1=="cdn" && $2=="GET"' | wc -l)" -eq 1 ] && [ "$(count)" -eq 2 ]
check "one HEAD of the file and one CDN GET, nothing else" [ $? -eq 0 ]
check "no config.json probe for a GGUF file" [ -z "$(log_where 'index($3, "config.json")')" ]
# the downloaded file is a working GGUF tokenizer and chat template
"$STRATA" tokenize --model "$(cat "$WORK/out")" --text "hello world<|im_end|>ab" > "$WORK/ids" 2> "$WORK/err"
check "tokenize reads the pulled GGUF" [ "$(cat "$WORK/ids")" = "[259,264,268,265]" ]
echo '[{"role": "user", "content": "hi"}]' > "$WORK/msgs.json"
"$STRATA" chat-template --model "$(cat "$WORK/out")" --messages "$WORK/msgs.json" > "$WORK/chat" 2> "$WORK/err"
check "chat-template reads its tokenizer.chat_template" grep -q "<|im_start|>user" "$WORK/chat"
ctl reset > /dev/null
pull "$C10" $GG --gguf-file $GGUF
[ "$rc" -eq 0 ] && [ "$(count)" -eq 0 ]
check "second pull --gguf-file uses the cache, no request" [ $? -eq 0 ]
PULL_ENV="HF_HUB_OFFLINE=1" pull "$C10" $GG --gguf-file $GGUF
check "offline pull --gguf-file of a cached file" [ "$rc" -eq 0 ]
PULL_ENV="HF_HUB_OFFLINE=1" pull "$WORK/empty" $GG --gguf-file $GGUF
[ "$rc" -ne 0 ] && err_has "HF_HUB_OFFLINE is set"
check "offline pull --gguf-file of an uncached file fails" [ $? -eq 0 ]
PULL_ENV="HF_ENDPOINT=http://127.0.0.1:1" pull "$C10" $GG --gguf-file $GGUF --refresh
[ "$rc" -eq 0 ] && err_has "warning"
check "hub unreachable: the cached file is used" [ $? -eq 0 ]
pull "$C10" $GG --gguf-file nope.gguf
check "a wrong file name fails" [ "$rc" -ne 0 ]
err_has "$GG has no nope.gguf" && err_has "HTTP 404"
check "... naming the repo, the file and the 404" [ $? -eq 0 ]
check "... and nothing of it in the snapshot" [ ! -e "$(repo_dir "$C10" $GG)/snapshots/$C_GG/nope.gguf" ]
pull "$WORK/c11" $GG
[ "$rc" -ne 0 ] && err_has "takes --gguf-file"
check "a GGUF repository without --gguf-file points at it" [ $? -eq 0 ]
pull "$C10" $GG --gguf-file ../x.gguf
[ "$rc" -ne 0 ] && err_has "invalid file name"
check "a file name leaving the repository is refused" [ $? -eq 0 ]
# a local directory stands for the repository; a local file is the model itself
mkdir -p "$WORK/local-gguf"
cp "$HERE/../data/gguf/tok_qwen35.gguf" "$WORK/local-gguf/$GGUF"
ctl reset > /dev/null
pull "$WORK/c11" "$WORK/local-gguf" --gguf-file $GGUF
[ "$rc" -eq 0 ] && [ "$(cat "$WORK/out")" = "$WORK/local-gguf/$GGUF" ]
check "--gguf-file in a local directory" [ $? -eq 0 ]
pull "$WORK/c11" "$WORK/local-gguf" --gguf-file nope.gguf
[ "$rc" -ne 0 ] && err_has "no file $WORK/local-gguf/nope.gguf"
check "--gguf-file missing from a local directory" [ $? -eq 0 ]
pull "$WORK/c11" "$WORK/local-gguf/$GGUF" --gguf-file $GGUF
[ "$rc" -ne 0 ] && err_has "is a file, not a directory or hub id"
check "--gguf-file with a file as the model is refused" [ $? -eq 0 ]
check "local --gguf-file made no request" [ "$(count)" -eq 0 ]

# serve --gguf-file: the same download, then the vocab-only file fails to load as a
# model (exit 4, README "Running it in production"): the checks are on the download.
# serve_gguf CACHE [args...]: runs serve to its end; sets $rc, stderr in $WORK/err.
serve_gguf() {
    local cache=$1 port
    shift
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    # PULL_ENV as for pull
    # shellcheck disable=SC2086
    env -u HF_TOKEN -u HUGGING_FACE_HUB_TOKEN -u HF_HUB_OFFLINE -u TRANSFORMERS_OFFLINE \
        -u HUGGINGFACE_HUB_CACHE -u HF_TOKEN_PATH HF_HOME="$WORK/home" HF_ENDPOINT="$HUB" \
        HF_HUB_CACHE="$cache" ${PULL_ENV:-} timeout 60 "$STRATA" serve --port "$port" --threads 1 \
        "$@" > "$WORK/out" 2> "$WORK/err"
    rc=$?
}
C12=$WORK/c12
ctl reset > /dev/null
serve_gguf "$C12" --model $GG --gguf-file $GGUF
check "serve --gguf-file downloads the file" layout "$C12" $GG main "$C_GG" $GGUF
[ "$rc" -eq 4 ] && err_has "snapshots/$C_GG/$GGUF: "
check "... then fails on the model itself (exit 4), not the download" [ $? -eq 0 ]
check "... without a config.json probe" [ -z "$(log_where 'index($3, "config.json")')" ]
ctl reset > /dev/null
PULL_ENV="HF_HUB_OFFLINE=1 STRATA_GGUF_FILE=$GGUF" serve_gguf "$C12" --model $GG
[ "$rc" -eq 4 ] && err_has "snapshots/$C_GG/$GGUF: " && [ "$(count)" -eq 0 ]
check "serve (STRATA_GGUF_FILE, offline) uses the cached file" [ $? -eq 0 ]
serve_gguf "$WORK/c13" --model $GG --gguf-file nope.gguf
[ "$rc" -eq 4 ] && err_has "$GG has no nope.gguf" && err_has "HTTP 404"
check "serve with a wrong file name: exit 4 naming repo and file" [ $? -eq 0 ]
serve_gguf "$WORK/c13" --model "$WORK/local-gguf" --gguf-file nope.gguf
[ "$rc" -eq 4 ] && err_has "no file"
check "serve --gguf-file missing from a local directory" [ $? -eq 0 ]

# ---- a full disk (needs a tmpfs mount: root, or skipped) ----
mkdir -p "$WORK/small"
if mount -t tmpfs -o size=1m tmpfs "$WORK/small" 2>/dev/null; then
    MNT=$WORK/small
    pull "$MNT" strata-test/tiny
    [ "$rc" -ne 0 ] && err_has "not enough disk space"
    check "full disk fails" [ $? -eq 0 ]
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
    pull_again "$PY" "downloaded by huggingface_hub"
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
