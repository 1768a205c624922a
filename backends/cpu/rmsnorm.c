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
 * dw is reduced over rows in a fixed order with no scratch memory, as layernorm.c's dw: a
 * pass parallel over blocks of RMS_COLS columns sums each column's rows in order in chunks
 * of RMS_CHUNK rows, each chunk's sum then added to the running total. That pass runs
 * before dx is written, so dx may be the very memory of dy or x (in-place backward). */
#include <math.h>

#include "cpu/cpu_kernels.h"

#define PAR_MIN 16384 /* elements below which the kernel stays on the calling thread */
#define RMS_COLS 16   /* columns of dw one task sums */
#define RMS_CHUNK 32  /* rows summed into a partial before it joins the running total */
#define ALWAYS_INLINE static inline __attribute__((always_inline))

/* ---------------------------------------------------------------- descriptor checks */

static it_status check_desc(const char *kernel, const char *name, const it_tdesc *t) {
    if (t == NULL) return it_error(IT_ERR_INVALID_ARG, "%s: %s is NULL", kernel, name);
    if (t->ndim < 0 || t->ndim > IT_MAX_DIMS)
        return it_error(IT_ERR_INVALID_ARG, "%s: %s.ndim = %d outside [0, %d]", kernel, name, t->ndim, IT_MAX_DIMS);
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) {
        if (t->shape[d] < 0)
            return it_error(IT_ERR_INVALID_ARG, "%s: %s.shape[%d] = %lld is negative", kernel, name, d,
                            (long long)t->shape[d]);
        if (t->strides[d] < 0)
            return it_error(IT_ERR_INVALID_ARG, "%s: %s.strides[%d] = %lld is negative", kernel, name, d,
                            (long long)t->strides[d]);
        n *= t->shape[d];
    }
    if (n > 0 && t->data == NULL) return it_error(IT_ERR_INVALID_ARG, "%s: %s.data is NULL", kernel, name);
    return IT_OK;
}

static int64_t numel(const it_tdesc *t) {
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
    return n;
}

static int64_t offset_of(int64_t idx, int nd, const int64_t *shape, const int64_t *strides) {
    int64_t off = 0;
    for (int d = nd - 1; d >= 0; d--) {
        off += (idx % shape[d]) * strides[d];
        idx /= shape[d];
    }
    return off;
}

/* t has x's shape and dtype; an output also must not write an element twice. */
static it_status check_like(const char *kernel, const char *name, const it_tdesc *t, const it_tdesc *x, bool output) {
    it_status st;
    if ((st = check_desc(kernel, name, t))) return st;
    if (t->ndim != x->ndim)
        return it_error(IT_ERR_INVALID_ARG, "%s: %s.ndim %d != x.ndim %d", kernel, name, t->ndim, x->ndim);
    for (int d = 0; d < x->ndim; d++) {
        if (t->shape[d] != x->shape[d])
            return it_error(IT_ERR_INVALID_ARG, "%s: %s.shape[%d] = %lld != x.shape[%d] = %lld", kernel, name, d,
                            (long long)t->shape[d], d, (long long)x->shape[d]);
        if (output && t->strides[d] == 0 && t->shape[d] > 1)
            return it_error(IT_ERR_INVALID_ARG, "%s: %s.strides[%d] is 0 on a dim of size %lld", kernel, name, d,
                            (long long)t->shape[d]);
    }
    if (t->dtype != x->dtype)
        return it_error(IT_ERR_INVALID_ARG, "%s: %s dtype %s != x dtype %s", kernel, name, it_dtype_name(t->dtype),
                        it_dtype_name(x->dtype));
    return IT_OK;
}

/* t is (C) of x's dtype. */
static it_status check_vec(const char *kernel, const char *name, const it_tdesc *t, int64_t C, it_dtype dt,
                           bool output) {
    it_status st;
    if ((st = check_desc(kernel, name, t))) return st;
    if (t->ndim != 1 || t->shape[0] != C)
        return it_error(IT_ERR_INVALID_ARG, "%s: %s must be (%lld), got ndim %d shape[0] %lld", kernel, name,
                        (long long)C, t->ndim, t->ndim > 0 ? (long long)t->shape[0] : -1LL);
    if (t->dtype != dt)
        return it_error(IT_ERR_INVALID_ARG, "%s: %s dtype %s != x dtype %s", kernel, name, it_dtype_name(t->dtype),
                        it_dtype_name(dt));
    if (output && t->strides[0] == 0 && C > 1)
        return it_error(IT_ERR_INVALID_ARG, "%s: %s.strides[0] is 0", kernel, name);
    return IT_OK;
}

