#!/usr/bin/env python3
"""Make the tiny random gemma4 / qwen3 / qwen35 models and their reference logits.

Oracle: Hugging Face transformers (random weights, small vocab, few layers).
Conversion: llama.cpp's own convert_hf_to_gguf.py with its gguf-py, F32 output,
so the GGUF tensor names and metadata are exactly what published files use.

Writes, for each model NAME in MODELS:
  tests/golden/<arch>/<NAME>.gguf         the converted model (F32)
  tests/golden/<arch>/<NAME>.logits.json  {"sequences": [[ids...]...],
        "logits": [[[n_vocab floats] per position] per sequence], "config": {...}}
  tests/golden/<arch>/<NAME>.long.logits.json  the same for one long sequence
        (models in LONG: sliding windows across many KV blocks)
The logits are transformers' for each whole sequence run from position 0
(causal, so position p depends on tokens 0..p only).

Run (needs torch + transformers >= 5.5 with gemma4; a separate venv):
  /work/venv-oracle/bin/python tests/golden/make_tiny_models.py \
      --llama /opt/llama/llama_cpp_python-0.3.36/vendor/llama.cpp

Notes:
- qwen3: the converter identifies a BPE pre-tokenizer by hashing the output of
  the tokenizer under conversion; our handmade tiny tokenizer has no known hash,
  so the converter's get_vocab_base_pre is patched to answer "qwen2" (what the
  real Qwen3 files carry). Only tokenizer.ggml.pre is affected.
- Every weight is re-drawn with a larger spread than transformers' init
  (std 0.02 would give near-zero logits and a test that cannot fail): matrices
  N(0, 1/fan_in) * 1.5, norm weights 1 + N(0, 0.2), embeddings N(0, 1),
  layer scalars and per-expert scales U(0.5, 1.5), router scale 1 + N(0, 0.2).
- qwen35 (Qwen3.5: Gated DeltaNet + gated attention): its RMSNorms are
  zero-centred (x * (1 + w), the converter writes 1 + w), so they get
  w = N(0, 0.2); the gated norm of the linear-attention layers is plain
  (x * w): 1 + N(0, 0.2). Decay parameters A = exp(A_log) ~ U(0.002, 0.8) and
  dt_bias ~ N(0, 0.5), so some heads keep a long memory (decay per token
  exp(-A softplus(a + dt_bias)) near 1) and the long sequence tests it. The
  conv kernel [C, 1, K] is N(0, 1/K) * 1.5. Linear attention has 2 key heads
  and 4 value heads, so the converter's V-head reorder (grouped -> tiled) is
  exercised. The pre-tokenizer is patched to "qwen35" (what real Qwen3.5 files
  carry). The long sequence (320 tokens) runs transformers' chunked form
  (chunks of 64); the script checks it against transformers' own recurrent
  form (token-by-token with a cache) before writing.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent

# ---------------------------------------------------------------- tokenizer --

SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>",
            "<|turn>", "<turn|>", "<|think|>", "<|channel>", "<channel|>",
            "<|tool>", "<tool|>", "<|tool_call>", "<tool_call|>",
            "<|tool_response>", "<tool_response|>", '<|"|>', "<|image|>", "<|audio|>", "<|video|>"]
# Whole pieces the scripted chat model (tiny-gemma4-chat) emits: vocabulary
# entries that no merge reaches, so prompts never tokenize into them.
SCRIPT_PIECES = ["thought\nSunny\u2581in\u2581Paris.", 'call:weather{city:<|"|>Paris<|"|>}']
WORDS = ["the", "and", "model", "user", "system", "thought", "call", "response",
         "declaration", "hello", "world", "weather", "city", "Paris", "name",
         "description", "parameters", "type", "string", "object", "properties"]
CHARS = (list("abcdefghijklmnopqrstuvwxyz") + list("ABCDEFGHIJKLMNOPQRSTUVWXYZ") +
         list("0123456789") + list(".,:;!?'\"-_(){}[]<>/|=+*#@&%$\n"))


def build_merges(vocab, words, space):
    merges = []
    for w in words:
        for word in (w, space + w):
            cur = word[0]
            for ch in word[1:]:
                new = cur + ch
                if new not in vocab:
                    vocab[new] = len(vocab)
                    merges.append((cur, ch))
                cur = new
    return merges


def gemma4_tokenizer(dirpath: Path):
    """A Gemma-4-style tokenizer.json: BPE over characters with U+2581 for
    spaces and <0xXX> byte fallback (what llama.cpp's LlamaHfVocab expects)."""
    from tokenizers import Tokenizer, models, normalizers, decoders
    vocab = {t: i for i, t in enumerate(SPECIALS)}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for ch in ["\u2581"] + CHARS:
        if ch not in vocab:
            vocab[ch] = len(vocab)
    merges = build_merges(vocab, WORDS, "\u2581")
    for piece in SCRIPT_PIECES:
        vocab[piece] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, byte_fallback=True, unk_token="<unk>", fuse_unk=True))
    tok.normalizer = normalizers.Replace(" ", "\u2581")
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()])
    from tokenizers import AddedToken
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIALS])
    tok.save(str(dirpath / "tokenizer.json"))
    (dirpath / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<bos>", "eos_token": "<eos>",
        "pad_token": "<pad>", "unk_token": "<unk>", "add_bos_token": True, "model_max_length": 4096,
        # the chat markers are special tokens (CONTROL in the GGUF; the converter
        # makes the ones a parser must see USER_DEFINED), as in Gemma 4's own files
        "extra_special_tokens": SPECIALS[5:],
        "chat_template": (HERE.parent / "data/templates/google-gemma-4-31B-it.jinja").read_text(),
    }))
    return len(vocab)


