/* Cases for gemm, unary, binary and reduce. */
#include <math.h>
#include <string.h>

#include "conf.h"

/* ---------------------------------------------------------------- gemm */

it_status conf_call_gemm(const it_kernels *k, it_stream *s, const conf_case *c, it_tdesc *const *d) {
    /* On the stack, as the core passes it: an asynchronous backend copies it. */
    it_gemm_args g = {*d[0], *d[1], *d[2], c->trans_a, c->trans_b, c->alpha, c->beta};
    return k->gemm(s, &g);
}

typedef struct gemm_shape {
    const char *label;
    int64_t B, M, N, K;
    bool ta, tb;
    float alpha, beta;
    int64_t Ba, Bb;    /* batch dims of a and b as stored (1 or B) */
    unsigned bca, bcb; /* 1: batch stride 0 */
    conf_layout la, lb;
    bool specials; /* a NaN in row 1 and an Inf in row 3 of op(A) */
} gemm_shape;

/* alpha/beta are exact in every float type; beta == 0 runs with C poisoned (NaN): the
 * contract says C's previous contents are then ignored. */
static const gemm_shape gemm_shapes[] = {
    {"1x(7x13@13x5) nn", 1, 7, 5, 13, false, false, 1, 0, 1, 1, 0, 0, CONF_CONTIG, CONF_CONTIG, false},
    {"1x(7x13@13x5) tn", 1, 7, 5, 13, true, false, 1, 0, 1, 1, 0, 0, CONF_CONTIG, CONF_CONTIG, false},
    {"1x(7x13@13x5) nt", 1, 7, 5, 13, false, true, 1, 0, 1, 1, 0, 0, CONF_CONTIG, CONF_CONTIG, false},
    {"1x(7x13@13x5) tt a0.5 b-1.5", 1, 7, 5, 13, true, true, 0.5f, -1.5f, 1, 1, 0, 0, CONF_CONTIG, CONF_CONTIG, false},
    {"3x(7x13@13x5) b bcast stride0", 3, 7, 5, 13, false, false, 1, 0, 3, 3, 0, 1, CONF_CONTIG, CONF_CONTIG, false},
    {"3x(7x13@13x5) a batch 1", 3, 7, 5, 13, false, true, 1, 1, 1, 3, 0, 0, CONF_CONTIG, CONF_CONTIG, false},
    {"2x(7x13@13x5) a stepped b^T", 2, 7, 5, 13, false, false, 1, 0, 2, 2, 0, 0, CONF_STEPPED, CONF_TRANSPOSED, false},
    {"2x(9x6@6x4) ta a stepped", 2, 9, 4, 6, true, false, 2, 0.5f, 2, 2, 0, 0, CONF_STEPPED, CONF_OFFSET, false},
    {"1x(33x129@129x31) b1", 1, 33, 31, 129, false, false, 1, 1, 1, 1, 0, 0, CONF_CONTIG, CONF_CONTIG, false},
    {"1x(6x8@8x5) nan/inf in A", 1, 6, 5, 8, false, false, 1, 0, 1, 1, 0, 0, CONF_CONTIG, CONF_CONTIG, true},
    {"1x(1x1@1x1)", 1, 1, 1, 1, false, false, 1, 0, 1, 1, 0, 0, CONF_CONTIG, CONF_CONTIG, false},
    {"1x(1x13@13x1) nt", 1, 1, 1, 13, false, true, 1, 0, 1, 1, 0, 0, CONF_CONTIG, CONF_CONTIG, false},
    {"1x(4x0@0x3) K=0 b0.5", 1, 4, 3, 0, false, false, 1, 0.5f, 1, 1, 0, 0, CONF_CONTIG, CONF_CONTIG, false},
    {"1x(4x0@0x3) K=0 b0", 1, 4, 3, 0, false, false, 1, 0, 1, 1, 0, 0, CONF_CONTIG, CONF_CONTIG, false},
    {"1x(0x5@5x3) M=0", 1, 0, 3, 5, false, false, 1, 0, 1, 1, 0, 0, CONF_CONTIG, CONF_CONTIG, false},
    {"0x(4x5@5x3) B=0", 0, 4, 3, 5, false, false, 1, 0, 0, 0, 0, 0, CONF_CONTIG, CONF_CONTIG, false},
};

