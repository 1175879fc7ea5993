#!/bin/bash
# bench/gpu/pack_e2e.sh — on the dev box: the inputs of bench/gpu/e2e_gpu.sh (the end-to-end pytest
# suite, tests/e2e, against the CUDA build on the lent GPU), cut so that every device call stays under
# the runner's 64 MiB (the working tree plus the carried paths). Writes, under .carry/ (ignored:
# `.carry/` in .git/info/exclude):
#   e2e/cNN/          one folder a call: numbered parts of the two real models (MODEL.partNN, at most
#                     32 MiB each, cut where a call is full) and manifest.txt (each model's size, sha256
#                     and parts; each part's size and sha256). A call carries its folder (one carry path).
#   e2e/plan.txt      which folder goes with which call, with the sizes (printed too)
#   e2ewhl/           wheels for python 3.12 on x86-64 (pip download --only-binary=:all:): PKGS and their
#                     dependencies, less EXCLUDE (numpy: the device has it, for torch, and a carried one
#                     would shadow it)
# The plan: call 1 carries c01 + e2ewhl + bins.tar.xz + commit (bench/gpu/pack_carry.sh), so the first
# call already says whether ember loads and the packages import (when bins and wheels do not fit one
# call, call 2 carries e2ewhl); the other calls carry their cNN alone; the
# call that brings the last part also runs the suite. Each call's carry is at most CARRY_MAX bytes:
# 64 MiB less the working tree (tracked and untracked-not-ignored files, measured here: run this in the
# checkout that makes the calls) less MARGIN.
# Environment: MODELS_SRC (~/.cache/ember/models); PIP (/work/main/.venv/bin/pip, else .venv/bin/pip,
#   else pip3); PKGS (below: requirements-test.txt's packages at the versions of the dev box's .venv,
#   which the suite passes with here; selenium left out: the web chat test skips without chromium);
#   EXCLUDE ("numpy"); MARGIN (bytes, 1 MiB); CARRY_MAX (bytes; default from the tree as above);
#   BINS_BYTES (bins.tar.xz + commit, when .carry/bins.tar.xz is not there yet: 18 MiB).
set -eu
cd "$(dirname "$0")/../.."
MODELS_SRC=${MODELS_SRC:-$HOME/.cache/ember/models}
PKGS=${PKGS:-pytest==9.2.0 openai==3.63.0 anthropic==2.17.0 gguf==0.19.0 prometheus-client==0.26.0}
EXCLUDE=${EXCLUDE:-numpy}
if [ -z "${PIP:-}" ]; then
  for p in /work/main/.venv/bin/pip .venv/bin/pip; do [ -x $p ] && { PIP=$p; break; }; done
  PIP=${PIP:-pip3}
fi
C=.carry
mkdir -p $C

echo "=== wheels into $C/e2ewhl: $PKGS (less $EXCLUDE)"
rm -rf $C/e2ewhl.tmp
# shellcheck disable=SC2086
$PIP download -q --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
  -d $C/e2ewhl.tmp $PKGS
for x in $EXCLUDE; do
  n=$(echo "$x" | tr '-' '_')
  rm -f $C/e2ewhl.tmp/"$n"-[0-9]*.whl $C/e2ewhl.tmp/"$x"-[0-9]*.whl
done
rm -rf $C/e2ewhl; mv $C/e2ewhl.tmp $C/e2ewhl
ls $C/e2ewhl | sed 's/^/  /'

# the working tree that travels with every call (tracked + untracked-not-ignored files, shared/)
TREE=$( { git ls-files -z; git ls-files -z -o --exclude-standard; } | xargs -0 -r stat -c %s 2>/dev/null | awk '{s+=$1} END {print s+0}')
[ -d shared ] && TREE=$((TREE + $(du -sb shared | cut -f1)))
MARGIN=${MARGIN:-1048576}
CARRY_MAX=${CARRY_MAX:-$((64 * 1048576 - TREE - MARGIN))}
if [ -f $C/bins.tar.xz ]; then
  BINS=$(( $(stat -c %s $C/bins.tar.xz) + $(stat -c %s $C/commit 2>/dev/null || echo 0) )); BINS_NOTE="$C/bins.tar.xz + commit"
else
  BINS=${BINS_BYTES:-$((18 * 1048576))}; BINS_NOTE="$C/bins.tar.xz not made yet (bench/gpu/pack_carry.sh): assumed"
