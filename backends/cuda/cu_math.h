/* Per-element math of the CUDA backend's elementwise kernels (kernels_ew.cu), written in
 * plain C so that it compiles both under nvcc (IT_CU_HD = __host__ __device__) and under a
 * C11 compiler (IT_CU_HD empty, no CUDA header): tests/unit/test_cuda_math.c compiles it on
 * the host and checks it against the CPU backend bit for bit.
 *
 * Everything is transcribed from backends/cpu, operation by operation:
 *   - cpu_util.h's vexpf / vexpf_normal / vtanhf (Cody-Waite exp, Cephes polynomials);
 *   - elementwise.c's gelu / silu / their backwards / tanh backward / NaN-propagating max, min,
 *     and its reduce tree (leaves of 8 lanes, pairwise splits; walked here without recursion);
 *   - optim.c's SGD and Adam / AdamW element updates (scalars formed on the host in double,
 *     it_cu_adam_consts, then rounded once to the element type);
 *   - cast.c's element conversions (x -> bool, saturating float -> int, wrapping int -> int,
 *     single rounding to fp16 / bf16, core/half.h's bit manipulations).
 * The CPU library is compiled as ISO C11 (no contraction of a*b+c into an FMA); on the device
 * every + - * / sqrt goes through the _rn intrinsics, which nvcc never fuses, and fmaf is
 * __fmaf_rn where the CPU calls fmaf. So fp32 (and bf16 / fp16, computed in fp32) gives the
 * CPU's bits on the device, given IEEE fp32 without flush to zero (nvcc's default, no
 * --use_fast_math). Exceptions: log (CUDA's logf, within 1 ulp of glibc's) and the fp64 path's
 * exp / log / tanh / cosh (CUDA's libm, within 1-2 ulp of glibc's; the fp64 formulas are
 * the CPU's). */
#ifndef IT_CUDA_CU_MATH_H
#define IT_CUDA_CU_MATH_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "infinitrain/backend.h"

#if defined(__CUDACC__)
#define IT_CU_HD __host__ __device__
#else
#define IT_CU_HD
#endif

/* ---------------------------------------------------------------- IEEE operations, unfused */
IT_CU_HD static inline float it_cu_fadd(float a, float b) {
#if defined(__CUDA_ARCH__)
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
}
IT_CU_HD static inline float it_cu_fsub(float a, float b) {
#if defined(__CUDA_ARCH__)
    return __fsub_rn(a, b);
#else
    return a - b;
#endif
}
IT_CU_HD static inline float it_cu_fmul(float a, float b) {
#if defined(__CUDA_ARCH__)
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}
IT_CU_HD static inline float it_cu_fdiv(float a, float b) {
#if defined(__CUDA_ARCH__)
    return __fdiv_rn(a, b);
#else
    return a / b;
#endif
}
IT_CU_HD static inline float it_cu_fsqrt(float a) {
#if defined(__CUDA_ARCH__)
    return __fsqrt_rn(a);
#else
    return sqrtf(a);
#endif
}
IT_CU_HD static inline float it_cu_ffma(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
    return __fmaf_rn(a, b, c);
#else
    return fmaf(a, b, c);
#endif
}
IT_CU_HD static inline double it_cu_dadd(double a, double b) {
#if defined(__CUDA_ARCH__)
    return __dadd_rn(a, b);
#else
    return a + b;
#endif
}
IT_CU_HD static inline double it_cu_dsub(double a, double b) {
#if defined(__CUDA_ARCH__)
    return __dsub_rn(a, b);
#else
    return a - b;
#endif
}
IT_CU_HD static inline double it_cu_dmul(double a, double b) {
#if defined(__CUDA_ARCH__)
    return __dmul_rn(a, b);
#else
    return a * b;
#endif
}
IT_CU_HD static inline double it_cu_ddiv(double a, double b) {
#if defined(__CUDA_ARCH__)
    return __ddiv_rn(a, b);
#else
    return a / b;
#endif
}
IT_CU_HD static inline double it_cu_dsqrt(double a) {
#if defined(__CUDA_ARCH__)
    return __dsqrt_rn(a);
#else
    return sqrt(a);
#endif
}
IT_CU_HD static inline double it_cu_dfma(double a, double b, double c) {
#if defined(__CUDA_ARCH__)
    return __fma_rn(a, b, c);
#else
    return fma(a, b, c);
#endif
}

/* ---------------------------------------------------------------- bits */
IT_CU_HD static inline uint32_t it_cu_f32_bits(float f) {
#if defined(__CUDA_ARCH__)
    return __float_as_uint(f);
#else
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
#endif
}
IT_CU_HD static inline float it_cu_bits_f32(uint32_t u) {
#if defined(__CUDA_ARCH__)
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
#endif
}
IT_CU_HD static inline uint64_t it_cu_f64_bits(double d) {
#if defined(__CUDA_ARCH__)
    return (uint64_t)__double_as_longlong(d);
#else
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
#endif
}
IT_CU_HD static inline double it_cu_bits_f64(uint64_t u) {
#if defined(__CUDA_ARCH__)
    return __longlong_as_double((long long)u);
#else
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
#endif
}
/* Index of the highest set bit of x != 0. */
IT_CU_HD static inline int it_cu_highest_bit64(uint64_t x) {
#if defined(__CUDA_ARCH__)
    return 63 - __clzll((long long)x);
#else
    int n = 0;
    while (x >>= 1) n++;
    return n;
#endif
}