void conf_cases_gemm(conf_ctx *ctx) {
    for (int t = 0; t < 4; t++) {
        it_dtype dt = conf_float_dtypes[t];
        for (size_t k = 0; k < sizeof gemm_shapes / sizeof gemm_shapes[0]; k++) {
            const gemm_shape *g = &gemm_shapes[k];
            conf_case c;
            conf_case_init(&c, conf_dtype_short(dt), "%s", g->label);
            /* fp32 accumulation in a blocking order the backend chooses (fp64 for fp64);
             * bf16/fp16 round once at the end. */
            conf_case_tol(&c, CONF_TOL_SUM, dt);
            c.trans_a = g->ta;
            c.trans_b = g->tb;
            c.alpha = g->alpha;
            c.beta = g->beta;
            int64_t as[3] = {g->Ba, g->ta ? g->K : g->M, g->ta ? g->M : g->K};
            int64_t bs[3] = {g->Bb, g->tb ? g->N : g->K, g->tb ? g->K : g->N};
            int64_t cs[3] = {g->B, g->M, g->N};
            conf_operand *a = conf_add(&c, "a", CONF_IN, dt, 3, as, g->bca ? CONF_BCAST : g->la, g->bca);
            conf_add(&c, "b", CONF_IN, dt, 3, bs, g->bcb ? CONF_BCAST : g->lb, g->bcb);
            conf_add(&c, "c", g->beta != 0 ? CONF_INOUT : CONF_OUT, dt, 3, cs, CONF_CONTIG, 0);
            if (g->specials) {
                /* op(A) = A here (no transpose): row 1 gets a NaN, row 3 an Inf: the whole
                 * row of C is NaN / +-Inf whatever the summation order (B has no zeros). */
                conf_set(a, 1 * g->K + 2, NAN);
                conf_set(a, 3 * g->K + 5, INFINITY);
            }
            bool noref = conf_run(ctx, &c) == CONF_SKIP_NOREF;
            conf_case_free(&c);
            if (noref) break;
        }
    }
}

/* ---------------------------------------------------------------- unary */

it_status conf_call_unary(const it_kernels *k, it_stream *s, const conf_case *c, it_tdesc *const *d) {
    return k->unary(s, (it_unary_op)c->op, c->alpha, d[0], d[1]);
}

static const struct {
    const char *name;
    double lo, hi;
    bool inf_ok; /* +-Inf, +-0 and -1 give the same result under any correct formula */
} unary_ops[IT_UNARY_COUNT] = {
    [IT_UNARY_NEG] = {"neg", -4, 4, true},
    [IT_UNARY_SCALE] = {"scale", -4, 4, true},
    [IT_UNARY_EXP] = {"exp", -8, 8, true},
    [IT_UNARY_LOG] = {"log", 0.05, 8, true},
    [IT_UNARY_SQRT] = {"sqrt", 0.05, 8, true},
    [IT_UNARY_RSQRT] = {"rsqrt", 0.05, 8, true},
    [IT_UNARY_SQUARE] = {"square", -4, 4, true},
    [IT_UNARY_TANH] = {"tanh", -6, 6, true},
    /* gelu(-Inf) and silu(-Inf) are 0 in the limit but NaN from the formulas (-Inf * 0):
     * the contract states the formula, not the limit, so they get NaN and finite edges. */
    [IT_UNARY_GELU] = {"gelu", -6, 6, false},
    [IT_UNARY_SILU] = {"silu", -6, 6, false},
    [IT_UNARY_ADD_SCALAR] = {"add_scalar", -4, 4, true},
    [IT_UNARY_RECIP] = {"recip", -4, 4, true},
};

typedef struct ew_shape {
    const char *label;
    int ndim;
    int64_t shape[3];
    conf_layout la, lb;
    unsigned ma, mb; /* broadcast masks */
    int inplace;     /* 0 none, 1 out aliases the first input, 2 the second */
} ew_shape;

