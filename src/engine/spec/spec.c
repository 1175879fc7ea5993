/*
 * spec.c — speculation state shared by all proposers: parameters, per-slot
 * adaptive draft length, counters, and the general acceptance rule (see
 * spec.h for the sources).
 *
 * Owns: draft limits and statistics. Must not: decode, sample or touch slots.
 *
 * Adaptive length (per slot): the slot's per-token acceptance alpha is
 * estimated from decayed counts of accepted and rejected draft tokens (prior
 * 3 : 1); the draft length maximizes expected emitted tokens per unit of
 * step cost (spec_best_length), so drafts that keep failing stop costing
 * verification rows, and copying phases draft long. row_cost (default 0.35)
 * is the extra cost of a verified row relative to a 1-token step, as
 * measured on the CPU backend with SmolLM2-135M (bench/results/spec-cpu.md);
 * it is lower on a GPU; with row_cost_auto (ember serve's default) the
 * engine's own step times replace it (spec_engine_step_time). A proposer that runs a model (draft, layerskip) also
 * costs time per drafted token: its measured time (device time where it
 * reports one, spec_proposer.device_seconds, else the call's process CPU
 * time) over the measured 1-row target step is added to row_cost, so a layer-skip draft that is rarely
 * accepted stops drafting instead of slowing decoding down.
 */
#include "engine/spec/spec.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/status.h"

#define SPEC_MULTI_MARGIN 0.15   /* expected gain a multi-slot step must promise to draft */

spec_params spec_default_params(void)
{
    return (spec_params){.type = SPEC_NONE, .n_max = 16, .n_min = 0, .p_min = 0.75f, .adaptive = true,
                         .row_cost = 0.35f, .ngram_min = 2, .ngram_max = 4, .force_accept = -1.0f};
}

static const char *const type_names[] = {"none", "ngram", "draft", "layerskip", "draft-dflash", "draft-mtp"};
#define N_TYPES (int)(sizeof type_names / sizeof type_names[0])

bool spec_parse_type(const char *s, spec_type *out)
{
    for (int i = 0; i < N_TYPES; i++)
        if (!strcmp(s, type_names[i])) { *out = (spec_type)i; return true; }
    return false;
}

const char *spec_type_name(spec_type t) { return (int)t >= 0 && (int)t < N_TYPES ? type_names[t] : "?"; }

ember_status spec_engine_new(const spec_params *p, spec_proposer prop, int32_t n_slots, spec_engine **out)
{
    *out = NULL;
    const char *bad = NULL;
    if (p->n_max < 1 || p->n_max > SPEC_MAX_DRAFT) bad = "--spec-draft-n-max must be in [1, 32]";
    else if (p->n_min < 0 || p->n_min > p->n_max) bad = "--spec-draft-n-min must be in [0, --spec-draft-n-max]";
    else if (!(p->p_min >= 0 && p->p_min <= 1)) bad = "--spec-draft-p-min must be in [0, 1]";
    else if (p->adaptive && !(p->row_cost > 0)) bad = "--spec-row-cost must be > 0";
    else if (n_slots < 1) bad = "n_slots must be >= 1";
    else if (p->force_accept >= 0 && !(p->force_accept <= (float)SPEC_MAX_DRAFT))
        bad = "--spec-force-accept must be in [0, 32]";
    if (bad) {
        if (prop.free) prop.free(prop.self);
        return ember_error(EMBER_ERR_INVALID_ARG, "speculation: %s (n_max %d, n_min %d, p_min %g)", bad, p->n_max,
                           p->n_min, (double)p->p_min);
    }
    spec_engine *s = calloc(1, sizeof *s);
    double *acc = calloc((size_t)n_slots * 5, sizeof *acc);
    uint8_t *last_long = calloc((size_t)n_slots, 1);
    int32_t *idle = calloc((size_t)n_slots, sizeof *idle);
    double *t_base = calloc((size_t)n_slots + 1, sizeof *t_base);
    double *rc_est = calloc((size_t)n_slots + 1, sizeof *rc_est);
    int32_t *n_rc = calloc((size_t)n_slots + 1, sizeof *n_rc);
    if (!s || !acc || !idle || !t_base || !rc_est || !n_rc || !last_long) {
        free(s);
        free(last_long);
        free(acc);
        free(idle);
        free(t_base);
        free(rc_est);
        free(n_rc);
        if (prop.free) prop.free(prop.self);
        return ember_error(EMBER_ERR_NOMEM, "speculation: %d slots", n_slots);
    }
    s->p = *p;
    s->prop = prop;
    s->n_slots = n_slots;
    s->acc_a = acc;
    s->acc_r = acc + n_slots;
    s->lacc_a = acc + 2 * n_slots;
    s->lacc_r = acc + 3 * n_slots;
    s->force_frac = acc + 4 * n_slots;
    s->last_long = last_long;
    s->idle = idle;
    s->t_base = t_base;
    s->rc_est = rc_est;
    s->n_rc = n_rc;
    s->base = 1;
    for (int32_t i = 0; i < n_slots; i++) spec_engine_slot_reset(s, i);
    *out = s;
    return EMBER_OK;
}

