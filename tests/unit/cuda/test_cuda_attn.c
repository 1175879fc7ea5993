/* CUDA flash-attention over a paged F16 KV cache against the textbook
 * softmax(scale * q.K^T) V (Vaswani et al. 2017) in double precision over
 * the same F16 keys and values (q rounded to f16 first, the documented
 * contract): GQA, sliding windows (a query at p sees keys
 * p - n_swa < j <= p, as Gemma 3 defines them), logit soft-capping, several
 * sequences in one batch, long contexts (split-K) and a CUDA-graph replay
 * with new positions; Gemma 4's head sizes (512 on full layers, 256 on
 * sliding ones, the tiny test models' 16 and 32) and other sizes through the
 * generic kernel. Without EMBER_CUDA or without a GPU every test skips.
 * Tolerance: |out - ref| <= 3e-5 (outputs are O(1) averages of values in
 * [-1, 1]; F32 online softmax). */
#include "cuda_test.h"

#ifdef EMBER_CUDA

typedef struct attn_case {
    int n_head, n_head_kv, head_dim, n_swa, page_size, max_ctx, n_seq;
    float softcap;
} attn_case;

typedef struct attn_fixture {
    attn_case c;
    int max_pages, n_cells;
    int32_t *block_table;    /* [n_seq, max_pages] */
    uint16_t *k, *v;         /* [n_cells, n_head_kv, head_dim] F16 bits */
    void *dk, *dv, *dbt;
} attn_fixture;

static float h2f(uint16_t b)
{
    _Float16 h;
    memcpy(&h, &b, 2);
    return (float)h;
}

static uint16_t f2h(float f)
{
    _Float16 h = (_Float16)f;
    uint16_t b;
    memcpy(&b, &h, 2);
    return b;
}

static void fixture_init(attn_fixture *f, const attn_case *c)
{
    f->c = *c;
    f->max_pages = (c->max_ctx + c->page_size - 1) / c->page_size;
    f->n_cells = f->max_pages * c->page_size * c->n_seq;
    const size_t row = (size_t)c->n_head_kv * c->head_dim;
    f->k = malloc(sizeof(uint16_t) * row * f->n_cells);
    f->v = malloc(sizeof(uint16_t) * row * f->n_cells);
    f->block_table = malloc(sizeof(int32_t) * c->n_seq * f->max_pages);
    assert_true(f->k && f->v && f->block_table);
    for (size_t i = 0; i < row * f->n_cells; i++) {
        f->k[i] = f2h(test_randf(-1.f, 1.f));
        f->v[i] = f2h(test_randf(-1.f, 1.f));
    }
    /* pages of all sequences shuffled over the pool */
    const int n_pages = f->max_pages * c->n_seq;
    for (int i = 0; i < n_pages; i++) f->block_table[i] = i;
    for (int i = n_pages - 1; i > 0; i--) {
        const int j = (int)(test_rand_u32() % (uint32_t)(i + 1));
        const int32_t t = f->block_table[i];
        f->block_table[i] = f->block_table[j];
        f->block_table[j] = t;
    }
    f->dk = dev_new(f->k, sizeof(uint16_t) * row * f->n_cells);
    f->dv = dev_new(f->v, sizeof(uint16_t) * row * f->n_cells);
    f->dbt = dev_new(f->block_table, sizeof(int32_t) * n_pages);
}

static void fixture_free(attn_fixture *f)
{
    const size_t row = (size_t)f->c.n_head_kv * f->c.head_dim;
    dev_free(f->dk, sizeof(uint16_t) * row * f->n_cells);
    dev_free(f->dv, sizeof(uint16_t) * row * f->n_cells);
    dev_free(f->dbt, sizeof(int32_t) * f->max_pages * f->c.n_seq);
    free(f->k);
    free(f->v);
    free(f->block_table);
}

