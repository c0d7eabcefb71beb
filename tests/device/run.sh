#!/usr/bin/env bash
# tests/device/run.sh - the one script for the GPU machine (one H200, no network).
#
# Build the bundle here (`make device-bundle`), then with the device tool:
#   command "tests/device/run.sh", carry ["device-bundle"], timeout_s 600
# Stages, most important first; each is bounded by `timeout` and by the deadline
# (DEADLINE_S, default 540 s: the device tool kills the command at timeout_s <= 600):
#   1. environment: GPU, driver, toolkit, python packages, the bundle (unpacked into /tmp)
#   2. CUDA correctness: every op against the CPU backend, the golden tests of Qwen3.5,
#      Gemma 4 and Nemotron-H on CUDA (tests/device/cuda_tests.sh run)
#   3. strata on CUDA: a 1,024-token prefill of Qwen3.5-2B, then batch-1 decode per model
#   3b. with AB_LIB: decode under an earlier build of the CUDA library and this one, alternating
#   3c. quantized decode: Q8_0 and Q4_K on QUANT_MODELS (default qwen3.5-2b,qwen3.5-9b), per-shape GEMV and per-op profile
#   3d. serving: 8 streams against 1 through strata serve (tools/bench-serve.sh)
#   4. the transformers peer baseline (tools/device/peer_bench.py) in the time left
#   4b. Gemma 4 E2B again with --ple-on-device (against stage 3's host table), if time is left
#   5. one final table (tools/device/summarize.py): test verdicts, then the benchmarks
# With --prefill (a second call): only prefill at 512 / 4,096 / 32,768 tokens on Qwen3.5-2B
# and -9B, Gemma 4 E4B and Nemotron 3 Nano 4B, and transformers' at 4,096 (written to
# prefill.log and the peer's own table beside it).
# Every stage prints as it goes, so a run cut short still shows what it reached.
# Expected on the H200 (estimate; nothing has run there yet): environment ~15 s, CUDA
# tests ~60-90 s (the golden binaries open the real-size Qwen3.5-0.8B, Gemma 4 E2B and
# Nemotron-H presets with dummy weights), strata ~100-150 s (weights generated on the host
# and uploaded: ~65 GB in all), peer ~120 s: 5-6.5 minutes; the deadline caps it at 9.
# Logs go to $OUT (the device tool brings back at most 8 files) or a temp folder:
#   run.log (everything), env.txt, cuda_tests.log, strata.log, peer.md, peer.json, summary.md
# CPU dry run (no GPU; checks the script, the bundle and the Python):
#   PEER_EXTRA="--device cpu --tiny" tests/device/run.sh --quick
# Env: DEADLINE_S, PEER_MIN_S (seconds kept for the peer, 150), PEER_EXTRA (extra
# peer_bench.py arguments), PEER (0: no peer stage, when an earlier run of the day has its
# figures), AB_LIB (another build of libstrata_cuda.so, carried with the tree: stage 3b
# times decode with it and with the bundle's, alternating, on AB_MODELS, default
# qwen3.5-0.8b,qwen3.5-9b; an entry model:quantization:rounds times a quantized model, two
# rounds by default), QUANT_MODELS, QUANT_FORMATS (q8_0 q4_k), SERVE_BENCH (0: no stage 3d), PYTHON, BUNDLE_DIR (an unpacked bundle instead of
# device-bundle/), OUT.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2

QUICK="" PREFILL=0
MODELS="qwen3.5-0.8b,qwen3.5-2b,qwen3.5-4b,qwen3.5-9b,gemma4-e2b,gemma4-e4b,nemotron3-nano-4b"
PY=${PYTHON:-python3}
PEER_EXTRA=${PEER_EXTRA:-}
while [ $# -gt 0 ]; do
    case "$1" in
        --quick) QUICK=--quick ;;
        --models) MODELS="$2"; shift ;;
        --prefill) PREFILL=1 ;;
        *) echo "usage: tests/device/run.sh [--quick] [--models a,b] [--prefill]" >&2; exit 2 ;;
    esac
    shift
done

