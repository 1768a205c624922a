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

/* ---------------------------------------------------------------- fused attention
 *
 * it_kernels.attention_fwd / _bwd: per (batch, head), the products and the softmax the
 * core's composition runs (it_matmul, it_softmax and their backwards), on the heads where
 * they lie in the caller's buffers and with the probabilities kept in one (T, S) block:
 *   fwd: att = q k^T; att = softmax(scale att) in place; y = att v
 *   bwd: dv = att^T dy; datt = dy v^T; datt = softmax_bwd(att, datt) in place;
 *        dq = datt k; dk = datt^T q
 * With grouped kv heads (Hkv < H) query head h reads kv head h / (H / Hkv), and dk, dv are
 * still per query head: the core sums each group, as the composition's expand does.
 * Each product goes through it_cpu_sgemm_rm, the kernel the gemm slot runs for each matrix
 * of a batch, and each row through the softmax slot's row functions: the results are bitwise
 * the composition's for finite inputs (test_attention checks it). Causal products skip most
 * of their masked half, in blocks of rows (see causal_rows); a NaN or Inf in a masked key
 * then reaches only the rows of its block, where the composition's 0 x Inf spreads it to
 * every row. What is saved: the copies that split the heads out of qkv and merge them back
 * (and their backward), the (B, H, T, S) scores, a kernel launch and a pass over memory per
 * step of the composition, and about half of the causal products' work. fp32 only (other
 * dtypes are declined and composed). */

/* The (T, D) matrix of head (b, h) of a (B, H, T, D) view. */
#define HEAD(d, b, h) ((float *)(d)->data + (b) * (d)->strides[0] + (h) * (d)->strides[1])

/* Checks a (B, H, R, D) view of heads: IT_ERR_INVALID_ARG for a wrong shape,
 * IT_ERR_UNSUPPORTED for what this kernel does not take (not fp32, rows not row-major). */
static it_status check_heads(const char *kernel, const char *name, const it_tdesc *t, int64_t B, int64_t H, int64_t R,
                             int64_t D) {
    if (t == NULL) return it_error(IT_ERR_INVALID_ARG, "%s: %s is NULL", kernel, name);
    if (t->ndim != 4 || t->shape[0] != B || t->shape[1] != H || t->shape[2] != R || t->shape[3] != D)
        return it_error(IT_ERR_INVALID_ARG, "%s: %s must be (%lld, %lld, %lld, %lld)", kernel, name, (long long)B,
                        (long long)H, (long long)R, (long long)D);
    if (t->dtype != IT_DTYPE_FP32)
        return it_error(IT_ERR_UNSUPPORTED, "%s: %s is %s, this kernel takes fp32", kernel, name,
                        it_dtype_name(t->dtype));
    if (B * H * R * D > 0 && t->data == NULL) return it_error(IT_ERR_INVALID_ARG, "%s: %s.data is NULL", kernel, name);
    if (t->strides[0] < 0 || t->strides[1] < 0 || (D > 1 && t->strides[3] != 1) || (R > 1 && t->strides[2] < D))
        return it_error(IT_ERR_UNSUPPORTED, "%s: %s's rows are not row-major (strides %lld, %lld)", kernel, name,
                        (long long)t->strides[2], (long long)t->strides[3]);
    return IT_OK;
}

/* A (B, H, T, S) block, contiguous. */
static it_status check_scores(const char *kernel, const char *name, const it_tdesc *t, int64_t B, int64_t H, int64_t T,
                              int64_t S) {
    it_status st = check_heads(kernel, name, t, B, H, T, S);
    if (st) return st;
    if (B * H * T * S > 0 &&
        !(t->strides[3] == 1 && t->strides[2] == S && t->strides[1] == T * S && (B == 1 || t->strides[0] == H * T * S)))
        return it_error(IT_ERR_INVALID_ARG, "%s: %s must be contiguous", kernel, name);
    return IT_OK;
}

