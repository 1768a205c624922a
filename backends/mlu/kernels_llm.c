/* The MLU kernels of the LLaMA-3 / Mixtral slots and of the scaled, causal softmax:
 *
 *   rmsnorm_fwd    cnnlGetRmsNormOpWorkspaceSize + cnnlRmsNormForward (axis 1 of x (R, C))
 *   rmsnorm_bwd    cnnlGetRmsNormBackwardWorkspaceSize + cnnlRmsNormBackward
 *   topk           cnnlGetTopKTensorWorkspaceSize + cnnlTopKTensor_v3 (largest, sorted,
 *                  lower_index_first = true: backend.h's tie rule)
 *   flash_attention_fwd/bwd  declined with the reason (host.c mlu_flash_decline): composed
 *   softmax_fwd/bwd, rope, embedding_bwd: the BANG kernels of bang/ (it_bang.h), only when
 *                  cncc built them (IT_MLU_HAVE_BANG); otherwise these slots stay NULL.
 *
 * Signatures of the CNNL calls are those DIOPI impl/camb, OneFlow, MegEngine and Paddle use
 * (mlu_api.h); what the calls do at the edges is TO CONFIRM on hardware and listed in
 * docs/backends/mlu.md. Inputs that are not dense (or that alias an output CNNL would
 * write) are gathered into the queue's workspace first (cnnlCopy), laid out by
 * mlu_ws_layout together with the call's own scratch. */
#include <math.h>
#include <string.h>

#include "mlu.h"
#ifdef IT_MLU_HAVE_BANG
#include "bang/it_bang.h"
#endif

/* An input as CNNL will read it: `t` itself when dense and not aliased by `out`, else a
 * dense copy at ws + off (the caller reserved numel * size bytes there). */
typedef struct staged {
    const it_tdesc *t;
    bool gather;
    size_t bytes;
    it_tdesc dense;
} staged;

static void stage_plan(staged *p, const it_tdesc *t, const void *out1, const void *out2) {
    p->t = t;
    p->gather = !mlu_desc_contiguous(t) || (out1 && t->data == out1) || (out2 && t->data == out2);
    p->bytes = p->gather ? (size_t)mlu_desc_numel(t) * it_dtype_size(t->dtype) : 0;
    p->dense = *t;
}

/* Copies the gathered inputs into ws at their offsets; p[i].dense then describes what the
 * call reads. */
static it_status stage_run(it_stream *s, staged *p, int n, char *ws, const size_t *off) {
    for (int i = 0; i < n; i++) {
        if (!p[i].gather) continue;
        p[i].dense = mlu_contiguous_like(p[i].t, ws + off[i], p[i].t->dtype);
        it_status st = mlu_kernels.copy_strided(s, p[i].t, &p[i].dense);
        if (st) return st;
    }
    return IT_OK;
}

static it_status fill_value(it_stream *s, it_tdesc *t, double v) {
    it_scalar x;
    x.kind = IT_SCALAR_F64;
    x.v.f64 = v;
    return mlu_kernels.fill(s, t, x);
}

static it_status need_dense_out(const char *fn, const char *arg, const it_tdesc *t) {
    if (mlu_desc_contiguous(t)) return IT_OK;
    return it_error(IT_ERR_UNSUPPORTED, "mlu %s: output '%s' is not contiguous (backend.h: outputs are)", fn, arg);
}

/* ---------------------------------------------------------------- rmsnorm
 * x (R, C) -> y (R, C), rstd (R) float32: y = (x * rstd) * w, rstd = 1/sqrt(mean(x^2) + eps).
 * CNNL's order of the two products, and whether rstd is written as (R) or (R, 1), are TO
 * CONFIRM (DIOPI accepts both ranks for its invRms); rounding order is inside the
 * conformance bound. bias NULL (RMSNorm has none). float32 only: DIOPI documents float32 and
 * float16 (bfloat16 on MLU590); float64 (which the CPU backend takes) is refused. */
