/* GBNF engine tests: parsing (valid grammars, malformed ones with the
 * expected line:column), string acceptance against Python `re` verdicts
 * (tests/golden/grammar/cases.json, made by make_goldens.py there), token
 * masks on small synthetic vocabularies (expected sets written by hand from
 * the finite languages), partial UTF-8 tokens, EOS, clone/reset, and random
 * bytes into the parser. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sample/grammar.h"

static ember_grammar *parse_ok(const char *text)
{
    ember_grammar *g = NULL;
    ember_status s = ember_grammar_parse(text, strlen(text), NULL, &g);
    if (s) fprintf(stderr, "unexpected parse error: %s\n", ember_last_error());
    assert_int_equal(s, EMBER_OK);
    assert_non_null(g);
    return g;
}

/* 1 full match, 0 live prefix only, -1 rejected */
static int match(const ember_grammar *g, const char *s, size_t n)
{
    ember_grammar_state *st;
    assert_int_equal(ember_grammar_state_new(g, NULL, &st), EMBER_OK);
    int r;
    if (ember_grammar_accept_bytes(st, s, n) != EMBER_OK) r = -1;
    else r = ember_grammar_can_end(st) ? 1 : 0;
    ember_grammar_state_free(st);
    return r;
}

static void test_parse_errors(void **unused)
{
    struct { const char *text; ember_status code; const char *msg; } cases[] = {
        { "root ::= \"abc", EMBER_ERR_FORMAT, "line 1:10: unterminated string literal" },
        { "root ::= foo", EMBER_ERR_FORMAT, "line 1:10: undefined rule 'foo'" },
        { "root ::= \"a\"\n\nx ::= [a-", EMBER_ERR_FORMAT, "line 3:7: unterminated character class" },
        { "root ::= \"x\"{3,1}", EMBER_ERR_FORMAT, "line 1:13: repetition {3,1}: max < min" },
        { "root ::= ( \"a\"\n", EMBER_ERR_FORMAT, "line 2:1: expected ')'" },
        { "root ::= \"\\q\"", EMBER_ERR_FORMAT, "line 1:11: unknown escape" },
        { "root ::= \"\\x4\"", EMBER_ERR_FORMAT, "line 1:11: escape needs 2 hex digits" },
        { "root ::= [z-a]", EMBER_ERR_FORMAT, "line 1:13: range end below its start" },
        { "root = \"a\"", EMBER_ERR_FORMAT, "line 1:6: expected '::='" },
        { "", EMBER_ERR_FORMAT, "no rule named 'root'" },
        { "other ::= \"a\"", EMBER_ERR_FORMAT, "no rule named 'root'" },
        { "root ::= \"a\"\nroot ::= \"b\"", EMBER_ERR_FORMAT, "line 2:1: rule 'root' defined twice" },
        { "root ::= root \"x\" | \"y\"", EMBER_ERR_FORMAT, "left recursion" },
        { "root ::= a\na ::= b? a \"x\"\nb ::= \"b\"", EMBER_ERR_FORMAT, "left recursion" },
        { "root ::= <think \"x\"", EMBER_ERR_FORMAT, "line 1:10: unterminated token reference" },
        { "root ::= <[12x]>", EMBER_ERR_FORMAT, "line 1:14: expected ']>' after a token id" },
        { "root ::= ! \"x\"", EMBER_ERR_FORMAT, "line 1:11: expected '<' after '!'" },
        { "root ::= \"\xff\"", EMBER_ERR_FORMAT, "line 1:11: invalid UTF-8" },
        { "root ::= \"a\" )", EMBER_ERR_FORMAT, "line 1:14: unexpected character ')'" },
        { "root ::= \"a\"{100001}", EMBER_ERR_FORMAT, "repetition bound over 100000" },
        { "  ::= \"a\"", EMBER_ERR_FORMAT, "line 1:3: expected a rule name" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        ember_grammar *g = (ember_grammar *)0x1;
        ember_status s = ember_grammar_parse(cases[i].text, strlen(cases[i].text), NULL, &g);
        if (s != cases[i].code || !strstr(ember_last_error(), cases[i].msg))
            fail_msg("case %zu (%s): got %s '%s', want '%s'", i, cases[i].text, ember_status_name(s), ember_last_error(), cases[i].msg);
        assert_null(g);
    }
}

static void test_parse_valid(void **unused)
{
    /* multi-line rules, continuation after '|' and '::=', comments, names
     * with dashes and digits, a newline inside parentheses */
    const char *text =
        "# header\n"
        "root ::=\n"
        "  greeting-1 ( \" \"\n"
        "     name )?  # optional\n"
        "greeting-1 ::= \"hi\" |\n"
        "  \"hello\"\n"
        "  | \"hey\"\n"
        "name ::= [A-Z] [a-z]{0,5}\n";
    ember_grammar *g = parse_ok(text);
    assert_int_equal(match(g, "hi", 2), 1);
    assert_int_equal(match(g, "hey Bob", 7), 1);
    assert_int_equal(match(g, "hello Abcdef", 12), 1);
    assert_int_equal(match(g, "hello Abcdefg", 13), -1);
    assert_int_equal(match(g, "hello ", 6), 0);
    assert_int_equal(match(g, "yo", 2), -1);
    ember_grammar_free(g);
    /* a root that is only the empty string */
    g = parse_ok("root ::= \"\"");
    assert_int_equal(match(g, "", 0), 1);
    assert_int_equal(match(g, "a", 1), -1);
    ember_grammar_free(g);
    /* other start rule */
    assert_int_equal(ember_grammar_parse("a ::= \"x\"", 9, "a", &g), EMBER_OK);
    assert_int_equal(match(g, "x", 1), 1);
    ember_grammar_free(g);
}

/* llama.cpp's own example grammars (read in place when its source is on
 * this machine, else skipped): every one parses, and a few sentences their
 * comments describe are accepted. */
static void test_llama_example_grammars(void **unused)
{
    const char *dir = getenv("LLAMA_CPP_DIR");
    char path[1024];
    static const char *const names[] = { "arithmetic", "c", "chess", "english", "japanese", "json", "json_arr", "list" };
    int found = 0;
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        snprintf(path, sizeof path, "%s/grammars/%s.gbnf", dir ? dir : "/opt/llama/llama_cpp_python-0.3.36/vendor/llama.cpp", names[i]);
        FILE *f = fopen(path, "rb");
        if (!f) continue;
        static char buf[1 << 16];
        size_t n = fread(buf, 1, sizeof buf, f);
        fclose(f);
        ember_grammar *g = NULL;
        if (ember_grammar_parse(buf, n, NULL, &g) != EMBER_OK) fail_msg("%s: %s", names[i], ember_last_error());
        if (!strcmp(names[i], "json")) {
            const char *ok = "{\"a\": [1, 2.5, \"x\"], \"b\": {}}", *bad = "{\"a\" 1}";
            assert_int_equal(match(g, ok, strlen(ok)), 1);
            assert_int_equal(match(g, bad, strlen(bad)), -1);
        }
        const char *list = "- one\n- two\n", *chess = "1. e4 e5\n2. Nf3 Nc6\n";
        if (!strcmp(names[i], "list")) assert_int_equal(match(g, list, strlen(list)), 1);
        if (!strcmp(names[i], "chess")) assert_int_equal(match(g, chess, strlen(chess)), 1);
        ember_grammar_free(g);
        found++;
    }
    if (!found) skip();
}

