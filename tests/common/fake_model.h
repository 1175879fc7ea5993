/*
 * fake_model.h — a deterministic toy "model" for testing the engine and the
 * server without weights (header-only; tests and tests/tools include it).
 *
 * Vocabulary: tokens 0..255 are bytes, 256 is BOS, 257 is EOS.
 * "KV cache": each sequence keeps the tokens it was fed; the pool counts them.
 * Next token: a hash (FNV-1a) of the sequence's WHOLE history up to and
 * including the entry, so an output is right only if the scheduler fed every
 * position of the right sequence in order: a mixed-up batch changes it.
 * The rule (fake_next) is computable without the engine, which is what the
 * tests compare against. An entry that sets batch.embd gets an "embedding"
 * of FAKE_N_EMBD floats from the same hash (fake_embd), so pooling over the
 * wrong positions or sequences shows.
 *
 * decode() checks the contract of ember_decode in include/ember.h (tokens in
 * vocab, positions consecutive per sequence, n_ctx, pool) and counts
 * violations in n_violations; tests assert it stays 0.
 */
#ifndef EMBER_TESTS_FAKE_MODEL_H
#define EMBER_TESTS_FAKE_MODEL_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/engine.h"

#define FAKE_N_VOCAB 258
#define FAKE_BOS 256
#define FAKE_EOS 257
#define FAKE_N_EMBD 4

typedef struct fake_model {
    int32_t n_seq, n_ctx, n_batch_max;
    uint32_t pool, used;
    ember_token **kv;       /* [n_seq][n_ctx] */
    int32_t *len;           /* [n_seq] */
    float *logits;          /* [n_batch_max][n_vocab] */
    int32_t *row;           /* batch entry -> logits row, -1 */
    float *embd;            /* [n_batch_max][FAKE_N_EMBD] */
    int8_t *has_embd;       /* [n_batch_max] */
    int n_decode, n_violations, max_batch;
    int eos_mod;            /* EOS when hash % eos_mod == 0; 0: never */
    double delay_s;         /* sleep per decode call (server tests) */
    /* per step: which sequences had entries (last decode call) */
    int32_t *entries_of_seq;
} fake_model;

typedef struct fake_sampler {
    ember_sampler_params p;
    ember_logit_bias lb[64];
    uint64_t rng;
} fake_sampler;

static inline uint32_t fake_hash(const ember_token *t, int32_t n)
{
    uint32_t h = 2166136261u;
    for (int32_t i = 0; i < n; i++) {
        h ^= (uint32_t)t[i];
        h *= 16777619u;
    }
    return h;
}

/* The model's rule: logits after history t[0..n). The argmax is the "next"
 * token: mostly lowercase letters and spaces. */
static inline void fake_logits(const ember_token *t, int32_t n, int eos_mod, float *out)
{
    uint32_t h = fake_hash(t, n);
    for (int32_t j = 0; j < FAKE_N_VOCAB; j++) {
        uint32_t x = (h ^ ((uint32_t)j * 2654435761u)) * 2246822519u;
        out[j] = (float)((x >> 8) % 1000) / 1000.0f;
    }
    int32_t next = (h % 5 == 0) ? ' ' : 'a' + (int32_t)((h >> 3) % 26);
    if (eos_mod > 0 && (h >> 7) % (uint32_t)eos_mod == 0) next = FAKE_EOS;
    out[next] = 8.0f;
    out[(next + 1) % 256] = 6.5f;   /* a runner-up, for sampling tests */
}

/* The "embedding" after history t[0..n): FAKE_N_EMBD values in [-1, 1). */
static inline void fake_embd(const ember_token *t, int32_t n, float *out)
{
    uint32_t h = fake_hash(t, n);
    for (int32_t k = 0; k < FAKE_N_EMBD; k++) {
        uint32_t x = (h ^ ((uint32_t)(k + 1) * 2246822519u)) * 2654435761u;
        out[k] = (float)((x >> 8) % 2000) / 1000.0f - 1.0f;
    }
}

static inline int32_t fake_argmax(const float *l)
{
    int32_t b = 0;
    for (int32_t j = 1; j < FAKE_N_VOCAB; j++) if (l[j] > l[b]) b = j;
    return b;
}

