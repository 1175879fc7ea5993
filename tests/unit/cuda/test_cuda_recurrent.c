/* The CUDA backend's recurrent (linear-attention) ops (cuda_rstate.c,
 * cuda_recurrent.cu) against the CPU backend's (cpu/recurrent.c) on the
 * same random inputs, through both op tables:
 * - conv1d_silu and gated_delta_rule over micro-batches that mix sequences:
 *   a run of 40 consecutive tokens of one (both backends take their chunked
 *   delta rule there), runs of 1, two sequences interleaved entry by entry, a
 *   sequence that comes back later in the batch; two calls, so the states
 *   carry over; states at an offset inside cells of one state block (as
 *   kv/rstate.c lays them out), starting random or zero; then the states
 *   themselves are compared. Shapes: d_k = d_v = 128 (Qwen3.5's), small odd
 *   ones (d_k 24 / d_v 20, d_k 200 / d_v 33) and conv widths 4 and 5 over
 *   channel counts that are not multiples of 32;
 * - decode-sized steps of both ops in a row (conv output feeding the delta
 *   rule, as qwen35.c calls them) inside ember_backend_run_step with graphs
 *   on: the first step of a shape runs op by op, the second is captured,
 *   the later ones replay the graph with other sequences (the cells come
 *   from the step's sequence ids on the device), one of them interleaved;
 *   between steps, state_copy forks a cell and zeroes another;
 * - the delta rule's prefill runs (chunk_batch): one sequence of 300
 *   entries, runs of several sequences from zero and nonzero states in one
 *   call, interleaved sequences long enough to be chunked, a run of exactly
 *   the chunking minimum, a call past one launch (1100 entries); on Qwen3.5-
 *   4B's shape (16 k-heads, 32 v-heads, d_k = d_v = 128) and small ones,
 *   each with the GPU's chunked form on and off (EMBER_CUDA_GDR_CHUNK);
 * - sigmoid_mul and copy_strided.
 * Tolerances: both backends compute in f32. The convolution sums its taps
 * in the CPU's order without contraction, so it differs only through expf
 * (CUDA's is within 2 ulp): max|diff| <= 1e-5 * max|cpu|. The delta rule
 * sums its dot products in another order (a warp tree against the CPU's
 * AVX2 lanes or its chunked WY form), and the state carries those roundings
 * from token to token: a host emulation of the kernels' arithmetic (plain
 * sequential sums) met the CPU op within 7.6e-7 of max |out| on these very
 * cases; bound: 5e-5 of max |cpu| for outputs and states (a wrong head, row,
 * sequence or decay is off by O(1)). The prefill-run cases: 1e-4 (the
 * GPU's chunks of 64 against the CPU's of 32 over up to 1100 entries; a
 * host emulation of the chunked kernel's arithmetic met a sequential
 * recurrent form within 2.6e-6 of max |out| on 300 entries).
 * sigmoid_mul: 1e-6; copy_strided: exact.
 * Without EMBER_CUDA or a GPU every case skips. */
#include "cuda_test.h"

#ifdef EMBER_CUDA
#include "backend/backend.h"
#include "backend/step.h"
#include "backend/cuda/backend_cuda.h"
#include "../../common/cpu_backend.h"

#define TOL_CONV 1e-5
#define TOL_GDR 5e-5
#define TOL_GDR_CHUNK 1e-4

static const ember_backend_limits LIM = {.max_tokens = 64, .max_n_in = 4096, .max_kv_tokens = 64, .max_head_dim = 128};

/* the CPU backend and a CUDA one; gdr_chunk: EMBER_CUDA_GDR_CHUNK as set
 * here (-1: from the environment) */
