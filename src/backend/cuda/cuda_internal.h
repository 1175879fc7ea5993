/*
 * cuda_internal.h — what the files of the CUDA backend share (private to
 * src/backend/cuda/; nothing outside it includes this).
 *
 * Owns: the backend's state (cuda_backend) and the declarations of the
 * helpers each file gives the others, all prefixed cb_:
 *   backend_cuda.c  the op entry points (the op table), creation and free
 *   cuda_mem.c      device copies by host address, arena chunks, staging,
 *                   activations vs host memory
 *   cuda_fuse.c     the fusion state held back between ops (pn/ps/pg/ph/pa)
 *                   and its flush
 *   cuda_graph.c    step_begin/step_end: the step arrays, capture and replay
 *                   of decode steps keyed by step equality (step.h)
 *   cuda_rstate.c   recurrent state memory (state_alloc / _free / _copy)
 *                   and the recurrent ops' entry points
 *   cuda_verify.c   the verify decorator (EMBER_CUDA_VERIFY=1)
 *   cuda_report.c   the memory report (print_memory)
 * Must not: be included by code outside src/backend/cuda/, or by .cu files
 * (they see only cuda_backend.h's C ABI).
 */
#ifndef EMBER_CUDA_INTERNAL_H
#define EMBER_CUDA_INTERNAL_H

#include "backend/cuda/backend_cuda.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/step.h"
#include "base/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <string.h>

/* what a device copy holds, for the memory report */
enum { CAT_WEIGHT = 0, CAT_VEC, CAT_KV, CAT_N };

typedef struct dev_copy {
    const void *host;        /* key */
    size_t bytes;
    ember_cuda_tensor t;     /* matrices: type/shape; vectors and KV: data only */
    uint8_t cat;             /* CAT_* */
    bool arena;              /* lives in an arena chunk (freed with the chunk) */
} dev_copy;

/* Weights, norm vectors and the KV cache never move or go until the backend
 * is freed, so they are carved out of a few large device chunks (bump
 * allocation, first fit over the chunks, 256-byte aligned) rather than one
 * cudaMalloc each: the driver backs every large cudaMalloc with whole 2 MiB
 * pages, which cost the E4B-shaped model's 231 weight matrices of >= 1 MiB
 * and 40 sliding-window KV buffers of 1.09 MiB ~380 MiB of rounding. 64 MiB
 * chunks, first fit, in E4B's upload order (bench/results/gemma4-e4b.md):
 * 53 MiB left unused in the chunks (32 MiB: 117, 128 MiB: 117). */
enum { ARENA_CHUNK = 64 << 20, ARENA_ALIGN = 256, MAX_CHUNKS = 1024 };
typedef struct arena_chunk {
    char *base;
    size_t size, used;
} arena_chunk;

/* Staging slots: 0-1 inputs from host memory, 2-4 rounded activations (one
 * per activation format of a matmul: Q8_0, Q8_1, Q8_K; slot 2 preallocated
 * for the limits, the others grown when used), 5-13 outputs to host
 * memory (inside a step each host output of the step gets its own, from the
 * one asked for up: a captured step downloads them all after the graph).
 * MAX_PEND, the host outputs a captured step may defer, is the number of
 * output slots: 9 cover a speculative verification step with captured
 * hidden states (ember_layer_end's rows of up to EMBER_MAX_HIDDEN_LAYERS = 8
 * layers, a DFlash target has 5, + the logits); a step with more runs op by
 * op. */
enum { STAGE_SLOTS = 14, SLOT_ROUND = 2, SLOT_OUT = 5 };
enum { MAX_ACT = 8, MAX_PEND = STAGE_SLOTS - SLOT_OUT, MAX_GRAPHS = 64, GRAPH_MAX_N = 32, ATTN_TC_MIN_RUN = 64 };

typedef enum step_mode { M_EAGER = 0, M_CAPTURE, M_REPLAY } step_mode;

