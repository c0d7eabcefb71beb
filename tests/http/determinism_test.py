"""determinism_test.py - batching must not change results.

Greedy outputs of 16 prompts run one at a time must equal the same prompts run
together (one batch, chunked prefill mixing with decodes), down to every logprob and
top-3 alternative as printed: the engine computes a row the same way bit for bit whatever
shares its step; so must 8 seeded sampled ones. A seeded sampled request must repeat
exactly. Writes the seeded outputs to argv[1] when given, and compares
them with argv[2] when given (a previous server run)."""
import json
import sys
import threading

from client import post_json

PROMPTS = [f"Prompt number {i}: " + "the quick brown fox " * (i % 5 + 1) + "東京" * (i % 3) for i in range(16)]


def greedy(p):
    s, b = post_json("/v1/completions", {"prompt": p, "max_tokens": 32, "temperature": 0,
                                         "ignore_eos": True, "logprobs": 3})
    assert s == 200, b
    c = b["choices"][0]
    lp = c["logprobs"]
    return c["text"], lp["tokens"], lp["token_logprobs"], lp["top_logprobs"]


def seeded(i):
    """A sampled request at the OpenAI default temperature, seeded per prompt: batched, its
    row is picked beside the others' (on the CPU pool's threads), from its own logits."""
    s, b = post_json("/v1/completions", {"prompt": PROMPTS[i], "max_tokens": 24, "temperature": 1.0,
                                         "top_p": 0.95, "seed": 100 + i, "ignore_eos": True,
                                         "logprobs": 2})
    assert s == 200, b
    c = b["choices"][0]
    return c["text"], c["logprobs"]["tokens"], c["logprobs"]["token_logprobs"], c["logprobs"]["top_logprobs"]


def alone_and_together(fn, n):
    alone = [fn(i) for i in range(n)]
    together = [None] * n

    def run(i):
        together[i] = fn(i)

    ts = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for i, (a, b) in enumerate(zip(alone, together)):
        assert a[:2] == b[:2], f"{fn.__name__} {i}: alone {a[0]!r} vs batched {b[0]!r}"
        assert a[2:] == b[2:], f"{fn.__name__} {i}: logprobs alone {a[2]} vs batched {b[2]}"


def main():
    alone_and_together(lambda i: greedy(PROMPTS[i]), len(PROMPTS))
    alone_and_together(seeded, 8)
    sampled = []
    for body in ({"prompt": "Once upon a time", "max_tokens": 40, "temperature": 1.0, "seed": 42,
                  "ignore_eos": True, "n": 3},
                 {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 40, "temperature": 0.7,
                  "top_p": 0.95, "top_k": 50, "seed": 7, "ignore_eos": True}):
        path = "/v1/completions" if "prompt" in body else "/v1/chat/completions"
        outs = []
        for _ in range(2):
            s, b = post_json(path, body)
            assert s == 200, b
            outs.append([c.get("text", c.get("message", {}).get("content")) for c in b["choices"]])
        assert outs[0] == outs[1], outs
        sampled.append(outs[0])
    if len(sys.argv) > 1 and sys.argv[1] != "-":
        json.dump(sampled, open(sys.argv[1], "w"))
    if len(sys.argv) > 2:
        prev = json.load(open(sys.argv[2]))
        assert prev == sampled, (prev, sampled)
    print("determinism_test: ok")


if __name__ == "__main__":
    main()
