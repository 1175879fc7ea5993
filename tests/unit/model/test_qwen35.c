/* qwen35 (Qwen3.5: Gated DeltaNet linear attention + gated full attention)
 * against Hugging Face transformers on a tiny random model
 * (tests/golden/qwen35/tiny-qwen35.gguf, made by
 * tests/golden/make_tiny_models.py and converted by llama.cpp's
 * convert_hf_to_gguf.py): 5 layers (recurrent, recurrent, full, recurrent,
 * full), 2 key / 4 value heads in the linear layers (the converter's tiled
 * V-head order), conv kernel 4, partial RoPE (4 of 16 dims), untied output,
 * and a multi-token-prediction block after the trunk as published Qwen3.5
 * files carry (block_count 6, nextn_predict_layers 1): it must not run.
 *
 * The oracle's logits come from transformers' whole-sequence forward, which
 * for the 320-token sequence runs its chunked delta rule (chunks of 64); the
 * generator checked that against transformers' own token-by-token recurrent
 * form (max |diff| 7.6e-5 of max |logit| 7.6) before writing. ember must meet
 * it within TOL_REL (1e-3 of the logit scale) at every position:
 * - short sequences (1, 7, 16 tokens), whole and token by token (tiny_oracle.h);
 * - the long sequence whole in one batch (ubatches of 64: states carried
 *   across micro-batches), in chunks of 5, and token by token;
 * - two sequences interleaved entry by entry in the same batches (each entry
 *   updates its own sequence's state);
 * - sequence edits: a fork at the full length continues exactly as the
 *   original; truncate / fork to a middle position is refused without a
 *   checkpoint (EMBER_ERR_RANGE, nothing changed: the state cannot be cut
 *   back); remove, or truncate to 0, restarts from a zero state; with a
 *   checkpoint, truncate / fork after it roll back and recompute.
 * The MoE variant (tiny-qwen35moe) is checked the same way on its short and
 * long sequences.
 *
 * CUDA builds with a GPU run the short sequences on the GPU too
 * (tiny_oracle.h), and the *_gpu tests repeat the long sequence, the
 * interleaved sequences, the sequence edits and both kinds of checkpoint on
 * the GPU (n_gpu_layers -1: the CUDA backend's recurrent ops and its state
 * memory, token-by-token steps captured as CUDA graphs) with an F16 KV
 * cache and TOL_REL_GPU; without a GPU they skip. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "tiny_oracle.h"

#define GGUF "tests/golden/qwen35/tiny-qwen35.gguf"
#define LONG_JSON "tests/golden/qwen35/tiny-qwen35.long.logits.json"

#define MOE_GGUF "tests/golden/qwen35/tiny-qwen35moe.gguf"
#define MOE_LONG_JSON "tests/golden/qwen35/tiny-qwen35moe.long.logits.json"

/* the *_gpu tests: models and contexts on the GPU, F16 KV, TOL_REL_GPU */
static bool use_gpu;

static ember_model *load_file(const char *path, const char *arch)
{
    ember_model *m = NULL;
    ember_model_params mp = ember_model_default_params();
    mp.n_gpu_layers = use_gpu ? -1 : 0;
    if (ember_model_load(path, &mp, &m) != EMBER_OK) fail_msg("%s", ember_last_error());
    assert_string_equal(ember_model_arch(m), arch);
    return m;
}

static ember_model *load(void) { return load_file(GGUF, "qwen35"); }

static ember_context *new_ctx(ember_model *m, uint32_t n_seq, uint32_t n_ubatch)
{
    ember_context_params p = ember_context_default_params();
    p.n_ctx = 512;
    p.n_batch = 512;
    p.n_ubatch = n_ubatch;
    p.n_seq_max = n_seq;
    p.n_threads = 2;
    p.type_k = p.type_v = use_gpu ? EMBER_KV_F16 : EMBER_KV_F32;
    ember_context *c = NULL;
    if (ember_context_new(m, &p, &c) != EMBER_OK) fail_msg("%s", ember_last_error());
    return c;
}

static ember_token tok(json_t *ids, int32_t i) { return (ember_token)json_integer_value(json_array_get(ids, (size_t)i)); }

/* Decode positions [i0, i1) of the oracle sequence into seq in chunks of
 * `chunk`, comparing every position; accumulates into *max_diff / *max_ref. */
