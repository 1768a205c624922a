/* How a flash attention call (it_kernels.flash_attention_fwd / _bwd, backend.h) becomes the
 * CUDA backend's kernel launches (flash_attention.cu). Pure host logic with no CUDA header,
 * so that tests/unit/test_cuda_flash_plan.c checks it on any machine: the planner validates a
 * call against the slot's contract and declines what the kernels cannot take, picks the tiles,
 * grids and shared memory, and gives the per-(b, h) offsets; the test runs the planned block
 * loops through a host executor and compares them with fp64 attention.
 *
 * The kernels (FlashAttention-2, Dao 2023; plain CUDA C++, fp32 arithmetic in shared memory
 * and registers, no tensor cores):
 *   forward  one CTA per (query block of BR rows, head h, batch b): Q tile staged in shared
 *            memory, the key blocks of BC keys that its rows see (causal: those up to the
 *            last visible key; none past it) staged K and V in turn, scores, running max and
 *            sum per row (online softmax), O rescaled and accumulated in registers; writes
 *            y and lse once.
 *   dk/dv    one CTA per (key block of BC keys, kv head, batch): K and V tiles stay in shared
 *            memory, dK and dV accumulate in registers over the query heads of the group and
 *            their query blocks (causal: from the first that sees the key block); written
 *            once per key (no atomics).
 *   dq       one CTA per (query block, head, batch), looping over key blocks as the forward;
 *            dQ in registers, written once (deterministic).
 * Both backward kernels recompute P = exp(s - lse) and delta_t = dy_t . y_t for the rows they
 * stage: the slot has no workspace to keep delta in, and recomputing it costs BR * D per
 * BR * BC * D block product.
 *
 * Threads: a CTA has 256 threads, TPR consecutive lanes per row (query row in the forward and
 * dq, key row in dk/dv; TPR divides 32, so a row's lanes share a warp and reduce by
 * shuffles). A row's lanes split the BC (BR) scores of a block between them, and the D
 * columns of the row's accumulators (column lane + i TPR). Shared tiles are fp32 with a row
 * pitch of D + 1 floats, so the lanes reading different rows at one column hit different
 * banks. */
#ifndef IT_CUDA_FLASH_PLAN_H
#define IT_CUDA_FLASH_PLAN_H

#include "infinitrain/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifdef __CUDACC__
#define CU_FLASH_FN __host__ __device__ static inline
#else
#define CU_FLASH_FN static inline
#endif

/* The largest head size the kernels take (larger ones are declined: the core composes). */
#define CU_FLASH_MAX_D 256
/* Threads per CTA of every flash kernel. */
#define CU_FLASH_THREADS 256
/* Shared memory a CTA gets without opting in (cudaFuncAttributeMaxDynamicSharedMemorySize). */
#define CU_FLASH_SMEM_DEFAULT 49152
/* The least opt-in limit of the GPUs the plugin builds for (sm_86 / sm_89 / sm_120: 99 KiB;
 * sm_80 and sm_87 have 163 KiB, sm_90 227 KiB): every tile below fits it. */
#define CU_FLASH_SMEM_MIN_OPTIN 101376

/* The kernels are compiled for three head-size buckets (the register arrays are sized by
 * the bucket, D <= DMAX at run time); each bucket has its tiles. Constant expressions in C and
 * C++, so that the kernels take them as template constants and the planner as numbers. */
#define CU_FLASH_DMAX(D) ((D) <= 64 ? 64 : (D) <= 128 ? 128 : 256)
/* forward: query rows per CTA, keys per block, threads per query row */
#define CU_FLASH_FWD_BR(dm) ((dm) <= 128 ? 64 : 32)
#define CU_FLASH_FWD_BC(dm) ((dm) <= 128 ? 32 : 16)
#define CU_FLASH_FWD_TPR(dm) ((dm) <= 128 ? 4 : 8)
/* dq: query rows per CTA, keys per block, threads per query row */
#define CU_FLASH_DQ_BR(dm) ((dm) <= 64 ? 64 : (dm) <= 128 ? 32 : 16)
#define CU_FLASH_DQ_BC(dm) ((dm) <= 128 ? 32 : 16)
#define CU_FLASH_DQ_TPR(dm) ((dm) <= 64 ? 4 : (dm) <= 128 ? 8 : 16)
/* dk/dv: keys per CTA (BC), query rows per block (BR), threads per key */
#define CU_FLASH_KV_BC(dm) ((dm) <= 64 ? 64 : (dm) <= 128 ? 32 : 16)
#define CU_FLASH_KV_BR(dm) ((dm) <= 128 ? 32 : 16)
#define CU_FLASH_KV_TPR(dm) ((dm) <= 64 ? 4 : (dm) <= 128 ? 8 : 16)

/* Shared memory of each kernel, in floats, for row pitch ld = D + 1 (the order the kernels
 * carve it in):
 *   forward  Q (BR x ld), K (BC x ld), V (BC x ld), P (BR x (BC + 1))
 *   dq       Q, dY (BR x ld each), K, V (BC x ld each), dS (BR x (BC + 1))
 *   dk/dv    K, V (BC x ld each), Q, dY (BR x ld each), P^T, dS^T (BC x (BR + 1) each),
 *            lse, delta (BR each) */
CU_FLASH_FN int64_t cu_flash_fwd_smem_floats(int64_t br, int64_t bc, int64_t ld) {
    return br * ld + 2 * bc * ld + br * (bc + 1);
}
CU_FLASH_FN int64_t cu_flash_dq_smem_floats(int64_t br, int64_t bc, int64_t ld) {
    return 2 * br * ld + 2 * bc * ld + br * (bc + 1);
}
CU_FLASH_FN int64_t cu_flash_kv_smem_floats(int64_t br, int64_t bc, int64_t ld) {
    return 2 * bc * ld + 2 * br * ld + 2 * bc * (br + 1) + 2 * br;
}

