/* The runtime API over a real model (SmolLM2-135M, fetched by
 * scripts/fetch-model; skipped when absent):
 * - batch validation errors, and that a rejected batch changes nothing;
 * - several sequences in one batch give the same logits as each alone
 *   (each query attends only to its own sequence's KV);
 * - fork (shared prefix) and truncate (KV rollback) give the same logits as
 *   decoding the same tokens from scratch, and copy-on-write keeps the
 *   source sequence intact when the fork writes into a shared block;
 * - a full KV pool is reported as EMBER_ERR_RANGE;
 * - loading: unknown architecture and missing tensors are named.
 * These check invariants of the API (two paths of the same batch shape
 * must agree bit for bit), not numbers; agreement with llama.cpp is tested by tests/e2e goldens. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <unistd.h>
#include <cmocka.h>

#include "ember.h"
#include "gguf/gguf.h"

static char model_path[1024];
static ember_model *model;

static int setup(void **st)
{
    (void)st;
    const char *dir = getenv("EMBER_MODELS");
    if (dir) snprintf(model_path, sizeof model_path, "%s/SmolLM2-135M-Instruct.Q4_1.gguf", dir);
    else snprintf(model_path, sizeof model_path, "%s/.cache/ember/models/SmolLM2-135M-Instruct.Q4_1.gguf", getenv("HOME") ? getenv("HOME") : ".");
    if (access(model_path, R_OK) != 0) return 0;
    if (ember_model_load(model_path, NULL, &model) != EMBER_OK) { fprintf(stderr, "%s\n", ember_last_error()); return -1; }
    return 0;
}

static int teardown(void **st) { (void)st; ember_model_free(model); return 0; }

static ember_context *new_ctx(uint32_t n_seq, uint32_t n_kv_tokens, ember_kv_type tk)
{
    ember_context_params p = ember_context_default_params();
    p.n_ctx = 256;
    p.n_kv_tokens = n_kv_tokens;
    p.n_seq_max = n_seq;
    p.n_batch = 64;
    p.n_ubatch = 16;
    p.n_threads = 2;
    p.type_k = p.type_v = tk;
    ember_context *c = NULL;
    assert_int_equal(ember_context_new(model, &p, &c), EMBER_OK);
    return c;
}

static void set(ember_batch *b, int i, ember_token t, ember_pos p, ember_seq_id s, int lg)
{
    b->token[i] = t; b->pos[i] = p; b->seq_id[i] = s; b->logits[i] = (int8_t)lg;
}

static const ember_token prompt_a[] = {504, 3575, 282, 4649, 314, 7042, 30, 198, 198, 504, 1797, 1918, 553, 253, 2155, 282, 4723, 216, 35, 33};
static const ember_token prompt_b[] = {761, 253, 1767, 2470, 288, 919, 1495};

/* Same logits up to float summation order: a prefill tile and a single-token
 * mat-vec add the same exact block products in a different order, and the
 * int8 activation rounding downstream can amplify that (llama.cpp's own
 * flash/non-flash paths differ by as much), so this bound is loose. */
static void assert_logits_close(const float *a, const float *b)
{
    const int nv = ember_model_n_vocab(model);
    float mx = 0, md = 0;
    int ia = 0, ib = 0;
    for (int i = 0; i < nv; i++) {
        if (fabsf(b[i]) > mx) mx = fabsf(b[i]);
        if (fabsf(a[i] - b[i]) > md) md = fabsf(a[i] - b[i]);
        if (a[i] > a[ia]) ia = i;
        if (b[i] > b[ib]) ib = i;
    }
    if (md > 0.05f * (1.0f + mx)) fail_msg("logits differ by %g (max |logit| %g)", md, mx);
    assert_int_equal(ia, ib);
}

/* Decode tokens[0..n) into seq s starting at its current length, in one
 * batch; copy the last logits to out. */
static void run_seq(ember_context *c, ember_batch *b, ember_seq_id s, const ember_token *t, int n, float *out)
{
    ember_pos p0 = ember_seq_len(c, s);
    b->n_tokens = n;
    for (int i = 0; i < n; i++) set(b, i, t[i], p0 + i, s, i == n - 1);
    assert_int_equal(ember_decode(c, b), EMBER_OK);
    memcpy(out, ember_get_logits(c, n - 1), sizeof(float) * (size_t)ember_model_n_vocab(model));
}

