/* Finite-difference gradient checks, in fp64 on the cpu device, for every differentiable op
 * of ops.h (the GPT-2 set and the LLaMA-3 / Mixtral set: rmsnorm, rope, grouped-query
 * attention, topk, index_add, moe), a composed GPT-2-like block, a LLaMA-like block, and the
 * autograd engine's bookkeeping (no-grad mode, accumulation, zero_grad, refusal of a
 * non-scalar loss, release of saved tensors).
 *
 * Method: for each input x that requires grad, the objective is L = sum(out * R) with a
 * fixed pseudo-random R of out's shape (or the op's own 0-D output, e.g. cross entropy).
 * The analytic gradient comes from it_backward(L); the numeric one from central differences
 *     dL/dx[j] ~ (L(x + h e_j) - L(x - h e_j)) / 2h,   h = 1e-6,
 * on every element, with the forward recomputed under it_grad_set_enabled(false) and L
 * summed on the host.
 *
 * Tolerance |analytic - numeric| <= 1e-6 * max(1, |numeric|): in fp64 the central
 * difference has truncation error O(h^2 f''') ~ 1e-12 and rounding error
 * O(eps |L| / h) ~ 2.2e-16 / 1e-6 ~ 1e-10 (relative to the O(1) objectives used here), so
 * 1e-6 leaves four orders of magnitude of margin while any wrong formula (a missing term, a
 * transposed operand, a wrong broadcast reduction) shows up at O(1e-2) or more. The ops pass
 * some constants to kernels as float (scale factors, a mean's 1/count), which costs up to
 * ~6e-8 relative: still well inside the bound.
 *
 * topk and moe are differentiable only piecewise: their selection (which entries, which
 * experts) is a step function of the input. Their inputs are drawn so that every selection
 * has a margin far above what a step of h can move (entries >= 0.25 apart; router logits
 * whose top-k gaps exceed 1e-3 while a step moves a logit by <= 4e-6), so every central
 * difference stays on one smooth piece. rope's cos/sin tables are constants of the
 * objective (held by the op's context), not inputs of the check. */
#include <inttypes.h>
#include <stdint.h>

#include "infinitrain/ops.h"
#include "it_test.h"

#define GC_H 1e-6
#define GC_TOL 1e-6
#define GC_MAX_IN 20
#define GC_MAX_PRINTS 8

static it_device cpu;
static double worst_rel; /* over every check */

/* ------------------------------------------------------------------ helpers */

/* A 64-bit LCG (Knuth's MMIX constants); the top 53 bits make a double in [0, 1). */
static uint64_t lcg_state = 0x2545F4914F6CDD1DULL;
static double urand(void) {
    lcg_state = lcg_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(lcg_state >> 11) * (1.0 / 9007199254740992.0);
}

static size_t mem_used(void) {
    it_mem_stats s;
    if (it_mem_stats_get(cpu, &s)) return (size_t)-1;
    return s.used;
}

static int64_t numel_of(int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    return n;
}

/* SHAPE(3, 4) -> 2, (int64_t[]){3, 4}: the (ndim, shape) argument pair. */
#define SHAPE(...)                                                                                                     \
    (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]) { __VA_ARGS__ }

/* An fp64 tensor with values uniform in [lo, hi), owned by the current scope. */
static it_tensor *randt(int ndim, const int64_t *shape, double lo, double hi) {
    int64_t n = numel_of(ndim, shape);
    double *h = malloc((size_t)(n ? n : 1) * sizeof(double));
    if (!h) return NULL;
    for (int64_t i = 0; i < n; i++) h[i] = lo + (hi - lo) * urand();
    it_tensor *t = it_tensor_from_host(cpu, IT_DTYPE_FP64, ndim, shape, h, (size_t)n * sizeof(double));
    free(h);
    return t;
}

/* An int32 or int64 index tensor with the given values. */
static it_tensor *idxt(it_dtype dt, int ndim, const int64_t *shape, const int64_t *vals) {
    int64_t n = numel_of(ndim, shape);
    if (dt == IT_DTYPE_I64) return it_tensor_from_host(cpu, dt, ndim, shape, vals, (size_t)n * sizeof(int64_t));
    int32_t v32[64];
    if (n > 64) return NULL;
    for (int64_t i = 0; i < n; i++) v32[i] = (int32_t)vals[i];
    return it_tensor_from_host(cpu, dt, ndim, shape, v32, (size_t)n * sizeof(int32_t));
}

/* Copy a tensor (any view, fp64) to a new host buffer in row-major order. */
static double *to_host(it_tensor *t) {
    if (!t) return NULL;
    int64_t n = it_tensor_numel(t);
    double *h = malloc((size_t)(n ? n : 1) * sizeof(double));
    if (h && it_tensor_copy_to_host(t, h, (size_t)n * sizeof(double))) {
        free(h);
        return NULL;
    }
    return h;
}

static void shape_str(const it_tensor *t, char *buf, size_t size) {
    size_t k = (size_t)snprintf(buf, size, "(");
    for (int i = 0; i < it_tensor_ndim(t) && k < size; i++)
        k += (size_t)snprintf(buf + k, size - k, "%s%" PRId64, i ? "," : "", it_tensor_shape(t)[i]);
    if (k < size) snprintf(buf + k, size - k, ")");
}

static void index_str(const it_tensor *t, int64_t flat, char *buf, size_t size) {
    int64_t idx[IT_MAX_DIMS];
    int nd = it_tensor_ndim(t);
    for (int d = nd - 1; d >= 0; d--) {
        idx[d] = flat % it_tensor_shape(t)[d];
        flat /= it_tensor_shape(t)[d];
    }
    size_t k = (size_t)snprintf(buf, size, "[");
    for (int d = 0; d < nd && k < size; d++)
        k += (size_t)snprintf(buf + k, size - k, "%s%" PRId64, d ? "," : "", idx[d]);
    if (k < size) snprintf(buf + k, size - k, "]");
}

/* ------------------------------------------------------------------ the checker */

/* Builds the op's output from the inputs (the same call with grad on and off). */
typedef it_tensor *(*gc_fn)(const void *ctx, it_tensor *const *in);

/* L for the current inputs under no-grad: sum(out * R) on the host (R given as rh), or the
 * 0-D output itself when rh is NULL. NAN when the forward fails. */
static double eval_objective(gc_fn fn, const void *ctx, it_tensor *const *in, const double *rh) {
    double L = NAN;
    it_scope_begin();
    it_tensor *out = fn(ctx, in);
    double *oh = to_host(out);
    if (oh) {
        int64_t n = it_tensor_numel(out);
        if (rh) {
            L = 0.0;
            for (int64_t i = 0; i < n; i++) L += oh[i] * rh[i];
        } else {
            L = oh[0];
        }
    }
    free(oh);
    it_scope_end();
    return L;
}

/* Check d(objective)/d(in[i]) for every floating input, analytic against numeric. The
 * inputs belong to the caller's scope; everything made here is released before returning.
 * Returns the largest relative error seen. */
static double gradcheck(const char *op, gc_fn fn, const void *ctx, int n, it_tensor *const *in) {
    double max_rel = 0.0;
    int64_t checked = 0;
    bool failed_run = false;
    if (n > GC_MAX_IN) {
        CHECK_MSG(n <= GC_MAX_IN, "%s: too many inputs", op);
        return INFINITY;
    }
    for (int i = 0; i < n; i++) {
        if (!in[i]) {
            CHECK_MSG(in[i] != NULL, "%s: input %d could not be created: %s", op, i, it_last_error());
            return INFINITY;
        }
    }
    it_scope_begin();
    bool diff[GC_MAX_IN] = {0};
    for (int i = 0; i < n; i++) {
        diff[i] = it_dtype_is_float(it_tensor_dtype(in[i]));
        if (!diff[i]) continue;
        CHECK_OK(it_tensor_set_requires_grad(in[i], true));
        if (it_tensor_grad(in[i])) CHECK_OK(it_zero_grad(&in[i], 1)); /* reused input: start from 0 */
    }

    /* Analytic. */
    it_tensor *out = fn(ctx, in);
    double *rh = NULL;
    it_tensor *L = NULL;
    if (!out) {
        CHECK_MSG(out != NULL, "%s: forward failed: %s", op, it_last_error());
        failed_run = true;
        goto done;
    }
    if (it_tensor_ndim(out) == 0) {
        L = out;
    } else {
        it_tensor *R = randt(it_tensor_ndim(out), it_tensor_shape(out), -1.0, 1.0);
        rh = to_host(R);
        L = it_sum_all(it_mul(out, R));
    }
    it_status st = L ? it_backward(L) : it_last_status();
    if (st) {
        CHECK_MSG(st == IT_OK, "%s: backward failed: %s", op, it_last_error());
        it_tape_clear();
        failed_run = true;
        goto done;
    }
    CHECK_MSG(it_tape_size() == 0, "%s: tape holds %zu nodes after backward", op, it_tape_size());

    /* Numeric, input by input, element by element. */
    it_grad_set_enabled(false);
    for (int i = 0; i < n; i++) {
        if (!diff[i]) continue;
        char shp[96];
        shape_str(in[i], shp, sizeof shp);
        it_tensor *g = it_tensor_grad(in[i]);
        if (!g) {
            CHECK_MSG(g != NULL, "%s: input %d %s got no gradient", op, i, shp);
            continue;
        }
        double *ga = to_host(g), *xh = to_host(in[i]);
        int64_t m = it_tensor_numel(in[i]);
        size_t nb = (size_t)m * sizeof(double);
        int prints = 0, bad = 0;
        for (int64_t j = 0; ga && xh && j < m; j++) {
            double x0 = xh[j];
            xh[j] = x0 + GC_H;
            it_status s1 = it_tensor_copy_from_host(in[i], xh, nb);
            double fp = eval_objective(fn, ctx, in, rh);
            xh[j] = x0 - GC_H;
            it_status s2 = it_tensor_copy_from_host(in[i], xh, nb);
            double fm = eval_objective(fn, ctx, in, rh);
            xh[j] = x0;
            if (s1 || s2 || isnan(fp) || isnan(fm)) {
                CHECK_MSG(false, "%s: forward under no-grad failed: %s", op, it_last_error());
                break;
            }
            double num = (fp - fm) / (2.0 * GC_H), an = ga[j];
            double rel = fabs(an - num) / fmax(1.0, fabs(num));
            if (!(rel <= GC_TOL)) {
                bad++;
                if (prints++ < GC_MAX_PRINTS) {
                    char idx[96];
                    index_str(in[i], j, idx, sizeof idx);
                    fprintf(stderr, "  MISMATCH %s: input %d %s element %" PRId64 " %s: analytic %.12g numeric %.12g\n",
                            op, i, shp, j, idx, an, num);
                }
            }
            if (!(rel <= max_rel)) max_rel = rel; /* NaN sticks */
            checked++;
        }
        CHECK_MSG(ga && xh, "%s: reading input %d or its gradient failed: %s", op, i, it_last_error());
        CHECK_MSG(bad == 0, "%s: %d of %" PRId64 " elements of input %d %s differ beyond %.0e", op, bad, m, i, shp,
                  GC_TOL);
        if (xh) CHECK_OK(it_tensor_copy_from_host(in[i], xh, nb)); /* restore */
        free(ga);
        free(xh);
    }
    it_grad_set_enabled(true);
done:
    free(rh);
    it_scope_end();
    if (failed_run) max_rel = INFINITY;
    printf("gradcheck %-52s max rel err %.2e over %" PRId64 " elements\n", op, max_rel, checked);
    if (!(max_rel <= worst_rel)) worst_rel = max_rel;
    return max_rel;
}

