"""OpenAI Responses (POST /v1/responses, /v1/responses/input_tokens) on
`ember serve` with SmolLM2-135M-Instruct, driven by the official `openai`
Python client's `responses` API.

Independent values: prompt token counts and greedy replies are llama.cpp's
llama-server's on the same GGUF (tests/golden/server/server_goldens.json, the
cases test_server_models.py checks through the chat API); the client itself
parses every answer, stream event and error into its own typed objects
(openai.types.responses) and its stream helper (client.responses.stream)
refuses events out of order (a content event before its output item, an
item whose identity changes, a response.completed with unfinished items);
structured output is parsed by the client into a pydantic model. Tool calls
use Qwen 2.5's published template (Hermes <tool_call> format) and a forced
choice (the tiny model does not call tools on its own); thinking uses Qwen
3's (<think> blocks) with a grammar forcing a thought, as
test_server_tools.py does for the chat API.
"""
import json
import os
import pathlib
import time

import openai
import pydantic
import pytest
import requests

from serverutil import Server, free_port

ROOT = pathlib.Path(__file__).resolve().parents[2]
TEMPLATES = ROOT / "tests/data/templates"
GOLDEN = json.loads((ROOT / "tests/golden/server/server_goldens.json").read_text())
CASES = GOLDEN["models"]["smollm2"]
KEY = "sk-ember-responses"
# Client timeout per request; ASan + UBSan (make sanitize) decode ~10x slower.
CLIENT_TIMEOUT = 600 if os.environ.get("EMBER_SANITIZED") == "1" else 120

WEATHER = {"type": "function", "name": "get_weather", "description": "Current weather in a city", "strict": True,
           "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}},
                          "required": ["city"], "additionalProperties": False}}
ASK = [{"role": "user", "content": "What is the weather like in Paris right now?"}]

# the stream of one message item, as the Responses streaming reference orders it
MESSAGE_EVENTS = ["response.created", "response.in_progress", "response.output_item.added",
                  "response.content_part.added", "response.output_text.delta", "response.output_text.done",
                  "response.content_part.done", "response.output_item.done"]


def start(ember_bin, model, *extra):
    port = free_port()
    return Server([ember_bin, "serve", "-m", model, "-c", "2048", "-np", "2", "-t", "2", "--port", str(port),
                   "--alias", "smol", *extra], port)


@pytest.fixture(scope="module")
def srv(ember_bin, smollm2_path):
    s = start(ember_bin, smollm2_path, "--api-key", KEY)
    yield s
    assert s.stop() == 0


@pytest.fixture(scope="module")
def client(srv):
    return openai.OpenAI(base_url=srv.base + "/v1", api_key=KEY, max_retries=0, timeout=CLIENT_TIMEOUT)


@pytest.fixture(scope="module")
def tools_srv(ember_bin, smollm2_path):
    s = start(ember_bin, smollm2_path, "--chat-template-file", str(TEMPLATES / "Qwen-Qwen2.5-7B-Instruct.jinja"))
    yield s
    assert s.stop() == 0


@pytest.fixture(scope="module")
def tools_client(tools_srv):
    return openai.OpenAI(base_url=tools_srv.base + "/v1", api_key="none", max_retries=0, timeout=CLIENT_TIMEOUT)


@pytest.fixture(scope="module")
def think_client(ember_bin, smollm2_path):
    s = start(ember_bin, smollm2_path, "--chat-template-file", str(TEMPLATES / "Qwen-Qwen3-0.6B.jinja"))
    yield openai.OpenAI(base_url=s.base + "/v1", api_key="none", max_retries=0, timeout=CLIENT_TIMEOUT)
    assert s.stop() == 0


def collapse(types):
    """Event types with runs of one delta type shown once."""
    out = []
    for t in types:
        if not (out and t == out[-1] and t.endswith(".delta")):
            out.append(t)
    return out


def tokenize(srv, text, headers=None):
    r = requests.post(srv.base + "/tokenize", json={"content": text, "add_special": False, "parse_special": False},
                      headers=headers, timeout=30)
    return r.json()["tokens"]


