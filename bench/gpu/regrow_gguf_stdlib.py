#!/usr/bin/env python3
"""Regrow a full-size GGUF for speed runs from its header and a cut copy
(bench/gpu/cut_gemma3_gguf.py), with the Python standard library alone (the
lent GPU box has neither numpy nor gguf-py).

header.xz: the original file's bytes [0, data start) (metadata and tensor
infos), xz-compressed. Every tensor of the original is filled with whole
blocks of a donor of the same ggml type from the cut file: the same name
(token_embd: its first rows, repeated), else layer il % n_cut_layers, else
any tensor of that type. The result has the original's metadata, tensor
names, shapes, types and offsets; the values are real blocks in the wrong
places, so it is for speed only (speed does not depend on weight values).
GGUF v3 layout: ggml docs/gguf.md.

  python3 bench/gpu/regrow_gguf_stdlib.py header.xz cut.gguf out.gguf
"""
import lzma
import struct
import sys

BLOCK = {0: (1, 4), 1: (1, 2), 8: (32, 34), 6: (32, 22), 12: (256, 144), 14: (256, 210), 13: (256, 176),
         2: (32, 18), 3: (32, 20), 10: (256, 84), 11: (256, 110)}   # ggml type: (elements, bytes) per block
SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def parse(buf):
    """Tensor infos [(name, type, n_elements, offset)] and the data start of a GGUF header."""
    o = 0

    def rd(fmt):
        nonlocal o
        v = struct.unpack_from("<" + fmt, buf, o)
        o += struct.calcsize("<" + fmt)
        return v[0]

    def rstr():
        nonlocal o
        n = rd("Q")
        s = buf[o:o + n].decode("utf-8", "replace")
        o += n
        return s

    def skip_val(t):
        nonlocal o
        if t == 8:
            rstr()
        elif t == 9:
            et, n = rd("I"), rd("Q")
            if et in SCALAR:
                o += SCALAR[et] * n
            else:
                for _ in range(n):
                    skip_val(et)
        else:
            o += SCALAR[t]

    assert buf[:4] == b"GGUF", "not a GGUF file"
    o = 4
    rd("I")
    n_t, n_kv = rd("Q"), rd("Q")
    align = 32
    for _ in range(n_kv):
        k = rstr()
        t = rd("I")
        if k == "general.alignment":
            align = struct.unpack_from("<I", buf, o)[0]
        skip_val(t)
    ts = []
    for _ in range(n_t):
        name = rstr()
        nd = rd("I")
        ne = 1
        for _ in range(nd):
            ne *= rd("Q")
        ts.append((name, rd("I"), ne, rd("Q")))
    return ts, (o + align - 1) // align * align


def nbytes(t, ne):
    el, by = BLOCK[t]
    return ne // el * by


def main():
    hdr = lzma.decompress(open(sys.argv[1], "rb").read())
    cut = open(sys.argv[2], "rb").read()
    ts, start = parse(hdr)
    assert start == len(hdr), f"header holds {len(hdr)} bytes, data starts at {start}"
    cts, cstart = parse(cut)
    donor = {n: cut[cstart + off:cstart + off + nbytes(t, ne)] for n, t, ne, off in cts}
    ctype = {n: t for n, t, _, _ in cts}
    n_cut = 1 + max(int(n.split(".")[1]) for n in ctype if n.startswith("blk."))
    with open(sys.argv[3], "wb") as f:
        f.write(hdr)
        for name, t, ne, off in sorted(ts, key=lambda x: x[3]):
            want = nbytes(t, ne)
            cands = [name]
            if name.startswith("blk."):
                p = name.split(".")
                cands.append(".".join([p[0], str(int(p[1]) % n_cut)] + p[2:]))
                cands += [n for n in ctype if n.endswith("." + p[-2] + "." + p[-1])]
            cands += sorted(ctype)
            src = next(donor[c] for c in cands if c in ctype and ctype[c] == t)
            f.seek(start + off)
            reps = want // len(src) + 1
            f.write((src * reps)[:want] if reps > 1 else src[:want])
        f.truncate(start + max(off + nbytes(t, ne) for _, t, ne, off in ts))


main()
