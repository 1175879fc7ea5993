/* The engine's scheduler against the toy model of tests/common/fake_model.h.
 * Expected outputs come from fake_reference(), which applies the toy model's
 * rule directly (greedy, one sequence, no engine): a request run through
 * continuous batching, chunked prefill, the prefix cache or the queue must
 * produce exactly that text. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <cmocka.h>

#include "../../common/fake_model.h"
#include "engine/engine_internal.h"
#include "backend/logits_top.h"

#include <math.h>

typedef struct fixture {
    fake_model *m;
    engine_runtime rt;
    engine_vocab vocab;
    engine *e;
} fixture;

static int32_t prefill_chunk;   /* engine_config.n_prefill_chunk for the next fx_init */

static void fx_init(fixture *f, int32_t n_slots, int32_t n_ctx, uint32_t pool, int32_t n_batch, int32_t n_queue)
{
    f->m = fake_model_new(n_slots, n_ctx, pool, n_batch);
    f->rt = fake_runtime(f->m);
    f->vocab = fake_vocab();
    engine_config cfg = {.n_slots = n_slots, .n_ctx = n_ctx, .n_batch = n_batch, .n_queue_max = n_queue,
                         .n_prefill_chunk = prefill_chunk};
    assert_int_equal(engine_new(&cfg, &f->rt, &f->vocab, &f->e), EMBER_OK);
}

static void fx_free(fixture *f)
{
    engine_free(f->e);
    assert_int_equal(f->m->n_violations, 0);
    fake_model_free(f->m);
}

static int32_t make_prompt(ember_token *t, const char *text)
{
    int32_t n = 0;
    t[n++] = FAKE_BOS;
    for (const char *c = text; *c; c++) t[n++] = (unsigned char)*c;
    return n;
}

static engine_req *submit(fixture *f, const char *text, int32_t n_predict)
{
    ember_token t[600];
    engine_req_params p = {0};
    p.prompt = t;
    p.n_prompt = make_prompt(t, text);
    p.n_predict = n_predict;
    p.sampling.temp = 0;
    engine_req *r = NULL;
    assert_int_equal(engine_submit(f->e, &p, &r), EMBER_OK);
    return r;
}

static void run_until_done(fixture *f, engine_req **r, int n)
{
    for (int guard = 0; guard < 100000; guard++) {
        bool all = true;
        for (int i = 0; i < n; i++) all &= r[i]->finish != ENGINE_RUNNING;
        if (all) return;
        engine_step(f->e);
    }
    fail_msg("requests did not finish");
}

static void expect_reference(engine_req *r, const char *text, int32_t n_predict)
{
    ember_token t[600];
    int32_t n = make_prompt(t, text);
    char want[1024];
    bool eos;
    fake_reference(t, n, n_predict, 0, want, &eos);
    assert_string_equal(r->text ? r->text : "", want);
    assert_int_equal(r->finish, ENGINE_FINISH_LENGTH);
    assert_int_equal(r->n_generated, n_predict);
}

static void test_single_request_matches_reference(void **state)
{
    fixture f;
    fx_init(&f, 1, 128, 128, 32, 4);
    engine_req *r = submit(&f, "hello", 20);
    run_until_done(&f, &r, 1);
    expect_reference(r, "hello", 20);
    assert_int_equal(r->n_prompt, 6);
    assert_int_equal(r->n_cached, 0);
    engine_req_release(r);
    fx_free(&f);
}

/* 10 requests on 4 slots (6 wait in the queue), prompts longer than n_batch
 * (chunked prefill), all mixed in the same batches. */
static void test_concurrent_equal_alone(void **state)
{
    fixture f;
    fx_init(&f, 4, 256, 4 * 256, 16, 16);
    static const char *prompts[10] = {
        "the quick brown fox jumps over the lazy dog", "a", "lorem ipsum dolor sit amet consectetur",
        "zz", "one two three four five six seven eight nine ten eleven twelve", "b",
        "pack my box with five dozen liquor jugs", "x y z", "sphinx of black quartz judge my vow", "q"};
    engine_req *r[10];
    for (int i = 0; i < 10; i++) r[i] = submit(&f, prompts[i], 12 + i);
    run_until_done(&f, r, 10);
    for (int i = 0; i < 10; i++) {
        expect_reference(r[i], prompts[i], 12 + i);
        engine_req_release(r[i]);
    }
    assert_true(f.m->max_batch > 4);   /* slots really shared batches */
    assert_true(f.m->max_batch <= 16);
    fx_free(&f);
}

/* While a long prompt is prefilled in chunks, the running stream gets its
 * decode token in every step. */
static void test_chunked_prefill_does_not_stall(void **state)
{
    fixture f;
    fx_init(&f, 2, 512, 1024, 8, 4);
    engine_req *a = submit(&f, "hi", 100);
    for (int i = 0; i < 3; i++) engine_step(f.e);          /* a is generating */
    assert_int_equal(f.e->slots[a->slot].state, SLOT_GENERATE);
    char long_prompt[301];
    memset(long_prompt, 'k', 300);
    long_prompt[300] = 0;
    engine_req *b = submit(&f, long_prompt, 4);
    int steps_b_prefill = 0;
    while (b->t_first_token == 0) {
        assert_int_equal(a->finish, ENGINE_RUNNING);
        engine_step(f.e);
        assert_int_equal(f.m->entries_of_seq[a->slot], 1);  /* a decoded this step */
        assert_true(f.m->entries_of_seq[b->slot] <= 7);     /* b got what was left of n_batch */
        steps_b_prefill++;
    }
    assert_true(steps_b_prefill >= 300 / 7);
    engine_req *both[2] = {a, b};
    run_until_done(&f, both, 2);
    expect_reference(a, "hi", 100);
    expect_reference(b, long_prompt, 4);
    engine_req_release(a);
    engine_req_release(b);
    fx_free(&f);
}