it_status mlu_rmsnorm_fwd(it_stream *s, const it_tdesc *x, const it_tdesc *w, float eps, it_tdesc *y, it_tdesc *rstd) {
    const char *fn = "rmsnorm_fwd";
    it_status st = mlu_stream_resolve(fn, s, &s);
    if (st) return st;
    if (!mlu.cnnlRmsNormForward || !mlu.cnnlGetRmsNormOpWorkspaceSize)
        return it_error(IT_ERR_UNSUPPORTED, "mlu %s: libcnnl.so lacks cnnlRmsNormForward (CNNL too old?)", fn);
    if (x->dtype != IT_DTYPE_FP32 || w->dtype != IT_DTYPE_FP32 || rstd->dtype != IT_DTYPE_FP32)
        return it_error(IT_ERR_UNSUPPORTED, "mlu %s: dtype %s (the CNNL path takes float32 x, w, rstd)", fn,
                        it_dtype_name(x->dtype));
    if ((st = need_dense_out(fn, "y", y)) || (st = need_dense_out(fn, "rstd", rstd))) return st;
    int d3[3];
    if ((st = mlu_softmax_dims(fn, x, d3))) return st; /* {1, R, C} */
    if (d3[1] == 0) return IT_OK;
    if (d3[2] == 0) return fill_value(s, rstd, (double)NAN); /* mean over no columns: NaN, as cpu */
    int64_t xc[2] = {d3[1], d3[2]}, cc[1] = {d3[2]}, rr[1] = {d3[1]};
    mlu_dims dx, dc, dr;
    mlu_cnnlTensorDescriptor_t xd = NULL, wd = NULL, rd = NULL;
    staged in[2];
    stage_plan(&in[0], x, y->data, rstd->data);
    stage_plan(&in[1], w, y->data, rstd->data);
    size_t ws_size = 0, parts[3], off[3];
    char *ws = NULL;
    if ((st = mlu_dims_contiguous(fn, "x", 2, xc, &dx)) || (st = mlu_dims_contiguous(fn, "w", 1, cc, &dc)) ||
        (st = mlu_dims_contiguous(fn, "rstd", 1, rr, &dr)))
        return st;
    if ((st = mlu_desc_make(fn, "x", &dx, MLU_CNNL_DTYPE_FLOAT, &xd)) ||
        (st = mlu_desc_make(fn, "w", &dc, MLU_CNNL_DTYPE_FLOAT, &wd)) ||
        (st = mlu_desc_make(fn, "rstd", &dr, MLU_CNNL_DTYPE_FLOAT, &rd)))
        goto done;
    CNNL(mlu.cnnlGetRmsNormOpWorkspaceSize(s->cnnl, 1, xd, &ws_size), "axis=%d, R=%d, C=%d", 1, d3[1], d3[2]);
    parts[0] = in[0].bytes, parts[1] = in[1].bytes, parts[2] = ws_size;
    size_t total = mlu_ws_layout(parts, 3, off);
    if (total && (st = mlu_workspace(s, total, (void **)&ws))) goto done;
    if ((st = stage_run(s, in, 2, ws, off))) goto done;
    CNNL(mlu.cnnlRmsNormForward(s->cnnl, 1, xd, in[0].dense.data, wd, in[1].dense.data, NULL, eps,
                                ws_size ? ws + off[2] : NULL, ws_size, xd, y->data, rd, rstd->data),
         "R=%d, C=%d, eps=%g", d3[1], d3[2], (double)eps);
done:
    mlu_desc_free(xd);
    mlu_desc_free(wd);
    mlu_desc_free(rd);
    return st;
}

/* dy, x (R, C), w (C), rstd (R) -> dx (R, C), dw (C) written (cnnlRmsNormBackward writes dw,
 * not accumulates: TO CONFIRM). dx may be dy's or x's memory in backend.h: such an input is
 * gathered first. R = 0 writes dw = 0 (fill), C = 0 does nothing, as the CPU backend. */
