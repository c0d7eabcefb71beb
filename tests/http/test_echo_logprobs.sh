#!/usr/bin/env bash
# Prompt logprobs with echo on /v1/completions (tests/http/echo_logprobs_test.py),
# checked against `strata logits`; once with the whole prompt in one step, once with a
# 5-token prefill chunk so the prompt rows span several steps.
source "$(dirname "$0")/lib.sh"
export STRATA
http_start --max-seqs 4
timeout 300 python3 tests/http/echo_logprobs_test.py || fail "echo_logprobs_test.py"
http_stop
http_start --max-seqs 4 --prefill-chunk 5
timeout 300 python3 tests/http/echo_logprobs_test.py || fail "echo_logprobs_test.py (prefill chunk 5)"
http_stop
echo "test_echo_logprobs: ok"