static void test_string_goldens(void **unused)
{
    json_error_t je;
    json_t *all = json_load_file("tests/golden/grammar/cases.json", 0, &je);
    if (!all) fail_msg("cases.json: %s", je.text);
    size_t i, n_checked = 0;
    json_t *c;
    json_array_foreach(all, i, c) {
        const char *gbnf = json_string_value(json_object_get(c, "gbnf"));
        ember_grammar *g = parse_ok(gbnf);
        size_t j; json_t *in;
        json_array_foreach(json_object_get(c, "instances"), j, in) {
            const char *t = json_string_value(json_object_get(in, "text"));
            bool want = json_is_true(json_object_get(in, "match"));
            bool got = match(g, t, strlen(t)) == 1;
            if (got != want) fail_msg("%s: '%s' got %d want %d", json_string_value(json_object_get(c, "name")), t, got, want);
            /* byte-by-byte feeding gives the same verdict (UTF-8 cut anywhere) */
            ember_grammar_state *st;
            assert_int_equal(ember_grammar_state_new(g, NULL, &st), EMBER_OK);
            bool alive = true;
            for (size_t k = 0; t[k] && alive; k++) alive = ember_grammar_accept_bytes(st, t + k, 1) == EMBER_OK;
            assert_int_equal(alive && ember_grammar_can_end(st), want);
            ember_grammar_state_free(st);
            n_checked++;
        }
        ember_grammar_free(g);
    }
    assert_true(n_checked > 500);
    json_decref(all);
}

