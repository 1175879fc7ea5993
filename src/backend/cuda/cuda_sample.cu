/*
 * cuda_sample.cu — the head of logits rows on the device (ember_get_logits_top):
 * the k largest logits with their ids, the row maximum and the log-partition
 * function, so that a sampler needs n_rows x (8 + 8k) bytes on the host
 * instead of n_rows x n_vocab x 4 (1 MiB a row for Gemma's 262,144 tokens).
 *
 * Owns: two kernels and their launch. Must not: know samplers or slots.
 *
 * Method. A logit and its id travel as one 64-bit key: the float mapped to
 * an unsigned integer of the same order (sign bit flipped for positives, all
 * bits for negatives) in the high word, the complemented id in the low word,
 * so that a larger key is a larger logit and, among equal logits, the lower
 * id (the CPU sampler's order, src/sample/sampler.c `before`). NaN is taken
 * as -inf. Pass 1 (grid: chunks x rows) loads a chunk of CHUNK logits into
 * shared memory, sorts the keys descending (bitonic network, Batcher 1968),
 * keeps the first KP, and reduces the chunk's maximum m_c and
 * s_c = sum exp(l - m_c). Pass 2 (one block a row) sorts the rows' chunk
 * heads again and keeps k, and combines the partial sums in double:
 * lse = M + log(sum_c s_c exp(m_c - M)), M = max_c m_c. KP = 1 (the argmax)
 * needs no sort in either pass.
 */
#include "backend/cuda/cuda_common.cuh"

#include <math.h>

namespace {

constexpr int CHUNK = 4096;      /* logits per pass-1 block */
constexpr int ROWS_PER_LAUNCH = 32;

struct row_offsets {
    long long off[ROWS_PER_LAUNCH];  /* element offset of each row in the logits buffer */
};

__device__ __forceinline__ unsigned long long make_key(float l, int id)
{
    if (l != l) l = -INFINITY;
    if (l == 0.f) l = 0.f;   /* -0 ties with +0, as on the CPU (lower id first) */
    unsigned u = __float_as_uint(l);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return ((unsigned long long)u << 32) | (unsigned long long)(~(unsigned)id);
}

/* descending bitonic sort of s[0, n), n a power of two */
__device__ void sort_desc(unsigned long long *s, int n)
{
    for (int k = 2; k <= n; k <<= 1) {
        for (int j = k >> 1; j > 0; j >>= 1) {
            for (int i = threadIdx.x; i < n; i += blockDim.x) {
                const int ixj = i ^ j;
                if (ixj > i) {
                    const unsigned long long a = s[i], b = s[ixj];
                    const bool desc = (i & k) == 0;
                    if (desc ? a < b : a > b) {
                        s[i] = b;
                        s[ixj] = a;
                    }
                }
            }
            __syncthreads();
        }
    }
}

__device__ unsigned long long block_max_key(unsigned long long v)
{
    __shared__ unsigned long long sk[32];
    for (int o = 16; o > 0; o >>= 1) {
        const unsigned long long v2 = __shfl_xor_sync(0xffffffffu, v, o);
        v = v2 > v ? v2 : v;
    }
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = (blockDim.x + 31) >> 5;
    if (lane == 0) sk[w] = v;
    __syncthreads();
    if (w == 0) {
        v = lane < nw ? sk[lane] : 0ull;
        for (int o = 16; o > 0; o >>= 1) {
            const unsigned long long v2 = __shfl_xor_sync(0xffffffffu, v, o);
            v = v2 > v ? v2 : v;
        }
    }
    return v;
}

/* Pass 1: chunk blockIdx.x of row blockIdx.y -> KP keys and (m, s). */
template <int KP>
__global__ void k_top_pass1(const float *__restrict__ logits, row_offsets ro, long long n_vocab, int n_chunks,
                            unsigned long long *__restrict__ keys, float2 *__restrict__ stats)
{
    ember_pdl_wait();
    const int c = blockIdx.x, r = blockIdx.y;
    const float *x = logits + ro.off[r];
    const long long lo = (long long)c * CHUNK;
    const int len = (int)(n_vocab - lo < CHUNK ? n_vocab - lo : CHUNK);
    float m = -INFINITY, s = 0.f;
    unsigned long long best = 0ull;
    __shared__ unsigned long long sk[KP > 1 ? CHUNK : 1];
    for (int i = threadIdx.x; i < CHUNK; i += blockDim.x) {
        float l = i < len ? x[lo + i] : -INFINITY;
        if (l != l) l = -INFINITY;
        if (i < len && l > -INFINITY) {
            if (l > m) {
                s = s * __expf(m - l) + 1.f;
                m = l;
            } else {
                s += __expf(l - m);
            }
        }
        const unsigned long long key = i < len ? make_key(l, (int)(lo + i)) : 0ull;
        if (KP > 1) sk[i] = key;
        else best = key > best ? key : best;
    }
    __syncthreads();
    unsigned long long *out = keys + ((long long)r * n_chunks + c) * KP;
    if (KP > 1) {
        sort_desc(sk, CHUNK);
        for (int i = threadIdx.x; i < KP; i += blockDim.x) out[i] = sk[i];
    } else {
        best = block_max_key(best);
        if (threadIdx.x == 0) out[0] = best;
    }
    __syncthreads();
    ember_block_max_sumexp(m, s);
    if (threadIdx.x == 0) stats[(long long)r * n_chunks + c] = make_float2(m, s);
}

/* Pass 2: one block per row: the row's n_chunks x KP keys -> k keys, and
 * max / lse. res row layout: [max float][lse float][k keys]. */
template <int KP>
__global__ void k_top_pass2(const unsigned long long *__restrict__ keys, const float2 *__restrict__ stats, int n_chunks,
                            int n_pow2, int k, int row0, unsigned long long *__restrict__ res)
{
    ember_pdl_wait();
    extern __shared__ unsigned long long sk2[];
    const int r = blockIdx.x;
    const unsigned long long *in = keys + (long long)r * n_chunks * KP;
    const int n = n_chunks * KP;
    unsigned long long *o = res + (long long)(row0 + r) * (1 + k);
    if (KP > 1) {
        for (int i = threadIdx.x; i < n_pow2; i += blockDim.x) sk2[i] = i < n ? in[i] : 0ull;
        __syncthreads();
        sort_desc(sk2, n_pow2);
        for (int i = threadIdx.x; i < k; i += blockDim.x) o[1 + i] = sk2[i];
    } else {
        unsigned long long best = 0ull;
        for (int i = threadIdx.x; i < n; i += blockDim.x) best = in[i] > best ? in[i] : best;
        best = block_max_key(best);
        if (threadIdx.x == 0) o[1] = best;
    }
    if (threadIdx.x == 0) {
        const float2 *st = stats + (long long)r * n_chunks;
        float mm = -INFINITY;
        for (int c = 0; c < n_chunks; c++) mm = fmaxf(mm, st[c].x);
        double sum = 0.0;
        if (mm > -INFINITY)
            for (int c = 0; c < n_chunks; c++)
                if (st[c].x > -INFINITY) sum += (double)st[c].y * exp((double)st[c].x - (double)mm);
        const float lse = mm > -INFINITY ? (float)((double)mm + log(sum)) : -INFINITY;
        float2 ml = make_float2(mm, lse);
        memcpy(&o[0], &ml, sizeof ml);
    }
}

int pow2_at_least(int n)
{
    int p = 1;
    while (p < n) p <<= 1;
    return p;
}

int kp_for(int k) { return k <= 1 ? 1 : (k <= 64 ? 64 : 128); }

}  // namespace

