#!/usr/bin/env python3
"""Gemma 4 E4B-shaped speed on the CPU: ember against llama.cpp on the same
random-weight file (bench/make_e4b_gguf.py), machine and thread count.

Measures, for each engine:
- pp and tg: `ember bench` and `llama-bench` (-p P -n N -r 1, tok/s);
- TTFT: a server (`ember serve` / `llama-server`, one slot, -c C) answers a
  non-streaming completion of max_tokens 1 for a prompt of about --prompt
  tokens (byte tokens of the synthetic vocabulary; each request has its own
  text so no prefix cache helps); wall time of the request, 2 requests, both
  printed;
- resident host memory of that server after the requests (VmRSS, VmHWM),
  at each -c in --ctx.
Writes a markdown fragment to stdout (bench/results/gemma4-e4b.md quotes it).

usage: bench/e4b_cpu.py --model FILE [-t 2] [-p 32] [-n 16] [--prompt 32]
       [--ctx 16384,65536] [--skip-bench] [--skip-server]
"""
import argparse
import os
import pathlib
import socket
import subprocess
import time

import requests

ROOT = pathlib.Path(__file__).resolve().parents[1]
LLAMA_BIN = pathlib.Path(os.environ.get("LLAMA_BIN", "/opt/llama/llama_cpp_python-0.3.36/vendor/llama.cpp/build/bin"))
EMBER = pathlib.Path(os.environ.get("EMBER_BIN", ROOT / "build/bin/ember"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def loadavg():
    return open("/proc/loadavg").read().split()[:3]


def bench(args):
    rows = []
    for t in args.threads:
        e = subprocess.run([EMBER, "bench", "-m", args.model, "-p", str(args.pp), "-n", str(args.tg), "-r", "1",
                            "-t", str(t)], capture_output=True, text=True)
        rows.append(f"ember bench -t {t} (load {' '.join(loadavg())}):\n{e.stdout.strip()}\n{e.stderr.strip()[-300:]}")
        l = subprocess.run([LLAMA_BIN / "llama-bench", "-m", args.model, "-p", str(args.pp), "-n", str(args.tg), "-r", "1",
                            "-t", str(t), "-o", "md"], capture_output=True, text=True)
        rows.append(f"llama-bench -t {t} (load {' '.join(loadavg())}):\n{l.stdout.strip()}\n{l.stderr.strip()[-300:]}")
        print(rows[-2], rows[-1], sep="\n\n", flush=True)
    return rows


def mem(pid):
    out = {}
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(("VmRSS", "VmHWM")):
            k, v = line.split(":")
            out[k] = int(v.split()[0]) / 1024.0
    return out


def server(args, engine, ctx):
    port = free_port()
    if engine == "ember":
        argv = [EMBER, "serve", "-m", args.model, "-c", str(ctx), "-np", "1", "-t", str(args.threads[0]),
                "--port", str(port)]
    else:
        argv = [LLAMA_BIN / "llama-server", "-m", args.model, "-c", str(ctx), "-np", "1", "-t", str(args.threads[0]),
                "--port", str(port), "--no-webui"]
    log = open(f"/tmp/e4b-{engine}-{ctx}.log", "w")
    p = subprocess.Popen([str(a) for a in argv], stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    t0 = time.time()
    try:
        while True:
            if p.poll() is not None:
                return f"{engine} -c {ctx}: exited {p.returncode} (see /tmp/e4b-{engine}-{ctx}.log)"
            try:
                if requests.get(base + "/health", timeout=2).status_code == 200:
                    break
            except requests.RequestException:
                pass
            if time.time() - t0 > 600:
                return f"{engine} -c {ctx}: not healthy after 600 s"
            time.sleep(0.5)
        load_s = time.time() - t0
        res = []
        for i in range(2):
            # letters map to byte tokens of the synthetic vocabulary: ~1 token per character
            text = "".join(chr(ord("a") + (i * 7 + k) % 26) for k in range(args.prompt))
            t1 = time.time()
            r = requests.post(base + "/v1/completions", json={"prompt": text, "max_tokens": 1, "temperature": 0},
                              timeout=1800)
            dt = time.time() - t1
            r.raise_for_status()
            u = r.json().get("usage", {})
            res.append(f"{dt:.2f} s ({u.get('prompt_tokens', '?')} prompt tokens)")
        m = mem(p.pid)
        return (f"{engine} -c {ctx}: load {load_s:.1f} s; TTFT {', '.join(res)}; VmRSS {m['VmRSS']:.0f} MiB, "
                f"VmHWM {m['VmHWM']:.0f} MiB; load avg {' '.join(loadavg())}")
    finally:
        p.terminate()
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("-t", "--threads", default="2")
    ap.add_argument("-p", "--pp", type=int, default=32)
    ap.add_argument("-n", "--tg", type=int, default=16)
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--ctx", default="16384,65536")
    ap.add_argument("--skip-bench", action="store_true")
    ap.add_argument("--skip-server", action="store_true")
    args = ap.parse_args()
    args.threads = [int(x) for x in args.threads.split(",")]
    print(f"# {args.model}, threads {args.threads}, start load avg {' '.join(loadavg())}", flush=True)
    if not args.skip_bench:
        bench(args)
    if not args.skip_server:
        for ctx in [int(c) for c in args.ctx.split(",")]:
            for engine in ("ember", "llama"):
                print(server(args, engine, ctx), flush=True)


if __name__ == "__main__":
    main()
