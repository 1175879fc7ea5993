/*
 * types.c — block geometry per ggml type id (see types.h for sources).
 */
#include "base/types.h"

struct geom { const char *name; uint16_t blck; uint16_t bytes; };

static const struct geom geoms[EMBER_TYPE_COUNT] = {
    [EMBER_TYPE_F32] = {"F32", 1, 4},
    [EMBER_TYPE_F16] = {"F16", 1, 2},
    [EMBER_TYPE_Q4_0] = {"Q4_0", 32, 18},
    [EMBER_TYPE_Q4_1] = {"Q4_1", 32, 20},
    [EMBER_TYPE_Q5_0] = {"Q5_0", 32, 22},
    [EMBER_TYPE_Q5_1] = {"Q5_1", 32, 24},
    [EMBER_TYPE_Q8_0] = {"Q8_0", 32, 34},
    [EMBER_TYPE_Q8_1] = {"Q8_1", 32, 36},
    [EMBER_TYPE_Q2_K] = {"Q2_K", 256, 84},
    [EMBER_TYPE_Q3_K] = {"Q3_K", 256, 110},
    [EMBER_TYPE_Q4_K] = {"Q4_K", 256, 144},
    [EMBER_TYPE_Q5_K] = {"Q5_K", 256, 176},
    [EMBER_TYPE_Q6_K] = {"Q6_K", 256, 210},
    [EMBER_TYPE_Q8_K] = {"Q8_K", 256, 292},
    [EMBER_TYPE_IQ4_NL] = {"IQ4_NL", 32, 18},
    [EMBER_TYPE_IQ4_XS] = {"IQ4_XS", 256, 136},
    [EMBER_TYPE_I8] = {"I8", 1, 1},
    [EMBER_TYPE_I16] = {"I16", 1, 2},
    [EMBER_TYPE_I32] = {"I32", 1, 4},
    [EMBER_TYPE_I64] = {"I64", 1, 8},
    [EMBER_TYPE_F64] = {"F64", 1, 8},
    [EMBER_TYPE_BF16] = {"BF16", 1, 2},
};

bool ember_type_known(uint32_t t) { return t < EMBER_TYPE_COUNT && geoms[t].blck != 0; }
size_t ember_type_block_size(uint32_t t) { return ember_type_known(t) ? geoms[t].blck : 0; }
size_t ember_type_block_bytes(uint32_t t) { return ember_type_known(t) ? geoms[t].bytes : 0; }
const char *ember_type_name(uint32_t t) { return ember_type_known(t) ? geoms[t].name : "?"; }

bool ember_type_row_bytes(uint32_t t, uint64_t n, uint64_t *out)
{
    if (!ember_type_known(t)) return false;
    uint64_t b = geoms[t].blck;
    if (n % b) return false;
    uint64_t nb = n / b;
    if (nb > UINT64_MAX / geoms[t].bytes) return false;
    *out = nb * geoms[t].bytes;
    return true;
}
