/* Rotary position embedding on interleaved pairs; the backward rotates back. */
#include "ops/ops_common.h"

static it_status rope_run(it_tensor *x, it_tensor *cos, it_tensor *sin, bool inverse, it_tensor *y) {
    it_tdesc dx = it_tensor_desc(x), dc = it_tensor_desc(cos), ds = it_tensor_desc(sin), dy = it_tensor_desc(y);
    return KCALL(it_tensor_device(x), rope, &dx, &dc, &ds, inverse, &dy);
}

/* A rotation's transpose is the inverse rotation: dx = R(-angle) dy. */
static it_status rope_backward(it_node *n, it_tensor *dy) {
    it_tensor *dx = it__empty_like(n->in[0]);
    if (!dx) return it_last_status();
    it_status st = rope_run(dy, n->saved[0], n->saved[1], true, dx);
    return st ? st : it__accum_grad(n->in[0], dx);
}

it_tensor *it_rope(it_tensor *x, it_tensor *cos, it_tensor *sin) {
    OP_REQUIRE(x && cos && sin);
    it_tensor *in[3] = {x, cos, sin};
    if (it__check_same("rope", 3, in)) return NULL;
    if (x->ndim != 4 || x->shape[3] % 2 || cos->ndim != 2 || cos->shape[0] != x->shape[1] ||
        cos->shape[1] != x->shape[3] / 2 || sin->ndim != 2 || sin->shape[0] != cos->shape[0] ||
        sin->shape[1] != cos->shape[1]) {
        it_error(IT_ERR_INVALID_ARG, "rope: x must be (B, T, H, D) with D even and cos/sin (T, D/2)");
        return NULL;
    }
    it_tensor *y = it__empty_like(x);
    OP_REQUIRE(y);
    if (rope_run(x, cos, sin, false, y)) return NULL;
    if (it__needs_grad(1, &x)) {
        it_node *n = it__node_record("rope", rope_backward, y, 1, &x);
        OP_REQUIRE(n);
        it__node_save(n, cos);
        it__node_save(n, sin);
    }
    return y;
}