/* With n_prefill_chunk, a prompt takes at most that many entries per step
 * while another slot generates, and the whole n_batch when none does. */
static void test_prefill_chunk_limit(void **state)
{
    fixture f;
    prefill_chunk = 3;
    fx_init(&f, 2, 512, 1024, 32, 4);
    prefill_chunk = 0;
    engine_req *a = submit(&f, "gen", 30);
    engine_step(f.e);
    char long_prompt[101];
    memset(long_prompt, 'p', 100);
    long_prompt[100] = 0;
    engine_req *b = submit(&f, long_prompt, 2);
    while (b->t_first_token == 0) {
        engine_step(f.e);
        if (a->finish == ENGINE_RUNNING) assert_true(f.m->entries_of_seq[b->slot] <= 3);
        else assert_true(f.m->entries_of_seq[b->slot] <= 32);
    }
    engine_req *both[2] = {a, b};
    run_until_done(&f, both, 2);
    expect_reference(a, "gen", 30);
    expect_reference(b, long_prompt, 2);
    engine_req_release(a);
    engine_req_release(b);
    fx_free(&f);
}

static void test_prefix_cache_reuse(void **state)
{
    fixture f;
    fx_init(&f, 2, 256, 512, 64, 4);
    engine_req *a = submit(&f, "system: you are helpful. user: hello", 5);
    run_until_done(&f, &a, 1);
    engine_req *b = submit(&f, "system: you are helpful. user: goodbye", 5);
    run_until_done(&f, &b, 1);
    /* BOS + "system: you are helpful. user: " = 32 shared tokens */
    assert_int_equal(b->n_cached, 32);
    expect_reference(b, "system: you are helpful. user: goodbye", 5);
    /* the same prompt again: all but the last token come from the cache */
    engine_req *c = submit(&f, "system: you are helpful. user: goodbye", 5);
    run_until_done(&f, &c, 1);
    assert_int_equal(c->n_cached, c->n_prompt - 1);
    expect_reference(c, "system: you are helpful. user: goodbye", 5);
    engine_stats st;
    engine_get_stats(f.e, &st, NULL);
    assert_int_equal(st.n_prompt_tokens_cached, 32 + c->n_prompt - 1);
    engine_req_release(a);
    engine_req_release(b);
    engine_req_release(c);
    fx_free(&f);
}

/* A prefix held by a busy slot is shared by forking its sequence. */
static void test_prefix_fork_from_busy_slot(void **state)
{
    fixture f;
    fx_init(&f, 2, 256, 512, 64, 4);
    engine_req *a = submit(&f, "shared prefix of some length, then A", 30);
    for (int i = 0; i < 3; i++) engine_step(f.e);
    engine_req *b = submit(&f, "shared prefix of some length, then B", 5);
    engine_req *both[2] = {a, b};
    run_until_done(&f, both, 2);
    assert_int_equal(b->n_cached, 36);   /* BOS + "shared prefix of some length, then " */
    expect_reference(a, "shared prefix of some length, then A", 30);
    expect_reference(b, "shared prefix of some length, then B", 5);
    engine_req_release(a);
    engine_req_release(b);
    fx_free(&f);
}

/* A new conversation that shares only its first tokens with a cached one
 * takes the empty slot (forking those tokens), so the cached conversation
 * survives and its next turn comes from the cache. */
static void test_new_conversation_keeps_other_caches(void **state)
{
    fixture f;
    fx_init(&f, 2, 256, 512, 64, 4);
    const char *one = "user: tell me about rivers and the sea and the rain";
    engine_req *a = submit(&f, one, 8);
    run_until_done(&f, &a, 1);
    engine_req *b = submit(&f, "user: what time is it", 5);   /* shares BOS + "user: " */
    run_until_done(&f, &b, 1);
    assert_int_equal(b->n_cached, 7);   /* forked from the first slot */
    expect_reference(b, "user: what time is it", 5);
    engine_req *c = submit(&f, one, 8);   /* the first conversation again: still cached */
    run_until_done(&f, &c, 1);
    assert_int_equal(c->n_cached, c->n_prompt - 1);
    expect_reference(c, one, 8);
    engine_req_release(a);
    engine_req_release(b);
    engine_req_release(c);
    fx_free(&f);
}

static void test_cancel_frees_slot_within_one_step(void **state)
{
    fixture f;
    fx_init(&f, 1, 256, 256, 32, 4);
    engine_req *a = submit(&f, "cancel me", 200);
    engine_req *b = submit(&f, "next", 3);    /* queued behind a */
    for (int i = 0; i < 5; i++) engine_step(f.e);
    assert_int_equal(a->finish, ENGINE_RUNNING);
    assert_int_equal(b->slot, -1);
    engine_req *c = submit(&f, "queued then cancelled", 3);
    engine_req_cancel(c);
    engine_step(f.e);
    assert_int_equal(c->finish, ENGINE_FINISH_CANCELLED);   /* left the queue while a still runs */
    assert_int_equal(a->finish, ENGINE_RUNNING);
    engine_stats st;
    engine_get_stats(f.e, &st, NULL);
    assert_int_equal(st.n_queued, 1);
    engine_req_release(c);
    engine_req_cancel(a);
    engine_step(f.e);
    assert_int_equal(a->finish, ENGINE_FINISH_CANCELLED);
    assert_int_equal(b->slot, 0);             /* admitted in the same step */
    run_until_done(&f, &b, 1);
    expect_reference(b, "next", 3);
    engine_req_release(a);
    engine_req_release(b);
    fx_free(&f);
}

