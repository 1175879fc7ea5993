/*
 * run.c — `ember run`: generate text from a prompt and stream it.
 *
 * Owns: the options of `ember run`, the prompt -> prefill -> sample -> decode
 * loop of one sequence, streaming detokenized text to stdout, and the
 * one-line timing summary on stderr. For the fidelity tests it also has a
 * batch mode (--prompt-ids-file) that runs many prompts given as token ids
 * and prints, per prompt, one JSON line with the generated ids, the top-1 to
 * top-2 logit gap of each step and the top log-probabilities of the first
 * generated position.
 * Must not: know about chat templates (that is `ember chat`) or HTTP.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli_common.h"

static void usage(FILE *f)
{
    fprintf(f,
        "usage: ember run -m FILE (-p PROMPT | -f FILE | --prompt-ids IDS) [options]\n"
        "  -m, --model FILE        GGUF model\n"
        "  -p, --prompt TEXT       prompt text\n"
        "  -f, --file FILE         read the prompt from FILE\n"
        "  -n, --n-predict N       tokens to generate (default 128; -1: until end of generation or context)\n"
        "      --temp T            temperature (default 0.8; 0 = greedy)\n"
        "      --top-k K           (default 40; 0 = off)\n"
        "      --top-p P           (default 0.95; 1 = off)\n"
        "      --min-p P           (default 0.05; 0 = off)\n"
        "      --repeat-penalty R  (default 1.0 = off)\n"
        "      --repeat-last-n N   tokens the penalties look back (default 64; -1 = all; 0 = off)\n"
        "      --presence-penalty P, --frequency-penalty P   (default 0 = off)\n"
        "      --seed S            random seed (default: from the clock; printed)\n"
        "      --ignore-eos        keep generating past end-of-generation tokens\n"
        "  -c, --ctx-size N        context length (default min(4096, trained))\n"
        "  -b, --batch-size N      prompt tokens per decode call (default 512)\n"
        "  -t, --threads N         (default: all cores)\n"
        "  -ngl, --n-gpu-layers N  0 = CPU; default -1 = all layers on the GPU when there is one\n"
        "      --device I          CUDA device index (default 0)\n"
        "for tests:\n"
        "      --prompt-ids IDS    prompt as token ids \"1,2,3\" (no tokenizer run, no BOS added)\n"
        "      --prompt-ids-file F one prompt per line as token ids; prints one JSON line per\n"
        "                          prompt: generated ids, per-step top-2 logit gap, and the\n"
        "                          first position's top --n-probs log-probs (default 20)\n");
}

typedef struct run_opts {
    const char *model, *prompt, *file, *ids, *ids_file;
    long n_predict, n_ctx, n_batch, n_threads, n_probs;
    bool ignore_eos;
    bool seed_set;
    ember_sampler_params sp;
} run_opts;

static int parse(int argc, char **argv, run_opts *o)
{
    memset(o, 0, sizeof *o);
    o->n_predict = 128;
    o->n_batch = 512;
    o->n_probs = 20;
    o->sp = ember_sampler_default_params();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        double d;
        long l;
#define VAL() do { if (!(v = cli_value(argc, argv, &i))) return 2; } while (0)
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            VAL(); o->model = v;
        } else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) {
            VAL(); o->prompt = v;
        } else if (!strcmp(a, "-f") || !strcmp(a, "--file")) {
            VAL(); o->file = v;
        } else if (!strcmp(a, "--prompt-ids")) {
            VAL(); o->ids = v;
        } else if (!strcmp(a, "--prompt-ids-file")) {
            VAL(); o->ids_file = v;
        } else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) {
            VAL(); if (!cli_int(a, v, -1, 1 << 30, &o->n_predict)) return 2;
        } else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) {
            VAL(); if (!cli_int(a, v, 1, 1 << 24, &o->n_ctx)) return 2;
        } else if (!strcmp(a, "-b") || !strcmp(a, "--batch-size")) {
            VAL(); if (!cli_int(a, v, 1, 1 << 16, &o->n_batch)) return 2;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            VAL(); if (!cli_int(a, v, 1, 1024, &o->n_threads)) return 2;
        } else if (!strcmp(a, "--n-probs")) {
            VAL(); if (!cli_int(a, v, 2, 1000, &o->n_probs)) return 2;
        } else if (!strcmp(a, "--temp")) {
            VAL(); if (!cli_float(a, v, -1e9, 1e9, &d)) return 2; o->sp.temp = (float)d;
        } else if (!strcmp(a, "--top-k")) {
            VAL(); if (!cli_int(a, v, 0, 1 << 30, &l)) return 2; o->sp.top_k = (int32_t)l;
        } else if (!strcmp(a, "--top-p")) {
            VAL(); if (!cli_float(a, v, 0, 1, &d)) return 2; o->sp.top_p = (float)d;
        } else if (!strcmp(a, "--min-p")) {
            VAL(); if (!cli_float(a, v, 0, 1, &d)) return 2; o->sp.min_p = (float)d;
        } else if (!strcmp(a, "--repeat-penalty")) {
            VAL(); if (!cli_float(a, v, 1e-6, 1e6, &d)) return 2; o->sp.repeat_penalty = (float)d;
        } else if (!strcmp(a, "--repeat-last-n")) {
            VAL(); if (!cli_int(a, v, -1, 1 << 30, &l)) return 2; o->sp.penalty_last_n = (int32_t)l;
        } else if (!strcmp(a, "--presence-penalty")) {
            VAL(); if (!cli_float(a, v, -1e6, 1e6, &d)) return 2; o->sp.presence_penalty = (float)d;
        } else if (!strcmp(a, "--frequency-penalty")) {
            VAL(); if (!cli_float(a, v, -1e6, 1e6, &d)) return 2; o->sp.frequency_penalty = (float)d;
        } else if (!strcmp(a, "--seed")) {
            VAL();
            char *end;
            unsigned long long s = strtoull(v, &end, 10);
            if (end == v || *end || v[0] == '-') {
                fprintf(stderr, "ember: --seed expects a non-negative integer, got '%s'\n", v);
                return 2;
            }
            o->sp.seed = s;
            o->seed_set = true;
        } else if (!strcmp(a, "--ignore-eos")) {
            o->ignore_eos = true;
        } else if ((l = cli_gpu_option(argc, argv, &i)) != 0) {
            if (l < 0) return 2;
        } else {
            fprintf(stderr, "ember run: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        }
#undef VAL
    }
    int n_src = !!o->prompt + !!o->file + !!o->ids + !!o->ids_file;
    if (!o->model || n_src != 1) {
        fprintf(stderr, "ember run: needs -m FILE and exactly one of -p, -f, --prompt-ids, --prompt-ids-file\n");
        usage(stderr);
        return 2;
    }
    if (o->ids_file && o->n_predict < 0) {
        fprintf(stderr, "ember run: --prompt-ids-file needs -n >= 0\n");
        return 2;
    }
    if (!o->seed_set)
        o->sp.seed = (uint64_t)time(NULL) ^ ((uint64_t)clock() << 32);
    return -1;
}

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "ember: cannot open %s\n", path);
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (n < cap)
            break;
        char *t = realloc(buf, 2 * cap + 1);
        if (!t) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = t;
        cap *= 2;
    }
    if (buf && ferror(f)) {
        free(buf);
        buf = NULL;
        fprintf(stderr, "ember: read error on %s\n", path);
    }
    fclose(f);
    if (buf) {
        buf[n] = '\0';
        *len = n;
    }
    return buf;
}

static int fail(const char *what, ember_status st)
{
    fprintf(stderr, "ember: %s: %s: %s\n", what, ember_status_name(st), ember_last_error());
    return 1;
}

/* top-1 minus top-2 of logits[n] */
static float top2_gap(const float *logits, int32_t n)
{
    float a = -INFINITY, b = -INFINITY;
    for (int32_t i = 0; i < n; i++) {
        float l = logits[i];
        if (l > a) {
            b = a;
            a = l;
        } else if (l > b) {
            b = l;
        }
    }
    return a - b;
}