/* One captured decode step, keyed by the micro-batch's shape. */
typedef struct graph_entry {
    uint64_t key;
    int32_t seen;            /* eager runs of this key so far */
    bool disabled;           /* capture or replay failed: stay eager */
    ember_cuda_graph *g;
    ember_step step;         /* the step captured, node by node (replayed only when a step equals it) */
    uint64_t gen;            /* memory generation at capture */
    int32_t n_pend;
    const void *pend_dev[MAX_PEND];
    size_t pend_bytes[MAX_PEND];
    bool pend_is_logits;     /* its one host output is always the step's logits */
    int32_t verified;        /* replays whose recorded step equalled the captured one */
    bool host_in;            /* the step uploads host data (cu_upload): never replayed without its forward pass */
} graph_entry;

/* A decode attention held back for the next matmul (cuda_backend.pt): its
 * parameters and device operands, as ember_cuda_attn takes them. */
typedef struct cb_held_attn {
    bool on;
    ember_cuda_attn_params ap;
    int32_t n;
    const float *out;   /* the op's output (host address of the activation) */
    const float *dq;
    const int32_t *dpos, *dseq, *dtab;
    const uint16_t *dk, *dv;
    float *dout;
} cb_held_attn;

/* A block of recurrent state memory (state_alloc): n_cells cells of
 * cell_bytes, device memory. */
typedef struct cb_rs_block {
    char *dev;
    int64_t n_cells;
    size_t cell_bytes;
} cb_rs_block;