static void test_stop_string_cuts_output(void **state)
{
    ember_token t[64];
    int32_t n = make_prompt(t, "stop test");
    char want[256];
    bool eos;
    fake_reference(t, n, 40, 0, want, &eos);
    char stop[4];
    memcpy(stop, want + 10, 3);          /* a 3-byte string that occurs at byte 10 (or earlier) */
    stop[3] = 0;
    size_t cut = (size_t)(strstr(want, stop) - want);

    fixture f;
    fx_init(&f, 1, 256, 256, 32, 4);
    engine_req_params p = {0};
    p.prompt = t;
    p.n_prompt = n;
    p.n_predict = 40;
    p.stop[0] = "\x01never";
    p.stop[1] = stop;
    p.n_stop = 2;
    engine_req *r;
    assert_int_equal(engine_submit(f.e, &p, &r), EMBER_OK);
    size_t seen_max = 0;
    while (r->finish == ENGINE_RUNNING) {
        engine_step(f.e);
        /* committed text never holds part of the stop string */
        if (r->text_len > seen_max) seen_max = r->text_len;
        assert_true(r->text_len <= cut);
    }
    assert_int_equal(r->finish, ENGINE_FINISH_STOP);
    assert_int_equal(r->stop_index, 1);  /* the string that matched (Anthropic's stop_sequence) */
    assert_int_equal(r->text_len, cut);
    assert_memory_equal(r->text ? r->text : "", want, cut);
    engine_req_release(r);
    fx_free(&f);
}

static void test_stop_holdback(void **state)
{
    const char *stop[2] = {"</s>", "STOP"};
    assert_int_equal(stop_holdback("hello </", 8, stop, 2), 2);
    assert_int_equal(stop_holdback("hello ST", 8, stop, 2), 2);
    assert_int_equal(stop_holdback("hello", 5, stop, 2), 0);
    assert_int_equal(stop_holdback("<", 1, stop, 2), 1);
}

static void test_eos_finishes_with_stop(void **state)
{
    fixture f;
    fx_init(&f, 1, 512, 512, 64, 4);
    f.m->eos_mod = 7;                    /* EOS roughly every 7th token */
    engine_req *r = submit(&f, "eos", 300);
    run_until_done(&f, &r, 1);
    ember_token t[16];
    int32_t n = make_prompt(t, "eos");
    char want[512];
    bool eos;
    fake_reference(t, n, 300, 7, want, &eos);
    assert_true(eos);
    assert_int_equal(r->finish, ENGINE_FINISH_STOP);
    assert_int_equal(r->stop_index, -1);  /* an end-of-generation token, no stop string */
    assert_string_equal(r->text ? r->text : "", want);
    assert_int_equal(r->n_generated, (int32_t)strlen(want) + 1);
    engine_req_release(r);
    fx_free(&f);
}

static void test_submit_errors(void **state)
{
    fixture f;
    fx_init(&f, 1, 16, 64, 8, 0);
    ember_token t[32] = {0};
    engine_req_params p = {0};
    engine_req *r;
    p.prompt = t;
    p.n_prompt = 0;
    assert_int_equal(engine_submit(f.e, &p, &r), EMBER_ERR_INVALID_ARG);
    p.n_prompt = 16;
    assert_int_equal(engine_submit(f.e, &p, &r), EMBER_ERR_RANGE);
    assert_non_null(strstr(ember_last_error(), "16"));
    p.n_prompt = 3;
    t[1] = 9999;
    assert_int_equal(engine_submit(f.e, &p, &r), EMBER_ERR_INVALID_ARG);
    t[1] = 5;
    engine_req *ok;
    assert_int_equal(engine_submit(f.e, &p, &ok), EMBER_OK);      /* fills the one slot's place */
    assert_int_equal(engine_submit(f.e, &p, &r), EMBER_ERR_NOMEM); /* queue of 0 beyond the slot */
    engine_stop(f.e);
    assert_int_equal(ok->finish, ENGINE_FINISH_CANCELLED);
    assert_int_equal(engine_submit(f.e, &p, &r), EMBER_ERR_IO);
    engine_req_release(ok);
    fx_free(&f);
}

/* A pool smaller than the slots' demand: idle caches are evicted, prefill is
 * deferred, the newest request waits (preempted, then recomputed), and every
 * request still gives the reference text in full (issue 19 item 8: nothing
 * running is lost; before, the newest running request was stopped short). */
static void test_pool_pressure(void **state)
{
    fixture f;
    fx_init(&f, 3, 128, 100, 32, 8);
    engine_req *r[5];
    for (int i = 0; i < 5; i++) {
        char p[64];
        snprintf(p, sizeof p, "pool pressure request %d", i);
        r[i] = submit(&f, p, 40);
    }
    run_until_done(&f, r, 5);
    for (int i = 0; i < 5; i++) {
        char p[64];
        snprintf(p, sizeof p, "pool pressure request %d", i);
        expect_reference(r[i], p, 40);
        engine_req_release(r[i]);
    }
    engine_stats st;
    engine_get_stats(f.e, &st, NULL);
    assert_true(st.n_preemptions >= 1);
    fx_free(&f);
}

/* Two slots share a pool that holds either request alone but not both: both
 * run until the pool is full, then the newer one waits and resumes after the
 * older one ends; both complete exactly as alone. A request that has the
 * whole pool to itself and reaches its end stops with LENGTH. */
static void test_pool_full_newest_waits(void **state)
{
    fixture f;
    fx_init(&f, 2, 128, 128, 32, 4);
    engine_req *r[2] = {submit(&f, "first long request", 100), submit(&f, "second long request", 100)};
    run_until_done(&f, r, 2);
    expect_reference(r[0], "first long request", 100);
    expect_reference(r[1], "second long request", 100);
    engine_stats st;
    engine_get_stats(f.e, &st, NULL);
    assert_true(st.n_preemptions >= 1);
    for (int i = 0; i < 2; i++) engine_req_release(r[i]);
    fx_free(&f);
}

