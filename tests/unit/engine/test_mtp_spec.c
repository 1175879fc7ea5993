/* The MTP proposer (src/engine/spec/mtp.c) driven as the engine drives a
 * proposer that absorbs hidden states, on the tiny golden files
 * (tests/golden/make_mtp.py): the Gemma 4 target of tests/golden/dflash/ in
 * an ember context, the random gemma4-assistant draft of tests/golden/mtp/.
 * - after a prefill and after every verification batch (its accepted rows
 *   and rejected ones, absorbed alike, then the target's sequence cut back
 *   to the committed tokens), the proposer's draft for the next step equals
 *   transformers' chained drafting for the same committed tokens
 *   (tiny-mtp.json steps: Gemma4AssistantForCausalLM over the target's
 *   shared K/V and post-norm state), whichever row of the batch holds the
 *   state it must continue from (0, 1 or 2 tokens accepted);
 * - a slot whose held tokens differ from its committed ones (a new request
 *   the proposer never saw) drafts nothing; a forked prefix drafts;
 * - spec_parse_type knows "draft-mtp"; a draft that is not gemma4-assistant
 *   and a non-gemma4 target are refused. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <jansson.h>

#include "ember.h"
#include "engine/engine.h"
#include "engine/runtime_ember.h"
#include "engine/spec/spec.h"

#define TARGET "tests/golden/dflash/tiny-dflash-target.gguf"
#define DRAFT "tests/golden/mtp/tiny-mtp-draft.gguf"
#define REC "tests/golden/mtp/tiny-mtp.json"
#define MAX_POS 64

static const float *get_hidden(void *ctx, int32_t i, int32_t j) { return ember_get_hidden(ctx, i, j); }

/* the *_gpu tests: the target (F16 K/V, hidden states captured on the
 * device) and the draft on the GPU; skipped without one */
static bool use_gpu;
/* a second proposer fed the same decodes (the CPU draft beside the GPU one) */
static const spec_proposer *also;

static ember_model_params placed(bool gpu)
{
    ember_model_params mp = ember_model_default_params();
    mp.n_gpu_layers = gpu ? -1 : 0;
    return mp;
}

static ember_context *new_ctx(ember_model *t, const spec_proposer *prop)
{
    ember_context_params cp = ember_context_default_params();
    cp.n_ctx = 4 * MAX_POS;
    cp.n_batch = cp.n_ubatch = MAX_POS;
    cp.n_seq_max = 2;
    cp.n_threads = 1;
    cp.type_k = cp.type_v = use_gpu ? EMBER_KV_F16 : EMBER_KV_F32;
    ember_context *c = NULL;
    assert_int_equal(ember_context_new(t, &cp, &c), EMBER_OK);
    assert_int_equal(ember_set_hidden_layers(c, prop->n_hidden_layers, prop->hidden_layers), EMBER_OK);
    return c;
}

/* Decode toks[n] at positions pos0.. of seq and hand the entries to the proposer. */
static void decode_absorb(ember_context *c, const spec_proposer *prop, int32_t slot, int32_t pos0, const ember_token *toks,
                          int32_t n)
{
    ember_batch b;
    assert_int_equal(ember_batch_init(n, &b), EMBER_OK);
    b.n_tokens = n;
    for (int i = 0; i < n; i++) {
        b.token[i] = toks[i];
        b.pos[i] = pos0 + i;
        b.seq_id[i] = slot;
        b.logits[i] = 1;
    }
    if (ember_decode(c, &b) != EMBER_OK) fail_msg("decode: %s", ember_last_error());
    prop->absorb(prop->self, slot, pos0, toks, n, get_hidden, c, 0);
    if (also) also->absorb(also->self, slot, pos0, toks, n, get_hidden, c, 0);
    ember_batch_free(&b);
}

static int32_t propose(const spec_proposer *prop, int32_t slot, const ember_token *toks, int32_t n, ember_token *d)
{
    spec_input in = {.slot = slot, .tokens = toks, .n_tokens = n, .n_prompt = n};
    return prop->propose(prop->self, &in, 4, 0.0f, d, NULL);
}

