/*
 * inspect.c — `ember inspect FILE [--json]`: a GGUF file's header, metadata,
 * tensor table, parameter count and bytes per tensor type.
 *
 * Owns: presenting what src/gguf/ parsed, as text for people (long arrays and
 * strings summarized) or as complete JSON for programs (--json; every array
 * element, nested arrays as nested lists). Must not: parse GGUF itself or
 * interpret models.
 *
 * JSON shape: {"file", "version", "alignment", "data_offset", "file_size",
 * "n_kv", "n_tensors", "metadata": [{"key", "type", ["elem_type", "types",
 * "count"], "value"}], "tensors": [{"name", "type", "type_id", "n_dims",
 * "shape" (ne[0..n_dims-1], ne[0] contiguous), "n_elements", "bytes",
 * "offset" (from data section), "file_offset"}], "n_params", "n_bytes",
 * "bytes_per_type": {TYPE: {"tensors", "n_elements", "bytes"}}}.
 * "types" lists the value type then element types down nested arrays, as
 * gguf-py's ReaderField.types does. Floats that JSON cannot hold (NaN, inf)
 * and u64 values above INT64_MAX are written as strings; string bytes that
 * are not UTF-8 are replaced by U+FFFD.
 */
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "base/types.h"
#include "gguf/gguf.h"

#define SUMMARY_ELEMS 8   /* array elements shown in text mode */
#define SUMMARY_CHARS 72  /* string characters shown in text mode */

static void usage(FILE *f)
{
    fprintf(f, "usage: ember inspect FILE [--json]\n"
               "  Print a GGUF file's metadata (long arrays summarized), tensors\n"
               "  (name, type, shape, bytes, offset), parameter count and bytes per type.\n"
               "  --json   complete machine-readable output (all array elements)\n");
}

static bool is_float(ember_gguf_vtype t) { return t == EMBER_GGUF_F32 || t == EMBER_GGUF_F64; }
static bool is_signed(ember_gguf_vtype t)
{
    return t == EMBER_GGUF_I8 || t == EMBER_GGUF_I16 || t == EMBER_GGUF_I32 || t == EMBER_GGUF_I64;
}

/* ---- JSON ---------------------------------------------------------------- */

/* Length of a valid UTF-8 sequence at s (max n bytes), or 0 if invalid. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t k;
    uint32_t cp;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) { k = 2; cp = c & 0x1F; }
    else if (c >= 0xE0 && c <= 0xEF) { k = 3; cp = c & 0x0F; }
    else if (c >= 0xF0 && c <= 0xF4) { k = 4; cp = c & 0x07; }
    else return 0;
    if (k > n) return 0;
    for (size_t i = 1; i < k; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if ((k == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (k == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
        return 0;
    return k;
}

static json_t *jstr(const char *s, size_t n)
{
    json_t *j = json_stringn(s, n);
    if (j) return j;
    /* not UTF-8: replace each bad byte by U+FFFD */
    char *buf = malloc(n * 3 + 1);
    if (!buf) return json_null();
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        size_t k = utf8_seq((const unsigned char *)s + i, n - i);
        if (k) { memcpy(buf + o, s + i, k); o += k; i += k; }
        else { memcpy(buf + o, "\xEF\xBF\xBD", 3); o += 3; i++; }
    }
    j = json_stringn(buf, o);
    free(buf);
    return j ? j : json_null();
}

static json_t *jscalar(ember_gguf_vtype t, ember_gguf_scalar v)
{
    char buf[32];
    if (t == EMBER_GGUF_BOOL) return json_boolean(v.b);
    if (is_float(t)) {
        if (isfinite(v.f)) return json_real(v.f);
        return json_string(isnan(v.f) ? "nan" : v.f > 0 ? "inf" : "-inf");
    }
    if (is_signed(t)) return json_integer((json_int_t)v.i);
    if (v.u <= (uint64_t)INT64_MAX) return json_integer((json_int_t)v.u);
    snprintf(buf, sizeof buf, "%" PRIu64, v.u);
    return json_string(buf);
}