static void decode_range(ember_context *c, ember_batch *b, const oracle *o, int32_t seq, int32_t i0, int32_t i1,
                         int32_t chunk, double *max_diff, double *max_ref)
{
    json_t *ids = json_array_get(o->seqs, 0), *ref = json_array_get(o->logits, 0);
    for (int32_t p0 = i0; p0 < i1; p0 += chunk) {
        const int32_t k = i1 - p0 < chunk ? i1 - p0 : chunk;
        b->n_tokens = k;
        for (int32_t i = 0; i < k; i++) {
            b->token[i] = tok(ids, p0 + i);
            b->pos[i] = p0 + i;
            b->seq_id[i] = seq;
            b->logits[i] = 1;
        }
        if (ember_decode(c, b) != EMBER_OK) fail_msg("%s", ember_last_error());
        for (int32_t i = 0; i < k; i++) {
            const float *lg = ember_get_logits(c, i);
            assert_non_null(lg);
            cmp_row(lg, json_array_get(ref, (size_t)(p0 + i)), o->n_vocab, max_diff, max_ref);
        }
    }
}

static void check(const char *what, double max_diff, double max_ref)
{
    const double tol = use_gpu ? TOL_REL_GPU : TOL_REL;
    printf("# %s%s: max|diff| %.3g, max|logit| %.3g, rel %.3g\n", what, use_gpu ? " [GPU]" : "", max_diff, max_ref,
           max_diff / max_ref);
    assert_true(max_ref > 0.5);
    if (!(max_diff <= tol * max_ref))
        fail_msg("%s%s: max|diff| %g > %g * max|logit| %g", what, use_gpu ? " [GPU]" : "", max_diff, tol, max_ref);
}

static void test_qwen35_short_matches_transformers(void **st)
{
    (void)st;
    run_oracle(GGUF, "tests/golden/qwen35/tiny-qwen35.logits.json", "qwen35");
}

/* The 320-token sequence: whole (ubatches of 64 and of 512), chunks of 5,
 * token by token. */
static void run_long(const char *gguf, const char *json, const char *arch)
{
    ember_model *m = load_file(gguf, arch);
    oracle o;
    oracle_load(json, &o);
    const int32_t n = (int32_t)json_array_size(json_array_get(o.seqs, 0));
    assert_true(n >= 300 && n <= 512);
    const struct { uint32_t ubatch; int32_t chunk; } modes[4] = {{512, n}, {64, n}, {16, 5}, {1, 1}};
    for (int k = 0; k < 4; k++) {
        ember_context *c = new_ctx(m, 1, modes[k].ubatch);
        ember_batch b;
        assert_int_equal(ember_batch_init(512, &b), EMBER_OK);
        double max_diff = 0.0, max_ref = 0.0;
        decode_range(c, &b, &o, 0, 0, n, modes[k].chunk, &max_diff, &max_ref);
        char what[128];
        snprintf(what, sizeof what, "%s long n=%d, chunks of %d, n_ubatch %u", arch, n, modes[k].chunk, modes[k].ubatch);
        check(what, max_diff, max_ref);
        ember_batch_free(&b);
        ember_context_free(c);
    }
    json_decref(o.root);
    ember_model_free(m);
}

static void test_qwen35_long_matches_transformers(void **st)
{
    (void)st;
    run_long(GGUF, LONG_JSON, "qwen35");
}

/* The second oracle: llama.cpp's own forward over the same files
 * (tests/golden/qwen35/make_llamacpp_logits.py; F32 KV cache, ubatches of
 * 64). It sits 1.0e-3 / 1.3e-3 (absolute) from transformers itself, so this
 * checks the reading of the GGUF (names, layouts, MTP block, V-head order)
 * rather than the last digits. */
static void test_qwen35_long_matches_llama_cpp(void **st)
{
    (void)st;
    run_long(GGUF, "tests/golden/qwen35/tiny-qwen35.llamacpp.long.logits.json", "qwen35");
    run_long(MOE_GGUF, "tests/golden/qwen35/tiny-qwen35moe.llamacpp.long.logits.json", "qwen35moe");
}

