/*
 * backend_cuda.h — the CUDA backend behind the op table (backend/backend.h).
 *
 * Owns: creating an ember_backend whose ops run the kernels of
 * cuda_backend.h. Compiled only with -DEMBER_CUDA=ON.
 * Must not: be included by code that is built without EMBER_CUDA.
 */
#ifndef EMBER_BACKEND_CUDA_H
#define EMBER_BACKEND_CUDA_H

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"

#include <stdio.h>

/* CUDA backend on device opt->device (opt NULL: the options table's
 * defaults): weights and norm vectors are uploaded once, on first use, keyed
 * by their host address; the KV cache lives on the device (F16 only);
 * activations live on the device when the context takes them from
 * act_alloc; decode steps of up to 32 entries run as CUDA graphs
 * (cuda_graph.c). opt->cuda_verify runs every op on the CPU backend too
 * (host activations, no graphs); the other cuda_* switches are read here
 * and by ember_cuda_new. Called by ember_backend_new (registry.c).
 * Errors: EMBER_ERR_INVALID_ARG (no such device), EMBER_ERR_NOMEM,
 * EMBER_ERR_INTERNAL. */
ember_status ember_backend_cuda_new(const ember_backend_options *opt, const ember_backend_limits *lim,
                                    ember_backend **out);

/* Fused launches a CUDA backend has made (eagerly or into a captured
 * graph; replays are not counted), for tests that must see a fusion
 * happen: head_prep counts ember_cuda_head_prep launches, each standing for
 * a layer's per-head norms, RoPE and K/V store; graph_launches the steps
 * that ran as a graph (replays counted), for tests that must see a step
 * captured. be must be a CUDA backend. */
typedef struct ember_cuda_fusion_counts {
    int64_t head_prep;
    int64_t add_norm;    /* ember_cuda_add_norm_quant_q8: a post-norm add with the next matmul's input */
    int64_t attn_quant;  /* attention kernels that wrote the next matmul's Q8 input */
    int64_t graph_launches;   /* steps run as a CUDA graph (a capture's launch and every replay) */
} ember_cuda_fusion_counts;
void ember_backend_cuda_fusion_counts(const ember_backend *be, ember_cuda_fusion_counts *out);

/* What a CUDA backend holds, for the memory report (bytes unless said). */
typedef struct ember_cuda_report {
    int64_t n_ctx, n_ubatch;          /* the limits it was sized for, tokens */
    uint64_t weight_bytes, vec_bytes, kv_bytes;     /* device copies: weight matrices, norm/rope vectors, KV buffers */
    int64_t weight_count, vec_count, kv_count;
    int32_t n_chunks;                 /* arena chunks holding those copies */
    uint64_t arena_bytes, arena_used;
    uint64_t act_bytes;               /* activation scratch (act_alloc) */
    uint64_t round_bytes, io_bytes;   /* rounded-activation staging; host in/out staging (logits) */
    uint64_t step_bytes;              /* step arrays (tokens, positions, cells, block tables) */
    uint64_t rope_bytes;              /* RoPE cos/sin tables */
    int32_t n_rope_tables;
    uint64_t pinned_bytes;            /* host_alloc (logits) */
    uint64_t up_pin_bytes;            /* pinned staging of host inputs (gemma4's per-layer embeddings) */
    uint64_t rs_bytes;                /* recurrent state memory (state_alloc: live cells and snapshots) */
    int32_t rs_count;                 /* its blocks */
    ember_cuda_mem_stats_t mem;       /* the context's own (cuda_backend.h) */
} ember_cuda_report;

/* Print r by category (weights, norm vectors, KV cache, arena slack,
 * activation scratch, staging, step arrays, RoPE tables, kernel scratch,
 * cuBLAS workspace, driver stack reservation, pinned host buffers), in MiB,
 * a few lines starting "ember: " (cuda_report.c). Weights and KV are
 * uploaded on first use: meaningful after a decode. */
void ember_cuda_report_print(const ember_cuda_report *r, FILE *f);

#endif
