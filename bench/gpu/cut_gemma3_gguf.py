#!/usr/bin/env python3
"""Cut a Gemma 3 GGUF down to its first N layers and first V vocabulary entries,
with the original tensor bytes (no requantisation), so it fits the device tool's
64 MiB transfer limit. The cut model keeps the architecture's sliding-window
pattern (layers 0-4 sliding, 5 global with N = 6) and its quant types; it is for
comparing two backends on the same file (CPU vs CUDA), not for quality.

  .venv/bin/python bench/gpu/cut_gemma3_gguf.py IN.gguf OUT.gguf [--layers 6] [--vocab 16384]
"""
import argparse
import gguf

ap = argparse.ArgumentParser()
ap.add_argument("src")
ap.add_argument("dst")
ap.add_argument("--layers", type=int, default=6)
ap.add_argument("--vocab", type=int, default=16384)
a = ap.parse_args()

r = gguf.GGUFReader(a.src)
arch = r.fields["general.architecture"].contents()
w = gguf.GGUFWriter(a.dst, arch)
cut_arrays = {"tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type"}
for name, f in r.fields.items():
    if name.startswith("GGUF.") or name == "general.architecture":
        continue
    vt = f.types[0]
    val = f.contents()
    if name == f"{arch}.block_count":
        val = a.layers
    if name in cut_arrays:
        val = val[: a.vocab]
    if vt == gguf.GGUFValueType.ARRAY:
        w.add_key_value(name, val, vt, sub_type=f.types[-1])
    else:
        w.add_key_value(name, val, vt)
for t in r.tensors:
    if t.name.startswith("blk.") and int(t.name.split(".")[1]) >= a.layers:
        continue
    data = t.data
    shape = [int(x) for x in reversed(t.shape.tolist())]   # numpy order: outer first
    if t.name == "token_embd.weight":
        data = data[: a.vocab]
        shape[0] = a.vocab
    w.add_tensor(t.name, data, raw_shape=data.shape if t.tensor_type != gguf.GGMLQuantizationType.F32 else None,
                 raw_dtype=t.tensor_type)
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
