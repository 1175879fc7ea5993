/*
 * cuda_backend.h — the CUDA backend's C ABI: device, memory, weights, kernels.
 *
 * Owns: one device context (stream, cuBLAS handle, scratch), device and
 * mapped-host allocations, weight upload, and the kernels the op table calls:
 * quantized mat-vec / small-batch matmul, row lookup (embeddings), RMSNorm,
 * RoPE, gated activations, residual add, KV-cache stores and flash-attention
 * decode over an F16 KV cache; capture of a step as a CUDA graph.
 * Must not: know models, sampling or KV block policy (src/kv decides which
 * cell a token goes to; we only read and write the cells we are told).
 *
 * Conventions:
 * - Every kernel call is asynchronous on the context's stream, does not
 *   synchronise with the host and does not allocate (after a first call of
 *   the same size, which may grow scratch), so a decode step made of these
 *   calls can be captured as a CUDA graph. Values that change from step to
 *   step (token ids, positions, cells, block tables) are read from device
 *   memory, never passed by value, for the same reason.
 * - Pointers to data are device pointers (or mapped host pointers from
 *   ember_cuda_tensor_upload(keep_in_host=true)).
 * - Activations are F32 in row-major [rows, n] order. Weights keep their
 *   GGUF block format and are dequantized in registers; dot products
 *   accumulate in F32 with F32 activations, so results match the
 *   dequantize-then-multiply reference up to summation order. To see what
 *   the CPU backend sees, round the activations first with
 *   ember_cuda_round_act (the op-table backend does). Block layouts: ggml-common.h (block_q4_0 ... block_q6_K),
 *   confirmed against gguf-py gguf/quants.py.
 * - Errors: EMBER_ERR_INVALID_ARG for bad shapes or NULL pointers,
 *   EMBER_ERR_UNSUPPORTED for a type or head size without a kernel,
 *   EMBER_ERR_NOMEM when an allocation fails, EMBER_ERR_INTERNAL for a CUDA
 *   runtime error (the message carries cudaGetErrorString).
 *
 * Compiled only with -DEMBER_CUDA=ON (then EMBER_CUDA is defined for users
 * of libember).
 */
#ifndef EMBER_CUDA_BACKEND_H
#define EMBER_CUDA_BACKEND_H

#include "ember.h"

