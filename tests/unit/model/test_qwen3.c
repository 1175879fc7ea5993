/* qwen3 (dense) against Hugging Face transformers on a tiny random model
 * (tests/golden/qwen3/, made by tests/golden/make_tiny_models.py): QK-norm,
 * GQA (4 query heads on 2 KV heads), head_dim 24 != n_embd / n_head, SwiGLU,
 * NEOX RoPE (base 1e6), untied output. Logits at every position must match
 * within TOL_REL of the logit scale (see tiny_oracle.h). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "tiny_oracle.h"

static void test_qwen3_matches_transformers(void **st)
{
    (void)st;
    run_oracle("tests/golden/qwen3/tiny-qwen3.gguf", "tests/golden/qwen3/tiny-qwen3.logits.json", "qwen3");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qwen3_matches_transformers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
