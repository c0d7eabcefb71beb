#!/usr/bin/env python3
"""Writes server/openapi.json, the OpenAPI 3.0 document served at /openapi.json.

The document describes what strata serve accepts and returns (OpenAI shapes plus the
vLLM extensions it honours). Edit this script, run it, commit both files:
    python3 tools/gen_openapi.py
schemathesis (tests/http/test_schemathesis.sh) checks the live server against it.
"""
import json
import os

NUM = {"type": "number"}
INT = {"type": "integer"}
STR = {"type": "string"}
BOOL = {"type": "boolean"}


def nullable(s):
    return dict(s, nullable=True)


def ref(name):
    return {"$ref": f"#/components/schemas/{name}"}


ids = {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 2147483647}}
sampling = {
    "model": nullable(STR),
    "max_tokens": nullable({"type": "integer", "minimum": 1,
                            "description": "at most this many new tokens; unset: until the turn "
                                           "ends or the context is full"}),
    "temperature": nullable({"type": "number", "minimum": 0, "maximum": 2}),
    "top_p": nullable({"type": "number", "minimum": 0, "maximum": 1, "exclusiveMinimum": True}),
    "top_k": nullable({"type": "integer", "minimum": -1}),
    "min_p": nullable({"type": "number", "minimum": 0, "maximum": 1}),
    "presence_penalty": nullable({"type": "number", "minimum": -2, "maximum": 2}),
    "frequency_penalty": nullable({"type": "number", "minimum": -2, "maximum": 2}),
    "repetition_penalty": nullable({"type": "number", "minimum": 0, "maximum": 10,
                                    "exclusiveMinimum": True}),
    "seed": nullable(INT),
    "stop": nullable({"oneOf": [STR, {"type": "array", "items": STR, "maxItems": 16}]}),
    "stop_token_ids": nullable(dict(ids, maxItems=16)),
    "n": nullable({"type": "integer", "minimum": 1}),
    "logit_bias": nullable({"type": "object", "additionalProperties":
                            {"type": "number", "minimum": -100, "maximum": 100}}),
    "stream": nullable(BOOL),
    "stream_options": nullable({"type": "object", "properties": {"include_usage": nullable(BOOL)}}),
    "user": nullable(STR),
    "ignore_eos": nullable(BOOL),
    "skip_special_tokens": nullable(BOOL),
}

completion_req = {
    "type": "object",
    "required": ["prompt"],
    "properties": dict(sampling, **{
        "prompt": {"oneOf": [STR, {"type": "array", "items": STR, "minItems": 1},
                             dict(ids, minItems=1),
                             {"type": "array", "items": dict(ids, minItems=1), "minItems": 1}]},
        # 0 only with echo: the prompt (and with logprobs its scores) without a completion
        "max_tokens": nullable({"type": "integer", "minimum": 0, "default": 16,
                                "description": "at most this many new tokens (16 when unset, as "
                                               "OpenAI and vLLM); 0 only with echo"}),
        # with logprobs, the logprobs cover the prompt too (the first token's are null)
        "echo": nullable(BOOL),
        "logprobs": nullable({"type": "integer", "minimum": 0, "maximum": 20}),
        "suffix": nullable(STR),
        "best_of": nullable({"type": "integer", "minimum": 1}),
    }),
}

part = {"type": "object", "required": ["type", "text"],
        "properties": {"type": {"type": "string", "enum": ["text"]}, "text": STR}}
message = {"type": "object", "required": ["role"], "properties": {
    "role": {"type": "string", "enum": ["system", "user", "assistant", "tool", "developer"]},
    "content": nullable({"oneOf": [STR, {"type": "array", "items": part}]}),
    "name": STR,
}}
chat_req = {
    "type": "object",
    "required": ["messages"],
    "properties": dict(sampling, **{
        "messages": {"type": "array", "items": message, "minItems": 1},
        "max_completion_tokens": nullable({"type": "integer", "minimum": 1}),
        "logprobs": nullable(BOOL),
        "top_logprobs": nullable({"type": "integer", "minimum": 0, "maximum": 20}),
        "add_generation_prompt": nullable(BOOL),
        "continue_final_message": nullable(BOOL),
        "chat_template_kwargs": nullable({"type": "object"}),
        "tools": nullable({"type": "array", "items": {"type": "object"}}),
        "tool_choice": nullable({"oneOf": [STR, {"type": "object"}]}),
        "response_format": nullable({"type": "object", "properties": {"type": STR}}),
        "reasoning_effort": nullable(STR),
    }),
}

usage = {"type": "object", "required": ["prompt_tokens", "completion_tokens", "total_tokens"],
         "properties": {"prompt_tokens": INT, "completion_tokens": INT, "total_tokens": INT,
                        "prompt_tokens_details": nullable({"type": "object", "properties":
                                                           {"cached_tokens": INT}})}}
finish = nullable({"type": "string", "enum": ["stop", "length", "abort", "tool_calls"]})
top_item = {"type": "object", "required": ["token", "logprob"],
            "properties": {"token": STR, "logprob": NUM, "bytes": nullable({"type": "array", "items": INT})}}
