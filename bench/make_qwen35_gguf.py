#!/usr/bin/env python3
"""Write a GGUF with Qwen3.5-4B's shapes and metadata and random weights in a
Q4_K_M-like type mix: a speed benchmark file for ember vs llama.cpp (speed
does not depend on weight values; both engines run the same file).

Metadata keys and tensor names are the ones llama.cpp's converter writes for
Qwen3.5 (arch "qwen35"): the key set is that of tests/golden/qwen35/tiny-qwen35.gguf
(real convert_hf_to_gguf.py output), the tensor names and shapes those that
llama.cpp's src/models/qwen35.cpp (llama_model_qwen35::load_arch_tensors) asks
for, written through gguf-py's GGUFWriter as bench/make_e4b_gguf.py does.

Qwen3.5-4B shapes (text part). llama.cpp's qwen35.cpp maps 32 layers with
n_embd 2560 to LLM_TYPE_4B; the rest is from a public copy of
Qwen/Qwen3.5-4B's config.json quoted in third-party test code (not checked
against the original here): hidden 2560, intermediate 9216, 32 layers, full
attention every 4th (layers 3, 7, ...), 16 query heads, 4 KV heads, head_dim
256, partial RoPE 0.25 (64 dims, IMRoPE sections [11, 11, 10]), theta 1e7;
Gated DeltaNet layers: 16 key heads and 32 value heads of 128, conv kernel 4;
vocab 248320. Assumed (not in that quote): tied embeddings (no output.weight,
as for the small Qwen3.5 models), rms eps 1e-6, context 262144. The MTP head
(mtp_num_hidden_layers 1) is left out: neither bench uses it.

Types (llama.cpp's Q4_K_M choice, llama-quant.cpp, read in the 0.3.36 sdist):
Q4_K for matrices; Q6_K for token_embd (it is the tied output), and for the
attn_v-like tensors (attn_v of the full-attention layers and attn_qkv of the
DeltaNet layers, one per layer) and ffn_down on the "more bits" layers
(i < n/8, i >= 7n/8, or (i - n/8) % 3 == 2); F32 for norms, ssm_a, ssm_dt.bias
and ssm_conv1d (llama-quant never quantizes ssm_conv1d). ssm_alpha / ssm_beta
(2560 x 32) are Q4_K as llama-quant leaves them for qwen35 (--alpha-beta-f32
to write them F32).

Vocabulary: 248320 synthetic byte-level BPE tokens (the 256 GPT-2 byte
symbols, then "t<i>", then the specials at the end), tokenizer gpt2 / pre
qwen35, one merge; enough to load and benchmark, not to tokenize real text.

  python bench/make_qwen35_gguf.py out.gguf             # ~2.5 GB
  python bench/make_qwen35_gguf.py small.gguf --layers 8 --vocab 4096   # smoke test
"""
import argparse
import glob
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from make_e4b_gguf import random_blocks  # noqa: E402

Q35_4B = dict(n_embd=2560, n_ff=9216, n_layer=32, n_head=16, n_head_kv=4, head_dim=256, full_interval=4,
              lin_k_heads=16, lin_v_heads=32, lin_k_dim=128, lin_v_dim=128, conv=4, n_vocab=248320,
              rope_base=1e7, partial_rotary=0.25, rope_sections=[11, 11, 10, 0], n_ctx_train=262144, eps=1e-6)


def default_llama_src():
    base = os.environ.get("LLAMA_CPP_DIR") or os.path.expanduser("~/.cache/ember/llama.cpp")
    src = glob.glob(os.path.join(base, "llama_cpp_python-*", "vendor", "llama.cpp"))
    return Path(src[0]) if src else Path("/opt/llama/llama_cpp_python-0.3.36/vendor/llama.cpp")


