/* Per-element math of the CUDA backend's elementwise kernels (kernels_ew.cu), written in
 * plain C so that it compiles both under nvcc (IT_SC_FN = __host__ __device__ static inline)
 * and under a C11 compiler (no CUDA header): tests/unit/test_cuda_math.c compiles it on the
 * host and checks it against the CPU backend bit for bit.
 *
 * Shared with the CPU backend as one text (include/infinitrain/scalar): the unfused IEEE
 * operations (it_sc_fadd, ...), the cast conversions and fp16 / bf16 rounding
 * (it_scalar_cast.h), the SGD and Adam / AdamW element updates and their scalars
 * (it_scalar_adam.h). Transcribed here from backends/cpu, operation by operation, because the
 * CPU's versions are plain C arithmetic inside its vectorized loops:
 *   - cpu_util.h's vexpf / vexpf_normal / vtanhf (Cody-Waite exp, Cephes polynomials);
 *   - elementwise.c's gelu / silu / their backwards / tanh backward / NaN-propagating max, min,
 *     and its reduce tree (leaves of 8 lanes, pairwise splits; walked here without recursion).
 * On the device every + - * / sqrt goes through the _rn intrinsics, which nvcc never fuses,
 * and fmaf is __fmaf_rn where the CPU calls fmaf; the CPU library is compiled as ISO C11 (no
 * contraction of a*b+c into an FMA). So fp32 (and bf16 / fp16, computed in fp32) gives the
 * CPU's bits on the device, given IEEE fp32 without flush to zero (nvcc's default, no
 * --use_fast_math). Exceptions: log (CUDA's logf, within 1 ulp of glibc's) and the fp64 path's
 * exp / log / tanh / cosh (CUDA's libm, within 1-2 ulp of glibc's; the fp64 formulas are
 * the CPU's). */
#ifndef IT_CUDA_CU_MATH_H
#define IT_CUDA_CU_MATH_H

#include "infinitrain/backend.h"
#include "infinitrain/scalar/it_scalar.h"
#include "infinitrain/scalar/it_scalar_adam.h"
#include "infinitrain/scalar/it_scalar_cast.h"

/* ---------------------------------------------------------------- exp, tanh (cpu_util.h) */
/* e^r for x = k ln2 + r (Cody-Waite, two-part ln2), Cephes' degree-6 polynomial; *k = k. */
IT_SC_FN float it_cu_exp_reduced(float x, float *k) {
    float kk = it_sc_fsub(it_sc_fadd(it_sc_fmul(x, 1.44269504088896341f), 12582912.0f), 12582912.0f);
    float r = it_sc_fsub(x, it_sc_fmul(kk, 0.693359375f));
    r = it_sc_fsub(r, it_sc_fmul(kk, -2.12194440e-4f));
    float p = 1.9875691500e-4f;
    p = it_sc_fadd(it_sc_fmul(p, r), 1.3981999507e-3f);
    p = it_sc_fadd(it_sc_fmul(p, r), 8.3334519073e-3f);
    p = it_sc_fadd(it_sc_fmul(p, r), 4.1665795894e-2f);
    p = it_sc_fadd(it_sc_fmul(p, r), 1.6666665459e-1f);
    p = it_sc_fadd(it_sc_fmul(p, r), 5.0000001201e-1f);
    *k = kk;
    return it_sc_fadd(it_sc_fadd(it_sc_fmul(p, it_sc_fmul(r, r)), r), 1.0f);
}
/* exp(x) = e^r 2^k1 2^k2 (k1 = k >> 1), input clamped to [-104, 89]; NaN stays NaN (vexpf). */
IT_SC_FN float it_cu_expf(float x) {
    float xc = x > 89.0f ? 89.0f : x;
    xc = xc < -104.0f ? -104.0f : xc;
    xc = x == x ? xc : 0.0f;
    float k;
    float e = it_cu_exp_reduced(xc, &k);
    int32_t ki = (int32_t)k, k1 = ki >> 1, k2 = ki - k1;
    float y = it_sc_fmul(it_sc_fmul(e, it_sc_bits_f32((uint32_t)(k1 + 127) << 23)),
                         it_sc_bits_f32((uint32_t)(k2 + 127) << 23));
    return x == x ? y : x;
}
/* exp(x) for x in [-87, 88] only (vexpf_normal): e^r 2^k as one normal factor. */
IT_SC_FN float it_cu_expf_normal(float x) {
    float k;
    float e = it_cu_exp_reduced(x, &k);
    return it_sc_fmul(e, it_sc_bits_f32((uint32_t)((int32_t)k + 127) << 23));
}
/* tanh(x) = x + x z P(z) (z = x^2, Cephes) below |x| = 0.625, else sign(x) (1 - 2/(e^(2|x|) + 1)). */
IT_SC_FN float it_cu_tanhf(float x) {
    float s = it_cu_expf(it_sc_fmul(2.0f, fabsf(x)));
    float big = it_sc_fsub(1.0f, it_sc_fdiv(2.0f, it_sc_fadd(s, 1.0f)));
    big = x < 0.0f ? -big : big;
    float z = it_sc_fmul(x, x);
    float q = it_sc_fadd(it_sc_fmul(-5.70498872745e-3f, z), 2.06390887954e-2f);
    q = it_sc_fsub(it_sc_fmul(q, z), 5.37397155531e-2f);
    q = it_sc_fadd(it_sc_fmul(q, z), 1.33314422036e-1f);
    q = it_sc_fsub(it_sc_fmul(q, z), 3.33332819422e-1f);
    float small = it_sc_fadd(it_sc_fmul(it_sc_fmul(q, z), x), x);
    return fabsf(x) < 0.625f ? small : big;
}

