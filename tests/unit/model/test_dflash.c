/* The `dflash` architecture (src/model/dflash.c): the tiny DFlash draft of
 * tests/golden/dflash/ (tests/golden/make_dflash.py, converted by llama.cpp's
 * convert_hf_to_gguf.py --target-model-dir) loads with the metadata gguf-py
 * reads from it (gguf_dump: dflash.target_layers = [1, 3, 4, 5],
 * dflash.block_size = 8, tokenizer.ggml.mask_token_id = 4, block_count 2,
 * embedding_length 64, fc.weight ne [256, 64], no token_embd / output: the
 * target's are used; the vocabulary of 594 tokens is transformers' tokenizer
 * size in tiny-dflash.json), fits its target, is refused by a target it
 * does not fit, and cannot be run as a model of its own; malformed drafts
 * (written here with the GGUF writer) get errors that name the key or
 * tensor; the forward's entry points refuse bad arguments;
 * - the target states the draft reads: ember's gemma4 hidden states after
 *   layers target_layers[k] - 1 at every prompt position (rows without
 *   logits included) equal transformers' hidden_states[id + 1] for HF's
 *   target_layer_ids (tiny-dflash.json prompt_hidden_states), so the layer
 *   mapping HF id -> GGUF id + 1 -> ember layer id holds. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "ember.h"
#include "model/dflash.h"
#include "backend/logits_top.h"
#include "gguf/gguf.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <jansson.h>

#define DRAFT "tests/golden/dflash/tiny-dflash-draft.gguf"
#define TARGET "tests/golden/dflash/tiny-dflash-target.gguf"

static void test_dflash_loads(void **st)
{
    (void)st;
    ember_model *m = NULL;
    assert_int_equal(ember_model_load(DRAFT, NULL, &m), EMBER_OK);
    assert_string_equal(ember_model_arch(m), "dflash");
    assert_int_equal(ember_model_n_layer(m), 2);
    assert_int_equal(ember_model_n_embd(m), 64);
    assert_int_equal(ember_model_n_vocab(m), 594);
    const ember_dflash *d = ember_model_dflash(m);
    assert_non_null(d);
    assert_int_equal(d->n_target_layers, 4);
    const int32_t want[4] = {1, 3, 4, 5};
    for (int k = 0; k < 4; k++) assert_int_equal(d->target_layers[k], want[k]);
    assert_int_equal(d->block_size, 8);
    assert_int_equal(d->mask_token, 4);
    assert_false(d->causal);
    assert_int_equal(d->n_embd_target, 64);
    assert_int_equal(d->fc.n_in, 256);
    assert_int_equal(d->fc.n_out, 64);
    assert_non_null(d->enc_norm);
    ember_model_free(m);
}

static void test_dflash_fits_its_target(void **st)
{
    (void)st;
    ember_model *d = NULL, *t = NULL;
    assert_int_equal(ember_model_load(DRAFT, NULL, &d), EMBER_OK);
    assert_int_equal(ember_model_load(TARGET, NULL, &t), EMBER_OK);
    assert_string_equal(ember_model_arch(t), "gemma4");
    assert_int_equal(ember_model_n_layer(t), 6);
    assert_int_equal(ember_dflash_check_target(d, t), EMBER_OK);
    assert_null(ember_model_dflash(t));
    ember_model_free(t);
    /* a 4-layer target of n_embd 48: target layer 5 does not exist, fc reads 64-wide rows */
    assert_int_equal(ember_model_load("tests/golden/gemma4/tiny-gemma4-kv.gguf", NULL, &t), EMBER_OK);
    assert_int_equal(ember_dflash_check_target(d, t), EMBER_ERR_INVALID_ARG);
    /* not a draft at all */
    assert_int_equal(ember_dflash_check_target(t, t), EMBER_ERR_INVALID_ARG);
    ember_model_free(t);
    ember_model_free(d);
}

static void test_dflash_is_no_model_of_its_own(void **st)
{
    (void)st;
    ember_model *d = NULL;
    assert_int_equal(ember_model_load(DRAFT, NULL, &d), EMBER_OK);
    ember_context_params cp = ember_context_default_params();
    cp.n_ctx = 64;
    ember_context *c = NULL;
    assert_int_equal(ember_context_new(d, &cp, &c), EMBER_ERR_UNSUPPORTED);
    assert_null(c);
    ember_model_free(d);
}

