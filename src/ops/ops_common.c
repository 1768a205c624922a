#include <string.h>

#include "ops/ops_common.h"

it_status it__check_same(const char *op, int n, it_tensor *const *ts) {
    for (int i = 1; i < n; i++) {
        if (!ts[i]) continue;
        if (!it_device_equal(it_tensor_device(ts[0]), it_tensor_device(ts[i]))) {
            char a[64], b[64];
            return it_error(IT_ERR_INVALID_ARG, "%s: inputs live on different devices (%s and %s)", op,
                            it_device_str(it_tensor_device(ts[0]), a, sizeof a),
                            it_device_str(it_tensor_device(ts[i]), b, sizeof b));
        }
        if (ts[i]->dtype != ts[0]->dtype)
            return it_error(IT_ERR_INVALID_ARG, "%s: inputs have different dtypes (%s and %s)", op,
                            it_dtype_name(ts[0]->dtype), it_dtype_name(ts[i]->dtype));
    }
    return IT_OK;
}

it_status it__broadcast_shape(const char *op, const it_tensor *a, const it_tensor *b, int *ndim, int64_t *shape) {
    int n = a->ndim > b->ndim ? a->ndim : b->ndim;
    for (int i = 0; i < n; i++) {
        int ia = i - (n - a->ndim), ib = i - (n - b->ndim);
        int64_t sa = ia >= 0 ? a->shape[ia] : 1, sb = ib >= 0 ? b->shape[ib] : 1;
        if (sa != sb && sa != 1 && sb != 1)
            return it_error(IT_ERR_INVALID_ARG, "%s: shapes do not broadcast: dimension %d is %lld vs %lld", op, i,
                            (long long)sa, (long long)sb);
        shape[i] = sa == 1 ? sb : sa;
    }
    *ndim = n;
    return IT_OK;
}

it_tdesc it__broadcast_desc(const it_tensor *t, int ndim, const int64_t *shape) {
    it_tdesc d = it_tensor_desc(t);
    int lead = ndim - t->ndim;
    it_tdesc r = d;
    r.ndim = ndim;
    for (int i = 0; i < ndim; i++) {
        int j = i - lead;
        int64_t sz = j >= 0 ? t->shape[j] : 1;
        r.shape[i] = shape[i];
        r.strides[i] = (j >= 0 && sz == shape[i]) ? t->strides[j] : 0;
    }
    return r;
}

it_tensor *it__empty_like(const it_tensor *t) {
    return it__scope_add(it__tensor_new_owned(it_tensor_device(t), t->dtype, t->ndim, t->shape));
}

it_tensor *it__sum_to(it_tensor *g, const it_tensor *like) {
    if (!g) return NULL;
    if (g->ndim == like->ndim && memcmp(g->shape, like->shape, sizeof(int64_t) * (size_t)g->ndim) == 0) return g;
    /* Reduce (keepdim) every dim where like is 1 (or absent) and g is not. */
    int64_t kshape[IT_MAX_DIMS];
    int lead = g->ndim - like->ndim;
    for (int i = 0; i < g->ndim; i++) {
        int j = i - lead;
        kshape[i] = j >= 0 ? like->shape[j] : 1;
    }
    it_tensor *r = it__scope_add(it__tensor_new_owned(it_tensor_device(g), g->dtype, g->ndim, kshape));
    if (!r) return NULL;
    it_tdesc x = it_tensor_desc(g), o = it_tensor_desc(r);
    it_device dev = it_tensor_device(g);
    if (KCALL(dev, reduce, IT_REDUCE_SUM, &x, &o)) return NULL;
    return it_tensor_view(r, like->ndim, like->shape);
}
