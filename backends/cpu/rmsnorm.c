/* RMSNorm over the last dim (LLaMA), PyTorch's op order.
 *
 *   fwd: x (R, C), w (C) -> y (R, C), rstd (R)
 *        ms = sum(x^2)/C;  rstd = 1/sqrt(ms + eps);  y = (x * rstd) * w
 *        (Meta's `x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)` then `* weight`:
 *        the same two roundings per element, in this order)
 *   bwd: dy, x (R, C), w (C), rstd (R) -> dx (R, C), dw (C) (written, not accumulated)
 *        xhat = x * rstd;  g = dy * w
 *        dx = rstd * (g - xhat * mean_C(g * xhat))
 *        dw = sum_R(dy * xhat)
 *
 * Leading dims of x (and y, dy, dx) are flattened into R; rstd holds R elements in any
 * shape, fp32 for fp32 x and fp64 for fp64 x. Sums over C run in the tensor's type (fp32 for
 * fp32, as PyTorch's fp32 mean) with 8 interleaved accumulators (lane j takes elements j,
 * j+8, ..., combined as ((r0+r1)+(r2+r3))+((r4+r5)+(r6+r7)), then the C%8 tail in order):
 * the order is fixed by C alone, so rows do not depend on the thread count, and it
 * vectorizes. It is not PyTorch's cascade order, so fp32 results agree with PyTorch to
 * rounding, not bit for bit.
 *
 * dw is reduced over rows in a fixed order with no scratch memory, as layernorm.c's dw
 * (DEFINE_NORM_PARAM_GRADS in cpu_util.h): a pass parallel over blocks of NORM_COLS columns
 * sums each column's rows in order in chunks of NORM_CHUNK rows, each chunk's sum then added
 * to the running total. That pass runs before dx is written, so dx may be the very memory of
 * dy or x (in-place backward). */
#include "cpu/cpu_util.h"

#define PAR_MIN 16384 /* elements below which the kernel stays on the calling thread */

#define DEFINE_RMS(T, SFX, SQRT)                                                                                       \
    /* one row: x (C) -> y (C), returns rstd */                                                                        \
    ALWAYS_INLINE T fwd_row_##SFX(const T *x, int64_t sx, const T *w, int64_t sw, T *y, int64_t sy, int64_t C,         \
                                  T eps) {                                                                             \
        T ms;                                                                                                          \
        LANE_SUM(T, ms, C, i, x[i * sx] * x[i * sx]);                                                                  \
        ms = ms / (T)C;                                                                                                \
        T s = (T)1 / SQRT(ms + eps);                                                                                   \
        _Pragma("omp simd") for (int64_t i = 0; i < C; i++) y[i * sy] = (x[i * sx] * s) * w[i * sw];                   \
        return s;                                                                                                      \
    }                                                                                                                  \
    /* one row: dx (C) */                                                                                              \
    ALWAYS_INLINE void bwd_row_##SFX(const T *dy, int64_t sdy, const T *x, int64_t sx, const T *w, int64_t sw, T s,    \
                                     T *dx, int64_t sdx, int64_t C) {                                                  \
        T dot;                                                                                                         \
        LANE_SUM(T, dot, C, i, (dy[i * sdy] * w[i * sw]) * (x[i * sx] * s));                                           \
        dot = dot / (T)C;                                                                                              \
        _Pragma("omp simd") for (int64_t i = 0; i < C; i++) {                                                          \
            T xhat = x[i * sx] * s;                                                                                    \
            T g = dy[i * sdy] * w[i * sw];                                                                             \
            dx[i * sdx] = s * (g - xhat * dot);                                                                        \
        }                                                                                                              \
    }                                                                                                                  \
    /* one row's terms of dw for columns [0, n) of a block: pw += dy * xhat (no mean, no db) */                        \
    ALWAYS_INLINE void dw_row_##SFX(const T *dy, int64_t sdy, const T *x, int64_t sx, T m, T s, T *pw, T *pb,          \
                                    int64_t n) {                                                                       \
        (void)m, (void)pb;                                                                                             \
        _Pragma("omp simd") for (int64_t i = 0; i < n; i++) pw[i] += dy[i * sdy] * (x[i * sx] * s);                    \
    }                                                                                                                  \
    DEFINE_NORM_PARAM_GRADS(T, SFX, 0, 0, dw_row_##SFX)                                                                \
    static void fwd_##SFX(const it_tdesc *xd, const it_tdesc *wd, T eps, it_tdesc *yd, it_tdesc *rd, int64_t R,        \
                          int64_t C) {                                                                                 \
        int nl = xd->ndim - 1;                                                                                         \
        int64_t sx = xd->strides[nl], sy = yd->strides[nl], sw = wd->strides[0];                                       \
        bool unit = (sx == 1 && sy == 1 && sw == 1) || C == 1;                                                         \
        const T *w = wd->data;                                                                                         \
        _Pragma("omp parallel for schedule(static) if (R * C >= PAR_MIN)") for (int64_t r = 0; r < R; r++) {           \
            const T *x = ROW_AT(const T, xd, nl, r);                                                                   \
            T *y = ROW_AT(T, yd, nl, r);                                                                               \
            T *rstd = &ELEM_AT(T, rd, r);                                                                              \
            if (unit)                                                                                                  \
                *rstd = fwd_row_##SFX(x, 1, w, 1, y, 1, C, eps);                                                       \
            else                                                                                                       \
                *rstd = fwd_row_##SFX(x, sx, w, sw, y, sy, C, eps);                                                    \
        }                                                                                                              \
    }                                                                                                                  \
    static void bwd_##SFX(const it_tdesc *dyd, const it_tdesc *xd, const it_tdesc *wd, const it_tdesc *rd,             \
                          it_tdesc *dxd, it_tdesc *dwd, int64_t R, int64_t C) {                                        \
        int nl = xd->ndim - 1;                                                                                         \
        int64_t sx = xd->strides[nl], sdy = dyd->strides[nl], sdx = dxd->strides[nl], sw = wd->strides[0];             \
        bool unit = (sx == 1 && sdy == 1 && sdx == 1 && sw == 1) || C == 1;                                            \
        const T *w = wd->data;                                                                                         \
        param_grads_##SFX(dyd, xd, NULL, rd, dwd, NULL, R, C); /* before dx: dx may be dy's or x's memory */           \
        _Pragma("omp parallel for schedule(static) if (R * C >= PAR_MIN)") for (int64_t r = 0; r < R; r++) {           \
            const T *x = ROW_AT(const T, xd, nl, r);                                                                   \
            const T *dy = ROW_AT(const T, dyd, nl, r);                                                                 \
            T *dx = ROW_AT(T, dxd, nl, r);                                                                             \
            T s = ELEM_AT(const T, rd, r);                                                                             \
            if (unit)                                                                                                  \
                bwd_row_##SFX(dy, 1, x, 1, w, 1, s, dx, 1, C);                                                         \
            else                                                                                                       \
                bwd_row_##SFX(dy, sdy, x, sx, w, sw, s, dx, sdx, C);                                                   \
        }                                                                                                              \
    }

