/*
 * gguf.h — reading (memory-mapped) and writing GGUF v2/v3 files.
 *
 * Format source: ggml docs/gguf.md and gguf-py (gguf/constants.py,
 * gguf/gguf_reader.py). Little-endian; header magic "GGUF", u32 version,
 * u64 n_tensors, u64 n_kv; then n_kv key/value pairs, n_tensors tensor infos,
 * padding to general.alignment (default 32), then the data section.
 *
 * Owns: parsing and validating the whole header up front, so that every
 * later accessor is a bounds-safe lookup. Must not: know about models,
 * tokenizers or compute.
 *
 * Invariants after ember_gguf_open* succeeds: every string is NUL-terminated
 * in reader-owned memory, every array's elements lie inside the file, every
 * tensor's bytes lie inside the data section, and no count was trusted before
 * it was checked against the bytes remaining.
 */
#ifndef EMBER_GGUF_H
#define EMBER_GGUF_H

#include "ember.h"
#include "base/types.h"

typedef enum ember_gguf_vtype {
    EMBER_GGUF_U8 = 0, EMBER_GGUF_I8 = 1, EMBER_GGUF_U16 = 2, EMBER_GGUF_I16 = 3,
    EMBER_GGUF_U32 = 4, EMBER_GGUF_I32 = 5, EMBER_GGUF_F32 = 6, EMBER_GGUF_BOOL = 7,
    EMBER_GGUF_STRING = 8, EMBER_GGUF_ARRAY = 9, EMBER_GGUF_U64 = 10,
    EMBER_GGUF_I64 = 11, EMBER_GGUF_F64 = 12,
} ember_gguf_vtype;

typedef struct ember_gguf ember_gguf;

/* Short name of a value type as gguf-py's GGUFValueType lower-cased ("u32",
 * "string", "array"); "?" for ids outside 0..12. */
const char *ember_gguf_vtype_name(ember_gguf_vtype t);

/* A tensor-table entry. ne[0] is the contiguous (row) dimension; unused dims
 * are 1. `data` points into the mapping; `nbytes` is the exact payload size. */
typedef struct ember_gguf_tensor {
    const char *name;
    uint32_t n_dims;       /* 1..4 */
    int64_t ne[4];
    uint32_t type;         /* ember_type id */
    uint64_t offset;       /* from the start of the data section, bytes */
    uint64_t nbytes;
    const void *data;
} ember_gguf_tensor;

/* Open and validate `path` with mmap (read-only). Errors: EMBER_ERR_IO (open,
 * stat, mmap, not a regular file), EMBER_ERR_FORMAT (message: "gguf: kv[i]
 * 'key': <what> (byte offset N)" or "tensor[i] 'name': ..."),
 * EMBER_ERR_UNSUPPORTED (version other than 2 or 3; a ggml tensor type id
 * without geometry in base/types.h), EMBER_ERR_NOMEM.
 * Rejected as FORMAT: bad magic; any count or length larger than the bytes
 * left; empty keys; NUL bytes inside keys or tensor names; duplicate keys or
 * tensor names; unknown value types; arrays nested deeper than 16 levels;
 * general.alignment not a u32 power of two; n_dims outside 1..4; ne > INT64_MAX
 * or an element count overflowing int64; ne[0] not a whole number of blocks;
 * tensor offsets not a multiple of the alignment, outside the data section,
 * or overlapping another tensor. Memory used is O(file size); time is linear.
 * Bool values: any nonzero byte reads as true. */
ember_status ember_gguf_open(const char *path, ember_gguf **out);

/* Same over a caller-owned buffer (fuzzing, tests). The buffer must outlive
 * the reader. */
ember_status ember_gguf_open_memory(const void *data, size_t size, ember_gguf **out);

void ember_gguf_close(ember_gguf *g);