/* rstd: R elements of x's dtype, any shape. */
static it_status check_stat(const char *kernel, const char *name, const it_tdesc *t, int64_t R, it_dtype dt,
                            bool output) {
    it_status st;
    if ((st = check_desc(kernel, name, t))) return st;
    if (numel(t) != R)
        return it_error(IT_ERR_INVALID_ARG, "%s: %s has %lld elements, expected R = %lld", kernel, name,
                        (long long)numel(t), (long long)R);
    if (t->dtype != dt)
        return it_error(IT_ERR_INVALID_ARG, "%s: %s dtype %s, expected %s (x's)", kernel, name, it_dtype_name(t->dtype),
                        it_dtype_name(dt));
    for (int d = 0; output && d < t->ndim; d++)
        if (t->strides[d] == 0 && t->shape[d] > 1)
            return it_error(IT_ERR_INVALID_ARG, "%s: %s.strides[%d] is 0 on a dim of size %lld", kernel, name, d,
                            (long long)t->shape[d]);
    return IT_OK;
}

static it_status check_x(const char *kernel, const it_tdesc *x, int64_t *R, int64_t *C) {
    it_status st;
    if ((st = check_desc(kernel, "x", x))) return st;
    if (x->ndim < 1) return it_error(IT_ERR_INVALID_ARG, "%s: x must have at least 1 dim, got ndim 0", kernel);
    if (x->dtype != IT_DTYPE_FP32 && x->dtype != IT_DTYPE_FP64)
        return it_error(IT_ERR_UNSUPPORTED, "%s: dtype %s not supported", kernel, it_dtype_name(x->dtype));
    *C = x->shape[x->ndim - 1];
    *R = 1;
    for (int d = 0; d < x->ndim - 1; d++) *R *= x->shape[d];
    return IT_OK;
}

/* ---------------------------------------------------------------- kernels */

/* Lane sums: F(i) summed over i < n in the order of the header comment. */
#define LANE_SUM(T, res, n, F)                                                                                         \
    do {                                                                                                               \
        T r_[8] = {0, 0, 0, 0, 0, 0, 0, 0};                                                                            \
        int64_t i_ = 0;                                                                                                \
        for (; i_ + 8 <= (n); i_ += 8) {                                                                               \
            _Pragma("omp simd") for (int j_ = 0; j_ < 8; j_++) r_[j_] += F(i_ + j_);                                   \
        }                                                                                                              \
        res = ((r_[0] + r_[1]) + (r_[2] + r_[3])) + ((r_[4] + r_[5]) + (r_[6] + r_[7]));                               \
        for (; i_ < (n); i_++) res += F(i_);                                                                           \
    } while (0)

#define SQ(k) (x[(k)*sx] * x[(k)*sx])
#define G_XHAT(k) ((dy[(k)*sdy] * w[(k)*sw]) * (x[(k)*sx] * s))

