/*
 * cli_common.h — what the `ember` subcommands run, perplexity and bench share:
 * option parsing helpers, loading a model with its vocabulary, feeding a
 * token list through ember_decode in batches, clocks and peak memory.
 *
 * Must not: hold state between calls, print anything but to the stream it is
 * given, or know about HTTP.
 */
#ifndef EMBER_CLI_COMMON_H
#define EMBER_CLI_COMMON_H

#include <stdio.h>

#include "ember.h"
#include "tokenizer/tokenizer.h"

/* A model and its vocabulary (owned by the model). */
typedef struct cli_model {
    ember_model *model;
    const ember_vocab *vocab;
} cli_model;

/* Load `path` as a model with its vocabulary. Errors are those of
 * ember_model_load, and EMBER_ERR_FORMAT when the output layer has fewer
 * rows than the vocabulary has tokens; on failure nothing is held. */
ember_status cli_model_load(const char *path, cli_model *out);

/* GPU placement for cli_model_load (and serve): -ngl N / --n-gpu-layers N
 * (default -1: all layers on the GPU when the build has CUDA and a device is
 * present; 0: CPU; any other value also runs the whole model on the GPU, as
 * per-layer splits do not exist yet) and --device I. */
extern int32_t cli_n_gpu_layers, cli_device;
/* True when the model will run on a GPU: -ngl is not 0 (default -1, all
 * layers) and a device is there (a CUDA build with a GPU). */
bool cli_on_gpu(void);
/* If argv[*i] is -ngl/--n-gpu-layers/--device, parse its value (advancing
 * *i) and return 1; 0 if it is another option; -1 (message on stderr) on a
 * bad value. */
int cli_gpu_option(int argc, char **argv, int *i);
void cli_model_free(cli_model *m);

/* Parse a whole decimal integer / float option value; false (and a message
 * on stderr naming `opt`) if it is not one or lies outside [lo, hi]. */
bool cli_int(const char *opt, const char *s, long lo, long hi, long *out);
bool cli_float(const char *opt, const char *s, double lo, double hi, double *out);

/* The value of option argv[*i]; advances *i. NULL (message on stderr) when
 * the option is the last argument. */
const char *cli_value(int argc, char **argv, int *i);

/* Parse "1,2,3" (commas or spaces) into token ids in [0, n_vocab).
 * *out is malloc'd. Errors: EMBER_ERR_INVALID_ARG (message names the
 * offending entry), EMBER_ERR_NOMEM. */
ember_status cli_parse_ids(const char *s, int32_t n_vocab, ember_token **out, int32_t *n_out);

/* Decode tokens[0..n) of sequence `seq` at positions pos0.. in batches of
 * n_batch entries; logits are asked for the last entry only (want_last) or
 * none. After it returns, ember_get_logits(ctx, idx_last) gives the last
 * entry's logits, where *idx_last is that entry's index within the final
 * batch. Errors: those of ember_decode. */
ember_status cli_decode_tokens(ember_context *ctx, ember_batch *batch, int32_t n_batch,
                               const ember_token *tokens, int32_t n, ember_pos pos0,
                               ember_seq_id seq, bool want_last, int32_t *idx_last);

/* Monotonic clock, seconds. */
double cli_now(void);
/* Peak resident set size of this process, bytes (getrusage). */
uint64_t cli_peak_rss(void);
/* Number of online CPUs (>= 1). */
int cli_n_cpus(void);

#endif
