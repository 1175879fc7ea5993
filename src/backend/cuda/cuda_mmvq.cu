/*
 * cuda_mmvq.cu — the fast decode mat-vec y = W x on Q8-quantized
 * activations: the same integer block dots as the exact kernels of
 * cuda_q8.cu (dp4a; exact in any order), summed in free float order.
 *
 * Why a second set: the exact kernels replay the CPU backend's float chain
 * block after block (every lane waits on the previous block's shuffles),
 * which kept E4B's Q4_K mat-vecs at ~1.3 TB/s (bench/results/cuda-h200.md,
 * session 21 profile). Here every lane keeps its own partial sums over the
 * blocks it reads, the loop carries no shuffle, several blocks' loads are
 * in flight per lane, and one warp reduction ends the row. Before waiting
 * on the previous kernel (programmatic dependent launch), each warp asks L2
 * for its row (prefetch.global.L2): weights never depend on the previous
 * kernel, so a CTA resident early has its row on chip when it may start.
 * They are the default (EMBER_CUDA_MMVQ=0 or EMBER_CUDA_EXACT=1 selects the
 * exact ones). One exception to dp4a: Q4_K and Q6_K launches of several
 * columns may run on the int8 tensor cores (k_mmvq_tc4_K / k_mmvq_tc6_K,
 * EMBER_CUDA_MMVQ_TC; off by default: unmeasured until a GPU run).
 *
 * Layouts: ggml-common.h block_q4_0 ... block_q6_K (as cuda_q8.cu); the
 * activation buffer: cuda_q8.cu's header comment. Formulas per block:
 *   32-element formats: d_w d_a sum_i (q_i - OFF) a_i  (+ m_w s_a with a min)
 *   Q4_K: d_w d_a sum_j sc_j (q . a)_j - dmin_w d_a sum_j m_j (sum a)_j
 *   Q6_K: d_w d_a sum_j sc_j (q - 32) . a over 16-element groups j
 * (ggml's vec_dot_q*_q8_*; src/quant/simd*.c are ours).
 * Must not: allocate or synchronise (graph capture), or know models.
 */
#include "backend/cuda/cuda_mmvq_lane.cuh"

using namespace ember_cu;