def qwen3_tokenizer(dirpath: Path):
    """A GPT-2-style byte-level BPE (Qwen's tokenizer kind), tiny."""
    from tokenizers import Tokenizer, models, pre_tokenizers, decoders, AddedToken
    byte_chars = pre_tokenizers.ByteLevel.alphabet()
    vocab = {}
    for ch in sorted(byte_chars):
        vocab[ch] = len(vocab)
    merges = build_merges(vocab, WORDS, "\u0120")
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    tok.save(str(dirpath / "tokenizer.json"))
    (dirpath / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
        "bos_token": None, "add_bos_token": False, "model_max_length": 4096,
    }))
    return len(vocab) + len(specials)


# ------------------------------------------------------------------- models --

def gemma4_e_config(n_vocab):
    """E2B/E4B-like: PLE, KV sharing, double-wide MLP on shared layers, both
    layer types with their own head dims and RoPE (proportional, partial on
    full layers), final logit softcap."""
    from transformers import Gemma4TextConfig
    return Gemma4TextConfig(
        vocab_size=n_vocab, vocab_size_per_layer_input=n_vocab, hidden_size=64, intermediate_size=96,
        num_hidden_layers=6, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        global_head_dim=32, max_position_embeddings=256, rms_norm_eps=1e-6, sliding_window=4,
        layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention",
                     "sliding_attention", "full_attention"],
        rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                         "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                            "rope_theta": 1000000.0}},
        final_logit_softcapping=30.0, hidden_size_per_layer_input=8, num_kv_shared_layers=2,
        use_double_wide_mlp=True, attention_k_eq_v=False, tie_word_embeddings=True,
        pad_token_id=0, eos_token_id=1, bos_token_id=2,
    )


