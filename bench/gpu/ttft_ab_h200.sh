#!/bin/bash
# bench/gpu/ttft_ab_h200.sh — served TTFT of cold 3,000- and 16,000-token prompts (bench/ttft.py,
# median of 3) for several builds of ember on the E4B-shaped file, alternating the builds REPS times
# (default 2) in one run. BINS="label:tarball ..." as bench/gpu/ab_bins_h200.sh (the tarballs of
# bench/gpu/pack_carry.sh); a label may repeat a tarball with other flags: ARGS_<label>="..." are
# appended to its ember serve command. No llama.cpp: for the ratio, serve_h200.sh's llama-server figures.
# Output: $OUT/ttft-ab.txt.
set -u
: "${OUT:?set OUT}" "${BINS:?set BINS=\"label:tarball ...\"}"
R=$OUT/ttft-ab.txt
labels=()
for lb in $BINS; do
  l=${lb%%:*} f=${lb#*:}
  rm -rf /tmp/tt-$l; mkdir -p /tmp/tt-$l; tar xJf "$f" -C /tmp/tt-$l || { echo "cannot unpack $f" >> $R; exit 1; }
  labels+=("$l")
done
export LD_LIBRARY_PATH=/tmp/tt-${labels[0]}/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
[ -f /dev/shm/e4b.gguf ] || python3 bench/gpu/make_e4b_gguf_stdlib.py /dev/shm/e4b.gguf >/dev/null 2>&1
for rep in $(seq 1 ${REPS:-2}); do
  for l in "${labels[@]}"; do
    port=$((19000 + RANDOM % 900))
    xv=ARGS_$l   # extra ember serve flags of this label (ARGS_label="-ub 2048 -b 2048")
    /tmp/tt-$l/b/bin/ember serve -m /dev/shm/e4b.gguf -ngl 99 -np 1 -c 20480 --port $port --alias m ${!xv:-} > /tmp/tt-srv.txt 2>&1 &
    pid=$!
    up=0
    for i in $(seq 1 240); do curl -sf http://127.0.0.1:$port/health >/dev/null 2>&1 && { up=1; break; }; sleep 0.25; done
    if [ $up = 1 ]; then
      for n in 3000 16000; do
        t=$(timeout 120 python3 bench/ttft.py --base-url http://127.0.0.1:$port/v1 --tokens $n -r 3 2>/dev/null |
            python3 -c "import json,sys; d=json.load(sys.stdin); print('%.4f' % d['ttft_s_median'], [round(r['ttft_s'], 4) for r in d['runs']])")
        echo "$l rep $rep ttft ${n}: $t" | tee -a $R
      done
    else
      echo "$l: server did not come up: $(tail -3 /tmp/tt-srv.txt)" | tee -a $R
    fi
    kill $pid; wait $pid 2>/dev/null
  done
done
