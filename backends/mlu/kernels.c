/* The MLU kernel table over CNNL (docs/backends/mlu.md C2) and, where CNNL has no call that matches
 * backend.h, BANG C kernels (bang/, built only where cncc is found: IT_MLU_HAVE_BANG). Every
 * kernel is asynchronous on its stream's queue, through the CNNL handle bound to that queue.
 * Each states the call it maps to. Scratch comes from the queue's cached device workspace
 * (mlu_workspace): backend.h has no workspace slot yet, so the backend keeps one buffer per
 * queue, grown on demand. rmsnorm, topk and the BANG launchers are in kernels_llm.c.
 *
 * Slots left NULL are served by the core's CPU fallback (`--backend_report` shows them):
 * unary, binary, reduce, cross_entropy_*, sgd/adam, and, in a build without cncc,
 *   softmax_fwd/bwd  cnnlSoftmaxForward/Backward have no input scale and no causal mask in
 *                    the calls seen (mlu_softmax_fwd below serves scale 1, non-causal and
 *                    stays unwired); bang/softmax.mlu serves both with cncc;
 *   rope             no CNNL call takes interleaved cos/sin tables: bang/rope.mlu;
 *   embedding_bwd    cnnlEmbeddingBackward overwrites its output (backend.h accumulates,
 *                    in a fixed order): bang/embedding_bwd.mlu. */
#include <stdlib.h>
#include <string.h>

#include "mlu.h"

/* Integer type of the same width: copies are type-agnostic, and avoids CNNL dtypes
 * (UINT16/32/64) whose support is unconfirmed. */
static int bits_dtype(it_dtype dt) {
    switch (it_dtype_size(dt)) {
    case 1: return MLU_CNNL_DTYPE_INT8;
    case 2: return MLU_CNNL_DTYPE_INT16;
    case 4: return MLU_CNNL_DTYPE_INT32;
    default: return MLU_CNNL_DTYPE_INT64;
    }
}

it_status mlu_desc_make(const char *fn, const char *arg, const mlu_dims *dims, int dtype,
                        mlu_cnnlTensorDescriptor_t *out) {
    it_status st = IT_OK;
    *out = NULL;
    CNNL(mlu.cnnlCreateTensorDescriptor(out), "%s", arg);
    CNNL(mlu.cnnlSetTensorDescriptorEx(*out, MLU_CNNL_LAYOUT_ARRAY, dtype, dims->ndim, dims->dims, dims->strides),
         "%s: %s, ndim=%d, dims[0]=%d (kernel %s)", arg, mlu_cnnl_dtype_name(dtype), dims->ndim, dims->dims[0], fn);
done:
    if (st && *out) {
        mlu.cnnlDestroyTensorDescriptor(*out);
        *out = NULL;
    }
    return st;
}
it_status mlu_desc_of(const char *fn, const char *arg, const it_tdesc *t, int dtype, mlu_cnnlTensorDescriptor_t *out) {
    mlu_dims d;
    it_status st = mlu_dims_from_desc(fn, arg, t, &d);
    return st ? st : mlu_desc_make(fn, arg, &d, dtype, out);
}
static it_status mlu_desc_flat(const char *fn, const char *arg, int64_t n, int64_t stride, int dtype,
                               mlu_cnnlTensorDescriptor_t *out) {
    it_tdesc t;
    memset(&t, 0, sizeof t);
    t.ndim = 1;
    t.shape[0] = n;
    t.strides[0] = stride;
    return mlu_desc_of(fn, arg, &t, dtype, out);
}
void mlu_desc_free(mlu_cnnlTensorDescriptor_t d) {
    if (d) mlu.cnnlDestroyTensorDescriptor(d);
}

/* ---------------------------------------------------------------- copy_strided: cnnlCopy */
it_status mlu_copy_desc(it_stream *s, const it_tdesc *src, const it_tdesc *dst) {
    mlu_cnnlTensorDescriptor_t a = NULL, b = NULL;
    it_status st = mlu_desc_of("copy_strided", "src", src, bits_dtype(src->dtype), &a);
    if (!st) st = mlu_desc_of("copy_strided", "dst", dst, bits_dtype(dst->dtype), &b);
    if (st) goto done;
    CNNL(mlu.cnnlCopy(s->cnnl, a, src->data, b, dst->data), "src=%p, dst=%p, %s", src->data, dst->data,
         it_dtype_name(src->dtype));
done:
    mlu_desc_free(a);
    mlu_desc_free(b);
    return st;
}

