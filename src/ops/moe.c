/* Top-k selection and the mixture-of-experts layer (Mixtral).
 *
 * MoE dispatch/combine: the (token, slot) pairs are sorted by expert so each expert runs one
 * matmul over all of its tokens (it_grouped_linear). Sorting needs the routing decisions on
 * the host (to size each expert's group), fetched with one synchronizing copy per layer; the
 * gather and the scatter-add run as embedding kernels (a row gather is an embedding lookup,
 * a scatter-add is its backward), so both are differentiable for free. */
#include <stdlib.h>
#include <string.h>

#include "autograd/node.h"
#include "ops/ops_common.h"

/* Host copy of (N, k) int32 indices. */
static int32_t *indices_to_host(it_tensor *idx) {
    size_t n = (size_t)it_tensor_numel(idx);
    int32_t *h = malloc(sizeof(int32_t) * (n ? n : 1));
    if (!h) {
        it_error(IT_ERR_OOM, "topk: %zu indices of host memory", n);
        return NULL;
    }
    if (it_tensor_copy_to_host(idx, h, sizeof(int32_t) * n)) {
        free(h);
        return NULL;
    }
    return h;
}

it_tensor *it_topk(it_tensor *x, int64_t k, it_tensor **indices) {
    OP_REQUIRE(x);
    if (x->ndim != 2 || k < 1 || k > x->shape[1]) {
        it_error(IT_ERR_INVALID_ARG, "topk: x must be (N, E) with 1 <= k <= E (k = %lld, E = %lld)", (long long)k,
                 (long long)(x->ndim == 2 ? x->shape[1] : -1));
        return NULL;
    }
    int64_t N = x->shape[0], E = x->shape[1];
    it_tensor *vals = it_tensor_new(it_tensor_device(x), x->dtype, 2, (int64_t[]){N, k});
    it_tensor *idx = it_tensor_new(it_tensor_device(x), IT_DTYPE_I32, 2, (int64_t[]){N, k});
    OP_REQUIRE(vals && idx);
    it_tdesc dx = it_tensor_desc(x), dv = it_tensor_desc(vals), di = it_tensor_desc(idx);
    if (KCALL(it_tensor_device(x), topk, &dx, k, &dv, &di)) return NULL;
    if (indices) *indices = idx;
    if (!it__needs_grad(1, &x)) return vals;
    /* Differentiable values: gather x's flat positions n*E + idx (equal to the kernel's). */
    int32_t *h = indices_to_host(idx);
    OP_REQUIRE(h);
    for (int64_t n = 0; n < N; n++)
        for (int64_t j = 0; j < k; j++) h[n * k + j] = (int32_t)(n * E + h[n * k + j]);
    it_tensor *flat = it_tensor_from_host(it_tensor_device(x), IT_DTYPE_I32, 1, (int64_t[]){N * k}, h,
                                          sizeof(int32_t) * (size_t)(N * k));
    free(h);
    it_tensor *col = it_reshape(it_contiguous(x), 2, (int64_t[]){N * E, 1});
    return it_reshape(it_embedding(flat, col), 2, (int64_t[]){N, k});
}

it_tensor *it_moe(it_tensor *x, it_tensor *router, int n_expert, it_tensor *const *gate, it_tensor *const *up,
                  it_tensor *const *down, int k, int64_t *tokens_per_expert, it_tensor **aux_loss) {
    return it__moe(x, x, NULL, NULL, router, n_expert, gate, up, down, k, tokens_per_expert, aux_loss);
}

