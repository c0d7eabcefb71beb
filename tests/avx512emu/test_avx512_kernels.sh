#!/usr/bin/env bash
# Runs the AVX-512 matmul kernels on any x86 CPU, built against SIMDe's portable intrinsics
# (immintrin.h here): the quantized ones (kernels/cpu/cpu_qmatmul_avx512.c) bit for bit
# against the scalar kernels (qmatmul_avx512_emu.c), the bf16 / f32 ones
# (cpu_matmul_avx512.c) for batch invariance and against a double reference
# (matmul_avx512_emu.c). On an AVX-512 machine the unit tests run the real thing; this keeps
# the files tested where CI has only AVX2.
set -eu
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
[ -f /usr/include/simde/x86/avx512.h ] || { echo "libsimde-dev missing (tools/install-deps.sh)"; exit 1; }
[ -f "$BUILD/libstrata.a" ] || { echo "$BUILD/libstrata.a missing: make first"; exit 1; }
# make asan-check runs this with SAN set: the library is sanitized, so the test is too
SAN=${SAN:-}
out="$BUILD/tests/avx512emu"
mkdir -p "$out"
# emu_run TEST KERNEL -D...: the kernel file built against SIMDe with its entry points renamed
# by the -D flags, linked with the test of that name beside this script (TEST plus .c), and run.
# -std=gnu11: SIMDe needs GNU extensions; no -mavx512*: SIMDe's C stands in for them
emu_run() {
    local name=$1 kernel=$2
    shift 2
    cc -std=gnu11 -O1 -D_GNU_SOURCE -Itests/avx512emu -I. -w -Wno-psabi $SAN "$@" \
        -c "$kernel" -o "$out/$name.kernel.o"
    cc -std=gnu11 -O1 -D_GNU_SOURCE -I. $SAN "tests/avx512emu/$name.c" "$out/$name.kernel.o" \
        "$BUILD/libstrata.a" -o "$out/$name" -lm -ldl -pthread
    "$out/$name"
}
emu_run qmatmul_avx512_emu kernels/cpu/cpu_qmatmul_avx512.c \
    -Dcpu_qmatmul_avx512=cpu_qmatmul_avx512_emu
emu_run matmul_avx512_emu kernels/cpu/cpu_matmul_avx512.c \
    -Dcpu_matmul_bf16_avx512=cpu_matmul_bf16_avx512_emu \
    -Dcpu_matmul_f32_avx512=cpu_matmul_f32_avx512_emu \
    -Dcpu_pack_bf16_avx512=cpu_pack_bf16_avx512_emu
