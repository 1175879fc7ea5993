/*
 * logits_top_ref.h — the reference for row heads (ember_get_logits_top),
 * written from the definition and independent of the code under test: sort
 * every (logit, id) pair with qsort (logit descending, NaN as -inf, lower id
 * first on ties), and the log-partition function in long double over the
 * whole row, two passes (max, then sum of exp(l - max)).
 */
#ifndef EMBER_TEST_LOGITS_TOP_REF_H
#define EMBER_TEST_LOGITS_TOP_REF_H

#include <math.h>
#include <stdlib.h>

typedef struct ref_pair { float l; int id; } ref_pair;

static inline int ref_pair_cmp(const void *a, const void *b)
{
    const ref_pair *x = a, *y = b;
    if (x->l > y->l) return -1;
    if (x->l < y->l) return 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* ids[k], logits[k], *max, *lse of row x[n] */
static inline void ref_logits_top(const float *x, int n, int k, int *ids, float *logits, float *max, double *lse)
{
    ref_pair *p = malloc(sizeof *p * (size_t)n);
    long double m = -INFINITY;
    for (int i = 0; i < n; i++) {
        p[i].l = isnan(x[i]) ? -INFINITY : x[i];
        p[i].id = i;
        if (p[i].l > m) m = p[i].l;
    }
    qsort(p, (size_t)n, sizeof *p, ref_pair_cmp);
    for (int i = 0; i < k; i++) {
        ids[i] = p[i].id;
        logits[i] = p[i].l;
    }
    long double s = 0;
    for (int i = 0; i < n; i++)
        if (p[i].l > -INFINITY) s += expl((long double)p[i].l - m);
    *max = (float)m;
    *lse = m == -INFINITY ? -INFINITY : (double)(m + logl(s));
    free(p);
}

#endif
