/* LayerNorm over the last dim, llm.c's math (two-pass, biased variance).
 *
 *   fwd: x (R, C), w (C), b (C) or NULL -> y (R, C), mean (R), rstd (R)
 *        mean = sum(x)/C;  var = sum((x - mean)^2)/C;  rstd = 1/sqrt(var + eps)
 *        y = (rstd * (x - mean)) * w + b
 *   bwd: dy, x (R, C), w (C), mean, rstd (R) -> dx (R, C), dw (C), db (C) (written)
 *        norm = (x - mean) * rstd;  dnorm = w * dy
 *        dx = ((dnorm - mean_C(dnorm)) - norm * mean_C(dnorm * norm)) * rstd
 *        dw = sum_R(norm * dy);  db = sum_R(dy)
 *
 * Leading dims of x (and y, dy, dx) are flattened into R; mean/rstd hold R elements in
 * any shape. Sums over C run in the tensor's type (fp32 for fp32, as llm.c) with 8
 * interleaved accumulators (lane j takes elements j, j+8, ..., combined as
 * ((r0+r1)+(r2+r3))+((r4+r5)+(r6+r7)), then the C%8 tail in order): fixed order, and it
 * vectorizes. mean/rstd are fp32 for fp32 x and fp64 for fp64 x.
 *
 * dw/db are reduced over rows in a fixed order, independent of the thread count and with
 * no scratch memory, by a second pass after dx (DEFINE_NORM_PARAM_GRADS in cpu_util.h):
 * parallel over blocks of NORM_COLS columns, each column's rows summed in order in chunks of
 * NORM_CHUNK rows, each chunk's sum then added to the running total. */
#include "cpu/cpu_util.h"

#define PAR_MIN 16384 /* elements below which the kernel stays on the calling thread */

#define DEFINE_LN(T, SFX, SQRT)                                                                                        \
    /* one row: x (C) -> y (C), returns mean and rstd */                                                               \
    ALWAYS_INLINE void fwd_row_##SFX(const T *x, int64_t sx, const T *w, int64_t sw, const T *b, int64_t sb, T *y,     \
                                     int64_t sy, int64_t C, T eps, T *mean, T *rstd) {                                 \
        T m, v;                                                                                                        \
        LANE_SUM(T, m, C, i, x[i * sx]);                                                                               \
        m = m / (T)C;                                                                                                  \
        LANE_SUM(T, v, C, i, (x[i * sx] - m) * (x[i * sx] - m));                                                       \
        v = v / (T)C;                                                                                                  \
        T s = (T)1 / SQRT(v + eps);                                                                                    \
        if (b != NULL) {                                                                                               \
            _Pragma("omp simd") for (int64_t i = 0; i < C; i++) y[i * sy] =                                            \
                (s * (x[i * sx] - m)) * w[i * sw] + b[i * sb];                                                         \
        } else {                                                                                                       \
            _Pragma("omp simd") for (int64_t i = 0; i < C; i++) y[i * sy] = (s * (x[i * sx] - m)) * w[i * sw];         \
        }                                                                                                              \
        *mean = m;                                                                                                     \
        *rstd = s;                                                                                                     \
    }                                                                                                                  \
    /* one row: dx (C) */                                                                                              \
    ALWAYS_INLINE void bwd_row_##SFX(const T *dy, int64_t sdy, const T *x, int64_t sx, const T *w, int64_t sw, T m,    \
                                     T s, T *dx, int64_t sdx, int64_t C) {                                             \
        T dnorm_mean, dnorm_norm_mean;                                                                                 \
        LANE_SUM(T, dnorm_mean, C, i, w[i * sw] * dy[i * sdy]);                                                        \
        LANE_SUM(T, dnorm_norm_mean, C, i, (w[i * sw] * dy[i * sdy]) * ((x[i * sx] - m) * s));                         \
        dnorm_mean = dnorm_mean / (T)C;                                                                                \
        dnorm_norm_mean = dnorm_norm_mean / (T)C;                                                                      \
        _Pragma("omp simd") for (int64_t i = 0; i < C; i++) {                                                          \
            T norm = (x[i * sx] - m) * s;                                                                              \
            T dnorm = w[i * sw] * dy[i * sdy];                                                                         \
            dx[i * sdx] = ((dnorm - dnorm_mean) - norm * dnorm_norm_mean) * s;                                         \
        }                                                                                                              \
    }                                                                                                                  \
    /* one row's terms of dw, db for columns [0, n) of a block: pw += norm * dy, pb += dy */                           \
    ALWAYS_INLINE void dwdb_row_##SFX(const T *dy, int64_t sdy, const T *x, int64_t sx, T m, T s, T *pw, T *pb,        \
                                      int64_t n) {                                                                     \
        _Pragma("omp simd") for (int64_t i = 0; i < n; i++) {                                                          \
            T d = dy[i * sdy];                                                                                         \
            pb[i] += d;                                                                                                \
            pw[i] += ((x[i * sx] - m) * s) * d;                                                                        \
        }                                                                                                              \
    }                                                                                                                  \
    DEFINE_NORM_PARAM_GRADS(T, SFX, 1, 1, dwdb_row_##SFX)                                                              \
    static void fwd_##SFX(const it_tdesc *xd, const it_tdesc *wd, const it_tdesc *bd, T eps, it_tdesc *yd,             \
                          it_tdesc *md, it_tdesc *rd, int64_t R, int64_t C) {                                          \
        int nl = xd->ndim - 1;                                                                                         \
        int64_t sx = xd->strides[nl], sy = yd->strides[nl], sw = wd->strides[0], sb = bd ? bd->strides[0] : 1;         \
        bool unit = (sx == 1 && sy == 1 && sw == 1 && sb == 1) || C == 1;                                              \
        _Pragma("omp parallel for schedule(static) if (R * C >= PAR_MIN)") for (int64_t r = 0; r < R; r++) {           \
            const T *x = ROW_AT(const T, xd, nl, r);                                                                   \
            T *y = ROW_AT(T, yd, nl, r);                                                                               \
            T *mean = &ELEM_AT(T, md, r);                                                                              \
            T *rstd = &ELEM_AT(T, rd, r);                                                                              \
            const T *w = wd->data, *b = bd ? bd->data : NULL;                                                          \
            if (unit)                                                                                                  \
                fwd_row_##SFX(x, 1, w, 1, b, 1, y, 1, C, eps, mean, rstd);                                             \
            else                                                                                                       \
                fwd_row_##SFX(x, sx, w, sw, b, sb, y, sy, C, eps, mean, rstd);                                         \
        }                                                                                                              \
    }                                                                                                                  \
    static void bwd_##SFX(const it_tdesc *dyd, const it_tdesc *xd, const it_tdesc *wd, const it_tdesc *md,             \
                          const it_tdesc *rd, it_tdesc *dxd, it_tdesc *dwd, it_tdesc *dbd, int64_t R, int64_t C) {     \
        int nl = xd->ndim - 1;                                                                                         \
        int64_t sx = xd->strides[nl], sdy = dyd->strides[nl], sdx = dxd->strides[nl], sw = wd->strides[0];             \
        bool unit = (sx == 1 && sdy == 1 && sdx == 1 && sw == 1) || C == 1;                                            \
        const T *w = wd->data;                                                                                         \
        _Pragma("omp parallel for schedule(static) if (R * C >= PAR_MIN)") for (int64_t r = 0; r < R; r++) {           \
            const T *x = ROW_AT(const T, xd, nl, r);                                                                   \
            const T *dy = ROW_AT(const T, dyd, nl, r);                                                                 \
            T *dx = ROW_AT(T, dxd, nl, r);                                                                             \
            T m = ELEM_AT(const T, md, r);                                                                             \
            T s = ELEM_AT(const T, rd, r);                                                                             \
            if (unit)                                                                                                  \
                bwd_row_##SFX(dy, 1, x, 1, w, 1, m, s, dx, 1, C);                                                      \
            else                                                                                                       \
                bwd_row_##SFX(dy, sdy, x, sx, w, sw, m, s, dx, sdx, C);                                                \
        }                                                                                                              \
        param_grads_##SFX(dyd, xd, md, rd, dwd, dbd, R, C);                                                            \
    }