void spec_engine_free(spec_engine *s)
{
    if (!s) return;
    if (s->prop.free) s->prop.free(s->prop.self);
    free(s->acc_a);
    free(s->last_long);
    free(s->idle);
    free(s->t_base);
    free(s->rc_est);
    free(s->n_rc);
    free(s);
}

void spec_engine_describe(const spec_engine *s, char *buf, size_t cap)
{
    char extra[256] = "";
    if (s->prop.describe) s->prop.describe(s->prop.self, extra, sizeof extra);
    char forced[96] = "";
    if (s->p.force_accept >= 0)
        snprintf(forced, sizeof forced, "; FORCED acceptance %.2f a step (benchmark: output is not the model's)",
                 (double)s->p.force_accept);
    snprintf(buf, cap, "speculative decoding: %s (%s), draft n_max %d, n_min %d, p_min %.2f, adaptive %s (row cost %.2f%s%s)%s",
             spec_type_name(s->p.type), extra, s->p.n_max, s->p.n_min, (double)s->p.p_min,
             s->p.adaptive ? "on" : "off", (double)s->p.row_cost, s->p.row_cost_auto ? " until measured" : "",
             s->prop.costly ? " + measured draft cost" : "", forced);
}

int32_t spec_best_length(double alpha, float row_cost, int32_t n_max)
{
    int32_t best = 0;
    double best_v = 1.0, pw = alpha;   /* k = 0: one token per unit cost */
    for (int32_t k = 1; k <= n_max; k++) {
        pw *= alpha;                    /* alpha^(k+1) */
        double v = (1.0 - pw) / (1.0 - alpha) / (1.0 + row_cost * k);
        if (v > best_v * 1.0001) { best_v = v; best = k; }
    }
    return best;
}

/* process CPU time (as the scheduler's step times, spec_engine_step_time) */
static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Cost of drafting one token relative to a 1-row target step (costly
 * proposers only; 0 until both times are measured). */
static double draft_cost(const spec_engine *s)
{
    if (!s->prop.costly || s->t_draft <= 0 || s->t_step <= 0) return 0;
    double c = s->t_draft / s->t_step;
    return c > 4 ? 4 : c;
}

double spec_engine_row_cost(const spec_engine *s)
{
    if (!s->p.row_cost_auto) return s->p.row_cost;
    const int32_t b = s->base;
    if (s->n_rc[b] >= 8) return s->rc_est[b] < 0.02 ? 0.02 : s->rc_est[b];
    double prior = (double)s->p.row_cost * b;
    return prior > 1.5 ? (s->p.row_cost > 1.5 ? s->p.row_cost : 1.5) : prior;
}

void spec_engine_step_time(spec_engine *s, double dt, int32_t n_rows, int32_t n_draft_rows)
{
    if (!s || n_rows < 1 || !(dt > 0)) return;
    const int32_t base = n_rows - n_draft_rows;
    if (base < 1 || base > s->n_slots) return;
    s->base = base;
    if (n_draft_rows == 0) {
        s->t_base[base] = s->t_base[base] > 0 ? 0.9 * s->t_base[base] + 0.1 * dt : dt;
    } else if (s->t_base[base] > 0) {
        double r = (dt / s->t_base[base] - 1.0) / n_draft_rows * base;
        if (r < 0) r = 0;
        if (r > 4) r = 4;
        s->rc_est[base] = s->n_rc[base] > 0 ? 0.95 * s->rc_est[base] + 0.05 * r : r;
        s->n_rc[base]++;
    }
    const double rc1 = s->p.row_cost_auto && s->n_rc[1] >= 8 ? s->rc_est[1] : s->p.row_cost;
    double t1 = dt / (1.0 + rc1 * (n_rows - 1));
    s->t_step = s->t_step > 0 ? 0.9 * s->t_step + 0.1 * t1 : t1;
}

