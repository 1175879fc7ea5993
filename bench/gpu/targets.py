#!/usr/bin/env python3
"""bench/gpu/targets.py — issue 15's target table from a bench/gpu/serve_h200.sh summary.

Reads the summary.txt of one run (ember and llama.cpp measured in that run, same files) and
prints the rows of bench/results/gpu-targets.json as a JSON list:
{"workload", "model", "ember", "llama_cpp", "unit", "ratio", "target", "date", "commit"};
for the two HBM-bound rows llama_cpp is null and ratio is ember / (4.8 TB/s / weight bytes per
token).

  python3 bench/gpu/targets.py summary.txt --date 2026-12-02 > bench/results/gpu-targets.json
"""
import argparse
import json
import re
import sys

NAMES = {"g3": "Gemma 3 270M Q4_K_M", "e4b": "Gemma 4 E4B-shaped random Q4_K_M"}


def parse(text):
    d = {"commit": None}
    m = re.search(r"^commit (\S+)", text, re.M)
    if m:
        d["commit"] = m.group(1)
    cur = None
    for line in text.splitlines():
        m = re.match(r"=== (g3|e4b): ", line)
        if m:
            cur = m.group(1)
            continue
        if cur is None:
            continue
        m = re.match(r"weight bytes per token (\d+); HBM bound at 4.8 TB/s: ([\d.]+)", line)
        if m:
            d[(cur, "bound")] = float(m.group(2))
        m = re.match(r"\| (gemma\S*) \|.*\| tg256 \| ([\d.]+) \|", line)   # ember bench
        if m and "Q4_K" not in line:
            d[(cur, "ember", "tg256")] = float(m.group(2))
        m = re.match(r"\| gemma.*Q4_K.*\| +tg256 \| +([\d.]+)", line)      # llama-bench
        if m:
            d[(cur, "llama", "tg256")] = float(m.group(1))
        m = re.match(r"(ember|llama) \S+ np1 single: decode ([\d.]+) tok/s", line)
        if m:
            d[(cur, m.group(1), "single")] = float(m.group(2))
        m = re.match(r"(ember|llama) \S+ np8 8-parallel: aggregate ([\d.]+) tok/s", line)
        if m:
            d[(cur, m.group(1), "par8")] = float(m.group(2))
        m = re.match(r"(ember|llama) \S+ np1 (ttft3k|ttft16k): (\{.*\})", line)
        if m:
            try:
                r = json.loads(m.group(3))
                d[(cur, m.group(1), m.group(2))] = r["ttft_s_median"]
                d[(cur, m.group(2), "tokens")] = r["prompt_tokens"]
            except (ValueError, KeyError):
                pass
    return d


def rows(d, date):
    out = []

    def add(workload, mm, key, unit, target, higher=True):
        e, l = d.get((mm, "ember", key)), d.get((mm, "llama", key))
        ratio = (e / l) if (e is not None and l) else None
        out.append({"workload": workload, "model": NAMES[mm], "ember": e, "llama_cpp": l, "unit": unit,
                    "ratio": None if ratio is None else round(ratio, 3), "target": target,
                    "met": None if ratio is None else (ratio >= target if higher else ratio <= target),
                    "date": date, "commit": d["commit"]})

    add("served single stream (bench/serve.py, 256 forced tokens, median of 3) vs llama-server -np 1", "g3",
        "single", "tok/s", 2.5)
    add("served 8 parallel aggregate vs llama-server -np 8, 32768 KV tokens in all", "g3", "par8", "tok/s", 2.5)
    add("served TTFT, cold %s-token prompt" % (d.get(("g3", "ttft3k", "tokens")) or ["~3000"])[0], "g3", "ttft3k", "s",
        0.5, higher=False)
    add("served single stream vs llama-server -np 1", "e4b", "single", "tok/s", 1.5)
    add("served 8 parallel aggregate vs llama-server -np 8, 32768 KV tokens in all", "e4b", "par8", "tok/s", 2.0)
    add("served TTFT, cold %s-token prompt" % (d.get(("e4b", "ttft3k", "tokens")) or ["~3000"])[0], "e4b", "ttft3k",
        "s", 0.5, higher=False)
    add("served TTFT, cold %s-token prompt" % (d.get(("e4b", "ttft16k", "tokens")) or ["~16000"])[0], "e4b",
        "ttft16k", "s", 0.5, higher=False)
    for mm, tgt in (("g3", 0.2), ("e4b", 0.4)):
        e, b = d.get((mm, "ember", "tg256")), d.get((mm, "bound"))
        frac = (e / b) if (e and b) else None
        out.append({"workload": "engine tg256 (ember bench) as a fraction of the HBM bound (weight bytes per token / 4.8 TB/s = %.0f tok/s)" % (b or 0),
                    "model": NAMES[mm], "ember": e, "llama_cpp": None, "unit": "tok/s",
                    "ratio": None if frac is None else round(frac, 4), "target": tgt,
                    "met": None if frac is None else frac >= tgt, "date": date, "commit": d["commit"]})
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("summary")
    ap.add_argument("--date", required=True)
    a = ap.parse_args()
    json.dump(rows(parse(open(a.summary).read()), a.date), sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
