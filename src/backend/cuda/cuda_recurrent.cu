/*
 * cuda_recurrent.cu — the recurrent (linear-attention) kernels of Qwen3.5's
 * Gated DeltaNet layers: the short causal convolution with SiLU, the gated
 * delta rule in its recurrent form, the sigmoid output gate and a strided
 * copy (cuda_backend.h documents each entry point; backend/backend.h the
 * formulas; cpu/recurrent.c is the reference).
 *
 * Owns: the kernels and their launch shapes, and the grouping of a
 * micro-batch's entries by state cell on the device (which entries share a
 * sequence is read from device memory, so a captured step replays for any
 * sequences).
 * Must not: allocate or synchronise (graph capture), know models, or read
 * host data beyond the scalar arguments.
 *
 * Ordering: entries of one cell are applied in entry order; entries of
 * different cells are independent, so a micro-batch may interleave
 * sequences (A, B, A, ...). The convolution keeps no state between entries
 * in registers (each output reads its window from the batch's inputs and
 * the old state, the new state is written after a CTA barrier); the delta
 * rule gives each sequence its own warps, which hold the state rows in
 * registers for the whole walk.
 */
#include <math.h>
#include <stdint.h>

#include "backend/cuda/cuda_common.cuh"

namespace {

/* entries per launch: the cell, previous-entry and last-entry tables of a
 * launch sit in shared memory (3 x 4 KiB) */
constexpr int RS_CHUNK = 1024;
constexpr int CONV_CH = 32;     /* channels per CTA (one warp's coalesced row piece) */
constexpr int CONV_ROWS = 8;    /* entries a CTA works on at once */
constexpr int GDR_WARPS = 4;    /* warps per CTA of the delta rule */

__device__ __forceinline__ float silu_f(float v) { return __fdiv_rn(v, __fadd_rn(1.0f, expf(-v))); }

/* ---- conv1d_silu ------------------------------------------------------------
 * v[i] (i < K) is entry t's window newest first: v[0] = x[t], then the
 * inputs of its earlier entries in the batch (prev chain), then the old
 * state rows, newest (row K-2) first. */
template <int KMAX>
__device__ __forceinline__ void conv_window(const float *__restrict__ x, int64_t n_ch, int64_t c, int K,
                                            const float *st, const int32_t *prev, int t, float (&v)[KMAX])
{
    v[0] = x[(int64_t)t * n_ch + c];
    int p = t, d = 0;   /* d: predecessors found in the batch */
#pragma unroll
    for (int i = 1; i < KMAX; i++) {
        if (i >= K) break;
        if (p >= 0) p = prev[p];
        if (p >= 0) {
            v[i] = x[(int64_t)p * n_ch + c];
            d++;
        } else {
            v[i] = st[(int64_t)(K - 1 - i + d) * n_ch + c];   /* u[j] = state[j + d], j = K-1-i */
        }
    }
}

template <int KMAX>
__global__ void k_conv1d_silu(float *__restrict__ y, const float *__restrict__ x, const float *__restrict__ w,
                              int64_t n_ch, int K, ember_cuda_rs_cells rs, int n)
{
    ember_pdl_wait();
    extern __shared__ int32_t sm[];
    int32_t *cell = sm, *prev = sm + n, *last = sm + 2 * n;
    for (int t = threadIdx.x; t < n; t += blockDim.x) cell[t] = rs.cells[t];
    __syncthreads();
    for (int t = threadIdx.x; t < n; t += blockDim.x) {
        int p = t - 1;
        while (p >= 0 && cell[p] != cell[t]) p--;
        prev[t] = p;
        int q = t + 1;
        while (q < n && cell[q] != cell[t]) q++;
        last[t] = q == n;
    }
    __syncthreads();
    const int64_t c = (int64_t)blockIdx.x * CONV_CH + threadIdx.x % CONV_CH;
    const int row = threadIdx.x / CONV_CH;
    const bool on = c < n_ch;
    float wr[KMAX];   /* taps newest first: wr[i] = w[c][K-1-i] */
#pragma unroll
    for (int i = 0; i < KMAX; i++) wr[i] = on && i < K ? w[c * K + (K - 1 - i)] : 0.0f;
    /* every output from the old states */
    if (on)
        for (int t = row; t < n; t += CONV_ROWS) {
            const float *st = rs.base + (int64_t)cell[t] * rs.cell_floats + rs.off;
            float v[KMAX];
            conv_window<KMAX>(x, n_ch, c, K, st, prev, t, v);
            /* the CPU's order: oldest tap first, products and sums rounded apart */
            float acc = 0.0f;
#pragma unroll
            for (int i = KMAX - 1; i >= 0; i--)
                if (i < K) acc = __fadd_rn(acc, __fmul_rn(wr[i], v[i]));
            y[(int64_t)t * n_ch + c] = silu_f(acc);
        }
    __syncthreads();   /* all old states read */
    /* each cell's new state: the last d_conv - 1 inputs of its last entry's window */
    if (on)
        for (int t = row; t < n; t += CONV_ROWS) {
            if (!last[t]) continue;
            float *st = rs.base + (int64_t)cell[t] * rs.cell_floats + rs.off;
            float v[KMAX];
            conv_window<KMAX>(x, n_ch, c, K, st, prev, t, v);
#pragma unroll
            for (int i = 0; i < KMAX - 1; i++)
                if (i < K - 1) st[(int64_t)(K - 2 - i) * n_ch + c] = v[i];
        }
}

/* ---- gated_delta_rule ---------------------------------------------------------
 * A warp holds R value rows of one head's state, C columns per lane (column
 * j * 32 + lane), in registers, and walks the entries of one cell in order:
 *   g = A softplus(alpha + dt_bias), beta = sigmoid(b), k^ = k / |k|,
 *   q^ = q / |q| / sqrt(d_k) (eps inside the roots), S = e^g S,
 *   S_i += beta (v_i - S_i . k^) k^, o_i = S_i . q^.
 * Each warp normalises q and k itself (no CTA barrier in the walk). */
__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

template <int C, int R>
__global__ void __launch_bounds__(GDR_WARPS * 32)
    k_gated_delta_rule(ember_cuda_gdr_params p, const float *__restrict__ qkv, int64_t ld,
                       const float *__restrict__ alpha, const float *__restrict__ bb, ember_cuda_rs_cells rs, int n,
                       float *__restrict__ out)
{
    ember_pdl_wait();
    extern __shared__ int32_t sm[];   /* cell[n] */
    __shared__ int s_first;
    for (int t = threadIdx.x; t < n; t += blockDim.x) sm[t] = rs.cells[t];
    __syncthreads();
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (warp == 0) {
        /* this CTA's sequence: the first entry of the blockIdx.y-th distinct
         * cell, in entry order (-1: fewer cells than the grid's bound) */
        int want = (int)blockIdx.y, found = -1;
        for (int t0 = 0; t0 < n && found < 0; t0 += 32) {
            const int t = t0 + lane;
            bool first = false;
            if (t < n) {
                int q = t - 1;
                while (q >= 0 && sm[q] != sm[t]) q--;
                first = q < 0;
            }
            unsigned m = __ballot_sync(0xffffffffu, first);
            const int cnt = __popc(m);
            if (want < cnt) {
                for (int k = 0; k < want; k++) m &= m - 1;
                found = t0 + __ffs(m) - 1;
            } else {
                want -= cnt;
            }
        }
        if (lane == 0) s_first = found;
    }
    __syncthreads();
    const int z = s_first;
    const int dk = p.d_k, dv = p.d_v, Hk = p.n_head_k, Hv = p.n_head_v;
    const int units = (dv + R - 1) / R;   /* per head */
    const int unit = (int)blockIdx.x * GDR_WARPS + warp;
    if (z < 0 || unit >= Hv * units) return;
    const int h = unit / units, r0 = (unit % units) * R, kh = h % Hk;
    const int32_t my = sm[z];
    float *S = rs.base + (int64_t)my * rs.cell_floats + rs.off + (int64_t)h * dv * dk;
    float s[R][C];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int j = 0; j < C; j++) {
            const int col = j * 32 + lane;
            s[r][j] = r0 + r < dv && col < dk ? S[(int64_t)(r0 + r) * dk + col] : 0.0f;
        }
    const float A = p.A[h], dtb = p.dt_bias[h], sqrt_dk = sqrtf((float)dk);
    /* entry t's inputs: q and k columns of this lane, v of the warp's rows,
     * alpha and b of head h; loaded one entry ahead of the arithmetic, so
     * the walk's latency is the arithmetic's, not the loads' */
    float qv[C], kv[C], vv[R], av, bv;
    auto load = [&](int t, float(&q_)[C], float(&k_)[C], float(&v_)[R], float &a_, float &b_) {
        const float *row = qkv + (int64_t)t * ld;
        const float *q = row + (int64_t)kh * dk, *k = row + (int64_t)Hk * dk + (int64_t)kh * dk;
        const float *v = row + 2 * (int64_t)Hk * dk + (int64_t)h * dv;
#pragma unroll
        for (int j = 0; j < C; j++) {
            const int col = j * 32 + lane;
            q_[j] = col < dk ? q[col] : 0.0f;
            k_[j] = col < dk ? k[col] : 0.0f;
        }
#pragma unroll
        for (int r = 0; r < R; r++) v_[r] = r0 + r < dv ? v[r0 + r] : 0.0f;
        a_ = alpha[(int64_t)t * Hv + h];
        b_ = bb[(int64_t)t * Hv + h];
    };
    load(z, qv, kv, vv, av, bv);
    for (int t = z; t < n;) {
        int tn = t + 1;   /* the sequence's next entry */
        while (tn < n && sm[tn] != my) tn++;
        float qn[C] = {}, kn[C] = {}, vn[R] = {}, an = 0.0f, bn = 0.0f;
        if (tn < n) load(tn, qn, kn, vn, an, bn);
        float sq = 0.0f, sk = 0.0f;
#pragma unroll
        for (int j = 0; j < C; j++) {
            sq += qv[j] * qv[j];
            sk += kv[j] * kv[j];
        }
        sq = warp_sum(sq);
        sk = warp_sum(sk);
        const float qi = 1.0f / sqrtf(sq + p.eps) / sqrt_dk, ki = 1.0f / sqrtf(sk + p.eps);
#pragma unroll
        for (int j = 0; j < C; j++) {
            qv[j] *= qi;
            kv[j] *= ki;
        }
        const float xa = av + dtb;
        const float g = A * (xa > 20.0f ? xa : log1pf(expf(xa)));
        const float beta = 1.0f / (1.0f + expf(-bv));
        const float decay = expf(g);
        float sk_r[R];
#pragma unroll
        for (int r = 0; r < R; r++) {
            float a = 0.0f;
#pragma unroll
            for (int j = 0; j < C; j++) {
                s[r][j] *= decay;
                a += s[r][j] * kv[j];
            }
            sk_r[r] = a;
        }
#pragma unroll
        for (int r = 0; r < R; r++) sk_r[r] = warp_sum(sk_r[r]);
        float o_r[R];
#pragma unroll
        for (int r = 0; r < R; r++) {
            const float d = beta * (vv[r] - sk_r[r]);
            float a = 0.0f;
#pragma unroll
            for (int j = 0; j < C; j++) {
                s[r][j] += d * kv[j];
                a += s[r][j] * qv[j];
            }
            o_r[r] = a;
        }
#pragma unroll
        for (int r = 0; r < R; r++) o_r[r] = warp_sum(o_r[r]);
        float *o = out + (int64_t)t * Hv * dv + (int64_t)h * dv + r0;
#pragma unroll
        for (int r = 0; r < R; r++)
            if (lane == r && r0 + r < dv) o[r] = o_r[r];
        t = tn;
#pragma unroll
        for (int j = 0; j < C; j++) {
            qv[j] = qn[j];
            kv[j] = kn[j];
        }
#pragma unroll
        for (int r = 0; r < R; r++) vv[r] = vn[r];
        av = an;
        bv = bn;
    }
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int j = 0; j < C; j++) {
            const int col = j * 32 + lane;
            if (r0 + r < dv && col < dk) S[(int64_t)(r0 + r) * dk + col] = s[r][j];
        }
}

