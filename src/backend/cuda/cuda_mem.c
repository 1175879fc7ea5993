/*
 * cuda_mem.c — the CUDA backend's memory: device copies of host data found
 * again by host address, the arena chunks that hold them, staging slots,
 * and the way an op's operand reaches the device (activation memory as is,
 * host memory staged around the op, host outputs deferred to step_end).
 *
 * Owns: the copy table (open addressing by host address), the arena
 * (bump allocation over 64 MiB chunks), staging slots and host index
 * scratch, and the operand words of the recorded step (step.h) that say
 * where each operand lives.
 * Must not: allocate device memory inside a capture or replay (it marks
 * the step failed instead), or launch kernels.
 */
#include "backend/cuda/cuda_internal.h"
#include "quant/quant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- staging ---------------------------------------------------------------- */

void *cb_stage(cuda_backend *b, int slot, size_t bytes)
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

int32_t *cb_host_i32(cuda_backend *b, size_t n)
{
    if (n > b->host_i32_n) {
        free(b->host_i32);
        b->host_i32_n = n + n / 2 + 64;
        b->host_i32 = malloc(b->host_i32_n * sizeof(int32_t));
        if (!b->host_i32) {
            ember_error(EMBER_ERR_NOMEM, "cannot allocate %zu index entries", b->host_i32_n);
            cb_die("index staging");
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

dev_copy *cb_find_copy(cuda_backend *b, const void *host)
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
            cb_die("weights");
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
const ember_cuda_tensor *cb_weight(cuda_backend *b, const ember_weight *w)
{
    dev_copy *c = cb_find_copy(b, w->data);
    if (c) return &c->t;
    if (b->mode != M_EAGER) {
        b->failed = true;
        return NULL;
    }
    if (!ember_cuda_type_supported(w->type)) {
        ember_error(EMBER_ERR_UNSUPPORTED, "cuda: no kernels for tensor type %s (%u)", ember_type_name(w->type), w->type);
        cb_die(w->name ? w->name : "weight upload");
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
const float *cb_vec(cuda_backend *b, const float *h, int64_t n)
{
    if (!h) return NULL;
    dev_copy *c = cb_find_copy(b, h);
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
void *cb_kv_dev(cuda_backend *b, void *h, size_t bytes)
{
    dev_copy *c = cb_find_copy(b, h);
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

bool cb_is_act(const cuda_backend *b, const void *p)
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
const float *cb_in_f(cuda_backend *b, int slot, const float *p, size_t n)
{
    if (!p) return NULL;
    if (cb_is_act(b, p)) {
        cb_rec_ptr(b, p);
        return p;
    }
    cb_rec_ptr(b, EMBER_STEP_HOST_IN);
    if (b->mode != M_EAGER) {
        const void *d = pending(b, p);
        if (!d) b->failed = true;
        return d;
    }
    if (b->lg_pending && p == b->lg_host && n * sizeof(float) <= b->lg_bytes) return b->lg_dev;
    float *d = cb_stage(b, slot, n * sizeof(float));
    CK("upload", ember_cuda_upload(b->cu, d, p, n * sizeof(float)));
    return d;
}

/* Device pointer to write n floats meant for p; out_done finishes it. In a
 * capture or replay a host output is deferred to step_end. */
float *cb_out_f(cuda_backend *b, int slot, float *p, size_t n)
{
    if (cb_is_act(b, p)) {
        cb_rec_ptr(b, p);
        return p;
    }
    cb_rec_ptr(b, EMBER_STEP_HOST_OUT);
    const void *d = b->mode == M_EAGER ? NULL : pending(b, p);
    if (d) return (float *)d;
    if (b->in_step && slot >= SLOT_OUT) {
        /* a slot of its own in the step, the same in its eager runs and its
         * capture (so the capture finds it grown) */
        int s = slot;
        while (s < STAGE_SLOTS && (b->out_slots >> s & 1u)) s++;
        if (s == STAGE_SLOTS) {
            if (b->mode != M_EAGER) {
                b->failed = true;
                return NULL;
            }
            s = slot;   /* eager: each output is downloaded by its op (logits may wait: they come last) */
        }
        b->out_slots |= 1u << s;
        slot = s;
    }
    if (b->mode == M_EAGER) return cb_stage(b, slot, n * sizeof(float));
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
        d = cb_stage(b, slot, n * sizeof(float));
    }
    b->pend_host[i] = p;
    b->pend_dev[i] = d;
    b->pend_bytes[i] = n * sizeof(float);
    b->n_pend++;
    return (float *)d;
}

/* A step's logits stay on the device when it allows it (logits_defer). */
bool cb_defer_output(cuda_backend *b, float *p, const void *d, size_t bytes)
{
    if (!b->in_step || !b->defer_logits || p != b->s_logits) return false;
    b->lg_pending = true;
    b->lg_host = p;
    b->lg_dev = d;
    b->lg_bytes = bytes;
    return true;
}

void cb_out_done(cuda_backend *b, float *p, const float *d, size_t n)
{
    if (b->mode == M_EAGER && !cb_is_act(b, p) && !cb_defer_output(b, p, d, n * sizeof(float)))
        CK("download", ember_cuda_download(b->cu, p, d, n * sizeof(float)));
}

/* In-place operand: activation memory, a deferred output, or (eager, host
 * memory) uploaded to `slot` and downloaded again by out_done. */
float *cb_io_f(cuda_backend *b, int slot, float *p, size_t n) { return (float *)cb_in_f(b, slot, p, n); }

/* An op's index array that is not one of the step's (outside a step, or
 * another array than step_begin saw): an upload. */
const int32_t *cb_up_i32(cuda_backend *b, int slot, const int32_t *h, size_t n)
{
    if (b->mode != M_EAGER) {
        b->failed = true;
        return NULL;
    }
    void *d = cb_stage(b, slot, n * sizeof(int32_t));
    CK("upload", ember_cuda_upload(b->cu, d, h, n * sizeof(int32_t)));
    return d;
}

/* Grow a device (or pinned host) buffer outside any step. */
ember_status cb_grow_dev(cuda_backend *b, void **p, size_t *have, size_t want, bool host)
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
