"""eval/thinking.py — thinking ON vs OFF on the same tasks, and a reasoning-budget run.

Thinking is switched per request with chat_template_kwargs.enable_thinking.
For each task and mode the probe records output tokens and seconds; it passes
when the answer is right AND the mode was honoured (ON: reasoning_content is
not empty; OFF: it is empty). The budget run asks for thinking with a small
per-request `reasoning_budget` and passes when the reasoning stayed within
the budget (usage.completion_tokens_details.reasoning_tokens when reported,
else the whole completion) and an answer followed.
"""
from common import reasoning, text, tokens

TASKS = [
    ("17 x 23", "What is 17 * 23? Give the final number.", lambda t: "391" in t),
    ("apples", "I have 3 apples, eat one, then buy 5 more. How many apples do I have? Give the number.",
     lambda t: "7" in t),
    ("9.11 vs 9.9", "Which number is larger, 9.11 or 9.9? Answer with the number.",
     lambda t: "9.9" in t.replace("9.11", "")),
]


def run(s, budget=64):
    for label, prompt, check in TASKS:
        for on in (True, False):
            def probe(tr, prompt=prompt, check=check, on=on):
                r = s.chat([{"role": "user", "content": prompt}], tr,
                           extra_body={"chat_template_kwargs": {"enable_thinking": on}})
                rs = reasoning(r)
                honoured = bool(rs.strip()) if on else not rs.strip()
                right = check(text(r))
                return honoured and right, tokens(r), f"answer ok={right}, mode honoured={honoured}"
            s.probe("thinking", f"{label} thinking={'on' if on else 'off'}", probe)

    def budget_run(tr):
        r = s.chat([{"role": "user", "content": TASKS[0][1]}], tr,
                   extra_body={"chat_template_kwargs": {"enable_thinking": True}, "reasoning_budget": budget})
        details = getattr(r.usage, "completion_tokens_details", None)
        used = getattr(details, "reasoning_tokens", None) if details else None
        if used is None:
            used = tokens(r)
        ok = used <= budget + 8 and TASKS[0][2](text(r))  # +8: the closing tag and a newline or two
        return ok, tokens(r), f"reasoning tokens {used} (budget {budget})"
    s.probe("thinking", f"reasoning budget {budget}", budget_run)
