#!/usr/bin/env bash
# tests/device/cuda_tests.sh - the CUDA backend's checks, in two halves.
#
#   tests/device/cuda_tests.sh prepare      # on the CPU machine (has our Debian libs + nvcc)
#   tests/device/cuda_tests.sh run          # on the GPU machine, from the repository root
#   tests/device/cuda_tests.sh cublas-path  # prints the folder holding libcublas.so.13
#
# prepare builds into $DEV_DIR (default build/cuda-device): libstrata_cuda.so, the op test
# (test_cuda_ops: needs only libc), the CUDA golden test, and a copy of strata (not with
# NO_STRATA=1). The Debian libraries the last two need are copied, with their ldd
# dependencies (glibc and the CUDA / driver libraries excepted), into $LIB_DIR (default
# $DEV_DIR/lib). Carry $DEV_DIR (~25 MiB), or let tools/device_bundle.sh put it in the bundle.
#
# run needs nothing but the carried tree: a prebuilt piece that is missing or does not load
# is rebuilt there when it can be (libstrata_cuda.so with nvcc, test_cuda_ops with gcc);
# the golden test and strata need our libraries, so without them those steps say SKIP. It
# runs the op test, the golden test, and (unless BENCH=0) `strata bench --device cuda` on
# every dummy preset plus a 1,024-token prefill of Qwen3.5-2B; one line per step.
# Env: DEV_DIR, LIB_DIR, STRATA (binary to bench, default $DEV_DIR/strata or build/strata),
# PRESETS (space separated; default every preset strata lists), PROMPT_LEN (128),
# GEN_LEN (64), BENCH (1), OUT (logs; default /tmp). Exit 0 when every step that ran passed.
set -u
DEV_DIR=${DEV_DIR:-build/cuda-device}
LIB_DIR=${LIB_DIR:-$DEV_DIR/lib}
CFLAGS_T="-std=c11 -O2 -g -Wall -Wextra -Werror -D_GNU_SOURCE -I. -pthread -fno-strict-aliasing -Wno-format-truncation"
TEST_SRC="tests/device/test_cuda_ops.c tests/device/cuda_ops_mixers.c tests/device/cuda_ops_ref.c"
HOST_SRC="engine/backend_select.c engine/err.c engine/dtype.c"

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
            *avx512*) x="-mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512bf16 -mfma -mf16c" ;;
            *) x="" ;;
        esac
        o=$DEV_DIR/obj/$(basename "$f" .c).o
        gcc $CFLAGS_T $x -c "$f" -o "$o" || return 1
        objs+=("$o")
    done
    gcc $CFLAGS_T $TEST_SRC "${objs[@]}" -o "$out" -ldl -lm -lpthread
}

# Copies the non-system shared libraries a binary needs into $LIB_DIR.
copy_deps() {
    mkdir -p "$LIB_DIR"
    ldd "$1" | awk '/=> \// {print $3}' | while read -r lib; do
        [ -e "$LIB_DIR/$(basename "$lib")" ] && continue
        case $(basename "$lib") in
            libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|libresolv.so*|libnss*|libutil.so*|libanl.so*|ld-linux*|libgcc_s.so*|libstdc++.so*|libcuda*|libcublas*|libcudart*|libnvidia*) ;;
            *) cp -L "$lib" "$LIB_DIR/" && strip --strip-unneeded "$LIB_DIR/$(basename "$lib")" 2>/dev/null ;;
        esac
    done
}

prepare() {
    mkdir -p "$DEV_DIR"
    find_nvcc || { echo "prepare: nvcc not found"; return 1; }
    make -j2 cuda || return 1
    cp build/libstrata_cuda.so "$DEV_DIR/"
    build_op_test "$DEV_DIR/test_cuda_ops" || return 1
    if make -j2 build/strata build/libstrata.a; then
        if [ -z "${NO_STRATA:-}" ]; then
            cp build/strata "$DEV_DIR/"
            strip --strip-debug "$DEV_DIR/strata"
            copy_deps "$DEV_DIR/strata"
        fi
        # The unit test is compiled in as it is; its initializers may trail model.h.
        if gcc $CFLAGS_T -Wno-missing-field-initializers tests/device/test_cuda_golden.c build/libstrata.a \
            -o "$DEV_DIR/test_cuda_golden" -ljansson -luv -lmicrohttpd -lcurl -lonig -lsentencepiece \
            -lstdc++ -lm -lpthread -ldl; then
            strip --strip-debug "$DEV_DIR/test_cuda_golden"
            copy_deps "$DEV_DIR/test_cuda_golden"
        else
            echo "prepare: test_cuda_golden did not build; the golden step will be skipped"
        fi
    else
        echo "prepare: the library did not build; strata and the golden test are left out"
    fi
    rm -rf "$DEV_DIR/obj"
    du -sh "$DEV_DIR"
}