static const ew_shape unary_shapes[] = {
    {"7x13", 2, {7, 13}, CONF_CONTIG, CONF_CONTIG, 0, 0, 0},
    {"7x13 x^T", 2, {7, 13}, CONF_TRANSPOSED, CONF_CONTIG, 0, 0, 0},
    {"7x13 x stepped", 2, {7, 13}, CONF_STEPPED, CONF_CONTIG, 0, 0, 0},
    {"7x13 x bcast(1,0)", 2, {7, 13}, CONF_BCAST, CONF_CONTIG, 2, 0, 0},
    {"7x13 in-place", 2, {7, 13}, CONF_CONTIG, CONF_CONTIG, 0, 0, 1},
    {"4099", 1, {4099}, CONF_CONTIG, CONF_CONTIG, 0, 0, 0},
    {"1", 1, {1}, CONF_CONTIG, CONF_CONTIG, 0, 0, 0},
    {"0x13", 2, {0, 13}, CONF_CONTIG, CONF_CONTIG, 0, 0, 0},
};

void conf_cases_unary(conf_ctx *ctx) {
    for (int t = 0; t < 4; t++) {
        it_dtype dt = conf_float_dtypes[t];
        bool noref = false;
        for (int op = 0; op < IT_UNARY_COUNT && !noref; op++)
            for (size_t k = 0; k < sizeof unary_shapes / sizeof unary_shapes[0] && !noref; k++) {
                const ew_shape *e = &unary_shapes[k];
                conf_case c;
                conf_case_init(&c, conf_dtype_short(dt), "%s %s", unary_ops[op].name, e->label);
                conf_case_tol(&c, CONF_TOL_ELEM, dt);
                c.op = op;
                c.alpha = -1.75f; /* exact in every float type */
                conf_operand *x =
                    conf_add(&c, "x", e->inplace ? CONF_INOUT : CONF_IN, dt, e->ndim, e->shape, e->la, e->ma);
                conf_rng r = conf_rng_seed(c.label, (uint64_t)dt);
                conf_fill_uniform(x, &r, unary_ops[op].lo, unary_ops[op].hi);
                /* Specials on view elements 0..: NaN everywhere; Inf, zeros and -1 where the
                 * result is the same under any correct formula; saturating values otherwise. */
                conf_set(x, 0, NAN);
                if (unary_ops[op].inf_ok) {
                    const double sp[] = {INFINITY, -INFINITY, 0.0, -0.0, -1.0};
                    for (int i = 0; i < 5; i++) conf_set(x, 3 + 7 * i, sp[i]);
                } else {
                    const double sp[] = {30.0, -30.0, 0.0, -0.0};
                    for (int i = 0; i < 4; i++) conf_set(x, 3 + 7 * i, sp[i]);
                }
                if (e->inplace)
                    conf_add_alias(&c, "out", 0);
                else
                    conf_add(&c, "out", CONF_OUT, dt, e->ndim, e->shape, CONF_CONTIG, 0);
                noref = conf_run(ctx, &c) == CONF_SKIP_NOREF;
                conf_case_free(&c);
            }
    }
}

/* ---------------------------------------------------------------- binary */

it_status conf_call_binary(const it_kernels *k, it_stream *s, const conf_case *c, it_tdesc *const *d) {
    return k->binary(s, (it_binary_op)c->op, d[0], d[1], d[2]);
}

static const struct {
    const char *name;
    double alo, ahi, blo, bhi;
    bool inf_ok;
} binary_ops[IT_BINARY_COUNT] = {
    [IT_BINARY_ADD] = {"add", -4, 4, -4, 4, true},
    [IT_BINARY_SUB] = {"sub", -4, 4, -4, 4, true},
    [IT_BINARY_MUL] = {"mul", -4, 4, -4, 4, true},
    [IT_BINARY_DIV] = {"div", -4, 4, 0.25, 4, true},
    /* max/min propagate NaN from either side (torch.maximum / minimum), as the reference */
    [IT_BINARY_MAX] = {"max", -4, 4, -4, 4, true},
    [IT_BINARY_MIN] = {"min", -4, 4, -4, 4, true},
    [IT_BINARY_GELU_BWD] = {"gelu_bwd", -6, 6, -2, 2, false},
    [IT_BINARY_SILU_BWD] = {"silu_bwd", -6, 6, -2, 2, false},
    [IT_BINARY_TANH_BWD] = {"tanh_bwd", -0.999, 0.999, -2, 2, false},
};