namespace ember_q8 {

namespace {

/* Ask L2 for row wr[0, row_bytes): one 128-byte line per lane per step. */
__device__ __forceinline__ void prefetch_row(const uint8_t *wr, size_t row_bytes)
{
    const uintptr_t lo = (uintptr_t)wr & ~(uintptr_t)127, hi = (uintptr_t)wr + row_bytes;
    for (uintptr_t p = lo + (uintptr_t)(threadIdx.x & 31) * 128; p < hi; p += 32 * 128)
        asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* The row programs of cuda_mmvq_lane.cuh, one per format family */
template <class T> struct row32 {
    template <int NC>
    __device__ static void run(const uint8_t *wr, int nb, const int8_t *aq, const float *ad, const float *as, int64_t n,
                               int lane, float *acc)
    {
        mmvq32_lane<T, NC>(wr, nb, aq, ad, as, n, lane, acc);
    }
};
struct row4_K {
    template <int NC>
    __device__ static void run(const uint8_t *wr, int nb, const int8_t *aq, const float *ad, const float *, int64_t n,
                               int lane, float *acc)
    {
        mmvq4_K_lane<NC>(wr, nb, aq, ad, n, lane, acc);
    }
    template <int NC, int RPW>
    __device__ static void run_rows(const uint8_t *wr, size_t row_bytes, int nr, int nb, const int8_t *aq,
                                    const float *ad, int64_t n, int lane, float *acc)
    {
        mmvq4_K_lane_rows<NC, RPW>(wr, row_bytes, nr, nb, aq, ad, n, lane, acc);
    }
};
struct row6_K {
    template <int NC>
    __device__ static void run(const uint8_t *wr, int nb, const int8_t *aq, const float *ad, const float *, int64_t n,
                               int lane, float *acc)
    {
        mmvq6_K_lane<NC>(wr, nb, aq, ad, n, lane, acc);
    }
    template <int NC, int RPW>
    __device__ static void run_rows(const uint8_t *wr, size_t row_bytes, int nr, int nb, const int8_t *aq,
                                    const float *ad, int64_t n, int lane, float *acc)
    {
        mmvq6_K_lane_rows<NC, RPW>(wr, row_bytes, nr, nb, aq, ad, n, lane, acc);
    }
};

/* One warp per row (mm_seg_row): the lanes' shares, then one warp sum per
 * column. as: Q8_1's s (NULL for the other activation formats). */
template <class R, int NC>
__global__ void __launch_bounds__(kWarpsQ8 * 32)
k_mmvq(mm_seg ms, size_t row_bytes, int nb, const int8_t *__restrict__ aq, const float *__restrict__ ad,
       const float *__restrict__ as, int64_t n)
{
    const uint8_t *wr;
    float *y;
    int64_t n_rows, row;
    const bool has = mm_seg_row(ms, row_bytes, wr, y, n_rows, row);
    if (has) prefetch_row(wr, row_bytes);
    ember_pdl_wait();
    if (!has) return;
    const int lane = threadIdx.x & 31;
    float acc[NC];
#pragma unroll
    for (int c = 0; c < NC; c++) acc[c] = 0.0f;
    R::template run<NC>(wr, nb, aq, ad, as, n, lane, acc);
#pragma unroll
    for (int c = 0; c < NC; c++) {
        const float v = warp_sum(acc[c]);
        if (lane == 0) y[(int64_t)c * n_rows + row] = v;
    }
}

/* One-column mat-vecs with several rows a warp. One row a warp leaves each
 * warp a few hundred bytes between its launch and its exit: the H200 read
 * Gemma 3's Q8_0 LM head (262,144 rows of 640) at ~1.8 TB/s that way. Here
 * each warp takes RPW consecutive rows of one segment's weight (its rows
 * prefetched to L2 together), each row the same lane program and warp sum as
 * k_mmvq's (the same float order: the same outputs). The rows' lane
 * programs run one after another: on the H200 (2026-12-07) 2 or 4 rows a warp
 * was slower than one for E4B's and Gemma 3's layer weights (the head keeps
 * 4). The segments' CTA ends ms.end0 / ms.end1 count CTAs of kWarpsQ8 * RPW rows. */
constexpr int64_t kTallRows = 32768; /* rows from which a lone weight takes 4 rows a warp by default */

/* This warp's rows of a launch of RPW rows a warp (k_mmvq_rows,
 * k_mmvq_smem): the segment's weight wr at the first row, its output y,
 * the first row row0 and the count nr (0: none, the warp has no row). */
template <int RPW> struct warp_rows {
    const uint8_t *wr;
    float *y;
    int64_t row0, n_rows; /* n_rows: the segment's (its outputs' column stride) */
    int nr;
};

template <int RPW>
__device__ __forceinline__ warp_rows<RPW> rows_of_warp(const mm_seg &ms, size_t row_bytes)
{
    const unsigned bx = blockIdx.x;
    const int seg = bx < ms.end0 ? 0 : (bx < ms.end1 ? 1 : 2);
    const unsigned b0 = seg == 0 ? 0u : (seg == 1 ? ms.end0 : ms.end1);
    const int64_t n_rows = seg == 0 ? ms.n0 : (seg == 1 ? ms.n1 : ms.n2);
    warp_rows<RPW> w;
    w.n_rows = n_rows;
    w.row0 = ((int64_t)(bx - b0) * kWarpsQ8 + (threadIdx.x >> 5)) * RPW;
    w.nr = w.row0 < n_rows ? (int)(n_rows - w.row0 < RPW ? n_rows - w.row0 : RPW) : 0;
    w.wr = (seg == 0 ? ms.W0 : (seg == 1 ? ms.W1 : ms.W2)) + w.row0 * row_bytes;
    w.y = seg == 0 ? ms.y0 : (seg == 1 ? ms.y1 : ms.y2);
    return w;
}

/* The rows' lane programs one after another over the rows at src (the
 * weight or its shared copy), then one warp sum and store per row. */
template <class R, int RPW>
__device__ __forceinline__ void run_rows(const warp_rows<RPW> &w, const uint8_t *src, size_t row_bytes, int nb,
                                         const int8_t *aq, const float *ad, const float *as, int64_t n)
{
    const int lane = threadIdx.x & 31;
    float acc[RPW];
#pragma unroll
    for (int r = 0; r < RPW; r++) {
        acc[r] = 0.0f;
        if (r < w.nr) R::template run<1>(src + (size_t)r * row_bytes, nb, aq, ad, as, n, lane, &acc[r]);
    }
#pragma unroll
    for (int r = 0; r < RPW; r++) {
        const float v = warp_sum(acc[r]);
        if (lane == 0 && r < w.nr) w.y[w.row0 + r] = v;
    }
}

/* The segments' CTA ends and the grid of a launch of kWarpsQ8 * RPW rows a CTA. */
inline unsigned rows_grid(mm_seg &ms, int64_t per_cta)
{
    const unsigned c0 = (unsigned)((ms.n0 + per_cta - 1) / per_cta), c1 = (unsigned)((ms.n1 + per_cta - 1) / per_cta),
                   c2 = (unsigned)((ms.n2 + per_cta - 1) / per_cta);
    ms.end0 = c0;
    ms.end1 = c0 + c1;
    return c0 + c1 + c2;
}

template <class R, int RPW>
__global__ void __launch_bounds__(kWarpsQ8 * 32)
k_mmvq_rows(mm_seg ms, size_t row_bytes, int nb, const int8_t *__restrict__ aq, const float *__restrict__ ad,
            const float *__restrict__ as, int64_t n)
{
    const warp_rows<RPW> w = rows_of_warp<RPW>(ms, row_bytes);
    if (w.nr) prefetch_row(w.wr, (size_t)w.nr * row_bytes);
    ember_pdl_wait();
    if (!w.nr) return;
    run_rows<R, RPW>(w, w.wr, row_bytes, nb, aq, ad, as, n);
}

template <class R, int RPW>
void launch_rows(cudaStream_t st, size_t row_bytes, mm_seg ms, int nb, const q8_view &a, int64_t n)
{
    const unsigned grid = rows_grid(ms, (int64_t)kWarpsQ8 * RPW);
    ember_launch(k_mmvq_rows<R, RPW>, grid, kWarpsQ8 * 32, 0, st, ms, row_bytes, nb, a.qs, a.d, a.s, n);
}

template <class R>
void launch_rows_n(cudaStream_t st, size_t row_bytes, const mm_seg &ms, int nb, const q8_view &a, int64_t n, int rpw)
{
    if (rpw >= 3) launch_rows<R, 4>(st, row_bytes, ms, nb, a, n);
    else if (rpw == 2) launch_rows<R, 2>(st, row_bytes, ms, nb, a, n);
    else launch_rows<R, 1>(st, row_bytes, ms, nb, a, n);
}

/* The staged variant (EMBER_CUDA_MMVQ_SMEM): each warp copies its RPW
 * rows into shared memory with cp.async (16-byte pieces from the 16-byte
 * line below each row's start, so a row keeps its address's low 4 bits
 * and the lane programs' aligned loads hold) before waiting on the
 * previous kernel, then runs the same lane program and warp sum per row on
 * the shared copy (the same outputs as k_mmvq). The copies hold no
 * registers, so a warp keeps RPW rows of loads in flight where k_mmvq
 * keeps one pass of one row: on the H200 E4B's 20,480 x 2,560 Q4_K gate/up
 * launch read ~1.8 TB/s one row a warp (ncu, 2026-12-07).
 * Shared memory: kWarpsQ8 * RPW * stride bytes, stride = smem_row_stride. */
__host__ __device__ constexpr size_t smem_row_stride(size_t row_bytes)
{
    return ((row_bytes + 15) / 16) * 16 + 48; /* + the start's offset in its line (< 16), with room to spare */
}

/* 16 bytes from src to shared dst, of which the first n (0..16) are read
 * and the rest zero-filled (cp.async's src-size operand): the last line of
 * a weight may end inside it, and nothing past the weight is read. */
__device__ __forceinline__ void cp_async16(void *dst, const void *src, unsigned n)
{
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src), "r"(n) : "memory");
}

template <class R, int RPW>
__global__ void __launch_bounds__(kWarpsQ8 * 32)
k_mmvq_smem(mm_seg ms, size_t row_bytes, int nb, const int8_t *__restrict__ aq, const float *__restrict__ ad,
            const float *__restrict__ as, int64_t n)
{
    extern __shared__ __align__(16) uint8_t sm_rows[];
    const warp_rows<RPW> w = rows_of_warp<RPW>(ms, row_bytes);
    const int lane = threadIdx.x & 31;
    uint8_t *mine = sm_rows + (size_t)(threadIdx.x >> 5) * RPW * smem_row_stride(row_bytes);
    if (w.nr) {
        /* rows r0..r0+nr are contiguous: one copy of their lines */
        const uintptr_t lo = (uintptr_t)w.wr & ~(uintptr_t)15, end = (uintptr_t)w.wr + (size_t)w.nr * row_bytes;
        const size_t n16 = ((end + 15) / 16 * 16 - lo) / 16;
        for (size_t i = lane; i < n16; i += 32) {
            const uintptr_t a = lo + 16 * i;
            cp_async16(mine + 16 * i, (const void *)a, end - a < 16 ? (unsigned)(end - a) : 16u);
        }
        asm volatile("cp.async.commit_group;" ::: "memory");
    }
    ember_pdl_wait();
    if (!w.nr) return;
    asm volatile("cp.async.wait_group 0;" ::: "memory");
    __syncwarp();
    run_rows<R, RPW>(w, mine + ((uintptr_t)w.wr & 15), row_bytes, nb, aq, ad, as, n);
}

template <class R, int RPW>
void launch_smem(cudaStream_t st, size_t row_bytes, mm_seg ms, int nb, const q8_view &a, int64_t n)
{
    const unsigned grid = rows_grid(ms, (int64_t)kWarpsQ8 * RPW);
    /* a warp's rows are one contiguous copy: RPW rows and 48 * RPW bytes of slack */
    const size_t smem = (size_t)kWarpsQ8 * RPW * smem_row_stride(row_bytes);
    ember_launch(k_mmvq_smem<R, RPW>, grid, kWarpsQ8 * 32, smem, st, ms, row_bytes, nb, a.qs, a.d, a.s, n);
}

constexpr size_t kSmemMax = 48 * 1024; /* no opt-in attribute: the default dynamic shared memory limit */

/* rpw rows a warp, fewer where kWarpsQ8 * rpw staged rows pass kSmemMax;
 * false: not even one row fits (the caller falls back to k_mmvq). */
template <class R>
bool launch_smem_n(cudaStream_t st, size_t row_bytes, const mm_seg &ms, int nb, const q8_view &a, int64_t n, int rpw)
{
    const size_t per_row = (size_t)kWarpsQ8 * smem_row_stride(row_bytes);
    if (rpw >= 3 && 4 * per_row <= kSmemMax) launch_smem<R, 4>(st, row_bytes, ms, nb, a, n);
    else if (rpw >= 2 && 2 * per_row <= kSmemMax) launch_smem<R, 2>(st, row_bytes, ms, nb, a, n);
    else if (per_row <= kSmemMax) launch_smem<R, 1>(st, row_bytes, ms, nb, a, n);
    else return false;
    return true;
}

bool launch_fast_smem(cudaStream_t st, uint32_t type, size_t row_bytes, const mm_seg &ms, const q8_view &a, int64_t n,
                      int rpw)
{
    const int nb32 = (int)(n / 32), nb256 = (int)(n / 256);
    switch (type) {
    case EMBER_TYPE_Q4_0: return launch_smem_n<row32<uq4_0>>(st, row_bytes, ms, nb32, a, n, rpw);
    case EMBER_TYPE_Q4_1: return launch_smem_n<row32<uq4_1>>(st, row_bytes, ms, nb32, a, n, rpw);
    case EMBER_TYPE_Q5_0: return launch_smem_n<row32<uq5_0>>(st, row_bytes, ms, nb32, a, n, rpw);
    case EMBER_TYPE_Q5_1: return launch_smem_n<row32<uq5_1>>(st, row_bytes, ms, nb32, a, n, rpw);
    case EMBER_TYPE_Q8_0: return launch_smem_n<row32<uq8_0>>(st, row_bytes, ms, nb32, a, n, rpw);
    case EMBER_TYPE_Q4_K: return launch_smem_n<row4_K>(st, row_bytes, ms, nb256, a, n, rpw);
    default: return launch_smem_n<row6_K>(st, row_bytes, ms, nb256, a, n, rpw); /* Q6_K (checked by the caller) */
    }
}

/* One column with rpw rows a warp (0: 4 for a lone weight of >= kTallRows
 * rows, else the caller's k_mmvq); false: not taken. Unused segments have
 * n1 / n2 = 0 (the caller's mm_seg is zeroed). */
bool launch_fast_rows(cudaStream_t st, uint32_t type, size_t row_bytes, const mm_seg &ms, unsigned grid,
                      const q8_view &a, int64_t n, int rpw)
{
    if (rpw <= 0) {
        if (ms.n0 < kTallRows || ms.end0 != grid) return false;
        rpw = 4;
    }
    const int nb32 = (int)(n / 32), nb256 = (int)(n / 256);
    switch (type) {
    case EMBER_TYPE_Q4_0: launch_rows_n<row32<uq4_0>>(st, row_bytes, ms, nb32, a, n, rpw); return true;
    case EMBER_TYPE_Q4_1: launch_rows_n<row32<uq4_1>>(st, row_bytes, ms, nb32, a, n, rpw); return true;
    case EMBER_TYPE_Q5_0: launch_rows_n<row32<uq5_0>>(st, row_bytes, ms, nb32, a, n, rpw); return true;
    case EMBER_TYPE_Q5_1: launch_rows_n<row32<uq5_1>>(st, row_bytes, ms, nb32, a, n, rpw); return true;
    case EMBER_TYPE_Q8_0: launch_rows_n<row32<uq8_0>>(st, row_bytes, ms, nb32, a, n, rpw); return true;
    case EMBER_TYPE_Q4_K: launch_rows_n<row4_K>(st, row_bytes, ms, nb256, a, n, rpw); return true;
    default: launch_rows_n<row6_K>(st, row_bytes, ms, nb256, a, n, rpw); return true; /* Q6_K (checked by the caller) */
    }
}

/* Several columns with RPW rows a warp (EMBER_CUDA_MMVQ_MR; Q4_K and Q6_K):
 * k_mmvq's lanes load every column's activations for each row, 8 columns
 * of 32 bytes per 32 weight bytes, so an 8-column launch reads its
 * activations (from L1/L2) 8 times over per row; here each activation load
 * serves the warp's RPW rows (mmvq*_lane_rows: the same outputs as
 * k_mmvq). H100, 2026-12-07 (bench/results/cuda-h200.md, session 31): 8
 * streams of E4B 1,176-1,228 -> 1,260-1,310 tok/s with 2 rows (4: 1,247-
 * 1,302), Qwen3.5-4B 1,598-1,601 -> 1,769 (4: 1,743); one column unchanged. */
template <class R, int NC, int RPW>
__global__ void __launch_bounds__(kWarpsQ8 * 32)
k_mmvq_mr(mm_seg ms, size_t row_bytes, int nb, const int8_t *__restrict__ aq, const float *__restrict__ ad, int64_t n)
{
    const warp_rows<RPW> w = rows_of_warp<RPW>(ms, row_bytes);
    if (w.nr) prefetch_row(w.wr, (size_t)w.nr * row_bytes);
    ember_pdl_wait();
    if (!w.nr) return;
    const int lane = threadIdx.x & 31;
    float acc[RPW * NC];
#pragma unroll
    for (int i = 0; i < RPW * NC; i++) acc[i] = 0.0f;
    R::template run_rows<NC, RPW>(w.wr, row_bytes, w.nr, nb, aq, ad, n, lane, acc);
#pragma unroll
    for (int r = 0; r < RPW; r++)
#pragma unroll
        for (int c = 0; c < NC; c++) {
            const float v = warp_sum(acc[r * NC + c]);
            if (lane == 0 && r < w.nr) w.y[(int64_t)c * w.n_rows + w.row0 + r] = v;
        }
}

template <class R, int NC>
void launch_mr(cudaStream_t st, size_t row_bytes, mm_seg ms, int nb, const q8_view &a, int64_t n, int rpw)
{
    if (rpw >= 4) {
        const unsigned grid = rows_grid(ms, (int64_t)kWarpsQ8 * 4);
        ember_launch(k_mmvq_mr<R, NC, 4>, grid, kWarpsQ8 * 32, 0, st, ms, row_bytes, nb, a.qs, a.d, n);
    } else {
        const unsigned grid = rows_grid(ms, (int64_t)kWarpsQ8 * 2);
        ember_launch(k_mmvq_mr<R, NC, 2>, grid, kWarpsQ8 * 32, 0, st, ms, row_bytes, nb, a.qs, a.d, n);
    }
}

template <int NC>
bool launch_mr_nc(cudaStream_t st, uint32_t type, size_t row_bytes, const mm_seg &ms, const q8_view &a, int64_t n,
                  int rpw)
{
    const int nb256 = (int)(n / 256);
    if (type == EMBER_TYPE_Q4_K) launch_mr<row4_K, NC>(st, row_bytes, ms, nb256, a, n, rpw);
    else if (type == EMBER_TYPE_Q6_K) launch_mr<row6_K, NC>(st, row_bytes, ms, nb256, a, n, rpw);
    else return false;
    return true;
}

/* Several columns, rpw (2 or 4) rows a warp, Q4_K / Q6_K weights; false:
 * not taken (another type or nc, or rpw < 2). */
bool launch_fast_mr(cudaStream_t st, uint32_t type, size_t row_bytes, const mm_seg &ms, const q8_view &a, int64_t n,
                    int nc, int rpw)
{
    if (rpw < 2) return false;
    switch (nc) {
    case 2: return launch_mr_nc<2>(st, type, row_bytes, ms, a, n, rpw);
    case 3: return launch_mr_nc<3>(st, type, row_bytes, ms, a, n, rpw);
    case 4: return launch_mr_nc<4>(st, type, row_bytes, ms, a, n, rpw);
    case 5: return launch_mr_nc<5>(st, type, row_bytes, ms, a, n, rpw);
    case 6: return launch_mr_nc<6>(st, type, row_bytes, ms, a, n, rpw);
    case 7: return launch_mr_nc<7>(st, type, row_bytes, ms, a, n, rpw);
    case 8: return launch_mr_nc<8>(st, type, row_bytes, ms, a, n, rpw);
    default: return false;
    }
}

/* Q4_K and Q6_K, 2-8 columns on the int8 tensor cores (EMBER_CUDA_MMVQ_TC=N:
 * from N columns; default 0, off). k_mmvq_mr's lanes do one dp4a per 4
 * weight bytes per column, 8 columns of integer work per weight byte; here
 * one mma per sub-block does a 16-row tile's dots with all 8 columns (lanes
 * past the launch's columns repeat its last one) and the lanes keep only the
 * scale and float steps (cuda_mmvq_lane.cuh tc4_K_* / tc6_K_*, its layout
 * notes; host-tested by test_mmvq_host.cu with an emulated mma):
 *   Q4_K: two mma.m16n8k32 per 32-element sub-block (the quants, and all-ones
 *         A for the columns' sums the mins need), weights loaded to registers;
 *   Q6_K: one mma.m16n8k16 per 16-element sub-block (q - 32 is an s8), the
 *         pass's 210-byte (2-byte aligned) blocks staged in shared memory by
 *         16-byte cp.async first (the lane header says why).
 * A CTA of kTcWarps warps takes one tile of 16 rows of a segment's weight
 * (prefetched to L2 before the PDL wait), its warps the tile's super-blocks
 * b = warp, warp + kTcWarps, ... (kTcPass of them loaded before their
 * arithmetic), then the warps' partial sums meet in shared memory and 128
 * threads store the tile's 16 x nc outputs. Free float order: within 1e-5
 * of k_mmvq's, not its bits. Unmeasured: written without a GPU
 * (2026-12), off by default until a GPU run has checked and timed it. */
static_assert(kTcWarps * 32 == kTcRows * kTcCols, "one output per thread in the store");
static_assert(kTcCols == kMaxColsQ8, "the tile's columns are a launch's");

/* d = A B (C = 0): PTX mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32, sm_80+ */
__device__ __forceinline__ void mma_s8_16832(const tc_frag_a &a, const tc_frag_b &b, tc_frag_d &d)
{
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%10,%10,%10,%10};"
        : "=r"(d.r[0]), "=r"(d.r[1]), "=r"(d.r[2]), "=r"(d.r[3])
        : "r"(a.r[0]), "r"(a.r[1]), "r"(a.r[2]), "r"(a.r[3]), "r"(b.r[0]), "r"(b.r[1]), "r"(0));
}

