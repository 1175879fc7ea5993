/*
 * backend_cuda.c — the op table (backend/backend.h) filled with CUDA kernels.
 *
 * Owns: the device copies of weights and norm vectors (uploaded on first
 * use, found again by host address through a hash table), the device KV
 * cache (one F16 copy per layer view, found by the view's host address),
 * activation memory handed to the context (act_alloc: the model's scratch
 * lives on the device), the step arrays (tokens, positions, KV cells, block
 * tables; cells and tables twice when the cache has a sliding-window group)
 * uploaded once per micro-batch by step_begin, and one CUDA graph
 * per decode shape (batch size, logits rows, sequence pattern): the first
 * step of a shape runs op by op, the second is captured, later ones replay
 * it (the ops then only check that the same sequence of calls happens; a
 * mismatch makes the caller run the pass again op by op).
 * Ops also accept host pointers (architectures that read scratch on the
 * host, verify mode): those are staged through device buffers around the
 * op, and outputs to host memory (logits) are copied back once per step.
 * Must not: synchronise with the host inside a step except to return host
 * outputs, or allocate during a capture.
 *
 * Numerics differ from the CPU backend in summation order, and where the
 * kernels document it. Decode-sized matmuls (and, with EMBER_CUDA_EXACT=1,
 * all) whose weights have an integer kernel (Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/
 * Q4_K/Q6_K) quantize the activations to Q8 as the CPU does and repeat its
 * integer dots and float steps (cuda_q8.cu): bit-identical outputs.
 * EMBER_CUDA_Q8=0 (and other types) use the older kernels: activations
 * rounded to each weight's vec_dot_type (ember_cuda_round_act), F32 sums
 * in another order; EMBER_CUDA_F32_ACT=1 keeps them F32.
 * EMBER_CUDA_GRAPHS=0 turns graphs off.
 */
#include "backend/cuda/backend_cuda.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/logits_top.h"
#include "base/status.h"
#include "quant/quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
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
 * per weight of a matmul; preallocated for the limits), 5-7 outputs to host
 * memory (one per weight). */
enum { STAGE_SLOTS = 8, SLOT_ROUND = 2, SLOT_OUT = 5 };
enum { MAX_ACT = 8, MAX_PEND = 4, MAX_GRAPHS = 64, GRAPH_MAX_N = 32, ATTN_TC_MIN_RUN = 64 };

typedef enum step_mode { M_EAGER = 0, M_CAPTURE, M_REPLAY } step_mode;

/* One captured decode step, keyed by the micro-batch's shape. */
typedef struct graph_entry {
    uint64_t key;
    int32_t seen;            /* eager runs of this key so far */
    bool disabled;           /* capture or replay failed: stay eager */
    ember_cuda_graph *g;
    uint64_t sig;            /* hash of the op sequence captured */
    uint64_t gen;            /* memory generation at capture */
    int32_t n_pend;
    const void *pend_dev[MAX_PEND];
    size_t pend_bytes[MAX_PEND];
    bool pend_is_logits;     /* its one host output is always the step's logits */
    int32_t verified;        /* replays whose op sequence matched the capture */
    bool host_in;            /* the step uploads host data (cu_upload): never replayed without its forward pass */
} graph_entry;

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
    uint64_t sig;
    graph_entry *cur;
    const ember_token *s_tok;
    const ember_pos *s_pos;
    const int64_t *s_kv_row;
    const ember_attn_query *s_query;
    const int64_t *s_kv_row_swa;     /* NULL: the cache has no sliding group */
    const ember_attn_query *s_query_swa;
    float *s_logits;
    int32_t s_n, s_max_pages, s_max_ctx;
    size_t s_tab, s_tab_swa;         /* offsets of the block tables in d_step */
    /* device [tok n][pos n][cells n][seq n][cells_swa n][table n_seq x max_pages][table_swa n_seq x max_pages];
     * the _swa pieces only when the cache has a sliding-window group */
    int32_t *d_step;
    size_t d_step_n;
    int32_t n_pend;
    float *pend_host[MAX_PEND];
    const void *pend_dev[MAX_PEND];
    size_t pend_bytes[MAX_PEND];
    /* graphs */
    bool graphs_on;          /* EMBER_CUDA_GRAPHS=0 turns them off */
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
    bool exact_attn;         /* EMBER_CUDA_EXACT=1: attention in the CPU's order and rounding (both of its paths) */
    bool attn_tc;            /* prompt runs of >= ATTN_TC_MIN_RUN queries on the tensor cores (EMBER_CUDA_ATTN_TC=0: off) */
    struct { bool on; const float *x, *w; float *y; int64_t n, n_rows; float eps; } pn;
    struct { bool on; float *x; float s; int64_t n; } ps;
    struct { bool on; ember_cuda_act act; float *gate; const float *up; int64_t n; } pg;
    /* a layer's head preparation (per-head norms, RoPE, the K/V store),
     * recorded as the ops come and launched as one ember_cuda_head_prep
     * (cuda_head.cu) by the next op that is not one of them. Ops join it
     * only while no scale or GLU waits (a kv_store also while a scale waits
     * on another tensor: they commute), so everything it holds comes before
     * whatever else waits, and flush() launches it first. */
    struct { int32_t n_parts, head_dim; bool store; const int32_t *cells; ember_cuda_head_part part[3]; } ph;
    /* Gemma's post-norm + residual add, held back so that the next block's
     * pre-norm and the quantized input of its matmul come from the same
     * kernel (ember_cuda_add_norm_quant_q8): launched by any other op. It
     * always comes before a waiting norm; no head op joins while it waits. */
    struct { bool on; const float *x, *w; float *y, *res; int64_t n, n_rows; float eps; } pa;
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
} cuda_backend;

/* ---- verify mode --------------------------------------------------------- *
 * With EMBER_CUDA_VERIFY=1 each op runs on the CPU backend too, on copies of
 * its inputs; the largest difference relative to the CPU's largest output is
 * recorded per op (printed when the backend is freed, and at once when it
 * exceeds 1e-2), and the CPU's result is kept so errors do not compound.
 * A debugging aid for the kernels inside the real forward pass; it keeps
 * activations in host memory and runs no graphs. */
enum { V_GET_ROWS, V_RMS_NORM, V_MATMUL, V_ROPE, V_GEGLU, V_SWIGLU, V_ADD, V_SCALE, V_ATTN, V_N };
static const char *const v_names[V_N] = {"get_rows", "rms_norm", "matmul", "rope", "geglu", "swiglu", "add",
                                         "scale", "attention"};

static float *clone(const float *x, size_t n)
{
    float *c = malloc(n * sizeof(float) + 1);
    if (!c) abort();
    memcpy(c, x, n * sizeof(float));
    return c;
}

/* Ops have no error return: a failure here is a broken invariant or a device
 * fault, so it stops the process with the message (never input data). */
static void die(const char *op)
{
    fprintf(stderr, "ember: CUDA backend: %s: %s\n", op, ember_last_error());
    abort();
}

#define CK(op, x) \
    do { if ((x) != EMBER_OK) die(op); } while (0)

/* ---- step signature: what a replay must repeat ---------------------------- */

static void mix(cuda_backend *b, uint64_t v)
{
    b->sig ^= v + 0x9e3779b97f4a7c15ull + (b->sig << 6) + (b->sig >> 2);
}

static void mixp(cuda_backend *b, const void *p) { mix(b, (uint64_t)(uintptr_t)p); }

static void mixf(cuda_backend *b, float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    mix(b, u);
}

/* True when the ops must not touch the device (a replay, or a capture that
 * cannot go on). */
static bool skip(const cuda_backend *b) { return b->mode == M_REPLAY || b->failed; }

/* Launch what fusion held back (see cuda_backend.fuse_on). */
static void flush_pa(cuda_backend *b)
{
    if (!b->pa.on) return;
    b->pa.on = false;
    if (skip(b)) return;
    CK("rms_norm_add", ember_cuda_rms_norm_add_out(b->cu, b->pa.x, b->pa.w, b->pa.y, b->pa.res, b->pa.n,
                                                   b->pa.n_rows, b->pa.eps));
}

static void flush_norm(cuda_backend *b)
{
    flush_pa(b);   /* it comes first: the norm may read its residual */
    if (!b->pn.on) return;
    b->pn.on = false;
    if (skip(b)) return;
    CK("rms_norm", ember_cuda_rms_norm(b->cu, b->pn.x, b->pn.w, b->pn.y, b->pn.n, b->pn.n_rows, b->pn.eps));
}

static void flush_scale(cuda_backend *b)
{
    if (!b->ps.on) return;
    b->ps.on = false;
    if (skip(b)) return;
    CK("scale", ember_cuda_scale(b->cu, b->ps.x, b->ps.s, b->ps.n));
}

static void flush_glu(cuda_backend *b)
{
    if (!b->pg.on) return;
    b->pg.on = false;
    if (skip(b)) return;
    CK("glu", ember_cuda_glu(b->cu, b->pg.act, b->pg.gate, b->pg.up, b->pg.gate, b->pg.n));
}

static const int32_t *step_pos(cuda_backend *b);

static void flush_head(cuda_backend *b)
{
    if (!b->ph.n_parts) return;
    ember_cuda_head_args a = {.n_tokens = b->s_n, .head_dim = b->ph.head_dim, .n_parts = b->ph.n_parts,
                              .pos = step_pos(b), .cells = b->ph.cells};
    memcpy(a.part, b->ph.part, sizeof a.part);
    b->ph.n_parts = 0;
    b->ph.store = false;
    b->ph.cells = NULL;
    if (skip(b)) return;
    CK("head_prep", ember_cuda_head_prep(b->cu, &a));
    b->fused.head_prep++;
}

static void flush(cuda_backend *b)
{
    flush_head(b);
    flush_pa(b);
    flush_norm(b);
    flush_scale(b);
    flush_glu(b);
}

/* ---- head preparation (cuda_backend.ph) ---------------------------------- */

static bool ph_on(const cuda_backend *b) { return b->fuse_head && !b->exact_attn && b->in_step && b->s_n > 0; }

static ember_cuda_head_part *ph_find(cuda_backend *b, const float *x)
{
    for (int32_t i = 0; i < b->ph.n_parts; i++)
        if (b->ph.part[i].x == x) return &b->ph.part[i];
    return NULL;
}

/* A new part for x ([s_n, n_head, head_dim]), or NULL when none fits. */
static ember_cuda_head_part *ph_add(cuda_backend *b, float *x, int64_t n_head, int64_t head_dim)
{
    if (b->ph.n_parts == 3 || b->ph.store || n_head <= 0 || n_head > 4096 || head_dim > 1024 || head_dim % 2 ||
        (b->ph.n_parts && b->ph.head_dim != head_dim))
        return NULL;
    ember_cuda_head_part *P = &b->ph.part[b->ph.n_parts++];
    memset(P, 0, sizeof *P);
    P->x = x;
    P->n_head = (int32_t)n_head;
    b->ph.head_dim = (int32_t)head_dim;
    return P;
}

/* The waiting RMSNorm joins the head preparation when it is a per-head norm
 * in place (rows a multiple of the step's tokens) of a tensor not there
 * yet; true when nothing waits any more (none, or it joined) and no scale
 * or GLU waits. */
static bool ph_take_norm(cuda_backend *b)
{
    if (!ph_on(b) || b->ps.on || b->pg.on || b->pa.on) return false;
    if (!b->pn.on) return true;
    if (b->pn.x != b->pn.y || b->pn.n_rows % b->s_n || ph_find(b, b->pn.y)) return false;
    ember_cuda_head_part *P = ph_add(b, b->pn.y, b->pn.n_rows / b->s_n, b->pn.n);
    if (!P) return false;
    P->norm = true;
    P->norm_w = b->pn.w;
    P->eps = b->pn.eps;
    b->pn.on = false;
    return true;
}

static bool pow2(float s)
{
    int e;
    return s > 0.f && frexpf(s, &e) == 0.5f;
}