def gemma4_kv_config(n_vocab):
    """31B-like dense: attention_k_eq_v (full layers have no v_proj and their own
    KV head count), no PLE, no sharing, random layer scalars, no softcap."""
    from transformers import Gemma4TextConfig
    return Gemma4TextConfig(
        vocab_size=n_vocab, hidden_size=48, intermediate_size=80, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, global_head_dim=24,
        num_global_key_value_heads=1, max_position_embeddings=256, rms_norm_eps=1e-6, sliding_window=3,
        layer_types=["sliding_attention", "sliding_attention", "full_attention", "full_attention"],
        rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                         "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.5,
                                            "rope_theta": 1000000.0}},
        final_logit_softcapping=None, hidden_size_per_layer_input=0, num_kv_shared_layers=0,
        attention_k_eq_v=True, tie_word_embeddings=True, pad_token_id=0, eos_token_id=1, bos_token_id=2,
    )


def gemma4_moe_config(n_vocab):
    """26B-A4B-like: every layer has the dense MLP plus a mixture-of-experts
    block (router with its scale and per-expert scales, 6 experts, top 2),
    attention_k_eq_v on full layers."""
    from transformers import Gemma4TextConfig
    return Gemma4TextConfig(
        vocab_size=n_vocab, hidden_size=48, intermediate_size=64, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, global_head_dim=32,
        num_global_key_value_heads=1, max_position_embeddings=256, rms_norm_eps=1e-6, sliding_window=5,
        layer_types=["sliding_attention", "sliding_attention", "full_attention"],
        rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                         "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                            "rope_theta": 1000000.0}},
        final_logit_softcapping=30.0, hidden_size_per_layer_input=0, num_kv_shared_layers=0,
        attention_k_eq_v=True, enable_moe_block=True, num_experts=6, top_k_experts=2,
        moe_intermediate_size=24, tie_word_embeddings=True, pad_token_id=0, eos_token_id=1, bos_token_id=2,
    )


def gemma4_chat_config(n_vocab):
    """The scripted chat model: a plain gemma4 whose weights are set by
    script_weights() so greedy decoding follows a fixed token chain."""
    from transformers import Gemma4TextConfig
    return Gemma4TextConfig(
        vocab_size=n_vocab, hidden_size=64, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, head_dim=16, global_head_dim=32,
        max_position_embeddings=1024, rms_norm_eps=1e-6, sliding_window=16,
        layer_types=["sliding_attention", "full_attention"], final_logit_softcapping=30.0,
        hidden_size_per_layer_input=0, num_kv_shared_layers=0, attention_k_eq_v=False,
        tie_word_embeddings=False, pad_token_id=0, eos_token_id=1, bos_token_id=2,
    )


# The chat fixture: messages with a tool declaration, an earlier tool call and
# its response, and thinking on; the reply the scripted model gives.
CHAT_TOOLS = [{"type": "function", "function": {
    "name": "weather", "description": "Weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "name"}},
                   "required": ["city"]}}}]