/* Print the k largest log-probabilities of logits[n] as [[id, logprob], ...]. */
static void print_top_logprobs(FILE *f, const float *logits, int32_t n, int k)
{
    double max_l = -INFINITY, sum = 0.0;
    for (int32_t i = 0; i < n; i++)
        if (logits[i] > max_l) max_l = logits[i];
    for (int32_t i = 0; i < n; i++)
        sum += exp((double)logits[i] - max_l);
    double lse = max_l + log(sum);
    int32_t *top = malloc(sizeof(int32_t) * (size_t)k);
    int m = 0;
    for (int32_t i = 0; top && i < n; i++) {   /* insertion into a sorted top-k */
        if (m == k && logits[i] <= logits[top[m - 1]])
            continue;
        int j = m < k ? m++ : k - 1;
        while (j > 0 && logits[top[j - 1]] < logits[i]) {
            top[j] = top[j - 1];
            j--;
        }
        top[j] = i;
    }
    fputc('[', f);
    for (int j = 0; j < m; j++)
        fprintf(f, "%s[%d,%.6f]", j ? "," : "", top[j], (double)logits[top[j]] - lse);
    fputc(']', f);
    free(top);
}

typedef struct gen_stats {
    int32_t n_prompt, n_gen;
    double t_prompt, t_gen;
} gen_stats;

