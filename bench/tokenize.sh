#!/bin/sh
# bench/tokenize.sh — tokenizer speed, ember vs llama.cpp, same file and machine.
#
# usage: bench/tokenize.sh [LLAMA_CPP_DIR]  (after `cmake --build build`)
# Both sides load the vocabulary only and call their tokenize function in
# process on the 1 MiB mixed text (tests/golden/tokenizer/mixed_1mb.txt.gz),
# add_special=false, parse_special=false; the minimum and median of REPEATS
# runs are printed (load time separately). Models: gemma3 (SPM) and smollm2
# (BPE) from ~/.cache/ember/models.
set -e
ROOT=$(cd "$(dirname "$0")/.." && pwd)
LLAMA=${1:-/opt/llama/llama_cpp_python-0.3.36/vendor/llama.cpp}
MODELS=${EMBER_MODELS:-$HOME/.cache/ember/models}
REPEATS=${REPEATS:-5}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
gzip -dc "$ROOT/tests/golden/tokenizer/mixed_1mb.txt.gz" > "$TMP/mixed.txt"
gcc -O2 -o "$TMP/tokenize_llama" "$ROOT/bench/llama/tokenize_llama.c" \
    -I"$LLAMA/include" -I"$LLAMA/ggml/include" -L"$LLAMA/build/bin" -lllama -Wl,-rpath,"$LLAMA/build/bin"
for m in gemma-3-270m-q4_k_m.gguf SmolLM2-135M-Instruct.Q4_1.gguf; do
    echo "== $m ($(wc -c < "$TMP/mixed.txt") bytes, $REPEATS repeats)"
    "$ROOT/build/bench/tokenize" "$MODELS/$m" "$TMP/mixed.txt" "$REPEATS"
    "$TMP/tokenize_llama" "$MODELS/$m" "$TMP/mixed.txt" "$REPEATS"
done
