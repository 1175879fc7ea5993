"""Vocabulary-only GGUF copies of a real model with another pre-tokenizer.

Used by make_goldens.py (to make goldens with llama.cpp) and by
tests/e2e/test_tokenizer.py (to recreate the same files for ember): the
SmolLM2 vocabulary and merges, every metadata key copied with gguf-py, no
tensors, and tokenizer.ggml.pre replaced. This exercises the llama-bpe,
qwen2 and default pre-tokenizers on a real 49,152-token BPE vocabulary.
"""
import gguf

VARIANT_PRES = ["llama-bpe", "qwen2", "default", "qwen35"]


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


# A tiny SentencePiece vocabulary with the options Gemma 3 does not use:
# add_space_prefix = true (a "▁" before the text and after each special
# token), add_eos_token = true, a user-defined token, and scores that decide
# the merge order.
TINY_SPM_PIECES = [
    ("▁", -1.0), ("e", -2.0), ("t", -2.1), ("a", -2.2), ("o", -2.3), ("h", -2.4), ("l", -2.5), ("n", -2.6),
    ("s", -2.7), ("i", -2.8), ("▁t", -3.0), ("he", -3.1), ("▁the", -3.2), ("▁a", -3.3), ("ll", -3.4),
    ("hell", -3.5), ("▁hello", -3.6), ("an", -3.7), ("▁an", -3.8), ("▁and", -3.9), ("nd", -4.0),
    ("in", -4.1), ("is", -4.2), ("▁is", -4.3), ("▁▁", -4.4), ("▁▁▁▁", -4.5), ("日", -5.0), ("本", -5.0),
    ("日本", -4.9), ("の", -5.1), ("é", -5.2), ("1", -6.0), ("2", -6.0), ("12", -5.5), (",", -6.1),
    (".", -6.2), ("\n", -6.3), ("<", -7.0), (">", -7.0), ("|", -7.0), ("▁<", -6.9),
]


def make_tiny_spm(dst):
    toks = ["<unk>", "<s>", "</s>", "<ctl>"] + ["<0x%02X>" % b for b in range(256)]
    types = [2, 3, 3, 3] + [6] * 256
    scores = [0.0] * len(toks)
    for t, s in TINY_SPM_PIECES:
        toks.append(t)
        types.append(1)
        scores.append(s)
    toks.append("<ud>")
    types.append(4)
    scores.append(0.0)
    w = gguf.GGUFWriter(str(dst), "llama")
    w.add_uint32("llama.context_length", 128)
    w.add_uint32("llama.embedding_length", 8)
    w.add_uint32("llama.block_count", 1)
    w.add_uint32("llama.feed_forward_length", 16)
    w.add_uint32("llama.attention.head_count", 1)
    w.add_string("tokenizer.ggml.model", "llama")
    w.add_array("tokenizer.ggml.tokens", toks)
    w.add_array("tokenizer.ggml.token_type", types)
    w.add_array("tokenizer.ggml.scores", scores)
    w.add_uint32("tokenizer.ggml.bos_token_id", 1)
    w.add_uint32("tokenizer.ggml.eos_token_id", 2)
    w.add_uint32("tokenizer.ggml.unknown_token_id", 0)
    w.add_bool("tokenizer.ggml.add_space_prefix", True)
    w.add_bool("tokenizer.ggml.add_bos_token", True)
    w.add_bool("tokenizer.ggml.add_eos_token", True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# A tiny byte-level BPE vocabulary (tokenizer.ggml.model = "gpt2") whose merges
# spell whole words that mix letters and combining marks (\p{M}), so the
# qwen35 pre-tokenizer (marks stay inside words) and qwen2 (marks split off)
# give different tokens. Used by make_marks_golden.py and test_tokenizer.py.
MARK_WORDS = ["नमस्ते", "दुनिया", "हिन्दी", "สวัสดี", "ครับ", "שָׁלוֹם", "مَرْحَبًا", "e\u0301te\u0301",
              "Cafe\u0301", "Tie\u0302\u0301ng", "Vie\u0323\u0302t", "a\u0308b\u0308c\u0308", "na\u0303o",
              "A\u030a", "ngstro\u0308m", "தமிழ்", "ಕನ್ನಡ"]


def _byte_chars():
    """GPT-2's byte -> printable character table (bytes_to_unicode)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def make_tiny_bpe_marks(dst, pre):
    bc = _byte_chars()
    toks = [bc[b] for b in range(256)]
    index = {t: i for i, t in enumerate(toks)}
    merges = []
    for w in MARK_WORDS:
        for word in (w, " " + w):
            chars = [bc[b] for b in word.encode()]
            cur = chars[0]
            for ch in chars[1:]:
                new = cur + ch
                if new not in index:
                    index[new] = len(toks)
                    toks.append(new)
                    merges.append(cur + " " + ch)
                cur = new
    toks.append("<|endoftext|>")
    types = [1] * (len(toks) - 1) + [3]
    w = gguf.GGUFWriter(str(dst), "gemma3")
    w.add_uint32("gemma3.context_length", 128)
    w.add_uint32("gemma3.embedding_length", 8)
    w.add_uint32("gemma3.block_count", 1)
    w.add_uint32("gemma3.feed_forward_length", 16)
    w.add_uint32("gemma3.attention.head_count", 1)
    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_string("tokenizer.ggml.pre", pre)
    w.add_array("tokenizer.ggml.tokens", toks)
    w.add_array("tokenizer.ggml.token_type", types)
    w.add_array("tokenizer.ggml.merges", merges)
    w.add_uint32("tokenizer.ggml.bos_token_id", len(toks) - 1)
    w.add_uint32("tokenizer.ggml.eos_token_id", len(toks) - 1)
    w.add_bool("tokenizer.ggml.add_bos_token", False)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
