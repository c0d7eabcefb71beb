#!/usr/bin/env bash
# Every route and parameter over plain HTTP (tests/http/api_test.py), then the same
# server with --api-key: 401 without or with a wrong key, 200 with it, /health open.
source "$(dirname "$0")/lib.sh"
http_start --max-seqs 4
timeout 300 python3 tests/http/api_test.py || fail "api_test.py"
http_stop

http_start --max-seqs 2 --api-key 's3cret-key'
[ "$(status_of "$BASE/v1/models")" = 401 ] || fail "no key: want 401"
[ "$(status_of -H 'Authorization: Bearer wrong' "$BASE/v1/models")" = 401 ] || fail "wrong key: want 401"
[ "$(status_of -H 'Authorization: Bearer s3cret-key0' "$BASE/v1/models")" = 401 ] || fail "longer key: want 401"
[ "$(status_of -H 'Authorization: Bearer s3cret-key' "$BASE/v1/models")" = 200 ] || fail "good key: want 200"
[ "$(status_of -X POST -d '{"prompt":"x","max_tokens":1}' "$BASE/v1/completions")" = 401 ] || fail "completions no key"
[ "$(status_of "$BASE/health")" = 200 ] || fail "/health must stay open"
body=$(curl -s "$BASE/v1/models")
echo "$body" | python3 -c 'import json,sys; e=json.load(sys.stdin)["error"]; assert e["type"]=="authentication_error", e'
grep -q 's3cret' "$TMP/server.log" && fail "the API key was logged"
http_stop
echo "test_api: ok"
