/*
 * cuda_rope_tab.cu — RoPE with the CPU backend's angles, from a host table.
 *
 * Owns: the rotary embedding kernel that reads cos/sin of every (position,
 * pair) from a table the caller made on the host with the CPU backend's
 * arithmetic and libm (src/backend/cpu/cpu.c rope_rows: theta = pos, times
 * powf(base, -2/n_rot) once per pair, / freq_factors, * freq_scale; cosf,
 * sinf). CUDA's sincosf and glibc's differ in the last bit for ~1% of the
 * angles, and one ulp in q or k moves f16 and Q8 roundings downstream, so
 * the GPU must not compute the angles itself to match the CPU token for
 * token. Rotation as the CPU: x0 c - x1 s and x0 s + x1 c with the first
 * product fused.
 * Angles below 2^-12 need no table: glibc's sinf/cosf/sincosf return x and
 * 1.0f for |x| < 0x1p-12f (sysdeps/ieee754/flt-32/s_sinf.c, s_cosf.c), and
 * so does the kernel, after computing the angle with the CPU's f32 steps.
 * The table then holds only the leading pairs whose angle reaches 2^-12 at
 * some position (the caller's n_tab_pairs): Gemma 4's full-attention layers
 * rotate 64 of their 256 pairs (the rest have frequency divisors of 1e30),
 * so their table is a quarter of the full one.
 * Must not: allocate or synchronise (graph capture), or know models.
 */
#include "backend/cuda/cuda_common.cuh"

namespace {

/* One CTA per (head, token); threads over the n_rot/2 pairs. tab: [n_pos]
 * [half] (cos, sin); a position outside [0, n_pos) computes its angle
 * (ggml_rope's f32 steps) and uses sincosf. */
__global__ void k_rope_tab(float *x, const int32_t *__restrict__ pos, int n_head, int head_dim, int n_rot, int neox,
                           const float2 *__restrict__ tab, int32_t n_pos, int n_tab, float theta_scale,
                           float freq_scale, const float *__restrict__ ff)
{
    ember_pdl_wait();
    const int64_t t = blockIdx.y;
    float *xh = x + (t * n_head + blockIdx.x) * (int64_t)head_dim;
    const int32_t p = pos[t];
    const int half = n_rot / 2;
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        float c, s;
        ember_rope_tab_cs(p, i, tab, n_pos, n_tab, theta_scale, freq_scale, ff, c, s);
        const int i0 = neox ? i : 2 * i;
        const int i1 = neox ? i + half : 2 * i + 1;
        const float x0 = xh[i0], x1 = xh[i1];
        xh[i0] = __fmaf_rn(x0, c, -__fmul_rn(x1, s));
        xh[i1] = __fmaf_rn(x0, s, __fmul_rn(x1, c));
    }
}

} /* namespace */

extern "C" ember_status ember_cuda_rope_tab(ember_cuda *cu, float *x, const int32_t *pos, int64_t n_tokens, int n_head,
                                            int head_dim, int n_rot, ember_cuda_rope_mode mode, const float *tab,
                                            int32_t n_pos, float freq_base, float freq_scale,
                                            const float *freq_factors)
{
    return ember_cuda_rope_tab_pairs(cu, x, pos, n_tokens, n_head, head_dim, n_rot, mode, tab, n_pos, n_rot / 2,
                                     freq_base, freq_scale, freq_factors);
}

extern "C" ember_status ember_cuda_rope_tab_pairs(ember_cuda *cu, float *x, const int32_t *pos, int64_t n_tokens,
                                                  int n_head, int head_dim, int n_rot, ember_cuda_rope_mode mode,
                                                  const float *tab, int32_t n_pos, int n_tab_pairs, float freq_base,
                                                  float freq_scale, const float *freq_factors)
{
    EMBER_CUDA_NONNULL(cu);
    EMBER_CUDA_NONNULL(x);
    EMBER_CUDA_NONNULL(pos);
    EMBER_CUDA_NONNULL(tab);
    if (n_tokens <= 0 || n_tokens > 65535 || n_head <= 0 || head_dim <= 0 || n_rot <= 0 || n_rot > head_dim ||
        n_rot % 2 != 0 || n_pos < 0 || n_tab_pairs < 0 || n_tab_pairs > n_rot / 2)
        return ember_error(EMBER_ERR_INVALID_ARG,
                           "cuda: rope_tab: bad shape (n_tokens %lld, n_head %d, head_dim %d, n_rot %d, n_pos %d, "
                           "n_tab_pairs %d)", (long long)n_tokens, n_head, head_dim, n_rot, (int)n_pos, n_tab_pairs);
    if (mode != EMBER_CUDA_ROPE_NORMAL && mode != EMBER_CUDA_ROPE_NEOX)
        return ember_error(EMBER_ERR_INVALID_ARG, "cuda: rope_tab: unknown mode %d", (int)mode);
    if (!(freq_base > 0.f) || !(freq_scale > 0.f))
        return ember_error(EMBER_ERR_INVALID_ARG, "cuda: rope_tab: freq_base %g, freq_scale %g must be > 0",
                           (double)freq_base, (double)freq_scale);
    const int half = n_rot / 2;
    const int threads = half >= 128 ? 128 : ((half + 31) / 32) * 32;
    const float theta_scale = powf(freq_base, -2.0f / (float)n_rot);
    ember_launch(k_rope_tab, dim3((unsigned)n_head, (unsigned)n_tokens), threads, 0, cu->stream, x, pos, n_head,
                 head_dim, n_rot, mode == EMBER_CUDA_ROPE_NEOX ? 1 : 0, reinterpret_cast<const float2 *>(tab), n_pos,
                 n_tab_pairs, theta_scale, freq_scale, freq_factors);
    return ember_cuda_launched("rope_tab");
}
