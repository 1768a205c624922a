/* --grad: each backward slot against central finite differences of its forward slot, both
 * run on the device in fp64.
 *
 * For a forward f with output y and a fixed random upstream gradient g, the scalar
 * L = sum(y * g) has dL/dtheta = backward(g) for every input theta; the numeric value is
 * (L(theta + h e_i) - L(theta - h e_i)) / 2h, one pair of forward calls per element (all
 * elements at once for the elementwise *_BWD ops of binary). When the device leaves a
 * forward slot NULL, the CPU forward stands in (said in the line); a NULL backward slot is
 * reported as fallback by the caller.
 *
 * Bound: max|analytic - numeric| / max|numeric| <= 1e-6. With h = 1e-6 in fp64 the
 * truncation error is ~h^2 |f'''| ~ 1e-12 and the rounding error ~eps |L| / h ~ 1e-10 |L|
 * (|L| is O(1) here), so 1e-6 has four orders of margin, while a wrong term in a gradient
 * formula shows at 1e-3 or more. The measure is normwise because the rounding error is
 * absolute: it would swamp the relative error of a near-zero component. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "conf.h"

#define GRAD_H 1e-6
#define GRAD_TOL 1e-6
#define FP64 IT_DTYPE_FP64

typedef struct runner {
    const conf_target *t;
    const it_kernels *k;
    bool on_cpu; /* the device left this slot NULL: the CPU kernel stands in */
} runner;

/* The device runs the forward when it has the slot (native), else the CPU does. */
static runner pick(conf_ctx *ctx, bool native) {
    runner r = {&ctx->dev, conf_kernels(ctx->dev.backend), false};
    if (!native) {
        r.t = &ctx->cpu;
        r.k = it_cpu_kernels();
        r.on_cpu = true;
    }
    return r;
}

/* 0 ok, 1 the slot said unsupported, 2 failed (msg set). */
static int exec(const runner *r, conf_call_fn call, const conf_case *c, conf_exec *e, char *msg, size_t mn) {
    if (conf_exec_run(r->t, r->k, call, c, e)) return 0;
    snprintf(msg, mn, "%s", e->msg);
    int res = e->st == IT_ERR_UNSUPPORTED ? 1 : 2;
    conf_exec_free(e);
    return res;
}

static void count(conf_ctx *ctx, conf_outcome o) {
    if (o == CONF_PASS)
        ctx->pass++;
    else if (o == CONF_FAIL)
        ctx->fail++;
    else
        ctx->skip++;
    if (ctx->stats) {
        if (o == CONF_PASS)
            ctx->stats->pass++;
        else if (o == CONF_FAIL)
            ctx->stats->fail++;
        else
            ctx->stats->skip++;
    }
}

/* Report a run that did not get to a comparison. */
static void report_error(conf_ctx *ctx, const char *label, int res, const char *msg) {
    if (res == 1) {
        conf_line(ctx, "fp64", label, "-", "skip: unsupported dtype");
        count(ctx, CONF_SKIP_UNSUPPORTED);
    } else {
        conf_line(ctx, "fp64", label, "-", "FAIL");
        printf("    -> %s\n", msg);
        count(ctx, CONF_FAIL);
    }
}

static void compare(conf_ctx *ctx, const char *label, const double *ana, const double *num, int64_t n) {
    double diff = 0, scale = 0;
    int64_t worst = 0;
    bool finite = true;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs(ana[i] - num[i]);
        finite = finite && isfinite(ana[i]) && isfinite(num[i]);
        if (d > diff) diff = d, worst = i;
        if (fabs(num[i]) > scale) scale = fabs(num[i]);
    }
    double rel = !finite ? NAN : scale > 0 ? diff / scale : diff;
    bool ok = finite && rel <= GRAD_TOL;
    char measure[64];
    snprintf(measure, sizeof measure, "maxrel=%.2e (%.0e)", rel, GRAD_TOL);
    conf_line(ctx, "fp64", label, measure, ok ? "OK" : "FAIL");
    if (!ok)
        printf("    -> element %lld: analytic %.12g, central difference %.12g (h = %g; %s)\n", (long long)worst,
               n ? ana[worst] : 0.0, n ? num[worst] : 0.0, GRAD_H,
               finite ? "a gradient formula disagrees with its forward" : "non-finite values");
    count(ctx, ok ? CONF_PASS : CONF_FAIL);
}

