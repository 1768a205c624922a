/* Optimizer steps on contiguous flat tensors of equal length (any shape, row-major
 * contiguous).
 *
 *   sgd:   g = g * grad_scale;  p = p + (-lr) * g        (g * 1 is exact: no scaling)
 *   adam:  torch 1.13's _single_tensor_adam / _single_tensor_adamw, operation by operation:
 *          g = g * grad_scale                              (clip_grad_norm_'s g.mul_(coef))
 *          AdamW: p = p * (1 - lr*wd)                      param.mul_(1 - lr * weight_decay)
 *          Adam:  g = g + wd * p   (only when wd != 0)     grad.add(param, alpha=wd)
 *          m = (m * b1) + (1-b1) * g                       exp_avg.mul_(b1).add_(g, alpha=1-b1)
 *          v = (v * b2) + ((1-b2) * g) * g                 exp_avg_sq.mul_(b2).addcmul_(g, g, value=1-b2)
 *          denom = sqrt(v) / sqrt(1 - b2^step) + eps       (exp_avg_sq.sqrt() / bc2_sqrt).add_(eps)
 *          p = p + ((-lr / (1 - b1^step)) * m) / denom     param.addcdiv_(m, denom, value=-step_size)
 *
 * Scalars are formed as torch forms them: in double (Python floats), then rounded once to
 * the tensor's type. `x + alpha * y` (add_ with alpha) is one fused multiply-add, as
 * torch's vectorized CPU add kernel computes it (vec::fmadd); the other products and sums
 * round separately. The float hyperparameters are read as the shortest decimal that rounds
 * to them (0.9f -> 0.9, see it_f32_as_decimal in dtype.h), which is what a Python caller wrote.
 * Elements are independent: results do not depend on the thread count. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "cpu/cpu_util.h"

#define PAR_MIN 32768 /* elements below which the kernel stays on the calling thread */

static it_status check_flat(const char *kernel, const char *name, const it_tdesc *t, int64_t *n) {
    if (t == NULL) return it_error(IT_ERR_INVALID_ARG, "%s: %s is NULL", kernel, name);
    if (t->ndim < 0 || t->ndim > IT_MAX_DIMS)
        return it_error(IT_ERR_INVALID_ARG, "%s: %s.ndim = %d outside [0, %d]", kernel, name, t->ndim, IT_MAX_DIMS);
    int64_t expect = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (t->shape[d] < 0)
            return it_error(IT_ERR_INVALID_ARG, "%s: %s.shape[%d] = %lld is negative", kernel, name, d,
                            (long long)t->shape[d]);
        if (t->shape[d] != 1 && t->strides[d] != expect)
            return it_error(IT_ERR_INVALID_ARG, "%s: %s is not contiguous (strides[%d] = %lld, expected %lld)", kernel,
                            name, d, (long long)t->strides[d], (long long)expect);
        expect *= t->shape[d];
    }
    *n = expect;
    if (expect > 0 && t->data == NULL) return it_error(IT_ERR_INVALID_ARG, "%s: %s.data is NULL", kernel, name);
    return IT_OK;
}

/* t is flat, of p's length and dtype. */
static it_status check_like(const char *kernel, const char *name, const it_tdesc *t, const it_tdesc *p, int64_t n) {
    int64_t m;
    it_status st;
    if ((st = check_flat(kernel, name, t, &m))) return st;
    if (m != n)
        return it_error(IT_ERR_INVALID_ARG, "%s: %s has %lld elements, param has %lld", kernel, name, (long long)m,
                        (long long)n);
    return it_cpu_check_dtype(kernel, name, t, "param", p->dtype);
}

static it_status check_param(const char *kernel, const it_tdesc *p, int64_t *n) {
    it_status st;
    if ((st = check_flat(kernel, "param", p, n))) return st;
    return it_cpu_check_fp32_fp64(kernel, p);
}


/* param (n) -= lr * grad_scale * grad (n) */
it_status it_cpu_sgd_step(it_stream *s, float lr, float grad_scale, it_tdesc *param, const it_tdesc *grad) {
    (void)s;
    int64_t n;
    it_status st;
    if ((st = check_param("sgd_step", param, &n)) || (st = check_like("sgd_step", "grad", grad, param, n))) return st;
    double nlr = -it_f32_as_decimal(lr);
    if (param->dtype == IT_DTYPE_FP32) {
        float *p = param->data, a = (float)nlr, gs = grad_scale;
        const float *g = grad->data;
#pragma omp parallel for simd schedule(static) if (n >= PAR_MIN)
        for (int64_t i = 0; i < n; i++) p[i] = fmaf(g[i] * gs, a, p[i]); /* g * 1 is exact */
    } else {
        double *p = param->data, a = nlr, gs = (double)grad_scale;
        const double *g = grad->data;
#pragma omp parallel for simd schedule(static) if (n >= PAR_MIN)
        for (int64_t i = 0; i < n; i++) p[i] = fma(g[i] * gs, a, p[i]);
    }
    return IT_OK;
}

/* The scalars of one step, in double as torch forms them. */
typedef struct adam_scalars {
    double b1, one_minus_b1, b2, one_minus_b2, eps, wd, decay, neg_step_size, bc2_sqrt, grad_scale;
} adam_scalars;

