/*
 * test_quant.c — block formats against gguf-py and against each other.
 *
 * What is asserted, and the source of each expectation:
 *  - dequantization of random blocks with edge values (zero/negative/max/
 *    subnormal fp16 scales, all-0x00 and all-0xFF quant bytes) equals gguf-py
 *    gguf.quants.dequantize bit for bit (goldens: tests/data/quant/TYPE.bin,
 *    made by tests/data/quant/make_goldens.py);
 *  - the reference quantizers of Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 give the bytes of
 *    gguf-py gguf.quants.quantize (which mirrors ggml quantize_row_*_ref) on
 *    inputs with zero, constant, tiny and equal-magnitude-extreme blocks
 *    (goldens: tests/data/quant/quantize_TYPE.bin);
 *  - fp32->fp16 rounds every value to nearest even (IEEE 754 §4.3.1): all
 *    halves round-trip, midpoints between neighbours go to the even one;
 *  - quantize-then-dequantize error within ggml tests/test-quantize-fns.cpp
 *    bounds (synthetic data 0.1 + 2cos(i + offset), 4096 values, metric
 *    sqrt(sum err^2)/n: 0.002; Q3_K 0.004; Q2_K 0.0075), plus per-element
 *    bounds for Q8_0 (|err| <= d/2 + fp16 rounding of d);
 *  - SIMD activation quantizers give the scalar one's bytes exactly;
 *  - every SIMD vec_dot this CPU runs equals the scalar vec_dot within
 *    1e-5 * sum|w_i * a_i| (only float accumulation order differs);
 *  - the dot with quantized activations is close to the float dot of the
 *    dequantized weights with the original activations: within the exact
 *    activation-quantization error sum|w_i|*|a_i - â_i| (+ fp16 rounding of
 *    Q8_1's s, + 1e-5 relative), and within ggml's MAX_DOT_PRODUCT_ERROR
 *    (0.02, 0.04 for 2-3 bit) on its synthetic data.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <sys/wait.h>
#include <unistd.h>

#include "quant/quant.h"

static const uint32_t weight_types[] = {
    EMBER_TYPE_F32, EMBER_TYPE_F16, EMBER_TYPE_BF16, EMBER_TYPE_Q4_0, EMBER_TYPE_Q4_1,
    EMBER_TYPE_Q5_0, EMBER_TYPE_Q5_1, EMBER_TYPE_Q8_0, EMBER_TYPE_IQ4_NL, EMBER_TYPE_Q2_K,
    EMBER_TYPE_Q3_K, EMBER_TYPE_Q4_K, EMBER_TYPE_Q5_K, EMBER_TYPE_Q6_K, EMBER_TYPE_IQ4_XS,
};
#define N_WEIGHT_TYPES (sizeof weight_types / sizeof weight_types[0])

static uint64_t rng_state = 0x9E3779B97F4A7C15ULL;
static uint32_t rnd_u32(void)
{
    rng_state ^= rng_state << 13; rng_state ^= rng_state >> 7; rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}
static float rnd_normal(void)
{
    float u1 = ((float)(rnd_u32() >> 8) + 1.0f) / 16777217.0f, u2 = (float)(rnd_u32() >> 8) / 16777216.0f;
    return sqrtf(-2.0f * logf(u1)) * cosf(6.2831853f * u2);
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    assert_non_null(p);
    return p;
}

static size_t row_bytes(uint32_t t, int64_t n)
{
    uint64_t b = 0;
    assert_true(ember_type_row_bytes(t, (uint64_t)n, &b));
    return (size_t)b;
}

/* ---- fp16 ------------------------------------------------------------------ */

