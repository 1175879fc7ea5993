/* Tokenizer unit tests on small vocabularies built in memory with the GGUF
 * writer: loading errors (each names its key), special-token rules, the
 * streaming detokenizer, and robustness on random bytes.
 *
 * Expected values: the special-token and byte-fallback rules are those of
 * llama.cpp's llama-vocab.cpp (CONTROL tokens only with parse_special,
 * USER_DEFINED always; SPM falls back to <0xXX>); the stream properties are
 * checked against the input text itself. Token-id agreement with llama.cpp
 * on real models is tests/e2e/test_tokenizer.py. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

/* --- building vocabularies ---------------------------------------------- */

typedef struct spec {
    const char *model;           /* NULL: key absent */
    const char *pre;
    int n_extra;                 /* extra tokens after the 256 byte tokens */
    const char *const *extra;
    const int32_t *extra_type;
    const char *const *merges;
    int n_merges;
    bool tokens_wrong_type;
    bool scores_short;
    bool types_wrong_type;
    bool no_tokens;
} spec;

static ember_gguf *build(const spec *s, void **buf_out)
{
    ember_gguf_writer *w;
    assert_int_equal(ember_gguf_writer_new(0, &w), EMBER_OK);
    if (s->model) assert_int_equal(ember_gguf_writer_set_str(w, "tokenizer.ggml.model", s->model), EMBER_OK);
    if (s->pre) assert_int_equal(ember_gguf_writer_set_str(w, "tokenizer.ggml.pre", s->pre), EMBER_OK);
    int n = 4 + 256 + s->n_extra;
    const char **toks = calloc((size_t)n, sizeof *toks);
    char (*bytes)[8] = calloc(256, 8);
    int32_t *types = calloc((size_t)n, sizeof *types);
    float *scores = calloc((size_t)n, sizeof *scores);
    const char *base[4] = {"<unk>", "<s>", "</s>", "<ctl>"};
    int32_t base_t[4] = {2, 3, 3, 3};
    for (int i = 0; i < 4; i++) { toks[i] = base[i]; types[i] = base_t[i]; }
    for (int b = 0; b < 256; b++) {
        snprintf(bytes[b], 8, "<0x%02X>", b);
        toks[4 + b] = bytes[b];
        types[4 + b] = 6;
    }
    for (int i = 0; i < s->n_extra; i++) {
        toks[260 + i] = s->extra[i];
        types[260 + i] = s->extra_type ? s->extra_type[i] : 1;
        scores[260 + i] = -(float)i;   /* earlier extra tokens merge first */
    }
    if (!s->no_tokens) {
        if (s->tokens_wrong_type) {
            assert_int_equal(ember_gguf_writer_set_arr(w, "tokenizer.ggml.tokens", EMBER_GGUF_I32, types, (uint64_t)n), EMBER_OK);
        } else {
            assert_int_equal(ember_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, (uint64_t)n), EMBER_OK);
        }
    }
    assert_int_equal(ember_gguf_writer_set_arr(w, "tokenizer.ggml.scores", EMBER_GGUF_F32, scores,
                                               (uint64_t)(s->scores_short ? n - 1 : n)), EMBER_OK);
    if (s->types_wrong_type)
        assert_int_equal(ember_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", EMBER_GGUF_F32, scores, (uint64_t)n), EMBER_OK);
    else
        assert_int_equal(ember_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", EMBER_GGUF_I32, types, (uint64_t)n), EMBER_OK);
    if (s->merges)
        assert_int_equal(ember_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", s->merges, (uint64_t)s->n_merges), EMBER_OK);
    assert_int_equal(ember_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1), EMBER_OK);
    assert_int_equal(ember_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2), EMBER_OK);
    assert_int_equal(ember_gguf_writer_set_bool(w, "tokenizer.ggml.add_space_prefix", false), EMBER_OK);
    void *buf;
    size_t size;
    assert_int_equal(ember_gguf_writer_write_buffer(w, &buf, &size), EMBER_OK);
    ember_gguf_writer_free(w);
    free(toks);
    free(bytes);
    free(types);
    free(scores);
    ember_gguf *g;
    assert_int_equal(ember_gguf_open_memory(buf, size, &g), EMBER_OK);
    *buf_out = buf;
    return g;
}

static ember_status load(const spec *s, ember_vocab **v)
{
    void *buf;
    ember_gguf *g = build(s, &buf);
    ember_status st = ember_vocab_load(g, v);
    ember_gguf_close(g);
    free(buf);
    return st;
}

/* SPM vocabulary: bytes, a few pieces, a user-defined and a control token */
static const char *const SPM_EXTRA[] = {"\xe2\x96\x81", "a", "b", "ab", "\xe2\x96\x81" "ab", "<ud>", "c"};
static const int32_t SPM_EXTRA_T[] = {1, 1, 1, 1, 1, 4, 1};
#define ID(k) (260 + (k))

