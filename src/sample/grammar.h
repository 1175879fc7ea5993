/*
 * grammar.h — grammar-constrained decoding: GBNF grammars that mask logits.
 *
 * Owns: parsing GBNF text (llama.cpp's grammar syntax, grammars/README.md in
 * llama.cpp: rules `name ::= ...`, "literals", [classes], [^negated], `.`,
 * ( groups ), | alternatives, * + ? {m} {m,} {m,n}, # comments), matching
 * UTF-8 bytes against it, and masking a vocabulary's tokens by their byte
 * strings. Must not: know about models, slots, HTTP or the sampler chain's
 * order; tokenize text; allocate per token once its caches are warm.
 *
 * Design. A grammar is compiled to rules of element sequences; the matcher
 * follows the set of pushdown stacks the grammar can be in (hash-consed,
 * shared tails) and interns each (stack set, partial UTF-8 code point) as a
 * state with a lazily filled 256-entry byte transition row, i.e. a DFA built
 * on the fly over the pushdown automaton. The token mask of a state is one
 * pre-order walk of a byte trie of the vocabulary (shared prefixes checked
 * once, dead subtrees skipped) and is cached per state. Checking one token
 * (e.g. the one the sampler drew) is a walk over its bytes through cached
 * transitions: the "lazy"/"grammar first" strategy of llama.cpp's
 * common_sampler — draw unconstrained, check, and mask only on rejection —
 * is what ember_grammar_token_allowed is for.
 *
 * Tokens: a token is allowed when its piece (bytes of token_to_piece with
 * special=false) keeps the grammar alive; a piece may end inside a UTF-8
 * sequence (the next token must complete it). End-of-generation tokens are
 * allowed exactly when the grammar can end (all rules complete, no partial
 * code point). Other tokens with an empty piece (control tokens) are never
 * allowed. Token references match one whole token whatever its bytes:
 * <[id]> by id, <text> by the token's text with special tokens written out
 * (e.g. <start_of_turn>, <|tool_call>), !<[id]> / !<text> any token except
 * that one and the end-of-generation tokens; this is how a grammar can force
 * a control token (whose piece is empty). They are resolved against the
 * vocabulary in ember_grammar_state_new (without a vocab they never match).
 *
 * Seam for the sampler (ember_sampler_* in src/sample/sampler.c) and the
 * engine; this module never calls them:
 *   per grammar:  ember_grammar_parse(gbnf) -> g;
 *                 ember_grammar_vocab_from_tokenizer(vocab) -> tv (once per model);
 *                 ember_grammar_state_new(g, tv) -> template (keep it: its
 *                 clones share the warm cache, see bench/results/grammar.md)
 *   per request:  ember_grammar_state_clone(template) -> st
 *   per step:     ember_sample_constrained(s, st, logits, n_vocab, scratch, &tok)
 *                 (src/sample/constrained.h: exact, and it masks only when
 *                 none of the chain's candidates is allowed), or by hand:
 *                 tok = ember_sampler_sample(s, logits);
 *                 if (!ember_grammar_token_allowed(st, tok)) {
 *                     copy logits to scratch; ember_grammar_apply(st, scratch, n_vocab);
 *                     tok = ember_sampler_sample(s, scratch); }
 *                 ember_grammar_accept(st, tok); ember_sampler_accept(s, tok);
 *                 stop when tok is EOG (only allowed once ember_grammar_can_end).
 *   (ember_grammar_allowed_list gives the few allowed ids of a sparse state
 *   for a cheaper masked draw.)
 * The request fields (response_format, grammar, json_schema) are turned into
 * GBNF text by ember_grammar_from_request (json_schema.h); its errors are
 * the client's (HTTP 400), as are ember_grammar_parse's.
 *
 * Thread safety: an ember_grammar and an ember_grammar_vocab are immutable
 * once built and may be shared. A state and all its clones share one mutable
 * cache (the DFA and masks): use them from one thread at a time.
 */
#ifndef EMBER_SAMPLE_GRAMMAR_H
#define EMBER_SAMPLE_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ember.h"

typedef struct ember_grammar ember_grammar;
typedef struct ember_grammar_vocab ember_grammar_vocab;
typedef struct ember_grammar_state ember_grammar_state;
struct ember_vocab;

/* Parse `len` bytes of GBNF text (UTF-8) with start rule `root` (NULL:
 * "root"). Errors: EMBER_ERR_FORMAT with "line L:C: ..." naming the first
 * fault (bad token, unterminated literal or class, bad escape, undefined
 * rule, missing root, left recursion, invalid UTF-8, a repetition bound over
 * 100000, a bad token reference), EMBER_ERR_INVALID_ARG, EMBER_ERR_NOMEM.
 * Never crashes on any input. */
ember_status ember_grammar_parse(const char *text, size_t len, const char *root, ember_grammar **out);
void ember_grammar_free(ember_grammar *g);
/* Number of rules after desugaring (repetitions and groups become rules). */
int32_t ember_grammar_n_rules(const ember_grammar *g);

