#!/usr/bin/env python3
"""bench/make_bench.py — `make bench`: ember against llama.cpp, same machine, file and flags.

Steps (issue "Benchmark and evaluation suite", item 2):
  1. llama.cpp is built from its source (the llama-cpp-python sdist on PyPI),
     outside the repo and cached in ${LLAMA_CPP_DIR:-~/.cache/ember/llama.cpp};
     with CUDA (sm_90) when nvcc and a GPU are present.
  2. For each model: `llama-bench` and `ember bench` with the same -p/-n/-r/-t.
  3. `llama-server` and `ember serve` on the same GGUF with the same -c and
     --parallel, one after the other, each measured by bench/serve.py.
  4. bench/results/<date>-<machine>.md (+ .json, + a PNG chart when
     matplotlib is importable) with absolute figures and ratios.
"""
import argparse
import datetime
import glob
import json
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import serve as bench_serve  # noqa: E402

LLAMA_VERSION = "0.3.36"  # llama-cpp-python sdist carrying the llama.cpp source


def log(msg):
    print(f"make bench: {msg}", file=sys.stderr, flush=True)


def have_gpu():
    return shutil.which("nvidia-smi") is not None and subprocess.run(
        ["nvidia-smi", "-L"], capture_output=True).returncode == 0


def llama_cpp_bin(jobs, need=("llama-bench", "llama-server"), cpu_only=False):
    """Build (once) the targets in `need` and return llama.cpp's bin folder."""
    base = os.environ.get("LLAMA_CPP_DIR") or os.path.expanduser("~/.cache/ember/llama.cpp")
    cuda = not cpu_only and have_gpu() and shutil.which("nvcc") is not None
    build = os.path.join(base, "build-cuda" if cuda else "build")
    bindir = os.path.join(build, "bin")
    need = list(need)
    if all(os.path.exists(os.path.join(bindir, b)) for b in need):
        return bindir, cuda
    src = glob.glob(os.path.join(base, "llama_cpp_python-*", "vendor", "llama.cpp"))
    if not src:
        os.makedirs(base, exist_ok=True)
        log(f"fetching llama.cpp source (llama-cpp-python {LLAMA_VERSION} sdist) from PyPI")
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps",
                        "-q", "-d", base, f"llama-cpp-python=={LLAMA_VERSION}"], check=True)
        for tgz in glob.glob(os.path.join(base, "llama_cpp_python-*.tar.gz")):
            with tarfile.open(tgz) as t:
                t.extractall(base, filter="data")
        src = glob.glob(os.path.join(base, "llama_cpp_python-*", "vendor", "llama.cpp"))
    src = src[0]
    flags = ["-DCMAKE_BUILD_TYPE=Release", "-DLLAMA_CURL=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_OPENSSL=OFF"]
    if cuda:
        flags += ["-DGGML_CUDA=ON", "-DCMAKE_CUDA_ARCHITECTURES=90"]
    log(f"building llama.cpp in {build} ({'CUDA' if cuda else 'CPU'}); this takes a while once")
    subprocess.run(["cmake", "-S", src, "-B", build] + flags, check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["cmake", "--build", build, "-j", str(jobs), "--target"] + need, check=True,
                   stdout=subprocess.DEVNULL)
    return bindir, cuda


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url, proc, timeout=300):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise RuntimeError("server did not become ready")


def run_server_bench(cmd, label, args):
    port = free_port()
    cmd = cmd + ["--host", "127.0.0.1", "--port", str(port)]
    log(f"starting {label}: {' '.join(cmd)}")
    logf = tempfile.NamedTemporaryFile("w+", prefix=f"{label}-", suffix=".log", delete=False)
    proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT)
    try:
        wait_ready(f"http://127.0.0.1:{port}", proc)
        rep = bench_serve.run(argparse.Namespace(
            base_url=f"http://127.0.0.1:{port}/v1", api_key=None, model=None, config=label, draft=None,
            prompt=bench_serve.DEFAULT_PROMPT, max_tokens=args.n_gen_serve, runs=args.reps_serve,
            parallel=args.parallel, server_pid=proc.pid, no_ignore_eos=False, timeout=900))
        return rep
    except Exception as e:
        log(f"{label} failed: {e} (log: {logf.name})")
        return {"config": label, "errors": [str(e)]}
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def parse_llama_bench(out):
    """llama-bench -o json: list of {n_prompt, n_gen, avg_ts, samples_ts}."""
    res = {}
    for r in json.loads(out):
        key = "pp" if r["n_prompt"] > 0 else "tg"
        ts = r.get("samples_ts") or [r["avg_ts"]]
        res[key] = statistics.median(ts)
    return res


