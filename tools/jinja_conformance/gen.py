#!/usr/bin/env python3
"""Generates the chat-template conformance fixtures that tests/unit/test_chat_template.c
compares byte for byte (CI needs no Python).

The oracle is transformers' own apply_chat_template (real Qwen3 / Gemma 3 tokenizer
files) and, for the template files under tests/data/chat_templates/templates/, its
render_jinja_template (same Jinja2 environment and message preparation). Without
transformers the environment is rebuilt with Jinja2 directly, as transformers builds it:
ImmutableSandboxedEnvironment(trim_blocks, lstrip_blocks, loopcontrols + generation tag),
raise_exception / strftime_now / dict / namespace globals, json.dumps as tojson.

    pip install jinja2==3.1.6 transformers      # once; no torch needed
    python3 tools/jinja_conformance/gen.py      # rewrites tests/data/chat_templates/cases.jsonl

Each output line: {"id", "model" | "template" | "source", "messages", "tools",
"add_generation_prompt", "kwargs", then "expected" (the prompt) or "error" (Jinja2's
exception text) and "error_line" (the template line Jinja2 blames, when it names one)}.
"""
import json
import lzma
import os
import shutil
import sys
import tempfile
import traceback

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DATA = os.path.join(ROOT, "tests", "data", "chat_templates")
SHARED = os.environ.get("STRATA_SHARED", os.path.join(ROOT, "..", "shared"))

sys.path.insert(0, os.path.dirname(__file__))
from cases import CONVERSATIONS, CONSTRUCT_CONTEXTS, SOURCE_CASES, TOOLS  # noqa: E402
import random_cases  # noqa: E402

try:
    from transformers import AutoTokenizer
    from transformers.utils.chat_template_utils import render_jinja_template
    from transformers.utils.chat_template_utils import _normalize_chat_messages
    HAVE_TRANSFORMERS = True
except Exception:  # pragma: no cover - fallback path
    HAVE_TRANSFORMERS = False