static const ew_shape binary_shapes[] = {
    {"7x13", 2, {7, 13}, CONF_CONTIG, CONF_CONTIG, 0, 0, 0},
    {"7x13 b bcast(0,1)", 2, {7, 13}, CONF_CONTIG, CONF_BCAST, 0, 1, 0},
    {"7x13 a bcast(1,0)", 2, {7, 13}, CONF_BCAST, CONF_CONTIG, 2, 0, 0},
    {"7x13 a^T b stepped", 2, {7, 13}, CONF_TRANSPOSED, CONF_STEPPED, 0, 0, 0},
    {"3x4x5 a bcast(.,0,.) b bcast(0,.,0)", 3, {3, 4, 5}, CONF_BCAST, CONF_BCAST, 2, 5, 0},
    {"7x13 in-place out=a", 2, {7, 13}, CONF_CONTIG, CONF_CONTIG, 0, 0, 1},
    {"7x13 in-place out=b", 2, {7, 13}, CONF_CONTIG, CONF_CONTIG, 0, 0, 2},
    {"4099", 1, {4099}, CONF_CONTIG, CONF_CONTIG, 0, 0, 0},
    {"1", 1, {1}, CONF_CONTIG, CONF_CONTIG, 0, 0, 0},
    {"0x13", 2, {0, 13}, CONF_CONTIG, CONF_CONTIG, 0, 0, 0},
};

void conf_cases_binary(conf_ctx *ctx) {
    for (int t = 0; t < 4; t++) {
        it_dtype dt = conf_float_dtypes[t];
        bool noref = false;
        for (int op = 0; op < IT_BINARY_COUNT && !noref; op++)
            for (size_t k = 0; k < sizeof binary_shapes / sizeof binary_shapes[0] && !noref; k++) {
                const ew_shape *e = &binary_shapes[k];
                conf_case c;
                conf_case_init(&c, conf_dtype_short(dt), "%s %s", binary_ops[op].name, e->label);
                conf_case_tol(&c, CONF_TOL_ELEM, dt);
                c.op = op;
                conf_operand *a =
                    conf_add(&c, "a", e->inplace == 1 ? CONF_INOUT : CONF_IN, dt, e->ndim, e->shape, e->la, e->ma);
                conf_operand *b =
                    conf_add(&c, "b", e->inplace == 2 ? CONF_INOUT : CONF_IN, dt, e->ndim, e->shape, e->lb, e->mb);
                conf_rng r = conf_rng_seed(c.label, (uint64_t)dt);
                conf_fill_uniform(a, &r, binary_ops[op].alo, binary_ops[op].ahi);
                conf_fill_uniform(b, &r, binary_ops[op].blo, binary_ops[op].bhi);
                conf_set(a, 0, NAN);
                conf_set(b, 1, NAN);
                if (binary_ops[op].inf_ok) {
                    /* (a, b) pairs: Inf op finite, Inf op Inf, Inf op -Inf, x / 0, 0 / 0 */
                    const double pa[] = {INFINITY, -INFINITY, INFINITY, -INFINITY, 1.0, 0.0, -1.0};
                    const double pb[] = {2.0, -INFINITY, INFINITY, INFINITY, 0.0, 0.0, -0.0};
                    for (int i = 0; i < 7; i++) {
                        conf_set(a, 4 + 9 * i, pa[i]);
                        conf_set(b, 4 + 9 * i, pb[i]);
                    }
                }
                if (e->inplace)
                    conf_add_alias(&c, "out", e->inplace - 1);
                else
                    conf_add(&c, "out", CONF_OUT, dt, e->ndim, e->shape, CONF_CONTIG, 0);
                noref = conf_run(ctx, &c) == CONF_SKIP_NOREF;
                conf_case_free(&c);
            }
    }
}