static it_status mlu_copy_strided(it_stream *s, const it_tdesc *src, it_tdesc *dst) {
    it_status st = mlu_stream_resolve("copy_strided", s, &s);
    if (st || mlu_desc_numel(dst) == 0) return st;
    if (mlu_desc_contiguous(src) && mlu_desc_contiguous(dst)) { /* cnrtMemcpyAsync D2D */
        size_t n = (size_t)mlu_desc_numel(dst) * it_dtype_size(dst->dtype);
        MLU_CNRT(mlu.cnrtMemcpyAsync(dst->data, src->data, n, s->queue, MLU_cnrtMemcpyDevToDev), "n=%zu", n);
        return IT_OK;
    }
    return mlu_copy_desc(s, src, dst);
}

/* A contiguous view of d's elements at `data`. */
it_tdesc mlu_contiguous_like(const it_tdesc *d, void *data, it_dtype dt) {
    it_tdesc c = *d;
    c.data = data;
    c.dtype = dt;
    int64_t st = 1;
    for (int i = d->ndim - 1; i >= 0; i--) {
        c.strides[i] = st;
        st *= d->shape[i];
    }
    return c;
}

/* ---------------------------------------------------------------- cast: cnnlCastDataType
 * along the plan of host.c (direct, two-step through FLOAT / INT32, LOW / ZEXT byte moves) */
static it_status run_step(it_stream *s, const mlu_cast_step *p, int64_t n, const void *in, void *out) {
    mlu_cnnlTensorDescriptor_t a = NULL, b = NULL;
    it_status st = IT_OK;
    size_t wi = it_dtype_size(p->from), wo = it_dtype_size(p->to);
    char name[48];
    switch (p->kind) {
    case MLU_STEP_REINTERPRET: break;
    case MLU_STEP_CNNL: {
        int value = 0;
        if (!mlu_cnnl_cast_value(p->from, p->to, &value)) {
            st = it_error(IT_ERR_INTERNAL, "mlu cast: the plan names %s, which is not in MLU_CNNL_CAST_TABLE",
                          mlu_cast_enum_name(p->from, p->to, name, sizeof name));
            goto done;
        }
        st = mlu_desc_flat("cast", "src", n, 1, mlu_cnnl_dtype(p->from), &a);
        if (!st) st = mlu_desc_flat("cast", "dst", n, 1, mlu_cnnl_dtype(p->to), &b);
        if (st) goto done;
        CNNL(mlu.cnnlCastDataType(s->cnnl, a, in, value, b, out), "%s, n=%lld",
             mlu_cast_enum_name(p->from, p->to, name, sizeof name), (long long)n);
        break;
    }
    case MLU_STEP_LOW: /* the low wo bytes of each wi-byte element (little-endian) */
        st = mlu_desc_flat("cast", "src", n, (int64_t)(wi / wo), bits_dtype(p->to), &a);
        if (!st) st = mlu_desc_flat("cast", "dst", n, 1, bits_dtype(p->to), &b);
        if (st) goto done;
        CNNL(mlu.cnnlCopy(s->cnnl, a, in, b, out), "low %zu of %zu bytes, n=%lld", wo, wi, (long long)n);
        break;
    case MLU_STEP_ZEXT: /* zero, then the wi-byte values into the low bytes */
        if (mlu.cnrtMemsetAsync(out, 0, (size_t)n * wo, s->queue) != MLU_cnrtSuccess) {
            st = it_error(IT_ERR_BACKEND, "mlu cast: cnrtMemsetAsync(%p, 0, %zu) failed", out, (size_t)n * wo);
            goto done;
        }
        st = mlu_desc_flat("cast", "src", n, 1, bits_dtype(p->from), &a);
        if (!st) st = mlu_desc_flat("cast", "dst", n, (int64_t)(wo / wi), bits_dtype(p->from), &b);
        if (st) goto done;
        CNNL(mlu.cnnlCopy(s->cnnl, a, in, b, out), "zero-extend %zu to %zu bytes, n=%lld", wi, wo, (long long)n);
        break;
    }
done:
    mlu_desc_free(a);
    mlu_desc_free(b);
    return st;
}