/* ---------------------------------------------------------------- exp, tanh (cpu_util.h) */
/* e^r for x = k ln2 + r (Cody-Waite, two-part ln2), Cephes' degree-6 polynomial; *k = k. */
IT_CU_HD static inline float it_cu_exp_reduced(float x, float *k) {
    float kk = it_cu_fsub(it_cu_fadd(it_cu_fmul(x, 1.44269504088896341f), 12582912.0f), 12582912.0f);
    float r = it_cu_fsub(x, it_cu_fmul(kk, 0.693359375f));
    r = it_cu_fsub(r, it_cu_fmul(kk, -2.12194440e-4f));
    float p = 1.9875691500e-4f;
    p = it_cu_fadd(it_cu_fmul(p, r), 1.3981999507e-3f);
    p = it_cu_fadd(it_cu_fmul(p, r), 8.3334519073e-3f);
    p = it_cu_fadd(it_cu_fmul(p, r), 4.1665795894e-2f);
    p = it_cu_fadd(it_cu_fmul(p, r), 1.6666665459e-1f);
    p = it_cu_fadd(it_cu_fmul(p, r), 5.0000001201e-1f);
    *k = kk;
    return it_cu_fadd(it_cu_fadd(it_cu_fmul(p, it_cu_fmul(r, r)), r), 1.0f);
}
/* exp(x) = e^r 2^k1 2^k2 (k1 = k >> 1), input clamped to [-104, 89]; NaN stays NaN (vexpf). */
IT_CU_HD static inline float it_cu_expf(float x) {
    float xc = x > 89.0f ? 89.0f : x;
    xc = xc < -104.0f ? -104.0f : xc;
    xc = x == x ? xc : 0.0f;
    float k;
    float e = it_cu_exp_reduced(xc, &k);
    int32_t ki = (int32_t)k, k1 = ki >> 1, k2 = ki - k1;
    float y = it_cu_fmul(it_cu_fmul(e, it_cu_bits_f32((uint32_t)(k1 + 127) << 23)),
                         it_cu_bits_f32((uint32_t)(k2 + 127) << 23));
    return x == x ? y : x;
}
/* exp(x) for x in [-87, 88] only (vexpf_normal): e^r 2^k as one normal factor. */
IT_CU_HD static inline float it_cu_expf_normal(float x) {
    float k;
    float e = it_cu_exp_reduced(x, &k);
    return it_cu_fmul(e, it_cu_bits_f32((uint32_t)((int32_t)k + 127) << 23));
}
/* tanh(x) = x + x z P(z) (z = x^2, Cephes) below |x| = 0.625, else sign(x) (1 - 2/(e^(2|x|) + 1)). */
IT_CU_HD static inline float it_cu_tanhf(float x) {
    float s = it_cu_expf(it_cu_fmul(2.0f, fabsf(x)));
    float big = it_cu_fsub(1.0f, it_cu_fdiv(2.0f, it_cu_fadd(s, 1.0f)));
    big = x < 0.0f ? -big : big;
    float z = it_cu_fmul(x, x);
    float q = it_cu_fadd(it_cu_fmul(-5.70498872745e-3f, z), 2.06390887954e-2f);
    q = it_cu_fsub(it_cu_fmul(q, z), 5.37397155531e-2f);
    q = it_cu_fadd(it_cu_fmul(q, z), 1.33314422036e-1f);
    q = it_cu_fsub(it_cu_fmul(q, z), 3.33332819422e-1f);
    float small = it_cu_fadd(it_cu_fmul(it_cu_fmul(q, z), x), x);
    return fabsf(x) < 0.625f ? small : big;
}

/* ---------------------------------------------------------------- activations (elementwise.c) */
/* sqrt(2/pi) as elementwise.c forms it: sqrtf((float)(2.0 / M_PI)) (M_PI's digits). */
IT_CU_HD static inline float it_cu_gelu_k(void) { return it_cu_fsqrt((float)(2.0 / 3.14159265358979323846)); }
/* z = -2u = -2 sqrt(2/pi) (x + 0.044715 x^3), given x2 = x*x */
IT_CU_HD static inline float it_cu_gelu_z(float x, float x2) {
    return it_cu_fmul(it_cu_fmul(-2.0f, it_cu_gelu_k()), it_cu_fadd(x, it_cu_fmul(it_cu_fmul(0.044715f, x2), x)));
}
/* z clamped into e^z's normal range [-87, 88]; NaN -> 0 (x carries it) */
IT_CU_HD static inline float it_cu_clamp_z(float z) {
    z = z > 88.0f ? 88.0f : z;
    z = z < -87.0f ? -87.0f : z;
    return z == z ? z : 0.0f;
}
/* gelu(x) = 0.5 x (1 + tanh u) computed as x / (1 + e^(-2u)); x * 0 past the clamp
 * (NaN at -inf, as the formula). */
IT_CU_HD static inline float it_cu_gelu(float x) {
    float z = it_cu_gelu_z(x, it_cu_fmul(x, x));
    float y = it_cu_fdiv(x, it_cu_fadd(1.0f, it_cu_expf_normal(it_cu_clamp_z(z))));
    return z > 88.0f ? it_cu_fmul(x, 0.0f) : y;
}
/* dy * gelu'(x), gelu'(x) = s (1 + 2 x u' e s), s = 1 / (1 + e), e = e^(-2u),
 * u' = sqrt(2/pi) (1 + 3 * 0.044715 x^2); the second term dropped past the clamp; NaN for
 * non-finite x. */