static void reference(const attn_fixture *f, const float *q, int n_tokens, const int32_t *pos, const int32_t *seq,
                      float scale, double *out)
{
    const attn_case *c = &f->c;
    const int D = c->head_dim, G = c->n_head / c->n_head_kv;
    double *lg = malloc(sizeof(double) * (c->max_ctx + 1));
    assert_non_null(lg);
    for (int t = 0; t < n_tokens; t++)
        for (int h = 0; h < c->n_head; h++) {
            const float *qh = q + ((size_t)t * c->n_head + h) * D;
            const int hk = h / G;
            const int lo = c->n_swa > 0 && pos[t] - c->n_swa + 1 > 0 ? pos[t] - c->n_swa + 1 : 0;
            double mx = -INFINITY;
            for (int j = lo; j <= pos[t]; j++) {
                const int cell = f->block_table[seq[t] * f->max_pages + j / c->page_size] * c->page_size +
                                 j % c->page_size;
                const uint16_t *kr = f->k + ((size_t)cell * c->n_head_kv + hk) * D;
                double d = 0;
                for (int e = 0; e < D; e++) d += (double)h2f(f2h(qh[e])) * h2f(kr[e]); /* q rounded to f16 */
                d *= scale;
                if (c->softcap > 0) d = c->softcap * tanh(d / c->softcap);
                lg[j - lo] = d;
                if (d > mx) mx = d;
            }
            double *o = out + ((size_t)t * c->n_head + h) * D, sum = 0;
            for (int e = 0; e < D; e++) o[e] = 0;
            for (int j = lo; j <= pos[t]; j++) {
                const int cell = f->block_table[seq[t] * f->max_pages + j / c->page_size] * c->page_size +
                                 j % c->page_size;
                const uint16_t *vr = f->v + ((size_t)cell * c->n_head_kv + hk) * D;
                const double p = exp(lg[j - lo] - mx);
                sum += p;
                for (int e = 0; e < D; e++) o[e] += p * h2f(vr[e]);
            }
            for (int e = 0; e < D; e++) o[e] /= sum;
        }
    free(lg);
}

/* Run the kernel (directly, or through a captured graph replayed with the
 * given positions) and compare with the reference. */
static void check_mode(const attn_fixture *f, int n_tokens, const int32_t *pos, const int32_t *seq, bool prefill);

static void check(const attn_fixture *f, int n_tokens, const int32_t *pos, const int32_t *seq)
{
    check_mode(f, n_tokens, pos, seq, false);
}

/* mode prefill: ember_cuda_attn_prefill over one run (seq[0], positions
 * pos[0] ..), whose probabilities are rounded to f16: tolerance 1e-3 */
static void check_mode(const attn_fixture *f, int n_tokens, const int32_t *pos, const int32_t *seq, bool prefill)
{
    const attn_case *c = &f->c;
    const size_t nq = (size_t)n_tokens * c->n_head * c->head_dim;
    float *q = malloc(sizeof(float) * nq), *out = malloc(sizeof(float) * nq);
    double *want = malloc(sizeof(double) * nq);
    assert_true(q && out && want);
    for (size_t i = 0; i < nq; i++) q[i] = test_randf(-1.f, 1.f);
    const float scale = 1.0f / sqrtf((float)c->head_dim) * 4.0f; /* sharper than usual: peaked softmax */
    ember_cuda_attn_params p = {
        .n_head = c->n_head, .n_head_kv = c->n_head_kv, .head_dim = c->head_dim, .scale = scale,
        .softcap = c->softcap, .n_swa = c->n_swa, .page_size = c->page_size, .max_pages = f->max_pages,
        .max_ctx = c->max_ctx,
    };
    float *dq = dev_new(q, sizeof(float) * nq), *dout = dev_new(NULL, sizeof(float) * nq);
    int32_t *dpos = dev_new(pos, sizeof(int32_t) * n_tokens), *dseq = dev_new(seq, sizeof(int32_t) * n_tokens);
    if (prefill)
        CU_OK(ember_cuda_attn_prefill(test_cu, &p, dq, n_tokens, pos[0], f->block_table + (size_t)seq[0] * f->max_pages,
                                      f->dk, f->dv, dout));
    else
        CU_OK(ember_cuda_attn(test_cu, &p, dq, n_tokens, dpos, dseq, f->dbt, f->dk, f->dv, dout));
    dev_get(out, dout, sizeof(float) * nq);
    reference(f, q, n_tokens, pos, seq, scale, want);
    const double tol = prefill ? 1e-3 : 3e-5;
    int bad = 0;
    double md = 0;
    for (size_t i = 0; i < nq; i++) {
        const double d = fabs(out[i] - want[i]);
        if (d > md || d != d) md = d;
        if (!(d <= tol) && bad++ < 5)
            print_error("D=%d G=%d swa=%d: out[%zu] (token %zu, head %zu, dim %zu) = %.7g, want %.7g\n", c->head_dim,
                        c->n_head / c->n_head_kv, c->n_swa, i, i / ((size_t)c->n_head * c->head_dim),
                        i / c->head_dim % c->n_head, i % c->head_dim, out[i], want[i]);
    }
    printf("# %s D=%d n_head=%d n_head_kv=%d swa=%d n_tokens=%d max_ctx=%d: max|out - ref| %.3g (%d of %zu over %g)\n",
           prefill ? "prompt-run" : "kernel", c->head_dim, c->n_head, c->n_head_kv, c->n_swa, n_tokens, c->max_ctx, md, bad,
           nq, tol);
    assert_int_equal(bad, 0);
    dev_free(dq, sizeof(float) * nq);
    dev_free(dout, sizeof(float) * nq);
    dev_free(dpos, sizeof(int32_t) * n_tokens);
    dev_free(dseq, sizeof(int32_t) * n_tokens);
    free(q);
    free(out);
    free(want);
}