static it_status mlu_cast(it_stream *s, const it_tdesc *src, it_tdesc *dst) {
    mlu_cast_plan plan;
    it_status st = mlu_stream_resolve("cast", s, &s);
    if (!st) st = mlu_cast_plan_for(src->dtype, dst->dtype, &plan);
    int64_t n = mlu_desc_numel(dst);
    if (st || n == 0) return st;
    /* A pair no chain of CNNL casts reproduces bit for bit is declined: the CPU fallback
     * serves it exactly (the plan's note says what the chain would get wrong). */
    if (!plan.exact)
        return it_error(IT_ERR_UNSUPPORTED, "mlu cast %s -> %s: %s", it_dtype_name(src->dtype),
                        it_dtype_name(dst->dtype), plan.note);
    int work = 0;
    for (int i = 0; i < plan.nsteps; i++) {
        const mlu_cast_step *p = &plan.steps[i];
        work += p->kind != MLU_STEP_REINTERPRET;
        if (p->kind == MLU_STEP_CNNL && (p->from == IT_DTYPE_BF16 || p->to == IT_DTYPE_BF16) &&
            (st = mlu_need_bf16("cast", s->device)))
            return st;
    }
    if (work == 0) { /* same bytes: a copy */
        it_tdesc d = *dst;
        d.dtype = src->dtype;
        return mlu_copy_strided(s, src, &d);
    }
    bool sc = mlu_desc_contiguous(src), dc = mlu_desc_contiguous(dst);
    size_t need = mlu_cast_workspace_bytes(&plan, n, sc, dc);
    char *ws = NULL;
    if (need && (st = mlu_workspace(s, need, (void **)&ws))) return st;
    /* layout of ws: [gathered src][ping][pong][dst staging] */
    size_t un = (size_t)n, off = 0, widest = 0;
    for (int i = 0; i + 1 < plan.nsteps; i++)
        if (it_dtype_size(plan.steps[i].to) > widest) widest = it_dtype_size(plan.steps[i].to);
    const void *cur = src->data;
    if (!sc) {
        it_tdesc g = mlu_contiguous_like(src, ws, src->dtype);
        if ((st = mlu_copy_desc(s, src, &g))) return st;
        cur = ws;
        off += un * it_dtype_size(src->dtype);
    }
    char *ping = ws + off, *pong = ping + un * widest;
    char *out_final = dc ? (char *)dst->data : ws + (need - un * it_dtype_size(dst->dtype));
    int done_work = 0;
    for (int i = 0; i < plan.nsteps; i++) {
        if (plan.steps[i].kind == MLU_STEP_REINTERPRET) continue;
        bool last = ++done_work == work;
        char *out = last ? out_final : (done_work % 2 ? ping : pong);
        if ((st = run_step(s, &plan.steps[i], n, cur, out))) return st;
        cur = out;
    }
    if (!dc) {
        it_tdesc c = mlu_contiguous_like(dst, out_final, dst->dtype);
        st = mlu_copy_desc(s, &c, dst);
    }
    return st;
}

/* ---------------------------------------------------------------- fill
 * No public code shows a cnnlFill call (docs/backends/mlu.md C2), so: the value is converted
 * on the host by the CPU backend's fill (exact backend.h semantics for all 13 dtypes), uploaded once
 * (cnrtMemcpyAsync H2D, staged), then doubled with cnrtMemcpyAsync D2D (log2 n copies).
 * Strided destinations are filled contiguously in the workspace and scattered by cnnlCopy. */
static it_status mlu_fill(it_stream *s, it_tdesc *dst, it_scalar value) {
    it_status st = mlu_stream_resolve("fill", s, &s);
    int64_t n = mlu_desc_numel(dst);
    if (st || n == 0) return st;
    size_t w = it_dtype_size(dst->dtype);
    unsigned char one[8];
    it_tdesc h;
    memset(&h, 0, sizeof h);
    h.data = one;
    h.dtype = dst->dtype;
    h.ndim = 0;
    if ((st = it_cpu_kernels()->fill(NULL, &h, value))) return st;
    bool dc = mlu_desc_contiguous(dst);
    char *base = dst->data;
    if (!dc && (st = mlu_workspace(s, (size_t)n * w, (void **)&base))) return st;
    if ((st = mlu_memcpy_async(s->device, base, one, w, IT_MEMCPY_H2D, s))) return st;
    for (size_t have = 1, total = (size_t)n; have < total;) {
        size_t k = have < total - have ? have : total - have;
        MLU_CNRT(mlu.cnrtMemcpyAsync(base + have * w, base, k * w, s->queue, MLU_cnrtMemcpyDevToDev), "n=%zu", k * w);
        have += k;
    }
    if (!dc) {
        it_tdesc c = mlu_contiguous_like(dst, base, dst->dtype);
        st = mlu_copy_desc(s, &c, dst);
    }
    return st;
}

