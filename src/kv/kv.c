/*
 * kv.c — paged KV cache: block pool, reference counts, per-sequence tables.
 *
 * Owns: allocation of K/V rows, the free list (a stack of block ids),
 * copy-on-write of a shared last block, and the sequence edits (remove,
 * truncate, fork). Must not: touch K/V contents except to copy a block.
 */
#include "kv/kv.h"
#include "base/status.h"

#include <stdlib.h>
#include <string.h>

typedef struct kv_seq {
    int32_t len;
    int32_t *blocks;   /* [max_blocks_per_seq] */
} kv_seq;

struct ember_kv {
    ember_kv_params p;
    size_t k_row_bytes, v_row_bytes;
    uint8_t **k, **v;  /* per layer */
    int32_t *refs;     /* [n_blocks] */
    int32_t *free_stack;
    int32_t n_free;
    int32_t max_blocks_per_seq;
    kv_seq *seqs;
    uint64_t bytes;
    ember_kv_copy_hook copy_hook;
    void *copy_ud;
};

void ember_kv_set_copy_hook(ember_kv *kv, ember_kv_copy_hook hook, void *ud)
{
    kv->copy_hook = hook;
    kv->copy_ud = ud;
}

static bool kv_type_ok(uint32_t t) { return t == EMBER_TYPE_F32 || t == EMBER_TYPE_F16 || t == EMBER_TYPE_Q8_0; }

ember_status ember_kv_new(const ember_kv_params *p, ember_kv **out)
{
    *out = NULL;
    if (p->n_layer < 1 || p->n_embd_k < 1 || p->n_embd_v < 1 || p->block_tokens < 1 || p->n_blocks < 1 ||
        p->n_seq_max < 1 || p->n_ctx < 1)
        return ember_error(EMBER_ERR_INVALID_ARG, "kv: sizes must be positive (n_layer %d, n_embd_k %lld, n_embd_v %lld, block_tokens %d, n_blocks %d, n_seq_max %d, n_ctx %d)",
                           p->n_layer, (long long)p->n_embd_k, (long long)p->n_embd_v, p->block_tokens, p->n_blocks, p->n_seq_max, p->n_ctx);
    if (!kv_type_ok(p->type_k) || !kv_type_ok(p->type_v))
        return ember_error(EMBER_ERR_INVALID_ARG, "kv: cache type %s/%s not supported (f32, f16, q8_0)",
                           ember_type_name(p->type_k), ember_type_name(p->type_v));
    uint64_t kb, vb;
    if (!ember_type_row_bytes(p->type_k, (uint64_t)p->n_embd_k, &kb) || !ember_type_row_bytes(p->type_v, (uint64_t)p->n_embd_v, &vb))
        return ember_error(EMBER_ERR_INVALID_ARG, "kv: K/V rows of %lld/%lld elements are not whole %s/%s blocks",
                           (long long)p->n_embd_k, (long long)p->n_embd_v, ember_type_name(p->type_k), ember_type_name(p->type_v));
    ember_kv *kv = calloc(1, sizeof *kv);
    if (!kv) return ember_error(EMBER_ERR_NOMEM, "kv: out of memory");
    kv->p = *p;
    kv->k_row_bytes = kb;
    kv->v_row_bytes = vb;
    kv->max_blocks_per_seq = (p->n_ctx + p->block_tokens - 1) / p->block_tokens;
    const size_t rows = (size_t)p->n_blocks * (size_t)p->block_tokens;
    kv->k = calloc((size_t)p->n_layer, sizeof *kv->k);
    kv->v = calloc((size_t)p->n_layer, sizeof *kv->v);
    kv->refs = calloc((size_t)p->n_blocks, sizeof *kv->refs);
    kv->free_stack = malloc((size_t)p->n_blocks * sizeof *kv->free_stack);
    kv->seqs = calloc((size_t)p->n_seq_max, sizeof *kv->seqs);
    if (!kv->k || !kv->v || !kv->refs || !kv->free_stack || !kv->seqs) goto nomem;
    for (int32_t il = 0; il < p->n_layer; il++) {
        /* zeroed so that a never-written row can never hold NaN bit patterns;
         * calloc gets large blocks as fresh zero pages from the OS, so the
         * pool becomes resident only as blocks are written (peak RSS follows
         * the tokens cached, not n_ctx) */
        kv->k[il] = calloc(rows, kb);
        kv->v[il] = calloc(rows, vb);
        if (!kv->k[il] || !kv->v[il]) goto nomem;
        kv->bytes += rows * (kb + vb);
    }
    for (int32_t s = 0; s < p->n_seq_max; s++) {
        kv->seqs[s].blocks = malloc((size_t)kv->max_blocks_per_seq * sizeof(int32_t));
        if (!kv->seqs[s].blocks) goto nomem;
    }
    /* pop order 0, 1, 2, ... */
    for (int32_t b = 0; b < p->n_blocks; b++) kv->free_stack[b] = p->n_blocks - 1 - b;
    kv->n_free = p->n_blocks;
    *out = kv;
    return EMBER_OK;
nomem:
    ember_kv_free(kv);
    return ember_error(EMBER_ERR_NOMEM, "kv: cannot allocate %d blocks of %d tokens x %d layers (%llu bytes per token)",
                       p->n_blocks, p->block_tokens, p->n_layer, (unsigned long long)((kb + vb) * (uint64_t)p->n_layer));
}

