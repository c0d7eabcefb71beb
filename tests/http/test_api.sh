#!/usr/bin/env bash
# Every route and parameter over plain HTTP (tests/http/api_test.py), then the same
# server with API keys (--api-key twice, --api-key-file, STRATA_API_KEY): 401 without
# or with a wrong key, 200 with each, /health open, /metrics open unless
# --metrics-auth; a key file without keys stops the start (exit status 2).
source "$(dirname "$0")/lib.sh"
http_start --max-seqs 4
timeout 300 python3 tests/http/api_test.py || fail "api_test.py"
http_stop

# several keys: --api-key twice and a key file (comments, blank lines, blanks around)
printf '# team keys\n\n  file-key-1  \nfile-key-2\n' > "$TMP/keys"
http_start --max-seqs 2 --api-key 's3cret-key' --api-key other-key --api-key-file "$TMP/keys"
for k in s3cret-key other-key file-key-1 file-key-2; do
    [ "$(status_of -H "Authorization: Bearer $k" "$BASE/v1/models")" = 200 ] || fail "key $k: want 200"
done
[ "$(status_of -H 'Authorization: Bearer file-key' "$BASE/v1/models")" = 401 ] || fail "a key's prefix: want 401"
[ "$(status_of "$BASE/metrics")" = 200 ] || fail "/metrics must stay open without --metrics-auth"
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

# the environment form (commas separate keys) and --metrics-auth
export STRATA_API_KEY='env-a,env-b' STRATA_METRICS_AUTH=1
http_start --max-seqs 2
unset STRATA_API_KEY STRATA_METRICS_AUTH
[ "$(status_of -H 'Authorization: Bearer env-b' "$BASE/v1/models")" = 200 ] || fail "env key: want 200"
[ "$(status_of "$BASE/metrics")" = 401 ] || fail "--metrics-auth: /metrics without a key wants 401"
[ "$(status_of -H 'Authorization: Bearer env-a' "$BASE/metrics")" = 200 ] || fail "/metrics with a key"
[ "$(status_of "$BASE/health")" = 200 ] || fail "/health must stay open"
http_stop

# a key file that holds no key, or cannot be read: exit status 2 naming the file
printf '# only a comment\n\n' > "$TMP/nokeys"
for f in "$TMP/nokeys" "$TMP/missing-keys"; do
    rc=0
    "$STRATA" serve --model "$MODEL" --api-key-file "$f" > "$TMP/bad.log" 2>&1 || rc=$?
    [ "$rc" = 2 ] || fail "--api-key-file $f: exit status $rc, want 2"
    grep -q "$f" "$TMP/bad.log" || fail "--api-key-file $f: the error does not name it: $(cat "$TMP/bad.log")"
done
echo "test_api: ok"
