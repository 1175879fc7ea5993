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
 * The tensor-core Q4_K and Q6_K kernels (k_mmvq_tc4_K / k_mmvq_tc6_K, their
 * tc4_K_* / tc6_K_* lane functions, Q6_K's shared-memory staging copies)
 * run here with emulated mmas (m16n8k32, m16n8k16) built from the PTX ISA's
 * fragment layouts: what it checks is our arithmetic given those layouts;
 * the layouts themselves are checked by test_cuda_q8 on a GPU.
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

/* ---- the tensor-core Q4_K and Q6_K kernels (k_mmvq_tc4_K, k_mmvq_tc6_K) -- */

/* Host emulation of mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 with C
 * = 0 over the 32 lanes' fragments, from the PTX ISA's fragment layouts
 * (cuda_mmvq_lane.cuh's notes: lane = 4 gid + tig; byte j of a register is
 * element k = 4tig + j or 16 + 4tig + j). Also asserts that the lanes'
 * fragments cover every element of A and B exactly once. */
void mma_host(const tc_frag_a *a, const tc_frag_b *b, tc_frag_d *d)
{
    int A[16][32], B[32][8], na[16][32] = {}, nbm[32][8] = {};
    for (int lane = 0; lane < 32; lane++) {
        const int gid = lane >> 2, tig = lane & 3;
        for (int j = 0; j < 4; j++) {
            const int k0 = 4 * tig + j, k1 = 16 + 4 * tig + j;
            A[gid][k0] = (int8_t)(uint8_t)(a[lane].r[0] >> (8 * j));
            A[gid + 8][k0] = (int8_t)(uint8_t)(a[lane].r[1] >> (8 * j));
            A[gid][k1] = (int8_t)(uint8_t)(a[lane].r[2] >> (8 * j));
            A[gid + 8][k1] = (int8_t)(uint8_t)(a[lane].r[3] >> (8 * j));
            na[gid][k0]++;
            na[gid + 8][k0]++;
            na[gid][k1]++;
            na[gid + 8][k1]++;
            B[k0][gid] = (int8_t)(uint8_t)(b[lane].r[0] >> (8 * j));
            B[k1][gid] = (int8_t)(uint8_t)(b[lane].r[1] >> (8 * j));
            nbm[k0][gid]++;
            nbm[k1][gid]++;
        }
    }
    for (int m = 0; m < 16; m++)
        for (int k = 0; k < 32; k++) assert_int_equal(na[m][k], 1);
    for (int k = 0; k < 32; k++)
        for (int c = 0; c < 8; c++) assert_int_equal(nbm[k][c], 1);
    for (int lane = 0; lane < 32; lane++)
        for (int i = 0; i < 4; i++) {
            const int m = tc_d_row(lane, i), c = tc_d_col(lane, i);
            int v = 0;
            for (int k = 0; k < 32; k++) v += A[m][k] * B[k][c];
            d[lane].r[i] = v;
        }
}

/* Host emulation of mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 with C
 * = 0 over the 32 lanes' fragments, from the PTX ISA's fragment layouts
 * (9.7.14.5.9, cuda_mmvq_lane.cuh's Q6_K notes: byte j of a[0] is
 * A[gid][4tig + j], of a[1] A[gid + 8][4tig + j], of b[0] B[4tig + j][gid];
 * D as m16n8k32). Also asserts that the lanes' fragments cover every element
 * of A and B exactly once. */
void mma_host16(const tc_frag_a16 *a, const tc_frag_b16 *b, tc_frag_d *d)
{
    int A[16][16], B[16][8], na[16][16] = {}, nbm[16][8] = {};
    for (int lane = 0; lane < 32; lane++) {
        const int gid = lane >> 2, tig = lane & 3;
        for (int j = 0; j < 4; j++) {
            const int k = 4 * tig + j;
            A[gid][k] = (int8_t)(uint8_t)(a[lane].r[0] >> (8 * j));
            A[gid + 8][k] = (int8_t)(uint8_t)(a[lane].r[1] >> (8 * j));
            na[gid][k]++;
            na[gid + 8][k]++;
            B[k][gid] = (int8_t)(uint8_t)(b[lane].r[0] >> (8 * j));
            nbm[k][gid]++;
        }
    }
    for (int m = 0; m < 16; m++)
        for (int k = 0; k < 16; k++) assert_int_equal(na[m][k], 1);
    for (int k = 0; k < 16; k++)
        for (int c = 0; c < 8; c++) assert_int_equal(nbm[k][c], 1);
    for (int lane = 0; lane < 32; lane++)
        for (int i = 0; i < 4; i++) {
            const int m = tc_d_row(lane, i), c = tc_d_col(lane, i);
            int v = 0;
            for (int k = 0; k < 16; k++) v += A[m][k] * B[k][c];
            d[lane].r[i] = v;
        }
}

/* One warp's pass of k_mmvq_tc4_K: super-blocks b0 + kTcWarps u (u <
 * kTcPass, b < nb), the 32 lanes composing the tc4_K_* steps around
 * mma_host for the mma, into each lane's acc[4] */
struct tc4_fmt {
    static constexpr const char *name = "Q4_K";
    static void pass(const uint8_t *, size_t, int, int nb, int b0, const tc_lane *p, float (*acc)[4])
    {
        for (int u = 0; u < kTcPass; u++) {
            const int b = b0 + kTcWarps * u;
            if (b >= nb) break;
            static tc4_K_w wv[32];
            static tc_x8 xv[32];
            int isum[32][4] = {}, msum[32][4] = {};
            for (int lane = 0; lane < 32; lane++) {
                tc4_K_load_w(p[lane], b, lane & 3, wv[lane]);
                tc_load_x(p[lane], b, lane & 3, xv[lane]);
            }
            for (int s = 0; s < 8; s++) {
                tc_frag_a fa[32], ones[32];
                tc_frag_b fb[32];
                tc_frag_d dot[32], sum[32];
                for (int lane = 0; lane < 32; lane++) {
                    fa[lane] = tc4_K_frag_a(wv[lane], s);
                    fb[lane] = tc_frag_b_of(xv[lane], s);
                    ones[lane] = tc_frag_ones();
                }
                mma_host(fa, fb, dot);
                mma_host(ones, fb, sum);
                for (int lane = 0; lane < 32; lane++)
                    tc4_K_sub_step(wv[lane], s, dot[lane], sum[lane], isum[lane], msum[lane]);
            }
            for (int lane = 0; lane < 32; lane++)
                tc4_K_block_step(wv[lane], p[lane].da0[b], p[lane].da1[b], isum[lane], msum[lane], acc[lane]);
        }
    }
};

/* One warp's pass of k_mmvq_tc6_K: the pass's blocks copied to a stage by
 * tc6_K_piece's copies (the stage filled with 0xA5 first: a lane that read
 * a byte no copy wrote would see it; each copy's source asserted inside the
 * weight, its tail zero-filled as cp.async's), then the 32 lanes composing
 * the tc6_K_* steps on the staged blocks around mma_host16 */
const uint8_t *g_w_lo, *g_w_hi; /* the case's weight bytes, for the copies' bounds */

struct tc6_fmt {
    static constexpr const char *name = "Q6_K";
    static void pass(const uint8_t *tile, size_t row_bytes, int nr, int nb, int b0, const tc_lane *p, float (*acc)[4])
    {
        alignas(16) static uint8_t stage[kTcPass * kTcRows * kTc6Stride];
        memset(stage, 0xA5, sizeof stage);
        for (int i = 0; i < kTc6Pieces; i++) {
            const uint8_t *src;
            unsigned n;
            int dst;
            if (!tc6_K_piece(i, tile, row_bytes, nr, nb, b0, src, n, dst)) continue;
            assert_true(((uintptr_t)src & 15) == 0 && n >= 1 && n <= 16 && dst % 16 == 0);
            assert_true(src >= g_w_lo && src + n <= g_w_hi);
            assert_true(dst >= 0 && dst + 16 <= (int)sizeof stage);
            memcpy(stage + dst, src, n);
            memset(stage + dst + n, 0, 16 - n);
        }
        for (int u = 0; u < kTcPass; u++) {
            const int b = b0 + kTcWarps * u;
            if (b >= nb) break;
            static tc6_K_w wv[32];
            static tc_x16 xv[32];
            int isum[32][4] = {};
            for (int lane = 0; lane < 32; lane++) {
                const uint8_t *s0 = tc6_K_staged(stage, u, p[lane].r0, p[lane].row0 + (size_t)b * kTc6Bytes);
                const uint8_t *s1 = tc6_K_staged(stage, u, p[lane].r1, p[lane].row1 + (size_t)b * kTc6Bytes);
                /* the block and the words read around it stay in its slot (14 lines copied) */
                const uint8_t *const sp[2] = {s0, s1};
                for (int k = 0; k < 2; k++) {
                    const uint8_t *slot = stage + ((sp[k] - stage) / kTc6Stride) * kTc6Stride;
                    assert_true(sp[k] + kTc6Bytes <= slot + 16 * kTc6Lines);
                }
                tc6_K_load_w(s0, s1, lane & 3, wv[lane]);
                tc_load_x16(p[lane], b, lane & 3, xv[lane]);
            }
            for (int s = 0; s < 16; s++) {
                tc_frag_a16 fa[32];
                tc_frag_b16 fb[32];
                tc_frag_d dot[32];
                for (int lane = 0; lane < 32; lane++) {
                    fa[lane] = tc6_K_frag_a(wv[lane], s);
                    fb[lane] = tc_frag_b16_of(xv[lane], s);
                }
                mma_host16(fa, fb, dot);
                for (int lane = 0; lane < 32; lane++) tc6_K_sub_step(wv[lane], s, dot[lane], isum[lane]);
            }
            for (int lane = 0; lane < 32; lane++)
                tc6_K_block_step(wv[lane], p[lane].da0[b], p[lane].da1[b], isum[lane], acc[lane]);
        }
    }
};

/* k_mmvq_tc4_K / k_mmvq_tc6_K on the host: their CTAs (tiles of 16 rows),
 * the kTcWarps warps of each (passes of super-blocks b0 = warp, warp +
 * kTcWarps kTcPass, ...: the kernels' order per lane), F's pass for each,
 * then the warps' partial sums added in warp order and stored by
 * tc_out_of's threads into y [nc][n_rows]. Every lane's rows are asserted
 * inside the tile's rows and its activations inside the nc columns.
 * Returns the outputs stored. */
template <class F>
long tc_host(const uint8_t *w, size_t row_bytes, int n_rows, const int8_t *aq, const float *ad, int64_t n, int nc,
             float *y)
{
    const int nb = (int)(n / 256);
    long stored = 0;
    for (int row0 = 0; row0 < n_rows; row0 += kTcRows) {
        const int nr = n_rows - row0 < kTcRows ? n_rows - row0 : kTcRows;
        const uint8_t *tile = w + (size_t)row0 * row_bytes;
        static float part[kTcWarps][kTcRows * kTcCols];
        for (int wp = 0; wp < kTcWarps; wp++) {
            tc_lane p[32];
            float acc[32][4] = {};
            for (int lane = 0; lane < 32; lane++) {
                p[lane] = tc_lane_of(tile, row_bytes, nr, aq, ad, n, nc, lane);
                assert_true(p[lane].row0 >= tile && p[lane].row1 + row_bytes <= tile + (size_t)nr * row_bytes);
                assert_true(p[lane].row0 == tile + (size_t)p[lane].r0 * row_bytes &&
                            p[lane].row1 == tile + (size_t)p[lane].r1 * row_bytes);
                assert_true(p[lane].xq >= aq && p[lane].xq + n <= aq + (int64_t)nc * n);
                assert_true(p[lane].da0 >= ad && p[lane].da1 + nb <= ad + (int64_t)nc * nb);
            }
            for (int b0 = wp; b0 < nb; b0 += kTcWarps * kTcPass) F::pass(tile, row_bytes, nr, nb, b0, p, acc);
            for (int lane = 0; lane < 32; lane++)
                for (int i = 0; i < 4; i++) part[wp][tc_d_row(lane, i) * kTcCols + tc_d_col(lane, i)] = acc[lane][i];
        }
        for (int t = 0; t < kTcWarps * 32; t++) {
            int row, col;
            if (!tc_out_of(t, nr, nc, row, col)) continue;
            float v = part[0][row * kTcCols + col];
            for (int k = 1; k < kTcWarps; k++) v += part[k][row * kTcCols + col];
            y[(int64_t)col * n_rows + row0 + row] = v;
            stored++;
        }
    }
    return stored;
}

/* One tensor-core case: n_rows rows of n elements of F's golden blocks,
 * nc columns of random Q8_K activations (as run_case), against the double
 * dot of the dequantized blocks. Every output must be stored once (y starts
 * NaN; tc_host counts the stores), within 1e-5 of the column's max |ref|.
 * Returns the worst |diff| / max |ref| over the columns. */
template <class F> double run_tc_case(int64_t n, int n_rows, int nc)
{
    blocks bl;
    load(F::name, &bl);
    const int64_t nb = n / 256;
    const size_t row_bytes = (size_t)nb * bl.block_bytes;
    uint8_t *w = (uint8_t *)aligned_alloc(16, (row_bytes * n_rows + 15) & ~(size_t)15);
    float *deq = (float *)malloc(sizeof(float) * n * n_rows);
    int8_t *aq = (int8_t *)aligned_alloc(16, (size_t)(n * nc + 15) & ~(size_t)15);
    float *ad = (float *)malloc(sizeof(float) * nb * nc), *y = (float *)malloc(sizeof(float) * n_rows * nc);
    assert_non_null(w);
    assert_non_null(deq);
    assert_non_null(aq);
    assert_non_null(ad);
    assert_non_null(y);
    for (int r = 0; r < n_rows; r++)
        for (int64_t j = 0; j < nb; j++) {
            const uint32_t pick = rnd() % bl.n_blocks;
            memcpy(w + r * row_bytes + j * bl.block_bytes, bl.raw + (size_t)pick * bl.block_bytes, bl.block_bytes);
            memcpy(deq + r * n + j * 256, bl.deq + (size_t)pick * 256, sizeof(float) * 256);
        }
    /* -128 included: Q8_K's quantizer can produce it */
    for (int64_t i = 0; i < n * nc; i++) aq[i] = (int8_t)((int)(rnd() % 256) - 128);
    for (int64_t i = 0; i < nb * nc; i++) ad[i] = 1e-3f * (float)(1 + rnd() % 1000);
    memset(y, 0xFF, sizeof(float) * n_rows * nc);
    g_w_lo = w;
    g_w_hi = w + row_bytes * n_rows;
    const long stored = tc_host<F>(w, row_bytes, n_rows, aq, ad, n, nc, y);
    assert_int_equal(stored, (long)n_rows * nc);
    double worst = 0;
    for (int c = 0; c < nc; c++) {
        double mref = 0, mdiff = 0;
        for (int r = 0; r < n_rows; r++) {
            double ref = 0;
            for (int64_t e = 0; e < n; e++) ref += (double)deq[r * n + e] * ((double)aq[c * n + e] * ad[c * nb + e / 256]);
            const float g = y[(int64_t)c * n_rows + r];
            mref = fmax(mref, fabs(ref));
            mdiff = fmax(mdiff, isnan(g) ? INFINITY : fabs(ref - g));
            if (!(fabs(ref - g) <= 1e-3 * fmax(fabs(ref), 1.0)))
                print_message("tc %s n %lld col %d row %d: tiles %.9g reference %.9g\n", F::name, (long long)n, c, r, g,
                              ref);
        }
        worst = fmax(worst, mref > 0 ? mdiff / mref : mdiff);
    }
    print_message("%-5s tc n %5lld rows %d cols %d: max|diff|/max|ref| %.3g\n", F::name, (long long)n, n_rows, nc, worst);
    free(w);
    free(deq);
    free(aq);
    free(ad);
    free(y);
    free(bl.raw);
    free(bl.deq);
    return worst;
}

/* k_mmvq_tc4_K's and k_mmvq_tc6_K's arithmetic: 2, 5 and 8 columns
 * (columns past nc repeat the last one and are not stored), 16 rows (one
 * whole tile) and 21 (a tile of 16 and one of 5: rows past the weight
 * repeat its last row and are not stored), rows of 4, 10 and 40
 * super-blocks (fewer super-blocks than warps x passes, a partial pass,
 * several passes; Q6_K rows of 840, 2100 and 8400 bytes: blocks at every
 * 2-byte offset mod 16, 4-byte aligned or not) */
void test_tc_lanes_match_dequantized_dot(void **state)
{
    (void)state;
    double worst = 0;
    static const int64_t shapes[3] = {1024, 2560, 10240};
    static const int row_counts[2] = {16, 21}, col_counts[3] = {2, 5, 8};
    for (int si = 0; si < 3; si++)
        for (int ri = 0; ri < 2; ri++)
            for (int ci = 0; ci < 3; ci++) {
                worst = fmax(worst, run_tc_case<tc4_fmt>(shapes[si], row_counts[ri], col_counts[ci]));
                worst = fmax(worst, run_tc_case<tc6_fmt>(shapes[si], row_counts[ri], col_counts[ci]));
            }
    print_message("tensor-core cases: worst max|diff|/max|ref| %.3g\n", worst);
    assert_true(worst <= 1e-5);
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
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_lanes_match_dequantized_dot),
                                       cmocka_unit_test(test_tc_lanes_match_dequantized_dot)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