/* L = sum over out's view of out * g */
static double loss(const conf_case *c, const conf_exec *e, int out, const double *g) {
    const conf_operand *o = &c->ops[out];
    double l = 0;
    for (int64_t i = 0; i < conf_numel(o); i++) l += conf_get(o, e->out[out], i) * g[i];
    return l;
}

/* Numeric dL/d(operand wrt), element by element. */
static int numeric(const runner *r, conf_call_fn call, conf_case *c, int wrt, int out, const double *g, double *num,
                   char *msg, size_t mn) {
    conf_operand *w = &c->ops[wrt];
    for (int64_t i = 0; i < conf_numel(w); i++) {
        double v0 = conf_get(w, w->init, i), l[2];
        for (int s = 0; s < 2; s++) {
            conf_exec e;
            conf_set(w, i, s == 0 ? v0 + GRAD_H : v0 - GRAD_H);
            int res = exec(r, call, c, &e, msg, mn);
            conf_set(w, i, v0);
            if (res) return res;
            l[s] = loss(c, &e, out, g);
            conf_exec_free(&e);
        }
        num[i] = (l[0] - l[1]) / (2 * GRAD_H);
    }
    return 0;
}

/* The analytic gradient: operand `op` of a finished backward run, as doubles. */
static void grab(const conf_case *c, const conf_exec *e, int op, double *out) {
    for (int64_t i = 0; i < conf_numel(&c->ops[op]); i++) out[i] = conf_get(&c->ops[op], e->out[op], i);
}

static double *upstream(const char *label, int64_t n) {
    double *g = malloc((size_t)(n ? n : 1) * sizeof *g);
    conf_rng r = conf_rng_seed(label, 99);
    for (int64_t i = 0; g && i < n; i++) g[i] = conf_rng_uniform(&r, -1, 1);
    return g;
}

/* Copy a finished run's output storage into an input operand of another case. */
static void feed(conf_operand *dst, const conf_exec *e, int src) {
    memcpy(dst->init, e->out[src], (size_t)dst->storage * it_dtype_size(dst->dtype));
}

#define NATIVE(slot) (conf_kernels(ctx->dev.backend)->slot != NULL)

static void label_of(char *buf, size_t n, const char *base, const char *what, const runner *f) {
    snprintf(buf, n, "%s %s%s", base, what, f->on_cpu ? " (fwd on cpu)" : "");
}

/* ---------------------------------------------------------------- layernorm */

