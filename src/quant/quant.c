/*
 * quant.c — the traits table and the choice of CPU variant.
 *
 * Owns: one row per block format (geometry from base/types.h, kernels from
 * ref_*.c and simd_*.c), CPUID/XGETBV detection, and the EMBER_CPU_VARIANT
 * override. Sources: Intel SDM vol. 2A (CPUID leaf 7 bits, XGETBV XCR0 bits
 * 1-2 for YMM, 5-7 for ZMM/opmask state).
 * Must not: contain kernels.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "quant/blocks.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define EMBER_X86 1
#endif

const int8_t ember_kvalues_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                        1, 13, 25, 38, 53, 69, 89, 113};

/* ---- CPU detection ------------------------------------------------------ */

static bool cpu_has[EMBER_CPU_VARIANT_COUNT];
static ember_cpu_variant cpu_active;
static pthread_once_t cpu_once = PTHREAD_ONCE_INIT;

#ifdef EMBER_X86
static uint64_t xgetbv0(void)
{
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}
#endif

static void cpu_detect(void)
{
    cpu_has[EMBER_CPU_SCALAR] = true;
#ifdef EMBER_X86
    unsigned a, b, c, d;
    if (__get_cpuid(1, &a, &b, &c, &d)) {
        bool osxsave = c & (1u << 27), avx = c & (1u << 28), fma = c & (1u << 12),
             f16c = c & (1u << 29);
        uint64_t xcr0 = osxsave ? xgetbv0() : 0;
        bool ymm_os = (xcr0 & 0x6) == 0x6, zmm_os = (xcr0 & 0xE6) == 0xE6;
        unsigned b7 = 0, c7 = 0;
        if (__get_cpuid_max(0, NULL) >= 7) { __cpuid_count(7, 0, a, b7, c7, d); }
        bool avx2 = b7 & (1u << 5);
        bool f512 = b7 & (1u << 16), dq = b7 & (1u << 17), bw = b7 & (1u << 30),
             vl = b7 & (1u << 31), vnni = c7 & (1u << 11);
        cpu_has[EMBER_CPU_AVX2] = avx && avx2 && fma && f16c && ymm_os;
        cpu_has[EMBER_CPU_AVX512] = cpu_has[EMBER_CPU_AVX2] && f512 && dq && bw && vl && vnni && zmm_os;
    }
#endif
    cpu_active = cpu_has[EMBER_CPU_AVX512] ? EMBER_CPU_AVX512
               : cpu_has[EMBER_CPU_AVX2]   ? EMBER_CPU_AVX2 : EMBER_CPU_SCALAR;
    const char *env = getenv("EMBER_CPU_VARIANT");
    if (env && *env) {
        int want = -1;
        for (int v = 0; v < EMBER_CPU_VARIANT_COUNT; v++)
            if (!strcmp(env, ember_cpu_variant_name((ember_cpu_variant)v))) want = v;
        if (want < 0)
            fprintf(stderr, "ember: EMBER_CPU_VARIANT=%s unknown (scalar|avx2|avx512); using %s\n",
                    env, ember_cpu_variant_name(cpu_active));
        else if (!cpu_has[want])
            fprintf(stderr, "ember: EMBER_CPU_VARIANT=%s not supported by this CPU; using %s\n",
                    env, ember_cpu_variant_name(cpu_active));
        else
            cpu_active = (ember_cpu_variant)want;
    }
}

ember_cpu_variant ember_cpu_variant_active(void)
{
    pthread_once(&cpu_once, cpu_detect);
    return cpu_active;
}

bool ember_cpu_variant_supported(ember_cpu_variant v)
{
    pthread_once(&cpu_once, cpu_detect);
    return (unsigned)v < EMBER_CPU_VARIANT_COUNT && cpu_has[v];
}

const char *ember_cpu_variant_name(ember_cpu_variant v)
{
    switch (v) {
    case EMBER_CPU_SCALAR: return "scalar";
    case EMBER_CPU_AVX2: return "avx2";
    case EMBER_CPU_AVX512: return "avx512";
    default: return "?";
    }
}

/* ---- the table ---------------------------------------------------------- */

#define DOTS(t) .vec_dot_variant = {ember_vec_dot_##t##_scalar, ember_vec_dot_##t##_avx2, \
                                    ember_vec_dot_##t##_avx512}
