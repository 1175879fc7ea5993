/*
 * tokenizer.h — text <-> token ids for a GGUF vocabulary.
 *
 * Owns: the vocabulary read from GGUF metadata (tokenizer.ggml.*), the
 * SentencePiece (model "llama") and byte-level BPE (model "gpt2", with the
 * pre-tokenizers smollm, llama-bpe, qwen2, default) and gemma4 BPE
 * tokenizers, special-token handling, and streaming-safe detokenization.
 * Must not: know about tensors, chat templates or HTTP; allocate in the hot
 * path of token_to_piece (pieces are precomputed at load).
 *
 * Reference behaviour (the oracle of tests/golden/tokenizer/): llama.cpp's
 * llama-vocab.cpp and unicode.cpp (tokenize with add_special/parse_special,
 * token_to_piece with special=true/false). Token types (tokenizer.ggml.
 * token_type): 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused,
 * 6 byte.
 *
 * Thread safety: an ember_vocab is immutable after loading; any number of
 * threads may tokenize and detokenize with it at once. An ember_detok stream
 * belongs to one thread at a time.
 */
#ifndef EMBER_TOKENIZER_H
#define EMBER_TOKENIZER_H

#include "ember.h"
#include "gguf/gguf.h"

typedef struct ember_vocab ember_vocab;

typedef enum ember_vocab_type {
    EMBER_VOCAB_SPM = 1,    /* tokenizer.ggml.model = "llama" (SentencePiece, scores) */
    EMBER_VOCAB_BPE = 2,    /* "gpt2": byte-level BPE (GPT-2 byte-to-unicode map), merges */
    EMBER_VOCAB_GEMMA4 = 3, /* "gemma4": BPE over UTF-8 characters, U+2581 for spaces, <0xXX> fallback */
} ember_vocab_type;

/* Token attributes (bit set). CONTROL tokens (BOS, EOS, <start_of_turn>,
 * <|im_start|>, ...) are matched in text only when the caller asks
 * (parse_special) and are rendered by token_to_piece only on request.
 * USER_DEFINED tokens are always matched in text (as llama.cpp and Hugging
 * Face tokenizers do: e.g. Gemma 3's "\n\n" or "<start_of_image>"). EOG marks
 * the tokens that end a generation (EOS, EOT and the end-of-turn markers). */
enum {
    EMBER_TOKEN_NORMAL       = 1u << 0,
    EMBER_TOKEN_UNKNOWN      = 1u << 1,
    EMBER_TOKEN_CONTROL      = 1u << 2,
    EMBER_TOKEN_USER_DEFINED = 1u << 3,
    EMBER_TOKEN_UNUSED       = 1u << 4,
    EMBER_TOKEN_BYTE         = 1u << 5,
    EMBER_TOKEN_EOG          = 1u << 6,
};

/* Build the vocabulary from GGUF metadata alone: tokenizer.ggml.model, .pre,
 * .tokens, .scores, .token_type, .merges, .bos_token_id, .eos_token_id,
 * .eot_token_id, .unknown_token_id, .padding_token_id, .add_bos_token,
 * .add_eos_token, .add_space_prefix. `g` may be closed after this returns
 * (everything needed is copied). Errors: EMBER_ERR_NOT_FOUND (tokens or
 * model key absent), EMBER_ERR_FORMAT (wrong key type, array lengths that
 * differ, a merge without a space, an id out of range; the message names the
 * key and index), EMBER_ERR_UNSUPPORTED (unknown model or pre-tokenizer),
 * EMBER_ERR_NOMEM. */
ember_status ember_vocab_load(const ember_gguf *g, ember_vocab **out);
void ember_vocab_free(ember_vocab *v);

ember_vocab_type ember_vocab_get_type(const ember_vocab *v);
/* The pre-tokenizer name as stored (tokenizer.ggml.pre), "" for SPM. */
const char *ember_vocab_pre(const ember_vocab *v);
int32_t ember_vocab_n_tokens(const ember_vocab *v);

/* Special ids; -1 when the model has none. */
ember_token ember_vocab_bos(const ember_vocab *v);
ember_token ember_vocab_eos(const ember_vocab *v);
/* End of turn: tokenizer.ggml.eot_token_id, else the first of <end_of_turn>,
 * <|im_end|>, <|eot_id|>, <|end|>, <|endoftext|> present in the vocab. */
ember_token ember_vocab_eot(const ember_vocab *v);
ember_token ember_vocab_pad(const ember_vocab *v);
/* Fill-in-the-middle tokens (llama.cpp src/llama-vocab.cpp load()): the
 * GGUF's tokenizer.ggml.fim_{pre,suf,mid,rep,sep}_token_id (the older
 * tokenizer.ggml.{prefix,suffix,middle}_token_id win where present), else
 * the first token named as llama.cpp looks for them (<|fim_prefix|>,
 * <fim-prefix>, <fim_prefix>, <PRE>, ...; <|fim_repo|>, <|repo_name|>,
 * <fim-repo>, <REPO>, <reponame>; <|file_sep|>), made CONTROL. -1: none. */
typedef enum ember_fim_kind {
    EMBER_FIM_PRE = 0, EMBER_FIM_SUF, EMBER_FIM_MID, EMBER_FIM_REP, EMBER_FIM_SEP, EMBER_FIM_COUNT
} ember_fim_kind;
ember_token ember_vocab_fim(const ember_vocab *v, ember_fim_kind k);
ember_token ember_vocab_unk(const ember_vocab *v);
/* Whether tokenize(add_special=true) prepends BOS / appends EOS. */
bool ember_vocab_add_bos(const ember_vocab *v);
bool ember_vocab_add_eos(const ember_vocab *v);