static void test_batch_validation(void **st)
{
    (void)st;
    if (!model) { skip(); return; }
    ember_context *c = new_ctx(2, 0, EMBER_KV_F16);
    ember_batch b;
    assert_int_equal(ember_batch_init(128, &b), EMBER_OK);
    b.n_tokens = 0;
    assert_int_equal(ember_decode(c, &b), EMBER_ERR_INVALID_ARG);
    b.n_tokens = 65;   /* > n_batch 64 */
    for (int i = 0; i < 65; i++) set(&b, i, 1, i, 0, 0);
    assert_int_equal(ember_decode(c, &b), EMBER_ERR_INVALID_ARG);
    assert_non_null(strstr(ember_last_error(), "n_batch"));
    b.n_tokens = 2;
    set(&b, 0, 1, 0, 0, 0);
    set(&b, 1, ember_model_n_vocab(model), 1, 0, 1);
    assert_int_equal(ember_decode(c, &b), EMBER_ERR_INVALID_ARG);
    assert_non_null(strstr(ember_last_error(), "entry 1: token"));
    set(&b, 1, -1, 1, 0, 1);
    assert_int_equal(ember_decode(c, &b), EMBER_ERR_INVALID_ARG);
    set(&b, 1, 5, 1, 2, 1);   /* seq 2 >= n_seq_max 2 */
    assert_int_equal(ember_decode(c, &b), EMBER_ERR_INVALID_ARG);
    assert_non_null(strstr(ember_last_error(), "seq_id 2"));
    set(&b, 1, 5, 2, 0, 1);   /* gap */
    assert_int_equal(ember_decode(c, &b), EMBER_ERR_INVALID_ARG);
    assert_non_null(strstr(ember_last_error(), "expected 1"));
    set(&b, 0, 1, 1, 0, 0);   /* does not start at the sequence's length 0 */
    set(&b, 1, 5, 2, 0, 1);
    assert_int_equal(ember_decode(c, &b), EMBER_ERR_INVALID_ARG);
    /* nothing was written by the rejected batches */
    assert_int_equal(ember_seq_len(c, 0), 0);
    assert_int_equal(ember_kv_free_tokens(c), 256);
    assert_null(ember_get_logits(c, 0));
    /* a good batch; logits only where asked */
    set(&b, 0, 1, 0, 0, 0);
    set(&b, 1, 5, 1, 0, 1);
    assert_int_equal(ember_decode(c, &b), EMBER_OK);
    assert_null(ember_get_logits(c, 0));
    assert_non_null(ember_get_logits(c, 1));
    assert_ptr_equal(ember_get_logits(c, -1), ember_get_logits(c, 1));
    assert_null(ember_get_logits(c, 2));
    assert_int_equal(ember_seq_len(c, 0), 2);
    /* sequence edits reject bad arguments */
    assert_int_equal(ember_seq_truncate(c, 0, 3), EMBER_ERR_RANGE);
    assert_int_equal(ember_seq_fork(c, 0, 0, 1), EMBER_ERR_INVALID_ARG);
    assert_int_equal(ember_seq_remove(c, 7), EMBER_ERR_INVALID_ARG);
    ember_batch_free(&b);
    ember_context_free(c);
}

static void test_multi_sequence_batch_matches_separate(void **st)
{
    (void)st;
    if (!model) { skip(); return; }
    const int nv = ember_model_n_vocab(model);
    float *ref_a = malloc(sizeof(float) * nv), *ref_b = malloc(sizeof(float) * nv);
    ember_batch b;
    assert_int_equal(ember_batch_init(64, &b), EMBER_OK);
    ember_context *c = new_ctx(3, 0, EMBER_KV_F16);
    run_seq(c, &b, 0, prompt_a, 20, ref_a);
    run_seq(c, &b, 1, prompt_b, 7, ref_b);
    ember_context_free(c);

    /* both prompts interleaved in one batch, spanning two ubatches of 16 */
    c = new_ctx(3, 0, EMBER_KV_F16);
    b.n_tokens = 27;
    int ia = 0, ib = 0, i = 0, last_a = -1, last_b = -1;
    while (ia < 20 || ib < 7) {
        if (ia < 20 && (ia % 3 != 2 || ib >= 7)) { set(&b, i, prompt_a[ia], ia, 2, ia == 19); if (ia == 19) last_a = i; ia++; }
        else { set(&b, i, prompt_b[ib], ib, 0, ib == 6); if (ib == 6) last_b = i; ib++; }
        i++;
    }
    assert_int_equal(ember_decode(c, &b), EMBER_OK);
    assert_memory_equal(ember_get_logits(c, last_a), ref_a, sizeof(float) * nv);
    assert_memory_equal(ember_get_logits(c, last_b), ref_b, sizeof(float) * nv);
    ember_context_free(c);
    ember_batch_free(&b);
    free(ref_a);
    free(ref_b);
}

