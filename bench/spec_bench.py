#!/usr/bin/env python3
"""Speculative decoding on CPU: `ember serve --spec-type ngram` against no
draft, and llama-server `--spec-type ngram-simple` against no draft, in the
same run on the same machine and model file.

Workloads (chat completions, or plain completions with --mode completion for
pretrained models; temperature 0, non-streaming):
  grounded  — input-grounded prompts (rewrite code with one change, repeat /
              correct / extract from a given text): n-gram drafts get accepted;
  free      — open-ended writing with ignore_eos: drafts are mostly rejected.
Each at 1 stream (prompts one after another) and 8 parallel streams (all at
once, -np 8). All servers run at once (idle when not measured); single-stream runs
go prompt by prompt, each prompt on every server in turn, and parallel runs
go server after server, so load drift on a shared machine hits the compared
configurations alike. Reported: generated tokens / wall time (aggregate), the decode
rate from the servers' own timings (predicted_n / predicted_ms, single
stream), and draft_n / draft_n_accepted summed from the responses' timings.

With --cpu-time each measured request is preceded by the same prompt with
max_tokens 1 (its prefill then comes from the server's prefix cache), and
the server process's CPU time (utime + stime, /proc) over the measured
request(s) gives "decode tok / CPU s": the work per token, which a loaded
shared machine does not stretch (use -t 1: idle pool threads then cost
nothing).

usage: bench/spec_bench.py --model FILE [--threads 2] [--max-tokens 128]
       [--specs ngram,layerskip:15] [--mode chat|completion] [--parallel both|1|8]
       [--no-llama] [--cpu-time] [--rounds 1] [--out bench/results/spec-cpu.md]
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

# Input-grounded tasks of realistic size (a 20-line function, a 100-word
# text): a rewrite with one change copies long spans, which is what prompt
# lookup drafts. (The first record used 5-line functions and 2-sentence
# texts; SmolLM2 paraphrased those, capping any n-gram draft policy near
# 1.6x even with perfect lengths, see bench/results/spec-cpu.md.)
CODE = [
    """def parse_config(path):
    settings = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            if "=" not in line:
                raise ValueError("bad line: " + line)
            key, value = line.split("=", 1)
            key = key.strip()
            value = value.strip()
            if value.lower() in ("true", "yes", "on"):
                value = True
            elif value.lower() in ("false", "no", "off"):
                value = False
            elif value.isdigit():
                value = int(value)
            settings[key] = value
    return settings
""",
    """def merge_intervals(intervals):
    if not intervals:
        return []
    intervals = sorted(intervals, key=lambda pair: pair[0])
    merged = [list(intervals[0])]
    for start, end in intervals[1:]:
        last = merged[-1]
        if start <= last[1]:
            last[1] = max(last[1], end)
        else:
            merged.append([start, end])
    return [tuple(pair) for pair in merged]