IT_CU_HD static inline float it_cu_gelu_bwd(float x, float dy) {
    float x2 = it_cu_fmul(x, x), z = it_cu_gelu_z(x, x2), zc = it_cu_clamp_z(z);
    float e = it_cu_expf_normal(zc);
    float s = it_cu_fdiv(1.0f, it_cu_fadd(1.0f, e));
    float du = it_cu_fmul(it_cu_gelu_k(), it_cu_fadd(1.0f, it_cu_fmul(it_cu_fmul(3.0f, 0.044715f), x2)));
    float t = zc == z ? it_cu_fmul(it_cu_fmul(it_cu_fmul(2.0f, x), du), it_cu_fmul(e, s)) : 0.0f;
    float g = it_cu_fmul(s, it_cu_fadd(1.0f, t));
    float xx = it_cu_fsub(x, x);
    return xx == 0.0f ? it_cu_fmul(g, dy) : xx;
}
/* silu(x) = x / (1 + e^-x) */
IT_CU_HD static inline float it_cu_silu(float x) { return it_cu_fdiv(x, it_cu_fadd(1.0f, it_cu_expf(-x))); }
/* dy * silu'(x) = dy s (1 + x (1 - s)), s = 1 / (1 + e^-x) */
IT_CU_HD static inline float it_cu_silu_bwd(float x, float dy) {
    float s = it_cu_fdiv(1.0f, it_cu_fadd(1.0f, it_cu_expf(-x)));
    return it_cu_fmul(it_cu_fmul(dy, s), it_cu_fadd(1.0f, it_cu_fmul(x, it_cu_fsub(1.0f, s))));
}
/* dy * tanh'(x) = dy (1 - y^2), given the forward output y */
IT_CU_HD static inline float it_cu_tanh_bwd(float y, float dy) {
    return it_cu_fmul(dy, it_cu_fsub(1.0f, it_cu_fmul(y, y)));
}
/* max / min propagating NaN from either side (torch.maximum / torch.minimum) */
IT_CU_HD static inline float it_cu_nanmaxf(float p, float q) { return (p > q || p != p) ? p : q; }
IT_CU_HD static inline float it_cu_nanminf(float p, float q) { return (p < q || p != p) ? p : q; }
IT_CU_HD static inline double it_cu_nanmax(double p, double q) { return (p > q || p != p) ? p : q; }
IT_CU_HD static inline double it_cu_nanmin(double p, double q) { return (p < q || p != p) ? p : q; }

/* y = f(x) for every it_unary_op, fp32 (bf16 / fp16 are computed through it). */
IT_CU_HD static inline float it_cu_unary_f32(int op, float alpha, float v) {
    switch (op) {
    case IT_UNARY_NEG: return -v;
    case IT_UNARY_SCALE: return it_cu_fmul(alpha, v);
    case IT_UNARY_EXP: return it_cu_expf(v);
    case IT_UNARY_LOG: return logf(v); /* not bitwise: CUDA's logf vs glibc's, both within 1 ulp */
    case IT_UNARY_SQRT: return it_cu_fsqrt(v);
    case IT_UNARY_RSQRT: return it_cu_fdiv(1.0f, it_cu_fsqrt(v));
    case IT_UNARY_SQUARE: return it_cu_fmul(v, v);
    case IT_UNARY_TANH: return it_cu_tanhf(v);
    case IT_UNARY_GELU: return it_cu_gelu(v);
    case IT_UNARY_SILU: return it_cu_silu(v);
    case IT_UNARY_ADD_SCALAR: return it_cu_fadd(v, alpha);
    case IT_UNARY_RECIP: return it_cu_fdiv(1.0f, v);
    default: return v;
    }
}
/* out = f(p, q) for every it_binary_op; for the backward ops p is the forward input
 * (output for TANH_BWD) and q = dy. */
