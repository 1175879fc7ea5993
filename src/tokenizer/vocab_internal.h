/*
 * vocab_internal.h — the ember_vocab struct and helpers shared by the
 * tokenizer's files (vocab.c, tokenize.c, pretok.c, detok.c).
 *
 * Owns: the in-memory layout of a vocabulary. Must not be included outside
 * src/tokenizer/.
 */
#ifndef EMBER_TOKENIZER_VOCAB_INTERNAL_H
#define EMBER_TOKENIZER_VOCAB_INTERNAL_H

#include "tokenizer/tokenizer.h"

/* A string pool with a hash index: strings 0..n_tokens-1 are the token texts
 * (for duplicate texts the index points at the highest id, as llama.cpp's
 * token_to_id map does); strings from n_tokens on are merge parts/results
 * that are not tokens ("interned" strings of BPE). */
struct str_slot {
    int32_t id;
    uint32_t tag;          /* high 32 bits of the hash: most misses end here */
};

typedef struct str_table {
    char *pool;            /* all strings back to back, each NUL-terminated */
    size_t pool_len, pool_cap;
    uint32_t *off, *len;   /* per string */
    int32_t n, cap;        /* strings used / allocated */
    struct str_slot *slots; /* open addressing; id -1 = empty */
    uint32_t n_slots;      /* power of two */
} str_table;

/* BPE merge: (left, right) interned ids -> rank and the merged string's id. */
typedef struct merge_slot {
    uint64_t key;          /* (uint64)left << 32 | right; UINT64_MAX = empty */
    int32_t rank;
    int32_t result;
} merge_slot;

enum pre_kind {
    PRE_NONE = 0,      /* SPM */
    PRE_GPT2,          /* GPT-2 regex */
    PRE_SMOLLM,        /* \p{N} then GPT-2 */
    PRE_LLAMA3,        /* llama-bpe; ignore_merges */
    PRE_QWEN2,         /* qwen2 */
    PRE_QWEN35,        /* qwen35: qwen2 with \p{M} in words */
    PRE_DEFAULT,       /* default (4 regexes) */
    PRE_GEMMA4,        /* runs of non-newlines / newlines */
};

#define EMBER_PRE_MAX_REGEX 4

struct ember_vocab {
    ember_vocab_type type;
    enum pre_kind pre;
    char pre_name[64];
    int32_t n_tokens;
    str_table strs;
    float *scores;         /* [n_tokens] */
    uint32_t *attr;        /* [n_tokens] EMBER_TOKEN_* */

    /* pieces for token_to_piece(special=true) */
    char *piece_pool;
    uint32_t *piece_off, *piece_len;

    ember_token bos, eos, eot, pad, unk;
    ember_token fim[EMBER_FIM_COUNT];   /* fill-in-the-middle ids (ember_vocab_fim), -1 none */
    bool add_bos, add_eos, add_space_prefix, ignore_merges;

    /* byte fallback: SPM/gemma4 <0xXX> tokens; BPE: interned id of the
     * GPT-2-mapped character of each byte (-1 if not a string we know) */
    int32_t byte_token[256];
    int32_t byte_intern[256];
    /* BPE: for each byte, the UTF-8 of its GPT-2 character (1-2 bytes) */
    char byte_char[256][3];
    uint8_t byte_char_len[256];

    merge_slot *merges;
    uint32_t n_merge_slots;   /* power of two, 0 for SPM */

    /* special tokens (CONTROL, USER_DEFINED, UNKNOWN): a byte trie over their
     * texts, and each one's priority (longest text first, then lower id) */
    struct trie_node *trie;
    int32_t n_trie, cap_trie;
    int32_t *special_rank;    /* [n_tokens], -1 if not special */
    uint8_t special_first[256]; /* bytes a special text can start with */

    /* compiled pre-tokenizer regexes (pcre2_code*, opaque here) */
    void *re[EMBER_PRE_MAX_REGEX];
    int n_re;
};

struct trie_node {
    int32_t child;     /* first child, -1 */
    int32_t sibling;   /* next sibling, -1 */
    int32_t token;     /* token whose text ends here, -1 */
    uint8_t byte;
};

/* 64-bit hash of n bytes (multiply-xorshift over 8-byte words). */
uint64_t tok_hash(const void *p, size_t n);
/* Index of string s[0..n) in t, or -1. */
int32_t str_find(const str_table *t, const char *s, size_t n);

/* Length of the UTF-8 sequence announced by lead byte c, by its high four
 * bits only (1 for 0x00-0xBF, 2 for 0xC-, 3 for 0xE-, 4 for 0xF-), as
 * llama.cpp's unicode_len_utf8; the caller clips it to the bytes left. */
static inline size_t utf8_len_lead(unsigned char c)
{
    static const uint8_t lookup[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lookup[c >> 4];
}

/* Length of the well-formed UTF-8 sequence at s[0..n) (Unicode Table 3-7),
 * or 0 if the bytes there do not start one. */
size_t utf8_valid_len(const unsigned char *s, size_t n);

/* Pre-tokenizer (pretok.c). Compile the regexes of v->pre; split valid UTF-8
 * text[0..n) into words. Words are written as (start, len) byte pairs into
 * *words (grown with realloc; *cap in pairs). Returns the number of words or
 * -1 on allocation failure. */
ember_status pretok_init(ember_vocab *v);
void pretok_free(ember_vocab *v);
int64_t pretok_split(const ember_vocab *v, const char *text, size_t n,
                     size_t **words, size_t *cap);

#endif
