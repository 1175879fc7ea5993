#!/usr/bin/env python3
"""Make the tiny random Gemma 4 target and its tiny DFlash draft (docs/dflash.md).

Writes tests/golden/dflash/:
  tiny-dflash-target.gguf  a Gemma 4 E-shaped target (PLE, KV sharing, both
                           layer types), transformers' Gemma4ForCausalLM with
                           random weights, converted by llama.cpp (F32)
  tiny-dflash-draft.gguf   a DFlash draft for it (architecture `dflash`):
                           a Qwen3-shaped 2-layer block stack, fc over the
                           inputs of 4 target layers, hidden_norm, final norm;
                           no embedding or LM head of its own (it uses the
                           target's, as the published Gemma 4 drafts do);
                           block_size 8, mask token 4 (<mask>)
  tiny-dflash-draft-const.gguf  the same draft shape with n_ff 128 whose last
                           FFN adds a constant 100 * e (e: the unit target
                           embedding of the token the target repeats in
                           its greedy continuation), so it drafts that token
                           at every block position: drafts are then accepted
                           (once the target repeats it) and rejected (before),
                           which the lossless test needs; how: with the
                           FFN input h = RMSNorm(x) (weight 1), units +h_i and
                           -h_i give silu(h_i) h_i + silu(-h_i)(-h_i) = h_i^2,
                           whose sum is n_embd whatever x is
  tiny-dflash.json         what was made: configs, target_layer_ids (HF) and
                           the target_layers the converter wrote (HF + 1),
                           transformers' greedy continuation of a prompt and
                           its hidden states at the prompt's positions after
                           each target_layer_id (hidden_states[id + 1])

Conversion is llama.cpp's own convert_hf_to_gguf.py with its gguf-py, the
draft with `--target-model-dir` (the converter takes the draft's vocabulary
from the target's directory through the target's own vocab handler).

The draft's safetensors and config.json are written by hand with the names
the converter maps (conversion/qwen.py DFlashModel, gguf-py tensor_mapping:
model.fc, model.hidden_norm, model.norm, model.layers.N.{input_layernorm,
self_attn.{q,k,v,o}_proj, self_attn.{q,k}_norm, post_attention_layernorm,
mlp.{gate,up,down}_proj}); transformers has no DFlash class.

Weights: the target as make_tiny_models.py draws them (randomize); the draft
matrices N(0, 1/fan_in) * 1.5, norms 1 + N(0, 0.2). Random weights draft
poorly, which is what the lossless test needs (rejections and acceptances
both happen at temperature 0 only when some drafted tokens match; fc is
scaled so the draft follows the features strongly).

Run (torch + transformers with Gemma 4 + tokenizers + safetensors):
  python tests/golden/make_dflash.py --llama /path/to/llama_cpp_python-0.3.36/vendor/llama.cpp
"""
import argparse
import json
import sys
import tempfile
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import make_tiny_models as mt  # noqa: E402  (the tokenizer, randomize, convert)

OUT = HERE / "dflash"

# HF dflash_config.target_layer_ids: 0-based target layers whose OUTPUT the
# draft reads; the converter writes them + 1 (the input of the next layer).
TARGET_LAYER_IDS = [0, 2, 3, 4]
BLOCK_SIZE = 8
MASK_TOKEN_ID = 4   # "<mask>" in make_tiny_models.SPECIALS


def target_config(n_vocab):
    """Gemma 4 E-shaped: 6 layers, PLE, 2 KV-shared layers, sliding + full."""
    return mt.gemma4_e_config(n_vocab)


def draft_config(n_vocab, n_embd, n_ff=96):
    return {
        "architectures": ["DFlashDraftModel"],
        "model_type": "qwen3",
        "hidden_size": n_embd,
        "intermediate_size": n_ff,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
        "max_position_embeddings": 256,
        "vocab_size": n_vocab,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "attention_bias": False,
        "block_size": BLOCK_SIZE,
        "dflash_config": {"mask_token_id": MASK_TOKEN_ID, "target_layer_ids": TARGET_LAYER_IDS,
                          "block_size": BLOCK_SIZE},
        "torch_dtype": "float32",
    }