/* What both directions check first: args, then q, k and v; g = B, H, T, S, D, Hkv from q and
 * k (k and v have Hkv heads, each serving H / Hkv query heads). */
static it_status att_shape(const char *kn, const it_softmax_args *args, const it_tdesc *q, const it_tdesc *k,
                           const it_tdesc *v, int64_t g[6]) {
    if (args == NULL) return it_error(IT_ERR_INVALID_ARG, "%s: args is NULL", kn);
    if (q == NULL || k == NULL || q->ndim != 4 || k->ndim != 4)
        return it_error(IT_ERR_INVALID_ARG, "%s: q and k must be 4-D (B, H, T, D)", kn);
    g[0] = q->shape[0], g[1] = q->shape[1], g[2] = q->shape[2], g[3] = k->shape[2], g[4] = q->shape[3];
    g[5] = k->shape[1];
    if (g[5] < 0 || (g[5] == 0 ? g[1] != 0 : g[1] % g[5] != 0))
        return it_error(IT_ERR_INVALID_ARG, "%s: k has %lld heads, which must divide q's %lld", kn, (long long)g[5],
                        (long long)g[1]);
    it_status st;
    if ((st = check_heads(kn, "q", q, g[0], g[1], g[2], g[4])) ||
        (st = check_heads(kn, "k", k, g[0], g[5], g[3], g[4])))
        return st;
    return check_heads(kn, "v", v, g[0], g[5], g[3], g[4]);
}

/* What both check last, the operands being right: the mask's geometry, then *none when there
 * is nothing to compute, or a decline for what this kernel does not take. */
static it_status att_work(const char *kn, const it_softmax_args *args, const int64_t g[6], bool *none) {
    int64_t B = g[0], H = g[1], T = g[2], S = g[3], D = g[4];
    *none = B * H * T == 0;
    if (args->causal && S < T)
        return it_error(IT_ERR_INVALID_ARG, "%s: causal mask needs keys >= queries (%lld < %lld)", kn, (long long)S,
                        (long long)T);
    if (!*none && (S == 0 || D == 0)) return it_error(IT_ERR_UNSUPPORTED, "%s: no keys or an empty head dimension", kn);
    return IT_OK;
}