typedef struct cuda_backend {
    ember_backend base;
    ember_cuda *cu;
    ember_backend_limits lim;
    arena_chunk chunks[MAX_CHUNKS];
    int32_t n_chunks;
    uint64_t cat_bytes[CAT_N]; /* bytes of the copies per CAT_* */
    int64_t cat_count[CAT_N];
    dev_copy *copies;
    size_t n_copies, cap_copies;
    int32_t *index;          /* open-addressing table of copies by host address */
    size_t index_cap;
    void *stage[STAGE_SLOTS];
    size_t stage_bytes[STAGE_SLOTS];
    int32_t *host_i32;       /* host staging for index arrays */
    size_t host_i32_n;
    float *host_rows;        /* dequant_host_rows' host expansion where rows cannot travel as blocks */
    size_t host_rows_n;
    ember_backend *cpu;      /* EMBER_CUDA_VERIFY=1: every op also runs here */
    bool f32_act;            /* EMBER_CUDA_F32_ACT=1: matmul on unrounded activations */
    bool q8_on;              /* integer mat-vec on Q8 activations (EMBER_CUDA_Q8=0: off) */
    bool rope_tab_on;        /* RoPE angles from host tables (EMBER_CUDA_ROPE_TABLE=0: off) */
    struct rope_table {
        float base, scale;
        int32_t n_rot;
        const float *ff;
        float *dev;
        int32_t n_pos, n_tab;   /* positions, leading pairs held (ember_cuda_rope_tab_pairs) */
        size_t bytes;
    } rtab[8];
    int32_t n_rtab;
    double worst[16];        /* verify: worst max|diff| / max|ref| per op */
    long calls[16];
    /* activation memory handed out by act_alloc */
    void *act[MAX_ACT];
    size_t act_bytes[MAX_ACT];
    void *pinned[MAX_ACT];   /* host_alloc */
    size_t pinned_bytes[MAX_ACT];
    /* the current step (step_begin .. step_end) */
    bool in_step;
    step_mode mode;
    bool failed;             /* capture/replay cannot go on: the step runs again eagerly */
    ember_step rec;          /* the step as its ops come (recorded in captures and replays only) */
    bool whole;              /* the step replays without its forward pass (nothing recorded) */
    graph_entry *cur;
    const ember_token *s_tok;
    const ember_pos *s_pos;
    const int64_t *s_kv_row;
    const ember_attn_query *s_query;
    const int64_t *s_kv_row_swa;     /* NULL: the cache has no sliding group */
    const ember_attn_query *s_query_swa;
    const ember_seq_id *s_seq;       /* the step's sequence ids (host), or NULL */
    float *s_logits;
    int32_t s_n, s_max_pages, s_max_ctx;
    size_t s_tab, s_tab_swa;         /* offsets of the block tables in d_step */
    size_t s_qpos;                   /* offset of the attention's query positions in d_step (the tokens' unless they differ) */
    /* device [tok n][pos n][cells n][seq n][sid n][cells_swa n][table n_seq x max_pages][table_swa n_seq x max_pages][qpos n];
     * seq: the run index of each entry (block tables), sid: its sequence id (-1 without
     * ember_backend_step.seq_id); the _swa pieces only when the cache has a sliding-window group, qpos only
     * when some query position differs from its token's (cb_step_qpos) */
    int32_t *d_step;
    size_t d_step_n;
    uint32_t out_slots;      /* output staging slots holding a host output of this step (bit per slot) */
    int32_t n_pend;
    float *pend_host[MAX_PEND];
    const void *pend_dev[MAX_PEND];
    size_t pend_bytes[MAX_PEND];
    /* graphs */
    bool graphs_on;          /* EMBER_CUDA_GRAPHS=0 turns them off */
    bool graph_log;          /* EMBER_CUDA_GRAPH_LOG=1: why a graph was dropped, on stderr */
    uint64_t gen;            /* bumped when staging or step buffers move */
    graph_entry graphs[MAX_GRAPHS];
    int32_t n_graphs;
    /* fusion inside a step (EMBER_CUDA_FUSE=0 turns it off): an RMSNorm on
     * device memory waits to see whether the next op adds its output to the
     * residual (one kernel), and a power-of-two scale of q waits to be
     * folded into the attention scale (exact: it commutes with f16
     * rounding of q) */
    bool fuse_on;
    bool fuse_head;          /* the head preparation below (EMBER_CUDA_FUSE_HEAD=0: off) */
    bool fuse_add;           /* pa below (EMBER_CUDA_FUSE_ADD=0: off) */
    bool fuse_attn;          /* pt below (EMBER_CUDA_FUSE_ATTN=0: off) */
    bool exact_attn;         /* EMBER_CUDA_EXACT=1: attention in the CPU's order and rounding (both of its paths) */
    bool attn_tc;            /* prompt runs of >= ATTN_TC_MIN_RUN queries on the tensor cores (EMBER_CUDA_ATTN_TC=0: off) */
    bool gdr_chunk;          /* a run of >= EMBER_CUDA_GDR_RUN_MIN entries of one sequence in an eager step: the gated
                              * delta rule's chunked form (EMBER_CUDA_GDR_CHUNK=0: off) */
    bool prefill_f16;        /* prompt GEMM inputs in f16 from their producer (EMBER_CUDA_PREFILL_F16, with GEMM_F16, not EXACT) */
    struct { bool on; const float *x, *w; float *y; int64_t n, n_rows; float eps; } pn;
    struct { bool on; float *x; float s; int64_t n; } ps;
    struct { bool on; ember_cuda_act act; float *gate; const float *up; int64_t n; } pg;
    /* a layer's head preparation (per-head norms, RoPE, the K/V store),
     * recorded as the ops come and launched as one ember_cuda_head_prep
     * (cuda_head.cu) by the next op that is not one of them. Ops join it
     * only while no scale or GLU waits (a kv_store also while a scale waits
     * on another tensor: they commute), so everything it holds comes before
     * whatever else waits, and cb_flush() launches it first. */
    struct { int32_t n_parts, head_dim; bool store; const int32_t *cells; ember_cuda_head_part part[3]; } ph;
    /* A residual add, held back so that the next block's pre-norm and the
     * quantized input of its matmul come from the same kernel
     * (ember_cuda_add_norm_quant_q8): Gemma's post-norm + add (res +=
     * rms_norm(x) * w, y the norm's output, rows of n), or with plain the
     * pre-norm models' res += x (n elements as one row until a norm of the
     * same total joins). Launched by any other op. It always comes before a
     * waiting norm; no head op joins while it waits. */
    struct cb_pending_add { bool on, plain; const float *x, *w; float *y, *res; int64_t n, n_rows; float eps; } pa;
    /* a decode attention on activation memory, held back so that the next
     * matmul's Q8 input comes from the attention kernel itself
     * (ember_cuda_attn with q8_buf): launched by any other op, before
     * anything else that waits (it flushed them all when it came). */
    cb_held_attn pt;
    ember_cuda_fusion_counts fused;
    /* cu_upload: host inputs of a step (gemma4's per-layer embeddings) */
    bool host_in;            /* this step called cu_upload */
    void *up_pin;            /* pinned copy the captured memcpy reads; refilled each time the step runs */
    size_t up_pin_bytes, up_off;
    /* logits left on the device by a step with logits_defer (op_logits_top
     * reduces them there; op_logits_sync downloads them): the host block
     * [lg_host, + lg_bytes) stands for the device block lg_dev until then.
     * lg_dev is a staging slot, valid until the next step. */
    bool defer_logits;       /* this step may leave its logits */
    bool lg_pending;
    float *lg_host;
    const float *lg_dev;
    size_t lg_bytes;
    void *top_work, *top_res_dev, *top_res_host;   /* ember_cuda_logits_top buffers */
    size_t top_work_bytes, top_res_bytes, top_res_host_bytes;
    int64_t *top_off;
    int32_t top_off_n;
    int32_t top_n, top_k;   /* rows and k of the last logits_top_start (0: none pending) */
    /* recurrent state memory (cuda_rstate.c) */
    cb_rs_block *rs;
    int32_t n_rs, cap_rs;
    int32_t rs_hit;          /* the block the last lookup found (the live cells, usually) */
    uint64_t rs_bytes;
} cuda_backend;
/* ---- backend_cuda.c --------------------------------------------------------- */