/* d = A B (C = 0): PTX mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32, sm_80+ */
__device__ __forceinline__ void mma_s8_16816(const tc_frag_a16 &a, const tc_frag_b16 &b, tc_frag_d &d)
{
    asm("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%7,%7,%7,%7};"
        : "=r"(d.r[0]), "=r"(d.r[1]), "=r"(d.r[2]), "=r"(d.r[3])
        : "r"(a.r[0]), "r"(a.r[1]), "r"(b.r[0]), "r"(0));
}

/* This CTA's tile: the segment's weight at the tile's first row row0, its
 * output y and row count n_rows, and the tile's rows nr (1..16; 0: none). */
struct tc_tile {
    const uint8_t *wr;
    float *y;
    int64_t row0, n_rows;
    int nr;
};

__device__ __forceinline__ tc_tile tile_of_cta(const mm_seg &ms, size_t row_bytes)
{
    const unsigned bx = blockIdx.x;
    const int seg = bx < ms.end0 ? 0 : (bx < ms.end1 ? 1 : 2);
    const unsigned b0 = seg == 0 ? 0u : (seg == 1 ? ms.end0 : ms.end1);
    tc_tile t;
    t.n_rows = seg == 0 ? ms.n0 : (seg == 1 ? ms.n1 : ms.n2);
    t.row0 = (int64_t)(bx - b0) * kTcRows;
    t.nr = t.row0 < t.n_rows ? (int)(t.n_rows - t.row0 < kTcRows ? t.n_rows - t.row0 : kTcRows) : 0;
    t.wr = (seg == 0 ? ms.W0 : (seg == 1 ? ms.W1 : ms.W2)) + t.row0 * row_bytes;
    t.y = seg == 0 ? ms.y0 : (seg == 1 ? ms.y1 : ms.y2);
    return t;
}

