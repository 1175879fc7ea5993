/*
 * backend.h — the op table a model's forward pass is written against.
 *
 * Owns: the small set of ops a transformer step needs (embedding lookup,
 * RMSNorm, matmul of quantized weights, RoPE, gated activations, KV store,
 * attention over a paged KV cache, elementwise add/scale) and the plain
 * descriptions of weights and KV memory they operate on. Each backend
 * (cpu/, cuda/) fills every entry of one ember_backend_ops and says what it
 * can do in ember_backend_caps; ember_backend_new (registry.c) picks one.
 * Callers never test for a missing op and never ask which backend they hold.
 * Must not: know model architectures, sequences or the batch API; allocate in
 * an op (scratch is sized when the backend is created).
 *
 * Layout conventions (ggml order): an activation matrix [n_tokens, n] is
 * n_tokens rows of n contiguous floats. A weight matrix [n_out, n_in] is n_out
 * rows of n_in elements in its block format (GGUF ne[0] = n_in, ne[1] = n_out);
 * y = x W^T, i.e. y[t][o] = dot(W[o], x[t]), with x quantized to the weight
 * type's vec_dot_type first, as ggml's mul_mat does.
 */
#ifndef EMBER_BACKEND_H
#define EMBER_BACKEND_H

#include "ember.h"
#include "backend/options.h"
#include "base/types.h"

#include <stdio.h>

/* A 2-D weight in place in the mapped file: [n_out rows][n_in elements]. */
typedef struct ember_weight {
    uint32_t type;        /* ember_type */
    int64_t n_in;         /* elements per row (GGUF ne[0]) */
    int64_t n_out;        /* rows (GGUF ne[1]) */
    size_t row_bytes;
    const void *data;
    const char *name;     /* tensor name, for messages */
} ember_weight;

/* RoPE pair layout. NORM: rotate (x[2i], x[2i+1]) (llama's GGUF layout, the
 * converter permutes Q/K for it); NEOX: rotate (x[i], x[i + n_rot/2]). */
typedef enum ember_rope_mode { EMBER_ROPE_NORM = 0, EMBER_ROPE_NEOX = 2 } ember_rope_mode;

/* One layer's KV memory as the kv module lays it out: `n_rows` token rows of
 * K (each k_row_bytes of type_k holding n_head_kv heads of head_dim_k) and of
 * V. Row r of a paged cache is token (r % block_tokens) of block
 * (r / block_tokens). */
typedef struct ember_kv_layer_view {
    uint32_t type_k, type_v;   /* EMBER_TYPE_F32, F16 or Q8_0 */
    void *k, *v;
    size_t k_row_bytes, v_row_bytes;
    int32_t block_tokens;
    int64_t n_rows;
} ember_kv_layer_view;

/* One query of an attention call: it attends to its own sequence's positions
 * [lo, pos] where lo = max(0, pos - n_swa + 1) on sliding-window layers and 0
 * otherwise (llama.cpp is_masked_swa: masked when pos - p_key >= n_swa).
 * Key position j lives in row blocks[j / block_tokens] * block_tokens + j %
 * block_tokens of the layer view. */
typedef struct ember_attn_query {
    const int32_t *blocks;
    ember_pos pos;
} ember_attn_query;

typedef struct ember_attn_params {
    int32_t n_head, n_head_kv;  /* GQA: query head h reads KV head h / (n_head / n_head_kv) */
    int32_t head_dim_k, head_dim_v;
    float kq_scale;             /* softmax(kq_scale * q.k) */
    int32_t n_swa;              /* 0: full causal attention */
} ember_attn_params;

typedef struct ember_backend ember_backend;
struct ember_backend_step;
struct ember_gdr_params;

