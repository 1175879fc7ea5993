/*
 * constrained.c — one grammar-constrained sampling step (see constrained.h
 * for the distribution and the order of the work).
 *
 * Owns: ember_sample_constrained. Must not: accept tokens into the grammar
 * or the sampler, or allocate (scratch is the caller's).
 */
#include "sample/constrained.h"

#include <string.h>

#include "base/status.h"
#include "sample/sampler.h"

#define GREEDY_TOP 32      /* greedy: candidates looked at before any mask */
#define CHECK_ALL_MAX 256  /* sampling: candidate lists checked one by one */
#define REDRAWS 16         /* sampling over longer lists: redraws before the mask */

/* Step 4: the chain over the allowed tokens only. */
static ember_status masked_draw(ember_sampler *s, ember_grammar_state *g, const float *logits, int32_t n_vocab,
                                float *scratch, ember_token *out)
{
    const ember_token *ids = NULL;
    int32_t na = 0;
    ember_status st = ember_grammar_allowed_list(g, n_vocab / 16, &ids, &na);
    if (st != EMBER_OK) return st;
    if (na == 0) return ember_error(EMBER_ERR_NOT_FOUND, "grammar: no token is allowed here");
    const ember_candidate *c;
    int32_t n;
    if (ids) {
        n = ember_sampler_candidates_subset(s, logits, ids, na, &c);
    } else {
        memcpy(scratch, logits, sizeof *scratch * (size_t)n_vocab);
        if ((st = ember_grammar_apply(g, scratch, n_vocab)) != EMBER_OK) return st;
        n = ember_sampler_candidates(s, scratch, &c);
    }
    ember_token t = ember_sampler_draw(s, c, n);
    if (!ember_grammar_token_allowed(g, t))
        return ember_error(EMBER_ERR_NOT_FOUND, "grammar: every allowed token has zero probability");
    *out = t;
    return EMBER_OK;
}

ember_status ember_sample_constrained(ember_sampler *s, ember_grammar_state *g, const float *logits,
                                     int32_t n_vocab, float *scratch, ember_token *out)
{
    if (out) *out = -1;
    if (!s || !g || !logits || !scratch || !out)
        return ember_error(EMBER_ERR_INVALID_ARG, "sample_constrained: NULL argument");
    const bool greedy = ember_sampler_is_greedy(s);
    const ember_candidate *c;
    int32_t n = ember_sampler_candidates_top(s, logits, GREEDY_TOP, &c);
    /* 2: the unconstrained draw */
    ember_token t = ember_sampler_draw(s, c, n);
    if (ember_grammar_token_allowed(g, t)) {
        *out = t;
        return EMBER_OK;
    }
    /* 3: look further among the chain's candidates */
    if (greedy) {
        for (int32_t i = 1; i < n; i++)
            if (ember_grammar_token_allowed(g, c[i].id)) {
                *out = c[i].id;
                return EMBER_OK;
            }
    } else if (n <= CHECK_ALL_MAX) {
        bool ok[CHECK_ALL_MAX];
        double mass = 0.0;
        for (int32_t i = 0; i < n; i++) {
            ok[i] = c[i].p > 0.0f && c[i].id != t && ember_grammar_token_allowed(g, c[i].id);
            if (ok[i]) mass += c[i].p;
        }
        if (mass > 0.0) {
            const double target = ember_sampler_uniform(s) * mass;
            double cum = 0.0;
            int32_t last = -1;
            for (int32_t i = 0; i < n; i++) {
                if (!ok[i]) continue;
                last = i;
                cum += c[i].p;
                if (cum > target) break;
            }
            *out = c[last].id;   /* past the end by rounding: the last allowed */
            return EMBER_OK;
        }
    } else {
        for (int r = 0; r < REDRAWS; r++) {
            t = ember_sampler_draw(s, c, n);
            if (ember_grammar_token_allowed(g, t)) {
                *out = t;
                return EMBER_OK;
            }
        }
    }
    /* 4: the chain's candidates carry no allowed token */
    return masked_draw(s, g, logits, n_vocab, scratch, out);
}
