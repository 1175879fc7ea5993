/*
 * embeddings.h — POST /v1/embeddings (OpenAI's shape) and llama-server's
 * native POST /embeddings and /embedding: request JSON -> token prompts ->
 * one engine embedding request each (engine_req_params.embd, batched with
 * every other request) -> the pooled, normalized vectors as that API's JSON.
 *
 * Behaviour follows llama-server (tools/server/server-context.cpp,
 * handle_embeddings_impl and send_embedding, llama-cpp-python 0.3.36's
 * llama.cpp): refused with 501 unless the server runs with --embedding; the
 * OpenAI route refuses pooling none; "input" (or the native "content") is a
 * string, a token array, a list of strings or token arrays, or one array of
 * strings and tokens mixed (tokenize_mixed: BOS only before a leading
 * string); prompts are tokenized with add_special and parse_special;
 * vectors of pooled embeddings are normalized per "embd_normalize"
 * (common_embd_normalize: -1 none, 0 max-abs to the int16 range, 1 taxicab,
 * 2 Euclidean, the default, p > 2 the p-norm); per-token vectors (pooling
 * none) are not. Past llama-server: "dimensions" is refused (400: the
 * vectors are the model's n_embd); a prompt longer than a mean/cls pooling
 * ubatch is not refused (the engine pools over prefill chunks), only one of
 * n_ctx tokens or more (400, exceed_context_size_error as a completion).
 *
 * Must not: touch sockets or HTTP (http.c sends what this returns).
 */
#ifndef EMBER_SERVER_EMBEDDINGS_H
#define EMBER_SERVER_EMBEDDINGS_H

#include <stdbool.h>
#include <jansson.h>

#include "server/completion.h"
#include "server/openai.h"

/* Answer one embeddings request. body: the parsed JSON object (not
 * consumed); oai: the OpenAI route (/v1/embeddings) rather than the native
 * ones. Returns the answer (new reference): OpenAI's {"object": "list",
 * "data": [{"object": "embedding", "index", "embedding": [n_embd floats] or
 * base64 of the little-endian float32 bytes}], "model", "usage":
 * {"prompt_tokens", "total_tokens"}}, or llama-server's native
 * [{"index", "embedding": [[n_embd floats]] (one row, or one per token with
 * pooling none)}]. NULL with *err: 501 (not started with --embedding), 400
 * (bad fields, empty input, a token outside the vocabulary, pooling none on
 * the OpenAI route, too long for n_ctx), 503 (queue full, shutting down),
 * 500 (tokenizer, model, memory). Blocks until every prompt is embedded. */
json_t *embeddings_answer(const completion_ctx *ctx, json_t *body, bool oai, oai_error *err);

/* Normalize in[n] into out[n] as llama.cpp's common_embd_normalize
 * (common/common.cpp) with mode `norm` (see above); a zero vector stays zero. */
void embeddings_normalize(const float *in, float *out, int32_t n, int32_t norm);

#endif
