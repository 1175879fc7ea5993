/*
 * cuda_test.h — shared helpers of the CUDA kernel tests: the skip rule (no
 * EMBER_CUDA build or no GPU: every test skips and says why), a seeded RNG,
 * device buffers and the gguf-py block goldens (tests/data/cuda/blocks_*.bin,
 * made by tests/golden/cuda/make_blocks.py).
 * Must not: compute expected values with the code under test.
 */
#ifndef EMBER_TEST_CUDA_TEST_H
#define EMBER_TEST_CUDA_TEST_H

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ember.h"
#include "../../common/test_blocks.h"

#ifdef EMBER_CUDA
#include "backend/cuda/cuda_backend.h"

static ember_cuda *test_cu;

/* cmocka group setup: open device 0 if there is one. */
static int test_cuda_group_setup(void **state)
{
    (void)state;
    if (ember_cuda_device_count() == 0) {
        printf("[ SKIP ] no CUDA device found: the CUDA kernel tests are skipped\n");
        return 0;
    }
    ember_backend_options opt = ember_backend_options_default();   /* EMBER_CUDA_TF32 etc. reach the context */
    if (ember_backend_options_env(&opt) != EMBER_OK || ember_cuda_new(0, &opt, &test_cu) != EMBER_OK) {
        printf("[ SKIP ] cannot open CUDA device 0: %s\n", ember_last_error());
        test_cu = NULL;
    } else {
        printf("[ INFO ] CUDA device: %s\n", ember_cuda_device_name(test_cu));
    }
    return 0;
}

static int test_cuda_group_teardown(void **state)
{
    (void)state;
    ember_cuda_free(test_cu);
    test_cu = NULL;
    return 0;
}

#define TEST_NEED_GPU()                                      \
    do {                                                     \
        if (!test_cu) {                                      \
            print_message("no CUDA device: skipped\n");      \
            skip();                                          \
        }                                                    \
    } while (0)

#define CU_OK(expr)                                                                            \
    do {                                                                                       \
        ember_status st_ = (expr);                                                             \
        if (st_ != EMBER_OK) fail_msg("%s -> %s: %s", #expr, ember_status_name(st_), ember_last_error()); \
    } while (0)

/* device copy of `bytes` host bytes */
static inline void *dev_new(const void *host, size_t bytes)
{
    void *d = NULL;
    CU_OK(ember_cuda_malloc(test_cu, bytes, &d));
    if (host) CU_OK(ember_cuda_upload(test_cu, d, host, bytes));
    return d;
}

static inline void dev_get(void *host, const void *dev, size_t bytes)
{
    CU_OK(ember_cuda_download(test_cu, host, dev, bytes));
}

static inline void dev_free(void *dev, size_t bytes)
{
    ember_cuda_mfree(test_cu, dev, bytes);
}
#endif /* EMBER_CUDA */

#endif