/* A verification batch after step *s at position *n: [the last token, m
 * correct tokens of cont, 2 wrong ones], decoded with the proposer (and
 * `also`) seeing every row; the target accepts m: seq gets the m + 1 kept
 * tokens, the cache is cut back to them, *n and *s move on. False (nothing
 * done) when cont is too short for it. */
static bool verify_batch(ember_context *c, const spec_proposer *prop, const ember_token *cont, int32_t n_cont, int32_t m,
                         ember_token *seq, int32_t *n, int32_t *s)
{
    if (*s + 1 + m + 1 > n_cont) return false;
    ember_token vb[8];
    vb[0] = cont[*s];
    for (int i = 0; i < m; i++) vb[1 + i] = cont[*s + 1 + i];
    vb[1 + m] = 5;
    vb[2 + m] = 6;
    decode_absorb(c, prop, 0, *n, vb, m + 3);
    for (int i = 0; i <= m; i++) seq[*n + i] = vb[i];
    *n += m + 1;
    *s += m + 1;
    assert_int_equal(ember_seq_truncate(c, 0, *n), EMBER_OK);
    return true;
}


static void test_mtp_proposer_follows_transformers(void **st)
{
    (void)st;
    json_error_t jerr;
    json_t *rec = json_load_file(REC, 0, &jerr);
    assert_non_null(rec);
    json_t *steps = json_object_get(json_object_get(json_object_get(rec, "drafts"), "tiny-mtp-draft"), "steps");
    json_t *jp = json_object_get(rec, "prompt"), *jc = json_object_get(rec, "greedy_continuation");
    const int32_t n_draft = (int32_t)json_integer_value(json_object_get(rec, "n_draft"));
    assert_int_equal(n_draft, 4);
    ember_model *t = NULL;
    assert_int_equal(ember_model_load(TARGET, NULL, &t), EMBER_OK);
    spec_proposer prop;
    assert_int_equal(spec_mtp_new(DRAFT, t, 2, MAX_POS, 1, NULL, &prop), EMBER_OK);
    assert_string_equal(prop.name, "draft-mtp");
    assert_true(prop.costly && prop.absorb && prop.fork);
    ember_context *c = new_ctx(t, &prop);

    ember_token seq[MAX_POS], cont[64];
    int32_t n = (int32_t)json_array_size(jp);
    const int32_t n_cont = (int32_t)json_array_size(jc);
    for (int i = 0; i < n; i++) seq[i] = (ember_token)json_integer_value(json_array_get(jp, (size_t)i));
    for (int i = 0; i < n_cont; i++) cont[i] = (ember_token)json_integer_value(json_array_get(jc, (size_t)i));
    decode_absorb(c, &prop, 0, 0, seq, n);
    int32_t s = 0, n_checked = 0, accepted_seen[3] = {0, 0, 0};
    for (int round = 0; s < (int32_t)json_array_size(steps); round++) {
        /* the target sampled cont[s] after the committed seq[0, n) = prompt + cont[:s] */
        seq[n] = cont[s];
        ember_token d[SPEC_MAX_DRAFT];
        const int32_t k = propose(&prop, 0, seq, n + 1, d);
        json_t *want = json_object_get(json_array_get(steps, (size_t)s), "drafts");
        assert_int_equal(json_integer_value(json_object_get(json_array_get(steps, (size_t)s), "pos")), n);
        assert_int_equal(k, n_draft);
        for (int i = 0; i < k; i++)
            if (d[i] != (ember_token)json_integer_value(json_array_get(want, (size_t)i)))
                fail_msg("step %d (round %d): draft %d is %d, transformers %d", s, round, i, d[i],
                         (int)json_integer_value(json_array_get(want, (size_t)i)));
        n_checked++;
        /* the target accepts m = 0, 1, 2 in turn */
        const int32_t m = round % 3;
        if (!verify_batch(c, &prop, cont, n_cont, m, seq, &n, &s)) break;
        accepted_seen[m]++;
    }
    print_message("%d drafts equal transformers' (accepted 0/1/2: %d/%d/%d rounds)\n", n_checked, accepted_seen[0],
                  accepted_seen[1], accepted_seen[2]);
    assert_true(n_checked >= 10 && accepted_seen[1] > 0 && accepted_seen[2] > 0);

    /* slot 1 never saw these tokens: no draft; after a fork of slot 0's
     * committed prefix (and its last decode) it drafts */
    ember_token d[SPEC_MAX_DRAFT];
    seq[n] = cont[s < n_cont ? s : n_cont - 1];
    assert_int_equal(propose(&prop, 1, seq, n + 1, d), 0);
    prop.fork(prop.self, 0, 1, n - 1);
    assert_int_equal(ember_seq_fork(c, 0, 1, n - 1), EMBER_OK);
    decode_absorb(c, &prop, 1, n - 1, seq + n - 1, 1);
    assert_int_equal(propose(&prop, 1, seq, n + 1, d), 4);
    /* a different history in slot 0: no draft */
    seq[3] ^= 1;
    assert_int_equal(propose(&prop, 0, seq, n + 1, d), 0);

    ember_context_free(c);
    prop.free(prop.self);
    ember_model_free(t);
    json_decref(rec);
}

