/*
 * simd_avx2.c — the AVX2 (+FMA, F16C) variant of every vec_dot and of the
 * Q8_0/Q8_1/Q8_K activation quantizers.
 *
 * Owns: exporting the 256-bit kernels of simd256.h under their _avx2 names.
 * Compiled with -mavx2 -mfma -mf16c (CMake, by file name); only called after
 * quant.c has checked CPUID, so nothing here may run at load time.
 * Must not: be called on a CPU without AVX2/FMA/F16C.
 */
#include "quant/simd256.h"

#define EXPORT_DOT(t) \
    void ember_vec_dot_##t##_avx2(int64_t n, float *restrict s, const void *restrict x, const void *restrict y) \
    { dot_##t##_256(n, s, x, y); }
EXPORT_DOT(f32) EXPORT_DOT(f16) EXPORT_DOT(bf16)
EXPORT_DOT(q4_0) EXPORT_DOT(q4_1) EXPORT_DOT(q5_0) EXPORT_DOT(q5_1) EXPORT_DOT(q8_0) EXPORT_DOT(iq4_nl)
EXPORT_DOT(q2_K) EXPORT_DOT(q3_K) EXPORT_DOT(q4_K) EXPORT_DOT(q5_K) EXPORT_DOT(q6_K) EXPORT_DOT(iq4_xs)

void ember_vec_dot_pf_q4_K_avx2(int64_t n, float *restrict s, const void *restrict x, const void *restrict y, int32_t pf)
{ dot_q4_K_256_pf(n, s, x, y, pf); }
void ember_vec_dot_pf_q6_K_avx2(int64_t n, float *restrict s, const void *restrict x, const void *restrict y, int32_t pf)
{ dot_q6_K_256_pf(n, s, x, y, pf); }

void ember_quantize_q8_0_avx2(const float *restrict x, void *restrict y, int64_t n) { quantize_q8_0_256(x, y, n); }
void ember_quantize_q8_1_avx2(const float *restrict x, void *restrict y, int64_t n) { quantize_q8_1_256(x, y, n); }
void ember_quantize_q8_K_avx2(const float *restrict x, void *restrict y, int64_t n) { quantize_q8_K_256(x, y, n); }