/* A minimal dflash file: 1 layer, n_embd 8, 2 heads of 4 (1 KV head),
 * n_ff 8, target_layers [1] of an 8-wide target; `bad` breaks one thing. */
enum { OK_FILE, NO_TARGET_LAYERS, ZERO_LAYER, DFLASH2, FC_WIDTH, NO_MASK, BLOCK_1, NO_FC };
static const char *write_draft(int bad, char *path)
{
    snprintf(path, 64, "/tmp/ember-test-dflash-%d-%d.gguf", (int)getpid(), bad);
    ember_gguf_writer *w = NULL;
    assert_int_equal(ember_gguf_writer_new(0, &w), EMBER_OK);
    ember_gguf_writer_set_str(w, "general.architecture", "dflash");
    ember_gguf_writer_set_u32(w, "dflash.context_length", 64);
    ember_gguf_writer_set_u32(w, "dflash.embedding_length", 8);
    ember_gguf_writer_set_u32(w, "dflash.block_count", 1);
    ember_gguf_writer_set_u32(w, "dflash.feed_forward_length", 8);
    ember_gguf_writer_set_u32(w, "dflash.attention.head_count", 2);
    ember_gguf_writer_set_u32(w, "dflash.attention.head_count_kv", 1);
    ember_gguf_writer_set_u32(w, "dflash.attention.key_length", 4);
    ember_gguf_writer_set_u32(w, "dflash.attention.value_length", 4);
    ember_gguf_writer_set_f32(w, "dflash.attention.layer_norm_rms_epsilon", 1e-6f);
    const int32_t tl[2] = {bad == ZERO_LAYER ? 0 : 1, 2};
    if (bad != NO_TARGET_LAYERS) ember_gguf_writer_set_arr(w, "dflash.target_layers", EMBER_GGUF_I32, tl, 2);
    ember_gguf_writer_set_u32(w, "dflash.block_size", bad == BLOCK_1 ? 1 : 4);
    if (bad != NO_MASK) ember_gguf_writer_set_u32(w, "tokenizer.ggml.mask_token_id", 3);
    static float z[16 * 8];
    const int64_t v8[1] = {8}, v4[1] = {4};
    const int64_t fc[2] = {bad == FC_WIDTH ? 15 : 16, 8}, sq[2] = {8, 8}, kv[2] = {8, 4};
    if (bad != NO_FC) ember_gguf_writer_add_tensor(w, "fc.weight", EMBER_TYPE_F32, 2, fc, z);
    ember_gguf_writer_add_tensor(w, "enc.output_norm.weight", EMBER_TYPE_F32, 1, v8, z);
    ember_gguf_writer_add_tensor(w, "output_norm.weight", EMBER_TYPE_F32, 1, v8, z);
    if (bad == DFLASH2) ember_gguf_writer_add_tensor(w, "selector_hidden.weight", EMBER_TYPE_F32, 2, sq, z);
    const char *mats[] = {"attn_q", "attn_output", "ffn_gate", "ffn_up", "ffn_down"};
    char name[64];
    for (size_t i = 0; i < sizeof mats / sizeof *mats; i++) {
        snprintf(name, sizeof name, "blk.0.%s.weight", mats[i]);
        ember_gguf_writer_add_tensor(w, name, EMBER_TYPE_F32, 2, sq, z);
    }
    ember_gguf_writer_add_tensor(w, "blk.0.attn_k.weight", EMBER_TYPE_F32, 2, kv, z);
    ember_gguf_writer_add_tensor(w, "blk.0.attn_v.weight", EMBER_TYPE_F32, 2, kv, z);
    ember_gguf_writer_add_tensor(w, "blk.0.attn_norm.weight", EMBER_TYPE_F32, 1, v8, z);
    ember_gguf_writer_add_tensor(w, "blk.0.ffn_norm.weight", EMBER_TYPE_F32, 1, v8, z);
    ember_gguf_writer_add_tensor(w, "blk.0.attn_q_norm.weight", EMBER_TYPE_F32, 1, v4, z);
    ember_gguf_writer_add_tensor(w, "blk.0.attn_k_norm.weight", EMBER_TYPE_F32, 1, v4, z);
    assert_int_equal(ember_gguf_writer_write_file(w, path), EMBER_OK);
    ember_gguf_writer_free(w);
    return path;
}

