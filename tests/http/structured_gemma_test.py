#!/usr/bin/env python3
"""Forced tool calls in Gemma 4's call syntax: the demo model served with
--tool-call-parser gemma4 (test_structured.sh), so tool_choice "required" and a named
function constrain the output to <|tool_call>call:NAME{key:VALUE,...}<tool_call|> with each
value typed by the tool's schema, and the parser reads the calls back. The demo vocabulary
has no <|tool_call> or <|"|> special tokens, so the markers are spelled with ordinary ones.
The demo model rambles: every string is bounded (maxLength) or an enum."""
from client import check_forced_calls

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {
            "city": {"type": "string", "minLength": 1, "maxLength": 16},
            "days": {"type": "integer", "minimum": 1, "maximum": 14},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            "hourly": {"type": "boolean"},
            "lat": {"type": "number"}},
        "required": ["city", "days"], "additionalProperties": False}}},
    {"type": "function", "function": {"name": "search", "parameters": {
        "type": "object", "properties": {
            "query": {"type": "string", "maxLength": 24},
            "tags": {"type": "array", "items": {"type": "string", "maxLength": 8}, "maxItems": 3},
            "where": {"type": "object", "properties": {"zip": {"type": "string", "maxLength": 5}},
                      "required": ["zip"], "additionalProperties": False}},
        "required": ["query"], "additionalProperties": False}}},
]


def test_required_and_named():
    for seed in range(4):
        check_forced_calls(TOOLS, seed, "Weather in Paris, or a search?", "search")


def main():
    test_required_and_named()
    print("  test_required_and_named: ok")
    print("structured_gemma_test: ok")


if __name__ == "__main__":
    main()
