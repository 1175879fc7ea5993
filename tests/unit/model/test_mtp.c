/* The `gemma4-assistant` architecture (src/model/mtp.c): the tiny Gemma 4
 * MTP drafts of tests/golden/mtp/ (tests/golden/make_mtp.py: transformers'
 * Gemma4AssistantForCausalLM with random weights, converted by llama.cpp's
 * convert_hf_to_gguf.py) load with the metadata and tensor shapes gguf-py
 * reads from the same files (tiny-mtp.json drafts.<name>.gguf), fit their
 * target (tests/golden/dflash/tiny-dflash-target.gguf), are refused by a
 * target they do not fit and cannot run as models of their own; malformed
 * drafts get errors naming the key or tensor; the forward refuses bad
 * arguments;
 * - the forward: over the K/V ember computes from its own gemma4 target
 *   states, chained from the target's post-norm state, the draft proposes
 *   at every step of the target's greedy continuation the tokens
 *   transformers' chained drafting proposes (tiny-mtp.json steps, same
 *   position for every draft step, the sliding layers seeing the last
 *   sliding_window - 1 keys), and its logits at step 0 match transformers';
 * - against llama.cpp: at each step of llama.cpp's own run
 *   (tiny-mtp.llama-drafts.json, recorded by tests/golden/record_mtp_llama.sh
 *   with llama-speculative-simple --spec-type draft-mtp on the same files)
 *   ember's draft for the same committed tokens equals llama.cpp's in >= 95%
 *   of steps (all 41 of each draft when recorded). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "ember.h"
#include "model/mtp.h"
#include "gguf/gguf.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <jansson.h>

#define DRAFT "tests/golden/mtp/tiny-mtp-draft.gguf"
#define DRAFT_CONST "tests/golden/mtp/tiny-mtp-draft-const.gguf"
#define TARGET "tests/golden/dflash/tiny-dflash-target.gguf"
#define REC "tests/golden/mtp/tiny-mtp.json"

static json_t *load_rec(void)
{
    json_error_t jerr;
    json_t *rec = json_load_file(REC, 0, &jerr);
    if (!rec) fail_msg("%s: %s", REC, jerr.text);
    return rec;
}

static int64_t key_int(json_t *keys, const char *suffix)
{
    char k[128];
    snprintf(k, sizeof k, "gemma4-assistant.%s", suffix);
    json_t *v = json_object_get(keys, k);
    if (!json_is_integer(v)) fail_msg("tiny-mtp.json: no integer key %s", k);
    return json_integer_value(v);
}

static void assert_shape(json_t *tensors, const char *name, int64_t n_in, int64_t n_out)
{
    json_t *ne = json_object_get(tensors, name);
    if (!json_is_array(ne)) fail_msg("tiny-mtp.json: no tensor %s", name);
    if (json_integer_value(json_array_get(ne, 0)) != n_in ||
        (n_out > 0 && json_integer_value(json_array_get(ne, 1)) != n_out))
        fail_msg("%s: ember binds [%lld -> %lld], gguf-py reads ne [%lld, %lld]", name, (long long)n_in, (long long)n_out,
                 (long long)json_integer_value(json_array_get(ne, 0)), (long long)json_integer_value(json_array_get(ne, 1)));
}

static void check_against_gguf_py(const char *path, json_t *view)
{
    ember_model *m = NULL;
    assert_int_equal(ember_model_load(path, NULL, &m), EMBER_OK);
    json_t *keys = json_object_get(view, "keys"), *tensors = json_object_get(view, "tensors");
    assert_string_equal(ember_model_arch(m), json_string_value(json_object_get(view, "architecture")));
    assert_int_equal(ember_model_n_layer(m), key_int(keys, "block_count"));
    assert_int_equal(ember_model_n_embd(m), key_int(keys, "embedding_length"));
    assert_int_equal(ember_model_n_vocab(m), json_integer_value(json_object_get(view, "n_vocab")));
    const ember_mtp *d = ember_model_mtp(m);
    assert_non_null(d);
    assert_int_equal(d->n_embd_backbone, key_int(keys, "embedding_length_out"));
    assert_int_equal(d->n_layer_nextn, key_int(keys, "nextn_predict_layers"));
    const int64_t E = ember_model_n_embd(m), B = d->n_embd_backbone;
    assert_int_equal(d->pre_proj.n_in, 2 * B);
    assert_int_equal(d->pre_proj.n_out, E);
    assert_shape(tensors, "nextn.pre_projection.weight", d->pre_proj.n_in, d->pre_proj.n_out);
    assert_shape(tensors, "nextn.post_projection.weight", d->post_proj.n_in, d->post_proj.n_out);
    assert_shape(tensors, "token_embd.weight", E, ember_model_n_vocab(m));
    json_t *pat = json_object_get(keys, "gemma4-assistant.attention.sliding_window_pattern");
    assert_int_equal(json_array_size(pat), (size_t)ember_model_n_layer(m));
    const int64_t n_head = key_int(keys, "attention.head_count");
    for (int il = 0; il < d->n_layer_nextn; il++) {
        const ember_mtp_layer *D = &d->layers[il];
        assert_int_equal(D->swa, json_is_true(json_array_get(pat, (size_t)il)));
        assert_int_equal(D->head_dim, key_int(keys, D->swa ? "attention.key_length_swa" : "attention.key_length"));
        assert_int_equal(D->n_rot, key_int(keys, D->swa ? "rope.dimension_count_swa" : "rope.dimension_count"));
        assert_int_equal(D->n_ff, key_int(keys, "feed_forward_length"));
        assert_true(D->swa ? D->rope_freqs == NULL : D->rope_freqs != NULL);
        char name[64];
        snprintf(name, sizeof name, "blk.%d.attn_q.weight", il);
        assert_shape(tensors, name, E, n_head * D->head_dim);
        snprintf(name, sizeof name, "blk.%d.attn_output.weight", il);
        assert_shape(tensors, name, n_head * D->head_dim, E);
        snprintf(name, sizeof name, "blk.%d.attn_q_norm.weight", il);
        assert_shape(tensors, name, D->head_dim, 0);
        snprintf(name, sizeof name, "blk.%d.ffn_gate.weight", il);
        assert_shape(tensors, name, E, D->n_ff);
        snprintf(name, sizeof name, "blk.%d.ffn_down.weight", il);
        assert_shape(tensors, name, D->n_ff, E);
        snprintf(name, sizeof name, "blk.%d.attn_k.weight", il);
        assert_null(json_object_get(tensors, name));   /* Q only: it reads the target's K/V */
    }
    assert_shape(tensors, "rope_freqs.weight", key_int(keys, "attention.key_length") / 2, 0);
    ember_model_free(m);
}

