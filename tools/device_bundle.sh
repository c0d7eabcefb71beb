#!/usr/bin/env bash
# tools/device_bundle.sh - builds the bundle carried to the GPU machine (which has no
# network and none of our Debian libraries). `make device-bundle` runs it.
#
# The device tool sends the working tree (tracked and untracked files, ~36 MiB) plus the
# carried paths, 64 MiB in all, so the bundle travels as one compressed tarball:
#   device-bundle/strata-device.tar.xz   (.tar.gz where xz is missing here)
#   device-bundle/BUNDLE_INFO            what was built, from which commit, what is missing
#   device-bundle/build.log
# tests/device/run.sh unpacks it (into /tmp) to:
#   bin/strata           wrapper: LD_LIBRARY_PATH=../lib, STRATA_CUDA_LIB=../cuda/libstrata_cuda.so
#   bin/strata.bin       build/strata
#   cuda/                libstrata_cuda.so, test_cuda_ops, test_cuda_golden_<arch>
#                        (tests/device/cuda_tests.sh prepare)
#   lib/                 every shared library those need (ldd), except glibc's own, the GPU
#                        driver's and cuBLAS (~600 MB; the machine's toolkit / torch has it)
#   tools/device/*.py    peer_bench.py, summarize.py, fla_bench.py (the tree's copies are preferred)
#   wheels/              flash-linear-attention's fla-core and einops (fla_bench.py's peer)
#   BUNDLE_INFO
# The fixtures (tests/golden) are not in it: the tree travels with them.
# Environment: BUILD (default build), STRATA_BIN (binary to ship instead of $BUILD/strata),
# BUNDLE (carried folder, default device-bundle), STAGE (the unpacked tree, default
# $BUILD/device-bundle), MAX_MIB (limit on the carried folder, default 16).
# Exit 1 when a piece is missing or a carried binary would not find its libraries there.
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD=${BUILD:-build}
OUTDIR=${BUNDLE:-device-bundle}
STAGE=${STAGE:-$BUILD/device-bundle}
MAX_MIB=${MAX_MIB:-16}
BIN=${STRATA_BIN:-$BUILD/strata}
LOG=$OUTDIR/build.log

rm -rf "$OUTDIR" "$STAGE"
mkdir -p "$OUTDIR" "$STAGE/bin" "$STAGE/lib" "$STAGE/cuda" "$STAGE/tools/device"
: >"$LOG"

if [ -z "${STRATA_BIN:-}" ]; then
    if ! make -j2 "BUILD=$BUILD" "$BUILD/strata" >>"$LOG" 2>&1; then
        echo "device_bundle: strata did not build (see $LOG); bundling without it" >&2
    fi
fi

# glibc's pieces must come from the target (mixing them breaks the loader), and so must
# the NVIDIA driver's libraries (they have to match its kernel module).
skip_lib() {
    case "$(basename "$1")" in
        ld-linux*|libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|libresolv.so*|\
        libutil.so*|libanl.so*|libmvec.so*|libcuda.so*|libnvidia-*|libnvcuvid*|linux-vdso*) return 0 ;;
    esac
    return 1
}

if [ -x "$BIN" ]; then
    cp "$BIN" "$STAGE/bin/strata.bin"
    strip --strip-debug "$STAGE/bin/strata.bin" 2>/dev/null || true
    # ldd lists the whole closure (libcurl's own dependencies included).
    ldd "$BIN" | awk '/=> \// { print $3 } /^\s*\// { print $1 }' | sort -u | while read -r lib; do
        skip_lib "$lib" && continue
        cp -L "$lib" "$STAGE/lib/"
        strip --strip-unneeded "$STAGE/lib/$(basename "$lib")" 2>/dev/null || true
    done
    cat >"$STAGE/bin/strata" <<'EOF'
#!/bin/sh
# Runs the bundled strata with the bundled libraries (glibc, the driver and cuBLAS come
# from the machine) and the bundled CUDA backend unless STRATA_CUDA_LIB names another.
here=$(cd "$(dirname "$0")" && pwd)
top=$(dirname "$here")
if [ -z "${STRATA_CUDA_LIB:-}" ] && [ -f "$top/cuda/libstrata_cuda.so" ]; then
    STRATA_CUDA_LIB=$top/cuda/libstrata_cuda.so
    export STRATA_CUDA_LIB