static void test_attn_gemma3_shapes(void **state)
{
    (void)state;
    TEST_NEED_GPU();
    /* gemma-3-270m: 4 query heads, 1 KV head of 256; local layers n_swa 512 */
    const attn_case full = {.n_head = 4, .n_head_kv = 1, .head_dim = 256, .page_size = 16, .max_ctx = 2048,
                            .n_seq = 1};
    attn_case local = full;
    local.n_swa = 512;
    attn_fixture f;
    const int32_t seq0[1] = {0};
    fixture_init(&f, &full);
    for (int i = 0; i < 5; i++) {
        const int32_t pos[5] = {0, 1, 127, 700, 2047};
        check(&f, 1, &pos[i], seq0);
    }
    fixture_free(&f);
    fixture_init(&f, &local);
    const int32_t lpos[4] = {300, 511, 512, 1500};
    for (int i = 0; i < 4; i++) check(&f, 1, &lpos[i], seq0);
    fixture_free(&f);
}

static void test_attn_gqa_batch(void **state)
{
    (void)state;
    TEST_NEED_GPU();
    /* SmolLM2: 9 query heads, 3 KV heads of 64; three sequences mixed */
    const attn_case c = {.n_head = 9, .n_head_kv = 3, .head_dim = 64, .page_size = 32, .max_ctx = 300, .n_seq = 3};
    attn_fixture f;
    fixture_init(&f, &c);
    const int32_t pos[6] = {0, 299, 40, 41, 42, 5};
    const int32_t seq[6] = {2, 0, 1, 1, 1, 2};
    check(&f, 6, pos, seq);
    fixture_free(&f);
}

static void test_attn_prefill_window_softcap(void **state)
{
    (void)state;
    TEST_NEED_GPU();
    /* 8 query heads per KV head of 128, soft-capped logits, a 16-key window */
    const attn_case c = {.n_head = 16, .n_head_kv = 2, .head_dim = 128, .n_swa = 16, .page_size = 8,
                         .max_ctx = 64, .n_seq = 1, .softcap = 2.0f};
    attn_fixture f;
    fixture_init(&f, &c);
    int32_t pos[40], seq[40];
    for (int i = 0; i < 40; i++) {
        pos[i] = i;
        seq[i] = 0;
    }
    check(&f, 40, pos, seq);
    fixture_free(&f);
}

static void test_attn_graph_replay(void **state)
{
    (void)state;
    TEST_NEED_GPU();
    const attn_case c = {.n_head = 4, .n_head_kv = 1, .head_dim = 256, .page_size = 16, .max_ctx = 1024, .n_seq = 1};
    attn_fixture f;
    fixture_init(&f, &c);
    const int D = 256, H = 4;
    float q[4 * 256], out[4 * 256];
    double want[4 * 256];
    for (int i = 0; i < H * D; i++) q[i] = test_randf(-1.f, 1.f);
    const float scale = 1.0f / 16.0f;
    ember_cuda_attn_params p = {.n_head = H, .n_head_kv = 1, .head_dim = D, .scale = scale, .page_size = 16,
                                .max_pages = f.max_pages, .max_ctx = c.max_ctx};
    int32_t pos = 3, seq = 0;
    float *dq = dev_new(q, sizeof q), *dout = dev_new(NULL, sizeof out);
    int32_t *dpos = dev_new(&pos, sizeof pos), *dseq = dev_new(&seq, sizeof seq);
    /* warm-up call sizes the scratch; then capture the same call */
    CU_OK(ember_cuda_attn(test_cu, &p, dq, 1, dpos, dseq, f.dbt, f.dk, f.dv, dout));
    CU_OK(ember_cuda_synchronize(test_cu));
    ember_cuda_graph *g = NULL;
    CU_OK(ember_cuda_graph_begin(test_cu));
    CU_OK(ember_cuda_attn(test_cu, &p, dq, 1, dpos, dseq, f.dbt, f.dk, f.dv, dout));
    CU_OK(ember_cuda_graph_end(test_cu, &g));
    const int32_t steps[3] = {10, 999, 400};
    for (int s = 0; s < 3; s++) {
        pos = steps[s];
        CU_OK(ember_cuda_upload(test_cu, dpos, &pos, sizeof pos));
        CU_OK(ember_cuda_graph_launch(test_cu, g));
        dev_get(out, dout, sizeof out);
        reference(&f, q, 1, &pos, &seq, scale, want);
        for (int i = 0; i < H * D; i++)
            if (!(fabs(out[i] - want[i]) <= 3e-5))
                fail_msg("graph step pos %d: out[%d] = %.7g, want %.7g", pos, i, out[i], want[i]);
    }
    ember_cuda_graph_free(g);
    dev_free(dq, sizeof q);
    dev_free(dout, sizeof out);
    dev_free(dpos, sizeof pos);
    dev_free(dseq, sizeof seq);
    fixture_free(&f);
}