static void *stage(cuda_backend *b, int slot, size_t bytes)
{
    if (bytes == 0) bytes = 4;
    if (bytes > b->stage_bytes[slot]) {
        if (b->mode != M_EAGER) {   /* no allocation inside a capture */
            b->failed = true;
            return b->stage[slot];
        }
        if (b->stage[slot]) {
            CK("staging", ember_cuda_synchronize(b->cu));
            ember_cuda_mfree(b->cu, b->stage[slot], b->stage_bytes[slot]);
        }
        b->stage[slot] = NULL;
        b->stage_bytes[slot] = 0;
        b->gen++;
        size_t want = bytes + bytes / 2;
        CK("staging", ember_cuda_malloc(b->cu, want, &b->stage[slot]));
        b->stage_bytes[slot] = want;
    }
    return b->stage[slot];
}

static int32_t *host_i32(cuda_backend *b, size_t n)
{
    if (n > b->host_i32_n) {
        free(b->host_i32);
        b->host_i32_n = n + n / 2 + 64;
        b->host_i32 = malloc(b->host_i32_n * sizeof(int32_t));
        if (!b->host_i32) {
            ember_error(EMBER_ERR_NOMEM, "cannot allocate %zu index entries", b->host_i32_n);
            die("index staging");
        }
    }
    return b->host_i32;
}

/* ---- device copies of host data (weights, norm vectors, KV) ------------- */

static size_t hash_ptr(const void *p, size_t cap)
{
    uint64_t h = (uint64_t)(uintptr_t)p * 0x9e3779b97f4a7c15ull;
    return (size_t)(h >> 17) & (cap - 1);
}

static void index_put(cuda_backend *b, int32_t i)
{
    size_t j = hash_ptr(b->copies[i].host, b->index_cap);
    while (b->index[j] >= 0) j = (j + 1) & (b->index_cap - 1);
    b->index[j] = i;
}

static dev_copy *find_copy(cuda_backend *b, const void *host)
{
    if (!b->index_cap) return NULL;
    for (size_t j = hash_ptr(host, b->index_cap);; j = (j + 1) & (b->index_cap - 1)) {
        const int32_t i = b->index[j];
        if (i < 0) return NULL;
        if (b->copies[i].host == host) return &b->copies[i];
    }
}

static dev_copy *new_copy(cuda_backend *b, const void *host, size_t bytes)
{
    if (b->n_copies == b->cap_copies) {
        size_t cap = b->cap_copies ? 2 * b->cap_copies : 256;
        dev_copy *c = realloc(b->copies, cap * sizeof *c);
        int32_t *ix = malloc(2 * cap * sizeof *ix);
        if (!c || !ix) {
            free(ix);
            if (c) b->copies = c;
            ember_error(EMBER_ERR_NOMEM, "cannot grow the device-copy table");
            die("weights");
        }
        b->copies = c;
        b->cap_copies = cap;
        free(b->index);
        b->index = ix;
        b->index_cap = 2 * cap;
        for (size_t j = 0; j < b->index_cap; j++) b->index[j] = -1;
        for (size_t i = 0; i < b->n_copies; i++) index_put(b, (int32_t)i);
    }
    dev_copy *c = &b->copies[b->n_copies++];
    memset(c, 0, sizeof *c);
    c->host = host;
    c->bytes = bytes;
    index_put(b, (int32_t)(b->n_copies - 1));
    return c;
}

static size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

/* `bytes` of device memory from the arena (see arena_chunk); stops the
 * process when the device is full (ops have no error return). */
static void *arena_alloc(cuda_backend *b, size_t bytes)
{
    bytes = round_up(bytes ? bytes : 1, ARENA_ALIGN);
    for (int32_t i = 0; i < b->n_chunks; i++) {
        arena_chunk *c = &b->chunks[i];
        if (c->size - c->used >= bytes) {
            void *p = c->base + c->used;
            c->used += bytes;
            return p;
        }
    }
    if (b->n_chunks == MAX_CHUNKS) {
        void *p = NULL;   /* table full: a plain allocation, never freed before exit */
        CK("device memory", ember_cuda_malloc(b->cu, bytes, &p));
        return p;
    }
    /* whole 2 MiB pages; a tensor larger than a chunk gets a chunk of its own size */
    const size_t size = round_up(bytes > ARENA_CHUNK ? bytes : ARENA_CHUNK, (size_t)2 << 20);
    arena_chunk *c = &b->chunks[b->n_chunks];
    void *p = NULL;
    CK("device memory", ember_cuda_malloc(b->cu, size, &p));
    c->base = p;
    c->size = size;
    c->used = bytes;
    b->n_chunks++;
    return p;
}

static void count_copy(cuda_backend *b, dev_copy *c, int cat)
{
    c->cat = (uint8_t)cat;
    c->arena = true;
    b->cat_bytes[cat] += c->bytes;
    b->cat_count[cat]++;
}

/* Device copy of weight matrix w (uploaded on first use, outside captures). */
static const ember_cuda_tensor *weight(cuda_backend *b, const ember_weight *w)
{
    dev_copy *c = find_copy(b, w->data);
    if (c) return &c->t;
    if (b->mode != M_EAGER) {
        b->failed = true;
        return NULL;
    }
    if (!ember_cuda_type_supported(w->type)) {
        ember_error(EMBER_ERR_UNSUPPORTED, "cuda: no kernels for tensor type %s (%u)", ember_type_name(w->type), w->type);
        die(w->name ? w->name : "weight upload");
    }
    c = new_copy(b, w->data, w->row_bytes * (size_t)w->n_out);
    void *d = arena_alloc(b, c->bytes);
    /* ordered before every kernel on the stream; the mapped file stays */
    CK(w->name ? w->name : "weight upload", ember_cuda_upload(b->cu, d, w->data, c->bytes));
    c->t = (ember_cuda_tensor){.type = w->type, .ne0 = w->n_in, .ne1 = w->n_out, .row_bytes = w->row_bytes,
                               .data = d, .in_host = false};
    count_copy(b, c, CAT_WEIGHT);
    return &c->t;
}

/* Device copy of an F32 vector of n elements (norm weights). */
static const float *vec(cuda_backend *b, const float *h, int64_t n)
{
    if (!h) return NULL;
    dev_copy *c = find_copy(b, h);
    if (c) return c->t.data;
    if (b->mode != M_EAGER) {
        b->failed = true;
        return NULL;
    }
    c = new_copy(b, h, (size_t)n * sizeof(float));
    c->t.data = arena_alloc(b, c->bytes);
    count_copy(b, c, CAT_VEC);
    CK("vector upload", ember_cuda_upload(b->cu, c->t.data, h, c->bytes));
    return c->t.data;
}

/* Device F16 KV memory standing for host KV memory `h` of `bytes`. */
static void *kv_dev(cuda_backend *b, void *h, size_t bytes)
{
    dev_copy *c = find_copy(b, h);
    if (c) return c->t.data;
    if (b->mode != M_EAGER) {
        b->failed = true;
        return NULL;
    }
    c = new_copy(b, h, bytes);
    c->t.data = arena_alloc(b, bytes);
    count_copy(b, c, CAT_KV);
    CK("kv cache", ember_cuda_memzero(b->cu, c->t.data, bytes));
    return c->t.data;
}

/* ---- activations: device memory, or host memory staged around an op ---- */

static bool is_act(const cuda_backend *b, const void *p)
{
    const char *c = p;
    for (int i = 0; i < MAX_ACT; i++)
        if (b->act[i] && c >= (const char *)b->act[i] && c < (const char *)b->act[i] + b->act_bytes[i]) return true;
    return false;
}

static const void *pending(const cuda_backend *b, const void *h)
{
    for (int32_t i = 0; i < b->n_pend; i++)
        if (b->pend_host[i] == h) return b->pend_dev[i];
    return NULL;
}

/* Device pointer holding the n floats at p: p itself (activation memory),
 * a deferred host output's device buffer, or an upload into `slot`. In a
 * capture or replay, host data cannot be read (the step goes eager). */
static const float *in_f(cuda_backend *b, int slot, const float *p, size_t n)
{
    if (!p) return NULL;
    if (is_act(b, p)) {
        mixp(b, p);
        return p;
    }
    mix(b, 1);
    if (b->mode != M_EAGER) {
        const void *d = pending(b, p);
        if (!d) b->failed = true;
        return d;
    }
    if (b->lg_pending && p == b->lg_host && n * sizeof(float) <= b->lg_bytes) return b->lg_dev;
    float *d = stage(b, slot, n * sizeof(float));
    CK("upload", ember_cuda_upload(b->cu, d, p, n * sizeof(float)));
    return d;
}

/* Device pointer to write n floats meant for p; out_done finishes it. In a
 * capture or replay a host output is deferred to step_end. */
static float *out_f(cuda_backend *b, int slot, float *p, size_t n)
{
    if (is_act(b, p)) {
        mixp(b, p);
        return p;
    }
    mix(b, 2);
    if (b->mode == M_EAGER) return stage(b, slot, n * sizeof(float));
    const void *d = pending(b, p);
    if (d) return (float *)d;
    if (b->n_pend == MAX_PEND) {
        b->failed = true;
        return NULL;
    }
    const int32_t i = b->n_pend;
    if (b->mode == M_REPLAY) {
        if (i >= b->cur->n_pend || b->cur->pend_bytes[i] != n * sizeof(float)) {
            b->failed = true;
            return NULL;
        }
        d = b->cur->pend_dev[i];
    } else {
        d = stage(b, slot, n * sizeof(float));
    }
    b->pend_host[i] = p;
    b->pend_dev[i] = d;
    b->pend_bytes[i] = n * sizeof(float);
    b->n_pend++;
    return (float *)d;
}

/* A step's logits stay on the device when it allows it (logits_defer). */
static bool defer_output(cuda_backend *b, float *p, const void *d, size_t bytes)
{
    if (!b->in_step || !b->defer_logits || p != b->s_logits) return false;
    b->lg_pending = true;
    b->lg_host = p;
    b->lg_dev = d;
    b->lg_bytes = bytes;
    return true;
}

static void out_done(cuda_backend *b, float *p, const float *d, size_t n)
{
    if (b->mode == M_EAGER && !is_act(b, p) && !defer_output(b, p, d, n * sizeof(float)))
        CK("download", ember_cuda_download(b->cu, p, d, n * sizeof(float)));
}

/* In-place operand: activation memory, a deferred output, or (eager, host
 * memory) uploaded to `slot` and downloaded again by out_done. */
static float *io_f(cuda_backend *b, int slot, float *p, size_t n) { return (float *)in_f(b, slot, p, n); }

/* Step arrays: the device copy made by step_begin when the op gets the same
 * host array, else (outside a step, or another array) an upload. */
static const int32_t *step_tok(cuda_backend *b) { return b->d_step; }
static const int32_t *step_pos(cuda_backend *b) { return b->d_step + b->s_n; }
static const int32_t *step_cells(cuda_backend *b) { return b->d_step + 2 * (size_t)b->s_n; }
static const int32_t *step_seq(cuda_backend *b) { return b->d_step + 3 * (size_t)b->s_n; }
static const int32_t *step_cells_swa(cuda_backend *b) { return b->d_step + 4 * (size_t)b->s_n; }

static const int32_t *up_i32(cuda_backend *b, int slot, const int32_t *h, size_t n)
{
    if (b->mode != M_EAGER) {
        b->failed = true;
        return NULL;
    }
    void *d = stage(b, slot, n * sizeof(int32_t));
    CK("upload", ember_cuda_upload(b->cu, d, h, n * sizeof(int32_t)));
    return d;
}

