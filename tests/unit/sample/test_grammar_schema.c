/* JSON Schema compiler tests and token-level checks on Gemma 3's vocabulary.
 *
 * Oracles: for each schema of tests/golden/json_schema/cases.json (made by
 * make_goldens.py there with Python's `jsonschema`), the compiled grammar
 * must accept exactly the texts jsonschema calls valid. On the real Gemma 3
 * vocabulary (skipped when ~/.cache/ember/models/gemma-3-270m-q4_k_m.gguf is
 * absent), random walks over allowed tokens must keep the text a prefix of
 * JSON that jansson (an independent parser) accepts once EOS is allowed. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "sample/grammar.h"
#include "sample/json_schema.h"
#include "tokenizer/tokenizer.h"

static ember_grammar *compile(const json_t *schema)
{
    char *gbnf = NULL;
    ember_status s = ember_json_schema_to_gbnf(schema, &gbnf);
    if (s) fail_msg("compile: %s", ember_last_error());
    ember_grammar *g = NULL;
    s = ember_grammar_parse(gbnf, strlen(gbnf), NULL, &g);
    if (s) fail_msg("parse of generated grammar: %s\n%s", ember_last_error(), gbnf);
    free(gbnf);
    return g;
}

static bool accepts(const ember_grammar *g, const char *t)
{
    ember_grammar_state *st;
    assert_int_equal(ember_grammar_state_new(g, NULL, &st), EMBER_OK);
    bool ok = ember_grammar_accept_bytes(st, t, strlen(t)) == EMBER_OK && ember_grammar_can_end(st);
    ember_grammar_state_free(st);
    return ok;
}

static void test_schema_goldens(void **unused)
{
    json_error_t je;
    json_t *all = json_load_file("tests/golden/json_schema/cases.json", 0, &je);
    if (!all) fail_msg("cases.json: %s", je.text);
    assert_true(json_array_size(all) >= 30);
    size_t i, n = 0, n_valid = 0;
    json_t *c;
    json_array_foreach(all, i, c) {
        ember_grammar *g = compile(json_object_get(c, "schema"));
        size_t j; json_t *in;
        json_array_foreach(json_object_get(c, "instances"), j, in) {
            const char *t = json_string_value(json_object_get(in, "text"));
            bool want = json_is_true(json_object_get(in, "valid"));
            if (accepts(g, t) != want)
                fail_msg("%s: grammar %s, jsonschema %s: %s", json_string_value(json_object_get(c, "name")),
                         want ? "rejects" : "accepts", want ? "valid" : "invalid", t);
            n++; n_valid += want;
        }
        ember_grammar_free(g);
    }
    assert_true(n > 500 && n_valid > 200 && n - n_valid > 200);
    json_decref(all);
}

static void test_schema_errors(void **unused)
{
    struct { const char *schema; ember_status code; const char *msg; } cases[] = {
        { "{\"allOf\": [{}]}", EMBER_ERR_UNSUPPORTED, "#/allOf" },
        { "{\"$ref\": \"#/$defs/missing\"}", EMBER_ERR_NOT_FOUND, "#/$defs/missing" },
        { "{\"$ref\": \"http://x/y.json\"}", EMBER_ERR_UNSUPPORTED, "only local references" },
        { "{\"type\": \"strin\"}", EMBER_ERR_UNSUPPORTED, "#/type 'strin'" },
        { "{\"type\": \"object\", \"properties\": {\"a\": 5}}", EMBER_ERR_INVALID_ARG, "#/properties/a" },
        { "{\"type\": \"string\", \"format\": \"hostname-ish\"}", EMBER_ERR_UNSUPPORTED, "format 'hostname-ish'" },
        { "{\"type\": \"array\", \"minItems\": -1}", EMBER_ERR_INVALID_ARG, "#/minItems" },
        { "{\"enum\": []}", EMBER_ERR_INVALID_ARG, "#/enum" },
        { "{\"type\": \"string\", \"pattern\": \"(?=a)b\"}", EMBER_ERR_UNSUPPORTED, "lookaround" },
        { "{\"type\": \"string\", \"pattern\": \"(a)\\\\1\"}", EMBER_ERR_UNSUPPORTED, "\\1 is not supported" },
        { "{\"type\": \"string\", \"pattern\": \"a^b\"}", EMBER_ERR_UNSUPPORTED, "only supported at the pattern's ends" },
        { "{\"type\": \"string\", \"pattern\": \"^a|b$\"}", EMBER_ERR_UNSUPPORTED, "top-level '|'" },
        { "{\"type\": \"string\", \"pattern\": \"[a-\"}", EMBER_ERR_UNSUPPORTED, "missing ']'" },
        { "{\"type\": \"string\", \"pattern\": \"a\", \"maxLength\": 3}", EMBER_ERR_UNSUPPORTED, "pattern together" },
        { "{\"type\": \"number\", \"minimum\": 0.5}", EMBER_ERR_UNSUPPORTED, "must be integers" },
        { "{\"type\": \"integer\", \"maximum\": 1e300}", EMBER_ERR_UNSUPPORTED, "beyond 1e15" },
        { "{\"type\": \"integer\", \"minimum\": \"3\"}", EMBER_ERR_INVALID_ARG, "#/minimum" },
        { "[1]", EMBER_ERR_INVALID_ARG, "must be an object or a boolean" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        json_t *s = json_loads(cases[i].schema, JSON_DECODE_ANY, NULL);
        assert_non_null(s);
        char *out = (char *)0x1;
        ember_status st = ember_json_schema_to_gbnf(s, &out);
        if (st != cases[i].code || !strstr(ember_last_error(), cases[i].msg))
            fail_msg("case %zu: got %s '%s'", i, ember_status_name(st), ember_last_error());
        assert_null(out);
        json_decref(s);
    }
}

static char *from_request(const char *body, ember_status want)
{
    json_t *b = json_loads(body, 0, NULL);
    assert_non_null(b);
    char *out = NULL;
    ember_status s = ember_grammar_from_request(b, &out);
    if (s != want) fail_msg("%s: got %s (%s)", body, ember_status_name(s), ember_last_error());
    json_decref(b);
    return out;
}

static void test_request_fields(void **unused)
{
    assert_null(from_request("{\"messages\": []}", EMBER_OK));
    assert_null(from_request("{\"response_format\": {\"type\": \"text\"}}", EMBER_OK));
    char *gb = from_request("{\"grammar\": \"root ::= \\\"yes\\\" | \\\"no\\\"\"}", EMBER_OK);
    assert_string_equal(gb, "root ::= \"yes\" | \"no\"");
    free(gb);
    /* json_object: any object, nothing else */
    gb = from_request("{\"response_format\": {\"type\": \"json_object\"}}", EMBER_OK);
    ember_grammar *g;
    assert_int_equal(ember_grammar_parse(gb, strlen(gb), NULL, &g), EMBER_OK);
    assert_true(accepts(g, "{\"a\": [1, {\"b\": null}]}"));
    assert_false(accepts(g, "[1]"));
    assert_false(accepts(g, "\"s\""));
    ember_grammar_free(g); free(gb);
    /* OpenAI json_schema, llama.cpp json_schema, llama.cpp json_object+schema */
    const char *bodies[] = {
        "{\"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"name\": \"n\", \"strict\": true,"
        " \"schema\": {\"type\": \"object\", \"properties\": {\"ok\": {\"type\": \"boolean\"}}, \"required\": [\"ok\"], \"additionalProperties\": false}}}}",
        "{\"json_schema\": {\"type\": \"object\", \"properties\": {\"ok\": {\"type\": \"boolean\"}}, \"required\": [\"ok\"], \"additionalProperties\": false}}",
        "{\"response_format\": {\"type\": \"json_object\", \"schema\": {\"type\": \"object\", \"properties\": {\"ok\": {\"type\": \"boolean\"}}, \"required\": [\"ok\"], \"additionalProperties\": false}}}",
    };
    for (size_t i = 0; i < 3; i++) {
        gb = from_request(bodies[i], EMBER_OK);
        assert_int_equal(ember_grammar_parse(gb, strlen(gb), NULL, &g), EMBER_OK);
        assert_true(accepts(g, "{\"ok\": true}"));
        assert_false(accepts(g, "{\"ok\": 1}"));
        assert_false(accepts(g, "{}"));
        ember_grammar_free(g); free(gb);
    }
    assert_null(from_request("{\"response_format\": {\"type\": \"xml\"}}", EMBER_ERR_INVALID_ARG));
    assert_true(strstr(ember_last_error(), "response_format.type") != NULL);
    assert_null(from_request("{\"response_format\": {\"type\": \"json_schema\"}}", EMBER_ERR_INVALID_ARG));
    assert_null(from_request("{\"grammar\": 5}", EMBER_ERR_INVALID_ARG));
    assert_null(from_request("{\"grammar\": \"root ::= \\\"a\\\"\", \"json_schema\": {}}", EMBER_ERR_INVALID_ARG));
    assert_null(from_request("{\"response_format\": \"json\"}", EMBER_ERR_INVALID_ARG));
}

