"""Gemma 4 chat end to end through `ember serve`, on a tiny scripted gemma4
model (tests/golden/gemma4/tiny-gemma4-chat.gguf; converted by llama.cpp's
convert_hf_to_gguf.py with the Gemma 4 chat template in its metadata).

Oracle (tiny-gemma4-chat.chat.json, from tests/golden/make_tiny_models.py):
transformers renders the template (system turn with a tool declaration and
thinking on, an earlier tool call and its tool response inside the model turn,
the generation prompt), tokenizes it, and decodes greedily. The model's weights
make greedy decoding a fixed chain, so the reply is known: a thinking channel
then one tool call, then <eos>.

Checked: the server renders byte-identical prompts, tokenizes them to the same
ids (chat markers as special tokens), and produces the same reply. When the
server parses replies (reasoning_content / tool_calls, src/chat/parse), the
parsed fields are checked; until then the raw text is checked and the parsed
part is reported as xfail.
"""
import json
import pathlib

import pytest
import requests

from serverutil import Server, free_port

ROOT = pathlib.Path(__file__).resolve().parents[2]
MODEL = ROOT / "tests/golden/gemma4/tiny-gemma4-chat.gguf"
FIX = json.loads((ROOT / "tests/golden/gemma4/tiny-gemma4-chat.chat.json").read_text())


@pytest.fixture(scope="module")
def server(ember_bin):
    port = free_port()
    s = Server([ember_bin, "serve", "-m", str(MODEL), "-c", "512", "-np", "1", "-t", "2", "--port", str(port),
                "--alias", "tiny-gemma4"], port)
    yield s
    assert s.stop() == 0


def body(**kw):
    return dict({"messages": FIX["messages"], "tools": FIX["tools"],
                 "chat_template_kwargs": {"enable_thinking": FIX["enable_thinking"]}}, **kw)


def test_template_renders_like_transformers(server):
    r = requests.post(server.base + "/apply-template", json=body(), timeout=30)
    assert r.status_code == 200, r.text
    assert r.json()["prompt"] == FIX["prompt"]


def test_prompt_tokens_like_transformers(server):
    r = requests.post(server.base + "/tokenize", json={"content": FIX["prompt"], "add_special": False,
                                                       "parse_special": True}, timeout=30)
    assert r.status_code == 200, r.text
    assert r.json()["tokens"] == FIX["prompt_ids"]


def test_reply_like_transformers(server):
    r = requests.post(server.base + "/v1/chat/completions", json=body(max_tokens=16, temperature=0), timeout=60)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["usage"]["prompt_tokens"] == len(FIX["prompt_ids"])
    assert out["usage"]["completion_tokens"] == len(FIX["reply_ids"])
    assert out["choices"][0]["finish_reason"] in ("stop", "tool_calls")
    msg = out["choices"][0]["message"]
    if msg.get("tool_calls"):
        exp = FIX["expected"]
        assert msg.get("reasoning_content") == exp["reasoning_content"]
        got = [{"name": c["function"]["name"], "arguments": json.loads(c["function"]["arguments"])}
               for c in msg["tool_calls"]]
        assert got == exp["tool_calls"]
        assert not msg.get("content")
    else:
        assert msg["content"] == FIX["reply_text"]
        pytest.xfail("the server returns the raw reply: src/chat/parse is not wired into it yet")
