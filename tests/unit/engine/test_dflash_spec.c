/* DFlash speculation (src/engine/spec/dflash.c) end to end on the tiny golden
 * files of tests/golden/dflash/ (tests/golden/make_dflash.py): the engine
 * over the real runtime, the Gemma 4 target with its DFlash draft, two slots
 * decoding in the same batches at temperature 0.
 * - the target alone: its greedy continuation of the recorded prompt is
 *   transformers' (tiny-dflash.json greedy_continuation), so the files and
 *   the target forward are right;
 * - lossless: with --spec-type draft-dflash, for the random draft and for
 *   the constant one (tiny-dflash-draft-const, whose blocks are accepted
 *   once the target repeats its token) (n_max 7, p_min 0, adaptive
 *   off) every request's text is the plain greedy continuation token for
 *   token, drafts were made and verified (for the 70-token prompt too,
 *   whose features came in three prefill chunks: a missing position would
 *   stop its drafts), the block drafts stay within
 *   block_size - 1, and each draft the engine got equals the block computed
 *   directly from one forward pass over the final sequence (>= 95%);
 * - a prompt forked from another slot's cache drafts at once (its
 *   features are forked too) and stays lossless;
 * - a draft file that is not `dflash`, or one that does not fit the target,
 *   is refused with an error;
 * - against llama.cpp: for both drafts, llama.cpp's committed sequence is
 *   ember's greedy one, and the drafted block at each step of llama.cpp's
 *   own run (tiny-dflash.llama-drafts.json, recorded by
 *   tests/golden/record_dflash_llama.sh with llama-speculative-simple
 *   --spec-type draft-dflash on the same files) equals the block ember's
 *   draft forward gives for the same committed tokens in >= 95% of steps. */
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <jansson.h>

#include "ember.h"
#include "model/dflash.h"
#include "engine/engine.h"
#include "engine/runtime_ember.h"
#include "engine/spec/spec.h"

#define TARGET "tests/golden/dflash/tiny-dflash-target.gguf"
#define DRAFT "tests/golden/dflash/tiny-dflash-draft.gguf"
#define N_PRED 24
#define MAX_POS 96
#define N_REQ 2

/* tiny-dflash.json: "prompt" and transformers' "greedy_continuation" */
static const ember_token prompt0[] = {2, 50, 38, 41, 234, 551, 346, 226, 113, 122, 512, 292};
static const ember_token hf_greedy0[N_PRED] = {113, 43, 417, 417, 417, 417, 417, 417, 417, 417, 417, 417,
                                               417, 417, 417, 417, 417, 417, 417, 417, 417, 417, 417, 417};
/* 70 tokens: a prefill of three chunks (n_batch 32), absorbed chunk by chunk */
static const ember_token prompt1[] = {2,   17,  301, 88,  45,  9,   560, 120, 77,  5,   33,  410, 251, 90,
                                      66,  480, 12,  199, 305, 71,  8,   444, 23,  150, 99,  380, 41,  222,
                                      17,  515, 60,  333, 7,   88,  290, 145, 501, 36,  11,  470, 260, 19,
                                      95,  350, 48,  180, 572, 27,  130, 402, 64,  310, 85,  590, 6,   240,
                                      115, 460, 52,  205, 377, 13,  161, 533, 74,  289, 39,  421, 102, 58};

static ember_context *new_ctx(ember_model *m, uint32_t n_seq);

/* the *_gpu tests: the target and the draft on the GPU (F16 K/V, the
 * hidden states captured on the device); without a GPU (or a CUDA build)
 * they skip */
static bool use_gpu;

static ember_model_params placed(void)
{
    ember_model_params mp = ember_model_default_params();
    mp.n_gpu_layers = use_gpu ? -1 : 0;
    return mp;
}

/* A proposer around the DFlash one that records every draft it makes. */
typedef struct drec {
    int32_t q, anchor, n;
    ember_token draft[8];
} drec;
typedef struct wrap {
    spec_proposer inner;
    const ember_token *prompts[2];
    int32_t n_prompts[2];
    drec rec[512];
    int32_t n_rec;
    int32_t n_prefetch;   /* prefetch calls (both requests generating: their blocks in one pass) */
} wrap;

