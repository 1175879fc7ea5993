"""Streamed tool-call deltas, as the official OpenAI client assembles them.

build/tools/parse_stream (tests/tools/parse_stream.c) streams each recorded
model output in tests/data/tool_outputs/ through ember's parser and prints
the chunk deltas (ember_chat_event_delta). They are wrapped as
chat.completion.chunk objects and fed to openai's own stream accumulator
(openai.lib.streaming.chat.ChatCompletionStreamState); the message it
assembles must carry exactly the fixture's expected content, reasoning and
tool calls (name, arguments as JSON), for every chunk size tried.
"""
import json
import os
import pathlib
import subprocess

import pytest
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletionChunk

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIXTURES = sorted((ROOT / "tests" / "data" / "tool_outputs").glob("*/*.txt"))


def tool_path():
    cand = []
    if os.environ.get("EMBER_BIN"):
        cand.append(pathlib.Path(os.environ["EMBER_BIN"]).parent.parent / "tools" / "parse_stream")
    cand.append(ROOT / "build" / "tools" / "parse_stream")
    for c in cand:
        if c.exists():
            return str(c)
    pytest.fail("tests/tools/parse_stream not built: run make build")


def chunk(delta, finish=None):
    return ChatCompletionChunk.model_validate({
        "id": "chatcmpl-test", "object": "chat.completion.chunk", "created": 0, "model": "ember",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})


@pytest.mark.parametrize("stream_arguments", [False, True], ids=["whole_calls", "stream_arguments"])
@pytest.mark.parametrize("txt", FIXTURES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_stream_through_openai_accumulator(txt, stream_arguments, tmp_path):
    spec = json.loads(txt.with_suffix(".json").read_text())
    exp = spec["expected"]
    if stream_arguments:
        exp = spec.get("expected_stream_arguments", exp)
    env = dict(os.environ, EMBER_STREAM_ARGUMENTS="1" if stream_arguments else "0")
    args = [tool_path(), spec["tool_format"], spec["reasoning"], "1" if spec["reasoning_open_at_start"] else "0"]
    extra = []
    if "tools" in spec:
        tp = tmp_path / "tools.json"
        tp.write_text(json.dumps(spec["tools"]))
        extra = [str(tp)]
    for size in (1, 2, 3, 7, 16, 1 << 20):
        out = subprocess.run(args + [str(size), str(txt)] + extra, capture_output=True, text=True, check=True,
                             env=env).stdout
        lines = [json.loads(l) for l in out.splitlines()]
        final = lines[-1]["final"]
        deltas = lines[:-1]
        state = ChatCompletionStreamState()
        state.handle_chunk(chunk({"role": "assistant"}))
        for d in deltas:
            state.handle_chunk(chunk(d))
        state.handle_chunk(chunk({}, "tool_calls" if exp["tool_calls"] else "stop"))
        msg = state.get_final_completion().choices[0].message
        assert (msg.content or "") == exp["content"], size
        assert (getattr(msg, "reasoning_content", None) or "") == exp["reasoning_content"], size
        calls = msg.tool_calls or []
        assert len(calls) == len(exp["tool_calls"]), size
        for got, want, fin in zip(calls, exp["tool_calls"], final.get("tool_calls", [])):
            assert got.type == "function"
            assert got.id == fin["id"] and got.id.startswith("call_") and len(got.id) == 29
            assert got.function.name == want["name"]
            assert json.loads(got.function.arguments) == want["arguments"]
            assert got.function.arguments == fin["function"]["arguments"]
        # the parser's own message for the same output agrees
        assert (final["content"] or "") == exp["content"]
        if stream_arguments and size == 1:
            n_args = sum(1 for d in deltas for c in d.get("tool_calls", []) if c["function"].get("arguments"))
            assert n_args >= len(exp["tool_calls"])