#define CHUNK 4096 /* elements per parallel task */
#define ALWAYS_INLINE static inline __attribute__((always_inline))

/* Weight-decay modes, each its own loop (no branches inside: the loop vectorizes when the
 * build passes -fno-math-errno; sqrtf stays a call otherwise). */
enum { WD_NONE, WD_DECOUPLED, WD_COUPLED };

#define DEFINE_ADAM(T, SFX, FMA, SQRT)                                                                                 \
    /* elements [i0, i1); g * gs with gs = 1 is exact, so grad_scale needs no branch */                                \
    ALWAYS_INLINE void adam_chunk_##SFX(const adam_scalars *c, int mode, T *p, const T *gr, T *m, T *v, int64_t i0,    \
                                        int64_t i1) {                                                                  \
        const T b1 = (T)c->b1, omb1 = (T)c->one_minus_b1, b2 = (T)c->b2, omb2 = (T)c->one_minus_b2;                    \
        const T eps = (T)c->eps, wd = (T)c->wd, decay = (T)c->decay, nss = (T)c->neg_step_size;                        \
        const T bc2s = (T)c->bc2_sqrt, gs = (T)c->grad_scale;                                                          \
        _Pragma("omp simd") for (int64_t i = i0; i < i1; i++) {                                                        \
            T g = gr[i] * gs;                                                                                          \
            T pi = p[i];                                                                                               \
            if (mode == WD_DECOUPLED) pi = pi * decay;                                                                 \
            if (mode == WD_COUPLED) g = FMA(pi, wd, g);                                                                \
            T mi = FMA(g, omb1, m[i] * b1);                                                                            \
            T vi = v[i] * b2 + (omb2 * g) * g;                                                                         \
            T denom = SQRT(vi) / bc2s + eps;                                                                           \
            m[i] = mi;                                                                                                 \
            v[i] = vi;                                                                                                 \
            p[i] = pi + (nss * mi) / denom;                                                                            \
        }                                                                                                              \
    }                                                                                                                  \
    static void adam_##SFX(const adam_scalars *c, int mode, T *p, const T *gr, T *m, T *v, int64_t n) {                \
        int64_t tasks = (n + CHUNK - 1) / CHUNK;                                                                       \
        _Pragma("omp parallel for schedule(static) if (n >= PAR_MIN)") for (int64_t t = 0; t < tasks; t++) {           \
            int64_t i0 = t * CHUNK, i1 = i0 + CHUNK < n ? i0 + CHUNK : n;                                              \
            if (mode == WD_DECOUPLED)                                                                                  \
                adam_chunk_##SFX(c, WD_DECOUPLED, p, gr, m, v, i0, i1);                                                \
            else if (mode == WD_COUPLED)                                                                               \
                adam_chunk_##SFX(c, WD_COUPLED, p, gr, m, v, i0, i1);                                                  \
            else                                                                                                       \
                adam_chunk_##SFX(c, WD_NONE, p, gr, m, v, i0, i1);                                                     \
        }                                                                                                              \
    }

DEFINE_ADAM(float, f32, fmaf, sqrtf)
DEFINE_ADAM(double, f64, fma, sqrt)

/* One Adam/AdamW step on param, grad, m, v (n); see the header comment for the order. */
it_status it_cpu_adam_step(it_stream *s, const it_adam_args *args, it_tdesc *param, const it_tdesc *grad, it_tdesc *m,
                           it_tdesc *v) {
    (void)s;
    const char *k = "adam_step";
    if (args == NULL) return it_error(IT_ERR_INVALID_ARG, "%s: args is NULL", k);
    int64_t n;
    it_status st;
    if ((st = check_param(k, param, &n)) || (st = check_like(k, "grad", grad, param, n)) ||
        (st = check_like(k, "m", m, param, n)) || (st = check_like(k, "v", v, param, n)))
        return st;
    if (args->step < 1) return it_error(IT_ERR_INVALID_ARG, "%s: step = %lld, must be >= 1", k, (long long)args->step);
    adam_scalars c;
    double lr = it_f32_as_decimal(args->lr);
    c.b1 = it_f32_as_decimal(args->beta1);
    c.b2 = it_f32_as_decimal(args->beta2);
    c.eps = it_f32_as_decimal(args->eps);
    c.wd = it_f32_as_decimal(args->weight_decay);
    c.grad_scale = args->grad_scale;
    c.one_minus_b1 = 1.0 - c.b1;
    c.one_minus_b2 = 1.0 - c.b2;
    c.decay = 1.0 - lr * c.wd;
    double bc1 = 1.0 - pow(c.b1, (double)args->step), bc2 = 1.0 - pow(c.b2, (double)args->step);
    c.neg_step_size = -(lr / bc1);
    c.bc2_sqrt = sqrt(bc2);
    if (n == 0) return IT_OK;
    /* torch 1.13: AdamW always multiplies by 1 - lr*wd; Adam adds wd*p only when wd != 0 */
    int mode = args->decoupled ? WD_DECOUPLED : c.wd != 0.0 ? WD_COUPLED : WD_NONE;
    if (param->dtype == IT_DTYPE_FP32)
        adam_f32(&c, mode, param->data, grad->data, m->data, v->data, n);
    else
        adam_f64(&c, mode, param->data, grad->data, m->data, v->data, n);
    return IT_OK;
}