static int32_t wrap_propose(void *self, const spec_input *in, int32_t n_max, float p_min, ember_token *draft, float *q)
{
    wrap *w = self;
    int32_t k = w->inner.propose(w->inner.self, in, n_max, p_min, draft, q);
    if (k > 0 && w->n_rec < 512) {
        drec *r = &w->rec[w->n_rec++];
        r->q = in->n_prompt == w->n_prompts[0] && !memcmp(in->tokens, w->prompts[0], sizeof(ember_token) * (size_t)in->n_prompt) ? 0 : 1;
        r->anchor = in->n_tokens - 1;
        r->n = k < 8 ? k : 8;
        memcpy(r->draft, draft, sizeof(ember_token) * (size_t)r->n);
    }
    return k;
}
static void wrap_absorb(void *self, int32_t slot, ember_pos pos0, const ember_token *tok, int32_t n,
                        const float *(*get)(void *ctx, int32_t i, int32_t j), void *ctx, int32_t i0)
{
    wrap *w = self;
    w->inner.absorb(w->inner.self, slot, pos0, tok, n, get, ctx, i0);
}
static void wrap_fork(void *self, int32_t src, int32_t dst, int32_t n)
{
    wrap *w = self;
    w->inner.fork(w->inner.self, src, dst, n);
}
static void wrap_free(void *self)
{
    wrap *w = self;
    w->inner.free(w->inner.self);
}
static double wrap_device_seconds(void *self)
{
    wrap *w = self;
    return w->inner.device_seconds ? w->inner.device_seconds(w->inner.self) : -1.0;
}
static void wrap_prefetch(void *self, const spec_input *in, int32_t n)
{
    wrap *w = self;
    w->n_prefetch++;
    w->inner.prefetch(w->inner.self, in, n);
}

/* The drafts the engine got (features absorbed step by step, prompt chunk
 * by chunk, rejected positions cut) against blocks computed directly from
 * one forward pass over each final sequence: >= 95% equal (a near-tie may
 * flip between batch shapes). */