CHAT_MESSAGES = [
    {"role": "system", "content": "You are a helpful model."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": {"city": "Paris"}}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    {"role": "user", "content": "And again?"},
]
# after the generation prompt's final "\n": thinking, then one tool call, then <eos>
CHAT_SCRIPT = ["<|channel>", SCRIPT_PIECES[0], "<channel|>", "<|tool_call>", SCRIPT_PIECES[1], "<tool_call|>", "<eos>"]


def script_weights(model, tok):
    """Make greedy decoding a lookup table next(t) for the tokens of
    ["\n"] + CHAT_SCRIPT: every layer's output projections are zeroed (the
    residual stream stays the scaled embedding), token t of the chain gets the
    basis embedding b_i, and the LM head row of its successor gets 10 b_i."""
    ids = [tok.convert_tokens_to_ids(t) for t in ["\n"] + CHAT_SCRIPT]
    assert len(set(ids)) == len(ids) and tok.unk_token_id not in ids, ids
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        emb = model.model.embed_tokens.weight
        head = model.lm_head.weight
        head.mul_(0.01)
        model.model.norm.weight.fill_(1.0)
        for i, (t, nxt) in enumerate(zip(ids[:-1], ids[1:])):
            emb[t].zero_()
            emb[t, i] = 1.0
            head[nxt, i] += 10.0
    return ids


def qwen3_config(n_vocab):
    from transformers import Qwen3Config
    return Qwen3Config(
        vocab_size=n_vocab, hidden_size=64, intermediate_size=112, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, head_dim=24, max_position_embeddings=256,
        rms_norm_eps=1e-6, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        tie_word_embeddings=False, bos_token_id=None, eos_token_id=n_vocab - 1, pad_token_id=n_vocab - 3,
    )


def qwen35_config(n_vocab):
    """Qwen3.5 dense: linear (Gated DeltaNet) and gated full-attention layers,
    partial RoPE 0.25 (4 of 16 dims), 2 key / 4 value heads in the linear
    layers."""
    from transformers import Qwen3_5TextConfig
    return Qwen3_5TextConfig(
        vocab_size=n_vocab, hidden_size=64, intermediate_size=96, num_hidden_layers=5,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=1024,
        rms_norm_eps=1e-6, hidden_act="silu",
        layer_types=["linear_attention", "linear_attention", "full_attention", "linear_attention", "full_attention"],
        linear_conv_kernel_dim=4, linear_key_head_dim=16, linear_value_head_dim=16,
        linear_num_key_heads=2, linear_num_value_heads=4,
        rope_parameters={"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25,
                         "mrope_section": [1, 1, 0], "mrope_interleaved": True},
        tie_word_embeddings=False, bos_token_id=None, eos_token_id=n_vocab - 1, pad_token_id=n_vocab - 3,
    )


def qwen35moe_config(n_vocab):
    """Qwen3.5 MoE (35B-A3B-like): the same mixers as qwen35, every MLP a
    mixture of 6 experts (top 2, softmax router, renormalized) plus a shared
    expert behind a sigmoid gate."""
    from transformers import Qwen3_5MoeTextConfig
    return Qwen3_5MoeTextConfig(
        vocab_size=n_vocab, hidden_size=64, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=1024,
        rms_norm_eps=1e-6, hidden_act="silu",
        layer_types=["linear_attention", "full_attention", "linear_attention", "full_attention"],
        linear_conv_kernel_dim=4, linear_key_head_dim=16, linear_value_head_dim=16,
        linear_num_key_heads=2, linear_num_value_heads=4,
        moe_intermediate_size=32, shared_expert_intermediate_size=48, num_experts_per_tok=2, num_experts=6,
        rope_parameters={"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25,
                         "mrope_section": [1, 1, 0], "mrope_interleaved": True},
        tie_word_embeddings=False, bos_token_id=None, eos_token_id=n_vocab - 1, pad_token_id=n_vocab - 3,
    )


MODELS = {
    # name: (arch dir, config fn, tokenizer fn, model class name)
    "tiny-gemma4-e": ("gemma4", gemma4_e_config, gemma4_tokenizer, "Gemma4ForCausalLM"),
    "tiny-gemma4-kv": ("gemma4", gemma4_kv_config, gemma4_tokenizer, "Gemma4ForCausalLM"),
    "tiny-gemma4-moe": ("gemma4", gemma4_moe_config, gemma4_tokenizer, "Gemma4ForCausalLM"),
    "tiny-gemma4-chat": ("gemma4", gemma4_chat_config, gemma4_tokenizer, "Gemma4ForCausalLM"),
    "tiny-qwen3": ("qwen3", qwen3_config, qwen3_tokenizer, "Qwen3ForCausalLM"),
    "tiny-qwen35": ("qwen35", qwen35_config, qwen3_tokenizer, "Qwen3_5ForCausalLM"),
    "tiny-qwen35moe": ("qwen35", qwen35moe_config, qwen3_tokenizer, "Qwen3_5MoeForCausalLM"),
}


# models that also get a <name>.long.logits.json: sequence length
LONG = {"tiny-gemma4-e": 160, "tiny-gemma4-kv": 120, "tiny-qwen35": 320, "tiny-qwen35moe": 320}

# pre-tokenizer name written instead of the converter's hash lookup (which
# does not know our handmade tokenizers)
PATCH_PRE = {"qwen3": "qwen2", "qwen35": "qwen35"}


def randomize(model, gen):
    if model.config.model_type.startswith("qwen3_5"):
        return randomize_qwen35(model, gen)
    with torch.no_grad():
        # parameters, plus the one persistent buffer that is a weight (layer_scalar);
        # other buffers (embed_scale, RoPE inv_freq) are constants of the model
        tensors = list(model.named_parameters()) + [(n, b) for n, b in model.named_buffers() if n.endswith("layer_scalar")]
        for name, p in tensors:
            if not p.is_floating_point():
                continue
            if name.endswith("layer_scalar") or name.endswith("per_expert_scale"):
                p.copy_(torch.rand(p.shape, generator=gen) + 0.5)
            elif name.endswith("router.scale"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=gen))
            elif p.dim() == 3:   # stacked experts [n_expert, n_out, n_in]
                p.copy_(torch.randn(p.shape, generator=gen) * (1.5 / p.shape[2] ** 0.5))
            elif "norm" in name and p.dim() == 1:
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=gen))
            elif "embed" in name:
                p.copy_(torch.randn(p.shape, generator=gen))
            elif p.dim() == 2:
                p.copy_(torch.randn(p.shape, generator=gen) * (1.5 / p.shape[1] ** 0.5))


