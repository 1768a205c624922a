/* Elementwise maps (unary, binary) and reductions over any set of dims.
 *
 * unary/binary: x, a, b (D...) with stride 0 on broadcast dims -> out (D...), out any
 * non-overlapping strides, possibly the very same memory as an input. The dims are first
 * coalesced (size-1 dims dropped, neighbours merged when every operand's strides allow), so
 * contiguous operands become one long row; work is split into rows x chunks of CHUNK
 * elements. Every element is computed independently, so results never depend on the
 * thread count. fp32/fp64 compute in their own type; bf16/fp16 convert to fp32 and round
 * back.
 *
 * reduce: out has x's ndim with size 1 on reduced dims. Summation order, fixed by shapes
 * and strides alone (never by the thread count), accumulating in fp32 for fp32 (as PyTorch)
 * and fp64 for fp64:
 *  - the reduced dims are coalesced; the innermost one (n elements, stride s) is summed
 *    pairwise: n <= 128 uses 8 interleaved accumulators (lane j takes elements j, j+8, ...,
 *    combined as ((r0+r1)+(r2+r3))+((r4+r5)+(r6+r7)), then the n%8 tail in order; n < 8
 *    is a plain loop), larger n splits at n2 = n/2 rounded down to a multiple of 8 and adds
 *    the two halves' sums;
 *  - the outer reduced dims' rows (if any) are combined pairwise, splitting [lo, hi) at
 *    lo + (hi-lo)/2.
 * Parallel versions (columns of outputs at once, tasks over subtrees of one huge sum) run
 * this same tree, so they give bit-identical results. MAX propagates NaN (as torch.amax);
 * over an empty set SUM/SUMSQ give 0, MEAN NaN and MAX -inf. */
#include <omp.h>

#include "cpu/cpu_util.h"
#include "infinitrain/scalar/it_scalar_cast.h"

#define PAR_MIN 32768   /* elements below which a kernel stays on the calling thread */
#define CHUNK 8192      /* elements per task of a long row */
#define HBLOCK 256      /* bf16/fp16 elements converted at once */
#define COLS 64         /* outputs a column reduction handles together */
#define PF_ROWS 16      /* a column reduction fetches the rows this far ahead */
#define TASK_LEAF 65536 /* a sum shorter than this is not split into tasks */

/* ---------------------------------------------------------------- scalar math
 * fp32 uses cpu_util.h's vexpf, vexpf_normal and vtanhf (plain arithmetic, so loops over
 * them vectorize); fp64 uses libm: it is the reference the gradient checks run on. */

/* GELU is GPT-2's tanh form, 0.5 x (1 + tanh u) with u = sqrt(2/pi) (x + 0.044715 x^3).
 * fp32 computes it as x s with s = 1 / (1 + e), e = e^(-2u) (the same function: 1 + tanh u
 * = 2 s), which has no cancellation where 1 + tanh u is small (x < 0): within 15 ulp of
 * max(|gelu|, 0.01) over [-12, 12] against fp64, where 0.5 x (1 + tanh u) lost up to 129,
 * and one exp and one division instead of tanh's two branches (~1.5x faster). The
 * backward is d/dx (x s) = s (1 + 2 x u' e s), u' = sqrt(2/pi) (1 + 3 * 0.044715 x^2)
 * (as llm.c's 0.5 (1 + tanh u) + 0.5 x sech^2(u) u', with sech^2 u = 4 s (1 - s) and
 * 1 - s = e s). The exp takes -2u clamped to [-87, 88] (e normal and finite); past the
 * clamp (|x| > ~10) the forward is x / (1 + e) = x or x * 0, and the backward drops its
 * second term (s, which is then 1 or below 1e-38): within 1e-38 of the limits, for every
 * finite x. Edges as the formula gives them: gelu(-inf) is NaN (-inf * 0), and so is the
 * gradient at +-inf. fp64 keeps the plain formula (the gradient checks' reference). */
ALWAYS_INLINE float gelu_z(float x, float x2) { /* -2u */
    return -2.0f * sqrtf((float)(2.0 / M_PI)) * (x + 0.044715f * x2 * x);
}
ALWAYS_INLINE float clamp_z(float z) { /* into e^z's normal range; NaN -> 0 (x carries it) */
    z = z > 88.0f ? 88.0f : z;
    z = z < -87.0f ? -87.0f : z;
    return z == z ? z : 0.0f;
}
ALWAYS_INLINE float gelu_f32(float x) {
    float z = gelu_z(x, x * x);
    float y = x / (1.0f + vexpf_normal(clamp_z(z)));
    return z > 88.0f ? x * 0.0f : y;
}
ALWAYS_INLINE double gelu_f64(double x) {
    double cube = 0.044715 * x * x * x;
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + cube)));
}
ALWAYS_INLINE float gelu_bwd_f32(float x, float dy) {
    float x2 = x * x, z = gelu_z(x, x2), zc = clamp_z(z);
    float e = vexpf_normal(zc);
    float s = 1.0f / (1.0f + e);
    float du = sqrtf((float)(2.0 / M_PI)) * (1.0f + 3.0f * 0.044715f * x2);
    float t = zc == z ? 2.0f * x * du * (e * s) : 0.0f;
    float g = s * (1.0f + t);
    return x - x == 0.0f ? g * dy : x - x; /* NaN unless x is finite */
}
ALWAYS_INLINE double gelu_bwd_f64(double x, double dy) {
    const double k = sqrt(2.0 / M_PI);
    double cube = 0.044715 * x * x * x;
    double tanh_arg = k * (x + cube);
    double tanh_out = tanh(tanh_arg);
    double cosh_out = cosh(tanh_arg);
    double sech_out = 1.0 / (cosh_out * cosh_out);
    double local_grad = 0.5 * (1.0 + tanh_out) + x * 0.5 * sech_out * k * (1.0 + 3.0 * 0.044715 * x * x);
    return local_grad * dy;
}
/* SiLU x / d and its derivative's s = 1 / d, d = 1 + e^-x: the pieces are shared with the fused
 * SwiGLU backward, which computes d once for both (the same bits as each function alone). */
