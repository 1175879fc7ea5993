#!/bin/bash
# bench/gpu/bundle_h200.sh — move more than one call's transfer limit (64 MiB with the tracked tree,
# about 25 MB of it) to the lent H200 in a few warm calls, then open it there as .carry/.
#
#   dev box:  bash bench/gpu/bundle_h200.sh pack [EXTRA_FILE...]
#               tars .carry/{bins.tar.xz,commit,whl,g3cut.gguf,g3header.xz}, the llama.cpp CUDA
#               parts (../shared/tools/llama.cpp-cuda-sm90) as llama/, and each EXTRA_FILE (by its
#               base name), splits the tar into /tmp/bundle-pieces/p0..pN of PIECE bytes (default
#               40,000,000) and writes their sha256 beside them (/tmp/bundle-pieces/sha).
#             bash bench/gpu/bundle_h200.sh next
#               moves the next piece (and, with the last, the sha file) into .carry/pieces/ (the one
#               path each call carries); prints "last" with the last piece.
#   device:   bash bench/gpu/bundle_h200.sh stash     (every call: .carry/pieces/* -> /root/stash/)
#             bash bench/gpu/bundle_h200.sh open      (last call: checks the sha, unpacks into
#               /root/carry, links each entry into .carry/; later calls while warm: links again)
# The machine keeps /root between calls only while it stays warm (30 s): make the calls back to back.
set -e
cd "$(dirname "$0")/../.."
P=/tmp/bundle-pieces
case "${1:-}" in
  pack)
    shift
    rm -rf /tmp/bundle "$P"; mkdir -p /tmp/bundle/llama "$P"
    cp ../shared/tools/llama.cpp-cuda-sm90/*.part0* /tmp/bundle/llama/
    for f in bins.tar.xz commit whl g3cut.gguf g3header.xz; do [ -e .carry/$f ] && cp -r .carry/$f /tmp/bundle/; done
    for f in "$@"; do cp "$f" /tmp/bundle/; done
    tar cf /tmp/bundle.tar -C /tmp/bundle .
    split -b "${PIECE:-40000000}" -d -a 1 /tmp/bundle.tar "$P/p"
    sha256sum /tmp/bundle.tar | cut -c1-64 > "$P/sha"
    rm -f /tmp/bundle.tar; rm -rf /tmp/bundle
    ls -la "$P" ;;
  next)
    rm -rf .carry/pieces; mkdir -p .carry/pieces
    n=$(ls "$P"/p? 2>/dev/null | head -1) || true
    [ -n "$n" ] || { echo "no pieces left"; exit 1; }
    mv "$n" .carry/pieces/
    if ! ls "$P"/p? >/dev/null 2>&1; then cp "$P/sha" .carry/pieces/; echo last; fi
    ls -la .carry/pieces ;;
  stash)
    mkdir -p /root/stash; cp .carry/pieces/* /root/stash/; ls -la /root/stash ;;
  open)
    if [ ! -d /root/carry ]; then
      mkdir -p /root/stash; cp .carry/pieces/* /root/stash/ 2>/dev/null || true
      got=$(cat /root/stash/p? | sha256sum | cut -c1-64)
      [ "$got" = "$(cat /root/stash/sha)" ] || { echo "bundle sha mismatch: pieces $(ls /root/stash)"; exit 1; }
      mkdir -p /root/carry; cat /root/stash/p? | tar x -C /root/carry; rm -rf /root/stash
    fi
    mkdir -p .carry; for f in /root/carry/*; do ln -sfn "$f" .carry/; done
    ls -la .carry/ ;;
  *) echo "usage: $0 pack [FILE...] | next | stash | open"; exit 2 ;;
esac
