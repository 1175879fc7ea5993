/*
 * metrics.h — GET /metrics in the Prometheus text exposition format 0.0.4
 * (prometheus.io/docs/instrumenting/exposition_formats/).
 *
 * Owns: metric names, help texts and types. Must not: read engine state
 * itself (the caller passes a snapshot).
 */
#ifndef EMBER_SERVER_METRICS_H
#define EMBER_SERVER_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h"

typedef struct metrics_input {
    const engine_stats *st;
    uint64_t kv_pool_tokens, kv_bytes;
    uint64_t n_http, n_http_errors;
} metrics_input;

/* A malloc'd text with one HELP, TYPE and sample line per metric; *len its
 * length. NULL when out of memory. */
char *metrics_render(const metrics_input *in, size_t *len);

#endif