static void test_schema_random_input(void **unused)
{
    /* mutated schemas: never crash; whatever compiles is a grammar that parses */
    const char *base = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"array\",\"items\":{\"enum\":[1,\"x\"]},"
                       "\"minItems\":1,\"maxItems\":3},\"b\":{\"$ref\":\"#/$defs/s\"}},\"required\":[\"a\"],"
                       "\"additionalProperties\":{\"anyOf\":[{\"type\":\"string\",\"format\":\"date\"},{\"const\":null}]},"
                       "\"$defs\":{\"s\":{\"type\":\"string\",\"maxLength\":4}}}";
    size_t n = strlen(base);
    char buf[512];
    uint64_t r = 0x1234567ULL;
    int compiled = 0;
    for (int it = 0; it < 2000; it++) {
        memcpy(buf, base, n);
        for (int e = 0; e < 1 + it % 3; e++) {
            r ^= r << 13; r ^= r >> 7; r ^= r << 17;
            const char pool[] = "{}[]\":,0123456789abtxyz#/$-";
            buf[r % n] = pool[(r >> 32) % (sizeof pool - 1)];
        }
        json_t *s = json_loadb(buf, n, JSON_DECODE_ANY, NULL);
        if (!s) continue;
        char *gb = NULL;
        if (ember_json_schema_to_gbnf(s, &gb) == EMBER_OK) {
            ember_grammar *g = NULL;
            if (ember_grammar_parse(gb, strlen(gb), NULL, &g) != EMBER_OK) fail_msg("generated grammar does not parse: %s\n%s", ember_last_error(), gb);
            ember_grammar_free(g);
            free(gb);
            compiled++;
        } else assert_null(gb);
        json_decref(s);
    }
    assert_true(compiled > 10);
}