static void verify(cuda_backend *b, int op, float *got, const float *ref, size_t n)
{
    double md = 0, mr = 0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = fabs((double)got[i] - ref[i]);
        if (d > md || d != d) {
            md = d;
            at = i;
        }
        if (fabs(ref[i]) > mr) mr = fabs(ref[i]);
    }
    const double rel = mr > 0 ? md / mr : md;
    if (rel > b->worst[op] || rel != rel) b->worst[op] = rel;
    if (rel > 1e-2 || rel != rel)
        fprintf(stderr, "ember: CUDA verify: %s call %ld: max|diff| %.4g at [%zu] (cuda %.6g, cpu %.6g), max|cpu| %.4g\n",
                v_names[op], b->calls[op], md, at, got[at], ref[at], mr);
    b->calls[op]++;
    memcpy(got, ref, n * sizeof(float));
}

/* ---- graphs --------------------------------------------------------------- */

static void graphs_drop(cuda_backend *b)
{
    bool any = false;
    for (int32_t i = 0; i < b->n_graphs; i++) any |= b->graphs[i].g != NULL;
    if (any) CK("graphs", ember_cuda_synchronize(b->cu));
    for (int32_t i = 0; i < b->n_graphs; i++) {
        ember_cuda_graph_free(b->graphs[i].g);
        b->graphs[i].g = NULL;
        b->graphs[i].seen = 0;
    }
}

static uint64_t mem_gen(const cuda_backend *b) { return b->gen * 0x100000001b3ull ^ ember_cuda_mem_generation(b->cu); }

static graph_entry *graph_find(cuda_backend *b, uint64_t key)
{
    for (int32_t i = 0; i < b->n_graphs; i++)
        if (b->graphs[i].key == key) return &b->graphs[i];
    if (b->n_graphs == MAX_GRAPHS) return NULL;
    graph_entry *e = &b->graphs[b->n_graphs++];
    memset(e, 0, sizeof *e);
    e->key = key;
    return e;
}

/* ---- host inputs (cu_upload) ------------------------------------------------
 * dst (activation memory) = src (host memory), n floats. Eagerly a plain
 * upload (a pageable copy is staged before cudaMemcpyAsync returns). In a
 * capture the graph gets a memcpy from up_pin, our pinned buffer, which the
 * op refills from src whenever the step runs again (replays keep their
 * forward pass: graph_entry.host_in). up_pin grows in eager steps small
 * enough to be captured, never during a capture; upload_done waits for a
 * launched graph so that the next step may refill up_pin. */
static void cu_upload(ember_backend *be, float *dst, const float *src, int64_t n)
{
    cuda_backend *b = (cuda_backend *)be;
    flush(b);
    mix(b, 115);
    mix(b, (uint64_t)n);
    mixp(b, src);
    const size_t bytes = (size_t)n * sizeof(float);
    if (!is_act(b, dst)) {   /* host scratch (an arch that reads it on the host) */
        if (b->mode != M_EAGER) b->failed = true;
        else if (dst != src) memmove(dst, src, bytes);
        return;
    }
    mixp(b, dst);
    if (b->in_step) b->host_in = true;
    if (b->mode == M_EAGER) {
        if (b->in_step && b->s_n <= GRAPH_MAX_N && b->up_off + bytes > b->up_pin_bytes) {
            /* a step that may be captured next time: room in up_pin for it */
            CK("upload (pinned staging)", ember_cuda_synchronize(b->cu));
            ember_cuda_host_free(b->cu, b->up_pin, b->up_pin_bytes);
            b->up_pin = NULL;
            b->up_pin_bytes = 0;
            b->gen++;   /* graphs holding the old address are stale */
            const size_t want = 2 * (b->up_off + bytes) + 4096;
            CK("upload (pinned staging)", ember_cuda_host_alloc(b->cu, want, &b->up_pin));
            b->up_pin_bytes = want;
        }
        if (b->in_step) b->up_off += bytes;
        CK("upload", ember_cuda_upload(b->cu, dst, src, bytes));
        return;
    }
    if (b->failed) return;
    if (b->up_off + bytes > b->up_pin_bytes) {
        b->failed = true;
        return;
    }
    char *pin = (char *)b->up_pin + b->up_off;
    b->up_off += bytes;
    memcpy(pin, src, bytes);   /* the stream is idle here: upload_done after the last launch */
    if (b->mode == M_CAPTURE) CK("upload", ember_cuda_upload(b->cu, dst, pin, bytes));
}

static void upload_done(cuda_backend *b)
{
    if (b->host_in) CK("upload (sync)", ember_cuda_synchronize(b->cu));
}

/* Replays verified this many times run without the forward pass. */
enum { TRUST_REPLAYS = 2 };

static bool op_step_begin(ember_backend *be, const ember_backend_step *st)
{
    cuda_backend *b = (cuda_backend *)be;
    const int32_t n = st->n, bt = st->block_tokens;
    b->in_step = true;
    b->mode = M_EAGER;
    b->failed = false;
    b->sig = 0;
    b->cur = NULL;
    b->n_pend = 0;
    b->host_in = false;
    b->up_off = 0;
    b->s_tok = st->token;
    b->s_pos = st->pos;
    b->s_kv_row = st->kv_row;
    b->s_query = st->query;
    /* a sliding-window KV group has its own rows and block tables */
    const bool swa = st->kv_row_swa && st->query_swa && (st->kv_row_swa != st->kv_row || st->query_swa != st->query);
    b->s_kv_row_swa = swa ? st->kv_row_swa : NULL;
    b->s_query_swa = swa ? st->query_swa : NULL;
    b->s_logits = st->logits;
    b->defer_logits = st->logits_defer && st->logits;
    b->lg_pending = false;   /* the last step's logits are gone with it */
    b->lg_host = NULL;
    b->s_n = n;
    int32_t max_ctx = (int32_t)b->lim.max_kv_tokens;
    for (int32_t i = 0; i < n; i++)
        if (st->query[i].pos + 1 > max_ctx) max_ctx = st->query[i].pos + 1;
    const int32_t max_pages = (max_ctx + bt - 1) / bt;
    b->s_max_ctx = max_ctx;
    b->s_max_pages = max_pages;
    /* pack [tok][pos][cells][seq][cells_swa][table][table_swa] and upload it once */
    int32_t n_seq = 0;
    const size_t n_head_arrays = swa ? 5 : 4;
    int32_t *h = host_i32(b, (size_t)n * (n_head_arrays + (swa ? 2 : 1) * (size_t)max_pages));
    int32_t *tok = h, *pos = h + n, *cells = h + 2 * n, *seq = h + 3 * n, *cells_swa = h + 4 * n;
    int32_t *tab = h + n_head_arrays * n;
    for (int32_t i = 0; i < n; i++) {
        tok[i] = st->token[i];
        pos[i] = st->pos[i];
        cells[i] = (int32_t)st->kv_row[i];
        if (swa) cells_swa[i] = (int32_t)st->kv_row_swa[i];
        /* a sequence's queries share its table pointer (in both groups) */
        const bool same = i > 0 && st->query[i].blocks == st->query[i - 1].blocks;
        seq[i] = same ? seq[i - 1] : n_seq++;
    }
    int32_t *tab_swa = tab + (size_t)n_seq * max_pages;
    for (int32_t i = 0; i < n; i++) {
        if (i + 1 < n && seq[i + 1] == seq[i]) continue;   /* the last query of a run sees the most blocks */
        int32_t hi = 0;
        for (int32_t k = i; k >= 0 && seq[k] == seq[i]; k--)
            if (st->query[k].pos > hi) hi = st->query[k].pos;
        const int32_t used = hi / bt + 1;
        int32_t *row = tab + (size_t)seq[i] * max_pages;
        for (int32_t j = 0; j < max_pages; j++) row[j] = j < used ? st->query[i].blocks[j] : 0;
        if (!swa) continue;
        /* the sliding group lists -1 for blocks released below the window;
         * attention never reads them (it starts at pos - n_swa + 1) */
        row = tab_swa + (size_t)seq[i] * max_pages;
        for (int32_t j = 0; j < max_pages; j++) {
            const int32_t blk = j < used ? st->query_swa[i].blocks[j] : 0;
            row[j] = blk < 0 ? 0 : blk;
        }
    }
    b->s_tab = n_head_arrays * (size_t)n;
    b->s_tab_swa = b->s_tab + (size_t)n_seq * max_pages;
    const size_t total = (size_t)n * n_head_arrays + (size_t)n_seq * max_pages * (swa ? 2 : 1);
    if (total > b->d_step_n) {
        if (b->d_step) {
            CK("step arrays", ember_cuda_synchronize(b->cu));
            ember_cuda_mfree(b->cu, b->d_step, b->d_step_n * sizeof(int32_t));
        }
        b->d_step = NULL;
        b->gen++;
        b->d_step_n = total + total / 2;
        CK("step arrays", ember_cuda_malloc(b->cu, b->d_step_n * sizeof(int32_t), (void **)&b->d_step));
    }
    /* the pieces the kernels read sit at fixed offsets for a given n: tok,
     * pos, cells, seq, then the table */
    CK("step arrays", ember_cuda_upload(b->cu, b->d_step, h, total * sizeof(int32_t)));

    /* graphs: small steps (decode) whose capacity-bound shapes are fixed */
    if (!b->graphs_on || n > GRAPH_MAX_N || max_ctx != (int32_t)b->lim.max_kv_tokens) return false;
    uint64_t key = 0x51ed270b1ull;
    key = key * 1099511628211ull ^ (uint64_t)n;
    key = key * 1099511628211ull ^ (uint64_t)st->n_out;
    key = key * 1099511628211ull ^ (uint64_t)n_seq;
    key = key * 1099511628211ull ^ (uint64_t)swa;
    for (int32_t i = 0; i < st->n_out; i++) key = key * 1099511628211ull ^ (uint64_t)st->out_idx[i];
    for (int32_t i = 0; i < n; i++) key = key * 1099511628211ull ^ (uint64_t)seq[i];
    const uint64_t g = mem_gen(b);
    graph_entry *e = graph_find(b, key);
    if (!e || e->disabled) return false;
    if (e->g && e->gen != g) graphs_drop(b);   /* buffers moved since the capture */
    b->cur = e;
    if (e->g) {
        b->mode = M_REPLAY;
        if (e->verified >= TRUST_REPLAYS && e->n_pend == 1 && e->pend_is_logits && st->logits && !e->host_in) {
            /* the forward pass would only repeat the checked op sequence */
            b->sig = e->sig;
            b->n_pend = 1;
            b->pend_host[0] = st->logits;
            b->pend_dev[0] = e->pend_dev[0];
            b->pend_bytes[0] = e->pend_bytes[0];
            return true;
        }
    } else if (e->seen >= 1) {
        /* the same shape ran eagerly once: every buffer it needs exists */
        if (ember_cuda_graph_begin(b->cu) == EMBER_OK) {
            b->mode = M_CAPTURE;
            e->gen = g;
        }
    }
    return false;
}

static void flush_pending(cuda_backend *b)
{
    for (int32_t i = 0; i < b->n_pend; i++)
        if (!defer_output(b, b->pend_host[i], b->pend_dev[i], b->pend_bytes[i]))
            CK("download", ember_cuda_download(b->cu, b->pend_host[i], b->pend_dev[i], b->pend_bytes[i]));
    b->n_pend = 0;
}