fi
WHL=$(du -cb $C/e2ewhl/*.whl | tail -1 | cut -f1)
echo "=== tree $TREE bytes; carry per call at most $CARRY_MAX bytes (64 MiB - tree - margin $MARGIN)"

python3 - "$MODELS_SRC" "$C/e2e" "$CARRY_MAX" "$BINS" "$WHL" "$BINS_NOTE" <<'EOF'
import hashlib, os, shutil, sys
src, dst, cap, bins, whl, bins_note = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
MODELS = ["SmolLM2-135M-Instruct.Q4_1.gguf", "gemma-3-270m-q4_k_m.gguf"]
PART_MAX = 32 << 20
MANIFEST_ROOM = 4096          # manifest.txt in each call's folder (a few hundred bytes)
# call 1 also carries bins.tar.xz and commit, and e2ewhl/ when both fit; else call 2 carries e2ewhl/
BINS_CARRY, WHL_CARRY = [".carry/bins.tar.xz", ".carry/commit"], [".carry/e2ewhl"]
if bins + whl + MANIFEST_ROOM + (1 << 20) <= cap:
    extras = [(bins + whl, BINS_CARRY + WHL_CARRY, f" + wheels {whl} + bins {bins} ({bins_note})")]
elif max(bins, whl) + MANIFEST_ROOM + (1 << 20) <= cap:
    extras = [(bins, BINS_CARRY, f" + bins {bins} ({bins_note})"), (whl, WHL_CARRY, f" + wheels {whl}")]
else:
    sys.exit(f"bins ({bins}) or wheels ({whl}) leave no room in one call of {cap} bytes")
sizes = {m: os.path.getsize(os.path.join(src, m)) for m in MODELS}
# cut the models, one after the other, into calls: each call is filled up to its room
calls, mi, off = [], 0, 0
while mi < len(MODELS):
    room = cap - MANIFEST_ROOM - (extras[len(calls)][0] if len(calls) < len(extras) else 0)
    parts = []
    while room > 0 and mi < len(MODELS):
        m = MODELS[mi]
        n = min(room, PART_MAX, sizes[m] - off)
        parts.append((m, off, n))
        off += n; room -= n
        if off == sizes[m]:
            mi, off = mi + 1, 0
    calls.append(parts)
assert len(calls) >= len(extras), "fewer calls than the extras (bins, wheels) need"
# number each model's parts in order; hash parts and whole files
shutil.rmtree(dst, ignore_errors=True)
os.makedirs(dst)
npart = {m: 0 for m in MODELS}
named = []
for ci, parts in enumerate(calls):
    row = []
    for m, o, n in parts:
        row.append((m, o, n, f"{m}.part{npart[m]:02d}"))
        npart[m] += 1
    named.append(row)
whole, part_sha = {}, {}
for m in MODELS:
    h = hashlib.sha256()
    with open(os.path.join(src, m), "rb") as f:
        for ci, row in enumerate(named):
            for mm, o, n, name in row:
                if mm != m:
                    continue
                f.seek(o); data = f.read(n)
                h.update(data)
                part_sha[name] = hashlib.sha256(data).hexdigest()
                d = os.path.join(dst, f"c{ci + 1:02d}")
                os.makedirs(d, exist_ok=True)
                with open(os.path.join(d, name), "wb") as g:
                    g.write(data)
    whole[m] = h.hexdigest()
lines = [f"model {m} {sizes[m]} {whole[m]} {npart[m]}" for m in MODELS]
for row in named:
    lines += [f"part {name} {n} {part_sha[name]}" for _, _, n, name in row]
manifest = "\n".join(lines) + "\n"
assert len(manifest) < MANIFEST_ROOM
for ci in range(len(named)):
    with open(os.path.join(dst, f"c{ci + 1:02d}", "manifest.txt"), "w") as g:
        g.write(manifest)
# the plan
out = [f"e2e carry plan: {len(named)} calls back to back (the machine stays warm 30 s after a call); "
       f"each call's carry at most {cap} bytes ({cap / 1e6:.1f} MB)"]
for ci, row in enumerate(named):
    d = f".carry/e2e/c{ci + 1:02d}"
    tot = sum(n for _, _, n, _ in row) + len(manifest)
    carry = [d]
    extra = ""
    if ci < len(extras):
        carry += extras[ci][1]
        tot += extras[ci][0]
        extra = extras[ci][2]
    what = ", ".join(f"{name} ({n})" for _, _, n, name in row)
    last = "  <- the suite runs in this call" if ci == len(named) - 1 else ""
    out.append(f"call {ci + 1:2d}: {tot / 1e6:5.1f} MB  carry {carry}: {what}{extra}{last}")
for m in MODELS:
    out.append(f"{m}: {sizes[m]} bytes, {npart[m]} parts, sha256 {whole[m]}")
text = "\n".join(out) + "\n"
open(os.path.join(dst, "plan.txt"), "w").write(text)
print(text, end="")
EOF
du -sh $C/e2e $C/e2ewhl
