/* The optimizer steps per element, and the scalars of one Adam step, as torch 1.13 forms them
 * (_single_tensor_adam / _single_tensor_adamw), operation by operation. The CPU backend
 * (backends/cpu/optim.c) and the CUDA kernels (kernels_ew.cu) compile this text; the MLU host
 * forms its kernels' scalars with it_sc_adam_make (backends/mlu/host_ew.c). it_scalar.h says
 * how the operations stay unfused.
 *
 *   sgd:   p = fma(g * gs, -lr, p)                           (g * 1 is exact: no branch on gs)
 *   adam:  g = g * gs                                        (clip_grad_norm_'s g.mul_(coef))
 *          AdamW: p = p * decay, decay = 1 - lr*wd           param.mul_(1 - lr * weight_decay)
 *          Adam (wd != 0): g = fma(p, wd, g)                 grad.add(param, alpha=wd)
 *          m = fma(g, 1-b1, m * b1)                          exp_avg.mul_(b1).add_(g, alpha=1-b1)
 *          v = v * b2 + ((1-b2) * g) * g                     exp_avg_sq.mul_(b2).addcmul_(g, g, value=1-b2)
 *          denom = sqrt(v) / sqrt(1 - b2^step) + eps         (exp_avg_sq.sqrt() / bc2_sqrt).add_(eps)
 *          p = p + ((-lr / (1 - b1^step)) * m) / denom       param.addcdiv_(m, denom, value=-step_size)
 *
 * `x + alpha * y` (add_ with alpha) is one fused multiply-add, as torch's vectorized CPU add
 * kernel computes it (vec::fmadd); the other products and sums round separately. The scalars
 * are formed in double (Python floats) from the float hyperparameters read as the shortest
 * decimals that round to them (it_f32_as_decimal, dtype.h), then rounded once to the tensor's
 * type. */
#ifndef INFINITRAIN_SCALAR_IT_SCALAR_ADAM_H
#define INFINITRAIN_SCALAR_IT_SCALAR_ADAM_H

#include "infinitrain/backend.h"
#include "infinitrain/scalar/it_scalar.h"

/* sgd, one element: p = fma(g * gs, neg_lr, p) */
IT_SC_FN float it_sc_sgd_f32(float p, float g, float gs, float neg_lr) {
    return it_sc_ffma(it_sc_fmul(g, gs), neg_lr, p);
}
IT_SC_FN double it_sc_sgd_f64(double p, double g, double gs, double neg_lr) {
    return it_sc_dfma(it_sc_dmul(g, gs), neg_lr, p);
}

/* Weight-decay modes of one Adam step. torch 1.13: AdamW always multiplies by 1 - lr*wd; Adam
 * adds wd*p only when wd != 0. */
enum { IT_SC_WD_NONE = 0, IT_SC_WD_DECOUPLED = 1, IT_SC_WD_COUPLED = 2 };

/* The scalars of one Adam step in double: b1, 1-b1, b2, 1-b2, eps, wd, decay = 1 - lr*wd,
 * nss = -(lr / (1 - b1^step)), bc2s = sqrt(1 - b2^step), gs = grad_scale. */
typedef struct it_sc_adam_f64c {
    double b1, omb1, b2, omb2, eps, wd, decay, nss, bc2s, gs;
    int mode; /* IT_SC_WD_* */
} it_sc_adam_f64c;
/* The same, each rounded once to fp32, for fp32 tensors. */
typedef struct it_sc_adam_f32c {
    float b1, omb1, b2, omb2, eps, wd, decay, nss, bc2s, gs;
    int mode;
} it_sc_adam_f32c;

/* Host only (a plain function under nvcc too). step >= 1 (the caller checked). */
static inline it_sc_adam_f64c it_sc_adam_make(const it_adam_args *a) {
    it_sc_adam_f64c c;
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
    c.mode = a->decoupled ? IT_SC_WD_DECOUPLED : c.wd != 0.0 ? IT_SC_WD_COUPLED : IT_SC_WD_NONE;
    return c;
}
static inline it_sc_adam_f32c it_sc_adam_to_f32(const it_sc_adam_f64c *c) {
    it_sc_adam_f32c f;
    f.b1 = (float)c->b1, f.omb1 = (float)c->omb1, f.b2 = (float)c->b2, f.omb2 = (float)c->omb2;
    f.eps = (float)c->eps, f.wd = (float)c->wd, f.decay = (float)c->decay, f.nss = (float)c->nss;
    f.bc2s = (float)c->bc2s, f.gs = (float)c->gs, f.mode = c->mode;
    return f;
}

/* One Adam / AdamW element update in the order above. `mode` is c.mode, passed on its own so
 * that a caller looping with a constant mode gets the other branches compiled away; c by
 * value, so that stores through p, m, v cannot alias it (the CPU's loops vectorize). */
#define IT_SC_DEF_ADAM(T, SFX, CT, ADD, MUL, DIV, SQRT, FMA)                                                           \
    IT_SC_FN void it_sc_adam_##SFX(const CT c, int mode, T *p, T gr, T *m, T *v) {                                     \
        T g = MUL(gr, c.gs);                                                                                           \
        T pi = *p;                                                                                                     \
        if (mode == IT_SC_WD_DECOUPLED) pi = MUL(pi, c.decay);                                                         \
        if (mode == IT_SC_WD_COUPLED) g = FMA(pi, c.wd, g);                                                            \
        T mi = FMA(g, c.omb1, MUL(*m, c.b1));                                                                          \
        T vi = ADD(MUL(*v, c.b2), MUL(MUL(c.omb2, g), g));                                                             \
        T denom = ADD(DIV(SQRT(vi), c.bc2s), c.eps);                                                                   \
        *m = mi;                                                                                                       \
        *v = vi;                                                                                                       \
        *p = ADD(pi, DIV(MUL(c.nss, mi), denom));                                                                      \
    }
IT_SC_DEF_ADAM(float, f32, it_sc_adam_f32c, it_sc_fadd, it_sc_fmul, it_sc_fdiv, it_sc_fsqrt, it_sc_ffma)
IT_SC_DEF_ADAM(double, f64, it_sc_adam_f64c, it_sc_dadd, it_sc_dmul, it_sc_ddiv, it_sc_dsqrt, it_sc_dfma)

#endif
