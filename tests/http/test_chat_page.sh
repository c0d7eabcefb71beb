#!/usr/bin/env bash
# The chat page at GET / (server/chat.html): served without the key with its
# Content-Security-Policy, unknown paths still 404, and a real headless Chromium that
# asks for the key after a 401, streams an answer, and stops a long one (the server
# counts the abort). tests/http/chat_page_test.py does the work over the demo model;
# Debian's chromium and the playwright package come from tools/install-deps.sh.
source "$(dirname "$0")/lib.sh"
CHROMIUM=${CHROMIUM:-/usr/bin/chromium}
if ! python3 -c "import playwright" 2>/dev/null || [ ! -x "$CHROMIUM" ]; then
    echo "SKIP: playwright or $CHROMIUM is not installed (run tools/install-deps.sh)"
    exit 0
fi
export CHROMIUM KEY=chat-page-key
# room for the long answer the test stops (2000 tokens)
MODEL=$ROOT/models/demo http_start --max-seqs 2 --api-key "$KEY" --ctx-size 2304
timeout 60 python3 tests/http/chat_page_test.py || fail "chat_page_test.py"
http_stop
echo "test_chat_page: ok"
