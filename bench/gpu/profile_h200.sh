#!/bin/bash
# bench/gpu/profile_h200.sh — per-kernel GPU time (ncu, gpu__time_duration.sum, clocks left alone)
# for the two shapes issue 15 names: E4B-shaped prefill (ember bench -p 512 -n 0) and Gemma 3
# decode (ember bench -p 0 -n 32, CUDA graphs on; ncu profiles graph nodes one by one).
# Inputs as bench/gpu/serve_h200.sh (.carry/bins.tar.xz, the models in /dev/shm or their makers).
# Output: $OUT/profile.txt: per workload, kernels by total time (name, calls, total us, share).
set -u
: "${OUT:?set OUT}"
C=.carry
mkdir -p /tmp/g && tar xJf $C/bins.tar.xz -C /tmp/g
export LD_LIBRARY_PATH=/tmp/g/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
B=/tmp/g/b
P=$OUT/profile.txt
[ -f /dev/shm/e4b.gguf ] || python3 bench/gpu/make_e4b_gguf_stdlib.py /dev/shm/e4b.gguf >/dev/null 2>&1
[ -f /dev/shm/g3.gguf ] || python3 bench/gpu/regrow_gguf_stdlib.py $C/g3header.xz $C/g3cut.gguf /dev/shm/g3.gguf >/dev/null
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
prof() {  # label args...
  local label=$1 lim=$2; shift 2
  timeout 200 $NCU --clock-control none --cache-control none $lim --metrics gpu__time_duration.sum --csv --log-file /tmp/ncu.log "$@" > /tmp/ncu.csv 2>/dev/null
  echo "=== $label ($*)" >> $P
  python3 bench/gpu/ncu_table.py /tmp/ncu.log 22 >> $P
}
prof "e4b prefill pp512" "--launch-count 4000" $B/bin/ember bench -m /dev/shm/e4b.gguf -ngl 99 -c 4096 -p 512 -n 0 -r 1
prof "g3 decode (2 tokens after 4)" "--launch-skip 2400 --launch-count 810" $B/bin/ember bench -m /dev/shm/g3.gguf -ngl 99 -c 4096 -p 0 -n 16 -r 1
prof "e4b decode (1 token after 4)" "--launch-skip 4500 --launch-count 1200" $B/bin/ember bench -m /dev/shm/e4b.gguf -ngl 99 -c 4096 -p 0 -n 16 -r 1

cat $P
