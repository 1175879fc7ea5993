/*
 * cuda_mmvq_lane.cuh — one lane's share of a row in the fast mat-vec
 * kernels (cuda_mmvq.cu), as __host__ __device__ functions: a kernel runs
 * them on the 32 lanes of a warp and sums the lanes' partial results; the
 * host test tests/unit/cuda/test_mmvq_host.cu runs the same code on the CPU
 * for all 32 lanes against gguf-py's dequantized blocks, so the kernels'
 * arithmetic is checked without a GPU.
 *
 * Every dp4a row program: wr the row's blocks, nb its blocks, aq/ad(/as)
 * the Q8 activation buffer's views (cuda_q8.cu's layout) for column 0 of
 * the launch, n the row length, lane 0..31; adds the lane's partial dot of
 * column c to acc[c] for c < NC. The tensor-core Q4_K and Q6_K steps
 * (tc_*, tc4_K_*, tc6_K_*) are smaller pieces that the kernels compose
 * around their mma instructions (their sections say how; Q6_K's also map
 * the copies that stage its blocks in shared memory). Those kernels are
 * unmeasured and off by default (EMBER_CUDA_MMVQ_TC) until a GPU run.
 * Must not: use warp intrinsics or anything but plain loads (a load may
 * read a staged copy in shared memory: the same code).
 */
#ifndef EMBER_CUDA_MMVQ_LANE_CUH
#define EMBER_CUDA_MMVQ_LANE_CUH

#include "backend/cuda/cuda_q8.cuh"

/* unroll hints for the device pass only (the host pass of these
 * __host__ __device__ functions does not know the pragma) */
#ifdef __CUDA_ARCH__
#define EMBER_UNROLL _Pragma("unroll")
#define EMBER_UNROLL_N(s) _Pragma(s)
#else
#define EMBER_UNROLL
#define EMBER_UNROLL_N(s)
#endif

