"""tool_choice required / named enforced by grammar in the Gemma 4 native,
Qwen3-Coder XML and Mistral [TOOL_CALLS] formats, with SmolLM2-135M and the
official openai client.

SmolLM2 was never trained on these formats: the server renders with the
published templates (tests/data/templates/SOURCES.md), picks the call syntax
from the template, and the grammar alone must make a valid call every time.
Independent checks: the openai client parses answers and streams; arguments
are checked with json and test_server_tools.check_schema against the tool's
schema; the expected call syntax is the one each template writes for an
assistant message with tool_calls (checked through /apply-template).
"""
import concurrent.futures as cf
import json

import openai
import pytest
import requests

from serverutil import Server, free_port
from test_server_tools import ASK, TEMPLATES, TIME, TOOLS, WEATHER, check_schema, reassemble

N_RUNS = 8
SCHEMAS = {"get_weather": WEATHER, "get_time": TIME}
# template, marker the template writes before a call in an assistant message
FORMATS = {
    "gemma4": ("google-gemma-4-31B-it.jinja", "<|tool_call>call:get_weather{"),
    "qwen3_coder": ("Qwen3-Coder.jinja", "<tool_call>\n<function=get_weather>\n<parameter="),
    "mistral": ("unsloth-mistral-Devstral-Small-2507.jinja", "[TOOL_CALLS]get_weather[ARGS]{"),
    "mistral_nemo": ("mistralai-Mistral-Nemo-Instruct-2407.jinja", '[TOOL_CALLS][{"name": "get_weather"'),
}


def start(ember_bin, model, template):
    port = free_port()   # -c 2048: Devstral's system prompt alone is ~1,500 SmolLM2 tokens
    return Server([ember_bin, "serve", "-m", model, "-c", "8192", "--kv-unified-per-slot", "2048", "-np", "4", "-t", "2",
                   "--port", str(port),
                   "--chat-template-file", str(TEMPLATES / template)], port)


@pytest.fixture(scope="module", params=sorted(FORMATS))
def fmt(request, ember_bin, smollm2_path):
    template, marker = FORMATS[request.param]
    s = start(ember_bin, smollm2_path, template)
    c = openai.OpenAI(base_url=s.base + "/v1", api_key="none", max_retries=0, timeout=300)
    # one request first, so that the (long, for Devstral) prompt is in the prefix cache
    # before the concurrent runs: a loaded 2-core CI machine then stays within the timeout
    c.chat.completions.create(model="m", messages=ASK, tools=TOOLS, max_tokens=1)
    yield request.param, s, c, marker
    assert s.stop() == 0


def test_template_writes_this_format(fmt):
    name, srv, _, marker = fmt
    call = {"id": "abcdefghi", "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris", "unit": "celsius"}'}}
    msgs = ASK + [{"role": "assistant", "content": "", "tool_calls": [call]}]
    r = requests.post(srv.base + "/apply-template", json={"messages": msgs, "tools": TOOLS}, timeout=30)
    assert r.status_code == 200, r.text
    assert marker in r.json()["prompt"]


def valid_calls(ch, n=None, name=None):
    """The calls of a choice, each valid. With parallel calls (n None) the
    model may go on calling until max_tokens: then the finish is "length" and
    the last call, which may be cut, is not checked."""
    calls = ch.message.tool_calls
    if n is None and ch.finish_reason == "length":
        assert calls and len(calls) >= 2, ch.message
        check = calls[:-1]
    else:
        assert ch.finish_reason == "tool_calls", (ch.finish_reason, ch.message)
        assert calls and (n is None or len(calls) == n)
        check = calls
    for c in check:
        assert c.type == "function" and c.id.startswith("call_")
        assert name is None or c.function.name == name
        check_schema(json.loads(c.function.arguments), SCHEMAS[c.function.name])
    return calls


def test_required_makes_a_valid_call(fmt):
    _, _, client, _ = fmt

    def run(i):
        return client.chat.completions.create(model="m", messages=ASK, tools=TOOLS, tool_choice="required",
                                              parallel_tool_calls=False, temperature=1.0, seed=4000 + i,
                                              max_tokens=96).choices[0]
    with cf.ThreadPoolExecutor(4) as ex:
        for ch in ex.map(run, range(N_RUNS)):
            valid_calls(ch, n=1)


def test_named_choice_calls_that_tool(fmt):
    _, _, client, _ = fmt
    for i in range(2):
        ch = client.chat.completions.create(model="m", messages=ASK, tools=TOOLS, temperature=1.0, seed=5000 + i,
                                            tool_choice={"type": "function", "function": {"name": "get_time"}},
                                            parallel_tool_calls=False, max_tokens=96).choices[0]
        valid_calls(ch, n=1, name="get_time")


@pytest.mark.parametrize("parallel", [False, True])
def test_stream_reassembles_to_non_stream(fmt, parallel):
    _, _, client, _ = fmt
    kw = dict(model="m", messages=ASK, tools=TOOLS, tool_choice="required", parallel_tool_calls=parallel,
              temperature=0, max_tokens=96)
    whole = client.chat.completions.create(**kw).choices[0]
    calls = valid_calls(whole, n=None if parallel else 1)
    content, scalls, finish = reassemble(client.chat.completions.create(stream=True, **kw))
    assert finish == whole.finish_reason
    assert [(c["name"], c["arguments"]) for c in scalls] == [(c.function.name, c.function.arguments) for c in calls]
    assert all(c["id"].startswith("call_") for c in scalls)
    assert content == (whole.message.content or "")