/* ---------------------------------------------------------------- gemm: cnnlBatchMatMulBCast_v2
 * with cnnlGetBatchMatMulAlgoHeuristic + workspace; transposes as CNNL_MATMUL_DESC_TRANSA/B,
 * batch stride 0 as a batch dim of 1 (broadcast). Operands whose matrices are not stored
 * contiguously (row- or column-major) are gathered into the workspace first, and a strided c
 * is computed there and scattered.
 *
 * A (batch, rows, cols) operand CNNL can read in place: each matrix row- or column-major and
 * dense, the matrices one after another (or one matrix broadcast, batch stride 0). */
static bool matrix_dense(const it_tdesc *t, bool *transposed) {
    bool batches = t->shape[0] <= 1 || t->strides[0] == 0 || t->strides[0] == t->shape[1] * t->shape[2];
    if (!batches) return false;
    if (t->strides[2] == 1 && (t->strides[1] == t->shape[2] || t->shape[1] <= 1)) return *transposed = false, true;
    if (t->strides[1] == 1 && (t->strides[2] == t->shape[1] || t->shape[2] <= 1)) return *transposed = true, true;
    return false;
}

/* An operand's descriptor: the stored matrix row-major (a column-major one is its transpose,
 * so the transpose flag flips), a dense gathered copy when it is neither; `*ptr` is its data
 * (replaced by gemm_gather for a gathered one). */
static it_status gemm_operand(const char *arg, const it_tdesc *t, bool trans, int dtype, mlu_cnnlTensorDescriptor_t *d,
                              const void **ptr, int *flag) {
    bool tr = false;
    if (!matrix_dense(t, &tr)) tr = false; /* gathered row-major */
    int64_t shape[3] = {t->strides[0] == 0 ? 1 : t->shape[0], tr ? t->shape[2] : t->shape[1],
                        tr ? t->shape[1] : t->shape[2]};
    mlu_dims dims;
    it_status st = mlu_dims_contiguous("gemm", arg, 3, shape, &dims);
    if (!st) st = mlu_desc_make("gemm", arg, &dims, dtype, d);
    *ptr = t->data;
    *flag = (int)(trans != tr);
    return st;
}

/* A dense row-major copy of an operand CNNL cannot read in place, at `at`. */
static it_status gemm_gather(const it_tdesc *t, char *at, it_stream *s, const void **ptr) {
    it_tdesc c = mlu_contiguous_like(t, at, t->dtype);
    it_status st = mlu_copy_desc(s, t, &c);
    *ptr = at;
    return st;
}

/* c, dense (batch, M, N) as CNNL writes it; half and bf16 accumulate on chip in float
 * (cnnl.h: the default on-chip type is c's own; MLU500's bf16 matmul lists float only). */
static it_status gemm_c_desc(const it_tdesc *c, int dtype, mlu_cnnlTensorDescriptor_t *cd) {
    int64_t shape[3] = {c->shape[0], c->shape[1], c->shape[2]};
    mlu_dims dims;
    it_status st = mlu_dims_contiguous("gemm", "c", 3, shape, &dims);
    if (!st) st = mlu_desc_make("gemm", "c", &dims, dtype, cd);
    if (!st && dtype != MLU_CNNL_DTYPE_FLOAT && mlu.cnnlSetTensorDescriptorOnchipDataType) {
        mlu_cnnlStatus_t r = mlu.cnnlSetTensorDescriptorOnchipDataType(*cd, MLU_CNNL_DTYPE_FLOAT);
        if (r != MLU_CNNL_STATUS_SUCCESS)
            st = mlu_cnnl_error(r, "cnnlSetTensorDescriptorOnchipDataType", "%s", "FLOAT");
    }
    return st;
}

