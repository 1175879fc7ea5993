#!/usr/bin/env bash
# dflash_record.sh — record llama.cpp's DFlash drafted blocks on the tiny
# golden files (tests/golden/dflash/, made by tests/golden/make_dflash.py), so
# ember's drafts can be compared block by block (issue 16, item 3).
#
# Needs: prebuilt llama.cpp binaries of the same source as the converter
# (llama-cpp-python 0.3.36's vendor/llama.cpp): llama-speculative-simple
# (examples/speculative-simple: it drives common_speculative with
# --spec-type draft-dflash and logs every draft candidate at -v) and
# llama-tokenize. python3 (stdlib only) parses the log.
#
#   LLAMA_BIN=/path/to/llama.cpp/build/bin bench/gpu/dflash_record.sh [OUT.json]
#
# What it runs: temperature 0 (greedy target), --spec-draft-n-max 7 (the
# block of 8 minus the anchor), --spec-draft-p-min 0 (llama.cpp's default:
# the whole block is drafted), one sequence, -ngl as NGL (default 0: the CPU
# build gives the same argmaxes; set NGL=999 on a GPU). Writes OUT.json
# (default tests/golden/dflash/tiny-dflash.llama-drafts.json):
#   {"prompt": TEXT, "prompt_ids": [...], "n_predict": N,
#    "steps": [{"n_past": P, "draft": [ids...], "accepted": A, "last": T}, ...],
#    "sequence": [ids...] or null, "log_tail": "..."}
# n_past is the target's committed length when the block was drafted (the
# block's anchor, id_last, sits at position n_past); "draft" is the argmax
# of each block position 1..7 (candidate 0 of the debug lines of
# common/speculative.cpp draft()); "accepted" how many the target kept;
# "last" the target's token after them. "sequence" is the committed token
# sequence (prompt + generated) the blocks were drafted on.
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
bin="${LLAMA_BIN:?set LLAMA_BIN to the directory of the prebuilt llama.cpp binaries}"
out="${1:-$here/tests/golden/dflash/tiny-dflash.llama-drafts.json}"
tgt="$here/tests/golden/dflash/tiny-dflash-target.gguf"
dft="$here/tests/golden/dflash/tiny-dflash-draft.gguf"
prompt="${PROMPT:-the model and the user hello world weather city Paris}"
n_predict="${N_PREDICT:-48}"
ngl="${NGL:-0}"
spec="$bin/llama-speculative-simple"
[ -x "$spec" ] || { echo "dflash_record: $spec not found (build target llama-speculative-simple)" >&2; exit 1; }
[ -x "$bin/llama-tokenize" ] || { echo "dflash_record: $bin/llama-tokenize not found" >&2; exit 1; }
log="$(mktemp)"; ids="$(mktemp)"
trap 'rm -f "$log" "$ids"' EXIT

"$bin/llama-tokenize" -m "$tgt" -p "$prompt" --ids --log-disable > "$ids"
"$spec" -m "$tgt" -md "$dft" --spec-type draft-dflash --spec-draft-n-max 7 --spec-draft-p-min 0 \
    -p "$prompt" -n "$n_predict" --temp 0 --top-k 1 --seed 1 -c 256 -ngl "$ngl" -ngld "$ngl" -v > "$log" 2>&1 || {
    echo "dflash_record: llama-speculative-simple failed; its log:" >&2; tail -40 "$log" >&2; exit 1; }

python3 - "$log" "$ids" "$out" "$prompt" "$n_predict" <<'EOF'
import ast, json, re, sys
log_path, ids_path, out_path, prompt, n_predict = sys.argv[1:6]
text = open(log_path, encoding="utf-8", errors="replace").read()
prompt_ids = ast.literal_eval(open(ids_path).read().strip())
cand = re.compile(r"- seq_id (\d+), draft candidate\s+(\d+), pos\s+(\d+):\s+(\d+)")
acc = re.compile(r"accepted (\d+)/(\d+) draft tokens, the last target token is: \((\d+)\)")
partial = re.compile(r"partial acceptance: \d+ < \d+, restoring checkpoint")
npast = re.compile(r"clear kv cache from any extra tokens, n_past = (\d+)")
# speculative-simple decodes the prompt but its last token (the first anchor)
steps, cur, n_past = [], [], len(prompt_ids) - 1
# the committed sequence: the prompt, then per step the accepted drafts and
# the target's token after them (unknown after a checkpoint restore, whose
# correction token the log does not show: then null)
seq, seq_ok = list(prompt_ids), True
for line in text.splitlines():
    m = cand.search(line)
    if m:
        if int(m.group(2)) == 0:
            cur.append(int(m.group(4)))
        continue
    if partial.search(line):
        seq_ok = False
        continue
    m = acc.search(line)
    if m:
        a, last = int(m.group(1)), int(m.group(3))
        steps.append({"n_past": n_past, "draft": cur, "accepted": a, "last": last})
        if cur and len(cur) >= a:
            seq += cur[:a] + [last]
        else:
            seq_ok = False
        cur = []
        continue
    m = npast.search(line)
    if m:
        n_past = int(m.group(1))
if not steps:
    sys.exit("dflash_record: no drafts found in the log (was it built with DFlash support and run with -v?)")
rec = {"source": "llama.cpp llama-speculative-simple --spec-type draft-dflash (-v log)",
       "prompt": prompt, "prompt_ids": prompt_ids, "n_predict": int(n_predict),
       "n_max": 7, "p_min": 0.0, "steps": steps, "sequence": seq if seq_ok else None,
       "log_tail": text[-4000:]}
open(out_path, "w").write(json.dumps(rec, indent=1))
print(f"dflash_record: {len(steps)} steps -> {out_path}")
EOF
