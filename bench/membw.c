/*
 * membw.c — the machine's streaming read bandwidth, the ceiling of token
 * generation: a decode step reads every weight once, so tg tok/s can at best
 * be bandwidth / bytes of weights. bench/results/ reports tg as a fraction
 * of this number.
 *
 * Owns: one measurement: N threads each sum a disjoint slice of a buffer much
 * larger than the caches (default 1 GiB), best of R repetitions, in GB/s
 * (1e9 bytes/s). Must not: be a test; link anything of ember's.
 *
 * usage: membw [-s MiB] [-t threads] [-r repetitions]
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct slice {
    const uint64_t *p;
    size_t n;
    uint64_t sum;
} slice;

static void *reader(void *arg)
{
    slice *s = arg;
    uint64_t a = 0, b = 0, c = 0, d = 0;
    size_t i = 0;
    for (; i + 8 <= s->n; i += 8) {   /* independent sums: the loads stream */
        a += s->p[i] + s->p[i + 4];
        b += s->p[i + 1] + s->p[i + 5];
        c += s->p[i + 2] + s->p[i + 6];
        d += s->p[i + 3] + s->p[i + 7];
    }
    for (; i < s->n; i++)
        a += s->p[i];
    s->sum = a + b + c + d;
    return NULL;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv)
{
    long mib = 1024, threads = 2, reps = 7;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-s")) mib = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "-t")) threads = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "-r")) reps = atol(argv[i + 1]);
        else {
            fprintf(stderr, "usage: membw [-s MiB] [-t threads] [-r repetitions]\n");
            return 2;
        }
    }
    if (mib < 16 || threads < 1 || threads > 256 || reps < 1) {
        fprintf(stderr, "membw: need -s >= 16, 1 <= -t <= 256, -r >= 1\n");
        return 2;
    }
    size_t bytes = (size_t)mib << 20, n = bytes / sizeof(uint64_t);
    uint64_t *buf = aligned_alloc(64, bytes);
    if (!buf) {
        fprintf(stderr, "membw: cannot allocate %ld MiB\n", mib);
        return 1;
    }
    for (size_t i = 0; i < n; i++)   /* touch every page (and make the sum depend on it) */
        buf[i] = i * 0x9E3779B97F4A7C15ull;
    pthread_t *tid = calloc((size_t)threads, sizeof *tid);
    slice *sl = calloc((size_t)threads, sizeof *sl);
    double best = 0.0;
    uint64_t check = 0;
    for (long r = 0; r < reps; r++) {
        double t0 = now();
        for (long k = 0; k < threads; k++) {
            size_t lo = n * (size_t)k / (size_t)threads, hi = n * (size_t)(k + 1) / (size_t)threads;
            sl[k] = (slice){buf + lo, hi - lo, 0};
            pthread_create(&tid[k], NULL, reader, &sl[k]);
        }
        for (long k = 0; k < threads; k++) {
            pthread_join(tid[k], NULL);
            check += sl[k].sum;
        }
        double gbs = (double)bytes / (now() - t0) / 1e9;
        if (gbs > best) best = gbs;
    }
    printf("membw: %ld MiB, %ld threads, best of %ld: %.2f GB/s (checksum %llx)\n", mib, threads, reps, best,
           (unsigned long long)(check & 0xffff));
    free(tid);
    free(sl);
    free(buf);
    return 0;
}
