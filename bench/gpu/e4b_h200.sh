#!/usr/bin/env bash
# bench/gpu/e4b_h200.sh — Gemma 4 E4B-shaped speed and memory on one GPU (the
# lent H200): ember, and llama.cpp when a CUDA build of it is given. Run from
# the repository root on the device; results go under $OUT.
#
# Default run (~3 minutes of GPU time, issue 10's CUDA part):
#   0. the GPU tests: test_cuda_attn (head sizes 512/256/16/32/... against a
#      double-precision reference), test_cuda_backend_attn (the backend op vs
#      the CPU backend op) and test_gemma4 (the tiny gemma4 goldens
#      against transformers, GPU half: device scratch, PLE upload, graphs),
#      plus test_cuda_ops / test_cuda_matmul; a failing test_gemma4 is rerun
#      with EMBER_CUDA_GRAPHS=0 and with EMBER_CUDA_VERIFY=1 (per-op CPU
#      comparison) so one run says where it goes wrong
#   1. the E4B-shaped file (bench/gpu/make_e4b_gguf_stdlib.py, into /dev/shm)
#   2. ember bench -ngl 99 -p 512 -n 256 -r 3 at -c 16384 and -c 65536:
#      pp512, tg256 and the GPU memory in use before loading / after the runs
#      (cudaMemGetInfo; target <= 4 GiB at -c 16384, PLE table on the host)
# FULL=1 adds: 8-parallel aggregate decode (build-cuda/bench/par_decode),
# TTFT and memory of `ember serve` at each context, llama.cpp when LLAMA_BIN
# has a CUDA build of it.
#
# PLE table on the host: no flag is needed in either engine. llama.cpp keeps
# per_layer_token_embd on the CPU by default (an input-layer tensor, read
# lazily). ember's gemma4 looks up its rows on the host from the mapped file
# and uploads them once per micro-batch (src/model/gemma4.c
# gemma4_ple_inputs), so the CUDA backend never uploads the 1.48 GiB table.
#
# Inputs (environment):
#   OUT            results folder (required; the device tool fetches it)
#   BUILD          CUDA build folder (default build-cuda; built here with
#                  -DEMBER_CUDA=ON if its ember is missing and nvcc exists)
#   EMBER_BIN      default $BUILD/bin/ember
#   PAR_BIN        par_decode (default $BUILD/bench/par_decode; FULL=1 only)
#   LLAMA_BIN      folder with a CUDA build of llama-bench / llama-batched-bench /
#                  llama-server (optional, FULL=1: the device has no llama.cpp)
#   MODEL          an existing E4B-shaped GGUF (default: generated into $WORK)
#   WORK           scratch folder (default /dev/shm/e4b, else /tmp/e4b)
#   E4B_ARGS       extra generator arguments (e.g. "--layers 12 --vocab 4096" for a dry run)
#   PLE_HOST_FLAG  extra flags for ember (none needed)
#   STEP_TIMEOUT   seconds per step (default 150); the device allows 600 per command
#   BENCH_ARGS     ember/llama bench sizes (default "-p 512 -n 256 -r 3")
#   TTFT_SHORT, TTFT_LONG  prompt lengths in tokens (default 128, 1024; FULL=1)
#   CTXS           contexts (default "16384 65536")
#   SKIP_TESTS=1   skip step 0
#   MEM_AB=1       rerun the first context with EMBER_CUDA_STACK=1024 EMBER_CUDA_CUBLAS_WS_MIB=0
#                  (the driver's and cuBLAS's defaults) to show what those settings save
# Dry run on a CPU box: OUT=/tmp/o E4B_ARGS="--layers 12 --vocab 4096" BENCH_ARGS="-p 16 -n 4 -r 1" \
#   BUILD=build STEP_TIMEOUT=120 bench/gpu/e4b_h200.sh
set -u
: "${OUT:?set OUT}"
if [ -d /dev/shm ] && [ -w /dev/shm ]; then WORK=${WORK:-/dev/shm/e4b}; else WORK=${WORK:-/tmp/e4b}; fi
BUILD=${BUILD:-build-cuda}
EMBER_BIN=${EMBER_BIN:-$BUILD/bin/ember}
PAR_BIN=${PAR_BIN:-$BUILD/bench/par_decode}
STEP_TIMEOUT=${STEP_TIMEOUT:-150}
PLE_HOST_FLAG=${PLE_HOST_FLAG:-}
BENCH_ARGS=${BENCH_ARGS:--p 512 -n 256 -r 3}
TTFT_SHORT=${TTFT_SHORT:-128}
TTFT_LONG=${TTFT_LONG:-1024}
CTXS=${CTXS:-16384 65536}
FULL=${FULL:-0}
mkdir -p "$OUT" "$WORK"
S="$OUT/summary.md"
log() { echo "$*" | tee -a "$S"; }
have() { command -v "$1" >/dev/null 2>&1; }
t0=$(date +%s)

