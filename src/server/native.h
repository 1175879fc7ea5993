/*
 * native.h — llama.cpp's native completion API (POST /completion and
 * /completions without /v1, as llama-server routes them) as an adapter over
 * the completion pipeline: request JSON -> one common request (oai_req) per
 * prompt and per completion (n), the pipeline's output -> llama-server's
 * result objects and its native SSE stream.
 *
 * Field names, types and shapes are llama-server's (llama.cpp
 * tools/server/server-schema.cpp make_llama_cmpl_schema for the request;
 * server-task.cpp server_task_result_cmpl_final::to_json_non_oaicompat,
 * ..._partial::to_json_non_oaicompat and completion_token_output::
 * probs_vector_to_json for the answers; server-common.cpp
 * tokenize_input_prompts / tokenize_mixed for the prompt shapes and
 * server_slot_stats::to_json for timings):
 *
 *  - prompt: a string; an array of token ids; a mixed array of strings and
 *    ids (a string first gets the model's BOS, later ones none); an object
 *    {"prompt_string": ...}; or an array of these (a batch: one result per
 *    prompt, the answer is then an array; a batch of one is one object);
 *  - n_predict (aliases max_tokens, max_completion_tokens; default -1: until
 *    end of generation or the slot's context), n_probs (alias logprobs),
 *    return_tokens, cache_prompt, id_slot, n (n_cmpl: completions per prompt,
 *    seeds seed + 1, seed + 2, ... for the extra ones, as llama-server's
 *    child tasks), stop, logit_bias as an object {"id": bias} or a list
 *    [[id, bias], ["text", bias], ...] (false bans; a text's tokens each get
 *    the bias), and the sampling fields of oai_parse;
 *  - the answer: index, content, tokens, id_slot, stop, model,
 *    tokens_predicted, tokens_evaluated, generation_settings, prompt,
 *    has_new_line, truncated, stop_type ("eos" / "word" / "limit" / "none"),
 *    stopping_word, tokens_cached, timings (with draft_n and
 *    draft_n_accepted when speculation drafted), and completion_probabilities
 *    with n_probs > 0 ({id, token, bytes, logprob, top_logprobs: [{id,
 *    token, bytes, logprob}]}: log-probabilities of the raw logits; with
 *    post_sampling_probs {id, token, bytes, prob, top_probs: [{..., prob}]}:
 *    probabilities after the sampler chain, candidates of p 0 left out);
 *  - a stream: "data: {...}\n\n" events with index, content, tokens, stop
 *    false, id_slot, tokens_predicted, tokens_evaluated (and
 *    completion_probabilities), then the final object above with content ""
 *    and tokens [] (they were streamed); no "[DONE]". The results of a batch
 *    are streamed one after the other, each with its index.
 *
 * Not supported, a 400 naming the field: n_probs above
 * ENGINE_MAX_TOP_LOGPROBS. id_slot runs the request in that slot (it waits
 * while the slot is busy, as llama-server defers it).
 *
 * Must not: touch sockets or HTTP (http.c routes and writes).
 */
#ifndef EMBER_SERVER_NATIVE_H
#define EMBER_SERVER_NATIVE_H

#include <stdbool.h>
#include <jansson.h>

#include "server/completion.h"
#include "server/openai.h"

typedef struct native_run native_run;

/* Parse and validate a native body (a JSON object) and tokenize its
 * prompts: one common request per prompt and per completion. NULL with
 * *err: 400 (a field missing, of the wrong type or out of range, naming
 * it), 500 (tokenizer, memory). */
native_run *native_prepare(const completion_ctx *ctx, json_t *body, oai_error *err);

/* POST /infill (llama-server's, server-context.cpp post_infill): the body
 * of native_prepare, with input_prefix and input_suffix (required: a string
 * or a mixed array), input_extra (optional [{"filename", "text"}]) and
 * prompt (optional string: the start of the middle), laid out as a FIM
 * prompt with the model's tokens (tokenizer/tokenizer.h ember_vocab_fim;
 * the layout: native.c infill_tokens). NULL with *err: 501
 * not_supported_error when the model has no FIM prefix, suffix or middle
 * token (llama-server's message), else as native_prepare. */
native_run *native_prepare_infill(const completion_ctx *ctx, json_t *body, oai_error *err);

/* Submit every request (completion_start). False with *err (as
 * completion_start; those already started are cancelled by native_free). */
bool native_start(native_run *nr, oai_error *err);

bool native_stream(const native_run *nr);          /* "stream": true */
int32_t native_count(const native_run *nr);        /* requests */
engine_req *native_engine_req(native_run *nr, int32_t i);   /* after native_start */

/* Wait for every request and build the answer: one result object, or an
 * array for a batch (new reference). NULL with *err when a request failed
 * (500) or was cancelled (503; *cancelled set: the client may be gone). */
json_t *native_whole(native_run *nr, bool *cancelled, oai_error *err);

/* A stream's next events, handed to emit(ud, data) (data stolen) as SSE
 * data lines. Blocks for news of the current request. Returns true when the
 * stream is over; *cancelled is set when a request was cancelled (the client
 * may be gone: an error event was emitted). */
bool native_stream_next(native_run *nr, void (*emit)(void *ud, json_t *data), void *ud, bool *cancelled);

/* llama-server's error object {"error": {"code": HTTP status, "message",
 * "type"}} (server-common.cpp format_error_response; n_prompt_tokens and
 * n_ctx with exceed_context_size_error). New reference. */
json_t *native_error_json(const oai_error *err);

void native_free(native_run *nr);

#endif
