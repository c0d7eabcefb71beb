#!/usr/bin/env bash
# Tool round trips through each family's real chat template (tests/http/tool_roundtrip_test.py):
# the tiny checkpoint and test tokenizer with tokenizer_config.json's chat_template replaced.
source "$(dirname "$0")/lib.sh"
for t in qwen35 gemma4 nemotron3_nano; do
    d=$TMP/model_$t
    mkdir -p "$d"
    for f in config.json model.safetensors generation_config.json; do
        ln -sf "$ROOT/tests/golden/qwen35_tiny/$f" "$d/$f"
    done
    cp tests/http/fixtures/tokenizer.json "$d/"
    python3 -c 'import json, sys
c = json.load(open(sys.argv[1])); c["chat_template"] = open(sys.argv[2]).read()
json.dump(c, open(sys.argv[3], "w"))' tests/http/fixtures/tokenizer_config.json \
        "tests/data/chat_templates/real/$t.jinja" "$d/tokenizer_config.json"
    MODEL=$d http_start --max-seqs 2 --ctx-size 512
    TEMPLATE=$t timeout 120 python3 tests/http/tool_roundtrip_test.py || fail "$t"
    http_stop
    unset MODEL
done
echo "test_tool_roundtrip: ok"
