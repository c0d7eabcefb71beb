#!/usr/bin/env bash
# The official openai Python SDK (tools/install-deps.sh installs it) against the
# server, with and without an API key; errors must surface as the SDK's exceptions.
source "$(dirname "$0")/lib.sh"
http_sdk_twice sdk_test.py sdk-key openai
echo "test_openai_sdk: ok"
