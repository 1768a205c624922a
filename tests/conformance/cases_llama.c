/* Cases for the LLaMA-3 / Mixtral slots: rmsnorm_fwd/bwd, rope, topk.
 *
 * rmsnorm sums squares over rows of up to 4099 elements (SUM bounds); rope is two products
 * and a sum per output (ELEM); topk selects without arithmetic and its tie rule (the lower
 * index first) is in the contract, so values and indices are compared bitwise. topk gets no
 * NaN: the contract does not say where NaN ranks. */
#include <math.h>
#include <stdlib.h>

#include "conf.h"

static it_dtype stat_dtype(it_dtype x) { return x == IT_DTYPE_FP64 ? IT_DTYPE_FP64 : IT_DTYPE_FP32; }

/* ---------------------------------------------------------------- rmsnorm */

it_status conf_call_rmsnorm_fwd(const it_kernels *k, it_stream *s, const conf_case *c, it_tdesc *const *d) {
    return k->rmsnorm_fwd(s, d[0], d[1], c->eps, d[2], d[3]);
}

it_status conf_call_rmsnorm_bwd(const it_kernels *k, it_stream *s, const conf_case *c, it_tdesc *const *d) {
    (void)c;
    return k->rmsnorm_bwd(s, d[0], d[1], d[2], d[3], d[4], d[5]);
}

typedef struct rms_shape {
    const char *label;
    int ndim;
    int64_t shape[3];
    conf_layout lx, lw;
    bool nan_row;
} rms_shape;

static const rms_shape rms_shapes[] = {
    {"7x13", 2, {7, 13}, CONF_CONTIG, CONF_CONTIG, false},
    {"7x13 nan in row 2", 2, {7, 13}, CONF_CONTIG, CONF_CONTIG, true},
    {"2x3x13 rstd 2x3", 3, {2, 3, 13}, CONF_CONTIG, CONF_CONTIG, false},
    {"7x13 x^T", 2, {7, 13}, CONF_TRANSPOSED, CONF_CONTIG, false},
    {"7x13 x,w stepped", 2, {7, 13}, CONF_STEPPED, CONF_STEPPED, false},
    {"7x13 w bcast stride 0", 2, {7, 13}, CONF_CONTIG, CONF_BCAST, false},
    {"64x33", 2, {64, 33}, CONF_CONTIG, CONF_CONTIG, false},
    {"3x4099", 2, {3, 4099}, CONF_CONTIG, CONF_CONTIG, false},
    {"1x1", 2, {1, 1}, CONF_CONTIG, CONF_CONTIG, false},
    {"0x13", 2, {0, 13}, CONF_CONTIG, CONF_CONTIG, false},
};

/* rstd for rmsnorm_bwd from the CPU forward (left random if the CPU cannot: then the
 * reference reports "no cpu reference" anyway). */
static void host_prepare_rmsnorm(conf_operand *x, conf_operand *w, conf_operand *rstd, float eps) {
    int64_t n = conf_numel(x);
    void *y = malloc((size_t)(n ? n : 1) * it_dtype_size(x->dtype));
    if (!y) return;
    it_tdesc xd = conf_host_desc(x), wd = conf_host_desc(w), rd = conf_host_desc(rstd), yd = xd;
    yd.data = y;
    int64_t st = 1;
    for (int d = x->ndim - 1; d >= 0; d--) {
        yd.strides[d] = st;
        st *= x->shape[d] > 0 ? x->shape[d] : 1;
    }
    (void)it_cpu_kernels()->rmsnorm_fwd(NULL, &xd, &wd, eps, &yd, &rd);
    free(y);
}