static void test_logprobs_and_seeded_sampling(void **state)
{
    fixture f;
    fx_init(&f, 2, 128, 256, 32, 4);
    ember_token t[16];
    engine_req_params p = {0};
    p.prompt = t;
    p.n_prompt = make_prompt(t, "sample");
    p.n_predict = 30;
    p.sampling.temp = 1.5f;
    p.sampling.seed = 42;
    p.logprobs = true;
    p.top_logprobs = 3;
    engine_req *a, *b;
    assert_int_equal(engine_submit(f.e, &p, &a), EMBER_OK);
    assert_int_equal(engine_submit(f.e, &p, &b), EMBER_OK);
    engine_req *both[2] = {a, b};
    run_until_done(&f, both, 2);
    assert_string_equal(a->text, b->text);   /* same seed, same draws */
    assert_int_equal(a->n_toks, 30);
    for (int i = 0; i < a->n_toks; i++) {
        engine_tok *k = &a->toks[i];
        assert_int_equal(k->n_top, 3);
        assert_true(k->logprob <= 0);
        assert_true(k->top_logprob[0] >= k->top_logprob[1] && k->top_logprob[1] >= k->top_logprob[2]);
        assert_true(k->logprob <= k->top_logprob[0] + 1e-6f);
    }
    engine_req_release(a);
    engine_req_release(b);
    fx_free(&f);
}

/* The row-head seam (engine.h logits_top / sampler_top_k /
 * sampler_sample_top): a greedy runtime that reduces rows to heads on its
 * side must give the text and logprobs the full rows give, and the engine
 * must not read a full row for them. The heads come from the host
 * reduction the CPU backend uses (backend/logits_top.c), the reference from
 * the toy model's full rows through the engine's own full-row path. */
static int n_full_rows, n_head_calls;

static const float *counting_get_logits(void *ctx, int32_t i)
{
    n_full_rows++;
    return fake_get_logits(ctx, i);
}

static ember_status toy_logits_top(void *ctx, int32_t n, const int32_t *entries, int32_t k, ember_logits_top *out)
{
    n_head_calls++;
    const float *rows[64];
    if (n > 64) return EMBER_ERR_INVALID_ARG;
    for (int32_t r = 0; r < n; r++)
        if (!(rows[r] = fake_get_logits(ctx, entries[r]))) return EMBER_ERR_INVALID_ARG;
    ember_logits_top_host(rows, n, FAKE_N_VOCAB, k, out);
    return EMBER_OK;
}

static int32_t toy_top_k(void *ctx, const ember_sampler *s) { return ((const fake_sampler *)s)->p.temp <= 0 ? 1 : 0; }

static ember_status toy_sample_top(void *ctx, ember_sampler *s, const ember_logits_top *h, ember_token *out)
{
    *out = h->id[0];
    return EMBER_OK;
}

static void run_greedy_logprobs(bool heads, engine_req **out2)
{
    fixture f;
    fx_init(&f, 2, 128, 256, 32, 4);
    f.rt.get_logits = counting_get_logits;
    if (heads) {
        f.rt.logits_top = toy_logits_top;
        f.rt.sampler_top_k = toy_top_k;
        f.rt.sampler_sample_top = toy_sample_top;
    }
    engine_free(f.e);   /* again with the runtime table above */
    engine_config cfg = {.n_slots = 2, .n_ctx = 128, .n_batch = 32, .n_queue_max = 4};
    assert_int_equal(engine_new(&cfg, &f.rt, &f.vocab, &f.e), EMBER_OK);
    ember_token t[2][64];
    engine_req_params p[2] = {{0}, {0}};
    const char *text[2] = {"heads one", "heads two, longer"};
    for (int i = 0; i < 2; i++) {
        p[i].prompt = t[i];
        p[i].n_prompt = make_prompt(t[i], text[i]);
        p[i].n_predict = 25;
        p[i].sampling.temp = 0.0f;
        p[i].logprobs = true;
        p[i].top_logprobs = 3;
        assert_int_equal(engine_submit(f.e, &p[i], &out2[i]), EMBER_OK);
    }
    run_until_done(&f, out2, 2);
    fx_free(&f);
}

static void test_row_heads_match_full_rows(void **state)
{
    (void)state;
    engine_req *full[2], *head[2];
    n_full_rows = n_head_calls = 0;
    run_greedy_logprobs(false, full);
    assert_true(n_full_rows > 0);
    assert_int_equal(n_head_calls, 0);
    n_full_rows = n_head_calls = 0;
    run_greedy_logprobs(true, head);
    assert_int_equal(n_full_rows, 0);   /* no row came to the "host" */
    assert_true(n_head_calls > 0);
    for (int i = 0; i < 2; i++) {
        assert_string_equal(full[i]->text, head[i]->text);
        assert_int_equal(full[i]->n_toks, head[i]->n_toks);
        assert_int_equal(head[i]->n_toks, 25);
        for (int j = 0; j < head[i]->n_toks; j++) {
            const engine_tok *a = &full[i]->toks[j], *b = &head[i]->toks[j];
            assert_int_equal(a->token, b->token);
            assert_int_equal(a->n_top, b->n_top);
            assert_true(fabsf(a->logprob - b->logprob) <= 1e-5f);
            for (int k = 0; k < a->n_top; k++) {
                assert_int_equal(a->top[k], b->top[k]);
                assert_true(fabsf(a->top_logprob[k] - b->top_logprob[k]) <= 1e-5f);
            }
        }
        engine_req_release(full[i]);
        engine_req_release(head[i]);
    }
}