/* ---------------------------------------------------------------- activations (elementwise.c) */
/* sqrt(2/pi) as elementwise.c forms it: sqrtf((float)(2.0 / M_PI)) (M_PI's digits). */
IT_SC_FN float it_cu_gelu_k(void) { return it_sc_fsqrt((float)(2.0 / 3.14159265358979323846)); }
/* z = -2u = -2 sqrt(2/pi) (x + 0.044715 x^3), given x2 = x*x */
IT_SC_FN float it_cu_gelu_z(float x, float x2) {
    return it_sc_fmul(it_sc_fmul(-2.0f, it_cu_gelu_k()), it_sc_fadd(x, it_sc_fmul(it_sc_fmul(0.044715f, x2), x)));
}
/* z clamped into e^z's normal range [-87, 88]; NaN -> 0 (x carries it) */
IT_SC_FN float it_cu_clamp_z(float z) {
    z = z > 88.0f ? 88.0f : z;
    z = z < -87.0f ? -87.0f : z;
    return z == z ? z : 0.0f;
}
/* gelu(x) = 0.5 x (1 + tanh u) computed as x / (1 + e^(-2u)); x * 0 past the clamp
 * (NaN at -inf, as the formula). */
IT_SC_FN float it_cu_gelu(float x) {
    float z = it_cu_gelu_z(x, it_sc_fmul(x, x));
    float y = it_sc_fdiv(x, it_sc_fadd(1.0f, it_cu_expf_normal(it_cu_clamp_z(z))));
    return z > 88.0f ? it_sc_fmul(x, 0.0f) : y;
}
/* dy * gelu'(x), gelu'(x) = s (1 + 2 x u' e s), s = 1 / (1 + e), e = e^(-2u),
 * u' = sqrt(2/pi) (1 + 3 * 0.044715 x^2); the second term dropped past the clamp; NaN for
 * non-finite x. */