""",
]
TEXT = [
    "The library opens at nine in the morning on weekdays and at ten on Saturdays. It is closed on Sundays. "
    "Members may borrow up to six books at a time for three weeks. Books can be renewed twice, online or at the "
    "desk, unless another member has reserved them. Late returns cost twenty cents a day per book. The reading "
    "room on the second floor is reserved for quiet study, and the children's corner on the ground floor hosts a "
    "story hour every Wednesday afternoon at four.",
    "Our new coffee machine is on the third floor, next to the kitchen. To make a coffee, place a cup under the "
    "spout, choose the size with the left button and the strength with the right button, then press start. The "
    "water tank must be refilled when the blue light blinks, and the grounds container must be emptied every "
    "evening. Please do not use the machine for tea, because the hot water outlet is broken. If the machine shows "
    "an error, call the front desk at extension two hundred and four.",
]
# chat mode (instruction-tuned models)
GROUNDED = [
    "Rewrite this Python function, renaming the variable `settings` to `config`. Output only the code.\n\n" + CODE[0],
    "Rewrite this Python function so that it raises KeyError instead of ValueError. Output only the code.\n\n" + CODE[0],
    "Rewrite this Python function, renaming the variable `merged` to `result`. Output only the code.\n\n" + CODE[1],
    "Add a docstring to this Python function and output the whole function.\n\n" + CODE[1],
    "Correct the spelling mistake in this text and output the whole corrected text:\n\n" +
    TEXT[0].replace("reserved for quiet", "reserved for quiat"),
    "Copy the following text, replacing every 'books' with 'items':\n\n" + TEXT[0],
    "Correct the spelling mistake in this text and output the whole corrected text:\n\n" +
    TEXT[1].replace("refilled", "refiled"),
    "Extract the instructions for making a coffee from this text, word for word:\n\n" + TEXT[1],
]
FREE = [f"Write a short story about {t}." for t in
        ["a dragon who collects teacups", "a lighthouse keeper", "a robot gardener", "a lost kite",
         "a bakery at dawn", "a river boat captain", "an old radio", "winter markets"]]
# completion mode (pretrained models such as the Gemma 3 270M GGUF, which has
# no chat template): the same tasks as plain-text continuations
GROUNDED_COMPLETION = [
    "Original code:\n\n" + CODE[0] + "\nThe same code with the variable `settings` renamed to `config`:\n\n",
    "Original code:\n\n" + CODE[0] + "\nThe same code, raising KeyError instead of ValueError:\n\n",
    "Original code:\n\n" + CODE[1] + "\nThe same code with the variable `merged` renamed to `result`:\n\n",
    "Original code:\n\n" + CODE[1] + "\nThe same code with a docstring added:\n\n",
    "Text with a spelling mistake:\n\n" + TEXT[0].replace("reserved for quiet", "reserved for quiat") +
    "\n\nThe same text with the mistake corrected:\n\n",
    "Text:\n\n" + TEXT[0] + "\n\nThe same text with every 'books' replaced by 'items':\n\n",
    "Text with a spelling mistake:\n\n" + TEXT[1].replace("refilled", "refiled") +
    "\n\nThe same text with the mistake corrected:\n\n",
    "Text:\n\n" + TEXT[1] + "\n\nThe instructions for making a coffee, copied word for word from the text:\n\n",
]
FREE_COMPLETION = [f"Here is a short story about {t}.\n\n" for t in
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


MODE = "chat"


def ask(base, prompt, max_tokens, ignore_eos):
    body = {"max_tokens": max_tokens, "temperature": 0, "ignore_eos": ignore_eos}
    if MODE == "chat":
        r = requests.post(base + "/v1/chat/completions", timeout=900,
                          json={"messages": [{"role": "user", "content": prompt}], **body})
    else:
        r = requests.post(base + "/v1/completions", timeout=900, json={"prompt": prompt, **body})
    r.raise_for_status()
    d = r.json()
    t = d.get("timings", {})
    return {"n": d["usage"]["completion_tokens"], "pred_ms": t.get("predicted_ms", 0.0),
            "pred_n": t.get("predicted_n", 0), "draft_n": t.get("draft_n", 0),
            "draft_acc": t.get("draft_n_accepted", 0)}


CPU_TIME = False


def proc_cpu_s(pid):
    """utime + stime of a process (all its threads), seconds"""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(base, prompts, max_tokens, ignore_eos, parallel, pid=None):
    cpu0 = 0.0
    if CPU_TIME and pid:
        for p in prompts:   # prefill now, so the measured requests find it cached
            ask(base, p, 1, ignore_eos)
        cpu0 = proc_cpu_s(pid)
    t0 = time.time()
    if parallel:
        with cf.ThreadPoolExecutor(len(prompts)) as ex:
            res = list(ex.map(lambda p: ask(base, p, max_tokens, ignore_eos), prompts))
    else:
        res = [ask(base, p, max_tokens, ignore_eos) for p in prompts]
    wall = time.time() - t0
    cpu = proc_cpu_s(pid) - cpu0 if CPU_TIME and pid else 0.0
    n = sum(r["n"] for r in res)
    pred_ms = sum(r["pred_ms"] for r in res)
    pred_n = sum(max(r["pred_n"] - 1, 0) for r in res)
    return {"tok": n, "wall": wall, "tps": n / wall, "decode_tps": pred_n * 1e3 / pred_ms if pred_ms else 0,
            "pred_ms": pred_ms, "pred_n": pred_n, "cpu": cpu,
            "draft_n": sum(r["draft_n"] for r in res), "draft_acc": sum(r["draft_acc"] for r in res)}


def configs(a):
    m, t = a.model, str(a.threads)
    common = ["-m", m, "-t", t, "-np", "8"]
    yield "ember", "none", [str(ROOT / "build/bin/ember"), "serve", *common, "-c", str(a.ctx * 8)]
    for sp in a.specs.split(","):
        name, _, arg = sp.partition(":")
        extra = ["--spec-type", name, "--spec-draft-n-max", "16"]
        if name == "layerskip" and arg:
            extra += ["--spec-layers", arg]
        if name == "draft":   # draft:FILE, a draft model with the target's vocabulary
            extra += ["-md", arg]
        if a.p_min is not None:
            extra += ["--spec-draft-p-min", str(a.p_min)]
        extra += a.spec_extra.split()
        label = f"draft:{os.path.basename(arg)}" if name == "draft" else sp
        yield "ember", label, [str(ROOT / "build/bin/ember"), "serve", *common, "-c", str(a.ctx * 8), *extra]
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
    ap.add_argument("--specs", default="ngram", help="comma list: ngram, layerskip:K, draft:FILE")
    ap.add_argument("--p-min", type=float, help="--spec-draft-p-min for the ember configurations")
    ap.add_argument("--spec-extra", default="", help="more ember flags for the speculative configurations, e.g. '--spec-adaptive off'")
    ap.add_argument("--mode", choices=["chat", "completion"], default="chat")
    ap.add_argument("--parallel", choices=["both", "1", "8"], default="both")
    ap.add_argument("--workloads", default="grounded,free")
    ap.add_argument("--rounds", type=int, default=1, help="8-stream runs: repeat, alternating the servers' order")
    ap.add_argument("--cpu-time", action="store_true", help="prefill first, report decode tokens per server CPU second")
    ap.add_argument("--out")
    a = ap.parse_args()
    global MODE, CPU_TIME
    MODE = a.mode
    CPU_TIME = a.cpu_time
    grounded, free = (GROUNDED, FREE) if a.mode == "chat" else (GROUNDED_COMPLETION, FREE_COMPLETION)
    pars = {"both": (False, True), "1": (False,), "8": (True,)}[a.parallel]
    rows = []
    cfgs = list(configs(a))
    procs, bases = [], []
    logs = []
    try:
        for engine, spec, argv in cfgs:   # all servers up at once; measurements interleave
            port = free_port()
            logs.append(open(f"/tmp/spec-bench-{engine}-{spec.replace('/', '_')}.log", "w"))
            procs.append(start(argv + ["--port", str(port)], port, logs[-1]))
            bases.append(f"http://127.0.0.1:{port}")
            ask(bases[-1], "Say hello.", 8, False)   # warm-up
        for wl, prompts, ign in (("grounded", grounded, False), ("free", free, True)):
            if wl not in a.workloads.split(","):
                continue
            for par in pars:
                if par:
                    # back to back, --rounds times in alternating order (A B, B A, ...)
                    keys = ("tok", "wall", "draft_n", "draft_acc", "pred_ms", "pred_n", "cpu")
                    res = [dict.fromkeys(keys, 0) for _ in bases]
                    for rnd in range(a.rounds):
                        order = list(range(len(bases)))[::(-1 if rnd % 2 else 1)]
                        for i in order:
                            m = measure(bases[i], prompts, a.max_tokens, ign, True, procs[i].pid)
                            for k in keys:
                                res[i][k] += m[k]
                    for r in res:
                        r["tps"] = r["tok"] / r["wall"]
                        r["decode_tps"] = r["pred_n"] * 1e3 / r["pred_ms"] if r["pred_ms"] else 0
                else:
                    # one stream: prompt by prompt, each on every server in turn, so
                    # load swings on a shared machine hit all configurations alike
                    parts = [[measure(base, [p], a.max_tokens, ign, False, pr.pid) for base, pr in zip(bases, procs)]
                             for p in prompts]
                    res = [{k: sum(pp[i][k] for pp in parts) for k in ("tok", "wall", "draft_n", "draft_acc",
                                                                      "pred_ms", "pred_n", "cpu")}
                           for i in range(len(bases))]
                    for r in res:
                        r["tps"] = r["tok"] / r["wall"]
                        r["decode_tps"] = r["pred_n"] * 1e3 / r["pred_ms"] if r["pred_ms"] else 0
                for (engine, spec, _), r in zip(cfgs, res):
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
             f"max_tokens {a.max_tokens}, {a.mode} mode", "",
             "| engine | spec | workload | streams | tokens | wall s | tok/s (aggregate) | decode tok/s (1 stream) "
             "| drafted | accepted | acceptance | speedup vs none |" + (" decode tok / CPU s | speedup (CPU) |" if CPU_TIME else ""),
             "|---|---|---|---|---|---|---|---|---|---|---|---|" + ("---|---|" if CPU_TIME else "")]
    base_tps = {(r["engine"], r["workload"], r["streams"]): r["tps"] for r in rows if r["spec"] == "none"}
    # generated tokens per server CPU second (prompts cached: the measured
    # requests re-decode only their last prompt token)
    for r in rows:
        r["cpu_tps"] = r["tok"] / r["cpu"] if r.get("cpu") else 0
    base_cpu = {(r["engine"], r["workload"], r["streams"]): r["cpu_tps"] for r in rows if r["spec"] == "none"}
    for r in rows:
        acc = f"{r['draft_acc'] / r['draft_n']:.2f}" if r["draft_n"] else "-"
        sp = r["tps"] / base_tps[(r["engine"], r["workload"], r["streams"])]
        dec = f"{r['decode_tps']:.1f}" if r["streams"] == 1 else "-"
        lines.append(f"| {r['engine']} | {r['spec']} | {r['workload']} | {r['streams']} | {r['tok']} | "
                     f"{r['wall']:.1f} | {r['tps']:.1f} | {dec} | {r['draft_n']} | {r['draft_acc']} | {acc} | "
                     f"{sp:.2f}x |" + (f" {r['cpu_tps']:.1f} | "
                                       f"{r['cpu_tps'] / base_cpu[(r['engine'], r['workload'], r['streams'])]:.2f}x |"
                                       if CPU_TIME and base_cpu.get((r['engine'], r['workload'], r['streams'])) else ""))
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        with open(a.out, "a") as f:
            f.write(text)


if __name__ == "__main__":
    main()