uint32_t ember_gguf_version(const ember_gguf *g);
int64_t ember_gguf_n_kv(const ember_gguf *g);
int64_t ember_gguf_n_tensors(const ember_gguf *g);
uint64_t ember_gguf_alignment(const ember_gguf *g);
uint64_t ember_gguf_data_offset(const ember_gguf *g); /* file offset of data section */
uint64_t ember_gguf_file_size(const ember_gguf *g);

/* --- key/value metadata ---------------------------------------------------- */

/* Index of `key`, or -1 if absent. O(1) average (hash table). */
int64_t ember_gguf_find_key(const ember_gguf *g, const char *key);
const char *ember_gguf_key(const ember_gguf *g, int64_t i);
ember_gguf_vtype ember_gguf_kv_type(const ember_gguf *g, int64_t i);

/* Typed getters by key. They return EMBER_ERR_NOT_FOUND if the key is absent
 * and EMBER_ERR_FORMAT if its type cannot represent the request: integer
 * getters accept any integer type (and bool) whose value fits; f32 accepts
 * f32/f64 and integers. */
ember_status ember_gguf_get_u32(const ember_gguf *g, const char *key, uint32_t *out);
ember_status ember_gguf_get_i64(const ember_gguf *g, const char *key, int64_t *out);
ember_status ember_gguf_get_f32(const ember_gguf *g, const char *key, float *out);
ember_status ember_gguf_get_bool(const ember_gguf *g, const char *key, bool *out);
/* NUL-terminated string owned by the reader; *len excludes the NUL (may be NULL). */
ember_status ember_gguf_get_str(const ember_gguf *g, const char *key, const char **out, size_t *len);

/* Scalars by index (for dumping). The value must be of the matching type. */
typedef union ember_gguf_scalar {
    uint64_t u; int64_t i; double f; bool b;
} ember_gguf_scalar;
/* For a scalar KV (not string/array): its value widened (u for unsigned,
 * i for signed, f for floats, b for bool). */
ember_gguf_scalar ember_gguf_kv_scalar(const ember_gguf *g, int64_t i);
/* For a string KV. */
const char *ember_gguf_kv_str(const ember_gguf *g, int64_t i, size_t *len);

/* Arrays. An array value has an element type and a count. Nested arrays
 * (element type ARRAY) are supported: ember_gguf_arr_sub() descends. */
typedef struct ember_gguf_arr {
    ember_gguf_vtype type;  /* element type */
    uint64_t n;             /* element count */
    const void *data;       /* numeric/bool elements, little-endian, packed, in the
                               mapping (may be unaligned: memcpy); NULL for STRING/ARRAY */
    const void *impl;       /* reader-internal */
} ember_gguf_arr;

/* Array value of KV `i`, or of `key`. EMBER_ERR_FORMAT if not an array. */
ember_status ember_gguf_kv_arr(const ember_gguf *g, int64_t i, ember_gguf_arr *out);
ember_status ember_gguf_get_arr(const ember_gguf *g, const char *key, ember_gguf_arr *out);
/* Element j of a STRING array (NUL-terminated, reader-owned; *len excludes the
 * NUL and may count embedded NULs); NULL if out of range or not STRING. O(1). */
const char *ember_gguf_arr_str(const ember_gguf_arr *a, uint64_t j, size_t *len);
/* Element j of an ARRAY array. Errors: EMBER_ERR_FORMAT (elements are not
 * arrays), EMBER_ERR_RANGE (j >= n). */
ember_status ember_gguf_arr_sub(const ember_gguf_arr *a, uint64_t j, ember_gguf_arr *out);
/* Element j of a numeric/bool array, widened as in ember_gguf_kv_scalar;
 * all-zero if out of range or STRING/ARRAY. */
ember_gguf_scalar ember_gguf_arr_scalar(const ember_gguf_arr *a, uint64_t j);

/* --- tensors --------------------------------------------------------------- */

