#!/usr/bin/env python3
"""Render every chat template in tests/data/templates/ with every conversation
below using Python jinja2, set up exactly as transformers' apply_chat_template
sets it up (transformers/utils/chat_template_utils.py: _compile_jinja_template
and render_jinja_template), and write the expected bytes for ember's Jinja
interpreter to match.

Environment (as transformers):
  ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
      extensions=[AssistantTracker, jinja2.ext.loopcontrols])
  filters["tojson"] = json.dumps(x, ensure_ascii=False, indent=indent,
      separators=separators, sort_keys=sort_keys)
  globals["raise_exception"] raises TemplateError(message)
  globals["strftime_now"] = datetime.now().strftime(format)  -- here pinned to
      FIXED_NOW (UTC) so goldens are stable; ember's test passes the same
      instant through ember_jinja_render_opts.fixed_now.
  render(messages=..., tools=... or None, documents=None,
         add_generation_prompt=..., **special_tokens, **chat_template_kwargs)

Writes tests/golden/jinja/conversations.json (the contexts) and
tests/golden/jinja/expected.json (one entry per template x conversation:
output, or the error jinja2 raised).

Run: .venv/bin/python tests/golden/jinja/make_goldens.py
"""
import glob
import json
import os
from datetime import datetime, timezone

import jinja2
import jinja2.ext
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
TEMPLATES = os.path.join(ROOT, "tests", "data", "templates")
FIXED_NOW = 1736942400  # 2025-01-15 12:00:00 UTC


