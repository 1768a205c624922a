/* What the CPU kernel files share; private to backends/cpu/.
 *
 *  - descriptor checks with the messages every kernel gives (cpu_util.c: they run once a
 *    call, so they are plain functions, hidden like every non-API symbol);
 *  - row addressing (offset_of, ROW_AT, ELEM_AT), the fixed-order lane sum, fp32 exp and tanh
 *    in plain arithmetic, and the norm backwards' column sums: these sit in hot loops, so they
 *    are static inline (always_inline where a loop over them must vectorize) or macros.
 *
 * Every helper computes exactly what the kernels computed inline before, in the same order:
 * moving code here changes no result bit. */
#ifndef IT_CPU_UTIL_H
#define IT_CPU_UTIL_H

#include <math.h>
#include <string.h>

#include "cpu/cpu_kernels.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))

/* ---------------------------------------------------------------- descriptor checks (cpu_util.c)
 * Each returns IT_OK or it_error(...) with a message "<kernel>: <name>...". */

/* t non-NULL, ndim in [min_ndim, IT_MAX_DIMS], then it_cpu_check_layout. */
it_status it_cpu_check_desc(const char *kernel, const char *name, const it_tdesc *t, int min_ndim);
/* t's ndim already checked: no negative shape or stride, data non-NULL when t has elements. */
it_status it_cpu_check_layout(const char *kernel, const char *name, const it_tdesc *t);
/* t (checked) has ref's ndim, shape and dtype; an output also has no stride 0 on a dim
 * longer than 1 (it would write one element twice). Errors name ref as rname. */
it_status it_cpu_check_same(const char *kernel, const char *name, const it_tdesc *t, const char *rname,
                            const it_tdesc *ref, bool output);
/* it_cpu_check_desc, then it_cpu_check_same. */
it_status it_cpu_check_like(const char *kernel, const char *name, const it_tdesc *t, int min_ndim, const char *rname,
                            const it_tdesc *ref, bool output);
/* t->dtype == dt, where dt is rname's dtype. */
it_status it_cpu_check_dtype(const char *kernel, const char *name, const it_tdesc *t, const char *rname, it_dtype dt);
/* t (an output) has no stride 0 on a dim longer than 1. */
it_status it_cpu_check_writable(const char *kernel, const char *name, const it_tdesc *t);
/* t is fp32 or fp64 (else IT_ERR_UNSUPPORTED). */
it_status it_cpu_check_fp32_fp64(const char *kernel, const it_tdesc *t);
/* t holds n elements (any shape); sym names n in the message ("R", "N"). */
it_status it_cpu_check_count(const char *kernel, const char *name, const it_tdesc *t, const char *sym, int64_t n);
/* A per-row vector: n elements (any shape) of dtype dt, owner's ("x's"); an output is
 * writable. The norms' mean/rstd, cross entropy's losses and dlosses. */
it_status it_cpu_check_per_row(const char *kernel, const char *name, const it_tdesc *t, const char *sym, int64_t n,
                               it_dtype dt, const char *owner, bool output);
/* layernorm/rmsnorm: x is (R, C), fp32 or fp64, ndim >= 1 (leading dims flattened into R). */
it_status it_cpu_check_norm_x(const char *kernel, const it_tdesc *x, int64_t *R, int64_t *C);
/* layernorm/rmsnorm: t is (C) of x's dtype dt (w, b, dw, db). */
it_status it_cpu_check_norm_vec(const char *kernel, const char *name, const it_tdesc *t, int64_t C, it_dtype dt,
                                bool output);

/* ---------------------------------------------------------------- addressing */

static inline int64_t numel(const it_tdesc *t) {
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
    return n;
}

/* Elements before the last dim: the rows of a kernel that works along the last dim. */
static inline int64_t rows_of(const it_tdesc *t) {
    int64_t n = 1;
    for (int d = 0; d < t->ndim - 1; d++) n *= t->shape[d];
    return n;
}