/* tiny-qwen35 quantized to Q8_0 by llama.cpp's own quantizer (every matrix
 * but ssm_conv1d), against llama.cpp's logits for that file: the quantized
 * linear-attention projections (attn_qkv, attn_gate, ssm_alpha, ssm_beta,
 * ssm_out) bind and multiply as llama.cpp's do. Position 0 has no mixing
 * across tokens, so both compute the same sums: within TOL_REL. Later
 * positions add the attention and delta-rule sums, which ember and llama.cpp
 * compute in different float orders (and llama.cpp's attention rounds through
 * f16, which costs it 1e-3 against transformers even with F32 weights); with
 * activations rounded to Q8_0 before each matmul, a last-bit difference can
 * move a value across a rounding boundary (one step is 1/127 of its block's
 * maximum), so they differ by a few quantization steps: measured 0.21 of max
 * |logit| 7.64 (2.8%); ember's own scalar and AVX2 kernels (which only sum in
 * another order) move it by as much, while Q8_0 itself moves llama.cpp's
 * logits by 1.94 from the F32 model's. Bound: 5%. */
static void test_qwen35_q8_0_matches_llama_cpp(void **st)
{
    (void)st;
    ember_model *m = load_file("tests/golden/qwen35/tiny-qwen35-q8_0.gguf", "qwen35");
    oracle o;
    oracle_load("tests/golden/qwen35/tiny-qwen35-q8_0.llamacpp.long.logits.json", &o);
    const int32_t n = (int32_t)json_array_size(json_array_get(o.seqs, 0));
    for (int k = 0; k < 2; k++) {
        ember_context *c = new_ctx(m, 1, k == 0 ? 512 : 1);
        ember_batch b;
        assert_int_equal(ember_batch_init(512, &b), EMBER_OK);
        double d0 = 0.0, r0 = 0.0, max_diff = 0.0, max_ref = 0.0;
        decode_range(c, &b, &o, 0, 0, 1, 1, &d0, &r0);
        assert_int_equal(ember_seq_remove(c, 0), EMBER_OK);
        decode_range(c, &b, &o, 0, 0, n, k == 0 ? n : 1, &max_diff, &max_ref);
        printf("# q8_0 (n_ubatch %d): position 0 max|diff| %.3g (max|logit| %.3g); all %d positions max|diff| %.3g, rel %.3g\n",
               k == 0 ? 512 : 1, d0, r0, n, max_diff, max_diff / max_ref);
        assert_true(d0 <= TOL_REL * r0);
        assert_true(max_ref > 0.5 && max_diff <= 0.05 * max_ref);
        ember_batch_free(&b);
        ember_context_free(c);
    }
    json_decref(o.root);
    ember_model_free(m);
}

/* qwen35moe (35B-A3B-like): 4 layers (recurrent, full, recurrent, full),
 * every MLP a mixture of 6 experts (top 2, renormalized softmax router) plus
 * a shared expert behind a sigmoid gate; the converter writes separate
 * gate / up expert tensors and no feed_forward_length. */
static void test_qwen35moe_matches_transformers(void **st)
{
    (void)st;
    run_oracle(MOE_GGUF, "tests/golden/qwen35/tiny-qwen35moe.logits.json", "qwen35moe");
    run_long(MOE_GGUF, MOE_LONG_JSON, "qwen35moe");
}

/* Sequences 0 and 1 decode the same oracle sequence with an offset of 37
 * positions, entry by entry interleaved in each batch (ubatches of 7, so the
 * interleaving crosses micro-batches). */
