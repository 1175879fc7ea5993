#!/bin/bash
# bench/gpu/session2_h200.sh — second short lease: the fixed test_cuda_q8 (K-quant shapes), the cost of
# EMBER_CUDA_EXACT on decode (cut Gemma 3), and E4B-shaped tg256 / 8 streams / 3000-token prefill.
# Same inputs as session_h200.sh: $1 cut Gemma 3 GGUF, $2 tar.xz of the CUDA build, $OUT.
set -u
M=${1:?}; T=${2:?}
mkdir -p /tmp/g && tar xJf "$T" -C /tmp/g || exit 1
export LD_LIBRARY_PATH=/tmp/g/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
B=/tmp/g/b
echo "=== test_cuda_q8"; timeout 60 $B/tests/test_cuda_q8 > $OUT/test_cuda_q8.txt 2>&1; echo "rc $?"; grep -E "Q4_K|Q6_K|FAILED|PASSED" $OUT/test_cuda_q8.txt | cut -c1-120 | tail -6
echo "=== cut gemma3 tg128: default vs EMBER_CUDA_EXACT=1"
for e in 0 1; do EMBER_CUDA_EXACT=$e timeout 60 $B/bin/ember bench -m $M -ngl 99 -p 512 -n 128 -r 3 2>&1 | grep gemma3 | sed "s/^/EXACT=$e /"; done
python3 bench/gpu/make_e4b_gguf_stdlib.py /dev/shm/e4b.gguf > /dev/null 2>&1 || echo "generator failed"
echo "=== E4B tg256 / pp512 / pp3000 (-c 16384)"
timeout 60 $B/bin/ember bench -m /dev/shm/e4b.gguf -ngl 99 -c 16384 -p 512 -n 256 -r 3 2>&1 | grep -E "gemma4|GPU memory in use"
timeout 60 $B/bin/ember bench -m /dev/shm/e4b.gguf -ngl 99 -c 16384 -p 3000 -n 0 -r 3 2>&1 | grep -E "gemma4"
echo "=== E4B 8 streams (par_decode -np 8 -pp 128 -tg 128)"
timeout 90 $B/bench/par_decode /dev/shm/e4b.gguf -np 8 -pp 128 -tg 128 -r 2 2>&1 | tail -4
echo "=== done"
