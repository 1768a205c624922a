/* Cases for the network slots: layernorm, softmax, cross entropy (forward and backward)
 * and the optimizer steps.
 *
 * The row kernels sum over rows of up to 4099 elements in an order the backend chooses, so
 * they are compared with the SUM bounds; the optimizer steps are elementwise (ELEM). Inputs
 * that a backward kernel expects to come from its forward (layernorm's mean/rstd, softmax's
 * y) are computed on the host with the CPU forward kernel, so both sides get consistent
 * values. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf.h"

/* Run the CPU forward on host views to prepare an input; failures (a dtype the CPU does
 * not support) leave the operand random: the reference then reports "no reference". */
static void host_prepare_layernorm(conf_operand *x, conf_operand *w, conf_operand *mean, conf_operand *rstd,
                                   float eps) {
    int64_t n = conf_numel(x);
    void *y = malloc((size_t)(n ? n : 1) * it_dtype_size(x->dtype));
    if (!y) return;
    it_tdesc xd = conf_host_desc(x), wd = conf_host_desc(w), md = conf_host_desc(mean), rd = conf_host_desc(rstd);
    it_tdesc yd = xd;
    yd.data = y;
    int64_t st = 1;
    for (int d = x->ndim - 1; d >= 0; d--) {
        yd.strides[d] = st;
        st *= x->shape[d];
    }
    (void)it_cpu_kernels()->layernorm_fwd(NULL, &xd, &wd, NULL, eps, &yd, &md, &rd);
    free(y);
}

static void host_prepare_softmax(const it_softmax_args *args, conf_operand *y, conf_rng *r) {
    int64_t n = conf_numel(y);
    size_t es = it_dtype_size(y->dtype);
    unsigned char *x = malloc((size_t)(n ? n : 1) * es);
    if (!x) return;
    for (int64_t i = 0; i < n; i++) conf_store(y->dtype, x + (size_t)i * es, conf_rng_uniform(r, -4, 4));
    it_tdesc yd = conf_host_desc(y), xd = yd;
    xd.data = x;
    int64_t st = 1;
    for (int d = y->ndim - 1; d >= 0; d--) {
        xd.strides[d] = st;
        st *= y->shape[d];
    }
    (void)it_cpu_kernels()->softmax_fwd(NULL, args, &xd, &yd);
    free(x);
}

/* ---------------------------------------------------------------- layernorm */

it_status conf_call_layernorm_fwd(const it_kernels *k, it_stream *s, const conf_case *c, it_tdesc *const *d) {
    return k->layernorm_fwd(s, d[0], d[1], d[2], c->eps, d[3], d[4], d[5]);
}

it_status conf_call_layernorm_bwd(const it_kernels *k, it_stream *s, const conf_case *c, it_tdesc *const *d) {
    (void)c;
    return k->layernorm_bwd(s, d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]);
}

typedef struct ln_shape {
    const char *label;
    int ndim;
    int64_t shape[3];
    bool bias;      /* fwd: b given; bwd: db given */
    conf_layout lx; /* x (and dy) */
    conf_layout lw; /* w (and b) */
    bool nan_row;
} ln_shape;

static const ln_shape ln_shapes[] = {
    {"7x13", 2, {7, 13}, true, CONF_CONTIG, CONF_CONTIG, false},
    {"7x13 nan in row 2", 2, {7, 13}, true, CONF_CONTIG, CONF_CONTIG, true},
    {"7x13 no bias", 2, {7, 13}, false, CONF_CONTIG, CONF_CONTIG, false},
    {"2x3x13 stats 2x3", 3, {2, 3, 13}, true, CONF_CONTIG, CONF_CONTIG, false},
    {"7x13 x^T", 2, {7, 13}, true, CONF_TRANSPOSED, CONF_CONTIG, false},
    {"7x13 x,w,b stepped", 2, {7, 13}, true, CONF_STEPPED, CONF_STEPPED, false},
    {"7x13 w,b bcast stride 0", 2, {7, 13}, true, CONF_CONTIG, CONF_BCAST, false},
    {"64x33", 2, {64, 33}, true, CONF_CONTIG, CONF_CONTIG, false},
    {"3x4099", 2, {3, 4099}, true, CONF_CONTIG, CONF_CONTIG, false},
    {"1x1", 2, {1, 1}, true, CONF_CONTIG, CONF_CONTIG, false},
    {"5x1", 2, {5, 1}, true, CONF_CONTIG, CONF_CONTIG, false},
    {"0x13", 2, {0, 13}, true, CONF_CONTIG, CONF_CONTIG, false},
};