/* Gemma 4 E4B: 8 query heads on 2 KV heads; full layers of 512 (the tuned
 * D = 512 kernel), sliding layers of 256 with a 512-key window; decode at
 * several positions (split-K for long spans) and a prefill of 48 rows. */
static void test_attn_gemma4_e4b_shapes(void **state)
{
    (void)state;
    TEST_NEED_GPU();
    const attn_case full = {.n_head = 8, .n_head_kv = 2, .head_dim = 512, .page_size = 32, .max_ctx = 2048,
                            .n_seq = 2};
    attn_case local = full;
    local.head_dim = 256;
    local.n_swa = 512;
    attn_fixture f;
    const int32_t pos[5] = {0, 1, 100, 777, 2047}, seq[5] = {0, 1, 0, 1, 0};
    fixture_init(&f, &full);
    for (int i = 0; i < 5; i++) check(&f, 1, &pos[i], &seq[i]);
    check(&f, 5, pos, seq);   /* a batch of decodes of two sequences */
    int32_t ppos[48], pseq[48];
    for (int i = 0; i < 48; i++) {
        ppos[i] = 600 + i;
        pseq[i] = 1;
    }
    check(&f, 48, ppos, pseq);
    fixture_free(&f);
    fixture_init(&f, &local);
    for (int i = 0; i < 5; i++) check(&f, 1, &pos[i], &seq[i]);
    check(&f, 48, ppos, pseq);
    fixture_free(&f);
}

/* The generic kernel: tiny gemma4's head sizes 16 (sliding, window 4) and
 * 32 (full) with 2 query heads per KV head; 512 with 8 heads per KV head
 * (beyond the tuned D = 512 kernel); 80 and 96; 16 heads per KV head. */
static void test_attn_generic_sizes(void **state)
{
    (void)state;
    TEST_NEED_GPU();
    const attn_case cases[] = {
        {.n_head = 4, .n_head_kv = 2, .head_dim = 16, .n_swa = 4, .page_size = 32, .max_ctx = 256, .n_seq = 1},
        {.n_head = 4, .n_head_kv = 2, .head_dim = 32, .page_size = 32, .max_ctx = 256, .n_seq = 1},
        {.n_head = 8, .n_head_kv = 1, .head_dim = 512, .page_size = 16, .max_ctx = 300, .n_seq = 1},
        {.n_head = 4, .n_head_kv = 1, .head_dim = 80, .page_size = 16, .max_ctx = 200, .n_seq = 1, .softcap = 3.0f},
        {.n_head = 6, .n_head_kv = 2, .head_dim = 96, .n_swa = 37, .page_size = 8, .max_ctx = 200, .n_seq = 1},
        {.n_head = 16, .n_head_kv = 1, .head_dim = 64, .page_size = 16, .max_ctx = 150, .n_seq = 1},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        attn_fixture f;
        fixture_init(&f, &cases[k]);
        const int32_t seq0[1] = {0};
        const int32_t dpos[4] = {0, 3, 70, cases[k].max_ctx - 1};
        for (int i = 0; i < 4; i++) check(&f, 1, &dpos[i], seq0);
        int32_t pos[40], seq[40];
        for (int i = 0; i < 40; i++) {
            pos[i] = 100 + i;
            seq[i] = 0;
        }
        check(&f, 40, pos, seq);
        fixture_free(&f);
    }
}

