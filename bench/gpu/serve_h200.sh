#!/bin/bash
# bench/gpu/serve_h200.sh — issue 15's target table on the lent H200, ember and llama.cpp in the
# same run on the same file: engine tg256/pp512 (ember bench vs llama-bench), served single
# stream (bench/serve.py, 256 forced tokens, median of 3) vs llama-server -np 1, served 8-parallel
# aggregate vs llama-server -np 8 with the same total KV tokens, and served TTFT of cold
# 3,000- and 16,000-token prompts (bench/ttft.py). Run from the repository root on the device.
#
# Inputs (carried under .carry/, made on the dev box; see bench/results/cuda-h200.md):
#   .carry/bins.tar.xz    b/{bin/ember,bench/par_decode,tests/test_cuda_*} + lib/ (libmicrohttpd & co)
#   .carry/llama/*.part0* the prebuilt llama.cpp CUDA (../shared/tools/llama.cpp-cuda-sm90), unpacked
#                         once into /root/llama (kept while the machine stays warm)
#   .carry/whl/*.whl      openai and its dependencies for bench/serve.py (python 3.12)
#   .carry/g3header.xz, .carry/g3cut.gguf   Gemma 3 270M regrown by bench/gpu/regrow_gguf_stdlib.py
#   .carry/smollm2.gguf   (model "smol", optional) the real SmolLM2-135M-Instruct Q4_1, for "kl"
#   More than one call's 64 MiB: bench/gpu/bundle_h200.sh carries them in pieces.
# Environment: OUT (results), MODELS ("g3 e4b" default), TESTS=0 skips the GPU unit tests,
#   PARTS (default "check kl engine serve1 serve8"; serve1ab: ember's served single stream with
#   EMBER_CUDA_FEEDBACK=0 and 1 alternating, and their greedy texts compared; serve8ab: the same
#   for 8 parallel streams), EMBER_EXTRA (extra
#   ember serve flags), EMBER_ENV (VAR=value for ember serve).
# Results: $OUT/summary.txt (everything) and $OUT/results.jsonl (one JSON object per measurement).
set -u
: "${OUT:?set OUT}"
C=.carry
MODELS=${MODELS:-g3 e4b}
PARTS=${PARTS:-check kl engine serve1 serve8}
S=$OUT/summary.txt
J=$OUT/results.jsonl
log() { echo "$*" | tee -a "$S"; }
jl() { echo "$*" >> "$J"; }
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 ))s]"; }

