/* Host emulation of the CUDA backend's CPU-order attention kernels
 * (src/backend/cuda/cuda_attn.cu k_attn_exact and k_attn_exact_tiled,
 * EMBER_CUDA_EXACT=1) against
 * the CPU backend's attention op, bit for bit, without a GPU. The emulation
 * below mirrors the kernel line by line (same operations, same order, same
 * roundings: fmaf where the kernel has __fmaf_rn, f16 rounding where it has
 * __float2half_rn, the shuffle tree of the score reduction written out as
 * the lanes it reads); it is what the kernel computes, so a mismatch here is
 * a kernel that cannot give the CPU's bits. Shapes: Gemma 3 (head_dim 256,
 * 4 heads, 1 KV head, 512-key window), Gemma 4 E4B (512, 8 heads, 2 KV
 * heads), 128 and 64 (the scalar-tail side of mad_f16/scale_f16), < 64
 * queries (the CPU's one-row path, k_attn_exact) and >= 64 (its tiled f32
 * path, k_attn_exact_tiled) over a paged F16 cache with scattered blocks. A second test checks the kernel's expf (glibc's table method,
 * re-derived) against the C library's expf that the CPU op calls, on every
 * 211th float of [-104, 0]: both tests assume glibc >= 2.27 (the CPU
 * backend's expf is libm's). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "backend/backend.h"
#include "backend/expf_glibc.h"
#include "quant/quant.h"
#include "../../common/cpu_backend.h"

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static float frand(float lo, float hi)   /* xorshift64 */
{
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return lo + (hi - lo) * (float)((rng >> 40) * (1.0 / 16777216.0));
}

static long n_exp_calls, n_exp_differ;

/* ---- the kernel, emulated ------------------------------------------------ */

static float f16r(float x) { return ember_fp16_to_fp32(ember_fp32_to_fp16(x)); }
/* the kernel's expf_cpu (glibc's method, cuda_attn.cu); its table built
 * here the way the kernel's constants were made */
static uint64_t exp_tab[32];
static void exp_tab_init(void)
{
    /* the kernels' table (backend/expf_glibc.h) must be this one */
    static const uint64_t shared[32] = EMBER_EXPF_TAB_INIT;
    for (int i = 0; i < 32; i++) {
        const double v = (double)exp2l((long double)i / 32);
        uint64_t u;
        memcpy(&u, &v, 8);
        exp_tab[i] = u - ((uint64_t)i << 47);
        assert_int_equal(shared[i], exp_tab[i]);
    }
}
static float expf_kernel(float x)
{
    if (x != x) return x + x;
    if (x < -0x1.9fe368p6f) return 0.f;
    const double kInvLn2N = 0x1.71547652b82fep+0 * 32, kShift = 0x1.8p+52;
    const double kC0 = 0x1.c6af84b912394p-5 / 32 / 32 / 32, kC1 = 0x1.ebfce50fac4f3p-3 / 32 / 32,
                 kC2 = 0x1.62e42ff0c52d6p-1 / 32;
    volatile double z = kInvLn2N * (double)x;   /* volatile: rounded as the kernel's __dmul_rn */
    double kd = z + kShift;
    uint64_t ki;
    memcpy(&ki, &kd, 8);
    kd = kd - kShift;
    const double r = z - kd;
    const uint64_t sb = exp_tab[ki % 32] + (ki << 47);
    double s;
    memcpy(&s, &sb, 8);
    volatile double r2 = r * r;
    const double p = fma(kC0, r, kC1);
    const double y = fma(p, r2, fma(kC2, r, 1.0));
    return (float)(y * s);
}
static float expf_cpu(float x)
{
    const float e = expf_kernel(x);
    n_exp_calls++;
    if (memcmp(&e, &(float){expf(x)}, 4) != 0) n_exp_differ++;
    return e;
}
static float f16_sum_exact(float y, float p)
{
    volatile float s = y + p, bb = s - y;   /* volatile: no contraction, as the kernel's _rn intrinsics */
    const float err = (y - (s - bb)) + (p - bb);
    if (err == 0.f) return f16r(s);
    uint32_t u;
    float sv = s;
    memcpy(&u, &sv, 4);
    if ((u >> 31) != (signbit(err) ? 1u : 0u)) u -= 1;
    u |= 1;
    memcpy(&sv, &u, 4);
    return f16r(sv);
}

#define CHUNK 64   /* kExactChunk */

/* one CTA (head h, query t); k, v: the cache rows as f16, cell-major
 * [cell][n_head_kv][D]; out[D] */