void ember_kv_free(ember_kv *kv)
{
    if (!kv) return;
    for (int32_t il = 0; il < kv->p.n_layer; il++) {
        if (kv->k) free(kv->k[il]);
        if (kv->v) free(kv->v[il]);
    }
    if (kv->seqs) for (int32_t s = 0; s < kv->p.n_seq_max; s++) free(kv->seqs[s].blocks);
    free(kv->k);
    free(kv->v);
    free(kv->refs);
    free(kv->free_stack);
    free(kv->seqs);
    free(kv);
}

ember_kv_layer_view ember_kv_layer(const ember_kv *kv, int32_t il)
{
    ember_kv_layer_view v = {
        .type_k = kv->p.type_k, .type_v = kv->p.type_v,
        .k = kv->k[il], .v = kv->v[il],
        .k_row_bytes = kv->k_row_bytes, .v_row_bytes = kv->v_row_bytes,
        .block_tokens = kv->p.block_tokens,
        .n_rows = (int64_t)kv->p.n_blocks * kv->p.block_tokens,
    };
    return v;
}

uint64_t ember_kv_bytes(const ember_kv *kv) { return kv->bytes; }
int32_t ember_kv_block_tokens(const ember_kv *kv) { return kv->p.block_tokens; }
int32_t ember_kv_free_blocks(const ember_kv *kv) { return kv->n_free; }
int32_t ember_kv_block_refs(const ember_kv *kv, int32_t b)
{
    return (b >= 0 && b < kv->p.n_blocks) ? kv->refs[b] : -1;
}

static bool seq_ok(const ember_kv *kv, ember_seq_id s) { return s >= 0 && s < kv->p.n_seq_max; }
static int32_t n_blocks_for(const ember_kv *kv, int32_t len) { return (len + kv->p.block_tokens - 1) / kv->p.block_tokens; }

ember_pos ember_kv_seq_len(const ember_kv *kv, ember_seq_id seq) { return seq_ok(kv, seq) ? kv->seqs[seq].len : 0; }

const int32_t *ember_kv_seq_blocks(const ember_kv *kv, ember_seq_id seq)
{
    return (seq_ok(kv, seq) && kv->seqs[seq].len > 0) ? kv->seqs[seq].blocks : NULL;
}

int64_t ember_kv_row(const ember_kv *kv, ember_seq_id seq, ember_pos pos)
{
    const int32_t bt = kv->p.block_tokens;
    return (int64_t)kv->seqs[seq].blocks[pos / bt] * bt + pos % bt;
}

int32_t ember_kv_blocks_needed(const ember_kv *kv, ember_seq_id seq, int32_t n_new)
{
    if (!seq_ok(kv, seq) || n_new <= 0) return 0;
    const kv_seq *s = &kv->seqs[seq];
    int32_t need = n_blocks_for(kv, s->len + n_new) - n_blocks_for(kv, s->len);
    if (s->len % kv->p.block_tokens != 0 && kv->refs[s->blocks[s->len / kv->p.block_tokens]] > 1) need++;
    return need;
}

static int32_t pop_block(ember_kv *kv)
{
    int32_t b = kv->free_stack[--kv->n_free];
    kv->refs[b] = 1;
    return b;
}

static void unref_block(ember_kv *kv, int32_t b)
{
    if (--kv->refs[b] == 0) kv->free_stack[kv->n_free++] = b;
}

static void copy_block(ember_kv *kv, int32_t dst, int32_t src)
{
    const size_t bt = (size_t)kv->p.block_tokens;
    for (int32_t il = 0; il < kv->p.n_layer; il++) {
        memcpy(kv->k[il] + (size_t)dst * bt * kv->k_row_bytes, kv->k[il] + (size_t)src * bt * kv->k_row_bytes, bt * kv->k_row_bytes);
        memcpy(kv->v[il] + (size_t)dst * bt * kv->v_row_bytes, kv->v[il] + (size_t)src * bt * kv->v_row_bytes, bt * kv->v_row_bytes);
    }
    if (kv->copy_hook) kv->copy_hook(kv->copy_ud, kv, dst, src);
}

