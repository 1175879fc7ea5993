/*
 * test_blocks.h — the gguf-py block goldens of the quantized formats
 * (tests/data/cuda/blocks_*.bin, made by tests/golden/cuda/make_blocks.py:
 * random blocks and gguf-py's dequantization of them) and the seeded RNG
 * the tests draw from; shared by the CUDA kernel tests (cuda_test.h) and
 * the CPU backend's tests.
 * Must not: compute expected values with the code under test.
 */
#ifndef EMBER_TEST_COMMON_TEST_BLOCKS_H
#define EMBER_TEST_COMMON_TEST_BLOCKS_H

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* xorshift64*: deterministic test data */
static uint64_t test_rng_state = 0x9E3779B97F4A7C15ull;
static inline uint32_t test_rand_u32(void)
{
    test_rng_state ^= test_rng_state >> 12;
    test_rng_state ^= test_rng_state << 25;
    test_rng_state ^= test_rng_state >> 27;
    return (uint32_t)((test_rng_state * 2685821657736338717ull) >> 32);
}
/* uniform in [lo, hi) */
static inline float test_randf(float lo, float hi)
{
    return lo + (hi - lo) * (float)(test_rand_u32() >> 8) / 16777216.0f;
}

/* A golden file of random blocks and gguf-py's dequantization of them. */
typedef struct test_blocks {
    uint32_t type, n_blocks, block_size, block_bytes;
    uint8_t *raw;    /* n_blocks * block_bytes */
    float *deq;      /* n_blocks * block_size */
} test_blocks;

static inline void test_blocks_load(const char *type_name, test_blocks *b)
{
    char path[256];
    snprintf(path, sizeof path, "tests/data/cuda/blocks_%s.bin", type_name);
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("cannot open %s (run from the repository root)", path);
    uint32_t h[4];
    assert_int_equal(fread(h, 4, 4, f), 4);
    b->type = h[0];
    b->n_blocks = h[1];
    b->block_size = h[2];
    b->block_bytes = h[3];
    b->raw = malloc((size_t)b->n_blocks * b->block_bytes);
    b->deq = malloc((size_t)b->n_blocks * b->block_size * sizeof(float));
    assert_non_null(b->raw);
    assert_non_null(b->deq);
    assert_int_equal(fread(b->raw, b->block_bytes, b->n_blocks, f), b->n_blocks);
    assert_int_equal(fread(b->deq, sizeof(float) * b->block_size, b->n_blocks, f), b->n_blocks);
    fclose(f);
}

static inline void test_blocks_free(test_blocks *b)
{
    free(b->raw);
    free(b->deq);
}

/* Build a [n_rows, ne0] matrix from golden blocks picked pseudo-randomly:
 * raw bytes into *raw, gguf-py's dequantized values into *ref. */
static inline void test_blocks_matrix(const test_blocks *b, int64_t ne0, int64_t n_rows, uint8_t **raw, float **ref)
{
    const int64_t nb = ne0 / b->block_size;
    assert_int_equal(nb * b->block_size, ne0);
    *raw = malloc((size_t)(nb * n_rows) * b->block_bytes);
    *ref = malloc((size_t)(ne0 * n_rows) * sizeof(float));
    assert_non_null(*raw);
    assert_non_null(*ref);
    for (int64_t r = 0; r < n_rows; r++)
        for (int64_t j = 0; j < nb; j++) {
            const uint32_t pick = test_rand_u32() % b->n_blocks;
            memcpy(*raw + (size_t)(r * nb + j) * b->block_bytes, b->raw + (size_t)pick * b->block_bytes,
                   b->block_bytes);
            memcpy(*ref + r * ne0 + j * b->block_size, b->deq + (size_t)pick * b->block_size,
                   b->block_size * sizeof(float));
        }
}

#endif
