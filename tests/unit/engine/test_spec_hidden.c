/* The proposer's hidden-state hook (spec.h: spec_input.hidden) end to end:
 * the engine over the real runtime (tiny gemma3 of tests/golden/runtime,
 * two slots decoding in the same batches) with a trivial proposer that asks
 * for the states after layers 4 and 1, drafts the greedy continuation (from
 * a plain forward run) with a wrong token at every third draft position
 * (so 0, 1, 2 or more drafts are accepted), and records every hidden row the
 * engine hands it. Checked against a forward run of each final sequence in
 * one batch with ember_set_hidden_layers: each row must be the state of the
 * position the engine says (hidden_pos + r), layer by layer, every position
 * from the last prompt token on is handed over exactly once, in order, and
 * the output is the greedy continuation (speculation stays lossless).
 * The hidden values themselves are checked against an independent float64
 * implementation in tests/unit/model/test_partial_forward.c. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "ember.h"
#include "engine/engine.h"
#include "engine/runtime_ember.h"
#include "engine/spec/spec.h"

#define V 32
#define E 32
#define N_PRED 20
#define N_REQ 2
#define MAX_POS 64

static const int32_t layers[2] = {4, 1};

typedef struct rec {
    ember_token want[N_REQ][MAX_POS];   /* prompt + greedy continuation */
    int32_t n_prompt[N_REQ];
    float got[N_REQ][MAX_POS][2][E];    /* rows handed over, by position */
    int seen[N_REQ][MAX_POS];
    int32_t next_pos[N_REQ];            /* positions must come in order */
    int n_calls_with_rows, max_rows, bad_order;
} rec;

static int which(const rec *r, const spec_input *in)
{
    for (int q = 0; q < N_REQ; q++)
        if (in->n_prompt == r->n_prompt[q] && !memcmp(in->tokens, r->want[q], sizeof(ember_token) * (size_t)in->n_prompt))
            return q;
    return -1;
}

static int32_t propose(void *self, const spec_input *in, int32_t n_max, float p_min, ember_token *draft, float *q)
{
    (void)p_min; (void)q;
    rec *r = self;
    int k = which(r, in);
    assert_true(k >= 0);
    assert_int_equal(in->n_hidden, 2);
    assert_int_equal(in->n_embd, E);
    assert_int_equal(in->hidden_layer[0], 4);
    if (in->n_hidden_rows > 0) {
        r->n_calls_with_rows++;
        if (in->n_hidden_rows > r->max_rows) r->max_rows = in->n_hidden_rows;
        if (in->hidden_pos != r->next_pos[k]) r->bad_order++;
        /* the rows end at the last committed position: tokens[n_tokens - 2] */
        assert_int_equal(in->hidden_pos + in->n_hidden_rows, in->n_tokens - 1);
        for (int32_t row = 0; row < in->n_hidden_rows; row++) {
            int32_t pos = in->hidden_pos + row;
            assert_true(pos >= 0 && pos < MAX_POS);
            r->seen[k][pos]++;
            memcpy(r->got[k][pos], in->hidden + (size_t)row * 2 * E, sizeof(float) * 2 * E);
        }
        r->next_pos[k] = in->hidden_pos + in->n_hidden_rows;
    }
    int32_t n = 0;
    for (; n < n_max && in->n_tokens + n < r->n_prompt[k] + N_PRED; n++) {
        ember_token t = r->want[k][in->n_tokens + n];
        draft[n] = n % 3 == 2 ? (t + 1) % V : t;
    }
    return n;
}

static int32_t piece(void *ud, ember_token t, char *buf, int32_t cap)
{
    (void)ud;
    return snprintf(buf, (size_t)cap, "<%d>", t);
}
static bool never_eog(void *ud, ember_token t) { (void)ud; (void)t; return false; }

