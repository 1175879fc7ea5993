/*
 * fuzz_jinja.c — libFuzzer target: any bytes as a chat template, parsed and
 * rendered against a small chat context with tight limits. Must never
 * crash, hang, or leak; errors are the expected outcome for most inputs.
 * Build: cmake -DEMBER_FUZZ=ON (clang); seed corpus: tests/data/templates.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "chat/jinja/jinja.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static json_t *ctx;
    if (!ctx)
        ctx = json_loads("{\"messages\":[{\"role\":\"system\",\"content\":\"s\"},{\"role\":\"user\",\"content\":\"u\"},"
                         "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"type\":\"function\",\"function\":"
                         "{\"name\":\"f\",\"arguments\":{\"a\":1}}}]},{\"role\":\"tool\",\"content\":\"r\"}],"
                         "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{}}}],"
                         "\"add_generation_prompt\":true,\"bos_token\":\"<s>\",\"eos_token\":\"</s>\"}", 0, NULL);
    ember_jinja_template *t = NULL;
    if (ember_jinja_parse((const char *)data, size, &t, NULL) != EMBER_OK) return 0;
    ember_jinja_render_opts o = {.max_steps = 20000, .max_output = 1 << 16, .max_memory = 32 << 20,
                                 .use_fixed_now = 1, .fixed_now = 0};
    char *out = NULL;
    ember_jinja_render(t, ctx, &o, &out, NULL, NULL);
    free(out);
    ember_jinja_free(t);
    return 0;
}
