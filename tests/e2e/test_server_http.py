"""The HTTP/OpenAI layer of the server, driven by the official openai client
and raw HTTP, in front of the toy model of tests/common/fake_model.h
(build/tools/fake_serve): routes, validation, SSE, auth, disconnects,
metrics and shutdown, fast and without weights.

The toy model's rule is re-implemented here in Python (fake_next) as the
independent reference for generated text; the real models are exercised by
test_server_models.py against `ember serve`.
"""
import concurrent.futures as cf
import json
import pathlib
import signal
import socket
import time

import openai
import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from serverutil import Server, free_port

KEY = "sk-test-ember"
HDR = {"Authorization": f"Bearer {KEY}"}
BOS = 256


def fake_next(tokens):
    """tests/common/fake_model.h: FNV-1a of the whole history picks the argmax."""
    h = 2166136261
    for t in tokens:
        h ^= t
        h = (h * 16777619) & 0xFFFFFFFF
    return 32 if h % 5 == 0 else ord("a") + (h >> 3) % 26


def fake_greedy(prompt_text, n):
    toks = [BOS] + list(prompt_text.encode())
    out = []
    for _ in range(n):
        t = fake_next(toks)
        out.append(t)
        toks.append(t)
    return bytes(out).decode()


def chat_prompt(messages):
    return "".join(f"<|{m['role']}|>{m['content']}\n" for m in messages) + "<|assistant|>"


@pytest.fixture(scope="module")
def fake_bin(ember_bin):
    p = pathlib.Path(ember_bin).parent.parent / "tools" / "fake_serve"
    assert p.exists(), f"{p} not built"
    return str(p)


@pytest.fixture(scope="module")
def server(fake_bin):
    port = free_port()
    s = Server([fake_bin, "--port", str(port), "--parallel", "4", "-c", "256", "--api-key", KEY, "--metrics",
                "--delay-ms", "2"], port, startup_timeout=20)
    yield s
    assert s.stop() == 0


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base + "/v1", api_key=KEY, max_retries=0, timeout=30)


MSGS = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"}]


def test_chat_non_stream_matches_reference(client):
    r = client.chat.completions.create(model="fake", messages=MSGS, max_tokens=12, temperature=0)
    assert r.object == "chat.completion"
    assert r.choices[0].message.role == "assistant"
    assert r.choices[0].message.content == fake_greedy(chat_prompt(MSGS), 12)
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 12
    assert r.usage.prompt_tokens == 1 + len(chat_prompt(MSGS))
    assert r.usage.total_tokens == r.usage.prompt_tokens + 12