static void check_drafts(ember_model *m, const char *draft, const wrap *w, const ember_token want[][N_PRED])
{
    ember_model *dm = NULL;
    assert_int_equal(ember_model_load(draft, NULL, &dm), EMBER_OK);
    const ember_dflash *d = ember_model_dflash(dm);
    const int32_t V = ember_model_n_vocab(m), E = ember_model_n_embd(m), nl = d->n_target_layers;
    ember_context *c = new_ctx(m, 1);
    int32_t layers[EMBER_DFLASH_MAX_TARGET_LAYERS];
    for (int k = 0; k < nl; k++) layers[k] = d->target_layers[k] - 1;
    assert_int_equal(ember_set_hidden_layers(c, nl, layers), EMBER_OK);
    ember_dflash_ctx *dc = NULL;
    assert_int_equal(ember_dflash_ctx_new(dm, m, 1, MAX_POS, 1, &dc), EMBER_OK);   /* the CPU draft (dm: CPU placement) */
    assert_string_equal(ember_dflash_ctx_backend(dc), "cpu");
    /* GPU: the same blocks from a draft on the GPU, row by row against the CPU's */
    ember_model *dg_m = NULL;
    ember_dflash_ctx *dg = NULL;
    float *logits_g = NULL;
    int32_t n_rows_cmp = 0, n_rows_same = 0;
    double max_rel = 0;
    if (use_gpu) {
        const ember_model_params mp = placed();
        assert_int_equal(ember_model_load(draft, &mp, &dg_m), EMBER_OK);
        assert_int_equal(ember_dflash_ctx_new(dg_m, m, 1, MAX_POS, 1, &dg), EMBER_OK);
        assert_string_equal(ember_dflash_ctx_backend(dg), "cuda");
        logits_g = malloc(sizeof(float) * 7 * (size_t)V);
        assert_non_null(logits_g);
    }
    float *feat = malloc(sizeof(float) * MAX_POS * (size_t)nl * (size_t)E), *logits = malloc(sizeof(float) * 7 * (size_t)V);
    assert_non_null(feat);
    assert_non_null(logits);
    ember_batch b;
    assert_int_equal(ember_batch_init(MAX_POS, &b), EMBER_OK);
    int32_t n_same = 0, n_cmp = 0;
    for (int q = 0; q < N_REQ; q++) {
        ember_token seq[MAX_POS];
        const int32_t n = w->n_prompts[q] + N_PRED;
        memcpy(seq, w->prompts[q], sizeof(ember_token) * (size_t)w->n_prompts[q]);
        memcpy(seq + w->n_prompts[q], want[q], sizeof(ember_token) * N_PRED);
        ember_seq_remove(c, 0);
        for (int32_t p0 = 0; p0 < n; p0 += 32) {   /* n_batch 32 */
            const int32_t k = n - p0 < 32 ? n - p0 : 32;
            b.n_tokens = k;
            for (int i = 0; i < k; i++) { b.token[i] = seq[p0 + i]; b.pos[i] = p0 + i; b.seq_id[i] = 0; b.logits[i] = 0; }
            assert_int_equal(ember_decode(c, &b), EMBER_OK);
            for (int i = 0; i < k; i++)
                for (int j = 0; j < nl; j++)
                    memcpy(feat + ((size_t)(p0 + i) * nl + j) * (size_t)E, ember_get_hidden(c, i, j), sizeof(float) * (size_t)E);
        }
        for (int32_t r = 0; r < w->n_rec; r++) {
            const drec *x = &w->rec[r];
            if (x->q != q) continue;
            n_cmp++;
            ember_dflash_truncate(dc, 0, 0);
            assert_int_equal(ember_dflash_inject(dc, 0, x->anchor, feat), EMBER_OK);
            ember_token blk[8] = {seq[x->anchor]};
            for (int i = 1; i < 8; i++) blk[i] = d->mask_token;
            assert_int_equal(ember_dflash_block(dc, 0, blk, 8, logits), EMBER_OK);
            if (dg) {   /* argmax per row equal; logits within f16 K/V's rounding */
                ember_dflash_truncate(dg, 0, 0);
                assert_int_equal(ember_dflash_inject(dg, 0, x->anchor, feat), EMBER_OK);
                assert_int_equal(ember_dflash_block(dg, 0, blk, 8, logits_g), EMBER_OK);
                for (int32_t i = 0; i < 7; i++) {
                    const float *l = logits + (size_t)i * (size_t)V, *g = logits_g + (size_t)i * (size_t)V;
                    int bl = 0, bg = 0;
                    double scale = 0, diff = 0;
                    for (int j = 0; j < V; j++) {
                        if (l[j] > l[bl]) bl = j;
                        if (g[j] > g[bg]) bg = j;
                        scale = fmax(scale, fabs(l[j]));
                        diff = fmax(diff, fabs((double)l[j] - g[j]));
                    }
                    max_rel = fmax(max_rel, diff / (scale + 1e-6));
                    n_rows_cmp++;
                    n_rows_same += bl == bg;
                }
            }
            bool same = true;
            for (int32_t i = 0; i < x->n; i++) {
                const float *l = logits + (size_t)i * (size_t)V;
                int best = 0;
                for (int j = 1; j < V; j++) if (l[j] > l[best]) best = j;
                same &= best == x->draft[i];
            }
            if (!same) {
                print_message("differs: request %d anchor %d:", q, x->anchor);
                for (int32_t i = 0; i < x->n; i++) {
                    const float *l = logits + (size_t)i * (size_t)V;
                    int best = 0;
                    for (int j = 1; j < V; j++) if (l[j] > l[best]) best = j;
                    print_message(" %d/%d", x->draft[i], best);
                }
                print_message("\n");
            }
            n_same += same;
        }
    }
    print_message("%s%s: %d of %d engine drafts equal the direct blocks (of the CPU draft)\n", draft,
                  use_gpu ? " [GPU target + draft]" : "", n_same, n_cmp);
    assert_true(n_cmp > 0);
    assert_true(n_same * 100 >= n_cmp * 95);
    if (dg) {
        /* f16 K/V and the GPU's float order against the CPU's F32 K/V: a
         * near-tie may flip (as between batch shapes), so 95% of rows, and
         * the logits within 2% of the row's scale */
        print_message("%s: GPU draft vs CPU draft: %d of %d block rows have the same argmax, logits max error %.3g of the row scale\n",
                      draft, n_rows_same, n_rows_cmp, max_rel);
        assert_true(n_rows_same * 100 >= n_rows_cmp * 95);
        assert_true(max_rel < 2e-2);
        ember_dflash_ctx_free(dg);
        ember_model_free(dg_m);
        free(logits_g);
    }
    ember_batch_free(&b);
    free(feat);
    free(logits);
    ember_dflash_ctx_free(dc);
    ember_context_free(c);
    ember_model_free(dm);
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
    p.n_kv_tokens = MAX_POS * n_seq;
    p.n_batch = 32;
    p.n_ubatch = 32;
    p.n_threads = 1;
    p.type_k = p.type_v = use_gpu ? EMBER_KV_F16 : EMBER_KV_F32;
    ember_context *c = NULL;
    assert_int_equal(ember_context_new(m, &p, &c), EMBER_OK);
    return c;
}