# ---------- whole answers: llama-server's numbers ----------

@pytest.mark.parametrize("case", CASES, ids=lambda c: c["messages"][-1]["content"][:20])
def test_response_matches_llama_server(client, case):
    r = client.responses.create(model="smol", input=case["messages"], max_output_tokens=GOLDEN["max_tokens"],
                                temperature=0)
    assert r.object == "response" and r.model == "smol" and r.id.startswith("resp_")
    assert [o.type for o in r.output] == ["message"]
    assert r.output[0].role == "assistant" and [p.type for p in r.output[0].content] == ["output_text"]
    assert r.output_text.startswith(case["stable_prefix"])
    assert r.usage.input_tokens == case["prompt_tokens"]
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens
    assert r.usage.output_tokens <= GOLDEN["max_tokens"]
    assert r.max_output_tokens == GOLDEN["max_tokens"] and r.temperature == 0 and r.text.format.type == "text"
    if case["finish_reason"] == "length":
        # the limit ended it: incomplete, as the Responses reference says, with exactly that many tokens
        assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
        assert r.output[0].status == "incomplete"
        assert r.usage.output_tokens == GOLDEN["max_tokens"]
    else:
        assert r.status == "completed" and r.incomplete_details is None and r.output[0].status == "completed"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c["messages"][-1]["content"][:20])
def test_input_tokens_match_llama_server(client, case):
    r = client.responses.input_tokens.count(model="smol", input=case["messages"])
    assert r.object == "response.input_tokens" and r.input_tokens == case["prompt_tokens"]


def test_instructions_and_parts_are_the_system_and_user_text(client):
    """instructions is the system message, input_text parts the user's text:
    the same prompt as llama-server's for the plain messages."""
    case = next(c for c in CASES if c["messages"][0]["role"] == "system")
    sys_text, user = case["messages"][0]["content"], case["messages"][1]["content"]
    r = client.responses.create(model="smol", instructions=sys_text, max_output_tokens=GOLDEN["max_tokens"],
                                temperature=0, input=[{"role": "user", "content": [{"type": "input_text",
                                                                                     "text": user}]}])
    assert r.usage.input_tokens == case["prompt_tokens"]
    assert r.output_text.startswith(case["stable_prefix"])
    # developer messages are the system's too
    n = client.responses.input_tokens.count(model="smol", input=[{"role": "developer", "content": sys_text},
                                                                 {"role": "user", "content": user}])
    assert n.input_tokens == case["prompt_tokens"]


def test_usage_counts_equal_tokenize(client, srv):
    """usage.input_tokens is the rendered prompt's length by /tokenize, and a
    greedy reply of digits and commas (which tokenizes back the same way)
    counts as many output tokens as /tokenize finds in its text."""
    hdr = {"Authorization": "Bearer " + KEY}
    msgs = CASES[0]["messages"]
    prompt = requests.post(srv.base + "/apply-template", json={"messages": msgs}, headers=hdr, timeout=30).json()["prompt"]
    n_prompt = len(requests.post(srv.base + "/tokenize", json={"content": prompt, "add_special": True},
                                 headers=hdr, timeout=30).json()["tokens"])
    r = client.responses.create(model="smol", input=msgs, max_output_tokens=6, temperature=0)
    assert r.usage.input_tokens == n_prompt == CASES[0]["prompt_tokens"]
    assert r.output_text.startswith("1, 2")
    assert r.usage.output_tokens == len(tokenize(srv, r.output_text, hdr)) == 6


def test_completed_status(client):
    r = client.responses.create(model="smol", input="Say hi.", max_output_tokens=200, temperature=0)
    assert r.status == "completed" and r.incomplete_details is None
    assert 0 < r.usage.output_tokens < 200 and r.output[0].status == "completed"


def test_string_input_is_one_user_message(client):
    case = CASES[0]
    r = client.responses.input_tokens.count(model="smol", input=case["messages"][0]["content"])
    assert r.input_tokens == case["prompt_tokens"]


# ---------- stream ----------

