#!/usr/bin/env bash
# tests/cuda-host/sampling.sh - `strata serve` on the CUDA backend (run on the CPU by this
# runtime; STRATA_CUDA_LIB comes from run.sh) answers seeded requests with the device
# sampler exactly as with --host-sampling, alone and batched, and its metrics say which
# sampler picked the tokens (tests/cuda-host/sampling_test.py).
# The demo checkpoint: its vocabulary (4,096) is large enough for a row the device leaves to
# the host (top_k 2000).
MODEL=$(cd "$(dirname "$0")/../.." && pwd)/models/demo
source "$(dirname "$0")/../http/lib.sh"
[ -n "${STRATA_CUDA_LIB:-}" ] || fail "STRATA_CUDA_LIB is not set (run through tests/cuda-host/run.sh)"
# No prefix cache: the cases share one prompt, which it would restore in one step, so the
# batched run's sequences would start decoding in lockstep and never leave a row to pad.
http_start --device cuda --max-seqs 4 --prefill-chunk 64 --host-sampling --no-prefix-cache
timeout 600 python3 tests/cuda-host/sampling_test.py "$TMP/host.json" - host || fail "host sampling"
http_stop
http_start --device cuda --max-seqs 4 --prefill-chunk 64 --no-prefix-cache
timeout 600 python3 tests/cuda-host/sampling_test.py "$TMP/device.json" "$TMP/host.json" device ||
    fail "device sampling differs from host sampling"
http_stop
echo "sampling: device == host"
