/*
 * step.c — running a step through a backend, a recorded step and
 * node-by-node equality (step.h).
 *
 * Owns: the step_begin/step_end loop; the node and operand arrays (grown by
 * doubling; once they hold the largest step, recording allocates nothing).
 * Must not: know devices, or decide what a backend records.
 */
#include "backend/step.h"

#include "base/status.h"

#include <stdlib.h>
#include <string.h>

int ember_backend_run_step(ember_backend *be, const ember_backend_step *st, void (*forward)(void *arg), void *arg)
{
    int runs = 0;
    if (!be->ops->step_begin(be, st)) {   /* true: the backend replays the whole step */
        forward(arg);
        runs++;
    }
    if (!be->ops->step_end(be)) {   /* a graph replay that did not match: run op by op */
        forward(arg);
        runs++;
        be->ops->step_end(be);
    }
    return runs;
}

void ember_step_init(ember_step *s) { memset(s, 0, sizeof *s); }

void ember_step_free(ember_step *s)
{
    free(s->node);
    free(s->arg);
    memset(s, 0, sizeof *s);
}

void ember_step_begin(ember_step *s)
{
    s->n = 0;
    s->n_args = 0;
    s->broken = false;
    s->open = true;
}

void ember_step_end(ember_step *s) { s->open = false; }

static bool grow_nodes(ember_step *s, int32_t want)
{
    if (want <= s->cap) return true;
    int32_t cap = s->cap ? s->cap : 256;
    while (cap < want) cap *= 2;
    ember_step_node *p = realloc(s->node, (size_t)cap * sizeof *p);
    if (!p) return false;
    s->node = p;
    s->cap = cap;
    return true;
}

static bool grow_args(ember_step *s, uint32_t want)
{
    if (want <= s->cap_args) return true;
    uint32_t cap = s->cap_args ? s->cap_args : 1024;
    while (cap < want) cap *= 2;
    uint64_t *p = realloc(s->arg, (size_t)cap * sizeof *p);
    if (!p) return false;
    s->arg = p;
    s->cap_args = cap;
    return true;
}

bool ember_step_reserve_(ember_step *s, bool node)
{
    const bool ok = node ? grow_nodes(s, s->n + 1) : grow_args(s, s->n_args + 1);
    if (!ok) s->broken = true;
    return ok;
}

static bool node_equal(const ember_step *a, const ember_step *b, int32_t i)
{
    const ember_step_node *x = &a->node[i], *y = &b->node[i];
    if (x->op != y->op || x->flags != y->flags || x->n_arg != y->n_arg || x->ptr_mask != y->ptr_mask) return false;
    return x->n_arg == 0 || memcmp(&a->arg[x->at], &b->arg[y->at], (size_t)x->n_arg * sizeof(uint64_t)) == 0;
}

int32_t ember_step_first_diff(const ember_step *a, const ember_step *b)
{
    if (a->broken || b->broken) return 0;
    const int32_t n = a->n < b->n ? a->n : b->n;
    for (int32_t i = 0; i < n; i++)
        if (!node_equal(a, b, i)) return i;
    return a->n == b->n ? -1 : n;
}

bool ember_step_equal(const ember_step *a, const ember_step *b)
{
    if (a->broken || b->broken || a->n != b->n || a->n_args != b->n_args) return false;
    /* equal node by node; with equal operand counts before each node the
     * `at` fields agree too, so the arrays compare as blocks */
    if (a->n && memcmp(a->node, b->node, (size_t)a->n * sizeof *a->node) != 0) return false;
    return a->n_args == 0 || memcmp(a->arg, b->arg, (size_t)a->n_args * sizeof *a->arg) == 0;
}

ember_status ember_step_copy(ember_step *dst, const ember_step *src)
{
    if (dst == src) return EMBER_OK;
    if (!grow_nodes(dst, src->n) || !grow_args(dst, src->n_args)) {
        dst->n = 0;
        dst->n_args = 0;
        dst->broken = true;
        dst->open = false;
        return ember_error(EMBER_ERR_NOMEM, "cannot copy a step of %d nodes", (int)src->n);
    }
    if (src->n) memcpy(dst->node, src->node, (size_t)src->n * sizeof *src->node);
    if (src->n_args) memcpy(dst->arg, src->arg, (size_t)src->n_args * sizeof *src->arg);
    dst->n = src->n;
    dst->n_args = src->n_args;
    dst->broken = src->broken;
    dst->open = false;
    return EMBER_OK;
}

uint64_t ember_step_arg(const ember_step *s, int32_t node, int32_t i, bool *is_ptr)
{
    const ember_step_node *nd = &s->node[node];
    if (is_ptr) *is_ptr = (nd->ptr_mask >> i) & 1u;
    return s->arg[nd->at + (uint32_t)i];
}

const char *ember_step_op_name(ember_step_op op)
{
    static const char *const names[EMBER_STEP_OP_N] = {
        [EMBER_STEP_NONE] = "none",         [EMBER_STEP_COPY] = "copy",         [EMBER_STEP_SOFTCAP] = "softcap",
        [EMBER_STEP_GET_ROWS] = "get_rows", [EMBER_STEP_RMS_NORM] = "rms_norm", [EMBER_STEP_MATMUL] = "matmul",
        [EMBER_STEP_MATMUL_Q8] = "matmul_q8", [EMBER_STEP_ROPE] = "rope",       [EMBER_STEP_GLU] = "glu",
        [EMBER_STEP_ADD] = "add",           [EMBER_STEP_SCALE] = "scale",       [EMBER_STEP_KV_STORE] = "kv_store",
        [EMBER_STEP_ATTENTION] = "attention", [EMBER_STEP_UPLOAD] = "upload",
        [EMBER_STEP_CONV1D_SILU] = "conv1d_silu", [EMBER_STEP_GATED_DELTA_RULE] = "gated_delta_rule",
        [EMBER_STEP_SIGMOID_MUL] = "sigmoid_mul", [EMBER_STEP_COPY_STRIDED] = "copy_strided",
    };
    return (unsigned)op < EMBER_STEP_OP_N ? names[op] : "?";
}
