#!/usr/bin/env python3
"""Fidelity goldens for the CPU runtime, from llama.cpp on the same GGUF files.

For each real model (Gemma 3 270M Q4_K_M, SmolLM2 135M Instruct Q4_1) this
records, with llama.cpp's own tools:
  - the token ids of 16 fixed prompts (llama-tokenize, special tokens added
    as the model's vocabulary says: BOS for Gemma, none for SmolLM2), so the
    runtime check does not depend on ember's tokenizer;
  - greedy continuations of up to 128 tokens (llama-server /completion with
    the prompt as token ids, temperature 0, cache_prompt false, -ub 1), the top
    log-probabilities of every step (n_probs, post_sampling_probs false:
    softmax of the raw logits), from which the top-1/top-2 logit gap of each
    step follows (log-softmax differences equal logit differences);
  - the top-20 log-probabilities of the first generated position;
  - llama-perplexity's estimate on tests/data/pride_prejudice.txt with -c 512
    (chunks of 512 tokens, second half scored) over the whole text, the
    number of tokens, and the estimate over its first 8 chunks (--chunks 8).
Writes tests/golden/runtime/<model>.json. tests/e2e/test_fidelity.py reads them.

Why llama-server runs with --ubatch-size 1: llama.cpp's CPU backend picks its
matmul kernel by the number of tokens in a ubatch, and for some weight types
the kernels round differently: repacked Q4_K (q4_K_8x8) goes through a 4-row
gemm for prompt rows in groups of four but a gemv for the rest and for every
decoded token, and K-quants without repacking (Q6_K) through a tiled kernel
from 8 rows up. The same prompt then gives logits that depend on how it was
split (Gemma 3 270M Q4_K_M: up to 0.4 apart between a 6-token prompt run at
once and token by token), and a greedy run can follow either. With one token
per ubatch every position goes through the single-token kernels, which are
the ones every decode step uses; ember computes every position the same way
whatever the batch (batch invariance), in that order. Perplexity keeps
llama-perplexity's defaults: a 0.5% bound does not see rounding order.

usage: python3 tests/golden/runtime/make_goldens.py [--llama-bin DIR] [--models DIR] [-t N]
         [--only MODEL] [--keep-perplexity] [--perplexity-log FILE]
  --keep-perplexity      redo the generations, keep the JSON's perplexity block
  --perplexity-log FILE  take the whole-text value from the output of the same
                         llama-perplexity command run by hand (it takes an hour
                         on a loaded 2-core machine) instead of running it
"""
import argparse
import ast
import json
import os
import pathlib
import re
import socket
import subprocess
import time
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parents[3]
HERE = pathlib.Path(__file__).resolve().parent
TEXT = ROOT / "tests/data/pride_prejudice.txt"
PPL_CTX = 512
PPL_FAST_CHUNKS = 8
N_PREDICT = 128
N_PROBS = 20

MODELS = {
    "gemma3-270m": "gemma-3-270m-q4_k_m.gguf",
    "smollm2-135m": "SmolLM2-135M-Instruct.Q4_1.gguf",
}

PROMPTS = [
    "The capital of France is",
    "Once upon a time, in a small village at the edge of the forest,",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "The three primary colors are",
    "Photosynthesis is the process by which plants",
    "Q: What is 12 times 12?\nA:",
    "Here is a list of fruits:\n1. Apple\n2.",
    "The quick brown fox",
    "In 1969, astronauts landed on the Moon. The mission was called",
    "To make a cup of tea, first",
    "The most important rule of programming is",
    "Dear Sir or Madam,\n\nI am writing to",
    "Water boils at 100 degrees Celsius at sea level because",
    "#include <stdio.h>\n\nint main(void) {\n",
    "The history of the Roman Empire begins",
    "My favourite book is",
]