static void ln_cases(conf_ctx *ctx, bool bwd) {
    const float eps = 1e-5f;
    for (int t = 0; t < 4; t++) {
        it_dtype dt = conf_float_dtypes[t];
        for (size_t k = 0; k < sizeof ln_shapes / sizeof ln_shapes[0]; k++) {
            const ln_shape *e = &ln_shapes[k];
            if (bwd && e->nan_row) continue;
            conf_case c;
            conf_case_init(&c, conf_dtype_short(dt), "%s", e->label);
            conf_case_tol(&c, CONF_TOL_SUM, dt);
            c.eps = eps;
            int64_t C = e->shape[e->ndim - 1], cs[1] = {C};
            /* mean / rstd: R elements "in any shape": the leading dims of x */
            int sn = e->ndim - 1;
            conf_rng r = conf_rng_seed(c.label, (uint64_t)dt);
            if (!bwd) {
                conf_operand *x = conf_add(&c, "x", CONF_IN, dt, e->ndim, e->shape, e->lx, 0);
                /* a nonzero mean: the statistics are not themselves results of cancellation */
                conf_fill_uniform(x, &r, -1, 3);
                if (e->nan_row) conf_set(x, 2 * C + 5, NAN);
                conf_fill_uniform(conf_add(&c, "w", CONF_IN, dt, 1, cs, e->lw, 1), &r, 0.5, 1.5);
                if (e->bias)
                    conf_add(&c, "b", CONF_IN, dt, 1, cs, e->lw, 1);
                else
                    conf_add_absent(&c, "b");
                conf_add(&c, "y", CONF_OUT, dt, e->ndim, e->shape, CONF_CONTIG, 0);
                conf_add(&c, "mean", CONF_OUT, dt, sn, e->shape, CONF_CONTIG, 0);
                conf_add(&c, "rstd", CONF_OUT, dt, sn, e->shape, CONF_CONTIG, 0);
            } else {
                conf_add(&c, "dy", CONF_IN, dt, e->ndim, e->shape, e->lx, 0);
                conf_operand *x = conf_add(&c, "x", CONF_IN, dt, e->ndim, e->shape, e->lx, 0);
                conf_fill_uniform(x, &r, -1, 3);
                conf_operand *w = conf_add(&c, "w", CONF_IN, dt, 1, cs, e->lw, 1);
                conf_fill_uniform(w, &r, 0.5, 1.5);
                conf_operand *mean = conf_add(&c, "mean", CONF_IN, dt, sn, e->shape, CONF_CONTIG, 0);
                conf_operand *rstd = conf_add(&c, "rstd", CONF_IN, dt, sn, e->shape, CONF_CONTIG, 0);
                host_prepare_layernorm(x, w, mean, rstd, eps);
                conf_add(&c, "dx", CONF_OUT, dt, e->ndim, e->shape, CONF_CONTIG, 0);
                conf_add(&c, "dw", CONF_OUT, dt, 1, cs, CONF_CONTIG, 0);
                if (e->bias)
                    conf_add(&c, "db", CONF_OUT, dt, 1, cs, CONF_CONTIG, 0);
                else
                    conf_add_absent(&c, "db");
            }
            bool noref = conf_run(ctx, &c) == CONF_SKIP_NOREF;
            conf_case_free(&c);
            if (noref) break;
        }
    }
}