#define GC(op, fn, ctx, ...)                                                                                           \
    gradcheck(op, fn, ctx, (int)(sizeof((it_tensor *[]){__VA_ARGS__}) / sizeof(it_tensor *)),                          \
              (it_tensor *[]){__VA_ARGS__})

/* ------------------------------------------------------------------ op wrappers */

static it_tensor *f_add(const void *c, it_tensor *const *in) {
    (void)c;
    return it_add(in[0], in[1]);
}
static it_tensor *f_sub(const void *c, it_tensor *const *in) {
    (void)c;
    return it_sub(in[0], in[1]);
}
static it_tensor *f_mul(const void *c, it_tensor *const *in) {
    (void)c;
    return it_mul(in[0], in[1]);
}
static it_tensor *f_div(const void *c, it_tensor *const *in) {
    (void)c;
    return it_div(in[0], in[1]);
}
static it_tensor *f_square(const void *c, it_tensor *const *in) {
    (void)c;
    return it_mul(in[0], in[0]);
}
static it_tensor *f_div_self(const void *c, it_tensor *const *in) {
    (void)c; /* x / (x*x + 1): the same leaf on both sides and through two paths */
    it_tensor *one = it_tensor_full(cpu, IT_DTYPE_FP64, 0, NULL, it_scalar_f64(1.0));
    return it_div(in[0], it_add(it_mul(in[0], in[0]), one));
}

typedef struct {
    float alpha;
} scale_ctx;
static it_tensor *f_scale(const void *c, it_tensor *const *in) {
    return it_scale(in[0], ((const scale_ctx *)c)->alpha);
}

typedef struct {
    it_tensor *(*f)(it_tensor *);
} unary_ctx;
static it_tensor *f_unary(const void *c, it_tensor *const *in) { return ((const unary_ctx *)c)->f(in[0]); }

typedef struct {
    bool ta, tb, view_a, view_b;
} mm_ctx;
/* view_a / view_b: the operand is given stored the other way round and transposed here as a
 * (non-contiguous) differentiable view. */
static it_tensor *f_matmul(const void *c, it_tensor *const *in) {
    const mm_ctx *m = c;
    it_tensor *a = m->view_a ? it_transpose(in[0], -2, -1) : in[0];
    it_tensor *b = m->view_b ? it_transpose(in[1], -2, -1) : in[1];
    return it_matmul(a, b, m->ta, m->tb);
}

static it_tensor *f_linear(const void *c, it_tensor *const *in) {
    (void)c;
    return it_linear(in[0], in[1], in[2]);
}
static it_tensor *f_linear_nobias(const void *c, it_tensor *const *in) {
    (void)c;
    return it_linear(in[0], in[1], NULL);
}

/* in: x, then the groups' weights. */
typedef struct {
    int G;
    const int64_t *off;
} grouped_ctx;
static it_tensor *f_grouped_linear(const void *c, it_tensor *const *in) {
    const grouped_ctx *g = c;
    return it_grouped_linear(in[0], g->G, in + 1, g->off);
}

static it_tensor *f_embedding(const void *c, it_tensor *const *in) {
    (void)c;
    return it_embedding(in[0], in[1]);
}

typedef struct {
    float eps;
    bool bias;
} ln_ctx;
static it_tensor *f_layernorm(const void *c, it_tensor *const *in) {
    const ln_ctx *l = c;
    return it_layernorm(in[0], in[1], l->bias ? in[2] : NULL, l->eps);
}

typedef struct {
    float scale;
    bool causal;
} sm_ctx;
static it_tensor *f_softmax(const void *c, it_tensor *const *in) {
    const sm_ctx *s = c;
    return it_softmax(in[0], s->scale, s->causal);
}

typedef struct {
    int64_t valid;
} ce_ctx;
static it_tensor *f_cross_entropy(const void *c, it_tensor *const *in) {
    return it_cross_entropy(in[0], in[1], ((const ce_ctx *)c)->valid);
}

typedef struct {
    int n_head;
} attn_ctx;
static it_tensor *f_attention(const void *c, it_tensor *const *in) {
    return it_causal_self_attention(in[0], ((const attn_ctx *)c)->n_head);
}

typedef struct {
    int ndims;
    int dims[IT_MAX_DIMS];
    bool keepdim, mean;
} red_ctx;
static it_tensor *f_reduce(const void *c, it_tensor *const *in) {
    const red_ctx *r = c;
    return r->mean ? it_mean(in[0], r->ndims, r->dims, r->keepdim) : it_sum(in[0], r->ndims, r->dims, r->keepdim);
}
static it_tensor *f_sum_all(const void *c, it_tensor *const *in) {
    (void)c;
    return it_sum_all(in[0]);
}

typedef struct {
    int ndim;
    int64_t shape[IT_MAX_DIMS];
    bool transpose_first;
} reshape_ctx;
static it_tensor *f_reshape(const void *c, it_tensor *const *in) {
    const reshape_ctx *r = c;
    it_tensor *x = r->transpose_first ? it_transpose(in[0], 0, 1) : in[0];
    return it_reshape(x, r->ndim, r->shape);
}

typedef struct {
    int perm[IT_MAX_DIMS];
} perm_ctx;
static it_tensor *f_permute(const void *c, it_tensor *const *in) {
    return it_permute(in[0], ((const perm_ctx *)c)->perm);
}

typedef struct {
    int d0, d1;
} tr_ctx;
static it_tensor *f_transpose(const void *c, it_tensor *const *in) {
    const tr_ctx *t = c;
    return it_transpose(in[0], t->d0, t->d1);
}

typedef struct {
    int dim;
    int64_t start, end, step;
} slice_ctx;
static it_tensor *f_slice(const void *c, it_tensor *const *in) {
    const slice_ctx *s = c;
    return it_slice(in[0], s->dim, s->start, s->end, s->step);
}
/* Two slices of one tensor, recombined: gradients of overlapping windows add up. */
static it_tensor *f_slice_twice(const void *c, it_tensor *const *in) {
    (void)c;
    return it_mul(it_slice(in[0], 1, 0, 4, 1), it_slice(in[0], 1, 2, 6, 1));
}

typedef struct {
    int ndim;
    int64_t shape[IT_MAX_DIMS];
} expand_ctx;
static it_tensor *f_expand(const void *c, it_tensor *const *in) {
    const expand_ctx *e = c;
    return it_expand(in[0], e->ndim, e->shape);
}

typedef struct {
    bool transpose_first;
} contig_ctx;
static it_tensor *f_contiguous(const void *c, it_tensor *const *in) {
    const contig_ctx *k = c;
    it_tensor *x = k->transpose_first ? it_transpose(in[0], 0, 2) : in[0];
    return it_contiguous(x);
}

/* ---- LLaMA-3 / Mixtral */

typedef struct {
    float eps;
    bool transpose_first; /* x given as (C, R) and normalized as its transposed (R, C) view */
} rms_ctx;
static it_tensor *f_rmsnorm(const void *c, it_tensor *const *in) {
    const rms_ctx *r = c;
    it_tensor *x = r->transpose_first ? it_transpose(in[0], 0, 1) : in[0];
    return it_rmsnorm(x, in[1], r->eps);
}

/* cos, sin (T, D/2) of the angles t * theta^(-2i/D), in fp64. They are constants of the op
 * (held by the context, not inputs of the check): rope is differentiated in x alone. */
typedef struct {
    it_tensor *cos, *sin;
    int64_t off;      /* with `sliced`: x = in[0][..., off : off + H*D] reshaped to shape */
    int64_t shape[4]; /* (B, T, H, D) */
    bool sliced;
} rope_ctx;
static void rope_tables(int64_t T, int64_t D, double theta, it_tensor **tcos, it_tensor **tsin) {
    int64_t P = D / 2;
    double *c = malloc(sizeof(double) * (size_t)(T * P)), *s = malloc(sizeof(double) * (size_t)(T * P));
    *tcos = *tsin = NULL;
    if (c && s) {
        for (int64_t t = 0; t < T; t++) {
            for (int64_t i = 0; i < P; i++) {
                double ang = (double)t * pow(theta, -2.0 * (double)i / (double)D);
                c[t * P + i] = cos(ang);
                s[t * P + i] = sin(ang);
            }
        }
        size_t nb = sizeof(double) * (size_t)(T * P);
        *tcos = it_tensor_from_host(cpu, IT_DTYPE_FP64, 2, (int64_t[]){T, P}, c, nb);
        *tsin = it_tensor_from_host(cpu, IT_DTYPE_FP64, 2, (int64_t[]){T, P}, s, nb);
    }
    free(c);
    free(s);
}
static it_tensor *f_rope(const void *c, it_tensor *const *in) {
    const rope_ctx *r = c;
    it_tensor *x = in[0];
    if (r->sliced) { /* as the model's q / k: a slice of the fused qkv's last dim, split into heads */
        int64_t w = r->shape[2] * r->shape[3];
        x = it_reshape(it_slice(x, 2, r->off, r->off + w, 1), 4, r->shape);
    }
    return it_rope(x, r->cos, r->sin);
}

static it_tensor *f_gqa_attention(const void *c, it_tensor *const *in) {
    (void)c;
    return it_attention(in[0], in[1], in[2]);
}

typedef struct {
    int64_t k;
} topk_ctx;
static it_tensor *f_topk(const void *c, it_tensor *const *in) { return it_topk(in[0], ((const topk_ctx *)c)->k, NULL); }

typedef struct {
    int64_t rows;
} index_add_ctx;
static it_tensor *f_index_add(const void *c, it_tensor *const *in) {
    return it_index_add(((const index_add_ctx *)c)->rows, in[0], in[1]);
}

/* in: x, router, then (unless `experts` holds them as constants) gate[E], up[E], down[E].
 * With `aux` the op's output is folded into the 0-D objective sum(out * R) + aux_loss. */
typedef struct {
    int E, k;
    bool aux;
    it_tensor *R;
    it_tensor *const *experts;
    int64_t *counts; /* tokens_per_expert */
} moe_ctx;
static it_tensor *f_moe(const void *c, it_tensor *const *in) {
    const moe_ctx *m = c;
    it_tensor *const *ex = m->experts ? m->experts : in + 2;
    it_tensor *aux = NULL;
    it_tensor *y = it_moe(in[0], in[1], m->E, ex, ex + m->E, ex + 2 * m->E, m->k, m->counts, m->aux ? &aux : NULL);
    if (!m->aux) return y;
    return y && aux ? it_add(it_sum_all(it_mul(y, m->R)), aux) : NULL;
}

/* ------------------------------------------------------------------ per-op checks */

static void test_elementwise_binary(void) {
    GC("add (3,4)+(4)", f_add, NULL, randt(SHAPE(3, 4), -1, 1), randt(SHAPE(4), -1, 1));
    GC("add (4)+(3,4)", f_add, NULL, randt(SHAPE(4), -1, 1), randt(SHAPE(3, 4), -1, 1));
    GC("add (2,1,4)+(3,1)", f_add, NULL, randt(SHAPE(2, 1, 4), -1, 1), randt(SHAPE(3, 1), -1, 1));
    GC("sub (3,4)-(4)", f_sub, NULL, randt(SHAPE(3, 4), -1, 1), randt(SHAPE(4), -1, 1));
    GC("sub (1,)-(2,3)", f_sub, NULL, randt(SHAPE(1), -1, 1), randt(SHAPE(2, 3), -1, 1));
    GC("mul (2,3,4)*(3,1)", f_mul, NULL, randt(SHAPE(2, 3, 4), -1, 1), randt(SHAPE(3, 1), -1, 1));
    GC("mul (3,4)*(3,4)", f_mul, NULL, randt(SHAPE(3, 4), -1, 1), randt(SHAPE(3, 4), -1, 1));
    GC("mul x*x (same leaf twice)", f_square, NULL, randt(SHAPE(3, 4), -1, 1));
    /* denominators kept in [0.5, 1.5]: away from the pole, so f''' stays small */
    GC("div (1,)/(2,3)", f_div, NULL, randt(SHAPE(1), -1, 1), randt(SHAPE(2, 3), 0.5, 1.5));
    GC("div (2,3)/(3)", f_div, NULL, randt(SHAPE(2, 3), -1, 1), randt(SHAPE(3), 0.5, 1.5));
    GC("div x/(x*x+1) (0-D constant broadcast)", f_div_self, NULL, randt(SHAPE(2, 3), -2, 2));
}

