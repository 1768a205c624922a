/* The KV cache: generation without recomputing the prefix.
 *
 * A cache holds, for each layer, the keys and values of every position the model has seen
 * so far, (B, max_len, n_kv_head, head_dim) each, on the model's device. it_model_forward_cached
 * runs the model's ordinary forward on the new tokens only (B, T) at positions len .. len+T-1;
 * while it runs, m->kv points at the cache and each layer, after its projections (and RoPE),
 * writes its new keys and values at those positions (it__kv_extend) and attends with its
 * T queries against all len + T keys, the query at position len + t seeing keys 0 .. len + t
 * (it_attention with S > T). The layers' code is the training forward's: only the attention's
 * keys and the positions' embedding or rotation differ, so a token's logits are the training
 * forward's at that position up to the summation order of the products (test_generate).
 *
 * Cost: a step of T = 1 does the weights' products for one token and attention over len + 1
 * keys, instead of the whole sequence's products again; the cache costs
 * 2 * n_layer * B * max_len * n_kv_head * head_dim elements. */
#include <stdio.h>
#include <stdlib.h>

#include "models/model_impl.h"

struct it_kv_cache {
    it_model *m;
    int64_t B, max_len, len;
    int n_layer, n_kv, hd;
    it_tensor **k, **v; /* n_layer each, (B, max_len, n_kv, hd) */
    /* during a forward: its first position and length, and whether only the last position's
     * logits are wanted */
    int64_t pos, T;
    bool last_only;
};

it_status it_kv_cache_new(it_model *m, int64_t batch, int64_t max_len, it_kv_cache **out) {
    *out = NULL;
    const it_model_info *in = &m->info;
    if (m->tp_size > 1 || m->pp_size > 1)
        return it_error(IT_ERR_UNSUPPORTED, "KV cache: a model split over %d TP x %d PP ranks; generation runs on one",
                        m->tp_size, m->pp_size);
    if (batch < 1 || max_len < 1 || max_len > in->block_size)
        return it_error(IT_ERR_INVALID_ARG,
                        "KV cache: batch %lld and length %lld: expected >= 1 and 1..block_size %lld", (long long)batch,
                        (long long)max_len, (long long)in->block_size);
    it_kv_cache *c = calloc(1, sizeof *c);
    int L = in->n_layer;
    if (c) c->k = calloc((size_t)L, sizeof *c->k), c->v = calloc((size_t)L, sizeof *c->v);
    if (!c || !c->k || !c->v) {
        it_kv_cache_free(c);
        return it_error(IT_ERR_OOM, "KV cache: out of host memory");
    }
    c->m = m, c->B = batch, c->max_len = max_len, c->n_layer = L;
    c->n_kv = in->n_kv_head ? in->n_kv_head : in->n_head;
    c->hd = in->head_dim;
    int64_t shape[4] = {batch, max_len, c->n_kv, c->hd};
    it_dtype dt = it_tensor_dtype(m->params);
    for (int l = 0; l < L; l++) {
        c->k[l] = it__tensor_new_owned(m->dev, dt, 4, shape);
        c->v[l] = c->k[l] ? it__tensor_new_owned(m->dev, dt, 4, shape) : NULL;
        if (!c->v[l]) {
            it_status st = it_error_context("KV cache (%d layers x 2 x %lld x %lld x %d x %d): ", L, (long long)batch,
                                            (long long)max_len, c->n_kv, c->hd);
            it_kv_cache_free(c);
            return st;
        }
    }
    *out = c;
    return IT_OK;
}

void it_kv_cache_free(it_kv_cache *c) {
    if (!c) return;
    for (int l = 0; c->k && l < c->n_layer; l++) it_tensor_release(c->k[l]);
    for (int l = 0; c->v && l < c->n_layer; l++) it_tensor_release(c->v[l]);
    free(c->k);
    free(c->v);
    free(c);
}

int64_t it_kv_cache_len(const it_kv_cache *c) { return c->len; }
int64_t it_kv_cache_capacity(const it_kv_cache *c) { return c->max_len; }
int64_t it_kv_cache_batch(const it_kv_cache *c) { return c->B; }
void it_kv_cache_reset(it_kv_cache *c) { c->len = 0; }

size_t it_kv_cache_bytes(const it_kv_cache *c) {
    return c->n_layer ? 2 * (size_t)c->n_layer * it_tensor_nbytes(c->k[0]) : 0;
}

it_tensor *it_model_forward_cached(it_model *m, it_kv_cache *c, it_tensor *idx, bool last_only) {
    if (!idx || !c) return NULL;
    if (c->m != m) {
        it_error(IT_ERR_INVALID_ARG, "forward_cached: the cache was made for another model");
        return NULL;
    }
    if (it_tensor_ndim(idx) != 2 || it_tensor_dim(idx, 0) != c->B) {
        it_error(IT_ERR_INVALID_ARG, "forward_cached: input must be (%lld, T), the cache's batch", (long long)c->B);
        return NULL;
    }
    int64_t T = it_tensor_dim(idx, 1);
    if (T < 1 || c->len + T > c->max_len) {
        it_error(IT_ERR_INVALID_ARG, "forward_cached: %lld new positions after %lld exceed the cache's %lld",
                 (long long)T, (long long)c->len, (long long)c->max_len);
        return NULL;
    }
    bool grad = it_grad_enabled();
    it_grad_set_enabled(false);
    c->pos = c->len, c->T = T, c->last_only = last_only;
    m->kv = c;
    it_tensor *logits = it_model_forward(m, idx);
    m->kv = NULL;
    m->aux_loss = NULL; /* a Mixtral's load-balancing loss: no training here */
    it_grad_set_enabled(grad);
    if (logits) c->len += T;
    return logits;
}

int64_t it__kv_pos(const it_model *m) { return m->kv ? m->kv->pos : 0; }

it_status it__kv_extend(it_model *m, int l, it_tensor **k, it_tensor **v) {
    it_kv_cache *c = m->kv;
    if (!c) return IT_OK;
    if (!*k || !*v) return it_last_status();
    int64_t end = c->pos + c->T;
    it_tensor *kd = it_tensor_slice(c->k[l], 1, c->pos, end, 1), *vd = it_tensor_slice(c->v[l], 1, c->pos, end, 1);
    it_status st = it_tensor_copy_(kd, *k);
    if (!st) st = it_tensor_copy_(vd, *v);
    if (st) return st;
    *k = it_tensor_slice(c->k[l], 1, 0, end, 1);
    *v = it_tensor_slice(c->v[l], 1, 0, end, 1);
    return *k && *v ? IT_OK : it_last_status();
}

it_tensor *it__kv_last(it_model *m, it_tensor *x) {
    if (!m->kv || !m->kv->last_only || !x) return x;
    int64_t T = it_tensor_dim(x, 1);
    return it_slice(x, 1, T - 1, T, 1);
}