namespace ember_q8 {

/* 4 signed bytes of a times those of b, plus c (the dp4a instruction) */
__host__ __device__ __forceinline__ int dp4a_s(int a, int b, int c)
{
#ifdef __CUDA_ARCH__
    return __dp4a(a, b, c);
#else
    for (int i = 0; i < 4; i++) c += (int)(int8_t)(uint8_t)((uint32_t)a >> (8 * i)) * (int)(int8_t)(uint8_t)((uint32_t)b >> (8 * i));
    return c;
#endif
}

__host__ __device__ __forceinline__ float f16_bits(uint32_t h)
{
    return __half2float(__ushort_as_half((unsigned short)(h & 0xFFFFu)));
}

/* 32-element formats: lane = 4k + j, k (0..7) one of 8 consecutive blocks,
 * j (0..3) the units j and j + 4 (elements 4j..4j+3 and 16+4j..16+4j+3:
 * for the nibble formats the two units share one 4-byte load). */
template <class T, int NC>
__host__ __device__ __forceinline__ void mmvq32_lane(const uint8_t *wr, int nb, const int8_t *aq, const float *ad,
                                                     const float *as, int64_t n, int lane, float *acc)
{
    const int j = lane & 3, k = lane >> 2;
EMBER_UNROLL_N("unroll 4")
    for (int b = k; b < nb; b += 8) {
        const uint8_t *blk = wr + (size_t)b * T::BYTES;
        const int u0 = (int)T::unit(blk, j), u1 = (int)T::unit(blk, j + 4);
        const float wd = ld_f16(blk);
        const float wm = T::MIN ? ld_f16(blk + 2) : 0.0f;
EMBER_UNROLL
        for (int c = 0; c < NC; c++) {
            const int8_t *a = aq + c * n + (int64_t)b * 32;
            const int a0 = *reinterpret_cast<const int *>(a + 4 * j), a1 = *reinterpret_cast<const int *>(a + 16 + 4 * j);
            int s = dp4a_s(u1, a1, dp4a_s(u0, a0, 0));
            if (T::OFF) s -= T::OFF * dp4a_s(0x01010101, a1, dp4a_s(0x01010101, a0, 0));
            const int64_t bi = c * (n / 32) + b;
            acc[c] = fmaf((float)s, wd * ad[bi], acc[c]);
            if (T::MIN && j == 0) acc[c] = fmaf(wm, as[bi], acc[c]);
        }
    }
}

/* byte i (0..11) of the Q4_K scale words s0..s2 (runtime i: no local array) */
__host__ __device__ __forceinline__ int sbyte(uint32_t s0, uint32_t s1, uint32_t s2, int i)
{
    const uint32_t w = i < 4 ? s0 : (i < 8 ? s1 : s2);
    return (int)((w >> (8 * (i & 3))) & 0xFFu);
}

/* Super-blocks of a Q4_K row whose loads one lane keeps in flight at
 * once: every load of a pass is issued before the first one is used (a
 * row of E4B's 2560 columns is 10 super-blocks: one pass). Fewer with more
 * columns, whose activations take the registers. */
template <int NC> struct kpass {
    static constexpr int U = NC <= 2 ? 4 : (NC <= 4 ? 2 : 1);
};

/* Q4_K: lane = 8k + t: k (0..3) one of 4 consecutive super-blocks, t the
 * 16 quant bytes 16t..16t+15 (group g = t/2 of 64 elements: low nibbles
 * are sub-block 2g, high nibbles 2g+1). d, dmin and the 12 scale bytes come
 * in one 16-byte load (rows are 144-byte multiples of 16-aligned tensors);
 * scales and mins as ggml's get_scale_min_k4, selected without a branch
 * (the lanes of one warp hold both halves). A pass loads the headers and
 * quants of kpass<NC>::U super-blocks (4U apart) before any arithmetic. */
template <int NC>
__host__ __device__ __forceinline__ void mmvq4_K_lane(const uint8_t *wr, int nb, const int8_t *aq, const float *ad,
                                                      int64_t n, int lane, float *acc)
{
    constexpr int U = kpass<NC>::U;
    const int t = lane & 7, k = lane >> 3, g = t >> 1, hf = t & 1;
    const bool lo = g < 2;
    const int j0 = 2 * g, j1 = 2 * g + 1;
    for (int b0 = k; b0 < nb; b0 += 4 * U) {
        uint4 hd[U], qv[U];
EMBER_UNROLL
        for (int u = 0; u < U; u++) {
            const int b = b0 + 4 * u;
            if (b < nb) {
                const uint8_t *blk = wr + (size_t)b * 144;
                hd[u] = *reinterpret_cast<const uint4 *>(blk);
                qv[u] = *reinterpret_cast<const uint4 *>(blk + 16 + 32 * g + 16 * hf);
            } else {
                hd[u] = make_uint4(0u, 0u, 0u, 0u);
                qv[u] = hd[u];
            }
        }
EMBER_UNROLL
        for (int u = 0; u < U; u++) {
            const int b = b0 + 4 * u;
            if (b >= nb) continue;
            const uint4 h = hd[u];
            const float dw = f16_bits(h.x), dmw = f16_bits(h.x >> 16);
            /* bytes j, j + 4 and (for g >= 2) j - 4 of the 12 scale bytes */
            const int a0 = sbyte(h.y, h.z, h.w, j0), b40 = sbyte(h.y, h.z, h.w, j0 + 4);
            const int a1 = sbyte(h.y, h.z, h.w, j1), b41 = sbyte(h.y, h.z, h.w, j1 + 4);
            const int c0 = sbyte(h.y, h.z, h.w, lo ? j0 : j0 - 4), c1 = sbyte(h.y, h.z, h.w, lo ? j1 : j1 - 4);
            const int sc0 = lo ? (a0 & 63) : ((b40 & 0xF) | ((c0 >> 6) << 4));
            const int m0 = lo ? (b40 & 63) : ((b40 >> 4) | ((a0 >> 6) << 4));
            const int sc1 = lo ? (a1 & 63) : ((b41 & 0xF) | ((c1 >> 6) << 4));
            const int m1 = lo ? (b41 & 63) : ((b41 >> 4) | ((a1 >> 6) << 4));
            const uint32_t q[4] = {qv[u].x, qv[u].y, qv[u].z, qv[u].w};
EMBER_UNROLL
            for (int c = 0; c < NC; c++) {
                const int8_t *a = aq + c * n + (int64_t)b * 256 + 64 * g + 16 * hf;
                const int4 alo = *reinterpret_cast<const int4 *>(a), ahi = *reinterpret_cast<const int4 *>(a + 32);
                const int al[4] = {alo.x, alo.y, alo.z, alo.w}, ah[4] = {ahi.x, ahi.y, ahi.z, ahi.w};
                int dlo = 0, dhi = 0, slo = 0, shi = 0;
EMBER_UNROLL
                for (int i = 0; i < 4; i++) {
                    dlo = dp4a_s((int)(q[i] & 0x0F0F0F0Fu), al[i], dlo);
                    dhi = dp4a_s((int)((q[i] >> 4) & 0x0F0F0F0Fu), ah[i], dhi);
                    slo = dp4a_s(0x01010101, al[i], slo);
                    shi = dp4a_s(0x01010101, ah[i], shi);
                }
                const float da = ad[c * (n / 256) + b];
                acc[c] = fmaf((float)(sc0 * dlo + sc1 * dhi), dw * da, acc[c]);
                acc[c] = fmaf(-(float)(m0 * slo + m1 * shi), dmw * da, acc[c]);
            }
        }
    }
}

/* mmvq4_K_lane over RPW rows at once (rows r < nr of wr, row_bytes apart;
 * acc[r * NC + c]): each activation load and its sums serve every row, so a
 * launch of NC columns reads its activations once per RPW rows instead of
 * once per row. Per row and column the same integer dots and the same float
 * steps in the same block order as mmvq4_K_lane<NC> (one super-block a pass
 * per lane: the same order as any U), so the same outputs. */
template <int NC, int RPW>
__host__ __device__ __forceinline__ void mmvq4_K_lane_rows(const uint8_t *wr, size_t row_bytes, int nr, int nb,
                                                           const int8_t *aq, const float *ad, int64_t n, int lane,
                                                           float *acc)
{
    const int t = lane & 7, k = lane >> 3, g = t >> 1, hf = t & 1;
    const bool lo = g < 2;
    const int j0 = 2 * g, j1 = 2 * g + 1;
    for (int b = k; b < nb; b += 4) {
        uint4 hd[RPW], qv[RPW];
EMBER_UNROLL
        for (int r = 0; r < RPW; r++) {
            if (r < nr) {
                const uint8_t *blk = wr + (size_t)r * row_bytes + (size_t)b * 144;
                hd[r] = *reinterpret_cast<const uint4 *>(blk);
                qv[r] = *reinterpret_cast<const uint4 *>(blk + 16 + 32 * g + 16 * hf);
            } else {
                hd[r] = make_uint4(0u, 0u, 0u, 0u);
                qv[r] = hd[r];
            }
        }
        int sc0[RPW], m0[RPW], sc1[RPW], m1[RPW];
        float dw[RPW], dmw[RPW];
EMBER_UNROLL
        for (int r = 0; r < RPW; r++) {
            const uint4 h = hd[r];
            dw[r] = f16_bits(h.x);
            dmw[r] = f16_bits(h.x >> 16);
            const int a0 = sbyte(h.y, h.z, h.w, j0), b40 = sbyte(h.y, h.z, h.w, j0 + 4);
            const int a1 = sbyte(h.y, h.z, h.w, j1), b41 = sbyte(h.y, h.z, h.w, j1 + 4);
            const int c0 = sbyte(h.y, h.z, h.w, lo ? j0 : j0 - 4), c1 = sbyte(h.y, h.z, h.w, lo ? j1 : j1 - 4);
            sc0[r] = lo ? (a0 & 63) : ((b40 & 0xF) | ((c0 >> 6) << 4));
            m0[r] = lo ? (b40 & 63) : ((b40 >> 4) | ((a0 >> 6) << 4));
            sc1[r] = lo ? (a1 & 63) : ((b41 & 0xF) | ((c1 >> 6) << 4));
            m1[r] = lo ? (b41 & 63) : ((b41 >> 4) | ((a1 >> 6) << 4));
        }
EMBER_UNROLL
        for (int c = 0; c < NC; c++) {
            const int8_t *a = aq + c * n + (int64_t)b * 256 + 64 * g + 16 * hf;
            const int4 alo = *reinterpret_cast<const int4 *>(a), ahi = *reinterpret_cast<const int4 *>(a + 32);
            const int al[4] = {alo.x, alo.y, alo.z, alo.w}, ah[4] = {ahi.x, ahi.y, ahi.z, ahi.w};
            int slo = 0, shi = 0;
EMBER_UNROLL
            for (int i = 0; i < 4; i++) {
                slo = dp4a_s(0x01010101, al[i], slo);
                shi = dp4a_s(0x01010101, ah[i], shi);
            }
            const float da = ad[c * (n / 256) + b];
EMBER_UNROLL
            for (int r = 0; r < RPW; r++) {
                const uint32_t q[4] = {qv[r].x, qv[r].y, qv[r].z, qv[r].w};
                int dlo = 0, dhi = 0;
EMBER_UNROLL
                for (int i = 0; i < 4; i++) {
                    dlo = dp4a_s((int)(q[i] & 0x0F0F0F0Fu), al[i], dlo);
                    dhi = dp4a_s((int)((q[i] >> 4) & 0x0F0F0F0Fu), ah[i], dhi);
                }
                float &y = acc[r * NC + c];
                y = fmaf((float)(sc0[r] * dlo + sc1[r] * dhi), dw[r] * da, y);
                y = fmaf(-(float)(m0[r] * slo + m1[r] * shi), dmw[r] * da, y);
            }
        }
    }
}

/* ---- Q4_K on the int8 tensor cores (cuda_mmvq.cu k_mmvq_tc4_K) -----------
 * A warp multiplies a tile of 16 weight rows by 8 activation columns, one
 * mma.sync.m16n8k32 (s8 x s8 -> s32) per 32-element sub-block: A = the 16
 * rows' 4-bit quants of the sub-block (0..15, exact as s8), B = the 8
 * columns' Q8_K bytes, D_s = their 16 x 8 integer dots; a second mma with
 * A = all ones gives the columns' sums S_s of the sub-block in the same
 * layout (for the mins). Per super-block and output (row r, column c):
 *   y += d_r da_c sum_s sc_rs D_s - dmin_r da_c sum_s m_rs S_s
 * (ggml-common.h block_q4_K: d, dmin f16, scales[12] the 6-bit sc/m of the
 * 8 sub-blocks as get_scale_min_k4, qs[128]: byte 32gg + l holds element
 * 64gg + l in its low nibble (sub-block 2gg) and 64gg + 32 + l in its high
 * one (2gg + 1); Q8_K: 256 int8 and one float d per super-block).
 *
 * Fragments (PTX ISA, "Matrix Fragments for mma.m16n8k32", .s8 A and B,
 * .s32 C/D), lane = 4 gid + tig, 4 elements a register, k & 3 its byte:
 *   A 16 x 32: a[0] = A[gid][4tig..4tig+3], a[1] = A[gid+8][4tig..],
 *              a[2] = A[gid][16+4tig..],   a[3] = A[gid+8][16+4tig..]
 *   B 32 x 8:  b[0] = B[4tig..4tig+3][gid], b[1] = B[16+4tig..][gid]
 *   D 16 x 8:  d[0] = D[gid][2tig], d[1] = D[gid][2tig+1],
 *              d[2] = D[gid+8][2tig], d[3] = D[gid+8][2tig+1]
 * The dot does not care in which order k runs, as long as A and B take the
 * same one: here k = 4tig + i is sub-block position 8tig + i and
 * k = 16 + 4tig + i is position 8tig + 4 + i, so a lane's positions are the
 * 8 contiguous bytes 8tig..8tig+7 of each sub-block: one 8-byte load of
 * quants (both sub-blocks of a 64-element group, low and high nibbles) per
 * row and group, one of activations per sub-block and column.
 * Lanes past the tile's rows or the launch's columns read the last row /
 * column (valid memory) and their outputs are never stored. */

struct tc_frag_a {
    uint32_t r[4];
};
struct tc_frag_b {
    uint32_t r[2];
};
struct tc_frag_d {
    int r[4];
};

constexpr int kTcRows = 16; /* weight rows of an m16n8k32 tile (a CTA of k_mmvq_tc4_K) */
constexpr int kTcCols = 8;  /* activation columns of the tile (kMaxColsQ8) */

/* Row (0..15) and column (0..7) of D element i (0..3) held by lane */
__host__ __device__ __forceinline__ int tc_d_row(int lane, int i) { return (lane >> 2) + 8 * (i >> 1); }
__host__ __device__ __forceinline__ int tc_d_col(int lane, int i) { return 2 * (lane & 3) + (i & 1); }

constexpr int kTcWarps = 4; /* warps of a tensor-core CTA, sharing one tile's super-blocks */
constexpr int kTcPass = 2;  /* super-blocks a warp loads before their arithmetic */

/* What one lane reads of a tile (any K format: Q4_K and Q6_K alike): the
 * rows gid and gid + 8 of the tile at tile (nr rows, 1..16, row_bytes
 * apart; rows >= nr read row nr - 1; r0 / r1 their indices in the tile),
 * the activations of column gid (B) and the Q8_K scales of columns 2tig and
 * 2tig + 1 (D) of the launch's nc (1..8) columns (columns >= nc read column
 * nc - 1). aq / ad: the Q8_K view of column 0 (cuda_q8.cu's layout: aq
 * [nc][n] int8, ad [nc][n / 256] float), n the row length. */
struct tc_lane {
    const uint8_t *row0, *row1;
    int r0, r1;
    const int8_t *xq;
    const float *da0, *da1;
};

__host__ __device__ __forceinline__ tc_lane tc_lane_of(const uint8_t *tile, size_t row_bytes, int nr,
                                                       const int8_t *aq, const float *ad, int64_t n, int nc, int lane)
{
    const int gid = lane >> 2, tig = lane & 3;
    const int r0 = gid < nr ? gid : nr - 1, r1 = gid + 8 < nr ? gid + 8 : nr - 1;
    const int cb = gid < nc ? gid : nc - 1, c0 = 2 * tig < nc ? 2 * tig : nc - 1,
              c1 = 2 * tig + 1 < nc ? 2 * tig + 1 : nc - 1;
    const int64_t nb = n / 256;
    tc_lane p;
    p.row0 = tile + (size_t)r0 * row_bytes;
    p.row1 = tile + (size_t)r1 * row_bytes;
    p.r0 = r0;
    p.r1 = r1;
    p.xq = aq + (int64_t)cb * n;
    p.da0 = ad + c0 * nb;
    p.da1 = ad + c1 * nb;
    return p;
}

/* One lane's weights of super-block b for rows gid (index 0) and gid + 8
 * (1): the 16-byte header (d, dmin, 12 scale bytes) and, per 64-element
 * group gg, the 8 quant bytes 32gg + 8tig.. (positions 8tig..8tig+7 of
 * sub-blocks 2gg (low nibbles) and 2gg + 1 (high)). Rows are 144-byte
 * blocks of a 16-byte aligned tensor: both loads aligned. */
struct tc4_K_w {
    uint4 h[2];
    uint2 q[2][4];
};

__host__ __device__ __forceinline__ void tc4_K_load_w(const tc_lane &p, int b, int tig, tc4_K_w &w)
{
    const uint8_t *blk[2] = {p.row0 + (size_t)b * 144, p.row1 + (size_t)b * 144};
EMBER_UNROLL
    for (int r = 0; r < 2; r++) {
        w.h[r] = *reinterpret_cast<const uint4 *>(blk[r]);
EMBER_UNROLL
        for (int gg = 0; gg < 4; gg++) w.q[r][gg] = *reinterpret_cast<const uint2 *>(blk[r] + 16 + 32 * gg + 8 * tig);
    }
}

/* One lane's activations of super-block b, column gid: bytes 32s + 8tig..
 * of sub-block s (0..7); 8-byte aligned (n a multiple of 256, 16-byte
 * aligned buffer). */
struct tc_x8 {
    uint2 q[8];
};

__host__ __device__ __forceinline__ void tc_load_x(const tc_lane &p, int b, int tig, tc_x8 &x)
{
    const int8_t *a = p.xq + (int64_t)b * 256 + 8 * tig;
EMBER_UNROLL
    for (int s = 0; s < 8; s++) x.q[s] = *reinterpret_cast<const uint2 *>(a + 32 * s);
}

/* A fragment of sub-block s (0..7): the quant nibbles of rows gid, gid + 8 */
__host__ __device__ __forceinline__ tc_frag_a tc4_K_frag_a(const tc4_K_w &w, int s)
{
    const int gg = s >> 1, sh = 4 * (s & 1);
    tc_frag_a a;
    a.r[0] = (w.q[0][gg].x >> sh) & 0x0F0F0F0Fu;
    a.r[1] = (w.q[1][gg].x >> sh) & 0x0F0F0F0Fu;
    a.r[2] = (w.q[0][gg].y >> sh) & 0x0F0F0F0Fu;
    a.r[3] = (w.q[1][gg].y >> sh) & 0x0F0F0F0Fu;
    return a;
}

/* B fragment of sub-block s (0..7): column gid's activation bytes */
__host__ __device__ __forceinline__ tc_frag_b tc_frag_b_of(const tc_x8 &x, int s)
{
    tc_frag_b b;
    b.r[0] = x.q[s].x;
    b.r[1] = x.q[s].y;
    return b;
}

/* The A fragment of all ones: D = the columns' sums of B, in every row */
__host__ __device__ __forceinline__ tc_frag_a tc_frag_ones()
{
    tc_frag_a a;
    a.r[0] = a.r[1] = a.r[2] = a.r[3] = 0x01010101u;
    return a;
}

/* 6-bit scale and min of sub-block s (0..7) from a Q4_K header h (words
 * y, z, w: the 12 scale bytes; ggml's get_scale_min_k4) */
__host__ __device__ __forceinline__ void tc4_K_scale_min(const uint4 &h, int s, int &sc, int &mn)
{
    if (s < 4) {
        sc = sbyte(h.y, h.z, h.w, s) & 63;
        mn = sbyte(h.y, h.z, h.w, s + 4) & 63;
    } else {
        sc = (sbyte(h.y, h.z, h.w, s + 4) & 0xF) | ((sbyte(h.y, h.z, h.w, s - 4) >> 6) << 4);
        mn = (sbyte(h.y, h.z, h.w, s + 4) >> 4) | ((sbyte(h.y, h.z, h.w, s) >> 6) << 4);
    }
}

/* Sub-block s of a super-block: isum[i] += sc * dot.r[i], msum[i] += m *
 * sum.r[i] with the scale and min of D element i's row (gid for i < 2, gid
 * + 8 else). int32 bounds over the 8 sub-blocks: |dot| <= 32 * 15 * 128 =
 * 61,440 (Q8_K bytes are -128..127), sc <= 63, so |isum| <= 8 * 63 * 61,440
 * = 30,965,760; |sum| <= 32 * 128 = 4,096, |msum| <= 8 * 63 * 4,096 =
 * 2,064,384: far below 2^31. */
__host__ __device__ __forceinline__ void tc4_K_sub_step(const tc4_K_w &w, int s, const tc_frag_d &dot,
                                                        const tc_frag_d &sum, int *isum, int *msum)
{
    int sc0, mn0, sc1, mn1;
    tc4_K_scale_min(w.h[0], s, sc0, mn0);
    tc4_K_scale_min(w.h[1], s, sc1, mn1);
    isum[0] += sc0 * dot.r[0];
    isum[1] += sc0 * dot.r[1];
    isum[2] += sc1 * dot.r[2];
    isum[3] += sc1 * dot.r[3];
    msum[0] += mn0 * sum.r[0];
    msum[1] += mn0 * sum.r[1];
    msum[2] += mn1 * sum.r[2];
    msum[3] += mn1 * sum.r[3];
}

/* The super-block's float step: acc[i] += d_row da_col isum[i] - dmin_row
 * da_col msum[i] for D element i (da0 / da1: the Q8_K scales of columns
 * 2tig, 2tig + 1 for this super-block) */
__host__ __device__ __forceinline__ void tc4_K_block_step(const tc4_K_w &w, float da0, float da1, const int *isum,
                                                          const int *msum, float *acc)
{
EMBER_UNROLL
    for (int i = 0; i < 4; i++) {
        const uint32_t hx = w.h[i >> 1].x;
        const float da = (i & 1) ? da1 : da0;
        acc[i] = fmaf((float)isum[i], f16_bits(hx) * da, acc[i]);
        acc[i] = fmaf(-(float)msum[i], f16_bits(hx >> 16) * da, acc[i]);
    }
}

/* The output thread t (0..127) of a tile's CTA stores after the warps'
 * partial sums are summed: row t & 15, column t >> 4 (16 consecutive rows
 * of one column: one 64-byte piece of y); false: nothing (a row >= nr of
 * the tile or a column >= nc). */
__host__ __device__ __forceinline__ bool tc_out_of(int t, int nr, int nc, int &row, int &col)
{
    row = t & 15;
    col = t >> 4;
    return row < nr && col < nc;
}

/* (lo:hi) >> sh, sh 0 or 16 (the funnel shift) */
__host__ __device__ __forceinline__ uint32_t funnel_r(uint32_t lo, uint32_t hi, int sh)
{
#ifdef __CUDA_ARCH__
    return __funnelshift_r(lo, hi, sh);
#else
    return sh ? (lo >> sh) | (hi << (32 - sh)) : lo;
#endif
}

/* The 16 bytes at p, which is only 2-byte aligned (Q6_K's 210-byte blocks):
 * the two aligned 16-byte lines from p & ~15 are loaded and the wanted
 * words funnel-shifted out of them, so one lane issues two wide loads
 * instead of eight 16-bit ones. Reads [p & ~15, (p & ~15) + 32): the caller
 * keeps that inside the tensor (16-byte aligned base). */
__host__ __device__ __forceinline__ void ld16_a2(const uint8_t *p, uint32_t *out)
{
    const uintptr_t a = (uintptr_t)p;
    const uint4 *line = reinterpret_cast<const uint4 *>(a & ~(uintptr_t)15);
    const uint4 x = line[0], y = line[1];
    const uint32_t w[8] = {x.x, x.y, x.z, x.w, y.x, y.y, y.z, y.w};
    const bool q2 = (a & 8) != 0, q1 = (a & 4) != 0;
    const int sh = (a & 2) ? 16 : 0;
    uint32_t t[6], v[5];
EMBER_UNROLL
    for (int j = 0; j < 6; j++) t[j] = q2 ? w[j + 2] : w[j];
EMBER_UNROLL
    for (int j = 0; j < 5; j++) v[j] = q1 ? t[j + 1] : t[j];
EMBER_UNROLL
    for (int j = 0; j < 4; j++) out[j] = funnel_r(v[j], v[j + 1], sh);
}

/* Q6_K: lane = 8k + l: k (0..3) one of 4 consecutive super-blocks; l =
 * 4hh + 2lo + hf takes the 16 ql bytes 64hh + 32lo + 16hf.. and the 16 qh
 * bytes 32hh + 16hf.. (each two wide loads, ld16_a2): ql byte i's low nibble
 * with qh bits 2lo.. is element e0 + i, e0 = 128hh + 32lo + 16hf, scale
 * sc[e0 / 16]; its high nibble with qh bits 2lo + 4.. is element e0 + 64,
 * scale sc[e0 / 16 + 4] (ggml's dequantize_row_q6_K); the -32 offset as 32
 * times the activation sums. (The lanes used to take 4 bytes of each of the
 * block's 8 chunks, 12 16-bit and 8 byte loads a block: ~0.9 TB/s on E4B's
 * down projection, H200 2026-12-03.) */
template <int NC>
__host__ __device__ __forceinline__ void mmvq6_K_lane(const uint8_t *wr, int nb, const int8_t *aq, const float *ad,
                                                      int64_t n, int lane, float *acc)
{
    const int l = lane & 7, k = lane >> 3;
    const int hh = l >> 2, lo = (l >> 1) & 1, hf = l & 1;
    const int e0 = 128 * hh + 32 * lo + 16 * hf, s0 = e0 / 16;
    const int qoff = 64 * hh + 32 * lo + 16 * hf, hoff = 128 + 32 * hh + 16 * hf;
    const int shl = 2 * lo, shh = 2 * lo + 4;
EMBER_UNROLL_N("unroll 2")
    for (int b = k; b < nb; b += 4) {
        const uint8_t *blk = wr + (size_t)b * 210;
        uint32_t ql[4], qh[4];
        ld16_a2(blk + qoff, ql);
        ld16_a2(blk + hoff, qh);
        const int scl = (int8_t)blk[192 + s0], sch = (int8_t)blk[192 + s0 + 4];
        const float dw = ld_f16(blk + 208);
        int ul[4], uh[4];
EMBER_UNROLL
        for (int i = 0; i < 4; i++) {
            ul[i] = (int)((ql[i] & 0x0F0F0F0Fu) | (((qh[i] >> shl) & 0x03030303u) << 4));
            uh[i] = (int)(((ql[i] >> 4) & 0x0F0F0F0Fu) | (((qh[i] >> shh) & 0x03030303u) << 4));
        }
EMBER_UNROLL
        for (int c = 0; c < NC; c++) {
            const int8_t *a = aq + c * n + (int64_t)b * 256 + e0;
            const int4 a0 = *reinterpret_cast<const int4 *>(a), a1 = *reinterpret_cast<const int4 *>(a + 64);
            const int al[4] = {a0.x, a0.y, a0.z, a0.w}, ah[4] = {a1.x, a1.y, a1.z, a1.w};
            int dl = 0, sl = 0, dh = 0, sh = 0;
EMBER_UNROLL
            for (int i = 0; i < 4; i++) {
                dl = dp4a_s(ul[i], al[i], dl);
                sl = dp4a_s(0x01010101, al[i], sl);
                dh = dp4a_s(uh[i], ah[i], dh);
                sh = dp4a_s(0x01010101, ah[i], sh);
            }
            acc[c] = fmaf((float)(scl * (dl - 32 * sl) + sch * (dh - 32 * sh)), dw * ad[c * (n / 256) + b], acc[c]);
        }
    }
}

/* mmvq6_K_lane over RPW rows at once (as mmvq4_K_lane_rows: rows r < nr
 * of wr, row_bytes apart, acc[r * NC + c]; each activation load and its
 * sums serve every row; per row and column the same steps in the same order
 * as mmvq6_K_lane<NC>, so the same outputs). */
template <int NC, int RPW>
__host__ __device__ __forceinline__ void mmvq6_K_lane_rows(const uint8_t *wr, size_t row_bytes, int nr, int nb,
                                                           const int8_t *aq, const float *ad, int64_t n, int lane,
                                                           float *acc)
{
    const int l = lane & 7, k = lane >> 3;
    const int hh = l >> 2, lo = (l >> 1) & 1, hf = l & 1;
    const int e0 = 128 * hh + 32 * lo + 16 * hf, s0 = e0 / 16;
    const int qoff = 64 * hh + 32 * lo + 16 * hf, hoff = 128 + 32 * hh + 16 * hf;
    const int shl = 2 * lo, shh = 2 * lo + 4;
    for (int b = k; b < nb; b += 4) {
        int ul[RPW][4], uh[RPW][4], scl[RPW], sch[RPW];
        float dw[RPW];
EMBER_UNROLL
        for (int r = 0; r < RPW; r++) {
            uint32_t ql[4] = {0u, 0u, 0u, 0u}, qh[4] = {0u, 0u, 0u, 0u};
            scl[r] = sch[r] = 0;
            dw[r] = 0.0f;
            if (r < nr) {
                const uint8_t *blk = wr + (size_t)r * row_bytes + (size_t)b * 210;
                ld16_a2(blk + qoff, ql);
                ld16_a2(blk + hoff, qh);
                scl[r] = (int8_t)blk[192 + s0];
                sch[r] = (int8_t)blk[192 + s0 + 4];
                dw[r] = ld_f16(blk + 208);
            }
EMBER_UNROLL
            for (int i = 0; i < 4; i++) {
                ul[r][i] = (int)((ql[i] & 0x0F0F0F0Fu) | (((qh[i] >> shl) & 0x03030303u) << 4));
                uh[r][i] = (int)(((ql[i] >> 4) & 0x0F0F0F0Fu) | (((qh[i] >> shh) & 0x03030303u) << 4));
            }
        }
EMBER_UNROLL
        for (int c = 0; c < NC; c++) {
            const int8_t *a = aq + c * n + (int64_t)b * 256 + e0;
            const int4 a0 = *reinterpret_cast<const int4 *>(a), a1 = *reinterpret_cast<const int4 *>(a + 64);
            const int al[4] = {a0.x, a0.y, a0.z, a0.w}, ah[4] = {a1.x, a1.y, a1.z, a1.w};
            int sl = 0, sh = 0;
EMBER_UNROLL
            for (int i = 0; i < 4; i++) {
                sl = dp4a_s(0x01010101, al[i], sl);
                sh = dp4a_s(0x01010101, ah[i], sh);
            }
            const float da = ad[c * (n / 256) + b];
EMBER_UNROLL
            for (int r = 0; r < RPW; r++) {
                int dl = 0, dh = 0;
EMBER_UNROLL
                for (int i = 0; i < 4; i++) {
                    dl = dp4a_s(ul[r][i], al[i], dl);
                    dh = dp4a_s(uh[r][i], ah[i], dh);
                }
                float &y = acc[r * NC + c];
                y = fmaf((float)(scl[r] * (dl - 32 * sl) + sch[r] * (dh - 32 * sh)), dw[r] * da, y);
            }
        }
    }
}

/* ---- Q6_K on the int8 tensor cores (cuda_mmvq.cu k_mmvq_tc6_K) -----------
 * As the Q4_K steps above, with one mma.sync.m16n8k16 (s8 x s8 -> s32) per
 * 16-element sub-block, so every integer result has one scale: A = the 16
 * rows' quants q - 32 of the sub-block (-32..31, exact as s8: no offset
 * term, no second mma), B = the 8 columns' Q8_K bytes, D_s their 16 x 8
 * dots. Per super-block and output (row r, column c):
 *   y += d_r da_c sum_s sc_rs D_s   (s = 0..15)
 * Format (ggml-common.h block_q6_K, 210 bytes per 256 elements: ql[128],
 * qh[64], scales[16] int8, d f16; as ggml's dequantize_row_q6_K): element
 * e = 128h + 32j + l (h 0..1, j 0..3, l 0..31) has the low nibble (j < 2) or
 * high nibble (j >= 2) of ql byte 64h + 32(j & 1) + l, bits 2j, 2j + 1 of qh
 * byte 32h + l above it, q = that 6-bit value - 32, and the scale of its
 * sub-block s = e / 16 = 8h + 2j + u, u = l >= 16.
 *
 * Fragments (PTX ISA 9.7.14.5.9, "Matrix Fragments for mma.m16n8k16 with
 * integer type", figures 84-86; lane = 4 gid + tig, byte i of a register):
 *   A 16 x 16: a[0] = A[gid][4tig + i], a[1] = A[gid + 8][4tig + i]
 *   B 16 x 8:  b[0] = B[4tig + i][gid]
 *   D 16 x 8:  as m16n8k32 (tc_d_row / tc_d_col)
 * k = 4tig + i is position 4tig + i of the sub-block (l = 16u + 4tig + i),
 * so per row and super-block a lane takes 8 ql words (bytes 16m + 4tig..,
 * m = 4h + 2(j & 1) + u: each serves sub-blocks j & 1 and (j & 1) + 2) and
 * 4 qh words (128 + 16m' + 4tig.., m' = 2h + u: each serves the 4 j), and
 * per column one activation word per sub-block (16s + 4tig..).
 *
 * Loads. Q6_K blocks are 210 bytes, so a block starts 2-byte aligned and a
 * lane's words are 4-byte aligned or not by row and super-block. Read from
 * global memory, each such word is two aligned 4-byte loads and a funnel
 * shift (tc_w32_a2), 30 loads a row and super-block, each warp-wide load
 * touching 8 rows' lines: ~6x the load instructions of Q4_K's 16-byte and
 * 8-byte ones (the dp4a Q6_K kernel with 20 narrow loads a block ran ~0.9
 * TB/s, cuda_mmvq_lane.cuh mmvq6_K_lane). So the kernel stages each pass's
 * blocks in shared memory first: 16-byte cp.async copies of the 14 aligned
 * lines that hold a block (tc6_K_piece: a warp's 16 rows x 2 super-blocks in
 * 14 coalesced copies a lane, no registers held while in flight), each
 * block keeping its address's low 4 bits (tc6_K_staged), and the lanes read
 * the same words from there (a conflict-free shared load is one wavefront,
 * where a global one is split per line touched, 8 rows' here: the
 * expected gain, unmeasured). Bank conflicts: the 240-byte slots would put
 * the 8 rows of a load in 8 distinct groups of 4 banks, but a staged block
 * keeps its 0-14 byte offset in its line, shifting its row by 0-3 banks: a
 * model over random offsets gives 2-way conflicts on nearly every staged
 * load (never more), 2 wavefronts each.
 * The word reads are the same code on either memory: the host test runs
 * them on the staged copy too. Unmeasured and off by default
 * (EMBER_CUDA_MMVQ_TC) until a GPU run has checked and timed it. */

constexpr int kTc6Bytes = 210;  /* bytes of a block_q6_K */
constexpr int kTc6Lines = 14;   /* aligned 16-byte lines holding a block: (14 + 210) / 16 at most */
constexpr int kTc6Stride = 240; /* bytes between staged blocks: 14 lines + 1 (60 words: rows 4 banks apart) */
constexpr int kTc6Pieces = kTcPass * kTcRows * kTc6Lines; /* 16-byte copies of a warp's pass */

/* Copy i (0..kTc6Pieces - 1) of the pass that starts at super-block b0 of
 * the tile at tile (nr rows, row_bytes apart, nb super-blocks a row): the
 * pass's super-blocks b0 + kTcWarps u (u < kTcPass) are staged at slot u.
 * Returns false where there is nothing to copy (b >= nb or a row >= nr);
 * else src: the 16-aligned global line, n: its bytes to read (1..16: the
 * last line of a block is cut at the block's end, the rest of the 16 is
 * zero-filled, so nothing past the weight is read; the bytes before the
 * block in its first line belong to the previous block or row: inside a
 * 16-byte aligned tensor), dst: its byte offset in the warp's stage. */
__host__ __device__ __forceinline__ bool tc6_K_piece(int i, const uint8_t *tile, size_t row_bytes, int nr, int nb,
                                                     int b0, const uint8_t *&src, unsigned &n, int &dst)
{
    const int u = i / (kTcRows * kTc6Lines), rest = i % (kTcRows * kTc6Lines);
    const int r = rest / kTc6Lines, ln = rest % kTc6Lines;
    const int b = b0 + kTcWarps * u;
    if (b >= nb || r >= nr) return false;
    const uintptr_t blk = (uintptr_t)(tile + (size_t)r * row_bytes + (size_t)b * kTc6Bytes);
    const uintptr_t a = (blk & ~(uintptr_t)15) + 16 * (uintptr_t)ln, end = blk + kTc6Bytes;
    src = reinterpret_cast<const uint8_t *>(a);
    n = end - a < 16 ? (unsigned)(end - a) : 16u;
    dst = (u * kTcRows + r) * kTc6Stride + 16 * ln;
    return true;
}

/* The staged copy of block blk (tile row r, pass slot u) in a warp's stage */
__host__ __device__ __forceinline__ const uint8_t *tc6_K_staged(const uint8_t *stage, int u, int r, const uint8_t *blk)
{
    return stage + (u * kTcRows + r) * kTc6Stride + ((uintptr_t)blk & 15);
}

/* Aligned 4-byte word i at base (4-aligned), and the 4 bytes from base +
 * 4i + 2 when sh is 16 (the second load only then) */
__host__ __device__ __forceinline__ uint32_t tc_w32_a2(const uint32_t *base, int i, int sh)
{
    return sh ? funnel_r(base[i], base[i + 1], 16) : base[i];
}

/* One lane's weights of a super-block for rows gid (index 0) and gid + 8
 * (1): ql words (bytes 16m + 4tig.., m 0..7), qh words (128 + 16m + 4tig..,
 * m 0..3), the 16 int8 scales as 4 words, d's f16 bits. */
struct tc6_K_w {
    uint32_t ql[2][8], qh[2][4], sc[2][4], d[2];
};

/* Reads [blk & ~3, blk + 210) of each block (global or staged; 2-byte
 * aligned): every word at most one aligned word past its 4 bytes, the last
 * scale word's second word only where the block is not 4-aligned (it ends
 * at the block's end then; d is read on its own). */
__host__ __device__ __forceinline__ void tc6_K_load_w(const uint8_t *blk0, const uint8_t *blk1, int tig, tc6_K_w &w)
{
EMBER_UNROLL
    for (int r = 0; r < 2; r++) {
        const uint8_t *blk = r ? blk1 : blk0;
        /* pointer arithmetic, not an integer mask: a staged block's loads stay
         * shared-memory loads (ld.shared) instead of generic ones */
        const uint32_t *base = reinterpret_cast<const uint32_t *>(blk - ((uintptr_t)blk & 3));
        const int sh = ((uintptr_t)blk & 2) ? 16 : 0;
EMBER_UNROLL
        for (int m = 0; m < 8; m++) w.ql[r][m] = tc_w32_a2(base, 4 * m + tig, sh);
EMBER_UNROLL
        for (int m = 0; m < 4; m++) w.qh[r][m] = tc_w32_a2(base, 32 + 4 * m + tig, sh);
EMBER_UNROLL
        for (int i = 0; i < 4; i++) w.sc[r][i] = tc_w32_a2(base, 48 + i, sh);
        w.d[r] = ld_u16(blk + 208);
    }
}

/* One lane's activations of super-block b, column gid: bytes 16s + 4tig..
 * of sub-block s (0..15), 4-byte aligned */
struct tc_x16 {
    uint32_t q[16];
};

__host__ __device__ __forceinline__ void tc_load_x16(const tc_lane &p, int b, int tig, tc_x16 &x)
{
    const int8_t *a = p.xq + (int64_t)b * 256 + 4 * tig;
EMBER_UNROLL
    for (int s = 0; s < 16; s++) x.q[s] = *reinterpret_cast<const uint32_t *>(a + 16 * s);
}

struct tc_frag_a16 {
    uint32_t r[2];
};
struct tc_frag_b16 {
    uint32_t r[1];
};

/* A fragment of sub-block s (0..15): q - 32 of rows gid, gid + 8 at
 * positions 4tig.. ((x + 0x60) ^ 0x80 per byte is x - 32 for x in 0..63,
 * no carry between bytes) */
__host__ __device__ __forceinline__ tc_frag_a16 tc6_K_frag_a(const tc6_K_w &w, int s)
{
    const int h = s >> 3, j = (s >> 1) & 3, u = s & 1;
    const int m = 4 * h + 2 * (j & 1) + u, mh = 2 * h + u;
    tc_frag_a16 a;
EMBER_UNROLL
    for (int r = 0; r < 2; r++) {
        const uint32_t x = ((w.ql[r][m] >> (4 * (j >> 1))) & 0x0F0F0F0Fu) | (((w.qh[r][mh] >> (2 * j)) & 0x03030303u) << 4);
        a.r[r] = (x + 0x60606060u) ^ 0x80808080u;
    }
    return a;
}

/* B fragment of sub-block s (0..15): column gid's activation bytes */
__host__ __device__ __forceinline__ tc_frag_b16 tc_frag_b16_of(const tc_x16 &x, int s)
{
    tc_frag_b16 b;
    b.r[0] = x.q[s];
    return b;
}

/* Sub-block s: isum[i] += sc * dot.r[i], sc the int8 scale of D element
 * i's row (gid for i < 2, gid + 8 else). int32 bounds over the 16
 * sub-blocks: |dot| <= 16 * 32 * 128 = 65,536 (q in -32..31, Q8_K bytes
 * -128..127), |sc| <= 128, so |isum| <= 16 * 128 * 65,536 = 2^27. */
__host__ __device__ __forceinline__ void tc6_K_sub_step(const tc6_K_w &w, int s, const tc_frag_d &dot, int *isum)
{
    const int sc0 = (int)(int8_t)(uint8_t)(w.sc[0][s >> 2] >> (8 * (s & 3)));
    const int sc1 = (int)(int8_t)(uint8_t)(w.sc[1][s >> 2] >> (8 * (s & 3)));
    isum[0] += sc0 * dot.r[0];
    isum[1] += sc0 * dot.r[1];
    isum[2] += sc1 * dot.r[2];
    isum[3] += sc1 * dot.r[3];
}

/* The super-block's float step: acc[i] += d_row da_col isum[i] (da0 / da1:
 * the Q8_K scales of columns 2tig, 2tig + 1 for this super-block) */
__host__ __device__ __forceinline__ void tc6_K_block_step(const tc6_K_w &w, float da0, float da1, const int *isum,
                                                          float *acc)
{
EMBER_UNROLL
    for (int i = 0; i < 4; i++) acc[i] = fmaf((float)isum[i], f16_bits(w.d[i >> 1]) * ((i & 1) ? da1 : da0), acc[i]);
}

} /* namespace ember_q8 */

#endif
