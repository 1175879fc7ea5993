#!/usr/bin/env python3
"""Make tokenizer goldens with llama.cpp's tokenizer (the oracle).

usage: make_goldens.py [LLAMA_CPP_DIR]   (run make_corpus.py first)

Compiles oracle_llama.c against LLAMA_CPP_DIR (default: the llama-cpp-python
sdist's vendor/llama.cpp with its CPU build in build/bin), then for each model
writes golden_<name>.jsonl.gz, line i belonging to corpus line i (for BPE
models, invalid-UTF-8 lines are tokenized after sanitize_utf8):
  {"ids": [...]}                           add_special=false, parse_special=false
  "sp": [...]  (corpus lines with "s")     add_special=true,  parse_special=true
and a last line {"mixed_1mb": [...]} for mixed_1mb.txt (no specials), and
{"pieces": {id: base64}} with llama_token_to_piece(id, special=true) for
every id that appears above. control_ids.json: the ids of token_type 3
(control) and of the turn markers per real model, read with gguf-py.

Models: gemma3 (gemma-3-270m-q4_k_m.gguf, SentencePiece), smollm2
(SmolLM2-135M-Instruct.Q4_1.gguf, BPE pre=smollm) and smollm2 copies with
pre = llama-bpe, qwen2, default (variants.py), and tiny-gemma4, a handmade
gemma4 BPE vocabulary (variants.make_tiny_gemma4).
"""
import base64
import gzip
import json
import os
import pathlib
import struct
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import variants  # noqa: E402

MODELS = pathlib.Path(os.environ.get("EMBER_MODELS") or os.path.expanduser("~/.cache/ember/models"))


def sanitize_utf8(b):
    """Each byte that is not part of a well-formed UTF-8 sequence (Unicode
    Table 3-7: no overlongs, no surrogates, nothing above U+10FFFF) becomes
    U+FFFD, one per byte. ember's byte-level BPE applies this rule to its
    input; llama.cpp applies it only to some ill-formed bytes (and aborts on
    sequences above U+10FFFF), so the BPE goldens of invalid strings are the
    oracle's ids for the sanitized bytes."""
    out = bytearray()
    i = 0
    while i < len(b):
        c = b[i]
        n = 1 if c < 0x80 else 2 if 0xC2 <= c <= 0xDF else 3 if 0xE0 <= c <= 0xEF else 4 if 0xF0 <= c <= 0xF4 else 0
        if n:
            try:
                out += b[i:i + n].decode("utf-8").encode()
                i += n
                continue
            except UnicodeDecodeError:
                pass
        out += "\ufffd".encode()
        i += 1
    return bytes(out)


def load_corpus():
    out = []
    with gzip.open(HERE / "corpus.jsonl.gz", "rt", encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            b = r["t"].encode() if "t" in r else base64.b64decode(r["b"])
            out.append((b, bool(r.get("s")), "b" in r))
    return out


class Oracle:
    def __init__(self, exe, model):
        self.p = subprocess.Popen([exe, str(model)], stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def tokenize(self, b, add_special, parse_special, pieces=False):
        flags = (1 if add_special else 0) | (2 if parse_special else 0) | (4 if pieces else 0)
        self.p.stdin.write(struct.pack("<IB", len(b), flags) + b)
        self.p.stdin.flush()
        n = struct.unpack("<I", self.p.stdout.read(4))[0]
        ids = list(struct.unpack("<%di" % n, self.p.stdout.read(4 * n)))
        if not pieces:
            return ids
        ps = []
        for _ in range(n):
            ln = struct.unpack("<I", self.p.stdout.read(4))[0]
            ps.append(self.p.stdout.read(ln))
        return ids, ps

    def close(self):
        self.p.stdin.close()
        self.p.wait()


def main():
    llama = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else
                         "/opt/llama/llama_cpp_python-0.3.36/vendor/llama.cpp")
    tmp = pathlib.Path(tempfile.mkdtemp())
    exe = tmp / "oracle_llama"
    subprocess.check_call(["gcc", "-O2", "-o", str(exe), str(HERE / "oracle_llama.c"),
                           f"-I{llama}/include", f"-I{llama}/ggml/include", f"-L{llama}/build/bin",
                           "-lllama", f"-Wl,-rpath,{llama}/build/bin"])
    corpus = load_corpus()
    mixed = gzip.open(HERE / "mixed_1mb.txt.gz", "rb").read()
    smol = MODELS / "SmolLM2-135M-Instruct.Q4_1.gguf"
    models = [("gemma3", MODELS / "gemma-3-270m-q4_k_m.gguf"), ("smollm2", smol)]
    for pre in variants.VARIANT_PRES:
        dst = tmp / f"smollm2-{pre}.gguf"
        variants.make_variant(smol, dst, pre)
        models.append((f"smollm2-{pre}", dst))
    variants.make_tiny_gemma4(tmp / "tiny-gemma4.gguf")
    models.append(("tiny-gemma4", tmp / "tiny-gemma4.gguf"))
    for name, path in models:
        o = Oracle(str(exe), path)
        pieces = {}
        with gzip.GzipFile(HERE / f"golden_{name}.jsonl.gz", "wb", compresslevel=9, mtime=0) as gz:
            def put(obj):
                gz.write((json.dumps(obj, separators=(",", ":")) + "\n").encode())
            for b, sub, invalid in corpus:
                if invalid and name != "gemma3":
                    b = sanitize_utf8(b)
                ids, ps = o.tokenize(b, False, False, pieces=True)
                for i, p in zip(ids, ps):
                    pieces[i] = p
                rec = {"ids": ids}
                if sub:
                    ids2, ps2 = o.tokenize(b, True, True, pieces=True)
                    for i, p in zip(ids2, ps2):
                        pieces[i] = p
                    rec["sp"] = ids2
                put(rec)
            # (the tiny vocab spells most of the 1 MiB text byte by byte: skipped)
            put({"mixed_1mb": None if name.startswith("tiny") else o.tokenize(mixed, False, False)})
            put({"pieces": {str(k): base64.b64encode(v).decode() for k, v in sorted(pieces.items())}})
        o.close()
        print(name, "done")
    # control-token ids per real model, read with gguf-py (independent of ember)
    import gguf
    types = {}
    for name, path in models[:2]:
        r = gguf.GGUFReader(path)
        tt = r.fields["tokenizer.ggml.token_type"].contents()
        toks = r.fields["tokenizer.ggml.tokens"].contents()
        types[name] = {"control": [i for i, t in enumerate(tt) if t == 3],
                       "markers": {m: toks.index(m) for m in ("<start_of_turn>", "<|im_start|>") if m in toks}}
    (HERE / "control_ids.json").write_text(json.dumps(types, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main()
