#!/bin/bash
# bench/gpu/dflash_h200.sh — issue 16 item 4 on the lent GPU: DFlash speculation on the E4B-shaped target
# (bench/gpu/make_e4b_gguf_stdlib.py, random Q4_K_M-like weights) with a draft of the published
# Nemotron-3.5-Bolt-E4B DFlash draft's shape (bench/gpu/make_dflash_gguf_stdlib.py: 5 layers, 2560 wide,
# 32/8 heads of 128, n_ff 5120, 5 target layers, block 8, BF16, ~0.72 GB). Random weights accept nothing,
# so ember's acceptance is forced (serve --spec-force-accept X: X of the 7 drafted tokens a step on average).
#
# Measured (bench/serve.py: chat completions, 256 forced tokens, single stream median of 3, then 8 parallel):
#   ember plain decode (np 1 and np 8), ember DFlash at forced acceptance FA (default 2 3.5 5 of 7; draft
#   length fixed at 7: --spec-adaptive off), DFlash at 3.5 with the adaptive draft policy on, and llama-server
#   plain and with the same draft (--spec-type draft-dflash ...: acceptance ~0 with random weights, so only its
#   step time means something). From every response's `timings` (predicted_n, predicted_ms, draft_n,
#   draft_n_accepted): steps = predicted_n - 1 - accepted, step time = predicted_ms / steps, accepted per step;
#   projected tok/s = (accepted per step + 1) / step time (streams x that at 8 streams); definitions in
#   bench/gpu/dflash_summary.py, which prints the table.
# Targets (issue 16 item 4): at 3.5 of 7, single stream >= 2.0x ember's plain single stream and 8 streams
#   >= 1.0x ember's plain 8-stream aggregate.
#
# Run from the repository root on the device:   OUT=... bash bench/gpu/dflash_h200.sh
# Inputs: .carry/bins.tar.xz (bench/gpu/pack_carry.sh: b/bin/ember of a CUDA build + lib/), .carry/whl/*.whl
#   (openai for bench/serve.py, python 3.12), llama.cpp at /root/llama/llama.cpp-cuda-sm90 (or its parts as
#   .carry/llama/*.part0* or .carry/l0/, l1/..., unpacked there). The two model files are made into /dev/shm when absent (~20 s).
# Environment: OUT (results: $OUT/dflash-gpu.txt summary, $OUT/dflash-gpu.jsonl one object per measurement,
#   $OUT/dflash-logs.tar.xz the server and client logs), FA (forced acceptances, default "2 3.5 5"), PARTS (default "tests plain spec
#   policy np1spec llama"; tests: the carried test_cuda_ops (device timers) and test_dflash_spec (its *_gpu lossless
#   tests, DFlash target and draft on the GPU); np1spec: DFlash 3.5 on a 1-slot server, as plain np1), LIMIT (seconds; parts that would start after it are skipped,
#   default 330), N (tokens per request, 256), EMBER_EXTRA (more ember serve flags), NGL (99),
#   B (folder holding bin/ember; default: unpack .carry/bins.tar.xz to /tmp/g), TARGET / DRAFT (model paths),
#   PY (python3).
set -u
: "${OUT:?set OUT}"
C=.carry
FA=${FA:-2 3.5 5}
PARTS=${PARTS:-tests plain spec policy np1spec llama}
LIMIT=${LIMIT:-330}
N=${N:-256}
NGL=${NGL:-99}
PY=${PY:-python3}
L=/tmp/dfb-logs   # server and client logs, packed into $OUT/dflash-logs.tar.xz at the end ($OUT returns 8 files at most)
rm -rf $L; mkdir -p $L "$OUT"
S=$OUT/dflash-gpu.txt
J=$OUT/dflash-gpu.jsonl
: > "$J"
log() { echo "$*" | tee -a "$S"; }
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 ))s]"; }
late() { [ $(( $(date +%s) - T0 )) -gt "$LIMIT" ] && { log "SKIPPED (past LIMIT=${LIMIT}s): $*"; return 0; }; return 1; }

if [ -z "${B:-}" ]; then
  mkdir -p /tmp/g
  tar xJf $C/bins.tar.xz -C /tmp/g || { log "cannot unpack $C/bins.tar.xz"; exit 1; }
  B=/tmp/g/b
  export LD_LIBRARY_PATH=/tmp/g/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