extern "C" size_t ember_cuda_logits_top_work_bytes(int32_t n_rows, int64_t n_vocab, int32_t k)
{
    const long long n_chunks = (n_vocab + CHUNK - 1) / CHUNK;
    const int kp = kp_for(k);
    const long long rows = n_rows < ROWS_PER_LAUNCH ? n_rows : ROWS_PER_LAUNCH;
    return (size_t)(rows * n_chunks * kp * sizeof(unsigned long long) + rows * n_chunks * sizeof(float2));
}

extern "C" size_t ember_cuda_logits_top_result_bytes(int32_t n_rows, int32_t k)
{
    return (size_t)n_rows * (size_t)(1 + k) * sizeof(unsigned long long);
}

template <int KP>
static ember_status launch_top(ember_cuda *cu, const float *logits, const int64_t *row_off, int32_t n_rows,
                               int64_t n_vocab, int32_t k, void *work, unsigned long long *res)
{
    const int n_chunks = (int)((n_vocab + CHUNK - 1) / CHUNK);
    const int n_pow2 = KP > 1 ? pow2_at_least(n_chunks * KP) : 1;
    const size_t smem2 = KP > 1 ? (size_t)n_pow2 * sizeof(unsigned long long) : 0;
    if (KP > 1) {
        if (smem2 > 227 * 1024)
            return ember_error(EMBER_ERR_UNSUPPORTED, "cuda: logits_top: n_vocab %lld needs %zu B of shared memory",
                               (long long)n_vocab, smem2);
        /* every call (a host-side attribute, per device and kernel; cheap):
         * a first call with a small vocabulary must not cap a later one */
        if (smem2 > 48 * 1024) {
            ember_status st = ember_cuda_check(
                cudaFuncSetAttribute(k_top_pass2<KP>, cudaFuncAttributeMaxDynamicSharedMemorySize, 227 * 1024),
                "logits_top (shared memory)");
            if (st != EMBER_OK) return st;
        }
    }
    for (int32_t r0 = 0; r0 < n_rows; r0 += ROWS_PER_LAUNCH) {
        const int nr = n_rows - r0 < ROWS_PER_LAUNCH ? n_rows - r0 : ROWS_PER_LAUNCH;
        row_offsets ro;
        for (int i = 0; i < nr; i++) ro.off[i] = row_off[r0 + i];
        unsigned long long *keys = (unsigned long long *)work;
        float2 *stats = (float2 *)(keys + (size_t)nr * n_chunks * KP);
        ember_launch(k_top_pass1<KP>, dim3((unsigned)n_chunks, (unsigned)nr), KP > 1 ? 512 : 256, 0, cu->stream,
                     logits, ro, (long long)n_vocab, n_chunks, keys, stats);
        ember_status st = ember_cuda_launched("logits_top pass 1");
        if (st != EMBER_OK) return st;
        ember_launch(k_top_pass2<KP>, dim3((unsigned)nr), KP > 1 ? 1024 : 256, smem2, cu->stream, (const unsigned long long *)keys,
                     (const float2 *)stats, n_chunks, n_pow2, (int)k, (int)r0, res);
        st = ember_cuda_launched("logits_top pass 2");
        if (st != EMBER_OK) return st;
    }
    return EMBER_OK;
}