static void backends_chunk(ember_backend **cpu, ember_backend **gpu, int gdr_chunk)
{
    CU_OK(test_cpu_backend_new(2, &LIM, cpu));
    ember_backend_options go = ember_backend_options_default();
    CU_OK(ember_backend_options_env(&go));
    go.cuda_verify = false;   /* the plain op table (verify mode has no recurrent ops) */
    if (gdr_chunk >= 0) go.cuda_gdr_chunk = gdr_chunk != 0;
    CU_OK(ember_backend_cuda_new(&go, &LIM, gpu));
}

static void backends(ember_backend **cpu, ember_backend **gpu) { backends_chunk(cpu, gpu, -1); }

static void fill(float *x, size_t n, float lo, float hi)
{
    for (size_t i = 0; i < n; i++) x[i] = test_randf(lo, hi);
}

/* max|gpu - cpu| <= tol * max|cpu|, printed */
static void expect_close(const char *what, const float *cpu, const float *gpu, size_t n, double tol)
{
    double md = 0, mr = 0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = fabs((double)gpu[i] - cpu[i]);
        if (d > md || d != d) {
            md = d;
            at = i;
        }
        if (fabs(cpu[i]) > mr) mr = fabs(cpu[i]);
    }
    printf("#   %-44s max|cuda - cpu| %.3g at [%zu] (cuda %.7g, cpu %.7g), max|cpu| %.3g, rel %.3g\n", what, md, at,
           gpu[at], cpu[at], mr, mr > 0 ? md / mr : md);
    assert_true(mr > 0);
    if (!(md <= tol * mr)) fail_msg("%s: max|cuda - cpu| %g > %g * max|cpu| %g", what, md, tol, mr);
}

/* The test's state blocks: n_cells cells of cf floats on each backend, the
 * op's state at `off` floats into each cell; cell c starts random (c odd)
 * or zero (c even, a new sequence). */
enum { N_CELLS = 5 };
typedef struct states {
    float *cpu, *gpu;
    int64_t cf, off, per;   /* floats per cell, offset of the op's state, its floats */
} states;

static void states_new(ember_backend *cpu, ember_backend *gpu, int64_t per, int64_t off, states *s, float amp)
{
    s->per = per;
    s->off = off;
    s->cf = off + per + 7;   /* odd padding: the offset logic must not assume alignment */
    const size_t bytes = (size_t)(N_CELLS * s->cf) * sizeof(float);
    s->cpu = cpu->ops->state_alloc(cpu, N_CELLS, (size_t)s->cf * sizeof(float));
    s->gpu = gpu->ops->state_alloc(gpu, N_CELLS, (size_t)s->cf * sizeof(float));
    assert_non_null(s->cpu);
    assert_non_null(s->gpu);
    float *init = calloc((size_t)(N_CELLS * s->cf), sizeof(float));
    assert_non_null(init);
    for (int c = 1; c < N_CELLS; c += 2) fill(init + c * s->cf, (size_t)s->cf, -amp, amp);
    cpu->ops->state_copy(cpu, s->cpu, init, bytes);
    gpu->ops->state_copy(gpu, s->gpu, init, bytes);
    free(init);
}

static void states_ptrs(const states *s, const int *seq, int n, float **pc, float **pg)
{
    for (int t = 0; t < n; t++) {
        pc[t] = s->cpu + seq[t] * s->cf + s->off;
        pg[t] = s->gpu + seq[t] * s->cf + s->off;
    }
}

/* both backends' states of every cell, compared */
static void states_compare(ember_backend *cpu, ember_backend *gpu, const states *s, const char *what, double tol)
{
    const size_t n = (size_t)(N_CELLS * s->cf);
    float *hc = malloc(n * sizeof(float)), *hg = malloc(n * sizeof(float));
    assert_true(hc && hg);
    cpu->ops->state_copy(cpu, hc, s->cpu, n * sizeof(float));
    gpu->ops->state_copy(gpu, hg, s->gpu, n * sizeof(float));   /* a download: waits for the ops */
    expect_close(what, hc, hg, n, tol);
    free(hc);
    free(hg);
}

