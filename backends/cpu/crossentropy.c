/* Cross entropy over a padded vocabulary (llm.c's Vp >= V): only the first `valid` columns
 * take part.
 *
 *   fwd: logits (N, Vp), targets (N) -> losses (N)
 *        m = max_{v<V} x[n, v];  losses[n] = log(sum_{v<V} exp(x[n, v] - m)) - (x[n, t] - m)
 *        (torch's log_softmax order), t = targets[n] in [0, V)
 *   bwd: dlogits[n, v] = (exp(x[n, v] - m) * (1 / sum) - [v == t]) * dlosses[n]   for v < V
 *        dlogits[n, v] = 0                                                       for V <= v < Vp
 *
 * Leading dims of logits are flattened into N; targets, losses and dlosses hold N elements
 * in any shape. fp32 logits give fp32 losses (the exp sum in fp32 with 8 interleaved
 * lanes as in softmax.c; exp is vexpf, within 1 ulp), fp64 give fp64 (libm exp). Every target
 * is checked before anything is written. Rows are independent: results do not depend on the
 * thread count. */
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

static inline int64_t target_at(const it_tdesc *t, int64_t n) {
    int64_t off = offset_of(n, t->ndim, t->shape, t->strides);
    return t->dtype == IT_DTYPE_I32 ? (int64_t)((const int32_t *)t->data)[off] : ((const int64_t *)t->data)[off];
}

/* logits (N, Vp) fp32/fp64, targets (N) int32/int64 in [0, valid), per-row vector (N). */
static it_status check_common(const char *kernel, const it_tdesc *logits, const it_tdesc *targets, int64_t valid,
                              int64_t *N, int64_t *Vp) {
    it_status st;
    if ((st = check_desc(kernel, "logits", logits)) || (st = check_desc(kernel, "targets", targets))) return st;
    if (logits->ndim < 2)
        return it_error(IT_ERR_INVALID_ARG, "%s: logits must be (N, Vp), got ndim %d", kernel, logits->ndim);
    if (logits->dtype != IT_DTYPE_FP32 && logits->dtype != IT_DTYPE_FP64)
        return it_error(IT_ERR_UNSUPPORTED, "%s: dtype %s not supported", kernel, it_dtype_name(logits->dtype));
    *Vp = logits->shape[logits->ndim - 1];
    *N = 1;
    for (int d = 0; d < logits->ndim - 1; d++) *N *= logits->shape[d];
    if (numel(targets) != *N)
        return it_error(IT_ERR_INVALID_ARG, "%s: targets has %lld elements, expected N = %lld", kernel,
                        (long long)numel(targets), (long long)*N);
    if (targets->dtype != IT_DTYPE_I32 && targets->dtype != IT_DTYPE_I64)
        return it_error(IT_ERR_INVALID_ARG, "%s: targets dtype %s is not int32 or int64", kernel,
                        it_dtype_name(targets->dtype));
    if (valid < 0 || valid > *Vp || (valid == 0 && *N > 0))
        return it_error(IT_ERR_INVALID_ARG, "%s: valid = %lld outside [1, Vp = %lld]", kernel, (long long)valid,
                        (long long)*Vp);
    for (int64_t n = 0; n < *N; n++) {
        int64_t t = target_at(targets, n);
        if (t < 0 || t >= valid)
            return it_error(IT_ERR_INVALID_ARG, "%s: targets[%lld] = %lld outside [0, %lld)", kernel, (long long)n,
                            (long long)t, (long long)valid);
    }
    return IT_OK;
}