/* Prompt runs on the tensor cores (ember_cuda_attn_prefill): runs from
 * position 0 and from deep in the context, full and sliding-window layers
 * (the run longer than the window), soft-capping, GQA groups of 1, 3, 4
 * and 8, head sizes 64-512, over shuffled pages. */
static void test_attn_prompt_runs(void **state)
{
    (void)state;
    TEST_NEED_GPU();
    const attn_case cases[] = {
        {.n_head = 4, .n_head_kv = 1, .head_dim = 256, .page_size = 32, .max_ctx = 1400, .n_seq = 2},             /* gemma3 */
        {.n_head = 4, .n_head_kv = 1, .head_dim = 256, .n_swa = 512, .page_size = 32, .max_ctx = 1400, .n_seq = 1},
        {.n_head = 8, .n_head_kv = 2, .head_dim = 512, .page_size = 32, .max_ctx = 1400, .n_seq = 1},             /* E4B full */
        {.n_head = 8, .n_head_kv = 2, .head_dim = 256, .n_swa = 512, .page_size = 32, .max_ctx = 1400, .n_seq = 1},
        {.n_head = 9, .n_head_kv = 3, .head_dim = 64, .page_size = 32, .max_ctx = 1400, .n_seq = 1},              /* SmolLM2 */
        {.n_head = 16, .n_head_kv = 2, .head_dim = 128, .n_swa = 16, .page_size = 8, .max_ctx = 1400, .n_seq = 1,
         .softcap = 2.0f},
    };
    static int32_t pos[1400], seq[1400];
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        attn_fixture f;
        fixture_init(&f, &cases[k]);
        const int s = cases[k].n_seq - 1;
        for (int i = 0; i < 700; i++) {   /* a prompt from the start */
            pos[i] = i;
            seq[i] = s;
        }
        check_mode(&f, 700, pos, seq, true);
        for (int i = 0; i < 130; i++) {   /* a later chunk of a long prompt */
            pos[i] = 1250 + i;
            seq[i] = s;
        }
        check_mode(&f, 130, pos, seq, true);
        if (k == 0) {   /* more queries than one chunk (1024): two chunks */
            for (int i = 0; i < 1100; i++) {
                pos[i] = 250 + i;
                seq[i] = s;
            }
            check_mode(&f, 1100, pos, seq, true);
        }
        fixture_free(&f);
    }
}

static void test_attn_rejects_bad_params(void **state)
{
    (void)state;
    TEST_NEED_GPU();
    float *d = dev_new(NULL, 4096);
    ember_cuda_attn_params p = {.n_head = 4, .n_head_kv = 1, .head_dim = 1040, .scale = 0.1f, .page_size = 16,
                                .max_pages = 4, .max_ctx = 64};
    const int32_t *i32 = (const int32_t *)d;
    const uint16_t *h = (const uint16_t *)d;
    assert_int_equal(ember_cuda_attn(test_cu, &p, d, 1, i32, i32, i32, h, h, d), EMBER_ERR_UNSUPPORTED);
    p.head_dim = 64;
    p.n_head_kv = 3;
    assert_int_equal(ember_cuda_attn(test_cu, &p, d, 1, i32, i32, i32, h, h, d), EMBER_ERR_INVALID_ARG);
    p.n_head_kv = 1;
    p.max_ctx = 65; /* 4 pages of 16 hold 64 */
    assert_int_equal(ember_cuda_attn(test_cu, &p, d, 1, i32, i32, i32, h, h, d), EMBER_ERR_INVALID_ARG);
    p.max_ctx = 64;
    p.scale = 0.f;
    assert_int_equal(ember_cuda_attn(test_cu, &p, d, 1, i32, i32, i32, h, h, d), EMBER_ERR_INVALID_ARG);
    dev_free(d, 4096);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_attn_gemma3_shapes),
        cmocka_unit_test(test_attn_gqa_batch),
        cmocka_unit_test(test_attn_prefill_window_softcap),
        cmocka_unit_test(test_attn_graph_replay),
        cmocka_unit_test(test_attn_gemma4_e4b_shapes),
        cmocka_unit_test(test_attn_generic_sizes),
        cmocka_unit_test(test_attn_prompt_runs),
        cmocka_unit_test(test_attn_rejects_bad_params),
    };
    return cmocka_run_group_tests(tests, test_cuda_group_setup, test_cuda_group_teardown);
}

#else /* !EMBER_CUDA */

static void test_cuda_not_built(void **state)
{
    (void)state;
    print_message("built without -DEMBER_CUDA=ON: CUDA attention tests skipped\n");
    skip();
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_cuda_not_built)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}

#endif
