"""echo_logprobs_test.py - /v1/completions with echo and logprobs scores the prompt too.

Run by test_echo_logprobs.sh against a live server on the tiny checkpoint (vocab 512,
ctx 256). As vLLM (serving_completion.py, _create_completion_logprobs): the logprobs
object covers prompt + completion tokens; the first prompt token has null
token_logprob and top_logprobs; every later prompt token has log p(token | prefix),
checked here against `strata logits` (the f32 logits of every prompt position) after
a log-softmax; text_offset runs over prompt then completion; the generated part is the
same as without echo; a stream's first chunk carries the prompt and its logprobs;
max_tokens 0 returns only the prompt."""
import array
import math
import os
import subprocess
import sys
import tempfile

from client import check_error, check_usage, post_json, stream, stream_text

CMPL = "/v1/completions"
STRATA = os.environ["STRATA"]
MODEL = os.environ["MODEL"]
VOCAB = 512
# f32 logits through the same kernels; the server's batch layout (chunking, other rows
# in the step) only changes summation order, far below this
TOL = 1e-4
PROMPTS = ["In the beginning God created the heaven", "And God said, Let there be light"]


def tokenize(text):
    s, t = post_json("/tokenize", {"prompt": text})
    assert s == 200, t
    return t["tokens"]


def reference(ids):
    """ref[i][v] = log p(v | ids[:i+1]) from `strata logits` (its own prefill, no server)."""
    with tempfile.NamedTemporaryFile(suffix=".f32") as f:
        subprocess.run([STRATA, "logits", "--model", MODEL, "--prompt-ids", ",".join(map(str, ids)),
                        "--out", f.name], check=True, stdout=subprocess.DEVNULL)
        a = array.array("f")
        a.frombytes(open(f.name, "rb").read())
    assert len(a) == len(ids) * VOCAB, len(a)
    out = []
    for i in range(len(ids)):
        row = a[i * VOCAB:(i + 1) * VOCAB]
        mx = max(row)
        lse = mx + math.log(sum(math.exp(x - mx) for x in row))
        out.append([x - lse for x in row])
    return out


def check_prompt_part(lp, ids, ref, n_top):
    """The first len(ids) entries of a completions logprobs object score the prompt."""
    n = len(ids)
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None, lp
    for i in range(1, n):
        want = ref[i - 1][ids[i]]
        got = lp["token_logprobs"][i]
        assert abs(got - want) < TOL, (i, got, want)
        top = lp["top_logprobs"][i]
        best = sorted(ref[i - 1], reverse=True)[:n_top]
        # tokens of equal text share one key (the likelier is kept), so <= n_top
        assert 1 <= len(top) <= n_top if n_top else top == {}, (i, top)
        for v in top.values():
            assert any(abs(v - b) < TOL for b in best), (i, top, best)
        if n_top:
            assert abs(max(top.values()) - best[0]) < TOL, (i, top, best)


def check_offsets(lp, start=0):
    """text_offset[i] is the character offset of tokens[i] in the returned text."""
    off = start
    for tok, o in zip(lp["tokens"], lp["text_offset"]):
        assert o == off, (lp["tokens"], lp["text_offset"])
        off += len(tok)


def merge_stream_logprobs(events, index):
    out = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    for e in events[:-1]:
        for c in e["choices"]:
            if c["index"] == index and c["logprobs"]:
                for k in out:
                    out[k] += c["logprobs"][k]
    return out


def test_shapes_and_values(refs):
    for text, (ids, ref) in zip(PROMPTS, refs):
        body = {"prompt": text, "max_tokens": 6, "temperature": 0, "ignore_eos": True,
                "echo": True, "logprobs": 3}
        s, b = post_json(CMPL, body)
        assert s == 200, b
        (c,) = b["choices"]
        lp = c["logprobs"]
        assert set(lp) == {"tokens", "token_logprobs", "top_logprobs", "text_offset"}, lp
        n = len(ids)
        assert all(len(lp[k]) == n + 6 for k in lp), lp
        assert c["text"].startswith(text) and c["finish_reason"] == "length", c
        assert "".join(lp["tokens"][:n]) == text, lp["tokens"][:n]  # ASCII: pieces join
        check_prompt_part(lp, ids, ref, 3)
        check_offsets(lp)
        assert all(x <= 0 for x in lp["token_logprobs"][1:])
        check_usage(b["usage"], prompt=n, completion=6)

        # the generated part is what the same request gives without echo
        s, plain = post_json(CMPL, dict(body, echo=False))
        g = plain["choices"][0]["logprobs"]
        assert c["text"] == text + plain["choices"][0]["text"]
        assert lp["tokens"][n:] == g["tokens"], (lp["tokens"][n:], g["tokens"])
        for x, y in zip(lp["token_logprobs"][n:], g["token_logprobs"]):
            assert abs(x - y) < TOL, (x, y)
        for x, y in zip(lp["top_logprobs"][n:], g["top_logprobs"]):
            assert x.keys() == y.keys() and all(abs(x[k] - y[k]) < TOL for k in x), (x, y)
        shift = lp["text_offset"][n]
        assert shift == sum(len(t) for t in lp["tokens"][:n])
        assert [o - shift for o in lp["text_offset"][n:]] == g["text_offset"]

        # logprobs 0: the chosen token's logprob, no alternatives
        s, z = post_json(CMPL, dict(body, logprobs=0))
        zl = z["choices"][0]["logprobs"]
        check_prompt_part(zl, ids, ref, 0)
        assert zl["tokens"] == lp["tokens"] and all(t == {} for t in zl["top_logprobs"][1:])

        # the same prompt as token ids: the same scores, the echo is its decoded text
        s, t = post_json(CMPL, dict(body, prompt=ids))
        tl = t["choices"][0]["logprobs"]
        assert t["choices"][0]["text"] == c["text"] and tl["tokens"] == lp["tokens"], t
        check_prompt_part(tl, ids, ref, 3)


