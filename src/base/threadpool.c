/*
 * threadpool.c — persistent workers with spin-then-sleep hand-off.
 *
 * A task is published by bumping `gen` under the mutex and broadcasting;
 * workers compare `gen` to the last one they ran. Completion is an atomic
 * countdown; the last worker to finish signals the caller. Both waits spin
 * for a short while first (ops in a decode step are microseconds apart) and
 * then sleep, with the condition re-checked under the mutex so no wake-up is
 * lost. Must not: allocate after creation.
 */
#include "base/threadpool.h"
#include "base/status.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

#define SPIN_ROUNDS 4000

struct ember_threadpool {
    int n_threads;
    pthread_t *workers;
    pthread_mutex_t mu;
    pthread_cond_t cv_start;
    pthread_cond_t cv_done;
    _Atomic uint64_t gen;
    _Atomic int n_pending;
    _Atomic bool stop;
    ember_task_fn fn;
    void *arg;
    int nth;            /* threads taking part in the current task */
};

typedef struct worker_arg { ember_threadpool *tp; int ith; } worker_arg;

static void *worker_main(void *p)
{
    worker_arg *wa = p;
    ember_threadpool *tp = wa->tp;
    const int ith = wa->ith;
    uint64_t seen = 0;
    for (;;) {
        uint64_t g = atomic_load_explicit(&tp->gen, memory_order_acquire);
        for (int i = 0; g == seen && i < SPIN_ROUNDS; i++) {
            CPU_RELAX();
            g = atomic_load_explicit(&tp->gen, memory_order_acquire);
        }
        if (g == seen) {
            pthread_mutex_lock(&tp->mu);
            while ((g = atomic_load(&tp->gen)) == seen && !atomic_load(&tp->stop))
                pthread_cond_wait(&tp->cv_start, &tp->mu);
            pthread_mutex_unlock(&tp->mu);
        }
        if (atomic_load(&tp->stop)) break;
        seen = g;
        if (ith < tp->nth) tp->fn(tp->arg, ith, tp->nth);
        if (atomic_fetch_sub_explicit(&tp->n_pending, 1, memory_order_acq_rel) == 1) {
            pthread_mutex_lock(&tp->mu);
            pthread_cond_signal(&tp->cv_done);
            pthread_mutex_unlock(&tp->mu);
        }
    }
    free(wa);
    return NULL;
}

int ember_n_cores(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : (int)n;
}

ember_status ember_threadpool_new(int n_threads, ember_threadpool **out)
{
    *out = NULL;
    if (n_threads < 1 || n_threads > 512)
        return ember_error(EMBER_ERR_INVALID_ARG, "threadpool: n_threads %d not in [1, 512]", n_threads);
    ember_threadpool *tp = calloc(1, sizeof *tp);
    if (!tp) return ember_error(EMBER_ERR_NOMEM, "threadpool: out of memory");
    tp->n_threads = n_threads;
    pthread_mutex_init(&tp->mu, NULL);
    pthread_cond_init(&tp->cv_start, NULL);
    pthread_cond_init(&tp->cv_done, NULL);
    if (n_threads > 1) {
        tp->workers = calloc((size_t)n_threads - 1, sizeof *tp->workers);
        if (!tp->workers) { ember_threadpool_free(tp); return ember_error(EMBER_ERR_NOMEM, "threadpool: out of memory"); }
    }
    for (int i = 1; i < n_threads; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        if (!wa) { tp->n_threads = i; ember_threadpool_free(tp); return ember_error(EMBER_ERR_NOMEM, "threadpool: out of memory"); }
        wa->tp = tp;
        wa->ith = i;
        if (pthread_create(&tp->workers[i - 1], NULL, worker_main, wa) != 0) {
            free(wa);
            tp->n_threads = i;
            ember_threadpool_free(tp);
            return ember_error(EMBER_ERR_INTERNAL, "threadpool: pthread_create failed for worker %d", i);
        }
    }
    *out = tp;
    return EMBER_OK;
}

void ember_threadpool_free(ember_threadpool *tp)
{
    if (!tp) return;
    pthread_mutex_lock(&tp->mu);
    atomic_store(&tp->stop, true);
    atomic_fetch_add(&tp->gen, 1);
    pthread_cond_broadcast(&tp->cv_start);
    pthread_mutex_unlock(&tp->mu);
    for (int i = 1; i < tp->n_threads; i++) pthread_join(tp->workers[i - 1], NULL);
    pthread_mutex_destroy(&tp->mu);
    pthread_cond_destroy(&tp->cv_start);
    pthread_cond_destroy(&tp->cv_done);
    free(tp->workers);
    free(tp);
}

int ember_threadpool_n_threads(const ember_threadpool *tp) { return tp->n_threads; }

void ember_threadpool_run_n(ember_threadpool *tp, int nth, ember_task_fn fn, void *arg)
{
    if (nth > tp->n_threads) nth = tp->n_threads;
    if (nth < 1) nth = 1;
    if (nth == 1) { fn(arg, 0, 1); return; }
    tp->fn = fn;
    tp->arg = arg;
    tp->nth = nth;
    atomic_store_explicit(&tp->n_pending, tp->n_threads - 1, memory_order_relaxed);
    pthread_mutex_lock(&tp->mu);
    atomic_fetch_add_explicit(&tp->gen, 1, memory_order_release);
    pthread_cond_broadcast(&tp->cv_start);
    pthread_mutex_unlock(&tp->mu);
    fn(arg, 0, nth);
    for (int i = 0; i < SPIN_ROUNDS; i++) {
        if (atomic_load_explicit(&tp->n_pending, memory_order_acquire) == 0) return;
        CPU_RELAX();
    }
    pthread_mutex_lock(&tp->mu);
    while (atomic_load(&tp->n_pending) != 0) pthread_cond_wait(&tp->cv_done, &tp->mu);
    pthread_mutex_unlock(&tp->mu);
}

void ember_threadpool_run(ember_threadpool *tp, ember_task_fn fn, void *arg)
{
    ember_threadpool_run_n(tp, tp->n_threads, fn, arg);
}