static void test_fork_and_truncate_match_fresh(void **st)
{
    (void)st;
    if (!model) { skip(); return; }
    const int nv = ember_model_n_vocab(model);
    const size_t bytes = sizeof(float) * (size_t)nv;
    float *ref_a = malloc(bytes), *ref_b = malloc(bytes), *ref_c0 = malloc(bytes), *ref_c1 = malloc(bytes), *got = malloc(bytes);
    ember_batch b;
    assert_int_equal(ember_batch_init(64, &b), EMBER_OK);
    const ember_token t42 = 42;
    /* references, fresh sequences, same batch shapes as below:
     * a[0..13) then 42; a[0..13) then a[13]; and a two-entry batch of both */
    ember_context *c = new_ctx(3, 0, EMBER_KV_Q8_0);
    run_seq(c, &b, 0, prompt_a, 13, got);
    run_seq(c, &b, 0, &t42, 1, ref_a);
    run_seq(c, &b, 1, prompt_a, 13, got);
    run_seq(c, &b, 1, &prompt_a[13], 1, ref_b);
    assert_int_equal(ember_seq_truncate(c, 0, 13), EMBER_OK);
    assert_int_equal(ember_seq_truncate(c, 1, 13), EMBER_OK);
    b.n_tokens = 2;
    set(&b, 0, 42, 13, 0, 1);
    set(&b, 1, prompt_a[13], 13, 1, 1);
    assert_int_equal(ember_decode(c, &b), EMBER_OK);
    memcpy(ref_c0, ember_get_logits(c, 0), bytes);
    memcpy(ref_c1, ember_get_logits(c, 1), bytes);
    assert_int_equal(ember_seq_remove(c, 0), EMBER_OK);
    assert_int_equal(ember_seq_remove(c, 1), EMBER_OK);
    assert_int_equal(ember_kv_free_tokens(c), 256);

    /* shared prefix of 13 (ends inside a 32-token block), then diverge */
    run_seq(c, &b, 0, prompt_a, 20, got);
    assert_int_equal(ember_seq_fork(c, 0, 1, 13), EMBER_OK);
    assert_int_equal(ember_seq_len(c, 1), 13);
    run_seq(c, &b, 1, &t42, 1, got);           /* copy on write of the shared block */
    assert_memory_equal(got, ref_a, bytes);
    /* the source is intact: roll it back to 13 and redo token 13 */
    assert_int_equal(ember_seq_truncate(c, 0, 13), EMBER_OK);
    run_seq(c, &b, 0, &prompt_a[13], 1, got);
    assert_memory_equal(got, ref_b, bytes);
    /* fork into a sequence and decode in the same batch as its source */
    assert_int_equal(ember_seq_truncate(c, 1, 13), EMBER_OK);
    assert_int_equal(ember_seq_truncate(c, 0, 13), EMBER_OK);
    assert_int_equal(ember_seq_fork(c, 1, 2, 13), EMBER_OK);
    b.n_tokens = 2;
    set(&b, 0, 42, 13, 2, 1);
    set(&b, 1, prompt_a[13], 13, 0, 1);
    assert_int_equal(ember_decode(c, &b), EMBER_OK);
    assert_memory_equal(ember_get_logits(c, 0), ref_c0, bytes);
    assert_memory_equal(ember_get_logits(c, 1), ref_c1, bytes);
    /* the two-entry batch agrees with the one-entry decodes up to rounding */
    assert_logits_close(ref_c0, ref_a);
    assert_logits_close(ref_c1, ref_b);
    ember_context_free(c);
    ember_batch_free(&b);
    free(ref_a); free(ref_b); free(ref_c0); free(ref_c1); free(got);
}

