#!/usr/bin/env python3
"""Server throughput: `ember serve` against llama-server on the same machine,
file, per-slot context and --parallel, at 1, 4, 8 and 16 concurrent streams.

Each stream is a streaming chat completion (temperature 0, ignore_eos, a fixed
number of tokens) with its own prompt. Measured per stream: time to first
token (TTFT) and decode rate after the first token; in aggregate: generated
tokens / wall time of the whole wave. One warm-up request per server first.

llama-server divides -c by -np; ember's -c is per slot. Both get the same
per-slot context: ember -c C -np P, llama-server -c C*P -np P.

usage: bench/serve_bench.py --model FILE [--streams 1,4,8,16] [--max-tokens 64]
       [--ctx 1024] [--parallel 16] [--threads N] [--out bench/results/server-cpu.md]
"""
import argparse
import concurrent.futures as cf
import json
import os
import pathlib
import platform
import socket
import statistics
import subprocess
import sys
import time

import requests

ROOT = pathlib.Path(__file__).resolve().parents[1]
LLAMA_SERVER = "/opt/llama/llama_cpp_python-0.3.36/vendor/llama.cpp/build/bin/llama-server"

TOPICS = ["the ocean", "a mountain village", "clockwork birds", "a lighthouse keeper", "winter markets",
          "desert trains", "a library at night", "the first snow", "river boats", "an old radio",
          "a garden robot", "paper lanterns", "a bakery at dawn", "city rooftops", "a lost kite", "tide pools"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(argv, port, log):
    p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    for _ in range(600):
        if p.poll() is not None:
            raise RuntimeError(f"{argv[0]} exited with {p.returncode}")
        try:
            if requests.get(base + "/health", timeout=1).status_code == 200:
                return p, base
        except requests.RequestException:
            pass
        time.sleep(0.2)
    p.kill()
    raise RuntimeError(f"{argv[0]} did not become healthy")


def one_stream(base, i, max_tokens):
    body = {"model": "m", "stream": True, "temperature": 0, "max_tokens": max_tokens, "ignore_eos": True,
            "messages": [{"role": "user", "content": f"Write a short story about {TOPICS[i % len(TOPICS)]}."}]}
    t0 = time.perf_counter()
    t_first = None
    t_last = t0
    n = 0
    with requests.post(base + "/v1/chat/completions", json=body, stream=True, timeout=600) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith(b"data: ") or line == b"data: [DONE]":
                continue
            ev = json.loads(line[6:])
            ch = ev.get("choices") or []
            if ch and ch[0].get("delta", {}).get("content"):
                now = time.perf_counter()
                if t_first is None:
                    t_first = now
                t_last = now
                n += 1   # chunks with content; tokens come from usage below when present
            if ev.get("timings"):
                n_pred = ev["timings"].get("predicted_n")
                if n_pred:
                    n = max(n, n_pred)
    t_first = t_first or t_last
    return {"ttft": t_first - t0, "n": n, "decode_tps": (n - 1) / (t_last - t_first) if t_last > t_first else 0.0,
            "end": t_last}


def wave(base, n_streams, max_tokens):
    t0 = time.perf_counter()
    with cf.ThreadPoolExecutor(n_streams) as ex:
        res = list(ex.map(lambda i: one_stream(base, i, max_tokens), range(n_streams)))
    wall = max(r["end"] for r in res) - t0
    return {"agg_tps": sum(r["n"] for r in res) / wall,
            "stream_tps": statistics.median(r["decode_tps"] for r in res),
            "ttft_ms": statistics.median(r["ttft"] for r in res) * 1e3,
            "ttft_max_ms": max(r["ttft"] for r in res) * 1e3,
            "tokens": sum(r["n"] for r in res)}


def bench_server(name, argv, port, streams, max_tokens, logdir):
    log = open(logdir / f"serve_bench_{name}.log", "w")
    p, base = start(argv, port, log)
    try:
        one_stream(base, 99, 8)   # warm-up
        out = {}
        for n in streams:
            out[n] = wave(base, n, max_tokens)
            print(f"{name:12s} streams={n:2d} agg={out[n]['agg_tps']:7.1f} tok/s  per-stream={out[n]['stream_tps']:6.1f} "
                  f"tok/s  TTFT median={out[n]['ttft_ms']:7.0f} ms", flush=True)
        return out
    finally:
        p.terminate()
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()
        log.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--streams", default="1,4,8,16")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--ctx", type=int, default=1024, help="context per slot")
    ap.add_argument("--parallel", type=int, default=16)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--ember", default=str(ROOT / "build" / "bin" / "ember"))
    ap.add_argument("--llama-server", default=LLAMA_SERVER)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "server-cpu.md"))
    ap.add_argument("--only", choices=["ember", "llama"], default=None)
    ap.add_argument("--llama-extra", default="", help="extra llama-server arguments, e.g. '--poll 0'")
    a = ap.parse_args()
    streams = [int(s) for s in a.streams.split(",")]
    logdir = pathlib.Path("/tmp")
    load_before = os.getloadavg()
    res = {}
    if a.only != "llama":
        port = free_port()
        res["ember"] = bench_server("ember", [a.ember, "serve", "-m", a.model, "-c", str(a.ctx * a.parallel), "-np", str(a.parallel),
                                              "-t", str(a.threads), "--port", str(port)], port, streams, a.max_tokens,
                                    logdir)
    if a.only != "ember":
        port = free_port()
        res["llama"] = bench_server("llama-server", [a.llama_server, "-m", a.model, "-c", str(a.ctx * a.parallel),
                                                     "-np", str(a.parallel), "-t", str(a.threads), "--port", str(port),
                                                     "--host", "127.0.0.1"] + a.llama_extra.split(), port, streams,
                                    a.max_tokens, logdir)
    load_after = os.getloadavg()
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    lines = [f"# Server throughput: ember serve vs llama-server (CPU)\n",
             f"- model: `{pathlib.Path(a.model).name}`; per-slot context {a.ctx}, --parallel {a.parallel}, "
             f"threads {a.threads}; {a.max_tokens} tokens per stream (ignore_eos, temperature 0), streaming chat",
             f"- machine: {cpu}, {os.cpu_count()} cores, {platform.system()} {platform.release()}",
             f"- load average before / after: {load_before[0]:.2f} / {load_after[0]:.2f} "
             f"(the machine is shared with other agents' builds and tests: numbers are noisy)",
             f"- llama-server: `{a.llama_server}` with -c {a.ctx * a.parallel} (it divides -c by -np)"
             f"{' ' + a.llama_extra if a.llama_extra else ''}",
             f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; script: bench/serve_bench.py\n",
             "| streams | ember agg tok/s | llama agg tok/s | ratio | ember per-stream tok/s | llama per-stream tok/s "
             "| ember TTFT ms (median/max) | llama TTFT ms (median/max) |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for n in streams:
        e, l = res.get("ember", {}).get(n), res.get("llama", {}).get(n)
        f = lambda r, k: f"{r[k]:.1f}" if r else "-"
        ratio = f"{e['agg_tps'] / l['agg_tps']:.2f}" if e and l else "-"
        ttft = lambda r: f"{r['ttft_ms']:.0f} / {r['ttft_max_ms']:.0f}" if r else "-"
        lines.append(f"| {n} | {f(e, 'agg_tps')} | {f(l, 'agg_tps')} | {ratio} | {f(e, 'stream_tps')} | "
                     f"{f(l, 'stream_tps')} | {ttft(e)} | {ttft(l)} |")
    text = "\n".join(lines) + "\n"
    print(text)
    out = pathlib.Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "a") as fh:
        fh.write(text + "\n")


if __name__ == "__main__":
    sys.exit(main())