/* Token byte strings for masking. pieces[i] / lens[i]: the bytes of token i
 * (may be empty, need not be NUL-terminated, may be partial UTF-8); texts /
 * text_lens (both may be NULL): the token's text with special tokens written
 * out, for <text> references; is_eog (may be NULL): tokens that end a
 * generation. Everything is copied.
 * Errors: EMBER_ERR_INVALID_ARG (n_vocab <= 0, NULL piece with lens > 0),
 * EMBER_ERR_NOMEM. Build cost: one sort of the pieces (about 0.2 s for
 * Gemma 3's 262,144 tokens). */
ember_status ember_grammar_vocab_new(const char *const *pieces, const size_t *lens,
                                     const char *const *texts, const size_t *text_lens, int32_t n_vocab,
                                     const bool *is_eog, ember_grammar_vocab **out);
/* Same from a loaded tokenizer: pieces = ember_token_to_piece(v, id,
 * special=false), texts = the same with special=true, ember_vocab_is_eog. */
ember_status ember_grammar_vocab_from_tokenizer(const struct ember_vocab *v, ember_grammar_vocab **out);
void ember_grammar_vocab_free(ember_grammar_vocab *tv);
int32_t ember_grammar_vocab_n_tokens(const ember_grammar_vocab *tv);

/* A matcher at the grammar's start. `tv` may be NULL (then only the byte
 * level functions work). g and tv must outlive the state and its clones.
 * Errors: EMBER_ERR_NOT_FOUND (a token reference that is not one token of
 * tv), EMBER_ERR_INVALID_ARG, EMBER_ERR_NOMEM. */
ember_status ember_grammar_state_new(const ember_grammar *g, const ember_grammar_vocab *tv,
                                     ember_grammar_state **out);
/* A copy at the same position that shares the cache (cheap, O(1)). */
ember_status ember_grammar_state_clone(const ember_grammar_state *st, ember_grammar_state **out);
void ember_grammar_state_reset(ember_grammar_state *st);
void ember_grammar_state_free(ember_grammar_state *st);

/* Advance by raw bytes (any split, UTF-8 may be cut anywhere). On a byte the
 * grammar cannot take: EMBER_ERR_INVALID_ARG naming the byte offset, and the
 * state is left unchanged. EMBER_ERR_NOMEM if the cache limit is hit. */
ember_status ember_grammar_accept_bytes(ember_grammar_state *st, const char *bytes, size_t len);
/* True when the input so far is a complete sentence of the grammar. */
bool ember_grammar_can_end(const ember_grammar_state *st);
/* True after an EOG token was accepted (nothing more is allowed). */
bool ember_grammar_is_done(const ember_grammar_state *st);

/* Whether token `id` may come next (see Tokens above). O(piece length) once
 * the transitions are cached. False for an id out of range. */
bool ember_grammar_token_allowed(ember_grammar_state *st, ember_token id);
/* Advance by token `id`. Errors: EMBER_ERR_INVALID_ARG (out of range or not
 * allowed; the state is unchanged), EMBER_ERR_NOMEM. */
ember_status ember_grammar_accept(ember_grammar_state *st, ember_token id);

/* Bit set of the allowed tokens, ceil(n_vocab/32) words, bit (id & 31) of
 * word id >> 5. The pointer is owned by the cache and valid until the next
 * call on any state sharing it. Errors: EMBER_ERR_INVALID_ARG (no vocab),
 * EMBER_ERR_NOMEM. */
ember_status ember_grammar_mask(ember_grammar_state *st, const uint32_t **mask, int32_t *n_allowed);
/* The allowed token ids in increasing order, when there are at most
 * max_list of them (a sparse mask, e.g. between JSON tokens): *ids (owned by
 * the cache, valid like the mask) and *n; otherwise *ids = NULL and *n is the
 * count. A sampler can then draw from these candidates instead of masking
 * all logits. Errors: as ember_grammar_mask. */
ember_status ember_grammar_allowed_list(ember_grammar_state *st, int32_t max_list,
                                        const ember_token **ids, int32_t *n);
/* Set logits[i] = -INFINITY for every disallowed token; logits has n_vocab
 * entries (must equal the vocab's size: EMBER_ERR_INVALID_ARG otherwise). */
ember_status ember_grammar_apply(ember_grammar_state *st, float *logits, int32_t n_vocab);
/* Same on a candidate list: logits[k] = -INFINITY where ids[k] is not
 * allowed. Uses per-token checks for short lists and the mask otherwise. */
ember_status ember_grammar_apply_candidates(ember_grammar_state *st, const ember_token *ids,
                                            float *logits, size_t n);

/* Cache statistics (for benchmarks and tests). */
typedef struct ember_grammar_stats {
    size_t n_stack_nodes, n_sets, n_states, n_rows, bytes;
    size_t n_trie_nodes;   /* of the vocabulary's byte trie */
    size_t mask_hits, mask_misses;
} ember_grammar_stats;
void ember_grammar_get_stats(const ember_grammar_state *st, ember_grammar_stats *out);

#endif