static void test_qwen35_interleaved_sequences(void **st)
{
    (void)st;
    ember_model *m = load();
    oracle o;
    oracle_load(LONG_JSON, &o);
    json_t *ids = json_array_get(o.seqs, 0), *ref = json_array_get(o.logits, 0);
    const int32_t n = 160, lag = 37;
    ember_context *c = new_ctx(m, 2, 7);
    ember_batch b;
    assert_int_equal(ember_batch_init(64, &b), EMBER_OK);
    double max_diff = 0.0, max_ref = 0.0;
    int32_t next[2] = {0, 0};
    while (next[1] < n - lag) {
        b.n_tokens = 0;
        for (int32_t r = 0; r < 6; r++)
            for (int32_t s = 0; s < 2; s++) {
                const int32_t lim = s == 0 ? n : n - lag;
                if (s == 1 && next[0] < lag) continue;   /* seq 1 starts once seq 0 is `lag` ahead */
                if (next[s] >= lim) continue;
                const int32_t i = b.n_tokens++;
                b.token[i] = tok(ids, next[s]);
                b.pos[i] = next[s]++;
                b.seq_id[i] = s;
                b.logits[i] = 1;
            }
        if (ember_decode(c, &b) != EMBER_OK) fail_msg("%s", ember_last_error());
        for (int32_t i = 0; i < b.n_tokens; i++)
            cmp_row(ember_get_logits(c, i), json_array_get(ref, (size_t)b.pos[i]), o.n_vocab, &max_diff, &max_ref);
    }
    check("two interleaved sequences", max_diff, max_ref);
    ember_batch_free(&b);
    ember_context_free(c);
    json_decref(o.root);
    ember_model_free(m);
}

static void test_qwen35_sequence_edits(void **st)
{
    (void)st;
    ember_model *m = load();
    oracle o;
    oracle_load(LONG_JSON, &o);
    ember_context *c = new_ctx(m, 2, 16);
    ember_batch b;
    assert_int_equal(ember_batch_init(512, &b), EMBER_OK);
    double max_diff = 0.0, max_ref = 0.0;

    decode_range(c, &b, &o, 0, 0, 50, 50, &max_diff, &max_ref);
    /* the state cannot be cut back or shared from a middle position */
    assert_int_equal(ember_seq_truncate(c, 0, 20), EMBER_ERR_RANGE);
    assert_int_equal(ember_seq_fork(c, 0, 1, 20), EMBER_ERR_RANGE);
    assert_int_equal(ember_seq_len(c, 0), 50);
    assert_int_equal(ember_seq_len(c, 1), 0);
    /* a fork at the full length continues as the original would */
    assert_int_equal(ember_seq_fork(c, 0, 1, 50), EMBER_OK);
    decode_range(c, &b, &o, 1, 50, 90, 8, &max_diff, &max_ref);
    decode_range(c, &b, &o, 0, 50, 70, 1, &max_diff, &max_ref);   /* the source is unchanged by the fork's steps */
    /* remove / truncate to 0: the next decode starts from a zero state */
    assert_int_equal(ember_seq_remove(c, 1), EMBER_OK);
    decode_range(c, &b, &o, 1, 0, 40, 40, &max_diff, &max_ref);
    assert_int_equal(ember_seq_truncate(c, 0, 0), EMBER_OK);
    decode_range(c, &b, &o, 0, 0, 30, 30, &max_diff, &max_ref);
    check("fork / remove / truncate", max_diff, max_ref);

    ember_batch_free(&b);
    ember_context_free(c);
    json_decref(o.root);
    ember_model_free(m);
}

/* Rollback through a checkpoint (ember_seq_checkpoint): a speculative-style
 * step decodes past the checkpoint, then the sequence is cut back to a
 * position after it (the context restores the state and decodes the tokens
 * in between again) and continues; a fork at a position after the
 * checkpoint does the same on the new sequence. Below the checkpoint the
 * edit is still refused. */
