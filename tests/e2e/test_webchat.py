"""The web chat at GET / (src/server/webui/index.html, embedded in the binary),
driven in a real headless Chromium (Debian's chromium and chromium-driver,
through selenium) against `ember serve` with SmolLM2-135M-Instruct.

What is independent here: Chromium runs the page's own JavaScript (fetch,
streamed server-sent events, localStorage); the test records, inside the page,
each request the page sends and the raw event stream the server answers, and
checks that the page shows exactly what Python's json module reads from that
stream (the text, the thought, the tool calls, the token count), and that the
request carries the settings (key, system prompt, temperature, max tokens,
enable_thinking, tools). The page served is compared byte for byte with the
source file. (The replies are not compared with a second request from the
openai client: a greedy reply can change with the prefix-cache state, which
differs between two requests of one conversation.) Thinking uses DeepSeek R1's published template (its prompt opens
<think> when enable_thinking is true, so the whole reply is the thought);
tool calls use Qwen 2.5's (Hermes <tool_call>) with tool_choice "required",
which the grammar makes hold (tests/data/templates/SOURCES.md).

The browser tests skip when chromium, chromedriver or selenium is missing
(scripts/setup installs them). EMBER_WEBCHAT_SCREENSHOT=path keeps a
screenshot of the thinking conversation there (docs/webchat.png was made so).
"""
import json
import os
import pathlib
import re
import shutil
import time

import openai
import pytest
import requests

from serverutil import Server, free_port

try:
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
except ImportError:   # the HTTP tests below still run
    webdriver = None

ROOT = pathlib.Path(__file__).resolve().parents[2]
TEMPLATES = ROOT / "tests/data/templates"
PAGE = ROOT / "src/server/webui/index.html"
KEY = "webchat-test-key"
# ASan + UBSan (make sanitize) decode ~10x slower
WAIT = 600 if os.environ.get("EMBER_SANITIZED") == "1" else 120
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
SYSTEM = "You are a friendly assistant."
WEATHER = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}},
                   "required": ["city"], "additionalProperties": False}}}]


def start(ember_bin, model, template, *extra):
    port = free_port()
    return Server([ember_bin, "serve", "-m", model, "-c", "2048", "-np", "2", "-t", "2", "--port", str(port),
                   "--chat-template-file", str(TEMPLATES / template), *extra], port)


@pytest.fixture(scope="module")
def think_srv(ember_bin, smollm2_path):
    s = start(ember_bin, smollm2_path, "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", "--api-key", KEY)
    yield s
    assert s.stop() == 0


@pytest.fixture(scope="module")
def tools_srv(ember_bin, smollm2_path):
    s = start(ember_bin, smollm2_path, "Qwen-Qwen2.5-7B-Instruct.jinja")
    yield s
    assert s.stop() == 0


@pytest.fixture
def browser():
    if webdriver is None or not CHROMIUM or not CHROMEDRIVER:
        pytest.skip("needs chromium, chromium-driver (apt) and selenium (pip): scripts/setup installs them")
    opts = Options()
    opts.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
              "--window-size=1280,860", "--force-prefers-reduced-motion"):
        opts.add_argument(a)
    d = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=opts)
    d.set_script_timeout(30)
    yield d
    d.quit()


# ---- the page over plain HTTP ----

def test_page_served_without_key(think_srv):
    want = PAGE.read_bytes()
    for path in ("/", "/index.html"):
        r = requests.get(think_srv.base + path, timeout=30)
        assert r.status_code == 200
        assert r.headers["Content-Type"] == "text/html; charset=utf-8"
        assert r.content == want                   # the embedded bytes are the source file's
        csp = r.headers["Content-Security-Policy"]
        assert "default-src 'none'" in csp and "connect-src 'self'" in csp
        assert r.headers["X-Content-Type-Options"] == "nosniff"
    # the API behind it still needs the key
    assert requests.get(think_srv.base + "/v1/models", timeout=30).status_code == 401
    # only GET of the page is public: other methods and paths need the key as before
    assert requests.post(think_srv.base + "/", timeout=30).status_code == 401
    auth = {"Authorization": "Bearer " + KEY}
    assert requests.post(think_srv.base + "/", headers=auth, timeout=30).status_code == 404
    assert requests.get(think_srv.base + "/index.htm", headers=auth, timeout=30).status_code == 404
    assert requests.get(think_srv.base + "/v1/", headers=auth, timeout=30).status_code == 404