static void test_fp16_rounding(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 0x10000; h++) {
        if ((h & 0x7C00) == 0x7C00 && (h & 0x3FF)) continue; /* NaN */
        float f = ember_fp16_to_fp32((uint16_t)h);
        if (ember_fp32_to_fp16(f) != h) fail_msg("fp16 0x%04x does not round-trip", h);
        /* midpoint to the next half up (same sign): ties go to the even one */
        if ((h & 0x7FFF) < 0x7BFF) {
            float g = ember_fp16_to_fp32((uint16_t)(h + 1));
            double mid = ((double)f + (double)g) / 2;
            float fm = (float)mid; /* exact: fp16 midpoints fit in fp32 */
            uint16_t want = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
            if (ember_fp32_to_fp16(fm) != want) fail_msg("midpoint above 0x%04x -> 0x%04x", h, ember_fp32_to_fp16(fm));
        }
    }
    assert_int_equal(ember_fp32_to_fp16(65520.0f), 0x7C00);
    assert_int_equal(ember_fp32_to_fp16(65519.0f), 0x7BFF);
    assert_int_equal(ember_fp32_to_fp16(-1e-9f), 0x8000);
    assert_true(isnan(ember_fp16_to_fp32(ember_fp32_to_fp16(NAN))));
    assert_int_equal(ember_fp32_to_bf16(1.0f), 0x3F80);
    assert_int_equal(ember_fp32_to_bf16(ember_bf16_to_fp32(0x3F81) + 0x1p-8f), 0x3F82); /* tie -> even */
}

/* ---- goldens ----------------------------------------------------------------- */

typedef struct golden {
    uint32_t type, n_blocks, block_bytes, block_size;
    uint8_t *raw;
    float *expected;
} golden;

static bool golden_load(const char *name, golden *g)
{
    char path[256];
    snprintf(path, sizeof path, "tests/data/quant/%s.bin", name);
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    char magic[4];
    uint32_t h[4];
    bool ok = fread(magic, 1, 4, f) == 4 && !memcmp(magic, "EQG1", 4) && fread(h, 4, 4, f) == 4;
    if (ok) {
        g->type = h[0]; g->n_blocks = h[1]; g->block_bytes = h[2]; g->block_size = h[3];
        g->raw = xmalloc((size_t)g->n_blocks * g->block_bytes);
        g->expected = xmalloc((size_t)g->n_blocks * g->block_size * sizeof(float));
        ok = fread(g->raw, g->block_bytes, g->n_blocks, f) == g->n_blocks &&
             fread(g->expected, sizeof(float) * g->block_size, g->n_blocks, f) == g->n_blocks;
    }
    fclose(f);
    return ok;
}

static void golden_free(golden *g) { free(g->raw); free(g->expected); }

static void test_dequant_goldens(void **state)
{
    (void)state;
    int files = 0;
    for (size_t k = 0; k < N_WEIGHT_TYPES; k++) {
        uint32_t t = weight_types[k];
        if (t == EMBER_TYPE_F32) continue;
        golden g;
        if (!golden_load(ember_type_name(t), &g)) fail_msg("missing golden for %s", ember_type_name(t));
        files++;
        const ember_quant_traits *tr = ember_quant_traits_get(t);
        assert_non_null(tr);
        assert_int_equal(g.type, t);
        assert_int_equal(g.block_bytes, tr->block_bytes);
        assert_int_equal(g.block_size, tr->block_size);
        int64_t n = (int64_t)g.n_blocks * g.block_size;
        float *out = xmalloc((size_t)n * sizeof(float));
        tr->to_float(g.raw, out, n);
        for (int64_t i = 0; i < n; i++) {
            uint32_t a, b;
            memcpy(&a, &out[i], 4);
            memcpy(&b, &g.expected[i], 4);
            if (a != b)
                fail_msg("%s element %lld (block %lld): got %.9g (0x%08x), gguf-py %.9g (0x%08x)", tr->name,
                         (long long)i, (long long)(i / g.block_size), out[i], a, g.expected[i], b);
        }
        free(out);
        golden_free(&g);
    }
    assert_int_equal(files, (int)N_WEIGHT_TYPES - 1);
}