void conf_cases_layernorm_fwd(conf_ctx *ctx) { ln_cases(ctx, false); }
void conf_cases_layernorm_bwd(conf_ctx *ctx) { ln_cases(ctx, true); }

/* ---------------------------------------------------------------- softmax */

it_status conf_call_softmax_fwd(const it_kernels *k, it_stream *s, const conf_case *c, it_tdesc *const *d) {
    it_softmax_args a = c->sm; /* on the stack, as the core passes it */
    return k->softmax_fwd(s, &a, d[0], d[1]);
}

it_status conf_call_softmax_bwd(const it_kernels *k, it_stream *s, const conf_case *c, it_tdesc *const *d) {
    it_softmax_args a = c->sm;
    return k->softmax_bwd(s, &a, d[0], d[1], d[2]);
}

typedef struct sm_shape {
    const char *label;
    int ndim;
    int64_t shape[3];
    float scale;
    bool causal;
    conf_layout lx; /* x (fwd) or y (bwd) */
    conf_layout ld; /* dy (bwd) */
    bool specials;  /* fwd: a NaN in row 1, a -Inf in row 2 */
} sm_shape;

static const sm_shape sm_shapes[] = {
    {"7x13", 2, {7, 13}, 1, false, CONF_CONTIG, CONF_CONTIG, false},
    {"7x13 scale 0.125", 2, {7, 13}, 0.125f, false, CONF_CONTIG, CONF_CONTIG, false},
    {"7x13 nan row, -inf entry", 2, {7, 13}, 1, false, CONF_CONTIG, CONF_CONTIG, true},
    {"2x7x13 causal", 3, {2, 7, 13}, 1, true, CONF_CONTIG, CONF_CONTIG, false},
    {"5x5 causal scale 0.5", 2, {5, 5}, 0.5f, true, CONF_CONTIG, CONF_CONTIG, false},
    {"2x4099", 2, {2, 4099}, 1, false, CONF_CONTIG, CONF_CONTIG, false},
    {"3x4099 causal", 2, {3, 4099}, 0.25f, true, CONF_CONTIG, CONF_CONTIG, false},
    {"13 (1-D)", 1, {13}, 1, false, CONF_CONTIG, CONF_CONTIG, false},
    {"1x1", 2, {1, 1}, 1, false, CONF_CONTIG, CONF_CONTIG, false},
    {"7x13 x^T dy stepped", 2, {7, 13}, 1, false, CONF_TRANSPOSED, CONF_STEPPED, false},
    {"7x13 causal x stepped", 2, {7, 13}, 1, true, CONF_STEPPED, CONF_TRANSPOSED, false},
    {"7x13 x bcast(0,1) dy bcast(0,1)", 2, {7, 13}, 1, false, CONF_BCAST, CONF_BCAST, false},
    {"0x13", 2, {0, 13}, 1, false, CONF_CONTIG, CONF_CONTIG, false},
    {"7x0", 2, {7, 0}, 1, false, CONF_CONTIG, CONF_CONTIG, false},
};

static void sm_cases(conf_ctx *ctx, bool bwd) {
    for (int t = 0; t < 4; t++) {
        it_dtype dt = conf_float_dtypes[t];
        for (size_t k = 0; k < sizeof sm_shapes / sizeof sm_shapes[0]; k++) {
            const sm_shape *e = &sm_shapes[k];
            if (bwd && e->specials) continue;
            conf_case c;
            conf_case_init(&c, conf_dtype_short(dt), "%s", e->label);
            conf_case_tol(&c, CONF_TOL_SUM, dt); /* the exp sum's order is the backend's */
            c.sm.scale = e->scale;
            c.sm.causal = e->causal;
            conf_rng r = conf_rng_seed(c.label, (uint64_t)dt);
            int64_t S = e->shape[e->ndim - 1];
            if (!bwd) {
                conf_operand *x = conf_add(&c, "x", CONF_IN, dt, e->ndim, e->shape, e->lx, 1);
                conf_fill_uniform(x, &r, -4, 4);
                if (e->specials) {
                    conf_set(x, 1 * S + 3, NAN);       /* the whole row is NaN */
                    conf_set(x, 2 * S + 5, -INFINITY); /* probability exactly 0 */
                }
                conf_add(&c, "y", CONF_OUT, dt, e->ndim, e->shape, CONF_CONTIG, 0);
            } else {
                conf_operand *y = conf_add(&c, "y", CONF_IN, dt, e->ndim, e->shape, e->lx, 1);
                host_prepare_softmax(&c.sm, y, &r);
                conf_add(&c, "dy", CONF_IN, dt, e->ndim, e->shape, e->ld, 1);
                conf_add(&c, "dx", CONF_OUT, dt, e->ndim, e->shape, CONF_CONTIG, 0);
            }
            bool noref = conf_run(ctx, &c) == CONF_SKIP_NOREF;
            conf_case_free(&c);
            if (noref) break;
        }
    }
}

