/* Top-k over the last dim (the Mixtral router's expert choice).
 *
 *   x (N, E) -> values (N, k) of x's dtype, indices (N, k) int32, 1 <= k <= E
 *   values[n, 0..k) are the k largest of x[n, :] in descending order, indices[n, j] the
 *   column each came from.
 *
 * Order: a total order on (value, column). A larger value comes first; equal values (+0
 * and -0 are equal) keep the lower column first; NaN counts as larger than every number,
 * +inf included (as torch.topk), and NaNs among themselves keep the lower column first.
 * Because the order is total the result is unique, whichever way it is found.
 *
 * Leading dims of x are flattened into N; values/indices have x's ndim, x's leading shape
 * and k as last dim, any non-overlapping strides. fp32 and fp64. No scratch memory: the
 * outputs themselves hold the running selection. For k <= INSERT_MAX it is a sorted list
 * with insertion (E*k compares at worst, cheap for the router's E <= 64); above, a binary
 * heap with the worst kept element at the root, heap-sorted in place at the end
 * (E log k). Rows are independent, so results do not depend on the thread count. */
#include "cpu/cpu_util.h"

#define PAR_MIN 16384 /* elements below which the kernel stays on the calling thread */
#define INSERT_MAX 16 /* k up to which the selection is kept by insertion */

/* ---------------------------------------------------------------- descriptor checks */

/* An output (x's leading shape, last dim k) of dtype dt. */
static it_status check_out(const char *kernel, const char *name, const it_tdesc *t, const it_tdesc *x, int64_t k,
                           it_dtype dt) {
    it_status st;
    if ((st = it_cpu_check_desc(kernel, name, t, 1))) return st;
    if (t->ndim != x->ndim)
        return it_error(IT_ERR_INVALID_ARG, "%s: %s.ndim %d != x.ndim %d", kernel, name, t->ndim, x->ndim);
    for (int d = 0; d < x->ndim; d++) {
        int64_t want = d == x->ndim - 1 ? k : x->shape[d];
        if (t->shape[d] != want)
            return it_error(IT_ERR_INVALID_ARG, "%s: %s.shape[%d] = %lld, expected %lld", kernel, name, d,
                            (long long)t->shape[d], (long long)want);
        if (t->strides[d] == 0 && t->shape[d] > 1)
            return it_error(IT_ERR_INVALID_ARG, "%s: %s.strides[%d] is 0 on a dim of size %lld", kernel, name, d,
                            (long long)t->shape[d]);
    }
    if (t->dtype != dt)
        return it_error(IT_ERR_INVALID_ARG, "%s: %s dtype %s, expected %s", kernel, name, it_dtype_name(t->dtype),
                        it_dtype_name(dt));
    return IT_OK;
}

/* ---------------------------------------------------------------- kernels */

/* (a, ia) comes before (b, ib) in the order of the header comment. */
#define BEFORE(a, ia, b, ib)                                                                                           \
    (isnan(a) ? (!isnan(b) || (ia) < (ib)) : !isnan(b) && ((a) > (b) || ((a) == (b) && (ia) < (ib))))

