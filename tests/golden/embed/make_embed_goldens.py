#!/usr/bin/env python3
"""Embedding goldens from llama.cpp's llama-embedding on the same GGUF files.

For each real model (Gemma 3 270M Q4_K_M, SmolLM2 135M Instruct Q4_1) this
runs llama-embedding (llama-cpp-python 0.3.36's llama.cpp, CPU build) over
the fixed TEXTS, one line each, and records (vectors rounded to 6 digits;
cosines are compared, so the rounding costs < 1e-9):
  pooling.mean, pooling.cls   --pooling mean / cls, each prompt in one ubatch
                              (llama.cpp needs that for them);
  pooling.last                --pooling last with -ub 1 --attention causal;
  pooling.mean_single         the mean of the per-token rows of --pooling none
                              -ub 1 --attention causal (normalized);
  none                        --pooling none -ub 1 over NONE_TEXT, its rows;
  n_tokens                    how many tokens llama.cpp made of each text
                              (--verbose-prompt; add_special and parse_special,
                              as llama-server tokenizes embedding inputs);
  batched_vs_single           llama.cpp against itself: the cosine between
                              pooling.mean and pooling.mean_single per text.
Pooled vectors are Euclidean-normalized (--embd-normalize 2: llama-server's
default embd_normalize for /v1/embeddings and /embeddings); per-token rows
are not (-1), as llama-server sends them.

Why -ub 1 where llama.cpp allows it (see tests/golden/runtime/make_goldens.py):
llama.cpp's CPU matmuls pick their kernel by the number of rows in a ubatch
(repacked Q4_K: a 4-row gemm for prompt rows, a gemv for single tokens), and
Gemma 3 270M amplifies the different rounding: a prompt decoded in one
ubatch ends up at cosine 0.997-0.9999 from the same prompt decoded token by
token (batched_vs_single). ember computes every position with the
single-token arithmetic whatever the batch, so it is compared with those:
last and per-token rows come from -ub 1 runs, and mean_single pools the -ub 1
rows (llama.cpp cannot pool mean across ubatches: GGML_ASSERT in mul_mat).
CLS reads position 0, which both shapes compute alike, and -ub 1 breaks
llama.cpp's CLS (each ubatch overwrites the sequence's row), so it comes
from the one-ubatch run. SmolLM2 agrees either way.

--attention causal keeps -ub as given (llama-embedding sets n_ubatch = n_batch
unless the attention type is causal). The build: CPU only, outside the repo,
-DGGML_NATIVE=ON; on a CPU with AMX whose kernel does not grant AMX to the
process (this sandbox) ggml's AMX kernels die of SIGILL at the first Q8_0
matmul, so the compiler gets -mno-amx-* after -march=native through a
launcher script:
  pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36
  tar xzf llama_cpp_python-0.3.36.tar.gz && cd llama_cpp_python-0.3.36/vendor/llama.cpp
  printf '#!/bin/sh\nexec "$@" -mno-amx-tile -mno-amx-int8 -mno-amx-bf16\n' > /tmp/noamx.sh; chmod +x /tmp/noamx.sh
  cmake -B build -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_BUILD_SERVER=OFF -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_C_COMPILER_LAUNCHER=/tmp/noamx.sh -DCMAKE_CXX_COMPILER_LAUNCHER=/tmp/noamx.sh
  cmake --build build -j1 --target llama-embedding
Writes tests/golden/embed/<model>.json; tests/e2e/test_embeddings.py reads them.

usage: python3 tests/golden/embed/make_embed_goldens.py [--llama-bin DIR] [--models DIR] [-t N]
"""
import argparse
import json
import math
import os
import pathlib
import re
import subprocess

HERE = pathlib.Path(__file__).resolve().parent
MODELS = {
    "gemma3-270m": "gemma-3-270m-q4_k_m.gguf",
    "smollm2-135m": "SmolLM2-135M-Instruct.Q4_1.gguf",
}
TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Embeddings map text to vectors.",
    "Paris is the capital of France, and Berlin is the capital of Germany.",
    "hello world",
]
NONE_TEXT = "hello world"
N_CTX = 512


def run(binary, model, texts, pooling, norm, threads, single):
    """single: -ub 1 (one token per ubatch), else the whole prompt in one."""
    cmd = [str(binary), "-m", str(model), "-p", "\n".join(texts), "--pooling", pooling, "--embd-normalize", str(norm),
           "--embd-output-format", "json", "-c", str(N_CTX), "-b", str(N_CTX), "-ub", "1" if single else str(N_CTX),
           "--attention", "causal", "-t", str(threads), "--verbose-prompt", "--no-warmup"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    out = p.stdout
    j = json.loads(out[out.index("{"):out.rindex("}") + 1])
    n_tokens = [int(m) for m in re.findall(r"number of tokens in prompt = (\d+)", p.stderr + p.stdout)]
    assert len(n_tokens) == len(texts), (n_tokens, p.stderr[-2000:])
    vecs = [[round(x, 6) for x in d["embedding"]] for d in sorted(j["data"], key=lambda d: d["index"])]
    return vecs, n_tokens


def normalized(v):
    n = math.sqrt(sum(x * x for x in v))
    return [x / n for x in v]


def cosine(a, b):
    return sum(x * y for x, y in zip(a, b)) / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-bin", default="/work/llama-cpu/llama_cpp_python-0.3.36/vendor/llama.cpp/build-noamx/bin")
    ap.add_argument("--models", default=os.path.expanduser("~/.cache/ember/models"))
    ap.add_argument("-t", type=int, default=1)
    args = ap.parse_args()
    binary = pathlib.Path(args.llama_bin) / "llama-embedding"
    for name, file in MODELS.items():
        model = pathlib.Path(args.models) / file
        g = {"model": file, "source": "llama-embedding, llama-cpp-python 0.3.36 (llama.cpp), CPU",
             "texts": TEXTS, "normalize": 2, "pooling": {}}
        g["pooling"]["mean"], g["n_tokens"] = run(binary, model, TEXTS, "mean", 2, args.t, False)
        g["pooling"]["cls"], n_cls = run(binary, model, TEXTS, "cls", 2, args.t, False)
        g["pooling"]["last"], n_last = run(binary, model, TEXTS, "last", 2, args.t, True)
        rows, n_rows = run(binary, model, TEXTS, "none", -1, args.t, True)
        assert g["n_tokens"] == n_cls == n_last == n_rows and len(rows) == sum(n_rows)
        means, k = [], 0
        for n in n_rows:
            means.append([round(x, 6) for x in normalized([sum(c) / n for c in zip(*rows[k:k + n])])])
            k += n
        g["pooling"]["mean_single"] = means
        g["batched_vs_single"] = [round(cosine(a, b), 7) for a, b in zip(g["pooling"]["mean"], means)]
        vecs, n_tokens = run(binary, model, [NONE_TEXT], "none", -1, args.t, True)
        assert len(vecs) == n_tokens[0]
        g["none"] = {"text": NONE_TEXT, "normalize": -1, "rows": vecs}
        out = HERE / f"{name}.json"
        out.write_text(json.dumps(g, separators=(",", ":")) + "\n")
        print(f"wrote {out} ({out.stat().st_size} bytes; tokens {g['n_tokens']}; "
              f"llama.cpp batched vs single mean {g['batched_vs_single']})")


if __name__ == "__main__":
    main()
