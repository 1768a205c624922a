/* Tensor parallelism's differentiable collectives (Megatron's regions) and its vocab-parallel
 * embedding and cross entropy, over one process group (the TP group).
 *
 * The vocab-parallel pair is composed from the embedding and cross-entropy kernels every
 * backend has, so a new backend runs tensor parallelism without a kernel of its own: the
 * per-row numbers (B*T of them) go through host memory, where the ranks' partial log-sum-exps
 * are combined in fp64 over the host communicator. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "infinitrain/dist.h"
#include "ops/ops_common.h"

static bool alone(it_dist *d) { return !d || it_dist_world(d) == 1; }

/* out, with a node for x's gradient whose backward runs over group d (when x needs one). */
static it_tensor *record(const char *name, it_backward_fn fn, it_dist *d, it_tensor *x, it_tensor *out) {
    OP_REQUIRE(out);
    if (it__needs_grad(1, &x)) {
        it_node *n = it__node_record(name, fn, out, 1, &x);
        OP_REQUIRE(n);
        n->ctx = d;
    }
    return out;
}

/* ---------------------------------------------------------------- copy / reduce */

/* dx = all-reduce(dy): in place when backward handed dy over, else on a copy. */
static it_status tp_copy_backward(it_node *n, it_tensor *dy) {
    it_tensor *g = it__grad_owned(dy) ? dy : it_tensor_clone(dy);
    if (!g) return it_last_status();
    it_status st = it_dist_all_reduce(n->ctx, g, IT_CCL_SUM);
    return st ? st : it__accum_grad(n->in[0], g);
}

it_tensor *it_tp_copy(it_dist *d, it_tensor *x) {
    OP_REQUIRE(x);
    if (alone(d)) return x;
    it_tensor *c = it_tensor_contiguous(x);
    return record("tp_copy", tp_copy_backward, d, x, c ? it_tensor_view(c, c->ndim, c->shape) : NULL);
}

static it_status tp_reduce_backward(it_node *n, it_tensor *dy) { return it__accum_grad(n->in[0], dy); }

it_tensor *it_tp_reduce(it_dist *d, it_tensor *x) {
    OP_REQUIRE(x);
    if (alone(d)) return x;
    it_tensor *out = it_tensor_clone(x);
    OP_REQUIRE(out);
    if (it_dist_all_reduce(d, out, IT_CCL_SUM)) return NULL;
    return record("tp_reduce", tp_reduce_backward, d, x, out);
}

/* ---------------------------------------------------------------- sequence parallel */

/* x (B, N*Tl, ...) seen as (B, N, Tl, ...) with dims 0 and 1 swapped, contiguous: rank r's rows
 * become the r-th of N equal chunks (what reduce-scatter splits and all-gather joins). */
static it_tensor *ranks_first(it_tensor *x, int64_t N) {
    int64_t shape[IT_MAX_DIMS];
    int perm[IT_MAX_DIMS];
    int nd = x->ndim + 1;
    shape[0] = x->shape[0];
    shape[1] = N;
    shape[2] = x->shape[1] / N;
    for (int k = 2; k < x->ndim; k++) shape[k + 1] = x->shape[k];
    for (int k = 0; k < nd; k++) perm[k] = k;
    perm[0] = 1;
    perm[1] = 0;
    it_tensor *c = it_tensor_contiguous(x);
    it_tensor *v = c ? it_tensor_view(c, nd, shape) : NULL;
    it_tensor *p = v ? it_tensor_permute(v, perm) : NULL;
    return p ? it_tensor_contiguous(p) : NULL;
}

/* The inverse: (N, B, Tl, ...) contiguous -> (B, N*Tl, ...) contiguous. */
static it_tensor *ranks_back(it_tensor *g, int nd_out, const int64_t *out_shape) {
    int perm[IT_MAX_DIMS];
    for (int k = 0; k < g->ndim; k++) perm[k] = k;
    perm[0] = 1;
    perm[1] = 0;
    it_tensor *p = it_tensor_permute(g, perm);
    it_tensor *c = p ? it_tensor_contiguous(p) : NULL;
    return c ? it_tensor_view(c, nd_out, out_shape) : NULL;
}

