#!/bin/bash
# bench/gpu/qwen35_h200.sh — issue 17 item 5, GPU half: the Qwen3.5-4B-shaped random Q4_K_M file
# (bench/make_qwen35_gguf.py, seed 0, made in /dev/shm), ember vs llama.cpp in the same run on the
# same file, everything with -ngl 99; the GPU mirror of bench/qwen35_cpu.py:
#
#   pp512 / tg256   ember bench -m F -ngl 99 -p 512 -n 256 -r 3 -o json           (its median)
#                   llama-bench -m F -ngl 99 -p 512 -n 256 -r 3 -o json           (median of samples_ts)
#   8 streams       par_decode F -np 8 -pp 128 -tg 128 -r 3 -ngl 99               (S_TG, after a warm-up)
#                   llama-batched-bench -m F -ngl 99 -npp 128 -ntg 128 -npl 8,8,8 -c 4096   (median S_TG)
#   GPU memory      ember serve / llama-server -m F -ngl 99 -c 16384 -np N (N in MEMNP, default "1 4"),
#                   after /health and one 8-token completion: nvidia-smi memory.used minus before the
#                   start, and the compute apps' used_memory
#
# Run from the repository root on the device ($OUT is set there):  bash bench/gpu/qwen35_h200.sh
#   One call (about 2-3 minutes of script) when the llama.cpp build is already unpacked in /root/llama on
#   the warm machine (an earlier serve_h200.sh / ttft_ub_h200.sh call): carry .carry/bins.tar.xz,
#   .carry/commit, .carry/whl. On a fresh machine, two calls back to back (the machine stays warm 30 s):
#   1) carry .carry/l1 .carry/whl         stashes parts 01 and 02, makes the file (~20 s), stops
#   2) carry .carry/l0 .carry/bins.tar.xz .carry/commit .carry/whl     everything else
#   (the tree is ~26 MB; call 1 ~60 MB, call 2 ~56 MB of the 64 MiB limit). If the machine went cold in
#   between, call 2 still measures ember alone (llama.cpp columns n/a; log.txt says "parts stashed: 1 of 3").
# Inputs under .carry/ (made on the dev box):
#   bins.tar.xz, commit        bench/gpu/pack_carry.sh (b/bin/ember, b/bench/par_decode, lib/); unpacked
#                              into /tmp/g; a later warm call need not carry them again
#   whl/gguf-0.19.0-*.whl      gguf-py for make_qwen35_gguf.py (pack_carry.sh's header says how it is
#                              downloaded); installed into /tmp/site with --no-deps: it needs numpy and
#                              pyyaml (transformers' dependencies; a stub stands in if yaml is missing)
#   l0/, l1/ or llama/         the llama.cpp CUDA parts (../shared/tools/llama.cpp-cuda-sm90/*.part0*):
#                              kept in /root/stash across warm calls and unpacked into /root/llama once all
#                              three are there (sha256 checked). They and the tree do not fit one call's
#                              transfer: carry l1 (with whl) in a first call, l0 (with bins.tar.xz) in the
#                              next. Without llama.cpp the script measures ember alone.
# A call that carries no bins.tar.xz while the llama.cpp parts are incomplete (or that finds no ember
# binary at all) only stashes parts and makes the file, then stops: the first of two calls. The file is kept in /dev/shm while the machine stays warm.
# Environment: OUT (required); DEADLINE (seconds, default 300: later steps are skipped and said so, and
#   no command runs past DEADLINE + 40);
#   MEMNP ("1 4"); REPS (3); PARTS (default "engine par mem"); LB_EXTRA (extra llama-bench flags, e.g.
#   "-fa 1"; none by default: its defaults, as serve_h200.sh); for tests on a box without a GPU:
#   NGL (99), PY (python3), MODEL (/dev/shm/qwen35-4b-q4km.gguf), MAKEARGS (extra make_qwen35_gguf.py
#   arguments, e.g. "--layers 8 --vocab 4096"), G (/tmp/g), EMBER_B ($G/b: bin/ember, bench/par_decode),
#   SITE (/tmp/site), STASH (/root/stash), LLAMA_ROOT (/root/llama), LLAMA_BIN ($LLAMA_ROOT/llama.cpp-cuda-sm90/bin).
# Results (4 files: the device returns at most 8): $OUT/qwen35-gpu.txt (the summary, with a markdown
#   table for bench/results/qwen35.md), $OUT/qwen35-gpu.json (the figures), $OUT/qwen35-raw.txt (every
#   command's output, concatenated), $OUT/log.txt (progress).
set -u
: "${OUT:?set OUT}"
C=.carry
NGL=${NGL:-99}
PY=${PY:-python3}
MODEL=${MODEL:-/dev/shm/qwen35-4b-q4km.gguf}
G=${G:-/tmp/g}
EMBER_B=${EMBER_B:-$G/b}
SITE=${SITE:-/tmp/site}
STASH=${STASH:-/root/stash}
LLAMA_ROOT=${LLAMA_ROOT:-/root/llama}
LLAMA_BIN=${LLAMA_BIN:-$LLAMA_ROOT/llama.cpp-cuda-sm90/bin}
LLAMA_SHA=f100e0ab1269ee9288dc67369b8c3c34ca2e79e427d9a552b39b2a16ab6d128f   # the parts' tarball (its README)
DEADLINE=${DEADLINE:-300}
REPS=${REPS:-3}
MEMNP=${MEMNP:-1 4}
PARTS=${PARTS:-engine par mem}
R=${RAW:-/tmp/q35raw}   # every command's output; concatenated into $OUT/qwen35-raw.txt at the end
rm -rf "$R"; mkdir -p "$R" "$OUT"
L=$OUT/log.txt
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
log() { echo "[$(el)s] $*" | tee -a "$L"; }
has() { case " $PARTS " in *" $1 "*) return 0 ;; esac; return 1; }
lim() {  # timeout for a command: at most $1 s, and none past DEADLINE + 40
  local left=$(( DEADLINE + 40 - $(el) ))
  [ "$left" -lt 10 ] && left=10
  if [ "$1" -lt "$left" ]; then echo "$1"; else echo "$left"; fi
}
finish() {
  for f in "$R"/*; do [ -f "$f" ] && { echo "===== $(basename "$f")"; cat "$f"; echo; }; done > "$OUT/qwen35-raw.txt"
}
trap finish EXIT
in_time() {  # step name: false (and said) once DEADLINE is passed
  [ "$(el)" -lt "$DEADLINE" ] && return 0
  log "SKIPPED $1: past DEADLINE ${DEADLINE}s"; echo "$1" >> "$R/skipped.txt"; return 1
}

# --- inputs: llama.cpp parts, ember binaries, gguf-py -------------------------------------------------
mkdir -p "$STASH" "$LLAMA_ROOT" "$G" "$SITE"
for d in $C/l0 $C/l1 $C/llama; do [ -d "$d" ] && cp "$d"/*.part0* "$STASH"/ 2>/dev/null; done
nparts() { set -- "$STASH"/*.part0*; if [ -e "$1" ]; then echo $#; else echo 0; fi; }
if [ ! -x "$LLAMA_BIN/llama-bench" ] && [ "$(nparts)" = 3 ]; then
  if [ "$(cat "$STASH"/*.part0* | sha256sum | cut -c1-64)" = $LLAMA_SHA ]; then
    cat "$STASH"/*.part0* | tar xJ -C "$LLAMA_ROOT" && log "llama.cpp unpacked into $LLAMA_ROOT"
  else
    log "llama.cpp parts in $STASH: sha256 mismatch, not unpacked"
  fi
fi
LLAMA_LD=$LLAMA_BIN/../lib:/usr/local/cuda/lib64
llama_ok() { [ -x "$LLAMA_BIN/$1" ]; }
log "llama.cpp: $(for t in llama-bench llama-batched-bench llama-server; do llama_ok $t && echo -n "$t "; done)" \
  "(parts stashed: $(nparts) of 3)"
if [ -f $C/bins.tar.xz ]; then tar xJf $C/bins.tar.xz -C "$G" || log "cannot unpack $C/bins.tar.xz"; fi
export LD_LIBRARY_PATH=$G/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
EMBER=$EMBER_B/bin/ember
PAR=$EMBER_B/bench/par_decode

if ! PYTHONPATH=$SITE $PY -c "import gguf" 2>/dev/null; then
  ls $C/whl/gguf-*.whl >/dev/null 2>&1 && $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$SITE" $C/whl/gguf-*.whl > "$R/pip.txt" 2>&1
  # gguf imports yaml (for model cards, which the writer does not use): a stub if the machine lacks it
  if ! PYTHONPATH=$SITE $PY -c "import yaml" 2>/dev/null; then
    printf 'def safe_load(*a, **k):\n    raise RuntimeError("yaml stub (bench/gpu/qwen35_h200.sh)")\n' > "$SITE/yaml.py"
    log "no yaml module: stub written to $SITE/yaml.py"
  fi
fi
if [ ! -s "$MODEL" ]; then
  log "making $MODEL ${MAKEARGS:-}"
  # --llama /dev/null: the gguf from $SITE (the carried wheel), not a llama.cpp source tree's gguf-py
  # shellcheck disable=SC2086
  if PYTHONPATH=$SITE timeout "$(lim 240)" $PY bench/make_qwen35_gguf.py "$MODEL.tmp" --llama /dev/null ${MAKEARGS:-} > "$MODEL.make.txt" 2>&1; then
    mv "$MODEL.tmp" "$MODEL"; log "$(tail -1 "$MODEL.make.txt")"
  else
    log "make_qwen35_gguf.py failed:"; tail -5 "$MODEL.make.txt" | tee -a "$L"; rm -f "$MODEL.tmp"
  fi
fi
[ -s "$MODEL" ] || { log "no model file; stopping"; exit 1; }
if [ ! -f $C/bins.tar.xz ] && ! llama_ok llama-bench && [ "$(nparts)" != 0 ]; then
  log "llama.cpp parts incomplete ($(nparts) of 3) and no $C/bins.tar.xz in this call: a staging call; stopping"
  exit 0
fi
if [ ! -x "$EMBER" ]; then
  log "no ember binary ($EMBER; carry $C/bins.tar.xz): stopping after staging (parts and the file are kept)"
  exit 0
fi

# --- header -------------------------------------------------------------------------------------------
{
  echo "gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)"
  echo "ember commit: $(cat $C/commit 2>/dev/null | tr '\n' ' ')"
  echo "model: $MODEL $(stat -c %s "$MODEL") bytes; made: $(tail -1 "$MODEL.make.txt" 2>/dev/null)"
  echo "host: $(nproc) cores; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
} > "$R/header.txt"
cat "$R/header.txt" >> "$L"

# --- pp512 / tg256 --------------------------------------------------------------------------------------
if has engine; then
  if in_time "ember bench"; then
    log "ember bench pp512 tg256 -r $REPS"
    timeout "$(lim 150)" "$EMBER" bench -m "$MODEL" -ngl "$NGL" -p 512 -n 256 -r "$REPS" -o json > "$R/ember_bench.json" 2> "$R/ember_bench.err"
    log "  rc $?"
  fi
  if llama_ok llama-bench && in_time "llama-bench"; then
    log "llama-bench pp512 tg256 -r $REPS"
    # shellcheck disable=SC2086
    LD_LIBRARY_PATH=$LLAMA_LD timeout "$(lim 150)" "$LLAMA_BIN/llama-bench" -m "$MODEL" -ngl "$NGL" -p 512 -n 256 -r "$REPS" -o json \
      ${LB_EXTRA:-} > "$R/llama_bench.json" 2> "$R/llama_bench.err"
    log "  rc $?"
  fi
fi

# --- 8 streams ------------------------------------------------------------------------------------------
if has par; then
  if in_time "par_decode"; then
    log "par_decode -np 8 -pp 128 -tg 128 -r $REPS"
    timeout "$(lim 150)" "$PAR" "$MODEL" -np 8 -pp 128 -tg 128 -r "$REPS" -ngl "$NGL" > "$R/par_decode.txt" 2>&1
    log "  rc $?: $(grep -o 'S_TG.*' "$R/par_decode.txt")"
  fi
  if llama_ok llama-batched-bench && in_time "llama-batched-bench"; then
    npl=8$(for _ in $(seq 2 "$REPS"); do echo -n ",8"; done)
    log "llama-batched-bench -npp 128 -ntg 128 -npl $npl"
    LD_LIBRARY_PATH=$LLAMA_LD timeout "$(lim 150)" "$LLAMA_BIN/llama-batched-bench" -m "$MODEL" -ngl "$NGL" -npp 128 -ntg 128 -npl "$npl" \
      -c 4096 > "$R/batched_bench.txt" 2>&1
    log "  rc $?"
  fi
fi

# --- GPU memory of a server at -c 16384 ---------------------------------------------------------------
gpu_used() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null | head -1 | tr -dc 0-9; }
wait_up() {  # port pid
  for _ in $(seq 1 360); do
    curl -sf "http://127.0.0.1:$1/health" >/dev/null 2>&1 && return 0
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.25
  done
  return 1
}
mem_run() {  # engine np
  local eng=$1 np=$2 port=$((18000 + RANDOM % 2000)) pid before after apps f="$R/mem_$1_np$2"
  for _ in $(seq 1 20); do   # the previous server's memory given back (to within 64 MiB of the start)
    [ -z "$MEM0" ] || [ "$(gpu_used)" -le $((MEM0 + 64)) ] && break
    sleep 0.5
  done
  before=$(gpu_used)
  if [ "$eng" = ember ]; then
    timeout "$(lim 150)" "$EMBER" serve -m "$MODEL" -ngl "$NGL" -c 16384 -np "$np" --port $port > "$f.srv.txt" 2>&1 &
  else
    LD_LIBRARY_PATH=$LLAMA_LD timeout "$(lim 150)" "$LLAMA_BIN/llama-server" -m "$MODEL" -ngl "$NGL" -c 16384 -np "$np" --port $port \
      > "$f.srv.txt" 2>&1 &
  fi
  pid=$!
  if wait_up $port $pid; then
    curl -s -m 30 "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
      -d '{"prompt":"hello world","max_tokens":8,"temperature":0}' > "$f.req.txt" 2>&1
    sleep 1
    after=$(gpu_used)
    apps=$(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits 2>/dev/null | tr '\n' ';')
    echo "before_MiB=$before after_MiB=$after apps=$apps" > "$f.txt"
    log "  $eng -np $np: memory.used $before -> $after MiB; apps $apps"
  else
    log "  $eng -np $np: server did not come up"; tail -5 "$f.srv.txt" | tee -a "$L"
    echo "failed" > "$f.txt"
  fi
  kill $pid 2>/dev/null; wait $pid 2>/dev/null
  sleep 1
}
if has mem; then
  MEM0=$(gpu_used)
  for np in $MEMNP; do
    in_time "ember serve -np $np" && { log "ember serve -c 16384 -np $np"; mem_run ember "$np"; }
    llama_ok llama-server && in_time "llama-server -np $np" && { log "llama-server -c 16384 -np $np"; mem_run llama "$np"; }
  done
fi

# --- summary ------------------------------------------------------------------------------------------
python3 - "$OUT" "$REPS" "$MEMNP" "$R" <<'EOF'
import json, os, re, statistics, sys
out, reps, memnp, raw = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4]
def read(name):
    try:
        with open(os.path.join(raw, name)) as f:
            return f.read()
    except OSError:
        return ""
res = {"ember": {}, "llama": {}, "notes": []}
try:
    e = json.loads(read("ember_bench.json").strip().splitlines()[-1])
    res["ember"]["pp512"] = e["pp"]["median_ts"]; res["ember"]["tg256"] = e["tg"]["median_ts"]
    res["ember_bench"] = e
except Exception as x:
    if read("ember_bench.json") or read("ember_bench.err"):
        res["notes"].append(f"ember bench: no figures ({x!r}); its stderr ends: {read('ember_bench.err')[-300:]!r}")
try:
    lb = json.loads(read("llama_bench.json"))
    for t in lb:
        k = f"pp{t['n_prompt']}" if t["n_gen"] == 0 else f"tg{t['n_gen']}"
        res["llama"][k] = statistics.median(t["samples_ts"])
    res["llama_build"] = lb[0].get("build_commit"), lb[0].get("build_number")
    res["llama_bench_params"] = {k: lb[0].get(k) for k in ("gpu_info", "n_batch", "n_ubatch", "flash_attn", "type_k", "type_v", "n_gpu_layers")}
    res["llama_bench_samples"] = {f"pp{t['n_prompt']}" if t["n_gen"] == 0 else f"tg{t['n_gen']}": t["samples_ts"] for t in lb}
except Exception as x:
    if read("llama_bench.json") or read("llama_bench.err"):
        res["notes"].append(f"llama-bench: no figures ({x!r}); its stderr ends: {read('llama_bench.err')[-300:]!r}")
m = re.search(r"S_TG ([\d.]+) tok/s \(best of \d+: ([\d.]+)\)", read("par_decode.txt"))
if m:
    res["ember"]["par8"] = float(m.group(1)); res["ember_par8_best"] = float(m.group(2))
stg = []
for line in read("batched_bench.txt").splitlines():
    c = [x.strip() for x in line.strip().strip("|").split("|")]
    if len(c) >= 10 and all(re.fullmatch(r"[\d.]+", x) for x in c[:10]):
        stg.append(float(c[7]))
if stg:
    res["llama"]["par8"] = statistics.median(stg); res["llama_par8_runs"] = stg
for np_ in memnp:
    for eng in ("ember", "llama"):
        t = read(f"mem_{eng}_np{np_}.txt")
        m = re.search(r"before_MiB=(\d+) after_MiB=(\d+) apps=(.*)", t)
        if m:
            res[eng][f"mem_np{np_}"] = int(m.group(2)) - int(m.group(1))
            res[f"{eng}_mem_np{np_}_apps"] = m.group(3)
res["skipped"] = read("skipped.txt").split("\n")[:-1]
hdr = read("header.txt").strip()
rows = [("pp512", f"pp512 (median of {reps}), tok/s"), ("tg256", f"tg256 (median of {reps}), tok/s"),
        ("par8", "8 streams: 8 x (pp128 + tg128), aggregate decode S_TG, tok/s")]
rows += [(f"mem_np{n}", f"GPU memory, server -c 16384 -np {n}, MiB (lower is better)") for n in memnp]
lines = [hdr, f"llama.cpp build: {res.get('llama_build')}; llama-bench params: {res.get('llama_bench_params')}",
         f"ember bench params: n_batch {res.get('ember_bench', {}).get('n_batch')}, n_ubatch {res.get('ember_bench', {}).get('n_ubatch')}", "",
         "| test (-ngl 99) | ember | llama.cpp | ember / llama.cpp |", "| --- | ---: | ---: | ---: |"]
fmt = lambda v, k: "n/a" if v is None else (f"{v:.0f}" if k.startswith("mem") else f"{v:.2f}")
for k, label in rows:
    a, b = res["ember"].get(k), res["llama"].get(k)
    r = f"**{a / b:.2f}x**" if a and b else "n/a"
    lines.append(f"| {label} | {fmt(a, k)} | {fmt(b, k)} | {r} |")
lines.append("")
if "ember_bench" in res:
    e = res["ember_bench"]
    lines.append(f"ember samples: pp512 {e['pp']['ts']}, tg256 {e['tg']['ts']}")
    if "gpu_used_after_bytes" in e:
        lines.append(f"ember bench GPU memory (n_ctx {e.get('n_ctx')}): {(e['gpu_used_after_bytes'] - e['gpu_used_before_bytes']) / 2**20:.0f} MiB")
if "llama_bench_samples" in res:
    lines.append(f"llama.cpp samples: {res['llama_bench_samples']}")
if "ember_par8_best" in res:
    lines.append(f"ember par_decode S_TG best of {reps}: {res['ember_par8_best']}; llama-batched-bench S_TG runs: {res.get('llama_par8_runs')}")
for n in memnp:
    lines.append(f"-np {n} compute apps (pid, MiB): ember {res.get(f'ember_mem_np{n}_apps')}; llama.cpp {res.get(f'llama_mem_np{n}_apps')}")
    for eng, pat in (("ember", r"^ember: (model|n_ctx|recurrent)"), ("llama", r"(CUDA\d|CPU).*buffer size|n_ctx_seq|n_seq_max")):
        got = [l.strip() for l in read(f"mem_{eng}_np{n}.srv.txt").splitlines() if re.search(pat, l)]
        lines += [f"  {eng} -np {n} log: {l[:200]}" for l in got[:12]]
lines.append("memory = nvidia-smi memory.used with the server up (after one 8-token completion) minus before its start")
lines += [f"note: {n}" for n in res["notes"]] + [f"skipped (DEADLINE): {s}" for s in res["skipped"]]
text = "\n".join(lines) + "\n"
open(os.path.join(out, "qwen35-gpu.txt"), "w").write(text)
json.dump(res, open(os.path.join(out, "qwen35-gpu.json"), "w"), indent=1)
print(text)
EOF
log "done"