log "# E4B-shaped run, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
log ""
log "host: $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB RAM, load $(cut -d' ' -f1-3 /proc/loadavg)"
if have nvidia-smi; then
  log "gpu: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -1)"
  GPU=1
else
  log "gpu: none (nvidia-smi missing): CPU dry run"
  GPU=0
fi

# --- build ember with CUDA if no binary was carried
if [ ! -x "$EMBER_BIN" ] && have nvcc; then
  log "building ember (EMBER_CUDA=ON) into $BUILD"
  cmake -S . -B "$BUILD" -DEMBER_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90-real -DCMAKE_BUILD_TYPE=Release >"$OUT/build.log" 2>&1 &&
    cmake --build "$BUILD" -j"$(nproc)" >>"$OUT/build.log" 2>&1 || { log "build failed (build.log)"; }
fi
[ -x "$EMBER_BIN" ] || { log "no ember binary at $EMBER_BIN"; exit 1; }

# --- 0. GPU tests (from the repository root: they read tests/golden, tests/data)
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  log "## GPU tests ($BUILD/tests)"
  for t in test_cuda_attn test_cuda_backend_attn test_gemma4 test_cuda_ops test_cuda_matmul; do
    [ -x "$BUILD/tests/$t" ] || { log "- $t: not built"; continue; }
    s0=$(date +%s)
    timeout "$STEP_TIMEOUT" "$BUILD/tests/$t" >"$OUT/$t.txt" 2>&1
    rc=$?
    log "- $t: rc $rc in $(( $(date +%s) - s0 )) s; $(grep -E '^\[  (PASSED|FAILED)  \]|^\[  SKIPPED \] [0-9]+ test' "$OUT/$t.txt" | tr '\n' ' ')"
    grep -E '^# .*(\[GPU\]|D=)|ERROR|FAILED|Failure|fail' "$OUT/$t.txt" | head -60 >>"$S"
    if [ "$t" = test_gemma4 ] && [ $rc != 0 ]; then
      EMBER_CUDA_GRAPHS=0 timeout "$STEP_TIMEOUT" "$BUILD/tests/$t" >"$OUT/${t}_nographs.txt" 2>&1
      log "  rerun with EMBER_CUDA_GRAPHS=0: rc $? (${t}_nographs.txt)"
      EMBER_CUDA_VERIFY=1 timeout "$STEP_TIMEOUT" "$BUILD/tests/$t" >"$OUT/${t}_verify.txt" 2>&1
      log "  rerun with EMBER_CUDA_VERIFY=1 (per-op CPU comparison): rc $? (${t}_verify.txt)"
      grep -m20 'CUDA verify' "$OUT/${t}_verify.txt" >>"$S"
    fi
  done
  log ""
fi

# --- the model file (standard-library generator: no numpy / gguf-py here)
if [ -z "${MODEL:-}" ]; then
  MODEL="$WORK/e4b-random-q4km.gguf"
  if [ ! -s "$MODEL" ]; then
    g0=$(date +%s)
    python3 bench/gpu/make_e4b_gguf_stdlib.py "$MODEL" ${E4B_ARGS:-} >"$OUT/gen.log" 2>&1 || { log "generator failed"; cat "$OUT/gen.log"; exit 1; }
    log "generated $(tail -1 "$OUT/gen.log") in $(( $(date +%s) - g0 )) s"
  fi