#define DEFINE_TOPK(T, SFX)                                                                                            \
    /* A heap of m slots has its worst element at the root (slot 0): every child comes before its parent. */           \
    /* sift_ moves slot p down to its place. */                                                                        \
    static void sift_##SFX(T *v, int64_t sv, int32_t *ix, int64_t si, int64_t p, int64_t m) {                          \
        T pv = v[p * sv];                                                                                              \
        int32_t pi = ix[p * si];                                                                                       \
        for (;;) {                                                                                                     \
            int64_t c = 2 * p + 1;                                                                                     \
            if (c >= m) break;                                                                                         \
            /* the worse child */                                                                                      \
            if (c + 1 < m && BEFORE(v[c * sv], ix[c * si], v[(c + 1) * sv], ix[(c + 1) * si])) c++;                    \
            if (!BEFORE(pv, pi, v[c * sv], ix[c * si])) break;                                                         \
            v[p * sv] = v[c * sv], ix[p * si] = ix[c * si];                                                            \
            p = c;                                                                                                     \
        }                                                                                                              \
        v[p * sv] = pv, ix[p * si] = pi;                                                                               \
    }                                                                                                                  \
    /* one row: x (E) -> v (k), ix (k) */                                                                              \
    static void row_##SFX(const T *x, int64_t sx, int64_t E, int64_t k, T *v, int64_t sv, int32_t *ix, int64_t si) {   \
        if (k <= INSERT_MAX) {                                                                                         \
            /* v[0..m) sorted; a new element goes after every element that comes before it */                          \
            int64_t m = 0;                                                                                             \
            for (int64_t e = 0; e < E; e++) {                                                                          \
                T a = x[e * sx];                                                                                       \
                if (m == k && !BEFORE(a, e, v[(k - 1) * sv], ix[(k - 1) * si])) continue;                              \
                int64_t j = m < k ? m++ : k - 1;                                                                       \
                for (; j > 0 && BEFORE(a, e, v[(j - 1) * sv], ix[(j - 1) * si]); j--)                                  \
                    v[j * sv] = v[(j - 1) * sv], ix[j * si] = ix[(j - 1) * si];                                        \
                v[j * sv] = a, ix[j * si] = (int32_t)e;                                                                \
            }                                                                                                          \
            return;                                                                                                    \
        }                                                                                                              \
        /* heap of the best k seen so far, worst at the root */                                                        \
        for (int64_t e = 0; e < k; e++) {                                                                              \
            int64_t p = e;                                                                                             \
            T a = x[e * sx];                                                                                           \
            for (; p > 0; p = (p - 1) / 2) { /* sift up while the parent comes before the new element */               \
                int64_t q = (p - 1) / 2;                                                                               \
                if (!BEFORE(v[q * sv], ix[q * si], a, e)) break;                                                       \
                v[p * sv] = v[q * sv], ix[p * si] = ix[q * si];                                                        \
            }                                                                                                          \
            v[p * sv] = a, ix[p * si] = (int32_t)e;                                                                    \
        }                                                                                                              \
        /* an element that comes before the worst kept one replaces it */                                              \
        for (int64_t e = k; e < E; e++) {                                                                              \
            T a = x[e * sx];                                                                                           \
            if (!BEFORE(a, e, v[0], ix[0])) continue;                                                                  \
            v[0] = a, ix[0] = (int32_t)e;                                                                              \
            sift_##SFX(v, sv, ix, si, 0, k);                                                                           \
        }                                                                                                              \
        /* heap sort: move the root (worst) to the end, shrink, repeat: best ends in slot 0 */                         \
        for (int64_t m = k - 1; m > 0; m--) {                                                                          \
            T tv = v[0];                                                                                               \
            int32_t ti = ix[0];                                                                                        \
            v[0] = v[m * sv], ix[0] = ix[m * si];                                                                      \
            v[m * sv] = tv, ix[m * si] = ti;                                                                           \
            sift_##SFX(v, sv, ix, si, 0, m);                                                                           \
        }                                                                                                              \
    }                                                                                                                  \
    static void topk_##SFX(const it_tdesc *xd, int64_t k, it_tdesc *vd, it_tdesc *id, int64_t N, int64_t E) {          \
        int nl = xd->ndim - 1;                                                                                         \
        int64_t sx = xd->strides[nl], sv = vd->strides[nl], si = id->strides[nl];                                      \
        _Pragma("omp parallel for schedule(static) if (N * E >= PAR_MIN)") for (int64_t n = 0; n < N; n++) {           \
            const T *x = ROW_AT(const T, xd, nl, n);                                                                   \
            T *v = ROW_AT(T, vd, nl, n);                                                                               \
            int32_t *ix = ROW_AT(int32_t, id, nl, n);                                                                  \
            row_##SFX(x, sx, E, k, v, sv, ix, si);                                                                     \
        }                                                                                                              \
    }

DEFINE_TOPK(float, f32)
DEFINE_TOPK(double, f64)

/* ---------------------------------------------------------------- entry point */

/* x (N, E) -> values (N, k), indices (N, k) int32; see the header comment. */
it_status it_cpu_topk(it_stream *s, const it_tdesc *x, int64_t k, it_tdesc *values, it_tdesc *indices) {
    (void)s;
    const char *kn = "topk";
    it_status st;
    if ((st = it_cpu_check_desc(kn, "x", x, 1)) || (st = it_cpu_check_fp32_fp64(kn, x))) return st;
    int64_t E = x->shape[x->ndim - 1], N = rows_of(x);
    if (k < 1 || k > E)
        return it_error(IT_ERR_INVALID_ARG, "%s: k = %lld outside [1, E = %lld]", kn, (long long)k, (long long)E);
    if (E > INT32_MAX)
        return it_error(IT_ERR_INVALID_ARG, "%s: E = %lld does not fit the int32 indices", kn, (long long)E);
    if ((st = check_out(kn, "values", values, x, k, x->dtype)) ||
        (st = check_out(kn, "indices", indices, x, k, IT_DTYPE_I32)))
        return st;
    if (N == 0) return IT_OK;
    if (x->dtype == IT_DTYPE_FP32)
        topk_f32(x, k, values, indices, N, E);
    else
        topk_f64(x, k, values, indices, N, E);
    return IT_OK;
}
