/* Pure host logic of the MLU backend: no driver call, no device memory. Everything here is
 * unit-tested on every build machine (tests/unit/test_mlu_host.c includes this file). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "mlu.h"

/* ---------------------------------------------------------------- dtype map */

int mlu_cnnl_dtype(it_dtype dt) {
    switch (dt) {
    case IT_DTYPE_BOOL: return MLU_CNNL_DTYPE_BOOL;
    case IT_DTYPE_U8: return MLU_CNNL_DTYPE_UINT8;
    case IT_DTYPE_I8: return MLU_CNNL_DTYPE_INT8;
    case IT_DTYPE_U16: return MLU_CNNL_DTYPE_UINT16;
    case IT_DTYPE_I16: return MLU_CNNL_DTYPE_INT16;
    case IT_DTYPE_U32: return MLU_CNNL_DTYPE_UINT32;
    case IT_DTYPE_I32: return MLU_CNNL_DTYPE_INT32;
    case IT_DTYPE_U64: return MLU_CNNL_DTYPE_UINT64;
    case IT_DTYPE_I64: return MLU_CNNL_DTYPE_INT64;
    case IT_DTYPE_BF16: return MLU_CNNL_DTYPE_BFLOAT16;
    case IT_DTYPE_FP16: return MLU_CNNL_DTYPE_HALF;
    case IT_DTYPE_FP32: return MLU_CNNL_DTYPE_FLOAT;
    case IT_DTYPE_FP64: return MLU_CNNL_DTYPE_DOUBLE;
    }
    return MLU_CNNL_DTYPE_INVALID;
}

const char *mlu_cnnl_dtype_name(int c) {
    switch (c) {
    case MLU_CNNL_DTYPE_BOOL: return "CNNL_DTYPE_BOOL";
    case MLU_CNNL_DTYPE_UINT8: return "CNNL_DTYPE_UINT8";
    case MLU_CNNL_DTYPE_INT8: return "CNNL_DTYPE_INT8";
    case MLU_CNNL_DTYPE_UINT16: return "CNNL_DTYPE_UINT16";
    case MLU_CNNL_DTYPE_INT16: return "CNNL_DTYPE_INT16";
    case MLU_CNNL_DTYPE_UINT32: return "CNNL_DTYPE_UINT32";
    case MLU_CNNL_DTYPE_INT32: return "CNNL_DTYPE_INT32";
    case MLU_CNNL_DTYPE_UINT64: return "CNNL_DTYPE_UINT64";
    case MLU_CNNL_DTYPE_INT64: return "CNNL_DTYPE_INT64";
    case MLU_CNNL_DTYPE_BFLOAT16: return "CNNL_DTYPE_BFLOAT16";
    case MLU_CNNL_DTYPE_HALF: return "CNNL_DTYPE_HALF";
    case MLU_CNNL_DTYPE_FLOAT: return "CNNL_DTYPE_FLOAT";
    case MLU_CNNL_DTYPE_DOUBLE: return "CNNL_DTYPE_DOUBLE";
    }
    return "CNNL_DTYPE_INVALID";
}

/* ---------------------------------------------------------------- cast table */

/* The direct CNNL_CAST_<from>_TO_<to> conversions the plans use (mlu_api.h's table, values from
 * cnnl.h). No HALF <-> BFLOAT16 entry exists in cnnl.h. */
bool mlu_cast_direct(it_dtype from, it_dtype to) {
    int value;
    return mlu_cnnl_cast_value(from, to, &value);
}

