#!/usr/bin/env bash
# Structured outputs on the demo model: response_format json_object
# (tests/http/structured_test.py), then JSON schemas, regexes, choices, grammars, forced tool
# calls and the clients that use them (tests/http/structured_schema_test.py), then the same
# behind Qwen3.5's real thinking template (tests/http/structured_think_test.py), then forced
# calls in Gemma 4's call syntax (tests/http/structured_gemma_test.py).
source "$(dirname "$0")/lib.sh"
MODEL=$ROOT/models/demo http_start --max-seqs 4 --ctx-size 1024
timeout 600 python3 tests/http/structured_test.py || fail "structured_test.py"
timeout 900 python3 tests/http/structured_schema_test.py || fail "structured_schema_test.py"
http_stop

# The demo model with the real template; two vocab pieces no merge builds on become <think>
# and </think>, so the server sees a thinking model.
d=$TMP/think
mkdir -p "$d"
for f in config.json model.safetensors generation_config.json; do
    ln -sf "$ROOT/models/demo/$f" "$d/$f"
done
THINK_CLOSE_ID=$(python3 - "$ROOT/models/demo" "$d" tests/data/chat_templates/real/qwen35.jinja <<'PY'
import json, sys
src, dst, tmpl = sys.argv[1:]
t = json.load(open(f"{src}/tokenizer.json"))
vocab, merges = t["model"]["vocab"], t["model"]["merges"]
def merged(m):
    return "".join(m) if isinstance(m, list) else m.replace(" ", "")
def parts(m):
    return m if isinstance(m, list) else m.split(" ")
used = {p for m in merges for p in parts(m)}
by_id = {v: k for k, v in vocab.items()}
ids, i = [], max(by_id)
for text in ("<think>", "</think>"):
    while by_id.get(i) is None or by_id[i] in used or len(by_id[i]) < 2:
        i -= 1
    piece = by_id[i]
    merges[:] = [m for m in merges if merged(m) != piece]
    del vocab[piece]
    vocab[text] = i
    ids.append(i)
    i -= 1
json.dump(t, open(f"{dst}/tokenizer.json", "w"))
c = json.load(open(f"{src}/tokenizer_config.json"))
c["chat_template"] = open(tmpl).read()
json.dump(c, open(f"{dst}/tokenizer_config.json", "w"))
print(ids[1])
PY
) || fail "think tokenizer"
export THINK_CLOSE_ID
MODEL=$d http_start --max-seqs 2 --ctx-size 1024
timeout 300 python3 tests/http/structured_think_test.py || fail "structured_think_test.py"
http_stop

# The demo model read as writing Gemma 4's calls: forced calls follow that syntax.
MODEL=$ROOT/models/demo http_start --max-seqs 2 --ctx-size 1024 --tool-call-parser gemma4
timeout 300 python3 tests/http/structured_gemma_test.py || fail "structured_gemma_test.py"
http_stop
echo "test_structured: ok"