#define DOTS_PF(t) .vec_dot_pf_variant = {NULL, ember_vec_dot_pf_##t##_avx2, ember_vec_dot_pf_##t##_avx512}
#define REF(t) .to_float = ember_dequantize_##t, .from_float_ref = ember_quantize_##t##_ref, \
               .from_float_variant = {ember_quantize_##t##_ref, ember_quantize_##t##_ref, \
                                      ember_quantize_##t##_ref}
#define ACT(t) .to_float = ember_dequantize_##t, .from_float_ref = ember_quantize_##t##_ref, \
               .from_float_variant = {ember_quantize_##t##_scalar, ember_quantize_##t##_avx2, \
                                      ember_quantize_##t##_avx512}

static ember_quant_traits table[EMBER_TYPE_COUNT] = {
    [EMBER_TYPE_F32] = {REF(f32), .vec_dot_type = EMBER_TYPE_F32, DOTS(f32)},
    [EMBER_TYPE_F16] = {REF(f16), .vec_dot_type = EMBER_TYPE_F32, DOTS(f16)},
    [EMBER_TYPE_BF16] = {REF(bf16), .vec_dot_type = EMBER_TYPE_F32, DOTS(bf16)},
    [EMBER_TYPE_Q4_0] = {REF(q4_0), .vec_dot_type = EMBER_TYPE_Q8_0, DOTS(q4_0)},
    [EMBER_TYPE_Q4_1] = {REF(q4_1), .vec_dot_type = EMBER_TYPE_Q8_1, DOTS(q4_1)},
    [EMBER_TYPE_Q5_0] = {REF(q5_0), .vec_dot_type = EMBER_TYPE_Q8_0, DOTS(q5_0)},
    [EMBER_TYPE_Q5_1] = {REF(q5_1), .vec_dot_type = EMBER_TYPE_Q8_1, DOTS(q5_1)},
    [EMBER_TYPE_Q8_0] = {ACT(q8_0), .vec_dot_type = EMBER_TYPE_Q8_0, DOTS(q8_0)},
    [EMBER_TYPE_Q8_1] = {ACT(q8_1), .vec_dot_type = EMBER_TYPE_Q8_1},
    [EMBER_TYPE_IQ4_NL] = {REF(iq4_nl), .vec_dot_type = EMBER_TYPE_Q8_0, DOTS(iq4_nl)},
    [EMBER_TYPE_Q2_K] = {REF(q2_K), .vec_dot_type = EMBER_TYPE_Q8_K, DOTS(q2_K)},
    [EMBER_TYPE_Q3_K] = {REF(q3_K), .vec_dot_type = EMBER_TYPE_Q8_K, DOTS(q3_K)},
    [EMBER_TYPE_Q4_K] = {REF(q4_K), .vec_dot_type = EMBER_TYPE_Q8_K, DOTS(q4_K), DOTS_PF(q4_K)},
    [EMBER_TYPE_Q5_K] = {REF(q5_K), .vec_dot_type = EMBER_TYPE_Q8_K, DOTS(q5_K)},
    [EMBER_TYPE_Q6_K] = {REF(q6_K), .vec_dot_type = EMBER_TYPE_Q8_K, DOTS(q6_K), DOTS_PF(q6_K)},
    [EMBER_TYPE_Q8_K] = {ACT(q8_K), .vec_dot_type = EMBER_TYPE_Q8_K},
    [EMBER_TYPE_IQ4_XS] = {REF(iq4_xs), .vec_dot_type = EMBER_TYPE_Q8_K, DOTS(iq4_xs)},
};

float ember_fp16_table[65536];

static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void table_init(void)
{
    for (uint32_t h = 0; h < 65536; h++) ember_fp16_table[h] = ember_fp16_to_fp32((uint16_t)h);
    ember_cpu_variant v = ember_cpu_variant_active();
    for (int t = 0; t < EMBER_TYPE_COUNT; t++) {
        ember_quant_traits *q = &table[t];
        if (!q->to_float) continue;
        q->type = (ember_type)t;
        q->name = ember_type_name((uint32_t)t);
        q->block_size = ember_type_block_size((uint32_t)t);
        q->block_bytes = ember_type_block_bytes((uint32_t)t);
        for (int i = 0; i < EMBER_CPU_VARIANT_COUNT; i++)
            if (!cpu_has[i]) { q->vec_dot_variant[i] = NULL; q->from_float_variant[i] = NULL; q->vec_dot_pf_variant[i] = NULL; }
        q->vec_dot = q->vec_dot_variant[v];
        q->vec_dot_pf = q->vec_dot_pf_variant[v];
        q->from_float = q->from_float_variant[v];
    }
}

const ember_quant_traits *ember_quant_traits_get(uint32_t t)
{
    if (t >= EMBER_TYPE_COUNT) return NULL;
    pthread_once(&table_once, table_init);
    return table[t].to_float ? &table[t] : NULL;
}