static ember_status fake_decode(void *ctx, const ember_batch *b)
{
    fake_model *m = ctx;
    m->n_decode++;
    if (b->n_tokens > m->max_batch) m->max_batch = b->n_tokens;
    if (b->n_tokens < 1 || b->n_tokens > m->n_batch_max) { m->n_violations++; return EMBER_ERR_INVALID_ARG; }
    int32_t want[64];
    for (int32_t s = 0; s < m->n_seq; s++) { want[s] = m->len[s]; m->entries_of_seq[s] = 0; }
    for (int32_t i = 0; i < b->n_tokens; i++) {
        int32_t s = b->seq_id[i];
        if (s < 0 || s >= m->n_seq || b->token[i] < 0 || b->token[i] >= FAKE_N_VOCAB || b->pos[i] != want[s]) {
            m->n_violations++;
            return EMBER_ERR_INVALID_ARG;
        }
        if (b->pos[i] >= m->n_ctx) return EMBER_ERR_RANGE;
        want[s]++;
    }
    if (m->used + (uint32_t)b->n_tokens > m->pool) return EMBER_ERR_RANGE;
    int32_t n_rows = 0;
    for (int32_t i = 0; i < b->n_tokens; i++) {
        int32_t s = b->seq_id[i];
        m->kv[s][m->len[s]++] = b->token[i];
        m->used++;
        m->entries_of_seq[s]++;
        m->row[i] = -1;
        m->has_embd[i] = b->embd && b->embd[i];
        if (m->has_embd[i]) fake_embd(m->kv[s], m->len[s], m->embd + (size_t)i * FAKE_N_EMBD);
        if (b->logits[i]) {
            m->row[i] = n_rows;
            fake_logits(m->kv[s], m->len[s], m->eos_mod, m->logits + (size_t)n_rows * FAKE_N_VOCAB);
            n_rows++;
        }
    }
    if (m->delay_s > 0) {
        struct timespec ts = {0, (long)(m->delay_s * 1e9)};
        nanosleep(&ts, NULL);
    }
    return EMBER_OK;
}

static const float *fake_get_logits(void *ctx, int32_t i)
{
    fake_model *m = ctx;
    return m->row[i] < 0 ? NULL : m->logits + (size_t)m->row[i] * FAKE_N_VOCAB;
}

static const float *fake_get_embd(void *ctx, int32_t i)
{
    fake_model *m = ctx;
    return m->has_embd[i] ? m->embd + (size_t)i * FAKE_N_EMBD : NULL;
}

static ember_status fake_seq_remove(void *ctx, ember_seq_id s)
{
    fake_model *m = ctx;
    m->used -= (uint32_t)m->len[s];
    m->len[s] = 0;
    return EMBER_OK;
}

static ember_status fake_seq_truncate(void *ctx, ember_seq_id s, ember_pos n_keep)
{
    fake_model *m = ctx;
    if (n_keep < 0 || n_keep > m->len[s]) { m->n_violations++; return EMBER_ERR_INVALID_ARG; }
    m->used -= (uint32_t)(m->len[s] - n_keep);
    m->len[s] = n_keep;
    return EMBER_OK;
}

static ember_status fake_seq_fork(void *ctx, ember_seq_id src, ember_seq_id dst, ember_pos n)
{
    fake_model *m = ctx;
    if (m->len[dst] != 0 || n > m->len[src] || src == dst) { m->n_violations++; return EMBER_ERR_INVALID_ARG; }
    memcpy(m->kv[dst], m->kv[src], sizeof(ember_token) * (size_t)n);
    m->len[dst] = n;
    m->used += (uint32_t)n;   /* no block sharing in the fake: a fork costs its length */
    return EMBER_OK;
}

static ember_pos fake_seq_len(void *ctx, ember_seq_id s) { return ((fake_model *)ctx)->len[s]; }
static uint32_t fake_kv_free(void *ctx) { fake_model *m = ctx; return m->pool - m->used; }

static ember_status fake_sampler_new(void *ctx, const ember_sampler_params *p, int32_t n_vocab, ember_sampler **out)
{
    fake_sampler *s = calloc(1, sizeof *s);
    if (!s) return EMBER_ERR_NOMEM;
    s->p = *p;
    int32_t n = p->n_logit_bias < 64 ? p->n_logit_bias : 64;
    if (n > 0) memcpy(s->lb, p->logit_bias, sizeof *s->lb * (size_t)n);
    s->p.n_logit_bias = n;
    s->p.logit_bias = s->lb;
    s->rng = p->seed * 0x9E3779B97F4A7C15ull + 1;
    *out = (ember_sampler *)s;
    return EMBER_OK;
}

static void fake_sampler_free(void *ctx, ember_sampler *s) { free(s); }

