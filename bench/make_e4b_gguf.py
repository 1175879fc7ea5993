#!/usr/bin/env python3
"""Write a GGUF with Gemma 4 E4B's shapes and metadata and random weights in a
Q4_K_M-like type mix: a fair speed benchmark file for ember vs llama.cpp
(speed does not depend on weight values; both engines run the same file).

Metadata keys and tensor names are written through gguf-py's GGUFWriter with
the same calls llama.cpp's converter makes for Gemma 4
(conversion/gemma.py: Gemma4Model.set_gguf_parameters / generate_extra_tensors),
so the layout matches what the converter writes (the tiny models in
tests/golden/gemma4/ are real converter output to compare with).

E4B shapes (text part): from public copies of google/gemma-4-E4B-it's
config.json quoted in third-party code (not checked against the original
here): hidden 2560, intermediate 10240, 42 layers (full attention every 6th,
i % 6 == 5), 8 query heads, 2 KV heads, head_dim 256 (sliding) / 512 (full),
18 KV-shared layers, per-layer input 256, vocab 262144 (PLE vocab too),
sliding window 512, final softcap 30, no double-wide MLP, RoPE base 1e4
(sliding) / 1e6 proportional with partial_rotary_factor 0.25 (full).

Types (an approximation of llama.cpp's Q4_K_M choice, llama-quant.cpp): Q4_K
for matrices; Q6_K for token_embd (the tied output), and for attn_v and
ffn_down on the "more bits" layers (i < n/8, i >= 7n/8, or (i - n/8) % 3 == 2);
F32 for norms, scalars and rope_freqs. The PLE table per_layer_token_embd is
Q4_K here (--ple-type to change). Random blocks keep sane f16 scales.

Vocabulary: 262144 synthetic tokens ("<unused...>"-free: specials, the 256
byte tokens, then "t<i>") with tokenizer model gemma4; enough to load and
benchmark, not to tokenize real text.

  python bench/make_e4b_gguf.py out.gguf            # ~5 GB, a minute or two
  python bench/make_e4b_gguf.py small.gguf --layers 12 --vocab 4096   # smoke test
"""
import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

E4B = dict(n_embd=2560, n_ff=10240, n_layer=42, n_head=8, n_head_kv=2, head_dim_swa=256, head_dim_full=512,
           n_kv_shared=18, n_pl=256, n_vocab=262144, n_swa=512, softcap=30.0, rope_base=1e6, rope_base_swa=1e4,
           partial_rotary_full=0.25, n_ctx_train=131072, eps=1e-6)


