#!/usr/bin/env bash
# POST /v1/responses (the Responses API, run as the equivalent chat) through the official
# openai Python SDK: created, streamed event by event, structured, with tool calls and
# their round trip, and its refusals; with and without an API key.
source "$(dirname "$0")/lib.sh"
if ! python3 -c "import openai, jsonschema, pydantic" 2>/dev/null; then
    echo "SKIP: the openai, jsonschema or pydantic package is not installed (run tools/install-deps.sh)"
    exit 0
fi
http_start --max-seqs 4
timeout 300 python3 tests/http/responses_test.py || fail "responses_test.py"
http_stop
KEY=resp-key http_start --max-seqs 4 --api-key resp-key
KEY=resp-key timeout 300 python3 tests/http/responses_test.py || fail "responses_test.py with a key"
http_stop
echo "test_responses: ok"
