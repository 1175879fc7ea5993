/*
 * membw.c — the machine's streaming read bandwidth, the ceiling of token
 * generation: a decode step reads every weight once, so tg tok/s can at best
 * be bandwidth / bytes of weights. bench/results/ reports tg as a fraction
 * of this number.
 *
 * Owns: one measurement: N threads each sum a disjoint slice of a buffer much
 * larger than the caches (default 1 GiB), best of R repetitions, in GB/s
 * (1e9 bytes/s), without and with software prefetch (-p bytes ahead, default
 * 4096; the higher of the two is the ceiling quoted). Must not: be a test;
 * link anything of ember's.
 *
 * usage: membw [-s MiB] [-t threads] [-r repetitions] [-p prefetch bytes]
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef uint64_t v8u64 __attribute__((vector_size(64)));

typedef struct slice {
    const uint64_t *p;
    size_t n;
    int prefetch;   /* bytes ahead to prefetch, 0: none */
    uint64_t sum;
} slice;

/* Sum the slice with 64-byte vector loads (GCC vector extension: one zmm
 * load with -mavx512f, else pairs/quads of narrower loads) into four
 * independent accumulators so the loads stream; with `prefetch`, each
 * 256-byte step also prefetches `prefetch` bytes ahead, as the decode
 * mat-vecs do (the hardware prefetcher stops at 4 KiB pages). */
static void *reader(void *arg)
{
    slice *s = arg;
    v8u64 a = {0}, b = {0}, c = {0}, d = {0};
    const char *base = (const char *)s->p;
    size_t i = 0;
    const size_t nb = s->n * sizeof(uint64_t);
    for (; i + 256 <= nb; i += 256) {
        if (s->prefetch)
            for (int k = 0; k < 256; k += 64) __builtin_prefetch(base + i + (size_t)s->prefetch + k);
        v8u64 x0, x1, x2, x3;
        memcpy(&x0, base + i, 64);
        memcpy(&x1, base + i + 64, 64);
        memcpy(&x2, base + i + 128, 64);
        memcpy(&x3, base + i + 192, 64);
        a += x0;
        b += x1;
        c += x2;
        d += x3;
    }
    a += b + c + d;
    uint64_t t = 0;
    for (int k = 0; k < 8; k++) t += a[k];
    for (i /= sizeof(uint64_t); i < s->n; i++) t += s->p[i];
    s->sum = t;
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
    long mib = 1024, threads = 2, reps = 7, prefetch = 4096;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-s")) mib = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "-t")) threads = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "-r")) reps = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "-p")) prefetch = atol(argv[i + 1]);
        else {
            fprintf(stderr, "usage: membw [-s MiB] [-t threads] [-r repetitions] [-p prefetch bytes]\n");
            return 2;
        }
    }
    if (mib < 16 || threads < 1 || threads > 256 || reps < 1 || prefetch < 0 || prefetch > (1 << 20)) {
        fprintf(stderr, "membw: need -s >= 16, 1 <= -t <= 256, -r >= 1, 0 <= -p <= 1 MiB\n");
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
    double best[2] = {0.0, 0.0};
    uint64_t check = 0;
    for (long r = 0; r < reps; r++) {
        for (int pf = 0; pf < 2; pf++) {   /* alternate: load on a shared machine hits both alike */
            double t0 = now();
            for (long k = 0; k < threads; k++) {
                size_t lo = n * (size_t)k / (size_t)threads, hi = n * (size_t)(k + 1) / (size_t)threads;
                sl[k] = (slice){buf + lo, hi - lo, pf ? (int)prefetch : 0, 0};
                pthread_create(&tid[k], NULL, reader, &sl[k]);
            }
            for (long k = 0; k < threads; k++) {
                pthread_join(tid[k], NULL);
                check += sl[k].sum;
            }
            double gbs = (double)bytes / (now() - t0) / 1e9;
            if (gbs > best[pf]) best[pf] = gbs;
        }
    }
    printf("membw: %ld MiB, %ld threads, best of %ld: %.2f GB/s plain, %.2f GB/s with prefetch %ld B ahead"
           " (checksum %llx)\n", mib, threads, reps, best[0], best[1], prefetch, (unsigned long long)(check & 0xffff));
    free(tid);
    free(sl);
    free(buf);
    return 0;
}