def tokenize(bin_dir, model, text):
    out = subprocess.run([str(bin_dir / "llama-tokenize"), "-m", str(model), "-p", text, "--ids", "--log-disable"],
                         capture_output=True, text=True, check=True).stdout
    return [int(x) for x in ast.literal_eval(out.strip().splitlines()[-1])]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(port, path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def completions(bin_dir, model, prompts_ids, threads):
    port = free_port()
    srv = subprocess.Popen([str(bin_dir / "llama-server"), "-m", str(model), "--host", "127.0.0.1",
                            "--port", str(port), "-c", "2048", "-np", "1", "-t", str(threads),
                            "-ub", "1", "--no-warmup"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.5)
        else:
            raise RuntimeError("llama-server did not start")
        results = []
        for ids in prompts_ids:
            r = post(port, "/completion", {
                "prompt": ids, "n_predict": N_PREDICT, "temperature": 0, "n_probs": N_PROBS,
                "return_tokens": True, "post_sampling_probs": False, "cache_prompt": False,
            })
            probs = r["completion_probabilities"]
            tokens = [p["id"] for p in probs]
            assert tokens == r["tokens"][:len(tokens)], "tokens and probabilities disagree"
            gaps = [p["top_logprobs"][0]["logprob"] - p["top_logprobs"][1]["logprob"] for p in probs]
            first_top = [[t["id"], t["logprob"]] for t in probs[0]["top_logprobs"]]
            results.append(dict(prompt_ids=ids, tokens=tokens, gap=[round(g, 5) for g in gaps],
                                first_top=first_top, stop=r.get("stop_type", "")))
        return results
    finally:
        srv.terminate()
        srv.wait(timeout=30)


def perplexity_start(bin_dir, model, threads, chunks=None):
    """Start llama-perplexity in the background (it runs beside the completions)."""
    cmd = [str(bin_dir / "llama-perplexity"), "-m", str(model), "-f", str(TEXT), "-c", str(PPL_CTX),
           "-t", str(threads)]
    if chunks:
        cmd += ["--chunks", str(chunks)]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def perplexity_result(proc):
    log, _ = proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError("llama-perplexity failed: " + log[-2000:])
    return perplexity_parse(log)


def perplexity_parse(log):
    m = re.search(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)", log)
    chunks = re.search(r"calculating perplexity over (\d+) chunks", log)
    return dict(ctx=PPL_CTX, ppl=float(m.group(1)), err=float(m.group(2)), chunks=int(chunks.group(1)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-bin", default="/opt/llama/llama_cpp_python-0.3.36/vendor/llama.cpp/build/bin")
    ap.add_argument("--models", default=os.path.expanduser("~/.cache/ember/models"))
    ap.add_argument("-t", "--threads", type=int, default=1,
                    help="threads per llama.cpp process (results do not depend on it)")
    ap.add_argument("--only", choices=list(MODELS))
    ap.add_argument("--keep-perplexity", action="store_true")
    ap.add_argument("--perplexity-log")
    args = ap.parse_args()
    bin_dir = pathlib.Path(args.llama_bin)
    version = subprocess.run([str(bin_dir / "llama-server"), "--version"], capture_output=True,
                             text=True).stderr.strip().splitlines()
    for name, fname in MODELS.items():
        if args.only and name != args.only:
            continue
        model = pathlib.Path(args.models) / fname
        ids = [tokenize(bin_dir, model, p) for p in PROMPTS]
        text_ids = tokenize(bin_dir, model, TEXT.read_text(encoding="utf-8"))
        out = HERE / f"{name}.json"
        old = json.loads(out.read_text()) if out.exists() else {}
        keep = args.keep_perplexity and old.get("perplexity")
        if not keep:
            full = None if args.perplexity_log else perplexity_start(bin_dir, model, args.threads)
            # the first PPL_FAST_CHUNKS chunks only: the quick check CI runs by default
            fast = perplexity_start(bin_dir, model, args.threads, PPL_FAST_CHUNKS)
        gens = completions(bin_dir, model, ids, args.threads)
        for g, p in zip(gens, PROMPTS):
            g["prompt"] = p
        doc = dict(model=fname, source="tests/golden/runtime/make_goldens.py",
                   llama_cpp=[v for v in version if v.startswith("version")],
                   n_predict=N_PREDICT, n_probs=N_PROBS, generations=gens, perplexity=None)
        out.write_text(json.dumps(doc, indent=1) + "\n")   # completions first: they are the slow part
        if keep:
            ppl = old["perplexity"]
        else:
            ppl = perplexity_parse(pathlib.Path(args.perplexity_log).read_text()) if args.perplexity_log \
                else perplexity_result(full)
            ppl["text"] = str(TEXT.relative_to(ROOT))
            ppl["n_tokens"] = len(text_ids)
            ppl["fast"] = perplexity_result(fast)
        doc["perplexity"] = ppl
        out.write_text(json.dumps(doc, indent=1) + "\n")
        print(f"{out}: {len(gens)} generations, PPL {ppl['ppl']} +/- {ppl['err']} over {ppl['n_tokens']} tokens")


if __name__ == "__main__":
    main()
