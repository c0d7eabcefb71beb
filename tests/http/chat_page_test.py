"""chat_page_test.py - the chat page at GET / (server/chat.html), as plain requests and
as a browser see it.

Run by test_chat_page.sh against a live server over the demo model with --api-key $KEY.
The plain checks: / answers 200 without the key, as text/html, with a CSP whose script
and style hashes are those of the page's own inline elements; HEAD works, POST is a 405,
other paths (/index.html, ...) stay 404s, and the API itself still wants the key.
The browser checks open / in headless Chromium (Debian's, driven by playwright): the
first send gets a 401 and the page asks for the key; with it the answer streams (its
text seen growing by a MutationObserver); a long answer (max_tokens 2000) is stopped
after its first tokens, the fetch is aborted, and /metrics shows the server counted
the abort (strata:request_success_total{finished_reason="abort"}) and stopped
decoding. Last, a canned stream (playwright's route) checks that reasoning shows in
its own block and that model text is never parsed as markup.
"""
import base64
import hashlib
import json
import os
import time

from client import BASE, request

KEY = os.environ["KEY"]
AUTH = {"Authorization": "Bearer " + KEY}
NO_TYPE = {"Content-Type": ""}  # client.py's default JSON type means nothing to a GET


def metric(prefix):
    s, h, b = request("GET", "/metrics")
    assert s == 200, s
    return sum(float(line.rsplit(" ", 1)[1]) for line in b.decode().splitlines()
               if line.startswith(prefix))


ABORTS = 'strata:request_success_total{finished_reason="abort"'
GENERATED = "strata:generation_tokens_total"


def check_plain():
    s, h, b = request("GET", "/", headers=NO_TYPE)
    assert s == 200 and h["content-type"] == "text/html; charset=utf-8", (s, h)
    html = b.decode("utf-8")
    assert html.startswith("<!doctype html>") and "<title>strata chat</title>" in html
    csp = h["content-security-policy"]
    for tag in ("script", "style"):
        inline = html.split("<%s>" % tag, 1)[1].split("</%s>" % tag, 1)[0]
        digest = base64.b64encode(hashlib.sha256(inline.encode()).digest()).decode()
        assert "%s-src 'sha256-%s';" % (tag, digest) in csp, (tag, csp)
    assert "default-src 'none'" in csp and "connect-src 'self'" in csp, csp
    assert "unsafe" not in csp and "frame-ancestors 'none'" in csp, csp
    assert h["x-content-type-options"] == "nosniff", h
    s, h, b = request("HEAD", "/", headers=NO_TYPE)
    assert s == 200 and b == b"" and h["content-type"].startswith("text/html"), (s, h)
    s, h, b = request("POST", "/", {"x": 1})
    assert s == 405 and h["allow"] == "GET", (s, h)
    for path in ("/index.html", "/chat.html", "/favicon.ico", "/index", "/v1/"):
        s, h, b = request("GET", path, headers=NO_TYPE)
        e = json.loads(b)["error"]
        assert s == 404 and e["code"] == "route_not_found" and path in e["message"], (path, s, b)
    # the page needs no key; the API it calls does
    s, h, b = request("GET", "/v1/models", headers=NO_TYPE)
    assert s == 401, s
    s, h, b = request("GET", "/v1/models", headers=AUTH)
    assert s == 200 and json.loads(b)["data"][0]["id"] == "tiny", b
    print("plain requests: ok")


def answers(page):
    return page.eval_on_selector_all(".msg.assistant .answer", "els => els.map(e => e.textContent)")


def idle(page):
    page.wait_for_function("() => !document.getElementById('send').disabled", timeout=30000)