ALWAYS_INLINE float silu_den(float x) { return 1.0f + vexpf(-x); }
ALWAYS_INLINE float silu_bwd_s(float x, float s, float dy) { return dy * s * (1.0f + x * (1.0f - s)); }
ALWAYS_INLINE float silu_f32(float x) { return x / silu_den(x); }
ALWAYS_INLINE double silu_f64(double x) { return x / (1.0 + exp(-x)); }
ALWAYS_INLINE float silu_bwd_f32(float x, float dy) { return silu_bwd_s(x, 1.0f / silu_den(x), dy); }
ALWAYS_INLINE double silu_bwd_f64(double x, double dy) {
    double s = 1.0 / (1.0 + exp(-x));
    return dy * s * (1.0 + x * (1.0 - s));
}
/* max/min that propagate NaN from either side (torch.maximum / torch.minimum). */
#define NANMAX(p, q) (((p) > (q) || (p) != (p)) ? (p) : (q))
#define NANMIN(p, q) (((p) < (q) || (p) != (p)) ? (p) : (q))

/* ---------------------------------------------------------------- row kernels
 * y[i*sy] = f(x[i*sx]) for i < n; the unit-stride branch vectorizes. */
#define MAP1(T, EXPR)                                                                                                  \
    do {                                                                                                               \
        if (sx == 1 && sy == 1) {                                                                                      \
            _Pragma("omp simd") for (int64_t i = 0; i < n; i++) {                                                      \
                T v = x[i];                                                                                            \
                y[i] = (EXPR);                                                                                         \
            }                                                                                                          \
        } else {                                                                                                       \
            for (int64_t i = 0; i < n; i++) {                                                                          \
                T v = x[i * sx];                                                                                       \
                y[i * sy] = (EXPR);                                                                                    \
            }                                                                                                          \
        }                                                                                                              \
    } while (0)

/* o[i*so] = f(a[i*sa], b[i*sb]); unit strides and a broadcast b get vectorizable loops. */
#define MAP2(T, EXPR)                                                                                                  \
    do {                                                                                                               \
        if (sa == 1 && sb == 1 && so == 1) {                                                                           \
            _Pragma("omp simd") for (int64_t i = 0; i < n; i++) {                                                      \
                T p = a[i], q = b[i];                                                                                  \
                o[i] = (EXPR);                                                                                         \
            }                                                                                                          \
        } else if (sa == 1 && sb == 0 && so == 1) {                                                                    \
            const T q = b[0];                                                                                          \
            _Pragma("omp simd") for (int64_t i = 0; i < n; i++) {                                                      \
                T p = a[i];                                                                                            \
                o[i] = (EXPR);                                                                                         \
            }                                                                                                          \
        } else {                                                                                                       \
            for (int64_t i = 0; i < n; i++) {                                                                          \
                T p = a[i * sa], q = b[i * sb];                                                                        \
                o[i * so] = (EXPR);                                                                                    \
            }                                                                                                          \
        }                                                                                                              \
    } while (0)

