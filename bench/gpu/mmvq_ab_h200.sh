#!/bin/bash
# bench/gpu/mmvq_ab_h200.sh — the free-order decode mat-vecs (EMBER_CUDA_MMVQ=1, cuda_mmvq.cu)
# against the CPU-order ones (the default) on the lent H200, in one run: the GPU unit tests and the
# greedy/KL checks of serve_h200.sh (parts check, kl) with the default, then per model engine
# tg256 (ember bench -p 0 -n 256 -r 3) and 8-stream decode (par_decode -np 8) alternating the two
# modes twice, the KL block (ember perplexity --kl-divergence-cpu) and the greedy check with
# EMBER_CUDA_MMVQ=1, and the per-kernel profile (profile_h200.sh) with EMBER_CUDA_MMVQ=1.
# Inputs as serve_h200.sh (.carry/bins.tar.xz, whl, g3header.xz, g3cut.gguf). Output under $OUT:
# summary.txt (serve_h200.sh's), ab.txt, profile.txt.
set -u
: "${OUT:?set OUT}"
PARTS="check kl" bash bench/gpu/serve_h200.sh
export LD_LIBRARY_PATH=/tmp/g/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
B=/tmp/g/b
A=$OUT/ab.txt
for m in g3 e4b; do
  M=/dev/shm/$m.gguf
  [ -f $M ] || continue
  for rep in 1 2; do
    for v in 0 1; do
      echo "== $m MMVQ=$v rep $rep" >> $A
      EMBER_CUDA_MMVQ=$v timeout 100 $B/bin/ember bench -m $M -ngl 99 -c 4096 -p 0 -n 256 -r 3 2>&1 | grep -E "^\|" >> $A
      EMBER_CUDA_MMVQ=$v timeout 100 $B/bench/par_decode $M -ngl 99 -np 8 -pp 128 -tg 128 -r 2 2>&1 | tail -1 >> $A
    done
  done
  echo "== $m MMVQ=1 fidelity vs the CPU backend" >> $A
  EMBER_CUDA_MMVQ=1 timeout 200 $B/bin/ember perplexity -m $M -f tests/data/pride_prejudice.txt -c 512 --chunks 8 -ngl 99 \
    --kl-divergence-cpu --kl-json $OUT/kl-mmvq-$m.json 2>/dev/null | grep -E "PPL|KLD|Same top" >> $A
  python3 -c "import random; r=random.Random(7); print(','.join(str(r.randrange(100, 4000)) for _ in range(600)))" > /tmp/ids.txt
  for v in 0 1; do
    EMBER_CUDA_MMVQ=$v timeout 60 $B/bin/ember run -m $M -ngl 99 -c 2048 --prompt-ids-file /tmp/ids.txt -n 12 --temp 0 --ignore-eos \
      2>/dev/null | head -c 400 | sed "s/^/MMVQ=$v /" >> $A
    echo >> $A
  done
done
cat $A
EMBER_CUDA_MMVQ=1 bash bench/gpu/profile_h200.sh > /dev/null 2>&1
tail -80 $OUT/profile.txt
