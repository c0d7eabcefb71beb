#!/usr/bin/env bash
# Open WebUI 0.12.4's recorded requests (tests/data/clients/open-webui-0.12.4.jsonl: the
# model list, a streamed chat with 36 tool schemas, title / follow-ups / tags) replayed
# against the demo model; tests/http/openwebui_replay_test.py says what is checked.
#  - at the model's whole context (4096 = max_position_embeddings in models/demo/config.json;
#    /v1/models reports it as max_model_len) every request fits and must get a 200;
#  - at --ctx-size 512 the title (491 prompt tokens + 24) and the follow-ups (602) cannot
#    fit and must get the OpenAI 400 context_length_exceeded error, the rest a 200.
source "$(dirname "$0")/lib.sh"
MODEL=$ROOT/models/demo http_start --max-seqs 4 --ctx-size 4096
timeout 60 python3 tests/http/openwebui_replay_test.py fit || fail "replay at ctx 4096"
http_stop
MODEL=$ROOT/models/demo http_start --max-seqs 4 --ctx-size 512
timeout 60 python3 tests/http/openwebui_replay_test.py tight || fail "replay at ctx 512"
http_stop
echo "test_openwebui_replay: ok"
