#!/bin/bash
# bench/gpu/cudaq8_check.sh MODEL — the CUDA backend's agreement with the CPU backend (issue 7:
# >= 15 of 16 greedy 128-token continuations equal). Run on the GPU machine from the repository
# root after
#   cmake -S . -B build-cuda -DEMBER_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90-real -DCMAKE_BUILD_TYPE=Release
#   cmake --build build-cuda -j16
# MODEL: Gemma 3 270M Q4_K_M, full or cut by bench/gpu/cut_gemma3_gguf.py (CPU vs CUDA in one
# process either way; the full model is also compared with llama.cpp's golden continuations).
# Writes $OUT/summary.txt (the lines to read) and one log per step. STEPS picks steps (default
# "tests exact default old verify bench"; ~2 minutes on an H200 with the full model).
set -u
STEPS=" ${STEPS:-tests exact default old verify bench} "
on() { [[ "$STEPS" == *" $1 "* ]]; }
M=${1:?usage: bench/gpu/cudaq8_check.sh MODEL}
B=${B:-build-cuda}
OUT=${OUT:-/tmp/cudaq8}
mkdir -p "$OUT"
S=$OUT/summary.txt
: > "$S"
G=()
[ "$(stat -c %s "$M")" -gt 100000000 ] && G=(-g tests/golden/runtime/gemma3-270m.json)
log() { echo "=== $*" | tee -a "$S"; }
log "model $M ($(stat -c %s "$M") bytes) ${G[*]}"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> "$S" 2>&1
grep -m1 "model name" /proc/cpuinfo >> "$S"; grep -o -m1 "avx512_vnni" /proc/cpuinfo >> "$S"

on tests && log "GPU unit tests (q8 mat-vec and row ops bit for bit against the CPU backend, then the older ones)"
on tests && for t in test_cuda_q8 test_cuda_exact test_cuda_matmul test_cuda_ops test_cuda_attn; do
  timeout 180 "$B/tests/$t" > "$OUT/$t.txt" 2>&1
  echo "$t rc $?" | tee -a "$S"
  grep -E "identical|differ|variant|FAILED|ERROR|error|mismatch|SKIP|no CUDA" "$OUT/$t.txt" | cut -c1-300 | head -60 >> "$S"
done

check() {
  local name=$1; shift
  env "$@" timeout 400 "$B/bench/cuda_check" "$M" "${G[@]}" > "$OUT/check_$name.txt" 2>&1
  echo "cuda_check [$name: $*] rc $?: $(grep -E 'equal continuations|equal to llama|^time' "$OUT/check_$name.txt" | tr '\n' ' ')" | tee -a "$S"
}
log "greedy agreement, 16 prompts x 128 tokens"
on exact && check exact EMBER_CUDA_EXACT=1          # q8 mat-vec for every batch, CPU-order attention
on default && check default EMBER_CUDA_DEFAULT=1      # q8 mat-vec for <= 32 tokens, fast attention
on old && check old EMBER_CUDA_Q8=0 EMBER_CUDA_ROPE_TABLE=0   # before this work (A/B)

if on verify; then
  log "per-op worst difference inside the forward pass (EMBER_CUDA_VERIFY, exact mode, 2 prompts x 8 tokens)"
  EMBER_CUDA_VERIFY=1 EMBER_CUDA_EXACT=1 timeout 200 "$B/bench/cuda_check" "$M" "${G[@]}" -p 2 -n 8 > "$OUT/verify.txt" 2>&1
  grep -E "worst max" "$OUT/verify.txt" | cut -c1-600 | tee -a "$S"
fi

on bench && log "decode speed, tg128 (q8 default vs EMBER_CUDA_Q8=0)"
on bench && for v in 1 0; do
  EMBER_CUDA_Q8=$v timeout 120 "$B/bin/ember" bench -m "$M" -ngl 99 -p 0 -n 128 -r 3 2>&1 | grep -E "tg|gemma" | sed "s/^/Q8=$v /" | tee -a "$S"
done