static ember_vocab *spm_vocab(void)
{
    spec s = {.model = "llama", .n_extra = 7, .extra = SPM_EXTRA, .extra_type = SPM_EXTRA_T};
    ember_vocab *v;
    assert_int_equal(load(&s, &v), EMBER_OK);
    return v;
}

static size_t tok(const ember_vocab *v, const char *text, bool add, bool parse, ember_token *out, size_t cap)
{
    ember_token *ids;
    size_t n;
    assert_int_equal(ember_tokenize(v, text, strlen(text), add, parse, &ids, &n), EMBER_OK);
    assert_true(n <= cap);
    memcpy(out, ids, n * sizeof *ids);
    free(ids);
    return n;
}

/* --- tests ----------------------------------------------------------------- */

static void test_load_errors_name_the_key(void **state)
{
    (void)state;
    ember_vocab *v = (ember_vocab *)1;
    spec s = {0};
    assert_int_equal(load(&s, &v), EMBER_ERR_NOT_FOUND);
    assert_non_null(strstr(ember_last_error(), "tokenizer.ggml.model"));
    assert_null(v);

    s = (spec){.model = "wordpiece9"};
    assert_int_equal(load(&s, &v), EMBER_ERR_UNSUPPORTED);
    assert_non_null(strstr(ember_last_error(), "wordpiece9"));

    s = (spec){.model = "llama", .no_tokens = true};
    assert_int_equal(load(&s, &v), EMBER_ERR_NOT_FOUND);
    assert_non_null(strstr(ember_last_error(), "tokenizer.ggml.tokens"));

    s = (spec){.model = "llama", .tokens_wrong_type = true};
    assert_int_equal(load(&s, &v), EMBER_ERR_FORMAT);
    assert_non_null(strstr(ember_last_error(), "tokenizer.ggml.tokens"));

    s = (spec){.model = "llama", .scores_short = true};
    assert_int_equal(load(&s, &v), EMBER_ERR_FORMAT);
    assert_non_null(strstr(ember_last_error(), "tokenizer.ggml.scores"));

    s = (spec){.model = "llama", .types_wrong_type = true};
    assert_int_equal(load(&s, &v), EMBER_ERR_FORMAT);
    assert_non_null(strstr(ember_last_error(), "tokenizer.ggml.token_type"));

    s = (spec){.model = "gpt2", .pre = "smollm"};
    assert_int_equal(load(&s, &v), EMBER_ERR_NOT_FOUND);
    assert_non_null(strstr(ember_last_error(), "tokenizer.ggml.merges"));

    static const char *const merges[] = {"a b"};
    s = (spec){.model = "gpt2", .pre = "no-such-pre", .merges = merges, .n_merges = 1};
    assert_int_equal(load(&s, &v), EMBER_ERR_UNSUPPORTED);
    assert_non_null(strstr(ember_last_error(), "no-such-pre"));

    assert_int_equal(ember_vocab_load(NULL, &v), EMBER_ERR_INVALID_ARG);
}

static void test_spm_merges_and_byte_fallback(void **state)
{
    (void)state;
    ember_vocab *v = spm_vocab();
    ember_token ids[64];
    /* " ab" -> "▁ab" (one token); "c" -> c; "é" (not in vocab) -> <0xC3><0xA9> */
    size_t n = tok(v, " abcé", false, false, ids, 64);
    assert_int_equal(n, 4);
    assert_int_equal(ids[0], ID(4));
    assert_int_equal(ids[1], ID(6));
    assert_int_equal(ids[2], 4 + 0xC3);
    assert_int_equal(ids[3], 4 + 0xA9);
    /* add_special: BOS (add_bos defaults to true for SPM), no EOS */
    n = tok(v, "", true, false, ids, 64);
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], 1);
    n = tok(v, "", false, false, ids, 64);
    assert_int_equal(n, 0);
    assert_int_equal(ember_vocab_bos(v), 1);
    assert_int_equal(ember_vocab_eos(v), 2);
    assert_true(ember_vocab_is_eog(v, 2));   /* EOS and "</s>" end a generation */
    assert_false(ember_vocab_is_eog(v, ID(1)));
    assert_int_equal(ember_vocab_n_tokens(v), 267);
    assert_int_equal(ember_vocab_find(v, "ab", 2), ID(3));
    assert_int_equal(ember_vocab_find(v, "zz", 2), -1);
    ember_vocab_free(v);
}

