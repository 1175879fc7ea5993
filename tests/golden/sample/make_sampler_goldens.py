#!/usr/bin/env python3
"""Goldens for src/sample/: the distribution the sampler chain draws from.

An independent numpy implementation of the chain as llama.cpp documents and
implements it (common/sampling.cpp default order; formulas of
src/llama-sampler.cpp): logit bias -> penalties -> top-k -> top-p -> min-p ->
temperature -> softmax. Written from the formulas with full sorts, sharing
no code with ember. For each case it stores the logits, the parameters, the
accepted-token history, and the expected final candidates with their
probabilities; tests/unit/sample/test_sampler.c checks that ember's chain
gives the same candidates and probabilities (to 1e-5) and that draws follow
them (chi-square, alpha = 1e-3 via the Wilson-Hilferty approximation).

usage: python3 tests/golden/sample/make_sampler_goldens.py  (writes sampler_cases.json)
"""
import json
import math
import pathlib

import numpy as np

OUT = pathlib.Path(__file__).resolve().parent / "sampler_cases.json"


def order(ids, logits):
    """Indices sorting by logit descending, then id ascending."""
    return np.lexsort((ids, -logits))


def chain(logits, history, temp=1.0, top_k=0, top_p=1.0, min_p=0.0, repeat=1.0,
          presence=0.0, frequency=0.0, last_n=64, bias=()):
    l = np.array(logits, dtype=np.float64)
    ids = np.arange(len(l))
    for tok, b in bias:
        l[tok] += b
    if last_n != 0 and (repeat != 1.0 or presence != 0.0 or frequency != 0.0):
        window = history if last_n < 0 else history[-last_n:]
        counts = {}
        for t in window:
            counts[t] = counts.get(t, 0) + 1
        for t, c in counts.items():
            l[t] = l[t] * repeat if l[t] <= 0 else l[t] / repeat
            l[t] -= c * frequency + presence
    if temp <= 0:
        best = order(ids, l)[0]
        return [int(best)], [1.0]
    if 0 < top_k < len(l):
        keep = order(ids, l)[:top_k]
        ids, l = ids[keep], l[keep]
    if top_p < 1.0 and len(l) > 1:
        o = order(ids, l)
        ids, l = ids[o], l[o]
        p = np.exp(l - l.max())
        p /= p.sum()
        cum = np.cumsum(p)
        n = int(np.argmax(cum >= top_p)) + 1 if (cum >= top_p).any() else len(p)
        ids, l = ids[:n], l[:n]
    if min_p > 0.0 and len(l) > 1:
        # p_i >= min_p * p_max  <=>  l_i >= l_max + ln(min_p)
        m = l >= l.max() + math.log(min_p)
        if not m.any():  # llama.cpp's sorted fallback keeps the first token
            m = np.zeros(len(l), bool)
            m[order(ids, l)[0]] = True
        ids, l = ids[m], l[m]
    l = l / temp
    p = np.exp(l - l.max())
    p /= p.sum()
    o = np.argsort(ids)
    return [int(i) for i in ids[o]], [float(x) for x in p[o]]


def main():
    rng = np.random.default_rng(20261129)
    cases = []

    def add(name, logits, history=(), draws=20000, **params):
        ids, probs = chain(list(logits), list(history), **params)
        full = dict(temp=1.0, top_k=0, top_p=1.0, min_p=0.0, repeat=1.0, presence=0.0,
                    frequency=0.0, last_n=64, bias=[])
        full.update(params)
        full["bias"] = [[int(t), (b if math.isfinite(b) else "-inf")] for t, b in full["bias"]]
        cases.append(dict(name=name, logits=[float(x) for x in logits], history=[int(t) for t in history],
                          params=full, ids=ids, probs=probs, draws=draws))

    small = rng.normal(0, 2, 32).astype(np.float32)
    add("softmax_t1", small)
    add("temp_0.7_top_k_5", small, temp=0.7, top_k=5)
    add("temp_1.5", small, temp=1.5)
    add("top_p_0.8", small, top_p=0.8)
    add("min_p_0.1", small, min_p=0.1)
    add("min_p_above_1_keeps_top", small, min_p=1.5)
    flat = rng.normal(0, 0.3, 1000).astype(np.float32)
    add("top_p_wide_prefix_over_256", flat, top_p=0.9, draws=4000)
    big = (rng.normal(0, 3, 1000)).astype(np.float32)
    add("default_chain", big, temp=0.8, top_k=40, top_p=0.95, min_p=0.05)
    pen = small.copy()
    pen[[3, 4, 5]] = [-1.5, 2.5, 0.0]
    hist = [3, 4, 4, 5, 9, 9, 9, 1, 2, 3, 4, 4, 17, 17, 30, 4]
    add("penalties_window_8", pen, hist, repeat=1.3, presence=0.5, frequency=0.2, last_n=8)
    add("penalties_all", pen, hist, repeat=1.3, presence=0.5, frequency=0.2, last_n=-1)
    add("penalties_off_last_n_0", pen, hist, repeat=1.3, presence=0.5, frequency=0.2, last_n=0)
    add("logit_bias", small, bias=[(0, 3.0), (int(np.argmax(small)), -math.inf), (7, -1.0)])
    pen2 = pen.copy()
    pen2[4] = small.max() + 1.0   # the argmax until penalised
    add("greedy_after_penalty", pen2, hist, temp=0.0, repeat=5.0, last_n=-1, draws=100)
    add("greedy_after_bias", small, temp=0.0, bias=[(int(np.argmax(small)), -100.0)], draws=100)
    tie = np.array([1.0, 2.0, 2.0, 2.0, 0.5, 2.0], dtype=np.float32)
    add("top_k_tie_lower_id_first", tie, top_k=2)
    OUT.write_text(json.dumps(dict(source=pathlib.Path(__file__).name, cases=cases), indent=1) + "\n")
    print(f"{OUT}: {len(cases)} cases")


if __name__ == "__main__":
    main()