static void states_free(ember_backend *cpu, ember_backend *gpu, states *s)
{
    cpu->ops->state_free(cpu, s->cpu);
    gpu->ops->state_free(gpu, s->gpu);
}

/* The two calls' sequences (cells): a run of 40, runs of 1, sequences 2
 * and 3 interleaved, sequence 2 back after others. */
static int batch(int call, int *seq)
{
    int n = 0;
    if (call == 0) {
        seq[n++] = 1;
        for (int i = 0; i < 40; i++) seq[n++] = 0;
        for (int i = 0; i < 3; i++) {
            seq[n++] = 2;
            seq[n++] = 3;
        }
        seq[n++] = 4;
    } else {
        const int s1[] = {0, 2, 3, 3, 3, 3, 3, 1, 1, 2, 0, 2};
        for (size_t i = 0; i < sizeof s1 / sizeof s1[0]; i++) seq[n++] = s1[i];
    }
    return n;
}

static void conv_case(int64_t n_ch, int K)
{
    ember_backend *cpu, *gpu;
    backends(&cpu, &gpu);
    printf("# conv1d_silu: n_ch %lld, d_conv %d\n", (long long)n_ch, K);
    states st;
    states_new(cpu, gpu, (K - 1) * n_ch, 24, &st, 1.0f);
    float *w = malloc(sizeof(float) * (size_t)(n_ch * K));
    assert_non_null(w);
    fill(w, (size_t)(n_ch * K), -1.f, 1.f);
    int seq[64];
    float *pc[64], *pg[64];
    for (int call = 0; call < 2; call++) {
        const int n = batch(call, seq);
        states_ptrs(&st, seq, n, pc, pg);
        const size_t len = (size_t)(n * n_ch);
        float *x = malloc(len * sizeof(float)), *yc = malloc(len * sizeof(float)), *yg = malloc(len * sizeof(float));
        assert_true(x && yc && yg);
        fill(x, len, -2.f, 2.f);
        cpu->ops->conv1d_silu(cpu, yc, x, w, n_ch, K, pc, n);
        gpu->ops->conv1d_silu(gpu, yg, x, w, n_ch, K, pg, n);
        char what[64];
        snprintf(what, sizeof what, "call %d (%d entries): y", call, n);
        expect_close(what, yc, yg, len, TOL_CONV);
        free(x);
        free(yc);
        free(yg);
    }
    states_compare(cpu, gpu, &st, "states after both calls", TOL_CONV);
    states_free(cpu, gpu, &st);
    free(w);
    ember_backend_free(gpu);
    ember_backend_free(cpu);
}

static void test_conv1d_silu_matches_cpu(void **state)
{
    (void)state;
    TEST_NEED_GPU();
    conv_case(1024, 4);   /* 2 x 2 x 128 + 4 x 128: the qkv width of the delta-rule cases */
    conv_case(37, 4);
    conv_case(100, 5);
}

typedef struct gdr_in {
    ember_gdr_params p;
    float *A, *dt;
    int64_t ld;
} gdr_in;

static void gdr_in_new(int Hk, int Hv, int dk, int dv, gdr_in *g)
{
    g->A = malloc(sizeof(float) * Hv);
    g->dt = malloc(sizeof(float) * Hv);
    assert_true(g->A && g->dt);
    for (int h = 0; h < Hv; h++) {
        g->A[h] = -expf(test_randf(-1.f, 1.f));   /* ssm_a = -exp(A_log) */
        g->dt[h] = test_randf(-1.f, 1.f);
    }
    g->p = (ember_gdr_params){.n_head_k = Hk, .n_head_v = Hv, .d_k = dk, .d_v = dv, .A = g->A, .dt_bias = g->dt,
                              .eps = 1e-6f};
    g->ld = 2 * (int64_t)Hk * dk + (int64_t)Hv * dv;
}

