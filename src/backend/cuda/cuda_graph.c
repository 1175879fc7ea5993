/*
 * cuda_graph.c — the CUDA backend's steps: step_begin uploads the step
 * arrays (tokens, positions, KV cells, block tables) once per micro-batch,
 * and decode steps of one shape (batch size, logits rows, sequence
 * pattern) run as one CUDA graph: the first step of a shape runs op by op,
 * the second is captured, later ones replay it. A capture keeps the step
 * its ops recorded (b->rec, step.h: one node per op with its operands and
 * the fusion it took); a replay records the step again without launching
 * anything and launches the graph only when the two are equal node for
 * node (else the graph is dropped for good and the caller runs the pass
 * again op by op). After TRUST_REPLAYS equal replays a step without host
 * inputs replays without its forward pass.
 *
 * Owns: the graph table, the captured steps, capture/replay decisions, the
 * host outputs deferred to step_end.
 * Must not: synchronise with the host inside a step except to return host
 * outputs, or allocate device memory during a capture.
 */
#include "backend/cuda/cuda_internal.h"

#include <stdio.h>
#include <string.h>

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

/* A step that uploaded host data (cu_upload) waits for its launched graph,
 * so that the next step may refill the pinned buffer the graph reads. */
static void upload_done(cuda_backend *b)
{
    if (b->host_in) CK("upload (sync)", ember_cuda_synchronize(b->cu));
}

/* Replays verified this many times run without the forward pass. */
enum { TRUST_REPLAYS = 2 };