bool mlu_cnnl_cast_value(it_dtype from, it_dtype to, int *value) {
#define MLU_CAST_ROW(f, t, name, v)                                                                                    \
    if (from == IT_DTYPE_##f && to == IT_DTYPE_##t) return *value = (v), true;
    MLU_CNNL_CAST_TABLE(MLU_CAST_ROW)
#undef MLU_CAST_ROW
    return false;
}

static const char *cast_token(it_dtype t) {
    static const char *const tok[IT_DTYPE_COUNT] = {"BOOL",   "UINT8", "INT8",     "UINT16", "INT16", "UINT32", "INT32",
                                                    "UINT64", "INT64", "BFLOAT16", "HALF",   "FLOAT", "DOUBLE"};
    return it_dtype_valid((int)t) ? tok[t] : "INVALID";
}

const char *mlu_cast_enum_name(it_dtype from, it_dtype to, char *buf, size_t n) {
    snprintf(buf, n, "CNNL_CAST_%s_TO_%s", cast_token(from), cast_token(to));
    return buf;
}

static bool is_int(it_dtype t) { return t != IT_DTYPE_BOOL && !it_dtype_is_float(t); }
static bool is_unsigned_int(it_dtype t) {
    return t == IT_DTYPE_U8 || t == IT_DTYPE_U16 || t == IT_DTYPE_U32 || t == IT_DTYPE_U64;
}
static it_dtype signed_of_width(size_t w) {
    return w == 1 ? IT_DTYPE_I8 : w == 2 ? IT_DTYPE_I16 : w == 4 ? IT_DTYPE_I32 : IT_DTYPE_I64;
}
static it_dtype unsigned_of_width(size_t w) {
    return w == 1 ? IT_DTYPE_U8 : w == 2 ? IT_DTYPE_U16 : w == 4 ? IT_DTYPE_U32 : IT_DTYPE_U64;
}

typedef struct plan_builder {
    mlu_cast_plan *p;
    it_dtype cur;
} plan_builder;

static void step(plan_builder *b, mlu_step_kind k, it_dtype to) {
    if (b->cur == to && k != MLU_STEP_REINTERPRET) return;
    if (b->p->nsteps < MLU_CAST_MAX_STEPS) {
        mlu_cast_step *s = &b->p->steps[b->p->nsteps++];
        s->kind = k;
        s->from = b->cur;
        s->to = to;
    } else {
        b->p->nsteps = MLU_CAST_MAX_STEPS + 1; /* overflow: reported by the caller */
    }
    b->cur = to;
}
static void cnnl(plan_builder *b, it_dtype to) { step(b, MLU_STEP_CNNL, to); }
static void reinterpret(plan_builder *b, it_dtype to) {
    if (b->cur != to) step(b, MLU_STEP_REINTERPRET, to);
}
static void inexact(plan_builder *b, const char *note) {
    if (b->p->exact) {
        b->p->exact = false;
        b->p->note = note;
    }
}

/* Integer -> integer, two's complement wrap (backend.h): narrowing keeps the low bytes,
 * widening sign- or zero-extends by the source's signedness. */
static void int_to_int(plan_builder *b, it_dtype dst) {
    size_t ws = it_dtype_size(b->cur), wd = it_dtype_size(dst);
    if (ws == wd) {
        reinterpret(b, dst);
    } else if (wd < ws) {
        step(b, MLU_STEP_LOW, unsigned_of_width(wd) == dst ? dst : signed_of_width(wd));
        reinterpret(b, dst);
    } else if (is_unsigned_int(b->cur)) {
        step(b, MLU_STEP_ZEXT, unsigned_of_width(wd));
        reinterpret(b, dst);
    } else {
        /* sign extension through CNNL's widening casts I8->I16, I8/I16->I32, I32->I64 */
        it_dtype target = signed_of_width(wd);
        if (b->cur == IT_DTYPE_I8 && target == IT_DTYPE_I16)
            cnnl(b, IT_DTYPE_I16);
        else {
            cnnl(b, IT_DTYPE_I32);
            if (target == IT_DTYPE_I64) cnnl(b, IT_DTYPE_I64);
        }
        reinterpret(b, dst);
    }
}

/* Any integer -> a signed type CNNL can cast to float with every value kept: I8/I16/U8/I32
 * as they are, U16 -> I32 (zero-extended), U32 -> I64 (zero-extended), U64 -> I64 (values
 * >= 2^63 wrap: inexact), I64 stays. */
static void int_to_castable(plan_builder *b) {
    switch (b->cur) {
    case IT_DTYPE_U16: step(b, MLU_STEP_ZEXT, IT_DTYPE_U32), reinterpret(b, IT_DTYPE_I32); break;
    case IT_DTYPE_U32: step(b, MLU_STEP_ZEXT, IT_DTYPE_U64), reinterpret(b, IT_DTYPE_I64); break;
    case IT_DTYPE_U64:
        reinterpret(b, IT_DTYPE_I64);
        inexact(b, "uint64 values >= 2^63 are cast as int64 (no unsigned 64-bit CNNL cast seen)");
        break;
    default: break;
    }
}

it_status mlu_cast_plan_for(it_dtype src, it_dtype dst, mlu_cast_plan *plan) {
    if (!it_dtype_valid((int)src) || !it_dtype_valid((int)dst))
        return it_error(IT_ERR_INVALID_ARG, "mlu cast plan: invalid dtype pair (%d, %d)", (int)src, (int)dst);
    memset(plan, 0, sizeof *plan);
    plan->exact = true;
    plan_builder b = {plan, src};
    if (src == dst) {
        step(&b, MLU_STEP_REINTERPRET, dst); /* a plain copy */
    } else if (is_int(src) && is_int(dst)) {
        int_to_int(&b, dst);
    } else if (src == IT_DTYPE_BOOL) {
        if (it_dtype_is_float(dst)) {
            if (dst == IT_DTYPE_FP64) cnnl(&b, IT_DTYPE_FP32);
            cnnl(&b, dst);
        } else {
            cnnl(&b, IT_DTYPE_I32); /* 0 / 1 */
            int_to_int(&b, dst);
        }
    } else if (dst == IT_DTYPE_BOOL) {
        /* x != 0: keep "nonzero" through every step */
        switch (src) {
        case IT_DTYPE_FP64:
            cnnl(&b, IT_DTYPE_FP32);
            inexact(&b, "float64 -> bool goes through float32: |x| < 2^-150 becomes false");
            break;
        case IT_DTYPE_I8:
        case IT_DTYPE_I16:
        case IT_DTYPE_U8: cnnl(&b, IT_DTYPE_I32); break;
        case IT_DTYPE_U16: reinterpret(&b, IT_DTYPE_I16), cnnl(&b, IT_DTYPE_I32); break;
        case IT_DTYPE_U32: reinterpret(&b, IT_DTYPE_I32); break;
        case IT_DTYPE_U64: reinterpret(&b, IT_DTYPE_I64), cnnl(&b, IT_DTYPE_FP32); break;
        case IT_DTYPE_I64: cnnl(&b, IT_DTYPE_FP32); break; /* nonzero int64 -> nonzero float */
        default: break;                                    /* FP32, FP16, BF16, I32: direct */
        }
        cnnl(&b, IT_DTYPE_BOOL);
    } else if (it_dtype_is_float(src) && it_dtype_is_float(dst)) {
        if (!mlu_cast_direct(src, dst)) {
            cnnl(&b, IT_DTYPE_FP32); /* HALF <-> BFLOAT16 and anything with DOUBLE */
            if (src == IT_DTYPE_FP64) inexact(&b, "float64 -> float16/bfloat16 rounds twice (through float32)");
        }
        cnnl(&b, dst);
    } else if (it_dtype_is_float(src)) {
        /* float -> integer: truncate, saturate, NaN -> 0 (CNNL's own rules: to confirm) */
        if (src == IT_DTYPE_BF16) cnnl(&b, IT_DTYPE_FP32);
        if (src == IT_DTYPE_FP64) {
            cnnl(&b, IT_DTYPE_FP32);
            inexact(&b, "float64 -> integer goes through float32 (24-bit mantissa)");
        }
        switch (dst) {
        case IT_DTYPE_U16:
            cnnl(&b, IT_DTYPE_I32), step(&b, MLU_STEP_LOW, IT_DTYPE_U16);
            inexact(&b, "float -> uint16 outside [0, 65535] wraps instead of saturating");
            break;
        case IT_DTYPE_U32:
            cnnl(&b, IT_DTYPE_I64), step(&b, MLU_STEP_LOW, IT_DTYPE_U32);
            inexact(&b, "float -> uint32 outside [0, 2^32) wraps instead of saturating");
            break;
        case IT_DTYPE_U64:
            cnnl(&b, IT_DTYPE_I64), reinterpret(&b, IT_DTYPE_U64);
            inexact(&b, "float -> uint64: negative values wrap, values >= 2^63 saturate at 2^63-1");
            break;
        default: cnnl(&b, dst); break; /* I8, I16, I32, I64, U8: direct from FLOAT / HALF */
        }
    } else {
        /* integer -> float: round once */
        int_to_castable(&b);
        it_dtype via = b.cur;
        if ((src == IT_DTYPE_I32 && dst == IT_DTYPE_FP32) || dst == IT_DTYPE_FP64) {
            /* CNNL_CAST_INT32_TO_FLOAT rounds toward zero (cnnl.h, cnnlCastDataType_t), backend.h
             * to nearest even: widen to int64 and double (both exact, INT64_TO_DOUBLE rounds to
             * nearest even) and round once to float. The same road gives float64 exactly. */
            if (via != IT_DTYPE_I64) cnnl(&b, IT_DTYPE_I32), cnnl(&b, IT_DTYPE_I64);
            cnnl(&b, IT_DTYPE_FP64);
            if (dst == IT_DTYPE_FP32) cnnl(&b, IT_DTYPE_FP32);
        } else if (mlu_cast_direct(via, dst)) {
            cnnl(&b, dst);
        } else {
            if (!mlu_cast_direct(via, IT_DTYPE_FP32)) cnnl(&b, IT_DTYPE_I32); /* not reached */
            cnnl(&b, IT_DTYPE_FP32);
            bool small = via == IT_DTYPE_I8 || via == IT_DTYPE_I16 || via == IT_DTYPE_U8 ||
                         (via == IT_DTYPE_I32 && src == IT_DTYPE_U16);
            if (!small) inexact(&b, "integer -> bfloat16 through float32 rounds twice above 2^24");
            cnnl(&b, dst);
        }
    }
    if (plan->nsteps > MLU_CAST_MAX_STEPS || b.cur != dst)
        return it_error(IT_ERR_INTERNAL, "mlu cast plan %s -> %s: no chain of at most %d steps", it_dtype_name(src),
                        it_dtype_name(dst), MLU_CAST_MAX_STEPS);
    return IT_OK;
}

size_t mlu_cast_workspace_bytes(const mlu_cast_plan *plan, int64_t n, bool src_contig, bool dst_contig) {
    if (n <= 0) return 0;
    size_t bytes = 0, un = (size_t)n;
    if (!src_contig) bytes += un * it_dtype_size(plan->steps[0].from);
    /* intermediates: ping-pong between two buffers sized for the widest intermediate type */
    size_t widest = 0;
    int work = 0;
    for (int i = 0; i < plan->nsteps; i++)
        if (plan->steps[i].kind != MLU_STEP_REINTERPRET) work++;
    for (int i = 0; i + 1 < plan->nsteps; i++) {
        size_t w = it_dtype_size(plan->steps[i].to);
        if (w > widest) widest = w;
    }
    if (work > 1) bytes += (work > 2 ? 2 : 1) * un * widest;
    if (!dst_contig) bytes += un * it_dtype_size(plan->steps[plan->nsteps - 1].to);
    return bytes;
}

/* ---------------------------------------------------------------- descriptors */

int64_t mlu_desc_numel(const it_tdesc *d) {
    int64_t n = 1;
    for (int i = 0; i < d->ndim; i++) n *= d->shape[i];
    return n;
}

bool mlu_desc_contiguous(const it_tdesc *d) {
    int64_t expect = 1;
    for (int i = d->ndim - 1; i >= 0; i--) {
        if (d->shape[i] != 1 && d->strides[i] != expect) return false;
        expect *= d->shape[i];
    }
    return true;
}

static it_status narrow(const char *fn, const char *arg, const char *what, int i, int64_t v, int *out) {
    if (v < 0 || v > INT32_MAX)
        return it_error(IT_ERR_UNSUPPORTED,
                        "mlu %s: %s %d of '%s' is %lld, outside int32 (cnnlSetTensorDescriptorEx takes int dims)", fn,
                        what, i, arg, (long long)v);
    *out = (int)v;
    return IT_OK;
}

it_status mlu_dims_from_desc(const char *fn, const char *arg, const it_tdesc *d, mlu_dims *out) {
    if (d->ndim < 0 || d->ndim > IT_MAX_DIMS)
        return it_error(IT_ERR_INVALID_ARG, "mlu %s: '%s' has ndim %d", fn, arg, d->ndim);
    memset(out, 0, sizeof *out);
    if (d->ndim == 0) {
        out->ndim = 1;
        out->dims[0] = 1;
        out->strides[0] = 1;
        return IT_OK;
    }
    out->ndim = d->ndim;
    for (int i = 0; i < d->ndim; i++) {
        it_status st = narrow(fn, arg, "dim", i, d->shape[i], &out->dims[i]);
        if (!st) st = narrow(fn, arg, "stride", i, d->strides[i], &out->strides[i]);
        if (st) return st;
    }
    return IT_OK;
}

it_status mlu_dims_contiguous(const char *fn, const char *arg, int ndim, const int64_t *shape, mlu_dims *out) {
    it_tdesc d;
    memset(&d, 0, sizeof d);
    d.ndim = ndim;
    int64_t s = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        d.shape[i] = shape[i];
        d.strides[i] = s;
        s *= shape[i] > 0 ? shape[i] : 1;
    }
    return mlu_dims_from_desc(fn, arg, &d, out);
}