static json_t *jarr(const ember_gguf_arr *a)
{
    json_t *l = json_array();
    for (uint64_t j = 0; j < a->n; j++) {
        json_t *e;
        if (a->type == EMBER_GGUF_STRING) {
            size_t len;
            const char *s = ember_gguf_arr_str(a, j, &len);
            e = jstr(s, len);
        } else if (a->type == EMBER_GGUF_ARRAY) {
            ember_gguf_arr sub;
            e = ember_gguf_arr_sub(a, j, &sub) ? json_null() : jarr(&sub);
        } else {
            e = jscalar(a->type, ember_gguf_arr_scalar(a, j));
        }
        json_array_append_new(l, e);
    }
    return l;
}

/* gguf-py ReaderField.types: [ARRAY, elem, (elem of first sub-array ...)] */
static json_t *jtypes(const ember_gguf_arr *a)
{
    json_t *l = json_array();
    json_array_append_new(l, json_string("array"));
    ember_gguf_arr cur = *a;
    for (;;) {
        json_array_append_new(l, json_string(ember_gguf_vtype_name(cur.type)));
        if (cur.type != EMBER_GGUF_ARRAY || cur.n == 0) break;
        ember_gguf_arr sub;
        if (ember_gguf_arr_sub(&cur, 0, &sub)) break;
        cur = sub;
    }
    return l;
}

static json_t *json_report(const char *path, const ember_gguf *g)
{
    json_t *root = json_object();
    json_object_set_new(root, "file", jstr(path, strlen(path)));
    json_object_set_new(root, "version", json_integer(ember_gguf_version(g)));
    json_object_set_new(root, "alignment", json_integer((json_int_t)ember_gguf_alignment(g)));
    json_object_set_new(root, "data_offset", json_integer((json_int_t)ember_gguf_data_offset(g)));
    json_object_set_new(root, "file_size", json_integer((json_int_t)ember_gguf_file_size(g)));
    json_object_set_new(root, "n_kv", json_integer(ember_gguf_n_kv(g)));
    json_object_set_new(root, "n_tensors", json_integer(ember_gguf_n_tensors(g)));

    json_t *md = json_array();
    for (int64_t i = 0; i < ember_gguf_n_kv(g); i++) {
        json_t *o = json_object();
        ember_gguf_vtype t = ember_gguf_kv_type(g, i);
        const char *key = ember_gguf_key(g, i);
        json_object_set_new(o, "key", jstr(key, strlen(key)));
        json_object_set_new(o, "type", json_string(ember_gguf_vtype_name(t)));
        if (t == EMBER_GGUF_STRING) {
            size_t len;
            const char *s = ember_gguf_kv_str(g, i, &len);
            json_object_set_new(o, "value", jstr(s, len));
        } else if (t == EMBER_GGUF_ARRAY) {
            ember_gguf_arr a;
            if (!ember_gguf_kv_arr(g, i, &a)) {
                json_object_set_new(o, "elem_type", json_string(ember_gguf_vtype_name(a.type)));
                json_object_set_new(o, "types", jtypes(&a));
                json_object_set_new(o, "count", json_integer((json_int_t)a.n));
                json_object_set_new(o, "value", jarr(&a));
            }
        } else {
            json_object_set_new(o, "value", jscalar(t, ember_gguf_kv_scalar(g, i)));
        }
        json_array_append_new(md, o);
    }
    json_object_set_new(root, "metadata", md);

    json_t *ts = json_array(), *per = json_object();
    uint64_t n_params = 0, n_bytes = 0;
    for (int64_t i = 0; i < ember_gguf_n_tensors(g); i++) {
        const ember_gguf_tensor *t = ember_gguf_tensor_at(g, i);
        uint64_t nel = 1;
        json_t *o = json_object(), *shape = json_array();
        for (uint32_t d = 0; d < t->n_dims; d++) json_array_append_new(shape, json_integer(t->ne[d]));
        for (int d = 0; d < 4; d++) nel *= (uint64_t)t->ne[d];
        json_object_set_new(o, "name", jstr(t->name, strlen(t->name)));
        json_object_set_new(o, "type", json_string(ember_type_name(t->type)));
        json_object_set_new(o, "type_id", json_integer(t->type));
        json_object_set_new(o, "n_dims", json_integer(t->n_dims));
        json_object_set_new(o, "shape", shape);
        json_object_set_new(o, "n_elements", json_integer((json_int_t)nel));
        json_object_set_new(o, "bytes", json_integer((json_int_t)t->nbytes));
        json_object_set_new(o, "offset", json_integer((json_int_t)t->offset));
        json_object_set_new(o, "file_offset", json_integer((json_int_t)(ember_gguf_data_offset(g) + t->offset)));
        json_array_append_new(ts, o);
        n_params += nel;
        n_bytes += t->nbytes;
        const char *tn = ember_type_name(t->type);
        json_t *p = json_object_get(per, tn);
        if (!p) {
            p = json_pack("{s:I,s:I,s:I}", "tensors", (json_int_t)0, "n_elements", (json_int_t)0, "bytes", (json_int_t)0);
            json_object_set_new(per, tn, p);
        }
        json_object_set_new(p, "tensors", json_integer(json_integer_value(json_object_get(p, "tensors")) + 1));
        json_object_set_new(p, "n_elements",
                            json_integer(json_integer_value(json_object_get(p, "n_elements")) + (json_int_t)nel));
        json_object_set_new(p, "bytes",
                            json_integer(json_integer_value(json_object_get(p, "bytes")) + (json_int_t)t->nbytes));
    }
    json_object_set_new(root, "tensors", ts);
    json_object_set_new(root, "n_params", json_integer((json_int_t)n_params));
    json_object_set_new(root, "n_bytes", json_integer((json_int_t)n_bytes));
    json_object_set_new(root, "bytes_per_type", per);
    return root;
}

