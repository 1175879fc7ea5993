"""Vocabulary-only GGUF copies of a real model with another pre-tokenizer.

Used by make_goldens.py (to make goldens with llama.cpp) and by
tests/e2e/test_tokenizer.py (to recreate the same files for ember): the
SmolLM2 vocabulary and merges, every metadata key copied with gguf-py, no
tensors, and tokenizer.ggml.pre replaced. This exercises the llama-bpe,
qwen2 and default pre-tokenizers on a real 49,152-token BPE vocabulary.
"""
import gguf

VARIANT_PRES = ["llama-bpe", "qwen2", "default"]


def make_variants(src, dst_pre):
    """dst_pre: list of (path, pre). Reads src once (gguf-py's reader is slow)."""
    r = gguf.GGUFReader(src)
    for dst, pre in dst_pre:
        _write(r, dst, pre)


def make_variant(src, dst, pre):
    make_variants(src, [(dst, pre)])


def _write(r, dst, pre):
    arch = r.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(str(dst), arch)
    for key, f in r.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        val = f.contents()
        if key == "tokenizer.ggml.pre":
            val = pre
        vtype = gguf.GGUFValueType(f.types[0])
        sub = gguf.GGUFValueType(f.types[1]) if vtype == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(key, val, vtype, sub_type=sub)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# A tiny gemma4-style vocabulary (tokenizer.ggml.model = "gemma4": BPE over
# UTF-8 characters, U+2581 for spaces, <0xXX> byte fallback). No public
# Gemma 4 weights are reachable here, so llama.cpp's gemma4 tokenizer is run
# on this handmade vocabulary; the arch keys are only there so that
# llama.cpp's vocab-only loader accepts the file.
TINY_GEMMA4_TOKENS = (
    ["<pad>", "<eos>", "<bos>", "<unk>", "<|turn>", "<turn|>", "<|tool_response>", "</s>"]
    + ["<0x%02X>" % b for b in range(256)]
    + ["▁", "h", "e", "l", "o", "he", "ll", "hell", "hello", "▁hello", "\n", "\n\n", "w", "r", "d",
       "wo", "or", "▁w", "▁wor", "▁world", "rld", "é", "日", "本", "日本", "▁日本", "t", "th", "▁th",
       "▁the", "a", "n", "an", "▁a", "▁an", "nd", "▁and", "s", "i", "is", "▁is", "▁▁", "▁▁▁▁", ",", ".",
       "こ", "ん", "に", "ち", "は", "こん", "にち", "こんにち", "こんにちは", "😀", "1", "2", "12", "123",
       "<", ">", "|", "_", "\t"])
TINY_GEMMA4_MERGES = [
    "h e", "l l", "he ll", "hell o", "▁ hello", "w o", "o r", "▁ w", "▁w or", "r l", "rl d", "▁wor ld",
    "日 本", "▁ 日本", "t h", "▁ th", "▁th e", "a n", "▁ a", "▁a n", "n d", "▁an d", "i s", "▁ is",
    "▁ ▁", "▁▁ ▁▁", "こ ん", "に ち", "こん にち", "こんにち は", "1 2", "12 3",
]


def make_tiny_gemma4(dst):
    toks = TINY_GEMMA4_TOKENS
    types = [3, 3, 3, 2, 3, 3, 3, 1] + [6] * 256 + [1] * (len(toks) - 264)
    w = gguf.GGUFWriter(str(dst), "gemma3")
    w.add_uint32("gemma3.context_length", 128)
    w.add_uint32("gemma3.embedding_length", 8)
    w.add_uint32("gemma3.block_count", 1)
    w.add_uint32("gemma3.feed_forward_length", 16)
    w.add_uint32("gemma3.attention.head_count", 1)
    w.add_string("tokenizer.ggml.model", "gemma4")
    w.add_string("tokenizer.ggml.pre", "gemma4")
    w.add_array("tokenizer.ggml.tokens", toks)
    w.add_array("tokenizer.ggml.token_type", types)
    w.add_array("tokenizer.ggml.scores", [0.0] * len(toks))
    w.add_array("tokenizer.ggml.merges", TINY_GEMMA4_MERGES)
    w.add_uint32("tokenizer.ggml.bos_token_id", 2)
    w.add_uint32("tokenizer.ggml.eos_token_id", 1)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
