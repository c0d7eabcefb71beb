#!/usr/bin/env bash
# `make run` (the README's first command): installs what is missing, builds, starts
# `strata serve`, waits until the model is loaded and prints the URL and a curl command
# that works as printed. Without --model / STRATA_MODEL (or a config file naming one)
# it serves the demo model bundled in models/demo, offline. With an NVIDIA GPU (and
# nvcc) it also builds the CUDA backend, and strata serves on the GPU.
#
#   make run                                   the demo model on 127.0.0.1:8080
#   make run ARGS="--model Qwen/Qwen3.5-0.8B"  a hub id (downloaded once into the HF cache)
#   make run ARGS="--model /path/to/dir --port 9000"
#   STRATA_MODEL=Qwen/Qwen3.5-0.8B make run
#   tools/run.sh --model DIR ...               the same without make
#
# Every argument goes to `strata serve` (strata serve --help lists them); so does every
# STRATA_<FLAG> variable. Ctrl-C stops the server gracefully (it drains, then exits).
# BUILD picks the build folder (default build); STRATA_MAKE_FLAGS is passed to make;
# STRATA_RUN_NO_DEPS=1 skips tools/install-deps.sh,
# STRATA_RUN_NO_BUILD=1 the build (tests/demo/test_run.sh runs an already built binary).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
DEMO=models/demo

args=("$@")
model=${STRATA_MODEL:-}
host=${STRATA_HOST:-127.0.0.1}
port=${STRATA_PORT:-8080}
config=${STRATA_CONFIG:-}
key_arg=0
key_val=${STRATA_API_KEY:-}
for ((i = 0; i < ${#args[@]}; i++)); do
    a=${args[i]}
    next=${args[i + 1]:-}
    case $a in
        --model) model=$next ;;
        --model=*) model=${a#*=} ;;
        --host) host=$next ;;
        --host=*) host=${a#*=} ;;
        --port) port=$next ;;
        --port=*) port=${a#*=} ;;
        --config) config=$next ;;
        --config=*) config=${a#*=} ;;
        --api-key) key_arg=1 key_val=$next ;;
        --api-key=*) key_arg=1 key_val=${a#*=} ;;
    esac
done
# A config file may name the model, host and port (the command line still wins).
if [ -n "$config" ] && [ -f "$config" ]; then
    from_file() { sed -n "s/^[[:space:]]*\"$1\"[[:space:]]*:[[:space:]]*\"\{0,1\}\([^\",]*\).*/\1/p" "$config" | head -n1; }
    [ -z "$model" ] && model=$(from_file model)
    [ -z "${STRATA_HOST:-}" ] && ! printf '%s\n' "${args[@]}" | grep -q '^--host' && host=$(from_file host) && host=${host:-127.0.0.1}
    [ -z "${STRATA_PORT:-}" ] && ! printf '%s\n' "${args[@]}" | grep -q '^--port' && port=$(from_file port) && port=${port:-8080}
fi
if [ -z "$model" ]; then
    model=$DEMO
    args=(--model "$DEMO" "${args[@]}")
fi

if [ "${STRATA_RUN_NO_DEPS:-0}" != 1 ]; then
    tools/install-deps.sh --build-only
fi
# With an NVIDIA GPU and nvcc, also build the CUDA backend ($BUILD/libstrata_cuda.so,
# loaded at run time from next to the binary); `--device auto` then serves on the GPU.
targets=("$BUILD/strata")
if command -v nvidia-smi > /dev/null 2>&1 && nvidia-smi -L > /dev/null 2>&1; then
    if command -v nvcc > /dev/null 2>&1 || [ -x "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" ]; then
        targets+=(cuda)
    else
        echo "strata: a GPU is present but nvcc is not: building for the CPU only"
    fi
fi
if [ "${STRATA_RUN_NO_BUILD:-0}" != 1 ]; then
    # shellcheck disable=SC2086  # STRATA_MAKE_FLAGS is a list of make arguments
    ${MAKE:-make} -j"$(nproc)" BUILD="$BUILD" "${targets[@]}" ${STRATA_MAKE_FLAGS:-}
fi

# The URL a client on this machine uses: a wildcard bind is reached on loopback.
chost=$host
case $host in 0.0.0.0 | "" | "*") chost=127.0.0.1 ;; "::" | "[::]") chost="[::1]" ;; esac
case $chost in *:*:*) [ "${chost#[}" = "$chost" ] && chost="[$chost]" ;; esac
url="http://$chost:$port"

auth=()
auth_shown=""
if [ -n "${STRATA_API_KEY:-}" ] || [ "$key_arg" = 1 ]; then
    auth=(-H "Authorization: Bearer $key_val")
    auth_shown=" -H \"Authorization: Bearer \$STRATA_API_KEY\""
fi

shown=()   # the command line as echoed, without the API key
prev=""
for a in "${args[@]}"; do
    s=$a
    [ "$prev" = --api-key ] && s="***"
    case $a in --api-key=*) s="--api-key=***" ;; esac
    shown+=("$s")
    prev=$a
done
echo "strata: starting $BUILD/strata serve ${shown[*]}"
echo "strata: loading $model (a hub id is downloaded first; this can take a while) ..."

# Prints the URL and the curl command once /health says the model is loaded.
announce() {
    local server=$1 id content body q
    while kill -0 "$server" 2> /dev/null; do
        if curl -fsS -o /dev/null --max-time 2 "$url/health" 2> /dev/null; then break; fi
        sleep 0.5
    done
    kill -0 "$server" 2> /dev/null || return 0
    # the id the server answers to (it may differ from the --model argument)
    id=$(curl -fsS --max-time 5 "${auth[@]}" "$url/v1/models" 2> /dev/null |
         python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])' 2> /dev/null || true)
    [ -n "$id" ] || id=$model
    if [ "$model" = "$DEMO" ]; then
        content="Who is the LORD?"   # the demo model knows the King James Bible
    else
        content="Write one sentence about the sea."
    fi
    body=$(python3 -c 'import json,sys; print(json.dumps({"model": sys.argv[1], "messages": [{"role": "user", "content": sys.argv[2]}], "max_tokens": 48, "temperature": 0}))' "$id" "$content")
    q=${body//\'/\'\\\'\'}
    cat << EOF

  strata is serving $model at $url   (Ctrl-C to stop)

  Try it:

    curl -s $url/v1/chat/completions -H 'Content-Type: application/json'$auth_shown -d '$q'

  OpenAI-compatible routes: /v1/chat/completions /v1/completions /v1/models, and /health /metrics.
EOF
    if [ -n "$auth_shown" ]; then
        echo "  (export STRATA_API_KEY=<the key> in the shell you run curl from)"
    fi
    echo
}

# The server replaces this shell (same pid, in the foreground): Ctrl-C reaches it
# directly, it drains and exits, and its exit status is make's.
announce $$ &
exec "$BUILD/strata" serve "${args[@]}"
