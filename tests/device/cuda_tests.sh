#!/usr/bin/env bash
# tests/device/cuda_tests.sh - the CUDA backend's checks, in two halves.
#
#   tests/device/cuda_tests.sh prepare      # on the CPU machine (has our Debian libs + nvcc)
#   tests/device/cuda_tests.sh run          # on the GPU machine, from the repository root
#   tests/device/cuda_tests.sh cublas-path  # prints the folder holding libcublas.so.13
#   tests/device/cuda_tests.sh op-test      # builds only the op test from its source list
#                                           # (make test's cuda-check: the list cannot drift)
#
# prepare builds into $DEV_DIR (default build/cuda-device): libstrata_cuda.so, the op test
# (test_cuda_ops: needs only libc), the golden tests on CUDA (test_cuda_golden_<arch>, one
# per tests/unit/test_<arch>_golden.c), the engine's test on CUDA (test_cuda_engine), and a
# copy of strata (not with NO_STRATA=1). The Debian libraries the last three need are
# copied, with their ldd
# dependencies (glibc and the CUDA / driver libraries excepted), into $LIB_DIR (default
# $DEV_DIR/lib). tools/device_bundle.sh calls it to fill the bundle.
#
# run needs nothing but the carried tree: a prebuilt piece that is missing or does not load
# is rebuilt there when it can be (libstrata_cuda.so with nvcc, test_cuda_ops with gcc);
# the golden tests and strata need our libraries, so without them those steps fail. It
# runs the op test, the golden tests, the engine's test, and (unless BENCH=0) `strata bench
# --device cuda` on every dummy preset plus a 1,024-token prefill of Qwen3.5-2B; one line
# per step. cuBLAS
# is the machine's (libcublas.so.13: ldconfig, the toolkit, or the pip wheel torch uses):
# at ~600 MB it cannot travel; the CUDA runtime is linked statically into the library.
# Env: DEV_DIR, LIB_DIR, BUILD (prepare: the make build folder, default build), STRATA
# (binary to bench, default $DEV_DIR/strata or build/strata), PRESETS (space separated;
# default every preset strata lists), PROMPT_LEN (128), GEN_LEN (64), BENCH (1),
# SANITIZE (1: compute-sanitizer racecheck / synccheck / memcheck over the op test, 40 s
# each at most), OPS_TIMEOUT / GOLDEN_TIMEOUT (seconds, 150 each), BUDGET_S (run: every step ends within
# this many seconds of the start; tests/device/run.sh passes its deadline), OUT (logs;
# default /tmp).
# Exit 0 when every step that ran passed (a step skipped for want of a GPU is not a pass).
set -u
DEV_DIR=${DEV_DIR:-build/cuda-device}
LIB_DIR=${LIB_DIR:-$DEV_DIR/lib}
BUILD=${BUILD:-build}
CFLAGS_T="-std=c11 -O2 -g -Wall -Wextra -Werror -D_GNU_SOURCE -I. -pthread -fno-strict-aliasing -Wno-format-truncation"
TEST_SRC="tests/device/test_cuda_ops.c $(echo tests/device/cuda_ops_*.c)"
HOST_SRC="kernels/backend.c kernels/backend_select.c engine/base/err.c engine/base/dtype.c engine/base/quant.c engine/base/quant_encode.c engine/batch.c engine/sampler.c engine/sampler_scan.c engine/dsample.c"
GOLDEN_UNITS="qwen35 gemma4 nemotron_h"   # tests/unit/test_<unit>_golden.c

abspath() { case $1 in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }

find_nvcc() {
    command -v nvcc >/dev/null 2>&1 && return 0
    for d in /usr/local/cuda/bin /usr/local/cuda-13*/bin /usr/local/cuda-12*/bin; do
        [ -x "$d/nvcc" ] && { PATH=$d:$PATH; export PATH; return 0; }
    done
    return 1
}