/* ---- sigmoid_mul, copy_strided --------------------------------------------- */

__global__ void k_sigmoid_mul(float *x, const float *__restrict__ g, int64_t n)
{
    ember_pdl_wait();
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        x[i] = __fmul_rn(x[i], __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-g[i]))));
}

__global__ void k_copy_strided(float *__restrict__ dst, int64_t ld_dst, const float *__restrict__ src, int64_t ld_src,
                               int64_t n_rows, int64_t n_cols)
{
    ember_pdl_wait();
    const int64_t total = n_rows * n_cols;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / n_cols, c = i - r * n_cols;
        dst[r * ld_dst + c] = src[r * ld_src + c];
    }
}

unsigned grid_1d(int64_t n)
{
    const int64_t g = (n + 255) / 256;
    return (unsigned)(g > 65535 ? 65535 : (g < 1 ? 1 : g));
}

ember_status check_cells(const ember_cuda_rs_cells *st, const char *op)
{
    if (!st || !st->base || !st->cells || st->cell_floats < 1 || st->off < 0 || st->max_groups < 1)
        return ember_error(EMBER_ERR_INVALID_ARG, "cuda: %s: bad state cells", op);
    return EMBER_OK;
}

template <int C, int R>
void launch_gdr(ember_cuda *cu, const ember_cuda_gdr_params *p, const float *qkv, int64_t ld, const float *alpha,
                const float *b, ember_cuda_rs_cells rs, int n, float *out)
{
    const int units = p->n_head_v * ((p->d_v + R - 1) / R);
    const int groups = rs.max_groups < n ? rs.max_groups : n;
    ember_launch(k_gated_delta_rule<C, R>, dim3((unsigned)((units + GDR_WARPS - 1) / GDR_WARPS), (unsigned)groups),
                 GDR_WARPS * 32, (size_t)n * sizeof(int32_t), cu->stream, *p, qkv, ld, alpha, b, rs, n, out);
}

} // namespace

