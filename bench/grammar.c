/*
 * grammar.c — benchmark: cost of a grammar-constrained sampling step on
 * Gemma 3's 262,144-token vocabulary against an unconstrained one.
 *
 * The trace: a JSON-schema grammar (a tool call: name const, arguments
 * object with string/enum/integer/array fields) and one valid document,
 * tokenized by ember's Gemma tokenizer. Each step's logits are
 * grammar_trace.h's noise + target (+ a forbidden decoy on "reject" steps).
 * Two families of rows, each mode timed right after its unconstrained
 * baseline on the same logits (paired):
 * A. the engine's path (what slot_draw runs): baseline ember_sampler_sample,
 *    mode ember_sample_constrained (src/sample/constrained.h: draw, check,
 *    look further among the chain's candidates, mask only when none is
 *    allowed), for a greedy sampler and for llama.cpp's default chain
 *    (top-k 40, top-p 0.95, min-p 0.05, temp 0.8). The chain's draw is
 *    random: the grammar then advances by the trace token, the step's cost
 *    is the draw's.
 * B. bare loops shared with bench/llama/grammar_llama.c (the llama.cpp
 *    comparison): argmax over raw logits; "lazy r%" argmax, token_allowed,
 *    on rejection the best allowed token (argmax over the allowed list when
 *    the mask is sparse, else apply the mask and argmax again); "eager" the
 *    masked draw every step.
 * r%: steps carrying a forbidden decoy above the target. "cold": a fresh
 * matcher per document (empty caches: what the first request with a new
 * grammar pays); "warm": the same matcher reset (caches kept: later
 * requests with that grammar when the server keeps a template state and
 * clones it).
 * usage: grammar MODEL.gguf [OUTDIR] [REPEATS]
 * OUTDIR receives grammar.gbnf and trace.txt ("target decoy" per line, for
 * the reject-every-step pattern) so that bench/llama/grammar_llama.c runs
 * the same steps through llama.cpp's grammar sampler.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/status.h"
#include "gguf/gguf.h"
#include "grammar_trace.h"
#include "sample/constrained.h"
#include "sample/grammar.h"
#include "sample/json_schema.h"
#include "sample/sampler.h"
#include "tokenizer/tokenizer.h"

static const char *SCHEMA =
    "{\"type\": \"object\", \"properties\": {"
    "  \"name\": {\"const\": \"get_weather\"},"
    "  \"arguments\": {\"type\": \"object\", \"properties\": {"
    "    \"city\": {\"type\": \"string\"},"
    "    \"unit\": {\"enum\": [\"celsius\", \"fahrenheit\"]},"
    "    \"days\": {\"type\": \"integer\"},"
    "    \"details\": {\"type\": \"array\", \"items\": {\"type\": \"string\"}, \"maxItems\": 4}},"
    "   \"required\": [\"city\", \"unit\"], \"additionalProperties\": false}},"
    " \"required\": [\"name\", \"arguments\"], \"additionalProperties\": false}";

static const char *DOC =
    "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"San Francisco, California\", "
    "\"unit\": \"fahrenheit\", \"days\": 3, \"details\": [\"humidity\", \"wind speed\", \"chance of rain\"]}}";

static void die(const char *what)
{
    fprintf(stderr, "grammar bench: %s: %s\n", what, ember_last_error());
    exit(1);
}

typedef struct trace { ember_token *tok; int32_t *decoy; size_t n; } trace;

/* r_pct: percent of steps with a decoy (every 100/r-th step, deterministic) */
static bool has_decoy(size_t i, int r_pct)
{
    if (r_pct <= 0) return false;
    if (r_pct >= 100) return true;
    return (i * (size_t)r_pct) / 100 != ((i + 1) * (size_t)r_pct) / 100;
}

enum mode { M_GREEDY, M_TOPK, M_LAZY, M_EAGER, M_CGREEDY, M_CCHAIN };

static ember_sampler *g_greedy, *g_chain;   /* engine samplers (family A) */
static float *g_scratch;

/* Best allowed token: over the allowed list when the mask is sparse (at
 * most nv/16 tokens, e.g. between JSON tokens), else over masked logits. */
static ember_token constrained_argmax(ember_grammar_state *st, float *logits, int32_t nv)
{
    const ember_token *ids;
    int32_t n;
    if (ember_grammar_allowed_list(st, nv / 16, &ids, &n)) die("allowed_list");
    if (ids) {
        ember_token best = ids[0];
        for (int32_t k = 1; k < n; k++) if (logits[ids[k]] > logits[best]) best = ids[k];
        return best;
    }
    if (ember_grammar_apply(st, logits, nv)) die("apply");
    return gt_argmax(logits, nv);
}