def randomize_qwen35(model, gen):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("linear_attn.norm.weight"):       # gated RMSNorm: x * w
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=gen))
            elif "norm" in name and p.dim() == 1:             # zero-centred: x * (1 + w)
                p.copy_(0.2 * torch.randn(p.shape, generator=gen))
            elif name.endswith("A_log"):
                p.copy_(torch.log(0.002 + 0.798 * torch.rand(p.shape, generator=gen)))
            elif name.endswith("dt_bias"):
                p.copy_(0.5 * torch.randn(p.shape, generator=gen))
            elif p.dim() == 3:   # conv1d [C, 1, K]
                p.copy_(torch.randn(p.shape, generator=gen) * (1.5 / p.shape[2] ** 0.5))
            elif "embed" in name:
                p.copy_(torch.randn(p.shape, generator=gen))
            elif p.dim() == 2:
                p.copy_(torch.randn(p.shape, generator=gen) * (1.5 / p.shape[1] ** 0.5))
            else:
                raise ValueError(f"randomize_qwen35: no rule for {name} {tuple(p.shape)}")


def add_mtp_head(td: Path, cfg, gen):
    """Give the saved tiny-qwen35 checkpoint a random multi-token-prediction
    head as Qwen3.5's published checkpoints carry one (mtp.* tensors,
    mtp_num_hidden_layers 1), so the converter writes it as llama.cpp does for
    real files: one extra block (blk.<n_layer>) with nextn tensors,
    block_count = n_layer + 1, nextn_predict_layers = 1. transformers ignores
    the head (its logits are the trunk's), and so must ember's trunk."""
    from safetensors.torch import load_file, save_file
    H, hd = cfg.hidden_size, cfg.head_dim
    nq, nkv, ff = cfg.num_attention_heads * hd, cfg.num_key_value_heads * hd, cfg.intermediate_size
    shapes = {
        "mtp.fc.weight": (H, 2 * H), "mtp.pre_fc_norm_embedding.weight": (H,),
        "mtp.pre_fc_norm_hidden.weight": (H,), "mtp.norm.weight": (H,),
        "mtp.layers.0.input_layernorm.weight": (H,), "mtp.layers.0.post_attention_layernorm.weight": (H,),
        "mtp.layers.0.self_attn.q_proj.weight": (2 * nq, H), "mtp.layers.0.self_attn.k_proj.weight": (nkv, H),
        "mtp.layers.0.self_attn.v_proj.weight": (nkv, H), "mtp.layers.0.self_attn.o_proj.weight": (H, nq),
        "mtp.layers.0.self_attn.q_norm.weight": (hd,), "mtp.layers.0.self_attn.k_norm.weight": (hd,),
        "mtp.layers.0.mlp.gate_proj.weight": (ff, H), "mtp.layers.0.mlp.up_proj.weight": (ff, H),
        "mtp.layers.0.mlp.down_proj.weight": (H, ff),
    }
    path = td / "model.safetensors"
    tensors = load_file(str(path))
    for name, shape in shapes.items():
        scale = 0.2 if len(shape) == 1 else 1.5 / shape[1] ** 0.5
        tensors[name] = (torch.randn(shape, generator=gen) * scale).contiguous()
    save_file(tensors, str(path), metadata={"format": "pt"})
    conf = json.loads((td / "config.json").read_text())
    conf["mtp_num_hidden_layers"] = 1
    (td / "config.json").write_text(json.dumps(conf, indent=2))


