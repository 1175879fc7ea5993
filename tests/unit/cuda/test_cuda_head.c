/* The CUDA backend's head preparation (cuda_fuse.c, cuda_backend.ph:
 * per-head RMSNorm, RoPE and the K/V store recorded as the ops come and
 * launched as one cuda_head.cu kernel) inside real steps: the attention
 * layer's op sequence of Gemma 3 (q/k norms, NEOX RoPE, a power-of-two q
 * scale, store), Gemma 4 (q/k norms and a weightless v norm, 512-wide heads,
 * q's RoPE between) and Llama (RoPE only, normal mode), as a prompt step of
 * 5 tokens and then decode steps (the second one of a shape is captured as
 * a CUDA graph, the third replays it; the last two past 32 keys, where the
 * attention merges two key splits), then a prompt of 70 tokens (the
 * prompt attention and the f16 prefill GEMM behind the same head kernel). The attention output feeds an output
 * projection (a matmul of golden gguf-py blocks whose Q8 input the
 * attention kernel writes itself: cb_pat_attn_quant), as in a layer. Every
 * step's attention output and projection must be bit-identical to the same
 * backend with these fusions off (cuda_fuse_head = cuda_fuse_attn = false:
 * the lone kernels, which the kernel tests check); the attention within
 * 1e-2 of max |cpu| of the CPU backend's ops (f16 KV on both sides; a wrong
 * head, angle, norm or cell is off by O(1)), the projection within 3e-2 of
 * max |cpu| (its Q8 input is of slightly different values).
 * Without EMBER_CUDA or a GPU every case skips. */
#include "cuda_test.h"

#ifdef EMBER_CUDA
#include "backend/backend.h"
#include "backend/cuda/backend_cuda.h"
#include "backend/step.h"
#include "../../common/cpu_backend.h"

typedef enum { SEQ_GEMMA3, SEQ_GEMMA4, SEQ_LLAMA } seq_kind;

typedef struct hcase {
    const char *name;
    seq_kind kind;
    int n_head, n_head_kv, head_dim;
    const char *wo_type;   /* the output projection's block format (golden blocks) */
} hcase;

enum { N_OUT = 96, MAXN = 72 };   /* rows of the output projection; most tokens a step */

typedef struct layer_data {
    float *q, *k_act, *v_act, *o_act;   /* activations (act_alloc: one set per backend for all steps, as the engine keeps its scratch) */
    const ember_weight *wo;             /* output projection [N_OUT, n_head * head_dim] */
    float *wq, *wk;   /* norm weights [head_dim] */
    int32_t *blocks;
    uint16_t *k, *v;  /* host KV layer (the CPU backend's; the GPU keeps its own copy) */
} layer_data;

/* One step of n tokens at positions pos0.. through backend be; out: host
 * [n, n_head, head_dim], y: host [n, N_OUT] (the output projection). */