it_status mlu_softmax_dims(const char *fn, const it_tdesc *x, int dims3[3]) {
    int64_t c = x->ndim > 0 ? x->shape[x->ndim - 1] : 1, r = 1;
    for (int i = 0; i + 1 < x->ndim; i++) r *= x->shape[i];
    dims3[0] = 1;
    it_status st = narrow(fn, "x", "rows (product of leading dims)", x->ndim - 1, r, &dims3[1]);
    if (!st) st = narrow(fn, "x", "dim", x->ndim - 1, c, &dims3[2]);
    return st;
}

/* ---------------------------------------------------------------- softmax, rope, topk,
 * embedding_bwd planning */

it_status mlu_softmax_geometry(const char *fn, const it_softmax_args *args, const it_tdesc *x, mlu_softmax_geo *g) {
    if (!args) return it_error(IT_ERR_INVALID_ARG, "mlu %s: args is NULL", fn);
    if (x->ndim < 1 || x->ndim > IT_MAX_DIMS)
        return it_error(IT_ERR_INVALID_ARG, "mlu %s: x has ndim %d (softmax needs >= 1)", fn, x->ndim);
    if (x->dtype != IT_DTYPE_FP32)
        return it_error(IT_ERR_UNSUPPORTED, "mlu %s: dtype %s (the MLU softmax kernel takes float32)", fn,
                        it_dtype_name(x->dtype));
    g->S = x->shape[x->ndim - 1];
    g->T = x->ndim >= 2 ? x->shape[x->ndim - 2] : 1;
    g->R = 1;
    for (int i = 0; i + 1 < x->ndim; i++) g->R *= x->shape[i];
    if (args->causal && g->S < g->T && g->R > 0)
        return it_error(IT_ERR_INVALID_ARG, "mlu %s: causal mask needs cols >= rows, got rows %lld, cols %lld", fn,
                        (long long)g->T, (long long)g->S);
    return IT_OK;
}