/* prefetch_row over a CTA: its threads ask L2 for wr[0, bytes), one line each per step */
__device__ __forceinline__ void prefetch_cta(const uint8_t *wr, size_t bytes)
{
    const uintptr_t lo = (uintptr_t)wr & ~(uintptr_t)127, hi = (uintptr_t)wr + bytes;
    for (uintptr_t p = lo + (uintptr_t)threadIdx.x * 128; p < hi; p += (uintptr_t)blockDim.x * 128)
        asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

/* The end of a tile's CTA: each warp's lanes put their D elements' sums
 * acc[4] (tc_d_row / tc_d_col) in part[warp], then the threads of
 * tc_out_of add the warps' in warp order and store y[col][row0 + row].
 * Every thread of the CTA calls it (it holds a __syncthreads). */
__device__ __forceinline__ void tc_store_tile(float (*part)[kTcRows * kTcCols], const float *acc, const tc_tile &t,
                                              int nc)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int i = 0; i < 4; i++) part[warp][tc_d_row(lane, i) * kTcCols + tc_d_col(lane, i)] = acc[i];
    __syncthreads();
    int row, col;
    if (tc_out_of(threadIdx.x, t.nr, nc, row, col)) {
        float v = part[0][row * kTcCols + col];
#pragma unroll
        for (int k = 1; k < kTcWarps; k++) v += part[k][row * kTcCols + col];
        t.y[(int64_t)col * t.n_rows + t.row0 + row] = v;
    }
}