static void run_step(ember_backend *be, const hcase *c, const layer_data *L, const ember_kv_layer_view *view, int pos0,
                     int n, const float *q_h, const float *k_h, const float *v_h, float *out, float *y)
{
    const int D = c->head_dim, H = c->n_head, Hk = c->n_head_kv, bt = view->block_tokens;
    const size_t nq = (size_t)n * H * D, nk = (size_t)n * Hk * D;
    ember_token tok[MAXN] = {0};
    ember_pos pos[MAXN];
    int64_t rows[MAXN];
    ember_attn_query qs[MAXN];
    for (int i = 0; i < n; i++) {
        pos[i] = pos0 + i;
        rows[i] = (int64_t)L->blocks[(pos0 + i) / bt] * bt + (pos0 + i) % bt;
        qs[i].blocks = L->blocks;
        qs[i].pos = pos0 + i;
    }
    const ember_backend_step st = {.n = n, .token = tok, .pos = pos, .kv_row = rows, .query = qs, .kv_row_swa = rows,
                                   .query_swa = qs, .block_tokens = bt};
    float *q = L->q, *k = L->k_act, *v = L->v_act;
    const ember_attn_params ap = {.n_head = H, .n_head_kv = Hk, .head_dim_k = D, .head_dim_v = D,
                                  .kq_scale = c->kind == SEQ_GEMMA3 ? 1.0f : 1.0f / sqrtf((float)D)};
    const ember_backend_ops *op = be->ops;
    for (int pass = 0; pass < 2; pass++) {   /* a second pass when a replay did not match */
        if (pass == 0 && op->step_begin(be, &st)) fail_msg("a step without logits cannot skip its forward pass");
        op->upload(be, q, q_h, (int64_t)nq);
        op->upload(be, k, k_h, (int64_t)nk);
        op->upload(be, v, v_h, (int64_t)nk);
        switch (c->kind) {
        case SEQ_GEMMA3:
            op->rms_norm(be, q, q, L->wq, (int64_t)n * H, D, 1e-6f);
            op->rms_norm(be, k, k, L->wk, (int64_t)n * Hk, D, 1e-6f);
            op->rope(be, q, n, H, D, D, pos, 10000.f, 1.0f, EMBER_ROPE_NEOX);
            op->rope(be, k, n, Hk, D, D, pos, 10000.f, 1.0f, EMBER_ROPE_NEOX);
            op->scale(be, q, 0.0625f, (int64_t)nq);
            break;
        case SEQ_GEMMA4:
            op->rms_norm(be, q, q, L->wq, (int64_t)n * H, D, 1e-6f);
            op->rope(be, q, n, H, D, D, pos, 1e6f, 1.0f, EMBER_ROPE_NEOX);
            op->rms_norm(be, k, k, L->wk, (int64_t)n * Hk, D, 1e-6f);
            op->rms_norm(be, v, v, NULL, (int64_t)n * Hk, D, 1e-6f);
            op->rope(be, k, n, Hk, D, D, pos, 1e6f, 1.0f, EMBER_ROPE_NEOX);
            break;
        case SEQ_LLAMA:
            op->rope(be, q, n, H, D, D, pos, 500000.f, 1.0f, EMBER_ROPE_NORM);
            op->rope(be, k, n, Hk, D, D, pos, 500000.f, 1.0f, EMBER_ROPE_NORM);
            break;
        }
        op->kv_store(be, view, k, v, rows, n);
        op->attention(be, view, &ap, q, qs, n, L->o_act);
        op->matmul(be, L->o_act, n, 1, &L->wo, &y);
        op->copy(be, out, L->o_act, (int64_t)nq);
        if (op->step_end(be)) break;
        assert_int_equal(pass, 0);
    }
}