static bool op_step_end(ember_backend *be)
{
    cuda_backend *b = (cuda_backend *)be;
    flush(b);
    graph_entry *e = b->cur;
    bool ok = true;
    if (b->mode == M_EAGER) {
        if (e) e->seen++;
    } else if (b->mode == M_CAPTURE) {
        ember_cuda_graph *g = NULL;
        const ember_status st = ember_cuda_graph_end(b->cu, &g);
        if (st != EMBER_OK || b->failed) {
            ember_cuda_graph_free(g);
            e->disabled = true;
            ok = false;
        } else {
            e->g = g;
            e->sig = b->sig;
            e->n_pend = b->n_pend;
            e->verified = 0;
            e->pend_is_logits = b->n_pend == 1 && b->pend_host[0] == b->s_logits;
            e->host_in = b->host_in;
            for (int32_t i = 0; i < b->n_pend; i++) {
                e->pend_dev[i] = b->pend_dev[i];
                e->pend_bytes[i] = b->pend_bytes[i];
            }
            CK("graph launch", ember_cuda_graph_launch(b->cu, g));
            flush_pending(b);
            upload_done(b);
        }
    } else {
        if (b->failed || b->sig != e->sig || b->n_pend != e->n_pend) {
            CK("graph", ember_cuda_synchronize(b->cu));
            ember_cuda_graph_free(e->g);
            e->g = NULL;
            e->disabled = true;
            ok = false;
        } else {
            if (b->n_pend != 1 || b->pend_host[0] != b->s_logits) e->pend_is_logits = false;
            e->verified++;
            CK("graph launch", ember_cuda_graph_launch(b->cu, e->g));
            flush_pending(b);
            upload_done(b);
        }
    }
    b->n_pend = 0;
    b->failed = false;
    b->cur = NULL;
    if (!ok) {   /* the caller runs the pass again, op by op */
        b->mode = M_EAGER;
        b->up_off = 0;
        return false;
    }
    b->mode = M_EAGER;
    b->in_step = false;
    b->defer_logits = false;
    return true;
}

/* ---- logits left on the device ------------------------------------------- */

static void op_logits_sync(ember_backend *be, float *host, size_t bytes)
{
    cuda_backend *b = (cuda_backend *)be;
    if (!b->lg_pending) return;
    const char *h = (const char *)host, *lh = (const char *)b->lg_host;
    if (h + bytes <= lh || h >= lh + b->lg_bytes) return;
    b->lg_pending = false;
    CK("logits download", ember_cuda_download(b->cu, b->lg_host, b->lg_dev, b->lg_bytes));
}

/* Grow a device (or pinned host) buffer outside any step. */
static ember_status grow_dev(cuda_backend *b, void **p, size_t *have, size_t want, bool host)
{
    if (want <= *have) return EMBER_OK;
    ember_status st = ember_cuda_synchronize(b->cu);
    if (st != EMBER_OK) return st;
    if (host) ember_cuda_host_free(b->cu, *p, *have);
    else ember_cuda_mfree(b->cu, *p, *have);
    *p = NULL;
    *have = 0;
    want += want / 2;
    st = host ? ember_cuda_host_alloc(b->cu, want, p) : ember_cuda_malloc(b->cu, want, p);
    if (st == EMBER_OK) *have = want;
    return st;
}

/* The heads of rows on the device when they all lie in the block the last
 * step left there; else (or when the device path cannot run: no memory, a
 * vocabulary past its sort) the host pass over the downloaded rows. */
static void op_logits_top(ember_backend *be, const float *const *rows, int32_t n_rows, int64_t n_vocab, int32_t k,
                          ember_logits_top *out)
{
    cuda_backend *b = (cuda_backend *)be;
    bool on_device = b->lg_pending && n_rows > 0;
    const float *lh = b->lg_host;
    for (int32_t r = 0; on_device && r < n_rows; r++)
        on_device = rows[r] >= lh && (size_t)(rows[r] + n_vocab - lh) * sizeof(float) <= b->lg_bytes;
    if (on_device && n_rows > b->top_off_n) {
        int64_t *o = realloc(b->top_off, sizeof *o * (size_t)n_rows);
        if (o) {
            b->top_off = o;
            b->top_off_n = n_rows;
        } else {
            on_device = false;
        }
    }
    if (on_device) {
        for (int32_t r = 0; r < n_rows; r++) b->top_off[r] = rows[r] - lh;
        const size_t rb = ember_cuda_logits_top_result_bytes(n_rows, k);
        on_device =
            grow_dev(b, &b->top_work, &b->top_work_bytes, ember_cuda_logits_top_work_bytes(n_rows, n_vocab, k), false) == EMBER_OK &&
            grow_dev(b, &b->top_res_dev, &b->top_res_bytes, rb, false) == EMBER_OK &&
            grow_dev(b, &b->top_res_host, &b->top_res_host_bytes, rb, true) == EMBER_OK &&
            ember_cuda_logits_top(b->cu, b->lg_dev, b->top_off, n_rows, n_vocab, k, b->top_work, b->top_work_bytes,
                                  b->top_res_dev, b->top_res_host, out) == EMBER_OK;
        if (on_device) return;
    }
    /* rows on the host (or some of them), or the device path failed */
    if (b->lg_pending) op_logits_sync(be, b->lg_host, b->lg_bytes);
    ember_logits_top_host(rows, n_rows, n_vocab, k, out);
}

/* ---- ops ----------------------------------------------------------------- */

static void op_free(ember_backend *be)
{
    cuda_backend *b = (cuda_backend *)be;
    if (b->cpu) {
        fprintf(stderr, "ember: CUDA verify: worst max|diff| / max|cpu| per op:");
        for (int i = 0; i < V_N; i++)
            if (b->calls[i]) fprintf(stderr, " %s %.2e (%ld calls)", v_names[i], b->worst[i], b->calls[i]);
        fprintf(stderr, "\n");
        ember_backend_free(b->cpu);
    }
    for (int32_t i = 0; i < b->n_graphs; i++) ember_cuda_graph_free(b->graphs[i].g);
    for (size_t i = 0; i < b->n_copies; i++) {
        dev_copy *c = &b->copies[i];
        if (c->arena) continue;
        if (c->t.type || c->t.ne0) ember_cuda_tensor_release(b->cu, &c->t);
        else ember_cuda_mfree(b->cu, c->t.data, c->bytes);
    }
    for (int32_t i = 0; i < b->n_chunks; i++) ember_cuda_mfree(b->cu, b->chunks[i].base, b->chunks[i].size);
    for (int32_t i = 0; i < b->n_rtab; i++) ember_cuda_mfree(b->cu, b->rtab[i].dev, b->rtab[i].bytes);
    for (int i = 0; i < STAGE_SLOTS; i++) ember_cuda_mfree(b->cu, b->stage[i], b->stage_bytes[i]);
    for (int i = 0; i < MAX_ACT; i++) ember_cuda_mfree(b->cu, b->act[i], b->act_bytes[i]);
    for (int i = 0; i < MAX_ACT; i++) ember_cuda_host_free(b->cu, b->pinned[i], b->pinned_bytes[i]);
    ember_cuda_mfree(b->cu, b->d_step, b->d_step_n * sizeof(int32_t));
    ember_cuda_host_free(b->cu, b->up_pin, b->up_pin_bytes);
    ember_cuda_mfree(b->cu, b->top_work, b->top_work_bytes);
    ember_cuda_mfree(b->cu, b->top_res_dev, b->top_res_bytes);
    ember_cuda_host_free(b->cu, b->top_res_host, b->top_res_host_bytes);
    free(b->top_off);
    ember_cuda_free(b->cu);
    free(b->copies);
    free(b->index);
    free(b->host_i32);
    free(b);
}

static void *op_act_alloc(ember_backend *be, size_t bytes)
{
    cuda_backend *b = (cuda_backend *)be;
    for (int i = 0; i < MAX_ACT; i++) {
        if (b->act[i]) continue;
        void *p = NULL;
        if (ember_cuda_malloc(b->cu, bytes ? bytes : 4, &p) != EMBER_OK) return NULL;
        if (ember_cuda_memzero(b->cu, p, bytes ? bytes : 4) != EMBER_OK) {
            ember_cuda_mfree(b->cu, p, bytes ? bytes : 4);
            return NULL;
        }
        b->act[i] = p;
        b->act_bytes[i] = bytes ? bytes : 4;
        return p;
    }
    ember_error(EMBER_ERR_NOMEM, "CUDA backend: more than %d activation buffers", MAX_ACT);
    return NULL;
}

static void op_act_free(ember_backend *be, void *p)
{
    cuda_backend *b = (cuda_backend *)be;
    if (!p) return;
    for (int i = 0; i < MAX_ACT; i++)
        if (b->act[i] == p) {
            ember_cuda_synchronize(b->cu);
            ember_cuda_mfree(b->cu, p, b->act_bytes[i]);
            b->act[i] = NULL;
            b->act_bytes[i] = 0;
        }
}

/* pinned host blocks handed out by host_alloc, with their sizes */
static void *op_host_alloc(ember_backend *be, size_t bytes)
{
    cuda_backend *b = (cuda_backend *)be;
    for (int i = 0; i < MAX_ACT; i++) {
        if (b->pinned[i]) continue;
        void *p = NULL;
        if (ember_cuda_host_alloc(b->cu, bytes, &p) != EMBER_OK) return NULL;
        b->pinned[i] = p;
        b->pinned_bytes[i] = bytes;
        return p;
    }
    ember_error(EMBER_ERR_NOMEM, "CUDA backend: more than %d pinned host buffers", MAX_ACT);
    return NULL;
}

static void op_host_free(ember_backend *be, void *p)
{
    cuda_backend *b = (cuda_backend *)be;
    if (!p) return;
    for (int i = 0; i < MAX_ACT; i++)
        if (b->pinned[i] == p) {
            ember_cuda_synchronize(b->cu);
            ember_cuda_host_free(b->cu, p, b->pinned_bytes[i]);
            b->pinned[i] = NULL;
            b->pinned_bytes[i] = 0;
        }
}

static void cu_copy(ember_backend *be, float *dst, const float *src, int64_t n)
{
    cuda_backend *b = (cuda_backend *)be;
    flush(b);
    mix(b, 100);
    mix(b, (uint64_t)n);
    const float *s = in_f(b, 0, src, (size_t)n);
    float *d = out_f(b, SLOT_OUT, dst, (size_t)n);
    if (skip(b)) return;
    CK("copy", ember_cuda_copy(b->cu, d, s, (size_t)n * sizeof(float)));
    out_done(b, dst, d, (size_t)n);
}

static void cu_softcap(ember_backend *be, float *x, float cap, int64_t n)
{
    cuda_backend *b = (cuda_backend *)be;
    flush(b);
    mix(b, 101);
    mix(b, (uint64_t)n);
    mixf(b, cap);
    float *d = io_f(b, 0, x, (size_t)n);
    if (skip(b)) return;
    CK("softcap", ember_cuda_softcap(b->cu, d, cap, n));
    out_done(b, x, d, (size_t)n);
}

static void cu_get_rows(ember_backend *be, const ember_weight *w, const ember_token *ids, int32_t n, float *out)
{
    cuda_backend *b = (cuda_backend *)be;
    flush(b);
    mix(b, 102);
    mix(b, (uint64_t)n);
    mixp(b, w->data);
    const ember_cuda_tensor *t = weight(b, w);
    const int32_t *d_ids = b->in_step && ids == b->s_tok && n <= b->s_n ? step_tok(b)
                                                                        : up_i32(b, 0, ids, (size_t)n);
    float *d_out = out_f(b, 1, out, (size_t)n * w->n_in);
    if (skip(b)) return;
    CK("get_rows", ember_cuda_get_rows(b->cu, t, d_ids, n, d_out));
    out_done(b, out, d_out, (size_t)n * w->n_in);
}

static void cu_rms_norm(ember_backend *be, float *y, const float *x, const float *w, int64_t n_rows, int64_t n,
                        float eps)
{
    cuda_backend *b = (cuda_backend *)be;
    mix(b, 103);
    mix(b, (uint64_t)(n_rows * 131 + n));
    mixp(b, w);
    const size_t len = (size_t)(n_rows * n);
    /* a per-head norm in place: the one before it may join the head preparation */
    const bool head_like = x == y && is_act(b, x) && ph_on(b) && n_rows % b->s_n == 0;
    /* the pre-norm of the residual a post-norm add just wrote waits with it */
    const bool after_add = b->pa.on && x == b->pa.res && y != x && n == b->pa.n && n_rows == b->pa.n_rows &&
                           is_act(b, y) && !b->pn.on && !b->ps.on && !b->pg.on && !b->ph.n_parts;
    if (!after_add && !(head_like && ph_take_norm(b))) flush(b);
    const float *dx = in_f(b, 0, x, len);
    float *dy = y == x ? (float *)dx : out_f(b, 1, y, len);
    const float *dw = vec(b, w, n);
    if (b->fuse_on && b->in_step && is_act(b, x) && is_act(b, y)) {
        b->pn.on = true;   /* launched by the next op, or fused into an add */
        b->pn.x = dx;
        b->pn.w = dw;
        b->pn.y = dy;
        b->pn.n = n;
        b->pn.n_rows = n_rows;
        b->pn.eps = eps;
        return;
    }
    if (skip(b)) return;
    CK("rms_norm", ember_cuda_rms_norm(b->cu, dx, dw, dy, n, n_rows, eps));
    out_done(b, y, dy, len);
}