/* Greedy continuation of prompt[n] by plain decoding, one token at a time. */
static void greedy(ember_context *c, const ember_token *prompt, int32_t n, int32_t n_vocab, ember_token *out)
{
    ember_batch b;
    assert_int_equal(ember_batch_init(MAX_POS, &b), EMBER_OK);
    ember_seq_remove(c, 0);
    for (int32_t p0 = 0; p0 < n; p0 += 32) {   /* n_batch 32 */
        const int32_t k = n - p0 < 32 ? n - p0 : 32;
        b.n_tokens = k;
        for (int i = 0; i < k; i++) {
            b.token[i] = prompt[p0 + i]; b.pos[i] = p0 + i; b.seq_id[i] = 0; b.logits[i] = p0 + i == n - 1;
        }
        assert_int_equal(ember_decode(c, &b), EMBER_OK);
    }
    for (int g = 0; g < N_PRED; g++) {
        const float *l = ember_get_logits(c, -1);
        int best = 0;
        for (int j = 1; j < n_vocab; j++) if (l[j] > l[best]) best = j;
        out[g] = best;
        b.n_tokens = 1;
        b.token[0] = best; b.pos[0] = n + g; b.seq_id[0] = 0; b.logits[0] = 1;
        assert_int_equal(ember_decode(c, &b), EMBER_OK);
    }
    ember_batch_free(&b);
}

/* Greedy decoding of two requests through the engine with draft `draft`;
 * every text must be the plain greedy continuation. Returns the drafted
 * and accepted counts of request 0 (prompt0). */
