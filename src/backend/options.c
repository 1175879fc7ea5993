/*
 * options.c — the table of the backends' environment switches (options.h).
 *
 * Owns: one row per switch {environment name, field of
 * ember_backend_options, kind, default, range, one-line doc}; the defaults,
 * the parse and `ember --help-env` all read these rows.
 * Must not: be read from an op (the backends copy what they need at
 * creation), or hold switches of layers above backend/.
 */
#include "backend/options.h"
#include "base/status.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef enum opt_kind { OPT_BOOL, OPT_INT, OPT_STRING } opt_kind;

typedef struct opt_row {
    const char *env;
    opt_kind kind;
    ptrdiff_t off;         /* offsetof(ember_backend_options, field); -1: read elsewhere (OPT_STRING) */
    int32_t def, min, max; /* OPT_BOOL: def 0/1 */
    const char *def_str;   /* OPT_STRING: what an unset variable means */
    const char *doc;
} opt_row;

#define F(field) ((ptrdiff_t)offsetof(ember_backend_options, field))

static const opt_row rows[] = {
    /* CPU backend (cpu/) */
    {"EMBER_CPU_VARIANT", OPT_STRING, -1, 0, 0, 0, "best",
     "scalar|avx2|avx512: force the SIMD variant of the CPU kernels (default: the best this CPU has; "
     "read by quant/ at first use, warns and falls back when unknown or unsupported)"},
    {"EMBER_PREFETCH", OPT_INT, F(cpu_prefetch_bytes), 4096, 0, 65536, NULL,
     "bytes ahead of the weights being read that decode mat-vecs prefetch (CPU; a tuning knob for bench/matvec)"},
    {"EMBER_NO_GEMM", OPT_BOOL, F(cpu_no_gemm), 0, 0, 1, NULL,
     "1: no tiled CPU matmuls (AVX2, AVX-512 VNNI, small-batch): every output by the one-token vec_dot"},
    {"EMBER_NO_VNNI", OPT_BOOL, F(cpu_no_vnni), 0, 0, 1, NULL,
     "1: no AVX-512 VNNI matmul tiles (the AVX2 tiles instead)"},
    {"EMBER_NO_SMALL_GEMM", OPT_BOOL, F(cpu_no_small_gemm), 0, 0, 1, NULL,
     "1: no AVX-512 small-batch GEMM for batches of 2-16 tokens (A/B knob for bench/spec_cost)"},
    {"EMBER_NO_DOT_PF", OPT_BOOL, F(cpu_no_dot_pf), 0, 0, 1, NULL,
     "1: decode mat-vecs prefetch each weight row in one burst before its vec_dot, also for Q4_K/Q6_K (0: those "
     "prefetch block by block inside the dot; the same bits)"},
    {"EMBER_NO_KQ_DEC", OPT_BOOL, F(cpu_no_kq_dec), 0, 0, 1, NULL,
     "1: the Q4_K prefill tile unpacks its 4 weight rows for every group of 4 tokens (0: once per thread and matmul; the same bits)"},
    {"EMBER_NO_ATTN_MULTI", OPT_BOOL, F(cpu_no_attn_multi), 0, 0, 1, NULL,
     "1: no AVX-512 multi-query F16-cache attention (one query at a time)"},
    {"EMBER_NO_EXPF_VEC", OPT_BOOL, F(cpu_no_expf_vec), 0, 0, 1, NULL,
     "1: the multi-query attention keeps libm expf (the vector expf is used only where it matches libm bit for bit)"},
    /* CUDA backend (cuda/) */
    {"EMBER_CUDA_VERIFY", OPT_BOOL, F(cuda_verify), 0, 0, 1, NULL,
     "1: run every CUDA op on the CPU backend too and print the worst difference per op (host activations, no graphs)"},
    {"EMBER_CUDA_GRAPH_LOG", OPT_BOOL, F(cuda_graph_log), 0, 0, 1, NULL,
     "1: say on stderr why a decode step's CUDA graph was dropped (capture refused, or the first node where a "
     "replayed step differed from the captured one)"},
    {"EMBER_CUDA_GRAPHS", OPT_BOOL, F(cuda_graphs), 1, 0, 1, NULL,
     "0: no CUDA graphs (decode steps run op by op)"},
    {"EMBER_CUDA_FUSE", OPT_BOOL, F(cuda_fuse), 1, 0, 1, NULL,
     "0: no fusion of RMSNorm, power-of-two scales and GLU into the neighbouring kernels"},
    {"EMBER_CUDA_FUSE_ADD", OPT_BOOL, F(cuda_fuse_add), 1, 0, 1, NULL,
     "0: a decode step's residual add (Gemma's post-norm add, the others' plain add) runs alone, not with the next pre-norm and matmul input (1: one kernel, the same bits)"},
    {"EMBER_CUDA_FUSE_ATTN", OPT_BOOL, F(cuda_fuse_attn), 1, 0, 1, NULL,
     "0: a decode step's attention output is quantized for the output projection by its own kernel (1: by the attention kernel, the same bytes)"},
    {"EMBER_CUDA_FUSE_HEAD", OPT_BOOL, F(cuda_fuse_head), 1, 0, 1, NULL,
     "0: a layer's per-head norms, RoPE and K/V store run as separate kernels (1: one kernel, the same bits)"},
    {"EMBER_CUDA_Q8", OPT_BOOL, F(cuda_q8), 1, 0, 1, NULL,
     "0: decode matmuls on rounded F32 activations instead of the CPU-identical Q8 integer kernels"},
    {"EMBER_CUDA_MMVQ", OPT_BOOL, F(cuda_mmvq), 1, 0, 1, NULL,
     "0: the Q8 decode mat-vecs sum their exact block dots in CPU order (cuda_matmul.cu) instead of free float "
     "order (cuda_mmvq.cu; H200 2026-12-02: +23% tg256, +47% 8-stream on Gemma 3 270M); ignored with EMBER_CUDA_EXACT=1"},
    {"EMBER_CUDA_F32_ACT", OPT_BOOL, F(cuda_f32_act), 0, 0, 1, NULL,
     "1: matmuls on unrounded F32 activations (no rounding to the weights' vec_dot_type)"},
    {"EMBER_CUDA_EXACT", OPT_BOOL, F(cuda_exact), 0, 0, 1, NULL,
     "1: CUDA ops round as the CPU backend does (integer matmuls at every batch size, CPU-order attention)"},
    {"EMBER_CUDA_ROPE_TABLE", OPT_BOOL, F(cuda_rope_table), 1, 0, 1, NULL,
     "0: RoPE angles computed in the kernel instead of read from host-made cos/sin tables"},
    {"EMBER_CUDA_TF32", OPT_BOOL, F(cuda_tf32), 1, 0, 1, NULL,
     "0: prefill GEMMs with exact F32 products instead of TF32 tensor cores"},
    {"EMBER_CUDA_GEMM_F16", OPT_BOOL, F(cuda_gemm_f16), 1, 0, 1, NULL,
     "0: quantized-weight prefill GEMMs dequantize to F32 for TF32/F32 products instead of f16 tensor cores"},
    {"EMBER_CUDA_PREFILL_F16", OPT_BOOL, F(cuda_prefill_f16), 1, 0, 1, NULL,
     "0: a prompt's f16 GEMM input is rounded to the weights' vec_dot_type by a kernel of its own, then scanned and "
     "converted (1: the norm, GLU or copy kernel that makes it rounds it and writes it in f16, the same values in "
     "three passes fewer; E4B-shaped TTFT -0..4% on an H100); not with EMBER_CUDA_EXACT=1 or EMBER_CUDA_GEMM_F16=0"},
    {"EMBER_CUDA_ATTN_TC", OPT_BOOL, F(cuda_attn_tc), 1, 0, 1, NULL,
     "0: prompt runs of >= 64 queries use the flash-decoding kernel instead of f16 GEMMs on the tensor cores"},
    {"EMBER_CUDA_GDR_CHUNK", OPT_BOOL, F(cuda_gdr_chunk), 1, 0, 1, NULL,
     "0: the gated delta rule (Qwen3.5) walks prompts token by token (1: a sequence's run of >= 16 entries in an "
     "eager step takes the chunked WY form, 64-token chunks as matrix products)"},
    {"EMBER_CUDA_FEEDBACK", OPT_BOOL, F(cuda_feedback), 1, 0, 1, NULL,
     "0: the server queues a decode step only after the host read the last step's tokens (1: a lone stream's "
     "greedy steps take their tokens from the device's argmax, so the next step is queued before the host waits)"},
    {"EMBER_CUDA_PDL", OPT_BOOL, F(cuda_pdl), 1, 0, 1, NULL,
     "0: plain kernel launches (no programmatic dependent launch)"},
    {"EMBER_CUDA_CUBLAS_WS_MIB", OPT_INT, F(cuda_cublas_ws_mib), 4, 0, 65536, NULL,
     "cuBLAS workspace in MiB (0: cuBLAS's own default, 32 MiB on Hopper)"},
    {"EMBER_CUDA_ATTN_MIN_KEYS", OPT_INT, F(cuda_attn_min_keys), 32, 8, 4096, NULL,
     "keys in the shortest split of the decode attention (flash decoding): fewer, longer splits merge less"},
    {"EMBER_CUDA_MMVQ_ROWS", OPT_INT, F(cuda_mmvq_rows), 0, 0, 4, NULL,
     "rows each warp of a one-column decode mat-vec takes, one after another (1, 2 or 4, 3 counts as 4; "
     "0: by shape, 4 for a lone weight of >= 32,768 rows such as an LM head, else 1); the same outputs"},
    {"EMBER_CUDA_MMVQ_SMEM", OPT_BOOL, F(cuda_mmvq_smem), 0, 0, 1, NULL,
     "1: each warp of a one-column decode mat-vec copies its rows (EMBER_CUDA_MMVQ_ROWS of them, 1 for 0) into "
     "shared memory with cp.async before waiting on the previous kernel, then reads them there; the same outputs"},
    {"EMBER_CUDA_MMVQ_MR", OPT_INT, F(cuda_mmvq_mr), 2, 1, 4, NULL,
     "rows each warp of a 2-8 column Q4_K/Q6_K decode mat-vec (several sequences, a verification step) takes "
     "at once, each activation load serving them all (1, 2 or 4, 3 counts as 4); the same outputs"},
    {"EMBER_CUDA_MMVQ_TC", OPT_INT, F(cuda_mmvq_tc), 0, 0, 8, NULL,
     "N (2-8; 1 counts as 2): Q4_K and Q6_K decode mat-vecs of N to 8 columns run on the int8 tensor cores "
     "(Q4_K mma.m16n8k32, Q6_K mma.m16n8k16; 16 rows a CTA, every activation fragment serving 16 rows) instead of "
     "dp4a (EMBER_CUDA_MMVQ_MR); 0: never. Outputs within float summation order of the dp4a ones; unmeasured, off "
     "until a GPU run decides"},
    {"EMBER_CUDA_STACK", OPT_INT, F(cuda_stack_bytes), 128, -1, 1 << 20, NULL,
     "per-thread stack bytes (cudaLimitStackSize) the driver reserves for every resident thread (-1: the driver's 1 KiB)"},
};
enum { N_ROWS = sizeof rows / sizeof rows[0] };