static void test_mtp_loads_as_gguf_py_reads(void **st)
{
    (void)st;
    json_t *rec = load_rec(), *drafts = json_object_get(rec, "drafts");
    check_against_gguf_py(DRAFT, json_object_get(json_object_get(drafts, "tiny-mtp-draft"), "gguf"));
    check_against_gguf_py(DRAFT_CONST, json_object_get(json_object_get(drafts, "tiny-mtp-draft-const"), "gguf"));
    json_decref(rec);
}

static void test_mtp_fits_its_target(void **st)
{
    (void)st;
    ember_model *d = NULL, *t = NULL;
    assert_int_equal(ember_model_load(DRAFT, NULL, &d), EMBER_OK);
    assert_int_equal(ember_model_load(TARGET, NULL, &t), EMBER_OK);
    assert_int_equal(ember_mtp_check_target(d, t), EMBER_OK);
    assert_null(ember_model_mtp(t));
    /* its K/V owners: target layers 2 (sliding) and 3 (full), the last
     * non-shared ones of the 6-layer target with 2 KV-shared layers */
    ember_mtp_ctx *c = NULL;
    assert_int_equal(ember_mtp_ctx_new(d, t, 1, 32, 1, &c), EMBER_OK);
    int32_t layers[3];
    assert_int_equal(ember_mtp_hidden_layers(c, layers), 3);
    assert_int_equal(layers[0], 1);
    assert_int_equal(layers[1], 2);
    assert_int_equal(layers[2], 5);
    ember_mtp_ctx_free(c);
    ember_model_free(t);
    /* a 48-wide target: embedding_length_out 64 does not fit */
    assert_int_equal(ember_model_load("tests/golden/gemma4/tiny-gemma4-kv.gguf", NULL, &t), EMBER_OK);
    assert_int_equal(ember_mtp_check_target(d, t), EMBER_ERR_INVALID_ARG);
    assert_non_null(strstr(ember_last_error(), "embedding_length_out"));
    assert_int_equal(ember_mtp_check_target(t, t), EMBER_ERR_INVALID_ARG);
    ember_model_free(t);
    /* not a gemma4 target */
    assert_int_equal(ember_model_load("tests/golden/dflash/tiny-dflash-draft.gguf", NULL, &t), EMBER_OK);
    assert_int_equal(ember_mtp_check_target(d, t), EMBER_ERR_INVALID_ARG);
    ember_model_free(t);
    /* no model of its own */
    ember_context_params cp = ember_context_default_params();
    cp.n_ctx = 64;
    ember_context *cx = NULL;
    assert_int_equal(ember_context_new(d, &cp, &cx), EMBER_ERR_UNSUPPORTED);
    assert_null(cx);
    ember_model_free(d);
}

