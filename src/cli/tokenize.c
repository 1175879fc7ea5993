/*
 * tokenize.c — `ember tokenize`: print the tokens of a text.
 *
 *   ember tokenize -m FILE [--ids|--pieces] [--no-special] [--parse-special] TEXT
 *   ember tokenize -m FILE [--ids|--pieces] -f TEXTFILE
 *
 * Default output: one line per token, "id<TAB>piece" (piece JSON-escaped).
 * --ids: the ids as one JSON array; --pieces: the pieces as one JSON array.
 * Special tokens are added as the model says (add_bos/add_eos) unless
 * --no-special; control tokens written in the text are recognised only with
 * --parse-special (user text never forges them).
 *
 * Hidden test mode: --batch FILE reads JSON lines {"t": text} or {"b":
 * base64 bytes}, optional "s": 1, and writes one JSON line each:
 * {"ids": [...] (add_special=false, parse_special=false), "sp": [...]
 * (true/true, when "s"), "dec": base64 of detokenize(ids), "stream": base64
 * of the streaming detokenizer's output}. A line {"piece_ids": [...]} is
 * answered with {"pieces": [base64 of token_to_piece(id, special=true)]},
 * a line {"info": true} with the vocab's special ids, add_bos/add_eos and
 * its EOG and control id lists.
 *
 * Owns: argument parsing and output formatting. Must not: tokenize by itself.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/status.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: ember tokenize -m MODEL.gguf [--ids|--pieces] [--no-special] [--parse-special] (TEXT | -f FILE)\n");
}

static char *read_file(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, k = 0;
    char *b = malloc(cap);
    for (;;) {
        if (!b) { fclose(f); return NULL; }
        size_t r = fread(b + k, 1, cap - k, f);
        k += r;
        if (k < cap) break;
        cap *= 2;
        char *nb = realloc(b, cap);
        if (!nb) { free(b); fclose(f); return NULL; }
        b = nb;
    }
    fclose(f);
    *n = k;
    return b;
}

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static char *b64_encode(const unsigned char *s, size_t n)
{
    char *o = malloc(4 * ((n + 2) / 3) + 1), *p = o;
    if (!o) return NULL;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)s[i] << 16 | (i + 1 < n ? (uint32_t)s[i + 1] << 8 : 0) | (i + 2 < n ? s[i + 2] : 0);
        *p++ = B64[v >> 18 & 63];
        *p++ = B64[v >> 12 & 63];
        *p++ = i + 1 < n ? B64[v >> 6 & 63] : '=';
        *p++ = i + 2 < n ? B64[v & 63] : '=';
    }
    *p = 0;
    return o;
}

static unsigned char *b64_decode(const char *s, size_t *n)
{
    size_t len = strlen(s);
    unsigned char *o = malloc(len / 4 * 3 + 3);
    if (!o) return NULL;
    size_t k = 0;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < len; i++) {
        const char *c = strchr(B64, s[i]);
        if (!c || !s[i]) continue;   /* '=' and junk end or skip */
        acc = acc << 6 | (uint32_t)(c - B64);
        bits += 6;
        if (bits >= 8) { bits -= 8; o[k++] = (unsigned char)(acc >> bits & 0xFF); }
    }
    *n = k;
    return o;
}

static json_t *ids_json(const ember_token *ids, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(a, json_integer(ids[i]));
    return a;
}

