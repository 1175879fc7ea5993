#!/usr/bin/env python3
"""A DFlash draft GGUF (architecture `dflash`) with random weights, shaped like
the Nemotron-3.5-Bolt-E4B DFlash draft, for the E4B-shaped target of
bench/gpu/make_e4b_gguf_stdlib.py; Python standard library only (the lent GPU
box has neither numpy nor gguf-py). Speed does not depend on weight values;
acceptance is forced in the benchmark (ember serve --spec-force-accept X).

The shape (defaults) is the published draft's, as its files show:
  * HF config.json of the draft (ollama.com/library/nemotron-3.5-bolt:e4b, blob
    6447bf78b308): DFlashDraftModel, model_type qwen3, block_size 8,
    dflash_config {mask_token_id 4, target_layer_ids [5, 11, 17, 23, 35],
    use_swa true, swa_window_size 1024, causal false}, hidden_size 2560,
    num_hidden_layers 5, num_attention_heads 32, num_key_value_heads 8,
    head_dim 128, intermediate_size 5120, silu, rms_norm_eps 1e-6,
    rope_theta 1e6, vocab 262144, num_target_layers 42, bfloat16;
  * its llama.cpp GGUF (ollama.com/roxmell/nemotron-3.5-bolt:e4b-cpu, blob
    8103aa42fd31, 737 MB, general.file_type BF16): dflash.block_count 5,
    embedding_length 2560, feed_forward_length 5120, attention.head_count 32,
    head_count_kv 8, key_length / value_length 128, layer_norm_rms_epsilon
    1e-6, rope.freq_base 1e6, context_length 131072, block_size 8,
    target_layers [6, 12, 18, 24, 36] (HF ids + 1, docs/dflash.md),
    attention.causal false, embedding_scale 50.596443 (sqrt 2560),
    attention.sliding_window 1024 with sliding_window_pattern all true; no
    token_embd / output (the target's are used: 737 MB is the 5 layers + fc
    in BF16, ~360 M parameters, plus the vocabulary).
Differences from that file: no attention.sliding_window(_pattern) keys
(ember refuses sliding-window drafts; the window is 1024 and the benchmark's
contexts stay below it, where a window changes nothing); random weights.

Metadata keys, value types, tensor names and shapes follow
tests/golden/dflash/tiny-dflash-draft.gguf (written by llama.cpp's
convert_hf_to_gguf.py DFlashModel): fc.weight [n_target_layers * 2560, 2560],
enc.output_norm, blk.i.{attn_norm, attn_q, attn_k, attn_v, attn_output,
attn_q_norm, attn_k_norm, ffn_norm, ffn_gate, ffn_up, ffn_down}, output_norm;
the tokenizer keys are the target's (make_e4b_gguf_stdlib.build's, as the
converter writes the target's vocabulary) plus tokenizer.ggml.mask_token_id 4
(the target's "<mask>", id 4 as in Gemma 4). Matrices BF16 (as published; the
CUDA and CPU backends have BF16 matmuls), norms F32 (as the converter keeps them).

  python3 bench/gpu/make_dflash_gguf_stdlib.py draft.gguf                       # ~0.72 GB, for the 42-layer target
  python3 bench/gpu/make_dflash_gguf_stdlib.py small.gguf --target-layers 12 --vocab 4096 --layers 1 --ff 1024
      # for make_e4b_gguf_stdlib.py --layers 12 --vocab 4096 (target_layers scaled to 12 layers)
"""
import argparse
import random
import struct
import sys
from argparse import Namespace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_e4b_gguf_stdlib as e4b  # noqa: E402  (the GGUF writer: kv_bytes, header, nbytes_of, build's tokenizer)

STR, U32, I32, F32V, BOOL, ARR = e4b.STR, e4b.U32, e4b.I32, e4b.F32V, e4b.BOOL, e4b.ARR
TYPES = {"BF16": (e4b.T_BF16, 32), "F16": (e4b.T_F16, 1)}   # ggml type, general.file_type
REAL_TARGET_LAYERS = [6, 12, 18, 24, 36]   # the published draft's dflash.target_layers (HF ids + 1), of 42 layers


def target_layers(n_target):
    """The published draft's layers for a 42-layer target, scaled to n_target layers (each in [1, n_target - 1],
    increasing)."""
    if n_target == 42:
        return list(REAL_TARGET_LAYERS)
    out = []
    for x in REAL_TARGET_LAYERS:
        v = max(1, min(n_target - 1, round(x * n_target / 42)))
        if out and v <= out[-1]:
            v = out[-1] + 1
        out.append(v)
    if out[-1] > n_target - 1:
        sys.exit(f"--target-layers {n_target}: too few layers for {len(out)} features")
    return out


