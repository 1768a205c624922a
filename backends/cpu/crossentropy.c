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
 * lanes, LANE_SUM; exp is vexpf, within 1 ulp), fp64 give fp64 (libm exp). Every target
 * is checked before anything is written. Rows are independent: results do not depend on the
 * thread count.
 *
 * The _low kernels take bf16 or fp16 logits (autocast's LM head): each row is widened into
 * an fp32 row per thread (host memory taken for the call, as gemm's temporaries are) and the
 * fp32 kernel's very arithmetic runs on it, so their losses are the fp32 kernel's on
 * cast(logits, fp32) bit for bit; the backward rounds each fp32 dlogit once into the logits'
 * dtype (it_sc_fp32_to_bf16 / _fp16, cast()'s rule). */
#include <omp.h>
#include <stdlib.h>

#include "cpu/cpu_util.h"
#include "infinitrain/scalar/it_scalar_cast.h"

#define PAR_MIN 16384 /* elements below which the kernel stays on the calling thread */

/* Fetch the 16 elements of T at p + i into L2, one prefetch per line (nothing when p is
 * NULL). A row of GPT-2's logits is 201 KB: while the forward's exp pass works on one row in
 * L2, it fetches the next, which the max pass would otherwise read from DRAM as one stream
 * (bench_kernels, (256, 50304): 3.7 -> 3.25 ms). The backward gained nothing from the same. */
#define PREFETCH_16(T, p, i)                                                                                           \
    do {                                                                                                               \
        if (p)                                                                                                         \
            for (int l_ = 0; l_ < (int)(16 * sizeof(T)); l_ += 64)                                                     \
                __builtin_prefetch((const char *)((p) + (i)) + l_, 0, 2);                                              \
    } while (0)

static inline int64_t target_at(const it_tdesc *t, int64_t n) {
    int64_t off = offset_of(n, t->ndim, t->shape, t->strides);
    return t->dtype == IT_DTYPE_I32 ? (int64_t)((const int32_t *)t->data)[off] : ((const int64_t *)t->data)[off];
}

/* logits (N, Vp) fp32/fp64 (bf16/fp16 when `low`), targets (N) int32/int64 in [0, valid),
 * per-row vector (N). */
static it_status check_common(const char *kernel, const it_tdesc *logits, const it_tdesc *targets, int64_t valid,
                              bool low, int64_t *N, int64_t *Vp) {
    it_status st;
    if ((st = it_cpu_check_desc(kernel, "logits", logits, 0)) ||
        (st = it_cpu_check_desc(kernel, "targets", targets, 0)))
        return st;
    if (logits->ndim < 2)
        return it_error(IT_ERR_INVALID_ARG, "%s: logits must be (N, Vp), got ndim %d", kernel, logits->ndim);
    if (low && logits->dtype != IT_DTYPE_BF16 && logits->dtype != IT_DTYPE_FP16)
        return it_error(IT_ERR_INVALID_ARG, "%s: logits dtype %s is not bfloat16 or float16", kernel,
                        it_dtype_name(logits->dtype));
    if (!low && (st = it_cpu_check_fp32_fp64(kernel, logits))) return st;
    *Vp = logits->shape[logits->ndim - 1];
    *N = rows_of(logits);
    if ((st = it_cpu_check_count(kernel, "targets", targets, "N", *N))) return st;
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

/* The forward's checks: check_common, and losses (N) in the logits' dtype (fp32 for half
 * logits). */
static it_status check_fwd(const char *kernel, const it_tdesc *logits, const it_tdesc *targets, int64_t valid, bool low,
                           const it_tdesc *losses, int64_t *N, int64_t *Vp) {
    it_status st = check_common(kernel, logits, targets, valid, low, N, Vp);
    return st ? st
              : it_cpu_check_per_row(kernel, "losses", losses, "N", *N, low ? IT_DTYPE_FP32 : logits->dtype,
                                     low ? "fp32 for half logits" : "the logits'", true);
}

/* The backward's: check_common, dlosses (N) as the forward's losses, dlogits like logits. */
static it_status check_bwd(const char *kernel, const it_tdesc *logits, const it_tdesc *targets, int64_t valid, bool low,
                           const it_tdesc *dlosses, const it_tdesc *dlogits, int64_t *N, int64_t *Vp) {
    it_status st;
    if ((st = check_common(kernel, logits, targets, valid, low, N, Vp)) ||
        (st = it_cpu_check_per_row(kernel, "dlosses", dlosses, "N", *N, low ? IT_DTYPE_FP32 : logits->dtype,
                                   low ? "fp32 for half logits" : "the logits'", false)) ||
        (st = it_cpu_check_desc(kernel, "dlogits", dlogits, 0)))
        return st;
    if (dlogits->ndim != logits->ndim || dlogits->dtype != logits->dtype)
        return it_error(IT_ERR_INVALID_ARG, "%s: dlogits (ndim %d, %s) differs from logits (ndim %d, %s)", kernel,
                        dlogits->ndim, it_dtype_name(dlogits->dtype), logits->ndim, it_dtype_name(logits->dtype));
    return it_cpu_check_same(kernel, "dlogits", dlogits, "logits", logits, true);
}

#define DEFINE_CE(T, SFX, EXP, LOG)                                                                                    \
    /* max and exp-sum of x[0..V); the exp pass fetches row `next` (NULL: none) into L2. */                            \
    ALWAYS_INLINE void stats_##SFX(const T *x, int64_t sx, int64_t V, const T *next, T *m, T *sum) {                   \
        T mx = (T)-INFINITY, s;                                                                                        \
        _Pragma("omp simd reduction(max : mx)") for (int64_t v = 0; v < V; v++) mx = x[v * sx] > mx ? x[v * sx] : mx;  \
        LANE_SUM_HOOKED(T, s, V, i, EXP(x[i * sx] - mx), PREFETCH_16(T, next, i));                                     \
        *m = mx;                                                                                                       \
        *sum = s;                                                                                                      \
    }                                                                                                                  \
    /* (p - [v == t]) * dl, computed as p * dl everywhere, then the target column. The exps                            \
     * go into dx as they are summed, so each is computed once (x may be dx itself). */                                \
    ALWAYS_INLINE void bwd_row_##SFX(const T *x, int64_t sx, T *dx, int64_t sdx, int64_t V, int64_t Vp, int64_t t,     \
                                     T dl) {                                                                           \
        T mx = (T)-INFINITY, sum;                                                                                      \
        _Pragma("omp simd reduction(max : mx)") for (int64_t v = 0; v < V; v++) mx = x[v * sx] > mx ? x[v * sx] : mx;  \
        LANE_SUM(T, sum, V, i, (dx[i * sdx] = EXP(x[i * sx] - mx)));                                                   \
        T inv = (T)1 / sum, et = dx[t * sdx];                                                                          \
        _Pragma("omp simd") for (int64_t v = 0; v < V; v++) dx[v * sdx] = (dx[v * sdx] * inv) * dl;                    \
        dx[t * sdx] = (et * inv - (T)1) * dl;                                                                          \
        for (int64_t v = V; v < Vp; v++) dx[v * sdx] = 0;                                                              \
    }                                                                                                                  \
    static void fwd_##SFX(const it_tdesc *ld, const it_tdesc *td, int64_t V, it_tdesc *od, int64_t N) {                \
        int nl = ld->ndim - 1;                                                                                         \
        int64_t sx = ld->strides[nl];                                                                                  \
        _Pragma("omp parallel for schedule(static) if (N * V >= PAR_MIN)") for (int64_t n = 0; n < N; n++) {           \
            const T *x = ROW_AT(const T, ld, nl, n);                                                                   \
            T m, sum;                                                                                                  \
            if (sx == 1)                                                                                               \
                stats_##SFX(x, 1, V, n + 1 < N ? ROW_AT(const T, ld, nl, n + 1) : NULL, &m, &sum);                     \
            else                                                                                                       \
                stats_##SFX(x, sx, V, NULL, &m, &sum);                                                                 \
            ELEM_AT(T, od, n) = LOG(sum) - (x[target_at(td, n) * sx] - m);                                             \
        }                                                                                                              \
    }                                                                                                                  \
    static void bwd_##SFX(const it_tdesc *ld, const it_tdesc *td, int64_t V, const it_tdesc *gd, it_tdesc *dd,         \
                          int64_t N, int64_t Vp) {                                                                     \
        int nl = ld->ndim - 1;                                                                                         \
        int64_t sx = ld->strides[nl], sdx = dd->strides[nl];                                                           \
        _Pragma("omp parallel for schedule(static) if (N * Vp >= PAR_MIN)") for (int64_t n = 0; n < N; n++) {          \
            const T *x = ROW_AT(const T, ld, nl, n);                                                                   \
            T *dx = ROW_AT(T, dd, nl, n);                                                                              \
            T dl = ELEM_AT(const T, gd, n);                                                                            \
            int64_t t = target_at(td, n);                                                                              \
            if ((sx == 1 && sdx == 1) || Vp == 1)                                                                      \
                bwd_row_##SFX(x, 1, dx, 1, V, Vp, t, dl);                                                              \
            else                                                                                                       \
                bwd_row_##SFX(x, sx, dx, sdx, V, Vp, t, dl);                                                           \
        }                                                                                                              \
    }