/* A (B, heads, rows, D) view with a unit last stride: element [b, h, r, d] at
 * data + b * sb + h * sh + r * sr + d (elements). */
typedef struct cu_flash_view {
    void *data;
    int64_t sb, sh, sr;
} cu_flash_view;

/* One kernel's launch: CTAs of `threads` threads on grid (x, y, z), `smem` bytes of dynamic
 * shared memory (opt_in: above the 48 KiB default, cudaFuncSetAttribute first). `rows` and
 * `cols` are its tile: for the forward and dq, query rows per CTA and keys per block; for
 * dk/dv, keys per CTA and query rows per block. tpr: threads per row of the tile. grid.x 0:
 * nothing to launch. */
typedef struct cu_flash_launch {
    int rows, cols, tpr, threads;
    unsigned grid_x, grid_y, grid_z;
    size_t smem;
    bool opt_in;
} cu_flash_launch;

typedef struct cu_flash_plan {
    it_dtype dtype; /* of q, k, v, y (dy, dq, dk, dv) */
    int dmax;       /* the head-size bucket: 64, 128, 256 */
    int64_t B, H, Hkv, group, T, S, D;
    int64_t ld; /* shared row pitch in floats: D + 1 */
    float scale;
    bool causal;
    int64_t q_offset;             /* clamped to [-T, S]: the same mask, no overflow */
    cu_flash_view q, k, v, y;     /* y: the output (forward), the saved one (backward) */
    cu_flash_view dy, dq, dk, dv; /* backward only (zero in a forward plan) */
    float *lse;                   /* (B, H, T) contiguous: written (forward), read (backward) */
    /* The three kernels. A forward plan has all three (the backward must take what the
     * forward took); each call launches its own. */
    cu_flash_launch launch_fwd, launch_kv, launch_dq;
} cu_flash_plan;

/* Plan a forward call. smem_limit: the device's opt-in shared memory per block
 * (cudaDevAttrMaxSharedMemoryPerBlockOptin). IT_ERR_INVALID_ARG for a malformed call (a NULL
 * descriptor or data pointer, wrong rank, negative sizes or strides, shapes that disagree);
 * IT_ERR_UNSUPPORTED, nothing written, for what the kernels do not take, each with its reason:
 * a dtype other than fp32 / bf16 / fp16, q, k, v, y of different dtypes, lse not fp32 or not
 * contiguous, a last stride other than 1, Hkv not dividing H, D > CU_FLASH_MAX_D, an output
 * with a 0 stride on a dimension longer than 1, a grid beyond CUDA's limits, tiles beyond
 * smem_limit. A forward plan also plans the backward of its shapes and declines when that
 * would be declined (backend.h: a backend that takes a forward call takes its backward). */
it_status cu_flash_plan_fwd(const it_flash_args *args, const it_tdesc *q, const it_tdesc *k, const it_tdesc *v,
                            const it_tdesc *y, const it_tdesc *lse, size_t smem_limit, cu_flash_plan *p);
/* Plan a backward call: as the forward, with dy (q's shape), dq (q's), dk and dv (k's), all of
 * q's dtype with a unit last stride. */
it_status cu_flash_plan_bwd(const it_flash_args *args, const it_tdesc *q, const it_tdesc *k, const it_tdesc *v,
                            const it_tdesc *y, const it_tdesc *dy, const it_tdesc *lse, const it_tdesc *dq,
                            const it_tdesc *dk, const it_tdesc *dv, size_t smem_limit, cu_flash_plan *p);

/* ---------------------------------------------------------------- shared with the kernels
 * The block arithmetic the kernels and the test's host executor both run. */

/* Offset in elements of row r of head h of batch b (its element d is d further). */
CU_FLASH_FN int64_t cu_flash_at(const cu_flash_view *v, int64_t b, int64_t h, int64_t r) {
    return b * v->sb + h * v->sh + r * v->sr;
}

/* Whether query row t sees key j (0 <= t < T, 0 <= j < S). */
CU_FLASH_FN bool cu_flash_visible(const cu_flash_plan *p, int64_t t, int64_t j) {
    return !p->causal || j <= t + p->q_offset;
}

/* The key blocks of `bc` keys that query rows [t0, t0 + rows) see: blocks [0, return). Past
 * the causal limit of the last row none is visited. */
CU_FLASH_FN int64_t cu_flash_key_blocks(const cu_flash_plan *p, int64_t t0, int64_t rows, int64_t bc) {
    int64_t end = p->S; /* one past the last key any row sees */
    if (p->causal && t0 + rows + p->q_offset < end) end = t0 + rows + p->q_offset;
    return end <= 0 ? 0 : (end + bc - 1) / bc;
}

/* The first query block of `br` rows with a row that sees key j0 (and so keys j0..): blocks
 * before it see nothing of the key block starting at j0. The block count when no row does. */
CU_FLASH_FN int64_t cu_flash_first_query_block(const cu_flash_plan *p, int64_t j0, int64_t br) {
    if (!p->causal) return 0;
    int64_t t = j0 - p->q_offset; /* the first row that sees j0 */
    if (t >= p->T) return (p->T + br - 1) / br;
    return t <= 0 ? 0 : t / br;
}

/* The query block a forward or dq CTA with blockIdx.x = bx takes: under causal the last (the
 * longest) first, so that the long CTAs do not trail at the end of the grid. */
CU_FLASH_FN int64_t cu_flash_query_block(const cu_flash_plan *p, const cu_flash_launch *l, int64_t bx) {
    return p->causal ? (int64_t)l->grid_x - 1 - bx : bx;
}

#ifdef __cplusplus
}
#endif
#endif