# ---- the page in Chromium ----

def set_field(d, id_, value):
    """Set an input's value as typing would end (one input event)."""
    d.execute_script("const e = document.getElementById(arguments[0]); e.value = arguments[1];"
                     "e.dispatchEvent(new Event('input'));", id_, str(value))


def replies(d):
    return d.find_elements(By.CSS_SELECTOR, "#messages .msg.assistant")


def wait_reply(d, n):
    """Wait for the n-th assistant reply (1-based) to finish streaming; returns its element."""
    def done(d):
        r = replies(d)
        if len(r) < n or "streaming" in r[n - 1].get_attribute("class"):
            return False
        return r[n - 1]
    # the page renders anew when a reply ends: an element found a moment ago may be gone
    return WebDriverWait(d, WAIT, poll_frequency=0.05, ignored_exceptions=(StaleElementReferenceException,)).until(done)


def instrument(d):
    """Inside the page: keep every chat request (its body and headers) and the
    raw text of its answer in window.__calls (the page reads its own copy of
    the stream), and the length of the streaming reply's text at every DOM
    change in window.__lengths."""
    d.execute_script("""
        window.__calls = [];
        const orig = window.fetch;
        window.fetch = async (url, opts) => {
          const res = await orig(url, opts);
          if (String(url).endsWith('chat/completions')) {
            const rec = {body: opts.body, headers: opts.headers, status: res.status, text: null};
            window.__calls.push(rec);
            res.clone().text().then((t) => { rec.text = t; });
          }
          return res;
        };
        window.__lengths = [];
        new MutationObserver(() => {
          const s = document.querySelector('#messages .msg.assistant.streaming');
          if (s) window.__lengths.push(s.querySelector('.content').textContent.length +
                                       s.querySelector('.reasoning-text').textContent.length);
        }).observe(document.getElementById('messages'), {subtree: true, childList: true, characterData: true});""")


def call(d, i):
    """The i-th recorded request: (body, headers, the stream read by Python)."""
    rec = WebDriverWait(d, 30).until(lambda d: d.execute_script(
        "const c = window.__calls[arguments[0]]; return c && c.text !== null ? c : null;", i))
    assert rec["status"] == 200
    return json.loads(rec["body"]), rec["headers"], read_stream(rec["text"])


def read_stream(text):
    """An OpenAI chat completion event stream (text/event-stream: events end
    with a blank line, `data: ` lines, `data: [DONE]` last) folded into
    {content, reasoning, tool_calls, timings, finish, n_deltas}."""
    out = {"content": "", "reasoning": "", "tool_calls": [], "timings": None, "finish": None, "n_deltas": 0}
    events = text.split("\n\n")
    assert events[-1] == "" and events[-2] == "data: [DONE]"
    for ev in events[:-2]:
        assert ev.startswith("data: "), ev
        j = json.loads(ev[len("data: "):])
        out["timings"] = j.get("timings") or out["timings"]
        for ch in j["choices"]:
            dl = ch["delta"]
            out["finish"] = ch["finish_reason"] or out["finish"]
            if dl.get("content") or dl.get("reasoning_content") or dl.get("tool_calls"):
                out["n_deltas"] += 1
            out["content"] += dl.get("content") or ""
            out["reasoning"] += dl.get("reasoning_content") or ""
            for tc in dl.get("tool_calls") or []:
                while len(out["tool_calls"]) <= tc["index"]:
                    out["tool_calls"].append({"id": "", "name": "", "arguments": ""})
                t = out["tool_calls"][tc["index"]]
                t["id"] += tc.get("id") or ""
                t["name"] += (tc.get("function") or {}).get("name") or ""
                t["arguments"] += (tc.get("function") or {}).get("arguments") or ""
    return out


def send(d, text):
    d.find_element(By.ID, "input").send_keys(text)
    d.find_element(By.ID, "send").click()


