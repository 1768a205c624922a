/* RMSNorm over the last dimension: y = x * rsqrt(mean(x^2) + eps) * w (LLaMA). */
#include "ops/ops_common.h"

/* dx, dw from the saved x and rstd (the kernel computes them; accumulated here). */
static it_status rmsnorm_backward(it_node *n, it_tensor *dy) {
    it_tensor *x = n->saved[0], *rstd = n->saved[1], *w = n->in[1];
    it_tensor *dx = it__empty_like(x), *dw = it__empty_like(w), *dyc = it_tensor_contiguous(dy);
    if (!dx || !dw || !dyc) return it_last_status();
    it_tdesc ddy = it_tensor_desc(dyc), dxx = it_tensor_desc(x), dww = it_tensor_desc(w), dr = it_tensor_desc(rstd),
             ddx = it_tensor_desc(dx), ddw = it_tensor_desc(dw);
    it_status st = KCALL(it_tensor_device(x), rmsnorm_bwd, &ddy, &dxx, &dww, &dr, &ddx, &ddw);
    if (st || (st = it__accum_grad(n->in[0], dx))) return st;
    return it__accum_grad(w, dw);
}

it_tensor *it_rmsnorm(it_tensor *x, it_tensor *w, float eps) {
    OP_REQUIRE(x && w);
    it_tensor *in[2] = {x, w};
    if (it__check_same("rmsnorm", 2, in)) return NULL;
    int64_t c = x->ndim ? x->shape[x->ndim - 1] : 0;
    if (x->ndim < 1 || w->ndim != 1 || w->shape[0] != c) {
        it_error(IT_ERR_INVALID_ARG, "rmsnorm: weight must be 1-D of x's last dimension (%lld)", (long long)c);
        return NULL;
    }
    it_tensor *xc = it_tensor_contiguous(x), *y = it__empty_like(x);
    int64_t r[1] = {c ? it_tensor_numel(x) / c : 0};
    it_tensor *rstd =
        it_tensor_new(it_tensor_device(x), x->dtype == IT_DTYPE_FP64 ? IT_DTYPE_FP64 : IT_DTYPE_FP32, 1, r);
    OP_REQUIRE(xc && y && rstd);
    it_tdesc dx = it_tensor_desc(xc), dw = it_tensor_desc(w), dy = it_tensor_desc(y), dr = it_tensor_desc(rstd);
    if (KCALL(it_tensor_device(x), rmsnorm_fwd, &dx, &dw, eps, &dy, &dr)) return NULL;
    if (it__needs_grad(2, in)) {
        it_node *n = it__node_record("rmsnorm", rmsnorm_backward, y, 2, in);
        OP_REQUIRE(n);
        it__node_save(n, xc);
        it__node_save(n, rstd);
    }
    return y;
}