/* Index of tensor `name`, or -1. */
int64_t ember_gguf_find_tensor(const ember_gguf *g, const char *name);
const ember_gguf_tensor *ember_gguf_tensor_at(const ember_gguf *g, int64_t i);
/* Convenience: tensor by name or NULL. */
const ember_gguf_tensor *ember_gguf_get_tensor(const ember_gguf *g, const char *name);

/* --- writer ---------------------------------------------------------------- */

typedef struct ember_gguf_writer ember_gguf_writer;

/* Start a GGUF v3 file with the given alignment (0 = 32). An alignment other
 * than 32 is recorded as the u32 KV general.alignment (gguf.md); setting that
 * key later changes the alignment. Errors: EMBER_ERR_INVALID_ARG (not a power
 * of two), EMBER_ERR_NOMEM. Setting a key that exists replaces its value in
 * place; keys are written in first-set order, tensors in add order. */
ember_status ember_gguf_writer_new(uint32_t alignment, ember_gguf_writer **out);
void ember_gguf_writer_free(ember_gguf_writer *w);
ember_status ember_gguf_writer_set_u32(ember_gguf_writer *w, const char *key, uint32_t v);
ember_status ember_gguf_writer_set_i32(ember_gguf_writer *w, const char *key, int32_t v);
ember_status ember_gguf_writer_set_u64(ember_gguf_writer *w, const char *key, uint64_t v);
ember_status ember_gguf_writer_set_f32(ember_gguf_writer *w, const char *key, float v);
ember_status ember_gguf_writer_set_bool(ember_gguf_writer *w, const char *key, bool v);
ember_status ember_gguf_writer_set_str(ember_gguf_writer *w, const char *key, const char *v);
/* Any scalar type (not STRING/ARRAY): `v` points to one value of the
 * matching C type (uint8_t, int8_t, ..., bool for BOOL, double for F64). */
ember_status ember_gguf_writer_set_scalar(ember_gguf_writer *w, const char *key,
                                          ember_gguf_vtype type, const void *v);
/* String of `len` bytes (may contain NUL). */
ember_status ember_gguf_writer_set_str_n(ember_gguf_writer *w, const char *key,
                                         const char *v, size_t len);
/* Write GGUF version 2 or 3 in the header (the layouts are identical for
 * little-endian files; v2 only differs in the number). Default 3. */
ember_status ember_gguf_writer_set_version(ember_gguf_writer *w, uint32_t version);
/* Array of any element type, nested to 16 levels. Writer descriptor
 * convention: `a->data` holds n packed numeric elements, n `bool` for BOOL,
 * n `const char *` (NUL-terminated) for STRING, or n `ember_gguf_arr`
 * descriptors for ARRAY; `impl` is ignored. An ember_gguf_arr returned by
 * the reader is NOT a valid descriptor for STRING/ARRAY elements. */
ember_status ember_gguf_writer_set_arr_value(ember_gguf_writer *w, const char *key,
                                             const ember_gguf_arr *a);
/* Numeric array: `data` holds n packed elements of `elem_type` (`bool` for
 * BOOL). STRING/ARRAY elements: use set_arr_str / set_arr_value. */
ember_status ember_gguf_writer_set_arr(ember_gguf_writer *w, const char *key,
                                       ember_gguf_vtype elem_type, const void *data, uint64_t n);
ember_status ember_gguf_writer_set_arr_str(ember_gguf_writer *w, const char *key,
                                           const char *const *v, uint64_t n);
/* Add a tensor; `data` (nbytes computed from type and ne) is copied. */
ember_status ember_gguf_writer_add_tensor(ember_gguf_writer *w, const char *name, uint32_t type,
                                          uint32_t n_dims, const int64_t *ne, const void *data);
/* Serialize to `path`, or to a malloc'd buffer (*buf, *size; caller frees). */
ember_status ember_gguf_writer_write_file(ember_gguf_writer *w, const char *path);
ember_status ember_gguf_writer_write_buffer(ember_gguf_writer *w, void **buf, size_t *size);

#endif