static ember_context *new_ctx(ember_model *m, uint32_t n_seq)
{
    ember_context_params p = ember_context_default_params();
    p.n_ctx = MAX_POS;
    p.n_seq_max = n_seq;
    p.n_batch = 32;
    p.n_ubatch = 32;
    p.n_threads = 1;
    p.type_k = p.type_v = EMBER_KV_F32;
    ember_context *c = NULL;
    assert_int_equal(ember_context_new(m, &p, &c), EMBER_OK);
    return c;
}

static void test_hidden_rows_of_verified_positions(void **st)
{
    (void)st;
    ember_model *m = NULL;
    assert_int_equal(ember_model_load("tests/golden/runtime/tiny_gemma3.gguf", NULL, &m), EMBER_OK);
    static rec r;
    memset(&r, 0, sizeof r);
    const ember_token prompts[N_REQ][8] = {{2, 5, 17, 9, 30, 11}, {2, 23, 8, 15, 29, 4, 4, 7}};
    const int32_t n_prompts[N_REQ] = {6, 8};

    /* the forward run: greedy continuations, one token at a time */
    ember_context *ref = new_ctx(m, 1);
    ember_batch b;
    assert_int_equal(ember_batch_init(MAX_POS, &b), EMBER_OK);
    for (int q = 0; q < N_REQ; q++) {
        r.n_prompt[q] = n_prompts[q];
        memcpy(r.want[q], prompts[q], sizeof(ember_token) * (size_t)n_prompts[q]);
        ember_seq_remove(ref, 0);
        int32_t n = n_prompts[q];
        b.n_tokens = n;
        for (int i = 0; i < n; i++) { b.token[i] = r.want[q][i]; b.pos[i] = i; b.seq_id[i] = 0; b.logits[i] = i == n - 1; }
        assert_int_equal(ember_decode(ref, &b), EMBER_OK);
        for (int g = 0; g < N_PRED; g++) {
            const float *l = ember_get_logits(ref, -1);
            int best = 0;
            for (int j = 1; j < V; j++) if (l[j] > l[best]) best = j;
            r.want[q][n] = best;
            b.n_tokens = 1;
            b.token[0] = best; b.pos[0] = n; b.seq_id[0] = 0; b.logits[0] = 1;
            n++;
            assert_int_equal(ember_decode(ref, &b), EMBER_OK);
        }
    }
    r.next_pos[0] = n_prompts[0] - 1;
    r.next_pos[1] = n_prompts[1] - 1;

    /* the engine with the recording proposer */
    ember_context *c = new_ctx(m, 2);
    engine_runtime rt = engine_runtime_ember(c, V, E);
    engine_vocab vocab = {.token_piece = piece, .is_eog = never_eog};
    spec_params sp = spec_default_params();
    sp.type = SPEC_NGRAM;
    sp.n_max = 4;
    sp.adaptive = false;
    spec_engine *se;
    assert_int_equal(spec_engine_new(&sp,
                                     (spec_proposer){.name = "recorder", .self = &r, .propose = propose,
                                                     .n_hidden_layers = 2, .hidden_layers = layers},
                                     2, &se),
                     EMBER_OK);
    engine_config cfg = {.n_slots = 2, .n_ctx = MAX_POS, .n_batch = 32, .n_queue_max = 4, .spec = se};
    engine *e;
    assert_int_equal(engine_new(&cfg, &rt, &vocab, &e), EMBER_OK);
    engine_req *req[N_REQ];
    for (int q = 0; q < N_REQ; q++) {
        engine_req_params p = {0};
        p.prompt = prompts[q];
        p.n_prompt = n_prompts[q];
        p.n_predict = N_PRED;
        p.sampling = ember_sampler_default_params();
        p.sampling.temp = 0;
        p.ignore_eos = true;
        assert_int_equal(engine_submit(e, &p, &req[q]), EMBER_OK);
    }
    for (int guard = 0; guard < 1000 && (req[0]->finish == ENGINE_RUNNING || req[1]->finish == ENGINE_RUNNING); guard++)
        engine_step(e);

    for (int q = 0; q < N_REQ; q++) {
        /* lossless: the text is the greedy continuation */
        char want[512] = "";
        for (int g = 0; g < N_PRED; g++) {
            char t[16];
            snprintf(t, sizeof t, "<%d>", r.want[q][n_prompts[q] + g]);
            strcat(want, t);
        }
        assert_string_equal(req[q]->text, want);
        assert_true(req[q]->n_draft > 0);
        assert_true(req[q]->n_draft_accepted > 0 && req[q]->n_draft_accepted < req[q]->n_draft);
    }
    assert_int_equal(r.bad_order, 0);
    assert_true(r.max_rows >= 2);   /* accepted drafts were handed over too */

    /* compare with a forward run of each final sequence in one batch */
    const int32_t cap[2] = {4, 1};
    assert_int_equal(ember_set_hidden_layers(ref, 2, cap), EMBER_OK);
    for (int q = 0; q < N_REQ; q++) {
        ember_seq_remove(ref, 0);
        int32_t n = n_prompts[q] + N_PRED;
        b.n_tokens = n;
        for (int i = 0; i < n; i++) { b.token[i] = r.want[q][i]; b.pos[i] = i; b.seq_id[i] = 0; b.logits[i] = 1; }
        assert_int_equal(ember_decode(ref, &b), EMBER_OK);
        /* every position from the last prompt token on was handed over once,
         * up to those verified by the step that ended the request (at most
         * n_max + 1 = 5 rows; the last generated token is never decoded) */
        assert_true(r.next_pos[q] >= n - 1 - 5);
        for (int pos = 0; pos < n; pos++) {
            int expect = pos >= n_prompts[q] - 1 && pos < r.next_pos[q];
            if (r.seen[q][pos] != expect) fail_msg("request %d position %d handed over %d times", q, pos, r.seen[q][pos]);
            if (!expect) continue;
            for (int j = 0; j < 2; j++) {
                const float *h = ember_get_hidden(ref, pos, j);
                assert_non_null(h);
                for (int x = 0; x < E; x++)
                    if (fabsf(h[x] - r.got[q][pos][j][x]) > 1e-3f * (1 + fabsf(h[x])))
                        fail_msg("request %d position %d layer %d element %d: %f, forward run %f", q, pos, cap[j], x,
                                 r.got[q][pos][j][x], h[x]);
            }
        }
    }
    for (int q = 0; q < N_REQ; q++) engine_req_release(req[q]);
    engine_free(e);
    spec_engine_free(se);
    ember_batch_free(&b);
    ember_context_free(c);
    ember_context_free(ref);
    ember_model_free(m);
}

