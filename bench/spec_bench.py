#!/usr/bin/env python3
"""Speculative decoding on CPU: `ember serve --spec-type ngram` against no
draft, and llama-server `--spec-type ngram-simple` against no draft, in the
same run on the same machine and model file.

Workloads (chat completions, temperature 0, non-streaming):
  grounded  — input-grounded prompts (rewrite code with one change, repeat /
              correct / extract from a given text): n-gram drafts get accepted;
  free      — open-ended writing with ignore_eos: drafts are mostly rejected.
Each at 1 stream (prompts one after another) and 8 parallel streams (all at
once, -np 8). All servers run at once (idle when not measured) and each
measurement runs on every server back to back, so load drift on a shared
machine hits the compared configurations alike. Reported: generated tokens / wall time (aggregate), the decode
rate from the servers' own timings (predicted_n / predicted_ms, single
stream), and draft_n / draft_n_accepted summed from the responses' timings.

usage: bench/spec_bench.py --model FILE [--threads 2] [--max-tokens 128]
       [--out bench/results/spec-cpu.md]
"""
import argparse
import concurrent.futures as cf
import os
import pathlib
import platform
import socket
import subprocess
import time

import requests

ROOT = pathlib.Path(__file__).resolve().parents[1]
LLAMA_SERVER = "/opt/llama/llama_cpp_python-0.3.36/vendor/llama.cpp/build/bin/llama-server"

CODE = [
    "def mean(xs):\n    total = 0\n    for x in xs:\n        total += x\n    return total / len(xs)\n",
    "def clamp(v, lo, hi):\n    if v < lo:\n        return lo\n    if v > hi:\n        return hi\n    return v\n",
    "def count_words(text):\n    counts = {}\n    for word in text.split():\n        counts[word] = counts.get(word, 0) + 1\n"
    "    return counts\n",
    "def fib(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n",
]
PARA = [
    "The committee met on Tuesday to review the budget. The budget for the new library was approved, and the "
    "budget for the park was postponed until the spring. The committee will meet again next Tuesday.",
    "Our store opens at nine in the morning and closes at six in the evening. On Saturdays the store opens at "
    "ten. The store is closed on Sundays and on public holidays.",
    "The train leaves the central station at eight fifteen and arrives in the harbor town at ten forty. "
    "A second train leaves at noon and arrives at two thirty in the afternoon.",
    "Water boils at one hundred degrees Celsius at sea level. At higher altitudes the air pressure is lower, "
    "so water boils at a lower temperature, which is why cooking takes longer in the mountains.",
]
# each grounded prompt carries two of the texts, so answers are long enough
# for decode time (not the prompt) to dominate
GROUNDED = [f"Rewrite this Python code, renaming the first function to {n}. Output only the code.\n\n"
            f"{c}\n{CODE[(i + 1) % 4]}" for i, (n, c) in enumerate(zip(["average", "bound", "word_counts", "fibonacci"], CODE))] + \
           [f"Repeat the following text exactly, word for word:\n\n{p}\n\n{PARA[(i + 1) % 4]}" for i, p in enumerate(PARA)]
FREE = [f"Write a short story about {t}." for t in
        ["a dragon who collects teacups", "a lighthouse keeper", "a robot gardener", "a lost kite",
         "a bakery at dawn", "a river boat captain", "an old radio", "winter markets"]]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(argv, port, log):
    p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    for _ in range(1200):
        if p.poll() is not None:
            raise RuntimeError(f"{argv} exited with {p.returncode}")
        try:
            if requests.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return p
        except requests.RequestException:
            pass
        time.sleep(0.1)
    p.kill()
    raise RuntimeError("server did not start")


def ask(base, prompt, max_tokens, ignore_eos):
    r = requests.post(base + "/v1/chat/completions", timeout=900, json={
        "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens, "temperature": 0,
        "ignore_eos": ignore_eos})
    r.raise_for_status()
    d = r.json()
    t = d.get("timings", {})
    return {"n": d["usage"]["completion_tokens"], "pred_ms": t.get("predicted_ms", 0.0),
            "pred_n": t.get("predicted_n", 0), "draft_n": t.get("draft_n", 0),
            "draft_acc": t.get("draft_n_accepted", 0)}


