/* The MLU backend's private header, shared by its files:
 *
 *   host_ew.c  pure host planning of the elementwise / reduce / cross-entropy / optimizer
 *              BANG kernels (unit-tested with host.c)
 *   host.c     pure host logic, no driver: dtype map, the 13x13 cast plan, descriptor
 *              narrowing (int64 -> int32, checked), softmax's 3-D reshape, workspace sizing,
 *              error formatting. Unit-tested everywhere (tests/unit/test_mlu_host.c).
 *   loader.c   dlopen/dlsym of libcnrt.so, libcnnl.so, libcncl.so into mlu_api
 *   runtime.c  init, devices, queues (streams), notifiers (events), CNNL handle per queue
 *   memory.c   cnrtMalloc/cnrtFree, copies (pinned staging for async H2D), mem info, tracker,
 *              per-queue device scratch
 *   kernels.c  the kernel table over CNNL (cast, fill, copy, gemm, layernorm, embedding)
 *   kernels_llm.c  rmsnorm, topk over CNNL; host sides of the BANG kernels in bang/
 *   kernels_ew.c  launch sides of bang/elementwise, reduce, crossentropy, optim .mlu
 *   ccl.c      it_ccl over CNCL
 *   backend.c  the it_backend struct and the plugin entry point
 * Nothing here is seen by the core; the core sees only backend.h. */
#ifndef IT_MLU_H
#define IT_MLU_H

#include <pthread.h>
#include <stdbool.h>

#include "infinitrain/backend.h"
#include "mlu_api.h"

#define MLU_MAX_DEVICES 64
#define MLU_MSG_BYTES 1024

/* ================================================================ host.c (pure logic) */

/* cnnlDataType_t for an it_dtype (MLU_CNNL_DTYPE_INVALID outside the enum). */
int mlu_cnnl_dtype(it_dtype dt);
/* "CNNL_DTYPE_FLOAT" etc., for messages. */
const char *mlu_cnnl_dtype_name(int cnnl_dtype);

/* ---- cast plans. Each of the 169 (src, dst) pairs is served by a short chain of steps on
 * contiguous buffers:
 *   CNNL         cnnlCastDataType with CNNL_CAST_<from>_TO_<to>, only pairs public code
 *                calls (mlu_cast_direct); never HALF <-> BFLOAT16
 *   REINTERPRET  same bytes, another integer type of the same width (two's complement wrap
 *                is a no-op); no device work
 *   LOW          integer narrowing that wraps: keep the low bytes of each element (cnnlCopy
 *                from a strided view; little-endian)
 *   ZEXT         unsigned widening: cnrtMemsetAsync 0, then cnnlCopy into the low bytes
 * `exact` is false where the chain cannot reproduce backend.h's CPU semantics bit for bit;
 * `note` says what differs. */
typedef enum mlu_step_kind { MLU_STEP_CNNL, MLU_STEP_REINTERPRET, MLU_STEP_LOW, MLU_STEP_ZEXT } mlu_step_kind;
typedef struct mlu_cast_step {
    mlu_step_kind kind;
    it_dtype from, to;
} mlu_cast_step;
#define MLU_CAST_MAX_STEPS 4
typedef struct mlu_cast_plan {
    int nsteps;
    mlu_cast_step steps[MLU_CAST_MAX_STEPS];
    bool exact;
    const char *note; /* NULL when exact */
} mlu_cast_plan;

/* True when CNNL_CAST_<from>_TO_<to> is in mlu_api.h's MLU_CNNL_CAST_TABLE. */
bool mlu_cast_direct(it_dtype from, it_dtype to);
/* Writes "CNNL_CAST_FLOAT_TO_HALF" into buf (>= 48 bytes); returns buf. */
const char *mlu_cast_enum_name(it_dtype from, it_dtype to, char *buf, size_t n);
it_status mlu_cast_plan_for(it_dtype src, it_dtype dst, mlu_cast_plan *plan);
/* The cnnlCastDataType_t value of a direct pair (MLU_CNNL_CAST_TABLE); false for other pairs. */
bool mlu_cnnl_cast_value(it_dtype from, it_dtype to, int *value);
/* Device scratch the plan needs for n elements: intermediates (max of two live buffers
 * per step), plus a contiguous gather of src and/or dst when they are strided. */
