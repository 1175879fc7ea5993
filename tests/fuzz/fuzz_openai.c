/* libFuzzer target: OpenAI request bodies through the server's validation
 * (src/server/openai.c). Any input must give a parsed request or a 400 with
 * a message, never a crash, leak or hang. Run: build-fuzz/fuzz/fuzz_openai */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "server/openai.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_t *j = json_loadb((const char *)data, size, JSON_DECODE_ANY, NULL);
    if (!j) return 0;
    for (int kind = OAI_CHAT; kind <= OAI_COMPLETION; kind++) {
        oai_req r;
        oai_error err;
        memset(&err, 0, sizeof err);
        if (!oai_parse(j, (oai_kind)kind, 1000, &r, &err) && (err.http_status != 400 || !err.message[0]))
            __builtin_trap();
        oai_req_free(&r);
    }
    oai_req r = {0};
    oai_error err;
    if (json_is_object(j)) oai_parse_messages(j, &r, &err);
    oai_req_free(&r);
    json_decref(j);
    return 0;
}