DEFINE_LN(float, f32, sqrtf)
DEFINE_LN(double, f64, sqrt)

/* x (R, C), w (C), b (C) or NULL -> y (R, C), mean (R), rstd (R); see the header comment. */
it_status it_cpu_layernorm_fwd(it_stream *s, const it_tdesc *x, const it_tdesc *w, const it_tdesc *b, float eps,
                               it_tdesc *y, it_tdesc *mean, it_tdesc *rstd) {
    (void)s;
    const char *k = "layernorm_fwd";
    int64_t R, C;
    it_status st;
    if ((st = it_cpu_check_norm_x(k, x, &R, &C)) || (st = it_cpu_check_norm_vec(k, "w", w, C, x->dtype, false)) ||
        (b && (st = it_cpu_check_norm_vec(k, "b", b, C, x->dtype, false))) ||
        (st = it_cpu_check_like(k, "y", y, 0, "x", x, true)) ||
        (st = it_cpu_check_per_row(k, "mean", mean, "R", R, x->dtype, "x's", true)) ||
        (st = it_cpu_check_per_row(k, "rstd", rstd, "R", R, x->dtype, "x's", true)))
        return st;
    if (R == 0) return IT_OK;
    if (x->dtype == IT_DTYPE_FP32)
        fwd_f32(x, w, b, eps, y, mean, rstd, R, C);
    else
        fwd_f64(x, w, b, (double)eps, y, mean, rstd, R, C);
    return IT_OK;
}

/* dy, x (R, C), w (C), mean, rstd (R) -> dx (R, C), dw (C), db (C) or NULL. */
it_status it_cpu_layernorm_bwd(it_stream *s, const it_tdesc *dy, const it_tdesc *x, const it_tdesc *w,
                               const it_tdesc *mean, const it_tdesc *rstd, it_tdesc *dx, it_tdesc *dw, it_tdesc *db) {
    (void)s;
    const char *k = "layernorm_bwd";
    int64_t R, C;
    it_status st;
    if ((st = it_cpu_check_norm_x(k, x, &R, &C)) || (st = it_cpu_check_like(k, "dy", dy, 0, "x", x, false)) ||
        (st = it_cpu_check_norm_vec(k, "w", w, C, x->dtype, false)) ||
        (st = it_cpu_check_per_row(k, "mean", mean, "R", R, x->dtype, "x's", false)) ||
        (st = it_cpu_check_per_row(k, "rstd", rstd, "R", R, x->dtype, "x's", false)) ||
        (st = it_cpu_check_like(k, "dx", dx, 0, "x", x, true)) ||
        (st = it_cpu_check_norm_vec(k, "dw", dw, C, x->dtype, true)) ||
        (db && (st = it_cpu_check_norm_vec(k, "db", db, C, x->dtype, true))))
        return st;
    if (C == 0) return IT_OK;
    if (x->dtype == IT_DTYPE_FP32)
        bwd_f32(dy, x, w, mean, rstd, dx, dw, db, R, C);
    else
        bwd_f64(dy, x, w, mean, rstd, dx, dw, db, R, C);
    return IT_OK;
}
