/* Softmax over the last dim, with an optional causal mask.
 *
 *   x (..., T, S) -> y (..., T, S):  z = scale * x
 *   y[t, s] = exp(z[t, s] - max_s' z[t, s']) * (1 / sum_s' exp(z[t, s'] - max))   for s <= lim(t)
 *   y[t, s] = 0                                                                     for s >  lim(t)
 *   lim(t) = S - 1, or with causal t + (S - T) (needs S >= T, so no row is fully masked)
 *   bwd: dx = scale * y * (dy - sum_s(dy * y)), 0 on masked entries
 *
 * A 1-D x is one row (T = 1). Sums (the exps, the backward's dot) run in the tensor's type
 * (fp32 for fp32) with 8 interleaved lanes (see LANE_SUM): a fixed order that vectorizes.
 * fp32 exp is vexpf (within 1 ulp), fp64 libm's. Rows are independent, so results do not
 * depend on the thread count. */
#include "cpu/cpu_util.h"

#define PAR_MIN 16384 /* elements below which the kernel stays on the calling thread */

/* Rows, columns and the T of the mask; checks dtype, causal geometry. */
static it_status check_x(const char *kernel, const it_softmax_args *args, const char *name, const it_tdesc *x,
                         int64_t *R, int64_t *T, int64_t *S) {
    if (args == NULL) return it_error(IT_ERR_INVALID_ARG, "%s: args is NULL", kernel);
    it_status st;
    if ((st = it_cpu_check_desc(kernel, name, x, 1)) || (st = it_cpu_check_fp32_fp64(kernel, x))) return st;
    *S = x->shape[x->ndim - 1];
    *T = x->ndim >= 2 ? x->shape[x->ndim - 2] : 1;
    *R = rows_of(x);
    if (args->causal && *S<*T && * R> 0)
        return it_error(IT_ERR_INVALID_ARG, "%s: causal mask needs cols >= rows, got rows %lld, cols %lld", kernel,
                        (long long)*T, (long long)*S);
    return IT_OK;
}

/* Number of unmasked columns of row r. */
static inline int64_t valid_cols(const it_softmax_args *args, int64_t r, int64_t T, int64_t S) {
    return args->causal ? (r % T) + (S - T) + 1 : S;
}

