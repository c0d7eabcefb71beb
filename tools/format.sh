#!/usr/bin/env bash
# format.sh - clang-format (.clang-format) over every C, C++ and CUDA file git knows,
# except generated tables (their first line says GENERATED). --check changes nothing
# and fails listing the files that differ; without it the files are rewritten.
set -u
cd "$(dirname "$0")/.."
check=0
[ "${1:-}" = "--check" ] && check=1
CF=$(command -v clang-format || command -v clang-format-14 || true)
[ -n "$CF" ] || { echo "format: clang-format not found (tools/install-deps.sh installs clang)"; exit 1; }
bad=0; n=0
while IFS= read -r f; do
    head -n 1 "$f" | grep -q GENERATED && continue
    n=$((n + 1))
    if [ $check = 1 ]; then
        if ! "$CF" --style=file "$f" | cmp -s - "$f"; then
            echo "format: $f differs from .clang-format (tools/format.sh rewrites it)"
            bad=$((bad + 1))
        fi
    else
        "$CF" --style=file -i "$f"
    fi
done < <(git ls-files --cached --others --exclude-standard '*.c' '*.h' '*.cc' '*.cu' '*.cuh')
echo "format: $n files, $bad differ"
[ $bad = 0 ]