#define DEFINE_ROWS(T, SFX, EXP, LOG, SQRT, TANH)                                                                      \
    static void unary_##SFX(it_unary_op op, T alpha, const T *x, int64_t sx, T *y, int64_t sy, int64_t n) {            \
        switch (op) {                                                                                                  \
        case IT_UNARY_NEG: MAP1(T, -v); break;                                                                         \
        case IT_UNARY_SCALE: MAP1(T, alpha *v); break;                                                                 \
        case IT_UNARY_EXP: MAP1(T, EXP(v)); break;                                                                     \
        case IT_UNARY_LOG: MAP1(T, LOG(v)); break;                                                                     \
        case IT_UNARY_SQRT: MAP1(T, SQRT(v)); break;                                                                   \
        case IT_UNARY_RSQRT: MAP1(T, (T)1 / SQRT(v)); break;                                                           \
        case IT_UNARY_SQUARE: MAP1(T, v *v); break;                                                                    \
        case IT_UNARY_TANH: MAP1(T, TANH(v)); break;                                                                   \
        case IT_UNARY_GELU: MAP1(T, gelu_##SFX(v)); break;                                                             \
        case IT_UNARY_SILU: MAP1(T, silu_##SFX(v)); break;                                                             \
        case IT_UNARY_ADD_SCALAR: MAP1(T, v + alpha); break;                                                           \
        case IT_UNARY_RECIP: MAP1(T, (T)1 / v); break;                                                                 \
        default: break;                                                                                                \
        }                                                                                                              \
    }                                                                                                                  \
    static void binary_##SFX(it_binary_op op, const T *a, int64_t sa, const T *b, int64_t sb, T *o, int64_t so,        \
                             int64_t n) {                                                                              \
        switch (op) {                                                                                                  \
        case IT_BINARY_ADD: MAP2(T, p + q); break;                                                                     \
        case IT_BINARY_SUB: MAP2(T, p - q); break;                                                                     \
        case IT_BINARY_MUL: MAP2(T, p *q); break;                                                                      \
        case IT_BINARY_DIV: MAP2(T, p / q); break;                                                                     \
        case IT_BINARY_MAX: MAP2(T, NANMAX(p, q)); break;                                                              \
        case IT_BINARY_MIN: MAP2(T, NANMIN(p, q)); break;                                                              \
        case IT_BINARY_GELU_BWD: MAP2(T, gelu_bwd_##SFX(p, q)); break;                                                 \
        case IT_BINARY_SILU_BWD: MAP2(T, silu_bwd_##SFX(p, q)); break;                                                 \
        case IT_BINARY_TANH_BWD: MAP2(T, q *((T)1 - p * p)); break;                                                    \
        default: break;                                                                                                \
        }                                                                                                              \
    }

DEFINE_ROWS(float, f32, vexpf, logf, sqrtf, vtanhf)
DEFINE_ROWS(double, f64, exp, log, sqrt, tanh)

/* bf16/fp16 <-> fp32 for the half paths. The contiguous loops carry `omp simd`: GCC's -O2
 * cost model leaves them scalar otherwise (cast.c's note), which made a bf16 add of
 * attention scores under autocast run at a tenth of an fp32 add's rate. The same element
 * functions either way, so the same bits. */
static void half_load(it_dtype dt, const uint16_t *x, int64_t sx, float *dst, int64_t n) {
    bool bf = dt == IT_DTYPE_BF16;
    if (sx == 1 && bf) {
#pragma omp simd
        for (int64_t i = 0; i < n; i++) dst[i] = it_sc_bf16_to_fp32(x[i]);
    } else if (sx == 1) {
#pragma omp simd
        for (int64_t i = 0; i < n; i++) dst[i] = it_sc_fp16_to_fp32(x[i]);
    } else {
        for (int64_t i = 0; i < n; i++) dst[i] = bf ? it_sc_bf16_to_fp32(x[i * sx]) : it_sc_fp16_to_fp32(x[i * sx]);
    }
}
static void half_store(it_dtype dt, const float *src, uint16_t *y, int64_t sy, int64_t n) {
    bool bf = dt == IT_DTYPE_BF16;
    if (sy == 1 && bf) {
#pragma omp simd
        for (int64_t i = 0; i < n; i++) y[i] = it_sc_fp32_to_bf16(src[i]);
    } else if (sy == 1) {
#pragma omp simd
        for (int64_t i = 0; i < n; i++) y[i] = it_sc_fp32_to_fp16(src[i]);
    } else {
        for (int64_t i = 0; i < n; i++) y[i * sy] = bf ? it_sc_fp32_to_bf16(src[i]) : it_sc_fp32_to_fp16(src[i]);
    }
}

/* ---------------------------------------------------------------- strided iteration */

/* Up to three operands (0 = out) over coalesced dims. */
typedef struct iter {
    int nd, nt;
    int64_t shape[IT_MAX_DIMS];
    int64_t st[3][IT_MAX_DIMS];
} iter;

/* Drop size-1 dims; merge a dim into the previous one when every operand steps through
 * both as through one (stride[prev] == stride[cur] * shape[cur]). */
static void iter_build(iter *it, const it_tdesc *const *t, int nt) {
    it->nd = 0;
    it->nt = nt;
    const it_tdesc *o = t[0];
    for (int d = 0; d < o->ndim; d++) {
        if (o->shape[d] == 1) continue;
        int k = it->nd;
        bool merge = k > 0;
        for (int j = 0; j < nt && merge; j++) merge = it->st[j][k - 1] == t[j]->strides[d] * o->shape[d];
        if (merge) {
            it->shape[k - 1] *= o->shape[d];
            for (int j = 0; j < nt; j++) it->st[j][k - 1] = t[j]->strides[d];
        } else {
            it->shape[k] = o->shape[d];
            for (int j = 0; j < nt; j++) it->st[j][k] = t[j]->strides[d];
            it->nd++;
        }
    }
    if (it->nd == 0) { /* one element */
        it->nd = 1;
        it->shape[0] = 1;
        for (int j = 0; j < nt; j++) it->st[j][0] = 1;
    }
}

typedef struct ew_job {
    bool binary;
    int op;
    float alpha;
    it_dtype dt;
    void *p[3]; /* out, in0, in1 */
} ew_job;

/* One piece of a row: n elements from the given element offsets. */
static void ew_piece(const ew_job *j, const int64_t *off, const int64_t *st, int64_t n) {
    switch (j->dt) {
    case IT_DTYPE_FP32: {
        float *o = (float *)j->p[0] + off[0];
        const float *x = (const float *)j->p[1] + off[1];
        if (j->binary)
            binary_f32((it_binary_op)j->op, x, st[1], (const float *)j->p[2] + off[2], st[2], o, st[0], n);
        else
            unary_f32((it_unary_op)j->op, j->alpha, x, st[1], o, st[0], n);
        break;
    }
    case IT_DTYPE_FP64: {
        double *o = (double *)j->p[0] + off[0];
        const double *x = (const double *)j->p[1] + off[1];
        if (j->binary)
            binary_f64((it_binary_op)j->op, x, st[1], (const double *)j->p[2] + off[2], st[2], o, st[0], n);
        else
            unary_f64((it_unary_op)j->op, (double)j->alpha, x, st[1], o, st[0], n);
        break;
    }
    default: { /* bf16/fp16 through fp32 blocks */
        float xa[HBLOCK], xb[HBLOCK], y[HBLOCK];
        for (int64_t i0 = 0; i0 < n; i0 += HBLOCK) {
            int64_t m = n - i0 < HBLOCK ? n - i0 : HBLOCK;
            half_load(j->dt, (const uint16_t *)j->p[1] + off[1] + i0 * st[1], st[1], xa, m);
            if (j->binary) {
                half_load(j->dt, (const uint16_t *)j->p[2] + off[2] + i0 * st[2], st[2], xb, m);
                binary_f32((it_binary_op)j->op, xa, 1, xb, 1, y, 1, m);
            } else {
                unary_f32((it_unary_op)j->op, j->alpha, xa, 1, y, 1, m);
            }
            half_store(j->dt, y, (uint16_t *)j->p[0] + off[0] + i0 * st[0], st[0], m);
        }
        break;
    }
    }
}

static void ew_run(const ew_job *j, const iter *it, int64_t total) {
    int nd = it->nd;
    int64_t inner = it->shape[nd - 1];
    int64_t per_row = (inner + CHUNK - 1) / CHUNK;
    int64_t tasks = total / inner * per_row;
    int64_t st[3] = {it->st[0][nd - 1], it->st[1][nd - 1], it->nt > 2 ? it->st[2][nd - 1] : 0};
#pragma omp parallel for schedule(static) if (total >= PAR_MIN)
    for (int64_t t = 0; t < tasks; t++) {
        int64_t row = t / per_row, c0 = (t % per_row) * CHUNK;
        int64_t n = inner - c0 < CHUNK ? inner - c0 : CHUNK;
        int64_t off[3] = {0, 0, 0};
        for (int k = 0; k < it->nt; k++) off[k] = offset_of(row, nd - 1, it->shape, it->st[k]) + c0 * st[k];
        ew_piece(j, off, st, n);
    }
}

static bool float_dtype(it_dtype dt) {
    return dt == IT_DTYPE_FP32 || dt == IT_DTYPE_FP64 || dt == IT_DTYPE_BF16 || dt == IT_DTYPE_FP16;
}

/* Runs job j over the checked operands t[0..nt) (t[0] = out) after checking out's dtype. */
static it_status ew_launch(const char *kernel, const ew_job *j, const it_tdesc *const *t, int nt) {
    const it_tdesc *out = t[0];
    if (!float_dtype(out->dtype))
        return it_error(IT_ERR_UNSUPPORTED, "%s: dtype %s not supported", kernel, it_dtype_name(out->dtype));
    int64_t total = numel(out);
    if (total == 0) return IT_OK;
    iter it;
    iter_build(&it, t, nt);
    ew_run(j, &it, total);
    return IT_OK;
}

/* out (D...) = f(x) elementwise, x with out's shape (stride 0 = broadcast). */
it_status it_cpu_unary(it_stream *s, it_unary_op op, float alpha, const it_tdesc *x, it_tdesc *out) {
    (void)s;
    it_status st;
    if ((int)op < 0 || op >= IT_UNARY_COUNT) return it_error(IT_ERR_INVALID_ARG, "unary: op %d out of range", (int)op);
    if ((st = it_cpu_check_desc("unary", "x", x, 0)) || (st = it_cpu_check_desc("unary", "out", out, 0)) ||
        (st = it_cpu_check_same("unary", "x", x, "out", out, false)) ||
        (st = it_cpu_check_writable("unary", "out", out)))
        return st;
    const it_tdesc *t[2] = {out, x};
    ew_job j = {false, (int)op, alpha, out->dtype, {out->data, x->data, NULL}};
    return ew_launch("unary", &j, t, 2);
}

/* out (D...) = f(a, b) elementwise, a and b with out's shape (stride 0 = broadcast). */
it_status it_cpu_binary(it_stream *s, it_binary_op op, const it_tdesc *a, const it_tdesc *b, it_tdesc *out) {
    (void)s;
    it_status st;
    if ((int)op < 0 || op >= IT_BINARY_COUNT)
        return it_error(IT_ERR_INVALID_ARG, "binary: op %d out of range", (int)op);
    if ((st = it_cpu_check_desc("binary", "a", a, 0)) || (st = it_cpu_check_desc("binary", "b", b, 0)) ||
        (st = it_cpu_check_desc("binary", "out", out, 0)) ||
        (st = it_cpu_check_same("binary", "a", a, "out", out, false)) ||
        (st = it_cpu_check_same("binary", "b", b, "out", out, false)) ||
        (st = it_cpu_check_writable("binary", "out", out)))
        return st;
    const it_tdesc *t[3] = {out, a, b};
    ew_job j = {true, (int)op, 0.0f, out->dtype, {out->data, a->data, b->data}};
    return ew_launch("binary", &j, t, 3);
}

/* ---------------------------------------------------------------- SwiGLU over half inputs
 * The fused forms of autocast's widen -> silu -> mul -> round (backend.h's swiglu_low_*):
 * each block of HBLOCK elements is widened into fp32 rows, the unary and binary maps' own
 * element functions run on them (silu_f32, silu_bwd_f32, the products in the same operand
 * order), and the results are rounded once, so the bits are the composition's. */
static bool contiguous(const it_tdesc *t) {
    int64_t want = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (t->shape[d] != 1 && t->strides[d] != want) return false;
        want *= t->shape[d];
    }
    return true;
}

/* Every operand is checked against a (dtype, shape), contiguous, the last nout of t written;
 * a's dtype half. */
static it_status swiglu_check(const char *k, const it_tdesc *a, const it_tdesc *const *t, const char *const *names,
                              int nt, int nout) {
    it_status st = it_cpu_check_desc(k, "a", a, 0);
    if (st) return st;
    if (a->dtype != IT_DTYPE_BF16 && a->dtype != IT_DTYPE_FP16)
        return it_error(IT_ERR_INVALID_ARG, "%s: a is %s; the fused SwiGLU takes bf16 or fp16", k,
                        it_dtype_name(a->dtype));
    for (int i = 0; i < nt; i++) {
        if ((st = it_cpu_check_like(k, names[i], t[i], 0, "a", a, i >= nt - nout))) return st;
    }
    for (int i = -1; i < nt; i++) {
        const it_tdesc *x = i < 0 ? a : t[i];
        if (!contiguous(x)) return it_error(IT_ERR_INVALID_ARG, "%s: %s is not contiguous", k, i < 0 ? "a" : names[i]);
    }
    return IT_OK;
}

static void swiglu_fwd_block(it_dtype dt, const uint16_t *a, const uint16_t *b, uint16_t *y, int64_t m) {
    float wa[HBLOCK], wb[HBLOCK], r[HBLOCK];
    half_load(dt, a, 1, wa, m);
    half_load(dt, b, 1, wb, m);
#pragma omp simd
    for (int64_t i = 0; i < m; i++) r[i] = silu_f32(wa[i]);
#pragma omp simd
    for (int64_t i = 0; i < m; i++) r[i] = r[i] * wb[i];
    half_store(dt, r, y, 1, m);
}

static void swiglu_bwd_block(it_dtype dt, const uint16_t *a, const uint16_t *b, const uint16_t *dy, uint16_t *da,
                             uint16_t *db, int64_t m) {
    float wa[HBLOCK], wb[HBLOCK], wd[HBLOCK], d[HBLOCK], r[HBLOCK];
    half_load(dt, a, 1, wa, m);
    half_load(dt, b, 1, wb, m);
    half_load(dt, dy, 1, wd, m);
#pragma omp simd
    for (int64_t i = 0; i < m; i++) d[i] = silu_den(wa[i]); /* one exp for silu(a) and its s */
#pragma omp simd
    for (int64_t i = 0; i < m; i++) r[i] = wd[i] * (wa[i] / d[i]); /* db = dy * silu(a) */
    half_store(dt, r, db, 1, m);
#pragma omp simd
    for (int64_t i = 0; i < m; i++) r[i] = silu_bwd_s(wa[i], 1.0f / d[i], wd[i] * wb[i]); /* da = silu_bwd(a, dy b) */
    half_store(dt, r, da, 1, m);
}

it_status it_cpu_swiglu_low_fwd(it_stream *s, const it_tdesc *a, const it_tdesc *b, it_tdesc *y) {
    (void)s;
    const it_tdesc *t[2] = {b, y};
    const char *names[2] = {"b", "y"};
    it_status st = swiglu_check("swiglu_low_fwd", a, t, names, 2, 1);
    if (st) return st;
    int64_t n = numel(a), tasks = (n + CHUNK - 1) / CHUNK;
    const uint16_t *pa = a->data, *pb = b->data;
    uint16_t *py = y->data;
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (int64_t k = 0; k < tasks; k++)
        for (int64_t i0 = k * CHUNK; i0 < n && i0 < (k + 1) * CHUNK; i0 += HBLOCK) {
            int64_t m = n - i0 < HBLOCK ? n - i0 : HBLOCK;
            swiglu_fwd_block(a->dtype, pa + i0, pb + i0, py + i0, m);
        }
    return IT_OK;
}

it_status it_cpu_swiglu_low_bwd(it_stream *s, const it_tdesc *a, const it_tdesc *b, const it_tdesc *dy, it_tdesc *da,
                                it_tdesc *db) {
    (void)s;
    const it_tdesc *t[4] = {b, dy, da, db};
    const char *names[4] = {"b", "dy", "da", "db"};
    it_status st = swiglu_check("swiglu_low_bwd", a, t, names, 4, 2);
    if (st) return st;
    int64_t n = numel(a), tasks = (n + CHUNK - 1) / CHUNK;
    const uint16_t *pa = a->data, *pb = b->data, *pd = dy->data;
    uint16_t *pda = da->data, *pdb = db->data;
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (int64_t k = 0; k < tasks; k++)
        for (int64_t i0 = k * CHUNK; i0 < n && i0 < (k + 1) * CHUNK; i0 += HBLOCK) {
            int64_t m = n - i0 < HBLOCK ? n - i0 : HBLOCK;
            swiglu_bwd_block(a->dtype, pa + i0, pb + i0, pd + i0, pda + i0, pdb + i0, m);
        }
    return IT_OK;
}

/* ---------------------------------------------------------------- reduce */

/* Kept and reduced dims of x after dropping size-1 dims and coalescing. */
typedef struct rplan {
    int nk, nr;
    int64_t kshape[IT_MAX_DIMS], kxs[IT_MAX_DIMS], kos[IT_MAX_DIMS];
    int64_t rshape[IT_MAX_DIMS], rxs[IT_MAX_DIMS];
    int64_t nout, nred;
} rplan;

static void rplan_build(rplan *p, const it_tdesc *x, const it_tdesc *out) {
    p->nk = p->nr = 0;
    p->nout = numel(out);
    p->nred = 1;
    for (int d = 0; d < x->ndim; d++) {
        int64_t n = x->shape[d];
        if (out->shape[d] == 1 && n != 1) p->nred *= n;
        if (n == 1) continue;
        if (out->shape[d] == 1) {
            int k = p->nr;
            if (k > 0 && p->rxs[k - 1] == x->strides[d] * n) {
                p->rshape[k - 1] *= n;
                p->rxs[k - 1] = x->strides[d];
            } else {
                p->rshape[k] = n;
                p->rxs[k] = x->strides[d];
                p->nr++;
            }
        } else {
            int k = p->nk;
            if (k > 0 && p->kxs[k - 1] == x->strides[d] * n && p->kos[k - 1] == out->strides[d] * n) {
                p->kshape[k - 1] *= n;
                p->kxs[k - 1] = x->strides[d];
                p->kos[k - 1] = out->strides[d];
            } else {
                p->kshape[k] = n;
                p->kxs[k] = x->strides[d];
                p->kos[k] = out->strides[d];
                p->nk++;
            }
        }
    }
    if (p->nr == 0) { /* nothing reduced (or only size-1 dims): a sum of one element */
        p->rshape[0] = 1;
        p->rxs[0] = 1;
        p->nr = 1;
    }
}

/* The tree of the header comment, for T = float and double. F(v) is the element's term
 * (v, or v*v for SUMSQ). */
#define DEFINE_REDUCE(T, SFX)                                                                                          \
    static inline T term_##SFX(T v, int op) { return op == IT_REDUCE_SUMSQ ? v * v : v; }                              \
    static inline T join_##SFX(T l, T r, int op) { return op == IT_REDUCE_MAX ? NANMAX(l, r) : l + r; }                \
    /* n <= 128 elements (op SUM or SUMSQ); inlined with s == 1 for the contiguous case */                             \
    ALWAYS_INLINE T lanes_##SFX(const T *x, int64_t n, int64_t s, int op) {                                            \
        T res = 0;                                                                                                     \
        int64_t i = 0;                                                                                                 \
        if (n >= 8) {                                                                                                  \
            T r[8];                                                                                                    \
            for (int j = 0; j < 8; j++) r[j] = term_##SFX(x[j * s], op);                                               \
            for (i = 8; i + 8 <= n; i += 8) {                                                                          \
                _Pragma("omp simd") for (int j = 0; j < 8; j++) r[j] += term_##SFX(x[(i + j) * s], op);                \
            }                                                                                                          \
            res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));                                   \
        }                                                                                                              \
        for (; i < n; i++) res += term_##SFX(x[i * s], op);                                                            \
        return res;                                                                                                    \
    }                                                                                                                  \
    static T leaf_##SFX(const T *x, int64_t n, int64_t s, int op) {                                                    \
        if (op == IT_REDUCE_MAX) {                                                                                     \
            T m = (T)-INFINITY;                                                                                        \
            for (int64_t i = 0; i < n; i++) m = NANMAX(x[i * s], m);                                                   \
            return m;                                                                                                  \
        }                                                                                                              \
        if (s == 1)                                                                                                    \
            return op == IT_REDUCE_SUMSQ ? lanes_##SFX(x, n, 1, IT_REDUCE_SUMSQ)                                       \
                                         : lanes_##SFX(x, n, 1, IT_REDUCE_SUM);                                        \
        return lanes_##SFX(x, n, s, op);                                                                               \
    }                                                                                                                  \
    static T pw_##SFX(const T *x, int64_t n, int64_t s, int op) {                                                      \
        if (n <= 128) return leaf_##SFX(x, n, s, op);                                                                  \
        int64_t n2 = n / 2;                                                                                            \
        n2 -= n2 % 8;                                                                                                  \
        return join_##SFX(pw_##SFX(x, n2, s, op), pw_##SFX(x + n2 * s, n - n2, s, op), op);                            \
    }                                                                                                                  \
    /* The same tree split into OpenMP tasks (call inside parallel + single). */                                       \
    static T pw_task_##SFX(const T *x, int64_t n, int64_t s, int op) {                                                 \
        if (n <= TASK_LEAF) return pw_##SFX(x, n, s, op);                                                              \
        int64_t n2 = n / 2;                                                                                            \
        n2 -= n2 % 8;                                                                                                  \
        T l, r;                                                                                                        \
        _Pragma("omp task shared(l)") l = pw_task_##SFX(x, n2, s, op);                                                 \
        r = pw_task_##SFX(x + n2 * s, n - n2, s, op);                                                                  \
        _Pragma("omp taskwait") return join_##SFX(l, r, op);                                                           \
    }                                                                                                                  \
    /* Outer reduced rows [lo, hi) of one output, combined pairwise. */                                                \
    static T outer_##SFX(const T *x, const rplan *p, int64_t lo, int64_t hi, int op, bool tasks) {                     \
        int nr = p->nr;                                                                                                \
        int64_t inner = p->rshape[nr - 1];                                                                             \
        if (hi - lo == 1) {                                                                                            \
            const T *row = x + offset_of(lo, nr - 1, p->rshape, p->rxs);                                               \
            return tasks ? pw_task_##SFX(row, inner, p->rxs[nr - 1], op) : pw_##SFX(row, inner, p->rxs[nr - 1], op);   \
        }                                                                                                              \
        int64_t mid = lo + (hi - lo) / 2;                                                                              \
        if (!tasks || (hi - lo) * inner <= TASK_LEAF)                                                                  \
            return join_##SFX(outer_##SFX(x, p, lo, mid, op, false), outer_##SFX(x, p, mid, hi, op, false), op);       \
        T l, r;                                                                                                        \
        _Pragma("omp task shared(l)") l = outer_##SFX(x, p, lo, mid, op, true);                                        \
        r = outer_##SFX(x, p, mid, hi, op, true);                                                                      \
        _Pragma("omp taskwait") return join_##SFX(l, r, op);                                                           \
    }                                                                                                                  \
    /* w <= COLS adjacent outputs at once (x's column stride 1): res[c] is bit-identical to                            \
     * pw(x + c, n, s). */                                                                                             \
    static void pw_cols_##SFX(const T *x, int64_t n, int64_t s, int64_t w, int op, T *res) {                           \
        if (n > 128) {                                                                                                 \
            int64_t n2 = n / 2;                                                                                        \
            n2 -= n2 % 8;                                                                                              \
            T l[COLS];                                                                                                 \
            pw_cols_##SFX(x, n2, s, w, op, l);                                                                         \
            pw_cols_##SFX(x + n2 * s, n - n2, s, w, op, res);                                                          \
            for (int64_t c = 0; c < w; c++) res[c] = join_##SFX(l[c], res[c], op);                                     \
            return;                                                                                                    \
        }                                                                                                              \
        if (op == IT_REDUCE_MAX) {                                                                                     \
            for (int64_t c = 0; c < w; c++) res[c] = (T)-INFINITY;                                                     \
            for (int64_t i = 0; i < n; i++)                                                                            \
                for (int64_t c = 0; c < w; c++) res[c] = NANMAX(x[i * s + c], res[c]);                                 \
            return;                                                                                                    \
        }                                                                                                              \
        for (int64_t c = 0; c < w; c++) res[c] = 0;                                                                    \
        int64_t i = 0;                                                                                                 \
        if (n >= 8) {                                                                                                  \
            T r[8][COLS];                                                                                              \
            for (int j = 0; j < 8; j++)                                                                                \
                for (int64_t c = 0; c < w; c++) r[j][c] = term_##SFX(x[j * s + c], op);                                \
            for (i = 8; i + 8 <= n; i += 8)                                                                            \
                for (int j = 0; j < 8; j++) {                                                                          \
                    const T *xr = x + (i + j) * s;                                                                     \
                    /* rows lie s apart, a stride the hardware does not follow: fetch ahead. (256, 3072)               \
                     * summed over rows from DRAM: 16 -> 25 GB/s, 2 threads */                                         \
                    if (i + j + PF_ROWS < n)                                                                           \
                        for (int64_t c = 0; c < w; c += 64 / (int64_t)sizeof(T))                                       \
                            __builtin_prefetch(xr + PF_ROWS * s + c);                                                  \
                    _Pragma("omp simd") for (int64_t c = 0; c < w; c++) r[j][c] += term_##SFX(xr[c], op);              \
                }                                                                                                      \
            for (int64_t c = 0; c < w; c++)                                                                            \
                res[c] = ((r[0][c] + r[1][c]) + (r[2][c] + r[3][c])) + ((r[4][c] + r[5][c]) + (r[6][c] + r[7][c]));    \
        }                                                                                                              \
        for (; i < n; i++)                                                                                             \
            for (int64_t c = 0; c < w; c++) res[c] += term_##SFX(x[i * s + c], op);                                    \
    }                                                                                                                  \
    static T finish_##SFX(T v, int op, int64_t nred) { return op == IT_REDUCE_MEAN ? v / (T)nred : v; }                \
    static void reduce_##SFX(const T *x, T *out, const rplan *p, int op) {                                             \
        int rop = op == IT_REDUCE_MEAN ? IT_REDUCE_SUM : op;                                                           \
        int64_t nouter = p->nred / p->rshape[p->nr - 1];                                                               \
        int threads = omp_get_max_threads();                                                                           \
        bool par = p->nout * p->nred >= PAR_MIN;                                                                       \
        int nk = p->nk;                                                                                                \
        if (p->nr == 1 && nk > 0 && p->kxs[nk - 1] == 1 && p->rxs[0] != 1) {                                           \
            /* Columns: the innermost kept dim is contiguous in x; COLS outputs per task. */                           \
            int64_t w = p->kshape[nk - 1], blocks = (w + COLS - 1) / COLS, tasks = p->nout / w * blocks;               \
            _Pragma("omp parallel for schedule(static) if (par)") for (int64_t t = 0; t < tasks; t++) {                \
                int64_t row = t / blocks, c0 = (t % blocks) * COLS, cw = w - c0 < COLS ? w - c0 : COLS;                \
                T res[COLS];                                                                                           \
                pw_cols_##SFX(x + offset_of(row, nk - 1, p->kshape, p->kxs) + c0, p->rshape[0], p->rxs[0], cw, rop,    \
                              res);                                                                                    \
                T *o = out + offset_of(row, nk - 1, p->kshape, p->kos) + c0 * p->kos[nk - 1];                          \
                for (int64_t c = 0; c < cw; c++) o[c * p->kos[nk - 1]] = finish_##SFX(res[c], op, p->nred);            \
            }                                                                                                          \
        } else if (p->nout >= 2 * (int64_t)threads || !par) {                                                          \
            _Pragma("omp parallel for schedule(static) if (par)") for (int64_t i = 0; i < p->nout; i++) {              \
                T v = outer_##SFX(x + offset_of(i, nk, p->kshape, p->kxs), p, 0, nouter, rop, false);                  \
                out[offset_of(i, nk, p->kshape, p->kos)] = finish_##SFX(v, op, p->nred);                               \
            }                                                                                                          \
        } else {                                                                                                       \
            /* Few outputs, long sums: each sum's subtrees run as tasks. */                                            \
            for (int64_t i = 0; i < p->nout; i++) {                                                                    \
                T v = 0;                                                                                               \
                _Pragma("omp parallel") _Pragma("omp single") v =                                                      \
                    outer_##SFX(x + offset_of(i, nk, p->kshape, p->kxs), p, 0, nouter, rop, true);                     \
                out[offset_of(i, nk, p->kshape, p->kos)] = finish_##SFX(v, op, p->nred);                               \
            }                                                                                                          \
        }                                                                                                              \
    }

