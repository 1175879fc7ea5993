"""Tool calls, structured output and thinking through `ember serve` (SmolLM2-135M)
with the official openai client.

What is independent here: the client (openai) parses every answer and stream;
JSON is checked by Python's json module and a small hand-written JSON-schema
check (the subset the schemas below use); chat templates are the models'
published ones (tests/data/templates/SOURCES.md). SmolLM2's own template has no
tools, so the tool server renders with Qwen 2.5's (Hermes <tool_call> format)
and the thinking servers with Qwen 3's (<think> blocks, enable_thinking).
The tiny model does not call tools or think on its own: tool_choice required /
named and response_format must hold by grammar in every seeded run, and a
forced <think> output (a request grammar) must be split into reasoning_content.
"""
import concurrent.futures as cf
import subprocess
import json
import os
import pathlib

import openai
import pytest
import requests

from serverutil import Server, free_port

# Client timeout per request; ASan + UBSan (make sanitize) decode ~10x slower.
CLIENT_TIMEOUT = 600 if os.environ.get("EMBER_SANITIZED") == "1" else 120

ROOT = pathlib.Path(__file__).resolve().parents[2]
TEMPLATES = ROOT / "tests/data/templates"
N_RUNS = 20

WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 12}, "unit": {"enum": ["celsius", "fahrenheit"]}},
    "required": ["city", "unit"],
    "additionalProperties": False,
}
TIME = {"type": "object", "properties": {"zone": {"enum": ["UTC", "CET", "PST"]}}, "required": ["zone"]}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city",
                                      "parameters": WEATHER}},
    {"type": "function", "function": {"name": "get_time", "description": "Current time in a zone",
                                      "parameters": TIME}},
]
PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 10}, "age": {"type": "integer"},
                   "pet": {"enum": ["cat", "dog", None]}},
    "required": ["name", "age", "pet"],
    "additionalProperties": False,
}


def check_schema(v, s, path="$"):
    """The JSON-schema subset used above: type object/string/integer, properties,
    required, additionalProperties false, enum, maxLength."""
    if "enum" in s:
        assert v in s["enum"], f"{path}: {v!r} not in {s['enum']}"
    t = s.get("type")
    if t == "object":
        assert isinstance(v, dict), f"{path}: not an object"
        for k in s.get("required", []):
            assert k in v, f"{path}: missing {k}"
        props = s.get("properties", {})
        if s.get("additionalProperties") is False:
            assert set(v) <= set(props), f"{path}: extra keys {set(v) - set(props)}"
        for k, sub in props.items():
            if k in v:
                check_schema(v[k], sub, f"{path}.{k}")
    elif t == "string":
        assert isinstance(v, str), f"{path}: not a string"
        assert len(v) <= s.get("maxLength", 1 << 30), f"{path}: too long"
    elif t == "integer":
        assert isinstance(v, int) and not isinstance(v, bool), f"{path}: not an integer"


def test_check_schema_can_fail():
    for bad in ({"city": "Paris"}, {"city": "Paris", "unit": "kelvin"}, {"city": "x" * 13, "unit": "celsius"},
                {"city": "Paris", "unit": "celsius", "extra": 1}, {"city": 3, "unit": "celsius"}):
        with pytest.raises(AssertionError):
            check_schema(bad, WEATHER)
    check_schema({"city": "Paris", "unit": "celsius"}, WEATHER)


def start(ember_bin, model, template, *extra):
    port = free_port()
    return Server([ember_bin, "serve", "-m", model, "-c", "4096", "--kv-unified-per-slot", "1024", "-np", "4", "-t", "2",
                   "--port", str(port),
                   "--chat-template-file", str(TEMPLATES / template), *extra], port)


@pytest.fixture(scope="module")
def tools_srv(ember_bin, smollm2_path):
    s = start(ember_bin, smollm2_path, "Qwen-Qwen2.5-7B-Instruct.jinja")
    yield s
    assert s.stop() == 0


@pytest.fixture(scope="module")
def client(tools_srv):
    return openai.OpenAI(base_url=tools_srv.base + "/v1", api_key="none", max_retries=0, timeout=CLIENT_TIMEOUT)


ASK = [{"role": "user", "content": "What is the weather like in Paris right now?"}]


def many(fn, n=N_RUNS):
    with cf.ThreadPoolExecutor(4) as ex:
        return list(ex.map(fn, range(n)))


