/* The engine's per-request constraints (src/engine/slot.c: slot_draw) on the
 * toy model of tests/common/fake_model.h, whose tokens 0..255 are bytes: a
 * grammar (src/sample/grammar.h) must hold for every output whatever the
 * model prefers, end-of-generation comes exactly when the grammar can end,
 * and a request hook can force tokens (the reasoning budget's mechanism).
 * Expected outputs are the grammars' languages, written by hand. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "../../common/fake_model.h"
#include "engine/engine_internal.h"
#include "sample/grammar.h"

typedef struct fixture {
    fake_model *m;
    engine_runtime rt;
    engine_vocab vocab;
    engine *e;
    ember_grammar_vocab *gv;
} fixture;

static void fx_init(fixture *f)
{
    f->m = fake_model_new(2, 256, 1024, 64);
    f->rt = fake_runtime(f->m);
    f->vocab = fake_vocab();
    engine_config cfg = {.n_slots = 2, .n_ctx = 256, .n_batch = 64, .n_queue_max = 8};
    assert_int_equal(engine_new(&cfg, &f->rt, &f->vocab, &f->e), EMBER_OK);
    static char bytes[256];
    const char *pieces[FAKE_N_VOCAB];
    size_t lens[FAKE_N_VOCAB];
    bool eog[FAKE_N_VOCAB] = {0};
    for (int i = 0; i < FAKE_N_VOCAB; i++) {
        if (i < 256) bytes[i] = (char)i;
        pieces[i] = i < 256 ? &bytes[i] : "";
        lens[i] = i < 256 ? 1 : 0;
    }
    eog[FAKE_EOS] = true;
    assert_int_equal(ember_grammar_vocab_new(pieces, lens, NULL, NULL, FAKE_N_VOCAB, eog, &f->gv), EMBER_OK);
}

static void fx_free(fixture *f)
{
    engine_free(f->e);
    assert_int_equal(f->m->n_violations, 0);
    fake_model_free(f->m);
    ember_grammar_vocab_free(f->gv);
}

static engine_req *run(fixture *f, const char *prompt, int32_t n_predict, float temp, uint64_t seed,
                       const ember_grammar_state *g, engine_req_hook hook)
{
    ember_token t[64];
    int32_t n = 0;
    t[n++] = FAKE_BOS;
    for (const char *c = prompt; *c; c++) t[n++] = (unsigned char)*c;
    engine_req_params p = {.prompt = t, .n_prompt = n, .n_predict = n_predict, .grammar = g, .hook = hook};
    p.sampling.temp = temp;
    p.sampling.seed = seed;
    engine_req *r = NULL;
    assert_int_equal(engine_submit(f->e, &p, &r), EMBER_OK);
    for (int guard = 0; guard < 10000 && r->finish == ENGINE_RUNNING; guard++) engine_step(f->e);
    assert_int_not_equal(r->finish, ENGINE_RUNNING);
    return r;
}

static bool is_digits(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) if (s[i] < '0' || s[i] > '9') return false;
    return true;
}

static void test_grammar_holds_and_ends(void **state)
{
    (void)state;
    fixture f;
    fx_init(&f);
    const char *gbnf = "root ::= \"ab\" [0-9]{3} ( \"!\" | \"?\" )";
    ember_grammar *g = NULL;
    ember_grammar_state *tmpl = NULL;
    assert_int_equal(ember_grammar_parse(gbnf, strlen(gbnf), NULL, &g), EMBER_OK);
    assert_int_equal(ember_grammar_state_new(g, f.gv, &tmpl), EMBER_OK);
    for (int i = 0; i < 12; i++) {
        engine_req *r = run(&f, i % 2 ? "hello" : "xyz", 40, i < 4 ? 0.0f : 1.5f, 100 + (uint64_t)i, tmpl,
                            (engine_req_hook){0});
        assert_int_equal(r->finish, ENGINE_FINISH_STOP);
        assert_int_equal(r->text_len, 6);
        assert_memory_equal(r->text, "ab", 2);
        assert_true(is_digits(r->text + 2, 3));
        assert_true(r->text[5] == '!' || r->text[5] == '?');
        assert_int_equal(r->n_generated, 7);          /* 6 bytes + EOS */
        engine_req_release(r);
    }
    /* the template was never advanced: a new clone starts at the beginning */
    assert_false(ember_grammar_can_end(tmpl));
    assert_int_equal(ember_grammar_accept_bytes(tmpl, "ab", 2), EMBER_OK);
    fx_free(&f);
    ember_grammar_state_free(tmpl);
    ember_grammar_free(g);
}

typedef struct hook_ud {
    int n_tokens, n_free;
    ember_token force[3];
} hook_ud;

static void on_token(void *ud, ember_token t, const char *piece, int32_t n, const ember_token **force,
                     int32_t *n_force)
{
    (void)t; (void)piece; (void)n;
    hook_ud *h = ud;
    if (++h->n_tokens == 2) { *force = h->force; *n_force = 3; }
}

static void on_free(void *ud) { ((hook_ud *)ud)->n_free++; }

static void test_hook_forces_tokens(void **state)
{
    (void)state;
    fixture f;
    fx_init(&f);
    hook_ud h = {.force = {'X', 'Y', 'Z'}};
    engine_req *r = run(&f, "hello", 8, 0.0f, 1, NULL, (engine_req_hook){.ud = &h, .on_token = on_token, .free = on_free});
    assert_int_equal(r->finish, ENGINE_FINISH_LENGTH);
    assert_int_equal(r->text_len, 8);
    assert_memory_equal(r->text + 2, "XYZ", 3);       /* right after the second token */
    assert_int_equal(h.n_tokens, 8);                  /* forced tokens are reported too */
    assert_int_equal(h.n_free, 0);
    engine_req_release(r);
    assert_int_equal(h.n_free, 1);

    /* under a grammar that cannot take them, forced tokens are dropped */
    const char *gbnf = "root ::= [a-z]{6}";
    ember_grammar *g = NULL;
    ember_grammar_state *tmpl = NULL;
    assert_int_equal(ember_grammar_parse(gbnf, strlen(gbnf), NULL, &g), EMBER_OK);
    assert_int_equal(ember_grammar_state_new(g, f.gv, &tmpl), EMBER_OK);
    hook_ud h2 = {.force = {'X', 'Y', 'Z'}};
    r = run(&f, "hello", 20, 0.0f, 1, tmpl, (engine_req_hook){.ud = &h2, .on_token = on_token, .free = on_free});
    assert_int_equal(r->finish, ENGINE_FINISH_STOP);
    assert_int_equal(r->text_len, 6);
    for (int i = 0; i < 6; i++) assert_true(r->text[i] >= 'a' && r->text[i] <= 'z');
    engine_req_release(r);
    assert_int_equal(h2.n_free, 1);

    /* a request that is refused still frees its hook */
    hook_ud h3 = {0};
    engine_req_params p = {.prompt = NULL, .n_prompt = 0, .hook = {.ud = &h3, .free = on_free}};
    engine_req *bad = NULL;
    assert_int_equal(engine_submit(f.e, &p, &bad), EMBER_ERR_INVALID_ARG);
    assert_int_equal(h3.n_free, 1);
    fx_free(&f);
    ember_grammar_state_free(tmpl);
    ember_grammar_free(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grammar_holds_and_ends),
        cmocka_unit_test(test_hook_forces_tokens),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