def measure(base, prompts, max_tokens, ignore_eos, parallel):
    t0 = time.time()
    if parallel:
        with cf.ThreadPoolExecutor(len(prompts)) as ex:
            res = list(ex.map(lambda p: ask(base, p, max_tokens, ignore_eos), prompts))
    else:
        res = [ask(base, p, max_tokens, ignore_eos) for p in prompts]
    wall = time.time() - t0
    n = sum(r["n"] for r in res)
    pred_ms = sum(r["pred_ms"] for r in res)
    pred_n = sum(max(r["pred_n"] - 1, 0) for r in res)
    return {"tok": n, "wall": wall, "tps": n / wall, "decode_tps": pred_n * 1e3 / pred_ms if pred_ms else 0,
            "draft_n": sum(r["draft_n"] for r in res), "draft_acc": sum(r["draft_acc"] for r in res)}


def configs(a):
    m, t = a.model, str(a.threads)
    common = ["-m", m, "-t", t, "-np", "8"]
    yield "ember", "none", [str(ROOT / "build/bin/ember"), "serve", *common, "-c", str(a.ctx)]
    yield "ember", "ngram", [str(ROOT / "build/bin/ember"), "serve", *common, "-c", str(a.ctx),
                             "--spec-type", "ngram", "--spec-draft-n-max", "16"]
    if os.path.exists(LLAMA_SERVER) and not a.no_llama:
        lc = [LLAMA_SERVER, *common, "-c", str(a.ctx * 8), "--no-webui"]
        yield "llama.cpp", "none", lc
        yield "llama.cpp", "ngram-simple", lc + ["--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "3",
                                                 "--spec-ngram-simple-size-m", "16", "--spec-draft-n-max", "16"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=1024)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--no-llama", action="store_true")
    ap.add_argument("--out")
    a = ap.parse_args()
    rows = []
    cfgs = list(configs(a))
    procs, bases = [], []
    logs = []
    try:
        for engine, spec, argv in cfgs:   # all servers up at once; measurements interleave
            port = free_port()
            logs.append(open(f"/tmp/spec-bench-{engine}-{spec}.log", "w"))
            procs.append(start(argv + ["--port", str(port)], port, logs[-1]))
            bases.append(f"http://127.0.0.1:{port}")
            ask(bases[-1], "Say hello.", 8, False)   # warm-up
        for wl, prompts, ign in (("grounded", GROUNDED, False), ("free", FREE, True)):
            for par in (False, True):
                for (engine, spec, _), base in zip(cfgs, bases):   # back to back: same load
                    r = measure(base, prompts, a.max_tokens, ign, par)
                    r.update(engine=engine, spec=spec, workload=wl, streams=8 if par else 1)
                    print(r, flush=True)
                    rows.append(r)
    finally:
        for p in procs:
            p.terminate()
            p.wait(30)
        for f in logs:
            f.close()
    lines = [f"machine: {platform.node()}, {os.cpu_count()} cores, load average at end "
             f"{os.getloadavg()[0]:.1f}; model {pathlib.Path(a.model).name}, -t {a.threads}, "
             f"max_tokens {a.max_tokens}", "",
             "| engine | spec | workload | streams | tokens | wall s | tok/s (aggregate) | decode tok/s (1 stream) "
             "| drafted | accepted | acceptance | speedup vs none |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    base_tps = {(r["engine"], r["workload"], r["streams"]): r["tps"] for r in rows if r["spec"] == "none"}
    for r in rows:
        acc = f"{r['draft_acc'] / r['draft_n']:.2f}" if r["draft_n"] else "-"
        sp = r["tps"] / base_tps[(r["engine"], r["workload"], r["streams"])]
        dec = f"{r['decode_tps']:.1f}" if r["streams"] == 1 else "-"
        lines.append(f"| {r['engine']} | {r['spec']} | {r['workload']} | {r['streams']} | {r['tok']} | "
                     f"{r['wall']:.1f} | {r['tps']:.1f} | {dec} | {r['draft_n']} | {r['draft_acc']} | {acc} | "
                     f"{sp:.2f}x |")
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        with open(a.out, "a") as f:
            f.write(text)


if __name__ == "__main__":
    main()