/* A minimal gemma4-assistant file: 1 full layer, n_embd 8, 2 heads of 4,
 * n_ff 8, backbone 16; `bad` breaks one thing. */
enum { OK_FILE, NO_OUT, OUT_EQ, NO_PRE, PRE_WIDTH, NO_SCALE, NO_FREQS, NO_PATTERN, NO_EMBD };
static const char *write_draft(int bad, char *path)
{
    snprintf(path, 64, "/tmp/ember-test-mtp-%d-%d.gguf", (int)getpid(), bad);
    ember_gguf_writer *w = NULL;
    assert_int_equal(ember_gguf_writer_new(0, &w), EMBER_OK);
    const char *A = "gemma4-assistant";
    char k[96];
#define U32(s, v) snprintf(k, sizeof k, "%s." s, A), ember_gguf_writer_set_u32(w, k, v)
    ember_gguf_writer_set_str(w, "general.architecture", A);
    U32("context_length", 64);
    U32("embedding_length", 8);
    U32("block_count", 1);
    U32("feed_forward_length", 8);
    U32("attention.head_count", 2);
    U32("attention.head_count_kv", 1);
    U32("attention.key_length", 4);
    U32("attention.value_length", 4);
    U32("attention.key_length_swa", 4);
    U32("attention.value_length_swa", 4);
    U32("attention.sliding_window", 4);
    U32("nextn_predict_layers", 1);
    if (bad != NO_OUT) U32("embedding_length_out", bad == OUT_EQ ? 8 : 16);
#undef U32
    snprintf(k, sizeof k, "%s.attention.layer_norm_rms_epsilon", A);
    ember_gguf_writer_set_f32(w, k, 1e-6f);
    const bool pat[1] = {false};
    snprintf(k, sizeof k, "%s.attention.sliding_window_pattern", A);
    if (bad != NO_PATTERN) ember_gguf_writer_set_arr(w, k, EMBER_GGUF_BOOL, pat, 1);
    static float z[32 * 8];
    const int64_t v8[1] = {8}, v4[1] = {4}, v2[1] = {2}, v1[1] = {1};
    const int64_t sq[2] = {8, 8}, pre[2] = {bad == PRE_WIDTH ? 31 : 32, 8}, post[2] = {8, 16};
    if (bad != NO_PRE) ember_gguf_writer_add_tensor(w, "nextn.pre_projection.weight", EMBER_TYPE_F32, 2, pre, z);
    ember_gguf_writer_add_tensor(w, "nextn.post_projection.weight", EMBER_TYPE_F32, 2, post, z);
    ember_gguf_writer_add_tensor(w, "output_norm.weight", EMBER_TYPE_F32, 1, v8, z);
    const int64_t te[2] = {8, 4};
    if (bad != NO_EMBD) ember_gguf_writer_add_tensor(w, "token_embd.weight", EMBER_TYPE_F32, 2, te, z);
    if (bad != NO_FREQS) ember_gguf_writer_add_tensor(w, "rope_freqs.weight", EMBER_TYPE_F32, 1, v2, z);
    const char *mats[] = {"attn_q", "attn_output", "ffn_gate", "ffn_up", "ffn_down"};
    const char *vecs[] = {"attn_norm", "post_attention_norm", "ffn_norm", "post_ffw_norm"};
    char name[64];
    for (size_t i = 0; i < sizeof mats / sizeof *mats; i++) {
        snprintf(name, sizeof name, "blk.0.%s.weight", mats[i]);
        ember_gguf_writer_add_tensor(w, name, EMBER_TYPE_F32, 2, sq, z);
    }
    for (size_t i = 0; i < sizeof vecs / sizeof *vecs; i++) {
        snprintf(name, sizeof name, "blk.0.%s.weight", vecs[i]);
        ember_gguf_writer_add_tensor(w, name, EMBER_TYPE_F32, 1, v8, z);
    }
    ember_gguf_writer_add_tensor(w, "blk.0.attn_q_norm.weight", EMBER_TYPE_F32, 1, v4, z);
    if (bad != NO_SCALE) ember_gguf_writer_add_tensor(w, "blk.0.layer_output_scale.weight", EMBER_TYPE_F32, 1, v1, z);
    assert_int_equal(ember_gguf_writer_write_file(w, path), EMBER_OK);
    ember_gguf_writer_free(w);
    return path;
}