/* swiglu_low_fwd / _bwd (optional, fused): y = silu(a) * b and its backward over bf16 and
 * fp16 operands of one contiguous shape, computed in fp32 and rounded once: the bound is the
 * elementwise one of the half dtype (an exp that differs in fp32's last place moves a
 * rounding tie by one half ulp). Sizes below, at and past a thread's share; NaN propagates. */
it_status conf_call_swiglu_low_fwd(const it_kernels *k, it_stream *s, const conf_case *c, it_tdesc *const *d) {
    (void)c;
    return k->swiglu_low_fwd(s, d[0], d[1], d[2]);
}

it_status conf_call_swiglu_low_bwd(const it_kernels *k, it_stream *s, const conf_case *c, it_tdesc *const *d) {
    (void)c;
    return k->swiglu_low_bwd(s, d[0], d[1], d[2], d[3], d[4]);
}

static const ew_shape swiglu_shapes[] = {
    {"7x13", 2, {7, 13}, CONF_CONTIG, CONF_CONTIG, 0, 0, 0},
    {"7x13 in-place y=a", 2, {7, 13}, CONF_CONTIG, CONF_CONTIG, 0, 0, 1},
    {"7x13 in-place y=b", 2, {7, 13}, CONF_CONTIG, CONF_CONTIG, 0, 0, 2},
    {"4099", 1, {4099}, CONF_CONTIG, CONF_CONTIG, 0, 0, 0},
    {"3x64x300", 3, {3, 64, 300}, CONF_CONTIG, CONF_CONTIG, 0, 0, 0},
    {"1", 1, {1}, CONF_CONTIG, CONF_CONTIG, 0, 0, 0},
    {"0x13", 2, {0, 13}, CONF_CONTIG, CONF_CONTIG, 0, 0, 0},
};

static void swiglu_cases(conf_ctx *ctx, bool bwd) {
    static const it_dtype lows[2] = {IT_DTYPE_BF16, IT_DTYPE_FP16};
    bool noref = false;
    for (int t = 0; t < 2 && !noref; t++) {
        it_dtype dt = lows[t];
        for (size_t k = 0; k < sizeof swiglu_shapes / sizeof swiglu_shapes[0] && !noref; k++) {
            const ew_shape *e = &swiglu_shapes[k];
            if (bwd && e->inplace) continue; /* da and db are new buffers */
            conf_case c;
            conf_case_init(&c, conf_dtype_short(dt), "%s", e->label);
            conf_case_tol(&c, CONF_TOL_ELEM, dt);
            conf_operand *a =
                conf_add(&c, "a", e->inplace == 1 ? CONF_INOUT : CONF_IN, dt, e->ndim, e->shape, CONF_CONTIG, 0);
            conf_operand *b =
                conf_add(&c, "b", e->inplace == 2 ? CONF_INOUT : CONF_IN, dt, e->ndim, e->shape, CONF_CONTIG, 0);
            conf_rng r = conf_rng_seed(c.label, (uint64_t)dt + (bwd ? 7 : 0));
            conf_fill_uniform(a, &r, -8, 8);
            conf_fill_uniform(b, &r, -3, 3);
            if (e->shape[0] > 1 || e->ndim > 1) {
                conf_set(a, 0, NAN);
                conf_set(b, 1, NAN);
            }
            if (bwd) {
                conf_operand *dy = conf_add(&c, "dy", CONF_IN, dt, e->ndim, e->shape, CONF_CONTIG, 0);
                conf_fill_uniform(dy, &r, -2, 2);
                conf_add(&c, "da", CONF_OUT, dt, e->ndim, e->shape, CONF_CONTIG, 0);
                conf_add(&c, "db", CONF_OUT, dt, e->ndim, e->shape, CONF_CONTIG, 0);
            } else if (e->inplace) {
                conf_add_alias(&c, "y", e->inplace - 1);
            } else {
                conf_add(&c, "y", CONF_OUT, dt, e->ndim, e->shape, CONF_CONTIG, 0);
            }
            noref = conf_run(ctx, &c) == CONF_SKIP_NOREF;
            conf_case_free(&c);
        }
    }
}