/* One call of the gated delta rule over n entries (seq: their states) on
 * both backends, inputs random, outputs compared within tol; returns the
 * GPU's output (malloc'd, n * Hv * dv floats) when keep, else NULL. */
static float *gdr_call(ember_backend *cpu, ember_backend *gpu, const gdr_in *g, int64_t ld, states *st,
                       const int *seq, int n, float **pc, float **pg, int call, double tol, bool keep)
{
    const int Hv = g->p.n_head_v, dv = g->p.d_v;
    states_ptrs(st, seq, n, pc, pg);
    const size_t n_out = (size_t)n * Hv * dv;
    float *qkv = malloc(sizeof(float) * (size_t)(n * ld)), *al = malloc(sizeof(float) * (size_t)(n * Hv)),
          *bt = malloc(sizeof(float) * (size_t)(n * Hv)), *oc = malloc(sizeof(float) * n_out),
          *og = malloc(sizeof(float) * n_out);
    assert_true(qkv && al && bt && oc && og);
    fill(qkv, (size_t)(n * ld), -1.f, 1.f);
    fill(al, (size_t)(n * Hv), -3.f, 3.f);
    fill(bt, (size_t)(n * Hv), -3.f, 3.f);
    cpu->ops->gated_delta_rule(cpu, &g->p, qkv, ld, al, bt, pc, n, oc);
    gpu->ops->gated_delta_rule(gpu, &g->p, qkv, ld, al, bt, pg, n, og);
    char what[64];
    snprintf(what, sizeof what, "call %d (%d entries): out", call, n);
    expect_close(what, oc, og, n_out, tol);
    free(qkv);
    free(al);
    free(bt);
    free(oc);
    if (keep) return og;
    free(og);
    return NULL;
}

static void gdr_case(int Hk, int Hv, int dk, int dv)
{
    ember_backend *cpu, *gpu;
    backends(&cpu, &gpu);
    printf("# gated_delta_rule: heads %d/%d, d_k %d, d_v %d\n", Hk, Hv, dk, dv);
    gdr_in g;
    gdr_in_new(Hk, Hv, dk, dv, &g);
    const int64_t ld = g.ld + 5;   /* rows wider than q|k|v: ld is honoured */
    states st;
    states_new(cpu, gpu, (int64_t)Hv * dv * dk, 40, &st, 0.1f);
    int seq[64];
    float *pc[64], *pg[64];
    for (int call = 0; call < 2; call++) {
        const int n = batch(call, seq);
        gdr_call(cpu, gpu, &g, ld, &st, seq, n, pc, pg, call, TOL_GDR, false);
    }
    states_compare(cpu, gpu, &st, "states after both calls", TOL_GDR);
    states_free(cpu, gpu, &st);
    free(g.A);
    free(g.dt);
    ember_backend_free(gpu);
    ember_backend_free(cpu);
}

static void test_gated_delta_rule_matches_cpu(void **state)
{
    (void)state;
    TEST_NEED_GPU();
    gdr_case(2, 4, 128, 128);   /* Qwen3.5's head sizes */
    gdr_case(1, 3, 24, 20);
    gdr_case(2, 2, 200, 33);
}

/* ---- steps: decode-sized micro-batches, captured and replayed ---------- */

enum { S_N = 3, S_STEPS = 7, S_K = 4, S_HK = 2, S_HV = 4, S_D = 128 };

typedef struct step_run {
    ember_backend *gpu;
    gdr_in g;
    const float *w;
    int64_t n_ch;
    float *act_x, *act_u, *act_al, *act_b, *act_o;   /* GPU activation memory */
    const float *x, *al, *bt;                         /* host inputs (the same addresses every step) */
    float *u, *o;                                     /* host outputs */
    float *const *pconv, *const *pssm;
} step_run;