/* The integer path (cuda_q8.cu: bit-identical to the CPU backend's matmul)
 * takes decode-sized batches (<= 32 tokens) whose weights all have an
 * integer kernel; with EMBER_CUDA_EXACT=1 also prefill batches (instead of
 * the TF32 GEMM). EMBER_CUDA_Q8=0 restores the rounded-F32 kernels. */
static bool q8_path(const cuda_backend *b, int64_t n_tokens, int32_t n_w, const ember_weight *const *ws)
{
    if (!b->q8_on || b->f32_act || (n_tokens > 32 && !b->exact_attn)) return false;
    for (int32_t k = 0; k < n_w; k++)
        if (ember_cuda_q8_act_type(ws[k]->type) == EMBER_TYPE_F32) return false;
    return true;
}

static void cu_matmul_q8(cuda_backend *b, const float *x, int64_t n_tokens, int32_t n_w, const ember_weight *const *ws,
                         float *const *ys)
{
    const int64_t n = n_tokens * ws[0]->n_in, n_in = ws[0]->n_in;
    uint32_t fmt[3];
    bool same = true;
    for (int32_t k = 0; k < n_w; k++) {
        fmt[k] = ember_cuda_q8_act_type(ws[k]->type);
        same = same && fmt[k] == fmt[0];
    }
    /* a pending RMSNorm or GLU that produces x quantizes it in its own
     * kernel (the same bytes as ember_cuda_quantize_q8) */
    const bool fuse_norm = same && b->pn.on && b->pn.y == x && b->pn.n == n_in && b->pn.n_rows == n_tokens &&
                           (fmt[0] == EMBER_TYPE_Q8_0 || fmt[0] == EMBER_TYPE_Q8_1 ||
                            (fmt[0] == EMBER_TYPE_Q8_K && n_in % 256 == 0));
    const bool fuse_glu = same && !fuse_norm && b->pg.on && b->pg.gate == x && b->pg.n == n && fmt[0] == EMBER_TYPE_Q8_K;
    /* a post-norm add waiting before it: with the norm (its pre-norm reads
     * the residual), or alone when x is that residual */
    const bool q8_fmt = fmt[0] == EMBER_TYPE_Q8_0 || fmt[0] == EMBER_TYPE_Q8_1 || (fmt[0] == EMBER_TYPE_Q8_K && n_in % 256 == 0);
    const bool fuse_add = same && q8_fmt && b->pa.on && b->pa.n == n_in && b->pa.n_rows == n_tokens && !fuse_glu &&
                          (fuse_norm ? b->pn.x == b->pa.res : !b->pn.on && x == b->pa.res);
    const float *nx = b->pn.x, *nw = b->pn.w, *gup = b->pg.up;
    const float neps = b->pn.eps;
    const ember_cuda_act gact = b->pg.act;
    const struct { const float *x, *w; float *y, *res; float eps; } pa = {b->pa.x, b->pa.w, b->pa.y, b->pa.res, b->pa.eps};
    if (fuse_norm) b->pn.on = false;
    if (fuse_glu) b->pg.on = false;
    if (fuse_add) b->pa.on = false;
    flush(b);
    mix(b, 114 + 1000 * (uint64_t)fuse_norm + 2000 * (uint64_t)fuse_glu + 4000 * (uint64_t)fuse_add);
    mix(b, (uint64_t)(n_tokens * 7 + n_w));
    const float *dx = in_f(b, 0, x, (size_t)n);
    const void *q[3];
    const ember_cuda_tensor *t[3];
    float *dy[3];
    for (int32_t k = 0; k < n_w; k++) {
        mixp(b, ws[k]->data);
        t[k] = weight(b, ws[k]);
        dy[k] = out_f(b, SLOT_OUT + k, ys[k], (size_t)(n_tokens * ws[k]->n_out));
    }
    if (skip(b)) return;
    for (int32_t k = 0; k < n_w; k++) {   /* x quantized once per activation format */
        int32_t j = 0;
        while (j < k && fmt[j] != fmt[k]) j++;
        if (j < k) {
            q[k] = q[j];
            continue;
        }
        void *r = stage(b, SLOT_ROUND + k, ember_cuda_q8_bytes(fmt[k], n_in, n_tokens));
        if (skip(b)) return;
        if (k == 0 && fuse_add) {
            CK("matmul (post-norm add + norm + quantize)",
               ember_cuda_add_norm_quant_q8(b->cu, fmt[0], pa.x, pa.w, pa.y, pa.res, pa.eps, nw, (float *)dx, r, n_in,
                                            n_tokens, neps, fuse_norm));
            b->fused.add_norm++;
        } else if (k == 0 && fuse_norm)
            CK("matmul (norm + quantize)",
               ember_cuda_rms_norm_quant_q8(b->cu, fmt[0], nx, nw, (float *)dx, r, n_in, n_tokens, neps));
        else if (k == 0 && fuse_glu)
            CK("matmul (glu + quantize)", ember_cuda_glu_quant_q8K(b->cu, gact, (float *)dx, gup, (float *)dx, r, n));
        else
            CK("matmul (quantize activations)", ember_cuda_quantize_q8(b->cu, fmt[k], dx, n_in, n_tokens, r));
        q[k] = r;
    }
    /* weights of one type on the same activations (Q/K/V, gate/up) in one launch */
    bool one_launch = n_w > 1;
    for (int32_t k = 1; k < n_w; k++)
        one_launch = one_launch && t[k]->type == t[0]->type && t[k]->row_bytes == t[0]->row_bytes && q[k] == q[0];
    if (one_launch)
        CK("matmul", ember_cuda_matmul_q8_multi(b->cu, n_w, t, q[0], n_tokens, dy));
    else
        for (int32_t k = 0; k < n_w; k++) CK("matmul", ember_cuda_matmul_q8(b->cu, t[k], q[k], n_tokens, dy[k]));
    for (int32_t k = 0; k < n_w; k++) out_done(b, ys[k], dy[k], (size_t)(n_tokens * ws[k]->n_out));
}

static void cu_matmul(ember_backend *be, const float *x, int64_t n_tokens, int32_t n_w, const ember_weight *const *ws,
                      float *const *ys)
{
    cuda_backend *b = (cuda_backend *)be;
    if (q8_path(b, n_tokens, n_w, ws)) {
        cu_matmul_q8(b, x, n_tokens, n_w, ws, ys);
        return;
    }
    const int64_t n = n_tokens * ws[0]->n_in;
    /* an RMSNorm waiting for this matmul's input: its Q8_0 rounding is done
     * in the norm's kernel when every weight wants 32-blocks (Q8_0/Q8_1) */
    bool fuse_round = b->pn.on && b->pn.y == x && b->pn.n % 32 == 0 && b->pn.n * b->pn.n_rows == n && !b->f32_act;
    for (int32_t k = 0; fuse_round && k < n_w; k++) {
        const ember_quant_traits *qt = ember_quant_traits_get(ws[k]->type);
        fuse_round = qt && (qt->vec_dot_type == EMBER_TYPE_Q8_0 || qt->vec_dot_type == EMBER_TYPE_Q8_1);
    }
    bool fuse_glu = b->pg.on && b->pg.gate == x && b->pg.n == n && !b->f32_act;
    for (int32_t k = 0; fuse_glu && k < n_w; k++) {
        const ember_quant_traits *qt = ember_quant_traits_get(ws[k]->type);
        fuse_glu = qt && qt->vec_dot_type == EMBER_TYPE_Q8_K;
    }
    const ember_cuda_act gact = b->pg.act;
    const float *gup = b->pg.up;
    if (fuse_glu) b->pg.on = false;
    const float *nx = b->pn.x, *nw = b->pn.w;
    const int64_t nn = b->pn.n, nrows = b->pn.n_rows;
    const float neps = b->pn.eps;
    if (fuse_round) {
        b->pn.on = false;
        flush_head(b);
        flush_pa(b);
        flush_scale(b);
        flush_glu(b);
    } else {
        flush(b);
    }
    mix(b, 104);
    mix(b, (uint64_t)(n_tokens * 7 + n_w));
    const float *dx = in_f(b, 0, x, (size_t)n);
    /* activations rounded to each weight's vec_dot_type, once per format
     * (as the CPU backend quantizes them), unless EMBER_CUDA_F32_ACT */
    uint32_t fmt[3];
    const float *xin[3];
    const ember_cuda_tensor *t[3];
    float *dy[3];
    for (int32_t k = 0; k < n_w; k++) {
        const ember_quant_traits *qt = ember_quant_traits_get(ws[k]->type);
        fmt[k] = b->f32_act || !qt ? EMBER_TYPE_F32 : qt->vec_dot_type;
        xin[k] = dx;
        mixp(b, ws[k]->data);
        t[k] = weight(b, ws[k]);
        dy[k] = out_f(b, SLOT_OUT + k, ys[k], (size_t)(n_tokens * ws[k]->n_out));
    }
    if (skip(b)) return;
    if (fuse_round) {
        float *r = stage(b, SLOT_ROUND, (size_t)n * sizeof(float));
        if (skip(b)) return;
        CK("matmul (norm + rounding)", ember_cuda_rms_norm_round_q8(b->cu, nx, nw, (float *)dx, r, nn, nrows, neps));
        for (int32_t k = 0; k < n_w; k++) fmt[k] = EMBER_TYPE_F32, xin[k] = r;
    }
    if (fuse_glu) {
        float *r = stage(b, SLOT_ROUND, (size_t)n * sizeof(float));
        if (skip(b)) return;
        CK("matmul (glu + rounding)", ember_cuda_glu_round_q8K(b->cu, gact, (float *)dx, gup, (float *)dx, r, n));
        for (int32_t k = 0; k < n_w; k++) fmt[k] = EMBER_TYPE_F32, xin[k] = r;
    }
    for (int32_t k = 0; k < n_w; k++) {
        if (fmt[k] == EMBER_TYPE_F32) continue;
        int32_t j = 0;
        while (j < k && fmt[j] != fmt[k]) j++;
        if (j < k) {
            xin[k] = xin[j];
            continue;
        }
        float *r = stage(b, SLOT_ROUND + k, (size_t)n * sizeof(float));
        if (skip(b)) return;
        CK("matmul (activation rounding)", ember_cuda_round_act(b->cu, fmt[k], dx, r, n));
        xin[k] = r;
    }
    for (int32_t k = 0; k < n_w; k++) CK("matmul", ember_cuda_matmul(b->cu, t[k], xin[k], n_tokens, dy[k]));
    for (int32_t k = 0; k < n_w; k++) out_done(b, ys[k], dy[k], (size_t)(n_tokens * ws[k]->n_out));
}

/* cos/sin of every (position < n_ctx, pair) for one RoPE configuration,
 * computed here exactly as the CPU backend's rope_rows does (cpu.c: f32
 * theta steps, libm cosf/sinf) and kept on the device; NULL when tables are
 * off, full, or cannot be made now (inside a capture or replay). Only the
 * leading pairs whose angle reaches 2^-12 at the last position are kept
 * (*n_tab of them): the kernel gives the others glibc's small-angle results
 * (cuda_rope_tab.cu). E4B: 64 of 256 pairs on full layers, 128 of 128 on
 * sliding ones: 1536 B per position instead of 3072. */