static void run_lossless(const char *draft, int64_t *n_drafted, int64_t *n_accepted)
{
    ember_model *m = NULL;
    const ember_model_params mp = placed();
    assert_int_equal(ember_model_load(TARGET, &mp, &m), EMBER_OK);
    const int32_t V = ember_model_n_vocab(m), E = ember_model_n_embd(m);
    const ember_token *prompts[N_REQ] = {prompt0, prompt1};
    const int32_t n_prompts[N_REQ] = {(int32_t)(sizeof prompt0 / sizeof *prompt0), (int32_t)(sizeof prompt1 / sizeof *prompt1)};
    ember_token want[N_REQ][N_PRED];
    ember_context *ref = new_ctx(m, 1);
    for (int q = 0; q < N_REQ; q++) greedy(ref, prompts[q], n_prompts[q], V, want[q]);
    ember_context_free(ref);
    /* on the GPU the reference is the GPU target's own greedy output (lossless
     * means: what it decodes without drafts) */
    for (int g = 0; g < N_PRED && !use_gpu; g++)
        if (want[0][g] != hf_greedy0[g]) fail_msg("target greedy token %d: %d, transformers %d", g, want[0][g], hf_greedy0[g]);

    ember_context *c = new_ctx(m, N_REQ);
    spec_proposer prop;
    assert_int_equal(spec_dflash_new(draft, m, N_REQ, MAX_POS, 1, 7, &mp, &prop), EMBER_OK);
    static wrap w;
    memset(&w, 0, sizeof w);
    w.inner = prop;
    for (int q = 0; q < N_REQ; q++) { w.prompts[q] = prompts[q]; w.n_prompts[q] = n_prompts[q]; }
    assert_int_equal(prop.n_hidden_layers, 4);
    const int32_t want_layers[4] = {0, 2, 3, 4};   /* HF target_layer_ids: GGUF target_layers - 1 */
    for (int k = 0; k < 4; k++) assert_int_equal(prop.hidden_layers[k], want_layers[k]);
    spec_params sp = spec_default_params();
    sp.type = SPEC_DFLASH;
    sp.n_max = 7;
    sp.p_min = 0;
    sp.adaptive = false;
    spec_engine *se;
    spec_proposer wp = prop;
    wp.self = &w;
    wp.propose = wrap_propose;
    wp.absorb = wrap_absorb;
    wp.fork = wrap_fork;
    wp.free = wrap_free;
    wp.device_seconds = wrap_device_seconds;   /* every hook of prop that reads self goes through w */
    wp.prefetch = wrap_prefetch;
    assert_int_equal(spec_engine_new(&sp, wp, N_REQ, &se), EMBER_OK);
    engine_runtime rt = engine_runtime_ember(c, V, E);
    engine_vocab vocab = {.token_piece = piece, .is_eog = never_eog};
    engine_config cfg = {.n_slots = N_REQ, .n_ctx = MAX_POS, .n_batch = 32, .n_queue_max = 4, .spec = se};
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
        char w[1024] = "";
        for (int g = 0; g < N_PRED; g++) {
            char t[16];
            snprintf(t, sizeof t, "<%d>", want[q][g]);
            strcat(w, t);
        }
        if (req[q]->finish == ENGINE_FINISH_ERROR) fail_msg("request %d: %s", q, req[q]->err);
        assert_non_null(req[q]->text);
        assert_string_equal(req[q]->text, w);
        assert_true(req[q]->n_draft > 0);
        print_message("%s request %d: %d drafted, %d accepted\n", draft, q, (int)req[q]->n_draft,
                      (int)req[q]->n_draft_accepted);
    }
    *n_drafted = req[0]->n_draft;
    *n_accepted = req[0]->n_draft_accepted;
    /* the two requests generate side by side: their blocks were drafted in one pass */
    print_message("%s: %d prefetches\n", draft, (int)w.n_prefetch);
    assert_true(w.n_prefetch > 0);
    assert_true(se->st.n_drafts > 0);
    for (int i = 7; i < SPEC_MAX_DRAFT; i++) assert_int_equal(se->st.drafted_at[i], 0);   /* block_size - 1 = 7 */
    for (int q = 0; q < N_REQ; q++) engine_req_release(req[q]);
    engine_free(e);
    spec_engine_free(se);
    ember_context_free(c);
    check_drafts(m, draft, &w, (const ember_token(*)[N_PRED])want);
    ember_model_free(m);
}

/* the random draft: its blocks are rejected */
static void test_dflash_lossless(void **st)
{
    (void)st;
    int64_t nd, na;
    run_lossless(DRAFT, &nd, &na);
    assert_true(nd > 0);
}

/* the constant draft (tiny-dflash-draft-const: it drafts token 417, which
 * the target repeats after its first two tokens): blocks are accepted in
 * full and rejected, and the output is still the plain greedy one */
static void test_dflash_lossless_accepting(void **st)
{
    (void)st;
    int64_t nd, na;
    run_lossless("tests/golden/dflash/tiny-dflash-draft-const.gguf", &nd, &na);
    assert_true(na > 0);
    assert_true(na < nd);
    assert_true(na * 2 > nd);   /* 22 of the 24 tokens are 417 */
}

/* ---- the same with the target and the draft on the GPU (skipped without one) ---- */

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
    return 0;
}

static void need_gpu(void)
{
    if (ember_gpu_count() < 1) {
        print_message("no GPU (or no CUDA build): skipped\n");
        skip();
    }
}

/* lossless on the GPU: the speculative output (draft on the GPU, reading
 * the hidden states the GPU target captured) is the GPU target's greedy
 * output token for token; the engine's blocks equal the CPU draft's on the
 * same features (>= 95%), and the GPU draft's block rows the CPU draft's */