static void run_case(const hcase *c)
{
    const int bt = 16, n_ctx = 128, n_blocks = n_ctx / bt, D = c->head_dim, H = c->n_head, Hk = c->n_head_kv;
    const int64_t row = (int64_t)Hk * D;
    ember_backend_limits lim = {.max_tokens = MAXN, .max_n_in = 4096, .max_kv_tokens = n_ctx, .max_head_dim = D};
    ember_backend *be[3] = {NULL, NULL, NULL};   /* CPU, CUDA fused, CUDA unfused */
    CU_OK(test_cpu_backend_new(2, &lim, &be[0]));
    ember_backend_options go = ember_backend_options_default();
    CU_OK(ember_backend_cuda_new(&go, &lim, &be[1]));
    go.cuda_fuse_head = false;
    go.cuda_fuse_attn = false;
    CU_OK(ember_backend_cuda_new(&go, &lim, &be[2]));
    test_blocks bl;
    test_blocks_load(c->wo_type, &bl);
    uint8_t *wo_raw;
    float *wo_deq;
    test_blocks_matrix(&bl, (int64_t)H * D, N_OUT, &wo_raw, &wo_deq);
    const ember_weight wo = {.type = bl.type, .n_in = (int64_t)H * D, .n_out = N_OUT,
                             .row_bytes = (size_t)((int64_t)H * D / bl.block_size) * bl.block_bytes, .data = wo_raw,
                             .name = "attn_output.weight"};
    layer_data L[3];
    ember_kv_layer_view view[3];
    float *wq = malloc(sizeof(float) * D), *wk = malloc(sizeof(float) * D);
    int32_t *blocks = malloc(sizeof(int32_t) * n_blocks);
    assert_true(wq && wk && blocks);
    for (int i = 0; i < D; i++) {
        wq[i] = test_randf(0.5f, 1.5f);
        wk[i] = test_randf(0.5f, 1.5f);
    }
    for (int i = 0; i < n_blocks; i++) blocks[i] = n_blocks - 1 - i;   /* reversed: the cell matters */
    for (int b = 0; b < 3; b++) {
        L[b] = (layer_data){.wq = wq, .wk = wk, .wo = &wo, .blocks = blocks, .k = calloc((size_t)(n_ctx * row), 2),
                            .v = calloc((size_t)(n_ctx * row), 2)};
        assert_true(L[b].k && L[b].v);
        L[b].q = be[b]->ops->act_alloc(be[b], sizeof(float) * MAXN * H * D);
        L[b].o_act = be[b]->ops->act_alloc(be[b], sizeof(float) * MAXN * H * D);
        L[b].k_act = be[b]->ops->act_alloc(be[b], sizeof(float) * MAXN * row);
        L[b].v_act = be[b]->ops->act_alloc(be[b], sizeof(float) * MAXN * row);
        assert_true(L[b].q && L[b].k_act && L[b].v_act && L[b].o_act);
        view[b] = (ember_kv_layer_view){.type_k = EMBER_TYPE_F16, .type_v = EMBER_TYPE_F16, .k = L[b].k, .v = L[b].v,
                                        .k_row_bytes = (size_t)row * 2, .v_row_bytes = (size_t)row * 2,
                                        .block_tokens = bt, .n_rows = n_ctx};
    }
    /* (pos0, n); the keys 9..39 stay zero on both sides; the last step is a
     * prompt of 70 tokens (the prompt attention, the f16 prefill GEMM) */
    const int steps[][2] = {{0, 5}, {5, 1}, {6, 1}, {7, 1}, {8, 1}, {40, 1}, {41, 1}, {42, 70}};
    const size_t max_q = (size_t)MAXN * H * D, max_k = (size_t)MAXN * row;
    float *qh = malloc(sizeof(float) * max_q), *kh = malloc(sizeof(float) * max_k), *vh = malloc(sizeof(float) * max_k);
    float *out[3], *y[3];
    for (int b = 0; b < 3; b++) {
        out[b] = malloc(sizeof(float) * max_q);
        y[b] = malloc(sizeof(float) * MAXN * N_OUT);
        assert_true(out[b] && y[b]);
    }
    assert_true(qh && kh && vh);
    for (size_t s = 0; s < sizeof steps / sizeof steps[0]; s++) {
        const int pos0 = steps[s][0], n = steps[s][1];
        const size_t nq = (size_t)n * H * D, nk = (size_t)n * row;
        for (size_t i = 0; i < nq; i++) qh[i] = test_randf(-2.f, 2.f);
        for (size_t i = 0; i < nk; i++) {
            kh[i] = test_randf(-2.f, 2.f);
            vh[i] = test_randf(-1.f, 1.f);
        }
        for (int b = 0; b < 3; b++) run_step(be[b], c, &L[b], &view[b], pos0, n, qh, kh, vh, out[b], y[b]);
        double md = 0, mr = 0;
        size_t n_diff = 0, first = 0;
        for (size_t i = 0; i < nq; i++) {
            if (memcmp(&out[1][i], &out[2][i], sizeof(float)) != 0 && n_diff++ == 0) first = i;
            const double d = fabs((double)out[1][i] - out[0][i]);
            if (d > md || d != d) md = d;
            if (fabs(out[0][i]) > mr) mr = fabs(out[0][i]);
        }
        printf("# %s step %zu (pos %d, %d tokens): max|fused - cpu| %.3g, max|cpu| %.3g, %zu of %zu outputs differ from "
               "unfused\n", c->name, s, pos0, n, md, mr, n_diff, nq);
        assert_true(mr > 0.01);
        if (!(md <= 1e-2 * mr)) fail_msg("%s step %zu: max|fused - cpu| %g > 1e-2 * %g", c->name, s, md, mr);
        if (n_diff)
            fail_msg("%s step %zu: %zu outputs differ from the unfused kernels; first [%zu]: %a vs %a", c->name, s,
                     n_diff, first, (double)out[1][first], (double)out[2][first]);
        double ymd = 0, ymr = 0;
        for (size_t i = 0; i < (size_t)n * N_OUT; i++) {
            if (memcmp(&y[1][i], &y[2][i], sizeof(float)) != 0)
                fail_msg("%s step %zu: projection [%zu] %a differs from the unfused kernels' %a", c->name, s, i,
                         (double)y[1][i], (double)y[2][i]);
            const double d = fabs((double)y[1][i] - y[0][i]);
            if (d > ymd || d != d) ymd = d;
            if (fabs(y[0][i]) > ymr) ymr = fabs(y[0][i]);
        }
        printf("# %s step %zu: projection (%s) max|fused - cpu| %.3g, max|cpu| %.3g\n", c->name, s, c->wo_type, ymd, ymr);
        assert_true(ymr > 0.01);
        if (!(ymd <= 3e-2 * ymr)) fail_msg("%s step %zu: projection max|fused - cpu| %g > 3e-2 * %g", c->name, s, ymd, ymr);
    }
    ember_cuda_fusion_counts fc[2];
    ember_backend_cuda_fusion_counts(be[1], &fc[0]);
    ember_backend_cuda_fusion_counts(be[2], &fc[1]);
    printf("# %s: %lld fused head launches, %lld attention + quantize (unfused backend: %lld, %lld)\n", c->name,
           (long long)fc[0].head_prep, (long long)fc[0].attn_quant, (long long)fc[1].head_prep,
           (long long)fc[1].attn_quant);
    /* steps 0-2 launch one each (the third into its capture), the later ones replay the graph */
    if (fc[0].head_prep < 3) fail_msg("%s: only %lld fused head launches", c->name, (long long)fc[0].head_prep);
    if (fc[0].attn_quant < 3) fail_msg("%s: only %lld attention + quantize launches", c->name, (long long)fc[0].attn_quant);
    assert_int_equal(fc[1].head_prep, 0);
    assert_int_equal(fc[1].attn_quant, 0);
    for (int b = 0; b < 3; b++) {
        free(out[b]);
        free(y[b]);
        be[b]->ops->act_free(be[b], L[b].q);
        be[b]->ops->act_free(be[b], L[b].o_act);
        be[b]->ops->act_free(be[b], L[b].k_act);
        be[b]->ops->act_free(be[b], L[b].v_act);
        free(L[b].k);
        free(L[b].v);
        ember_backend_free(be[b]);
    }
    free(qh);
    free(kh);
    free(vh);
    free(wq);
    free(wk);
    free(blocks);
    free(wo_raw);
    free(wo_deq);
    test_blocks_free(&bl);
}

