/*
 * gguf.c — GGUF v2/v3 reader (memory-mapped, validated up front) and writer.
 *
 * Format source: ggml docs/gguf.md, gguf-py gguf/constants.py and
 * gguf/gguf_reader.py (read for facts; no code taken). See gguf.h.
 *
 * Owns: turning untrusted bytes into a table of KVs and tensors in which every
 * pointer is known to lie inside the file. Every count and length is compared
 * against the bytes remaining BEFORE anything is allocated for it, so memory
 * is bounded by a small multiple of the file size; nesting depth is bounded,
 * so recursion is too. Must not: know about models, tokenizers or compute.
 *
 * Layout of the parsed form: all strings (keys, string values, string array
 * elements, tensor names) are copied once, NUL-terminated, into one blob.
 * A string array keeps n+1 offsets into the blob (element j spans
 * stroff[s+j] .. stroff[s+j+1]-1), so element access is O(1). An array of
 * arrays keeps n consecutive sub-array nodes. Keys and tensor names are found
 * through open-addressing hash tables (seeded FNV-1a + fmix64).
 */
#include "gguf/gguf.h"

#include "base/status.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#define GGUF_MAGIC "GGUF"
#define GGUF_DEFAULT_ALIGNMENT 32u
/* Deepest array-of-array nesting accepted (depth 0 = a KV's own array).
 * gguf-py nests freely; llama.cpp does not nest at all. Bounds recursion. */
#define GGUF_MAX_DEPTH 16
/* ggml's GGML_TYPE_COUNT (ggml.h): ids below it are real ggml types that
 * ember may not support yet (UNSUPPORTED); ids at or above it are FORMAT. */
#define GGML_TYPE_ID_LIMIT 43u

/* ------------------------------------------------------------------------- */
/* internal representation                                                   */

typedef struct gnode {      /* one array value */
    ember_gguf_vtype type;  /* element type */
    uint32_t depth;
    uint64_t n;
    uint64_t idx;           /* numeric: file offset; STRING: stroff index; ARRAY: node index */
    const ember_gguf *g;
} gnode;

typedef struct gkv {
    const char *key;
    uint64_t at, val_at;    /* file offsets of the key and of the value */
    uint64_t key_off, key_len;
    ember_gguf_vtype type;
    ember_gguf_scalar s;    /* scalar types */
    uint64_t str_off, str_len; /* STRING */
    uint64_t node;          /* ARRAY: node index */
} gkv;

struct ember_gguf {
    const uint8_t *base;
    uint64_t size;
    bool mapped;
    uint32_t version;
    int64_t n_kv, n_tensors;
    uint64_t alignment, data_offset;

    gkv *kvs;
    ember_gguf_tensor *tensors;
    uint64_t *tensor_name_off;
    uint64_t *tensor_off_at; /* file offset of each tensor info's offset field */

    char *blob; uint64_t blob_len, blob_cap;
    uint64_t *stroff; uint64_t stroff_len, stroff_cap;
    gnode *nodes; uint64_t nodes_len, nodes_cap;

    int64_t *kv_hash; uint64_t kv_mask;   /* slots hold index+1, 0 = empty */
    int64_t *t_hash; uint64_t t_mask;
    uint64_t seed;          /* hash basis, random per reader */
};

/* ------------------------------------------------------------------------- */
/* error messages                                                            */

typedef struct pctx {
    ember_gguf *g;
    const uint8_t *p;
    uint64_t size, pos;
    int64_t kv, tensor;     /* index being parsed, -1 if none */
    bool named;             /* its key / name has been read (blob offset valid) */
} pctx;

static void where(const pctx *c, char *buf, size_t n)
{
    buf[0] = '\0';
    /* names are read through blob offsets: the blob may move while parsing */
    const ember_gguf *g = c->g;
    if (c->kv >= 0) {
        if (c->named)
            snprintf(buf, n, "kv[%lld] '%.80s': ", (long long)c->kv, g->blob + g->kvs[c->kv].key_off);
        else
            snprintf(buf, n, "kv[%lld]: ", (long long)c->kv);
    } else if (c->tensor >= 0) {
        if (c->named)
            snprintf(buf, n, "tensor[%lld] '%.80s': ", (long long)c->tensor,
                     g->blob + g->tensor_name_off[c->tensor]);
        else
            snprintf(buf, n, "tensor[%lld]: ", (long long)c->tensor);
    }
}

/* "gguf: <where><message> (byte offset N)" */
__attribute__((format(printf, 4, 5)))
static ember_status perr(const pctx *c, ember_status s, uint64_t off, const char *fmt, ...)
{
    char w[128], m[640];
    where(c, w, sizeof w);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    return ember_error(s, "gguf: %s%s (byte offset %llu)", w, m, (unsigned long long)off);
}

static ember_status nomem(const pctx *c, const char *what)
{
    return perr(c, EMBER_ERR_NOMEM, c->pos, "out of memory for %s", what);
}

/* ------------------------------------------------------------------------- */
/* growable tables (bounded by the file size through the callers' checks)    */

static bool grow(void **p, uint64_t *cap, uint64_t need, size_t elem)
{
    if (need <= *cap) return true;
    uint64_t nc = *cap ? *cap : 64;
    while (nc < need) {
        if (nc > UINT64_MAX / 2) return false;
        nc *= 2;
    }
    if (nc > SIZE_MAX / elem) return false;
    void *q = realloc(*p, (size_t)(nc * elem));
    if (!q) return false;
    *p = q;
    *cap = nc;
    return true;
}

/* ------------------------------------------------------------------------- */
/* cursor                                                                    */

static uint64_t remain(const pctx *c) { return c->size - c->pos; }

static ember_status need(const pctx *c, uint64_t n, const char *what)
{
    if (n > remain(c))
        return perr(c, EMBER_ERR_FORMAT, c->pos,
                    "truncated: %s needs %llu bytes, %llu remain", what,
                    (unsigned long long)n, (unsigned long long)remain(c));
    return EMBER_OK;
}

static ember_status rd_u32(pctx *c, uint32_t *v, const char *what)
{
    ember_status s = need(c, 4, what);
    if (s) return s;
    memcpy(v, c->p + c->pos, 4);
    c->pos += 4;
    return EMBER_OK;
}

static ember_status rd_u64(pctx *c, uint64_t *v, const char *what)
{
    ember_status s = need(c, 8, what);
    if (s) return s;
    memcpy(v, c->p + c->pos, 8);
    c->pos += 8;
    return EMBER_OK;
}

/* Read a GGUF string (u64 length + bytes) into the blob; its blob offset and
 * length go to *off, *len. `no_nul`: reject embedded NUL bytes (keys, names). */
static ember_status rd_str(pctx *c, uint64_t *off, uint64_t *len, const char *what, bool no_nul)
{
    uint64_t at = c->pos, n;
    ember_status s = rd_u64(c, &n, what);
    if (s) return s;
    if (n > remain(c))
        return perr(c, EMBER_ERR_FORMAT, at, "%s length %llu exceeds the %llu bytes remaining",
                    what, (unsigned long long)n, (unsigned long long)remain(c));
    if (no_nul && memchr(c->p + c->pos, 0, (size_t)n))
        return perr(c, EMBER_ERR_FORMAT, at, "%s contains a NUL byte", what);
    ember_gguf *g = c->g;
    if (!grow((void **)&g->blob, &g->blob_cap, g->blob_len + n + 1, 1)) return nomem(c, what);
    memcpy(g->blob + g->blob_len, c->p + c->pos, (size_t)n);
    g->blob[g->blob_len + n] = '\0';
    *off = g->blob_len;
    *len = n;
    g->blob_len += n + 1;
    c->pos += n;
    return EMBER_OK;
}

