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

/* CUDA backend on device `device`. This first version keeps the op table's
 * contract exactly (every op is synchronous and reads and writes host
 * memory): weights and norm vectors are uploaded once, on first use, keyed
 * by their host address; the KV cache lives on the device (F16 only); the
 * activations are copied in and out around each op. It proves the kernels
 * inside the real forward pass; device-resident activations and CUDA-graph
 * decode need the model to keep its scratch on the device (not yet).
 * Limitation: KV blocks copied on the host (sequence fork, copy on write)
 * are not seen by the device copy.
 * Errors: EMBER_ERR_INVALID_ARG (no such device), EMBER_ERR_NOMEM,
 * EMBER_ERR_INTERNAL. */
ember_status ember_backend_cuda_new(int32_t device, const ember_backend_limits *lim, ember_backend **out);
/* Device bytes held (weights, KV, staging). */
uint64_t ember_backend_cuda_device_bytes(const ember_backend *be);
/* True if `be` is a CUDA backend. */
bool ember_backend_is_cuda(const ember_backend *be);

#endif
