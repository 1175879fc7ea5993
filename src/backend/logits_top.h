/*
 * logits_top.h — the head of logits rows held in host memory: the k largest
 * logits with their ids, the row maximum and the log-partition function.
 *
 * Owns: the host reduction behind ember_get_logits_top (include/ember.h),
 * used by the CPU backend and by any backend whose rows are on the host.
 * Must not: know samplers, slots or devices.
 */
#ifndef EMBER_BACKEND_LOGITS_TOP_H
#define EMBER_BACKEND_LOGITS_TOP_H

#include "ember.h"

/* For r < n_rows: out[r] = the head of rows[r] [n_vocab] with k entries
 * (1 <= k <= EMBER_LOGITS_TOP_MAX, k <= n_vocab): ids of the k largest
 * logits in descending order, the lower id first among equal logits, NaN
 * taken as -inf; .max the largest logit; .lse = max + log(sum_i
 * exp(l_i - max)) with the sum in double (+inf rows are not expected:
 * logits are finite or -inf). One pass per row. */
void ember_logits_top_host(const float *const *rows, int32_t n_rows, int64_t n_vocab, int32_t k,
                           ember_logits_top *out);

#endif