int64_t mlu_softmax_valid_cols(const mlu_softmax_geo *g, bool causal, int64_t r) {
    return causal ? (r % g->T) + (g->S - g->T) + 1 : g->S;
}

static bool is_rope_dtype(it_dtype dt) { return dt == IT_DTYPE_FP32 || dt == IT_DTYPE_FP16 || dt == IT_DTYPE_BF16; }

/* |stride| * element bytes fits in int (the strided __memcpy takes int byte strides). */
static it_status byte_stride(const char *fn, const char *arg, int d, int64_t stride, it_dtype dt) {
    if (stride < 0 || stride > INT32_MAX / (int64_t)it_dtype_size(dt))
        return it_error(IT_ERR_UNSUPPORTED, "mlu %s: stride %d of '%s' is %lld elements, beyond int32 bytes", fn, d,
                        arg, (long long)stride);
    return IT_OK;
}

it_status mlu_rope_geometry(const it_tdesc *x, const it_tdesc *cos, const it_tdesc *sin, const it_tdesc *y,
                            mlu_rope_geo *g) {
    const char *fn = "rope";
    if (x->ndim != 4 || y->ndim != 4 || cos->ndim != 2 || sin->ndim != 2)
        return it_error(IT_ERR_INVALID_ARG, "mlu rope: x, y must be 4-D and cos, sin 2-D (got %d, %d, %d, %d)", x->ndim,
                        y->ndim, cos->ndim, sin->ndim);
    if (!is_rope_dtype(x->dtype))
        return it_error(IT_ERR_UNSUPPORTED, "mlu rope: dtype %s (the BANG kernel takes float32, float16, bfloat16)",
                        it_dtype_name(x->dtype));
    if (y->dtype != x->dtype || cos->dtype != x->dtype || sin->dtype != x->dtype)
        return it_error(IT_ERR_INVALID_ARG, "mlu rope: y, cos, sin must have x's dtype %s", it_dtype_name(x->dtype));
    if (x->shape[3] % 2 != 0)
        return it_error(IT_ERR_INVALID_ARG, "mlu rope: head dim D = x.shape[3] = %lld must be even",
                        (long long)x->shape[3]);
    if (x->shape[3] > MLU_ROPE_MAX_D)
        return it_error(IT_ERR_UNSUPPORTED, "mlu rope: head dim D = %lld above the BANG kernel's %d",
                        (long long)x->shape[3], MLU_ROPE_MAX_D);
    for (int d = 0; d < 4; d++)
        if (y->shape[d] != x->shape[d])
            return it_error(IT_ERR_INVALID_ARG, "mlu rope: y.shape[%d] = %lld, x.shape[%d] = %lld", d,
                            (long long)y->shape[d], d, (long long)x->shape[d]);
    const it_tdesc *tab[2] = {cos, sin};
    for (int i = 0; i < 2; i++)
        if (tab[i]->shape[0] != x->shape[1] || tab[i]->shape[1] != x->shape[3] / 2)
            return it_error(IT_ERR_INVALID_ARG, "mlu rope: %s must be (T, D/2) = (%lld, %lld), got (%lld, %lld)",
                            i ? "sin" : "cos", (long long)x->shape[1], (long long)(x->shape[3] / 2),
                            (long long)tab[i]->shape[0], (long long)tab[i]->shape[1]);
    g->B = x->shape[0], g->T = x->shape[1], g->H = x->shape[2], g->P = x->shape[3] / 2;
    for (int d = 0; d < 4; d++) {
        g->sx[d] = x->strides[d], g->sy[d] = y->strides[d];
        it_status st = byte_stride(fn, "x", d, x->strides[d], x->dtype);
        if (!st) st = byte_stride(fn, "y", d, y->strides[d], y->dtype);
        if (st) return st;
    }
    for (int d = 0; d < 2; d++) {
        g->sc[d] = cos->strides[d], g->ss[d] = sin->strides[d];
        it_status st = byte_stride(fn, "cos", d, cos->strides[d], cos->dtype);
        if (!st) st = byte_stride(fn, "sin", d, sin->strides[d], sin->dtype);
        if (st) return st;
    }
    return IT_OK;
}

