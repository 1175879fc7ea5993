/*
 * test_mmvq_host.cu — the fast mat-vec kernels' arithmetic (cuda_mmvq.cu's
 * lane programs, src/backend/cuda/cuda_mmvq_lane.cuh) run on the CPU: for
 * each weight format, all 32 lanes of a row's warp are run one after
 * another and their partial sums added, against the dot product of gguf-py's
 * dequantization of the same blocks (tests/data/cuda/blocks_*.bin) with the
 * dequantized activations, in double. Needs nvcc to build (CUDA builds
 * only), no GPU to run: the kernels' index maps and formulas are checked on
 * any machine that has the toolkit; test_cuda_q8 checks the kernels
 * themselves on the GPU.
 * Asserted per case: |lanes - reference| <= 1e-5 * max |reference| of the
 * column (the integer dots are exact, the float sums in another order); for
 * the K formats with several columns, the lanes over 4 rows at once
 * (mmvq*_lane_rows) equal the one-row lanes bit for bit.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
extern "C" {
#include <cmocka.h>
}
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_mmvq_lane.cuh"

using namespace ember_q8;

namespace {

uint64_t rng = 0x9E3779B97F4A7C15ull;
uint32_t rnd()
{
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return (uint32_t)((rng * 2685821657736338717ull) >> 32);
}

struct blocks {
    uint32_t type, n_blocks, block_size, block_bytes;
    uint8_t *raw;
    float *deq;
};

void load(const char *name, blocks *b)
{
    char path[256];
    snprintf(path, sizeof path, "tests/data/cuda/blocks_%s.bin", name);
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("cannot open %s (run from the repository root)", path);
    uint32_t h[4];
    assert_int_equal(fread(h, 4, 4, f), 4);
    b->type = h[0];
    b->n_blocks = h[1];
    b->block_size = h[2];
    b->block_bytes = h[3];
    b->raw = (uint8_t *)malloc((size_t)b->n_blocks * b->block_bytes);
    b->deq = (float *)malloc((size_t)b->n_blocks * b->block_size * sizeof(float));
    assert_non_null(b->raw);
    assert_non_null(b->deq);
    assert_int_equal(fread(b->raw, b->block_bytes, b->n_blocks, f), b->n_blocks);
    assert_int_equal(fread(b->deq, sizeof(float) * b->block_size, b->n_blocks, f), b->n_blocks);
    fclose(f);
}

/* the row programs as the kernel calls them (cuda_mmvq.cu's launch_fast_nc) */
template <int NC> void run_lane(uint32_t type, const uint8_t *wr, int64_t n, const int8_t *aq, const float *ad,
                                const float *as, int lane, float *acc)
{
    const int nb32 = (int)(n / 32), nb256 = (int)(n / 256);
    switch (type) {
    case EMBER_TYPE_Q4_0: mmvq32_lane<uq4_0, NC>(wr, nb32, aq, ad, as, n, lane, acc); break;
    case EMBER_TYPE_Q4_1: mmvq32_lane<uq4_1, NC>(wr, nb32, aq, ad, as, n, lane, acc); break;
    case EMBER_TYPE_Q5_0: mmvq32_lane<uq5_0, NC>(wr, nb32, aq, ad, as, n, lane, acc); break;
    case EMBER_TYPE_Q5_1: mmvq32_lane<uq5_1, NC>(wr, nb32, aq, ad, as, n, lane, acc); break;
    case EMBER_TYPE_Q8_0: mmvq32_lane<uq8_0, NC>(wr, nb32, aq, ad, as, n, lane, acc); break;
    case EMBER_TYPE_Q4_K: mmvq4_K_lane<NC>(wr, nb256, aq, ad, n, lane, acc); break;
    case EMBER_TYPE_Q6_K: mmvq6_K_lane<NC>(wr, nb256, aq, ad, n, lane, acc); break;
    default: fail_msg("no row program for type %u", type);
    }
}

/* One case: rows of ne0 elements made of golden blocks picked at random,
 * NC columns of random Q8 activations (int8 in [-127, 127], d > 0, and for
 * Q8_1 s = d * sum q as its quantizer stores it). Returns the worst
 * |diff| / max |ref| over the columns. */