def test_stream_matches_full(refs):
    text, (ids, ref) = PROMPTS[0], refs[0]
    n = len(ids)
    body = {"prompt": text, "max_tokens": 8, "temperature": 0, "ignore_eos": True, "echo": True,
            "logprobs": 2}
    s, full = post_json(CMPL, body)
    s, ev = stream(CMPL, dict(body, stream=True))
    assert s == 200, ev
    first = ev[0]["choices"][0]
    # the first chunk carries the echoed prompt and all of its logprobs
    assert first["index"] == 0 and first["text"].startswith(text), first
    assert first["logprobs"]["tokens"][:n] == full["choices"][0]["logprobs"]["tokens"][:n], first
    assert first["logprobs"]["token_logprobs"][0] is None and first["finish_reason"] is None
    assert stream_text(ev) == full["choices"][0]["text"]
    got, want = merge_stream_logprobs(ev, 0), full["choices"][0]["logprobs"]
    assert got["tokens"] == want["tokens"] and got["text_offset"] == want["text_offset"], (got, want)
    assert got["top_logprobs"][0] is None and got["token_logprobs"][0] is None
    for x, y in zip(got["token_logprobs"][1:], want["token_logprobs"][1:]):
        assert abs(x - y) < TOL, (x, y)
    check_prompt_part(got, ids, ref, 2)
    fin = [c["finish_reason"] for e in ev[:-1] for c in e["choices"] if c["finish_reason"]]
    assert fin == ["length"], fin