static void test_elementwise_unary(void) {
    scale_ctx s1 = {0.37f}, s2 = {-2.5f};
    GC("scale 0.37 (3,4)", f_scale, &s1, randt(SHAPE(3, 4), -1, 1));
    GC("scale -2.5 (2,3,2)", f_scale, &s2, randt(SHAPE(2, 3, 2), -1, 1));
    unary_ctx gelu = {it_gelu}, silu = {it_silu}, th = {it_tanh}, ex = {it_exp};
    GC("gelu (3,5)", f_unary, &gelu, randt(SHAPE(3, 5), -3, 3));
    GC("silu (3,5)", f_unary, &silu, randt(SHAPE(3, 5), -3, 3));
    GC("tanh (3,5)", f_unary, &th, randt(SHAPE(3, 5), -2, 2));
    GC("exp (3,5)", f_unary, &ex, randt(SHAPE(3, 5), -1, 1));
}

static void test_matmul(void) {
    static const char *names2[4] = {"matmul 2-D a b", "matmul 2-D a^T b", "matmul 2-D a b^T", "matmul 2-D a^T b^T"};
    static const char *names3[4] = {"matmul 3-D a b", "matmul 3-D a^T b", "matmul 3-D a b^T", "matmul 3-D a^T b^T"};
    static const char *namess[4] = {"matmul 3-D a, shared 2-D b", "matmul 3-D a^T, shared 2-D b",
                                    "matmul 3-D a, shared 2-D b^T", "matmul 3-D a^T, shared 2-D b^T"};
    const int64_t M = 3, K = 4, N = 5, B = 2;
    for (int k = 0; k < 4; k++) {
        mm_ctx c = {k & 1, (k >> 1) & 1, false, false};
        int64_t as[2] = {c.ta ? K : M, c.ta ? M : K}, bs[2] = {c.tb ? N : K, c.tb ? K : N};
        GC(names2[k], f_matmul, &c, randt(2, as, -1, 1), randt(2, bs, -1, 1));
        int64_t a3[3] = {B, as[0], as[1]}, b3[3] = {B, bs[0], bs[1]};
        GC(names3[k], f_matmul, &c, randt(3, a3, -1, 1), randt(3, b3, -1, 1));
        GC(namess[k], f_matmul, &c, randt(3, a3, -1, 1), randt(2, bs, -1, 1));
    }
    mm_ctx nn = {false, false, false, false}, tn = {true, false, false, false}, nt = {false, true, false, false};
    GC("matmul 4-D a b", f_matmul, &nn, randt(SHAPE(2, 2, 3, 4), -1, 1), randt(SHAPE(2, 2, 4, 3), -1, 1));
    GC("matmul 4-D a^T b", f_matmul, &tn, randt(SHAPE(2, 2, 4, 3), -1, 1), randt(SHAPE(2, 2, 4, 2), -1, 1));
    GC("matmul 4-D a b^T", f_matmul, &nt, randt(SHAPE(2, 2, 3, 4), -1, 1), randt(SHAPE(2, 2, 5, 4), -1, 1));
    GC("matmul 4-D a, shared 2-D b", f_matmul, &nn, randt(SHAPE(2, 2, 3, 4), -1, 1), randt(SHAPE(4, 2), -1, 1));
    GC("matmul 4-D a^T, shared 2-D b", f_matmul, &tn, randt(SHAPE(2, 2, 4, 3), -1, 1), randt(SHAPE(4, 2), -1, 1));
    /* non-contiguous operands: transposed views of leaves */
    mm_ctx views = {false, false, true, true};
    GC("matmul 3-D transposed views a b", f_matmul, &views, randt(SHAPE(2, 4, 3), -1, 1), randt(SHAPE(2, 5, 4), -1, 1));
}

static void test_linear(void) {
    GC("linear (3,4) w(5,4) b(5)", f_linear, NULL, randt(SHAPE(3, 4), -1, 1), randt(SHAPE(5, 4), -1, 1),
       randt(SHAPE(5), -1, 1));
    GC("linear (3,4) w(5,4) no bias", f_linear_nobias, NULL, randt(SHAPE(3, 4), -1, 1), randt(SHAPE(5, 4), -1, 1));
    GC("linear 3-D (2,3,4) w(5,4) b(5)", f_linear, NULL, randt(SHAPE(2, 3, 4), -1, 1), randt(SHAPE(5, 4), -1, 1),
       randt(SHAPE(5), -1, 1));
    GC("linear 3-D (2,3,4) w(5,4) no bias", f_linear_nobias, NULL, randt(SHAPE(2, 3, 4), -1, 1),
       randt(SHAPE(5, 4), -1, 1));
}

/* it_grouped_linear: gradients by finite differences with more groups than a node holds
 * inline; then an empty group (its weight gets no gradient) and forward and gradients
 * bitwise equal to it_linear on each group's rows, which is what the op promises. */