static void emul_cta(int D, const float *q, int p, const int32_t *bt, int page_size, const uint16_t *kc,
                     const uint16_t *vc, float *out, int h, int n_head, int n_head_kv, float scale, int n_swa)
{
    const int kNp = D & ~127;
    float qs[512], sc[CHUNK], vk[512], M = -INFINITY, S = 0.f;
    const int g = h / (n_head / n_head_kv);
    const int lo = n_swa > 0 ? (p - n_swa + 1 > 0 ? p - n_swa + 1 : 0) : 0;
    for (int d = 0; d < D; d++) qs[d] = f16r(q[d]);
    for (int d = 0; d < D; d++) vk[d] = 0.f;
    for (int j0 = lo; j0 <= p; j0 += CHUNK) {
        const int nk = CHUNK < p + 1 - j0 ? CHUNK : p + 1 - j0;
        for (int kk = 0; kk < nk; kk++) {   /* warp kk % (D/32): one key per warp */
            const int j = j0 + kk;
            const int64_t cell = (int64_t)bt[j / page_size] * page_size + j % page_size;
            const uint16_t *kr = kc + (cell * n_head_kv + g) * D;
            float a[32], tl[16], ul[8], vl[4], xl[2];
            for (int lane = 0; lane < 32; lane++) {
                float p0 = 0.f, p1 = 0.f;
                for (int i = 0; i < D; i += 64) {
                    p0 = fmaf(qs[i + lane], ember_fp16_to_fp32(kr[i + lane]), p0);
                    p1 = fmaf(qs[i + lane + 32], ember_fp16_to_fp32(kr[i + lane + 32]), p1);
                }
                a[lane] = p0 + p1;
            }
            for (int l = 0; l < 16; l++) tl[l] = a[l] + a[l + 16];
            for (int l = 0; l < 8; l++) ul[l] = tl[l + 8] + tl[l];
            for (int l = 0; l < 4; l++) vl[l] = ul[l + 4] + ul[l];
            for (int l = 0; l < 2; l++) xl[l] = vl[l] + vl[l + 2];
            const float r = xl[0] + xl[1];
            sc[kk] = r * scale;
        }
        for (int kk = 0; kk < nk; kk++) {
            const int j = j0 + kk;
            const int64_t cell = (int64_t)bt[j / page_size] * page_size + j % page_size;
            /* every thread sees the same s, so M, S, ms and vs are the same in
             * each: kept once here, the f16 accumulator per thread */
            const float s = sc[kk];
            float ms = 1.f, vs = 1.f;
            const bool up = s > M;
            if (up) {
                const float m_old = M;
                M = s;
                ms = expf_cpu(m_old - M);
            } else {
                vs = expf_cpu(s - M);
            }
            for (int d = 0; d < D; d++) {   /* thread d */
                const float v = ember_fp16_to_fp32(vc[(cell * n_head_kv + g) * D + d]);
                if (up) vk[d] = f16r(vk[d] * (d < kNp ? f16r(ms) : ms));
                vk[d] = d < kNp ? f16_sum_exact(vk[d], v * f16r(vs)) : f16r(fmaf(v, vs, vk[d]));
            }
            S = fmaf(S, ms, vs);
        }
    }
    const float inv = S == 0.f ? 0.f : 1.f / S;
    for (int d = 0; d < D; d++) out[d] = vk[d] * inv;
}

/* k_attn_exact_tiled (>= 64 queries), one CTA; every thread adds the same
 * e_j to its own copy of sum, so the sum is kept once here */
static void emul_cta_tiled(int D, const float *q, int p, const int32_t *bt, int page_size, const uint16_t *kc,
                           const uint16_t *vc, float *out, int h, int n_head, int n_head_kv, float scale, int n_swa)
{
    float qs[512], sc[CHUNK], acc[512];
    const int g = h / (n_head / n_head_kv);
    const int lo = n_swa > 0 ? (p - n_swa + 1 > 0 ? p - n_swa + 1 : 0) : 0;
    for (int d = 0; d < D; d++) qs[d] = q[d];
#define SCORE(j, res)                                                                                       \
    do {                                                                                                    \
        const int64_t cell_ = (int64_t)bt[(j) / page_size] * page_size + (j) % page_size;                   \
        const uint16_t *kr = kc + (cell_ * n_head_kv + g) * D;                                              \
        float P[16], w[8], x[4], y[2];                                                                      \
        for (int l = 0; l < 16; l++) {                                                                      \
            P[l] = 0.f;                                                                                     \
            for (int i = 0; i < D; i += 16) P[l] = fmaf(qs[i + l], ember_fp16_to_fp32(kr[i + l]), P[l]);    \
        }                                                                                                   \
        for (int l = 0; l < 8; l++) w[l] = P[l] + P[l + 8];                                                 \
        for (int l = 0; l < 4; l++) x[l] = w[l] + w[l + 4];                                                 \
        for (int l = 0; l < 2; l++) y[l] = x[l] + x[l + 2];                                                 \
        (res) = (y[0] + y[1]) * scale;                                                                      \
    } while (0)
    float mx = -INFINITY;
    for (int j = lo; j <= p; j++) {   /* warps in turn; the max does not depend on the order */
        float s;
        SCORE(j, s);
        if (s > mx) mx = s;
    }
    float sum = 0.f;
    for (int d = 0; d < D; d++) acc[d] = 0.f;
    for (int j0 = lo; j0 <= p; j0 += CHUNK) {
        const int nk = CHUNK < p + 1 - j0 ? CHUNK : p + 1 - j0;
        for (int kk = 0; kk < nk; kk++) SCORE(j0 + kk, sc[kk]);
        for (int kk = 0; kk < nk; kk++) sc[kk] = expf_cpu(sc[kk] - mx);   /* thread kk */
        for (int kk = 0; kk < nk; kk++) {
            const int j = j0 + kk;
            const int64_t cell = (int64_t)bt[j / page_size] * page_size + j % page_size;
            const float e = sc[kk];
            sum = sum + e;
            for (int d = 0; d < D; d++) acc[d] = fmaf(e, ember_fp16_to_fp32(vc[(cell * n_head_kv + g) * D + d]), acc[d]);
        }
    }
#undef SCORE
    for (int d = 0; d < D; d++) out[d] = acc[d] * (1.f / sum);
}