static void test_quantize_goldens(void **state)
{
    (void)state;
    const uint32_t types[] = {EMBER_TYPE_Q4_0, EMBER_TYPE_Q4_1, EMBER_TYPE_Q5_0, EMBER_TYPE_Q5_1, EMBER_TYPE_Q8_0};
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        const ember_quant_traits *tr = ember_quant_traits_get(types[k]);
        char path[256];
        snprintf(path, sizeof path, "tests/data/quant/quantize_%s.bin", tr->name);
        FILE *f = fopen(path, "rb");
        if (!f) fail_msg("missing %s", path);
        char magic[4];
        uint32_t h[4];
        assert_true(fread(magic, 1, 4, f) == 4 && !memcmp(magic, "EQQ1", 4) && fread(h, 4, 4, f) == 4);
        assert_int_equal(h[0], tr->type);
        assert_int_equal(h[2], tr->block_bytes);
        assert_int_equal(h[3], tr->block_size);
        const int64_t n = (int64_t)h[1] * h[3];
        float *x = xmalloc(n * sizeof(float));
        uint8_t *want = xmalloc((size_t)h[1] * h[2]), *got = xmalloc((size_t)h[1] * h[2]);
        assert_true(fread(x, sizeof(float), (size_t)n, f) == (size_t)n);
        assert_true(fread(want, h[2], h[1], f) == h[1]);
        fclose(f);
        tr->from_float_ref(x, got, n);
        for (size_t i = 0; i < (size_t)h[1] * h[2]; i++)
            if (got[i] != want[i])
                fail_msg("%s quantize: block %zu byte %zu: 0x%02x, gguf-py 0x%02x", tr->name, i / h[2], i % h[2],
                         got[i], want[i]);
        free(x); free(want); free(got);
    }
}

/* ---- quantize -> dequantize ---------------------------------------------------- */

static void synthetic(float *x, int64_t n, float offset)
{
    for (int64_t i = 0; i < n; i++) x[i] = 0.1f + 2.0f * cosf((float)i + offset);
}

static double total_error(const float *a, const float *b, int64_t n)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    return sqrt(s) / (double)n;
}

static double quant_error_bound(uint32_t t)
{
    switch (t) {
    case EMBER_TYPE_Q2_K: return 0.0075; /* MAX_QUANTIZATION_TOTAL_ERROR_2BITS */
    case EMBER_TYPE_Q3_K: return 0.0040; /* MAX_QUANTIZATION_TOTAL_ERROR_3BITS */
    default: return 0.002;               /* MAX_QUANTIZATION_TOTAL_ERROR */
    }
}

static void test_quantize_roundtrip(void **state)
{
    (void)state;
    const int64_t n = 32 * 128; /* test-quantize-fns.cpp test_size */
    float *x = xmalloc(n * sizeof(float)), *y = xmalloc(n * sizeof(float));
    void *q = xmalloc(n * 4);
    for (size_t k = 0; k < N_WEIGHT_TYPES; k++) {
        const ember_quant_traits *tr = ember_quant_traits_get(weight_types[k]);
        assert_non_null(tr->from_float_ref);
        synthetic(x, n, 0.0f);
        tr->from_float_ref(x, q, n);
        tr->to_float(q, y, n);
        double e = total_error(x, y, n);
        if (e > quant_error_bound(tr->type))
            fail_msg("%s: total quantization error %g > %g", tr->name, e, quant_error_bound(tr->type));
        if (tr->type == EMBER_TYPE_F32) assert_true(e == 0);
        /* zeros quantize to zeros (zero scales must not produce NaN) */
        memset(x, 0, n * sizeof(float));
        tr->from_float_ref(x, q, n);
        tr->to_float(q, y, n);
        for (int64_t i = 0; i < n; i++)
            if (y[i] != 0) fail_msg("%s: zero input gives %g at %lld", tr->name, y[i], (long long)i);
    }
    /* Q8_0 per element: |x - x̂| <= d/2 + |q|*|d - fp16(d)| with d = amax/127,
     * |d - fp16(d)| <= max(2^-11 d, 2^-25) (half an fp16 ulp, subnormals included) */
    for (int64_t i = 0; i < n; i++) x[i] = rnd_normal() * (i % 64 < 32 ? 1.0f : 1e-3f);
    const ember_quant_traits *q8 = ember_quant_traits_get(EMBER_TYPE_Q8_0);
    q8->from_float_ref(x, q, n);
    q8->to_float(q, y, n);
    for (int64_t b = 0; b < n / 32; b++) {
        float amax = 0;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[b * 32 + j]));
        double d = amax / 127.0, bound = d / 2 * (1 + 1e-6) + 127 * fmax(d * 0x1p-11, 0x1p-25);
        for (int j = 0; j < 32; j++)
            if (fabs((double)x[b * 32 + j] - y[b * 32 + j]) > bound) fail_msg("Q8_0 element error too large");
    }
    free(x); free(y); free(q);
}