def parse_ember_bench(out):
    """ember bench prints lines like '| ... | pp512 | 123.4 ± 1.0 |' as llama-bench's markdown does."""
    res = {}
    for m in re.finditer(r"\|\s*(pp|tg)\d+\s*\|\s*([0-9.]+)", out):
        res[m.group(1)] = float(m.group(2))
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="gemma3-270m,smollm2-135m-instruct")
    ap.add_argument("-t", "--threads", type=int, default=os.cpu_count())
    ap.add_argument("-p", "--n-prompt", type=int, default=512)
    ap.add_argument("-n", "--n-gen", type=int, default=128)
    ap.add_argument("-r", "--reps", type=int, default=5)
    ap.add_argument("-c", "--ctx", type=int, default=4096)
    ap.add_argument("-P", "--parallel", type=int, default=8)
    ap.add_argument("--n-gen-serve", type=int, default=256)
    ap.add_argument("--reps-serve", type=int, default=3)
    ap.add_argument("--skip-serve", action="store_true")
    ap.add_argument("--ember", default=os.path.join(ROOT, "build", "bin", "ember"))
    args = ap.parse_args()

    bindir, cuda = llama_cpp_bin(args.threads)
    ngl = ["-ngl", "99"] if cuda else []
    results = {"date": datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M UTC"),
               "machine": platform.node(), "cpu": platform.processor() or platform.machine(),
               "threads": args.threads, "cuda": cuda, "models": {}}
    for name in args.models.split(","):
        path = subprocess.run([os.path.join(ROOT, "scripts", "fetch-model"), name], check=True,
                              capture_output=True, text=True).stdout.strip()
        m = {"file": os.path.basename(path)}
        lb = subprocess.run([os.path.join(bindir, "llama-bench"), "-m", path, "-p", str(args.n_prompt),
                             "-n", str(args.n_gen), "-r", str(args.reps), "-t", str(args.threads),
                             "-o", "json"] + ngl, capture_output=True, text=True)
        m["llama_bench"] = parse_llama_bench(lb.stdout) if lb.returncode == 0 else {"error": lb.stderr[-500:]}
        eb = subprocess.run([args.ember, "bench", "-m", path, "-p", str(args.n_prompt), "-n", str(args.n_gen),
                             "-r", str(args.reps), "-t", str(args.threads)] + ngl, capture_output=True, text=True)
        m["ember_bench"] = parse_ember_bench(eb.stdout) if eb.returncode == 0 else {"error": eb.stderr[-500:]}
        if not args.skip_serve:
            common = ["-m", path, "-c", str(args.ctx), "--parallel", str(args.parallel),
                      "-t", str(args.threads)] + ngl
            m["llama_server"] = run_server_bench([os.path.join(bindir, "llama-server")] + common,
                                                 "llama-server", args)
            m["ember_serve"] = run_server_bench([args.ember, "serve"] + common, "ember serve", args)
        results["models"][name] = m

    os.makedirs(os.path.join(ROOT, "bench", "results"), exist_ok=True)
    stem = os.path.join(ROOT, "bench", "results",
                        f"{datetime.date.today().isoformat()}-{'h200' if cuda else platform.node()}")
    with open(stem + ".json", "w") as f:
        json.dump(results, f, indent=2, default=str)
    md = report_markdown(results)
    with open(stem + ".md", "w") as f:
        f.write(md)
    chart(results, stem + ".png")
    print(md)
    return 0


def ratio(a, b):
    return f"{a / b:.2f}x" if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b else "n/a"


def report_markdown(res):
    out = [f"# ember vs llama.cpp — {res['date']} on {res['machine']} ({res['cpu']}, "
           f"{res['threads']} threads, {'CUDA' if res['cuda'] else 'CPU'})", ""]
    for name, m in res["models"].items():
        out += [f"## {name} (`{m['file']}`)", "", "| test | llama.cpp tok/s | ember tok/s | ratio |",
                "|---|---|---|---|"]
        for k in ("pp", "tg"):
            a, b = m["ember_bench"].get(k), m["llama_bench"].get(k)
            out.append(f"| {k} | {b if b is not None else 'n/a'} | {a if a is not None else 'n/a'} | {ratio(a, b)} |")
        for key in ("llama_server", "ember_serve"):
            rep = m.get(key)
            if rep and "single" in rep:
                out += ["", bench_serve.markdown(rep)]
            elif rep:
                out += ["", f"{key}: failed: {rep.get('errors')}"]
        out.append("")
    return "\n".join(out)


def chart(res, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib not installed: no chart")
        return
    names = list(res["models"])
    fig, ax = plt.subplots(figsize=(8, 4))
    labels, llama, ember = [], [], []
    for n in names:
        m = res["models"][n]
        for k in ("pp", "tg"):
            labels.append(f"{n}\n{k}")
            llama.append(m["llama_bench"].get(k) or 0)
            ember.append(m["ember_bench"].get(k) or 0)
    x = range(len(labels))
    ax.bar([i - 0.2 for i in x], llama, 0.4, label="llama.cpp")
    ax.bar([i + 0.2 for i in x], ember, 0.4, label="ember")
    ax.set_xticks(list(x))
    ax.set_xticklabels(labels)
    ax.set_ylabel("tok/s")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    sys.exit(main())