/* Run one prompt on sequence 0 (cleared first). Streams text when `detok`
 * is given; in JSON mode (json != NULL) records ids, gaps and top log-probs. */
static ember_status generate(ember_context *ctx, ember_batch *batch, const cli_model *cm, ember_sampler *smp,
                             const run_opts *o, const ember_token *prompt, int32_t n_prompt, ember_detok *detok,
                             FILE *json, gen_stats *gs)
{
    ember_status st = ember_seq_remove(ctx, 0);
    if (st != EMBER_OK)
        return st;
    ember_sampler_reset(smp);
    for (int32_t i = 0; i < n_prompt; i++)
        ember_sampler_accept(smp, prompt[i]);
    const int32_t n_vocab = ember_model_n_vocab(cm->model);
    const int32_t n_ctx = (int32_t)o->n_ctx;
    if (n_prompt < 1)
        return EMBER_OK;
    if (n_prompt >= n_ctx) {
        fprintf(stderr, "ember: prompt of %d tokens does not fit the context of %d\n", n_prompt, n_ctx);
        return EMBER_ERR_RANGE;
    }
    double t0 = cli_now();
    int32_t idx = 0;
    st = cli_decode_tokens(ctx, batch, (int32_t)o->n_batch, prompt, n_prompt, 0, 0, true, &idx);
    if (st != EMBER_OK)
        return st;
    gs->t_prompt += cli_now() - t0;
    gs->n_prompt += n_prompt;

    if (json)
        fprintf(json, "{\"n_prompt\":%d,", n_prompt);
    float *gaps = json ? malloc(sizeof(float) * (size_t)(o->n_predict > 0 ? o->n_predict : 1)) : NULL;
    ember_token *out = json ? malloc(sizeof(ember_token) * (size_t)(o->n_predict > 0 ? o->n_predict : 1)) : NULL;
    int32_t n_out = 0;
    double t1 = cli_now();
    ember_pos pos = n_prompt;
    for (long k = 0; o->n_predict < 0 || k < o->n_predict; k++) {
        const float *logits = ember_get_logits(ctx, idx);
        if (!logits) {
            st = EMBER_ERR_INTERNAL;
            fprintf(stderr, "ember: no logits for the last batch entry\n");
            break;
        }
        if (json) {
            if (k == 0) {
                fputs("\"top\":", json);
                print_top_logprobs(json, logits, n_vocab, (int)o->n_probs);
                fputc(',', json);
            }
            gaps[n_out] = top2_gap(logits, n_vocab);
        }
        ember_token t = ember_sampler_sample(smp, logits);
        ember_sampler_accept(smp, t);
        if (json)
            out[n_out] = t;
        n_out++;
        if (!o->ignore_eos && ember_vocab_is_eog(cm->vocab, t))
            break;
        if (detok) {
            const char *piece;
            size_t len;
            if (ember_detok_push(detok, t, &piece, &len) == EMBER_OK && len) {
                fwrite(piece, 1, len, stdout);
                fflush(stdout);
            }
        }
        if (pos >= n_ctx || (o->n_predict >= 0 && k + 1 == o->n_predict))
            break;
        batch->n_tokens = 1;
        batch->token[0] = t;
        batch->pos[0] = pos++;
        batch->seq_id[0] = 0;
        batch->logits[0] = 1;
        st = ember_decode(ctx, batch);
        if (st != EMBER_OK)
            break;
        idx = 0;
    }
    gs->t_gen += cli_now() - t1;
    gs->n_gen += n_out;
    if (json) {
        fputs("\"tokens\":[", json);
        for (int32_t i = 0; i < n_out; i++)
            fprintf(json, "%s%d", i ? "," : "", out[i]);
        fputs("],\"gap\":[", json);
        for (int32_t i = 0; i < n_out; i++)
            fprintf(json, "%s%.5f", i ? "," : "", (double)gaps[i]);
        fputs("]}\n", json);
        fflush(json);
    }
    free(gaps);
    free(out);
    return st;
}