void conf_grad_layernorm_bwd(conf_ctx *ctx) {
    const int64_t shapes[2][2] = {{3, 5}, {2, 9}};
    runner f = pick(ctx, NATIVE(layernorm_fwd)), b = {&ctx->dev, conf_kernels(ctx->dev.backend), false};
    for (int k = 0; k < 2; k++) {
        char base[32], label[96], msg[768] = "";
        int64_t R = shapes[k][0], C = shapes[k][1], xs[2] = {R, C}, cs[1] = {C};
        snprintf(base, sizeof base, "%lldx%lld", (long long)R, (long long)C);
        conf_case fc, bc;
        conf_case_init(&fc, "fp64", "%s", base);
        fc.eps = 1e-5f;
        conf_rng r = conf_rng_seed(base, 1);
        conf_fill_uniform(conf_add(&fc, "x", CONF_IN, FP64, 2, xs, CONF_CONTIG, 0), &r, -1, 3);
        conf_fill_uniform(conf_add(&fc, "w", CONF_IN, FP64, 1, cs, CONF_CONTIG, 0), &r, 0.5, 1.5);
        conf_add(&fc, "b", CONF_IN, FP64, 1, cs, CONF_CONTIG, 0);
        conf_add(&fc, "y", CONF_OUT, FP64, 2, xs, CONF_CONTIG, 0);
        conf_add(&fc, "mean", CONF_OUT, FP64, 1, xs, CONF_CONTIG, 0);
        conf_add(&fc, "rstd", CONF_OUT, FP64, 1, xs, CONF_CONTIG, 0);
        double *g = upstream(base, R * C), *ana = malloc(sizeof(double) * (size_t)(R * C)),
               *num = malloc(sizeof(double) * (size_t)(R * C));
        conf_exec fe, be;
        label_of(label, sizeof label, base, "", &f);
        int res = exec(&f, conf_call_layernorm_fwd, &fc, &fe, msg, sizeof msg);
        if (res) {
            report_error(ctx, label, res, msg);
        } else {
            conf_case_init(&bc, "fp64", "%s bwd", base);
            conf_add(&bc, "dy", CONF_IN, FP64, 2, xs, CONF_CONTIG, 0);
            for (int64_t i = 0; i < R * C; i++) conf_set(&bc.ops[0], i, g[i]);
            memcpy(conf_add(&bc, "x", CONF_IN, FP64, 2, xs, CONF_CONTIG, 0)->init, fc.ops[0].init, (size_t)(R * C) * 8);
            memcpy(conf_add(&bc, "w", CONF_IN, FP64, 1, cs, CONF_CONTIG, 0)->init, fc.ops[1].init, (size_t)C * 8);
            feed(conf_add(&bc, "mean", CONF_IN, FP64, 1, xs, CONF_CONTIG, 0), &fe, 4);
            feed(conf_add(&bc, "rstd", CONF_IN, FP64, 1, xs, CONF_CONTIG, 0), &fe, 5);
            conf_add(&bc, "dx", CONF_OUT, FP64, 2, xs, CONF_CONTIG, 0);
            conf_add(&bc, "dw", CONF_OUT, FP64, 1, cs, CONF_CONTIG, 0);
            conf_add(&bc, "db", CONF_OUT, FP64, 1, cs, CONF_CONTIG, 0);
            conf_exec_free(&fe);
            res = exec(&b, conf_call_layernorm_bwd, &bc, &be, msg, sizeof msg);
            if (res) {
                report_error(ctx, label, res, msg);
            } else {
                const char *names[3] = {"dx", "dw", "db"};
                for (int wrt = 0; wrt < 3; wrt++) {
                    label_of(label, sizeof label, base, names[wrt], &f);
                    res = numeric(&f, conf_call_layernorm_fwd, &fc, wrt, 3, g, num, msg, sizeof msg);
                    if (res) {
                        report_error(ctx, label, res, msg);
                        break;
                    }
                    grab(&bc, &be, 5 + wrt, ana);
                    compare(ctx, label, ana, num, conf_numel(&fc.ops[wrt]));
                }
                conf_exec_free(&be);
            }
            conf_case_free(&bc);
        }
        free(g);
        free(ana);
        free(num);
        conf_case_free(&fc);
    }
}

/* ---------------------------------------------------------------- softmax */

void conf_grad_softmax_bwd(conf_ctx *ctx) {
    const struct {
        const char *label;
        int ndim;
        int64_t shape[3];
        float scale;
        bool causal;
    } shapes[] = {{"3x5 scale 0.7", 2, {3, 5}, 0.7f, false}, {"2x3x5 causal", 3, {2, 3, 5}, 1, true}};
    runner f = pick(ctx, NATIVE(softmax_fwd)), b = {&ctx->dev, conf_kernels(ctx->dev.backend), false};
    for (size_t k = 0; k < 2; k++) {
        char label[96], msg[768] = "";
        conf_case fc, bc;
        conf_case_init(&fc, "fp64", "%s", shapes[k].label);
        fc.sm.scale = shapes[k].scale;
        fc.sm.causal = shapes[k].causal;
        conf_rng r = conf_rng_seed(shapes[k].label, 2);
        conf_operand *x = conf_add(&fc, "x", CONF_IN, FP64, shapes[k].ndim, shapes[k].shape, CONF_CONTIG, 0);
        conf_fill_uniform(x, &r, -2, 2);
        conf_add(&fc, "y", CONF_OUT, FP64, shapes[k].ndim, shapes[k].shape, CONF_CONTIG, 0);
        int64_t n = conf_numel(x);
        double *g = upstream(shapes[k].label, n), *ana = malloc(sizeof(double) * (size_t)n),
               *num = malloc(sizeof(double) * (size_t)n);
        conf_exec fe, be;
        label_of(label, sizeof label, shapes[k].label, "dx", &f);
        int res = exec(&f, conf_call_softmax_fwd, &fc, &fe, msg, sizeof msg);
        if (res) {
            report_error(ctx, label, res, msg);
        } else {
            conf_case_init(&bc, "fp64", "%s bwd", shapes[k].label);
            bc.sm = fc.sm;
            feed(conf_add(&bc, "y", CONF_IN, FP64, shapes[k].ndim, shapes[k].shape, CONF_CONTIG, 0), &fe, 1);
            conf_operand *dy = conf_add(&bc, "dy", CONF_IN, FP64, shapes[k].ndim, shapes[k].shape, CONF_CONTIG, 0);
            for (int64_t i = 0; i < n; i++) conf_set(dy, i, g[i]);
            conf_add(&bc, "dx", CONF_OUT, FP64, shapes[k].ndim, shapes[k].shape, CONF_CONTIG, 0);
            conf_exec_free(&fe);
            res = exec(&b, conf_call_softmax_bwd, &bc, &be, msg, sizeof msg);
            if (!res) res = numeric(&f, conf_call_softmax_fwd, &fc, 0, 1, g, num, msg, sizeof msg);
            if (res) {
                report_error(ctx, label, res, msg);
            } else {
                grab(&bc, &be, 2, ana);
                compare(ctx, label, ana, num, n);
            }
            conf_exec_free(&be); /* zeroed or freed by exec on failure: safe either way */
            conf_case_free(&bc);
        }
        free(g);
        free(ana);
        free(num);
        conf_case_free(&fc);
    }
}