it_status mlu_rmsnorm_bwd(it_stream *s, const it_tdesc *dy, const it_tdesc *x, const it_tdesc *w, const it_tdesc *rstd,
                          it_tdesc *dx, it_tdesc *dw) {
    const char *fn = "rmsnorm_bwd";
    it_status st = mlu_stream_resolve(fn, s, &s);
    if (st) return st;
    if (!mlu.cnnlRmsNormBackward || !mlu.cnnlGetRmsNormBackwardWorkspaceSize)
        return it_error(IT_ERR_UNSUPPORTED, "mlu %s: libcnnl.so lacks cnnlRmsNormBackward (CNNL too old?)", fn);
    if (x->dtype != IT_DTYPE_FP32 || dy->dtype != IT_DTYPE_FP32 || w->dtype != IT_DTYPE_FP32 ||
        rstd->dtype != IT_DTYPE_FP32)
        return it_error(IT_ERR_UNSUPPORTED, "mlu %s: dtype %s (the CNNL path takes float32)", fn,
                        it_dtype_name(x->dtype));
    if ((st = need_dense_out(fn, "dx", dx)) || (st = need_dense_out(fn, "dw", dw))) return st;
    int d3[3];
    if ((st = mlu_softmax_dims(fn, x, d3))) return st;
    if (d3[2] == 0) return IT_OK;
    if (d3[1] == 0) return fill_value(s, dw, 0.0);
    int64_t xc[2] = {d3[1], d3[2]}, cc[1] = {d3[2]}, rr[1] = {d3[1]};
    mlu_dims dxc, dc, dr;
    mlu_cnnlTensorDescriptor_t xd = NULL, wd = NULL, rd = NULL;
    staged in[4];
    const it_tdesc *ins[4] = {dy, x, w, rstd};
    for (int i = 0; i < 4; i++) stage_plan(&in[i], ins[i], dx->data, dw->data);
    size_t ws_size = 0, parts[5], off[5];
    char *ws = NULL;
    if ((st = mlu_dims_contiguous(fn, "x", 2, xc, &dxc)) || (st = mlu_dims_contiguous(fn, "w", 1, cc, &dc)) ||
        (st = mlu_dims_contiguous(fn, "rstd", 1, rr, &dr)))
        return st;
    if ((st = mlu_desc_make(fn, "x", &dxc, MLU_CNNL_DTYPE_FLOAT, &xd)) ||
        (st = mlu_desc_make(fn, "w", &dc, MLU_CNNL_DTYPE_FLOAT, &wd)) ||
        (st = mlu_desc_make(fn, "rstd", &dr, MLU_CNNL_DTYPE_FLOAT, &rd)))
        goto done;
    CNNL(mlu.cnnlGetRmsNormBackwardWorkspaceSize(s->cnnl, xd, 1, &ws_size), "axis=%d, R=%d, C=%d", 1, d3[1], d3[2]);
    for (int i = 0; i < 4; i++) parts[i] = in[i].bytes;
    parts[4] = ws_size;
    size_t total = mlu_ws_layout(parts, 5, off);
    if (total && (st = mlu_workspace(s, total, (void **)&ws))) goto done;
    if ((st = stage_run(s, in, 4, ws, off))) goto done;
    CNNL(mlu.cnnlRmsNormBackward(s->cnnl, 1, xd, in[1].dense.data, xd, in[0].dense.data, wd, in[2].dense.data, rd,
                                 in[3].dense.data, ws_size ? ws + off[4] : NULL, ws_size, xd, dx->data, wd, dw->data,
                                 NULL),
         "R=%d, C=%d", d3[1], d3[2]);
done:
    mlu_desc_free(xd);
    mlu_desc_free(wd);
    mlu_desc_free(rd);
    return st;
}

/* ---------------------------------------------------------------- topk
 * x (N, E) -> values (N, k) descending, indices (N, k) int32, via cnnlTopKTensor_v3(largest
 * = true, sorted = true, lower_index_first = true), dim 1. x is always copied into the
 * workspace first: DIOPI (functions/sort.cpp) reports that cnnlTopKTensor_v3 can write its
 * input for some shapes, and backend.h's x is const. NaN ranking above +Inf (torch.topk, the
 * CPU backend) and int32 index output are TO CONFIRM on hardware (it-conformance --slot
 * topk is bitwise). */
