#!/usr/bin/env bash
# schemathesis against /openapi.json on the live server, a bounded number of cases
# per operation: no 5xx, documented status codes and content types, every response
# valid against the document.
source "$(dirname "$0")/lib.sh"
if ! command -v schemathesis > /dev/null && ! python3 -c "import schemathesis" 2>/dev/null; then
    echo "SKIP: schemathesis is not installed (run tools/install-deps.sh)"
    exit 0
fi
ST="schemathesis"
command -v schemathesis > /dev/null || ST="python3 -m schemathesis.cli"
N=${SCHEMATHESIS_EXAMPLES:-40}
case "$BUILD" in *asan*) N=${SCHEMATHESIS_EXAMPLES:-15} ;; esac
http_start --max-seqs 4 --max-queue 64
cd "$TMP"
timeout 600 $ST run "$BASE/openapi.json" --url "$BASE" \
    --checks not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance \
    --max-examples "$N" --seed 1 --workers 2 --phases examples,fuzzing \
    --generation-database none --request-timeout 60 --no-color \
    --suppress-health-check all > "$TMP/st.log" 2>&1
rc=$?
cd "$ROOT"
tail -n 40 "$TMP/st.log"
[ "$rc" = 0 ] || fail "schemathesis exit $rc"
kill -0 "$SRV_PID" || fail "server died"
http_stop
echo "test_schemathesis: ok"
