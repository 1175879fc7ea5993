/*
 * fuzz_grammar.c — libFuzzer target for the GBNF parser, the matcher and the
 * JSON-schema compiler.
 *
 * Input: the first byte picks the mode. Mode 0: the rest is GBNF; if it
 * parses, the matcher runs over a small fixed vocabulary (masks, token and
 * byte acceptance driven by the input's own bytes). Mode 1: the rest is JSON;
 * if it is a schema that compiles, the generated GBNF must parse (a failure
 * there is a compiler bug: trap). Must not: keep state between inputs.
 * Build: make fuzz; run: build-fuzz/fuzz/fuzz_grammar CORPUS_DIR.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sample/grammar.h"
#include "sample/json_schema.h"

static const char *const PIECES[] = {
    "", "{", "}", "\"", "a", "ab", "\xC3", "\xA9", "\xC3\xA9", " ", "\n", "1", "[", "]", ",", ":", "x\"", "",
};
static const char *const TEXTS[] = {
    "<eos>", "{", "}", "\"", "a", "ab", "\xC3", "\xA9", "\xC3\xA9", " ", "\n", "1", "[", "]", ",", ":", "x\"", "<|c>",
};
#define NV ((int32_t)(sizeof PIECES / sizeof *PIECES))

static ember_grammar_vocab *vocab(void)
{
    static ember_grammar_vocab *tv;
    if (!tv) {
        size_t lens[NV], tl[NV];
        bool eog[NV];
        for (int32_t i = 0; i < NV; i++) { lens[i] = strlen(PIECES[i]); tl[i] = strlen(TEXTS[i]); eog[i] = i == 0; }
        if (ember_grammar_vocab_new(PIECES, lens, TEXTS, tl, NV, eog, &tv)) __builtin_trap();
    }
    return tv;
}

static void run_grammar(const uint8_t *d, size_t n)
{
    ember_grammar *g;
    if (ember_grammar_parse((const char *)d, n, NULL, &g) != EMBER_OK) return;
    ember_grammar_state *st;
    if (ember_grammar_state_new(g, vocab(), &st) == EMBER_OK) {
        for (size_t i = 0; i < n && i < 64; i++) {
            const uint32_t *m;
            int32_t na;
            if (ember_grammar_mask(st, &m, &na) != EMBER_OK) break;
            ember_token t = (ember_token)(d[i] % NV);
            bool bit = (m[t >> 5] >> (t & 31)) & 1;
            if (ember_grammar_token_allowed(st, t) != bit) __builtin_trap();
            if (bit) { if (ember_grammar_accept(st, t) != EMBER_OK) __builtin_trap(); }
            else if (ember_grammar_accept(st, t) == EMBER_OK) __builtin_trap();
            if (ember_grammar_is_done(st)) break;
        }
        ember_grammar_state_free(st);
    }
    if (ember_grammar_state_new(g, NULL, &st) == EMBER_OK) {
        (void)ember_grammar_accept_bytes(st, (const char *)d, n);
        (void)ember_grammar_can_end(st);
        ember_grammar_state_free(st);
    }
    ember_grammar_free(g);
}

static void run_schema(const uint8_t *d, size_t n)
{
    json_t *s = json_loadb((const char *)d, n, JSON_DECODE_ANY, NULL);
    if (!s) return;
    char *gb = NULL;
    if (ember_json_schema_to_gbnf(s, &gb) == EMBER_OK) {
        ember_grammar *g;
        if (ember_grammar_parse(gb, strlen(gb), NULL, &g) != EMBER_OK) __builtin_trap();
        ember_grammar_free(g);
        free(gb);
    }
    char *r = NULL;
    if (json_is_object(s) && ember_grammar_from_request(s, &r) == EMBER_OK) free(r);
    json_decref(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 4096) return 0;
    if (data[0] & 1) run_schema(data + 1, size - 1);
    else run_grammar(data + 1, size - 1);
    return 0;
}
