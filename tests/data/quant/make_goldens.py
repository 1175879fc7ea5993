#!/usr/bin/env python3
"""Make the dequantization goldens for tests/unit/quant/test_quant.c.

For each block type: random blocks with edge values (zero scales, negative
scales, the largest and subnormal fp16 scales, all-0x00 and all-0xFF quant
bytes), dequantized by gguf-py's gguf.quants (the independent oracle).
No inf/nan scales are generated.

Output, one file per type, tests/data/quant/<TYPE>.bin (little-endian):
    b"EQG1", u32 type id, u32 n_blocks, u32 block_bytes, u32 block_size,
    raw blocks (n_blocks*block_bytes bytes), expected float32
    (n_blocks*block_size values).

Also, for the types gguf-py can quantize (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0; its
quantizers mirror ggml's quantize_row_*_ref), tests/data/quant/quantize_<TYPE>.bin:
    b"EQQ1", u32 type id, u32 n_blocks, u32 block_bytes, u32 block_size,
    input float32 (n_blocks*block_size), expected blocks from gguf.quants.quantize.
Inputs: normal data at several scales, an all-zero block, a block with +-max
of equal magnitude, constant blocks, and a block of tiny values.

Run from the repository root:  .venv/bin/python tests/data/quant/make_goldens.py
"""
import os
import struct
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf.constants import GGML_QUANT_SIZES

OUT = os.path.dirname(os.path.abspath(__file__))

# offsets of the fp16 scale fields in each block (ggml-common.h)
F16_FIELDS = {
    T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0],
    T.IQ4_NL: [0], T.Q2_K: [80, 82], T.Q3_K: [108], T.Q4_K: [0, 2],
    T.Q5_K: [0, 2], T.Q6_K: [208], T.IQ4_XS: [0],
}


def rand_half(rng, n):
    """finite, normal fp16 values of either sign around 1e-3 .. 1"""
    v = (rng.standard_normal(n) * 0.05).astype(np.float16)
    return v.view(np.uint16)


def make_blocks(rng, qtype, n_blocks):
    bs, tb = GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(n_blocks, tb), dtype=np.uint8)
    fields = F16_FIELDS[qtype]
    other = np.ones(tb, dtype=bool)
    for f in fields:
        other[f:f + 2] = False
    for b in range(n_blocks):
        kind = b % 8
        if kind == 1:
            raw[b, other] = 0xFF            # max nibbles / scales
        elif kind == 2:
            raw[b, other] = 0x00            # min nibbles / scales
        for f in fields:
            if kind == 0:
                h = 0x0000                  # zero scale
            elif kind == 3:
                h = int(rand_half(rng, 1)[0]) | 0x8000   # negative
            elif kind == 4:
                h = 0x7BFF if f == fields[0] else 0xFBFF  # +-65504
            elif kind == 5:
                h = int(rng.integers(1, 0x400)) | (0x8000 if rng.integers(2) else 0)  # subnormal
            elif kind == 6 and f != fields[0]:
                h = 0x8000                  # -0 min
            else:
                h = int(rand_half(rng, 1)[0])
            raw[b, f] = h & 0xFF
            raw[b, f + 1] = h >> 8
    return raw


def write(qtype, raw, expected):
    bs, tb = GGML_QUANT_SIZES[qtype]
    n_blocks = raw.shape[0]
    assert expected.dtype == np.float32 and expected.size == n_blocks * bs
    assert np.all(np.isfinite(expected)), qtype.name
    path = os.path.join(OUT, f"{qtype.name}.bin")
    with open(path, "wb") as f:
        f.write(b"EQG1" + struct.pack("<4I", int(qtype), n_blocks, tb, bs))
        f.write(raw.tobytes())
        f.write(expected.astype("<f4").tobytes())
    print(f"{path}: {n_blocks} blocks", file=sys.stderr)


def make_inputs(rng, n_blocks, bs):
    x = (rng.standard_normal((n_blocks, bs)) * rng.choice([1e-3, 0.05, 1.0, 30.0], size=(n_blocks, 1))).astype(np.float32)
    x[0] = 0.0                                   # zero block
    x[1, :] = rng.standard_normal(bs).astype(np.float32)
    x[1, 3], x[1, 7] = -4.0, 4.0                 # equal-magnitude extremes: first one wins
    x[2] = 0.75                                  # constant positive
    x[3] = -0.3                                  # constant negative
    x[4] = (rng.standard_normal(bs) * 1e-6).astype(np.float32)  # fp16-subnormal scales
    return x


def write_quantize(qtype, x, blocks):
    bs, tb = GGML_QUANT_SIZES[qtype]
    n_blocks = x.shape[0]
    assert blocks.shape == (n_blocks, tb)
    path = os.path.join(OUT, f"quantize_{qtype.name}.bin")
    with open(path, "wb") as f:
        f.write(b"EQQ1" + struct.pack("<4I", int(qtype), n_blocks, tb, bs))
        f.write(x.astype("<f4").tobytes())
        f.write(blocks.tobytes())
    print(f"{path}: {n_blocks} blocks", file=sys.stderr)


def main():
    rng = np.random.default_rng(20261129)
    for qtype in (T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0):
        bs, tb = GGML_QUANT_SIZES[qtype]
        x = make_inputs(rng, 24, bs)
        q = gguf.quants.quantize(x, qtype).reshape(24, tb)
        write_quantize(qtype, x, q)
    for qtype in F16_FIELDS:
        bs, _ = GGML_QUANT_SIZES[qtype]
        n_blocks = 48 if bs == 32 else 12
        raw = make_blocks(rng, qtype, n_blocks)
        exp = gguf.quants.dequantize(raw.reshape(1, -1), qtype).reshape(-1)
        write(qtype, raw, exp)
    # plain 16-bit types: random finite bit patterns, including subnormals
    h = rng.integers(0, 0x10000, size=512, dtype=np.uint32).astype(np.uint16)
    h = h[(h & 0x7C00) != 0x7C00][:384]
    h[:4] = [0x0000, 0x8000, 0x0001, 0x7BFF]
    write(T.F16, h.view(np.uint8).reshape(-1, 2),
          gguf.quants.dequantize(h.view(np.uint8).reshape(1, -1), T.F16).reshape(-1))
    b = rng.integers(0, 0x10000, size=512, dtype=np.uint32).astype(np.uint16)
    b = b[(b & 0x7F80) != 0x7F80][:384]
    b[:4] = [0x0000, 0x8000, 0x0001, 0x7F7F]
    write(T.BF16, b.view(np.uint8).reshape(-1, 2),
          gguf.quants.dequantize(b.view(np.uint8).reshape(1, -1), T.BF16).reshape(-1))


if __name__ == "__main__":
    main()