def test_tools_render_through_template(tools_srv):
    r = requests.post(tools_srv.base + "/apply-template", json={"messages": ASK, "tools": TOOLS}, timeout=30)
    p = r.json()["prompt"]
    assert "<tools>" in p and '"get_weather"' in p and "<tool_call>" in p


def test_tool_choice_required_20_of_20(client):
    def run(i):
        r = client.chat.completions.create(model="m", messages=ASK, tools=TOOLS, tool_choice="required",
                                           parallel_tool_calls=False, temperature=1.0, seed=1000 + i,
                                           max_tokens=64)
        return r.choices[0]
    for ch in many(run):
        assert ch.finish_reason == "tool_calls"
        calls = ch.message.tool_calls
        assert len(calls) == 1
        c = calls[0]
        assert c.type == "function" and c.id.startswith("call_")
        schema = {"get_weather": WEATHER, "get_time": TIME}[c.function.name]
        check_schema(json.loads(c.function.arguments), schema)


def test_named_tool_choice_calls_that_tool(client):
    def run(i):
        r = client.chat.completions.create(model="m", messages=ASK, tools=TOOLS,
                                           tool_choice={"type": "function", "function": {"name": "get_time"}},
                                           temperature=1.0, seed=2000 + i, max_tokens=48, parallel_tool_calls=False)
        return r.choices[0]
    for ch in many(run, 4):
        assert [c.function.name for c in ch.message.tool_calls] == ["get_time"]
        check_schema(json.loads(ch.message.tool_calls[0].function.arguments), TIME)


def test_tool_choice_errors_are_400(client):
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="m", messages=ASK, tools=TOOLS, max_tokens=4,
                                       tool_choice={"type": "function", "function": {"name": "nope"}})
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="m", messages=ASK, max_tokens=4, tool_choice="required")
    with pytest.raises(openai.BadRequestError) as ei:
        client.chat.completions.create(model="m", messages=ASK, max_tokens=4, extra_body={"grammar": "root ::= ("})
    assert ei.value.body["param"] == "grammar" and "line 1" in ei.value.body["message"]


def test_json_schema_20_of_20(client):
    rf = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}}

    def run(i):
        r = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Describe a person."}],
                                           response_format=rf, temperature=1.0, seed=3000 + i, max_tokens=80)
        return r.choices[0]
    for ch in many(run):
        assert ch.finish_reason == "stop"
        check_schema(json.loads(ch.message.content), PERSON)


def test_json_object(client):
    r = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Say hi as JSON."}],
                                       response_format={"type": "json_object"}, seed=5, max_tokens=60)
    if r.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(r.choices[0].message.content), dict)
    else:
        assert r.choices[0].message.content.lstrip().startswith("{")


def reassemble(stream):
    content, calls, finish = "", {}, None
    for chunk in stream:
        if not chunk.choices:
            continue
        d = chunk.choices[0].delta
        content += d.content or ""
        for tc in d.tool_calls or []:
            c = calls.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
            if tc.id:
                assert c["id"] is None, "id sent twice"
                c["id"] = tc.id
            if tc.function and tc.function.name:
                c["name"] += tc.function.name
            if tc.function and tc.function.arguments:
                c["arguments"] += tc.function.arguments
        finish = chunk.choices[0].finish_reason or finish
    return content, [calls[i] for i in sorted(calls)], finish


@pytest.mark.parametrize("parallel", [False, True])
def test_stream_reassembles_to_non_stream(client, parallel):
    kw = dict(model="m", messages=ASK, tools=TOOLS, tool_choice="required", parallel_tool_calls=parallel,
              temperature=0, max_tokens=72)   # greedy: the stream's prompt comes from the prefix cache
    whole = client.chat.completions.create(**kw).choices[0]
    content, calls, finish = reassemble(client.chat.completions.create(stream=True, **kw))
    # parallel: the model may go on calling until max_tokens ("length", the last call cut)
    assert finish == whole.finish_reason in (("tool_calls", "length") if parallel else ("tool_calls",))
    assert [(c["name"], c["arguments"]) for c in calls] == \
        [(c.function.name, c.function.arguments) for c in whole.message.tool_calls]
    assert all(c["id"].startswith("call_") for c in calls)
    assert content == (whole.message.content or "")


def test_tool_results_go_through_template(tools_srv):
    msgs = ASK + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Paris", "unit": "celsius"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18 degrees, sunny"},
    ]
    p = requests.post(tools_srv.base + "/apply-template", json={"messages": msgs, "tools": TOOLS},
                      timeout=30).json()["prompt"]
    assert '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}' in p
    assert "<tool_response>\n18 degrees, sunny\n</tool_response>" in p