def test_stream_events_equal_non_stream(client):
    case = CASES[1]
    kw = dict(model="smol", input=case["messages"], max_output_tokens=GOLDEN["max_tokens"], temperature=0)
    whole = client.responses.create(**kw)
    events = list(client.responses.create(stream=True, **kw))
    assert collapse([e.type for e in events]) == MESSAGE_EVENTS + ["response.incomplete"]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == whole.output_text and text.startswith(case["stable_prefix"])
    item_id = events[2].item.id
    assert all(e.item_id == item_id for e in events if hasattr(e, "item_id"))
    assert {e.output_index for e in events if hasattr(e, "output_index")} == {0}
    done = events[-1].response
    assert done.status == "incomplete" and done.incomplete_details.reason == "max_output_tokens"
    assert done.output_text == text and done.output[0].id == item_id
    assert done.usage.output_tokens == whole.usage.output_tokens == GOLDEN["max_tokens"]
    assert done.usage.input_tokens == case["prompt_tokens"]
    assert events[0].response.status == "in_progress" and events[0].response.id == done.id


def test_stream_helper_final_response(client):
    """client.responses.stream accumulates the events into the final Response
    (it raises on an event out of order or a missing response.completed)."""
    kw = dict(model="smol", input="Say hi.", max_output_tokens=200, temperature=0)
    whole = client.responses.create(**kw)
    text = ""
    with client.responses.stream(**kw) as s:
        for ev in s:
            if ev.type == "response.output_text.delta":
                text += ev.delta
        final = s.get_final_response()
    assert final.status == "completed" and final.output_text == text == whole.output_text
    assert final.usage.output_tokens == whole.usage.output_tokens


def test_stream_raw_sse_names(srv):
    """Each SSE event's `event:` name is its data's type."""
    r = requests.post(srv.base + "/v1/responses", headers={"Authorization": "Bearer " + KEY},
                      json={"model": "smol", "max_output_tokens": 3, "stream": True, "input": "Hi"}, stream=True,
                      timeout=60)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    name, n = None, 0
    for line in r.iter_lines(decode_unicode=True):
        if line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: "):
            assert json.loads(line[6:])["type"] == name
            n += 1
    assert n >= 9 and name == "response.incomplete"


# ---------- tools ----------

