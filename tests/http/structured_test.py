#!/usr/bin/env python3
"""response_format json_object on the demo model, whose peaked outputs are King James
prose: left alone it never writes JSON, so every object it returns here was made by the
grammar's masks. Over many prompts, seeds and temperatures (chat and completions, whole and
streamed, and through the official OpenAI SDK) an answer that finished ("stop") must be one
JSON object, and one cut by max_tokens ("length") a prefix of one: never text outside it."""
import json
import random

from client import BASE, post_json, stream

CHAT = "/v1/chat/completions"
CMPL = "/v1/completions"
PROMPTS = ["And God said", "Tell me of the kings of Judah.", "Describe the temple as JSON.",
           "What is the word of the LORD?", "List the tribes of Israel.", "Hello"]


def is_prefix_of_json_object(s):
    """A cut answer must still be the start of an object: close it and see it parse."""
    s = s.lstrip()
    if not s.startswith("{"):
        return False
    # complete it by closing the open string, arrays and objects
    stack, in_str, esc = [], False, False
    for ch in s:
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "{[":
            stack.append(ch)
        elif ch in "}]":
            stack.pop()
    return bool(stack) or not in_str


def check(text, finish, where):
    if finish == "stop":
        v = json.loads(text)
        assert isinstance(v, dict), (where, text)
        return 1
    assert finish == "length", (where, finish)
    assert is_prefix_of_json_object(text), (where, text)
    return 0


def main():
    rnd = random.Random(5)
    closed = total = 0
    for i in range(24):
        p = PROMPTS[i % len(PROMPTS)]
        temp = [0, 0.7, 1.0, 1.3][i % 4]
        common = {"max_tokens": 160, "temperature": temp, "seed": rnd.randrange(1 << 30),
                  "response_format": {"type": "json_object"}}
        if i % 3 == 0:
            s, b = post_json(CMPL, dict(common, prompt=p))
            assert s == 200, b
            c = b["choices"][0]
            closed += check(c["text"], c["finish_reason"], ("cmpl", i))
        elif i % 3 == 1:
            s, b = post_json(CHAT, dict(common, messages=[{"role": "user", "content": p}]))
            assert s == 200, b
            c = b["choices"][0]
            closed += check(c["message"]["content"], c["finish_reason"], ("chat", i))
        else:
            s, ev = stream(CHAT, dict(common, messages=[{"role": "user", "content": p}],
                                      stream=True))
            assert s == 200, ev
            text, finish = "", None
            for e in ev:
                for c in (e.get("choices", []) if isinstance(e, dict) else []):
                    text += c["delta"].get("content") or ""
                    finish = c.get("finish_reason") or finish
            closed += check(text, finish, ("stream", i))
        total += 1
    # the grammar stops the output when the object closes: many answers do close within
    # max_tokens (11 of 24 with these seeds; sampled ones may write long strings)
    assert closed >= total // 4, (closed, total)
    # the official SDK
    import openai
    client = openai.OpenAI(base_url=BASE + "/v1", api_key="x")
    r = client.chat.completions.create(model=client.models.list().data[0].id,
                                       messages=[{"role": "user", "content": "Hello"}],
                                       response_format={"type": "json_object"},
                                       max_tokens=160, temperature=0)
    check(r.choices[0].message.content, r.choices[0].finish_reason, "sdk")
    print("structured_test: %d of %d closed objects, all valid" % (closed, total))


if __name__ == "__main__":
    main()
