#!/usr/bin/env bash
# The bundled demo model (models/demo): strata's greedy continuations must be
# token-identical to transformers' (models/demo/greedy_reference.json, recorded by
# tools/demo/make_fixture.py), and the shipped files must stay what `make run` needs.
set -euo pipefail
BUILD=${BUILD:-build}
DEMO=${DEMO:-models/demo}
STRATA=$BUILD/strata
fail=0

[ -x "$STRATA" ] || { echo "test_demo: $STRATA not built"; exit 1; }
for f in config.json generation_config.json model.safetensors tokenizer.json \
         tokenizer_config.json greedy_reference.json; do
    [ -f "$DEMO/$f" ] || { echo "FAIL test_demo: $DEMO/$f missing"; exit 1; }
done

# < 10 MB in the repository
size=$(du -cb "$DEMO" | tail -1 | cut -f1)
if [ "$size" -ge 10000000 ]; then
    echo "FAIL test_demo: $DEMO is $size bytes (limit 10 MB)"; fail=1
fi

# one line per case: "<prompt ids>\t<expected ids>\t<text as JSON>\t<greedy text as JSON>"
cases=$(python3 - "$DEMO/greedy_reference.json" <<'EOF'
import json, sys
ref = json.load(open(sys.argv[1]))
assert ref["cases"], "no cases"
for c in ref["cases"]:
    assert len(c["greedy"]) == ref["max_new_tokens"]
    print(",".join(map(str, c["prompt"])), ",".join(map(str, c["greedy"])),
          json.dumps(c["text"]), json.dumps(c["greedy_text"]), sep="\t")
EOF
)

# strata's own tokenizer must agree with the HF tokenizers library on this
# tokenizer.json (the fixture's prompt ids and decoded text come from it)
has_tok=0
"$STRATA" tokenize --help > /dev/null 2>&1 && has_tok=1
unjson() { python3 -c 'import json, sys; sys.stdout.write(json.loads(sys.argv[1]))' "$1"; }
ids_of() { python3 -c 'import json, sys; print(",".join(map(str, json.load(sys.stdin))))'; }

n=0
while IFS=$'\t' read -r prompt want text gtext; do
    n=$((n + 1))
    out=$("$STRATA" generate --model "$DEMO" --prompt-ids "$prompt" --max-tokens 20 \
          --ignore-eos --threads 1 2>/dev/null) || { echo "FAIL test_demo: strata generate exited $? on $text"; fail=1; continue; }
    got=$(printf '%s' "$out" | python3 -c 'import json,sys; print(",".join(map(str, json.load(sys.stdin)["ids"])))')
    if [ "$got" != "$want" ]; then
        echo "FAIL test_demo: case $n $text"
        echo "  transformers: $want"
        echo "  strata:       $got"
        fail=1
    fi
    if [ "$has_tok" = 1 ]; then
        tok=$(unjson "$text" | "$STRATA" tokenize --model "$DEMO" 2>&1 | ids_of 2>&1)
        if [ "$tok" != "$prompt" ]; then
            echo "FAIL test_demo: strata tokenize $text"
            echo "  tokenizers: $prompt"
            echo "  strata:     $tok"
            fail=1
        fi
        dec=$("$STRATA" tokenize --model "$DEMO" --decode "$want" 2>&1)
        if [ "$dec" != "$(unjson "$gtext")" ]; then
            echo "FAIL test_demo: strata tokenize --decode of case $n: '$dec' != $gtext"
            fail=1
        fi
    fi
done <<< "$cases"
[ "$has_tok" = 1 ] || echo "skip tokenizer checks: $STRATA has no 'tokenize' command yet"

if [ "$fail" -eq 0 ]; then
    echo "PASS test_demo ($n greedy cases x 20 tokens identical to transformers, $((size / 1024)) KiB)"
    [ "$has_tok" = 1 ] && echo "PASS test_demo tokenizer: prompt ids and decoded text identical to HF tokenizers"
fi
exit $fail