/* Element offset of the idx-th element (row-major) of the first nd dims. */
static inline int64_t offset_of(int64_t idx, int nd, const int64_t *shape, const int64_t *strides) {
    int64_t off = 0;
    for (int d = nd - 1; d >= 0; d--) {
        off += (idx % shape[d]) * strides[d];
        idx /= shape[d];
    }
    return off;
}

/* A T pointer to row r of d: its first nl dims (nl = ndim - 1, hoisted by the caller) are
 * flattened into rows, the last dim is the row. */
#define ROW_AT(T, d, nl, r) ((T *)(d)->data + offset_of((r), (nl), (d)->shape, (d)->strides))
/* The i-th element (row-major) of d, any shape, as an lvalue of type T. */
#define ELEM_AT(T, d, i) (((T *)(d)->data)[offset_of((i), (d)->ndim, (d)->shape, (d)->strides)])

/* ---------------------------------------------------------------- fixed-order sums */

/* res = sum of EXPR over IDX = 0 .. n-1 (EXPR reads the int64_t IDX): 8 interleaved lanes
 * (lane j takes IDX = j, j+8, ...), combined ((r0+r1)+(r2+r3))+((r4+r5)+(r6+r7)), then the
 * n%8 tail in order. The order depends on n alone, and the lanes vectorize. EXPR is
 * evaluated 16 at a time (one 512-bit vector: for an exp that halves its cost against 8),
 * and the 16 values join the lanes as two rounds of 8, in the same order as before.
 * LANE_SUM_HOOKED also runs the statement HOOK before each block of 16, with IDX the block's
 * first index (a prefetch): it does not take part in the sum. */
#define LANE_SUM_HOOKED(T, res, n, IDX, EXPR, HOOK)                                                                    \
    do {                                                                                                               \
        T r_[8] = {0, 0, 0, 0, 0, 0, 0, 0};                                                                            \
        int64_t i_ = 0;                                                                                                \
        for (; i_ + 16 <= (n); i_ += 16) {                                                                             \
            {                                                                                                          \
                int64_t IDX = i_;                                                                                      \
                (void)IDX;                                                                                             \
                HOOK;                                                                                                  \
            }                                                                                                          \
            T e_[16];                                                                                                  \
            _Pragma("omp simd") for (int j_ = 0; j_ < 16; j_++) {                                                      \
                int64_t IDX = i_ + j_;                                                                                 \
                e_[j_] = (EXPR);                                                                                       \
            }                                                                                                          \
            _Pragma("omp simd") for (int j_ = 0; j_ < 8; j_++) r_[j_] += e_[j_];                                       \
            _Pragma("omp simd") for (int j_ = 0; j_ < 8; j_++) r_[j_] += e_[j_ + 8];                                   \
        }                                                                                                              \
        for (; i_ + 8 <= (n); i_ += 8) {                                                                               \
            _Pragma("omp simd") for (int j_ = 0; j_ < 8; j_++) {                                                       \
                int64_t IDX = i_ + j_;                                                                                 \
                r_[j_] += (EXPR);                                                                                      \
            }                                                                                                          \
        }                                                                                                              \
        res = ((r_[0] + r_[1]) + (r_[2] + r_[3])) + ((r_[4] + r_[5]) + (r_[6] + r_[7]));                               \
        for (; i_ < (n); i_++) {                                                                                       \
            int64_t IDX = i_;                                                                                          \
            res += (EXPR);                                                                                             \
        }                                                                                                              \
    } while (0)
#define LANE_SUM(T, res, n, IDX, EXPR) LANE_SUM_HOOKED(T, res, n, IDX, EXPR, (void)0)

/* ---------------------------------------------------------------- fp32 exp and tanh
 * Written out in plain arithmetic so that loops over them vectorize (libm's expf/tanhf are
 * scalar calls): exp within 1 ulp, tanh within 1.5 ulp over the whole float range (checked
 * against fp64 libm). fp64 kernels use libm: it is the reference gradient checks run on. */

ALWAYS_INLINE float bits_to_f32(int32_t i) {
    float f;
    memcpy(&f, &i, sizeof f);
    return f;
}

/* e^r for x = k ln2 + r, |r| <= ln2/2 (Cody-Waite, two-part ln2), by Cephes' degree-6
 * polynomial; *k = k (an integer, as a float). x must be finite and |x| < 2^22. */