static void test_pool_full(void **st)
{
    (void)st;
    if (!model) { skip(); return; }
    ember_context *c = new_ctx(2, 64, EMBER_KV_F16);   /* 2 blocks of 32 */
    ember_batch b;
    assert_int_equal(ember_batch_init(64, &b), EMBER_OK);
    b.n_tokens = 40;
    for (int i = 0; i < 40; i++) set(&b, i, prompt_a[i % 20], i, 0, i == 39);
    assert_int_equal(ember_decode(c, &b), EMBER_OK);
    assert_int_equal(ember_kv_free_tokens(c), 0);
    b.n_tokens = 1;
    set(&b, 0, 5, 0, 1, 1);
    assert_int_equal(ember_decode(c, &b), EMBER_ERR_RANGE);
    assert_non_null(strstr(ember_last_error(), "pool full"));
    assert_int_equal(ember_seq_len(c, 1), 0);
    /* a sequence past n_ctx is a range error too */
    ember_context_free(c);
    ember_batch_free(&b);
}

static void test_load_errors(void **st)
{
    (void)st;
    char path[] = "/tmp/ember_test_rt_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    ember_gguf_writer *w;
    ember_model *m = NULL;
    assert_int_equal(ember_gguf_writer_new(0, &w), EMBER_OK);
    ember_gguf_writer_set_str(w, "general.architecture", "mamba9");
    assert_int_equal(ember_gguf_writer_write_file(w, path), EMBER_OK);
    ember_gguf_writer_free(w);
    assert_int_equal(ember_model_load(path, NULL, &m), EMBER_ERR_UNSUPPORTED);
    assert_non_null(strstr(ember_last_error(), "mamba9"));
    assert_null(m);

    assert_int_equal(ember_gguf_writer_new(0, &w), EMBER_OK);
    ember_gguf_writer_set_str(w, "general.architecture", "llama");
    ember_gguf_writer_set_u32(w, "llama.context_length", 128);
    ember_gguf_writer_set_u32(w, "llama.embedding_length", 64);
    ember_gguf_writer_set_u32(w, "llama.block_count", 1);
    ember_gguf_writer_set_u32(w, "llama.feed_forward_length", 128);
    ember_gguf_writer_set_u32(w, "llama.attention.head_count", 2);
    assert_int_equal(ember_gguf_writer_write_file(w, path), EMBER_OK);
    assert_int_equal(ember_model_load(path, NULL, &m), EMBER_ERR_NOT_FOUND);
    assert_non_null(strstr(ember_last_error(), "llama.attention.layer_norm_rms_epsilon"));
    ember_gguf_writer_set_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    static float emb[64 * 10], norm[64];
    const int64_t ne_e[2] = {64, 10}, ne_n[1] = {64};
    ember_gguf_writer_add_tensor(w, "token_embd.weight", 0, 2, ne_e, emb);
    ember_gguf_writer_add_tensor(w, "output_norm.weight", 0, 1, ne_n, norm);
    ember_gguf_writer_add_tensor(w, "blk.0.attn_norm.weight", 0, 1, ne_n, norm);
    assert_int_equal(ember_gguf_writer_write_file(w, path), EMBER_OK);
    ember_gguf_writer_free(w);
    assert_int_equal(ember_model_load(path, NULL, &m), EMBER_ERR_NOT_FOUND);
    assert_non_null(strstr(ember_last_error(), "blk.0.attn_q.weight"));
    assert_null(m);
    unlink(path);
}

/* The backend seam through the public API: a bad environment switch fails
 * the context and names the variable; on the CPU (-ngl 0) the warm-up runs
 * nothing (all memory is placed up front) and there is no device memory to
 * print; every KV type is accepted. */
/* Embeddings (ember_batch.embd): rows for exactly the entries that asked,
 * across micro-batches (20 entries, n_ubatch 16), next to logits; asking
 * for them changes no logit (the same batch shape, bit for bit); the rows
 * are the output norm's, so each is an RMS-normalized vector times the
 * norm's weights: never all zero, finite. Values against llama.cpp:
 * tests/e2e/test_embeddings.py. */
