/*
 * step.h — a step (one forward pass over a micro-batch): how a caller runs
 * one through a backend (ember_backend_run_step, the only place that knows
 * the step_begin/step_end protocol of backend.h), and a step as an
 * explicit list of nodes, recorded by a backend between ember_step_begin
 * and ember_step_end: one node per op call {op kind, the backend's variant
 * of it, operands}. Two steps are the same step when they are equal node
 * by node; a backend replays a captured step (a CUDA graph) only then.
 *
 * Owns: the step protocol's loop, recording (amortised growth, no
 * allocation once warm), equality, copying a recorded step.
 * Must not: know any device (plain C, tested on the CPU), or hash: equality
 * compares every recorded word.
 *
 * Operands are 64-bit words in call order, each marked pointer or value:
 * pointers (activation memory, weights, KV buffers and the host addresses
 * that key their device copies, as recorded; host memory that a step
 * stages in or out is EMBER_STEP_HOST_IN / EMBER_STEP_HOST_OUT, its
 * address not part of the step) and values (shapes and integer
 * parameters, float parameters by their bits). A node of more than
 * EMBER_STEP_MAX_ARGS operands breaks the step (no graph for it: the
 * backend runs it op by op).
 */
#ifndef EMBER_BACKEND_STEP_H
#define EMBER_BACKEND_STEP_H

#include "ember.h"
#include "backend/backend.h"

#include <stdbool.h>
#include <stdint.h>

/* Run one forward pass over the micro-batch st on be: forward(arg) issues
 * the pass's ops. It runs not at all (be replays the whole step itself:
 * step_begin returned true), once, or twice (a replay that did not match
 * what was captured: the second pass runs op by op). Returns how many
 * times forward ran (0, 1 or 2). Outputs (st->logits) are written, or left
 * on the device for logits_sync / logits_top, when it returns. */
int ember_backend_run_step(ember_backend *be, const struct ember_backend_step *st, void (*forward)(void *arg),
                           void *arg);

/* What a node does: the op table's ops (backend.h) as a backend records them. */
typedef enum ember_step_op {
    EMBER_STEP_NONE = 0,
    EMBER_STEP_COPY,        /* copy */
    EMBER_STEP_SOFTCAP,     /* softcap */
    EMBER_STEP_GET_ROWS,    /* get_rows */
    EMBER_STEP_RMS_NORM,    /* rms_norm */
    EMBER_STEP_MATMUL,      /* matmul on float (or rounded) activations */
    EMBER_STEP_MATMUL_Q8,   /* matmul on Q8-quantized activations */
    EMBER_STEP_ROPE,        /* rope, rope_ext */
    EMBER_STEP_GLU,         /* geglu, swiglu (the activation is a value) */
    EMBER_STEP_ADD,         /* add */
    EMBER_STEP_SCALE,       /* scale */
    EMBER_STEP_KV_STORE,    /* kv_store */
    EMBER_STEP_ATTENTION,   /* attention */
    EMBER_STEP_UPLOAD,      /* upload (host input of a step) */
    EMBER_STEP_CONV1D_SILU,        /* conv1d_silu */
    EMBER_STEP_GATED_DELTA_RULE,   /* gated_delta_rule */
    EMBER_STEP_SIGMOID_MUL,        /* sigmoid_mul */
    EMBER_STEP_COPY_STRIDED,       /* copy_strided */
    EMBER_STEP_OP_N
} ember_step_op;

/* Operand words standing for host memory: its address is not recorded. */
#define EMBER_STEP_HOST_IN ((const void *)(uintptr_t)1)
#define EMBER_STEP_HOST_OUT ((const void *)(uintptr_t)2)

enum { EMBER_STEP_MAX_ARGS = 16 };   /* operands of one node */

typedef struct ember_step_node {
    uint32_t op;         /* ember_step_op */
    uint32_t flags;      /* the backend's variant of the op (which fusion it took), compared as is */
    uint32_t at;         /* its first operand in ember_step.arg */
    uint16_t n_arg;      /* operands, <= EMBER_STEP_MAX_ARGS */
    uint16_t ptr_mask;   /* bit i set: operand i is a pointer, else a value */
} ember_step_node;

