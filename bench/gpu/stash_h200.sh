#!/bin/bash
# bench/gpu/stash_h200.sh — spread the inputs of bench/gpu/serve_h200.sh (.carry/: bins.tar.xz, commit,
# whl/, g3cut.gguf, g3header.xz and the llama.cpp CUDA parts) over warm device calls when together they
# pass one call's transfer limit, without bundle_h200.sh's repacking: carry any of them (the llama.cpp
# parts in .carry/l0 and .carry/l1, as ../shared/tools/llama.cpp-cuda-sm90's files) and run
#   bash bench/gpu/stash_h200.sh            each call: what came is kept in /root/carry (kept while the
#                                           machine stays warm, 30 s between calls), then everything
#                                           kept is linked back into .carry/ (llama parts into .carry/llama/)
# so a later call finds the whole .carry/ that serve_h200.sh reads. Prints what .carry/ holds.
set -e
cd "$(dirname "$0")/../.."
mkdir -p /root/carry/llama .carry/llama
for f in bins.tar.xz commit g3cut.gguf g3header.xz; do
  if [ -f .carry/$f ] && [ ! -L .carry/$f ]; then cp .carry/$f /root/carry/; fi
done
if [ -d .carry/whl ] && [ ! -L .carry/whl ]; then rm -rf /root/carry/whl; cp -r .carry/whl /root/carry/; fi
for d in .carry/l0 .carry/l1; do [ -d $d ] && cp $d/*.part0* /root/carry/llama/ 2>/dev/null || true; done
for f in /root/carry/*; do [ "$(basename $f)" = llama ] || ln -sfn "$f" .carry/; done
for f in /root/carry/llama/*; do [ -e "$f" ] && ln -sfn "$f" .carry/llama/; done
ls -la .carry/ .carry/llama/ | sed 's/^/stash: /'
