/*
 * sampler.h — internals of the sampler chain shared with its tests.
 *
 * Owns: the candidate list type and the chain without the final draw, so that
 * tests can compare the distribution a sampler draws from against an
 * independent reference. Must not: know about models, slots or HTTP.
 */
#ifndef EMBER_SAMPLE_SAMPLER_H
#define EMBER_SAMPLE_SAMPLER_H

#include <stdbool.h>

#include "ember.h"

/* One candidate token: its id, its logit after the chain's edits, and its
 * probability (softmax of the candidates' logits) once computed. */
typedef struct ember_candidate {
    ember_token id;
    float logit;
    float p;
} ember_candidate;

/* Run the chain on logits [n_vocab] without drawing: logit bias, penalties,
 * top-k, top-p, min-p, temperature, then softmax over the survivors. On
 * return *out points to the n candidates (the return value, >= 1) inside the
 * sampler, valid until its next call; their p sum to 1. With temp <= 0 the
 * result is the single argmax (after bias and penalties), p = 1.
 * Tie order among equal logits: lower token id first. */
int32_t ember_sampler_candidates(ember_sampler *s, const float *logits, const ember_candidate **out);

/* For constrained decoding (src/sample/constrained.c), which must look past
 * the chain's first choice without masking the whole vocabulary:
 *
 * ember_sampler_candidates_top: as ember_sampler_candidates, except that a
 * greedy sampler returns its k best candidates (k <= EMBER_SAMPLER_TOP_MAX),
 * in the chain's order (logit descending, lower id first), found in one pass
 * like the argmax; c[0] is the greedy choice (p = 1, the others p = 0).
 *
 * ember_sampler_candidates_subset: the chain run over the tokens ids[0..n)
 * only (bias and penalties applied to each, then top-k, top-p, min-p,
 * temperature and softmax as on a full vocabulary whose other logits are
 * -inf, which is what a masked draw sees). Ids out of range are skipped;
 * none left: one candidate (id 0) with p 0.
 *
 * ember_sampler_draw: the final draw of ember_sampler_sample over c[0..n)
 * (greedy: c[0]; else one uniform, inverse CDF in the candidates' order). */
#define EMBER_SAMPLER_TOP_MAX 64
int32_t ember_sampler_candidates_top(ember_sampler *s, const float *logits, int32_t k, const ember_candidate **out);
int32_t ember_sampler_candidates_subset(ember_sampler *s, const float *logits, const ember_token *ids, int32_t n_ids,
                                        const ember_candidate **out);
ember_token ember_sampler_draw(ember_sampler *s, const ember_candidate *c, int32_t n);
bool ember_sampler_is_greedy(const ember_sampler *s);

/* Uniform double in [0, 1) from the sampler's generator (xoshiro256**,
 * seeded by splitmix64 from params.seed). Advances the generator. */
double ember_sampler_uniform(ember_sampler *s);

#endif
