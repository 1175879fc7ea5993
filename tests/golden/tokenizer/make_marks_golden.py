#!/usr/bin/env python3
"""Goldens for the qwen35 pre-tokenizer where it differs from qwen2: words
with combining marks (\\p{M}: Devanagari and Thai vowel signs, Hebrew and
Arabic points, decomposed Latin accents, enclosing marks). On SmolLM2's
vocabulary (smollm2-qwen35 in the main goldens) both pre-tokenizers give the
same ids, as no merge spans a letter and a mark there; the tiny vocabulary of
variants.make_tiny_bpe_marks has such merges, so there they differ.

usage: make_marks_golden.py [LLAMA_CPP_DIR]  (as make_goldens.py; same oracle)
Writes golden_marks.json: {"strings": [...], "<pre>": [[ids] per string]}
for the tiny marks vocabulary with pre qwen2 and qwen35, add_special and
parse_special off.
"""
import json
import pathlib
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import variants  # noqa: E402
from make_goldens import Oracle  # noqa: E402

STRINGS = [
    "नमस्ते दुनिया", "हिन्दी भाषा", "สวัสดีครับ", "ภาษาไทย", "שָׁלוֹם עוֹלָם", "مَرْحَبًا بِكُم",
    "e\u0301te\u0301", "Cafe\u0301 au lait", "Tie\u0302\u0301ng Vie\u0323\u0302t", "a\u0308b\u0308c\u0308",
    "na\u0303o", " \u0301start", "x\u20dd y", "1\u0301 2", "A\u030a ngstro\u0308m", "ক্ষমা করবেন",
    "தமிழ் மொழி", "ಕನ್ನಡ", "'s\u0301 don't", "Z\u0335a\u0336l\u0337g\u0338o\u0334",
]
PRES = ["qwen2", "qwen35"]


def main():
    llama = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "/opt/llama/llama_cpp_python-0.3.36/vendor/llama.cpp")
    tmp = pathlib.Path(tempfile.mkdtemp())
    exe = tmp / "oracle_llama"
    subprocess.check_call(["gcc", "-O2", "-o", str(exe), str(HERE / "oracle_llama.c"),
                           f"-I{llama}/include", f"-I{llama}/ggml/include", f"-L{llama}/build/bin",
                           "-lllama", f"-Wl,-rpath,{llama}/build/bin"])
    out = {"strings": STRINGS}
    for pre in PRES:
        dst = tmp / f"tiny-marks-{pre}.gguf"
        variants.make_tiny_bpe_marks(dst, pre)
        o = Oracle(str(exe), dst)
        out[pre] = [o.tokenize(s.encode(), False, False) for s in STRINGS]
        o.close()
    differ = sum(a != b for a, b in zip(out[PRES[0]], out[PRES[1]]))
    print(f"{differ} of {len(STRINGS)} strings tokenize differently under qwen35 than qwen2")
    assert differ >= len(STRINGS) // 2
    (HERE / "golden_marks.json").write_text(json.dumps(out, ensure_ascii=False, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main()
