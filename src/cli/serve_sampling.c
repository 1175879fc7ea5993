/*
 * serve_sampling.c — server-wide sampling defaults for `ember serve` (see
 * serve_sampling.h). Ranges are the request fields' (server/openai.c), so a
 * default the server takes is one every request could send.
 */
#include "serve_sampling.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

typedef struct flag {
    const char *names[3];
    const char *field;
    bool integer;
    double lo, hi;
} flag;

static const flag flags[] = {
    {{"--temp", NULL, NULL}, "temperature", false, 0, 2},
    {{"--seed", "-s", NULL}, "seed", true, -1, 9.2e18},
    {{"-n", "--n-predict", "--predict"}, "n_predict", true, -1, 2147483647.0},
    {{"--top-k", NULL, NULL}, "top_k", true, 0, 2147483647.0},
    {{"--top-p", NULL, NULL}, "top_p", false, 0, 1},
    {{"--min-p", NULL, NULL}, "min_p", false, 0, 1},
    {{"--repeat-penalty", NULL, NULL}, "repeat_penalty", false, 1e-9, 10},
    {{"--presence-penalty", NULL, NULL}, "presence_penalty", false, -2, 2},
    {{"--frequency-penalty", NULL, NULL}, "frequency_penalty", false, -2, 2},
};

const char serve_sampling_usage[] =
    "  sampling defaults (llama-server's flags), for requests that leave the field out; shown in /props:\n"
    "      --temp T                temperature (default 0.8; 0 greedy)\n"
    "  -s, --seed N                sampling seed (default -1: a new one per request)\n"
    "  -n, --n-predict N           tokens to generate (default -1: until the end token or the context;\n"
    "                              OpenAI's /v1/completions without it: 16)\n"
    "      --top-k N               top-k (default 40; 0 off)\n"
    "      --top-p P               top-p (default 0.95; 1 off)\n"
    "      --min-p P               min-p (default 0.05; 0 off)\n"
    "      --repeat-penalty F      repetition penalty over the last 64 tokens (default 1: off)\n"
    "      --presence-penalty F    presence penalty (default 0)\n"
    "      --frequency-penalty F   frequency penalty (default 0)\n";

int serve_parse_sampling_flag(int argc, char **argv, int *i, json_t **defaults)
{
    const char *a = argv[*i];
    const flag *f = NULL;
    for (size_t k = 0; k < sizeof flags / sizeof flags[0] && !f; k++)
        for (int j = 0; j < 3 && flags[k].names[j]; j++)
            if (!strcmp(a, flags[k].names[j])) f = &flags[k];
    if (!f) return 0;
    const char *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    if (!v) {
        fprintf(stderr, "ember serve: %s needs a value\n", a);
        return -1;
    }
    (*i)++;
    char *end;
    double x = f->integer ? (double)strtoll(v, &end, 10) : strtod(v, &end);
    if (*end || end == v || !(x >= f->lo && x <= f->hi)) {
        fprintf(stderr, "ember serve: %s expects %s in [%g, %g], got '%s'\n", a, f->integer ? "an integer" : "a number",
                f->lo, f->hi, v);
        return -1;
    }
    if (!*defaults) *defaults = json_object();
    if (!*defaults) return -1;
    if (f->integer && !strcmp(f->field, "seed") && x < 0) {
        json_object_del(*defaults, "seed");   /* -1: random, as if not given */
        return 1;
    }
    json_object_set_new(*defaults, f->field, f->integer ? json_integer(strtoll(v, NULL, 10)) : json_real(x));
    return 1;
}