/* the GPU's forward pass: inputs uploaded, conv -> delta rule, outputs copied out */
static void step_forward(void *arg)
{
    step_run *r = arg;
    ember_backend *be = r->gpu;
    const ember_backend_ops *op = be->ops;
    const int64_t n = S_N, Hv = r->g.p.n_head_v, dv = r->g.p.d_v;
    op->upload(be, r->act_x, r->x, n * r->n_ch);
    op->upload(be, r->act_al, r->al, n * Hv);
    op->upload(be, r->act_b, r->bt, n * Hv);
    op->conv1d_silu(be, r->act_u, r->act_x, r->w, r->n_ch, S_K, r->pconv, S_N);
    op->gated_delta_rule(be, &r->g.p, r->act_u, r->n_ch, r->act_al, r->act_b, r->pssm, S_N, r->act_o);
    op->copy(be, r->u, r->act_u, n * r->n_ch);
    op->copy(be, r->o, r->act_o, n * Hv * dv);
}

static void test_steps_replay_with_other_sequences(void **state)
{
    (void)state;
    TEST_NEED_GPU();
    ember_backend *cpu, *gpu;
    backends(&cpu, &gpu);
    if (!gpu->caps.graphed_steps) printf("# graphs are off (EMBER_CUDA_GRAPHS=0): the steps run op by op\n");
    step_run r = {.gpu = gpu};
    gdr_in_new(S_HK, S_HV, S_D, S_D, &r.g);
    r.n_ch = r.g.ld;
    /* one state block laid out as rstate's: [conv state | delta-rule state] per cell */
    const int64_t n_conv = (S_K - 1) * r.n_ch, n_ssm = (int64_t)S_HV * S_D * S_D;
    states st;
    states_new(cpu, gpu, n_conv + n_ssm, 0, &st, 0.1f);
    float *w = malloc(sizeof(float) * (size_t)(r.n_ch * S_K));
    assert_non_null(w);
    fill(w, (size_t)(r.n_ch * S_K), -1.f, 1.f);
    r.w = w;
    const size_t nx = (size_t)(S_N * r.n_ch), na = (size_t)(S_N * S_HV), no = (size_t)S_N * S_HV * S_D;
    float *x = malloc(nx * 4), *al = malloc(na * 4), *bt = malloc(na * 4), *u = malloc(nx * 4), *o = malloc(no * 4);
    float *uc = malloc(nx * 4), *oc = malloc(no * 4);
    assert_true(x && al && bt && u && o && uc && oc);
    r.x = x, r.al = al, r.bt = bt, r.u = u, r.o = o;
    r.act_x = gpu->ops->act_alloc(gpu, nx * 4);
    r.act_u = gpu->ops->act_alloc(gpu, nx * 4);
    r.act_al = gpu->ops->act_alloc(gpu, na * 4);
    r.act_b = gpu->ops->act_alloc(gpu, na * 4);
    r.act_o = gpu->ops->act_alloc(gpu, no * 4);
    assert_true(r.act_x && r.act_u && r.act_al && r.act_b && r.act_o);
    /* the step's other arrays: one block table per sequence (their pointers
     * tell the backend's runs apart), positions inside the planned context */
    int32_t blocks[N_CELLS][1] = {{0}, {0}, {0}, {0}, {0}};
    ember_token tok[S_N] = {0};
    ember_pos pos[S_N] = {0};
    int64_t rows[S_N] = {0};
    ember_attn_query q[S_N];
    const int steps[S_STEPS][S_N] = {{0, 1, 2}, {3, 1, 0}, {0, 1, 0}, {4, 2, 3}, {1, 0, 1}, {2, 3, 4}, {3, 2, 1}};
    float *pc_conv[S_N], *pc_ssm[S_N], *pg_conv[S_N], *pg_ssm[S_N];
    for (int k = 0; k < S_STEPS; k++) {
        const int *seq = steps[k];
        ember_seq_id sid[S_N];
        for (int t = 0; t < S_N; t++) {
            sid[t] = seq[t];
            q[t] = (ember_attn_query){.blocks = blocks[seq[t]], .pos = 0};
            pc_conv[t] = st.cpu + seq[t] * st.cf;
            pc_ssm[t] = pc_conv[t] + n_conv;
            pg_conv[t] = st.gpu + seq[t] * st.cf;
            pg_ssm[t] = pg_conv[t] + n_conv;
        }
        if (k == 5) {   /* between steps: fork cell 1 into cell 4, zero cell 2 (a new sequence) */
            const size_t cb = (size_t)st.cf * sizeof(float);
            cpu->ops->state_copy(cpu, st.cpu + 4 * st.cf, st.cpu + 1 * st.cf, cb);
            gpu->ops->state_copy(gpu, st.gpu + 4 * st.cf, st.gpu + 1 * st.cf, cb);
            cpu->ops->state_copy(cpu, st.cpu + 2 * st.cf, NULL, cb);
            gpu->ops->state_copy(gpu, st.gpu + 2 * st.cf, NULL, cb);
        }
        fill(x, nx, -2.f, 2.f);
        fill(al, na, -3.f, 3.f);
        fill(bt, na, -3.f, 3.f);
        /* the CPU on host memory, no step */
        cpu->ops->conv1d_silu(cpu, uc, x, w, r.n_ch, S_K, pc_conv, S_N);
        cpu->ops->gated_delta_rule(cpu, &r.g.p, uc, r.n_ch, al, bt, pc_ssm, S_N, oc);
        /* the GPU as a step */
        r.pconv = pg_conv;
        r.pssm = pg_ssm;
        const ember_backend_step bs = {.n = S_N, .token = tok, .pos = pos, .kv_row = rows, .query = q,
                                       .kv_row_swa = rows, .query_swa = q, .n_out = 0, .out_idx = NULL,
                                       .logits = NULL, .block_tokens = 32, .seq_id = sid};
        const int runs = ember_backend_run_step(gpu, &bs, step_forward, &r);
        printf("# step %d, sequences {%d, %d, %d}: forward ran %d time(s)\n", k, seq[0], seq[1], seq[2], runs);
        assert_true(runs == 1);   /* a replay that did not match would run it twice */
        expect_close("  conv1d_silu output", uc, u, nx, TOL_CONV);
        expect_close("  gated_delta_rule output", oc, o, no, TOL_GDR);
    }
    states_compare(cpu, gpu, &st, "states after the steps", TOL_GDR);
    gpu->ops->act_free(gpu, r.act_x);
    gpu->ops->act_free(gpu, r.act_u);
    gpu->ops->act_free(gpu, r.act_al);
    gpu->ops->act_free(gpu, r.act_b);
    gpu->ops->act_free(gpu, r.act_o);
    states_free(cpu, gpu, &st);
    free(x), free(al), free(bt), free(u), free(o), free(uc), free(oc), free(w);
    free(r.g.A);
    free(r.g.dt);
    ember_backend_free(gpu);
    ember_backend_free(cpu);
}