# The CPU backend's sources, each ISA file with its own flags (as the Makefile does).
build_op_test() {
    local out=$1 objs=() f x o
    mkdir -p "$DEV_DIR/obj"
    for f in kernels/cpu/*.c $HOST_SRC; do
        case $f in
            *avx2*) x="-mavx2 -mfma -mf16c" ;;
            *avx512*) x="-mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512bf16 -mavx512vnni -mfma -mf16c" ;;
            *) x="" ;;
        esac
        o=$DEV_DIR/obj/$(basename "$f" .c).o
        gcc $CFLAGS_T $x -c "$f" -o "$o" || return 1
        objs+=("$o")
    done
    gcc $CFLAGS_T $TEST_SRC "${objs[@]}" -o "$out" -ldl -lm -lpthread || return 1
    rm -rf "$DEV_DIR/obj"
}

# Copies the non-system shared libraries a binary needs into $LIB_DIR.
copy_deps() {
    mkdir -p "$LIB_DIR"
    ldd "$1" | awk '/=> \// {print $3}' | while read -r lib; do
        [ -e "$LIB_DIR/$(basename "$lib")" ] && continue
        case $(basename "$lib") in
            libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|libresolv.so*|libnss*|libutil.so*|libanl.so*|ld-linux*|libcuda*|libcublas*|libcudart*|libnvidia*) ;;
            *) cp -L "$lib" "$LIB_DIR/" && strip --strip-unneeded "$LIB_DIR/$(basename "$lib")" 2>/dev/null ;;
        esac
    done
}

prepare() {
    mkdir -p "$DEV_DIR"
    find_nvcc || { echo "prepare: nvcc not found"; return 1; }
    make -j2 "BUILD=$BUILD" cuda || return 1
    cp "$BUILD/libstrata_cuda.so" "$DEV_DIR/"
    build_op_test "$DEV_DIR/test_cuda_ops" || return 1
    strip --strip-debug "$DEV_DIR/test_cuda_ops"
    local rc=0
    if make -j2 "BUILD=$BUILD" "$BUILD/strata" "$BUILD/libstrata.a"; then
        if [ -z "${NO_STRATA:-}" ]; then
            cp "$BUILD/strata" "$DEV_DIR/"
            strip --strip-debug "$DEV_DIR/strata"
            copy_deps "$DEV_DIR/strata"
        fi
        # One golden binary per architecture: the unit test compiled in as it is (its
        # initializers may trail model.h).
        local u
        for u in $GOLDEN_UNITS; do
            if gcc $CFLAGS_T -Wno-missing-field-initializers -DGOLDEN_UNIT="\"tests/unit/test_${u}_golden.c\"" \
                tests/device/test_cuda_golden.c "$BUILD/libstrata.a" -o "$DEV_DIR/test_cuda_golden_$u" \
                -ljansson -luv -lmicrohttpd -lcurl -lcrypto -lonig -lsentencepiece -lstdc++ -lm -lpthread -ldl; then
                strip --strip-debug "$DEV_DIR/test_cuda_golden_$u"
                copy_deps "$DEV_DIR/test_cuda_golden_$u"
            else
                echo "prepare: test_cuda_golden_$u did not build; its golden step will fail"
                rc=1
            fi
        done
        # the engine's unit test (padded, chained decode steps fed on the device)
        if gcc $CFLAGS_T tests/device/test_cuda_engine.c "$BUILD/libstrata.a" \
            -o "$DEV_DIR/test_cuda_engine" -ljansson -luv -lmicrohttpd -lcurl -lcrypto -lonig \
            -lsentencepiece -lstdc++ -lm -lpthread -ldl; then
            strip --strip-debug "$DEV_DIR/test_cuda_engine"
            copy_deps "$DEV_DIR/test_cuda_engine"
        else
            echo "prepare: test_cuda_engine did not build; its step will fail"
            rc=1
        fi
        # quantized models (Q8_0 / Q4_K on load) against their dequantized f32 twins
        if gcc $CFLAGS_T tests/device/test_cuda_quant_model.c "$BUILD/libstrata.a" \
            -o "$DEV_DIR/test_cuda_quant_model" -ljansson -luv -lmicrohttpd -lcurl -lcrypto \
            -lonig -lsentencepiece -lstdc++ -lm -lpthread -ldl; then
            strip --strip-debug "$DEV_DIR/test_cuda_quant_model"
            copy_deps "$DEV_DIR/test_cuda_quant_model"
        else
            echo "prepare: test_cuda_quant_model did not build; its step will fail"
            rc=1
        fi
    else
        echo "prepare: the library did not build; strata and the golden test are left out"
        rc=1
    fi
    du -sh "$DEV_DIR"
    return $rc
}

# libcublas.so.13 where the loader finds it: ldconfig, the toolkit, the pip wheel of the
# image's torch (nvidia/cu13/lib, or nvidia/cublas/lib in older wheels), else a bounded
# search. Sets CUBLAS_DIR and puts it on LD_LIBRARY_PATH when the loader would not find it.
find_cublas() {
    CUBLAS_DIR=$(ldconfig -p 2>/dev/null | awk '/libcublas\.so\.13 / {print $NF; exit}')
    if [ -n "$CUBLAS_DIR" ] && [ -e "$CUBLAS_DIR" ]; then
        CUBLAS_DIR=$(dirname "$CUBLAS_DIR")
        return 0
    fi
    local d
    for d in /usr/local/cuda/lib64 /usr/local/cuda-13*/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
             /usr/local/cuda-13*/targets/x86_64-linux/lib \
             $(timeout 20 python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, q, "lib") for p in nvidia.__path__ for q in ("cu13", "cublas")))' 2>/dev/null) \
             $(timeout 20 find /usr/local /opt /usr/lib -maxdepth 9 -name 'libcublas.so.13*' -printf '%h\n' 2>/dev/null | head -3); do
        if ls "$d"/libcublas.so.13* >/dev/null 2>&1; then
            CUBLAS_DIR=$d
            LD_LIBRARY_PATH=$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
            export LD_LIBRARY_PATH
            return 0
        fi
    done
    return 1
}