void conf_cases_swiglu_low_fwd(conf_ctx *ctx) { swiglu_cases(ctx, false); }
void conf_cases_swiglu_low_bwd(conf_ctx *ctx) { swiglu_cases(ctx, true); }

/* ---------------------------------------------------------------- reduce */

it_status conf_call_reduce(const it_kernels *k, it_stream *s, const conf_case *c, it_tdesc *const *d) {
    return k->reduce(s, (it_reduce_op)c->op, d[0], d[1]);
}

typedef struct red_shape {
    const char *label;
    int ndim;
    int64_t shape[3];
    unsigned reduce_mask; /* dims reduced to 1 */
    conf_layout lx;
    bool specials;
} red_shape;

static const red_shape red_shapes[] = {
    {"7x13 -> 7x1", 2, {7, 13}, 2, CONF_CONTIG, false},
    {"7x13 -> 1x13", 2, {7, 13}, 1, CONF_CONTIG, false},
    {"7x13 -> 1x1", 2, {7, 13}, 3, CONF_CONTIG, false},
    {"3x5x7 -> 1x5x1", 3, {3, 5, 7}, 5, CONF_CONTIG, false},
    {"7x13 x^T -> 7x1", 2, {7, 13}, 2, CONF_TRANSPOSED, false},
    {"7x13 x stepped -> 1x13", 2, {7, 13}, 1, CONF_STEPPED, false},
    {"7x13 nan/inf rows -> 7x1", 2, {7, 13}, 2, CONF_CONTIG, true},
    {"2x4099 -> 2x1", 2, {2, 4099}, 2, CONF_CONTIG, false},
    {"4099x3 -> 1x3", 2, {4099, 3}, 1, CONF_CONTIG, false},
    {"7x13 -> 7x13 (none)", 2, {7, 13}, 0, CONF_CONTIG, false},
    {"7x0 -> 7x1 (empty sums)", 2, {7, 0}, 2, CONF_CONTIG, false},
    {"0x5 -> 0x1", 2, {0, 5}, 2, CONF_CONTIG, false},
};

void conf_cases_reduce(conf_ctx *ctx) {
    static const char *names[IT_REDUCE_COUNT] = {"sum", "mean", "max", "sumsq"};
    for (int t = 0; t < 4; t++) {
        it_dtype dt = conf_float_dtypes[t];
        bool noref = false;
        for (int op = 0; op < IT_REDUCE_COUNT && !noref; op++)
            for (size_t k = 0; k < sizeof red_shapes / sizeof red_shapes[0] && !noref; k++) {
                const red_shape *e = &red_shapes[k];
                conf_case c;
                conf_case_init(&c, conf_dtype_short(dt), "%s %s", names[op], e->label);
                conf_case_tol(&c, CONF_TOL_SUM, dt); /* "fixed order" is the backend's own order */
                c.op = op;
                conf_operand *x = conf_add(&c, "x", CONF_IN, dt, e->ndim, e->shape, e->lx, 0);
                conf_rng r = conf_rng_seed(c.label, (uint64_t)dt);
                /* A nonzero mean keeps the sums away from cancellation, so NMSE measures
                 * the kernel, not the conditioning of the data. */
                conf_fill_uniform(x, &r, -1, 2);
                if (e->specials) {
                    conf_set(x, 1 * 13 + 4, NAN);      /* row 1: NaN for every op */
                    conf_set(x, 3 * 13 + 7, INFINITY); /* row 3: +Inf for every op */
                }
                int64_t os[3];
                for (int d = 0; d < e->ndim; d++) os[d] = (e->reduce_mask >> d) & 1 ? 1 : e->shape[d];
                conf_add(&c, "out", CONF_OUT, dt, e->ndim, os, CONF_CONTIG, 0);
                noref = conf_run(ctx, &c) == CONF_SKIP_NOREF;
                conf_case_free(&c);
            }
    }
}
