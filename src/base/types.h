/*
 * types.h — ggml tensor type ids and their block geometry.
 *
 * Owns: the numeric ids GGUF files use for tensor types and, for each, the
 * number of elements per block and bytes per block. Source: ggml.h
 * (enum ggml_type) and ggml-common.h block structs, as mirrored by gguf-py
 * constants.py (GGMLQuantizationType, GGML_QUANT_SIZES).
 * Must not: contain compute code; that lives in src/quant/.
 */
#ifndef EMBER_BASE_TYPES_H
#define EMBER_BASE_TYPES_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

typedef enum ember_type {
    EMBER_TYPE_F32 = 0,
    EMBER_TYPE_F16 = 1,
    EMBER_TYPE_Q4_0 = 2,
    EMBER_TYPE_Q4_1 = 3,
    EMBER_TYPE_Q5_0 = 6,
    EMBER_TYPE_Q5_1 = 7,
    EMBER_TYPE_Q8_0 = 8,
    EMBER_TYPE_Q8_1 = 9,
    EMBER_TYPE_Q2_K = 10,
    EMBER_TYPE_Q3_K = 11,
    EMBER_TYPE_Q4_K = 12,
    EMBER_TYPE_Q5_K = 13,
    EMBER_TYPE_Q6_K = 14,
    EMBER_TYPE_Q8_K = 15,
    EMBER_TYPE_IQ4_NL = 20,
    EMBER_TYPE_IQ4_XS = 23,
    EMBER_TYPE_I8 = 24,
    EMBER_TYPE_I16 = 25,
    EMBER_TYPE_I32 = 26,
    EMBER_TYPE_I64 = 27,
    EMBER_TYPE_F64 = 28,
    EMBER_TYPE_BF16 = 30,
    EMBER_TYPE_COUNT = 40 /* upper bound on ids, not a type */
} ember_type;

/* True if `t` is a type id ember knows the block geometry of. */
bool ember_type_known(uint32_t t);
/* Elements per block (1 for plain types); 0 for unknown ids. */
size_t ember_type_block_size(uint32_t t);
/* Bytes per block; 0 for unknown ids. */
size_t ember_type_block_bytes(uint32_t t);
/* Canonical name as gguf-py prints it ("Q4_K", "F16"); "?" for unknown ids. */
const char *ember_type_name(uint32_t t);
/* Bytes of a row of `n` elements; returns false if `n` is not a multiple of the
 * block size or the result would overflow. */
bool ember_type_row_bytes(uint32_t t, uint64_t n, uint64_t *out);

#endif