#define DEFINE_RMS(T, SFX, SQRT)                                                                                       \
    /* one row: x (C) -> y (C), returns rstd */                                                                        \
    ALWAYS_INLINE T fwd_row_##SFX(const T *x, int64_t sx, const T *w, int64_t sw, T *y, int64_t sy, int64_t C,         \
                                  T eps) {                                                                             \
        T ms;                                                                                                          \
        LANE_SUM(T, ms, C, SQ);                                                                                        \
        ms = ms / (T)C;                                                                                                \
        T s = (T)1 / SQRT(ms + eps);                                                                                   \
        _Pragma("omp simd") for (int64_t i = 0; i < C; i++) y[i * sy] = (x[i * sx] * s) * w[i * sw];                   \
        return s;                                                                                                      \
    }                                                                                                                  \
    /* one row: dx (C) */                                                                                              \
    ALWAYS_INLINE void bwd_row_##SFX(const T *dy, int64_t sdy, const T *x, int64_t sx, const T *w, int64_t sw, T s,    \
                                     T *dx, int64_t sdx, int64_t C) {                                                  \
        T dot;                                                                                                         \
        LANE_SUM(T, dot, C, G_XHAT);                                                                                   \
        dot = dot / (T)C;                                                                                              \
        _Pragma("omp simd") for (int64_t i = 0; i < C; i++) {                                                          \
            T xhat = x[i * sx] * s;                                                                                    \
            T g = dy[i * sdy] * w[i * sw];                                                                             \
            dx[i * sdx] = s * (g - xhat * dot);                                                                        \
        }                                                                                                              \
    }                                                                                                                  \
    /* one row's terms of dw for columns [0, n) of a block: pw += dy * xhat */                                         \
    ALWAYS_INLINE void dw_row_##SFX(const T *dy, int64_t sdy, const T *x, int64_t sx, T s, T *pw, int64_t n) {         \
        _Pragma("omp simd") for (int64_t i = 0; i < n; i++) pw[i] += dy[i * sdy] * (x[i * sx] * s);                    \
    }                                                                                                                  \
    static void fwd_##SFX(const it_tdesc *xd, const it_tdesc *wd, T eps, it_tdesc *yd, it_tdesc *rd, int64_t R,        \
                          int64_t C) {                                                                                 \
        int nl = xd->ndim - 1;                                                                                         \
        int64_t sx = xd->strides[nl], sy = yd->strides[nl], sw = wd->strides[0];                                       \
        bool unit = (sx == 1 && sy == 1 && sw == 1) || C == 1;                                                         \
        const T *w = wd->data;                                                                                         \
        _Pragma("omp parallel for schedule(static) if (R * C >= PAR_MIN)") for (int64_t r = 0; r < R; r++) {           \
            const T *x = (const T *)xd->data + offset_of(r, nl, xd->shape, xd->strides);                               \
            T *y = (T *)yd->data + offset_of(r, nl, yd->shape, yd->strides);                                           \
            T *rstd = (T *)rd->data + offset_of(r, rd->ndim, rd->shape, rd->strides);                                  \
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
        bool unit2 = (sx == 1 && sdy == 1) || C == 1;                                                                  \
        int64_t blocks = (C + RMS_COLS - 1) / RMS_COLS;                                                                \
        _Pragma("omp parallel for schedule(static) if (R * C >= PAR_MIN)") for (int64_t bk = 0; bk < blocks; bk++) {   \
            int64_t c0 = bk * RMS_COLS, n = C - c0 < RMS_COLS ? C - c0 : RMS_COLS;                                     \
            T tw[RMS_COLS] = {0}, pw[RMS_COLS];                                                                        \
            for (int64_t r0 = 0; r0 < R; r0 += RMS_CHUNK) {                                                            \
                for (int64_t i = 0; i < n; i++) pw[i] = 0;                                                             \
                for (int64_t r = r0; r < R && r < r0 + RMS_CHUNK; r++) {                                               \
                    const T *x = (const T *)xd->data + offset_of(r, nl, xd->shape, xd->strides) + c0 * sx;             \
                    const T *dy = (const T *)dyd->data + offset_of(r, nl, dyd->shape, dyd->strides) + c0 * sdy;        \
                    T s = ((const T *)rd->data)[offset_of(r, rd->ndim, rd->shape, rd->strides)];                       \
                    if (unit2)                                                                                         \
                        dw_row_##SFX(dy, 1, x, 1, s, pw, n);                                                           \
                    else                                                                                               \
                        dw_row_##SFX(dy, sdy, x, sx, s, pw, n);                                                        \
                }                                                                                                      \
                for (int64_t i = 0; i < n; i++) tw[i] += pw[i];                                                        \
            }                                                                                                          \
            T *dw = (T *)dwd->data + c0 * dwd->strides[0];                                                             \
            for (int64_t i = 0; i < n; i++) dw[i * dwd->strides[0]] = tw[i];                                           \
        }                                                                                                              \
        _Pragma("omp parallel for schedule(static) if (R * C >= PAR_MIN)") for (int64_t r = 0; r < R; r++) {           \
            const T *x = (const T *)xd->data + offset_of(r, nl, xd->shape, xd->strides);                               \
            const T *dy = (const T *)dyd->data + offset_of(r, nl, dyd->shape, dyd->strides);                           \
            T *dx = (T *)dxd->data + offset_of(r, nl, dxd->shape, dxd->strides);                                       \
            T s = ((const T *)rd->data)[offset_of(r, rd->ndim, rd->shape, rd->strides)];                               \
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
    if ((st = check_x(k, x, &R, &C)) || (st = check_vec(k, "w", w, C, x->dtype, false)) ||
        (st = check_like(k, "y", y, x, true)) || (st = check_stat(k, "rstd", rstd, R, x->dtype, true)))
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
    if ((st = check_x(k, x, &R, &C)) || (st = check_like(k, "dy", dy, x, false)) ||
        (st = check_vec(k, "w", w, C, x->dtype, false)) || (st = check_stat(k, "rstd", rstd, R, x->dtype, false)) ||
        (st = check_like(k, "dx", dx, x, true)) || (st = check_vec(k, "dw", dw, C, x->dtype, true)))
        return st;
    if (C == 0) return IT_OK;
    /* R == 0 still writes dw = 0 (a sum over no rows). */
    if (x->dtype == IT_DTYPE_FP32)
        bwd_f32(dy, x, w, rstd, dx, dw, R, C);
    else
        bwd_f64(dy, x, w, rstd, dx, dw, R, C);
    return IT_OK;
}
