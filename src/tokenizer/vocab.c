/*
 * vocab.c — building an ember_vocab from GGUF metadata; lookups, attributes,
 * special ids, and the precomputed token pieces.
 *
 * Owns: reading tokenizer.ggml.* keys, the string hash table, the BPE merge
 * table, the special-token trie, token attributes and EOG/EOT detection.
 * Must not: tokenize text (tokenize.c) or hold state per request.
 *
 * Facts (llama.cpp src/llama-vocab.cpp, load()): token_type 1 normal,
 * 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte; a merge "A B" is
 * split at the first space after its first byte; for duplicate token texts
 * the last id wins; control tokens whose text contains "unused" are also
 * UNUSED; EOG = eos, eot, the end-of-turn names and the FIM pad/repo/file
 * separator tokens listed below (each also made CONTROL); SPM defaults
 * add_bos=true, add_space_prefix=true unless the file says otherwise; gemma4
 * always adds BOS.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "tokenizer/vocab_internal.h"

/* ---- hashing and the string table -------------------------------------- */

uint64_t tok_hash(const void *p, size_t n)
{
    const unsigned char *s = p;
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xC2B2AE3D27D4EB4Full);
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0xFF51AFD7ED558CCDull;
        h ^= h >> 32;
        s += 8;
        n -= 8;
    }
    uint64_t w = 0;
    for (size_t i = 0; i < n; i++) w |= (uint64_t)s[i] << (8 * i);
    h = (h ^ w) * 0xC4CEB9FE1A85EC53ull;
    h ^= h >> 29;
    h *= 0x9E3779B97F4A7C15ull;
    return h ^ (h >> 32);
}

int32_t str_find(const str_table *t, const char *s, size_t n)
{
    if (!t->n_slots) return -1;
    uint64_t h = tok_hash(s, n);
    uint32_t mask = t->n_slots - 1, tag = (uint32_t)(h >> 32);
    uint32_t i = (uint32_t)h & mask;
    for (;;) {
        const struct str_slot *sl = &t->slots[i];
        if (sl->id < 0) return -1;
        if (sl->tag == tag && t->len[sl->id] == n && !memcmp(t->pool + t->off[sl->id], s, n)) return sl->id;
        i = (i + 1) & mask;
    }
}

static ember_status str_init(str_table *t, int32_t cap, size_t pool_cap, uint32_t n_slots)
{
    memset(t, 0, sizeof *t);
    t->cap = cap;
    t->pool_cap = pool_cap ? pool_cap : 64;
    t->off = malloc(sizeof *t->off * (size_t)cap);
    t->len = malloc(sizeof *t->len * (size_t)cap);
    t->pool = malloc(t->pool_cap);
    t->n_slots = n_slots;
    t->slots = malloc(sizeof *t->slots * n_slots);
    if (!t->off || !t->len || !t->pool || !t->slots)
        return ember_error(EMBER_ERR_NOMEM, "tokenizer: out of memory for the string table");
    for (uint32_t i = 0; i < n_slots; i++) t->slots[i] = (struct str_slot){.id = -1, .tag = 0};
    return EMBER_OK;
}

static void str_free(str_table *t)
{
    free(t->pool);
    free(t->off);
    free(t->len);
    free(t->slots);
    memset(t, 0, sizeof *t);
}

static ember_status str_rehash(str_table *t, uint32_t n_slots)
{
    struct str_slot *slots = malloc(sizeof *slots * n_slots);
    if (!slots) return ember_error(EMBER_ERR_NOMEM, "tokenizer: out of memory for the string table");
    for (uint32_t i = 0; i < n_slots; i++) slots[i] = (struct str_slot){.id = -1, .tag = 0};
    uint32_t mask = n_slots - 1;
    /* re-insert the ids the old table pointed to (duplicates stay hidden) */
    for (uint32_t k = 0; k < t->n_slots; k++) {
        int32_t id = t->slots[k].id;
        if (id < 0) continue;
        uint64_t h = tok_hash(t->pool + t->off[id], t->len[id]);
        uint32_t i = (uint32_t)h & mask;
        while (slots[i].id >= 0) i = (i + 1) & mask;
        slots[i] = (struct str_slot){.id = id, .tag = (uint32_t)(h >> 32)};
    }
    free(t->slots);
    t->slots = slots;
    t->n_slots = n_slots;
    return EMBER_OK;
}

/* Append s[0..n) as string t->n. If `index` and the text exists, the slot is
 * pointed at the new string (last id wins); if !index it is not indexed. */