def random_blocks(gguf, qtype, n_rows, n_in, rng):
    """n_rows rows of n_in elements of random Q4_K / Q6_K / F32 data."""
    if qtype == gguf.GGMLQuantizationType.F32:
        return (rng.standard_normal((n_rows, n_in), dtype=np.float32) * 0.02).astype(np.float32)
    bs, tb = gguf.GGML_QUANT_SIZES[qtype]
    assert n_in % bs == 0, (n_in, bs)
    nb = n_rows * (n_in // bs)
    blk = rng.integers(0, 256, size=(nb, tb), dtype=np.uint8)
    d = (rng.random(nb, dtype=np.float32) * 1e-3 + 1e-4).astype(np.float16).view(np.uint8).reshape(nb, 2)
    if qtype == gguf.GGMLQuantizationType.Q4_K:     # d, dmin, scales[12], qs[128]
        blk[:, 0:2] = d
        blk[:, 2:4] = d
    elif qtype == gguf.GGMLQuantizationType.Q6_K:   # ql[128], qh[64], scales[16], d
        blk[:, tb - 2:tb] = d
    else:
        raise ValueError(qtype)
    return blk.reshape(n_rows, (n_in // bs) * tb)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--layers", type=int, default=E4B["n_layer"], help="fewer layers for a smoke test")
    ap.add_argument("--vocab", type=int, default=E4B["n_vocab"])
    ap.add_argument("--ple-type", default="Q4_K", choices=["Q4_K", "Q6_K"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--llama", type=Path, default=Path("/opt/llama/llama_cpp_python-0.3.36/vendor/llama.cpp"))
    args = ap.parse_args()
    sys.path.insert(0, str(args.llama / "gguf-py"))
    import gguf
    Q = gguf.GGMLQuantizationType
    rng = np.random.default_rng(args.seed)

    h = dict(E4B)
    h["n_layer"] = L = args.layers
    h["n_vocab"] = V = args.vocab
    if L != E4B["n_layer"]:   # keep E4B's proportion, sharing from just after a full layer
        if L < 12 or L % 6:
            sys.exit("--layers must be a multiple of 6, at least 12")
        h["n_kv_shared"] = L - max(6, 6 * round(L * (42 - 18) / 42 / 6))
    swa = [not (i % 6 == 5) for i in range(L)]
    swa[-1] = False                      # transformers forces the last layer to full attention
    first_shared = L - h["n_kv_shared"]
    E, F, P = h["n_embd"], h["n_ff"], h["n_pl"]

    w = gguf.GGUFWriter(str(args.out), "gemma4")
    # --- what TextModel / Gemma3Model / Gemma4Model.set_gguf_parameters write ---
    w.add_type("model")
    w.add_name("gemma-4-E4B-shaped-random")
    w.add_context_length(h["n_ctx_train"])
    w.add_embedding_length(E)
    w.add_block_count(L)
    w.add_feed_forward_length(F)
    w.add_head_count(h["n_head"])
    w.add_head_count_kv(h["n_head_kv"])
    w.add_rope_freq_base(h["rope_base"])
    w.add_rope_freq_base_swa(h["rope_base_swa"])
    w.add_layer_norm_rms_eps(h["eps"])
    w.add_final_logit_softcapping(h["softcap"])
    w.add_sliding_window(h["n_swa"])
    w.add_shared_kv_layers(h["n_kv_shared"])
    w.add_embedding_length_per_layer_input(P)
    w.add_sliding_window_pattern(swa)
    w.add_key_length(h["head_dim_full"])
    w.add_value_length(h["head_dim_full"])
    w.add_key_length_swa(h["head_dim_swa"])
    w.add_value_length_swa(h["head_dim_swa"])
    w.add_rope_dimension_count(h["head_dim_full"])
    w.add_rope_dimension_count_swa(h["head_dim_swa"])
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_K_M)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    # --- tokenizer (synthetic) ---
    specials = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<|turn>", "<turn|>", "<|think|>", "<|channel>",
                "<channel|>", "<|tool>", "<tool|>", "<|tool_call>", "<tool_call|>", "<|tool_response>",
                "<tool_response|>", '<|"|>']
    tokens = specials + [f"<0x{b:02X}>" for b in range(256)] + ["\u2581"]
    tokens += [f"t{i}" for i in range(V - len(tokens))]
    ttype = [3] * 5 + [3, 3, 3, 4, 4, 3, 3, 4, 4, 4, 4, 4] + [6] * 256 + [1] * (V - len(specials) - 256)
    w.add_tokenizer_model("gemma4")
    w.add_token_list(tokens[:V])
    w.add_token_scores([-1000.0] * V)
    w.add_token_types(ttype[:V])
    w.add_token_merges(["t 1"])
    w.add_bos_token_id(2)
    w.add_eos_token_id(1)
    w.add_unk_token_id(3)
    w.add_pad_token_id(0)
    w.add_add_space_prefix(False)
    w.add_add_bos_token(True)
    w.add_chat_template((ROOT / "tests/data/templates/google-gemma-4-31B-it.jinja").read_text())

    # --- tensors: (name, n_in, n_out, type) ---
    def more_bits(i):
        return i < L // 8 or i >= 7 * L // 8 or (i - L // 8) % 3 == 2
    ple_q = Q[args.ple_type]
    tens = []
    n_rot_pairs = int(h["head_dim_full"] * h["partial_rotary_full"] / 2)
    tens.append(("rope_freqs.weight", h["head_dim_full"] // 2, 1, "rope"))
    tens.append(("token_embd.weight", E, V, Q.Q6_K))
    tens.append(("per_layer_token_embd.weight", L * P, V, ple_q))
    tens.append(("per_layer_model_proj.weight", E, L * P, Q.Q4_K))
    tens.append(("per_layer_proj_norm.weight", P, 1, Q.F32))
    tens.append(("output_norm.weight", E, 1, Q.F32))
    for i in range(L):
        hd = h["head_dim_swa"] if swa[i] else h["head_dim_full"]
        nq, nkv = h["n_head"] * hd, h["n_head_kv"] * hd
        b = f"blk.{i}."
        tens += [(b + "attn_norm.weight", E, 1, Q.F32), (b + "attn_q.weight", E, nq, Q.Q4_K),
                 (b + "attn_q_norm.weight", hd, 1, Q.F32)]
        if i < first_shared:
            tens += [(b + "attn_k.weight", E, nkv, Q.Q4_K), (b + "attn_k_norm.weight", hd, 1, Q.F32),
                     (b + "attn_v.weight", E, nkv, Q.Q6_K if more_bits(i) else Q.Q4_K)]
        tens += [(b + "attn_output.weight", nq, E, Q.Q4_K), (b + "post_attention_norm.weight", E, 1, Q.F32),
                 (b + "ffn_norm.weight", E, 1, Q.F32), (b + "ffn_gate.weight", E, F, Q.Q4_K),
                 (b + "ffn_up.weight", E, F, Q.Q4_K), (b + "ffn_down.weight", F, E, Q.Q6_K if more_bits(i) else Q.Q4_K),
                 (b + "post_ffw_norm.weight", E, 1, Q.F32), (b + "inp_gate.weight", E, P, Q.Q4_K),
                 (b + "proj.weight", P, E, Q.Q4_K), (b + "post_norm.weight", E, 1, Q.F32),
                 (b + "layer_output_scale.weight", 1, 1, "scalar")]

    def data(n_in, n_out, t):
        if t == "rope":
            return np.array([1.0] * n_rot_pairs + [1e30] * (n_in - n_rot_pairs), dtype=np.float32)
        if t == "scalar":
            return np.array([1.0], dtype=np.float32)
        if t == Q.F32:   # norms near 1
            return (1.0 + 0.1 * rng.standard_normal(n_in, dtype=np.float32)).astype(np.float32)
        return random_blocks(gguf, t, n_out, n_in, rng)

    for name, n_in, n_out, t in tens:
        if t in ("rope", "scalar") or t == Q.F32:
            w.add_tensor_info(name, (n_in,), np.dtype(np.float32), n_in * 4)
        else:
            bs, tb = gguf.GGML_QUANT_SIZES[t]
            w.add_tensor_info(name, (n_out, n_in // bs * tb), np.dtype(np.uint8), n_out * (n_in // bs) * tb, raw_dtype=t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    total = 0
    for name, n_in, n_out, t in tens:
        arr = data(n_in, n_out, t)
        w.write_tensor_data(arr)
        total += arr.nbytes
    w.close()
    print(f"{args.out}: {len(tens)} tensors, {total / 2**30:.2f} GiB of tensor data, {L} layers, vocab {V}")


if __name__ == "__main__":
    main()
