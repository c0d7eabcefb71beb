#!/usr/bin/env bash
# Tool calls parsed from the output (tests/http/tool_calls_test.py): the tiny checkpoint with
# the test tokenizer, three of whose vocab entries become whole replies in the XML tool-call
# form (one call; text and two calls; a malformed call), which logit_bias selects.
source "$(dirname "$0")/lib.sh"
d=$(http_model_dir)
TOOL_TOKENS=$(python3 - "$d/tokenizer.json" "$ROOT/tools" <<'PY'
import json, sys
path = sys.argv[1]
sys.path.insert(0, sys.argv[2])
t = json.load(open(path))
replies = {
    "one": "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
           "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
    "two": "Let me check.\n\n<tool_call>\n<function=search>\n<parameter=query>\ntides\n"
           "</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=get_weather>\n"
           "<parameter=city>\nOslo\n</parameter>\n</function>\n</tool_call>",
    "bad": "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</function>\n"
           "</tool_call>",
}
from byte_level import bytes_to_unicode
enc = bytes_to_unicode()  # the ByteLevel alphabet the vocab is written in
vocab, merges = t["model"]["vocab"], t["model"]["merges"]
def merged(m):
    return "".join(m) if isinstance(m, list) else m.replace(" ", "")
def parts(m):
    return m if isinstance(m, list) else m.split(" ")
ids, i = {}, 511
for name, text in replies.items():
    # a vocab entry no merge builds on: it and the merge making it can go
    while True:
        piece = next(k for k, v in vocab.items() if v == i)
        if not any(piece in parts(m) for m in merges):
            break
        i -= 1
    merges[:] = [m for m in merges if merged(m) != piece]
    del vocab[piece]
    vocab["".join(enc[b] for b in text.encode())] = i
    ids[name] = i
    i -= 1
json.dump(t, open(path, "w"))
print(json.dumps(ids))
PY
) || fail "tokenizer"
export TOOL_TOKENS
MODEL=$d http_start --max-seqs 2 --tool-call-parser xml
timeout 120 python3 tests/http/tool_calls_test.py || fail "tool_calls_test.py"
http_stop
echo "test_tool_calls: ok"
