/* Causal multi-head self-attention from a fused QKV projection, composed of differentiable
 * ops so its backward comes from theirs:
 *   qkv (B, T, 3C) -> q, k, v (B, nh, T, hd)
 *   att = softmax(q k^T / sqrt(hd), causal) (B, nh, T, T)
 *   y   = att v -> (B, T, nh, hd) -> (B, T, C) */
#include <math.h>

#include "ops/ops_common.h"

it_tensor *it_causal_self_attention(it_tensor *qkv, int n_head) {
    OP_REQUIRE(qkv);
    if (qkv->ndim != 3 || n_head < 1 || qkv->shape[2] % (3 * (int64_t)n_head) != 0) {
        it_error(IT_ERR_INVALID_ARG, "attention: qkv must be (B, T, 3C) with C divisible by n_head=%d", n_head);
        return NULL;
    }
    int64_t B = qkv->shape[0], T = qkv->shape[1], C = qkv->shape[2] / 3, hd = C / n_head;
    /* (B, T, 3, nh, hd) -> (3, B, nh, T, hd), one contiguous copy for all three */
    int64_t s5[5] = {B, T, 3, n_head, hd};
    int perm[5] = {2, 0, 3, 1, 4};
    it_tensor *heads = it_contiguous(it_permute(it_reshape(qkv, 5, s5), perm));
    it_tensor *q = it_reshape(it_slice(heads, 0, 0, 1, 1), 4, (int64_t[]){B, n_head, T, hd});
    it_tensor *k = it_reshape(it_slice(heads, 0, 1, 2, 1), 4, (int64_t[]){B, n_head, T, hd});
    it_tensor *v = it_reshape(it_slice(heads, 0, 2, 3, 1), 4, (int64_t[]){B, n_head, T, hd});
    it_tensor *scores = it_matmul(q, k, false, true);                /* (B, nh, T, T) */
    it_tensor *att = it_softmax(scores, 1.0f / sqrtf((float)hd), true);
    it_tensor *y = it_matmul(att, v, false, false);                  /* (B, nh, T, hd) */
    int back[4] = {0, 2, 1, 3};
    return it_reshape(it_contiguous(it_permute(y, back)), 3, (int64_t[]){B, T, C});
}
