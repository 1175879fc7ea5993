#!/usr/bin/env python3
"""compare_llama.py — ember's runtime (bench/rt_decode, which times
ember_decode directly) against llama-bench on the same GGUF file, thread
count and machine, interleaved run by run so both see the same load.

    bench/compare_llama.py [--threads 2] [--reps 3] [--pp 256] [--tg 64] MODEL...

Prints a markdown table of the best tokens/second of each and the ratio
ember / llama.cpp. llama-bench: LLAMA_BIN or the llama.cpp build under /opt.
"""
import argparse, csv, io, os, pathlib, re, subprocess

ROOT = pathlib.Path(__file__).resolve().parent.parent
LLAMA_BIN = pathlib.Path(os.environ.get("LLAMA_BIN", "/opt/llama/llama_cpp_python-0.3.36/vendor/llama.cpp/build/bin"))


def llama_bench(model, threads, pp, tg):
    out = subprocess.run([str(LLAMA_BIN / "llama-bench"), "-m", model, "-t", str(threads), "-p", str(pp),
                          "-n", str(tg), "-r", "1", "-o", "csv"], capture_output=True, text=True, check=True).stdout
    res = {}
    for row in csv.DictReader(io.StringIO(out)):
        key = "pp" if int(row["n_prompt"]) > 0 else "tg"
        res[key] = float(row["avg_ts"])
    return res


def ember_bench(model, threads, pp, tg, exe):
    out = subprocess.run([str(exe), model, "-t", str(threads), "-pp", str(pp), "-tg", str(tg), "-r", "1"],
                         capture_output=True, text=True, check=True).stdout
    res = {}
    for m in re.finditer(r"(pp|tg)\d+: ([0-9.]+) t/s", out):
        res[m.group(1)] = float(m.group(2))
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="+")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--pp", type=int, default=256)
    ap.add_argument("--tg", type=int, default=64)
    ap.add_argument("--exe", default=str(ROOT / "build/bench/rt_decode"))
    a = ap.parse_args()
    print(f"| model | test | llama.cpp t/s | ember t/s | ember / llama.cpp |")
    print(f"|---|---|---|---|---|")
    for model in a.models:
        best_l, best_e = {"pp": 0, "tg": 0}, {"pp": 0, "tg": 0}
        for _ in range(a.reps):
            for k, v in llama_bench(model, a.threads, a.pp, a.tg).items():
                best_l[k] = max(best_l[k], v)
            for k, v in ember_bench(model, a.threads, a.pp, a.tg, a.exe).items():
                best_e[k] = max(best_e[k], v)
        name = pathlib.Path(model).name
        for k, n in (("pp", a.pp), ("tg", a.tg)):
            print(f"| {name} | {k}{n} -t {a.threads} | {best_l[k]:.2f} | {best_e[k]:.2f} | {best_e[k] / best_l[k]:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