static void test_mtp_malformed(void **st)
{
    (void)st;
    const struct { int bad; ember_status want; const char *needle; } cases[] = {
        {NO_OUT, EMBER_ERR_FORMAT, "embedding_length_out"},
        {OUT_EQ, EMBER_ERR_FORMAT, "embedding_length_out"},
        {NO_PRE, EMBER_ERR_NOT_FOUND, "nextn.pre_projection.weight"},
        {PRE_WIDTH, EMBER_ERR_FORMAT, "nextn.pre_projection.weight"},
        {NO_SCALE, EMBER_ERR_NOT_FOUND, "layer_output_scale"},
        {NO_FREQS, EMBER_ERR_NOT_FOUND, "rope_freqs.weight"},
        {NO_PATTERN, EMBER_ERR_NOT_FOUND, "sliding_window_pattern"},
        {NO_EMBD, EMBER_ERR_NOT_FOUND, "token_embd.weight"},
    };
    char path[64];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        ember_model *m = NULL;
        write_draft(cases[i].bad, path);
        ember_status got = ember_model_load(path, NULL, &m);
        const char *msg = ember_last_error();
        if (got != cases[i].want || !strstr(msg, cases[i].needle))
            fail_msg("case %d: status %d, message '%s' (want %d naming %s)", cases[i].bad, got, msg, cases[i].want,
                     cases[i].needle);
        assert_null(m);
        unlink(path);
    }
    /* the well-formed one gets past the draft's own checks (it has no vocabulary) */
    ember_model *m = NULL;
    write_draft(OK_FILE, path);
    assert_int_not_equal(ember_model_load(path, NULL, &m), EMBER_OK);
    assert_null(strstr(ember_last_error(), "gemma4-assistant."));
    unlink(path);
}