def build(a):
    E, F, H, HKV, D = a.n_embd, a.ff, a.heads, a.kv_heads, a.head_dim
    wt, ftype = TYPES[a.type]
    tl = target_layers(a.target_layers)
    # the target's tokenizer keys (the converter writes the target's vocabulary), from the E4B maker
    tkv = e4b.build(Namespace(layers=a.target_layers, vocab=a.vocab, ple_type="Q4_K"))[0]
    tok = [kv for kv in tkv if kv[0].startswith("tokenizer.")]
    p = "dflash."
    kvs = [
        ("general.architecture", STR, "dflash"), ("general.type", STR, "model"),
        ("general.name", STR, "Nemotron-3.5-Bolt-E4B-DFlash-shaped-random"),
        ("general.size_label", STR, "%dM" % round((len(tl) * E * E + a.layers * (3 * E * F + 2 * E * (H + HKV) * D)) / 1e6)),
        (p + "block_count", U32, a.layers), (p + "context_length", U32, 131072), (p + "embedding_length", U32, E),
        (p + "feed_forward_length", U32, F), (p + "attention.head_count", U32, H),
        (p + "attention.head_count_kv", U32, HKV), (p + "rope.freq_base", F32V, 1e6),
        (p + "attention.layer_norm_rms_epsilon", F32V, 1e-6), (p + "attention.key_length", U32, D),
        (p + "attention.value_length", U32, D), ("general.file_type", U32, ftype),
        (p + "block_size", U32, 8), (p + "target_layers", ARR, tl, I32),
        (p + "attention.causal", BOOL, False), (p + "embedding_scale", F32V, E ** 0.5),
        ("general.quantization_version", U32, 2),
    ] + tok + [("tokenizer.ggml.mask_token_id", U32, 4)]
    F32 = e4b.T_F32
    tens = [("fc.weight", len(tl) * E, E, wt), ("enc.output_norm.weight", E, 1, F32)]
    for i in range(a.layers):
        b = f"blk.{i}."
        tens += [(b + "attn_norm.weight", E, 1, F32), (b + "ffn_down.weight", F, E, wt),
                 (b + "ffn_gate.weight", E, F, wt), (b + "ffn_up.weight", E, F, wt),
                 (b + "ffn_norm.weight", E, 1, F32), (b + "attn_k_norm.weight", D, 1, F32),
                 (b + "attn_k.weight", E, HKV * D, wt), (b + "attn_output.weight", H * D, E, wt),
                 (b + "attn_q_norm.weight", D, 1, F32), (b + "attn_q.weight", E, H * D, wt),
                 (b + "attn_v.weight", E, HKV * D, wt)]
    tens.append(("output_norm.weight", E, 1, F32))
    return kvs, tens, tl


class Pool:
    """1 Mi random N(0, 0.02) weights in the file's element type, cycled through from random starts."""

    def __init__(self, rng, t, n=1 << 20):
        vals = [rng.gauss(0, 0.02) for _ in range(n)]
        if t == e4b.T_BF16:   # bf16 = the high half of the f32 (truncated; every value is finite)
            raw = struct.pack("<%df" % n, *vals)
            self.buf = b"".join(raw[4 * i + 2:4 * i + 4] for i in range(n))
        else:
            self.buf = struct.pack("<%de" % n, *vals)
        self.es = len(self.buf) // n
        self.rng = rng

    def write(self, f, nbytes):
        start = self.rng.randrange(len(self.buf) // self.es) * self.es
        while nbytes > 0:
            chunk = self.buf[start:start + nbytes]
            f.write(chunk)
            nbytes -= len(chunk)
            start = 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--target-layers", type=int, default=42, help="the target's layer count (make_e4b --layers)")
    ap.add_argument("--vocab", type=int, default=262144, help="the target's vocabulary (make_e4b --vocab)")
    ap.add_argument("--layers", type=int, default=5, help="draft layers")
    ap.add_argument("--n-embd", type=int, default=2560, help="the target's n_embd (the draft uses its embedding and LM head)")
    ap.add_argument("--ff", type=int, default=5120)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--type", default="BF16", choices=list(TYPES))
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    kvs, tens, tl = build(a)
    hdr = e4b.header(kvs, tens)
    pool = None
    total = 0
    with a.out.open("wb") as f:
        f.write(hdr)
        for name, n_in, n_out, t in tens:
            nb = e4b.nbytes_of(n_in, n_out, t)
            if t == e4b.T_F32 and n_out == 1:   # norms near 1
                f.write(struct.pack("<%df" % n_in, *[1.0 + 0.1 * rng.gauss(0, 1) for _ in range(n_in)]))
            else:
                if pool is None:
                    pool = Pool(rng, t)
                pool.write(f, nb)
            f.write(b"\0" * ((-nb) % e4b.ALIGN))
            total += nb
    print(f"{a.out}: dflash draft, {len(tens)} tensors, {total / 1e6:.0f} MB of tensor data ({a.type}), {a.layers} layers, "
          f"n_ff {a.ff}, heads {a.heads}/{a.kv_heads}x{a.head_dim}, target_layers {tl} of {a.target_layers}, vocab {a.vocab}")


if __name__ == "__main__":
    main()