def byte_symbols():
    """GPT-2's bytes_to_unicode symbols, in byte order."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    table = dict(zip(bs, cs))
    return [chr(table[b]) for b in range(256)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--layers", type=int, default=Q35_4B["n_layer"], help="fewer layers (a multiple of 4) for a smoke test")
    ap.add_argument("--vocab", type=int, default=Q35_4B["n_vocab"])
    ap.add_argument("--alpha-beta-f32", action="store_true", help="ssm_alpha / ssm_beta in F32 instead of Q4_K")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--llama", type=Path, default=None, help="llama.cpp source (for its gguf-py)")
    args = ap.parse_args()
    llama = args.llama or default_llama_src()
    if (llama / "gguf-py").is_dir():
        sys.path.insert(0, str(llama / "gguf-py"))
    import gguf
    Q = gguf.GGMLQuantizationType
    rng = np.random.default_rng(args.seed)

    h = dict(Q35_4B)
    L, V = args.layers, args.vocab
    if L % h["full_interval"]:
        sys.exit("--layers must be a multiple of 4")
    E, F = h["n_embd"], h["n_ff"]
    hd, nh, nkv = h["head_dim"], h["n_head"], h["n_head_kv"]
    dk, dv, nk, nv = h["lin_k_dim"], h["lin_v_dim"], h["lin_k_heads"], h["lin_v_heads"]
    key_dim, value_dim = dk * nk, dv * nv
    conv_dim = 2 * key_dim + value_dim
    recurrent = [(i + 1) % h["full_interval"] != 0 for i in range(L)]
    n_rot = int(hd * h["partial_rotary"])

    w = gguf.GGUFWriter(str(args.out), "qwen35")
    # --- the keys convert_hf_to_gguf.py writes for Qwen3.5 (see tiny-qwen35.gguf) ---
    w.add_type("model")
    w.add_name("Qwen3.5-4B-shaped-random")
    w.add_block_count(L)
    w.add_context_length(h["n_ctx_train"])
    w.add_embedding_length(E)
    w.add_feed_forward_length(F)
    w.add_head_count(nh)
    w.add_head_count_kv(nkv)
    w.add_rope_dimension_sections(h["rope_sections"])
    w.add_rope_freq_base(h["rope_base"])
    w.add_layer_norm_rms_eps(h["eps"])
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_K_M)
    w.add_ssm_conv_kernel(h["conv"])
    w.add_ssm_state_size(dk)
    w.add_ssm_group_count(nk)
    w.add_ssm_time_step_rank(nv)
    w.add_ssm_inner_size(value_dim)
    w.add_array("qwen35.attention.recurrent_layers", recurrent)
    w.add_full_attention_interval(h["full_interval"])
    w.add_rope_dimension_count(n_rot)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    # --- tokenizer (synthetic byte-level BPE) ---
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tokens = byte_symbols()
    tokens += [f"t{i}" for i in range(V - len(tokens) - len(specials))] + specials
    ttype = [1] * (V - len(specials)) + [3] * len(specials)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen35")
    w.add_token_list(tokens)
    w.add_token_types(ttype)
    w.add_token_merges(["t 0"])
    w.add_eos_token_id(V - 1)
    w.add_pad_token_id(V - 3)
    w.add_add_bos_token(False)

    # --- tensors: (name, n_in, n_out, type) in the converter's order ---
    def more_bits(i):
        return i < L // 8 or i >= 7 * L // 8 or (i - L // 8) % 3 == 2
    ab = Q.F32 if args.alpha_beta_f32 else Q.Q4_K
    tens = [("token_embd.weight", E, V, Q.Q6_K)]
    for i in range(L):
        b = f"blk.{i}."
        vq = Q.Q6_K if more_bits(i) else Q.Q4_K
        tens.append((b + "attn_norm.weight", E, 1, Q.F32))
        if recurrent[i]:
            tens += [(b + "ssm_a", nv, 1, "ssm_a"), (b + "ssm_conv1d.weight", h["conv"], conv_dim, "conv"),
                     (b + "ssm_dt.bias", nv, 1, "zero"), (b + "ssm_alpha.weight", E, nv, ab),
                     (b + "ssm_beta.weight", E, nv, ab), (b + "attn_qkv.weight", E, conv_dim, vq),
                     (b + "attn_gate.weight", E, value_dim, Q.Q4_K), (b + "ssm_norm.weight", dv, 1, Q.F32),
                     (b + "ssm_out.weight", value_dim, E, Q.Q4_K)]
        tens += [(b + "ffn_down.weight", F, E, Q.Q6_K if more_bits(i) else Q.Q4_K),
                 (b + "ffn_gate.weight", E, F, Q.Q4_K), (b + "ffn_up.weight", E, F, Q.Q4_K),
                 (b + "post_attention_norm.weight", E, 1, Q.F32)]
        if not recurrent[i]:
            tens += [(b + "attn_k_norm.weight", hd, 1, Q.F32), (b + "attn_k.weight", E, nkv * hd, Q.Q4_K),
                     (b + "attn_output.weight", nh * hd, E, Q.Q4_K), (b + "attn_q_norm.weight", hd, 1, Q.F32),
                     (b + "attn_q.weight", E, 2 * nh * hd, Q.Q4_K), (b + "attn_v.weight", E, nkv * hd, vq)]
    tens.append(("output_norm.weight", E, 1, Q.F32))

    def data(n_in, n_out, t):
        if t == "ssm_a":     # A = -exp(A_log): negative, a stable decay
            return (-np.exp(rng.uniform(-1.0, 1.0, n_in))).astype(np.float32)
        if t == "zero":
            return np.zeros(n_in, dtype=np.float32)
        if t == "conv":
            return (rng.standard_normal((n_out, n_in), dtype=np.float32) * 0.1).astype(np.float32)
        if t == Q.F32 and n_out == 1:   # norms near 1
            return (1.0 + 0.1 * rng.standard_normal(n_in, dtype=np.float32)).astype(np.float32)
        return random_blocks(gguf, t, n_out, n_in, rng)

    def shape(n_in, n_out, t):
        if t in ("ssm_a", "zero") or (t == Q.F32 and n_out == 1):
            return (n_in,), n_in * 4, None
        if t == "conv" or t == Q.F32:
            return (n_out, n_in), n_in * n_out * 4, None
        bs, tb = gguf.GGML_QUANT_SIZES[t]
        return (n_out, n_in // bs * tb), n_out * (n_in // bs) * tb, t

    for name, n_in, n_out, t in tens:
        shp, nbytes, raw = shape(n_in, n_out, t)
        if raw is None:
            w.add_tensor_info(name, shp, np.dtype(np.float32), nbytes)
        else:
            w.add_tensor_info(name, shp, np.dtype(np.uint8), nbytes, raw_dtype=raw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    total = 0
    for name, n_in, n_out, t in tens:
        arr = data(n_in, n_out, t)
        w.write_tensor_data(arr)
        total += arr.nbytes
    w.close()
    print(f"{args.out}: {len(tens)} tensors, {total / 2**30:.2f} GiB of tensor data, {L} layers "
          f"({sum(recurrent)} DeltaNet, {L - sum(recurrent)} full attention), vocab {V}")


if __name__ == "__main__":
    main()