static const float *rope_table(cuda_backend *b, float base, float scale, int32_t n_rot, const float *ff,
                               int32_t *n_pos, int32_t *n_tab)
{
    for (int32_t i = 0; i < b->n_rtab; i++) {
        const struct rope_table *r = &b->rtab[i];
        if (r->base == base && r->scale == scale && r->n_rot == n_rot && r->ff == ff) {
            *n_pos = r->n_pos;
            *n_tab = r->n_tab;
            return r->dev;
        }
    }
    if (!b->rope_tab_on || b->mode != M_EAGER || b->n_rtab == (int32_t)(sizeof b->rtab / sizeof b->rtab[0]))
        return NULL;
    int64_t np = b->lim.max_kv_tokens;
    if (np < 1) np = 1;
    if (np > 65536) np = 65536;
    const int32_t half = n_rot / 2;
    const float theta_scale = powf(base, -2.0f / (float)n_rot);
    /* the angle grows with the position (each f32 step is monotonic): pairs
     * below 2^-12 at the last position are below it everywhere */
    int32_t nt = 1;
    {
        float theta = (float)(np - 1);
        for (int32_t i = 0; i < half; i++) {
            const float th = scale * (ff ? theta / ff[i] : theta);
            if (!(fabsf(th) < 0x1p-12f)) nt = i + 1;
            theta *= theta_scale;
        }
    }
    const size_t bytes = (size_t)np * (size_t)nt * 2 * sizeof(float);
    float *h = malloc(bytes);
    if (!h) return NULL;
    for (int64_t p = 0; p < np; p++) {
        float theta = (float)p;
        for (int32_t i = 0; i < nt; i++) {
            const float th = scale * (ff ? theta / ff[i] : theta);
            h[(p * nt + i) * 2] = cosf(th);
            h[(p * nt + i) * 2 + 1] = sinf(th);
            theta *= theta_scale;
        }
    }
    void *d = NULL;
    if (ember_cuda_malloc(b->cu, bytes, &d) != EMBER_OK) {
        free(h);
        return NULL;
    }
    CK("rope table", ember_cuda_upload(b->cu, d, h, bytes));
    free(h);
    struct rope_table *r = &b->rtab[b->n_rtab++];
    *r = (struct rope_table){base, scale, n_rot, ff, d, (int32_t)np, nt, bytes};
    *n_pos = r->n_pos;
    *n_tab = r->n_tab;
    return r->dev;
}

static void cu_rope_ext(ember_backend *be, float *x, int64_t n_tokens, int32_t n_head, int32_t head_dim,
                        int32_t n_rot, const ember_pos *pos, float base, float freq_scale, ember_rope_mode mode,
                        const float *freq_factors)
{
    cuda_backend *b = (cuda_backend *)be;
    mix(b, 105);
    mix(b, (uint64_t)(n_tokens * 1000003 + n_head * 1009 + head_dim * 17 + n_rot) * 4 + (uint64_t)mode);
    mixf(b, base);
    mixf(b, freq_scale);
    mixp(b, freq_factors);
    const size_t n = (size_t)n_tokens * n_head * head_dim;
    float *d = io_f(b, 0, x, n);
    const int32_t *dpos = b->in_step && pos == b->s_pos && n_tokens <= b->s_n
                              ? step_pos(b) : up_i32(b, 1, pos, (size_t)n_tokens);
    const float *dff = freq_factors ? vec(b, freq_factors, n_rot / 2) : NULL;
    int32_t n_pos = 0, n_tab = 0;
    const float *tab = rope_table(b, base, freq_scale, n_rot, freq_factors, &n_pos, &n_tab);
    mixp(b, tab);
    if (tab && is_act(b, x) && !b->ph.store && n_tokens == b->s_n && dpos == step_pos(b) && ph_take_norm(b)) {
        /* joins the head preparation, after the norm of x if that waits there */
        ember_cuda_head_part *P = ph_find(b, d);
        if (P && (P->rope || P->n_head != n_head || b->ph.head_dim != head_dim)) P = NULL;
        else if (!P) P = ph_add(b, d, n_head, head_dim);
        if (P) {
            P->rope = true;
            P->neox = mode == EMBER_ROPE_NEOX;
            P->n_rot = n_rot;
            P->n_pos = n_pos;
            P->n_tab = n_tab;
            P->tab = tab;
            P->theta_scale = powf(base, -2.0f / (float)n_rot);
            P->freq_scale = freq_scale;
            P->ff = dff;
            return;
        }
    }
    flush(b);
    if (skip(b)) return;
    if (tab) {
        CK("rope", ember_cuda_rope_tab_pairs(b->cu, d, dpos, n_tokens, n_head, head_dim, n_rot,
                                             mode == EMBER_ROPE_NEOX ? EMBER_CUDA_ROPE_NEOX : EMBER_CUDA_ROPE_NORMAL,
                                             tab, n_pos, n_tab, base, freq_scale, dff));
        out_done(b, x, d, n);
        return;
    }
    CK("rope", ember_cuda_rope(b->cu, d, dpos, n_tokens, n_head, head_dim, n_rot,
                               mode == EMBER_ROPE_NEOX ? EMBER_CUDA_ROPE_NEOX : EMBER_CUDA_ROPE_NORMAL, base,
                               freq_scale, dff));
    out_done(b, x, d, n);
}

static void cu_rope(ember_backend *be, float *x, int64_t n_tokens, int32_t n_head, int32_t head_dim, int32_t n_rot,
                    const ember_pos *pos, float base, float freq_scale, ember_rope_mode mode)
{
    cu_rope_ext(be, x, n_tokens, n_head, head_dim, n_rot, pos, base, freq_scale, mode, NULL);
}

static void glu(ember_backend *be, ember_cuda_act act, float *gate, const float *up_h, int64_t n)
{
    cuda_backend *b = (cuda_backend *)be;
    flush(b);
    mix(b, 106 + (uint64_t)act);
    mix(b, (uint64_t)n);
    float *dg = io_f(b, 0, gate, (size_t)n);
    const float *du = in_f(b, 1, up_h, (size_t)n);
    if (b->fuse_on && b->in_step && is_act(b, gate) && is_act(b, up_h) && n % 256 == 0) {
        b->pg.on = true;   /* launched by the next op, or with the next matmul's Q8_K rounding */
        b->pg.act = act;
        b->pg.gate = dg;
        b->pg.up = du;
        b->pg.n = n;
        return;
    }
    if (skip(b)) return;
    CK("glu", ember_cuda_glu(b->cu, act, dg, du, dg, n));
    out_done(b, gate, dg, (size_t)n);
}

/* GELU through f16 as the CPU backend's table does (backend.h contract) */
static void cu_geglu(ember_backend *be, float *gate, const float *u, int64_t n)
{
    glu(be, EMBER_CUDA_ACT_GELU_TANH_F16, gate, u, n);
}

static void cu_swiglu(ember_backend *be, float *gate, const float *u, int64_t n)
{
    glu(be, EMBER_CUDA_ACT_SILU, gate, u, n);
}

static void cu_add(ember_backend *be, float *y, const float *x, int64_t n)
{
    cuda_backend *b = (cuda_backend *)be;
    mix(b, 110);
    mix(b, (uint64_t)n);
    if (b->pn.on && b->pn.y == x && b->pn.n * b->pn.n_rows == n && is_act(b, y) && b->pn.x != y) {
        b->pn.on = false;   /* y += rms_norm(..) in one kernel (it still writes the norm's output) */
        flush_head(b);
        flush_pa(b);
        flush_scale(b);
        mixp(b, y);
        if (b->fuse_add && b->in_step && !b->f32_act) {   /* held back for the next block's pre-norm and matmul */
            b->pa.on = true;
            b->pa.x = b->pn.x;
            b->pa.w = b->pn.w;
            b->pa.y = b->pn.y;
            b->pa.res = y;
            b->pa.n = b->pn.n;
            b->pa.n_rows = b->pn.n_rows;
            b->pa.eps = b->pn.eps;
            return;
        }
        if (skip(b)) return;
        CK("rms_norm_add", ember_cuda_rms_norm_add_out(b->cu, b->pn.x, b->pn.w, b->pn.y, y, b->pn.n, b->pn.n_rows,
                                                       b->pn.eps));
        return;
    }
    flush(b);
    float *dy = io_f(b, 0, y, (size_t)n);
    const float *dx = in_f(b, 1, x, (size_t)n);
    if (skip(b)) return;
    CK("add", ember_cuda_add(b->cu, dy, dx, dy, n));
    out_done(b, y, dy, (size_t)n);
}

static void cu_scale(ember_backend *be, float *x, float s, int64_t n)
{
    cuda_backend *b = (cuda_backend *)be;
    mix(b, 111);
    mix(b, (uint64_t)n);
    mixf(b, s);
    const bool defer = b->fuse_on && !b->exact_attn && b->in_step && is_act(b, x) && pow2(s);
    /* a waiting head preparation stays: it comes before this scale; a
     * waiting post-norm add goes first (a matmul may fuse it alone later,
     * after the scale was launched) */
    if (!defer || b->pn.on || b->pg.on || b->ps.on || b->pa.on) flush(b);
    float *d = io_f(b, 0, x, (size_t)n);
    if (defer) {
        b->ps.on = true;   /* folded into the attention that reads x, or launched by the next op */
        b->ps.x = d;
        b->ps.s = s;
        b->ps.n = n;
        return;
    }
    if (skip(b)) return;
    CK("scale", ember_cuda_scale(b->cu, d, s, n));
    out_done(b, x, d, (size_t)n);
}

static void check_kv(const ember_kv_layer_view *kv)
{
    if (kv->type_k != EMBER_TYPE_F16 || kv->type_v != EMBER_TYPE_F16) {
        ember_error(EMBER_ERR_UNSUPPORTED, "KV cache types %s/%s: only F16 runs on the GPU so far",
                    ember_type_name(kv->type_k), ember_type_name(kv->type_v));
        die("kv cache");
    }
}

static void cu_kv_store(ember_backend *be, const ember_kv_layer_view *kv, const float *k, const float *v,
                        const int64_t *rows, int32_t n)
{
    cuda_backend *b = (cuda_backend *)be;
    check_kv(kv);
    mix(b, 112);
    mix(b, (uint64_t)n);
    mixp(b, kv->k);
    const int32_t *dcells;
    bool step_rows = true;
    if (b->in_step && rows == b->s_kv_row && n <= b->s_n) {
        dcells = step_cells(b);
        mix(b, 1);
    } else if (b->in_step && b->s_kv_row_swa && rows == b->s_kv_row_swa && n <= b->s_n) {
        dcells = step_cells_swa(b);
        mix(b, 2);
    } else {
        step_rows = false;
        int32_t *cells = host_i32(b, (size_t)n);
        for (int32_t i = 0; i < n; i++) cells[i] = (int32_t)rows[i];
        dcells = up_i32(b, 2, cells, (size_t)n);
    }
    const int64_t rk = (int64_t)(kv->k_row_bytes / 2), rv = (int64_t)(kv->v_row_bytes / 2);
    uint16_t *dk = kv_dev(b, kv->k, kv->k_row_bytes * (size_t)kv->n_rows);
    uint16_t *dv = kv_dev(b, kv->v, kv->v_row_bytes * (size_t)kv->n_rows);
    const float *sk = in_f(b, 0, k, (size_t)(n * rk)), *sv = in_f(b, 1, v, (size_t)(n * rv));
    const int64_t D = b->ph.head_dim;
    if (ph_on(b) && b->ph.n_parts > 0 && !b->ph.store && step_rows && n == b->s_n && !b->pn.on && !b->pg.on &&
        !b->pa.on &&
        !(b->ps.on && (b->ps.x == sk || b->ps.x == sv)) && is_act(b, k) && is_act(b, v) && sk != sv &&
        rk % D == 0 && rv % D == 0) {
        /* the store joins the head preparation: K and V rows go to the
         * cache from the kernel that normalises and turns them */
        ember_cuda_head_part *pk = ph_find(b, sk), *pv = ph_find(b, sv);
        if (!pk) pk = ph_add(b, (float *)sk, rk / D, D);
        if (pk && !pv) pv = ph_add(b, (float *)sv, rv / D, D);
        if (pk && pv && !pk->cache && !pv->cache && pk->n_head == rk / D && pv->n_head == rv / D) {
            pk->cache = dk;
            pv->cache = dv;
            b->ph.cells = dcells;
            b->ph.store = true;
            return;
        }
    }
    flush_head(b);
    flush_norm(b);
    flush_glu(b);
    if (b->ps.on && (b->ps.x == k || b->ps.x == v)) flush_scale(b);
    if (skip(b)) return;
    CK("kv_store", ember_cuda_kv_store2(b->cu, sk, rk, sv, rv, n, dcells, dk, dv));
}

