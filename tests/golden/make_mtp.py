#!/usr/bin/env python3
"""Make tiny random Gemma 4 MTP drafts ("assistant" models, docs/mtp.md) for
the tiny Gemma 4 target of tests/golden/dflash/tiny-dflash-target.gguf.

Writes tests/golden/mtp/:
  tiny-mtp-draft.gguf        transformers' Gemma4AssistantForCausalLM with
                             random weights (2 layers: sliding + full, all
                             KV-shared with the target, n_embd 32, backbone
                             64), converted by llama.cpp's own
                             convert_hf_to_gguf.py (architecture
                             gemma4-assistant, F32)
  tiny-mtp-draft-const.gguf  the same shape whose last FFN adds a constant
                             along the draft's embedding of the token the
                             target repeats (tiny-dflash.json
                             const_draft_token), so it drafts that token
                             whatever it reads: drafts are accepted once the
                             target repeats it, rejected before (the lossless
                             test needs both); how: gate = up = [I; -I] with
                             ffn_norm 1 gives gelu(h_i) h_i + gelu(-h_i)(-h_i)
                             = h_i^2 (tanh-GELU too), whose sum is n_embd
                             whatever the input; down has every column along e
  tiny-mtp.json              configs, what gguf-py reads from each file
                             (architecture keys, tensor shapes), and transformers' drafts: for each
                             step s of the target's greedy continuation, the
                             committed tokens prompt + cont[:s], the token
                             being drafted from (cont[s], at position
                             L = len(prompt) + s) and what the assistant
                             drafts from it, chained N_DRAFT times as
                             transformers' SinglePositionMultiTokenCandidateGenerator
                             does (generation/candidate_generator.py): input
                             concat(target_embed(token), h), h = the target's
                             post-final-norm state at position L - 1 first,
                             then the assistant's post_projection output;
                             position L every step; K/V = the target's
                             shared_kv_states (its last non-shared sliding /
                             full layer) of positions < L. Sliding layers get
                             the last sliding_window - 1 of them, as
                             llama.cpp's mask gives a query at L (cells with
                             L - p < sliding_window; cell L does not exist).
                             Logits of every draft step for s = 0.

The target is rebuilt exactly as make_dflash.py builds it (same generator
draws, transformers 5.24.0); the script checks its conversion equals the
committed tiny-dflash-target.gguf tensor for tensor.

Run (torch + transformers with Gemma 4 + tokenizers + safetensors):
  python tests/golden/make_mtp.py --llama /path/to/llama_cpp_python-0.3.36/vendor/llama.cpp
"""
import argparse
import json
import sys
import tempfile
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import make_tiny_models as mt  # noqa: E402
import make_dflash as md  # noqa: E402

OUT = HERE / "mtp"
N_DRAFT = 4


def full_head_dim(t):
    """The full layers' head dim (Gemma4TextConfig keeps it per layer)."""
    hd = {c["head_dim"] for i, c in t["per_layer_config"].items() if t["layer_types"][int(i)] == "full_attention"}
    assert len(hd) == 1
    return hd.pop()


def assistant_config(n_vocab, t, n_ff=48):
    """t: the target's config as a dict (per-layer attributes read plainly)."""
    from transformers import Gemma4AssistantConfig, Gemma4TextConfig
    text = Gemma4TextConfig(
        vocab_size=n_vocab, vocab_size_per_layer_input=0, hidden_size=32, intermediate_size=n_ff,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=t["num_key_value_heads"],
        head_dim=t["head_dim"], global_head_dim=full_head_dim(t), max_position_embeddings=256,
        rms_norm_eps=1e-6, sliding_window=t["sliding_window"], layer_types=["sliding_attention", "full_attention"],
        rope_parameters=t["rope_parameters"], hidden_size_per_layer_input=0, num_kv_shared_layers=2,
        use_double_wide_mlp=False, enable_moe_block=False, attention_k_eq_v=False, tie_word_embeddings=True,
        pad_token_id=0, eos_token_id=1, bos_token_id=2,
    )
    return Gemma4AssistantConfig(text_config=text, backbone_hidden_size=t["hidden_size"], tie_word_embeddings=True)


def make_const(model, tok):
    """The last layer's FFN output lies along e = E_draft[tok] / |E_draft[tok]|
    for any input; its post-FFN norm (x 50) makes it dominate the stream."""
    m = model.model
    H = m.config.hidden_size
    lay = m.layers[-1]
    assert lay.mlp.gate_proj.weight.shape[0] == 2 * H
    e = m.embed_tokens.weight[tok].detach().float()
    e = e / e.norm()
    eye = torch.eye(H)
    with torch.no_grad():
        lay.pre_feedforward_layernorm.weight.fill_(1.0)
        lay.mlp.gate_proj.weight.copy_(torch.cat([eye, -eye]))
        lay.mlp.up_proj.weight.copy_(torch.cat([eye, -eye]))
        lay.mlp.down_proj.weight.copy_(e[:, None].expand(H, 2 * H) / H)
        lay.post_feedforward_layernorm.weight.fill_(50.0)