static void test_embeddings_rows(void **st)
{
    (void)st;
    if (!model) { skip(); return; }
    const int nv = ember_model_n_vocab(model), ne = ember_model_n_embd(model), n = 20;
    assert_true(ember_model_pooling_type(model) == EMBER_POOLING_NONE);   /* the GGUF has no llama.pooling_type */
    ember_context *c = new_ctx(2, 256, EMBER_KV_F16);
    assert_true(ember_context_embeddings_supported(c));
    ember_batch b;
    assert_int_equal(ember_batch_init(64, &b), EMBER_OK);
    float *want = malloc(sizeof(float) * (size_t)nv);
    run_seq(c, &b, 0, prompt_a, n, want);   /* logits alone */
    assert_null(ember_get_embeddings_ith(c, n - 1));
    assert_int_equal(ember_seq_remove(c, 0), EMBER_OK);
    b.n_tokens = n;
    for (int i = 0; i < n; i++) {
        set(&b, i, prompt_a[i], i, 0, i == n - 1);
        b.embd[i] = (int8_t)(i % 3 != 1);
    }
    assert_int_equal(ember_decode(c, &b), EMBER_OK);
    assert_memory_equal(ember_get_logits(c, n - 1), want, sizeof(float) * (size_t)nv);
    for (int i = 0; i < n; i++) {
        const float *e = ember_get_embeddings_ith(c, i);
        if (i % 3 == 1) { assert_null(e); continue; }
        assert_non_null(e);
        double ss = 0;
        for (int j = 0; j < ne; j++) { assert_true(isfinite(e[j])); ss += (double)e[j] * e[j]; }
        assert_true(ss > 0);
    }
    assert_null(ember_get_embeddings_ith(c, n));
    assert_null(ember_get_embeddings_ith(c, -1));
    free(want);
    ember_batch_free(&b);
    ember_context_free(c);
}

static void test_context_backend_seam(void **st)
{
    (void)st;
    if (!model) { skip(); return; }
    ember_context_params p = ember_context_default_params();
    p.n_ctx = 64;
    p.n_batch = 16;
    p.n_threads = 2;
    ember_context *c = NULL;
    setenv("EMBER_NO_GEMM", "sometimes", 1);
    assert_int_equal(ember_context_new(model, &p, &c), EMBER_ERR_INVALID_ARG);
    assert_null(c);
    assert_non_null(strstr(ember_last_error(), "EMBER_NO_GEMM=sometimes"));
    unsetenv("EMBER_NO_GEMM");
    ember_model_params mp = ember_model_default_params();
    assert_int_equal(mp.n_gpu_layers, 0);   /* the loaded model runs on the CPU */
    const ember_kv_type kinds[3] = {EMBER_KV_F16, EMBER_KV_Q8_0, EMBER_KV_F32};
    for (int i = 0; i < 3; i++) {
        p.type_k = p.type_v = kinds[i];
        assert_int_equal(ember_context_new(model, &p, &c), EMBER_OK);
        bool ran = true;
        assert_int_equal(ember_context_warmup(c, &ran), EMBER_OK);
        assert_false(ran);
        assert_int_equal(ember_seq_len(c, 0), 0);
        FILE *f = tmpfile();
        assert_non_null(f);
        ember_context_print_memory(c, f);
        assert_int_equal(ftell(f), 0);
        fclose(f);
        ember_context_free(c);
        c = NULL;
    }
}

/* The pipeline's runtime calls (include/ember.h ember_get_logits_top_start
 * / _finish, ember_decode_fed). On the CPU nothing is queued and a fed
 * decode is refused. With EMBER_TEST_GPU_GGUF (a gemma3/llama/qwen3 file;
 * bench/gpu runs it with the regrown Gemma 3 270M) on a GPU build: 24
 * greedy tokens fed from the device's argmax equal those fed from the host
 * (the plain ember_decode + ember_get_logits_top of the same context). */
