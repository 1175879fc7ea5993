#!/bin/sh
# bench/grammar.sh — grammar-constrained sampling step, ember vs llama.cpp,
# same GBNF (compiled by ember from bench/grammar.c's schema), same token
# trace and logits, same machine. Results go to bench/results/grammar.md by hand.
#
# usage: bench/grammar.sh [LLAMA_CPP_DIR]   (after `cmake --build build`)
set -e
ROOT=$(cd "$(dirname "$0")/.." && pwd)
LLAMA=${1:-/opt/llama/llama_cpp_python-0.3.36/vendor/llama.cpp}
MODEL=${EMBER_MODELS:-$HOME/.cache/ember/models}/gemma-3-270m-q4_k_m.gguf
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
gcc -O2 -o "$TMP/grammar_llama" "$ROOT/bench/llama/grammar_llama.c" \
    -I"$LLAMA/include" -I"$LLAMA/ggml/include" -L"$LLAMA/build/bin" -lllama -Wl,-rpath,"$LLAMA/build/bin" -lm
echo "== ember"
"$ROOT/build/bench/grammar" "$MODEL" "$TMP" "${PASSES:-9}"
echo "== llama.cpp"
"$TMP/grammar_llama" "$MODEL" "$TMP" "${LLAMA_PASSES:-3}"