typedef struct ember_step {
    ember_step_node *node;   /* [n] */
    uint64_t *arg;           /* [n_args] the operands of all nodes, in order */
    int32_t n, cap;          /* nodes recorded, room */
    uint32_t n_args, cap_args;
    bool open;               /* between ember_step_begin and ember_step_end */
    bool broken;             /* something could not be recorded: equal to no step */
} ember_step;

/* An empty step (no memory held); ember_step_free releases what recording
 * allocated and leaves s empty again. */
void ember_step_init(ember_step *s);
void ember_step_free(ember_step *s);

/* Start recording s afresh (its nodes dropped, memory kept) / stop. Nodes
 * and operands given while s is not open are ignored. */
void ember_step_begin(ember_step *s);
void ember_step_end(ember_step *s);

/* Append a node {op, flags} with no operands yet; the operand calls below
 * add to the last node. Out of memory marks s broken (never equal). */
static inline void ember_step_node_add(ember_step *s, ember_step_op op, uint32_t flags);
/* Operand of the last node: a pointer, an integer value, a float value (its
 * bits: -0.f and 0.f differ, a NaN equals the same NaN). A node without
 * room (EMBER_STEP_MAX_ARGS), or no node yet, marks s broken. */
static inline void ember_step_ptr(ember_step *s, const void *p);
static inline void ember_step_i64(ember_step *s, int64_t v);
static inline void ember_step_f32(ember_step *s, float f);

/* True when neither step is broken and they hold the same nodes: equal op,
 * flags, number of operands, kinds and words, node for node, and the same
 * number of nodes. */
bool ember_step_equal(const ember_step *a, const ember_step *b);
/* The first node index where a and b differ (min(a->n, b->n) when one is a
 * prefix of the other), -1 when they are equal; 0 when either is broken. */
int32_t ember_step_first_diff(const ember_step *a, const ember_step *b);

/* dst = a closed copy of src's nodes and operands (dst's memory reused or
 * grown; broken copies as broken). Errors: EMBER_ERR_NOMEM (dst is then
 * broken). */
ember_status ember_step_copy(ember_step *dst, const ember_step *src);

/* Operand i (< node n_arg) of node `node` (< s->n) as its word; *is_ptr
 * (if not NULL) says whether it is a pointer. */
uint64_t ember_step_arg(const ember_step *s, int32_t node, int32_t i, bool *is_ptr);

/* Short name of an op ("matmul_q8"); "?" outside the enum. */
const char *ember_step_op_name(ember_step_op op);

/* ---- the recording calls, inline: a backend makes about ten per op ---- */

/* Room for one more node (node true) or operand; false (s broken) when
 * memory ran out. The slow path of the calls below (step.c). */
bool ember_step_reserve_(ember_step *s, bool node);

static inline void ember_step_node_add(ember_step *s, ember_step_op op, uint32_t flags)
{
    if (!s->open || s->broken) return;
    if (s->n == s->cap && !ember_step_reserve_(s, true)) return;
    s->node[s->n++] = (ember_step_node){.op = (uint32_t)op, .flags = flags, .at = s->n_args};
}

static inline void ember_step_put_(ember_step *s, uint64_t w, bool ptr)
{
    if (!s->open || s->broken) return;
    if (s->n == 0 || s->node[s->n - 1].n_arg == EMBER_STEP_MAX_ARGS) {
        s->broken = true;
        return;
    }
    if (s->n_args == s->cap_args && !ember_step_reserve_(s, false)) return;
    ember_step_node *nd = &s->node[s->n - 1];
    if (ptr) nd->ptr_mask |= (uint16_t)(1u << nd->n_arg);
    nd->n_arg++;
    s->arg[s->n_args++] = w;
}

static inline void ember_step_ptr(ember_step *s, const void *p) { ember_step_put_(s, (uint64_t)(uintptr_t)p, true); }
static inline void ember_step_i64(ember_step *s, int64_t v) { ember_step_put_(s, (uint64_t)v, false); }

static inline void ember_step_f32(ember_step *s, float f)
{
    union { float f; uint32_t u; } b = {.f = f};
    ember_step_put_(s, b.u, false);
}

#endif
