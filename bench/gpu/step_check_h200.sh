#!/bin/bash
# bench/gpu/step_check_h200.sh — issue 15 item 0 (the recorded step, branch `step`) on the lent
# H200: the CUDA backend split by job and graph replay keyed by node-by-node step equality must
# give the same kernels and the same replays as main. In one run: the GPU unit tests of this
# build; per model (g3, e4b) greedy ids of a 600-token random prompt + 24 tokens (the decode
# shape runs eagerly, is captured, replays twice with its forward pass, then replays whole) with
# EMBER_CUDA_GRAPHS=0 and 1, for this build and main's, all four of which must be equal; 8
# parallel streams (par_decode, random tokens: a batch-8 graph shape; speed only, it must run);
# and engine tg256 of both builds (the host cost of recording the step: gemma4's host inputs keep
# every replay's forward pass, so e4b shows it).
# Inputs under .carry/: bins.tar.xz (this branch, bench/gpu/pack_carry.sh), bins-main.tar.xz
# (the same script run in a main checkout, renamed), g3header.xz and g3cut.gguf as
# serve_h200.sh. Output: $OUT/step_check.txt, last line "STEP CHECK: PASS" or "STEP CHECK: FAIL".
set -u
: "${OUT:?set OUT}"
C=.carry
R=$OUT/step_check.txt
log() { echo "$*" | tee -a "$R"; }
fail=0
mkdir -p /tmp/gs /tmp/gm
tar xJf $C/bins.tar.xz -C /tmp/gs || { log "cannot unpack bins.tar.xz"; exit 1; }
tar xJf $C/bins-main.tar.xz -C /tmp/gm || { log "cannot unpack bins-main.tar.xz"; exit 1; }
export LD_LIBRARY_PATH=/tmp/gs/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
log "commit $(cat $C/commit 2>/dev/null)"

log "=== GPU unit tests (this build)"
for t in test_seam test_runtime test_cuda_head test_cuda_sample test_cuda_ops test_cuda_matmul test_cuda_attn \
         test_cuda_q8 test_cuda_backend_attn test_cuda_exact; do
  [ -x /tmp/gs/b/tests/$t ] || { log "$t missing"; fail=1; continue; }
  timeout 200 /tmp/gs/b/tests/$t > /tmp/$t.txt 2>&1; rc=$?
  log "$t rc=$rc $(grep -cE '^\[       OK \]' /tmp/$t.txt) ok"
  [ $rc = 0 ] || { tail -20 /tmp/$t.txt | tee -a "$R"; fail=1; }
done

python3 -c "import random; r=random.Random(7); print(','.join(str(r.randrange(100, 4000)) for _ in range(600)))" > /tmp/ids.txt
for m in g3 e4b; do
  case $m in
    g3) [ -f /dev/shm/g3.gguf ] || python3 bench/gpu/regrow_gguf_stdlib.py $C/g3header.xz $C/g3cut.gguf /dev/shm/g3.gguf >/dev/null ;;
    e4b) [ -f /dev/shm/e4b.gguf ] || python3 bench/gpu/make_e4b_gguf_stdlib.py /dev/shm/e4b.gguf >/dev/null 2>&1 ;;
  esac
  M=/dev/shm/$m.gguf
  [ -f $M ] || { log "$m: no model"; fail=1; continue; }
  log "=== $m greedy ids (600-token prompt + 24), builds x EMBER_CUDA_GRAPHS"
  for b in gs gm; do
    for g in 0 1; do
      EMBER_CUDA_GRAPHS=$g timeout 120 /tmp/$b/b/bin/ember run -m $M -ngl 99 -c 2048 --prompt-ids-file /tmp/ids.txt \
        -n 24 --temp 0 --ignore-eos 2>/dev/null | head -c 600 > /tmp/run-$m-$b-$g.txt
      log "$b GRAPHS=$g $(cat /tmp/run-$m-$b-$g.txt | tr '\n' ' ')"
    done
  done
  for f in gs-0 gs-1 gm-1; do
    cmp -s /tmp/run-$m-gm-0.txt /tmp/run-$m-$f.txt || { log "$m: $f differs from main GRAPHS=0"; fail=1; }
  done
  [ -s /tmp/run-$m-gm-0.txt ] || { log "$m: main gave no output"; fail=1; }
  log "=== $m 8 streams (par_decode -np 8 -pp 128 -tg 64), builds x EMBER_CUDA_GRAPHS"
  for b in gs gm; do
    for g in 0 1; do
      EMBER_CUDA_GRAPHS=$g timeout 120 /tmp/$b/b/bench/par_decode $M -ngl 99 -np 8 -pp 128 -tg 64 -r 1 > /tmp/par-$m-$b-$g.txt 2>&1
      rc=$?
      log "$b GRAPHS=$g rc=$rc $(tail -1 /tmp/par-$m-$b-$g.txt)"
      [ $rc = 0 ] || fail=1
    done
  done
  log "=== $m engine tg256 (ember bench -p 0 -n 256 -r 3), main then this build, ${REPS:-2} times"
  for rep in $(seq 1 ${REPS:-2}); do
    for b in gm gs; do
      timeout 100 /tmp/$b/b/bin/ember bench -m $M -ngl 99 -c 4096 -p 0 -n 256 -r 3 2>&1 | grep -E "^\|" | tail -1 | sed "s/^/$b /" | tee -a "$R"
    done
  done
done
[ $fail = 0 ] && log "STEP CHECK: PASS" || log "STEP CHECK: FAIL"