static int run_batch(const ember_vocab *v, const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) { fprintf(stderr, "ember tokenize: cannot open %s\n", path); return 1; }
    char *line = NULL;
    size_t cap = 0;
    ssize_t r;
    int rc = 0;
    ember_detok d;
    ember_detok_init(&d, v, false);
    while ((r = getline(&line, &cap, f)) > 0) {
        json_error_t err;
        json_t *rec = json_loadb(line, (size_t)r, 0, &err);
        if (!rec) { fprintf(stderr, "ember tokenize: bad JSON line: %s\n", err.text); rc = 1; break; }
        if (json_is_true(json_object_get(rec, "info"))) {
            /* the vocab's special ids, flags and EOG / control sets */
            json_t *o = json_object(), *eog = json_array(), *ctl = json_array();
            json_object_set_new(o, "n_tokens", json_integer(ember_vocab_n_tokens(v)));
            json_object_set_new(o, "bos", json_integer(ember_vocab_bos(v)));
            json_object_set_new(o, "eos", json_integer(ember_vocab_eos(v)));
            json_object_set_new(o, "eot", json_integer(ember_vocab_eot(v)));
            json_object_set_new(o, "pad", json_integer(ember_vocab_pad(v)));
            json_object_set_new(o, "add_bos", json_boolean(ember_vocab_add_bos(v)));
            json_object_set_new(o, "add_eos", json_boolean(ember_vocab_add_eos(v)));
            for (ember_token t = 0; t < ember_vocab_n_tokens(v); t++) {
                if (ember_vocab_is_eog(v, t)) json_array_append_new(eog, json_integer(t));
                if (ember_vocab_is_control(v, t)) json_array_append_new(ctl, json_integer(t));
            }
            json_object_set_new(o, "eog", eog);
            json_object_set_new(o, "control", ctl);
            char *s = json_dumps(o, JSON_COMPACT);
            if (s) { puts(s); free(s); }
            json_decref(o);
            json_decref(rec);
            continue;
        }
        json_t *pids = json_object_get(rec, "piece_ids");
        if (json_is_array(pids)) {
            /* token_to_piece(id, special=true) of each id, base64 */
            json_t *o = json_object(), *a = json_array();
            size_t k;
            json_t *x;
            json_array_foreach(pids, k, x) {
                size_t l;
                const char *p = ember_token_to_piece(v, (ember_token)json_integer_value(x), true, &l);
                char *e = b64_encode((const unsigned char *)(p ? p : ""), l);
                json_array_append_new(a, json_string(e ? e : ""));
                free(e);
            }
            json_object_set_new(o, "pieces", a);
            char *s = json_dumps(o, JSON_COMPACT);
            if (s) { puts(s); free(s); }
            json_decref(o);
            json_decref(rec);
            continue;
        }
        unsigned char *bytes = NULL;
        size_t n = 0;
        const char *t = json_string_value(json_object_get(rec, "t"));
        if (t) {
            n = json_string_length(json_object_get(rec, "t"));
            bytes = malloc(n + 1);
            if (bytes) memcpy(bytes, t, n);
        } else {
            const char *b = json_string_value(json_object_get(rec, "b"));
            bytes = b64_decode(b ? b : "", &n);
        }
        if (!bytes) { json_decref(rec); rc = 1; break; }
        json_t *o = json_object();
        ember_token *ids;
        size_t nid;
        if (ember_tokenize(v, (const char *)bytes, n, false, false, &ids, &nid)) {
            fprintf(stderr, "ember tokenize: %s\n", ember_last_error());
            rc = 1;
        } else {
            json_object_set_new(o, "ids", ids_json(ids, nid));
            char *dec;
            size_t dl;
            if (!ember_detokenize(v, ids, nid, false, &dec, &dl)) {
                char *e = b64_encode((unsigned char *)dec, dl);
                json_object_set_new(o, "dec", json_string(e));
                free(e);
                free(dec);
            }
            /* streaming: concatenate what the stream emits */
            size_t sc = 64, sk = 0;
            char *sb = malloc(sc);
            for (size_t i = 0; i <= nid && sb; i++) {
                const char *p;
                size_t pl;
                if (i < nid) ember_detok_push(&d, ids[i], &p, &pl);
                else ember_detok_flush(&d, &p, &pl);
                if (sk + pl + 1 > sc) {
                    while (sk + pl + 1 > sc) sc *= 2;
                    char *nb = realloc(sb, sc);
                    if (!nb) { free(sb); sb = NULL; break; }
                    sb = nb;
                }
                memcpy(sb + sk, p, pl);
                sk += pl;
            }
            if (sb) {
                char *e = b64_encode((unsigned char *)sb, sk);
                json_object_set_new(o, "stream", json_string(e));
                free(e);
                free(sb);
            }
            free(ids);
        }
        if (json_integer_value(json_object_get(rec, "s"))) {
            if (!ember_tokenize(v, (const char *)bytes, n, true, true, &ids, &nid)) {
                json_object_set_new(o, "sp", ids_json(ids, nid));
                free(ids);
            }
        }
        char *s = json_dumps(o, JSON_COMPACT);
        if (s) { puts(s); free(s); }
        json_decref(o);
        json_decref(rec);
        free(bytes);
    }
    ember_detok_free(&d);
    free(line);
    fclose(f);
    return rc;
}

