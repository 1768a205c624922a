/* The BANG C kernels of the MLU backend, as C sees them. Each launcher is defined in a
 * .mlu file in bang/ (compiled by cncc only where cncc is found; the plugin then defines
 * IT_MLU_HAVE_BANG), enqueues one kernel on `queue` (a cnrtQueue_t) as a cnrtFuncTypeBlock
 * launch of `tasks` tasks, and returns cnrtGetLastError() as an int (0 = cnrtSuccess).
 *
 * Shapes and strides are in elements. Host-side planning and checks are in host.c
 * (mlu_softmax_geometry, mlu_rope_geometry, mlu_embedding_bwd_geometry, mlu_bang_tasks) and
 * host_ew.c (mlu_ew_plan, mlu_reduce_plan, mlu_ce_plan, mlu_optim_plan, mlu_adam_coef),
 * unit-tested everywhere; the kernels assume those checks passed. */
#ifndef IT_MLU_BANG_H
#define IT_MLU_BANG_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* softmax.mlu. x, y, dy, dx dense (R, S), float32; row r is query t = r % T.
 *   fwd: y = softmax(scale * x) over the first n columns, 0 beyond, n = S or, causal,
 *        (r % T) + (S - T) + 1
 *   bwd: dx = (scale * y) * (dy - sum_{i<n} dy*y) over the first n columns, 0 beyond */
int it_bang_softmax_fwd(void *queue, int tasks, const float *x, float *y, int64_t R, int64_t T, int64_t S, float scale,
                        int causal);
int it_bang_softmax_bwd(void *queue, int tasks, const float *y, const float *dy, float *dx, int64_t R, int64_t T,
                        int64_t S, float scale, int causal);

/* rope.mlu. x, y (B, T, H, 2P), cos, sin (T, P), any strides; dtype 0 float32, 1 float16,
 * 2 bfloat16 (half types computed in float32, rounded once). inverse negates sin. */
typedef struct it_bang_rope_args {
    int64_t B, T, H, P;
    int64_t sx[4], sy[4], sc[2], ss[2];
    int dtype;
    int inverse;
} it_bang_rope_args;
int it_bang_rope(void *queue, int tasks, const void *x, const void *cos, const void *sin, void *y,
                 const it_bang_rope_args *a);

/* embedding_bwd.mlu. dweight[idx[n], c] += dout[n, c] for n = 0..N-1 in order, float32;
 * idx int32 (idx_is64 0) or int64 (1) with element stride idx_stride; indices outside
 * [0, V) are skipped. Column blocks of `block` columns are split over the tasks. */
int it_bang_embedding_bwd(void *queue, int tasks, const void *idx, int idx_is64, int64_t idx_stride, const float *dout,
                          int64_t gr, int64_t gc, float *dweight, int64_t wr, int64_t wc, int64_t N, int64_t C,
                          int64_t V, int64_t block);

/* ---- elementwise.mlu, reduce.mlu, crossentropy.mlu, optim.mlu (float32; launch sides in
 * kernels_ew.c, planning in host_ew.c; the scalar math is it_bang_math.h). */

/* unary / binary: out dense (total elements, row-major); the operands' dims coalesced to
 * nd <= 8 (dim nd-1 is the inner row of shape[nd-1] elements); sa / sb the element strides of
 * x (or a) and b on those dims, 0 on broadcast dims. Work items are (row, chunk of
 * IT_BANG_EW_CHUNK) pieces, split over the tasks. */
#define IT_BANG_EW_MAX_DIMS 8
#define IT_BANG_EW_CHUNK 4096
typedef struct it_bang_ew_args {
    int op;
    int binary; /* 0: unary op on a, alpha; 1: binary op on a, b */
    float alpha;
    int nd;
    int64_t shape[IT_BANG_EW_MAX_DIMS];
    int64_t sa[IT_BANG_EW_MAX_DIMS], sb[IT_BANG_EW_MAX_DIMS];
    int64_t total;
} it_bang_ew_args;
int it_bang_elementwise(void *queue, int tasks, const float *a, const float *b, float *out, const it_bang_ew_args *g);

/* reduce: x viewed as (O, R, I) with element strides (xo, xr, xi), out dense (O, I); op an
 * it_reduce_op value. I = 1: one output per task iteration, its R elements streamed in
 * windows; I > 1 (then xi = 1): blocks of IT_BANG_RED_COLS columns per task iteration. */
#define IT_BANG_RED_COLS 64
typedef struct it_bang_reduce_args {
    int op;
    int64_t O, R, I, xo, xr, xi;
} it_bang_reduce_args;
int it_bang_reduce(void *queue, int tasks, const float *x, float *out, const it_bang_reduce_args *a);

/* cross entropy: logits dense (N, Vp), first V columns valid; targets int32 (t_is64 0) or
 * int64 (1) at element stride ts; losses (stride 1) / dlosses (stride ds) (N); dlogits dense. */
int it_bang_cross_entropy_fwd(void *queue, int tasks, const float *logits, const void *targets, int t_is64, int64_t ts,
                              float *losses, int64_t N, int64_t Vp, int64_t V);
int it_bang_cross_entropy_bwd(void *queue, int tasks, const float *logits, const void *targets, int t_is64, int64_t ts,
                              const float *dlosses, int64_t ds, float *dlogits, int64_t N, int64_t Vp, int64_t V);

/* optimizers on dense flat float32 tensors of n elements, pieces of IT_BANG_OPT_CHUNK. */
#define IT_BANG_OPT_CHUNK 2048
enum { IT_BANG_WD_NONE = 0, IT_BANG_WD_DECOUPLED = 1, IT_BANG_WD_COUPLED = 2 };
typedef struct it_bang_adam_coef {
    float b1, omb1, b2, omb2, eps, wd, decay, nss, bc2s, gs;
    int mode; /* IT_BANG_WD_* */
} it_bang_adam_coef;
int it_bang_sgd(void *queue, int tasks, float *p, const float *g, int64_t n, float gs, float neg_lr);
int it_bang_adam(void *queue, int tasks, float *p, const float *g, float *m, float *v, int64_t n,
                 const it_bang_adam_coef *c);

#ifdef __cplusplus
}
#endif
#endif
