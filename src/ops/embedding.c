/* Embedding lookup: idx (...) -> (..., C) rows of weight (V, C). */
#include <string.h>

#include "ops/ops_common.h"

/* dweight += scatter-add of dy's rows at idx (the kernel accumulates into the buffer). */
static it_status embedding_backward(it_node *n, it_tensor *dy) {
    it_tensor *idx = n->saved[0], *w = n->in[0];
    float beta = 0.0f;
    it_tensor *gw = it__grad_buffer(w, &beta);
    if (!gw) return it_last_status();
    it_device dev = it_tensor_device(w);
    if (beta == 0.0f) {
        it_status st = it_tensor_fill(gw, it_scalar_f64(0.0));
        if (st) return st;
    }
    int64_t shape2[2] = {-1, w->shape[1]};
    it_tensor *dy2 = it_tensor_view(dy, 2, shape2);
    if (!dy2) return it_last_status();
    it_tdesc di = it_tensor_desc(idx), dd = it_tensor_desc(dy2), dg = it_tensor_desc(gw);
    return KCALL(dev, embedding_bwd, &di, &dd, &dg);
}

it_tensor *it_embedding(it_tensor *idx, it_tensor *weight) {
    OP_REQUIRE(idx && weight);
    if (idx->dtype != IT_DTYPE_I32 && idx->dtype != IT_DTYPE_I64) {
        it_error(IT_ERR_INVALID_ARG, "embedding: indices must be int32 or int64, got %s", it_dtype_name(idx->dtype));
        return NULL;
    }
    if (weight->ndim != 2 || idx->ndim + 1 > IT_MAX_DIMS) {
        it_error(IT_ERR_INVALID_ARG, "embedding: weight must be 2-D (V, C), got %d-D", weight->ndim);
        return NULL;
    }
    if (!it_device_equal(it_tensor_device(idx), it_tensor_device(weight))) {
        it_error(IT_ERR_INVALID_ARG, "embedding: indices and weight live on different devices");
        return NULL;
    }
    it_tensor *flat = it_tensor_contiguous(idx);
    OP_REQUIRE(flat);
    int64_t n1[1] = {it_tensor_numel(idx)};
    flat = it_tensor_view(flat, 1, n1);
    int64_t shape[IT_MAX_DIMS];
    memcpy(shape, idx->shape, sizeof(int64_t) * (size_t)idx->ndim);
    shape[idx->ndim] = weight->shape[1];
    it_tensor *out = it__scope_add(it__tensor_new_owned(it_tensor_device(weight), weight->dtype, idx->ndim + 1, shape));
    OP_REQUIRE(out && flat);
    int64_t o2[2] = {n1[0], weight->shape[1]};
    it_tensor *out2 = it_tensor_view(out, 2, o2);
    OP_REQUIRE(out2);
    it_tdesc di = it_tensor_desc(flat), dw = it_tensor_desc(weight), dout = it_tensor_desc(out2);
    if (KCALL(it_tensor_device(weight), embedding_fwd, &di, &dw, &dout)) return NULL;
    if (it__needs_grad(1, &weight)) {
        it_node *n = it__node_record("embedding", embedding_backward, out, 1, &weight);
        OP_REQUIRE(n);
        it__node_save(n, flat);
    }
    return out;
}

/* ---------------------------------------------------------------- index_add */

/* dsrc = rows of dout gathered at idx. */
static it_status index_add_backward(it_node *n, it_tensor *dy) {
    it_tensor *idx = n->saved[0], *src = n->in[0];
    it_tensor *g = it__empty_like(src), *dyc = it_tensor_contiguous(dy);
    if (!g || !dyc) return it_last_status();
    it_tdesc di = it_tensor_desc(idx), dd = it_tensor_desc(dyc), dg = it_tensor_desc(g);
    it_status st = KCALL(it_tensor_device(src), embedding_fwd, &di, &dd, &dg);
    return st ? st : it__accum_grad(src, g);
}

it_tensor *it_index_add(int64_t rows, it_tensor *idx, it_tensor *src) {
    OP_REQUIRE(idx && src);
    if (idx->dtype != IT_DTYPE_I32 && idx->dtype != IT_DTYPE_I64) {
        it_error(IT_ERR_INVALID_ARG, "index_add: indices must be int32 or int64, got %s", it_dtype_name(idx->dtype));
        return NULL;
    }
    if (idx->ndim != 1 || src->ndim != 2 || src->shape[0] != idx->shape[0] || rows < 0) {
        it_error(IT_ERR_INVALID_ARG, "index_add: idx (n) and src (n, C) expected");
        return NULL;
    }
    it_tensor *ic = it_tensor_contiguous(idx), *sc = it_tensor_contiguous(src);
    it_tensor *out = it_tensor_zeros(it_tensor_device(src), src->dtype, 2, (int64_t[]){rows, src->shape[1]});
    OP_REQUIRE(ic && sc && out);
    it_tdesc di = it_tensor_desc(ic), ds = it_tensor_desc(sc), dout = it_tensor_desc(out);
    if (KCALL(it_tensor_device(src), embedding_bwd, &di, &ds, &dout)) return NULL;
    if (it__needs_grad(1, &src)) {
        it_node *n = it__node_record("index_add", index_add_backward, out, 1, &src);
        OP_REQUIRE(n);
        it__node_save(n, ic);
    }
    return out;
}
