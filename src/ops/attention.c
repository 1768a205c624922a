/* Causal multi-head self-attention:
 *   att = softmax(q k^T / sqrt(hd), causal)   (B, nh, T, T)
 *   y   = att v -> (B, T, nh, hd) -> (B, T, C)
 * On a backend with the fused kernels (it_kernels.attention_fwd / _bwd) it is one node that
 * reads the heads where they lie in qkv (or q, k, v) and writes y and the gradients in
 * place (grouped kv heads included: k and v are read once per group, not expanded).
 * Otherwise, and for what the kernel declines (a dtype, autocast), it is composed of
 * differentiable ops (heads copied out to (B, nh, T, hd), matmul, softmax, matmul, merged
 * back), whose backward comes from theirs. The CPU's fused kernels compute bitwise what the
 * composition computes. Under autocast the composition rounds qkv (or q, k, v) once and
 * copies the heads in the autocast dtype: the bits of rounding each head tensor at its
 * product, with half the bytes copied (attend_low). The models' internal entry points
 * (it__causal_self_attention_low, it__attention_low) also take GPT-2's qkv as its product
 * gave it, already in the autocast dtype, and return y in that dtype for the projection
 * after it, which would only round a widened copy back: the same bits, four casts fewer a
 * layer (two forward, two backward). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops_common.h"

/* ---------------------------------------------------------------- the fused kernels */

/* The (B, H, T, D) view of the heads in t, a (B, T, ...) tensor whose element
 * (b, t, col0 + h * D + d) is head h's (t, d); hs: t's stride between heads' starts. */
it_tdesc it__heads_of(const it_tensor *t, int64_t H, int64_t D, int64_t col0, int64_t hs, int64_t ds) {
    it_tdesc d = it_tensor_desc(t);
    int64_t B = t->shape[0], T = t->shape[1];
    d.data = (char *)d.data + (size_t)(col0 * t->strides[2]) * it_dtype_size(t->dtype);
    d.ndim = 4;
    int64_t shape[4] = {B, H, T, D}, strides[4] = {t->strides[0], hs, t->strides[1], ds};
    for (int i = 0; i < 4; i++) d.shape[i] = shape[i], d.strides[i] = strides[i];
    return d;
}

/* Whether to try the fused kernels on this device for these inputs. IT_FUSED_KERNELS=0 in
 * the environment composes them everywhere (to compare the two, as test_attention does). */
static bool fused_wanted(const it_tensor *x) {
    const char *env = getenv("IT_FUSED_KERNELS");
    if (env && strcmp(env, "0") == 0) return false;
    it_dtype ac;
    /* under autocast the composition runs its products in the autocast dtype (on fp32
     * inputs, or on inputs a product already gave in that dtype) */
    if (it_autocast_enabled(&ac) && (x->dtype == IT_DTYPE_FP32 || x->dtype == ac)) return false;
    return it__kernel_native(it_tensor_device(x), IT_SLOT(attention_fwd)) &&
           it__kernel_native(it_tensor_device(x), IT_SLOT(attention_bwd));
}

/* y (B, T, H * D) from the fused forward on q, k, v (B, H, T|S, D views of src's storage);
 * *att gets the probabilities. NULL with *declined when the backend declined the call (the
 * error is cleared: the caller composes instead). */
static it_tensor *fused_forward(const it_tensor *src, const it_tdesc *q, const it_tdesc *k, const it_tdesc *v,
                                float scale, it_tensor **att, bool *declined) {
    *declined = false;
    int64_t B = q->shape[0], H = q->shape[1], T = q->shape[2], D = q->shape[3], S = k->shape[2];
    it_device dev = it_tensor_device(src);
    it_tensor *y = it__scope_add(it__tensor_new_owned(dev, src->dtype, 3, (int64_t[]){B, T, H * D}));
    *att = it__scope_add(it__tensor_new_owned(dev, src->dtype, 4, (int64_t[]){B, H, T, S}));
    OP_REQUIRE(y && *att);
    it_tdesc yd = it__heads_of(y, H, D, 0, D, 1), ad = it_tensor_desc(*att);
    it_softmax_args args = {scale, true};
    it_status st = KCALL(dev, attention_fwd, &args, q, k, v, &ad, &yd);
    if (st == IT_ERR_UNSUPPORTED) {
        it_error_clear();
        *declined = true;
        return NULL;
    }
    return st ? NULL : y;
}