/* The op tables: cb_cuda_ops runs the kernels (backend_cuda.c),
 * cb_cuda_ops_verify checks each op against the CPU (cuda_verify.c). */
extern const ember_backend_ops cb_cuda_ops;
extern const ember_backend_ops cb_cuda_ops_verify;

/* Ops have no error return: a failure is a broken invariant or a device
 * fault, so it stops the process with op and ember_last_error() (never
 * input data). */
_Noreturn void cb_die(const char *op);

#define CK(op, x) \
    do { if ((x) != EMBER_OK) cb_die(op); } while (0)

/* ---- cuda_graph.c ----------------------------------------------------------- */

/* The recorded step (b->rec, step.h): what a replay must repeat. Each op
 * entry point starts its node with cb_rec_op (op kind, CB_FUSED_* for the
 * fusion it took) and gives its operands in a fixed order: pointers
 * (cb_rec_ptr; cb_in_f / cb_out_f give EMBER_STEP_HOST_IN / _OUT for host
 * memory), shapes and parameters (cb_rec_i64, cb_rec_f32). Recorded only
 * while a step is captured or replayed (eager steps compare nothing). */
enum { CB_FUSED_NORM = 1u, CB_FUSED_GLU = 2u, CB_FUSED_ADD = 4u, CB_FUSED_ATTN = 8u, CB_FUSED_F16 = 16u };

static inline void cb_rec_op(cuda_backend *b, ember_step_op op, uint32_t flags)
{
    if (b->mode != M_EAGER) ember_step_node_add(&b->rec, op, flags);
}
static inline void cb_rec_ptr(cuda_backend *b, const void *p)
{
    if (b->mode != M_EAGER) ember_step_ptr(&b->rec, p);
}
static inline void cb_rec_i64(cuda_backend *b, int64_t v)
{
    if (b->mode != M_EAGER) ember_step_i64(&b->rec, v);
}
static inline void cb_rec_f32(cuda_backend *b, float f)
{
    if (b->mode != M_EAGER) ember_step_f32(&b->rec, f);
}

