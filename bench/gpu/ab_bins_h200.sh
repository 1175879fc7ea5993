#!/bin/bash
# bench/gpu/ab_bins_h200.sh — two builds of ember side by side on the lent H200, same files, same
# run: A (the base, e.g. main) and B (the change). GPU unit tests of B; per model (g3, e4b): engine
# tg256 (ember bench -p 0 -n 256 -r 3), A then B, twice; 8-stream decode (par_decode -np 8),
# A then B; greedy ids after a 600-token random prompt (B against A: equal unless the change moves
# float order); then the per-kernel profile of B (bench/gpu/profile_h200.sh).
# Inputs: $A and $B (bins tarballs made by bench/gpu/pack_carry.sh), .carry/g3header.xz and
# .carry/g3cut.gguf (serve_h200.sh). Output: $OUT/ab.txt, and $OUT/profile.txt unless PROFILE=0.
set -u
: "${OUT:?set OUT}" "${A:?set A (bins tarball)}" "${B:?set B (bins tarball)}"
C=.carry
R=$OUT/ab.txt
log() { echo "$*" | tee -a "$R"; }
rm -rf /tmp/ga /tmp/gb; mkdir -p /tmp/ga /tmp/gb
tar xJf "$A" -C /tmp/ga && tar xJf "$B" -C /tmp/gb || { log "cannot unpack $A / $B"; exit 1; }
export LD_LIBRARY_PATH=/tmp/gb/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
log "A=$A B=$B"
log "=== GPU unit tests (B)"
for t in test_cuda_q8 test_cuda_matmul test_cuda_head test_cuda_ops test_cuda_exact; do
  timeout 200 /tmp/gb/b/tests/$t > /tmp/$t.txt 2>&1; rc=$?
  log "$t rc=$rc $(grep -cE '^\[       OK \]' /tmp/$t.txt) ok"
  [ $rc = 0 ] || tail -20 /tmp/$t.txt | tee -a "$R"
done
python3 -c "import random; r=random.Random(7); print(','.join(str(r.randrange(100, 4000)) for _ in range(600)))" > /tmp/ids.txt
for m in g3 e4b; do
  case $m in
    g3) [ -f /dev/shm/g3.gguf ] || python3 bench/gpu/regrow_gguf_stdlib.py $C/g3header.xz $C/g3cut.gguf /dev/shm/g3.gguf >/dev/null ;;
    e4b) [ -f /dev/shm/e4b.gguf ] || python3 bench/gpu/make_e4b_gguf_stdlib.py /dev/shm/e4b.gguf >/dev/null 2>&1 ;;
  esac
  M=/dev/shm/$m.gguf
  log "=== $m engine tg256, A then B, twice"
  for rep in 1 2; do
    for b in a b; do
      timeout 100 /tmp/g$b/b/bin/ember bench -m $M -ngl 99 -c 4096 -p 0 -n 256 -r 3 2>&1 | grep -E "^\|" | tail -1 | sed "s/^/$b /" | tee -a "$R"
    done
  done
  log "=== $m 8 streams (par_decode -np 8 -pp 128 -tg 128 -r 2), A then B"
  for b in a b; do
    timeout 120 /tmp/g$b/b/bench/par_decode $M -ngl 99 -np 8 -pp 128 -tg 128 -r 2 2>&1 | tail -1 | sed "s/^/$b /" | tee -a "$R"
  done
  log "=== $m greedy ids after a 600-token prompt (24 tokens)"
  for b in a b; do
    timeout 120 /tmp/g$b/b/bin/ember run -m $M -ngl 99 -c 2048 --prompt-ids-file /tmp/ids.txt -n 24 --temp 0 \
      --ignore-eos 2>/dev/null | head -c 600 > /tmp/ids-$m-$b.txt
    log "$b $(tr '\n' ' ' < /tmp/ids-$m-$b.txt)"
  done
  cmp -s /tmp/ids-$m-a.txt /tmp/ids-$m-b.txt && log "$m: greedy ids equal" || log "$m: greedy ids differ"
done
if [ "${PROFILE:-1}" = 1 ]; then
  mkdir -p /tmp/pb && cp "$B" /tmp/pb/bins.tar.xz
  # profile_h200.sh reads .carry/bins.tar.xz
  ln -sfn /tmp/pb/bins.tar.xz $C/bins.tar.xz && timeout 300 bash bench/gpu/profile_h200.sh >/dev/null 2>&1
  log "=== profile of B: $OUT/profile.txt"
fi
log "=== done"