/* --- Gemma 3 vocabulary --------------------------------------------------- */

static ember_vocab *g_vocab;
static ember_grammar_vocab *g_tv;

static int load_gemma(void **unused)
{
    const char *home = getenv("HOME");
    char path[1024];
    snprintf(path, sizeof path, "%s/.cache/ember/models/gemma-3-270m-q4_k_m.gguf", home ? home : "");
    if (access(path, R_OK) != 0) return 0;
    ember_gguf *gg;
    if (ember_gguf_open(path, &gg)) return 0;
    if (ember_vocab_load(gg, &g_vocab)) { ember_gguf_close(gg); return -1; }
    ember_gguf_close(gg);
    if (ember_grammar_vocab_from_tokenizer(g_vocab, &g_tv)) return -1;
    return 0;
}

static int free_gemma(void **unused)
{
    ember_grammar_vocab_free(g_tv);
    ember_vocab_free(g_vocab);
    return 0;
}

static uint64_t rng = 0x9E3779B97F4A7C15ULL;
static uint64_t next_rand(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return rng; }

/* Random walk under grammar g: pick uniformly among allowed tokens, with a
 * bias to short structural pieces so that documents finish. Returns the
 * text (malloc'd) once EOS was taken, or NULL after max_steps. */
static char *walk(const ember_grammar *g, int max_steps, int *n_eos_checks)
{
    ember_grammar_state *st;
    assert_int_equal(ember_grammar_state_new(g, g_tv, &st), EMBER_OK);
    int32_t nv = ember_grammar_vocab_n_tokens(g_tv);
    ember_token eos = ember_vocab_eos(g_vocab);
    size_t cap = 1 << 16, len = 0;
    char *text = malloc(cap);
    int32_t *allowed = malloc((size_t)nv * sizeof *allowed);
    for (int step = 0; step < max_steps; step++) {
        const uint32_t *m; int32_t n_allowed;
        assert_int_equal(ember_grammar_mask(st, &m, &n_allowed), EMBER_OK);
        assert_true(n_allowed > 0);   /* a live state always has a way on */
        int32_t k = 0;
        bool eos_ok = false;
        for (int32_t i = 0; i < nv; i++) {
            if (!((m[i >> 5] >> (i & 31)) & 1)) continue;
            if (ember_vocab_is_eog(g_vocab, i)) { eos_ok = true; continue; }
            allowed[k++] = i;
        }
        /* EOS allowed exactly when the text so far is complete JSON */
        json_t *parsed = json_loadb(text, len, JSON_DECODE_ANY, NULL);
        if (eos_ok != (parsed != NULL)) fail_msg("EOS %s but jansson %s: '%.*s'", eos_ok ? "allowed" : "refused", parsed ? "parses" : "fails", (int)len, text);
        json_decref(parsed);
        (*n_eos_checks)++;
        if (eos_ok && (k == 0 || next_rand() % 4 == 0)) {
            assert_true(ember_grammar_token_allowed(st, eos));
            assert_int_equal(ember_grammar_accept(st, eos), EMBER_OK);
            ember_grammar_state_free(st);
            free(allowed);
            text[len] = 0;
            return text;
        }
        assert_true(k > 0);
        /* prefer pieces of <= 2 bytes half of the time */
        ember_token t = allowed[next_rand() % (uint64_t)k];
        if (next_rand() % 2) {
            for (int tries = 0; tries < 64; tries++) {
                ember_token u = allowed[next_rand() % (uint64_t)k];
                size_t pl; ember_token_to_piece(g_vocab, u, false, &pl);
                if (pl <= 2) { t = u; break; }
            }
        }
        /* the mask agrees with the per-token check: one random token each
         * step, and every token on every 16th step */
        ember_token r = (ember_token)(next_rand() % (uint64_t)nv);
        bool bit = (m[r >> 5] >> (r & 31)) & 1;
        assert_int_equal(ember_grammar_token_allowed(st, r), bit);
        if (step % 16 == 5) {
            uint32_t *copy = malloc(((size_t)nv + 31) / 32 * sizeof *copy);
            memcpy(copy, m, ((size_t)nv + 31) / 32 * sizeof *copy);   /* token_allowed may evict m */
            for (ember_token q = 0; q < nv; q++)
                if (ember_grammar_token_allowed(st, q) != (bool)((copy[q >> 5] >> (q & 31)) & 1))
                    fail_msg("step %d token %d: mask %d, token_allowed disagrees ('%.*s')", step, q, (int)((copy[q >> 5] >> (q & 31)) & 1), (int)len, text);
            free(copy);
        }
        size_t pl;
        const char *piece = ember_token_to_piece(g_vocab, t, false, &pl);
        assert_int_equal(ember_grammar_accept(st, t), EMBER_OK);
        if (len + pl + 1 > cap) break;
        memcpy(text + len, piece, pl);
        len += pl;
    }
    ember_grammar_state_free(st);
    free(allowed);
    free(text);
    return NULL;
}