/* A runtime that exports no hidden states refuses a proposer that reads them. */
static void test_runtime_without_hidden_refused(void **st)
{
    (void)st;
    ember_model *m = NULL;
    assert_int_equal(ember_model_load("tests/golden/runtime/tiny_gemma3.gguf", NULL, &m), EMBER_OK);
    ember_context *c = new_ctx(m, 1);
    engine_runtime rt = engine_runtime_ember(c, V, E);
    rt.get_hidden = NULL;
    engine_vocab vocab = {.token_piece = piece, .is_eog = never_eog};
    spec_params sp = spec_default_params();
    sp.type = SPEC_NGRAM;
    spec_engine *se;
    static rec r;
    assert_int_equal(spec_engine_new(&sp,
                                     (spec_proposer){.name = "recorder", .self = &r, .propose = propose,
                                                     .n_hidden_layers = 2, .hidden_layers = layers},
                                     1, &se),
                     EMBER_OK);
    engine_config cfg = {.n_slots = 1, .n_ctx = MAX_POS, .n_batch = 32, .spec = se};
    engine *e = NULL;
    assert_int_equal(engine_new(&cfg, &rt, &vocab, &e), EMBER_ERR_UNSUPPORTED);
    assert_null(e);
    spec_engine_free(se);
    ember_context_free(c);
    ember_model_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hidden_rows_of_verified_positions),
        cmocka_unit_test(test_runtime_without_hidden_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