/* dy (B, T, H * D) -> the heads' gradients, through the fused backward. */
static it_status fused_backward(it_node *n, it_tensor *dy, const it_tdesc *q, const it_tdesc *k, const it_tdesc *v,
                                it_tdesc *dq, it_tdesc *dk, it_tdesc *dv) {
    it_tensor *att = n->saved[0], *dyc = it_tensor_contiguous(dy), *datt = it__empty_like(att);
    if (!dyc || !datt) return it_last_status();
    int64_t H = q->shape[1], D = q->shape[3];
    it_tdesc dyd = it__heads_of(dyc, H, D, 0, D, 1), ad = it_tensor_desc(att), dad = it_tensor_desc(datt);
    it_softmax_args args = {(float)n->f[0], true};
    return KCALL(it_tensor_device(att), attention_bwd, &args, q, k, v, &ad, &dyd, dq, dk, dv, &dad);
}

/* GPT-2's node: qkv (B, T, 3C) in, y (B, T, C) out. */
static it_status qkv_attention_backward(it_node *n, it_tensor *dy) {
    it_tensor *qkv = n->in[0], *dqkv = it__empty_like(qkv);
    if (!dqkv) return it_last_status();
    int64_t H = n->i[0], C = qkv->shape[2] / 3, D = C / H;
    it_tdesc q = it__heads_of(qkv, H, D, 0, D, 1), k = it__heads_of(qkv, H, D, C, D, 1),
             v = it__heads_of(qkv, H, D, 2 * C, D, 1);
    it_tdesc dq = it__heads_of(dqkv, H, D, 0, D, 1), dk = it__heads_of(dqkv, H, D, C, D, 1),
             dv = it__heads_of(dqkv, H, D, 2 * C, D, 1);
    it_status st = fused_backward(n, dy, &q, &k, &v, &dq, &dk, &dv);
    return st ? st : it__accum_grad(qkv, dqkv);
}

/* qkv (B, T, 3C) with unit column stride; NULL with *declined when the fused kernel declined. */
static it_tensor *qkv_attention_fused(it_tensor *qkv, int64_t H, bool *declined) {
    int64_t C = qkv->shape[2] / 3, D = C / H;
    it_tdesc q = it__heads_of(qkv, H, D, 0, D, 1), k = it__heads_of(qkv, H, D, C, D, 1),
             v = it__heads_of(qkv, H, D, 2 * C, D, 1);
    float scale = 1.0f / sqrtf((float)D);
    it_tensor *att = NULL, *y = fused_forward(qkv, &q, &k, &v, scale, &att, declined);
    OP_REQUIRE(y);
    if (it__needs_grad(1, &qkv)) {
        it_node *n = it__node_record("attention", qkv_attention_backward, y, 1, &qkv);
        OP_REQUIRE(n);
        it__node_save(n, att);
        n->f[0] = scale;
        n->i[0] = H;
    }
    return y;
}

/* (B, T, H, D) per query head -> (B, T, Hkv, D): each group of H / Hkv heads summed by the
 * reduce slot over a (B, T, Hkv, H / Hkv, D) view, the reduction the composition's expand
 * runs in its backward (its order depends on the group's size alone), so the bits are the
 * same. */