int cmd_tokenize(int argc, char **argv)
{
    const char *model = NULL, *file = NULL, *batch = NULL, *text = NULL;
    int mode = 0; /* 0 lines, 1 ids, 2 pieces */
    bool add_special = true, parse_special = false, timing = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && i + 1 < argc) model = argv[++i];
        else if ((!strcmp(a, "-f") || !strcmp(a, "--file")) && i + 1 < argc) file = argv[++i];
        else if (!strcmp(a, "--batch") && i + 1 < argc) batch = argv[++i];
        else if (!strcmp(a, "--ids")) mode = 1;
        else if (!strcmp(a, "--pieces")) mode = 2;
        else if (!strcmp(a, "--no-special")) add_special = false;
        else if (!strcmp(a, "--parse-special")) parse_special = true;
        else if (!strcmp(a, "--timing")) timing = true;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        else if (a[0] == '-' && a[1]) { fprintf(stderr, "ember tokenize: unknown option %s\n", a); usage(stderr); return 2; }
        else if (!text) text = a;
        else { fprintf(stderr, "ember tokenize: more than one TEXT\n"); return 2; }
    }
    if (!model || (!text && !file && !batch)) { usage(stderr); return 2; }

    struct timespec t0, t1, t2;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    ember_gguf *g;
    if (ember_gguf_open(model, &g)) {
        fprintf(stderr, "ember tokenize: %s\n", ember_last_error());
        return 1;
    }
    ember_vocab *v;
    ember_status st = ember_vocab_load(g, &v);
    ember_gguf_close(g);
    if (st) {
        fprintf(stderr, "ember tokenize: %s\n", ember_last_error());
        return 1;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (batch) {
        int rc = run_batch(v, batch);
        ember_vocab_free(v);
        return rc;
    }
    char *owned = NULL;
    size_t n;
    if (file) {
        owned = read_file(file, &n);
        if (!owned) { fprintf(stderr, "ember tokenize: cannot read %s\n", file); ember_vocab_free(v); return 1; }
        text = owned;
    } else {
        n = strlen(text);
    }
    ember_token *ids;
    size_t nid;
    st = ember_tokenize(v, text, n, add_special, parse_special, &ids, &nid);
    clock_gettime(CLOCK_MONOTONIC, &t2);
    free(owned);
    if (st) {
        fprintf(stderr, "ember tokenize: %s\n", ember_last_error());
        ember_vocab_free(v);
        return 1;
    }
    if (mode == 1) {
        json_t *a = ids_json(ids, nid);
        char *s = json_dumps(a, JSON_COMPACT);
        puts(s ? s : "[]");
        free(s);
        json_decref(a);
    } else {
        json_t *a = json_array();
        for (size_t i = 0; i < nid; i++) {
            size_t l;
            const char *p = ember_token_to_piece(v, ids[i], true, &l);
            /* pieces may be partial UTF-8: show invalid bytes as \xNN */
            char *esc = malloc(l * 4 + 1);
            size_t k = 0;
            for (size_t j = 0; esc && j < l; j++) {
                unsigned char c = (unsigned char)p[j];
                if (c >= 0x80) {
                    /* keep well-formed multi-byte sequences */
                    size_t m = 0;
                    if (c >= 0xC2 && c <= 0xF4) {
                        m = c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
                        if (j + m > l) m = 0;
                        for (size_t q = 1; q < m; q++) if (((unsigned char)p[j + q] & 0xC0) != 0x80) m = 0;
                    }
                    if (m) { memcpy(esc + k, p + j, m); k += m; j += m - 1; continue; }
                    k += (size_t)sprintf(esc + k, "\\x%02X", c);
                } else esc[k++] = (char)c;
            }
            json_t *js = json_stringn_nocheck(esc ? esc : "", esc ? k : 0);
            free(esc);
            if (mode == 2) json_array_append_new(a, js);
            else {
                char *s = json_dumps(js, JSON_ENCODE_ANY);
                printf("%6d  %s\n", ids[i], s ? s : "?");
                free(s);
                json_decref(js);
            }
        }
        if (mode == 2) {
            char *s = json_dumps(a, JSON_COMPACT);
            puts(s ? s : "[]");
            free(s);
        }
        json_decref(a);
    }
    if (timing)
        fprintf(stderr, "load %.3f ms, tokenize %.3f ms, %zu tokens\n",
                (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6,
                (double)(t2.tv_sec - t1.tv_sec) * 1e3 + (double)(t2.tv_nsec - t1.tv_nsec) / 1e6, nid);
    free(ids);
    ember_vocab_free(v);
    return 0;
}