static void test_mtp_forward_bad_args(void **st)
{
    (void)st;
    ember_model *d = NULL, *t = NULL;
    assert_int_equal(ember_model_load(DRAFT, NULL, &d), EMBER_OK);
    assert_int_equal(ember_model_load(TARGET, NULL, &t), EMBER_OK);
    ember_mtp_ctx *c = NULL;
    assert_int_equal(ember_mtp_ctx_new(d, t, 0, 16, 1, &c), EMBER_ERR_INVALID_ARG);
    assert_int_equal(ember_mtp_ctx_new(t, t, 1, 16, 1, &c), EMBER_ERR_INVALID_ARG);
    assert_int_equal(ember_mtp_ctx_new(d, t, 1, 16, 1, &c), EMBER_OK);
    static float in[17 * 2 * 64];
    float logits[594], h[64] = {0};
    assert_int_equal(ember_mtp_inject(c, 1, 1, in), EMBER_ERR_INVALID_ARG);   /* no sequence 1 */
    assert_int_equal(ember_mtp_inject(c, 0, 17, in), EMBER_ERR_RANGE);        /* past n_ctx 16 */
    assert_int_equal(ember_mtp_step(c, 0, 2, 1, h, logits, h), EMBER_ERR_RANGE);   /* position 0 not held */
    assert_int_equal(ember_mtp_inject(c, 0, 5, in), EMBER_OK);
    assert_int_equal(ember_mtp_n_pos(c, 0), 5);
    assert_int_equal(ember_mtp_step(c, 0, 594, 5, h, logits, h), EMBER_ERR_INVALID_ARG);   /* token 594 */
    assert_int_equal(ember_mtp_step(c, 0, 2, 6, h, logits, h), EMBER_ERR_RANGE);           /* position 5 not held */
    assert_int_equal(ember_mtp_step(c, 0, 2, 0, h, logits, h), EMBER_ERR_RANGE);
    assert_int_equal(ember_mtp_step(c, 0, 2, 5, h, logits, h), EMBER_OK);
    assert_int_equal(ember_mtp_n_pos(c, 0), 5);   /* a step writes no K/V */
    ember_mtp_truncate(c, 0, 2);
    assert_int_equal(ember_mtp_n_pos(c, 0), 2);
    ember_mtp_truncate(c, 0, 9);
    assert_int_equal(ember_mtp_n_pos(c, 0), 2);
    ember_mtp_ctx_free(c);
    ember_model_free(t);
    ember_model_free(d);
}

static int32_t argmax(const float *l, int32_t n)
{
    int32_t b = 0;
    for (int32_t i = 1; i < n; i++)
        if (l[i] > l[b]) b = i;
    return b;
}

/* One target decode of a whole token sequence (its states at positions < L
 * are those of every shorter prefix: causal) and the draft over it. */
typedef struct fixture {
    ember_model *d, *t;
    ember_mtp_ctx *mc;
    ember_context *c;
    int32_t n, n_src, E, V;
    float *in, *logits;
} fixture;

static void fx_open(fixture *f, const char *draft, json_t *tokens)
{
    memset(f, 0, sizeof *f);
    assert_int_equal(ember_model_load(draft, NULL, &f->d), EMBER_OK);
    assert_int_equal(ember_model_load(TARGET, NULL, &f->t), EMBER_OK);
    assert_int_equal(ember_mtp_ctx_new(f->d, f->t, 1, 128, 1, &f->mc), EMBER_OK);
    int32_t layers[3];
    const int32_t n_hid = ember_mtp_hidden_layers(f->mc, layers);
    f->n_src = n_hid - 1;
    f->n = (int32_t)json_array_size(tokens);
    f->E = ember_model_n_embd(f->t);
    f->V = ember_model_n_vocab(f->t);
    assert_true(f->n > 1 && f->n <= 128 && f->E <= 256);
    ember_context_params cp = ember_context_default_params();
    cp.n_ctx = cp.n_batch = cp.n_ubatch = 128;
    cp.n_threads = 1;
    cp.type_k = cp.type_v = EMBER_KV_F32;
    assert_int_equal(ember_context_new(f->t, &cp, &f->c), EMBER_OK);
    assert_int_equal(ember_set_hidden_layers(f->c, n_hid, layers), EMBER_OK);
    ember_batch b;
    assert_int_equal(ember_batch_init(f->n, &b), EMBER_OK);
    b.n_tokens = f->n;
    for (int i = 0; i < f->n; i++) {
        b.token[i] = (ember_token)json_integer_value(json_array_get(tokens, (size_t)i));
        b.pos[i] = i; b.seq_id[i] = 0; b.logits[i] = i == f->n - 1;
    }
    assert_int_equal(ember_decode(f->c, &b), EMBER_OK);
    ember_batch_free(&b);
    f->in = malloc(sizeof(float) * (size_t)f->n * (size_t)f->n_src * (size_t)f->E);
    f->logits = malloc(sizeof(float) * (size_t)f->V);
    for (int i = 0; i < f->n; i++)
        for (int s = 0; s < f->n_src; s++) {
            const float *x = ember_get_hidden(f->c, i, s);
            assert_non_null(x);
            memcpy(f->in + ((size_t)i * (size_t)f->n_src + (size_t)s) * (size_t)f->E, x, sizeof(float) * (size_t)f->E);
        }
}