/* ---- activation quantizers: SIMD == scalar, bit for bit ------------------------- */

static void test_activation_quantizers(void **state)
{
    (void)state;
    const uint32_t acts[] = {EMBER_TYPE_Q8_0, EMBER_TYPE_Q8_1, EMBER_TYPE_Q8_K};
    const int64_t n = 256 * 9;
    float *x = xmalloc(n * sizeof(float));
    for (int64_t i = 0; i < n; i++) x[i] = rnd_normal() * (i < 256 ? 0.0f : i < 512 ? 1e-6f : 3.0f);
    x[700] = 1000.0f; /* one outlier */
    x[701] = 0.5f / 127 * 1000.0f * 3; /* near a tie */
    for (size_t k = 0; k < 3; k++) {
        const ember_quant_traits *tr = ember_quant_traits_get(acts[k]);
        assert_non_null(tr);
        size_t bytes = row_bytes(acts[k], n);
        uint8_t *ref = xmalloc(bytes), *out = xmalloc(bytes);
        tr->from_float_variant[EMBER_CPU_SCALAR](x, ref, n);
        for (int v = 1; v < EMBER_CPU_VARIANT_COUNT; v++) {
            if (!ember_cpu_variant_supported((ember_cpu_variant)v)) continue;
            assert_non_null(tr->from_float_variant[v]);
            memset(out, 0xAB, bytes);
            tr->from_float_variant[v](x, out, n);
            for (size_t i = 0; i < bytes; i++)
                if (out[i] != ref[i])
                    fail_msg("%s quantizer, variant %s: byte %zu differs (0x%02x vs scalar 0x%02x)", tr->name,
                             ember_cpu_variant_name((ember_cpu_variant)v), i, out[i], ref[i]);
        }
        /* reference (ties away from zero) vs activation (ties to even): dequantized
         * values differ by at most one step */
        float *a = xmalloc(n * sizeof(float)), *b = xmalloc(n * sizeof(float));
        tr->from_float_ref(x, out, n);
        tr->to_float(out, a, n);
        tr->to_float(ref, b, n);
        for (int64_t i = 0; i < n; i++) {
            float step = fabsf(x[i]) > 0 ? fabsf(a[i] - b[i]) : 0;
            float amax = 0;
            int64_t bs = (int64_t)tr->block_size, b0 = i / bs * bs;
            for (int64_t j = b0; j < b0 + bs; j++) amax = fmaxf(amax, fabsf(x[j]));
            if (step > amax / 127 * 1.01f) fail_msg("%s: ref and activation quantizers differ by %g", tr->name, step);
        }
        free(a); free(b); free(ref); free(out);
    }
    free(x);
}

/* ---- dots ------------------------------------------------------------------------ */

typedef struct dot_case {
    const ember_quant_traits *w, *a;
    int64_t n;
    void *wq, *aq;
    float *wf, *af, *aorig;
} dot_case;

/* weights: blocks quantized from random data, then (for the first blocks)
 * the golden edge blocks; activations quantized with the active quantizer */