/* True when the ops must not touch the device (a replay, or a capture that
 * cannot go on). */
static inline bool cb_skip(const cuda_backend *b) { return b->mode == M_REPLAY || b->failed; }

/* The op table's step_begin / step_end (backend.h contract). */
bool cb_step_begin(ember_backend *be, const ember_backend_step *st);
bool cb_step_end(ember_backend *be);

/* Step arrays uploaded by step_begin (device int32 [s_n] each): tokens,
 * positions, full-group KV cells, run index per entry (its block-table
 * row), sequence id per entry (ember_backend_step.seq_id, -1 without),
 * sliding-group cells (only when the cache has that group). */
static inline const int32_t *cb_step_tok(cuda_backend *b) { return b->d_step; }
static inline const int32_t *cb_step_pos(cuda_backend *b) { return b->d_step + b->s_n; }
static inline const int32_t *cb_step_cells(cuda_backend *b) { return b->d_step + 2 * (size_t)b->s_n; }
static inline const int32_t *cb_step_seq(cuda_backend *b) { return b->d_step + 3 * (size_t)b->s_n; }
static inline const int32_t *cb_step_sid(cuda_backend *b) { return b->d_step + 4 * (size_t)b->s_n; }
static inline const int32_t *cb_step_cells_swa(cuda_backend *b) { return b->d_step + 5 * (size_t)b->s_n; }
/* The attention's query positions (ember_attn_query.pos, int32 [s_n]): the
 * tokens' positions, or an array of their own after the block tables when
 * some differ (a non-causal block, every row at the block's last position). */
static inline const int32_t *cb_step_qpos(cuda_backend *b) { return b->d_step + b->s_qpos; }

/* ---- cuda_fuse.c ------------------------------------------------------------ */

/* Launch what fusion held back: cb_flush everything in its order (attention,
 * head preparation, post-norm add, norm, scale, GLU); the others one piece
 * each, every one after a waiting attention (the oldest when it waits), and
 * cb_flush_norm after a waiting post-norm add. */
void cb_flush(cuda_backend *b);
void cb_flush_attn(cuda_backend *b);
void cb_flush_pa(cuda_backend *b);
void cb_flush_norm(cuda_backend *b);
void cb_flush_scale(cuda_backend *b);
void cb_flush_glu(cuda_backend *b);
void cb_flush_head(cuda_backend *b);

/* Head preparation (cuda_backend.ph): cb_ph_on says whether ops may join it
 * in this step; cb_ph_find the part for tensor x (or NULL); cb_ph_add a new
 * part for x ([s_n, n_head, head_dim]), NULL when none fits; cb_ph_take_norm
 * moves a waiting per-head RMSNorm into it, true when nothing waits any
 * more and no scale, GLU or add waits. */
bool cb_ph_on(const cuda_backend *b);
ember_cuda_head_part *cb_ph_find(cuda_backend *b, const float *x);
ember_cuda_head_part *cb_ph_add(cuda_backend *b, float *x, int64_t n_head, int64_t head_dim);
bool cb_ph_take_norm(cuda_backend *b);

