#!/usr/bin/env python3
"""Per-type dot and activation-quantize throughput, ember vs llama.cpp (ggml).

Runs build/bench/quant (ember) and ggml's tests/test-quantize-perf (built
from the llama.cpp source against its own CPU build; see --llama) in
alternating rounds on the same machine, keeps the best (minimum) cycles per
32 values of each, and prints a markdown table with the ratio
ggml_cycles / ember_cycles (> 1: ember faster).

ggml's tool is built here with:
    g++ -O2 -std=c++17 -I$LLAMA/ggml/include $LLAMA/tests/test-quantize-perf.cpp \
        -L$LLAMA/build/bin -lggml -lggml-base -lggml-cpu -Wl,-rpath,$LLAMA/build/bin
(the library is llama.cpp's own GGML_NATIVE=ON Release build).

Usage: bench/quant_compare.py [--rounds 3] [--ggml PATH] [--ember PATH]
"""
import argparse
import pathlib
import re
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[1]
TYPES = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "IQ4_NL", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_XS", "F16", "BF16"]
ACT_OF = {"Q4_1": "Q8_1", "Q8_0": "Q8_0", "Q4_K": "Q8_K"}  # ggml quantize_row_q_dot of these = our act quantizer
SIZES = [4096, 65536]


def ember_run(exe):
    out = subprocess.run([exe, "--csv"] + sum([["--size", str(s)] for s in SIZES], []),
                         capture_output=True, text=True, check=True).stdout
    res = {}
    for line in out.splitlines()[1:]:
        kind, typ, var, n, cyc, gbs = line.split(",")
        res[(kind, typ, var, int(n))] = (float(cyc), float(gbs))
    return res


def ggml_run(exe, typ, op, size):
    out = subprocess.run([exe, "--type", typ.lower() if typ not in ("Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K") else typ[:2].lower() + "_K",
                          "--op", op, "--size", str(size), "-i", "400"],
                         capture_output=True, text=True).stdout
    m = re.search(r"min cycles/32 vals\s*:\s*([\d.]+)", out)
    return float(m.group(1)) if m else None


def best(a, b):
    if a is None:
        return b
    return tuple(min(x, y) if i == 0 else max(x, y) for i, (x, y) in enumerate(zip(a, b)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--ember", default=str(ROOT / "build" / "bench" / "quant"))
    ap.add_argument("--ggml", default="/tmp/quant-llama-perf/test-quantize-perf")
    args = ap.parse_args()
    have_ggml = pathlib.Path(args.ggml).exists()
    ember, ggml = {}, {}
    for _ in range(args.rounds):
        for k, v in ember_run(args.ember).items():
            ember[k] = best(ember.get(k), v)
        if have_ggml:
            for s in SIZES:
                for t in TYPES:
                    c = ggml_run(args.ggml, t, "vec_dot_q", s)
                    if c is not None:
                        ggml[("vec_dot", t, s)] = min(ggml.get(("vec_dot", t, s), c), c)
                for t, a in ACT_OF.items():
                    c = ggml_run(args.ggml, t, "quantize_row_q_dot", s)
                    if c is not None:
                        ggml[("quantize", a, s)] = min(ggml.get(("quantize", a, s), c), c)

    print("| op | type | values | ember scalar | ember avx2 | ember avx512 | avx512 GB/s | ggml | ggml/ember(avx512) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for s in SIZES:
        for kind, names in (("vec_dot", TYPES + ["F32"]), ("quantize", ["Q8_0", "Q8_1", "Q8_K"])):
            for t in names:
                row = [ember.get((kind, t, v, s)) for v in ("scalar", "avx2", "avx512")]
                if row[2] is None:
                    continue
                g = ggml.get((kind, t, s))
                ratio = f"{g / row[2][0]:.2f}" if g else "-"
                cells = [f"{r[0]:.2f}" if r else "-" for r in row]
                print(f"| {kind} | {t} | {s} | {' | '.join(cells)} | {row[2][1]:.1f} | {g if g else '-'} | {ratio} |")


if __name__ == "__main__":
    main()