extern "C" ember_status ember_cuda_conv1d_silu(ember_cuda *cu, float *y, const float *x, const float *w, int64_t n_ch,
                                               int32_t d_conv, const ember_cuda_rs_cells *st, int32_t n)
{
    EMBER_CUDA_NONNULL(cu);
    EMBER_CUDA_NONNULL(y);
    EMBER_CUDA_NONNULL(x);
    EMBER_CUDA_NONNULL(w);
    ember_status s = check_cells(st, "conv1d_silu");
    if (s != EMBER_OK) return s;
    if (n < 1 || n_ch < 1 || n_ch > (int64_t)CONV_CH * 65535 * 1024 || d_conv < 1 || d_conv > 64)
        return ember_error(EMBER_ERR_INVALID_ARG, "cuda: conv1d_silu: bad shape (n %d, n_ch %lld, d_conv %d)", (int)n,
                           (long long)n_ch, (int)d_conv);
    const unsigned grid = (unsigned)((n_ch + CONV_CH - 1) / CONV_CH);
    for (int32_t t0 = 0; t0 < n; t0 += RS_CHUNK) {   /* launches in entry order */
        const int m = n - t0 < RS_CHUNK ? n - t0 : RS_CHUNK;
        ember_cuda_rs_cells c = *st;
        c.cells += t0;
        const size_t smem = 3 * (size_t)m * sizeof(int32_t);
        const float *xc = x + (int64_t)t0 * n_ch;
        float *yc = y + (int64_t)t0 * n_ch;
        if (d_conv <= 4)
            ember_launch(k_conv1d_silu<4>, grid, CONV_CH * CONV_ROWS, smem, cu->stream, yc, xc, w, n_ch, (int)d_conv, c, m);
        else if (d_conv <= 8)
            ember_launch(k_conv1d_silu<8>, grid, CONV_CH * CONV_ROWS, smem, cu->stream, yc, xc, w, n_ch, (int)d_conv, c, m);
        else
            ember_launch(k_conv1d_silu<64>, grid, CONV_CH * CONV_ROWS, smem, cu->stream, yc, xc, w, n_ch, (int)d_conv, c, m);
        if ((s = ember_cuda_launched("conv1d_silu")) != EMBER_OK) return s;
    }
    return EMBER_OK;
}

