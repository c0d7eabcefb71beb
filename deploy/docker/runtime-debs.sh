#!/bin/sh
# Prints the Debian/Ubuntu packages that hold the shared libraries the given binaries
# and shared objects load, one a line, so a runtime image installs exactly what the
# build linked (the package names differ between Debian 12 and Ubuntu 24.04, e.g.
# libuv1 / libuv1t64).
# Usage: deploy/docker/runtime-debs.sh build/strata [build/libstrata_cuda.so] > runtime-debs.txt
set -eu
for f in "$@"; do ldd "$f"; done | awk '$3 ~ /^\// {print $3}' | sort -u | while read -r lib; do
    real=$(realpath "$lib")
    # dpkg records some libraries under /lib, others under /usr/lib (merged /usr)
    for cand in "$lib" "$real" "${lib#/usr}" "/usr$lib" "${real#/usr}" "/usr$real"; do
        if dpkg -S "$cand" 2>/dev/null; then break; fi
    done
done | cut -d: -f1 | sort -u