def recurrent_logits(model, ids):
    """transformers' decode path: one token at a time with its cache (the
    recurrent gated delta rule and conv update), for comparison with the
    chunked whole-sequence forward."""
    out, cache = [], None
    with torch.no_grad():
        for i, t in enumerate(ids):
            r = model(input_ids=torch.tensor([[t]]), past_key_values=cache, use_cache=True)
            cache = r.past_key_values
            out.append(r.logits[0, -1].float())
    return torch.stack(out)


def sequences(n_vocab, gen, bos):
    seqs = []
    for length in (1, 7, 16):
        ids = torch.randint(0, n_vocab, (length,), generator=gen).tolist()
        if bos is not None:
            ids[0] = bos
        seqs.append(ids)
    return seqs


def convert(llama: Path, src: Path, dst: Path, patch_pre: str | None, extra=()):
    env = dict(os.environ, PYTHONPATH=f"{llama / 'gguf-py'}{os.pathsep}{llama}")
    code = (
        "import sys, runpy\n"
        f"sys.path[:0] = [{str(llama / 'gguf-py')!r}, {str(llama)!r}]\n"
        f"sys.argv = ['convert_hf_to_gguf.py', {str(src)!r}, '--outtype', 'f32', '--outfile', {str(dst)!r}, *{list(extra)!r}]\n"
    )
    if patch_pre:
        code += ("import conversion.base as b\n"
                 f"b.TextModel.get_vocab_base_pre = lambda self, tokenizer: {patch_pre!r}\n")
    code += f"runpy.run_path({str(llama / 'convert_hf_to_gguf.py')!r}, run_name='__main__')\n"
    subprocess.run([sys.executable, "-c", code], check=True, env=env)