/* N elements of the logits' dtype, any shape. */
static it_status check_rowvec(const char *kernel, const char *name, const it_tdesc *t, int64_t N, it_dtype dt,
                              bool output) {
    it_status st;
    if ((st = check_desc(kernel, name, t))) return st;
    if (numel(t) != N)
        return it_error(IT_ERR_INVALID_ARG, "%s: %s has %lld elements, expected N = %lld", kernel, name,
                        (long long)numel(t), (long long)N);
    if (t->dtype != dt)
        return it_error(IT_ERR_INVALID_ARG, "%s: %s dtype %s, expected %s (the logits')", kernel, name,
                        it_dtype_name(t->dtype), it_dtype_name(dt));
    for (int d = 0; output && d < t->ndim; d++)
        if (t->strides[d] == 0 && t->shape[d] > 1)
            return it_error(IT_ERR_INVALID_ARG, "%s: %s.strides[%d] is 0 on a dim of size %lld", kernel, name, d,
                            (long long)t->shape[d]);
    return IT_OK;
}

#define DEFINE_CE(T, SFX, EXP, LOG)                                                                                    \
    /* max and exp-sum of x[0..V) */                                                                                   \
    ALWAYS_INLINE void stats_##SFX(const T *x, int64_t sx, int64_t V, T *m, T *sum) {                                  \
        T mx = (T)-INFINITY, s;                                                                                        \
        _Pragma("omp simd reduction(max : mx)") for (int64_t v = 0; v < V; v++) mx = x[v * sx] > mx ? x[v * sx] : mx;  \
        T r[8] = {0, 0, 0, 0, 0, 0, 0, 0};                                                                             \
        int64_t i = 0;                                                                                                 \
        for (; i + 8 <= V; i += 8) {                                                                                   \
            _Pragma("omp simd") for (int j = 0; j < 8; j++) r[j] += EXP(x[(i + j) * sx] - mx);                         \
        }                                                                                                              \
        s = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));                                         \
        for (; i < V; i++) s += EXP(x[i * sx] - mx);                                                                   \
        *m = mx;                                                                                                       \
        *sum = s;                                                                                                      \
    }                                                                                                                  \
    /* (p - [v == t]) * dl, computed as p * dl everywhere, then the target column */                                   \
    ALWAYS_INLINE void bwd_row_##SFX(const T *x, int64_t sx, T *dx, int64_t sdx, int64_t V, int64_t Vp, int64_t t,     \
                                     T dl) {                                                                           \
        T mx, sum;                                                                                                     \
        stats_##SFX(x, sx, V, &mx, &sum);                                                                              \
        T inv = (T)1 / sum;                                                                                            \
        _Pragma("omp simd") for (int64_t v = 0; v < V; v++) dx[v * sdx] = (EXP(x[v * sx] - mx) * inv) * dl;            \
        dx[t * sdx] = (EXP(x[t * sx] - mx) * inv - (T)1) * dl;                                                         \
        for (int64_t v = V; v < Vp; v++) dx[v * sdx] = 0;                                                              \
    }                                                                                                                  \
    static void fwd_##SFX(const it_tdesc *ld, const it_tdesc *td, int64_t V, it_tdesc *od, int64_t N) {                \
        int nl = ld->ndim - 1;                                                                                         \
        int64_t sx = ld->strides[nl];                                                                                  \
        _Pragma("omp parallel for schedule(static) if (N * V >= PAR_MIN)") for (int64_t n = 0; n < N; n++) {           \
            const T *x = (const T *)ld->data + offset_of(n, nl, ld->shape, ld->strides);                               \
            T m, sum;                                                                                                  \
            if (sx == 1)                                                                                               \
                stats_##SFX(x, 1, V, &m, &sum);                                                                        \
            else                                                                                                       \
                stats_##SFX(x, sx, V, &m, &sum);                                                                       \
            ((T *)od->data)[offset_of(n, od->ndim, od->shape, od->strides)] =                                          \
                LOG(sum) - (x[target_at(td, n) * sx] - m);                                                             \
        }                                                                                                              \
    }                                                                                                                  \
    static void bwd_##SFX(const it_tdesc *ld, const it_tdesc *td, int64_t V, const it_tdesc *gd, it_tdesc *dd,         \
                          int64_t N, int64_t Vp) {                                                                     \
        int nl = ld->ndim - 1;                                                                                         \
        int64_t sx = ld->strides[nl], sdx = dd->strides[nl];                                                           \
        _Pragma("omp parallel for schedule(static) if (N * Vp >= PAR_MIN)") for (int64_t n = 0; n < N; n++) {          \
            const T *x = (const T *)ld->data + offset_of(n, nl, ld->shape, ld->strides);                               \
            T *dx = (T *)dd->data + offset_of(n, nl, dd->shape, dd->strides);                                          \
            T dl = ((const T *)gd->data)[offset_of(n, gd->ndim, gd->shape, gd->strides)];                              \
            int64_t t = target_at(td, n);                                                                              \
            if ((sx == 1 && sdx == 1) || Vp == 1)                                                                      \
                bwd_row_##SFX(x, 1, dx, 1, V, Vp, t, dl);                                                              \
            else                                                                                                       \
                bwd_row_##SFX(x, sx, dx, sdx, V, Vp, t, dl);                                                           \
        }                                                                                                              \
    }