/* adaptive length for acceptance counts a (accepted) / r (rejection events) */
static int32_t adaptive_n(const spec_engine *s, double a, double r, double dc)
{
    double alpha = a / (a + r);
    if (alpha > 0.99) alpha = 0.99;
    const double rc = spec_engine_row_cost(s) + dc;
    int32_t n = spec_best_length(alpha, (float)rc, s->p.n_max);
    /* several slots in the batch: a CPU step is then compute-bound and a
     * draft row costs nearly a slot's share, so the gain is small at best
     * while the measured row cost is noisy (wall time on a shared machine):
     * draft only for an expected gain of SPEC_MULTI_MARGIN or more */
    if (n > 0 && s->base > 1) {
        const double v = (1.0 - pow(alpha, n + 1)) / (1.0 - alpha) / (1.0 + rc * n);
        if (v < 1.0 + SPEC_MULTI_MARGIN) n = 0;
    }
    return n > 0 && n < s->p.n_min ? 0 : n;
}

void spec_engine_prefetch(spec_engine *s, const spec_input *in, int32_t n)
{
    if (!s->prop.prefetch || n < 2 || (s->p.adaptive && s->prop.match_len)) return;
    spec_input keep[64];
    int32_t m = 0;
    const double dc = s->p.adaptive ? draft_cost(s) : 0;
    for (int32_t j = 0; j < n && m < (int32_t)(sizeof keep / sizeof keep[0]); j++) {
        const int32_t i = in[j].slot;
        if (i < 0 || i >= s->n_slots) continue;
        const int32_t len = s->p.adaptive ? adaptive_n(s, s->acc_a[i], s->acc_r[i], dc) : s->p.n_max;
        if (len > 0 && len >= s->p.n_min) keep[m++] = in[j];
    }
    if (m >= 2) s->prop.prefetch(s->prop.self, keep, m);
}

int32_t spec_engine_propose(spec_engine *s, const spec_input *in, int32_t limit, ember_token *draft)
{
    if (in->slot < 0 || in->slot >= s->n_slots) return 0;
    const int32_t i = in->slot;
    int32_t n = s->p.n_max;
    double dc = 0;
    if (s->p.adaptive && s->prop.match_len && limit > 0) {
        /* match-aware: draft as far as allowed, then keep the adaptive length
         * of the match's class (a copied span drafts long, a chance repeat
         * in free text little or nothing) */
        if (n > limit) n = limit;
        int32_t k = s->prop.propose(s->prop.self, in, n, s->p.p_min, draft, NULL);
        if (k <= 0 || k > n) return 0;
        const bool lng = s->prop.match_len(s->prop.self) >= SPEC_LONG_MATCH;
        int32_t m = lng ? adaptive_n(s, s->lacc_a[i], s->lacc_r[i], 0) : adaptive_n(s, s->acc_a[i], s->acc_r[i], 0);
        if (m == 0 && ++s->idle[i] >= 8) m = s->p.n_min > 1 ? s->p.n_min : 1;   /* probe */
        if (k > m) k = m;
        if (k <= 0 || k < s->p.n_min) return 0;
        s->last_long[i] = lng;
        return k;
    }
    if (s->p.adaptive) {
        dc = draft_cost(s);
        n = adaptive_n(s, s->acc_a[i], s->acc_r[i], dc);
        /* probe: every 8th idle step, stretched by the draft's own cost so
         * probing a model proposer that keeps failing costs ~2% of steps */
        if (n == 0 && ++s->idle[i] >= (int32_t)(8.0 * (1.0 + 4.0 * dc))) n = s->p.n_min > 1 ? s->p.n_min : 1;
    }
    if (n > limit) n = limit;
    if (n <= 0 || n < s->p.n_min) {
        /* no draft this step; a proposer reading hidden states still gets its rows */
        if (in->n_hidden_rows > 0) s->prop.propose(s->prop.self, in, 0, s->p.p_min, draft, NULL);
        return 0;
    }
    double t0 = s->prop.costly ? now_s() : 0;
    int32_t k = s->prop.propose(s->prop.self, in, n, s->p.p_min, draft, NULL);
    if (k < 0 || k > n) k = 0;
    if (s->prop.costly) {   /* per drafted token (a draft that stopped at once counts as one) */
        /* on a GPU, the draft's device time (the host's CPU time would count launches and waits) */
        const double dev = s->prop.device_seconds ? s->prop.device_seconds(s->prop.self) : -1.0;
        double t = (dev >= 0 ? dev : now_s() - t0) / (k > 0 ? k : 1);
        s->t_draft = s->t_draft > 0 ? 0.9 * s->t_draft + 0.1 * t : t;
    }
    if (k < s->p.n_min) return 0;
    s->last_long[i] = 0;
    return k;
}