static void test_gemma_json_walk(void **unused)
{
    if (!g_tv) skip();
    assert_int_equal(ember_grammar_vocab_n_tokens(g_tv), 262144);
    char *gb;
    assert_int_equal(ember_json_object_gbnf(&gb), EMBER_OK);
    ember_grammar *g;
    assert_int_equal(ember_grammar_parse(gb, strlen(gb), NULL, &g), EMBER_OK);
    free(gb);
    int done = 0, checks = 0;
    for (int w = 0; w < 12; w++) {
        char *t = walk(g, 150, &checks);
        if (t) {
            json_t *v = json_loads(t, 0, NULL);
            if (!json_is_object(v)) fail_msg("walk ended on a non-object: %s", t);
            json_decref(v);
            done++;
            free(t);
        }
    }
    assert_true(checks > 100);
    assert_true(done >= 1);
    ember_grammar_free(g);
}

static void test_gemma_schema_walk(void **unused)
{
    if (!g_tv) skip();
    const char *schema =
        "{\"type\": \"object\", \"properties\": {\"name\": {\"const\": \"get_weather\"},"
        " \"arguments\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\", \"maxLength\": 12},"
        " \"unit\": {\"enum\": [\"c\", \"f\"]}, \"days\": {\"type\": \"integer\"}}, \"required\": [\"city\", \"unit\"],"
        " \"additionalProperties\": false}}, \"required\": [\"name\", \"arguments\"], \"additionalProperties\": false}";
    json_t *s = json_loads(schema, 0, NULL);
    ember_grammar *g = compile(s);
    int done = 0, checks = 0;
    for (int w = 0; w < 6; w++) {
        char *t = walk(g, 400, &checks);
        if (!t) continue;
        done++;
        json_t *v = json_loads(t, 0, NULL);
        if (!v) fail_msg("not JSON: %s", t);
        assert_string_equal(json_string_value(json_object_get(v, "name")), "get_weather");
        json_t *a = json_object_get(v, "arguments");
        assert_true(json_is_string(json_object_get(a, "city")));
        const char *unit = json_string_value(json_object_get(a, "unit"));
        assert_true(unit && (!strcmp(unit, "c") || !strcmp(unit, "f")));
        json_t *d = json_object_get(a, "days");
        assert_true(!d || json_is_integer(d));
        assert_true(json_object_size(v) == 2 && json_object_size(a) <= 3);
        json_decref(v);
        free(t);
    }
    assert_true(done >= 3);
    ember_grammar_free(g);
    json_decref(s);
}