/* The leading dimension of a head's rows (any value >= D serves a single row). */
static int64_t ld_of(const it_tdesc *t) {
    return t->shape[2] > 1 ? t->strides[2] : (t->shape[3] > 0 ? t->shape[3] : 1);
}

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* Rows per block of the causal products, or T (one block: every product whole).
 *
 * With a causal mask, a block of query rows needs the keys up to its last row's only, and a
 * block of key rows the queries from its first row's on: the products are cut into blocks of
 * CAUSAL_ROWS rows that skip what is masked (the scores are left unwritten there, as the
 * softmax rows overwrite them with zeros; the sums lose only terms that are products with a
 * zero probability). The sums keep their bits: each element is one accumulator summing k in
 * order from zero in every path the products can take when every k is at most 256 (in the
 * AVX-512 and the AVX2 sgemms alike, the unpacked and the packed paths agree there, and
 * neither sends such products to the BLAS), and a sum gains nothing from the zero terms at
 * its ends (from +0, x + 0 = x and no sum reaches -0). So blocks only when T, S and D are at
 * most 256 and an own sgemm serves the products: through the BLAS (IT_CPU_SGEMM=blas, or a
 * CPU without AVX2) a shorter product may take another kernel edge or split k otherwise
 * (with OpenBLAS's products test_backend_parity's losses of GPT-2, LLaMA-3 and Mixtral moved
 * by an ulp against the composition's). What changes is that a masked key's NaN or Inf
 * reaches only the rows of its own block, not the earlier ones (the composition's 0 x Inf
 * is NaN in every row); with finite inputs the results are the composition's bits. */
/* 16 rows: bench_kernels' fused slots (B4 H12 D64), against whole products: T = 64 fwd 0.301
 * -> 0.278 ms, bwd 0.406 -> 0.298; T = 256 fwd 3.74 -> 3.09, bwd 6.91 -> 4.40 (8, 32 and 64
 * rows were slower or no better) */
enum { CAUSAL_ROWS = 16, CAUSAL_MAX = 256 };
static int64_t causal_rows(const it_softmax_args *args, int64_t T, int64_t S, int64_t D) {
    return args->causal && T > CAUSAL_ROWS && S <= CAUSAL_MAX && D <= CAUSAL_MAX &&
                   (it_cpu_sgemm_avx512_usable() || it_cpu_sgemm_avx2_usable())
               ? CAUSAL_ROWS
               : T;
}

/* With br = causal_rows(): the keys [0, n) that query rows [t0, t0 + m) see (all S when the
 * products are whole), and the first query row that sees key row s0 (0 when whole). */
static inline int64_t keys_seen(int64_t br, int64_t T, int64_t S, int64_t t0, int64_t m) {
    return br < T ? t0 + m + (S - T) : S;
}
static inline int64_t first_query(int64_t br, int64_t T, int64_t S, int64_t s0) {
    return br < T ? max64(s0 - (S - T), 0) : 0;
}

it_status it_cpu_attention_fwd(it_stream *s, const it_softmax_args *args, const it_tdesc *q, const it_tdesc *k,
                               const it_tdesc *v, it_tdesc *att, it_tdesc *y) {
    (void)s;
    const char *kn = "attention_fwd";
    int64_t g[6];
    bool none;
    it_status st = att_shape(kn, args, q, k, v, g);
    if (st) return st;
    int64_t B = g[0], H = g[1], T = g[2], S = g[3], D = g[4];
    if ((st = check_heads(kn, "y", y, B, H, T, D)) || (st = check_scores(kn, "att", att, B, H, T, S)) ||
        (st = att_work(kn, args, g, &none)) || none)
        return st;
    const float scale = args->scale;
    int64_t n = B * H, r = H / g[5], br = causal_rows(args, T, S, D);
    int64_t ldq = ld_of(q), ldk = ld_of(k), ldv = ld_of(v), ldy = ld_of(y);
#pragma omp parallel for schedule(static) if (n > 1 && n * T * S * D >= 65536)
    for (int64_t bh = 0; bh < n; bh++) {
        int64_t b = bh / H, h = bh % H;
        float *a = (float *)att->data + bh * T * S;
        const float *qh = HEAD(q, b, h), *kh = HEAD(k, b, h / r), *vh = HEAD(v, b, h / r);
        float *yh = HEAD(y, b, h);
        /* rows [t0, t0 + m) see keys [0, t0 + m + S - T) at most: the scores beyond are masked and
         * the probabilities zero */
        for (int64_t t0 = 0; t0 < T; t0 += br) {
            int64_t m = min64(br, T - t0), c = keys_seen(br, T, S, t0, m);
            it_cpu_sgemm_rm(false, true, m, c, D, 1.0f, qh + t0 * ldq, ldq, kh, ldk, 0.0f, a + t0 * S, S);
        }
        for (int64_t t = 0; t < T; t++)
            fwd_row_f32(a + t * S, 1, a + t * S, 1, scale, args->causal ? t + (S - T) + 1 : S, S);
        for (int64_t t0 = 0; t0 < T; t0 += br) {
            int64_t m = min64(br, T - t0), c = keys_seen(br, T, S, t0, m);
            it_cpu_sgemm_rm(false, false, m, D, c, 1.0f, a + t0 * S, S, vh, ldv, 0.0f, yh + t0 * ldy, ldy);
        }
    }
    return IT_OK;
}

it_status it_cpu_attention_bwd(it_stream *s, const it_softmax_args *args, const it_tdesc *q, const it_tdesc *k,
                               const it_tdesc *v, const it_tdesc *att, const it_tdesc *dy, it_tdesc *dq, it_tdesc *dk,
                               it_tdesc *dv, it_tdesc *datt) {
    (void)s;
    const char *kn = "attention_bwd";
    int64_t g[6];
    bool none;
    it_status st = att_shape(kn, args, q, k, v, g);
    if (st) return st;
    int64_t B = g[0], H = g[1], T = g[2], S = g[3], D = g[4];
    if ((st = check_scores(kn, "att", att, B, H, T, S)) || (st = check_heads(kn, "dy", dy, B, H, T, D)) ||
        (st = check_heads(kn, "dq", dq, B, H, T, D)) || (st = check_heads(kn, "dk", dk, B, H, S, D)) ||
        (st = check_heads(kn, "dv", dv, B, H, S, D)) || (st = check_scores(kn, "datt", datt, B, H, T, S)) ||
        (st = att_work(kn, args, g, &none)) || none)
        return st;
    const float scale = args->scale;
    int64_t n = B * H, r = H / g[5], br = causal_rows(args, T, S, D);
    int64_t ldq = ld_of(q), ldk = ld_of(k), ldv = ld_of(v), lddy = ld_of(dy), lddq = ld_of(dq), lddk = ld_of(dk),
            lddv = ld_of(dv);
#pragma omp parallel for schedule(static) if (n > 1 && n * T * S * D >= 65536)
    for (int64_t bh = 0; bh < n; bh++) {
        int64_t b = bh / H, h = bh % H;
        const float *a = (const float *)att->data + bh * T * S;
        float *da = (float *)datt->data + bh * T * S;
        const float *qh = HEAD(q, b, h), *kh = HEAD(k, b, h / r), *vh = HEAD(v, b, h / r), *dyh = HEAD(dy, b, h);
        float *dqh = HEAD(dq, b, h), *dkh = HEAD(dk, b, h), *dvh = HEAD(dv, b, h);
        /* key rows [s0, s0 + m) are seen by query rows [s0 - o, T) only (the sums over the
         * queries before are of zeros) */
        for (int64_t s0 = 0; s0 < S; s0 += br) {
            int64_t m = min64(br, S - s0), t0 = first_query(br, T, S, s0);
            it_cpu_sgemm_rm(true, false, m, D, T - t0, 1.0f, a + t0 * S + s0, S, dyh + t0 * lddy, lddy, 0.0f,
                            dvh + s0 * lddv, lddv);
        }
        /* query rows [t0, t0 + m): the scores' gradient of the keys they see (the rows'
         * softmax zeroes the rest) */
        for (int64_t t0 = 0; t0 < T; t0 += br) {
            int64_t m = min64(br, T - t0), c = keys_seen(br, T, S, t0, m);
            it_cpu_sgemm_rm(false, true, m, c, D, 1.0f, dyh + t0 * lddy, lddy, vh, ldv, 0.0f, da + t0 * S, S);
        }
        for (int64_t t = 0; t < T; t++)
            bwd_row_f32(a + t * S, 1, da + t * S, 1, da + t * S, 1, scale, args->causal ? t + (S - T) + 1 : S, S);
        for (int64_t t0 = 0; t0 < T; t0 += br) {
            int64_t m = min64(br, T - t0), c = keys_seen(br, T, S, t0, m);
            it_cpu_sgemm_rm(false, false, m, D, c, 1.0f, da + t0 * S, S, kh, ldk, 0.0f, dqh + t0 * lddq, lddq);
        }
        for (int64_t s0 = 0; s0 < S; s0 += br) {
            int64_t m = min64(br, S - s0), t0 = first_query(br, T, S, s0);
            it_cpu_sgemm_rm(true, false, m, D, T - t0, 1.0f, da + t0 * S + s0, S, qh + t0 * ldq, ldq, 0.0f,
                            dkh + s0 * lddk, lddk);
        }
    }
    return IT_OK;
}
#undef HEAD