# ---- thinking (Qwen 3 template: <think> blocks, enable_thinking) ----

THINK_GRAMMAR = 'root ::= "<think>\\nthe user greets me\\n</think>\\n\\n" "Hello there"'
HI = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def think_srv(ember_bin, smollm2_path):
    s = start(ember_bin, smollm2_path, "Qwen-Qwen3-0.6B.jinja")
    yield s
    assert s.stop() == 0


@pytest.fixture(scope="module")
def think_client(think_srv):
    return openai.OpenAI(base_url=think_srv.base + "/v1", api_key="none", max_retries=0, timeout=CLIENT_TIMEOUT)


def test_enable_thinking_changes_prompt(think_srv):
    def prompt(**kw):
        return requests.post(think_srv.base + "/apply-template", json={"messages": HI, **kw}, timeout=30).json()["prompt"]
    off = prompt(chat_template_kwargs={"enable_thinking": False})
    assert off.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert prompt().endswith("<|im_start|>assistant\n")                 # template default: thinking on
    assert prompt(chat_template_kwargs={"enable_thinking": True}) == prompt()


def test_reasoning_effort_none_turns_thinking_off(think_client):
    def n_prompt(**kw):
        return think_client.chat.completions.create(model="m", messages=HI, max_tokens=1, **kw).usage.prompt_tokens
    default = n_prompt()
    assert n_prompt(reasoning_effort="none") > default                  # the empty <think></think> block
    assert n_prompt(reasoning_effort="none") == n_prompt(extra_body={"chat_template_kwargs": {"enable_thinking": False}})


def test_forced_think_is_split(think_client):
    kw = dict(model="m", messages=HI, max_tokens=40, extra_body={"grammar": THINK_GRAMMAR})
    m = think_client.chat.completions.create(**kw).choices[0].message
    assert m.reasoning_content == "the user greets me"
    assert m.content == "Hello there"
    reasoning, content = "", ""
    for chunk in think_client.chat.completions.create(stream=True, **kw):
        d = chunk.choices[0].delta if chunk.choices else None
        reasoning += (getattr(d, "reasoning_content", None) or "") if d else ""
        content += (d.content or "") if d else ""
    assert (reasoning, content) == ("the user greets me", "Hello there")


# ---- reasoning budget (DeepSeek R1 template: the prompt opens <think> when enable_thinking) ----

R1 = "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja"
THINK_ON = {"chat_template_kwargs": {"enable_thinking": True}}


@pytest.fixture(scope="module")
def r1_client(ember_bin, smollm2_path):
    s = start(ember_bin, smollm2_path, R1)
    yield s, openai.OpenAI(base_url=s.base + "/v1", api_key="none", max_retries=0, timeout=CLIENT_TIMEOUT)
    assert s.stop() == 0


def n_tokens(srv, text):
    return len(requests.post(srv.base + "/tokenize", json={"content": text}, timeout=30).json()["tokens"])


def test_open_thought_and_budget(r1_client):
    srv, c = r1_client
    prompt = requests.post(srv.base + "/apply-template", json={"messages": HI, **THINK_ON}, timeout=30).json()["prompt"]
    assert prompt.endswith("<think>\n")
    kw = dict(model="m", messages=HI, max_tokens=16, temperature=0)
    # thinking on, no budget: the whole output is the thought
    m = c.chat.completions.create(**kw, extra_body=THINK_ON).choices[0].message
    assert m.reasoning_content and not m.content
    # thinking off: no thought at all
    m = c.chat.completions.create(**kw, extra_body={"chat_template_kwargs": {"enable_thinking": False}}).choices[0].message
    assert getattr(m, "reasoning_content", None) is None and m.content
    # a budget of 3 closes the thought after 3 tokens; the answer follows
    body = {**THINK_ON, "reasoning_budget": 3, "ignore_eos": True}
    m = c.chat.completions.create(**kw, extra_body=body).choices[0].message
    assert m.reasoning_content and m.content
    assert n_tokens(srv, m.reasoning_content) <= 3
    reasoning, content = "", ""
    for chunk in c.chat.completions.create(stream=True, **kw, extra_body=body):
        d = chunk.choices[0].delta if chunk.choices else None
        reasoning += (getattr(d, "reasoning_content", None) or "") if d else ""
        content += (d.content or "") if d else ""
    assert (reasoning, content) == (m.reasoning_content, m.content)