#define DEFINE_SOFTMAX(TY, SFX, EXP)                                                                                   \
    /* x (S) -> y (S), the first n columns unmasked */                                                                 \
    ALWAYS_INLINE void fwd_row_##SFX(const TY *x, int64_t sx, TY *y, int64_t sy, TY scale, int64_t n, int64_t S) {     \
        TY mx = (TY)-INFINITY, sum;                                                                                    \
        _Pragma("omp simd reduction(max : mx)") for (int64_t i = 0; i < n; i++) {                                      \
            TY v = scale * x[i * sx];                                                                                  \
            mx = v > mx ? v : mx;                                                                                      \
        }                                                                                                              \
        _Pragma("omp simd") for (int64_t i = 0; i < n; i++) y[i * sy] = EXP(scale * x[i * sx] - mx);                   \
        LANE_SUM(TY, sum, n, i, y[i * sy]);                                                                            \
        TY inv = (TY)1 / sum;                                                                                          \
        _Pragma("omp simd") for (int64_t i = 0; i < n; i++) y[i * sy] *= inv;                                          \
        for (int64_t i = n; i < S; i++) y[i * sy] = 0;                                                                 \
    }                                                                                                                  \
    ALWAYS_INLINE void bwd_row_##SFX(const TY *y, int64_t sy, const TY *dy, int64_t sdy, TY *dx, int64_t sdx,          \
                                     TY scale, int64_t n, int64_t S) {                                                 \
        TY dot;                                                                                                        \
        LANE_SUM(TY, dot, n, i, dy[i * sdy] * y[i * sy]);                                                              \
        _Pragma("omp simd") for (int64_t i = 0; i < n; i++) dx[i * sdx] = scale * y[i * sy] * (dy[i * sdy] - dot);     \
        for (int64_t i = n; i < S; i++) dx[i * sdx] = 0;                                                               \
    }                                                                                                                  \
    static void fwd_##SFX(const it_softmax_args *args, const it_tdesc *xd, it_tdesc *yd, int64_t R, int64_t T,         \
                          int64_t S) {                                                                                 \
        int nl = xd->ndim - 1;                                                                                         \
        int64_t sx = xd->strides[nl], sy = yd->strides[nl];                                                            \
        TY scale = (TY)args->scale;                                                                                    \
        _Pragma("omp parallel for schedule(static) if (R * S >= PAR_MIN)") for (int64_t r = 0; r < R; r++) {           \
            const TY *x = ROW_AT(const TY, xd, nl, r);                                                                 \
            TY *y = ROW_AT(TY, yd, nl, r);                                                                             \
            int64_t n = valid_cols(args, r, T, S);                                                                     \
            if ((sx == 1 && sy == 1) || S == 1)                                                                        \
                fwd_row_##SFX(x, 1, y, 1, scale, n, S);                                                                \
            else                                                                                                       \
                fwd_row_##SFX(x, sx, y, sy, scale, n, S);                                                              \
        }                                                                                                              \
    }                                                                                                                  \
    static void bwd_##SFX(const it_softmax_args *args, const it_tdesc *yd, const it_tdesc *dyd, it_tdesc *dxd,         \
                          int64_t R, int64_t T, int64_t S) {                                                           \
        int nl = yd->ndim - 1;                                                                                         \
        int64_t sy = yd->strides[nl], sdy = dyd->strides[nl], sdx = dxd->strides[nl];                                  \
        TY scale = (TY)args->scale;                                                                                    \
        _Pragma("omp parallel for schedule(static) if (R * S >= PAR_MIN)") for (int64_t r = 0; r < R; r++) {           \
            const TY *y = ROW_AT(const TY, yd, nl, r);                                                                 \
            const TY *dy = ROW_AT(const TY, dyd, nl, r);                                                               \
            TY *dx = ROW_AT(TY, dxd, nl, r);                                                                           \
            int64_t n = valid_cols(args, r, T, S);                                                                     \
            if ((sy == 1 && sdy == 1 && sdx == 1) || S == 1)                                                           \
                bwd_row_##SFX(y, 1, dy, 1, dx, 1, scale, n, S);                                                        \
            else                                                                                                       \
                bwd_row_##SFX(y, sy, dy, sdy, dx, sdx, scale, n, S);                                                   \
        }                                                                                                              \
    }

DEFINE_SOFTMAX(float, f32, vexpf)
DEFINE_SOFTMAX(double, f64, exp)

/* x (..., T, S) -> y = softmax(scale * x) over S, causal-masked if asked. */
it_status it_cpu_softmax_fwd(it_stream *s, const it_softmax_args *args, const it_tdesc *x, it_tdesc *y) {
    (void)s;
    int64_t R, T, S;
    it_status st;
    if ((st = check_x("softmax_fwd", args, "x", x, &R, &T, &S)) ||
        (st = it_cpu_check_like("softmax_fwd", "y", y, 1, "x", x, true)))
        return st;
    if (R == 0 || S == 0) return IT_OK;
    if (x->dtype == IT_DTYPE_FP32)
        fwd_f32(args, x, y, R, T, S);
    else
        fwd_f64(args, x, y, R, T, S);
    return IT_OK;
}

/* y, dy (..., T, S) -> dx = scale * y * (dy - sum(dy * y)). */
it_status it_cpu_softmax_bwd(it_stream *s, const it_softmax_args *args, const it_tdesc *y, const it_tdesc *dy,
                             it_tdesc *dx) {
    (void)s;
    int64_t R, T, S;
    it_status st;
    if ((st = check_x("softmax_bwd", args, "y", y, &R, &T, &S)) ||
        (st = it_cpu_check_like("softmax_bwd", "dy", dy, 1, "y", y, false)) ||
        (st = it_cpu_check_like("softmax_bwd", "dx", dx, 1, "y", y, true)))
        return st;
    if (R == 0 || S == 0) return IT_OK;
    if (y->dtype == IT_DTYPE_FP32)
        bwd_f32(args, y, dy, dx, R, T, S);
    else
        bwd_f64(args, y, dy, dx, R, T, S);
    return IT_OK;
}