DEFINE_CE(float, f32, vexpf, logf)
DEFINE_CE(double, f64, exp, log)

/* Half logits: each row widened (exactly) into the thread's fp32 row w (V floats, in cache)
 * in the max pass, then the fp32 kernels' own arithmetic on w: stats_f32's exp-sum for the
 * loss; for the backward, bwd_row_f32's with the exps in w and each dlogit rounded by RND on
 * its way into dx (x may be dx itself: the row is read whole before the first write).
 * Widening first keeps the exp pass at the fp32 kernel's speed (GCC vectorizes it with a
 * widening load inside at half that speed: 45 against 23 us a GPT-2 row on Zen 5). */
#define DEFINE_CE_LOW(SFX, LD, RND)                                                                                    \
    /* the row widened into w, and its max (the fp32 kernels' max pass, on the same values) */                         \
    ALWAYS_INLINE float widen_##SFX(const uint16_t *x, int64_t sx, int64_t V, float *restrict w) {                     \
        float mx = -INFINITY;                                                                                          \
        _Pragma("omp simd reduction(max : mx)") for (int64_t v = 0; v < V; v++) {                                      \
            w[v] = LD(x, v * sx);                                                                                      \
            mx = w[v] > mx ? w[v] : mx;                                                                                \
        }                                                                                                              \
        return mx;                                                                                                     \
    }                                                                                                                  \
    /* stats_f32's exp-sum on w (max mx); it fetches the half row `next` into L2 */                                    \
    ALWAYS_INLINE float expsum_##SFX(const float *w, int64_t V, float mx, const uint16_t *next) {                      \
        float s;                                                                                                       \
        LANE_SUM_HOOKED(float, s, V, i, vexpf(w[i] - mx), PREFETCH_16(uint16_t, next, i));                             \
        return s;                                                                                                      \
    }                                                                                                                  \
    static void fwd_##SFX(const it_tdesc *ld, const it_tdesc *td, int64_t V, it_tdesc *od, int64_t N, int nt,          \
                          float *rows) {                                                                               \
        int nl = ld->ndim - 1;                                                                                         \
        int64_t sx = ld->strides[nl];                                                                                  \
        (void)nt; /* (a build without OpenMP) */                                                                       \
        _Pragma("omp parallel for schedule(static) num_threads(nt) if (nt > 1)") for (int64_t n = 0; n < N; n++) {     \
            const uint16_t *x = ROW_AT(const uint16_t, ld, nl, n);                                                     \
            float *w = rows + (size_t)omp_get_thread_num() * (size_t)V, m, sum;                                        \
            if (sx == 1) {                                                                                             \
                m = widen_##SFX(x, 1, V, w);                                                                           \
                sum = expsum_##SFX(w, V, m, n + 1 < N ? ROW_AT(const uint16_t, ld, nl, n + 1) : NULL);                 \
            } else {                                                                                                   \
                m = widen_##SFX(x, sx, V, w);                                                                          \
                sum = expsum_##SFX(w, V, m, NULL);                                                                     \
            }                                                                                                          \
            ELEM_AT(float, od, n) = logf(sum) - (w[target_at(td, n)] - m);                                             \
        }                                                                                                              \
    }                                                                                                                  \
    ALWAYS_INLINE void bwd_row_##SFX(const uint16_t *x, int64_t sx, uint16_t *dx, int64_t sdx, int64_t V, int64_t Vp,  \
                                     int64_t t, float dl, float *restrict w) {                                         \
        float mx = widen_##SFX(x, sx, V, w), sum;                                                                      \
        LANE_SUM(float, sum, V, i, (w[i] = vexpf(w[i] - mx)));                                                         \
        float inv = 1.0f / sum, et = w[t];                                                                             \
        _Pragma("omp simd") for (int64_t v = 0; v < V; v++) dx[v * sdx] = RND((w[v] * inv) * dl);                      \
        dx[t * sdx] = RND((et * inv - 1.0f) * dl);                                                                     \
        for (int64_t v = V; v < Vp; v++) dx[v * sdx] = 0;                                                              \
    }                                                                                                                  \
    static void bwd_##SFX(const it_tdesc *ld, const it_tdesc *td, int64_t V, const it_tdesc *gd, it_tdesc *dd,         \
                          int64_t N, int64_t Vp, int nt, float *rows) {                                                \
        int nl = ld->ndim - 1;                                                                                         \
        int64_t sx = ld->strides[nl], sdx = dd->strides[nl];                                                           \
        (void)nt;                                                                                                      \
        _Pragma("omp parallel for schedule(static) num_threads(nt) if (nt > 1)") for (int64_t n = 0; n < N; n++) {     \
            const uint16_t *x = ROW_AT(const uint16_t, ld, nl, n);                                                     \
            uint16_t *dx = ROW_AT(uint16_t, dd, nl, n);                                                                \
            float dl = ELEM_AT(const float, gd, n), *w = rows + (size_t)omp_get_thread_num() * (size_t)V;              \
            int64_t t = target_at(td, n);                                                                              \
            if ((sx == 1 && sdx == 1) || Vp == 1)                                                                      \
                bwd_row_##SFX(x, 1, dx, 1, V, Vp, t, dl, w);                                                           \
            else                                                                                                       \
                bwd_row_##SFX(x, sx, dx, sdx, V, Vp, t, dl, w);                                                        \
        }                                                                                                              \
    }

