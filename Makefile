# ember — top-level wrapper around CMake. The two commands that matter:
#   make serve   set up, build, fetch the default model, start the server
#   make test    the whole test suite (unit tests via ctest, end-to-end via pytest),
#                then all of it again under ASan + UBSan (make sanitize)
BUILD ?= build
JOBS ?= $(shell nproc)
PY := .venv/bin/python
CMAKE_ARGS ?=

.PHONY: all setup build models test unit e2e serve sanitize fuzz cuda cuda-check bench clean

all: build

setup:
	@scripts/setup

build: setup
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_ARGS) >/dev/null
	@cmake --build $(BUILD) -j$(JOBS)

models: setup
	@scripts/fetch-model all >/dev/null

unit: build models
	ctest --test-dir $(BUILD) --output-on-failure -j$(JOBS)

e2e: build models
	EMBER_BIN=$(abspath $(BUILD))/bin/ember $(PY) -m pytest -q tests/e2e

test: unit e2e sanitize cuda-check

serve: build
	@scripts/serve

# The whole suite under AddressSanitizer + UndefinedBehaviorSanitizer (part of
# `make test`): unit tests, then every end-to-end test against the sanitized
# binaries (servers, tools). -O1 keeps real-model runs within CI's time; leaks
# fail a test (a server must exit 0), UB aborts. bench/results/sanitizers.md.
SAN_ENV := ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1
sanitize: setup models
	@cmake -S . -B build-san -DCMAKE_BUILD_TYPE=Debug -DEMBER_SANITIZE=ON "-DCMAKE_C_FLAGS_DEBUG=-O1 -g" >/dev/null
	@cmake --build build-san -j$(JOBS)
	$(SAN_ENV) ctest --test-dir build-san --output-on-failure -j$(JOBS) --timeout 1800
	EMBER_BIN=$(abspath build-san)/bin/ember EMBER_SANITIZED=1 $(SAN_ENV) $(PY) -m pytest -q tests/e2e

# libFuzzer targets (clang); run one with e.g. build-fuzz/fuzz/fuzz_gguf -max_total_time=600
fuzz: setup
	@CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=Debug -DEMBER_FUZZ=ON -DEMBER_TESTS=OFF >/dev/null
	@cmake --build build-fuzz -j$(JOBS)

cuda: setup
	@cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DEMBER_CUDA=ON >/dev/null
	@cmake --build build-cuda -j$(JOBS)

# ember vs llama.cpp (built from source, cached outside the repo) on both models:
# bench/results/<date>-<machine>.md/.json/.png
bench: build models
	@$(PY) -c "import matplotlib" 2>/dev/null || .venv/bin/pip install -q matplotlib
	$(PY) bench/make_bench.py

# Compile and link the CUDA backend and its tests when nvcc exists, so CI proves
# it builds, and runs the host tests of kernel code (test_*_host.cu: no GPU needed); the GPU
# tests run (and skip without a GPU) in `make cuda` builds.
# No architecture is given, as in `make cuda`: CMakeLists.txt's default (sm_90
# plus its PTX) is what is checked.
NVCC := $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
cuda-check: setup
ifneq ($(NVCC),)
	@CUDACXX=$(NVCC) cmake -S . -B build-cuda-check -DCMAKE_BUILD_TYPE=Release -DEMBER_CUDA=ON >/dev/null
	@cmake --build build-cuda-check -j$(JOBS) --target test_cuda_matmul test_cuda_ops test_cuda_attn test_mmvq_host
	@echo "cuda-check: the CUDA backend compiles and links (sm_90 + PTX)"
	build-cuda-check/tests/test_mmvq_host
else
	@echo "cuda-check: nvcc not found; CUDA build not checked"
endif

clean:
	rm -rf $(BUILD) build-san build-fuzz build-cuda build-cuda-check