static it_tensor *group_sum(it_tensor *e, int64_t Hkv) {
    int64_t B = e->shape[0], T = e->shape[1], H = e->shape[2], D = e->shape[3], r = H / Hkv;
    it_device dev = it_tensor_device(e);
    it_tensor *out = it__scope_add(it__tensor_new_owned(dev, e->dtype, 4, (int64_t[]){B, T, Hkv, D}));
    if (!out) return NULL;
    it_tdesc x = it_tensor_desc(e), o = it_tensor_desc(out);
    int64_t xs[5] = {B, T, Hkv, r, D}, os[5] = {B, T, Hkv, 1, D};
    int64_t xst[5] = {T * H * D, H * D, r * D, D, 1}, ost[5] = {T * Hkv * D, Hkv * D, D, D, 1};
    x.ndim = o.ndim = 5;
    for (int i = 0; i < 5; i++) x.shape[i] = xs[i], x.strides[i] = xst[i], o.shape[i] = os[i], o.strides[i] = ost[i];
    return KCALL(dev, reduce, IT_REDUCE_SUM, &x, &o) ? NULL : out;
}

/* LLaMA's node: q (B, T, H, D), k and v (B, T, Hkv, D) in, y (B, T, H * D). */
static it_status qkv3_attention_backward(it_node *n, it_tensor *dy) {
    it_tensor *qt = n->in[0], *kt = n->in[1], *vt = n->in[2];
    int64_t H = qt->shape[2], Hkv = kt->shape[2], D = qt->shape[3];
    /* the kernel's dk and dv are per query head: with grouped kv heads they go to (B, S, H, D)
     * buffers and are summed per group afterwards */
    it_device dev = it_tensor_device(qt);
    int64_t es[4] = {kt->shape[0], kt->shape[1], H, D};
    it_tensor *dqt = it__empty_like(qt);
    it_tensor *dke = Hkv == H ? it__empty_like(kt) : it__scope_add(it__tensor_new_owned(dev, kt->dtype, 4, es));
    it_tensor *dve = Hkv == H ? it__empty_like(vt) : it__scope_add(it__tensor_new_owned(dev, vt->dtype, 4, es));
    if (!dqt || !dke || !dve) return it_last_status();
#define BHTD(t, h) it__heads_of((t), (h), D, 0, (t)->strides[2], (t)->strides[3])
    it_tdesc q = BHTD(qt, H), k = BHTD(kt, Hkv), v = BHTD(vt, Hkv), dq = BHTD(dqt, H), dk = BHTD(dke, H),
             dv = BHTD(dve, H);
#undef BHTD
    it_status st = fused_backward(n, dy, &q, &k, &v, &dq, &dk, &dv);
    if (!st && qt->requires_grad) st = it__accum_grad(qt, dqt);
    if (!st && kt->requires_grad) {
        it_tensor *dkt = Hkv == H ? dke : group_sum(dke, Hkv);
        st = dkt ? it__accum_grad(kt, dkt) : it_last_status();
    }
    if (!st && vt->requires_grad) {
        it_tensor *dvt = Hkv == H ? dve : group_sum(dve, Hkv);
        st = dvt ? it__accum_grad(vt, dvt) : it_last_status();
    }
    return st;
}

/* q (B, nh, T, hd), k, v (B, nh, S, hd) contiguous -> (B, T, nh*hd); the causal mask aligns
 * the last query with the last key (softmax's). */
static it_tensor *attend(it_tensor *q, it_tensor *k, it_tensor *v) {
    OP_REQUIRE(q && k && v);
    int64_t B = q->shape[0], nh = q->shape[1], T = q->shape[2], hd = q->shape[3];
    it_tensor *scores = it_matmul(q, k, false, true); /* (B, nh, T, S) */
    it_tensor *att = it_softmax(scores, 1.0f / sqrtf((float)hd), true);
    it_tensor *y = it_matmul(att, v, false, false); /* (B, nh, T, hd) */
    int back[4] = {0, 2, 1, 3};
    return it_reshape(it_contiguous(it_permute(y, back)), 3, (int64_t[]){B, T, nh * hd});
}

/* The autocast dtype when the composition runs under autocast on x: fp32, or already in it. */
static bool autocast_low(const it_tensor *x, it_dtype *ac) {
    return it_autocast_enabled(ac) && *ac != IT_DTYPE_FP32 && (x->dtype == IT_DTYPE_FP32 || x->dtype == *ac);
}