void conf_cases_softmax_fwd(conf_ctx *ctx) { sm_cases(ctx, false); }
void conf_cases_softmax_bwd(conf_ctx *ctx) { sm_cases(ctx, true); }

/* ---------------------------------------------------------------- cross entropy */

it_status conf_call_cross_entropy_fwd(const it_kernels *k, it_stream *s, const conf_case *c, it_tdesc *const *d) {
    return k->cross_entropy_fwd(s, d[0], d[1], c->valid, d[2]);
}

it_status conf_call_cross_entropy_bwd(const it_kernels *k, it_stream *s, const conf_case *c, it_tdesc *const *d) {
    return k->cross_entropy_bwd(s, d[0], d[1], c->valid, d[2], d[3]);
}

typedef struct ce_shape {
    const char *label;
    int ndim;
    int64_t shape[3];
    int64_t valid;
    conf_layout llog, ltgt;
    bool garbage_pad; /* NaN / Inf in the padded columns: they must take no part */
} ce_shape;

static const ce_shape ce_shapes[] = {
    {"7x13 valid 13", 2, {7, 13}, 13, CONF_CONTIG, CONF_CONTIG, false},
    {"7x13 valid 10 nan/inf padding", 2, {7, 13}, 10, CONF_CONTIG, CONF_CONTIG, true},
    {"2x3x13 valid 11", 3, {2, 3, 13}, 11, CONF_CONTIG, CONF_CONTIG, false},
    {"7x13 valid 12 logits,targets stepped", 2, {7, 13}, 12, CONF_STEPPED, CONF_STEPPED, false},
    {"7x13 valid 13 logits^T", 2, {7, 13}, 13, CONF_TRANSPOSED, CONF_CONTIG, false},
    {"7x13 valid 13 logits bcast(0,1)", 2, {7, 13}, 13, CONF_BCAST, CONF_CONTIG, false},
    {"3x4099 valid 4097", 2, {3, 4099}, 4097, CONF_CONTIG, CONF_CONTIG, true},
    {"1x1 valid 1", 2, {1, 1}, 1, CONF_CONTIG, CONF_CONTIG, false},
    {"0x13 valid 13", 2, {0, 13}, 13, CONF_CONTIG, CONF_CONTIG, false},
};

/* `low`: the fused half-logits slots (cross_entropy_low_fwd / _bwd): bf16 and fp16 logits,
 * losses and dlosses fp32, dlogits in the logits' dtype. */