DEFINE_CE(float, f32, vexpf, logf)
DEFINE_CE(double, f64, exp, log)

/* logits (N, Vp), targets (N) -> losses (N); see the header comment. */
it_status it_cpu_cross_entropy_fwd(it_stream *s, const it_tdesc *logits, const it_tdesc *targets, int64_t valid,
                                   it_tdesc *losses) {
    (void)s;
    const char *k = "cross_entropy_fwd";
    int64_t N, Vp;
    it_status st;
    if ((st = check_common(k, logits, targets, valid, &N, &Vp)) ||
        (st = check_rowvec(k, "losses", losses, N, logits->dtype, true)))
        return st;
    if (N == 0) return IT_OK;
    if (logits->dtype == IT_DTYPE_FP32)
        fwd_f32(logits, targets, valid, losses, N);
    else
        fwd_f64(logits, targets, valid, losses, N);
    return IT_OK;
}

/* logits (N, Vp), targets (N), dlosses (N) -> dlogits (N, Vp) (written, padding = 0). */
it_status it_cpu_cross_entropy_bwd(it_stream *s, const it_tdesc *logits, const it_tdesc *targets, int64_t valid,
                                   const it_tdesc *dlosses, it_tdesc *dlogits) {
    (void)s;
    const char *k = "cross_entropy_bwd";
    int64_t N, Vp;
    it_status st;
    if ((st = check_common(k, logits, targets, valid, &N, &Vp)) ||
        (st = check_rowvec(k, "dlosses", dlosses, N, logits->dtype, false)) || (st = check_desc(k, "dlogits", dlogits)))
        return st;
    if (dlogits->ndim != logits->ndim || dlogits->dtype != logits->dtype)
        return it_error(IT_ERR_INVALID_ARG, "%s: dlogits (ndim %d, %s) differs from logits (ndim %d, %s)", k,
                        dlogits->ndim, it_dtype_name(dlogits->dtype), logits->ndim, it_dtype_name(logits->dtype));
    for (int d = 0; d < logits->ndim; d++) {
        if (dlogits->shape[d] != logits->shape[d])
            return it_error(IT_ERR_INVALID_ARG, "%s: dlogits.shape[%d] = %lld != logits.shape[%d] = %lld", k, d,
                            (long long)dlogits->shape[d], d, (long long)logits->shape[d]);
        if (dlogits->strides[d] == 0 && dlogits->shape[d] > 1)
            return it_error(IT_ERR_INVALID_ARG, "%s: dlogits.strides[%d] is 0 on a dim of size %lld", k, d,
                            (long long)dlogits->shape[d]);
    }
    if (N == 0 || Vp == 0) return IT_OK;
    if (logits->dtype == IT_DTYPE_FP32)
        bwd_f32(logits, targets, valid, dlosses, dlogits, N, Vp);
    else
        bwd_f64(logits, targets, valid, dlosses, dlogits, N, Vp);
    return IT_OK;
}
