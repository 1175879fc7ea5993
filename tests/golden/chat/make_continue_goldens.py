#!/usr/bin/env python3
"""Assistant prefill / continue_final_message: for every chat template in
tests/data/templates/ and the conversations below, the prompt that Hugging
Face transformers' apply_chat_template(continue_final_message=True) gives,
rendered by Python jinja2 in transformers' environment (the one
tests/golden/jinja/make_goldens.py sets up) and cut as transformers cuts it
(transformers/utils/chat_template_utils.py, render_jinja_template, written
out in `transformers_cut` below). vLLM's continue_final_message is that call;
llama-server continues a final assistant message the same way for templates
that keep the message's text verbatim.

The context also holds llama.cpp's date_string / datetime (see DATES), as
ember's does, so the Llama 3.x templates' "Today Date:" line is checked too.

Writes tests/golden/chat/continue.json: one case per template x conversation,
with the prompt, or the error transformers (or the template) raised.
tests/unit/chat/test_chat_continue.c renders the same with
ember_chat_render(.continue_final_message = true) and compares bytes.

Run: .venv/bin/python tests/golden/chat/make_continue_goldens.py
"""
import glob
import json
import os
import sys
from datetime import datetime, timezone

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "golden", "jinja"))
import make_goldens as mg  # noqa: E402  (make_env, special_tokens, FIXED_NOW)

TEMPLATES = os.path.join(ROOT, "tests", "data", "templates")

COUNT = [{"role": "user", "content": "Count from 1 to 10, separated by commas."},
         {"role": "assistant", "content": "1, 2, 3,"}]
CONVERSATIONS = {
    "count_prefill": {"messages": COUNT},
    "system_prefill_trailing_space": {"messages": [
        {"role": "system", "content": "Answer in French."},
        {"role": "user", "content": "What is the capital of Japan?"},
        {"role": "assistant", "content": "La capitale du Japon est "}]},
    "multi_turn_prefill": {"messages": [
        {"role": "user", "content": "Name a color."},
        {"role": "assistant", "content": "Blue."},
        {"role": "user", "content": "Now a fruit, as JSON."},
        {"role": "assistant", "content": "{\"fruit\": \""}]},
    "prefill_thinking_off": {"messages": COUNT, "kwargs": {"enable_thinking": False}},
    "leading_newline_prefill": {"messages": [
        {"role": "user", "content": "Write a haiku."},
        {"role": "assistant", "content": "\nAutumn moonlight\u3000"}]},
}


# llama.cpp's extra render context (common/chat.cpp, common_chat_extra_context):
# today as "%d %b %Y" and "%b %d %Y"; ember passes the same (chat/template.c),
# here at the pinned instant (UTC), so the Llama 3.x templates show the date.
_NOW = datetime.fromtimestamp(mg.FIXED_NOW, timezone.utc)
DATES = {"date_string": _NOW.strftime("%d %b %Y"), "datetime": _NOW.strftime("%b %d %Y")}


def transformers_cut(rendered, final_message):
    """transformers' continue_final_message cut, as in
    chat_template_utils.render_jinja_template."""
    if final_message.strip() not in rendered:
        raise ValueError("continue_final_message is set but the final message does not appear in the chat after "
                         "applying the chat template!")
    loc = rendered.rindex(final_message.strip())
    if rendered[loc: loc + len(final_message.lstrip())] == final_message:
        return rendered[: loc + len(final_message.lstrip())]
    return rendered[: loc + len(final_message.strip())]


def main():
    env = mg.make_env(lenient=True)   # jinja2, plus ember's one named difference (string + undefined/None)
    names = sorted(os.path.basename(p)[:-len(".jinja")] for p in glob.glob(os.path.join(TEMPLATES, "*.jinja")))
    cases = []
    for name in names:
        with open(os.path.join(TEMPLATES, name + ".jinja"), encoding="utf-8") as f:
            src = f.read()
        try:
            tmpl = env.from_string(src)
        except Exception as e:
            print("skip %s: jinja2 cannot compile it: %s" % (name, e))
            continue
        bos, eos = mg.special_tokens(name)
        for conv_name, conv in CONVERSATIONS.items():
            ctx = {"messages": conv["messages"], "tools": None, "documents": None, "add_generation_prompt": False,
                   "bos_token": bos, "eos_token": eos, **DATES}
            ctx.update(conv.get("kwargs", {}))
            ctx = json.loads(json.dumps(ctx))
            case = {"template": name, "conversation": conv_name}
            try:
                case["prompt"] = transformers_cut(tmpl.render(**ctx), conv["messages"][-1]["content"])
            except Exception as e:
                case["error"] = "%s: %s" % (type(e).__name__, e)
            cases.append(case)
    with open(os.path.join(HERE, "continue.json"), "w", encoding="utf-8") as f:
        json.dump({"fixed_now": mg.FIXED_NOW, "conversations": CONVERSATIONS,
                   "special_tokens": {t: list(mg.special_tokens(t)) for t in names}, "cases": cases},
                  f, ensure_ascii=False, indent=1)
        f.write("\n")
    ok = sum("prompt" in c for c in cases)
    print("%d cases, %d prompts, %d errors" % (len(cases), ok, len(cases) - ok))


if __name__ == "__main__":
    main()