def check_browser():
    from playwright.sync_api import sync_playwright
    exe = os.environ.get("CHROMIUM", "/usr/bin/chromium")
    with sync_playwright() as p:
        # Debian's chromium, not a downloaded one; as root in a container Chromium's
        # sandbox cannot start (playwright passes --no-sandbox too, said here plainly)
        browser = p.chromium.launch(executable_path=exe, headless=True, args=["--no-sandbox"])
        page = browser.new_page()
        page.set_default_timeout(30000)  # a loaded CI machine, not the page, sets the pace
        js_errors, csp_blocked, sent = [], [], []
        page.on("pageerror", lambda e: js_errors.append(str(e)))
        page.on("console", lambda m: csp_blocked.append(m.text)
                if "Content Security Policy" in m.text else None)
        page.on("request", lambda r: sent.append(r)
                if r.url.endswith("/v1/chat/completions") else None)
        # The demo model ends its turns after a sentence, over in a few ms, and the
        # browser reads what arrives within a few ms as one chunk; ignore_eos (not a
        # page setting) is added on the way out, so answers run to max_tokens: 150 to
        # watch one grow, 2000 to stop one.
        def no_eos(route):
            b = json.loads(route.request.post_data)
            b["ignore_eos"] = True
            route.continue_(post_data=json.dumps(b))

        page.route("**/v1/chat/completions", no_eos)
        page.goto(BASE + "/")
        # the model name needs the key too: the page says so, but asks only on a send
        # (predicates as functions: a string would be eval'ed, which the page's CSP forbids)
        page.wait_for_function(
            "() => document.getElementById('model').textContent.includes('API key')")
        assert page.is_hidden("#keybox")

        page.fill("#temperature", "0")
        page.fill("#top_p", "0.9")
        page.fill("#max_tokens", "150")
        page.fill("#input", "Who is the LORD?")
        page.click("#send")
        page.wait_for_selector("#keybox", state="visible", timeout=30000)
        assert answers(page) == [] and page.is_enabled("#send"), answers(page)
        assert "401" in page.text_content("#status")
        # from here on, every change of the answer's text is recorded
        page.evaluate("""() => {
            window.lens = [];
            new MutationObserver(() => {
                const a = document.querySelector('.msg.assistant .answer');
                if (a) window.lens.push(a.textContent.length);
            }).observe(document.getElementById('log'),
                       {subtree: true, childList: true, characterData: true});
        }""")
        page.fill("#key", KEY)
        page.click("#usekey")
        idle(page)
        assert page.is_hidden("#keybox")
        assert page.evaluate("sessionStorage.getItem('strata.apiKey')") == KEY
        page.wait_for_function("() => document.getElementById('model').textContent === 'tiny'")
        first = answers(page)
        assert len(first) == 1 and first[0].strip(), first
        lens = page.evaluate("window.lens")
        grew = sorted(set(n for n in lens if n))
        assert len(grew) >= 3 and grew[-1] == len(first[0]), lens  # streamed, not whole
        req = sent[-1]
        assert req.headers["authorization"] == "Bearer " + KEY, req.headers
        body = json.loads(req.post_data)
        assert body["stream"] is True and body["max_tokens"] == 150, body
        assert body["temperature"] == 0, body
        assert body["top_p"] == 0.9 and body["messages"] == [
            {"role": "user", "content": "Who is the LORD?"}], body
        print("browser: 401 asked for the key, the answer streamed (%d updates): ok" % len(grew))

        # a long answer, stopped after its first tokens
        aborts0, gen0 = metric(ABORTS), metric(GENERATED)
        page.fill("#max_tokens", "2000")
        page.fill("#input", "And the LORD said unto Moses,")
        page.click("#send")
        page.wait_for_function(
            "() => (document.querySelectorAll('.msg.assistant .answer')[1] || {}).textContent",
            timeout=30000)
        page.click("#stop")
        idle(page)
        notes = page.eval_on_selector_all(".msg.assistant .note",
                                          "els => els.map(e => e.textContent)")
        assert notes == ["stopped"], notes
        assert page.is_disabled("#stop")
        deadline = time.time() + 15
        while metric(ABORTS) < aborts0 + 1 and time.time() < deadline:
            time.sleep(0.1)
        assert metric(ABORTS) == aborts0 + 1, (aborts0, metric(ABORTS))
        gen1 = metric(GENERATED)
        time.sleep(0.5)
        gen2 = metric(GENERATED)
        assert gen1 == gen2 and gen2 - gen0 < 2000, (gen0, gen1, gen2)  # decoding stopped
        assert metric("strata:num_requests_running") == 0
        print("browser: Stop aborted the stream after %d tokens, the server counted the abort: ok"
              % (gen2 - gen0))
        page.unroute("**/v1/chat/completions")

        # reasoning in its own block; model text stays text
        evil = '<img src=x onerror="window.pwned=1"><script>window.pwned=2</script>'
        events = [{"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
                  {"choices": [{"index": 0,
                                "delta": {"reasoning_content": "Let me <b>think</b>"}}]},
                  {"choices": [{"index": 0, "delta": {"reasoning": " more."}}]},
                  {"choices": [{"index": 0, "delta": {"content": evil}}]},
                  {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}]
        sse = "".join("data: %s\n\n" % json.dumps(e) for e in events) + "data: [DONE]\n\n"
        page.route("**/v1/chat/completions", lambda r: r.fulfill(
            status=200, headers={"Content-Type": "text/event-stream"}, body=sse))
        page.fill("#input", "think aloud")
        page.click("#send")
        idle(page)
        last = ".msg.assistant:last-child"
        assert page.is_visible(last + " .thinking summary"), "no thinking block"
        assert page.text_content(last + " .thinking .text") == "Let me <b>think</b> more."
        assert page.text_content(last + " .answer") == evil
        assert page.eval_on_selector_all("#log img, #log script, #log b", "els => els.length") == 0
        assert page.evaluate("window.pwned") is None
        assert page.evaluate("turns.length") == 6  # three questions, three answers
        assert not js_errors and not csp_blocked, (js_errors, csp_blocked)
        print("browser: reasoning shown apart, model text escaped: ok")
        browser.close()


def main():
    check_plain()
    check_browser()


if __name__ == "__main__":
    main()
