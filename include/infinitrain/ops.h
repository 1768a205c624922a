/* Differentiable operations. Each runs its forward through a slot of the tensor's device's
 * kernel table and, when grad mode is on and an input requires grad, records a tape node
 * whose backward runs through kernel slots too.
 *
 * Every op returns a new tensor owned by the innermost scope, or NULL with the message in
 * it_last_error(). A NULL input makes the op return NULL at once, so a chain of ops can be
 * checked once at its end. Inputs must live on one device and share one dtype (index
 * tensors excepted). */
#ifndef INFINITRAIN_OPS_H
#define INFINITRAIN_OPS_H

#include "autograd.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- elementwise, with numpy broadcasting */
IT_API it_tensor *it_add(it_tensor *a, it_tensor *b);
IT_API it_tensor *it_sub(it_tensor *a, it_tensor *b);
IT_API it_tensor *it_mul(it_tensor *a, it_tensor *b);
IT_API it_tensor *it_div(it_tensor *a, it_tensor *b);
IT_API it_tensor *it_scale(it_tensor *x, float alpha); /* alpha * x */
IT_API it_tensor *it_gelu(it_tensor *x);               /* tanh form (GPT-2) */
IT_API it_tensor *it_silu(it_tensor *x);
IT_API it_tensor *it_tanh(it_tensor *x);
IT_API it_tensor *it_exp(it_tensor *x);

/* ---- linear algebra */
/* op(a) @ op(b) over the last two dims; leading dims of a and b must be equal, or b 2-D
 * (shared by every batch). op transposes when the flag is set. */
IT_API it_tensor *it_matmul(it_tensor *a, it_tensor *b, bool trans_a, bool trans_b);
/* x (..., in) @ w(out, in)^T + bias(out); bias may be NULL. */
IT_API it_tensor *it_linear(it_tensor *x, it_tensor *w, it_tensor *bias);
/* One linear layer per group of consecutive rows (a mixture of experts' experts): x (R, in),
 * w[g] (out, in) for g < n_group, offsets n_group + 1 host row indices, non-decreasing from 0
 * to R. Rows offsets[g] .. offsets[g+1]-1 of the result (R, out) are those rows of x times
 * w[g]^T. An empty group costs nothing and its weight gets no gradient. */
IT_API it_tensor *it_grouped_linear(it_tensor *x, int n_group, it_tensor *const *w, const int64_t *offsets);

/* ---- layers' building blocks */
/* idx (...) int32/int64, weight (V, C) -> (..., C). */
IT_API it_tensor *it_embedding(it_tensor *idx, it_tensor *weight);
/* Over the last dim; w, b (C); b may be NULL. */
IT_API it_tensor *it_layernorm(it_tensor *x, it_tensor *w, it_tensor *b, float eps);
/* softmax(scale * x) over the last dim; causal masks keys after the query (see backend.h). */
IT_API it_tensor *it_softmax(it_tensor *x, float scale, bool causal);
/* Mean over rows of cross entropy: logits (..., Vp), targets (...) int; only the first
 * `valid` logits of each row take part (valid <= Vp). Returns a 0-D tensor: fp64 for fp64
 * logits, else fp32 (bf16 / fp16 logits are computed in fp32, as autocast runs it; their
 * gradient comes back in their own dtype). */
IT_API it_tensor *it_cross_entropy(it_tensor *logits, it_tensor *targets, int64_t valid);
/* Flash attention (--flash, on by default): when on, attention runs through the backend's
 * flash_attention_fwd / _bwd slots where it has them (memory linear in T); off, or where it
 * has not, the fused attention slots or the composition as before. Process-wide. */
IT_API void it_flash_attention_set(bool enabled);
IT_API bool it_flash_attention_enabled(void);
/* Whether dev's backend has both flash attention slots (what --flash uses there). */
IT_API bool it_flash_attention_available(it_device dev);
/* The message of the first call a backend declined (IT_ERR_UNSUPPORTED: a head size,
 * length, dtype or layout it cannot take; that attention composed) since the last
 * it_flash_attention_set, or NULL when none was. */
