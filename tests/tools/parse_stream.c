/*
 * parse_stream.c — test tool: stream a model output file through ember's
 * output parser in fixed-size chunks and print, one JSON object per line,
 * the OpenAI chunk "delta" of every event (ember_chat_event_delta), then a
 * last line {"final": MESSAGE} with the parser's own message.
 * Usage: parse_stream TOOL_FORMAT REASONING OPEN(0|1) CHUNK FILE [TOOLS.json]
 * EMBER_STREAM_ARGUMENTS=1 in the environment sets stream_arguments.
 * Exit 0 on success, 2 on usage/IO, 1 on a parser error.
 * Must not: be used by the server; it exists for tests (tests/e2e/test_parse_stream.py).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/parse.h"

static void on_event(void *user, const ember_chat_event *ev)
{
    (void)user;
    json_t *d = NULL;
    if (ember_chat_event_delta(ev, &d) != EMBER_OK) {
        fprintf(stderr, "delta failed\n");
        exit(1);
    }
    if (!d) return;
    char *s = json_dumps(d, JSON_COMPACT);
    printf("%s\n", s);
    free(s);
    json_decref(d);
}

int main(int argc, char **argv)
{
    if (argc < 6) {
        fprintf(stderr, "usage: %s TOOL_FORMAT REASONING OPEN CHUNK FILE [TOOLS.json]\n", argv[0]);
        return 2;
    }
    ember_chat_parser_config cfg = {.on_event = on_event, .id_seed = 1};
    if (!ember_tool_format_from_name(argv[1], &cfg.tool_format) ||
        !ember_reasoning_syntax_from_name(argv[2], &cfg.reasoning)) {
        fprintf(stderr, "unknown format\n");
        return 2;
    }
    cfg.reasoning_open_at_start = atoi(argv[3]) != 0;
    const char *sa = getenv("EMBER_STREAM_ARGUMENTS");
    cfg.stream_arguments = sa && atoi(sa) != 0;
    size_t chunk = (size_t)atol(argv[4]);
    if (chunk == 0) chunk = 1;
    FILE *f = fopen(argv[5], "rb");
    if (!f) return 2;
    static char text[1 << 20];
    size_t n = fread(text, 1, sizeof text, f);
    fclose(f);
    json_t *tools = NULL;
    if (argc > 6) {
        json_error_t err;
        tools = json_load_file(argv[6], 0, &err);
        cfg.tools = tools;
    }
    ember_chat_parser *p = NULL;
    if (ember_chat_parser_new(&cfg, &p) != EMBER_OK) return 1;
    for (size_t at = 0; at < n; at += chunk)
        if (ember_chat_parser_feed(p, text + at, at + chunk < n ? chunk : n - at) != EMBER_OK) return 1;
    if (ember_chat_parser_finish(p) != EMBER_OK) return 1;
    json_t *m = NULL;
    if (ember_chat_parser_message(p, &m) != EMBER_OK) return 1;
    json_t *fin = json_pack("{s:o}", "final", m);
    char *s = json_dumps(fin, JSON_COMPACT);
    printf("%s\n", s);
    free(s);
    json_decref(fin);
    json_decref(tools);
    ember_chat_parser_free(p);
    return 0;
}