static void rms_cases(conf_ctx *ctx, bool bwd) {
    const float eps = 1e-5f;
    for (int t = 0; t < 4; t++) {
        it_dtype dt = conf_float_dtypes[t], sdt = stat_dtype(dt);
        for (size_t k = 0; k < sizeof rms_shapes / sizeof rms_shapes[0]; k++) {
            const rms_shape *e = &rms_shapes[k];
            if (bwd && e->nan_row) continue;
            conf_case c;
            conf_case_init(&c, conf_dtype_short(dt), "%s", e->label);
            conf_case_tol(&c, CONF_TOL_SUM, dt); /* the sum of squares' order is the backend's */
            c.eps = eps;
            int64_t C = e->shape[e->ndim - 1], cs[1] = {C};
            int sn = e->ndim - 1; /* rstd: the leading dims of x */
            conf_rng r = conf_rng_seed(c.label, (uint64_t)dt);
            if (!bwd) {
                conf_operand *x = conf_add(&c, "x", CONF_IN, dt, e->ndim, e->shape, e->lx, 0);
                conf_fill_uniform(x, &r, -2, 2);
                if (e->nan_row) conf_set(x, 2 * C + 5, NAN);
                conf_fill_uniform(conf_add(&c, "w", CONF_IN, dt, 1, cs, e->lw, 1), &r, 0.5, 1.5);
                conf_add(&c, "y", CONF_OUT, dt, e->ndim, e->shape, CONF_CONTIG, 0);
                conf_add(&c, "rstd", CONF_OUT, sdt, sn, e->shape, CONF_CONTIG, 0);
            } else {
                conf_add(&c, "dy", CONF_IN, dt, e->ndim, e->shape, e->lx, 0);
                conf_operand *x = conf_add(&c, "x", CONF_IN, dt, e->ndim, e->shape, e->lx, 0);
                conf_fill_uniform(x, &r, -2, 2);
                conf_operand *w = conf_add(&c, "w", CONF_IN, dt, 1, cs, e->lw, 1);
                conf_fill_uniform(w, &r, 0.5, 1.5);
                conf_operand *rstd = conf_add(&c, "rstd", CONF_IN, sdt, sn, e->shape, CONF_CONTIG, 0);
                host_prepare_rmsnorm(x, w, rstd, eps);
                conf_add(&c, "dx", CONF_OUT, dt, e->ndim, e->shape, CONF_CONTIG, 0);
                conf_add(&c, "dw", CONF_OUT, dt, 1, cs, CONF_CONTIG, 0);
            }
            bool noref = conf_run(ctx, &c) == CONF_SKIP_NOREF;
            conf_case_free(&c);
            if (noref) break;
        }
    }
}

void conf_cases_rmsnorm_fwd(conf_ctx *ctx) { rms_cases(ctx, false); }
void conf_cases_rmsnorm_bwd(conf_ctx *ctx) { rms_cases(ctx, true); }

/* ---------------------------------------------------------------- rope */

it_status conf_call_rope(const it_kernels *k, it_stream *s, const conf_case *c, it_tdesc *const *d) {
    return k->rope(s, d[0], d[1], d[2], c->op != 0, d[3]);
}

/* cos / sin (T, D/2) of the angles t * 10000^(-2i/D), LLaMA's frequencies. */
void conf_rope_tables(conf_operand *cos_t, conf_operand *sin_t, int64_t D) {
    int64_t T = cos_t->shape[0], P = cos_t->shape[1];
    for (int64_t t = 0; t < T; t++)
        for (int64_t i = 0; i < P; i++) {
            double a = (double)t * pow(10000.0, -2.0 * (double)i / (double)D);
            conf_set(cos_t, t * P + i, cos(a));
            conf_set(sin_t, t * P + i, sin(a));
        }
}

typedef struct rope_shape {
    const char *label;
    int64_t B, T, H, D;
    bool inverse;
    conf_layout lx, lcs;
    bool nan;
} rope_shape;

static const rope_shape rope_shapes[] = {
    {"1x3x2x8", 1, 3, 2, 8, false, CONF_CONTIG, CONF_CONTIG, false},
    {"1x3x2x8 inverse", 1, 3, 2, 8, true, CONF_CONTIG, CONF_CONTIG, false},
    {"1x3x2x8 nan in x", 1, 3, 2, 8, false, CONF_CONTIG, CONF_CONTIG, true},
    {"2x5x3x16 x stepped", 2, 5, 3, 16, false, CONF_STEPPED, CONF_CONTIG, false},
    {"2x5x3x16 x^T inverse", 2, 5, 3, 16, true, CONF_TRANSPOSED, CONF_CONTIG, false},
    {"2x4x2x8 cos,sin stepped", 2, 4, 2, 8, false, CONF_CONTIG, CONF_STEPPED, false},
    {"2x4x2x8 cos,sin bcast(0,1)", 2, 4, 2, 8, false, CONF_CONTIG, CONF_BCAST, false},
    {"1x2x1x4098", 1, 2, 1, 4098, false, CONF_CONTIG, CONF_CONTIG, false},
    {"1x1x1x2", 1, 1, 1, 2, false, CONF_CONTIG, CONF_CONTIG, false},
    {"0x3x2x8", 0, 3, 2, 8, false, CONF_CONTIG, CONF_CONTIG, false},
};

