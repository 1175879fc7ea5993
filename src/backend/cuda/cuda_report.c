/*
 * cuda_report.c — the CUDA backend's memory report: the op table's
 * print_memory (cb_print_memory) gathers what the backend holds into an
 * ember_cuda_report, ember_cuda_report_print (backend_cuda.h) prints it.
 *
 * Owns: the wording and the arithmetic of the report: what is ember's
 * (device copies, scratch, staging, the context's own allocations), the
 * driver's stack reservation and the pinned host buffers, in MiB.
 * Must not: change the backend's state (it only reads the counters that
 * cuda_mem.c and the ops keep) or touch the device.
 */
#include "backend/cuda/cuda_internal.h"

static double mib(uint64_t b) { return (double)b / (1024.0 * 1024.0); }

void ember_cuda_report_print(const ember_cuda_report *r, FILE *f)
{
    if (!r || !f) return;
    const ember_cuda_mem_stats_t *st = &r->mem;
    const uint64_t ours = st->device_bytes + st->scratch_bytes + st->counters_bytes + st->cublas_ws_bytes;
    fprintf(f, "ember: GPU memory by category (MiB; n_ctx %lld, n_ubatch %lld):\n", (long long)r->n_ctx,
            (long long)r->n_ubatch);
    fprintf(f, "ember:   weights %.1f (%lld matrices) + norm/rope vectors %.1f (%lld) + KV cache %.1f (%lld buffers)"
               " in %d arena chunks of %.1f (%.1f unused)\n",
            mib(r->weight_bytes), (long long)r->weight_count, mib(r->vec_bytes), (long long)r->vec_count,
            mib(r->kv_bytes), (long long)r->kv_count, (int)r->n_chunks, mib(r->arena_bytes),
            mib(r->arena_bytes - r->arena_used));
    fprintf(f, "ember:   activation scratch %.1f; rounded-activation staging %.1f; host in/out staging (logits) %.1f;"
               " step arrays %.2f; RoPE tables %.1f (%d)\n",
            mib(r->act_bytes), mib(r->round_bytes), mib(r->io_bytes), mib(r->step_bytes), mib(r->rope_bytes),
            (int)r->n_rope_tables);
    if (r->rs_count > 0)
        fprintf(f, "ember:   recurrent state %.1f (%d blocks: live cells and snapshots)\n", mib(r->rs_bytes),
                (int)r->rs_count);
    fprintf(f, "ember:   kernel scratch (prefill GEMM chunks, attention partials) %.1f; attention counters %.2f;"
               " cuBLAS workspace %.1f; GELU table (module) %.2f\n",
            mib(st->scratch_bytes), mib(st->counters_bytes), mib(st->cublas_ws_bytes), mib(st->gelu_table_bytes));
    fprintf(f, "ember:   = %.1f allocated by ember; driver stack reservation %.1f (%llu B/thread; part of the CUDA"
               " context); pinned host: logits %.1f, PLE upload %.1f, mapped weights %.1f\n",
            mib(ours), mib(st->stack_bytes), (unsigned long long)st->stack_per_thread, mib(r->pinned_bytes),
            mib(r->up_pin_bytes), mib(st->host_bytes - r->pinned_bytes - r->up_pin_bytes));
}

void cb_print_memory(const ember_backend *be, FILE *f)
{
    const cuda_backend *b = (const cuda_backend *)be;
    if (!f) return;
    ember_cuda_report r = {.n_ctx = b->lim.max_kv_tokens, .n_ubatch = b->lim.max_tokens, .n_chunks = b->n_chunks,
                           .n_rope_tables = b->n_rtab, .up_pin_bytes = b->up_pin_bytes,
                           .rs_bytes = b->rs_bytes, .rs_count = b->n_rs};
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