static void test_dflash_lossless_gpu(void **st)
{
    (void)st;
    need_gpu();
    int64_t nd, na;
    run_lossless(DRAFT, &nd, &na);
    assert_true(nd > 0);
}

static void test_dflash_lossless_accepting_gpu(void **st)
{
    (void)st;
    need_gpu();
    int64_t nd, na;
    run_lossless("tests/golden/dflash/tiny-dflash-draft-const.gguf", &nd, &na);
    assert_true(na > 0);
    assert_true(na < nd);
}

static void test_dflash_refusals(void **st)
{
    (void)st;
    ember_model *m = NULL;
    assert_int_equal(ember_model_load(TARGET, NULL, &m), EMBER_OK);
    spec_proposer prop;
    /* not a dflash file */
    assert_int_equal(spec_dflash_new(TARGET, m, 1, 64, 1, 7, NULL, &prop), EMBER_ERR_INVALID_ARG);
    ember_model_free(m);
    /* a target it does not fit (4 layers of n_embd 48) */
    assert_int_equal(ember_model_load("tests/golden/gemma4/tiny-gemma4-kv.gguf", NULL, &m), EMBER_OK);
    assert_int_equal(spec_dflash_new(DRAFT, m, 1, 64, 1, 7, NULL, &prop), EMBER_ERR_INVALID_ARG);
    ember_model_free(m);
    spec_type t;
    assert_true(spec_parse_type("draft-dflash", &t));
    assert_int_equal(t, SPEC_DFLASH);
    assert_string_equal(spec_type_name(SPEC_DFLASH), "draft-dflash");
}

/* The prefix cache: a request whose prompt extends a busy slot's tokens is
 * admitted to the other slot with that prefix forked (seq_fork); the draft's
 * features come along (fork), so it drafts from its first step, and the
 * output stays the plain greedy one. */
static void test_dflash_prefix_fork(void **st)
{
    (void)st;
    ember_model *m = NULL;
    assert_int_equal(ember_model_load(TARGET, NULL, &m), EMBER_OK);
    const int32_t V = ember_model_n_vocab(m), E = ember_model_n_embd(m);
    const int32_t na = (int32_t)(sizeof prompt1 / sizeof *prompt1);
    ember_token pb[80];
    memcpy(pb, prompt1, sizeof prompt1);
    pb[na] = 300; pb[na + 1] = 301;   /* the same 70 tokens, then two more */
    const int32_t nb = na + 2;
    ember_token want[N_PRED];
    ember_context *ref = new_ctx(m, 1);
    greedy(ref, pb, nb, V, want);
    ember_context_free(ref);
    ember_context *c = new_ctx(m, 2);
    spec_proposer prop;
    assert_int_equal(spec_dflash_new(DRAFT, m, 2, MAX_POS, 1, 7, NULL, &prop), EMBER_OK);
    spec_params sp = spec_default_params();
    sp.type = SPEC_DFLASH;
    sp.n_max = 7;
    sp.p_min = 0;
    sp.adaptive = false;
    spec_engine *se;
    assert_int_equal(spec_engine_new(&sp, prop, 2, &se), EMBER_OK);
    engine_runtime rt = engine_runtime_ember(c, V, E);
    engine_vocab vocab = {.token_piece = piece, .is_eog = never_eog};
    engine_config cfg = {.n_slots = 2, .n_ctx = MAX_POS, .n_batch = 32, .n_queue_max = 4, .spec = se};
    engine *e;
    assert_int_equal(engine_new(&cfg, &rt, &vocab, &e), EMBER_OK);
    engine_req_params p = {0};
    p.sampling = ember_sampler_default_params();
    p.sampling.temp = 0;
    p.ignore_eos = true;
    p.prompt = prompt1;
    p.n_prompt = na;
    p.n_predict = 20;
    engine_req *ra, *rb;
    assert_int_equal(engine_submit(e, &p, &ra), EMBER_OK);
    for (int guard = 0; guard < 100 && ra->n_draft == 0; guard++) engine_step(e);   /* A is generating */
    assert_true(ra->finish == ENGINE_RUNNING);
    p.prompt = pb;
    p.n_prompt = nb;
    p.n_predict = N_PRED;
    assert_int_equal(engine_submit(e, &p, &rb), EMBER_OK);
    /* B's prefill is 3 tokens (70 forked, the last prompt token decoded again) */
    engine_step(e);
    engine_step(e);
    assert_true(rb->n_draft > 0);   /* without the features of the forked 70 positions it would not draft */
    for (int guard = 0; guard < 1000 && (ra->finish == ENGINE_RUNNING || rb->finish == ENGINE_RUNNING); guard++)
        engine_step(e);
    char w[1024] = "";
    for (int g = 0; g < N_PRED; g++) {
        char t[16];
        snprintf(t, sizeof t, "<%d>", want[g]);
        strcat(w, t);
    }
    assert_non_null(rb->text);
    assert_string_equal(rb->text, w);
    engine_req_release(ra);
    engine_req_release(rb);
    engine_free(e);
    spec_engine_free(se);
    ember_context_free(c);
    ember_model_free(m);
}