it_tensor *it__moe(it_tensor *x, it_tensor *x_experts, it_tensor *(*sum)(void *ctx, it_tensor *partial), void *ctx,
                   it_tensor *router, int n_expert, it_tensor *const *gate, it_tensor *const *up,
                   it_tensor *const *down, int k, int64_t *tokens_per_expert, it_tensor **aux_loss) {
    OP_REQUIRE(x && x_experts && router);
    if (x->ndim < 1 || router->ndim != 2 || router->shape[0] != n_expert || k < 1 || k > n_expert) {
        it_error(IT_ERR_INVALID_ARG, "moe: router must be (E, C) with E = %d and 1 <= k = %d <= E", n_expert, k);
        return NULL;
    }
    int64_t C = x->shape[x->ndim - 1], N = C ? it_tensor_numel(x) / C : 0;
    it_device dev = it_tensor_device(x);
    it_tensor *xf = it_reshape(x, 2, (int64_t[]){N, C});
    it_tensor *logits = it_linear(xf, router, NULL); /* (N, E) */
    it_tensor *idx = NULL;
    it_tensor *top = it_topk(logits, k, &idx);   /* (N, k), raw logits */
    it_tensor *w = it_softmax(top, 1.0f, false); /* routing weights over the chosen k */
    OP_REQUIRE(w && idx);
    int32_t *h = indices_to_host(idx);
    OP_REQUIRE(h);
    /* Sort the N*k (token, slot) pairs by expert, tokens ascending within each expert:
     * tok[i] is the token of sorted pair i, pos[i] its flat (N, k) position, and the
     * pairs of expert e are rows off[e] .. off[e+1]-1. */
    int64_t *off = calloc((size_t)n_expert + 2, sizeof *off); /* off[n_expert + 1] is scratch */
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)(N * k + 1)), *pos = malloc(sizeof(int32_t) * (size_t)(N * k + 1));
    if (!off || !tok || !pos) {
        free(h);
        free(off);
        free(tok);
        free(pos);
        it_error(IT_ERR_OOM, "moe: routing tables");
        return NULL;
    }
    /* Counting sort, stable (tokens stay ascending). Counts go one slot to the right of
     * where they are summed into starts, and the fill advances off[e + 1] from the start of
     * e to its end, which is the start of e + 1: afterwards off[0..E] are the offsets. */
    for (int64_t i = 0; i < N * k; i++) off[h[i] + 2]++;
    for (int e = 0; e < n_expert; e++) {
        if (tokens_per_expert) tokens_per_expert[e] = off[e + 2];
        off[e + 2] += off[e + 1];
    }
    for (int64_t i = 0; i < N * k; i++) {
        int64_t r = off[h[i] + 1]++;
        tok[r] = (int32_t)(i / k);
        pos[r] = (int32_t)i;
    }
    /* Every tensor below has N*k rows whatever the routing, so a step reuses the last one's
     * blocks: the experts run as one grouped product per projection, the tokens are
     * gathered once and scattered back once. */
    int64_t NK = N * k;
    it_tensor *out = NULL;
    if (NK > 0) {
        it_tensor *ti = it_tensor_from_host(dev, IT_DTYPE_I32, 1, (int64_t[]){NK}, tok, sizeof(int32_t) * (size_t)NK);
        it_tensor *pi = it_tensor_from_host(dev, IT_DTYPE_I32, 1, (int64_t[]){NK}, pos, sizeof(int32_t) * (size_t)NK);
        it_tensor *wcol = it_reshape(w, 2, (int64_t[]){NK, 1});
        it_tensor *xe = x_experts == x ? xf : it_reshape(x_experts, 2, (int64_t[]){N, C});
        it_tensor *xs = it_embedding(ti, xe); /* (N*k, C): each expert's tokens, expert by expert */
        /* expert(x) = down(silu(gate(x)) * up(x)); under autocast xs is rounded once for both
         * products, whose outputs stay in its dtype into the fused SwiGLU (the same bits as
         * widening them) */
        it_tensor *xl[2] = {NULL, NULL};
        it_tensor *hs = it__autocast_share(xs, 2, xl)
                            ? it_grouped_linear(it__swiglu_low(it__grouped_linear_low(xl[0], n_expert, gate, off),
                                                               it__grouped_linear_low(xl[1], n_expert, up, off)),
                                                n_expert, down, off)
                            : NULL;
        if (sum) hs = sum(ctx, hs);
        it_tensor *ys = it_mul(hs, it_embedding(pi, wcol)); /* weighted by its routing weight (N*k, 1) */
        out = it_index_add(N, ti, ys); /* a token's k contributions, added in expert order into zeros */
    } else {
        out = it_tensor_zeros(dev, x->dtype, 2, (int64_t[]){N, C});
    }
    bool ok = out != NULL;
    /* Load-balancing loss (Switch Transformer): E * sum_e f_e * P_e, with f_e the share of
     * routed assignments that went to e and P_e the mean router probability of e. */
    if (ok && aux_loss) {
        float *f = malloc(sizeof(float) * (size_t)n_expert);
        if (!f) {
            ok = false;
            it_error(IT_ERR_OOM, "moe: aux loss");
        } else {
            for (int e = 0; e < n_expert; e++) f[e] = N ? (float)(off[e + 1] - off[e]) / (float)(N * k) : 0.0f;
            it_tensor *ft = it_tensor_to_dtype(
                it_tensor_from_host(dev, IT_DTYPE_FP32, 1, (int64_t[]){n_expert}, f, sizeof(float) * (size_t)n_expert),
                x->dtype);
            free(f);
            int d0 = 0;
            it_tensor *P = it_mean(it_softmax(logits, 1.0f, false), 1, &d0, false);
            *aux_loss = it_scale(it_sum_all(it_mul(P, ft)), (float)n_expert);
            ok = *aux_loss != NULL;
        }
    }
    free(h);
    free(off);
    free(tok);
    free(pos);
    if (!ok) return NULL;
    int64_t shape[IT_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) shape[i] = x->shape[i];
    return it_reshape(out, x->ndim, shape);
}

/* ---------------------------------------------------------------- a loss carried by an activation */

/* dx = dy; dloss = 1 (loss's own shape, its dtype). */
static it_status attach_backward(it_node *n, it_tensor *dy) {
    it_status st = it__accum_grad(n->in[0], dy);
    if (st || !n->in[1]->requires_grad) return st;
    it_tensor *one = it_tensor_full(it_tensor_device(n->in[1]), n->in[1]->dtype, n->in[1]->ndim, n->in[1]->shape,
                                    it_scalar_f64(1.0));
    return one ? it__accum_grad(n->in[1], one) : it_last_status();
}

it_tensor *it_attach_loss(it_tensor *x, it_tensor *loss) {
    OP_REQUIRE(x && loss);
    it_tensor *in[2] = {x, loss};
    if (!it__needs_grad(2, in)) return x;
    it_tensor *c = it_tensor_contiguous(x);
    it_tensor *out = c ? it_tensor_view(c, c->ndim, c->shape) : NULL;
    OP_REQUIRE(out);
    OP_REQUIRE(it__node_record("attach_loss", attach_backward, out, 2, in));
    return out;
}
