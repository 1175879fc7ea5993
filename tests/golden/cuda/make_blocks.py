#!/usr/bin/env python3
"""Make tests/data/cuda/blocks_<TYPE>.bin: random ggml blocks and their
dequantized values, computed by gguf-py (gguf.quants.dequantize), the
independent oracle for the CUDA mat-vec and get_rows tests.

File layout (little-endian): u32 type id, u32 n_blocks, u32 block_size
(elements), u32 block_bytes, then n_blocks * block_bytes raw block bytes, then
n_blocks * block_size float32 dequantized values.

Blocks are random bytes with the f16 scale fields overwritten by sane values
(random bytes there would often be Inf/NaN), so every quant bit pattern occurs.
Run: .venv/bin/python tests/golden/cuda/make_blocks.py
"""
import os
import struct

import numpy as np
from gguf import GGMLQuantizationType as T, GGML_QUANT_SIZES
from gguf.quants import dequantize

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "data", "cuda")
rng = np.random.default_rng(20261129)


def f16(v):
    return np.array(v, dtype=np.float16).tobytes()


def make(t, n_blocks):
    bs, nb = GGML_QUANT_SIZES[t]
    raw = bytearray(rng.integers(0, 256, size=n_blocks * nb, dtype=np.uint8).tobytes())
    for b in range(n_blocks):
        o = b * nb
        d = float(rng.uniform(0.002, 0.05)) * (1 if rng.random() < 0.8 else -1)
        m = float(rng.uniform(-0.05, 0.05))
        if t in (T.Q4_0, T.Q5_0, T.Q8_0):            # d first
            raw[o:o + 2] = f16(d)
        elif t in (T.Q4_1, T.Q5_1):                   # d, m
            raw[o:o + 2] = f16(d)
            raw[o + 2:o + 4] = f16(m)
        elif t in (T.Q4_K, T.Q5_K):                   # d, dmin, scales...
            raw[o:o + 2] = f16(abs(d) / 16)
            raw[o + 2:o + 4] = f16(abs(m) / 16)
        elif t == T.Q6_K:                             # ql, qh, scales, d (last)
            raw[o + nb - 2:o + nb] = f16(d / 32)
        elif t == T.F16:
            raw[o:o + 2] = f16(rng.normal())
        elif t == T.BF16:
            v = np.array([rng.normal()], dtype=np.float32).view(np.uint32)[0]
            raw[o:o + 2] = struct.pack("<H", int(v >> 16))
        elif t == T.F32:
            raw[o:o + 4] = np.array([rng.normal()], dtype=np.float32).tobytes()
    q = np.frombuffer(bytes(raw), dtype=np.uint8)
    deq = dequantize(q, t).astype(np.float32).reshape(-1)
    assert deq.size == n_blocks * bs and np.all(np.isfinite(deq))
    path = os.path.join(OUT, f"blocks_{t.name}.bin")
    with open(path, "wb") as f:
        f.write(struct.pack("<4I", int(t), n_blocks, bs, nb))
        f.write(bytes(raw))
        f.write(deq.tobytes())
    print(path, n_blocks, "blocks")


for t, n in [(T.Q4_0, 64), (T.Q4_1, 64), (T.Q5_0, 64), (T.Q5_1, 64), (T.Q8_0, 64),
             (T.Q4_K, 16), (T.Q5_K, 16), (T.Q6_K, 16), (T.F16, 512), (T.BF16, 512),
             (T.F32, 512)]:
    make(t, n)