mkdir -p /root/llama /tmp/g
if [ ! -x /root/llama/llama.cpp-cuda-sm90/bin/llama-server ]; then
  if ls $C/llama/*.part0* >/dev/null 2>&1; then cat $C/llama/*.part0* | tar xJ -C /root/llama; else log "no llama.cpp parts carried and none on the machine"; fi
fi
LD=/root/llama/llama.cpp-cuda-sm90
tar xJf $C/bins.tar.xz -C /tmp/g || { log "cannot unpack bins"; exit 1; }
export LD_LIBRARY_PATH=/tmp/g/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
B=/tmp/g/b
# openai for bench/serve.py: installed once while the machine stays warm (a later call need not carry whl/)
[ -d /tmp/site/openai ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $C/whl/*.whl >/dev/null 2>&1
[ -d /tmp/site/openai ] && export PYTHONPATH=/tmp/site
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee -a "$S"
log "commit $(cat .carry/commit 2>/dev/null)"


model_path() {
  case $1 in
    g3) [ -f /dev/shm/g3.gguf ] || python3 bench/gpu/regrow_gguf_stdlib.py $C/g3header.xz $C/g3cut.gguf /dev/shm/g3.gguf >/dev/null; echo /dev/shm/g3.gguf ;;
    smol) echo $C/smollm2.gguf ;;   # the real SmolLM2-135M-Instruct Q4_1 (bundle_h200.sh pack EXTRA)
    e4b) [ -f /dev/shm/e4b.gguf ] || python3 bench/gpu/make_e4b_gguf_stdlib.py /dev/shm/e4b.gguf >/dev/null 2>&1; echo /dev/shm/e4b.gguf ;;
  esac
}

if [ "${TESTS:-1}" = 1 ]; then
  log "=== GPU unit tests $(el)"
  # test_runtime feeds 24 greedy steps from the device (ember_decode_fed) on the regrown Gemma 3
  export EMBER_TEST_GPU_GGUF=$(model_path g3)
  for t in test_seam test_runtime test_cuda_head test_cuda_sample test_cuda_ops test_cuda_matmul test_cuda_attn test_cuda_q8 test_cuda_backend_attn test_cuda_exact; do
    [ -x $B/tests/$t ] || continue
    timeout 300 $B/tests/$t > /tmp/$t.txt 2>&1; rc=$?
    log "$t rc=$rc $(grep -cE '^\[       OK \]' /tmp/$t.txt) ok, $(grep -cE '^\[  FAILED  \]' /tmp/$t.txt) failed lines"
    [ $rc = 0 ] || tail -20 /tmp/$t.txt | tee -a "$S"
  done
fi

# weight bytes read per decoded token (every tensor but the per-layer-embedding table, of which
# one row per token is read), and the HBM bound at 4.8 TB/s
hbm_bound() {
  python3 - "$1" <<'EOF'
import sys
src = open("bench/gpu/regrow_gguf_stdlib.py").read().replace("\nmain()\n", "\n")
ns = {}
exec(compile(src, "rg", "exec"), ns)
buf = open(sys.argv[1], "rb").read(64 << 20)
ts, start = ns["parse"](buf)
tot = sum(ns["nbytes"](t, ne) for name, t, ne, off in ts if name != "per_layer_token_embd.weight")
print(tot, 4.8e12 / tot)
EOF
}

wait_up() {  # port pid
  for i in $(seq 1 240); do
    curl -sf http://127.0.0.1:$1/health >/dev/null 2>&1 && return 0
    kill -0 $2 2>/dev/null || return 1
    sleep 0.25
  done
  return 1
}

serve_run() {  # label model engine np ctx (the KV cache in all, in both servers) what...
  local label=$1 m=$2 eng=$3 np=$4 ctx=$5; shift 5
  local port=$((18000 + RANDOM % 2000)) pid
  if [ $eng = ember ]; then
    env ${EMBER_ENV:-} $B/bin/ember serve -m $m -ngl 99 -np $np -c $ctx --port $port --alias m ${EMBER_EXTRA:-} > /tmp/srv.txt 2>&1 &
  else
    LD_LIBRARY_PATH=$LD/lib:/usr/local/cuda/lib64 $LD/bin/llama-server -m $m -ngl 99 -np $np -c $ctx --port $port \
      --alias m --jinja > /tmp/srv.txt 2>&1 &
  fi
  pid=$!
  if ! wait_up $port $pid; then log "$label: server did not come up"; tail -5 /tmp/srv.txt | tee -a "$S"; kill $pid 2>/dev/null; return; fi
  for w in "$@"; do
    case $w in
      single)
        timeout 200 python3 bench/serve.py --base-url http://127.0.0.1:$port/v1 --model m -n 256 -r 3 -P 1 \
          --config "$label" --server-pid $pid --json /tmp/sv.json > /tmp/sv.txt 2>&1
        log "$label single: $(python3 -c "import json;d=json.load(open('/tmp/sv.json'));s=d['single'];print('decode %.1f tok/s, ttft %.4f s, runs %s, gpu %s MiB, errors %s'%(s.get('decode_tok_s_median') or 0, s.get('ttft_s_median') or 0, [round(r.get('decode_tok_s') or 0,1) for r in s['runs']], d['memory'].get('gpu_MiB'), d['errors']))" 2>&1)"
        jl "{\"what\":\"$label single\",\"report\":$(python3 -c "import json;print(json.dumps(json.load(open('/tmp/sv.json'))))" 2>/dev/null || echo null)}" ;;
      par8)
        timeout 200 python3 bench/serve.py --base-url http://127.0.0.1:$port/v1 --model m -n 256 -r 1 -P 8 \
          --config "$label" --server-pid $pid --json /tmp/sv.json > /tmp/sv.txt 2>&1
        log "$label 8-parallel: $(python3 -c "import json;d=json.load(open('/tmp/sv.json'));p=d['parallel'];print('aggregate %.1f tok/s, per stream %.1f, ok %d/8, gpu %s MiB, errors %s'%(p.get('aggregate_tok_s') or 0, p.get('per_stream_tok_s') or 0, p['n_ok'], d['memory'].get('gpu_MiB'), d['errors']))" 2>&1)"
        jl "{\"what\":\"$label par8\",\"report\":$(python3 -c "import json;d=json.load(open('/tmp/sv.json'));d['parallel'].pop('streams',None);d['single'].pop('runs',None);print(json.dumps(d))" 2>/dev/null || echo null)}" ;;
      text)   # one greedy completion's text (for A/B equality) and the pipeline counter
        curl -s http://127.0.0.1:$port/v1/completions -H 'Content-Type: application/json' \
          -d '{"prompt":"The history of the river valley","max_tokens":160,"temperature":0,"ignore_eos":true}' \
          | python3 -c "import json,sys;print(json.load(sys.stdin)['choices'][0]['text'])" > "/tmp/text-${label// /_}.txt" 2>&1
        log "$label text: $(md5sum < "/tmp/text-${label// /_}.txt" | cut -c1-12) $(wc -c < "/tmp/text-${label// /_}.txt") bytes;" \
          "$(curl -s http://127.0.0.1:$port/metrics | grep -E '^ember_decode_steps(_pipelined)?_total' | tr '\n' ' ')" ;;
      ttft3k|ttft16k)
        local n=3000; [ $w = ttft16k ] && n=16000
        timeout 200 python3 bench/ttft.py --base-url http://127.0.0.1:$port/v1 --tokens $n -r 3 > /tmp/tt.json 2>/tmp/tt.err
        log "$label $w: $(cat /tmp/tt.json | head -c 300) $(tail -2 /tmp/tt.err)"
        jl "{\"what\":\"$label $w\",\"report\":$(cat /tmp/tt.json 2>/dev/null || echo null)}" ;;
    esac
  done
  kill $pid 2>/dev/null; wait $pid 2>/dev/null
}

for mm in $MODELS; do
  M=$(model_path $mm)
  [ -f "$M" ] || { log "model $mm missing"; continue; }
  log "=== $mm: $M ($(stat -c %s $M) bytes) $(el)"
  read wb bound <<< "$(hbm_bound $M)"
  log "weight bytes per token $wb; HBM bound at 4.8 TB/s: $bound tok/s"
  jl "{\"what\":\"$mm hbm\",\"weight_bytes\":$wb,\"bound_tok_s\":$bound}"
  for part in $PARTS; do
    case $part in
      engine)
        log "--- $mm engine $(el)"
        timeout 150 $B/bin/ember bench -m $M -ngl 99 -c 4096 -p 512 -n 256 -r 3 2>&1 | grep -E "^\|" | tee -a "$S"
        LD_LIBRARY_PATH=$LD/lib:/usr/local/cuda/lib64 timeout 150 $LD/bin/llama-bench -m $M -ngl 99 -p 512 -n 256 -r 3 2>&1 | grep -E "^\|" | tee -a "$S"
        timeout 120 $B/bench/par_decode $M -ngl 99 -np 8 -pp 128 -tg 128 -r 2 2>&1 | tail -2 | tee -a "$S"
        LD_LIBRARY_PATH=$LD/lib:/usr/local/cuda/lib64 timeout 120 $LD/bin/llama-batched-bench -m $M -ngl 99 -npp 128 -ntg 128 -npl 1,8 -c 4096 2>&1 | grep -E "^\|" | tail -3 | tee -a "$S" ;;
      check)
        # greedy continuations of one 600-token prompt (random ids) with the prefill paths on and off:
        # the tensor-core attention (EMBER_CUDA_ATTN_TC) and the f16 GEMM (EMBER_CUDA_GEMM_F16)
        log "--- $mm prefill paths: greedy ids after a 600-token prompt $(el)"
        python3 -c "import random; r=random.Random(7); print(','.join(str(r.randrange(100, 4000)) for _ in range(600)))" > /tmp/ids.txt
        for v in "1 1" "0 1" "1 0" "0 0"; do
          set -- $v
          EMBER_CUDA_ATTN_TC=$1 EMBER_CUDA_GEMM_F16=$2 timeout 60 $B/bin/ember run -m $M -ngl 99 -c 2048 --prompt-ids-file /tmp/ids.txt \
            -n 12 --temp 0 --ignore-eos 2>/dev/null | head -c 400 | sed "s/^/ATTN_TC=$1 GEMM_F16=$2 /" | tee -a "$S"
          echo | tee -a "$S"
        done ;;
      kl)
        # issue 15 item 4: this run (CUDA, default mode) against the CPU backend, teacher-forced over
        # the same text: mean KL divergence, same top-1, both perplexities (llama-perplexity's statistics)
        log "--- $mm fidelity vs the CPU backend (8 chunks of 512) $(el)"
        timeout 300 $B/bin/ember perplexity -m $M -f tests/data/pride_prejudice.txt -c 512 --chunks 8 -ngl 99 \
          --kl-divergence-cpu --kl-json /tmp/kl.json 2>/dev/null | grep -E "PPL|KLD|Same top" | tee -a "$S"
        jl "{\"what\":\"$mm kl\",\"report\":$(cat /tmp/kl.json 2>/dev/null || echo null)}" ;;
      serve1)
        log "--- $mm served single stream + TTFT (np 1, -c 20480) $(el)"
        serve_run "ember $mm np1" $M ember 1 20480 single ttft3k ttft16k
        serve_run "llama $mm np1" $M llama 1 20480 single ttft3k ttft16k ;;
      serve1ab)   # the served pipeline (EMBER_CUDA_FEEDBACK) off and on, alternating, same server flags
        log "--- $mm served single stream, EMBER_CUDA_FEEDBACK=0 / 1 alternating (np 1, -c 20480) $(el)"
        for rep in 1 2; do
          for fb in 0 1; do EMBER_ENV="EMBER_CUDA_FEEDBACK=$fb" serve_run "ember $mm np1 fb$fb" $M ember 1 20480 single text; done
        done
        cmp -s "/tmp/text-ember_${mm}_np1_fb0.txt" "/tmp/text-ember_${mm}_np1_fb1.txt" && log "$mm: greedy text equal with feedback off and on" \
          || log "$mm: greedy text DIFFERS with feedback off and on" ;;
      serve8ab)   # the same for 8 parallel streams
        log "--- $mm served 8 parallel, EMBER_CUDA_FEEDBACK=0 / 1 alternating (32768 KV tokens in all) $(el)"
        for rep in 1 2; do
          for fb in 0 1; do EMBER_ENV="EMBER_CUDA_FEEDBACK=$fb" serve_run "ember $mm np8 fb$fb" $M ember 8 32768 par8; done
        done ;;
      serve8)
        log "--- $mm served 8 parallel (32768 KV tokens in all) $(el)"
        serve_run "ember $mm np8" $M ember 8 32768 par8
        serve_run "llama $mm np8" $M llama 8 32768 par8 ;;
    esac
  done
done
log "=== done $(el)"
