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
#include <math.h>
#include <string.h>

#include "cpu/cpu_kernels.h"

#define PAR_MIN 16384 /* elements below which the kernel stays on the calling thread */
#define ALWAYS_INLINE static inline __attribute__((always_inline))

/* exp(x) in fp32 plain arithmetic, so that loops over it vectorize (libm's expf is a scalar
 * call); within 1 ulp over the whole float range (checked against fp64 libm). x = k ln2 + r,
 * |r| <= ln2/2 (Cody-Waite, two-part ln2), e^r by Cephes' degree-6 polynomial, times 2^k as
 * two exponent-field factors (each normal for x in [-104, 89], so overflow gives inf and
 * the subnormal range rounds once). NaN stays NaN. The same function is in elementwise.c. */
ALWAYS_INLINE float bits_to_f32(int32_t i) {
    float f;
    memcpy(&f, &i, sizeof f);
    return f;
}
ALWAYS_INLINE float vexpf(float x) {
    float xc = x > 89.0f ? 89.0f : x;
    xc = xc < -104.0f ? -104.0f : xc;
    xc = x == x ? xc : 0.0f;
    float k = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* round to nearest */
    float r = xc - k * 0.693359375f;
    r = r - k * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    float e = p * (r * r) + r + 1.0f;
    int32_t ki = (int32_t)k, k1 = ki / 2, k2 = ki - k1;
    float y = e * bits_to_f32((k1 + 127) << 23) * bits_to_f32((k2 + 127) << 23);
    return x == x ? y : x;
}

/* res = sum of F(i) for i < n: 8 interleaved lanes (lane j takes i = j, j+8, ...),
 * combined ((r0+r1)+(r2+r3))+((r4+r5)+(r6+r7)), then the n%8 tail in order. */
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

