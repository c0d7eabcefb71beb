#!/usr/bin/env bash
# tests/cuda-host/run.sh - kernels/cuda on the CPU (README.md), as `make cuda-host-check`
# runs it: the runtime's own test, the CUDA op test, the golden tests of the three
# families, the engine's test and the quantized models' test on the CUDA backend, the check that every kernel
# instantiation ran, the kernels per decode token against their budgets (launches.sh),
# the device sampler through strata serve (sampling.sh) and the planted bugs
# (mutants.sh). The real-size dummy presets of the golden tests are left out (STRATA_SKIP_BIG:
# gigabytes of weight copies); the GPU machine's tests/device/run.sh runs them. Records "cuda-host P F" for tests/summary.sh. Env: BUILD, CXX, HC_FLAGS.
set -u
BUILD=${BUILD:-build}
D=$BUILD/cuda-host
export STRATA_CUDA_LIB=$PWD/$D/libstrata_cuda.so HC_COVERAGE=$PWD/$D/coverage.txt STRATA_SKIP_BIG=1
rm -f "$HC_COVERAGE"
pass=0; fail=0
step() { # name, command...
    local name=$1 start=$SECONDS; shift
    if timeout 900 "$@" >"$D/$name.log" 2>&1; then
        pass=$((pass + 1))
        echo "PASS cuda-host/$name ($((SECONDS - start)) s: $(tail -n 1 "$D/$name.log"))"
    else
        fail=$((fail + 1))
        echo "FAIL cuda-host/$name"; tail -n 40 "$D/$name.log"
    fi
}
mkdir -p build
step runtime "$D/test_runtime"
step ops "$D/test_cuda_ops" --no-speed
for u in qwen35 gemma4 nemotron_h; do step "golden_$u" "$D/test_cuda_golden_$u"; done
step engine "$D/test_cuda_engine"
step quant_model "$D/test_cuda_quant_model"
step coverage python3 tests/cuda-host/coverage.py "$D/libstrata_cuda.so" "$HC_COVERAGE" kernels/cuda/*.cu
step launches tests/cuda-host/launches.sh
step sampling tests/cuda-host/sampling.sh
step mutants tests/cuda-host/mutants.sh
echo "cuda-host: $pass passed, $fail failed"
echo "cuda-host $pass $fail" >> build/test-summary
[ "$fail" -eq 0 ]
