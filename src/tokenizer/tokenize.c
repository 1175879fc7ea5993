/*
 * tokenize.c — text to token ids: special-token partition, then
 * SentencePiece (SPM) or BPE over each plain-text fragment.
 *
 * Owns: ember_tokenize and the merge loops. Must not: keep state between
 * calls (every buffer is per call, so a vocab can be shared by threads).
 *
 * Algorithms (behaviour of llama.cpp's llama-vocab.cpp, reimplemented):
 *  - partition: special tokens are searched longest text first (then lower
 *    id); each one splits the still-plain fragments at its leftmost
 *    non-overlapping occurrences. CONTROL/UNKNOWN tokens take part only with
 *    parse_special; USER_DEFINED tokens always do.
 *  - SPM: ' ' -> U+2581 (and a leading one if add_space_prefix), split into
 *    UTF-8 characters (length from the lead byte), then repeatedly merge the
 *    adjacent pair whose concatenation is the vocab token with the highest
 *    score (ties: leftmost); symbols that are not tokens fall back to
 *    <0xXX> byte tokens.
 *  - BPE: words from the pre-tokenizer (pretok.c), each byte mapped to its
 *    GPT-2 character (gemma4: UTF-8 characters, spaces as U+2581), then
 *    repeatedly merge the adjacent pair of lowest merge rank (ties:
 *    leftmost); a final symbol that is not a token falls back to byte tokens.
 *  - Merges never produce a CONTROL or UNKNOWN token from plain text, so
 *    typed "<start_of_turn>" can never become the control token.
 *  - Invalid UTF-8: SPM keeps the raw bytes (byte fallback, as llama.cpp);
 *    BPE first replaces every byte that is not part of a well-formed UTF-8
 *    sequence by U+FFFD (llama.cpp does so for most such bytes but decodes
 *    overlong forms and surrogates and aborts above U+10FFFF).
 */
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "tokenizer/vocab_internal.h"

/* ---- growable id list ---------------------------------------------------- */

typedef struct ids_t {
    ember_token *v;
    size_t n, cap;
    bool oom;
} ids_t;

static inline void ids_push(ids_t *o, ember_token t)
{
    if (o->n == o->cap) {
        size_t c = o->cap ? o->cap * 2 : 64;
        ember_token *nv = realloc(o->v, sizeof *nv * c);
        if (!nv) { o->oom = true; return; }
        o->v = nv;
        o->cap = c;
    }
    o->v[o->n++] = t;
}

/* a token that merges may produce: not CONTROL / UNKNOWN */
static inline int32_t plain_token(const ember_vocab *v, int32_t id)
{
    if (id < 0 || id >= v->n_tokens) return -1;
    return (v->attr[id] & (EMBER_TOKEN_CONTROL | EMBER_TOKEN_UNKNOWN)) ? -1 : id;
}

/* ---- heap of candidate merges -------------------------------------------- */

typedef struct bigram {
    float score;       /* SPM: higher first; BPE: -rank (exact: ranks < 2^24, checked at load) */
    int32_t left, right;
    uint32_t size;     /* bytes of left+right when pushed (staleness check) */
    int32_t result;    /* BPE: interned id of the merged string */
} bigram;

typedef struct heap_t {
    bigram *v;
    size_t n, cap;
} heap_t;

static inline bool bg_before(const bigram *a, const bigram *b)
{
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static bool heap_push(heap_t *h, bigram b)
{
    if (h->n == h->cap) {
        size_t c = h->cap ? h->cap * 2 : 64;
        bigram *nv = realloc(h->v, sizeof *nv * c);
        if (!nv) return false;
        h->v = nv;
        h->cap = c;
    }
    size_t i = h->n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!bg_before(&b, &h->v[p])) break;
        h->v[i] = h->v[p];
        i = p;
    }
    h->v[i] = b;
    return true;
}