class AssistantTracker(Extension):
    """transformers' {% generation %} ... {% endgeneration %} block: renders
    its body unchanged (the tracking of assistant spans is not needed here)."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def make_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.fromtimestamp(FIXED_NOW, timezone.utc).strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[AssistantTracker, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


WEATHER = {"type": "function", "function": {
    "name": "get_weather",
    "description": "Get the current weather in a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name, e.g. \"Paris\""},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city"]}}}
SEARCH = {"type": "function", "function": {
    "name": "web_search",
    "description": "Search the web; returns the top results.",
    "parameters": {"type": "object", "properties": {
        "query": {"type": "string"},
        "max_results": {"type": "integer", "default": 5, "minimum": 1}},
        "required": ["query"]}}}

SYS = {"role": "system", "content": "You are a helpful assistant. Answer briefly."}


def call(i, name, args):
    return {"id": "call%05d" % i, "type": "function", "function": {"name": name, "arguments": args}}


CONVERSATIONS = {
    "user_only": {"messages": [{"role": "user", "content": "Hello!"}], "add_generation_prompt": True},
    "user_no_gen": {"messages": [{"role": "user", "content": "Hello!"}], "add_generation_prompt": False},
    "system_user": {"messages": [SYS, {"role": "user", "content": "What is 2+2?"}], "add_generation_prompt": True},
    "multi_turn": {"messages": [
        SYS,
        {"role": "user", "content": "Name a color."},
        {"role": "assistant", "content": "Blue."},
        {"role": "user", "content": "Another one?"},
        {"role": "assistant", "content": "Green."},
        {"role": "user", "content": "Thanks. One more."}], "add_generation_prompt": True},
    "ends_with_assistant": {"messages": [
        {"role": "user", "content": "Say hi."},
        {"role": "assistant", "content": "Hi there!"}], "add_generation_prompt": False},
    "unicode_and_whitespace": {"messages": [
        {"role": "system", "content": "  Réponds en français, s'il te plaît.\n"},
        {"role": "user", "content": "  Quelle est la \"capitale\" du Japon ? 日本 🗾\n\n"},
        {"role": "assistant", "content": "Tokyo — 東京.\n"},
        {"role": "user", "content": "Et {{ ceci }} ? {% raw %} \\n tab\there"}], "add_generation_prompt": True},
    "content_parts": {"messages": [
        {"role": "system", "content": [{"type": "text", "text": "Be terse."}]},
        {"role": "user", "content": [{"type": "text", "text": "Describe the sky."}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Blue and wide."}]},
        {"role": "user", "content": [{"type": "text", "text": "At night?"}]}], "add_generation_prompt": True},
    "tools_available": {"messages": [SYS, {"role": "user", "content": "What's the weather in Paris?"}],
                        "tools": [WEATHER, SEARCH], "add_generation_prompt": True},
    "tool_call_and_result": {"messages": [
        {"role": "user", "content": "What's the weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [call(1, "get_weather", {"city": "Paris", "unit": "celsius"})]},
        {"role": "tool", "tool_call_id": "call00001", "name": "get_weather", "content": "{\"temperature\": 21, \"sky\": \"clear\"}"},
        ], "tools": [WEATHER], "add_generation_prompt": True},
    "parallel_tool_calls": {"messages": [
        SYS,
        {"role": "user", "content": "Weather in Oslo and Rome, and search for ferries."},
        {"role": "assistant", "content": "", "tool_calls": [
            call(2, "get_weather", {"city": "Oslo"}),
            call(3, "get_weather", {"city": "Rome", "unit": "celsius"}),
            call(4, "web_search", {"query": "ferries Oslo Rome", "max_results": 3})]},
        {"role": "tool", "tool_call_id": "call00002", "name": "get_weather", "content": "-3 C, snow"},
        {"role": "tool", "tool_call_id": "call00003", "name": "get_weather", "content": "18 C, sunny"},
        {"role": "tool", "tool_call_id": "call00004", "name": "web_search", "content": "No direct ferries."},
        {"role": "assistant", "content": "Oslo is snowy; Rome is sunny. There is no direct ferry."},
        {"role": "user", "content": "Thanks!"}], "tools": [WEATHER, SEARCH], "add_generation_prompt": True},
    "thinking_off": {"messages": [
        {"role": "user", "content": "Is 17 prime?"},
        {"role": "assistant", "content": "Yes."},
        {"role": "user", "content": "And 21?"}], "add_generation_prompt": True,
        "kwargs": {"enable_thinking": False}},
    "thinking_on": {"messages": [
        SYS,
        {"role": "user", "content": "Is 17 prime?"},
        {"role": "assistant", "content": "<think>\nCheck divisors up to 4.\n</think>\n\nYes, 17 is prime.",
         "reasoning_content": "Check divisors up to 4."},
        {"role": "user", "content": "And 21?"}], "add_generation_prompt": True,
        "kwargs": {"enable_thinking": True}},
    "reasoning_field": {"messages": [
        {"role": "user", "content": "2*3?"},
        {"role": "assistant", "content": "6", "reasoning_content": "Two times three is six.", "thinking": "Two times three is six."},
        {"role": "user", "content": "3*4?"}], "add_generation_prompt": True,
        "kwargs": {"reasoning_effort": "low"}},
    "not_alternating": {"messages": [
        {"role": "assistant", "content": "I speak first."},
        {"role": "user", "content": "Odd."},
        {"role": "user", "content": "Twice."}], "add_generation_prompt": True},
}

SPECIAL = {
    "google-gemma": ("<bos>", "<eos>"),
    "meta-llama": ("<|begin_of_text|>", "<|eot_id|>"),
    "deepseek-ai-DeepSeek-R1-Distill-Llama": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    "deepseek": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    "Qwen": ("", "<|im_end|>"),
    "SmolLM2": ("<|im_start|>", "<|im_end|>"),
}


def special_tokens(name):
    for prefix, toks in SPECIAL.items():
        if name.startswith(prefix):
            return toks
    return ("<s>", "</s>")


def context_for(template_name, conv):
    bos, eos = special_tokens(template_name)
    ctx = {"messages": conv["messages"], "tools": conv.get("tools"), "documents": None,
           "add_generation_prompt": conv["add_generation_prompt"], "bos_token": bos, "eos_token": eos}
    ctx.update(conv.get("kwargs", {}))
    return ctx


def main():
    env = make_env()
    cases = []
    names = sorted(os.path.basename(p)[:-len(".jinja")] for p in glob.glob(os.path.join(TEMPLATES, "*.jinja")))
    for name in names:
        with open(os.path.join(TEMPLATES, name + ".jinja"), encoding="utf-8") as f:
            src = f.read()
        try:
            tmpl = env.from_string(src)
        except jinja2.exceptions.TemplateError as e:
            print("skip %s: jinja2 cannot compile it: %s" % (name, e))
            continue
        for conv_name, conv in CONVERSATIONS.items():
            ctx = context_for(name, conv)
            # json round trip: the context is exactly what the C test loads
            ctx = json.loads(json.dumps(ctx))
            case = {"template": name, "conversation": conv_name}
            try:
                case["output"] = tmpl.render(**ctx)
            except Exception as e:  # jinja2 errors and Python TypeErrors alike
                case["error"] = "%s: %s" % (type(e).__name__, e)
            cases.append(case)
        ok = sum(1 for c in cases if c["template"] == name and "output" in c)
        print("%-50s %2d/%d rendered" % (name, ok, len(CONVERSATIONS)))
    contexts = {t: {c: context_for(t, conv) for c, conv in CONVERSATIONS.items()} for t in names}
    with open(os.path.join(HERE, "conversations.json"), "w", encoding="utf-8") as f:
        json.dump({"fixed_now": FIXED_NOW, "conversations": CONVERSATIONS,
                   "special_tokens": {t: list(special_tokens(t)) for t in names}}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    del contexts
    with open(os.path.join(HERE, "expected.json"), "w", encoding="utf-8") as f:
        json.dump({"jinja2_version": jinja2.__version__, "fixed_now": FIXED_NOW, "cases": cases},
                  f, ensure_ascii=False, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