static void test_qwen35_checkpoint_rollback(void **st)
{
    (void)st;
    ember_model *m = load();
    oracle o;
    oracle_load(LONG_JSON, &o);
    ember_context *c = new_ctx(m, 2, 16);
    ember_batch b;
    assert_int_equal(ember_batch_init(512, &b), EMBER_OK);
    double max_diff = 0.0, max_ref = 0.0;
    const uint64_t kv0 = ember_context_kv_bytes(c);

    decode_range(c, &b, &o, 0, 0, 50, 50, &max_diff, &max_ref);
    assert_int_equal(ember_seq_checkpoint(c, 0), EMBER_OK);
    assert_true(ember_context_kv_bytes(c) > kv0);   /* the checkpoint states, allocated now */
    decode_range(c, &b, &o, 0, 50, 70, 5, &max_diff, &max_ref);
    assert_int_equal(ember_seq_truncate(c, 0, 60), EMBER_OK);   /* restore at 50, decode 50..59 again */
    assert_int_equal(ember_seq_len(c, 0), 60);
    decode_range(c, &b, &o, 0, 60, 90, 1, &max_diff, &max_ref);
    assert_int_equal(ember_seq_truncate(c, 0, 40), EMBER_ERR_RANGE);   /* below the checkpoint */
    assert_int_equal(ember_seq_len(c, 0), 90);
    assert_int_equal(ember_seq_fork(c, 0, 1, 75), EMBER_OK);   /* KV fork at 50, state from it, 50..74 again */
    assert_int_equal(ember_seq_len(c, 1), 75);
    decode_range(c, &b, &o, 1, 75, 110, 7, &max_diff, &max_ref);
    decode_range(c, &b, &o, 0, 90, 100, 3, &max_diff, &max_ref);
    /* a new checkpoint replaces the old one; cutting below it drops it */
    assert_int_equal(ember_seq_checkpoint(c, 0), EMBER_OK);
    assert_int_equal(ember_seq_truncate(c, 0, 95), EMBER_ERR_RANGE);
    assert_int_equal(ember_seq_checkpoint(c, 7), EMBER_ERR_INVALID_ARG);
    check("checkpoint rollback and fork", max_diff, max_ref);

    ember_batch_free(&b);
    ember_context_free(c);
    json_decref(o.root);
    ember_model_free(m);
}

/* Block checkpoints (ember_seq_ctx_checkpoint, the prefix cache's): taken at
 * 32, 64 and 96, a truncate or fork to any later position restores the
 * latest one at or before it and recomputes only the tokens in between; the
 * logits that follow match transformers'. Below the first the edit is still
 * refused. With 2 checkpoints a sequence keeps its oldest and its newest. */
static void test_qwen35_block_checkpoints(void **st)
{
    (void)st;
    ember_model *m = load();
    oracle o;
    oracle_load(LONG_JSON, &o);
    ember_context *c = new_ctx(m, 3, 16);
    assert_true(ember_context_wants_checkpoints(c));
    const uint64_t kv_before = ember_context_kv_bytes(c), snap_max = ember_context_checkpoint_bytes_max(c);
    assert_true(snap_max > 0);
    ember_batch b;
    assert_int_equal(ember_batch_init(512, &b), EMBER_OK);
    double max_diff = 0.0, max_ref = 0.0;

    for (int32_t p0 = 0; p0 < 96; p0 += 32) {
        decode_range(c, &b, &o, 0, p0, p0 + 32, 16, &max_diff, &max_ref);
        assert_int_equal(ember_seq_ctx_checkpoint(c, 0), EMBER_OK);
    }
    decode_range(c, &b, &o, 0, 96, 120, 24, &max_diff, &max_ref);
    assert_int_equal(ember_seq_truncate(c, 0, 70), EMBER_OK);   /* from 64: 64..69 again */
    assert_int_equal(ember_seq_len(c, 0), 70);
    decode_range(c, &b, &o, 0, 70, 100, 10, &max_diff, &max_ref);
    assert_int_equal(ember_seq_fork(c, 0, 1, 40), EMBER_OK);   /* from 32: 32..39 again */
    decode_range(c, &b, &o, 1, 40, 60, 5, &max_diff, &max_ref);
    /* the fork took seq 0's checkpoints up to 40: seq 1 can go back to 32 */
    assert_int_equal(ember_seq_truncate(c, 1, 35), EMBER_OK);
    decode_range(c, &b, &o, 1, 35, 50, 15, &max_diff, &max_ref);
    /* a fork exactly at a checkpoint short of the source's length (64 < 100) */
    assert_int_equal(ember_seq_fork(c, 0, 2, 64), EMBER_OK);
    decode_range(c, &b, &o, 2, 64, 80, 16, &max_diff, &max_ref);
    assert_int_equal(ember_seq_truncate(c, 0, 20), EMBER_ERR_RANGE);   /* before the first checkpoint */
    check("block checkpoints: truncate and fork", max_diff, max_ref);
    /* what was allocated stays within the bound the server prints */
    assert_true(ember_context_kv_bytes(c) > kv_before);
    assert_true(ember_context_kv_bytes(c) - kv_before <= snap_max);
    ember_batch_free(&b);
    ember_context_free(c);

    /* 2 checkpoints taken at 10, 20, 30: the oldest stays, 20 goes (a cut
     * to 15 works only from 10) */
    ember_context_params p = ember_context_default_params();
    p.n_ctx = 512;
    p.n_batch = 512;
    p.n_seq_max = 1;
    p.n_threads = 2;
    p.type_k = p.type_v = use_gpu ? EMBER_KV_F16 : EMBER_KV_F32;
    p.n_ctx_checkpoints = 2;
    assert_int_equal(ember_context_new(m, &p, &c), EMBER_OK);
    assert_int_equal(ember_batch_init(512, &b), EMBER_OK);
    for (int32_t p0 = 0; p0 < 30; p0 += 10) {
        decode_range(c, &b, &o, 0, p0, p0 + 10, 10, &max_diff, &max_ref);
        assert_int_equal(ember_seq_ctx_checkpoint(c, 0), EMBER_OK);
    }
    decode_range(c, &b, &o, 0, 30, 40, 10, &max_diff, &max_ref);
    assert_int_equal(ember_seq_truncate(c, 0, 15), EMBER_OK);   /* from 10; drops 30 */
    decode_range(c, &b, &o, 0, 15, 45, 15, &max_diff, &max_ref);
    assert_int_equal(ember_seq_truncate(c, 0, 31), EMBER_OK);   /* from 10 again */
    decode_range(c, &b, &o, 0, 31, 40, 9, &max_diff, &max_ref);
    assert_int_equal(ember_seq_truncate(c, 0, 5), EMBER_ERR_RANGE);
    check("two block checkpoints", max_diff, max_ref);
    p.n_ctx_checkpoints = 65;
    ember_context *bad = NULL;
    assert_int_equal(ember_context_new(m, &p, &bad), EMBER_ERR_INVALID_ARG);
    ember_batch_free(&b);
    ember_context_free(c);
    json_decref(o.root);
    ember_model_free(m);
}