size_t mlu_cast_workspace_bytes(const mlu_cast_plan *plan, int64_t n, bool src_contig, bool dst_contig);

/* ---- descriptors: CNNL takes int32 dims and strides (cnnlSetTensorDescriptorEx). */
typedef struct mlu_dims {
    int ndim;
    int dims[IT_MAX_DIMS];
    int strides[IT_MAX_DIMS];
} mlu_dims;
/* Narrow d's shape and strides to int32; a 0-d tensor becomes {1}. Fails (naming `fn`,
 * `arg`, the dim and its value) when a value does not fit. */
it_status mlu_dims_from_desc(const char *fn, const char *arg, const it_tdesc *d, mlu_dims *out);
/* Contiguous dims {d0, ..., dn-1}, checked the same way. */
it_status mlu_dims_contiguous(const char *fn, const char *arg, int ndim, const int64_t *shape, mlu_dims *out);
bool mlu_desc_contiguous(const it_tdesc *d);
int64_t mlu_desc_numel(const it_tdesc *d);
/* Softmax over the last dim: CNNL wants exactly 3 dims; reduce over the last with
 * CNNL_SOFTMAX_MODE_LOW_DIMENSION on {1, R, C}, R = product of the leading dims (1 for a
 * 1-D tensor). Fails when R or C does not fit in int32. */
it_status mlu_softmax_dims(const char *fn, const it_tdesc *x, int dims3[3]);

/* ---- planning for softmax (scale, causal), rmsnorm, rope, topk, embedding_bwd. Pure checks
 * and arithmetic, shared by kernels_llm.c and the BANG kernels' launchers. */
/* Rows R (product of all dims but the last), mask rows T (second-to-last dim, 1 for 1-D)
 * and columns S of a softmax input; fails when causal and S < T with R > 0 (as the CPU
 * backend), or when x is not float32 (the MLU path; fp64 has no BANG/CNNL kernel here). */
typedef struct mlu_softmax_geo {
    int64_t R, T, S;
} mlu_softmax_geo;
it_status mlu_softmax_geometry(const char *fn, const it_softmax_args *args, const it_tdesc *x, mlu_softmax_geo *g);
/* Unmasked columns of row r: S, or with causal (r % T) + (S - T) + 1 (backend.h: scores with
 * s > t + (S - T) are masked). bang/softmax.mlu computes the same expression. */
int64_t mlu_softmax_valid_cols(const mlu_softmax_geo *g, bool causal, int64_t r);

/* RoPE on x, y (B, T, H, D), cos, sin (T, D/2): shapes, dtypes (fp32, fp16, bf16) and every
 * element stride, checked to fit the BANG kernel (D <= MLU_ROPE_MAX_D, byte strides of the
 * last dims within int32 for __memcpy's strided form). */
#define MLU_ROPE_MAX_D 4096
typedef struct mlu_rope_geo {
    int64_t B, T, H, P; /* P = D/2 pairs */
    int64_t sx[4], sy[4], sc[2], ss[2];
} mlu_rope_geo;
it_status mlu_rope_geometry(const it_tdesc *x, const it_tdesc *cos, const it_tdesc *sin, const it_tdesc *y,
                            mlu_rope_geo *g);

/* Top-k: x (N, E) float32, 1 <= k <= E <= INT32_MAX, values (N, k) of x's dtype and indices
 * (N, k) int32, both contiguous (cnnlTopKTensor_v3 writes dense outputs). */
it_status mlu_topk_geometry(const it_tdesc *x, int64_t k, const it_tdesc *values, const it_tdesc *indices, int64_t *N,
                            int64_t *E);

/* embedding_bwd: idx (N) int32/int64, dout (N, C), dweight (V, C) float32; every stride
 * within int32 bytes. The BANG kernel works on column blocks of MLU_EMB_BLOCK columns. */