chat_lp = nullable({"type": "object", "properties": {"content": nullable({"type": "array", "items": {
    "type": "object", "required": ["token", "logprob", "top_logprobs"],
    "properties": dict(top_item["properties"], top_logprobs={"type": "array", "items": top_item})}})}})
cmpl_lp = nullable({"type": "object", "properties": {
    "tokens": {"type": "array", "items": STR},
    "token_logprobs": {"type": "array", "items": nullable(NUM)},
    "top_logprobs": {"type": "array", "items": nullable({"type": "object", "additionalProperties": NUM})},
    "text_offset": {"type": "array", "items": INT}}})
envelope = {"id": STR, "created": INT, "model": STR, "system_fingerprint": nullable(STR),
            "usage": nullable(usage)}
completion_resp = {"type": "object", "required": ["id", "object", "created", "model", "choices"],
                   "properties": dict(envelope, object={"type": "string", "enum": ["text_completion"]},
                                      choices={"type": "array", "items": {
                                          "type": "object", "required": ["index", "text", "finish_reason"],
                                          "properties": {"index": INT, "text": STR, "logprobs": cmpl_lp,
                                                         "finish_reason": finish}}})}
chat_resp = {"type": "object", "required": ["id", "object", "created", "model", "choices"],
             "properties": dict(envelope, object={"type": "string", "enum": ["chat.completion"]},
                                choices={"type": "array", "items": {
                                    "type": "object", "required": ["index", "message", "finish_reason"],
                                    "properties": {"index": INT, "logprobs": chat_lp, "finish_reason": finish,
                                                   "message": {"type": "object", "required": ["role"],
                                                               "properties": {
                                                                   "role": {"type": "string", "enum": ["assistant"]},
                                                                   "content": nullable(STR),
                                                                   "reasoning_content": nullable(STR),
                                                                   # the same text: vLLM's newer name
                                                                   "reasoning": nullable(STR),
                                                                   "refusal": nullable(STR)}}}}})}
error = {"type": "object", "required": ["error"], "properties": {"error": {
    "type": "object", "required": ["message", "type"],
    "properties": {"message": STR, "type": STR, "param": nullable(STR), "code": nullable(STR)}}}}
# /v1/responses: run as the equivalent chat (server/responses_req.c); nothing is stored
responses_req = {
    "type": "object",
    "required": ["input"],
    "properties": {
        "model": nullable(STR),
        "input": {"oneOf": [STR, {"type": "array", "minItems": 1, "items": {"type": "object"}}],
                  "description": "a user message, or items: messages (user, system, developer, "
                                 "assistant; text or input_text / output_text parts), function_call "
                                 "and function_call_output items"},
        "instructions": nullable(STR),
        "max_output_tokens": nullable({"type": "integer", "minimum": 1}),
        "temperature": sampling["temperature"], "top_p": sampling["top_p"],
        "tools": nullable({"type": "array", "items": {"type": "object", "required": ["type", "name"],
                                                      "properties": {"type": {"type": "string", "enum": ["function"]},
                                                                     "name": STR}}}),
        "tool_choice": nullable({"oneOf": [STR, {"type": "object"}]}),
        "parallel_tool_calls": nullable(BOOL),
        "text": nullable({"type": "object", "properties": {"format": nullable({"type": "object"})}}),
        "reasoning": nullable({"type": "object", "description": "effort \"none\" turns thinking off"}),
        "stream": nullable(BOOL),
        "store": nullable(BOOL),
        "metadata": nullable({"type": "object", "additionalProperties": STR}),
        "user": nullable(STR),
        "previous_response_id": nullable({"type": "string", "description": "refused: nothing is stored"}),
    },
}
responses_resp = {"type": "object", "required": ["id", "object", "created_at", "model", "output", "status"],
                  "properties": {"id": STR, "object": {"type": "string", "enum": ["response"]}, "created_at": INT,
                                 "model": STR, "status": {"type": "string", "enum": ["completed", "incomplete"]},
                                 "store": BOOL, "output": {"type": "array", "items": {"type": "object"}},
                                 "usage": nullable({"type": "object", "required": ["input_tokens", "output_tokens",
                                                                                   "total_tokens"],
                                                    "properties": {"input_tokens": INT, "output_tokens": INT,
                                                                   "total_tokens": INT}})}}
model = {"type": "object", "required": ["id", "object", "created", "owned_by"],
         "properties": {"id": STR, "object": {"type": "string", "enum": ["model"]}, "created": INT,
                        "owned_by": STR, "root": nullable(STR), "parent": nullable(STR),
                        "max_model_len": INT}}


def err(desc):
    return {"description": desc, "content": {"application/json": {"schema": ref("Error")}}}


def json_body(schema):
    return {"required": True, "content": {"application/json": {"schema": schema}}}


common_errors = {"400": err("Invalid request"), "401": err("Missing or wrong API key"),
                 "404": err("Unknown model"), "405": err("Method not allowed"),
                 "408": err("Request timed out"), "413": err("Body too large"),
                 "429": err("Queue full; retry after Retry-After seconds"),
                 "503": err("Loading, draining or out of memory")}