fi
LD_LIBRARY_PATH="$top/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$here/strata.bin" "$@"
EOF
    chmod +x "$STAGE/bin/strata"
else
    echo "device_bundle: no strata binary at $BIN" >&2
fi

# The CUDA backend library (loaded by strata at run time) and the device tests.
if ! DEV_DIR="$STAGE/cuda" LIB_DIR="$STAGE/lib" BUILD="$BUILD" NO_STRATA=1 \
        tests/device/cuda_tests.sh prepare >>"$LOG" 2>&1; then
    echo "device_bundle: the CUDA pieces were not all prepared (see $LOG)" >&2
fi
cp tools/device/*.py "$STAGE/tools/device/"
# flash-linear-attention (pure Python + Triton, which comes with torch there) for the
# kernel-level peer of the chunked delta rule (tools/device/fla_bench.py); the GPU
# machine has no network, so its wheels travel. Optional: the bundle works without them.
mkdir -p "$STAGE/wheels"
if ! python3 -m pip download -q --no-deps -d "$STAGE/wheels" fla-core==0.6.0 einops \
        >>"$LOG" 2>&1; then
    echo "device_bundle: no flash-linear-attention wheels (PyPI unreachable?); bundling without" >&2
fi

# Every carried binary must find its libraries in lib/ or among those the GPU machine
# has: glibc's, the driver's, cuBLAS.
missing=()
for f in bin/strata.bin cuda/libstrata_cuda.so cuda/test_cuda_ops cuda/test_cuda_golden_qwen35 \
         cuda/test_cuda_golden_gemma4 cuda/test_cuda_golden_nemotron_h; do
    [ -e "$STAGE/$f" ] || { missing+=("$f"); continue; }
    bad=$(LD_LIBRARY_PATH="$PWD/$STAGE/lib" ldd "$STAGE/$f" 2>&1 | grep -v "$PWD/$STAGE/lib/" |
          grep -vE '^\s*(linux-vdso|/lib64/ld-linux)|\b(libc|libm|libdl|librt|libpthread|libresolv|libcublas|libcublasLt)\.so' || true)
    if [ -n "$bad" ]; then
        echo "device_bundle: $f would need libraries the GPU machine may lack:" >&2
        echo "$bad" >&2
        missing+=("$f (libraries)")
    fi
done

{
    echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n) ($(. /etc/os-release && echo "$PRETTY_NAME"))"
    echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (dirty)')"
    echo "missing: ${missing[*]:-nothing}"
    echo "glibc here: $(ldd --version | head -1)"
    echo "nvcc here: $(nvcc --version 2>/dev/null | tail -1 || /usr/local/cuda/bin/nvcc --version 2>/dev/null | tail -1)"
    echo "libraries: $(ls "$STAGE/lib" | tr '\n' ' ')"
} >"$STAGE/BUNDLE_INFO"
cp "$STAGE/BUNDLE_INFO" "$OUTDIR/"

# Sanity: the wrapper runs here with the bundled libraries.
if [ -x "$STAGE/bin/strata" ] && ! "$STAGE/bin/strata" bench --help >/dev/null 2>&1; then
    echo "device_bundle: warning: the bundled strata does not answer 'bench --help' here" >&2
fi

if command -v xz >/dev/null 2>&1; then
    tar -C "$STAGE" -cf - . | xz -6 -T2 >"$OUTDIR/strata-device.tar.xz"
else
    tar -C "$STAGE" -czf "$OUTDIR/strata-device.tar.gz" .
fi
mib=$(du -sm "$OUTDIR" | cut -f1)
echo "device_bundle: $OUTDIR is ${mib} MiB ($(du -sm "$STAGE" | cut -f1) MiB unpacked in $STAGE," \
     "$(ls "$STAGE/lib" | wc -l) libraries); missing: ${missing[*]:-nothing}"
if [ "$mib" -ge "$MAX_MIB" ]; then
    echo "device_bundle: $OUTDIR exceeds ${MAX_MIB} MiB (the tree and it travel together, 64 MiB in all)" >&2
    exit 1
fi
[ ${#missing[@]} -eq 0 ]