static bigram heap_pop(heap_t *h)
{
    bigram top = h->v[0], last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const bigram *best = &last;
        if (l < h->n && bg_before(&h->v[l], best)) { m = l; best = &h->v[l]; }
        if (r < h->n && bg_before(&h->v[r], best)) { m = r; }
        if (m == i) break;
        h->v[i] = h->v[m];
        i = m;
    }
    if (h->n) h->v[i] = last;
    return top;
}

typedef struct sym {
    uint32_t start, n;   /* byte range in the word */
    int32_t prev, next;
    int32_t id;          /* BPE: interned id of the symbol's string, -1 unknown */
} sym;

typedef struct work {
    sym *syms;
    size_t cap;
    heap_t heap;
    char *buf;           /* escaped / encoded text */
    size_t bufcap;
} work;

static bool work_syms(work *w, size_t n)
{
    if (n <= w->cap) return true;
    size_t c = w->cap ? w->cap : 64;
    while (c < n) c *= 2;
    sym *s = realloc(w->syms, sizeof *s * c);
    if (!s) return false;
    w->syms = s;
    w->cap = c;
    return true;
}

static bool work_buf(work *w, size_t n)
{
    if (n <= w->bufcap) return true;
    size_t c = w->bufcap ? w->bufcap : 256;
    while (c < n) c *= 2;
    char *b = realloc(w->buf, c);
    if (!b) return false;
    w->buf = b;
    w->bufcap = c;
    return true;
}

/* ---- SPM ----------------------------------------------------------------- */

static void spm_try(const ember_vocab *v, work *w, const char *text, int32_t l, int32_t r, bool *oom)
{
    if (l < 0 || r < 0) return;
    const sym *a = &w->syms[l], *b = &w->syms[r];
    int32_t id = plain_token(v, str_find(&v->strs, text + a->start, a->n + b->n));
    if (id < 0) return;
    bigram g = {.score = v->scores[id], .left = l, .right = r, .size = a->n + b->n, .result = id};
    if (!heap_push(&w->heap, g)) *oom = true;
}

static void spm_fragment(const ember_vocab *v, work *w, const char *raw, size_t len, bool space_prefix, ids_t *out)
{
    /* escape spaces */
    size_t n_sp = space_prefix ? 1 : 0;
    for (size_t i = 0; i < len; i++) n_sp += raw[i] == ' ';
    size_t n = len + 2 * n_sp + (space_prefix ? 1 : 0);
    if (!work_buf(w, n + 1)) { out->oom = true; return; }
    char *t = w->buf;
    size_t k = 0;
    if (space_prefix) { memcpy(t, "\xe2\x96\x81", 3); k = 3; }
    for (size_t i = 0; i < len; i++) {
        if (raw[i] == ' ') { memcpy(t + k, "\xe2\x96\x81", 3); k += 3; }
        else t[k++] = raw[i];
    }
    n = k;
    if (!n) return;
    if (!work_syms(w, n)) { out->oom = true; return; }
    int32_t ns = 0;
    for (size_t off = 0; off < n;) {
        size_t l = utf8_len_lead((unsigned char)t[off]);
        if (l > n - off) l = n - off;
        w->syms[ns] = (sym){.start = (uint32_t)off, .n = (uint32_t)l, .prev = ns - 1, .next = -1, .id = -1};
        if (ns) w->syms[ns - 1].next = ns;
        ns++;
        off += l;
    }
    w->heap.n = 0;
    bool oom = false;
    for (int32_t i = 1; i < ns; i++) spm_try(v, w, t, i - 1, i, &oom);
    while (w->heap.n && !oom) {
        bigram g = heap_pop(&w->heap);
        sym *a = &w->syms[g.left], *b = &w->syms[g.right];
        if (a->n == 0 || b->n == 0 || a->n + b->n != g.size) continue;
        a->n += b->n;
        b->n = 0;
        a->next = b->next;
        if (b->next >= 0) w->syms[b->next].prev = g.left;
        a->id = g.result;
        spm_try(v, w, t, a->prev, g.left, &oom);
        spm_try(v, w, t, g.left, a->next, &oom);
    }
    if (oom) { out->oom = true; return; }
    for (int32_t i = 0; i != -1; i = w->syms[i].next) {
        const sym *s = &w->syms[i];
        int32_t id = s->id >= 0 ? s->id : plain_token(v, str_find(&v->strs, t + s->start, s->n));
        if (id >= 0) { ids_push(out, id); continue; }
        for (uint32_t j = 0; j < s->n; j++) {
            int32_t b = v->byte_token[(unsigned char)t[s->start + j]];
            if (b >= 0) ids_push(out, b);
        }
    }
}