/* The step thread: submit from this thread, wait on the request. */
/* Embedding requests: the rows pooled over the right positions (the fake
 * model's fake_embd of every prefix of the prompt; mean, cls = position 0,
 * last, none = all rows), in the same steps as a generating request, over
 * prefill chunks of several steps, never from the prefix cache, and their
 * slots freed. */
static engine_req *submit_embd(fixture *f, const char *text, ember_pooling pooling)
{
    ember_token t[600];
    engine_req_params p = {0};
    p.prompt = t;
    p.n_prompt = make_prompt(t, text);
    p.n_predict = -1;
    p.embd = true;
    p.pooling = pooling;
    engine_req *r = NULL;
    assert_int_equal(engine_submit(f->e, &p, &r), EMBER_OK);
    return r;
}

static void test_embeddings_pooled(void **state)
{
    (void)state;
    fixture f;
    fx_init(&f, 3, 128, 512, 8, 8);   /* n_batch 8: a 21-token prompt takes several steps */
    const char *text = "embed me, if you can";
    ember_token t[64];
    const int32_t n = make_prompt(t, text);
    float rows[64][FAKE_N_EMBD];
    for (int32_t i = 0; i < n; i++) fake_embd(t, i + 1, rows[i]);

    engine_req *g = submit(&f, text, 10);   /* fills a prefix cache with the same prompt */
    run_until_done(&f, &g, 1);
    engine_req *r[5];
    r[0] = submit(&f, "and a chat beside them", 12);
    r[1] = submit_embd(&f, text, EMBER_POOLING_MEAN);
    r[2] = submit_embd(&f, text, EMBER_POOLING_CLS);
    r[3] = submit_embd(&f, text, EMBER_POOLING_LAST);
    r[4] = submit_embd(&f, text, EMBER_POOLING_NONE);
    run_until_done(&f, r, 5);
    expect_reference(r[0], "and a chat beside them", 12);
    for (int k = 1; k <= 4; k++) {
        assert_int_equal(r[k]->finish, ENGINE_FINISH_STOP);
        assert_int_equal(r[k]->n_cached, 0);
        assert_int_equal(r[k]->n_generated, 0);
        assert_int_equal(r[k]->n_embd, FAKE_N_EMBD);
        assert_non_null(r[k]->embd);
    }
    for (int32_t j = 0; j < FAKE_N_EMBD; j++) {
        double mean = 0;
        for (int32_t i = 0; i < n; i++) mean += rows[i][j];
        mean /= n;
        assert_true(fabs(r[1]->embd[j] - mean) < 1e-6);
        assert_true(r[2]->embd[j] == rows[0][j]);
        assert_true(r[3]->embd[j] == rows[n - 1][j]);
    }
    assert_int_equal(r[1]->n_embd_rows, 1);
    assert_int_equal(r[4]->n_embd_rows, n);
    assert_memory_equal(r[4]->embd, rows, sizeof(float) * (size_t)n * FAKE_N_EMBD);
    engine_stats st;
    engine_get_stats(f.e, &st, NULL);
    assert_int_equal(st.n_busy, 0);
    for (int k = 0; k < 5; k++) engine_req_release(r[k]);
    engine_req_release(g);
    fx_free(&f);
}

static void test_embeddings_refused(void **state)
{
    (void)state;
    fixture f;
    fx_init(&f, 1, 32, 64, 8, 4);
    ember_token t[40];
    engine_req_params p = {.prompt = t, .n_prompt = make_prompt(t, "x"), .embd = true, .pooling = EMBER_POOLING_RANK};
    engine_req *r = NULL;
    assert_int_equal(engine_submit(f.e, &p, &r), EMBER_ERR_INVALID_ARG);
    f.e->rt.get_embeddings = NULL;   /* a runtime without embeddings */
    p.pooling = EMBER_POOLING_MEAN;
    assert_int_equal(engine_submit(f.e, &p, &r), EMBER_ERR_UNSUPPORTED);
    fx_free(&f);
}

static void test_thread(void **state)
{
    fixture f;
    fx_init(&f, 2, 128, 256, 32, 4);
    f.m->delay_s = 0.002;
    assert_int_equal(engine_start(f.e), EMBER_OK);
    engine_req *r = submit(&f, "threaded", 15);
    engine_req_lock(r);
    while (r->finish == ENGINE_RUNNING) engine_req_wait(r, 100);
    engine_req_unlock(r);
    expect_reference(r, "threaded", 15);
    engine_req *c = submit(&f, "cancelled by stop", 100000);
    engine_stop(f.e);
    assert_int_equal(c->finish, ENGINE_FINISH_CANCELLED);
    engine_req_release(r);
    engine_req_release(c);
    fx_free(&f);
}

/* llama-server's id_slot: a request pinned to a busy slot waits for it while
 * a younger unpinned one takes the free slot; cache_prompt false decodes the
 * whole prompt; n_predict 0 puts the prompt in the cache and generates nothing. */
