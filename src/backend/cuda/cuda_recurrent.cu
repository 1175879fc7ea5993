/*
 * cuda_recurrent.cu — the recurrent (linear-attention) kernels of Qwen3.5's
 * Gated DeltaNet layers: the short causal convolution with SiLU, the gated
 * delta rule in its recurrent form (decode, short runs) and its chunked
 * form (a prefill's long run of one sequence), the sigmoid output gate and
 * a strided copy (cuda_backend.h documents each entry point;
 * backend/backend.h the formulas; cpu/recurrent.c is the reference).
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
 * registers for the whole walk. Which sequences are long enough for the
 * chunked form is decided on the device too (entries of the cell in the
 * launch >= chunk_min): both kernels see every sequence, each takes its
 * own and leaves the others.
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

/* Called by a whole warp: the first entry of the want-th distinct cell of
 * cell[0..n), in entry order (-1: fewer distinct cells), on every lane. */
__device__ int group_first(const int32_t *cell, int n, int want)
{
    const int lane = threadIdx.x & 31;
    int found = -1;
    for (int t0 = 0; t0 < n && found < 0; t0 += 32) {
        const int t = t0 + lane;
        bool first = false;
        if (t < n) {
            int q = t - 1;
            while (q >= 0 && cell[q] != cell[t]) q--;
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
    return found;
}

/* The grid's y is the CTA's sequence: the first entry of the blockIdx.y-th
 * distinct cell (group_first). skip_min > 0: sequences of >= skip_min
 * entries in this launch are left to k_gdr_chunked. */
template <int C, int R>
__global__ void __launch_bounds__(GDR_WARPS * 32)
    k_gated_delta_rule(ember_cuda_gdr_params p, const float *__restrict__ qkv, int64_t ld,
                       const float *__restrict__ alpha, const float *__restrict__ bb, ember_cuda_rs_cells rs, int n,
                       int skip_min, float *__restrict__ out)
{
    ember_pdl_wait();
    extern __shared__ int32_t sm[];   /* cell[n] */
    __shared__ int s_first;
    for (int t = threadIdx.x; t < n; t += blockDim.x) sm[t] = rs.cells[t];
    __syncthreads();
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (warp == 0) {
        const int found = group_first(sm, n, (int)blockIdx.y);
        if (lane == 0) s_first = found;
    }
    __syncthreads();
    const int z = s_first;
    if (z < 0) return;
    const int32_t my = sm[z];
    if (skip_min > 0) {   /* a sequence of >= skip_min entries is the chunked kernel's */
        int cnt = 0;
        for (int t0 = 0; t0 < n; t0 += blockDim.x) {
            const int t = t0 + (int)threadIdx.x;
            cnt += __syncthreads_count(t < n && sm[t] == my);
        }
        if (cnt >= skip_min) return;
    }
    const int dk = p.d_k, dv = p.d_v, Hk = p.n_head_k, Hv = p.n_head_v;
    const int units = (dv + R - 1) / R;   /* per head */
    const int unit = (int)blockIdx.x * GDR_WARPS + warp;
    if (unit >= Hv * units) return;
    const int h = unit / units, r0 = (unit % units) * R, kh = h % Hk;
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

/* ---- gated_delta_rule, chunked form -------------------------------------------
 * A prefill's entries of one sequence in chunks of up to C tokens, in the
 * WY / UT form of the delta rule (Yang et al., "Parallelizing Linear
 * Transformers with the Delta Rule over Sequence Length", NeurIPS 2024;
 * with the gates of Gated DeltaNet; cpu/recurrent.c gdr_chunk is the same
 * algebra). With G_j = sum_{s <= j} g_s inside the chunk and S the state
 * before it, the chunk's updates u_j solve the unit lower-triangular system
 *   u_j + sum_{s < j} beta_j e^{G_j - G_s} (k_j . k_s) u_s = beta_j (v_j - e^{G_j} S k_j)
 * and
 *   o_j = e^{G_j} S q_j + sum_{s <= j} e^{G_j - G_s} (q_j . k_s) u_s
 *   S'  = e^{G_m-1} S + sum_s e^{G_m-1 - G_s} u_s k_s^T.
 * All exponents are <= 0 (g <= 0). One CTA of GDRC_THREADS takes one value
 * head, GDRC_BV of its value rows (state rows, held in registers and
 * mirrored in shared memory) and one sequence's entries (its list gathered
 * from the cells, in entry order); per chunk, in shared memory: q^, k^
 * [C][DK], v / u [C][BV], the masked C x C matrices of k.k and q.k. The
 * products with S (K S^T, Q S^T, U^T K) and within the chunk (K K^T, Q K^T,
 * P U) are register-tiled f32 matrix products; the triangular system is
 * solved by blocks of GDRC_BLK rows (a column per thread inside the
 * diagonal block, then the rows below updated by all threads). */
constexpr int GDRC_THREADS = 256;
constexpr int GDRC_BV = 32;    /* value rows per CTA */
constexpr int GDRC_BLK = 16;   /* rows of a diagonal block of the triangular solve */

/* dynamic shared memory of k_gdr_chunked<DK, C> for a launch of n entries */
template <int DK, int C>
constexpr size_t gdrc_smem(int n)
{
    return (2 * (size_t)C * (DK + 1) + (size_t)GDRC_BV * (DK + 1) + (size_t)C * (GDRC_BV + 1) +
            2 * (size_t)C * (C + 1) + 3 * (size_t)C) * sizeof(float) + 2 * (size_t)n * sizeof(int32_t);
}

/* Sequences (cells) of >= min_run entries among the launch's n; grid:
 * (n_head_v * ceil(d_v / GDRC_BV), distinct-cell bound); d_k <= DK. */
template <int DK, int C>
__global__ void __launch_bounds__(GDRC_THREADS)
    k_gdr_chunked(ember_cuda_gdr_params p, const float *__restrict__ qkv, int64_t ld, const float *__restrict__ alpha,
                  const float *__restrict__ bb, ember_cuda_rs_cells rs, int n, int min_run, float *__restrict__ out)
{
    constexpr int BV = GDRC_BV, NT = GDRC_THREADS, NW = NT / 32;
    constexpr int LDK = DK + 1, LDC = C + 1, LDU = BV + 1;   /* odd strides: columns hit 32 banks */
    constexpr int CT = C / 16;   /* C x C and C x BV tiles: a thread's rows (16 x 16 threads) */
    constexpr int ST = DK / 32;  /* state: a thread's columns (rows warp + NW * i, i < SR) */
    constexpr int SR = BV / NW;
    static_assert(NT == 256 && BV == 32 && C % 32 == 0 && C % GDRC_BLK == 0 && DK % 32 == 0, "tile shapes");
    ember_pdl_wait();
    extern __shared__ float smf[];
    float *Qs = smf, *Ks = Qs + C * LDK, *Ss = Ks + C * LDK, *Us = Ss + BV * LDK, *As = Us + C * LDU,
          *Ps = As + C * LDC, *sG = Ps + C * LDC, *sB = sG + C, *sW = sB + C;
    int32_t *cell = (int32_t *)(sW + C), *idx = cell + n;
    __shared__ int s_first, s_cnt;
    const int tid = (int)threadIdx.x, lane = tid & 31, warp = tid >> 5;
    for (int t = tid; t < n; t += NT) cell[t] = rs.cells[t];
    __syncthreads();
    if (warp == 0) {
        /* this CTA's sequence and the list of its entries, in order */
        const int z = group_first(cell, n, (int)blockIdx.y);
        int cnt = 0;
        if (z >= 0)
            for (int t0 = 0; t0 < n; t0 += 32) {
                const int t = t0 + lane;
                const bool mine = t < n && cell[t] == cell[z];
                const unsigned m = __ballot_sync(0xffffffffu, mine);
                if (mine) idx[cnt + __popc(m & ((1u << lane) - 1u))] = t;
                cnt += __popc(m);
            }
        if (lane == 0) {
            s_first = z;
            s_cnt = cnt;
        }
    }
    __syncthreads();
    const int z = s_first, cnt = s_cnt;
    if (z < 0 || cnt < min_run) return;   /* the recurrent kernel's */
    const int dk = p.d_k, dv = p.d_v, Hk = p.n_head_k, Hv = p.n_head_v;
    const int nrb = (dv + BV - 1) / BV;
    const int h = (int)blockIdx.x / nrb, r0 = ((int)blockIdx.x % nrb) * BV, kh = h % Hk;
    float *S = rs.base + (int64_t)cell[z] * rs.cell_floats + rs.off + (int64_t)h * dv * dk;
    const float A = p.A[h], dtb = p.dt_bias[h], sqrt_dk = sqrtf((float)dk);
    /* the state rows r0 + warp + NW * i, columns lane + 32 * j */
    float s[SR][ST];
#pragma unroll
    for (int i = 0; i < SR; i++)
#pragma unroll
        for (int j = 0; j < ST; j++) {
            const int r = warp + NW * i, c = lane + 32 * j;
            s[i][j] = r0 + r < dv && c < dk ? S[(int64_t)(r0 + r) * dk + c] : 0.0f;
            Ss[r * LDK + c] = s[i][j];
        }
    const int tn = tid % 16, tm = tid / 16;   /* C x C and C x BV tiles: rows tm + 16 i, columns tn + 16 j */
    for (int c0 = 0; c0 < cnt; c0 += C) {
        const int m = cnt - c0 < C ? cnt - c0 : C;
        /* q^, k^ (zero rows past m, zero columns past d_k), g, beta, v */
        for (int j = warp; j < C; j += NW) {
            float qv[ST], kv[ST], sq = 0.0f, sk = 0.0f;
            const float *row = qkv + (int64_t)idx[c0 + (j < m ? j : 0)] * ld;
            const float *q = row + (int64_t)kh * dk, *k = row + (int64_t)Hk * dk + (int64_t)kh * dk;
#pragma unroll
            for (int e = 0; e < ST; e++) {
                const int c = lane + 32 * e;
                qv[e] = j < m && c < dk ? q[c] : 0.0f;
                kv[e] = j < m && c < dk ? k[c] : 0.0f;
                sq += qv[e] * qv[e];
                sk += kv[e] * kv[e];
            }
            sq = warp_sum(sq);
            sk = warp_sum(sk);
            const float qi = j < m ? 1.0f / sqrtf(sq + p.eps) / sqrt_dk : 0.0f, ki = j < m ? 1.0f / sqrtf(sk + p.eps) : 0.0f;
#pragma unroll
            for (int e = 0; e < ST; e++) {
                Qs[j * LDK + lane + 32 * e] = qv[e] * qi;
                Ks[j * LDK + lane + 32 * e] = kv[e] * ki;
            }
        }
        if (tid < C) {
            float g = 0.0f, beta = 0.0f;   /* past m: no decay, no update */
            if (tid < m) {
                const int64_t t = idx[c0 + tid];
                const float xa = alpha[t * Hv + h] + dtb;
                g = A * (xa > 20.0f ? xa : log1pf(expf(xa)));
                beta = 1.0f / (1.0f + expf(-bb[t * Hv + h]));
            }
            sG[tid] = g;
            sB[tid] = beta;
        }
        for (int e = tid; e < C * BV; e += NT) {
            const int j = e / BV, i = e % BV;
            Us[j * LDU + i] = j < m && r0 + i < dv
                                  ? qkv[(int64_t)idx[c0 + j] * ld + 2 * (int64_t)Hk * dk + (int64_t)h * dv + r0 + i]
                                  : 0.0f;
        }
        __syncthreads();
        if (warp == 0) {   /* G: inclusive prefix sums of g, C / 32 per lane */
            constexpr int PL = C / 32;
            float v[PL], run = 0.0f;
#pragma unroll
            for (int e = 0; e < PL; e++) {
                run += sG[lane * PL + e];
                v[e] = run;
            }
            float incl = run;
#pragma unroll
            for (int o = 1; o < 32; o <<= 1) {
                const float y = __shfl_up_sync(0xffffffffu, incl, o);
                if (lane >= o) incl += y;
            }
#pragma unroll
            for (int e = 0; e < PL; e++) sG[lane * PL + e] = incl - run + v[e];
        }
        __syncthreads();
        /* A = beta_j e^{G_j - G_s} k_j . k_s (s < j), P = e^{G_j - G_s} q_j . k_s (s <= j);
         * W = beta_j (v_j - e^{G_j} S k_j) into Us; o_j = e^{G_j} S q_j */
        float o[CT][2];
        {
            float akk[CT][CT] = {}, aqk[CT][CT] = {}, xk[CT][2] = {}, xq[CT][2] = {};
            for (int c = 0; c < dk; c++) {
                float kj[CT], qj[CT], ks[CT], sv[2];
#pragma unroll
                for (int i = 0; i < CT; i++) {
                    kj[i] = Ks[(tm + 16 * i) * LDK + c];
                    qj[i] = Qs[(tm + 16 * i) * LDK + c];
                    ks[i] = Ks[(tn + 16 * i) * LDK + c];
                }
#pragma unroll
                for (int i = 0; i < 2; i++) sv[i] = Ss[(tn + 16 * i) * LDK + c];
#pragma unroll
                for (int i = 0; i < CT; i++) {
#pragma unroll
                    for (int j = 0; j < CT; j++) {
                        akk[i][j] = fmaf(kj[i], ks[j], akk[i][j]);
                        aqk[i][j] = fmaf(qj[i], ks[j], aqk[i][j]);
                    }
#pragma unroll
                    for (int j = 0; j < 2; j++) {
                        xk[i][j] = fmaf(kj[i], sv[j], xk[i][j]);
                        xq[i][j] = fmaf(qj[i], sv[j], xq[i][j]);
                    }
                }
            }
#pragma unroll
            for (int i = 0; i < CT; i++) {
                const int j = tm + 16 * i;
                const float gj = sG[j], bj = sB[j], eg = expf(gj);
#pragma unroll
                for (int e = 0; e < CT; e++) {
                    const int sidx = tn + 16 * e;
                    const float d = sidx <= j ? expf(gj - sG[sidx]) : 0.0f;
                    As[j * LDC + sidx] = sidx < j ? bj * d * akk[i][e] : 0.0f;
                    Ps[j * LDC + sidx] = d * aqk[i][e];
                }
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    float *u = &Us[j * LDU + tn + 16 * e];
                    *u = bj * (*u - eg * xk[i][e]);
                    o[i][e] = eg * xq[i][e];
                }
            }
        }
        if (tid < C) sW[tid] = tid < m ? expf(sG[m - 1] - sG[tid]) : 0.0f;
        __syncthreads();
        /* U = (I + A)^-1 W by blocks of GDRC_BLK rows */
        for (int b0 = 0; b0 < m; b0 += GDRC_BLK) {
            if (tid < BV) {   /* the diagonal block, column tid, right-looking */
                float x[GDRC_BLK];
#pragma unroll
                for (int r = 0; r < GDRC_BLK; r++) x[r] = Us[(b0 + r) * LDU + tid];
#pragma unroll
                for (int c = 0; c < GDRC_BLK; c++)
#pragma unroll
                    for (int r = c + 1; r < GDRC_BLK; r++) x[r] = fmaf(-As[(b0 + r) * LDC + b0 + c], x[c], x[r]);
#pragma unroll
                for (int r = 0; r < GDRC_BLK; r++) Us[(b0 + r) * LDU + tid] = x[r];
            }
            __syncthreads();
            const int j0 = b0 + GDRC_BLK;
            if (j0 < m) {   /* the rows below: W_j -= A_j,block U_block */
                for (int e = tid; e < (m - j0) * BV; e += NT) {
                    const int j = j0 + e / BV, i = e % BV;
                    float acc = 0.0f;
#pragma unroll
                    for (int c = 0; c < GDRC_BLK; c++) acc = fmaf(As[j * LDC + b0 + c], Us[(b0 + c) * LDU + i], acc);
                    Us[j * LDU + i] -= acc;
                }
                __syncthreads();
            }
        }
        /* o += P U; out */
        for (int sidx = 0; sidx < m; sidx++) {
            float pj[CT], us[2];
#pragma unroll
            for (int i = 0; i < CT; i++) pj[i] = Ps[(tm + 16 * i) * LDC + sidx];
#pragma unroll
            for (int e = 0; e < 2; e++) us[e] = Us[sidx * LDU + tn + 16 * e];
#pragma unroll
            for (int i = 0; i < CT; i++)
#pragma unroll
                for (int e = 0; e < 2; e++) o[i][e] = fmaf(pj[i], us[e], o[i][e]);
        }
#pragma unroll
        for (int i = 0; i < CT; i++) {
            const int j = tm + 16 * i;
            if (j >= m) continue;
            float *orow = out + (int64_t)idx[c0 + j] * Hv * dv + (int64_t)h * dv + r0;
#pragma unroll
            for (int e = 0; e < 2; e++)
                if (r0 + tn + 16 * e < dv) orow[tn + 16 * e] = o[i][e];
        }
        /* S = e^{G_m-1} S + sum_s e^{G_m-1 - G_s} u_s k_s^T */
        {
            const float el = expf(sG[m - 1]);
#pragma unroll
            for (int i = 0; i < SR; i++)
#pragma unroll
                for (int j = 0; j < ST; j++) s[i][j] *= el;
            for (int sidx = 0; sidx < m; sidx++) {
                const float w = sW[sidx];
                float ui[SR], kc[ST];
#pragma unroll
                for (int i = 0; i < SR; i++) ui[i] = w * Us[sidx * LDU + warp + NW * i];
#pragma unroll
                for (int j = 0; j < ST; j++) kc[j] = Ks[sidx * LDK + lane + 32 * j];
#pragma unroll
                for (int i = 0; i < SR; i++)
#pragma unroll
                    for (int j = 0; j < ST; j++) s[i][j] = fmaf(ui[i], kc[j], s[i][j]);
            }
#pragma unroll
            for (int i = 0; i < SR; i++)
#pragma unroll
                for (int j = 0; j < ST; j++) Ss[(warp + NW * i) * LDK + lane + 32 * j] = s[i][j];
        }
        __syncthreads();   /* Qs, Ks, Us, As, Ps are the next chunk's */
    }
#pragma unroll
    for (int i = 0; i < SR; i++)
#pragma unroll
        for (int j = 0; j < ST; j++) {
            const int r = warp + NW * i, c = lane + 32 * j;
            if (r0 + r < dv && c < dk) S[(int64_t)(r0 + r) * dk + c] = s[i][j];
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
                const float *b, ember_cuda_rs_cells rs, int n, int skip_min, float *out)
{
    const int units = p->n_head_v * ((p->d_v + R - 1) / R);
    const int groups = rs.max_groups < n ? rs.max_groups : n;
    ember_launch(k_gated_delta_rule<C, R>, dim3((unsigned)((units + GDR_WARPS - 1) / GDR_WARPS), (unsigned)groups),
                 GDR_WARPS * 32, (size_t)n * sizeof(int32_t), cu->stream, *p, qkv, ld, alpha, b, rs, n, skip_min, out);
}

/* The chunked kernel's shared memory for d_k <= 256 (0: no instance). */
size_t gdrc_smem_for(int d_k, int n)
{
    if (d_k <= 32) return gdrc_smem<32, 64>(n);
    if (d_k <= 64) return gdrc_smem<64, 64>(n);
    if (d_k <= 128) return gdrc_smem<128, 64>(n);
    if (d_k <= 256) return gdrc_smem<256, 32>(n);
    return 0;
}

/* One launch of k_gdr_chunked<DK, C> over n entries (the shared-memory
 * opt-in for RS_CHUNK entries made on its first call). */
template <int DK, int C>
ember_status launch_gdr_chunked(ember_cuda *cu, const ember_cuda_gdr_params *p, const float *qkv, int64_t ld,
                                const float *alpha, const float *b, ember_cuda_rs_cells rs, int n, int min_run,
                                float *out)
{
    static bool attr_set = false;   /* once per instantiation, for the largest launch */
    if (!attr_set) {
        const ember_status s = ember_cuda_check(cudaFuncSetAttribute(k_gdr_chunked<DK, C>,
                                                                     cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                                     (int)gdrc_smem<DK, C>(RS_CHUNK)),
                                                "gated_delta_rule (shared memory opt-in)");
        if (s != EMBER_OK) return s;
        attr_set = true;
    }
    const int rows = (p->d_v + GDRC_BV - 1) / GDRC_BV;
    const int groups = rs.max_groups < n ? rs.max_groups : n;
    ember_launch(k_gdr_chunked<DK, C>, dim3((unsigned)(p->n_head_v * rows), (unsigned)groups), GDRC_THREADS,
                 gdrc_smem<DK, C>(n), cu->stream, *p, qkv, ld, alpha, b, rs, n, min_run, out);
    return ember_cuda_launched("gated_delta_rule (chunked)");
}

/* The instance for p->d_k (<= 256): chunks of 64 tokens up to d_k 128, of 32 above. */
ember_status launch_gdr_chunked_for(ember_cuda *cu, const ember_cuda_gdr_params *p, const float *qkv, int64_t ld,
                                    const float *alpha, const float *b, ember_cuda_rs_cells rs, int n, int min_run,
                                    float *out)
{
    if (p->d_k <= 32) return launch_gdr_chunked<32, 64>(cu, p, qkv, ld, alpha, b, rs, n, min_run, out);
    if (p->d_k <= 64) return launch_gdr_chunked<64, 64>(cu, p, qkv, ld, alpha, b, rs, n, min_run, out);
    if (p->d_k <= 128) return launch_gdr_chunked<128, 64>(cu, p, qkv, ld, alpha, b, rs, n, min_run, out);
    return launch_gdr_chunked<256, 32>(cu, p, qkv, ld, alpha, b, rs, n, min_run, out);
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
        p->d_v < 1 || p->chunk_min < 0 || ld < 2 * (int64_t)p->n_head_k * p->d_k + (int64_t)p->n_head_v * p->d_v)
        return ember_error(EMBER_ERR_INVALID_ARG,
                           "cuda: gated_delta_rule: bad shape (n %d, heads %d/%d, d_k %d, d_v %d, ld %lld)", (int)n,
                           (int)p->n_head_k, (int)p->n_head_v, (int)p->d_k, (int)p->d_v, (long long)ld);
    /* the chunked form: asked for, an instance for d_k, and its shared memory on this device */
    bool chunk_on = false;
    if (p->chunk_min > 0 && gdrc_smem_for(p->d_k, RS_CHUNK) > 0) {
        int optin = 0;
        chunk_on = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, cu->device) == cudaSuccess &&
                   (size_t)optin >= gdrc_smem_for(p->d_k, RS_CHUNK);
    }
    for (int32_t t0 = 0; t0 < n; t0 += RS_CHUNK) {   /* launches in entry order */
        const int m = n - t0 < RS_CHUNK ? n - t0 : RS_CHUNK;
        ember_cuda_rs_cells c = *st;
        c.cells += t0;
        const float *q = qkv + (int64_t)t0 * ld, *al = alpha + (int64_t)t0 * p->n_head_v, *bt = b + (int64_t)t0 * p->n_head_v;
        float *o = out + (int64_t)t0 * p->n_head_v * p->d_v;
        /* sequences of >= chunk_min entries in this launch: the chunked kernel; the others: the recurrent one */
        const int skip = chunk_on && m >= p->chunk_min ? p->chunk_min : 0;
        /* C columns per lane, R value rows per warp (registers: R * C of state) */
        if (p->d_k <= 32) launch_gdr<1, 8>(cu, p, q, ld, al, bt, c, m, skip, o);
        else if (p->d_k <= 64) launch_gdr<2, 8>(cu, p, q, ld, al, bt, c, m, skip, o);
        else if (p->d_k <= 128) launch_gdr<4, 4>(cu, p, q, ld, al, bt, c, m, skip, o);
        else if (p->d_k <= 256) launch_gdr<8, 2>(cu, p, q, ld, al, bt, c, m, skip, o);
        else if (p->d_k <= 512) launch_gdr<16, 1>(cu, p, q, ld, al, bt, c, m, skip, o);
        else launch_gdr<32, 1>(cu, p, q, ld, al, bt, c, m, skip, o);
        if ((s = ember_cuda_launched("gated_delta_rule")) != EMBER_OK) return s;
        if (skip > 0 && (s = launch_gdr_chunked_for(cu, p, q, ld, al, bt, c, m, skip, o)) != EMBER_OK) return s;
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