static void test_dflash_malformed(void **st)
{
    (void)st;
    const struct { int bad; ember_status want; const char *needle; } cases[] = {
        {NO_TARGET_LAYERS, EMBER_ERR_NOT_FOUND, "dflash.target_layers"},
        {ZERO_LAYER, EMBER_ERR_FORMAT, "dflash.target_layers'[0]"},
        {DFLASH2, EMBER_ERR_UNSUPPORTED, "selector_hidden.weight"},
        {FC_WIDTH, EMBER_ERR_FORMAT, "fc.weight"},
        {NO_MASK, EMBER_ERR_NOT_FOUND, "mask_token_id"},
        {BLOCK_1, EMBER_ERR_FORMAT, "block_size"},
        {NO_FC, EMBER_ERR_NOT_FOUND, "fc.weight"},
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
    assert_null(strstr(ember_last_error(), "dflash."));
    unlink(path);
}

static void test_dflash_forward_bad_args(void **st)
{
    (void)st;
    ember_model *d = NULL, *t = NULL;
    assert_int_equal(ember_model_load(DRAFT, NULL, &d), EMBER_OK);
    assert_int_equal(ember_model_load(TARGET, NULL, &t), EMBER_OK);
    ember_dflash_ctx *c = NULL;
    assert_int_equal(ember_dflash_ctx_new(d, t, 0, 16, 1, &c), EMBER_ERR_INVALID_ARG);
    assert_int_equal(ember_dflash_ctx_new(t, t, 1, 16, 1, &c), EMBER_ERR_INVALID_ARG);
    assert_int_equal(ember_dflash_ctx_new(d, t, 1, 16, 1, &c), EMBER_OK);
    static float feat[20 * 256];
    float logits[7 * 594];
    const ember_token blk[8] = {2, 4, 4, 4, 4, 4, 4, 4}, bad_tok[2] = {2, 594};
    assert_int_equal(ember_dflash_inject(c, 1, 1, feat), EMBER_ERR_INVALID_ARG);     /* no sequence 1 */
    assert_int_equal(ember_dflash_inject(c, 0, 17, feat), EMBER_ERR_RANGE);          /* past n_ctx 16 */
    assert_int_equal(ember_dflash_n_pos(c, 0), 0);
    assert_int_equal(ember_dflash_inject(c, 0, 5, feat), EMBER_OK);
    assert_int_equal(ember_dflash_n_pos(c, 0), 5);
    assert_int_equal(ember_dflash_block(c, 0, blk, 1, logits), EMBER_ERR_INVALID_ARG);     /* < 2 */
    assert_int_equal(ember_dflash_block(c, 0, blk, 9, logits), EMBER_ERR_INVALID_ARG);     /* > block_size 8 */
    assert_int_equal(ember_dflash_block(c, 0, bad_tok, 2, logits), EMBER_ERR_INVALID_ARG); /* token 594 */
    assert_int_equal(ember_dflash_block(c, 0, blk, 8, logits), EMBER_OK);
    assert_int_equal(ember_dflash_n_pos(c, 0), 5);   /* the block's K/V are not kept */
    ember_dflash_truncate(c, 0, 2);
    assert_int_equal(ember_dflash_n_pos(c, 0), 2);
    ember_dflash_truncate(c, 0, 9);                  /* never grows */
    assert_int_equal(ember_dflash_n_pos(c, 0), 2);
    ember_dflash_ctx_free(c);
    ember_model_free(t);
    ember_model_free(d);
}

/* ember_dflash_block_top: the heads of a block's rows (logits kept in the
 * draft backend's activation memory, reduced by its logits_top op) equal
 * the host heads of ember_dflash_block's rows on the same backend, bit for
 * bit (the same logits; on a GPU the device reduction against the host
 * one), every time the block runs (on a GPU: op by op, captured, replayed
 * as a CUDA graph: the draft's passes are backend steps); n_gpu_layers -1
 * puts the draft on the GPU (the *_gpu case), whose logits must then be
 * within 2e-2 of max |cpu| of the CPU draft's on the same features (F16
 * K/V against F32; a block attending causally, or to the wrong positions,
 * is off by O(1)). */
static void block_heads_case(int32_t n_gpu_layers)
{
    ember_model_params mp = ember_model_default_params();
    mp.n_gpu_layers = n_gpu_layers;
    ember_model *d = NULL, *t = NULL;
    assert_int_equal(ember_model_load(DRAFT, &mp, &d), EMBER_OK);
    assert_int_equal(ember_model_load(TARGET, NULL, &t), EMBER_OK);
    ember_dflash_ctx *c = NULL;
    assert_int_equal(ember_dflash_ctx_new(d, t, 2, 32, 1, &c), EMBER_OK);
    assert_int_equal(ember_dflash_device_heads(c), n_gpu_layers != 0);
    static float feat[12 * 256], logits[7 * 594];
    uint32_t x = 12345u;
    for (size_t i = 0; i < sizeof feat / sizeof feat[0]; i++) {
        x = x * 1664525u + 1013904223u;
        feat[i] = (float)((int32_t)(x >> 8) % 2001 - 1000) / 250.0f;
    }
    assert_int_equal(ember_dflash_inject(c, 1, 12, feat), EMBER_OK);
    const ember_token blk[8] = {7, 4, 4, 4, 4, 4, 4, 4};
    ember_logits_top top[7], ref[7];
    assert_int_equal(ember_dflash_block_top(c, 1, blk, 8, 0, top), EMBER_ERR_INVALID_ARG);   /* k < 1 */
    assert_int_equal(ember_dflash_block_top(c, 1, blk, 9, 10, top), EMBER_ERR_INVALID_ARG);  /* > block_size 8 */
    ember_dflash_ctx *cpu = NULL;   /* the CPU draft on the same features (the GPU case) */
    ember_model *dc = NULL;
    static float cpu_logits[7 * 594];
    if (n_gpu_layers != 0) {
        assert_int_equal(ember_model_load(DRAFT, NULL, &dc), EMBER_OK);
        assert_int_equal(ember_dflash_ctx_new(dc, t, 2, 32, 1, &cpu), EMBER_OK);
        assert_int_equal(ember_dflash_inject(cpu, 1, 12, feat), EMBER_OK);
    }
    /* a short block, then a longer one (its rows grow), then each again (graphs captured and replayed) */
    const int32_t lens[] = {3, 8, 3, 8, 8, 3, 8, 3};
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
        const int32_t n = lens[li];
        memset(top, 0, sizeof top);
        assert_int_equal(ember_dflash_block_top(c, 1, blk, n, 10, top), EMBER_OK);
        assert_int_equal(ember_dflash_block(c, 1, blk, n, logits), EMBER_OK);
        const float *rows[7];
        for (int32_t i = 0; i < n - 1; i++) rows[i] = logits + (size_t)i * 594;
        ember_logits_top_host(rows, n - 1, 594, 10, ref);
        for (int32_t i = 0; i < n - 1; i++) {
            assert_int_equal(top[i].n, 10);
            int32_t best = 0;
            for (int32_t v = 1; v < 594; v++)
                if (rows[i][v] > rows[i][best]) best = v;
            assert_int_equal(top[i].id[0], best);
            for (int32_t j = 0; j < 10; j++) {
                assert_int_equal(top[i].id[j], ref[i].id[j]);
                assert_memory_equal(&top[i].logit[j], &ref[i].logit[j], sizeof(float));
            }
            assert_memory_equal(&top[i].max, &ref[i].max, sizeof(float));
            assert_true(fabsf(top[i].lse - ref[i].lse) <= 1e-5f * fmaxf(1.0f, fabsf(ref[i].lse)));
        }
        if (!cpu) continue;
        assert_int_equal(ember_dflash_block(cpu, 1, blk, n, cpu_logits), EMBER_OK);
        float md = 0, mr = 0;
        for (size_t i = 0; i < (size_t)(n - 1) * 594; i++) {
            const float dd = fabsf(logits[i] - cpu_logits[i]);
            if (dd > md || dd != dd) md = dd;
            if (fabsf(cpu_logits[i]) > mr) mr = fabsf(cpu_logits[i]);
        }
        print_message("block of %d: max |gpu - cpu| logit %.3g of max |cpu| %.3g\n", n, (double)md, (double)mr);
        assert_true(mr > 0.1f);
        if (!(md <= 2e-2f * mr)) fail_msg("block of %d: GPU logits off the CPU draft's by %g (max |cpu| %g)", n, md, mr);
    }
    ember_dflash_ctx_free(cpu);
    if (dc) ember_model_free(dc);
    assert_int_equal(ember_dflash_n_pos(c, 1), 12);   /* the blocks' K/V are not kept */
    ember_dflash_ctx_free(c);
    ember_model_free(t);
    ember_model_free(d);
}

