#!/usr/bin/env python3
"""Gemma 4 E4B-shaped GGUF with random Q4_K_M-like weights, written with the
Python standard library alone (no numpy, no gguf-py): for machines such as the
lent GPU box that have python3 but neither package.

Writes the same file layout as bench/make_e4b_gguf.py (which goes through
gguf-py's GGUFWriter): the same metadata keys, value types and order, the same
tensor names, shapes, types and offsets, so everything up to the tensor data is
byte for byte the same (checked with --check against that script's output).
Only the random bytes differ. Speed does not depend on weight values.

GGUF v3 layout (gguf-py gguf_writer.py / ggml docs/gguf.md): magic "GGUF",
u32 version, u64 n_tensors, u64 n_kv; each KV = string key, u32 value type,
value (string = u64 length + bytes; array = u32 element type, u64 count,
elements); each tensor info = string name, u32 n_dims, u64 ne[n_dims], u32
ggml type, u64 offset from the data start; padding to 32; tensor data, each
tensor padded to 32.

  python3 bench/gpu/make_e4b_gguf_stdlib.py out.gguf                 # ~4.5 GB
  python3 bench/gpu/make_e4b_gguf_stdlib.py small.gguf --layers 12 --vocab 4096
  python3 bench/gpu/make_e4b_gguf_stdlib.py x.gguf --check ref.gguf  # header equal?
"""
import argparse
import random
import struct
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# the shapes of bench/make_e4b_gguf.py (E4B text part)
E4B = dict(n_embd=2560, n_ff=10240, n_layer=42, n_head=8, n_head_kv=2, head_dim_swa=256, head_dim_full=512,
           n_kv_shared=18, n_pl=256, n_vocab=262144, n_swa=512, softcap=30.0, rope_base=1e6, rope_base_swa=1e4,
           partial_rotary_full=0.25, n_ctx_train=131072, eps=1e-6)

# gguf value types (GGUFValueType) and ggml tensor types (GGMLQuantizationType)
U32, I32, F32V, BOOL, STR, ARR, U64 = 4, 5, 6, 7, 8, 9, 10
T_F32, T_F16, T_Q4_K, T_Q6_K, T_BF16 = 0, 1, 12, 14, 30
QSIZE = {T_Q4_K: (256, 144), T_Q6_K: (256, 210)}   # elements, bytes per block
ALIGN = 32


