/*
 * quant.h — one traits row per ggml block format.
 *
 * Owns: dequantize (scalar reference), quantize from F32 (reference, plus a
 * fast SIMD quantizer for the activation formats Q8_0/Q8_1/Q8_K), and the dot
 * product of a weight row with an activation row quantized to the format's
 * `vec_dot_type`, in scalar, AVX2 and AVX-512 variants picked at run time by
 * CPUID. Block layouts: ggml-common.h; reference math: ggml-quants.c and
 * gguf-py gguf/quants.py (the test oracle).
 * Must not: know about tensors, models or threads.
 *
 * Activation formats (vec_dot_type), as in ggml's CPU backend:
 *   Q4_0, Q5_0, Q8_0, IQ4_NL          x Q8_0
 *   Q4_1, Q5_1                        x Q8_1
 *   Q2_K..Q6_K, IQ4_XS                x Q8_K
 *   F32, F16, BF16                    x F32   (ember's choice: activations
 *       stay F32, weights are widened in registers; exact up to float
 *       rounding, and no activation conversion on the hot path)
 *   Q8_1, Q8_K are activation-only formats (no vec_dot of their own).
 *
 * Use in a matmul (weights W of type t, one activation row a of n floats):
 *     const ember_quant_traits *wt = ember_quant_traits_get(t);
 *     const ember_quant_traits *at = ember_quant_traits_get(wt->vec_dot_type);
 *     at->from_float(a, abuf, n);            // once per activation row (SIMD)
 *     for each row r: wt->vec_dot(n, &out[r], W + r * row_bytes, abuf);
 * n must be a multiple of both block sizes (ggml requires the same).
 * Functions are reached only through the traits rows: ember_quant_traits_get()
 * also initializes the tables the SIMD kernels read.
 *
 * All vec_dot variants compute the same integer block sums; they differ from
 * the scalar reference only in the order of float accumulation across blocks
 * (tests/unit/quant/test_quant.c bounds the difference).
 */
#ifndef EMBER_QUANT_H
#define EMBER_QUANT_H

#include "ember.h"
#include "base/types.h"

/* Convert `n` elements (a multiple of the block size) from blocks to F32. */
typedef void (*ember_to_float_fn)(const void *restrict src, float *restrict dst, int64_t n);
/* Quantize `n` F32 elements (a multiple of the block size) into blocks. */
typedef void (*ember_from_float_fn)(const float *restrict src, void *restrict dst, int64_t n);
/* s = sum_i x[i]*y[i] over `n` elements (a multiple of the block size); x is a
 * row of the weight type, y a row of the traits' vec_dot_type. */
typedef void (*ember_vec_dot_fn)(int64_t n, float *restrict s, const void *restrict x,
                                 const void *restrict y);
/* The same s, bit for bit, while prefetching the weight row ahead as it is
 * read: before each block of x, the cache lines pf bytes past that block's
 * bytes (pf > 0; pf <= 0: none). For decode mat-vecs, whose rows stream from
 * memory once per token: spread over the row, the prefetches keep the loads
 * ahead without the stall of issuing a whole row's at once. */
typedef void (*ember_vec_dot_pf_fn)(int64_t n, float *restrict s, const void *restrict x,
                                    const void *restrict y, int32_t pf);

typedef enum ember_cpu_variant {
    EMBER_CPU_SCALAR = 0,
    EMBER_CPU_AVX2 = 1,   /* AVX2 + FMA + F16C */
    EMBER_CPU_AVX512 = 2, /* AVX-512 F/BW/VL/DQ + VNNI (+ the AVX2 set) */
    EMBER_CPU_VARIANT_COUNT = 3,
} ember_cpu_variant;

typedef struct ember_quant_traits {
    ember_type type;
    const char *name;
    size_t block_size;            /* elements per block */
    size_t block_bytes;           /* bytes per block */
    ember_to_float_fn to_float;   /* scalar reference (bit-exact vs gguf-py) */
    ember_from_float_fn from_float_ref; /* scalar reference quantizer; NULL if none */
    ember_from_float_fn from_float;     /* fastest quantizer for the active variant
                                           (SIMD for Q8_0/Q8_1/Q8_K; else = _ref) */
    ember_from_float_fn from_float_variant[EMBER_CPU_VARIANT_COUNT];
    ember_type vec_dot_type;      /* activation format for vec_dot */
    ember_vec_dot_fn vec_dot;     /* best variant for the active CPU variant; NULL
                                     for activation-only formats */
    ember_vec_dot_fn vec_dot_variant[EMBER_CPU_VARIANT_COUNT]; /* NULL if not built */
    ember_vec_dot_pf_fn vec_dot_pf;     /* vec_dot with prefetch, for the active variant;
                                           NULL where there is none (Q4_K, Q6_K: AVX2, AVX-512) */
    ember_vec_dot_pf_fn vec_dot_pf_variant[EMBER_CPU_VARIANT_COUNT];
} ember_quant_traits;

/* Traits for type `t`, or NULL if ember has no kernels for it. The first call
 * decides the CPU variant (see below); the returned row is immutable. */
const ember_quant_traits *ember_quant_traits_get(uint32_t t);

/* The CPU variant in use: the best this CPU supports, unless the environment
 * variable EMBER_CPU_VARIANT=scalar|avx2|avx512 forces one (a variant the CPU
 * cannot run falls back to the best it can, with a note on stderr).
 * Decided once (thread-safe). */
ember_cpu_variant ember_cpu_variant_active(void);
/* Whether this CPU (CPUID + OS-enabled XSAVE state) can run `v`. */
bool ember_cpu_variant_supported(ember_cpu_variant v);
/* "scalar", "avx2", "avx512"; "?" for other values. */
const char *ember_cpu_variant_name(ember_cpu_variant v);

/* IEEE half and bfloat16 conversions. fp32->fp16/bf16 round to nearest even;
 * NaN stays NaN (quiet), overflow gives inf; fp16 subnormals are exact. */
float ember_fp16_to_fp32(uint16_t h);
uint16_t ember_fp32_to_fp16(float f);
float ember_bf16_to_fp32(uint16_t h);
uint16_t ember_fp32_to_bf16(float f);

#endif
