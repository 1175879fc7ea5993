#!/usr/bin/env python3
"""Thinking defaults: the prompt each chat template below renders, with Python
jinja2 in transformers' environment (tests/golden/jinja/make_goldens.py), for
one user turn with the generation prompt, when enable_thinking is left
undefined (what transformers passes by default), true (what llama-server
passes by default to a template that can think: tools/server/server-context.cpp,
enable_thinking = enable_reasoning != 0 && template supports thinking) and
false (--reasoning off, reasoning_effort "none"). bos_token / eos_token are
SmolLM2-135M-Instruct's, the model the tests serve these templates with.

Writes tests/golden/chat/thinking.json; tests/e2e/test_server_tools.py
(test_thinking_defaults_*) checks `ember serve`'s prompts against it.

Run: .venv/bin/python tests/golden/chat/make_thinking_goldens.py
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "golden", "jinja"))
import make_goldens as mg  # noqa: E402

TEMPLATES = ["deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", "deepseek-ai-DeepSeek-R1-Distill-Llama-8B", "Qwen-QwQ-32B",
             "CohereForAI-c4ai-command-r7b-12-2024-tool_use", "Qwen-Qwen3-0.6B", "Qwen3.5-4B",
             "google-gemma-4-31B-it", "deepseek-ai-DeepSeek-V3.1"]
MESSAGES = [{"role": "user", "content": "hi"}]


def main():
    env = mg.make_env()
    out = {"fixed_now": mg.FIXED_NOW, "messages": MESSAGES, "prompts": {}}
    for name in TEMPLATES:
        with open(os.path.join(ROOT, "tests", "data", "templates", name + ".jinja"), encoding="utf-8") as f:
            tmpl = env.from_string(f.read())
        bos, eos = mg.special_tokens("SmolLM2")   # the tests serve these templates with SmolLM2's tokens
        p = {}
        for key, kw in (("undefined", {}), ("true", {"enable_thinking": True}), ("false", {"enable_thinking": False})):
            p[key] = tmpl.render(messages=MESSAGES, tools=None, documents=None, add_generation_prompt=True,
                                 bos_token=bos, eos_token=eos, **kw)
        out["prompts"][name] = p
        print("%-50s undefined==true: %s  undefined==false: %s" % (name, p["undefined"] == p["true"],
                                                                 p["undefined"] == p["false"]))
    with open(os.path.join(HERE, "thinking.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