/* ---- text ---------------------------------------------------------------- */

/* A string quoted, control bytes escaped, cut after SUMMARY_CHARS bytes. */
static void put_str(FILE *f, const char *s, size_t n, bool cut)
{
    size_t m = cut && n > SUMMARY_CHARS ? SUMMARY_CHARS : n;
    fputc('"', f);
    for (size_t i = 0; i < m; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c == '\n') fputs("\\n", f);
        else if (c == '\t') fputs("\\t", f);
        else if (c < 0x20 || c == 0x7F) fprintf(f, "\\x%02x", c);
        else fputc(c, f);
    }
    fputc('"', f);
    if (m < n) fprintf(f, "... (%zu bytes)", n);
}

static void put_scalar(FILE *f, ember_gguf_vtype t, ember_gguf_scalar v)
{
    if (t == EMBER_GGUF_BOOL) fputs(v.b ? "true" : "false", f);
    else if (is_float(t)) fprintf(f, "%.9g", v.f);
    else if (is_signed(t)) fprintf(f, "%" PRId64, v.i);
    else fprintf(f, "%" PRIu64, v.u);
}

static void put_arr(FILE *f, const ember_gguf_arr *a)
{
    uint64_t m = a->n > SUMMARY_ELEMS ? SUMMARY_ELEMS : a->n;
    fputc('[', f);
    for (uint64_t j = 0; j < m; j++) {
        if (j) fputs(", ", f);
        if (a->type == EMBER_GGUF_STRING) {
            size_t len;
            const char *s = ember_gguf_arr_str(a, j, &len);
            put_str(f, s, len, true);
        } else if (a->type == EMBER_GGUF_ARRAY) {
            ember_gguf_arr sub;
            if (!ember_gguf_arr_sub(a, j, &sub)) put_arr(f, &sub);
        } else {
            put_scalar(f, a->type, ember_gguf_arr_scalar(a, j));
        }
    }
    if (m < a->n) fprintf(f, ", ... (%" PRIu64 " total)", a->n);
    fputc(']', f);
}

