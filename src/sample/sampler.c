/*
 * sampler.c — the sampler chain: logits of one position in, one token out.
 *
 * Owns: logit bias, repetition/presence/frequency penalties over a window of
 * recent tokens, top-k, top-p (nucleus), min-p, temperature, and the seeded
 * draw. The order and the formulas are those of llama.cpp's default chain
 * (common/sampling.cpp, src/llama-sampler.cpp): logit_bias -> penalties ->
 * top_k -> top_p -> min_p -> temperature -> dist. Note that top-p and min-p
 * therefore see the logits before temperature, as in llama.cpp.
 * Must not: know about models, slots, grammars or threads (one sampler per
 * sequence; not thread-safe); allocate after ember_sampler_new.
 *
 * Formulas (llama.cpp src/llama-sampler.cpp):
 *  - penalties, for a token seen c > 0 times in the last penalty_last_n
 *    accepted tokens: l = l <= 0 ? l * repeat : l / repeat;
 *    l -= c * frequency + presence.
 *  - top-k: keep the k largest logits.
 *  - top-p: softmax over the survivors, sorted descending; keep the shortest
 *    prefix whose cumulative probability reaches p (at least one token).
 *  - min-p: keep tokens with l >= l_max + ln(min_p), i.e. p_i >= min_p * p_max.
 *  - temperature: l /= temp; temp <= 0 selects the argmax (greedy).
 *  - draw: u uniform in [0,1); the first candidate (in the chain's order)
 *    whose cumulative probability reaches u * sum.
 * The generator is ours (xoshiro256**, Blackman & Vigna 2018, seeded through
 * splitmix64), so draws match llama.cpp in distribution, not bit for bit.
 */
#include "sample/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"

struct ember_sampler {
    ember_sampler_params p;
    int32_t n_vocab;
    ember_logit_bias *bias;   /* [p.n_logit_bias], owned copy */
    /* penalties: occurrence counts over the window, and the window itself
     * (a ring of penalty_last_n tokens; absent when the window is all) */
    int32_t *count;           /* [n_vocab] */
    ember_token *ring;        /* [penalty_last_n] when penalty_last_n > 0 */
    int32_t ring_len, ring_head;
    ember_candidate *cand;    /* [n_vocab] scratch */
    ember_candidate top[EMBER_SAMPLER_TOP_MAX];   /* ember_sampler_candidates_top */
    uint64_t rng[4];
};