/* (B, T, ...) summed over the ranks, this rank's rows [r*T/N, (r+1)*T/N) of each batch row. */
static it_tensor *reduce_scatter_rows(it_dist *d, it_tensor *x) {
    int64_t N = it_dist_world(d), shape[IT_MAX_DIMS];
    memcpy(shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
    shape[1] /= N;
    it_tensor *all = ranks_first(x, N);
    it_tensor *mine = all ? it_tensor_new(it_tensor_device(x), x->dtype, x->ndim, shape) : NULL;
    if (!mine || it_dist_reduce_scatter(d, all, mine, IT_CCL_SUM)) return NULL;
    return mine;
}

/* (B, Tl, ...) from every rank -> (B, N*Tl, ...), rank r's rows at [r*Tl, (r+1)*Tl). */
static it_tensor *all_gather_rows(it_dist *d, it_tensor *x) {
    int64_t N = it_dist_world(d), shape[IT_MAX_DIMS], out[IT_MAX_DIMS];
    shape[0] = N;
    memcpy(shape + 1, x->shape, sizeof(int64_t) * (size_t)x->ndim);
    memcpy(out, x->shape, sizeof(int64_t) * (size_t)x->ndim);
    out[1] *= N;
    it_tensor *c = it_tensor_contiguous(x);
    it_tensor *all = c ? it_tensor_new(it_tensor_device(x), x->dtype, x->ndim + 1, shape) : NULL;
    if (!all || it_dist_all_gather(d, c, all)) return NULL;
    return ranks_back(all, x->ndim, out);
}

static it_tensor *check_rows(const char *op, it_dist *d, it_tensor *x, bool gather) {
    if (x->ndim < 2) {
        it_error(IT_ERR_INVALID_ARG, "%s: input must be (B, T, ...), got %d-D", op, x->ndim);
        return NULL;
    }
    if (!gather && x->shape[1] % it_dist_world(d)) {
        it_error(IT_ERR_INVALID_ARG, "%s: sequence length %lld is not divisible by the group's %d ranks", op,
                 (long long)x->shape[1], it_dist_world(d));
        return NULL;
    }
    return x;
}

/* x (B, T, ...) -> this rank's rows [r*T/N, (r+1)*T/N) of each batch row, contiguous. */
static it_tensor *own_rows(it_dist *d, it_tensor *x) {
    int64_t tl = x->shape[1] / it_dist_world(d), r = it_dist_rank(d);
    it_tensor *v = it_tensor_slice(x, 1, r * tl, (r + 1) * tl, 1);
    return v ? it_tensor_contiguous(v) : NULL;
}

/* dx = rows(dy) for each region's backward. */
#define SP_BACKWARD(name, rows)                                                                                        \
    static it_status name(it_node *n, it_tensor *dy) {                                                                 \
        it_tensor *g = rows(n->ctx, dy);                                                                               \
        return g ? it__accum_grad(n->in[0], g) : it_last_status();                                                     \
    }
SP_BACKWARD(gathered_backward, reduce_scatter_rows) /* it_sp_gather's */
SP_BACKWARD(scattered_backward, all_gather_rows)    /* it_sp_reduce_scatter's and it_sp_split's */
SP_BACKWARD(own_rows_backward, own_rows)            /* it_sp_gather_split's */

/* A sequence-parallel region over x: forward rows(d, x), the node's backward bwd. `gather`:
 * x holds this rank's rows (else all T, which the group must divide). */
static it_tensor *sp_region(const char *name, it_tensor *(*rows)(it_dist *, it_tensor *), it_backward_fn bwd,
                            it_dist *d, it_tensor *x, bool gather) {
    OP_REQUIRE(x);
    if (alone(d)) return x;
    OP_REQUIRE(check_rows(name, d, x, gather));
    return record(name, bwd, d, x, rows(d, x));
}

it_tensor *it_sp_gather(it_dist *d, it_tensor *x) {
    return sp_region("sp_gather", all_gather_rows, gathered_backward, d, x, true);
}
it_tensor *it_sp_reduce_scatter(it_dist *d, it_tensor *x) {
    return sp_region("sp_reduce_scatter", reduce_scatter_rows, scattered_backward, d, x, false);
}
it_tensor *it_sp_gather_split(it_dist *d, it_tensor *x) {
    return sp_region("sp_gather_split", all_gather_rows, own_rows_backward, d, x, true);
}
it_tensor *it_sp_split(it_dist *d, it_tensor *x) {
    return sp_region("sp_split", own_rows, scattered_backward, d, x, false);
}

/* ---------------------------------------------------------------- vocab-parallel embedding */

/* Host copy of an int32/int64 tensor's values as int64 (n of them), or NULL after an error. */
static int64_t *ids_to_host(it_tensor *t, int64_t n) {
    size_t es = it_dtype_size(t->dtype);
    void *raw = malloc((size_t)n * es + 1);
    int64_t *ids = malloc(sizeof(int64_t) * (size_t)n + 1);
    it_tensor *c = raw && ids ? it_tensor_contiguous(t) : NULL;
    if (!c || it_tensor_copy_to_host(c, raw, (size_t)n * es)) {
        if (!raw || !ids) it_error(IT_ERR_OOM, "tensor parallel: %lld ids: out of host memory", (long long)n);
        free(raw);
        free(ids);
        return NULL;
    }
    for (int64_t i = 0; i < n; i++) ids[i] = t->dtype == IT_DTYPE_I64 ? ((int64_t *)raw)[i] : ((int32_t *)raw)[i];
    free(raw);
    return ids;
}

static bool check_ids(const char *op, it_tensor *ids) {
    if (ids->dtype != IT_DTYPE_I32 && ids->dtype != IT_DTYPE_I64) {
        it_error(IT_ERR_INVALID_ARG, "%s: ids must be int32 or int64, got %s", op, it_dtype_name(ids->dtype));
        return false;
    }
    return true;
}

it_tensor *it_tp_embedding(it_tensor *idx, it_tensor *w, int64_t lo) {
    OP_REQUIRE(idx && w);
    if (!check_ids("tp_embedding", idx)) return NULL;
    if (w->ndim != 2) {
        it_error(IT_ERR_INVALID_ARG, "tp_embedding: weight must be (V/N, C), got %d-D", w->ndim);
        return NULL;
    }
    int64_t n = it_tensor_numel(idx), V = w->shape[0];
    int64_t *ids = ids_to_host(idx, n);
    int32_t *local = ids ? malloc(sizeof(int32_t) * (size_t)n + 1) : NULL;
    float *mask = local ? malloc(sizeof(float) * (size_t)n + 1) : NULL;
    it_tensor *out = NULL;
    if (mask) {
        for (int64_t i = 0; i < n; i++) {
            bool mine = ids[i] >= lo && ids[i] < lo + V;
            local[i] = mine ? (int32_t)(ids[i] - lo) : 0; /* InfiniTrain: out-of-range ids look up row 0 */
            mask[i] = mine ? 1.0f : 0.0f;                 /* ... and their rows are zeroed */
        }
        int64_t mshape[IT_MAX_DIMS];
        memcpy(mshape, idx->shape, sizeof(int64_t) * (size_t)idx->ndim);
        mshape[idx->ndim] = 1;
        it_tensor *li = it_tensor_from_host(it_tensor_device(idx), IT_DTYPE_I32, idx->ndim, idx->shape, local,
                                            sizeof(int32_t) * (size_t)n);
        it_tensor *mk = li ? it_tensor_from_host(it_tensor_device(w), IT_DTYPE_FP32, idx->ndim + 1, mshape, mask,
                                                 sizeof(float) * (size_t)n)
                           : NULL;
        if (mk && w->dtype != IT_DTYPE_FP32) mk = it_tensor_to_dtype(mk, w->dtype);
        if (mk) out = it_mul(it_embedding(li, w), mk);
    } else if (ids) {
        it_error(IT_ERR_OOM, "tp_embedding: %lld ids: out of host memory", (long long)n);
    }
    free(ids);
    free(local);
    free(mask);
    return out;
}

/* ---------------------------------------------------------------- vocab-parallel cross entropy */

/* What backward needs, per row: the factor exp(lse_local - lse) that turns the local softmax
 * into the global one, and whether the target is in this rank's range. */
typedef struct vce_rows {
    int64_t rows, valid;
    double c[]; /* rows factors, then rows 0/1 in-range flags */
} vce_rows;

/* The kernels' arguments over logits (rows, Vl) and targets (rows). */
static it_status vce_kernel_fwd(it_tensor *l2, it_tensor *tcl, int64_t valid, it_tensor *losses) {
    it_tdesc dl = it_tensor_desc(l2), dt = it_tensor_desc(tcl), ds = it_tensor_desc(losses);
    return KCALL(it_tensor_device(l2), cross_entropy_fwd, &dl, &dt, valid, &ds);
}

/* flat (rows) int64 = n*Vl + t_local: each row's target column in the logits seen as (rows*Vl, 1)
 * (int64: rows*Vl passes 2^31 at B*T*Vp/TP sizes a large batch reaches) */
static it_tensor *flat_targets(it_device dev, const int32_t *tcl, int64_t rows, int64_t vl) {
    int64_t *f = malloc(sizeof(int64_t) * (size_t)rows + 1);
    if (!f) {
        it_error(IT_ERR_OOM, "tp_cross_entropy: out of host memory");
        return NULL;
    }
    for (int64_t i = 0; i < rows; i++) f[i] = i * vl + tcl[i];
    int64_t s[1] = {rows};
    it_tensor *t = it_tensor_from_host(dev, IT_DTYPE_I64, 1, s, f, sizeof(int64_t) * (size_t)rows);
    free(f);
    return t;
}

static it_status vce_backward(it_node *n, it_tensor *dy) {
    it_tensor *l2 = n->saved[0], *tcl = n->saved[1], *flat = n->saved[2];
    const vce_rows *r = n->blob;
    int64_t rows = r->rows;
    double g = 0;
    it_status st = it_tensor_item(dy, NULL, &g);
    if (st) return st;
    it_device dev = it_tensor_device(l2);
    it_tensor *grad = it__empty_like(l2);
    if (!grad) return it_last_status();
    if (r->valid == 0) { /* only padded columns here: nothing of this rank takes part */
        if ((st = it_tensor_fill(grad, it_scalar_f64(0)))) return st;
    } else {
        float *w = malloc(sizeof(float) * 2 * (size_t)rows + 1);
        if (!w) return it_error(IT_ERR_OOM, "tp_cross_entropy: out of host memory");
        double dl = g / (double)rows;
        for (int64_t i = 0; i < rows; i++) {
            w[i] = (float)(dl * r->c[i]);                           /* softmax_local * c = the global softmax */
            w[rows + i] = (float)(dl * (r->c[i] - r->c[rows + i])); /* the one-hot: -dl, not -dl*c, and only here */
        }
        int64_t s1[1] = {rows}, s2[2] = {rows, 1};
        it_tensor *wt = it_tensor_from_host(dev, IT_DTYPE_FP32, 1, s1, w, sizeof(float) * (size_t)rows);
        it_tensor *corr = it_tensor_from_host(dev, IT_DTYPE_FP32, 2, s2, w + rows, sizeof(float) * (size_t)rows);
        free(w);
        if (!wt || !corr) return it_last_status();
        it_tdesc dl2 = it_tensor_desc(l2), dt = it_tensor_desc(tcl), dw = it_tensor_desc(wt), dg = it_tensor_desc(grad);
        if ((st = KCALL(dev, cross_entropy_bwd, &dl2, &dt, r->valid, &dw, &dg))) return st;
        /* grad[n, t_local[n]] += corr[n]: the gradient as a (rows*Vl, 1) table, one scattered row each */
        it_tdesc dflat = it_tensor_desc(flat), dc = it_tensor_desc(corr), dtab = it_tensor_desc(grad);
        dtab.shape[0] = rows * l2->shape[1];
        dtab.shape[1] = 1;
        dtab.strides[0] = 1;
        dtab.strides[1] = 1;
        if ((st = KCALL(dev, embedding_bwd, &dflat, &dc, &dtab))) return st;
    }
    return it__accum_grad(n->in[0], it_tensor_view(grad, n->in[0]->ndim, n->in[0]->shape));
}

it_tensor *it_tp_cross_entropy(it_dist *d, it_tensor *logits, it_tensor *targets, int64_t lo, int64_t valid) {
    OP_REQUIRE(logits && targets);
    if (!check_ids("tp_cross_entropy", targets)) return NULL;
    int64_t vl = logits->ndim ? logits->shape[logits->ndim - 1] : 0;
    if (logits->ndim < 1 || targets->ndim != logits->ndim - 1 ||
        it_tensor_numel(targets) * vl != it_tensor_numel(logits)) {
        it_error(IT_ERR_INVALID_ARG,
                 "tp_cross_entropy: targets must have the logits' shape without the last dimension");
        return NULL;
    }
    if (logits->dtype != IT_DTYPE_FP32) {
        it_error(IT_ERR_INVALID_ARG, "tp_cross_entropy: logits must be float32, got %s", it_dtype_name(logits->dtype));
        return NULL;
    }
    if (valid < 0 || valid > vl) {
        it_error(IT_ERR_INVALID_ARG, "tp_cross_entropy: valid columns %lld outside 0..%lld", (long long)valid,
                 (long long)vl);
        return NULL;
    }
    int64_t rows = it_tensor_numel(targets), N = it_dist_world(d), me = it_dist_rank(d);
    it_device dev = it_tensor_device(logits);
    int64_t s2[2] = {rows, vl}, s1[1] = {rows};
    it_tensor *l2 = it_tensor_view(it_tensor_contiguous(logits), 2, s2);
    int64_t *ids = l2 ? ids_to_host(targets, rows) : NULL;
    OP_REQUIRE(ids);
    vce_rows *r = calloc(1, sizeof *r + sizeof(double) * 2 * (size_t)rows);
    int32_t *tcl = malloc(sizeof(int32_t) * (size_t)rows + 1);
    double *all =
        calloc((size_t)(2 * N * rows) + 1, sizeof(double)); /* [rank][row] lse, then [rank][row] target logit */
    float *hl = malloc(sizeof(float) * 2 * (size_t)rows + 1);
    it_tensor *out = NULL;
    if (!r || !tcl || !all || !hl) {
        it_error(IT_ERR_OOM, "tp_cross_entropy: %lld rows: out of host memory", (long long)rows);
        goto done;
    }
    r->rows = rows;
    r->valid = valid;
    for (int64_t i = 0; i < rows; i++) {
        bool mine = ids[i] >= lo && ids[i] < lo + valid;
        tcl[i] = mine ? (int32_t)(ids[i] - lo) : 0;
        r->c[rows + i] = mine ? 1.0 : 0.0;
    }
    it_tensor *tdev = it_tensor_from_host(dev, IT_DTYPE_I32, 1, s1, tcl, sizeof(int32_t) * (size_t)rows);
    it_tensor *flat = tdev ? flat_targets(dev, tcl, rows, vl) : NULL;
    if (!flat) goto done;
    double *lse = all + me * rows, *tgt = all + (N + me) * rows;
    if (valid > 0) {
        /* the kernel's lse_local - x[t_local], and x[t_local] itself (a gather of one element per row) */
        it_tensor *ce = it_tensor_new(dev, IT_DTYPE_FP32, 1, s1);
        int64_t s21[2] = {rows, 1};
        it_tensor *xt = it_tensor_new(dev, IT_DTYPE_FP32, 2, s21);
        if (!ce || !xt || vce_kernel_fwd(l2, tdev, valid, ce)) goto done;
        it_tdesc dflat = it_tensor_desc(flat), dtab = it_tensor_desc(l2), dxt = it_tensor_desc(xt);
        dtab.shape[0] = rows * vl;
        dtab.shape[1] = 1;
        dtab.strides[0] = 1;
        dtab.strides[1] = 1;
        if (KCALL(dev, embedding_fwd, &dflat, &dtab, &dxt) ||
            it_tensor_copy_to_host(ce, hl, sizeof(float) * (size_t)rows) ||
            it_tensor_copy_to_host(xt, hl + rows, sizeof(float) * (size_t)rows))
            goto done;
        for (int64_t i = 0; i < rows; i++) {
            lse[i] = (double)hl[i] + (double)hl[rows + i];
            tgt[i] = r->c[rows + i] ? (double)hl[rows + i] : 0.0;
        }
    } else {
        for (int64_t i = 0; i < rows; i++) lse[i] = -INFINITY;
    }
    /* every rank's rows, then the same fp64 arithmetic on each: one loss, bitwise, on all */
    for (int64_t i = 0; i < rows; i++)
        if (isinf(lse[i])) lse[i] = -1e300; /* the sum below must not see inf - inf */
    if (it_dist_all_reduce_host(d, all, (size_t)(2 * N * rows), IT_DTYPE_FP64, IT_CCL_SUM)) goto done;
    double total = 0;
    for (int64_t i = 0; i < rows; i++) {
        double m = -INFINITY, s = 0, t = 0;
        for (int64_t k = 0; k < N; k++) m = fmax(m, all[k * rows + i]);
        for (int64_t k = 0; k < N; k++) s += exp(all[k * rows + i] - m);
        for (int64_t k = 0; k < N; k++) t += all[(N + k) * rows + i];
        double L = m + log(s);
        r->c[i] = valid > 0 ? exp(all[me * rows + i] - L) : 0.0;
        total += L - t;
    }
    float mean = (float)(total / (double)rows);
    out = it_tensor_from_host(dev, IT_DTYPE_FP32, 0, NULL, &mean, sizeof mean);
    if (out) {
        it_tensor *in[1] = {logits};
        if (it__needs_grad(1, in)) {
            it_node *n = it__node_record("tp_cross_entropy", vce_backward, out, 1, in);
            if (!n || it__node_set_blob(n, r, sizeof *r + sizeof(double) * 2 * (size_t)rows)) {
                out = NULL;
                goto done;
            }
            n->ctx = d;
            it__node_save(n, l2);
            it__node_save(n, tdev);
            it__node_save(n, flat);
        }
    }
done:
    free(ids);
    free(r);
    free(tcl);
    free(all);
    free(hl);
    return out;
}