static void test_grouped_linear(void) {
    const int64_t off5[6] = {0, 2, 3, 4, 6, 7};
    grouped_ctx g5 = {5, off5};
    GC("grouped_linear x (7,4), 5 groups of w (3,4)", f_grouped_linear, &g5, randt(SHAPE(7, 4), -1, 1),
       randt(SHAPE(3, 4), -1, 1), randt(SHAPE(3, 4), -1, 1), randt(SHAPE(3, 4), -1, 1), randt(SHAPE(3, 4), -1, 1),
       randt(SHAPE(3, 4), -1, 1));

    it_scope_begin();
    const int64_t off3[4] = {0, 3, 3, 7};
    it_tensor *x = randt(SHAPE(7, 4), -1, 1), *w[3], *xr = it_tensor_clone(x), *wr[3];
    for (int i = 0; i < 3; i++) {
        w[i] = randt(SHAPE(3, 4), -1, 1);
        wr[i] = it_tensor_clone(w[i]);
        CHECK_OK(it_tensor_set_requires_grad(w[i], true));
        CHECK_OK(it_tensor_set_requires_grad(wr[i], true));
    }
    CHECK_OK(it_tensor_set_requires_grad(x, true));
    CHECK_OK(it_tensor_set_requires_grad(xr, true));
    it_tensor *R = randt(SHAPE(7, 3), -1, 1);
    /* (one backward at a time: it_backward runs and clears the whole tape) */
    it_tensor *y = it_grouped_linear(x, 3, w, off3);
    CHECK_OK(y ? it_backward(it_sum_all(it_mul(y, R))) : it_last_status());
    it_tensor *yr0 = it_linear(it_slice(xr, 0, 0, 3, 1), wr[0], NULL);
    it_tensor *yr2 = it_linear(it_slice(xr, 0, 3, 7, 1), wr[2], NULL);
    CHECK_MSG(y && yr0 && yr2, "grouped_linear with an empty group: forward failed: %s", it_last_error());
    if (y && yr0 && yr2) {
        it_tensor *Rs0 = it_slice(R, 0, 0, 3, 1), *Rs2 = it_slice(R, 0, 3, 7, 1);
        CHECK_OK(it_backward(it_add(it_sum_all(it_mul(yr0, Rs0)), it_sum_all(it_mul(yr2, Rs2)))));
        double *yh = to_host(y), *a0 = to_host(yr0), *a2 = to_host(yr2);
        double *gx = to_host(it_tensor_grad(x)), *gxr = to_host(it_tensor_grad(xr));
        double *g0 = to_host(it_tensor_grad(w[0])), *g0r = to_host(it_tensor_grad(wr[0]));
        double *g2 = to_host(it_tensor_grad(w[2])), *g2r = to_host(it_tensor_grad(wr[2]));
        bool have = yh && a0 && a2 && gx && gxr && g0 && g0r && g2 && g2r;
        CHECK_MSG(have, "grouped_linear with an empty group: results unreadable: %s", it_last_error());
        CHECK_MSG(it_tensor_grad(w[1]) == NULL, "grouped_linear: the empty group's weight got a gradient");
        if (have) {
            CHECK_MSG(memcmp(yh, a0, 9 * sizeof(double)) == 0 && memcmp(yh + 9, a2, 12 * sizeof(double)) == 0,
                      "grouped_linear: forward differs from it_linear on the groups' rows");
            CHECK_MSG(memcmp(gx, gxr, 28 * sizeof(double)) == 0, "grouped_linear: dx differs from it_linear's");
            CHECK_MSG(memcmp(g0, g0r, 12 * sizeof(double)) == 0 && memcmp(g2, g2r, 12 * sizeof(double)) == 0,
                      "grouped_linear: dw differs from it_linear's");
        }
        free(yh), free(a0), free(a2), free(gx), free(gxr), free(g0), free(g0r), free(g2), free(g2r);
    }
    /* No rows at all: an empty (0, 3) result, and nothing to differentiate. */
    it_tensor *x0 = randt(SHAPE(0, 4), -1, 1);
    const int64_t off0[4] = {0, 0, 0, 0};
    it_tensor *y0 = it_grouped_linear(x0, 3, w, off0);
    CHECK_MSG(y0 && it_tensor_ndim(y0) == 2 && it_tensor_dim(y0, 0) == 0 && it_tensor_dim(y0, 1) == 3,
              "grouped_linear over 0 rows: expected a (0, 3) result: %s", it_last_error());
    /* Refused with the reason, never a crash or a wrong product. */
    const int64_t from1[4] = {1, 3, 3, 7}, short_[4] = {0, 3, 3, 6}, down_[4] = {0, 5, 3, 7};
    it_tensor *wbad[3] = {w[0], randt(SHAPE(3, 5), -1, 1), w[2]};
    struct {
        it_tensor *x;
        int G;
        it_tensor *const *w;
        const int64_t *off;
        const char *says;
    } bad[] = {
        {x, 3, w, from1, "offsets must run from 0 to the 7 rows (got 1 to 7)"},
        {x, 3, w, short_, "offsets must run from 0 to the 7 rows (got 0 to 6)"},
        {x, 3, w, down_, "offsets decrease at group 1 (3 after 5)"},
        {x, 3, wbad, off3, "weight 1 must be (3, 4) like weight 0"},
        {R, 3, w, off3, "weight 0 must be (out, 3)"},
        {it_reshape(x, SHAPE(28)), 3, w, off3, "x must be 2-D (rows, in), got 1-D"},
        {x, 0, w, off3, "needs at least one group"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        it_tensor *r = it_grouped_linear(bad[i].x, bad[i].G, bad[i].w, bad[i].off);
        CHECK_MSG(r == NULL && it_last_status() == IT_ERR_INVALID_ARG && strstr(it_last_error(), bad[i].says),
                  "grouped_linear bad case %zu: expected INVALID_ARG '%s', got %s '%s'", i, bad[i].says,
                  r ? "a result" : "error", it_last_error());
    }
    it_tape_clear();
    it_scope_end();
}

static void test_embedding(void) {
    /* repeated rows (1 and 3) and unused rows (2, 4: gradient exactly zero) */
    int64_t v1[6] = {1, 3, 1, 0, 3, 3};
    GC("embedding int32 idx (2,3) repeated, w (5,4)", f_embedding, NULL, idxt(IT_DTYPE_I32, SHAPE(2, 3), v1),
       randt(SHAPE(5, 4), -1, 1));
    int64_t v2[5] = {4, 0, 4, 4, 2};
    GC("embedding int64 idx (5) repeated, w (6,3)", f_embedding, NULL, idxt(IT_DTYPE_I64, SHAPE(5), v2),
       randt(SHAPE(6, 3), -1, 1));
}

static void test_layernorm(void) {
    ln_ctx with = {1e-5f, true}, without = {1e-5f, false};
    GC("layernorm (3,6) w b", f_layernorm, &with, randt(SHAPE(3, 6), -2, 2), randt(SHAPE(6), 0.5, 1.5),
       randt(SHAPE(6), -1, 1));
    GC("layernorm (3,6) w, no bias", f_layernorm, &without, randt(SHAPE(3, 6), -2, 2), randt(SHAPE(6), 0.5, 1.5));
    GC("layernorm 3-D (2,3,5) w b", f_layernorm, &with, randt(SHAPE(2, 3, 5), -2, 2), randt(SHAPE(5), -1, 1),
       randt(SHAPE(5), -1, 1));
}

static void test_softmax(void) {
    sm_ctx plain = {1.0f, false}, scaled = {0.5f, false}, causal = {0.7f, true}, causal1 = {1.0f, true};
    GC("softmax (3,5)", f_softmax, &plain, randt(SHAPE(3, 5), -2, 2));
    GC("softmax (2,3,4) scale 0.5", f_softmax, &scaled, randt(SHAPE(2, 3, 4), -2, 2));
    GC("softmax causal (2,4,4) scale 0.7", f_softmax, &causal, randt(SHAPE(2, 4, 4), -2, 2));
    GC("softmax causal (3,5) keys > queries", f_softmax, &causal1, randt(SHAPE(3, 5), -2, 2));
}

static void test_cross_entropy(void) {
    ce_ctx c5 = {5}, c4 = {4}, c6 = {6};
    int64_t t64[6] = {0, 4, 2, 3, 1, 4};
    GC("cross_entropy (2,3,7) valid 5, int64 targets", f_cross_entropy, &c5, randt(SHAPE(2, 3, 7), -2, 2),
       idxt(IT_DTYPE_I64, SHAPE(2, 3), t64));
    int64_t t32[4] = {3, 0, 3, 1};
    GC("cross_entropy (4,6) valid 4, int32 targets", f_cross_entropy, &c4, randt(SHAPE(4, 6), -2, 2),
       idxt(IT_DTYPE_I32, SHAPE(4), t32));
    int64_t t32b[3] = {5, 0, 2};
    GC("cross_entropy (3,6) valid = Vp 6, int32 targets", f_cross_entropy, &c6, randt(SHAPE(3, 6), -2, 2),
       idxt(IT_DTYPE_I32, SHAPE(3), t32b));
}

/* Padded columns (>= valid) take no part: their gradient is exactly 0, and each row's
 * gradient (softmax - onehot) / N sums to 0 over the valid columns. */
static void test_cross_entropy_padding_zero(void) {
    const int64_t N = 4, Vp = 7, valid = 5;
    for (int k = 0; k < 2; k++) {
        it_dtype dt = k ? IT_DTYPE_I32 : IT_DTYPE_I64;
        int64_t tv[4] = {4, 0, 2, 4};
        it_tensor *logits = randt(SHAPE(4, 7), -3, 3), *t = idxt(dt, SHAPE(4), tv);
        CHECK_OK(it_tensor_set_requires_grad(logits, true));
        it_tensor *loss = it_cross_entropy(logits, t, valid);
        CHECK_OK(it_backward(loss));
        double *g = to_host(it_tensor_grad(logits));
        CHECK(g != NULL);
        if (!g) continue;
        int nonzero = 0;
        for (int64_t r = 0; r < N; r++) {
            double row = 0.0;
            for (int64_t c = 0; c < Vp; c++) {
                if (c >= valid) {
                    if (g[r * Vp + c] != 0.0) nonzero++;
                    CHECK_MSG(g[r * Vp + c] == 0.0,
                              "cross_entropy (%s targets): padded column %" PRId64 " of row %" PRId64
                              " has gradient %.17g (must be exactly 0)",
                              it_dtype_name(dt), c, r, g[r * Vp + c]);
                } else {
                    row += g[r * Vp + c];
                }
            }
            /* row sum: (sum softmax - 1) / N, rounding O(Vp * eps) */
            CHECK_NEAR(row, 0.0, 1e-14);
            /* the target's entry is (p - 1)/N < 0, every other valid entry p/N > 0 */
            CHECK(g[r * Vp + tv[r]] < 0.0);
        }
        printf("cross_entropy padding (%s targets): %d nonzero gradients in padded columns\n", it_dtype_name(dt),
               nonzero);
        free(g);
    }
}

static void test_attention(void) {
    attn_ctx c = {3};
    GC("causal_self_attention B=2 T=5 C=12 nh=3", f_attention, &c, randt(SHAPE(2, 5, 36), -1, 1));
    attn_ctx c1 = {1};
    GC("causal_self_attention B=1 T=3 C=4 nh=1", f_attention, &c1, randt(SHAPE(1, 3, 12), -1, 1));
}

static void test_reductions(void) {
    red_ctx cases[] = {
        {1, {0}, false, false},   {1, {1}, true, false},       {2, {0, 2}, false, false},   {2, {0, 2}, true, false},
        {1, {-1}, false, false},  {3, {0, 1, 2}, true, false}, {1, {0}, false, true},       {1, {-1}, true, true},
        {2, {1, 2}, false, true}, {2, {0, 1}, true, true},     {3, {0, 1, 2}, false, true},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char name[96];
        size_t len = (size_t)snprintf(name, sizeof name, "%s (2,3,4) dims {", cases[k].mean ? "mean" : "sum");
        for (int d = 0; d < cases[k].ndims; d++)
            len += (size_t)snprintf(name + len, sizeof name - len, "%s%d", d ? "," : "", cases[k].dims[d]);
        snprintf(name + len, sizeof name - len, "}%s", cases[k].keepdim ? " keepdim" : "");
        GC(name, f_reduce, &cases[k], randt(SHAPE(2, 3, 4), -1, 1));
    }
    GC("sum_all (2,3,4)", f_sum_all, NULL, randt(SHAPE(2, 3, 4), -1, 1));
    GC("sum_all (5)", f_sum_all, NULL, randt(SHAPE(5), -1, 1));
}

static void test_views(void) {
    reshape_ctx r1 = {2, {4, 6}, false}, r2 = {3, {3, -1, 2}, false}, r3 = {2, {3, 8}, true};
    GC("reshape (2,3,4)->(4,6)", f_reshape, &r1, randt(SHAPE(2, 3, 4), -1, 1));
    GC("reshape (2,3,4)->(3,-1,2)", f_reshape, &r2, randt(SHAPE(2, 3, 4), -1, 1));
    GC("reshape of a transposed view (4,6)^T->(3,8)", f_reshape, &r3, randt(SHAPE(4, 6), -1, 1));
    perm_ctx p1 = {{2, 0, 1}}, p2 = {{1, 3, 0, 2}};
    GC("permute (2,3,4) by (2,0,1)", f_permute, &p1, randt(SHAPE(2, 3, 4), -1, 1));
    GC("permute (2,3,2,3) by (1,3,0,2)", f_permute, &p2, randt(SHAPE(2, 3, 2, 3), -1, 1));
    tr_ctx t1 = {0, 2}, t2 = {-1, -2};
    GC("transpose (2,3,4) dims 0,2", f_transpose, &t1, randt(SHAPE(2, 3, 4), -1, 1));
    GC("transpose (3,5) dims -1,-2", f_transpose, &t2, randt(SHAPE(3, 5), -1, 1));
    slice_ctx s1 = {1, 1, 6, 2}, s2 = {0, 1, 3, 1}, s3 = {-1, 0, 5, 3};
    GC("slice (4,6) dim 1 [1:6:2]", f_slice, &s1, randt(SHAPE(4, 6), -1, 1));
    GC("slice (4,6) dim 0 [1:3]", f_slice, &s2, randt(SHAPE(4, 6), -1, 1));
    GC("slice (2,3,5) dim -1 [0:5:3]", f_slice, &s3, randt(SHAPE(2, 3, 5), -1, 1));
    GC("slice twice, overlapping windows (3,6)", f_slice_twice, NULL, randt(SHAPE(3, 6), -1, 1));
    expand_ctx e1 = {3, {2, 3, 4}}, e2 = {2, {3, 4}}, e3 = {3, {2, -1, 4}};
    GC("expand (3,1)->(2,3,4)", f_expand, &e1, randt(SHAPE(3, 1), -1, 1));
    GC("expand (1,4)->(3,4)", f_expand, &e2, randt(SHAPE(1, 4), -1, 1));
    GC("expand (1,3,1)->(2,-1,4)", f_expand, &e3, randt(SHAPE(1, 3, 1), -1, 1));
    contig_ctx c1 = {true}, c2 = {false};
    GC("contiguous of a transposed (2,3,4)", f_contiguous, &c1, randt(SHAPE(2, 3, 4), -1, 1));
    GC("contiguous of a contiguous (2,3)", f_contiguous, &c2, randt(SHAPE(2, 3), -1, 1));
}

/* ------------------------------------------------------------------ LLaMA-3 / Mixtral ops */

static void test_rmsnorm(void) {
    rms_ctx e5 = {1e-5f, false}, e1 = {0.1f, false}, tr = {1e-5f, true};
    GC("rmsnorm (3,7) w(7)", f_rmsnorm, &e5, randt(SHAPE(3, 7), -2, 2), randt(SHAPE(7), 0.5, 1.5));
    GC("rmsnorm 3-D (2,3,5) w(5)", f_rmsnorm, &e5, randt(SHAPE(2, 3, 5), -2, 2), randt(SHAPE(5), -1, 1));
    /* small x: mean(x^2) ~ 0.08, so eps = 0.1 weighs in rstd and in its derivative */
    GC("rmsnorm (4,7) w(7) eps 0.1", f_rmsnorm, &e1, randt(SHAPE(4, 7), -0.5, 0.5), randt(SHAPE(7), 0.5, 1.5));
    GC("rmsnorm of a transposed view (7,3)^T w(7)", f_rmsnorm, &tr, randt(SHAPE(7, 3), -2, 2),
       randt(SHAPE(7), 0.5, 1.5));
}

static void test_rope(void) {
    it_tensor *c5, *s5, *c3, *s3;
    rope_tables(5, 4, 10.0, &c5, &s5); /* theta 10: both pairs turn visibly over 5 positions */
    rope_tables(3, 6, 10000.0, &c3, &s3);
    rope_ctx plain = {c5, s5, 0, {2, 5, 3, 4}, false};
    GC("rope (2,5,3,4) theta 10", f_rope, &plain, randt(SHAPE(2, 5, 3, 4), -1, 1));
    rope_ctx plain6 = {c3, s3, 0, {1, 3, 2, 6}, false};
    GC("rope (1,3,2,6) theta 1e4", f_rope, &plain6, randt(SHAPE(1, 3, 2, 6), -1, 1));
    /* non-contiguous x, as the model's q: strides (5*20, 20, 4, 1) into a fused (2,5,20) */
    rope_ctx sl = {c5, s5, 4, {2, 5, 3, 4}, true};
    it_tensor *big = randt(SHAPE(2, 5, 20), -1, 1);
    GC("rope of a slice (2,5,20)[...,4:16] as (2,5,3,4)", f_rope, &sl, big);
    /* columns outside the slice take no part: exactly 0 */
    double *g = to_host(it_tensor_grad(big));
    CHECK(g != NULL);
    for (int64_t j = 0; g && j < 2 * 5 * 20; j++) {
        if (j % 20 >= 4 && j % 20 < 16) continue;
        CHECK_MSG(g[j] == 0.0, "rope of a slice: column %" PRId64 " outside the slice has gradient %.17g", j % 20,
                  g[j]);
    }
    free(g);
}

static void test_gqa_attention(void) {
    GC("attention nh=nkv=2 B=2 T=5 hd=3", f_gqa_attention, NULL, randt(SHAPE(2, 5, 2, 3), -1, 1),
       randt(SHAPE(2, 5, 2, 3), -1, 1), randt(SHAPE(2, 5, 2, 3), -1, 1));
    GC("attention GQA nh=4 nkv=2 B=2 T=5 hd=3", f_gqa_attention, NULL, randt(SHAPE(2, 5, 4, 3), -1, 1),
       randt(SHAPE(2, 5, 2, 3), -1, 1), randt(SHAPE(2, 5, 2, 3), -1, 1));
    GC("attention GQA nh=4 nkv=1 B=2 T=5 hd=3", f_gqa_attention, NULL, randt(SHAPE(2, 5, 4, 3), -1, 1),
       randt(SHAPE(2, 5, 1, 3), -1, 1), randt(SHAPE(2, 5, 1, 3), -1, 1));
    /* The head mapping (the gradchecks above cannot see it: a wrong mapping is still
     * self-consistent): kv head j serves query heads 2j, 2j+1, so the result equals plain
     * attention with every kv head repeated twice in place; and with nh == nkv, it equals
     * causal_self_attention on q|k|v concatenated in the last dim. Same products in the
     * same order, so equal up to (at most) a summation-order difference in gemm. */
    it_grad_set_enabled(false);
    double qh[2 * 5 * 4 * 3], kh[2 * 5 * 2 * 3], vh[2 * 5 * 2 * 3], kr[2 * 5 * 4 * 3], vr[2 * 5 * 4 * 3];
    double qkv[2 * 5 * 3 * 4 * 3];
    for (int i = 0; i < 120; i++) qh[i] = 2.0 * urand() - 1.0;
    for (int i = 0; i < 60; i++) kh[i] = 2.0 * urand() - 1.0, vh[i] = 2.0 * urand() - 1.0;
    for (int i = 0; i < 120; i++) { /* i = ((b*5 + t)*4 + head)*3 + d */
        int d = i % 3, head = (i / 3) % 4, bt = i / 12;
        kr[i] = kh[(bt * 2 + head / 2) * 3 + d];
        vr[i] = vh[(bt * 2 + head / 2) * 3 + d];
        for (int part = 0; part < 3; part++) /* (B, T, 3 * 12): q|k|v, each (nh=4, hd=3) */
            qkv[bt * 36 + part * 12 + head * 3 + d] = part == 0 ? qh[i] : part == 1 ? kr[i] : vr[i];
    }
    size_t b120 = sizeof qh, b60 = sizeof kh;
    it_tensor *q = it_tensor_from_host(cpu, IT_DTYPE_FP64, 4, (int64_t[]){2, 5, 4, 3}, qh, b120);
    double *y_gqa =
        to_host(it_attention(q, it_tensor_from_host(cpu, IT_DTYPE_FP64, 4, (int64_t[]){2, 5, 2, 3}, kh, b60),
                             it_tensor_from_host(cpu, IT_DTYPE_FP64, 4, (int64_t[]){2, 5, 2, 3}, vh, b60)));
    double *y_rep =
        to_host(it_attention(q, it_tensor_from_host(cpu, IT_DTYPE_FP64, 4, (int64_t[]){2, 5, 4, 3}, kr, b120),
                             it_tensor_from_host(cpu, IT_DTYPE_FP64, 4, (int64_t[]){2, 5, 4, 3}, vr, b120)));
    double *y_gpt = to_host(it_causal_self_attention(
        it_tensor_from_host(cpu, IT_DTYPE_FP64, 3, (int64_t[]){2, 5, 36}, qkv, sizeof qkv), 4));
    it_grad_set_enabled(true);
    CHECK_MSG(y_gqa && y_rep && y_gpt, "attention forward failed: %s", it_last_error());
    for (int i = 0; y_gqa && y_rep && y_gpt && i < 120; i++) {
        CHECK_MSG(fabs(y_gqa[i] - y_rep[i]) <= 1e-14, "attention GQA nkv=2 [%d] = %.17g, with kv heads repeated %.17g",
                  i, y_gqa[i], y_rep[i]);
        CHECK_MSG(fabs(y_rep[i] - y_gpt[i]) <= 1e-14, "attention nh=nkv=4 [%d] = %.17g, causal_self_attention %.17g", i,
                  y_rep[i], y_gpt[i]);
    }
    free(y_gqa);
    free(y_rep);
    free(y_gpt);
}

/* Each row a shuffle of 0.3 * {-2..2} plus jitter in [0, 0.05): entries at least 0.25 apart,
 * so a step of h = 1e-6 never changes the selection. */
static it_tensor *topk_input(int64_t N, int64_t E, double *h) {
    for (int64_t n = 0; n < N; n++) {
        int64_t perm[16];
        for (int64_t e = 0; e < E; e++) perm[e] = e;
        for (int64_t e = E - 1; e > 0; e--) {
            int64_t j = (int64_t)(urand() * (double)(e + 1)), t = perm[e];
            perm[e] = perm[j], perm[j] = t;
        }
        for (int64_t e = 0; e < E; e++) h[n * E + e] = 0.3 * (double)(perm[e] - E / 2) + 0.05 * urand();
    }
    return it_tensor_from_host(cpu, IT_DTYPE_FP64, 2, (int64_t[]){N, E}, h, sizeof(double) * (size_t)(N * E));
}

static void test_topk(void) {
    enum { N = 6, E = 5 };
    for (int64_t k = 2; k <= E; k += E - 2) { /* k = 2, and k = E (every entry chosen) */
        double h[N * E];
        it_tensor *x = topk_input(N, E, h);
        topk_ctx c = {k};
        char name[96];
        snprintf(name, sizeof name, "topk (6,5) k=%" PRId64 ", entries >= 0.25 apart", k);
        GC(name, f_topk, &c, x);
        /* the indices, and the gradient: R's entries at the chosen columns, exactly 0 elsewhere */
        it_grad_set_enabled(false);
        it_tensor *idx = NULL, *v = it_topk(x, k, &idx);
        it_grad_set_enabled(true);
        int32_t ih[N * E];
        double *vh = to_host(v), *g = to_host(it_tensor_grad(x));
        CHECK(vh && g && idx && !it_tensor_copy_to_host(idx, ih, sizeof(int32_t) * (size_t)(N * k)));
        for (int64_t n = 0; vh && g && idx && n < N; n++) {
            bool chosen[E] = {0};
            for (int64_t j = 0; j < k; j++) {
                /* the j-th largest: j entries of the row are larger */
                int32_t col = ih[n * k + j];
                int larger = 0;
                for (int64_t e = 0; e < E; e++) larger += h[n * E + e] > h[n * E + col];
                CHECK_MSG(larger == j && vh[n * k + j] == h[n * E + col],
                          "topk row %" PRId64 " slot %" PRId64 ": column %d (value %.17g) is not the %" PRId64
                          "-th largest",
                          n, j, (int)col, vh[n * k + j], j);
                chosen[col] = true;
            }
            for (int64_t e = 0; e < E; e++)
                CHECK_MSG(chosen[e] || g[n * E + e] == 0.0,
                          "topk row %" PRId64 ": unchosen column %" PRId64 " has gradient %.17g", n, e, g[n * E + e]);
        }
        free(vh);
        free(g);
    }
}

static void test_index_add(void) {
    index_add_ctx c = {6};
    /* row 2 three times, row 0 twice, rows 1 and 4 never */
    int64_t v[7] = {2, 0, 2, 5, 2, 0, 3};
    GC("index_add rows=6 int32 idx (7) repeated, src (7,3)", f_index_add, &c, idxt(IT_DTYPE_I32, SHAPE(7), v),
       randt(SHAPE(7, 3), -1, 1));
    it_tensor *idx = idxt(IT_DTYPE_I64, SHAPE(7), v), *src = randt(SHAPE(7, 4), -1, 1);
    GC("index_add rows=6 int64 idx (7) repeated, src (7,4)", f_index_add, &c, idx, src);
    /* forward: the sums of the rows sent to each row, exact zeros where none went */
    it_grad_set_enabled(false);
    double *oh = to_host(it_index_add(6, idx, src)), *sh = to_host(src);
    it_grad_set_enabled(true);
    CHECK(oh && sh);
    for (int64_t r = 0; oh && sh && r < 6; r++) {
        for (int64_t j = 0; j < 4; j++) {
            double want = 0.0;
            for (int64_t i = 0; i < 7; i++)
                if (v[i] == r) want += sh[i * 4 + j];
            CHECK_MSG(fabs(oh[r * 4 + j] - want) <= 1e-15,
                      "index_add out[%" PRId64 "][%" PRId64 "] = %.17g, want %.17g", r, j, oh[r * 4 + j], want);
        }
    }
    free(oh);
    free(sh);
}

/* Host reference of the router: logits x router^T, per token the top-k experts (counted into
 * counts) and the smallest gap between consecutive entries of its k+1 largest logits (a
 * perturbation smaller than half of it cannot change which experts are chosen, nor their
 * order). sel (N, k) receives the chosen experts, descending. */
static double moe_routing(const double *x, const double *r, int64_t N, int64_t C, int E, int k, int64_t *counts,
                          int *sel) {
    double gap = INFINITY;
    for (int e = 0; e < E; e++) counts[e] = 0;
    for (int64_t n = 0; n < N; n++) {
        double l[16];
        int id[16];
        for (int e = 0; e < E; e++) {
            l[e] = 0.0;
            for (int64_t c = 0; c < C; c++) l[e] += x[n * C + c] * r[e * C + c];
            id[e] = e;
        }
        for (int i = 1; i < E; i++) /* insertion sort, descending */
            for (int j = i; j > 0 && l[j] > l[j - 1]; j--) {
                double t = l[j];
                l[j] = l[j - 1], l[j - 1] = t;
                int ti = id[j];
                id[j] = id[j - 1], id[j - 1] = ti;
            }
        for (int j = 0; j < k; j++) {
            counts[id[j]]++;
            sel[n * k + j] = id[j];
            if (j + 1 < E) gap = fmin(gap, l[j] - l[j + 1]);
        }
    }
    return gap;
}

static double silu_h(double v) { return v / (1.0 + exp(-v)); }

static void test_moe(void) {
    enum { E = 4, K = 2 };
    const int64_t N = 8, C = 6, H = 5;
    it_tensor *x = randt(SHAPE(2, 4, 6), -1, 1);
    double *xh = to_host(x), rh[E * 6] = {0};
    int64_t want[E];
    int sel[8 * K];
    double gap = 0.0;
    bool all_used = false;
    /* Router weights scaled up (logits of a few units) and redrawn until every gap is well
     * above what a step of h can move a logit (|dx| * |router| <= 1e-6 * 4) and every expert
     * has tokens (an expert with none would get no gradient at all). */
    for (int attempt = 0; attempt < 100 && xh && !(gap > 1e-3 && all_used); attempt++) {
        for (int i = 0; i < E * 6; i++) rh[i] = 4.0 * (2.0 * urand() - 1.0);
        gap = moe_routing(xh, rh, N, C, E, K, want, sel);
        all_used = true;
        for (int e = 0; e < E; e++) all_used = all_used && want[e] > 0;
    }
    CHECK_MSG(gap > 1e-3 && all_used, "moe: no router drawn with top-k gaps > 1e-3 and every expert used (gap %g)",
              gap);
    printf("moe: smallest top-k logit gap %.3g, tokens per expert %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64 "\n",
           gap, want[0], want[1], want[2], want[3]);
    it_tensor *router = it_tensor_from_host(cpu, IT_DTYPE_FP64, 2, (int64_t[]){E, C}, rh, sizeof rh);
    it_tensor *in[2 + 3 * E] = {x, router};
    for (int e = 0; e < E; e++) {
        in[2 + e] = randt(2, (int64_t[]){H, C}, -0.5, 0.5);         /* gate */
        in[2 + E + e] = randt(2, (int64_t[]){H, C}, -0.5, 0.5);     /* up */
        in[2 + 2 * E + e] = randt(2, (int64_t[]){C, H}, -0.5, 0.5); /* down */
    }
    int64_t counts[E] = {0};
    moe_ctx m = {E, K, false, NULL, NULL, counts};
    gradcheck("moe (2,4,6) E=4 k=2 H=5: x, router, gate/up/down", f_moe, &m, 2 + 3 * E, in);
    int64_t total = 0;
    for (int e = 0; e < E; e++) {
        total += counts[e];
        CHECK_MSG(counts[e] == want[e], "moe: expert %d got %" PRId64 " tokens, the host routing %" PRId64, e,
                  counts[e], want[e]);
    }
    CHECK_MSG(total == N * K, "moe: tokens_per_expert sums to %" PRId64 ", expected N*k = %" PRId64, total, N * K);

    /* Forward against a host reference: out[n] = sum over the chosen e of
     * softmax(chosen logits) * down_e(silu(gate_e x) * up_e x); aux = E sum_e f_e P_e with f_e
     * the share of assignments routed to e and P_e the mean router softmax of e. */
    it_grad_set_enabled(false);
    it_tensor *aux = NULL;
    double *oh = to_host(it_moe(x, router, E, in + 2, in + 2 + E, in + 2 + 2 * E, K, NULL, &aux));
    double *auxh = to_host(aux), *wh[3 * E];
    it_grad_set_enabled(true);
    bool have = oh && auxh;
    for (int i = 0; i < 3 * E; i++) have = (wh[i] = to_host(in[2 + i])) != NULL && have;
    CHECK_MSG(have, "moe: forward failed: %s", it_last_error());
    double max_err = 0.0, P[E] = {0};
    for (int64_t n = 0; have && n < N; n++) {
        double l[E], lmax = -INFINITY, den = 0.0, out[6] = {0}, zs = 0.0;
        for (int e = 0; e < E; e++) {
            l[e] = 0.0;
            for (int64_t c = 0; c < C; c++) l[e] += xh[n * C + c] * rh[e * C + c];
            lmax = fmax(lmax, l[e]);
        }
        for (int e = 0; e < E; e++) zs += exp(l[e] - lmax);
        for (int e = 0; e < E; e++) P[e] += exp(l[e] - lmax) / zs / (double)N;
        for (int j = 0; j < K; j++) den += exp(l[sel[n * K + j]] - l[sel[n * K]]);
        for (int j = 0; j < K; j++) {
            int e = sel[n * K + j];
            double w = exp(l[e] - l[sel[n * K]]) / den, a[5];
            for (int64_t i = 0; i < H; i++) {
                double gi = 0.0, ui = 0.0;
                for (int64_t c = 0; c < C; c++) {
                    gi += wh[e][i * C + c] * xh[n * C + c];
                    ui += wh[E + e][i * C + c] * xh[n * C + c];
                }
                a[i] = silu_h(gi) * ui;
            }
            for (int64_t c = 0; c < C; c++) {
                double d = 0.0;
                for (int64_t i = 0; i < H; i++) d += wh[2 * E + e][c * H + i] * a[i];
                out[c] += w * d;
            }
        }
        for (int64_t c = 0; c < C; c++) max_err = fmax(max_err, fabs(oh[n * C + c] - out[c]));
    }
    if (have) {
        double aux_want = 0.0;
        for (int e = 0; e < E; e++) aux_want += (double)want[e] / (double)(N * K) * P[e];
        aux_want *= E;
        CHECK_MSG(max_err <= 1e-12, "moe: output differs from the host reference by %.3g", max_err);
        CHECK_MSG(fabs(auxh[0] - aux_want) <= 1e-12, "moe: aux loss %.17g, host reference %.17g", auxh[0], aux_want);
        printf("moe forward vs host reference: max abs err %.2e, aux loss %.6f (err %.2e)\n", max_err, auxh[0],
               fabs(auxh[0] - aux_want));
    }
    free(oh);
    free(auxh);
    for (int i = 0; i < 3 * E; i++) free(wh[i]);

    /* With the load-balancing loss in the objective: its gradient reaches x and the router
     * only (it does not depend on the experts, held constant here to keep the check short). */
    for (int i = 2; i < 2 + 3 * E; i++) CHECK_OK(it_tensor_set_requires_grad(in[i], false));
    for (int e = 0; e < E; e++) counts[e] = 0;
    moe_ctx ma = {E, K, true, randt(SHAPE(2, 4, 6), -1, 1), in + 2, counts};
    GC("moe + aux loss (2,4,6) E=4 k=2 H=5: x, router", f_moe, &ma, x, router);
    total = 0;
    for (int e = 0; e < E; e++) total += counts[e];
    CHECK_MSG(total == N * K, "moe + aux: tokens_per_expert sums to %" PRId64 ", expected %" PRId64, total, N * K);
    free(xh);
}

/* ------------------------------------------------------------------ a GPT-2-like block */

typedef struct {
    int64_t B, T, C, Vp, valid;
    int n_head;
} gpt_ctx;
enum {
    G_IDX,
    G_WTE,
    G_WPE,
    G_LN1W,
    G_LN1B,
    G_QKVW,
    G_QKVB,
    G_PROJW,
    G_PROJB,
    G_LN2W,
    G_LN2B,
    G_FCW,
    G_FCB,
    G_FCPW,
    G_FCPB,
    G_TGT,
    G_N
};

/* x = wte[idx] + wpe; x += proj(attn(linear(ln1(x)))); x += fcproj(gelu(fc(ln2(x))));
 * loss = cross_entropy(x wte^T, targets) with the lm head tied to wte (wte's gradient comes
 * from the embedding and from the head). */
static it_tensor *f_gpt(const void *c, it_tensor *const *in) {
    const gpt_ctx *g = c;
    it_tensor *x = it_add(it_embedding(in[G_IDX], in[G_WTE]), in[G_WPE]);
    it_tensor *h = it_layernorm(x, in[G_LN1W], in[G_LN1B], 1e-5f);
    h = it_linear(h, in[G_QKVW], in[G_QKVB]);
    h = it_causal_self_attention(h, g->n_head);
    h = it_linear(h, in[G_PROJW], in[G_PROJB]);
    x = it_add(x, h);
    h = it_layernorm(x, in[G_LN2W], in[G_LN2B], 1e-5f);
    h = it_linear(h, in[G_FCW], in[G_FCB]);
    h = it_gelu(h);
    h = it_linear(h, in[G_FCPW], in[G_FCPB]);
    x = it_add(x, h);
    it_tensor *logits = it_linear(x, in[G_WTE], NULL);
    return it_cross_entropy(logits, in[G_TGT], g->valid);
}

static void test_gpt_block(void) {
    /* small enough that 2 forwards per parameter element stay cheap under ASan */
    gpt_ctx g = {2, 4, 4, 8, 6, 2};
    int64_t C = g.C, Vp = g.Vp;
    int64_t idx[8] = {3, 5, 3, 0, 4, 1, 5, 5}, tgt[8] = {5, 3, 0, 4, 1, 5, 5, 2};
    it_tensor *in[G_N];
    in[G_IDX] = idxt(IT_DTYPE_I64, SHAPE(2, 4), idx);
    in[G_WTE] = randt(2, (int64_t[]){Vp, C}, -0.5, 0.5);
    in[G_WPE] = randt(2, (int64_t[]){g.T, C}, -0.5, 0.5);
    in[G_LN1W] = randt(1, (int64_t[]){C}, 0.5, 1.5);
    in[G_LN1B] = randt(1, (int64_t[]){C}, -0.2, 0.2);
    in[G_QKVW] = randt(2, (int64_t[]){3 * C, C}, -0.5, 0.5);
    in[G_QKVB] = randt(1, (int64_t[]){3 * C}, -0.2, 0.2);
    in[G_PROJW] = randt(2, (int64_t[]){C, C}, -0.5, 0.5);
    in[G_PROJB] = randt(1, (int64_t[]){C}, -0.2, 0.2);
    in[G_LN2W] = randt(1, (int64_t[]){C}, 0.5, 1.5);
    in[G_LN2B] = randt(1, (int64_t[]){C}, -0.2, 0.2);
    in[G_FCW] = randt(2, (int64_t[]){4 * C, C}, -0.5, 0.5);
    in[G_FCB] = randt(1, (int64_t[]){4 * C}, -0.2, 0.2);
    in[G_FCPW] = randt(2, (int64_t[]){C, 4 * C}, -0.5, 0.5);
    in[G_FCPB] = randt(1, (int64_t[]){C}, -0.2, 0.2);
    in[G_TGT] = idxt(IT_DTYPE_I32, SHAPE(2, 4), tgt);
    gradcheck("gpt-2 block end to end (B=2 T=4 C=4 nh=2 Vp=8 valid=6)", f_gpt, &g, G_N, in);
    /* padded vocabulary rows 6, 7 of wte: only the tied head could reach them, and padded
     * logits take no part, so their gradient is exactly 0 */
    double *gw = to_host(it_tensor_grad(in[G_WTE]));
    CHECK(gw != NULL);
    for (int64_t k = g.valid * C; gw && k < Vp * C; k++)
        CHECK_MSG(gw[k] == 0.0, "gpt block: wte padded row %" PRId64 " has gradient %.17g", k / C, gw[k]);
    free(gw);
}

/* ------------------------------------------------------------------ a LLaMA-like block */

typedef struct {
    int64_t B, T, nh, nkv, hd, V;
    it_tensor *cos, *sin; /* constants, as the model's tables */
} llama_ctx;
enum { Y_X, Y_LN1W, Y_QKVW, Y_PROJW, Y_LN2W, Y_FCW, Y_FC2W, Y_FCPW, Y_LNFW, Y_HEADW, Y_TGT, Y_N };

/* h = rmsnorm(x); q|k|v = slices of one linear (GQA: nkv < nh), q and k through rope;
 * x += proj(attention(q, k, v)); x += down(silu(gate(rmsnorm(x))) * up(rmsnorm(x)));
 * loss = cross_entropy(head(rmsnorm(x)), targets). */
static it_tensor *f_llama(const void *c, it_tensor *const *in) {
    const llama_ctx *g = c;
    int64_t B = g->B, T = g->T, C = g->nh * g->hd, kvd = g->nkv * g->hd;
    it_tensor *x = in[Y_X];
    it_tensor *h = it_rmsnorm(x, in[Y_LN1W], 1e-5f);
    it_tensor *qkv = it_linear(h, in[Y_QKVW], NULL); /* (B, T, C + 2 kvd), rows Q|K|V */
    it_tensor *q = it_slice(qkv, 2, 0, C, 1), *k = it_slice(qkv, 2, C, C + kvd, 1);
    it_tensor *v = it_slice(qkv, 2, C + kvd, C + 2 * kvd, 1);
    q = it_rope(it_reshape(q, 4, (int64_t[]){B, T, g->nh, g->hd}), g->cos, g->sin);
    k = it_rope(it_reshape(k, 4, (int64_t[]){B, T, g->nkv, g->hd}), g->cos, g->sin);
    v = it_reshape(v, 4, (int64_t[]){B, T, g->nkv, g->hd});
    x = it_add(x, it_linear(it_attention(q, k, v), in[Y_PROJW], NULL));
    h = it_rmsnorm(x, in[Y_LN2W], 1e-5f);
    h = it_mul(it_silu(it_linear(h, in[Y_FCW], NULL)), it_linear(h, in[Y_FC2W], NULL));
    x = it_add(x, it_linear(h, in[Y_FCPW], NULL));
    it_tensor *logits = it_linear(it_rmsnorm(x, in[Y_LNFW], 1e-5f), in[Y_HEADW], NULL);
    return it_cross_entropy(logits, in[Y_TGT], g->V);
}

static void test_llama_block(void) {
    llama_ctx g = {2, 3, 2, 1, 4, 5, NULL, NULL};
    const int64_t C = g.nh * g.hd, kvd = g.nkv * g.hd, Hf = 6;
    rope_tables(g.T, g.hd, 10.0, &g.cos, &g.sin);
    int64_t tgt[6] = {4, 0, 2, 2, 1, 3};
    it_tensor *in[Y_N];
    in[Y_X] = randt(3, (int64_t[]){g.B, g.T, C}, -1, 1);
    in[Y_LN1W] = randt(1, (int64_t[]){C}, 0.5, 1.5);
    in[Y_QKVW] = randt(2, (int64_t[]){C + 2 * kvd, C}, -0.5, 0.5);
    in[Y_PROJW] = randt(2, (int64_t[]){C, C}, -0.5, 0.5);
    in[Y_LN2W] = randt(1, (int64_t[]){C}, 0.5, 1.5);
    in[Y_FCW] = randt(2, (int64_t[]){Hf, C}, -0.5, 0.5);
    in[Y_FC2W] = randt(2, (int64_t[]){Hf, C}, -0.5, 0.5);
    in[Y_FCPW] = randt(2, (int64_t[]){C, Hf}, -0.5, 0.5);
    in[Y_LNFW] = randt(1, (int64_t[]){C}, 0.5, 1.5);
    in[Y_HEADW] = randt(2, (int64_t[]){g.V, C}, -0.5, 0.5);
    in[Y_TGT] = idxt(IT_DTYPE_I64, SHAPE(2, 3), tgt);
    gradcheck("llama block end to end (B=2 T=3 C=8 nh=2 nkv=1 hd=4 H=6 V=5)", f_llama, &g, Y_N, in);
}

/* ------------------------------------------------------------------ engine behaviour */

static void test_no_grad_records_nothing(void) {
    it_tensor *x = randt(SHAPE(3, 4), -1, 1), *w = randt(SHAPE(5, 4), -1, 1);
    CHECK_OK(it_tensor_set_requires_grad(x, true));
    CHECK_OK(it_tensor_set_requires_grad(w, true));
    CHECK(it_grad_enabled());
    it_grad_set_enabled(false);
    CHECK(!it_grad_enabled());
    it_tensor *y = it_sum_all(it_tanh(it_linear(it_mul(x, x), w, NULL)));
    CHECK(y != NULL);
    CHECK_MSG(it_tape_size() == 0, "no-grad mode recorded %zu nodes", it_tape_size());
    CHECK(!it_tensor_requires_grad(y));
    CHECK_ERR(it_backward(y), IT_ERR_INVALID_ARG, "does not require grad");
    it_grad_set_enabled(true);
    CHECK(it_grad_enabled());
    /* with grad on, the same chain records one node per op: mul, linear, tanh, sum */
    y = it_sum_all(it_tanh(it_linear(it_mul(x, x), w, NULL)));
    CHECK_MSG(it_tape_size() == 4, "grad mode recorded %zu nodes, expected 4", it_tape_size());
    CHECK(it_tensor_requires_grad(y));
    it_tape_clear();
    CHECK(it_tape_size() == 0);
    /* inputs that do not require grad record nothing either */
    it_tensor *a = randt(SHAPE(3, 4), -1, 1);
    CHECK(it_exp(a) != NULL);
    CHECK(it_tape_size() == 0);
}

/* Two backward calls add up (x through an elementwise op, w through gemm's beta = 1 path,
 * b through the reduction's accumulate); it_zero_grad zeroes the buffers it keeps. */
static void test_accumulation_and_zero_grad(void) {
    it_tensor *x = randt(SHAPE(3, 4), -1, 1), *w = randt(SHAPE(5, 4), -1, 1), *b = randt(SHAPE(5), -1, 1);
    it_tensor *R = randt(SHAPE(3, 5), -1, 1);
    it_tensor *p[3] = {x, w, b};
    for (int i = 0; i < 3; i++) CHECK_OK(it_tensor_set_requires_grad(p[i], true));
    double *g1[3] = {0}, *g2[3] = {0}, *g3[3] = {0};
    it_tensor *buf[3] = {0};
    for (int pass = 0; pass < 3; pass++) {
        it_scope_begin();
        it_tensor *L = it_sum_all(it_mul(it_linear(it_tanh(x), w, b), R));
        CHECK_OK(it_backward(L));
        it_scope_end();
        for (int i = 0; i < 3; i++) {
            double *h = to_host(it_tensor_grad(p[i]));
            if (pass == 0) g1[i] = h, buf[i] = it_tensor_grad(p[i]);
            if (pass == 1) g2[i] = h;
            if (pass == 2) g3[i] = h;
        }
        if (pass == 1) {
            CHECK_OK(it_zero_grad(p, 3));
            for (int i = 0; i < 3; i++) {
                CHECK_MSG(it_tensor_grad(p[i]) == buf[i], "zero_grad replaced the gradient buffer of param %d", i);
                double *z = to_host(it_tensor_grad(p[i]));
                int64_t n = it_tensor_numel(p[i]);
                for (int64_t k = 0; z && k < n; k++)
                    CHECK_MSG(z[k] == 0.0, "zero_grad left %.17g at [%d][%" PRId64 "]", z[k], i, k);
                free(z);
            }
        }
    }
    for (int i = 0; i < 3; i++) {
        CHECK(g1[i] && g2[i] && g3[i]);
        int64_t n = it_tensor_numel(p[i]);
        for (int64_t k = 0; g1[i] && g2[i] && g3[i] && k < n; k++) {
            /* deterministic kernels give the same gradient each pass; g + g is exact, but
             * gemm with beta = 1 may fuse the add into an FMA, so allow 1e-13 relative */
            CHECK_MSG(fabs(g2[i][k] - 2.0 * g1[i][k]) <= 1e-13 * fmax(1.0, fabs(g1[i][k])),
                      "param %d [%" PRId64 "]: after two backwards %.17g, expected 2 x %.17g", i, k, g2[i][k],
                      g1[i][k]);
            CHECK_MSG(fabs(g3[i][k] - g1[i][k]) <= 1e-13 * fmax(1.0, fabs(g1[i][k])),
                      "param %d [%" PRId64 "]: after zero_grad + backward %.17g, expected %.17g", i, k, g3[i][k],
                      g1[i][k]);
        }
        CHECK_MSG(g1[i] == NULL || g1[i][0] != 0.0, "param %d: first gradient is zero, the test proves nothing", i);
        free(g1[i]);
        free(g2[i]);
        free(g3[i]);
    }
    /* zero_grad on a tensor without a gradient yet (and NULL entries) is a no-op */
    it_tensor *fresh = randt(SHAPE(2), -1, 1);
    it_tensor *zp[2] = {fresh, NULL};
    CHECK_OK(it_zero_grad(zp, 2));
    CHECK(it_tensor_grad(fresh) == NULL);
}

static void test_backward_needs_scalar(void) {
    it_tensor *x = randt(SHAPE(3, 4), -1, 1);
    CHECK_OK(it_tensor_set_requires_grad(x, true));
    it_tensor *y = it_tanh(x);
    CHECK_ERR(it_backward(y), IT_ERR_INVALID_ARG, "one element");
    it_tensor *s = it_sum(y, 1, (int[]){0}, false); /* (4): still more than one element */
    CHECK_ERR(it_backward(s), IT_ERR_INVALID_ARG, "one element");
    it_error_clear(); /* a NULL input fails with the recorded error, or names itself */
    CHECK_ERR(it_backward(NULL), IT_ERR_INVALID_ARG, "NULL");
    CHECK(it_tensor_grad(x) == NULL);
    it_tape_clear();
    CHECK(it_tape_size() == 0);
    /* a (1,1) tensor has one element: accepted */
    it_tensor *one = it_sum(x, 2, (int[]){0, 1}, true);
    CHECK_OK(it_backward(one));
    CHECK(it_tape_size() == 0);
    double *g = to_host(it_tensor_grad(x));
    for (int k = 0; g && k < 12; k++) CHECK_NEAR(g[k], 1.0, 0.0);
    free(g);
}

/* Saved tensors (tanh's output, the mul operands, linear's input) are released by backward
 * itself, not by a later scope end: intermediates held only by the tape are freed as soon as
 * it_backward returns. */
static void test_saved_tensors_freed(void) {
    it_tensor *x = randt(SHAPE(16, 32), -1, 1), *w = randt(SHAPE(32, 32), -1, 1);
    it_tensor *R = randt(SHAPE(16, 32), -1, 1);
    CHECK_OK(it_tensor_set_requires_grad(x, true));
    CHECK_OK(it_tensor_set_requires_grad(w, true));
    /* The gradient buffers exist before the forward, so that backward allocates none that
     * could take a block the intermediates leave in the cache. */
    CHECK_OK(it_tensor_set_grad(x, it_tensor_zeros(cpu, IT_DTYPE_FP64, 2, (int64_t[]){16, 32})));
    CHECK_OK(it_tensor_set_grad(w, it_tensor_zeros(cpu, IT_DTYPE_FP64, 2, (int64_t[]){32, 32})));
    size_t block_x, block_1;
    it_mem_empty_cache(cpu); /* fresh blocks: each takes exactly its rounded size */
    {                        /* the allocator's block sizes for x-sized and one-element tensors */
        size_t u = mem_used();
        it_tensor *t = it_tensor_new(cpu, IT_DTYPE_FP64, 2, (int64_t[]){16, 32});
        block_x = mem_used() - u;
        it_tensor_release(it_scope_keep(t));
        it_mem_empty_cache(cpu);
        u = mem_used();
        t = it_tensor_new(cpu, IT_DTYPE_FP64, 0, NULL);
        block_1 = mem_used() - u;
        it_tensor_release(it_scope_keep(t));
        it_mem_empty_cache(cpu);
    }
    size_t before = mem_used();
    it_scope_begin();
    it_tensor *L = it_sum_all(it_mul(it_tanh(it_linear(it_exp(x), w, NULL)), R));
    it_scope_keep(L); /* every intermediate is now held by the tape alone */
    it_scope_end();
    size_t after_forward = mem_used();
    CHECK_MSG(after_forward > before + 4 * block_x, "the tape should hold the intermediates: %zu -> %zu", before,
              after_forward);
    CHECK_OK(it_backward(L));
    size_t after_backward = mem_used();
    /* left: L (one element; the gradients were allocated before) */
    CHECK_MSG(after_backward == before + block_1, "after backward %zu bytes used, expected %zu (before) + %zu (loss)",
              after_backward, before, block_1);
    it_tensor_release(L);
    CHECK(mem_used() == before);
}

/* A backward owns the gradient it is given when nothing else holds it (it__grad_owned): it
 * may write over it (unary and mul backward) or hand it on whole (reshape, add), instead of
 * copying. These compositions mix every way a gradient is shared: the same leaf on both
 * sides, a gradient given to two inputs, an intermediate used twice, views of views. */
static it_tensor *f_residual_gelu(const void *c, it_tensor *const *in) {
    (void)c;
    return it_add(in[0], it_gelu(in[0]));
}
static it_tensor *f_self_sub_add(const void *c, it_tensor *const *in) {
    (void)c; /* (x - x) + (x + x) * y */
    return it_add(it_sub(in[0], in[0]), it_mul(it_add(in[0], in[0]), in[1]));
}
static it_tensor *f_views_twice(const void *c, it_tensor *const *in) {
    (void)c; /* h = gelu(x viewed (6, 2)) seen as (3, 4) twice: h + h * tanh(h) */
    it_tensor *h = it_gelu(it_reshape(in[0], 2, (int64_t[]){6, 2}));
    it_tensor *a = it_reshape(h, 2, (int64_t[]){3, 4}), *b = it_reshape(h, 2, (int64_t[]){3, 4});
    return it_add(a, it_mul(b, it_tanh(a)));
}
static it_tensor *f_exp_silu_mul(const void *c, it_tensor *const *in) {
    (void)c; /* exp(x) * silu(y) * x: mul's second gradient written over its dy */
    return it_mul(it_mul(it_exp(in[0]), it_silu(in[1])), in[0]);
}

/* Runs L's backward and counts the calls of three kernel slots it made. */
static void backward_counting(it_tensor *L, uint64_t *copies, uint64_t *binaries, uint64_t *fills) {
    it_backend_stats_reset(cpu.backend);
    CHECK_OK(L ? it_backward(L) : it_last_status());
    it_kernel_stat st[IT_KERNEL_SLOT_COUNT];
    CHECK_OK(it_backend_kernel_stats(cpu.backend, st));
    for (size_t i = 0; i < IT_KERNEL_SLOT_COUNT; i++) {
        if (strcmp(st[i].slot, "copy_strided") == 0) *copies = st[i].calls;
        if (strcmp(st[i].slot, "binary") == 0) *binaries = st[i].calls;
        if (strcmp(st[i].slot, "fill") == 0) *fills = st[i].calls;
    }
}

static void test_grad_handed_on(void) {
    GC("x + gelu(x) (dy to both inputs)", f_residual_gelu, NULL, randt(SHAPE(3, 4), -2, 2));
    GC("(x - x) + (x + x) * y", f_self_sub_add, NULL, randt(SHAPE(3, 4), -1, 1), randt(SHAPE(4), -1, 1));
    GC("h + h * tanh(h), h = gelu(reshape x), views", f_views_twice, NULL, randt(SHAPE(12), -2, 2));
    GC("exp(x) * silu(y) * x", f_exp_silu_mul, NULL, randt(SHAPE(3, 4), -1, 1), randt(SHAPE(3, 4), -2, 2));
    /* Gradients through reshapes and an elementwise map take no copy (each backward hands
     * the gradient it holds alone on whole, or writes over it). */
    it_tensor *x = randt(SHAPE(64, 32), -2, 2), *R = randt(SHAPE(64, 32), -1, 1);
    CHECK_OK(it_tensor_set_requires_grad(x, true));
    uint64_t copies = 0, binaries = 0, fills = 0;
    backward_counting(
        it_sum_all(it_mul(it_reshape(it_gelu(it_reshape(x, 2, (int64_t[]){32, 64})), 2, (int64_t[]){64, 32}), R)),
        &copies, &binaries, &fills);
    /* one: sum_all's backward broadcasts dL into a tensor; the two reshapes' took a copy each */
    CHECK_MSG(copies == 1, "backward through reshape -> gelu -> reshape made %llu copies, expected 1 (sum_all's)",
              (unsigned long long)copies);
    CHECK_MSG(binaries == 2, "backward made %llu binary calls, expected 2 (mul's, gelu's)",
              (unsigned long long)binaries);
    /* A slice's first gradient: zeros around the window (two runs), dy copied in, and the
     * new gradient taken over by x, not copied again. */
    it_tensor *x3 = randt(SHAPE(3, 4, 5), -1, 1), *R3 = randt(SHAPE(1, 4, 5), -1, 1);
    CHECK_OK(it_tensor_set_requires_grad(x3, true));
    backward_counting(it_sum_all(it_mul(it_slice(x3, 0, 1, 2, 1), R3)), &copies, &binaries, &fills);
    CHECK_MSG(copies == 2, "slice backward: %llu copies, expected 2 (sum_all's broadcast, dy into the window)",
              (unsigned long long)copies);
    CHECK_MSG(fills == 3, "slice backward: %llu fills, expected 3 (dL = 1, the runs before and after the window)",
              (unsigned long long)fills);
    double gv[3], rv;
    for (int i = 0; i < 3; i++) CHECK_OK(it_tensor_item(it_tensor_grad(x3), (int64_t[]){i, 2, 3}, &gv[i]));
    CHECK_OK(it_tensor_item(R3, (int64_t[]){0, 2, 3}, &rv));
    CHECK_MSG(gv[0] == 0.0 && gv[1] == rv && gv[2] == 0.0, "slice backward: gradient %g %g %g, expected 0 %g 0", gv[0],
              gv[1], gv[2], rv);
}

/* it_backward_hooked reports each leaf once, when no node left would add to its gradient:
 * L = sum(tanh(x @ w) * w2 + x @ w)  uses w twice (early in the tape and late), w2 once at the
 * end, x twice. The hook sees each gradient final: it must already equal the plain backward's. */
typedef struct {
    it_tensor *leaf[8];
    double first[8]; /* the gradient's first element when reported */
    int n, nulls;
} hook_log;

static it_status record_hook(void *ctx, it_tensor *leaf) {
    hook_log *h = ctx;
    if (!leaf) {
        h->nulls++;
        return IT_OK;
    }
    if (h->n < 8) {
        double v = 0;
        it_tensor_item(it_tensor_grad(leaf), (int64_t[]){0, 0}, &v);
        h->leaf[h->n] = leaf;
        h->first[h->n++] = v;
    }
    return IT_OK;
}

static it_status failing_hook(void *ctx, it_tensor *leaf) {
    (void)ctx;
    return leaf ? it_error(IT_ERR_BACKEND, "hook refused") : IT_OK;
}

static it_tensor *hooked_loss(it_tensor *x, it_tensor *w, it_tensor *w2) {
    it_tensor *xw = it_matmul(x, w, false, false);
    return it_sum_all(it_add(it_mul(it_tanh(xw), w2), it_matmul(x, w, false, false)));
}

static void test_backward_hook(void) {
    it_tensor *x = randt(SHAPE(4, 6), -1, 1), *w = randt(SHAPE(6, 5), -1, 1), *w2 = randt(SHAPE(4, 5), -1, 1);
    it_tensor *p[3] = {x, w, w2};
    for (int i = 0; i < 3; i++) CHECK_OK(it_tensor_set_requires_grad(p[i], true));
    CHECK_OK(it_backward(hooked_loss(x, w, w2)));
    double ref[3];
    for (int i = 0; i < 3; i++) CHECK_OK(it_tensor_item(it_tensor_grad(p[i]), (int64_t[]){0, 0}, &ref[i]));
    CHECK_OK(it_zero_grad(p, 3));
    hook_log h = {0};
    CHECK_OK(it_backward_hooked(hooked_loss(x, w, w2), record_hook, &h));
    CHECK_MSG(h.n == 3, "hook reported %d leaves, expected 3", h.n);
    for (int i = 0; i < 3; i++) {
        int seen = 0;
        for (int j = 0; j < h.n; j++)
            if (h.leaf[j] == p[i]) {
                seen++;
                CHECK_MSG(h.first[j] == ref[i], "leaf %d reported before its gradient was final (%.17g vs %.17g)", i,
                          h.first[j], ref[i]);
            }
        CHECK_MSG(seen == 1, "leaf %d reported %d times", i, seen);
    }
    CHECK(h.leaf[0] == w2); /* used by the last node recorded alone: final first */
    CHECK_MSG(h.nulls >= 5, "progress calls between nodes: %d", h.nulls);
    /* A hook's error stops backward, and the next backward counts afresh. */
    CHECK_OK(it_zero_grad(p, 3));
    CHECK_ERR(it_backward_hooked(hooked_loss(x, w, w2), failing_hook, NULL), IT_ERR_BACKEND, "hook refused");
    CHECK(it_tape_size() == 0);
    CHECK_OK(it_zero_grad(p, 3));
    hook_log h2 = {0};
    CHECK_OK(it_backward_hooked(hooked_loss(x, w, w2), record_hook, &h2));
    CHECK_MSG(h2.n == 3, "after a failed backward the hook reported %d leaves, expected 3", h2.n);
}

/* ------------------------------------------------------------------ runner */

/* Each test in its own scope; afterwards nothing may be left: memory back to its level
 * before the test, empty tape, grad mode on. */
static void run(const char *name, void (*fn)(void)) {
    size_t u0 = mem_used();
    int failures0 = it_test_failures;
    it_scope_begin();
    fn();
    it_scope_end();
    size_t u1 = mem_used();
    CHECK_MSG(u1 == u0, "%s: %zu bytes in use before, %zu after (leak)", name, u0, u1);
    CHECK_MSG(it_tape_size() == 0, "%s: tape holds %zu nodes at the end", name, it_tape_size());
    CHECK_MSG(it_grad_enabled(), "%s: grad mode left off", name);
    it_tape_clear();
    it_grad_set_enabled(true);
    if (it_test_failures != failures0) fprintf(stderr, "-- %s: %d failures\n", name, it_test_failures - failures0);
}

int main(void) {
    cpu = it_device_cpu();
    size_t start = mem_used();
    CHECK(start != (size_t)-1);
    run("elementwise binary", test_elementwise_binary);
    run("elementwise unary", test_elementwise_unary);
    run("matmul", test_matmul);
    run("linear", test_linear);
    run("grouped linear", test_grouped_linear);
    run("embedding", test_embedding);
    run("layernorm", test_layernorm);
    run("softmax", test_softmax);
    run("cross_entropy", test_cross_entropy);
    run("cross_entropy padding", test_cross_entropy_padding_zero);
    run("attention", test_attention);
    run("reductions", test_reductions);
    run("views", test_views);
    run("rmsnorm", test_rmsnorm);
    run("rope", test_rope);
    run("attention (grouped-query)", test_gqa_attention);
    run("topk", test_topk);
    run("index_add", test_index_add);
    run("moe", test_moe);
    run("gpt block", test_gpt_block);
    run("llama block", test_llama_block);
    run("no-grad mode", test_no_grad_records_nothing);
    run("accumulation and zero_grad", test_accumulation_and_zero_grad);
    run("backward needs a scalar", test_backward_needs_scalar);
    run("saved tensors freed", test_saved_tensors_freed);
    run("backward hook", test_backward_hook);
    run("gradients handed on", test_grad_handed_on);
    CHECK_MSG(mem_used() == start, "memory in use %zu at the end, %zu at the start", mem_used(), start);
    CHECK_MSG(it_tape_size() == 0, "tape holds %zu nodes at the end", it_tape_size());
    printf("gradcheck: worst relative error over all ops %.2e (tolerance %.0e)\n", worst_rel, GC_TOL);
    return it_test_report("test_gradcheck");
}
