/* The BANG C kernels of the MLU backend, as C sees them. Each launcher is defined in a
 * .mlu file in bang/ (compiled by cncc only where cncc is found; the plugin then defines
 * IT_MLU_HAVE_BANG), enqueues one kernel on `queue` (a cnrtQueue_t) as a cnrtFuncTypeBlock
 * launch of `tasks` tasks, and returns cnrtGetLastError() as an int (0 = cnrtSuccess).
 *
 * Shapes and strides are in elements. Host-side planning and checks are in host.c
 * (mlu_softmax_geometry, mlu_rope_geometry, mlu_embedding_bwd_geometry, mlu_bang_tasks),
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

#ifdef __cplusplus
}
#endif
#endif
