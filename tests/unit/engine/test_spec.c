/* Speculative decoding (src/engine/spec): the verifier's acceptance rule in
 * isolation (chi-square of its output against the target distribution p,
 * which the test computes itself: the rule's theorem, Leviathan et al. 2023
 * Thm. 1, says the output is distributed as p whatever q is), the n-gram
 * proposer on hand-made histories, the adaptive length, and the engine's
 * verify/rollback seam against the toy model of tests/common/fake_model.h
 * (expected text from fake_reference, computed without the engine), and the
 * engine's sampled output at temperature 1 with and without speculation
 * against the target's exact distribution (chi-square; computed by the test
 * from the toy model's logits). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "../../common/fake_model.h"
#include "engine/engine_internal.h"
#include "engine/spec/spec.h"

/* splitmix64: the test's own uniform generator */
static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static double uni(void)
{
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (double)(z >> 11) * 0x1.0p-53;
}

static int32_t draw(const float *q, int32_t n)
{
    double u = uni(), acc = 0;
    for (int32_t i = 0; i < n; i++) { acc += q[i]; if (u < acc) return i; }
    return n - 1;
}

/* chi-square of counts[n] against probabilities p[n] over N draws */
static double chi2(const long *counts, const float *p, int32_t n, long N)
{
    double c = 0;
    for (int32_t i = 0; i < n; i++) {
        double e = (double)N * p[i];
        if (e > 0) c += (counts[i] - e) * (counts[i] - e) / e;
        else if (counts[i] > 0) return 1e9;
    }
    return c;
}

static void softmax_t(const float *logits, int32_t n, float temp, float *p)
{
    double mx = logits[0], sum = 0;
    for (int32_t i = 1; i < n; i++) if (logits[i] > mx) mx = logits[i];
    for (int32_t i = 0; i < n; i++) sum += exp((logits[i] - mx) / temp);
    for (int32_t i = 0; i < n; i++) p[i] = (float)(exp((logits[i] - mx) / temp) / sum);
}

/* Output of the rule ~ p for a draft distribution q unlike p, for a one-hot
 * q (deterministic drafts, what the engine's proposers produce), and for
 * q = p. 5 degrees of freedom: chi2 < 20.5 at p-value 0.001. */
static void test_verifier_keeps_target_distribution(void **state)
{
    (void)state;
    enum { N_TOK = 6 };
    const float logits[N_TOK] = {2.0f, 1.5f, 0.3f, -0.5f, 1.0f, -2.0f};
    float p[N_TOK];
    softmax_t(logits, N_TOK, 0.8f, p);
    const float q_unlike[N_TOK] = {0.05f, 0.1f, 0.4f, 0.3f, 0.1f, 0.05f};
    const float q_onehot[N_TOK] = {0, 0, 0, 1, 0, 0};
    const float *qs[3] = {q_unlike, q_onehot, p};
    const long N = 200000;
    for (int k = 0; k < 3; k++) {
        long counts[N_TOK] = {0}, n_acc = 0;
        for (long it = 0; it < N; it++) {
            int32_t x = draw(qs[k], N_TOK);
            bool acc;
            int32_t y = spec_verify_token(p, qs[k], N_TOK, x, uni(), uni(), &acc);
            assert_true(y >= 0 && y < N_TOK);
            if (acc) assert_int_equal(y, x);
            counts[y]++;
            n_acc += acc;
        }
        double c = chi2(counts, p, N_TOK, N);
        print_message("q #%d: chi2 %.2f, acceptance %.3f\n", k, c, (double)n_acc / N);
        assert_true(c < 20.5);
        /* acceptance rate = sum min(p, q) (Leviathan et al. 2023, Thm. 3.5) */
        double beta = 0;
        for (int i = 0; i < N_TOK; i++) beta += p[i] < qs[k][i] ? p[i] : qs[k][i];
        assert_true(fabs((double)n_acc / N - beta) < 0.01);
    }
    /* power: emitting the draft as is (no rejection) is detected */
    long counts[N_TOK] = {0};
    for (long it = 0; it < N; it++) counts[draw(q_unlike, N_TOK)]++;
    assert_true(chi2(counts, p, N_TOK, N) > 1000);
}