static void test_control_tokens_only_when_asked(void **state)
{
    (void)state;
    ember_vocab *v = spm_vocab();
    ember_token ids[64];
    /* control "<ctl>" stays text (bytes/pieces) unless parse_special */
    size_t n = tok(v, "<ctl>", false, false, ids, 64);
    for (size_t i = 0; i < n; i++) assert_int_not_equal(ids[i], 3);
    assert_true(n >= 2);
    n = tok(v, "<ctl>", false, true, ids, 64);
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], 3);
    /* user-defined "<ud>" is recognised either way */
    n = tok(v, "a<ud>b", false, false, ids, 64);
    assert_int_equal(n, 3);
    assert_int_equal(ids[0], ID(1));
    assert_int_equal(ids[1], ID(5));
    assert_int_equal(ids[2], ID(2));
    assert_true(ember_vocab_is_control(v, 3));
    assert_true(ember_vocab_attr(v, ID(5)) & EMBER_TOKEN_USER_DEFINED);
    /* pieces: control text only with special */
    size_t l;
    ember_token_to_piece(v, 3, false, &l);
    assert_int_equal(l, 0);
    const char *p = ember_token_to_piece(v, 3, true, &l);
    assert_int_equal(l, 5);
    assert_memory_equal(p, "<ctl>", 5);
    p = ember_token_to_piece(v, ID(4), false, &l);   /* "▁ab" -> " ab" */
    assert_int_equal(l, 3);
    assert_memory_equal(p, " ab", 3);
    p = ember_token_to_piece(v, 4 + 0xC3, false, &l);
    assert_int_equal(l, 1);
    assert_int_equal((unsigned char)p[0], 0xC3);
    assert_null(ember_token_to_piece(v, 100000, true, &l));
    ember_vocab_free(v);
}

/* Feed the byte tokens of `text` one by one; check that nothing is emitted
 * inside a character and that the concatenation is `want`. */
static void stream_bytes(const ember_vocab *v, const char *text, size_t n, const char *want, size_t want_n)
{
    ember_detok d;
    ember_detok_init(&d, v, false);
    char out[256];
    size_t k = 0;
    for (size_t i = 0; i <= n; i++) {
        const char *p;
        size_t l;
        if (i < n) assert_int_equal(ember_detok_push(&d, 4 + (unsigned char)text[i], &p, &l), EMBER_OK);
        else assert_int_equal(ember_detok_flush(&d, &p, &l), EMBER_OK);
        assert_true(k + l <= sizeof out);
        memcpy(out + k, p, l);
        k += l;
    }
    ember_detok_free(&d);
    assert_int_equal(k, want_n);
    assert_memory_equal(out, want, want_n);
}

static void test_stream_holds_partial_utf8(void **state)
{
    (void)state;
    ember_vocab *v = spm_vocab();
    /* valid text comes out unchanged, never a U+FFFD */
    const char *s = "a\xc3\xa9\xe6\x97\xa5\xf0\x9f\x98\x80z";
    stream_bytes(v, s, strlen(s), s, strlen(s));
    /* each emitted chunk is whole characters: check the emission points */
    ember_detok d;
    ember_detok_init(&d, v, false);
    const char *p;
    size_t l;
    assert_int_equal(ember_detok_push(&d, 4 + 0xF0, &p, &l), EMBER_OK);
    assert_int_equal(l, 0);
    assert_int_equal(ember_detok_push(&d, 4 + 0x9F, &p, &l), EMBER_OK);
    assert_int_equal(l, 0);
    assert_int_equal(ember_detok_push(&d, 4 + 0x98, &p, &l), EMBER_OK);
    assert_int_equal(l, 0);
    assert_int_equal(ember_detok_push(&d, 4 + 0x80, &p, &l), EMBER_OK);
    assert_int_equal(l, 4);
    assert_memory_equal(p, "\xf0\x9f\x98\x80", 4);
    /* a control token in between (empty piece) does not break the hold */
    assert_int_equal(ember_detok_push(&d, 4 + 0xC3, &p, &l), EMBER_OK);
    assert_int_equal(l, 0);
    assert_int_equal(ember_detok_push(&d, 3, &p, &l), EMBER_OK);
    assert_int_equal(l, 0);
    assert_int_equal(ember_detok_push(&d, 4 + 0xA9, &p, &l), EMBER_OK);
    assert_int_equal(l, 2);
    assert_int_equal(ember_detok_push(&d, -1, &p, &l), EMBER_ERR_INVALID_ARG);
    ember_detok_free(&d);
    /* ill-formed bytes become U+FFFD one per byte; an unfinished tail too */
    const char bad[] = "x\x80y\xc3z\xe6\x97";
    stream_bytes(v, bad, sizeof bad - 1,
                 "x\xef\xbf\xbdy\xef\xbf\xbdz\xef\xbf\xbd\xef\xbf\xbd", 15);
    const char over[] = "\xc0\xaf\xed\xa0\x80";   /* overlong '/', surrogate */
    stream_bytes(v, over, sizeof over - 1,
                 "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd", 15);
    ember_vocab_free(v);
}