def gen_op(summary, req, resp):
    return {"post": {
        "summary": summary,
        "requestBody": json_body(ref(req)),
        "responses": dict({"200": {"description": "The completion, or an SSE stream of chunks "
                                                  "ending with `data: [DONE]` when stream is true; "
                                                  "a stream that waits (queued, long prefill) "
                                                  "carries `: keep-alive` comment lines between "
                                                  "events every --sse-keepalive seconds",
                                   "content": {"application/json": {"schema": ref(resp)},
                                               "text/event-stream": {"schema": STR}}}},
                          **common_errors)}}


doc = {
    "openapi": "3.0.3",
    "info": {"title": "strata", "version": "0.1.0",
             "description": "OpenAI-compatible inference server (completions, chat completions, "
                            "responses, models, tokenize, health, metrics)."},
    "paths": {
        "/v1/completions": gen_op("Text completion", "CompletionRequest", "CompletionResponse"),
        "/v1/chat/completions": gen_op("Chat completion", "ChatCompletionRequest", "ChatCompletionResponse"),
        "/v1/responses": {"post": {
            "summary": "Response (OpenAI Responses API, run as a chat; not stored)",
            "requestBody": json_body(ref("ResponsesRequest")),
            "responses": dict({"200": {"description": "The Response, or when stream is true an SSE stream "
                                                      "of typed events (`event: response.created` ... "
                                                      "`response.completed` / `response.incomplete`), no "
                                                      "`[DONE]`",
                                       "content": {"application/json": {"schema": ref("ResponsesResponse")},
                                                   "text/event-stream": {"schema": STR}}}}, **common_errors)}},
        "/v1/responses/{id}": {"get": {"summary": "Always 404: responses are not stored", "parameters": [
            {"name": "id", "in": "path", "required": True, "schema": STR}], "responses": {
            "401": err("Missing or wrong API key"), "404": err("Responses are not stored")}}},
        "/v1/models": {"get": {"summary": "List models", "responses": {
            "200": {"description": "The served model", "content": {"application/json": {"schema": {
                "type": "object", "required": ["object", "data"],
                "properties": {"object": {"type": "string", "enum": ["list"]},
                               "data": {"type": "array", "items": ref("Model")}}}}}},
            "401": err("Missing or wrong API key"), "503": err("Loading")}}},
        "/v1/models/{model}": {"get": {"summary": "One model", "parameters": [
            {"name": "model", "in": "path", "required": True, "schema": STR}], "responses": {
            "200": {"description": "The model", "content": {"application/json": {"schema": ref("Model")}}},
            "401": err("Missing or wrong API key"), "404": err("Unknown model"), "503": err("Loading")}}},
        "/health": {"get": {"summary": "Readiness", "responses": {
            "200": {"description": "Ready", "content": {"application/json": {"schema": {
                "type": "object", "required": ["status"], "properties": {"status": STR}}}}},
            "503": err("Loading or draining")}}},
        "/metrics": {"get": {"summary": "Prometheus metrics", "responses": {
            "200": {"description": "Prometheus text format 0.0.4",
                    "content": {"text/plain": {"schema": STR}}},
            "401": err("Missing or wrong API key (with --metrics-auth)")}}},
        "/openapi.json": {"get": {"summary": "This document", "responses": {
            "200": {"description": "OpenAPI 3 document",
                    "content": {"application/json": {"schema": {"type": "object"}}}}}}},
        "/tokenize": {"post": {"summary": "Text or messages to token ids", "requestBody": json_body({
            "type": "object", "properties": {
                "prompt": STR, "messages": {"type": "array", "items": message, "minItems": 1},
                "add_special_tokens": BOOL, "add_generation_prompt": nullable(BOOL),
                "chat_template_kwargs": nullable({"type": "object"}), "return_token_strs": nullable(BOOL),
                "model": nullable(STR)}}), "responses": dict({
            "200": {"description": "Token ids", "content": {"application/json": {"schema": {
                "type": "object", "required": ["count", "tokens", "max_model_len"],
                "properties": {"count": INT, "max_model_len": INT, "tokens": {"type": "array", "items": INT},
                               "token_strs": {"type": "array", "items": STR}}}}}}}, **common_errors)}},
        "/detokenize": {"post": {"summary": "Token ids to text", "requestBody": json_body({
            "type": "object", "required": ["tokens"], "properties": {"tokens": ids, "model": nullable(STR)}}),
            "responses": dict({"200": {"description": "Text", "content": {"application/json": {"schema": {
                "type": "object", "required": ["prompt"], "properties": {"prompt": STR}}}}}}, **common_errors)}},
    },
    "components": {
        "schemas": {"CompletionRequest": completion_req, "ChatCompletionRequest": chat_req,
                    "CompletionResponse": completion_resp, "ChatCompletionResponse": chat_resp,
                    "ResponsesRequest": responses_req, "ResponsesResponse": responses_resp,
                    "Model": model, "Error": error},
        "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
    },
}

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "server", "openapi.json")
with open(out, "w") as f:
    json.dump(doc, f, indent=1)
    f.write("\n")
print("wrote", os.path.normpath(out))