LOG=${OUT:-$(mktemp -d /tmp/strata-device.XXXXXX)}
WORK=$(mktemp -d /tmp/strata-device-work.XXXXXX)
mkdir -p "$LOG"
DEADLINE=${DEADLINE_S:-540}
PEER_MIN_S=${PEER_MIN_S:-150}   # kept for the peer baseline unless earlier stages end early
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
section() { printf '\n=== %s (%ds) ===\n' "$*" "$SECONDS"; }
# Seconds a step may take: want, but never past the deadline less reserve (0 = none left).
limit() {
    local want=$1 l=$((DEADLINE - SECONDS - ${2:-0}))
    [ "$l" -lt "$want" ] && want=$l
    [ "$want" -lt 0 ] && want=0
    echo "$want"
}
# Prefer the tree's copy of the tools; the bundle carries the same files.
tool() { if [ -f "tools/device/$1" ]; then echo "tools/device/$1"; else echo "$B/tools/device/$1"; fi; }

# The bundle: an unpacked folder, else device-bundle/'s tarball unpacked into $WORK.
unpack_bundle() {
    local t
    for t in device-bundle/strata-device.tar.xz device-bundle/strata-device.tar.gz; do
        [ -f "$t" ] || continue
        mkdir -p "$WORK/bundle"
        case $t in
            *.xz) command -v xz >/dev/null 2>&1 && tar -C "$WORK/bundle" -xJf "$t" && return 0 ;;
            *.gz) tar -C "$WORK/bundle" -xzf "$t" && return 0 ;;
        esac
        $PY -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$t" "$WORK/bundle" &&
            return 0
        echo "bundle: cannot unpack $t"
    done
    return 1
}

