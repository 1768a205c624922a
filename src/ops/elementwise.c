/* Elementwise ops with broadcasting, and reductions; forward and backward side by side. */
#include <string.h>

#include "ops/ops_common.h"

/* ---------------------------------------------------------------- binary */

static it_status binary_kernel(it_binary_op op, it_tensor *a, it_tensor *b, it_tensor *out) {
    it_tdesc da = it__broadcast_desc(a, out->ndim, out->shape), db = it__broadcast_desc(b, out->ndim, out->shape);
    it_tdesc dout = it_tensor_desc(out);
    return KCALL(it_tensor_device(out), binary, op, &da, &db, &dout);
}

/* A new tensor = op(a, b) (no autograd). */
static it_tensor *binary_new(const char *name, it_binary_op op, it_tensor *a, it_tensor *b) {
    it_tensor *ab[2] = {a, b};
    if (it__check_same(name, 2, ab)) return NULL;
    int ndim;
    int64_t shape[IT_MAX_DIMS];
    if (it__broadcast_shape(name, a, b, &ndim, shape)) return NULL;
    it_tensor *out = it__scope_add(it__tensor_new_owned(it_tensor_device(a), a->dtype, ndim, shape));
    if (!out || binary_kernel(op, a, b, out)) return NULL;
    return out;
}

/* op(a, dy) for a backward, a broadcastable to dy (the op's output shape): written over dy
 * when the backward holds it alone (it__grad_owned), else into a new tensor. */
static it_tensor *binary_grad(const char *name, it_binary_op op, it_tensor *a, it_tensor *dy) {
    if (!it__grad_owned(dy)) return binary_new(name, op, a, dy);
    it_tensor *ab[2] = {a, dy};
    return it__check_same(name, 2, ab) || binary_kernel(op, a, dy, dy) ? NULL : dy;
}

enum { ADD, SUB, MUL, DIV };

/* d(a op b): ADD: (dy, dy); SUB: (dy, -dy); MUL: (dy*b, dy*a); DIV: (dy/b, -dy*a/b^2),
 * each summed down to its input's shape. */
static it_status arith_backward(it_node *n, it_tensor *dy) {
    it_tensor *a = n->in[0], *b = n->in[1];
    int kind = (int)n->i[0];
    it_tensor *ga = NULL, *gb = NULL;
    if (a->requires_grad) {
        switch (kind) {
        case ADD:
        case SUB: ga = dy; break;
        case MUL: ga = binary_new("mul backward", IT_BINARY_MUL, dy, n->saved[1]); break;
        case DIV: ga = binary_new("div backward", IT_BINARY_DIV, dy, n->saved[1]); break;
        }
        it_status st = it__accum_grad(a, it__sum_to(ga, a));
        if (st) return st;
    }
    if (b->requires_grad) {
        switch (kind) {
        case ADD: gb = dy; break;
        case SUB: gb = it_scale(dy, -1.0f); break;
        case MUL: gb = binary_grad("mul backward", IT_BINARY_MUL, n->saved[0], dy); break; /* dy is done with */
        case DIV: { /* -dy * a / b^2 = -(dy / b) * (a / b) */
            it_tensor *q = binary_new("div backward", IT_BINARY_DIV, dy, n->saved[1]);
            it_tensor *r = binary_new("div backward", IT_BINARY_DIV, n->saved[0], n->saved[1]);
            gb = it_scale(binary_new("div backward", IT_BINARY_MUL, q, r), -1.0f);
            break;
        }
        }
        return it__accum_grad(b, it__sum_to(gb, b));
    }
    return IT_OK;
}

static it_tensor *arith(const char *name, int kind, it_binary_op op, it_tensor *a, it_tensor *b) {
    OP_REQUIRE(a && b);
    it_tensor *out = binary_new(name, op, a, b);
    OP_REQUIRE(out);
    it_tensor *in[2] = {a, b};
    if (it__needs_grad(2, in)) {
        it_node *n = it__node_record(name, arith_backward, out, 2, in);
        OP_REQUIRE(n);
        n->i[0] = kind;
        if (kind == MUL || kind == DIV) {
            it__node_save(n, a);
            it__node_save(n, b);
        }
    }
    return out;
}