#define MLU_EMB_BLOCK 256
it_status mlu_embedding_bwd_geometry(const it_tdesc *idx, const it_tdesc *dout, const it_tdesc *dweight);
/* Always IT_ERR_UNSUPPORTED, with the first CNNL flash attention limit q and k meet. */
it_status mlu_flash_decline(const char *fn, const it_flash_args *a, const it_tdesc *q, const it_tdesc *k);
int64_t mlu_col_blocks(int64_t cols, int64_t block);

/* Tasks of a cnrtFuncTypeBlock launch: one per work item up to `cap`, at least 1. */
int mlu_bang_tasks(int64_t items, int cap);
#define MLU_BANG_MAX_TASKS 256

/* Workspace carved into n parts, each starting at a multiple of MLU_WS_PART_ALIGN; writes
 * offsets[i] and returns the total bytes (0 for no bytes at all). A part of 0 bytes takes no
 * room. */
#define MLU_WS_PART_ALIGN ((size_t)256)
size_t mlu_ws_layout(const size_t *bytes, int n, size_t *offsets);

/* ---- host_ew.c: planning of the elementwise, reduce, cross-entropy and optimizer BANG
 * kernels (bang/it_bang.h's argument structs; see host_ew.c for what is declined). */
struct it_bang_ew_args;
struct it_bang_reduce_args;
struct it_bang_adam_coef;
/* t's n elements sit at i * stride (dims collapse into one stride); false otherwise */
bool mlu_flat_stride(const it_tdesc *t, int64_t *n, int64_t *stride);
/* unary (b NULL) / binary: float32, dense out, operands coalesced as the CPU's iterator */
it_status mlu_ew_plan(const char *fn, const it_tdesc *out, const it_tdesc *a, const it_tdesc *b,
                      struct it_bang_ew_args *g);
int64_t mlu_ew_pieces(const struct it_bang_ew_args *g);
int64_t mlu_ew_row_offset(const struct it_bang_ew_args *g, const int64_t *st, int64_t row);
/* reduce: x as (O, R, I), out dense (O, I) */
it_status mlu_reduce_plan(int op, const it_tdesc *x, const it_tdesc *out, struct it_bang_reduce_args *g);
int64_t mlu_reduce_items(const struct it_bang_reduce_args *g);
/* cross entropy: N rows, Vp columns, element strides of targets (ts) and of the per-row
 * vector (rs: losses, dense, or dlosses); dlogits NULL for the forward */
it_status mlu_ce_plan(const char *fn, const it_tdesc *logits, const it_tdesc *targets, int64_t valid,
                      const it_tdesc *rowvec, const char *rowvec_name, bool rowvec_dense, const it_tdesc *dlogits,
                      int64_t *N, int64_t *Vp, int64_t *ts, int64_t *rs);
/* param, grad (and m, v unless NULL): dense float32 of one length */
it_status mlu_optim_plan(const char *fn, const it_tdesc *param, const it_tdesc *grad, const it_tdesc *m,
                         const it_tdesc *v, int64_t *n);
float mlu_sgd_neg_lr(float lr);
it_status mlu_adam_coef(const it_adam_args *a, struct it_bang_adam_coef *c);

/* ---- workspace: one cached device buffer per queue, grown (never shrunk) to
 * max(need, 2 * current) rounded up to 1 MiB, so a steady step allocates nothing. */
size_t mlu_workspace_grow(size_t current, size_t need);
#define MLU_WORKSPACE_ALIGN ((size_t)1 << 20)

/* ---- errors. "cnrtMalloc(nbytes=64) failed: cnrtErrorNoMem (13): out of memory". */
int mlu_format_error(char *buf, size_t n, const char *call, const char *args, const char *lib_text, int code);

/* ================================================================ loader.c */
/* Paths tried for a library: $NEUWARE_HOME/lib64/<lib> (or /usr/local/neuware/lib64 when
 * NEUWARE_HOME is unset), then the bare name (LD_LIBRARY_PATH, ld.so.cache). */
