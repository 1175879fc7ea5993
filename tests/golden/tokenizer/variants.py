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
