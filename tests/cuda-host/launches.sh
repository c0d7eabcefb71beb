#!/usr/bin/env bash
# tests/cuda-host/launches.sh - kernels the CUDA backend runs per decode token, counted by
# the host runtime (HC_STATS) over `strata bench --device cuda` on the tiny goldens: a run
# of 2 decode tokens minus a run of 1 (graph replays included, so this is what a GPU would
# execute). Each must stay within its budget below: fusing kernels lowers a budget, and a
# change that adds launches to the decode step fails here. The real-size presets' counts
# are in BENCHMARKS.md (same method). The timed decode steps must also have replayed the
# captured graph and sampled on the device: an eager or host-sampled decode step fails. Last,
# `bench --profile` must time one eager decode step op by op, and Gemma 4 must give the same
# tokens with its PLE table mapped for the device (chained) and gathered on the host.
# Env: BUILD.
set -u
BUILD=${BUILD:-build}
export STRATA_CUDA_LIB=$PWD/$BUILD/cuda-host/libstrata_cuda.so HC_STATS=1 HC_COVERAGE=
# model:kernels per decode token today (layers: qwen35 2 DeltaNet + 2 attention, gemma4 6,
# nemotron_h its hybrid pattern of Mamba2, attention and MLP layers; the _bf16 fixtures
# take the bf16 GEMV, which rounds x itself at m <= 2; 2 are the device sampler's; each
# residual add is fused with the norms around it; a DeltaNet layer convolves q|k|v at
# once; the projections of one input share a GEMV: q|k|v, gate|up, DeltaNet qkv|z|a|b,
# Mamba2's z|xBC|dt; Gemma's layer_scalar rides in its last residual step; on bf16 weights
# the gated activation rides in the GEMV that multiplies it: the MLPs' down projections,
# Qwen3.5's attention output gate, Gemma's PLE projection; a DeltaNet's q / k l2norms,
# gates and delta rule are one kernel (gdn); an attention layer's split, q / k / v norms,
# RoPE and kv store are one (attn_prep); Gemma's PLE rows are gathered by a kernel from
# the mapped host table, where the host gathered and copied them before: one kernel more,
# one copy less)
BUDGETS="qwen35_tiny:47 qwen35_tiny_bf16:39 gemma4_tiny:94 gemma4_tiny_bf16:82 nemotron_h_tiny:32"
LOG=$(mktemp)
trap 'rm -f "$LOG"' EXIT
runs() { # model, decode tokens -> kernel runs of the whole bench
    timeout 300 "$BUILD/strata" bench --device cuda --model "tests/golden/$1" --prompt-len 4 \
        --gen-len "$2" > "$LOG" 2>&1
    if ! grep -q "^decode steps *$2 replayed a graph, 0 eager" "$LOG" ||
        ! grep -q "^sampler *$(($2 + 1)) tokens on the device, 0 on the host" "$LOG"; then
        grep "^decode steps\|^sampler" "$LOG" >&2
        return
    fi
    sed -n 's/^cuda-host stats: \([0-9]*\) kernel runs.*/\1/p' "$LOG"
}
fail=0
for entry in $BUDGETS; do
    m=${entry%%:*} budget=${entry##*:}
    one=$(runs "$m" 1) two=$(runs "$m" 2)
    if [ -z "$one" ] || [ -z "$two" ]; then
        echo "FAIL $m: no kernel counts (not on the CUDA backend, or not graphs and the device sampler)"
        fail=$((fail + 1))
        continue
    fi
    per=$((two - one))
    if [ "$per" -le "$budget" ]; then
        echo "ok   $m: $per kernels per decode token (budget $budget)"
    else
        echo "FAIL $m: $per kernels per decode token, over the budget of $budget"
        fail=$((fail + 1))
    fi
done
# the profiling mode: one eager decode step with every op timed, the fused ops among them
prof=$(timeout 300 "$BUILD/strata" bench --device cuda --model tests/golden/qwen35_tiny_bf16 \
    --prompt-len 4 --gen-len 1 --profile 2>&1)
ops=$(sed -n 's/^profile  *one decode step, eager: \([0-9]*\) ops.*/\1/p' <<< "$prof")
if [ -z "$ops" ] || [ "$ops" -lt 20 ] || ! grep -q "^profile op  *GDN " <<< "$prof" ||
    ! grep -q "^profile op  *ATTN_PREP " <<< "$prof"; then
    echo "FAIL bench --profile: $(grep '^profile' <<< "$prof" | head -3)"
    fail=$((fail + 1))
else
    echo "ok   bench --profile: $ops ops timed in one decode step"
fi
# Gemma 4's PLE table mapped for the device (its steps chain) and, where host memory cannot
# be pinned (HC_NO_REGISTER=1), gathered on the host (they cannot): the same greedy tokens
pl() { # extra env, then the bench's output
    env "$@" timeout 300 "$BUILD/strata" bench --device cuda --model tests/golden/gemma4_tiny_bf16 \
        --prompt-len 6 --gen-len 5 --print-tokens 2>&1
}
mapped=$(pl HC_STATS=) unmapped=$(pl HC_STATS= HC_NO_REGISTER=1)
ids() { sed -n 's/^generated ids *//p' <<< "$1"; }
if [ -z "$(ids "$mapped")" ] || [ "$(ids "$mapped")" != "$(ids "$unmapped")" ] ||
    ! grep -q "^decode steps .* [1-9][0-9]* chained" <<< "$mapped" ||
    ! grep -q "^decode steps .* 0 chained" <<< "$unmapped"; then
    echo "FAIL gemma4 PLE mapped vs gathered on the host:"
    grep "^decode steps\|^generated ids" <<< "$mapped$unmapped"
    fail=$((fail + 1))
else
    echo "ok   gemma4 PLE: mapped (chained) and host-gathered (not) give the same tokens"
fi
echo "launches: $fail over budget"
[ $fail -eq 0 ]