void conf_cases_rope(conf_ctx *ctx) {
    for (int t = 0; t < 4; t++) {
        it_dtype dt = conf_float_dtypes[t];
        for (size_t k = 0; k < sizeof rope_shapes / sizeof rope_shapes[0]; k++) {
            const rope_shape *e = &rope_shapes[k];
            conf_case c;
            conf_case_init(&c, conf_dtype_short(dt), "%s", e->label);
            conf_case_tol(&c, CONF_TOL_ELEM, dt); /* two products and a sum per output */
            c.op = e->inverse;
            int64_t xs[4] = {e->B, e->T, e->H, e->D}, cs[2] = {e->T, e->D / 2};
            conf_operand *x = conf_add(&c, "x", CONF_IN, dt, 4, xs, e->lx, 0);
            if (e->nan) conf_set(x, 5, NAN); /* both outputs of its pair are NaN */
            conf_operand *co = conf_add(&c, "cos", CONF_IN, dt, 2, cs, e->lcs, 1);
            conf_operand *si = conf_add(&c, "sin", CONF_IN, dt, 2, cs, e->lcs, 1);
            conf_rope_tables(co, si, e->D);
            conf_add(&c, "y", CONF_OUT, dt, 4, xs, CONF_CONTIG, 0);
            bool noref = conf_run(ctx, &c) == CONF_SKIP_NOREF;
            conf_case_free(&c);
            if (noref) break;
        }
    }
}

/* ---------------------------------------------------------------- topk */

it_status conf_call_topk(const it_kernels *k, it_stream *s, const conf_case *c, it_tdesc *const *d) {
    return k->topk(s, d[0], c->valid, d[1], d[2]);
}

typedef struct topk_shape {
    const char *label;
    int64_t N, E, k;
    conf_layout lx;
    bool ties; /* values from {-0, 0, 1, 2, +-Inf}: many ties, signed zeros compare equal */
} topk_shape;

static const topk_shape topk_shapes[] = {
    {"7x13 k3", 7, 13, 3, CONF_CONTIG, false},
    {"7x13 k1", 7, 13, 1, CONF_CONTIG, false},
    {"7x13 k13", 7, 13, 13, CONF_CONTIG, false},
    {"5x9 k4 ties, +-0, +-inf", 5, 9, 4, CONF_CONTIG, true},
    {"6x8 k8 ties", 6, 8, 8, CONF_CONTIG, true},
    {"7x13 k3 x^T", 7, 13, 3, CONF_TRANSPOSED, false},
    {"7x13 k5 x stepped", 7, 13, 5, CONF_STEPPED, false},
    {"2x4099 k5", 2, 4099, 5, CONF_CONTIG, false},
    {"3x1 k1", 3, 1, 1, CONF_CONTIG, false},
    {"0x13 k2", 0, 13, 2, CONF_CONTIG, false},
};

void conf_cases_topk(conf_ctx *ctx) {
    for (int t = 0; t < 4; t++) {
        it_dtype dt = conf_float_dtypes[t];
        for (size_t k = 0; k < sizeof topk_shapes / sizeof topk_shapes[0]; k++) {
            const topk_shape *e = &topk_shapes[k];
            conf_case c;
            conf_case_init(&c, conf_dtype_short(dt), "%s", e->label);
            conf_case_tol(&c, CONF_TOL_EXACT, dt); /* a selection: no arithmetic, ties ordered by index */
            c.valid = e->k;
            int64_t xs[2] = {e->N, e->E}, os[2] = {e->N, e->k};
            conf_operand *x = conf_add(&c, "x", CONF_IN, dt, 2, xs, e->lx, 0);
            conf_rng r = conf_rng_seed(c.label, (uint64_t)dt);
            conf_fill_uniform(x, &r, -4, 4);
            if (e->ties) {
                const double pool[6] = {-0.0, 0.0, 1.0, 2.0, INFINITY, -INFINITY};
                for (int64_t i = 0; i < e->N * e->E; i++) conf_set(x, i, pool[conf_rng_int(&r, 0, 5)]);
            }
            conf_add(&c, "values", CONF_OUT, dt, 2, os, CONF_CONTIG, 0);
            conf_add(&c, "indices", CONF_OUT, IT_DTYPE_I32, 2, os, CONF_CONTIG, 0);
            bool noref = conf_run(ctx, &c) == CONF_SKIP_NOREF;
            conf_case_free(&c);
            if (noref) break;
        }
    }
}