static void test_gemma_special_token(void **unused)
{
    if (!g_tv) skip();
    /* a control token by its text, then plain text: exactly one token first */
    const char *gb = "root ::= <start_of_turn> \"model\"";
    ember_grammar *g;
    assert_int_equal(ember_grammar_parse(gb, strlen(gb), NULL, &g), EMBER_OK);
    ember_grammar_state *st;
    assert_int_equal(ember_grammar_state_new(g, g_tv, &st), EMBER_OK);
    ember_token sot = -1;
    for (int32_t i = 0; i < ember_vocab_n_tokens(g_vocab); i++) {
        size_t n;
        const char *t = ember_vocab_text(g_vocab, i, &n);
        if (n == 15 && memcmp(t, "<start_of_turn>", 15) == 0) { sot = i; break; }
    }
    assert_true(sot >= 0);
    const uint32_t *m; int32_t na;
    assert_int_equal(ember_grammar_mask(st, &m, &na), EMBER_OK);
    assert_int_equal(na, 1);
    assert_true((m[sot >> 5] >> (sot & 31)) & 1);
    assert_int_equal(ember_grammar_accept(st, sot), EMBER_OK);
    ember_token *ids; size_t n;
    assert_int_equal(ember_tokenize(g_vocab, "model", 5, false, false, &ids, &n), EMBER_OK);
    for (size_t i = 0; i < n; i++) assert_int_equal(ember_grammar_accept(st, ids[i]), EMBER_OK);
    assert_true(ember_grammar_can_end(st));
    free(ids);
    ember_grammar_state_free(st);
    ember_grammar_free(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_schema_goldens),
        cmocka_unit_test(test_schema_errors),
        cmocka_unit_test(test_request_fields),
        cmocka_unit_test(test_schema_random_input),
        cmocka_unit_test(test_gemma_json_walk),
        cmocka_unit_test(test_gemma_schema_walk),
        cmocka_unit_test(test_gemma_special_token),
    };
    return cmocka_run_group_tests(tests, load_gemma, free_gemma);
}