IT_SC_FN float it_cu_gelu_bwd(float x, float dy) {
    float x2 = it_sc_fmul(x, x), z = it_cu_gelu_z(x, x2), zc = it_cu_clamp_z(z);
    float e = it_cu_expf_normal(zc);
    float s = it_sc_fdiv(1.0f, it_sc_fadd(1.0f, e));
    float du = it_sc_fmul(it_cu_gelu_k(), it_sc_fadd(1.0f, it_sc_fmul(it_sc_fmul(3.0f, 0.044715f), x2)));
    float t = zc == z ? it_sc_fmul(it_sc_fmul(it_sc_fmul(2.0f, x), du), it_sc_fmul(e, s)) : 0.0f;
    float g = it_sc_fmul(s, it_sc_fadd(1.0f, t));
    float xx = it_sc_fsub(x, x);
    return xx == 0.0f ? it_sc_fmul(g, dy) : xx;
}
/* silu(x) = x / (1 + e^-x) */
IT_SC_FN float it_cu_silu(float x) { return it_sc_fdiv(x, it_sc_fadd(1.0f, it_cu_expf(-x))); }
/* dy * silu'(x) = dy s (1 + x (1 - s)), s = 1 / (1 + e^-x) */
IT_SC_FN float it_cu_silu_bwd(float x, float dy) {
    float s = it_sc_fdiv(1.0f, it_sc_fadd(1.0f, it_cu_expf(-x)));
    return it_sc_fmul(it_sc_fmul(dy, s), it_sc_fadd(1.0f, it_sc_fmul(x, it_sc_fsub(1.0f, s))));
}
/* dy * tanh'(x) = dy (1 - y^2), given the forward output y */
IT_SC_FN float it_cu_tanh_bwd(float y, float dy) { return it_sc_fmul(dy, it_sc_fsub(1.0f, it_sc_fmul(y, y))); }
/* max / min propagating NaN from either side (torch.maximum / torch.minimum) */
IT_SC_FN float it_cu_nanmaxf(float p, float q) { return (p > q || p != p) ? p : q; }
IT_SC_FN float it_cu_nanminf(float p, float q) { return (p < q || p != p) ? p : q; }
IT_SC_FN double it_cu_nanmax(double p, double q) { return (p > q || p != p) ? p : q; }
IT_SC_FN double it_cu_nanmin(double p, double q) { return (p < q || p != p) ? p : q; }

/* y = f(x) for every it_unary_op, fp32 (bf16 / fp16 are computed through it). */
IT_SC_FN float it_cu_unary_f32(int op, float alpha, float v) {
    switch (op) {
    case IT_UNARY_NEG: return -v;
    case IT_UNARY_SCALE: return it_sc_fmul(alpha, v);
    case IT_UNARY_EXP: return it_cu_expf(v);
    case IT_UNARY_LOG: return logf(v); /* not bitwise: CUDA's logf vs glibc's, both within 1 ulp */
    case IT_UNARY_SQRT: return it_sc_fsqrt(v);
    case IT_UNARY_RSQRT: return it_sc_fdiv(1.0f, it_sc_fsqrt(v));
    case IT_UNARY_SQUARE: return it_sc_fmul(v, v);
    case IT_UNARY_TANH: return it_cu_tanhf(v);
    case IT_UNARY_GELU: return it_cu_gelu(v);
    case IT_UNARY_SILU: return it_cu_silu(v);
    case IT_UNARY_ADD_SCALAR: return it_sc_fadd(v, alpha);
    case IT_UNARY_RECIP: return it_sc_fdiv(1.0f, v);
    default: return v;
    }
}
/* out = f(p, q) for every it_binary_op; for the backward ops p is the forward input
 * (output for TANH_BWD) and q = dy. */
IT_SC_FN float it_cu_binary_f32(int op, float p, float q) {
    switch (op) {
    case IT_BINARY_ADD: return it_sc_fadd(p, q);
    case IT_BINARY_SUB: return it_sc_fsub(p, q);
    case IT_BINARY_MUL: return it_sc_fmul(p, q);
    case IT_BINARY_DIV: return it_sc_fdiv(p, q);
    case IT_BINARY_MAX: return it_cu_nanmaxf(p, q);
    case IT_BINARY_MIN: return it_cu_nanminf(p, q);
    case IT_BINARY_GELU_BWD: return it_cu_gelu_bwd(p, q);
    case IT_BINARY_SILU_BWD: return it_cu_silu_bwd(p, q);
    case IT_BINARY_TANH_BWD: return it_cu_tanh_bwd(p, q);
    default: return p;
    }
}