static void dot_case_make(dot_case *c, uint32_t t, int64_t n)
{
    c->w = ember_quant_traits_get(t);
    c->a = ember_quant_traits_get(c->w->vec_dot_type);
    assert_non_null(c->w);
    assert_non_null(c->a);
    c->n = n;
    c->wf = xmalloc(n * sizeof(float));
    c->af = xmalloc(n * sizeof(float));
    c->aorig = xmalloc(n * sizeof(float));
    for (int64_t i = 0; i < n; i++) c->wf[i] = rnd_normal() * 0.05f + (i % 7 == 0 ? 0.02f : 0.0f);
    for (int64_t i = 0; i < n; i++) c->aorig[i] = rnd_normal() * (1.0f + (float)(i % 97) / 10.0f);
    c->wq = xmalloc(row_bytes(t, n));
    c->aq = xmalloc(row_bytes(c->w->vec_dot_type, n));
    c->w->from_float_ref(c->wf, c->wq, n);
    golden g;
    if (ember_type_block_size(t) > 1 && golden_load(ember_type_name(t), &g)) {
        int64_t nb = n / (int64_t)g.block_size;
        int64_t k = nb / 2 < (int64_t)g.n_blocks ? nb / 2 : (int64_t)g.n_blocks;
        memcpy(c->wq, g.raw, (size_t)k * g.block_bytes);
        golden_free(&g);
    }
    c->w->to_float(c->wq, c->wf, n);
    c->a->from_float(c->aorig, c->aq, n);
    c->a->to_float(c->aq, c->af, n);
}

static void dot_case_free(dot_case *c)
{
    free(c->wf); free(c->af); free(c->aorig); free(c->wq); free(c->aq);
}

static double sum_abs_prod(const float *a, const float *b, int64_t n)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += fabs((double)a[i] * b[i]);
    return s;
}

static void test_simd_dots_match_scalar(void **state)
{
    (void)state;
    const int64_t sizes[] = {256, 512, 768, 2048, 256 * 23};
    int checked = 0;
    for (size_t k = 0; k < N_WEIGHT_TYPES; k++) {
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
            for (int64_t extra = 0; extra < 2; extra++) {
                int64_t bs = (int64_t)ember_type_block_size(weight_types[k]);
                int64_t n = sizes[si] + (bs == 1 ? extra * 37 : bs == 32 ? extra * 32 : 0); /* tails */
                dot_case c;
                dot_case_make(&c, weight_types[k], n);
                float ref = NAN;
                c.w->vec_dot_variant[EMBER_CPU_SCALAR](n, &ref, c.wq, c.aq);
                double tol = 1e-5 * sum_abs_prod(c.wf, c.af, n) + 1e-30;
                for (int v = 1; v < EMBER_CPU_VARIANT_COUNT; v++) {
                    if (!ember_cpu_variant_supported((ember_cpu_variant)v)) continue;
                    assert_non_null(c.w->vec_dot_variant[v]);
                    float got = NAN;
                    c.w->vec_dot_variant[v](n, &got, c.wq, c.aq);
                    if (!(fabs((double)got - ref) <= tol))
                        fail_msg("%s n=%lld variant %s: %.9g vs scalar %.9g (tol %g)", c.w->name, (long long)n,
                                 ember_cpu_variant_name((ember_cpu_variant)v), got, ref, tol);
                    checked++;
                }
                dot_case_free(&c);
            }
        }
    }
    printf("simd dots checked: %d (variant %s active)\n", checked,
           ember_cpu_variant_name(ember_cpu_variant_active()));
}

/* vec_dot_pf (the decode mat-vec's prefetching dot) gives vec_dot's bits,
 * for every prefetch distance, in every variant that has one */
static void test_dot_pf_same_bits(void **state)
{
    (void)state;
    const int64_t sizes[] = {256, 2560, 256 * 23};
    const int32_t pfs[] = {0, 64, 4096, 100000};
    int checked = 0;
    for (size_t k = 0; k < N_WEIGHT_TYPES; k++) {
        const ember_quant_traits *tr = ember_quant_traits_get(weight_types[k]);
        assert_ptr_equal(tr->vec_dot_pf, tr->vec_dot_pf_variant[ember_cpu_variant_active()]);
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
            if (sizes[si] % (int64_t)ember_type_block_size(weight_types[k]) != 0) continue;
            dot_case c;
            dot_case_make(&c, weight_types[k], sizes[si]);
            for (int v = 0; v < EMBER_CPU_VARIANT_COUNT; v++) {
                if (!c.w->vec_dot_pf_variant[v]) continue;
                assert_true(ember_cpu_variant_supported((ember_cpu_variant)v));
                float want = NAN;
                c.w->vec_dot_variant[v](sizes[si], &want, c.wq, c.aq);
                for (size_t p = 0; p < sizeof pfs / sizeof pfs[0]; p++) {
                    float got = NAN;
                    c.w->vec_dot_pf_variant[v](sizes[si], &got, c.wq, c.aq, pfs[p]);
                    if (memcmp(&got, &want, sizeof got) != 0)
                        fail_msg("%s n=%lld variant %s pf %d: %.9g vs vec_dot %.9g", c.w->name, (long long)sizes[si],
                                 ember_cpu_variant_name((ember_cpu_variant)v), pfs[p], got, want);
                    checked++;
                }
            }
            dot_case_free(&c);
        }
    }
    printf("prefetching dots checked: %d\n", checked);
    if (ember_cpu_variant_active() >= EMBER_CPU_AVX2) assert_true(checked > 0);
}