/* One row: for each step, the unconstrained greedy step and the mode's
 * step run back to back on the same logits (paired, so load drift on a
 * shared machine hits both); per-step minimum over `repeats` passes, then
 * the mean over steps. *base and *cons in microseconds per step. */
static void run_row(enum mode md, int r_pct, bool cold, int repeats, ember_grammar_state *warm,
                    const ember_grammar *g, const ember_grammar_vocab *tv, const trace *t,
                    const float *noise, float *logits, int32_t nv, double *base, double *cons)
{
    double *bmin = malloc(t->n * sizeof *bmin), *cmin = malloc(t->n * sizeof *cmin);
    for (size_t i = 0; i < t->n; i++) bmin[i] = cmin[i] = 1e30;
    for (int rep = 0; rep < repeats; rep++) {
        ember_grammar_state *st = NULL;
        if (md != M_GREEDY && md != M_TOPK) {
            if (cold) { if (ember_grammar_state_new(g, tv, &st)) die("state"); }
            else { st = warm; ember_grammar_state_reset(st); }
        }
        for (size_t i = 0; i < t->n; i++) {
            int32_t decoy = has_decoy(i, r_pct) ? t->decoy[i] : -1;
            gt_step_logits(logits, noise, nv, t->tok[i], decoy);
            bool engine_path = md == M_CGREEDY || md == M_CCHAIN;
            ember_sampler *smp = md == M_CCHAIN ? g_chain : g_greedy;
            double t0 = gt_now_us();
            ember_token tb = engine_path ? ember_sampler_sample(smp, logits) : gt_argmax(logits, nv);
            double dt = gt_now_us() - t0;
            if (dt < bmin[i]) bmin[i] = dt;
            if (md != M_CCHAIN && tb != (decoy >= 0 ? decoy : t->tok[i])) { fprintf(stderr, "baseline drew %d at step %zu\n", tb, i); exit(1); }
            gt_step_logits(logits, noise, nv, t->tok[i], decoy);
            t0 = gt_now_us();
            ember_token tok = 0;
            switch (md) {
            case M_GREEDY: tok = gt_argmax(logits, nv); break;
            case M_TOPK: tok = gt_topk_sample(logits, nv, 40, 0.001); break;
            case M_LAZY:
                tok = gt_argmax(logits, nv);
                if (!ember_grammar_token_allowed(st, tok)) tok = constrained_argmax(st, logits, nv);
                if (ember_grammar_accept(st, tok)) die("accept");
                break;
            case M_EAGER:
                tok = constrained_argmax(st, logits, nv);
                if (ember_grammar_accept(st, tok)) die("accept");
                break;
            case M_CGREEDY:
            case M_CCHAIN:
                if (ember_sample_constrained(smp, st, logits, nv, g_scratch, &tok)) die("sample_constrained");
                break;
            }
            dt = gt_now_us() - t0;
            if (dt < cmin[i]) cmin[i] = dt;
            if (md == M_CCHAIN) {   /* any allowed draw; the grammar follows the trace */
                if (!ember_grammar_token_allowed(st, tok)) { fprintf(stderr, "step %zu: drew forbidden %d\n", i, tok); exit(1); }
                tok = t->tok[i];
                if (ember_grammar_accept(st, tok)) die("accept");
            } else if (md == M_CGREEDY) {
                if (ember_grammar_accept(st, tok)) die("accept");
            }
            if (md != M_GREEDY && md != M_TOPK && tok != t->tok[i]) {
                fprintf(stderr, "step %zu: drew %d, expected %d\n", i, tok, t->tok[i]);
                exit(1);
            }
        }
        if (st && cold) ember_grammar_state_free(st);
    }
    double sb = 0, sc = 0;
    for (size_t i = 0; i < t->n; i++) { sb += bmin[i]; sc += cmin[i]; }
    *base = sb / (double)t->n;
    *cons = sc / (double)t->n;
    free(bmin); free(cmin);
}