/* ---- the comparison ------------------------------------------------------- */

typedef struct ecase {
    int n_head, n_head_kv, head_dim, n_swa, n_ctx, n_q, pos0;
} ecase;

static long run_case(const ecase *c)
{
    const int bt = 32, n_blocks = (c->n_ctx + bt - 1) / bt;
    const int64_t n_rows = (int64_t)n_blocks * bt, row = (int64_t)c->n_head_kv * c->head_dim;
    ember_backend_limits lim = {.max_tokens = 128, .max_n_in = 4096, .max_kv_tokens = c->n_ctx,
                                .max_head_dim = c->head_dim};
    ember_backend *cpu = NULL;
    assert_int_equal(test_cpu_backend_new(1, &lim, &cpu), EMBER_OK);
    uint16_t *k = calloc((size_t)(n_rows * row), 2), *v = calloc((size_t)(n_rows * row), 2);
    int32_t *blocks = malloc(sizeof(int32_t) * n_blocks);
    assert_true(k && v && blocks);
    for (int i = 0; i < n_blocks; i++) blocks[i] = n_blocks - 1 - i;   /* reversed: block order matters */
    ember_kv_layer_view view = {.type_k = EMBER_TYPE_F16, .type_v = EMBER_TYPE_F16, .k = k, .v = v,
                                .k_row_bytes = (size_t)row * 2, .v_row_bytes = (size_t)row * 2,
                                .block_tokens = bt, .n_rows = n_rows};
    const int last = c->pos0 + c->n_q - 1;
    float *kf = malloc(sizeof(float) * row), *vf = malloc(sizeof(float) * row);
    assert_true(kf && vf);
    for (int j = 0; j <= last; j++) {
        for (int64_t i = 0; i < row; i++) {
            kf[i] = frand(-1.f, 1.f);
            vf[i] = frand(-1.f, 1.f);
        }
        const int64_t r = (int64_t)blocks[j / bt] * bt + j % bt;
        cpu->ops->kv_store(cpu, &view, kf, vf, &r, 1);
    }
    const size_t nq = (size_t)c->n_q * c->n_head * c->head_dim;
    float *q = malloc(sizeof(float) * nq), *o_cpu = malloc(sizeof(float) * nq), *o_emu = malloc(sizeof(float) * nq);
    ember_attn_query *qs = malloc(sizeof(ember_attn_query) * c->n_q);
    assert_true(q && o_cpu && o_emu && qs);
    for (size_t i = 0; i < nq; i++) q[i] = frand(-2.f, 2.f);
    for (int i = 0; i < c->n_q; i++) {
        qs[i].blocks = blocks;
        qs[i].pos = c->pos0 + i;
    }
    const float scale = 1.0f / sqrtf((float)c->head_dim) * 3.0f;
    const ember_attn_params ap = {.n_head = c->n_head, .n_head_kv = c->n_head_kv, .head_dim_k = c->head_dim,
                                  .head_dim_v = c->head_dim, .kq_scale = scale, .n_swa = c->n_swa};
    cpu->ops->attention(cpu, &view, &ap, q, qs, c->n_q, o_cpu);
    const long e0 = n_exp_differ;
    for (int t = 0; t < c->n_q; t++)
        for (int h = 0; h < c->n_head; h++)
            (c->n_q >= 64 ? emul_cta_tiled : emul_cta)(c->head_dim, q + ((size_t)t * c->n_head + h) * c->head_dim, c->pos0 + t, blocks, bt, k, v,
                     o_emu + ((size_t)t * c->n_head + h) * c->head_dim, h, c->n_head, c->n_head_kv, scale, c->n_swa);
    long bad = 0;
    size_t first = 0;
    for (size_t i = 0; i < nq; i++)
        if (memcmp(&o_cpu[i], &o_emu[i], 4) != 0 && bad++ == 0) first = i;
    printf("# D=%d n_head=%d n_head_kv=%d swa=%d queries %d at pos %d..%d: %ld of %zu differ", c->head_dim,
           c->n_head, c->n_head_kv, c->n_swa, c->n_q, c->pos0, last, bad, nq);
    if (bad)
        printf(" (first [%zu] token %zu head %zu dim %zu: emul %.9g cpu %.9g)", first,
               first / ((size_t)c->n_head * c->head_dim), first / c->head_dim % c->n_head, first % c->head_dim,
               (double)o_emu[first], (double)o_cpu[first]);
    printf("; expf differs from the kernel's in %ld calls\n", n_exp_differ - e0);
    free(q); free(o_cpu); free(o_emu); free(qs); free(kf); free(vf); free(k); free(v); free(blocks);
    ember_backend_free(cpu);
    return bad;
}

