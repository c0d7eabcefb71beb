#!/usr/bin/env bash
# Encode speed of strata's C tokenizer vs the HF `tokenizers` Python package (the Rust
# library, single thread, one text per call) on the same 1 MB multilingual corpus
# (tools/tok_conformance/corpus.py bench_text), for the vendored real tokenizers.
# Two modes: "whole" encodes the 1 MB text in one call, "lines" one call per line.
# Usage: make && tools/bench_tokenizer.sh [qwen3 gemma3 qwen35]   (needs python3; the HF
# column needs `pip install tokenizers`, else it prints "-").
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
STRATA=$BUILD/strata
[ -x "$STRATA" ] || { echo "bench_tokenizer: build $STRATA first (make)" >&2; exit 1; }
names=("$@"); [ ${#names[@]} -gt 0 ] || names=(qwen3 gemma3 qwen35)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
python3 -c "import sys; sys.path.insert(0, 'tools/tok_conformance'); import corpus
open('$tmp/corpus.txt', 'w', encoding='utf-8').write(corpus.bench_text())"
export RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false
printf "%-8s %-6s %10s %12s %12s %8s\n" tokenizer mode tokens "strata MB/s" "HF MB/s" speedup
for n in "${names[@]}"; do
    d=$tmp/$n; mkdir -p "$d"
    zstd -dqf --long=27 "tests/data/tokenizers/$n/tokenizer.json.zst" -o "$d/tokenizer.json"
    for mode in whole lines; do
        flag=""; [ $mode = lines ] && flag=--lines
        ours=$("$STRATA" tokenize --model "$d" --bench "$tmp/corpus.txt" $flag --seconds 3)
        hf=$(python3 - "$d/tokenizer.json" "$tmp/corpus.txt" $mode <<'PY' 2>/dev/null || echo "- -"
import sys, time
from tokenizers import Tokenizer
tok = Tokenizer.from_file(sys.argv[1])
text = open(sys.argv[2], encoding="utf-8").read()
parts = text.splitlines(keepends=True) if sys.argv[3] == "lines" else [text]
size, best, start, n = len(text.encode()), 1e9, time.perf_counter(), 0
while n < 3 or time.perf_counter() - start < 3:
    t0 = time.perf_counter()
    ids = sum(len(tok.encode(p, add_special_tokens=False).ids) for p in parts)
    best, n = min(best, time.perf_counter() - t0), n + 1
print("%.3f %d" % (size / best / 1e6, ids))
PY
)
        python3 - "$n" "$mode" "$ours" $hf <<'PY'
import json, sys
name, mode, ours, hf, hf_ids = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4], sys.argv[5]
speed = "%.1fx" % (ours["mb_per_s"] / float(hf)) if hf != "-" else "-"
same = "" if hf_ids in ("-", str(ours["tokens"])) else "  (token counts differ: %s)" % hf_ids
print("%-8s %-6s %10d %12.2f %12s %8s%s" % (name, mode, ours["tokens"], ours["mb_per_s"], hf, speed, same))
PY
    done
done