/* ------------------------------------------------------------------------- */
/* values                                                                    */

static const uint8_t vtype_size[13] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

static const char *const vtype_names[13] = {
    "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64",
};

const char *ember_gguf_vtype_name(ember_gguf_vtype t)
{
    return (unsigned)t < 13 ? vtype_names[t] : "?";
}

static bool vtype_valid(uint32_t t) { return t <= EMBER_GGUF_F64; }

static ember_gguf_scalar load_scalar(ember_gguf_vtype t, const uint8_t *p)
{
    ember_gguf_scalar v;
    memset(&v, 0, sizeof v);
    switch (t) {
    case EMBER_GGUF_U8: v.u = p[0]; break;
    case EMBER_GGUF_I8: { int8_t x; memcpy(&x, p, 1); v.i = x; break; }
    case EMBER_GGUF_U16: { uint16_t x; memcpy(&x, p, 2); v.u = x; break; }
    case EMBER_GGUF_I16: { int16_t x; memcpy(&x, p, 2); v.i = x; break; }
    case EMBER_GGUF_U32: { uint32_t x; memcpy(&x, p, 4); v.u = x; break; }
    case EMBER_GGUF_I32: { int32_t x; memcpy(&x, p, 4); v.i = x; break; }
    case EMBER_GGUF_F32: { float x; memcpy(&x, p, 4); v.f = x; break; }
    case EMBER_GGUF_BOOL: v.b = p[0] != 0; break;
    case EMBER_GGUF_U64: memcpy(&v.u, p, 8); break;
    case EMBER_GGUF_I64: memcpy(&v.i, p, 8); break;
    case EMBER_GGUF_F64: memcpy(&v.f, p, 8); break;
    default: break;
    }
    return v;
}

/* Parse an array body (u32 element type, u64 count, elements) into node
 * `ni`, which the caller has reserved. `depth` is this array's nesting. */
static ember_status parse_array(pctx *c, uint64_t ni, uint32_t depth)
{
    ember_gguf *g = c->g;
    uint64_t at = c->pos;
    uint32_t et;
    uint64_t n;
    ember_status s;
    if ((s = rd_u32(c, &et, depth ? "nested array element type" : "array element type"))) return s;
    if (!vtype_valid(et))
        return perr(c, EMBER_ERR_FORMAT, at, "array (depth %u) has unknown element type %u",
                    depth, et);
    if ((s = rd_u64(c, &n, "array count"))) return s;
    uint64_t min_elem = et == EMBER_GGUF_STRING ? 8 : et == EMBER_GGUF_ARRAY ? 12 : vtype_size[et];
    if (n > remain(c) / min_elem)
        return perr(c, EMBER_ERR_FORMAT, at + 4,
                    "array count %llu of %s elements (at least %llu bytes each) exceeds the %llu bytes remaining",
                    (unsigned long long)n, vtype_names[et], (unsigned long long)min_elem,
                    (unsigned long long)remain(c));
    if (et == EMBER_GGUF_ARRAY && depth + 1 > GGUF_MAX_DEPTH)
        return perr(c, EMBER_ERR_FORMAT, at, "arrays nested deeper than %d levels", GGUF_MAX_DEPTH);

    gnode nd = {.type = (ember_gguf_vtype)et, .depth = depth, .n = n, .idx = 0, .g = g};
    if (et == EMBER_GGUF_STRING) {
        uint64_t s0 = g->stroff_len;
        if (!grow((void **)&g->stroff, &g->stroff_cap, s0 + n + 1, sizeof(uint64_t)))
            return nomem(c, "string array offsets");
        g->stroff_len += n + 1;
        for (uint64_t j = 0; j < n; j++) {
            uint64_t off, len;
            if ((s = rd_str(c, &off, &len, "array string element", false))) return s;
            g->stroff[s0 + j] = off;
        }
        g->stroff[s0 + n] = g->blob_len;
        nd.idx = s0;
    } else if (et == EMBER_GGUF_ARRAY) {
        uint64_t n0 = g->nodes_len;
        if (!grow((void **)&g->nodes, &g->nodes_cap, n0 + n, sizeof(gnode)))
            return nomem(c, "nested arrays");
        g->nodes_len += n;
        for (uint64_t j = 0; j < n; j++)
            if ((s = parse_array(c, n0 + j, depth + 1))) return s;
        nd.idx = n0;
    } else {
        nd.idx = c->pos;
        c->pos += n * vtype_size[et];  /* fits: checked against remain above */
    }
    g->nodes[ni] = nd;
    return EMBER_OK;
}

static ember_status parse_kv(pctx *c, gkv *kv)
{
    ember_gguf *g = c->g;
    ember_status s;
    uint64_t at = c->pos;
    kv->at = at;
    if ((s = rd_str(c, &kv->key_off, &kv->key_len, "key", true))) return s;
    if (kv->key_len == 0) return perr(c, EMBER_ERR_FORMAT, at, "empty key");
    c->named = true;
    uint32_t t;
    at = c->pos;
    if ((s = rd_u32(c, &t, "value type"))) return s;
    if (!vtype_valid(t)) return perr(c, EMBER_ERR_FORMAT, at, "unknown value type %u", t);
    kv->type = (ember_gguf_vtype)t;
    kv->val_at = c->pos;
    if (t == EMBER_GGUF_STRING) {
        if ((s = rd_str(c, &kv->str_off, &kv->str_len, "string value", false))) return s;
    } else if (t == EMBER_GGUF_ARRAY) {
        uint64_t ni = g->nodes_len;
        if (!grow((void **)&g->nodes, &g->nodes_cap, ni + 1, sizeof(gnode)))
            return nomem(c, "array");
        g->nodes_len++;
        if ((s = parse_array(c, ni, 0))) return s;
        kv->node = ni;
    } else {
        if ((s = need(c, vtype_size[t], "scalar value"))) return s;
        kv->s = load_scalar(kv->type, c->p + c->pos);
        c->pos += vtype_size[t];
    }
    return EMBER_OK;
}

/* ------------------------------------------------------------------------- */
/* hash tables                                                               */

/* FNV-1a from a per-reader random basis, then the murmur3 fmix64 finalizer,
 * so that a file cannot be crafted to make every key collide (which would
 * turn parsing quadratic). */
static uint64_t name_hash(const ember_gguf *g, const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull ^ g->seed;
    for (size_t i = 0; i < n; i++) {
        h ^= (uint8_t)s[i];
        h *= 1099511628211ull;
    }
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    return h;
}

static bool hash_alloc(int64_t **tab, uint64_t *mask, int64_t n)
{
    uint64_t cap = 16;
    while (cap < (uint64_t)n * 2) cap *= 2;
    *tab = calloc((size_t)cap, sizeof(int64_t));
    *mask = cap - 1;
    return *tab != NULL;
}

/* name(i) returns entry i's NUL-terminated name. Returns the index of an
 * existing equal entry, or -1 after inserting i. */
