#!/bin/bash
# bench/gpu/e2e_gpu.sh — the end-to-end pytest suite (tests/e2e: real SmolLM2-135M-Instruct Q4_1 and
# Gemma 3 270M Q4_K_M, goldens) against the CUDA build on the lent GPU. Run from the repository root on
# the device, once a call:  bash bench/gpu/e2e_gpu.sh
#
# What each call must carry (bench/gpu/pack_e2e.sh makes it and prints the plan, .carry/e2e/plan.txt):
#   call 1       .carry/e2e/c01 .carry/e2ewhl .carry/bins.tar.xz .carry/commit (when bins and wheels do not
#                fit one call, .carry/e2ewhl goes with call 2: follow plan.txt)
#   call k>1     .carry/e2e/cKK (numbered parts of the models and manifest.txt)
#   The calls run back to back: what came is kept outside the tree only while the machine stays warm
#   (30 s after a call); a cold machine means starting again from call 1. The call that brings the last
#   part runs the suite. A later call on the warm machine carries nothing (or a new .carry/bins.tar.xz)
#   and runs it again, e.g. the second half of a split run (PYTEST_ARGS).
# Each call: the parts it got are checked against the manifest (size, sha256) and kept in $E2E_STASH;
# a model whose parts are all there is assembled into $E2E_MODELS and its sha256 checked (then its parts
# are dropped); .carry/bins.tar.xz is unpacked into $G (b/bin/ember, b/tools/ for the tests that use
# parse_stream, dequant, fake_serve and gguf_write_sample, lib/); the wheels are installed into $SITE
# (pip --no-deps: with --target pip would want every dependency as a wheel, numpy too, which the device
# has). Once both models, the packages and ember are there, pytest runs (-q -rfE, junit XML, with the
# device's pytest plugins not loaded), stopped by SIGINT at DEADLINE (pytest then still writes its
# summary of what ran) and killed 30 s later if it hangs.
# Environment: OUT (required); DEADLINE (seconds from the start of the script, default 540, so a call
#   ends inside the 10 minutes); PYTEST_ARGS (extra pytest arguments, split as the shell would, quotes
#   kept, e.g. '-k "responses or anthropic"'; tests/e2e is appended unless they name a path under tests/,
#   e.g. "tests/e2e/test_a.py tests/e2e/test_b.py"); LOGLINES (lines of pytest's output kept, 4000);
#   for a box without a GPU: EMBER_BIN ($G/b/bin/ember), G (/tmp/g), E2E_STASH (/root/stash/e2e),
#   E2E_MODELS (/root/models), SITE (/tmp/site), PY (python3), CARRY (.carry); E2E_NEED=smol runs the
#   suite once SmolLM2 is there (calls 1-5), the Gemma 3 tests skipped (a partial run, said so in the summary).
# Results: $OUT/e2e-gpu.txt (summary: the state of the inputs, GPU, counts, failures' short lines,
#   the slowest tests), $OUT/e2e-gpu-log.txt (this script's log and the tail of pytest's output),
#   $OUT/e2e-gpu-junit.xml (per-test results, when pytest ran).
set -u
: "${OUT:?set OUT}"
CARRY=${CARRY:-.carry}
G=${G:-/tmp/g}
EMBER_BIN=${EMBER_BIN:-$G/b/bin/ember}
E2E_STASH=${E2E_STASH:-/root/stash/e2e}
E2E_MODELS=${E2E_MODELS:-/root/models}
SITE=${SITE:-/tmp/site}
PY=${PY:-python3}
DEADLINE=${DEADLINE:-540}
LOGLINES=${LOGLINES:-4000}
mkdir -p "$OUT" "$E2E_STASH" "$E2E_MODELS" "$G" "$SITE"
S=$OUT/e2e-gpu.txt
L=$OUT/e2e-gpu-log.txt
: > "$S"; : > "$L"
R=$(mktemp -d /tmp/e2e-run.XXXXXX)
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
log() { echo "[$(el)s] $*" | tee -a "$L"; }
note() { echo "$*" >> "$S"; }

