#!/usr/bin/env bash
# Compiles every .cu file with nvcc (sm_90 + portable PTX) and fails on any warning,
# so the CUDA side builds in CI although CI has no GPU.
set -u
if ! command -v nvcc >/dev/null 2>&1; then
    for d in /usr/local/cuda/bin /usr/local/cuda-13*/bin; do [ -x "$d/nvcc" ] && PATH=$d:$PATH; done
fi
if ! command -v nvcc >/dev/null 2>&1; then echo "cuda-check: nvcc not found, skipped"; exit 0; fi
mkdir -p build/cuda-check
pass=0; fail=0
for f in "$@"; do
    o=build/cuda-check/$(basename "$f" .cu).o
    if nvcc -std=c++17 -I. -O2 -Werror all-warnings -Xcompiler -Wall,-Wextra \
        -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90 \
        -c "$f" -o "$o" 2> "$o.log"; then
        pass=$((pass + 1))
    else
        fail=$((fail + 1)); echo "FAIL nvcc $f"; cat "$o.log"
    fi
done
# The GPU machine's op test is built from a list of sources (tests/device/cuda_tests.sh, so
# it can be rebuilt there without our libraries): it must still link.
if DEV_DIR=build/cuda-check/device tests/device/cuda_tests.sh op-test > build/cuda-check/op-test.log 2>&1; then
    pass=$((pass + 1))
else
    fail=$((fail + 1)); echo "FAIL the device op test does not build from its source list"
    tail -20 build/cuda-check/op-test.log
fi
echo "cuda-check: $pass passed, $fail failed"
echo "cuda-check $pass $fail" >> build/test-summary
[ "$fail" -eq 0 ]
