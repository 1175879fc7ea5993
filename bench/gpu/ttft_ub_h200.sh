#!/bin/bash
# bench/gpu/ttft_ub_h200.sh — E4B-shaped prefill on the lent GPU: engine pp (ember bench -p N -n 0) at
# several -ub, served cold-prompt TTFT (bench/ttft.py) of ember serve builds/switches and, when the
# llama.cpp parts are there, of llama-server (its defaults: -b 2048 -ub 512), each server's GPU memory
# (nvidia-smi, after the runs), an ncu kernel table of one prompt micro-batch, the GPU unit tests, and
# KL divergence against the CPU backend with switches off and on.
# Inputs: .carry/bins.tar.xz (bench/gpu/pack_carry.sh); the llama.cpp parts in .carry/l0, .carry/l1
# (any subset per call: they are stashed in /root/stash until all three are there); for "tests"
# and "kl", .carry/g3cut.gguf + .carry/g3header.xz (regrown Gemma 3, bench/gpu/regrow_gguf_stdlib.py).
# Environment: OUT; PARTS (default "engine ttft"; also tests, kl, ncu); UBS (engine -ub list,
#   default "512 2048 4096"); PPS (engine prompt lengths, default "3000 16000"); SERVE (ember serve
#   variants, each "b:ub" or "-" for the defaults, optionally "@VAR=value" after it for its environment,
#   default "-"); REPS (2); LLAMA=1 also times llama-server; TOK (TTFT prompt sizes, "3000 16000");
#   KLENV (switch settings compared by "kl", default "EMBER_CUDA_PREFILL_F16=0 EMBER_CUDA_PREFILL_F16=1");
#   "decode": engine tg256 and 8-stream decode of E4B and Gemma 3 (DECMODELS) for each DECENV setting
#   (default EMBER_CUDA_MMVQ_ROWS=0/2/4; a setting of several variables joins them with commas), alternated
#   twice; "ncudec": ncu decode tables per NCUDECENV, of NCUDECSPECS ("model launches-skipped launches-counted"
#   separated by ";", default E4B then Gemma 3); "stepcost": bench/spec_cost (one decode of k tokens,
#   k in SPECK, default 1,2,4,8) of each DECMODELS model; "ncupar": ncu tables of 8-stream decode
#   (par_decode -np 8) per NCUPARSPECS (default E4B, launches 6000 skipped, 1200 counted).
# Results: $OUT/ub.txt.
set -u
: "${OUT:?set OUT}"
S=$OUT/ub.txt
log() { echo "$*" | tee -a "$S"; }
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 ))s]"; }
mkdir -p /root/stash /root/llama /tmp/g
for d in .carry/l0 .carry/l1; do [ -d $d ] && cp $d/* /root/stash/ 2>/dev/null; done
if [ ! -x /root/llama/llama.cpp-cuda-sm90/bin/llama-server ] && [ $(ls /root/stash/*.part0* 2>/dev/null | wc -l) = 3 ]; then
  cat /root/stash/*.part0* | tar xJ -C /root/llama
fi
LD=/root/llama/llama.cpp-cuda-sm90
if [ -f .carry/bins.tar.xz ]; then tar xJf .carry/bins.tar.xz -C /tmp/g || { log "cannot unpack bins"; exit 1; }; fi
[ -x /tmp/g/b/bin/ember ] || { log "no ember binary (carry .carry/bins.tar.xz)"; exit 1; }
export LD_LIBRARY_PATH=/tmp/g/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
B=/tmp/g/b
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$S"
log "commit $(cat .carry/commit 2>/dev/null | tr '\n' ' ')"
M=/dev/shm/e4b.gguf
[ -f $M ] || python3 bench/gpu/make_e4b_gguf_stdlib.py $M >/dev/null 2>&1
G3=/dev/shm/g3.gguf
[ -f $G3 ] || { [ -f .carry/g3cut.gguf ] && python3 bench/gpu/regrow_gguf_stdlib.py .carry/g3header.xz .carry/g3cut.gguf $G3 >/dev/null; }
PARTS=${PARTS:-engine ttft}
has() { case " $PARTS " in *" $1 "*) return 0 ;; esac; return 1; }

if has tests; then
  log "=== GPU unit tests $(el)"
  export EMBER_TEST_GPU_GGUF=$G3
  for t in ${TESTBINS:-test_cuda_recurrent test_qwen35 test_cuda_matmul test_cuda_ops test_cuda_head test_cuda_backend_attn test_runtime test_seam test_cuda_attn test_cuda_q8 test_cuda_sample test_cuda_exact test_dflash_spec test_mtp_spec test_dflash test_mtp}; do
    [ -x $B/tests/$t ] || { log "$t missing"; continue; }
    timeout 300 $B/tests/$t > /tmp/$t.txt 2>&1; rc=$?
    log "$t rc=$rc $(grep -cE '^\[       OK \]' /tmp/$t.txt) ok, $(grep -cE '^\[  FAILED  \]' /tmp/$t.txt) failed lines"
    [ $rc = 0 ] || tail -25 /tmp/$t.txt | tee -a "$S"
  done
  # Qwen3.5 (recurrent layers) on the GPU: greedy ids of a 300-token prompt on the tiny goldens, CPU and GPU
  python3 -c "import random; r=random.Random(3); print(','.join(str(r.randrange(3, 200)) for _ in range(300)))" > /tmp/qids.txt
  for q in tests/golden/qwen35/*.gguf; do
    for ngl in 0 99; do
      timeout 60 $B/bin/ember run -m $q --prompt-ids-file /tmp/qids.txt -n 24 --temp 0 --ignore-eos -ngl $ngl 2>/dev/null \
        | python3 -c "import json,sys; print(json.loads(sys.stdin.readline())['tokens'])" > /tmp/q$ngl.txt 2>&1
    done
    log "qwen35 run $(basename $q) (300-token prompt, 24 greedy): cpu $(head -c 100 /tmp/q0.txt) gpu $(cmp -s /tmp/q0.txt /tmp/q99.txt && echo equal || head -c 100 /tmp/q99.txt)"
  done
  EMBER_CUDA_GRAPH_LOG=1 timeout 120 $B/tests/test_qwen35 2>&1 | grep -i "graph" | sort | uniq -c | head -5 | tee -a "$S"
fi

if has kl; then
  # teacher-forced over the same text, this build (CUDA, each setting) against the CPU backend
  for e in ${KLENV:-EMBER_CUDA_PREFILL_F16=0 EMBER_CUDA_PREFILL_F16=1}; do
    for mm in ${KLMODELS:-$G3}; do
      log "--- kl $e $(basename $mm) $(el)"
      env $e timeout 300 $B/bin/ember perplexity -m $mm -f tests/data/pride_prejudice.txt -c 512 --chunks ${KLCHUNKS:-6} -ngl 99 \
        --kl-divergence-cpu 2>/dev/null | grep -E "PPL|KLD|Same top" | tee -a "$S"
    done
  done
fi

if has engine; then
  for pp in ${PPS:-3000 16000}; do
    for ub in ${UBS:-512 2048 4096}; do
      r=$(timeout 200 $B/bin/ember bench -m $M -ngl 99 -c $((pp + 64)) -p $pp -n 0 -b $pp -ub $ub -r 2 2>&1 | grep -E "^\| .*pp" | tail -1)
      log "engine pp$pp -ub $ub: $r $(el)"
    done
  done
fi

if has decode; then
  # one-token decode A/B by a switch: engine tg256 (median of 3) and 8 streams (par_decode), settings alternated
  for rep in $(seq 1 ${DECREPS:-2}); do
    for mm in ${DECMODELS:-$M $G3}; do
      for e in ${DECENV:-EMBER_CUDA_MMVQ_ROWS=0 EMBER_CUDA_MMVQ_ROWS=2 EMBER_CUDA_MMVQ_ROWS=4}; do
        r=$(env ${e//,/ } timeout 120 $B/bin/ember bench -m $mm -ngl 99 -c 4096 -p 0 -n 256 -r 3 2>&1 | grep -E "^\| .*tg" | tail -1)
        p8=$(env ${e//,/ } timeout 120 $B/bench/par_decode $mm -ngl 99 -np 8 -pp 128 -tg 128 -r ${DECPAR:-2} 2>&1 | tail -1)
        log "decode $(basename $mm) $e (rep $rep): $r | 8 streams: $p8 $(el)"
      done
    done
  done
fi

if has ncudec; then
  # ncu per-kernel decode table (graphs replay node by node under ncu), E4B then Gemma 3, each setting
  NCUB=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
  for e in ${NCUDECENV:-EMBER_CUDA_MMVQ_ROWS=0}; do
    IFS=';' read -ra specs <<< "${NCUDECSPECS:-$M 4500 1200;$G3 2400 810}"
    for spec in "${specs[@]}"; do
      set -- $spec
      env ${e//,/ } timeout 200 $NCUB --clock-control none --cache-control none --launch-skip $2 --launch-count $3 --metrics gpu__time_duration.sum --csv \
        --log-file /tmp/ncu.log $B/bin/ember bench -m $1 -ngl 99 -c 4096 -p 0 -n 16 -r 1 > /dev/null 2>&1
      log "=== ncu decode $(basename $1) $e"
      python3 bench/gpu/ncu_table.py /tmp/ncu.log 14 | tee -a "$S"
      python3 bench/gpu/ncu_table.py /tmp/ncu.log --seq 0 ${NCUSEQ:-60} | tee -a "$S"
    done
  done
fi

if has stepcost; then
  # verification-step cost: one ember_decode of k tokens of one sequence (bench/spec_cost.c) per model
  for mm in ${DECMODELS:-$M $G3}; do
    log "=== spec_cost $(basename $mm) -k ${SPECK:-1,2,4,8} $(el)"
    timeout 200 $B/bench/spec_cost $mm -p 256 -r ${SPECR:-9} -k ${SPECK:-1,2,4,8} 2>&1 | tail -12 | tee -a "$S"
  done
fi

if has ncupar; then
  # ncu per-kernel table of 8-stream decode (par_decode -np 8: every mat-vec with 8 columns)
  NCUB=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
  IFS=';' read -ra specs <<< "${NCUPARSPECS:-$M 6000 1200}"
  for spec in "${specs[@]}"; do
    set -- $spec
    timeout 300 $NCUB --clock-control none --cache-control none --launch-skip $2 --launch-count $3 --metrics gpu__time_duration.sum --csv \
      --log-file /tmp/ncu.log $B/bench/par_decode $1 -ngl 99 -np 8 -pp 32 -tg 32 -r 1 > /dev/null 2>&1
    log "=== ncu 8-stream decode $(basename $1)"
    python3 bench/gpu/ncu_table.py /tmp/ncu.log 16 | tee -a "$S"
    python3 bench/gpu/ncu_table.py /tmp/ncu.log --seq 0 ${NCUSEQ:-60} | tee -a "$S"
  done
fi

wait_up() {
  for i in $(seq 1 240); do
    curl -sf http://127.0.0.1:$1/health >/dev/null 2>&1 && return 0
    kill -0 $2 2>/dev/null || return 1
    sleep 0.25
  done
  return 1
}
ttft() {  # label cmd...
  local label=$1; shift
  local port=$((18000 + RANDOM % 2000))
  "$@" --port $port > /tmp/srv.txt 2>&1 &
  local pid=$!
  if ! wait_up $port $pid; then log "$label: server did not come up"; tail -5 /tmp/srv.txt | tee -a "$S"; kill $pid; return; fi
  for n in ${TOK:-3000 16000}; do
    timeout 250 python3 bench/ttft.py --base-url http://127.0.0.1:$port/v1 --tokens $n -r 3 > /tmp/tt.json 2>/tmp/tt.err
    log "$label ttft$n: $(python3 -c "import json;d=json.load(open('/tmp/tt.json'));print(d.get('ttft_s_median'), [round(x.get('ttft_s',0),4) for x in d.get('runs',[])], d.get('prompt_tokens'))" 2>&1 | tail -1) $(el)"
  done
  log "$label gpu MiB: $(nvidia-smi --query-compute-apps=used_memory --format=csv,noheader,nounits | head -1)"
  kill $pid 2>/dev/null; wait $pid 2>/dev/null
}
if has ttft; then
  for rep in $(seq 1 ${REPS:-2}); do
    for v in ${SERVE:--}; do
      flags=${v%%@*}; envs=""; [ "$flags" != "$v" ] && envs=${v#*@}
      bf=""; [ "$flags" != "-" ] && bf="-b ${flags%:*} -ub ${flags#*:}"
      ttft "ember $v (rep $rep)" env $envs $B/bin/ember serve -m $M -ngl 99 -np 1 -c 20480 $bf --alias m
    done
    if [ "${LLAMA:-0}" = 1 ] && [ -x $LD/bin/llama-server ]; then
      ttft "llama-server (rep $rep)" env LD_LIBRARY_PATH=$LD/lib:/usr/local/cuda/lib64 $LD/bin/llama-server -m $M -ngl 99 -np 1 -c 20480 --alias m --jinja
    fi
  done
fi

if has ncu; then
  ub=${NCUUB:-2048}
  NCUB=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
  env ${NCUENV:-} timeout 300 $NCUB --clock-control none --cache-control none --launch-count ${NCUCOUNT:-4000} --metrics gpu__time_duration.sum --csv \
    --log-file /tmp/ncu.log $B/bin/ember bench -m $M -ngl 99 -c $((ub + 64)) -p $ub -n 0 -b $ub -ub $ub -r 1 > /dev/null 2>&1
  log "=== ncu: pp$ub micro-batches ${NCUENV:-} (warm-up run included)"
  python3 bench/gpu/ncu_table.py /tmp/ncu.log 26 | tee -a "$S"
fi
log "=== done $(el)"