static void greedy_run(ember_context *c, bool fed, ember_token first, int n, ember_token *out)
{
    ember_batch b;
    assert_int_equal(ember_batch_init(1, &b), EMBER_OK);
    assert_int_equal(ember_seq_remove(c, 0), EMBER_OK);
    const int32_t row0 = 0, top_row = 0;
    ember_logits_top head;
    b.n_tokens = 1;
    set(&b, 0, first, 0, 0, 1);
    assert_int_equal(ember_decode(c, &b), EMBER_OK);
    for (int i = 0; i < n; i++) {
        if (fed && i + 1 < n) {
            bool queued = false;
            assert_int_equal(ember_get_logits_top_start(c, 1, &row0, 1, &queued), EMBER_OK);
            assert_true(queued);
            set(&b, 0, -5, i + 1, 0, 1);   /* the placeholder is never read */
            assert_int_equal(ember_decode_fed(c, &b, &top_row), EMBER_OK);
            assert_int_equal(ember_get_logits_top_finish(c, &head), EMBER_OK);
        } else {
            assert_int_equal(ember_get_logits_top(c, 1, &row0, 1, &head), EMBER_OK);
            if (i + 1 < n) {
                set(&b, 0, head.id[0], i + 1, 0, 1);
                assert_int_equal(ember_decode(c, &b), EMBER_OK);
            }
        }
        out[i] = head.id[0];
    }
    ember_batch_free(&b);
}

/* Two sequences in one batch, their heads listed in the other order (row
 * 0 is entry 1's), sequence 0 fed from its head, sequence 1 given host
 * tokens (top_row -1): out[s][i] the argmax of sequence s at step i. */
static void two_seq_run(ember_context *c, bool fed, int n, ember_token out[2][16])
{
    ember_batch b;
    assert_int_equal(ember_batch_init(2, &b), EMBER_OK);
    assert_int_equal(ember_seq_remove(c, 0), EMBER_OK);
    assert_int_equal(ember_seq_remove(c, 1), EMBER_OK);
    b.n_tokens = 2;
    set(&b, 0, 2, 0, 0, 1);
    set(&b, 1, 3, 0, 1, 1);
    assert_int_equal(ember_decode(c, &b), EMBER_OK);
    const int32_t rows[2] = {1, 0}, top_row[2] = {1, -1};
    ember_logits_top heads[2];
    for (int i = 0; i < n; i++) {
        const bool more = i + 1 < n;
        if (fed && more) {
            bool queued = false;
            assert_int_equal(ember_get_logits_top_start(c, 2, rows, 1, &queued), EMBER_OK);
            assert_true(queued);
            set(&b, 0, -1, i + 1, 0, 1);
            set(&b, 1, 5 + i, i + 1, 1, 1);
            assert_int_equal(ember_decode_fed(c, &b, top_row), EMBER_OK);
            assert_int_equal(ember_get_logits_top_finish(c, heads), EMBER_OK);
        } else {
            assert_int_equal(ember_get_logits_top(c, 2, rows, 1, heads), EMBER_OK);
            if (more) {
                set(&b, 0, heads[1].id[0], i + 1, 0, 1);
                set(&b, 1, 5 + i, i + 1, 1, 1);
                assert_int_equal(ember_decode(c, &b), EMBER_OK);
            }
        }
        out[0][i] = heads[1].id[0];
        out[1][i] = heads[0].id[0];
    }
    ember_batch_free(&b);
}