it_status mlu_topk_geometry(const it_tdesc *x, int64_t k, const it_tdesc *values, const it_tdesc *indices, int64_t *N,
                            int64_t *E) {
    if (x->ndim < 1 || x->ndim > IT_MAX_DIMS)
        return it_error(IT_ERR_INVALID_ARG, "mlu topk: x has ndim %d (topk needs >= 1)", x->ndim);
    if (x->dtype != IT_DTYPE_FP32)
        return it_error(IT_ERR_UNSUPPORTED, "mlu topk: dtype %s (the CNNL path takes float32)",
                        it_dtype_name(x->dtype));
    *E = x->shape[x->ndim - 1];
    *N = 1;
    for (int i = 0; i + 1 < x->ndim; i++) *N *= x->shape[i];
    if (k < 1 || k > *E)
        return it_error(IT_ERR_INVALID_ARG, "mlu topk: k = %lld outside [1, E = %lld]", (long long)k, (long long)*E);
    if (*E > INT32_MAX || *N > INT32_MAX)
        return it_error(IT_ERR_UNSUPPORTED, "mlu topk: N = %lld, E = %lld beyond int32 (CNNL descriptors)",
                        (long long)*N, (long long)*E);
    const it_tdesc *out[2] = {values, indices};
    for (int i = 0; i < 2; i++) {
        const char *name = i ? "indices" : "values";
        it_dtype want = i ? IT_DTYPE_I32 : x->dtype;
        if (out[i]->ndim != x->ndim)
            return it_error(IT_ERR_INVALID_ARG, "mlu topk: %s.ndim %d != x.ndim %d", name, out[i]->ndim, x->ndim);
        for (int d = 0; d < x->ndim; d++) {
            int64_t w = d == x->ndim - 1 ? k : x->shape[d];
            if (out[i]->shape[d] != w)
                return it_error(IT_ERR_INVALID_ARG, "mlu topk: %s.shape[%d] = %lld, expected %lld", name, d,
                                (long long)out[i]->shape[d], (long long)w);
        }
        if (out[i]->dtype != want)
            return it_error(IT_ERR_INVALID_ARG, "mlu topk: %s dtype %s, expected %s", name,
                            it_dtype_name(out[i]->dtype), it_dtype_name(want));
        if (!mlu_desc_contiguous(out[i]))
            return it_error(IT_ERR_UNSUPPORTED, "mlu topk: %s is not contiguous (cnnlTopKTensor_v3 writes dense)",
                            name);
    }
    return IT_OK;
}