/* attend() under autocast to ac, on q, k, v already in ac (B, nh, T, hd) contiguous: the two
 * products in ac and the softmax in fp32, as it_matmul's autocast runs them, with the heads'
 * copies around them (the split before, the merge after) in ac, half the bytes of fp32, and
 * one cast each way instead of one per head tensor. Rounding commutes with a copy, so the
 * result and every gradient are bitwise attend()'s on the fp32 heads; no copy here sums
 * (the grouped kv heads' expand, whose backward does, stays fp32: it_attention). y is
 * widened to fp32, or left in ac with `keep`. */
static it_tensor *attend_low(it_tensor *q, it_tensor *k, it_tensor *v, it_dtype ac, bool keep) {
    OP_REQUIRE(q && k && v);
    int64_t B = q->shape[0], nh = q->shape[1], T = q->shape[2], hd = q->shape[3];
    it_autocast_set(false, ac);
    it_tensor *scores = it_matmul(q, k, false, true); /* (B, nh, T, T) in ac */
    it_tensor *att = scores ? it_softmax(it_cast(scores, IT_DTYPE_FP32), 1.0f / sqrtf((float)hd), true) : NULL;
    it_tensor *y = att ? it_matmul(it_cast(att, ac), v, false, false) : NULL; /* (B, nh, T, hd) in ac */
    it_autocast_set(true, ac);
    int back[4] = {0, 2, 1, 3};
    it_tensor *merged = it_reshape(it_contiguous(it_permute(y, back)), 3, (int64_t[]){B, T, nh * hd});
    return keep ? merged : it_cast(merged, IT_DTYPE_FP32);
}

/* GPT-2: qkv (B, T, 3C), rows Q|K|V, one copy splits all three into heads; `keep`: see
 * it__causal_self_attention_low. */
static it_tensor *causal_self_attention(it_tensor *qkv, int n_head, bool keep) {
    OP_REQUIRE(qkv);
    if (qkv->ndim != 3 || n_head < 1 || qkv->shape[2] % (3 * (int64_t)n_head) != 0) {
        it_error(IT_ERR_INVALID_ARG, "attention: qkv must be (B, T, 3C) with C divisible by n_head=%d", n_head);
        return NULL;
    }
    it_dtype ac;
    bool low = autocast_low(qkv, &ac);
    if (it__flash_wanted(qkv) && qkv->strides[2] == 1) {
        bool declined;
        it_tensor *x = low ? it_cast(qkv, ac) : qkv, *y = x ? it__flash_qkv(x, n_head, &declined) : NULL;
        if (y) return low && !keep ? it_cast(y, IT_DTYPE_FP32) : y;
        if (!x || !declined) return NULL;
    }
    if (fused_wanted(qkv) && qkv->strides[2] == 1) {
        bool declined;
        it_tensor *y = qkv_attention_fused(qkv, n_head, &declined);
        if (y || !declined) return y;
    }
    int64_t B = qkv->shape[0], T = qkv->shape[1], C = qkv->shape[2] / 3, hd = C / n_head;
    /* (B, T, 3, nh, hd) -> (3, B, nh, T, hd) */
    int64_t s5[5] = {B, T, 3, n_head, hd};
    int perm[5] = {2, 0, 3, 1, 4};
    it_tensor *heads = it_contiguous(it_permute(it_reshape(low ? it_cast(qkv, ac) : qkv, 5, s5), perm));
    int64_t s4[4] = {B, n_head, T, hd};
    it_tensor *q = it_reshape(it_slice(heads, 0, 0, 1, 1), 4, s4);
    it_tensor *k = it_reshape(it_slice(heads, 0, 1, 2, 1), 4, s4);
    it_tensor *v = it_reshape(it_slice(heads, 0, 2, 3, 1), 4, s4);
    return low ? attend_low(q, k, v, ac, keep) : attend(q, k, v);
}

it_tensor *it_causal_self_attention(it_tensor *qkv, int n_head) { return causal_self_attention(qkv, n_head, false); }