IT_CU_HD static inline float it_cu_binary_f32(int op, float p, float q) {
    switch (op) {
    case IT_BINARY_ADD: return it_cu_fadd(p, q);
    case IT_BINARY_SUB: return it_cu_fsub(p, q);
    case IT_BINARY_MUL: return it_cu_fmul(p, q);
    case IT_BINARY_DIV: return it_cu_fdiv(p, q);
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
IT_CU_HD static inline double it_cu_gelu_f64(double x) {
    double cube = it_cu_dmul(it_cu_dmul(it_cu_dmul(0.044715, x), x), x);
    double k = it_cu_dsqrt(2.0 / 3.14159265358979323846);
    return it_cu_dmul(it_cu_dmul(0.5, x), it_cu_dadd(1.0, tanh(it_cu_dmul(k, it_cu_dadd(x, cube)))));
}
/* dy (0.5 (1 + tanh a) + 0.5 x sech^2(a) k (1 + 3 * 0.044715 x^2)), a = k (x + 0.044715 x^3) */
IT_CU_HD static inline double it_cu_gelu_bwd_f64(double x, double dy) {
    double k = it_cu_dsqrt(2.0 / 3.14159265358979323846);
    double cube = it_cu_dmul(it_cu_dmul(it_cu_dmul(0.044715, x), x), x);
    double a = it_cu_dmul(k, it_cu_dadd(x, cube));
    double th = tanh(a), ch = cosh(a);
    double sech = it_cu_ddiv(1.0, it_cu_dmul(ch, ch));
    double inner = it_cu_dadd(1.0, it_cu_dmul(it_cu_dmul(it_cu_dmul(3.0, 0.044715), x), x));
    double right = it_cu_dmul(it_cu_dmul(it_cu_dmul(it_cu_dmul(x, 0.5), sech), k), inner);
    double local = it_cu_dadd(it_cu_dmul(0.5, it_cu_dadd(1.0, th)), right);
    return it_cu_dmul(local, dy);
}
/* silu = x / (1 + e^-x); backward dy s (1 + x (1 - s)) */
IT_CU_HD static inline double it_cu_silu_f64(double x) { return it_cu_ddiv(x, it_cu_dadd(1.0, exp(-x))); }
IT_CU_HD static inline double it_cu_silu_bwd_f64(double x, double dy) {
    double s = it_cu_ddiv(1.0, it_cu_dadd(1.0, exp(-x)));
    return it_cu_dmul(it_cu_dmul(dy, s), it_cu_dadd(1.0, it_cu_dmul(x, it_cu_dsub(1.0, s))));
}
IT_CU_HD static inline double it_cu_unary_f64(int op, double alpha, double v) {
    switch (op) {
    case IT_UNARY_NEG: return -v;
    case IT_UNARY_SCALE: return it_cu_dmul(alpha, v);
    case IT_UNARY_EXP: return exp(v);
    case IT_UNARY_LOG: return log(v);
    case IT_UNARY_SQRT: return it_cu_dsqrt(v);
    case IT_UNARY_RSQRT: return it_cu_ddiv(1.0, it_cu_dsqrt(v));
    case IT_UNARY_SQUARE: return it_cu_dmul(v, v);
    case IT_UNARY_TANH: return tanh(v);
    case IT_UNARY_GELU: return it_cu_gelu_f64(v);
    case IT_UNARY_SILU: return it_cu_silu_f64(v);
    case IT_UNARY_ADD_SCALAR: return it_cu_dadd(v, alpha);
    case IT_UNARY_RECIP: return it_cu_ddiv(1.0, v);
    default: return v;
    }
}
IT_CU_HD static inline double it_cu_binary_f64(int op, double p, double q) {
    switch (op) {
    case IT_BINARY_ADD: return it_cu_dadd(p, q);
    case IT_BINARY_SUB: return it_cu_dsub(p, q);
    case IT_BINARY_MUL: return it_cu_dmul(p, q);
    case IT_BINARY_DIV: return it_cu_ddiv(p, q);
    case IT_BINARY_MAX: return it_cu_nanmax(p, q);
    case IT_BINARY_MIN: return it_cu_nanmin(p, q);
    case IT_BINARY_GELU_BWD: return it_cu_gelu_bwd_f64(p, q);
    case IT_BINARY_SILU_BWD: return it_cu_silu_bwd_f64(p, q);
    case IT_BINARY_TANH_BWD: return it_cu_dmul(q, it_cu_dsub(1.0, it_cu_dmul(p, p)));
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
IT_CU_HD static inline int64_t it_cu_offset_of(int64_t idx, int nd, const int64_t *shape, const int64_t *strides) {
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
IT_CU_HD static inline it_cu_rnode it_cu_red_rows(const it_cu_red_plan *p, int64_t lo, int64_t hi) {
    it_cu_rnode n;
    n.outer = hi - lo != 1;
    n.a = n.outer ? lo : it_cu_offset_of(lo, p->nr - 1, p->rshape, p->rxs);
    n.b = n.outer ? hi : p->inner;
    return n;
}
IT_CU_HD static inline it_cu_rnode it_cu_red_root(const it_cu_red_plan *p) { return it_cu_red_rows(p, 0, p->nouter); }
IT_CU_HD static inline bool it_cu_red_split(it_cu_rnode n) { return n.outer || n.b > IT_CU_RED_LEAF; }
IT_CU_HD static inline it_cu_rnode it_cu_red_left(const it_cu_red_plan *p, it_cu_rnode n) {
    if (n.outer) return it_cu_red_rows(p, n.a, n.a + (n.b - n.a) / 2);
    int64_t h = n.b / 2;
    h -= h % 8;
    n.b = h;
    return n;
}
IT_CU_HD static inline it_cu_rnode it_cu_red_right(const it_cu_red_plan *p, it_cu_rnode n) {
    if (n.outer) return it_cu_red_rows(p, n.a + (n.b - n.a) / 2, n.b);
    int64_t h = n.b / 2;
    h -= h % 8;
    n.a += h * p->s;
    n.b -= h;
    return n;
}
/* Levels of the deepest path (right halves are never smaller than left ones). */
IT_CU_HD static inline int it_cu_red_depth(const it_cu_red_plan *p) {
    int d = 0;
    for (it_cu_rnode n = it_cu_red_root(p); it_cu_red_split(n); n = it_cu_red_right(p, n)) d++;
    return d;
}

/* it_cu_red_leaf_SFX: a leaf (n <= 128 elements x[0], x[s], ...); it_cu_red_join_SFX;
 * it_cu_red_subtree_SFX: the subtree under `root`, serially, leaves left to right without
 * recursion: bit i of `bits` is the path's direction at depth i (1 = right), stack[i] the
 * finished left child at depth i + 1 (depth <= IT_CU_RED_MAX_DEPTH, checked by the host). */
#define IT_CU_DEF_RED(T, SFX, ADD, MUL, MAX)                                                                           \
    IT_CU_HD static inline T it_cu_red_join_##SFX(T l, T r, int op) {                                                  \
        return op == IT_REDUCE_MAX ? MAX(l, r) : ADD(l, r);                                                            \
    }                                                                                                                  \
    IT_CU_HD static inline T it_cu_red_leaf_##SFX(const T *x, int64_t n, int64_t s, int op) {                          \
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
    IT_CU_HD static inline T it_cu_red_subtree_##SFX(const it_cu_red_plan *p, const T *x, it_cu_rnode root) {          \
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
IT_CU_DEF_RED(float, f32, it_cu_fadd, it_cu_fmul, it_cu_nanmaxf)
IT_CU_DEF_RED(double, f64, it_cu_dadd, it_cu_dmul, it_cu_nanmax)

/* ---------------------------------------------------------------- optimizers (optim.c) */
/* sgd: p = fma(g * gs, -lr, p)   (g * 1 is exact: no branch on grad_scale) */
IT_CU_HD static inline float it_cu_sgd_f32(float p, float g, float gs, float neg_lr) {
    return it_cu_ffma(it_cu_fmul(g, gs), neg_lr, p);
}
IT_CU_HD static inline double it_cu_sgd_f64(double p, double g, double gs, double neg_lr) {
    return it_cu_dfma(it_cu_dmul(g, gs), neg_lr, p);
}

/* Weight-decay modes of one Adam step. */
enum { IT_CU_WD_NONE = 0, IT_CU_WD_DECOUPLED = 1, IT_CU_WD_COUPLED = 2 };

/* The scalars of one Adam step, formed in double on the host as optim.c (torch) forms them:
 * b1, 1-b1, b2, 1-b2, eps, wd, decay = 1 - lr*wd, nss = -(lr / (1 - b1^step)),
 * bc2s = sqrt(1 - b2^step), gs = grad_scale. */
typedef struct it_cu_adam_consts {
    double b1, omb1, b2, omb2, eps, wd, decay, nss, bc2s, gs;
    int mode; /* IT_CU_WD_* */
} it_cu_adam_consts;
/* The same, rounded once to fp32 for the fp32 kernel. */
typedef struct it_cu_adam_f32c {
    float b1, omb1, b2, omb2, eps, wd, decay, nss, bc2s, gs;
    int mode;
} it_cu_adam_f32c;

/* Host only (a plain function under nvcc too): the hyperparameters read as the shortest decimals that round to them
 * (it_f32_as_decimal, as a Python caller wrote them), step >= 1 (the caller checked). */
static inline it_cu_adam_consts it_cu_adam_make(const it_adam_args *a) {
    it_cu_adam_consts c;
    double lr = it_f32_as_decimal(a->lr);
    c.b1 = it_f32_as_decimal(a->beta1);
    c.b2 = it_f32_as_decimal(a->beta2);
    c.eps = it_f32_as_decimal(a->eps);
    c.wd = it_f32_as_decimal(a->weight_decay);
    c.gs = a->grad_scale;
    c.omb1 = 1.0 - c.b1;
    c.omb2 = 1.0 - c.b2;
    c.decay = 1.0 - lr * c.wd;
    double bc1 = 1.0 - pow(c.b1, (double)a->step), bc2 = 1.0 - pow(c.b2, (double)a->step);
    c.nss = -(lr / bc1);
    c.bc2s = sqrt(bc2);
    /* torch 1.13: AdamW always multiplies by 1 - lr*wd; Adam adds wd*p only when wd != 0 */
    c.mode = a->decoupled ? IT_CU_WD_DECOUPLED : c.wd != 0.0 ? IT_CU_WD_COUPLED : IT_CU_WD_NONE;
    return c;
}
static inline it_cu_adam_f32c it_cu_adam_to_f32(const it_cu_adam_consts *c) {
    it_cu_adam_f32c f;
    f.b1 = (float)c->b1, f.omb1 = (float)c->omb1, f.b2 = (float)c->b2, f.omb2 = (float)c->omb2;
    f.eps = (float)c->eps, f.wd = (float)c->wd, f.decay = (float)c->decay, f.nss = (float)c->nss;
    f.bc2s = (float)c->bc2s, f.gs = (float)c->gs, f.mode = c->mode;
    return f;
}

/* One Adam / AdamW element update, optim.c's order:
 *   g = g * gs;  AdamW: p = p * decay (before the moments);  Adam (wd != 0): g = fma(p, wd, g);
 *   m = fma(g, 1-b1, m * b1);  v = v * b2 + ((1-b2) * g) * g;
 *   p = p + (nss * m) / (sqrt(v) / bc2s + eps) */
IT_CU_HD static inline void it_cu_adam_f32(const it_cu_adam_f32c *c, float *p, float gr, float *m, float *v) {
    float g = it_cu_fmul(gr, c->gs);
    float pi = *p;
    if (c->mode == IT_CU_WD_DECOUPLED) pi = it_cu_fmul(pi, c->decay);
    if (c->mode == IT_CU_WD_COUPLED) g = it_cu_ffma(pi, c->wd, g);
    float mi = it_cu_ffma(g, c->omb1, it_cu_fmul(*m, c->b1));
    float vi = it_cu_fadd(it_cu_fmul(*v, c->b2), it_cu_fmul(it_cu_fmul(c->omb2, g), g));
    float denom = it_cu_fadd(it_cu_fdiv(it_cu_fsqrt(vi), c->bc2s), c->eps);
    *m = mi;
    *v = vi;
    *p = it_cu_fadd(pi, it_cu_fdiv(it_cu_fmul(c->nss, mi), denom));
}
IT_CU_HD static inline void it_cu_adam_f64(const it_cu_adam_consts *c, double *p, double gr, double *m, double *v) {
    double g = it_cu_dmul(gr, c->gs);
    double pi = *p;
    if (c->mode == IT_CU_WD_DECOUPLED) pi = it_cu_dmul(pi, c->decay);
    if (c->mode == IT_CU_WD_COUPLED) g = it_cu_dfma(pi, c->wd, g);
    double mi = it_cu_dfma(g, c->omb1, it_cu_dmul(*m, c->b1));
    double vi = it_cu_dadd(it_cu_dmul(*v, c->b2), it_cu_dmul(it_cu_dmul(c->omb2, g), g));
    double denom = it_cu_dadd(it_cu_ddiv(it_cu_dsqrt(vi), c->bc2s), c->eps);
    *m = mi;
    *v = vi;
    *p = it_cu_dadd(pi, it_cu_ddiv(it_cu_dmul(c->nss, mi), denom));
}

/* ---------------------------------------------------------------- cast conversions (cast.c)
 * Every source is read as one of five kinds: b (bool), u (uint64_t), i (int64_t), f (float:
 * bf16, fp16, fp32), d (double); it_cu_to_<dst>_<kind> converts a kind to dst's storage. */

/* fp16 -> fp32, exact (NaN made quiet, payload kept) */
IT_CU_HD static inline float it_cu_half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13) | (man ? 0x00400000u : 0u);
    } else if (exp != 0) {
        bits = sign | ((exp + (127 - 15)) << 23) | (man << 13);
    } else if (man == 0) {
        bits = sign;
    } else {
        int p = it_cu_highest_bit64(man);
        bits = sign | ((uint32_t)(p + 103) << 23) | ((man << (23 - p)) & 0x7fffffu);
    }
    return it_cu_bits_f32(bits);
}
/* fp32 -> fp16, round to nearest even (NaN quiet, sign and top payload kept) */
IT_CU_HD static inline uint16_t it_cu_float_to_half(float f) {
    uint32_t x = it_cu_f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);
    if (ax >= 0x38800000u) {
        uint32_t r = ax - ((uint32_t)(127 - 15) << 23);
        r += 0x0fffu + ((r >> 13) & 1u);
        return (uint16_t)(sign | (r >> 13));
    }
    if (ax <= 0x33000000u) return sign;
    uint32_t e = ax >> 23;
    uint32_t m = (ax & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - e;
    uint32_t q = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1u);
    uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (q & 1u))) q++;
    return (uint16_t)(sign | q);
}
/* bf16 -> fp32, exact (NaN made quiet) */
IT_CU_HD static inline float it_cu_bfloat_to_float(uint16_t b) {
    uint32_t bits = (uint32_t)b << 16;
    if ((bits & 0x7fffffffu) > 0x7f800000u) bits |= 0x00400000u;
    return it_cu_bits_f32(bits);
}
/* fp32 -> bf16, round to nearest even */
IT_CU_HD static inline uint16_t it_cu_float_to_bfloat(float f) {
    uint32_t x = it_cu_f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x0040u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}