/* fp64: elementwise.c's plain formulas with libm (the gradient checks' reference).
 * gelu = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
IT_SC_FN double it_cu_gelu_f64(double x) {
    double cube = it_sc_dmul(it_sc_dmul(it_sc_dmul(0.044715, x), x), x);
    double k = it_sc_dsqrt(2.0 / 3.14159265358979323846);
    return it_sc_dmul(it_sc_dmul(0.5, x), it_sc_dadd(1.0, tanh(it_sc_dmul(k, it_sc_dadd(x, cube)))));
}
/* dy (0.5 (1 + tanh a) + 0.5 x sech^2(a) k (1 + 3 * 0.044715 x^2)), a = k (x + 0.044715 x^3) */
IT_SC_FN double it_cu_gelu_bwd_f64(double x, double dy) {
    double k = it_sc_dsqrt(2.0 / 3.14159265358979323846);
    double cube = it_sc_dmul(it_sc_dmul(it_sc_dmul(0.044715, x), x), x);
    double a = it_sc_dmul(k, it_sc_dadd(x, cube));
    double th = tanh(a), ch = cosh(a);
    double sech = it_sc_ddiv(1.0, it_sc_dmul(ch, ch));
    double inner = it_sc_dadd(1.0, it_sc_dmul(it_sc_dmul(it_sc_dmul(3.0, 0.044715), x), x));
    double right = it_sc_dmul(it_sc_dmul(it_sc_dmul(it_sc_dmul(x, 0.5), sech), k), inner);
    double local = it_sc_dadd(it_sc_dmul(0.5, it_sc_dadd(1.0, th)), right);
    return it_sc_dmul(local, dy);
}
/* silu = x / (1 + e^-x); backward dy s (1 + x (1 - s)) */
IT_SC_FN double it_cu_silu_f64(double x) { return it_sc_ddiv(x, it_sc_dadd(1.0, exp(-x))); }
IT_SC_FN double it_cu_silu_bwd_f64(double x, double dy) {
    double s = it_sc_ddiv(1.0, it_sc_dadd(1.0, exp(-x)));
    return it_sc_dmul(it_sc_dmul(dy, s), it_sc_dadd(1.0, it_sc_dmul(x, it_sc_dsub(1.0, s))));
}
IT_SC_FN double it_cu_unary_f64(int op, double alpha, double v) {
    switch (op) {
    case IT_UNARY_NEG: return -v;
    case IT_UNARY_SCALE: return it_sc_dmul(alpha, v);
    case IT_UNARY_EXP: return exp(v);
    case IT_UNARY_LOG: return log(v);
    case IT_UNARY_SQRT: return it_sc_dsqrt(v);
    case IT_UNARY_RSQRT: return it_sc_ddiv(1.0, it_sc_dsqrt(v));
    case IT_UNARY_SQUARE: return it_sc_dmul(v, v);
    case IT_UNARY_TANH: return tanh(v);
    case IT_UNARY_GELU: return it_cu_gelu_f64(v);
    case IT_UNARY_SILU: return it_cu_silu_f64(v);
    case IT_UNARY_ADD_SCALAR: return it_sc_dadd(v, alpha);
    case IT_UNARY_RECIP: return it_sc_ddiv(1.0, v);
    default: return v;
    }
}
IT_SC_FN double it_cu_binary_f64(int op, double p, double q) {
    switch (op) {
    case IT_BINARY_ADD: return it_sc_dadd(p, q);
    case IT_BINARY_SUB: return it_sc_dsub(p, q);
    case IT_BINARY_MUL: return it_sc_dmul(p, q);
    case IT_BINARY_DIV: return it_sc_ddiv(p, q);
    case IT_BINARY_MAX: return it_cu_nanmax(p, q);
    case IT_BINARY_MIN: return it_cu_nanmin(p, q);
    case IT_BINARY_GELU_BWD: return it_cu_gelu_bwd_f64(p, q);
    case IT_BINARY_SILU_BWD: return it_cu_silu_bwd_f64(p, q);
    case IT_BINARY_TANH_BWD: return it_sc_dmul(q, it_sc_dsub(1.0, it_sc_dmul(p, p)));
    default: return p;
    }
}

/* ---------------------------------------------------------------- the reduce tree (elementwise.c)
 * The CPU's summation order, for every output of a reduction:
 *  - the outer reduced rows [lo, hi) split at lo + (hi - lo)/2 until one row remains;
 *  - a row of n elements (stride s) splits at h = n/2 rounded down to a multiple of 8 while
 *    n > 128; a leaf of n <= 128 sums 8 interleaved lanes combined
 *    ((r0+r1)+(r2+r3))+((r4+r5)+(r6+r7)), then the n%8 tail in order (n < 8: from 0); MAX is
 *    a running NaN-propagating max from -inf; nodes join as left + right (max for MAX).
 * The plan is elementwise.c's rplan (kept and reduced dims coalesced). */
#define IT_CU_RED_LEAF 128
#define IT_CU_RED_MAX_DEPTH 64 /* levels of a tree the kernel walks (2^60 elements need < 64) */