/* nb super-blocks a row, nc (1..8) columns: aq / ad the Q8_K view of column 0, n the row length */
__global__ void __launch_bounds__(kTcWarps * 32)
k_mmvq_tc4_K(mm_seg ms, size_t row_bytes, int nb, const int8_t *__restrict__ aq, const float *__restrict__ ad,
             int64_t n, int nc)
{
    __shared__ float part[kTcWarps][kTcRows * kTcCols];
    const tc_tile t = tile_of_cta(ms, row_bytes);
    if (t.nr) prefetch_cta(t.wr, (size_t)t.nr * row_bytes);
    ember_pdl_wait();
    if (!t.nr) return; /* the whole CTA: the __syncthreads below is reached by all or none */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, tig = lane & 3;
    const tc_lane p = tc_lane_of(t.wr, row_bytes, t.nr, aq, ad, n, nc, lane);
    const tc_frag_a ones = tc_frag_ones();
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int b0 = warp; b0 < nb; b0 += kTcWarps * kTcPass) {
        tc4_K_w w[kTcPass];
        tc_x8 x[kTcPass];
        float da0[kTcPass], da1[kTcPass];
#pragma unroll
        for (int u = 0; u < kTcPass; u++) {
            const int b = b0 + kTcWarps * u;
            if (b < nb) {
                tc4_K_load_w(p, b, tig, w[u]);
                tc_load_x(p, b, tig, x[u]);
                da0[u] = p.da0[b];
                da1[u] = p.da1[b];
            }
        }
#pragma unroll
        for (int u = 0; u < kTcPass; u++) {
            if (b0 + kTcWarps * u >= nb) break; /* warp-uniform: the mma's lanes stay converged */
            int isum[4] = {0, 0, 0, 0}, msum[4] = {0, 0, 0, 0};
#pragma unroll
            for (int s = 0; s < 8; s++) {
                const tc_frag_b bf = tc_frag_b_of(x[u], s);
                tc_frag_d dot, sum;
                mma_s8_16832(tc4_K_frag_a(w[u], s), bf, dot);
                mma_s8_16832(ones, bf, sum);
                tc4_K_sub_step(w[u], s, dot, sum, isum, msum);
            }
            tc4_K_block_step(w[u], da0[u], da1[u], isum, msum, acc);
        }
    }
    tc_store_tile(part, acc, t, nc);
}