fails=0
skips=0
step() { # name, status, detail
    printf '%-28s %-5s %s\n' "$1" "$2" "$3"
    [ "$2" = FAIL ] && fails=$((fails + 1))
    [ "$2" = SKIP ] && skips=$((skips + 1))
    return 0
}
# rc of a test binary -> PASS / SKIP (77: no usable CUDA device) / FAIL
verdict() { case $1 in 0) echo PASS ;; 77) echo SKIP ;; *) echo FAIL ;; esac; }
# A shared object or program our loader can resolve ("not found" covers missing
# libraries and too-old symbol versions).
loads() { [ -e "$1" ] && ! ldd "$1" 2>&1 | grep -q 'not found'; }
# Timeout for a step: want seconds, cut to what BUDGET_S leaves (at least 1).
tl() {
    local want=$1 l
    if [ -n "${BUDGET_S:-}" ]; then
        l=$((BUDGET_S - SECONDS - 3))
        [ "$l" -lt "$want" ] && want=$l
    fi
    [ "$want" -lt 1 ] && want=1
    echo "$want"
}

# libstrata_cuda.so built with this machine's nvcc into dir (log: build.log in logdir).
rebuild_lib() {
    if find_nvcc && timeout -k 5 "$(tl 300)" make -j"$(nproc)" BUILD=build/dev cuda >"$2/build.log" 2>&1; then
        mkdir -p "$1" && cp build/dev/libstrata_cuda.so "$1/" && return 0
    fi
    step "build libstrata_cuda.so" FAIL "see $2/build.log"
    tail -20 "$2/build.log"
    return 1
}

