#!/usr/bin/env bash
# record_dflash_llama.sh — record llama.cpp's own DFlash drafted blocks on
# the tiny golden files (tests/golden/dflash/, made by
# tests/golden/make_dflash.py), so ember's blocks can be compared step by
# step (issue 16, item 3; test_dflash_spec).
#
# Needs: llama.cpp binaries built from the same source as the converter
# (llama-cpp-python 0.3.36's vendor/llama.cpp, a CPU build is enough):
# llama-speculative-simple (examples/speculative-simple: it drives
# common_speculative with --spec-type draft-dflash and logs every draft
# candidate at -v) and llama-tokenize. python3 (stdlib only) parses the log.
#
#   LLAMA_BIN=/path/to/llama.cpp/build/bin tests/golden/record_dflash_llama.sh [OUT.json]
#
# What it runs, for each draft (tiny-dflash-draft, tiny-dflash-draft-const):
# temperature 0 (greedy target), --spec-draft-n-max 7 (the block of 8 minus
# the anchor), --spec-draft-p-min 0 (llama.cpp's default: the whole block is
# drafted), one sequence, CPU. Writes OUT.json (default
# tests/golden/dflash/tiny-dflash.llama-drafts.json):
#   {"prompt": TEXT, "prompt_ids": [...], "n_predict": N, "n_max": 7,
#    "drafts": {"<draft file stem>": {"steps": [{"n_past": P, "draft": [ids],
#               "accepted": A, "last": T}, ...], "sequence": [ids...]}}}
# n_past is the target's committed length when the block was drafted (the
# block's anchor, id_last = sequence[n_past], sits at position n_past and is
# not yet in the target's K/V); "draft" the argmax of block positions 1..7
# (candidate 0 of the debug lines of common/speculative.cpp draft());
# "accepted" how many the target kept; "last" the target's token after them;
# "sequence" the committed tokens (prompt + generated) the blocks were
# drafted on. The default prompt makes the target repeat "call" (417), the
# token the const draft favours, so its blocks are accepted whole.
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
bin="${LLAMA_BIN:?set LLAMA_BIN to the directory of the llama.cpp binaries}"
out="${1:-$here/tests/golden/dflash/tiny-dflash.llama-drafts.json}"
tgt="$here/tests/golden/dflash/tiny-dflash-target.gguf"
prompt="${PROMPT:-the model and the user hello world weather city Paris the call}"
n_predict="${N_PREDICT:-48}"
spec="$bin/llama-speculative-simple"
[ -x "$spec" ] || { echo "record_dflash_llama: $spec not found (build target llama-speculative-simple)" >&2; exit 1; }
[ -x "$bin/llama-tokenize" ] || { echo "record_dflash_llama: $bin/llama-tokenize not found" >&2; exit 1; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

"$bin/llama-tokenize" -m "$tgt" -p "$prompt" --ids --log-disable > "$tmp/ids"
for d in tiny-dflash-draft tiny-dflash-draft-const; do
    "$spec" -m "$tgt" -md "$here/tests/golden/dflash/$d.gguf" --spec-type draft-dflash --spec-draft-n-max 7 \
        --spec-draft-p-min 0 -p "$prompt" -n "$n_predict" --temp 0 --top-k 1 --seed 1 -c 256 -ngl 0 -ngld 0 -t 2 \
        -v > "$tmp/$d.log" 2>&1 || {
        echo "record_dflash_llama: llama-speculative-simple failed for $d; its log:" >&2; tail -40 "$tmp/$d.log" >&2; exit 1; }
done

python3 - "$tmp" "$out" "$prompt" "$n_predict" <<'PY'
import ast, json, re, sys
tmp, out_path, prompt, n_predict = sys.argv[1:5]
prompt_ids = ast.literal_eval(open(f"{tmp}/ids").read().strip())
cand = re.compile(r"- seq_id (\d+), draft candidate\s+(\d+), pos\s+(\d+):\s+(\d+)")
acc = re.compile(r"accepted (\d+)/(\d+) draft tokens, the last target token is: \((\d+)\)")
npast = re.compile(r"clear kv cache from any extra tokens, n_past = (\d+)")
drafts = {}
for d in ("tiny-dflash-draft", "tiny-dflash-draft-const"):
    text = open(f"{tmp}/{d}.log", encoding="utf-8", errors="replace").read()
    # speculative-simple decodes the prompt but its last token (the first anchor)
    steps, cur, n_past, seq = [], [], len(prompt_ids) - 1, list(prompt_ids)
    for line in text.splitlines():
        m = cand.search(line)
        if m:
            if int(m.group(2)) == 0:
                cur.append(int(m.group(4)))
            continue
        m = acc.search(line)
        if m:
            a, last = int(m.group(1)), int(m.group(3))
            if len(seq) != n_past + 1 or len(cur) < a:
                sys.exit(f"record_dflash_llama: {d}: step at n_past {n_past} does not follow the committed tokens")
            steps.append({"n_past": n_past, "draft": cur, "accepted": a, "last": last})
            seq += cur[:a] + [last]
            cur = []
            continue
        m = npast.search(line)
        if m:
            n_past = int(m.group(1))
    if not steps:
        sys.exit(f"record_dflash_llama: no drafts in the log of {d} (built with DFlash support, run with -v?)")
    drafts[d] = {"steps": steps, "sequence": seq}
rec = {"source": "llama.cpp 0.3.36 llama-speculative-simple --spec-type draft-dflash (-v log)",
       "prompt": prompt, "prompt_ids": prompt_ids, "n_predict": int(n_predict), "n_max": 7, "p_min": 0.0,
       "drafts": drafts}
open(out_path, "w").write(json.dumps(rec, indent=1))
print(f"record_dflash_llama: {sum(len(v['steps']) for v in drafts.values())} steps -> {out_path}")
PY