static int64_t hash_insert(int64_t *tab, uint64_t mask, const char *name, int64_t i,
                           const char *(*name_of)(const ember_gguf *, int64_t), const ember_gguf *g)
{
    size_t len = strlen(name);
    for (uint64_t h = name_hash(g, name, len) & mask;; h = (h + 1) & mask) {
        if (!tab[h]) {
            tab[h] = i + 1;
            return -1;
        }
        if (!strcmp(name_of(g, tab[h] - 1), name)) return tab[h] - 1;
    }
}

static int64_t hash_find(const int64_t *tab, uint64_t mask, const char *name,
                         const char *(*name_of)(const ember_gguf *, int64_t), const ember_gguf *g)
{
    if (!tab || !name) return -1;
    size_t len = strlen(name);
    for (uint64_t h = name_hash(g, name, len) & mask;; h = (h + 1) & mask) {
        if (!tab[h]) return -1;
        if (!strcmp(name_of(g, tab[h] - 1), name)) return tab[h] - 1;
    }
}

static const char *kv_name(const ember_gguf *g, int64_t i) { return g->kvs[i].key; }
static const char *tensor_name(const ember_gguf *g, int64_t i) { return g->tensors[i].name; }

/* ------------------------------------------------------------------------- */
/* tensors                                                                   */

static ember_status parse_tensor_info(pctx *c, ember_gguf_tensor *t, uint64_t *name_off, uint64_t *off_at)
{
    ember_status s;
    uint64_t at, len;
    if ((s = rd_str(c, name_off, &len, "tensor name", true))) return s;
    c->named = true;
    at = c->pos;
    if ((s = rd_u32(c, &t->n_dims, "n_dims"))) return s;
    if (t->n_dims < 1 || t->n_dims > 4)
        return perr(c, EMBER_ERR_FORMAT, at, "n_dims %u is not in 1..4", t->n_dims);
    for (int d = 0; d < 4; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        uint64_t v;
        at = c->pos;
        if ((s = rd_u64(c, &v, "ne"))) return s;
        if (v > (uint64_t)INT64_MAX)
            return perr(c, EMBER_ERR_FORMAT, at, "ne[%u] = %llu is negative as int64", d,
                        (unsigned long long)v);
        t->ne[d] = (int64_t)v;
    }
    at = c->pos;
    if ((s = rd_u32(c, &t->type, "tensor type"))) return s;
    if (!ember_type_known(t->type)) {
        if (t->type < GGML_TYPE_ID_LIMIT)
            return perr(c, EMBER_ERR_UNSUPPORTED, at, "tensor type %u is a ggml type ember does not support",
                        t->type);
        return perr(c, EMBER_ERR_FORMAT, at, "unknown tensor type id %u", t->type);
    }
    /* element count must fit int64 (ggml's rule), rows must be whole blocks */
    uint64_t nel = 1;
    bool zero = false;
    for (int d = 0; d < 4; d++) {
        uint64_t v = (uint64_t)t->ne[d];
        if (v == 0) zero = true;
        else if (!zero && nel > (uint64_t)INT64_MAX / v)
            return perr(c, EMBER_ERR_FORMAT, at - 8 * t->n_dims,
                        "shape [%lld, %lld, %lld, %lld] overflows int64 elements",
                        (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3]);
        else nel *= v;
    }
    uint64_t row;
    if ((uint64_t)t->ne[0] % ember_type_block_size(t->type))
        return perr(c, EMBER_ERR_FORMAT, at - 8 * t->n_dims,
                    "ne[0] = %lld is not a multiple of the %s block size %zu", (long long)t->ne[0],
                    ember_type_name(t->type), ember_type_block_size(t->type));
    uint64_t nrows = zero ? 0 : nel / (uint64_t)t->ne[0];
    if (!ember_type_row_bytes(t->type, (uint64_t)t->ne[0], &row) || (row && nrows > UINT64_MAX / row))
        return perr(c, EMBER_ERR_FORMAT, at - 8 * t->n_dims,
                    "shape [%lld, %lld, %lld, %lld] of %s overflows 64-bit bytes", (long long)t->ne[0],
                    (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3], ember_type_name(t->type));
    t->nbytes = zero ? 0 : row * nrows;
    *off_at = c->pos;
    if ((s = rd_u64(c, &t->offset, "tensor data offset"))) return s;
    return EMBER_OK;
}

