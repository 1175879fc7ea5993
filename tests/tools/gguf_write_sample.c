/*
 * gguf_write_sample.c — writes a GGUF file with every value type, nested
 * arrays and two tensors through ember's writer, so that
 * tests/e2e/test_gguf_writer.py can read it back with gguf-py (the oracle).
 * usage: gguf_write_sample OUT.gguf VERSION ALIGNMENT
 * Must not: be used for anything but that test; the values are literals the
 * test repeats.
 */
#include <stdio.h>
#include <stdlib.h>

#include "base/status.h"
#include "gguf/gguf.h"

#define CHECK(x) do { ember_status s_ = (x); if (s_) { fprintf(stderr, "%s: %s\n", #x, ember_last_error()); return 1; } } while (0)

int main(int argc, char **argv)
{
    if (argc != 4) { fprintf(stderr, "usage: gguf_write_sample OUT VERSION ALIGNMENT\n"); return 2; }
    ember_gguf_writer *w;
    CHECK(ember_gguf_writer_new((uint32_t)atoi(argv[3]), &w));
    CHECK(ember_gguf_writer_set_version(w, (uint32_t)atoi(argv[2])));
    uint8_t u8 = 200; int8_t i8 = -100; uint16_t u16 = 60000; int16_t i16 = -30000;
    int64_t i64 = -5000000000LL; double f64 = 2.718281828459045; bool t = true;
    CHECK(ember_gguf_writer_set_scalar(w, "s.u8", EMBER_GGUF_U8, &u8));
    CHECK(ember_gguf_writer_set_scalar(w, "s.i8", EMBER_GGUF_I8, &i8));
    CHECK(ember_gguf_writer_set_scalar(w, "s.u16", EMBER_GGUF_U16, &u16));
    CHECK(ember_gguf_writer_set_scalar(w, "s.i16", EMBER_GGUF_I16, &i16));
    CHECK(ember_gguf_writer_set_u32(w, "s.u32", 4000000000u));
    CHECK(ember_gguf_writer_set_i32(w, "s.i32", -2000000000));
    CHECK(ember_gguf_writer_set_f32(w, "s.f32", 0.25f));
    CHECK(ember_gguf_writer_set_bool(w, "s.bool", t));
    CHECK(ember_gguf_writer_set_str(w, "s.str", "héllo ▁wörld"));
    CHECK(ember_gguf_writer_set_u64(w, "s.u64", 18000000000000000000ull));
    CHECK(ember_gguf_writer_set_scalar(w, "s.i64", EMBER_GGUF_I64, &i64));
    CHECK(ember_gguf_writer_set_scalar(w, "s.f64", EMBER_GGUF_F64, &f64));
    static const char *const toks[] = {"<s>", "", "▁the", "<0x0A>"};
    static const float scores[] = {0.0f, -1.5f, -2.25f, -1000.0f};
    static const int32_t types[] = {3, 1, 1, 6};
    static const bool flags[] = {true, false, true};
    CHECK(ember_gguf_writer_set_arr_str(w, "a.tokens", toks, 4));
    CHECK(ember_gguf_writer_set_arr(w, "a.scores", EMBER_GGUF_F32, scores, 4));
    CHECK(ember_gguf_writer_set_arr(w, "a.types", EMBER_GGUF_I32, types, 4));
    CHECK(ember_gguf_writer_set_arr(w, "a.flags", EMBER_GGUF_BOOL, flags, 3));
    static const uint16_t r0[] = {1, 2}, r1[] = {3, 4};
    ember_gguf_arr rows[2] = {{.type = EMBER_GGUF_U16, .n = 2, .data = r0},
                              {.type = EMBER_GGUF_U16, .n = 2, .data = r1}};
    ember_gguf_arr nested = {.type = EMBER_GGUF_ARRAY, .n = 2, .data = rows};
    CHECK(ember_gguf_writer_set_arr_value(w, "a.nested", &nested));
    float f[12];
    for (int i = 0; i < 12; i++) f[i] = (float)i * 0.5f;
    int64_t ne_f[2] = {4, 3}, ne_q[2] = {32, 2};
    uint8_t q[2 * 34];
    for (int i = 0; i < 68; i++) q[i] = (uint8_t)(i * 3 + 1);
    CHECK(ember_gguf_writer_add_tensor(w, "t.f32", 0, 2, ne_f, f));
    CHECK(ember_gguf_writer_add_tensor(w, "t.q8_0", 8, 2, ne_q, q));
    CHECK(ember_gguf_writer_write_file(w, argv[1]));
    ember_gguf_writer_free(w);
    return 0;
}
