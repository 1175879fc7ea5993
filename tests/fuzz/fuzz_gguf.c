/*
 * fuzz_gguf.c — libFuzzer target for the GGUF reader.
 *
 * Opens the input with ember_gguf_open_memory over an exact-size copy (so
 * ASan sees any over-read) and, if it is accepted, walks everything a caller
 * can reach: every KV with its typed getters, every array element (strings,
 * scalars, nested arrays to the bottom), every tensor's bytes and both hash
 * lookups. Must not: keep state between inputs.
 * Build: make fuzz; run: build-fuzz/fuzz/fuzz_gguf CORPUS_DIR (see README.md).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"

static volatile uint64_t sink;

static void walk_arr(const ember_gguf_arr *a, int depth)
{
    if (depth > 64) __builtin_trap(); /* the reader bounds nesting at 16 */
    for (uint64_t j = 0; j < a->n; j++) {
        if (a->type == EMBER_GGUF_STRING) {
            size_t len = 0;
            const char *s = ember_gguf_arr_str(a, j, &len);
            if (!s || s[len] != '\0') __builtin_trap();
            for (size_t k = 0; k < len; k++) sink += (uint8_t)s[k];
        } else if (a->type == EMBER_GGUF_ARRAY) {
            ember_gguf_arr sub;
            if (ember_gguf_arr_sub(a, j, &sub) != EMBER_OK) __builtin_trap();
            walk_arr(&sub, depth + 1);
        } else {
            ember_gguf_scalar v = ember_gguf_arr_scalar(a, j);
            sink += v.u;
        }
    }
    if (a->data) {
        size_t esz = a->type == EMBER_GGUF_U8 || a->type == EMBER_GGUF_I8 || a->type == EMBER_GGUF_BOOL ? 1
                   : a->type == EMBER_GGUF_U16 || a->type == EMBER_GGUF_I16 ? 2
                   : a->type == EMBER_GGUF_U64 || a->type == EMBER_GGUF_I64 || a->type == EMBER_GGUF_F64 ? 8 : 4;
        const uint8_t *p = a->data;
        for (uint64_t k = 0; k < a->n * esz; k++) sink += p[k];
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *copy = malloc(size ? size : 1);
    if (!copy) return 0;
    memcpy(copy, data, size);
    ember_gguf *g = NULL;
    if (ember_gguf_open_memory(copy, size, &g) == EMBER_OK) {
        for (int64_t i = 0; i < ember_gguf_n_kv(g); i++) {
            const char *key = ember_gguf_key(g, i);
            if (ember_gguf_find_key(g, key) != i) __builtin_trap();
            ember_gguf_vtype t = ember_gguf_kv_type(g, i);
            uint32_t u32; int64_t i64; float f32; bool b; const char *s; size_t len;
            ember_gguf_get_u32(g, key, &u32);
            ember_gguf_get_i64(g, key, &i64);
            ember_gguf_get_f32(g, key, &f32);
            ember_gguf_get_bool(g, key, &b);
            if (ember_gguf_get_str(g, key, &s, &len) == EMBER_OK && s[len] != '\0') __builtin_trap();
            if (t == EMBER_GGUF_ARRAY) {
                ember_gguf_arr a;
                if (ember_gguf_kv_arr(g, i, &a) != EMBER_OK) __builtin_trap();
                walk_arr(&a, 0);
            } else if (t != EMBER_GGUF_STRING) {
                sink += ember_gguf_kv_scalar(g, i).u;
            }
        }
        uint64_t data_off = ember_gguf_data_offset(g);
        for (int64_t i = 0; i < ember_gguf_n_tensors(g); i++) {
            const ember_gguf_tensor *t = ember_gguf_tensor_at(g, i);
            if (ember_gguf_find_tensor(g, t->name) != i) __builtin_trap();
            if (t->n_dims < 1 || t->n_dims > 4) __builtin_trap();
            if (data_off + t->offset + t->nbytes > size) __builtin_trap();
            const uint8_t *p = t->data;
            for (uint64_t k = 0; k < t->nbytes; k++) sink += p[k];
        }
        ember_gguf_find_key(g, "general.architecture");
        ember_gguf_get_tensor(g, "token_embd.weight");
        ember_gguf_close(g);
    }
    free(copy);
    return 0;
}