static int cmp_by_offset(const void *a, const void *b)
{
    const ember_gguf_tensor *x = *(const ember_gguf_tensor *const *)a;
    const ember_gguf_tensor *y = *(const ember_gguf_tensor *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* ------------------------------------------------------------------------- */
/* open                                                                      */

static ember_status parse(ember_gguf *g)
{
    pctx c = {.g = g, .p = g->base, .size = g->size, .pos = 0, .kv = -1, .tensor = -1};
    ember_status s;

    if (g->size < 4 || memcmp(g->base, GGUF_MAGIC, 4)) {
        if (g->size < 4)
            return perr(&c, EMBER_ERR_FORMAT, 0, "file of %llu bytes is too short for the magic",
                        (unsigned long long)g->size);
        return perr(&c, EMBER_ERR_FORMAT, 0, "bad magic %02x %02x %02x %02x, expected 'GGUF'",
                    g->base[0], g->base[1], g->base[2], g->base[3]);
    }
    c.pos = 4;
    if ((s = rd_u32(&c, &g->version, "header version"))) return s;
    if (g->version != 2 && g->version != 3)
        return perr(&c, EMBER_ERR_UNSUPPORTED, 4, "GGUF version %u is not supported (only 2 and 3)",
                    g->version);
    uint64_t nt, nkv;
    if ((s = rd_u64(&c, &nt, "header n_tensors"))) return s;
    if ((s = rd_u64(&c, &nkv, "header n_kv"))) return s;
    /* a KV takes at least 8 (key len) + 1 (key) + 4 (type) + 1 bytes;
     * a tensor info at least 8 + 4 + 8 + 4 + 8 */
    if (nkv > remain(&c) / 14)
        return perr(&c, EMBER_ERR_FORMAT, 16, "header n_kv %llu cannot fit in the %llu bytes remaining",
                    (unsigned long long)nkv, (unsigned long long)remain(&c));
    if (nt > remain(&c) / 32)
        return perr(&c, EMBER_ERR_FORMAT, 8, "header n_tensors %llu cannot fit in the %llu bytes remaining",
                    (unsigned long long)nt, (unsigned long long)remain(&c));
    g->n_kv = (int64_t)nkv;
    g->n_tensors = (int64_t)nt;
    g->kvs = calloc(nkv ? (size_t)nkv : 1, sizeof *g->kvs);
    g->tensors = calloc(nt ? (size_t)nt : 1, sizeof *g->tensors);
    g->tensor_name_off = calloc(nt ? (size_t)nt : 1, sizeof *g->tensor_name_off);
    g->tensor_off_at = calloc(nt ? (size_t)nt : 1, sizeof *g->tensor_off_at);
    if (!g->kvs || !g->tensors || !g->tensor_name_off || !g->tensor_off_at) return nomem(&c, "header tables");

    for (int64_t i = 0; i < g->n_kv; i++) {
        c.kv = i;
        c.named = false;
        if ((s = parse_kv(&c, &g->kvs[i]))) return s;
    }
    c.kv = -1;
    for (int64_t i = 0; i < g->n_tensors; i++) {
        c.tensor = i;
        c.named = false;
        if ((s = parse_tensor_info(&c, &g->tensors[i], &g->tensor_name_off[i], &g->tensor_off_at[i]))) return s;
    }
    c.tensor = -1;
    uint64_t infos_end = c.pos;

    /* pointers into the blob are final now that it no longer grows */
    c.named = true;
    for (int64_t i = 0; i < g->n_kv; i++) g->kvs[i].key = g->blob + g->kvs[i].key_off;
    for (int64_t i = 0; i < g->n_tensors; i++) g->tensors[i].name = g->blob + g->tensor_name_off[i];

    /* keys: unique (llama.cpp rejects duplicates too) */
    if (!hash_alloc(&g->kv_hash, &g->kv_mask, g->n_kv)) return nomem(&c, "key table");
    for (int64_t i = 0; i < g->n_kv; i++) {
        int64_t j = hash_insert(g->kv_hash, g->kv_mask, g->kvs[i].key, i, kv_name, g);
        c.kv = i;
        if (j >= 0)
            return perr(&c, EMBER_ERR_FORMAT, g->kvs[i].at, "duplicate key (first at kv[%lld])", (long long)j);
    }
    c.kv = -1;

    /* general.alignment: u32, a power of two (gguf.md; gguf-py checks the same) */
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    int64_t ai = ember_gguf_find_key(g, "general.alignment");
    if (ai >= 0) {
        const gkv *kv = &g->kvs[ai];
        c.kv = ai;
        if (kv->type != EMBER_GGUF_U32)
            return perr(&c, EMBER_ERR_FORMAT, kv->at, "has type %s, must be u32", vtype_names[kv->type]);
        uint64_t a = kv->s.u;
        if (a == 0 || (a & (a - 1)))
            return perr(&c, EMBER_ERR_FORMAT, kv->val_at, "value %llu is not a power of two",
                        (unsigned long long)a);
        g->alignment = a;
        c.kv = -1;
    }

    /* data section: after the infos, padded to the alignment */
    uint64_t pad = (g->alignment - infos_end % g->alignment) % g->alignment;
    g->data_offset = infos_end + pad;
    if (g->data_offset > g->size && g->n_tensors > 0)
        return perr(&c, EMBER_ERR_FORMAT, infos_end,
                    "data section would start at byte offset %llu, past the end of the %llu-byte file",
                    (unsigned long long)g->data_offset, (unsigned long long)g->size);
    uint64_t data_size = g->data_offset < g->size ? g->size - g->data_offset : 0;

    if (!hash_alloc(&g->t_hash, &g->t_mask, g->n_tensors)) return nomem(&c, "tensor table");
    for (int64_t i = 0; i < g->n_tensors; i++) {
        ember_gguf_tensor *t = &g->tensors[i];
        int64_t j = hash_insert(g->t_hash, g->t_mask, t->name, i, tensor_name, g);
        c.tensor = i;
        if (j >= 0)
            return perr(&c, EMBER_ERR_FORMAT, g->tensor_off_at[i], "duplicate tensor name (first at tensor[%lld])",
                        (long long)j);
        if (t->offset % g->alignment)
            return perr(&c, EMBER_ERR_FORMAT, g->tensor_off_at[i],
                        "data offset %llu is not a multiple of the alignment %llu",
                        (unsigned long long)t->offset, (unsigned long long)g->alignment);
        if (t->offset > data_size || t->nbytes > data_size - t->offset)
            return perr(&c, EMBER_ERR_FORMAT, g->tensor_off_at[i],
                        "data [%llu, +%llu) lies outside the %llu-byte data section that starts at byte %llu",
                        (unsigned long long)t->offset, (unsigned long long)t->nbytes,
                        (unsigned long long)data_size, (unsigned long long)g->data_offset);
        t->data = g->base + g->data_offset + t->offset;
    }
    c.tensor = -1;

    /* tensors must not overlap (zero-sized ones overlap nothing) */
    if (g->n_tensors > 1) {
        const ember_gguf_tensor **order = malloc((size_t)g->n_tensors * sizeof *order);
        if (!order) return nomem(&c, "tensor order");
        for (int64_t i = 0; i < g->n_tensors; i++) order[i] = &g->tensors[i];
        qsort(order, (size_t)g->n_tensors, sizeof *order, cmp_by_offset);
        const ember_gguf_tensor *prev = NULL;
        for (int64_t i = 0; i < g->n_tensors; i++) {
            const ember_gguf_tensor *t = order[i];
            if (!t->nbytes) continue;
            if (prev && prev->offset + prev->nbytes > t->offset) {
                c.tensor = t - g->tensors;
                s = perr(&c, EMBER_ERR_FORMAT, g->tensor_off_at[c.tensor],
                         "data [%llu, +%llu) overlaps tensor '%.80s' [%llu, +%llu)",
                         (unsigned long long)t->offset, (unsigned long long)t->nbytes, prev->name,
                         (unsigned long long)prev->offset, (unsigned long long)prev->nbytes);
                free(order);
                return s;
            }
            prev = t;
        }
        free(order);
    }
    return EMBER_OK;
}

void ember_gguf_close(ember_gguf *g)
{
    if (!g) return;
    if (g->mapped && g->base) munmap((void *)g->base, (size_t)g->size);
    free(g->kvs);
    free(g->tensors);
    free(g->tensor_name_off);
    free(g->tensor_off_at);
    free(g->blob);
    free(g->stroff);
    free(g->nodes);
    free(g->kv_hash);
    free(g->t_hash);
    free(g);
}

static ember_status open_over(const void *data, size_t size, bool mapped, ember_gguf **out)
{
    ember_gguf *g = calloc(1, sizeof *g);
    if (!g) {
        if (mapped) munmap((void *)data, size);
        return ember_error(EMBER_ERR_NOMEM, "gguf: out of memory");
    }
    g->base = data;
    g->size = size;
    g->mapped = mapped;
    if (getrandom(&g->seed, sizeof g->seed, GRND_NONBLOCK) != (ssize_t)sizeof g->seed)
        g->seed = (uint64_t)(uintptr_t)g * 0x9e3779b97f4a7c15ull; /* ASLR as a fallback */
    ember_status s = parse(g);
    if (s) {
        ember_gguf_close(g);
        return s;
    }
    *out = g;
    return EMBER_OK;
}

ember_status ember_gguf_open_memory(const void *data, size_t size, ember_gguf **out)
{
    if (!out || (!data && size)) return ember_error(EMBER_ERR_INVALID_ARG, "gguf: NULL argument");
    *out = NULL;
    static const uint8_t empty[1];
    return open_over(data ? data : empty, size, false, out);
}

ember_status ember_gguf_open(const char *path, ember_gguf **out)
{
    if (!path || !out) return ember_error(EMBER_ERR_INVALID_ARG, "gguf: NULL argument");
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ember_error(EMBER_ERR_IO, "gguf: cannot open '%s': %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return ember_error(EMBER_ERR_IO, "gguf: cannot stat '%s': %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return ember_error(EMBER_ERR_IO, "gguf: '%s' is not a regular file", path);
    }
    if (st.st_size == 0) {
        close(fd);
        return ember_error(EMBER_ERR_FORMAT, "%s: gguf: file of 0 bytes is too short for the magic (byte offset 0)",
                           path);
    }
    if ((uint64_t)st.st_size > SIZE_MAX) {
        close(fd);
        return ember_error(EMBER_ERR_IO, "gguf: '%s' is too large to map", path);
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (p == MAP_FAILED) return ember_error(EMBER_ERR_IO, "gguf: cannot mmap '%s': %s", path, strerror(e));
    ember_status s = open_over(p, (size_t)st.st_size, true, out);
    if (s) {
        /* prefix the path to the message already set */
        char msg[900];
        snprintf(msg, sizeof msg, "%s", ember_last_error());
        ember_error(s, "%s: %s", path, msg);
    }
    return s;
}

/* ------------------------------------------------------------------------- */
/* accessors                                                                 */

uint32_t ember_gguf_version(const ember_gguf *g) { return g->version; }
int64_t ember_gguf_n_kv(const ember_gguf *g) { return g->n_kv; }
int64_t ember_gguf_n_tensors(const ember_gguf *g) { return g->n_tensors; }
uint64_t ember_gguf_alignment(const ember_gguf *g) { return g->alignment; }
uint64_t ember_gguf_data_offset(const ember_gguf *g) { return g->data_offset; }
uint64_t ember_gguf_file_size(const ember_gguf *g) { return g->size; }

int64_t ember_gguf_find_key(const ember_gguf *g, const char *key)
{
    return hash_find(g->kv_hash, g->kv_mask, key, kv_name, g);
}

const char *ember_gguf_key(const ember_gguf *g, int64_t i)
{
    return i >= 0 && i < g->n_kv ? g->kvs[i].key : NULL;
}

ember_gguf_vtype ember_gguf_kv_type(const ember_gguf *g, int64_t i)
{
    return i >= 0 && i < g->n_kv ? g->kvs[i].type : (ember_gguf_vtype)-1;
}

static bool is_unsigned(ember_gguf_vtype t)
{
    return t == EMBER_GGUF_U8 || t == EMBER_GGUF_U16 || t == EMBER_GGUF_U32 || t == EMBER_GGUF_U64;
}

static bool is_signed(ember_gguf_vtype t)
{
    return t == EMBER_GGUF_I8 || t == EMBER_GGUF_I16 || t == EMBER_GGUF_I32 || t == EMBER_GGUF_I64;
}

static ember_status find_typed(const ember_gguf *g, const char *key, const gkv **out)
{
    int64_t i = ember_gguf_find_key(g, key);
    if (i < 0) return ember_error(EMBER_ERR_NOT_FOUND, "gguf: key '%s' not found", key ? key : "(null)");
    *out = &g->kvs[i];
    return EMBER_OK;
}

/* Value of an integer or bool KV as (negative?, magnitude-ish) int pair. */
static ember_status kv_int(const gkv *kv, bool *neg, uint64_t *u, int64_t *i)
{
    if (is_unsigned(kv->type)) {
        *neg = false; *u = kv->s.u; *i = 0;
    } else if (is_signed(kv->type)) {
        *neg = kv->s.i < 0; *i = kv->s.i; *u = (uint64_t)kv->s.i;
    } else if (kv->type == EMBER_GGUF_BOOL) {
        *neg = false; *u = kv->s.b; *i = 0;
    } else {
        return ember_error(EMBER_ERR_FORMAT, "gguf: key '%s' has type %s, not an integer",
                           kv->key, vtype_names[kv->type]);
    }
    return EMBER_OK;
}

ember_status ember_gguf_get_u32(const ember_gguf *g, const char *key, uint32_t *out)
{
    const gkv *kv = NULL;
    ember_status s = find_typed(g, key, &kv);
    if (s) return s;
    bool neg; uint64_t u; int64_t i;
    if ((s = kv_int(kv, &neg, &u, &i))) return s;
    if (neg || u > UINT32_MAX)
        return ember_error(EMBER_ERR_FORMAT, "gguf: key '%s' value does not fit u32", key);
    *out = (uint32_t)u;
    return EMBER_OK;
}

ember_status ember_gguf_get_i64(const ember_gguf *g, const char *key, int64_t *out)
{
    const gkv *kv = NULL;
    ember_status s = find_typed(g, key, &kv);
    if (s) return s;
    bool neg; uint64_t u; int64_t i;
    if ((s = kv_int(kv, &neg, &u, &i))) return s;
    if (is_signed(kv->type)) { *out = i; return EMBER_OK; }
    if (u > (uint64_t)INT64_MAX)
        return ember_error(EMBER_ERR_FORMAT, "gguf: key '%s' value %llu does not fit i64", key,
                           (unsigned long long)u);
    *out = (int64_t)u;
    return EMBER_OK;
}

ember_status ember_gguf_get_f32(const ember_gguf *g, const char *key, float *out)
{
    const gkv *kv = NULL;
    ember_status s = find_typed(g, key, &kv);
    if (s) return s;
    if (kv->type == EMBER_GGUF_F32 || kv->type == EMBER_GGUF_F64) *out = (float)kv->s.f;
    else if (is_unsigned(kv->type)) *out = (float)kv->s.u;
    else if (is_signed(kv->type)) *out = (float)kv->s.i;
    else
        return ember_error(EMBER_ERR_FORMAT, "gguf: key '%s' has type %s, not a number", key,
                           vtype_names[kv->type]);
    return EMBER_OK;
}

ember_status ember_gguf_get_bool(const ember_gguf *g, const char *key, bool *out)
{
    const gkv *kv = NULL;
    ember_status s = find_typed(g, key, &kv);
    if (s) return s;
    if (kv->type != EMBER_GGUF_BOOL)
        return ember_error(EMBER_ERR_FORMAT, "gguf: key '%s' has type %s, not bool", key,
                           vtype_names[kv->type]);
    *out = kv->s.b;
    return EMBER_OK;
}

ember_status ember_gguf_get_str(const ember_gguf *g, const char *key, const char **out, size_t *len)
{
    const gkv *kv = NULL;
    ember_status s = find_typed(g, key, &kv);
    if (s) return s;
    if (kv->type != EMBER_GGUF_STRING)
        return ember_error(EMBER_ERR_FORMAT, "gguf: key '%s' has type %s, not string", key,
                           vtype_names[kv->type]);
    *out = g->blob + kv->str_off;
    if (len) *len = (size_t)kv->str_len;
    return EMBER_OK;
}

ember_gguf_scalar ember_gguf_kv_scalar(const ember_gguf *g, int64_t i)
{
    ember_gguf_scalar z;
    memset(&z, 0, sizeof z);
    if (i < 0 || i >= g->n_kv) return z;
    const gkv *kv = &g->kvs[i];
    if (kv->type == EMBER_GGUF_STRING || kv->type == EMBER_GGUF_ARRAY) return z;
    return kv->s;
}

const char *ember_gguf_kv_str(const ember_gguf *g, int64_t i, size_t *len)
{
    if (i < 0 || i >= g->n_kv || g->kvs[i].type != EMBER_GGUF_STRING) return NULL;
    if (len) *len = (size_t)g->kvs[i].str_len;
    return g->blob + g->kvs[i].str_off;
}

static void arr_from_node(const gnode *nd, ember_gguf_arr *out)
{
    out->type = nd->type;
    out->n = nd->n;
    out->data = (nd->type == EMBER_GGUF_STRING || nd->type == EMBER_GGUF_ARRAY)
                    ? NULL : (const void *)(nd->g->base + nd->idx);
    out->impl = nd;
}

ember_status ember_gguf_kv_arr(const ember_gguf *g, int64_t i, ember_gguf_arr *out)
{
    if (i < 0 || i >= g->n_kv)
        return ember_error(EMBER_ERR_NOT_FOUND, "gguf: kv index %lld out of range", (long long)i);
    const gkv *kv = &g->kvs[i];
    if (kv->type != EMBER_GGUF_ARRAY)
        return ember_error(EMBER_ERR_FORMAT, "gguf: key '%s' has type %s, not array", kv->key,
                           vtype_names[kv->type]);
    arr_from_node(&g->nodes[kv->node], out);
    return EMBER_OK;
}

ember_status ember_gguf_get_arr(const ember_gguf *g, const char *key, ember_gguf_arr *out)
{
    int64_t i = ember_gguf_find_key(g, key);
    if (i < 0) return ember_error(EMBER_ERR_NOT_FOUND, "gguf: key '%s' not found", key ? key : "(null)");
    return ember_gguf_kv_arr(g, i, out);
}

const char *ember_gguf_arr_str(const ember_gguf_arr *a, uint64_t j, size_t *len)
{
    const gnode *nd = a ? a->impl : NULL;
    if (!nd || nd->type != EMBER_GGUF_STRING || j >= nd->n) return NULL;
    const ember_gguf *g = nd->g;
    uint64_t b = g->stroff[nd->idx + j], e = g->stroff[nd->idx + j + 1];
    if (len) *len = (size_t)(e - b - 1);
    return g->blob + b;
}

ember_status ember_gguf_arr_sub(const ember_gguf_arr *a, uint64_t j, ember_gguf_arr *out)
{
    const gnode *nd = a ? a->impl : NULL;
    if (!nd || nd->type != EMBER_GGUF_ARRAY)
        return ember_error(EMBER_ERR_FORMAT, "gguf: array elements are not arrays");
    if (j >= nd->n)
        return ember_error(EMBER_ERR_RANGE, "gguf: array element %llu out of range (count %llu)",
                           (unsigned long long)j, (unsigned long long)nd->n);
    arr_from_node(&nd->g->nodes[nd->idx + j], out);
    return EMBER_OK;
}

ember_gguf_scalar ember_gguf_arr_scalar(const ember_gguf_arr *a, uint64_t j)
{
    ember_gguf_scalar z;
    memset(&z, 0, sizeof z);
    const gnode *nd = a ? a->impl : NULL;
    if (!nd || j >= nd->n || nd->type == EMBER_GGUF_STRING || nd->type == EMBER_GGUF_ARRAY) return z;
    return load_scalar(nd->type, nd->g->base + nd->idx + j * vtype_size[nd->type]);
}

int64_t ember_gguf_find_tensor(const ember_gguf *g, const char *name)
{
    return hash_find(g->t_hash, g->t_mask, name, tensor_name, g);
}

const ember_gguf_tensor *ember_gguf_tensor_at(const ember_gguf *g, int64_t i)
{
    return i >= 0 && i < g->n_tensors ? &g->tensors[i] : NULL;
}

const ember_gguf_tensor *ember_gguf_get_tensor(const ember_gguf *g, const char *name)
{
    return ember_gguf_tensor_at(g, ember_gguf_find_tensor(g, name));
}

/* ------------------------------------------------------------------------- */
/* writer                                                                    */
/*
 * Each KV is kept serialized (the bytes after its type tag), so writing is a
 * concatenation. Layout written (gguf.md): header, KVs in insertion order,
 * tensor infos in insertion order with offsets that are running sums padded
 * to the alignment, zero padding to the alignment, tensor data each padded.
 */

typedef struct bbuf { uint8_t *p; size_t len, cap; bool oom; } bbuf;

static void bb_put(bbuf *b, const void *d, size_t n)
{
    if (b->oom) return;
    if (b->len + n < b->len) { b->oom = true; return; }
    if (b->len + n > b->cap) {
        size_t nc = b->cap ? b->cap : 256;
        while (nc < b->len + n) {
            if (nc > SIZE_MAX / 2) { b->oom = true; return; }
            nc *= 2;
        }
        uint8_t *q = realloc(b->p, nc);
        if (!q) { b->oom = true; return; }
        b->p = q;
        b->cap = nc;
    }
    if (n) memcpy(b->p + b->len, d, n);
    b->len += n;
}
static void bb_u32(bbuf *b, uint32_t v) { bb_put(b, &v, 4); }
static void bb_u64(bbuf *b, uint64_t v) { bb_put(b, &v, 8); }
static void bb_str(bbuf *b, const char *s, size_t n) { bb_u64(b, n); bb_put(b, s, n); }

typedef struct wkv { char *key; ember_gguf_vtype type; bbuf val; } wkv;
typedef struct wtensor {
    char *name; uint32_t type, n_dims; int64_t ne[4]; uint64_t nbytes; void *data;
} wtensor;

struct ember_gguf_writer {
    uint32_t version, alignment;
    wkv *kvs; uint64_t n_kv, kv_cap;
    wtensor *ts; uint64_t n_t, t_cap;
};

ember_status ember_gguf_writer_new(uint32_t alignment, ember_gguf_writer **out)
{
    if (!out) return ember_error(EMBER_ERR_INVALID_ARG, "gguf writer: NULL out");
    *out = NULL;
    if (alignment == 0) alignment = GGUF_DEFAULT_ALIGNMENT;
    if (alignment & (alignment - 1))
        return ember_error(EMBER_ERR_INVALID_ARG, "gguf writer: alignment %u is not a power of two", alignment);
    ember_gguf_writer *w = calloc(1, sizeof *w);
    if (!w) return ember_error(EMBER_ERR_NOMEM, "gguf writer: out of memory");
    w->version = 3;
    w->alignment = GGUF_DEFAULT_ALIGNMENT;
    if (alignment != GGUF_DEFAULT_ALIGNMENT) {
        ember_status s = ember_gguf_writer_set_u32(w, "general.alignment", alignment);
        if (s) { ember_gguf_writer_free(w); return s; }
    }
    *out = w;
    return EMBER_OK;
}

void ember_gguf_writer_free(ember_gguf_writer *w)
{
    if (!w) return;
    for (uint64_t i = 0; i < w->n_kv; i++) { free(w->kvs[i].key); free(w->kvs[i].val.p); }
    for (uint64_t i = 0; i < w->n_t; i++) { free(w->ts[i].name); free(w->ts[i].data); }
    free(w->kvs);
    free(w->ts);
    free(w);
}

ember_status ember_gguf_writer_set_version(ember_gguf_writer *w, uint32_t version)
{
    if (!w || (version != 2 && version != 3))
        return ember_error(EMBER_ERR_INVALID_ARG, "gguf writer: version %u (only 2 or 3)", version);
    w->version = version;
    return EMBER_OK;
}

/* Takes ownership of `val` (freed on failure). Replaces an existing key. */
static ember_status w_set(ember_gguf_writer *w, const char *key, ember_gguf_vtype type, bbuf val)
{
    if (!w || !key || !*key) {
        free(val.p);
        return ember_error(EMBER_ERR_INVALID_ARG, "gguf writer: NULL writer or empty key");
    }
    if (val.oom) {
        free(val.p);
        return ember_error(EMBER_ERR_NOMEM, "gguf writer: out of memory for '%s'", key);
    }
    if (!strcmp(key, "general.alignment")) {
        uint32_t a = 0;
        if (type == EMBER_GGUF_U32) memcpy(&a, val.p, 4);
        if (type != EMBER_GGUF_U32 || a == 0 || (a & (a - 1))) {
            free(val.p);
            return ember_error(EMBER_ERR_INVALID_ARG,
                               "gguf writer: general.alignment must be a u32 power of two");
        }
        w->alignment = a;
    }
    for (uint64_t i = 0; i < w->n_kv; i++) {
        if (!strcmp(w->kvs[i].key, key)) {
            free(w->kvs[i].val.p);
            w->kvs[i].type = type;
            w->kvs[i].val = val;
            return EMBER_OK;
        }
    }
    char *k = strdup(key);
    if (!k || !grow((void **)&w->kvs, &w->kv_cap, w->n_kv + 1, sizeof *w->kvs)) {
        free(k);
        free(val.p);
        return ember_error(EMBER_ERR_NOMEM, "gguf writer: out of memory for '%s'", key);
    }
    w->kvs[w->n_kv++] = (wkv){.key = k, .type = type, .val = val};
    return EMBER_OK;
}

ember_status ember_gguf_writer_set_scalar(ember_gguf_writer *w, const char *key, ember_gguf_vtype type,
                                          const void *v)
{
    if ((unsigned)type > EMBER_GGUF_F64 || type == EMBER_GGUF_STRING || type == EMBER_GGUF_ARRAY || !v)
        return ember_error(EMBER_ERR_INVALID_ARG, "gguf writer: '%s': type %d is not a scalar type",
                           key ? key : "(null)", (int)type);
    bbuf b = {0};
    if (type == EMBER_GGUF_BOOL) {
        uint8_t x = *(const bool *)v ? 1 : 0;
        bb_put(&b, &x, 1);
    } else {
        bb_put(&b, v, vtype_size[type]);
    }
    return w_set(w, key, type, b);
}

ember_status ember_gguf_writer_set_u32(ember_gguf_writer *w, const char *key, uint32_t v)
{
    return ember_gguf_writer_set_scalar(w, key, EMBER_GGUF_U32, &v);
}
ember_status ember_gguf_writer_set_i32(ember_gguf_writer *w, const char *key, int32_t v)
{
    return ember_gguf_writer_set_scalar(w, key, EMBER_GGUF_I32, &v);
}
ember_status ember_gguf_writer_set_u64(ember_gguf_writer *w, const char *key, uint64_t v)
{
    return ember_gguf_writer_set_scalar(w, key, EMBER_GGUF_U64, &v);
}
ember_status ember_gguf_writer_set_f32(ember_gguf_writer *w, const char *key, float v)
{
    return ember_gguf_writer_set_scalar(w, key, EMBER_GGUF_F32, &v);
}
ember_status ember_gguf_writer_set_bool(ember_gguf_writer *w, const char *key, bool v)
{
    return ember_gguf_writer_set_scalar(w, key, EMBER_GGUF_BOOL, &v);
}

ember_status ember_gguf_writer_set_str_n(ember_gguf_writer *w, const char *key, const char *v, size_t len)
{
    if (!v && len) return ember_error(EMBER_ERR_INVALID_ARG, "gguf writer: NULL string");
    bbuf b = {0};
    bb_str(&b, v ? v : "", len);
    return w_set(w, key, EMBER_GGUF_STRING, b);
}

ember_status ember_gguf_writer_set_str(ember_gguf_writer *w, const char *key, const char *v)
{
    if (!v) return ember_error(EMBER_ERR_INVALID_ARG, "gguf writer: NULL string");
    return ember_gguf_writer_set_str_n(w, key, v, strlen(v));
}

/* Serialize an array body from a writer descriptor (see gguf.h). */
static ember_status put_arr(bbuf *b, const ember_gguf_arr *a, int depth)
{
    if ((unsigned)a->type > EMBER_GGUF_F64)
        return ember_error(EMBER_ERR_INVALID_ARG, "gguf writer: array element type %d", (int)a->type);
    if (depth > GGUF_MAX_DEPTH)
        return ember_error(EMBER_ERR_INVALID_ARG, "gguf writer: arrays nested deeper than %d", GGUF_MAX_DEPTH);
    if (a->n && !a->data) return ember_error(EMBER_ERR_INVALID_ARG, "gguf writer: array data is NULL");
    bb_u32(b, (uint32_t)a->type);
    bb_u64(b, a->n);
    if (a->type == EMBER_GGUF_STRING) {
        const char *const *v = a->data;
        for (uint64_t j = 0; j < a->n; j++) {
            if (!v[j]) return ember_error(EMBER_ERR_INVALID_ARG, "gguf writer: string element %llu is NULL",
                                          (unsigned long long)j);
            bb_str(b, v[j], strlen(v[j]));
        }
    } else if (a->type == EMBER_GGUF_ARRAY) {
        const ember_gguf_arr *v = a->data;
        for (uint64_t j = 0; j < a->n; j++) {
            ember_status s = put_arr(b, &v[j], depth + 1);
            if (s) return s;
        }
    } else if (a->type == EMBER_GGUF_BOOL) {
        const bool *v = a->data;
        for (uint64_t j = 0; j < a->n; j++) {
            uint8_t x = v[j] ? 1 : 0;
            bb_put(b, &x, 1);
        }
    } else {
        if (a->n > SIZE_MAX / vtype_size[a->type])
            return ember_error(EMBER_ERR_INVALID_ARG, "gguf writer: array too large");
        bb_put(b, a->data, (size_t)(a->n * vtype_size[a->type]));
    }
    return b->oom ? ember_error(EMBER_ERR_NOMEM, "gguf writer: out of memory") : EMBER_OK;
}

ember_status ember_gguf_writer_set_arr_value(ember_gguf_writer *w, const char *key, const ember_gguf_arr *a)
{
    if (!a) return ember_error(EMBER_ERR_INVALID_ARG, "gguf writer: NULL array");
    bbuf b = {0};
    ember_status s = put_arr(&b, a, 0);
    if (s) { free(b.p); return s; }
    return w_set(w, key, EMBER_GGUF_ARRAY, b);
}

ember_status ember_gguf_writer_set_arr(ember_gguf_writer *w, const char *key,
                                       ember_gguf_vtype elem_type, const void *data, uint64_t n)
{
    if (elem_type == EMBER_GGUF_STRING || elem_type == EMBER_GGUF_ARRAY)
        return ember_error(EMBER_ERR_INVALID_ARG,
                           "gguf writer: '%s': use set_arr_str / set_arr_value for %s elements",
                           key ? key : "(null)", ember_gguf_vtype_name(elem_type));
    if ((unsigned)elem_type > EMBER_GGUF_F64)
        return ember_error(EMBER_ERR_INVALID_ARG, "gguf writer: array element type %d", (int)elem_type);
    ember_gguf_arr a = {.type = elem_type, .n = n, .data = data, .impl = NULL};
    return ember_gguf_writer_set_arr_value(w, key, &a);
}

ember_status ember_gguf_writer_set_arr_str(ember_gguf_writer *w, const char *key,
                                           const char *const *v, uint64_t n)
{
    ember_gguf_arr a = {.type = EMBER_GGUF_STRING, .n = n, .data = v, .impl = NULL};
    return ember_gguf_writer_set_arr_value(w, key, &a);
}

ember_status ember_gguf_writer_add_tensor(ember_gguf_writer *w, const char *name, uint32_t type,
                                          uint32_t n_dims, const int64_t *ne, const void *data)
{
    if (!w || !name || !ne)
        return ember_error(EMBER_ERR_INVALID_ARG, "gguf writer: NULL argument");
    if (n_dims < 1 || n_dims > 4)
        return ember_error(EMBER_ERR_INVALID_ARG, "gguf writer: tensor '%s': n_dims %u not in 1..4", name, n_dims);
    if (!ember_type_known(type))
        return ember_error(EMBER_ERR_UNSUPPORTED, "gguf writer: tensor '%s': type %u unknown", name, type);
    for (uint64_t i = 0; i < w->n_t; i++)
        if (!strcmp(w->ts[i].name, name))
            return ember_error(EMBER_ERR_INVALID_ARG, "gguf writer: duplicate tensor name '%s'", name);
    wtensor t = {.type = type, .n_dims = n_dims, .ne = {1, 1, 1, 1}};
    uint64_t nrows = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        if (ne[d] < 0)
            return ember_error(EMBER_ERR_INVALID_ARG, "gguf writer: tensor '%s': ne[%u] < 0", name, d);
        t.ne[d] = ne[d];
        if (d > 0) {
            if (ne[d] && nrows > UINT64_MAX / (uint64_t)ne[d])
                return ember_error(EMBER_ERR_INVALID_ARG, "gguf writer: tensor '%s': shape overflows", name);
            nrows *= (uint64_t)ne[d];
        }
    }
    uint64_t row;
    if (!ember_type_row_bytes(type, (uint64_t)t.ne[0], &row))
        return ember_error(EMBER_ERR_INVALID_ARG, "gguf writer: tensor '%s': ne[0] = %lld not a multiple of %zu",
                           name, (long long)t.ne[0], ember_type_block_size(type));
    if (row && nrows > UINT64_MAX / row)
        return ember_error(EMBER_ERR_INVALID_ARG, "gguf writer: tensor '%s': byte size overflows", name);
    t.nbytes = row * nrows;
    if (t.nbytes > SIZE_MAX)
        return ember_error(EMBER_ERR_NOMEM, "gguf writer: tensor '%s' too large", name);
    if (t.nbytes && !data)
        return ember_error(EMBER_ERR_INVALID_ARG, "gguf writer: tensor '%s': NULL data", name);
    t.name = strdup(name);
    t.data = malloc(t.nbytes ? (size_t)t.nbytes : 1);
    if (!t.name || !t.data || !grow((void **)&w->ts, &w->t_cap, w->n_t + 1, sizeof *w->ts)) {
        free(t.name);
        free(t.data);
        return ember_error(EMBER_ERR_NOMEM, "gguf writer: out of memory for tensor '%s'", name);
    }
    if (t.nbytes) memcpy(t.data, data, (size_t)t.nbytes);
    w->ts[w->n_t++] = t;
    return EMBER_OK;
}

static uint64_t pad_to(uint64_t x, uint64_t a) { return (a - x % a) % a; }

/* Header, KVs, tensor infos and padding up to the data section. */
static ember_status w_header(const ember_gguf_writer *w, bbuf *b, uint64_t *data_size)
{
    bb_put(b, GGUF_MAGIC, 4);
    bb_u32(b, w->version);
    bb_u64(b, w->n_t);
    bb_u64(b, w->n_kv);
    for (uint64_t i = 0; i < w->n_kv; i++) {
        bb_str(b, w->kvs[i].key, strlen(w->kvs[i].key));
        bb_u32(b, (uint32_t)w->kvs[i].type);
        bb_put(b, w->kvs[i].val.p, w->kvs[i].val.len);
    }
    uint64_t off = 0;
    for (uint64_t i = 0; i < w->n_t; i++) {
        const wtensor *t = &w->ts[i];
        bb_str(b, t->name, strlen(t->name));
        bb_u32(b, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++) bb_u64(b, (uint64_t)t->ne[d]);
        bb_u32(b, t->type);
        bb_u64(b, off);
        off += t->nbytes + pad_to(t->nbytes, w->alignment);
    }
    static const uint8_t zeros[256];
    uint64_t pad = pad_to(b->len, w->alignment);
    while (pad) {
        size_t k = pad > sizeof zeros ? sizeof zeros : (size_t)pad;
        bb_put(b, zeros, k);
        pad -= k;
    }
    *data_size = off;
    return b->oom ? ember_error(EMBER_ERR_NOMEM, "gguf writer: out of memory") : EMBER_OK;
}

ember_status ember_gguf_writer_write_buffer(ember_gguf_writer *w, void **buf, size_t *size)
{
    if (!w || !buf || !size) return ember_error(EMBER_ERR_INVALID_ARG, "gguf writer: NULL argument");
    bbuf b = {0};
    uint64_t data_size;
    ember_status s = w_header(w, &b, &data_size);
    static const uint8_t zeros[256];
    for (uint64_t i = 0; !s && i < w->n_t; i++) {
        bb_put(&b, w->ts[i].data, (size_t)w->ts[i].nbytes);
        uint64_t pad = pad_to(w->ts[i].nbytes, w->alignment);
        while (pad) {
            size_t k = pad > sizeof zeros ? sizeof zeros : (size_t)pad;
            bb_put(&b, zeros, k);
            pad -= k;
        }
    }
    if (!s && b.oom) s = ember_error(EMBER_ERR_NOMEM, "gguf writer: out of memory");
    if (s) { free(b.p); return s; }
    *buf = b.p;
    *size = b.len;
    return EMBER_OK;
}

ember_status ember_gguf_writer_write_file(ember_gguf_writer *w, const char *path)
{
    if (!w || !path) return ember_error(EMBER_ERR_INVALID_ARG, "gguf writer: NULL argument");
    bbuf b = {0};
    uint64_t data_size;
    ember_status s = w_header(w, &b, &data_size);
    if (s) { free(b.p); return s; }
    FILE *f = fopen(path, "wb");
    if (!f) {
        free(b.p);
        return ember_error(EMBER_ERR_IO, "gguf writer: cannot create '%s': %s", path, strerror(errno));
    }
    bool ok = fwrite(b.p, 1, b.len, f) == b.len;
    free(b.p);
    static const uint8_t zeros[256];
    for (uint64_t i = 0; ok && i < w->n_t; i++) {
        ok = fwrite(w->ts[i].data, 1, (size_t)w->ts[i].nbytes, f) == w->ts[i].nbytes;
        for (uint64_t pad = pad_to(w->ts[i].nbytes, w->alignment); ok && pad;) {
            size_t k = pad > sizeof zeros ? sizeof zeros : (size_t)pad;
            ok = fwrite(zeros, 1, k, f) == k;
            pad -= k;
        }
    }
    if (fclose(f) != 0) ok = false;
    if (!ok) return ember_error(EMBER_ERR_IO, "gguf writer: cannot write '%s': %s", path, strerror(errno));
    return EMBER_OK;
}