/* ---- the chunked form: prefill runs -------------------------------------- */

/* The calls' sequences (cells; 5 cells, odd ones start from random states):
 * 0: one sequence of 300 entries from a zero state (4 chunks of 64 and a
 *    tail of 44 on the GPU, 9 chunks of 32 and 12 on the CPU);
 * 1: runs of two sequences from nonzero states (70 of cell 1, 45 of cell 3)
 *    around a decode entry (cell 2), then 20 more of cell 0 (its state from
 *    call 0);
 * 2: cells 2 and 4 interleaved, 20 entries each (runs of 1: the CPU walks
 *    them, the GPU chunks each sequence's 20), then exactly 16 of cell 1
 *    (EMBER_CUDA_GDR_RUN_MIN);
 * 3 (small shapes): 1100 entries of cell 3: two launches (1024 + 76). */
enum { CH_CALLS = 4, CH_MAX_N = 1100 };

static int chunk_batch(int call, int *seq)
{
    int n = 0;
    if (call == 0) {
        for (int i = 0; i < 300; i++) seq[n++] = 0;
    } else if (call == 1) {
        for (int i = 0; i < 70; i++) seq[n++] = 1;
        seq[n++] = 2;
        for (int i = 0; i < 45; i++) seq[n++] = 3;
        for (int i = 0; i < 20; i++) seq[n++] = 0;
    } else if (call == 2) {
        for (int i = 0; i < 20; i++) {
            seq[n++] = 2;
            seq[n++] = 4;
        }
        for (int i = 0; i < 16; i++) seq[n++] = 1;
    } else {
        for (int i = 0; i < 1100; i++) seq[n++] = 3;
    }
    return n;
}