/* fp64 -> a format with ebits / mbits (fp16 5/10, bf16 8/7), one rounding to nearest even */
IT_CU_HD static inline uint16_t it_cu_double_to_small(double d, int ebits, int mbits) {
    const uint64_t man_mask = ((uint64_t)1 << 52) - 1;
    const int bias = (1 << (ebits - 1)) - 1;
    const uint32_t inf = ((1u << ebits) - 1u) << mbits;
    uint64_t x = it_cu_f64_bits(d);
    uint32_t sign = (uint32_t)(x >> 48) & 0x8000u;
    uint64_t ax = x & ~((uint64_t)1 << 63);
    if (ax > (uint64_t)0x7ff0000000000000ull)
        return (uint16_t)(sign | inf | (1u << (mbits - 1)) | (uint32_t)((ax >> (52 - mbits)) & ((1u << mbits) - 1u)));
    int te = (int)(ax >> 52) - 1023 + bias;
    if (te >= (1 << ebits) - 1) return (uint16_t)(sign | inf);
    if (te >= 1) {
        const int shift = 52 - mbits;
        uint64_t r = ((uint64_t)te << 52) | (ax & man_mask);
        r += ((uint64_t)1 << (shift - 1)) - 1 + ((r >> shift) & 1u);
        return (uint16_t)(sign | (uint32_t)(r >> shift));
    }
    int shift = 53 - mbits - te;
    if (shift >= 54 || (ax >> 52) == 0) return (uint16_t)sign;
    uint64_t m = (ax & man_mask) | ((uint64_t)1 << 52);
    uint64_t q = m >> shift;
    uint64_t rem = m & (((uint64_t)1 << shift) - 1);
    uint64_t halfway = (uint64_t)1 << (shift - 1);
    if (rem > halfway || (rem == halfway && (q & 1u))) q++;
    return (uint16_t)(sign | (uint32_t)q);
}
/* an integer magnitude with its sign -> bf16, one rounding (round to odd at 24 bits first) */
IT_CU_HD static inline uint16_t it_cu_int_to_bfloat(uint64_t mag, int negative) {
    uint32_t bits;
    if (mag < ((uint64_t)1 << 24)) {
        bits = it_cu_f32_bits((float)(uint32_t)mag);
    } else {
        int shift = it_cu_highest_bit64(mag) - 23;
        uint64_t top = mag >> shift;
        if (mag & (((uint64_t)1 << shift) - 1)) top |= 1u;
        bits = ((uint32_t)(127 + 23 + shift) << 23) | ((uint32_t)top & 0x7fffffu);
    }
    if (negative) bits |= 0x80000000u;
    return it_cu_float_to_bfloat(it_cu_bits_f32(bits));
}
/* fp64 -> fp32 and back as x86's cvtsd2ss / cvtss2sd (the CPU's C conversions): finite
 * values rounded to nearest (overflow to Inf); NaN quiet with the top payload bits kept,
 * spelled out so that the device does not return its canonical NaN instead. */
