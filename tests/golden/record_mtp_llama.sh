#!/usr/bin/env bash
# record_mtp_llama.sh — record llama.cpp's own MTP drafts on the tiny golden
# files (the Gemma 4 target of tests/golden/dflash/ and the gemma4-assistant
# drafts of tests/golden/mtp/, made by tests/golden/make_mtp.py), so ember's
# drafts can be compared step by step (issue 16, item 3; test_mtp).
#
# Needs: llama.cpp binaries built from the same source as the converter
# (llama-cpp-python 0.3.36's vendor/llama.cpp, CPU build is enough):
# llama-speculative-simple (examples/speculative-simple: it drives
# common_speculative with --spec-type draft-mtp and logs every draft
# candidate at -v) and llama-tokenize. python3 (stdlib only) parses the log.
#
#   LLAMA_BIN=/path/to/llama.cpp/build/bin tests/golden/record_mtp_llama.sh [OUT.json]
#
# What it runs, for each draft: temperature 0 (greedy target),
# --spec-draft-n-max 4, --spec-draft-p-min 0 (llama.cpp's default), one
# sequence, CPU. Writes OUT.json (default
# tests/golden/mtp/tiny-mtp.llama-drafts.json):
#   {"prompt": TEXT, "prompt_ids": [...], "n_predict": N, "n_max": 4,
#    "drafts": {"<draft file stem>": {"steps": [{"n_past": P, "draft": [ids],
#               "accepted": A, "last": T}, ...], "sequence": [ids...]}}}
# n_past is the target's committed length when the draft was made (the
# token drafted from, id_last = sequence[n_past], sits at position n_past
# and is not yet in the target's K/V); "draft" the candidate 0 of each draft
# position (common/speculative.cpp draft() debug lines); "accepted" how many
# the target kept; "last" the target's token after them; "sequence" the
# committed tokens (prompt + generated) the drafts were made on.
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
bin="${LLAMA_BIN:?set LLAMA_BIN to the directory of the llama.cpp binaries}"
out="${1:-$here/tests/golden/mtp/tiny-mtp.llama-drafts.json}"
tgt="$here/tests/golden/dflash/tiny-dflash-target.gguf"
prompt="${PROMPT:-the model and the user hello world weather city Paris}"
n_predict="${N_PREDICT:-40}"
spec="$bin/llama-speculative-simple"
[ -x "$spec" ] || { echo "record_mtp_llama: $spec not found (build target llama-speculative-simple)" >&2; exit 1; }
[ -x "$bin/llama-tokenize" ] || { echo "record_mtp_llama: $bin/llama-tokenize not found" >&2; exit 1; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

"$bin/llama-tokenize" -m "$tgt" -p "$prompt" --ids --log-disable > "$tmp/ids"
for d in tiny-mtp-draft tiny-mtp-draft-const; do
    "$spec" -m "$tgt" -md "$here/tests/golden/mtp/$d.gguf" --spec-type draft-mtp --spec-draft-n-max 4 \
        --spec-draft-p-min 0 -p "$prompt" -n "$n_predict" --temp 0 --top-k 1 --seed 1 -c 256 -ngl 0 -ngld 0 -t 2 \
        -v > "$tmp/$d.log" 2>&1 || {
        echo "record_mtp_llama: llama-speculative-simple failed for $d; its log:" >&2; tail -40 "$tmp/$d.log" >&2; exit 1; }
done

python3 - "$tmp" "$out" "$prompt" "$n_predict" <<'EOF'
import ast, json, re, sys
tmp, out_path, prompt, n_predict = sys.argv[1:5]
prompt_ids = ast.literal_eval(open(f"{tmp}/ids").read().strip())
cand = re.compile(r"- seq_id (\d+), draft candidate\s+(\d+), pos\s+(\d+):\s+(\d+)")
acc = re.compile(r"accepted (\d+)/(\d+) draft tokens, the last target token is: \((\d+)\)")
npast = re.compile(r"clear kv cache from any extra tokens, n_past = (\d+)")
drafts = {}
for d in ("tiny-mtp-draft", "tiny-mtp-draft-const"):
    text = open(f"{tmp}/{d}.log", encoding="utf-8", errors="replace").read()
    # speculative-simple decodes the prompt but its last token (the first id_last)
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
            steps.append({"n_past": n_past, "draft": cur, "accepted": a, "last": last})
            assert len(cur) >= a and seq[:n_past + 1] == seq[:n_past + 1]
            seq += cur[:a] + [last]
            cur = []
            continue
        m = npast.search(line)
        if m:
            n_past = int(m.group(1))
    if not steps:
        sys.exit(f"record_mtp_llama: no drafts in the log of {d} (run with -v?)")
    drafts[d] = {"steps": steps, "sequence": seq}
rec = {"source": "llama.cpp 0.3.36 llama-speculative-simple --spec-type draft-mtp (-v log)",
       "prompt": prompt, "prompt_ids": prompt_ids, "n_predict": int(n_predict), "n_max": 4, "p_min": 0.0,
       "drafts": drafts}
open(out_path, "w").write(json.dumps(rec, indent=1))
print(f"record_mtp_llama: {sum(len(v['steps']) for v in drafts.values())} steps -> {out_path}")
EOF