typedef struct ember_backend_ops {
    const char *name;
    void (*free)(ember_backend *be);

    /* out[t] = to_float(W[ids[t]]), t < n; out is [n, w->n_in]. ids must be
     * in [0, w->n_out) (the caller validates tokens). ggml_get_rows. */
    void (*get_rows)(ember_backend *be, const ember_weight *w, const ember_token *ids,
                     int32_t n, float *out);

    /* y[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w for n_rows rows of n; w may
     * be NULL (no weight). y may equal x. Mean accumulated in double as
     * ggml_rms_norm does. Zhang & Sennrich 2019. */
    void (*rms_norm)(ember_backend *be, float *y, const float *x, const float *w,
                     int64_t n_rows, int64_t n, float eps);

    /* For each k < n_w (1 <= n_w <= 16): ys[k] [n_tokens, ws[k]->n_out] =
     * x [n_tokens, n_in] ws[k]^T. All ws[k] share n_in; x is quantized once
     * per distinct vec_dot_type. n_tokens >= 2 may take a tiled GEMM path:
     * the same exact int block products summed in another float order. */
    void (*matmul)(ember_backend *be, const float *x, int64_t n_tokens, int32_t n_w,
                   const ember_weight *const *ws, float *const *ys);

    /* Rotate the first n_rot dims of each head of x [n_tokens, n_head, head_dim]
     * by pos[t] * freq_scale * base^(-2i/n_rot) (RoFormer, Su et al. 2021;
     * theta computed by repeated multiplication in f32 as ggml_rope does). */
    void (*rope)(ember_backend *be, float *x, int64_t n_tokens, int32_t n_head, int32_t head_dim,
                 int32_t n_rot, const ember_pos *pos, float base, float freq_scale,
                 ember_rope_mode mode);

    /* rope with per-pair frequency divisors: pair i turns by pos[t] * freq_scale *
     * base^(-2i/n_rot) / freq_factors[i], i < n_rot/2 (ggml_rope_ext's freq_factors).
     * Gemma 4 "proportional" RoPE on full-attention layers stores 1e30 for the pairs
     * past partial_rotary_factor, which leaves them unrotated. freq_factors NULL = rope. */
    void (*rope_ext)(ember_backend *be, float *x, int64_t n_tokens, int32_t n_head, int32_t head_dim,
                     int32_t n_rot, const ember_pos *pos, float base, float freq_scale,
                     ember_rope_mode mode, const float *freq_factors);

    /* gate[i] = act(gate[i]) * up[i], i < n. GEGLU with GELU-tanh (Hendrycks
     * & Gimpel's tanh form): the CPU backend (and CUDA with EMBER_CUDA_EXACT=1)
     * evaluates it on the f16-rounded input and rounds it to f16 (ggml's
     * GELU table); CUDA by default in f32 (no table load; within an f16
     * rounding, below the Q8 rounding that follows). SwiGLU with
     * silu(x) = x / (1 + e^-x). Shazeer 2020. */
    void (*geglu)(ember_backend *be, float *gate, const float *up, int64_t n);
    void (*swiglu)(ember_backend *be, float *gate, const float *up, int64_t n);

    /* y[i] += x[i]; x[i] *= s. */
    void (*add)(ember_backend *be, float *y, const float *x, int64_t n);
    void (*scale)(ember_backend *be, float *x, float s, int64_t n);

    /* Write K rows k [n, kv->k_row elements] and V rows v into rows[t] of the
     * layer, converting to type_k / type_v. */
    void (*kv_store)(ember_backend *be, const ember_kv_layer_view *kv, const float *k,
                     const float *v, const int64_t *rows, int32_t n);

    /* out [n, n_head*head_dim_v] = softmax(kq_scale * q K^T) V per query and
     * head, over the keys that query sees (ember_attn_query). q is
     * [n, n_head*head_dim_k]; it is rounded to K's dot format (f16 for an F16
     * cache, q8_0 for Q8_0) as ggml's mul_mat does. Vaswani et al. 2017. */
    void (*attention)(ember_backend *be, const ember_kv_layer_view *kv, const ember_attn_params *p,
                      const float *q, const ember_attn_query *queries, int32_t n, float *out);

    /* Called after the kv module copied rows [src_row, src_row + n_rows) to
     * dst_row in the host view of a layer (copy on write of a forked block),
     * so a backend that mirrors the cache elsewhere (device memory) can do
     * the same; a no-op where the layer views are the only copy (CPU). */
    void (*kv_copy)(ember_backend *be, const ember_kv_layer_view *kv, int64_t dst_row, int64_t src_row,
                    int64_t n_rows);

    /* --- memory: activations, host outputs, copies --- */

    /* Activation memory of `bytes`, zeroed, owned by the backend: ops accept
     * pointers into it wherever they take float pointers. With
     * caps.device_activations (a GPU backend) it is device memory and the
     * caller must not dereference it; otherwise host memory (calloc). NULL
     * on failure (error set: EMBER_ERR_NOMEM). act_free releases it (NULL:
     * nothing). */
    void *(*act_alloc)(ember_backend *be, size_t bytes);
    void (*act_free)(ember_backend *be, void *p);
    /* Host memory of `bytes` that the backend writes outputs such as logits
     * into fastest (pinned for a GPU, malloc for the CPU); NULL on failure
     * (error set: EMBER_ERR_NOMEM). host_free releases it (NULL: nothing). */
    void *(*host_alloc)(ember_backend *be, size_t bytes);
    void (*host_free)(ember_backend *be, void *p);
    /* dst[i] = src[i], i < n floats (memcpy over activation memory). */
    void (*copy)(ember_backend *be, float *dst, const float *src, int64_t n);
    /* dst [n] (activation memory) = src [n] (host memory the caller wrote
     * during this pass, e.g. rows looked up on the host). Inside a step the
     * backend may capture the copy: a replay then reads src again at the
     * same address, so src must hold the step's values when the op is
     * called and stay unchanged until step_end; a step that uploads is
     * never replayed without its forward pass (step_begin returns false).
     * A memcpy where activations are host memory. */
    void (*upload)(ember_backend *be, float *dst, const float *src, int64_t n);
    /* out [n_rows, n_in] (activation memory) = to_float of n_rows rows in
     * block format `type` (n_in elements, ember_type_row_bytes bytes each)
     * that lie one after another in host memory at `rows`: get_rows for a
     * matrix that stays on the host, whose rows the caller gathered (Gemma
     * 4's per-layer token embeddings, 1.6 GB of E4B's Q4_K, of which a token
     * reads 6 KB). A device backend moves the rows as they are, in their
     * block format (about a seventh of the floats' bytes), and expands them
     * there. `rows` is read before the call returns; inside a step it is
     * captured as upload is. n_in a multiple of the type's block. */
    void (*dequant_host_rows)(ember_backend *be, uint32_t type, const void *rows, int64_t n_rows, int64_t n_in,
                              float *out);
    /* x[i] = cap * tanh(x[i] / cap), i < n, in f32 with libm tanhf (final
     * logit soft-capping, Gemma 2/3; llama.cpp's final_logit_softcapping). */
    void (*softcap)(ember_backend *be, float *x, float cap, int64_t n);

    /* --- steps --- */

    /* Bracket one forward pass over a micro-batch. step_begin receives the
     * host arrays that the pass's ops will be given again (get_rows ids,
     * rope positions, kv_store rows, attention queries of either KV group:
     * the same pointers),
     * so a backend may copy them to the device once and recognise them.
     * Outputs to host memory (logits) may be deferred until step_end.
     * step_end returns false when the ops did not run (a replay that did not
     * match what was captured): the caller runs the same pass again, which
     * then runs op by op, and calls step_end again. step_begin returns true
     * when the backend will run the whole step itself (a captured step that
     * has replayed identically before): the caller then skips the forward
     * pass and calls step_end, which writes the logits to st->logits.
     * A backend without graphed steps (caps.graphed_steps false) returns
     * false from step_begin and true from step_end. Callers run a step
     * through ember_backend_run_step (step.h), which keeps this protocol. */
    bool (*step_begin)(ember_backend *be, const struct ember_backend_step *st);
    bool (*step_end)(ember_backend *be);

    /* --- reports --- */

    /* Bytes of host scratch the backend allocated at creation (quantized
     * activations, per-thread attention buffers), for the context's memory
     * report; device memory is in print_memory. */
    uint64_t (*scratch_bytes)(const ember_backend *be);
    /* Print what the backend holds in device memory, by category, in MiB,
     * a few lines starting "ember: "; nothing for a backend without device
     * memory (CPU). Lazily placed data (caps.lazy_placement) appears after
     * the first decode. */
    void (*print_memory)(const ember_backend *be, FILE *f);

    /* --- logits: every backend fills these --- */

    /* out[r] = the head of the logits row at host address rows[r] [n_vocab]
     * (ember_get_logits_top: the k largest with ids, the maximum, the
     * log-partition function), for rows a step wrote, any host rows, or
     * rows in activation memory (act_alloc; outside a step). A backend
     * that kept a step's logits on the device (logits_defer) reduces them
     * there, the host rows need not be valid; rows in device activation
     * memory (caps.device_activations) are reduced there too and only the
     * heads come back (a draft's logits that never reach the host). */
    void (*logits_top)(ember_backend *be, const float *const *rows, int32_t n_rows, int64_t n_vocab, int32_t k,
                       ember_logits_top *out);
    /* Make the host logits [host, host + bytes) valid: completes a download
     * that a step with logits_defer left pending (waits for the device).
     * A no-op for rows already on the host. */
    void (*logits_sync)(ember_backend *be, float *host, size_t bytes);
    /* logits_top in two halves, so that the next step can be queued before
     * the host waits: logits_top_start queues the heads of rows (as
     * logits_top) and their download, and returns true; false when it cannot
     * run them asynchronously (rows on the host, no device memory, a host
     * backend): the caller uses logits_top. logits_top_finish waits for
     * that download only (not for work queued after it) and fills out[r] for
     * the n_rows rows of the start. A step queued between the two may take
     * its tokens from these heads (ember_backend_step.token_top,
     * caps.token_feedback). */
    bool (*logits_top_start)(ember_backend *be, const float *const *rows, int32_t n_rows, int64_t n_vocab, int32_t k);
    void (*logits_top_finish)(ember_backend *be, ember_logits_top *out);

    /* ===== recurrent (linear-attention) ops: Qwen3.5's Gated DeltaNet =====
     * Optional: NULL in a backend that lacks them (the CUDA backend's verify
     * mode for now); a context for a model with recurrent layers refuses
     * such a backend (ember_context_new). Kept together at the end of the
     * table. The per-sequence states they update live in the context
     * (kv/rstate.h), in state memory from state_alloc; each op takes one
     * state pointer per entry (`state[t]`: the state of entry t's sequence),
     * and processes entries in order, so a micro-batch may mix sequences
     * (interleaved or not) and hold several consecutive tokens of one. */

    /* State memory (kv/rstate.c's cells and snapshots): n_cells cells of
     * cell_bytes each, contiguous, zeroed. Device memory where
     * caps.device_activations (the host must not dereference it: it moves
     * only through state_copy), else host memory. The recurrent ops' state[t]
     * point into it; a backend may require the pointers of one call to lie
     * in one block at the same offset inside their cells (rstate's per-layer
     * pointers do), and may find entry t's cell on the device by the step's
     * seq_id (ember_backend_step) when cell c of the block is sequence c's
     * (rstate's layout); it checks that on the host. NULL on failure (error
     * set: EMBER_ERR_NOMEM, EMBER_ERR_INVALID_ARG for a zero or overflowing
     * size). state_free releases a block (NULL: nothing). */
    void *(*state_alloc)(ember_backend *be, int64_t n_cells, size_t cell_bytes);
    void (*state_free)(ember_backend *be, void *p);
    /* dst[0, bytes) = src[0, bytes), or zero bytes when src is NULL. dst and
     * src are each state memory or host memory (the backend tells them
     * apart); ordered after the ops queued before it (a copy into host
     * memory waits for them), before those queued after. Outside a step
     * (between forward passes) only. */
    void (*state_copy)(ember_backend *be, void *dst, const void *src, size_t bytes);

    /* Causal depthwise convolution of width d_conv, then SiLU (Mamba's
     * short conv; transformers causal_conv1d_fn / _update, llama.cpp
     * ggml_ssm_conv + ggml_silu):
     *   y[t][c] = silu(sum_{j < d_conv} w[c][j] * u_t[j][c]),
     * where u_t is the last d_conv inputs of t's sequence, oldest first:
     * u_t[j] = state[t][j] for j < d_conv - 1 and u_t[d_conv-1] = x[t].
     * Afterwards state[t] holds the last d_conv - 1 inputs (rows shift up,
     * x[t] enters last). Shapes: x, y [n, n_ch]; w [n_ch][d_conv] (GGUF
     * ssm_conv1d ne = {d_conv, n_ch}); state[t] [d_conv - 1][n_ch], zero for
     * a new sequence. silu(v) = v / (1 + e^-v). y must not alias x. */
    void (*conv1d_silu)(ember_backend *be, float *y, const float *x, const float *w, int64_t n_ch,
                        int32_t d_conv, float *const *state, int32_t n);

    /* The gated delta rule (Yang, Kautz & Hatamizadeh, "Gated Delta
     * Networks", ICLR 2025; transformers qwen3_5
     * torch_recurrent_gated_delta_rule with use_qk_l2norm_in_kernel),
     * defined by its recurrent form below; a backend may compute a run of
     * consecutive entries of one sequence in an equivalent chunked form
     * (the CPU does for prefills: recurrent.c). Per
     * entry t and value head h (key head kh = h % n_head_k: the tiled order
     * llama.cpp's converter writes V heads in), with S = state[t] + h * d_v *
     * d_k as d_v rows of d_k:
     *   g    = A[h] * softplus(alpha[t][h] + dt_bias[h])   (A = -exp(A_log) < 0)
     *   beta = sigmoid(b[t][h])
     *   k^   = k / sqrt(|k|^2 + eps),  q^ = q / sqrt(|q|^2 + eps) / sqrt(d_k)
     *   S    = exp(g) * S
     *   S_i += beta * (v_i - S_i . k^) * k^        for each row i < d_v
     *   out[t][h * d_v + i] = S_i . q^
     * softplus(x) = log(1 + e^x), x for x > 20 (torch's threshold). q, k, v
     * of entry t are read from qkv + t * ld: q heads at 0, k heads at
     * n_head_k * d_k, v heads at 2 * n_head_k * d_k (d_k / d_v floats each).
     * alpha, b [n, n_head_v]; out [n, n_head_v * d_v]; state[t] [n_head_v][d_v][d_k],
     * zero for a new sequence. d_k <= 1024. */
    void (*gated_delta_rule)(ember_backend *be, const struct ember_gdr_params *p, const float *qkv, int64_t ld,
                             const float *alpha, const float *b, float *const *state, int32_t n, float *out);

    /* x[i] *= sigmoid(g[i]) = 1 / (1 + e^-g[i]), i < n (output gate of
     * Qwen3.5's full-attention layers). */
    void (*sigmoid_mul)(ember_backend *be, float *x, const float *g, int64_t n);

    /* dst[r * ld_dst + c] = src[r * ld_src + c], r < n_rows, c < n_cols
     * (a column block of a row-major matrix, e.g. the query half of
     * [q | gate] per head). dst must not overlap src. */
    void (*copy_strided)(ember_backend *be, float *dst, int64_t ld_dst, const float *src, int64_t ld_src,
                         int64_t n_rows, int64_t n_cols);

    /* Optional, both or none (NULL: no device clock, as on the CPU): device
     * time of a span of queued work, for costs that must not be host CPU
     * time (the speculation policy's step costs). timer_mark(be, t, false)
     * marks the start of timer t (0 <= t < EMBER_BACKEND_TIMERS) on the
     * backend's queue after the work queued so far, timer_mark(be, t, true)
     * its end (a later end mark replaces an earlier one); never inside
     * step_begin .. step_end. timer_seconds waits for timer t's end mark and
     * returns the device seconds from its start mark to it, or < 0 when the
     * timer has no start and end (or the clock failed). */
    void (*timer_mark)(ember_backend *be, int32_t timer, bool end);
    double (*timer_seconds)(ember_backend *be, int32_t timer);
} ember_backend_ops;