/* The calls above on the CPU and on a GPU backend with the chunked form on
 * (gdr_chunk 1) or off (0), outputs of every call and the states after the
 * last compared; n_calls 3 or 4. *last (malloc'd, *n_last floats): the
 * GPU's output of the last call. */
static void gdr_chunk_case(int Hk, int Hv, int dk, int dv, int n_calls, int gdr_chunk, float **last, size_t *n_last)
{
    ember_backend *cpu, *gpu;
    backends_chunk(&cpu, &gpu, gdr_chunk);
    printf("# gated_delta_rule, prefill runs, %s form on the GPU: heads %d/%d, d_k %d, d_v %d\n",
           gdr_chunk ? "chunked" : "recurrent", Hk, Hv, dk, dv);
    gdr_in g;
    gdr_in_new(Hk, Hv, dk, dv, &g);
    const int64_t ld = g.ld + 3;
    states st;
    states_new(cpu, gpu, (int64_t)Hv * dv * dk, 16, &st, 0.1f);
    int *seq = malloc(sizeof(int) * CH_MAX_N);
    float **pc = malloc(sizeof(float *) * CH_MAX_N), **pg = malloc(sizeof(float *) * CH_MAX_N);
    assert_true(seq && pc && pg);
    for (int call = 0; call < n_calls; call++) {
        const int n = chunk_batch(call, seq);
        float *og = gdr_call(cpu, gpu, &g, ld, &st, seq, n, pc, pg, call, TOL_GDR_CHUNK, call == n_calls - 1);
        if (og) {
            free(*last);
            *last = og;
            *n_last = (size_t)n * Hv * dv;
        }
    }
    states_compare(cpu, gpu, &st, "states after the calls", TOL_GDR_CHUNK);
    states_free(cpu, gpu, &st);
    free(seq);
    free(pc);
    free(pg);
    free(g.A);
    free(g.dt);
    ember_backend_free(gpu);
    ember_backend_free(cpu);
}

/* Each shape twice on the same inputs (the RNG rewound): chunked and
 * recurrent on the GPU, both against the CPU; the two GPU forms' last
 * outputs must differ in some bits (they round differently), or the
 * chunked kernel did not run. */
static void gdr_chunk_ab(int Hk, int Hv, int dk, int dv, int n_calls)
{
    const uint64_t seed = test_rng_state;
    float *chunked = NULL, *recurrent = NULL;
    size_t n_c = 0, n_r = 0;
    gdr_chunk_case(Hk, Hv, dk, dv, n_calls, 1, &chunked, &n_c);
    test_rng_state = seed;
    gdr_chunk_case(Hk, Hv, dk, dv, n_calls, 0, &recurrent, &n_r);
    assert_true(n_c == n_r && n_c > 0);
    size_t differ = 0;
    for (size_t i = 0; i < n_c; i++) differ += memcmp(&chunked[i], &recurrent[i], sizeof(float)) != 0;
    printf("# chunked vs recurrent on the GPU: %zu of %zu outputs differ in some bit\n", differ, n_c);
    assert_true(differ > 0);
    free(chunked);
    free(recurrent);
}

