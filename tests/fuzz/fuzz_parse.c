/*
 * fuzz_parse.c — libFuzzer target for the output parser: byte 0 picks the
 * tool format, reasoning syntax and forced-open thought, byte 1 the chunk
 * size (low 4 bits), stream_arguments (bit 4) and a tools array with
 * string-typed parameters "a", "city" (bit 5); the rest is model output. It is parsed whole and streamed in those
 * chunks; the two messages must be equal (abort otherwise), and nothing may
 * crash, hang or leak. Build: cmake -DEMBER_FUZZ=ON (clang); seed corpus:
 * tests/data/tool_outputs/ (any file works; the first two bytes are settings).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "chat/parse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static json_t *tools;
    if (!tools)
        tools = json_loads("[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"properties\":"
                           "{\"a\":{\"type\":\"string\"}}}}},{\"type\":\"function\",\"function\":{\"name\":"
                           "\"get_weather\",\"parameters\":{\"properties\":{\"city\":{\"type\":\"string\"}}}}}]",
                           0, NULL);
    if (size < 2) return 0;
    ember_chat_parser_config cfg = {
        .tool_format = (ember_tool_format)(data[0] % EMBER_TOOL_FORMAT_COUNT),
        .reasoning = (ember_reasoning_syntax)((data[0] / EMBER_TOOL_FORMAT_COUNT) % EMBER_REASONING_COUNT),
        .reasoning_open_at_start = (data[0] & 0x80) != 0,
        .id_seed = 1,
        .stream_arguments = (data[1] & 0x10) != 0,
        .tools = (data[1] & 0x20) ? tools : NULL,
    };
    size_t chunk = 1 + data[1] % 16;
    const char *text = (const char *)data + 2;
    size_t n = size - 2;
    json_t *whole = NULL, *streamed = NULL;
    if (ember_chat_parse_whole(&cfg, text, n, &whole) != EMBER_OK) abort();
    ember_chat_parser *p = NULL;
    if (ember_chat_parser_new(&cfg, &p) != EMBER_OK) abort();
    for (size_t at = 0; at < n; at += chunk)
        if (ember_chat_parser_feed(p, text + at, at + chunk < n ? chunk : n - at) != EMBER_OK) abort();
    if (ember_chat_parser_finish(p) != EMBER_OK || ember_chat_parser_message(p, &streamed) != EMBER_OK) abort();
    if (!json_equal(whole, streamed)) abort();
    json_decref(whole);
    json_decref(streamed);
    ember_chat_parser_free(p);
    return 0;
}
