/*
 * serve_sampling.h — `ember serve`'s server-wide sampling defaults, with
 * llama-server's flag names (common/arg.cpp): --temp, --seed (-s),
 * -n / --n-predict / --predict, --top-k, --top-p, --min-p, --repeat-penalty,
 * --presence-penalty, --frequency-penalty. Each becomes the request field a
 * request that leaves it out gets (server_config.sampling_defaults, applied
 * by oai_apply_defaults before a body is parsed; shown in /props).
 */
#ifndef EMBER_CLI_SERVE_SAMPLING_H
#define EMBER_CLI_SERVE_SAMPLING_H

#include <stdio.h>
#include <jansson.h>

extern const char serve_sampling_usage[];

/* argv[*i] one of the flags above: its value (argv[*i + 1], consumed) is
 * parsed and put into *defaults (created on first use) under the request
 * field's name. Returns 1 (taken), 0 (not such a flag), -1 (bad value: a
 * message on stderr names the flag and its range, as oai_parse checks it). */
int serve_parse_sampling_flag(int argc, char **argv, int *i, json_t **defaults);

#endif