DEFINE_RMS(float, f32, sqrtf)
DEFINE_RMS(double, f64, sqrt)

/* ---------------------------------------------------------------- entry points */

/* x (R, C), w (C) -> y (R, C), rstd (R); see the header comment. */
it_status it_cpu_rmsnorm_fwd(it_stream *s, const it_tdesc *x, const it_tdesc *w, float eps, it_tdesc *y,
                             it_tdesc *rstd) {
    (void)s;
    const char *k = "rmsnorm_fwd";
    int64_t R, C;
    it_status st;
    if ((st = it_cpu_check_norm_x(k, x, &R, &C)) || (st = it_cpu_check_norm_vec(k, "w", w, C, x->dtype, false)) ||
        (st = it_cpu_check_like(k, "y", y, 0, "x", x, true)) ||
        (st = it_cpu_check_per_row(k, "rstd", rstd, "R", R, x->dtype, "x's", true)))
        return st;
    if (R == 0) return IT_OK;
    /* C == 0 gives ms = 0/0 = NaN and rstd NaN, as torch's mean over an empty dim. */
    if (x->dtype == IT_DTYPE_FP32)
        fwd_f32(x, w, eps, y, rstd, R, C);
    else
        fwd_f64(x, w, (double)eps, y, rstd, R, C);
    return IT_OK;
}

/* dy, x (R, C), w (C), rstd (R) -> dx (R, C), dw (C). */
it_status it_cpu_rmsnorm_bwd(it_stream *s, const it_tdesc *dy, const it_tdesc *x, const it_tdesc *w,
                             const it_tdesc *rstd, it_tdesc *dx, it_tdesc *dw) {
    (void)s;
    const char *k = "rmsnorm_bwd";
    int64_t R, C;
    it_status st;
    if ((st = it_cpu_check_norm_x(k, x, &R, &C)) || (st = it_cpu_check_like(k, "dy", dy, 0, "x", x, false)) ||
        (st = it_cpu_check_norm_vec(k, "w", w, C, x->dtype, false)) ||
        (st = it_cpu_check_per_row(k, "rstd", rstd, "R", R, x->dtype, "x's", false)) ||
        (st = it_cpu_check_like(k, "dx", dx, 0, "x", x, true)) ||
        (st = it_cpu_check_norm_vec(k, "dw", dw, C, x->dtype, true)))
        return st;
    if (C == 0) return IT_OK;
    /* R == 0 still writes dw = 0 (a sum over no rows). */
    if (x->dtype == IT_DTYPE_FP32)
        bwd_f32(dy, x, w, rstd, dx, dw, R, C);
    else
        bwd_f64(dy, x, w, rstd, dx, dw, R, C);
    return IT_OK;
}