/* greedy when temp <= 0, else a softmax draw at temperature temp */
static ember_token fake_sampler_sample(void *ctx, ember_sampler *sp, const float *logits)
{
    fake_sampler *s = (fake_sampler *)sp;
    float l[FAKE_N_VOCAB];
    memcpy(l, logits, sizeof l);
    for (int32_t i = 0; i < s->p.n_logit_bias; i++) l[s->lb[i].token] += s->lb[i].bias;
    if (s->p.temp <= 0) return fake_argmax(l);
    double sum = 0, w[FAKE_N_VOCAB];
    float mx = l[fake_argmax(l)];
    for (int32_t j = 0; j < FAKE_N_VOCAB; j++) sum += (w[j] = exp((l[j] - mx) / s->p.temp));
    s->rng ^= s->rng << 13; s->rng ^= s->rng >> 7; s->rng ^= s->rng << 17;
    double u = (double)(s->rng >> 11) / 9007199254740992.0 * sum;
    for (int32_t j = 0; j < FAKE_N_VOCAB; j++) if ((u -= w[j]) <= 0) return j;
    return FAKE_N_VOCAB - 1;
}

static void fake_sampler_accept(void *ctx, ember_sampler *s, ember_token t) {}

static int32_t fake_token_piece(void *ud, ember_token t, char *buf, int32_t cap)
{
    if (t < 0 || t >= FAKE_N_VOCAB) return -1;
    if (t >= 256) return 0;
    if (cap >= 1) buf[0] = (char)t;
    return 1;
}

static bool fake_is_eog(void *ud, ember_token t) { return t == FAKE_EOS; }

static inline fake_model *fake_model_new(int32_t n_seq, int32_t n_ctx, uint32_t pool, int32_t n_batch_max)
{
    fake_model *m = calloc(1, sizeof *m);
    m->n_seq = n_seq;
    m->n_ctx = n_ctx;
    m->pool = pool;
    m->n_batch_max = n_batch_max;
    m->kv = calloc((size_t)n_seq, sizeof *m->kv);
    for (int32_t s = 0; s < n_seq; s++) m->kv[s] = calloc((size_t)n_ctx + 1, sizeof(ember_token));
    m->len = calloc((size_t)n_seq, sizeof *m->len);
    m->entries_of_seq = calloc((size_t)n_seq, sizeof *m->entries_of_seq);
    m->logits = calloc((size_t)n_batch_max * FAKE_N_VOCAB, sizeof(float));
    m->row = calloc((size_t)n_batch_max, sizeof *m->row);
    m->embd = calloc((size_t)n_batch_max * FAKE_N_EMBD, sizeof *m->embd);
    m->has_embd = calloc((size_t)n_batch_max, sizeof *m->has_embd);
    return m;
}

static inline void fake_model_free(fake_model *m)
{
    for (int32_t s = 0; s < m->n_seq; s++) free(m->kv[s]);
    free(m->kv);
    free(m->len);
    free(m->entries_of_seq);
    free(m->logits);
    free(m->row);
    free(m->embd);
    free(m->has_embd);
    free(m);
}

static inline engine_runtime fake_runtime(fake_model *m)
{
    return (engine_runtime){
        .ctx = m, .n_vocab = FAKE_N_VOCAB, .decode = fake_decode, .get_logits = fake_get_logits,
        .seq_remove = fake_seq_remove, .seq_truncate = fake_seq_truncate, .seq_fork = fake_seq_fork,
        .seq_len = fake_seq_len, .kv_free_tokens = fake_kv_free, .sampler_new = fake_sampler_new,
        .sampler_free = fake_sampler_free, .sampler_sample = fake_sampler_sample,
        .sampler_accept = fake_sampler_accept, .n_embd = FAKE_N_EMBD, .get_embeddings = fake_get_embd,
    };
}

static inline engine_vocab fake_vocab(void)
{
    return (engine_vocab){.ud = NULL, .token_piece = fake_token_piece, .is_eog = fake_is_eog};
}

/* Greedy generation run directly on the rule, without the engine: the
 * expected text of a prompt. Returns the number of bytes written; *eos tells
 * whether it ended on EOS. */
static inline int32_t fake_reference(const ember_token *prompt, int32_t n_prompt, int32_t n_predict, int eos_mod,
                                     char *out, bool *eos)
{
    ember_token *t = malloc(sizeof *t * (size_t)(n_prompt + n_predict + 1));
    memcpy(t, prompt, sizeof *t * (size_t)n_prompt);
    int32_t n = n_prompt, n_out = 0;
    float l[FAKE_N_VOCAB];
    *eos = false;
    for (int32_t k = 0; k < n_predict; k++) {
        fake_logits(t, n, eos_mod, l);
        int32_t next = fake_argmax(l);
        if (next == FAKE_EOS) { *eos = true; break; }
        out[n_out++] = (char)next;
        t[n++] = next;
    }
    out[n_out] = '\0';
    free(t);
    return n_out;
}

#endif
