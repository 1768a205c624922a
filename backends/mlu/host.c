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

/* CNNL_CAST_<from>_TO_<to> entries public code calls (MLU-NOTES C2: torch_mlu, Paddle,
 * DIOPI). Row = from, bit = to. No HALF <-> BFLOAT16 entry exists in any of them. */
#define B(t) (1u << (t))
static const unsigned direct_table[IT_DTYPE_COUNT] = {
    [IT_DTYPE_FP32] = B(IT_DTYPE_FP16) | B(IT_DTYPE_BF16) | B(IT_DTYPE_I32) | B(IT_DTYPE_I16) | B(IT_DTYPE_I8) |
                      B(IT_DTYPE_U8) | B(IT_DTYPE_BOOL) | B(IT_DTYPE_I64) | B(IT_DTYPE_FP64),
    [IT_DTYPE_FP16] = B(IT_DTYPE_FP32) | B(IT_DTYPE_I32) | B(IT_DTYPE_I16) | B(IT_DTYPE_I8) | B(IT_DTYPE_U8) |
                      B(IT_DTYPE_BOOL) | B(IT_DTYPE_I64),
    [IT_DTYPE_BF16] = B(IT_DTYPE_FP32) | B(IT_DTYPE_BOOL),
    [IT_DTYPE_I32] = B(IT_DTYPE_FP32) | B(IT_DTYPE_FP16) | B(IT_DTYPE_BF16) | B(IT_DTYPE_I8) | B(IT_DTYPE_I16) |
                     B(IT_DTYPE_BOOL) | B(IT_DTYPE_U8) | B(IT_DTYPE_I64),
    [IT_DTYPE_I16] = B(IT_DTYPE_FP32) | B(IT_DTYPE_FP16) | B(IT_DTYPE_I32),
    [IT_DTYPE_I8] = B(IT_DTYPE_FP32) | B(IT_DTYPE_FP16) | B(IT_DTYPE_I32) | B(IT_DTYPE_I16),
    [IT_DTYPE_U8] = B(IT_DTYPE_FP32) | B(IT_DTYPE_FP16) | B(IT_DTYPE_I32) | B(IT_DTYPE_I64),
    [IT_DTYPE_BOOL] = B(IT_DTYPE_FP32) | B(IT_DTYPE_FP16) | B(IT_DTYPE_I32) | B(IT_DTYPE_BF16),
    [IT_DTYPE_I64] = B(IT_DTYPE_I32) | B(IT_DTYPE_FP32) | B(IT_DTYPE_FP16),
    [IT_DTYPE_FP64] = B(IT_DTYPE_FP32),
};
#undef B

bool mlu_cast_direct(it_dtype from, it_dtype to) {
    if (!it_dtype_valid((int)from) || !it_dtype_valid((int)to)) return false;
    return (direct_table[from] >> to) & 1u;
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
        if (mlu_cast_direct(via, dst)) {
            cnnl(&b, dst);
        } else {
            if (!mlu_cast_direct(via, IT_DTYPE_FP32)) cnnl(&b, IT_DTYPE_I32); /* not reached */
            cnnl(&b, IT_DTYPE_FP32);
            bool small = via == IT_DTYPE_I8 || via == IT_DTYPE_I16 || via == IT_DTYPE_U8 ||
                         (via == IT_DTYPE_I32 && src == IT_DTYPE_U16);
            if (!small) inexact(&b, "integer -> float64/bfloat16 through float32 rounds twice above 2^24");
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