/* Q6_K: each pass's blocks of the warp's super-blocks first copied to its
 * stage (tc6_K_piece: 16-byte cp.async, 14 a lane), the activations loaded
 * meanwhile, then per super-block 16 mma.m16n8k16 on the staged words.
 * Shared memory: 30 KiB of stages (kTcWarps x kTcPass x 16 rows x 240
 * bytes) + the 2 KiB of part, static (under the 48 KiB default). */
__global__ void __launch_bounds__(kTcWarps * 32)
k_mmvq_tc6_K(mm_seg ms, size_t row_bytes, int nb, const int8_t *__restrict__ aq, const float *__restrict__ ad,
             int64_t n, int nc)
{
    __shared__ float part[kTcWarps][kTcRows * kTcCols];
    __shared__ __align__(16) uint8_t stage[kTcWarps][kTcPass * kTcRows * kTc6Stride];
    const tc_tile t = tile_of_cta(ms, row_bytes);
    if (t.nr) prefetch_cta(t.wr, (size_t)t.nr * row_bytes);
    ember_pdl_wait();
    if (!t.nr) return; /* the whole CTA: the __syncthreads below is reached by all or none */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, tig = lane & 3;
    const tc_lane p = tc_lane_of(t.wr, row_bytes, t.nr, aq, ad, n, nc, lane);
    uint8_t *mine = stage[warp];
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int b0 = warp; b0 < nb; b0 += kTcWarps * kTcPass) {
        for (int i = lane; i < kTc6Pieces; i += 32) {
            const uint8_t *src;
            unsigned nbytes;
            int dst;
            if (tc6_K_piece(i, t.wr, row_bytes, t.nr, nb, b0, src, nbytes, dst)) cp_async16(mine + dst, src, nbytes);
        }
        asm volatile("cp.async.commit_group;" ::: "memory");
        tc_x16 x[kTcPass];
        float da0[kTcPass], da1[kTcPass];
#pragma unroll
        for (int u = 0; u < kTcPass; u++) {
            const int b = b0 + kTcWarps * u;
            if (b < nb) {
                tc_load_x16(p, b, tig, x[u]);
                da0[u] = p.da0[b];
                da1[u] = p.da1[b];
            }
        }
        asm volatile("cp.async.wait_group 0;" ::: "memory");
        __syncwarp();
#pragma unroll
        for (int u = 0; u < kTcPass; u++) {
            const int b = b0 + kTcWarps * u;
            if (b >= nb) break; /* warp-uniform: the mma's lanes stay converged */
            tc6_K_w w;
            tc6_K_load_w(tc6_K_staged(mine, u, p.r0, p.row0 + (size_t)b * kTc6Bytes),
                         tc6_K_staged(mine, u, p.r1, p.row1 + (size_t)b * kTc6Bytes), tig, w);
            int isum[4] = {0, 0, 0, 0};
#pragma unroll
            for (int s = 0; s < 16; s++) {
                tc_frag_d dot;
                mma_s8_16816(tc6_K_frag_a(w, s), tc_frag_b16_of(x[u], s), dot);
                tc6_K_sub_step(w, s, dot, isum);
            }
            tc6_K_block_step(w, da0[u], da1[u], isum, acc);
        }
        __syncwarp(); /* every lane's staged reads done before the next pass's copies */
    }
    tc_store_tile(part, acc, t, nc);
}