static ember_status ngram(spec_proposer *pr) { return spec_ngram_new(2, 4, pr); }

static void test_ngram_lookup(void **state)
{
    (void)state;
    spec_proposer pr;
    assert_int_equal(ngram(&pr), EMBER_OK);
    ember_token d[8];
    /* "... 5 6 7 8 9 ... 5 6 7": the 3-gram 5 6 7 occurred, followed by 8 9 1 */
    const ember_token h[] = {1, 5, 6, 7, 8, 9, 1, 2, 3, 5, 6, 7};
    spec_input in = {.slot = 0, .tokens = h, .n_tokens = 12, .n_prompt = 9};
    int32_t n = pr.propose(pr.self, &in, 3, 0, d, NULL);
    assert_int_equal(n, 3);
    assert_int_equal(d[0], 8);
    assert_int_equal(d[1], 9);
    assert_int_equal(d[2], 1);
    /* the continuation stops at the history's end */
    n = pr.propose(pr.self, &in, 8, 0, d, NULL);
    assert_int_equal(n, 8);
    /* the latest occurrence wins: 4 4 x ... 4 4 y ... 4 4 -> y */
    const ember_token h2[] = {4, 4, 10, 0, 4, 4, 11, 0, 4, 4};
    in = (spec_input){.slot = 0, .tokens = h2, .n_tokens = 10};
    n = pr.propose(pr.self, &in, 2, 0, d, NULL);
    assert_int_equal(n, 2);
    assert_int_equal(d[0], 11);
    assert_int_equal(pr.match_len(pr.self), 3);   /* the key; 10 != 11 before it */
    /* a copied span: the 4-gram 7 8 9 10 matches, and so do the 6 tokens
     * before it (9 != 42 stops it): match length 10 */
    const ember_token h4[] = {9, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 42, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    in = (spec_input){.slot = 0, .tokens = h4, .n_tokens = 22};
    assert_int_equal(pr.propose(pr.self, &in, 4, 0, d, NULL), 4);
    assert_int_equal(d[0], 42);
    assert_int_equal(pr.match_len(pr.self), 10);
    /* no repeated 2-gram: no draft */
    const ember_token h3[] = {1, 2, 3, 4, 5, 1};
    in = (spec_input){.slot = 0, .tokens = h3, .n_tokens = 6};
    assert_int_equal(pr.propose(pr.self, &in, 4, 0, d, NULL), 0);
    assert_int_equal(pr.match_len(pr.self), 0);
    pr.free(pr.self);
    assert_int_equal(spec_ngram_new(0, 4, &pr), EMBER_ERR_INVALID_ARG);
}

/* A proposer that knows the toy model's rule: drafts the true continuation
 * but makes draft token `wrong_at` wrong, with wrong_at cycling over calls
 * (== n_max: the whole draft is right). */
typedef struct oracle { int eos_mod; int calls; } oracle;

static int32_t oracle_propose(void *self, const spec_input *in, int32_t n_max, float p_min, ember_token *d, float *q)
{
    (void)p_min; (void)q;
    oracle *o = self;
    int32_t wrong_at = o->calls++ % (n_max + 2);
    ember_token *h = malloc(sizeof *h * (size_t)(in->n_tokens + n_max));
    memcpy(h, in->tokens, sizeof *h * (size_t)in->n_tokens);
    float l[FAKE_N_VOCAB];
    for (int32_t k = 0; k < n_max; k++) {
        fake_logits(h, in->n_tokens + k, o->eos_mod, l);
        ember_token t = fake_argmax(l);
        if (k == wrong_at) t = t == 'q' ? 'z' : 'q';
        d[k] = h[in->n_tokens + k] = t;
    }
    free(h);
    return n_max;
}

static void run_engine_with(int n_slots, int eos_mod, int32_t n_max, bool adaptive)
{
    fake_model *m = fake_model_new(n_slots, 256, 256u * (uint32_t)n_slots, 64);
    m->eos_mod = eos_mod;
    engine_runtime rt = fake_runtime(m);
    engine_vocab vocab = fake_vocab();
    oracle o = {.eos_mod = eos_mod};
    spec_params sp = spec_default_params();
    sp.type = SPEC_NGRAM;
    sp.n_max = n_max;
    sp.adaptive = adaptive;
    spec_engine *se;
    assert_int_equal(spec_engine_new(&sp, (spec_proposer){.name = "oracle", .self = &o, .propose = oracle_propose},
                                     n_slots, &se),
                     EMBER_OK);
    engine_config cfg = {.n_slots = n_slots, .n_ctx = 256, .n_batch = 64, .n_queue_max = 16, .spec = se};
    engine *e;
    assert_int_equal(engine_new(&cfg, &rt, &vocab, &e), EMBER_OK);
    const char *prompts[] = {"alpha", "beta gamma", "a longer prompt of several words", "x", "delta"};
    const int32_t n_predict[] = {40, 7, 63, 1, 100};
    engine_req *r[5];
    ember_token t[64];
    for (int i = 0; i < 5; i++) {
        engine_req_params p = {0};
        p.n_prompt = 0;
        t[p.n_prompt++] = FAKE_BOS;
        for (const char *c = prompts[i]; *c; c++) t[p.n_prompt++] = (unsigned char)*c;
        p.prompt = t;
        p.n_predict = n_predict[i];
        assert_int_equal(engine_submit(e, &p, &r[i]), EMBER_OK);
    }
    for (int guard = 0; guard < 10000; guard++) {
        bool all = true;
        for (int i = 0; i < 5; i++) all &= r[i]->finish != ENGINE_RUNNING;
        if (all) break;
        engine_step(e);
    }
    uint64_t drafted = 0, accepted = 0;
    for (int i = 0; i < 5; i++) {
        int32_t n = 0;
        t[n++] = FAKE_BOS;
        for (const char *c = prompts[i]; *c; c++) t[n++] = (unsigned char)*c;
        char want[256];
        bool eos;
        fake_reference(t, n, n_predict[i], eos_mod, want, &eos);
        assert_string_equal(r[i]->text ? r[i]->text : "", want);
        assert_int_equal(r[i]->finish, eos ? ENGINE_FINISH_STOP : ENGINE_FINISH_LENGTH);
        assert_int_equal(r[i]->n_generated, (int32_t)strlen(want) + (eos ? 1 : 0));
        assert_true(r[i]->n_draft_accepted <= r[i]->n_draft);
        drafted += (uint64_t)r[i]->n_draft;
        accepted += (uint64_t)r[i]->n_draft_accepted;
        engine_req_release(r[i]);
    }
    engine_stats st;
    engine_get_stats(e, &st, NULL);
    assert_true(st.spec_on);
    assert_int_equal(st.spec.n_drafted, drafted);
    assert_int_equal(st.spec.n_accepted, accepted);
    assert_true(accepted > 0 && accepted < drafted);
    assert_int_equal(st.spec.drafted_at[0], st.spec.n_drafts);
    /* the toy model saw fewer steps than tokens: drafts were used */
    assert_true(st.n_steps < st.n_gen_tokens);
    engine_free(e);
    assert_int_equal(m->n_violations, 0);   /* positions consecutive after every rollback */
    /* every idle slot's KV equals its token history (rollback left no draft) */
    fake_model_free(m);
    spec_engine_free(se);
}

/* Measured row cost (spec_engine_step_time): no-draft steps of 1 row take
 * 0.1 s, steps of 1 row + 2 drafts 0.2 s, so a draft row costs
 * (0.2 / 0.1 - 1) / 2 = 0.5 of a step; used after 8 samples, only with
 * row_cost_auto. With 2 slot rows (0.16 s) and 2 drafts (0.24 s) a draft
 * row costs (0.24 - 0.16) / 2 / (0.16 / 2) = 0.5 of a slot's share. */
static void test_measured_row_cost(void **state)
{
    (void)state;
    for (int autom = 0; autom < 2; autom++) {
        spec_params sp = spec_default_params();
        sp.type = SPEC_NGRAM;
        sp.row_cost_auto = autom;
        spec_proposer prop;
        assert_int_equal(spec_ngram_new(2, 4, &prop), EMBER_OK);
        spec_engine *se;
        assert_int_equal(spec_engine_new(&sp, prop, 2, &se), EMBER_OK);
        for (int i = 0; i < 5; i++) spec_engine_step_time(se, 0.1, 1, 0);
        for (int i = 0; i < 7; i++) spec_engine_step_time(se, 0.2, 3, 2);
        assert_float_equal(spec_engine_row_cost(se), 0.35, 1e-6);   /* fewer than 8 samples */
        spec_engine_step_time(se, 0.2, 3, 2);
        spec_engine_step_time(se, 0.5, 9, 0);   /* more rows than slots: ignored */
        assert_float_equal(spec_engine_row_cost(se), autom ? 0.5 : 0.35, 1e-6);
        spec_engine_step_time(se, 0.16, 2, 0);   /* 2 slots now: the prior 2 x 0.35 until measured */
        assert_float_equal(spec_engine_row_cost(se), autom ? 0.7 : 0.35, 1e-6);
        for (int i = 0; i < 8; i++) spec_engine_step_time(se, 0.24, 4, 2);
        assert_float_equal(spec_engine_row_cost(se), autom ? 0.5 : 0.35, 1e-6);
        spec_engine_free(se);
    }
}

static void test_engine_verify_rollback(void **state)
{
    (void)state;
    run_engine_with(1, 0, 4, false);
    run_engine_with(3, 0, 6, true);
    run_engine_with(2, 5, 5, true);    /* EOS inside drafts */
    run_engine_with(5, 9, 16, true);
}

/* The class of token t after history h: 0 the target's argmax, 1 its
 * runner-up, 2 any other token (fake_logits: 8.0, 6.5, the rest < 1). */
static int tok_class(const float *l, ember_token t)
{
    const int32_t a = fake_argmax(l);
    return t == a ? 0 : t == (a + 1) % 256 ? 1 : 2;
}

/* A proposer that drafts the target's greedy continuation (q one-hot at
 * the argmax chain, the engine's kind of draft): accepted ~73% a token at
 * temperature 1, so both outcomes of the rule are exercised. */
static int32_t greedy_propose(void *self, const spec_input *in, int32_t n_max, float p_min, ember_token *d, float *q)
{
    (void)self; (void)p_min; (void)q;
    ember_token h[64];
    if (in->n_tokens + n_max > 64) return 0;
    memcpy(h, in->tokens, sizeof *h * (size_t)in->n_tokens);
    float l[FAKE_N_VOCAB];
    for (int32_t k = 0; k < n_max; k++) {
        fake_logits(h, in->n_tokens + k, 0, l);
        d[k] = h[in->n_tokens + k] = fake_argmax(l);
    }
    return n_max;
}

enum { SD_NPRED = 3, SD_NCELL = 27, SD_NREQ = 12000 };
static const ember_logit_bias no_eos = {.token = FAKE_EOS, .bias = -1000.0f};
/* fake_logits with the requests' logit bias */
static void sd_logits(const ember_token *h, int32_t n, float *l)
{
    fake_logits(h, n, 0, l);
    l[no_eos.token] += no_eos.bias;
}

/* Counts of the class triple of the first SD_NPRED sampled tokens (of
 * SD_NPRED + 2 generated) over SD_NREQ requests (seeds 1..SD_NREQ) at temperature 1, with the greedy
 * proposer (n_max 3) when spec, else plain decoding; the engine's
 * drafted / accepted counters. */
static void sample_classes(bool spec, const ember_token *prompt, int32_t n_prompt, long *counts, uint64_t *n_drafted,
                           uint64_t *n_accepted)
{
    enum { NS = 4 };
    fake_model *m = fake_model_new(NS, 64, 64u * NS, 64);
    engine_runtime rt = fake_runtime(m);
    engine_vocab vocab = fake_vocab();
    spec_engine *se = NULL;
    if (spec) {
        spec_params sp = spec_default_params();
        sp.type = SPEC_NGRAM;
        sp.n_max = SD_NPRED;
        sp.adaptive = false;
        assert_int_equal(spec_engine_new(&sp, (spec_proposer){.name = "greedy", .propose = greedy_propose}, NS, &se),
                         EMBER_OK);
    }
    engine_config cfg = {.n_slots = NS, .n_ctx = 64, .n_batch = 64, .n_queue_max = 16, .spec = se};
    engine *e;
    assert_int_equal(engine_new(&cfg, &rt, &vocab, &e), EMBER_OK);
    memset(counts, 0, sizeof(long) * SD_NCELL);
    for (int32_t i0 = 0; i0 < SD_NREQ; i0 += 16) {
        engine_req *r[16];
        for (int i = 0; i < 16; i++) {
            engine_req_params p = {0};
            p.prompt = prompt;
            p.n_prompt = n_prompt;
            p.n_predict = SD_NPRED + 2;   /* drafts cover positions 2 and 3 (one token is always sampled) */
            p.sampling = ember_sampler_default_params();
            p.sampling.temp = 1.0f;
            p.sampling.seed = (uint32_t)(i0 + i + 1);
            p.sampling.logit_bias = &no_eos;   /* EOS (logit < 1 in fake_logits) never ends a request early */
            p.sampling.n_logit_bias = 1;
            p.logprobs = true;                 /* r->toks: the token ids */
            assert_int_equal(engine_submit(e, &p, &r[i]), EMBER_OK);
        }
        for (int guard = 0; guard < 1000; guard++) {
            bool all = true;
            for (int i = 0; i < 16; i++) all &= r[i]->finish != ENGINE_RUNNING;
            if (all) break;
            engine_step(e);
        }
        for (int i = 0; i < 16; i++) {
            assert_int_equal(r[i]->finish, ENGINE_FINISH_LENGTH);
            assert_int_equal(r[i]->n_toks, SD_NPRED + 2);
            ember_token h[64];
            memcpy(h, prompt, sizeof *h * (size_t)n_prompt);
            int cell = 0;
            for (int k = 0; k < SD_NPRED; k++) {
                float l[FAKE_N_VOCAB];
                fake_logits(h, n_prompt + k, 0, l);
                cell = cell * 3 + tok_class(l, r[i]->toks[k].token);
                h[n_prompt + k] = r[i]->toks[k].token;
            }
            counts[cell]++;
            engine_req_release(r[i]);
        }
    }
    engine_stats st;
    engine_get_stats(e, &st, NULL);
    *n_drafted = spec ? st.spec.n_drafted : 0;
    *n_accepted = spec ? st.spec.n_accepted : 0;
    engine_free(e);
    assert_int_equal(m->n_violations, 0);
    fake_model_free(m);
    if (se) spec_engine_free(se);
}

/* The engine's speculative output at temperature 1 is distributed as the
 * target's: the class triple (argmax / runner-up / other, per position) of
 * the first 3 tokens over 12000 seeded requests against its exact
 * probability, which the test computes itself by enumerating every token
 * of positions 1 and 2 with the target's softmax at temperature 1 (the
 * target's own distribution, no sampler or engine involved). 26 degrees of
 * freedom: chi2 < 54.05 at p-value 0.001 (EOS is biased off, in the
 * requests and in the exact computation alike); the smallest expected count is
 * about 12. The same for plain decoding (the reference run). An acceptance
 * rule that keeps drafts the target did not sample (e.g. always accepting)
 * gives chi2 in the thousands. */
static void test_engine_sampled_distribution(void **state)
{
    (void)state;
    const ember_token prompt[] = {FAKE_BOS, 'a', 'l', 'p', 'h', 'a'};
    const int32_t np = 6;
    /* exact P(class triple) */
    float pexp[SD_NCELL] = {0};
    {
        ember_token h[16];
        memcpy(h, prompt, sizeof prompt);
        float l0[FAKE_N_VOCAB], p0[FAKE_N_VOCAB], l1[FAKE_N_VOCAB], p1[FAKE_N_VOCAB], l2[FAKE_N_VOCAB],
            p2[FAKE_N_VOCAB];
        double acc[SD_NCELL] = {0};
        sd_logits(h, np, l0);
        softmax_t(l0, FAKE_N_VOCAB, 1.0f, p0);
        for (int32_t t1 = 0; t1 < FAKE_N_VOCAB; t1++) {
            h[np] = t1;
            sd_logits(h, np + 1, l1);
            softmax_t(l1, FAKE_N_VOCAB, 1.0f, p1);
            for (int32_t t2 = 0; t2 < FAKE_N_VOCAB; t2++) {
                h[np + 1] = t2;
                sd_logits(h, np + 2, l2);
                softmax_t(l2, FAKE_N_VOCAB, 1.0f, p2);
                const int32_t a2 = fake_argmax(l2);
                double pc[3] = {p2[a2], p2[(a2 + 1) % 256], 0};
                pc[2] = 1.0 - pc[0] - pc[1];
                const int c12 = (tok_class(l0, t1) * 3 + tok_class(l1, t2)) * 3;
                for (int c = 0; c < 3; c++) acc[c12 + c] += (double)p0[t1] * p1[t2] * pc[c];
            }
        }
        double tot = 0;
        for (int c = 0; c < SD_NCELL; c++) tot += acc[c];
        for (int c = 0; c < SD_NCELL; c++) pexp[c] = (float)(acc[c] / tot);
    }
    for (int spec = 0; spec < 2; spec++) {
        long counts[SD_NCELL];
        uint64_t nd, na;
        sample_classes(spec, prompt, np, counts, &nd, &na);
        const double c = chi2(counts, pexp, SD_NCELL, SD_NREQ);
        print_message("%s: chi2 %.1f over %d class triples (P(argmax x3) %.3f, observed %.3f); %llu of %llu "
                      "drafted accepted\n",
                      spec ? "speculative" : "plain", c, SD_NCELL, pexp[0], (double)counts[0] / SD_NREQ,
                      (unsigned long long)na, (unsigned long long)nd);
        assert_true(c < 54.05);
        if (spec) assert_true(na > 0 && na < nd);   /* both outcomes of the rule were exercised */
    }
}

/* Expected lengths computed outside ember (python3: argmax over k of
 * (1 - a**(k+1)) / (1 - a) / (1 + c*k), k in 0..16). */
/* A proposer that always drafts n_max tokens behind a context match of
 * `match` tokens (set by the test). */
typedef struct fixed_prop { int32_t match; } fixed_prop;
static int32_t fixed_propose(void *self, const spec_input *in, int32_t n_max, float p_min, ember_token *d, float *q)
{
    (void)self; (void)in; (void)p_min; (void)q;
    for (int32_t k = 0; k < n_max; k++) d[k] = 7;
    return n_max;
}
static int32_t fixed_match(void *self) { return ((fixed_prop *)self)->match; }

/* Match-aware length: drafts behind long matches and short ones keep apart
 * acceptance; a slot whose short-match drafts fail stops drafting them (but
 * probes), while its long-match drafts keep the full length. */
static void test_match_length_classes(void **state)
{
    (void)state;
    fixed_prop f = {.match = 3};
    spec_params sp = spec_default_params();
    sp.n_max = 12;
    sp.row_cost = 0.1f;
    spec_engine *se;
    assert_int_equal(spec_engine_new(&sp, (spec_proposer){.self = &f, .propose = fixed_propose, .match_len = fixed_match},
                                     1, &se), EMBER_OK);
    ember_token h[4] = {1, 2, 3, 4}, d[SPEC_MAX_DRAFT];
    spec_input in = {.slot = 0, .tokens = h, .n_tokens = 4};
    /* priors: short 0.75 -> 5 at row cost 0.1; long 0.9 -> 10 */
    assert_int_equal(spec_engine_propose(se, &in, 12, d), 5);
    f.match = 20;
    assert_int_equal(spec_engine_propose(se, &in, 12, d), 10);
    assert_int_equal(spec_engine_propose(se, &in, 6, d), 6);   /* the engine's limit */
    for (int i = 0; i < 10; i++) {   /* long-match drafts always accepted */
        int32_t k = spec_engine_propose(se, &in, 12, d);
        spec_engine_result(se, 0, k, k);
    }
    f.match = 3;
    for (int i = 0; i < 8; i++) {    /* short-match drafts rejected at once */
        int32_t k = spec_engine_propose(se, &in, 12, d);
        if (k > 0) spec_engine_result(se, 0, k, 0);
    }
    int32_t n_drafts = 0;
    for (int i = 0; i < 16; i++) {
        int32_t k = spec_engine_propose(se, &in, 12, d);
        if (k > 0) { n_drafts++; assert_int_equal(k, 1); spec_engine_result(se, 0, k, 0); }
    }
    assert_int_equal(n_drafts, 2);   /* probes only */
    f.match = 8;                     /* SPEC_LONG_MATCH: long again */
    assert_int_equal(spec_engine_propose(se, &in, 12, d), 12);
    spec_engine_free(se);
}

static void test_adaptive_length(void **state)
{
    (void)state;
    const double alpha[] = {0.0, 0.3, 0.3, 0.5, 0.5, 0.75, 0.75, 0.9, 0.9, 0.99};
    const float cost[] = {0.35f, 0.35f, 0.1f, 0.35f, 0.1f, 0.35f, 0.1f, 0.35f, 0.1f, 0.35f};
    const int32_t want[] = {0, 0, 1, 1, 2, 2, 5, 4, 10, 16};
    for (int i = 0; i < 10; i++) assert_int_equal(spec_best_length(alpha[i], cost[i], 16), want[i]);
    assert_int_equal(spec_best_length(0.99, 0.35f, 4), 4);

    oracle o = {0};
    spec_params sp = spec_default_params();
    sp.n_max = 8;
    spec_engine *se;
    assert_int_equal(spec_engine_new(&sp, (spec_proposer){.self = &o, .propose = oracle_propose}, 2, &se), EMBER_OK);
    ember_token h[4] = {1, 2, 3, 4}, d[SPEC_MAX_DRAFT];
    spec_input in = {.slot = 0, .tokens = h, .n_tokens = 4};
    assert_int_equal(spec_engine_propose(se, &in, 8, d), 2);   /* prior alpha 0.75 */
    for (int i = 0; i < 6; i++) spec_engine_result(se, 0, 2, 0);  /* every draft rejected at once */
    int32_t n_drafts = 0;
    for (int i = 0; i < 16; i++) {
        int32_t k = spec_engine_propose(se, &in, 8, d);
        if (k > 0) { n_drafts++; assert_int_equal(k, 1); spec_engine_result(se, 0, k, 0); }
    }
    assert_int_equal(n_drafts, 2);     /* only the probes every 8th step */
    for (int i = 0; i < 20; i++) spec_engine_result(se, 1, 8, 8);  /* slot 1: always accepted */
    in.slot = 1;
    assert_int_equal(spec_engine_propose(se, &in, 8, d), 8);
    assert_int_equal(spec_engine_propose(se, &in, 3, d), 3);   /* the engine's limit */
    assert_int_equal(se->st.n_drafts, 28);
    assert_int_equal(se->st.n_drafted, 174);
    assert_int_equal(se->st.n_accepted, 160);
    assert_int_equal(se->st.drafted_at[1], 26);
    assert_int_equal(se->st.accepted_at[1], 20);
    assert_int_equal(se->st.drafted_at[7], 20);
    spec_engine_free(se);
    sp.n_max = 0;
    assert_int_equal(spec_engine_new(&sp, (spec_proposer){.self = &o, .propose = oracle_propose}, 2, &se),
                     EMBER_ERR_INVALID_ARG);
    spec_type ty;
    assert_true(spec_parse_type("ngram", &ty) && ty == SPEC_NGRAM);
    assert_false(spec_parse_type("medusa", &ty));
}

/* Step costs on a device clock: the runtime's decode_device_seconds and a
 * costly proposer's device_seconds replace the host's CPU time (which on a
 * GPU counts launches and waits, not the work). Each reports a fixed
 * device time here; the engine's measured costs must be those, whatever
 * the CPU spent. Without a device time (< 0) the CPU time stays. */
typedef struct dev_clock { int calls; double s; int32_t draft; } dev_clock;
static double dev_decode_seconds(void *ctx)
{
    (void)ctx;
    return 0.25;
}
static double dev_draft_seconds(void *self)
{
    dev_clock *c = self;
    c->calls++;
    return c->s;
}
static int32_t dev_propose(void *self, const spec_input *in, int32_t n_max, float p_min, ember_token *d, float *q)
{
    (void)in; (void)p_min; (void)q;
    const dev_clock *c = self;
    const int32_t k = c->draft < n_max ? c->draft : n_max;
    for (int32_t i = 0; i < k; i++) d[i] = 'q';
    return k;
}

static void test_device_step_costs(void **state)
{
    (void)state;
    /* the spec engine alone: 0.06 device seconds for a 3-token draft = 0.02 a token */
    dev_clock dc = {.s = 0.06, .draft = 3};
    spec_params sp = spec_default_params();
    sp.n_max = 4;
    sp.adaptive = false;   /* the whole draft every call */
    spec_engine *se;
    assert_int_equal(spec_engine_new(&sp, (spec_proposer){.self = &dc, .costly = true, .propose = dev_propose,
                                                          .device_seconds = dev_draft_seconds}, 1, &se),
                     EMBER_OK);
    ember_token h[4] = {1, 2, 3, 4}, d[SPEC_MAX_DRAFT];
    spec_input in = {.slot = 0, .tokens = h, .n_tokens = 4};
    assert_int_equal(spec_engine_propose(se, &in, 4, d), 3);
    assert_int_equal(dc.calls, 1);
    assert_true(fabs(se->t_draft - 0.02) < 1e-12);
    /* no device time (a CPU draft): the call's CPU time, far below 0.02 a token for this proposer */
    dc.s = -1.0;
    for (int i = 0; i < 40; i++) assert_int_equal(spec_engine_propose(se, &in, 4, d), 3);
    assert_true(se->t_draft < 0.001);
    spec_engine_free(se);

    /* through the engine: every decode step's cost is the runtime's device time (0.25 s) */
    fake_model *m = fake_model_new(1, 256, 256, 64);
    engine_runtime rt = fake_runtime(m);
    rt.decode_device_seconds = dev_decode_seconds;
    engine_vocab vocab = fake_vocab();
    dev_clock none = {.s = -1.0, .draft = 0};   /* drafts nothing: every step is a 1-row step */
    sp = spec_default_params();
    sp.type = SPEC_NGRAM;
    sp.n_max = 4;
    assert_int_equal(spec_engine_new(&sp, (spec_proposer){.name = "none", .self = &none, .propose = dev_propose}, 1, &se),
                     EMBER_OK);
    engine_config cfg = {.n_slots = 1, .n_ctx = 256, .n_batch = 64, .n_queue_max = 4, .spec = se};
    engine *e;
    assert_int_equal(engine_new(&cfg, &rt, &vocab, &e), EMBER_OK);
    ember_token t[8] = {FAKE_BOS, 'a', 'b'};
    engine_req_params p = {0};
    p.prompt = t;
    p.n_prompt = 3;
    p.n_predict = 12;
    engine_req *r;
    assert_int_equal(engine_submit(e, &p, &r), EMBER_OK);
    for (int guard = 0; guard < 1000 && r->finish == ENGINE_RUNNING; guard++) engine_step(e);
    assert_true(r->finish != ENGINE_RUNNING);
    assert_true(fabs(se->t_base[1] - 0.25) < 1e-12);   /* the CPU time of a toy step is microseconds */
    assert_true(fabs(se->t_step - 0.25) < 1e-12);
    engine_req_release(r);
    engine_free(e);
    fake_model_free(m);
    spec_engine_free(se);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_verifier_keeps_target_distribution),
        cmocka_unit_test(test_ngram_lookup),
        cmocka_unit_test(test_engine_verify_rollback),
        cmocka_unit_test(test_engine_sampled_distribution),
        cmocka_unit_test(test_adaptive_length),
        cmocka_unit_test(test_match_length_classes),
        cmocka_unit_test(test_measured_row_cost),
        cmocka_unit_test(test_device_step_costs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
