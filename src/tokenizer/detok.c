/*
 * detok.c — token ids back to text: whole sequences and a streaming
 * detokenizer that never emits a partial UTF-8 character.
 *
 * Owns: ember_detokenize and the ember_detok state machine. Must not:
 * tokenize or allocate per token beyond growing its own output buffer.
 *
 * Stream rule: bytes are emitted only as complete, well-formed UTF-8
 * sequences (Unicode Table 3-7). A sequence still incomplete at the end of a
 * piece waits for the next piece; a byte that cannot start or continue a
 * well-formed sequence is emitted as U+FFFD, one per byte (the same rule the
 * BPE tokenizer applies to its input).
 */
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "tokenizer/vocab_internal.h"

ember_status ember_detokenize(const ember_vocab *v, const ember_token *ids, size_t n,
                              bool special, char **out, size_t *out_len)
{
    if (!v || !out || !out_len || (!ids && n))
        return ember_error(EMBER_ERR_INVALID_ARG, "detokenize: NULL argument");
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= v->n_tokens)
            return ember_error(EMBER_ERR_INVALID_ARG, "detokenize: token %zu has id %d outside [0, %d)",
                               i, ids[i], v->n_tokens);
        size_t l;
        ember_token_to_piece(v, ids[i], special, &l);
        total += l;
    }
    char *s = malloc(total + 1);
    if (!s) return ember_error(EMBER_ERR_NOMEM, "detokenize: out of memory (%zu bytes)", total);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        size_t l;
        const char *p = ember_token_to_piece(v, ids[i], special, &l);
        memcpy(s + k, p, l);
        k += l;
    }
    s[k] = 0;
    *out = s;
    *out_len = k;
    return EMBER_OK;
}

void ember_detok_init(ember_detok *d, const ember_vocab *v, bool special)
{
    memset(d, 0, sizeof *d);
    d->vocab = v;
    d->special = special;
}

void ember_detok_free(ember_detok *d)
{
    free(d->buf);
    d->buf = NULL;
    d->cap = 0;
    d->n_pending = 0;
}

static bool reserve(ember_detok *d, size_t n)
{
    if (n <= d->cap) return true;
    size_t c = d->cap ? d->cap : 64;
    while (c < n) c *= 2;
    char *b = realloc(d->buf, c);
    if (!b) return false;
    d->buf = b;
    d->cap = c;
    return true;
}

/* Could s[0..n) (n < full length) still become a well-formed sequence? */
static bool utf8_prefix_ok(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t need;
    if (c >= 0xC2 && c <= 0xDF) need = 2;
    else if (c >= 0xE0 && c <= 0xEF) need = 3;
    else if (c >= 0xF0 && c <= 0xF4) need = 4;
    else return false;
    if (n >= need) return false;
    for (size_t i = 1; i < n; i++) {
        unsigned lo = 0x80, hi = 0xBF;
        if (i == 1) {
            if (c == 0xE0) lo = 0xA0;
            if (c == 0xED) hi = 0x9F;
            if (c == 0xF0) lo = 0x90;
            if (c == 0xF4) hi = 0x8F;
        }
        if (s[i] < lo || s[i] > hi) return false;
    }
    return true;
}

/* Emit complete sequences from pending+piece into d->buf. */
static ember_status feed(ember_detok *d, const char *p, size_t l, const char **out, size_t *out_len)
{
    if (!reserve(d, (d->n_pending + l) * 3 + 4))
        return ember_error(EMBER_ERR_NOMEM, "detok: out of memory");
    size_t k = 0;
    /* work on pending bytes followed by the piece, one byte at a time when
     * needed; pending is at most 3 bytes */
    unsigned char win[8];
    size_t i = 0;
    while (d->n_pending) {
        /* try to complete the pending sequence with bytes of the piece */
        size_t np = d->n_pending;
        memcpy(win, d->pending, np);
        size_t take = 0;
        while (np + take < 4 && i + take < l) { win[np + take] = (unsigned char)p[i + take]; take++; }
        size_t vl = utf8_valid_len(win, np + take);
        if (vl >= np) {
            memcpy(d->buf + k, win, vl);
            k += vl;
            i += vl - np;
            d->n_pending = 0;
            break;
        }
        if (i + take == l && utf8_prefix_ok(win, np + take)) {
            /* still incomplete, piece exhausted: keep waiting */
            memcpy(d->pending, win, np + take);
            d->n_pending = (uint8_t)(np + take);
            i = l;
            *out = d->buf;
            *out_len = k;
            return EMBER_OK;
        }
        /* the first pending byte can never start a sequence here */
        memcpy(d->buf + k, "\xef\xbf\xbd", 3);
        k += 3;
        memmove(d->pending, d->pending + 1, np - 1);
        d->n_pending = (uint8_t)(np - 1);
    }
    while (i < l) {
        const unsigned char *s = (const unsigned char *)p + i;
        size_t vl = utf8_valid_len(s, l - i);
        if (vl) { memcpy(d->buf + k, s, vl); k += vl; i += vl; continue; }
        if (utf8_prefix_ok(s, l - i)) {
            memcpy(d->pending, s, l - i);
            d->n_pending = (uint8_t)(l - i);
            break;
        }
        memcpy(d->buf + k, "\xef\xbf\xbd", 3);
        k += 3;
        i++;
    }
    *out = d->buf;
    *out_len = k;
    return EMBER_OK;
}

ember_status ember_detok_push(ember_detok *d, ember_token id, const char **out, size_t *out_len)
{
    *out = NULL;
    *out_len = 0;
    if (!d || !d->vocab || id < 0 || id >= d->vocab->n_tokens)
        return ember_error(EMBER_ERR_INVALID_ARG, "detok: token id %d outside [0, %d)", id,
                           d && d->vocab ? d->vocab->n_tokens : 0);
    size_t l;
    const char *p = ember_token_to_piece(d->vocab, id, d->special, &l);
    return feed(d, p, l, out, out_len);
}

ember_status ember_detok_flush(ember_detok *d, const char **out, size_t *out_len)
{
    if (!reserve(d, 16)) return ember_error(EMBER_ERR_NOMEM, "detok: out of memory");
    size_t k = 0;
    for (uint8_t i = 0; i < d->n_pending; i++) {
        memcpy(d->buf + k, "\xef\xbf\xbd", 3);
        k += 3;
    }
    d->n_pending = 0;
    *out = d->buf;
    *out_len = k;
    return EMBER_OK;
}
