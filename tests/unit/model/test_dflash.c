/* The `dflash` architecture (src/model/dflash.c): the tiny DFlash draft of
 * tests/golden/dflash/ (tests/golden/make_dflash.py, converted by llama.cpp's
 * convert_hf_to_gguf.py --target-model-dir) loads with the metadata gguf-py
 * reads from it (gguf_dump: dflash.target_layers = [1, 3, 4, 5],
 * dflash.block_size = 8, tokenizer.ggml.mask_token_id = 4, block_count 2,
 * embedding_length 64, fc.weight ne [256, 64], no token_embd / output: the
 * target's are used; the vocabulary of 594 tokens is transformers' tokenizer
 * size in tiny-dflash.json), fits its target, is refused by a target it
 * does not fit, and cannot be run as a model of its own. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "ember.h"
#include "model/dflash.h"

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dflash_loads),
        cmocka_unit_test(test_dflash_fits_its_target),
        cmocka_unit_test(test_dflash_is_no_model_of_its_own),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