STATS = re.compile(r"^TTFT (\d+) ms \u00b7 ([0-9.]+) tok/s \u00b7 (\d+) tokens")


def check_stats(reply, got, elapsed_ms):
    text = reply.find_element(By.CSS_SELECTOR, ".stats").text
    m = STATS.match(text)
    assert m, text
    assert int(m.group(3)) == got["timings"]["predicted_n"]
    assert abs(float(m.group(2)) - got["timings"]["predicted_per_second"]) < 0.05
    assert 0 < int(m.group(1)) <= elapsed_ms


def test_chat_streams_thinks_and_keeps(browser, think_srv, tmp_path):
    d = browser
    model_id = requests.get(think_srv.base + "/v1/models", headers={"Authorization": "Bearer " + KEY},
                            timeout=30).json()["data"][0]["id"]
    d.get(think_srv.base + "/")
    # without the key the page says so and opens its settings
    err = WebDriverWait(d, 30).until(lambda d: d.find_element(By.ID, "error").text or False)
    assert "401" in err and "API key" in err
    assert d.find_element(By.ID, "settings").is_displayed()
    d.find_element(By.ID, "api-key").send_keys(KEY)
    WebDriverWait(d, 30).until(lambda d: d.find_element(By.ID, "model").text == "model: " + model_id)
    assert not d.find_element(By.ID, "error").is_displayed()
    set_field(d, "temperature", 0)
    set_field(d, "max-tokens", 24)
    set_field(d, "system", SYSTEM)
    assert not d.find_element(By.ID, "think").is_selected()

    # 1: thinking off; the reply appears piece by piece, as the stream said
    instrument(d)
    t0 = time.monotonic()
    send(d, "Hello!")
    r1 = wait_reply(d, 1)
    elapsed = (time.monotonic() - t0) * 1e3
    body, hdrs, got = call(d, 0)
    assert hdrs["Authorization"] == "Bearer " + KEY
    assert body["messages"] == [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Hello!"}]
    assert (body["stream"], body["temperature"], body["max_tokens"], body["model"]) == (True, 0, 24, model_id)
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    assert got["content"].strip() and not got["reasoning"]
    content = r1.find_element(By.CSS_SELECTOR, ".content").text
    assert content == got["content"].strip()                  # .text trims, as a reader sees it
    assert d.execute_script("return arguments[0].querySelector('.content').textContent", r1) == got["content"]
    assert not r1.find_element(By.CSS_SELECTOR, ".reasoning").is_displayed()
    lengths = d.execute_script("return window.__lengths")
    assert len(set(lengths)) >= 3, f"the reply did not appear piece by piece: {lengths}"
    assert int(r1.get_attribute("data-chunks")) == got["n_deltas"] > 1
    check_stats(r1, got, elapsed)
    assert "finish: length" in r1.find_element(By.CSS_SELECTOR, ".stats").text
    assert got["finish"] == "length"

    # 2: thinking on for this message: the thought is shown apart
    d.find_element(By.ID, "think").click()
    t0 = time.monotonic()
    send(d, "What is 2+2?")
    r2 = wait_reply(d, 2)
    elapsed = (time.monotonic() - t0) * 1e3
    body, _, got2 = call(d, 1)
    assert body["chat_template_kwargs"] == {"enable_thinking": True}
    assert body["messages"] == [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Hello!"},
                                {"role": "assistant", "content": got["content"]},
                                {"role": "user", "content": "What is 2+2?"}]
    assert got2["reasoning"].strip() and not got2["content"]   # R1's prompt opens <think>: all of it is thought
    det = r2.find_element(By.CSS_SELECTOR, ".reasoning")
    assert det.is_displayed() and det.get_attribute("open") is not None
    assert d.execute_script("return arguments[0].querySelector('.reasoning-text').textContent", r2) == \
        got2["reasoning"]
    assert r2.find_element(By.CSS_SELECTOR, ".content").text == ""
    assert "thinking on" in r2.find_element(By.CSS_SELECTOR, ".who").text
    assert "thinking on" not in replies(d)[0].find_element(By.CSS_SELECTOR, ".who").text   # rendered anew
    check_stats(r2, got2, elapsed)
    d.find_element(By.ID, "settings-btn").click()        # settings fold away
    assert not d.find_element(By.ID, "settings").is_displayed()
    shot = os.environ.get("EMBER_WEBCHAT_SCREENSHOT") or str(tmp_path / "webchat.png")
    assert d.save_screenshot(shot)

    # the thought folds away, per message
    det.find_element(By.TAG_NAME, "summary").click()
    WebDriverWait(d, 10).until(lambda d: det.get_attribute("open") is None)

    # the conversation, the fold and the switch survive a reload (localStorage)
    d.refresh()
    WebDriverWait(d, 30).until(lambda d: len(replies(d)) == 2)
    r1, r2 = replies(d)
    assert r1.find_element(By.CSS_SELECTOR, ".content").text == content
    assert r2.find_element(By.CSS_SELECTOR, ".reasoning").get_attribute("open") is None
    assert d.execute_script("return arguments[0].querySelector('.reasoning-text').textContent", r2) == \
        got2["reasoning"]
    assert d.find_element(By.ID, "think").is_selected()
    assert [e.text for e in d.find_elements(By.CSS_SELECTOR, "#conversations li .title")] == ["Hello!"]
    assert d.find_element(By.ID, "model").text == "model: " + model_id      # the key was kept


def test_tool_calls_are_items(browser, tools_srv):
    d = browser
    d.get(tools_srv.base + "/")
    d.find_element(By.ID, "settings-btn").click()
    set_field(d, "temperature", 0)
    set_field(d, "max-tokens", 128)
    set_field(d, "tools", json.dumps(WEATHER))
    set_field(d, "tool-choice", "required")
    instrument(d)
    send(d, "What is the weather in Paris?")
    r1 = wait_reply(d, 1)
    body, hdrs, got = call(d, 0)
    assert "Authorization" not in hdrs                   # no key set, none sent
    assert body["tools"] == WEATHER and body["tool_choice"] == "required"
    assert got["tool_calls"] and got["finish"] == "tool_calls"
    items = r1.find_elements(By.CSS_SELECTOR, ".tool-call")
    assert len(items) == len(got["tool_calls"])
    for item, c in zip(items, got["tool_calls"]):
        assert item.find_element(By.CSS_SELECTOR, ".tool-name").text == c["name"] == "get_weather"
        assert item.find_element(By.CSS_SELECTOR, ".tool-id").text == c["id"] != ""
        args = json.loads(item.find_element(By.CSS_SELECTOR, ".tool-args").text)
        assert args == json.loads(c["arguments"]) and isinstance(args["city"], str)
    assert r1.find_element(By.CSS_SELECTOR, ".error").text == ""

    # answering the calls sends tool messages; after the last, the next reply streams
    set_field(d, "tool-choice", "none")
    results = [f"{i + 18} C, sunny" for i in range(len(items))]
    for i, res in enumerate(results):
        assert len(replies(d)) == 1                      # no reply before every call has its answer
        item = replies(d)[0].find_elements(By.CSS_SELECTOR, ".tool-call")[i]
        item.find_element(By.CSS_SELECTOR, ".tool-result").send_keys(res)
        item.find_element(By.CSS_SELECTOR, ".tool-send").click()
    r2 = wait_reply(d, 2)
    body, _, got2 = call(d, 1)
    calls = [{"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
             for c in got["tool_calls"]]
    assert body["messages"] == [
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": calls},
        *[{"role": "tool", "tool_call_id": c["id"], "content": res} for c, res in zip(got["tool_calls"], results)]]
    assert body["tool_choice"] == "none"
    shown = [m.find_element(By.CSS_SELECTOR, ".content").text
             for m in d.find_elements(By.CSS_SELECTOR, "#messages .msg.tool")]
    assert shown == results
    assert got2["content"].strip() and not got2["tool_calls"]
    assert r2.find_element(By.CSS_SELECTOR, ".content").text == got2["content"].strip()
    # answered calls offer no second answer
    assert not d.find_elements(By.CSS_SELECTOR, ".tool-result")
