/* The LM head and its loss as one op: mean cross entropy of x w^T over the first `valid`
 * columns, without the (N, Vp) logits ever existing whole.
 *
 * The rows go through in chunks (at most 64 MB of logits at a time): each chunk's logits x_c w^T, its
 * losses, and, when a gradient is wanted, its dlogits for an upstream gradient of one,
 * (softmax - onehot) / N, and their products dx_c = dlogits_c w and dw += dlogits_c^T x_c.
 * The backward then only scales dx and dw by the loss's gradient (a scalar). This is the
 * memory plan of Liger's fused linear cross entropy and torchtune's chunked loss: the step
 * keeps dx (N, C) and dw (Vp, C) from the forward to the backward instead of the logits and
 * their gradient, two (N, Vp) buffers (GPT-2 124M at B=4, T=1024: 0.17 GB instead of 1.6 GB;
 * a 128K vocabulary saves proportionally more), and computes no product twice. The numbers
 * are the composition's up to the order of dw's sum over the chunks (fp32 rounding).
 *
 * it_model_loss takes this path (it__lm_head) in float32 without TP, without an adapter on
 * the head and with the precision checker off (which reports the head's logits as a module);
 * IT_LINEAR_CE=0 in the environment turns it off, for the tests and the bench that compare
 * it with the composition. */
#include <stdlib.h>
#include <string.h>

#include "ops/ops_common.h"

/* dx and dw scaled by the loss's gradient dy (0-D) in place, then taken over as x's and w's
 * gradients: nothing else reads them. */
static it_status linear_ce_backward(it_node *n, it_tensor *dy) {
    for (int i = 0; i < 2; i++) {
        it_tensor *t = n->in[i], *g = n->saved[i];
        if (!t || !t->requires_grad) continue;
        it_tdesc a = it_tensor_desc(g), b = it__broadcast_desc(dy, g->ndim, g->shape), o = a;
        it_status st = KCALL(it_tensor_device(g), binary, IT_BINARY_MUL, &a, &b, &o);
        it_tensor *gv = st ? NULL : it_tensor_view(g, t->ndim, t->shape);
        if (!gv) return st ? st : it_last_status();
        if ((st = it__accum_grad_taken(t, gv))) return st;
    }
    return IT_OK;
}

/* Rows of logits a chunk: 64 MB of them, and no more than an eighth of the rows (at least 64),
 * so that the two chunk buffers stay well below the logits they replace; IT_LINEAR_CE_ROWS
 * sets the count (for the tests' chunk boundaries). */
static int64_t chunk_rows(int64_t rows, int64_t vp) {
    int64_t r = ((int64_t)64 << 20) / (vp * (int64_t)sizeof(float)), eighth = (rows + 7) / 8;
    if (r > eighth) r = eighth < 64 ? 64 : eighth;
    const char *env = getenv("IT_LINEAR_CE_ROWS");
    char *end = NULL;
    long long v = env && *env ? strtoll(env, &end, 10) : 0;
    if (end && *end == '\0' && v > 0) r = (int64_t)v;
    return r < 1 ? 1 : r > rows ? rows : r;
}

bool it__linear_cross_entropy_wanted(const it_tensor *x, const it_tensor *w) {
    const char *env = getenv("IT_LINEAR_CE");
    if (env && strcmp(env, "0") == 0) return false;
    it_dtype ac;
    if (it_autocast_enabled(&ac) && ac != IT_DTYPE_FP32) return false;
    return x && w && x->dtype == IT_DTYPE_FP32 && w->dtype == IT_DTYPE_FP32;
}