it_tensor *it_add(it_tensor *a, it_tensor *b) { return arith("add", ADD, IT_BINARY_ADD, a, b); }
it_tensor *it_sub(it_tensor *a, it_tensor *b) { return arith("sub", SUB, IT_BINARY_SUB, a, b); }
it_tensor *it_mul(it_tensor *a, it_tensor *b) { return arith("mul", MUL, IT_BINARY_MUL, a, b); }
it_tensor *it_div(it_tensor *a, it_tensor *b) { return arith("div", DIV, IT_BINARY_DIV, a, b); }

/* ---------------------------------------------------------------- unary */

static it_tensor *unary_new(it_unary_op op, float alpha, it_tensor *x) {
    it_tensor *out = it__empty_like(x);
    OP_REQUIRE(out);
    it_tdesc dx = it_tensor_desc(x), dout = it_tensor_desc(out);
    if (KCALL(it_tensor_device(x), unary, op, alpha, &dx, &dout)) return NULL;
    return out;
}

/* scale: dx = alpha*dy; gelu/silu: dx = dy * f'(x) (saved x); tanh: dx = dy*(1-y^2) (saved
 * y); exp: dx = dy * y (saved y). */
static it_status unary_backward(it_node *n, it_tensor *dy) {
    it_unary_op op = (it_unary_op)n->i[0];
    it_tensor *g = NULL;
    switch (op) {
    case IT_UNARY_SCALE: g = unary_new(IT_UNARY_SCALE, (float)n->f[0], dy); break;
    case IT_UNARY_GELU: g = binary_grad("gelu backward", IT_BINARY_GELU_BWD, n->saved[0], dy); break;
    case IT_UNARY_SILU: g = binary_grad("silu backward", IT_BINARY_SILU_BWD, n->saved[0], dy); break;
    case IT_UNARY_TANH: g = binary_grad("tanh backward", IT_BINARY_TANH_BWD, n->saved[0], dy); break;
    case IT_UNARY_EXP: g = binary_grad("exp backward", IT_BINARY_MUL, n->saved[0], dy); break;
    default: return it_error(IT_ERR_INTERNAL, "unary backward: op %d has no backward", (int)op);
    }
    return it__accum_grad(n->in[0], g);
}

static it_tensor *unary_op(const char *name, it_unary_op op, float alpha, it_tensor *x) {
    OP_REQUIRE(x);
    it_tensor *out = unary_new(op, alpha, x);
    OP_REQUIRE(out);
    if (it__needs_grad(1, &x)) {
        it_node *n = it__node_record(name, unary_backward, out, 1, &x);
        OP_REQUIRE(n);
        n->i[0] = op;
        n->f[0] = alpha;
        if (op == IT_UNARY_GELU || op == IT_UNARY_SILU) it__node_save(n, x);
        if (op == IT_UNARY_TANH || op == IT_UNARY_EXP) it__node_save(n, out);
    }
    return out;
}

it_tensor *it_scale(it_tensor *x, float alpha) { return unary_op("scale", IT_UNARY_SCALE, alpha, x); }
it_tensor *it_gelu(it_tensor *x) { return unary_op("gelu", IT_UNARY_GELU, 0.0f, x); }
it_tensor *it_silu(it_tensor *x) { return unary_op("silu", IT_UNARY_SILU, 0.0f, x); }
it_tensor *it_tanh(it_tensor *x) { return unary_op("tanh", IT_UNARY_TANH, 0.0f, x); }
it_tensor *it_exp(it_tensor *x) { return unary_op("exp", IT_UNARY_EXP, 0.0f, x); }

/* ---------------------------------------------------------------- SwiGLU over half products
 * silu(a) * b for autocast's gate and up products (bf16/fp16), computed in fp32 and rounded
 * once: the backend's fused swiglu_low_* slots where it has both, else the widened
 * composition, which is what the models ran before (the same bits either way). */

static bool half_dtype(it_dtype dt) { return dt == IT_DTYPE_BF16 || dt == IT_DTYPE_FP16; }

static it_tensor *swiglu_composed(it_tensor *a, it_tensor *b) {
    it_tensor *y = it_mul(it_silu(it_cast(a, IT_DTYPE_FP32)), it_cast(b, IT_DTYPE_FP32));
    return half_dtype(a->dtype) ? it_cast(y, a->dtype) : y;
}