static void cu_kv_copy(ember_backend *be, const ember_kv_layer_view *kv, int64_t dst_row, int64_t src_row,
                       int64_t n_rows)
{
    cuda_backend *b = (cuda_backend *)be;
    flush(b);
    dev_copy *ck = find_copy(b, kv->k), *cv = find_copy(b, kv->v);
    if (!ck || !cv) return;   /* nothing stored on the device yet */
    CK("kv_copy", ember_cuda_copy(b->cu, (char *)ck->t.data + (size_t)dst_row * kv->k_row_bytes,
                                  (const char *)ck->t.data + (size_t)src_row * kv->k_row_bytes,
                                  (size_t)n_rows * kv->k_row_bytes));
    CK("kv_copy", ember_cuda_copy(b->cu, (char *)cv->t.data + (size_t)dst_row * kv->v_row_bytes,
                                  (const char *)cv->t.data + (size_t)src_row * kv->v_row_bytes,
                                  (size_t)n_rows * kv->v_row_bytes));
}

static void cu_attention(ember_backend *be, const ember_kv_layer_view *kv, const ember_attn_params *p,
                         const float *q, const ember_attn_query *queries, int32_t n, float *out)
{
    cuda_backend *b = (cuda_backend *)be;
    check_kv(kv);
    if (p->head_dim_k != p->head_dim_v) {
        ember_error(EMBER_ERR_UNSUPPORTED, "head_dim_k %d != head_dim_v %d", p->head_dim_k, p->head_dim_v);
        die("attention");
    }
    float q_scale = 1.f;
    if (b->ps.on && b->ps.x == q && b->ps.n == (int64_t)n * p->n_head * p->head_dim_k) {
        b->ps.on = false;   /* q * 2^k rounds to f16 exactly as q does */
        q_scale = b->ps.s;
    }
    flush(b);   /* the head preparation first: it writes q and the K/V rows */
    mix(b, 113);
    mix(b, (uint64_t)n);
    mixp(b, kv->k);
    mix(b, (uint64_t)p->n_swa);
    mixf(b, p->kq_scale);
    const int32_t bt = kv->block_tokens;
    const int32_t *dpos, *dseq, *dtab;
    int32_t max_ctx, max_pages;
    const bool full_q = queries == b->s_query, swa_q = b->s_query_swa && queries == b->s_query_swa;
    if (b->in_step && (full_q || swa_q) && n == b->s_n) {
        dpos = step_pos(b);
        dseq = step_seq(b);
        dtab = b->d_step + (swa_q ? b->s_tab_swa : b->s_tab);
        max_ctx = b->s_max_ctx;
        max_pages = b->s_max_pages;
        mix(b, swa_q ? 2 : 1);
    } else {
        max_ctx = (int32_t)b->lim.max_kv_tokens;
        for (int32_t i = 0; i < n; i++)
            if (queries[i].pos + 1 > max_ctx) max_ctx = queries[i].pos + 1;
        max_pages = (max_ctx + bt - 1) / bt;
        /* one block-table row per query (queries of one sequence repeat it) */
        int32_t *h = host_i32(b, (size_t)n * (max_pages + 2));
        int32_t *hpos = h, *hseq = h + n, *htab = h + 2 * n;
        for (int32_t i = 0; i < n; i++) {
            hpos[i] = queries[i].pos;
            hseq[i] = i;
            const int32_t used = queries[i].pos / bt + 1;
            for (int32_t j = 0; j < max_pages; j++) {   /* -1: a block the sliding group released */
                const int32_t blk = j < used ? queries[i].blocks[j] : 0;
                htab[(size_t)i * max_pages + j] = blk < 0 ? 0 : blk;
            }
        }
        const int32_t *d = up_i32(b, 3, h, (size_t)n * (max_pages + 2));
        dpos = d;
        dseq = d ? d + n : NULL;
        dtab = d ? d + 2 * n : NULL;
    }
    mix(b, (uint64_t)max_pages);
    const size_t nq = (size_t)n * p->n_head * p->head_dim_k;
    const float *dq = in_f(b, 0, q, nq);
    float *dout = out_f(b, 1, out, nq);
    const uint16_t *dk = kv_dev(b, kv->k, kv->k_row_bytes * (size_t)kv->n_rows);
    const uint16_t *dv = kv_dev(b, kv->v, kv->v_row_bytes * (size_t)kv->n_rows);
    if (skip(b)) return;
    const ember_cuda_attn_params ap = {
        .n_head = p->n_head, .n_head_kv = p->n_head_kv, .head_dim = p->head_dim_k, .scale = p->kq_scale * q_scale,
        .softcap = 0.f, .n_swa = p->n_swa, .page_size = bt, .max_pages = max_pages, .max_ctx = max_ctx,
        .exact = b->exact_attn, .exact_tiled = n >= 64,   /* the CPU's split (FA_TILE_Q) */
    };
    if (b->attn_tc && !b->exact_attn && b->mode == M_EAGER && n >= ATTN_TC_MIN_RUN && p->head_dim_k % 8 == 0) {
        /* prompt runs on the tensor cores (cuda_attn_prefill.cu): a run is
         * consecutive entries of one sequence at consecutive positions;
         * short runs (decode tokens batched with a prompt) keep the kernel */
        const size_t row = (size_t)p->n_head * p->head_dim_k;
        for (int32_t i0 = 0; i0 < n;) {
            int32_t i1 = i0 + 1;
            while (i1 < n && queries[i1].blocks == queries[i0].blocks && queries[i1].pos == queries[i1 - 1].pos + 1) i1++;
            if (i1 - i0 >= ATTN_TC_MIN_RUN)
                CK("attention (prompt run)", ember_cuda_attn_prefill(b->cu, &ap, dq + (size_t)i0 * row, i1 - i0, queries[i0].pos,
                                                                     queries[i0].blocks, dk, dv, dout + (size_t)i0 * row));
            else
                CK("attention", ember_cuda_attn(b->cu, &ap, dq + (size_t)i0 * row, i1 - i0, dpos + i0, dseq + i0, dtab, dk, dv,
                                                dout + (size_t)i0 * row));
            i0 = i1;
        }
        out_done(b, out, dout, nq);
        return;
    }
    CK("attention", ember_cuda_attn(b->cu, &ap, dq, n, dpos, dseq, dtab, dk, dv, dout));
    out_done(b, out, dout, nq);
}

/* ---- op table entries: CUDA, checked against the CPU in verify mode ------ */

static void op_get_rows(ember_backend *be, const ember_weight *w, const ember_token *ids, int32_t n, float *out)
{
    cuda_backend *b = (cuda_backend *)be;
    cu_get_rows(be, w, ids, n, out);
    if (!b->cpu) return;
    const size_t len = (size_t)n * w->n_in;
    float *ref = malloc(len * sizeof(float) + 1);
    if (!ref) abort();
    b->cpu->ops->get_rows(b->cpu, w, ids, n, ref);
    verify(b, V_GET_ROWS, out, ref, len);
    free(ref);
}

static void op_rms_norm(ember_backend *be, float *y, const float *x, const float *w, int64_t n_rows, int64_t n,
                        float eps)
{
    cuda_backend *b = (cuda_backend *)be;
    if (!b->cpu) {
        cu_rms_norm(be, y, x, w, n_rows, n, eps);
        return;
    }
    const size_t len = (size_t)(n_rows * n);
    float *xin = clone(x, len), *ref = clone(x, len);
    b->cpu->ops->rms_norm(b->cpu, ref, xin, w, n_rows, n, eps);
    cu_rms_norm(be, y, xin, w, n_rows, n, eps);
    verify(b, V_RMS_NORM, y, ref, len);
    free(xin);
    free(ref);
}

static void op_matmul(ember_backend *be, const float *x, int64_t n_tokens, int32_t n_w, const ember_weight *const *ws,
                      float *const *ys)
{
    cuda_backend *b = (cuda_backend *)be;
    cu_matmul(be, x, n_tokens, n_w, ws, ys);
    if (!b->cpu) return;
    float *refs[3] = {NULL, NULL, NULL};
    for (int32_t k = 0; k < n_w; k++) {
        refs[k] = malloc((size_t)(n_tokens * ws[k]->n_out) * sizeof(float) + 1);
        if (!refs[k]) abort();
    }
    b->cpu->ops->matmul(b->cpu, x, n_tokens, n_w, ws, refs);
    for (int32_t k = 0; k < n_w; k++) {
        /* at the largest difference, the exact value (weights dequantized by
         * the quant table, f64 sums) says which backend is off */
        const size_t len = (size_t)(n_tokens * ws[k]->n_out);
        double md = 0, mr = 0;
        size_t at = 0;
        for (size_t i = 0; i < len; i++) {
            const double d = fabs((double)ys[k][i] - refs[k][i]);
            if (d > md) { md = d; at = i; }
            if (fabs(refs[k][i]) > mr) mr = fabs(refs[k][i]);
        }
        const ember_quant_traits *qt = ember_quant_traits_get(ws[k]->type);
        if (mr > 0 && md / mr > 1e-2 && qt) {
            const int64_t c = (int64_t)(at / ws[k]->n_out), r = (int64_t)(at % ws[k]->n_out);
            float *row = malloc(sizeof(float) * ws[k]->n_in);
            if (!row) abort();
            qt->to_float((const uint8_t *)ws[k]->data + (size_t)r * ws[k]->row_bytes, row, ws[k]->n_in);
            double e = 0, xmax = 0;
            for (int64_t i = 0; i < ws[k]->n_in; i++) {
                e += (double)row[i] * x[c * ws[k]->n_in + i];
                if (fabs(x[c * ws[k]->n_in + i]) > xmax) xmax = fabs(x[c * ws[k]->n_in + i]);
            }
            fprintf(stderr, "ember: CUDA verify: %s [%lld x %lld] %s tok %lld row %lld: cuda %.6g cpu %.6g exact %.6g "
                    "(max|x| %.3g)\n", ws[k]->name ? ws[k]->name : "?", (long long)ws[k]->n_out,
                    (long long)ws[k]->n_in, ember_type_name(ws[k]->type), (long long)c, (long long)r, ys[k][at],
                    refs[k][at], e, xmax);
            free(row);
        }
        verify(b, V_MATMUL, ys[k], refs[k], len);
        free(refs[k]);
    }
}

static void op_rope(ember_backend *be, float *x, int64_t n_tokens, int32_t n_head, int32_t head_dim, int32_t n_rot,
                    const ember_pos *pos, float base, float freq_scale, ember_rope_mode mode)
{
    cuda_backend *b = (cuda_backend *)be;
    float *ref = b->cpu ? clone(x, (size_t)n_tokens * n_head * head_dim) : NULL;
    cu_rope(be, x, n_tokens, n_head, head_dim, n_rot, pos, base, freq_scale, mode);
    if (!ref) return;
    b->cpu->ops->rope(b->cpu, ref, n_tokens, n_head, head_dim, n_rot, pos, base, freq_scale, mode);
    verify(b, V_ROPE, x, ref, (size_t)n_tokens * n_head * head_dim);
    free(ref);
}