/* Element i of a half row, widened to fp32 (exactly, NaN quiet: cast()'s rule). */
#define LD_BF16(p, i) it_sc_bf16_to_fp32((p)[i])
#define LD_FP16(p, i) it_sc_fp16_to_fp32((p)[i])
DEFINE_CE_LOW(lbf16, LD_BF16, it_sc_fp32_to_bf16)
DEFINE_CE_LOW(lfp16, LD_FP16, it_sc_fp32_to_fp16)

/* logits (N, Vp), targets (N) -> losses (N); see the header comment. */
it_status it_cpu_cross_entropy_fwd(it_stream *s, const it_tdesc *logits, const it_tdesc *targets, int64_t valid,
                                   it_tdesc *losses) {
    (void)s;
    int64_t N, Vp;
    it_status st = check_fwd("cross_entropy_fwd", logits, targets, valid, false, losses, &N, &Vp);
    if (st) return st;
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
    int64_t N, Vp;
    it_status st = check_bwd("cross_entropy_bwd", logits, targets, valid, false, dlosses, dlogits, &N, &Vp);
    if (st) return st;
    if (N == 0 || Vp == 0) return IT_OK;
    if (logits->dtype == IT_DTYPE_FP32)
        bwd_f32(logits, targets, valid, dlosses, dlogits, N, Vp);
    else
        bwd_f64(logits, targets, valid, dlosses, dlogits, N, Vp);
    return IT_OK;
}