static void test_mtp_proposer_refusals(void **st)
{
    (void)st;
    spec_type ty;
    assert_true(spec_parse_type("draft-mtp", &ty));
    assert_int_equal(ty, SPEC_MTP);
    assert_string_equal(spec_type_name(SPEC_MTP), "draft-mtp");
    ember_model *t = NULL;
    assert_int_equal(ember_model_load(TARGET, NULL, &t), EMBER_OK);
    spec_proposer prop;
    assert_int_equal(spec_mtp_new(TARGET, t, 1, 32, 1, NULL, &prop), EMBER_ERR_INVALID_ARG);
    assert_non_null(strstr(ember_last_error(), "not gemma4-assistant"));
    assert_int_equal(spec_mtp_new("tests/golden/mtp/missing.gguf", t, 1, 32, 1, NULL, &prop), EMBER_ERR_IO);
    ember_model_free(t);
    /* a target that is not gemma4 */
    assert_int_equal(ember_model_load("tests/golden/dflash/tiny-dflash-draft.gguf", NULL, &t), EMBER_OK);
    assert_int_equal(spec_mtp_new(DRAFT, t, 1, 32, 1, NULL, &prop), EMBER_ERR_INVALID_ARG);
    ember_model_free(t);
}

/* ---- the draft on the GPU (skipped without one) ---- */

static int gpu_on(void **st)
{
    (void)st;
    use_gpu = true;
    return 0;
}

static int gpu_off(void **st)
{
    (void)st;
    use_gpu = false;
    also = NULL;
    return 0;
}

static void need_gpu(void)
{
    if (ember_gpu_count() < 1) {
        print_message("no GPU (or no CUDA build): skipped\n");
        skip();
    }
}

/* The GPU target's hidden states feed a GPU draft and a CPU draft alike,
 * through transformers' recorded steps and verification batches (0, 1, 2
 * accepted): the GPU draft's chains equal the CPU draft's in >= 95% of the
 * steps (f16 K/V copies and the GPU's float order: a near-tie may flip). */
