#!/usr/bin/env python3
"""make_tiny_gemma3.py — a tiny random gemma3 GGUF and its logits computed
independently in float64 numpy, following Hugging Face transformers'
modeling_gemma3.py (Gemma3RMSNorm, rotate_half RoPE, q/k norm, sliding-window
mask, GELU-tanh gated MLP, post-attention/post-feedforward norms, embedding
scaled by sqrt(hidden_size), tied LM head). Not ember code.

Shapes: hidden 32, 2 query heads and 1 KV head of 16, FFN 48, 6 layers
(layers 0-4 sliding, window 4, RoPE base 10000; layer 5 global, base 1e6),
vocab 32. Weights are F16 (so ember's matmul sees the same values), norm
weights F32 stored as 1 + w like llama.cpp's converter.

Writes tiny_gemma3.gguf and tiny_gemma3_logits.txt (one line per position
of TOKENS: 32 logits), and tiny_gemma3_partial.txt for partial forward
passes (ember_set_hidden_layers / ember_set_layer_limit): per position the
hidden state (residual stream) after layers 1 and 2 (0-based), then the
logits of the model cut after its first 3 layers (final norm + tied head
applied to the state after layer 2, as LayerSkip's early exit does).
Run: .venv/bin/python tests/golden/runtime/make_tiny_gemma3.py
"""
import pathlib
import numpy as np
import gguf

HERE = pathlib.Path(__file__).resolve().parent
E, H, HKV, D, FF, L, V, WIN = 32, 2, 1, 16, 48, 6, 32, 4
EPS, BASE_GLOBAL, BASE_LOCAL = 1e-6, 1e6, 1e4
TOKENS = [2, 5, 17, 9, 30, 11, 4, 4, 23, 8, 15, 29]

rng = np.random.default_rng(1234)
f16 = lambda a: a.astype(np.float16)
W = {}
W["token_embd.weight"] = f16(rng.normal(0, 0.5, (V, E)))
W["output_norm.weight"] = (1 + rng.normal(0, 0.1, E)).astype(np.float32)
for i in range(L):
    p = f"blk.{i}."
    W[p + "attn_norm.weight"] = (1 + rng.normal(0, 0.1, E)).astype(np.float32)
    W[p + "attn_q.weight"] = f16(rng.normal(0, 0.3, (H * D, E)))
    W[p + "attn_k.weight"] = f16(rng.normal(0, 0.3, (HKV * D, E)))
    W[p + "attn_v.weight"] = f16(rng.normal(0, 0.3, (HKV * D, E)))
    W[p + "attn_q_norm.weight"] = (1 + rng.normal(0, 0.1, D)).astype(np.float32)
    W[p + "attn_k_norm.weight"] = (1 + rng.normal(0, 0.1, D)).astype(np.float32)
    W[p + "attn_output.weight"] = f16(rng.normal(0, 0.3, (E, H * D)))
    W[p + "post_attention_norm.weight"] = (1 + rng.normal(0, 0.1, E)).astype(np.float32)
    W[p + "ffn_norm.weight"] = (1 + rng.normal(0, 0.1, E)).astype(np.float32)
    W[p + "ffn_gate.weight"] = f16(rng.normal(0, 0.3, (FF, E)))
    W[p + "ffn_up.weight"] = f16(rng.normal(0, 0.3, (FF, E)))
    W[p + "ffn_down.weight"] = f16(rng.normal(0, 0.3, (E, FF)))
    W[p + "post_ffw_norm.weight"] = (1 + rng.normal(0, 0.1, E)).astype(np.float32)

w = gguf.GGUFWriter(str(HERE / "tiny_gemma3.gguf"), "gemma3")
w.add_context_length(128)
w.add_embedding_length(E)
w.add_block_count(L)
w.add_feed_forward_length(FF)
w.add_head_count(H)
w.add_head_count_kv(HKV)
w.add_key_length(D)
w.add_value_length(D)
w.add_layer_norm_rms_eps(EPS)
w.add_rope_freq_base(BASE_GLOBAL)
w.add_sliding_window(WIN)
w.add_tokenizer_model("llama")
w.add_token_list([f"<t{i}>" for i in range(V)])
w.add_token_scores([0.0] * V)
w.add_token_types([3 if i < 4 else 1 for i in range(V)])
w.add_bos_token_id(2)
w.add_eos_token_id(1)
for name, a in W.items():
    w.add_tensor(name, a)
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()