void launch_tc_K(cudaStream_t st, uint32_t type, size_t row_bytes, mm_seg ms, const q8_view &a, int64_t n, int nc)
{
    const unsigned grid = rows_grid(ms, kTcRows);
    if (type == EMBER_TYPE_Q4_K)
        ember_launch(k_mmvq_tc4_K, grid, kTcWarps * 32, 0, st, ms, row_bytes, (int)(n / 256), a.qs, a.d, n, nc);
    else
        ember_launch(k_mmvq_tc6_K, grid, kTcWarps * 32, 0, st, ms, row_bytes, (int)(n / 256), a.qs, a.d, n, nc);
}

template <int NC>
void launch_fast_nc(cudaStream_t st, uint32_t type, size_t row_bytes, const mm_seg &ms, unsigned grid,
                    const q8_view &a, int64_t n)
{
    const int nb32 = (int)(n / 32), nb256 = (int)(n / 256);
    switch (type) {
    case EMBER_TYPE_Q4_0:
        ember_launch(k_mmvq<row32<uq4_0>, NC>, grid, kWarpsQ8 * 32, 0, st, ms, row_bytes, nb32, a.qs, a.d, a.s, n);
        break;
    case EMBER_TYPE_Q4_1:
        ember_launch(k_mmvq<row32<uq4_1>, NC>, grid, kWarpsQ8 * 32, 0, st, ms, row_bytes, nb32, a.qs, a.d, a.s, n);
        break;
    case EMBER_TYPE_Q5_0:
        ember_launch(k_mmvq<row32<uq5_0>, NC>, grid, kWarpsQ8 * 32, 0, st, ms, row_bytes, nb32, a.qs, a.d, a.s, n);
        break;
    case EMBER_TYPE_Q5_1:
        ember_launch(k_mmvq<row32<uq5_1>, NC>, grid, kWarpsQ8 * 32, 0, st, ms, row_bytes, nb32, a.qs, a.d, a.s, n);
        break;
    case EMBER_TYPE_Q8_0:
        ember_launch(k_mmvq<row32<uq8_0>, NC>, grid, kWarpsQ8 * 32, 0, st, ms, row_bytes, nb32, a.qs, a.d, a.s, n);
        break;
    case EMBER_TYPE_Q4_K:
        ember_launch(k_mmvq<row4_K, NC>, grid, kWarpsQ8 * 32, 0, st, ms, row_bytes, nb256, a.qs, a.d, a.s, n);
        break;
    default: /* Q6_K (checked by the caller) */
        ember_launch(k_mmvq<row6_K, NC>, grid, kWarpsQ8 * 32, 0, st, ms, row_bytes, nb256, a.qs, a.d, a.s, n);
        break;
    }
}

} /* namespace */