IT_API const char *it_flash_attention_declined(void);
/* qkv (B, T, 3C), rows Q|K|V, n_head heads -> (B, T, C); causal, scale 1/sqrt(C/n_head). */
IT_API it_tensor *it_causal_self_attention(it_tensor *qkv, int n_head);

/* ---- LLaMA-3 / Mixtral */
/* x * rsqrt(mean(x^2) + eps) * w over the last dim. */
IT_API it_tensor *it_rmsnorm(it_tensor *x, it_tensor *w, float eps);
/* Rotary embedding of x (B, T, H, D) on interleaved pairs with tables cos/sin (T, D/2). */
IT_API it_tensor *it_rope(it_tensor *x, it_tensor *cos, it_tensor *sin);
/* Causal attention with grouped-query heads: q (B, T, nh, hd), k, v (B, S, nkv, hd),
 * nh divisible by nkv (kv head j serves query heads j*r .. j*r+r-1) -> (B, T, nh*hd).
 * S = T is self-attention; S > T (a KV cache: the keys of S - T earlier positions, then
 * the queries' own) puts query t at key position S - T + t, seeing keys 0 .. S - T + t. */
IT_API it_tensor *it_attention(it_tensor *q, it_tensor *k, it_tensor *v);
/* The k largest entries of each row of x (N, E), descending (ties: lower index first);
 * differentiable in x. *indices (optional) receives the (N, k) int32 indices. */
IT_API it_tensor *it_topk(it_tensor *x, int64_t k, it_tensor **indices);
/* out (rows, C) = zeros with src's rows added at idx (n): a differentiable scatter-add. */
IT_API it_tensor *it_index_add(int64_t rows, it_tensor *idx, it_tensor *src);
/* Mixture of experts (Mixtral): router (E, C); per token the top-k experts by raw router
 * logit, weights softmax over those k logits, output sum of weight * down(silu(gate x) * up x).
 * Tokens are grouped per expert (one matmul per expert). tokens_per_expert (E entries,
 * optional) receives the routing counts; aux_loss (optional) the load-balancing loss. */
IT_API it_tensor *it_moe(it_tensor *x, it_tensor *router, int n_expert, it_tensor *const *gate, it_tensor *const *up,
                         it_tensor *const *down, int k, int64_t *tokens_per_expert, it_tensor **aux_loss);
/* x itself, whose backward also gives `loss` (any shape) a gradient of ones, as if loss were
 * added to the scalar that backward starts from (Megatron's MoEAuxLossAutoScaler): a pipeline
 * stage's auxiliary loss joins the backward of its output, whose root is on another rank. */
IT_API it_tensor *it_attach_loss(it_tensor *x, it_tensor *loss);

/* ---- reductions: over the listed dims (negative counts from the end) */
IT_API it_tensor *it_sum(it_tensor *x, int ndims, const int *dims, bool keepdim);
IT_API it_tensor *it_mean(it_tensor *x, int ndims, const int *dims, bool keepdim);
IT_API it_tensor *it_sum_all(it_tensor *x); /* 0-D */

/* ---- differentiable views (see tensor.h for their rules) */
IT_API it_tensor *it_reshape(it_tensor *x, int ndim, const int64_t *shape);
IT_API it_tensor *it_permute(it_tensor *x, const int *perm);
IT_API it_tensor *it_transpose(it_tensor *x, int d0, int d1);
IT_API it_tensor *it_slice(it_tensor *x, int dim, int64_t start, int64_t end, int64_t step);
IT_API it_tensor *it_expand(it_tensor *x, int ndim, const int64_t *shape);
IT_API it_tensor *it_contiguous(it_tensor *x);
/* The n tensors (one dtype and device, equal but for dim) one after another along dim: a new
 * contiguous tensor (x itself when n is 1). */
IT_API it_tensor *it_cat(int n, it_tensor *const *xs, int dim);

#ifdef __cplusplus
}
#endif
#endif
