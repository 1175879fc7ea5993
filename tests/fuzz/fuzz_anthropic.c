/* libFuzzer target: Anthropic Messages bodies through the adapter
 * (src/server/anthropic.c) and the common request's validation
 * (src/server/openai.c), as /v1/messages and /v1/messages/count_tokens take
 * them. Any input must give a parsed request or a 400 with a message, never
 * a crash, leak or hang. Run: build-fuzz/fuzz/fuzz_anthropic */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "server/anthropic.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_t *j = json_loadb((const char *)data, size, JSON_DECODE_ANY, NULL);
    if (!j) return 0;
    for (int count = 0; count <= 1; count++) {
        oai_error err;
        memset(&err, 0, sizeof err);
        json_t *o = anth_to_oai(j, count, &err);
        if (!o) {
            if (err.http_status != 400 || !err.message[0]) __builtin_trap();
            json_decref(anth_error_json(&err));
            continue;
        }
        oai_req r;
        if (!oai_parse(o, OAI_CHAT, 1000, &r, &err) && (err.http_status != 400 || !err.message[0])) __builtin_trap();
        oai_req_free(&r);
        json_decref(o);
    }
    json_decref(j);
    return 0;
}