def draft_tensors(cfg, n_embd_target, gen):
    H, hd = cfg["hidden_size"], cfg["head_dim"]
    nq, nkv, ff = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd, cfg["intermediate_size"]
    n_in = len(TARGET_LAYER_IDS) * n_embd_target
    shapes = {"model.fc.weight": (H, n_in), "model.hidden_norm.weight": (H,), "model.norm.weight": (H,)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes.update({
            p + "input_layernorm.weight": (H,), p + "post_attention_layernorm.weight": (H,),
            p + "self_attn.q_proj.weight": (nq, H), p + "self_attn.k_proj.weight": (nkv, H),
            p + "self_attn.v_proj.weight": (nkv, H), p + "self_attn.o_proj.weight": (H, nq),
            p + "self_attn.q_norm.weight": (hd,), p + "self_attn.k_norm.weight": (hd,),
            p + "mlp.gate_proj.weight": (ff, H), p + "mlp.up_proj.weight": (ff, H),
            p + "mlp.down_proj.weight": (H, ff),
        })
    out = {}
    for name, shape in shapes.items():
        if len(shape) == 1:
            t = 1.0 + 0.2 * torch.randn(shape, generator=gen)
        else:
            t = torch.randn(shape, generator=gen) * (1.5 / shape[1] ** 0.5)
        out[name] = t.contiguous()
    return out


def make_const(tensors, cfg, e_unit):
    """The last layer's FFN adds 100 * e_unit for any input (see the docstring)."""
    H, ff, last = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"] - 1
    assert ff == 2 * H
    p = f"model.layers.{last}."
    eye = torch.eye(H)
    tensors[p + "post_attention_layernorm.weight"] = torch.ones(H)
    tensors[p + "mlp.gate_proj.weight"] = torch.cat([eye, -eye]).contiguous()
    tensors[p + "mlp.up_proj.weight"] = torch.cat([eye, -eye]).contiguous()
    tensors[p + "mlp.down_proj.weight"] = (100.0 / H * e_unit[:, None].expand(H, ff)).contiguous()
    return tensors


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama", type=Path, required=True, help="llama.cpp tree (the sdist's vendor/llama.cpp)")
    args = ap.parse_args()
    import transformers
    from safetensors.torch import save_file
    OUT.mkdir(exist_ok=True)
    gen = torch.Generator().manual_seed(1616)
    with tempfile.TemporaryDirectory() as tmp:
        td = Path(tmp) / "tiny-dflash-target"   # the converter names the model after its folder
        td.mkdir()
        n_vocab = mt.gemma4_tokenizer(td)
        tcfg = target_config(n_vocab)
        torch.manual_seed(0)
        model = transformers.Gemma4ForCausalLM(tcfg).eval().to(torch.float32)
        mt.randomize(model, gen)
        model.save_pretrained(td)
        mt.convert(args.llama, td, OUT / "tiny-dflash-target.gguf", None)

        dd = Path(tmp) / "tiny-dflash-draft"
        dd.mkdir()
        dcfg = draft_config(n_vocab, tcfg.hidden_size)
        (dd / "config.json").write_text(json.dumps(dcfg, indent=2))
        save_file(draft_tensors(dcfg, tcfg.hidden_size, gen), str(dd / "model.safetensors"), metadata={"format": "pt"})
        mt.convert(args.llama, dd, OUT / "tiny-dflash-draft.gguf", None, ["--target-model-dir", str(td)])

        # a greedy continuation by transformers (the target alone), for the record
        prompt = [tcfg.bos_token_id] + torch.randint(5, n_vocab, (11,), generator=gen).tolist()
        with torch.no_grad():
            g = model.generate(torch.tensor([prompt]), max_new_tokens=24, do_sample=False)[0].tolist()
            # the states the draft reads: transformers' hidden_states[i + 1] (the
            # input of layer i + 1 = the output of layer i) for i in target_layer_ids
            hs = model(input_ids=torch.tensor([prompt]), output_hidden_states=True, use_cache=False).hidden_states
            feats = {str(i): [[round(v, 6) for v in row] for row in hs[i + 1][0].float().tolist()] for i in TARGET_LAYER_IDS}

        # the constant draft: the token the continuation repeats most
        cont = g[len(prompt):]
        const_tok = max(set(cont), key=cont.count)
        e = model.model.embed_tokens.weight[const_tok].detach().float()
        cd = Path(tmp) / "tiny-dflash-draft-const"
        cd.mkdir()
        ccfg = draft_config(n_vocab, tcfg.hidden_size, n_ff=2 * tcfg.hidden_size)
        (cd / "config.json").write_text(json.dumps(ccfg, indent=2))
        ct = make_const(draft_tensors(ccfg, tcfg.hidden_size, torch.Generator().manual_seed(1617)), ccfg, e / e.norm())
        save_file(ct, str(cd / "model.safetensors"), metadata={"format": "pt"})
        mt.convert(args.llama, cd, OUT / "tiny-dflash-draft-const.gguf", None, ["--target-model-dir", str(td)])
    rec = {
        "transformers": transformers.__version__, "torch": torch.__version__, "n_vocab": n_vocab,
        "target_config": json.loads(tcfg.to_json_string()), "draft_config": dcfg,
        "target_layer_ids": TARGET_LAYER_IDS, "gguf_target_layers": [i + 1 for i in TARGET_LAYER_IDS],
        "block_size": BLOCK_SIZE, "mask_token_id": MASK_TOKEN_ID,
        "prompt": prompt, "greedy_continuation": g[len(prompt):], "const_draft_token": const_tok,
        "prompt_hidden_states": feats,
    }
    (OUT / "tiny-dflash.json").write_text(json.dumps(rec, indent=1))
    for f in ("tiny-dflash-target.gguf", "tiny-dflash-draft.gguf", "tiny-dflash-draft-const.gguf"):
        print(f, (OUT / f).stat().st_size, "bytes")


if __name__ == "__main__":
    main()