static void test_token_feedback(void **st)
{
    (void)st;
    if (model) {   /* the CPU backend */
        ember_context *c = new_ctx(1, 256, EMBER_KV_F16);
        assert_false(ember_context_token_feedback(c));
        ember_batch b;
        assert_int_equal(ember_batch_init(1, &b), EMBER_OK);
        b.n_tokens = 1;
        set(&b, 0, prompt_b[0], 0, 0, 1);
        assert_true(ember_decode_device_seconds(c) < 0);   /* no decode yet */
        assert_int_equal(ember_decode(c, &b), EMBER_OK);
        assert_true(ember_decode_device_seconds(c) < 0);   /* the CPU has no device clock */
        const int32_t row0 = 0, top_row = 0;
        bool queued = true;
        assert_int_equal(ember_get_logits_top_start(c, 1, &row0, 1, &queued), EMBER_OK);
        assert_false(queued);
        ember_logits_top head;
        assert_int_equal(ember_get_logits_top_finish(c, &head), EMBER_ERR_INVALID_ARG);
        set(&b, 0, 0, 1, 0, 1);
        assert_int_equal(ember_decode_fed(c, &b, &top_row), EMBER_ERR_UNSUPPORTED);
        assert_int_equal(ember_get_logits_top_start(c, 1, &row0, 0, &queued), EMBER_ERR_INVALID_ARG);
        ember_batch_free(&b);
        ember_context_free(c);
    }
    const char *gpu = getenv("EMBER_TEST_GPU_GGUF");
    if (!gpu || !*gpu) {
        if (!model) skip();
        return;
    }
    ember_model_params mp = ember_model_default_params();
    mp.n_gpu_layers = 99;
    ember_model *gm = NULL;
    assert_int_equal(ember_model_load(gpu, &mp, &gm), EMBER_OK);
    ember_context_params p = ember_context_default_params();
    p.n_ctx = 256;
    p.n_batch = 64;
    p.n_seq_max = 2;
    ember_context *c = NULL;
    assert_int_equal(ember_context_new(gm, &p, &c), EMBER_OK);
    if (!ember_context_token_feedback(c)) {
        print_message("%s: no token feedback here (CPU build or no GPU)\n", gpu);
        ember_context_free(c);
        ember_model_free(gm);
        skip();
        return;
    }
    ember_token host_fed[24], dev_fed[24];
    greedy_run(c, false, 2, 24, host_fed);
    /* the last decode on the device's clock (CUDA events): a step of a small model, well under a second */
    const double dev_s = ember_decode_device_seconds(c);
    if (!(dev_s > 0 && dev_s < 1.0)) fail_msg("ember_decode_device_seconds %g, want (0, 1) s", dev_s);
    greedy_run(c, true, 2, 24, dev_fed);
    for (int i = 0; i < 24; i++)
        if (host_fed[i] != dev_fed[i]) fail_msg("token %d: %d fed from the device, %d from the host", i, dev_fed[i], host_fed[i]);
    ember_token two_host[2][16], two_dev[2][16];
    two_seq_run(c, false, 12, two_host);
    two_seq_run(c, true, 12, two_dev);
    for (int q = 0; q < 2; q++)
        for (int i = 0; i < 12; i++)
            if (two_host[q][i] != two_dev[q][i])
                fail_msg("sequence %d token %d: %d with feedback, %d without", q, i, two_dev[q][i], two_host[q][i]);
    /* a fed decode needs queued heads; a start needs the last one finished */
    ember_batch b;
    assert_int_equal(ember_batch_init(1, &b), EMBER_OK);
    const int32_t row0 = 0, bad_row = 1;
    b.n_tokens = 1;
    set(&b, 0, 0, 24, 0, 1);
    assert_int_equal(ember_decode_fed(c, &b, &row0), EMBER_ERR_INVALID_ARG);
    bool queued = false;
    assert_int_equal(ember_get_logits_top_start(c, 1, &row0, 1, &queued), EMBER_OK);
    assert_true(queued);
    assert_int_equal(ember_get_logits_top_start(c, 1, &row0, 1, &queued), EMBER_ERR_INVALID_ARG);
    assert_int_equal(ember_decode_fed(c, &b, &bad_row), EMBER_ERR_INVALID_ARG);
    ember_logits_top head;
    assert_int_equal(ember_get_logits_top(c, 1, &row0, 1, &head), EMBER_ERR_INVALID_ARG);   /* queued heads first */
    assert_int_equal(ember_get_logits_top_finish(c, &head), EMBER_OK);
    assert_int_equal(ember_get_logits_top(c, 1, &row0, 1, &head), EMBER_OK);
    ember_batch_free(&b);
    ember_context_free(c);
    ember_model_free(gm);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batch_validation),
        cmocka_unit_test(test_multi_sequence_batch_matches_separate),
        cmocka_unit_test(test_fork_and_truncate_match_fresh),
        cmocka_unit_test(test_pool_full),
        cmocka_unit_test(test_load_errors),
        cmocka_unit_test(test_embeddings_rows),
        cmocka_unit_test(test_context_backend_seam),
        cmocka_unit_test(test_token_feedback),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
