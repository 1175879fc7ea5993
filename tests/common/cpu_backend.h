/*
 * cpu_backend.h — a CPU backend for unit tests: n_threads workers, the
 * options table's defaults overlaid with this process's environment (as a
 * context would get them), so EMBER_NO_GEMM and friends still reach tests.
 */
#ifndef EMBER_TEST_CPU_BACKEND_H
#define EMBER_TEST_CPU_BACKEND_H

#include "backend/backend.h"

static inline ember_status test_cpu_backend_new(int32_t n_threads, const ember_backend_limits *lim,
                                                ember_backend **out)
{
    ember_backend_options o = ember_backend_options_default();
    o.n_threads = n_threads;
    const ember_status st = ember_backend_options_env(&o);
    return st != EMBER_OK ? st : ember_backend_cpu_new(&o, lim, out);
}

#endif