static void *field(ember_backend_options *o, const opt_row *r) { return (char *)o + r->off; }

ember_backend_options ember_backend_options_default(void)
{
    ember_backend_options o;
    memset(&o, 0, sizeof o);
    o.n_gpu_layers = -1;
    o.device = 0;
    o.n_threads = 0;
    for (int i = 0; i < N_ROWS; i++) {
        const opt_row *r = &rows[i];
        if (r->kind == OPT_BOOL) *(bool *)field(&o, r) = r->def != 0;
        else if (r->kind == OPT_INT) *(int32_t *)field(&o, r) = r->def;
    }
    return o;
}

/* 1/0, true/false, yes/no, on/off in any case. */
static bool parse_bool(const char *s, bool *out)
{
    static const char *const t[] = {"1", "true", "yes", "on"}, *const f[] = {"0", "false", "no", "off"};
    for (int i = 0; i < 4; i++) {
        if (!strcasecmp(s, t[i])) { *out = true; return true; }
        if (!strcasecmp(s, f[i])) { *out = false; return true; }
    }
    return false;
}

ember_status ember_backend_options_env(ember_backend_options *o)
{
    if (!o) return ember_error(EMBER_ERR_INVALID_ARG, "ember_backend_options_env: options are NULL");
    for (int i = 0; i < N_ROWS; i++) {
        const opt_row *r = &rows[i];
        if (r->off < 0) continue;   /* read by its own layer */
        const char *v = getenv(r->env);
        if (!v || !*v) continue;
        if (r->kind == OPT_BOOL) {
            bool b;
            if (!parse_bool(v, &b))
                return ember_error(EMBER_ERR_INVALID_ARG, "%s=%s: not a boolean (1/0, true/false, yes/no, on/off)",
                                   r->env, v);
            *(bool *)field(o, r) = b;
        } else {
            char *end;
            errno = 0;
            const long x = strtol(v, &end, 10);
            if (errno || end == v || *end || x < r->min || x > r->max)
                return ember_error(EMBER_ERR_INVALID_ARG, "%s=%s: not an integer in [%d, %d]", r->env, v,
                                   (int)r->min, (int)r->max);
            *(int32_t *)field(o, r) = (int32_t)x;
        }
    }
    return EMBER_OK;
}

void ember_backend_options_print(FILE *f)
{
    fprintf(f, "Environment switches of the backends, read when a context creates its backend\n"
               "(booleans: 1/0, true/false, yes/no, on/off; a bad value fails the context with a message):\n");
    for (int i = 0; i < N_ROWS; i++) {
        const opt_row *r = &rows[i];
        char def[32];
        if (r->kind == OPT_STRING) snprintf(def, sizeof def, "%s", r->def_str);
        else snprintf(def, sizeof def, "%d", (int)r->def);
        const char *v = getenv(r->env);
        fprintf(f, "  %-26s %-6s default %s%s%s%s\n      %s\n", r->env,
                r->kind == OPT_BOOL ? "bool" : r->kind == OPT_INT ? "int" : "string", def,
                v ? " (set here: " : "", v ? v : "", v ? ")" : "", r->doc);
    }
}

int ember_backend_options_count(void) { return N_ROWS; }

const char *ember_backend_options_name(int i) { return i >= 0 && i < N_ROWS ? rows[i].env : NULL; }

void ember_print_env_switches(FILE *f) { ember_backend_options_print(f); }