def test_max_tokens_zero(refs):
    text, (ids, ref) = PROMPTS[1], refs[1]
    body = {"prompt": text, "max_tokens": 0, "echo": True, "logprobs": 1}
    s, b = post_json(CMPL, body)
    assert s == 200, b
    (c,) = b["choices"]
    assert c["text"] == text and c["finish_reason"] == "length", c
    lp = c["logprobs"]
    assert len(lp["tokens"]) == len(ids) and "".join(lp["tokens"]) == text, lp
    check_prompt_part(lp, ids, ref, 1)
    check_offsets(lp)
    check_usage(b["usage"], prompt=len(ids), completion=0)
    # streamed: one chunk with the prompt and its logprobs, then the finish
    s, ev = stream(CMPL, dict(body, stream=True, stream_options={"include_usage": True}))
    chunks = [c for e in ev[:-1] for c in e["choices"]]
    assert chunks[0]["text"] == text and chunks[0]["logprobs"] == lp, chunks[0]
    assert [c["finish_reason"] for c in chunks] == [None, "length"] and chunks[1]["text"] == "", chunks
    check_usage(ev[-2]["usage"], prompt=len(ids), completion=0)
    # without logprobs: the prompt alone
    s, b = post_json(CMPL, {"prompt": text, "max_tokens": 0, "echo": True})
    assert s == 200 and b["choices"][0]["text"] == text and b["choices"][0]["logprobs"] is None, b
    s, ev = stream(CMPL, {"prompt": text, "max_tokens": 0, "echo": True, "stream": True})
    assert stream_text(ev) == text, ev
    # without echo there is nothing to return: refused, as vLLM
    check_error(*post_json(CMPL, {"prompt": text, "max_tokens": 0}), 400, "max_tokens")
    check_error(*post_json("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                                                    "max_tokens": 0}), 400, "max_tokens")
    # chat has no echo here: refused rather than ignored
    check_error(*post_json("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                                                    "max_tokens": 0, "echo": True}), 400, "echo")


def test_several_prompts_and_n(refs):
    body = {"prompt": PROMPTS, "n": 2, "max_tokens": 4, "temperature": 0, "ignore_eos": True,
            "echo": True, "logprobs": 1}
    s, b = post_json(CMPL, body)
    assert s == 200 and [c["index"] for c in b["choices"]] == [0, 1, 2, 3], b
    for c in b["choices"]:
        text, (ids, ref) = PROMPTS[c["index"] // 2], refs[c["index"] // 2]
        assert c["text"].startswith(text) and len(c["logprobs"]["tokens"]) == len(ids) + 4, c
        check_prompt_part(c["logprobs"], ids, ref, 1)
        check_offsets(c["logprobs"])
    # greedy: both choices of a prompt agree (to rounding: their rows sit elsewhere in the step)
    for j in (0, 2):
        x, y = b["choices"][j]["logprobs"], b["choices"][j + 1]["logprobs"]
        assert x["tokens"] == y["tokens"] and x["text_offset"] == y["text_offset"], (x, y)
        for u, v in zip(x["token_logprobs"][1:], y["token_logprobs"][1:]):
            assert abs(u - v) < TOL, (u, v)
    check_usage(b["usage"], prompt=sum(len(r[0]) for r in refs), completion=16)
    s, ev = stream(CMPL, dict(body, stream=True))
    for i in range(4):
        text, (ids, ref) = PROMPTS[i // 2], refs[i // 2]
        firsts = [c for e in ev[:-1] for c in e["choices"] if c["index"] == i]
        assert firsts[0]["text"].startswith(text), firsts[0]
        assert stream_text(ev, index=i) == b["choices"][i]["text"]
        got = merge_stream_logprobs(ev, i)
        assert got["tokens"] == b["choices"][i]["logprobs"]["tokens"], (i, got)
        assert got["text_offset"] == b["choices"][i]["logprobs"]["text_offset"], (i, got)
        check_prompt_part(got, ids, ref, 1)


def test_echo_without_logprobs_and_chat():
    s, b = post_json(CMPL, {"prompt": PROMPTS[0], "max_tokens": 3, "echo": True, "temperature": 0})
    assert b["choices"][0]["text"].startswith(PROMPTS[0]) and b["choices"][0]["logprobs"] is None, b
    # chat has no echo here (vLLM's would prepend the last message): true is refused,
    # false is what a client sends meaning "off", and logprobs cover the reply only
    chat = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3, "logprobs": True,
            "temperature": 0, "ignore_eos": True, "chat_template_kwargs": {"enable_thinking": False}}
    check_error(*post_json("/v1/chat/completions", dict(chat, echo=True)), 400, "echo")
    s, b = post_json("/v1/chat/completions", dict(chat, echo=False))
    assert s == 200 and len(b["choices"][0]["logprobs"]["content"]) == 3, b


def test_openai_sdk(refs):
    """The official SDK parses the shapes (null first entries included)."""
    try:
        import openai
    except ImportError:
        print("  test_openai_sdk: SKIP (the openai package is not installed)")
        return
    client = openai.OpenAI(base_url=os.environ["BASE"] + "/v1", api_key="unused", max_retries=0,
                           timeout=60)
    text, (ids, ref) = PROMPTS[0], refs[0]
    r = client.completions.create(model="tiny", prompt=text, max_tokens=5, temperature=0, echo=True,
                                  logprobs=2, extra_body={"ignore_eos": True})
    lp = r.choices[0].logprobs
    assert r.choices[0].text.startswith(text) and len(lp.tokens) == len(ids) + 5, r
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    check_prompt_part(lp.model_dump(), ids, ref, 2)
    assert r.usage.completion_tokens == 5
    chunks = list(client.completions.create(model="tiny", prompt=text, max_tokens=5, temperature=0,
                                            echo=True, logprobs=2, stream=True,
                                            extra_body={"ignore_eos": True}))
    got = [t for c in chunks for t in (c.choices[0].logprobs.tokens if c.choices[0].logprobs else [])]
    assert got == lp.tokens, (got, lp.tokens)
    assert chunks[0].choices[0].logprobs.token_logprobs[0] is None
    z = client.completions.create(model="tiny", prompt=text, max_tokens=0, echo=True, logprobs=0)
    assert z.choices[0].text == text and len(z.choices[0].logprobs.tokens) == len(ids), z
    assert z.usage.completion_tokens == 0 and z.choices[0].finish_reason == "length"


def main():
    refs = [(ids, reference(ids)) for ids in map(tokenize, PROMPTS)]
    for t in (test_shapes_and_values, test_stream_matches_full, test_max_tokens_zero,
              test_several_prompts_and_n, test_openai_sdk):
        t(refs)
        print(f"  {t.__name__}: ok")
    test_echo_without_logprobs_and_chat()
    print("echo_logprobs_test: ok")


if __name__ == "__main__":
    sys.exit(main())