/* ---------------------------------------------------------------- cross entropy */

void conf_grad_cross_entropy_bwd(conf_ctx *ctx) {
    const int64_t N = 3, Vp = 7, valid = 6, ls[2] = {N, Vp};
    const int64_t targets[3] = {5, 0, 2};
    runner f = pick(ctx, NATIVE(cross_entropy_fwd)), b = {&ctx->dev, conf_kernels(ctx->dev.backend), false};
    char label[96], msg[768] = "";
    const char *base = "3x7 valid 6";
    conf_case fc, bc;
    conf_case_init(&fc, "fp64", "%s", base);
    fc.valid = valid;
    conf_rng r = conf_rng_seed(base, 3);
    conf_fill_uniform(conf_add(&fc, "logits", CONF_IN, FP64, 2, ls, CONF_CONTIG, 0), &r, -2, 2);
    conf_operand *tg = conf_add(&fc, "targets", CONF_IN, IT_DTYPE_I64, 1, ls, CONF_CONTIG, 0);
    for (int i = 0; i < 3; i++) conf_set_i64(tg, i, targets[i]);
    conf_add(&fc, "losses", CONF_OUT, FP64, 1, ls, CONF_CONTIG, 0);
    double *g = upstream(base, N), ana[21], num[21];
    conf_exec fe, be;
    label_of(label, sizeof label, base, "dlogits", &f);
    int res = exec(&f, conf_call_cross_entropy_fwd, &fc, &fe, msg, sizeof msg);
    if (res) {
        report_error(ctx, label, res, msg);
    } else {
        conf_exec_free(&fe);
        conf_case_init(&bc, "fp64", "%s bwd", base);
        bc.valid = valid;
        memcpy(conf_add(&bc, "logits", CONF_IN, FP64, 2, ls, CONF_CONTIG, 0)->init, fc.ops[0].init, 21 * 8);
        memcpy(conf_add(&bc, "targets", CONF_IN, IT_DTYPE_I64, 1, ls, CONF_CONTIG, 0)->init, tg->init, 3 * 8);
        conf_operand *dl = conf_add(&bc, "dlosses", CONF_IN, FP64, 1, ls, CONF_CONTIG, 0);
        for (int i = 0; i < 3; i++) conf_set(dl, i, g[i]);
        conf_add(&bc, "dlogits", CONF_OUT, FP64, 2, ls, CONF_CONTIG, 0);
        res = exec(&b, conf_call_cross_entropy_bwd, &bc, &be, msg, sizeof msg);
        if (!res) {
            res = numeric(&f, conf_call_cross_entropy_fwd, &fc, 0, 2, g, num, msg, sizeof msg);
            if (!res) {
                grab(&bc, &be, 3, ana);
                compare(ctx, label, ana, num, 21);
            }
            conf_exec_free(&be);
        }
        if (res) report_error(ctx, label, res, msg);
        conf_case_free(&bc);
    }
    free(g);
    conf_case_free(&fc);
}

