#!/usr/bin/env bash
# response_format json_object on the demo model (tests/http/structured_test.py).
source "$(dirname "$0")/lib.sh"
MODEL=$ROOT/models/demo http_start --max-seqs 4 --ctx-size 1024
timeout 600 python3 tests/http/structured_test.py || fail "structured_test.py"
http_stop
echo "test_structured: ok"