static void test_pinned_slot_and_no_cache(void **state)
{
    fixture f;
    fx_init(&f, 2, 256, 512, 64, 4);
    engine_req *a = submit(&f, "slot zero is busy for a while", 40);
    engine_step(f.e);
    assert_int_equal(a->slot, 0);
    ember_token t[64];
    engine_req_params p = {.prompt = t, .n_prompt = make_prompt(t, "pinned to zero"), .n_predict = 3,
                           .pin_slot = true, .id_slot = 0};
    engine_req *pinned = NULL;
    assert_int_equal(engine_submit(f.e, &p, &pinned), EMBER_OK);
    engine_req *free_one = submit(&f, "any slot", 3);
    engine_step(f.e);
    assert_int_equal(pinned->slot, -1);        /* waits for slot 0 */
    assert_int_equal(free_one->slot, 1);       /* the younger request went first */
    engine_req *all[3] = {a, pinned, free_one};
    run_until_done(&f, all, 3);
    assert_int_equal(pinned->slot, 0);
    expect_reference(pinned, "pinned to zero", 3);
    /* the same prompt without the cache, then n_predict 0, then from the cache */
    p.pin_slot = false;
    p.no_prompt_cache = true;
    engine_req *cold = NULL;
    assert_int_equal(engine_submit(f.e, &p, &cold), EMBER_OK);
    run_until_done(&f, &cold, 1);
    assert_int_equal(cold->n_cached, 0);
    expect_reference(cold, "pinned to zero", 3);
    p.no_prompt_cache = false;
    p.n_prompt = make_prompt(t, "only evaluated");
    p.n_predict = 0;
    engine_req *zero = NULL;
    assert_int_equal(engine_submit(f.e, &p, &zero), EMBER_OK);
    run_until_done(&f, &zero, 1);
    assert_int_equal(zero->finish, ENGINE_FINISH_LENGTH);
    assert_int_equal(zero->n_generated, 0);
    assert_int_equal(zero->text_len, 0);
    engine_req *warm = submit(&f, "only evaluated", 2);
    run_until_done(&f, &warm, 1);
    assert_int_equal(warm->n_cached, warm->n_prompt - 1);
    expect_reference(warm, "only evaluated", 2);
    engine_req *rs[] = {a, pinned, free_one, cold, zero, warm};
    for (size_t i = 0; i < sizeof rs / sizeof rs[0]; i++) engine_req_release(rs[i]);
    fx_free(&f);
}

/* Slot save / erase run on the engine thread: the tokens a slot holds, then
 * none; a bad slot id is refused. */
static void test_slot_ops(void **state)
{
    fixture f;
    fx_init(&f, 2, 128, 256, 32, 4);
    assert_int_equal(engine_start(f.e), EMBER_OK);
    ember_token *toks = NULL;
    int32_t n = -1;
    assert_int_equal(engine_slot_tokens(f.e, 2, &toks, &n), EMBER_ERR_INVALID_ARG);
    engine_req *r = submit(&f, "remember me", 4);
    engine_req_lock(r);
    while (r->finish == ENGINE_RUNNING) engine_req_wait(r, 100);
    engine_req_unlock(r);
    int32_t slot = r->slot;
    assert_int_equal(engine_slot_tokens(f.e, slot, &toks, &n), EMBER_OK);
    ember_token want[64];
    int32_t n_prompt = make_prompt(want, "remember me");
    assert_int_equal(n, n_prompt + 3);   /* the prompt and the generated tokens but the last */
    assert_memory_equal(toks, want, sizeof *want * (size_t)n_prompt);
    free(toks);
    int32_t erased = -1;
    assert_int_equal(engine_slot_erase(f.e, slot, &erased), EMBER_OK);
    assert_int_equal(erased, n);
    assert_int_equal(engine_slot_tokens(f.e, slot, &toks, &n), EMBER_OK);
    assert_null(toks);
    assert_int_equal(n, 0);
    engine_stop(f.e);
    assert_int_equal(engine_slot_erase(f.e, 0, &erased), EMBER_ERR_IO);
    engine_req_release(r);
    fx_free(&f);
}

/* The pipeline (src/engine/pipeline.c): a runtime that can feed a step the
 * argmax of heads not yet read (engine.h logits_top_start / _finish,
 * decode_fed). The toy's start snapshots the heads of the rows (the host
 * reduction of backend/logits_top.c) and the fed decode replaces each
 * fed entry's token by its head's argmax, as the CUDA backend does on the
 * device; get_logits after a fed decode returns the NEW step's rows, so an
 * engine that read a row of the step it is handling after queueing the next
 * gets the wrong text. Expected texts: fake_reference, as everywhere here. */
static ember_logits_top pipe_heads[64];
static int32_t pipe_n;              /* rows of the queued heads; 0: none */
static int n_fed, n_fed_bad;
static ember_token fed_tok[512];

static ember_status pipe_start(void *ctx, int32_t n, const int32_t *entries, int32_t k, bool *queued)
{
    *queued = false;
    if (pipe_n != 0 || n > 64) { n_fed_bad++; return EMBER_ERR_INVALID_ARG; }
    ember_status st = toy_logits_top(ctx, n, entries, k, pipe_heads);
    if (st != EMBER_OK) return st;
    pipe_n = n;
    *queued = true;
    return EMBER_OK;
}

static ember_status pipe_finish(void *ctx, ember_logits_top *out)
{
    if (pipe_n == 0) { n_fed_bad++; return EMBER_ERR_INVALID_ARG; }
    memcpy(out, pipe_heads, sizeof *out * (size_t)pipe_n);
    pipe_n = 0;
    return EMBER_OK;
}

static ember_status pipe_decode_fed(void *ctx, const ember_batch *b, const int32_t *top_row)
{
    if (pipe_n == 0 || b->n_tokens > 512) { n_fed_bad++; return EMBER_ERR_INVALID_ARG; }
    ember_batch c = *b;
    c.token = fed_tok;
    for (int32_t i = 0; i < b->n_tokens; i++) {
        if (top_row[i] >= pipe_n) { n_fed_bad++; return EMBER_ERR_INVALID_ARG; }
        c.token[i] = top_row[i] >= 0 ? pipe_heads[top_row[i]].id[0] : b->token[i];
    }
    n_fed++;
    return fake_decode(ctx, &c);
}

static int32_t pipe_slots = 64;   /* engine_config.pipe_max_slots for the next fx_init_pipe */

