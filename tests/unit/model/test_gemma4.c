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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemma4_e_matches_transformers),
        cmocka_unit_test(test_gemma4_kv_matches_transformers),
        cmocka_unit_test(test_gemma4_moe_matches_transformers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