fi
mkdir -p /root/llama 2>/dev/null
LD=/root/llama/llama.cpp-cuda-sm90
# the parts of ../shared/tools/llama.cpp-cuda-sm90 under .carry/llama/ (serve_h200.sh) or .carry/l0, l1, ...
LP=$(ls $C/llama/*.part0* $C/l[0-9]*/*.part0* 2>/dev/null | awk -F/ '{print $NF" "$0}' | sort | cut -d' ' -f2)
if [ ! -x $LD/bin/llama-server ] && [ -n "$LP" ]; then cat $LP | tar xJ -C /root/llama; fi
# openai for bench/serve.py (kept in /tmp/site while the machine stays warm)
if ! $PY -c "import openai" 2>/dev/null; then
  [ -d /tmp/site/openai ] || $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $C/whl/*.whl >/dev/null 2>&1
  export PYTHONPATH=/tmp/site
fi
# the binary must have --spec-force-accept (14d399b) and --spec-draft-ngl (6388d6b, the GPU draft)
if [ "$($B/bin/ember serve --help 2>&1 | grep -cE -- '--spec-force-accept|--spec-draft-ngl')" -lt 2 ]; then
  log "$B/bin/ember lacks --spec-force-accept or --spec-draft-ngl: repack .carry/bins.tar.xz from a newer build"; exit 1
fi
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>/dev/null | tee -a "$S"
log "commit $(cat $C/commit 2>/dev/null | tr '\n' ' ') (bins); tree $(git rev-parse --short HEAD 2>/dev/null)"

# the two files (made in parallel when absent)
TARGET=${TARGET:-/dev/shm/e4b.gguf}
DRAFT=${DRAFT:-/dev/shm/e4b-dflash.gguf}
[ -f "$TARGET" ] || { timeout 200 $PY bench/gpu/make_e4b_gguf_stdlib.py "$TARGET.part" > "$L/make-target.txt" 2>&1 && mv "$TARGET.part" "$TARGET"; } &
[ -f "$DRAFT" ] || { timeout 200 $PY bench/gpu/make_dflash_gguf_stdlib.py "$DRAFT.part" > "$L/make-draft.txt" 2>&1 && mv "$DRAFT.part" "$DRAFT"; } &
wait
for f in "$TARGET" "$DRAFT"; do [ -f "$f" ] || { log "missing $f"; cat $L/make-*.txt | tee -a "$S"; exit 1; }; done
log "target $TARGET ($(stat -c %s "$TARGET") bytes), draft $DRAFT ($(stat -c %s "$DRAFT") bytes) $(el)"
cat $L/make-*.txt 2>/dev/null >> "$S"

DFL="--spec-type draft-dflash --spec-draft-model $DRAFT --spec-draft-n-max 7 --spec-draft-ngl $NGL"
PID=
PORT=

wait_up() {  # port pid
  for i in $(seq 1 240); do
    curl -sf http://127.0.0.1:$1/health >/dev/null 2>&1 && return 0
    kill -0 $2 2>/dev/null || return 1
    sleep 0.25
  done
  return 1
}

up() {  # label engine np ctx flags...
  local label=$1 eng=$2 np=$3 ctx=$4; shift 4
  PORT=$((18000 + RANDOM % 2000))
  local lf="$L/${label// /_}.txt"
  if [ $eng = ember ]; then
    $B/bin/ember serve -m "$TARGET" -ngl $NGL -np $np -c $ctx --port $PORT --alias m --metrics ${EMBER_EXTRA:-} "$@" > "$lf" 2>&1 &
  else
    LD_LIBRARY_PATH=$LD/lib:/usr/local/cuda/lib64 $LD/bin/llama-server -m "$TARGET" -ngl $NGL -np $np -c $ctx \
      --port $PORT --alias m --jinja --metrics "$@" > "$lf" 2>&1 &
  fi
  PID=$!
  if ! wait_up $PORT $PID; then
    log "$label: server did not come up $(el)"; tail -8 "$lf" | tee -a "$S"; kill $PID 2>/dev/null; wait $PID 2>/dev/null; PID=; return 1
  fi
  log "$label: up $(el); $(grep -hE 'speculative decoding:|speculative|dflash|DFlash' "$lf" | head -3 | cut -c1-400 | tr '\n' ' ')"
}

down() { [ -n "$PID" ] && { kill $PID 2>/dev/null; wait $PID 2>/dev/null; }; PID=; }

metrics() {  # the spec / step counters, one line
  curl -s --max-time 5 http://127.0.0.1:$PORT/metrics | grep -E '^(ember_decode_steps_total|ember_spec_(drafts|draft_tokens|draft_tokens_accepted)_total|llamacpp:(n_decode_total|spec_decode_num_(drafts|draft_tokens|accepted_tokens)_total))' | tr '\n' ' '
}

# bench/serve.py, then one JSON line: label, what (single: -r 3 -P 1; par8: -r 1 -P 8), fa, the report
measure() {  # label what fa
  local label=$1 what=$2 fa=$3 r=3 p=1
  [ $what = par8 ] && { r=1; p=8; }
  local m0; m0=$(metrics)
  timeout 100 $PY bench/serve.py --base-url http://127.0.0.1:$PORT/v1 --model m -n $N -r $r -P $p --config "$label" \
    --server-pid $PID --json /tmp/dfb.json > "$L/serve-${label// /_}-$what.txt" 2>&1
  local rc=$?
  $PY -c 'import json, sys
try:
    rep = json.load(open("/tmp/dfb.json"))
except (OSError, ValueError):
    rep = None
l, w, fa, rc, m0, m1 = sys.argv[1:7]
print(json.dumps({"label": l, "what": w, "fa": json.loads(fa), "rc": int(rc), "metrics_before": m0, "metrics_after": m1,
                  "report": rep}))' "$label" "$what" "$fa" "$rc" "$m0" "$(metrics)" >> "$J"
  rm -f /tmp/dfb.json
  $PY bench/gpu/dflash_summary.py last "$J" | tee -a "$S"
}

# ---- ember -------------------------------------------------------------------------------------------
for part in $PARTS; do
  case $part in
    tests)
      log "=== GPU unit tests $(el)"
      for t in test_cuda_ops test_dflash_spec; do
        [ -x $B/tests/$t ] || { log "$t: not carried"; continue; }
        timeout 120 $B/tests/$t > $L/$t.txt 2>&1; rc=$?
        log "$t rc=$rc $(grep -cE '^\[       OK \]' $L/$t.txt) ok, $(grep -cE '^\[  FAILED  \]' $L/$t.txt) failed lines, $(grep -cE '^\[  SKIPPED \]' $L/$t.txt) skipped lines"
        [ $rc = 0 ] || tail -15 $L/$t.txt | tee -a "$S"
      done ;;
    plain)
      log "=== ember plain decode $(el)"
      late "ember plain np1" || { up "ember plain np1" ember 1 4096 && measure "ember plain np1" single null; down; }
      late "ember plain np8" || { up "ember plain np8" ember 8 16384 && { measure "ember plain np8" single null; measure "ember plain np8" par8 null; }; down; } ;;
    spec)
      log "=== ember DFlash, forced acceptance, 7 drafted a step (--spec-adaptive off) $(el)"
      for fa in $FA; do
        late "ember dflash fa$fa" || { up "ember dflash fa$fa" ember 8 16384 $DFL --spec-force-accept $fa --spec-adaptive off &&
          { measure "ember dflash fa$fa" single $fa; measure "ember dflash fa$fa" par8 $fa; }; down; }
      done ;;
    policy)
      log "=== ember DFlash at 3.5, the adaptive draft policy on (default) $(el)"
      late "ember dflash fa3.5 adaptive" || { up "ember dflash fa3.5 adaptive" ember 8 16384 $DFL --spec-force-accept 3.5 &&
        { measure "ember dflash fa3.5 adaptive" single 3.5; measure "ember dflash fa3.5 adaptive" par8 3.5; }; down; } ;;
    np1spec)
      late "ember dflash fa3.5 np1" || { up "ember dflash fa3.5 np1" ember 1 4096 $DFL --spec-force-accept 3.5 --spec-adaptive off &&
        measure "ember dflash fa3.5 np1" single 3.5; down; } ;;
    llama)
      if [ ! -x $LD/bin/llama-server ]; then log "no llama.cpp at $LD"; continue; fi
      log "=== llama-server (no forced acceptance: random weights accept ~nothing) $(el)"
      late "llama plain np8" || { up "llama plain np8" llama 8 16384 && { measure "llama plain np8" single null; measure "llama plain np8" par8 null; }; down; }
      late "llama dflash np8" || { up "llama dflash np8" llama 8 16384 $DFL && { measure "llama dflash np8" single 0; measure "llama dflash np8" par8 0; }; down; } ;;
  esac
done

# ---- summary ---------------------------------------------------------------------------------------
log "=== summary $(el)"
$PY bench/gpu/dflash_summary.py table "$J" | tee -a "$S"
log "=== done $(el)"
tar cJf "$OUT/dflash-logs.tar.xz" -C /tmp dfb-logs 2>/dev/null
