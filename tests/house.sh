#!/usr/bin/env bash
# The house rules that are not tests of behaviour: every include goes through a door
# the room table of docs/design.md allows and no comment names a missing file
# (tools/check_rooms.py), and every C / C++ / CUDA file is formatted as .clang-format
# says (tools/format.sh --check). Records its counts for tests/summary.sh.
set -u
cd "$(dirname "$0")/.."
pass=0; fail=0
run() {
    local name=$1; shift
    if "$@" > "build/house-$name.log" 2>&1; then
        pass=$((pass + 1)); echo "PASS house/$name ($(tail -n 1 "build/house-$name.log"))"
    else
        fail=$((fail + 1)); echo "FAIL house/$name"; tail -n 40 "build/house-$name.log"
    fi
}
mkdir -p build
run rooms python3 tools/check_rooms.py
[ -x tools/format.sh ] && run format tools/format.sh --check
echo "house: $pass passed, $fail failed"
echo "house $pass $fail" >> build/test-summary
[ "$fail" -eq 0 ]