/* ---- generator: splitmix64 to seed, xoshiro256** to draw ---------------- */

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t xoshiro_next(uint64_t s[4])
{
    const uint64_t result = rotl(s[1] * 5, 7) * 9;
    const uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

static void seed_rng(ember_sampler *s)
{
    uint64_t x = s->p.seed;
    for (int i = 0; i < 4; i++)
        s->rng[i] = splitmix64(&x);
}

double ember_sampler_uniform(ember_sampler *s)
{
    return (double)(xoshiro_next(s->rng) >> 11) * 0x1.0p-53;
}

/* ---- parameters ---------------------------------------------------------- */

ember_sampler_params ember_sampler_default_params(void)
{
    /* llama.cpp's common_params_sampling defaults, except the seed, which is
     * fixed (0) so that a default sampler is reproducible. */
    ember_sampler_params p = {
        .temp = 0.8f,
        .top_k = 40,
        .top_p = 0.95f,
        .min_p = 0.05f,
        .repeat_penalty = 1.0f,
        .presence_penalty = 0.0f,
        .frequency_penalty = 0.0f,
        .penalty_last_n = 64,
        .seed = 0,
        .logit_bias = NULL,
        .n_logit_bias = 0,
    };
    return p;
}

static bool penalties_on(const ember_sampler *s)
{
    return s->p.penalty_last_n != 0 &&
           (s->p.repeat_penalty != 1.0f || s->p.frequency_penalty != 0.0f ||
            s->p.presence_penalty != 0.0f);
}

ember_status ember_sampler_new(const ember_sampler_params *p, int32_t n_vocab, ember_sampler **out)
{
    if (!out)
        return ember_error(EMBER_ERR_INVALID_ARG, "sampler: out is NULL");
    *out = NULL;
    if (!p)
        return ember_error(EMBER_ERR_INVALID_ARG, "sampler: params is NULL");
    if (n_vocab <= 0)
        return ember_error(EMBER_ERR_INVALID_ARG, "sampler: n_vocab %d must be > 0", n_vocab);
    if (isnan(p->temp) || isnan(p->top_p) || isnan(p->min_p))
        return ember_error(EMBER_ERR_INVALID_ARG, "sampler: temp, top_p and min_p must not be NaN");
    if (!isfinite(p->repeat_penalty) || p->repeat_penalty <= 0.0f)
        return ember_error(EMBER_ERR_INVALID_ARG, "sampler: repeat_penalty %g must be finite and > 0",
                           (double)p->repeat_penalty);
    if (!isfinite(p->presence_penalty) || !isfinite(p->frequency_penalty))
        return ember_error(EMBER_ERR_INVALID_ARG, "sampler: presence/frequency penalties must be finite");
    if (p->penalty_last_n < -1)
        return ember_error(EMBER_ERR_INVALID_ARG, "sampler: penalty_last_n %d must be >= -1",
                           p->penalty_last_n);
    if (p->n_logit_bias < 0 || (p->n_logit_bias > 0 && !p->logit_bias))
        return ember_error(EMBER_ERR_INVALID_ARG, "sampler: n_logit_bias %d without a logit_bias array",
                           p->n_logit_bias);
    for (int32_t i = 0; i < p->n_logit_bias; i++) {
        if (p->logit_bias[i].token < 0 || p->logit_bias[i].token >= n_vocab)
            return ember_error(EMBER_ERR_INVALID_ARG, "sampler: logit_bias[%d].token %d outside [0, %d)", i,
                               p->logit_bias[i].token, n_vocab);
        if (isnan(p->logit_bias[i].bias) || p->logit_bias[i].bias == INFINITY)
            return ember_error(EMBER_ERR_INVALID_ARG, "sampler: logit_bias[%d].bias must be a number or -inf",
                               i);
    }

    ember_sampler *s = calloc(1, sizeof *s);
    if (!s)
        return ember_error(EMBER_ERR_NOMEM, "sampler: out of memory");
    s->p = *p;
    s->n_vocab = n_vocab;
    s->cand = malloc((size_t)n_vocab * sizeof *s->cand);
    s->count = calloc((size_t)n_vocab, sizeof *s->count);
    if (p->n_logit_bias > 0)
        s->bias = malloc((size_t)p->n_logit_bias * sizeof *s->bias);
    if (p->penalty_last_n > 0)
        s->ring = malloc((size_t)p->penalty_last_n * sizeof *s->ring);
    if (!s->cand || !s->count || (p->n_logit_bias > 0 && !s->bias) || (p->penalty_last_n > 0 && !s->ring)) {
        ember_sampler_free(s);
        return ember_error(EMBER_ERR_NOMEM, "sampler: out of memory for n_vocab %d", n_vocab);
    }
    if (p->n_logit_bias > 0)
        memcpy(s->bias, p->logit_bias, (size_t)p->n_logit_bias * sizeof *s->bias);
    s->p.logit_bias = s->bias;
    seed_rng(s);
    *out = s;
    return EMBER_OK;
}

void ember_sampler_free(ember_sampler *s)
{
    if (!s)
        return;
    free(s->cand);
    free(s->count);
    free(s->bias);
    free(s->ring);
    free(s);
}

void ember_sampler_reset(ember_sampler *s)
{
    if (!s)
        return;
    memset(s->count, 0, (size_t)s->n_vocab * sizeof *s->count);
    s->ring_len = s->ring_head = 0;
    seed_rng(s);
}

void ember_sampler_accept(ember_sampler *s, ember_token t)
{
    if (!s || t < 0 || t >= s->n_vocab || s->p.penalty_last_n == 0)
        return;
    if (s->p.penalty_last_n < 0) {   /* window = all tokens */
        s->count[t]++;
        return;
    }
    int32_t cap = s->p.penalty_last_n;
    if (s->ring_len == cap) {        /* full: the oldest leaves the window */
        s->count[s->ring[s->ring_head]]--;
        s->ring[s->ring_head] = t;
        s->ring_head = (s->ring_head + 1) % cap;
    } else {
        s->ring[(s->ring_head + s->ring_len) % cap] = t;
        s->ring_len++;
    }
    s->count[t]++;
}

/* ---- ordering: logit descending, then id ascending ------------------------ */

static inline bool before(const ember_candidate *a, const ember_candidate *b)
{
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

static int cmp_cand(const void *x, const void *y)
{
    const ember_candidate *a = x, *b = y;
    return before(a, b) ? -1 : before(b, a) ? 1 : 0;
}

static inline void swap_cand(ember_candidate *a, ember_candidate *b)
{
    ember_candidate t = *a;
    *a = *b;
    *b = t;
}

/* Rearrange c[0..n) so that its k first elements are the k first in order,
 * sorted (quickselect with median-of-three pivots, then a sort of the k). */
static void partial_sort(ember_candidate *c, int32_t n, int32_t k)
{
    if (k <= 0)
        return;
    if (k < n) {
        int32_t lo = 0, hi = n - 1;
        while (hi > lo) {
            int32_t mid = lo + (hi - lo) / 2;
            if (before(&c[hi], &c[lo])) swap_cand(&c[hi], &c[lo]);
            if (before(&c[mid], &c[lo])) swap_cand(&c[mid], &c[lo]);
            if (before(&c[hi], &c[mid])) swap_cand(&c[hi], &c[mid]);
            ember_candidate pivot = c[mid];
            int32_t i = lo, j = hi;
            while (i <= j) {
                while (before(&c[i], &pivot)) i++;
                while (before(&pivot, &c[j])) j--;
                if (i <= j) {
                    swap_cand(&c[i], &c[j]);
                    i++;
                    j--;
                }
            }
            /* now c[lo..j] <= pivot-ish, c[i..hi] >= pivot-ish in order */
            if (k - 1 <= j)
                hi = j;
            else if (k - 1 >= i)
                lo = i;
            else
                break;
        }
    } else {
        k = n;
    }
    qsort(c, (size_t)k, sizeof *c, cmp_cand);
}

/* Softmax over c[0..n) into .p; returns false if every logit is -inf. */
static bool softmax(ember_candidate *c, int32_t n)
{
    float max_l = -INFINITY;
    for (int32_t i = 0; i < n; i++)
        if (c[i].logit > max_l) max_l = c[i].logit;
    if (max_l == -INFINITY)
        return false;
    double sum = 0.0;
    for (int32_t i = 0; i < n; i++) {
        c[i].p = expf(c[i].logit - max_l);
        sum += c[i].p;
    }
    for (int32_t i = 0; i < n; i++)
        c[i].p = (float)(c[i].p / sum);
    return true;
}

/* ---- the chain ------------------------------------------------------------ */

/* The chain from top-k on, over c[0..n) (whose logits have bias and
 * penalties applied); greedy keeps the argmax (lower id on ties). */
static int32_t chain(ember_sampler *s, ember_candidate *c, int32_t n, const ember_candidate **out);

/* c[0..n) from logits in id order, with logit bias and penalties. */
static void fill(ember_sampler *s, const float *logits)
{
    ember_candidate *c = s->cand;
    int32_t n = s->n_vocab;
    for (int32_t i = 0; i < n; i++) {
        float l = logits[i];
        c[i].id = i;
        c[i].logit = isnan(l) ? -INFINITY : l;   /* a NaN never wins */
        c[i].p = 0.0f;
    }

    /* candidates are in id order here, so bias and penalties index directly */
    for (int32_t i = 0; i < s->p.n_logit_bias; i++)
        c[s->bias[i].token].logit += s->bias[i].bias;

    if (penalties_on(s)) {
        const float rep = s->p.repeat_penalty, freq = s->p.frequency_penalty, pres = s->p.presence_penalty;
        for (int32_t i = 0; i < n; i++) {
            int32_t cnt = s->count[i];
            if (cnt <= 0)
                continue;
            float l = c[i].logit;
            l = l <= 0.0f ? l * rep : l / rep;
            c[i].logit = l - ((float)cnt * freq + pres);
        }
    }
}

int32_t ember_sampler_candidates(ember_sampler *s, const float *logits, const ember_candidate **out)
{
    fill(s, logits);
    return chain(s, s->cand, s->n_vocab, out);
}

/* logit of token id after bias and penalties (fill's edits for one token) */
static float adjusted(const ember_sampler *s, const float *logits, ember_token id)
{
    float l = isnan(logits[id]) ? -INFINITY : logits[id];
    for (int32_t i = 0; i < s->p.n_logit_bias; i++)
        if (s->bias[i].token == id) l += s->bias[i].bias;
    if (penalties_on(s) && s->count[id] > 0) {
        l = l <= 0.0f ? l * s->p.repeat_penalty : l / s->p.repeat_penalty;
        l -= (float)s->count[id] * s->p.frequency_penalty + s->p.presence_penalty;
    }
    return l;
}

bool ember_sampler_is_greedy(const ember_sampler *s) { return s->p.temp <= 0.0f; }

int32_t ember_sampler_candidates_top(ember_sampler *s, const float *logits, int32_t k, const ember_candidate **out)
{
    if (s->p.temp > 0.0f || k <= 1) return ember_sampler_candidates(s, logits, out);
    if (k > EMBER_SAMPLER_TOP_MAX) k = EMBER_SAMPLER_TOP_MAX;
    fill(s, logits);
    /* one pass keeping the k best in order (insertion below a threshold:
     * after the first few thousand logits almost nothing gets in) */
    ember_candidate *c = s->cand, *top = s->top;
    int32_t m = 0;
    for (int32_t i = 0; i < s->n_vocab; i++) {
        if (m == k && !before(&c[i], &top[k - 1])) continue;
        int32_t j = m < k ? m++ : k - 1;
        while (j > 0 && before(&c[i], &top[j - 1])) { top[j] = top[j - 1]; j--; }
        top[j] = c[i];
    }
    for (int32_t i = 0; i < m; i++) top[i].p = i == 0 ? 1.0f : 0.0f;
    *out = top;
    return m;
}

int32_t ember_sampler_candidates_subset(ember_sampler *s, const float *logits, const ember_token *ids, int32_t n_ids,
                                        const ember_candidate **out)
{
    ember_candidate *c = s->cand;
    int32_t n = 0;
    for (int32_t i = 0; i < n_ids; i++) {
        if (ids[i] < 0 || ids[i] >= s->n_vocab) continue;
        c[n].id = ids[i];
        c[n].logit = adjusted(s, logits, ids[i]);
        c[n].p = 0.0f;
        n++;
    }
    if (n == 0) {   /* nothing to draw from: token 0 with p 0 (the caller checks) */
        c[0] = (ember_candidate){0, -INFINITY, 0.0f};
        *out = c;
        return 1;
    }
    return chain(s, c, n, out);
}

static int32_t chain(ember_sampler *s, ember_candidate *c, int32_t n, const ember_candidate **out)
{
    if (s->p.temp <= 0.0f) {   /* greedy: the argmax, lower id on ties */
        int32_t best = 0;
        float best_l = c[0].logit;
        for (int32_t i = 1; i < n; i++)
            if (c[i].logit > best_l) { best_l = c[i].logit; best = i; }
        c[0] = c[best];
        c[0].p = 1.0f;
        *out = c;
        return 1;
    }

    int32_t sorted = 0;   /* c[0..sorted) is in order and precedes the rest */
    if (s->p.top_k > 0 && s->p.top_k < n) {
        partial_sort(c, n, s->p.top_k);
        n = sorted = s->p.top_k;
    }

    if (s->p.top_p < 1.0f && n > 1) {
        if (!softmax(c, n))
            goto degenerate;
        /* sort a prefix first; widen to everything if it is not enough */
        int32_t k = sorted ? sorted : (n < 256 ? n : 256);
        if (!sorted) partial_sort(c, n, k);
        double cum = 0.0;
        int32_t keep = n;
        for (int32_t i = 0; i < n; i++) {
            if (i == k) {
                partial_sort(c + k, n - k, n - k);
                k = n;
            }
            cum += c[i].p;
            if (cum >= s->p.top_p) {
                keep = i + 1;
                break;
            }
        }
        n = keep;
        sorted = n;
    }

    if (s->p.min_p > 0.0f && n > 1) {
        float max_l = -INFINITY;
        for (int32_t i = 0; i < n; i++)
            if (c[i].logit > max_l) max_l = c[i].logit;
        if (max_l == -INFINITY)
            goto degenerate;
        const float min_l = max_l + logf(s->p.min_p);
        int32_t m = 0;
        for (int32_t i = 0; i < n; i++)   /* stable: keeps sorted order */
            if (c[i].logit >= min_l) c[m++] = c[i];
        if (m == 0) {   /* min_p > 1: as llama.cpp, the top token stays */
            partial_sort(c, n, 1);
            m = 1;
        }
        n = m;
    }

    for (int32_t i = 0; i < n; i++)
        c[i].logit /= s->p.temp;

    if (!softmax(c, n))
        goto degenerate;
    *out = c;
    return n;

degenerate: /* every candidate is -inf (e.g. all biased away): keep the first */
    c[0].p = 1.0f;
    *out = c;
    return 1;
}

ember_token ember_sampler_sample(ember_sampler *s, const float *logits)
{
    if (!s || !logits)
        return 0;
    const ember_candidate *c;
    int32_t n = ember_sampler_candidates(s, logits, &c);
    return ember_sampler_draw(s, c, n);
}

static int cmp_id(const void *x, const void *y)
{
    const ember_candidate *a = x, *b = y;
    return (a->id > b->id) - (a->id < b->id);
}

int32_t ember_sampler_top_k(const ember_sampler *s)
{
    if (!s || s->p.n_logit_bias > 0 || penalties_on(s))
        return 0;
    if (s->p.temp <= 0.0f)
        return 1;
    if (s->p.top_k > 0 && s->p.top_k < s->n_vocab)
        return s->p.top_k <= EMBER_LOGITS_TOP_MAX ? s->p.top_k : 0;
    if (s->p.top_p < 1.0f || s->p.min_p > 0.0f)
        return EMBER_LOGITS_TOP_MAX < s->n_vocab ? EMBER_LOGITS_TOP_MAX : s->n_vocab;
    return 0;
}

ember_status ember_sampler_sample_top(ember_sampler *s, const ember_logits_top *top, ember_token *out)
{
    if (!s || !top || !out || top->n < 1 || top->n > EMBER_LOGITS_TOP_MAX)
        return ember_error(EMBER_ERR_INVALID_ARG, "sampler: sample_top needs a sampler, a head of 1..%d and out",
                           EMBER_LOGITS_TOP_MAX);
    if (s->p.n_logit_bias > 0 || penalties_on(s))
        return ember_error(EMBER_ERR_RANGE, "sampler: bias or penalties need the full row");
    if (s->p.temp <= 0.0f) {   /* the argmax; the head is in the chain's order */
        *out = top->id[0];
        return EMBER_OK;
    }
    const bool full = top->n >= s->n_vocab;   /* the head is the whole row */
    ember_candidate *c = s->cand;
    int32_t n = top->n;
    for (int32_t i = 0; i < n; i++)
        c[i] = (ember_candidate){top->id[i], top->logit[i], 0.0f};
    ember_sampler_params saved = s->p;
    if (s->p.top_k > 0 && s->p.top_k < s->n_vocab) {
        /* top-k survivors: the head's first top_k (the chain then sees them
         * exactly as after its own partial sort) */
        if (s->p.top_k > n)
            return ember_error(EMBER_ERR_RANGE, "sampler: top_k %d past a head of %d", s->p.top_k, n);
        n = s->p.top_k;
    } else if (s->p.top_p < 1.0f && !full) {
        /* top-p over the whole row: probabilities from the row's partition
         * function; the prefix must reach top_p inside the head */
        if (!(top->max > -INFINITY))
            goto whole;
        double cum = 0.0;
        int32_t keep = -1;
        for (int32_t i = 0; i < n; i++) {
            cum += (double)(float)exp((double)c[i].logit - (double)top->lse);
            if (cum >= s->p.top_p) {
                keep = i + 1;
                break;
            }
        }
        if (keep < 0)
            return ember_error(EMBER_ERR_RANGE, "sampler: top_p %g not reached in a head of %d", (double)s->p.top_p, n);
        n = keep;
        s->p.top_p = 1.0f;   /* done: the chain goes on from min-p */
    } else if (!full) {
        if (!(s->p.min_p > 0.0f))
            return ember_error(EMBER_ERR_RANGE, "sampler: a draw over the whole vocabulary needs the full row");
        const float min_l = top->max + logf(s->p.min_p);
        if (top->logit[n - 1] >= min_l)
            return ember_error(EMBER_ERR_RANGE, "sampler: min_p survivors past a head of %d", n);
    }
whole:
    if (!(saved.top_k > 0 && saved.top_k < s->n_vocab) && !(saved.top_p < 1.0f)) {
        /* nothing sorts the full row on this chain (min-p alone or
         * temperature alone): it filters and draws in id order, so the
         * head's survivors must be in id order too for the same draw */
        qsort(c, (size_t)n, sizeof *c, cmp_id);
    }
    s->p.top_k = 0;   /* already applied */
    const ember_candidate *cc;
    const int32_t m = chain(s, c, n, &cc);
    s->p = saved;
    *out = ember_sampler_draw(s, cc, m);
    return EMBER_OK;
}

ember_token ember_sampler_draw(ember_sampler *s, const ember_candidate *c, int32_t n)
{
    if (s->p.temp <= 0.0f)
        return c[0].id;
    /* one draw per call, also when one candidate is left, so that the stream
     * of draws does not depend on the logits */
    double u = ember_sampler_uniform(s);
    double cum = 0.0, total = 0.0;
    for (int32_t i = 0; i < n; i++)
        total += c[i].p;
    const double target = u * total;
    for (int32_t i = 0; i < n; i++) {
        cum += c[i].p;
        if (cum > target && c[i].p > 0.0f)
            return c[i].id;
    }
    for (int32_t i = n - 1; i > 0; i--)   /* rounding: the last nonzero */
        if (c[i].p > 0.0f) return c[i].id;
    return c[0].id;
}
