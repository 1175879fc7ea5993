/*
 * cuda_meminfo.cu — how much memory a device has in use, for reports
 * (`ember bench` prints it before loading and after running a model).
 *
 * Owns: one read-only query (cudaMemGetInfo). Must not: allocate, or be
 * used inside a step (it may create the device's primary context).
 */
#include "backend/cuda/cuda_common.cuh"

extern "C" ember_status ember_cuda_mem_info(int device, uint64_t *free_bytes, uint64_t *total_bytes)
{
    EMBER_CUDA_NONNULL(free_bytes);
    EMBER_CUDA_NONNULL(total_bytes);
    *free_bytes = *total_bytes = 0;
    int n = ember_cuda_device_count();
    if (device < 0 || device >= n)
        return ember_error(EMBER_ERR_INVALID_ARG, "cuda: device %d does not exist (%d device(s) found)", device, n);
    int cur = 0;
    ember_status s = ember_cuda_check(cudaGetDevice(&cur), "cudaGetDevice");
    if (s == EMBER_OK) s = ember_cuda_check(cudaSetDevice(device), "cudaSetDevice");
    size_t f = 0, t = 0;
    if (s == EMBER_OK) s = ember_cuda_check(cudaMemGetInfo(&f, &t), "cudaMemGetInfo");
    (void)cudaSetDevice(cur);
    *free_bytes = f;
    *total_bytes = t;
    return s;
}
