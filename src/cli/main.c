/*
 * main.c — the `ember` command: dispatches to subcommands.
 *
 * Each subcommand lives in its own file under src/cli/ and defines
 * `int cmd_NAME(int argc, char **argv)` (argv[0] is the subcommand name).
 * They are declared weak here so that the command builds while a subcommand
 * does not exist yet; one that is absent says so and exits 2.
 */
#include <stdio.h>
#include <string.h>

#include "ember.h"

#define WEAK __attribute__((weak))
int cmd_inspect(int argc, char **argv) WEAK;
int cmd_tokenize(int argc, char **argv) WEAK;
int cmd_run(int argc, char **argv) WEAK;
int cmd_chat(int argc, char **argv) WEAK;
int cmd_serve(int argc, char **argv) WEAK;
int cmd_bench(int argc, char **argv) WEAK;
int cmd_perplexity(int argc, char **argv) WEAK;
int cmd_quantize(int argc, char **argv) WEAK;

static const struct {
    const char *name;
    const char *help;
} commands[] = {
    {"serve", "OpenAI-compatible HTTP server"},
    {"run", "generate text from a prompt"},
    {"chat", "interactive chat through the model's template"},
    {"bench", "prompt-processing and generation speed (like llama-bench)"},
    {"perplexity", "perplexity of a text file (like llama-perplexity)"},
    {"inspect", "print a GGUF file's metadata and tensors"},
    {"tokenize", "print the tokens of a text"},
    {"quantize", "convert a GGUF file's tensors to another block format"},
};

static int (*lookup(const char *name))(int, char **)
{
    if (!strcmp(name, "inspect")) return cmd_inspect;
    if (!strcmp(name, "tokenize")) return cmd_tokenize;
    if (!strcmp(name, "run")) return cmd_run;
    if (!strcmp(name, "chat")) return cmd_chat;
    if (!strcmp(name, "serve")) return cmd_serve;
    if (!strcmp(name, "bench")) return cmd_bench;
    if (!strcmp(name, "perplexity")) return cmd_perplexity;
    if (!strcmp(name, "quantize")) return cmd_quantize;
    return NULL;
}

static void usage(FILE *f)
{
    fprintf(f, "ember %s — LLM inference engine and OpenAI-compatible server\n\n"
               "usage: ember COMMAND [options]   (ember COMMAND --help for its options)\n\n"
               "commands:\n", EMBER_VERSION);
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        int present = lookup(commands[i].name) != NULL;
        fprintf(f, "  %-11s %s%s\n", commands[i].name, commands[i].help,
                present ? "" : " (not built yet)");
    }
    fprintf(f, "\n  ember --help-env   the environment switches of the backends (EMBER_CUDA_*, EMBER_NO_*, ...)\n");
}

int main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--help-env")) {
        ember_print_env_switches(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("ember %s\n", EMBER_VERSION);
        return 0;
    }
    int (*fn)(int, char **) = lookup(argv[1]);
    if (!fn) {
        int known = 0;
        for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
            known |= !strcmp(commands[i].name, argv[1]);
        fprintf(stderr, known ? "ember: '%s' is not built yet\n" : "ember: unknown command '%s'\n", argv[1]);
        usage(stderr);
        return 2;
    }
    return fn(argc - 1, argv + 1);
}
