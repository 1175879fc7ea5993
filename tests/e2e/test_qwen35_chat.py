"""Qwen3.5 chat through the server (issue 17.4): the template from the GGUF's
tokenizer.chat_template, tool calls in its Qwen3-Coder XML syntax held by
grammar under tool_choice required / named, thinking on and off per request
(chat_template_kwargs.enable_thinking), reasoning_content split out.

The model is tests/golden/qwen35/tiny-qwen35.gguf (random weights) copied
with gguf-py's own tools: gguf-new-metadata embeds Qwen3.5-4B.jinja as
tokenizer.chat_template, as real Qwen3.5 GGUFs carry it, and
gguf-set-metadata raises its context_length to 4096 (the template's tool
instructions alone are ~1,100 of its tiny vocabulary's tokens). Random
weights never write a call on their own: the grammar alone must make a valid
one every time (8 seeds each). Independent checks: the rendered prompt equals
jinja2's (tests/golden/jinja/expected.json); the official openai client
parses answers and streams; arguments are checked with json and
test_server_tools.check_schema against the tool's schema.
"""
import json
import pathlib
import subprocess
import sys

import openai
import pytest
import requests

from serverutil import Server, free_port
from test_server_tools import ASK, TIME, TOOLS, WEATHER, check_schema, reassemble

ROOT = pathlib.Path(__file__).resolve().parents[2]
MODEL = ROOT / "tests" / "golden" / "qwen35" / "tiny-qwen35.gguf"
TEMPLATE = ROOT / "tests" / "data" / "templates" / "Qwen3.5-4B.jinja"
GOLDEN = ROOT / "tests" / "golden" / "jinja"
SEEDS = range(8)
SCHEMAS = {"get_weather": WEATHER, "get_time": TIME}
OFF = {"enable_thinking": False}
ON = {"enable_thinking": True}


@pytest.fixture(scope="module")
def srv(ember_bin, tmp_path_factory):
    model = tmp_path_factory.mktemp("qwen35") / "tiny-qwen35-chat.gguf"
    gguf = [sys.executable, "-m", "gguf.scripts."]   # gguf-py's own scripts (requirements-test.txt: gguf)
    subprocess.run(gguf[:2] + [gguf[2] + "gguf_new_metadata", "--chat-template-file", str(TEMPLATE), str(MODEL),
                                str(model)], check=True, capture_output=True, timeout=120)
    subprocess.run(gguf[:2] + [gguf[2] + "gguf_set_metadata", "--force", str(model), "qwen35.context_length", "4096"],
                   check=True, capture_output=True, timeout=120)
    port = free_port()
    s = Server([ember_bin, "serve", "-m", str(model), "-c", "8192", "-np", "4", "-t", "2", "-ngl", "0",
                "--port", str(port)], port)
    c = openai.OpenAI(base_url=s.base + "/v1", api_key="none", max_retries=0, timeout=300)
    yield s, c
    assert s.stop() == 0


def golden(conv):
    exp = json.load(open(GOLDEN / "expected.json", encoding="utf-8"))
    convs = json.load(open(GOLDEN / "conversations.json", encoding="utf-8"))["conversations"]
    out = [c for c in exp["cases"] if c["template"] == "Qwen3.5-4B" and c["conversation"] == conv]
    assert len(out) == 1 and "output" in out[0]
    return convs[conv], out[0]["output"]


@pytest.mark.parametrize("conv", ["q35_content_then_calls", "q35_call_typed_args",
                                  "q35_tools_thinking_off", "q35_tool_last_generation", "thinking_off", "multi_turn"])
def test_gguf_template_renders_as_jinja2(srv, conv):
    """The server renders with the GGUF's template; OpenAI clients send
    arguments as JSON strings, which the server parses before rendering:
    the prompt equals jinja2's rendering of the object arguments. (Rows
    ending with an assistant turn are left out: the server continues that
    turn, continue_final_message, where jinja2 closes it.)"""
    s, _ = srv
    c, want = golden(conv)
    msgs = json.loads(json.dumps(c["messages"]))
    for m in msgs:
        for tc in m.get("tool_calls") or []:
            tc["function"]["arguments"] = json.dumps(tc["function"]["arguments"])
    body = {"messages": msgs, "add_generation_prompt": c["add_generation_prompt"]}
    if c.get("tools"):
        body["tools"] = c["tools"]
    if c.get("kwargs"):
        body["chat_template_kwargs"] = c["kwargs"]
    r = requests.post(s.base + "/apply-template", json=body, timeout=30)
    assert r.status_code == 200, r.text
    assert r.json()["prompt"] == want


def test_template_refusal_is_a_client_error(srv):
    """Qwen3.5's template raises for a history without a user query: 400 with its message."""
    s, _ = srv
    r = requests.post(s.base + "/v1/chat/completions", timeout=30,
                      json={"messages": [{"role": "system", "content": "x"}], "max_tokens": 1})
    assert r.status_code == 400
    assert "No user query found in messages." in r.json()["error"]["message"]


def valid_call(ch, name=None):
    assert ch.finish_reason == "tool_calls", (ch.finish_reason, ch.message)
    calls = ch.message.tool_calls
    assert calls and len(calls) == 1, ch.message
    c = calls[0]
    assert c.type == "function" and c.id.startswith("call_")
    assert name is None or c.function.name == name
    check_schema(json.loads(c.function.arguments), SCHEMAS[c.function.name])
    assert not ch.message.content
    return c