static ember_status str_add(str_table *t, const char *s, size_t n, bool replace, int32_t *out)
{
    if (t->n == t->cap) {
        int32_t cap = t->cap ? t->cap * 2 : 64;
        uint32_t *off = realloc(t->off, sizeof *off * (size_t)cap);
        if (!off) return ember_error(EMBER_ERR_NOMEM, "tokenizer: out of memory");
        t->off = off;
        uint32_t *len = realloc(t->len, sizeof *len * (size_t)cap);
        if (!len) return ember_error(EMBER_ERR_NOMEM, "tokenizer: out of memory");
        t->len = len;
        t->cap = cap;
    }
    if (t->pool_len + n + 1 > t->pool_cap) {
        size_t cap = t->pool_cap * 2;
        while (cap < t->pool_len + n + 1) cap *= 2;
        char *pool = realloc(t->pool, cap);
        if (!pool) return ember_error(EMBER_ERR_NOMEM, "tokenizer: out of memory");
        t->pool = pool;
        t->pool_cap = cap;
    }
    if (t->pool_len + n + 1 > UINT32_MAX)
        return ember_error(EMBER_ERR_FORMAT, "tokenizer: vocabulary text exceeds 4 GiB");
    if ((uint64_t)(t->n + 1) * 2 > t->n_slots) {
        ember_status st = str_rehash(t, t->n_slots ? t->n_slots * 2 : 64);
        if (st) return st;
    }
    int32_t id = t->n++;
    t->off[id] = (uint32_t)t->pool_len;
    t->len[id] = (uint32_t)n;
    memcpy(t->pool + t->pool_len, s, n);
    t->pool[t->pool_len + n] = 0;
    t->pool_len += n + 1;
    uint64_t h = tok_hash(s, n);
    uint32_t mask = t->n_slots - 1, tag = (uint32_t)(h >> 32);
    uint32_t i = (uint32_t)h & mask;
    for (;;) {
        int32_t o = t->slots[i].id;
        if (o < 0) { t->slots[i] = (struct str_slot){.id = id, .tag = tag}; break; }
        if (t->slots[i].tag == tag && t->len[o] == n && !memcmp(t->pool + t->off[o], s, n)) {
            if (replace) t->slots[i].id = id;
            break;
        }
        i = (i + 1) & mask;
    }
    if (out) *out = id;
    return EMBER_OK;
}

/* Id of s (existing or newly interned). */
static ember_status str_intern(str_table *t, const char *s, size_t n, int32_t *out)
{
    int32_t id = str_find(t, s, n);
    if (id >= 0) { *out = id; return EMBER_OK; }
    return str_add(t, s, n, false, out);
}

/* ---- UTF-8 --------------------------------------------------------------- */

size_t utf8_valid_len(const unsigned char *s, size_t n)
{
    if (!n) return 0;
    unsigned c = s[0];
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) return n >= 2 && (s[1] & 0xC0) == 0x80 ? 2 : 0;
    if (c >= 0xE0 && c <= 0xEF) {
        if (n < 3) return 0;
        unsigned lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
        return s[1] >= lo && s[1] <= hi && (s[2] & 0xC0) == 0x80 ? 3 : 0;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        if (n < 4) return 0;
        unsigned lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
        return s[1] >= lo && s[1] <= hi && (s[2] & 0xC0) == 0x80 && (s[3] & 0xC0) == 0x80 ? 4 : 0;
    }
    return 0;
}

static size_t utf8_put(char *o, uint32_t cp)
{
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xC0 | cp >> 6); o[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | cp >> 12); o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F)); return 3;
    }
    o[0] = (char)(0xF0 | cp >> 18); o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* GPT-2's bytes_to_unicode (openai/gpt-2 encoder.py): printable Latin-1
 * bytes map to themselves, the other 68 to U+0100 + k in byte order. */
static uint32_t gpt2_byte_cp(unsigned b)
{
    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)) return b;
    unsigned k = 0;
    for (unsigned x = 0; x < b; x++)
        if (!((x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF))) k++;
    return 0x100 + k;
}

/* ---- special-token trie -------------------------------------------------- */

static ember_status trie_node_new(ember_vocab *v, uint8_t byte, int32_t *out)
{
    if (v->n_trie == v->cap_trie) {
        int32_t cap = v->cap_trie ? v->cap_trie * 2 : 256;
        struct trie_node *t = realloc(v->trie, sizeof *t * (size_t)cap);
        if (!t) return ember_error(EMBER_ERR_NOMEM, "tokenizer: out of memory for the special-token trie");
        v->trie = t;
        v->cap_trie = cap;
    }
    int32_t i = v->n_trie++;
    v->trie[i] = (struct trie_node){.child = -1, .sibling = -1, .token = -1, .byte = byte};
    *out = i;
    return EMBER_OK;
}