#define EMBER_BACKEND_TIMERS 4

/* Shapes and weights of one gated-delta-rule layer (ops.gated_delta_rule). */
typedef struct ember_gdr_params {
    int32_t n_head_k, n_head_v;   /* n_head_v a multiple of n_head_k */
    int32_t d_k, d_v;             /* per-head key / value sizes */
    const float *A;               /* [n_head_v] -exp(A_log) (GGUF ssm_a) */
    const float *dt_bias;         /* [n_head_v] (GGUF ssm_dt.bias) */
    float eps;                    /* L2-norm epsilon (1e-6 in transformers' l2norm) */
} ember_gdr_params;

/* One micro-batch as step_begin sees it (model.h ember_ubatch's arrays). */
typedef struct ember_backend_step {
    int32_t n;                       /* entries */
    const ember_token *token;        /* [n] */
    const ember_pos *pos;            /* [n] */
    const int64_t *kv_row;           /* [n] full-group KV rows */
    const ember_attn_query *query;   /* [n] full-group block tables; query[i].pos may differ from pos[i]
                                      * (a non-causal block: every row attends up to the block's end) */
    const int64_t *kv_row_swa;       /* [n] sliding-group rows (== kv_row when the cache has no such group) */
    const ember_attn_query *query_swa;   /* [n] (== query likewise) */
    int32_t n_out;                   /* rows that want logits */
    const int32_t *out_idx;          /* [n_out] */
    float *logits;                   /* host [n_out, n_vocab]: where the pass writes its logits */
    bool logits_defer;               /* the logits may stay on the device until logits_sync / logits_top
                                      * (the context sets it on the last micro-batch of a decode) */
    int32_t block_tokens;            /* KV cells per block */
    /* NULL, or [n]: >= 0: entry i's token is id[0] of row token_top[i] of the
     * last logits_top_start (caps.token_feedback; token[i] is a placeholder
     * the forward pass must not read on the host); -1: token[i] */
    const int32_t *token_top;
    /* NULL, or [n]: each entry's sequence id (ember_ubatch.seq): where a
     * recurrent op's state cells may be found on the device (state_alloc) */
    const ember_seq_id *seq_id;
    /* Which forward this is, for a caller running different forwards of
     * one shape through one backend (a DFlash draft's injection and its
     * block): part of the key a graphed step is captured under, so they
     * never stand for each other. 0 for a model's decode. */
    int32_t graph_tag;
} ember_backend_step;

