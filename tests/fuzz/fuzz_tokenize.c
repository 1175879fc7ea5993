/*
 * fuzz_tokenize.c — libFuzzer target for the tokenizer.
 *
 * Two modes, chosen by the input's first byte:
 *  - 'G': the rest is a GGUF file; if the reader accepts it, build a vocab
 *    from it (any metadata, however odd) and tokenize a fixed text.
 *  - else: the rest is text, tokenized with one of four small in-memory
 *    vocabularies (SPM, BPE smollm, BPE qwen2, gemma4) chosen by the byte's
 *    low bits, add_special/parse_special from two more bits, an untrusted
 *    mask (ember_tokenize_ex) from bit 4; the ids must be
 *    in range, and both detokenize and the streaming detokenizer (fed token
 *    by token) must run; the stream's output must be well-formed UTF-8.
 * Must not: keep state between inputs (the vocabularies are built once and
 * are read-only).
 * Build: make fuzz; run: build-fuzz/fuzz/fuzz_tokenize CORPUS_DIR (README.md).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

static ember_vocab *vocabs[4];

static const char *const EXTRA[] = {
    "\xe2\x96\x81", "a", "b", "ab", "\xe2\x96\x81" "ab", "<ud>", "\xc4\xa0", "\xc4\xa0" "ab", "1", "12",
    "\xe6\x97\xa5", "\n", "\n\n", "<|im_start|>", "<ctl>",
};
static const int32_t EXTRA_T[] = {1, 1, 1, 1, 1, 4, 1, 1, 1, 1, 1, 1, 1, 3, 3};
static const char *const MERGES[] = {
    "a b", "\xc4\xa0 ab", "1 2", "\xe2\x96\x81 ab", "\n \n",
};

static ember_vocab *make(const char *model, const char *pre)
{
    ember_gguf_writer *w;
    if (ember_gguf_writer_new(0, &w)) abort();
    enum { NE = sizeof EXTRA / sizeof EXTRA[0] };
    const char *toks[3 + 256 + NE];
    char bytes[256][8];
    int32_t types[3 + 256 + NE];
    float scores[3 + 256 + NE];
    toks[0] = "<unk>"; toks[1] = "<s>"; toks[2] = "</s>";
    types[0] = 2; types[1] = 3; types[2] = 3;
    for (int b = 0; b < 256; b++) {
        snprintf(bytes[b], 8, "<0x%02X>", b);
        toks[3 + b] = bytes[b];
        types[3 + b] = 6;
    }
    for (int i = 0; i < NE; i++) {
        toks[259 + i] = EXTRA[i];
        types[259 + i] = EXTRA_T[i];
    }
    for (int i = 0; i < 3 + 256 + NE; i++) scores[i] = -(float)i;
    ember_gguf_writer_set_str(w, "tokenizer.ggml.model", model);
    if (pre) ember_gguf_writer_set_str(w, "tokenizer.ggml.pre", pre);
    ember_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, 3 + 256 + NE);
    ember_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", EMBER_GGUF_I32, types, 3 + 256 + NE);
    ember_gguf_writer_set_arr(w, "tokenizer.ggml.scores", EMBER_GGUF_F32, scores, 3 + 256 + NE);
    ember_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", MERGES, sizeof MERGES / sizeof MERGES[0]);
    ember_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1);
    ember_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
    ember_gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", true);
    void *buf;
    size_t size;
    if (ember_gguf_writer_write_buffer(w, &buf, &size)) abort();
    ember_gguf_writer_free(w);
    ember_gguf *g;
    ember_vocab *v;
    if (ember_gguf_open_memory(buf, size, &g) || ember_vocab_load(g, &v)) abort();
    ember_gguf_close(g);
    free(buf);
    return v;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc; (void)argv;
    vocabs[0] = make("llama", NULL);
    vocabs[1] = make("gpt2", "smollm");
    vocabs[2] = make("gpt2", "qwen2");
    vocabs[3] = make("gemma4", NULL);
    return 0;
}

static int utf8_ok(const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t l = c < 0x80 ? 1 : (c >= 0xC2 && c <= 0xDF) ? 2 : (c >= 0xE0 && c <= 0xEF) ? 3 : (c >= 0xF0 && c <= 0xF4) ? 4 : 0;
        if (!l || i + l > n) return 0;
        for (size_t k = 1; k < l; k++) if ((s[i + k] & 0xC0) != 0x80) return 0;
        if (c == 0xE0 && s[i + 1] < 0xA0) return 0;
        if (c == 0xED && s[i + 1] > 0x9F) return 0;
        if (c == 0xF0 && s[i + 1] < 0x90) return 0;
        if (c == 0xF4 && s[i + 1] > 0x8F) return 0;
        i += l;
    }
    return 1;
}

static void run(const ember_vocab *v, const char *text, size_t n, bool add, bool parse, bool masked)
{
    ember_token *ids;
    size_t nid;
    uint8_t *mask = NULL;
    if (masked) {   /* untrusted where the byte's low bit is set */
        mask = malloc(n ? n : 1);
        if (!mask) return;
        for (size_t i = 0; i < n; i++) mask[i] = (uint8_t)(text[i] & 1);
    }
    ember_status st = ember_tokenize_ex(v, text, n, add, parse, mask, &ids, &nid);
    free(mask);
    if (st) return;
    int32_t nv = ember_vocab_n_tokens(v);
    for (size_t i = 0; i < nid; i++) if (ids[i] < 0 || ids[i] >= nv) __builtin_trap();
    char *dec;
    size_t dl;
    if (ember_detokenize(v, ids, nid, true, &dec, &dl) == EMBER_OK) free(dec);
    ember_detok d;
    ember_detok_init(&d, v, false);
    for (size_t i = 0; i <= nid; i++) {
        const char *p;
        size_t l;
        ember_status st = i < nid ? ember_detok_push(&d, ids[i], &p, &l) : ember_detok_flush(&d, &p, &l);
        if (st) __builtin_trap();
        if (!utf8_ok((const unsigned char *)p, l)) __builtin_trap();
    }
    ember_detok_free(&d);
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    uint8_t mode = data[0];
    char *copy = malloc(size - 1 + 1);   /* exact-size heap copy: ASan sees over-reads */
    if (!copy) return 0;
    memcpy(copy, data + 1, size - 1);
    if (mode == 'G') {
        ember_gguf *g;
        if (ember_gguf_open_memory(copy, size - 1, &g) == EMBER_OK) {
            ember_vocab *v;
            if (ember_vocab_load(g, &v) == EMBER_OK) {
                ember_gguf_close(g);
                g = NULL;
                static const char t[] = "Hello  world <s> 12\n\n\xe6\x97\xa5\xff";
                run(v, t, sizeof t - 1, true, true, false);
                run(v, t, sizeof t - 1, false, false, false);
                ember_vocab_free(v);
            }
            if (g) ember_gguf_close(g);
        }
    } else {
        run(vocabs[mode & 3], copy, size - 1, (mode >> 2) & 1, (mode >> 3) & 1, (mode >> 4) & 1);
    }
    free(copy);
    return 0;
}