def ask(client, seed, thinking, **kw):
    return client.chat.completions.create(model="m", messages=ASK, tools=TOOLS, seed=seed, temperature=1.0,
                                          max_tokens=160, parallel_tool_calls=False,
                                          extra_body={"chat_template_kwargs": thinking, **kw.pop("extra", {})},
                                          **kw).choices[0]


@pytest.mark.parametrize("seed", SEEDS)
def test_required_thinking_off_always_calls(srv, seed):
    ch = ask(srv[1], seed, OFF, tool_choice="required")
    valid_call(ch)
    assert getattr(ch.message, "reasoning_content", None) is None   # the template's empty thought is no reasoning


@pytest.mark.parametrize("seed", SEEDS)
def test_named_thinking_off_calls_that_tool(srv, seed):
    ch = ask(srv[1], seed, OFF, tool_choice={"type": "function", "function": {"name": "get_time"}})
    valid_call(ch, name="get_time")


@pytest.mark.parametrize("seed", SEEDS)
def test_required_thinking_on_thinks_then_calls(srv, seed):
    """Thinking on: the prompt opens "<think>\\n"; the grammar lets the thought
    run (reasoning_budget bounds it: 6 tokens here), then holds the call."""
    named = seed % 2 == 1
    choice = {"type": "function", "function": {"name": "get_weather"}} if named else "required"
    ch = ask(srv[1], seed, ON, tool_choice=choice, extra={"reasoning_budget": 6})
    valid_call(ch, name="get_weather" if named else None)
    reasoning = getattr(ch.message, "reasoning_content", None)
    assert reasoning and "</think>" not in reasoning and "<tool_call>" not in reasoning


@pytest.mark.parametrize("seed", SEEDS)
def test_required_thinking_on_without_budget_still_calls(srv, seed):
    """Thinking on and no reasoning_budget: random weights never end their
    thought, so only the server's default (a quarter of max_tokens for the thought
    when a call is forced) leaves room for the call."""
    named = seed % 2 == 1
    choice = {"type": "function", "function": {"name": "get_time"}} if named else "required"
    ch = srv[1].chat.completions.create(model="m", messages=ASK, tools=TOOLS, seed=seed, temperature=1.0,
                                        max_tokens=400, parallel_tool_calls=False, tool_choice=choice,
                                        extra_body={"chat_template_kwargs": ON}).choices[0]
    valid_call(ch, name="get_time" if named else None)
    assert getattr(ch.message, "reasoning_content", None)
    assert ch.message.reasoning_content and len(ch.message.reasoning_content) > 0


@pytest.mark.parametrize("thinking", [OFF, ON], ids=["off", "on"])
def test_stream_reassembles_to_non_stream(srv, thinking):
    s, client = srv
    kw = dict(model="m", messages=ASK, tools=TOOLS, tool_choice="required", parallel_tool_calls=False, seed=5,
              temperature=1.0, max_tokens=160, extra_body={"chat_template_kwargs": thinking, "reasoning_budget": 6})
    whole = client.chat.completions.create(**kw).choices[0]
    call = valid_call(whole)
    content, calls, finish = reassemble(client.chat.completions.create(stream=True, **kw))
    assert finish == "tool_calls" and content == ""
    assert [(c["name"], c["arguments"]) for c in calls] == [(call.function.name, call.function.arguments)]
    # the reasoning deltas, read raw: they concatenate to the whole answer's reasoning_content
    body = dict(kw)
    body.update(body.pop("extra_body"), stream=True)
    reasoning = ""
    with requests.post(s.base + "/v1/chat/completions", json=body, stream=True, timeout=300) as r:
        for line in r.iter_lines():
            if line.startswith(b"data: {"):
                for ch in json.loads(line[6:])["choices"]:
                    reasoning += ch["delta"].get("reasoning_content") or ""
    assert reasoning == (getattr(whole.message, "reasoning_content", None) or "")
    assert bool(reasoning) == (thinking is ON)


def test_thinking_per_request(srv):
    """Without tools: enable_thinking false renders the closed empty thought
    and no reasoning comes back; true opens it and the thought (cut by the
    budget) is reasoning_content, the rest content."""
    s, client = srv
    for thinking, tail in [(OFF, "<|im_start|>assistant\n<think>\n\n</think>\n\n"), (ON, "<|im_start|>assistant\n<think>\n")]:
        r = requests.post(s.base + "/apply-template", json={"messages": ASK, "chat_template_kwargs": thinking}, timeout=30)
        assert r.json()["prompt"].endswith(tail)
    off = client.chat.completions.create(model="m", messages=ASK, seed=1, max_tokens=12,
                                         extra_body={"chat_template_kwargs": OFF}).choices[0]
    assert getattr(off.message, "reasoning_content", None) is None and off.message.content
    on = client.chat.completions.create(model="m", messages=ASK, seed=1, max_tokens=24,
                                        extra_body={"chat_template_kwargs": ON, "reasoning_budget": 4}).choices[0]
    assert getattr(on.message, "reasoning_content", None)