it_tensor *it__causal_self_attention_low(it_tensor *qkv, int n_head) {
    return causal_self_attention(qkv, n_head, it__autocast_keep_low());
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

/* q (B, T, nh, hd), k and v (B, S, nkv, hd), S >= T, query t at key position S - T + t
 * (a KV cache's: S = T is self-attention) -> (B, T, C); `keep`: see it__attention_low. */
static it_tensor *attention(it_tensor *q, it_tensor *k, it_tensor *v, bool keep) {
    OP_REQUIRE(q && k && v);
    if (q->ndim != 4 || k->ndim != 4 || v->ndim != 4 || k->shape[0] != q->shape[0] || k->shape[1] < q->shape[1] ||
        k->shape[3] != q->shape[3] || v->shape[0] != k->shape[0] || v->shape[1] != k->shape[1] ||
        v->shape[2] != k->shape[2] || v->shape[3] != k->shape[3] || k->shape[2] < 1 || q->shape[2] % k->shape[2] != 0) {
        it_error(IT_ERR_INVALID_ARG,
                 "attention: q (B, T, nh, hd), k and v (B, S, nkv, hd) with S >= T and nh divisible by nkv");
        return NULL;
    }
    bool same = q->dtype == k->dtype && q->dtype == v->dtype &&
                it_device_equal(it_tensor_device(k), it_tensor_device(q)) &&
                it_device_equal(it_tensor_device(v), it_tensor_device(q));
    it_dtype lo;
    bool low = autocast_low(q, &lo);
    if (same && it__flash_wanted(q) && q->strides[3] == 1 && k->strides[3] == 1 && v->strides[3] == 1) {
        bool declined;
        it_tensor *qx = low ? it_cast(q, lo) : q, *kx = low ? it_cast(k, lo) : k, *vx = low ? it_cast(v, lo) : v;
        it_tensor *y = qx && kx && vx ? it__flash_qkv3(qx, kx, vx, &declined) : NULL;
        if (y) return low && !keep ? it_cast(y, IT_DTYPE_FP32) : y;
        if (!qx || !kx || !vx || !declined) return NULL;
    }
    if (fused_wanted(q) && same) {
        int64_t H = q->shape[2], Hkv = k->shape[2], D = q->shape[3];
#define BHTD(t, h) it__heads_of((t), (h), D, 0, (t)->strides[2], (t)->strides[3])
        it_tdesc qd = BHTD(q, H), kd = BHTD(k, Hkv), vd = BHTD(v, Hkv);
#undef BHTD
        float scale = 1.0f / sqrtf((float)D);
        bool declined;
        it_tensor *att = NULL, *y = fused_forward(q, &qd, &kd, &vd, scale, &att, &declined);
        if (y) {
            it_tensor *in[3] = {q, k, v};
            if (it__needs_grad(3, in)) {
                it_node *n = it__node_record("attention", qkv3_attention_backward, y, 3, in);
                OP_REQUIRE(n);
                it__node_save(n, att);
                n->f[0] = scale;
            }
            return y;
        }
        if (!declined) return NULL;
    }
    int perm[4] = {0, 2, 1, 3};
    int64_t nh = q->shape[2];
    it_dtype ac;
    if (autocast_low(q, &ac) && k->dtype == IT_DTYPE_FP32 && v->dtype == IT_DTYPE_FP32) {
        /* grouped kv heads are expanded in fp32 (the expand's backward sums the group) and
         * then rounded, as the products' autocast would round them */
        it_tensor *qh = it_contiguous(it_permute(it_cast(q, ac), perm));
        it_tensor *kh = k->shape[2] == nh ? kv_heads(it_cast(k, ac), nh) : it_cast(kv_heads(k, nh), ac);
        it_tensor *vh = v->shape[2] == nh ? kv_heads(it_cast(v, ac), nh) : it_cast(kv_heads(v, nh), ac);
        return attend_low(qh, kh, vh, ac, keep);
    }
    return attend(it_contiguous(it_permute(q, perm)), kv_heads(k, nh), kv_heads(v, nh));
}

it_tensor *it_attention(it_tensor *q, it_tensor *k, it_tensor *v) { return attention(q, k, v, false); }

it_tensor *it__attention_low(it_tensor *q, it_tensor *k, it_tensor *v) {
    return attention(q, k, v, it__autocast_keep_low());
}