def drafts(target, assistant, tokens, id_last, sliding_window, n):
    """transformers' chained drafting from id_last at position len(tokens)."""
    L = len(tokens)
    with torch.no_grad():
        out = target.model(input_ids=torch.tensor([tokens]), use_cache=False, return_shared_kv_states=True)
        h = out.last_hidden_state[:, -1:]            # post-final-norm, position L - 1
        kv = dict(out.shared_kv_states)
        ks, vs = kv["sliding_attention"]
        w = sliding_window - 1
        kv = {"full_attention": kv["full_attention"],
              "sliding_attention": (ks[:, :, -w:], vs[:, :, -w:])}
        emb = target.model.embed_tokens
        tok = torch.tensor([[id_last]])
        pos = torch.tensor([[L]])
        got, logits = [], []
        for _ in range(n):
            x = torch.cat([emb(tok), h], dim=-1)
            o = assistant(inputs_embeds=x, position_ids=pos, shared_kv_states=kv, use_cache=False)
            tok = o.logits.argmax(dim=-1)
            h = o.last_hidden_state
            got.append(int(tok))
            logits.append([round(v, 6) for v in o.logits[0, 0].tolist()])
    return got, logits


def gguf_view(gguf, path):
    """What gguf-py reads from a converted file: the architecture's scalar and
    array keys, and every tensor's ne (inner dimension first)."""
    r = gguf.GGUFReader(path)
    arch = r.fields["general.architecture"].contents()
    keys = {k: f.contents() for k, f in r.fields.items() if k.startswith(arch + ".")}
    return {"architecture": arch, "keys": keys,
            "tensors": {t.name: [int(x) for x in t.shape] for t in r.tensors},
            "n_vocab": len(r.fields["tokenizer.ggml.tokens"].contents())}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama", type=Path, required=True, help="llama.cpp tree (the sdist's vendor/llama.cpp)")
    args = ap.parse_args()
    import transformers
    sys.path.insert(0, str(args.llama / "gguf-py"))
    import gguf
    import numpy as np
    OUT.mkdir(exist_ok=True)
    rec_dflash = json.loads((HERE / "dflash" / "tiny-dflash.json").read_text())
    gen = torch.Generator().manual_seed(1616)    # make_dflash.py's draws, in its order
    with tempfile.TemporaryDirectory() as tmp:
        td = Path(tmp) / "tiny-dflash-target"
        td.mkdir()
        n_vocab = mt.gemma4_tokenizer(td)
        tcfg = md.target_config(n_vocab)
        torch.manual_seed(0)
        target = transformers.Gemma4ForCausalLM(tcfg).eval().to(torch.float32)
        mt.randomize(target, gen)
        target.save_pretrained(td)
        tg = Path(tmp) / "target.gguf"
        mt.convert(args.llama, td, tg, None)
        a, b = gguf.GGUFReader(tg), gguf.GGUFReader(HERE / "dflash" / "tiny-dflash-target.gguf")
        ta = {t.name: np.array(t.data) for t in a.tensors}
        tb = {t.name: np.array(t.data) for t in b.tensors}
        assert ta.keys() == tb.keys() and all(np.array_equal(ta[k], tb[k]) for k in ta), \
            "the rebuilt target differs from tests/golden/dflash/tiny-dflash-target.gguf"

        tdict = json.loads(tcfg.to_json_string())
        prompt, cont = rec_dflash["prompt"], rec_dflash["greedy_continuation"]
        const_tok = rec_dflash["const_draft_token"]
        made = {}
        for name, n_ff, seed, const in (("tiny-mtp-draft", 48, 1618, False), ("tiny-mtp-draft-const", 64, 1619, True)):
            acfg = assistant_config(n_vocab, tdict, n_ff)
            torch.manual_seed(0)
            asst = transformers.Gemma4AssistantForCausalLM(acfg).eval().to(torch.float32)
            mt.randomize(asst, torch.Generator().manual_seed(seed))
            if const:
                make_const(asst, const_tok)
            dd = Path(tmp) / name
            dd.mkdir()
            asst.save_pretrained(dd)
            mt.gemma4_tokenizer(dd)
            mt.convert(args.llama, dd, OUT / f"{name}.gguf", None)
            steps = []
            for s in range(len(cont) - 1):
                toks = prompt + cont[:s]
                d, lg = drafts(target, asst, toks, cont[s], tdict["sliding_window"], N_DRAFT)
                step = {"tokens": toks, "id_last": cont[s], "pos": len(toks), "drafts": d}
                if s == 0:
                    step["logits"] = lg
                steps.append(step)
            made[name] = {"config": json.loads(acfg.to_json_string()), "steps": steps,
                          "gguf": gguf_view(gguf, OUT / f"{name}.gguf")}
    rec = {
        "transformers": transformers.__version__, "torch": torch.__version__, "n_vocab": n_vocab,
        "target": "../dflash/tiny-dflash-target.gguf", "n_draft": N_DRAFT,
        "prompt": prompt, "greedy_continuation": cont, "const_draft_token": const_tok,
        "sliding_keys": tdict["sliding_window"] - 1, "drafts": made,
    }
    (OUT / "tiny-mtp.json").write_text(json.dumps(rec, indent=1))
    for f in ("tiny-mtp-draft.gguf", "tiny-mtp-draft-const.gguf"):
        print(f, (OUT / f).stat().st_size, "bytes")


if __name__ == "__main__":
    main()