DEFINE_REDUCE(float, f32)
DEFINE_REDUCE(double, f64)

/* x (D...) -> out (D... with 1 on reduced dims), see the header comment for the order. */
it_status it_cpu_reduce(it_stream *s, it_reduce_op op, const it_tdesc *x, it_tdesc *out) {
    (void)s;
    it_status st;
    if ((int)op < 0 || op >= IT_REDUCE_COUNT)
        return it_error(IT_ERR_INVALID_ARG, "reduce: op %d out of range", (int)op);
    if ((st = it_cpu_check_desc("reduce", "x", x, 0)) || (st = it_cpu_check_desc("reduce", "out", out, 0)) ||
        (st = it_cpu_check_writable("reduce", "out", out)))
        return st;
    if (x->ndim != out->ndim)
        return it_error(IT_ERR_INVALID_ARG, "reduce: out.ndim %d != x.ndim %d", out->ndim, x->ndim);
    for (int d = 0; d < x->ndim; d++)
        if (out->shape[d] != x->shape[d] && out->shape[d] != 1)
            return it_error(IT_ERR_INVALID_ARG, "reduce: out.shape[%d] = %lld is neither x's %lld nor 1", d,
                            (long long)out->shape[d], (long long)x->shape[d]);
    if ((st = it_cpu_check_dtype("reduce", "x", x, "out", out->dtype)) || (st = it_cpu_check_fp32_fp64("reduce", x)))
        return st;
    rplan p;
    rplan_build(&p, x, out);
    if (p.nout == 0) return IT_OK;
    if (p.nred == 0) { /* empty reduction: the identity (NaN for a mean, as torch) */
        double v = op == IT_REDUCE_MAX ? -INFINITY : op == IT_REDUCE_MEAN ? NAN : 0.0;
        for (int64_t i = 0; i < p.nout; i++) {
            int64_t off = offset_of(i, out->ndim, out->shape, out->strides);
            if (x->dtype == IT_DTYPE_FP32)
                ((float *)out->data)[off] = (float)v;
            else
                ((double *)out->data)[off] = v;
        }
        return IT_OK;
    }
    if (x->dtype == IT_DTYPE_FP32)
        reduce_f32((const float *)x->data, (float *)out->data, &p, (int)op);
    else
        reduce_f64((const double *)x->data, (double *)out->data, &p, (int)op);
    return IT_OK;
}