int mlu_library_candidates(const char *lib, char paths[][512], int max);
/* Load the three libraries and resolve every symbol into *api. On failure, one message
 * naming every library, each path tried and dlerror's reason. cncl is optional: its absence
 * only clears api->have_cncl (and is named in api_note). */
it_status mlu_api_load(mlu_api *api, char *note, size_t note_bytes);
extern mlu_api mlu; /* filled by runtime init */

/* ================================================================ runtime.c */
struct it_stream {
    int device;
    int priority;
    bool is_default;
    mlu_cnrtQueue_t queue;
    mlu_cnnlHandle_t cnnl; /* bound to `queue` with cnnlSetQueue */
    pthread_mutex_t ws_lock;
    void *ws; /* cached device scratch (see mlu_workspace_grow) */
    size_t ws_bytes;
};
struct it_event {
    int device;
    mlu_cnrtNotifier_t notifier;
    bool recorded;
};

it_status mlu_check_device(const char *fn, int device);
/* IT_ERR_UNSUPPORTED (with the reason) when `device` is known not to be an MLU500-series part,
 * the only one with bfloat16 matmul and casts. */
it_status mlu_need_bf16(const char *fn, int device);
/* `s` or the current device's default stream. */
it_status mlu_stream_resolve(const char *fn, it_stream *s, it_stream **out);
it_status mlu_default_stream(int device, it_stream **out);
/* Make `device` current on this thread (cnrtSetDevice only on change). */
it_status mlu_use_device(const char *fn, int device);
/* Scratch of at least `need` bytes on s (may sync s to grow). */
it_status mlu_workspace(it_stream *s, size_t need, void **ws);