static void ce_cases(conf_ctx *ctx, bool bwd, bool low) {
    static const it_dtype lows[2] = {IT_DTYPE_BF16, IT_DTYPE_FP16}, tdt[2] = {IT_DTYPE_I32, IT_DTYPE_I64};
    for (int t = 0; t < (low ? 2 : 4); t++) {
        it_dtype dt = low ? lows[t] : conf_float_dtypes[t], vdt = low ? IT_DTYPE_FP32 : dt; /* (d)losses' */
        bool noref = false;
        for (int j = 0; j < 2 && !noref; j++) {
            char dl[32];
            snprintf(dl, sizeof dl, "%s/tgt=%s", conf_dtype_short(dt), conf_dtype_short(tdt[j]));
            for (size_t k = 0; k < sizeof ce_shapes / sizeof ce_shapes[0] && !noref; k++) {
                const ce_shape *e = &ce_shapes[k];
                conf_case c;
                conf_case_init(&c, dl, "%s", e->label);
                /* the exp sum's order is the backend's: the sum bound of the output's dtype */
                conf_case_tol(&c, CONF_TOL_SUM, bwd ? dt : vdt);
                c.valid = e->valid;
                conf_rng r = conf_rng_seed(c.label, (uint64_t)dt * (low ? 5 : 3) + (uint64_t)j);
                int64_t Vp = e->shape[e->ndim - 1], N = 1;
                for (int d = 0; d < e->ndim - 1; d++) N *= e->shape[d];
                conf_operand *lg = conf_add(&c, "logits", CONF_IN, dt, e->ndim, e->shape, e->llog, 1);
                conf_fill_uniform(lg, &r, -4, 4);
                if (e->garbage_pad)
                    for (int64_t n = 0; n < N; n++)
                        for (int64_t v = e->valid; v < Vp; v++) conf_set(lg, n * Vp + v, (n + v) % 2 ? NAN : INFINITY);
                conf_operand *tg = conf_add(&c, "targets", CONF_IN, tdt[j], e->ndim - 1, e->shape, e->ltgt, 0);
                for (int64_t n = 0; n < N; n++)
                    conf_set_i64(tg, n, n == 0 ? e->valid - 1 : n == 1 ? 0 : conf_rng_int(&r, 0, e->valid - 1));
                if (!bwd) {
                    conf_add(&c, "losses", CONF_OUT, vdt, e->ndim - 1, e->shape, CONF_CONTIG, 0);
                } else {
                    conf_add(&c, "dlosses", CONF_IN, vdt, e->ndim - 1, e->shape, CONF_CONTIG, 0);
                    conf_add(&c, "dlogits", CONF_OUT, dt, e->ndim, e->shape, CONF_CONTIG, 0);
                }
                noref = conf_run(ctx, &c) == CONF_SKIP_NOREF;
                conf_case_free(&c);
            }
        }
    }
}

void conf_cases_cross_entropy_fwd(conf_ctx *ctx) { ce_cases(ctx, false, false); }
void conf_cases_cross_entropy_bwd(conf_ctx *ctx) { ce_cases(ctx, true, false); }

/* cross_entropy_low_fwd / _bwd (optional, fused): the same shapes over half logits. */
it_status conf_call_cross_entropy_low_fwd(const it_kernels *k, it_stream *s, const conf_case *c, it_tdesc *const *d) {
    return k->cross_entropy_low_fwd(s, d[0], d[1], c->valid, d[2]);
}

it_status conf_call_cross_entropy_low_bwd(const it_kernels *k, it_stream *s, const conf_case *c, it_tdesc *const *d) {
    return k->cross_entropy_low_bwd(s, d[0], d[1], c->valid, d[2], d[3]);
}

void conf_cases_cross_entropy_low_fwd(conf_ctx *ctx) { ce_cases(ctx, false, true); }
void conf_cases_cross_entropy_low_bwd(conf_ctx *ctx) { ce_cases(ctx, true, true); }

/* ---------------------------------------------------------------- optimizers */

it_status conf_call_sgd_step(const it_kernels *k, it_stream *s, const conf_case *c, it_tdesc *const *d) {
    return k->sgd_step(s, c->lr, c->grad_scale, d[0], d[1]);
}

it_status conf_call_adam_step(const it_kernels *k, it_stream *s, const conf_case *c, it_tdesc *const *d) {
    it_adam_args a = c->adam; /* on the stack, as the core passes it */
    return k->adam_step(s, &a, d[0], d[1], d[2], d[3]);
}