IT_CU_HD static inline float it_cu_d2f(double v) {
    if (v == v) return (float)v;
    uint64_t b = it_cu_f64_bits(v);
    return it_cu_bits_f32((uint32_t)(b >> 32 & 0x80000000u) | 0x7fc00000u | (uint32_t)((b >> 29) & 0x7fffffu));
}
IT_CU_HD static inline double it_cu_f2d(float v) {
    if (v == v) return (double)v;
    uint32_t b = it_cu_f32_bits(v);
    return it_cu_bits_f64((uint64_t)(b & 0x80000000u) << 32 | 0x7ff8000000000000ull | (uint64_t)(b & 0x7fffffu) << 29);
}

/* loads: storage -> kind */
IT_CU_HD static inline bool it_cu_ld_boolean(uint8_t v) { return v != 0; }
IT_CU_HD static inline uint64_t it_cu_ld_u8(uint8_t v) { return v; }
IT_CU_HD static inline int64_t it_cu_ld_i8(int8_t v) { return v; }
IT_CU_HD static inline uint64_t it_cu_ld_u16(uint16_t v) { return v; }
IT_CU_HD static inline int64_t it_cu_ld_i16(int16_t v) { return v; }
IT_CU_HD static inline uint64_t it_cu_ld_u32(uint32_t v) { return v; }
IT_CU_HD static inline int64_t it_cu_ld_i32(int32_t v) { return v; }
IT_CU_HD static inline uint64_t it_cu_ld_u64(uint64_t v) { return v; }
IT_CU_HD static inline int64_t it_cu_ld_i64(int64_t v) { return v; }
IT_CU_HD static inline float it_cu_ld_bf16(uint16_t v) { return it_cu_bfloat_to_float(v); }
IT_CU_HD static inline float it_cu_ld_fp16(uint16_t v) { return it_cu_half_to_float(v); }
IT_CU_HD static inline float it_cu_ld_fp32(float v) { return v; }
IT_CU_HD static inline double it_cu_ld_fp64(double v) { return v; }