/* ---------------------------------------------------------------- embedding */

void conf_grad_embedding_bwd(conf_ctx *ctx) {
    const int64_t N = 6, V = 4, C = 3, ns[1] = {N}, ws[2] = {V, C}, os[2] = {N, C};
    const int64_t idx[6] = {0, 3, 1, 3, 3, 0}; /* row 2 unused: its gradient is 0 */
    runner f = pick(ctx, NATIVE(embedding_fwd)), b = {&ctx->dev, conf_kernels(ctx->dev.backend), false};
    char label[96], msg[768] = "";
    const char *base = "N6 V4 C3 repeats";
    conf_case fc, bc;
    conf_case_init(&fc, "fp64", "%s", base);
    conf_operand *ix = conf_add(&fc, "idx", CONF_IN, IT_DTYPE_I64, 1, ns, CONF_CONTIG, 0);
    for (int i = 0; i < 6; i++) conf_set_i64(ix, i, idx[i]);
    conf_add(&fc, "weight", CONF_IN, FP64, 2, ws, CONF_CONTIG, 0);
    conf_add(&fc, "out", CONF_OUT, FP64, 2, os, CONF_CONTIG, 0);
    double *g = upstream(base, N * C), ana[12], num[12];
    conf_exec be;
    label_of(label, sizeof label, base, "dweight", &f);
    conf_case_init(&bc, "fp64", "%s bwd", base);
    memcpy(conf_add(&bc, "idx", CONF_IN, IT_DTYPE_I64, 1, ns, CONF_CONTIG, 0)->init, ix->init, 6 * 8);
    conf_operand *dout = conf_add(&bc, "dout", CONF_IN, FP64, 2, os, CONF_CONTIG, 0);
    for (int64_t i = 0; i < N * C; i++) conf_set(dout, i, g[i]);
    conf_operand *dw = conf_add(&bc, "dweight", CONF_INOUT, FP64, 2, ws, CONF_CONTIG, 0);
    memset(dw->init, 0, (size_t)(V * C) * 8); /* accumulated into: start from zero */
    int res = exec(&b, conf_call_embedding_bwd, &bc, &be, msg, sizeof msg);
    if (!res) {
        res = numeric(&f, conf_call_embedding_fwd, &fc, 1, 2, g, num, msg, sizeof msg);
        if (!res) {
            grab(&bc, &be, 2, ana);
            compare(ctx, label, ana, num, V * C);
        }
        conf_exec_free(&be);
    }
    if (res) report_error(ctx, label, res, msg);
    free(g);
    conf_case_free(&bc);
    conf_case_free(&fc);
}

/* ---------------------------------------------------------------- binary *_BWD */