fi
PLE_BYTES=$(python3 - "$MODEL" <<'PY'
import struct, sys
# find per_layer_token_embd.weight's size from the GGUF header (Q4_K 144 B / 256, Q6_K 210 B / 256)
f = open(sys.argv[1], "rb"); rd = lambda fmt: struct.unpack("<" + fmt, f.read(struct.calcsize("<" + fmt)))
def s(): n, = rd("Q"); return f.read(n).decode()
def skip(t):
    if t == 8: s()
    elif t == 9:
        st, n = rd("IQ")
        for _ in range(n): skip(st)
    else: f.read({0:1,1:1,2:2,3:2,4:4,5:4,6:4,7:1,10:8,11:8,12:8}[t])
assert f.read(4) == b"GGUF"; _, nt, nkv = rd("IQQ")
for _ in range(nkv): s(); t, = rd("I"); skip(t)
for _ in range(nt):
    name = s(); nd, = rd("I"); ne = rd("%dQ" % nd); t, _ = rd("IQ")
    if name == "per_layer_token_embd.weight":
        bs, tb = {12: (256, 144), 14: (256, 210), 0: (1, 4)}[t]
        print(ne[0] // bs * tb * ne[1]); break
PY
)
log "model: $MODEL ($(du -m "$MODEL" | cut -f1) MiB; PLE table $(( ${PLE_BYTES:-0} / 1048576 )) MiB)"
log ""

gpu_used() {  # whole-GPU memory in use, MiB
  [ "$GPU" = 1 ] && nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1 || echo "n/a"
}
proc_mem() {  # GPU memory of pid $1, MiB
  [ "$GPU" = 1 ] && nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits | awk -F', ' -v p="$1" '$1==p{print $2}' || echo "n/a"
}
smi_watch() {  # sample whole-GPU memory every 200 ms into $1 until killed; prints the sampler's pid
  if [ "$GPU" = 1 ]; then
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 >"$1" 2>/dev/null &
    echo $!
  fi
}
peak() { [ -s "$1" ] && sort -n "$1" | tail -1 || echo "n/a"; }
log "GPU memory in use before the runs: $(gpu_used) MiB"

# --- 2. single stream: pp512, tg256 and GPU memory at each context
for ctx in $CTXS; do
  log "## ember bench -ngl 99 $BENCH_ARGS -c $ctx $PLE_HOST_FLAG"
  w=$(smi_watch "$OUT/smi_bench_$ctx.txt")
  s0=$(date +%s)
  timeout "$STEP_TIMEOUT" "$EMBER_BIN" bench -m "$MODEL" -ngl 99 $BENCH_ARGS -c "$ctx" $PLE_HOST_FLAG \
    >"$OUT/ember_bench_$ctx.md" 2>"$OUT/ember_bench_$ctx.err"
  rc=$?
  [ -n "$w" ] && kill "$w" 2>/dev/null
  # the table, cudaMemGetInfo and the CUDA backend's memory by category, to stdout too
  tee -a "$S" <"$OUT/ember_bench_$ctx.md"
  log "(rc $rc in $(( $(date +%s) - s0 )) s; peak GPU memory in use during the run (nvidia-smi) $(peak "$OUT/smi_bench_$ctx.txt") MiB; GPU in use now $(gpu_used) MiB)"
  [ $rc != 0 ] && tail -5 "$OUT/ember_bench_$ctx.err" | tee -a "$S"
  log ""
done
# MEM_AB=1: the first context again with the driver's default stack reservation
# (1 KiB/thread) and cuBLAS's own workspace, to show what those two settings save
if [ "${MEM_AB:-0}" = 1 ]; then
  ctx=${CTXS%% *}
  log "## A/B: EMBER_CUDA_STACK=1024 EMBER_CUDA_CUBLAS_WS_MIB=0 ember bench -ngl 99 $BENCH_ARGS -c $ctx"
  w=$(smi_watch "$OUT/smi_bench_ab.txt")
  EMBER_CUDA_STACK=1024 EMBER_CUDA_CUBLAS_WS_MIB=0 timeout "$STEP_TIMEOUT" "$EMBER_BIN" bench -m "$MODEL" -ngl 99 \
    $BENCH_ARGS -c "$ctx" >"$OUT/ember_bench_ab.md" 2>"$OUT/ember_bench_ab.err"
  rc=$?
  [ -n "$w" ] && kill "$w" 2>/dev/null
  grep -E '^\| ember|tg|pp|GPU memory|stack' "$OUT/ember_bench_ab.md" | tee -a "$S"
  log "(rc $rc; peak GPU memory in use (nvidia-smi) $(peak "$OUT/smi_bench_ab.txt") MiB)"
fi
if [ "$FULL" != 1 ]; then
  log "total $(( $(date +%s) - t0 )) s (FULL=1 adds par_decode, servers, llama.cpp)"
  exit 0
fi

# --- 2. 8 parallel streams
if [ -x "$PAR_BIN" ]; then
  log "## par_decode -np 8 -pp 128 -tg 128 (aggregate S_TG), and -np 1 for reference"
  for np in 1 8; do
    timeout "$STEP_TIMEOUT" "$PAR_BIN" "$MODEL" -np $np -pp 128 -tg 128 -r 2 >>"$OUT/par_decode.txt" 2>&1
    log "np $np (rc $?): $(grep par_decode: "$OUT/par_decode.txt" | tail -1)"
  done
else
  log "## par_decode: not built ($PAR_BIN; it comes with the cudagraph branch)"
fi
log ""

# --- 3. server: TTFT and memory at -c 16384 and 65536
seed=0
ttft() {  # $1 = base url, $2 = prompt tokens, $3 = tag: one completion of max_tokens 1, wall seconds
  seed=$((seed + 1))
  # a token-id prompt (<bos> + distinct random ids of the synthetic "t<i>" tokens): exactly $2 tokens,
  # a new one each call so no prefix cache helps; both servers accept token arrays
  python3 -c "import json, random, sys; r = random.Random(int(sys.argv[2])); n = int(sys.argv[1]); print(json.dumps({'prompt': [2] + [r.randrange(300, 4000) for _ in range(n - 1)], 'max_tokens': 1, 'temperature': 0}))" "$2" "$seed" >"$WORK/req.json"
  curl -s -o "$OUT/resp_$3.json" -w '%{time_total}' -H 'Content-Type: application/json' -d @"$WORK/req.json" "$1/v1/completions"
}
serve_run() {  # $1 = engine (ember|llama), $2 = ctx
  local eng=$1 ctx=$2 pid
  port=$(python3 -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
  if [ "$eng" = ember ]; then
    "$EMBER_BIN" serve -m "$MODEL" -c "$ctx" -np 1 --port $port $PLE_HOST_FLAG >"$OUT/serve_${eng}_$ctx.log" 2>&1 &
  else
    "$LLAMA_BIN/llama-server" -m "$MODEL" -c "$ctx" -np 1 -ngl 99 --port $port --no-webui >"$OUT/serve_${eng}_$ctx.log" 2>&1 &
  fi
  pid=$!
  local base="http://127.0.0.1:$port" i=0
  until curl -sf "$base/health" >/dev/null 2>&1 && kill -0 $pid 2>/dev/null; do
    sleep 0.5; i=$((i + 1))
    if ! kill -0 $pid 2>/dev/null || [ $i -gt 240 ]; then
      log "$eng -c $ctx: server did not come up: $(tail -2 "$OUT/serve_${eng}_$ctx.log")"; kill $pid 2>/dev/null; return
    fi
  done
  log "$eng -c $ctx: up after $((i / 2)) s; idle GPU memory: process $(proc_mem $pid) MiB, GPU $(gpu_used) MiB"
  ttft "$base" 16 "${eng}_${ctx}_warm" >/dev/null   # first use uploads weights: not timed
  local r=""
  for tag in 1 2 3; do
    r="$r $(ttft "$base" "$TTFT_SHORT" "${eng}_${ctx}_a$tag")"
  done
  log "  TTFT, ~$TTFT_SHORT-token prompts (s): $r  (prompt tokens: $(grep -o '"prompt_tokens":[0-9]*' "$OUT/resp_${eng}_${ctx}_a1.json"))"
  r=""
  for tag in 1 2; do
    r="$r $(ttft "$base" "$TTFT_LONG" "${eng}_${ctx}_b$tag")"
  done
  log "  TTFT, ~$TTFT_LONG-token prompts (s): $r  (prompt tokens: $(grep -o '"prompt_tokens":[0-9]*' "$OUT/resp_${eng}_${ctx}_b1.json"))"
  local pm; pm=$(proc_mem $pid)
  log "  after requests: GPU memory of the process $pm MiB, whole GPU $(gpu_used) MiB; host VmRSS $(awk '/VmRSS/{print int($2/1024)}' /proc/$pid/status) MiB"
  if [ -n "$pm" ] && [ "$pm" != n/a ] && [ -n "${PLE_BYTES:-}" ]; then
    log "  (the PLE table, $(( PLE_BYTES / 1048576 )) MiB, stays on the host in both engines; target: < 4096 MiB at -c 16384)"
  fi
  log "  $(grep -m1 'KV pool' "$OUT/serve_${eng}_$ctx.log")"
  kill $pid; wait $pid 2>/dev/null
}
log "## servers: TTFT and memory (one slot)"
for ctx in $CTXS; do
  serve_run ember $ctx
  [ -n "${LLAMA_BIN:-}" ] && [ -x "$LLAMA_BIN/llama-server" ] && serve_run llama $ctx
done
log ""

# --- 4. llama.cpp, when a CUDA build was carried
if [ -n "${LLAMA_BIN:-}" ] && [ -x "$LLAMA_BIN/llama-bench" ]; then
  log "## llama-bench -ngl 99 $BENCH_ARGS"
  timeout "$STEP_TIMEOUT" "$LLAMA_BIN/llama-bench" -m "$MODEL" -ngl 99 $BENCH_ARGS -o md >"$OUT/llama_bench.md" 2>"$OUT/llama_bench.err"
  cat "$OUT/llama_bench.md" >>"$S"
  if [ -x "$LLAMA_BIN/llama-batched-bench" ]; then
    log "## llama-batched-bench -npp 128 -ntg 128 -npl 1,8"
    timeout "$STEP_TIMEOUT" "$LLAMA_BIN/llama-batched-bench" -m "$MODEL" -ngl 99 -c 4096 -b 2048 -ub 512 -npp 128 -ntg 128 -npl 1,8 \
      >"$OUT/llama_batched.txt" 2>&1
    grep '^|' "$OUT/llama_batched.txt" >>"$S"
  fi
else
  log "## llama.cpp: no CUDA build given (LLAMA_BIN): no ratio in this run"
fi
log ""
log "total $(( $(date +%s) - t0 )) s"
