/*
 * expf_glibc.h — the constants of the expf method the C library uses (glibc
 * >= 2.27 on x86_64), for code that must reproduce its results bit for bit:
 * the CPU backend's multi-query attention (cpu/attn_avx512.c) and the CUDA
 * exact attention (cuda/cuda_attn.cu). Plain macros, usable from C and CUDA C.
 * Must not: hold code; each user writes the few steps in its own SIMD form.
 *
 * Source: ARM optimized-routines' expf (Szabolcs Nagy 2017), adopted by glibc:
 *   z = x * N/ln2 (N = 32), kd = z + 1.5*2^52 (k = round(z) in the low bits),
 *   r = z - (kd - 1.5*2^52), 2^(k/N) = the double with bits TAB[k % N] + (k << 47),
 *   y = (C0 r + C1) r^2 + (C2 r + 1), result = (float)(y * 2^(k/N)),
 *   all in double; NaN gives x + x, x below -0x1.9fe368p6 gives 0.
 * TAB[i] = bits(2^(i/32)) - (i << 47); tests/unit/backend/test_attn_exact_emul.c
 * recomputes it with exp2l and checks these values.
 */
#ifndef EMBER_EXPF_GLIBC_H
#define EMBER_EXPF_GLIBC_H

#define EMBER_EXPF_INV_LN2_N 0x1.71547652b82fep+5   /* 32 / ln 2 */
#define EMBER_EXPF_SHIFT 0x1.8p+52
#define EMBER_EXPF_C0 0x1.c6af84b912394p-20          /* polynomial coefficients, scaled by 1/32^3, 1/32^2, 1/32 */
#define EMBER_EXPF_C1 0x1.ebfce50fac4f3p-13
#define EMBER_EXPF_C2 0x1.62e42ff0c52d6p-6
#define EMBER_EXPF_MIN (-0x1.9fe368p6f)             /* below: 0 */

#define EMBER_EXPF_TAB_INIT { \
    0x3ff0000000000000ull, 0x3fefd9b0d3158574ull, 0x3fefb5586cf9890full, 0x3fef9301d0125b51ull, \
    0x3fef72b83c7d517bull, 0x3fef54873168b9aaull, 0x3fef387a6e756238ull, 0x3fef1e9df51fdee1ull, \
    0x3fef06fe0a31b715ull, 0x3feef1a7373aa9cbull, 0x3feedea64c123422ull, 0x3feece086061892dull, \
    0x3feebfdad5362a27ull, 0x3feeb42b569d4f82ull, 0x3feeab07dd485429ull, 0x3feea47eb03a5585ull, \
    0x3feea09e667f3bcdull, 0x3fee9f75e8ec5f74ull, 0x3feea11473eb0187ull, 0x3feea589994cce13ull, \
    0x3feeace5422aa0dbull, 0x3feeb737b0cdc5e5ull, 0x3feec49182a3f090ull, 0x3feed503b23e255dull, \
    0x3feee89f995ad3adull, 0x3feeff76f2fb5e47ull, 0x3fef199bdd85529cull, 0x3fef3720dcef9069ull, \
    0x3fef5818dcfba487ull, 0x3fef7c97337b9b5full, 0x3fefa4afa2a490daull, 0x3fefd0765b6e4540ull }

#endif
