/*
 * pretok.c — BPE pre-tokenizers: splitting text into words with PCRE2
 * (UTF + Unicode properties, JIT) before merges run inside each word.
 *
 * Owns: the regex lists per tokenizer.ggml.pre and the split semantics.
 * Must not: see invalid UTF-8 (tokenize.c sanitizes first) or do merges.
 *
 * Semantics (llama.cpp unicode.cpp unicode_regex_split): the regexes of a
 * pre-tokenizer are applied in order; each one splits every current piece
 * into its matches and the gaps between them, and every non-empty match or
 * gap becomes a piece. A regex sees one piece as its whole subject, so a
 * look-ahead stops at the piece's end. The regex texts are those of the
 * models' tokenizer.json files as llama.cpp lists them (llama-vocab.cpp);
 * \s is spelled out as Unicode White_Space (the set llama.cpp uses), so the
 * result does not depend on PCRE2's reading of \s. \p{L}/\p{N}/\p{P} come from
 * PCRE2's Unicode tables (10.42: Unicode 14), llama.cpp's from its own newer
 * ones: characters assigned later may split differently.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "tokenizer/vocab_internal.h"

#define WS "\\t\\n\\x{0B}\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
#define S_ "[" WS "]"
#define NS "[^" WS "]"

/* GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S) */
static const char RE_GPT2[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" WS "\\p{L}\\p{N}]+|" S_ "+(?!" NS ")";
/* llama3: (?:'[sS]|...)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ */
static const char RE_LLAMA3[] =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}"
    "| ?[^" WS "\\p{L}\\p{N}]+[\\r\\n]*|" S_ "*[\\r\\n]+|" S_ "+(?!" NS ")|" S_ "+";
/* qwen2: as llama3 with single digits */
static const char RE_QWEN2[] =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}"
    "| ?[^" WS "\\p{L}\\p{N}]+[\\r\\n]*|" S_ "*[\\r\\n]+|" S_ "+(?!" NS ")|" S_ "+";
/* qwen35 (llama.cpp llama-vocab.cpp LLAMA_VOCAB_PRE_TYPE_QWEN35, from
 * Qwen3.5's tokenizer.json): qwen2 with combining marks (\p{M}) inside words:
 * (?:'[sS]|...)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ */
static const char RE_QWEN35[] =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}"
    "| ?[^" WS "\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|" S_ "*[\\r\\n]+|" S_ "+(?!" NS ")|" S_ "+";
static const char RE_DIGIT[] = "\\p{N}";
static const char RE_DEFAULT_PUNCT[] = "[\\p{P}\\$\\+<=>\\^~\\|]+";
static const char RE_DIGITS[] = "\\p{N}+";
static const char RE_DIGITS3[] = "[0-9][0-9][0-9]";

static ember_status compile(ember_vocab *v, const char *pattern)
{
    int err;
    PCRE2_SIZE off;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &err, &off, NULL);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        return ember_error(EMBER_ERR_INTERNAL, "tokenizer: regex for pre '%s' does not compile at %zu: %s",
                           v->pre_name, (size_t)off, (const char *)msg);
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);   /* interpreter fallback if JIT is unavailable */
    v->re[v->n_re++] = re;
    return EMBER_OK;
}

ember_status pretok_init(ember_vocab *v)
{
    ember_status st = EMBER_OK;
    switch (v->pre) {
    case PRE_GPT2: st = compile(v, RE_GPT2); break;
    case PRE_SMOLLM:
        if (!(st = compile(v, RE_DIGIT))) st = compile(v, RE_GPT2);
        break;
    case PRE_LLAMA3: st = compile(v, RE_LLAMA3); break;
    case PRE_QWEN2: st = compile(v, RE_QWEN2); break;
    case PRE_QWEN35: st = compile(v, RE_QWEN35); break;
    case PRE_DEFAULT:
        if (!(st = compile(v, RE_DEFAULT_PUNCT)) && !(st = compile(v, RE_GPT2)) && !(st = compile(v, RE_DIGITS)))
            st = compile(v, RE_DIGITS3);
        break;
    case PRE_GEMMA4:   /* [^\n]+|[\n]+ is done by hand in pretok_split */
    case PRE_NONE:
        break;
    }
    return st;
}

void pretok_free(ember_vocab *v)
{
    for (int i = 0; i < v->n_re; i++) pcre2_code_free(v->re[i]);
    v->n_re = 0;
}

static bool push(size_t **w, size_t *n, size_t *cap, size_t start, size_t len)
{
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 256;
        size_t *nw = realloc(*w, sizeof **w * 2 * c);
        if (!nw) return false;
        *w = nw;
        *cap = c;
    }
    (*w)[2 * *n] = start;
    (*w)[2 * *n + 1] = len;
    (*n)++;
    return true;
}

int64_t pretok_split(const ember_vocab *v, const char *text, size_t len, size_t **words, size_t *cap)
{
    size_t n = 0;
    if (!len) return 0;
    if (v->pre == PRE_GEMMA4 || v->n_re == 0) {
        size_t i = 0;
        while (i < len) {
            bool nl = text[i] == '\n';
            size_t j = i;
            while (j < len && (text[j] == '\n') == nl) j++;
            if (!push(words, &n, cap, i, j - i)) return -1;
            i = j;
        }
        return (int64_t)n;
    }
    /* ping-pong between two piece lists, one regex at a time */
    size_t *cur = NULL, ncur = 0, capcur = 0;
    if (!push(&cur, &ncur, &capcur, 0, len)) return -1;
    pcre2_match_data *md = pcre2_match_data_create(1, NULL);
    if (!md) { free(cur); return -1; }
    for (int r = 0; r < v->n_re; r++) {
        const pcre2_code *re = v->re[r];
        size_t *nxt = NULL, nnxt = 0, capnxt = 0;
        for (size_t p = 0; p < ncur; p++) {
            size_t ps = cur[2 * p], pl = cur[2 * p + 1];
            const PCRE2_SPTR subj = (PCRE2_SPTR)(text + ps);
            size_t at = 0, prev_end = 0;
            while (at < pl) {
                int rc = pcre2_match(re, subj, pl, at, PCRE2_NO_UTF_CHECK, md, NULL);
                if (rc < 0) break;   /* no more matches (or a matcher limit: rest is a gap) */
                PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
                size_t ms = ov[0], me = ov[1];
                if (ms > prev_end && !push(&nxt, &nnxt, &capnxt, ps + prev_end, ms - prev_end)) goto nomem;
                if (me > ms) {
                    if (!push(&nxt, &nnxt, &capnxt, ps + ms, me - ms)) goto nomem;
                    prev_end = me;
                    at = me;
                } else {
                    /* empty match (none of our regexes can): step one character */
                    at = ms + 1;
                    while (at < pl && ((unsigned char)subj[at] & 0xC0) == 0x80) at++;
                }
            }
            if (prev_end < pl && !push(&nxt, &nnxt, &capnxt, ps + prev_end, pl - prev_end)) goto nomem;
            continue;
        nomem:
            free(nxt);
            free(cur);
            pcre2_match_data_free(md);
            return -1;
        }
        free(cur);
        cur = nxt;
        ncur = nnxt;
        capcur = capnxt;
    }
    pcre2_match_data_free(md);
    /* hand the list over */
    free(*words);
    *words = cur;
    *cap = capcur;
    return (int64_t)ncur;
}
