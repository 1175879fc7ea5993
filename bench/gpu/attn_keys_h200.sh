#!/bin/bash
# bench/gpu/attn_keys_h200.sh — Gemma 3 decode speed against the decode attention's shortest key
# split (EMBER_CUDA_ATTN_MIN_KEYS = 32, 64, 128, 256), twice each: engine tg256, one stream after a
# 2,000-token prompt and 8 streams (par_decode). Inputs: .carry/bins.tar.xz (pack_carry.sh) and the
# Gemma 3 files of serve_h200.sh. Output: stdout.
set -u
mkdir -p /tmp/g && tar xJf .carry/bins.tar.xz -C /tmp/g; export LD_LIBRARY_PATH=/tmp/g/lib:/usr/local/cuda/lib64
[ -f /dev/shm/g3.gguf ] || python3 bench/gpu/regrow_gguf_stdlib.py .carry/g3header.xz .carry/g3cut.gguf /dev/shm/g3.gguf >/dev/null
B=/tmp/g/b
for rep in 1 2; do for K in 32 64 128 256; do
  echo "K=$K tg256 $(EMBER_CUDA_ATTN_MIN_KEYS=$K $B/bin/ember bench -m /dev/shm/g3.gguf -ngl 99 -c 4096 -p 0 -n 256 -r 3 2>&1 | grep tg256 | cut -d'|' -f6,7)"
  echo "K=$K d2000 $(EMBER_CUDA_ATTN_MIN_KEYS=$K $B/bench/par_decode /dev/shm/g3.gguf -ngl 99 -np 1 -pp 2000 -tg 128 -r 2 2>&1 | tail -1 | grep -o 'S_TG.*')"
  echo "K=$K np8 $(EMBER_CUDA_ATTN_MIN_KEYS=$K $B/bench/par_decode /dev/shm/g3.gguf -ngl 99 -np 8 -pp 128 -tg 128 -r 2 2>&1 | tail -1 | grep -o 'S_TG.*')"
done; done