def test_function_call_and_output_round_trip(tools_client, tools_srv):
    kw = dict(model="smol", input=ASK, tools=[WEATHER], tool_choice={"type": "function", "name": "get_weather"},
              max_output_tokens=60, temperature=0)
    r = tools_client.responses.create(**kw)
    assert r.status == "completed"
    calls = [o for o in r.output if o.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "get_weather" and calls[0].call_id.startswith("call_")
    args = json.loads(calls[0].arguments)
    assert set(args) == {"city"} and isinstance(args["city"], str) and len(args["city"]) <= 12
    assert r.tools[0].name == "get_weather" and r.tool_choice.name == "get_weather"

    # the stream: output_item.added (function_call) ... arguments deltas ... done, the same call
    events = list(tools_client.responses.create(stream=True, **kw))
    types = collapse([e.type for e in events])
    i = types.index("response.output_item.added")
    assert types[i:i + 4] == ["response.output_item.added", "response.function_call_arguments.delta",
                              "response.function_call_arguments.done", "response.output_item.done"]
    assert types[-1] == "response.completed"
    deltas = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    done = next(e for e in events if e.type == "response.function_call_arguments.done")
    assert deltas == done.arguments == calls[0].arguments
    # the helper parses a strict tool's arguments against the tools it was given
    with tools_client.responses.stream(**kw) as s:
        final = s.get_final_response()
    fc = [o for o in final.output if o.type == "function_call"]
    assert len(fc) == 1 and fc[0].parsed_arguments == args

    # the call and its output go back as items; the reply is a message
    out = "Sunny, 24 degrees Celsius"
    follow = ASK + [o.model_dump(exclude_none=True) for o in r.output] + [
        {"type": "function_call_output", "call_id": calls[0].call_id, "output": out}]
    r2 = tools_client.responses.create(model="smol", input=follow, tools=[WEATHER], max_output_tokens=16, temperature=0)
    assert r2.output and r2.output[0].type == "message" and r2.output_text
    # the same conversation through the chat API (tool_calls + a tool message) is the same prompt
    chat = openai.OpenAI(base_url=tools_srv.base + "/v1", api_key="none", max_retries=0, timeout=CLIENT_TIMEOUT)
    msgs = ASK + [{"role": "assistant", "content": None, "tool_calls": [
        {"id": calls[0].call_id, "type": "function",
         "function": {"name": "get_weather", "arguments": calls[0].arguments}}]},
        {"role": "tool", "tool_call_id": calls[0].call_id, "content": out}]
    ctools = [{"type": "function", "function": {k: WEATHER[k] for k in ("name", "description", "parameters",
                                                                         "strict")}}]
    c = chat.chat.completions.create(model="smol", messages=msgs, tools=ctools, max_tokens=1, temperature=0)
    assert r2.usage.input_tokens == c.usage.prompt_tokens
    # and the output's text is in the prompt: a longer output is more tokens
    follow[-1]["output"] = [{"type": "input_text", "text": out + ", light wind"}]
    assert tools_client.responses.input_tokens.count(model="smol", input=follow,
                                                     tools=[WEATHER]).input_tokens > r2.usage.input_tokens


def test_tool_choice_required(tools_client):
    r = tools_client.responses.create(model="smol", input=ASK, tools=[WEATHER], tool_choice="required",
                                      parallel_tool_calls=False, max_output_tokens=60, temperature=0)
    assert r.tool_choice == "required" and r.parallel_tool_calls is False
    calls = [o for o in r.output if o.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "get_weather"


# ---------- structured output ----------

class Answer(pydantic.BaseModel):
    answer: int


def test_text_format_json_schema(tools_client):
    r = tools_client.responses.parse(model="smol", input="What is 2+2? Answer in JSON.", text_format=Answer,
                                     max_output_tokens=40, temperature=0)
    assert r.status == "completed"
    assert isinstance(r.output_parsed, Answer)
    assert json.loads(r.output_text) == r.output_parsed.model_dump()


# ---------- reasoning ----------

THINK_GRAMMAR = 'root ::= "<think>\\nthe user greets me\\n</think>\\n\\n" "Hello there"'


def test_reasoning_items(think_client):
    kw = dict(model="smol", input=[{"role": "user", "content": "Hi"}], max_output_tokens=40, temperature=0,
              extra_body={"grammar": THINK_GRAMMAR})
    r = think_client.responses.create(**kw)
    assert [o.type for o in r.output] == ["reasoning", "message"]
    assert r.output[0].content[0].type == "reasoning_text"
    assert r.output[0].content[0].text == "the user greets me"
    assert r.output_text == "Hello there"
    events = list(think_client.responses.create(stream=True, **kw))
    types = collapse([e.type for e in events])
    assert types == ["response.created", "response.in_progress", "response.output_item.added",
                     "response.content_part.added", "response.reasoning_text.delta", "response.reasoning_text.done",
                     "response.content_part.done", "response.output_item.done"] + MESSAGE_EVENTS[2:] + \
        ["response.completed"]
    assert "".join(e.delta for e in events if e.type == "response.reasoning_text.delta") == "the user greets me"
    assert [o.type for o in events[-1].response.output] == ["reasoning", "message"]
    assert [e.output_index for e in events if e.type == "response.output_item.added"] == [0, 1]
    # a reasoning item of an earlier turn goes back as the assistant's reasoning_content
    again = think_client.responses.create(model="smol", max_output_tokens=4, input=[
        {"role": "user", "content": "Hi"}, *[o.model_dump(exclude_none=True) for o in r.output],
        {"role": "user", "content": "And now?"}])
    assert again.object == "response"


def test_reasoning_effort_none_turns_thinking_off(think_client):
    """effort none renders the template's empty <think></think> block: the same
    prompt as the chat API's enable_thinking false."""
    hi = [{"role": "user", "content": "Hi"}]

    def n(**kw):
        return think_client.responses.input_tokens.count(model="smol", input=hi, **kw).input_tokens
    chat = think_client.chat.completions.create(model="smol", messages=hi, max_tokens=1,
                                                extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    assert n(reasoning={"effort": "none"}) == chat.usage.prompt_tokens > n()
    assert n(reasoning={"effort": "high"}) == n()


# ---------- errors ----------

def test_errors(client, srv):
    cases = [
        (dict(input="Hi", previous_response_id="resp_123"), "previous_response_id", "stateless"),
        (dict(), "input", "input"),
        (dict(input="Hi", max_output_tokens=0), "max_output_tokens", "max_output_tokens"),
        (dict(input="Hi", temperature=7), "temperature", "temperature"),
        (dict(input="Hi", tools=[{"type": "web_search"}]), "tools[0]", "function"),
        (dict(input="Hi", tool_choice="required"), "tool_choice", "tools"),
        (dict(input=[{"role": "user", "content": [{"type": "input_image", "image_url": "data:,"}]}]),
         "input[0].content[0]", "input_image"),
        (dict(input=[{"type": "item_reference", "id": "msg_1"}]), "input[0]", "stateless"),
        (dict(input="Hi", text={"format": {"type": "xml"}}), "text.format.type", "json_schema"),
        (dict(input="word " * 3000), None, "context"),
    ]
    for kw, param, word in cases:
        with pytest.raises(openai.BadRequestError) as ei:
            client.post("/responses", cast_to=openai.types.responses.Response, body={"model": "smol", **kw})
        e = ei.value
        assert e.status_code == 400 and e.body["type"] in ("invalid_request_error", "exceed_context_size_error")
        if param:
            assert e.body["param"] == param, (kw, e.body)
        assert word in e.body["message"], (word, e.body)
    # through the typed method too: the client raises its own class
    with pytest.raises(openai.BadRequestError) as ei:
        client.responses.create(model="smol", input="Hi", previous_response_id="resp_123")
    assert ei.value.body["param"] == "previous_response_id"
    # nothing is stored, so nothing can be fetched
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve("resp_123")
    bad = openai.OpenAI(base_url=srv.base + "/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.responses.create(model="smol", input="Hi")
    r = requests.get(srv.base + "/v1/responses", headers={"Authorization": "Bearer " + KEY})
    assert r.status_code == 405 and r.json()["error"]["type"] == "invalid_request_error"
    r = requests.post(srv.base + "/v1/responses", headers={"Authorization": "Bearer " + KEY}, data=b"{not json")
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"


def test_disconnect_mid_stream_frees_slot(srv):
    """A Responses stream whose client leaves is cancelled: the slot is free again at once.
    (1900 tokens with ignore_eos: the reply runs far longer than the 3 s allowed, so it cannot end on its own.)"""
    hdr = {"Authorization": "Bearer " + KEY}
    body = {"model": "smol", "max_output_tokens": 1900, "stream": True, "temperature": 1.5, "top_p": 1,
            "ignore_eos": True, "input": "Tell me a long story."}
    with requests.post(srv.base + "/v1/responses", json=body, headers=hdr, stream=True, timeout=60) as r:
        n, seen, t0 = 0, [], time.time()
        # hold the line iterator: a `for` over a temporary r.iter_lines() drops it at the break, and
        # CPython's refcounting then closes the socket at once, so the server could cancel the request
        # before /slots is asked (the race behind CI's failure); the connection must close at `with`'s end
        lines = r.iter_lines()
        for line in lines:
            if line:
                seen.append(line[:160])
            n += line.startswith(b"event: response.output_text.delta")
            if n >= 3:
                break
        t_first = time.time() - t0
        # /slots is published after each step: ask until it shows the request
        deadline = time.time() + 3
        while True:
            slots = requests.get(srv.base + "/slots", headers=hdr).json()
            if any(s["is_processing"] for s in slots):
                break
            assert time.time() < deadline, ("the request never showed in /slots", t_first, slots, seen)
            time.sleep(0.02)
    slots = srv.wait_idle(timeout=3, headers=hdr)
    assert not any(s["is_processing"] for s in slots), slots
