/*
 * options.h — the backends' options: placement chosen by the caller and the
 * environment switches (EMBER_CUDA_*, EMBER_NO_*, EMBER_PREFETCH), one table.
 *
 * Owns: ember_backend_options (what ember_backend_new hands to the CPU and
 * CUDA backends), the table of environment switches (name, field, default,
 * one-line doc) in options.c, parsing it once, and printing it
 * (`ember --help-env`). Redis's standardConfig table is the model: one row
 * per knob, so the docs cannot drift from the code.
 * Must not: read the environment anywhere else in src/backend/ (the ops see
 * only the parsed struct), or know models or contexts.
 *
 * One row is documented here but read elsewhere, because its reader sits
 * below backend/: EMBER_CPU_VARIANT (quant/quant.c picks the SIMD variant of
 * the block kernels at first use, process-wide, before any backend exists,
 * and warns and falls back on a bad value). The table prints it like the
 * others and has no field for it.
 */
#ifndef EMBER_BACKEND_OPTIONS_H
#define EMBER_BACKEND_OPTIONS_H

#include "ember.h"

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ember_backend_options {
    /* placement (from ember_model_params / ember_context_params, not the
     * environment) */
    int32_t n_gpu_layers;    /* 0: the CPU backend; otherwise a GPU backend when one is built in and a device exists */
    int32_t device;          /* CUDA device index */
    int32_t n_threads;       /* CPU worker threads; <= 0: one per core */
    /* CPU backend (cpu/cpu.c) */
    int32_t cpu_prefetch_bytes;  /* EMBER_PREFETCH: decode mat-vec weight prefetch distance, bytes */
    bool cpu_no_gemm;        /* EMBER_NO_GEMM: no tiled GEMMs (every matmul by vec_dot) */
    bool cpu_no_vnni;        /* EMBER_NO_VNNI: no AVX-512 VNNI tiles */
    bool cpu_no_small_gemm;  /* EMBER_NO_SMALL_GEMM: no AVX-512 small-batch GEMM */
    bool cpu_no_dot_pf;      /* EMBER_NO_DOT_PF: decode mat-vecs never use the prefetching vec_dot_pf */
    bool cpu_no_kq_dec;      /* EMBER_NO_KQ_DEC: no decoded-rows scratch for the Q4_K prefill tile */
    bool cpu_no_attn_multi;  /* EMBER_NO_ATTN_MULTI: no multi-query F16 attention */
    bool cpu_no_expf_vec;    /* EMBER_NO_EXPF_VEC: scalar libm expf in the multi-query attention */
    /* CUDA backend (cuda/backend_cuda.c, cuda/cuda_core.cu) */
    bool cuda_verify;        /* EMBER_CUDA_VERIFY: run every op on the CPU too and compare */
    bool cuda_graphs;        /* EMBER_CUDA_GRAPHS: capture and replay decode steps as CUDA graphs */
    bool cuda_feedback;      /* EMBER_CUDA_FEEDBACK: greedy steps take their tokens from the device (caps.token_feedback) */
    bool cuda_graph_log;     /* EMBER_CUDA_GRAPH_LOG: why a graph was dropped, on stderr */
    bool cuda_fuse;          /* EMBER_CUDA_FUSE: fuse norm/scale/GLU into neighbouring kernels */
    bool cuda_fuse_add;      /* EMBER_CUDA_FUSE_ADD: post-norm add + next pre-norm + quantize in one kernel */
    bool cuda_fuse_head;     /* EMBER_CUDA_FUSE_HEAD: per-head norms + RoPE + K/V store in one kernel */
    bool cuda_fuse_attn;     /* EMBER_CUDA_FUSE_ATTN: decode attention quantizes the next matmul's input */
    bool cuda_q8;            /* EMBER_CUDA_Q8: integer mat-vec on Q8 activations (CPU-identical) */
    bool cuda_mmvq;          /* EMBER_CUDA_MMVQ: Q8 mat-vecs in free float order (cuda_mmvq.cu) */
    bool cuda_f32_act;       /* EMBER_CUDA_F32_ACT: matmul on unrounded F32 activations */
    bool cuda_exact;         /* EMBER_CUDA_EXACT: every op in the CPU's order and rounding */
    bool cuda_rope_table;    /* EMBER_CUDA_ROPE_TABLE: RoPE angles from host-made tables */
    bool cuda_tf32;          /* EMBER_CUDA_TF32: prefill GEMMs on TF32 tensor cores */
    bool cuda_gemm_f16;      /* EMBER_CUDA_GEMM_F16: quantized prefill GEMMs on f16 tensor cores */
    bool cuda_attn_tc;       /* EMBER_CUDA_ATTN_TC: prompt-run attention as f16 GEMMs on the tensor cores */
    bool cuda_prefill_f16;   /* EMBER_CUDA_PREFILL_F16: prompt GEMM inputs written in f16 by their producer */
    bool cuda_gdr_chunk;     /* EMBER_CUDA_GDR_CHUNK: prefill runs of the gated delta rule in the chunked form */
    bool cuda_pdl;           /* EMBER_CUDA_PDL: programmatic dependent launch */
    int32_t cuda_cublas_ws_mib;  /* EMBER_CUDA_CUBLAS_WS_MIB: cuBLAS workspace, MiB (0: cuBLAS's own) */
    int32_t cuda_attn_min_keys;  /* EMBER_CUDA_ATTN_MIN_KEYS: shortest key split of the decode attention */
    int32_t cuda_mmvq_rows;      /* EMBER_CUDA_MMVQ_ROWS: rows per warp of a one-column decode mat-vec (0: by shape) */
    bool cuda_mmvq_smem;         /* EMBER_CUDA_MMVQ_SMEM: one-column mat-vecs stage their rows in shared memory */
    int32_t cuda_mmvq_mr;        /* EMBER_CUDA_MMVQ_MR: rows per warp of a 2-8 column Q4_K/Q6_K mat-vec (1, 2 default, 4) */
    int32_t cuda_mmvq_tc;        /* EMBER_CUDA_MMVQ_TC: Q4_K/Q6_K mat-vecs of >= this many columns on the tensor cores (0: off) */
    int32_t cuda_stack_bytes;    /* EMBER_CUDA_STACK: cudaLimitStackSize per thread, bytes (-1: the driver's) */
} ember_backend_options;

/* Every field at its table default; placement: n_gpu_layers -1 (all layers
 * on a GPU when there is one), device 0, n_threads 0 (all cores). Reads no
 * environment. */
ember_backend_options ember_backend_options_default(void);

/* Overwrite the switch fields of *o (not the placement) from the
 * environment, one getenv per table row; unset or empty variables leave the
 * field as it is. Booleans take 1/0, true/false, yes/no, on/off (any case);
 * integers a decimal in the row's range. Errors: EMBER_ERR_INVALID_ARG for a
 * value that does not parse or is out of range, naming the variable, the
 * value and what it accepts (*o then holds the rows before it). It
 * leaves EMBER_CPU_VARIANT to quant/ (above). */
ember_status ember_backend_options_env(ember_backend_options *o);

/* Print the table: for each switch its name, default, the value in this
 * process's environment (if set) and its one-line doc, a few lines per
 * row, for `ember --help-env`. */
void ember_backend_options_print(FILE *f);

/* Rows of the table and the name of row i (i < count), for tests and docs. */
int ember_backend_options_count(void);
const char *ember_backend_options_name(int i);

#ifdef __cplusplus
}
#endif

#endif