it_status mlu_topk(it_stream *s, const it_tdesc *x, int64_t k, it_tdesc *values, it_tdesc *indices) {
    const char *fn = "topk";
    it_status st = mlu_stream_resolve(fn, s, &s);
    if (st) return st;
    if (!mlu.cnnlTopKTensor_v3 || !mlu.cnnlGetTopKTensorWorkspaceSize)
        return it_error(IT_ERR_UNSUPPORTED, "mlu %s: libcnnl.so lacks cnnlTopKTensor_v3 (CNNL too old?)", fn);
    int64_t N, E;
    if ((st = mlu_topk_geometry(x, k, values, indices, &N, &E))) return st;
    if (N == 0) return IT_OK;
    int64_t xs[2] = {N, E}, os[2] = {N, k};
    mlu_dims dxs, dos;
    mlu_cnnlTensorDescriptor_t xd = NULL, vd = NULL, id = NULL;
    size_t ws_size = 0, parts[2], off[2];
    char *ws = NULL;
    if ((st = mlu_dims_contiguous(fn, "x", 2, xs, &dxs)) || (st = mlu_dims_contiguous(fn, "values", 2, os, &dos)))
        return st;
    if ((st = mlu_desc_make(fn, "x", &dxs, MLU_CNNL_DTYPE_FLOAT, &xd)) ||
        (st = mlu_desc_make(fn, "values", &dos, MLU_CNNL_DTYPE_FLOAT, &vd)) ||
        (st = mlu_desc_make(fn, "indices", &dos, MLU_CNNL_DTYPE_INT32, &id)))
        goto done;
    CNNL(mlu.cnnlGetTopKTensorWorkspaceSize(s->cnnl, xd, (int)k, 1, true, vd, id, &ws_size), "N=%lld, E=%lld, k=%lld",
         (long long)N, (long long)E, (long long)k);
    parts[0] = (size_t)(N * E) * sizeof(float), parts[1] = ws_size;
    size_t total = mlu_ws_layout(parts, 2, off);
    if ((st = mlu_workspace(s, total, (void **)&ws))) goto done;
    it_tdesc copy = mlu_contiguous_like(x, ws + off[0], x->dtype);
    if ((st = mlu_kernels.copy_strided(s, x, &copy))) goto done;
    CNNL(mlu.cnnlTopKTensor_v3(s->cnnl, xd, copy.data, (int)k, 1, true, true, true, ws_size ? ws + off[1] : NULL,
                               ws_size, vd, values->data, id, indices->data),
         "N=%lld, E=%lld, k=%lld", (long long)N, (long long)E, (long long)k);
done:
    mlu_desc_free(xd);
    mlu_desc_free(vd);
    mlu_desc_free(id);
    return st;
}

/* Flash attention: declined, every call, with the CNNL limit it meets (host.c); the core then
 * composes attention from gemm and the softmax slots, on the device. */
it_status mlu_flash_attention_fwd(it_stream *s, const it_flash_args *args, const it_tdesc *q, const it_tdesc *k,
                                  const it_tdesc *v, it_tdesc *y, it_tdesc *lse) {
    (void)s, (void)v, (void)y, (void)lse;
    return mlu_flash_decline("flash_attention_fwd", args, q, k);
}

it_status mlu_flash_attention_bwd(it_stream *s, const it_flash_args *args, const it_tdesc *q, const it_tdesc *k,
                                  const it_tdesc *v, const it_tdesc *y, const it_tdesc *dy, const it_tdesc *lse,
                                  it_tdesc *dq, it_tdesc *dk, it_tdesc *dv) {
    (void)s, (void)v, (void)y, (void)dy, (void)lse, (void)dq, (void)dk, (void)dv;
    return mlu_flash_decline("flash_attention_bwd", args, q, k);
}

#ifdef IT_MLU_HAVE_BANG
/* ---------------------------------------------------------------- BANG kernels (bang/) */

static it_status bang_status(const char *fn, int ret, const char *kernel) {
    if (ret == MLU_cnrtSuccess) return IT_OK;
    return mlu_cnrt_error(ret, kernel, "kernel %s", fn);
}

/* softmax: bang/softmax.mlu on dense float32 rows; x (or y, dy) gathered when strided. */
it_status mlu_bang_softmax_fwd(it_stream *s, const it_softmax_args *args, const it_tdesc *x, it_tdesc *y) {
    const char *fn = "softmax_fwd";
    mlu_softmax_geo g;
    it_status st = mlu_stream_resolve(fn, s, &s);
    if (st || (st = mlu_softmax_geometry(fn, args, x, &g)) || (st = need_dense_out(fn, "y", y))) return st;
    if (g.R == 0 || g.S == 0) return IT_OK;
    staged in;
    stage_plan(&in, x, NULL, NULL);
    size_t off = 0;
    char *ws = NULL;
    if (in.gather && ((st = mlu_workspace(s, in.bytes, (void **)&ws)) || (st = stage_run(s, &in, 1, ws, &off))))
        return st;
    int tasks = mlu_bang_tasks(g.R, MLU_BANG_MAX_TASKS);
    return bang_status(
        fn, it_bang_softmax_fwd(s->queue, tasks, in.dense.data, y->data, g.R, g.T, g.S, args->scale, args->causal),
        "it_bang_softmax_fwd");
}

