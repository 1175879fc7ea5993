/* libFuzzer target: OpenAI Responses bodies through the adapter
 * (src/server/responses.c) and the common request's validation
 * (src/server/openai.c), as /v1/responses and /v1/responses/input_tokens
 * take them; then, for an accepted body, the answer side: a stream of parser
 * events made from the input's bytes through resp_stream_event /
 * resp_stream_update, and the whole Response. Any input must give a parsed
 * request or a 400 with a message; every event must carry its name as
 * "type" and sequence numbers 0, 1, 2, ...; never a crash, leak or hang.
 * Run: build-fuzz/fuzz/fuzz_responses */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "server/responses.h"

typedef struct seen { int64_t next; } seen;

static void on_event(void *ud, const char *name, json_t *data)
{
    seen *s = ud;
    json_t *type = json_object_get(data, "type"), *seq = json_object_get(data, "sequence_number");
    if (!json_is_string(type) || strcmp(json_string_value(type), name) != 0) __builtin_trap();
    if (!json_is_integer(seq) || json_integer_value(seq) != s->next) __builtin_trap();
    s->next++;
    json_decref(data);
}

/* The bytes as parser events: each byte picks a kind, the next few are its text. */
static void answer(oai_req *rq, const uint8_t *data, size_t size)
{
    server_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.alias = "m";
    completion_ctx ctx = {.cfg = &cfg};
    completion c;
    memset(&c, 0, sizeof c);
    c.ctx = &ctx;
    c.rq = *rq;
    memset(rq, 0, sizeof *rq);
    c.stop_index = -1;
    snprintf(c.id, sizeof c.id, "resp_fuzz");
    seen s = {0};
    resp_stream *rs = resp_stream_new(&c, on_event, &s);
    if (!rs) { oai_req_free(&c.rq); return; }
    c.parser = (ember_chat_parser *)1;   /* events come from here, not from raw text; never dereferenced */
    int tool = -1;
    for (size_t i = 0; i < size;) {
        uint8_t b = data[i++];
        size_t n = (size_t)(b >> 4) % 6;
        if (n > size - i) n = size - i;
        ember_chat_event ev = {.kind = (ember_chat_event_kind)(b % 6), .text = (const char *)data + i, .len = n,
                               .tool_index = tool, .id = "call_abc", .name = "f"};
        if (ev.kind == EMBER_CHAT_EV_TOOL_START) ev.tool_index = ++tool;
        if (ev.kind <= EMBER_CHAT_EV_TOOL_END) resp_stream_event(rs, &ev);
        i += n;
    }
    completion_update u;
    memset(&u, 0, sizeof u);
    static const completion_stop stops[] = {COMPLETION_STOP_EOG, COMPLETION_STOP_LENGTH, COMPLETION_STOP_TOOL,
                                            COMPLETION_ERROR};
    u.stop = stops[size % 4];
    u.res.finish = u.stop == COMPLETION_STOP_LENGTH ? ENGINE_FINISH_LENGTH : u.stop == COMPLETION_ERROR
                                                                              ? ENGINE_FINISH_ERROR : ENGINE_FINISH_STOP;
    u.res.n_prompt = 3;
    u.res.n_generated = (int32_t)size;
    resp_stream_update(rs, &c, &u);
    c.parser = NULL;
    /* the whole answer, from a message of the input's text and from raw text */
    json_t *msg = json_pack("{s:o, s:o, s:[{s:s, s:{s:s, s:o}}]}", "content",
                            oai_json_string((const char *)data, size), "reasoning_content",
                            oai_json_string((const char *)data, size / 2), "tool_calls", "id", "call_x", "function",
                            "name", "f", "arguments", oai_json_string((const char *)data, size / 3));
    json_decref(resp_response_json(&c, &u, msg));
    json_decref(msg);
    u.res.text = (const char *)data;
    u.res.text_len = size;
    json_decref(resp_response_json(&c, &u, NULL));
    resp_stream_free(rs);
    oai_req_free(&c.rq);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_t *j = json_loadb((const char *)data, size, JSON_DECODE_ANY, NULL);
    if (!j) return 0;
    for (int count = 0; count <= 1; count++) {
        oai_error err;
        memset(&err, 0, sizeof err);
        json_t *o = resp_to_oai(j, count, &err);
        if (!o) {
            if (err.http_status != 400 || !err.message[0]) __builtin_trap();
            continue;
        }
        oai_req r;
        if (!oai_parse(o, OAI_CHAT, 1000, &r, &err)) {
            if (err.http_status != 400 || !err.message[0]) __builtin_trap();
            resp_rename_param(&err);
        } else if (!count) {
            answer(&r, data, size);
        }
        oai_req_free(&r);
        json_decref(o);
    }
    json_decref(j);
    return 0;
}