it_status mlu_cnrt_error(mlu_cnrtRet_t ret, const char *call, const char *fmt, ...) IT_PRINTF(3, 4);
it_status mlu_cnnl_error(mlu_cnnlStatus_t st, const char *call, const char *fmt, ...) IT_PRINTF(3, 4);
#define MLU_CNRT(call, args_fmt, ...)                                                                                  \
    do {                                                                                                               \
        mlu_cnrtRet_t ret_ = (call);                                                                                   \
        if (ret_ != MLU_cnrtSuccess) return mlu_cnrt_error(ret_, #call, args_fmt, __VA_ARGS__);                        \
    } while (0)

/* CNNL status check inside a function with `it_status st` and a `done:` label. */
#define CNNL(call, fmt, ...)                                                                                           \
    do {                                                                                                               \
        mlu_cnnlStatus_t s_ = (call);                                                                                  \
        if (s_ != MLU_CNNL_STATUS_SUCCESS) {                                                                           \
            st = mlu_cnnl_error(s_, #call, fmt, __VA_ARGS__);                                                          \
            goto done;                                                                                                 \
        }                                                                                                              \
    } while (0)

/* ================================================================ kernels.c helpers, shared with
 * kernels_llm.c: CNNL tensor descriptors over mlu_dims (cnnlSetTensorDescriptorEx, LAYOUT_ARRAY) */
it_status mlu_desc_make(const char *fn, const char *arg, const mlu_dims *dims, int dtype,
                        mlu_cnnlTensorDescriptor_t *out);
it_status mlu_desc_of(const char *fn, const char *arg, const it_tdesc *t, int dtype, mlu_cnnlTensorDescriptor_t *out);
void mlu_desc_free(mlu_cnnlTensorDescriptor_t d);
/* dst = src (same dtype and shape, any strides) with cnnlCopy. */
it_status mlu_copy_desc(it_stream *s, const it_tdesc *src, const it_tdesc *dst);
/* A contiguous view of d's shape at `data`. */
it_tdesc mlu_contiguous_like(const it_tdesc *d, void *data, it_dtype dt);

/* kernels_llm.c: rmsnorm (cnnlRmsNormForward/Backward), topk (cnnlTopKTensor_v3), and the
 * host sides of the BANG kernels in bang/ (softmax, rope, embedding_bwd) when built with cncc. */
it_status mlu_rmsnorm_fwd(it_stream *s, const it_tdesc *x, const it_tdesc *w, float eps, it_tdesc *y, it_tdesc *rstd);
it_status mlu_rmsnorm_bwd(it_stream *s, const it_tdesc *dy, const it_tdesc *x, const it_tdesc *w, const it_tdesc *rstd,
                          it_tdesc *dx, it_tdesc *dw);
it_status mlu_topk(it_stream *s, const it_tdesc *x, int64_t k, it_tdesc *values, it_tdesc *indices);
/* flash attention: declined with the reason (host.c mlu_flash_decline); the core composes */
it_status mlu_flash_attention_fwd(it_stream *s, const it_flash_args *args, const it_tdesc *q, const it_tdesc *k,
                                  const it_tdesc *v, it_tdesc *y, it_tdesc *lse);
it_status mlu_flash_attention_bwd(it_stream *s, const it_flash_args *args, const it_tdesc *q, const it_tdesc *k,
                                  const it_tdesc *v, const it_tdesc *y, const it_tdesc *dy, const it_tdesc *lse,
                                  it_tdesc *dq, it_tdesc *dk, it_tdesc *dv);
#ifdef IT_MLU_HAVE_BANG
it_status mlu_bang_softmax_fwd(it_stream *s, const it_softmax_args *args, const it_tdesc *x, it_tdesc *y);
it_status mlu_bang_softmax_bwd(it_stream *s, const it_softmax_args *args, const it_tdesc *y, const it_tdesc *dy,
                               it_tdesc *dx);
it_status mlu_bang_rope(it_stream *s, const it_tdesc *x, const it_tdesc *cos, const it_tdesc *sin, bool inverse,
                        it_tdesc *y);
it_status mlu_bang_embedding_bwd(it_stream *s, const it_tdesc *idx, const it_tdesc *dout, it_tdesc *dweight);
/* kernels_ew.c: unary, binary, reduce, cross entropy, sgd, adam over bang/ (float32) */
it_status mlu_bang_unary(it_stream *s, it_unary_op op, float alpha, const it_tdesc *x, it_tdesc *out);
it_status mlu_bang_binary(it_stream *s, it_binary_op op, const it_tdesc *a, const it_tdesc *b, it_tdesc *out);
it_status mlu_bang_reduce(it_stream *s, it_reduce_op op, const it_tdesc *x, it_tdesc *out);
it_status mlu_bang_cross_entropy_fwd(it_stream *s, const it_tdesc *logits, const it_tdesc *targets, int64_t valid,
                                     it_tdesc *losses);
it_status mlu_bang_cross_entropy_bwd(it_stream *s, const it_tdesc *logits, const it_tdesc *targets, int64_t valid,
                                     const it_tdesc *dlosses, it_tdesc *dlogits);
it_status mlu_bang_sgd_step(it_stream *s, float lr, float grad_scale, it_tdesc *param, const it_tdesc *grad);
it_status mlu_bang_adam_step(it_stream *s, const it_adam_args *args, it_tdesc *param, const it_tdesc *grad, it_tdesc *m,
                             it_tdesc *v);
#endif

/* ================================================================ memory.c */
it_status mlu_malloc(int device, size_t nbytes, void **ptr);
it_status mlu_free(int device, void *ptr);
it_status mlu_malloc_async(int device, size_t nbytes, it_stream *stream, void **ptr);
it_status mlu_free_async(int device, void *ptr, it_stream *stream);
it_status mlu_memcpy(int device, void *dst, const void *src, size_t nbytes, it_memcpy_kind kind);
it_status mlu_memcpy_async(int device, void *dst, const void *src, size_t nbytes, it_memcpy_kind kind,
                           it_stream *stream);
it_status mlu_mem_info(int device, size_t *free_bytes, size_t *total_bytes);
/* Release pinned staging buffers whose notifier completed (poll; Paddle PR #982). */
void mlu_staging_poll(bool wait_all);
/* Allocation tracker: bytes live now and at peak, per device. */
void mlu_tracker_stats(int device, size_t *live, size_t *peak);

/* ================================================================ tables */
extern const it_runtime mlu_runtime;
extern const it_kernels mlu_kernels;
extern const it_ccl mlu_ccl;

#endif
