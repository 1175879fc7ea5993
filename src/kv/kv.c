/*
 * kv.c — paged KV cache: block pools, reference counts, per-sequence tables.
 *
 * Owns: allocation of K/V rows per layer (each layer its own width, none for
 * layers without K/V), the free lists (stacks of block ids) of the full and
 * the sliding-window group, copy-on-write of a shared last block, releasing
 * blocks that left a sliding window, and the sequence edits (remove,
 * truncate, fork). Must not: touch K/V contents except to copy a block.
 */
#include "kv/kv.h"
#include "base/status.h"

#include <stdlib.h>
#include <string.h>

typedef struct kv_group {
    int32_t n_blocks;
    int32_t *refs;        /* [n_blocks] */
    int32_t *free_stack;  /* [n_blocks] */
    int32_t n_free;
    int32_t *len;         /* [n_seq_max] positions with rows in this group */
    int32_t *lo;          /* [n_seq_max] first table entry still held (0 in the full group) */
    int32_t *tables;      /* [n_seq_max][max_blocks_per_seq]; -1 = released */
} kv_group;

struct ember_kv {
    ember_kv_params p;
    size_t *k_row_bytes, *v_row_bytes;   /* [n_layer]; 0 = no K/V */
    uint8_t *group;                      /* [n_layer] */
    uint8_t **k, **v;                    /* [n_layer] */
    int32_t max_blocks_per_seq;
    int32_t n_groups;
    int32_t swa_margin;                  /* positions kept below the window (rollback) */
    kv_group g[2];
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

static bool group_init(kv_group *G, int32_t n_blocks, int32_t n_seq, int32_t max_blocks)
{
    G->n_blocks = n_blocks;
    G->refs = calloc((size_t)n_blocks, sizeof *G->refs);
    G->free_stack = malloc((size_t)n_blocks * sizeof *G->free_stack);
    G->len = calloc((size_t)n_seq, sizeof *G->len);
    G->lo = calloc((size_t)n_seq, sizeof *G->lo);
    G->tables = malloc((size_t)n_seq * (size_t)max_blocks * sizeof *G->tables);
    if (!G->refs || !G->free_stack || !G->len || !G->lo || !G->tables) return false;
    for (size_t i = 0; i < (size_t)n_seq * (size_t)max_blocks; i++) G->tables[i] = -1;
    /* pop order 0, 1, 2, ... */
    for (int32_t b = 0; b < n_blocks; b++) G->free_stack[b] = n_blocks - 1 - b;
    G->n_free = n_blocks;
    return true;
}

static void group_free(kv_group *G)
{
    free(G->refs);
    free(G->free_stack);
    free(G->len);
    free(G->lo);
    free(G->tables);
}

ember_status ember_kv_new(const ember_kv_params *p, ember_kv **out)
{
    *out = NULL;
    if (p->n_layer < 1 || p->block_tokens < 1 || p->n_blocks < 1 || p->n_seq_max < 1 || p->n_ctx < 1 ||
        (!p->layer_n_embd_k && (p->n_embd_k < 1 || p->n_embd_v < 1)) || (!p->layer_n_embd_k != !p->layer_n_embd_v))
        return ember_error(EMBER_ERR_INVALID_ARG, "kv: sizes must be positive (n_layer %d, n_embd_k %lld, n_embd_v %lld, block_tokens %d, n_blocks %d, n_seq_max %d, n_ctx %d)",
                           p->n_layer, (long long)p->n_embd_k, (long long)p->n_embd_v, p->block_tokens, p->n_blocks, p->n_seq_max, p->n_ctx);
    if (p->layer_swa && (p->n_swa < 1 || p->n_swa_step < 1))
        return ember_error(EMBER_ERR_INVALID_ARG, "kv: sliding-window layers need n_swa %d and n_swa_step %d > 0", p->n_swa, p->n_swa_step);
    if (!kv_type_ok(p->type_k) || !kv_type_ok(p->type_v))
        return ember_error(EMBER_ERR_INVALID_ARG, "kv: cache type %s/%s not supported (f32, f16, q8_0)",
                           ember_type_name(p->type_k), ember_type_name(p->type_v));
    uint64_t row_sum = 0;   /* bytes per token over all layers */
    ember_kv *kv = calloc(1, sizeof *kv);
    if (!kv) return ember_error(EMBER_ERR_NOMEM, "kv: out of memory");
    kv->p = *p;
    kv->p.layer_n_embd_k = kv->p.layer_n_embd_v = NULL;   /* not kept: the caller's arrays */
    kv->p.layer_swa = NULL;
    const size_t L = (size_t)p->n_layer;
    kv->k_row_bytes = calloc(L, sizeof *kv->k_row_bytes);
    kv->v_row_bytes = calloc(L, sizeof *kv->v_row_bytes);
    kv->group = calloc(L, sizeof *kv->group);
    kv->k = calloc(L, sizeof *kv->k);
    kv->v = calloc(L, sizeof *kv->v);
    if (!kv->k_row_bytes || !kv->v_row_bytes || !kv->group || !kv->k || !kv->v) goto nomem;

    bool any = false, any_swa = false;
    for (int32_t il = 0; il < p->n_layer; il++) {
        const int64_t ek = p->layer_n_embd_k ? p->layer_n_embd_k[il] : p->n_embd_k;
        const int64_t ev = p->layer_n_embd_v ? p->layer_n_embd_v[il] : p->n_embd_v;
        if (ek == 0 && ev == 0) continue;
        uint64_t kb, vb;
        if (ek < 0 || ev < 0 || (ek == 0) != (ev == 0) || !ember_type_row_bytes(p->type_k, (uint64_t)ek, &kb) ||
            !ember_type_row_bytes(p->type_v, (uint64_t)ev, &vb)) {
            ember_kv_free(kv);
            return ember_error(EMBER_ERR_INVALID_ARG, "kv: layer %d: K/V rows of %lld/%lld elements are not whole %s/%s blocks",
                               il, (long long)ek, (long long)ev, ember_type_name(p->type_k), ember_type_name(p->type_v));
        }
        kv->k_row_bytes[il] = kb;
        kv->v_row_bytes[il] = vb;
        row_sum += kb + vb;
        any = true;
        if (p->layer_swa && p->layer_swa[il]) any_swa = true;
    }
    if (!any) {
        ember_kv_free(kv);
        return ember_error(EMBER_ERR_INVALID_ARG, "kv: no layer keeps K/V");
    }
    const int32_t bt = p->block_tokens;
    kv->max_blocks_per_seq = (p->n_ctx + bt - 1) / bt;
    kv->swa_margin = bt;
    kv->n_groups = 1;
    int32_t swa_blocks = 0;
    if (any_swa) {
        /* blocks one sequence holds at most: [window start - margin, last new position] */
        int64_t per_seq = ((int64_t)p->n_swa + kv->swa_margin + p->n_swa_step + bt - 2) / bt + 2;
        if (per_seq > kv->max_blocks_per_seq) per_seq = kv->max_blocks_per_seq;
        const int64_t total = per_seq * p->n_seq_max;
        if (total < p->n_blocks) {
            swa_blocks = (int32_t)total;
            kv->n_groups = 2;
            for (int32_t il = 0; il < p->n_layer; il++) kv->group[il] = p->layer_swa[il] ? EMBER_KV_GROUP_SWA : EMBER_KV_GROUP_FULL;
        }
    }
    if (!group_init(&kv->g[0], p->n_blocks, p->n_seq_max, kv->max_blocks_per_seq)) goto nomem;
    if (kv->n_groups == 2 && !group_init(&kv->g[1], swa_blocks, p->n_seq_max, kv->max_blocks_per_seq)) goto nomem;
    for (int32_t il = 0; il < p->n_layer; il++) {
        if (!kv->k_row_bytes[il]) continue;
        const size_t rows = (size_t)kv->g[kv->group[il]].n_blocks * (size_t)bt;
        /* zeroed so that a never-written row can never hold NaN bit patterns */
        kv->k[il] = calloc(rows, kv->k_row_bytes[il]);
        kv->v[il] = calloc(rows, kv->v_row_bytes[il]);
        if (!kv->k[il] || !kv->v[il]) goto nomem;
        kv->bytes += rows * (kv->k_row_bytes[il] + kv->v_row_bytes[il]);
    }
    *out = kv;
    return EMBER_OK;
nomem:
    ember_kv_free(kv);
    return ember_error(EMBER_ERR_NOMEM, "kv: cannot allocate %d blocks of %d tokens (%llu bytes per token over %d layers)",
                       p->n_blocks, p->block_tokens, (unsigned long long)row_sum, p->n_layer);
}

void ember_kv_free(ember_kv *kv)
{
    if (!kv) return;
    for (int32_t il = 0; il < kv->p.n_layer; il++) {
        if (kv->k) free(kv->k[il]);
        if (kv->v) free(kv->v[il]);
    }
    free(kv->k);
    free(kv->v);
    free(kv->k_row_bytes);
    free(kv->v_row_bytes);
    free(kv->group);
    group_free(&kv->g[0]);
    group_free(&kv->g[1]);
    free(kv);
}

ember_kv_layer_view ember_kv_layer(const ember_kv *kv, int32_t il)
{
    const bool has = kv->k_row_bytes[il] > 0;
    ember_kv_layer_view v = {
        .type_k = kv->p.type_k, .type_v = kv->p.type_v,
        .k = kv->k[il], .v = kv->v[il],
        .k_row_bytes = kv->k_row_bytes[il], .v_row_bytes = kv->v_row_bytes[il],
        .block_tokens = kv->p.block_tokens,
        .n_rows = has ? (int64_t)kv->g[kv->group[il]].n_blocks * kv->p.block_tokens : 0,
    };
    return v;
}

int32_t ember_kv_layer_group(const ember_kv *kv, int32_t il) { return kv->group[il]; }
bool ember_kv_has_swa_group(const ember_kv *kv) { return kv->n_groups == 2; }
uint64_t ember_kv_bytes(const ember_kv *kv) { return kv->bytes; }
int32_t ember_kv_block_tokens(const ember_kv *kv) { return kv->p.block_tokens; }
int32_t ember_kv_free_blocks(const ember_kv *kv) { return kv->g[0].n_free; }
int32_t ember_kv_group_free_blocks(const ember_kv *kv, int32_t g) { return g >= 0 && g < kv->n_groups ? kv->g[g].n_free : -1; }
int32_t ember_kv_group_n_blocks(const ember_kv *kv, int32_t g) { return g >= 0 && g < kv->n_groups ? kv->g[g].n_blocks : -1; }
int32_t ember_kv_block_refs(const ember_kv *kv, int32_t b)
{
    return (b >= 0 && b < kv->g[0].n_blocks) ? kv->g[0].refs[b] : -1;
}

static bool seq_ok(const ember_kv *kv, ember_seq_id s) { return s >= 0 && s < kv->p.n_seq_max; }
static int32_t n_blocks_for(const ember_kv *kv, int32_t len) { return (len + kv->p.block_tokens - 1) / kv->p.block_tokens; }
static int32_t *table(const ember_kv *kv, int32_t g, ember_seq_id s)
{
    return kv->g[g].tables + (size_t)s * (size_t)kv->max_blocks_per_seq;
}

ember_pos ember_kv_seq_len(const ember_kv *kv, ember_seq_id seq) { return seq_ok(kv, seq) ? kv->g[0].len[seq] : 0; }

const int32_t *ember_kv_seq_blocks(const ember_kv *kv, ember_seq_id seq) { return ember_kv_group_blocks(kv, 0, seq); }

const int32_t *ember_kv_group_blocks(const ember_kv *kv, int32_t g, ember_seq_id seq)
{
    if (g < 0 || g >= kv->n_groups || !seq_ok(kv, seq) || kv->g[g].len[seq] == 0) return NULL;
    return table(kv, g, seq);
}

int64_t ember_kv_row(const ember_kv *kv, ember_seq_id seq, ember_pos pos) { return ember_kv_group_row(kv, 0, seq, pos); }

int64_t ember_kv_group_row(const ember_kv *kv, int32_t g, ember_seq_id seq, ember_pos pos)
{
    const int32_t bt = kv->p.block_tokens;
    return (int64_t)table(kv, g, seq)[pos / bt] * bt + pos % bt;
}

/* Blocks group g needs to give seq n_new more positions. */
static int32_t group_needed(const ember_kv *kv, int32_t g, ember_seq_id seq, int32_t n_new)
{
    const kv_group *G = &kv->g[g];
    const int32_t len = G->len[seq], bt = kv->p.block_tokens;
    int32_t need = n_blocks_for(kv, len + n_new) - n_blocks_for(kv, len);
    if (len % bt != 0 && G->refs[table(kv, g, seq)[len / bt]] > 1) need++;
    return need;
}

int32_t ember_kv_blocks_needed(const ember_kv *kv, ember_seq_id seq, int32_t n_new)
{
    if (!seq_ok(kv, seq) || n_new <= 0) return 0;
    return group_needed(kv, 0, seq, n_new);
}

static int32_t pop_block(kv_group *G)
{
    int32_t b = G->free_stack[--G->n_free];
    G->refs[b] = 1;
    return b;
}

static void unref_block(kv_group *G, int32_t b)
{
    if (--G->refs[b] == 0) G->free_stack[G->n_free++] = b;
}

static void copy_block(ember_kv *kv, int32_t g, int32_t dst, int32_t src)
{
    const size_t bt = (size_t)kv->p.block_tokens;
    for (int32_t il = 0; il < kv->p.n_layer; il++) {
        const size_t kb = kv->k_row_bytes[il], vb = kv->v_row_bytes[il];
        if (!kb || kv->group[il] != g) continue;
        memcpy(kv->k[il] + (size_t)dst * bt * kb, kv->k[il] + (size_t)src * bt * kb, bt * kb);
        memcpy(kv->v[il] + (size_t)dst * bt * vb, kv->v[il] + (size_t)src * bt * vb, bt * vb);
        if (kv->copy_hook) kv->copy_hook(kv->copy_ud, kv, il, dst, src);
    }
}

/* Give seq n_new more positions in group g (the blocks are known to be free):
 * copy a shared partial last block, take new blocks, advance the length. */
static void group_grow(ember_kv *kv, int32_t g, ember_seq_id seq, int32_t n_new)
{
    kv_group *G = &kv->g[g];
    int32_t *tab = table(kv, g, seq);
    const int32_t bt = kv->p.block_tokens, len = G->len[seq];
    if (len % bt != 0) {
        int32_t *last = &tab[len / bt];
        if (G->refs[*last] > 1) {   /* copy on write */
            int32_t nb = pop_block(G);
            copy_block(kv, g, nb, *last);
            unref_block(G, *last);
            *last = nb;
        }
    }
    for (int32_t b = n_blocks_for(kv, len); b < n_blocks_for(kv, len + n_new); b++) tab[b] = pop_block(G);
    G->len[seq] = len + n_new;
}

static ember_status check_seqs(const ember_kv *kv, const ember_seq_id *seqs, const int32_t *n_new, int32_t n)
{
    for (int32_t i = 0; i < n; i++) {
        if (!seq_ok(kv, seqs[i]))
            return ember_error(EMBER_ERR_INVALID_ARG, "kv: sequence id %d not in [0, %d)", seqs[i], kv->p.n_seq_max);
        if (n_new[i] < 0) return ember_error(EMBER_ERR_INVALID_ARG, "kv: negative append count %d for sequence %d", n_new[i], seqs[i]);
        for (int32_t j = 0; j < i; j++)
            if (seqs[j] == seqs[i]) return ember_error(EMBER_ERR_INVALID_ARG, "kv: sequence %d listed twice in one append", seqs[i]);
    }
    return EMBER_OK;
}

ember_status ember_kv_append(ember_kv *kv, const ember_seq_id *seqs, const int32_t *n_new, int32_t n)
{
    ember_status st = check_seqs(kv, seqs, n_new, n);
    if (st) return st;
    int64_t need = 0;
    for (int32_t i = 0; i < n; i++) {
        if ((int64_t)kv->g[0].len[seqs[i]] + n_new[i] > kv->p.n_ctx)
            return ember_error(EMBER_ERR_RANGE, "kv: sequence %d would hold %lld positions, more than n_ctx %d",
                               seqs[i], (long long)kv->g[0].len[seqs[i]] + n_new[i], kv->p.n_ctx);
        if (n_new[i] > 0) need += group_needed(kv, 0, seqs[i], n_new[i]);
    }
    if (need > kv->g[0].n_free)
        return ember_error(EMBER_ERR_RANGE, "kv: pool full: batch needs %lld blocks of %d tokens, %d free",
                           (long long)need, kv->p.block_tokens, kv->g[0].n_free);
    for (int32_t i = 0; i < n; i++) if (n_new[i] > 0) group_grow(kv, 0, seqs[i], n_new[i]);
    return EMBER_OK;
}

ember_status ember_kv_swa_advance(ember_kv *kv, const ember_seq_id *seqs, const int32_t *n_new, int32_t n)
{
    if (kv->n_groups < 2) return EMBER_OK;
    ember_status st = check_seqs(kv, seqs, n_new, n);
    if (st) return st;
    kv_group *G = &kv->g[1];
    const int32_t bt = kv->p.block_tokens;
    for (int32_t i = 0; i < n; i++) {
        const ember_seq_id s = seqs[i];
        if (n_new[i] > kv->p.n_swa_step || (int64_t)G->len[s] + n_new[i] > kv->g[0].len[s])
            return ember_error(EMBER_ERR_INVALID_ARG, "kv: sliding window: %d positions for sequence %d (holds %d of %d appended; at most %d per step)",
                               n_new[i], s, G->len[s], kv->g[0].len[s], kv->p.n_swa_step);
    }
    int64_t need = 0;
    for (int32_t i = 0; i < n; i++) {
        if (n_new[i] == 0) continue;
        const ember_seq_id s = seqs[i];
        /* release blocks wholly below the window of the first new position */
        const int64_t keep_from = (int64_t)G->len[s] - kv->p.n_swa + 1 - kv->swa_margin;
        if (keep_from > 0) {
            const int32_t jb = (int32_t)(keep_from / bt);
            int32_t *tab = table(kv, 1, s);
            for (int32_t j = G->lo[s]; j < jb; j++) {
                unref_block(G, tab[j]);
                tab[j] = -1;
            }
            if (jb > G->lo[s]) G->lo[s] = jb;
        }
        need += group_needed(kv, 1, s, n_new[i]);
    }
    if (need > G->n_free)
        return ember_error(EMBER_ERR_INTERNAL, "kv: sliding-window pool exhausted (%lld blocks needed, %d free of %d)",
                           (long long)need, G->n_free, G->n_blocks);
    for (int32_t i = 0; i < n; i++) if (n_new[i] > 0) group_grow(kv, 1, seqs[i], n_new[i]);
    return EMBER_OK;
}

/* Whether the sliding group still holds the window that a query at
 * position n (the next one after cutting back to n) needs. */
static bool swa_window_held(const ember_kv *kv, ember_seq_id s, int32_t n)
{
    if (kv->n_groups < 2 || n == 0) return true;
    const int64_t from = (int64_t)n - kv->p.n_swa + 1;
    return from <= 0 ? kv->g[1].lo[s] == 0 : from / kv->p.block_tokens >= kv->g[1].lo[s];
}

static void group_truncate(ember_kv *kv, int32_t g, ember_seq_id seq, int32_t n_keep)
{
    kv_group *G = &kv->g[g];
    int32_t *tab = table(kv, g, seq);
    if (n_keep < G->len[seq]) {
        int32_t from = n_blocks_for(kv, n_keep);
        if (from < G->lo[seq]) from = G->lo[seq];
        for (int32_t b = from; b < n_blocks_for(kv, G->len[seq]); b++) {
            unref_block(G, tab[b]);
            tab[b] = -1;
        }
        G->len[seq] = n_keep;
    }
    if (n_keep == 0) {
        for (int32_t b = 0; b < G->lo[seq]; b++) tab[b] = -1;
        G->lo[seq] = 0;
    }
}

ember_status ember_kv_seq_truncate(ember_kv *kv, ember_seq_id seq, ember_pos n_keep)
{
    if (!seq_ok(kv, seq)) return ember_error(EMBER_ERR_INVALID_ARG, "seq_truncate: sequence id %d not in [0, %d)", seq, kv->p.n_seq_max);
    const int32_t len = kv->g[0].len[seq];
    if (n_keep < 0 || n_keep > len)
        return ember_error(EMBER_ERR_RANGE, "seq_truncate: n_keep %d not in [0, %d] (length of sequence %d)", n_keep, len, seq);
    if (n_keep < len && !swa_window_held(kv, seq, n_keep))
        return ember_error(EMBER_ERR_RANGE, "seq_truncate: sequence %d cannot be cut back to %d positions: the sliding-window K/V of positions before %d was released",
                           seq, n_keep, kv->g[1].lo[seq] * kv->p.block_tokens);
    for (int32_t g = 0; g < kv->n_groups; g++) group_truncate(kv, g, seq, n_keep);
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
    if (kv->g[0].len[dst] != 0)
        return ember_error(EMBER_ERR_INVALID_ARG, "seq_fork: destination sequence %d is not empty (%d positions)", dst, kv->g[0].len[dst]);
    if (n < 0 || n > kv->g[0].len[src])
        return ember_error(EMBER_ERR_RANGE, "seq_fork: n %d not in [0, %d] (length of sequence %d)", n, kv->g[0].len[src], src);
    if (!swa_window_held(kv, src, n) || (kv->n_groups == 2 && n > kv->g[1].len[src]))
        return ember_error(EMBER_ERR_RANGE, "seq_fork: the sliding-window K/V that position %d of sequence %d needs was released", n, src);
    for (int32_t g = 0; g < kv->n_groups; g++) {
        kv_group *G = &kv->g[g];
        const int32_t *ts = table(kv, g, src);
        int32_t *td = table(kv, g, dst);
        for (int32_t b = G->lo[src]; b < n_blocks_for(kv, n); b++) {
            td[b] = ts[b];
            G->refs[td[b]]++;
        }
        G->lo[dst] = G->lo[src] < n_blocks_for(kv, n) ? G->lo[src] : n_blocks_for(kv, n);
        G->len[dst] = n;
    }
    return EMBER_OK;
}