# ---- float64 reference (transformers modeling_gemma3 math) ----
Wd = {k: v.astype(np.float64) for k, v in W.items()}


def rms(x, w):  # Gemma3RMSNorm: x * rsqrt(mean(x^2) + eps) * (1 + w_hf); w_gguf = 1 + w_hf
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + EPS) * w


def rope(x, pos, base):  # rotate_half form over the full head
    half = D // 2
    inv = base ** (-np.arange(0, half) * 2.0 / D)
    ang = np.outer(pos, inv)
    cos, sin = np.cos(ang), np.sin(ang)
    x1, x2 = x[..., :half], x[..., half:]
    cos, sin = cos[:, None, :], sin[:, None, :]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


T = len(TOKENS)
pos = np.arange(T)
x = Wd["token_embd.weight"][TOKENS] * np.sqrt(E)
hidden = {}
for i in range(L):
    p = f"blk.{i}."
    sliding = (i % 6) != 5
    h = rms(x, Wd[p + "attn_norm.weight"])
    q = (h @ Wd[p + "attn_q.weight"].T).reshape(T, H, D)
    k = (h @ Wd[p + "attn_k.weight"].T).reshape(T, HKV, D)
    v = (h @ Wd[p + "attn_v.weight"].T).reshape(T, HKV, D)
    q = rms(q, Wd[p + "attn_q_norm.weight"])
    k = rms(k, Wd[p + "attn_k_norm.weight"])
    base = BASE_LOCAL if sliding else BASE_GLOBAL
    q, k = rope(q, pos, base), rope(k, pos, base)
    out = np.zeros((T, H, D))
    for hh in range(H):
        g = hh // (H // HKV)
        s = (q[:, hh, :] @ k[:, g, :].T) * D ** -0.5
        mask = pos[None, :] > pos[:, None]               # causal
        if sliding:
            mask |= (pos[:, None] - pos[None, :]) >= WIN  # keys older than the window
        s = np.where(mask, -np.inf, s)
        s = np.exp(s - s.max(axis=1, keepdims=True))
        s /= s.sum(axis=1, keepdims=True)
        out[:, hh, :] = s @ v[:, g, :]
    o = out.reshape(T, H * D) @ Wd[p + "attn_output.weight"].T
    x = x + rms(o, Wd[p + "post_attention_norm.weight"])
    h = rms(x, Wd[p + "ffn_norm.weight"])
    f = (gelu_tanh(h @ Wd[p + "ffn_gate.weight"].T) * (h @ Wd[p + "ffn_up.weight"].T)) @ Wd[p + "ffn_down.weight"].T
    x = x + rms(f, Wd[p + "post_ffw_norm.weight"])
    hidden[i] = x.copy()
logits = rms(x, Wd["output_norm.weight"]) @ Wd["token_embd.weight"].T
with open(HERE / "tiny_gemma3_logits.txt", "w") as fh:
    fh.write("# tokens " + " ".join(map(str, TOKENS)) + "\n")
    for row in logits:
        fh.write(" ".join(f"{v:.6f}" for v in row) + "\n")
EXIT = 3
early = rms(hidden[EXIT - 1], Wd["output_norm.weight"]) @ Wd["token_embd.weight"].T
with open(HERE / "tiny_gemma3_partial.txt", "w") as fh:
    fh.write("# tokens " + " ".join(map(str, TOKENS)) + "; hidden after layers 1, 2; logits of the first 3 layers\n")
    for t in range(T):
        fh.write(" ".join(f"{v:.7f}" for v in hidden[1][t]) + "\n")
        fh.write(" ".join(f"{v:.7f}" for v in hidden[2][t]) + "\n")
        fh.write(" ".join(f"{v:.6f}" for v in early[t]) + "\n")
print("wrote", HERE / "tiny_gemma3.gguf", logits.shape)