static it_status mlu_gemm(it_stream *s, const it_gemm_args *g) {
    it_status st = mlu_stream_resolve("gemm", s, &s);
    if (st) return st;
    if (!mlu.cnnlBatchMatMulBCast_v2 || !mlu.cnnlMatMulDescCreate)
        return it_error(IT_ERR_UNSUPPORTED,
                        "mlu gemm: libcnnl.so lacks cnnlBatchMatMulBCast_v2 / cnnlMatMulDescCreate");
    it_dtype dt = g->c.dtype;
    if (dt != IT_DTYPE_FP32 && dt != IT_DTYPE_FP16 && dt != IT_DTYPE_BF16)
        return it_error(IT_ERR_UNSUPPORTED, "mlu gemm: %s (CNNL matmul: float, half, bfloat16)", it_dtype_name(dt));
    if (dt == IT_DTYPE_BF16 && (st = mlu_need_bf16("gemm", s->device))) return st;
    if (mlu_desc_numel(&g->c) == 0) return IT_OK;
    int dtype = mlu_cnnl_dtype(dt);
    /* Workspace: [gathered a][gathered b][dense c][the matmul's own]. CNNL reads c dense
     * (without CNNL_MATMUL_USE_STRIDE), so a strided c is computed in the workspace. */
    size_t esz = it_dtype_size(dt);
    bool t;
    size_t part[4] = {0, 0, 0, 0}, off[4];
    if (!matrix_dense(&g->a, &t)) part[0] = (size_t)mlu_desc_numel(&g->a) * esz;
    if (!matrix_dense(&g->b, &t)) part[1] = (size_t)mlu_desc_numel(&g->b) * esz;
    bool c_direct = mlu_desc_contiguous(&g->c);
    if (!c_direct) part[2] = (size_t)mlu_desc_numel(&g->c) * esz;
    mlu_cnnlTensorDescriptor_t ad = NULL, bd = NULL, cd = NULL;
    mlu_cnnlMatMulDescriptor_t md = NULL;
    mlu_cnnlMatMulAlgo_t algo = NULL;
    mlu_cnnlMatMulHeuristicResult_t res = NULL;
    char *ws = NULL;
    const void *pa, *pb;
    /* cnnl.h: without CNNL_MATMUL_USE_BETA c is only written, as backend.h asks for beta 0 */
    int ta = 0, tb = 0, returned = 0, use_beta = g->beta != 0.0f, compute_type = MLU_CNNL_DTYPE_FLOAT, allow_tf32 = 0;
    size_t mm_ws_size = 0;
    it_tdesc c = g->c;
    CNNL(mlu.cnnlMatMulDescCreate(&md), "%s", "");
    CNNL(mlu.cnnlSetMatMulDescAttr(md, MLU_CNNL_MATMUL_USE_BETA, &use_beta, sizeof use_beta), "use_beta=%d", use_beta);
    /* cnnl.h: the compute type "must be set"; FLOAT accumulates fp32, fp16 and bf16 inputs alike.
     * TF32 is on by default: off, so fp32 products read every input bit (backend.h's gemm). */
    CNNL(mlu.cnnlSetMatMulDescAttr(md, MLU_CNNL_MATMUL_DESC_COMPUTE_TYPE, &compute_type, sizeof compute_type), "%s",
         "compute_type=CNNL_DTYPE_FLOAT");
    CNNL(mlu.cnnlSetMatMulDescAttr(md, MLU_CNNL_MATMUL_ALLOW_TF32, &allow_tf32, sizeof allow_tf32), "%s",
         "allow_tf32=0");
    CNNL(mlu.cnnlMatMulAlgoCreate(&algo), "%s", "");
    CNNL(mlu.cnnlCreateMatMulHeuristicResult(&res), "%s", "");
    /* Descriptors first (they hold shapes, not addresses), then the heuristic's workspace
     * size, then one workspace for everything. */
    if ((st = gemm_operand("a", &g->a, g->trans_a, dtype, &ad, &pa, &ta))) goto done;
    if ((st = gemm_operand("b", &g->b, g->trans_b, dtype, &bd, &pb, &tb))) goto done;
    if ((st = gemm_c_desc(&g->c, dtype, &cd))) goto done;
    CNNL(mlu.cnnlSetMatMulDescAttr(md, MLU_CNNL_MATMUL_DESC_TRANSA, &ta, sizeof ta), "transa=%d", ta);
    CNNL(mlu.cnnlSetMatMulDescAttr(md, MLU_CNNL_MATMUL_DESC_TRANSB, &tb, sizeof tb), "transb=%d", tb);
    CNNL(mlu.cnnlGetBatchMatMulAlgoHeuristic(s->cnnl, md, ad, bd, cd, NULL, 1, &res, &returned), "requested=%d", 1);
    CNNL(mlu.cnnlGetBatchMatMulHeuristicResult(res, algo, &mm_ws_size), "returned=%d", returned);
    part[3] = mm_ws_size;
    size_t total = mlu_ws_layout(part, 4, off);
    if (total && (st = mlu_workspace(s, total, (void **)&ws))) goto done;
    if (part[0] && (st = gemm_gather(&g->a, ws + off[0], s, &pa))) goto done;
    if (part[1] && (st = gemm_gather(&g->b, ws + off[1], s, &pb))) goto done;
    if (!c_direct) {
        c = mlu_contiguous_like(&g->c, ws + off[2], dt);
        if (use_beta && (st = mlu_copy_desc(s, &g->c, &c))) goto done;
    }
    {
        float alpha = g->alpha, beta = g->beta; /* float for half/bf16/float (torch_mlu addmm) */
        CNNL(mlu.cnnlBatchMatMulBCast_v2(s->cnnl, md, algo, &alpha, ad, pa, bd, pb, &beta, cd, c.data,
                                         mm_ws_size ? ws + off[3] : NULL, mm_ws_size),
             "M=%lld, N=%lld, batch=%lld, transa=%d, transb=%d, ws=%zu", (long long)g->c.shape[1],
             (long long)g->c.shape[2], (long long)g->c.shape[0], ta, tb, mm_ws_size);
    }
    if (!c_direct) st = mlu_copy_desc(s, &c, &g->c);
done:
    if (res) mlu.cnnlDestroyMatMulHeuristicResult(res);
    if (algo) mlu.cnnlMatMulAlgoDestroy(algo);
    if (md) mlu.cnnlMatMulDescDestroy(md);
    mlu_desc_free(ad);
    mlu_desc_free(bd);
    mlu_desc_free(cd);
    return st;
}