static void fx_close(fixture *f)
{
    free(f->in);
    free(f->logits);
    ember_context_free(f->c);
    ember_mtp_ctx_free(f->mc);
    ember_model_free(f->t);
    ember_model_free(f->d);
}

/* The draft's chain of n argmaxes from id_last at position L over the
 * sequence's first L positions; logits of step k in f->logits after step k
 * (check(k) is called after each step). */
static void fx_draft(fixture *f, int32_t L, ember_token id_last, int32_t n, ember_token *out,
                     void (*check)(const fixture *f, int32_t k, void *arg), void *arg)
{
    float h[256];
    assert_true(L >= 1 && L <= f->n);
    ember_mtp_truncate(f->mc, 0, 0);
    assert_int_equal(ember_mtp_inject(f->mc, 0, L, f->in), EMBER_OK);
    ember_mtp_final_norm(f->mc, ember_get_hidden(f->c, L - 1, f->n_src), h);
    ember_token tok = id_last;
    for (int32_t k = 0; k < n; k++) {
        assert_int_equal(ember_mtp_step(f->mc, 0, tok, L, h, f->logits, h), EMBER_OK);
        if (check) check(f, k, arg);
        out[k] = tok = argmax(f->logits, f->V);
    }
}

static double worst_logit_err;

static void check_logits(const fixture *f, int32_t k, void *arg)
{
    json_t *row = json_array_get((json_t *)arg, (size_t)k);
    double scale = 0;
    for (int v = 0; v < f->V; v++) scale = fmax(scale, fabs(json_real_value(json_array_get(row, (size_t)v))));
    for (int v = 0; v < f->V; v++) {
        const double want = json_real_value(json_array_get(row, (size_t)v));
        const double err = fabs(f->logits[v] - want) / scale;
        if (err > worst_logit_err) worst_logit_err = err;
        if (err > 1e-3) fail_msg("step 0 draft %d token %d: logit %f, transformers %f", k, v, f->logits[v], want);
    }
}

/* ember's drafts of `name` at every step of tiny-mtp.json vs transformers'. */
static void check_drafts(const char *path, const char *name)
{
    json_t *rec = load_rec();
    json_t *dr = json_object_get(json_object_get(rec, "drafts"), name), *steps = json_object_get(dr, "steps");
    assert_true(json_is_array(steps) && json_array_size(steps) > 0);
    const int32_t n_draft = (int32_t)json_integer_value(json_object_get(rec, "n_draft"));
    fixture f;
    fx_open(&f, path, json_object_get(json_array_get(steps, json_array_size(steps) - 1), "tokens"));
    int n_tok = 0, n_same = 0;
    worst_logit_err = 0;
    for (size_t si = 0; si < json_array_size(steps); si++) {
        json_t *sj = json_array_get(steps, si);
        const int32_t L = (int32_t)json_integer_value(json_object_get(sj, "pos"));
        json_t *want = json_object_get(sj, "drafts"), *wl = json_object_get(sj, "logits");
        assert_int_equal((int32_t)json_array_size(json_object_get(sj, "tokens")), L);
        ember_token got[8];
        assert_true(n_draft <= 8);
        fx_draft(&f, L, (ember_token)json_integer_value(json_object_get(sj, "id_last")), n_draft, got,
                 wl ? check_logits : NULL, wl);
        for (int k = 0; k < n_draft; k++) {   /* later drafts chain from a different token after a difference */
            n_tok++;
            if (got[k] != (ember_token)json_integer_value(json_array_get(want, (size_t)k))) break;
            n_same++;
        }
    }
    print_message("%s: %d of %d drafted tokens equal transformers' (chains compared up to a first difference); "
                  "step-0 logits max error %.2g of the row scale\n", name, n_same, n_tok, worst_logit_err);
    assert_int_equal(n_same, n_tok);
    fx_close(&f);
    json_decref(rec);
}

