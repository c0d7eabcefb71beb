#!/usr/bin/env bash
# tests/device/run.sh - the one script for the GPU machine (one H200, no network).
#
# Run from the repo root with the bundle carried (built here by `make device-bundle`):
#   device run: command "tests/device/run.sh [--quick] [--models a,b]", carry ["device-bundle"]
# It prints the environment, runs the transformers peer baseline (tools/device/peer_bench.py),
# runs strata's CUDA benchmarks when device-bundle/bin/strata exists, and ends with ONE
# table (tools/device/summarize.py). Everything must finish well inside 10 minutes.
# Logs go to $OUT (the device tool brings back at most 8 files) or to a temp folder.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2

QUICK=""
MODELS="qwen3.5-0.8b,qwen3.5-2b,qwen3.5-4b,qwen3.5-9b,gemma4-e2b,gemma4-e4b,nemotron3-nano-4b"
PY=${PYTHON:-python3}
PEER_EXTRA=${PEER_EXTRA:-}      # extra peer_bench.py arguments, e.g. "--device cpu --tiny" to test here
while [ $# -gt 0 ]; do
    case "$1" in
        --quick) QUICK=--quick ;;
        --models) MODELS="$2"; shift ;;
        *) echo "usage: tests/device/run.sh [--quick] [--models a,b]" >&2; exit 2 ;;
    esac
    shift
done

B=device-bundle
LOG=${OUT:-$(mktemp -d /tmp/strata-device.XXXXXX)}
WORK=$(mktemp -d /tmp/strata-device-work.XXXXXX)
mkdir -p "$LOG"
DEADLINE=${DEADLINE_S:-560}      # seconds; the device tool kills a command at 600
section() { printf '\n=== %s ===\n' "$*"; }

# Prefer the tree's copy of the tools; the bundle carries the same files.
tool() { if [ -f "tools/device/$1" ]; then echo "tools/device/$1"; else echo "$B/tools/device/$1"; fi; }

# ------------------------------------------------------------------ environment
section environment
{
    date -u
    uname -a
    echo "cpus: $(nproc)"
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem \
        --format=csv 2>&1 || echo "nvidia-smi: not available"
    nvcc --version 2>/dev/null | tail -1 || echo "nvcc: not available"
    $PY - <<'EOF' 2>&1
import sys
print("python", sys.version.split()[0])
for m in ("torch", "transformers", "numpy", "safetensors"):
    try:
        mod = __import__(m)
        print(m, mod.__version__)
    except Exception as e:
        print(m, "missing:", e)
try:
    import torch
    print("cuda available:", torch.cuda.is_available(),
          torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")
except Exception:
    pass
EOF
    if [ -d "$B" ]; then
        echo "bundle: $(head -5 "$B/BUNDLE_INFO" 2>/dev/null | tr '\n' ' ')"
    else
        echo "bundle: $B/ not carried"
    fi
} 2>&1 | tee "$LOG/env.txt"

# ------------------------------------------------------------------ peer baseline
section "peer baseline: transformers (random weights, bf16)"
peer_budget=300
[ -n "$QUICK" ] && peer_budget=150
[ -x "$B/bin/strata" ] && peer_budget=$((peer_budget - 60))
# shellcheck disable=SC2086
timeout $((peer_budget + 120)) env PYTHONUNBUFFERED=1 $PY "$(tool peer_bench.py)" $QUICK $PEER_EXTRA \
    --models "$MODELS" --budget-s "$peer_budget" --json "$LOG/peer.json" | tee "$LOG/peer.md"
echo "peer_bench exit status: ${PIPESTATUS[0]}"

# ------------------------------------------------------------------ strata (CUDA)
# ===== STRATA SECTION: runs only when the bundle holds a strata binary. =====
# Add new CUDA checks here; each one must be bounded by `timeout` and the deadline.
section "strata CUDA benchmarks"
strata_files=()
if [ -x "$B/bin/strata" ]; then
    hub_id() {
        case "$1" in
            qwen3.5-0.8b) echo Qwen/Qwen3.5-0.8B ;;
            qwen3.5-2b) echo Qwen/Qwen3.5-2B ;;
            qwen3.5-4b) echo Qwen/Qwen3.5-4B ;;
            qwen3.5-9b) echo Qwen/Qwen3.5-9B ;;
            gemma4-e2b) echo google/gemma-4-E2B-it ;;
            gemma4-e4b) echo google/gemma-4-E4B-it ;;
            nemotron3-nano-4b) echo nvidia/NVIDIA-Nemotron-3-Nano-4B-BF16 ;;
            *) echo "$1" ;;
        esac
    }
    cublas_dir=$(tests/device/cuda_tests.sh cublas-path) && export LD_LIBRARY_PATH=$cublas_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    # CUDA ops against the CPU backend, and the golden fixtures on CUDA.
    [ -d "$B/cuda" ] && DEV_DIR="$B/cuda" LIB_DIR="$B/lib" BENCH=0 OUT="$WORK" timeout 240 \
        tests/device/cuda_tests.sh run 2>&1 | tee "$WORK/cuda_tests.log"
    # Prefill of a 1,024-token prompt on Qwen3.5-2B (issue 6 target: under 40 ms).
    HF_HUB_OFFLINE=1 timeout 90 "$B/bin/strata" bench --device cuda --model Qwen/Qwen3.5-2B \
        --load-format dummy --prompt-len 1024 --gen-len 8 2>&1 | tee "$WORK/prefill_1024.log"
    gen=60
    [ -n "$QUICK" ] && gen=20
    for m in ${MODELS//,/ }; do
        f="$WORK/strata_$m.txt"
        strata_files+=("$f")
        if [ "$SECONDS" -gt "$DEADLINE" ]; then
            echo "skipped: deadline" >"$f"
            continue
        fi
        echo "--- strata bench $m"
        HF_HUB_OFFLINE=1 timeout 90 "$B/bin/strata" bench --model "$(hub_id "$m")" --load-format dummy \
            --device cuda --prompt-len 16 --gen-len "$gen" >"$f" 2>&1
        echo "exit status $?" >>"$f"
        cat "$f"
    done
    # CUDA unit tests shipped in the bundle (device-bundle/tests/bin/test_*), if any.
    for t in "$B"/tests/bin/test_*; do
        [ -x "$t" ] || continue
        [ "$SECONDS" -gt "$DEADLINE" ] && { echo "skipped $t: deadline"; continue; }
        echo "--- $t"
        timeout 60 "$t"
        echo "$(basename "$t") exit status $?"
    done 2>&1 | tee "$WORK/strata_tests.log"
    cat "${strata_files[@]}" "$WORK/strata_tests.log" >"$LOG/strata.log" 2>/dev/null
else
    echo "no $B/bin/strata: strata section skipped (build the bundle with 'make device-bundle'"
    echo "and carry device-bundle/)"
fi
# ===== END STRATA SECTION =====

# ------------------------------------------------------------------ final table
section "final table"
$PY "$(tool summarize.py)" --peer "$LOG/peer.json" --strata "${strata_files[@]}" | tee "$LOG/summary.md"
echo "logs in $LOG (${SECONDS}s)"
rm -rf "$WORK"
