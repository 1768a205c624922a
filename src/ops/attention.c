/* Causal multi-head self-attention, composed of differentiable ops so its backward comes
 * from theirs. Heads are laid out (B, nh, T, hd):
 *   att = softmax(q k^T / sqrt(hd), causal)   (B, nh, T, T)
 *   y   = att v -> (B, T, nh, hd) -> (B, T, C) */
#include <math.h>

#include "ops/ops_common.h"

/* q, k, v (B, nh, T, hd) contiguous -> (B, T, nh*hd). */
static it_tensor *attend(it_tensor *q, it_tensor *k, it_tensor *v) {
    OP_REQUIRE(q && k && v);
    int64_t B = q->shape[0], nh = q->shape[1], T = q->shape[2], hd = q->shape[3];
    it_tensor *scores = it_matmul(q, k, false, true); /* (B, nh, T, T) */
    it_tensor *att = it_softmax(scores, 1.0f / sqrtf((float)hd), true);
    it_tensor *y = it_matmul(att, v, false, false); /* (B, nh, T, hd) */
    int back[4] = {0, 2, 1, 3};
    return it_reshape(it_contiguous(it_permute(y, back)), 3, (int64_t[]){B, T, nh * hd});
}

/* GPT-2: qkv (B, T, 3C), rows Q|K|V, one copy splits all three into heads. */
it_tensor *it_causal_self_attention(it_tensor *qkv, int n_head) {
    OP_REQUIRE(qkv);
    if (qkv->ndim != 3 || n_head < 1 || qkv->shape[2] % (3 * (int64_t)n_head) != 0) {
        it_error(IT_ERR_INVALID_ARG, "attention: qkv must be (B, T, 3C) with C divisible by n_head=%d", n_head);
        return NULL;
    }
    int64_t B = qkv->shape[0], T = qkv->shape[1], C = qkv->shape[2] / 3, hd = C / n_head;
    /* (B, T, 3, nh, hd) -> (3, B, nh, T, hd) */
    int64_t s5[5] = {B, T, 3, n_head, hd};
    int perm[5] = {2, 0, 3, 1, 4};
    it_tensor *heads = it_contiguous(it_permute(it_reshape(qkv, 5, s5), perm));
    int64_t s4[4] = {B, n_head, T, hd};
    it_tensor *q = it_reshape(it_slice(heads, 0, 0, 1, 1), 4, s4);
    it_tensor *k = it_reshape(it_slice(heads, 0, 1, 2, 1), 4, s4);
    it_tensor *v = it_reshape(it_slice(heads, 0, 2, 3, 1), 4, s4);
    return attend(q, k, v);
}

/* (B, T, nkv, hd) -> (B, nh, T, hd): kv head j serves query heads j*r .. j*r+r-1. */
static it_tensor *kv_heads(it_tensor *x, int64_t nh) {
    int64_t B = x->shape[0], T = x->shape[1], nkv = x->shape[2], hd = x->shape[3];
    if (nkv != nh) {
        int64_t r = nh / nkv;
        it_tensor *e = it_expand(it_reshape(x, 5, (int64_t[]){B, T, nkv, 1, hd}), 5, (int64_t[]){B, T, nkv, r, hd});
        x = it_reshape(e, 4, (int64_t[]){B, T, nh, hd});
    }
    int perm[4] = {0, 2, 1, 3};
    return it_contiguous(it_permute(x, perm));
}

it_tensor *it_attention(it_tensor *q, it_tensor *k, it_tensor *v) {
    OP_REQUIRE(q && k && v);
    if (q->ndim != 4 || k->ndim != 4 || v->ndim != 4 || k->shape[0] != q->shape[0] || k->shape[1] != q->shape[1] ||
        k->shape[3] != q->shape[3] || v->shape[0] != k->shape[0] || v->shape[1] != k->shape[1] ||
        v->shape[2] != k->shape[2] || v->shape[3] != k->shape[3] || k->shape[2] < 1 ||
        q->shape[2] % k->shape[2] != 0) {
        it_error(IT_ERR_INVALID_ARG, "attention: q (B, T, nh, hd), k and v (B, T, nkv, hd) with nh divisible by nkv");
        return NULL;
    }
    int perm[4] = {0, 2, 1, 3};
    return attend(it_contiguous(it_permute(q, perm)), kv_heads(k, q->shape[2]), kv_heads(v, q->shape[2]));
}
