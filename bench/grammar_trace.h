/*
 * grammar_trace.h — shared by bench/grammar.c (ember) and
 * bench/llama/grammar_llama.c (llama.cpp): the synthetic logits of one
 * decoding step and the timed sampling loops that do not depend on the
 * grammar engine, so both sides run the same arithmetic.
 *
 * Logits of step i: a fixed noise vector (xorshift, uniform in [-4, 0))
 * with the trace's target token at +6 and, on "reject" steps, a decoy token
 * (one the grammar forbids there) at +8, so an unconstrained greedy draw
 * picks the decoy and a constrained one must fall back to the target.
 * Must not: know either engine's API.
 */
#ifndef EMBER_BENCH_GRAMMAR_TRACE_H
#define EMBER_BENCH_GRAMMAR_TRACE_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static inline double gt_now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static inline void gt_noise(float *x, int32_t n)
{
    uint64_t r = 0x2545F4914F6CDD1DULL;
    for (int32_t i = 0; i < n; i++) {
        r ^= r << 13; r ^= r >> 7; r ^= r << 17;
        x[i] = -4.0f + 4.0f * (float)(r >> 40) / (float)(1u << 24);
    }
}

/* logits of one step: noise + target (+ decoy when >= 0) */
static inline void gt_step_logits(float *dst, const float *noise, int32_t n, int32_t target, int32_t decoy)
{
    memcpy(dst, noise, (size_t)n * sizeof *dst);
    dst[target] = 6.0f;
    if (decoy >= 0) dst[decoy] = 8.0f;
}

/* greedy: the unconstrained sampling step used as the baseline */
static inline int32_t gt_argmax(const float *x, int32_t n)
{
    int32_t best = 0;
    float bv = x[0];
    for (int32_t i = 1; i < n; i++) if (x[i] > bv) { bv = x[i]; best = i; }
    return best;
}

/* top-k (k <= 64) by a bounded insertion list, then softmax and a draw at
 * u in [0,1): a stand-in for a typical sampler chain (top-k 40, temp 1) */
static inline int32_t gt_topk_sample(const float *x, int32_t n, int k, double u)
{
    int32_t id[64]; float v[64]; int m = 0;
    for (int32_t i = 0; i < n; i++) {
        float xi = x[i];
        if (m == k && xi <= v[m - 1]) continue;
        int j = m < k ? m++ : k - 1;
        while (j > 0 && v[j - 1] < xi) { v[j] = v[j - 1]; id[j] = id[j - 1]; j--; }
        v[j] = xi; id[j] = i;
    }
    double p[64], s = 0;
    for (int j = 0; j < m; j++) { p[j] = __builtin_exp((double)(v[j] - v[0])); s += p[j]; }
    double t = u * s;
    for (int j = 0; j < m; j++) { t -= p[j]; if (t < 0) return id[j]; }
    return id[m - 1];
}

#endif