it_status mlu_bang_softmax_bwd(it_stream *s, const it_softmax_args *args, const it_tdesc *y, const it_tdesc *dy,
                               it_tdesc *dx) {
    const char *fn = "softmax_bwd";
    mlu_softmax_geo g;
    it_status st = mlu_stream_resolve(fn, s, &s);
    if (st || (st = mlu_softmax_geometry(fn, args, y, &g)) || (st = need_dense_out(fn, "dx", dx))) return st;
    if (dy->dtype != y->dtype) return it_error(IT_ERR_INVALID_ARG, "mlu %s: dy dtype differs from y's", fn);
    if (g.R == 0 || g.S == 0) return IT_OK;
    staged in[2];
    stage_plan(&in[0], y, NULL, NULL); /* the kernel reads each element before writing it */
    stage_plan(&in[1], dy, NULL, NULL);
    size_t parts[2] = {in[0].bytes, in[1].bytes}, off[2];
    size_t total = mlu_ws_layout(parts, 2, off);
    char *ws = NULL;
    if (total && ((st = mlu_workspace(s, total, (void **)&ws)) || (st = stage_run(s, in, 2, ws, off)))) return st;
    int tasks = mlu_bang_tasks(g.R, MLU_BANG_MAX_TASKS);
    return bang_status(fn,
                       it_bang_softmax_bwd(s->queue, tasks, in[0].dense.data, in[1].dense.data, dx->data, g.R, g.T, g.S,
                                           args->scale, args->causal),
                       "it_bang_softmax_bwd");
}

/* rope: bang/rope.mlu with every stride passed through (no gather). */
it_status mlu_bang_rope(it_stream *s, const it_tdesc *x, const it_tdesc *cos, const it_tdesc *sin, bool inverse,
                        it_tdesc *y) {
    mlu_rope_geo g;
    it_status st = mlu_stream_resolve("rope", s, &s);
    if (st || (st = mlu_rope_geometry(x, cos, sin, y, &g))) return st;
    if (x->dtype == IT_DTYPE_BF16 && (st = mlu_need_bf16("rope", s->device))) return st; /* see bang/rope.mlu */
    int64_t rows = g.B * g.T * g.H;
    if (rows == 0 || g.P == 0) return IT_OK;
    it_bang_rope_args a;
    memset(&a, 0, sizeof a);
    a.B = g.B, a.T = g.T, a.H = g.H, a.P = g.P;
    memcpy(a.sx, g.sx, sizeof a.sx), memcpy(a.sy, g.sy, sizeof a.sy);
    memcpy(a.sc, g.sc, sizeof a.sc), memcpy(a.ss, g.ss, sizeof a.ss);
    a.dtype = x->dtype == IT_DTYPE_FP32 ? 0 : x->dtype == IT_DTYPE_FP16 ? 1 : 2;
    a.inverse = inverse;
    return bang_status(
        "rope",
        it_bang_rope(s->queue, mlu_bang_tasks(rows, MLU_BANG_MAX_TASKS), x->data, cos->data, sin->data, y->data, &a),
        "it_bang_rope");
}

/* embedding_bwd: bang/embedding_bwd.mlu, column blocks of MLU_EMB_BLOCK over the tasks. */
it_status mlu_bang_embedding_bwd(it_stream *s, const it_tdesc *idx, const it_tdesc *dout, it_tdesc *dweight) {
    it_status st = mlu_stream_resolve("embedding_bwd", s, &s);
    if (st || (st = mlu_embedding_bwd_geometry(idx, dout, dweight))) return st;
    int64_t N = dout->shape[0], C = dout->shape[1];
    if (N == 0 || C == 0) return IT_OK;
    int tasks = mlu_bang_tasks(mlu_col_blocks(C, MLU_EMB_BLOCK), MLU_BANG_MAX_TASKS);
    return bang_status("embedding_bwd",
                       it_bang_embedding_bwd(s->queue, tasks, idx->data, idx->dtype == IT_DTYPE_I64, idx->strides[0],
                                             dout->data, dout->strides[0], dout->strides[1], dweight->data,
                                             dweight->strides[0], dweight->strides[1], N, C, dweight->shape[0],
                                             MLU_EMB_BLOCK),
                       "it_bang_embedding_bwd");
}
#endif