/* ---------------------------------------------------------------- softmax: cnnlSoftmaxForward /
 * cnnlSoftmaxBackward, CNNL_SOFTMAX_ACCURATE, MODE_LOW_DIMENSION on the 3-D {1, R, C} view.
 * Scale 1, non-causal only (see the header comment): not in the table yet. */
it_status mlu_softmax_fwd(it_stream *s, const it_softmax_args *args, const it_tdesc *x, it_tdesc *y);
it_status mlu_softmax_fwd(it_stream *s, const it_softmax_args *args, const it_tdesc *x, it_tdesc *y) {
    it_status st = mlu_stream_resolve("softmax_fwd", s, &s);
    if (st) return st;
    if (args->causal || args->scale != 1.0f || !mlu_desc_contiguous(x))
        return it_error(IT_ERR_UNSUPPORTED, "mlu softmax_fwd: CNNL path needs scale 1, no mask, contiguous x");
    int d3[3];
    mlu_cnnlTensorDescriptor_t xd = NULL, yd = NULL;
    if ((st = mlu_softmax_dims("softmax_fwd", x, d3))) return st;
    if (mlu_desc_numel(x) == 0) return IT_OK;
    int64_t shape[3] = {d3[0], d3[1], d3[2]};
    mlu_dims dims;
    if ((st = mlu_dims_contiguous("softmax_fwd", "x", 3, shape, &dims))) return st;
    if ((st = mlu_desc_make("softmax_fwd", "x", &dims, mlu_cnnl_dtype(x->dtype), &xd))) goto done;
    if ((st = mlu_desc_make("softmax_fwd", "y", &dims, mlu_cnnl_dtype(y->dtype), &yd))) goto done;
    CNNL(mlu.cnnlSoftmaxForward(s->cnnl, MLU_CNNL_SOFTMAX_ACCURATE, MLU_CNNL_SOFTMAX_MODE_LOW_DIMENSION, NULL, xd,
                                x->data, NULL, yd, y->data),
         "dims={1,%d,%d}", d3[1], d3[2]);
done:
    mlu_desc_free(xd);
    mlu_desc_free(yd);
    return st;
}

/* True when every non-NULL tensor is dense row-major (CNNL's norm calls read them so). */
static bool all_dense(const it_tdesc *a, const it_tdesc *b, const it_tdesc *c, const it_tdesc *d, const it_tdesc *e,
                      const it_tdesc *f) {
    const it_tdesc *t[6] = {a, b, c, d, e, f};
    for (int i = 0; i < 6; i++)
        if (t[i] && !mlu_desc_contiguous(t[i])) return false;
    return true;
}

/* ---------------------------------------------------------------- layernorm:
 * cnnlGetLayerNormOpWorkspaceSize + cnnlLayerNormForward (axis = last), and
 * cnnlGetLayerNormBackwardWorkspaceSize + cnnlLayerNormBackward_v2. x viewed as (R, C). */
static it_status rows_cols(const char *fn, const it_tdesc *x, mlu_dims *xc, mlu_dims *c, mlu_dims *r) {
    int d3[3];
    it_status st = mlu_softmax_dims(fn, x, d3); /* same flattening: {1, R, C} */
    if (st) return st;
    int64_t rc[2] = {d3[1], d3[2]}, cc[1] = {d3[2]}, rr[1] = {d3[1]};
    st = mlu_dims_contiguous(fn, "x", 2, rc, xc);
    if (!st) st = mlu_dims_contiguous(fn, "w", 1, cc, c);
    if (!st) st = mlu_dims_contiguous(fn, "mean", 1, rr, r);
    return st;
}