/* The half kernels' fp32 rows: one of `valid` floats per thread of the call (*nt of them;
 * one when the call stays on this thread), or NULL after it_error (out of memory). */
static float *take_rows(const char *kernel, int64_t N, int64_t Vp, int64_t valid, int *nt) {
    *nt = N * Vp >= PAR_MIN && !omp_in_parallel() ? omp_get_max_threads() : 1;
    if (*nt > N) *nt = (int)N;
    if (*nt < 1) *nt = 1;
    float *rows = malloc(sizeof(float) * (size_t)*nt * (size_t)valid);
    if (!rows) it_error(IT_ERR_OOM, "%s: no memory for %d rows of %lld fp32 values", kernel, *nt, (long long)valid);
    return rows;
}

/* bf16 / fp16 logits (N, Vp), targets (N) -> fp32 losses (N): the fp32 kernel's losses for
 * the logits widened. */
it_status it_cpu_cross_entropy_low_fwd(it_stream *s, const it_tdesc *logits, const it_tdesc *targets, int64_t valid,
                                       it_tdesc *losses) {
    (void)s;
    const char *k = "cross_entropy_low_fwd";
    int64_t N, Vp;
    it_status st = check_fwd(k, logits, targets, valid, true, losses, &N, &Vp);
    if (st) return st;
    if (N == 0) return IT_OK;
    int nt;
    float *rows = take_rows(k, N, Vp, valid, &nt);
    if (!rows) return it_last_status();
    if (logits->dtype == IT_DTYPE_BF16)
        fwd_lbf16(logits, targets, valid, losses, N, nt, rows);
    else
        fwd_lfp16(logits, targets, valid, losses, N, nt, rows);
    free(rows);
    return IT_OK;
}

/* bf16 / fp16 logits (N, Vp), targets (N), fp32 dlosses (N) -> dlogits (N, Vp) in the
 * logits' dtype: the fp32 kernel's dlogits for the logits widened, each rounded once. */
it_status it_cpu_cross_entropy_low_bwd(it_stream *s, const it_tdesc *logits, const it_tdesc *targets, int64_t valid,
                                       const it_tdesc *dlosses, it_tdesc *dlogits) {
    (void)s;
    const char *k = "cross_entropy_low_bwd";
    int64_t N, Vp;
    it_status st = check_bwd(k, logits, targets, valid, true, dlosses, dlogits, &N, &Vp);
    if (st) return st;
    if (N == 0 || Vp == 0) return IT_OK;
    int nt;
    float *rows = take_rows(k, N, Vp, valid, &nt);
    if (!rows) return it_last_status();
    if (logits->dtype == IT_DTYPE_BF16)
        bwd_lbf16(logits, targets, valid, dlosses, dlogits, N, Vp, nt, rows);
    else
        bwd_lfp16(logits, targets, valid, dlosses, dlogits, N, Vp, nt, rows);
    free(rows);
    return IT_OK;
}