static void text_report(FILE *f, const char *path, const ember_gguf *g)
{
    fprintf(f, "%s: GGUF v%u, %" PRId64 " metadata keys, %" PRId64 " tensors, alignment %" PRIu64
               ", data at byte %" PRIu64 ", %" PRIu64 " bytes\n",
            path, ember_gguf_version(g), ember_gguf_n_kv(g), ember_gguf_n_tensors(g), ember_gguf_alignment(g),
            ember_gguf_data_offset(g), ember_gguf_file_size(g));
    fprintf(f, "\nmetadata:\n");
    for (int64_t i = 0; i < ember_gguf_n_kv(g); i++) {
        ember_gguf_vtype t = ember_gguf_kv_type(g, i);
        char type[32];
        ember_gguf_arr a;
        if (t == EMBER_GGUF_ARRAY && !ember_gguf_kv_arr(g, i, &a))
            snprintf(type, sizeof type, "%s[%" PRIu64 "]", ember_gguf_vtype_name(a.type), a.n);
        else
            snprintf(type, sizeof type, "%s", ember_gguf_vtype_name(t));
        fprintf(f, "  %-44s %-14s = ", ember_gguf_key(g, i), type);
        if (t == EMBER_GGUF_STRING) {
            size_t len;
            const char *s = ember_gguf_kv_str(g, i, &len);
            put_str(f, s, len, true);
        } else if (t == EMBER_GGUF_ARRAY) {
            put_arr(f, &a);
        } else {
            put_scalar(f, t, ember_gguf_kv_scalar(g, i));
        }
        fputc('\n', f);
    }

    fprintf(f, "\ntensors:\n  %5s %-36s %-7s %-26s %12s %12s\n", "#", "name", "type", "shape", "bytes", "offset");
    struct { uint64_t n, nel, bytes; } per[EMBER_TYPE_COUNT];
    memset(per, 0, sizeof per);
    uint64_t n_params = 0, n_bytes = 0;
    for (int64_t i = 0; i < ember_gguf_n_tensors(g); i++) {
        const ember_gguf_tensor *t = ember_gguf_tensor_at(g, i);
        char shape[96];
        int o = snprintf(shape, sizeof shape, "[");
        for (uint32_t d = 0; d < t->n_dims && o < (int)sizeof shape; d++)
            o += snprintf(shape + o, sizeof shape - (size_t)o, "%s%" PRId64, d ? ", " : "", t->ne[d]);
        if (o < (int)sizeof shape) snprintf(shape + o, sizeof shape - (size_t)o, "]");
        fprintf(f, "  %5" PRId64 " %-36s %-7s %-26s %12" PRIu64 " %12" PRIu64 "\n", i, t->name,
                ember_type_name(t->type), shape, t->nbytes, t->offset);
        uint64_t nel = (uint64_t)t->ne[0] * (uint64_t)t->ne[1] * (uint64_t)t->ne[2] * (uint64_t)t->ne[3];
        n_params += nel;
        n_bytes += t->nbytes;
        per[t->type].n++;
        per[t->type].nel += nel;
        per[t->type].bytes += t->nbytes;
    }
    fprintf(f, "\nparameters: %" PRIu64 " (%.2f M), tensor bytes: %" PRIu64 " (%.2f MiB, %.3f bits/param)\n",
            n_params, n_params / 1e6, n_bytes, n_bytes / 1048576.0, n_params ? 8.0 * n_bytes / n_params : 0.0);
    fprintf(f, "\nbytes per type:\n  %-7s %8s %14s %14s\n", "type", "tensors", "elements", "bytes");
    for (uint32_t t = 0; t < EMBER_TYPE_COUNT; t++)
        if (per[t].n)
            fprintf(f, "  %-7s %8" PRIu64 " %14" PRIu64 " %14" PRIu64 "\n", ember_type_name(t), per[t].n,
                    per[t].nel, per[t].bytes);
}

int cmd_inspect(int argc, char **argv)
{
    const char *path = NULL;
    bool as_json = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) as_json = true;
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) { usage(stdout); return 0; }
        else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "ember inspect: unknown option '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        } else if (!path) path = argv[i];
        else {
            fprintf(stderr, "ember inspect: more than one FILE\n");
            usage(stderr);
            return 2;
        }
    }
    if (!path) { usage(stderr); return 2; }

    ember_gguf *g;
    ember_status s = ember_gguf_open(path, &g);
    if (s) {
        fprintf(stderr, "ember inspect: %s (%s)\n", ember_last_error(), ember_status_name(s));
        return 1;
    }
    int rc = 0;
    if (as_json) {
        json_t *j = json_report(path, g);
        if (json_dumpf(j, stdout, JSON_COMPACT) != 0) rc = 1;
        fputc('\n', stdout);
        json_decref(j);
    } else {
        text_report(stdout, path, g);
    }
    if (fflush(stdout) != 0) rc = 1;
    ember_gguf_close(g);
    return rc;
}
