#!/bin/bash
# bench/gpu/ab_bins_h200.sh — several builds of ember side by side on the lent H200, same files,
# same run. BINS="label:tarball ..." (tarballs made by bench/gpu/pack_carry.sh), the first the
# base, the last the change under test. GPU unit tests of the last; per model (g3, e4b): engine
# tg256 (ember bench -p 0 -n 256 -r 3) of each build in turn, REPS times (default 2); 8-stream
# decode (par_decode -np 8) of each; engine pp512 and pp2048 of each (PP=0 skips); greedy ids after a 600-token random prompt of each (equal
# unless a change moves float order); then the per-kernel profile of the last
# (bench/gpu/profile_h200.sh; PROFILE=0 skips it).
# ENV_<label>="VAR=value ..." runs that label's commands with those switches (one tarball under
# two labels: an A/B of a switch in one binary).
# Inputs: the tarballs, .carry/g3header.xz and .carry/g3cut.gguf (serve_h200.sh).
# Output: $OUT/ab.txt, and $OUT/profile.txt.
set -u
: "${OUT:?set OUT}" "${BINS:?set BINS=\"label:tarball ...\"}"
C=.carry
R=$OUT/ab.txt
log() { echo "$*" | tee -a "$R"; }
labels=()
envof() { local v="ENV_$1"; echo "${!v:-}"; }
for lb in $BINS; do
  l=${lb%%:*} f=${lb#*:}
  rm -rf /tmp/ab-$l; mkdir -p /tmp/ab-$l
  tar xJf "$f" -C /tmp/ab-$l || { log "cannot unpack $f"; exit 1; }
  labels+=("$l")
done
last=${labels[${#labels[@]}-1]}
export LD_LIBRARY_PATH=/tmp/ab-$last/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
log "BINS=$BINS"
for l in "${labels[@]}"; do [ -n "$(envof $l)" ] && log "ENV_$l=$(envof $l)"; done
log "=== GPU unit tests ($last)"
for t in test_cuda_q8 test_cuda_matmul test_cuda_head test_cuda_ops test_cuda_exact; do
  timeout 200 /tmp/ab-$last/b/tests/$t > /tmp/$t.txt 2>&1; rc=$?
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
  log "=== $m engine tg256, each build in turn, ${REPS:-2} times"
  for rep in $(seq 1 ${REPS:-2}); do
    for l in "${labels[@]}"; do
      timeout 100 env $(envof $l) /tmp/ab-$l/b/bin/ember bench -m $M -ngl 99 -c 4096 -p 0 -n 256 -r 3 2>&1 | grep -E "^\|" | tail -1 | sed "s/^/$l /" | tee -a "$R"
    done
  done
  if [ "${PP:-1}" = 1 ]; then
    log "=== $m engine pp512 and pp2048 (ember bench -p N -n 0 -r 3), each build"
    for l in "${labels[@]}"; do
      for p in 512 2048; do
        timeout 100 env $(envof $l) /tmp/ab-$l/b/bin/ember bench -m $M -ngl 99 -c 4096 -p $p -n 0 -r 3 2>&1 | grep -E "^\|" | tail -1 | sed "s/^/$l /" | tee -a "$R"
      done
    done
  fi
  log "=== $m 8 streams (par_decode -np 8 -pp 128 -tg 128 -r 2)"
  for l in "${labels[@]}"; do
    timeout 120 env $(envof $l) /tmp/ab-$l/b/bench/par_decode $M -ngl 99 -np 8 -pp 128 -tg 128 -r 2 2>&1 | tail -1 | sed "s/^/$l /" | tee -a "$R"
  done
  log "=== $m greedy ids after a 600-token prompt (24 tokens)"
  for l in "${labels[@]}"; do
    timeout 120 env $(envof $l) /tmp/ab-$l/b/bin/ember run -m $M -ngl 99 -c 2048 --prompt-ids-file /tmp/ids.txt -n 24 --temp 0 \
      --ignore-eos 2>/dev/null | head -c 600 > /tmp/ids-$m-$l.txt
    log "$l $(tr '\n' ' ' < /tmp/ids-$m-$l.txt)"
    cmp -s /tmp/ids-$m-${labels[0]}.txt /tmp/ids-$m-$l.txt && log "$m: $l equal to ${labels[0]}" || log "$m: $l differs from ${labels[0]}"
  done
done
if [ "${PROFILE:-1}" = 1 ]; then
  # profile_h200.sh reads .carry/bins.tar.xz
  f=${BINS##*:}
  mkdir -p /tmp/pb && cp "$f" /tmp/pb/bins.tar.xz && ln -sfn /tmp/pb/bins.tar.xz $C/bins.tar.xz
  timeout 300 bash bench/gpu/profile_h200.sh >/dev/null 2>&1
  log "=== profile of $last: $OUT/profile.txt"
fi
log "=== done"
