/*
 * slots.h — llama-server's slot actions, POST /slots/{id}?action=save |
 * restore | erase with {"filename": NAME} (llama.cpp tools/server/
 * server-context.cpp post_slots and handle_slots_*; the answers are
 * server-task.cpp server_task_result_slot_save_load / _slot_erase):
 *   save    {"id_slot", "filename", "n_saved", "n_written", "timings": {"save_ms"}}
 *   restore {"id_slot", "filename", "n_restored", "n_read", "timings": {"restore_ms"}}
 *   erase   {"id_slot", "n_erased"}
 * Files live in --slot-save-path DIR. Unlike llama-server's (the KV cells
 * themselves), an ember slot file holds the slot's tokens: "EMBERSLT",
 * then little-endian uint32 version (1), n_vocab, n_tokens and the int32
 * ids; a restore recomputes their KV in that slot (a request of n_predict 0
 * pinned to it), so it costs a prefill and needs the same vocabulary (the
 * same model for the same cache). A slot that is processing is waited for,
 * as llama-server defers the action.
 *
 * Errors (llama-server's shape, native.h native_error_json): 501
 * not_supported_error without --slot-save-path; 400 "Invalid slot ID",
 * "Invalid action", "Invalid filename" (empty, over 255 bytes, or other than
 * [A-Za-z0-9._-] with no leading dot: stricter than llama-server's
 * fs_validate_filename), a file that is missing or not a slot file of this
 * vocabulary, or tokens that do not fit the slot; 500 when the file cannot
 * be written.
 *
 * Must not: touch sockets or HTTP.
 */
#ifndef EMBER_SERVER_SLOTS_H
#define EMBER_SERVER_SLOTS_H

#include <jansson.h>

#include "server/completion.h"
#include "server/openai.h"

/* id_str: the {id} of the path; action: the query's, or NULL; body: the
 * parsed JSON object, or NULL (erase needs none). New reference, or NULL
 * with *err. */
json_t *slots_action(const completion_ctx *ctx, const char *id_str, const char *action, json_t *body, oai_error *err);

#endif