/* What a backend can do, filled by its constructor; callers read these
 * instead of asking which backend they hold. */
typedef struct ember_backend_caps {
    /* act_alloc returns device memory the host must not dereference: an
     * architecture that reads scratch on the host (ember_arch.device_scratch
     * false, ember_model.host_scratch) must keep its scratch in host memory,
     * and hidden states cannot be copied out of it on the host. */
    bool device_activations;
    /* step_begin/step_end may capture and replay whole steps (CUDA graphs
     * keyed on the batch shape). */
    bool graphed_steps;
    /* Partial forward passes (ember_set_layer_limit): false where a replayed
     * step could stand for one with another layer count. */
    bool layer_skip;
    /* Weights and KV memory are placed on first use (uploaded to a device),
     * so one decode places them (ember_context_warmup). */
    bool lazy_placement;
    /* KV cache element types kv_store and attention accept: bit (1u << t)
     * for each ember_type t (F32, F16, Q8_0). */
    uint32_t kv_types;
    /* A step's tokens may be the argmax of a head that logits_top_start
     * queued and nobody has read yet (ember_backend_step.token_top): the
     * device copies them into the step, so the step is queued before the
     * host knows them. */
    bool token_feedback;
} ember_backend_caps;

struct ember_backend {
    const ember_backend_ops *ops;
    ember_backend_caps caps;
    void *impl;
};

