#!/usr/bin/env bash
# tools/device_bundle.sh - builds device-bundle/, the folder carried to the GPU machine
# (which has no network and none of our Debian libraries). `make device-bundle` runs it.
#
#   device-bundle/bin/strata       wrapper: sets LD_LIBRARY_PATH to ../lib, runs strata.bin
#   device-bundle/bin/strata.bin   build/strata (when it builds)
#   device-bundle/lib/             every shared library strata.bin needs (ldd), except
#                                  glibc's own and the GPU driver's, which the machine has
#   device-bundle/tests/golden/    the reference fixtures
#   device-bundle/tests/bin/       CUDA unit tests (build/tests/test_cuda_*), if any
#   device-bundle/tools/device/    peer_bench.py, summarize.py
#   device-bundle/BUNDLE_INFO      what was built, from which commit, on which machine
# Environment: BUILD (default build), STRATA_BIN (binary to ship instead of $BUILD/strata),
# BUNDLE (output folder, default device-bundle), MAX_MIB (size limit, default 60).
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD=${BUILD:-build}
OUTDIR=${BUNDLE:-device-bundle}
MAX_MIB=${MAX_MIB:-60}
BIN=${STRATA_BIN:-$BUILD/strata}

rm -rf "$OUTDIR"
mkdir -p "$OUTDIR/bin" "$OUTDIR/lib" "$OUTDIR/tests" "$OUTDIR/tools"

if [ -z "${STRATA_BIN:-}" ]; then
    if ! make -j2 "BUILD=$BUILD" "$BUILD/strata" >"$OUTDIR/build.log" 2>&1; then
        echo "device_bundle: strata did not build (see $OUTDIR/build.log); bundling without it" >&2
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
    cp "$BIN" "$OUTDIR/bin/strata.bin"
    strip --strip-debug "$OUTDIR/bin/strata.bin" 2>/dev/null || true
    # ldd lists the whole closure (libcurl's own dependencies included).
    ldd "$BIN" | awk '/=> \// { print $3 } /^\s*\// { print $1 }' | sort -u | while read -r lib; do
        skip_lib "$lib" && continue
        cp -L "$lib" "$OUTDIR/lib/"
        strip --strip-unneeded "$OUTDIR/lib/$(basename "$lib")" 2>/dev/null || true
    done
    if ldd "$BIN" | grep -q "not found"; then
        echo "device_bundle: unresolved libraries:" >&2
        ldd "$BIN" | grep "not found" >&2
        exit 1
    fi
    cat >"$OUTDIR/bin/strata" <<'EOF'
#!/bin/sh
# Runs the bundled strata with the bundled libraries (glibc and the driver come from the machine).
here=$(cd "$(dirname "$0")" && pwd)
LD_LIBRARY_PATH="$here/../lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$here/strata.bin" "$@"
EOF
    chmod +x "$OUTDIR/bin/strata"
    # CUDA unit tests, when the build made any; they use the same libraries.
    for t in "$BUILD"/tests/test_cuda_*; do
        [ -x "$t" ] || continue
        mkdir -p "$OUTDIR/tests/bin"
        cp "$t" "$OUTDIR/tests/bin/"
    done
else
    echo "device_bundle: no strata binary at $BIN; the bundle holds tests and tools only" >&2
fi

# The CUDA backend library (loaded by strata at run time) and the device op tests.
if make -j2 "BUILD=$BUILD" cuda >>"$OUTDIR/build.log" 2>&1; then
    mkdir -p "$OUTDIR/bin"
    cp "$BUILD/libstrata_cuda.so" "$OUTDIR/bin/"   # found beside strata.bin
    DEV_DIR="$OUTDIR/cuda" LIB_DIR="$OUTDIR/lib" NO_STRATA=1 tests/device/cuda_tests.sh prepare \
        >>"$OUTDIR/build.log" 2>&1 || echo "device_bundle: CUDA tests not prepared (build.log)" >&2
else
    echo "device_bundle: libstrata_cuda.so did not build; strata will use the CPU" >&2
fi

cp -r tests/golden "$OUTDIR/tests/golden"
mkdir -p "$OUTDIR/tools/device"
cp tools/device/*.py "$OUTDIR/tools/device/"

{
    echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n) ($(. /etc/os-release && echo "$PRETTY_NAME"))"
    echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (dirty)')"
    echo "strata: $([ -x "$OUTDIR/bin/strata.bin" ] && echo yes || echo no)"
    echo "glibc here: $(ldd --version | head -1)"
    echo "libraries: $(ls "$OUTDIR/lib" | tr '\n' ' ')"
} >"$OUTDIR/BUNDLE_INFO"

# Sanity: the wrapper runs here with the bundled libraries only.
if [ -x "$OUTDIR/bin/strata" ]; then
    if ! "$OUTDIR/bin/strata" --help >/dev/null 2>&1 && ! "$OUTDIR/bin/strata" help >/dev/null 2>&1; then
        echo "device_bundle: warning: the bundled strata does not answer --help here" >&2
    fi
fi

mib=$(du -sm "$OUTDIR" | cut -f1)
echo "device_bundle: $OUTDIR is ${mib} MiB ($(ls "$OUTDIR/lib" | wc -l) libraries)"
if [ "$mib" -ge "$MAX_MIB" ]; then
    echo "device_bundle: $OUTDIR exceeds ${MAX_MIB} MiB" >&2
    exit 1
fi