static void fx_init_pipe(fixture *f, int32_t n_slots, int32_t n_ctx, uint32_t pool, int32_t n_batch, bool on)
{
    fx_init(f, n_slots, n_ctx, pool, n_batch, 8);
    f->rt.logits_top = toy_logits_top;
    f->rt.sampler_top_k = toy_top_k;
    f->rt.sampler_sample_top = toy_sample_top;
    if (on) {
        f->rt.logits_top_start = pipe_start;
        f->rt.logits_top_finish = pipe_finish;
        f->rt.decode_fed = pipe_decode_fed;
    }
    engine_free(f->e);   /* again with the runtime table above */
    engine_config cfg = {.n_slots = n_slots, .n_ctx = n_ctx, .n_batch = n_batch, .n_queue_max = 8,
                         .pipe_max_slots = pipe_slots};
    assert_int_equal(engine_new(&cfg, &f->rt, &f->vocab, &f->e), EMBER_OK);
    pipe_n = 0;
    n_fed = n_fed_bad = 0;
}

/* Every slot's K/V holds exactly the tokens the slot says it has decoded. */
static void expect_kv_matches_slots(fixture *f)
{
    for (int32_t i = 0; i < f->e->cfg.n_slots; i++) {
        const slot *s = &f->e->slots[i];
        assert_int_equal(f->m->len[i], s->n_past);
        for (int32_t j = 0; j < s->n_past; j++) assert_int_equal(f->m->kv[i][j], s->tokens[j]);
    }
}

/* Three greedy streams that end at different steps (lengths 9, 23, 40):
 * the texts of the reference, most steps queued ahead (none past a
 * stream's last token: its length is known), each slot's K/V its tokens. */
static void test_pipeline_matches_reference(void **state)
{
    (void)state;
    fixture f;
    fx_init_pipe(&f, 3, 256, 3 * 256, 32, true);
    static const char *prompts[3] = {"pipelined one", "pipe two", "and the third stream"};
    const int32_t n_pred[3] = {9, 23, 40};
    engine_req *r[3];
    for (int i = 0; i < 3; i++) r[i] = submit(&f, prompts[i], n_pred[i]);
    run_until_done(&f, r, 3);
    for (int i = 0; i < 3; i++) expect_reference(r[i], prompts[i], n_pred[i]);
    engine_stats st;
    engine_get_stats(f.e, &st, NULL);
    assert_true(st.n_steps_pipelined >= 30);   /* all but the prefill and the last steps of each stream */
    assert_true(n_fed >= 30);
    assert_int_equal(n_fed_bad, 0);
    assert_false(f.e->inflight);
    expect_kv_matches_slots(&f);
    /* a follow-up on the first conversation reuses its cache: right only if that K/V is right */
    char follow[256];
    snprintf(follow, sizeof follow, "%s%s", prompts[0], r[0]->text);
    engine_req *g = submit(&f, follow, 12);
    run_until_done(&f, &g, 1);
    expect_reference(g, follow, 12);
    assert_true(g->n_cached > 0);
    expect_kv_matches_slots(&f);
    for (int i = 0; i < 3; i++) engine_req_release(r[i]);
    engine_req_release(g);
    fx_free(&f);
}

/* Streams that end on EOS (the queued step was fed the EOS token itself)
 * and a cancel while steps are queued ahead: texts and finishes as without
 * the pipeline, the K/V of each slot its own tokens. */
static void test_pipeline_eos_and_cancel(void **state)
{
    (void)state;
    for (int on = 0; on < 2; on++) {
        fixture f;
        fx_init_pipe(&f, 3, 256, 3 * 256, 32, on);
        f.m->eos_mod = 7;
        static const char *prompts[3] = {"eos soon", "eos later maybe", "cancel me please"};
        engine_req *r[3];
        for (int i = 0; i < 3; i++) r[i] = submit(&f, prompts[i], 60);
        for (int k = 0; k < 6; k++) engine_step(f.e);
        engine_req_cancel(r[2]);
        run_until_done(&f, r, 3);
        for (int i = 0; i < 2; i++) {
            ember_token t[64];
            const int32_t n = make_prompt(t, prompts[i]);
            char want[256];
            bool eos;
            fake_reference(t, n, 60, 7, want, &eos);
            assert_string_equal(r[i]->text ? r[i]->text : "", want);
            assert_int_equal(r[i]->finish, eos ? ENGINE_FINISH_STOP : ENGINE_FINISH_LENGTH);
        }
        assert_true(r[2]->finish == ENGINE_FINISH_CANCELLED || r[2]->finish == ENGINE_FINISH_STOP);
        assert_int_equal(n_fed_bad, 0);
        if (!on) assert_int_equal(n_fed, 0);
        expect_kv_matches_slots(&f);
        for (int i = 0; i < 3; i++) engine_req_release(r[i]);
        fx_free(&f);
    }
}

/* No step is queued ahead for a request whose sampler needs more than the
 * argmax (logprobs here), nor while a request waits to be admitted. */
static void test_pipeline_only_for_plain_greedy(void **state)
{
    (void)state;
    fixture f;
    fx_init_pipe(&f, 1, 256, 256, 32, true);
    ember_token t[64];
    engine_req_params p = {0};
    p.prompt = t;
    p.n_prompt = make_prompt(t, "with logprobs");
    p.n_predict = 10;
    p.logprobs = true;
    p.top_logprobs = 2;
    engine_req *a = NULL;
    assert_int_equal(engine_submit(f.e, &p, &a), EMBER_OK);
    run_until_done(&f, &a, 1);
    expect_reference(a, "with logprobs", 10);
    assert_int_equal(n_fed, 0);
    /* one slot, two greedy requests: the second waits in the queue, so the
     * first runs unpipelined until it ends; then the second pipelines */
    engine_req *b = submit(&f, "first", 15), *c = submit(&f, "second", 15);
    engine_step(f.e);
    engine_step(f.e);
    assert_int_equal(n_fed, 0);
    engine_req *bc[2] = {b, c};
    run_until_done(&f, bc, 2);
    expect_reference(b, "first", 15);
    expect_reference(c, "second", 15);
    assert_true(n_fed >= 10);
    expect_kv_matches_slots(&f);
    engine_req_release(a);
    engine_req_release(b);
    engine_req_release(c);
    fx_free(&f);
}