/* two's complement reinterpretation of the low bits, without out-of-range conversions */
IT_CU_HD static inline int8_t it_cu_wrap_i8(uint64_t u) {
    uint8_t v = (uint8_t)u;
    return v <= INT8_MAX ? (int8_t)v : (int8_t)((int)v - 256);
}
IT_CU_HD static inline int16_t it_cu_wrap_i16(uint64_t u) {
    uint16_t v = (uint16_t)u;
    return v <= INT16_MAX ? (int16_t)v : (int16_t)((int32_t)v - 65536);
}
IT_CU_HD static inline int32_t it_cu_wrap_i32(uint64_t u) {
    uint32_t v = (uint32_t)u;
    return v <= (uint32_t)INT32_MAX ? (int32_t)v : (int32_t)(v - 0x80000000u) + INT32_MIN;
}
IT_CU_HD static inline int64_t it_cu_wrap_i64(uint64_t u) {
    return u <= (uint64_t)INT64_MAX ? (int64_t)u : (int64_t)(u - 0x8000000000000000ull) + INT64_MIN;
}

/* unsigned targets, HI1 = 2^bits: a float is converted by C only inside (-1, 2^bits); NaN -> 0 */
#define IT_CU_UINT_CONVS(N, T, TMAX, HI1)                                                                              \
    IT_CU_HD static inline T it_cu_to_##N##_b(bool v) { return (T)v; }                                                 \
    IT_CU_HD static inline T it_cu_to_##N##_u(uint64_t v) { return (T)v; }                                             \
    IT_CU_HD static inline T it_cu_to_##N##_i(int64_t v) { return (T)(uint64_t)v; }                                    \
    IT_CU_HD static inline T it_cu_to_##N##_f(float v) { return v > -1.0f ? (v < (float)(HI1) ? (T)v : (TMAX)) : 0; }  \
    IT_CU_HD static inline T it_cu_to_##N##_d(double v) { return v > -1.0 ? (v < (HI1) ? (T)v : (TMAX)) : 0; }
/* signed targets, range [TMIN, -TMIN): saturate outside, NaN -> 0 */
#define IT_CU_SINT_CONVS(N, T, TMIN, TMAX, WRAP)                                                                       \
    IT_CU_HD static inline T it_cu_to_##N##_b(bool v) { return (T)v; }                                                 \
    IT_CU_HD static inline T it_cu_to_##N##_u(uint64_t v) { return WRAP(v); }                                          \
    IT_CU_HD static inline T it_cu_to_##N##_i(int64_t v) { return WRAP((uint64_t)v); }                                 \
    IT_CU_HD static inline T it_cu_to_##N##_f(float v) {                                                               \
        return v != v ? 0 : v >= -(float)(TMIN) ? (TMAX) : v < (float)(TMIN) ? (TMIN) : (T)v;                          \
    }                                                                                                                  \
    IT_CU_HD static inline T it_cu_to_##N##_d(double v) {                                                              \
        return v != v ? 0 : v >= -(double)(TMIN) ? (TMAX) : v < (double)(TMIN) ? (TMIN) : (T)v;                        \
    }

IT_CU_HD static inline uint8_t it_cu_to_boolean_b(bool v) { return v; }
IT_CU_HD static inline uint8_t it_cu_to_boolean_u(uint64_t v) { return v != 0; }
IT_CU_HD static inline uint8_t it_cu_to_boolean_i(int64_t v) { return v != 0; }
IT_CU_HD static inline uint8_t it_cu_to_boolean_f(float v) { return v != 0.0f; } /* NaN -> 1 */
IT_CU_HD static inline uint8_t it_cu_to_boolean_d(double v) { return v != 0.0; }

IT_CU_UINT_CONVS(u8, uint8_t, UINT8_MAX, 256.0)
IT_CU_SINT_CONVS(i8, int8_t, INT8_MIN, INT8_MAX, it_cu_wrap_i8)
IT_CU_UINT_CONVS(u16, uint16_t, UINT16_MAX, 65536.0)
IT_CU_SINT_CONVS(i16, int16_t, INT16_MIN, INT16_MAX, it_cu_wrap_i16)
IT_CU_UINT_CONVS(u32, uint32_t, UINT32_MAX, 4294967296.0)
IT_CU_SINT_CONVS(i32, int32_t, INT32_MIN, INT32_MAX, it_cu_wrap_i32)
IT_CU_UINT_CONVS(u64, uint64_t, UINT64_MAX, 18446744073709551616.0)
IT_CU_SINT_CONVS(i64, int64_t, INT64_MIN, INT64_MAX, it_cu_wrap_i64)