/* ---- BPE ----------------------------------------------------------------- */

static inline const merge_slot *merge_find(const ember_vocab *v, int32_t a, int32_t b)
{
    if (a < 0 || b < 0) return NULL;
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    uint32_t mask = v->n_merge_slots - 1, k = (uint32_t)tok_hash(&key, 8) & mask;
    for (;;) {
        const merge_slot *m = &v->merges[k];
        if (m->key == key) return m;
        if (m->key == UINT64_MAX) return NULL;
        k = (k + 1) & mask;
    }
}

static void bpe_try(const ember_vocab *v, work *w, int32_t l, int32_t r, bool *oom)
{
    if (l < 0 || r < 0) return;
    const sym *a = &w->syms[l], *b = &w->syms[r];
    const merge_slot *m = merge_find(v, a->id, b->id);
    if (!m) return;
    bigram g = {.score = -(float)m->rank, .left = l, .right = r, .size = a->n + b->n, .result = m->result};
    if (!heap_push(&w->heap, g)) *oom = true;
}

/* BPE over one word. `word` is the text as the vocabulary spells it
 * (GPT-2-mapped for EMBER_VOCAB_BPE, raw UTF-8 with U+2581 for gemma4);
 * initial symbols are its UTF-8 characters. */
static void bpe_word(const ember_vocab *v, work *w, const char *word, size_t n, ids_t *out)
{
    if (!n) return;
    if (v->ignore_merges || (v->pre == PRE_GEMMA4 && word[0] == '\n')) {
        int32_t id = plain_token(v, str_find(&v->strs, word, n));
        if (id >= 0) { ids_push(out, id); return; }
    }
    if (!work_syms(w, n)) { out->oom = true; return; }
    int32_t ns = 0;
    for (size_t off = 0; off < n;) {
        size_t l = utf8_len_lead((unsigned char)word[off]);
        if (l > n - off) l = n - off;
        int32_t id = str_find(&v->strs, word + off, l);
        w->syms[ns] = (sym){.start = (uint32_t)off, .n = (uint32_t)l, .prev = ns - 1, .next = -1, .id = id};
        if (ns) w->syms[ns - 1].next = ns;
        ns++;
        off += l;
    }
    w->heap.n = 0;
    bool oom = false;
    for (int32_t i = 1; i < ns; i++) bpe_try(v, w, i - 1, i, &oom);
    while (w->heap.n && !oom) {
        bigram g = heap_pop(&w->heap);
        sym *a = &w->syms[g.left], *b = &w->syms[g.right];
        if (a->n == 0 || b->n == 0 || a->n + b->n != g.size) continue;
        a->n += b->n;
        b->n = 0;
        a->next = b->next;
        if (b->next >= 0) w->syms[b->next].prev = g.left;
        a->id = g.result;
        bpe_try(v, w, a->prev, g.left, &oom);
        bpe_try(v, w, g.left, a->next, &oom);
    }
    if (oom) { out->oom = true; return; }
    for (int32_t i = 0; i != -1; i = w->syms[i].next) {
        const sym *s = &w->syms[i];
        int32_t id = plain_token(v, s->id);
        if (id >= 0 && (uint32_t)v->strs.len[id] == s->n) { ids_push(out, id); continue; }
        /* fallback per byte of the symbol's spelling */
        for (uint32_t j = 0; j < s->n; j++) {
            unsigned char c = (unsigned char)word[s->start + j];
            int32_t b;
            if (v->type == EMBER_VOCAB_GEMMA4) b = v->byte_token[c];
            else b = plain_token(v, str_find(&v->strs, (const char *)&c, 1));
            if (b >= 0) ids_push(out, b);
        }
    }
}