/* A pool too small for three streams: the newest is preempted and resumes
 * when a stream's cache can be evicted (the first stream ends on a stop
 * string). With the pipeline the texts, the finishes and the steps the
 * preempted request waits are those without it (a waiting request stops
 * the queueing ahead, as a queued one does), and each slot's K/V is its
 * tokens. */
static void preempt_run(bool on, char text[3][512], int *wait_steps)
{
    fixture f;
    fx_init_pipe(&f, 3, 256, 200, 32, on);
    const char *pa = "alpha stream", *pb = "bravo stream", *pc = "charlie strm";
    ember_token t[64];
    const int32_t n = make_prompt(t, pa);
    char want[1024];
    bool eos;
    fake_reference(t, n, 150, 0, want, &eos);
    char stop[5];
    memcpy(stop, want + 60, 4);
    stop[4] = 0;
    engine_req_params p = {0};
    p.prompt = t;
    p.n_prompt = n;
    p.n_predict = 150;
    p.stop[0] = stop;
    p.n_stop = 1;
    engine_req *r[3];
    assert_int_equal(engine_submit(f.e, &p, &r[0]), EMBER_OK);
    r[1] = submit(&f, pb, 150);
    r[2] = submit(&f, pc, 150);
    *wait_steps = 0;
    for (int guard = 0; guard < 10000; guard++) {
        if (r[0]->finish != ENGINE_RUNNING && r[1]->finish != ENGINE_RUNNING && r[2]->finish != ENGINE_RUNNING) break;
        engine_step(f.e);
        for (int i = 0; i < 3; i++)
            if (f.e->slots[i].req == r[2] && f.e->slots[i].state == SLOT_WAIT) ++*wait_steps;
    }
    assert_int_equal(r[0]->finish, ENGINE_FINISH_STOP);
    assert_true(f.e->st.n_preemptions >= 1);
    if (on) assert_true(f.e->st.n_steps_pipelined > 0);
    assert_int_equal(n_fed_bad, 0);
    expect_kv_matches_slots(&f);
    for (int i = 0; i < 3; i++) {
        snprintf(text[i], 512, "%d %s", (int)r[i]->finish, r[i]->text ? r[i]->text : "");
        engine_req_release(r[i]);
    }
    fx_free(&f);
}

static void test_pipeline_preemption_as_without(void **state)
{
    (void)state;
    char off[3][512], on[3][512];
    int w_off, w_on;
    preempt_run(false, off, &w_off);
    preempt_run(true, on, &w_on);
    assert_true(w_off > 0);
    assert_int_equal(w_on, w_off);
    for (int i = 0; i < 3; i++) assert_string_equal(on[i], off[i]);
}

/* The default (pipe_max_slots 0): steps are queued ahead only while one
 * slot generates: two streams together are never fed, the longer one alone
 * after the shorter ends is. */
static void test_pipeline_default_one_slot(void **state)
{
    (void)state;
    fixture f;
    pipe_slots = 0;
    fx_init_pipe(&f, 2, 256, 512, 32, true);
    pipe_slots = 64;
    engine_req *r[2] = {submit(&f, "short one", 8), submit(&f, "the longer one", 40)};
    int fed_while_both = 0;
    for (int guard = 0; guard < 1000 && (r[0]->finish == ENGINE_RUNNING || r[1]->finish == ENGINE_RUNNING); guard++) {
        const int before = n_fed;
        const bool both = f.e->slots[0].state == SLOT_GENERATE && f.e->slots[1].state == SLOT_GENERATE;
        engine_step(f.e);
        if (both && n_fed > before) fed_while_both++;
    }
    assert_int_equal(fed_while_both, 0);
    assert_true(n_fed >= 20);
    expect_reference(r[0], "short one", 8);
    expect_reference(r[1], "the longer one", 40);
    expect_kv_matches_slots(&f);
    for (int i = 0; i < 2; i++) engine_req_release(r[i]);
    fx_free(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_single_request_matches_reference),
        cmocka_unit_test(test_concurrent_equal_alone),
        cmocka_unit_test(test_chunked_prefill_does_not_stall),
        cmocka_unit_test(test_prefill_chunk_limit),
        cmocka_unit_test(test_prefix_cache_reuse),
        cmocka_unit_test(test_prefix_fork_from_busy_slot),
        cmocka_unit_test(test_new_conversation_keeps_other_caches),
        cmocka_unit_test(test_cancel_frees_slot_within_one_step),
        cmocka_unit_test(test_stop_string_cuts_output),
        cmocka_unit_test(test_stop_holdback),
        cmocka_unit_test(test_eos_finishes_with_stop),
        cmocka_unit_test(test_submit_errors),
        cmocka_unit_test(test_pool_pressure),
        cmocka_unit_test(test_pool_full_newest_waits),
        cmocka_unit_test(test_logprobs_and_seeded_sampling),
        cmocka_unit_test(test_row_heads_match_full_rows),
        cmocka_unit_test(test_pipeline_matches_reference),
        cmocka_unit_test(test_pipeline_eos_and_cancel),
        cmocka_unit_test(test_pipeline_only_for_plain_greedy),
        cmocka_unit_test(test_pipeline_preemption_as_without),
        cmocka_unit_test(test_pipeline_default_one_slot),
        cmocka_unit_test(test_embeddings_pooled),
        cmocka_unit_test(test_embeddings_refused),
        cmocka_unit_test(test_thread),
        cmocka_unit_test(test_pinned_slot_and_no_cache),
        cmocka_unit_test(test_slot_ops),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