#ifdef __cplusplus
extern "C" {
#endif

#include "base/types.h" /* a C header without its own extern "C" */
#include "backend/options.h"

typedef struct ember_cuda ember_cuda;

/* Number of usable CUDA devices; 0 when the driver or a GPU is missing.
 * Never fails, never sets an error. */
int ember_cuda_device_count(void);

/* Open device `device` (0-based): create a stream and a cuBLAS handle,
 * configured by opt's cuda_pdl, cuda_tf32, cuda_cublas_ws_mib and
 * cuda_stack_bytes (backend/options.h; NULL: the table's defaults, no
 * environment). Errors: EMBER_ERR_INVALID_ARG (no such device),
 * EMBER_ERR_NOMEM (cuBLAS workspace), EMBER_ERR_INTERNAL. */
ember_status ember_cuda_new(int device, const ember_backend_options *opt, ember_cuda **out);
/* Release everything the context allocated (not tensors the caller holds). */
void ember_cuda_free(ember_cuda *cu);
/* Device name, e.g. "NVIDIA H200". */
const char *ember_cuda_device_name(const ember_cuda *cu);

/* ---- memory -------------------------------------------------------------- */

/* Device allocation of `bytes` (> 0). Errors: EMBER_ERR_NOMEM. */
ember_status ember_cuda_malloc(ember_cuda *cu, size_t bytes, void **out);
/* Free an ember_cuda_malloc block of `bytes` (its size, for the counters). */
void ember_cuda_mfree(ember_cuda *cu, void *p, size_t bytes);
/* Pinned (page-locked) host memory of `bytes`: device copies into it run at
 * full PCIe speed. Errors: EMBER_ERR_NOMEM. */
ember_status ember_cuda_host_alloc(ember_cuda *cu, size_t bytes, void **out);
void ember_cuda_host_free(ember_cuda *cu, void *p, size_t bytes);
/* Copy host -> device; the host buffer may be reused when this returns. */
ember_status ember_cuda_upload(ember_cuda *cu, void *dst, const void *src, size_t bytes);
/* Copy device -> host; waits for all work queued before it. */
ember_status ember_cuda_download(ember_cuda *cu, void *dst, const void *src, size_t bytes);
/* Copy device -> device, asynchronous (graph-capturable). */
ember_status ember_cuda_copy(ember_cuda *cu, void *dst, const void *src, size_t bytes);
/* Fill `bytes` of device memory with zero bytes, asynchronous. */
ember_status ember_cuda_memzero(ember_cuda *cu, void *dst, size_t bytes);
/* Wait for the stream; reports an asynchronous kernel error, if any. */
ember_status ember_cuda_synchronize(ember_cuda *cu);
/* Device timers (CUDA events with timing): mark the start (end false) or the
 * end of timer t in [0, EMBER_CUDA_TIMERS) on the stream, outside graph
 * capture; a start mark clears the end. ember_cuda_timer_seconds waits for
 * the end mark and sets *s to the seconds between the marks, -1 when the
 * timer lacks either. */
#define EMBER_CUDA_TIMERS 4
ember_status ember_cuda_timer_mark(ember_cuda *cu, int32_t timer, bool end);
ember_status ember_cuda_timer_seconds(ember_cuda *cu, int32_t timer, double *s);
/* Free and total bytes of device `device` (cudaMemGetInfo: all processes'
 * allocations and contexts count as used). May create the device's primary
 * context. Errors: EMBER_ERR_INVALID_ARG (no such device), EMBER_ERR_INTERNAL. */
ember_status ember_cuda_mem_info(int device, uint64_t *free_bytes, uint64_t *total_bytes);
/* Bytes currently held in device memory and in mapped host memory by
 * allocations made through this context (weights included). */
uint64_t ember_cuda_device_bytes(const ember_cuda *cu);
uint64_t ember_cuda_host_bytes(const ember_cuda *cu);
/* What a context holds besides the caller's allocations, for reports:
 * device_bytes / host_bytes as above; scratch_bytes: the shared kernel
 * scratch (prefill GEMM weight chunks, attention split partials; grows, never
 * shrinks); counters_bytes: attention split counters; cublas_ws_bytes: the
 * cuBLAS workspace we gave the handle (EMBER_CUDA_CUBLAS_WS_MIB, default 4);
 * stack_bytes: the driver's local-memory reservation, stack_per_thread
 * (cudaLimitStackSize) x SMs x resident threads per SM, part of the CUDA
 * context's footprint; gelu_table_bytes: the GELU f16 table (a __device__
 * array of the module). Scratch, counters and workspace are cudaMalloc'd and
 * not in device_bytes. */
typedef struct ember_cuda_mem_stats_t {
    uint64_t device_bytes, host_bytes, scratch_bytes, counters_bytes, cublas_ws_bytes;
    uint64_t stack_per_thread, stack_bytes, gelu_table_bytes;
} ember_cuda_mem_stats_t;
void ember_cuda_mem_stats(const ember_cuda *cu, ember_cuda_mem_stats_t *out);
/* A counter that changes whenever the context's internal scratch or split
 * counters move to new addresses (a captured graph that used them is then
 * stale and must be captured again). */
uint64_t ember_cuda_mem_generation(const ember_cuda *cu);

/* ---- weights ------------------------------------------------------------- */

/* A weight matrix of `ne1` rows of `ne0` elements in GGUF block format. */
typedef struct ember_cuda_tensor {
    uint32_t type;       /* ember_type */
    int64_t ne0;         /* elements per row (a multiple of the block size) */
    int64_t ne1;         /* rows */
    size_t row_bytes;    /* bytes per row */
    void *data;          /* device-accessible pointer to ne1 * row_bytes bytes */
    bool in_host;        /* lives in mapped, pinned host memory (read over PCIe) */
} ember_cuda_tensor;

/* True if the kernels support weights of type `type`: F32, F16, BF16, Q4_0,
 * Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K. */
bool ember_cuda_type_supported(uint32_t type);

/* Copy a weight matrix from host memory (e.g. the GGUF mapping) into device
 * memory, or, with keep_in_host, into pinned host memory mapped into the
 * device's address space: kernels read it over PCIe (meant for tables that
 * are only looked up, such as Gemma 4's per-layer embeddings; matmul works
 * but is slow). Errors: EMBER_ERR_UNSUPPORTED (type), EMBER_ERR_INVALID_ARG
 * (ne0 not a multiple of the block size, non-positive sizes),
 * EMBER_ERR_NOMEM. */
ember_status ember_cuda_tensor_upload(ember_cuda *cu, uint32_t type, int64_t ne0, int64_t ne1,
                                      const void *host, bool keep_in_host, ember_cuda_tensor *out);
/* Free a tensor's memory; safe on a zeroed struct. */
void ember_cuda_tensor_release(ember_cuda *cu, ember_cuda_tensor *t);

/* ---- matmul and lookup --------------------------------------------------- */

/* y[c][r] = sum_k W[r][k] * x[c][k] for c < n_cols, r < w->ne1.
 * x: [n_cols, w->ne0] F32; y: [n_cols, w->ne1] F32 (must not alias x).
 * n_cols <= 8 runs one fused mat-vec kernel that reads W once; up to 32
 * columns run it per 8 columns; wider batches (prefill) dequantize W to F32
 * in chunks of rows in the context's scratch and run a cuBLAS GEMM (TF32
 * tensor cores; exact F32 products with EMBER_CUDA_TF32=0). Not
 * graph-capturable above 32 columns (scratch may grow).
 * Errors: EMBER_ERR_INVALID_ARG, EMBER_ERR_UNSUPPORTED. */
ember_status ember_cuda_matmul(ember_cuda *cu, const ember_cuda_tensor *w, const float *x,
                               int64_t n_cols, float *y);
/* ember_cuda_matmul of weight ws[k] on xs[k] into ys[k], k < n_w, one after
 * another; where weights read the same x (Q/K/V, gate/up of a prompt), the
 * f16 GEMM form converts x to f16 once for all of them (session 24's
 * profile: the conversion, two kernels a weight, was 13% of E4B's prefill).
 * Errors: as ember_cuda_matmul. */
ember_status ember_cuda_matmul_multi(ember_cuda *cu, int32_t n_w, const ember_cuda_tensor *const *ws,
                                     const float *const *xs, int64_t n_cols, float *const *ys);

/* out [n_rows, ne0] F32 = the n_rows rows of block format `type` that lie
 * one after another at device address rows (ember_type_row_bytes each), as
 * ember_cuda_get_rows expands a row. Errors: EMBER_ERR_INVALID_ARG (type
 * without kernels, shape), EMBER_ERR_UNSUPPORTED. */
ember_status ember_cuda_dequant_rows(ember_cuda *cu, uint32_t type, const void *rows, int64_t ne0, int64_t n_rows,
                                     float *out);
/* ember_cuda_matmul_multi for prompts (n_cols > EMBER_CUDA_GEMM_MIN_COLS)
 * on activations already in f16: xh [n_cols, ne0] f16 for every weight,
 * ab = {alpha, beta} on the device (ember_cuda_rows_f16 makes both): y_k =
 * alpha * dequantize_f16(ws[k]) xh, on the f16 tensor cores with F32
 * accumulation and output (cublasGemmEx), the weights dequantized to f16 a
 * chunk of rows at a time as in ember_cuda_matmul's f16 form. Weights of
 * every block type but F32. Not graph-capturable (scratch may grow).
 * Errors: EMBER_ERR_INVALID_ARG, EMBER_ERR_UNSUPPORTED (F32 or unknown
 * types), EMBER_ERR_INTERNAL (cuBLAS). */
#define EMBER_CUDA_GEMM_MIN_COLS 32
ember_status ember_cuda_matmul_multi_f16(ember_cuda *cu, int32_t n_w, const ember_cuda_tensor *const *ws, const void *xh,
                                         const float *ab, int64_t n_cols, float *const *ys);

/* y = dequantize(quantize(x)) in activation format `act_type`, over n
 * floats (n a multiple of its block): Q8_0 and Q8_1 (blocks of 32: d =
 * amax/127 kept as f16, q = roundf(x/d)), Q8_K (blocks of 256: d = amax/127
 * as f32, q = rint(x * 127/amax)), or F32 (a copy). Run before matmul it
 * makes the GPU see the activations the CPU backend's vec_dot sees (the same
 * quantizers as src/quant's from_float_ref; ggml's quantize_row_q8_*), so
 * the two backends differ only in summation order. y may equal x.
 * Errors: EMBER_ERR_UNSUPPORTED (other types), EMBER_ERR_INVALID_ARG. */
ember_status ember_cuda_round_act(ember_cuda *cu, uint32_t act_type, const float *x, float *y, int64_t n);

/* ---- integer mat-vec on Q8 activations (cuda_q8.cu) ---------------------
 * The CPU backend's arithmetic: activations quantized to the weight's
 * vec_dot_type with the bytes of src/quant's from_float, exact integer
 * block dots, then the CPU kernel's float steps in its order, so every
 * output equals the CPU backend's matmul bit for bit (cuda_q8.cu lists the
 * orders and the CPU files they follow). */

/* Activation format of the integer kernel for weight type `wtype`: Q8_0
 * (Q4_0, Q5_0, Q8_0), Q8_1 (Q4_1, Q5_1), Q8_K (Q4_K, Q6_K); EMBER_TYPE_F32
 * when there is no integer kernel for the type. */
uint32_t ember_cuda_q8_act_type(uint32_t wtype);
/* Bytes of a quantized activation buffer for n_cols rows of n floats:
 * qs int8 [n_cols * n], then, 16-byte aligned, d float [n_cols * n / bs]
 * (the f16 d widened for Q8_0/Q8_1, the f32 d of Q8_K), then for Q8_1 s
 * float [n_cols * n / 32] (f16 s widened); bs = 32, or 256 for Q8_K. */
size_t ember_cuda_q8_bytes(uint32_t act_type, int64_t n, int64_t n_cols);
/* Quantize x [n_cols, n] F32 into buf (ember_cuda_q8_bytes, 16-byte
 * aligned device memory) as `act_type` (Q8_0, Q8_1 or Q8_K; n a multiple of
 * its block). Errors: EMBER_ERR_UNSUPPORTED, EMBER_ERR_INVALID_ARG. */
ember_status ember_cuda_quantize_q8(ember_cuda *cu, uint32_t act_type, const float *x, int64_t n,
                                    int64_t n_cols, void *buf);
/* y[c][r] = W[r] . a[c] for c < n_cols, a = buf quantized by
 * ember_cuda_quantize_q8 to ember_cuda_q8_act_type(w->type) with
 * n = w->ne0; y: [n_cols, w->ne1] F32. Any n_cols (8 per kernel pass).
 * The exact integer block dots are summed in the CPU backend's order,
 * bit-identical to it (cuda_q8.cu), or, after
 * ember_cuda_set_exact_matvec(cu, false) (the default; EMBER_CUDA_MMVQ=0 turns it off), in free
 * float order (cuda_mmvq.cu: within 1e-5 of max |y| of the CPU backend).
 * Errors: EMBER_ERR_UNSUPPORTED (type without an integer kernel),
 * EMBER_ERR_INVALID_ARG. */
ember_status ember_cuda_matmul_q8(ember_cuda *cu, const ember_cuda_tensor *w, const void *buf, int64_t n_cols,
                                  float *y);
/* Choose the mat-vec kernels of ember_cuda_matmul_q8(_multi): true = the
 * CPU backend's float order (bit-identical), false = free order (the fast
 * kernels). ember_cuda_new sets it from the options: true unless cuda_mmvq
 * and not cuda_exact. */
void ember_cuda_set_exact_matvec(ember_cuda *cu, bool on);

/* Rows each warp of a one-column free-order mat-vec takes (cuda_mmvq.cu):
 * 1, 2 or 4 (more than 2 means 4), one after another; 0
 * (the default, EMBER_CUDA_MMVQ_ROWS) picks by shape: 4 for a lone weight
 * of >= 32,768 rows (an LM head), else 1. The outputs are the same bits
 * whatever it is (each row's lane program and warp sum do not change). */
void ember_cuda_set_mmvq_rows(ember_cuda *cu, int rows_per_warp);

/* One-column free-order mat-vecs copy each warp's rows into shared memory
 * with cp.async before the PDL wait and read them there (cuda_mmvq.cu;
 * EMBER_CUDA_MMVQ_SMEM; rows a warp as ember_cuda_set_mmvq_rows, 1 for 0,
 * fewer where a CTA's copies would pass 48 KiB). The same output bits. */
void ember_cuda_set_mmvq_smem(ember_cuda *cu, bool on);

/* Rows each warp of a 2-8 column free-order Q4_K / Q6_K mat-vec takes at
 * once (cuda_mmvq.cu k_mmvq_mr; EMBER_CUDA_MMVQ_MR): 1 (one row a warp),
 * 2 or 4 (3 or more means 4); each activation load serves them all. The
 * same output bits whatever it is (each row's and column's steps and order
 * do not change). */
void ember_cuda_set_mmvq_mr(ember_cuda *cu, int rows_per_warp);

/* Free-order Q4_K and Q6_K mat-vecs of min_cols to 8 columns run on the
 * int8 tensor cores (cuda_mmvq.cu k_mmvq_tc4_K / k_mmvq_tc6_K;
 * EMBER_CUDA_MMVQ_TC; unmeasured until a GPU run): 0 or less never
 * (the default), 1 counts as 2. Outputs within float summation order of
 * the dp4a kernels' (1e-5 of max |y| in test_cuda_q8), not their bits;
 * other weight types and one-column launches are unaffected. */
void ember_cuda_set_mmvq_tc(ember_cuda *cu, int min_cols);
/* ember_cuda_matmul_q8 for n_w (1..3) weights of one type and row length
 * that read the same quantized activations (Q/K/V, gate/up), in one
 * launch: ys[k] = [n_cols, ws[k]->ne1], each row computed exactly as
 * ember_cuda_matmul_q8 computes it (bit-identical). Errors: as
 * ember_cuda_matmul_q8, and EMBER_ERR_INVALID_ARG when the weights differ
 * in type or row length. */
ember_status ember_cuda_matmul_q8_multi(ember_cuda *cu, int32_t n_w, const ember_cuda_tensor *const *ws, const void *buf,
                                        int64_t n_cols, float *const *ys);

/* out[i] = dequantized row ids[i] of W, for i < n_ids; out: [n_ids, w->ne0]
 * F32; ids: device int32, each in [0, w->ne1) (out-of-range ids give a zero
 * row rather than a fault). */
ember_status ember_cuda_get_rows(ember_cuda *cu, const ember_cuda_tensor *w, const int32_t *ids,
                                 int64_t n_ids, float *out);

/* ---- elementwise and normalisation -------------------------------------- */

/* y[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w for each of n_rows rows of n
 * floats; w: [n] or NULL (no weight). y may equal x. Zhang & Sennrich 2019. */
ember_status ember_cuda_rms_norm(ember_cuda *cu, const float *x, const float *w, float *y,
                                 int64_t n, int64_t n_rows, float eps);
/* residual[r] += rms_norm(x[r]) * w: Gemma's post-attention / post-FFN norm
 * fused with the residual add. x, residual: [n_rows, n]; w: [n] or NULL. */
ember_status ember_cuda_rms_norm_add(ember_cuda *cu, const float *x, const float *w,
                                     float *residual, int64_t n, int64_t n_rows, float eps);

typedef enum ember_cuda_rope_mode {
    EMBER_CUDA_ROPE_NORMAL = 0, /* rotate pairs (x[2i], x[2i+1]) (llama) */
    EMBER_CUDA_ROPE_NEOX = 2,   /* rotate pairs (x[i], x[i + n_rot/2]) (gemma, neox) */
} ember_cuda_rope_mode;

/* Rotary position embedding in place (Su et al. 2021, RoFormer) on
 * x: [n_tokens, n_head, head_dim] F32; the first n_rot (even, <= head_dim)
 * dims of each head rotate, the rest pass through. Pair i turns by
 * theta = freq_scale * (pos[t] * ts^i) / ff[i] with ts = powf(freq_base,
 * -2/n_rot), evaluated in f32 by repeated multiplication as ggml_rope does;
 * ff = freq_factors (device [n_rot/2]) or 1 when NULL; pos: device int32
 * [n_tokens]. */
ember_status ember_cuda_rope(ember_cuda *cu, float *x, const int32_t *pos, int64_t n_tokens,
                             int n_head, int head_dim, int n_rot, ember_cuda_rope_mode mode,
                             float freq_base, float freq_scale, const float *freq_factors);

/* ember_cuda_rope_tab_pairs with every pair in the table (n_rot/2). */
ember_status ember_cuda_rope_tab(ember_cuda *cu, float *x, const int32_t *pos, int64_t n_tokens, int n_head,
                                 int head_dim, int n_rot, ember_cuda_rope_mode mode, const float *tab, int32_t n_pos,
                                 float freq_base, float freq_scale, const float *freq_factors);
/* ember_cuda_rope with the angles' cos/sin read from tab: device float
 * [n_pos][n_tab_pairs][2] (cos, sin) of pairs 0..n_tab_pairs-1 (<= n_rot/2)
 * made on the host by the CPU backend's arithmetic and libm (cuda_rope_tab.cu
 * says why); other pairs and positions outside [0, n_pos) compute their
 * angle with the CPU's f32 steps, then take (cos, sin) = (1, angle) below
 * 2^-12 (glibc's results there), else sincosf. The caller leaves out of the
 * table only pairs whose angle stays below 2^-12 for every position < n_pos.
 * freq_base, freq_scale and freq_factors (device, or NULL) serve those
 * computed angles. */
ember_status ember_cuda_rope_tab_pairs(ember_cuda *cu, float *x, const int32_t *pos, int64_t n_tokens, int n_head,
                                       int head_dim, int n_rot, ember_cuda_rope_mode mode, const float *tab,
                                       int32_t n_pos, int n_tab_pairs, float freq_base, float freq_scale,
                                       const float *freq_factors);

typedef enum ember_cuda_act {
    EMBER_CUDA_ACT_SILU = 0,      /* x * sigmoid(x) */
    EMBER_CUDA_ACT_GELU_TANH = 1, /* 0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3))), Hendrycks & Gimpel */
    /* GELU-tanh as ggml's CPU table computes it (and our CPU backend):
     * x <= -10: 0; x >= 10: x; else f16(gelu(f16(x))). */
    EMBER_CUDA_ACT_GELU_TANH_F16 = 2,
} ember_cuda_act;

/* Gated activation: out[i] = act(gate[i]) * up[i] over n elements (GLU,
 * Shazeer 2020). out may equal gate or up. */
ember_status ember_cuda_glu(ember_cuda *cu, ember_cuda_act act, const float *gate, const float *up,
                            float *out, int64_t n);
/* y[i] = a[i] + b[i] over n elements; y may equal a or b. */
ember_status ember_cuda_add(ember_cuda *cu, const float *a, const float *b, float *y, int64_t n);
/* y = rms_norm(x) * w (y may equal x) and residual += y, per row: Gemma's
 * post-norms fused with the residual add (the same float operations as
 * ember_cuda_rms_norm then ember_cuda_add). */
ember_status ember_cuda_rms_norm_add_out(ember_cuda *cu, const float *x, const float *w, float *y,
                                         float *residual, int64_t n, int64_t n_rows, float eps);
/* out = act(gate) * up (ember_cuda_glu) and r = ember_cuda_round_act(Q8_K,
 * out) in one kernel; n % 256 == 0. */
ember_status ember_cuda_glu_round_q8K(ember_cuda *cu, ember_cuda_act act, const float *gate, const float *up,
                                      float *out, float *r, int64_t n);
/* A prefill GEMM's activations in f16, written by the kernel that makes
 * them (ember_cuda_matmul_multi_f16 reads them), instead of F32 rows rounded
 * to the weights' vec_dot_type by a kernel of their own, then scanned for
 * their maximum and converted (k_amax, k_to_half_scaled): three passes
 * over the rows fewer. Per row r of n values v (n_rows rows):
 *   EMBER_CUDA_ROW_COPY  v = x (y, w unused);
 *   EMBER_CUDA_ROW_NORM  v = y = rms_norm(x) * w (w may be NULL; the bits of
 *                        ember_cuda_rms_norm; y may equal x);
 *   EMBER_CUDA_ROW_GLU   v = y = act(x) * w, x the gate and w the up rows (the
 *                        bits of ember_cuda_glu; y may equal x);
 * v then rounded as ember_cuda_round_act(round, v) rounds it (round Q8_0,
 * Q8_1, Q8_K: the activations the CPU backend's vec_dot sees; F32: as is;
 * n a multiple of the block: 256 for Q8_K, else 32),
 * then h[r][i] = f16(v[r][i] / S) and ab = {S, 0} (the GEMM's alpha and
 * beta, on the device), S the power of two that brings max |v| over all
 * rows under 2^14 (1 when it already is, or is inf/NaN), as
 * ember_cuda_matmul's f16 form scales its input. Each row is scaled by its
 * own s first, and rows with s < S are brought to S by a second kernel that
 * reads one word when no row needed a scale. h: [n_rows][n] f16; srow:
 * n_rows floats and smax: one word of scratch. Errors:
 * EMBER_ERR_INVALID_ARG (shape, NULL, kind, activation),
 * EMBER_ERR_UNSUPPORTED (round). */
typedef enum ember_cuda_row_kind {
    EMBER_CUDA_ROW_COPY = 0,
    EMBER_CUDA_ROW_NORM = 1,
    EMBER_CUDA_ROW_GLU = 2,
} ember_cuda_row_kind;
ember_status ember_cuda_rows_f16(ember_cuda *cu, ember_cuda_row_kind kind, ember_cuda_act act, uint32_t round,
                                 const float *x, const float *w, float *y, int64_t n, int64_t n_rows, float eps, void *h,
                                 float *srow, unsigned *smax, float *ab);
/* y = rms_norm(x) * w (ember_cuda_rms_norm; y may equal x) and buf =
 * ember_cuda_quantize_q8(act_type, y) in one kernel (cuda_ops.cu);
 * act_type Q8_0 or Q8_1 (n % 32 == 0) or Q8_K (n % 256 == 0), n_rows rows. */
ember_status ember_cuda_rms_norm_quant_q8(ember_cuda *cu, uint32_t act_type, const float *x, const float *w,
                                          float *y, void *buf, int64_t n, int64_t n_rows, float eps);
/* A residual add followed by the quantized input of the next matmul, in
 * one kernel. y1 picks the add: non-NULL, Gemma's post-norm and residual
 * add (ember_cuda_rms_norm_add_out: y1 = rms_norm(x) * w1, residual +=
 * y1); NULL, the plain residual add of pre-norm models (ember_cuda_add:
 * residual += x; w1 and eps1 unused). Then with norm2, y =
 * rms_norm(residual) * w and buf = ember_cuda_quantize_q8(act_type, y) (the
 * next block's pre-norm; y may equal x); without, buf = the quantized
 * residual itself (y and w unused). The same bits as the kernels one after
 * another. Shapes and types as ember_cuda_rms_norm_quant_q8. */
ember_status ember_cuda_add_norm_quant_q8(ember_cuda *cu, uint32_t act_type, const float *x, const float *w1,
                                          float *y1, float *residual, float eps1, const float *w, float *y, void *buf,
                                          int64_t n, int64_t n_rows, float eps, bool norm2);
/* out = act(gate) * up (ember_cuda_glu) and buf = ember_cuda_quantize_q8(
 * Q8_K, out) over n elements taken as one row (its blocks are those of any
 * [n / n_in, n_in] view with n_in % 256 == 0, so buf serves the matmul of
 * the [n_tokens, n_in] rows); n % 256 == 0. */
ember_status ember_cuda_glu_quant_q8K(ember_cuda *cu, ember_cuda_act act, const float *gate, const float *up,
                                      float *out, void *buf, int64_t n);

/* y = rms_norm(x) * w (y may equal x) and r = ember_cuda_round_act(Q8_0, y)
 * in one kernel (the rounding of the matmul that reads y next); n % 32 == 0. */
ember_status ember_cuda_rms_norm_round_q8(ember_cuda *cu, const float *x, const float *w, float *y, float *r,
                                          int64_t n, int64_t n_rows, float eps);
/* ember_cuda_kv_store for K (rows of rk) and V (rows of rv) in one launch. */
ember_status ember_cuda_kv_store2(ember_cuda *cu, const float *k, int64_t rk, const float *v, int64_t rv,
                                  int64_t n_tokens, const int32_t *cells, uint16_t *k_cache, uint16_t *v_cache);
/* One part of ember_cuda_head_prep: a tensor of attention heads. */
typedef struct ember_cuda_head_part {
    float *x;                /* device [n_tokens, n_head, head_dim], rewritten in place when norm or rope */
    int32_t n_head;
    bool norm;               /* rms-normalise each head row (ember_cuda_rms_norm's arithmetic) */
    const float *norm_w;     /* device [head_dim] weight, or NULL (no weight) */
    float eps;
    bool rope;               /* then rotate it (ember_cuda_rope_tab_pairs's arithmetic) */
    bool neox;
    int32_t n_rot, n_pos, n_tab;
    const float *tab;        /* device [n_pos][n_tab] (cos, sin) */
    float theta_scale;       /* powf(freq_base, -2 / n_rot) */
    float freq_scale;
    const float *ff;         /* device [n_rot / 2] frequency factors, or NULL */
    uint16_t *cache;         /* device F16 KV rows [cells][n_head * head_dim] to store the result into, or NULL */
} ember_cuda_head_part;

/* What a layer does to its fresh Q, K and V heads before attention, in one
 * launch (issue 15 item 2: norm + RoPE + KV store): for each part, per
 * (token, head) row, y = rms_norm(x) * w when norm, then RoPE when rope (in
 * that order), x = y, and y rounded to F16 into cache row cells[t] when
 * cache (cells < 0 skip). The same bits as ember_cuda_rms_norm,
 * ember_cuda_rope_tab_pairs and ember_cuda_kv_store2 run one after another
 * (the norm uses ember_norm_threads(head_dim) threads as the lone kernel
 * does). pos and cells: device int32 [n_tokens]. 1 to 3 parts, each
 * head_dim wide (even, <= 1024); n_tokens <= 65535. */
typedef struct ember_cuda_head_args {
    int32_t n_tokens, head_dim, n_parts;
    const int32_t *pos;
    const int32_t *cells;
    ember_cuda_head_part part[3];
} ember_cuda_head_args;
ember_status ember_cuda_head_prep(ember_cuda *cu, const ember_cuda_head_args *a);

/* x[i] *= s over n elements. */
ember_status ember_cuda_scale(ember_cuda *cu, float *x, float s, int64_t n);
/* x[i] = cap * tanhf(x[i] / cap) over n elements (logit soft-capping,
 * Gemma 2); cap > 0. */
ember_status ember_cuda_softcap(ember_cuda *cu, float *x, float cap, int64_t n);

/* ---- recurrent (linear-attention) ops (cuda_recurrent.cu) -----------------
 * Qwen3.5's Gated DeltaNet layers; the formulas are the op table's
 * (backend/backend.h, conv1d_silu and gated_delta_rule) and the CPU
 * backend's (cpu/recurrent.c) is the reference. Per-sequence states live in
 * one device block of equal cells; entry t's state is found on the device
 * (so a captured step replays for any sequences) as below. Entries whose
 * cells are equal belong to one sequence and are applied in entry order;
 * entries of different cells are independent (they may interleave). */

/* Entry t's state: base + cells[t] * cell_floats + off (device floats). */
typedef struct ember_cuda_rs_cells {
    float *base;              /* device: the state block */
    const int32_t *cells;     /* device int32 [n]: entry t's cell */
    int64_t cell_floats;      /* floats from one cell to the next */
    int64_t off;              /* floats from a cell's start to this layer's state */
    int32_t max_groups;       /* >= the number of distinct cells among the n entries (the grid's second
                               * dimension; the runs of equal consecutive cells bound it) */
} ember_cuda_rs_cells;

/* Causal depthwise convolution of width d_conv (1..64) and SiLU, with the
 * state shift (backend.h conv1d_silu): x, y [n, n_ch] (y must not alias x),
 * w [n_ch][d_conv] (device), entry t's state [d_conv - 1][n_ch] at st.
 * Each CTA takes 32 channels of every entry: it finds each entry's
 * previous entry of the same cell, computes all outputs from the old
 * states and the batch's inputs, then writes each cell's new state from its
 * last entry. f32; the taps summed in the CPU's order without
 * contraction, SiLU with CUDA's expf (2 ulp): within a few ulp of the CPU.
 * Calls of more than 1024 entries run as several launches in order.
 * Errors: EMBER_ERR_INVALID_ARG (NULL, shapes). */
ember_status ember_cuda_conv1d_silu(ember_cuda *cu, float *y, const float *x, const float *w, int64_t n_ch,
                                    int32_t d_conv, const ember_cuda_rs_cells *st, int32_t n);

/* Shapes and device weights of one gated-delta-rule layer (backend.h
 * ember_gdr_params with device A and dt_bias [n_head_v]), and the form to
 * compute it in. */
typedef struct ember_cuda_gdr_params {
    int32_t n_head_k, n_head_v, d_k, d_v;   /* d_k <= 1024; n_head_v a multiple of n_head_k */
    const float *A, *dt_bias;
    float eps;
    int32_t chunk_min;   /* >= 0; 0: the recurrent form only; else a sequence with >= chunk_min entries in one
                          * launch takes the chunked form (d_k <= 256, where its shared memory fits) */
} ember_cuda_gdr_params;

/* The shortest run of one sequence the CUDA backend computes in the chunked
 * form (cuda_rstate.c sets chunk_min to it for eager steps; decode steps
 * and short runs stay recurrent). */
#define EMBER_CUDA_GDR_RUN_MIN 16

/* The gated delta rule (backend.h gated_delta_rule: Yang, Kautz &
 * Hatamizadeh, ICLR 2025; transformers qwen3_5
 * torch_recurrent_gated_delta_rule): q, k, v of entry t from qkv + t * ld
 * (q heads, k heads, v heads), alpha, b [n, n_head_v], out [n, n_head_v *
 * d_v], entry t's state [n_head_v][d_v][d_k] at st. Two kernels, each
 * sequence taken by one of them (decided on the device from the cells):
 * - recurrent form, entry by entry: one warp holds a few value rows of one
 *   head's state in registers (the rows are independent given q and k) and
 *   walks its sequence's entries in order; grid: (head, rows) units x
 *   distinct cells. f32; dot products summed in a warp tree (not the CPU's
 *   order): within ~1e-6 relative of the CPU's recurrent form;
 * - chunked form (p->chunk_min > 0, for sequences of >= chunk_min entries
 *   of the launch, d_k <= 256): chunks of 64 tokens (32 for d_k > 128) in
 *   the WY / UT form (Yang et al., NeurIPS 2024; cpu/recurrent.c gdr_chunk),
 *   products with the state as f32 matrix-matrix work in shared memory
 *   (up to 133 KiB per CTA of 256 threads, opted in on first use); grid:
 *   (head, 32 value rows) x distinct cells. Another summation order than
 *   the recurrent form's; the two agree within float rounding (the tests
 *   bound both against the CPU at 1e-4 of max |out|).
 * Calls of more than 1024 entries run as several launches in order. No
 * allocation or synchronisation (capturable; the chunked form's attribute
 * opt-in is a host call, not a stream operation). Errors:
 * EMBER_ERR_INVALID_ARG (NULL, shapes), EMBER_ERR_INTERNAL (a launch). */
ember_status ember_cuda_gated_delta_rule(ember_cuda *cu, const ember_cuda_gdr_params *p, const float *qkv, int64_t ld,
                                         const float *alpha, const float *b, const ember_cuda_rs_cells *st, int32_t n,
                                         float *out);

/* x[i] *= 1 / (1 + expf(-g[i])), i < n (backend.h sigmoid_mul). */
ember_status ember_cuda_sigmoid_mul(ember_cuda *cu, float *x, const float *g, int64_t n);

/* dst[r * ld_dst + c] = src[r * ld_src + c], r < n_rows, c < n_cols
 * (backend.h copy_strided); dst must not overlap src. */
ember_status ember_cuda_copy_strided(ember_cuda *cu, float *dst, int64_t ld_dst, const float *src, int64_t ld_src,
                                     int64_t n_rows, int64_t n_cols);

/* ---- sampling support ------------------------------------------------------ */

/* The heads of n_rows logits rows (ember_get_logits_top, include/ember.h):
 * row r is logits + row_off[r] (device, n_vocab floats; row_off host
 * memory). work: device scratch of ember_cuda_logits_top_work_bytes;
 * res_dev / res_host: device and pinned host buffers of
 * ember_cuda_logits_top_result_bytes. Waits for the stream (one small
 * download). k in [1, EMBER_LOGITS_TOP_MAX], n_vocab in [k, 2^31).
 * Errors: EMBER_ERR_INVALID_ARG, EMBER_ERR_UNSUPPORTED (a vocabulary past
 * the shared-memory sort, ~900k tokens at k > 1), EMBER_ERR_INTERNAL. */
size_t ember_cuda_logits_top_work_bytes(int32_t n_rows, int64_t n_vocab, int32_t k);
size_t ember_cuda_logits_top_result_bytes(int32_t n_rows, int32_t k);
ember_status ember_cuda_logits_top(ember_cuda *cu, const float *logits, const int64_t *row_off, int32_t n_rows,
                                   int64_t n_vocab, int32_t k, void *work, size_t work_bytes, void *res_dev,
                                   void *res_host, ember_logits_top *out);
/* ember_cuda_logits_top in two halves: _start queues the kernels and the
 * download into res_host and records an event after it (no wait); _finish
 * waits for that event only (work queued after _start keeps running) and
 * unpacks res_host into out[n_rows] (the n_rows and k of the start).
 * Errors as ember_cuda_logits_top. */
ember_status ember_cuda_logits_top_start(ember_cuda *cu, const float *logits, const int64_t *row_off, int32_t n_rows,
                                         int64_t n_vocab, int32_t k, void *work, size_t work_bytes, void *res_dev,
                                         void *res_host);
ember_status ember_cuda_logits_top_finish(ember_cuda *cu, const void *res_host, int32_t n_rows, int32_t k,
                                          ember_logits_top *out);
/* dst[i] = the argmax id (head entry 0) of row rows[i] of a head result
 * res_dev (ember_cuda_logits_top's device buffer, rows of 1 + k keys) for
 * i < n, queued on the stream: a step's tokens taken from the last heads
 * without the host (ember_backend_step.token_top). dst: device int32 [n];
 * rows: host [n], each in [0, n_res_rows) or -1 (dst[i] left as it is);
 * n in [1, EMBER_CUDA_HEAD_TOKENS_MAX].
 * Errors: EMBER_ERR_INVALID_ARG, EMBER_ERR_INTERNAL (launch). */
enum { EMBER_CUDA_HEAD_TOKENS_MAX = EMBER_DECODE_FED_MAX };   /* the entries of a fed step */
ember_status ember_cuda_head_tokens(ember_cuda *cu, const void *res_dev, int32_t n_res_rows, int32_t k,
                                    const int32_t *rows, int32_t n, int32_t *dst);

/* ---- KV cache and attention ---------------------------------------------- */

/* Store n_tokens rows of `row` floats (src: [n_tokens, row] F32) into an
 * F16 cache of cells of `row` halves: cache[cells[t]] = f16(src[t]),
 * round-to-nearest-even. cells: device int32 [n_tokens]; negative cells are
 * skipped. */
ember_status ember_cuda_kv_store(ember_cuda *cu, const float *src, int64_t n_tokens, int64_t row,
                                 const int32_t *cells, uint16_t *cache);

typedef struct ember_cuda_attn_params {
    int n_head;          /* query heads */
    int n_head_kv;       /* K/V heads; n_head % n_head_kv == 0 (GQA) */
    int head_dim;        /* 1..1024; tuned kernels for 64, 128, 256, 512 (cuda_attn.cu) */
    float scale;         /* logits = scale * q.k (usually 1/sqrt(head_dim)) */
    float softcap;       /* > 0: logits = softcap * tanh(logits / softcap) */
    int32_t n_swa;       /* > 0: sliding window, key j visible iff pos - n_swa < j <= pos */
    int32_t page_size;   /* cells per KV block */
    int32_t max_pages;   /* columns of block_table */
    int32_t max_ctx;     /* most positions a sequence reaches; sizes the key splits */
    bool exact;          /* the CPU backend's order and f16 rounding (slow; see cuda_attn.cu) */
    bool exact_tiled;    /* with exact: its >= 64-query tiled all-f32 order instead of the one-row one */
    /* ember_cuda_attn only: when q8_buf is not NULL, out is also written
     * quantized to q8_type (EMBER_TYPE_Q8_0, _Q8_1 or _Q8_K) into q8_buf,
     * the buffer of ember_cuda_quantize_q8 for n = n_head * head_dim and
     * n_cols = n_tokens (the same bytes it writes), by the attention kernel
     * itself where it can (the tuned kernels, n_head / n_head_kv * head_dim
     * a multiple of the block), else by ember_cuda_quantize_q8 after it */
    uint32_t q8_type;
    void *q8_buf;
} ember_cuda_attn_params;

/* Attention of a run of n_q prompt queries of one sequence at positions
 * pos0 .. pos0 + n_q - 1, on the tensor cores (cuda_attn_prefill.cu): the
 * same contract as ember_cuda_attn for those queries (q and out [n_q,
 * n_head, head_dim] F32, q rounded to f16 before q.k; causal, sliding
 * window and soft-capping from p), with the probabilities rounded to f16
 * before they weight V. blocks: the sequence's block table in host memory
 * (pages up to pos0 + n_q - 1; pages below a sliding window are never
 * read). k_cache / v_cache: the F16 cache, cells of n_head_kv * head_dim.
 * Uses the context's scratch (K/V of the run's keys, scores of ~96 MiB per
 * chunk of queries); not inside a graph capture. head_dim % 8 == 0.
 * Errors: EMBER_ERR_INVALID_ARG, EMBER_ERR_NOMEM, EMBER_ERR_INTERNAL. */
ember_status ember_cuda_attn_prefill(ember_cuda *cu, const ember_cuda_attn_params *p, const float *q, int32_t n_q,
                                     int32_t pos0, const int32_t *blocks, const uint16_t *k_cache, const uint16_t *v_cache,
                                     float *out);

/* Flash-attention (online softmax, Dao et al. 2022; split-K "flash
 * decoding") for n_tokens query rows, each attending causally to its
 * sequence's keys 0..pos[t] (or its sliding window).
 * q: [n_tokens, n_head, head_dim] F32 (RoPE applied, not pre-scaled; it is
 * rounded to f16 before q.k, as ggml does for an F16 cache);
 * out: [n_tokens, n_head, head_dim] F32; pos, seq: device int32 [n_tokens];
 * block_table: device int32 [n_seq, max_pages]: key j of sequence s lives in
 * cell block_table[s*max_pages + j/page_size]*page_size + j%page_size of
 * k_cache / v_cache: [cells, n_head_kv, head_dim] F16. All keys up to pos[t]
 * must be stored before the call. pos, seq and block_table are read before
 * the kernel's programmatic-dependent-launch wait: they must not be written
 * by the kernel launched just before it (the step's arrays, or uploads).
 * Errors: EMBER_ERR_INVALID_ARG, EMBER_ERR_UNSUPPORTED (head_dim outside
 * 1..1024, a q8_type other than Q8_0 / Q8_1 / Q8_K). */
ember_status ember_cuda_attn(ember_cuda *cu, const ember_cuda_attn_params *p, const float *q,
                             int64_t n_tokens, const int32_t *pos, const int32_t *seq,
                             const int32_t *block_table, const uint16_t *k_cache,
                             const uint16_t *v_cache, float *out);

/* ---- CUDA graphs --------------------------------------------------------- */

typedef struct ember_cuda_graph ember_cuda_graph;

/* Start capturing the stream's work into a graph (nothing runs until
 * launched). Only kernel calls above may be made until ember_cuda_graph_end. */
ember_status ember_cuda_graph_begin(ember_cuda *cu);
/* End the capture and instantiate it. */
ember_status ember_cuda_graph_end(ember_cuda *cu, ember_cuda_graph **out);
/* Run a captured graph on the context's stream (asynchronous). */
ember_status ember_cuda_graph_launch(ember_cuda *cu, ember_cuda_graph *g);
void ember_cuda_graph_free(ember_cuda_graph *g);

#ifdef __cplusplus
}
#endif

#endif
