#!/usr/bin/env bash
# POST /v1/responses (the Responses API, run as the equivalent chat) through the official
# openai Python SDK: created, streamed event by event, structured, with tool calls and
# their round trip, and its refusals; with and without an API key.
source "$(dirname "$0")/lib.sh"
http_sdk_twice responses_test.py resp-key openai jsonschema pydantic
echo "test_responses: ok"