static it_status mlu_layernorm_fwd(it_stream *s, const it_tdesc *x, const it_tdesc *w, const it_tdesc *b, float eps,
                                   it_tdesc *y, it_tdesc *mean, it_tdesc *rstd) {
    it_status st = mlu_stream_resolve("layernorm_fwd", s, &s);
    if (st) return st;
    if (!mlu.cnnlLayerNormForward) return it_error(IT_ERR_UNSUPPORTED, "mlu layernorm_fwd: no cnnlLayerNormForward");
    /* cnnl.h: filter and bias may be NULL, and the call reads every tensor dense */
    if (!all_dense(x, w, b, y, mean, rstd) || x->dtype == IT_DTYPE_FP64)
        return it_error(IT_ERR_UNSUPPORTED, "mlu layernorm_fwd: CNNL path needs dense tensors, no fp64");
    if (mlu_desc_numel(x) == 0) return IT_OK;
    mlu_dims xc, c, r;
    mlu_cnnlTensorDescriptor_t xd = NULL, wd = NULL, md = NULL;
    size_t ws_size = 0;
    void *ws = NULL;
    if ((st = rows_cols("layernorm_fwd", x, &xc, &c, &r))) return st;
    if ((st = mlu_desc_make("layernorm_fwd", "x", &xc, mlu_cnnl_dtype(x->dtype), &xd))) goto done;
    if ((st = mlu_desc_make("layernorm_fwd", "w", &c, mlu_cnnl_dtype(w ? w->dtype : x->dtype), &wd))) goto done;
    if ((st = mlu_desc_make("layernorm_fwd", "mean", &r, MLU_CNNL_DTYPE_FLOAT, &md))) goto done;
    CNNL(mlu.cnnlGetLayerNormOpWorkspaceSize(s->cnnl, 1, xd, &ws_size), "axis=%d", 1);
    if (ws_size && (st = mlu_workspace(s, ws_size, &ws))) goto done;
    CNNL(mlu.cnnlLayerNormForward(s->cnnl, xd, x->data, 1, wd, w ? w->data : NULL, b ? b->data : NULL, eps, ws, ws_size,
                                  xd, y->data, md, mean->data, rstd->data),
         "R=%d, C=%d, eps=%g", xc.dims[0], xc.dims[1], (double)eps);
done:
    mlu_desc_free(xd);
    mlu_desc_free(wd);
    mlu_desc_free(md);
    return st;
}

static it_status mlu_layernorm_bwd(it_stream *s, const it_tdesc *dy, const it_tdesc *x, const it_tdesc *w,
                                   const it_tdesc *mean, const it_tdesc *rstd, it_tdesc *dx, it_tdesc *dw,
                                   it_tdesc *db) {
    it_status st = mlu_stream_resolve("layernorm_bwd", s, &s);
    if (st) return st;
    if (!mlu.cnnlLayerNormBackward_v2)
        return it_error(IT_ERR_UNSUPPORTED, "mlu layernorm_bwd: no cnnlLayerNormBackward_v2");
    /* R = 0 must still write dw = db = 0, which the CNNL call is not asked to do: declined */
    if (!db || !all_dense(x, dy, w, mean, rstd, dx) || !all_dense(dw, db, NULL, NULL, NULL, NULL) ||
        x->dtype == IT_DTYPE_FP64 || mlu_desc_numel(x) == 0)
        return it_error(IT_ERR_UNSUPPORTED,
                        "mlu layernorm_bwd: CNNL path needs db, dense tensors, at least one row, no fp64");
    mlu_dims xc, c, r;
    mlu_cnnlTensorDescriptor_t xd = NULL, wd = NULL, md = NULL;
    size_t ws_size = 0;
    void *ws = NULL;
    if ((st = rows_cols("layernorm_bwd", x, &xc, &c, &r))) return st;
    if ((st = mlu_desc_make("layernorm_bwd", "x", &xc, mlu_cnnl_dtype(x->dtype), &xd))) goto done;
    if ((st = mlu_desc_make("layernorm_bwd", "w", &c, mlu_cnnl_dtype(w->dtype), &wd))) goto done;
    if ((st = mlu_desc_make("layernorm_bwd", "mean", &r, MLU_CNNL_DTYPE_FLOAT, &md))) goto done;
    CNNL(mlu.cnnlGetLayerNormBackwardWorkspaceSize(s->cnnl, xd, 1, &ws_size), "axis=%d", 1);
    if (ws_size && (st = mlu_workspace(s, ws_size, &ws))) goto done;
    CNNL(mlu.cnnlLayerNormBackward_v2(s->cnnl, xd, x->data, 1, xd, dy->data, wd, w->data, md, mean->data, rstd->data,
                                      ws, ws_size, xd, dx->data, dw->data, db->data),
         "R=%d, C=%d", xc.dims[0], xc.dims[1]);
done:
    mlu_desc_free(xd);
    mlu_desc_free(wd);
    mlu_desc_free(md);
    return st;
}

