/* Scalar math shared by the elementwise, reduce, cross-entropy and optimizer BANG kernels
 * (elementwise.mlu, reduce.mlu, crossentropy.mlu, optim.mlu), written so that it is also
 * plain C11: tests/unit/test_mlu_host.c compiles it on the host and checks it against the CPU
 * backend bit for bit. A .mlu file defines IT_BANG_FN as __mlu_func__ before including it;
 * elsewhere the functions are static inline.
 *
 * Everything is IEEE single-precision + - * / and integer bit moves, transcribed from
 * backends/cpu (cpu_util.h's vexpf / vtanhf_s / vtanhf, elementwise.c's gelu / silu /
 * backward terms, NaN-propagating max / min, the reduce tree) and from
 * include/infinitrain/scalar/it_scalar_adam.h (the Adam / SGD element order). They stay
 * copies rather than include that text because cncc cannot be run where this project is
 * built: test_mlu_host.c compares every one with the CPU or the shared version over 2^21
 * random inputs (2^20 per Adam case), bit for bit. So the
 * device gives the CPU's bits provided that (TO CONFIRM on hardware, it-conformance):
 *   - the MLU scalar unit rounds + - * / to nearest even, with no flush of subnormals;
 *   - cncc honours `#pragma STDC FP_CONTRACT OFF` (each .mlu sets it): no product is fused;
 *   - IT_BANG_FMA (the .mlu files map it to __builtin_fmaf) is one correctly rounded fused
 *     multiply-add on the device, as fmaf on the host (optim's add-with-alpha and Adam's
 *     first moment use it, as torch's CPU kernels do).
 * The two exceptions: log is Cephes' logf in plain arithmetic (within 1 ulp of the CPU's libm
 * logf, not bitwise), and sqrt is the caller's (__bang_sqrt over NRAM: correct rounding TO
 * CONFIRM); functions that need sqrt take it as an argument. */
#ifndef IT_BANG_MATH_H
#define IT_BANG_MATH_H

#include "it_bang.h" /* it_bang_adam_coef */

#ifndef IT_BANG_FN
#define IT_BANG_FN static inline
#endif
#ifndef IT_BANG_FMA
#include <math.h>
#define IT_BANG_FMA(a, b, c) fmaf((a), (b), (c))
#endif

/* Op codes: the values of it_unary_op / it_binary_op / it_reduce_op in backend.h (the .mlu
 * files do not include it; kernels_ew.c and the unit test assert the equality). */
enum {
    IT_BANG_UNARY_NEG = 0,
    IT_BANG_UNARY_SCALE = 1,
    IT_BANG_UNARY_EXP = 2,
    IT_BANG_UNARY_LOG = 3,
    IT_BANG_UNARY_SQRT = 4,
    IT_BANG_UNARY_RSQRT = 5,
    IT_BANG_UNARY_SQUARE = 6,
    IT_BANG_UNARY_TANH = 7,
    IT_BANG_UNARY_GELU = 8,
    IT_BANG_UNARY_SILU = 9,
    IT_BANG_UNARY_ADD_SCALAR = 10,
    IT_BANG_UNARY_RECIP = 11,
    IT_BANG_UNARY_COUNT = 12
};
enum {
    IT_BANG_BINARY_ADD = 0,
    IT_BANG_BINARY_SUB = 1,
    IT_BANG_BINARY_MUL = 2,
    IT_BANG_BINARY_DIV = 3,
    IT_BANG_BINARY_MAX = 4,
    IT_BANG_BINARY_MIN = 5,
    IT_BANG_BINARY_GELU_BWD = 6,
    IT_BANG_BINARY_SILU_BWD = 7,
    IT_BANG_BINARY_TANH_BWD = 8,
    IT_BANG_BINARY_COUNT = 9
};
enum { IT_BANG_REDUCE_SUM = 0, IT_BANG_REDUCE_MEAN = 1, IT_BANG_REDUCE_MAX = 2, IT_BANG_REDUCE_SUMSQ = 3 };

