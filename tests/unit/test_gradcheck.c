/* Finite-difference gradient checks, in fp64 on the cpu device, for every differentiable op
 * of ops.h, a composed GPT-2-like block, and the autograd engine's bookkeeping (no-grad
 * mode, accumulation, zero_grad, refusal of a non-scalar loss, release of saved tensors).
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
 * ~6e-8 relative: still well inside the bound. */
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
    size_t block_x, block_w, block_1;
    it_mem_empty_cache(cpu); /* fresh blocks: each takes exactly its rounded size */
    {                        /* the allocator's block sizes for x-, w- and one-element tensors */
        size_t u = mem_used();
        it_tensor *t = it_tensor_new(cpu, IT_DTYPE_FP64, 2, (int64_t[]){16, 32});
        block_x = mem_used() - u;
        it_tensor_release(it_scope_keep(t));
        u = mem_used();
        t = it_tensor_new(cpu, IT_DTYPE_FP64, 2, (int64_t[]){32, 32});
        block_w = mem_used() - u;
        it_tensor_release(it_scope_keep(t));
        u = mem_used();
        t = it_tensor_new(cpu, IT_DTYPE_FP64, 0, NULL);
        block_1 = mem_used() - u;
        it_tensor_release(it_scope_keep(t));
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
    /* left: x's and w's gradients and L (one element) */
    CHECK_MSG(after_backward == before + block_x + block_w + block_1,
              "after backward %zu bytes used, expected %zu (before) + %zu + %zu (grads) + %zu (loss)", after_backward,
              before, block_x, block_w, block_1);
    it_tensor_release(L);
    CHECK(mem_used() == before + block_x + block_w);
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
    run("embedding", test_embedding);
    run("layernorm", test_layernorm);
    run("softmax", test_softmax);
    run("cross_entropy", test_cross_entropy);
    run("cross_entropy padding", test_cross_entropy_padding_zero);
    run("attention", test_attention);
    run("reductions", test_reductions);
    run("views", test_views);
    run("gpt block", test_gpt_block);
    run("no-grad mode", test_no_grad_records_nothing);
    run("accumulation and zero_grad", test_accumulation_and_zero_grad);
    run("backward needs a scalar", test_backward_needs_scalar);
    run("saved tensors freed", test_saved_tensors_freed);
    CHECK_MSG(mem_used() == start, "memory in use %zu at the end, %zu at the start", mem_used(), start);
    CHECK_MSG(it_tape_size() == 0, "tape holds %zu nodes at the end", it_tape_size());
    printf("gradcheck: worst relative error over all ops %.2e (tolerance %.0e)\n", worst_rel, GC_TOL);
    return it_test_report("test_gradcheck");
}