/* --- token level on a synthetic vocabulary ------------------------------ */

enum { EOS = 0 };
static const char *const PIECES[] = {
    "", /* 0: EOS */
    "c", "ca", "cat", "car", "d", "do", "dog", "a", "t", "r", "g", "o", "x", "cats",
    "\xC3", "\xA9", "\xC3\xA9", "\xC3\xA9x", "\xA9x", "", /* 20: control, empty */
};
#define NV ((int32_t)(sizeof PIECES / sizeof *PIECES))
/* texts with special tokens written out: 0 is <eos>, 20 is <|call> */
static const char *const TEXTS[] = {
    "<eos>", "c", "ca", "cat", "car", "d", "do", "dog", "a", "t", "r", "g", "o", "x", "cats",
    "\xC3", "\xA9", "\xC3\xA9", "\xC3\xA9x", "\xA9x", "<|call>",
};

static ember_grammar_vocab *synth_vocab(void)
{
    size_t lens[NV], tlens[NV];
    bool eog[NV];
    for (int32_t i = 0; i < NV; i++) { lens[i] = strlen(PIECES[i]); tlens[i] = strlen(TEXTS[i]); eog[i] = i == EOS; }
    ember_grammar_vocab *tv;
    assert_int_equal(ember_grammar_vocab_new(PIECES, lens, TEXTS, tlens, NV, eog, &tv), EMBER_OK);
    return tv;
}

static void expect_allowed(ember_grammar_state *st, const char *want_csv)
{
    /* want_csv: ids allowed, e.g. "1,2,3" */
    bool want[NV] = {0};
    for (const char *p = want_csv; *p;) {
        want[strtol(p, (char **)&p, 10)] = true;
        if (*p == ',') p++;
    }
    const uint32_t *m; int32_t n_allowed;
    assert_int_equal(ember_grammar_mask(st, &m, &n_allowed), EMBER_OK);
    int32_t nw = 0;
    for (int32_t i = 0; i < NV; i++) {
        bool bit = (m[i >> 5] >> (i & 31)) & 1;
        if (bit != want[i]) fail_msg("token %d ('%s'): mask %d want %d", i, PIECES[i], bit, want[i]);
        if (ember_grammar_token_allowed(st, i) != want[i]) fail_msg("token %d: token_allowed disagrees", i);
        nw += want[i];
    }
    assert_int_equal(n_allowed, nw);
    float logits[NV];
    for (int32_t i = 0; i < NV; i++) logits[i] = 1.0f;
    assert_int_equal(ember_grammar_apply(st, logits, NV), EMBER_OK);
    for (int32_t i = 0; i < NV; i++) assert_true(want[i] ? logits[i] == 1.0f : isinf(logits[i]) && logits[i] < 0);
}