static void test_dot_close_to_float(void **state)
{
    (void)state;
    const int64_t n = 4096;
    for (size_t k = 0; k < N_WEIGHT_TYPES; k++) {
        dot_case c;
        dot_case_make(&c, weight_types[k], n);
        for (int v = 0; v < EMBER_CPU_VARIANT_COUNT; v++) {
            if (!ember_cpu_variant_supported((ember_cpu_variant)v)) continue;
            float got = NAN;
            c.w->vec_dot_variant[v](n, &got, c.wq, c.aq);
            double exact = 0, aerr = 0;
            for (int64_t i = 0; i < n; i++) {
                exact += (double)c.wf[i] * c.aorig[i];
                aerr += fabs((double)c.wf[i]) * fabs((double)c.aorig[i] - c.af[i]);
            }
            double sterm = 0; /* Q8_1 stores s = fp16(d*sum q), not the sum of dequantized values */
            if (c.a->type == EMBER_TYPE_Q8_1) {
                const uint8_t *aq = c.aq, *wq = c.wq;
                for (int64_t b = 0; b < n / 32; b++) {
                    uint16_t s, m;
                    memcpy(&s, aq + b * 36 + 2, 2);
                    memcpy(&m, wq + b * c.w->block_bytes + 2, 2);
                    sterm += fabs(ember_fp16_to_fp32(m)) * fabs(ember_fp16_to_fp32(s)) * 0x1p-10;
                }
            }
            double bound = aerr + sterm + 1e-5 * sum_abs_prod(c.wf, c.af, n);
            if (!(fabs(got - exact) <= bound))
                fail_msg("%s variant %s: dot %.9g vs float %.9g, bound %g", c.w->name,
                         ember_cpu_variant_name((ember_cpu_variant)v), got, exact, bound);
            /* and the activation error itself is small: <= ~0.6 quantization step */
            if (c.a->type != EMBER_TYPE_F32 && !(aerr <= 0.01 * sum_abs_prod(c.wf, c.aorig, n) * 4))
                fail_msg("%s: activation quantization error %g too large", c.w->name, aerr);
        }
        dot_case_free(&c);
    }
    /* ggml test-quantize-fns dot_product_error on its synthetic data */
    const int64_t ts = 32 * 128;
    float *x = xmalloc(ts * sizeof(float)), *y = xmalloc(ts * sizeof(float));
    synthetic(x, ts, 0.0f);
    synthetic(y, ts, 1.0f);
    for (size_t k = 0; k < N_WEIGHT_TYPES; k++) {
        const ember_quant_traits *w = ember_quant_traits_get(weight_types[k]);
        const ember_quant_traits *a = ember_quant_traits_get(w->vec_dot_type);
        void *wq = xmalloc(row_bytes(w->type, ts)), *aq = xmalloc(row_bytes(a->type, ts));
        w->from_float_ref(x, wq, ts);
        a->from_float(y, aq, ts);
        double ref = 0;
        for (int64_t i = 0; i < ts; i++) ref += (double)x[i] * y[i];
        float got;
        w->vec_dot(ts, &got, wq, aq);
        double err = fabs(got - ref) / (double)ts;
        double bound = (w->type == EMBER_TYPE_Q2_K || w->type == EMBER_TYPE_Q3_K) ? 0.04 : 0.02;
        if (err > bound) fail_msg("%s: dot product error %g > %g", w->name, err, bound);
        free(wq); free(aq);
    }
    free(x); free(y);
}