#define RECORD "tests/golden/dflash/tiny-dflash.llama-drafts.json"

/* One draft of the llama.cpp record: ember's target continues the prompt
 * greedily as llama.cpp's run did (its committed "sequence", compared token
 * for token), then every recorded block is recomputed by ember's draft
 * forward from the features of one target pass over that sequence (anchor
 * sequence[n_past], features of positions < n_past) and compared with
 * llama.cpp's block: >= 95% of steps must be equal in every position. */
static void check_llama_record(json_t *rec, const char *name)
{
    char path[256];
    snprintf(path, sizeof path, "tests/golden/dflash/%s.gguf", name);
    json_t *dr = json_object_get(json_object_get(rec, "drafts"), name);
    json_t *jp = json_object_get(rec, "prompt_ids"), *jsteps = json_object_get(dr, "steps"),
           *jseq = json_object_get(dr, "sequence");
    assert_true(json_is_array(jp) && json_is_array(jsteps) && json_array_size(jsteps) >= 5 && json_is_array(jseq));
    ember_model *m = NULL, *dm = NULL;
    assert_int_equal(ember_model_load(TARGET, NULL, &m), EMBER_OK);
    assert_int_equal(ember_model_load(path, NULL, &dm), EMBER_OK);
    const ember_dflash *d = ember_model_dflash(dm);
    const int32_t V = ember_model_n_vocab(m), E = ember_model_n_embd(m), nl = d->n_target_layers;
    enum { N_SEQ = 192 };
    ember_token seq[N_SEQ];
    const int32_t n_prompt = (int32_t)json_array_size(jp), n = (int32_t)json_array_size(jseq);
    assert_true(n_prompt >= 2 && n > n_prompt && n <= N_SEQ);
    for (int32_t i = 0; i < n; i++) seq[i] = (ember_token)json_integer_value(json_array_get(jseq, (size_t)i));
    for (int32_t i = 0; i < n_prompt; i++)
        assert_int_equal(seq[i], (ember_token)json_integer_value(json_array_get(jp, (size_t)i)));
    ember_context_params cp = ember_context_default_params();
    cp.n_ctx = N_SEQ;
    cp.n_batch = cp.n_ubatch = N_SEQ;
    cp.n_threads = 1;
    cp.type_k = cp.type_v = EMBER_KV_F32;
    ember_context *c = NULL;
    assert_int_equal(ember_context_new(m, &cp, &c), EMBER_OK);
    int32_t layers[EMBER_DFLASH_MAX_TARGET_LAYERS];
    for (int k = 0; k < nl; k++) layers[k] = d->target_layers[k] - 1;
    assert_int_equal(ember_set_hidden_layers(c, nl, layers), EMBER_OK);
    ember_batch b;
    assert_int_equal(ember_batch_init(N_SEQ, &b), EMBER_OK);
    /* one pass over llama.cpp's committed sequence: every position's
     * features, and the target's argmax after each generated prefix */
    b.n_tokens = n;
    for (int i = 0; i < n; i++) { b.token[i] = seq[i]; b.pos[i] = i; b.seq_id[i] = 0; b.logits[i] = i >= n_prompt - 1; }
    assert_int_equal(ember_decode(c, &b), EMBER_OK);
    int32_t n_greedy_same = 0;
    for (int32_t i = n_prompt - 1; i < n - 1; i++) {
        const float *l = ember_get_logits(c, i);
        int best = 0;
        for (int j = 1; j < V; j++) if (l[j] > l[best]) best = j;
        n_greedy_same += best == seq[i + 1];
    }
    print_message("%s: ember's greedy token equals llama.cpp's at %d of %d generated positions\n", name,
                  n_greedy_same, n - n_prompt);
    assert_int_equal(n_greedy_same, n - n_prompt);
    float *feat = malloc(sizeof(float) * (size_t)n * (size_t)nl * (size_t)E);
    float *logits = malloc(sizeof(float) * 7 * (size_t)V);
    assert_non_null(feat);
    assert_non_null(logits);
    for (int i = 0; i < n; i++)
        for (int k = 0; k < nl; k++)
            memcpy(feat + ((size_t)i * nl + k) * (size_t)E, ember_get_hidden(c, i, k), sizeof(float) * (size_t)E);
    ember_dflash_ctx *dc = NULL;
    assert_int_equal(ember_dflash_ctx_new(dm, m, 1, N_SEQ, 1, &dc), EMBER_OK);
    size_t n_steps = json_array_size(jsteps), n_same = 0;
    for (size_t sidx = 0; sidx < n_steps; sidx++) {
        json_t *stp = json_array_get(jsteps, sidx), *jd = json_object_get(stp, "draft");
        const int32_t P = (int32_t)json_integer_value(json_object_get(stp, "n_past"));
        const int32_t nd = (int32_t)json_array_size(jd);
        assert_true(P >= n_prompt - 1 && P < n && nd >= 1 && nd <= 7);
        ember_dflash_truncate(dc, 0, 0);
        assert_int_equal(ember_dflash_inject(dc, 0, P, feat), EMBER_OK);
        ember_token blk[8] = {seq[P]};
        for (int i = 1; i < 8; i++) blk[i] = d->mask_token;
        assert_int_equal(ember_dflash_block(dc, 0, blk, 8, logits), EMBER_OK);
        bool same = true;
        for (int32_t i = 0; i < nd; i++) {
            const float *l = logits + (size_t)i * (size_t)V;
            int best = 0;
            for (int j = 1; j < V; j++) if (l[j] > l[best]) best = j;
            if (best != (ember_token)json_integer_value(json_array_get(jd, (size_t)i))) same = false;
        }
        n_same += same;
    }
    print_message("%s: %zu of %zu of llama.cpp's drafted blocks equal ember's\n", name, n_same, n_steps);
    assert_true(n_same * 100 >= n_steps * 95);
    ember_dflash_ctx_free(dc);
    free(feat);
    free(logits);
    ember_batch_free(&b);
    ember_context_free(c);
    ember_model_free(dm);
    ember_model_free(m);
}

static void test_dflash_matches_llama_record(void **st)
{
    (void)st;
    json_error_t jerr;
    json_t *rec = json_load_file(RECORD, 0, &jerr);
    if (!rec) fail_msg("%s: %s", RECORD, jerr.text);
    check_llama_record(rec, "tiny-dflash-draft");
    check_llama_record(rec, "tiny-dflash-draft-const");
    json_decref(rec);
}

int main(void)
{
    /* one matmul kernel for every batch size: verification rows then sum in
     * the plain decode's order (tests/e2e/test_spec.py says why) */
    setenv("EMBER_NO_GEMM", "1", 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dflash_lossless),
        cmocka_unit_test(test_dflash_lossless_accepting),
        cmocka_unit_test(test_dflash_refusals),
        cmocka_unit_test(test_dflash_prefix_fork),
        cmocka_unit_test(test_dflash_matches_llama_record),
        cmocka_unit_test_setup_teardown(test_dflash_lossless_gpu, gpu_on, gpu_off),
        cmocka_unit_test_setup_teardown(test_dflash_lossless_accepting_gpu, gpu_on, gpu_off),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
