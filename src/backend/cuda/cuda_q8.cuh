/*
 * cuda_q8.cuh — what the two integer mat-vec files share: the weight units
 * of the 32-element formats, the segment table of a multi-weight launch,
 * the Q8 activation buffer's view, and the Q4_K scale decoder.
 * cuda_q8.cu holds the exact kernels (the CPU backend's float order) and
 * the entry points; cuda_mmvq.cu the fast kernels (free order, EMBER_CUDA_MMVQ=1).
 * Must not: be included from C code.
 */
#ifndef EMBER_CUDA_Q8_CUH
#define EMBER_CUDA_Q8_CUH

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_quant.cuh"
extern "C" {
#include "base/types.h"
}

namespace ember_q8 {

using namespace ember_cu;

constexpr int kWarpsQ8 = 4; /* rows per CTA */
constexpr int kMaxColsQ8 = 8;

static inline size_t align16(size_t v) { return (v + 15) & ~(size_t)15; }

/* ---- weight units for the 32-element formats ------------------------------
 * unit(blk, l): the 4 weight values of elements 4l..4l+3 (l = 0..7) as 4
 * bytes: unsigned levels (subtract OFF after the dot) or, for Q8_0, the
 * signed bytes. dm(blk): d and (formats with a min) m. */

__host__ __device__ __forceinline__ uint32_t nib4(uint32_t q, int l) { return (q >> (4 * (l >> 2))) & 0x0F0F0F0Fu; }
/* bits 4l..4l+3 of qh -> bit 4 of bytes 0..3 */
__host__ __device__ __forceinline__ uint32_t hbit4(uint32_t qh, int l)
{
    const uint32_t h = (qh >> (4 * l)) & 0xFu;
    return ((h & 1u) << 4) | ((h & 2u) << 11) | ((h & 4u) << 18) | ((h & 8u) << 25);
}

struct uq4_0 {
    static constexpr int BYTES = 18, OFF = 8;
    static constexpr bool MIN = false;
    __host__ __device__ static uint32_t unit(const uint8_t *b, int l) { return nib4(ld_u32_a2(b + 2 + 4 * (l & 3)), l); }
};
struct uq4_1 {
    static constexpr int BYTES = 20, OFF = 0;
    static constexpr bool MIN = true;
    __host__ __device__ static uint32_t unit(const uint8_t *b, int l) { return nib4(ld_u32(b + 4 + 4 * (l & 3)), l); }
};
struct uq5_0 {
    static constexpr int BYTES = 22, OFF = 16;
    static constexpr bool MIN = false;
    __host__ __device__ static uint32_t unit(const uint8_t *b, int l)
    {
        return nib4(ld_u32_a2(b + 6 + 4 * (l & 3)), l) | hbit4(ld_u32_a2(b + 2), l);
    }
};
struct uq5_1 {
    static constexpr int BYTES = 24, OFF = 0;
    static constexpr bool MIN = true;
    __host__ __device__ static uint32_t unit(const uint8_t *b, int l)
    {
        return nib4(ld_u32(b + 8 + 4 * (l & 3)), l) | hbit4(ld_u32(b + 4), l);
    }
};
struct uq8_0 {
    static constexpr int BYTES = 34, OFF = 0;
    static constexpr bool MIN = false;
    __host__ __device__ static uint32_t unit(const uint8_t *b, int l) { return ld_u32_a2(b + 2 + 4 * l); }
};

/* Up to 3 weights of one type and row length in one launch (Q/K/V, or
 * gate/up): CTAs [cta_end[i-1], cta_end[i]) compute weight i's rows into
 * y[i] ([n_cols, n_rows[i]]); each row is the same warp program as alone. */
struct mm_seg {
    const uint8_t *W0, *W1, *W2;
    float *y0, *y1, *y2;
    int64_t n0, n1, n2;
    unsigned end0, end1;
};

/* This CTA's weight, output and rows (and false when its warp has no row). */
__device__ __forceinline__ bool mm_seg_row(const mm_seg &ms, size_t row_bytes, const uint8_t *&wr, float *&y,
                                           int64_t &n_rows, int64_t &row)
{
    const unsigned bx = blockIdx.x;
    const int seg = bx < ms.end0 ? 0 : (bx < ms.end1 ? 1 : 2);
    const unsigned b0 = seg == 0 ? 0u : (seg == 1 ? ms.end0 : ms.end1);
    n_rows = seg == 0 ? ms.n0 : (seg == 1 ? ms.n1 : ms.n2);
    row = (int64_t)(bx - b0) * kWarpsQ8 + (threadIdx.x >> 5);
    if (row >= n_rows) return false;
    wr = (seg == 0 ? ms.W0 : (seg == 1 ? ms.W1 : ms.W2)) + row * row_bytes;
    y = seg == 0 ? ms.y0 : (seg == 1 ? ms.y1 : ms.y2);
    return true;
}

/* 6-bit scale and min of sub-block j of a Q4_K block (ggml get_scale_min_k4) */
__device__ __forceinline__ void k4_sm_int(const uint8_t *s, int j, int *sc, int *mn)
{
    if (j < 4) {
        *sc = s[j] & 63;
        *mn = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
        *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

struct q8_view {
    const int8_t *qs;
    const float *d, *s;
};

static inline q8_view q8_split(uint32_t act_type, const void *buf, int64_t n, int64_t n_cols)
{
    const int64_t bs = (int64_t)ember_type_block_size(act_type);   /* Q8_0/Q8_1: 32, Q8_K: 256 */
    q8_view v;
    v.qs = (const int8_t *)buf;
    v.d = (const float *)((const char *)buf + align16((size_t)(n * n_cols)));
    v.s = act_type == EMBER_TYPE_Q8_1 ? v.d + n_cols * (n / bs) : NULL;
    return v;
}

/* The fast kernels (cuda_mmvq.cu): the same launch as the exact ones (grid
 * of kWarpsQ8 rows per CTA over the segments, nc <= kMaxColsQ8 columns),
 * outputs equal up to float summation order. rows_per_warp (one column
 * only; EMBER_CUDA_MMVQ_ROWS): 1, 2 or 4 rows a warp (the launch then
 * makes its own grid), 0 = by shape (4 for a lone weight of >= 32,768
 * rows, else 1); staged (one column only; EMBER_CUDA_MMVQ_SMEM): each warp
 * copies its rows into shared memory with cp.async before the PDL wait
 * (rows_per_warp of them, 1 for 0, fewer where 48 KiB a CTA would not
 * hold them); mr_rows (2 to 8 columns of Q4_K or Q6_K; EMBER_CUDA_MMVQ_MR):
 * 2 or 4 rows a warp that share each activation load (the launch then makes
 * its own grid), < 2 = one row a warp. The same outputs whatever they are.
 * tc_min (EMBER_CUDA_MMVQ_TC): 0 = off; >= 2: Q4_K and Q6_K launches of
 * tc_min..8 columns run on the int8 tensor cores instead (k_mmvq_tc4_K /
 * k_mmvq_tc6_K, 16 rows a CTA, their own grid; outputs within 1e-5 of the
 * others', not their bits). */
void mmvq_fast_launch(cudaStream_t st, uint32_t type, size_t row_bytes, const mm_seg &ms, unsigned grid,
                      const q8_view &a, int64_t n, int nc, int rows_per_warp, bool staged, int mr_rows, int tc_min);

} /* namespace ember_q8 */

#endif