main() {
    local t m f rc cublas_dir
    # ---------------------------------------------------------------- 1. environment
    section environment
    cublas_dir=$(tests/device/cuda_tests.sh cublas-path) &&
        export LD_LIBRARY_PATH=$cublas_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    B=${BUNDLE_DIR:-}
    if [ -z "$B" ]; then
        if [ -x device-bundle/bin/strata ]; then B=$PWD/device-bundle
        elif unpack_bundle; then B=$WORK/bundle
        else B=$PWD/device-bundle
        fi
    fi
    {
        date -u
        uname -a
        echo "cpus: $(nproc), memory: $(awk '/MemTotal/ {print int($2 / 1048576) " GiB"}' /proc/meminfo)"
        nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem \
            --format=csv 2>&1 || echo "nvidia-smi: not available"
        (nvcc --version 2>/dev/null || /usr/local/cuda/bin/nvcc --version 2>/dev/null) | tail -1 ||
            echo "nvcc: not available"
        timeout 120 $PY - <<'EOF' 2>&1
import sys
print("python", sys.version.split()[0], sys.executable)
for m in ("torch", "transformers", "numpy", "safetensors"):
    try:
        mod = __import__(m)
        print(m, mod.__version__)
    except Exception as e:
        print(m, "missing:", e)
try:
    import torch
    print("cuda available:", torch.cuda.is_available(),
          torch.cuda.get_device_name(0) if torch.cuda.is_available() else "",
          "torch cuda", torch.version.cuda)
except Exception:
    pass
EOF
        if [ -f "$B/BUNDLE_INFO" ]; then
            echo "bundle ($B): $(head -4 "$B/BUNDLE_INFO" | tr '\n' ' ')"
        else
            echo "bundle: none (build it with 'make device-bundle' and carry device-bundle/)"
        fi
        echo "cublas: ${cublas_dir:-libcublas.so.13 not found}"
    } 2>&1 | tee "$LOG/env.txt"

    if [ "$PREFILL" = 1 ]; then
        prefill_stage
        return
    fi

    # ---------------------------------------------------------------- 2. CUDA correctness
    section "CUDA correctness: ops against the CPU backend, goldens on CUDA"
    t=$(limit 300 "$PEER_MIN_S")
    if [ "$t" -lt 20 ]; then
        echo "skipped: deadline" | tee "$WORK/cuda_steps.txt"
    elif [ -d "$B/cuda" ]; then
        # BUDGET_S bounds each test inside; the outer timeout is the backstop.
        DEV_DIR="$B/cuda" LIB_DIR="$B/lib" BENCH=0 OUT="$WORK" OPS_TIMEOUT=150 GOLDEN_TIMEOUT=150 \
            BUDGET_S="$t" timeout -k 5 $((t + 10)) tests/device/cuda_tests.sh run 2>&1 |
            tee "$WORK/cuda_steps.txt"
        echo "cuda_tests.sh exit status ${PIPESTATUS[0]}" | tee -a "$WORK/cuda_steps.txt"
        cat "$WORK"/cuda_tests/*.log >"$LOG/cuda_tests.log" 2>/dev/null
        # cuda_tests.sh rebuilds a library that does not load here into $B/cuda
        [ -f "$B/cuda/libstrata_cuda.so" ] && export STRATA_CUDA_LIB=$B/cuda/libstrata_cuda.so
    else
        echo "no $B/cuda: CUDA tests skipped" | tee "$WORK/cuda_steps.txt"
    fi

    # ---------------------------------------------------------------- 3. strata on CUDA
    section "strata on CUDA (dummy weights)"
    local gen=60
    [ -n "$QUICK" ] && gen=20
    if [ -x "$B/bin/strata" ]; then
        # Prefill of a 1,024-token prompt on Qwen3.5-2B (issue 6 target: under 40 ms).
        f=$WORK/strata_prefill1024.txt
        t=$(limit 90 "$PEER_MIN_S")
        if [ "$t" -ge 20 ]; then
            echo "--- strata bench Qwen3.5-2B, 1,024-token prompt"
            timeout -k 5 "$t" "$B/bin/strata" bench --device cuda --model Qwen/Qwen3.5-2B \
                --load-format dummy --prompt-len 1024 --gen-len 8 >"$f" 2>&1
            rc=$?
            [ $rc -eq 124 ] && echo "timed out after $t s" >>"$f"
            echo "exit status $rc" >>"$f"
        else
            echo "skipped: deadline" >"$f"
        fi
        cat "$f"
        for m in ${MODELS//,/ }; do
            f="$WORK/strata_$m.txt"
            t=$(limit 90 "$PEER_MIN_S")
            if [ "$t" -lt 20 ]; then
                echo "skipped: deadline" >"$f"
                continue
            fi
            echo "--- strata bench $m"
            timeout -k 5 "$t" "$B/bin/strata" bench --model "$(hub_id "$m")" --load-format dummy \
                --device cuda --prompt-len 16 --gen-len "$gen" --gemv --profile >"$f" 2>&1
            rc=$?
            [ $rc -eq 124 ] && echo "timed out after $t s" >>"$f"
            echo "exit status $rc" >>"$f"
            cat "$f"
        done
        cat "$WORK"/strata_*.txt >"$LOG/strata.log" 2>/dev/null
    else
        echo "no $B/bin/strata: strata benchmarks skipped"
    fi

    # ---------------------------------------------------------------- 3b. A/B of the library
    if [ -n "${AB_LIB:-}" ] && [ -x "$B/bin/strata" ]; then
        section "A/B: decode with $AB_LIB (A) and the bundle's library (B), alternating"
        ab_stage 2>&1 | tee "$LOG/ab.log"
    fi

    # ---------------------------------------------------------------- 3c. quantized decode
    # Issue 20's GPU figure: Q8_0 and Q4_K decode (dummy weights quantized on load) as a
    # fraction of the roofline of their own bytes per token.
    if [ -x "$B/bin/strata" ]; then
        section "quantized decode (Q8_0, Q4_K; quantized on load)"
        local qm qf ql=${QUANT_MODELS:-qwen3.5-2b,qwen3.5-9b}
        : >"$LOG/quant.log"
        for qm in ${ql//,/ }; do
            for qf in ${QUANT_FORMATS:-q8_0 q4_k}; do
                t=$(limit 90 "$PEER_MIN_S")
                [ "$t" -lt 20 ] && { echo "$qm $qf: skipped: deadline" | tee -a "$LOG/quant.log"; continue; }
                f=$WORK/quant_${qm}_$qf.txt
                timeout -k 5 "$t" "$B/bin/strata" bench --model "$(hub_id "$qm")" --load-format dummy \
                    --device cuda --quantization "$qf" --prompt-len 16 --gen-len "$gen" --gemv \
                    --profile >"$f" 2>&1
                { echo "--- $qm $qf (exit $?)"; grep -E "^decode  |^bytes/token|^fraction|^gemv|^profile|quantized|error|strata: " "$f"; } |
                    tee -a "$LOG/quant.log"
            done
        done
    fi

    # ---------------------------------------------------------------- 3d. serving
    # 8 concurrent streams through `strata serve` on the GPU against one (issue 15: the
    # aggregate at least 6x), by tools/bench-serve.sh with the bundle's strata.
    t=$(limit 100 "$PEER_MIN_S")
    if [ "${SERVE_BENCH:-1}" = 1 ] && [ -x "$B/bin/strata" ] && [ "$t" -ge 40 ]; then
        section "serving: 8 streams against 1 through strata serve (Qwen3.5-2B)"
        BUILD=$B/bin timeout -k 5 "$t" tools/bench-serve.sh --model Qwen/Qwen3.5-2B \
            --output-len 64 2>&1 | tee "$LOG/serve.log"
    fi

    # ---------------------------------------------------------------- 4. peer baseline
    section "peer baseline: transformers (random weights, bf16)"
    t=$(limit 420 20)
    if [ "${PEER:-1}" = 0 ]; then
        echo "skipped: PEER=0"
    elif [ "$t" -ge 45 ]; then
        # --budget-s: no model is started after it; the json is rewritten after each model,
        # so a run stopped by the timeout keeps the models it finished.
        # shellcheck disable=SC2086
        timeout -k 5 "$t" env PYTHONUNBUFFERED=1 $PY "$(tool peer_bench.py)" $QUICK $PEER_EXTRA \
            --models "$MODELS" --budget-s $((t - 45)) --json "$LOG/peer.json" | tee "$LOG/peer.md"
        echo "peer_bench exit status ${PIPESTATUS[0]}"
    else
        echo "skipped: deadline (${t}s left)"
    fi

    # ---------------------------------------------------------------- 4b. PLE on the device
    # Gemma 4 E2B with its PLE table on the device, against stage 3's run (the table in host
    # memory, read by the device where it lies): what the host table costs. After the peer,
    # in the time left.
    f="$WORK/strata_gemma4-e2b-ple-on-device.txt"
    t=$(limit 90 20)
    if [ -x "$B/bin/strata" ] && [ "$t" -ge 30 ] && [[ ",$MODELS," == *,gemma4-e2b,* ]]; then
        section "strata gemma4-e2b --ple-on-device"
        timeout -k 5 "$t" "$B/bin/strata" bench --model "$(hub_id gemma4-e2b)" \
            --load-format dummy --device cuda --prompt-len 16 --gen-len "$gen" \
            --ple-on-device >"$f" 2>&1
        echo "exit status $?" >>"$f"
        tee -a "$LOG/strata.log" <"$f"
    else
        echo "skipped: deadline, no strata, or gemma4-e2b not asked for" >"$f"
    fi

    # ---------------------------------------------------------------- 5. final table
    section "final table"
    local sf=()
    for m in ${MODELS//,/ }; do sf+=("$WORK/strata_$m.txt"); done
    sf+=("$WORK/strata_gemma4-e2b-ple-on-device.txt")
    timeout 60 $PY "$(tool summarize.py)" --tests "$WORK/cuda_steps.txt" \
        --prefill "$WORK/strata_prefill1024.txt" --peer "$LOG/peer.json" --strata "${sf[@]}" |
        tee "$LOG/summary.md"
    echo "logs in $LOG (${SECONDS}s)"
}

# Stage 3b: the same decode benchmark (with --gemv) under two builds of the CUDA library,
# A (AB_LIB) then B (the bundle's), twice, so that a kernel change is judged in one run.
ab_stage() {
    local e m q r n lib tag f t qa bl=${STRATA_CUDA_LIB:-$B/cuda/libstrata_cuda.so}
    local list=${AB_MODELS:-qwen3.5-0.8b,qwen3.5-9b}
    case $AB_LIB in /*) ;; *) AB_LIB=$PWD/$AB_LIB ;; esac
    for e in ${list//,/ }; do
        # model[:quantization[:rounds]], e.g. qwen3.5-2b:q8_0:1
        IFS=: read -r m q n <<<"$e"
        qa=()
        [ -n "$q" ] && qa=(--quantization "$q")
        for r in $(seq 1 "${n:-2}"); do
            for tag in A B; do
                lib=$AB_LIB
                [ $tag = B ] && lib=$bl
                t=$(limit 60 "$PEER_MIN_S")
                [ "$t" -lt 20 ] && { echo "$e $tag round $r: skipped: deadline"; continue; }
                f=$WORK/ab_${m}_${q}_${tag}_$r.txt
                STRATA_CUDA_LIB=$lib timeout -k 5 "$t" "$B/bin/strata" bench --model "$(hub_id "$m")" \
                    --load-format dummy --device cuda --prompt-len 16 --gen-len 60 --gemv "${qa[@]}" \
                    >"$f" 2>&1
                echo "--- $e $tag round $r (exit $?)"
                grep -E "^decode  |^fraction|^gemv" "$f"
            done
        done
    done
}

# --prefill (a second call, after the main run): prompt processing at 512, 4,096 and 32,768
# tokens through the chunked delta rule, chunked SSD and tensor-core attention (issue 19),
# time to first token and tokens/s, beside transformers at 4,096 tokens.
prefill_stage() {
    local m n f t rc list=${PREFILL_MODELS:-qwen3.5-2b,qwen3.5-9b,gemma4-e4b,nemotron3-nano-4b}
    section "prefill: strata (dummy weights) at 512 / 4096 / 32768 tokens"
    : >"$LOG/prefill.log"
    for m in ${list//,/ }; do
        for n in 512 4096 32768; do
            t=$(limit 120 "$PEER_MIN_S")
            [ "$t" -lt 20 ] && { echo "$m $n: skipped: deadline" | tee -a "$LOG/prefill.log"; continue; }
            f="$WORK/prefill_${m}_$n.txt"
            timeout -k 5 "$t" "$B/bin/strata" bench --model "$(hub_id "$m")" --load-format dummy \
                --device cuda --prompt-len "$n" --gen-len 2 >"$f" 2>&1
            rc=$?
            [ $rc -eq 124 ] && echo "timed out after $t s" >>"$f"
            { echo "--- $m prompt $n (exit $rc)"; grep -E "prefill|error|cannot" "$f"; } |
                tee -a "$LOG/prefill.log"
        done
    done
    section "prefill kernels: strata's ops against flash-linear-attention's Triton kernel"
    if [ -x "$B/cuda/test_cuda_ops" ]; then
        timeout -k 5 "$(limit 60 "$PEER_MIN_S")" "$B/cuda/test_cuda_ops" --prefill-speed 2>&1 |
            tee -a "$LOG/prefill.log"
    fi
    if [ -d "$B/wheels" ]; then
        timeout -k 5 "$(limit 120 "$PEER_MIN_S")" $PY "$(tool fla_bench.py)" --wheels "$B/wheels" \
            --tokens 4096 2>&1 | tail -3 | tee -a "$LOG/prefill.log"
    else
        echo "no wheels in the bundle: flash-linear-attention not timed" | tee -a "$LOG/prefill.log"
    fi
    section "prefill: transformers at 4096 tokens"
    t=$(limit 400 10)
    if [ "$t" -ge 45 ]; then
        # shellcheck disable=SC2086
        timeout -k 5 "$t" env PYTHONUNBUFFERED=1 $PY "$(tool peer_bench.py)" $QUICK $PEER_EXTRA \
            --models "$list" \
            --prompt-len 4096 --budget-s $((t - 45)) --json "$LOG/peer_prefill.json" |
            tee "$LOG/peer_prefill.md"
    else
        echo "skipped: deadline (${t}s left)"
    fi
}

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

main 2>&1 | tee "$LOG/run.log"
rc=${PIPESTATUS[0]}
rm -rf "$WORK"
exit "$rc"