/* Sizes a backend must plan scratch for. */
typedef struct ember_backend_limits {
    int64_t max_tokens;     /* rows of one matmul / one attention call (n_ubatch) */
    int64_t max_n_in;       /* widest matmul input */
    int64_t max_kv_tokens;  /* most keys one query attends to (n_ctx) */
    int32_t max_head_dim;
} ember_backend_limits;

/* The backend for `opt` (options.h): the CUDA backend on opt->device when
 * this build has it, opt->n_gpu_layers != 0 and a device exists; else the
 * CPU backend with opt->n_threads. opt NULL = ember_backend_options_default()
 * (no environment). lim: the sizes to plan scratch for (all positive).
 * Errors: those of the chosen backend's constructor (EMBER_ERR_NOMEM,
 * EMBER_ERR_INVALID_ARG, EMBER_ERR_INTERNAL). registry.c. */
ember_status ember_backend_new(const ember_backend_options *opt, const ember_backend_limits *lim,
                               ember_backend **out);
/* Usable GPU devices in this build (0 without CUDA or without a device).
 * Never fails, never sets an error. */
int32_t ember_backend_gpu_count(void);

/* CPU backend with opt->n_threads (<= 0: all cores) and opt's cpu_* switches
 * (NULL: defaults). The kernel choices of the first CPU backend created
 * (prefetch distance, vector expf) hold for the process. Errors:
 * EMBER_ERR_NOMEM, EMBER_ERR_INVALID_ARG, EMBER_ERR_INTERNAL (thread start). */
ember_status ember_backend_cpu_new(const ember_backend_options *opt, const ember_backend_limits *lim,
                                   ember_backend **out);
int32_t ember_backend_cpu_n_threads(const ember_backend *be);

static inline void ember_backend_free(ember_backend *be) { if (be) be->ops->free(be); }

#endif