void mmvq_fast_launch(cudaStream_t st, uint32_t type, size_t row_bytes, const mm_seg &ms, unsigned grid,
                      const q8_view &a, int64_t n, int nc, int rows_per_warp, bool staged, int mr_rows, int tc_min)
{
    if (tc_min >= 1 && nc >= tc_min && nc >= 2 && nc <= kMaxColsQ8 &&
        (type == EMBER_TYPE_Q4_K || type == EMBER_TYPE_Q6_K)) {
        launch_tc_K(st, type, row_bytes, ms, a, n, nc);
        return;
    }
    if (nc >= 2 && launch_fast_mr(st, type, row_bytes, ms, a, n, nc, mr_rows)) return;
    if (nc == 1 && staged && launch_fast_smem(st, type, row_bytes, ms, a, n, rows_per_warp > 0 ? rows_per_warp : 1))
        return;
    if (nc == 1 && rows_per_warp != 1 && launch_fast_rows(st, type, row_bytes, ms, grid, a, n, rows_per_warp)) return;
    switch (nc) {
    case 1: launch_fast_nc<1>(st, type, row_bytes, ms, grid, a, n); break;
    case 2: launch_fast_nc<2>(st, type, row_bytes, ms, grid, a, n); break;
    case 3: launch_fast_nc<3>(st, type, row_bytes, ms, grid, a, n); break;
    case 4: launch_fast_nc<4>(st, type, row_bytes, ms, grid, a, n); break;
    case 5: launch_fast_nc<5>(st, type, row_bytes, ms, grid, a, n); break;
    case 6: launch_fast_nc<6>(st, type, row_bytes, ms, grid, a, n); break;
    case 7: launch_fast_nc<7>(st, type, row_bytes, ms, grid, a, n); break;
    default: launch_fast_nc<8>(st, type, row_bytes, ms, grid, a, n); break;
    }
}

} /* namespace ember_q8 */