typedef struct opt_shape {
    const char *label;
    int ndim;
    int64_t shape[2];
    float lr, grad_scale, wd;
    int64_t step;
    bool decoupled;
} opt_shape;

static const opt_shape sgd_shapes[] = {
    {"37 lr 0.01", 1, {37}, 0.01f, 1, 0, 0, false},
    {"37 lr 0.01 grad_scale 0.5", 1, {37}, 0.01f, 0.5f, 0, 0, false},
    {"4099 lr 0.1", 1, {4099}, 0.1f, 1, 0, 0, false},
    {"7x13 lr 3e-4", 2, {7, 13}, 3e-4f, 1, 0, 0, false},
    {"1", 1, {1}, 0.01f, 1, 0, 0, false},
    {"0", 1, {0}, 0.01f, 1, 0, 0, false},
};

static const opt_shape adam_shapes[] = {
    {"37 adamw step 1", 1, {37}, 1e-3f, 1, 0.01f, 1, true},
    {"37 adam wd 0.01 step 7 grad_scale 0.5", 1, {37}, 1e-3f, 0.5f, 0.01f, 7, false},
    {"37 adamw wd 0 step 1000", 1, {37}, 1e-3f, 1, 0, 1000, true},
    {"4099 adamw wd 0.1 step 3", 1, {4099}, 6e-4f, 1, 0.1f, 3, true},
    {"7x13 adam step 2", 2, {7, 13}, 1e-2f, 1, 0, 2, false},
    {"1 adamw step 1", 1, {1}, 1e-3f, 1, 0.01f, 1, true},
    {"0 adamw step 1", 1, {0}, 1e-3f, 1, 0.01f, 1, true},
};

/* An optimizer case's scalars and its param, grad (and Adam's m, v) operands of dt. */
static void opt_case_fill(conf_case *c, const opt_shape *e, it_dtype dt, bool adam, conf_rng *r) {
    c->lr = e->lr;
    c->grad_scale = e->grad_scale;
    c->adam = (it_adam_args){e->lr, 0.9f, 0.999f, 1e-8f, e->wd, e->grad_scale, e->step, e->decoupled};
    conf_add(c, "param", CONF_INOUT, dt, e->ndim, e->shape, CONF_CONTIG, 0);
    conf_add(c, "grad", CONF_IN, dt, e->ndim, e->shape, CONF_CONTIG, 0);
    if (adam) {
        conf_fill_uniform(conf_add(c, "m", CONF_INOUT, dt, e->ndim, e->shape, CONF_CONTIG, 0), r, -0.1, 0.1);
        conf_fill_uniform(conf_add(c, "v", CONF_INOUT, dt, e->ndim, e->shape, CONF_CONTIG, 0), r, 0, 0.01);
    }
}

static void opt_cases(conf_ctx *ctx, bool adam) {
    const opt_shape *shapes = adam ? adam_shapes : sgd_shapes;
    size_t ns = adam ? sizeof adam_shapes / sizeof adam_shapes[0] : sizeof sgd_shapes / sizeof sgd_shapes[0];
    for (int t = 0; t < 4; t++) {
        it_dtype dt = conf_float_dtypes[t];
        for (size_t k = 0; k < ns; k++) {
            const opt_shape *e = &shapes[k];
            conf_case c;
            conf_case_init(&c, conf_dtype_short(dt), "%s", e->label);
            conf_case_tol(&c, CONF_TOL_ELEM, dt); /* every element updated on its own */
            conf_rng r = conf_rng_seed(c.label, (uint64_t)dt);
            opt_case_fill(&c, e, dt, adam, &r);
            bool noref = conf_run(ctx, &c) == CONF_SKIP_NOREF;
            conf_case_free(&c);
            if (noref) break;
        }
    }
}

void conf_cases_sgd_step(conf_ctx *ctx) { opt_cases(ctx, false); }
void conf_cases_adam_step(conf_ctx *ctx) { opt_cases(ctx, true); }