# --- parts: check against the manifest, keep ---------------------------------------------------------
for m in $(find "$CARRY/e2e" -name manifest.txt 2>/dev/null | sort); do cp "$m" "$E2E_STASH/manifest.txt"; break; done
MAN=$E2E_STASH/manifest.txt
got=0 bad=0
if [ -f "$MAN" ]; then
  for p in $(find "$CARRY/e2e" -name '*.part[0-9]*' 2>/dev/null | sort); do
    n=$(basename "$p")
    want=$(awk -v n="$n" '$1 == "part" && $2 == n {print $3, $4}' "$MAN")
    if [ -z "$want" ]; then log "part $n: not in the manifest (a part of another pack?), skipped"; bad=$((bad + 1)); continue; fi
    if [ "$(stat -c %s "$p") $(sha256sum "$p" | cut -c1-64)" != "$want" ]; then
      log "part $n: size or sha256 differs from the manifest, skipped"; bad=$((bad + 1)); continue
    fi
    cp "$p" "$E2E_STASH/$n.tmp" && mv "$E2E_STASH/$n.tmp" "$E2E_STASH/$n" && got=$((got + 1))
  done
elif [ -n "$(find "$CARRY/e2e" -name '*.part[0-9]*' 2>/dev/null)" ]; then
  log "parts came but no manifest.txt (carry the whole .carry/e2e/cNN folder): not kept"
fi
log "parts: $got kept this call$( [ $bad = 0 ] || echo ", $bad rejected")"

# --- models: assemble when complete --------------------------------------------------------------------
models_ok=1
MSTATE=""
if [ -f "$MAN" ]; then
  while read -r _ name size sha np; do
    f=$E2E_MODELS/$name
    if [ -f "$f" ] && [ "$(stat -c %s "$f")" = "$size" ]; then MSTATE="$MSTATE $name: ok;"; continue; fi
    have=$(awk '$1 == "part" {print $2}' "$MAN" | grep -F "$name.part" | while read -r pn; do [ -f "$E2E_STASH/$pn" ] && echo "$pn"; done | wc -l)
    if [ "$have" = "$np" ]; then
      log "assembling $name from $np parts"
      awk '$1 == "part" {print $2}' "$MAN" | grep -F "$name.part" | sort | while read -r pn; do cat "$E2E_STASH/$pn"; done > "$f.tmp"
      if [ "$(sha256sum "$f.tmp" | cut -c1-64)" = "$sha" ]; then
        mv "$f.tmp" "$f"
        awk '$1 == "part" {print $2}' "$MAN" | grep -F "$name.part" | while read -r pn; do rm -f "$E2E_STASH/$pn"; done
        log "  $f: sha256 ok"; MSTATE="$MSTATE $name: ok (assembled now);"; continue
      fi
      rm -f "$f.tmp"; log "  $name: sha256 of the assembled file differs from the manifest: not used"
    fi
    models_ok=0; MSTATE="$MSTATE $name: $have of $np parts;"
  done < <(awk '$1 == "model"' "$MAN")
else
  models_ok=0; MSTATE=" no manifest yet (call 1 carries .carry/e2e/c01);"
fi
log "models:$MSTATE"
if [ $models_ok = 0 ] && [ "${E2E_NEED:-all}" = smol ] && [ -f "$E2E_MODELS/SmolLM2-135M-Instruct.Q4_1.gguf" ]; then
  models_ok=1   # a partial run: the tests of a missing model skip (conftest.py, EMBER_E2E_ALLOW_MISSING)
  export EMBER_E2E_ALLOW_MISSING=1
  MSTATE="$MSTATE (E2E_NEED=smol: running without the others; their tests skip)"
fi

# --- ember ---------------------------------------------------------------------------------------------
if [ -f "$CARRY/bins.tar.xz" ]; then
  if tar xJf "$CARRY/bins.tar.xz" -C "$G"; then log "unpacked $CARRY/bins.tar.xz into $G"; else log "cannot unpack $CARRY/bins.tar.xz"; fi
fi
[ -f "$CARRY/commit" ] && cp "$CARRY/commit" "$G/commit"
export LD_LIBRARY_PATH=$G/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
ember_ok=0
if [ -x "$EMBER_BIN" ] && "$EMBER_BIN" --version > "$R/version.txt" 2>&1; then
  ember_ok=1; ESTATE="ok ($EMBER_BIN: $(head -1 "$R/version.txt"), commit $(cat "$G/commit" 2>/dev/null | tr '\n' ' '))"
elif [ -x "$EMBER_BIN" ]; then
  ESTATE="does not start: $(head -3 "$R/version.txt" | tr '\n' ' ')"; ldd "$EMBER_BIN" 2>&1 | grep -i "not found" | tee -a "$L"
else
  ESTATE="missing ($EMBER_BIN; call 1 carries .carry/bins.tar.xz)"
