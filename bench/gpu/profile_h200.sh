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
  python3 - /tmp/ncu.csv >> $P <<'PY'
import csv, sys, collections
rows = list(csv.reader(open(sys.argv[1], errors="replace")))
hdr = next((i for i, r in enumerate(rows) if "Kernel Name" in r), None)
if hdr is None:
    print("no ncu rows"); sys.exit()
h = rows[hdr]; ki = h.index("Kernel Name"); vi = h.index("Metric Value"); ui = h.index("Metric Unit")
t = collections.defaultdict(float); n = collections.Counter()
for r in rows[hdr + 1:]:
    if len(r) <= vi: continue
    try: v = float(r[vi].replace(",", ""))
    except ValueError: continue
    if r[ui] in ("nsecond", "ns"): v /= 1000.0
    elif r[ui] in ("msecond", "ms"): v *= 1000.0
    name = r[ki].split("(")[0][:90]
    t[name] += v; n[name] += 1
tot = sum(t.values())
print(f"kernels {sum(n.values())}, total {tot:.0f} us")
for k, v in sorted(t.items(), key=lambda x: -x[1])[:22]:
    print(f"{v:10.0f} us {100 * v / tot:5.1f}% {n[k]:6d} x {v / n[k]:8.2f} us  {k}")
PY
}
prof "e4b prefill pp512" "--launch-count 4000" $B/bin/ember bench -m /dev/shm/e4b.gguf -ngl 99 -c 4096 -p 512 -n 0 -r 1
prof "g3 decode (2 tokens after 4)" "--launch-skip 2400 --launch-count 810" $B/bin/ember bench -m /dev/shm/g3.gguf -ngl 99 -c 4096 -p 0 -n 16 -r 1
prof "e4b decode (1 token after 4)" "--launch-skip 4500 --launch-count 1200" $B/bin/ember bench -m /dev/shm/e4b.gguf -ngl 99 -c 4096 -p 0 -n 16 -r 1
tail -5 /tmp/ncu.log >> $P
cat $P
