/* gemma4 (text) against Hugging Face transformers on tiny random models
 * (tests/golden/gemma4/, made by tests/golden/make_tiny_models.py):
 * - tiny-gemma4-e (E2B/E4B-like): per-layer embeddings (PLE), sliding and
 *   full layers with their own head dims (16 / 32) and RoPE (base 1e4 full
 *   rotation / base 1e6 proportional with partial_rotary_factor 0.25 via
 *   rope_freqs), sliding window 4, the last 2 layers KV-shared, double-wide
 *   MLP on the shared layers, V norm, final logit softcap 8, layer scalars;
 * - tiny-gemma4-kv (31B-like): attention_k_eq_v (full layers have no attn_v
 *   and 1 KV head, sliding ones 2: a per-layer head_count_kv array),
 *   partial_rotary_factor 0.5, sliding window 3, no PLE;
 * - tiny-gemma4-moe (26B-A4B-like): dense MLP plus a mixture-of-experts
 *   block on every layer (6 experts, top 2, fused gate_up experts, router
 *   scale, per-expert scales), attention_k_eq_v, softcap 30.
 * Logits at every position must match within TOL_REL of the logit scale
 * (tiny_oracle.h), for a whole-prompt batch and for token-by-token decoding. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "tiny_oracle.h"

static void test_gemma4_e_matches_transformers(void **st)
{
    (void)st;
    run_oracle("tests/golden/gemma4/tiny-gemma4-e.gguf", "tests/golden/gemma4/tiny-gemma4-e.logits.json", "gemma4");
}

static void test_gemma4_kv_matches_transformers(void **st)
{
    (void)st;
    run_oracle("tests/golden/gemma4/tiny-gemma4-kv.gguf", "tests/golden/gemma4/tiny-gemma4-kv.logits.json", "gemma4");
}

static void test_gemma4_moe_matches_transformers(void **st)
{
    (void)st;
    run_oracle("tests/golden/gemma4/tiny-gemma4-moe.gguf", "tests/golden/gemma4/tiny-gemma4-moe.logits.json", "gemma4");
}

/* Long sequences (160 / 120 tokens) with sliding windows of 4 / 3: the KV
 * cache releases blocks behind the window (kv.h) and the logits still match
 * at every position. The KV bytes of tiny-gemma4-e (F32, n_ctx 256, one
 * sequence) follow from its config: layers 0-3 keep K/V, 4-5 are KV-shared
 * (none); full layers 1, 3: 2 KV heads x 32 x 4 bytes x (K + V) = 512 bytes
 * per token for all 256 positions; sliding layers 0, 2: 2 x 16 x 4 x 2 = 256
 * bytes per token for 4 blocks of 32 (window 4 + one block margin + ubatch
 * 16, rounded up to blocks, + 2) = 128 tokens. */
static void test_gemma4_e_long_sliding_window(void **st)
{
    (void)st;
    const uint64_t kv = run_oracle_long("tests/golden/gemma4/tiny-gemma4-e.gguf", "tests/golden/gemma4/tiny-gemma4-e.long.logits.json");
    assert_int_equal(kv, 2 * 256 * 512 + 2 * 128 * 256);
}

static void test_gemma4_kv_long_sliding_window(void **st)
{
    (void)st;
    run_oracle_long("tests/golden/gemma4/tiny-gemma4-kv.gguf", "tests/golden/gemma4/tiny-gemma4-kv.long.logits.json");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemma4_e_matches_transformers),
        cmocka_unit_test(test_gemma4_kv_matches_transformers),
        cmocka_unit_test(test_gemma4_moe_matches_transformers),
        cmocka_unit_test(test_gemma4_e_long_sliding_window),
        cmocka_unit_test(test_gemma4_kv_long_sliding_window),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