static it_status check_desc(const char *kernel, const char *name, const it_tdesc *t) {
    if (t == NULL) return it_error(IT_ERR_INVALID_ARG, "%s: %s is NULL", kernel, name);
    if (t->ndim < 1 || t->ndim > IT_MAX_DIMS)
        return it_error(IT_ERR_INVALID_ARG, "%s: %s.ndim = %d outside [1, %d]", kernel, name, t->ndim, IT_MAX_DIMS);
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

/* t has ref's shape and dtype; an output must not write an element twice. */
static it_status check_like(const char *kernel, const char *name, const it_tdesc *t, const char *rname,
                            const it_tdesc *ref, bool output) {
    it_status st;
    if ((st = check_desc(kernel, name, t))) return st;
    if (t->ndim != ref->ndim)
        return it_error(IT_ERR_INVALID_ARG, "%s: %s.ndim %d != %s.ndim %d", kernel, name, t->ndim, rname, ref->ndim);
    for (int d = 0; d < ref->ndim; d++) {
        if (t->shape[d] != ref->shape[d])
            return it_error(IT_ERR_INVALID_ARG, "%s: %s.shape[%d] = %lld != %s.shape[%d] = %lld", kernel, name, d,
                            (long long)t->shape[d], rname, d, (long long)ref->shape[d]);
        if (output && t->strides[d] == 0 && t->shape[d] > 1)
            return it_error(IT_ERR_INVALID_ARG, "%s: %s.strides[%d] is 0 on a dim of size %lld", kernel, name, d,
                            (long long)t->shape[d]);
    }
    if (t->dtype != ref->dtype)
        return it_error(IT_ERR_INVALID_ARG, "%s: %s dtype %s != %s dtype %s", kernel, name, it_dtype_name(t->dtype),
                        rname, it_dtype_name(ref->dtype));
    return IT_OK;
}

static int64_t offset_of(int64_t idx, int nd, const int64_t *shape, const int64_t *strides) {
    int64_t off = 0;
    for (int d = nd - 1; d >= 0; d--) {
        off += (idx % shape[d]) * strides[d];
        idx /= shape[d];
    }
    return off;
}

/* Rows, columns and the T of the mask; checks dtype, causal geometry. */
static it_status check_x(const char *kernel, const it_softmax_args *args, const char *name, const it_tdesc *x,
                         int64_t *R, int64_t *T, int64_t *S) {
    if (args == NULL) return it_error(IT_ERR_INVALID_ARG, "%s: args is NULL", kernel);
    it_status st;
    if ((st = check_desc(kernel, name, x))) return st;
    if (x->dtype != IT_DTYPE_FP32 && x->dtype != IT_DTYPE_FP64)
        return it_error(IT_ERR_UNSUPPORTED, "%s: dtype %s not supported", kernel, it_dtype_name(x->dtype));
    *S = x->shape[x->ndim - 1];
    *T = x->ndim >= 2 ? x->shape[x->ndim - 2] : 1;
    *R = 1;
    for (int d = 0; d < x->ndim - 1; d++) *R *= x->shape[d];
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
        LANE_SUM(TY, sum, n, YAT);                                                                                     \
        TY inv = (TY)1 / sum;                                                                                          \
        _Pragma("omp simd") for (int64_t i = 0; i < n; i++) y[i * sy] *= inv;                                          \
        for (int64_t i = n; i < S; i++) y[i * sy] = 0;                                                                 \
    }                                                                                                                  \
    ALWAYS_INLINE void bwd_row_##SFX(const TY *y, int64_t sy, const TY *dy, int64_t sdy, TY *dx, int64_t sdx,          \
                                     TY scale, int64_t n, int64_t S) {                                                 \
        TY dot;                                                                                                        \
        LANE_SUM(TY, dot, n, DYY);                                                                                     \
        _Pragma("omp simd") for (int64_t i = 0; i < n; i++) dx[i * sdx] = scale * y[i * sy] * (dy[i * sdy] - dot);     \
        for (int64_t i = n; i < S; i++) dx[i * sdx] = 0;                                                               \
    }                                                                                                                  \
    static void fwd_##SFX(const it_softmax_args *args, const it_tdesc *xd, it_tdesc *yd, int64_t R, int64_t T,         \
                          int64_t S) {                                                                                 \
        int nl = xd->ndim - 1;                                                                                         \
        int64_t sx = xd->strides[nl], sy = yd->strides[nl];                                                            \
        TY scale = (TY)args->scale;                                                                                    \
        _Pragma("omp parallel for schedule(static) if (R * S >= PAR_MIN)") for (int64_t r = 0; r < R; r++) {           \
            const TY *x = (const TY *)xd->data + offset_of(r, nl, xd->shape, xd->strides);                             \
            TY *y = (TY *)yd->data + offset_of(r, nl, yd->shape, yd->strides);                                         \
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
            const TY *y = (const TY *)yd->data + offset_of(r, nl, yd->shape, yd->strides);                             \
            const TY *dy = (const TY *)dyd->data + offset_of(r, nl, dyd->shape, dyd->strides);                         \
            TY *dx = (TY *)dxd->data + offset_of(r, nl, dxd->shape, dxd->strides);                                     \
            int64_t n = valid_cols(args, r, T, S);                                                                     \
            if ((sy == 1 && sdy == 1 && sdx == 1) || S == 1)                                                           \
                bwd_row_##SFX(y, 1, dy, 1, dx, 1, scale, n, S);                                                        \
            else                                                                                                       \
                bwd_row_##SFX(y, sy, dy, sdy, dx, sdx, scale, n, S);                                                   \
        }                                                                                                              \
    }

#define YAT(i) y[(i)*sy]
#define DYY(i) (dy[(i)*sdy] * y[(i)*sy])
DEFINE_SOFTMAX(float, f32, vexpf)
DEFINE_SOFTMAX(double, f64, exp)

/* x (..., T, S) -> y = softmax(scale * x) over S, causal-masked if asked. */
it_status it_cpu_softmax_fwd(it_stream *s, const it_softmax_args *args, const it_tdesc *x, it_tdesc *y) {
    (void)s;
    int64_t R, T, S;
    it_status st;
    if ((st = check_x("softmax_fwd", args, "x", x, &R, &T, &S)) ||
        (st = check_like("softmax_fwd", "y", y, "x", x, true)))
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
        (st = check_like("softmax_bwd", "dy", dy, "y", y, false)) ||
        (st = check_like("softmax_bwd", "dx", dx, "y", y, true)))
        return st;
    if (R == 0 || S == 0) return IT_OK;
    if (y->dtype == IT_DTYPE_FP32)
        bwd_f32(args, y, dy, dx, R, T, S);
    else
        bwd_f64(args, y, dy, dx, R, T, S);
    return IT_OK;
}