it_status mlu_embedding_bwd_geometry(const it_tdesc *idx, const it_tdesc *dout, const it_tdesc *dweight) {
    const char *fn = "embedding_bwd";
    if (idx->ndim != 1 || dout->ndim != 2 || dweight->ndim != 2)
        return it_error(IT_ERR_INVALID_ARG, "mlu embedding_bwd: idx 1-D, dout and dweight 2-D (got %d, %d, %d)",
                        idx->ndim, dout->ndim, dweight->ndim);
    if (idx->dtype != IT_DTYPE_I32 && idx->dtype != IT_DTYPE_I64)
        return it_error(IT_ERR_INVALID_ARG, "mlu embedding_bwd: idx dtype %s is not int32 or int64",
                        it_dtype_name(idx->dtype));
    if (dweight->dtype != IT_DTYPE_FP32 || dout->dtype != IT_DTYPE_FP32)
        return it_error(IT_ERR_UNSUPPORTED, "mlu embedding_bwd: dtype %s (the BANG kernel takes float32)",
                        it_dtype_name(dweight->dtype));
    if (dout->shape[0] != idx->shape[0] || dout->shape[1] != dweight->shape[1])
        return it_error(IT_ERR_INVALID_ARG, "mlu embedding_bwd: dout is (%lld, %lld), expected (%lld, %lld)",
                        (long long)dout->shape[0], (long long)dout->shape[1], (long long)idx->shape[0],
                        (long long)dweight->shape[1]);
    it_status st = byte_stride(fn, "dout", 1, dout->strides[1], dout->dtype);
    if (!st) st = byte_stride(fn, "dweight", 1, dweight->strides[1], dweight->dtype);
    return st;
}

