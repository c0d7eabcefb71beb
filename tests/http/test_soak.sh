#!/usr/bin/env bash
# The soak test (tools/soak.sh) for two minutes under ASan + UBSan: mixed streaming,
# whole, cancelled, oversized and refused traffic at twice --max-seqs, the server
# idle and clean afterwards. The plain build leaves it to the sanitizer run.
set -u
BUILD=${BUILD:-build}
case $BUILD in
    *asan*) exec env BUILD="$BUILD" "$(dirname "$0")/../../tools/soak.sh" --minutes "${SOAK_MINUTES:-2}" ;;
    *) echo "test_soak: runs under ASan only (make asan); skipped for $BUILD" ;;
esac
