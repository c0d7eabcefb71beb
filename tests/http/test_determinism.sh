#!/usr/bin/env bash
# Greedy: alone == among 16 concurrent (one batch, chunked prefill); seeded sampling
# repeats within a run and across two server runs.
source "$(dirname "$0")/lib.sh"
http_start --max-seqs 16 --prefill-chunk 16
timeout 300 python3 tests/http/determinism_test.py "$TMP/run1.json" || fail "run 1"
http_stop
http_start --max-seqs 4 --prefill-chunk 512
timeout 300 python3 tests/http/determinism_test.py - "$TMP/run1.json" || fail "run 2"
http_stop
echo "test_determinism: ok"