bool cb_step_begin(ember_backend *be, const ember_backend_step *st)
{
    cuda_backend *b = (cuda_backend *)be;
    const int32_t n = st->n, bt = st->block_tokens;
    b->in_step = true;
    b->mode = M_EAGER;
    b->failed = false;
    b->whole = false;
    ember_step_begin(&b->rec);
    b->cur = NULL;
    b->n_pend = 0;
    b->out_slots = 0;
    b->host_in = false;
    b->up_off = 0;
    b->s_tok = st->token;
    b->s_pos = st->pos;
    b->s_kv_row = st->kv_row;
    b->s_query = st->query;
    b->s_seq = st->seq_id;
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
    /* the attention's query positions when some differ from the tokens'
     * (a non-causal block: every row sees the whole block) */
    bool qp = false;
    for (int32_t i = 0; i < n && !qp; i++) qp = st->query[i].pos != st->pos[i];
    /* pack [tok][pos][cells][seq][sid][cells_swa][table][table_swa][qpos] and upload it once */
    int32_t n_seq = 0;
    const size_t n_head_arrays = swa ? 6 : 5;
    int32_t *h = cb_host_i32(b, (size_t)n * (n_head_arrays + (qp ? 1 : 0) + (swa ? 2 : 1) * (size_t)max_pages));
    int32_t *tok = h, *pos = h + n, *cells = h + 2 * n, *seq = h + 3 * n, *sid = h + 4 * n, *cells_swa = h + 5 * n;
    int32_t *tab = h + n_head_arrays * n;
    for (int32_t i = 0; i < n; i++) {
        tok[i] = st->token[i];
        pos[i] = st->pos[i];
        sid[i] = st->seq_id ? st->seq_id[i] : -1;
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
    size_t total = (size_t)n * n_head_arrays + (size_t)n_seq * max_pages * (swa ? 2 : 1);
    b->s_qpos = (size_t)n;   /* the tokens' positions */
    if (qp) {
        b->s_qpos = total;
        for (int32_t i = 0; i < n; i++) h[total + (size_t)i] = st->query[i].pos;
        total += (size_t)n;
    }
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
     * pos, cells, seq, sid, then the table */
    CK("step arrays", ember_cuda_upload(b->cu, b->d_step, h, total * sizeof(int32_t)));
    if (st->token_top)   /* tokens from the heads of the last logits_top_start, on the device (tok sits first) */
        CK("step tokens from heads",
           ember_cuda_head_tokens(b->cu, b->top_res_dev, b->top_n, b->top_k, st->token_top, n, b->d_step));

    /* graphs: small steps (decode) whose capacity-bound shapes are fixed */
    if (!b->graphs_on || n > GRAPH_MAX_N || max_ctx != (int32_t)b->lim.max_kv_tokens) return false;
    uint64_t key = 0x51ed270b1ull;
    key = key * 1099511628211ull ^ (uint64_t)n;
    key = key * 1099511628211ull ^ (uint64_t)st->n_out;
    key = key * 1099511628211ull ^ (uint64_t)n_seq;
    key = key * 1099511628211ull ^ (uint64_t)swa;
    key = key * 1099511628211ull ^ (uint64_t)qp;
    key = key * 1099511628211ull ^ (uint64_t)(uint32_t)st->graph_tag;
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
            /* the forward pass would only record the step already checked */
            b->whole = true;
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
        if (!cb_defer_output(b, b->pend_host[i], b->pend_dev[i], b->pend_bytes[i]))
            CK("download", ember_cuda_download(b->cu, b->pend_host[i], b->pend_dev[i], b->pend_bytes[i]));
    b->n_pend = 0;
}

bool cb_step_end(ember_backend *be)
{
    cuda_backend *b = (cuda_backend *)be;
    cb_flush(b);
    graph_entry *e = b->cur;
    bool ok = true;
    if (b->mode == M_EAGER) {
        if (e) e->seen++;
    } else if (b->mode == M_CAPTURE) {
        ember_cuda_graph *g = NULL;
        const ember_status st = ember_cuda_graph_end(b->cu, &g);
        ember_step_end(&b->rec);
        /* a step that could not be recorded whole could never be matched */
        if (st != EMBER_OK || b->failed || b->rec.broken || ember_step_copy(&e->step, &b->rec) != EMBER_OK) {
            if (b->graph_log)
                fprintf(stderr, "ember: cuda graph: capture refused (%s), the step runs op by op\n",
                        st != EMBER_OK ? "capture failed" : b->failed ? "an op could not be captured"
                        : b->rec.broken ? "the step could not be recorded whole" : "out of memory");
            ember_cuda_graph_free(g);
            e->disabled = true;
            ok = false;
        } else {
            e->g = g;
            e->n_pend = b->n_pend;
            e->verified = 0;
            e->pend_is_logits = b->n_pend == 1 && b->pend_host[0] == b->s_logits;
            e->host_in = b->host_in;
            for (int32_t i = 0; i < b->n_pend; i++) {
                e->pend_dev[i] = b->pend_dev[i];
                e->pend_bytes[i] = b->pend_bytes[i];
            }
            CK("graph launch", ember_cuda_graph_launch(b->cu, g));
            b->fused.graph_launches++;
            flush_pending(b);
            upload_done(b);
        }
    } else {
        ember_step_end(&b->rec);
        const bool same = b->whole || ember_step_equal(&b->rec, &e->step);
        if (b->failed || !same || b->n_pend != e->n_pend) {
            if (b->graph_log) {
                const int32_t d = same ? -1 : ember_step_first_diff(&b->rec, &e->step);
                const ember_step *r = d >= 0 && d < b->rec.n ? &b->rec : (d >= 0 && d < e->step.n ? &e->step : NULL);
                fprintf(stderr, "ember: cuda graph: replay dropped (%s%s%d%s%s), the step runs op by op\n",
                        b->failed ? "an op could not be replayed" : !same ? "steps differ" : "outputs differ",
                        d >= 0 ? " at node " : "", d >= 0 ? (int)d : 0, r ? ", " : "",
                        r ? ember_step_op_name((ember_step_op)r->node[d].op) : "");
            }
            CK("graph", ember_cuda_synchronize(b->cu));
            ember_cuda_graph_free(e->g);
            e->g = NULL;
            e->disabled = true;
            ok = false;
        } else {
            if (b->n_pend != 1 || b->pend_host[0] != b->s_logits) e->pend_is_logits = false;
            e->verified++;
            CK("graph launch", ember_cuda_graph_launch(b->cu, e->g));
            b->fused.graph_launches++;
            flush_pending(b);
            upload_done(b);
        }
    }
    b->n_pend = 0;
    b->failed = false;
    b->whole = false;
    b->cur = NULL;
    ember_step_end(&b->rec);
    if (!ok) {   /* the caller runs the pass again, op by op */
        b->mode = M_EAGER;
        b->up_off = 0;
        b->out_slots = 0;
        return false;
    }
    b->mode = M_EAGER;
    b->in_step = false;
    b->defer_logits = false;
    return true;
}