def test_reasoning_format_none_and_budget_flag(ember_bin, smollm2_path):
    s = start(ember_bin, smollm2_path, R1, "--reasoning-format", "none", "--reasoning-budget", "2")
    try:
        c = openai.OpenAI(base_url=s.base + "/v1", api_key="none", max_retries=0, timeout=CLIENT_TIMEOUT)
        m = c.chat.completions.create(model="m", messages=HI, max_tokens=12, temperature=0,
                                      extra_body={**THINK_ON, "ignore_eos": True}).choices[0].message
        assert getattr(m, "reasoning_content", None) is None
        assert "\n</think>\n\n" in m.content                       # raw text, closed by the budget
        assert n_tokens(s, m.content.split("\n</think>")[0]) <= 2
    finally:
        assert s.stop() == 0


# ---- stream shape through the chat parser (llama-server's and OpenAI's) ----

def sse_events(srv, body):
    with requests.post(srv.base + "/v1/chat/completions", json=dict(body, stream=True), stream=True,
                       timeout=CLIENT_TIMEOUT) as r:
        assert r.status_code == 200, r.text
        lines = [l for l in r.iter_lines() if l]
    assert lines[-1] == b"data: [DONE]"
    return [json.loads(l[6:]) for l in lines[:-1]]


def check_stream_shape(ev, n_generated=None):
    """The first delta is exactly {"role": "assistant", "content": null}
    (tools/server/server-task.cpp, to_json_oaicompat_chat: "initial update to
    conform to openai behavior"); no delta has an empty content or
    reasoning_content; the last chunk carries timings."""
    assert ev[0]["choices"][0]["delta"] == {"role": "assistant", "content": None}, ev[0]
    for e in ev[1:]:
        for ch in e["choices"]:
            d = ch["delta"]
            assert "role" not in d and d.get("content") != "" and d.get("reasoning_content") != "", e
    assert "timings" in ev[-1], ev[-1]
    if n_generated is not None:
        assert ev[-1]["timings"]["predicted_n"] == n_generated


@pytest.mark.parametrize("usage", [False, True])
def test_parsed_stream_shape(think_srv, tools_srv, usage):
    extra = {"stream_options": {"include_usage": True}} if usage else {}
    ev = sse_events(think_srv, {"messages": HI, "max_tokens": 40, "grammar": THINK_GRAMMAR, **extra})
    check_stream_shape(ev)
    ev = sse_events(tools_srv, {"messages": ASK, "tools": TOOLS, "tool_choice": "required", "max_tokens": 48,
                                "temperature": 0, "parallel_tool_calls": False, **extra})
    check_stream_shape(ev)
    if usage:
        assert ev[-1]["choices"] == [] and ev[-1]["timings"]["predicted_n"] == ev[-1]["usage"]["completion_tokens"]


# ---- issue 19 item 9: named tool_choice, cut calls, functions without parameters ----

def test_named_tool_choice_is_one_call_even_with_parallel_tool_calls(client):
    """OpenAI: tool_choice naming a function forces exactly one call of it;
    parallel_tool_calls (default true) does not let it repeat."""
    def run(i):
        r = client.chat.completions.create(model="m", messages=ASK, tools=TOOLS,
                                           tool_choice={"type": "function", "function": {"name": "get_weather"}},
                                           temperature=1.0, seed=6000 + i, max_tokens=96)
        return r.choices[0]
    for ch in many(run, 8):
        assert [c.function.name for c in ch.message.tool_calls] == ["get_weather"], ch.message
        assert ch.finish_reason == "tool_calls"
        check_schema(json.loads(ch.message.tool_calls[0].function.arguments), WEATHER)


def test_function_without_parameters_takes_none(client):
    """A function declared without "parameters" takes no arguments: forced,
    its arguments are exactly {} (OpenAI's reading of a missing schema)."""
    tools = [{"type": "function", "function": {"name": "get_time_now", "description": "The current time"}}]
    for i in range(4):
        for stream in (False, True):
            kw = dict(model="m", messages=ASK, tools=tools, temperature=1.0, seed=7000 + i, max_tokens=48,
                      tool_choice={"type": "function", "function": {"name": "get_time_now"}})
            if stream:
                _, calls, _ = reassemble(client.chat.completions.create(stream=True, **kw))
                args = [c["arguments"] for c in calls]
            else:
                args = [c.function.arguments for c in client.chat.completions.create(**kw).choices[0].message.tool_calls]
            assert len(args) == 1 and json.loads(args[0]) == {}, args


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "get_weather"}}])
def test_call_cut_by_max_tokens_leaks_no_markup(client, choice):
    """A forced call cut by max_tokens is a (possibly partial) call or
    nothing, never raw call markup in content, streamed or not; the finish
    reason stays "length" (OpenAI)."""
    for n in range(1, 19):
        kw = dict(model="m", messages=ASK, tools=TOOLS, tool_choice=choice, temperature=0, max_tokens=n,
                  parallel_tool_calls=False)
        m = client.chat.completions.create(**kw).choices[0]
        content, calls, finish = reassemble(client.chat.completions.create(stream=True, **kw))
        for text in (m.message.content or "", content):
            assert "<tool" not in text and "{" not in text and "name" not in text, (n, text)
        assert m.finish_reason == finish == "length", (n, m.finish_reason, finish)
        assert [(c["name"], c["arguments"]) for c in calls] == \
            [(c.function.name, c.function.arguments) for c in m.message.tool_calls or []]


