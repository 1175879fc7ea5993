#!/bin/bash
# bench/gpu/attn_detail_h200.sh — ncu's full section set for one decode attention kernel (k_attn) of
# Gemma 3 (bench/gpu/serve_h200.sh's g3 file) a few tokens into a decode: launch configuration,
# occupancy, registers, and where its warps stall; for the fixed cost per call that the per-kernel
# profile shows (8.4 us at 5 keys, session 24). BIN=/path/to/ember (default /tmp/g/b/bin/ember).
# Output: $OUT/attn-detail.txt.
set -u
: "${OUT:?set OUT}"
C=.carry
B=${BIN:-/tmp/g/b/bin/ember}
[ -f /dev/shm/g3.gguf ] || python3 bench/gpu/regrow_gguf_stdlib.py $C/g3header.xz $C/g3cut.gguf /dev/shm/g3.gguf >/dev/null
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
for skip in 20 200; do
  rm -f /tmp/attn.ncu-rep
  timeout 240 $NCU --clock-control none -k regex:k_attn --launch-skip $skip --launch-count 1 --set full \
    -o /tmp/attn "$B" bench -m /dev/shm/g3.gguf -ngl 99 -c 4096 -p 0 -n 32 -r 1 > /tmp/ncu-run.txt 2>&1
  echo "=== k_attn, launch-skip $skip" >> $OUT/attn-detail.txt
  $NCU --import /tmp/attn.ncu-rep --page details >> $OUT/attn-detail.txt 2>&1 || tail -5 /tmp/ncu-run.txt >> $OUT/attn-detail.txt
done