static void test_traits_and_variants(void **state)
{
    (void)state;
    assert_true(ember_cpu_variant_supported(EMBER_CPU_SCALAR));
    assert_true(ember_cpu_variant_supported(ember_cpu_variant_active()));
    assert_null(ember_quant_traits_get(EMBER_TYPE_COUNT));
    assert_null(ember_quant_traits_get(EMBER_TYPE_I32));
    assert_null(ember_quant_traits_get(4)); /* removed Q4_2 */
    for (size_t k = 0; k < N_WEIGHT_TYPES; k++) {
        const ember_quant_traits *tr = ember_quant_traits_get(weight_types[k]);
        assert_non_null(tr);
        assert_int_equal(tr->block_bytes, ember_type_block_bytes(weight_types[k]));
        assert_non_null(tr->vec_dot);
        assert_ptr_equal(tr->vec_dot, tr->vec_dot_variant[ember_cpu_variant_active()]);
        assert_non_null(ember_quant_traits_get(tr->vec_dot_type)->from_float);
    }
    const char *forced = getenv("EMBER_CPU_VARIANT");
    if (forced && *forced)
        printf("EMBER_CPU_VARIANT=%s -> active %s\n", forced, ember_cpu_variant_name(ember_cpu_variant_active()));
}

/* EMBER_CPU_VARIANT is read once per process: check it in fresh processes
 * (this executable re-run with --print-variant). */
static char self_path[4096];

static void run_with_variant(const char *value, char *out, size_t outsz)
{
    int fd[2];
    assert_int_equal(pipe(fd), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(fd[1], 1);
        close(fd[0]);
        if (value) setenv("EMBER_CPU_VARIANT", value, 1); else unsetenv("EMBER_CPU_VARIANT");
        execl(self_path, self_path, "--print-variant", (char *)NULL);
        _exit(127);
    }
    close(fd[1]);
    ssize_t k = read(fd[0], out, outsz - 1);
    out[k > 0 ? k : 0] = 0;
    close(fd[0]);
    int st;
    waitpid(pid, &st, 0);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

static void test_env_override(void **state)
{
    (void)state;
    char buf[64];
    ember_cpu_variant best = EMBER_CPU_SCALAR;
    for (int v = 0; v < EMBER_CPU_VARIANT_COUNT; v++)
        if (ember_cpu_variant_supported((ember_cpu_variant)v)) best = (ember_cpu_variant)v;
    run_with_variant(NULL, buf, sizeof buf);
    assert_string_equal(buf, ember_cpu_variant_name(best));
    for (int v = 0; v < EMBER_CPU_VARIANT_COUNT; v++) {
        const char *name = ember_cpu_variant_name((ember_cpu_variant)v);
        run_with_variant(name, buf, sizeof buf);
        assert_string_equal(buf, ember_cpu_variant_supported((ember_cpu_variant)v) ? name : ember_cpu_variant_name(best));
    }
    run_with_variant("sse9", buf, sizeof buf); /* unknown: best, with a note on stderr */
    assert_string_equal(buf, ember_cpu_variant_name(best));
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "--print-variant")) {
        const ember_quant_traits *t = ember_quant_traits_get(EMBER_TYPE_Q4_K);
        /* the traits row follows the variant too */
        if (t->vec_dot != t->vec_dot_variant[ember_cpu_variant_active()]) return 1;
        printf("%s", ember_cpu_variant_name(ember_cpu_variant_active()));
        return 0;
    }
    ssize_t k = readlink("/proc/self/exe", self_path, sizeof self_path - 1);
    if (k <= 0) return 1;
    self_path[k] = 0;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_traits_and_variants),
        cmocka_unit_test(test_env_override),
        cmocka_unit_test(test_fp16_rounding),
        cmocka_unit_test(test_dequant_goldens),
        cmocka_unit_test(test_quantize_goldens),
        cmocka_unit_test(test_quantize_roundtrip),
        cmocka_unit_test(test_activation_quantizers),
        cmocka_unit_test(test_simd_dots_match_scalar),
        cmocka_unit_test(test_dot_pf_same_bits),
        cmocka_unit_test(test_dot_close_to_float),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