/* adam_step_round: Adam's cases on fp32 and fp64 parameters, each with a bf16 and an fp16
 * copy. One tolerance for all four outputs, the copy's: a backend whose updated param differs
 * from the CPU's in its last fp32 bit (within adam_step's own tolerance) may round an element
 * that lies next to a tie to the other neighbour, a relative error of one bf16 / fp16 ulp. */
it_status conf_call_adam_step_round(const it_kernels *k, it_stream *s, const conf_case *c, it_tdesc *const *d) {
    it_adam_args a = c->adam;
    return k->adam_step_round(s, &a, d[0], d[1], d[2], d[3], d[4]);
}

void conf_cases_adam_step_round(conf_ctx *ctx) {
    static const it_dtype params[] = {IT_DTYPE_FP32, IT_DTYPE_FP64}, lows[] = {IT_DTYPE_BF16, IT_DTYPE_FP16};
    for (int pi = 0; pi < 2; pi++) {
        for (int li = 0; li < 2; li++) {
            it_dtype dt = params[pi], lt = lows[li];
            char dl[32];
            snprintf(dl, sizeof dl, "%s->%s", conf_dtype_short(dt), conf_dtype_short(lt));
            for (size_t k = 0; k < sizeof adam_shapes / sizeof adam_shapes[0]; k++) {
                const opt_shape *e = &adam_shapes[k];
                conf_case c;
                conf_case_init(&c, dl, "%s", e->label);
                conf_case_tol(&c, CONF_TOL_ELEM, lt);
                conf_rng r = conf_rng_seed(c.label, (uint64_t)dt * 16 + (uint64_t)lt);
                opt_case_fill(&c, e, dt, true, &r);
                conf_add(&c, "low", CONF_OUT, lt, e->ndim, e->shape, CONF_CONTIG, 0);
                bool noref = conf_run(ctx, &c) == CONF_SKIP_NOREF;
                conf_case_free(&c);
                if (noref) break;
            }
        }
    }
}

/* ---------------------------------------------------------------- fused attention
 * (optional slots: a backend without them is composed by the core, and the suite lists
 * them as absent rather than testing a fallback) */

it_status conf_call_attention_fwd(const it_kernels *k, it_stream *s, const conf_case *c, it_tdesc *const *d) {
    it_softmax_args a = c->sm;
    return k->attention_fwd(s, &a, d[0], d[1], d[2], d[3], d[4]);
}

it_status conf_call_attention_bwd(const it_kernels *k, it_stream *s, const conf_case *c, it_tdesc *const *d) {
    it_softmax_args a = c->sm;
    return k->attention_bwd(s, &a, d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7], d[8]);
}

typedef struct att_shape {
    const char *label;
    int64_t B, H, T, S, D;
    bool causal;
    int interleave; /* heads stored as in (B, T, interleave, H, D) (3: GPT-2's qkv), at part `part` */
    int64_t Hkv;    /* k's and v's heads (grouped-query attention); 0: H */
} att_shape;

static const att_shape att_shapes[] = {
    {"B2 H3 T7 D5 causal", 2, 3, 7, 7, 5, true, 1, 0},
    {"B2 H3 T7 D5 causal, heads in qkv", 2, 3, 7, 7, 5, true, 3, 0},
    {"B1 H2 T16 D16 causal", 1, 2, 16, 16, 16, true, 1, 0},
    {"B2 H2 T5 S9 D8", 2, 2, 5, 9, 8, false, 1, 0},
    {"B1 H2 T5 S9 D8 causal", 1, 2, 5, 9, 8, true, 3, 0},
    {"B1 H1 T1 D4 causal", 1, 1, 1, 1, 4, true, 1, 0},
    {"B1 H12 T64 D64 causal, heads in qkv", 1, 12, 64, 64, 64, true, 3, 0},
    {"B0 H2 T4 D4 causal", 0, 2, 4, 4, 4, true, 1, 0},
    {"B2 H6 Hkv2 T9 D8 causal (grouped kv heads)", 2, 6, 9, 9, 8, true, 1, 2},
    {"B1 H4 Hkv1 T3 S6 D5 (one kv head)", 1, 4, 3, 6, 5, false, 1, 1},
    {"B1 H4 Hkv2 T20 S37 D8 causal (keys ahead)", 1, 4, 20, 37, 8, true, 1, 2},
};