static void test_token_masks(void **unused)
{
    ember_grammar *g = parse_ok("root ::= \"cat\" | \"car\" | \"dog\"");
    ember_grammar_vocab *tv = synth_vocab();
    ember_grammar_state *st;
    assert_int_equal(ember_grammar_state_new(g, tv, &st), EMBER_OK);
    /* language {cat, car, dog}: a token is allowed iff it continues a word */
    expect_allowed(st, "1,2,3,4,5,6,7");
    assert_int_equal(ember_grammar_accept(st, 2), EMBER_OK);         /* "ca" */
    expect_allowed(st, "9,10");                                      /* t, r */
    ember_grammar_state *cl;
    assert_int_equal(ember_grammar_state_clone(st, &cl), EMBER_OK);
    assert_int_equal(ember_grammar_accept(st, 9), EMBER_OK);         /* "t" */
    expect_allowed(st, "0");                                         /* only EOS */
    assert_true(ember_grammar_can_end(st));
    assert_int_equal(ember_grammar_accept(st, 14), EMBER_ERR_INVALID_ARG);
    assert_int_equal(ember_grammar_accept(st, EOS), EMBER_OK);
    assert_true(ember_grammar_is_done(st));
    expect_allowed(st, "");
    /* the clone stayed after "ca" */
    expect_allowed(cl, "9,10");
    assert_int_equal(ember_grammar_accept(cl, EOS), EMBER_ERR_INVALID_ARG);   /* EOS before the end */
    assert_int_equal(ember_grammar_accept(cl, 20), EMBER_ERR_INVALID_ARG);    /* empty control token */
    assert_int_equal(ember_grammar_accept(cl, NV), EMBER_ERR_INVALID_ARG);    /* out of range */
    ember_grammar_state_reset(st);
    expect_allowed(st, "1,2,3,4,5,6,7");
    float small[3];
    assert_int_equal(ember_grammar_apply(st, small, 3), EMBER_ERR_INVALID_ARG);
    /* candidate list form */
    ember_token ids[4] = { 3, 13, 7, 0 };
    float lg[4] = { 0, 0, 0, 0 };
    assert_int_equal(ember_grammar_apply_candidates(st, ids, lg, 4), EMBER_OK);
    assert_true(lg[0] == 0 && isinf(lg[1]) && lg[2] == 0 && isinf(lg[3]));
    ember_grammar_state_free(cl);
    ember_grammar_state_free(st);
    ember_grammar_free(g);
    ember_grammar_vocab_free(tv);
}

static void test_utf8_partial_tokens(void **unused)
{
    /* language {"éx", "é"} written as code points; tokens may split é (C3 A9) */
    ember_grammar *g = parse_ok("root ::= \"\\u00e9\" \"x\"?");
    ember_grammar_vocab *tv = synth_vocab();
    ember_grammar_state *st;
    assert_int_equal(ember_grammar_state_new(g, tv, &st), EMBER_OK);
    expect_allowed(st, "15,17,18");                 /* C3, C3A9, C3A9 x */
    assert_int_equal(ember_grammar_accept(st, 15), EMBER_OK);
    assert_false(ember_grammar_can_end(st));        /* inside a code point */
    expect_allowed(st, "16,19");                    /* A9, A9 x */
    assert_int_equal(ember_grammar_accept(st, 16), EMBER_OK);
    expect_allowed(st, "0,13");                     /* EOS or x */
    ember_grammar_state_free(st);
    ember_grammar_free(g);
    /* a class that cannot start with C3: the lead byte alone is refused */
    g = parse_ok("root ::= [\\u0100-\\u017F]");
    assert_int_equal(ember_grammar_state_new(g, tv, &st), EMBER_OK);
    expect_allowed(st, "");
    ember_grammar_state_free(st);
    ember_grammar_free(g);
    /* invalid UTF-8 is never accepted, even by '.' */
    g = parse_ok("root ::= .*");
    assert_int_equal(match(g, "\xC3", 1), 0);
    assert_int_equal(match(g, "\xA9", 1), -1);
    assert_int_equal(match(g, "\xC0\x80", 2), -1);          /* overlong */
    assert_int_equal(match(g, "\xED\xA0\x80", 3), -1);      /* surrogate */
    assert_int_equal(match(g, "\xF4\x90\x80\x80", 4), -1);  /* > U+10FFFF */
    assert_int_equal(match(g, "\xF0\x9F\x98\x80", 4), 1);   /* U+1F600 */
    ember_grammar_state_free(NULL);
    ember_grammar_free(g);
    ember_grammar_vocab_free(tv);
}