/* EMBER_TOKEN_* bits of `id`; 0 for an id out of range. */
uint32_t ember_vocab_attr(const ember_vocab *v, ember_token id);
bool ember_vocab_is_eog(const ember_vocab *v, ember_token id);
bool ember_vocab_is_control(const ember_vocab *v, ember_token id);
/* Raw vocabulary text of `id` as stored in the GGUF (e.g. "▁the", "Ġthe",
 * "<0x0A>", "<start_of_turn>"); NULL if out of range. */
const char *ember_vocab_text(const ember_vocab *v, ember_token id, size_t *len);
/* Id of the token whose raw text is exactly `text`, or -1. */
ember_token ember_vocab_find(const ember_vocab *v, const char *text, size_t len);

/* Tokenize `len` bytes of `text` (need not be NUL-terminated, may be empty).
 * add_special: prepend BOS / append EOS as the model's add_bos/add_eos say.
 * parse_special: recognise CONTROL tokens written as text (for rendered chat
 * templates only; user content must pass false so that "<start_of_turn>" or
 * "<|im_start|>" typed by a user stays plain text; a template that embeds
 * user content should go through ember_tokenize_ex with its untrusted mask).
 * Invalid UTF-8: SPM maps each byte of an incomplete or invalid sequence to
 * its <0xXX> byte token (as llama.cpp); BPE (gpt2, gemma4) first replaces
 * each byte that is not part of a well-formed sequence (Unicode Table 3-7)
 * by U+FFFD (llama.cpp does so for most, see tests/golden/tokenizer/
 * README.md). Never fails on content.
 * Output: *out_ids (malloc'd, never NULL on success, caller frees with
 * free()) holds *n_out ids.
 * Errors: EMBER_ERR_INVALID_ARG, EMBER_ERR_RANGE (text of 1 GiB or more),
 * EMBER_ERR_NOMEM. */
ember_status ember_tokenize(const ember_vocab *v, const char *text, size_t len,
                            bool add_special, bool parse_special,
                            ember_token **out_ids, size_t *n_out);

/* As ember_tokenize, for a rendered chat template that embeds user content:
 * untrusted[i] != 0 marks byte i of `text` as coming from a user (or tool)
 * rather than from the template. With parse_special, a CONTROL/UNKNOWN token
 * is recognised only where none of its bytes is untrusted, so the template's
 * own <start_of_turn> / <|im_start|> become control tokens while the same
 * text typed by a user stays plain text; plain text is still tokenized over
 * whole fragments (same ids as tokenizing the template in one piece).
 * `untrusted` holds `len` bytes, or is NULL (= ember_tokenize). Same errors. */
ember_status ember_tokenize_ex(const ember_vocab *v, const char *text, size_t len,
                               bool add_special, bool parse_special, const uint8_t *untrusted,
                               ember_token **out_ids, size_t *n_out);

/* The bytes that token `id` stands for, as llama.cpp's token_to_piece:
 * NORMAL tokens with U+2581 turned into spaces (SPM, gemma4) or the GPT-2
 * byte map undone (BPE); BYTE tokens as their single byte; USER_DEFINED as
 * their text; CONTROL and UNKNOWN as their text when `special`, else empty.
 * A piece may be an incomplete UTF-8 sequence (byte tokens, split BPE
 * characters). The returned pointer is owned by the vocab (valid until
 * ember_vocab_free); NULL with *len = 0 for an id out of range. */
const char *ember_token_to_piece(const ember_vocab *v, ember_token id, bool special, size_t *len);

/* Concatenate the pieces of ids[0..n) into a malloc'd NUL-terminated string
 * (*out, *out_len). No clean-up of spaces: for a vocab with add_space_prefix
 * (not Gemma 3) the space that tokenize put in front comes back. Errors: EMBER_ERR_INVALID_ARG (an id out of range),
 * EMBER_ERR_NOMEM. */
ember_status ember_detokenize(const ember_vocab *v, const ember_token *ids, size_t n,
                              bool special, char **out, size_t *out_len);

/* Streaming detokenizer. Feed ids one at a time; each call returns the bytes
 * that are now safe to emit: a piece that ends inside a UTF-8 sequence is
 * held back until the sequence completes, so a stream of valid UTF-8 never
 * shows U+FFFD mid-way. Bytes that can never form a valid sequence (a stray
 * continuation byte, a lead byte followed by a non-continuation) are emitted
 * as U+FFFD (EF BF BD), one per invalid byte, so the output is always valid
 * UTF-8. ember_detok_flush emits what is still held (an incomplete tail
 * becomes U+FFFD per byte) and resets the state. */
typedef struct ember_detok {
    const ember_vocab *vocab;
    bool special;          /* render CONTROL tokens as text */
    uint8_t pending[4];    /* bytes of an incomplete UTF-8 sequence */
    uint8_t n_pending;
    char *buf;             /* output scratch, owned */
    size_t cap;
} ember_detok;

void ember_detok_init(ember_detok *d, const ember_vocab *v, bool special);
void ember_detok_free(ember_detok *d);
/* Feed one token. *out (owned by d, valid until the next call) receives
 * *out_len bytes of complete UTF-8 (possibly 0). Errors: EMBER_ERR_INVALID_ARG
 * (id out of range), EMBER_ERR_NOMEM. */
ember_status ember_detok_push(ember_detok *d, ember_token id, const char **out, size_t *out_len);
/* Emit held bytes (each as U+FFFD) and reset. Same output contract. */
ember_status ember_detok_flush(ember_detok *d, const char **out, size_t *out_len);

#endif