ember_status ember_kv_append(ember_kv *kv, const ember_seq_id *seqs, const int32_t *n_new, int32_t n)
{
    int64_t need = 0;
    for (int32_t i = 0; i < n; i++) {
        if (!seq_ok(kv, seqs[i]))
            return ember_error(EMBER_ERR_INVALID_ARG, "kv: sequence id %d not in [0, %d)", seqs[i], kv->p.n_seq_max);
        if (n_new[i] < 0) return ember_error(EMBER_ERR_INVALID_ARG, "kv: negative append count %d for sequence %d", n_new[i], seqs[i]);
        for (int32_t j = 0; j < i; j++)
            if (seqs[j] == seqs[i]) return ember_error(EMBER_ERR_INVALID_ARG, "kv: sequence %d listed twice in one append", seqs[i]);
        if ((int64_t)kv->seqs[seqs[i]].len + n_new[i] > kv->p.n_ctx)
            return ember_error(EMBER_ERR_RANGE, "kv: sequence %d would hold %lld positions, more than n_ctx %d",
                               seqs[i], (long long)kv->seqs[seqs[i]].len + n_new[i], kv->p.n_ctx);
        need += ember_kv_blocks_needed(kv, seqs[i], n_new[i]);
    }
    if (need > kv->n_free)
        return ember_error(EMBER_ERR_RANGE, "kv: pool full: batch needs %lld blocks of %d tokens, %d free",
                           (long long)need, kv->p.block_tokens, kv->n_free);
    const int32_t bt = kv->p.block_tokens;
    for (int32_t i = 0; i < n; i++) {
        if (n_new[i] == 0) continue;
        kv_seq *s = &kv->seqs[seqs[i]];
        if (s->len % bt != 0) {
            int32_t *last = &s->blocks[s->len / bt];
            if (kv->refs[*last] > 1) {   /* copy on write */
                int32_t nb = pop_block(kv);
                copy_block(kv, nb, *last);
                unref_block(kv, *last);
                *last = nb;
            }
        }
        for (int32_t b = n_blocks_for(kv, s->len); b < n_blocks_for(kv, s->len + n_new[i]); b++) s->blocks[b] = pop_block(kv);
        s->len += n_new[i];
    }
    return EMBER_OK;
}

ember_status ember_kv_seq_truncate(ember_kv *kv, ember_seq_id seq, ember_pos n_keep)
{
    if (!seq_ok(kv, seq)) return ember_error(EMBER_ERR_INVALID_ARG, "seq_truncate: sequence id %d not in [0, %d)", seq, kv->p.n_seq_max);
    kv_seq *s = &kv->seqs[seq];
    if (n_keep < 0 || n_keep > s->len)
        return ember_error(EMBER_ERR_RANGE, "seq_truncate: n_keep %d not in [0, %d] (length of sequence %d)", n_keep, s->len, seq);
    for (int32_t b = n_blocks_for(kv, n_keep); b < n_blocks_for(kv, s->len); b++) unref_block(kv, s->blocks[b]);
    s->len = n_keep;
    return EMBER_OK;
}

ember_status ember_kv_seq_remove(ember_kv *kv, ember_seq_id seq)
{
    if (!seq_ok(kv, seq)) return ember_error(EMBER_ERR_INVALID_ARG, "seq_remove: sequence id %d not in [0, %d)", seq, kv->p.n_seq_max);
    return ember_kv_seq_truncate(kv, seq, 0);
}

ember_status ember_kv_seq_fork(ember_kv *kv, ember_seq_id src, ember_seq_id dst, ember_pos n)
{
    if (!seq_ok(kv, src) || !seq_ok(kv, dst))
        return ember_error(EMBER_ERR_INVALID_ARG, "seq_fork: sequence ids %d -> %d not in [0, %d)", src, dst, kv->p.n_seq_max);
    if (src == dst) return ember_error(EMBER_ERR_INVALID_ARG, "seq_fork: src and dst are both %d", src);
    if (kv->seqs[dst].len != 0)
        return ember_error(EMBER_ERR_INVALID_ARG, "seq_fork: destination sequence %d is not empty (%d positions)", dst, kv->seqs[dst].len);
    if (n < 0 || n > kv->seqs[src].len)
        return ember_error(EMBER_ERR_RANGE, "seq_fork: n %d not in [0, %d] (length of sequence %d)", n, kv->seqs[src].len, src);
    kv_seq *d = &kv->seqs[dst];
    for (int32_t b = 0; b < n_blocks_for(kv, n); b++) {
        d->blocks[b] = kv->seqs[src].blocks[b];
        kv->refs[d->blocks[b]]++;
    }
    d->len = n;
    return EMBER_OK;
}
