/*
 * metrics.c — Prometheus text for GET /metrics (see metrics.h). Names follow
 * Prometheus conventions: counters end in _total, units in the name
 * (_seconds, _bytes, _tokens).
 */
#include "server/metrics.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct buf { char *p; size_t len, cap; bool oom; } buf;

static void put(buf *b, const char *name, const char *type, const char *help, double v)
{
    for (int attempt = 0; attempt < 2 && !b->oom; attempt++) {
        size_t room = b->cap - b->len;
        int n = snprintf(b->p + b->len, room, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name, type, name, v);
        if (n >= 0 && (size_t)n < room) { b->len += (size_t)n; return; }
        size_t cap = b->cap * 2 + (size_t)n + 1;
        char *p = realloc(b->p, cap);
        if (!p) { b->oom = true; return; }
        b->p = p;
        b->cap = cap;
    }
}

/* Append printf-formatted text (labelled series). */
static void putf(buf *b, const char *fmt, ...)
{
    for (int attempt = 0; attempt < 2 && !b->oom; attempt++) {
        size_t room = b->cap - b->len;
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p + b->len, room, fmt, ap);
        va_end(ap);
        if (n >= 0 && (size_t)n < room) { b->len += (size_t)n; return; }
        size_t cap = b->cap * 2 + (size_t)n + 1;
        char *p = realloc(b->p, cap);
        if (!p) { b->oom = true; return; }
        b->p = p;
        b->cap = cap;
    }
}

/* Speculative decoding counters (src/engine/spec): drafts, drafted and
 * accepted tokens, and per draft position the drafted / accepted counts. */
static void put_spec(buf *b, const spec_stats *sp)
{
    put(b, "ember_spec_drafts_total", "counter", "Drafts verified (speculative decoding).", (double)sp->n_drafts);
    put(b, "ember_spec_draft_tokens_total", "counter", "Draft tokens verified.", (double)sp->n_drafted);
    put(b, "ember_spec_draft_tokens_accepted_total", "counter", "Draft tokens accepted.", (double)sp->n_accepted);
    put(b, "ember_spec_acceptance_ratio", "gauge", "Accepted / drafted tokens.",
        sp->n_drafted ? (double)sp->n_accepted / (double)sp->n_drafted : 0.0);
    int n = 0;
    while (n < SPEC_MAX_DRAFT && sp->drafted_at[n]) n++;
    putf(b, "# HELP ember_spec_position_drafted_total Drafts that had a token at this position (0-based).\n"
            "# TYPE ember_spec_position_drafted_total counter\n");
    for (int i = 0; i < n; i++)
        putf(b, "ember_spec_position_drafted_total{position=\"%d\"} %llu\n", i, (unsigned long long)sp->drafted_at[i]);
    putf(b, "# HELP ember_spec_position_accepted_total Drafts whose token at this position was accepted.\n"
            "# TYPE ember_spec_position_accepted_total counter\n");
    for (int i = 0; i < n; i++)
        putf(b, "ember_spec_position_accepted_total{position=\"%d\"} %llu\n", i, (unsigned long long)sp->accepted_at[i]);
    putf(b, "# HELP ember_spec_position_acceptance_ratio Acceptance at this draft position.\n"
            "# TYPE ember_spec_position_acceptance_ratio gauge\n");
    for (int i = 0; i < n; i++)
        putf(b, "ember_spec_position_acceptance_ratio{position=\"%d\"} %.6g\n", i,
             (double)sp->accepted_at[i] / (double)sp->drafted_at[i]);
}

/* llama-server's own series, named and typed as its /metrics writes them
 * (tools/server/server-task.cpp server_task_result_metrics::to_metrics):
 * the llamacpp: prefix, counters then gauges, the per-position accepted
 * drafts as a labelled counter. Its throughput gauges are over a recent
 * window; here they are over the server's life (tokens / step seconds). */
static void put_llamacpp(buf *b, const engine_stats *st)
{
    const spec_stats *sp = &st->spec;
    put(b, "llamacpp:prompt_tokens_total", "counter", "Number of prompt tokens processed, excluding cached tokens",
        (double)st->n_prompt_tokens);
    put(b, "llamacpp:prompt_tokens_cached_total", "counter", "Number of prompt tokens reused from the cache",
        (double)st->n_prompt_tokens_cached);
    put(b, "llamacpp:prompt_seconds_total", "counter", "Total time spent processing prompts", st->t_prompt_s);
    put(b, "llamacpp:tokens_predicted_total", "counter", "Number of generation tokens processed",
        (double)st->n_gen_tokens);
    put(b, "llamacpp:tokens_predicted_seconds_total", "counter", "Total time spent generating tokens", st->t_gen_s);
    put(b, "llamacpp:n_decode_total", "counter", "Total number of decode steps (batched forward passes)",
        (double)st->n_steps);
    put(b, "llamacpp:n_tokens_max", "counter", "Largest observed sequence length (prompt + generation)",
        (double)st->n_tokens_max);
    put(b, "llamacpp:spec_decode_num_draft_tokens_total", "counter", "Speculative: Total draft tokens generated",
        (double)sp->n_drafted);
    put(b, "llamacpp:spec_decode_num_accepted_tokens_total", "counter",
        "Speculative: Total draft tokens accepted by the target model", (double)sp->n_accepted);
    put(b, "llamacpp:spec_decode_num_drafts_total", "counter",
        "Speculative: Total speculative decoding verification steps", (double)sp->n_drafts);
    put(b, "llamacpp:prompt_tokens_seconds", "gauge", "Average prompt throughput in tokens/s",
        st->t_prompt_s > 0 ? (double)st->n_prompt_tokens / st->t_prompt_s : 0.0);
    put(b, "llamacpp:predicted_tokens_seconds", "gauge", "Average generation throughput in tokens/s",
        st->t_gen_s > 0 ? (double)st->n_gen_tokens / st->t_gen_s : 0.0);
    put(b, "llamacpp:requests_processing", "gauge", "Number of requests processing", (double)st->n_busy);
    put(b, "llamacpp:requests_deferred", "gauge", "Number of requests deferred", (double)st->n_queued);
    put(b, "llamacpp:n_busy_slots_per_decode", "gauge", "Average number of busy slots per decode step",
        (double)st->n_busy_slot_steps / (st->n_steps > 0 ? (double)st->n_steps : 1.0));
    int n = 0;
    while (n < SPEC_MAX_DRAFT && sp->drafted_at[n]) n++;
    if (n > 0) {
        putf(b, "# HELP llamacpp:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position\n"
                "# TYPE llamacpp:spec_decode_num_accepted_tokens_per_pos_total counter\n");
        for (int i = 0; i < n; i++)
            putf(b, "llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position=\"%d\"} %llu\n", i,
                 (unsigned long long)sp->accepted_at[i]);
    }
}