static void test_gated_delta_rule_chunked_matches_cpu(void **state)
{
    (void)state;
    TEST_NEED_GPU();
    gdr_chunk_ab(16, 32, 128, 128, 3);   /* Qwen3.5-4B's linear-attention layer */
    gdr_chunk_ab(1, 3, 24, 20, 4);       /* small and odd: d_k < 32, one partial block of value rows */
    gdr_chunk_ab(2, 4, 64, 64, 4);
    gdr_chunk_ab(2, 2, 200, 33, 3);      /* d_k in (128, 256]: chunks of 32; d_v past one block of 32 rows */
}

/* ---- sigmoid_mul, copy_strided ------------------------------------------ */

static void test_sigmoid_mul_and_copy_strided(void **state)
{
    (void)state;
    TEST_NEED_GPU();
    ember_backend *cpu, *gpu;
    backends(&cpu, &gpu);
    const int64_t n = 3 * 4 * 256 + 7;
    float *x = malloc(sizeof(float) * n), *g = malloc(sizeof(float) * n), *xc = malloc(sizeof(float) * n),
          *xg = malloc(sizeof(float) * n);
    assert_true(x && g && xc && xg);
    fill(x, (size_t)n, -4.f, 4.f);
    fill(g, (size_t)n, -12.f, 12.f);
    memcpy(xc, x, sizeof(float) * n);
    memcpy(xg, x, sizeof(float) * n);
    cpu->ops->sigmoid_mul(cpu, xc, g, n);
    gpu->ops->sigmoid_mul(gpu, xg, g, n);
    printf("# sigmoid_mul, %lld elements\n", (long long)n);
    expect_close("x * sigmoid(g)", xc, xg, (size_t)n, 1e-6);
    /* [q | gate] per head -> q: 12 rows of 2 x 256, the first 256 of each,
     * into rows of 300 whose other columns must stay */
    const int64_t rows = 12, cols = 256, ld_src = 512, ld_dst = 300;
    float *src = malloc(sizeof(float) * rows * ld_src), *dc = malloc(sizeof(float) * rows * ld_dst),
          *dg = malloc(sizeof(float) * rows * ld_dst);
    assert_true(src && dc && dg);
    fill(src, (size_t)(rows * ld_src), -1.f, 1.f);
    for (int64_t i = 0; i < rows * ld_dst; i++) dc[i] = dg[i] = (float)i;
    cpu->ops->copy_strided(cpu, dc, ld_dst, src + cols, ld_src, rows, cols);
    gpu->ops->copy_strided(gpu, dg, ld_dst, src + cols, ld_src, rows, cols);
    printf("# copy_strided [%lld, %lld] (ld %lld -> %lld): %s\n", (long long)rows, (long long)cols, (long long)ld_src,
           (long long)ld_dst, memcmp(dc, dg, sizeof(float) * rows * ld_dst) ? "DIFFERS" : "identical");
    assert_memory_equal(dc, dg, sizeof(float) * rows * ld_dst);
    free(x), free(g), free(xc), free(xg), free(src), free(dc), free(dg);
    ember_backend_free(gpu);
    ember_backend_free(cpu);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conv1d_silu_matches_cpu),
        cmocka_unit_test(test_gated_delta_rule_matches_cpu),
        cmocka_unit_test(test_gated_delta_rule_chunked_matches_cpu),
        cmocka_unit_test(test_steps_replay_with_other_sequences),
        cmocka_unit_test(test_sigmoid_mul_and_copy_strided),
    };
    return cmocka_run_group_tests(tests, test_cuda_group_setup, test_cuda_group_teardown);
}

#else /* !EMBER_CUDA */

static void test_cuda_not_built(void **state)
{
    (void)state;
    print_message("built without -DEMBER_CUDA=ON: CUDA recurrent-op tests skipped\n");
    skip();
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_cuda_not_built)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}

#endif