template <int NC> double run_case(const char *name, int64_t ne0, int n_rows)
{
    blocks bl;
    load(name, &bl);
    const int64_t nb = ne0 / bl.block_size;
    assert_int_equal(nb * bl.block_size, ne0);
    const size_t row_bytes = (size_t)nb * bl.block_bytes;
    /* 16-byte aligned rows as on the device (cudaMalloc) */
    uint8_t *w = (uint8_t *)aligned_alloc(16, (row_bytes * n_rows + 15) & ~(size_t)15);
    float *deq = (float *)malloc(sizeof(float) * ne0 * n_rows);
    assert_non_null(w);
    assert_non_null(deq);
    for (int r = 0; r < n_rows; r++)
        for (int64_t j = 0; j < nb; j++) {
            const uint32_t pick = rnd() % bl.n_blocks;
            memcpy(w + r * row_bytes + j * bl.block_bytes, bl.raw + (size_t)pick * bl.block_bytes, bl.block_bytes);
            memcpy(deq + r * ne0 + j * bl.block_size, bl.deq + (size_t)pick * bl.block_size,
                   sizeof(float) * bl.block_size);
        }
    const bool k = bl.block_size == 256;
    const int64_t abs = k ? 256 : 32, nab = ne0 / abs;
    int8_t *aq = (int8_t *)aligned_alloc(16, (size_t)(ne0 * NC + 15) & ~(size_t)15);
    float *ad = (float *)malloc(sizeof(float) * nab * NC), *as = (float *)malloc(sizeof(float) * nab * NC);
    assert_non_null(aq);
    assert_non_null(ad);
    assert_non_null(as);
    for (int64_t i = 0; i < ne0 * NC; i++) aq[i] = (int8_t)((int)(rnd() % 255) - 127);
    for (int64_t i = 0; i < nab * NC; i++) {
        ad[i] = 1e-3f * (float)(1 + rnd() % 1000);
        int sum = 0;
        for (int e = 0; e < abs; e++) sum += aq[i * abs + e];
        as[i] = (float)sum * ad[i];
    }
    double worst = 0;
    for (int c = 0; c < NC; c++) {
        double mref = 0, mdiff = 0;
        for (int r = 0; r < n_rows; r++) {
            double ref = 0;
            for (int64_t e = 0; e < ne0; e++)
                ref += (double)deq[r * ne0 + e] * ((double)aq[c * ne0 + e] * ad[c * nab + e / abs]);
            float acc[NC];
            for (int cc = 0; cc < NC; cc++) acc[cc] = 0.0f;
            for (int lane = 0; lane < 32; lane++) {
                float part[NC];
                for (int cc = 0; cc < NC; cc++) part[cc] = 0.0f;
                run_lane<NC>(bl.type, w + r * row_bytes, ne0, aq, ad, as, lane, part);
                for (int cc = 0; cc < NC; cc++) acc[cc] += part[cc];
            }
            mref = fmax(mref, fabs(ref));
            mdiff = fmax(mdiff, fabs(ref - acc[c]));
            if (!(fabs(ref - acc[c]) <= 1e-3 * fmax(fabs(ref), 1.0)) && r < 2)
                print_message("%s ne0 %lld col %d row %d: lanes %.9g reference %.9g\n", name, (long long)ne0, c, r,
                              acc[c], ref);
        }
        worst = fmax(worst, mref > 0 ? mdiff / mref : mdiff);
    }
    /* K formats, several columns: the lanes over 4 rows at once (k_mmvq_mr) give each row's
     * and column's sum of the one-row lanes bit for bit */
    if (k && NC >= 2) {
        int off = 0;
        for (int r0 = 0; r0 < n_rows; r0 += 4) {
            const int nr = n_rows - r0 < 4 ? n_rows - r0 : 4;
            float accm[4 * NC], accs[4 * NC];
            for (int i = 0; i < 4 * NC; i++) accm[i] = accs[i] = 0.0f;
            for (int lane = 0; lane < 32; lane++) {
                float part[4 * NC];
                for (int i = 0; i < 4 * NC; i++) part[i] = 0.0f;
                if (bl.type == EMBER_TYPE_Q4_K)
                    mmvq4_K_lane_rows<NC, 4>(w + r0 * row_bytes, row_bytes, nr, (int)nb, aq, ad, ne0, lane, part);
                else
                    mmvq6_K_lane_rows<NC, 4>(w + r0 * row_bytes, row_bytes, nr, (int)nb, aq, ad, ne0, lane, part);
                for (int i = 0; i < 4 * NC; i++) accm[i] += part[i];
                for (int r = 0; r < nr; r++) {
                    float one[NC];
                    for (int cc = 0; cc < NC; cc++) one[cc] = 0.0f;
                    run_lane<NC>(bl.type, w + (r0 + r) * row_bytes, ne0, aq, ad, as, lane, one);
                    for (int cc = 0; cc < NC; cc++) accs[r * NC + cc] += one[cc];
                }
            }
            for (int i = 0; i < nr * NC; i++)
                if (memcmp(&accm[i], &accs[i], 4) != 0 && off++ < 3)
                    print_message("%s ne0 %lld rows %d.. output %d: 4 rows a warp %.9g, one row %.9g\n", name,
                                  (long long)ne0, r0, i, accm[i], accs[i]);
        }
        if (off) worst = 1.0;
    }
    print_message("%-5s ne0 %5lld rows %d cols %d: max|diff|/max|ref| %.3g\n", name, (long long)ne0, n_rows, NC, worst);
    free(w);
    free(deq);
    free(aq);
    free(ad);
    free(as);
    free(bl.raw);
    free(bl.deq);
    return worst;
}

void test_lanes_match_dequantized_dot(void **state)
{
    (void)state;
    static const char *const types[] = {"Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q6_K"};
    double worst = 0;
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
        const bool k = types[ti][3] == 'K';
        /* 32-element formats: 20 blocks (Gemma 3's 640), 18 (a tail of 2 for the
         * 8-block step), 64; K formats: 4, 10 (E4B's 2560) and 40 super-blocks
         * (passes of 4, 2 or 1 super-blocks per lane for 1, 3 and 8 columns:
         * whole, partial and several passes a row) */
        const int64_t shapes[3] = {k ? 1024 : 640, k ? 2560 : 576, k ? 10240 : 2048};
        for (int si = 0; si < 3; si++) {
            worst = fmax(worst, run_case<1>(types[ti], shapes[si], 5));
            worst = fmax(worst, run_case<3>(types[ti], shapes[si], 3));
            worst = fmax(worst, run_case<8>(types[ti], shapes[si], 2));   /* K formats: one super-block a pass */
            if (k) worst = fmax(worst, run_case<2>(types[ti], shapes[si], 7));   /* 4 rows a warp: 4 + 3 */
        }
    }
    print_message("all cases: worst max|diff|/max|ref| %.3g\n", worst);
    assert_true(worst <= 1e-5);
}

} /* namespace */

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_lanes_match_dequantized_dot)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