void conf_grad_binary(conf_ctx *ctx) {
    const struct {
        it_binary_op bwd;
        it_unary_op fwd;
        const char *name;
    } ops[3] = {{IT_BINARY_GELU_BWD, IT_UNARY_GELU, "gelu_bwd"},
                {IT_BINARY_SILU_BWD, IT_UNARY_SILU, "silu_bwd"},
                {IT_BINARY_TANH_BWD, IT_UNARY_TANH, "tanh_bwd"}};
    const int64_t xs[2] = {4, 7}, n = 28;
    runner f = pick(ctx, NATIVE(unary)), b = {&ctx->dev, conf_kernels(ctx->dev.backend), false};
    for (int k = 0; k < 3; k++) {
        char label[96], msg[768] = "";
        label_of(label, sizeof label, ops[k].name, "4x7", &f);
        conf_case fc, bc;
        conf_case_init(&fc, "fp64", "%s", label);
        fc.op = (int)ops[k].fwd;
        conf_rng r = conf_rng_seed(ops[k].name, 4);
        conf_operand *x = conf_add(&fc, "x", CONF_IN, FP64, 2, xs, CONF_CONTIG, 0);
        conf_fill_uniform(x, &r, -3, 3);
        conf_add(&fc, "out", CONF_OUT, FP64, 2, xs, CONF_CONTIG, 0);
        double *g = upstream(ops[k].name, n), x0[28], yp[28], ym[28], y0[28], ana[28], num[28];
        for (int64_t i = 0; i < n; i++) x0[i] = conf_get(x, x->init, i);
        /* every element at once: output i depends on x_i only */
        double *dst[3] = {y0, yp, ym};
        const double shift[3] = {0, GRAD_H, -GRAD_H};
        int res = 0;
        for (int s = 0; s < 3 && !res; s++) {
            conf_exec e;
            for (int64_t i = 0; i < n; i++) conf_set(x, i, x0[i] + shift[s]);
            res = exec(&f, conf_call_unary, &fc, &e, msg, sizeof msg);
            if (!res) {
                grab(&fc, &e, 1, dst[s]);
                conf_exec_free(&e);
            }
        }
        for (int64_t i = 0; i < n; i++) conf_set(x, i, x0[i]);
        if (!res) {
            conf_exec be;
            conf_case_init(&bc, "fp64", "%s bwd", label);
            bc.op = (int)ops[k].bwd;
            /* a = forward input x (gelu, silu) or forward output y (tanh) */
            conf_operand *a = conf_add(&bc, "a", CONF_IN, FP64, 2, xs, CONF_CONTIG, 0);
            conf_operand *dy = conf_add(&bc, "b", CONF_IN, FP64, 2, xs, CONF_CONTIG, 0);
            for (int64_t i = 0; i < n; i++) {
                conf_set(a, i, ops[k].bwd == IT_BINARY_TANH_BWD ? y0[i] : x0[i]);
                conf_set(dy, i, g[i]);
            }
            conf_add(&bc, "out", CONF_OUT, FP64, 2, xs, CONF_CONTIG, 0);
            res = exec(&b, conf_call_binary, &bc, &be, msg, sizeof msg);
            if (!res) {
                grab(&bc, &be, 2, ana);
                for (int64_t i = 0; i < n; i++) num[i] = (yp[i] - ym[i]) / (2 * GRAD_H) * g[i];
                compare(ctx, label, ana, num, n);
                conf_exec_free(&be);
            }
            conf_case_free(&bc);
        }
        if (res) report_error(ctx, label, res, msg);
        free(g);
        conf_case_free(&fc);
    }
}

/* ---------------------------------------------------------------- rmsnorm */

void conf_grad_rmsnorm_bwd(conf_ctx *ctx) {
    const int64_t R = 3, C = 5, xs[2] = {R, C}, cs[1] = {C};
    runner f = pick(ctx, NATIVE(rmsnorm_fwd)), b = {&ctx->dev, conf_kernels(ctx->dev.backend), false};
    const char *base = "3x5";
    char label[96], msg[768] = "";
    conf_case fc, bc;
    conf_case_init(&fc, "fp64", "%s", base);
    fc.eps = 1e-5f;
    conf_rng r = conf_rng_seed("rmsnorm", 5);
    conf_fill_uniform(conf_add(&fc, "x", CONF_IN, FP64, 2, xs, CONF_CONTIG, 0), &r, -2, 2);
    conf_fill_uniform(conf_add(&fc, "w", CONF_IN, FP64, 1, cs, CONF_CONTIG, 0), &r, 0.5, 1.5);
    conf_add(&fc, "y", CONF_OUT, FP64, 2, xs, CONF_CONTIG, 0);
    conf_add(&fc, "rstd", CONF_OUT, FP64, 1, xs, CONF_CONTIG, 0);
    double *g = upstream("rmsnorm", R * C), ana[15], num[15];
    conf_exec fe, be;
    label_of(label, sizeof label, base, "", &f);
    int res = exec(&f, conf_call_rmsnorm_fwd, &fc, &fe, msg, sizeof msg);
    if (res) {
        report_error(ctx, label, res, msg);
    } else {
        conf_case_init(&bc, "fp64", "%s bwd", base);
        conf_operand *dy = conf_add(&bc, "dy", CONF_IN, FP64, 2, xs, CONF_CONTIG, 0);
        for (int64_t i = 0; i < R * C; i++) conf_set(dy, i, g[i]);
        memcpy(conf_add(&bc, "x", CONF_IN, FP64, 2, xs, CONF_CONTIG, 0)->init, fc.ops[0].init, (size_t)(R * C) * 8);
        memcpy(conf_add(&bc, "w", CONF_IN, FP64, 1, cs, CONF_CONTIG, 0)->init, fc.ops[1].init, (size_t)C * 8);
        feed(conf_add(&bc, "rstd", CONF_IN, FP64, 1, xs, CONF_CONTIG, 0), &fe, 3);
        conf_add(&bc, "dx", CONF_OUT, FP64, 2, xs, CONF_CONTIG, 0);
        conf_add(&bc, "dw", CONF_OUT, FP64, 1, cs, CONF_CONTIG, 0);
        conf_exec_free(&fe);
        res = exec(&b, conf_call_rmsnorm_bwd, &bc, &be, msg, sizeof msg);
        if (res) {
            report_error(ctx, label, res, msg);
        } else {
            const char *names[2] = {"dx", "dw"};
            for (int wrt = 0; wrt < 2; wrt++) {
                label_of(label, sizeof label, base, names[wrt], &f);
                res = numeric(&f, conf_call_rmsnorm_fwd, &fc, wrt, 2, g, num, msg, sizeof msg);
                if (res) {
                    report_error(ctx, label, res, msg);
                    break;
                }
                grab(&bc, &be, 4 + wrt, ana);
                compare(ctx, label, ana, num, conf_numel(&fc.ops[wrt]));
            }
            conf_exec_free(&be);
        }
        conf_case_free(&bc);
    }
    free(g);
    conf_case_free(&fc);
}

