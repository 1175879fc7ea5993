#!/bin/bash
# bench/gpu/session_h200.sh — one lease, everything the CUDA work of 2026-11-29 (late) needs,
# most important first so that a lease cut short still answers the first questions:
#   1. GPU unit tests: q8 mat-vec / row ops bit for bit vs the CPU backend (test_cuda_q8,
#      test_cuda_exact), attention for head sizes 512/256/16/32 (test_cuda_attn,
#      test_cuda_backend_attn), tiny gemma4 vs transformers on CUDA (test_gemma4), older ones
#   2. greedy agreement CUDA vs CPU on a cut Gemma 3 (bench/gpu/cudaq8_check.sh exact default)
#   3. E4B-shaped file: ember bench -ngl 99 and GPU memory at -c 16384 / 65536 (bench/gpu/e4b_h200.sh)
#   4. per-op differences (verify) and decode speed q8 on/off
# Inputs: $1 the cut Gemma 3 GGUF, $2 a tar.xz of the CUDA build (b/bin, b/tests, b/bench,
# lib/ with the Debian libraries the lent machine lacks), $OUT.
set -u
M=${1:?cut gemma3 gguf}; T=${2:?build tar.xz}
mkdir -p /tmp/g && tar xJf "$T" -C /tmp/g || exit 1
export LD_LIBRARY_PATH=/tmp/g/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
B=/tmp/g/b
S=$OUT/summary.txt
log() { echo "=== $(date +%T) $*" | tee -a "$S"; }
log "tests"
for t in test_cuda_q8 test_cuda_exact test_cuda_attn test_cuda_backend_attn test_gemma4 test_cuda_matmul test_cuda_ops; do
  timeout 120 $B/tests/$t > "$OUT/$t.txt" 2>&1
  echo "$t rc $?" | tee -a "$S"
  grep -E "FAILED|PASSED|ERROR|error|mismatch|differ|SKIP|no CUDA" "$OUT/$t.txt" | grep -v " 0 differ" | cut -c1-200 | head -8 >> "$S"
done
log "greedy agreement (cut gemma3)"
B=$B OUT=$OUT/q8 STEPS="exact default" timeout 150 bash bench/gpu/cudaq8_check.sh "$M"
cat $OUT/q8/summary.txt >> "$S"
log "e4b"
# prints ember bench, the CUDA backend's GPU memory by category and the nvidia-smi peak at -c 16384 and
# 65536, then (MEM_AB=1) -c 16384 with the driver's default stack and cuBLAS's own workspace
BUILD=$B OUT=$OUT/e4b SKIP_TESTS=1 MEM_AB=1 STEP_TIMEOUT=90 BENCH_ARGS="-p 512 -n 128 -r 2" timeout 260 bash bench/gpu/e4b_h200.sh
log "verify + bench"
B=$B OUT=$OUT/q8b STEPS="verify bench" timeout 100 bash bench/gpu/cudaq8_check.sh "$M"
log done
