#!/usr/bin/env python3
"""Second oracle for the tiny qwen35 models: llama.cpp's forward pass on the
same GGUF files (transformers' logits, from ../make_tiny_models.py, are the
first). For each model, runs the long sequence of <name>.long.logits.json
through llama.cpp in one batch and writes <name>.llamacpp.long.logits.json
(same layout: {"sequences": [[ids]], "logits": [[[n_vocab] per position]]}).
Also quantizes tiny-qwen35.gguf to Q8_0 with llama.cpp's own quantizer
(tiny-qwen35-q8_0.gguf: every matrix that llama-quantize converts, the
linear-attention projections included; ssm_conv1d stays F32 as there) and
records llama.cpp's logits for it: there the oracle is llama.cpp alone.

usage: make_llamacpp_logits.py [LLAMA_CPP_DIR]
LLAMA_CPP_DIR: the llama-cpp-python 0.3.36 sdist's vendor/llama.cpp, built
with CMake (CPU, BUILD_SHARED_LIBS, target llama) into build/bin.
"""
import json
import pathlib
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
MODELS = ["tiny-qwen35", "tiny-qwen35moe", "tiny-qwen35-q8_0"]
N_UBATCH = 64   # several micro-batches: the recurrent state carries across them


def main():
    llama = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/lcpp/src/llama.cpp")
    with tempfile.TemporaryDirectory() as td:
        exe = pathlib.Path(td) / "llama_logits"
        subprocess.check_call(["gcc", "-O2", "-o", str(exe), str(HERE / "llama_logits.c"),
                               f"-I{llama}/include", f"-I{llama}/ggml/include", f"-L{llama}/build/bin",
                               "-lllama", f"-Wl,-rpath,{llama}/build/bin"])
        subprocess.check_call([str(exe), "--quantize-q8_0", str(HERE / "tiny-qwen35.gguf"), str(HERE / "tiny-qwen35-q8_0.gguf")])
        for name in MODELS:
            rec = json.loads((HERE / f"{name.replace('-q8_0', '')}.long.logits.json").read_text())
            ids = rec["sequences"][0]
            out = subprocess.run([str(exe), str(HERE / f"{name}.gguf"), str(N_UBATCH)],
                                 input=" ".join(map(str, ids)), capture_output=True, text=True, check=True).stdout
            rows = [[round(float(v), 4) for v in line.split()] for line in out.splitlines()]
            assert len(rows) == len(ids) and all(len(r) == rec["n_vocab"] for r in rows)
            ref = rec["logits"][0]
            d = max(abs(a - b) for ra, rb in zip(rows, ref) for a, b in zip(ra, rb))
            print(f"{name}: llama.cpp vs transformers (F32 weights) max|diff| {d:.3g}")
            res = {"model": name, "oracle": "llama.cpp (llama-cpp-python 0.3.36 sdist), CPU, F32 KV cache, n_ubatch %d" % N_UBATCH,
                   "n_vocab": rec["n_vocab"], "sequences": [ids], "logits": [rows],
                   "vs_transformers_f32_max_abs_diff": d}
            (HERE / f"{name}.llamacpp.long.logits.json").write_text(json.dumps(res, separators=(",", ":")))


if __name__ == "__main__":
    main()
