#!/bin/bash
# bench/gpu/spec_h200.sh MODEL BUILD_DIR — n-gram speculation on the lent H200: bench/spec_bench.py
# (ember serve with --spec-type ngram vs no draft, -ngl all by default in a CUDA build), SmolLM2-135M,
# grounded and free workloads at 1 and 8 streams. BUILD_DIR holds b/bin/ember (CUDA build), lib/
# (Debian libraries the device lacks) and whl/ (requests and its dependencies, if the device lacks them).
set -u
M=${1:?model}; D=${2:?carried folder}
export LD_LIBRARY_PATH=$PWD/$D/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
python3 -c "import requests" 2>/dev/null || { python3 -m pip install -q --no-index --no-deps --target /tmp/site $D/whl/*.whl && export PYTHONPATH=/tmp/site; }
mkdir -p build/bin && cp $D/b/bin/ember build/bin/ember
build/bin/ember bench -m "$M" -ngl 99 -p 128 -n 64 -r 1 2>&1 | grep -E "llama|error" | head -3
timeout ${SPEC_TIMEOUT:-100} python3 bench/spec_bench.py --model "$M" --threads 1 --no-llama --max-tokens 128 ${SPEC_ARGS:---parallel 1} \
  --out "$OUT/spec-h200.md" > "$OUT/spec.log" 2>&1; echo "spec_bench rc $?"
grep -v "^$" "$OUT/spec-h200.md" | tail -30; tail -8 "$OUT/spec.log"