def fallback_render(source, messages, tools, add_generation_prompt, kwargs):
    """transformers' environment rebuilt with Jinja2 (used only without transformers)."""
    import datetime
    import jinja2
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(Extension):
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_gen"), [], [], body).set_lineno(lineno)

        def _gen(self, caller):
            return caller()

    class Namespace(jinja2.utils.Namespace):
        def __init__(*args, **kw):
            self, args = args[0], args[1:]
            attrs = dict(*args, **kw)
            for name in attrs:
                if isinstance(name, str) and name.startswith("_"):
                    raise jinja2.exceptions.SecurityError(f"underscore attribute {name!r}")
            jinja2.utils.Namespace.__init__(self, attrs)

    def raise_exception(msg):
        raise jinja2.exceptions.TemplateError(msg)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[Generation, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals.update(raise_exception=raise_exception, dict=dict, namespace=Namespace,
                       strftime_now=lambda f: datetime.datetime.now().strftime(f))
    msgs = [{k: v for k, v in m.items() if v is not None} for m in messages]
    aliased = []
    for m in msgs:
        r = next((m[k] for k in ("reasoning_content", "thinking", "reasoning") if m.get(k) is not None), None)
        aliased.append({"thinking": r, **m, "reasoning_content": r} if r is not None else m)
    return env.from_string(source).render(messages=aliased, tools=tools, documents=None,
                                          add_generation_prompt=add_generation_prompt, **kwargs)


def render_source(source, messages, tools, add_generation_prompt, kwargs):
    if not messages:
        raise ValueError("Cannot apply chat template to an empty conversation.")
    if not HAVE_TRANSFORMERS:
        return fallback_render(source, messages, tools, add_generation_prompt, kwargs)
    out, _ = render_jinja_template(conversations=[_normalize_chat_messages(messages)], tools=tools,
                                   chat_template=source, add_generation_prompt=add_generation_prompt,
                                   **kwargs)
    return out[0]


def error_record(e):
    """Jinja2's message and the template line it blames (syntax: lineno; runtime: the
    innermost template frame of the traceback)."""
    import jinja2
    line = getattr(e, "lineno", None)
    if isinstance(e, SyntaxError) and not isinstance(e, jinja2.TemplateSyntaxError):
        line = None  # Python's own SyntaxError: a line of the generated code, not the template
    elif line is None:
        frames = [f.lineno for f in traceback.extract_tb(e.__traceback__) if f.filename == "<template>"]
        line = frames[-1] if frames else None
    return {"error": f"{type(e).__name__}: {e}", "error_line": line}


def model_tokenizers(tmp):
    """Vendors the real tokenizer configs and loads transformers tokenizers for them."""
    toks = {}
    for model in ("qwen3", "gemma3"):
        src = os.path.join(SHARED, "data", "tokenizers", model)
        dst = os.path.join(DATA, model)
        os.makedirs(dst, exist_ok=True)
        cfg = json.load(open(os.path.join(src, "tokenizer_config.json"), encoding="utf-8"))
        # Gemma's added_tokens_decoder is 1 MB of vocabulary the template never reads.
        slim = {k: v for k, v in cfg.items() if k != "added_tokens_decoder"}
        with open(os.path.join(dst, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump(slim, f, ensure_ascii=False, indent=2)
            f.write("\n")
        if HAVE_TRANSFORMERS:
            d = os.path.join(tmp, model)
            os.makedirs(d)
            shutil.copy(os.path.join(src, "tokenizer_config.json"), d)
            with lzma.open(os.path.join(src, "tokenizer.json.xz")) as xz, open(os.path.join(d, "tokenizer.json"), "wb") as f:
                f.write(xz.read())
            toks[model] = AutoTokenizer.from_pretrained(d)
        else:
            toks[model] = slim
    return toks


def render_model(tok, messages, tools, agp, kwargs):
    if HAVE_TRANSFORMERS:
        return tok.apply_chat_template(messages, tools=tools, add_generation_prompt=agp,
                                       tokenize=False, **kwargs)
    special = {k: tok[k] for k in ("bos_token", "eos_token", "unk_token", "pad_token") if isinstance(tok.get(k), str)}
    return fallback_render(tok["chat_template"], messages, tools, agp, {**special, **kwargs})


def main():
    cases = []
    tmp = tempfile.mkdtemp()
    try:
        toks = model_tokenizers(tmp)

        def add(kind, name, messages, tools, agp, kwargs, render):
            case = {"id": f"{len(cases):04d}", kind: name, "messages": messages, "tools": tools,
                    "add_generation_prompt": agp, "kwargs": kwargs}
            try:
                case["expected"] = render()
            except Exception as e:  # the fixture records Jinja2's error
                case.update(error_record(e))
            cases.append(case)

        model_like = ["qwen35_style.jinja", "gemma4_style.jinja", "nemotron_style.jinja"]
        for conv_name, messages in CONVERSATIONS:
            with_tools = [None, TOOLS] if conv_name in ("plain", "tool_calls", "tool_args_string", "system_multi") else [None]
            for tools in with_tools:
                for agp in (False, True):
                    for kw in ({}, {"enable_thinking": False}, {"enable_thinking": True}):
                        for model in ("qwen3", "gemma3"):
                            add("model", model, messages, tools, agp, kw,
                                lambda: render_model(toks[model], messages, tools, agp, kw))
                        for t in model_like:
                            src = open(os.path.join(DATA, "templates", t), encoding="utf-8", newline="").read()
                            kw2 = dict(kw, bos_token="<bos>") if t.startswith("gemma4") else kw
                            add("template", "templates/" + t, messages, tools, agp, kw2,
                                lambda: render_source(src, messages, tools, agp, kw2))
        for t, ctx in CONSTRUCT_CONTEXTS:
            src = open(os.path.join(DATA, "templates", t), encoding="utf-8", newline="").read()
            add("template", "templates/" + t, ctx["messages"], ctx.get("tools"), ctx.get("agp", False),
                ctx.get("kwargs", {}), lambda: render_source(src, ctx["messages"], ctx.get("tools"),
                                                            ctx.get("agp", False), ctx.get("kwargs", {})))
        for src, kwargs in SOURCE_CASES:
            messages = [{"role": "user", "content": "hi"}]
            add("source", src, messages, None, False, kwargs,
                lambda: render_source(src, messages, None, False, kwargs))
        # Seeded random templates: keep the ones whose output is deterministic (no
        # object addresses) plus every error, so the sample stays meaningful.
        rnd = ([(s, random_cases.VARS) for s in random_cases.expressions(1, 500)] +
               [(s, {"n": 3}) for s in random_cases.whitespace(2, 200)] +
               [(s, {}) for s in random_cases.statements(3, 200)])
        messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
        for src, kwargs in rnd:
            add("source", src, messages, None, False, kwargs,
                lambda: render_source(src, messages, None, False, dict(kwargs)))
            if " at 0x" in cases[-1].get("expected", ""):
                cases.pop()
    finally:
        shutil.rmtree(tmp)
    out = os.path.join(DATA, "cases.jsonl")
    with open(out, "w", encoding="utf-8") as f:
        for case in cases:
            f.write(json.dumps(case, ensure_ascii=False) + "\n")
    n_err = sum("error" in c for c in cases)
    print(f"{out}: {len(cases)} cases ({n_err} expected errors), oracle: "
          f"{'transformers' if HAVE_TRANSFORMERS else 'jinja2 fallback'}")


if __name__ == "__main__":
    main()
