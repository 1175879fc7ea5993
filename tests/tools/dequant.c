/*
 * dequant.c — test tool: raw ggml blocks on stdin -> float32 on stdout.
 *
 * Usage: dequant TYPE_ID N_ELEMENTS < blocks > floats
 *   TYPE_ID is the GGUF/ggml type number (e.g. 12 for Q4_K), N_ELEMENTS a
 *   multiple of the type's block size; stdin must hold exactly the row bytes.
 *   Output: N_ELEMENTS little-endian float32 from the scalar reference
 *   dequantizer (ember_quant_traits_get(t)->to_float).
 * Used by tests/e2e/test_quant_models.py to compare with gguf-py on every
 * tensor of the real models without going through ember's GGUF reader.
 * Exit status: 0 ok, 2 bad arguments/unsupported type, 3 short or long input,
 * 4 I/O error.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "quant/quant.h"

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s TYPE_ID N_ELEMENTS < blocks > floats\n", argv[0]);
        return 2;
    }
    char *end;
    errno = 0;
    unsigned long t = strtoul(argv[1], &end, 10);
    if (errno || *end || t > 0xFFFFFFFFul) { fprintf(stderr, "dequant: bad type id '%s'\n", argv[1]); return 2; }
    unsigned long long n = strtoull(argv[2], &end, 10);
    if (errno || *end) { fprintf(stderr, "dequant: bad element count '%s'\n", argv[2]); return 2; }
    const ember_quant_traits *tr = ember_quant_traits_get((uint32_t)t);
    if (!tr) { fprintf(stderr, "dequant: type %lu has no kernels\n", t); return 2; }
    uint64_t total_bytes;
    if (!ember_type_row_bytes((uint32_t)t, n, &total_bytes)) {
        fprintf(stderr, "dequant: %llu elements is not a whole number of %s blocks (%zu)\n", n, tr->name,
                tr->block_size);
        return 2;
    }
    const size_t chunk_blocks = 4096;
    uint8_t *in = malloc(chunk_blocks * tr->block_bytes);
    float *out = malloc(chunk_blocks * tr->block_size * sizeof(float));
    int rc = 0;
    if (!in || !out) { fprintf(stderr, "dequant: out of memory\n"); rc = 4; goto done; }
    uint64_t left = n / tr->block_size;
    while (left) {
        size_t nb = left < chunk_blocks ? (size_t)left : chunk_blocks;
        size_t want = nb * tr->block_bytes;
        size_t got = fread(in, 1, want, stdin);
        if (got != want) {
            fprintf(stderr, "dequant: input ends after %llu of %llu bytes\n",
                    (unsigned long long)(total_bytes - left * tr->block_bytes + got),
                    (unsigned long long)total_bytes);
            rc = 3;
            goto done;
        }
        tr->to_float(in, out, (int64_t)(nb * tr->block_size));
        if (fwrite(out, sizeof(float) * tr->block_size, nb, stdout) != nb) {
            fprintf(stderr, "dequant: write failed\n");
            rc = 4;
            goto done;
        }
        left -= nb;
    }
    if (fgetc(stdin) != EOF) {
        fprintf(stderr, "dequant: input longer than %llu bytes\n", (unsigned long long)total_bytes);
        rc = 3;
    } else if (fflush(stdout)) {
        rc = 4;
    }
done:
    free(in);
    free(out);
    return rc;
}