def test_chat_stream_equals_non_stream(client):
    whole = client.chat.completions.create(model="fake", messages=MSGS, max_tokens=20, temperature=0)
    chunks = list(client.chat.completions.create(model="fake", messages=MSGS, max_tokens=20, temperature=0,
                                                 stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    finals = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finals == ["length"]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 20
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens > 0   # same prompt as `whole`


def sse_events(server, path, body):
    """The JSON events of one raw SSE answer (the bytes as sent, no client in between)."""
    with requests.post(server.base + path, json=dict(body, stream=True), headers=HDR, stream=True, timeout=60) as r:
        assert r.status_code == 200, r.text
        lines = [l for l in r.iter_lines() if l]
    assert lines[-1] == b"data: [DONE]"
    assert all(l.startswith(b"data: ") for l in lines)
    return [json.loads(l[6:]) for l in lines[:-1]]


@pytest.mark.parametrize("usage", [False, True])
@pytest.mark.parametrize("logprobs", [False, True])
def test_stream_chunks_have_llama_server_shape(server, usage, logprobs):
    """llama-server's stream (tools/server/server-task.cpp,
    to_json_oaicompat_chat_stream, and OpenAI's streaming reference): the
    first chunk's delta is exactly {"role": "assistant", "content": null};
    no delta has an empty "content"; the last chunk carries "timings" whose
    counts are the usage's."""
    body = {"messages": MSGS, "max_tokens": 16, "temperature": 0, "logprobs": logprobs}
    if usage:
        body["stream_options"] = {"include_usage": True}
    ev = sse_events(server, "/v1/chat/completions", body)
    assert ev[0]["choices"][0]["delta"] == {"role": "assistant", "content": None}, ev[0]
    assert ev[0]["choices"][0]["finish_reason"] is None
    deltas = [e["choices"][0]["delta"] for e in ev if e["choices"]]
    assert all(d.get("content") != "" for d in deltas), deltas
    assert all("role" not in d for d in deltas[1:])
    assert "".join(d.get("content") or "" for d in deltas) == fake_greedy(chat_prompt(MSGS), 16)
    last = ev[-1]
    assert last["timings"]["predicted_n"] == 16, last
    assert last["timings"]["prompt_n"] + last["timings"]["cache_n"] == 1 + len(chat_prompt(MSGS))
    if usage:
        assert last["choices"] == [] and last["usage"]["completion_tokens"] == 16
    else:
        assert last["choices"][0]["finish_reason"] == "length"
    if logprobs:   # every token's logprob is sent, once
        assert sum(len(e["choices"][0]["logprobs"]["content"]) for e in ev
                   if e["choices"] and e["choices"][0].get("logprobs")) == 16


def test_completion_stream_sends_no_empty_text(server):
    ev = sse_events(server, "/v1/completions", {"prompt": "count", "max_tokens": 10, "temperature": 0,
                                                "stream_options": {"include_usage": True}})
    texts = [e["choices"][0]["text"] for e in ev if e["choices"] and e["choices"][0]["finish_reason"] is None]
    assert texts and all(texts) and "".join(texts) == fake_greedy("count", 10)
    assert ev[-1]["choices"] == [] and ev[-1]["timings"]["predicted_n"] == 10


COUNT = [{"role": "user", "content": "Count from 1 to 10, separated by commas."},
         {"role": "assistant", "content": "1, 2, 3,"}]


def continued_prompt(messages):
    """The toy template with the final message left open (transformers'
    continue_final_message cut: right after the final message's text)."""
    return chat_prompt(messages)[:-len("\n<|assistant|>")]


@pytest.mark.parametrize("extra", [{}, {"continue_final_message": True, "add_generation_prompt": False},
                                   {"add_generation_prompt": True}])
def test_assistant_prefill_is_continued(server, client, extra):
    """llama-server (server-common.cpp, oaicompat_chat_params_parse): a final
    assistant message is the start of the reply, with no new turn opened;
    so is continue_final_message (vLLM's field). The reply is only what
    follows."""
    want = fake_greedy(continued_prompt(COUNT), 10)
    r = client.chat.completions.create(model="fake", messages=COUNT, max_tokens=10, temperature=0, extra_body=extra)
    assert r.choices[0].message.content == want
    assert r.usage.prompt_tokens == 1 + len(continued_prompt(COUNT))
    chunks = client.chat.completions.create(model="fake", messages=COUNT, max_tokens=10, temperature=0, stream=True,
                                            extra_body=extra)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == want
    p = requests.post(server.base + "/apply-template", json={"messages": COUNT, **extra}, headers=HDR).json()
    assert p["prompt"] == continued_prompt(COUNT)


def test_generation_prompt_flags(server, client):
    # continue_final_message false: the assistant's message is closed and a new turn opened
    r = client.chat.completions.create(model="fake", messages=COUNT, max_tokens=6, temperature=0,
                                       extra_body={"continue_final_message": False})
    assert r.choices[0].message.content == fake_greedy(chat_prompt(COUNT), 6)
    # add_generation_prompt false: no assistant turn opened after the user's message
    r = client.chat.completions.create(model="fake", messages=MSGS, max_tokens=6, temperature=0,
                                       extra_body={"add_generation_prompt": False})
    assert r.choices[0].message.content == fake_greedy(chat_prompt(MSGS)[:-len("<|assistant|>")], 6)
    # an empty final assistant message: nothing to continue, the turn is opened
    empty = COUNT[:1] + [{"role": "assistant", "content": ""}]
    r = client.chat.completions.create(model="fake", messages=empty, max_tokens=6, temperature=0)
    assert r.choices[0].message.content == fake_greedy(chat_prompt(COUNT[:1]), 6)


@pytest.mark.parametrize("body,param", [
    ({"messages": COUNT + [{"role": "assistant", "content": "4,"}]}, "messages"),
    ({"messages": COUNT, "continue_final_message": True}, "continue_final_message"),
    ({"messages": COUNT, "continue_final_message": True, "add_generation_prompt": True}, "continue_final_message"),
    ({"messages": COUNT, "continue_final_message": "yes", "add_generation_prompt": False}, "continue_final_message"),
    ({"messages": MSGS, "add_generation_prompt": 1}, "add_generation_prompt"),
    ({"messages": COUNT[:1] + [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}],
      "continue_final_message": True, "add_generation_prompt": False}, "messages"),
])
def test_prefill_refusals_are_400(server, body, param):
    """llama-server's refusals: two assistant messages at the end, both
    continue_final_message and add_generation_prompt (its default) true, and
    continuing a message with tool calls."""
    for path in ("/v1/chat/completions", "/apply-template"):
        r = requests.post(server.base + path, json=dict(body, max_tokens=2), headers=HDR)
        assert r.status_code == 400, (path, r.text)
        err = r.json()["error"]
        assert err["type"] == "invalid_request_error" and err["param"] == param and err["message"], err


def test_content_parts_and_roles(client):
    msgs = [{"role": "system", "content": [{"type": "text", "text": "sys"}]},
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
            {"role": "assistant", "content": "ok"},
            {"role": "tool", "content": "42", "tool_call_id": "call_1"},
            {"role": "user", "content": "again"}]
    r = client.chat.completions.create(model="fake", messages=msgs, max_tokens=5, temperature=0)
    flat = [{"role": m["role"], "content": m["content"] if isinstance(m["content"], str)
             else "".join(p["text"] for p in m["content"])} for m in msgs]
    assert r.choices[0].message.content == fake_greedy(chat_prompt(flat), 5)


def test_stop_sequence(client):
    full = fake_greedy(chat_prompt(MSGS), 30)
    stop = full[8:11]
    cut = full.index(stop)
    r = client.chat.completions.create(model="fake", messages=MSGS, max_tokens=30, temperature=0, stop=[stop, "\x01"])
    assert r.choices[0].finish_reason == "stop"
    assert r.choices[0].message.content == full[:cut]
    chunks = client.chat.completions.create(model="fake", messages=MSGS, max_tokens=30, temperature=0, stop=stop,
                                            stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == full[:cut]


def test_seeded_sampling_reproducible(client):
    kw = dict(model="fake", messages=MSGS, max_tokens=24, temperature=1.0, top_p=0.9)
    a = client.chat.completions.create(seed=7, **kw).choices[0].message.content
    b = client.chat.completions.create(seed=7, **kw).choices[0].message.content
    c = client.chat.completions.create(seed=8, **kw).choices[0].message.content
    assert a == b
    assert a != c


def test_logprobs(client):
    r = client.chat.completions.create(model="fake", messages=MSGS, max_tokens=6, temperature=0, logprobs=True,
                                       top_logprobs=3)
    content = r.choices[0].logprobs.content
    assert len(content) == 6
    assert "".join(c.token for c in content) == r.choices[0].message.content
    for c in content:
        assert len(c.top_logprobs) == 3
        assert c.top_logprobs[0].token == c.token           # greedy picks the top one
        assert c.logprob <= 0 and abs(c.logprob - c.top_logprobs[0].logprob) < 1e-6
        assert c.bytes == list(c.token.encode())


def test_completions_endpoint(client):
    r = client.completions.create(model="fake", prompt="once upon", max_tokens=9, temperature=0)
    assert r.object == "text_completion"
    assert r.choices[0].text == fake_greedy("once upon", 9)
    assert r.choices[0].finish_reason == "length"
    s = client.completions.create(model="fake", prompt="once upon", max_tokens=9, temperature=0, stream=True)
    assert "".join(c.choices[0].text for c in s if c.choices) == r.choices[0].text
    ids = client.completions.create(model="fake", prompt=[BOS] + list(b"once upon"), max_tokens=9, temperature=0)
    assert ids.choices[0].text == r.choices[0].text


def test_concurrent_streams_equal_alone(client):
    prompts = [f"request number {i} " * (1 + i % 3) for i in range(8)]

    def run(p):
        s = client.completions.create(model="fake", prompt=p, max_tokens=16, temperature=0, stream=True)
        return "".join(c.choices[0].text for c in s if c.choices)

    with cf.ThreadPoolExecutor(8) as ex:
        got = list(ex.map(run, prompts))
    assert got == [fake_greedy(p, 16) for p in prompts]


def test_disconnect_frees_slot(server):
    body = {"model": "fake", "messages": MSGS, "max_tokens": 200, "stream": True}
    with requests.post(server.base + "/v1/chat/completions", json=body, headers=HDR, stream=True, timeout=10) as r:
        lines = r.iter_lines()
        got = 0
        for line in lines:
            if line.startswith(b"data: "):
                got += 1
            if got >= 3:
                break
        assert any(s["is_processing"] for s in requests.get(server.base + "/slots", headers=HDR).json())
    t0 = time.time()
    slots = server.wait_idle(timeout=2, headers=HDR)
    assert not any(s["is_processing"] for s in slots), slots
    assert time.time() - t0 < 1.0
    m = requests.get(server.base + "/metrics", headers=HDR).text
    cancelled = [s.value for f in text_string_to_metric_families(m) for s in f.samples
                 if s.name == "ember_requests_cancelled_total"]
    assert cancelled and cancelled[0] >= 1


def test_disconnect_non_stream_frees_slot(server):
    body = json.dumps({"model": "fake", "messages": MSGS, "max_tokens": 200}).encode()
    sock = socket.create_connection(("127.0.0.1", server.port))
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 + f"Authorization: Bearer {KEY}\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
    time.sleep(0.1)
    sock.close()
    slots = server.wait_idle(timeout=2, headers=HDR)
    assert not any(s["is_processing"] for s in slots), slots


def test_over_long_prompt_is_400(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="fake", messages=[{"role": "user", "content": "x" * 400}], max_tokens=4)
    err = e.value.body
    assert e.value.status_code == 400
    assert err["code"] == "context_length_exceeded"
    assert "256" in err["message"] and "context" in err["message"]


def test_over_long_prompt_has_llama_server_shape(server):
    """llama-server's documented error (tools/server/server-task.cpp,
    server_task_result_error::to_json): type exceed_context_size_error with
    the prompt's length and the context beside OpenAI's message/code. The
    prompt's length is the toy tokenizer's: BOS + one token per byte."""
    msgs = [{"role": "user", "content": "x" * 400}]
    for path, body, n_prompt in (
            ("/v1/chat/completions", {"messages": msgs}, 1 + len(chat_prompt(msgs))),
            ("/v1/completions", {"prompt": "y" * 300}, 1 + 300)):
        for stream in (False, True):
            r = requests.post(server.base + path, json=dict(body, max_tokens=4, stream=stream), headers=HDR)
            assert r.status_code == 400, r.text
            err = r.json()["error"]
            assert err["type"] == "exceed_context_size_error", err
            assert err["n_prompt_tokens"] == n_prompt and err["n_ctx"] == 256, err
            assert err["code"] == "context_length_exceeded" and err["message"]


def test_bad_api_key_is_authentication_error(server):
    """llama-server's 401 (tools/server/README.md, "API errors"): type
    authentication_error; OpenAI's code invalid_api_key stays."""
    for h in ({}, {"Authorization": "Bearer nope"}):
        r = requests.post(server.base + "/v1/chat/completions", json={"messages": MSGS}, headers=h)
        assert r.status_code == 401
        err = r.json()["error"]
        assert err["type"] == "authentication_error" and err["code"] == "invalid_api_key" and err["message"]


def test_cors_preflight_is_200(server):
    """llama-server answers OPTIONS (a browser's preflight, sent without
    credentials) with 200 and an empty body."""
    r = requests.options(server.base + "/v1/chat/completions", headers={
        "Origin": "http://app.example", "Access-Control-Request-Method": "POST"})
    assert r.status_code == 200 and r.content == b""


@pytest.mark.parametrize("body,param", [
    ({"messages": "hi"}, "messages"),
    ({"messages": []}, "messages"),
    ({}, "messages"),
    ({"messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role"),
    ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "messages[0].content"),
    ({"messages": MSGS, "max_tokens": "ten"}, "max_tokens"),
    ({"messages": MSGS, "max_tokens": 0}, "max_tokens"),
    ({"messages": MSGS, "temperature": "hot"}, "temperature"),
    ({"messages": MSGS, "temperature": 3}, "temperature"),
    ({"messages": MSGS, "top_p": 1.5}, "top_p"),
    ({"messages": MSGS, "stream": "yes"}, "stream"),
    ({"messages": MSGS, "stop": 3}, "stop"),
    ({"messages": MSGS, "stop": ["a", "b", "c", "d", "e"]}, "stop"),
    ({"messages": MSGS, "seed": 1.5}, "seed"),
    ({"messages": MSGS, "logit_bias": {"abc": 1}}, "logit_bias"),
    ({"messages": MSGS, "logit_bias": {"5": 101}}, "logit_bias"),
    ({"messages": MSGS, "top_logprobs": 3}, "top_logprobs"),
    ({"messages": MSGS, "n": 5}, "n"),           # more choices than the 4 slots (llama-server's n_cmpl limit)
    ({"messages": MSGS, "n": 0}, "n"),
    ({"messages": MSGS, "stream_options": {"include_usage": True}}, "stream_options"),
    ({"messages": MSGS, "chat_template_kwargs": []}, "chat_template_kwargs"),
])
def test_wrong_types_are_400(server, body, param):
    r = requests.post(server.base + "/v1/chat/completions", json=body, headers=HDR)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error" and err["param"] == param and err["message"]


def test_unknown_fields_ignored(server):
    r = requests.post(server.base + "/v1/chat/completions", headers=HDR,
                      json={"messages": MSGS, "max_tokens": 2, "some_future_field": {"x": 1}, "user": "u"})
    assert r.status_code == 200


@pytest.mark.parametrize("raw", [b"{", b"[1,2]", b"", b"{\"messages\": [}", b"\xff\xfe"])
def test_malformed_json_is_400(server, raw):
    r = requests.post(server.base + "/v1/chat/completions", data=raw, headers={**HDR, "Content-Type": "application/json"})
    assert r.status_code == 400
    assert r.json()["error"]["type"] == "invalid_request_error"


def test_api_key(server):
    no_key = openai.OpenAI(base_url=server.base + "/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as e:
        no_key.chat.completions.create(model="fake", messages=MSGS, max_tokens=2)
    assert e.value.status_code == 401 and e.value.body["code"] == "invalid_api_key"
    assert requests.get(server.base + "/v1/models").status_code == 401
    assert requests.get(server.base + "/v1/models", headers={"Authorization": "Bearer " + KEY + "x"}).status_code == 401
    assert requests.get(server.base + "/health").status_code == 200          # public, like llama-server


def test_models_props_slots(client, server):
    models = client.models.list()
    assert [m.id for m in models.data] == ["fake"]
    props = requests.get(server.base + "/props", headers=HDR).json()
    assert props["total_slots"] == 4 and props["default_generation_settings"]["n_ctx"] == 256
    slots = requests.get(server.base + "/slots", headers=HDR).json()
    assert [s["id"] for s in slots] == [0, 1, 2, 3]


def test_tokenize_detokenize_apply_template(server):
    r = requests.post(server.base + "/tokenize", json={"content": "hi!", "add_special": True}, headers=HDR).json()
    assert r["tokens"] == [BOS, ord("h"), ord("i"), ord("!")]
    r = requests.post(server.base + "/detokenize", json={"tokens": [104, 105]}, headers=HDR).json()
    assert r["content"] == "hi"
    r = requests.post(server.base + "/apply-template", json={"messages": MSGS}, headers=HDR).json()
    assert r["prompt"] == chat_prompt(MSGS)
    assert requests.post(server.base + "/detokenize", json={"tokens": [99999]}, headers=HDR).status_code == 400
    assert requests.post(server.base + "/tokenize", json={"content": 5}, headers=HDR).status_code == 400


def test_not_found_and_method(server):
    r = requests.get(server.base + "/v1/nothing", headers=HDR)
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    assert requests.get(server.base + "/v1/chat/completions", headers=HDR).status_code == 405


def test_metrics_prometheus(server, client):
    client.chat.completions.create(model="fake", messages=MSGS, max_tokens=3)
    text = requests.get(server.base + "/metrics", headers=HDR).text
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    assert fams["ember_tokens_predicted"].type == "counter"
    assert fams["ember_tokens_predicted"].samples[0].value >= 3
    assert fams["ember_requests_processing"].type == "gauge"
    assert fams["ember_kv_cache_tokens"].samples[0].value == 4 * 256


def test_queue_beyond_slots(client):
    """12 requests on 4 slots: the extra ones wait and all complete."""
    def run(i):
        return client.completions.create(model="fake", prompt=f"queued {i}", max_tokens=8, temperature=0)

    with cf.ThreadPoolExecutor(12) as ex:
        got = list(ex.map(run, range(12)))
    assert [g.choices[0].text for g in got] == [fake_greedy(f"queued {i}", 8) for i in range(12)]


def test_sigterm_during_stream_shuts_down_cleanly(fake_bin):
    port = free_port()
    s = Server([fake_bin, "--port", str(port), "--delay-ms", "5"], port, startup_timeout=20)
    body = {"messages": MSGS, "max_tokens": 200, "stream": True}
    with requests.post(s.base + "/v1/chat/completions", json=body, stream=True, timeout=10) as r:
        it = r.iter_lines()
        next(it)
        t0 = time.time()
        s.proc.send_signal(signal.SIGTERM)
        rest = b"\n".join(it)        # the stream ends (error event, then [DONE]) instead of hanging
        assert b"[DONE]" in rest
    assert s.proc.wait(10) == 0
    assert time.time() - t0 < 5
    s.stop()