static void test_head_prep_matches_unfused_and_cpu(void **state)
{
    (void)state;
    TEST_NEED_GPU();
    const hcase cases[] = {
        {"gemma3 (4 x 256, 1 KV head)", SEQ_GEMMA3, 4, 1, 256, "Q4_K"},   /* Q8_K input, one block per head */
        {"gemma4 (8 x 512, 2 KV heads)", SEQ_GEMMA4, 8, 2, 512, "Q5_0"},  /* Q8_0 */
        {"llama (4 x 64, 2 KV heads)", SEQ_LLAMA, 4, 2, 64, "Q4_1"},      /* Q8_1 */
        /* Q8_K over 2 heads of 64 per KV head: blocks span CTAs, so the quantizer runs after the attention */
        {"llama (4 x 64, 2 KV heads), Q4_K projection", SEQ_LLAMA, 4, 2, 64, "Q4_K"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i]);
}

/* A decode step with many host outputs (a speculative verification step
 * whose target also exports the hidden rows of several layers:
 * ember_layer_end's copies + the logits) is captured and replayed as a
 * CUDA graph, every output downloaded to its host rows at step end: 8 host
 * outputs a step (the backend defers up to 9), each host address changing
 * from step to step (the replay writes where the current step asks). */
enum { GO_N = 4, GO_W = 96, GO_OUT = 8 };
typedef struct gstep {
    ember_backend *be;
    float *x;                    /* activations [GO_OUT][GO_N][GO_W] */
    const float *xh;             /* host input */
    float *out[GO_OUT];          /* host outputs [GO_N][GO_W] */
} gstep;

static void gstep_forward(void *arg)
{
    gstep *g = arg;
    const ember_backend_ops *op = g->be->ops;
    const int64_t n = (int64_t)GO_N * GO_W;
    op->upload(g->be, g->x, g->xh, GO_OUT * n);
    op->scale(g->be, g->x, 2.0f, GO_OUT * n);
    for (int j = 0; j < GO_OUT; j++) {
        op->add(g->be, g->x + j * n, g->x + ((j + 1) % GO_OUT) * n, n);   /* changes x after earlier copies */
        op->copy(g->be, g->out[j], g->x + j * n, n);
    }
}

