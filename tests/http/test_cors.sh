#!/usr/bin/env bash
# CORS (--allowed-origins): plain preflights and requests with an Origin header, and a
# real headless Chromium whose page on another port fetches the chat route (whole,
# streamed, without the key), for one allowed origin, for '*', and without the flag
# (no CORS header: the browser blocks the page). tests/http/cors_test.py does the work;
# Debian's chromium and the playwright package come from tools/install-deps.sh.
source "$(dirname "$0")/lib.sh"
CHROMIUM=${CHROMIUM:-/usr/bin/chromium}
if ! python3 -c "import playwright" 2>/dev/null || [ ! -x "$CHROMIUM" ]; then
    echo "SKIP: playwright or $CHROMIUM is not installed (run tools/install-deps.sh)"
    exit 0
fi
export CHROMIUM KEY=cors-key PAGE_PORT=$(http_free_port)
for mode in allowed wildcard none; do
    case $mode in
        allowed) http_start --max-seqs 2 --api-key "$KEY" --allowed-origins "http://127.0.0.1:$PAGE_PORT" ;;
        wildcard) http_start --max-seqs 2 --api-key "$KEY" --allowed-origins '*' ;;
        none) http_start --max-seqs 2 --api-key "$KEY" ;;
    esac
    timeout 60 python3 tests/http/cors_test.py "$mode" || fail "cors_test.py $mode"
    http_stop
done
echo "test_cors: ok"
