/*
 * logits_top.c — the head of host logits rows (logits_top.h).
 *
 * One pass per row keeps the k best (logit, id) pairs in a sorted array
 * (insertion: a logit enters only when it beats the current k-th), and an
 * online log-sum-exp in double (Milakov & Gimelshein 2018, "Online
 * normalizer calculation for softmax"): the running maximum m and
 * s = sum exp(l - m), rescaled when m grows.
 */
#include "backend/logits_top.h"

#include <math.h>

/* a before b in the head's order: logit descending, then id ascending */
static inline int before(float la, int32_t ia, float lb, int32_t ib)
{
    return la > lb || (la == lb && ia < ib);
}

void ember_logits_top_host(const float *const *rows, int32_t n_rows, int64_t n_vocab, int32_t k,
                           ember_logits_top *out)
{
    if (k > EMBER_LOGITS_TOP_MAX) k = EMBER_LOGITS_TOP_MAX;
    if (k > n_vocab) k = (int32_t)n_vocab;
    for (int32_t r = 0; r < n_rows; r++) {
        const float *x = rows[r];
        ember_logits_top *t = &out[r];
        int32_t n = 0;
        double m = -INFINITY, s = 0.0;
        for (int64_t i = 0; i < n_vocab; i++) {
            float l = x[i];
            if (isnan(l)) l = -INFINITY;
            if (l > m) {
                s = s * exp(m - (double)l) + 1.0;
                m = l;
            } else if (l > -INFINITY) {
                s += exp((double)l - m);
            }
            const int32_t id = (int32_t)i;
            if (n == k && !before(l, id, t->logit[k - 1], t->id[k - 1])) continue;
            int32_t j = n < k ? n++ : k - 1;
            while (j > 0 && before(l, id, t->logit[j - 1], t->id[j - 1])) {
                t->logit[j] = t->logit[j - 1];
                t->id[j] = t->id[j - 1];
                j--;
            }
            t->logit[j] = l;
            t->id[j] = id;
        }
        t->n = n;
        t->max = (float)m;
        t->lse = m == -INFINITY ? -INFINITY : (float)(m + log(s));
    }
}
