/*
 * runtime_ember.h — the engine's runtime table over include/ember.h.
 */
#ifndef EMBER_ENGINE_RUNTIME_EMBER_H
#define EMBER_ENGINE_RUNTIME_EMBER_H

#include "engine/engine.h"

/* A runtime table whose calls go to `ctx` (sequence i = slot i; the context
 * needs n_seq_max >= the engine's n_slots). n_vocab: logits row length;
 * n_embd: hidden-state row length (ember_model_n_embd). */
engine_runtime engine_runtime_ember(ember_context *ctx, int32_t n_vocab, int32_t n_embd);

#endif