ALWAYS_INLINE float exp_reduced(float x, float *k) {
    float kk = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* round to nearest */
    float r = x - kk * 0.693359375f;
    r = r - kk * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    *k = kk;
    return p * (r * r) + r + 1.0f;
}

/* exp(x): e^r times 2^k as two exponent-field factors (each normal for x in [-104, 89],
 * so overflow gives inf and the subnormal range rounds once). NaN stays NaN.
 * k1 = floor(k / 2) by an arithmetic shift (one instruction; k / 2 truncates and costs
 * three): k in [-150, 128] puts k1 and k - k1 in [-75, 64], so e * 2^k1 is exact either
 * way and the product rounds e * 2^k once. All 2^32 inputs give the bits of k / 2; the CE
 * forward's exp pass from L2 went 3.4 -> 3.0 ms. The MLU's copy (it_bang_math.h) keeps k / 2. */
_Static_assert((-3 >> 1) == -2, "vexpf needs an arithmetic right shift of negative ints");
ALWAYS_INLINE float vexpf(float x) {
    float xc = x > 89.0f ? 89.0f : x;
    xc = xc < -104.0f ? -104.0f : xc;
    xc = x == x ? xc : 0.0f;
    float k;
    float e = exp_reduced(xc, &k);
    int32_t ki = (int32_t)k, k1 = ki >> 1, k2 = ki - k1;
    float y = e * bits_to_f32((k1 + 127) << 23) * bits_to_f32((k2 + 127) << 23);
    return x == x ? y : x;
}

/* exp(x) for x in [-87, 88] only (callers clamp; 2^k is then one normal factor): the
 * same digits as vexpf there, in fewer operations. */
ALWAYS_INLINE float vexpf_normal(float x) {
    float k;
    float e = exp_reduced(x, &k);
    return e * bits_to_f32(((int32_t)k + 127) << 23);
}

/* tanh(x) given s = exp(2|x|): Cephes' odd polynomial below |x| = 0.625, else
 * sign(x) (1 - 2/(s + 1)). */
ALWAYS_INLINE float vtanhf_s(float x, float s) {
    float big = 1.0f - 2.0f / (s + 1.0f);
    big = x < 0.0f ? -big : big;
    float z = x * x;
    float small =
        ((((-5.70498872745e-3f * z + 2.06390887954e-2f) * z - 5.37397155531e-2f) * z + 1.33314422036e-1f) * z -
         3.33332819422e-1f) *
            z * x +
        x;
    return fabsf(x) < 0.625f ? small : big;
}
ALWAYS_INLINE float vtanhf(float x) { return vtanhf_s(x, vexpf(2.0f * fabsf(x))); }

/* ---------------------------------------------------------------- norm backward: dw (and db)
 * The parameter gradients of layernorm.c and rmsnorm.c, dw[c] = sum_r wterm(r, c) (and
 * db[c] = sum_r bterm(r, c)), reduced over rows in a fixed order, independent of the thread
 * count and with no scratch memory: parallel over blocks of NORM_COLS columns, each column's
 * rows summed in order in chunks of NORM_CHUNK rows, each chunk's sum then added to the
 * running total (error ~ (NORM_CHUNK + R/NORM_CHUNK) u instead of R u). It reads x and dy
 * again rather than keep per-thread partials that would have to be allocated.
 *
 * DEFINE_NORM_PARAM_GRADS(T, SFX, WITH_MEAN, WITH_DB, ROW) defines
 *   static void param_grads_SFX(dyd, xd, md, rd, dwd, dbd, R, C)
 * for dy, x (R, C), rstd rd (R) and, WITH_MEAN 1, the mean md (R) (else m = 0 and md is not
 * read) -> dw (C) and, WITH_DB 1 and dbd not NULL, db (C). ROW(dy, sdy, x, sx, m, s, pw, pb, n)
 * adds one row's terms of a block's columns [0, n) into pw[0..n) (dw) and pb[0..n) (db; a
 * ROW without db leaves it alone). The pass runs in parallel when R * C >= PAR_MIN, the
 * including file's threshold. WITH_MEAN and WITH_DB are constants: the code a norm does not
 * use compiles away. */
