/*
 * backend_cuda.h — the CUDA backend behind the op table (backend/backend.h).
 *
 * Owns: creating an ember_backend whose ops run the kernels of
 * cuda_backend.h. Compiled only with -DEMBER_CUDA=ON.
 * Must not: be included by code that is built without EMBER_CUDA.
 */
#ifndef EMBER_BACKEND_CUDA_H
#define EMBER_BACKEND_CUDA_H

#include "backend/backend.h"

#include <stdio.h>

/* CUDA backend on device `device`: weights and norm vectors are uploaded
 * once, on first use, keyed by their host address; the KV cache lives on the
 * device (F16 only); activations live on the device when the context takes
 * them from act_alloc; decode steps of up to 32 entries run as CUDA graphs
 * (backend_cuda.c). EMBER_CUDA_VERIFY=1 runs every op on the CPU backend too
 * (host activations, no graphs).
 * Errors: EMBER_ERR_INVALID_ARG (no such device), EMBER_ERR_NOMEM,
 * EMBER_ERR_INTERNAL. */
ember_status ember_backend_cuda_new(int32_t device, const ember_backend_limits *lim, ember_backend **out);
/* Device bytes held (weights, KV, staging). */
uint64_t ember_backend_cuda_device_bytes(const ember_backend *be);
/* Print what the backend holds, by category (weights, norm vectors, KV
 * cache, arena slack, activation scratch, staging, step arrays, RoPE tables,
 * kernel scratch, cuBLAS workspace, driver stack reservation, pinned host
 * buffers), in MiB, a few lines starting "ember: ". Weights and KV are
 * uploaded on first use: call it after a decode. Nothing for other backends. */
void ember_backend_cuda_mem_print(const ember_backend *be, FILE *f);
/* True if `be` is a CUDA backend. */
bool ember_backend_is_cuda(const ember_backend *be);

#endif