int cmd_run(int argc, char **argv)
{
    run_opts o;
    int rc = parse(argc, argv, &o);
    if (rc >= 0)
        return rc;

    double t_load = cli_now();
    cli_model cm;
    ember_status st = cli_model_load(o.model, &cm);
    if (st != EMBER_OK)
        return fail(o.model, st);
    t_load = cli_now() - t_load;

    const int32_t n_vocab = ember_model_n_vocab(cm.model);
    if (!o.n_ctx) {
        int32_t tr = ember_model_n_ctx_train(cm.model);
        o.n_ctx = tr > 0 && tr < 4096 ? tr : 4096;
    }
    if (o.n_batch > o.n_ctx)
        o.n_batch = o.n_ctx;

    ember_context_params cp = ember_context_default_params();
    cp.n_ctx = (uint32_t)o.n_ctx;
    cp.n_kv_tokens = 0;
    cp.n_seq_max = 1;
    cp.n_batch = (uint32_t)o.n_batch;
    cp.n_ubatch = (uint32_t)(o.n_batch < 512 ? o.n_batch : 512);
    cp.n_threads = o.n_threads > 0 ? (int32_t)o.n_threads : cli_n_cpus();
    ember_context *ctx = NULL;
    ember_sampler *smp = NULL;
    ember_batch batch = {0};
    ember_token *prompt = NULL;
    int32_t n_prompt = 0;
    rc = 1;
    if ((st = ember_context_new(cm.model, &cp, &ctx)) != EMBER_OK) {
        fail("context", st);
        goto out;
    }
    if ((st = ember_batch_init((int32_t)o.n_batch, &batch)) != EMBER_OK) {
        fail("batch", st);
        goto out;
    }
    if ((st = ember_sampler_new(&o.sp, n_vocab, &smp)) != EMBER_OK) {
        fail("sampler", st);
        goto out;
    }

    gen_stats gs = {0};
    if (o.ids_file) {   /* batch mode for tests: one JSON line per prompt */
        size_t len;
        char *text = read_file(o.ids_file, &len);
        if (!text)
            goto out;
        char *save = NULL;
        for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
            ember_token *ids;
            int32_t n;
            if ((st = cli_parse_ids(line, n_vocab, &ids, &n)) != EMBER_OK) {
                fail(o.ids_file, st);
                free(text);
                goto out;
            }
            if (n == 0) {
                free(ids);
                continue;
            }
            st = generate(ctx, &batch, &cm, smp, &o, ids, n, NULL, stdout, &gs);
            free(ids);
            if (st != EMBER_OK) {
                fail("generate", st);
                free(text);
                goto out;
            }
        }
        free(text);
    } else {
        if (o.ids) {
            st = cli_parse_ids(o.ids, n_vocab, &prompt, &n_prompt);
        } else {
            size_t len = 0;
            char *text = o.file ? read_file(o.file, &len) : NULL;
            if (o.file && !text)
                goto out;
            const char *src = o.file ? text : o.prompt;
            size_t n_tok = 0;
            st = ember_tokenize(cm.vocab, src, o.file ? len : strlen(src), true, false, &prompt, &n_tok);
            n_prompt = (int32_t)n_tok;
            free(text);
        }
        if (st != EMBER_OK) {
            fail("prompt", st);
            goto out;
        }
        if (n_prompt == 0) {
            fprintf(stderr, "ember run: the prompt is empty\n");
            goto out;
        }
        ember_detok detok;
        ember_detok_init(&detok, cm.vocab, false);
        st = generate(ctx, &batch, &cm, smp, &o, prompt, n_prompt, &detok, NULL, &gs);
        const char *tail;
        size_t tail_len;
        if (ember_detok_flush(&detok, &tail, &tail_len) == EMBER_OK && tail_len)
            fwrite(tail, 1, tail_len, stdout);
        ember_detok_free(&detok);
        fputc('\n', stdout);
        fflush(stdout);
        if (st != EMBER_OK) {
            fail("generate", st);
            goto out;
        }
    }
    fprintf(stderr,
            "ember: load %.2f s | prompt %d tok in %.3f s (%.1f tok/s) | generated %d tok in %.3f s (%.1f tok/s) "
            "| seed %llu | peak RSS %.1f MiB\n",
            t_load, gs.n_prompt, gs.t_prompt, gs.t_prompt > 0 ? gs.n_prompt / gs.t_prompt : 0.0, gs.n_gen,
            gs.t_gen, gs.t_gen > 0 ? gs.n_gen / gs.t_gen : 0.0, (unsigned long long)o.sp.seed,
            (double)cli_peak_rss() / (1024.0 * 1024.0));
    rc = 0;
out:
    free(prompt);
    ember_sampler_free(smp);
    ember_batch_free(&batch);
    ember_context_free(ctx);
    cli_model_free(&cm);
    return rc;
}
