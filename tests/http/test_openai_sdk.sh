#!/usr/bin/env bash
# The official openai Python SDK (tools/install-deps.sh installs it) against the
# server, with and without an API key; errors must surface as the SDK's exceptions.
source "$(dirname "$0")/lib.sh"
if ! python3 -c "import openai" 2>/dev/null; then
    echo "SKIP: the openai package is not installed (run tools/install-deps.sh)"
    exit 0
fi
http_start --max-seqs 4
timeout 300 python3 tests/http/sdk_test.py || fail "sdk_test.py"
http_stop
KEY=sdk-key http_start --max-seqs 4 --api-key sdk-key
KEY=sdk-key timeout 300 python3 tests/http/sdk_test.py || fail "sdk_test.py with a key"
http_stop
echo "test_openai_sdk: ok"