static void test_dflash_block_heads(void **st)
{
    (void)st;
    block_heads_case(0);
}

static void test_dflash_block_heads_gpu(void **st)
{
    (void)st;
    if (ember_gpu_count() < 1) {
        print_message("no GPU (or no CUDA build): skipped\n");
        skip();
    }
    block_heads_case(-1);
}

/* ember_dflash_blocks(_top): the blocks of several sequences in one pass
 * (each attending to its own sequence only) equal each sequence's block
 * run alone: bit for bit on the CPU, within 1e-2 of max |logit| on a GPU
 * (another row count may take another matmul kernel); the heads of the
 * pass equal the host heads of its rows bit for bit; a sequence twice or
 * more rows than a pass holds are refused. */
static void blocks_case(int32_t n_gpu_layers)
{
    ember_model_params mp = ember_model_default_params();
    mp.n_gpu_layers = n_gpu_layers;
    ember_model *d = NULL, *t = NULL;
    assert_int_equal(ember_model_load(DRAFT, &mp, &d), EMBER_OK);
    assert_int_equal(ember_model_load(TARGET, NULL, &t), EMBER_OK);
    enum { S = 3, V = 594 };
    ember_dflash_ctx *c = NULL;
    assert_int_equal(ember_dflash_ctx_new(d, t, S + 1, 32, 1, &c), EMBER_OK);
    assert_int_equal(ember_dflash_max_blocks(c, 8), 4);   /* 32 rows a pass */
    static float feat[16 * 256];
    uint32_t x = 777u;
    for (size_t i = 0; i < sizeof feat / sizeof feat[0]; i++) {
        x = x * 1664525u + 1013904223u;
        feat[i] = (float)((int32_t)(x >> 8) % 2001 - 1000) / 250.0f;
    }
    const int32_t seqs[S] = {3, 0, 2}, n_inj[S] = {9, 14, 5};
    for (int j = 0; j < S; j++) assert_int_equal(ember_dflash_inject(c, seqs[j], n_inj[j], feat + 16 * j), EMBER_OK);
    ember_token blk[S][8];
    for (int j = 0; j < S; j++) {
        blk[j][0] = (ember_token)(11 + 40 * j);
        for (int i = 1; i < 8; i++) blk[j][i] = 4;
    }
    static float one[7 * V], all[S][7 * V];
    ember_logits_top heads[S * 7], ref[S * 7];
    for (int rep = 0; rep < 3; rep++) {   /* on a GPU: op by op, captured, replayed */
        assert_int_equal(ember_dflash_blocks(c, S, seqs, &blk[0][0], 8, &all[0][0]), EMBER_OK);
        assert_int_equal(ember_dflash_blocks_top(c, S, seqs, &blk[0][0], 8, 10, heads), EMBER_OK);
        const float *rows[S * 7];
        for (int r = 0; r < S * 7; r++) rows[r] = &all[0][0] + (size_t)r * V;
        ember_logits_top_host(rows, S * 7, V, 10, ref);
        for (int r = 0; r < S * 7; r++)
            for (int k = 0; k < 10; k++) {
                assert_int_equal(heads[r].id[k], ref[r].id[k]);
                assert_memory_equal(&heads[r].logit[k], &ref[r].logit[k], sizeof(float));
            }
        for (int j = 0; j < S; j++) {
            assert_int_equal(ember_dflash_block(c, seqs[j], blk[j], 8, one), EMBER_OK);
            float md = 0, mr = 0;
            for (int i = 0; i < 7 * V; i++) {
                const float dd = fabsf(one[i] - all[j][i]);
                if (dd > md || dd != dd) md = dd;
                if (fabsf(one[i]) > mr) mr = fabsf(one[i]);
            }
            assert_true(mr > 0.1f);
            if (n_gpu_layers == 0 ? md != 0.0f : !(md <= 1e-2f * mr))
                fail_msg("sequence %d: its block alone off the pass's by %g (max |logit| %g)", seqs[j], md, mr);
            assert_int_equal(ember_dflash_n_pos(c, seqs[j]), n_inj[j]);   /* the blocks' K/V are not kept */
        }
    }
    const int32_t twice[2] = {0, 0}, five[5] = {0, 1, 2, 3, 0};
    assert_int_equal(ember_dflash_blocks(c, 2, twice, &blk[0][0], 8, &all[0][0]), EMBER_ERR_INVALID_ARG);
    assert_int_equal(ember_dflash_blocks_top(c, 5, five, &blk[0][0], 8, 10, heads), EMBER_ERR_INVALID_ARG);
    ember_dflash_ctx_free(c);
    ember_model_free(t);
    ember_model_free(d);
}

