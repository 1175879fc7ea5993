/*
 * quant.h — one traits row per ggml block format.
 *
 * Owns: dequantize (scalar reference), quantize from F32 (reference), and the
 * dot product of a weight row with an activation row quantized to the
 * format's `vec_dot_type`, in scalar, AVX2 and AVX-512 variants picked at run
 * time by CPUID. Block layouts: ggml-common.h; reference math:
 * ggml-quants.c and gguf-py gguf/quants.py (the test oracle).
 * Must not: know about tensors, models or threads.
 */
#ifndef EMBER_QUANT_H
#define EMBER_QUANT_H

#include "ember.h"
#include "base/types.h"

/* Convert `n` elements (a multiple of the block size) from blocks to F32. */
typedef void (*ember_to_float_fn)(const void *restrict src, float *restrict dst, int64_t n);
/* Quantize `n` F32 elements (a multiple of the block size) into blocks. */
typedef void (*ember_from_float_fn)(const float *restrict src, void *restrict dst, int64_t n);
/* s = sum_i x[i]*y[i] over `n` elements; x is a row of the weight type, y a
 * row of the traits' vec_dot_type. */
typedef void (*ember_vec_dot_fn)(int64_t n, float *restrict s, const void *restrict x,
                                 const void *restrict y);

typedef enum ember_cpu_variant {
    EMBER_CPU_SCALAR = 0,
    EMBER_CPU_AVX2 = 1,
    EMBER_CPU_AVX512 = 2,
} ember_cpu_variant;

typedef struct ember_quant_traits {
    ember_type type;
    const char *name;
    size_t block_size;            /* elements per block */
    size_t block_bytes;           /* bytes per block */
    ember_to_float_fn to_float;   /* scalar reference */
    ember_from_float_fn from_float_ref; /* scalar reference quantizer; NULL if none */
    ember_type vec_dot_type;      /* activation format for vec_dot */
    ember_vec_dot_fn vec_dot;     /* best variant for the active CPU variant */
    ember_vec_dot_fn vec_dot_variant[3]; /* by ember_cpu_variant; NULL if not built */
} ember_quant_traits;

/* Traits for type `t`, or NULL if ember has no kernels for it. */
const ember_quant_traits *ember_quant_traits_get(uint32_t t);

/* The CPU variant in use: the best this CPU supports, unless the environment
 * variable EMBER_CPU_VARIANT=scalar|avx2|avx512 forces a lower one.
 * Decided once (thread-safe). */
ember_cpu_variant ember_cpu_variant_active(void);
/* Whether this CPU can run `v`. */
bool ember_cpu_variant_supported(ember_cpu_variant v);
const char *ember_cpu_variant_name(ember_cpu_variant v);

/* IEEE half and bfloat16 conversions (round-to-nearest-even). */
float ember_fp16_to_fp32(uint16_t h);
uint16_t ember_fp32_to_fp16(float f);
float ember_bf16_to_fp32(uint16_t h);
uint16_t ember_fp32_to_bf16(float f);

#endif