/* The slot's backward from the unary and binary kernels, into da and db (a native backend
 * that declined the call): the arithmetic of the composition's backward. */
static it_status swiglu_bwd_composed(it_device dev, it_tensor *a, it_tensor *b, it_tensor *dy, it_tensor *da,
                                     it_tensor *db) {
    it_tensor *wa = it_tensor_to_dtype(a, IT_DTYPE_FP32), *wb = it_tensor_to_dtype(b, IT_DTYPE_FP32);
    it_tensor *wd = it_tensor_to_dtype(dy, IT_DTYPE_FP32);
    it_tensor *s = wa ? it__empty_like(wa) : NULL, *r = wa ? it__empty_like(wa) : NULL;
    if (!wb || !wd || !s || !r) return it_last_status();
    it_tdesc dwa = it_tensor_desc(wa), dwb = it_tensor_desc(wb), dwd = it_tensor_desc(wd);
    it_tdesc ds = it_tensor_desc(s), dr = it_tensor_desc(r), dda = it_tensor_desc(da), ddb = it_tensor_desc(db);
    it_status st = KCALL(dev, unary, IT_UNARY_SILU, 0.0f, &dwa, &ds);
    if (!st) st = KCALL(dev, binary, IT_BINARY_MUL, &dwd, &ds, &dr); /* db = dy * silu(a) */
    if (!st) st = KCALL(dev, cast, &dr, &ddb);
    if (!st) st = KCALL(dev, binary, IT_BINARY_MUL, &dwd, &dwb, &dr); /* t = dy * b */
    if (!st) st = KCALL(dev, binary, IT_BINARY_SILU_BWD, &dwa, &dr, &ds);
    if (!st) st = KCALL(dev, cast, &ds, &dda);
    return st;
}

static it_status swiglu_backward(it_node *n, it_tensor *dy) {
    it_tensor *a = n->saved[0], *b = n->saved[1], *d = it_tensor_contiguous(dy);
    it_tensor *da = it__empty_like(a), *db = it__empty_like(b);
    if (!d || !da || !db) return it_last_status();
    it_device dev = it_tensor_device(a);
    it_tdesc t[5] = {it_tensor_desc(a), it_tensor_desc(b), it_tensor_desc(d), it_tensor_desc(da), it_tensor_desc(db)};
    it_status st = KCALL(dev, swiglu_low_bwd, &t[0], &t[1], &t[2], &t[3], &t[4]);
    if (st == IT_ERR_UNSUPPORTED) { /* declined before writing */
        it_error_clear();
        st = swiglu_bwd_composed(dev, a, b, d, da, db);
    }
    if (st) return st;
    st = it__accum_grad(n->in[0], da);
    return st ? st : it__accum_grad(n->in[1], db);
}

it_tensor *it__swiglu_low(it_tensor *a, it_tensor *b) {
    OP_REQUIRE(a && b);
    it_tensor *ab[2] = {a, b};
    if (it__check_same("swiglu", 2, ab)) return NULL;
    if (a->ndim != b->ndim || memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->ndim)) {
        it_error(IT_ERR_INVALID_ARG, "swiglu: a and b must have one shape");
        return NULL;
    }
    it_device dev = it_tensor_device(a);
    if (!half_dtype(a->dtype)) return it_mul(it_silu(a), b);
    if (!it__kernel_native(dev, IT_SLOT(swiglu_low_fwd)) || !it__kernel_native(dev, IT_SLOT(swiglu_low_bwd)))
        return swiglu_composed(a, b);
    it_tensor *ac = it_tensor_contiguous(a), *bc = it_tensor_contiguous(b);
    it_tensor *y = ac && bc ? it__empty_like(ac) : NULL;
    OP_REQUIRE(y);
    it_tdesc da = it_tensor_desc(ac), db = it_tensor_desc(bc), dy = it_tensor_desc(y);
    it_status st = KCALL(dev, swiglu_low_fwd, &da, &db, &dy);
    if (st == IT_ERR_UNSUPPORTED) { /* declined before writing: composed after all */
        it_error_clear();
        return swiglu_composed(a, b);
    }
    if (st) return NULL;
    if (it__needs_grad(2, ab)) {
        it_node *n = it__node_record("swiglu", swiglu_backward, y, 2, ab);
        OP_REQUIRE(n);
        it__node_save(n, ac);
        it__node_save(n, bc);
    }
    return y;
}