# libcublas.so.13 where the loader finds it: the toolkit, or the pip wheel of the image.
# Sets CUBLAS_DIR and puts it on LD_LIBRARY_PATH when the loader would not find it alone.
find_cublas() {
    CUBLAS_DIR=$(ldconfig -p 2>/dev/null | awk '/libcublas\.so\.13 / {print $NF; exit}')
    if [ -n "$CUBLAS_DIR" ]; then
        CUBLAS_DIR=$(dirname "$CUBLAS_DIR")
        return 0
    fi
    local d
    for d in /usr/local/cuda/lib64 /usr/local/cuda-13*/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
             $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, q, "lib") for p in nvidia.__path__ for q in ("cublas", "cu13")))' 2>/dev/null); do
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
step() { # name, status, detail
    printf '%-28s %-5s %s\n' "$1" "$2" "$3"
    [ "$2" = FAIL ] && fails=$((fails + 1))
    return 0
}

run() {
    local log=${OUT:-/tmp}/cuda_tests
    mkdir -p "$log"
    find_cublas || step "libcublas.so.13" FAIL "not found (toolkit or nvidia-cublas wheel)"
    # Our carried libraries only for our binaries: system tools keep the system's.
    local libs=$LIB_DIR
    case $libs in /*) ;; *) libs=$PWD/$libs ;; esac
    local with_libs="env LD_LIBRARY_PATH=$libs:${LD_LIBRARY_PATH:-}"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | sed 's/^/gpu: /'
    # the backend library: prebuilt, else nvcc here
    export STRATA_CUDA_LIB=$PWD/$DEV_DIR/libstrata_cuda.so
    if ! python3 -c "import ctypes,sys; ctypes.CDLL(sys.argv[1])" "$STRATA_CUDA_LIB" 2>/dev/null; then
        echo "libstrata_cuda.so: prebuilt one missing or not loadable, building it here"
        find_nvcc && make -j16 BUILD=build-dev cuda >"$log/build.log" 2>&1 && mkdir -p "$DEV_DIR" &&
            cp build-dev/libstrata_cuda.so "$DEV_DIR/" || { step "build libstrata_cuda.so" FAIL "see $log/build.log"; tail -20 "$log/build.log"; return 1; }
    fi
    if [ ! -x "$DEV_DIR/test_cuda_ops" ] || ldd "$DEV_DIR/test_cuda_ops" | grep -q 'not found'; then
        build_op_test "$DEV_DIR/test_cuda_ops" || { step "build test_cuda_ops" FAIL ""; return 1; }
    fi
    timeout 300 $with_libs "$DEV_DIR/test_cuda_ops" >"$log/ops.log" 2>&1
    local rc=$?
    cat "$log/ops.log"
    step "cuda op test" "$([ $rc -eq 0 ] && echo PASS || echo FAIL)" "rc $rc, $(grep -c ' PASS$' "$log/ops.log") comparisons passed, $(grep -c ' FAIL$' "$log/ops.log") failed"
    if [ -x "$DEV_DIR/test_cuda_golden" ] && ! $with_libs ldd "$DEV_DIR/test_cuda_golden" | grep -q 'not found'; then
        timeout 300 $with_libs "$DEV_DIR/test_cuda_golden" >"$log/golden.log" 2>&1
        rc=$?
        tail -25 "$log/golden.log"
        step "qwen3.5 golden on cuda" "$([ $rc -eq 0 ] && echo PASS || echo FAIL)" "rc $rc"
    else
        step "qwen3.5 golden on cuda" SKIP "no prebuilt test_cuda_golden with its libraries ($DEV_DIR)"
    fi
    [ "${BENCH:-1}" = 0 ] && return 0
    local strata=${STRATA:-$DEV_DIR/strata}
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
        $with_libs "$strata" bench --device cuda --model "$p" --load-format dummy --prompt-len "${PROMPT_LEN:-128}" \
            --gen-len "${GEN_LEN:-64}" >"$log/bench_${p//\//_}.log" 2>&1
        rc=$?
        step "bench $p" "$([ $rc -eq 0 ] && echo PASS || echo FAIL)" \
            "$(grep -E '^(decode|fraction|prefill) ' "$log/bench_${p//\//_}.log" | tr -s ' ' | paste -sd';' -)"
        grep -E 'device memory' "$log/bench_${p//\//_}.log" | sed 's/^/    /'
        [ $rc -eq 0 ] || tail -5 "$log/bench_${p//\//_}.log"
    done
    $with_libs "$strata" bench --device cuda --model Qwen/Qwen3.5-2B --load-format dummy --prompt-len 1024 \
        --gen-len 8 >"$log/bench_prefill1024.log" 2>&1
    rc=$?
    step "prefill 1024 Qwen3.5-2B" "$([ $rc -eq 0 ] && echo PASS || echo FAIL)" \
        "$(grep -E '^prefill ' "$log/bench_prefill1024.log" | tr -s ' ') (target < 40 ms)"
}

case ${1:-run} in
    prepare) prepare ;;
    cublas-path) find_cublas && echo "$CUBLAS_DIR" ;;
    run) run; echo "cuda tests: $fails failed"; [ $fails -eq 0 ] ;;
    *) echo "usage: $0 prepare|run|cublas-path"; exit 2 ;;
esac
