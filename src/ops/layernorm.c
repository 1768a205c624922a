/* LayerNorm over the last dimension: y = (x - mean) * rstd * w + b. */
#include "ops/ops_common.h"

static it_tensor *stats_tensor(it_tensor *x) {
    int64_t r[1] = {x->shape[x->ndim - 1] ? it_tensor_numel(x) / x->shape[x->ndim - 1] : 0};
    it_dtype dt = x->dtype == IT_DTYPE_FP64 ? IT_DTYPE_FP64 : IT_DTYPE_FP32;
    return it__scope_add(it__tensor_new_owned(it_tensor_device(x), dt, 1, r));
}

/* dx, dw, db from the saved x, mean, rstd (kernel computes them; dw/db accumulated here). */
static it_status layernorm_backward(it_node *n, it_tensor *dy) {
    it_tensor *x = n->saved[0], *mean = n->saved[1], *rstd = n->saved[2];
    it_tensor *w = n->in[1], *b = n->in[2];
    it_tensor *dx = it__empty_like(x), *dw = it__empty_like(w), *db = b ? it__empty_like(b) : NULL;
    it_tensor *dyc = it_tensor_contiguous(dy);
    if (!dx || !dw || (b && !db) || !dyc) return it_last_status();
    it_tdesc ddy = it_tensor_desc(dyc), dxx = it_tensor_desc(x), dww = it_tensor_desc(w), dm = it_tensor_desc(mean),
             dr = it_tensor_desc(rstd), ddx = it_tensor_desc(dx), ddw = it_tensor_desc(dw);
    it_tdesc ddb = db ? it_tensor_desc(db) : ddw;
    it_status st = KCALL(it_tensor_device(x), layernorm_bwd, &ddy, &dxx, &dww, &dm, &dr, &ddx, &ddw, db ? &ddb : NULL);
    if (st) return st;
    if ((st = it__accum_grad(n->in[0], dx))) return st;
    if ((st = it__accum_grad(w, dw))) return st;
    return b ? it__accum_grad(b, db) : IT_OK;
}

it_tensor *it_layernorm(it_tensor *x, it_tensor *w, it_tensor *b, float eps) {
    OP_REQUIRE(x && w);
    it_tensor *in[3] = {x, w, b};
    if (it__check_same("layernorm", 3, in)) return NULL;
    int64_t c = x->ndim ? x->shape[x->ndim - 1] : 0;
    if (x->ndim < 1 || w->ndim != 1 || w->shape[0] != c || (b && (b->ndim != 1 || b->shape[0] != c))) {
        it_error(IT_ERR_INVALID_ARG, "layernorm: weight and bias must be 1-D of x's last dimension (%lld)",
                 (long long)c);
        return NULL;
    }
    it_tensor *xc = it_tensor_contiguous(x);
    it_tensor *y = it__empty_like(x), *mean = stats_tensor(x), *rstd = stats_tensor(x);
    OP_REQUIRE(xc && y && mean && rstd);
    it_tdesc dx = it_tensor_desc(xc), dw = it_tensor_desc(w), dy = it_tensor_desc(y), dm = it_tensor_desc(mean),
             dr = it_tensor_desc(rstd);
    it_tdesc db = b ? it_tensor_desc(b) : dw;
    if (KCALL(it_tensor_device(x), layernorm_fwd, &dx, &dw, b ? &db : NULL, eps, &dy, &dm, &dr)) return NULL;
    if (it__needs_grad(3, in)) {
        it_node *n = it__node_record("layernorm", layernorm_backward, y, b ? 3 : 2, in);
        OP_REQUIRE(n);
        it__node_save(n, xc);
        it__node_save(n, mean);
        it__node_save(n, rstd);
    }
    return y;
}