static void test_dflash_blocks_one_pass(void **st)
{
    (void)st;
    blocks_case(0);
}

static void test_dflash_blocks_one_pass_gpu(void **st)
{
    (void)st;
    if (ember_gpu_count() < 1) {
        print_message("no GPU (or no CUDA build): skipped\n");
        skip();
    }
    blocks_case(-1);
}

static void test_dflash_target_states_match_transformers(void **st)
{
    (void)st;
    json_error_t jerr;
    json_t *rec = json_load_file("tests/golden/dflash/tiny-dflash.json", 0, &jerr);
    assert_non_null(rec);
    json_t *jp = json_object_get(rec, "prompt"), *jh = json_object_get(rec, "prompt_hidden_states");
    assert_true(json_is_array(jp) && json_is_object(jh));
    ember_model *d = NULL, *t = NULL;
    assert_int_equal(ember_model_load(DRAFT, NULL, &d), EMBER_OK);
    assert_int_equal(ember_model_load(TARGET, NULL, &t), EMBER_OK);
    const ember_dflash *df = ember_model_dflash(d);
    int32_t layers[EMBER_DFLASH_MAX_TARGET_LAYERS];
    for (int k = 0; k < df->n_target_layers; k++) layers[k] = df->target_layers[k] - 1;
    ember_context_params cp = ember_context_default_params();
    cp.n_ctx = 64;
    cp.n_batch = cp.n_ubatch = 64;
    cp.n_threads = 1;
    cp.type_k = cp.type_v = EMBER_KV_F32;
    ember_context *c = NULL;
    assert_int_equal(ember_context_new(t, &cp, &c), EMBER_OK);
    assert_int_equal(ember_set_hidden_layers(c, df->n_target_layers, layers), EMBER_OK);
    const int32_t n = (int32_t)json_array_size(jp), E = ember_model_n_embd(t);
    ember_batch b;
    assert_int_equal(ember_batch_init(n, &b), EMBER_OK);
    b.n_tokens = n;
    for (int i = 0; i < n; i++) {
        b.token[i] = (ember_token)json_integer_value(json_array_get(jp, (size_t)i));
        b.pos[i] = i; b.seq_id[i] = 0; b.logits[i] = i == n - 1;
    }
    assert_int_equal(ember_decode(c, &b), EMBER_OK);
    double worst = 0;
    for (int k = 0; k < df->n_target_layers; k++) {
        char key[16];
        snprintf(key, sizeof key, "%d", layers[k]);   /* HF target_layer_id */
        json_t *rows = json_object_get(jh, key);
        assert_true(json_is_array(rows) && (int32_t)json_array_size(rows) == n);
        for (int i = 0; i < n; i++) {
            const float *h = ember_get_hidden(c, i, k);
            assert_non_null(h);
            json_t *row = json_array_get(rows, (size_t)i);
            double scale = 0;
            for (int e = 0; e < E; e++) scale = fmax(scale, fabs(json_real_value(json_array_get(row, (size_t)e))));
            for (int e = 0; e < E; e++) {
                const double want = json_real_value(json_array_get(row, (size_t)e));
                const double err = fabs(h[e] - want) / (scale + 1e-6);
                if (err > worst) worst = err;
                if (err > 2e-3) fail_msg("layer %d position %d element %d: %f, transformers %f", layers[k], i, e, h[e], want);
            }
        }
    }
    print_message("target hidden states vs transformers: max error %.2g of the row scale\n", worst);
    ember_batch_free(&b);
    ember_context_free(c);
    ember_model_free(t);
    ember_model_free(d);
    json_decref(rec);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dflash_loads),
        cmocka_unit_test(test_dflash_fits_its_target),
        cmocka_unit_test(test_dflash_is_no_model_of_its_own),
        cmocka_unit_test(test_dflash_malformed),
        cmocka_unit_test(test_dflash_forward_bad_args),
        cmocka_unit_test(test_dflash_block_heads),
        cmocka_unit_test(test_dflash_block_heads_gpu),
        cmocka_unit_test(test_dflash_blocks_one_pass),
        cmocka_unit_test(test_dflash_blocks_one_pass_gpu),
        cmocka_unit_test(test_dflash_target_states_match_transformers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
