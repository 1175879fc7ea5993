/*
 * registry.c — picks the backend: ember_backend_new (backend.h).
 *
 * Owns: the one decision "CPU or CUDA" from the options and the devices
 * present, and the device queries the public API needs without naming a
 * backend (ember_gpu_count, ember_gpu_memory_info in include/ember.h).
 * This is the only file outside src/backend/cuda/ that tests EMBER_CUDA
 * (the CMake option defines it for builds with the CUDA backend).
 * Must not: create anything itself, or hold options (options.c).
 */
#include "backend/backend.h"
#include "base/status.h"

#ifdef EMBER_CUDA
#include "backend/cuda/backend_cuda.h"
#include "backend/cuda/cuda_backend.h"
#endif

int32_t ember_backend_gpu_count(void)
{
#ifdef EMBER_CUDA
    return ember_cuda_device_count();
#else
    return 0;
#endif
}

ember_status ember_backend_new(const ember_backend_options *opt, const ember_backend_limits *lim,
                               ember_backend **out)
{
    if (!out) return ember_error(EMBER_ERR_INVALID_ARG, "ember_backend_new: out is NULL");
    *out = NULL;
    if (!lim) return ember_error(EMBER_ERR_INVALID_ARG, "ember_backend_new: limits are NULL");
    /* the same rule for every backend (the GPU was found once accepting a zero-token limit) */
    if (lim->max_tokens < 1 || lim->max_n_in < 1 || lim->max_kv_tokens < 1 || lim->max_head_dim < 1)
        return ember_error(EMBER_ERR_INVALID_ARG, "ember_backend_new: limits must be positive (tokens %lld, n_in %lld, kv %lld, head_dim %d)",
                           (long long)lim->max_tokens, (long long)lim->max_n_in, (long long)lim->max_kv_tokens, lim->max_head_dim);
    const ember_backend_options o = opt ? *opt : ember_backend_options_default();
#ifdef EMBER_CUDA
    if (o.n_gpu_layers != 0 && ember_backend_gpu_count() > 0) return ember_backend_cuda_new(&o, lim, out);
#endif
    return ember_backend_cpu_new(&o, lim, out);
}

int32_t ember_gpu_count(void) { return ember_backend_gpu_count(); }

ember_status ember_gpu_memory_info(int32_t device, uint64_t *free_bytes, uint64_t *total_bytes)
{
    if (!free_bytes || !total_bytes) return ember_error(EMBER_ERR_INVALID_ARG, "ember_gpu_memory_info: NULL output");
    *free_bytes = *total_bytes = 0;
#ifdef EMBER_CUDA
    if (ember_backend_gpu_count() > 0) return ember_cuda_mem_info(device, free_bytes, total_bytes);
#endif
    return ember_error(EMBER_ERR_UNSUPPORTED, "ember_gpu_memory_info: no GPU device %d in this build or machine", device);
}