typedef struct it_cu_red_plan {
    int nk, nr;
    int64_t kshape[IT_MAX_DIMS], kxs[IT_MAX_DIMS], kos[IT_MAX_DIMS];
    int64_t rshape[IT_MAX_DIMS], rxs[IT_MAX_DIMS];
    int64_t nout, nred, nouter, inner, s; /* s: the innermost reduced stride */
    int op;                               /* SUM (also for MEAN), MAX or SUMSQ */
    int logP;                             /* the kernel's 2^logP threads per output */
} it_cu_red_plan;

/* Host only: elementwise.c's rplan_build for x and out (checked: same ndim, out's dims x's or 1). */
static inline it_cu_red_plan it_cu_red_plan_build(const it_tdesc *x, const it_tdesc *out, int op) {
    it_cu_red_plan p;
    memset(&p, 0, sizeof p);
    p.nout = 1;
    for (int d = 0; d < out->ndim; d++) p.nout *= out->shape[d];
    p.nred = 1;
    for (int d = 0; d < x->ndim; d++) {
        int64_t n = x->shape[d];
        if (out->shape[d] == 1 && n != 1) p.nred *= n;
        if (n == 1) continue;
        if (out->shape[d] == 1) {
            int k = p.nr;
            if (k > 0 && p.rxs[k - 1] == x->strides[d] * n) {
                p.rshape[k - 1] *= n;
                p.rxs[k - 1] = x->strides[d];
            } else {
                p.rshape[k] = n;
                p.rxs[k] = x->strides[d];
                p.nr++;
            }
        } else {
            int k = p.nk;
            if (k > 0 && p.kxs[k - 1] == x->strides[d] * n && p.kos[k - 1] == out->strides[d] * n) {
                p.kshape[k - 1] *= n;
                p.kxs[k - 1] = x->strides[d];
                p.kos[k - 1] = out->strides[d];
            } else {
                p.kshape[k] = n;
                p.kxs[k] = x->strides[d];
                p.kos[k] = out->strides[d];
                p.nk++;
            }
        }
    }
    if (p.nr == 0) { /* nothing reduced: a sum of one element */
        p.rshape[0] = 1;
        p.rxs[0] = 1;
        p.nr = 1;
    }
    p.inner = p.rshape[p.nr - 1];
    p.s = p.rxs[p.nr - 1];
    p.nouter = p.nred > 0 ? p.nred / p.inner : 0;
    p.op = op == IT_REDUCE_MEAN ? IT_REDUCE_SUM : op;
    p.logP = 0;
    return p;
}

/* Element offset of the idx-th element (row-major) of the first nd dims. */
IT_SC_FN int64_t it_cu_offset_of(int64_t idx, int nd, const int64_t *shape, const int64_t *strides) {
    int64_t off = 0;
    for (int d = nd - 1; d >= 0; d--) {
        int64_t q = idx / shape[d];
        off += (idx - q * shape[d]) * strides[d];
        idx = q;
    }
    return off;
}

/* A node: outer rows [a, b) (b - a >= 2), or a run of b elements from x offset a. */
typedef struct it_cu_rnode {
    bool outer;
    int64_t a, b;
} it_cu_rnode;

/* rows [lo, hi) as a node: a single row is its run (outer_'s hi - lo == 1 case) */
IT_SC_FN it_cu_rnode it_cu_red_rows(const it_cu_red_plan *p, int64_t lo, int64_t hi) {
    it_cu_rnode n;
    n.outer = hi - lo != 1;
    n.a = n.outer ? lo : it_cu_offset_of(lo, p->nr - 1, p->rshape, p->rxs);
    n.b = n.outer ? hi : p->inner;
    return n;
}
IT_SC_FN it_cu_rnode it_cu_red_root(const it_cu_red_plan *p) { return it_cu_red_rows(p, 0, p->nouter); }
IT_SC_FN bool it_cu_red_split(it_cu_rnode n) { return n.outer || n.b > IT_CU_RED_LEAF; }
IT_SC_FN it_cu_rnode it_cu_red_left(const it_cu_red_plan *p, it_cu_rnode n) {
    if (n.outer) return it_cu_red_rows(p, n.a, n.a + (n.b - n.a) / 2);
    int64_t h = n.b / 2;
    h -= h % 8;
    n.b = h;
    return n;
}
IT_SC_FN it_cu_rnode it_cu_red_right(const it_cu_red_plan *p, it_cu_rnode n) {
    if (n.outer) return it_cu_red_rows(p, n.a + (n.b - n.a) / 2, n.b);
    int64_t h = n.b / 2;
    h -= h % 8;
    n.a += h * p->s;
    n.b -= h;
    return n;
}
/* Levels of the deepest path (right halves are never smaller than left ones). */
IT_SC_FN int it_cu_red_depth(const it_cu_red_plan *p) {
    int d = 0;
    for (it_cu_rnode n = it_cu_red_root(p); it_cu_red_split(n); n = it_cu_red_right(p, n)) d++;
    return d;
}

