/*
 * cuda_attn_prefill.cu — attention for a run of prompt queries on the tensor
 * cores: the keys and values of the run's sequence gathered once from the
 * paged F16 cache, then softmax(scale * Q K^T) V as two cuBLAS f16 GEMMs
 * per chunk of queries (f32 accumulation), batched over the KV heads with
 * each head's GQA group of query heads stacked (Vaswani et al. 2017; the
 * "unfused" form, with scores in device memory).
 *
 * Owns: ember_cuda_attn_prefill. Must not: know sequences beyond the one
 * run it is given, or run inside a graph capture (cuBLAS and scratch growth).
 *
 * Numerics, against the decode kernel (cuda_attn.cu): q is rounded to f16
 * before q.k as there (the F16 cache's dot format, ggml's contract); the
 * products sum in f32 in cuBLAS's order; the probabilities are rounded to
 * f16 before P V (ggml's flash attention keeps its V accumulation in f16
 * too). Masks: key j is seen by the query at position p iff j <= p and,
 * with a sliding window, p - j < n_swa (llama.cpp is_masked_swa).
 *
 * Memory: K and V of the run's keys ([n_head_kv][n_keys][head_dim] f16
 * each) and, per chunk of QC queries, scores S [n_head][QC][n_keys] f32 and
 * probabilities P (f16), sized so that S and P stay within ~96 MiB; all in
 * the context's scratch.
 */
#include "backend/cuda/cuda_common.cuh"

#include <cuda_fp16.h>
#include <math.h>

namespace {

constexpr size_t kScoreBudget = 96u << 20;   /* bytes of S + P per query chunk */

/* Kc/Vc[kvh][j][d] = cache[cell(k_lo + j)][kvh][d], j < n_keys; zero rows up
 * to n_rows (padding that GEMMs may read). blocks: pages page0.. of the run. */
__global__ void k_gather_kv(const uint4 *__restrict__ kc, const uint4 *__restrict__ vc, const int32_t *__restrict__ blocks,
                            int32_t page0, int32_t page_size, int32_t k_lo, int32_t n_keys, int32_t n_rows, int n_kv,
                            int d8, uint4 *__restrict__ ko, uint4 *__restrict__ vo)
{
    ember_pdl_wait();
    const int32_t j = blockIdx.x;
    const int row8 = n_kv * d8;   /* uint4 (8 halves) per cache row */
    uint4 zero = make_uint4(0, 0, 0, 0);
    if (j >= n_keys) {
        for (int i = threadIdx.x; i < row8; i += blockDim.x) {
            const int h = i / d8, e = i % d8;
            ko[((size_t)h * n_rows + j) * d8 + e] = zero;
            vo[((size_t)h * n_rows + j) * d8 + e] = zero;
        }
        return;
    }
    const int32_t kp = k_lo + j;
    const int64_t cell = (int64_t)blocks[kp / page_size - page0] * page_size + kp % page_size;
    for (int i = threadIdx.x; i < row8; i += blockDim.x) {
        const int h = i / d8, e = i % d8;
        ko[((size_t)h * n_rows + j) * d8 + e] = kc[cell * row8 + i];
        vo[((size_t)h * n_rows + j) * d8 + e] = vc[cell * row8 + i];
    }
}

/* qh[kvh][g][c][d] = f16(q[c0 + c][kvh * G + g][d]), c < qc */
__global__ void k_q_half(const float *__restrict__ q, int32_t c0, int qc, int n_head, int G, int D, __half *__restrict__ qh)
{
    ember_pdl_wait();
    const int c = blockIdx.x, h = blockIdx.y;
    const int kvh = h / G, g = h % G;
    const float *src = q + ((size_t)(c0 + c) * n_head + h) * D;
    __half *dst = qh + (((size_t)kvh * G + g) * qc + c) * D;
    for (int e = threadIdx.x; e < D; e += blockDim.x) dst[e] = __float2half_rn(src[e]);
}

/* Row r of S [rows][ld] (r = (kvh * G + g) * qc + c): the query at position
 * pq = q_pos0 + c sees key kp = kc_lo + j iff kp <= pq and (no window or
 * pq - kp < n_swa); P[r][j] = softmax over the seen keys of scale * S
 * (soft-capped when softcap > 0), 0 elsewhere, f16. */
__global__ void k_softmax_rows(const float *__restrict__ S, int ld, int n, int qc, int32_t q_pos0, int32_t kc_lo, float scale,
                               float softcap, int32_t n_swa, __half *__restrict__ P)
{
    ember_pdl_wait();
    const int r = blockIdx.x;
    const int c = r % qc;
    const int32_t pq = q_pos0 + c;
    const float *s = S + (size_t)r * ld;
    __half *p = P + (size_t)r * ld;
    int32_t j_hi = pq - kc_lo;   /* last seen key index */
    if (j_hi > n - 1) j_hi = n - 1;
    int32_t j_lo = n_swa > 0 ? pq - n_swa + 1 - kc_lo : 0;
    if (j_lo < 0) j_lo = 0;
    float m = -INFINITY, sum = 0.f;
    for (int j = j_lo + threadIdx.x; j <= j_hi; j += blockDim.x) {
        float x = scale * s[j];
        if (softcap > 0.f) x = softcap * tanhf(x / softcap);
        if (x > m) {
            sum = sum * __expf(m - x) + 1.f;
            m = x;
        } else {
            sum += __expf(x - m);
        }
    }
    ember_block_max_sumexp(m, sum);
    const float inv = sum > 0.f ? 1.f / sum : 0.f;
    for (int j = threadIdx.x; j < ld; j += blockDim.x) {
        float v = 0.f;
        if (j >= j_lo && j <= j_hi) {
            float x = scale * s[j];
            if (softcap > 0.f) x = softcap * tanhf(x / softcap);
            v = __expf(x - m) * inv;
        }
        p[j] = __float2half_rn(v);
    }
}

/* out[c0 + c][kvh * G + g][d] = O[kvh][g * qc + c][d] */
__global__ void k_scatter_o(const float *__restrict__ O, int32_t c0, int qc, int n_head, int G, int D, float *__restrict__ out)
{
    ember_pdl_wait();
    const int c = blockIdx.x, h = blockIdx.y;
    const int kvh = h / G, g = h % G;
    const float *src = O + (((size_t)kvh * G + g) * qc + c) * D;
    float *dst = out + ((size_t)(c0 + c) * n_head + h) * D;
    for (int e = threadIdx.x; e < D; e += blockDim.x) dst[e] = src[e];
}

size_t align256(size_t b) { return (b + 255) & ~(size_t)255; }

}  // namespace