/* Named fusion patterns (pure tests of the waiting state; the caller
 * takes what they name). When an op waits for the next one instead of
 * launching: an RMSNorm y = norm(x) on activation memory (cb_norm_waits),
 * a GLU on gate/up [n], n a multiple of 256 (cb_glu_waits), a power-of-two
 * scale of x (cb_scale_waits: exact to fold into the attention's scale),
 * a decode attention (<= GRAPH_MAX_N queries) from and to activation
 * memory (cb_attn_waits), a residual add y += x on activation memory
 * (cb_add_waits: pre-norm models' add, taken by the next block's norm and
 * matmul as Gemma's post-norm add is).
 * What the next op takes:
 *   cb_pat_head_norm   a per-head norm in place (n_rows a multiple of the
 *                      step's tokens): the waiting norm may join the head
 *                      preparation
 *   cb_pat_add_norm    add -> norm: the pre-norm y = norm(x) of the residual
 *                      x a waiting add writes ([n_rows, n]; a plain add's
 *                      n_rows * n elements) waits with it
 *   cb_pat_norm_add    norm -> add: y[n] += the waiting norm's output x, one
 *                      kernel
 *   cb_pat_norm_quant  norm -> matmul(+quantize): the waiting norm wrote the
 *                      matmul input x [n_tokens, n_in], quantized to fmt in
 *                      its kernel
 *   cb_pat_glu_quant   glu -> matmul(+quantize): the waiting GLU wrote x [n]
 *                      (Q8_K only)
 *   cb_pat_add_quant   add -> (norm ->) matmul(+quantize): a waiting add
 *                      (post-norm or plain), with the norm (with_norm) or
 *                      alone when x is its residual
 *   cb_pat_norm_round  norm -> matmul, F32 kernels: the norm's kernel rounds
 *                      x [n] to Q8_0 when every weight of ws wants 32-blocks
 *   cb_pat_glu_round   glu -> matmul, F32 kernels: likewise to Q8_K
 *   cb_pat_scale_attn  pow2 scale -> attention: the waiting scale of q [n]
 *                      folds into the attention's scale
 *   cb_pat_attn_quant  attention -> matmul(+quantize): the waiting attention
 *                      wrote x [n_tokens, n_in], quantized to fmt in its
 *                      kernel (only when nothing else waits) */
bool cb_norm_waits(const cuda_backend *b, const float *y, const float *x);
bool cb_glu_waits(const cuda_backend *b, const float *gate, const float *up, int64_t n);
bool cb_scale_waits(const cuda_backend *b, const float *x, float s);
bool cb_attn_waits(const cuda_backend *b, const float *q, const float *out, int32_t n);
bool cb_add_waits(const cuda_backend *b, const float *y, const float *x);
bool cb_pat_head_norm(const cuda_backend *b, const float *y, const float *x, int64_t n_rows);
bool cb_pat_add_norm(const cuda_backend *b, const float *y, const float *x, int64_t n_rows, int64_t n);
bool cb_pat_norm_add(const cuda_backend *b, const float *y, const float *x, int64_t n);
bool cb_pat_norm_quant(const cuda_backend *b, const float *x, int64_t n_in, int64_t n_tokens, uint32_t fmt);
bool cb_pat_glu_quant(const cuda_backend *b, const float *x, int64_t n, uint32_t fmt);
bool cb_pat_add_quant(const cuda_backend *b, const float *x, int64_t n_in, int64_t n_tokens, uint32_t fmt,
                      bool with_norm);
bool cb_pat_norm_round(const cuda_backend *b, const float *x, int64_t n, int32_t n_w, const ember_weight *const *ws);
bool cb_pat_glu_round(const cuda_backend *b, const float *x, int64_t n, int32_t n_w, const ember_weight *const *ws);
bool cb_pat_norm_f16(const cuda_backend *b, const float *x, int64_t n_in, int64_t n_tokens);
bool cb_pat_glu_f16(const cuda_backend *b, const float *x, int64_t n);
bool cb_pat_scale_attn(const cuda_backend *b, const float *q, int64_t n);
bool cb_pat_attn_quant(const cuda_backend *b, const float *x, int64_t n_in, int64_t n_tokens, uint32_t fmt);

/* ---- cuda_mem.c ------------------------------------------------------------- */

/* Staging slot `slot` (< STAGE_SLOTS) of at least `bytes`; grown only
 * eagerly (inside a capture or replay a slot too small marks the step
 * failed and returns the old buffer). */
void *cb_stage(cuda_backend *b, int slot, size_t bytes);
/* Host int32 scratch of n entries (index arrays to upload); stops the
 * process when out of memory. */
int32_t *cb_host_i32(cuda_backend *b, size_t n);