/* it_cu_red_leaf_SFX: a leaf (n <= 128 elements x[0], x[s], ...); it_cu_red_join_SFX;
 * it_cu_red_subtree_SFX: the subtree under `root`, serially, leaves left to right without
 * recursion: bit i of `bits` is the path's direction at depth i (1 = right), stack[i] the
 * finished left child at depth i + 1 (depth <= IT_CU_RED_MAX_DEPTH, checked by the host). */
#define IT_CU_DEF_RED(T, SFX, ADD, MUL, MAX)                                                                           \
    IT_SC_FN T it_cu_red_join_##SFX(T l, T r, int op) { return op == IT_REDUCE_MAX ? MAX(l, r) : ADD(l, r); }          \
    IT_SC_FN T it_cu_red_leaf_##SFX(const T *x, int64_t n, int64_t s, int op) {                                        \
        if (op == IT_REDUCE_MAX) {                                                                                     \
            T m = (T)-INFINITY;                                                                                        \
            for (int64_t i = 0; i < n; i++) m = MAX(x[i * s], m);                                                      \
            return m;                                                                                                  \
        }                                                                                                              \
        const bool sq = op == IT_REDUCE_SUMSQ;                                                                         \
        T res = 0;                                                                                                     \
        int64_t i = 0;                                                                                                 \
        if (n >= 8) {                                                                                                  \
            T r[8];                                                                                                    \
            for (int j = 0; j < 8; j++) {                                                                              \
                T v = x[j * s];                                                                                        \
                r[j] = sq ? MUL(v, v) : v;                                                                             \
            }                                                                                                          \
            for (i = 8; i + 8 <= n; i += 8)                                                                            \
                for (int j = 0; j < 8; j++) {                                                                          \
                    T v = x[(i + j) * s];                                                                              \
                    r[j] = ADD(r[j], sq ? MUL(v, v) : v);                                                              \
                }                                                                                                      \
            res = ADD(ADD(ADD(r[0], r[1]), ADD(r[2], r[3])), ADD(ADD(r[4], r[5]), ADD(r[6], r[7])));                   \
        }                                                                                                              \
        for (; i < n; i++) {                                                                                           \
            T v = x[i * s];                                                                                            \
            res = ADD(res, sq ? MUL(v, v) : v);                                                                        \
        }                                                                                                              \
        return res;                                                                                                    \
    }                                                                                                                  \
    IT_SC_FN T it_cu_red_subtree_##SFX(const it_cu_red_plan *p, const T *x, it_cu_rnode root) {                        \
        T stack[IT_CU_RED_MAX_DEPTH];                                                                                  \
        uint64_t bits = 0;                                                                                             \
        int d = 0;                                                                                                     \
        it_cu_rnode node = root;                                                                                       \
        for (;;) {                                                                                                     \
            while (it_cu_red_split(node)) {                                                                            \
                node = it_cu_red_left(p, node);                                                                        \
                bits &= ~((uint64_t)1 << d);                                                                           \
                d++;                                                                                                   \
            }                                                                                                          \
            T v = it_cu_red_leaf_##SFX(x + node.a, node.b, p->s, p->op);                                               \
            while (d > 0 && ((bits >> (d - 1)) & 1)) {                                                                 \
                d--;                                                                                                   \
                v = it_cu_red_join_##SFX(stack[d], v, p->op);                                                          \
            }                                                                                                          \
            if (d == 0) return v;                                                                                      \
            stack[d - 1] = v;                                                                                          \
            bits |= (uint64_t)1 << (d - 1);                                                                            \
            node = root;                                                                                               \
            for (int i = 0; i < d; i++) node = ((bits >> i) & 1) ? it_cu_red_right(p, node) : it_cu_red_left(p, node); \
        }                                                                                                              \
    }
IT_CU_DEF_RED(float, f32, it_sc_fadd, it_sc_fmul, it_cu_nanmaxf)
IT_CU_DEF_RED(double, f64, it_sc_dadd, it_sc_dmul, it_cu_nanmax)

#endif