/* Drafted / accepted tokens per speculative method (--spec-type's names);
 * one method runs at a time, so one series each. */
static void put_spec_method(buf *b, const engine_stats *st)
{
    const char *m = spec_type_name((spec_type)st->spec_type);
    putf(b, "# HELP ember_spec_method_draft_tokens_total Draft tokens verified, per speculative method.\n"
            "# TYPE ember_spec_method_draft_tokens_total counter\n"
            "ember_spec_method_draft_tokens_total{method=\"%s\"} %llu\n"
            "# HELP ember_spec_method_accepted_tokens_total Draft tokens accepted, per speculative method.\n"
            "# TYPE ember_spec_method_accepted_tokens_total counter\n"
            "ember_spec_method_accepted_tokens_total{method=\"%s\"} %llu\n",
         m, (unsigned long long)st->spec.n_drafted, m, (unsigned long long)st->spec.n_accepted);
}

char *metrics_render(const metrics_input *in, size_t *len)
{
    buf b = {.p = malloc(4096), .cap = 4096};
    if (!b.p) return NULL;
    b.p[0] = 0;
    const engine_stats *st = in->st;
    put(&b, "ember_prompt_tokens_total", "counter", "Prompt tokens decoded (prefix-cache hits excluded).",
        (double)st->n_prompt_tokens);
    put(&b, "ember_prompt_tokens_cached_total", "counter", "Prompt tokens taken from the prefix cache.",
        (double)st->n_prompt_tokens_cached);
    put(&b, "ember_prompt_seconds_total", "counter", "Decode time spent on prompt tokens.", st->t_prompt_s);
    put(&b, "ember_tokens_predicted_total", "counter", "Tokens generated.", (double)st->n_gen_tokens);
    put(&b, "ember_tokens_predicted_seconds_total", "counter", "Decode time spent on generated tokens.", st->t_gen_s);
    put(&b, "ember_decode_steps_total", "counter", "Engine steps (batched decode calls).", (double)st->n_steps);
    put(&b, "ember_decode_steps_pipelined_total", "counter",
        "Steps whose successor was queued on the device before the host read their tokens (greedy decode).",
        (double)st->n_steps_pipelined);
    put(&b, "ember_requests_finished_total", "counter", "Requests finished (any reason).", (double)st->n_requests_done);
    put(&b, "ember_requests_cancelled_total", "counter", "Requests cancelled (client gone or shutdown).",
        (double)st->n_requests_cancelled);
    put(&b, "ember_requests_preempted_total", "counter",
        "Times the newest request gave up its KV cache for a full pool and waited (it resumes by recomputing).",
        (double)st->n_preemptions);
    put(&b, "ember_requests_processing", "gauge", "Requests holding a slot.", (double)st->n_busy);
    put(&b, "ember_requests_deferred", "gauge", "Requests waiting for a slot.", (double)st->n_queued);
    put(&b, "ember_slots", "gauge", "Slots (--parallel).", (double)st->n_slots);
    put(&b, "ember_n_ctx_tokens", "gauge", "Most tokens one slot may hold (-c).", (double)st->n_ctx);
    put(&b, "ember_batch_max_seen_tokens", "gauge", "Largest batch decoded in one step.", (double)st->max_batch_seen);
    put(&b, "ember_kv_cache_tokens", "gauge", "KV pool size shared by all slots.", (double)in->kv_pool_tokens);
    put(&b, "ember_kv_cache_free_tokens", "gauge", "KV pool tokens free.", (double)st->kv_free_tokens);
    put(&b, "ember_kv_cache_usage_ratio", "gauge", "Fraction of the KV pool in use (prefix caches included).",
        in->kv_pool_tokens ? 1.0 - (double)st->kv_free_tokens / (double)in->kv_pool_tokens : 0.0);
    put(&b, "ember_kv_cache_bytes", "gauge", "Bytes of KV cache allocated.", (double)in->kv_bytes);
    put(&b, "ember_http_requests_total", "counter", "HTTP requests routed.", (double)in->n_http);
    put(&b, "ember_http_errors_total", "counter", "HTTP responses with status >= 400.", (double)in->n_http_errors);
    if (st->spec_on) put_spec(&b, &st->spec);
    if (st->spec_on) put_spec_method(&b, st);
    put_llamacpp(&b, st);
    if (b.oom) { free(b.p); return NULL; }
    *len = b.len;
    return b.p;
}