/* The checks both halves share. */
static ember_status top_check(ember_cuda *cu, const float *logits, const int64_t *row_off, int32_t n_rows,
                              int64_t n_vocab, int32_t k, void *work, size_t work_bytes, void *res_dev, void *res_host)
{
    EMBER_CUDA_NONNULL(cu);
    EMBER_CUDA_NONNULL(logits);
    EMBER_CUDA_NONNULL(row_off);
    EMBER_CUDA_NONNULL(work);
    EMBER_CUDA_NONNULL(res_dev);
    EMBER_CUDA_NONNULL(res_host);
    if (n_rows < 1 || k < 1 || k > EMBER_LOGITS_TOP_MAX || n_vocab < k || n_vocab > INT32_MAX)
        return ember_error(EMBER_ERR_INVALID_ARG, "cuda: logits_top: %d rows, k %d, n_vocab %lld", n_rows, k,
                           (long long)n_vocab);
    if (work_bytes < ember_cuda_logits_top_work_bytes(n_rows, n_vocab, k))
        return ember_error(EMBER_ERR_INVALID_ARG, "cuda: logits_top: work buffer of %zu B too small", work_bytes);
    return EMBER_OK;
}

static ember_status top_launch(ember_cuda *cu, const float *logits, const int64_t *row_off, int32_t n_rows,
                               int64_t n_vocab, int32_t k, void *work, void *res_dev)
{
    unsigned long long *res = (unsigned long long *)res_dev;
    const int kp = kp_for(k);
    return kp == 1    ? launch_top<1>(cu, logits, row_off, n_rows, n_vocab, k, work, res)
           : kp == 64 ? launch_top<64>(cu, logits, row_off, n_rows, n_vocab, k, work, res)
                      : launch_top<128>(cu, logits, row_off, n_rows, n_vocab, k, work, res);
}

/* Keys of a result row back to (logit, id): pass 2's order-preserving key
 * (float bits flipped for the sort, id complemented). */
static void top_unpack(const void *res_host, int32_t n_rows, int32_t k, ember_logits_top *out)
{
    const unsigned long long *h = (const unsigned long long *)res_host;
    for (int32_t r = 0; r < n_rows; r++) {
        const unsigned long long *o = h + (size_t)r * (1 + k);
        float ml[2];
        memcpy(ml, &o[0], sizeof ml);
        ember_logits_top *t = &out[r];
        t->max = ml[0];
        t->lse = ml[1];
        t->n = k;
        for (int32_t i = 0; i < k; i++) {
            const unsigned long long key = o[1 + i];
            unsigned u = (unsigned)(key >> 32);
            u = (u & 0x80000000u) ? (u & 0x7fffffffu) : ~u;
            float l;
            memcpy(&l, &u, sizeof l);
            t->logit[i] = l;
            t->id[i] = (ember_token)(~(unsigned)(key & 0xffffffffull));
        }
    }
}