run() {
    local log=${OUT:-/tmp}/cuda_tests
    mkdir -p "$log"
    if find_cublas; then
        echo "cublas: $(readlink -f "$CUBLAS_DIR/libcublas.so.13")"
    else
        step "libcublas.so.13" FAIL "not found (ldconfig, /usr/local/cuda*, the nvidia-cublas wheel)"
    fi
    # Our carried libraries only for our binaries: system tools keep the system's.
    local libs dev
    libs=$(abspath "$LIB_DIR")
    dev=$(abspath "$DEV_DIR")
    local with_libs="env LD_LIBRARY_PATH=$libs:${LD_LIBRARY_PATH:-}"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | sed 's/^/gpu: /'
    # the backend library: prebuilt, else nvcc here
    export STRATA_CUDA_LIB=$dev/libstrata_cuda.so
    if ! loads "$STRATA_CUDA_LIB"; then
        echo "libstrata_cuda.so: prebuilt one missing or not loadable, building it here"
        ldd "$STRATA_CUDA_LIB" 2>&1 | grep 'not found'
        rebuild_lib "$dev" "$log" || return 1
    fi
    if ! loads "$dev/test_cuda_ops"; then
        echo "test_cuda_ops: prebuilt one missing or not loadable, building it here"
        build_op_test "$dev/test_cuda_ops" || { step "build test_cuda_ops" FAIL ""; return 1; }
    fi
    local t
    t=$(tl "${OPS_TIMEOUT:-150}")
    timeout -k 5 "$t" $with_libs "$dev/test_cuda_ops" >"$log/ops.log" 2>&1
    local rc=$?
    # A GPU is there but our static CUDA runtime does not fit its driver: build with the
    # machine's own toolkit and run the op test once more.
    if [ $rc -eq 77 ] && grep -q 'driver version is insufficient' "$log/ops.log" &&
        nvidia-smi -L >/dev/null 2>&1; then
        cat "$log/ops.log"
        echo "libstrata_cuda.so: the driver is older than our CUDA runtime; building with this machine's nvcc"
        rebuild_lib "$dev" "$log" || return 1
        t=$(tl "${OPS_TIMEOUT:-150}")
        timeout -k 5 "$t" $with_libs "$dev/test_cuda_ops" >"$log/ops.log" 2>&1
        rc=$?
    fi
    cat "$log/ops.log"
    [ $rc -eq 124 ] && echo "test_cuda_ops: timed out after $t s"
    step "cuda op test" "$(verdict $rc)" "rc $rc, $(grep -c ' PASS$' "$log/ops.log") comparisons passed, $(grep -c ' FAIL$' "$log/ops.log") failed"
    local no_gpu=$((rc == 77)) u g
    # What the CPU emulation of tests/cuda-host cannot see: races inside a block, barrier
    # misuse on the hardware, out-of-bounds accesses. The sequence kernels under racecheck
    # and synccheck, every op under memcheck.
    local san tool only sopt
    san=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
    if [ $no_gpu = 0 ] && [ -n "$san" ] && [ "${SANITIZE:-1}" = 1 ]; then
        for tool in racecheck synccheck memcheck; do
            only="--only rmsnorm,attention,gated_delta,ssd,conv1d" sopt=""
            # memcheck: every op, and --report-api-errors no, as the op test provokes two
            # API errors on purpose (a 1 PiB allocation, a second registration of the same
            # host pages); only device-side errors count.
            [ $tool = memcheck ] && only="" sopt="--report-api-errors no"
            t=$(tl 40)
            timeout -k 5 "$t" $with_libs "$san" --tool $tool --error-exitcode 9 $sopt \
                "$dev/test_cuda_ops" --no-speed $only >"$log/sanitizer_$tool.log" 2>&1
            rc=$?
            # a run cut by its time limit found nothing, but did not finish: TIME, not FAIL
            step "compute-sanitizer $tool" "$(case $rc in 0) echo PASS ;; 124|137) echo TIME ;; *) echo FAIL ;; esac)" \
                "rc $rc, $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log/sanitizer_$tool.log" | tail -1)"
            [ $rc -eq 0 ] || grep -E '^=+ (Error|ERROR|Race|Invalid|Barrier)' "$log/sanitizer_$tool.log" | head -8
        done
    fi
    for u in $GOLDEN_UNITS; do
        g=$dev/test_cuda_golden_$u
        if [ $no_gpu = 1 ]; then
            step "golden $u on cuda" SKIP "no usable CUDA device"
        elif [ -x "$g" ] && ! $with_libs ldd "$g" 2>&1 | grep -q 'not found'; then
            t=$(tl "${GOLDEN_TIMEOUT:-150}")
            timeout -k 5 "$t" $with_libs "$g" >"$log/golden_$u.log" 2>&1
            rc=$?
            grep -E 'CHECK failed|FAILED|checks,|no CUDA backend' "$log/golden_$u.log" | head -60
            awk 'match($0, /max rel diff [^ ]+/) { v = substr($0, RSTART + 13, RLENGTH - 13) + 0
                 if (v >= w) { w = v; l = $0 } } END { if (l != "") print "  worst self-consistency:" l }' \
                "$log/golden_$u.log"
            [ $rc -eq 124 ] && echo "test_cuda_golden_$u: timed out after $t s"
            step "golden $u on cuda" "$(verdict $rc)" "rc $rc, $(tail -1 "$log/golden_$u.log")"
        else
            step "golden $u on cuda" FAIL "no prebuilt test_cuda_golden_$u with its libraries ($DEV_DIR)"
        fi
    done
    # WHAT BINARY LOG PATTERN: the prebuilt test under 60 s with our libraries, its lines
    # matching PATTERN (20 at most), then its step; SKIP without a GPU, FAIL when missing.
    prebuilt_step() {
        local g=$dev/$2
        if [ $no_gpu = 1 ]; then
            step "$1" SKIP "no usable CUDA device"
        elif [ -x "$g" ] && ! $with_libs ldd "$g" 2>&1 | grep -q 'not found'; then
            timeout -k 5 "$(tl 60)" $with_libs "$g" >"$log/$3" 2>&1
            local rc=$?
            grep -E "$4" "$log/$3" | head -20
            step "$1" "$(verdict $rc)" "rc $rc, $(tail -1 "$log/$3")"
        else
            step "$1" FAIL "no prebuilt $2 with its libraries ($DEV_DIR)"
        fi
    }
    prebuilt_step "engine on cuda" test_cuda_engine engine.log \
        'CHECK failed|FAILED|checks,|no CUDA backend'
    prebuilt_step "quantized models on cuda" test_cuda_quant_model quant_model.log \
        'CHECK failed|FAILED|checks,|no CUDA backend|paths agree'
    [ "${BENCH:-1}" = 0 ] && return 0
    local strata=${STRATA:-$dev/strata}
    [ -x "$strata" ] || strata=build/strata
    if [ ! -x "$strata" ] || $with_libs ldd "$strata" | grep -q 'not found'; then
        step "bench" SKIP "no runnable strata binary (run prepare, or carry the bundle)"
        return 0
    fi
    local presets=${PRESETS:-}
    if [ -z "$presets" ]; then # every preset the binary lists in its "not a preset" message
        presets=$($with_libs "$strata" bench --device cpu --model no-such-preset --load-format dummy 2>&1 |
                  sed -n 's/.*presets: //p' | tr ',' ' ')
    fi
    local p
    for p in $presets; do
        timeout -k 5 "$(tl 120)" $with_libs "$strata" bench --device cuda --model "$p" --load-format dummy \
            --prompt-len "${PROMPT_LEN:-128}" --gen-len "${GEN_LEN:-64}" >"$log/bench_${p//\//_}.log" 2>&1
        rc=$?
        step "bench $p" "$([ $rc -eq 0 ] && echo PASS || echo FAIL)" \
            "$(grep -E '^(decode|fraction|prefill) ' "$log/bench_${p//\//_}.log" | tr -s ' ' | paste -sd';' -)"
        grep -E 'device memory' "$log/bench_${p//\//_}.log" | sed 's/^/    /'
        [ $rc -eq 0 ] || tail -5 "$log/bench_${p//\//_}.log"
    done
    timeout -k 5 "$(tl 120)" $with_libs "$strata" bench --device cuda --model Qwen/Qwen3.5-2B --load-format dummy \
        --prompt-len 1024 --gen-len 8 >"$log/bench_prefill1024.log" 2>&1
    rc=$?
    step "prefill 1024 Qwen3.5-2B" "$([ $rc -eq 0 ] && echo PASS || echo FAIL)" \
        "$(grep -E '^prefill ' "$log/bench_prefill1024.log" | tr -s ' ') (target < 40 ms)"
}

case ${1:-run} in
    prepare) prepare ;;
    op-test) build_op_test "$DEV_DIR/test_cuda_ops" ;;
    cublas-path) find_cublas && echo "$CUBLAS_DIR" ;;
    run)
        run
        echo "cuda tests: $fails failed, $skips skipped"
        [ $fails -eq 0 ] || exit 1
        [ $skips -eq 0 ] || exit 77
        ;;
    *) echo "usage: $0 prepare|run|op-test|cublas-path"; exit 2 ;;
esac