/* Replace each byte not in a well-formed UTF-8 sequence by U+FFFD. Returns
 * the text to use (`raw` itself if it was valid) and its length in *n. */
static const char *sanitize(const char *raw, size_t len, char **tmp, size_t *n)
{
    size_t i = 0;
    while (i < len) {
        size_t l = utf8_valid_len((const unsigned char *)raw + i, len - i);
        if (!l) break;
        i += l;
    }
    if (i == len) { *n = len; return raw; }
    char *o = malloc(len * 3 + 1);
    if (!o) return NULL;
    memcpy(o, raw, i);
    size_t k = i;
    while (i < len) {
        size_t l = utf8_valid_len((const unsigned char *)raw + i, len - i);
        if (l) { memcpy(o + k, raw + i, l); k += l; i += l; }
        else { memcpy(o + k, "\xef\xbf\xbd", 3); k += 3; i++; }
    }
    *tmp = o;
    *n = k;
    return o;
}

static void bpe_fragment(const ember_vocab *v, work *w, const char *raw, size_t len, ids_t *out)
{
    char *tmp = NULL;
    size_t n;
    const char *text = sanitize(raw, len, &tmp, &n);
    if (!text) { out->oom = true; return; }
    char *esc = NULL;
    if (v->type == EMBER_VOCAB_GEMMA4) {
        /* spaces -> U+2581 before splitting */
        size_t n_sp = 0;
        for (size_t i = 0; i < n; i++) n_sp += text[i] == ' ';
        if (n_sp) {
            esc = malloc(n + 2 * n_sp + 1);
            if (!esc) { free(tmp); out->oom = true; return; }
            size_t k = 0;
            for (size_t i = 0; i < n; i++) {
                if (text[i] == ' ') { memcpy(esc + k, "\xe2\x96\x81", 3); k += 3; }
                else esc[k++] = text[i];
            }
            text = esc;
            n = k;
        }
    }
    size_t *words = NULL, cap = 0;
    int64_t nw = pretok_split(v, text, n, &words, &cap);
    if (nw < 0) { out->oom = true; goto done; }
    for (int64_t i = 0; i < nw && !out->oom; i++) {
        const char *wd = text + words[2 * i];
        size_t wl = words[2 * i + 1];
        if (v->type == EMBER_VOCAB_GEMMA4) {
            bpe_word(v, w, wd, wl, out);
            continue;
        }
        /* GPT-2 byte map */
        if (!work_buf(w, wl * 2 + 1)) { out->oom = true; break; }
        size_t k = 0;
        for (size_t j = 0; j < wl; j++) {
            unsigned char c = (unsigned char)wd[j];
            memcpy(w->buf + k, v->byte_char[c], v->byte_char_len[c]);
            k += v->byte_char_len[c];
        }
        bpe_word(v, w, w->buf, k, out);
    }
done:
    free(words);
    free(esc);
    free(tmp);
}

/* ---- special-token partition --------------------------------------------- */

typedef struct match_t {
    int32_t rank;
    int32_t token;
    size_t pos, len;
} match_t;

static int cmp_match(const void *pa, const void *pb)
{
    const match_t *a = pa, *b = pb;
    if (a->rank != b->rank) return a->rank < b->rank ? -1 : 1;
    return a->pos < b->pos ? -1 : a->pos > b->pos;
}

static int cmp_pos(const void *pa, const void *pb)
{
    const match_t *a = pa, *b = pb;
    return a->pos < b->pos ? -1 : a->pos > b->pos;
}

/* Accepted special-token matches of text, sorted by position. Returns the
 * count, or -1 on allocation failure. */
