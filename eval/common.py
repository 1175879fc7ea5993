"""eval/common.py — what every probe suite shares: the client, a probe record, reports.

A probe sends one or more requests to an OpenAI-compatible server and decides
pass/fail by a rule written in its own code (`check`). A probe whose request
fails, or whose check raises, fails: nothing passes by default.

Report: a Markdown table (suite, probe, pass, seconds, output tokens, note)
and JSON with every request and response kept for inspection.
"""
import dataclasses
import json
import time
from typing import Any, Callable, Optional

import openai


@dataclasses.dataclass
class Result:
    suite: str
    name: str
    passed: bool
    seconds: float
    output_tokens: int
    note: str = ""
    transcript: list = dataclasses.field(default_factory=list)


class Session:
    """Client plus bookkeeping for one run of one or more suites."""

    def __init__(self, base_url: str, api_key: Optional[str] = None, model: Optional[str] = None,
                 timeout: float = 600, max_tokens: int = 1024):
        self.client = openai.OpenAI(base_url=base_url, api_key=api_key or "none",
                                    timeout=timeout, max_retries=0)
        self.base_url = base_url
        self.model = model or self.client.models.list().data[0].id
        self.max_tokens = max_tokens
        self.results: list[Result] = []

    def chat(self, messages, transcript: list, **kw):
        """One non-stream chat completion; appends request and response to transcript."""
        kw.setdefault("max_tokens", self.max_tokens)
        kw.setdefault("temperature", 0)
        extra = kw.pop("extra_body", None)
        req = {"messages": messages, **kw}
        transcript.append({"request": req})
        r = self.client.chat.completions.create(model=self.model, messages=messages,
                                                extra_body=extra, **kw)
        transcript.append({"response": r.model_dump()})
        return r

    def probe(self, suite: str, name: str, fn: Callable[[list], tuple]):
        """Run fn(transcript) -> (passed: bool, output_tokens: int, note: str); any exception fails."""
        transcript: list = []
        t0 = time.perf_counter()
        try:
            passed, ntok, note = fn(transcript)
        except Exception as e:  # a failed request or a broken check is a failure, with its reason
            passed, ntok, note = False, 0, f"error: {type(e).__name__}: {e}"[:300]
        res = Result(suite, name, bool(passed), time.perf_counter() - t0, int(ntok), note, transcript)
        self.results.append(res)
        return res


def tokens(resp) -> int:
    u = getattr(resp, "usage", None)
    return u.completion_tokens if u is not None and u.completion_tokens is not None else 0


def text(resp) -> str:
    return resp.choices[0].message.content or ""


def reasoning(resp) -> str:
    m = resp.choices[0].message
    return getattr(m, "reasoning_content", None) or (m.model_extra or {}).get("reasoning_content") or ""


def tool_calls(resp) -> list:
    """[(name, arguments dict)]; arguments that are not valid JSON raise (and so fail the probe)."""
    calls = resp.choices[0].message.tool_calls or []
    return [(c.function.name, json.loads(c.function.arguments or "{}")) for c in calls]


def markdown(results: list[Result], title: str = "") -> str:
    lines = []
    if title:
        lines += [f"## {title}", ""]
    lines += ["| suite | probe | result | seconds | output tokens | note |", "|---|---|---|---|---|---|"]
    for r in results:
        note = r.note.replace("|", "\\|").replace("\n", " ")[:120]
        lines.append(f"| {r.suite} | {r.name} | {'PASS' if r.passed else 'FAIL'} | {r.seconds:.2f} "
                     f"| {r.output_tokens} | {note} |")
    n = sum(r.passed for r in results)
    lines += ["", f"{n} of {len(results)} probes passed."]
    return "\n".join(lines)


def to_json(results: list[Result], **meta: Any) -> dict:
    return {**meta, "results": [dataclasses.asdict(r) for r in results],
            "passed": sum(r.passed for r in results), "total": len(results)}
