#!/bin/bash
# bench/gpu/pack_carry.sh — on the dev box, after `cmake --build build-cuda` (-DEMBER_CUDA=ON
# -DCMAKE_CUDA_ARCHITECTURES=90-real): packs what the H200 scripts (serve_h200.sh, profile_h200.sh)
# read from .carry/ (ignored: add `.carry/` to .git/info/exclude): bins.tar.xz (ember, par_decode, spec_cost,
# the CUDA unit tests, the test helpers of build-cuda/tools for tests/e2e, the Debian libraries the
# device lacks) and commit. The other .carry inputs
# are made once per checkout (bench/results/cuda-h200.md, "Re-running"): llama/ (the parts of
# ../shared/tools/llama.cpp-cuda-sm90), whl/ (`pip download --only-binary=:all: --python-version
# 3.12 --platform manylinux2014_x86_64 -d .carry/whl openai==2.8.1`), g3cut.gguf
# (cut_gemma3_gguf.py --layers 1 --vocab 4096) and g3header.xz (the original's header, lzma).
# bench/gpu/qwen35_h200.sh also needs gguf-py for bench/make_qwen35_gguf.py: a pure-Python wheel
# (its dependencies numpy, pyyaml, requests, tqdm are all in the device's image), put into .carry/whl
# by `GGUF_WHL=1 bash bench/gpu/pack_carry.sh` or by hand:
#   .venv/bin/pip download --no-deps --only-binary=:all: -d .carry/whl gguf==0.19.0
set -e
cd "$(dirname "$0")/../.."
rm -rf /tmp/pack; mkdir -p /tmp/pack/b/bin /tmp/pack/b/bench /tmp/pack/b/tests /tmp/pack/b/tools /tmp/pack/lib
cp build-cuda/bin/ember /tmp/pack/b/bin/
cp build-cuda/bench/spec_cost /tmp/pack/b/bench/ 2>/dev/null || true
cp build-cuda/bench/par_decode /tmp/pack/b/bench/ 2>/dev/null || cp build-cuda/bin/par_decode /tmp/pack/b/bench/ 2>/dev/null || find build-cuda -name par_decode -type f -exec cp {} /tmp/pack/b/bench/ \;
for t in build-cuda/tests/test_cuda_* build-cuda/tests/test_seam build-cuda/tests/test_runtime build-cuda/tests/test_qwen35 build-cuda/tests/test_dflash_spec build-cuda/tests/test_mtp_spec build-cuda/tests/test_dflash build-cuda/tests/test_mtp; do cp $t /tmp/pack/b/tests/; done
# the test helpers tests/e2e finds beside EMBER_BIN (../tools: parse_stream, dequant, fake_serve, gguf_write_sample)
cp build-cuda/tools/* /tmp/pack/b/tools/
strip /tmp/pack/b/bin/* /tmp/pack/b/bench/* /tmp/pack/b/tests/* /tmp/pack/b/tools/* 2>/dev/null || true
for l in microhttpd jansson pcre2-8 utf8proc gnutls p11-kit idn2 unistring tasn1 nettle hogweed gmp ffi cmocka; do cp -L /lib/x86_64-linux-gnu/lib$l.so.* /tmp/pack/lib/ 2>/dev/null || true; done
tar cJf .carry/bins.tar.xz -C /tmp/pack b lib
git rev-parse --short HEAD > .carry/commit
if [ "${GGUF_WHL:-0}" = 1 ] && ! ls .carry/whl/gguf-*.whl >/dev/null 2>&1; then
  .venv/bin/pip download -q --no-deps --only-binary=:all: -d .carry/whl gguf==0.19.0
fi
[ -n "$(git status --porcelain --untracked-files=no)" ] && echo "+dirty" >> .carry/commit
ls -la .carry/bins.tar.xz