static void test_mtp_drafts_match_transformers(void **st)
{
    (void)st;
    check_drafts(DRAFT, "tiny-mtp-draft");
    check_drafts(DRAFT_CONST, "tiny-mtp-draft-const");
}

/* llama.cpp's own drafts (tiny-mtp.llama-drafts.json, recorded by
 * tests/golden/record_mtp_llama.sh with llama-speculative-simple
 * --spec-type draft-mtp on the same files): at each step, ember's draft for
 * the same committed tokens and id_last equals llama.cpp's in >= 95% of steps. */
static void test_mtp_drafts_match_llama(void **st)
{
    (void)st;
    json_error_t jerr;
    json_t *rec = json_load_file("tests/golden/mtp/tiny-mtp.llama-drafts.json", 0, &jerr);
    assert_non_null(rec);
    const char *names[2] = {"tiny-mtp-draft", "tiny-mtp-draft-const"}, *paths[2] = {DRAFT, DRAFT_CONST};
    for (int di = 0; di < 2; di++) {
        json_t *dr = json_object_get(json_object_get(rec, "drafts"), names[di]);
        json_t *steps = json_object_get(dr, "steps"), *seq = json_object_get(dr, "sequence");
        assert_true(json_is_array(steps) && json_array_size(steps) >= 10 && json_is_array(seq));
        fixture f;
        fx_open(&f, paths[di], seq);
        int n_steps = 0, n_equal = 0, n_distinct = 0;
        ember_token prev[8] = {-1};
        for (size_t si = 0; si < json_array_size(steps); si++) {
            json_t *sj = json_array_get(steps, si), *want = json_object_get(sj, "draft");
            const int32_t L = (int32_t)json_integer_value(json_object_get(sj, "n_past"));
            const int32_t n = (int32_t)json_array_size(want);
            assert_true(n >= 1 && n <= 8);
            ember_token got[8];
            fx_draft(&f, L, (ember_token)json_integer_value(json_array_get(seq, (size_t)L)), n, got, NULL, NULL);
            bool same = true;
            for (int k = 0; k < n; k++) same &= got[k] == (ember_token)json_integer_value(json_array_get(want, (size_t)k));
            n_steps++;
            n_equal += same;
            n_distinct += memcmp(prev, got, sizeof(ember_token) * (size_t)n) != 0;
            memcpy(prev, got, sizeof(ember_token) * (size_t)n);
        }
        print_message("%s: %d of %d steps draft what llama.cpp drafts (the draft changed %d times)\n", names[di],
                      n_equal, n_steps, n_distinct);
        assert_true(n_equal * 100 >= 95 * n_steps);
        fx_close(&f);
    }
    json_decref(rec);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mtp_loads_as_gguf_py_reads),
        cmocka_unit_test(test_mtp_fits_its_target),
        cmocka_unit_test(test_mtp_malformed),
        cmocka_unit_test(test_mtp_forward_bad_args),
        cmocka_unit_test(test_mtp_drafts_match_transformers),
        cmocka_unit_test(test_mtp_drafts_match_llama),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