extern "C" ember_status ember_cuda_gated_delta_rule(ember_cuda *cu, const ember_cuda_gdr_params *p, const float *qkv,
                                                    int64_t ld, const float *alpha, const float *b,
                                                    const ember_cuda_rs_cells *st, int32_t n, float *out)
{
    EMBER_CUDA_NONNULL(cu);
    EMBER_CUDA_NONNULL(p);
    EMBER_CUDA_NONNULL(p->A);
    EMBER_CUDA_NONNULL(p->dt_bias);
    EMBER_CUDA_NONNULL(qkv);
    EMBER_CUDA_NONNULL(alpha);
    EMBER_CUDA_NONNULL(b);
    EMBER_CUDA_NONNULL(out);
    ember_status s = check_cells(st, "gated_delta_rule");
    if (s != EMBER_OK) return s;
    if (n < 1 || p->n_head_k < 1 || p->n_head_v < 1 || p->n_head_v % p->n_head_k != 0 || p->d_k < 1 || p->d_k > 1024 ||
        p->d_v < 1 || ld < 2 * (int64_t)p->n_head_k * p->d_k + (int64_t)p->n_head_v * p->d_v)
        return ember_error(EMBER_ERR_INVALID_ARG,
                           "cuda: gated_delta_rule: bad shape (n %d, heads %d/%d, d_k %d, d_v %d, ld %lld)", (int)n,
                           (int)p->n_head_k, (int)p->n_head_v, (int)p->d_k, (int)p->d_v, (long long)ld);
    for (int32_t t0 = 0; t0 < n; t0 += RS_CHUNK) {   /* launches in entry order */
        const int m = n - t0 < RS_CHUNK ? n - t0 : RS_CHUNK;
        ember_cuda_rs_cells c = *st;
        c.cells += t0;
        const float *q = qkv + (int64_t)t0 * ld, *al = alpha + (int64_t)t0 * p->n_head_v, *bt = b + (int64_t)t0 * p->n_head_v;
        float *o = out + (int64_t)t0 * p->n_head_v * p->d_v;
        /* C columns per lane, R value rows per warp (registers: R * C of state) */
        if (p->d_k <= 32) launch_gdr<1, 8>(cu, p, q, ld, al, bt, c, m, o);
        else if (p->d_k <= 64) launch_gdr<2, 8>(cu, p, q, ld, al, bt, c, m, o);
        else if (p->d_k <= 128) launch_gdr<4, 4>(cu, p, q, ld, al, bt, c, m, o);
        else if (p->d_k <= 256) launch_gdr<8, 2>(cu, p, q, ld, al, bt, c, m, o);
        else if (p->d_k <= 512) launch_gdr<16, 1>(cu, p, q, ld, al, bt, c, m, o);
        else launch_gdr<32, 1>(cu, p, q, ld, al, bt, c, m, o);
        if ((s = ember_cuda_launched("gated_delta_rule")) != EMBER_OK) return s;
    }
    return EMBER_OK;
}