extern "C" ember_status ember_cuda_attn_prefill(ember_cuda *cu, const ember_cuda_attn_params *p, const float *q,
                                                int32_t n_q, int32_t pos0, const int32_t *blocks, const uint16_t *k_cache,
                                                const uint16_t *v_cache, float *out)
{
    EMBER_CUDA_NONNULL(cu);
    EMBER_CUDA_NONNULL(p);
    EMBER_CUDA_NONNULL(q);
    EMBER_CUDA_NONNULL(blocks);
    EMBER_CUDA_NONNULL(k_cache);
    EMBER_CUDA_NONNULL(v_cache);
    EMBER_CUDA_NONNULL(out);
    const int D = p->head_dim, H = p->n_head, HK = p->n_head_kv;
    if (n_q < 1 || pos0 < 0 || D < 8 || D % 8 || D > 1024 || HK < 1 || H % HK || p->page_size < 1)
        return ember_error(EMBER_ERR_INVALID_ARG, "cuda: attn_prefill: n_q %d, pos0 %d, head_dim %d, heads %d/%d", n_q, pos0,
                           D, H, HK);
    if (cu->capturing) return ember_error(EMBER_ERR_INTERNAL, "cuda: attn_prefill inside a graph capture");
    const int G = H / HK;
    const int32_t p_hi = pos0 + n_q - 1;
    const int32_t k_lo = p->n_swa > 0 && pos0 - p->n_swa + 1 > 0 ? pos0 - p->n_swa + 1 : 0;
    const int32_t n_keys = p_hi - k_lo + 1;
    const int32_t n_rows = (n_keys + 7) / 8 * 8 + 8;   /* room for a chunk's padded key range */
    const int32_t page0 = k_lo / p->page_size, n_pages = p_hi / p->page_size - page0 + 1;
    /* the largest chunk's key range: all keys of the run */
    const int ld_max = (n_keys + 7) / 8 * 8;
    int qc = (int)(kScoreBudget / ((size_t)H * ld_max * (sizeof(float) + sizeof(__half))));
    if (qc > n_q) qc = n_q;
    if (qc > 1024) qc = 1024;
    if (qc < 1) qc = 1;
    const size_t b_kv = align256((size_t)HK * n_rows * D * sizeof(__half));
    const size_t b_tab = align256((size_t)n_pages * sizeof(int32_t));
    const size_t b_q = align256((size_t)H * qc * D * sizeof(__half));
    const size_t b_s = align256((size_t)H * qc * ld_max * sizeof(float));
    const size_t b_p = align256((size_t)H * qc * ld_max * sizeof(__half));
    const size_t b_o = align256((size_t)H * qc * D * sizeof(float));
    void *scr = NULL;
    ember_status st = ember_cuda_scratch(cu, 2 * b_kv + b_tab + b_q + b_s + b_p + b_o, &scr);
    if (st != EMBER_OK) return st;
    char *base = (char *)scr;
    __half *Kc = (__half *)base, *Vc = (__half *)(base + b_kv);
    int32_t *dtab = (int32_t *)(base + 2 * b_kv);
    __half *Qh = (__half *)(base + 2 * b_kv + b_tab);
    float *S = (float *)(base + 2 * b_kv + b_tab + b_q);
    __half *P = (__half *)((char *)S + b_s);
    float *O = (float *)((char *)P + b_p);
    st = ember_cuda_check(cudaMemcpyAsync(dtab, blocks + page0, (size_t)n_pages * sizeof(int32_t), cudaMemcpyHostToDevice,
                                          cu->stream), "attn_prefill (block table)");
    if (st != EMBER_OK) return st;
    ember_launch(k_gather_kv, dim3((unsigned)n_rows), 128, 0, cu->stream, (const uint4 *)k_cache, (const uint4 *)v_cache,
                 (const int32_t *)dtab, page0, p->page_size, k_lo, n_keys, n_rows, HK, D / 8, (uint4 *)Kc, (uint4 *)Vc);
    if ((st = ember_cuda_launched("attn_prefill gather")) != EMBER_OK) return st;
    const float one = 1.f, zero = 0.f;
    for (int32_t c0 = 0; c0 < n_q; c0 += qc) {
        const int nc = n_q - c0 < qc ? n_q - c0 : qc;
        const int32_t pq_lo = pos0 + c0, pq_hi = pos0 + c0 + nc - 1;
        const int32_t kc_lo = p->n_swa > 0 && pq_lo - p->n_swa + 1 > k_lo ? pq_lo - p->n_swa + 1 : k_lo;
        const int n = pq_hi - kc_lo + 1, ld = (n + 7) / 8 * 8;
        const int M = G * nc;   /* rows per KV head */
        ember_launch(k_q_half, dim3((unsigned)nc, (unsigned)H), 128, 0, cu->stream, q, c0, nc, H, G, D, Qh);
        if ((st = ember_cuda_launched("attn_prefill q")) != EMBER_OK) return st;
        const __half *Kp = Kc + (size_t)(kc_lo - k_lo) * D, *Vp = Vc + (size_t)(kc_lo - k_lo) * D;
        /* S[kvh] (M x ld, row-major) = Qh[kvh] (M x D) K[kvh]^T: column-major S^T = K Qh^T */
        cublasStatus_t cs = cublasGemmStridedBatchedEx(
            cu->cublas, CUBLAS_OP_T, CUBLAS_OP_N, ld, M, D, &one, Kp, CUDA_R_16F, D, (long long)n_rows * D, Qh, CUDA_R_16F, D,
            (long long)M * D, &zero, S, CUDA_R_32F, ld, (long long)M * ld, HK, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        if (cs != CUBLAS_STATUS_SUCCESS)
            return ember_error(EMBER_ERR_INTERNAL, "cuda: attn_prefill: q.k GEMM failed (cuBLAS status %d)", (int)cs);
        ember_launch(k_softmax_rows, dim3((unsigned)(HK * M)), 256, 0, cu->stream, (const float *)S, ld, n, nc, pq_lo, kc_lo,
                     p->scale, p->softcap, p->n_swa, P);
        if ((st = ember_cuda_launched("attn_prefill softmax")) != EMBER_OK) return st;
        /* O[kvh] (M x D) = P[kvh] (M x ld) V[kvh] (ld x D): column-major O^T = V^T P^T */
        cs = cublasGemmStridedBatchedEx(cu->cublas, CUBLAS_OP_N, CUBLAS_OP_N, D, M, ld, &one, Vp, CUDA_R_16F, D,
                                        (long long)n_rows * D, P, CUDA_R_16F, ld, (long long)M * ld, &zero, O, CUDA_R_32F, D,
                                        (long long)M * D, HK, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        if (cs != CUBLAS_STATUS_SUCCESS)
            return ember_error(EMBER_ERR_INTERNAL, "cuda: attn_prefill: p.v GEMM failed (cuBLAS status %d)", (int)cs);
        ember_launch(k_scatter_o, dim3((unsigned)nc, (unsigned)H), 128, 0, cu->stream, (const float *)O, c0, nc, H, G, D, out);
        if ((st = ember_cuda_launched("attn_prefill out")) != EMBER_OK) return st;
    }
    return EMBER_OK;
}