/* bf16: 64-bit integers rounded once (it_cu_int_to_bfloat) */
IT_CU_HD static inline uint16_t it_cu_to_bf16_b(bool v) { return v ? 0x3f80u : 0u; }
IT_CU_HD static inline uint16_t it_cu_to_bf16_u(uint64_t v) { return it_cu_int_to_bfloat(v, 0); }
IT_CU_HD static inline uint16_t it_cu_to_bf16_i(int64_t v) {
    return it_cu_int_to_bfloat(v < 0 ? 0 - (uint64_t)v : (uint64_t)v, v < 0);
}
IT_CU_HD static inline uint16_t it_cu_to_bf16_f(float v) { return it_cu_float_to_bfloat(v); }
IT_CU_HD static inline uint16_t it_cu_to_bf16_d(double v) { return it_cu_double_to_small(v, 8, 7); }
/* fp16: integers through fp32 (exact below 65520, Inf from there either way) */
IT_CU_HD static inline uint16_t it_cu_to_fp16_b(bool v) { return v ? 0x3c00u : 0u; }
IT_CU_HD static inline uint16_t it_cu_to_fp16_u(uint64_t v) { return it_cu_float_to_half((float)v); }
IT_CU_HD static inline uint16_t it_cu_to_fp16_i(int64_t v) { return it_cu_float_to_half((float)v); }
IT_CU_HD static inline uint16_t it_cu_to_fp16_f(float v) { return it_cu_float_to_half(v); }
IT_CU_HD static inline uint16_t it_cu_to_fp16_d(double v) { return it_cu_double_to_small(v, 5, 10); }
/* fp32, fp64: C's conversions (integers rounded to nearest even) */
IT_CU_HD static inline float it_cu_to_fp32_b(bool v) { return v ? 1.0f : 0.0f; }
IT_CU_HD static inline float it_cu_to_fp32_u(uint64_t v) { return (float)v; }
IT_CU_HD static inline float it_cu_to_fp32_i(int64_t v) { return (float)v; }
IT_CU_HD static inline float it_cu_to_fp32_f(float v) { return v; }
IT_CU_HD static inline float it_cu_to_fp32_d(double v) { return it_cu_d2f(v); }
IT_CU_HD static inline double it_cu_to_fp64_b(bool v) { return v ? 1.0 : 0.0; }
IT_CU_HD static inline double it_cu_to_fp64_u(uint64_t v) { return (double)v; }
IT_CU_HD static inline double it_cu_to_fp64_i(int64_t v) { return (double)v; }
IT_CU_HD static inline double it_cu_to_fp64_f(float v) { return it_cu_f2d(v); }
IT_CU_HD static inline double it_cu_to_fp64_d(double v) { return v; }

/* The 13 dtypes in enum order: X(name, enum, storage type, kind, extra...). Two copies, so
 * that one list can expand the other ("boolean": the token bool is a macro in C). */
#define IT_CU_FOR_SRC(X, ...)                                                                                          \
    X(boolean, IT_DTYPE_BOOL, uint8_t, b, __VA_ARGS__)                                                                 \
    X(u8, IT_DTYPE_U8, uint8_t, u, __VA_ARGS__)                                                                        \
    X(i8, IT_DTYPE_I8, int8_t, i, __VA_ARGS__)                                                                         \
    X(u16, IT_DTYPE_U16, uint16_t, u, __VA_ARGS__)                                                                     \
    X(i16, IT_DTYPE_I16, int16_t, i, __VA_ARGS__)                                                                      \
    X(u32, IT_DTYPE_U32, uint32_t, u, __VA_ARGS__)                                                                     \
    X(i32, IT_DTYPE_I32, int32_t, i, __VA_ARGS__)                                                                      \
    X(u64, IT_DTYPE_U64, uint64_t, u, __VA_ARGS__)                                                                     \
    X(i64, IT_DTYPE_I64, int64_t, i, __VA_ARGS__)                                                                      \
    X(bf16, IT_DTYPE_BF16, uint16_t, f, __VA_ARGS__)                                                                   \
    X(fp16, IT_DTYPE_FP16, uint16_t, f, __VA_ARGS__)                                                                   \
    X(fp32, IT_DTYPE_FP32, float, f, __VA_ARGS__)                                                                      \
    X(fp64, IT_DTYPE_FP64, double, d, __VA_ARGS__)
#define IT_CU_FOR_DST(X, ...)                                                                                          \
    X(boolean, IT_DTYPE_BOOL, uint8_t, b, __VA_ARGS__)                                                                 \
    X(u8, IT_DTYPE_U8, uint8_t, u, __VA_ARGS__)                                                                        \
    X(i8, IT_DTYPE_I8, int8_t, i, __VA_ARGS__)                                                                         \
    X(u16, IT_DTYPE_U16, uint16_t, u, __VA_ARGS__)                                                                     \
    X(i16, IT_DTYPE_I16, int16_t, i, __VA_ARGS__)                                                                      \
    X(u32, IT_DTYPE_U32, uint32_t, u, __VA_ARGS__)                                                                     \
    X(i32, IT_DTYPE_I32, int32_t, i, __VA_ARGS__)                                                                      \
    X(u64, IT_DTYPE_U64, uint64_t, u, __VA_ARGS__)                                                                     \
    X(i64, IT_DTYPE_I64, int64_t, i, __VA_ARGS__)                                                                      \
    X(bf16, IT_DTYPE_BF16, uint16_t, f, __VA_ARGS__)                                                                   \
    X(fp16, IT_DTYPE_FP16, uint16_t, f, __VA_ARGS__)                                                                   \
    X(fp32, IT_DTYPE_FP32, float, f, __VA_ARGS__)                                                                      \
    X(fp64, IT_DTYPE_FP64, double, d, __VA_ARGS__)

/* it_cu_cvt_<src>_<dst>(x): one element of cast(), src storage -> dst storage. */
#define IT_CU_DEF_CVT(SN, SE, ST, SK, DN, DT, DK)                                                                      \
    IT_CU_HD static inline DT it_cu_cvt_##SN##_##DN(ST x) { return it_cu_to_##DN##_##SK(it_cu_ld_##SN(x)); }
#define IT_CU_DEF_CVTS_TO(DN, DE, DT, DK, unused) IT_CU_FOR_SRC(IT_CU_DEF_CVT, DN, DT, DK)
IT_CU_FOR_DST(IT_CU_DEF_CVTS_TO, 0)

#endif
