#!/usr/bin/env python3
"""bench/gpu/dflash_summary.py — the numbers of bench/gpu/dflash_h200.sh from its JSONL (one object per
bench/serve.py run: label, what = single | par8, fa, report).

Per request, from the server's own `timings` (ember and llama-server alike): predicted_ms spans the
steps after the first token, each step emits 1 + its accepted drafts, so
    steps = predicted_n - 1 - draft_n_accepted,   step time = predicted_ms / steps,
    accepted a step = draft_n_accepted / steps,   drafted a step = draft_n / steps.
Measured tok/s: single stream, the median over runs of (predicted_n - 1) / predicted_ms (the decode rate,
server-timed: a random-weight file's tokens do not all stream text, which bench/serve.py's client-side
decode rate needs); 8 streams, all completion tokens over first request sent to last stream ended
(serve.py aggregate_end_tok_s, prefill included). Projected tok/s = streams x (accepted a step + 1) / step time.

  dflash_summary.py last  FILE.jsonl   # one line for the last measurement
  dflash_summary.py table FILE.jsonl   # the table and the issue's targets
"""
import json
import statistics
import sys


def stat(d):
    rep = d.get("report") or {}
    par = d["what"] == "par8"
    rs = rep.get("parallel", {}).get("streams", []) if par else rep.get("single", {}).get("runs", [])
    st, rates = [], []
    for r in rs:
        t = r.get("timings") or {}
        n, ms, a = t.get("predicted_n"), t.get("predicted_ms"), r.get("draft_n_accepted", 0)
        if r.get("ok") and n and ms and n - 1 - a > 0:
            st.append((ms / (n - 1 - a), a / (n - 1 - a), r.get("draft_n", 0) / (n - 1 - a)))
            rates.append((n - 1) / ms * 1e3)
    if not st:
        return None
    p = rep.get("parallel", {})
    tok = (p.get("aggregate_end_tok_s") or p.get("aggregate_tok_s") or 0.0) if par else statistics.median(rates)
    return {"tok": tok, "ms": statistics.median(x[0] for x in st), "acc": statistics.fmean(x[1] for x in st),
            "dr": statistics.fmean(x[2] for x in st), "n": 8 if par else 1, "runs": len(st),
            "client": (p.get("aggregate_tok_s") if par else rep.get("single", {}).get("decode_tok_s_median"))}


def load(path):
    return [json.loads(line) for line in open(path) if line.strip()]


def last(path):
    rows = load(path)
    if not rows:
        return
    d = rows[-1]
    v = stat(d)
    rep = d.get("report") or {}
    if not v:
        print(f"  {d['label']} {d['what']}: no timings (rc {d.get('rc')}, errors {rep.get('errors')})")
        return
    print(f"  {d['label']} {d['what']}: {'decode' if v['n'] == 1 else 'aggregate'} {v['tok']:.1f} tok/s "
          f"(client {v['client'] or 0:.1f}); step {v['ms']:.2f} ms, {v['dr']:.2f} drafted and {v['acc']:.2f} accepted a step "
          f"({v['runs']} requests); rc {d.get('rc')}, errors {rep.get('errors')}")


def table(path):
    R = {}
    for d in load(path):
        v = stat(d)
        if v:
            R[(d["label"], d["what"])] = v

    def base(eng, what):   # plain decode of the same engine: single from np1 if there, 8 streams from np8
        for lab in ([f"{eng} plain np1", f"{eng} plain np8"] if what == "single" else [f"{eng} plain np8"]):
            if (lab, what) in R:
                return lab, R[(lab, what)]
        return None, None

    print("| config | streams | measured tok/s | step ms | step / plain step | drafted a step | accepted a step "
          "| projected tok/s | measured / plain | projected / plain |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    targets, bases = [], set()
    for (lab, what), v in R.items():
        eng = lab.split()[0]
        bl, b = base(eng, what)
        proj = v["n"] * (v["acc"] + 1) / (v["ms"] / 1e3)
        if b and b["tok"] > 0 and b["ms"] > 0:   # a baseline with no rate (a failed run) has no ratios
            bases.add(f"{eng} {what}: {bl}")
            rel = (f"{v['ms'] / b['ms']:.2f}", f"{v['tok'] / b['tok']:.2f}x", f"{proj / b['tok']:.2f}x")
        else:
            rel = ("-", "-", "-")
        print(f"| {lab} | {v['n']} | {v['tok']:.1f} | {v['ms']:.2f} | {rel[0]} | {v['dr']:.2f} | {v['acc']:.2f} "
              f"| {proj:.1f} | {rel[1]} | {rel[2]} |")
        if lab.startswith("ember dflash fa3.5") and b and b["tok"] > 0:
            need = 2.0 if what == "single" else 1.0
            x = v["tok"] / b["tok"]
            targets.append(f"{lab} {what}: {x:.2f}x of ember plain (target >= {need}x): {'MET' if x >= need else 'NOT MET'}"
                           f" (projected {proj / b['tok']:.2f}x)")
    print()
    print("baselines: " + "; ".join(sorted(bases)))
    print("\n".join(targets) if targets else "no ember DFlash 3.5 row with a plain baseline")


if __name__ == "__main__":
    {"last": last, "table": table}[sys.argv[1]](sys.argv[2])