static void test_mtp_gpu_draft_matches_cpu(void **st)
{
    (void)st;
    need_gpu();
    json_error_t jerr;
    json_t *rec = json_load_file(REC, 0, &jerr);
    assert_non_null(rec);
    json_t *steps = json_object_get(json_object_get(json_object_get(rec, "drafts"), "tiny-mtp-draft"), "steps");
    json_t *jp = json_object_get(rec, "prompt"), *jc = json_object_get(rec, "greedy_continuation");
    ember_model *t = NULL;
    const ember_model_params mg = placed(true);
    assert_int_equal(ember_model_load(TARGET, &mg, &t), EMBER_OK);
    spec_proposer pg, pc;
    assert_int_equal(spec_mtp_new(DRAFT, t, 2, MAX_POS, 1, &mg, &pg), EMBER_OK);
    assert_int_equal(spec_mtp_new(DRAFT, t, 2, MAX_POS, 1, NULL, &pc), EMBER_OK);
    char line[512];
    pg.describe(pg.self, line, sizeof line);
    print_message("%s\n", line);
    assert_non_null(strstr(line, "on the cuda backend"));
    also = &pc;
    ember_context *c = new_ctx(t, &pg);
    ember_token seq[MAX_POS], cont[64];
    int32_t n = (int32_t)json_array_size(jp);
    const int32_t n_cont = (int32_t)json_array_size(jc);
    for (int i = 0; i < n; i++) seq[i] = (ember_token)json_integer_value(json_array_get(jp, (size_t)i));
    for (int i = 0; i < n_cont && i < 64; i++) cont[i] = (ember_token)json_integer_value(json_array_get(jc, (size_t)i));
    decode_absorb(c, &pg, 0, 0, seq, n);
    int32_t s = 0, n_steps = 0, n_same = 0, n_hf = 0;
    for (int round = 0; s < (int32_t)json_array_size(steps); round++) {
        seq[n] = cont[s];
        ember_token dg[SPEC_MAX_DRAFT], dc[SPEC_MAX_DRAFT];
        const int32_t kg = propose(&pg, 0, seq, n + 1, dg), kc = propose(&pc, 0, seq, n + 1, dc);
        assert_int_equal(kc, 4);
        n_steps++;
        n_same += kg == kc && !memcmp(dg, dc, sizeof(ember_token) * (size_t)kc);
        json_t *want = json_object_get(json_array_get(steps, (size_t)s), "drafts");
        bool hf = kg == 4;
        for (int i = 0; hf && i < kg; i++) hf = dg[i] == (ember_token)json_integer_value(json_array_get(want, (size_t)i));
        n_hf += hf;
        if (!verify_batch(c, &pg, cont, n_cont, round % 3, seq, &n, &s)) break;
    }
    print_message("GPU MTP draft: %d of %d steps draft what the CPU draft drafts, %d what transformers drafts\n", n_same,
                  n_steps, n_hf);
    assert_true(n_steps >= 10);
    assert_true(n_same * 100 >= n_steps * 95);
    /* a fork comes with the K/V copies on the device too */
    ember_token d[SPEC_MAX_DRAFT];
    seq[n] = cont[s < n_cont ? s : n_cont - 1];
    assert_int_equal(propose(&pg, 1, seq, n + 1, d), 0);
    pg.fork(pg.self, 0, 1, n - 1);
    pc.fork(pc.self, 0, 1, n - 1);
    assert_int_equal(ember_seq_fork(c, 0, 1, n - 1), EMBER_OK);
    decode_absorb(c, &pg, 1, n - 1, seq + n - 1, 1);
    ember_token d0[SPEC_MAX_DRAFT];
    assert_int_equal(propose(&pg, 1, seq, n + 1, d), 4);
    assert_int_equal(propose(&pg, 0, seq, n + 1, d0), 4);
    assert_memory_equal(d, d0, sizeof(ember_token) * 4);   /* slot 1's forked copy drafts as slot 0's own */
    also = NULL;
    ember_context_free(c);
    pg.free(pg.self);
    pc.free(pc.self);
    ember_model_free(t);
    json_decref(rec);
}

static int32_t piece(void *ud, ember_token t, char *buf, int32_t cap)
{
    (void)ud;
    return snprintf(buf, (size_t)cap, "<%d>", t);
}
static bool never_eog(void *ud, ember_token t) { (void)ud; (void)t; return false; }

/* Lossless through the engine with target and draft on the GPU: at
 * temperature 0 the text with draft-mtp (the accepting draft) is the GPU
 * target's own greedy text token for token, and drafts were accepted. */