/* Device copies by host address: cb_find_copy the copy of host (or NULL);
 * cb_weight the device tensor of matrix w, cb_vec of an F32 vector of n
 * elements, cb_kv_dev the F16 KV memory standing for host KV memory h of
 * `bytes` (zeroed). Each uploads on first use, eagerly; inside a capture or
 * replay a missing copy marks the step failed and returns NULL. */
dev_copy *cb_find_copy(cuda_backend *b, const void *host);
const ember_cuda_tensor *cb_weight(cuda_backend *b, const ember_weight *w);
const float *cb_vec(cuda_backend *b, const float *h, int64_t n);
void *cb_kv_dev(cuda_backend *b, void *h, size_t bytes);

/* True when p lies in activation memory handed out by act_alloc. */
bool cb_is_act(const cuda_backend *b, const void *p);
/* Device pointer for an op's input of n floats at p (cb_in_f), its output
 * (cb_out_f; cb_out_done copies it to host memory afterwards when p is
 * there), or an in-place operand (cb_io_f); host memory goes through
 * staging slot `slot`. Each records where the data lives as an operand of
 * the op's node (cb_rec_ptr). */
const float *cb_in_f(cuda_backend *b, int slot, const float *p, size_t n);
float *cb_out_f(cuda_backend *b, int slot, float *p, size_t n);
float *cb_io_f(cuda_backend *b, int slot, float *p, size_t n);
void cb_out_done(cuda_backend *b, float *p, const float *d, size_t n);
/* True when the host output p (the step's logits) stays on the device as d
 * of `bytes` (logits_defer), recorded for logits_top / logits_sync. */
bool cb_defer_output(cuda_backend *b, float *p, const void *d, size_t bytes);
/* n int32 from host h uploaded into staging slot `slot` (eager only:
 * otherwise the step is marked failed and NULL returned). */
const int32_t *cb_up_i32(cuda_backend *b, int slot, const int32_t *h, size_t n);
/* Grow a device (host: pinned host) buffer *p of *have bytes to at least
 * want (+50%), outside any step. Errors: those of ember_cuda_malloc /
 * ember_cuda_host_alloc / ember_cuda_synchronize. */
ember_status cb_grow_dev(cuda_backend *b, void **p, size_t *have, size_t want, bool host);

/* ---- cuda_rstate.c ---------------------------------------------------------- */

/* The op table's state memory (backend.h state_alloc / state_free /
 * state_copy) and recurrent ops (conv1d_silu, gated_delta_rule,
 * sigmoid_mul, copy_strided). */
void *cb_state_alloc(ember_backend *be, int64_t n_cells, size_t cell_bytes);
void cb_state_free(ember_backend *be, void *p);
void cb_state_copy(ember_backend *be, void *dst, const void *src, size_t bytes);
void cb_conv1d_silu(ember_backend *be, float *y, const float *x, const float *w, int64_t n_ch, int32_t d_conv,
                    float *const *state, int32_t n);
void cb_gated_delta_rule(ember_backend *be, const ember_gdr_params *p, const float *qkv, int64_t ld, const float *alpha,
                         const float *b, float *const *state, int32_t n, float *out);
void cb_sigmoid_mul(ember_backend *be, float *x, const float *g, int64_t n);
void cb_copy_strided(ember_backend *be, float *dst, int64_t ld_dst, const float *src, int64_t ld_src, int64_t n_rows,
                     int64_t n_cols);
/* Release every state block left (the backend is being freed). */
void cb_rs_free_all(cuda_backend *b);

/* ---- cuda_report.c ---------------------------------------------------------- */

/* The op table's print_memory: what the backend holds, by category. */
void cb_print_memory(const ember_backend *be, FILE *f);

/* ---- cuda_verify.c ---------------------------------------------------------- */

/* Print the verify mode's worst relative difference per op (b->cpu set). */
void cb_verify_report(const cuda_backend *b);

#endif