# ---- issue 19 item 2: thinking defaults and --reasoning auto|on|off ----

THINKING = json.loads((ROOT / "tests/golden/chat/thinking.json").read_text())
R1_QWEN = "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B"
QWQ = "Qwen-QwQ-32B"
CMD_R7B = "CohereForAI-c4ai-command-r7b-12-2024-tool_use"
QWEN3 = "Qwen-Qwen3-0.6B"
GEMMA4 = "google-gemma-4-31B-it"


@pytest.mark.parametrize("template,mode,default", [
    # auto: templates that read enable_thinking as always given (written for
    # llama-server, which passes true) think, as with llama-server ...
    (R1_QWEN, None, "true"), (QWQ, None, "true"), (CMD_R7B, None, "true"),
    # ... and templates with a default of their own keep it (transformers')
    (QWEN3, None, "undefined"), ("Qwen3.5-4B", None, "undefined"), (GEMMA4, None, "undefined"),
    ("deepseek-ai-DeepSeek-V3.1", None, "undefined"),
    # --reasoning on / off: enable_thinking true / false, as llama-server's -rea
    (R1_QWEN, "on", "true"), (R1_QWEN, "off", "false"), (QWEN3, "off", "false"), (GEMMA4, "on", "true"),
    (QWQ, "auto", "true"),
])
def test_thinking_defaults(ember_bin, smollm2_path, template, mode, default):
    """Prompts from jinja2 (tests/golden/chat/make_thinking_goldens.py) for
    enable_thinking undefined / true / false; the request's own choice
    (chat_template_kwargs, reasoning_effort "none") always wins."""
    want = THINKING["prompts"][template]
    port = free_port()
    s = Server([ember_bin, "serve", "-m", smollm2_path, "-c", "2048", "-np", "1", "-t", "1", "--port", str(port),
                "--chat-template-file", str(TEMPLATES / (template + ".jinja"))] +
               (["--reasoning", mode] if mode else []), port)
    try:
        def prompt(**kw):
            r = requests.post(s.base + "/apply-template", json={"messages": THINKING["messages"], **kw}, timeout=30)
            assert r.status_code == 200, r.text
            return r.json()["prompt"]
        assert prompt() == want[default]
        assert prompt(chat_template_kwargs={"enable_thinking": True}) == want["true"]
        assert prompt(chat_template_kwargs={"enable_thinking": False}) == want["false"]
        # the completion renders the same way (prompt tokens of the expected text)
        n = len(requests.post(s.base + "/tokenize", json={"content": want[default], "add_special": True},
                              timeout=30).json()["tokens"])
        r = requests.post(s.base + "/v1/chat/completions", timeout=CLIENT_TIMEOUT,
                          json={"messages": THINKING["messages"], "max_tokens": 1})
        assert r.json()["usage"]["prompt_tokens"] in (n, n - 1), (r.json()["usage"], n)   # n - 1: one BOS kept
        r = requests.post(s.base + "/v1/chat/completions", timeout=CLIENT_TIMEOUT,
                          json={"messages": THINKING["messages"], "max_tokens": 1, "reasoning_effort": "none"})
        n_off = len(requests.post(s.base + "/tokenize", json={"content": want["false"], "add_special": True},
                                  timeout=30).json()["tokens"])
        assert r.json()["usage"]["prompt_tokens"] in (n_off, n_off - 1)
    finally:
        assert s.stop() == 0


def test_reasoning_flag_values(ember_bin, smollm2_path):
    r = subprocess.run([ember_bin, "serve", "-m", smollm2_path, "--reasoning", "sometimes"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2 and "--reasoning" in r.stderr