static void test_mtp_lossless_gpu(void **st)
{
    (void)st;
    need_gpu();
    enum { N_PRED = 24 };
    static const ember_token prompt[] = {2, 50, 38, 41, 234, 551, 346, 226, 113, 122, 512, 292};
    const int32_t np = (int32_t)(sizeof prompt / sizeof *prompt);
    ember_model *t = NULL;
    const ember_model_params mg = placed(true);
    assert_int_equal(ember_model_load(TARGET, &mg, &t), EMBER_OK);
    const int32_t V = ember_model_n_vocab(t), E = ember_model_n_embd(t);
    spec_proposer prop;
    assert_int_equal(spec_mtp_new("tests/golden/mtp/tiny-mtp-draft-const.gguf", t, 1, MAX_POS, 1, &mg, &prop), EMBER_OK);
    ember_context *c = new_ctx(t, &prop);
    /* the reference: plain greedy decoding on the same GPU context */
    ember_token want[N_PRED];
    {
        ember_batch b;
        assert_int_equal(ember_batch_init(MAX_POS, &b), EMBER_OK);
        b.n_tokens = np;
        for (int i = 0; i < np; i++) { b.token[i] = prompt[i]; b.pos[i] = i; b.seq_id[i] = 0; b.logits[i] = i == np - 1; }
        assert_int_equal(ember_decode(c, &b), EMBER_OK);
        for (int g = 0; g < N_PRED; g++) {
            const float *l = ember_get_logits(c, -1);
            int best = 0;
            for (int j = 1; j < V; j++) if (l[j] > l[best]) best = j;
            want[g] = best;
            b.n_tokens = 1;
            b.token[0] = best; b.pos[0] = np + g; b.seq_id[0] = 0; b.logits[0] = 1;
            assert_int_equal(ember_decode(c, &b), EMBER_OK);
        }
        ember_batch_free(&b);
        assert_int_equal(ember_seq_remove(c, 0), EMBER_OK);
    }
    spec_params sp = spec_default_params();
    sp.type = SPEC_MTP;
    sp.n_max = 4;
    sp.p_min = 0;
    sp.adaptive = false;
    spec_engine *se;
    assert_int_equal(spec_engine_new(&sp, prop, 1, &se), EMBER_OK);
    engine_runtime rt = engine_runtime_ember(c, V, E);
    engine_vocab vocab = {.token_piece = piece, .is_eog = never_eog};
    engine_config cfg = {.n_slots = 1, .n_ctx = MAX_POS, .n_batch = MAX_POS, .n_queue_max = 4, .spec = se};
    engine *e;
    assert_int_equal(engine_new(&cfg, &rt, &vocab, &e), EMBER_OK);
    engine_req_params p = {0};
    p.prompt = prompt;
    p.n_prompt = np;
    p.n_predict = N_PRED;
    p.sampling = ember_sampler_default_params();
    p.sampling.temp = 0;
    p.ignore_eos = true;
    engine_req *r;
    assert_int_equal(engine_submit(e, &p, &r), EMBER_OK);
    for (int guard = 0; guard < 1000 && r->finish == ENGINE_RUNNING; guard++) engine_step(e);
    if (r->finish == ENGINE_FINISH_ERROR) fail_msg("request: %s", r->err);
    char w[1024] = "";
    for (int g = 0; g < N_PRED; g++) {
        char tk[16];
        snprintf(tk, sizeof tk, "<%d>", want[g]);
        strcat(w, tk);
    }
    assert_non_null(r->text);
    assert_string_equal(r->text, w);
    print_message("GPU MTP lossless: %d drafted, %d accepted\n", (int)r->n_draft, (int)r->n_draft_accepted);
    assert_true(r->n_draft > 0);
    assert_true(r->n_draft_accepted > 0);
    engine_req_release(r);
    engine_free(e);
    spec_engine_free(se);
    ember_context_free(c);
    ember_model_free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mtp_proposer_follows_transformers),
        cmocka_unit_test(test_mtp_proposer_refusals),
        cmocka_unit_test_setup_teardown(test_mtp_gpu_draft_matches_cpu, gpu_on, gpu_off),
        cmocka_unit_test_setup_teardown(test_mtp_lossless_gpu, gpu_on, gpu_off),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