int main(int argc, char **argv)
{
    if (argc < 2) { fprintf(stderr, "usage: grammar MODEL.gguf [OUTDIR] [REPEATS]\n"); return 2; }
    const char *outdir = argc > 2 ? argv[2] : NULL;
    int repeats = argc > 3 ? atoi(argv[3]) : 7;
    if (repeats < 1) repeats = 1;

    ember_gguf *gg;
    ember_vocab *v;
    if (ember_gguf_open(argv[1], &gg)) die("open");
    if (ember_vocab_load(gg, &v)) die("vocab");
    ember_gguf_close(gg);
    double t0 = gt_now_us();
    ember_grammar_vocab *tv;
    if (ember_grammar_vocab_from_tokenizer(v, &tv)) die("grammar vocab");
    double vocab_ms = (gt_now_us() - t0) / 1e3;
    int32_t nv = ember_grammar_vocab_n_tokens(tv);

    json_t *schema = json_loads(SCHEMA, 0, NULL);
    char *gbnf;
    if (ember_json_schema_to_gbnf(schema, &gbnf)) die("schema");
    ember_grammar *g;
    t0 = gt_now_us();
    if (ember_grammar_parse(gbnf, strlen(gbnf), NULL, &g)) die("parse");
    double parse_ms = (gt_now_us() - t0) / 1e3;

    trace t;
    size_t n_ids;
    if (ember_tokenize(v, DOC, strlen(DOC), false, false, &t.tok, &n_ids)) die("tokenize");
    t.n = n_ids + 1;
    t.tok = realloc(t.tok, t.n * sizeof *t.tok);
    t.tok[n_ids] = ember_vocab_eos(v);   /* the last step draws EOS */
    t.decoy = malloc(t.n * sizeof *t.decoy);
    /* decoys: a deterministic pseudo-random NORMAL token the grammar forbids
     * at that step (control tokens differ by design: llama.cpp matches their
     * text, ember never allows them, see grammar.h) */
    ember_grammar_state *chk;
    if (ember_grammar_state_new(g, tv, &chk)) die("state");
    uint64_t r = 12345;
    for (size_t i = 0; i < t.n; i++) {
        do { r ^= r << 13; r ^= r >> 7; r ^= r << 17; t.decoy[i] = (int32_t)(r % (uint64_t)nv); }
        while (ember_grammar_token_allowed(chk, t.decoy[i]) || ember_vocab_attr(v, t.decoy[i]) != EMBER_TOKEN_NORMAL);
        if (ember_grammar_accept(chk, t.tok[i])) die("the document does not match its schema");
    }
    ember_grammar_state_free(chk);

    if (outdir) {
        char path[4096];
        snprintf(path, sizeof path, "%s/grammar.gbnf", outdir);
        FILE *f = fopen(path, "w");
        if (!f) { perror(path); return 1; }
        fputs(gbnf, f); fclose(f);
        snprintf(path, sizeof path, "%s/trace.txt", outdir);
        f = fopen(path, "w");
        if (!f) { perror(path); return 1; }
        for (size_t i = 0; i < t.n; i++) fprintf(f, "%d %d\n", t.tok[i], t.decoy[i]);
        fclose(f);
    }

    float *noise = malloc((size_t)nv * sizeof *noise), *logits = malloc((size_t)nv * sizeof *logits);
    gt_noise(noise, nv);
    ember_grammar_state *warm;
    if (ember_grammar_state_new(g, tv, &warm)) die("state");

    ember_sampler_params sp = ember_sampler_default_params();
    ember_sampler_params gp = sp;
    gp.temp = 0.0f;
    if (ember_sampler_new(&gp, nv, &g_greedy) || ember_sampler_new(&sp, nv, &g_chain)) die("sampler");
    g_scratch = malloc((size_t)nv * sizeof *g_scratch);
    struct { const char *name; enum mode md; int r; bool cold; } rows[] = {
        { "A greedy: sample_constrained, 0% rejected, warm", M_CGREEDY, 0, false },
        { "A greedy: sample_constrained, 10% rejected, warm", M_CGREEDY, 10, false },
        { "A greedy: sample_constrained, 100% rejected, warm", M_CGREEDY, 100, false },
        { "A greedy: sample_constrained, 0% rejected, cold", M_CGREEDY, 0, true },
        { "A greedy: sample_constrained, 10% rejected, cold", M_CGREEDY, 10, true },
        { "A greedy: sample_constrained, 100% rejected, cold", M_CGREEDY, 100, true },
        { "A chain: sample_constrained, 0% decoys, warm", M_CCHAIN, 0, false },
        { "A chain: sample_constrained, 10% decoys, warm", M_CCHAIN, 10, false },
        { "A chain: sample_constrained, 100% decoys, warm", M_CCHAIN, 100, false },
        { "A chain: sample_constrained, 0% decoys, cold", M_CCHAIN, 0, true },
        { "A chain: sample_constrained, 10% decoys, cold", M_CCHAIN, 10, true },
        { "A chain: sample_constrained, 100% decoys, cold", M_CCHAIN, 100, true },
        { "greedy (unconstrained)", M_GREEDY, 0, false },
        { "topk40 (unconstrained)", M_TOPK, 0, false },
        { "lazy, 0% rejected, warm", M_LAZY, 0, false },
        { "lazy, 10% rejected, warm", M_LAZY, 10, false },
        { "lazy, 100% rejected, warm", M_LAZY, 100, false },
        { "eager mask, warm", M_EAGER, 0, false },
        { "lazy, 0% rejected, cold", M_LAZY, 0, true },
        { "lazy, 10% rejected, cold", M_LAZY, 10, true },
        { "lazy, 100% rejected, cold", M_LAZY, 100, true },
        { "eager mask, cold", M_EAGER, 0, true },
    };
    size_t nr = sizeof rows / sizeof *rows;
    /* warm the warm state once per pattern */
    double bb, cc;
    run_row(M_LAZY, 100, false, 1, warm, g, tv, &t, noise, logits, nv, &bb, &cc);
    run_row(M_EAGER, 0, false, 1, warm, g, tv, &t, noise, logits, nv, &bb, &cc);
    printf("vocab %d tokens, grammar vocab build %.1f ms, schema grammar parse %.2f ms, %d rules\n",
           nv, vocab_ms, parse_ms, ember_grammar_n_rules(g));
    printf("document: %zu tokens + EOS; %d passes; per step the minimum over passes, paired with a greedy step\n\n",
           n_ids, repeats);
    printf("| mode | baseline us/step | mode us/step | mode / baseline |\n|---|---:|---:|---:|\n");
    for (size_t k = 0; k < nr; k++) {
        run_row(rows[k].md, rows[k].r, rows[k].cold, repeats, warm, g, tv, &t, noise, logits, nv, &bb, &cc);
        printf("| %s | %.1f | %.1f | %.3f |\n", rows[k].name, bb, cc, cc / bb);
    }
    /* single cold masks: fresh matcher, one mask at a given prefix */
    const char *prefixes[][2] = {
        { "inside a string (dense)", "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"San" },
        { "after '{' (sparse)", "{" },
        { "inside an integer", "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"x\", \"unit\": \"celsius\", \"days\": 1" },
    };
    printf("\n| one mask, fresh matcher | allowed tokens | cold ms | warm (cached) us |\n|---|---:|---:|---:|\n");
    for (size_t k = 0; k < 3; k++) {
        double best_cold = 1e30, best_warm = 1e30;
        int32_t na = 0;
        for (int rep = 0; rep < repeats; rep++) {
            ember_grammar_state *fs;
            if (ember_grammar_state_new(g, tv, &fs)) die("state");
            if (ember_grammar_accept_bytes(fs, prefixes[k][1], strlen(prefixes[k][1]))) die("prefix");
            const uint32_t *m;
            double a0 = gt_now_us();
            if (ember_grammar_mask(fs, &m, &na)) die("mask");
            double a1 = gt_now_us();
            if (ember_grammar_mask(fs, &m, &na)) die("mask");
            double a2 = gt_now_us();
            if (a1 - a0 < best_cold) best_cold = a1 - a0;
            if (a2 - a1 < best_warm) best_warm = a2 - a1;
            ember_grammar_state_free(fs);
        }
        printf("| %s | %d | %.2f | %.2f |\n", prefixes[k][0], na, best_cold / 1e3, best_warm);
    }
    ember_grammar_stats s;
    ember_grammar_get_stats(warm, &s);
    printf("\nwarm cache: %zu DFA states, %zu transition rows, %zu stack nodes, %.1f MiB, mask hits %zu misses %zu; vocab trie %zu nodes\n",
           s.n_states, s.n_rows, s.n_stack_nodes, (double)s.bytes / 1048576.0, s.mask_hits, s.mask_misses, s.n_trie_nodes);
    ember_grammar_state_free(warm);
    ember_sampler_free(g_greedy);
    ember_sampler_free(g_chain);
    free(g_scratch);
    free(noise); free(logits); free(t.tok); free(t.decoy); free(gbnf);
    json_decref(schema);
    ember_grammar_free(g);
    ember_grammar_vocab_free(tv);
    ember_vocab_free(v);
    return 0;
}