static void op_rope_ext(ember_backend *be, float *x, int64_t n_tokens, int32_t n_head, int32_t head_dim,
                        int32_t n_rot, const ember_pos *pos, float base, float freq_scale, ember_rope_mode mode,
                        const float *freq_factors)
{
    cuda_backend *b = (cuda_backend *)be;
    float *ref = b->cpu ? clone(x, (size_t)n_tokens * n_head * head_dim) : NULL;
    cu_rope_ext(be, x, n_tokens, n_head, head_dim, n_rot, pos, base, freq_scale, mode, freq_factors);
    if (!ref) return;
    b->cpu->ops->rope_ext(b->cpu, ref, n_tokens, n_head, head_dim, n_rot, pos, base, freq_scale, mode, freq_factors);
    verify(b, V_ROPE, x, ref, (size_t)n_tokens * n_head * head_dim);
    free(ref);
}

static void op_geglu(ember_backend *be, float *gate, const float *u, int64_t n)
{
    cuda_backend *b = (cuda_backend *)be;
    float *ref = b->cpu ? clone(gate, (size_t)n) : NULL;
    cu_geglu(be, gate, u, n);
    if (!ref) return;
    b->cpu->ops->geglu(b->cpu, ref, u, n);
    verify(b, V_GEGLU, gate, ref, (size_t)n);
    free(ref);
}

static void op_swiglu(ember_backend *be, float *gate, const float *u, int64_t n)
{
    cuda_backend *b = (cuda_backend *)be;
    float *ref = b->cpu ? clone(gate, (size_t)n) : NULL;
    cu_swiglu(be, gate, u, n);
    if (!ref) return;
    b->cpu->ops->swiglu(b->cpu, ref, u, n);
    verify(b, V_SWIGLU, gate, ref, (size_t)n);
    free(ref);
}

static void op_add(ember_backend *be, float *y, const float *x, int64_t n)
{
    cuda_backend *b = (cuda_backend *)be;
    float *ref = b->cpu ? clone(y, (size_t)n) : NULL;
    cu_add(be, y, x, n);
    if (!ref) return;
    b->cpu->ops->add(b->cpu, ref, x, n);
    verify(b, V_ADD, y, ref, (size_t)n);
    free(ref);
}

static void op_scale(ember_backend *be, float *x, float sc, int64_t n)
{
    cuda_backend *b = (cuda_backend *)be;
    float *ref = b->cpu ? clone(x, (size_t)n) : NULL;
    cu_scale(be, x, sc, n);
    if (!ref) return;
    b->cpu->ops->scale(b->cpu, ref, sc, n);
    verify(b, V_SCALE, x, ref, (size_t)n);
    free(ref);
}

static void op_kv_store(ember_backend *be, const ember_kv_layer_view *kv, const float *k, const float *v,
                        const int64_t *rows, int32_t n)
{
    cuda_backend *b = (cuda_backend *)be;
    cu_kv_store(be, kv, k, v, rows, n);
    if (b->cpu) b->cpu->ops->kv_store(b->cpu, kv, k, v, rows, n); /* host copy for the CPU's attention */
}

static void op_attention(ember_backend *be, const ember_kv_layer_view *kv, const ember_attn_params *p,
                         const float *q, const ember_attn_query *queries, int32_t n, float *out)
{
    cuda_backend *b = (cuda_backend *)be;
    cu_attention(be, kv, p, q, queries, n, out);
    if (!b->cpu) return;
    const size_t len = (size_t)n * p->n_head * p->head_dim_v;
    float *ref = malloc(len * sizeof(float) + 1);
    if (!ref) abort();
    b->cpu->ops->attention(b->cpu, kv, p, q, queries, n, ref);
    verify(b, V_ATTN, out, ref, len);
    free(ref);
}

/* verify mode keeps activations in host memory and runs no graphs */
static void *op_verify_act_alloc(ember_backend *be, size_t bytes)
{
    (void)be;
    void *p = calloc(1, bytes ? bytes : 1);
    if (!p) ember_error(EMBER_ERR_NOMEM, "CUDA backend (verify): cannot allocate %zu bytes of host activations", bytes);
    return p;
}

static void op_verify_act_free(ember_backend *be, void *p)
{
    (void)be;
    free(p);
}

static bool op_verify_step_begin(ember_backend *be, const ember_backend_step *st)
{
    (void)be; (void)st;
    return false;
}

static bool op_verify_step_end(ember_backend *be)
{
    (void)be;
    return true;
}

/* host scratch: the CPU backend of verify mode (device memory: print_memory) */
static uint64_t op_scratch_bytes(const ember_backend *be)
{
    const cuda_backend *b = (const cuda_backend *)be;
    return b->cpu ? b->cpu->ops->scratch_bytes(b->cpu) : 0;
}

static void op_print_memory(const ember_backend *be, FILE *f);

/* verify mode: host activations, no graphs, every op checked */
static const ember_backend_ops cuda_ops_verify = {
    .name = "cuda",
    .free = op_free,
    .get_rows = op_get_rows,
    .rms_norm = op_rms_norm,
    .matmul = op_matmul,
    .rope = op_rope,
    .geglu = op_geglu,
    .swiglu = op_swiglu,
    .add = op_add,
    .scale = op_scale,
    .rope_ext = op_rope_ext,
    .kv_store = op_kv_store,
    .attention = op_attention,
    .kv_copy = cu_kv_copy,
    .act_alloc = op_verify_act_alloc,
    .act_free = op_verify_act_free,
    .host_alloc = op_host_alloc,
    .host_free = op_host_free,
    .copy = cu_copy,
    .upload = cu_upload,
    .softcap = cu_softcap,
    .step_begin = op_verify_step_begin,
    .step_end = op_verify_step_end,
    .scratch_bytes = op_scratch_bytes,
    .print_memory = op_print_memory,
    .logits_top = op_logits_top,
    .logits_sync = op_logits_sync,
};

static const ember_backend_ops cuda_ops = {
    .name = "cuda",
    .free = op_free,
    .get_rows = cu_get_rows,
    .rms_norm = cu_rms_norm,
    .matmul = cu_matmul,
    .rope = cu_rope,
    .rope_ext = cu_rope_ext,
    .geglu = cu_geglu,
    .swiglu = cu_swiglu,
    .add = cu_add,
    .scale = cu_scale,
    .kv_store = cu_kv_store,
    .attention = cu_attention,
    .kv_copy = cu_kv_copy,
    .act_alloc = op_act_alloc,
    .act_free = op_act_free,
    .host_alloc = op_host_alloc,
    .host_free = op_host_free,
    .copy = cu_copy,
    .upload = cu_upload,
    .softcap = cu_softcap,
    .step_begin = op_step_begin,
    .step_end = op_step_end,
    .scratch_bytes = op_scratch_bytes,
    .print_memory = op_print_memory,
    .logits_top = op_logits_top,
    .logits_sync = op_logits_sync,
};

ember_status ember_backend_cuda_new(const ember_backend_options *opt, const ember_backend_limits *lim,
                                    ember_backend **out)
{
    if (!out || !lim) return ember_error(EMBER_ERR_INVALID_ARG, "ember_backend_cuda_new: NULL argument");
    *out = NULL;
    const ember_backend_options o = opt ? *opt : ember_backend_options_default();
    cuda_backend *b = calloc(1, sizeof *b);
    if (!b) return ember_error(EMBER_ERR_NOMEM, "ember_backend_cuda_new: out of memory");
    ember_status st = ember_cuda_new(o.device, &o, &b->cu);
    if (st != EMBER_OK) {
        free(b);
        return st;
    }
    b->base.ops = &cuda_ops;
    b->base.impl = b;
    b->lim = *lim;
    b->f32_act = o.cuda_f32_act;
    b->q8_on = o.cuda_q8;
    b->rope_tab_on = o.cuda_rope_table;
    b->graphs_on = o.cuda_graphs;
    b->fuse_on = o.cuda_fuse;
    b->fuse_head = o.cuda_fuse && o.cuda_fuse_head;
    b->fuse_add = o.cuda_fuse && o.cuda_fuse_add;
    b->exact_attn = o.cuda_exact;
    b->attn_tc = o.cuda_attn_tc;
    /* F16 KV only; activations on the device; graphs key on the batch
     * shape, not the layer count, so no layer-skip */
    b->base.caps = (ember_backend_caps){
        .device_activations = true, .graphed_steps = b->graphs_on, .layer_skip = false, .lazy_placement = true,
        .kv_types = 1u << EMBER_TYPE_F16,
    };
    if (o.cuda_verify) {
        b->base.ops = &cuda_ops_verify;
        b->base.caps.device_activations = false;
        b->base.caps.graphed_steps = false;
        ember_backend_options co = o;
        co.n_threads = 0;
        st = ember_backend_cpu_new(&co, lim, &b->cpu);
        if (st != EMBER_OK) {
            ember_cuda_free(b->cu);
            free(b);
            return st;
        }
    }
    /* rounded activations of the widest matmul, allocated once (graphs
     * captured later keep these addresses). Only the first slot: the others
     * serve a matmul whose weights want different activation formats (rare:
     * E4B's never do), grown by stage() in the first eager step that needs
     * them (20 MiB each for E4B at n_ubatch 512). */
    const size_t round_bytes = (size_t)(lim->max_tokens > 0 ? lim->max_tokens : 1) *
                               (size_t)(lim->max_n_in > 0 ? lim->max_n_in : 1) * sizeof(float);
    for (int k = 0; k < 1; k++) {
        b->stage_bytes[SLOT_ROUND + k] = round_bytes;
        st = ember_cuda_malloc(b->cu, round_bytes, &b->stage[SLOT_ROUND + k]);
        if (st != EMBER_OK) {
            b->stage_bytes[SLOT_ROUND + k] = 0;
            op_free(&b->base);
            return st;
        }
    }
    *out = &b->base;
    return EMBER_OK;
}

/* The memory report (cuda_report.c prints it) from what the backend holds. */
void ember_backend_cuda_fusion_counts(const ember_backend *be, ember_cuda_fusion_counts *out)
{
    *out = ((const cuda_backend *)be)->fused;
}

static void op_print_memory(const ember_backend *be, FILE *f)
{
    const cuda_backend *b = (const cuda_backend *)be;
    if (!f) return;
    ember_cuda_report r = {.n_ctx = b->lim.max_kv_tokens, .n_ubatch = b->lim.max_tokens, .n_chunks = b->n_chunks,
                           .n_rope_tables = b->n_rtab, .up_pin_bytes = b->up_pin_bytes};
    ember_cuda_mem_stats(b->cu, &r.mem);
    r.weight_bytes = b->cat_bytes[CAT_WEIGHT], r.weight_count = b->cat_count[CAT_WEIGHT];
    r.vec_bytes = b->cat_bytes[CAT_VEC], r.vec_count = b->cat_count[CAT_VEC];
    r.kv_bytes = b->cat_bytes[CAT_KV], r.kv_count = b->cat_count[CAT_KV];
    for (int32_t i = 0; i < b->n_chunks; i++) {
        r.arena_bytes += b->chunks[i].size;
        r.arena_used += b->chunks[i].used;
    }
    for (int i = 0; i < MAX_ACT; i++) r.act_bytes += b->act_bytes[i], r.pinned_bytes += b->pinned_bytes[i];
    for (int i = 0; i < STAGE_SLOTS; i++) {
        if (i >= SLOT_ROUND && i < SLOT_OUT) r.round_bytes += b->stage_bytes[i];
        else r.io_bytes += b->stage_bytes[i];
    }
    for (int32_t i = 0; i < b->n_rtab; i++) r.rope_bytes += b->rtab[i].bytes;
    r.step_bytes = (uint64_t)b->d_step_n * sizeof(int32_t);
    ember_cuda_report_print(&r, f);
}