conf_operand *conf_add_heads(conf_case *c, const char *name, conf_role role, it_dtype dt, int64_t B, int64_t H,
                             int64_t R, int64_t D, int interleave, int part) {
    int64_t whole[3] = {B, R, interleave * H * D};
    conf_operand *o = conf_add(c, name, role, dt, 3, whole, CONF_CONTIG, 0);
    int64_t row = interleave * H * D;
    o->ndim = 4;
    o->shape[0] = B, o->shape[1] = H, o->shape[2] = R, o->shape[3] = D;
    o->strides[0] = (R > 0 ? R : 1) * row, o->strides[1] = D, o->strides[2] = row, o->strides[3] = 1;
    o->offset = part * H * D;
    return o;
}

static void att_cases(conf_ctx *ctx, bool bwd) {
    for (int t = 0; t < 4; t++) {
        it_dtype dt = conf_float_dtypes[t];
        for (size_t i = 0; i < sizeof att_shapes / sizeof att_shapes[0]; i++) {
            const att_shape *e = &att_shapes[i];
            conf_case c;
            conf_case_init(&c, conf_dtype_short(dt), "%s", e->label);
            conf_case_tol(&c, CONF_TOL_SUM, dt); /* the products' and the exp sums' order is the backend's */
            c.sm.scale = 1.0f / sqrtf((float)e->D);
            c.sm.causal = e->causal;
            conf_rng r = conf_rng_seed(c.label, (uint64_t)dt + (bwd ? 101u : 0u));
            int il = e->interleave;
            int64_t hkv = e->Hkv ? e->Hkv : e->H; /* (interleaved heads have hkv == H) */
            conf_add_heads(&c, "q", CONF_IN, dt, e->B, e->H, e->T, e->D, il, 0);
            conf_add_heads(&c, "k", CONF_IN, dt, e->B, hkv, e->S, e->D, il, il > 1 ? 1 : 0);
            conf_add_heads(&c, "v", CONF_IN, dt, e->B, hkv, e->S, e->D, il, il > 1 ? 2 : 0);
            int64_t ash[4] = {e->B, e->H, e->T, e->S};
            if (!bwd) {
                conf_add(&c, "att", CONF_OUT, dt, 4, ash, CONF_CONTIG, 0);
                conf_add_heads(&c, "y", CONF_OUT, dt, e->B, e->H, e->T, e->D, 1, 0);
            } else {
                conf_operand *att = conf_add(&c, "att", CONF_IN, dt, 4, ash, CONF_CONTIG, 0);
                host_prepare_softmax(&c.sm, att, &r); /* probabilities, causal zeros included */
                conf_add_heads(&c, "dy", CONF_IN, dt, e->B, e->H, e->T, e->D, 1, 0);
                conf_add_heads(&c, "dq", CONF_OUT, dt, e->B, e->H, e->T, e->D, il, 0);
                conf_add_heads(&c, "dk", CONF_OUT, dt, e->B, e->H, e->S, e->D, il, il > 1 ? 1 : 0);
                conf_add_heads(&c, "dv", CONF_OUT, dt, e->B, e->H, e->S, e->D, il, il > 1 ? 2 : 0);
                conf_add(&c, "datt", CONF_OUT, dt, 4, ash, CONF_CONTIG, 0);
            }
            bool noref = conf_run(ctx, &c) == CONF_SKIP_NOREF;
            conf_case_free(&c);
            if (noref) break;
        }
    }
}

void conf_cases_attention_fwd(conf_ctx *ctx) { att_cases(ctx, false); }
void conf_cases_attention_bwd(conf_ctx *ctx) { att_cases(ctx, true); }