/* ---------------------------------------------------------------- embedding: cnnlEmbeddingForward_v2
 * (padding_idx -1: none; max_norm and norm_type NULL). */
static it_status mlu_embedding_fwd(it_stream *s, const it_tdesc *idx, const it_tdesc *weight, it_tdesc *out) {
    it_status st = mlu_stream_resolve("embedding_fwd", s, &s);
    if (st) return st;
    if (!mlu.cnnlEmbeddingForward_v2)
        return it_error(IT_ERR_UNSUPPORTED, "mlu embedding_fwd: no cnnlEmbeddingForward_v2");
    if (mlu_desc_numel(out) == 0) return IT_OK;
    mlu_cnnlTensorDescriptor_t wd = NULL, id = NULL, od = NULL;
    if ((st = mlu_desc_of("embedding_fwd", "weight", weight, mlu_cnnl_dtype(weight->dtype), &wd))) goto done;
    if ((st = mlu_desc_of("embedding_fwd", "idx", idx, mlu_cnnl_dtype(idx->dtype), &id))) goto done;
    if ((st = mlu_desc_of("embedding_fwd", "out", out, mlu_cnnl_dtype(out->dtype), &od))) goto done;
    CNNL(mlu.cnnlEmbeddingForward_v2(s->cnnl, wd, weight->data, id, idx->data, -1, NULL, NULL, od, out->data),
         "N=%lld, V=%lld, C=%lld, idx %s", (long long)idx->shape[0], (long long)weight->shape[0],
         (long long)weight->shape[1], it_dtype_name(idx->dtype));
done:
    mlu_desc_free(wd);
    mlu_desc_free(id);
    mlu_desc_free(od);
    return st;
}

const it_kernels mlu_kernels = {
    .cast = mlu_cast,                 /* cnnlCastDataType along the plan (host.c) */
    .fill = mlu_fill,                 /* host-converted element + cnrtMemcpyAsync doubling */
    .copy_strided = mlu_copy_strided, /* cnnlCopy with strided descriptors */
    .gemm = mlu_gemm,                 /* cnnlBatchMatMulBCast_v2 + heuristic */
    .embedding_fwd = mlu_embedding_fwd,
    .layernorm_fwd = mlu_layernorm_fwd,
    .layernorm_bwd = mlu_layernorm_bwd,
    .rmsnorm_fwd = mlu_rmsnorm_fwd,                 /* cnnlRmsNormForward (kernels_llm.c) */
    .rmsnorm_bwd = mlu_rmsnorm_bwd,                 /* cnnlRmsNormBackward */
    .topk = mlu_topk,                               /* cnnlTopKTensor_v3, lower_index_first */
    .flash_attention_fwd = mlu_flash_attention_fwd, /* declined with the reason: composed */
    .flash_attention_bwd = mlu_flash_attention_bwd,
#ifdef IT_MLU_HAVE_BANG
    .softmax_fwd = mlu_bang_softmax_fwd,             /* bang/softmax.mlu */
    .softmax_bwd = mlu_bang_softmax_bwd,             /* bang/softmax.mlu */
    .rope = mlu_bang_rope,                           /* bang/rope.mlu */
    .embedding_bwd = mlu_bang_embedding_bwd,         /* bang/embedding_bwd.mlu */
    .unary = mlu_bang_unary,                         /* bang/elementwise.mlu (kernels_ew.c) */
    .binary = mlu_bang_binary,                       /* bang/elementwise.mlu */
    .reduce = mlu_bang_reduce,                       /* bang/reduce.mlu */
    .cross_entropy_fwd = mlu_bang_cross_entropy_fwd, /* bang/crossentropy.mlu */
    .cross_entropy_bwd = mlu_bang_cross_entropy_bwd, /* bang/crossentropy.mlu */
    .sgd_step = mlu_bang_sgd_step,                   /* bang/optim.mlu */
    .adam_step = mlu_bang_adam_step,                 /* bang/optim.mlu */
#endif
    /* everything else: NULL, the core's CPU fallback */
};
