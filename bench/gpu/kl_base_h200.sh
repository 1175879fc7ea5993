#!/bin/bash
# bench/gpu/kl_base_h200.sh — issue 15 item 4 the way llama-perplexity's --kl-divergence is used:
# one run saves a high-precision base (CUDA with F32 activations, no TF32, no f16 GEMM, the
# flash-decoding attention: EMBER_CUDA_F32_ACT=1 EMBER_CUDA_GEMM_F16=0 EMBER_CUDA_TF32=0
# EMBER_CUDA_ATTN_TC=0), then the CUDA default and the CPU backend are each measured against it,
# over the prompt path (-b 512) and the decode path (-b 1, fewer chunks).
# Inputs: MODEL (a GGUF), TEXT (default tests/data/pride_prejudice.txt), EMBER (the binary),
# CHUNKS (default 8). Output: $OUT/kl-base.txt (every run's statistics) and $OUT/kl-*.json.
set -u
: "${OUT:?set OUT}" "${MODEL:?set MODEL}" "${EMBER:?set EMBER}"
T=${TEXT:-tests/data/pride_prejudice.txt}
N=${CHUNKS:-8}
R=$OUT/kl-base.txt
run() {  # label args...
  local l=$1; shift
  echo "=== $l" >> "$R"
  timeout 300 "$@" 2>&1 | grep -E "Final|Mean|KLD|Same top|error|cannot|differ" >> "$R"
}
F32="EMBER_CUDA_F32_ACT=1 EMBER_CUDA_GEMM_F16=0 EMBER_CUDA_TF32=0 EMBER_CUDA_ATTN_TC=0"
run "base: CUDA all-F32 mode, -b 512, $N chunks of 512 (saved)" env $F32 $EMBER perplexity -m $MODEL -f $T -c 512 \
  --chunks $N -ngl 99 --kl-divergence-base /tmp/klbase.bin
run "CUDA default vs base, -b 512" $EMBER perplexity -m $MODEL -f $T -c 512 --chunks $N -ngl 99 \
  --kl-divergence-base /tmp/klbase.bin --kl-divergence --kl-json $OUT/kl-cuda.json
run "CPU backend vs base, -b 512" $EMBER perplexity -m $MODEL -f $T -c 512 --chunks $N -ngl 0 \
  --kl-divergence-base /tmp/klbase.bin --kl-divergence --kl-json $OUT/kl-cpu.json
run "CUDA default vs base, -b 1 (decode kernels), 2 chunks" $EMBER perplexity -m $MODEL -f $T -c 512 --chunks 2 \
  -b 1 -ngl 99 --kl-divergence-base /tmp/klbase.bin --kl-divergence
run "CPU backend vs base, -b 1 (its decode attention), 2 chunks" $EMBER perplexity -m $MODEL -f $T -c 512 \
  --chunks 2 -b 1 -ngl 0 --kl-divergence-base /tmp/klbase.bin --kl-divergence
run "CUDA all-F32 mode, -b 1, vs base (the decode kernels' own rounding), 2 chunks" env $F32 $EMBER perplexity \
  -m $MODEL -f $T -c 512 --chunks 2 -b 1 -ngl 99 --kl-divergence-base /tmp/klbase.bin --kl-divergence
rm -f /tmp/klbase.bin
cat "$R"