/* ---------------------------------------------------------------- rope
 * The contract makes rope(inverse) the backward of rope: for L = sum(rope(x) * g),
 * dL/dx = rope(g, !inverse). Both directions are checked. */

void conf_grad_rope(conf_ctx *ctx) {
    const int64_t B = 1, T = 3, H = 2, D = 4, n = B * T * H * D, xs[4] = {B, T, H, D}, cs[2] = {T, D / 2};
    runner f = {&ctx->dev, conf_kernels(ctx->dev.backend), false};
    for (int inverse = 0; inverse < 2; inverse++) {
        char label[96], msg[768] = "";
        snprintf(label, sizeof label, "1x3x2x4%s dx", inverse ? " inverse" : "");
        conf_case fc, bc;
        conf_case_init(&fc, "fp64", "%s", label);
        fc.op = inverse;
        conf_add(&fc, "x", CONF_IN, FP64, 4, xs, CONF_CONTIG, 0);
        conf_rope_tables(conf_add(&fc, "cos", CONF_IN, FP64, 2, cs, CONF_CONTIG, 0),
                         conf_add(&fc, "sin", CONF_IN, FP64, 2, cs, CONF_CONTIG, 0), D);
        conf_add(&fc, "y", CONF_OUT, FP64, 4, xs, CONF_CONTIG, 0);
        double *g = upstream(label, n), ana[24], num[24];
        conf_exec be;
        conf_case_init(&bc, "fp64", "%s bwd", label);
        bc.op = !inverse;
        conf_operand *dy = conf_add(&bc, "dy", CONF_IN, FP64, 4, xs, CONF_CONTIG, 0);
        for (int64_t i = 0; i < n; i++) conf_set(dy, i, g[i]);
        memcpy(conf_add(&bc, "cos", CONF_IN, FP64, 2, cs, CONF_CONTIG, 0)->init, fc.ops[1].init,
               (size_t)(T * D / 2) * 8);
        memcpy(conf_add(&bc, "sin", CONF_IN, FP64, 2, cs, CONF_CONTIG, 0)->init, fc.ops[2].init,
               (size_t)(T * D / 2) * 8);
        conf_add(&bc, "dx", CONF_OUT, FP64, 4, xs, CONF_CONTIG, 0);
        int res = exec(&f, conf_call_rope, &bc, &be, msg, sizeof msg);
        if (!res) {
            res = numeric(&f, conf_call_rope, &fc, 0, 3, g, num, msg, sizeof msg);
            if (!res) {
                grab(&bc, &be, 3, ana);
                compare(ctx, label, ana, num, n);
            }
            conf_exec_free(&be);
        }
        if (res) report_error(ctx, label, res, msg);
        free(g);
        conf_case_free(&bc);
        conf_case_free(&fc);
    }
}