#define NORM_COLS 64  /* columns of dw/db one task sums */
#define NORM_AHEAD 8  /* rows fetched ahead */
#define NORM_CHUNK 32 /* rows summed into a partial before it joins the running total */

#define DEFINE_NORM_PARAM_GRADS(T, SFX, WITH_MEAN, WITH_DB, ROW)                                                       \
    static void param_grads_##SFX(const it_tdesc *dyd, const it_tdesc *xd, const it_tdesc *md, const it_tdesc *rd,     \
                                  it_tdesc *dwd, it_tdesc *dbd, int64_t R, int64_t C) {                                \
        int nl = xd->ndim - 1;                                                                                         \
        int64_t sx = xd->strides[nl], sdy = dyd->strides[nl];                                                          \
        bool unit2 = (sx == 1 && sdy == 1) || C == 1;                                                                  \
        int64_t blocks = (C + NORM_COLS - 1) / NORM_COLS;                                                              \
        _Pragma("omp parallel for schedule(static) if (R * C >= PAR_MIN)") for (int64_t bk = 0; bk < blocks; bk++) {   \
            int64_t c0 = bk * NORM_COLS, n = C - c0 < NORM_COLS ? C - c0 : NORM_COLS;                                  \
            T tw[NORM_COLS] = {0}, tb[NORM_COLS] = {0}, pw[NORM_COLS], pb[NORM_COLS];                                  \
            for (int64_t r0 = 0; r0 < R; r0 += NORM_CHUNK) {                                                           \
                for (int64_t i = 0; i < n; i++) {                                                                      \
                    pw[i] = 0;                                                                                         \
                    if (WITH_DB) pb[i] = 0;                                                                            \
                }                                                                                                      \
                for (int64_t r = r0; r < R && r < r0 + NORM_CHUNK; r++) {                                              \
                    const T *x = ROW_AT(const T, xd, nl, r) + c0 * sx;                                                 \
                    const T *dy = ROW_AT(const T, dyd, nl, r) + c0 * sdy;                                              \
                    T m = WITH_MEAN ? ELEM_AT(const T, md, r) : (T)0;                                                  \
                    T s = ELEM_AT(const T, rd, r);                                                                     \
                    if (r + NORM_AHEAD < R) { /* rows lie C apart: a stride the prefetcher does not follow */          \
                        const T *xa = ROW_AT(const T, xd, nl, r + NORM_AHEAD) + c0 * sx;                               \
                        const T *da = ROW_AT(const T, dyd, nl, r + NORM_AHEAD) + c0 * sdy;                             \
                        for (int64_t i = 0; i < n; i += 64 / (int64_t)sizeof(T)) {                                     \
                            __builtin_prefetch(xa + i * sx);                                                           \
                            __builtin_prefetch(da + i * sdy);                                                          \
                        }                                                                                              \
                    }                                                                                                  \
                    if (unit2)                                                                                         \
                        ROW(dy, 1, x, 1, m, s, pw, pb, n);                                                             \
                    else                                                                                               \
                        ROW(dy, sdy, x, sx, m, s, pw, pb, n);                                                          \
                }                                                                                                      \
                for (int64_t i = 0; i < n; i++) {                                                                      \
                    tw[i] += pw[i];                                                                                    \
                    if (WITH_DB) tb[i] += pb[i];                                                                       \
                }                                                                                                      \
            }                                                                                                          \
            T *dw = (T *)dwd->data + c0 * dwd->strides[0];                                                             \
            for (int64_t i = 0; i < n; i++) dw[i * dwd->strides[0]] = tw[i];                                           \
            if (WITH_DB && dbd) {                                                                                      \
                T *db = (T *)dbd->data + c0 * dbd->strides[0];                                                         \
                for (int64_t i = 0; i < n; i++) db[i * dbd->strides[0]] = tb[i];                                       \
            }                                                                                                          \
        }                                                                                                              \
    }

#endif
