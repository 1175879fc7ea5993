/*
 * sampler.h — internals of the sampler chain shared with its tests.
 *
 * Owns: the candidate list type and the chain without the final draw, so that
 * tests can compare the distribution a sampler draws from against an
 * independent reference. Must not: know about models, slots or HTTP.
 */
#ifndef EMBER_SAMPLE_SAMPLER_H
#define EMBER_SAMPLE_SAMPLER_H

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

/* Uniform double in [0, 1) from the sampler's generator (xoshiro256**,
 * seeded by splitmix64 from params.seed). Advances the generator. */
double ember_sampler_uniform(ember_sampler *s);

#endif