/* The chunks' products, losses and (dx, dw not NULL) gradients; the losses' mean into m. */
static it_status chunks(it_tensor *x, it_tensor *w, it_tensor *targets, int64_t valid, int64_t step, it_tensor *m,
                        it_tensor *dx, it_tensor *dw) {
    it_device dev = it_tensor_device(x);
    int64_t C = w->shape[1], vp = w->shape[0], rows = it_tensor_numel(x) / C;
    int64_t s2[2] = {rows, C}, s1[1] = {rows};
    it_tensor *x2 = it_tensor_view(it_tensor_contiguous(x), 2, s2);
    it_tensor *t1 = it_tensor_view(it_tensor_contiguous(targets), 1, s1);
    it_tensor *losses = it_tensor_new(dev, IT_DTYPE_FP32, 1, s1);
    it_tensor *logits = it_tensor_new(dev, IT_DTYPE_FP32, 2, (int64_t[]){step, vp});
    it_tensor *dlogits = dx ? it_tensor_new(dev, IT_DTYPE_FP32, 2, (int64_t[]){step, vp}) : NULL;
    it_tensor *dl = dx ? it_tensor_full(dev, IT_DTYPE_FP32, 1, s1, it_scalar_f64(1.0 / (double)rows)) : NULL;
    if (!x2 || !t1 || !losses || !logits || (dx && (!dlogits || !dl))) return it_last_status();
    for (int64_t r0 = 0; r0 < rows; r0 += step) {
        int64_t r1 = r0 + step < rows ? r0 + step : rows;
        it_tensor *xc = it_tensor_slice(x2, 0, r0, r1, 1), *tc = it_tensor_slice(t1, 0, r0, r1, 1);
        it_tensor *lc = it_tensor_slice(logits, 0, 0, r1 - r0, 1), *sc = it_tensor_slice(losses, 0, r0, r1, 1);
        if (!xc || !tc || !lc || !sc) return it_last_status();
        it_tdesc dlc = it_tensor_desc(lc), dtc = it_tensor_desc(tc), dsc = it_tensor_desc(sc);
        it_status st = it__gemm(xc, w, lc, false, true, 1.0f, 0.0f);
        if (st || (st = KCALL(dev, cross_entropy_fwd, &dlc, &dtc, valid, &dsc))) return st;
        if (!dx) continue;
        it_tensor *gc = it_tensor_slice(dlogits, 0, 0, r1 - r0, 1), *dxc = it_tensor_slice(dx, 0, r0, r1, 1);
        it_tensor *dlr = it_tensor_slice(dl, 0, r0, r1, 1);
        if (!gc || !dxc || !dlr) return it_last_status();
        it_tdesc dgc = it_tensor_desc(gc), ddl = it_tensor_desc(dlr);
        if ((st = KCALL(dev, cross_entropy_bwd, &dlc, &dtc, valid, &ddl, &dgc)) ||
            (st = it__gemm(gc, w, dxc, false, false, 1.0f, 0.0f)) ||
            (st = it__gemm(gc, xc, dw, true, false, 1.0f, r0 ? 1.0f : 0.0f)))
            return st;
    }
    it_tdesc dls = it_tensor_desc(losses), dm = it_tensor_desc(m);
    return KCALL(dev, reduce, IT_REDUCE_MEAN, &dls, &dm);
}

it_tensor *it__linear_cross_entropy(it_tensor *x, it_tensor *w, it_tensor *targets, int64_t valid) {
    OP_REQUIRE(x && w && targets);
    it_tensor *in2[2] = {x, w};
    if (it__check_same("linear_cross_entropy", 2, in2)) return NULL;
    if (x->dtype != IT_DTYPE_FP32 || w->ndim != 2 || x->ndim < 1 || x->shape[x->ndim - 1] != w->shape[1]) {
        it_error(IT_ERR_INVALID_ARG,
                 "linear_cross_entropy: x (float32, last dimension %lld) must match w's in-features",
                 (long long)(x->ndim ? x->shape[x->ndim - 1] : 0));
        return NULL;
    }
    int64_t C = w->shape[1], vp = w->shape[0], rows = it_tensor_numel(x) / (C ? C : 1);
    if (it_tensor_numel(targets) != rows || (targets->dtype != IT_DTYPE_I32 && targets->dtype != IT_DTYPE_I64)) {
        it_error(IT_ERR_INVALID_ARG, "linear_cross_entropy: targets must be %lld int32 or int64 ids", (long long)rows);
        return NULL;
    }
    if (valid < 1 || valid > vp) {
        it_error(IT_ERR_INVALID_ARG, "linear_cross_entropy: valid vocabulary %lld outside 1..%lld", (long long)valid,
                 (long long)vp);
        return NULL;
    }
    it_device dev = it_tensor_device(x);
    int64_t s2[2] = {rows, C}, step = chunk_rows(rows, vp), none[1] = {1};
    bool grad = it__needs_grad(2, in2);
    it_tensor *m = it_tensor_new(dev, IT_DTYPE_FP32, 1, none);
    it_tensor *dx = grad ? it_tensor_new(dev, IT_DTYPE_FP32, 2, s2) : NULL;
    it_tensor *dw = grad ? it_tensor_new(dev, IT_DTYPE_FP32, 2, w->shape) : NULL;
    OP_REQUIRE(m && (!grad || (dx && dw)));
    /* the chunk buffers and every view live in this scope only: gone when the op returns */
    it_scope_begin();
    it_status st = chunks(x, w, targets, valid, step, m, dx, dw);
    it_scope_end();
    if (st) return NULL;
    it_tensor *out = it_tensor_view(m, 0, none);
    OP_REQUIRE(out);
    if (grad) {
        it_node *n = it__node_record("linear_cross_entropy", linear_ce_backward, out, 2, in2);
        OP_REQUIRE(n);
        it__node_save(n, dx);
        it__node_save(n, dw);
    }
    return out;
}
