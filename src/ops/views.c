/* Differentiable views: the forward shares storage (tensor.c), the backward maps the
 * output gradient back onto the input's shape. */
#include <string.h>

#include "ops/ops_common.h"

/* reshape / contiguous: dx = dy viewed with x's shape. A dy that nothing else holds takes
 * x's shape itself and is handed on whole (a view would share its storage, and be copied). */
static it_status reshape_backward(it_node *n, it_tensor *dy) {
    it_tensor *x = n->in[0];
    if (it__grad_owned(dy) && it_tensor_numel(dy) == it_tensor_numel(x)) {
        dy->ndim = x->ndim;
        memcpy(dy->shape, x->shape, sizeof dy->shape);
        it__contiguous_strides(dy->ndim, dy->shape, dy->strides);
        return it__accum_grad(x, dy);
    }
    return it__accum_grad(x, it_tensor_view(dy, x->ndim, x->shape));
}

/* permute: dx = dy permuted by the inverse permutation (saved in i[]). */
static it_status permute_backward(it_node *n, it_tensor *dy) {
    int inv[IT_MAX_DIMS];
    for (int k = 0; k < dy->ndim; k++) inv[n->i[k]] = k;
    return it__accum_grad(n->in[0], it_tensor_permute(dy, inv));
}

/* Elements [lo, hi) of the contiguous t set to zero. */
static it_status zero_run(it_tensor *t, int64_t lo, int64_t hi) {
    if (lo >= hi) return IT_OK;
    it_tdesc d = it_tensor_desc(t);
    d.data = (char *)d.data + lo * (int64_t)it_dtype_size(t->dtype);
    d.ndim = 1;
    d.shape[0] = hi - lo;
    d.strides[0] = 1;
    return KCALL(it_tensor_device(t), fill, &d, it_scalar_f64(0.0));
}

/* slice: dx = zeros with dy written into the sliced window. When x already holds a
 * gradient and the window is one contiguous run of it (attention's q, k and v: slices of
 * one (3, B, nh, T, hd) tensor along its first dim), dy is added into that window instead,
 * which saves a zeroed tensor of x's size and an add over all of it for every slice after
 * the first. The values are the same: outside the window the old way only added zeros
 * (which could turn a -0 into +0; this leaves it -0). Only a contiguous window: kernel
 * outputs are contiguous (backend.h), so a strided one would be outside the contract. */
static it_status slice_backward(it_node *n, it_tensor *dy) {
    it_tensor *x = n->in[0];
    if (x->requires_grad && x->grad && !x->grad_zero && dy->dtype == x->dtype) {
        it_tensor *w = it_tensor_slice(x->grad, (int)n->i[0], n->i[1], n->i[2], n->i[3]);
        if (!w) return it_last_status();
        bool same = w->ndim == dy->ndim;
        for (int d = 0; same && d < w->ndim; d++) same = w->shape[d] == dy->shape[d];
        if (!same) return it_error(IT_ERR_INTERNAL, "slice backward: the gradient does not match the slice's shape");
        if (it_tensor_is_contiguous(w)) {
            it_tdesc a = it_tensor_desc(w), b = it_tensor_desc(dy), o = it_tensor_desc(w);
            return KCALL(it_tensor_device(x), binary, IT_BINARY_ADD, &a, &b, &o);
        }
    }
    /* x's first gradient: dy in the window, zeros around it (only around a contiguous
     * window: the runs before and after it) */
    it_tensor *g = it__empty_like(x);
    it_tensor *w = g ? it_tensor_slice(g, (int)n->i[0], n->i[1], n->i[2], n->i[3]) : NULL;
    if (!w) return it_last_status();
    it_status st;
    if (it_tensor_is_contiguous(w)) {
        int64_t lo = w->offset - g->offset, hi = lo + it_tensor_numel(w);
        if (!(st = zero_run(g, 0, lo))) st = zero_run(g, hi, it_tensor_numel(g));
    } else {
        st = it_tensor_fill(g, it_scalar_f64(0.0));
    }
    if (!st) st = it_tensor_copy_(w, dy);
    /* the window's view goes now, so that g is the storage's only holder and is taken over */
    it_tensor_release(it_scope_keep(w));
    return st ? st : it__accum_grad(x, g);
}

/* expand: dx = dy summed over the broadcast dims. */
static it_status expand_backward(it_node *n, it_tensor *dy) {
    return it__accum_grad(n->in[0], it__sum_to(dy, n->in[0]));
}

static it_tensor *record(const char *name, it_backward_fn fn, it_tensor *x, it_tensor *out) {
    OP_REQUIRE(out);
    if (it__needs_grad(1, &x) && !it__node_record(name, fn, out, 1, &x)) return NULL;
    return out;
}

it_tensor *it_reshape(it_tensor *x, int ndim, const int64_t *shape) {
    OP_REQUIRE(x);
    return record("reshape", reshape_backward, x, it_tensor_view(x, ndim, shape));
}