extern "C" ember_status ember_cuda_logits_top(ember_cuda *cu, const float *logits, const int64_t *row_off, int32_t n_rows,
                                              int64_t n_vocab, int32_t k, void *work, size_t work_bytes, void *res_dev,
                                              void *res_host, ember_logits_top *out)
{
    EMBER_CUDA_NONNULL(out);
    ember_status st = top_check(cu, logits, row_off, n_rows, n_vocab, k, work, work_bytes, res_dev, res_host);
    if (st == EMBER_OK) st = top_launch(cu, logits, row_off, n_rows, n_vocab, k, work, res_dev);
    if (st == EMBER_OK) st = ember_cuda_download(cu, res_host, res_dev, ember_cuda_logits_top_result_bytes(n_rows, k));
    if (st != EMBER_OK) return st;
    top_unpack(res_host, n_rows, k, out);
    return EMBER_OK;
}

extern "C" ember_status ember_cuda_logits_top_start(ember_cuda *cu, const float *logits, const int64_t *row_off,
                                                    int32_t n_rows, int64_t n_vocab, int32_t k, void *work,
                                                    size_t work_bytes, void *res_dev, void *res_host)
{
    ember_status st = top_check(cu, logits, row_off, n_rows, n_vocab, k, work, work_bytes, res_dev, res_host);
    if (st != EMBER_OK) return st;
    if (!cu->top_ev &&
        (st = ember_cuda_check(cudaEventCreateWithFlags(&cu->top_ev, cudaEventDisableTiming), "logits_top (event)")) != EMBER_OK)
        return st;
    if ((st = top_launch(cu, logits, row_off, n_rows, n_vocab, k, work, res_dev)) != EMBER_OK) return st;
    st = ember_cuda_check(cudaMemcpyAsync(res_host, res_dev, ember_cuda_logits_top_result_bytes(n_rows, k),
                                          cudaMemcpyDeviceToHost, cu->stream),
                          "logits_top (download)");
    if (st != EMBER_OK) return st;
    return ember_cuda_check(cudaEventRecord(cu->top_ev, cu->stream), "logits_top (event record)");
}

extern "C" ember_status ember_cuda_logits_top_finish(ember_cuda *cu, const void *res_host, int32_t n_rows, int32_t k,
                                                     ember_logits_top *out)
{
    EMBER_CUDA_NONNULL(cu);
    EMBER_CUDA_NONNULL(res_host);
    EMBER_CUDA_NONNULL(out);
    if (!cu->top_ev) return ember_error(EMBER_ERR_INVALID_ARG, "cuda: logits_top_finish without a start");
    ember_status st = ember_cuda_check(cudaEventSynchronize(cu->top_ev), "logits_top (event wait)");
    if (st != EMBER_OK) return st;
    top_unpack(res_host, n_rows, k, out);
    return EMBER_OK;
}

namespace {
struct head_rows {
    int32_t row[EMBER_CUDA_HEAD_TOKENS_MAX];
};

/* dst[i] = the id of the first key of result row rows.row[i], for rows
 * >= 0 (one thread per entry; -1 leaves dst[i]). */
__global__ void k_head_tokens(const unsigned long long *res, int k, head_rows rows, int n, int32_t *dst)
{
    ember_pdl_wait();
    const int i = threadIdx.x;
    if (i < n && rows.row[i] >= 0) dst[i] = (int32_t)(~(unsigned)(res[(size_t)rows.row[i] * (1 + k) + 1] & 0xffffffffull));
}
}  // namespace

extern "C" ember_status ember_cuda_head_tokens(ember_cuda *cu, const void *res_dev, int32_t n_res_rows, int32_t k,
                                               const int32_t *rows, int32_t n, int32_t *dst)
{
    EMBER_CUDA_NONNULL(cu);
    EMBER_CUDA_NONNULL(res_dev);
    EMBER_CUDA_NONNULL(rows);
    EMBER_CUDA_NONNULL(dst);
    if (n < 1 || n > EMBER_CUDA_HEAD_TOKENS_MAX || k < 1 || k > EMBER_LOGITS_TOP_MAX)
        return ember_error(EMBER_ERR_INVALID_ARG, "cuda: head_tokens: %d entries, k %d", n, k);
    head_rows hr;
    for (int32_t i = 0; i < n; i++) {
        if (rows[i] < -1 || rows[i] >= n_res_rows)
            return ember_error(EMBER_ERR_INVALID_ARG, "cuda: head_tokens: entry %d: row %d not in [0, %d)", i, rows[i],
                               n_res_rows);
        hr.row[i] = rows[i];
    }
    ember_launch(k_head_tokens, dim3(1), dim3(EMBER_CUDA_HEAD_TOKENS_MAX), 0, cu->stream,
                 (const unsigned long long *)res_dev, (int)k, hr, (int)n, dst);
    return ember_cuda_launched("head_tokens");
}