fi
TOOLS=$(dirname "$(dirname "$EMBER_BIN")")/tools
missing=""
for t in parse_stream dequant fake_serve gguf_write_sample; do [ -x "$TOOLS/$t" ] || missing="$missing $t"; done
[ -n "$missing" ] && [ -x "$EMBER_BIN" ] && ESTATE="$ESTATE; not in $TOOLS:$missing (their tests will fail: bins.tar.xz from an older pack_carry.sh?)"
log "ember: $ESTATE"

# --- packages ------------------------------------------------------------------------------------------
IMPORTS="import pytest, openai, anthropic, gguf, prometheus_client, requests, numpy"
pkg_check() { PYTHONPATH=$SITE "$PY" -c "$IMPORTS; print('pytest', pytest.__version__, 'openai', openai.__version__, 'numpy', numpy.__version__)" > "$R/pkgs.txt" 2>&1; }
if ls "$CARRY"/e2ewhl/*.whl > /dev/null 2>&1 && [ ! -f "$SITE/.e2e-installed" ]; then
  log "installing $(ls "$CARRY"/e2ewhl/*.whl | wc -l) wheels into $SITE"
  if "$PY" -m pip install -q --no-index --find-links "$CARRY/e2ewhl" --no-deps --no-compile --no-cache-dir --upgrade \
      --target "$SITE" "$CARRY"/e2ewhl/*.whl > "$R/pip.txt" 2>&1; then
    touch "$SITE/.e2e-installed"; rm -f "$SITE/.e2e-ok"
  else
    log "pip install failed:"; tail -5 "$R/pip.txt" | tee -a "$L"
  fi
fi
pkgs_ok=0
if [ -f "$SITE/.e2e-ok" ]; then   # the imports take seconds: checked once while the machine is warm
  pkgs_ok=1; PSTATE="ok ($(cat "$SITE/.e2e-ok"), imports checked in an earlier call)"
elif pkg_check; then
  pkgs_ok=1; tail -1 "$R/pkgs.txt" > "$SITE/.e2e-ok"; PSTATE="ok ($(tail -1 "$R/pkgs.txt"))"
else
  PSTATE="missing: $(tail -1 "$R/pkgs.txt") (call 1 carries .carry/e2ewhl)"
fi
log "packages: $PSTATE"

GPU=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)
note "e2e on the GPU: $(date -u '+%Y-%m-%d %H:%M UTC'), host $(nproc) cores"
note "gpu: ${GPU:-none (nvidia-smi gave nothing)}"
note "ember: $ESTATE"
note "models ($E2E_MODELS):$MSTATE"
note "packages: $PSTATE"

if [ $models_ok = 0 ] || [ $ember_ok = 0 ] || [ $pkgs_ok = 0 ]; then
  note "not run: inputs incomplete (a staging call; carry the next .carry/e2e/cNN on the warm machine)"
  log "not running the suite yet: models $models_ok, ember $ember_ok, packages $pkgs_ok"
  rm -rf "$R"; exit 0
fi

# --- does ember run on the GPU? -------------------------------------------------------------------------
SMOL=$E2E_MODELS/SmolLM2-135M-Instruct.Q4_1.gguf
timeout 60 "$EMBER_BIN" bench -m "$SMOL" -p 32 -n 16 -r 1 -o json > "$R/probe.json" 2> "$R/probe.err"
PROBE=$("$PY" -c "
import json, sys
try:
    d = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
except Exception as e:
    print('no result:', repr(e)); sys.exit()
gpu = 'gpu_used_after_bytes' in d
print(('on the GPU, %.0f MiB' % ((d['gpu_used_after_bytes'] - d['gpu_used_before_bytes']) / 2**20)) if gpu else 'on the CPU (no GPU figures)',
      '| SmolLM2 tg16 %.1f tok/s, pp32 %.1f tok/s' % (d['tg']['median_ts'], d['pp']['median_ts']))
" "$R/probe.json")
note "probe (ember bench, default -ngl): $PROBE"
log "probe: $PROBE"

# --- the suite -----------------------------------------------------------------------------------------
eval "set -- ${PYTEST_ARGS:-}"
case " ${PYTEST_ARGS:-} " in *" tests/"*) ;; *) set -- "$@" tests/e2e ;; esac
ARGS=$(printf '%q ' "$@")
left=$(( DEADLINE - $(el) ))
[ $left -lt 30 ] && left=30
log "pytest -q $ARGS(stopped after ${left}s)"
note "pytest args: $ARGS; time limit ${left}s"
export EMBER_BIN EMBER_MODELS=$E2E_MODELS PYTHONPATH=$SITE PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 PYTHONUNBUFFERED=1
t1=$(el)
timeout -s INT -k 30 "$left" "$PY" -m pytest -q -rfE -p no:cacheprovider --durations=15 \
  --junitxml="$R/junit.xml" -o junit_family=xunit1 "$@" > "$R/pytest.txt" 2>&1
rc=$?
case $rc in 124|137) why=" (stopped at DEADLINE)" ;; *) why="" ;; esac
log "pytest rc $rc after $(( $(el) - t1 ))s$why"

# --- summary -------------------------------------------------------------------------------------------
"$PY" - "$R/junit.xml" "$R/pytest.txt" "$rc" "$@" >> "$S" <<'EOF'
import glob, os, re, sys
import xml.etree.ElementTree as ET
junit, text, rc, args = sys.argv[1], open(sys.argv[2], errors="replace").read(), int(sys.argv[3]), sys.argv[4:]
lines = text.splitlines()
final = next((l for l in reversed(lines) if re.search(r"\b(passed|failed|error|errors|skipped|no tests ran)\b.* in [\d.]+s", l)), None)
interrupted = "KeyboardInterrupt" in text or rc in (124, 137)
print(f"pytest rc {rc}{' (stopped at DEADLINE: what ran is below, the rest did not run)' if interrupted else ''}")
print(f"pytest final line: {final.strip('= ') if final else '(none: killed?)'}")
if os.path.exists(junit):
    cases = ET.parse(junit).getroot().iter("testcase")
    res, fails, files = {"passed": 0, "failed": 0, "error": 0, "skipped": 0}, [], {}
    seen, cut = [], 0
    for c in cases:
        if c.get("name") is None:   # the test running when pytest was stopped
            cut += 1
            continue
        kind = "passed"
        for k, tag in (("failed", "failure"), ("error", "error"), ("skipped", "skipped")):
            e = c.find(tag)
            if e is not None:
                kind = k
                if k in ("failed", "error"):
                    msg = (e.get("message") or e.text or "").strip().splitlines()
                    fails.append(f"{k.upper()} {c.get('file') or c.get('classname')}::{c.get('name')} - {msg[0][:240] if msg else ''}")
                break
        res[kind] += 1
        f = c.get("file") or c.get("classname", "").replace(".", "/") + ".py"
        if f not in seen:
            seen.append(f)
        files.setdefault(f, {"passed": 0, "failed": 0, "error": 0, "skipped": 0})[kind] += 1
    print("junit: " + ", ".join(f"{v} {k}" for k, v in res.items()) + f" ({sum(res.values())} tests)")
    print("per file (passed/failed/error/skipped):")
    for f, r in sorted(files.items()):
        print(f"  {f}: {r['passed']}/{r['failed']}/{r['error']}/{r['skipped']}")
    if fails:
        print("failures:")
        print("\n".join("  " + x for x in fails))
    if interrupted and seen:
        # what is left, in pytest's order (a folder's files sorted, named files as given), from the
        # file that was cut (partly run) on: the next call's PYTEST_ARGS
        paths = [a for a in args if a.startswith("tests/")]
        order = []
        for a in paths:
            order += sorted(glob.glob(os.path.join(a, "**", "test_*.py"), recursive=True)) if os.path.isdir(a) else [a.split("::")[0]]
        if seen[-1] in order:
            rest = order[order.index(seen[-1]):]
            opts = [a for a in args if not a.startswith("tests/")]
            print(f"not finished ({cut} test cut, the last file partly run): {len(rest)} files; to go on, PYTEST_ARGS='"
                  + " ".join(opts + rest) + "'")
else:
    # no XML (pytest killed): count the -q progress characters
    prog = "".join(l.split()[0] for l in lines if re.fullmatch(r"[.FEsxX]+\s+\[\s*\d+%\]", l.strip()))
    print(f"no junit XML; progress characters: {prog.count('.')} passed, {prog.count('F')} failed, "
          f"{prog.count('E')} errors, {prog.count('s')} skipped")
    print("\n".join("  " + l for l in lines if l.startswith(("FAILED ", "ERROR "))))
i = next((i for i, l in enumerate(lines) if "slowest" in l and "durations" in l), None)
if i is not None:
    print("slowest:")
    print("\n".join("  " + l for l in lines[i + 1:i + 16] if l.strip() and not l.startswith("=")))
EOF
{ echo "===== pytest output (last $LOGLINES lines)"; tail -n "$LOGLINES" "$R/pytest.txt"; } >> "$L"
[ -f "$R/junit.xml" ] && cp "$R/junit.xml" "$OUT/e2e-gpu-junit.xml"
log "done"
cat "$S"
rm -rf "$R"