void spec_engine_result(spec_engine *s, int32_t slot, int32_t n_drafted, int32_t n_accepted)
{
    if (n_drafted <= 0 || slot < 0 || slot >= s->n_slots) return;
    if (n_accepted > n_drafted) n_accepted = n_drafted;
    s->st.n_drafts++;
    s->st.n_drafted += (uint64_t)n_drafted;
    s->st.n_accepted += (uint64_t)n_accepted;
    for (int32_t i = 0; i < n_drafted && i < SPEC_MAX_DRAFT; i++) {
        s->st.drafted_at[i]++;
        if (i < n_accepted) s->st.accepted_at[i]++;
    }
    double *a = s->last_long[slot] ? s->lacc_a : s->acc_a, *r = s->last_long[slot] ? s->lacc_r : s->acc_r;
    a[slot] = 0.8 * a[slot] + n_accepted;
    r[slot] = 0.8 * r[slot] + (n_accepted < n_drafted ? 1 : 0);
    s->idle[slot] = 0;
    if (s->prop.feedback) s->prop.feedback(s->prop.self, slot, n_drafted, n_accepted);
}

int32_t spec_engine_forced_accept(spec_engine *s, int32_t slot, int32_t n_draft)
{
    if (!s || !(s->p.force_accept >= 0) || slot < 0 || slot >= s->n_slots) return -1;
    const double x = s->force_frac[slot] + (double)s->p.force_accept;
    const int32_t k = (int32_t)floor(x);
    s->force_frac[slot] = x - (double)k;
    return k < 0 ? 0 : (k > n_draft ? n_draft : k);
}

void spec_engine_slot_reset(spec_engine *s, int32_t slot)
{
    if (slot < 0 || slot >= s->n_slots) return;
    s->acc_a[slot] = 3;   /* prior: alpha = 0.75 */
    s->acc_r[slot] = 1;
    s->lacc_a[slot] = 9;  /* prior for copied spans: alpha = 0.9 */
    s->lacc_r[slot] = 1;
    s->last_long[slot] = 0;
    s->idle[slot] = 0;
    if (s->prop.slot_reset) s->prop.slot_reset(s->prop.self, slot);
}

int32_t spec_verify_token(const float *p, const float *q, int32_t n, int32_t x, double u, double u2, bool *accepted)
{
    /* accept with probability min(1, p(x) / q(x)) */
    if (q[x] > 0 && u * (double)q[x] < (double)p[x]) {
        *accepted = true;
        return x;
    }
    *accepted = false;
    double mass = 0;
    for (int32_t i = 0; i < n; i++) mass += p[i] > q[i] ? (double)p[i] - q[i] : 0;
    bool residual = mass > 0;
    if (!residual) {   /* p == q up to rounding: the residual is p itself */
        mass = 0;
        for (int32_t i = 0; i < n; i++) mass += p[i];
    }
    double target = u2 * mass, acc = 0;
    int32_t last = -1;
    for (int32_t i = 0; i < n; i++) {
        double w = residual ? (p[i] > q[i] ? (double)p[i] - q[i] : 0) : p[i];
        if (w <= 0) continue;
        last = i;
        acc += w;
        if (target < acc) return i;
    }
    return last >= 0 ? last : x;
}