static void test_graph_many_host_outputs(void **state)
{
    (void)state;
    TEST_NEED_GPU();
    const int bt = 16, n_ctx = 64;
    ember_backend_limits lim = {.max_tokens = GO_N, .max_n_in = 4096, .max_kv_tokens = n_ctx, .max_head_dim = 64};
    ember_backend_options go = ember_backend_options_default();
    ember_backend *be = NULL;
    CU_OK(ember_backend_cuda_new(&go, &lim, &be));
    const int64_t n = (int64_t)GO_N * GO_W;
    gstep g = {.be = be, .x = be->ops->act_alloc(be, sizeof(float) * GO_OUT * (size_t)n)};
    assert_non_null(g.x);
    float *xh = malloc(sizeof(float) * GO_OUT * (size_t)n), *want = malloc(sizeof(float) * GO_OUT * (size_t)n);
    float *outs[2][GO_OUT];   /* two sets of host rows, alternating */
    assert_true(xh && want);
    for (int k = 0; k < 2; k++)
        for (int j = 0; j < GO_OUT; j++) assert_non_null(outs[k][j] = malloc(sizeof(float) * (size_t)n));
    int32_t blocks[4] = {3, 2, 1, 0};
    ember_cuda_fusion_counts fc0, fc1;
    ember_backend_cuda_fusion_counts(be, &fc0);
    enum { STEPS = 6 };
    for (int s = 0; s < STEPS; s++) {
        ember_token tok[GO_N] = {0};
        ember_pos pos[GO_N];
        int64_t rows[GO_N];
        ember_attn_query qs[GO_N];
        for (int i = 0; i < GO_N; i++) {
            pos[i] = s * GO_N + i;
            rows[i] = (int64_t)blocks[pos[i] / bt] * bt + pos[i] % bt;
            qs[i] = (ember_attn_query){.blocks = blocks, .pos = pos[i]};
        }
        const ember_backend_step st = {.n = GO_N, .token = tok, .pos = pos, .kv_row = rows, .query = qs,
                                       .kv_row_swa = rows, .query_swa = qs, .block_tokens = bt};
        for (int64_t i = 0; i < GO_OUT * n; i++) xh[i] = test_randf(-1.f, 1.f);
        /* the forward on the host: x = 2 xh; x_j += x_{j+1 mod 8} in order */
        for (int64_t i = 0; i < GO_OUT * n; i++) want[i] = 2.0f * xh[i];
        for (int j = 0; j < GO_OUT; j++)
            for (int64_t i = 0; i < n; i++) want[j * n + i] += want[((j + 1) % GO_OUT) * n + i];
        g.xh = xh;
        for (int j = 0; j < GO_OUT; j++) {
            g.out[j] = outs[s & 1][j];
            memset(g.out[j], 0xff, sizeof(float) * (size_t)n);
        }
        const int ran = ember_backend_run_step(be, &st, gstep_forward, &g);
        assert_true(ran == 1);   /* never replayed whole (more than the logits), never run twice (the same step) */
        for (int j = 0; j < GO_OUT; j++)
            for (int64_t i = 0; i < n; i++)
                if (g.out[j][i] != want[j * n + i])
                    fail_msg("step %d: output %d [%lld] = %g, want %g", s, j, (long long)i, (double)g.out[j][i],
                             (double)want[j * n + i]);
    }
    ember_backend_cuda_fusion_counts(be, &fc1);
    printf("# %d steps of %d host outputs: %lld ran as a CUDA graph\n", STEPS, GO_OUT,
           (long long)(fc1.graph_launches - fc0.graph_launches));
    /* the first runs op by op, the second is captured, the others replay it */
    assert_int_equal(fc1.graph_launches - fc0.graph_launches, STEPS - 1);
    for (int k = 0; k < 2; k++)
        for (int j = 0; j < GO_OUT; j++) free(outs[k][j]);
    free(xh);
    free(want);
    be->ops->act_free(be, g.x);
    ember_backend_free(be);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_head_prep_matches_unfused_and_cpu),
        cmocka_unit_test(test_graph_many_host_outputs),
    };
    return cmocka_run_group_tests(tests, test_cuda_group_setup, test_cuda_group_teardown);
}

#else

static void test_cuda_not_built(void **state)
{
    (void)state;
    skip();
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_cuda_not_built)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
#endif
