#!/usr/bin/env bash
# Runs every test binary of $BUILD/tests (and every tests/*/test_*.sh script, unless
# UNIT_ONLY is set: `make unit`) and appends the counts to build/test-summary so
# tests/summary.sh can print one line.
set -u
BUILD=${BUILD:-build}
pass=0; fail=0; failed=()
mkdir -p "$BUILD/tests"
for t in "$BUILD"/tests/test_*; do
    [ -x "$t" ] || continue
    name=$(basename "$t")
    if timeout 900 "$t" > "$BUILD/tests/$name.log" 2>&1; then
        pass=$((pass + 1)); echo "PASS $name"
    else
        fail=$((fail + 1)); failed+=("$name"); echo "FAIL $name"; tail -n 30 "$BUILD/tests/$name.log"
    fi
done
for s in tests/*/test_*.sh; do
    [ -n "${UNIT_ONLY:-}" ] && break
    [ -x "$s" ] || continue
    name=$(basename "$(dirname "$s")")/$(basename "$s" .sh)
    log="$BUILD/tests/$(echo "$name" | tr / _).log"
    if BUILD=$BUILD timeout 900 "$s" > "$log" 2>&1; then
        pass=$((pass + 1)); echo "PASS $name"
    else
        fail=$((fail + 1)); failed+=("$name"); echo "FAIL $name"; tail -n 30 "$log"
    fi
done
echo "$BUILD: $pass passed, $fail failed"
mkdir -p build
echo "$BUILD $pass $fail" >> build/test-summary
[ "$fail" -eq 0 ]