def write_chat_fixture(model, tok, script, path):
    """Oracle for the chat path: transformers renders the template
    (apply_chat_template, thinking on), tokenizes the prompt and decodes
    greedily; the reply must be the script."""
    import transformers
    prompt = tok.apply_chat_template(CHAT_MESSAGES, tools=CHAT_TOOLS, add_generation_prompt=True, tokenize=False,
                                     enable_thinking=True)
    prompt_ids = tok(prompt, add_special_tokens=False)["input_ids"]
    assert prompt_ids[-1] == script[0], "the prompt must end with the chain's first token"
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt_ids]), max_new_tokens=16, do_sample=False)
    gen_ids = out[0, len(prompt_ids):].tolist()
    assert gen_ids == script[1:], (gen_ids, script)
    rec = {
        "transformers": transformers.__version__, "messages": CHAT_MESSAGES, "tools": CHAT_TOOLS,
        "enable_thinking": True, "prompt": prompt, "prompt_ids": prompt_ids, "reply_ids": gen_ids,
        "reply_text": tok.decode(gen_ids[:-1], skip_special_tokens=False),
        "expected": {"reasoning_content": "Sunny in Paris.",
                     "tool_calls": [{"name": "weather", "arguments": {"city": "Paris"}}]},
    }
    path.write_text(json.dumps(rec, indent=1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama", type=Path, default=Path("/opt/llama/llama_cpp_python-0.3.36/vendor/llama.cpp"))
    ap.add_argument("--only", nargs="*")
    args = ap.parse_args()
    import transformers
    for name, (arch, cfg_fn, tok_fn, cls_name) in MODELS.items():
        if args.only and name not in args.only:
            continue
        gen = torch.Generator().manual_seed(sum(map(ord, name)))
        with tempfile.TemporaryDirectory() as tmp:
            td = Path(tmp) / name   # the converter names the model after its folder
            td.mkdir()
            n_vocab = tok_fn(td)
            cfg = cfg_fn(n_vocab)
            torch.manual_seed(0)
            model = getattr(transformers, cls_name)(cfg).eval().to(torch.float32)
            randomize(model, gen)
            script = None
            if name == "tiny-gemma4-chat":
                tok = transformers.AutoTokenizer.from_pretrained(td)
                script = script_weights(model, tok)
            model.save_pretrained(td)
            out_dir = HERE / arch
            out_dir.mkdir(exist_ok=True)
            gguf_path = out_dir / f"{name}.gguf"
            # qwen35: tiny-qwen35 gets an MTP head as real checkpoints have;
            # the MoE one has none (mtp_num_hidden_layers 0), which the
            # converter accepts only with --no-mtp
            if name == "tiny-qwen35":
                add_mtp_head(td, cfg, torch.Generator().manual_seed(35))
            convert(args.llama, td, gguf_path, PATCH_PRE.get(arch), ["--no-mtp"] if name == "tiny-qwen35moe" else [])
            if script is not None:
                write_chat_fixture(model, tok, script, out_dir / f"{name}.chat.json")
                print(f"{name}: {gguf_path.stat().st_size} bytes, vocab {n_vocab}")
                continue
            seqs = sequences(n_vocab, gen, cfg.bos_token_id)
            logits = []
            with torch.no_grad():
                for ids in seqs:
                    out = model(input_ids=torch.tensor([ids]), use_cache=False)
                    logits.append(out.logits[0].float().tolist())
            rec = {
                "model": name, "transformers": transformers.__version__, "torch": torch.__version__,
                "n_vocab": n_vocab, "sequences": seqs,
                "logits": [[[round(v, 7) for v in row] for row in seq] for seq in logits],
                "config": json.loads(cfg.to_json_string()),
            }
            (out_dir / f"{name}.logits.json").write_text(json.dumps(rec, separators=(",", ":")))
            if name in LONG:
                # one long sequence, drawn after the short ones (which stay as
                # they were): long enough that a KV cache of 32-token blocks
                # releases blocks behind the sliding window several times
                ids = torch.randint(0, n_vocab, (LONG[name],), generator=gen).tolist()
                if cfg.bos_token_id is not None:
                    ids[0] = cfg.bos_token_id
                with torch.no_grad():
                    lg = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0].float().tolist()
                if arch == "qwen35":
                    # the oracle's own two forms must meet before we trust it
                    rl = recurrent_logits(model, ids)
                    d = (rl - torch.tensor(lg)).abs().max().item()
                    scale = rl.abs().max().item()
                    print(f"{name}: transformers chunked vs recurrent max|diff| {d:.3g} (max|logit| {scale:.3g})")
                    assert d <= 1e-4 * scale, d
                    rec["chunked_vs_recurrent_max_abs_diff"] = d
                rec_long = dict(rec, sequences=[ids], logits=[[[round(v, 4) for v in row] for row in lg]])
                (out_dir / f"{name}.long.logits.json").write_text(json.dumps(rec_long, separators=(",", ":")))
            print(f"{name}: {gguf_path.stat().st_size} bytes, vocab {n_vocab}, "
                  f"max|logit| {max(abs(v) for s in logits for r in s for v in r):.3f}")


if __name__ == "__main__":
    main()