extern "C" ember_status ember_cuda_sigmoid_mul(ember_cuda *cu, float *x, const float *g, int64_t n)
{
    EMBER_CUDA_NONNULL(cu);
    EMBER_CUDA_NONNULL(x);
    EMBER_CUDA_NONNULL(g);
    if (n <= 0) return ember_error(EMBER_ERR_INVALID_ARG, "cuda: sigmoid_mul: n = %lld", (long long)n);
    ember_launch(k_sigmoid_mul, grid_1d(n), 256, 0, cu->stream, x, g, n);
    return ember_cuda_launched("sigmoid_mul");
}

extern "C" ember_status ember_cuda_copy_strided(ember_cuda *cu, float *dst, int64_t ld_dst, const float *src,
                                                int64_t ld_src, int64_t n_rows, int64_t n_cols)
{
    EMBER_CUDA_NONNULL(cu);
    EMBER_CUDA_NONNULL(dst);
    EMBER_CUDA_NONNULL(src);
    if (n_rows <= 0 || n_cols <= 0 || ld_dst < n_cols || ld_src < n_cols)
        return ember_error(EMBER_ERR_INVALID_ARG, "cuda: copy_strided: bad shape [%lld, %lld] (ld %lld, %lld)",
                           (long long)n_rows, (long long)n_cols, (long long)ld_dst, (long long)ld_src);
    ember_launch(k_copy_strided, grid_1d(n_rows * n_cols), 256, 0, cu->stream, dst, ld_dst, src, ld_src, n_rows, n_cols);
    return ember_cuda_launched("copy_strided");
}