/* ---------------------------------------------------------------- bits */
typedef union it_bang_f32bits {
    float f;
    int32_t i;
} it_bang_f32bits;
IT_BANG_FN float it_bang_bits_to_f32(int32_t i) {
    it_bang_f32bits u;
    u.i = i;
    return u.f;
}
IT_BANG_FN int32_t it_bang_f32_to_bits(float f) {
    it_bang_f32bits u;
    u.f = f;
    return u.i;
}
IT_BANG_FN float it_bang_fabsf(float x) { return it_bang_bits_to_f32(it_bang_f32_to_bits(x) & 0x7fffffff); }

/* ---------------------------------------------------------------- exp, tanh, log
 * exp: cpu_util.h's vexpf, term for term (Cody-Waite reduction, Cephes degree-6 polynomial,
 * 2^k as two exponent-field factors), and vexpf_normal (one factor, for [-87, 88]).
 * tanh: vtanhf_s / vtanhf. */
IT_BANG_FN float it_bang_exp_reduced(float x, float *k) { /* cpu_util.h's exp_reduced */
    float kk = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
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
IT_BANG_FN float it_bang_expf(float x) {
    float xc = x > 89.0f ? 89.0f : x;
    xc = xc < -104.0f ? -104.0f : xc;
    xc = x == x ? xc : 0.0f;
    float k;
    float e = it_bang_exp_reduced(xc, &k);
    int32_t ki = (int32_t)k, k1 = ki / 2, k2 = ki - k1;
    float y = e * it_bang_bits_to_f32((k1 + 127) << 23) * it_bang_bits_to_f32((k2 + 127) << 23);
    return x == x ? y : x;
}
IT_BANG_FN float it_bang_expf_normal(float x) { /* vexpf_normal: x in [-87, 88] */
    float k;
    float e = it_bang_exp_reduced(x, &k);
    return e * it_bang_bits_to_f32(((int32_t)k + 127) << 23);
}
IT_BANG_FN float it_bang_tanhf_s(float x, float s) {
    float big = 1.0f - 2.0f / (s + 1.0f);
    big = x < 0.0f ? -big : big;
    float z = x * x;
    float small =
        ((((-5.70498872745e-3f * z + 2.06390887954e-2f) * z - 5.37397155531e-2f) * z + 1.33314422036e-1f) * z -
         3.33332819422e-1f) *
            z * x +
        x;
    return it_bang_fabsf(x) < 0.625f ? small : big;
}
IT_BANG_FN float it_bang_tanhf(float x) { return it_bang_tanhf_s(x, it_bang_expf(2.0f * it_bang_fabsf(x))); }

/* log: Cephes logf. x = 2^e * m, m in [sqrt(1/2), sqrt(2)); log(m) by the degree-9
 * polynomial in f = m - 1; e * ln2 added in two parts. Subnormals are scaled by 2^25 first.
 * log(0) = -inf, log(<0) = NaN, log(inf) = inf, NaN stays NaN. Within 1 ulp of libm. */
IT_BANG_FN float it_bang_logf(float x) {
    if (!(x == x)) return x;
    if (x < 0.0f) return it_bang_bits_to_f32(0x7fc00000);
    if (x == 0.0f) return it_bang_bits_to_f32((int32_t)0xff800000);
    if (x > 3.40282347e38f) return x;
    int32_t bits = it_bang_f32_to_bits(x), e = 0;
    if (bits < 0x00800000) { /* subnormal */
        x = x * 33554432.0f; /* 2^25 */
        bits = it_bang_f32_to_bits(x);
        e = -25;
    }
    e += ((bits >> 23) & 0xff) - 126;
    float m = it_bang_bits_to_f32((bits & 0x007fffff) | 0x3f000000); /* [0.5, 1) */
    float f;
    if (m < 0.707106781186547524f) {
        e -= 1;
        f = m + m - 1.0f;
    } else {
        f = m - 1.0f;
    }
    float z = f * f;
    float y = 7.0376836292e-2f;
    y = y * f - 1.1514610310e-1f;
    y = y * f + 1.1676998740e-1f;
    y = y * f - 1.2420140846e-1f;
    y = y * f + 1.4249322787e-1f;
    y = y * f - 1.6668057665e-1f;
    y = y * f + 2.0000714765e-1f;
    y = y * f - 2.4999993993e-1f;
    y = y * f + 3.3333331174e-1f;
    y = y * f * z;
    float fe = (float)e;
    y = y + -2.12194440e-4f * fe;
    y = y + -0.5f * z;
    float r = f + y;
    return r + 0.693359375f * fe;
}

/* ---------------------------------------------------------------- activations (elementwise.c) */
#define IT_BANG_GELU_K 0.79788452386856079f          /* sqrtf((float)(2.0 / M_PI)), as elementwise.c forms it */
IT_BANG_FN float it_bang_gelu_z(float x, float x2) { /* -2u */
    return -2.0f * IT_BANG_GELU_K * (x + 0.044715f * x2 * x);
}
IT_BANG_FN float it_bang_clamp_z(float z) { /* into [-87, 88]; NaN -> 0 */
    z = z > 88.0f ? 88.0f : z;
    z = z < -87.0f ? -87.0f : z;
    return z == z ? z : 0.0f;
}
/* x s, s = 1 / (1 + e^(-2u)): elementwise.c's form and edges (see there) */
IT_BANG_FN float it_bang_gelu(float x) {
    float z = it_bang_gelu_z(x, x * x);
    float y = x / (1.0f + it_bang_expf_normal(it_bang_clamp_z(z)));
    return z > 88.0f ? x * 0.0f : y;
}
/* s (1 + 2 x u' e s); NaN at +-inf */
IT_BANG_FN float it_bang_gelu_bwd(float x, float dy) {
    float x2 = x * x, z = it_bang_gelu_z(x, x2), zc = it_bang_clamp_z(z);
    float e = it_bang_expf_normal(zc);
    float s = 1.0f / (1.0f + e);
    float du = IT_BANG_GELU_K * (1.0f + 3.0f * 0.044715f * x2);
    float t = zc == z ? 2.0f * x * du * (e * s) : 0.0f;
    float g = s * (1.0f + t);
    return x - x == 0.0f ? g * dy : x - x;
}
IT_BANG_FN float it_bang_silu(float x) { return x / (1.0f + it_bang_expf(-x)); }
IT_BANG_FN float it_bang_silu_bwd(float x, float dy) {
    float s = 1.0f / (1.0f + it_bang_expf(-x));
    return dy * s * (1.0f + x * (1.0f - s));
}
/* max / min propagating NaN from either side (torch.maximum / torch.minimum) */
IT_BANG_FN float it_bang_nanmax(float p, float q) { return (p > q || p != p) ? p : q; }
IT_BANG_FN float it_bang_nanmin(float p, float q) { return (p < q || p != p) ? p : q; }

/* y = f(v) for every unary op. SQRT and RSQRT take v = sqrt(x), computed by the caller
 * (__bang_sqrt over the NRAM buffer on the device): SQRT returns it, RSQRT returns 1 / it. */
IT_BANG_FN float it_bang_unary(int op, float alpha, float v) {
    switch (op) {
    case IT_BANG_UNARY_NEG: return -v;
    case IT_BANG_UNARY_SCALE: return alpha * v;
    case IT_BANG_UNARY_EXP: return it_bang_expf(v);
    case IT_BANG_UNARY_LOG: return it_bang_logf(v);
    case IT_BANG_UNARY_SQRT: return v;
    case IT_BANG_UNARY_RSQRT: return 1.0f / v;
    case IT_BANG_UNARY_SQUARE: return v * v;
    case IT_BANG_UNARY_TANH: return it_bang_tanhf(v);
    case IT_BANG_UNARY_GELU: return it_bang_gelu(v);
    case IT_BANG_UNARY_SILU: return it_bang_silu(v);
    case IT_BANG_UNARY_ADD_SCALAR: return v + alpha;
    case IT_BANG_UNARY_RECIP: return 1.0f / v;
    default: return v;
    }
}
/* out = f(p, q); for the backward ops p is the forward input (output for TANH_BWD), q = dy. */
IT_BANG_FN float it_bang_binary(int op, float p, float q) {
    switch (op) {
    case IT_BANG_BINARY_ADD: return p + q;
    case IT_BANG_BINARY_SUB: return p - q;
    case IT_BANG_BINARY_MUL: return p * q;
    case IT_BANG_BINARY_DIV: return p / q;
    case IT_BANG_BINARY_MAX: return it_bang_nanmax(p, q);
    case IT_BANG_BINARY_MIN: return it_bang_nanmin(p, q);
    case IT_BANG_BINARY_GELU_BWD: return it_bang_gelu_bwd(p, q);
    case IT_BANG_BINARY_SILU_BWD: return it_bang_silu_bwd(p, q);
    case IT_BANG_BINARY_TANH_BWD: return q * (1.0f - p * p);
    default: return p;
    }
}

/* ---------------------------------------------------------------- the reduce tree (elementwise.c)
 * A sum of n elements is the CPU's pairwise tree: n <= 128 is a leaf (it_bang_leaf); larger n
 * splits at h = n/2 rounded down to a multiple of 8, joined as left + right (max for MAX).
 * Kernels cannot recurse, so the tree is walked by a state machine: it_bang_tree_step returns
 * the next action on value slots indexed by depth (the caller keeps one value, or one vector
 * of column values, per slot):
 *   IT_BANG_TREE_LEAF  slot[d] = leaf over elements [lo, lo + cnt)
 *   IT_BANG_TREE_MOVE  slot[d] = slot[d + 1]          (a left half is done)
 *   IT_BANG_TREE_JOIN  slot[d] = join(slot[d], slot[d + 1])
 *   IT_BANG_TREE_DONE  the result is in slot[0]
 * Leaves come in increasing lo, so a kernel may stream the data through a window. */
#define IT_BANG_TREE_DEPTH 64 /* n halves per level from 2^63 down to 128: < 57 levels */
#define IT_BANG_LEAF 128
enum { IT_BANG_TREE_LEAF = 0, IT_BANG_TREE_MOVE = 1, IT_BANG_TREE_JOIN = 2, IT_BANG_TREE_DONE = 3 };
typedef struct it_bang_tree {
    int sp;
    int state[IT_BANG_TREE_DEPTH];
    int64_t lo[IT_BANG_TREE_DEPTH], n[IT_BANG_TREE_DEPTH];
} it_bang_tree;

IT_BANG_FN void it_bang_tree_init(it_bang_tree *t, int64_t n) {
    t->sp = 1;
    t->state[0] = 0;
    t->lo[0] = 0;
    t->n[0] = n;
}
IT_BANG_FN int it_bang_tree_step(it_bang_tree *t, int *d, int64_t *lo, int64_t *cnt) {
    while (t->sp > 0) {
        int k = t->sp - 1;
        *d = k;
        if (t->n[k] <= IT_BANG_LEAF) {
            t->sp--;
            *lo = t->lo[k];
            *cnt = t->n[k];
            return IT_BANG_TREE_LEAF;
        }
        int64_t h = t->n[k] / 2;
        h -= h % 8;
        if (t->state[k] == 0) { /* descend left */
            t->state[k] = 1;
            t->state[k + 1] = 0, t->lo[k + 1] = t->lo[k], t->n[k + 1] = h;
            t->sp++;
            continue;
        }
        if (t->state[k] == 1) { /* left done: keep it, descend right */
            t->state[k] = 2;
            t->state[k + 1] = 0, t->lo[k + 1] = t->lo[k] + h, t->n[k + 1] = t->n[k] - h;
            t->sp++;
            return IT_BANG_TREE_MOVE;
        }
        t->sp--; /* both halves done */
        return IT_BANG_TREE_JOIN;
    }
    return IT_BANG_TREE_DONE;
}

/* A leaf of n <= 128 elements x[0], x[s], ...: MAX is a running NaN-propagating max from
 * -inf; SUM / SUMSQ (term v or v*v) use 8 interleaved lanes (lane j takes j, j+8, ...),
 * combined ((r0+r1)+(r2+r3))+((r4+r5)+(r6+r7)), then the n % 8 tail in order; n < 8 is a
 * plain loop from 0. MEAN is summed as SUM (the caller divides). */
IT_BANG_FN float it_bang_leaf(const float *x, int64_t n, int64_t s, int op) {
    if (op == IT_BANG_REDUCE_MAX) {
        float m = -it_bang_bits_to_f32(0x7f800000);
        for (int64_t i = 0; i < n; i++) m = it_bang_nanmax(x[i * s], m);
        return m;
    }
    int sq = op == IT_BANG_REDUCE_SUMSQ;
    float res = 0.0f;
    int64_t i = 0;
    if (n >= 8) {
        float r[8];
        for (int j = 0; j < 8; j++) {
            float v = x[j * s];
            r[j] = sq ? v * v : v;
        }
        for (i = 8; i + 8 <= n; i += 8)
            for (int j = 0; j < 8; j++) {
                float v = x[(i + j) * s];
                r[j] += sq ? v * v : v;
            }
        res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    }
    for (; i < n; i++) {
        float v = x[i * s];
        res += sq ? v * v : v;
    }
    return res;
}
IT_BANG_FN float it_bang_join(float l, float r, int op) {
    return op == IT_BANG_REDUCE_MAX ? it_bang_nanmax(l, r) : l + r;
}

/* ---------------------------------------------------------------- optimizers (it_scalar_adam.h)
 * The per-step scalars (it_bang_adam_coef, it_bang.h) are formed on the host by
 * it_sc_adam_make (mlu_adam_coef, host_ew.c). */
/* sgd: p = fma(g * gs, -lr, p)  (g * 1 is exact: no branch on grad_scale) */
IT_BANG_FN float it_bang_sgd_elem(float p, float g, float gs, float neg_lr) { return IT_BANG_FMA(g * gs, neg_lr, p); }

/* Adam / AdamW, first half, operation by operation as it_sc_adam_f32 (torch 1.13):
 *   g = g * gs;  AdamW: p = p * decay (decay = 1 - lr*wd, BEFORE the moments);
 *   Adam with wd != 0: g = fma(p, wd, g)   (L2, coupled);
 *   m = fma(g, 1-b1, m * b1);  v = v * b2 + ((1-b2) * g) * g
 * The caller then takes sq = sqrt(v) (__bang_sqrt) and calls it_bang_adam_param. */
IT_BANG_FN void it_bang_adam_moments(const it_bang_adam_coef *c, float *p, float gr, float *m, float *v) {
    float g = gr * c->gs;
    float pi = *p;
    if (c->mode == IT_BANG_WD_DECOUPLED) pi = pi * c->decay;
    if (c->mode == IT_BANG_WD_COUPLED) g = IT_BANG_FMA(pi, c->wd, g);
    *m = IT_BANG_FMA(g, c->omb1, *m * c->b1);
    *v = *v * c->b2 + (c->omb2 * g) * g;
    *p = pi;
}
/* Second half: denom = sqrt(v) / sqrt(1 - b2^step) + eps  (eps added AFTER the bias
 * correction of sqrt(v), as torch);  p = p + ((-lr / (1 - b1^step)) * m) / denom. */
IT_BANG_FN float it_bang_adam_param(const it_bang_adam_coef *c, float p, float m, float sqrt_v) {
    float denom = sqrt_v / c->bc2s + c->eps;
    return p + (c->nss * m) / denom;
}

#endif