static void test_kernel_expf_matches_libm(void **state)
{
    (void)state;
    exp_tab_init();
    long n = 0, bad = 0;
    uint32_t first = 0;
    for (uint32_t u = 0x80000000u; u <= 0xC2D00000u; u += 211) {   /* -0 .. -104 */
        float x;
        memcpy(&x, &u, 4);
        const float a = expf_kernel(x), b = expf(x);
        n++;
        if (memcmp(&a, &b, 4) != 0 && bad++ == 0) first = u;
    }
    const float specials[] = {-INFINITY, -0x1.9fe368p6f, -0x1.9fe366p6f, -1e-30f, 0.f};
    for (size_t i = 0; i < sizeof specials / sizeof specials[0]; i++) {
        const float a = expf_kernel(specials[i]), b = expf(specials[i]);
        n++;
        if (memcmp(&a, &b, 4) != 0 && bad++ == 0) memcpy(&first, &specials[i], 4);
    }
    printf("# kernel expf vs libm expf: %ld of %ld differ\n", bad, n);
    if (bad) {
        float x;
        memcpy(&x, &first, 4);
        fail_msg("kernel expf(%a) = %a, libm %a", (double)x, (double)expf_kernel(x), (double)expf(x));
    }
}

static void test_exact_kernel_emulation_matches_cpu(void **state)
{
    (void)state;
    exp_tab_init();
    const ecase cases[] = {
        {.n_head = 4, .n_head_kv = 1, .head_dim = 256, .n_swa = 512, .n_ctx = 1024, .n_q = 1, .pos0 = 5},    /* Gemma 3 */
        {.n_head = 4, .n_head_kv = 1, .head_dim = 256, .n_swa = 512, .n_ctx = 1024, .n_q = 7, .pos0 = 0},
        {.n_head = 4, .n_head_kv = 1, .head_dim = 256, .n_swa = 512, .n_ctx = 1024, .n_q = 2, .pos0 = 700},  /* window */
        {.n_head = 8, .n_head_kv = 2, .head_dim = 512, .n_ctx = 512, .n_q = 3, .pos0 = 300},                 /* E4B */
        {.n_head = 8, .n_head_kv = 2, .head_dim = 256, .n_swa = 512, .n_ctx = 1024, .n_q = 1, .pos0 = 600},
        {.n_head = 4, .n_head_kv = 2, .head_dim = 128, .n_ctx = 256, .n_q = 5, .pos0 = 100},
        {.n_head = 4, .n_head_kv = 2, .head_dim = 64, .n_ctx = 256, .n_q = 5, .pos0 = 150},   /* mad_f16's scalar tail */
        /* >= 64 queries: the CPU's tiled f32 path, k_attn_exact_tiled */
        {.n_head = 4, .n_head_kv = 1, .head_dim = 256, .n_swa = 512, .n_ctx = 1024, .n_q = 64, .pos0 = 0},
        {.n_head = 8, .n_head_kv = 2, .head_dim = 512, .n_ctx = 512, .n_q = 65, .pos0 = 30},
        {.n_head = 4, .n_head_kv = 1, .head_dim = 256, .n_swa = 512, .n_ctx = 1024, .n_q = 64, .pos0 = 500},
    };
    long bad = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) bad += run_case(&cases[i]);
    printf("# expf: %ld of %ld softmax exponentials differ between libm expf and the kernel's\n",
           n_exp_differ, n_exp_calls);
    if (bad) fail_msg("%ld outputs of the emulated CPU-order kernel differ from the CPU op", bad);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kernel_expf_matches_libm),
        cmocka_unit_test(test_exact_kernel_emulation_matches_cpu),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
