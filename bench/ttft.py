#!/usr/bin/env python3
"""bench/ttft.py — time to first token for a long prompt, cache cold, through any
OpenAI-compatible server (ember serve, llama-server), with the standard library only
(the GPU box has no openai package unless it is carried).

Each run sends a different prompt (a run number and a nonce first, so no prefix cache can
serve it) of about --tokens tokens of filler text, streams a chat completion of
--max-tokens tokens (ignore_eos), and takes

  TTFT = time of the first streamed content/reasoning delta - time the request was sent.

The prompt's real token count is the server's own usage.prompt_tokens
(stream_options.include_usage). Prints one JSON line: the median and every run.

  python3 bench/ttft.py --base-url http://127.0.0.1:8080/v1 --tokens 3000 -r 3
"""
import argparse
import json
import random
import statistics
import sys
import time
import urllib.request

WORDS = ("the lighthouse keeper walked along the shore at dawn and counted the boats that came "
         "back from the night with nets full of silver fish while gulls circled over the harbour "
         "and the wind carried salt and the smell of tar from the old wooden pier").split()


def prompt_text(n_tokens, run, seed):
    rnd = random.Random(seed * 1000 + run)
    # ~1.3 tokens per English word for these tokenizers; the usage count is what is reported
    words = [rnd.choice(WORDS) for _ in range(int(n_tokens / 1.3))]
    return f"Run {run} nonce {rnd.getrandbits(64):x}. Summarise this text: " + " ".join(words)


def one(base_url, model, text, max_tokens, timeout):
    body = {"model": model, "messages": [{"role": "user", "content": text}], "max_tokens": max_tokens,
            "temperature": 0, "stream": True, "stream_options": {"include_usage": True}, "ignore_eos": True}
    req = urllib.request.Request(base_url.rstrip("/") + "/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    t_first = None
    usage = None
    with urllib.request.urlopen(req, timeout=timeout) as r:
        for raw in r:
            line = raw.decode("utf-8", "replace").strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            ev = json.loads(line[6:])
            if ev.get("usage"):
                usage = ev["usage"]
            for ch in ev.get("choices") or []:
                d = ch.get("delta") or {}
                if t_first is None and (d.get("content") or d.get("reasoning_content")):
                    t_first = time.perf_counter()
    return {"ttft_s": (t_first - t0) if t_first else None,
            "prompt_tokens": usage.get("prompt_tokens") if usage else None}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base-url", default="http://127.0.0.1:8080/v1")
    ap.add_argument("--model", default="m")
    ap.add_argument("--tokens", type=int, default=3000)
    ap.add_argument("--max-tokens", type=int, default=4)
    ap.add_argument("-r", "--runs", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=1, help="unmeasured runs first (graphs, buffers)")
    ap.add_argument("--timeout", type=float, default=300)
    a = ap.parse_args()
    # calibrate on a short probe: this tokenizer's tokens per filler word, by the server's own count
    probe = 400
    r = one(a.base_url, a.model, prompt_text(probe, 999, a.seed), 1, a.timeout)
    scale = probe / r["prompt_tokens"] if r["prompt_tokens"] else 1.0
    for w in range(a.warmup):
        one(a.base_url, a.model, prompt_text(int(a.tokens * scale), 1000 + w, a.seed), a.max_tokens, a.timeout)
    runs = [one(a.base_url, a.model, prompt_text(int(a.tokens * scale), i, a.seed), a.max_tokens, a.timeout)
            for i in range(a.runs)]
    ok = [r["ttft_s"] for r in runs if r["ttft_s"] is not None]
    print(json.dumps({"tokens_asked": a.tokens, "ttft_s_median": statistics.median(ok) if ok else None,
                      "prompt_tokens": [r["prompt_tokens"] for r in runs], "runs": runs}))
    return 0 if len(ok) == len(runs) else 1


if __name__ == "__main__":
    sys.exit(main())