static int64_t partition(const ember_vocab *v, const char *text, size_t len, bool parse_special, match_t **out)
{
    *out = NULL;
    match_t *m = NULL;
    size_t n = 0, cap = 0;
    const uint32_t skip = parse_special ? 0 : (EMBER_TOKEN_CONTROL | EMBER_TOKEN_UNKNOWN);
    for (size_t p = 0; p < len; p++) {
        if (!v->special_first[(unsigned char)text[p]]) continue;
        int32_t node = 0;
        for (size_t q = p; q < len; q++) {
            int32_t c = v->trie[node].child;
            unsigned char b = (unsigned char)text[q];
            while (c >= 0 && v->trie[c].byte != b) c = v->trie[c].sibling;
            if (c < 0) break;
            node = c;
            int32_t tok = v->trie[node].token;
            if (tok >= 0 && !(v->attr[tok] & skip)) {
                if (n == cap) {
                    cap = cap ? cap * 2 : 64;
                    match_t *nm = realloc(m, sizeof *nm * cap);
                    if (!nm) { free(m); return -1; }
                    m = nm;
                }
                m[n++] = (match_t){.rank = v->special_rank[tok], .token = tok, .pos = p, .len = q - p + 1};
            }
        }
    }
    if (!n) { free(m); return 0; }
    qsort(m, n, sizeof *m, cmp_match);
    unsigned char *covered = calloc(len, 1);
    if (!covered) { free(m); return -1; }
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        bool free_ = true;
        for (size_t j = 0; j < m[i].len && free_; j++) free_ = !covered[m[i].pos + j];
        if (!free_) continue;
        memset(covered + m[i].pos, 1, m[i].len);
        m[k++] = m[i];
    }
    free(covered);
    qsort(m, k, sizeof *m, cmp_pos);
    *out = m;
    return (int64_t)k;
}

/* ---- driver -------------------------------------------------------------- */

ember_status ember_tokenize(const ember_vocab *v, const char *text, size_t len,
                            bool add_special, bool parse_special,
                            ember_token **out_ids, size_t *n_out)
{
    if (!v || !out_ids || !n_out || (!text && len))
        return ember_error(EMBER_ERR_INVALID_ARG, "tokenize: NULL argument");
    *out_ids = NULL;
    *n_out = 0;
    ids_t out = {0};
    work w = {0};
    match_t *m = NULL;
    int64_t nm = len ? partition(v, text, len, parse_special, &m) : 0;
    if (nm < 0) return ember_error(EMBER_ERR_NOMEM, "tokenize: out of memory (%zu bytes of text)", len);

    if (add_special && v->add_bos) ids_push(&out, v->bos);
    bool prev_special = true;   /* SPM: space prefix before the first fragment and after specials */
    size_t at = 0;
    for (int64_t i = 0; i <= nm && !out.oom; i++) {
        size_t end = i < nm ? m[i].pos : len;
        if (end > at) {
            if (v->type == EMBER_VOCAB_SPM)
                spm_fragment(v, &w, text + at, end - at, v->add_space_prefix && prev_special, &out);
            else
                bpe_fragment(v, &w, text + at, end - at, &out);
            prev_special = false;
        }
        if (i < nm) {
            ids_push(&out, m[i].token);
            prev_special = true;
            at = m[i].pos + m[i].len;
        }
    }
    if (add_special && v->add_eos) ids_push(&out, v->eos);
    if (!out.v && !out.oom) {   /* never hand back NULL, even for no tokens */
        out.v = malloc(sizeof *out.v);
        out.oom = !out.v;
    }
    free(m);
    free(w.syms);
    free(w.heap.v);
    free(w.buf);
    if (out.oom) {
        free(out.v);
        return ember_error(EMBER_ERR_NOMEM, "tokenize: out of memory (%zu bytes of text)", len);
    }
    *out_ids = out.v;
    *n_out = out.n;
    return EMBER_OK;
}
