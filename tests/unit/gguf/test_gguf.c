/* GGUF reader and writer.
 *
 * - Writer -> reader round trips of every value type, nested arrays, v2/v3
 *   and several alignments (values are the literals written here).
 * - Files made independently by tests/data/gguf/make_malformed.py (struct
 *   packing from the format description): the valid ones decode to the values
 *   that script packed, the malformed ones fail with the status and message
 *   substring listed in expected.tsv.
 * - Every truncation of a valid file fails cleanly (no crash, no over-read:
 *   the buffer is an exact-size heap copy, so ASan catches any over-read).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/status.h"
#include "gguf/gguf.h"

#define MALFORMED_DIR "tests/data/gguf/malformed/"

/* ---- helpers ------------------------------------------------------------- */

static ember_gguf *open_buf(const void *buf, size_t n)
{
    ember_gguf *g = NULL;
    ember_status s = ember_gguf_open_memory(buf, n, &g);
    if (s) fprintf(stderr, "open: %s %s\n", ember_status_name(s), ember_last_error());
    assert_int_equal(s, EMBER_OK);
    return g;
}

static void *read_all(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *p = malloc(len ? (size_t)len : 1);
    assert_non_null(p);
    assert_int_equal(fread(p, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    *n = (size_t)len;
    return p;
}

/* ---- round trip ---------------------------------------------------------- */

static const char *const words[] = {"alpha", "", "γάμμα ▁x", "<0x0A>"};
static const int16_t i16s[] = {-32768, -1, 0, 32767};
static const double f64s[] = {-1.5, 0.0, 1e300, 3.141592653589793};
static const bool bools[] = {true, false, true};
static const uint32_t inner_a[] = {1, 2, 3};
static const uint32_t inner_b[] = {4};

static ember_gguf_writer *make_writer(uint32_t alignment, uint32_t version)
{
    ember_gguf_writer *w;
    assert_int_equal(ember_gguf_writer_new(alignment, &w), EMBER_OK);
    assert_int_equal(ember_gguf_writer_set_version(w, version), EMBER_OK);
    uint8_t u8 = 255; int8_t i8 = -128; uint16_t u16 = 65535; int16_t i16 = -32768;
    int64_t i64 = INT64_MIN; double f64 = -2.5e-300; bool b = true;
    assert_int_equal(ember_gguf_writer_set_scalar(w, "t.u8", EMBER_GGUF_U8, &u8), EMBER_OK);
    assert_int_equal(ember_gguf_writer_set_scalar(w, "t.i8", EMBER_GGUF_I8, &i8), EMBER_OK);
    assert_int_equal(ember_gguf_writer_set_scalar(w, "t.u16", EMBER_GGUF_U16, &u16), EMBER_OK);
    assert_int_equal(ember_gguf_writer_set_scalar(w, "t.i16", EMBER_GGUF_I16, &i16), EMBER_OK);
    assert_int_equal(ember_gguf_writer_set_u32(w, "t.u32", 4000000000u), EMBER_OK);
    assert_int_equal(ember_gguf_writer_set_i32(w, "t.i32", -7), EMBER_OK);
    assert_int_equal(ember_gguf_writer_set_f32(w, "t.f32", 0.1f), EMBER_OK);
    assert_int_equal(ember_gguf_writer_set_bool(w, "t.bool", b), EMBER_OK);
    assert_int_equal(ember_gguf_writer_set_str(w, "t.str", "hello"), EMBER_OK);
    assert_int_equal(ember_gguf_writer_set_str_n(w, "t.str0", "a\0b", 3), EMBER_OK);
    assert_int_equal(ember_gguf_writer_set_u64(w, "t.u64", UINT64_MAX), EMBER_OK);
    assert_int_equal(ember_gguf_writer_set_scalar(w, "t.i64", EMBER_GGUF_I64, &i64), EMBER_OK);
    assert_int_equal(ember_gguf_writer_set_scalar(w, "t.f64", EMBER_GGUF_F64, &f64), EMBER_OK);
    /* arrays */
    assert_int_equal(ember_gguf_writer_set_arr_str(w, "a.str", words, 4), EMBER_OK);
    assert_int_equal(ember_gguf_writer_set_arr(w, "a.i16", EMBER_GGUF_I16, i16s, 4), EMBER_OK);
    assert_int_equal(ember_gguf_writer_set_arr(w, "a.f64", EMBER_GGUF_F64, f64s, 4), EMBER_OK);
    assert_int_equal(ember_gguf_writer_set_arr(w, "a.bool", EMBER_GGUF_BOOL, bools, 3), EMBER_OK);
    assert_int_equal(ember_gguf_writer_set_arr(w, "a.empty", EMBER_GGUF_U8, NULL, 0), EMBER_OK);
    /* nested: [[1,2,3],[4],[]] and [[["alpha",""]], []] */
    ember_gguf_arr subs[3] = {
        {.type = EMBER_GGUF_U32, .n = 3, .data = inner_a},
        {.type = EMBER_GGUF_U32, .n = 1, .data = inner_b},
        {.type = EMBER_GGUF_U32, .n = 0, .data = NULL},
    };
    ember_gguf_arr nest = {.type = EMBER_GGUF_ARRAY, .n = 3, .data = subs};
    assert_int_equal(ember_gguf_writer_set_arr_value(w, "a.nested", &nest), EMBER_OK);
    ember_gguf_arr lvl2 = {.type = EMBER_GGUF_STRING, .n = 2, .data = words};
    ember_gguf_arr lvl1[2] = {{.type = EMBER_GGUF_ARRAY, .n = 1, .data = &lvl2},
                              {.type = EMBER_GGUF_ARRAY, .n = 0, .data = NULL}};
    ember_gguf_arr deep = {.type = EMBER_GGUF_ARRAY, .n = 2, .data = lvl1};
    assert_int_equal(ember_gguf_writer_set_arr_value(w, "a.deep", &deep), EMBER_OK);
    /* replacing a key keeps its position and count */
    assert_int_equal(ember_gguf_writer_set_i32(w, "t.i32", -8), EMBER_OK);
    /* tensors: F32 [3, 2] (row not a multiple of any alignment), Q8_0 [64] */
    float f[6] = {1, 2, 3, 4, 5, 6};
    uint8_t q[68];
    for (int i = 0; i < 68; i++) q[i] = (uint8_t)(i * 7);
    int64_t ne_f[2] = {3, 2}, ne_q[1] = {64};
    assert_int_equal(ember_gguf_writer_add_tensor(w, "w.f32", 0, 2, ne_f, f), EMBER_OK);
    assert_int_equal(ember_gguf_writer_add_tensor(w, "w.q8", 8, 1, ne_q, q), EMBER_OK);
    return w;
}

static void check_contents(const ember_gguf *g, uint32_t alignment, uint32_t version)
{
    assert_int_equal(ember_gguf_version(g), version);
    assert_int_equal(ember_gguf_alignment(g), alignment ? alignment : 32);
    int64_t extra = (alignment && alignment != 32) ? 1 : 0; /* general.alignment */
    assert_int_equal(ember_gguf_n_kv(g), 20 + extra);
    assert_int_equal(ember_gguf_n_tensors(g), 2);
    assert_string_equal(ember_gguf_key(g, extra + 0), "t.u8");
    assert_string_equal(ember_gguf_key(g, extra + 5), "t.i32");

    ember_gguf_scalar v;
    static const struct { const char *key; ember_gguf_vtype t; } types[] = {
        {"t.u8", EMBER_GGUF_U8}, {"t.i8", EMBER_GGUF_I8}, {"t.u16", EMBER_GGUF_U16},
        {"t.i16", EMBER_GGUF_I16}, {"t.u32", EMBER_GGUF_U32}, {"t.i32", EMBER_GGUF_I32},
        {"t.f32", EMBER_GGUF_F32}, {"t.bool", EMBER_GGUF_BOOL}, {"t.str", EMBER_GGUF_STRING},
        {"t.u64", EMBER_GGUF_U64}, {"t.i64", EMBER_GGUF_I64}, {"t.f64", EMBER_GGUF_F64},
        {"a.str", EMBER_GGUF_ARRAY},
    };
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        assert_int_equal(ember_gguf_kv_type(g, ember_gguf_find_key(g, types[i].key)), types[i].t);
    v = ember_gguf_kv_scalar(g, ember_gguf_find_key(g, "t.u8")); assert_int_equal(v.u, 255);
    v = ember_gguf_kv_scalar(g, ember_gguf_find_key(g, "t.i8")); assert_int_equal(v.i, -128);
    v = ember_gguf_kv_scalar(g, ember_gguf_find_key(g, "t.u16")); assert_int_equal(v.u, 65535);
    v = ember_gguf_kv_scalar(g, ember_gguf_find_key(g, "t.i16")); assert_int_equal(v.i, -32768);
    v = ember_gguf_kv_scalar(g, ember_gguf_find_key(g, "t.u64")); assert_true(v.u == UINT64_MAX);
    v = ember_gguf_kv_scalar(g, ember_gguf_find_key(g, "t.i64")); assert_true(v.i == INT64_MIN);
    v = ember_gguf_kv_scalar(g, ember_gguf_find_key(g, "t.f64")); assert_true(v.f == -2.5e-300);
    v = ember_gguf_kv_scalar(g, ember_gguf_find_key(g, "t.f32")); assert_true(v.f == (double)0.1f);
    v = ember_gguf_kv_scalar(g, ember_gguf_find_key(g, "t.bool")); assert_true(v.b);

    /* typed getters and their conversions */
    uint32_t u32; int64_t i64; float f32; bool b; const char *str; size_t len;
    assert_int_equal(ember_gguf_get_u32(g, "t.u32", &u32), EMBER_OK); assert_int_equal(u32, 4000000000u);
    assert_int_equal(ember_gguf_get_u32(g, "t.u8", &u32), EMBER_OK); assert_int_equal(u32, 255);
    assert_int_equal(ember_gguf_get_u32(g, "t.bool", &u32), EMBER_OK); assert_int_equal(u32, 1);
    assert_int_equal(ember_gguf_get_u32(g, "t.i32", &u32), EMBER_ERR_FORMAT); /* -8 */
    assert_int_equal(ember_gguf_get_u32(g, "t.u64", &u32), EMBER_ERR_FORMAT); /* too big */
    assert_int_equal(ember_gguf_get_u32(g, "t.str", &u32), EMBER_ERR_FORMAT);
    assert_int_equal(ember_gguf_get_u32(g, "nope", &u32), EMBER_ERR_NOT_FOUND);
    assert_non_null(strstr(ember_last_error(), "nope"));
    assert_int_equal(ember_gguf_get_i64(g, "t.i32", &i64), EMBER_OK); assert_int_equal(i64, -8);
    assert_int_equal(ember_gguf_get_i64(g, "t.i64", &i64), EMBER_OK); assert_true(i64 == INT64_MIN);
    assert_int_equal(ember_gguf_get_i64(g, "t.u64", &i64), EMBER_ERR_FORMAT);
    assert_int_equal(ember_gguf_get_i64(g, "t.f32", &i64), EMBER_ERR_FORMAT);
    assert_int_equal(ember_gguf_get_f32(g, "t.f32", &f32), EMBER_OK); assert_true(f32 == 0.1f);
    assert_int_equal(ember_gguf_get_f32(g, "t.i16", &f32), EMBER_OK); assert_true(f32 == -32768.0f);
    assert_int_equal(ember_gguf_get_f32(g, "t.str", &f32), EMBER_ERR_FORMAT);
    assert_int_equal(ember_gguf_get_bool(g, "t.bool", &b), EMBER_OK); assert_true(b);
    assert_int_equal(ember_gguf_get_bool(g, "t.u8", &b), EMBER_ERR_FORMAT);
    assert_int_equal(ember_gguf_get_str(g, "t.str", &str, &len), EMBER_OK);
    assert_string_equal(str, "hello"); assert_int_equal(len, 5);
    assert_int_equal(ember_gguf_get_str(g, "t.str0", &str, &len), EMBER_OK);
    assert_int_equal(len, 3); assert_memory_equal(str, "a\0b", 4);
    assert_int_equal(ember_gguf_get_str(g, "t.u8", &str, &len), EMBER_ERR_FORMAT);
    assert_non_null(ember_gguf_kv_str(g, ember_gguf_find_key(g, "t.str"), NULL));
    assert_null(ember_gguf_kv_str(g, ember_gguf_find_key(g, "t.u8"), NULL));

    /* arrays */
    ember_gguf_arr a, s1, s2;
    assert_int_equal(ember_gguf_get_arr(g, "t.u8", &a), EMBER_ERR_FORMAT);
    assert_int_equal(ember_gguf_get_arr(g, "a.str", &a), EMBER_OK);
    assert_int_equal(a.type, EMBER_GGUF_STRING);
    assert_int_equal(a.n, 4);
    assert_null(a.data);
    for (uint64_t j = 0; j < 4; j++) {
        assert_string_equal(ember_gguf_arr_str(&a, j, &len), words[j]);
        assert_int_equal(len, strlen(words[j]));
    }
    assert_null(ember_gguf_arr_str(&a, 4, &len));
    assert_int_equal(ember_gguf_get_arr(g, "a.i16", &a), EMBER_OK);
    assert_int_equal(a.type, EMBER_GGUF_I16);
    for (uint64_t j = 0; j < 4; j++) assert_int_equal(ember_gguf_arr_scalar(&a, j).i, i16s[j]);
    assert_memory_equal(a.data, i16s, sizeof i16s);
    assert_null(ember_gguf_arr_str(&a, 0, NULL));
    assert_int_equal(ember_gguf_get_arr(g, "a.f64", &a), EMBER_OK);
    for (uint64_t j = 0; j < 4; j++) assert_true(ember_gguf_arr_scalar(&a, j).f == f64s[j]);
    assert_int_equal(ember_gguf_get_arr(g, "a.bool", &a), EMBER_OK);
    assert_int_equal(a.type, EMBER_GGUF_BOOL);
    for (uint64_t j = 0; j < 3; j++) assert_int_equal(ember_gguf_arr_scalar(&a, j).b, bools[j]);
    assert_int_equal(ember_gguf_get_arr(g, "a.empty", &a), EMBER_OK);
    assert_int_equal(a.n, 0);
    assert_int_equal(a.type, EMBER_GGUF_U8);

    assert_int_equal(ember_gguf_get_arr(g, "a.nested", &a), EMBER_OK);
    assert_int_equal(a.type, EMBER_GGUF_ARRAY);
    assert_int_equal(a.n, 3);
    assert_int_equal(ember_gguf_arr_sub(&a, 0, &s1), EMBER_OK);
    assert_int_equal(s1.type, EMBER_GGUF_U32);
    assert_int_equal(s1.n, 3);
    for (uint64_t j = 0; j < 3; j++) assert_int_equal(ember_gguf_arr_scalar(&s1, j).u, inner_a[j]);
    assert_int_equal(ember_gguf_arr_sub(&a, 1, &s1), EMBER_OK);
    assert_int_equal(s1.n, 1);
    assert_int_equal(ember_gguf_arr_scalar(&s1, 0).u, 4);
    assert_int_equal(ember_gguf_arr_sub(&a, 2, &s1), EMBER_OK);
    assert_int_equal(s1.n, 0);
    assert_int_equal(ember_gguf_arr_sub(&a, 3, &s1), EMBER_ERR_RANGE);
    assert_int_equal(ember_gguf_arr_sub(&s1, 0, &s2), EMBER_ERR_FORMAT); /* not an array of arrays */

    assert_int_equal(ember_gguf_get_arr(g, "a.deep", &a), EMBER_OK);
    assert_int_equal(a.n, 2);
    assert_int_equal(ember_gguf_arr_sub(&a, 0, &s1), EMBER_OK);
    assert_int_equal(s1.type, EMBER_GGUF_ARRAY);
    assert_int_equal(ember_gguf_arr_sub(&s1, 0, &s2), EMBER_OK);
    assert_int_equal(s2.type, EMBER_GGUF_STRING);
    assert_int_equal(s2.n, 2);
    assert_string_equal(ember_gguf_arr_str(&s2, 0, NULL), "alpha");
    assert_string_equal(ember_gguf_arr_str(&s2, 1, NULL), "");
    assert_int_equal(ember_gguf_arr_sub(&a, 1, &s1), EMBER_OK);
    assert_int_equal(s1.n, 0);

    /* tensors */
    uint64_t al = alignment ? alignment : 32;
    assert_int_equal(ember_gguf_data_offset(g) % al, 0);
    const ember_gguf_tensor *t = ember_gguf_get_tensor(g, "w.f32");
    assert_non_null(t);
    assert_int_equal(ember_gguf_find_tensor(g, "w.f32"), 0);
    assert_int_equal(t->type, 0);
    assert_int_equal(t->n_dims, 2);
    assert_int_equal(t->ne[0], 3); assert_int_equal(t->ne[1], 2);
    assert_int_equal(t->ne[2], 1); assert_int_equal(t->ne[3], 1);
    assert_int_equal(t->offset, 0);
    assert_int_equal(t->nbytes, 24);
    float fw[6] = {1, 2, 3, 4, 5, 6};
    assert_memory_equal(t->data, fw, 24);
    t = ember_gguf_tensor_at(g, 1);
    assert_string_equal(t->name, "w.q8");
    assert_int_equal(t->type, 8);
    assert_int_equal(t->nbytes, 68);
    assert_int_equal(t->offset % al, 0);
    assert_true(t->offset >= 24);
    for (int i = 0; i < 68; i++) assert_int_equal(((const uint8_t *)t->data)[i], (uint8_t)(i * 7));
    assert_null(ember_gguf_tensor_at(g, 2));
    assert_null(ember_gguf_get_tensor(g, "w.nope"));
    assert_int_equal(ember_gguf_find_tensor(g, "w.nope"), -1);
    assert_int_equal(ember_gguf_find_key(g, "w.f32"), -1);
}

static void round_trip(uint32_t alignment, uint32_t version)
{
    ember_gguf_writer *w = make_writer(alignment, version);
    void *buf;
    size_t n;
    assert_int_equal(ember_gguf_writer_write_buffer(w, &buf, &n), EMBER_OK);
    ember_gguf_writer_free(w);
    /* header: magic, version (little-endian) */
    assert_memory_equal(buf, "GGUF", 4);
    assert_int_equal(((uint8_t *)buf)[4], version);
    assert_int_equal(n % (alignment ? alignment : 32), 0);
    ember_gguf *g = open_buf(buf, n);
    check_contents(g, alignment, version);
    assert_int_equal(ember_gguf_file_size(g), n);
    ember_gguf_close(g);
    free(buf);
}

static void test_round_trip_v3_default_alignment(void **state) { (void)state; round_trip(0, 3); }
static void test_round_trip_v2(void **state) { (void)state; round_trip(32, 2); }
static void test_round_trip_alignment_1(void **state) { (void)state; round_trip(1, 3); }
static void test_round_trip_alignment_64(void **state) { (void)state; round_trip(64, 3); }
static void test_round_trip_alignment_4096(void **state) { (void)state; round_trip(4096, 2); }

static void test_write_file_and_mmap(void **state)
{
    (void)state;
    char path[] = "/tmp/ember_test_gguf_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    ember_gguf_writer *w = make_writer(128, 3);
    assert_int_equal(ember_gguf_writer_write_file(w, path), EMBER_OK);
    void *buf;
    size_t n;
    assert_int_equal(ember_gguf_writer_write_buffer(w, &buf, &n), EMBER_OK);
    ember_gguf_writer_free(w);
    size_t fn;
    void *file = read_all(path, &fn);
    assert_int_equal(fn, n);
    assert_memory_equal(file, buf, n); /* both writer paths give the same bytes */
    free(file);
    free(buf);
    ember_gguf *g;
    assert_int_equal(ember_gguf_open(path, &g), EMBER_OK);
    check_contents(g, 128, 3);
    ember_gguf_close(g);
    unlink(path);
    assert_int_equal(ember_gguf_open(path, &g), EMBER_ERR_IO);
    assert_non_null(strstr(ember_last_error(), "cannot open"));
    assert_int_equal(ember_gguf_open("tests", &g), EMBER_ERR_IO); /* a directory */
}

static void test_writer_rejects_bad_input(void **state)
{
    (void)state;
    ember_gguf_writer *w;
    assert_int_equal(ember_gguf_writer_new(48, &w), EMBER_ERR_INVALID_ARG);
    assert_int_equal(ember_gguf_writer_new(0, &w), EMBER_OK);
    assert_int_equal(ember_gguf_writer_set_version(w, 1), EMBER_ERR_INVALID_ARG);
    assert_int_equal(ember_gguf_writer_set_u32(w, "", 1), EMBER_ERR_INVALID_ARG);
    assert_int_equal(ember_gguf_writer_set_u32(w, "general.alignment", 3), EMBER_ERR_INVALID_ARG);
    assert_int_equal(ember_gguf_writer_set_u64(w, "general.alignment", 64), EMBER_ERR_INVALID_ARG);
    assert_int_equal(ember_gguf_writer_set_arr(w, "k", EMBER_GGUF_STRING, NULL, 0), EMBER_ERR_INVALID_ARG);
    uint32_t x = 0;
    assert_int_equal(ember_gguf_writer_set_scalar(w, "k", EMBER_GGUF_ARRAY, &x), EMBER_ERR_INVALID_ARG);
    int64_t ne[2] = {33, 1};
    uint8_t data[64] = {0};
    assert_int_equal(ember_gguf_writer_add_tensor(w, "t", 2, 1, ne, data), EMBER_ERR_INVALID_ARG);
    assert_int_equal(ember_gguf_writer_add_tensor(w, "t", 0, 0, ne, data), EMBER_ERR_INVALID_ARG);
    assert_int_equal(ember_gguf_writer_add_tensor(w, "t", 0, 5, ne, data), EMBER_ERR_INVALID_ARG);
    assert_int_equal(ember_gguf_writer_add_tensor(w, "t", 16, 1, ne, data), EMBER_ERR_UNSUPPORTED);
    ne[0] = 4;
    assert_int_equal(ember_gguf_writer_add_tensor(w, "t", 0, 1, ne, data), EMBER_OK);
    assert_int_equal(ember_gguf_writer_add_tensor(w, "t", 0, 1, ne, data), EMBER_ERR_INVALID_ARG);
    /* nesting deeper than the reader accepts is refused by the writer too */
    ember_gguf_arr leaf = {.type = EMBER_GGUF_U8, .n = 0}, lv[20];
    for (int i = 0; i < 20; i++)
        lv[i] = (ember_gguf_arr){.type = EMBER_GGUF_ARRAY, .n = 1, .data = i ? &lv[i - 1] : &leaf};
    assert_int_equal(ember_gguf_writer_set_arr_value(w, "deep", &lv[19]), EMBER_ERR_INVALID_ARG);
    /* setting general.alignment changes the layout */
    assert_int_equal(ember_gguf_writer_set_u32(w, "general.alignment", 256), EMBER_OK);
    void *buf;
    size_t n;
    assert_int_equal(ember_gguf_writer_write_buffer(w, &buf, &n), EMBER_OK);
    ember_gguf *g = open_buf(buf, n);
    assert_int_equal(ember_gguf_alignment(g), 256);
    assert_int_equal(ember_gguf_data_offset(g), 256);
    assert_int_equal(ember_gguf_n_kv(g), 1);
    ember_gguf_close(g);
    free(buf);
    ember_gguf_writer_free(w);
}

/* 262,144 strings: offsets precomputed, so access is O(1) per element. */
static void test_large_string_array(void **state)
{
    (void)state;
    enum { N = 262144 };
    char (*store)[16] = malloc((size_t)N * 16);
    const char **v = malloc(N * sizeof *v);
    assert_non_null(store); assert_non_null(v);
    for (int i = 0; i < N; i++) {
        snprintf(store[i], 16, "tok%d", i);
        v[i] = store[i];
    }
    ember_gguf_writer *w;
    assert_int_equal(ember_gguf_writer_new(0, &w), EMBER_OK);
    assert_int_equal(ember_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", v, N), EMBER_OK);
    void *buf;
    size_t n;
    assert_int_equal(ember_gguf_writer_write_buffer(w, &buf, &n), EMBER_OK);
    ember_gguf_writer_free(w);
    ember_gguf *g = open_buf(buf, n);
    ember_gguf_arr a;
    assert_int_equal(ember_gguf_get_arr(g, "tokenizer.ggml.tokens", &a), EMBER_OK);
    assert_int_equal(a.n, N);
    for (int i = N - 1; i >= 0; i -= 7) {
        size_t len;
        assert_string_equal(ember_gguf_arr_str(&a, (uint64_t)i, &len), store[i]);
        assert_int_equal(len, strlen(store[i]));
    }
    ember_gguf_close(g);
    free(buf);
    free(v);
    free(store);
}

/* Many keys and tensors: every one is found at its own index. */
static void test_many_keys_and_tensors(void **state)
{
    (void)state;
    enum { NK = 5000, NT = 700 };
    ember_gguf_writer *w;
    assert_int_equal(ember_gguf_writer_new(0, &w), EMBER_OK);
    char name[32];
    for (int i = 0; i < NK; i++) {
        snprintf(name, sizeof name, "blk.%d.key", i);
        assert_int_equal(ember_gguf_writer_set_u32(w, name, (uint32_t)i * 3), EMBER_OK);
    }
    float x[32] = {0};
    int64_t ne[1] = {32};
    for (int i = 0; i < NT; i++) {
        snprintf(name, sizeof name, "blk.%d.weight", i);
        x[0] = (float)i;
        assert_int_equal(ember_gguf_writer_add_tensor(w, name, 0, 1, ne, x), EMBER_OK);
    }
    void *buf;
    size_t n;
    assert_int_equal(ember_gguf_writer_write_buffer(w, &buf, &n), EMBER_OK);
    ember_gguf_writer_free(w);
    ember_gguf *g = open_buf(buf, n);
    for (int i = 0; i < NK; i++) {
        snprintf(name, sizeof name, "blk.%d.key", i);
        assert_int_equal(ember_gguf_find_key(g, name), i);
        uint32_t v;
        assert_int_equal(ember_gguf_get_u32(g, name, &v), EMBER_OK);
        assert_int_equal(v, (uint32_t)i * 3);
    }
    for (int i = 0; i < NT; i++) {
        snprintf(name, sizeof name, "blk.%d.weight", i);
        const ember_gguf_tensor *t = ember_gguf_get_tensor(g, name);
        assert_non_null(t);
        float f0;
        memcpy(&f0, t->data, 4);
        assert_true(f0 == (float)i);
        assert_int_equal(t->offset, (uint64_t)i * 128);
    }
    assert_int_equal(ember_gguf_find_key(g, "blk.5000.key"), -1);
    assert_int_equal(ember_gguf_find_key(g, ""), -1);
    assert_int_equal(ember_gguf_find_tensor(g, "blk.700.weight"), -1);
    ember_gguf_close(g);
    free(buf);
}

/* ---- independently made files -------------------------------------------- */

/* The valid file packed by make_malformed.py decodes to what it packed. */
static void test_python_made_valid_file(void **state)
{
    (void)state;
    ember_gguf *g;
    assert_int_equal(ember_gguf_open(MALFORMED_DIR "valid_two_tensors.gguf", &g), EMBER_OK);
    assert_int_equal(ember_gguf_version(g), 3);
    const char *arch;
    assert_int_equal(ember_gguf_get_str(g, "general.architecture", &arch, NULL), EMBER_OK);
    assert_string_equal(arch, "llama");
    uint32_t u;
    assert_int_equal(ember_gguf_get_u32(g, "test.u32", &u), EMBER_OK);
    assert_int_equal(u, 7);
    ember_gguf_arr a;
    assert_int_equal(ember_gguf_get_arr(g, "test.tokens", &a), EMBER_OK);
    assert_int_equal(a.n, 3);
    assert_string_equal(ember_gguf_arr_str(&a, 0, NULL), "a");
    assert_string_equal(ember_gguf_arr_str(&a, 1, NULL), "bc");
    assert_string_equal(ember_gguf_arr_str(&a, 2, NULL), "");
    const ember_gguf_tensor *ta = ember_gguf_get_tensor(g, "a"), *tb = ember_gguf_get_tensor(g, "b");
    assert_non_null(ta); assert_non_null(tb);
    assert_int_equal(tb->ne[0], 4); assert_int_equal(tb->ne[1], 2);
    for (int i = 0; i < 8; i++) {
        float x, y;
        memcpy(&x, (const char *)ta->data + 4 * i, 4);
        memcpy(&y, (const char *)tb->data + 4 * i, 4);
        assert_true(x == (float)i);
        assert_true(y == (float)(8 + i));
    }
    ember_gguf_close(g);

    assert_int_equal(ember_gguf_open(MALFORMED_DIR "valid_nested_depth_16.gguf", &g), EMBER_OK);
    assert_int_equal(ember_gguf_get_arr(g, "n", &a), EMBER_OK);
    for (int d = 0; d < 16; d++) {
        assert_int_equal(a.type, EMBER_GGUF_ARRAY);
        ember_gguf_arr sub;
        assert_int_equal(ember_gguf_arr_sub(&a, 0, &sub), EMBER_OK);
        a = sub;
    }
    assert_int_equal(a.type, EMBER_GGUF_U8);
    assert_int_equal(ember_gguf_arr_scalar(&a, 0).u, 1);
    ember_gguf_close(g);
}

/* Every row of expected.tsv: the status and a substring of the message, both
 * through the mmap path and through an exact-size heap copy. */
static void test_malformed_manifest(void **state)
{
    (void)state;
    FILE *f = fopen(MALFORMED_DIR "expected.tsv", "r");
    assert_non_null(f);
    char line[1024];
    int n_bad = 0, n_rows = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#') continue;
        line[strcspn(line, "\n")] = '\0';
        char *name = line, *status = strchr(name, '\t');
        assert_non_null(status);
        *status++ = '\0';
        char *sub = strchr(status, '\t');
        assert_non_null(sub);
        *sub++ = '\0';
        char path[1200];
        snprintf(path, sizeof path, MALFORMED_DIR "%s", name);
        n_rows++;

        for (int via_memory = 0; via_memory < 2; via_memory++) {
            ember_gguf *g = NULL;
            ember_status s;
            void *buf = NULL;
            ember_clear_error();
            if (via_memory) {
                size_t n;
                buf = read_all(path, &n);
                s = ember_gguf_open_memory(buf, n, &g);
            } else {
                s = ember_gguf_open(path, &g);
            }
            if (strcmp(ember_status_name(s), status) || !strstr(ember_last_error(), sub)) {
                fprintf(stderr, "%s: want %s '%s', got %s '%s'\n", name, status, sub, ember_status_name(s),
                        ember_last_error());
                fail();
            }
            if (s == EMBER_OK) {
                assert_non_null(g);
                ember_gguf_close(g);
            } else {
                assert_null(g);
                assert_non_null(strstr(ember_last_error(), "gguf:"));
                assert_non_null(strstr(ember_last_error(), "byte offset"));
                if (!via_memory) n_bad++;
            }
            free(buf);
        }
    }
    fclose(f);
    assert_true(n_bad >= 20);
    assert_true(n_rows > n_bad);
}

/* Every prefix of a valid file that cuts into its last tensor's bytes fails
 * cleanly (the trailing padding after the last tensor is optional). */
static void truncations(const void *buf, size_t n)
{
    ember_gguf *g0 = open_buf(buf, n);
    const ember_gguf_tensor *last = ember_gguf_tensor_at(g0, ember_gguf_n_tensors(g0) - 1);
    size_t end = (size_t)(ember_gguf_data_offset(g0) + last->offset + last->nbytes);
    ember_gguf_close(g0);
    assert_true(end <= n && end > n - 32);
    for (size_t k = 0; k < end; k++) {
        void *copy = malloc(k ? k : 1);
        memcpy(copy, buf, k);
        ember_gguf *g = NULL;
        ember_status s = ember_gguf_open_memory(copy, k, &g);
        if (s == EMBER_OK) {
            fprintf(stderr, "prefix of %zu/%zu bytes accepted\n", k, n);
            fail();
        }
        assert_int_equal(s, EMBER_ERR_FORMAT);
        assert_non_null(strstr(ember_last_error(), "byte offset"));
        free(copy);
    }
}

static void test_every_truncation_fails(void **state)
{
    (void)state;
    ember_gguf_writer *w = make_writer(0, 3);
    void *buf;
    size_t n;
    assert_int_equal(ember_gguf_writer_write_buffer(w, &buf, &n), EMBER_OK);
    ember_gguf_writer_free(w);
    truncations(buf, n);
    free(buf);
    size_t m;
    void *py = read_all(MALFORMED_DIR "valid_two_tensors.gguf", &m);
    truncations(py, m);
    free(py);
}

/* Corrupting any single header byte never crashes (the outcome may be OK). */
static void test_single_byte_corruptions(void **state)
{
    (void)state;
    ember_gguf_writer *w = make_writer(0, 3);
    void *buf;
    size_t n;
    assert_int_equal(ember_gguf_writer_write_buffer(w, &buf, &n), EMBER_OK);
    ember_gguf_writer_free(w);
    uint8_t *copy = malloc(n);
    static const uint8_t vals[] = {0x00, 0x01, 0x07, 0x0d, 0x7f, 0x80, 0xff};
    ember_gguf *g0 = open_buf(buf, n);
    size_t header_end = (size_t)ember_gguf_data_offset(g0);
    ember_gguf_close(g0);
    int accepted = 0;
    for (size_t i = 0; i < header_end; i++) {
        for (size_t v = 0; v < sizeof vals; v++) {
            memcpy(copy, buf, n);
            copy[i] = vals[v];
            ember_gguf *g = NULL;
            if (ember_gguf_open_memory(copy, n, &g) == EMBER_OK) {
                accepted++;
                ember_gguf_close(g);
            }
        }
    }
    assert_true(accepted > 0); /* e.g. value bytes: still a valid file */
    free(copy);
    free(buf);
}

static void test_null_arguments(void **state)
{
    (void)state;
    ember_gguf *g;
    assert_int_equal(ember_gguf_open_memory(NULL, 4, &g), EMBER_ERR_INVALID_ARG);
    assert_int_equal(ember_gguf_open_memory("GG", 2, NULL), EMBER_ERR_INVALID_ARG);
    assert_int_equal(ember_gguf_open_memory(NULL, 0, &g), EMBER_ERR_FORMAT);
    assert_int_equal(ember_gguf_open(NULL, &g), EMBER_ERR_INVALID_ARG);
    assert_string_equal(ember_gguf_vtype_name(EMBER_GGUF_F64), "f64");
    assert_string_equal(ember_gguf_vtype_name((ember_gguf_vtype)13), "?");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_v3_default_alignment),
        cmocka_unit_test(test_round_trip_v2),
        cmocka_unit_test(test_round_trip_alignment_1),
        cmocka_unit_test(test_round_trip_alignment_64),
        cmocka_unit_test(test_round_trip_alignment_4096),
        cmocka_unit_test(test_write_file_and_mmap),
        cmocka_unit_test(test_writer_rejects_bad_input),
        cmocka_unit_test(test_large_string_array),
        cmocka_unit_test(test_many_keys_and_tensors),
        cmocka_unit_test(test_python_made_valid_file),
        cmocka_unit_test(test_malformed_manifest),
        cmocka_unit_test(test_every_truncation_fails),
        cmocka_unit_test(test_single_byte_corruptions),
        cmocka_unit_test(test_null_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