static void test_token_references(void **unused)
{
    ember_grammar_vocab *tv = synth_vocab();
    /* a control token (empty piece) forced by text, then a word, then any
     * tokens but "x" (!<[13]>) until EOS */
    ember_grammar *g = parse_ok("root ::= <|call> \"do\" tail\ntail ::= !<[13]>*");
    ember_grammar_state *st;
    assert_int_equal(ember_grammar_state_new(g, tv, &st), EMBER_OK);
    expect_allowed(st, "20");
    assert_int_equal(ember_grammar_accept(st, 20), EMBER_OK);
    expect_allowed(st, "5,6");   /* d, do; not "dog": token elements take whole tokens, never bytes */
    assert_int_equal(ember_grammar_accept(st, 6), EMBER_OK);    /* "do" */
    /* now: any token but x (13) and EOS, and EOS because tail can be empty */
    expect_allowed(st, "0,1,2,3,4,5,6,7,8,9,10,11,12,14,15,16,17,18,19,20");
    assert_int_equal(ember_grammar_accept(st, 13), EMBER_ERR_INVALID_ARG);
    assert_int_equal(ember_grammar_accept(st, 16), EMBER_OK);   /* a lone continuation byte: fine as a whole token */
    assert_int_equal(ember_grammar_accept(st, EOS), EMBER_OK);
    ember_grammar_state_free(st);
    ember_grammar_free(g);
    /* by id, and EOS named explicitly before the grammar could end */
    g = parse_ok("root ::= <[3]> <[0]> \"a\"");
    assert_int_equal(ember_grammar_state_new(g, tv, &st), EMBER_OK);
    expect_allowed(st, "3");
    assert_int_equal(ember_grammar_accept(st, 3), EMBER_OK);
    expect_allowed(st, "0");
    assert_int_equal(ember_grammar_accept(st, 0), EMBER_OK);
    assert_false(ember_grammar_is_done(st));
    expect_allowed(st, "8");
    ember_grammar_state_free(st);
    ember_grammar_free(g);
    /* unknown token text / id out of range: NOT_FOUND at state creation */
    g = parse_ok("root ::= <|nope>");
    assert_int_equal(ember_grammar_state_new(g, tv, &st), EMBER_ERR_NOT_FOUND);
    assert_non_null(strstr(ember_last_error(), "<|nope>"));
    ember_grammar_free(g);
    g = parse_ok("root ::= <[99]>");
    assert_int_equal(ember_grammar_state_new(g, tv, &st), EMBER_ERR_NOT_FOUND);
    /* without a vocabulary, token elements never match */
    assert_int_equal(ember_grammar_state_new(g, NULL, &st), EMBER_OK);
    assert_false(ember_grammar_can_end(st));
    ember_grammar_state_free(st);
    ember_grammar_free(g);
    ember_grammar_vocab_free(tv);
}

static void test_parser_random_input(void **unused)
{
    /* random mutations of a valid grammar: never crash, always a status */
    const char *base = "root ::= ( \"a\" [b-d]* | x{1,3} )+ \"\\u00e9\" # c\nx ::= [^\\n] \"y\"?\n";
    size_t n = strlen(base);
    char buf[128];
    uint64_t r = 88172645463325252ULL;
    int ok = 0;
    for (int it = 0; it < 3000; it++) {
        memcpy(buf, base, n);
        int edits = 1 + it % 4;
        for (int e = 0; e < edits; e++) {
            r ^= r << 13; r ^= r >> 7; r ^= r << 17;
            buf[r % n] = (char)(r >> 32);
        }
        ember_grammar *g = NULL;
        if (ember_grammar_parse(buf, n, NULL, &g) == EMBER_OK) {
            ok++;
            assert_true(match(g, "ab", 2) >= -1);
            ember_grammar_free(g);
        } else {
            assert_null(g);
            assert_true(strlen(ember_last_error()) > 0);
        }
    }
    assert_true(ok > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_errors),
        cmocka_unit_test(test_parse_valid),
        cmocka_unit_test(test_llama_example_grammars),
        cmocka_unit_test(test_string_goldens),
        cmocka_unit_test(test_token_masks),
        cmocka_unit_test(test_utf8_partial_tokens),
        cmocka_unit_test(test_token_references),
        cmocka_unit_test(test_parser_random_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
