/*
 * constrained.h — one grammar-constrained sampling step: the sampler chain
 * (sampler.c) and the grammar matcher (grammar.c) put together so that the
 * step costs about what an unconstrained one does, even with cold caches.
 *
 * Owns: the order of checks and draws below. Must not: know about slots,
 * models or HTTP; change the sampler's or the grammar's state other than by
 * their public calls (the token is NOT accepted into either here).
 *
 * The distribution. Let q be the chain's distribution over its candidates
 * (top-k, top-p, min-p, temperature on the raw logits) and A the allowed
 * tokens of the grammar state. The step draws from q restricted to A and
 * renormalised; when q puts no mass on A, from the chain run on the masked
 * logits (the tokens of A only). Without truncation (top_k 0, top_p 1,
 * min_p 0) both are exactly the eager "mask, then run the chain"
 * distribution; greedy is exactly the argmax over A either way.
 *
 * The work (the "lazy" strategy of llama.cpp's common_sampler, made exact):
 *  1. run the chain; greedy keeps its 32 best in the same pass as the argmax;
 *  2. draw t from q as ember_sampler_sample would (same uniform); if the
 *     grammar allows t, done — a step whose draw is allowed costs one
 *     token check more than an unconstrained one, and draws the same token;
 *  3. rejected: greedy takes the first allowed of its best 32; sampling
 *     checks every candidate (at most 256 of them) and draws again, with a
 *     second uniform, from the allowed ones by their p — P(t) = q_t + (1 -
 *     q(A)) q_t / q(A) = q_t / q(A), the restricted distribution; with more
 *     candidates (no top-k) it redraws from q up to 16 times until a draw is
 *     allowed (rejection sampling: the same distribution);
 *  4. only when that finds nothing (q puts no mass on A, e.g. a state that
 *     allows a few structural tokens the model did not rank): the allowed
 *     tokens of the state — listed when at most n_vocab/16 (a sparse state:
 *     its cold trie walk visits only their branches) and the chain run over
 *     them, else the full mask applied to a copy of the logits.
 * No whole-vocabulary mask is built unless step 4 meets a dense state, so
 * a new grammar (cold caches) costs about what a warm one does.
 */
#ifndef EMBER_SAMPLE_CONSTRAINED_H
#define EMBER_SAMPLE_CONSTRAINED_H

#include "ember.h"
#include "sample/grammar.h"

/* Draw the next token from logits [n_vocab] under grammar state g (which
 * must have a vocabulary of n_vocab tokens). scratch: n_vocab floats the
 * call may overwrite. The caller accepts *out into g and s afterwards.
 * Errors: EMBER_ERR_INVALID_ARG (NULL arguments, n_vocab not the grammar
 * vocabulary's size), EMBER_ERR_NOT_FOUND (the grammar allows no token, or
 * every allowed token has -inf logit / zero probability: *out is left -1),
 * EMBER_ERR_NOMEM (grammar cache). */
ember_status ember_sample_constrained(ember_sampler *s, ember_grammar_state *g, const float *logits,
                                     int32_t n_vocab, float *scratch, ember_token *out);

#endif
