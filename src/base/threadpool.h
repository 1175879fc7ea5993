/*
 * threadpool.h — a fixed set of worker threads that run one task at a time.
 *
 * Owns: creating the workers once, handing every worker the same task
 * function with its index (ith of nth), and waiting until all have finished.
 * The calling thread takes part as thread 0, so a pool of n threads starts
 * n-1 workers. Workers spin briefly, then sleep on a condition variable, so
 * an idle pool costs no CPU and back-to-back ops pay no thread creation.
 * Must not: know about tensors or ops; allocate per task.
 */
#ifndef EMBER_BASE_THREADPOOL_H
#define EMBER_BASE_THREADPOOL_H

#include "ember.h"

typedef struct ember_threadpool ember_threadpool;

/* A task body: called once on each of the nth threads with ith in [0, nth). */
typedef void (*ember_task_fn)(void *arg, int ith, int nth);

/* Start a pool of n_threads (>= 1; n_threads - 1 worker threads).
 * Errors: EMBER_ERR_INVALID_ARG (n_threads < 1 or > 512), EMBER_ERR_NOMEM,
 * EMBER_ERR_INTERNAL (pthread_create failed). */
ember_status ember_threadpool_new(int n_threads, ember_threadpool **out);
/* Stop and join the workers. NULL is ignored. */
void ember_threadpool_free(ember_threadpool *tp);
int ember_threadpool_n_threads(const ember_threadpool *tp);
/* Run fn(arg, ith, nth) on every thread and return once all have returned.
 * Not reentrant: one caller thread at a time. */
void ember_threadpool_run(ember_threadpool *tp, ember_task_fn fn, void *arg);
/* Run on the first `nth` threads only (1 <= nth <= n_threads); the others
 * stay asleep or return at once. Small ops use this to avoid fan-out cost. */
void ember_threadpool_run_n(ember_threadpool *tp, int nth, ember_task_fn fn, void *arg);

/* Number of online CPU cores (>= 1). */
int ember_n_cores(void);

#endif