it_tensor *it_contiguous(it_tensor *x) {
    OP_REQUIRE(x);
    if (it_tensor_is_contiguous(x)) return it_tensor_contiguous(x); /* same tensor: no node needed */
    return record("contiguous", reshape_backward, x, it_tensor_clone(x));
}

it_tensor *it_permute(it_tensor *x, const int *perm) {
    OP_REQUIRE(x);
    it_tensor *out = it_tensor_permute(x, perm);
    OP_REQUIRE(out);
    if (it__needs_grad(1, &x)) {
        it_node *n = it__node_record("permute", permute_backward, out, 1, &x);
        OP_REQUIRE(n);
        for (int k = 0; k < x->ndim; k++) n->i[k] = perm[k];
    }
    return out;
}

it_tensor *it_transpose(it_tensor *x, int d0, int d1) {
    OP_REQUIRE(x);
    if (d0 < 0) d0 += x->ndim;
    if (d1 < 0) d1 += x->ndim;
    if (d0 < 0 || d0 >= x->ndim || d1 < 0 || d1 >= x->ndim) {
        it_error(IT_ERR_INVALID_ARG, "transpose: dimensions out of range for a %d-D tensor", x->ndim);
        return NULL;
    }
    int perm[IT_MAX_DIMS];
    for (int k = 0; k < x->ndim; k++) perm[k] = k;
    perm[d0] = d1;
    perm[d1] = d0;
    return it_permute(x, perm);
}

it_tensor *it_slice(it_tensor *x, int dim, int64_t start, int64_t end, int64_t step) {
    OP_REQUIRE(x);
    it_tensor *out = it_tensor_slice(x, dim, start, end, step);
    OP_REQUIRE(out);
    if (it__needs_grad(1, &x)) {
        it_node *n = it__node_record("slice", slice_backward, out, 1, &x);
        OP_REQUIRE(n);
        n->i[0] = dim < 0 ? dim + x->ndim : dim;
        n->i[1] = start;
        n->i[2] = end;
        n->i[3] = step;
    }
    return out;
}

it_tensor *it_expand(it_tensor *x, int ndim, const int64_t *shape) {
    OP_REQUIRE(x);
    return record("expand", expand_backward, x, it_tensor_expand(x, ndim, shape));
}

/* cat: dx_i = dy's window of x_i (a view; the engine copies when it must). */
static it_status cat_backward(it_node *n, it_tensor *dy) {
    int dim = (int)n->i[0];
    int64_t at = 0;
    for (int k = 0; k < n->n_in; k++) {
        it_tensor *x = n->in[k];
        int64_t len = x->shape[dim];
        if (x->requires_grad) {
            it_tensor *w = it_tensor_slice(dy, dim, at, at + len, 1); /* scope-owned, as g */
            it_tensor *g = w ? it_tensor_contiguous(w) : NULL;
            if (!g) return it_last_status();
            it_status st = it__accum_grad(x, g);
            if (st) return st;
        }
        at += len;
    }
    return IT_OK;
}

it_tensor *it_cat(int n, it_tensor *const *xs, int dim) {
    if (n < 1) {
        it_error(IT_ERR_INVALID_ARG, "cat: no tensors");
        return NULL;
    }
    for (int k = 0; k < n; k++) OP_REQUIRE(xs[k]);
    if (n == 1) return xs[0];
    int nd = xs[0]->ndim;
    if (dim < 0) dim += nd;
    int64_t shape[IT_MAX_DIMS];
    memcpy(shape, xs[0]->shape, sizeof(int64_t) * (size_t)nd);
    shape[dim] = 0;
    for (int k = 0; k < n; k++) {
        bool same = xs[k]->ndim == nd && xs[k]->dtype == xs[0]->dtype;
        for (int d = 0; same && d < nd; d++) same = d == dim || xs[k]->shape[d] == xs[0]->shape[d];
        if (!same || dim < 0 || dim >= nd) {
            it_error(IT_ERR_INVALID_ARG, "cat: tensor %d does not match tensor 0 outside dim %d (or its dtype)", k,
                     dim);
            return NULL;
        }
        shape[dim] += xs[k]->shape[dim];
    }
    it_tensor *out = it__scope_add(it__tensor_new_owned(it_tensor_device(xs[0]), xs[0]->dtype, nd, shape));
    OP_REQUIRE(out);
    int64_t at = 0;
    for (int k = 0; k < n; k++) {
        it_tensor *w = it_tensor_slice(out, dim, at, at + xs[k]->shape[dim], 1); /* scope-owned */
        if (!w || it_tensor_copy_(w, xs[k])) return NULL;
        at += xs[k]->shape[dim];
    }
    if (it__needs_grad(n, xs)) {
        it_node *nd_ = it__node_record("cat", cat_backward, out, n, xs);
        OP_REQUIRE(nd_);
        nd_->i[0] = dim;
    }
    return out;
}
