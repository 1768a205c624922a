/* linear(gelu(x), w, b) as one op that keeps only x for its backward and computes gelu(x)
 * again there: GPT-2's MLP (c_fc -> gelu -> c_proj) then holds one (B, T, 4C) activation per
 * layer instead of two (GPT-2 124M at B=4, T=1024: 50 MB a layer, 0.6 GB in all). This is
 * llm.c's GELU recompute (its -r 1, on by default there); the cost is one elementwise GELU
 * per layer in the backward.
 *
 * The same kernels run on the same operands as the composition (it_gelu then it_linear, and
 * their backwards: dh = dy w, dw += dy^T h, db += the rows' sum of dy, dx = gelu'(x) dh), so
 * the bits are the composition's. GPT-2 takes it (gpt2.c) in float32 without TP, without an
 * adapter on w and with the precision checker off (which reports mlp.gelu as a module);
 * IT_GELU_RECOMPUTE=0 in the environment turns it off. */
#include <stdlib.h>
#include <string.h>

#include "ops/ops_common.h"

static it_tensor *rows2d(it_tensor *x) {
    int64_t shape[2] = {-1, x->shape[x->ndim - 1]};
    return it_tensor_view(x, 2, shape);
}

/* gelu(x) into a new tensor the caller owns (released as soon as it has been read). */
static it_tensor *gelu_owned(it_tensor *x) {
    it_tensor *h = it__tensor_new_owned(it_tensor_device(x), x->dtype, x->ndim, x->shape);
    if (!h) return NULL;
    it_tdesc dx = it_tensor_desc(x), dh = it_tensor_desc(h);
    if (KCALL(it_tensor_device(x), unary, IT_UNARY_GELU, 0.0f, &dx, &dh)) {
        it_tensor_release(h);
        return NULL;
    }
    return h;
}

static it_status gelu_linear_backward(it_node *n, it_tensor *dy) {
    it_tensor *x = n->in[0], *w = n->in[1], *bias = n->in[2];
    it_tensor *dy2 = rows2d(dy), *dh = it__empty_like(x);
    if (!dy2 || !dh) return it_last_status();
    it_tensor *dh2 = rows2d(dh);
    it_status st = dh2 ? it__gemm(dy2, w, dh2, false, false, 1.0f, 0.0f) : it_last_status();
    if (st) return st;
    float beta = 0.0f;
    it_tensor *gw = it__grad_buffer(w, &beta);
    if (gw) {
        it_tensor *h = gelu_owned(x), *h2 = h ? rows2d(h) : NULL;
        st = h2 ? it__gemm(dy2, h2, gw, true, false, 1.0f, beta) : it_last_status();
        it_tensor_release(h);
        if (st) return st;
    } else if (w->requires_grad) {
        return it_last_status();
    }
    if (bias && bias->requires_grad) {
        int d0 = 0;
        if ((st = it__accum_grad(bias, it_sum(dy2, 1, &d0, false)))) return st;
    }
    if (!x->requires_grad) return IT_OK;
    it_tdesc a = it_tensor_desc(x), b = it_tensor_desc(dh), o = b; /* dx = gelu'(x) dh, over dh */
    if ((st = KCALL(it_tensor_device(x), binary, IT_BINARY_GELU_BWD, &a, &b, &o))) return st;
    return it__accum_grad(x, dh);
}

bool it__gelu_linear_wanted(const it_tensor *x, const it_tensor *w) {
    const char *env = getenv("IT_GELU_RECOMPUTE");
    if (env && strcmp(env, "0") == 0) return false;
    it_dtype ac;
    if (it_autocast_enabled(&ac) && ac != IT_DTYPE_FP32) return false;
    return x && w && x->dtype == IT_DTYPE_FP32 && w->dtype == IT_DTYPE_FP32;
}

it_tensor *it__gelu_linear(it_tensor *x, it_tensor *w, it_tensor *bias) {
    OP_REQUIRE(x && w);
    it_tensor *in[3] = {x, w, bias};
    if (it__check_same("gelu_linear", 3, in)) return NULL;
    if (x->dtype != IT_DTYPE_FP32 || w->ndim != 2 || x->ndim < 1 || x->shape[x->ndim - 1] != w->shape[1] ||
        (bias && (bias->ndim != 1 || bias->shape[0] != w->shape[0]))) {
        it_error(IT_ERR_INVALID_ARG, "gelu_linear: x (float32, last dimension %lld) must match w's in-features",
                 (long long)(x->ndim ? x->shape[x->ndim - 1] : 0));
        return NULL;
    }
    int64_t shape[IT_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[x->ndim - 1] = w->shape[0];
    it_device dev = it_tensor_device(x);
    it_tensor *y = it__scope_add(it__tensor_new_owned(dev, IT_DTYPE_FP32, x->ndim, shape));
    OP_REQUIRE(y);
    /* gelu(x) and the views of it live in this scope only: gone when the op returns */
    it_scope_begin();
    it_tensor *h = gelu_owned(x);
    it_tensor *h2 = h ? rows2d(h) : NULL, *y2 = rows2d(y);
    it_status st = h2 && y2 ? it__gemm(h2, w, y2, false, true, 1.0f, 0.0f) : it_last_status();
    if (!st && bias) { /* added in place while y is still in cache, as it_linear does */
        it_tdesc yd = it_tensor_desc(y2), bd = it__broadcast_desc(bias, 2, y2->shape);
        st = KCALL(dev, binary, IT_BINARY_ADD, &yd, &bd, &yd);
    }
    it_tensor_release(h);
    it_scope_end();
    if (st) return NULL;
    if (it__needs_grad(3, in) && !it__node_record("gelu_linear", gelu_linear_backward, y, bias ? 3 : 2, in))
        return NULL;
    return y;
}
