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
 * no scratch memory: a second pass, parallel over blocks of LN_COLS columns, sums each
 * column's rows in order in chunks of LN_CHUNK rows, each chunk's sum then added to the
 * running total (error ~ (LN_CHUNK + R/LN_CHUNK) u instead of R u). The pass reads x and dy
 * again; it does not need per-thread partials that would have to be allocated. */
#include <math.h>

#include "cpu/cpu_kernels.h"

#define PAR_MIN 16384 /* elements below which the kernel stays on the calling thread */
#define LN_COLS 16    /* columns of dw/db one task sums */
#define LN_CHUNK 32   /* rows summed into a partial before it joins the running total */
#define ALWAYS_INLINE static inline __attribute__((always_inline))

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

/* mean/rstd: R elements of x's dtype, any shape. */
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

/* Lane sums: f(i) summed over i < n in the order of the header comment. */
#define LANE_SUM(T, res, n, F)                                                                                         \
    do {                                                                                                               \
        T r_[8] = {0, 0, 0, 0, 0, 0, 0, 0};                                                                            \
        int64_t i = 0;                                                                                                 \
        for (; i + 8 <= (n); i += 8) {                                                                                 \
            _Pragma("omp simd") for (int j = 0; j < 8; j++) {                                                          \
                int64_t k = i + j;                                                                                     \
                r_[j] += (F(k));                                                                                       \
            }                                                                                                          \
        }                                                                                                              \
        res = ((r_[0] + r_[1]) + (r_[2] + r_[3])) + ((r_[4] + r_[5]) + (r_[6] + r_[7]));                               \
        for (; i < (n); i++) res += (F(i));                                                                            \
    } while (0)

#define DEFINE_LN(T, SFX, SQRT)                                                                                        \
    /* one row: x (C) -> y (C), returns mean and rstd */                                                               \
    ALWAYS_INLINE void fwd_row_##SFX(const T *x, int64_t sx, const T *w, int64_t sw, const T *b, int64_t sb, T *y,     \
                                     int64_t sy, int64_t C, T eps, T *mean, T *rstd) {                                 \
        T m, v;                                                                                                        \
        LANE_SUM(T, m, C, XAT);                                                                                        \
        m = m / (T)C;                                                                                                  \
        LANE_SUM(T, v, C, DEVSQ);                                                                                      \
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
        LANE_SUM(T, dnorm_mean, C, DNORM);                                                                             \
        LANE_SUM(T, dnorm_norm_mean, C, DNORM_NORM);                                                                   \
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
    static void fwd_##SFX(const it_tdesc *xd, const it_tdesc *wd, const it_tdesc *bd, T eps, it_tdesc *yd,             \
                          it_tdesc *md, it_tdesc *rd, int64_t R, int64_t C) {                                          \
        int nl = xd->ndim - 1;                                                                                         \
        int64_t sx = xd->strides[nl], sy = yd->strides[nl], sw = wd->strides[0], sb = bd ? bd->strides[0] : 1;         \
        bool unit = (sx == 1 && sy == 1 && sw == 1 && sb == 1) || C == 1;                                              \
        _Pragma("omp parallel for schedule(static) if (R * C >= PAR_MIN)") for (int64_t r = 0; r < R; r++) {           \
            const T *x = (const T *)xd->data + offset_of(r, nl, xd->shape, xd->strides);                               \
            T *y = (T *)yd->data + offset_of(r, nl, yd->shape, yd->strides);                                           \
            T *mean = (T *)md->data + offset_of(r, md->ndim, md->shape, md->strides);                                  \
            T *rstd = (T *)rd->data + offset_of(r, rd->ndim, rd->shape, rd->strides);                                  \
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
            const T *x = (const T *)xd->data + offset_of(r, nl, xd->shape, xd->strides);                               \
            const T *dy = (const T *)dyd->data + offset_of(r, nl, dyd->shape, dyd->strides);                           \
            T *dx = (T *)dxd->data + offset_of(r, nl, dxd->shape, dxd->strides);                                       \
            T m = ((const T *)md->data)[offset_of(r, md->ndim, md->shape, md->strides)];                               \
            T s = ((const T *)rd->data)[offset_of(r, rd->ndim, rd->shape, rd->strides)];                               \
            if (unit)                                                                                                  \
                bwd_row_##SFX(dy, 1, x, 1, w, 1, m, s, dx, 1, C);                                                      \
            else                                                                                                       \
                bwd_row_##SFX(dy, sdy, x, sx, w, sw, m, s, dx, sdx, C);                                                \
        }                                                                                                              \
        bool unit2 = (sx == 1 && sdy == 1) || C == 1;                                                                  \
        int64_t blocks = (C + LN_COLS - 1) / LN_COLS;                                                                  \
        _Pragma("omp parallel for schedule(static) if (R * C >= PAR_MIN)") for (int64_t bk = 0; bk < blocks; bk++) {   \
            int64_t c0 = bk * LN_COLS, n = C - c0 < LN_COLS ? C - c0 : LN_COLS;                                        \
            T tw[LN_COLS] = {0}, tb[LN_COLS] = {0}, pw[LN_COLS], pb[LN_COLS];                                          \
            for (int64_t r0 = 0; r0 < R; r0 += LN_CHUNK) {                                                             \
                for (int64_t i = 0; i < n; i++) pw[i] = pb[i] = 0;                                                     \
                for (int64_t r = r0; r < R && r < r0 + LN_CHUNK; r++) {                                                \
                    const T *x = (const T *)xd->data + offset_of(r, nl, xd->shape, xd->strides) + c0 * sx;             \
                    const T *dy = (const T *)dyd->data + offset_of(r, nl, dyd->shape, dyd->strides) + c0 * sdy;        \
                    T m = ((const T *)md->data)[offset_of(r, md->ndim, md->shape, md->strides)];                       \
                    T s = ((const T *)rd->data)[offset_of(r, rd->ndim, rd->shape, rd->strides)];                       \
                    if (unit2)                                                                                         \
                        dwdb_row_##SFX(dy, 1, x, 1, m, s, pw, pb, n);                                                  \
                    else                                                                                               \
                        dwdb_row_##SFX(dy, sdy, x, sx, m, s, pw, pb, n);                                               \
                }                                                                                                      \
                for (int64_t i = 0; i < n; i++) tw[i] += pw[i], tb[i] += pb[i];                                        \
            }                                                                                                          \
            T *dw = (T *)dwd->data + c0 * dwd->strides[0];                                                             \
            for (int64_t i = 0; i < n; i++) dw[i * dwd->strides[0]] = tw[i];                                           \
            if (dbd) {                                                                                                 \
                T *db = (T *)dbd->data + c0 * dbd->strides[0];                                                         \
                for (int64_t i = 0; i < n; i++) db[i * dbd->strides[0]] = tb[i];                                       \
            }                                                                                                          \
        }                                                                                                              \
    }