def s_str(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def kv_bytes(key, vtype, val, sub=None):
    out = [s_str(key), struct.pack("<I", vtype)]
    if vtype == ARR:
        out.append(struct.pack("<IQ", sub, len(val)))
        if sub == STR:
            out += [s_str(v) for v in val]
        else:
            fmt = {U32: "I", I32: "i", F32V: "f", BOOL: "?"}[sub]
            out.append(struct.pack("<%d%s" % (len(val), fmt), *val))
    elif vtype == STR:
        out.append(s_str(val))
    else:
        out.append(struct.pack("<" + {U32: "I", I32: "i", F32V: "f", BOOL: "?", U64: "Q"}[vtype], val))
    return b"".join(out)


def build(args):
    h = dict(E4B)
    h["n_layer"] = L = args.layers
    h["n_vocab"] = V = args.vocab
    if L != E4B["n_layer"]:
        if L < 12 or L % 6:
            sys.exit("--layers must be a multiple of 6, at least 12")
        h["n_kv_shared"] = L - max(6, 6 * round(L * (42 - 18) / 42 / 6))
    swa = [not (i % 6 == 5) for i in range(L)]
    swa[-1] = False
    first_shared = L - h["n_kv_shared"]
    E, F, P = h["n_embd"], h["n_ff"], h["n_pl"]
    a = "gemma4."
    specials = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<|turn>", "<turn|>", "<|think|>", "<|channel>",
                "<channel|>", "<|tool>", "<tool|>", "<|tool_call>", "<tool_call|>", "<|tool_response>",
                "<tool_response|>", '<|"|>']
    tokens = specials + [f"<0x{b:02X}>" for b in range(256)] + ["\u2581"]
    tokens += [f"t{i}" for i in range(V - len(tokens))]
    ttype = [3] * 5 + [3, 3, 3, 4, 4, 3, 3, 4, 4, 4, 4, 4] + [6] * 256 + [1] * (V - len(specials) - 256)
    template = (ROOT / "tests/data/templates/google-gemma-4-31B-it.jinja").read_text()
    kvs = [
        ("general.architecture", STR, "gemma4"), ("general.type", STR, "model"),
        ("general.name", STR, "gemma-4-E4B-shaped-random"),
        (a + "context_length", U32, h["n_ctx_train"]), (a + "embedding_length", U32, E),
        (a + "block_count", U32, L), (a + "feed_forward_length", U32, F),
        (a + "attention.head_count", U32, h["n_head"]), (a + "attention.head_count_kv", U32, h["n_head_kv"]),
        (a + "rope.freq_base", F32V, h["rope_base"]), (a + "rope.freq_base_swa", F32V, h["rope_base_swa"]),
        (a + "attention.layer_norm_rms_epsilon", F32V, h["eps"]),
        (a + "final_logit_softcapping", F32V, h["softcap"]),
        (a + "attention.sliding_window", U32, h["n_swa"]), (a + "attention.shared_kv_layers", U32, h["n_kv_shared"]),
        (a + "embedding_length_per_layer_input", U32, P),
        (a + "attention.sliding_window_pattern", ARR, swa, BOOL),
        (a + "attention.key_length", U32, h["head_dim_full"]), (a + "attention.value_length", U32, h["head_dim_full"]),
        (a + "attention.key_length_swa", U32, h["head_dim_swa"]),
        (a + "attention.value_length_swa", U32, h["head_dim_swa"]),
        (a + "rope.dimension_count", U32, h["head_dim_full"]), (a + "rope.dimension_count_swa", U32, h["head_dim_swa"]),
        ("general.file_type", U32, 15), ("general.quantization_version", U32, 2),
        ("tokenizer.ggml.model", STR, "gemma4"), ("tokenizer.ggml.tokens", ARR, tokens[:V], STR),
        ("tokenizer.ggml.scores", ARR, [-1000.0] * V, F32V), ("tokenizer.ggml.token_type", ARR, ttype[:V], I32),
        ("tokenizer.ggml.merges", ARR, ["t 1"], STR),
        ("tokenizer.ggml.bos_token_id", U32, 2), ("tokenizer.ggml.eos_token_id", U32, 1),
        ("tokenizer.ggml.unknown_token_id", U32, 3), ("tokenizer.ggml.padding_token_id", U32, 0),
        ("tokenizer.ggml.add_space_prefix", BOOL, False), ("tokenizer.ggml.add_bos_token", BOOL, True),
        ("tokenizer.chat_template", STR, template),
    ]

    def more_bits(i):
        return i < L // 8 or i >= 7 * L // 8 or (i - L // 8) % 3 == 2
    ple_q = T_Q4_K if args.ple_type == "Q4_K" else T_Q6_K
    tens = [("rope_freqs.weight", h["head_dim_full"] // 2, 1, "rope"), ("token_embd.weight", E, V, T_Q6_K),
            ("per_layer_token_embd.weight", L * P, V, ple_q), ("per_layer_model_proj.weight", E, L * P, T_Q4_K),
            ("per_layer_proj_norm.weight", P, 1, T_F32), ("output_norm.weight", E, 1, T_F32)]
    for i in range(L):
        hd = h["head_dim_swa"] if swa[i] else h["head_dim_full"]
        nq, nkv = h["n_head"] * hd, h["n_head_kv"] * hd
        b = f"blk.{i}."
        tens += [(b + "attn_norm.weight", E, 1, T_F32), (b + "attn_q.weight", E, nq, T_Q4_K),
                 (b + "attn_q_norm.weight", hd, 1, T_F32)]
        if i < first_shared:
            tens += [(b + "attn_k.weight", E, nkv, T_Q4_K), (b + "attn_k_norm.weight", hd, 1, T_F32),
                     (b + "attn_v.weight", E, nkv, T_Q6_K if more_bits(i) else T_Q4_K)]
        tens += [(b + "attn_output.weight", nq, E, T_Q4_K), (b + "post_attention_norm.weight", E, 1, T_F32),
                 (b + "ffn_norm.weight", E, 1, T_F32), (b + "ffn_gate.weight", E, F, T_Q4_K),
                 (b + "ffn_up.weight", E, F, T_Q4_K), (b + "ffn_down.weight", F, E, T_Q6_K if more_bits(i) else T_Q4_K),
                 (b + "post_ffw_norm.weight", E, 1, T_F32), (b + "inp_gate.weight", E, P, T_Q4_K),
                 (b + "proj.weight", P, E, T_Q4_K), (b + "post_norm.weight", E, 1, T_F32),
                 (b + "layer_output_scale.weight", 1, 1, "scalar")]
    n_rot_pairs = int(h["head_dim_full"] * h["partial_rotary_full"] / 2)
    return kvs, tens, n_rot_pairs


def nbytes_of(n_in, n_out, t):
    if t in ("rope", "scalar", T_F32):
        return n_in * 4
    if t in (T_F16, T_BF16):    # 2-byte elements (the DFlash draft maker's weights)
        return n_in * n_out * 2
    bs, tb = QSIZE[t]
    assert n_in % bs == 0, (n_in, bs)
    return n_out * (n_in // bs) * tb


def header(kvs, tens):
    out = [b"GGUF", struct.pack("<IQQ", 3, len(tens), len(kvs))]
    out += [kv_bytes(*kv) for kv in kvs]
    off = 0
    for name, n_in, n_out, t in tens:
        ggml_t = T_F32 if t in ("rope", "scalar") else t
        dims = [n_in] if ggml_t == T_F32 else [n_in, n_out]
        out.append(s_str(name) + struct.pack("<I", len(dims)) + struct.pack("<%dQ" % len(dims), *dims) +
                   struct.pack("<IQ", ggml_t, off))
        nb = nbytes_of(n_in, n_out, t)
        off += nb + (-nb) % ALIGN
    hdr = b"".join(out)
    return hdr + b"\0" * ((-len(hdr)) % ALIGN)


class Pool:
    """A few MiB of random quant blocks with sane f16 scales (as make_e4b_gguf.py:
    d, dmin in [1e-4, 1.1e-3]), cycled through for every quantized tensor."""

    def __init__(self, rng, t, n_blocks=65536):
        bs, tb = QSIZE[t]
        self.tb = tb
        buf = bytearray(rng.randbytes(n_blocks * tb))
        scales = [struct.pack("<e", 1e-4 + rng.random() * 1e-3) for _ in range(1024)]
        for k in range(n_blocks):
            d = scales[k & 1023]
            o = k * tb
            if t == T_Q4_K:          # d, dmin, scales[12], qs[128]
                buf[o:o + 2] = d
                buf[o + 2:o + 4] = d
            else:                    # Q6_K: ql[128], qh[64], scales[16], d
                buf[o + tb - 2:o + tb] = d
        self.buf = bytes(buf)
        self.rng = rng

    def write(self, f, nbytes):
        start = self.rng.randrange(len(self.buf) // self.tb) * self.tb
        while nbytes > 0:
            chunk = self.buf[start:start + nbytes]
            f.write(chunk)
            nbytes -= len(chunk)
            start = 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--layers", type=int, default=E4B["n_layer"])
    ap.add_argument("--vocab", type=int, default=E4B["n_vocab"])
    ap.add_argument("--ple-type", default="Q4_K", choices=["Q4_K", "Q6_K"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--check", type=Path, help="compare the header with this file (bench/make_e4b_gguf.py output)")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    kvs, tens, n_rot_pairs = build(args)
    hdr = header(kvs, tens)
    if args.check:
        ref = args.check.open("rb").read(len(hdr))
        if ref != hdr:
            at = next(i for i in range(min(len(ref), len(hdr))) if ref[i] != hdr[i]) if ref[:len(hdr)] != hdr else len(ref)
            sys.exit(f"header differs from {args.check} at byte {at} (of {len(hdr)})")
        print(f"header ({len(hdr)} bytes) equal to {args.check}'s")
        return
    pools = {}
    total = 0
    with args.out.open("wb") as f:
        f.write(hdr)
        for name, n_in, n_out, t in tens:
            nb = nbytes_of(n_in, n_out, t)
            if t == "rope":
                f.write(struct.pack("<%df" % n_in, *([1.0] * n_rot_pairs + [1e30] * (n_in - n_rot_pairs))))
            elif t == "scalar":
                f.write(struct.pack("<f", 1.0))
            elif t == T_F32:     # norms near 1
                f.write(struct.pack("<%df" % n_in, *[1.0 + 0.1 * rng.gauss(0, 1) for _ in range(n_in)]))
            else:
                if t not in pools:
                    pools[t] = Pool(rng, t)
                pools[t].write(f, nb)
            f.write(b"\0" * ((-nb) % ALIGN))
            total += nb
    print(f"{args.out}: {len(tens)} tensors, {total / 2**30:.2f} GiB of tensor data, {args.layers} layers, vocab {args.vocab}")


if __name__ == "__main__":
    main()