static ember_status trie_add(ember_vocab *v, const char *s, size_t n, int32_t token)
{
    int32_t node = 0;
    for (size_t k = 0; k < n; k++) {
        uint8_t b = (uint8_t)s[k];
        int32_t c = v->trie[node].child, prev = -1;
        while (c >= 0 && v->trie[c].byte != b) { prev = c; c = v->trie[c].sibling; }
        if (c < 0) {
            ember_status st = trie_node_new(v, b, &c);
            if (st) return st;
            if (prev < 0) v->trie[node].child = c; else v->trie[prev].sibling = c;
        }
        node = c;
    }
    v->trie[node].token = token;
    if (n) v->special_first[(uint8_t)s[0]] = 1;
    return EMBER_OK;
}

/* ---- pieces -------------------------------------------------------------- */

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* "<0xXX>" -> XX, else -1 */
static int byte_token_value(const char *s, size_t n)
{
    if (n != 6 || memcmp(s, "<0x", 3) || s[5] != '>') return -1;
    int hi = hexval(s[3]), lo = hexval(s[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

/* Piece of token id with special=true, appended to the piece pool. Rules as
 * llama.cpp's token_to_piece (see tokenizer.h). */
static size_t piece_of(const ember_vocab *v, int32_t id, const int32_t *cp_to_byte, char *o)
{
    const char *s = v->strs.pool + v->strs.off[id];
    size_t n = v->strs.len[id];
    uint32_t a = v->attr[id];
    if (a & (EMBER_TOKEN_CONTROL | EMBER_TOKEN_UNKNOWN | EMBER_TOKEN_USER_DEFINED)) {
        memcpy(o, s, n);
        return n;
    }
    if (a & EMBER_TOKEN_NORMAL) {
        size_t k = 0;
        if (v->type == EMBER_VOCAB_BPE) {
            /* undo the GPT-2 byte map; a character outside it is kept as is */
            size_t i = 0;
            while (i < n) {
                size_t l = utf8_valid_len((const unsigned char *)s + i, n - i);
                if (!l) { o[k++] = s[i++]; continue; }
                uint32_t cp;
                const unsigned char *u = (const unsigned char *)s + i;
                if (l == 1) cp = u[0];
                else if (l == 2) cp = (uint32_t)(u[0] & 0x1F) << 6 | (u[1] & 0x3F);
                else cp = 0x110000;
                if (cp < 0x144 && cp_to_byte[cp] >= 0) o[k++] = (char)cp_to_byte[cp];
                else { memcpy(o + k, s + i, l); k += l; }
                i += l;
            }
        } else {
            /* U+2581 -> ' ' */
            size_t i = 0;
            while (i < n) {
                if (i + 3 <= n && !memcmp(s + i, "\xe2\x96\x81", 3)) { o[k++] = ' '; i += 3; }
                else o[k++] = s[i++];
            }
        }
        return k;
    }
    if (a & EMBER_TOKEN_BYTE) {
        int b = byte_token_value(s, n);
        if (b < 0 && v->type == EMBER_VOCAB_BPE) {
            size_t l = utf8_valid_len((const unsigned char *)s, n);
            if (l == n && l <= 2) {
                const unsigned char *u = (const unsigned char *)s;
                uint32_t cp = l == 1 ? u[0] : (uint32_t)(u[0] & 0x1F) << 6 | (u[1] & 0x3F);
                if (cp < 0x144) b = cp_to_byte[cp];
            }
        }
        if (b < 0) return 0;
        o[0] = (char)b;
        return 1;
    }
    return 0;   /* unused / undefined: empty */
}

/* ---- loading ------------------------------------------------------------- */

static const char *const EOT_NAMES[] = {
    "<end_of_turn>", "<|im_end|>", "<|eot_id|>", "<|end|>", "<|endoftext|>", "<EOT>",
    "<|end_of_text|>", "<end_of_utterance>", NULL,
};
static const char *const EOG_NAMES[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<end_of_turn>",
    "<|endoftext|>", "<|eom_id|>", "<EOT>", "<|end_of_text|>", "<end_of_utterance>",
    "<eos>", "<turn|>", "<|tool_response>", "</s>", "[EOT]", "[EOS]", "_<EOT>", "<|flush|>",
    "<|calls|>", NULL,
};

/* fill-in-the-middle pad / repo / file-separator tokens: llama.cpp makes the
 * first one found of each group CONTROL and end-of-generation */
static const char *const FIM_EOG_GROUPS[][6] = {
    {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]", NULL},
    {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>", NULL},
    {"<|file_sep|>", NULL},
};

/* fill-in-the-middle tokens by name, per ember_fim_kind (llama.cpp load()) */
static const char *const FIM_NAMES[EMBER_FIM_COUNT][9] = {
    {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<\xef\xbd\x9c" "fim\xe2\x96\x81" "begin\xef\xbd\x9c>", "<PRE>",
     "\xe2\x96\x81<PRE>", "<|code_prefix|>", "<|prefix|>", NULL},
    {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<\xef\xbd\x9c" "fim\xe2\x96\x81" "hole\xef\xbd\x9c>", "<SUF>",
     "\xe2\x96\x81<SUF>", "<|code_suffix|>", "<|suffix|>", NULL},
    {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<\xef\xbd\x9c" "fim\xe2\x96\x81" "end\xef\xbd\x9c>", "<MID>",
     "\xe2\x96\x81<MID>", "<|code_middle|>", "<|middle|>", NULL},
    {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>", NULL},
    {"<|file_sep|>", NULL},
};
static const char *const FIM_KEYS[EMBER_FIM_COUNT] = {"fim_pre", "fim_suf", "fim_mid", "fim_rep", "fim_sep"};
static const char *const FIM_OLD_KEYS[3] = {"prefix", "suffix", "middle"};

static ember_status get_id(const ember_gguf *g, const char *key, int32_t n, ember_token *out)
{
    int64_t x;
    ember_status st = ember_gguf_get_i64(g, key, &x);
    if (st == EMBER_ERR_NOT_FOUND) { ember_clear_error(); return EMBER_OK; }
    if (st) return st;
    if (x < 0 || x >= n) return EMBER_OK;   /* llama.cpp: out of range -> keep default */
    *out = (ember_token)x;
    return EMBER_OK;
}

static ember_status get_flag(const ember_gguf *g, const char *key, bool *out)
{
    bool b;
    ember_status st = ember_gguf_get_bool(g, key, &b);
    if (st == EMBER_ERR_NOT_FOUND) { ember_clear_error(); return EMBER_OK; }
    if (st) return st;
    *out = b;
    return EMBER_OK;
}

static int cmp_special(const void *pa, const void *pb, void *ctx)
{
    const ember_vocab *v = ctx;
    int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
    uint32_t la = v->strs.len[a], lb = v->strs.len[b];
    if (la != lb) return la > lb ? -1 : 1;
    return a < b ? -1 : a > b;
}

static ember_status set_pre(ember_vocab *v, const char *pre)
{
    static const struct { const char *name; enum pre_kind kind; bool ignore_merges; } table[] = {
        {"smollm", PRE_SMOLLM, false}, {"starcoder", PRE_SMOLLM, false}, {"refact", PRE_SMOLLM, false},
        {"command-r", PRE_SMOLLM, false}, {"codeshell", PRE_SMOLLM, false},
        {"gpt-2", PRE_GPT2, false}, {"gpt2", PRE_GPT2, false}, {"mpt", PRE_GPT2, false},
        {"olmo", PRE_GPT2, false},
        {"llama-bpe", PRE_LLAMA3, true}, {"llama3", PRE_LLAMA3, true}, {"llama-v3", PRE_LLAMA3, true},
        {"qwen2", PRE_QWEN2, false}, {"stablelm2", PRE_QWEN2, false},
        {"deepseek-r1-qwen", PRE_QWEN2, false}, {"qwen35", PRE_QWEN35, false},
        {"default", PRE_DEFAULT, false},
        {"gemma4", PRE_GEMMA4, false},
    };
    snprintf(v->pre_name, sizeof v->pre_name, "%s", pre);
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        if (!strcmp(pre, table[i].name)) {
            v->pre = table[i].kind;
            v->ignore_merges = table[i].ignore_merges;
            return EMBER_OK;
        }
    }
    return ember_error(EMBER_ERR_UNSUPPORTED,
                       "tokenizer: tokenizer.ggml.pre '%s' is not supported (smollm, gpt2, llama-bpe, qwen2, qwen35, default, gemma4)", pre);
}

static ember_status load_merges(ember_vocab *v, const ember_gguf *g)
{
    ember_gguf_arr m;
    ember_status st = ember_gguf_get_arr(g, "tokenizer.ggml.merges", &m);
    if (st == EMBER_ERR_NOT_FOUND)
        return ember_error(EMBER_ERR_NOT_FOUND, "tokenizer: BPE model without tokenizer.ggml.merges");
    if (st) return st;
    if (m.type != EMBER_GGUF_STRING)
        return ember_error(EMBER_ERR_FORMAT, "tokenizer: tokenizer.ggml.merges is not an array of strings");
    if (m.n > (1u << 24))
        return ember_error(EMBER_ERR_FORMAT, "tokenizer: tokenizer.ggml.merges has %llu entries",
                           (unsigned long long)m.n);
    uint32_t slots = 64;
    while (slots < m.n * 2) slots *= 2;
    v->merges = malloc(sizeof *v->merges * slots);
    if (!v->merges) return ember_error(EMBER_ERR_NOMEM, "tokenizer: out of memory for merges");
    memset(v->merges, 0xff, sizeof *v->merges * slots);
    v->n_merge_slots = slots;
    char *buf = NULL;
    size_t bufcap = 0;
    for (uint64_t i = 0; i < m.n; i++) {
        size_t n;
        const char *s = ember_gguf_arr_str(&m, i, &n);
        if (!s) { free(buf); return ember_error(EMBER_ERR_FORMAT, "tokenizer: merges[%llu] unreadable", (unsigned long long)i); }
        const char *sp = n > 1 ? memchr(s + 1, ' ', n - 1) : NULL;
        size_t la = sp ? (size_t)(sp - s) : 0, lb = sp ? n - la - 1 : 0;
        const char *b = sp ? sp + 1 : s;
        /* llama.cpp: no space -> the pair ("", ""), harmless; we skip it */
        if (!sp) continue;
        int32_t ia, ib, ir;
        if ((st = str_intern(&v->strs, s, la, &ia))) { free(buf); return st; }
        if ((st = str_intern(&v->strs, b, lb, &ib))) { free(buf); return st; }
        if (la + lb > bufcap) {
            bufcap = (la + lb) * 2 + 16;
            char *nb = realloc(buf, bufcap);
            if (!nb) { free(buf); return ember_error(EMBER_ERR_NOMEM, "tokenizer: out of memory"); }
            buf = nb;
        }
        memcpy(buf, s, la);
        memcpy(buf + la, b, lb);
        if ((st = str_intern(&v->strs, buf, la + lb, &ir))) { free(buf); return st; }
        uint64_t key = (uint64_t)(uint32_t)ia << 32 | (uint32_t)ib;
        uint32_t mask = slots - 1, k = (uint32_t)tok_hash(&key, 8) & mask;
        while (v->merges[k].key != UINT64_MAX && v->merges[k].key != key) k = (k + 1) & mask;
        if (v->merges[k].key == key) continue;   /* first rank wins (std::map emplace) */
        v->merges[k] = (merge_slot){.key = key, .rank = (int32_t)i, .result = ir};
    }
    free(buf);
    return EMBER_OK;
}

ember_status ember_vocab_load(const ember_gguf *g, ember_vocab **out)
{
    if (!g || !out) return ember_error(EMBER_ERR_INVALID_ARG, "tokenizer: NULL argument");
    *out = NULL;
    const char *model;
    ember_status st = ember_gguf_get_str(g, "tokenizer.ggml.model", &model, NULL);
    if (st == EMBER_ERR_NOT_FOUND)
        return ember_error(EMBER_ERR_NOT_FOUND, "tokenizer: key tokenizer.ggml.model not found");
    if (st) return st;
    ember_vocab *v = calloc(1, sizeof *v);
    if (!v) return ember_error(EMBER_ERR_NOMEM, "tokenizer: out of memory");
    v->bos = v->eos = v->eot = v->pad = v->unk = -1;

    const char *pre = NULL;
    if (ember_gguf_get_str(g, "tokenizer.ggml.pre", &pre, NULL)) { ember_clear_error(); pre = NULL; }
    if (!strcmp(model, "llama")) {
        v->type = EMBER_VOCAB_SPM;
        v->pre = PRE_NONE;
        v->add_bos = true;
        v->add_space_prefix = true;
        v->bos = 1; v->eos = 2; v->unk = 0;   /* llama.cpp SPM defaults */
    } else if (!strcmp(model, "gpt2")) {
        v->type = EMBER_VOCAB_BPE;
        v->bos = 11; v->eos = 11;              /* llama.cpp BPE defaults */
        st = set_pre(v, pre ? pre : "default");
    } else if (!strcmp(model, "gemma4")) {
        v->type = EMBER_VOCAB_GEMMA4;
        v->pre = PRE_GEMMA4;
        snprintf(v->pre_name, sizeof v->pre_name, "gemma4");
    } else {
        st = ember_error(EMBER_ERR_UNSUPPORTED, "tokenizer: tokenizer.ggml.model '%s' is not supported (llama, gpt2, gemma4)", model);
    }
    if (st) goto fail;

    ember_gguf_arr toks, scores = {0}, types = {0};
    st = ember_gguf_get_arr(g, "tokenizer.ggml.tokens", &toks);
    if (st == EMBER_ERR_NOT_FOUND) st = ember_error(EMBER_ERR_NOT_FOUND, "tokenizer: key tokenizer.ggml.tokens not found");
    if (st) goto fail;
    if (toks.type != EMBER_GGUF_STRING || toks.n == 0 || toks.n > (1u << 30)) {
        st = ember_error(EMBER_ERR_FORMAT, "tokenizer: tokenizer.ggml.tokens must be a non-empty string array (got %llu elements)",
                         (unsigned long long)toks.n);
        goto fail;
    }
    int32_t n = (int32_t)toks.n;
    v->n_tokens = n;
    bool have_scores = false, have_types = false;
    st = ember_gguf_get_arr(g, "tokenizer.ggml.scores", &scores);
    if (st == EMBER_ERR_NOT_FOUND) { ember_clear_error(); st = EMBER_OK; }
    else if (st) goto fail;
    else {
        if ((scores.type != EMBER_GGUF_F32 && scores.type != EMBER_GGUF_I32) || scores.n < toks.n) {
            st = ember_error(EMBER_ERR_FORMAT, "tokenizer: tokenizer.ggml.scores must be f32/i32 with at least %d elements", n);
            goto fail;
        }
        have_scores = true;
    }
    st = ember_gguf_get_arr(g, "tokenizer.ggml.token_type", &types);
    if (st == EMBER_ERR_NOT_FOUND) { ember_clear_error(); st = EMBER_OK; }
    else if (st) goto fail;
    else {
        if (types.type != EMBER_GGUF_I32 || types.n < toks.n) {
            st = ember_error(EMBER_ERR_FORMAT, "tokenizer: tokenizer.ggml.token_type must be i32 with at least %d elements", n);
            goto fail;
        }
        have_types = true;
    }

    uint32_t n_slots = 64;
    while (n_slots < (uint64_t)n * 2) n_slots *= 2;   /* grows when merges add strings */
    if ((st = str_init(&v->strs, n, (size_t)n * 8, n_slots))) goto fail;
    v->scores = malloc(sizeof *v->scores * (size_t)n);
    v->attr = malloc(sizeof *v->attr * (size_t)n);
    if (!v->scores || !v->attr) { st = ember_error(EMBER_ERR_NOMEM, "tokenizer: out of memory"); goto fail; }
    for (int32_t i = 0; i < n; i++) {
        size_t len;
        const char *s = ember_gguf_arr_str(&toks, (uint64_t)i, &len);
        if (!s) { st = ember_error(EMBER_ERR_FORMAT, "tokenizer: tokens[%d] unreadable", i); goto fail; }
        char tmp[32];
        if (len == 0) {   /* llama.cpp renames empty tokens */
            len = (size_t)snprintf(tmp, sizeof tmp, "[EMPTY_%d]", i);
            s = tmp;
        }
        if ((st = str_add(&v->strs, s, len, true, NULL))) goto fail;
        float sc = 0.0f;
        if (have_scores) {
            if (scores.type == EMBER_GGUF_F32) memcpy(&sc, (const char *)scores.data + 4 * (size_t)i, 4);
            else { int32_t x; memcpy(&x, (const char *)scores.data + 4 * (size_t)i, 4); sc = (float)x; }
        }
        v->scores[i] = sc;
        uint32_t a = EMBER_TOKEN_NORMAL;
        if (have_types) {
            int32_t t;
            memcpy(&t, (const char *)types.data + 4 * (size_t)i, 4);
            switch (t) {
            case 1: a = EMBER_TOKEN_NORMAL; break;
            case 2: a = EMBER_TOKEN_UNKNOWN; break;
            case 3: a = EMBER_TOKEN_CONTROL; break;
            case 4: a = EMBER_TOKEN_USER_DEFINED; break;
            case 5: a = EMBER_TOKEN_UNUSED; break;
            case 6: a = EMBER_TOKEN_BYTE; break;
            default: a = 0; break;
            }
        }
        v->attr[i] = a;
    }

    /* special ids and flags from metadata */
    if ((st = get_id(g, "tokenizer.ggml.bos_token_id", n, &v->bos))) goto fail;
    if ((st = get_id(g, "tokenizer.ggml.eos_token_id", n, &v->eos))) goto fail;
    if ((st = get_id(g, "tokenizer.ggml.eot_token_id", n, &v->eot))) goto fail;
    if ((st = get_id(g, "tokenizer.ggml.unknown_token_id", n, &v->unk))) goto fail;
    if ((st = get_id(g, "tokenizer.ggml.padding_token_id", n, &v->pad))) goto fail;
    for (int k = 0; k < EMBER_FIM_COUNT; k++) {
        char key[64];
        v->fim[k] = -1;
        snprintf(key, sizeof key, "tokenizer.ggml.%s_token_id", FIM_KEYS[k]);
        if ((st = get_id(g, key, n, &v->fim[k]))) goto fail;
        if (k < 3) {
            snprintf(key, sizeof key, "tokenizer.ggml.%s_token_id", FIM_OLD_KEYS[k]);
            if ((st = get_id(g, key, n, &v->fim[k]))) goto fail;
        }
        if (v->fim[k] >= n) v->fim[k] = -1;
    }
    if (v->bos >= n) v->bos = -1;
    if (v->eos >= n) v->eos = -1;
    if (v->unk >= n) v->unk = -1;
    if ((st = get_flag(g, "tokenizer.ggml.add_bos_token", &v->add_bos))) goto fail;
    if ((st = get_flag(g, "tokenizer.ggml.add_eos_token", &v->add_eos))) goto fail;
    if ((st = get_flag(g, "tokenizer.ggml.add_space_prefix", &v->add_space_prefix))) goto fail;
    if (v->type != EMBER_VOCAB_SPM) v->add_space_prefix = false;
    if (v->type == EMBER_VOCAB_GEMMA4) v->add_bos = true;
    if (v->add_bos && v->bos < 0) v->add_bos = false;
    if (v->add_eos && v->eos < 0) v->add_eos = false;

    /* end of turn / end of generation by name (llama.cpp load()) */
    for (int k = 0; v->eot < 0 && EOT_NAMES[k]; k++)
        v->eot = str_find(&v->strs, EOT_NAMES[k], strlen(EOT_NAMES[k]));
    for (size_t gi = 0; gi < sizeof FIM_EOG_GROUPS / sizeof FIM_EOG_GROUPS[0]; gi++) {
        for (int k = 0; FIM_EOG_GROUPS[gi][k]; k++) {
            int32_t id = str_find(&v->strs, FIM_EOG_GROUPS[gi][k], strlen(FIM_EOG_GROUPS[gi][k]));
            if (id >= 0 && id < n) { v->attr[id] |= EMBER_TOKEN_EOG | EMBER_TOKEN_CONTROL; break; }
        }
    }
    for (int k = 0; k < EMBER_FIM_COUNT; k++)
        for (int j = 0; v->fim[k] < 0 && FIM_NAMES[k][j]; j++) {
            int32_t id = str_find(&v->strs, FIM_NAMES[k][j], strlen(FIM_NAMES[k][j]));
            if (id >= 0 && id < n) {
                v->fim[k] = id;
                v->attr[id] |= EMBER_TOKEN_CONTROL;
            }
        }
    for (int k = 0; EOG_NAMES[k]; k++) {
        int32_t id = str_find(&v->strs, EOG_NAMES[k], strlen(EOG_NAMES[k]));
        if (id >= 0 && id < n) v->attr[id] |= EMBER_TOKEN_EOG | EMBER_TOKEN_CONTROL;
    }
    {
        /* gemma4 (and plamo2): a normal "</s>" next to <|tool_response> is not an end marker */
        int32_t tr = str_find(&v->strs, "<|tool_response>", 16), s = str_find(&v->strs, "</s>", 4);
        if (tr >= 0 && tr < n && s >= 0 && s < n) v->attr[s] = EMBER_TOKEN_NORMAL;
    }
    if (v->eot >= 0) v->attr[v->eot] |= EMBER_TOKEN_EOG | EMBER_TOKEN_CONTROL;
    if (v->eos >= 0) v->attr[v->eos] |= EMBER_TOKEN_EOG;
    for (int32_t i = 0; i < n; i++)
        if ((v->attr[i] & EMBER_TOKEN_CONTROL) && strstr(v->strs.pool + v->strs.off[i], "unused"))
            v->attr[i] |= EMBER_TOKEN_UNUSED;

    /* byte fallback tables */
    for (int b = 0; b < 256; b++) {
        char hex[8];
        snprintf(hex, sizeof hex, "<0x%02X>", b);
        v->byte_token[b] = str_find(&v->strs, hex, 6);
        uint32_t cp = gpt2_byte_cp((unsigned)b);
        v->byte_char_len[b] = (uint8_t)utf8_put(v->byte_char[b], cp);
        v->byte_intern[b] = -1;
    }

    if (v->type != EMBER_VOCAB_SPM) {
        if ((st = load_merges(v, g))) goto fail;
        for (int b = 0; b < 256; b++)
            v->byte_intern[b] = str_find(&v->strs, v->byte_char[b], v->byte_char_len[b]);
    }

    /* special tokens: trie and priority (longest text first, then lower id) */
    {
        int32_t *list = malloc(sizeof *list * (size_t)n);
        v->special_rank = malloc(sizeof *v->special_rank * (size_t)n);
        if (!list || !v->special_rank) { free(list); st = ember_error(EMBER_ERR_NOMEM, "tokenizer: out of memory"); goto fail; }
        int32_t m = 0;
        for (int32_t i = 0; i < n; i++) {
            v->special_rank[i] = -1;
            if (v->attr[i] & (EMBER_TOKEN_CONTROL | EMBER_TOKEN_USER_DEFINED | EMBER_TOKEN_UNKNOWN)) list[m++] = i;
        }
        qsort_r(list, (size_t)m, sizeof *list, cmp_special, v);
        int32_t root;
        if ((st = trie_node_new(v, 0, &root))) { free(list); goto fail; }
        for (int32_t k = 0; k < m; k++) {
            int32_t id = list[k];
            v->special_rank[id] = k;
            /* a duplicate text keeps the id the string table resolves to */
            if (str_find(&v->strs, v->strs.pool + v->strs.off[id], v->strs.len[id]) != id) continue;
            if ((st = trie_add(v, v->strs.pool + v->strs.off[id], v->strs.len[id], id))) { free(list); goto fail; }
        }
        free(list);
    }

    /* pieces (special=true) */
    {
        int32_t cp_to_byte[0x144];
        for (int k = 0; k < 0x144; k++) cp_to_byte[k] = -1;
        for (int b = 0; b < 256; b++) cp_to_byte[gpt2_byte_cp((unsigned)b)] = b;
        size_t total = 0;
        for (int32_t i = 0; i < n; i++) total += v->strs.len[i] + 1;
        v->piece_pool = malloc(total + 1);
        v->piece_off = malloc(sizeof *v->piece_off * (size_t)n);
        v->piece_len = malloc(sizeof *v->piece_len * (size_t)n);
        if (!v->piece_pool || !v->piece_off || !v->piece_len) { st = ember_error(EMBER_ERR_NOMEM, "tokenizer: out of memory"); goto fail; }
        size_t at = 0;
        for (int32_t i = 0; i < n; i++) {
            size_t l = piece_of(v, i, cp_to_byte, v->piece_pool + at);
            v->piece_off[i] = (uint32_t)at;
            v->piece_len[i] = (uint32_t)l;
            at += l;
        }
    }

    if ((st = pretok_init(v))) goto fail;
    *out = v;
    return EMBER_OK;
fail:
    ember_vocab_free(v);
    return st;
}

void ember_vocab_free(ember_vocab *v)
{
    if (!v) return;
    pretok_free(v);
    str_free(&v->strs);
    free(v->scores);
    free(v->attr);
    free(v->piece_pool);
    free(v->piece_off);
    free(v->piece_len);
    free(v->merges);
    free(v->trie);
    free(v->special_rank);
    free(v);
}

/* ---- accessors ----------------------------------------------------------- */

ember_vocab_type ember_vocab_get_type(const ember_vocab *v) { return v->type; }
const char *ember_vocab_pre(const ember_vocab *v) { return v->pre_name; }
int32_t ember_vocab_n_tokens(const ember_vocab *v) { return v->n_tokens; }
ember_token ember_vocab_bos(const ember_vocab *v) { return v->bos; }
ember_token ember_vocab_eos(const ember_vocab *v) { return v->eos; }
ember_token ember_vocab_eot(const ember_vocab *v) { return v->eot; }
ember_token ember_vocab_pad(const ember_vocab *v) { return v->pad; }
ember_token ember_vocab_fim(const ember_vocab *v, ember_fim_kind k)
{
    return (int)k >= 0 && k < EMBER_FIM_COUNT ? v->fim[k] : -1;
}
ember_token ember_vocab_unk(const ember_vocab *v) { return v->unk; }
bool ember_vocab_add_bos(const ember_vocab *v) { return v->add_bos; }
bool ember_vocab_add_eos(const ember_vocab *v) { return v->add_eos; }

uint32_t ember_vocab_attr(const ember_vocab *v, ember_token id)
{
    return id >= 0 && id < v->n_tokens ? v->attr[id] : 0;
}

bool ember_vocab_is_eog(const ember_vocab *v, ember_token id)
{
    return (ember_vocab_attr(v, id) & EMBER_TOKEN_EOG) != 0;
}

bool ember_vocab_is_control(const ember_vocab *v, ember_token id)
{
    return (ember_vocab_attr(v, id) & EMBER_TOKEN_CONTROL) != 0;
}

const char *ember_vocab_text(const ember_vocab *v, ember_token id, size_t *len)
{
    if (id < 0 || id >= v->n_tokens) { if (len) *len = 0; return NULL; }
    if (len) *len = v->strs.len[id];
    return v->strs.pool + v->strs.off[id];
}

ember_token ember_vocab_find(const ember_vocab *v, const char *text, size_t len)
{
    int32_t id = str_find(&v->strs, text, len);
    return id < v->n_tokens ? id : -1;
}

const char *ember_token_to_piece(const ember_vocab *v, ember_token id, bool special, size_t *len)
{
    if (id < 0 || id >= v->n_tokens) { *len = 0; return NULL; }
    if (!special && (v->attr[id] & (EMBER_TOKEN_CONTROL | EMBER_TOKEN_UNKNOWN))) {
        *len = 0;
        return v->piece_pool + v->piece_off[id];
    }
    *len = v->piece_len[id];
    return v->piece_pool + v->piece_off[id];
}