#define XAT(k) x[(k)*sx]
#define DEVSQ(k) ((x[(k)*sx] - m) * (x[(k)*sx] - m))
#define DNORM(k) (w[(k)*sw] * dy[(k)*sdy])
#define DNORM_NORM(k) ((w[(k)*sw] * dy[(k)*sdy]) * ((x[(k)*sx] - m) * s))

DEFINE_LN(float, f32, sqrtf)
DEFINE_LN(double, f64, sqrt)

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

/* x (R, C), w (C), b (C) or NULL -> y (R, C), mean (R), rstd (R); see the header comment. */
it_status it_cpu_layernorm_fwd(it_stream *s, const it_tdesc *x, const it_tdesc *w, const it_tdesc *b, float eps,
                               it_tdesc *y, it_tdesc *mean, it_tdesc *rstd) {
    (void)s;
    const char *k = "layernorm_fwd";
    int64_t R, C;
    it_status st;
    if ((st = check_x(k, x, &R, &C)) || (st = check_vec(k, "w", w, C, x->dtype, false)) ||
        (b && (st = check_vec(k, "b", b, C, x->dtype, false))) || (st = check_like(k, "y", y, x, true)) ||
        (st = check_stat(k, "mean", mean, R, x->dtype, true)) || (st = check_stat(k, "rstd", rstd, R, x->dtype, true)))
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
    if ((st = check_x(k, x, &R, &C)) || (st = check_like(k, "dy", dy, x, false)) ||
        (st = check_vec(k, "w", w, C, x->dtype, false)) || (st = check_stat(k, "mean", mean, R, x->dtype, false)) ||
        (st = check_stat(k, "rstd", rstd, R, x->dtype, false)) || (st = check_like(k, "dx", dx, x, true)) ||
        (st = check_vec(k, "dw", dw, C, x->dtype, true)) || (db && (st = check_vec(k, "db", db, C, x->dtype, true))))
        return st;
    if (C == 0) return IT_OK;
    if (x->dtype == IT_DTYPE_FP32)
        bwd_f32(dy, x, w, mean, rstd, dx, dw, db, R, C);
    else
        bwd_f64(dy, x, w, mean, rstd, dx, dw, db, R, C);
    return IT_OK;
}
