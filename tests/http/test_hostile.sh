#!/usr/bin/env bash
# Malformed and hostile input: 4xx or a timeout, and the server stays up.
source "$(dirname "$0")/lib.sh"
http_start --max-seqs 4 --idle-timeout 2 --max-body-bytes 65536 --max-connections 512
timeout 300 python3 tests/http/hostile_test.py || fail "hostile_test.py"
kill -0 "$SRV_PID" || fail "server died"
http_stop
echo "test_hostile: ok"
