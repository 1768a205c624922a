/* Softmax over the last dimension of scale*x, optionally causal. */
#include "ops/ops_common.h"

/* dx = scale * y * (dy - sum(dy*y)) from the saved output y. */
static it_status softmax_backward(it_node *n, it_tensor *dy) {
    it_tensor *y = n->saved[0];
    it_tensor *dx = it__empty_like(y), *dyc = it_tensor_contiguous(dy);
    if (!dx || !dyc) return it_last_status();
    it_softmax_args args = {(float)n->f[0], n->i[0] != 0};
    it_tdesc dyy = it_tensor_desc(y), ddy = it_tensor_desc(dyc), ddx = it_tensor_desc(dx);
    it_status st = KCALL(it_tensor_device(y), softmax_bwd, &args, &dyy, &ddy, &ddx);
    return st ? st : it__accum_grad(n->in[0], dx);
}

it_tensor *it_softmax(it_tensor *x, float scale, bool causal) {
    OP_REQUIRE(x);
    if (x->ndim < 1 || (causal && x->ndim < 2)) {
        it_error(IT_ERR_INVALID_ARG, "softmax: needs a %s tensor, got %d-D", causal ? "2-D or more" : "1-D or more",
                 x->ndim);
        return NULL;
    }
    if (causal && x->shape[x->ndim - 1] < x->shape[x->ndim - 2]) {
        it_error(IT_ERR_INVALID_ARG, "softmax: causal mask needs keys >= queries (%lld < %lld)",
                 (long long)x->shape[x->ndim - 1], (long long)x->shape[x->ndim - 2]);
        return NULL;
    }
    it_tensor *y = it__empty_like(x);
    OP_REQUIRE(y);
    it_softmax_args args = {scale, causal};
    it_tdesc dx = it_tensor_desc(x), dy = it_tensor_desc(y);
    if (KCALL(it_tensor_device(x), softmax_fwd, &args, &dx, &dy)) return NULL;
    if (it__needs_grad(1, &x)) {
        it_node *n = it__node_record("softmax", softmax_backward, y, 1, &x);
        OP_REQUIRE(n);
        it__node_save(n, y);
        n->f[0] = scale;
        n->i[0] = causal;
    }
    return y;
}
