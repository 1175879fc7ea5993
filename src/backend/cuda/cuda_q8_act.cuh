/*
 * cuda_q8_act.cuh — the activation quantizers of one Q8 block, one warp
 * each, shared by every kernel that writes a Q8 activation buffer
 * (cuda_q8.cu's quantize kernels, the fused norm / GLU kernels of
 * cuda_ops.cu, the attention's fused output of cuda_attn.cu).
 *
 * Owns: the bytes of ggml's x86 quantize_row_q8_0 / _q8_1 / _q8_K (and
 * src/quant's from_float, our CPU backend's), for one block:
 *   Q8_0 / Q8_1 (32 elements, lane i holds element i): d = amax / 127,
 *     id = 127 / amax (0 when d == 0), q = round-to-nearest-even(x * id),
 *     d stored through f16; Q8_1 also s = f16((float)sum(q) * d) with the
 *     f32 d.
 *   Q8_K (256 elements, lane l holds elements 8l..8l+7): amax == 0 gives
 *     q = 0, d = 0; else id = 127 / amax, q = rint(x * id), d = 1 / id (f32).
 * Every float operation is an explicit _rn intrinsic (no contraction), so
 * the bytes equal the CPU's.
 * Must not: be included from C code; the whole warp calls each function.
 */
#ifndef EMBER_CUDA_Q8_ACT_CUH
#define EMBER_CUDA_Q8_ACT_CUH

#include <cuda_fp16.h>
#include <stdint.h>

/* One Q8_0 (Q81 false) or Q8_1 block: v is this lane's element; qs the
 * block's 32 bytes; *d (and for Q8_1 *s) written by lane 0. */
template <bool Q81>
__device__ __forceinline__ void ember_q8_block32(float v, int8_t *qs, float *d, float *s)
{
    const int lane = threadIdx.x & 31;
    float amax = fabsf(v);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float df = __fdiv_rn(amax, 127.0f);
    const float id = df != 0.0f ? __fdiv_rn(127.0f, amax) : 0.0f;
    const int q = __float2int_rn(__fmul_rn(v, id));
    qs[lane] = (int8_t)q;
    int sum = q;
    if (Q81) {
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    }
    if (lane == 0) {
        *d = __half2float(__float2half_rn(df));
        if (Q81) *s = __half2float(__float2half_rn(__fmul_rn(__int2float_rn(sum), df)));
    }
}

/* One Q8_K block: v[8] are this lane's elements 8l..8l+7; qs the block's
 * 256 bytes (8-byte aligned); *qd written by lane 0. */
__device__ __forceinline__ void ember_q8_blockK(const float v[8], int8_t *qs, float *qd)
{
    const int lane = threadIdx.x & 31;
    float amax = 0.f;
#pragma unroll
    for (int i = 0; i < 8; i++) amax = fmaxf(amax, fabsf(v[i]));
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float id = amax != 0.0f ? __fdiv_rn(127.0f, amax) : 0.0f;
    uint32_t wq[2] = {0, 0};
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const int q = __float2int_rn(__fmul_rn(v[i], id));
        wq[i >> 2] |= ((uint32_t)q & 0xFFu) << (8 * (i & 3));
    }
    *reinterpret_cast<uint2 *>(qs + 8 * lane) = make_uint2(wq[0], wq[1]);
    if (lane == 0) *qd = amax != 0.0f ? __fdiv_rn(1.0f, id) : 0.0f;
}

#endif