/* ---------------------------------------------------------------- reductions */

/* Normalize the dim list to a mask; error names the op. */
static it_status dims_mask(const char *op, const it_tensor *x, int ndims, const int *dims, bool *mask) {
    memset(mask, 0, sizeof(bool) * IT_MAX_DIMS);
    for (int k = 0; k < ndims; k++) {
        int d = dims[k] < 0 ? dims[k] + x->ndim : dims[k];
        if (d < 0 || d >= x->ndim)
            return it_error(IT_ERR_INVALID_ARG, "%s: dimension %d out of range for a %d-D tensor", op, dims[k],
                            x->ndim);
        mask[d] = true;
    }
    return IT_OK;
}

/* sum/mean backward: dx = expand(dy as keepdim) (* 1/count for mean). */
static it_status reduce_backward(it_node *n, it_tensor *dy) {
    it_tensor *x = n->in[0];
    int64_t kshape[IT_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) kshape[i] = (n->i[1] >> i) & 1 ? 1 : x->shape[i];
    it_tensor *k = it_tensor_view(dy, x->ndim, kshape);
    it_tensor *e = it_tensor_expand(k, x->ndim, x->shape);
    if (!e) return it_last_status();
    it_tensor *g = it__empty_like(x);
    if (!g) return it_last_status();
    it_tdesc de = it_tensor_desc(e), dg = it_tensor_desc(g);
    it_status st = n->i[0] == IT_REDUCE_MEAN
                       ? KCALL(it_tensor_device(x), unary, IT_UNARY_SCALE, (float)n->f[0], &de, &dg)
                       : KCALL(it_tensor_device(x), copy_strided, &de, &dg);
    if (st) return st;
    return it__accum_grad(x, g);
}

static it_tensor *reduce_op(const char *name, it_reduce_op op, it_tensor *x, int ndims, const int *dims, bool keepdim) {
    OP_REQUIRE(x);
    bool mask[IT_MAX_DIMS];
    if (dims_mask(name, x, ndims, dims, mask)) return NULL;
    int64_t kshape[IT_MAX_DIMS], oshape[IT_MAX_DIMS], count = 1;
    int ondim = 0, bits = 0;
    for (int i = 0; i < x->ndim; i++) {
        kshape[i] = mask[i] ? 1 : x->shape[i];
        if (mask[i]) {
            count *= x->shape[i];
            bits |= 1 << i;
        }
        if (!mask[i] || keepdim) oshape[ondim++] = kshape[i];
    }
    it_tensor *k = it__scope_add(it__tensor_new_owned(it_tensor_device(x), x->dtype, x->ndim, kshape));
    OP_REQUIRE(k);
    it_tdesc dx = it_tensor_desc(x), dk = it_tensor_desc(k);
    if (KCALL(it_tensor_device(x), reduce, op, &dx, &dk)) return NULL;
    it_tensor *out = keepdim ? k : it__scope_add(it__tensor_view_owned(k, ondim, oshape, k->strides, 0));
    OP_REQUIRE(out);
    if (!keepdim) it__contiguous_strides(ondim, oshape, out->strides);
    if (it__needs_grad(1, &x)) {
        it_node *n = it__node_record(name, reduce_backward, out, 1, &x);
        OP_REQUIRE(n);
        n->i[0] = op;
        n->i[1] = bits;
        n->f[0] = count ? 1.0 / (double)count : 0.0;
    }
    return out;
}

it_tensor *it_sum(it_tensor *x, int ndims, const int *dims, bool keepdim) {
    return reduce_op("sum", IT_REDUCE_SUM, x, ndims, dims, keepdim);
}
it_tensor *it_mean(it_tensor *x, int ndims, const int *dims, bool keepdim) {
    return reduce_op("mean", IT_REDUCE_MEAN, x, ndims, dims, keepdim);
}
it_tensor *it_sum_all(it_tensor *x) {
    OP_REQUIRE(x);
    int dims[IT_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) dims[i] = i;
    return reduce_op("sum", IT_REDUCE_SUM, x, x->ndim, dims, false);
}