/* Flash attention on the MLU: every call is declined (IT_ERR_UNSUPPORTED, nothing written),
 * and the core composes attention from the slots above on the device. The reason names the
 * first limit of cnnlFlashAttentionForward_v2 / cnnlFlashAttentionBackward_v2 (cnnl_extra.h)
 * the call meets: half or bfloat16 only, head_size in [1, 512], qk_scale in (0, 1], causal
 * masks aligned top-left (query offset 0) or bottom-right (offset S - T) only. A call inside
 * all of them is declined too, saying why: the mapping (packed or B_HN_S_HS layouts,
 * softmax_lse as [head_num_q, total_q], int32 seqlens) has not been run on a device, and the
 * stand-in has no model of the call to run it against (docs/backends/mlu.md). */
it_status mlu_flash_decline(const char *fn, const it_flash_args *a, const it_tdesc *q, const it_tdesc *k) {
    int64_t T = q->shape[2], S = k->shape[2], D = q->shape[3];
    const char *why = "attention composes on the device";
    const char *call = strstr(fn, "bwd") ? "cnnlFlashAttentionBackward_v2" : "cnnlFlashAttentionForward_v2";
    if (q->dtype != IT_DTYPE_BF16 && q->dtype != IT_DTYPE_FP16)
        return it_error(IT_ERR_UNSUPPORTED, "mlu %s: dtype %s: %s takes half and bfloat16 only (%s)", fn,
                        it_dtype_name(q->dtype), call, why);
    if (D < 1 || D > 512)
        return it_error(IT_ERR_UNSUPPORTED, "mlu %s: head size %lld outside %s's [1, 512] (%s)", fn, (long long)D, call,
                        why);
    if (!(a->scale > 0.0f && a->scale <= 1.0f))
        return it_error(IT_ERR_UNSUPPORTED, "mlu %s: scale %g outside %s's qk_scale (0, 1] (%s)", fn, (double)a->scale,
                        call, why);
    if (a->causal && a->q_offset != 0 && a->q_offset != S - T)
        return it_error(IT_ERR_UNSUPPORTED,
                        "mlu %s: query offset %lld with T = %lld, S = %lld: CNNL's causal masks "
                        "align top-left (offset 0) or bottom-right (offset S - T) only (%s)",
                        fn, (long long)a->q_offset, (long long)T, (long long)S, why);
    return it_error(IT_ERR_UNSUPPORTED,
                    "mlu %s: %s is not wired: its mapping (softmax_lse [head_num_q, total_q], "
                    "int32 seqlens) has not run on a device (%s)",
                    fn, call, why);
}

int64_t mlu_col_blocks(int64_t cols, int64_t block) { return cols <= 0 ? 0 : (cols + block - 1) / block; }

int mlu_bang_tasks(int64_t items, int cap) {
    if (items < 1) return 1;
    return items < cap ? (int)items : cap;
}

size_t mlu_ws_layout(const size_t *bytes, int n, size_t *offsets) {
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        if (bytes[i]) total = (total + MLU_WS_PART_ALIGN - 1) / MLU_WS_PART_ALIGN * MLU_WS_PART_ALIGN;
        offsets[i] = total;
        total += bytes[i];
    }
    return total;
}

/* ---------------------------------------------------------------- workspace, errors */

size_t mlu_workspace_grow(size_t current, size_t need) {
    if (need <= current) return current;
    size_t n = need > 2 * current ? need : 2 * current;
    return (n + MLU_WORKSPACE_ALIGN - 1) / MLU_WORKSPACE_ALIGN * MLU_WORKSPACE_ALIGN;
}

int mlu_format_error(char *buf, size_t n, const char *call, const char *args, const char *lib_text, int code) {
    return snprintf(buf, n, "%s(%s) failed: %s (%d)", call, args ? args : "", lib_text ? lib_text : "unknown error",
                    code);
}