static void test_detokenize(void **state)
{
    (void)state;
    ember_vocab *v = spm_vocab();
    ember_token ids[] = {1, ID(4), ID(6), 3, 4 + 0xC3, 4 + 0xA9};
    char *s;
    size_t n;
    assert_int_equal(ember_detokenize(v, ids, 6, false, &s, &n), EMBER_OK);
    assert_string_equal(s, " abc\xc3\xa9");
    free(s);
    assert_int_equal(ember_detokenize(v, ids, 6, true, &s, &n), EMBER_OK);
    assert_string_equal(s, "<s> abc<ctl>\xc3\xa9");
    free(s);
    ember_token bad[] = {ID(1), 9999};
    assert_int_equal(ember_detokenize(v, bad, 2, false, &s, &n), EMBER_ERR_INVALID_ARG);
    ember_vocab_free(v);
}

static const char *const BPE_EXTRA[] = {"a", "b", "\xc4\xa0", "ab", "\xc4\xa0" "ab", "1", "2", "<|im_start|>"};
static const int32_t BPE_EXTRA_T[] = {1, 1, 1, 1, 1, 1, 1, 3};
static const char *const BPE_MERGES[] = {"a b", "\xc4\xa0 ab"};

static void test_bpe_smollm_and_random_bytes(void **state)
{
    (void)state;
    spec s = {.model = "gpt2", .pre = "smollm", .n_extra = 8, .extra = BPE_EXTRA, .extra_type = BPE_EXTRA_T,
              .merges = BPE_MERGES, .n_merges = 2};
    ember_vocab *v;
    assert_int_equal(load(&s, &v), EMBER_OK);
    assert_int_equal(ember_vocab_get_type(v), EMBER_VOCAB_BPE);
    assert_string_equal(ember_vocab_pre(v), "smollm");
    ember_token ids[64];
    /* "ab ab12": words "ab", " ab", "1", "2" (digits split one by one) */
    size_t n = tok(v, "ab ab12", false, false, ids, 64);
    assert_int_equal(n, 4);
    assert_int_equal(ids[0], ID(3));
    assert_int_equal(ids[1], ID(4));
    assert_int_equal(ids[2], ID(5));
    assert_int_equal(ids[3], ID(6));
    /* control token: never from user text, yes when parsing specials */
    n = tok(v, "<|im_start|>", false, false, ids, 64);
    for (size_t i = 0; i < n; i++) assert_int_not_equal(ids[i], ID(7));
    n = tok(v, "<|im_start|>ab", false, true, ids, 64);
    assert_int_equal(n, 2);
    assert_int_equal(ids[0], ID(7));
    size_t l;
    const char *p = ember_token_to_piece(v, ID(4), false, &l);   /* "Ġab" -> " ab" */
    assert_int_equal(l, 3);
    assert_memory_equal(p, " ab", 3);

    /* random bytes: no crash, no leak, ids in range, both vocab kinds */
    ember_vocab *spm = spm_vocab();
    unsigned seed = 12345;
    char buf[512];
    for (int it = 0; it < 400; it++) {
        size_t len = (size_t)(it % 97) * 5;
        for (size_t i = 0; i < len; i++) {
            seed = seed * 1103515245u + 12345u;
            buf[i] = (char)(seed >> 16);
            if ((seed >> 8) % 7 == 0) buf[i] = ' ';
        }
        for (int k = 0; k < 2; k++) {
            const ember_vocab *vv = k ? spm : v;
            ember_token *out;
            size_t no;
            assert_int_equal(ember_tokenize(vv, buf, len, true, it & 1, &out, &no), EMBER_OK);
            for (size_t i = 0; i < no; i++) assert_true(out[i] >= 0 && out[i] < ember_vocab_n_tokens(vv));
            char *dec;
            size_t dl;
            assert_int_equal(ember_detokenize(vv, out, no, false, &dec, &dl), EMBER_OK);
            if (k) assert_true(dl >= len);   /* SPM gives every byte back (a space maybe as U+2581) */
            free(dec);
            free(out);
        }
    }
    ember_vocab_free(spm);
    ember_vocab_free(v);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_load_errors_name_the_key),
        cmocka_unit_test(test_spm_merges_and_byte_fallback),
        cmocka_unit_test(test_control_tokens_only_when_asked),
        cmocka_unit_test(test_stream_holds_partial_utf8),
        cmocka_unit_test(test_detokenize),
        cmocka_unit_test(test_bpe_smollm_and_random_bytes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