/* ---- the same on the GPU (CUDA builds with a device; else skipped) ---- */

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
    if (oracle_n_devices() < 2) {
        print_message("no GPU (or no CUDA build): skipped\n");
        skip();
    }
}

static void test_qwen35_long_gpu(void **st)
{
    (void)st;
    need_gpu();
    run_long(GGUF, LONG_JSON, "qwen35");
}

static void test_qwen35moe_long_gpu(void **st)
{
    (void)st;
    need_gpu();
    run_long(MOE_GGUF, MOE_LONG_JSON, "qwen35moe");
}

static void test_qwen35_interleaved_sequences_gpu(void **st)
{
    need_gpu();
    test_qwen35_interleaved_sequences(st);
}

static void test_qwen35_sequence_edits_gpu(void **st)
{
    need_gpu();
    test_qwen35_sequence_edits(st);
}

static void test_qwen35_checkpoint_rollback_gpu(void **st)
{
    need_gpu();
    test_qwen35_checkpoint_rollback(st);
}

static void test_qwen35_block_checkpoints_gpu(void **st)
{
    need_gpu();
    test_qwen35_block_checkpoints(st);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qwen35_short_matches_transformers),
        cmocka_unit_test(test_qwen35_long_matches_transformers),
        cmocka_unit_test(test_qwen35_long_matches_llama_cpp),
        cmocka_unit_test(test_qwen35_q8_0_matches_llama_cpp),
        cmocka_unit_test(test_qwen35_interleaved_sequences),
        cmocka_unit_test(test_qwen35moe_matches_transformers),
        cmocka_unit_test(test_qwen35_sequence_edits),
        cmocka_unit_test(test_qwen35_checkpoint_rollback),
        cmocka_unit_test(test_qwen35_block_checkpoints),
        cmocka_unit_test_setup_teardown(test_qwen35_long_gpu, gpu_on, gpu_off),
        cmocka_unit_test_setup_teardown(test_qwen35moe_long_gpu, gpu_on, gpu_off),
        cmocka_unit_test_setup_teardown(test_qwen35_interleaved_sequences_gpu, gpu_on, gpu_off),
        cmocka_unit_test_setup_teardown(test_qwen35_sequence_edits_gpu, gpu_on, gpu_off),
        cmocka_unit_test_setup_teardown(test_qwen35_checkpoint_rollback_gpu, gpu_on, gpu_off),
        cmocka_unit_test_setup_teardown(test_qwen35_block_checkpoints_gpu, gpu_on, gpu_off),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
