#!/usr/bin/env bash
# Prints the closing line of `make test`: the sum over every suite that ran. Each
# argument names a suite that must have recorded its counts in build/test-summary;
# one that did not (it failed to build, or crashed) counts as one failure.
set -u
f=build/test-summary
touch "$f"
missing=0
for suite in "$@"; do
    if ! awk -v s="$suite" '$1 == s {found = 1} END {exit !found}' "$f"; then
        echo "summary: suite '$suite' recorded no results (did it build?)"
        missing=$((missing + 1))
    fi
done
read -r p q < <(awk '{p+=$2; q+=$3} END {print p+0, q+0}' "$f")
rm -f "$f"
q=$((q + missing))
echo "$p passed, $q failed"
[ "$q" -eq 0 ]
