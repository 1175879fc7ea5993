#!/usr/bin/env python3
"""bench/serve.py — the reference measurements against any OpenAI-compatible server.

Measures what users of small resident models measure (issue "Benchmark and
evaluation suite", item 1):
  * single-request generation speed with the output forced to N tokens
    (default 256; `ignore_eos` sent as an extra field, which llama-server and
    ember honour), and time to first token (TTFT); median of R runs (default 3);
  * P parallel requests (default 8; threads of this process, --procs: one
    process each, see parallel()): aggregate tok/s (all completion tokens over the
    wall time from the first request sent to the last stream ended) and
    per-stream tok/s (mean over streams of each stream's decode rate);
  * draft acceptance where the server reports it (`timings.draft_n`,
    `timings.draft_n_accepted` in the final chunk, as llama-server does);
  * the server process's resident memory (VmRSS/VmHWM from /proc, when a PID
    is given) and GPU memory (nvidia-smi, when present).

Definitions (seconds, tokens):
  TTFT        = time of the first streamed content/reasoning delta - time sent
  decode tok/s = (completion_tokens - 1) / (t_last_delta - t_first_delta)
  e2e tok/s    = completion_tokens / (t_last_delta - t_sent)
completion_tokens is the server's own usage count (stream_options.include_usage);
if the server sends no usage, streamed deltas are counted instead and the
report says so.

Prints a Markdown table in the article's shape (configuration, draft, single
tok/s, TTFT, N-parallel aggregate, per stream) and writes JSON with every run.
Any failed request makes the exit status 1 and is listed, never hidden.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time

import openai

DEFAULT_PROMPT = ("Write a long, detailed story about a lighthouse keeper who finds a message "
                  "in a bottle. Keep going until you are told to stop.")


def one_stream(client, model, prompt, max_tokens, ignore_eos, extra=None):
    """Run one streaming chat completion; return a dict of timings and counts."""
    body = {"ignore_eos": True} if ignore_eos else {}
    body.update(extra or {})
    t_sent = time.perf_counter()
    t_first = t_last = None
    n_deltas = 0
    usage = None
    timings = None
    try:
        stream = client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": prompt}],
            max_tokens=max_tokens, temperature=0, stream=True,
            stream_options={"include_usage": True}, extra_body=body)
        for chunk in stream:
            now = time.perf_counter()
            if chunk.usage is not None:
                usage = chunk.usage
            t = getattr(chunk, "timings", None) or (chunk.model_extra or {}).get("timings")
            if t:
                timings = t
            for ch in chunk.choices or []:
                d = ch.delta
                text = (d.content or "") if d else ""
                reasoning = (getattr(d, "reasoning_content", None) or
                             ((d.model_extra or {}).get("reasoning_content") if d else None) or "")
                if text or reasoning:
                    n_deltas += 1
                    if t_first is None:
                        t_first = now
                    t_last = now
    except Exception as e:  # reported, never hidden
        return {"ok": False, "error": f"{type(e).__name__}: {e}"}
    t_end = time.perf_counter()   # the stream's end (t_last is the last text delta's time)
    if t_first is None:
        return {"ok": False, "error": "no content was streamed"}
    n_tok = usage.completion_tokens if usage is not None else n_deltas
    dec = (n_tok - 1) / (t_last - t_first) if n_tok > 1 and t_last > t_first else None
    r = {"ok": True, "t_sent": t_sent, "t_first": t_first, "t_last": t_last, "t_end": t_end,
         "ttft_s": t_first - t_sent, "completion_tokens": n_tok,
         "counted_from": "usage" if usage is not None else "deltas",
         "decode_tok_s": dec, "e2e_tok_s": n_tok / (t_last - t_sent)}
    if isinstance(timings, dict):
        if "draft_n" in timings:
            r["draft_n"] = timings.get("draft_n", 0)
            r["draft_n_accepted"] = timings.get("draft_n_accepted", 0)
        # the server's own decode time: predicted_ms spans the steps after the first token, so a
        # step emits (predicted_n - 1) / steps tokens, steps = predicted_n - 1 - draft_n_accepted
        r["timings"] = {k: timings[k] for k in ("predicted_n", "predicted_ms", "prompt_n", "prompt_ms") if k in timings}
    return r


def _proc_stream(args):
    """One stream in its own process (parallel(..., procs=True)): its own
    client; all streams start when the shared barrier opens. perf_counter is
    CLOCK_MONOTONIC on Linux, one clock for every process."""
    base_url, api_key, timeout, model, prompt, max_tokens, ignore_eos = args
    client = openai.OpenAI(base_url=base_url, api_key=api_key, timeout=timeout, max_retries=0)
    _BARRIER.wait()
    return one_stream(client, model, prompt, max_tokens, ignore_eos)


_BARRIER = None


def _init_proc(barrier):
    global _BARRIER
    _BARRIER = barrier


def parallel(client, model, prompt, max_tokens, n, ignore_eos, procs=False):
    """n concurrent streams; aggregate and per-stream rates. procs: one process
    per stream, so that parsing the streams (the openai client builds an object
    per chunk, in one interpreter under one lock with threads) does not bound
    what is measured (on a loaded 2-core box the openai client read about 6k
    chunks/s in all, threads or processes alike, where a plain http.client
    reader got 17-22k from the same server: there the client's CPU is the
    bound, so compare --procs against threads on the machine measured)."""
    if procs:
        import multiprocessing as mp
        ctx = mp.get_context("fork")
        barrier = ctx.Barrier(n)
        job = (str(client.base_url), client.api_key, client.timeout, model, prompt, max_tokens, ignore_eos)
        with ctx.Pool(n, initializer=_init_proc, initargs=(barrier,)) as pool:
            results = pool.map(_proc_stream, [job] * n)
        return summarize_parallel(results)
    results = [None] * n
    barrier = threading.Barrier(n)

    def work(i):
        barrier.wait()
        results[i] = one_stream(client, model, prompt, max_tokens, ignore_eos)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return summarize_parallel(results)


def summarize_parallel(results):
    """Aggregate = total tokens / (last end - first send); per stream = mean decode rate."""
    ok = [r for r in results if r["ok"]]
    out = {"streams": results, "n": len(results), "n_ok": len(ok),
           "errors": [r["error"] for r in results if not r["ok"]]}
    if ok:
        wall = max(r["t_last"] for r in ok) - min(r["t_sent"] for r in ok)
        out["aggregate_tok_s"] = sum(r["completion_tokens"] for r in ok) / wall
        # the same to the streams' ends: tokens that stream no text (random-weight files) move no t_last
        out["aggregate_end_tok_s"] = sum(r["completion_tokens"] for r in ok) / (
            max(r.get("t_end", r["t_last"]) for r in ok) - min(r["t_sent"] for r in ok))
        rates = [r["decode_tok_s"] for r in ok if r["decode_tok_s"]]
        out["per_stream_tok_s"] = statistics.fmean(rates) if rates else None
        out["ttft_s_median"] = statistics.median(r["ttft_s"] for r in ok)
    return out


def acceptance(runs):
    n = sum(r.get("draft_n", 0) for r in runs if r.get("ok"))
    a = sum(r.get("draft_n_accepted", 0) for r in runs if r.get("ok"))
    if not any("draft_n" in r for r in runs if r.get("ok")):
        return None
    return {"draft_n": n, "draft_n_accepted": a, "rate": (a / n) if n else None}


def memory(pid):
    """Resident memory of process `pid` in MiB (current and peak), and GPU memory if nvidia-smi exists."""
    m = {}
    if pid:
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith(("VmRSS:", "VmHWM:")):
                        k, v = line.split(":")
                        m[k.strip()] = int(v.split()[0]) / 1024.0
        except OSError as e:
            m["error"] = str(e)
        try:
            q = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory",
                                "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=10)
            for line in q.stdout.splitlines():
                p, used = [x.strip() for x in line.split(",")]
                if int(p) == int(pid):
                    m["gpu_MiB"] = float(used)
        except (OSError, subprocess.SubprocessError, ValueError):
            pass
    return m


def fmt(x, spec=".1f"):
    return "n/a" if x is None else format(x, spec)


def markdown(rep):
    s = rep["single"]
    p = rep["parallel"]
    acc = rep.get("acceptance")
    mem = rep.get("memory", {})
    draft = rep["draft"] or "none"
    if acc and acc["rate"] is not None:
        draft += f" ({100 * acc['rate']:.0f}% accepted)"
    lines = [
        f"| configuration | draft | single tok/s | TTFT (s) | {p['n']}-parallel aggregate tok/s "
        "| per stream tok/s | RSS peak (MiB) |",
        "|---|---|---|---|---|---|---|",
        f"| {rep['config']} | {draft} | {fmt(s.get('decode_tok_s_median'))} "
        f"| {fmt(s.get('ttft_s_median'), '.3f')} | {fmt(p.get('aggregate_tok_s'))} "
        f"| {fmt(p.get('per_stream_tok_s'))} | {fmt(mem.get('VmHWM'), '.0f')} |",
    ]
    if rep["errors"]:
        lines.append("")
        lines.append(f"**{len(rep['errors'])} request(s) failed:**")
        lines += [f"- {e}" for e in rep["errors"]]
    return "\n".join(lines)


def run(args):
    client = openai.OpenAI(base_url=args.base_url, api_key=args.api_key or "none",
                           timeout=args.timeout, max_retries=0)
    model = args.model
    if not model:
        try:
            model = client.models.list().data[0].id
        except Exception as e:
            print(f"bench/serve: cannot list models at {args.base_url}: {e}", file=sys.stderr)
            return None
    singles = [one_stream(client, model, args.prompt, args.max_tokens, not args.no_ignore_eos)
               for _ in range(args.runs)]
    ok = [r for r in singles if r["ok"]]
    single = {"runs": singles}
    if ok:
        dec = [r["decode_tok_s"] for r in ok if r["decode_tok_s"]]
        single["decode_tok_s_median"] = statistics.median(dec) if dec else None
        single["e2e_tok_s_median"] = statistics.median(r["e2e_tok_s"] for r in ok)
        single["ttft_s_median"] = statistics.median(r["ttft_s"] for r in ok)
        single["completion_tokens"] = [r["completion_tokens"] for r in ok]
    par = parallel(client, model, args.prompt, args.max_tokens, args.parallel, not args.no_ignore_eos,
                   procs=args.procs)
    errors = [r["error"] for r in singles if not r["ok"]] + par["errors"]
    short = [r["completion_tokens"] for r in ok + [x for x in par["streams"] if x["ok"]]
             if r["completion_tokens"] < args.max_tokens]
    if short and not args.no_ignore_eos:
        errors.append(f"{len(short)} response(s) ended before {args.max_tokens} tokens "
                      f"(got {sorted(set(short))}): the server may not honour ignore_eos")
    rep = {"base_url": args.base_url, "model": model, "config": args.config or model,
           "draft": args.draft, "max_tokens": args.max_tokens, "runs": args.runs,
           "single": single, "parallel": par,
           "acceptance": acceptance(singles + par["streams"]),
           "memory": memory(args.server_pid), "errors": errors,
           "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    return rep


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base-url", default=os.environ.get("OPENAI_BASE_URL", "http://127.0.0.1:8080/v1"))
    ap.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY"))
    ap.add_argument("--model", default=None, help="model id (default: the first of /v1/models)")
    ap.add_argument("--config", default=None, help="label for the configuration column")
    ap.add_argument("--draft", default=None, help="label for the draft column (e.g. ngram)")
    ap.add_argument("--prompt", default=DEFAULT_PROMPT)
    ap.add_argument("-n", "--max-tokens", type=int, default=256)
    ap.add_argument("-r", "--runs", type=int, default=3)
    ap.add_argument("-P", "--parallel", type=int, default=8)
    ap.add_argument("--server-pid", type=int, default=None, help="PID of the server, for resident memory")
    ap.add_argument("--no-ignore-eos", action="store_true", help="do not send ignore_eos")
    ap.add_argument("--procs", action="store_true",
                    help="one client process per parallel stream instead of threads of this one (to check that the "
                         "client does not bound the aggregate)")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--json", default=None, help="write the full report here")
    args = ap.parse_args(argv)
    rep = run(args)
    if rep is None:
        return 2
    print(markdown(rep))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rep, f, indent=2)
    return 1 if rep["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
